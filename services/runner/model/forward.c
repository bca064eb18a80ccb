/* forward.c: the decoder forward pass over one or more sequences (see
 * forward.h).
 *
 * Read it top to bottom like llama2.c: rn_ctx_new sizes every buffer, and
 * forward_chunk runs the model's stages in order, one labelled step each,
 * for a chunk of up to n_batch tokens. One pass serves every architecture
 * in model.h: the llama stages always run, and the lettered steps (3a, 4a,
 * 7a, ...) run only for architectures whose hparams/weights ask for them
 * (qwen2 biases, qwen3/gemma3/olmo2 q/k norms, gemma scaling, post-norms,
 * GELU, soft-caps and sliding windows, NEOX rope, YaRN rope (gpt-oss,
 * mistral3, qwen2, qwen3, olmo2), gpt-oss's output bias and attention
 * sinks, granite's multipliers, olmo2 without pre-norms, command-r's
 * LayerNorms and parallel ffn). Those use the backend's optional ops
 * (be_ext_ops); dense llama (and mistral3 and smollm3, its graph) never
 * touches them. A layer with experts replaces the FFN (steps 10-11) by
 * step 10m, model/moe.c. Every buffer is backend memory: this file only
 * passes pointers to backend ops and never touches the numbers, except the
 * final logits it downloads (where gemma2's final soft-cap and granite's
 * and command-r's logit scales are applied).
 *
 * The bert family (encoders) has its own pass, forward_encoder: the whole
 * sequence in one chunk, bidirectional attention, post-LayerNorms; it makes
 * hidden states for embeddings only.
 *
 * Shapes below use B = tokens in the chunk, D = dim, Hq = n_heads,
 * Hk = n_kv_heads, hd = head_dim, Q = Hq*hd, KV = Hk*hd, F = ffn,
 * V = n_vocab, C = n_ctx. Weights are [rows][cols] (see model.h). */
#include "lib/prelude.h"
#include "services/runner/model/forward.h"
#include "services/runner/backend/cpu/vec.h"
#include "services/runner/model/moe.h"

#include <assert.h>
#include <math.h>

/* Rows of logits computed per output matmul when all are requested: keeps
 * the device logits buffer at LOGITS_ROWS x V instead of n_batch x V. */
#define LOGITS_ROWS 8

/* Parts of a context: runs of layers (RN_MAX_RANGES ranges between runs on
 * the host make at most 2 RN_MAX_RANGES + 1), plus the embeddings and the
 * output layer on instances of their own. */
#define MAX_PARTS (2 * RN_MAX_RANGES + 3)

/* One backend instance's share of the model (model.h: rn_placement_t):
 * layers l0..l1-1, their KV cache and its own activation buffers, all in
 * that instance's memory. Part 0 embeds the tokens, the last part computes
 * the logits; either may hold no layer (the embeddings or the output layer
 * on an instance of their own: model.h). Only the residual stream x
 * crosses between parts (hand_over). */
typedef struct part {
    be_backend_t *be;
    const be_ops_ext_t *ext;    /* optional ops; NULL for llama */
    const be_weight_t *rope_freqs; /* llama's frequency factors on this
                                      instance, or NULL */
    const be_weight_t *rope_ff; /* NEOX frequency factors for this n_ctx, or
                                   NULL */
    int l0, l1;

    /* KV cache, rows of KV elements of the context's kv_type (F16, or
     * 32-element Q8_0 / Q4_0 blocks): [n_seq][l1-l0][C] rows each. */
    uint8_t *k_cache;
    uint8_t *v_cache;

    /* Activations (backend memory; those a part without layers does not
     * use are NULL). */
    float *x;      /* [B][D] residual stream */
    float *xb;     /* [B][D] normed input of a sub-layer */
    float *xb2;    /* [B][D] sub-layer output before the residual add */
    float *q;      /* [B][Q] queries */
    float *k;      /* [B][KV] keys of this chunk */
    float *v;      /* [B][KV] values of this chunk */
    float *att;    /* [B][Q] attention output */
    float *hb;     /* [B][F] ffn gate, then silu(gate)*up (experts:
                      [B][Fm], Fm = max(Fe, Fs)) */
    float *hb2;    /* [B][F] ffn up (experts: [B][Fm]) */
    float *router; /* [B][E] router logits (experts only) */
    float *xe;     /* [B][D] one expert's gathered rows (experts only) */
    float *out;    /* [LOGITS_ROWS][V] logits on the backend (last part) */
    float *scratch; /* attention_ext scratch (soft-cap / window layers) */
    float *lr;     /* [B][R] an adapter's A x (LoRA only; R = max rank) */
    float *ly;     /* [B][max(D, Q, KV, F)] its scale * B (A x) */
    uint64_t kv_bytes, buf_bytes;
} part_t;

struct rn_ctx {
    const rn_model_t *m;
    const rn_hparams_t *hp;
    const rn_weights_t *w;
    int n_ctx, n_batch, n_seq;
    cr_type_t kv_type;   /* cache element type (rn_ctx_opts_t) */
    size_t kv_row_bytes; /* bytes of one cache row of KV elements */
    int *n_past;   /* [n_seq] positions filled in each sequence's cache */
    part_t part[MAX_PARTS]; /* in layer order */
    int n_parts;

    /* Host. */
    float *hand;     /* [B][D] the residual stream between parts */
    int32_t *tok;    /* [B] token ids of the chunk, spans in order */
    int32_t *tok_rows; /* [B] tok with embedding positions (< 0) as 0 */
    int32_t *pos;    /* [B] positions of the chunk */
    int32_t *mpos;   /* [4][B] M-RoPE planes of the chunk (hp->mrope) */
    int32_t *rnext;  /* [n_seq][C] M-RoPE: the position the token after
                        cache row p takes (hp->mrope) */
    int32_t *zeros;  /* [B] token type 0 of every token (encoders) */
    float *logits;   /* [n_seq][V] each sequence's last token's logits */
    float *stage;    /* [LOGITS_ROWS][V] logits rows downloaded together */
    float *hrow;     /* [D] one downloaded hidden row (embeddings) */
    double *pool;    /* [D] sum of hidden rows (embeddings) */
    rn_moe_t *moe;   /* expert routing scratch (models with experts) */
    const rn_lora_t *lora; /* adapters (rn_ctx_opts_t), or NULL */
};

/* The part computing the logits (and pooling embeddings). */
static part_t *last_part(rn_ctx_t *c)
{
    return &c->part[c->n_parts - 1];
}

/* ---- creation --------------------------------------------------------- */

/* a * b * c * elem bytes, or false on overflow. */
static bool mul_size(uint64_t a, uint64_t b, uint64_t c, uint64_t elem, size_t *out)
{
    if (a && b > UINT64_MAX / a)
        return false;
    uint64_t r = a * b;
    if (r && c > UINT64_MAX / r)
        return false;
    r *= c;
    if (r && elem > UINT64_MAX / r)
        return false;
    r *= elem;
    if (r > SIZE_MAX)
        return false;
    *out = (size_t)r;
    return true;
}

static cr_status_t alloc_buf(part_t *P, void **p, uint64_t a, uint64_t b,
                             uint64_t elem, const char *what, cr_err_t *err)
{
    size_t bytes = 0;
    if (!mul_size(a, b, 1, elem, &bytes))
        return cr_err_set(err, CR_E_TOO_LARGE, "buffer '%s' size overflows", what);
    *p = P->be->ops->alloc(P->be, bytes);
    if (!*p)
        return cr_err_set(err, CR_E_NOMEM, "cannot allocate %zu bytes for '%s' (%s "
                          "backend)", bytes, what, P->be->ops->name);
    P->buf_bytes += bytes;
    return CR_OK;
}

void rn_ctx_destroy(rn_ctx_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_ctx_t *c = *self_p;
    for (int p = 0; p < c->n_parts; p++) {
        part_t *P = &c->part[p];
        be_backend_t *be = P->be;
        void *bufs[] = {P->k_cache, P->v_cache, P->x, P->xb, P->xb2, P->q, P->k,
                        P->v, P->att, P->hb, P->hb2, P->out, P->scratch,
                        P->router, P->xe, P->lr, P->ly};
        for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
            if (bufs[i])
                be->ops->free(be, bufs[i]);
    }
    free(c->hand);
    free(c->tok);
    free(c->tok_rows);
    free(c->pos);
    free(c->mpos);
    free(c->rnext);
    free(c->n_past);
    free(c->stage);
    free(c->zeros);
    free(c->logits);
    free(c->hrow);
    free(c->pool);
    rn_moe_destroy(&c->moe);
    free(c);
    *self_p = NULL;
}

