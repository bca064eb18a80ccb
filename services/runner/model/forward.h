/* forward.h: the evaluation state of n_seq sequences over a loaded model.
 *
 * An rn_ctx_t owns one KV cache per sequence (n_ctx positions each, F16
 * like the reference engine, or Q8_0 / Q4_0 blocks along each head as
 * llama.cpp's quantized cache; the runner's slots are its sequences), one set
 * of activation buffers sized for n_batch tokens that all sequences share,
 * and each sequence's last logits, all allocated once by rn_ctx_new:
 * evaluating tokens allocates nothing. It runs the forward pass through the
 * model's backend instances (backend.h): one part per run of layers on one
 * instance (model.h: rn_placement_t), each with its layers' KV cache and
 * its own activation buffers; the residual stream crosses to the next
 * part through host memory (download, then upload) at each boundary.
 *
 * Sequence s's cache holds positions 0..n_past(s)-1. An eval appends (or,
 * with pos < n_past, first drops the tail from pos on, so a caller can keep
 * a common prompt prefix); truncate/clear drop the tail explicitly.
 *
 * rn_ctx_eval_batch evaluates spans of several sequences in one forward
 * pass: the weight matmuls take every span's tokens as rows of one matrix
 * (decoding B sequences reads the weights once, not B times), while rope
 * uses each token's own position and attention runs per span over its own
 * sequence's cache. The functions without _seq act on sequence 0.
 *
 * Owns no model (borrowed; must outlive the context) and no sampling,
 * tokenizing or request logic. Not thread-safe: one thread per context, and
 * contexts sharing a backend must not evaluate concurrently. */
#ifndef RN_FORWARD_H
#define RN_FORWARD_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/model/model.h"
#include "services/runner/model/lora.h"

#define RN_CTX_DEFAULT_BATCH 512
#define RN_CTX_MAX_SEQ 64 /* sequences (parallel slots) per context */

typedef struct rn_ctx_opts {
    int n_ctx;   /* cache positions per sequence, 1..RN_MODEL_MAX_CTX */
    int n_batch; /* tokens per internal step (<= 0: RN_CTX_DEFAULT_BATCH,
                    capped at n_ctx); larger evals are split */
    int n_seq;   /* sequences, each its own cache (<= 0: 1; at most
                    RN_CTX_MAX_SEQ) */
    cr_type_t kv_type; /* cache elements: CR_TYPE_F16 (also what 0, a
                          zeroed field, means), CR_TYPE_Q8_0 or
                          CR_TYPE_Q4_0 (OLLAMA_KV_CACHE_TYPE) */
    const rn_lora_t *lora; /* LoRA adapters added to the projections at
                              every step (model/lora.h; borrowed, must
                              outlive the context, loaded for the same
                              model); NULL: none */
} rn_ctx_opts_t;

/* One sequence's tokens in a batched eval. */
typedef struct rn_ctx_span {
    int seq;               /* 0..n_seq-1, at most once per batch */
    const int32_t *tokens; /* [n], borrowed for the call */
    int n;                 /* >= 1 */
    int pos;               /* first position, <= n_past(seq) */
    /* NULL, or host rows [m][dim] (borrowed for the call) for the span's
     * embedding positions: a negative token id takes the next row, in
     * order, instead of a token embedding (images: their embeddings enter
     * the residual stream as they are, without the model's embedding
     * scale). Without embd, negative ids are refused. */
    const float *embd;
    /* NULL, or host [n][3]: M-RoPE positions (t, h, w) of the span's
     * tokens (models with hparams.mrope; an image's tokens at their grid
     * positions, as mtmd places them). Without it each token takes
     * (r, r, r), r = the position after the previous token's: one past
     * the largest of its three (0 at the start). The fourth plane is 0. */
    const int32_t *rope_pos;
    /* With embd: each run of consecutive negative ids (one image) attends
     * to itself both ways: a query in the run sees the cache up to the
     * run's last position (and, on a sliding layer, from its own window's
     * start), as llama.cpp decodes a gemma3 image non-causally. The
     * caller keeps every run whole within one span. */
    bool embd_full;
    /* NULL, or host [n][n_vocab] (borrowed for the call): every token's
     * logits, row t after token t (speculative decoding verifies a span of
     * drafted tokens with them). The sequence's last logits are row n-1. */
    float *logits_all;
} rn_ctx_span_t;

