/* quant.c: scalar reference kernels for every supported element type, the
 * half/bfloat conversions, and the traits tables (scalar and AVX2).
 *
 * Numerics follow the reference engine (llama.cpp on x86): activations for
 * Q8_0/Q4_0/Q5_0 weights are quantized to Q8_0 with id = 127/amax and
 * round-half-even, for Q4_1/Q5_1 to Q8_1 the same way (plus s = d*sum in
 * f16), for K-quants to Q8_K with iscale = -127/max; block sums of int8
 * products are exact integers, scaled once per block. The K-quants other
 * than Q6_K are in quant_k.c, the table formats (IQ4_NL, IQ4_XS, MXFP4) in
 * quant_nl.c. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_impl.h"
#include "services/runner/backend/cpu/quant_iq.h"
#include "services/runner/backend/cpu/quant_simd.h"

#include <math.h>
#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

/* ---- half and bfloat -------------------------------------------------- */

float be_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {
            /* Subnormal half: value = mant * 2^-24; normalize it. */
            uint32_t e = 113; /* 127 - 15 + 1 */
            while (!(mant & 0x400u)) {
                mant <<= 1;
                e--;
            }
            bits = sign | (e << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 31) {
        /* inf keeps a zero mantissa; nan is returned quiet, as F16C does. */
        bits = sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0);
    } else {
        bits = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t be_f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (exp == 0xff) /* inf, or nan made quiet keeping the top payload bits */
        return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31)
        return (uint16_t)(sign | 0x7c00u); /* overflow: inf */
    if (e <= 0) {
        /* Result is subnormal (or zero): value = m * 2^-24. Values below
         * 2^-25 round to zero; from there, round half to even. */
        if (e < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t m = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (m & 1)))
            m++; /* may carry into the smallest normal: still correct */
        return (uint16_t)(sign | m);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* a carry walks into the exponent, up to inf: correct */
    return (uint16_t)h;
}

float be_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t be_f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u); /* nan: keep it a quiet nan */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}


/* ---- F32 -------------------------------------------------------------- */

static void f32_to_float(const void *x, float *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

static void f32_from_float(const float *x, void *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

static void dot_f32(int64_t n, float *s, const void *w, const void *a)
{
    const float *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)x[i] * (double)y[i];
    *s = (float)sum;
}

/* ---- F16 / BF16 ------------------------------------------------------- */

static void f16_to_float(const void *x, float *y, int64_t n)
{
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++)
        y[i] = be_f16_to_f32(h[i]);
}

static void f16_from_float(const float *x, void *y, int64_t n)
{
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++)
        h[i] = be_f32_to_f16(x[i]);
}

static void dot_f16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)be_f16_to_f32(x[i]) * (double)be_f16_to_f32(y[i]);
    *s = (float)sum;
}

static void bf16_to_float(const void *x, float *y, int64_t n)
{
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++)
        y[i] = be_bf16_to_f32(h[i]);
}

static void bf16_from_float(const float *x, void *y, int64_t n)
{
    uint16_t *h = y;
    for (int64_t i = 0; i < n; i++)
        h[i] = be_f32_to_bf16(x[i]);
}

static void dot_bf16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)be_bf16_to_f32(x[i]) * (double)be_bf16_to_f32(y[i]);
    *s = (float)sum;
}

/* ---- Q8_0 ------------------------------------------------------------- */

static void q8_0_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q8_0_t *b = x;
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        float d = be_f16_to_f32(b[i].d);
        for (int j = 0; j < BE_QK8_0; j++)
            y[i * BE_QK8_0 + j] = d * (float)b[i].qs[j];
    }
}

static void q8_0_from_float(const float *x, void *y, int64_t n)
{
    be_block_q8_0_t *b = y;
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        const float *v = x + i * BE_QK8_0;
        float amax = 0;
        for (int j = 0; j < BE_QK8_0; j++)
            amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.0f;
        float id = amax != 0 ? 127.0f / amax : 0.0f;
        b[i].d = be_f32_to_f16(d);
        for (int j = 0; j < BE_QK8_0; j++)
            b[i].qs[j] = (int8_t)be_round_clamp(v[j] * id, -127, 127);
    }
}

