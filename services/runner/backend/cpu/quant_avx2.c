/* quant_avx2.c: AVX2 + FMA + F16C versions of the dot products in quant.c.
 *
 * Every function here is compiled for that target alone (the rest of the
 * library stays baseline x86-64) and is only reached through the traits
 * table after run-time detection. Same contracts as the scalar kernels;
 * results differ from them only by float summation order (int8 block sums
 * are exact in both). On other architectures these are scalar stubs that are
 * never selected. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_impl.h"
#include "services/runner/backend/cpu/quant_simd.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

static inline AVX2 float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline AVX2 int32_t hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v),
                              _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

/* Sum of x[i]*y[i] over pairs, as 8 int32 lanes. x and y are signed int8;
 * the sign trick makes the left operand unsigned for maddubs. Activations
 * are within [-127, 127], so the int16 pair sums cannot saturate. */
static inline AVX2 __m256i dot_i8_epi32(__m256i x, __m256i y)
{
    __m256i ax = _mm256_sign_epi8(x, x);
    __m256i sy = _mm256_sign_epi8(y, x);
    __m256i d16 = _mm256_maddubs_epi16(ax, sy);
    return _mm256_madd_epi16(d16, _mm256_set1_epi16(1));
}

static inline AVX2 __m256 load_f16x8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* Eight values at element i of a row of F16 (f16) or F32 values, as
 * floats; one value. */
static inline AVX2 __m256 load8(const void *p, int64_t i, bool f16)
{
    return f16 ? load_f16x8((const uint16_t *)p + i) : _mm256_loadu_ps((const float *)p + i);
}

static inline float elem(const void *p, int64_t i, bool f16)
{
    return f16 ? be_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* The F32 and F16 dots' one body: four 8-lane FMA chains over blocks of
 * 32, 8-element steps into the first, the horizontal sum, the tail in
 * order. x16 / y16 say which row is F16; inlined with constant flags, each
 * dot is its own straight loop, and the same values give the same bits
 * whichever form a row is held in (an F16 query as floats, say). */
static inline AVX2 __attribute__((always_inline)) float dot_body(int64_t n, const void *x,
                                                                 bool x16, const void *y,
                                                                 bool y16)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    __m256 acc2 = _mm256_setzero_ps(), acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(load8(x, i, x16), load8(y, i, y16), acc0);
        acc1 = _mm256_fmadd_ps(load8(x, i + 8, x16), load8(y, i + 8, y16), acc1);
        acc2 = _mm256_fmadd_ps(load8(x, i + 16, x16), load8(y, i + 16, y16), acc2);
        acc3 = _mm256_fmadd_ps(load8(x, i + 24, x16), load8(y, i + 24, y16), acc3);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(load8(x, i, x16), load8(y, i, y16), acc0);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc0, acc1),
                                      _mm256_add_ps(acc2, acc3)));
    for (; i < n; i++)
        sum += elem(x, i, x16) * elem(y, i, y16);
    return sum;
}

AVX2 void be_avx2_dot_f32(int64_t n, float *s, const void *w, const void *a)
{
    *s = dot_body(n, w, false, a, false);
}

AVX2 void be_avx2_dot_f16(int64_t n, float *s, const void *w, const void *a)
{
    *s = dot_body(n, w, true, a, true);
}

AVX2 void be_avx2_dot_f16_q32(int64_t n, float *s, const uint16_t *k, const float *q)
{
    *s = dot_body(n, k, true, q, false);
}

AVX2 void be_avx2_dot2_f16_q32(int64_t n, float *s, const uint16_t *k, const float *q0,
                               const float *q1)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    __m256 b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256 k0 = load_f16x8(k + i), k1 = load_f16x8(k + i + 8);
        __m256 k2 = load_f16x8(k + i + 16), k3 = load_f16x8(k + i + 24);
        a0 = _mm256_fmadd_ps(k0, _mm256_loadu_ps(q0 + i), a0);
        b0 = _mm256_fmadd_ps(k0, _mm256_loadu_ps(q1 + i), b0);
        a1 = _mm256_fmadd_ps(k1, _mm256_loadu_ps(q0 + i + 8), a1);
        b1 = _mm256_fmadd_ps(k1, _mm256_loadu_ps(q1 + i + 8), b1);
        a2 = _mm256_fmadd_ps(k2, _mm256_loadu_ps(q0 + i + 16), a2);
        b2 = _mm256_fmadd_ps(k2, _mm256_loadu_ps(q1 + i + 16), b2);
        a3 = _mm256_fmadd_ps(k3, _mm256_loadu_ps(q0 + i + 24), a3);
        b3 = _mm256_fmadd_ps(k3, _mm256_loadu_ps(q1 + i + 24), b3);
    }
    for (; i + 8 <= n; i += 8) {
        __m256 k0 = load_f16x8(k + i);
        a0 = _mm256_fmadd_ps(k0, _mm256_loadu_ps(q0 + i), a0);
        b0 = _mm256_fmadd_ps(k0, _mm256_loadu_ps(q1 + i), b0);
    }
    float sa = hsum_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    float sb = hsum_ps(_mm256_add_ps(_mm256_add_ps(b0, b1), _mm256_add_ps(b2, b3)));
    for (; i < n; i++) {
        float x = be_f16_to_f32(k[i]);
        sa += x * q0[i];
        sb += x * q1[i];
    }
    s[0] = sa, s[1] = sb;
}

static inline AVX2 __m256 load_bf16x8(const uint16_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

AVX2 void be_avx2_dot_bf16(int64_t n, float *s, const void *w, const void *a)
{
    const uint16_t *x = w, *y = a;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), acc0);
        acc1 = _mm256_fmadd_ps(load_bf16x8(x + i + 8), load_bf16x8(y + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8)
        acc0 = _mm256_fmadd_ps(load_bf16x8(x + i), load_bf16x8(y + i), acc0);
    float sum = hsum_ps(_mm256_add_ps(acc0, acc1));
    for (; i < n; i++)
        sum += be_bf16_to_f32(x[i]) * be_bf16_to_f32(y[i]);
    *s = sum;
}

