/* preprocess.c: Pillow-compatible resampling, letterboxing and
 * normalization (see preprocess.h). */
#include "lib/prelude.h"
#include "services/runner/vision/preprocess.h"

#include <math.h>

#define PRECISION_BITS 22 /* 32 - 8 (pixel) - 2 (headroom): Pillow's */
#define MAX_SIDE 65535

static double filter(rn_preproc_filter_t f, double x)
{
    if (x < 0)
        x = -x;
    if (f == RN_PREPROC_BILINEAR)
        return x < 1.0 ? 1.0 - x : 0.0;
    const double a = -0.5;
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

/* One axis's coefficients: for output pixel i, the first input pixel
 * bounds[2i], their count bounds[2i+1], and ksize fixed-point weights at
 * k[i * ksize]. Caller frees *bounds_out and *k_out. Returns ksize, or 0
 * when out of memory. */
static int coefficients(int in, int out, rn_preproc_filter_t f, int **bounds_out,
                        int32_t **k_out)
{
    double support = f == RN_PREPROC_BILINEAR ? 1.0 : 2.0;
    double scale = (double)in / out, fscale = scale < 1.0 ? 1.0 : scale;
    support *= fscale;
    int ksize = (int)ceil(support) * 2 + 1;
    int *bounds = malloc((size_t)out * 2 * sizeof *bounds);
    int32_t *k = malloc((size_t)out * ksize * sizeof *k);
    double *w = malloc((size_t)ksize * sizeof *w);
    if (!bounds || !k || !w) {
        free(bounds);
        free(k);
        free(w);
        return 0;
    }
    for (int i = 0; i < out; i++) {
        double center = (i + 0.5) * scale, ss = 1.0 / fscale, sum = 0;
        int lo = (int)(center - support + 0.5);
        if (lo < 0)
            lo = 0;
        int hi = (int)(center + support + 0.5);
        if (hi > in)
            hi = in;
        int n = hi - lo;
        for (int j = 0; j < n; j++) {
            w[j] = filter(f, (j + lo - center + 0.5) * ss);
            sum += w[j];
        }
        for (int j = 0; j < ksize; j++) {
            double v = j < n && sum != 0.0 ? w[j] / sum : 0.0;
            /* Pillow adds +-0.5 and truncates (not round-half-even). */
            k[(size_t)i * ksize + j] =
                (int32_t)(v * (double)(1 << PRECISION_BITS) + (v < 0 ? -0.5 : 0.5));
        }
        bounds[2 * i] = lo;
        bounds[2 * i + 1] = n;
    }
    free(w);
    *bounds_out = bounds;
    *k_out = k;
    return ksize;
}

static uint8_t clip8(int32_t v)
{
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* dst [h][out_w][3] = src [h][in_w][3] resampled along x. */
static void pass_x(const uint8_t *src, int in_w, int h, uint8_t *dst, int out_w,
                   int ksize, const int *bounds, const int32_t *k)
{
    for (int y = 0; y < h; y++) {
        const uint8_t *row = src + (size_t)y * in_w * 3;
        uint8_t *o = dst + (size_t)y * out_w * 3;
        for (int x = 0; x < out_w; x++) {
            const int32_t *kk = k + (size_t)x * ksize;
            const uint8_t *p = row + (size_t)bounds[2 * x] * 3;
            int32_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
            for (int j = 0; j < bounds[2 * x + 1]; j++, p += 3) {
                s0 += p[0] * kk[j];
                s1 += p[1] * kk[j];
                s2 += p[2] * kk[j];
            }
            o[3 * x] = clip8(s0);
            o[3 * x + 1] = clip8(s1);
            o[3 * x + 2] = clip8(s2);
        }
    }
}

/* dst [out_h][w][3] = src [in_h][w][3] resampled along y. */
static void pass_y(const uint8_t *src, int w, uint8_t *dst, int out_h, int ksize,
                   const int *bounds, const int32_t *k)
{
    size_t row = (size_t)w * 3;
    for (int y = 0; y < out_h; y++) {
        const int32_t *kk = k + (size_t)y * ksize;
        uint8_t *o = dst + (size_t)y * row;
        for (size_t i = 0; i < row; i++) {
            int32_t s = 1 << (PRECISION_BITS - 1);
            for (int j = 0; j < bounds[2 * y + 1]; j++)
                s += src[(size_t)(bounds[2 * y] + j) * row + i] * kk[j];
            o[i] = clip8(s);
        }
    }
}

cr_status_t rn_preproc_resize(const rn_image_t *src, int w, int h, rn_preproc_filter_t f,
                              rn_image_t **out, cr_err_t *err)
{
    *out = NULL;
    if (w < 1 || h < 1 || w > MAX_SIDE || h > MAX_SIDE)
        return cr_err_set(err, CR_E_INVALID, "resize target %dx%d is out of range", w, h);
    rn_image_t *dst = rn_image_new(w, h);
    if (!dst)
        return cr_err_set(err, CR_E_NOMEM, "out of memory resizing to %dx%d", w, h);
    if (w == src->width && h == src->height) {
        memcpy(dst->rgb, src->rgb, (size_t)w * h * 3);
        *out = dst;
        return CR_OK;
    }
    int *bx = NULL, *by = NULL;
    int32_t *kx = NULL, *ky = NULL;
    uint8_t *tmp = NULL;
    bool nx = w != src->width, ny = h != src->height;
    int ksx = nx ? coefficients(src->width, w, f, &bx, &kx) : 1;
    int ksy = ny ? coefficients(src->height, h, f, &by, &ky) : 1;
    if (nx && ny)
        tmp = malloc((size_t)w * src->height * 3);
    if (!ksx || !ksy || (nx && ny && !tmp)) {
        free(bx), free(by), free(kx), free(ky), free(tmp);
        rn_image_destroy(&dst);
        return cr_err_set(err, CR_E_NOMEM, "out of memory resizing to %dx%d", w, h);
    }
    if (nx && ny) {
        pass_x(src->rgb, src->width, src->height, tmp, w, ksx, bx, kx);
        pass_y(tmp, w, dst->rgb, h, ksy, by, ky);
    } else if (nx) {
        pass_x(src->rgb, src->width, src->height, dst->rgb, w, ksx, bx, kx);
    } else {
        pass_y(src->rgb, w, dst->rgb, h, ksy, by, ky);
    }
    free(bx), free(by), free(kx), free(ky), free(tmp);
    *out = dst;
    return CR_OK;
}

cr_status_t rn_preproc_fit(const rn_image_t *src, int w, int h, const uint8_t pad[3],
                           rn_preproc_filter_t f, rn_image_t **out, cr_err_t *err)
{
    *out = NULL;
    if (src->width == w && src->height == h)
        return rn_preproc_resize(src, w, h, f, out, err);
    /* In float, as the reference computes it: a different rounding of the
     * scale can move a side by one pixel. */
    float sw = (float)w / (float)src->width, sh = (float)h / (float)src->height;
    float s = sw < sh ? sw : sh;
    int nw = CR_MIN((int)ceilf((float)src->width * s), w);
    int nh = CR_MIN((int)ceilf((float)src->height * s), h);
    rn_image_t *fit = NULL;
    cr_status_t st = rn_preproc_resize(src, CR_MAX(nw, 1), CR_MAX(nh, 1), f, &fit, err);
    if (st)
        return st;
    rn_image_t *canvas = rn_image_new(w, h);
    if (!canvas) {
        rn_image_destroy(&fit);
        return cr_err_set(err, CR_E_NOMEM, "out of memory padding to %dx%d", w, h);
    }
    for (size_t i = 0; i < (size_t)w * h; i++)
        memcpy(canvas->rgb + 3 * i, pad, 3);
    int ox = (w - fit->width) / 2, oy = (h - fit->height) / 2;
    for (int y = 0; y < fit->height; y++)
        memcpy(canvas->rgb + ((size_t)(y + oy) * w + ox) * 3,
               fit->rgb + (size_t)y * fit->width * 3, (size_t)fit->width * 3);
    rn_image_destroy(&fit);
    *out = canvas;
    return CR_OK;
}

cr_status_t rn_preproc_fit_square(const rn_image_t *src, int size, const uint8_t pad[3],
                                  rn_preproc_filter_t f, rn_image_t **out, cr_err_t *err)
{
    return rn_preproc_fit(src, size, size, pad, f, out, err);
}

void rn_preproc_normalize(const rn_image_t *im, const float mean[3], const float std[3],
                          float *out)
{
    size_t n = (size_t)im->width * im->height;
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < n; i++)
            out[c * n + i] = ((float)im->rgb[3 * i + c] / 255.0f - mean[c]) / std[c];
}
