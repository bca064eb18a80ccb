/* test_image.c: rn_image_decode over images this test writes with the same
 * libraries (libpng, libjpeg-turbo, libwebp), and hostile bytes: truncated
 * files, headers that claim too many pixels, unsupported and unknown
 * formats. Lossless formats must come back bit-exact; JPEG within 12 levels
 * per channel at quality 95 on flat 8x8-aligned colour blocks (its
 * rounding and chroma subsampling blur only the block edges we skip). */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include <jpeglib.h>
#include <png.h>
#include <webp/encode.h>

#include "services/runner/vision/image.h"
#include "services/runner/vision/image_internal.h"

/* A test pattern: left half red, right half blue, a green bottom-right
 * quarter, so every orientation is distinguishable. */
static uint8_t *pattern(int w, int h)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *px = p + ((size_t)y * w + x) * 3;
            bool right = x >= w / 2, bottom = y >= h / 2;
            px[0] = right ? 0 : 255;
            px[1] = right && bottom ? 255 : 0;
            px[2] = right && !bottom ? 255 : 0;
        }
    return p;
}

static void *write_png(const uint8_t *rgb, int w, int h, bool alpha, size_t *len)
{
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    pi.width = (png_uint_32)w;
    pi.height = (png_uint_32)h;
    pi.format = alpha ? PNG_FORMAT_RGBA : PNG_FORMAT_RGB;
    int c = alpha ? 4 : 3;
    uint8_t *src = malloc((size_t)w * h * c);
    for (size_t i = 0; i < (size_t)w * h; i++) {
        memcpy(src + i * c, rgb + i * 3, 3);
        if (alpha)
            src[i * c + 3] = (uint8_t)(i * 7); /* any alpha: dropped */
    }
    png_alloc_size_t n = 0;
    png_image_write_to_memory(&pi, NULL, &n, 0, src, 0, NULL);
    void *out = malloc(n);
    CHECK(png_image_write_to_memory(&pi, out, &n, 0, src, 0, NULL));
    free(src);
    *len = n;
    return out;
}

/* EXIF APP1 payload with one IFD0 entry: Orientation = o (big-endian). */
static size_t exif_block(uint8_t *b, int o)
{
    static const uint8_t head[] = {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0, 0, 0, 8,
                                   0, 1, /* one entry */
                                   0x01, 0x12, 0, 3, 0, 0, 0, 1};
    memcpy(b, head, sizeof head);
    size_t n = sizeof head;
    b[n++] = 0;
    b[n++] = (uint8_t)o;
    b[n++] = 0;
    b[n++] = 0;
    memset(b + n, 0, 4); /* no next IFD */
    return n + 4;
}

static void *write_jpeg(const uint8_t *rgb, int w, int h, int orientation, bool gray,
                        size_t *len)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr je;
    ci.err = jpeg_std_error(&je);
    jpeg_create_compress(&ci);
    unsigned char *buf = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&ci, &buf, &n);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = gray ? 1 : 3;
    ci.in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 95, TRUE);
    jpeg_start_compress(&ci, TRUE);
    if (orientation) {
        uint8_t ex[64];
        size_t en = exif_block(ex, orientation);
        jpeg_write_marker(&ci, JPEG_APP0 + 1, ex, (unsigned)en);
    }
    uint8_t *row = malloc((size_t)w * 3);
    while (ci.next_scanline < ci.image_height) {
        const uint8_t *src = rgb + (size_t)ci.next_scanline * w * 3;
        if (gray)
            for (int x = 0; x < w; x++)
                row[x] = src[x * 3];
        else
            memcpy(row, src, (size_t)w * 3);
        JSAMPROW r = row;
        jpeg_write_scanlines(&ci, &r, 1);
    }
    free(row);
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    void *out = malloc(n);
    memcpy(out, buf, n);
    free(buf);
    *len = n;
    return out;
}

static void *write_webp(const uint8_t *rgb, int w, int h, size_t *len)
{
    uint8_t *out = NULL;
    *len = WebPEncodeLosslessRGB(rgb, w, h, w * 3, &out);
    CHECK(*len > 0);
    void *copy = malloc(*len);
    memcpy(copy, out, *len);
    WebPFree(out);
    return copy;
}

static bool near_px(const rn_image_t *im, int x, int y, int r, int g, int b)
{
    const uint8_t *p = im->rgb + ((size_t)y * im->width + x) * 3;
    return abs(p[0] - r) <= 12 && abs(p[1] - g) <= 12 && abs(p[2] - b) <= 12;
}

