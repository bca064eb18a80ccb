/* vec.c: scalar and AVX2 versions of the inner loops in vec.h.
 *
 * The AVX2 exp covers every float as expf does: x = n ln2 + r with n
 * rounded, r split against ln2 in two parts, e^r by Cephes' degree-6
 * polynomial (within 4 ulp of expf), times 2^n applied as two factors
 * 2^(n/2) and 2^(n - n/2). One factor could not hold n outside
 * [-126, 127]; with two, results past FLT_MAX overflow to inf (x above
 * 88.72, where expf does) and results under FLT_MIN round once into the
 * subnormal range (x down to -103.97) instead of flushing to zero. x is
 * clamped to [-104, 89] first, where e^x is 0 or inf already; NaN stays
 * NaN, -inf gives 0, +inf gives inf. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/vec.h"
#include "services/runner/backend/cpu/quant_simd.h"

#include <math.h>

/* ---- scalar ----------------------------------------------------------- */

static void attn_v_scalar(int n_kv, const uint16_t *probs, const uint16_t *v, size_t v_stride,
                          int hd, float *acc)
{
    for (int d = 0; d < hd; d++)
        acc[d] = 0;
    for (int p = 0; p < n_kv; p++) {
        float pw = be_f16_to_f32(probs[p]);
        if (pw == 0)
            continue;
        const uint16_t *vr = v + (size_t)p * v_stride;
        for (int d = 0; d < hd; d++)
            acc[d] += pw * be_f16_to_f32(vr[d]);
    }
}

static void swiglu_scalar(size_t n, float *y, const float *g, const float *u)
{
    for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        y[i] = gi / (1.0f + expf(-gi)) * u[i];
    }
}

static double exp_sum_scalar(int n, float *x, float max)
{
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    return sum;
}

static void rmsnorm_scalar(int n, float *y, const float *x, const float *g, float eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float s = 1.0f / sqrtf((float)(ss / n) + eps);
    for (int i = 0; i < n; i++)
        y[i] = (x[i] * s) * g[i];
}

static void rope_pairs_scalar(int n_pairs, float *v, const float *cs, const float *sn)
{
    for (int i = 0; i < n_pairs; i++) {
        float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * cs[i] - x1 * sn[i];
        v[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
    }
}

static void rope_halves_scalar(int n_pairs, float *v0, float *v1, const float *cs,
                               const float *sn)
{
    for (int i = 0; i < n_pairs; i++) {
        float x0 = v0[i], x1 = v1[i];
        v0[i] = x0 * cs[i] - x1 * sn[i];
        v1[i] = x0 * sn[i] + x1 * cs[i];
    }
}

/* -2 sqrt(2/pi) and GELU's cubic coefficient */
#define GELU_K (-1.5957691216057308f)
#define GELU_A 0.044715f

static void gelu_scalar(size_t n, float *y, const float *x, const float *u)
{
    for (size_t i = 0; i < n; i++) {
        float xi = x[i];
        float g = xi / (1.0f + expf(GELU_K * (xi + GELU_A * xi * xi * xi)));
        y[i] = u ? g * u[i] : g;
    }
}

/* quant.c's scalar F16 dot (products and sum in double) on a query whose
 * floats are its F16 values */
static void dot_f16_scalar(int n, float *s, const uint16_t *k, const float *q)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += (double)be_f16_to_f32(k[i]) * (double)q[i];
    *s = (float)sum;
}

static void dot2_f16_scalar(int n, float *s, const uint16_t *k, const float *q0,
                            const float *q1)
{
    dot_f16_scalar(n, &s[0], k, q0);
    dot_f16_scalar(n, &s[1], k, q1);
}

static void attn_v2_scalar(int n_kv, const uint16_t *probs0, const uint16_t *probs1,
                           const uint16_t *v, size_t v_stride, int hd, float *acc0,
                           float *acc1)
{
    attn_v_scalar(n_kv, probs0, v, v_stride, hd, acc0);
    attn_v_scalar(n_kv, probs1, v, v_stride, hd, acc1);
}

