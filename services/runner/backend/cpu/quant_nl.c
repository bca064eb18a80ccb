/* quant_nl.c: the 4-bit formats whose quants index a fixed value table,
 * scalar reference kernels:
 * - IQ4_NL: 32 values, f16 scale, indices into a non-linear 16-value table;
 * - IQ4_XS: the same table in super-blocks of 256 with 6-bit sub-block
 *   scales under one f16 super-scale;
 * - MXFP4: 32 E2M1 (FP4) codes under a shared E8M0 power-of-two exponent.
 * Dequantize, quantize, and the dot products with the activation formats
 * llama.cpp pairs them with (Q8_0 for IQ4_NL and MXFP4, Q8_K for IQ4_XS).
 * Layouts are in quant.h, the tables in quant_impl.h; the AVX2 dot products
 * are in quant_avx2.c.
 *
 * The quantizers serve tests and synthetic models. They are a plain search,
 * not ggml's importance-weighted one (real files of these types come from
 * llama.cpp with an imatrix): every element takes the table value nearest
 * to it under the scale finally stored, so the error of an element inside
 * the scaled table's range is at most half the gap around it. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_impl.h"

#include <math.h>

/* Half of the scale search's stretch, in steps of 1/32: scales from 0.75x
 * to 1.25x of each anchor are tried. */
#define NL_STRETCH 8

/* ---- shared pieces ------------------------------------------------------ */

/* Index of the IQ4_NL table value nearest t (ties to the lower value; a
 * NaN gives index 0). */
static int nl_nearest(float t)
{
    int i = 0;
    while (i < 15 && t > 0.5f * (float)(be_iq4_nl_values[i] + be_iq4_nl_values[i + 1]))
        i++;
    return i;
}

/* The f16 of a scale, saturated at the largest finite half (a huge block
 * clips rather than turning into inf); NaN gives 0. */
static uint16_t f16_saturate(float s)
{
    if (!(s == s))
        return 0;
    return be_f32_to_f16(fminf(fmaxf(s, -65504.0f), 65504.0f));
}

/* Scale s for value = s * table[q] over x[0..32), q nearest: tries the
 * scales that put the largest-magnitude element on either end of the table
 * (-127 or 113), each stretched by k/32 for |k| <= NL_STRETCH, refits each
 * by least squares for the indices it chose, and keeps the one with the
 * lowest squared error. 0 for a block of zeros; an infinite element gives
 * an infinite scale (callers saturate it). */
static float nl_fit_scale(const float *x)
{
    enum { n = 32 };
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax == 0 || !isfinite(amax))
        return max / -127.0f;
    float best_s = max / -127.0f;
    double best_err = INFINITY;
    for (int anchor = 0; anchor < 2; anchor++) {
        float base = max / (anchor ? 113.0f : -127.0f);
        for (int k = -NL_STRETCH; k <= NL_STRETCH; k++) {
            /* divide: 1/scale overflows for subnormal blocks */
            float scale = base * (1.0f + (float)k / 32.0f);
            double sxv = 0, svv = 0;
            int8_t v[n];
            for (int j = 0; j < n; j++) {
                v[j] = be_iq4_nl_values[nl_nearest(x[j] / scale)];
                sxv += (double)x[j] * v[j];
                svv += (double)v[j] * v[j];
            }
            double s = sxv / svv, err = 0; /* svv >= n: no table value is 0 */
            for (int j = 0; j < n; j++) {
                double e = x[j] - s * v[j];
                err += e * e;
            }
            if (err < best_err) { /* a NaN element makes err NaN: never kept */
                best_err = err;
                best_s = (float)s;
            }
        }
    }
    return best_s;
}

/* The 32 indices of x under scale dl (the stored one), packed as IQ4_NL's
 * qs: byte j = element j | element j+16 << 4. */
static void nl_pack(const float *x, float dl, uint8_t qs[16])
{
    float inv = dl != 0 ? 1.0f / dl : 0.0f;
    for (int j = 0; j < 16; j++) {
        /* dl == 0: every index decodes to 0; take the one nearest zero */
        int lo = dl != 0 ? nl_nearest(x[j] * inv) : 8;
        int hi = dl != 0 ? nl_nearest(x[j + 16] * inv) : 8;
        qs[j] = (uint8_t)(lo | (hi << 4));
    }
}