static void test_lossless(void)
{
    int w = 37, h = 21; /* odd sizes: no alignment assumption */
    uint8_t *rgb = pattern(w, h);
    for (int kind = 0; kind < 3; kind++) {
        size_t n;
        void *f = kind == 2 ? write_webp(rgb, w, h, &n) : write_png(rgb, w, h, kind == 1, &n);
        rn_image_t *im = NULL;
        cr_err_t err = {0};
        CHECK_MSG(rn_image_decode(f, n, RN_IMAGE_DEFAULT_MAX_PIXELS, &im, &err) == CR_OK,
                  "kind %d: %s", kind, err.msg);
        if (im) {
            CHECK_EQ_INT(im->width, w);
            CHECK_EQ_INT(im->height, h);
            CHECK_MSG(!memcmp(im->rgb, rgb, (size_t)w * h * 3), "kind %d pixels", kind);
        }
        rn_image_destroy(&im);
        CHECK(im == NULL);
        free(f);
    }
    free(rgb);
}

/* Orientation o of a 32x16 pattern: the displayed size and where the red,
 * blue and green regions land. */
static void test_jpeg_orientation(void)
{
    int w = 32, h = 16;
    uint8_t *rgb = pattern(w, h);
    struct {
        int o, dw, dh;
        int red_x, red_y, blue_x, blue_y, green_x, green_y;
    } cases[] = {
        {0, 32, 16, 4, 4, 28, 4, 28, 12},  /* no EXIF */
        {1, 32, 16, 4, 4, 28, 4, 28, 12},
        {2, 32, 16, 28, 4, 4, 4, 4, 12},   /* mirrored */
        {3, 32, 16, 28, 12, 4, 12, 4, 4},  /* 180 */
        {4, 32, 16, 4, 12, 28, 12, 28, 4}, /* flipped */
        /* 6: 90 clockwise: stored top-left (red) goes top-right */
        {6, 16, 32, 12, 4, 12, 28, 4, 28},
        /* 8: 90 counter-clockwise: stored top-left goes bottom-left */
        {8, 16, 32, 4, 28, 4, 4, 12, 4},
        {5, 16, 32, 4, 4, 4, 28, 12, 28},  /* transpose */
        {7, 16, 32, 12, 28, 12, 4, 4, 4},  /* transverse */
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        size_t n;
        void *f = write_jpeg(rgb, w, h, cases[i].o, false, &n);
        rn_image_t *im = NULL;
        cr_err_t err = {0};
        CHECK_MSG(rn_image_decode(f, n, RN_IMAGE_DEFAULT_MAX_PIXELS, &im, &err) == CR_OK,
                  "orientation %d: %s", cases[i].o, err.msg);
        if (im) {
            CHECK_EQ_INT(im->width, cases[i].dw);
            CHECK_EQ_INT(im->height, cases[i].dh);
            CHECK_MSG(near_px(im, cases[i].red_x, cases[i].red_y, 255, 0, 0),
                      "orientation %d red", cases[i].o);
            CHECK_MSG(near_px(im, cases[i].blue_x, cases[i].blue_y, 0, 0, 255),
                      "orientation %d blue", cases[i].o);
            CHECK_MSG(near_px(im, cases[i].green_x, cases[i].green_y, 0, 255, 0),
                      "orientation %d green", cases[i].o);
        }
        rn_image_destroy(&im);
        free(f);
    }
    /* Grayscale JPEG comes back as RGB with equal channels. */
    size_t n;
    void *f = write_jpeg(rgb, w, h, 0, true, &n);
    rn_image_t *im = NULL;
    CHECK(rn_image_decode(f, n, RN_IMAGE_DEFAULT_MAX_PIXELS, &im, NULL) == CR_OK);
    if (im)
        CHECK(near_px(im, 4, 4, 255, 255, 255) && near_px(im, 28, 4, 0, 0, 0));
    rn_image_destroy(&im);
    free(f);
    free(rgb);
}

static cr_status_t decode_st(const void *d, size_t n, uint64_t max, cr_err_t *err)
{
    rn_image_t *im = NULL;
    cr_status_t st = rn_image_decode(d, n, max, &im, err);
    CHECK((st == CR_OK) == (im != NULL));
    rn_image_destroy(&im);
    return st;
}