AVX2 void be_avx2_dot_q8_0(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q8_0_t *x = w, *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d) * _cvtsh_ss(y[i].d));
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_epi32(qx, qy)), acc);
    }
    *s = hsum_ps(acc);
}

AVX2 void be_avx2_dot_q4_0(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q4_0_t *x = w;
    const be_block_q8_0_t *y = a;
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d) * _cvtsh_ss(y[i].d));
        /* Low lane: bytes' low nibbles (elements 0..15); high lane: high
         * nibbles (elements 16..31). */
        __m128i raw = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(raw),
                                            _mm_srli_epi16(raw, 4), 1);
        q = _mm256_sub_epi8(_mm256_and_si256(q, low4), eight);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_epi32(q, qy)), acc);
    }
    *s = hsum_ps(acc);
}

/* ---- table formats (IQ4_NL, IQ4_XS, MXFP4) ------------------------------ */

/* A 16-entry int8 table in both 128-bit lanes, for pshufb lookups. */
static inline AVX2 __m256i load_table16(const int8_t *t)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)t));
}

/* The table values of one 32-element group of 4-bit indices, in element
 * order: byte j's low nibbles (elements 0..15) in the low lane, its high
 * nibbles (16..31) in the high lane. */
static inline AVX2 __m256i table_lookup32(const uint8_t *qs, __m256i table)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m256i idx = _mm256_inserti128_si256(_mm256_castsi128_si256(raw),
                                          _mm_srli_epi16(raw, 4), 1);
    return _mm256_shuffle_epi8(table, _mm256_and_si256(idx, _mm256_set1_epi8(0x0f)));
}

/* Products w*a summed in adjacent pairs, as 16 int16 lanes. The activation
 * is the unsigned operand (its magnitude, -128 included: Q8_K may hold it)
 * and w takes a's sign; table values are within [-127, 127], so a pair
 * sum is at most 2 x 128 x 127 and never saturates. */
static inline AVX2 __m256i table_dot_pairs(__m256i w, __m256i a)
{
    return _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(w, a));
}

AVX2 void be_avx2_dot_iq4_nl(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_iq4_nl_t *x = w;
    const be_block_q8_0_t *y = a;
    const __m256i table = load_table16(be_iq4_nl_values);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i p = _mm256_madd_epi16(table_dot_pairs(table_lookup32(x[i].qs, table), qy), ones);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d) * _cvtsh_ss(y[i].d));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum_ps(acc);
}

AVX2 void be_avx2_dot_mxfp4(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_mxfp4_t *x = w;
    const be_block_q8_0_t *y = a;
    const __m256i table = load_table16(be_mxfp4_values);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i p = _mm256_madd_epi16(table_dot_pairs(table_lookup32(x[i].qs, table), qy), ones);
        __m256 d = _mm256_set1_ps(_cvtsh_ss(y[i].d) * be_e8m0_half(x[i].e));
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
    }
    *s = hsum_ps(acc);
}

/* IQ4_XS: each sub-block's pair sums meet its scale in an int16
 * multiply-add (|scale| <= 32: at most 2 x 32 x 32512 per lane), so the
 * super-block's sum is the scalar kernel's exact integer and the one float
 * step after it the same: same bits. Two sub-blocks share one 32-byte load
 * of indices (2.0x faster than one 16-byte group at a time in
 * bench-kernels: 7.4 -> 14.6 GB/s). */
AVX2 void be_avx2_dot_iq4_xs(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_iq4_xs_t *x = w;
    const be_block_q8_k_t *y = a;
    const __m256i table = load_table16(be_iq4_nl_values);
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        __m256i acc = _mm256_setzero_si256();
        /* sub-blocks 2p and 2p+1: one 32-byte load of their indices; the
         * low nibbles of both, then the high ones, regrouped per sub-block */
        for (int p = 0; p < 4; p++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * p));
            __m256i lo = _mm256_and_si256(raw, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            __m256i w0 = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x20));
            __m256i w1 = _mm256_shuffle_epi8(table, _mm256_permute2x128_si256(lo, hi, 0x31));
            const int8_t *q8 = y[i].qs + 64 * p;
            __m256i p0 = table_dot_pairs(w0, _mm256_loadu_si256((const __m256i *)q8));
            __m256i p1 = table_dot_pairs(w1, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            int u0 = (x[i].scales_l[p] & 15) | (((x[i].scales_h >> (4 * p)) & 3) << 4);
            int u1 = (x[i].scales_l[p] >> 4) | (((x[i].scales_h >> (4 * p + 2)) & 3) << 4);
            __m256i s0 = _mm256_set1_epi16((int16_t)(u0 - 32));
            __m256i s1 = _mm256_set1_epi16((int16_t)(u1 - 32));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p0, s0));
            acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p1, s1));
        }
        sum += (_cvtsh_ss(x[i].d) * y[i].d) * (float)hsum_epi32(acc);
    }
    *s = sum;
}

/* Q6_K: the unsigned 6-bit quants (0..63) multiply the activations with
 * maddubs directly; the -32 offset is folded in afterwards through the
 * activation block sums: sum sc*(q-32)*a = sum sc*q*a - 32*sum sc*bsum. */