/* Sum of table[q] * a over one 32-element group (IQ4_NL's nibble order). */
static int32_t nl_group_dot(const uint8_t qs[16], const int8_t *a)
{
    int32_t sum = 0;
    for (int j = 0; j < 16; j++) {
        sum += be_iq4_nl_values[qs[j] & 15] * (int32_t)a[j];
        sum += be_iq4_nl_values[qs[j] >> 4] * (int32_t)a[j + 16];
    }
    return sum;
}

/* ---- IQ4_NL ------------------------------------------------------------- */

void be_iq4_nl_to_float(const void *x, float *y, int64_t n)
{
    const be_block_iq4_nl_t *b = x;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        float d = be_f16_to_f32(b[i].d);
        float *o = y + i * BE_QK4_0;
        for (int j = 0; j < 16; j++) {
            o[j] = d * (float)be_iq4_nl_values[b[i].qs[j] & 15];
            o[j + 16] = d * (float)be_iq4_nl_values[b[i].qs[j] >> 4];
        }
    }
}

void be_iq4_nl_from_float(const float *x, void *y, int64_t n)
{
    be_block_iq4_nl_t *b = y;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        const float *v = x + i * BE_QK4_0;
        b[i].d = f16_saturate(nl_fit_scale(v));
        nl_pack(v, be_f16_to_f32(b[i].d), b[i].qs);
    }
}

void be_iq4_nl_dot(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_iq4_nl_t *x = w;
    const be_block_q8_0_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        int32_t isum = nl_group_dot(x[i].qs, y[i].qs);
        sum += (be_f16_to_f32(x[i].d) * be_f16_to_f32(y[i].d)) * (float)isum;
    }
    *s = sum;
}

/* ---- IQ4_XS ------------------------------------------------------------- */

/* Sub-block ib's stored 6-bit scale (0..63; the scale is that minus 32). */
static int xs_scale_u(const be_block_iq4_xs_t *b, int ib)
{
    return ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((b->scales_h >> (2 * ib)) & 3) << 4);
}

void be_iq4_xs_to_float(const void *x, float *y, int64_t n)
{
    const be_block_iq4_xs_t *b = x;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        float d = be_f16_to_f32(b[i].d);
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            float dl = d * (float)(xs_scale_u(&b[i], ib) - 32);
            const uint8_t *qs = b[i].qs + 16 * ib;
            float *o = y + i * BE_QK_K + 32 * ib;
            for (int j = 0; j < 16; j++) {
                o[j] = dl * (float)be_iq4_nl_values[qs[j] & 15];
                o[j + 16] = dl * (float)be_iq4_nl_values[qs[j] >> 4];
            }
        }
    }
}

/* Each sub-block's best float scale (nl_fit_scale); the largest in
 * magnitude maps to -32 steps of the f16 super-scale d, the others round to
 * the nearest step in -32..31; indices are then chosen under each stored
 * scale d * step. */
void be_iq4_xs_from_float(const float *x, void *y, int64_t n)
{
    be_block_iq4_xs_t *b = y;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const float *v = x + i * BE_QK_K;
        float sc[BE_QK_K / 32], smax = 0, samax = 0;
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            sc[ib] = nl_fit_scale(v + 32 * ib);
            if (fabsf(sc[ib]) > samax) {
                samax = fabsf(sc[ib]);
                smax = sc[ib];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = f16_saturate(smax / -32.0f);
        float d = be_f16_to_f32(b[i].d);
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            int l = d != 0 ? be_round_clamp(sc[ib] / d, -32, 31) : 0;
            int u = l + 32;
            b[i].scales_l[ib / 2] |= (uint8_t)((u & 15) << (4 * (ib % 2)));
            b[i].scales_h |= (uint16_t)((u >> 4) << (2 * ib));
            nl_pack(v + 32 * ib, d * (float)l, b[i].qs + 16 * ib);
        }
    }
}

/* Integer sums per super-block (sub-block sums times their scale: at most
 * 8 x 32 x 32 x 127 x 128 in magnitude, well inside int32), one float
 * multiply per super-block: the AVX2 kernel takes the same steps, so both
 * give the same bits. */