static void scores_scalar(int n, float *x, float scale, float cap)
{
    for (int i = 0; i < n; i++) {
        float v = x[i] * scale;
        x[i] = cap > 0 ? cap * tanhf(v / cap) : v;
    }
}

static const be_vec_ops_t scalar_ops = {
    "scalar",       attn_v_scalar,     swiglu_scalar,      exp_sum_scalar,
    rmsnorm_scalar, rope_pairs_scalar, rope_halves_scalar, gelu_scalar,
    dot_f16_scalar, dot2_f16_scalar, attn_v2_scalar, scores_scalar};

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))

static inline AVX2 __m256 exp_ps(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-104.0f), hi = _mm256_set1_ps(89.0f);
    __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    /* max/min return their second operand for NaN: xc is finite */
    __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* n in [-150, 128]: halves in [-75, 64], each a normal power of two */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    y = _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
    return _mm256_blendv_ps(y, x, nan);
}

/* acc += pw * vr over hd: a product and an add per element (no FMA) */
static inline AVX2 void attn_v_row_avx2(float pw, const uint16_t *vr, int hd, float *acc)
{
    int d8 = hd / 8 * 8;
    __m256 w = _mm256_set1_ps(pw);
    for (int d = 0; d < d8; d += 8) {
        __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + d)));
        _mm256_storeu_ps(acc + d, _mm256_add_ps(_mm256_loadu_ps(acc + d), _mm256_mul_ps(w, vv)));
    }
    for (int d = d8; d < hd; d++)
        acc[d] += pw * _cvtsh_ss(vr[d]);
}

static AVX2 void attn_v_avx2(int n_kv, const uint16_t *probs, const uint16_t *v,
                             size_t v_stride, int hd, float *acc)
{
    for (int d = 0; d < hd; d++)
        acc[d] = 0;
    for (int p = 0; p < n_kv; p++) {
        float pw = _cvtsh_ss(probs[p]);
        if (pw != 0)
            attn_v_row_avx2(pw, v + (size_t)p * v_stride, hd, acc);
    }
}

/* tanh as Cephes' tanhf computes it: x + x^3 P(x^2) below 0.625 in
 * magnitude (P its degree-4 fit), else 1 - 2 / (e^{2|x|} + 1) with the
 * sign put back (e^{2|x|} from exp_ps, within 4 ulp; past |x| = 44 it is
 * inf and the result 1). NaN stays NaN (exp_ps keeps it), -0 stays -0. */
static inline AVX2 __m256 tanh_ps(__m256 x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256 ax = _mm256_andnot_ps(sign, x), z = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.06390887954e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.37397155531e-2f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.33314422036e-1f));
    p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.33332819422e-1f));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
    __m256 e = exp_ps(_mm256_add_ps(ax, ax));
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    big = _mm256_or_ps(big, _mm256_and_ps(sign, x));
    return _mm256_blendv_ps(big, small, _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

static AVX2 void scores_avx2(int n, float *x, float scale, float cap)
{
    int i = 0;
    __m256 sc = _mm256_set1_ps(scale), c = _mm256_set1_ps(cap);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), sc);
        if (cap > 0)
            v = _mm256_mul_ps(c, tanh_ps(_mm256_div_ps(v, c)));
        _mm256_storeu_ps(x + i, v);
    }
    if (i < n) { /* the tail through the same vector steps */
        float t[8] = {0};
        memcpy(t, x + i, (size_t)(n - i) * sizeof(float));
        scores_avx2(8, t, scale, cap);
        memcpy(x + i, t, (size_t)(n - i) * sizeof(float));
    }
}

static AVX2 void dot_f16_avx2(int n, float *s, const uint16_t *k, const float *q)
{
    be_avx2_dot_f16_q32(n, s, k, q);
}

