/* quant_k.c: scalar reference kernels for the K-quants Q2_K, Q3_K, Q4_K and
 * Q5_K (Q6_K and Q8_K live in quant.c): dequantize, quantize and the dot
 * product with Q8_K activations. Layouts are documented in quant.h.
 *
 * Dot products follow llama.cpp's numerics: per super-block the int8 x quant
 * products are summed exactly in integers per sub-block, weighted by the
 * integer sub-block scales (and mins against the activation block sums), and
 * only then scaled by d * a.d (and dmin * a.d) in float.
 *
 * The quantizers are deterministic and simpler than GGML's (no importance
 * weights). Per sub-block, the better (in squared error) of a fit that
 * covers the whole range and a least-squares search over step sizes with
 * the integer scale (and min) nudged by -1..+1, the latter only if it clips
 * no value by more than one step (K_CLIP_STEPS). On N(0,1) data the
 * relative rms error is about 0.26 (Q2_K), 0.071 (Q4_K), 0.035 (Q5_K); the
 * least-squares candidates take 10-25% off the covering fit's error.
 * test_quant checks the bounds. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant_impl.h"

#include <math.h>

/* Relative margin on super-scales so that rounding them to f16 (2^-11) can
 * never push a rounded-up integer scale past its maximum. */
#define F16_MARGIN (1.0f + 1.0f / 512.0f)

/* ---- shared asymmetric fit ------------------------------------------- */

/* Quant of v in a sub-block with step ds and offset dm (value = ds*q - dm). */
static int quant_asym(float v, float ds, float dm, int qmax)
{
    return ds > 0 ? be_round_clamp((v + dm) / ds, 0, qmax) : 0;
}

/* Squared error of len values quantized to the nearest of ds*q - dm. */
static float sub_sse(const float *x, int len, float ds, float dm, int qmax)
{
    float e = 0;
    for (int i = 0; i < len; i++) {
        float v = ds * (float)quant_asym(x[i], ds, dm, qmax) - dm - x[i];
        e += v * v;
    }
    return e;
}

/* Float step and offset (value = step*q - off, off >= 0 as the format
 * needs) for one sub-block: tries 21 step sizes from qmax-1 to qmax+1
 * levels over [min(0, lo), hi] and, for each candidate's quants, the least
 * squares step and offset; returns the one with the smallest squared error
 * (the plain min/max fit if none is better). */