AVX2 void be_avx2_dot_q6_k(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q6_k_t *x = w;
    const be_block_q8_k_t *y = a;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m2 = _mm256_set1_epi8(0x03);
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h;
            const uint8_t *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            const int8_t *q8 = y[i].qs + 128 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
            q[1] = _mm256_or_si256(
                _mm256_and_si256(l1, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
            q[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
            q[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
            for (int k = 0; k < 4; k++) {
                __m256i a8 = _mm256_loadu_si256((const __m256i *)(q8 + 32 * k));
                __m256i p16 = _mm256_maddubs_epi16(q[k], a8);
                __m256i scv = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_set1_epi16(sc[2 * k])),
                    _mm_set1_epi16(sc[2 * k + 1]), 1);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p16, scv));
            }
        }
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        int32_t isum = hsum_epi32(acc);
        int32_t off = hsum_epi32(_mm256_madd_epi16(sc16, bs));
        isum -= 32 * off;
        sum += _cvtsh_ss(x[i].d) * y[i].d * (float)isum;
    }
    *s = sum;
}

/* Unsigned 4-bit quants of a 32-element block as 32 bytes: low lane the low
 * nibbles (elements 0..15), high lane the high nibbles (16..31). */
static inline AVX2 __m256i nibbles32(const uint8_t *qs)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(raw),
                                        _mm_srli_epi16(raw, 4), 1);
    return _mm256_and_si256(q, _mm256_set1_epi8(0x0f));
}

/* Bit 4 of the 32 elements of a Q5 block: byte e is 16 if bit e of qh (a
 * little-endian uint32) is set, else 0. Byte e/8 of qh is broadcast to
 * bytes 8*(e/8)..+7, then each byte tests its own bit. */
static inline AVX2 __m256i q5_high_bits(const uint8_t qh[4])
{
    uint32_t v;
    memcpy(&v, qh, sizeof v);
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101LL,
                                              0x0202020202020202LL,
                                              0x0303030303030303LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), spread);
    b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
    return _mm256_and_si256(b, _mm256_set1_epi8(16));
}

/* Sum of u[i]*y[i] as 8 int32 lanes, u unsigned (<= 31), y signed int8:
 * pair sums stay far below int16 saturation (2 * 31 * 128). */
static inline AVX2 __m256i dot_u8_epi32(__m256i u, __m256i y)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

AVX2 void be_avx2_dot_q4_1(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q4_1_t *x = w;
    const be_block_q8_1_t *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d) * _cvtsh_ss(y[i].d));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i p = dot_u8_epi32(nibbles32(x[i].qs), qy);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
        summ += _cvtsh_ss(x[i].m) * _cvtsh_ss(y[i].s);
    }
    *s = hsum_ps(acc) + summ;
}

AVX2 void be_avx2_dot_q5_0(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q5_0_t *x = w;
    const be_block_q8_0_t *y = a;
    const __m256i sixteen = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d) * _cvtsh_ss(y[i].d));
        __m256i q = _mm256_or_si256(nibbles32(x[i].qs), q5_high_bits(x[i].qh));
        q = _mm256_sub_epi8(q, sixteen);
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8_epi32(q, qy)), acc);
    }
    *s = hsum_ps(acc);
}

AVX2 void be_avx2_dot_q5_1(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q5_1_t *x = w;
    const be_block_q8_1_t *y = a;
    __m256 acc = _mm256_setzero_ps();
    float summ = 0;
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        __m256 d = _mm256_set1_ps(_cvtsh_ss(x[i].d) * _cvtsh_ss(y[i].d));
        __m256i q = _mm256_or_si256(nibbles32(x[i].qs), q5_high_bits(x[i].qh));
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_u8_epi32(q, qy)), acc);
        summ += _cvtsh_ss(x[i].m) * _cvtsh_ss(y[i].s);
    }
    *s = hsum_ps(acc) + summ;
}

/* Two 16-element sub-block scales as int16 lanes: s0 in the low 128 bits,
 * s1 in the high (matching 32 quants of two consecutive sub-blocks). */
static inline AVX2 __m256i scale_pair(int s0, int s1)
{
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)s0)),
                                   _mm_set1_epi16((short)s1), 1);
}

/* Q2_K: 2-bit quants times activations per 16-element sub-block, weighted
 * by the 4-bit scales; the mins meet the activation block sums. Integer
 * parts are exact, float steps as in the scalar kernel (same result). */
AVX2 void be_avx2_dot_q2_k(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q2_k_t *x = w;
    const be_block_q8_k_t *y = a;
    const __m256i m3 = _mm256_set1_epi8(3);
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m3);
                const int8_t *ay = y[i].qs + 128 * h + 32 * j;
                __m256i p = _mm256_maddubs_epi16(q, _mm256_loadu_si256((const __m256i *)ay));
                int k = 8 * h + 2 * j;
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(
                    p, scale_pair(x[i].scales[k] & 15, x[i].scales[k + 1] & 15)));
            }
        }
        int32_t isum = hsum_epi32(acc), msum = 0;
        for (int k = 0; k < 16; k++)
            msum += (int32_t)(x[i].scales[k] >> 4) * (int32_t)y[i].bsums[k];
        float dall = y[i].d * _cvtsh_ss(x[i].d);
        float dmin = y[i].d * _cvtsh_ss(x[i].dmin);
        sum += dall * (float)isum - dmin * (float)msum;
    }
    *s = sum;
}

/* Q3_K: the quants are used unsigned (low | hbit << 2, 0..7) and the -4
 * offset folded in through the activation block sums:
 * sum sc*(u-4)*a = sum sc*u*a - 4 * sum sc*bsum. */