typedef struct rn_ctx rn_ctx_t;

/* Creates a context for model m (borrowed; must outlive it). On success *out
 * is owned by the caller: free with rn_ctx_destroy. CR_E_INVALID for bad
 * options, CR_E_UNSUPPORTED for a quantized kv_type the model (head_dim not
 * a multiple of 32) or an instance holding layers (be_kv_type_supported)
 * cannot take, CR_E_TOO_LARGE if sizes overflow, CR_E_NOMEM when the cache
 * or buffers cannot be allocated (message gives the bytes). */
cr_status_t rn_ctx_new(const rn_model_t *m, const rn_ctx_opts_t *o,
                       rn_ctx_t **out, cr_err_t *err);

void rn_ctx_destroy(rn_ctx_t **self_p);

/* Evaluates tokens[0..n) at positions pos..pos+n-1 (pos <= n_past; the
 * cache tail from pos on is dropped first). Afterwards n_past = pos + n and
 * rn_ctx_logits() holds the last token's logits. If logits_all is not NULL
 * it receives every token's logits: [n][n_vocab] (caller-owned).
 * CR_E_INVALID (n < 1, pos > n_past, a token id outside the vocabulary:
 * "token 600 at index 3 is outside the vocabulary (512)"), CR_E_TOO_LARGE
 * (pos + n > n_ctx), CR_E_UNSUPPORTED for an embedding-only model (the bert
 * family: "embedding-only model ('bert' has no output matrix)"). On error the cache is left as before the call, except
 * that pos..n_past may have been dropped. */
cr_status_t rn_ctx_eval(rn_ctx_t *c, const int32_t *tokens, int n, int pos,
                        float *logits_all, cr_err_t *err);

/* rn_ctx_eval on sequence seq. */
cr_status_t rn_ctx_eval_seq(rn_ctx_t *c, int seq, const int32_t *tokens, int n,
                            int pos, float *logits_all, cr_err_t *err);

/* Evaluates spans[0..n_spans) in one forward pass (see the top of this
 * file). Their tokens together must fit n_batch (CR_E_TOO_LARGE: the caller
 * splits prompts into chunks). Afterwards each span's sequence has n_past =
 * pos + n and rn_ctx_seq_logits(seq) holds its last token's logits.
 * Errors as rn_ctx_eval, naming the span, and CR_E_INVALID for a sequence
 * out of range or twice in the batch; nothing is evaluated then. A
 * sequence's logits are the same as from rn_ctx_eval_seq of its span alone
 * up to the summation order of the kernels (on the CPU backend bitwise: its
 * matmul takes the same float steps for a row whatever the batch). */
cr_status_t rn_ctx_eval_batch(rn_ctx_t *c, const rn_ctx_span_t *spans, int n_spans,
                              cr_err_t *err);

/* Sentence embedding: clears the cache, evaluates tokens[0..n) from
 * position 0, and writes to out [dim] (caller-owned) the pooled hidden
 * state, L2-normalized if `normalize`, pooled as the model's
 * hparams.pooling says (<arch>.pooling_type; mean when absent, as
 * llama.cpp's mean pooling): the mean over all n positions, the first
 * position (CLS; also a reranker's: the hidden state its head reads) or
 * the last. Decoders pool the final-normed hidden state
 * (what the output matrix would multiply); the bert family pools its last
 * layer's output, with bidirectional attention over all n tokens at once
 * (an encoder context's n_batch is always n_ctx). The cache then holds the
 * n tokens. Errors as rn_ctx_eval (never CR_E_UNSUPPORTED), and
 * CR_E_TOO_LARGE when a bert input is longer than its learned positions
 * (<arch>.context_length). */
cr_status_t rn_ctx_embed(rn_ctx_t *c, const int32_t *tokens, int n,
                         bool normalize, float *out, cr_err_t *err);