static void fit_sub_block(const float *x, int len, int qmax, float *step, float *off)
{
    float lo = 0, hi = -INFINITY;
    for (int i = 0; i < len; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    *step = 0;
    *off = -lo;
    if (!(hi > lo) || !isfinite(hi - lo))
        return;
    *step = (hi - lo) / (float)qmax;
    float best = sub_sse(x, len, *step, *off, qmax);
    for (int t = 0; t <= 20; t++) {
        float iscale = ((float)qmax - 1.0f + 0.1f * (float)t) / (hi - lo);
        double sq = 0, sqq = 0, sx = 0, sqx = 0;
        for (int i = 0; i < len; i++) {
            int q = be_round_clamp((x[i] - lo) * iscale, 0, qmax);
            sq += q;
            sqq += (double)q * q;
            sx += x[i];
            sqx += q * (double)x[i];
        }
        double det = len * sqq - sq * sq;
        if (!(det > 0))
            continue;
        double s = (len * sqx - sq * sx) / det, c = (sqq * sx - sq * sqx) / det;
        if (c > 0) { /* the offset can only lower values */
            c = 0;
            s = sqx / sqq;
        }
        if (!(s > 0))
            continue;
        float e = sub_sse(x, len, (float)s, (float)-c, qmax);
        if (e < best) {
            best = e;
            *step = (float)s;
            *off = (float)-c;
        }
    }
}

/* True if no value lies more than K_CLIP_STEPS steps outside the range
 * [-dm, ds*qmax - dm] that the sub-block can represent. */
#define K_CLIP_STEPS 1.0f
static bool clip_ok(const float *x, int len, float ds, float dm, int qmax)
{
    float lo = -dm - K_CLIP_STEPS * ds, hi = ds * (float)qmax - dm + K_CLIP_STEPS * ds;
    for (int i = 0; i < len; i++)
        if (x[i] < lo || x[i] > hi)
            return false;
    return true;
}

/* For nsub sub-blocks of len elements of x, picks integer scales sc[] and
 * mins m[] in 0..smax sharing f16 super-scales *d and *dmin (value =
 * d*sc*q - dmin*m, q in 0..qmax).
 *
 * The super-scales come from the covering fit: each sub-block's mins and
 * then scales rounded up so that [min(0, lo), hi] is representable (every
 * element then within half a step). Candidates per sub-block: that covering
 * pair, and the least-squares fit of fit_sub_block rounded to the grid with
 * its scale and min each moved by -1..+1; the pair with the smallest
 * squared error wins among those that clip no value by more than
 * K_CLIP_STEPS steps (the covering pair always qualifies). */
static void fit_scales_mins(const float *x, int nsub, int len, int qmax, int smax,
                            uint16_t *d, uint16_t *dmin, uint8_t *sc, uint8_t *m)
{
    float hi[16], need[16], max_min = 0, max_scale = 0;
    for (int j = 0; j < nsub; j++) {
        float lo = 0, h = -INFINITY;
        for (int i = 0; i < len; i++) {
            lo = fminf(lo, x[j * len + i]);
            h = fmaxf(h, x[j * len + i]);
        }
        hi[j] = h;
        need[j] = -lo;
        max_min = fmaxf(max_min, need[j]);
    }
    *dmin = be_f32_to_f16(max_min / (float)smax * F16_MARGIN);
    float dmf = be_f16_to_f32(*dmin);
    for (int j = 0; j < nsub; j++) {
        m[j] = dmf > 0 ? (uint8_t)be_round_clamp(ceilf(need[j] / dmf), 0, smax) : 0;
        need[j] = (hi[j] + dmf * (float)m[j]) / (float)qmax;
        max_scale = fmaxf(max_scale, need[j]);
    }
    *d = be_f32_to_f16(max_scale / (float)smax * F16_MARGIN);
    float df = be_f16_to_f32(*d);
    for (int j = 0; j < nsub; j++) {
        const float *v = x + j * len;
        sc[j] = df > 0 ? (uint8_t)be_round_clamp(ceilf(need[j] / df), 0, smax) : 0;
        if (!(df > 0) || !(dmf >= 0))
            continue;
        float best = sub_sse(v, len, df * (float)sc[j], dmf * (float)m[j], qmax);
        float step, off;
        fit_sub_block(v, len, qmax, &step, &off);
        int sc0 = be_round_clamp(step / df, 0, smax);
        int m0 = dmf > 0 ? be_round_clamp(off / dmf, 0, smax) : 0;
        for (int a = -1; a <= 1; a++) {
            for (int b = -1; b <= 1; b++) {
                int s2 = sc0 + a, m2 = m0 + b;
                if (s2 < 1 || s2 > smax || m2 < 0 || m2 > smax)
                    continue;
                float ds = df * (float)s2, dm = dmf * (float)m2;
                float e = sub_sse(v, len, ds, dm, qmax);
                if (e < best && clip_ok(v, len, ds, dm, qmax)) {
                    best = e;
                    sc[j] = (uint8_t)s2;
                    m[j] = (uint8_t)m2;
                }
            }
        }
    }
}

/* ---- Q2_K ------------------------------------------------------------- */

/* The 256 quants (0..3) of a block in element order. */
static void q2_k_unpack(const be_block_q2_k_t *b, uint8_t q[BE_QK_K])
{
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                q[128 * h + 32 * j + l] = (b->qs[32 * h + l] >> (2 * j)) & 3;
}

void be_q2_k_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q2_k_t *b = x;
    uint8_t q[BE_QK_K];
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        float d = be_f16_to_f32(b[i].d), dmin = be_f16_to_f32(b[i].dmin);
        q2_k_unpack(&b[i], q);
        for (int k = 0; k < 16; k++) {
            float dl = d * (float)(b[i].scales[k] & 15);
            float ml = dmin * (float)(b[i].scales[k] >> 4);
            for (int l = 0; l < 16; l++)
                y[i * BE_QK_K + 16 * k + l] = dl * (float)q[16 * k + l] - ml;
        }
    }
}

void be_q2_k_from_float(const float *x, void *y, int64_t n)
{
    be_block_q2_k_t *b = y;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const float *v = x + i * BE_QK_K;
        uint8_t sc[16], m[16];
        memset(&b[i], 0, sizeof b[i]);
        fit_scales_mins(v, 16, 16, 3, 15, &b[i].d, &b[i].dmin, sc, m);
        float d = be_f16_to_f32(b[i].d), dmin = be_f16_to_f32(b[i].dmin);
        for (int k = 0; k < 16; k++)
            b[i].scales[k] = (uint8_t)(sc[k] | (m[k] << 4));
        for (int e = 0; e < BE_QK_K; e++) {
            int k = e / 16;
            int q = quant_asym(v[e], d * (float)sc[k], dmin * (float)m[k], 3);
            int h = e / 128, j = (e % 128) / 32, l = e % 32;
            b[i].qs[32 * h + l] |= (uint8_t)(q << (2 * j));
        }
    }
}