AVX2 void be_avx2_dot_q3_k(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q3_k_t *x = w;
    const be_block_q8_k_t *y = a;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i four = _mm256_set1_epi8(4);
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        /* The 16 6-bit scales from three little-endian words (layout in
         * quant.h): low nibbles of bytes 0..7, then their high nibbles; top
         * bits of scale k at bit 2*(k/4) of byte 8 + k%4. */
        uint32_t w0, w1, w2;
        memcpy(&w0, x[i].scales, 4);
        memcpy(&w1, x[i].scales + 4, 4);
        memcpy(&w2, x[i].scales + 8, 4);
        const uint32_t m4w = 0x0f0f0f0fu, m2w = 0x03030303u;
        __m128i sc6 = _mm_set_epi32((int)(((w1 >> 4) & m4w) | (((w2 >> 6) & m2w) << 4)),
                                    (int)(((w0 >> 4) & m4w) | (((w2 >> 4) & m2w) << 4)),
                                    (int)((w1 & m4w) | (((w2 >> 2) & m2w) << 4)),
                                    (int)((w0 & m4w) | ((w2 & m2w) << 4)));
        __m128i sc8 = _mm_sub_epi8(sc6, _mm_set1_epi8(32));
        int8_t sc[16];
        _mm_storeu_si128((__m128i *)sc, sc8);
        __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
            for (int j = 0; j < 4; j++) {
                __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + j)));
                __m256i hb = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), m3),
                                            _mm256_and_si256(hb, four));
                const int8_t *ay = y[i].qs + 128 * h + 32 * j;
                __m256i p = _mm256_maddubs_epi16(u, _mm256_loadu_si256((const __m256i *)ay));
                int k = 8 * h + 2 * j;
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, scale_pair(sc[k], sc[k + 1])));
            }
        }
        __m256i bs = _mm256_loadu_si256((const __m256i *)y[i].bsums);
        int32_t isum = hsum_epi32(acc);
        int32_t off = hsum_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8), bs));
        isum -= 4 * off;
        sum += _cvtsh_ss(x[i].d) * y[i].d * (float)isum;
    }
    *s = sum;
}

/* Q4_K / Q5_K: 32-byte loads of quants give two 32-element sub-blocks (low
 * and high nibbles); each is multiplied with its activations and weighted
 * by its 6-bit scale; the mins meet the activation block sums. Same float
 * steps as the scalar kernels, so the same results. */
static inline AVX2 float k4_block_dot(const uint8_t *qs, const uint8_t *qh,
                                      const uint8_t *scales, uint16_t dh, uint16_t dminh,
                                      const be_block_q8_k_t *y)
{
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i b4 = _mm256_set1_epi8(16);
    /* The 12 packed bytes as three little-endian words w0 (bytes 0..3),
     * w1 (4..7), w2 (8..11); per the layout, byte-wise:
     * scales 0..3 = w0 & 63, mins 0..3 = w1 & 63,
     * scales 4..7 = (w2 & 15) | (w0 >> 6) << 4,
     * mins 4..7 = (w2 >> 4 & 15) | (w1 >> 6) << 4. */
    uint32_t w0, w1, w2;
    memcpy(&w0, scales, 4);
    memcpy(&w1, scales + 4, 4);
    memcpy(&w2, scales + 8, 4);
    uint32_t sc_lo = w0 & 0x3f3f3f3fu;
    uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
    uint32_t m_lo = w1 & 0x3f3f3f3fu;
    uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
    uint64_t sc64 = (uint64_t)sc_lo | (uint64_t)sc_hi << 32;
    __m256i hbits = qh ? _mm256_loadu_si256((const __m256i *)qh) : _mm256_setzero_si256();
    __m256i acc = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(raw, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if (qh) {
            __m256i bl = _mm256_set1_epi8((char)(1 << (2 * c)));
            __m256i bh = _mm256_set1_epi8((char)(1 << (2 * c + 1)));
            lo = _mm256_or_si256(lo, _mm256_and_si256(
                _mm256_cmpeq_epi8(_mm256_and_si256(hbits, bl), bl), b4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(
                _mm256_cmpeq_epi8(_mm256_and_si256(hbits, bh), bh), b4));
        }
        __m256i a0 = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * c));
        __m256i a1 = _mm256_loadu_si256((const __m256i *)(y->qs + 64 * c + 32));
        __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0),
                                       _mm256_set1_epi16((short)((sc64 >> (16 * c)) & 0xff)));
        __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1),
                                       _mm256_set1_epi16((short)((sc64 >> (16 * c + 8)) & 0xff)));
        acc = _mm256_add_epi32(acc, _mm256_add_epi32(p0, p1));
    }
    /* sum_j min_j * (bsums[2j] + bsums[2j+1]): pair sums by hadd (each
     * <= 2 * 16 * 128, no int16 overflow), then madd with the mins. */
    __m128i bs0 = _mm_loadu_si128((const __m128i *)y->bsums);
    __m128i bs1 = _mm_loadu_si128((const __m128i *)(y->bsums + 8));
    __m128i pairs = _mm_hadd_epi16(bs0, bs1);
    __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo));
    __m128i mp = _mm_madd_epi16(mins, pairs);
    mp = _mm_add_epi32(mp, _mm_shuffle_epi32(mp, _MM_SHUFFLE(1, 0, 3, 2)));
    mp = _mm_add_epi32(mp, _mm_shuffle_epi32(mp, _MM_SHUFFLE(2, 3, 0, 1)));
    int32_t isum = hsum_epi32(acc), msum = _mm_cvtsi128_si32(mp);
    float d = y->d * _cvtsh_ss(dh);
    float dmin = y->d * _cvtsh_ss(dminh);
    return d * (float)isum - dmin * (float)msum;
}

AVX2 void be_avx2_dot_q4_k(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q4_k_t *x = w;
    const be_block_q8_k_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++)
        sum += k4_block_dot(x[i].qs, NULL, x[i].scales, x[i].d, x[i].dmin, &y[i]);
    *s = sum;
}

AVX2 void be_avx2_dot_q5_k(int64_t n, float *s, const void *w, const void *a)
{
    const be_block_q5_k_t *x = w;
    const be_block_q8_k_t *y = a;
    float sum = 0;
    for (int64_t i = 0; i < n / BE_QK_K; i++)
        sum += k4_block_dot(x[i].qs, x[i].qh, x[i].scales, x[i].d, x[i].dmin, &y[i]);
    *s = sum;
}

