/* attn_kvq.c: store and attend over a Q8_0 / Q4_0 KV cache (attn_kvq.h). */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/attn_kvq.h"
#include "services/runner/backend/cpu/vec.h"

#include <math.h>

bool be_kvq_type_ok(cr_type_t t)
{
    return t == CR_TYPE_Q8_0 || t == CR_TYPE_Q4_0;
}

void be_kvq_store(cr_type_t t, void *cache, const float *src, int n, int at, int row)
{
    const be_type_traits_t *tt = be_type_traits(t);
    size_t row_bytes = (size_t)row / tt->block_elems * tt->block_bytes;
    uint8_t *dst = (uint8_t *)cache + (size_t)at * row_bytes;
    for (int i = 0; i < n; i++)
        tt->from_float(src + (size_t)i * (size_t)row, dst + (size_t)i * row_bytes, row);
}

void be_kvq_axpy_q8_0(int hd, float p, const void *vr, float *acc)
{
    const be_block_q8_0_t *b = vr;
    for (int i = 0; i < hd / BE_QK8_0; i++) {
        float d = be_f16_to_f32(b[i].d);
        float *o = acc + i * BE_QK8_0;
        for (int j = 0; j < BE_QK8_0; j++)
            o[j] += (d * (float)b[i].qs[j]) * p;
    }
}

void be_kvq_axpy_q4_0(int hd, float p, const void *vr, float *acc)
{
    const be_block_q4_0_t *b = vr;
    for (int i = 0; i < hd / BE_QK4_0; i++) {
        float d = be_f16_to_f32(b[i].d);
        float *o = acc + i * BE_QK4_0;
        for (int j = 0; j < BE_QK4_0 / 2; j++) {
            o[j] += (d * (float)((b[i].qs[j] & 0x0f) - 8)) * p;
            o[j + 16] += (d * (float)((b[i].qs[j] >> 4) - 8)) * p;
        }
    }
}

typedef void (*axpy_fn)(int hd, float p, const void *vr, float *acc);

void be_kvq_attend(const be_kvq_head_t *h, const float *q, float *scores, void *q8,
                   float *out)
{
    const be_type_traits_t *kt = be_type_traits_at(h->type, h->level);
    const be_type_traits_t *qt = be_type_traits_at(kt->vec_dot_type, h->level);
    const be_vec_ops_t *vec = be_vec_ops_at(h->level);
    bool avx2 = h->level >= BE_SIMD_AVX2 && be_simd_detect() >= BE_SIMD_AVX2;
    axpy_fn axpy = h->type == CR_TYPE_Q8_0
                       ? (avx2 ? be_kvq_axpy_q8_0_avx2 : be_kvq_axpy_q8_0)
                       : (avx2 ? be_kvq_axpy_q4_0_avx2 : be_kvq_axpy_q4_0);
    int hd = h->head_dim, n = h->n_kv;

    /* scores: q (as Q8_0) . K row j, scaled (and soft-capped) */
    qt->from_float(q, q8, hd);
    float mx = h->sink ? *h->sink : -INFINITY;
    for (int j = 0; j < n; j++) {
        float s;
        kt->vec_dot(hd, &s, h->k + (size_t)j * h->row_bytes, q8);
        s *= h->scale;
        if (h->softcap > 0)
            s = h->softcap * tanhf(s / h->softcap);
        scores[j] = s;
        mx = s > mx ? s : mx; /* not fmaxf: a libm call on baseline x86-64 */
    }
    /* softmax, sums in double; a sink adds its term to the denominator */
    double sum = vec->exp_sum(n, scores, mx);
    if (h->sink)
        sum += (double)expf(*h->sink - mx);
    float inv = (float)(1.0 / sum);

    /* out = sum_j p_j V[j], dequantized, in f32 */
    for (int d = 0; d < hd; d++)
        out[d] = 0;
    for (int j = 0; j < n; j++) {
        float p = scores[j] * inv;
        if (p == 0)
            continue;
        axpy(hd, p, h->v + (size_t)j * h->row_bytes, out);
    }
}
