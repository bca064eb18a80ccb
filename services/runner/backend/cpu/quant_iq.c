/* quant_iq.c: the 2- and 3-bit I-quants (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
 * IQ3_S), scalar reference kernels: dequantize, quantize, and the dot
 * product with Q8_K activations. Every kernel reads a block through its
 * type's sub-block decoder (quant_iq.h), so the five types differ only
 * there and in the packer below. The grids are in quant_iq_grid.c, the
 * SIMD dot products in quant_iq_avx2.c and quant_iq_avx512.c.
 *
 * The quantizers serve tests and synthetic models. They are a plain search,
 * not ggml's importance-weighted one: per scale group a few trial scales,
 * each refitted by least squares, and per group of 8 the grid point
 * near the element magnitudes (quant_iq_search.c), signs taken from the
 * elements (for the even-parity types the smallest element of an odd group
 * gets the wrong sign). Every block they write is valid; the error is
 * what a 2- or 3-bit grid allows, not the best achievable. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_impl.h"
#include "services/runner/backend/cpu/quant_iq.h"

#include <math.h>

typedef void (*sub_fn)(const be_iq_grids_t *g, const void *block, int ib, be_iq_sub_t *o);

/* One type: its block size, step unit, decoder. */
typedef struct iq_kind {
    size_t block_bytes;
    float unit;        /* value = d * unit * mul * grid * sign */
    sub_fn sub;
} iq_kind_t;

static void sub_iq2_xxs(const be_iq_grids_t *g, const void *b, int ib, be_iq_sub_t *o)
{
    be_iq2_xxs_sub(g, b, ib, o);
}
static void sub_iq2_xs(const be_iq_grids_t *g, const void *b, int ib, be_iq_sub_t *o)
{
    be_iq2_xs_sub(g, b, ib, o);
}
static void sub_iq2_s(const be_iq_grids_t *g, const void *b, int ib, be_iq_sub_t *o)
{
    be_iq2_s_sub(g, b, ib, o);
}
static void sub_iq3_xxs(const be_iq_grids_t *g, const void *b, int ib, be_iq_sub_t *o)
{
    be_iq3_xxs_sub(g, b, ib, o);
}
static void sub_iq3_s(const be_iq_grids_t *g, const void *b, int ib, be_iq_sub_t *o)
{
    be_iq3_s_sub(g, b, ib, o);
}

static const iq_kind_t kind_iq2_xxs = {sizeof(be_block_iq2_xxs_t), 0.125f, sub_iq2_xxs};
static const iq_kind_t kind_iq2_xs = {sizeof(be_block_iq2_xs_t), 0.125f, sub_iq2_xs};
static const iq_kind_t kind_iq2_s = {sizeof(be_block_iq2_s_t), 0.125f, sub_iq2_s};
static const iq_kind_t kind_iq3_xxs = {sizeof(be_block_iq3_xxs_t), 0.25f, sub_iq3_xxs};
static const iq_kind_t kind_iq3_s = {sizeof(be_block_iq3_s_t), 1.0f, sub_iq3_s};

static inline int sub_byte(const be_iq_sub_t *s, int j)
{
    return (int)((s->grid[j / 8] >> (8 * (j % 8))) & 255);
}

/* ---- dequantize and dot (shared by the five types) --------------------- */

/* The super-scale: every block begins with its f16 d. */
static float block_d(const uint8_t *b)
{
    uint16_t d;
    memcpy(&d, b, 2);
    return be_f16_to_f32(d);
}

/* y = (d * mul) * unit * grid, then the sign: ggml's float steps (its
 * d * (0.5 + ls) * 0.25 differs from d * (2 ls + 1) * 0.125 only by exact
 * powers of two), so the values are ggml's bits. */