/* ---- four activation rows per weight row (prompt GEMM) ----------------
 * Each column k keeps its own accumulator and takes exactly the steps the
 * one-row kernel above takes, so results match it bit for bit; the weight
 * block is loaded and decoded once for all four. */

#define ACT(k) ((const uint8_t *)a + (size_t)(k) * as)

AVX2 void be_avx2_dot4_q8_0(int64_t n, float *s, size_t ss, const void *w, const void *a,
                            size_t as)
{
    const be_block_q8_0_t *x = w;
    const be_block_q8_0_t *y[4] = {(const void *)ACT(0), (const void *)ACT(1),
                                   (const void *)ACT(2), (const void *)ACT(3)};
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        float dx = _cvtsh_ss(x[i].d);
        __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        __m256i ax = _mm256_sign_epi8(qx, qx);
        for (int k = 0; k < 4; k++) {
            __m256 d = _mm256_set1_ps(dx * _cvtsh_ss(y[k][i].d));
            __m256i qy = _mm256_loadu_si256((const __m256i *)y[k][i].qs);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(qy, qx)),
                                          _mm256_set1_epi16(1));
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[k]);
        }
    }
    for (int k = 0; k < 4; k++)
        s[(size_t)k * ss] = hsum_ps(acc[k]);
}

AVX2 void be_avx2_dot4_q4_0(int64_t n, float *s, size_t ss, const void *w, const void *a,
                            size_t as)
{
    const be_block_q4_0_t *x = w;
    const be_block_q8_0_t *y[4] = {(const void *)ACT(0), (const void *)ACT(1),
                                   (const void *)ACT(2), (const void *)ACT(3)};
    const __m256i low4 = _mm256_set1_epi8(0x0f);
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        float dx = _cvtsh_ss(x[i].d);
        __m128i raw = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(raw),
                                            _mm_srli_epi16(raw, 4), 1);
        q = _mm256_sub_epi8(_mm256_and_si256(q, low4), eight);
        __m256i aq = _mm256_sign_epi8(q, q);
        for (int k = 0; k < 4; k++) {
            __m256 d = _mm256_set1_ps(dx * _cvtsh_ss(y[k][i].d));
            __m256i qy = _mm256_loadu_si256((const __m256i *)y[k][i].qs);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(qy, q)),
                                          _mm256_set1_epi16(1));
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[k]);
        }
    }
    for (int k = 0; k < 4; k++)
        s[(size_t)k * ss] = hsum_ps(acc[k]);
}

/* sum_j min_j * (bsums[2j] + bsums[2j+1]) as in k4_block_dot. */
static inline AVX2 int32_t k4_min_sum(__m128i mins, const be_block_q8_k_t *y)
{
    __m128i bs0 = _mm_loadu_si128((const __m128i *)y->bsums);
    __m128i bs1 = _mm_loadu_si128((const __m128i *)(y->bsums + 8));
    __m128i mp = _mm_madd_epi16(mins, _mm_hadd_epi16(bs0, bs1));
    mp = _mm_add_epi32(mp, _mm_shuffle_epi32(mp, _MM_SHUFFLE(1, 0, 3, 2)));
    mp = _mm_add_epi32(mp, _mm_shuffle_epi32(mp, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(mp);
}

AVX2 void be_avx2_dot4_q4_k(int64_t n, float *s, size_t ss, const void *w, const void *a,
                            size_t as)
{
    const be_block_q4_k_t *x = w;
    const be_block_q8_k_t *y[4] = {(const void *)ACT(0), (const void *)ACT(1),
                                   (const void *)ACT(2), (const void *)ACT(3)};
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    float sum[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        uint32_t w0, w1, w2;
        memcpy(&w0, x[i].scales, 4);
        memcpy(&w1, x[i].scales + 4, 4);
        memcpy(&w2, x[i].scales + 8, 4);
        uint32_t sc_lo = w0 & 0x3f3f3f3fu;
        uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
        uint32_t m_lo = w1 & 0x3f3f3f3fu;
        uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
        uint64_t sc64 = (uint64_t)sc_lo | (uint64_t)sc_hi << 32;
        __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                          _mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int c = 0; c < 4; c++) {
            __m256i raw = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
            __m256i lo = _mm256_and_si256(raw, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            __m256i s0 = _mm256_set1_epi16((short)((sc64 >> (16 * c)) & 0xff));
            __m256i s1 = _mm256_set1_epi16((short)((sc64 >> (16 * c + 8)) & 0xff));
            for (int k = 0; k < 4; k++) {
                __m256i a0 = _mm256_loadu_si256((const __m256i *)(y[k][i].qs + 64 * c));
                __m256i a1 = _mm256_loadu_si256((const __m256i *)(y[k][i].qs + 64 * c + 32));
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), s0);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), s1);
                acc[k] = _mm256_add_epi32(acc[k], _mm256_add_epi32(p0, p1));
            }
        }
        __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo));
        float dh = _cvtsh_ss(x[i].d), dminh = _cvtsh_ss(x[i].dmin);
        for (int k = 0; k < 4; k++) {
            int32_t isum = hsum_epi32(acc[k]), msum = k4_min_sum(mins, &y[k][i]);
            float d = y[k][i].d * dh;
            float dmin = y[k][i].d * dminh;
            sum[k] += d * (float)isum - dmin * (float)msum;
        }
    }
    for (int k = 0; k < 4; k++)
        s[(size_t)k * ss] = sum[k];
}

