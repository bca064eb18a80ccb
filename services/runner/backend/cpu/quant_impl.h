/* quant_impl.h: private to backend/cpu: helpers shared by quant.c,
 * quant_k.c, quant_nl.c and the AVX2 files, and the scalar kernels that
 * quant_k.c (Q2_K..Q5_K) and quant_nl.c (IQ4_NL, IQ4_XS, MXFP4) define and
 * quant.c's traits table registers. Same contracts as be_to_float_fn /
 * be_from_float_fn / be_vec_dot_fn. */
#ifndef BE_CPU_QUANT_IMPL_H
#define BE_CPU_QUANT_IMPL_H

#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"

#include <math.h>

/* Rounds half to even and clamps to [lo, hi]; nan gives 0 (never UB). */
static inline int be_round_clamp(float v, int lo, int hi)
{
    float r = nearbyintf(v);
    if (!(r == r))
        return 0;
    if (r < (float)lo)
        return lo;
    if (r > (float)hi)
        return hi;
    return (int)r;
}

/* Scale and min of sub-block j (0..7) from Q4_K/Q5_K's 12 packed bytes
 * (layout in quant.h). */
static inline void be_k4_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        *m = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

/* The 16 signed scales (-32..31) of a Q3_K block (layout in quant.h). */
static inline void be_q3_k_scales(const uint8_t s[12], int8_t out[16])
{
    for (int k = 0; k < 16; k++) {
        int lo = k < 8 ? (s[k] & 15) : (s[k - 8] >> 4);
        int hi = (s[8 + k % 4] >> (2 * (k / 4))) & 3;
        out[k] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* IQ4_NL / IQ4_XS value table, ascending (the published format constant:
 * a fitted non-linear grid, denser near zero). */
static const int8_t be_iq4_nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

/* E2M1 code -> value x 2, so every value is an integer: codes 0..7 are
 * 0, 0.5, 1, 1.5, 2, 3, 4, 6 (exponent bias 1, code 1 subnormal), 8..15
 * the same negated (8 is -0). */
static const int8_t be_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                           0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e - 128): an E8M0 exponent's value halved (it meets the doubled
 * E2M1 table). e = 0 and 1 give the float subnormals 2^-128, 2^-127; no
 * NaN (e = 255 is 2^127, as ggml reads it). */
static inline float be_e8m0_half(uint8_t e)
{
    uint32_t bits = e >= 2 ? (uint32_t)(e - 1) << 23 : 0x00200000u << e;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

void be_q2_k_to_float(const void *x, float *y, int64_t n);
void be_q2_k_from_float(const float *x, void *y, int64_t n);
void be_q2_k_dot(int64_t n, float *s, const void *w, const void *a);
void be_q3_k_to_float(const void *x, float *y, int64_t n);
void be_q3_k_from_float(const float *x, void *y, int64_t n);
void be_q3_k_dot(int64_t n, float *s, const void *w, const void *a);
void be_q4_k_to_float(const void *x, float *y, int64_t n);
void be_q4_k_from_float(const float *x, void *y, int64_t n);
void be_q4_k_dot(int64_t n, float *s, const void *w, const void *a);
void be_q5_k_to_float(const void *x, float *y, int64_t n);
void be_q5_k_from_float(const float *x, void *y, int64_t n);
void be_q5_k_dot(int64_t n, float *s, const void *w, const void *a);
/* quant_nl.c: the table formats. */
void be_iq4_nl_to_float(const void *x, float *y, int64_t n);
void be_iq4_nl_from_float(const float *x, void *y, int64_t n);
void be_iq4_nl_dot(int64_t n, float *s, const void *w, const void *a);
void be_iq4_xs_to_float(const void *x, float *y, int64_t n);
void be_iq4_xs_from_float(const float *x, void *y, int64_t n);
void be_iq4_xs_dot(int64_t n, float *s, const void *w, const void *a);
void be_mxfp4_to_float(const void *x, float *y, int64_t n);
void be_mxfp4_from_float(const float *x, void *y, int64_t n);
void be_mxfp4_dot(int64_t n, float *s, const void *w, const void *a);

#endif