static void dot_q8_0(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q8_0_t *x = w, *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        int32_t isum = 0;
        for (int j = 0; j < BE_QK8_0; j++)
            isum += (int32_t)x[i].qs[j] * (int32_t)y[i].qs[j];
        sum += (float)isum * (be_f16_to_f32(x[i].d) * be_f16_to_f32(y[i].d));
    }
    *s = sum;
}

/* ---- Q4_0 ------------------------------------------------------------- */

static void q4_0_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q4_0_t *b = x;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        float d = be_f16_to_f32(b[i].d);
        float *o = y + i * BE_QK4_0;
        for (int j = 0; j < BE_QK4_0 / 2; j++) {
            o[j] = d * (float)((b[i].qs[j] & 0x0f) - 8);
            o[j + 16] = d * (float)((b[i].qs[j] >> 4) - 8);
        }
    }
}

/* GGML's reference rounding: the value of largest magnitude maps to -8. */
static void q4_0_from_float(const float *x, void *y, int64_t n)
{
    be_block_q4_0_t *b = y;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        const float *v = x + i * BE_QK4_0;
        float amax = 0, max = 0;
        for (int j = 0; j < BE_QK4_0; j++) {
            if (fabsf(v[j]) > amax) {
                amax = fabsf(v[j]);
                max = v[j];
            }
        }
        float d = max / -8.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = be_f32_to_f16(d);
        for (int j = 0; j < BE_QK4_0 / 2; j++) {
            /* GGML truncates x*id + 8.5 (x*id >= -8 here, so this is
                 * rounding half up); clamp keeps a nan or inf harmless. */
            int q0 = be_round_clamp(floorf(v[j] * id + 8.5f), 0, 15);
            int q1 = be_round_clamp(floorf(v[j + 16] * id + 8.5f), 0, 15);
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

static void dot_q4_0(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q4_0_t *x = w;
    const be_block_q8_0_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        int32_t isum = 0;
        for (int j = 0; j < BE_QK4_0 / 2; j++) {
            isum += ((x[i].qs[j] & 0x0f) - 8) * (int32_t)y[i].qs[j];
            isum += ((x[i].qs[j] >> 4) - 8) * (int32_t)y[i].qs[j + 16];
        }
        sum += (float)isum * (be_f16_to_f32(x[i].d) * be_f16_to_f32(y[i].d));
    }
    *s = sum;
}

/* ---- Q8_1 (activations for Q4_1 / Q5_1) ------------------------------- */

static void q8_1_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q8_1_t *b = x;
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        float d = be_f16_to_f32(b[i].d);
        for (int j = 0; j < BE_QK8_0; j++)
            y[i * BE_QK8_0 + j] = d * (float)b[i].qs[j];
    }
}

/* As Q8_0, plus s = d * sum(qs) rounded to f16 (what llama.cpp stores; the
 * dot product uses it for the weights' minimum term). */
static void q8_1_from_float(const float *x, void *y, int64_t n)
{
    be_block_q8_1_t *b = y;
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        const float *v = x + i * BE_QK8_0;
        float amax = 0;
        for (int j = 0; j < BE_QK8_0; j++)
            amax = fmaxf(amax, fabsf(v[j]));
        float d = amax / 127.0f;
        float id = amax != 0 ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < BE_QK8_0; j++) {
            b[i].qs[j] = (int8_t)be_round_clamp(v[j] * id, -127, 127);
            sum += b[i].qs[j];
        }
        b[i].d = be_f32_to_f16(d);
        b[i].s = be_f32_to_f16(d * (float)sum);
    }
}

/* ---- Q4_1 ------------------------------------------------------------- */