static uint32_t crc32_bytes(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void test_hostile(void)
{
    int w = 64, h = 64;
    uint8_t *rgb = pattern(w, h);
    cr_err_t err = {0};
    size_t npng, njpg, nwebp;
    uint8_t *png = write_png(rgb, w, h, false, &npng);
    uint8_t *jpg = write_jpeg(rgb, w, h, 0, false, &njpg);
    uint8_t *webp = write_webp(rgb, w, h, &nwebp);

    /* Over the pixel limit: refused, naming the limit. */
    CHECK(decode_st(png, npng, 4095, &err) == CR_E_TOO_LARGE);
    CHECK(strstr(err.msg, "64x64") && strstr(err.msg, "4095"));
    CHECK(decode_st(jpg, njpg, 4095, &err) == CR_E_TOO_LARGE);
    CHECK(decode_st(webp, nwebp, 4095, &err) == CR_E_TOO_LARGE);
    CHECK(decode_st(png, npng, 4096, &err) == CR_OK);

    /* Bombs: headers claiming huge sizes, with no pixel data behind them,
     * are refused as too large (from the header), not as truncated. */
    uint8_t *bomb = malloc(npng); /* the 64x64 file, its IHDR patched */
    memcpy(bomb, png, npng);
    put32(bomb + 16, 60000);
    put32(bomb + 20, 60000);
    put32(bomb + 29, crc32_bytes(bomb + 12, 17));
    CHECK(decode_st(bomb, npng, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_TOO_LARGE);
    free(bomb);
    CHECK_MSG(strstr(err.msg, "60000x60000") != NULL, "%s", err.msg);
    uint8_t *jb = malloc(njpg);
    memcpy(jb, jpg, njpg);
    for (size_t i = 2; i + 9 < njpg; i++)
        if (jb[i] == 0xff && jb[i + 1] == 0xc0) { /* SOF0: height, width */
            jb[i + 5] = jb[i + 7] = 0xea;
            jb[i + 6] = jb[i + 8] = 0x60; /* 60000 */
            break;
        }
    CHECK(decode_st(jb, njpg, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_TOO_LARGE);
    free(jb);
    uint8_t wb[30];
    memcpy(wb, webp, sizeof wb);
    CHECK(!memcmp(wb + 12, "VP8L", 4));
    wb[21] = 0xff; /* 14-bit width-1 and height-1: 16384 x 16384 */
    wb[22] = 0xff;
    wb[23] = 0xff;
    wb[24] = (uint8_t)((wb[24] & 0xf0) | 0x0f);
    CHECK_MSG(decode_st(wb, sizeof wb, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_TOO_LARGE,
              "%s", err.msg);

    /* Truncated files. */
    CHECK_MSG(decode_st(png, npng - 20, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_TRUNCATED,
              "%s", err.msg);
    CHECK_MSG(decode_st(jpg, njpg / 2, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_TRUNCATED,
              "%s", err.msg);
    CHECK_MSG(decode_st(webp, nwebp / 2, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_TRUNCATED,
              "%s", err.msg);
    CHECK(decode_st(jpg, 3, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) != CR_OK);

    /* Corrupt data after a valid header. */
    uint8_t *bad = malloc(npng);
    memcpy(bad, png, npng);
    uint8_t *idat = memmem(bad, npng, "IDAT", 4); /* its payload, not its length */
    CHECK(idat != NULL);
    if (idat)
        memset(idat + 6, 0x5a, 8);
    CHECK_MSG(decode_st(bad, npng, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_INVALID,
              "%s", err.msg);
    free(bad);

    /* Unknown and unsupported formats. */
    CHECK(decode_st("hello, world", 12, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_INVALID);
    CHECK(strstr(err.msg, "not an image") != NULL);
    CHECK(decode_st("", 0, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_INVALID);
    CHECK(decode_st("GIF89a\1\0\1\0", 10, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_UNSUPPORTED);
    CHECK(strstr(err.msg, "gif") != NULL);
    CHECK(decode_st("BM\0\0\0\0", 6, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_UNSUPPORTED);
    uint8_t noise[512];
    for (size_t i = 0; i < sizeof noise; i++)
        noise[i] = (uint8_t)(i * 131 + 7);
    CHECK(decode_st(noise, sizeof noise, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) == CR_E_INVALID);
    /* Random bytes behind each signature: an error, never a crash. */
    for (int k = 0; k < 3; k++) {
        memcpy(noise, k == 0 ? (const void *)png : k == 1 ? (const void *)jpg : (const void *)webp,
               16);
        CHECK(decode_st(noise, sizeof noise, RN_IMAGE_DEFAULT_MAX_PIXELS, &err) != CR_OK);
    }

    free(png);
    free(jpg);
    free(webp);
    free(rgb);
}

static void test_exif_parser(void)
{
    uint8_t b[64];
    size_t n = exif_block(b, 6);
    CHECK_EQ_INT(rn_image_exif_orientation(b, n), 6);
    for (size_t cut = 0; cut < n; cut++) /* every prefix: no overread */
        CHECK(rn_image_exif_orientation(b, cut) == 1 || cut >= n - 4);
    b[15] = 0xff; /* entry count past the block, no Orientation entry */
    b[16] = 0x99;
    CHECK_EQ_INT(rn_image_exif_orientation(b, n), 1);
    n = exif_block(b, 9); /* out of range */
    CHECK_EQ_INT(rn_image_exif_orientation(b, n), 1);
}

static void test_limit_env(void)
{
    unsetenv("CORRAL_MAX_IMAGE_PIXELS");
    CHECK(rn_image_max_pixels() == 50000000ull);
    setenv("CORRAL_MAX_IMAGE_PIXELS", "1234", 1);
    CHECK(rn_image_max_pixels() == 1234);
    setenv("CORRAL_MAX_IMAGE_PIXELS", "junk", 1);
    CHECK(rn_image_max_pixels() == 50000000ull);
    unsetenv("CORRAL_MAX_IMAGE_PIXELS");
}

int main(void)
{
    test_lossless();
    test_jpeg_orientation();
    test_hostile();
    test_exif_parser();
    test_limit_env();
    return check_finish("image");
}