/* Splits the model's layers into parts: one for the token embeddings when
 * their instance is not layer 0's, one per run of layers on the same
 * instance, then one for the output layer when its instance is another. */
static void make_parts(rn_ctx_t *c)
{
    const rn_model_t *m = c->m;
    int n = c->hp->n_layers;
    be_backend_t *in = rn_model_input_backend(m);
    if (in != rn_model_layer_backend(m, 0))
        c->part[c->n_parts++] = (part_t){.be = in, .l0 = 0, .l1 = 0};
    for (int l = 0; l < n; l++) {
        be_backend_t *be = rn_model_layer_backend(m, l);
        if (c->n_parts == 0 || c->part[c->n_parts - 1].be != be)
            c->part[c->n_parts++] = (part_t){.be = be, .l0 = l, .l1 = l};
        c->part[c->n_parts - 1].l1 = l + 1;
    }
    be_backend_t *out = rn_model_layer_backend(m, n);
    if (c->part[c->n_parts - 1].be != out)
        c->part[c->n_parts++] = (part_t){.be = out, .l0 = n, .l1 = n};
}

/* Buffers, KV cache and scratch of part P. */
static cr_status_t part_alloc(rn_ctx_t *c, part_t *P, bool last, cr_err_t *err)
{
    const rn_hparams_t *hp = c->hp;
    uint64_t B = (uint64_t)c->n_batch, D = (uint64_t)hp->dim;
    uint64_t QD = (uint64_t)hp->q_dim;
    uint64_t KV = (uint64_t)hp->kv_dim, F = (uint64_t)hp->ffn;
    uint64_t V = (uint64_t)hp->n_vocab;
    int n_layers = P->l1 - P->l0;
    if (hp->n_expert > 0) /* no dense FFN: hb, hb2 hold one expert's rows */
        F = (uint64_t)CR_MAX(hp->ffn_expert, hp->ffn_shared);
    cr_status_t st = CR_OK;
    P->ext = rn_hparams_llama_graph(hp) ? NULL : be_ext_ops(P->be);
    if (!rn_hparams_llama_graph(hp) && !P->ext)
        return cr_err_set(err, CR_E_UNSUPPORTED, "architecture '%s' needs ops the %s "
                          "backend does not have", hp->arch, P->be->ops->name);
    /* this instance's copies of the frequency factors: rope_freqs, else
     * LongRoPE long/short by context length against the original one (as
     * llama.cpp chooses per context) */
    const rn_rope_factors_t *rf = rn_model_rope_factors(c->m, P->be);
    if (c->w->has_rope_freqs)
        P->rope_freqs = P->rope_ff = &rf->freqs;
    else if (c->w->rope_long.data)
        P->rope_ff = c->n_ctx > hp->n_ctx_orig ? &rf->longf : &rf->shortf;

    if (n_layers > 0) {
        size_t cache_bytes = 0;
        if (!mul_size((uint64_t)n_layers * (uint64_t)c->n_seq, (uint64_t)c->n_ctx, 1,
                      c->kv_row_bytes, &cache_bytes))
            return cr_err_set(err, CR_E_TOO_LARGE, "KV cache for n_ctx %d overflows",
                              c->n_ctx);
        P->k_cache = P->be->ops->alloc(P->be, cache_bytes);
        P->v_cache = P->k_cache ? P->be->ops->alloc(P->be, cache_bytes) : NULL;
        if (!P->v_cache)
            return cr_err_set(err, CR_E_NOMEM, "cannot allocate the KV cache (2 x %zu "
                              "bytes of %s for n_ctx %d x %d sequences, %s backend)",
                              cache_bytes, cr_kv_cache_type_name(c->kv_type), c->n_ctx,
                              c->n_seq, P->be->ops->name);
        P->kv_bytes = 2 * (uint64_t)cache_bytes;
    }
    if ((st = alloc_buf(P, (void **)&P->x, B, D, sizeof(float), "x", err)) ||
        (st = alloc_buf(P, (void **)&P->xb, B, D, sizeof(float), "xb", err)))
        return st;
    if (n_layers > 0 &&
        ((st = alloc_buf(P, (void **)&P->xb2, B, D, sizeof(float), "xb2", err)) ||
         (st = alloc_buf(P, (void **)&P->q, B, QD, sizeof(float), "q", err)) ||
         (st = alloc_buf(P, (void **)&P->k, B, KV, sizeof(float), "k", err)) ||
         (st = alloc_buf(P, (void **)&P->v, B, KV, sizeof(float), "v", err)) ||
         (st = alloc_buf(P, (void **)&P->att, B, QD, sizeof(float), "att", err)) ||
         (st = alloc_buf(P, (void **)&P->hb, B, F, sizeof(float), "hb", err)) ||
         (st = alloc_buf(P, (void **)&P->hb2, B, F, sizeof(float), "hb2", err))))
        return st;
    if (n_layers > 0 && hp->n_expert > 0 &&
        ((st = alloc_buf(P, (void **)&P->router, B, (uint64_t)hp->n_expert,
                         sizeof(float), "router logits", err)) ||
         (st = alloc_buf(P, (void **)&P->xe, B, D, sizeof(float), "expert rows", err))))
        return st;
    if (last && (st = alloc_buf(P, (void **)&P->out, LOGITS_ROWS, V, sizeof(float),
                                "logits", err)))
        return st;
    uint64_t widest = CR_MAX(CR_MAX(D, QD), CR_MAX(KV, F));
    if (n_layers > 0 && c->lora &&
        ((st = alloc_buf(P, (void **)&P->lr, B, (uint64_t)rn_lora_max_rank(c->lora),
                         sizeof(float), "adapter rank rows", err)) ||
         (st = alloc_buf(P, (void **)&P->ly, B, widest, sizeof(float), "adapter output",
                         err))))
        return st;
    if (n_layers > 0 && P->ext &&
        (st = alloc_buf(P, (void **)&P->scratch, 1,
                        be_attention_ext_scratch(c->n_ctx, hp->head_dim), sizeof(float),
                        "attention scratch", err)))
        return st;
    int64_t max_cols = (int64_t)CR_MAX(CR_MAX(D, QD), CR_MAX(F, (uint64_t)rn_lora_max_rank(c->lora)));
    return P->be->ops->reserve(P->be, c->n_batch, max_cols, c->n_ctx, hp->n_heads, err);
}

/* The cache type must be one every part's instance stores, and quantized
 * blocks (32 elements) must not straddle heads, as llama.cpp requires. */
static cr_status_t check_kv_type(const rn_ctx_t *c, cr_err_t *err)
{
    const char *name = cr_kv_cache_type_name(c->kv_type);
    if (!name)
        return cr_err_set(err, CR_E_INVALID, "KV cache type %d is not f16, q8_0 or q4_0",
                          (int)c->kv_type);
    if (c->kv_type == CR_TYPE_F16)
        return CR_OK;
    uint32_t block = cr_type_info(c->kv_type)->block_elems;
    if (c->hp->head_dim % (int)block)
        return cr_err_set(err, CR_E_UNSUPPORTED, "KV cache type %s needs head_dim a "
                          "multiple of %u ('%s' has %d)", name, block, c->hp->arch,
                          c->hp->head_dim);
    for (int p = 0; p < c->n_parts; p++)
        if (c->part[p].l1 > c->part[p].l0 &&
            !be_kv_type_supported(c->part[p].be, c->kv_type))
            return cr_err_set(err, CR_E_UNSUPPORTED, "KV cache type %s is not supported "
                              "by the %s backend", name, c->part[p].be->ops->name);
    return CR_OK;
}