static void q4_1_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q4_1_t *b = x;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        float d = be_f16_to_f32(b[i].d), m = be_f16_to_f32(b[i].m);
        float *o = y + i * BE_QK4_0;
        for (int j = 0; j < BE_QK4_0 / 2; j++) {
            o[j] = d * (float)(b[i].qs[j] & 0x0f) + m;
            o[j + 16] = d * (float)(b[i].qs[j] >> 4) + m;
        }
    }
}

/* Minimum and maximum of the block over 2^bits - 1 steps (GGML's reference
 * quantizer for Q4_1/Q5_1: q = trunc((x - min) / d + 0.5)). */
static void minmax_fit(const float *v, int qmax, uint16_t *dh, uint16_t *mh, float *id,
                       float *min)
{
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < BE_QK4_0; j++) {
        lo = fminf(lo, v[j]);
        hi = fmaxf(hi, v[j]);
    }
    if (!(lo <= hi)) /* all nan */
        lo = hi = 0;
    float d = (hi - lo) / (float)qmax;
    *id = d != 0 ? 1.0f / d : 0.0f;
    *dh = be_f32_to_f16(d);
    *mh = be_f32_to_f16(lo);
    *min = lo;
}

static void q4_1_from_float(const float *x, void *y, int64_t n)
{
    be_block_q4_1_t *b = y;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        const float *v = x + i * BE_QK4_0;
        float id, min;
        minmax_fit(v, 15, &b[i].d, &b[i].m, &id, &min);
        for (int j = 0; j < BE_QK4_0 / 2; j++) {
            int q0 = be_round_clamp(floorf((v[j] - min) * id + 0.5f), 0, 15);
            int q1 = be_round_clamp(floorf((v[j + 16] - min) * id + 0.5f), 0, 15);
            b[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* sum d*q*a + m*a = dx*dy * sum(q*qa) + m * s: the min meets the
 * activation block's stored sum. */
static void dot_q4_1(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q4_1_t *x = w;
    const be_block_q8_1_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        int32_t isum = 0;
        for (int j = 0; j < BE_QK4_0 / 2; j++) {
            isum += (x[i].qs[j] & 0x0f) * (int32_t)y[i].qs[j];
            isum += (x[i].qs[j] >> 4) * (int32_t)y[i].qs[j + 16];
        }
        sum += (be_f16_to_f32(x[i].d) * be_f16_to_f32(y[i].d)) * (float)isum +
               be_f16_to_f32(x[i].m) * be_f16_to_f32(y[i].s);
    }
    *s = sum;
}

/* ---- Q5_0 / Q5_1 ------------------------------------------------------ */

/* The 32 unsigned 5-bit quants of a Q5 block in element order. */
static void q5_unpack(const uint8_t qh4[4], const uint8_t qs[16], uint8_t q[32])
{
    uint32_t qh = (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 |
                  (uint32_t)qh4[3] << 24;
    for (int j = 0; j < 16; j++) {
        q[j] = (uint8_t)((qs[j] & 0x0f) | (((qh >> j) & 1) << 4));
        q[j + 16] = (uint8_t)((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
    }
}

static void q5_pack(const uint8_t q[32], uint8_t qh4[4], uint8_t qs[16])
{
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
        qh |= (uint32_t)(q[j] >> 4) << j;
        qh |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; k++)
        qh4[k] = (uint8_t)(qh >> (8 * k));
}

static void q5_0_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q5_0_t *b = x;
    uint8_t q[32];
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        float d = be_f16_to_f32(b[i].d);
        q5_unpack(b[i].qh, b[i].qs, q);
        for (int j = 0; j < 32; j++)
            y[i * BE_QK4_0 + j] = d * (float)(q[j] - 16);
    }
}

/* GGML's reference rounding, as Q4_0: the largest magnitude maps to -16. */
static void q5_0_from_float(const float *x, void *y, int64_t n)
{
    be_block_q5_0_t *b = y;
    uint8_t q[32];
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        const float *v = x + i * BE_QK4_0;
        float amax = 0, max = 0;
        for (int j = 0; j < BE_QK4_0; j++) {
            if (fabsf(v[j]) > amax) {
                amax = fabsf(v[j]);
                max = v[j];
            }
        }
        float d = max / -16.0f;
        float id = d != 0 ? 1.0f / d : 0.0f;
        b[i].d = be_f32_to_f16(d);
        for (int j = 0; j < 32; j++)
            q[j] = (uint8_t)be_round_clamp(floorf(v[j] * id + 16.5f), 0, 31);
        q5_pack(q, b[i].qh, b[i].qs);
    }
}

static void dot_q5_0(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q5_0_t *x = w;
    const be_block_q8_0_t *y = a;
    uint8_t q[32];
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        q5_unpack(x[i].qh, x[i].qs, q);
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += (q[j] - 16) * (int32_t)y[i].qs[j];
        sum += (float)isum * (be_f16_to_f32(x[i].d) * be_f16_to_f32(y[i].d));
    }
    *s = sum;
}