AVX2 void be_avx2_dot4_q6_k(int64_t n, float *s, size_t ss, const void *w, const void *a,
                            size_t as)
{
    const be_block_q6_k_t *x = w;
    const be_block_q8_k_t *y[4] = {(const void *)ACT(0), (const void *)ACT(1),
                                   (const void *)ACT(2), (const void *)ACT(3)};
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i m2 = _mm256_set1_epi8(0x03);
    float sum[4] = {0, 0, 0, 0};
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                          _mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h;
            const uint8_t *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h;
            __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
            __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)qh);
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
            q[1] = _mm256_or_si256(
                _mm256_and_si256(l1, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
            q[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
            q[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m2), 4));
            for (int j = 0; j < 4; j++) {
                __m256i scv = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_set1_epi16(sc[2 * j])),
                    _mm_set1_epi16(sc[2 * j + 1]), 1);
                for (int k = 0; k < 4; k++) {
                    const int8_t *q8 = y[k][i].qs + 128 * h + 32 * j;
                    __m256i p16 = _mm256_maddubs_epi16(
                        q[j], _mm256_loadu_si256((const __m256i *)q8));
                    acc[k] = _mm256_add_epi32(acc[k], _mm256_madd_epi16(p16, scv));
                }
            }
        }
        __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        float dx = _cvtsh_ss(x[i].d);
        for (int k = 0; k < 4; k++) {
            __m256i bs = _mm256_loadu_si256((const __m256i *)y[k][i].bsums);
            int32_t isum = hsum_epi32(acc[k]);
            int32_t off = hsum_epi32(_mm256_madd_epi16(sc16, bs));
            isum -= 32 * off;
            sum[k] += dx * y[k][i].d * (float)isum;
        }
    }
    for (int k = 0; k < 4; k++)
        s[(size_t)k * ss] = sum[k];
}

#undef ACT

/* ---- four weight rows per activation row (decode matvec) ---------------
 * Per block, the four rows' int32 lane sums are folded by three hadds into
 * one vector (row r in lanes r and r + 4), converted once and scaled by the
 * four rows' d times the activation's d with one FMA: a quarter of the
 * float work of four vec_dot calls, and the activation block is loaded and
 * its scale converted once. Float summation order differs from vec_dot
 * (results agree within rounding, checked against the scalar reference). */

static inline AVX2 __m256 r4_scales(uint16_t d0, uint16_t d1, uint16_t d2, uint16_t d3,
                                    uint16_t dy)
{
    __m128 dx = _mm_cvtph_ps(_mm_setr_epi16((short)d0, (short)d1, (short)d2, (short)d3,
                                            0, 0, 0, 0));
    __m128 d = _mm_mul_ps(dx, _mm_set1_ps(_cvtsh_ss(dy)));
    return _mm256_insertf128_ps(_mm256_castps128_ps256(d), d, 1);
}

static inline AVX2 void r4_store(float *s, __m256 acc)
{
    _mm_storeu_ps(s, _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1)));
}

static inline AVX2 __m256i r4_fold(__m256i m0, __m256i m1, __m256i m2, __m256i m3)
{
    return _mm256_hadd_epi32(_mm256_hadd_epi32(m0, m1), _mm256_hadd_epi32(m2, m3));
}

static inline AVX2 __m256i q4_0_signed(const be_block_q4_0_t *b)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)b->qs);
    __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(raw),
                                        _mm_srli_epi16(raw, 4), 1);
    return _mm256_sub_epi8(_mm256_and_si256(q, _mm256_set1_epi8(0x0f)),
                           _mm256_set1_epi8(8));
}

AVX2 void be_avx2_dotr4_q4_0(int64_t n, float *s, const void *w, size_t w_stride,
                             const void *a)
{
    const be_block_q4_0_t *x0 = w;
    const be_block_q4_0_t *x1 = (const void *)((const uint8_t *)w + w_stride);
    const be_block_q4_0_t *x2 = (const void *)((const uint8_t *)w + 2 * w_stride);
    const be_block_q4_0_t *x3 = (const void *)((const uint8_t *)w + 3 * w_stride);
    const be_block_q8_0_t *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i m0 = dot_i8_epi32(q4_0_signed(&x0[i]), qy);
        __m256i m1 = dot_i8_epi32(q4_0_signed(&x1[i]), qy);
        __m256i m2 = dot_i8_epi32(q4_0_signed(&x2[i]), qy);
        __m256i m3 = dot_i8_epi32(q4_0_signed(&x3[i]), qy);
        __m256 d = r4_scales(x0[i].d, x1[i].d, x2[i].d, x3[i].d, y[i].d);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(r4_fold(m0, m1, m2, m3)), acc);
    }
    r4_store(s, acc);
}

AVX2 void be_avx2_dotr4_q8_0(int64_t n, float *s, const void *w, size_t w_stride,
                             const void *a)
{
    const be_block_q8_0_t *x0 = w;
    const be_block_q8_0_t *x1 = (const void *)((const uint8_t *)w + w_stride);
    const be_block_q8_0_t *x2 = (const void *)((const uint8_t *)w + 2 * w_stride);
    const be_block_q8_0_t *x3 = (const void *)((const uint8_t *)w + 3 * w_stride);
    const be_block_q8_0_t *y = a;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i m0 = dot_i8_epi32(_mm256_loadu_si256((const __m256i *)x0[i].qs), qy);
        __m256i m1 = dot_i8_epi32(_mm256_loadu_si256((const __m256i *)x1[i].qs), qy);
        __m256i m2 = dot_i8_epi32(_mm256_loadu_si256((const __m256i *)x2[i].qs), qy);
        __m256i m3 = dot_i8_epi32(_mm256_loadu_si256((const __m256i *)x3[i].qs), qy);
        __m256 d = r4_scales(x0[i].d, x1[i].d, x2[i].d, x3[i].d, y[i].d);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(r4_fold(m0, m1, m2, m3)), acc);
    }
    r4_store(s, acc);
}

/* Four weight rows times four activation rows (prompts): for each
 * activation row k exactly vec_dot_r4's steps, so a batch gives the same
 * bits as single tokens; the four rows' quants are decoded once. Writes
 * s[k * s_stride + r]. */