cr_status_t rn_ctx_new(const rn_model_t *m, const rn_ctx_opts_t *o, rn_ctx_t **out,
                       cr_err_t *err)
{
    *out = NULL;
    if (!o || o->n_ctx < 1 || o->n_ctx > RN_MODEL_MAX_CTX)
        return cr_err_set(err, CR_E_INVALID, "n_ctx %d is out of range 1..%d",
                          o ? o->n_ctx : 0, RN_MODEL_MAX_CTX);
    rn_ctx_t *c = calloc(1, sizeof *c);
    if (!c)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    c->m = m;
    c->hp = rn_model_hparams(m);
    c->w = rn_model_weights(m);
    c->n_ctx = o->n_ctx;
    c->n_seq = o->n_seq > 0 ? o->n_seq : 1;
    if (c->n_seq > RN_CTX_MAX_SEQ) {
        free(c);
        return cr_err_set(err, CR_E_INVALID, "n_seq %d is out of range 1..%d", o->n_seq,
                          RN_CTX_MAX_SEQ);
    }
    c->lora = o->lora;
    c->n_batch = o->n_batch > 0 ? o->n_batch : RN_CTX_DEFAULT_BATCH;
    if (c->n_batch > c->n_ctx || c->hp->non_causal)
        c->n_batch = c->n_ctx; /* an encoder sees the whole sequence at once */

    const rn_hparams_t *hp = c->hp;
    cr_status_t st = CR_OK;
    make_parts(c);
    c->kv_type = o->kv_type == CR_TYPE_F32 ? CR_TYPE_F16 : o->kv_type;
    if ((st = check_kv_type(c, err)))
        goto fail;
    c->kv_row_bytes = be_kv_row_bytes(c->kv_type, hp->kv_dim);
    uint64_t B = (uint64_t)c->n_batch, D = (uint64_t)hp->dim;
    uint64_t V = (uint64_t)hp->n_vocab;
    for (int p = 0; p < c->n_parts; p++)
        if ((st = part_alloc(c, &c->part[p], p == c->n_parts - 1, err)))
            goto fail;
    if (hp->n_expert > 0 && (st = rn_moe_new(hp, c->n_batch, &c->moe, err)))
        goto fail;
    c->tok = calloc(B, sizeof *c->tok);
    c->tok_rows = calloc(B, sizeof *c->tok_rows);
    c->pos = calloc(B, sizeof *c->pos);
    c->n_past = calloc((size_t)c->n_seq, sizeof *c->n_past);
    c->zeros = calloc(B, sizeof *c->zeros);
    c->logits = calloc(V * (uint64_t)c->n_seq, sizeof *c->logits);
    c->stage = calloc(V * LOGITS_ROWS, sizeof *c->stage);
    c->hrow = calloc(D, sizeof *c->hrow);
    c->pool = calloc(D, sizeof *c->pool);
    c->hand = c->n_parts > 1 ? calloc(B * D, sizeof *c->hand) : NULL;
    if (hp->mrope) {
        c->mpos = calloc(4 * B, sizeof *c->mpos);
        c->rnext = calloc((size_t)c->n_seq * (size_t)c->n_ctx, sizeof *c->rnext);
    }
    if (!c->tok || !c->tok_rows || !c->pos || !c->n_past || !c->zeros || !c->logits || !c->stage ||
        !c->hrow || !c->pool || (c->n_parts > 1 && !c->hand) ||
        (hp->mrope && (!c->mpos || !c->rnext))) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory for logits (%" PRIu64 ")", V);
        goto fail;
    }
    *out = c;
    return CR_OK;
fail:
    rn_ctx_destroy(&c);
    return st;
}

/* ---- the forward pass ------------------------------------------------- */

/* Step 4: rotary position embedding of x: [B][heads][hd] for layer L. */
static void rope_layer(rn_ctx_t *c, const part_t *P, const rn_layer_t *L, float *x,
                       int n, int heads)
{
    const rn_hparams_t *hp = c->hp;
    if (L->no_rope) /* 4a. smollm3 (every 4th layer), cohere2 (global ones) */
        return;
    /* M-RoPE (qwen2vl): NEOX pairs, each section of pairs at its own
     * position plane (c->mpos, set_mrope) */
    if (hp->mrope) {
        P->ext->rope_multi(P->be, x, n, heads, hp->head_dim, hp->n_rot, c->mpos,
                           hp->rope_sections, hp->rope_base, false);
        return;
    }
    /* YaRN: gpt-oss (its sliding layers' base may differ, and with it the
     * correction dims), mistral3 (adjacent pairs), qwen2, qwen3, olmo2
     * (sliding layers: plain rope) */
    if (hp->rope_yarn) {
        P->ext->rope_yarn(P->be, x, n, heads, hp->head_dim, hp->n_rot, c->pos,
                          L->swa ? &hp->yarn_swa : &hp->yarn, P->rope_ff);
        return;
    }
    if (!hp->rope_neox) {
        /* llama: adjacent pairs, Llama-3 frequency factors if present */
        P->be->ops->rope(P->be, x, n, heads, hp->head_dim, hp->n_rot, c->pos,
                         hp->rope_base, P->rope_freqs);
        return;
    }
    /* NEOX: pairs (i, i + n_rot/2); gemma3's sliding layers have their own
     * base and no position scaling */
    float base = L->swa ? hp->rope_base_swa : hp->rope_base;
    float scale = L->swa ? 1.0f : hp->rope_scale;
    P->ext->rope_neox(P->be, x, n, heads, hp->head_dim, hp->n_rot, c->pos, base, scale,
                      P->rope_ff, hp->rope_attn_factor);
}

/* Step 4b: each token's query row [Q] scaled by its position's attention
 * temperature, computed as llama.cpp does (in double, from float). */
static void temper_queries(rn_ctx_t *c, const part_t *P, int n)
{
    const rn_hparams_t *hp = c->hp;
    for (int t = 0; t < n; t++) {
        float period = floorf((float)c->pos[t] / (float)hp->attn_temp_len);
        float s = (float)(log((double)period + 1.0) * hp->attn_temp + 1.0);
        if (s != 1.0f)
            P->ext->scale(P->be, P->q + (size_t)t * (size_t)hp->q_dim, (size_t)hp->q_dim, s);
    }
}

/* Step 6 on a sliding-window layer without soft-cap, through the threaded
 * attention op: queries whose window starts at key 0 go in one call; each
 * later query t sees only keys qpos-W+1..qpos, so it is one call over the
 * cache rows from qpos-W+1 (pointer offset), as if at position W-1. Same
 * kernels and summation order as one masked call: bitwise equal. */
static void attention_window(rn_ctx_t *c, const part_t *P, float *att, const float *q,
                             const uint8_t *kc, const uint8_t *vc,
                             const be_attn_t *attn, int W)
{
    const be_ops_t *op = P->be->ops;
    size_t row = c->kv_row_bytes, Q = (size_t)c->hp->q_dim;
    int p = attn->pos0, n = attn->n_tok;
    int n_full = CR_MAX(0, CR_MIN(n, W - p)); /* queries with qpos < W */
    if (n_full > 0) {
        be_attn_t a = *attn;
        a.n_tok = n_full;
        op->attention(P->be, att, q, kc, vc, &a);
    }
    for (int t = n_full; t < n; t++) {
        int first = p + t - W + 1;
        be_attn_t a = *attn;
        a.n_tok = 1;
        a.pos0 = W - 1;
        op->attention(P->be, att + (size_t)t * Q, q + (size_t)t * Q,
                      kc + (size_t)first * row, vc + (size_t)first * row, &a);
    }
}

/* One sequence's part of a chunk: rows off..off+n-1 of every activation
 * are its tokens, at positions pos..pos+n-1 of cache `seq`. */
typedef struct span {
    int seq, off, n, pos;
    const float *embd; /* rows for its negative ids (rn_ctx_span_t), or NULL */
    bool embd_full;    /* its image runs attend both ways (rn_ctx_span_t) */
} span_t;

/* Step 6c: the queries of each run of negative ids (an image) in span S
 * see the cache from their window's start (0, or qpos-W+1 on a sliding
 * layer, W > 0) to the run's last row, all of it stored in step 5. One
 * call per query over the rows from `first` (pointer offset), as if at
 * position last - first; replaces the causal result step 6 wrote. */