void be_q2_k_dot(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q2_k_t *x = w;
    const be_block_q8_k_t *y = a;
    uint8_t q[BE_QK_K];
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        q2_k_unpack(&x[i], q);
        int32_t isum = 0, msum = 0;
        for (int k = 0; k < 16; k++) {
            int32_t sub = 0;
            for (int l = 0; l < 16; l++)
                sub += (int32_t)q[16 * k + l] * (int32_t)y[i].qs[16 * k + l];
            isum += sub * (x[i].scales[k] & 15);
            msum += (int32_t)(x[i].scales[k] >> 4) * (int32_t)y[i].bsums[k];
        }
        float dall = y[i].d * be_f16_to_f32(x[i].d);
        float dmin = y[i].d * be_f16_to_f32(x[i].dmin);
        sum += dall * (float)isum - dmin * (float)msum;
    }
    *s = sum;
}

/* ---- Q3_K ------------------------------------------------------------- */

/* The 256 quants (-4..3) of a block in element order. */
static void q3_k_unpack(const be_block_q3_k_t *b, int8_t q[BE_QK_K])
{
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) {
                int low = (b->qs[32 * h + l] >> (2 * j)) & 3;
                int high = (b->hmask[l] >> (4 * h + j)) & 1;
                q[128 * h + 32 * j + l] = (int8_t)(low - (high ? 0 : 4));
            }
}

void be_q3_k_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q3_k_t *b = x;
    int8_t q[BE_QK_K], sc[16];
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        float d = be_f16_to_f32(b[i].d);
        q3_k_unpack(&b[i], q);
        be_q3_k_scales(b[i].scales, sc);
        for (int k = 0; k < 16; k++) {
            float dl = d * (float)sc[k];
            for (int l = 0; l < 16; l++)
                y[i * BE_QK_K + 16 * k + l] = dl * (float)q[16 * k + l];
        }
    }
}

/* Squared error of len values quantized to the nearest ds*q, q in -4..3. */
static float q3_sse(const float *x, int len, float ds)
{
    float e = 0;
    for (int i = 0; i < len; i++) {
        float v = ds * (float)(ds != 0 ? be_round_clamp(x[i] / ds, -4, 3) : 0) - x[i];
        e += v * v;
    }
    return e;
}

/* True if no value lies more than K_CLIP_STEPS steps outside the range
 * ds*[-4, 3] (either sign of ds). */
static bool q3_clip_ok(const float *x, int len, float ds)
{
    float a = fabsf(ds);
    float lo = fminf(-4 * ds, 3 * ds) - K_CLIP_STEPS * a;
    float hi = fmaxf(-4 * ds, 3 * ds) + K_CLIP_STEPS * a;
    for (int i = 0; i < len; i++)
        if (x[i] < lo || x[i] > hi)
            return false;
    return true;
}

/* Least-squares signed step for one sub-block: both signs, the largest
 * magnitude mapped to 3.0 .. 4.5 levels, each candidate's quants refit by
 * s = sum(q x) / sum(q q); the one with the smallest squared error. */
static float q3_fit(const float *x, int len, float amax)
{
    float best_s = 0, best = INFINITY;
    if (!(amax > 0) || !isfinite(amax))
        return 0;
    for (int sign = -1; sign <= 1; sign += 2) {
        for (int t = 0; t <= 15; t++) {
            float ds = (float)sign * amax / (3.0f + 0.1f * (float)t);
            double sqx = 0, sqq = 0;
            for (int i = 0; i < len; i++) {
                int q = be_round_clamp(x[i] / ds, -4, 3);
                sqx += q * (double)x[i];
                sqq += (double)q * q;
            }
            if (!(sqq > 0))
                continue;
            float s = (float)(sqx / sqq);
            float e = q3_sse(x, len, s);
            if (e < best) {
                best = e;
                best_s = s;
            }
        }
    }
    return best_s;
}

/* Covering fit: each sub-block's largest-magnitude value maps to -4 (as in
 * Q4_0) and the magnitudes of the 16 signed scales, sharing one f16
 * super-scale, are rounded up, so every element is within one step (the
 * side opposite the largest magnitude clamps at +3). Then, as for Q4_K, a
 * least-squares fit rounded to the grid with the scale moved by -1..+1
 * replaces it where its squared error is smaller and it clips no value by
 * more than K_CLIP_STEPS steps past the range it can represent. */
