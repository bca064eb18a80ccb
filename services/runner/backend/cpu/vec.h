/* vec.h: the CPU backend's elementwise and attention inner loops, each as
 * plain C and, where the CPU has AVX2+FMA+F16C, as a vector version chosen
 * at run time (the level be_simd_detect gives, or the one passed).
 *
 * Contracts say which results are bit-identical across levels and which
 * differ by the exp approximation (a few ulp). Owns no threading and no
 * buffers. */
#ifndef BE_CPU_VEC_H
#define BE_CPU_VEC_H

#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"

typedef struct be_vec_ops {
    /* The kernels' own level ("scalar", "avx2"): AVX-512 levels use the
     * AVX2 loops, which are bound by memory, not by vector width. */
    const char *name;
    /* acc[d] = sum over p < n_kv of f16(probs[p]) * f16(v[p * v_stride + d]),
     * d < hd, summed in p order with a separate multiply and add (every
     * level gives the same bits); p with a zero probability are skipped. */
    void (*attn_v)(int n_kv, const uint16_t *probs, const uint16_t *v, size_t v_stride,
                   int hd, float *acc);
    /* y[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u over n (y may alias
     * g or u). Vector exp: within 4 ulp of expf. */
    void (*swiglu)(size_t n, float *y, const float *g, const float *u);
    /* x[i] = exp(x[i] - max) over n in place; returns the sum of the new
     * x[i] accumulated in double. Vector exp: within 4 ulp of expf. */
    double (*exp_sum)(int n, float *x, float max);
    /* y[i] = (x[i] * s) * g[i] with s = 1 / sqrtf((float)(sum x^2 / n) + eps),
     * the sum of squares in double (y may alias x). Levels differ only in
     * the order of that sum (a few double ulp): s, so y, within 1 float ulp
     * of the scalar's. */
    void (*rmsnorm)(int n, float *y, const float *x, const float *g, float eps);
    /* Rotary turns in place, pair i by the angle whose cosine and sine are
     * cs[i], sn[i]: (a, b) -> (a cs - b sn, a sn + b cs), each a product,
     * a product and one add or subtract (every level gives the same bits).
     * rope_pairs: pairs (v[2i], v[2i+1]), i < n_pairs (llama's order);
     * rope_halves: pairs (v0[i], v1[i]), i < n_pairs (NEOX: v1 = v0 + half). */
    void (*rope_pairs)(int n_pairs, float *v, const float *cs, const float *sn);
    void (*rope_halves)(int n_pairs, float *v0, float *v1, const float *cs, const float *sn);
    /* y[i] = gelu(x[i]) * u[i] (u NULL: * 1) over n, GELU's tanh form
     * 0.5 x (1 + tanh(t)), t = sqrt(2/pi) (x + 0.044715 x^3), computed as
     * the identical x / (1 + exp(-2t)): no 1 + tanh that cancels for
     * negative x, and one exp instead of a tanhf (y may alias x or u).
     * Vector exp: within 4 ulp of expf. */
    void (*gelu)(size_t n, float *y, const float *x, const float *u);
    /* Attention scores: the F16 dot product of a cache row k with a query
     * rounded to F16 and held as floats (q[d] = f16(q[d]) exactly), over
     * n: the bits of this level's F16 vec_dot (quant.h) of k and the query
     * in F16, without converting the query again per key. dot2_f16: two
     * queries of one GQA group, k read once for both, s[i] for qi. */
    void (*dot_f16)(int n, float *s, const uint16_t *k, const float *q);
    void (*dot2_f16)(int n, float *s, const uint16_t *k, const float *q0, const float *q1);
    /* attn_v of two probability rows over the same values: acc0 from
     * probs0, acc1 from probs1, each with attn_v's bits (a row is skipped
     * for the query whose probability is zero, not for the other). */
    void (*attn_v2)(int n_kv, const uint16_t *probs0, const uint16_t *probs1,
                    const uint16_t *v, size_t v_stride, int hd, float *acc0, float *acc1);
    /* Attention scores from raw dot products, in place over n: x[i] *=
     * scale, then where cap > 0, x[i] = cap * tanh(x[i] / cap) (Gemma-2's
     * soft-cap), each step one rounding. Scalar: tanhf. Vector: Cephes'
     * tanhf steps on exp_ps (vec.c), the capped score within 8 float ulp
     * of cap * tanh(t) in double (test_vec; measured under 1). Every
     * attention path of a level scores through this op, so they agree bit
     * for bit. */
    void (*scores)(int n, float *x, float scale, float cap);
} be_vec_ops_t;

/* The versions for `level` (scalar where the CPU lacks it). Static. */
const be_vec_ops_t *be_vec_ops_at(be_simd_t level);

/* The versions for the detected level. */
const be_vec_ops_t *be_vec_ops(void);

/* Softmax of one row of n scores in place through vec's exp_sum (sums in
 * double); with sink (not NULL), one more logit *sink in the max and the
 * denominator whose probability is dropped (ggml's soft_max sinks). The
 * attention paths share it: their probabilities must be the same bits. */
void be_vec_softmax_row(const be_vec_ops_t *vec, float *x, int n, const float *sink);

#endif
