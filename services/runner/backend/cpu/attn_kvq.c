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

/* Rows ahead of the one read that the loops prefetch: one head's slice
 * of a row is a few dozen bytes every row_bytes, a stride the hardware
 * prefetchers leave to DRAM latency (as the F16 path's, attn_prefill.h). */
#define KVQ_AHEAD 16

static void prefetch_slice(const uint8_t *p, size_t bytes)
{
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch(p + o);
}

void be_kvq_attend_heads(const be_kvq_head_t *h, int n_heads, const float *q, float *scores,
                         size_t lds, void *q8, float *out)
{
    const be_type_traits_t *kt = be_type_traits_at(h->type, h->level);
    const be_type_traits_t *qt = be_type_traits_at(kt->vec_dot_type, h->level);
    const be_vec_ops_t *vec = be_vec_ops_at(h->level);
    bool avx2 = h->level >= BE_SIMD_AVX2 && be_simd_detect() >= BE_SIMD_AVX2;
    axpy_fn axpy = h->type == CR_TYPE_Q8_0
                       ? (avx2 ? be_kvq_axpy_q8_0_avx2 : be_kvq_axpy_q8_0)
                       : (avx2 ? be_kvq_axpy_q4_0_avx2 : be_kvq_axpy_q4_0);
    int hd = h->head_dim, n = h->n_kv, G = CR_MIN(n_heads, BE_KVQ_MAX_HEADS);
    size_t q8_bytes = (size_t)hd / qt->block_elems * qt->block_bytes;
    size_t slice = (size_t)hd / kt->block_elems * kt->block_bytes;
    float mx[BE_KVQ_MAX_HEADS], inv[BE_KVQ_MAX_HEADS];

    /* scores: q (as Q8_0) . K row j, scaled (and soft-capped); each K row
     * read once for all the heads */
    for (int g = 0; g < G; g++) {
        qt->from_float(q + (size_t)g * hd, (uint8_t *)q8 + (size_t)g * q8_bytes, hd);
        mx[g] = h->sink ? h->sink[g] : -INFINITY;
    }
    for (int j = 0; j < n; j++) {
        const uint8_t *kr = h->k + (size_t)j * h->row_bytes;
        if (j + KVQ_AHEAD < n)
            prefetch_slice(kr + (size_t)KVQ_AHEAD * h->row_bytes, slice);
        for (int g = 0; g < G; g++)
            kt->vec_dot(hd, &scores[(size_t)g * lds + (size_t)j], kr,
                        (const uint8_t *)q8 + (size_t)g * q8_bytes);
    }
    for (int g = 0; g < G; g++) {
        float *row = scores + (size_t)g * lds;
        vec->scores(n, row, h->scale, h->softcap);
        for (int j = 0; j < n; j++)
            mx[g] = row[j] > mx[g] ? row[j] : mx[g]; /* not fmaxf: a libm call */
    }
    /* softmax, sums in double; a sink adds its term to the denominator */
    for (int g = 0; g < G; g++) {
        double sum = vec->exp_sum(n, scores + (size_t)g * lds, mx[g]);
        if (h->sink)
            sum += (double)expf(h->sink[g] - mx[g]);
        inv[g] = (float)(1.0 / sum);
    }

    /* out = sum_j p_j V[j], dequantized, in f32 */
    for (size_t d = 0; d < (size_t)G * (size_t)hd; d++)
        out[d] = 0;
    for (int j = 0; j < n; j++) {
        const uint8_t *vr = h->v + (size_t)j * h->row_bytes;
        if (j + KVQ_AHEAD < n)
            prefetch_slice(vr + (size_t)KVQ_AHEAD * h->row_bytes, slice);
        for (int g = 0; g < G; g++) {
            float p = scores[(size_t)g * lds + (size_t)j] * inv[g];
            if (p == 0)
                continue;
            axpy(hd, p, vr, out + (size_t)g * hd);
        }
    }
}

void be_kvq_attend(const be_kvq_head_t *h, const float *q, float *scores, void *q8,
                   float *out)
{
    be_kvq_attend_heads(h, 1, q, scores, 0, q8, out);
}