void be_q3_k_from_float(const float *x, void *y, int64_t n)
{
    be_block_q3_k_t *b = y;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const float *v = x + i * BE_QK_K;
        float want[16], amaxs[16], amax_s = 0;
        for (int k = 0; k < 16; k++) {
            float amax = 0, max = 0;
            for (int l = 0; l < 16; l++) {
                if (fabsf(v[16 * k + l]) > amax) {
                    amax = fabsf(v[16 * k + l]);
                    max = v[16 * k + l];
                }
            }
            want[k] = max / -4.0f;
            amaxs[k] = amax;
            amax_s = fmaxf(amax_s, fabsf(want[k]));
        }
        memset(&b[i], 0, sizeof b[i]);
        b[i].d = be_f32_to_f16(amax_s / 31.0f * F16_MARGIN);
        float d = be_f16_to_f32(b[i].d);
        for (int k = 0; k < 16; k++) {
            const float *vk = v + 16 * k;
            int mag = d > 0 ? be_round_clamp(ceilf(fabsf(want[k]) / d), 0, 31) : 0;
            int sc = want[k] < 0 ? -mag : mag;
            if (d > 0 && isfinite(d)) {
                float best = q3_sse(vk, 16, d * (float)sc);
                int s0 = be_round_clamp(q3_fit(vk, 16, amaxs[k]) / d, -32, 31);
                for (int a = -1; a <= 1; a++) {
                    int s2 = s0 + a;
                    if (s2 == 0 || s2 < -32 || s2 > 31)
                        continue;
                    float e = q3_sse(vk, 16, d * (float)s2);
                    if (e < best && q3_clip_ok(vk, 16, d * (float)s2)) {
                        best = e;
                        sc = s2;
                    }
                }
            }
            int u = sc + 32; /* stored 6-bit value */
            if (k < 8)
                b[i].scales[k] |= (uint8_t)(u & 15);
            else
                b[i].scales[k - 8] |= (uint8_t)((u & 15) << 4);
            b[i].scales[8 + k % 4] |= (uint8_t)((u >> 4) << (2 * (k / 4)));
            float ds = d * (float)sc;
            for (int l = 0; l < 16; l++) {
                int e = 16 * k + l;
                int q = ds != 0 ? be_round_clamp(v[e] / ds, -4, 3) : 0;
                int uq = q + 4; /* 0..7: bit 2 is the hmask bit */
                int h = e / 128, j = (e % 128) / 32, ll = e % 32;
                b[i].qs[32 * h + ll] |= (uint8_t)((uq & 3) << (2 * j));
                if (uq & 4)
                    b[i].hmask[ll] |= (uint8_t)(1u << (4 * h + j));
            }
        }
    }
}

void be_q3_k_dot(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q3_k_t *x = w;
    const be_block_q8_k_t *y = a;
    int8_t q[BE_QK_K], sc[16];
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        q3_k_unpack(&x[i], q);
        be_q3_k_scales(x[i].scales, sc);
        int32_t isum = 0;
        for (int k = 0; k < 16; k++) {
            int32_t sub = 0;
            for (int l = 0; l < 16; l++)
                sub += (int32_t)q[16 * k + l] * (int32_t)y[i].qs[16 * k + l];
            isum += sub * sc[k];
        }
        sum += be_f16_to_f32(x[i].d) * y[i].d * (float)isum;
    }
    *s = sum;
}

/* ---- Q4_K / Q5_K ------------------------------------------------------ */

/* Inverse of be_k4_scale_min: packs 8 6-bit scales and mins. */
static void k4_pack_scales(const uint8_t sc[8], const uint8_t m[8], uint8_t s[12])
{
    memset(s, 0, BE_K_SCALE_SIZE);
    for (int j = 0; j < 4; j++) {
        s[j] = sc[j];
        s[j + 4] = m[j];
    }
    for (int j = 4; j < 8; j++) {
        s[j + 4] = (uint8_t)((sc[j] & 15) | ((m[j] & 15) << 4));
        s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        s[j] |= (uint8_t)((m[j] >> 4) << 6);
    }
}

/* Quants in element order: 4 low bits from qs, bit 4 from qh if given. */
static void k4_unpack(const uint8_t *qs, const uint8_t *qh, uint8_t q[BE_QK_K])
{
    for (int i = 0; i < 4; i++)
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * i + l] & 15, hi = qs[32 * i + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * i)) & 1) << 4;
                hi |= ((qh[l] >> (2 * i + 1)) & 1) << 4;
            }
            q[64 * i + l] = (uint8_t)lo;
            q[64 * i + 32 + l] = (uint8_t)hi;
        }
}