static AVX2 void dot2_f16_avx2(int n, float *s, const uint16_t *k, const float *q0,
                               const float *q1)
{
    be_avx2_dot2_f16_q32(n, s, k, q0, q1);
}

/* attn_v_avx2's steps for both rows; a row whose probability is zero for
 * one query adds nothing to that query (its V may hold inf or NaN). */
static AVX2 void attn_v2_avx2(int n_kv, const uint16_t *probs0, const uint16_t *probs1,
                              const uint16_t *v, size_t v_stride, int hd, float *acc0,
                              float *acc1)
{
    int d8 = hd / 8 * 8;
    for (int d = 0; d < hd; d++)
        acc0[d] = acc1[d] = 0;
    for (int p = 0; p < n_kv; p++) {
        float p0 = _cvtsh_ss(probs0[p]), p1 = _cvtsh_ss(probs1[p]);
        const uint16_t *vr = v + (size_t)p * v_stride;
        if (p0 == 0 || p1 == 0) {
            if (p0 != 0 || p1 != 0)
                attn_v_row_avx2(p0 != 0 ? p0 : p1, vr, hd, p0 != 0 ? acc0 : acc1);
            continue;
        }
        __m256 w0 = _mm256_set1_ps(p0), w1 = _mm256_set1_ps(p1);
        for (int d = 0; d < d8; d += 8) {
            __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + d)));
            _mm256_storeu_ps(acc0 + d,
                             _mm256_add_ps(_mm256_loadu_ps(acc0 + d), _mm256_mul_ps(w0, vv)));
            _mm256_storeu_ps(acc1 + d,
                             _mm256_add_ps(_mm256_loadu_ps(acc1 + d), _mm256_mul_ps(w1, vv)));
        }
        for (int d = d8; d < hd; d++) {
            float x = _cvtsh_ss(vr[d]);
            acc0[d] += p0 * x;
            acc1[d] += p1 * x;
        }
    }
}

static AVX2 void swiglu_avx2(size_t n, float *y, const float *g, const float *u)
{
    size_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    if (i < n)
        swiglu_scalar(n - i, y + i, g + i, u + i);
}

static AVX2 double exp_sum_avx2(int n, float *x, float max)
{
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    __m256 m = _mm256_set1_ps(max);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, e);
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
    double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    if (i < n)
        sum += exp_sum_scalar(n - i, x + i, max);
    return sum;
}

static AVX2 void rmsnorm_avx2(int n, float *y, const float *x, const float *g, float eps)
{
    /* four double accumulators of four lanes: the squares are exact in
     * double (24-bit mantissas), only the order of the adds differs */
    __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int k = 0; k < 4; k++) {
            __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * k));
            a[k] = _mm256_fmadd_pd(v, v, a[k]);
        }
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(_mm256_add_pd(a[0], a[1]), _mm256_add_pd(a[2], a[3])));
    double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; i < n; i++)
        ss += (double)x[i] * (double)x[i];
    float s = 1.0f / sqrtf((float)(ss / n) + eps);
    __m256 sv = _mm256_set1_ps(s);
    i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), sv),
                                              _mm256_loadu_ps(g + i)));
    for (; i < n; i++)
        y[i] = (x[i] * s) * g[i];
}

/* Four pairs per vector: cosines and sines each repeated for both lanes of
 * a pair, the pair's lanes swapped for the cross products, and addsub
 * subtracts in even lanes, adds in odd ones. */