static void q5_1_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q5_1_t *b = x;
    uint8_t q[32];
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        float d = be_f16_to_f32(b[i].d), m = be_f16_to_f32(b[i].m);
        q5_unpack(b[i].qh, b[i].qs, q);
        for (int j = 0; j < 32; j++)
            y[i * BE_QK4_0 + j] = d * (float)q[j] + m;
    }
}

static void q5_1_from_float(const float *x, void *y, int64_t n)
{
    be_block_q5_1_t *b = y;
    uint8_t q[32];
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        const float *v = x + i * BE_QK4_0;
        float id, min;
        minmax_fit(v, 31, &b[i].d, &b[i].m, &id, &min);
        for (int j = 0; j < 32; j++)
            q[j] = (uint8_t)be_round_clamp(floorf((v[j] - min) * id + 0.5f), 0, 31);
        q5_pack(q, b[i].qh, b[i].qs);
    }
}

static void dot_q5_1(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q5_1_t *x = w;
    const be_block_q8_1_t *y = a;
    uint8_t q[32];
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        q5_unpack(x[i].qh, x[i].qs, q);
        int32_t isum = 0;
        for (int j = 0; j < 32; j++)
            isum += q[j] * (int32_t)y[i].qs[j];
        sum += (be_f16_to_f32(x[i].d) * be_f16_to_f32(y[i].d)) * (float)isum +
               be_f16_to_f32(x[i].m) * be_f16_to_f32(y[i].s);
    }
    *s = sum;
}

/* ---- Q6_K ------------------------------------------------------------- */