static void iq_to_float(const iq_kind_t *k, const void *x, float *y, int64_t n)
{
    const be_iq_grids_t *g = be_iq_grids();
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const uint8_t *b = (const uint8_t *)x + (size_t)i * k->block_bytes;
        float d = block_d(b);
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            be_iq_sub_t s;
            k->sub(g, b, ib, &s);
            float *o = y + i * BE_QK_K + 32 * ib;
            for (int j = 0; j < 32; j++) {
                float db = d * (float)s.mul[j / 16] * k->unit;
                float v = db * (float)sub_byte(&s, j);
                o[j] = (s.signs >> j) & 1 ? -v : v;
            }
        }
    }
}

/* Integer sum per super-block (at most 8 x 32 x 62 x 128 x 31 in
 * magnitude, inside int32), one float multiply per super-block, the unit
 * (a power of two, exact) at the end: the SIMD kernels take the same
 * steps, so all give the same bits. */
static void iq_dot(const iq_kind_t *k, int64_t n, float *s, const void *w, const void *a)
{
    const be_iq_grids_t *g = be_iq_grids();
    const be_block_q8_k_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const uint8_t *b = (const uint8_t *)w + (size_t)i * k->block_bytes;
        int32_t isum = 0;
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            be_iq_sub_t sb;
            k->sub(g, b, ib, &sb);
            const int8_t *q = y[i].qs + 32 * ib;
            for (int h = 0; h < 2; h++) {
                int32_t part = 0;
                for (int j = 16 * h; j < 16 * h + 16; j++) {
                    int32_t p = sub_byte(&sb, j) * (int32_t)q[j];
                    part += (sb.signs >> j) & 1 ? -p : p;
                }
                isum += sb.mul[h] * part;
            }
        }
        sum += (block_d(b) * y[i].d) * (float)isum;
    }
    *s = sum * k->unit;
}

/* ---- quantizer ---------------------------------------------------------- */

/* A grid for the search. */
typedef struct search_grid {
    int dim;
    bool parity;           /* 7 stored sign bits, even count */
    bool scale16;          /* a scale per 16 elements (else per 32) */
    const be_iq_search_t *search;
} search_grid_t;

enum { SG_IQ2_XXS, SG_IQ2_XS, SG_IQ2_S, SG_IQ3_XXS, SG_IQ3_S, SG_COUNT };

static search_grid_t search_grid(int id)
{
    static const struct {
        int dim;
        bool parity, scale16;
    } shape[SG_COUNT] = {{8, true, false}, {8, true, true}, {8, false, true}, {4, true, false},
                         {4, false, false}};
    /* SG ids are be_iq_grid_defs' order */
    return (search_grid_t){shape[id].dim, shape[id].parity, shape[id].scale16, be_iq_search(id)};
}

/* Signs of x[0..8): bit c set for a negative element; with parity, an odd
 * count flips the smallest magnitude's bit. */
static unsigned group_signs(const float *x, bool parity)
{
    unsigned s = 0;
    int small = 0;
    for (int c = 0; c < 8; c++) {
        if (x[c] < 0)
            s |= 1u << c;
        if (fabsf(x[c]) < fabsf(x[small]))
            small = c;
    }
    if (parity && (__builtin_popcount(s) & 1))
        s ^= 1u << small;
    return s;
}

/* Quantizes n (16 or 32) elements x under step s: per group of 8, its sign
 * byte and 8 / dim point indices (idx, signs written from index 0); the
 * values chosen into v (signed, in steps). */
static void quant_run(const search_grid_t *sg, const float *x, int n, float s, int *idx,
                      unsigned *signs, float *v)
{
    float inv = s > 0 ? 1.0f / s : 0.0f;
    int per = 8 / sg->dim;
    for (int gi = 0; gi < n / 8; gi++) {
        const float *xg = x + 8 * gi;
        unsigned sg8 = group_signs(xg, sg->parity);
        signs[gi] = sg8;
        float t[8];
        for (int c = 0; c < 8; c++) {
            float m = fabsf(xg[c]) * inv;
            /* a wrong-signed element wants the smallest coordinate */
            t[c] = ((sg8 >> c) & 1) == (xg[c] < 0) ? m : -m;
        }
        for (int k = 0; k < per; k++) {
            int p = be_iq_search_nearest(sg->search, t + k * sg->dim);
            idx[gi * per + k] = p;
            const float *pt = be_iq_search_point(sg->search, p);
            for (int c = 0; c < sg->dim; c++) {
                float f = pt[c];
                v[8 * gi + k * sg->dim + c] = (sg8 >> (k * sg->dim + c)) & 1 ? -f : f;
            }
        }
    }
}