void be_iq4_xs_dot(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_iq4_xs_t *x = w;
    const be_block_q8_k_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        int32_t isum = 0;
        for (int ib = 0; ib < BE_QK_K / 32; ib++)
            isum += (xs_scale_u(&x[i], ib) - 32) *
                    nl_group_dot(x[i].qs + 16 * ib, y[i].qs + 32 * ib);
        sum += (be_f16_to_f32(x[i].d) * y[i].d) * (float)isum;
    }
    *s = sum;
}

/* ---- MXFP4 -------------------------------------------------------------- */

/* The E2M1 code nearest t (t in units of the halved scale, so the doubled
 * table applies): magnitude ties go to the smaller value; zero and NaN
 * give code 0 (+0). */
static int fp4_nearest(float t)
{
    float m = fabsf(t);
    int c = 0;
    while (c < 7 && m > 0.5f * (float)(be_mxfp4_values[c] + be_mxfp4_values[c + 1]))
        c++;
    return c && t < 0 ? c + 8 : c;
}

/* Squared error of block v under exponent e, codes nearest. */
static double fp4_error(const float *v, int e)
{
    float d = be_e8m0_half((uint8_t)e); /* 1/d overflows for e = 0 */
    double err = 0;
    for (int j = 0; j < BE_QK4_0; j++) {
        double r = v[j] - (double)d * be_mxfp4_values[fp4_nearest(v[j] / d)];
        err += r * r;
    }
    return err;
}

/* Largest exponent the quantizer writes: above it the table's 12 (6.0)
 * would overflow a float. */
#define FP4_MAX_E 252

void be_mxfp4_to_float(const void *x, float *y, int64_t n)
{
    const be_block_mxfp4_t *b = x;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        float d = be_e8m0_half(b[i].e);
        float *o = y + i * BE_QK4_0;
        for (int j = 0; j < 16; j++) {
            o[j] = d * (float)be_mxfp4_values[b[i].qs[j] & 15];
            o[j + 16] = d * (float)be_mxfp4_values[b[i].qs[j] >> 4];
        }
    }
}

/* The OCP spec's exponent, floor(log2(amax)) - 2 (E2M1's largest exponent)
 * + 127, clips values above 1.5 x 2^floor(log2(amax)) to the largest code;
 * one exponent more does not clip but doubles the steps. Both are tried and
 * the one with the lower squared error kept (ties: the spec's). */
void be_mxfp4_from_float(const float *x, void *y, int64_t n)
{
    be_block_mxfp4_t *b = y;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        const float *v = x + i * BE_QK4_0;
        float amax = 0;
        for (int j = 0; j < BE_QK4_0; j++)
            amax = fabsf(v[j]) > amax ? fabsf(v[j]) : amax;
        int e = FP4_MAX_E;
        if (amax == 0) {
            e = 0;
        } else if (isfinite(amax)) {
            int ex = 0;
            frexpf(amax, &ex); /* amax = m 2^ex, m in [0.5, 1) */
            e = ex - 1 - 2 + 127;
            e = e < 0 ? 0 : e > FP4_MAX_E ? FP4_MAX_E : e;
            if (e < FP4_MAX_E && fp4_error(v, e + 1) < fp4_error(v, e))
                e++;
        }
        b[i].e = (uint8_t)e;
        float d = be_e8m0_half(b[i].e);
        for (int j = 0; j < 16; j++)
            b[i].qs[j] = (uint8_t)(fp4_nearest(v[j] / d) | (fp4_nearest(v[j + 16] / d) << 4));
    }
}

void be_mxfp4_dot(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_mxfp4_t *x = w;
    const be_block_q8_0_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        int32_t isum = 0;
        for (int j = 0; j < 16; j++) {
            isum += be_mxfp4_values[x[i].qs[j] & 15] * (int32_t)y[i].qs[j];
            isum += be_mxfp4_values[x[i].qs[j] >> 4] * (int32_t)y[i].qs[j + 16];
        }
        sum += (be_f16_to_f32(y[i].d) * be_e8m0_half(x[i].e)) * (float)isum;
    }
    *s = sum;
}