/* Unpacks the 256 6-bit quants of a block, in element order, as q - 32. */
static void q6_k_unpack(const be_block_q6_k_t *b, int8_t q[BE_QK_K])
{
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b->ql + 64 * h;
        const uint8_t *qh = b->qh + 32 * h;
        int8_t *o = q + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (int8_t)(((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32);
            o[l + 32] =
                (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] =
                (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

static void q6_k_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q6_k_t *b = x;
    int8_t q[BE_QK_K];
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        float d = be_f16_to_f32(b[i].d);
        q6_k_unpack(&b[i], q);
        for (int j = 0; j < BE_QK_K; j++)
            y[i * BE_QK_K + j] = d * (float)b[i].scales[j / 16] * (float)q[j];
    }
}

/* A plain quantizer (not GGML's iterative search): each 16-element
 * sub-block's largest-magnitude value maps to -32, and the 16 sub-block
 * scales share one f16 super-scale with 8-bit steps. Used by tests and the
 * synthetic-model tool. */
static void q6_k_from_float(const float *x, void *y, int64_t n)
{
    be_block_q6_k_t *b = y;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const float *v = x + i * BE_QK_K;
        float scales[16], max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            float amax = 0, max = 0;
            for (int j = 0; j < 16; j++) {
                if (fabsf(v[16 * ib + j]) > amax) {
                    amax = fabsf(v[16 * ib + j]);
                    max = v[16 * ib + j];
                }
            }
            scales[ib] = max / -32.0f;
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        uint8_t L[BE_QK_K];
        if (amax_scale == 0) {
            memset(L, 32, sizeof L);
        } else {
            float iscale = -128.0f / max_scale;
            b[i].d = be_f32_to_f16(1.0f / iscale);
            float d = be_f16_to_f32(b[i].d);
            for (int ib = 0; ib < 16; ib++) {
                int sc = be_round_clamp(iscale * scales[ib], -128, 127);
                b[i].scales[ib] = (int8_t)sc;
                float ds = d * (float)sc;
                for (int j = 0; j < 16; j++) {
                    int l = ds != 0 ? be_round_clamp(v[16 * ib + j] / ds, -32, 31) : 0;
                    L[16 * ib + j] = (uint8_t)(l + 32);
                }
            }
        }
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 32; l++) {
                const uint8_t *o = L + 128 * h;
                uint8_t q1 = o[l], q2 = o[l + 32], q3 = o[l + 64], q4 = o[l + 96];
                b[i].ql[64 * h + l] = (uint8_t)((q1 & 0xf) | ((q3 & 0xf) << 4));
                b[i].ql[64 * h + l + 32] = (uint8_t)((q2 & 0xf) | ((q4 & 0xf) << 4));
                b[i].qh[32 * h + l] = (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) |
                                                ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

static void dot_q6_k(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q6_k_t *x = w;
    const be_block_q8_k_t *y = a;
    int8_t q[BE_QK_K];
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        q6_k_unpack(&x[i], q);
        int32_t isum = 0;
        for (int ib = 0; ib < 16; ib++) {
            int32_t sub = 0;
            for (int j = 0; j < 16; j++)
                sub += (int32_t)q[16 * ib + j] * (int32_t)y[i].qs[16 * ib + j];
            isum += sub * x[i].scales[ib];
        }
        sum += be_f16_to_f32(x[i].d) * y[i].d * (float)isum;
    }
    *s = sum;
}

/* ---- Q8_K (activations only) ------------------------------------------ */

static void q8_k_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q8_k_t *b = x;
    for (int64_t i = 0; i < n / BE_QK_K; i++)
        for (int j = 0; j < BE_QK_K; j++)
            y[i * BE_QK_K + j] = b[i].d * (float)b[i].qs[j];
}

static void q8_k_from_float(const float *x, void *y, int64_t n)
{
    be_block_q8_k_t *b = y;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const float *v = x + i * BE_QK_K;
        float amax = 0, max = 0;
        for (int j = 0; j < BE_QK_K; j++) {
            if (fabsf(v[j]) > amax) {
                amax = fabsf(v[j]);
                max = v[j];
            }
        }
        memset(&b[i], 0, sizeof b[i]);
        if (amax == 0)
            continue;
        float iscale = -127.0f / max;
        for (int j = 0; j < BE_QK_K; j++) {
            b[i].qs[j] = (int8_t)be_round_clamp(iscale * v[j], -128, 127);
        }
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++)
                sum += b[i].qs[16 * g + j];
            b[i].bsums[g] = (int16_t)sum;
        }
        b[i].d = 1.0f / iscale;
    }
}

/* ---- tables ----------------------------------------------------------- */

#define ROW(T, NAME, BE, BB, TO, FROM, DOT, VT)                              \
    [T] = {T, NAME, BE, BB, TO, FROM, DOT, VT}