/* Squared error of x against s * v. */
static double sq_err(const float *x, const float *v, int n, double s)
{
    double e = 0;
    for (int j = 0; j < n; j++) {
        double r = x[j] - s * v[j];
        e += r * r;
    }
    return e;
}

/* Best float step for x[0..n): trial steps putting the largest magnitude
 * at 0.6 .. 1.2 of the grid's largest coordinate, each refitted by least
 * squares for the points it chose; the lowest error wins. 0 for zeros. */
static float fit_step(const search_grid_t *sg, const float *x, int n, float gmax)
{
    float amax = 0;
    for (int j = 0; j < n; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    if (amax == 0 || !isfinite(amax))
        return amax;
    float best_s = amax / gmax;
    double best_e = INFINITY;
    int idx[8];
    unsigned signs[4];
    float v[32];
    for (int k = 0; k < 5; k++) {
        float s = amax / gmax / (0.6f + 0.15f * (float)k);
        quant_run(sg, x, n, s, idx, signs, v);
        double sxv = 0, svv = 0;
        for (int j = 0; j < n; j++) {
            sxv += (double)x[j] * v[j];
            svv += (double)v[j] * v[j];
        }
        double fit = svv > 0 && sxv > 0 ? sxv / svv : s;
        double e = sq_err(x, v, n, fit);
        if (e < best_e) {
            best_e = e;
            best_s = (float)fit;
        }
    }
    return best_s;
}

/* What a quantized sub-block holds before packing. */
typedef struct iq_plan {
    int idx[8];         /* point indices (4 used for 8-coordinate grids) */
    unsigned signs[4];  /* 8 sign bits per group (even count with parity) */
    int ls[2];          /* 4-bit scales of elements 0..15, 16..31 */
} iq_plan_t;

typedef void (*pack_fn)(void *block, int ib, const iq_plan_t *p);

static uint16_t f16_saturate(float s)
{
    if (!(s == s))
        return 0;
    return be_f32_to_f16(fminf(fmaxf(s, -65504.0f), 65504.0f));
}

static void iq_from_float(const iq_kind_t *k, int sg_id, float gmax, pack_fn pack, const float *x,
                          void *y, int64_t n)
{
    search_grid_t sgv = search_grid(sg_id);
    const search_grid_t *sg = &sgv;
    int span = sg->scale16 ? 16 : 32;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const float *xb = x + i * BE_QK_K;
        uint8_t *b = (uint8_t *)y + (size_t)i * k->block_bytes;
        float steps[16], smax = 0;
        for (int h = 0; h < BE_QK_K / span; h++) {
            steps[h] = fit_step(sg, xb + span * h, span, gmax);
            smax = steps[h] > smax ? steps[h] : smax;
        }
        memset(b, 0, k->block_bytes);
        /* the largest step is ls = 15 (mul 31) */
        uint16_t d16 = f16_saturate(smax / (31.0f * k->unit));
        memcpy(b, &d16, 2);
        float d = be_f16_to_f32(d16);
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            iq_plan_t p;
            float v[32];
            for (int h = 0; h < 2; h++) {
                float st = steps[sg->scale16 ? 2 * ib + h : ib];
                int ls = d > 0 ? be_round_clamp((st / (d * k->unit) - 1) / 2, 0, 15) : 0;
                p.ls[h] = ls;
            }
            for (int h = 0; h < 32 / span; h++) {
                float s = d * (float)(2 * p.ls[h] + 1) * k->unit;
                int per = span / 8 * (8 / sg->dim);
                quant_run(sg, xb + 32 * ib + span * h, span, s, p.idx + h * per,
                          p.signs + h * (span / 8), v);
            }
            pack(b, ib, &p);
        }
    }
}