/* rn_ctx_embed into sequence seq's cache. */
cr_status_t rn_ctx_embed_seq(rn_ctx_t *c, int seq, const int32_t *tokens, int n,
                             bool normalize, float *out, cr_err_t *err);

/* A reranker's scores (pooling RN_POOL_RANK, bert): clears sequence seq's
 * cache, runs the encoder over tokens[0..n) (one formatted pair, e.g.
 * rn_tokenizer_encode_pair) and writes rn_ctx_rank_n_out(c) floats to out
 * (caller-owned): the classifier head over the first position's hidden
 * state, as llama.cpp's rank pooling: cls_out . tanh(cls . x0 + cls_b) +
 * cls_out_b, each stage only where its tensor exists. out[0] is the
 * relevance score a rerank reports. The cache then holds the n tokens.
 * CR_E_UNSUPPORTED for a model that is not a reranker; otherwise errors as
 * rn_ctx_embed. Allocates nothing. */
cr_status_t rn_ctx_rank_seq(rn_ctx_t *c, int seq, const int32_t *tokens, int n,
                            float *out, cr_err_t *err);

/* Floats rn_ctx_rank_seq writes: n_cls_out with a cls.output matrix, else
 * dim; 0 for a model that is not a reranker. */
int rn_ctx_rank_n_out(const rn_ctx_t *c);

/* Logits [n_vocab] of the last evaluated token (zeros before any eval).
 * Borrowed; overwritten by the next eval of that sequence. */
const float *rn_ctx_logits(const rn_ctx_t *c);
const float *rn_ctx_seq_logits(const rn_ctx_t *c, int seq);

/* Positions in the cache. */
int rn_ctx_n_past(const rn_ctx_t *c);
int rn_ctx_seq_n_past(const rn_ctx_t *c, int seq);
int rn_ctx_n_ctx(const rn_ctx_t *c);
int rn_ctx_n_seq(const rn_ctx_t *c);
int rn_ctx_n_batch(const rn_ctx_t *c);
int rn_ctx_n_vocab(const rn_ctx_t *c);
/* Floats in one row of rn_ctx_span_t.embd: the model's embedding length. */
int rn_ctx_embd_dim(const rn_ctx_t *c);

/* Keeps the first n_keep positions (no-op if n_keep >= n_past). */
void rn_ctx_truncate(rn_ctx_t *c, int n_keep);
void rn_ctx_seq_truncate(rn_ctx_t *c, int seq, int n_keep);

/* Empties the cache. */
void rn_ctx_clear(rn_ctx_t *c);

/* Bytes of KV cache (all sequences) and of activation buffers this context
 * holds, over all its parts. */
uint64_t rn_ctx_kv_bytes(const rn_ctx_t *c);
uint64_t rn_ctx_buffer_bytes(const rn_ctx_t *c);

/* The cache's element type (CR_TYPE_F16, CR_TYPE_Q8_0 or CR_TYPE_Q4_0). */
cr_type_t rn_ctx_kv_type(const rn_ctx_t *c);

/* One part of a context: a run of layers on one backend instance (see
 * model.h: rn_placement_t). A model on one instance has one part. */
typedef struct rn_ctx_part_info {
    be_backend_t *be;       /* the instance (borrowed from the model) */
    int first_layer;        /* its layers first_layer..+n_layers-1 */
    int n_layers;           /* 0: the output layer alone */
    bool input;             /* embeds the tokens (part 0) */
    bool output;            /* computes the logits (the last part) */
    uint64_t kv_bytes;      /* its layers' KV cache, all sequences */
    uint64_t buffer_bytes;  /* this context's activation buffers on it */
    /* what the instance reports now (be_ops_t.memory_used), for every
     * model and context using it */
    uint64_t be_weight_bytes, be_buffer_bytes;
} rn_ctx_part_info_t;

int rn_ctx_n_parts(const rn_ctx_t *c);
/* Part i (0..n_parts-1), in layer order. */
void rn_ctx_part_info(const rn_ctx_t *c, int i, rn_ctx_part_info_t *out);

#endif