AVX2 void be_avx2_dot44_q4_0(int64_t n, float *s, size_t s_stride, const void *w,
                             size_t w_stride, const void *a, size_t a_stride)
{
    const be_block_q4_0_t *x0 = w;
    const be_block_q4_0_t *x1 = (const void *)((const uint8_t *)w + w_stride);
    const be_block_q4_0_t *x2 = (const void *)((const uint8_t *)w + 2 * w_stride);
    const be_block_q4_0_t *x3 = (const void *)((const uint8_t *)w + 3 * w_stride);
    const be_block_q8_0_t *y[4];
    for (int k = 0; k < 4; k++)
        y[k] = (const void *)((const uint8_t *)a + (size_t)k * a_stride);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / BE_QK4_0; i++) {
        __m256i q0 = q4_0_signed(&x0[i]), q1 = q4_0_signed(&x1[i]);
        __m256i q2 = q4_0_signed(&x2[i]), q3 = q4_0_signed(&x3[i]);
        for (int k = 0; k < 4; k++) {
            __m256i qy = _mm256_loadu_si256((const __m256i *)y[k][i].qs);
            __m256i f = r4_fold(dot_i8_epi32(q0, qy), dot_i8_epi32(q1, qy),
                                dot_i8_epi32(q2, qy), dot_i8_epi32(q3, qy));
            __m256 d = r4_scales(x0[i].d, x1[i].d, x2[i].d, x3[i].d, y[k][i].d);
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(f), acc[k]);
        }
    }
    for (int k = 0; k < 4; k++)
        r4_store(s + (size_t)k * s_stride, acc[k]);
}

AVX2 void be_avx2_dot44_q8_0(int64_t n, float *s, size_t s_stride, const void *w,
                             size_t w_stride, const void *a, size_t a_stride)
{
    const be_block_q8_0_t *x0 = w;
    const be_block_q8_0_t *x1 = (const void *)((const uint8_t *)w + w_stride);
    const be_block_q8_0_t *x2 = (const void *)((const uint8_t *)w + 2 * w_stride);
    const be_block_q8_0_t *x3 = (const void *)((const uint8_t *)w + 3 * w_stride);
    const be_block_q8_0_t *y[4];
    for (int k = 0; k < 4; k++)
        y[k] = (const void *)((const uint8_t *)a + (size_t)k * a_stride);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                     _mm256_setzero_ps()};
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        __m256i q0 = _mm256_loadu_si256((const __m256i *)x0[i].qs);
        __m256i q1 = _mm256_loadu_si256((const __m256i *)x1[i].qs);
        __m256i q2 = _mm256_loadu_si256((const __m256i *)x2[i].qs);
        __m256i q3 = _mm256_loadu_si256((const __m256i *)x3[i].qs);
        for (int k = 0; k < 4; k++) {
            __m256i qy = _mm256_loadu_si256((const __m256i *)y[k][i].qs);
            __m256i f = r4_fold(dot_i8_epi32(q0, qy), dot_i8_epi32(q1, qy),
                                dot_i8_epi32(q2, qy), dot_i8_epi32(q3, qy));
            __m256 d = r4_scales(x0[i].d, x1[i].d, x2[i].d, x3[i].d, y[k][i].d);
            acc[k] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(f), acc[k]);
        }
    }
    for (int k = 0; k < 4; k++)
        r4_store(s + (size_t)k * s_stride, acc[k]);
}

AVX2 void be_avx2_f32_to_f16(const float *x, void *y, int64_t n)
{
    uint16_t *h = y;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                         _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        h[i] = be_f32_to_f16(x[i]);
}

/* 8 floats rounded half-to-even (the current mode, as nearbyintf) to int8
 * lanes 0..7 of the result; |v| must be <= 127.5. */
/* Eight floats rounded to int8 as be_round_clamp does: NaN gives 0 and
 * the rest is clamped to [lo, hi] before the conversion (a scale made
 * infinite by a subnormal block maximum gives +-inf and 0 * inf here;
 * converted unclamped they would all read as -128). */
static inline AVX2 __m128i round_i8x8(__m256 v, float lo, float hi)
{
    v = _mm256_and_ps(v, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    v = _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(lo)), _mm256_set1_ps(hi));
    __m256i i = _mm256_cvtps_epi32(v); /* MXCSR's round-to-nearest-even */
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    return _mm_packs_epi16(w, w);
}