/* ---- packers (layouts in quant.h) -------------------------------------- */

static uint32_t signs7x4_ls(const iq_plan_t *p)
{
    return (p->signs[0] & 127) | (p->signs[1] & 127) << 7 | (p->signs[2] & 127) << 14 |
           (p->signs[3] & 127) << 21 | (uint32_t)p->ls[0] << 28;
}

static void pack_iq2_xxs(void *block, int ib, const iq_plan_t *p)
{
    be_block_iq2_xxs_t *b = block;
    uint8_t *q = (uint8_t *)b->qs + 8 * ib;
    for (int l = 0; l < 4; l++)
        q[l] = (uint8_t)p->idx[l];
    uint32_t u = signs7x4_ls(p);
    memcpy(q + 4, &u, 4);
}

static void pack_iq2_xs(void *block, int ib, const iq_plan_t *p)
{
    be_block_iq2_xs_t *b = block;
    for (int l = 0; l < 4; l++)
        b->qs[4 * ib + l] = (uint16_t)(p->idx[l] | (p->signs[l] & 127) << 9);
    b->scales[ib] = (uint8_t)(p->ls[0] | p->ls[1] << 4);
}

static void pack_iq2_s(void *block, int ib, const iq_plan_t *p)
{
    be_block_iq2_s_t *b = block;
    for (int l = 0; l < 4; l++) {
        b->qs[4 * ib + l] = (uint8_t)(p->idx[l] & 255);
        b->qh[ib] |= (uint8_t)((p->idx[l] >> 8) << (2 * l));
        b->qs[BE_QK_K / 8 + 4 * ib + l] = (uint8_t)p->signs[l];
    }
    b->scales[ib] = (uint8_t)(p->ls[0] | p->ls[1] << 4);
}

static void pack_iq3_xxs(void *block, int ib, const iq_plan_t *p)
{
    be_block_iq3_xxs_t *b = block;
    for (int k = 0; k < 8; k++)
        b->qs[8 * ib + k] = (uint8_t)p->idx[k];
    uint32_t u = signs7x4_ls(p);
    memcpy(b->qs + BE_QK_K / 4 + 4 * ib, &u, 4);
}

static void pack_iq3_s(void *block, int ib, const iq_plan_t *p)
{
    be_block_iq3_s_t *b = block;
    for (int k = 0; k < 8; k++) {
        b->qs[8 * ib + k] = (uint8_t)(p->idx[k] & 255);
        b->qh[ib] |= (uint8_t)((p->idx[k] >> 8) << k);
    }
    for (int l = 0; l < 4; l++)
        b->signs[4 * ib + l] = (uint8_t)p->signs[l];
    b->scales[ib / 2] |= (uint8_t)(p->ls[0] << (4 * (ib % 2)));
}

/* ---- the traits' entry points ------------------------------------------ */

#define IQ_ENTRY(name, kind, sg_id, gmax)                                          \
    void be_##name##_to_float(const void *x, float *y, int64_t n)                  \
    {                                                                              \
        iq_to_float(&kind, x, y, n);                                               \
    }                                                                              \
    void be_##name##_from_float(const float *x, void *y, int64_t n)                \
    {                                                                              \
        iq_from_float(&kind, sg_id, gmax, pack_##name, x, y, n);                   \
    }                                                                              \
    void be_##name##_dot(int64_t n, float *s, const void *w, const void *a)        \
    {                                                                              \
        iq_dot(&kind, n, s, w, a);                                                 \
    }

IQ_ENTRY(iq2_xxs, kind_iq2_xxs, SG_IQ2_XXS, 43.0f)
IQ_ENTRY(iq2_xs, kind_iq2_xs, SG_IQ2_XS, 43.0f)
IQ_ENTRY(iq2_s, kind_iq2_s, SG_IQ2_S, 43.0f)
IQ_ENTRY(iq3_xxs, kind_iq3_xxs, SG_IQ3_XXS, 62.0f)
IQ_ENTRY(iq3_s, kind_iq3_s, SG_IQ3_S, 15.0f)