static void attention_image_runs(rn_ctx_t *c, const part_t *P, const span_t *S,
                                 float *att, const float *q, const uint8_t *kc,
                                 const uint8_t *vc, const be_attn_t *attn, int W)
{
    const be_ops_t *op = P->be->ops;
    size_t row = c->kv_row_bytes, Q = (size_t)c->hp->q_dim;
    const int32_t *tok = c->tok + S->off;
    for (int t = 0; t < S->n;) {
        if (tok[t] >= 0) {
            t++;
            continue;
        }
        int end = t; /* the run is t..end */
        while (end + 1 < S->n && tok[end + 1] < 0)
            end++;
        int last = S->pos + end;
        for (int i = t; i <= end; i++) {
            int qpos = S->pos + i;
            int first = W > 0 ? CR_MAX(0, qpos - W + 1) : 0;
            be_attn_t a = *attn;
            a.n_tok = 1;
            a.pos0 = last - first;
            if (c->hp->attn_softcap > 0)
                P->ext->attention_ext(P->be, att + (size_t)i * Q, q + (size_t)i * Q,
                                      kc + (size_t)first * row, vc + (size_t)first * row,
                                      &a, c->hp->attn_softcap, 0, P->scratch);
            else
                op->attention(P->be, att + (size_t)i * Q, q + (size_t)i * Q,
                              kc + (size_t)first * row, vc + (size_t)first * row, &a);
        }
        t = end + 1;
    }
}

/* Layer l's cache of sequence seq in part P: C rows of kv_row_bytes. */
static uint8_t *layer_cache(const rn_ctx_t *c, const part_t *P, uint8_t *cache,
                            int seq, int l)
{
    size_t per_layer = (size_t)c->n_ctx * c->kv_row_bytes;
    size_t n_layers = (size_t)(P->l1 - P->l0);
    return cache + ((size_t)seq * n_layers + (size_t)(l - P->l0)) * per_layer;
}

/* Step 1b: the residual stream x [n][D] of part `from` becomes part `to`'s
 * (another instance: through host memory). */
static void hand_over(rn_ctx_t *c, part_t *from, part_t *to, int n)
{
    size_t bytes = (size_t)n * (size_t)c->hp->dim * sizeof(float);
    from->be->ops->download(from->be, c->hand, from->x, bytes);
    to->be->ops->upload(to->be, to->x, c->hand, bytes);
}

/* LoRA: y += scale * B (A x) for each adapter of weight t of layer l
 * (model/lora.h), through the backend's ops: lr = x A^T [n][r],
 * ly = lr B^T [n][out], ly *= scale, y += ly. */
static void lora_add(rn_ctx_t *c, part_t *P, int l, cr_lora_target_t t, const float *x,
                     int n, float *y)
{
    size_t n_mat = 0;
    const rn_lora_mat_t *mat = rn_lora_of(c->lora, l, t, &n_mat);
    be_backend_t *be = P->be;
    for (size_t i = 0; i < n_mat; i++) {
        size_t len = (size_t)n * (size_t)mat[i].b.n_rows;
        be->ops->matmul(be, &mat[i].a, x, n, P->lr);
        be->ops->matmul(be, &mat[i].b, P->lr, n, P->ly);
        if (mat[i].scale != 1.0f)
            be_ext_ops(be)->scale(be, P->ly, len, mat[i].scale);
        be->ops->add(be, y, P->ly, len);
    }
}

/* Layers P->l0..P->l1-1 of the chunk's n tokens (grouped into spans, one
 * per sequence) on part P's instance, over its residual stream P->x. Every
 * weight matmul takes all n tokens at once (the weights are read once per
 * chunk, whatever the number of sequences); rope takes each token's own
 * position; the cache store and attention run per span over that
 * sequence's cache, which must hold 0..pos-1. */
static void forward_layers(rn_ctx_t *c, part_t *P, const span_t *sp, int n_sp, int n)
{
    be_backend_t *be = P->be;
    const be_ops_t *op = be->ops;
    const be_ops_ext_t *ext = P->ext;
    const rn_hparams_t *hp = c->hp;
    const rn_weights_t *w = c->w;
    int D = hp->dim, KV = hp->kv_dim, F = hp->ffn;
    size_t QD = (size_t)hp->q_dim;

    for (int l = P->l0; l < P->l1; l++) {
        const rn_layer_t *L = &w->layers[l];

        /* 2. attention rmsnorm: xb = x / rms(x) * attn_norm      xb: [B][D]
         * 2a. olmo2: no pre-norm, the projections read x itself
         * 2b. command-r: a LayerNorm without bias instead */
        const float *ain = P->x;
        if (hp->layer_norm) {
            ext->layernorm(be, P->xb, P->x, &L->attn_norm, NULL, n, D, hp->norm_eps);
            ain = P->xb;
        } else if (L->attn_norm.data) {
            op->rmsnorm(be, P->xb, P->x, &L->attn_norm, n, D, hp->rms_eps);
            ain = P->xb;
        }

        /* 3. projections: q = xb Wq^T [B][Q], k = xb Wk^T [B][KV],
         *    v = xb Wv^T [B][KV] (phi3: row blocks of the fused attn_qkv) */
        be_matmul_group(be, (const be_weight_t *[]){&L->wq, &L->wk, &L->wv}, 3, ain, n,
                        (float *[]){P->q, P->k, P->v});

        /* 3L. LoRA adapters: q += s B_q (A_q xb), and so for k and v */
        if (c->lora) {
            lora_add(c, P, l, CR_LORA_Q, ain, n, P->q);
            lora_add(c, P, l, CR_LORA_K, ain, n, P->k);
            lora_add(c, P, l, CR_LORA_V, ain, n, P->v);
        }

        /* 3a. qwen2, gpt-oss: q += bq, k += bk, v += bv (per token) */
        if (L->bq.data) {
            ext->add_rows(be, P->q, &L->bq, n);
            ext->add_rows(be, P->k, &L->bk, n);
            ext->add_rows(be, P->v, &L->bv, n);
        }

        /* 3b. rmsnorm of q and k in groups of their norm's length:
         *    qwen3, gemma3: each head (q_norm/k_norm [hd]; q: [B*Hq][hd],
         *    k: [B*Hk][hd]); olmo2: the whole vector (q_norm [Q], k_norm
         *    [KV]) */
        if (L->q_norm.data) {
            int qg = (int)L->q_norm.n_cols, kg = (int)L->k_norm.n_cols;
            op->rmsnorm(be, P->q, P->q, &L->q_norm, (int)((size_t)n * QD / (size_t)qg), qg,
                        hp->rms_eps);
            op->rmsnorm(be, P->k, P->k, &L->k_norm, n * KV / kg, kg, hp->rms_eps);
        }

        /* 4. rotary position embedding of q and k at each token's position
         *    (llama: adjacent pairs; the others: NEOX halves) */
        rope_layer(c, P, L, P->q, n, hp->n_heads);
        rope_layer(c, P, L, P->k, n, hp->n_kv_heads);

        /* 4a (rope_layer): smollm3, cohere2: some layers without rope
         * 4b. mistral3: q *= 1 + t ln(1 + floor(pos / len)) (Llama-4
         *    attention temperature; 1 within the first len positions) */
        if (hp->attn_temp != 0.0f)
            temper_queries(c, P, n);

        for (int s = 0; s < n_sp; s++) {
            const span_t *S = &sp[s];
            int p = S->pos;
            uint8_t *kc = layer_cache(c, P, P->k_cache, S->seq, l); /* [C][KV] */
            uint8_t *vc = layer_cache(c, P, P->v_cache, S->seq, l); /* [C][KV] */
            float *q = P->q + (size_t)S->off * QD;                /* [n][Q] */
            float *att = P->att + (size_t)S->off * QD;            /* [n][Q] */
            be_attn_t attn = {
                .n_tok = S->n,
                .pos0 = p,
                .n_head = hp->n_heads,
                .n_head_kv = hp->n_kv_heads,
                .head_dim = hp->head_dim,
                .scale = hp->attn_scale,
                .sinks = L->attn_sinks.data ? &L->attn_sinks : NULL,
                .kv_type = c->kv_type,
            };

            /* 5. append the span's k and v to its sequence's cache at rows
             *    p..p+n-1 (F16, or quantized in 32-element blocks) */
            op->kv_store(be, kc, c->kv_type, P->k + (size_t)S->off * KV, S->n, p, KV);
            op->kv_store(be, vc, c->kv_type, P->v + (size_t)S->off * KV, S->n, p, KV);

            /* 6. causal attention with grouped KV heads: query head h reads
             *    KV head h / (Hq/Hk) over cache rows 0..p+t     att: [n][Q]
             * 6a. gemma: scores soft-capped (gemma2), and on sliding layers
             *    only rows p+t-W+1..p+t (W = n_swa) once the window binds
             * 6b. gpt-oss: each head's sink logit joins its softmax
             *    denominator (attn.sinks; the ops apply it) */
            int window = L->swa && p + S->n > hp->n_swa ? hp->n_swa : 0;
            if (hp->attn_softcap > 0)
                ext->attention_ext(be, att, q, kc, vc, &attn, hp->attn_softcap, window,
                                   P->scratch);
            else if (window > 0)
                attention_window(c, P, att, q, kc, vc, &attn, window);
            else
                op->attention(be, att, q, kc, vc, &attn);
            /* 6c. gemma3: an image's queries again, each over the cache up
             *    to the image's last row */
            if (S->embd_full)
                attention_image_runs(c, P, S, att, q, kc, vc, &attn, L->swa ? hp->n_swa : 0);
        }

        /* 7. output projection: xb2 = att Wo^T (+ bo per token, gpt-oss)
         *                                                    xb2: [B][D] */
        op->matmul(be, &L->wo, P->att, n, P->xb2);
        if (c->lora) /* 7L. xb2 += s B_o (A_o att) */
            lora_add(c, P, l, CR_LORA_O, P->att, n, P->xb2);
        if (L->bo.data)
            ext->add_rows(be, P->xb2, &L->bo, n);

        /* 7a. gemma, olmo2: xb2 = rmsnorm(xb2) * post_attention_norm */
        if (L->attn_post_norm.data)
            op->rmsnorm(be, P->xb2, P->xb2, &L->attn_post_norm, n, D, hp->rms_eps);

        /* 8. residual: x += xb2
         * 8a. granite: xb2 *= residual_scale first */
        if (hp->residual_scale != 1.0f)
            ext->scale(be, P->xb2, (size_t)n * D, hp->residual_scale);
        op->add(be, P->x, P->xb2, (size_t)n * D);

        /* 9. ffn rmsnorm: xb = x / rms(x) * ffn_norm
         * 9a. olmo2: no pre-norm, the ffn reads x itself
         * 9b. command-r: the ffn reads the attention's normed input (xb,
         *    untouched since step 2), in parallel with the attention */
        const float *fin = hp->parallel_ffn ? ain : P->x;
        if (L->ffn_norm.data) {
            op->rmsnorm(be, P->xb, P->x, &L->ffn_norm, n, D, hp->rms_eps);
            fin = P->xb;
        }

        /* 10m. mixture of experts (model/moe.h): x += the chosen
         *    experts' SwiGLU outputs of xb, weighted (+ shared expert) */
        if (L->router.data) {
            rn_moe_bufs_t mb = {P->router, P->xe, P->hb, P->hb2, P->xb2};
            rn_moe_ffn(c->moe, be, hp, L, P->xb, P->x, n, &mb);
            continue;
        }

        /* 10. gated ffn: hb = act(xb Wgate^T) * (xb Wup^T)     hb: [B][F]
         *    act = silu (swiglu), or gelu_tanh for gemma; phi3's gate and
         *    up are the two row halves of its ffn_up */
        be_matmul_group(be, (const be_weight_t *[]){&L->w_gate, &L->w_up}, 2, fin, n,
                        (float *[]){P->hb, P->hb2});
        if (c->lora) { /* 10L. the adapters of gate and up, before act */
            lora_add(c, P, l, CR_LORA_GATE, fin, n, P->hb);
            lora_add(c, P, l, CR_LORA_UP, fin, n, P->hb2);
        }
        if (hp->ffn_gelu)
            ext->geglu(be, P->hb, P->hb, P->hb2, (size_t)n * F);
        else
            op->swiglu(be, P->hb, P->hb, P->hb2, (size_t)n * F);

        /* 11. down projection: xb2 = hb Wdown^T               xb2: [B][D]
         * 11a. gemma, olmo2: xb2 = rmsnorm(xb2) * post_ffw_norm
         * 11b. granite: xb2 *= residual_scale
         * 11c. residual: x += xb2 */
        op->matmul(be, &L->w_down, P->hb, n, P->xb2);
        if (c->lora) /* 11L. xb2 += s B_down (A_down hb) */
            lora_add(c, P, l, CR_LORA_DOWN, P->hb, n, P->xb2);
        if (L->ffn_post_norm.data)
            op->rmsnorm(be, P->xb2, P->xb2, &L->ffn_post_norm, n, D, hp->rms_eps);
        if (hp->residual_scale != 1.0f)
            ext->scale(be, P->xb2, (size_t)n * D, hp->residual_scale);
        op->add(be, P->x, P->xb2, (size_t)n * D);
    }
}