static inline AVX2 float hmax_ps(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

AVX2 void be_avx2_q8_0_from_float(const float *x, void *y, int64_t n)
{
    be_block_q8_0_t *b = y;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / BE_QK8_0; i++) {
        const float *v = x + i * BE_QK8_0;
        __m256 v0 = _mm256_loadu_ps(v), v1 = _mm256_loadu_ps(v + 8);
        __m256 v2 = _mm256_loadu_ps(v + 16), v3 = _mm256_loadu_ps(v + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        float amax = hmax_ps(m);
        float d = amax / 127.0f;
        float id = amax != 0 ? 127.0f / amax : 0.0f;
        b[i].d = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        __m256 s = _mm256_set1_ps(id);
        __m128i q0 = round_i8x8(_mm256_mul_ps(v0, s), -127, 127);
        __m128i q1 = round_i8x8(_mm256_mul_ps(v1, s), -127, 127);
        __m128i q2 = round_i8x8(_mm256_mul_ps(v2, s), -127, 127);
        __m128i q3 = round_i8x8(_mm256_mul_ps(v3, s), -127, 127);
        _mm_storeu_si128((__m128i *)b[i].qs, _mm_unpacklo_epi64(q0, q1));
        _mm_storeu_si128((__m128i *)(b[i].qs + 16), _mm_unpacklo_epi64(q2, q3));
    }
}

AVX2 void be_avx2_q8_k_from_float(const float *x, void *y, int64_t n)
{
    be_block_q8_k_t *b = y;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / BE_QK_K; i++) {
        const float *v = x + i * BE_QK_K;
        __m256 m = _mm256_setzero_ps();
        for (int j = 0; j < BE_QK_K; j += 8)
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(v + j)));
        float amax = hmax_ps(m);
        memset(&b[i], 0, sizeof b[i]);
        if (amax == 0)
            continue;
        /* the first element of largest magnitude, as the scalar scan */
        float max = 0;
        for (int j = 0; j < BE_QK_K; j++)
            if (fabsf(v[j]) == amax) {
                max = v[j];
                break;
            }
        float iscale = -127.0f / max;
        __m256 s = _mm256_set1_ps(iscale);
        for (int j = 0; j < BE_QK_K; j += 16) {
            __m128i q0 = round_i8x8(_mm256_mul_ps(_mm256_loadu_ps(v + j), s), -128, 127);
            __m128i q1 = round_i8x8(_mm256_mul_ps(_mm256_loadu_ps(v + j + 8), s), -128, 127);
            __m128i q = _mm_unpacklo_epi64(q0, q1);
            _mm_storeu_si128((__m128i *)(b[i].qs + j), q);
            /* sum of 16 int8 */
            __m128i w = _mm_madd_epi16(_mm_cvtepi8_epi16(q), _mm_set1_epi16(1));
            w = _mm_add_epi32(w, _mm_madd_epi16(_mm_cvtepi8_epi16(_mm_srli_si128(q, 8)),
                                                _mm_set1_epi16(1)));
            w = _mm_add_epi32(w, _mm_shuffle_epi32(w, _MM_SHUFFLE(1, 0, 3, 2)));
            w = _mm_add_epi32(w, _mm_shuffle_epi32(w, _MM_SHUFFLE(2, 3, 0, 1)));
            b[i].bsums[j / 16] = (int16_t)_mm_cvtsi128_si32(w);
        }
        b[i].d = 1.0f / iscale;
    }
}

AVX2 void be_avx2_f16_to_f32(const void *x, float *y, int64_t n)
{
    const uint16_t *h = x;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, load_f16x8(h + i));
    for (; i < n; i++)
        y[i] = be_f16_to_f32(h[i]);
}

#else /* not x86: never selected (be_simd_detect says scalar) */

#define STUB_DOT(name)                                                     \
    void name(int64_t n, float *s, const void *w, const void *a)           \
    {                                                                      \
        CR_UNUSED(n), CR_UNUSED(w), CR_UNUSED(a);                          \
        *s = 0;                                                            \
    }
STUB_DOT(be_avx2_dot_f32)
STUB_DOT(be_avx2_dot_f16)
STUB_DOT(be_avx2_dot_bf16)
STUB_DOT(be_avx2_dot_q8_0)
STUB_DOT(be_avx2_dot_q4_0)
STUB_DOT(be_avx2_dot_q6_k)
STUB_DOT(be_avx2_dot_q4_1)
STUB_DOT(be_avx2_dot_q5_0)
STUB_DOT(be_avx2_dot_q5_1)
STUB_DOT(be_avx2_dot_q2_k)
STUB_DOT(be_avx2_dot_q3_k)
STUB_DOT(be_avx2_dot_q4_k)
STUB_DOT(be_avx2_dot_q5_k)
STUB_DOT(be_avx2_dot_iq4_nl)
STUB_DOT(be_avx2_dot_iq4_xs)
STUB_DOT(be_avx2_dot_mxfp4)
#define STUB_DOT4(name)                                                    \
    void name(int64_t n, float *s, size_t ss, const void *w, const void *a,  \
              size_t as)                                                   \
    {                                                                      \
        CR_UNUSED(n), CR_UNUSED(ss), CR_UNUSED(w), CR_UNUSED(a), CR_UNUSED(as); \
        s[0] = 0;                                                          \
    }
STUB_DOT4(be_avx2_dot4_q8_0)
STUB_DOT4(be_avx2_dot4_q4_0)
STUB_DOT4(be_avx2_dot4_q4_k)
STUB_DOT4(be_avx2_dot4_q6_k)
void be_avx2_dotr4_q4_0(int64_t n, float *s, const void *w, size_t ws, const void *a)
{
    CR_UNUSED(n), CR_UNUSED(w), CR_UNUSED(ws), CR_UNUSED(a);
    s[0] = s[1] = s[2] = s[3] = 0;
}
void be_avx2_dot44_q4_0(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                        const void *a, size_t as)
{
    CR_UNUSED(n), CR_UNUSED(ss), CR_UNUSED(w), CR_UNUSED(ws), CR_UNUSED(a), CR_UNUSED(as);
    s[0] = 0;
}
void be_avx2_dot44_q8_0(int64_t n, float *s, size_t ss, const void *w, size_t ws,
                        const void *a, size_t as)
{
    CR_UNUSED(n), CR_UNUSED(ss), CR_UNUSED(w), CR_UNUSED(ws), CR_UNUSED(a), CR_UNUSED(as);
    s[0] = 0;
}
void be_avx2_dotr4_q8_0(int64_t n, float *s, const void *w, size_t ws, const void *a)
{
    CR_UNUSED(n), CR_UNUSED(w), CR_UNUSED(ws), CR_UNUSED(a);
    s[0] = s[1] = s[2] = s[3] = 0;
}
void be_avx2_f32_to_f16(const float *x, void *y, int64_t n)
{
    CR_UNUSED(x), CR_UNUSED(y), CR_UNUSED(n);
}
void be_avx2_f16_to_f32(const void *x, float *y, int64_t n)
{
    CR_UNUSED(x), CR_UNUSED(y), CR_UNUSED(n);
}
void be_avx2_q8_0_from_float(const float *x, void *y, int64_t n)
{
    CR_UNUSED(x), CR_UNUSED(y), CR_UNUSED(n);
}
void be_avx2_q8_k_from_float(const float *x, void *y, int64_t n)
{
    CR_UNUSED(x), CR_UNUSED(y), CR_UNUSED(n);
}

#endif