static const be_type_traits_t scalar_table[CR_TYPE__COUNT] = {
    ROW(CR_TYPE_F32, "F32", 1, 4, f32_to_float, f32_from_float, dot_f32,
        CR_TYPE_F32),
    ROW(CR_TYPE_F16, "F16", 1, 2, f16_to_float, f16_from_float, dot_f16,
        CR_TYPE_F16),
    ROW(CR_TYPE_BF16, "BF16", 1, 2, bf16_to_float, bf16_from_float, dot_bf16,
        CR_TYPE_BF16),
    ROW(CR_TYPE_Q8_0, "Q8_0", BE_QK8_0, sizeof(be_block_q8_0_t), q8_0_to_float,
        q8_0_from_float, dot_q8_0, CR_TYPE_Q8_0),
    ROW(CR_TYPE_Q4_0, "Q4_0", BE_QK4_0, sizeof(be_block_q4_0_t), q4_0_to_float,
        q4_0_from_float, dot_q4_0, CR_TYPE_Q8_0),
    ROW(CR_TYPE_Q6_K, "Q6_K", BE_QK_K, sizeof(be_block_q6_k_t), q6_k_to_float,
        q6_k_from_float, dot_q6_k, CR_TYPE_Q8_K),
    ROW(CR_TYPE_Q4_1, "Q4_1", BE_QK4_0, sizeof(be_block_q4_1_t), q4_1_to_float,
        q4_1_from_float, dot_q4_1, CR_TYPE_Q8_1),
    ROW(CR_TYPE_Q5_0, "Q5_0", BE_QK4_0, sizeof(be_block_q5_0_t), q5_0_to_float,
        q5_0_from_float, dot_q5_0, CR_TYPE_Q8_0),
    ROW(CR_TYPE_Q5_1, "Q5_1", BE_QK4_0, sizeof(be_block_q5_1_t), q5_1_to_float,
        q5_1_from_float, dot_q5_1, CR_TYPE_Q8_1),
    ROW(CR_TYPE_Q8_1, "Q8_1", BE_QK8_0, sizeof(be_block_q8_1_t), q8_1_to_float,
        q8_1_from_float, NULL, CR_TYPE_Q8_1),
    ROW(CR_TYPE_Q2_K, "Q2_K", BE_QK_K, sizeof(be_block_q2_k_t), be_q2_k_to_float,
        be_q2_k_from_float, be_q2_k_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_Q3_K, "Q3_K", BE_QK_K, sizeof(be_block_q3_k_t), be_q3_k_to_float,
        be_q3_k_from_float, be_q3_k_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_Q4_K, "Q4_K", BE_QK_K, sizeof(be_block_q4_k_t), be_q4_k_to_float,
        be_q4_k_from_float, be_q4_k_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_Q5_K, "Q5_K", BE_QK_K, sizeof(be_block_q5_k_t), be_q5_k_to_float,
        be_q5_k_from_float, be_q5_k_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_Q8_K, "Q8_K", BE_QK_K, sizeof(be_block_q8_k_t), q8_k_to_float,
        q8_k_from_float, NULL, CR_TYPE_Q8_K),
    ROW(CR_TYPE_IQ4_NL, "IQ4_NL", BE_QK4_0, sizeof(be_block_iq4_nl_t), be_iq4_nl_to_float,
        be_iq4_nl_from_float, be_iq4_nl_dot, CR_TYPE_Q8_0),
    ROW(CR_TYPE_IQ4_XS, "IQ4_XS", BE_QK_K, sizeof(be_block_iq4_xs_t), be_iq4_xs_to_float,
        be_iq4_xs_from_float, be_iq4_xs_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_MXFP4, "MXFP4", BE_QK4_0, sizeof(be_block_mxfp4_t), be_mxfp4_to_float,
        be_mxfp4_from_float, be_mxfp4_dot, CR_TYPE_Q8_0),
    ROW(CR_TYPE_IQ2_XXS, "IQ2_XXS", BE_QK_K, sizeof(be_block_iq2_xxs_t), be_iq2_xxs_to_float,
        be_iq2_xxs_from_float, be_iq2_xxs_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_IQ2_XS, "IQ2_XS", BE_QK_K, sizeof(be_block_iq2_xs_t), be_iq2_xs_to_float,
        be_iq2_xs_from_float, be_iq2_xs_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_IQ2_S, "IQ2_S", BE_QK_K, sizeof(be_block_iq2_s_t), be_iq2_s_to_float,
        be_iq2_s_from_float, be_iq2_s_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_IQ3_XXS, "IQ3_XXS", BE_QK_K, sizeof(be_block_iq3_xxs_t), be_iq3_xxs_to_float,
        be_iq3_xxs_from_float, be_iq3_xxs_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_IQ3_S, "IQ3_S", BE_QK_K, sizeof(be_block_iq3_s_t), be_iq3_s_to_float,
        be_iq3_s_from_float, be_iq3_s_dot, CR_TYPE_Q8_K),
    ROW(CR_TYPE_IQ1_S, "IQ1_S", BE_QK_K, sizeof(be_block_iq1_s_t), be_iq1_s_to_float,
        be_iq1_s_from_float, be_iq1_s_dot, CR_TYPE_Q8_K),
};