/* Runs the chunk's n tokens (c->tok at positions c->pos, grouped into
 * spans, one per sequence) through every layer, part by part, leaving the
 * final residual stream in the last part's x. */
static void forward_chunk(rn_ctx_t *c, const span_t *sp, int n_sp, int n)
{
    part_t *P0 = &c->part[0];
    be_backend_t *be = P0->be;
    const rn_hparams_t *hp = c->hp;

    /* 1. token embedding: x[t] = token_embd[tok[t]]          x: [B][D]
     *    (an embedding position, id < 0, reads row 0 here: step 1b) */
    bool any_embd = false;
    for (int s = 0; s < n_sp; s++)
        any_embd |= sp[s].embd != NULL;
    if (any_embd)
        for (int t = 0; t < n; t++)
            c->tok_rows[t] = c->tok[t] < 0 ? 0 : c->tok[t];
    be->ops->get_rows(be, &c->w->token_embd, any_embd ? c->tok_rows : c->tok, n, P0->x);

    /* 1a. gemma: x *= sqrt(D); granite: x *= embedding_scale */
    if (hp->embd_scale != 1.0f)
        P0->ext->scale(be, P0->x, (size_t)n * hp->dim, hp->embd_scale);

    /* 1b. embedding positions (image tokens): x[t] = the span's next row,
     *     uploaded run by run, unscaled as llama.cpp feeds them */
    size_t row = (size_t)hp->dim;
    for (int s = 0; any_embd && s < n_sp; s++) {
        int used = 0;
        for (int t = 0; sp[s].embd && t < sp[s].n;) {
            int a = sp[s].off + t;
            if (c->tok[a] >= 0) {
                t++;
                continue;
            }
            int run = 1;
            while (t + run < sp[s].n && c->tok[a + run] < 0)
                run++;
            be->ops->upload(be, P0->x + (size_t)a * row, sp[s].embd + (size_t)used * row,
                            (size_t)run * row * sizeof(float));
            used += run;
            t += run;
        }
    }

    for (int p = 0; p < c->n_parts; p++) {
        /* 1b. x moves to the next instance at a range boundary */
        if (p > 0)
            hand_over(c, &c->part[p - 1], &c->part[p], n);
        forward_layers(c, &c->part[p], sp, n_sp, n);
    }
}

/* Layers P->l0..P->l1-1 of the bert family over part P's x (n tokens at
 * positions 0..n-1, already in c->pos). */
