/* attn_kvq.h: the CPU backend's KV cache in Q8_0 or Q4_0 (OLLAMA_KV_CACHE_TYPE).
 *
 * A cache row is kv_dim elements quantized in 32-element blocks (the
 * weight formats of quant.h; head_dim is a multiple of 32, so every head's
 * slice of a row is whole blocks). Storing quantizes rows with the
 * format's row quantizer; attention over one query head does what
 * llama.cpp's flash attention does with such a cache: the query is
 * quantized to Q8_0 and dotted with each K row as a weight row would be
 * (the format's vec_dot, AVX2 where the CPU has it), and the f32
 * probabilities weight the dequantized V rows, summed in f32 (AVX2 where
 * the CPU has it, bitwise the scalar's).
 *
 * Owns no threading (backend_cpu.c splits heads over its pool) and no F16
 * cache (backend_cpu.c, ops_extra.c keep that path unchanged). */
#ifndef BE_CPU_ATTN_KVQ_H
#define BE_CPU_ATTN_KVQ_H

#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"

/* One query head's view of a quantized cache. */
typedef struct be_kvq_head {
    cr_type_t type;        /* CR_TYPE_Q8_0 or CR_TYPE_Q4_0 */
    be_simd_t level;       /* kernel level (be_type_traits_at) */
    int head_dim;          /* elements, a multiple of 32 */
    const uint8_t *k, *v;  /* the head's slice of the first row to read */
    size_t row_bytes;      /* bytes from one cache row to the next */
    int n_kv;              /* rows read: 0..n_kv-1 from k and v */
    float scale;           /* applied to q.k */
    float softcap;         /* > 0: s = softcap * tanh(s / softcap) */
    const float *sink;     /* NULL, or this head's sink logit (the first
                              head's, be_kvq_attend_heads) */
} be_kvq_head_t;

/* True for the KV types this module stores (Q8_0, Q4_0). */
bool be_kvq_type_ok(cr_type_t t);

/* out[head_dim] = sum_j softmax_j(s_j) * V[j], s_j = scale * q . K[j]
 * (soft-capped when softcap > 0; the sink, if any, joins the softmax
 * denominator). q: f32 [head_dim]. Scratch (caller's): scores [n_kv]
 * floats, q8 at least head_dim / 32 * 34 bytes. */
void be_kvq_attend(const be_kvq_head_t *h, const float *q, float *scores, void *q8,
                   float *out);

/* Most heads one be_kvq_attend_heads call takes. */
#define BE_KVQ_MAX_HEADS 16

/* be_kvq_attend for n_heads <= BE_KVQ_MAX_HEADS query heads that read the
 * same K/V slices (one GQA group, or part of it), each K and V row read
 * once for all of them: q and out [n_heads][head_dim] (adjacent heads),
 * scores [n_heads] rows lds floats apart (>= n_kv; any with one head), q8
 * n_heads times be_kvq_attend's bytes; h->sink, if any, points at the
 * first head's sink, head g's at sink[g]. Each head's result is
 * be_kvq_attend's bits: the same operations in the same order. */
void be_kvq_attend_heads(const be_kvq_head_t *h, int n_heads, const float *q, float *scores,
                         size_t lds, void *q8, float *out);

/* acc[0..hd) += p * (dequantized row vr: hd / 32 blocks), each element
 * dequantized to f32 (d * q, as the format's to_float) and then weighted.
 * The scalar reference (attn_kvq.c) and AVX2 versions (attn_kvq_avx2.c:
 * the same bits; call only where be_simd_detect() allows AVX2). */
void be_kvq_axpy_q8_0(int hd, float p, const void *vr, float *acc);
void be_kvq_axpy_q4_0(int hd, float p, const void *vr, float *acc);
void be_kvq_axpy_q8_0_avx2(int hd, float p, const void *vr, float *acc);
void be_kvq_axpy_q4_0_avx2(int hd, float p, const void *vr, float *acc);

/* Quantizes n rows of src [n][row] into rows at..at+n-1 of a cache of type
 * t (row: a multiple of 32), at the detected kernel level. */
void be_kvq_store(cr_type_t t, void *cache, const float *src, int n, int at, int row);

#endif