static void k4_to_float(uint16_t dh, uint16_t dminh, const uint8_t *scales,
                        const uint8_t q[BE_QK_K], float *y)
{
    float d = be_f16_to_f32(dh), dmin = be_f16_to_f32(dminh);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        be_k4_scale_min(j, scales, &sc, &m);
        float dl = d * (float)sc, ml = dmin * (float)m;
        for (int l = 0; l < 32; l++)
            y[32 * j + l] = dl * (float)q[32 * j + l] - ml;
    }
}

/* Fits one super-block; fills scales, d, dmin and the quants (0..qmax). */
static void k4_quantize(const float *v, int qmax, uint16_t *d, uint16_t *dmin,
                        uint8_t scales[12], uint8_t q[BE_QK_K])
{
    uint8_t sc[8], m[8];
    fit_scales_mins(v, 8, 32, qmax, 63, d, dmin, sc, m);
    k4_pack_scales(sc, m, scales);
    float df = be_f16_to_f32(*d), dmf = be_f16_to_f32(*dmin);
    for (int e = 0; e < BE_QK_K; e++)
        q[e] = (uint8_t)quant_asym(v[e], df * (float)sc[e / 32], dmf * (float)m[e / 32],
                                   qmax);
}

/* Integer part of the dot product: sum_j sc_j * sum(q*a) and
 * sum_j m_j * (activation sum of sub-block j). */
static void k4_isums(const uint8_t *scales, const uint8_t q[BE_QK_K],
                     const be_block_q8_k_t *y, int32_t *isum, int32_t *msum)
{
    *isum = 0;
    *msum = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        be_k4_scale_min(j, scales, &sc, &m);
        int32_t sub = 0;
        for (int l = 0; l < 32; l++)
            sub += (int32_t)q[32 * j + l] * (int32_t)y->qs[32 * j + l];
        *isum += sub * sc;
        *msum += (int32_t)m * ((int32_t)y->bsums[2 * j] + (int32_t)y->bsums[2 * j + 1]);
    }
}

void be_q4_k_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q4_k_t *b = x;
    uint8_t q[BE_QK_K];
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        k4_unpack(b[i].qs, NULL, q);
        k4_to_float(b[i].d, b[i].dmin, b[i].scales, q, y + i * BE_QK_K);
    }
}

void be_q4_k_from_float(const float *x, void *y, int64_t n)
{
    be_block_q4_k_t *b = y;
    uint8_t q[BE_QK_K];
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        k4_quantize(x + i * BE_QK_K, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                b[i].qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
    }
}

void be_q4_k_dot(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q4_k_t *x = w;
    const be_block_q8_k_t *y = a;
    uint8_t q[BE_QK_K];
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        int32_t isum, msum;
        k4_unpack(x[i].qs, NULL, q);
        k4_isums(x[i].scales, q, &y[i], &isum, &msum);
        float d = y[i].d * be_f16_to_f32(x[i].d);
        float dmin = y[i].d * be_f16_to_f32(x[i].dmin);
        sum += d * (float)isum - dmin * (float)msum;
    }
    *s = sum;
}

void be_q5_k_to_float(const void *x, float *y, int64_t n)
{
    const be_block_q5_k_t *b = x;
    uint8_t q[BE_QK_K];
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        k4_unpack(b[i].qs, b[i].qh, q);
        k4_to_float(b[i].d, b[i].dmin, b[i].scales, q, y + i * BE_QK_K);
    }
}

void be_q5_k_from_float(const float *x, void *y, int64_t n)
{
    be_block_q5_k_t *b = y;
    uint8_t q[BE_QK_K];
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        k4_quantize(x + i * BE_QK_K, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
        memset(b[i].qh, 0, sizeof b[i].qh);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) {
                uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
                b[i].qs[32 * c + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                b[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
    }
}

void be_q5_k_dot(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q5_k_t *x = w;
    const be_block_q8_k_t *y = a;
    uint8_t q[BE_QK_K];
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        int32_t isum, msum;
        k4_unpack(x[i].qs, x[i].qh, q);
        k4_isums(x[i].scales, q, &y[i], &isum, &msum);
        float d = y[i].d * be_f16_to_f32(x[i].d);
        float dmin = y[i].d * be_f16_to_f32(x[i].dmin);
        sum += d * (float)isum - dmin * (float)msum;
    }
    *s = sum;
}