static void forward_encoder_layers(rn_ctx_t *c, part_t *P, int seq, int n)
{
    be_backend_t *be = P->be;
    const be_ops_t *op = be->ops;
    const be_ops_ext_t *ext = P->ext;
    const rn_hparams_t *hp = c->hp;
    const rn_weights_t *w = c->w;
    int D = hp->dim, KV = hp->kv_dim, F = hp->ffn;
    size_t Q = (size_t)hp->q_dim;

    for (int l = P->l0; l < P->l1; l++) {
        const rn_layer_t *L = &w->layers[l];
        uint8_t *kc = layer_cache(c, P, P->k_cache, seq, l); /* [C][KV] */
        uint8_t *vc = layer_cache(c, P, P->v_cache, seq, l); /* [C][KV] */

        /* 3. q = x Wq^T + bq [B][Q], k = x Wk^T + bk [B][KV],
         *    v = x Wv^T + bv [B][KV] (nomic-bert: row blocks of attn_qkv) */
        be_matmul_group(be, (const be_weight_t *[]){&L->wq, &L->wk, &L->wv}, 3, P->x, n,
                        (float *[]){P->q, P->k, P->v});
        if (L->bq.data) {
            ext->add_rows(be, P->q, &L->bq, n);
            ext->add_rows(be, P->k, &L->bk, n);
            ext->add_rows(be, P->v, &L->bv, n);
        }
        /* 3a. nomic-bert: NEOX rope of q and k at positions 0..n-1 */
        if (hp->rope_neox) {
            rope_layer(c, P, L, P->q, n, hp->n_heads);
            rope_layer(c, P, L, P->k, n, hp->n_kv_heads);
        }
        /* 4. k, v into the cache rows 0..n-1; each query attends to all
         *    n keys: one call per query as if it sat at position n-1 */
        op->kv_store(be, kc, c->kv_type, P->k, n, 0, KV);
        op->kv_store(be, vc, c->kv_type, P->v, n, 0, KV);
        for (int t = 0; t < n; t++) {
            be_attn_t a = {
                .n_tok = 1,
                .pos0 = n - 1,
                .n_head = hp->n_heads,
                .n_head_kv = hp->n_kv_heads,
                .head_dim = hp->head_dim,
                .scale = hp->attn_scale,
                .kv_type = c->kv_type,
            };
            op->attention(be, P->att + (size_t)t * Q, P->q + (size_t)t * Q, kc, vc, &a);
        }
        /* 5. xb2 = att Wo^T + bo                              xb2: [B][D] */
        op->matmul(be, &L->wo, P->att, n, P->xb2);
        if (L->bo.data)
            ext->add_rows(be, P->xb2, &L->bo, n);
        /* 6. x = layernorm(x + xb2) * attn_output_norm + bias */
        op->add(be, P->x, P->xb2, (size_t)n * D);
        ext->layernorm(be, P->x, P->x, &L->ln_attn, &L->ln_attn_b, n, D, hp->norm_eps);
        /* 7. ffn                                              hb: [B][F]
         *    bert: hb = gelu(x Wup^T + b_up)
         *    nomic-bert: hb = silu(x Wgate^T) * (x Wup^T) */
        be_matmul_group(be, (const be_weight_t *[]){&L->w_up, &L->w_gate},
                        L->w_gate.data ? 2 : 1, P->x, n, (float *[]){P->hb, P->hb2});
        if (L->b_up.data)
            ext->add_rows(be, P->hb, &L->b_up, n);
        if (L->w_gate.data) {
            op->swiglu(be, P->hb, P->hb2, P->hb, (size_t)n * F);
        } else {
            ext->gelu(be, P->hb, P->hb, (size_t)n * F);
        }
        /* 8. xb2 = hb Wdown^T + b_down                         xb2: [B][D] */
        op->matmul(be, &L->w_down, P->hb, n, P->xb2);
        if (L->b_down.data)
            ext->add_rows(be, P->xb2, &L->b_down, n);
        /* 9. x = layernorm(x + xb2) * layer_output_norm + bias */
        op->add(be, P->x, P->xb2, (size_t)n * D);
        ext->layernorm(be, P->x, P->x, &L->ln_out, &L->ln_out_b, n, D, hp->norm_eps);
    }
}

/* The bert family: tokens tok[0..n) at positions 0..n-1, all at once,
 * leaving the last layer's output (the hidden states an embedding pools)
 * in the last part's x. Every position attends to every position. */
static void forward_encoder(rn_ctx_t *c, int seq, const int32_t *tok, int n)
{
    part_t *P0 = &c->part[0];
    be_backend_t *be = P0->be;
    const be_ops_t *op = be->ops;
    const be_ops_ext_t *ext = P0->ext;
    const rn_hparams_t *hp = c->hp;
    const rn_weights_t *w = c->w;
    int D = hp->dim;
    for (int t = 0; t < n; t++)
        c->pos[t] = t;

    /* 1. embeddings: x[t] = token_embd[tok[t]] + token_types[0]
     *    (+ position_embd[t] for bert)                       x: [B][D] */
    op->get_rows(be, &w->token_embd, tok, n, P0->x);
    if (w->token_types.data) {
        op->get_rows(be, &w->token_types, c->zeros, n, P0->xb);
        op->add(be, P0->x, P0->xb, (size_t)n * D);
    }
    if (w->pos_embd.data) {
        op->get_rows(be, &w->pos_embd, c->pos, n, P0->xb);
        op->add(be, P0->x, P0->xb, (size_t)n * D);
    }
    /* 2. x = layernorm(x) * token_embd_norm + bias */
    ext->layernorm(be, P0->x, P0->x, &w->tok_norm, &w->tok_norm_b, n, D, hp->norm_eps);

    for (int p = 0; p < c->n_parts; p++) {
        if (p > 0)
            hand_over(c, &c->part[p - 1], &c->part[p], n);
        forward_encoder_layers(c, &c->part[p], seq, n);
    }
}

/* Step 14a, granite, command-r: logits [n] times logit_mult, on the host
 * copy. */
static void scale_logits(const rn_hparams_t *hp, float *logits, size_t n)
{
    if (hp->logit_mult == 1.0f)
        return;
    for (size_t i = 0; i < n; i++)
        logits[i] *= hp->logit_mult;
}

/* Step 14, gemma2: logits [n] = cap * tanh(logits / cap) on the host copy,
 * through the CPU's vector scores op (a tanhf per logit of a 256K
 * vocabulary was milliseconds a token). */
static void final_softcap(const rn_hparams_t *hp, float *logits, size_t n)
{
    const be_vec_ops_t *vec = be_vec_ops();
    for (size_t i = 0; i < n; i += INT_MAX / 2)
        vec->scores((int)CR_MIN(n - i, (size_t)INT_MAX / 2), logits + i, 1.0f,
                    hp->final_softcap);
}

/* Step 12, the final norm of n rows x [n][D] into y on P's instance:
 * rmsnorm * output_norm, or (command-r) a LayerNorm without bias. */
static void final_norm(rn_ctx_t *c, const part_t *P, float *y, const float *x, int n)
{
    const rn_hparams_t *hp = c->hp;
    if (hp->layer_norm)
        P->ext->layernorm(P->be, y, x, &c->w->output_norm, NULL, n, hp->dim, hp->norm_eps);
    else
        P->be->ops->rmsnorm(P->be, y, x, &c->w->output_norm, n, hp->dim, hp->rms_eps);
}

/* Final norm and logits for rows [r0, r0+nr) of the chunk (nr <=
 * LOGITS_ROWS), downloaded to host dst [nr][V]. */
static void logits_rows(rn_ctx_t *c, int r0, int nr, float *dst)
{
    part_t *P = last_part(c);
    be_backend_t *be = P->be;
    const rn_hparams_t *hp = c->hp;
    size_t D = (size_t)hp->dim;
    /* 12. final rmsnorm: xb = x / rms(x) * output_norm      xb: [nr][D] */
    final_norm(c, P, P->xb, P->x + (size_t)r0 * D, nr);
    /* 13. logits = xb Wout^T                                 out: [nr][V] */
    be->ops->matmul(be, &c->w->output, P->xb, nr, P->out);
    be->ops->download(be, dst, P->out, (size_t)nr * (size_t)hp->n_vocab * sizeof(float));
    /* 14. gemma2: logits = cap * tanh(logits / cap), on the host copy */
    if (hp->final_softcap > 0)
        final_softcap(hp, dst, (size_t)nr * (size_t)hp->n_vocab);
    scale_logits(hp, dst, (size_t)nr * (size_t)hp->n_vocab);
}

/* Final norm and logits of the last token of each span, LOGITS_ROWS spans
 * per output matmul, into each span's sequence's logits [V]. */
static void logits_last(rn_ctx_t *c, const span_t *sp, int n_sp)
{
    part_t *P = last_part(c);
    be_backend_t *be = P->be;
    const rn_hparams_t *hp = c->hp;
    size_t D = (size_t)hp->dim, V = (size_t)hp->n_vocab;
    for (int s0 = 0; s0 < n_sp; s0 += LOGITS_ROWS) {
        int nr = CR_MIN(LOGITS_ROWS, n_sp - s0);
        /* 12. final rmsnorm of each span's last row: xb[i]    xb: [nr][D] */
        for (int i = 0; i < nr; i++) {
            const span_t *S = &sp[s0 + i];
            final_norm(c, P, P->xb + (size_t)i * D, P->x + (size_t)(S->off + S->n - 1) * D,
                       1);
        }
        /* 13. logits = xb Wout^T                             out: [nr][V] */
        be->ops->matmul(be, &c->w->output, P->xb, nr, P->out);
        be->ops->download(be, c->stage, P->out, (size_t)nr * V * sizeof(float));
        /* 14. gemma2: logits = cap * tanh(logits / cap), on the host copy */
        if (hp->final_softcap > 0)
            final_softcap(hp, c->stage, (size_t)nr * V);
        scale_logits(hp, c->stage, (size_t)nr * V);
        for (int i = 0; i < nr; i++)
            memcpy(c->logits + (size_t)sp[s0 + i].seq * V, c->stage + (size_t)i * V,
                   V * sizeof(float));
    }
}

