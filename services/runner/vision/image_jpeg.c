/* image_jpeg.c: JPEG through libjpeg-turbo, with EXIF orientation.
 *
 * libjpeg reports fatal errors through error_exit, which must not return:
 * ours longjmps back to decode_jpeg. A file that ends early is only a
 * warning to libjpeg (it pads with grey); we count it and refuse the
 * image as truncated. */
#include "lib/prelude.h"

#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>

#include "services/runner/vision/image_internal.h"

typedef struct jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    bool truncated;
    char msg[JMSG_LENGTH_MAX];
} jerr_t;

static void on_error(j_common_ptr ci)
{
    jerr_t *je = (jerr_t *)ci->err;
    ci->err->format_message(ci, je->msg);
    longjmp(je->jump, 1);
}

static void on_message(j_common_ptr ci, int level)
{
    jerr_t *je = (jerr_t *)ci->err;
    /* level -1: a warning; JWRN_JPEG_EOF is the data ending early, and
     * corrupt-data warnings past it follow from the same cause. */
    if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF)
        je->truncated = true;
}

/* ---- EXIF ---- */

static uint32_t rd(const uint8_t *p, int n, bool le)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint32_t)p[le ? i : n - 1 - i] << (8 * i);
    return v;
}

int rn_image_exif_orientation(const uint8_t *p, size_t len)
{
    if (len < 14 || memcmp(p, "Exif\0\0", 6))
        return 1;
    const uint8_t *t = p + 6; /* TIFF header */
    size_t tn = len - 6;
    bool le;
    if (!memcmp(t, "II*\0", 4))
        le = true;
    else if (!memcmp(t, "MM\0*", 4))
        le = false;
    else
        return 1;
    uint32_t ifd = rd(t + 4, 4, le);
    if (ifd > tn || tn - ifd < 2)
        return 1;
    uint32_t n = rd(t + ifd, 2, le);
    for (uint32_t i = 0; i < n; i++) {
        size_t e = (size_t)ifd + 2 + (size_t)i * 12;
        if (e > tn || tn - e < 12)
            return 1;
        if (rd(t + e, 2, le) != 0x0112) /* Orientation */
            continue;
        if (rd(t + e + 2, 2, le) != 3 || rd(t + e + 4, 4, le) != 1) /* one SHORT */
            return 1;
        uint32_t o = rd(t + e + 8, 2, le);
        return o >= 1 && o <= 8 ? (int)o : 1;
    }
    return 1;
}

cr_status_t rn_image_orient(rn_image_t **imp, int o, cr_err_t *err)
{
    rn_image_t *s = *imp;
    if (o < 2 || o > 8)
        return CR_OK;
    int W = s->width, H = s->height;
    bool swap = o >= 5;
    rn_image_t *d = swap ? rn_image_new(H, W) : rn_image_new(W, H);
    if (!d)
        return cr_err_set(err, CR_E_NOMEM, "out of memory orienting a %dx%d image", W, H);
    /* For each displayed pixel (X, Y), the stored pixel (x, y) it shows. */
    for (int Y = 0; Y < d->height; Y++) {
        for (int X = 0; X < d->width; X++) {
            int x, y;
            switch (o) {
            case 2: x = W - 1 - X; y = Y; break;           /* mirror */
            case 3: x = W - 1 - X; y = H - 1 - Y; break;   /* 180 */
            case 4: x = X; y = H - 1 - Y; break;           /* flip */
            case 5: x = Y; y = X; break;                   /* transpose */
            case 6: x = Y; y = H - 1 - X; break;           /* 90 clockwise */
            case 7: x = W - 1 - Y; y = H - 1 - X; break;   /* transverse */
            default: x = W - 1 - Y; y = X; break;          /* 8: 90 counter */
            }
            memcpy(d->rgb + ((size_t)Y * d->width + X) * 3,
                   s->rgb + ((size_t)y * W + x) * 3, 3);
        }
    }
    rn_image_destroy(imp);
    *imp = d;
    return CR_OK;
}

/* ---- decoding ---- */

cr_status_t rn_image_decode_jpeg(const void *data, size_t len, uint64_t max_pixels,
                                 rn_image_t **out, cr_err_t *err)
{
    struct jpeg_decompress_struct ci;
    jerr_t je;
    rn_image_t *volatile im = NULL;
    volatile cr_status_t st = CR_OK;

    memset(&je, 0, sizeof je);
    ci.err = jpeg_std_error(&je.pub);
    je.pub.error_exit = on_error;
    je.pub.emit_message = on_message;
    if (setjmp(je.jump)) {
        rn_image_t *tmp = im;
        rn_image_destroy(&tmp);
        jpeg_destroy_decompress(&ci);
        if (st)
            return st; /* set before the jump (size check) */
        if (je.truncated || strstr(je.msg, "end of"))
            return cr_err_set(err, CR_E_TRUNCATED, "truncated JPEG image: %s", je.msg);
        return cr_err_set(err, CR_E_INVALID, "invalid JPEG image: %s", je.msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, data, (unsigned long)len);
    jpeg_save_markers(&ci, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&ci, TRUE);

    int orientation = 1;
    for (jpeg_saved_marker_ptr m = ci.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && orientation == 1)
            orientation = rn_image_exif_orientation(m->data, m->data_length);

    cr_status_t cs = rn_image_check_size(ci.image_width, ci.image_height, max_pixels, err);
    if (cs)
        goto fail;
    if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
        cs = cr_err_set(err, CR_E_UNSUPPORTED, "unsupported image format (CMYK JPEG)");
        goto fail;
    }
    ci.out_color_space = JCS_RGB;
    jpeg_start_decompress(&ci);
    if (ci.output_components != 3) {
        cs = cr_err_set(err, CR_E_UNSUPPORTED, "unsupported JPEG: %d output components",
                        ci.output_components);
        goto fail;
    }
    im = rn_image_new((int)ci.output_width, (int)ci.output_height);
    if (!im) {
        cs = cr_err_set(err, CR_E_NOMEM, "out of memory decoding a %ux%u image",
                        ci.output_width, ci.output_height);
        goto fail;
    }
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = im->rgb + (size_t)ci.output_scanline * im->width * 3;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    if (je.truncated) {
        cs = cr_err_set(err, CR_E_TRUNCATED, "truncated JPEG image: the data ends "
                        "before the last scanline");
        goto fail;
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    rn_image_t *done = im;
    cs = rn_image_orient(&done, orientation, err);
    if (cs) {
        rn_image_destroy(&done);
        return cs;
    }
    *out = done;
    return CR_OK;

fail:
    st = cs;
    {
        rn_image_t *tmp = im;
        rn_image_destroy(&tmp);
    }
    jpeg_destroy_decompress(&ci);
    return st;
}
