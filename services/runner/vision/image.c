/* image.c: format sniffing, the pixel limit, and the PNG and WebP decoders
 * (image_jpeg.c has JPEG and its EXIF orientation). See image.h. */
#include "lib/prelude.h"
#include "services/runner/vision/image.h"

#include <png.h>
#include <webp/decode.h>

#include "lib/env.h"
#include "services/runner/vision/image_internal.h"

uint64_t rn_image_max_pixels(void)
{
    long long v = cr_env_int("MAX_IMAGE_PIXELS", 0);
    return v > 0 ? (uint64_t)v : RN_IMAGE_DEFAULT_MAX_PIXELS;
}

rn_image_t *rn_image_new(int width, int height)
{
    if (width < 1 || height < 1 || width > RN_IMAGE_MAX_SIDE || height > RN_IMAGE_MAX_SIDE)
        return NULL;
    rn_image_t *im = calloc(1, sizeof *im);
    if (!im)
        return NULL;
    im->width = width;
    im->height = height;
    im->rgb = calloc((size_t)width * (size_t)height, 3);
    if (!im->rgb) {
        free(im);
        return NULL;
    }
    return im;
}

void rn_image_destroy(rn_image_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->rgb);
    free(*self_p);
    *self_p = NULL;
}

cr_status_t rn_image_check_size(uint64_t w, uint64_t h, uint64_t max_pixels, cr_err_t *err)
{
    if (w < 1 || h < 1)
        return cr_err_set(err, CR_E_INVALID, "invalid image: %" PRIu64 "x%" PRIu64 " pixels",
                          w, h);
    if (w * h > max_pixels)
        return cr_err_set(err, CR_E_TOO_LARGE, "image is %" PRIu64 "x%" PRIu64 " pixels, "
                          "more than the limit of %" PRIu64 " (CORRAL_MAX_IMAGE_PIXELS)",
                          w, h, max_pixels);
    if (w > RN_IMAGE_MAX_SIDE || h > RN_IMAGE_MAX_SIDE)
        return cr_err_set(err, CR_E_TOO_LARGE, "image is %" PRIu64 "x%" PRIu64 " pixels: "
                          "a side is longer than %d", w, h, RN_IMAGE_MAX_SIDE);
    return CR_OK;
}

/* ---- PNG (libpng's simplified API) ---- */

static cr_status_t png_failed(png_image *pi, cr_err_t *err)
{
    /* libpng reports a short buffer as "read beyond end of data". */
    bool short_data = strstr(pi->message, "end of data") || strstr(pi->message, "EOF");
    cr_status_t st = short_data ? CR_E_TRUNCATED : CR_E_INVALID;
    cr_err_set(err, st, "%s PNG image: %s", short_data ? "truncated" : "invalid",
               pi->message);
    png_image_free(pi);
    return st;
}

static cr_status_t decode_png(const void *data, size_t len, uint64_t max_pixels,
                              rn_image_t **out, cr_err_t *err)
{
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&pi, data, len))
        return png_failed(&pi, err);
    cr_status_t st = rn_image_check_size(pi.width, pi.height, max_pixels, err);
    if (st) {
        png_image_free(&pi);
        return st;
    }
    /* RGBA then drop alpha: the colour channels as stored, not composited
     * onto a background (what llama.cpp's loader gives the model). */
    pi.format = PNG_FORMAT_RGBA;
    size_t n = (size_t)pi.width * pi.height;
    uint8_t *rgba = malloc(n * 4);
    rn_image_t *im = rn_image_new((int)pi.width, (int)pi.height);
    if (!rgba || !im) {
        free(rgba);
        rn_image_destroy(&im);
        png_image_free(&pi);
        return cr_err_set(err, CR_E_NOMEM, "out of memory decoding a %ux%u image",
                          pi.width, pi.height);
    }
    if (!png_image_finish_read(&pi, NULL, rgba, 0, NULL)) {
        free(rgba);
        rn_image_destroy(&im);
        return png_failed(&pi, err);
    }
    for (size_t i = 0; i < n; i++)
        memcpy(im->rgb + 3 * i, rgba + 4 * i, 3);
    free(rgba);
    png_image_free(&pi);
    *out = im;
    return CR_OK;
}