static cr_status_t check_eval(const rn_ctx_t *c, int seq, const int32_t *tokens, int n,
                              int pos, bool embd, cr_err_t *err)
{
    if (seq < 0 || seq >= c->n_seq)
        return cr_err_set(err, CR_E_INVALID, "sequence %d is out of range 0..%d", seq,
                          c->n_seq - 1);
    if (n < 1 || !tokens)
        return cr_err_set(err, CR_E_INVALID, "no tokens to evaluate");
    if (pos < 0 || pos > c->n_past[seq])
        return cr_err_set(err, CR_E_INVALID, "position %d is past the cache (%d "
                          "positions filled)", pos, c->n_past[seq]);
    if (n > c->n_ctx - pos)
        return cr_err_set(err, CR_E_TOO_LARGE, "%d tokens at position %d do not fit "
                          "in the context (%d)", n, pos, c->n_ctx);
    for (int i = 0; i < n; i++)
        if ((tokens[i] < 0 && !embd) || tokens[i] >= c->hp->n_vocab)
            return cr_err_set(err, CR_E_INVALID, "token %" PRId32 " at index %d is "
                              "outside the vocabulary (%d)", tokens[i], i,
                              c->hp->n_vocab);
    return CR_OK;
}

/* M-RoPE: the planes of chunk rows off..off+n-1 (of total) for a span of
 * sequence seq at cache positions pos.., from rope (host [n][3]) or
 * following on from the previous token's (rn_ctx_span_t.rope_pos); and
 * the position each row hands on to the next. */
static void set_mrope(rn_ctx_t *c, int seq, int off, int n, int total, int pos,
                      const int32_t *rope)
{
    int32_t *next = c->rnext + (size_t)seq * c->n_ctx;
    for (int t = 0; t < n; t++) {
        int32_t r = pos + t > 0 ? next[pos + t - 1] : 0;
        int32_t p3[3] = {r, r, r};
        if (rope)
            memcpy(p3, rope + 3 * (size_t)t, sizeof p3);
        for (int k = 0; k < 3; k++)
            c->mpos[(size_t)k * total + off + t] = p3[k];
        c->mpos[(size_t)3 * total + off + t] = 0;
        next[pos + t] = CR_MAX(p3[0], CR_MAX(p3[1], p3[2])) + 1;
    }
}

/* One span of n tokens of sequence seq at positions pos.. as a chunk. */
static void forward_one(rn_ctx_t *c, int seq, const int32_t *tok, int n, int pos)
{
    span_t S = {.seq = seq, .off = 0, .n = n, .pos = pos};
    for (int t = 0; t < n; t++) {
        c->tok[t] = tok[t];
        c->pos[t] = pos + t;
    }
    if (c->hp->mrope)
        set_mrope(c, seq, 0, n, n, pos, NULL);
    forward_chunk(c, &S, 1, n);
}

cr_status_t rn_ctx_eval_seq(rn_ctx_t *c, int seq, const int32_t *tokens, int n, int pos,
                            float *logits_all, cr_err_t *err)
{
    if (!c->w->output.data)
        return cr_err_set(err, CR_E_UNSUPPORTED, "embedding-only model ('%s' has no "
                          "output matrix)", c->hp->arch);
    cr_status_t st = check_eval(c, seq, tokens, n, pos, false, err);
    if (st)
        return st;
    c->n_past[seq] = pos;
    size_t V = (size_t)c->hp->n_vocab;
    for (int done = 0; done < n;) {
        int nb = CR_MIN(c->n_batch, n - done);
        forward_one(c, seq, tokens + done, nb, pos + done);
        c->n_past[seq] = pos + done + nb;
        if (logits_all) {
            for (int r = 0; r < nb; r += LOGITS_ROWS) {
                int nr = CR_MIN(LOGITS_ROWS, nb - r);
                logits_rows(c, r, nr, logits_all + (size_t)(done + r) * V);
            }
        }
        done += nb;
        if (done == n) {
            float *last = c->logits + (size_t)seq * V;
            if (logits_all) {
                memcpy(last, logits_all + (size_t)(n - 1) * V, V * sizeof(float));
            } else {
                span_t S = {.seq = seq, .off = 0, .n = nb, .pos = pos + done - nb};
                logits_last(c, &S, 1);
            }
        }
    }
    return CR_OK;
}

cr_status_t rn_ctx_eval(rn_ctx_t *c, const int32_t *tokens, int n, int pos,
                        float *logits_all, cr_err_t *err)
{
    return rn_ctx_eval_seq(c, 0, tokens, n, pos, logits_all, err);
}

cr_status_t rn_ctx_eval_batch(rn_ctx_t *c, const rn_ctx_span_t *spans, int n_spans,
                              cr_err_t *err)
{
    if (!c->w->output.data)
        return cr_err_set(err, CR_E_UNSUPPORTED, "embedding-only model ('%s' has no "
                          "output matrix)", c->hp->arch);
    if (n_spans < 1 || n_spans > c->n_seq)
        return cr_err_set(err, CR_E_INVALID, "%d spans for %d sequences", n_spans,
                          c->n_seq);
    span_t sp[RN_CTX_MAX_SEQ];
    int total = 0;
    for (int s = 0; s < n_spans; s++) {
        const rn_ctx_span_t *in = &spans[s];
        cr_status_t st = check_eval(c, in->seq, in->tokens, in->n, in->pos,
                                    in->embd != NULL, err);
        if (st) {
            cr_err_wrap(err, "span %d", s);
            return st;
        }
        for (int r = 0; r < s; r++)
            if (spans[r].seq == in->seq)
                return cr_err_set(err, CR_E_INVALID, "sequence %d appears twice in "
                                  "the batch", in->seq);
        if (in->n > c->n_batch - total)
            return cr_err_set(err, CR_E_TOO_LARGE, "the batch holds more than n_batch "
                              "(%d) tokens", c->n_batch);
        sp[s] = (span_t){.seq = in->seq, .off = total, .n = in->n, .pos = in->pos,
                         .embd = in->embd, .embd_full = in->embd && in->embd_full};
        for (int t = 0; t < in->n; t++) {
            c->tok[total + t] = in->tokens[t];
            c->pos[total + t] = in->pos + t;
        }
        total += in->n;
    }
    for (int s = 0; s < n_spans && c->hp->mrope; s++)
        set_mrope(c, sp[s].seq, sp[s].off, sp[s].n, total, sp[s].pos, spans[s].rope_pos);
    for (int s = 0; s < n_spans; s++)
        c->n_past[sp[s].seq] = sp[s].pos; /* drop each tail first */
    forward_chunk(c, sp, n_spans, total);
    for (int s = 0; s < n_spans; s++)
        c->n_past[sp[s].seq] = sp[s].pos + sp[s].n;
    logits_last(c, sp, n_spans);
    /* spans that want every row (speculative verification) */
    size_t V = (size_t)c->hp->n_vocab;
    for (int s = 0; s < n_spans; s++) {
        if (!spans[s].logits_all)
            continue;
        for (int r = 0; r < sp[s].n; r += LOGITS_ROWS) {
            int nr = CR_MIN(LOGITS_ROWS, sp[s].n - r);
            logits_rows(c, sp[s].off + r, nr, spans[s].logits_all + (size_t)r * V);
        }
        memcpy(c->logits + (size_t)sp[s].seq * V,
               spans[s].logits_all + (size_t)(sp[s].n - 1) * V, V * sizeof(float));
    }
    return CR_OK;
}

/* Adds hidden row r of the last part's buffer h [.][D] to c->pool. */
static void pool_row(rn_ctx_t *c, const float *h, int r)
{
    int D = c->hp->dim;
    be_backend_t *be = last_part(c)->be;
    be->ops->download(be, c->hrow, h + (size_t)r * D, (size_t)D * sizeof(float));
    for (int i = 0; i < D; i++)
        c->pool[i] += c->hrow[i];
}