static AVX2 void rope_pairs_avx2(int n_pairs, float *v, const float *cs, const float *sn)
{
    int i = 0;
    for (; i + 4 <= n_pairs; i += 4) {
        __m128 c4 = _mm_loadu_ps(cs + i), s4 = _mm_loadu_ps(sn + i);
        __m256 c = _mm256_set_m128(_mm_unpackhi_ps(c4, c4), _mm_unpacklo_ps(c4, c4));
        __m256 s = _mm256_set_m128(_mm_unpackhi_ps(s4, s4), _mm_unpacklo_ps(s4, s4));
        __m256 x = _mm256_loadu_ps(v + 2 * i);
        __m256 sw = _mm256_permute_ps(x, 0xB1); /* (b, a) per pair */
        _mm256_storeu_ps(v + 2 * i, _mm256_addsub_ps(_mm256_mul_ps(x, c), _mm256_mul_ps(sw, s)));
    }
    if (i < n_pairs)
        rope_pairs_scalar(n_pairs - i, v + 2 * i, cs + i, sn + i);
}

static AVX2 void rope_halves_avx2(int n_pairs, float *v0, float *v1, const float *cs,
                                  const float *sn)
{
    int i = 0;
    for (; i + 8 <= n_pairs; i += 8) {
        __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
        __m256 a = _mm256_loadu_ps(v0 + i), b = _mm256_loadu_ps(v1 + i);
        _mm256_storeu_ps(v0 + i, _mm256_sub_ps(_mm256_mul_ps(a, c), _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(v1 + i, _mm256_add_ps(_mm256_mul_ps(a, s), _mm256_mul_ps(b, c)));
    }
    if (i < n_pairs)
        rope_halves_scalar(n_pairs - i, v0 + i, v1 + i, cs + i, sn + i);
}

static AVX2 void gelu_avx2(size_t n, float *y, const float *x, const float *u)
{
    size_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), k = _mm256_set1_ps(GELU_K),
                 a = _mm256_set1_ps(GELU_A);
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i);
        __m256 t = _mm256_fmadd_ps(_mm256_mul_ps(a, _mm256_mul_ps(xv, xv)), xv, xv);
        __m256 g = _mm256_div_ps(xv, _mm256_add_ps(one, exp_ps(_mm256_mul_ps(k, t))));
        _mm256_storeu_ps(y + i, u ? _mm256_mul_ps(g, _mm256_loadu_ps(u + i)) : g);
    }
    if (i < n)
        gelu_scalar(n - i, y + i, x + i, u ? u + i : NULL);
}

static const be_vec_ops_t avx2_ops = {"avx2",       attn_v_avx2,     swiglu_avx2,
                                      exp_sum_avx2, rmsnorm_avx2,    rope_pairs_avx2,
                                      rope_halves_avx2, gelu_avx2,   dot_f16_avx2,
                                      dot2_f16_avx2, attn_v2_avx2,   scores_avx2};

#endif

const be_vec_ops_t *be_vec_ops_at(be_simd_t level)
{
#if defined(__x86_64__) || defined(__i386__)
    if (level >= BE_SIMD_AVX2 && be_simd_detect() >= BE_SIMD_AVX2)
        return &avx2_ops;
#else
    CR_UNUSED(level); /* be_simd_detect says scalar off x86 */
#endif
    return &scalar_ops;
}

void be_vec_softmax_row(const be_vec_ops_t *vec, float *x, int n, const float *sink)
{
    /* eight running maxima, not fmaxf (a libm call per score): the same
     * max, as NaN scores are skipped by both and the sign of a zero max
     * does not change exp(x - max) */
    float m8[8];
    for (int i = 0; i < 8; i++)
        m8[i] = sink ? *sink : -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            m8[l] = x[i + l] > m8[l] ? x[i + l] : m8[l];
    for (; i < n; i++)
        m8[0] = x[i] > m8[0] ? x[i] : m8[0];
    float max = m8[0];
    for (int l = 1; l < 8; l++)
        max = m8[l] > max ? m8[l] : max;
    double sum = vec->exp_sum(n, x, max);
    if (sink)
        sum += (double)expf(*sink - max);
    float inv = (float)(1.0 / sum);
    for (i = 0; i < n; i++)
        x[i] *= inv;
}

const be_vec_ops_t *be_vec_ops(void)
{
    return be_vec_ops_at(be_simd_detect());
}