/* ---- WebP ---- */

static cr_status_t webp_failed(VP8StatusCode s, cr_err_t *err)
{
    switch (s) {
    case VP8_STATUS_NOT_ENOUGH_DATA:
        return cr_err_set(err, CR_E_TRUNCATED, "truncated WebP image");
    case VP8_STATUS_UNSUPPORTED_FEATURE:
        return cr_err_set(err, CR_E_UNSUPPORTED, "unsupported image format (a WebP "
                          "feature libwebp's still-image decoder does not take, e.g. "
                          "animation)");
    case VP8_STATUS_OUT_OF_MEMORY:
        return cr_err_set(err, CR_E_NOMEM, "out of memory decoding a WebP image");
    default:
        return cr_err_set(err, CR_E_INVALID, "invalid WebP image (libwebp status %d)",
                          (int)s);
    }
}

static cr_status_t decode_webp(const void *data, size_t len, uint64_t max_pixels,
                               rn_image_t **out, cr_err_t *err)
{
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return cr_err_set(err, CR_E_INTERNAL, "libwebp version mismatch");
    VP8StatusCode s = WebPGetFeatures(data, len, &cfg.input);
    if (s != VP8_STATUS_OK)
        return webp_failed(s, err);
    if (cfg.input.has_animation)
        return webp_failed(VP8_STATUS_UNSUPPORTED_FEATURE, err);
    cr_status_t st = rn_image_check_size((uint64_t)cfg.input.width,
                                         (uint64_t)cfg.input.height, max_pixels, err);
    if (st)
        return st;
    rn_image_t *im = rn_image_new(cfg.input.width, cfg.input.height);
    if (!im)
        return cr_err_set(err, CR_E_NOMEM, "out of memory decoding a %dx%d image",
                          cfg.input.width, cfg.input.height);
    /* Decode straight into our buffer (libwebp allocates nothing). */
    cfg.output.colorspace = MODE_RGB;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = im->rgb;
    cfg.output.u.RGBA.stride = im->width * 3;
    cfg.output.u.RGBA.size = (size_t)im->width * (size_t)im->height * 3;
    s = WebPDecode(data, len, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (s != VP8_STATUS_OK) {
        rn_image_destroy(&im);
        return webp_failed(s, err);
    }
    *out = im;
    return CR_OK;
}

/* ---- sniffing ---- */

static bool starts(const uint8_t *p, size_t len, const char *sig, size_t n)
{
    return len >= n && !memcmp(p, sig, n);
}

cr_status_t rn_image_decode(const void *data, size_t len, uint64_t max_pixels,
                            rn_image_t **out, cr_err_t *err)
{
    const uint8_t *p = data;
    *out = NULL;
    if (!p || !len)
        return cr_err_set(err, CR_E_INVALID, "not an image: no data");
    if (starts(p, len, "\xff\xd8\xff", 3))
        return rn_image_decode_jpeg(data, len, max_pixels, out, err);
    if (starts(p, len, "\x89PNG\r\n\x1a\n", 8))
        return decode_png(data, len, max_pixels, out, err);
    if (starts(p, len, "RIFF", 4) && len >= 12 && !memcmp(p + 8, "WEBP", 4))
        return decode_webp(data, len, max_pixels, out, err);
    static const struct {
        const char *sig;
        size_t n;
        const char *name;
    } other[] = {
        {"GIF87a", 6, "gif"}, {"GIF89a", 6, "gif"}, {"BM", 2, "bmp"},
        {"II*\0", 4, "tiff"}, {"MM\0*", 4, "tiff"}, {"\0\0\1\0", 4, "ico"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(other); i++)
        if (starts(p, len, other[i].sig, other[i].n))
            return cr_err_set(err, CR_E_UNSUPPORTED, "unsupported image format (%s): "
                              "send JPEG, PNG or WebP", other[i].name);
    if (len >= 12 && !memcmp(p + 4, "ftyp", 4))
        return cr_err_set(err, CR_E_UNSUPPORTED, "unsupported image format (heif/avif): "
                          "send JPEG, PNG or WebP");
    return cr_err_set(err, CR_E_INVALID, "not an image: the data is not JPEG, PNG or WebP");
}
