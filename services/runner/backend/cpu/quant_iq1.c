/* quant_iq1.c: IQ1_S, the 1.5-bit I-quant, scalar reference kernels:
 * dequantize, quantize, and the dot product with Q8_K activations. Each
 * group of 8 is one point of a 2048-point grid of -1/0/1 coordinates
 * (quant_iq_grid.c), shifted by +-1/8 per sub-block of 32 and scaled by
 * d * (2 ls + 1), ls 3 bits (layout in quant.h). The SIMD dot products
 * are in quant_iq_avx2.c (the AVX-512 level uses them).
 *
 * The quantizer serves tests and synthetic models: per sub-block, both
 * shift signs and a few trial scales, each refitted by least squares, and
 * per group a near grid point (quant_iq_search.c). Not ggml's
 * importance-weighted search. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_impl.h"
#include "services/runner/backend/cpu/quant_iq.h"

#include <math.h>

#define IQ1_DELTA 0.125f

static int8_t grid_coord(const uint64_t grid[4], int j)
{
    return (int8_t)(uint8_t)(grid[j / 8] >> (8 * (j % 8)));
}

/* dl * (grid + delta) in ggml's float steps: the same bits as ggml. */
void be_iq1_s_to_float(const void *x, float *y, int64_t n)
{
    const be_iq_grids_t *g = be_iq_grids();
    const be_block_iq1_s_t *b = x;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        float d = be_f16_to_f32(b[i].d);
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            uint64_t grid[4];
            int32_t mul;
            bool neg;
            be_iq1_s_sub(g, &b[i], ib, grid, &mul, &neg);
            float dl = d * (float)mul, delta = neg ? -IQ1_DELTA : IQ1_DELTA;
            float *o = y + i * BE_QK_K + 32 * ib;
            for (int j = 0; j < 32; j++)
                o[j] = dl * ((float)grid_coord(grid, j) + delta);
        }
    }
}

/* sum dl (g + delta) a = d yd (sum mul g.a + delta sum +-mul (sum a)):
 * two integer sums per super-block (sum a from the activation's bsums,
 * as ggml), one float step: the SIMD kernels take the same steps. */
void be_iq1_s_dot(int64_t n, float *s, const void *w, const void *a)
{
    const be_iq_grids_t *g = be_iq_grids();
    const be_block_iq1_s_t *x = w;
    const be_block_q8_k_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        int32_t isum = 0, isum1 = 0;
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            uint64_t grid[4];
            int32_t mul;
            bool neg;
            be_iq1_s_sub(g, &x[i], ib, grid, &mul, &neg);
            const int8_t *q = y[i].qs + 32 * ib;
            int32_t part = 0;
            for (int j = 0; j < 32; j++)
                part += grid_coord(grid, j) * (int32_t)q[j];
            int32_t qsum = y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1];
            isum += mul * part;
            isum1 += mul * (neg ? -qsum : qsum);
        }
        sum += (be_f16_to_f32(x[i].d) * y[i].d) * ((float)isum + IQ1_DELTA * (float)isum1);
    }
    *s = sum;
}

/* ---- quantizer ---------------------------------------------------------- */

/* The grid's search (be_iq_grid_defs' sixth). */
enum { IQ1_DEF = 5 };

/* Points for x[0..32) under step s and shift delta; the values in steps
 * (grid + delta) into v. */
static void run32(const float *x, float s, float delta, int idx[4], float v[32])
{
    const be_iq_search_t *sr = be_iq_search(IQ1_DEF);
    float inv = s > 0 ? 1.0f / s : 0.0f;
    for (int l = 0; l < 4; l++) {
        float t[8];
        for (int c = 0; c < 8; c++)
            t[c] = x[8 * l + c] * inv - delta;
        idx[l] = be_iq_search_nearest(sr, t);
        const float *pt = be_iq_search_point(sr, idx[l]);
        for (int c = 0; c < 8; c++)
            v[8 * l + c] = pt[c] + delta;
    }
}

/* Best (step, shift sign) for x[0..32): trial steps putting the largest
 * magnitude at 0.7 .. 1.3 of 1 + 1/8, both shifts, least-squares refit. */
static float fit32(const float *x, bool *neg)
{
    float amax = 0;
    for (int j = 0; j < 32; j++)
        amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    *neg = false;
    if (amax == 0 || !isfinite(amax))
        return amax;
    float best_s = amax;
    double best_e = INFINITY;
    for (int sg = 0; sg < 2; sg++) {
        float delta = sg ? -IQ1_DELTA : IQ1_DELTA;
        for (int k = 0; k < 3; k++) {
            float s = amax / (1 + IQ1_DELTA) / (0.7f + 0.3f * (float)k);
            int idx[4];
            float v[32];
            run32(x, s, delta, idx, v);
            double sxv = 0, svv = 0;
            for (int j = 0; j < 32; j++) {
                sxv += (double)x[j] * v[j];
                svv += (double)v[j] * v[j];
            }
            double fit = svv > 0 && sxv > 0 ? sxv / svv : s, e = 0;
            for (int j = 0; j < 32; j++) {
                double r = x[j] - fit * v[j];
                e += r * r;
            }
            if (e < best_e) {
                best_e = e;
                best_s = (float)fit;
                *neg = sg;
            }
        }
    }
    return best_s;
}

void be_iq1_s_from_float(const float *x, void *y, int64_t n)
{
    be_block_iq1_s_t *b = y;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const float *xb = x + i * BE_QK_K;
        float steps[BE_QK_K / 32], smax = 0;
        bool neg[BE_QK_K / 32];
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            steps[ib] = fit32(xb + 32 * ib, &neg[ib]);
            smax = steps[ib] > smax ? steps[ib] : smax;
        }
        memset(&b[i], 0, sizeof b[i]);
        /* the largest step is ls = 7 (mul 15); saturated at the largest
         * finite half, NaN 0 */
        float dd = smax / 15.0f;
        b[i].d = dd == dd ? be_f32_to_f16(fminf(dd, 65504.0f)) : 0;
        float d = be_f16_to_f32(b[i].d);
        for (int ib = 0; ib < BE_QK_K / 32; ib++) {
            int ls = d > 0 ? be_round_clamp((steps[ib] / d - 1) / 2, 0, 7) : 0;
            int idx[4];
            float v[32];
            run32(xb + 32 * ib, d * (float)(2 * ls + 1), neg[ib] ? -IQ1_DELTA : IQ1_DELTA, idx, v);
            unsigned h = (unsigned)ls << 12 | (neg[ib] ? 1u << 15 : 0);
            for (int l = 0; l < 4; l++) {
                b[i].qs[4 * ib + l] = (uint8_t)(idx[l] & 255);
                h |= (unsigned)(idx[l] >> 8) << (3 * l);
            }
            b[i].qh[ib] = (uint16_t)h;
        }
    }
}