cr_status_t rn_ctx_embed_seq(rn_ctx_t *c, int seq, const int32_t *tokens, int n,
                             bool normalize, float *out, cr_err_t *err)
{
    cr_status_t st = check_eval(c, seq, tokens, n, 0, false, err);
    if (st)
        return st;
    part_t *P = last_part(c);
    const rn_hparams_t *hp = c->hp;
    rn_pooling_t pool = hp->pooling;
    int D = hp->dim;
    for (int i = 0; i < D; i++)
        c->pool[i] = 0;
    c->n_past[seq] = 0;
    if (hp->non_causal && c->w->pos_embd.data && n > hp->n_ctx_train)
        return cr_err_set(err, CR_E_TOO_LARGE, "%d tokens exceed the %d learned "
                          "positions of '%s'", n, hp->n_ctx_train, hp->arch);
    if (hp->non_causal) {
        /* encoders: the last layer's output, no final norm, one chunk
         * (n_batch == n_ctx) */
        forward_encoder(c, seq, tokens, n);
        c->n_past[seq] = n;
        if (pool == RN_POOL_CLS || pool == RN_POOL_RANK)
            pool_row(c, P->x, 0);
        else if (pool == RN_POOL_LAST)
            pool_row(c, P->x, n - 1);
        else
            for (int r = 0; r < n; r++)
                pool_row(c, P->x, r);
    } else {
        for (int done = 0; done < n;) {
            int nb = CR_MIN(c->n_batch, n - done);
            forward_one(c, seq, tokens + done, nb, done);
            c->n_past[seq] = done + nb;
            /* final rmsnorm of every row, pooled on the host */
            final_norm(c, P, P->xb, P->x, nb);
            if (pool == RN_POOL_CLS) {
                if (done == 0)
                    pool_row(c, P->xb, 0);
            } else if (pool == RN_POOL_LAST) {
                if (done + nb == n)
                    pool_row(c, P->xb, nb - 1);
            } else {
                for (int r = 0; r < nb; r++)
                    pool_row(c, P->xb, r);
            }
            done += nb;
        }
    }
    double norm = 0;
    int n_pooled = pool == RN_POOL_MEAN ? n : 1;
    for (int i = 0; i < D; i++) {
        c->pool[i] /= n_pooled;
        norm += c->pool[i] * c->pool[i];
    }
    norm = normalize && norm > 0 ? 1.0 / sqrt(norm) : 1.0;
    for (int i = 0; i < D; i++)
        out[i] = (float)(c->pool[i] * norm);
    return CR_OK;
}

cr_status_t rn_ctx_embed(rn_ctx_t *c, const int32_t *tokens, int n, bool normalize,
                         float *out, cr_err_t *err)
{
    return rn_ctx_embed_seq(c, 0, tokens, n, normalize, out, err);
}

/* ---- reranking -------------------------------------------------------- */

int rn_ctx_rank_n_out(const rn_ctx_t *c)
{
    if (c->hp->pooling != RN_POOL_RANK)
        return 0;
    return c->w->cls_out.data ? c->hp->n_cls_out : c->hp->dim;
}

cr_status_t rn_ctx_rank_seq(rn_ctx_t *c, int seq, const int32_t *tokens, int n,
                            float *out, cr_err_t *err)
{
    const rn_hparams_t *hp = c->hp;
    const rn_weights_t *w = c->w;
    if (hp->pooling != RN_POOL_RANK)
        return cr_err_set(err, CR_E_UNSUPPORTED, "'%s' is not a reranker (its "
                          "pooling_type is not 4, rank)", hp->arch);
    cr_status_t st = check_eval(c, seq, tokens, n, 0, false, err);
    if (st)
        return st;
    if (w->pos_embd.data && n > hp->n_ctx_train)
        return cr_err_set(err, CR_E_TOO_LARGE, "%d tokens exceed the %d learned "
                          "positions of '%s'", n, hp->n_ctx_train, hp->arch);
    part_t *P = last_part(c);
    be_backend_t *be = P->be;
    const be_ops_t *op = be->ops;
    int D = hp->dim;
    c->n_past[seq] = 0;
    forward_encoder(c, seq, tokens, n);
    c->n_past[seq] = n;
    /* 1. x0: the first position's hidden state ([CLS])         x0: [D] */
    const float *cur = P->x;
    int n_cur = D;
    /* 2. h = tanh(x0 Wcls^T + cls_b)                            xb: [D]
     *    (tanh on the host: no backend op for one row) */
    if (w->cls.data) {
        op->matmul(be, &w->cls, cur, 1, P->xb);
        if (w->cls_b.data)
            P->ext->add_rows(be, P->xb, &w->cls_b, 1);
        op->download(be, c->hrow, P->xb, (size_t)D * sizeof(float));
        for (int i = 0; i < D; i++)
            c->hrow[i] = tanhf(c->hrow[i]);
        op->upload(be, P->xb, c->hrow, (size_t)D * sizeof(float));
        cur = P->xb;
    }
    /* 3. scores = h Wout^T + cls_out_b                  xb2: [n_cls_out] */
    if (w->cls_out.data) {
        op->matmul(be, &w->cls_out, cur, 1, P->xb2);
        if (w->cls_out_b.data)
            P->ext->add_rows(be, P->xb2, &w->cls_out_b, 1);
        cur = P->xb2;
        n_cur = hp->n_cls_out;
    }
    op->download(be, out, cur, (size_t)n_cur * sizeof(float));
    return CR_OK;
}

/* A sequence index outside 0..n_seq-1 is a programmer error. */
static int seq_ok(const rn_ctx_t *c, int seq)
{
    CR_UNUSED(c);
    assert(seq >= 0 && seq < c->n_seq);
    return seq;
}

const float *rn_ctx_seq_logits(const rn_ctx_t *c, int seq)
{
    return c->logits + (size_t)seq_ok(c, seq) * (size_t)c->hp->n_vocab;
}

int rn_ctx_seq_n_past(const rn_ctx_t *c, int seq) { return c->n_past[seq_ok(c, seq)]; }

void rn_ctx_seq_truncate(rn_ctx_t *c, int seq, int n_keep)
{
    seq = seq_ok(c, seq);
    if (n_keep < 0)
        n_keep = 0;
    if (n_keep < c->n_past[seq])
        c->n_past[seq] = n_keep;
}

const float *rn_ctx_logits(const rn_ctx_t *c) { return rn_ctx_seq_logits(c, 0); }
int rn_ctx_n_past(const rn_ctx_t *c) { return rn_ctx_seq_n_past(c, 0); }
int rn_ctx_n_ctx(const rn_ctx_t *c) { return c->n_ctx; }
int rn_ctx_n_seq(const rn_ctx_t *c) { return c->n_seq; }
int rn_ctx_n_batch(const rn_ctx_t *c) { return c->n_batch; }
int rn_ctx_n_vocab(const rn_ctx_t *c) { return c->hp->n_vocab; }
int rn_ctx_embd_dim(const rn_ctx_t *c) { return c->hp->dim; }
cr_type_t rn_ctx_kv_type(const rn_ctx_t *c) { return c->kv_type; }
uint64_t rn_ctx_kv_bytes(const rn_ctx_t *c)
{
    uint64_t sum = 0;
    for (int p = 0; p < c->n_parts; p++)
        sum += c->part[p].kv_bytes;
    return sum;
}

uint64_t rn_ctx_buffer_bytes(const rn_ctx_t *c)
{
    uint64_t sum = 0;
    for (int p = 0; p < c->n_parts; p++)
        sum += c->part[p].buf_bytes;
    return sum;
}

int rn_ctx_n_parts(const rn_ctx_t *c) { return c->n_parts; }

void rn_ctx_part_info(const rn_ctx_t *c, int i, rn_ctx_part_info_t *out)
{
    const part_t *P = &c->part[i];
    *out = (rn_ctx_part_info_t){
        .be = P->be,
        .first_layer = P->l0,
        .n_layers = P->l1 - P->l0,
        .input = i == 0,
        .output = i == c->n_parts - 1 && c->w->output.data,
        .kv_bytes = P->kv_bytes,
        .buffer_bytes = P->buf_bytes,
    };
    be_memory_used(P->be, &out->be_weight_bytes, &out->be_buffer_bytes);
}

void rn_ctx_truncate(rn_ctx_t *c, int n_keep) { rn_ctx_seq_truncate(c, 0, n_keep); }

void rn_ctx_clear(rn_ctx_t *c) { rn_ctx_seq_truncate(c, 0, 0); }