static be_type_traits_t avx2_table[CR_TYPE__COUNT];
/* The AVX2 table with AVX-512 dot products where they exist (IQ4_NL,
 * MXFP4). */
static be_type_traits_t avx512_table[CR_TYPE__COUNT];
static be_simd_t hw_level;       /* what the CPU can run */
static be_simd_t detected_level; /* what we choose (env may lower it) */
static pthread_once_t detect_once = PTHREAD_ONCE_INIT;

static void detect(void)
{
    memcpy(avx2_table, scalar_table, sizeof avx2_table);
    avx2_table[CR_TYPE_F32].vec_dot = be_avx2_dot_f32;
    avx2_table[CR_TYPE_F16].vec_dot = be_avx2_dot_f16;
    avx2_table[CR_TYPE_F16].from_float = be_avx2_f32_to_f16;
    avx2_table[CR_TYPE_F16].to_float = be_avx2_f16_to_f32;
    avx2_table[CR_TYPE_Q8_0].from_float = be_avx2_q8_0_from_float;
    avx2_table[CR_TYPE_Q8_K].from_float = be_avx2_q8_k_from_float;
    avx2_table[CR_TYPE_BF16].vec_dot = be_avx2_dot_bf16;
    avx2_table[CR_TYPE_Q8_0].vec_dot = be_avx2_dot_q8_0;
    avx2_table[CR_TYPE_Q4_0].vec_dot = be_avx2_dot_q4_0;
    avx2_table[CR_TYPE_Q6_K].vec_dot = be_avx2_dot_q6_k;
    avx2_table[CR_TYPE_Q4_1].vec_dot = be_avx2_dot_q4_1;
    avx2_table[CR_TYPE_Q5_0].vec_dot = be_avx2_dot_q5_0;
    avx2_table[CR_TYPE_Q5_1].vec_dot = be_avx2_dot_q5_1;
    avx2_table[CR_TYPE_Q2_K].vec_dot = be_avx2_dot_q2_k;
    avx2_table[CR_TYPE_Q3_K].vec_dot = be_avx2_dot_q3_k;
    avx2_table[CR_TYPE_Q4_K].vec_dot = be_avx2_dot_q4_k;
    avx2_table[CR_TYPE_Q5_K].vec_dot = be_avx2_dot_q5_k;
    avx2_table[CR_TYPE_IQ4_NL].vec_dot = be_avx2_dot_iq4_nl;
    avx2_table[CR_TYPE_IQ4_XS].vec_dot = be_avx2_dot_iq4_xs;
    avx2_table[CR_TYPE_MXFP4].vec_dot = be_avx2_dot_mxfp4;
    avx2_table[CR_TYPE_Q8_0].vec_dot4 = be_avx2_dot4_q8_0;
    avx2_table[CR_TYPE_Q4_0].vec_dot4 = be_avx2_dot4_q4_0;
    avx2_table[CR_TYPE_Q4_K].vec_dot4 = be_avx2_dot4_q4_k;
    avx2_table[CR_TYPE_Q6_K].vec_dot4 = be_avx2_dot4_q6_k;
    avx2_table[CR_TYPE_Q8_0].vec_dot_r4 = be_avx2_dotr4_q8_0;
    avx2_table[CR_TYPE_Q4_0].vec_dot_r4 = be_avx2_dotr4_q4_0;
    avx2_table[CR_TYPE_Q8_0].vec_dot44 = be_avx2_dot44_q8_0;
    avx2_table[CR_TYPE_Q4_0].vec_dot44 = be_avx2_dot44_q4_0;
    avx2_table[CR_TYPE_IQ2_XXS].vec_dot = be_avx2_dot_iq2_xxs;
    avx2_table[CR_TYPE_IQ2_XS].vec_dot = be_avx2_dot_iq2_xs;
    avx2_table[CR_TYPE_IQ2_S].vec_dot = be_avx2_dot_iq2_s;
    avx2_table[CR_TYPE_IQ3_XXS].vec_dot = be_avx2_dot_iq3_xxs;
    avx2_table[CR_TYPE_IQ3_S].vec_dot = be_avx2_dot_iq3_s;
    avx2_table[CR_TYPE_IQ1_S].vec_dot = be_avx2_dot_iq1_s;
    memcpy(avx512_table, avx2_table, sizeof avx512_table);
    avx512_table[CR_TYPE_IQ4_NL].vec_dot = be_avx512_dot_iq4_nl;
    avx512_table[CR_TYPE_MXFP4].vec_dot = be_avx512_dot_mxfp4;

    hw_level = BE_SIMD_SCALAR;
#if defined(__x86_64__) || defined(__i386__)
    /* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
     * does not know "f16c". AVX2 and FMA imply the OS saves YMM state in
     * the builtin's check. */
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29));
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) {
        hw_level = BE_SIMD_AVX2;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni"))
            hw_level = BE_SIMD_AVX512_VNNI;
    }
#endif
    detected_level = hw_level;
    const char *force = getenv("CORRAL_CPU_SIMD");
    if (force && !strcmp(force, "scalar"))
        detected_level = BE_SIMD_SCALAR;
    if (force && !strcmp(force, "avx2") && detected_level > BE_SIMD_AVX2)
        detected_level = BE_SIMD_AVX2;
}

be_simd_t be_simd_detect(void)
{
    pthread_once(&detect_once, detect);
    return detected_level;
}

const char *be_simd_name(be_simd_t s)
{
    return s == BE_SIMD_AVX512_VNNI ? "avx512vnni" : s == BE_SIMD_AVX2 ? "avx2" : "scalar";
}

const be_type_traits_t *be_type_traits_at(cr_type_t t, be_simd_t level)
{
    /* the detected level (CORRAL_CPU_SIMD caps it), as be_vec_ops_at and
     * be_pack_gemm_at do: a forced level holds for every kernel family */
    be_simd_t have = be_simd_detect();
    if ((unsigned)t >= CR_TYPE__COUNT || !scalar_table[t].name)
        return NULL;
    if (level >= BE_SIMD_AVX512_VNNI && have >= BE_SIMD_AVX512_VNNI)
        return &avx512_table[t];
    if (level >= BE_SIMD_AVX2 && have >= BE_SIMD_AVX2)
        return &avx2_table[t];
    return &scalar_table[t];
}

const be_type_traits_t *be_type_traits_compiled(cr_type_t t, be_simd_t level)
{
    be_simd_detect(); /* fills the AVX2 and AVX-512 tables */
    if ((unsigned)t >= CR_TYPE__COUNT || !scalar_table[t].name)
        return NULL;
    if (level >= BE_SIMD_AVX512_VNNI)
        return &avx512_table[t];
    return level >= BE_SIMD_AVX2 ? &avx2_table[t] : &scalar_table[t];
}

const be_type_traits_t *be_type_traits(cr_type_t t)
{
    return be_type_traits_at(t, be_simd_detect());
}

bool be_type_is_supported(cr_type_t t)
{
    const be_type_traits_t *tt = be_type_traits_at(t, BE_SIMD_SCALAR);
    return tt && tt->vec_dot;
}

void be_f32_to_f16_row(const float *x, uint16_t *y, int64_t n)
{
    be_type_traits(CR_TYPE_F16)->from_float(x, y, n);
}

void be_f16_to_f32_row(const uint16_t *x, float *y, int64_t n)
{
    be_type_traits(CR_TYPE_F16)->to_float(x, y, n);
}
