/* test_split.c: one model split across several backend instances.
 *
 * A placement (model.h: rn_placement_t) gives ranges of layers to backend
 * instances; the context (forward.c) runs each range on its instance with
 * its own KV cache and buffers and hands the residual stream over at every
 * boundary (download, then upload). With only the CPU here, the instances
 * are separate CPU backends: they run the same kernels on the same bytes,
 * so a split model must give logits IDENTICAL (bitwise) to the same model
 * on one instance, whatever the split: every boundary between two
 * instances (the output layer alone on the second one included: the token
 * embeddings go with it, so the first instance then gets the rows from
 * it), and every pair of boundaries for three. Checked for single-token and chunked
 * evaluation (rn_ctx_eval with every token's logits), batched evaluation
 * of several sequences (rn_ctx_eval_batch), on llama (untied, and tied
 * output with Llama-3 rope factors: those are prepared on every instance),
 * qwen2 (biases, NEOX rope) and gemma2 (ext ops: scaled embedding,
 * soft-caps, sliding window, post-norms), and for embeddings of the bert
 * family. Also: each part reports its layers, instance and KV bytes (the
 * sum is the unsplit context's; each part's share follows its layer
 * count), each instance reports its buffers (be_ops_t.memory_used), the
 * "last N layers" form (first_layer < 0) equals the explicit range, the
 * most parts a placement can make (16 ranges between host layers) run,
 * and bad placements are refused. */
#include "lib/prelude.h"

#include <math.h>

#include "lib/gguf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backends.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"

#define N_INST 3
#define N_SEQ 2
#define N_CTX 32
#define N_BATCH 8
#define N_PROMPT 6
#define N_DECODE 3

static be_backend_t *be_g[N_INST];

typedef struct blob {
    void *bytes;
    size_t len;
} blob_t;

static rn_model_t *load(const blob_t *b, const rn_placement_t *pl)
{
    cr_err_t err;
    cr_err_clear(&err);
    cr_gguf_t *g = NULL;
    rn_model_t *m = NULL;
    cr_status_t st = cr_gguf_open_memory(b->bytes, b->len, &g, &err);
    if (!st)
        st = rn_model_load_gguf_placed(&g, pl, &m, &err);
    CHECK_MSG(st == CR_OK, "load: %s", err.msg);
    return m;
}

/* Everything one run produces, for a bitwise comparison. */
typedef struct run {
    float *all;   /* [N_PROMPT][V] rn_ctx_eval logits_all of the prompt */
    float *dec;   /* [N_DECODE][V] single-token decode logits */
    float *batch; /* [N_DECODE][N_SEQ][V] rn_ctx_eval_batch logits */
    float *emb;   /* [D] embedding of the prompt */
    int V, D;
} run_t;

static void run_free(run_t *r)
{
    free(r->all);
    free(r->dec);
    free(r->batch);
    free(r->emb);
    memset(r, 0, sizeof *r);
}

static int32_t tok(int i, int j, int V)
{
    return (int32_t)((3 + i * 37 + j * 11) % V);
}

/* The same script on any model: a prompt with every token's logits, then
 * single-token decode steps, then batched steps over N_SEQ sequences
 * (a prompt chunk of one beside a decode token of the other), then an
 * embedding. Decoders only run the first three, encoders only the last. */
static bool run_script(const rn_model_t *m, run_t *r)
{
    const rn_hparams_t *hp = rn_model_hparams(m);
    bool enc = rn_arch_is_encoder(hp->arch_id);
    int V = r->V = hp->n_vocab, D = r->D = hp->dim;
    cr_err_t err;
    cr_err_clear(&err);
    rn_ctx_opts_t o = {.n_ctx = N_CTX, .n_batch = N_BATCH, .n_seq = N_SEQ};
    rn_ctx_t *c = NULL;
    if (rn_ctx_new(m, &o, &c, &err)) {
        CHECK_MSG(false, "ctx: %s", err.msg);
        return false;
    }
    r->all = calloc((size_t)N_PROMPT * V, sizeof(float));
    r->dec = calloc((size_t)N_DECODE * V, sizeof(float));
    r->batch = calloc((size_t)N_DECODE * N_SEQ * V, sizeof(float));
    r->emb = calloc((size_t)D, sizeof(float));
    int32_t prompt[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        prompt[i] = tok(0, i, V);
    bool ok = true;
    if (enc) {
        ok = rn_ctx_embed(c, prompt, N_PROMPT, true, r->emb, &err) == CR_OK;
        CHECK_MSG(ok, "embed: %s", err.msg);
        rn_ctx_destroy(&c);
        return ok;
    }
    /* prompt in chunks of N_BATCH (6 < 8: one chunk; the batch below mixes) */
    ok = rn_ctx_eval(c, prompt, N_PROMPT, 0, r->all, &err) == CR_OK;
    for (int s = 0; ok && s < N_DECODE; s++) {
        int32_t t = tok(1, s, V);
        ok = rn_ctx_eval(c, &t, 1, rn_ctx_n_past(c), NULL, &err) == CR_OK;
        memcpy(r->dec + (size_t)s * V, rn_ctx_logits(c), (size_t)V * sizeof(float));
    }
    for (int s = 0; ok && s < N_DECODE; s++) {
        int32_t a[3] = {tok(2, s, V), tok(3, s, V), tok(4, s, V)};
        int32_t b = tok(5, s, V);
        rn_ctx_span_t sp[N_SEQ] = {
            {.seq = 1, .tokens = a, .n = 3, .pos = rn_ctx_seq_n_past(c, 1)},
            {.seq = 0, .tokens = &b, .n = 1, .pos = rn_ctx_seq_n_past(c, 0)},
        };
        ok = rn_ctx_eval_batch(c, sp, N_SEQ, &err) == CR_OK;
        for (int q = 0; q < N_SEQ; q++)
            memcpy(r->batch + ((size_t)s * N_SEQ + q) * V, rn_ctx_seq_logits(c, q),
                   (size_t)V * sizeof(float));
    }
    CHECK_MSG(ok, "eval: %s", err.msg);
    rn_ctx_destroy(&c);
    return ok;
}

static bool same(const float *a, const float *b, size_t n)
{
    return (a == NULL) == (b == NULL) && (!a || memcmp(a, b, n * sizeof(float)) == 0);
}

static void check_same(const char *label, const char *split, const run_t *ref,
                       const run_t *got)
{
    size_t V = (size_t)ref->V;
    CHECK_MSG(same(ref->all, got->all, N_PROMPT * V), "%s %s: prompt logits differ",
              label, split);
    CHECK_MSG(same(ref->dec, got->dec, N_DECODE * V), "%s %s: decode logits differ",
              label, split);
    CHECK_MSG(same(ref->batch, got->batch, N_DECODE * N_SEQ * V),
              "%s %s: batched logits differ", label, split);
    CHECK_MSG(same(ref->emb, got->emb, (size_t)ref->D), "%s %s: embeddings differ",
              label, split);
}

/* The parts of a context over m: layers, instances, KV shares. */
static void check_parts(const char *label, const rn_model_t *m, const rn_placement_t *pl,
                        uint64_t kv_ref)
{
    const rn_hparams_t *hp = rn_model_hparams(m);
    int n = hp->n_layers;
    cr_err_t err;
    rn_ctx_opts_t o = {.n_ctx = N_CTX, .n_batch = N_BATCH, .n_seq = N_SEQ};
    rn_ctx_t *c = NULL;
    if (rn_ctx_new(m, &o, &c, &err)) {
        CHECK_MSG(false, "%s: ctx: %s", label, err.msg);
        return;
    }
    CHECK(rn_ctx_kv_bytes(c) == kv_ref);
    uint64_t per_layer = kv_ref / (uint64_t)n;
    int next = 0;
    for (int i = 0; i < rn_ctx_n_parts(c); i++) {
        rn_ctx_part_info_t pi;
        rn_ctx_part_info(c, i, &pi);
        CHECK_EQ_INT(pi.first_layer, next);
        if (pi.n_layers > 0)
            CHECK(pi.be == rn_model_layer_backend(m, pi.first_layer));
        CHECK(pi.kv_bytes == per_layer * (uint64_t)pi.n_layers);
        CHECK(pi.buffer_bytes > 0);
        /* the instance counts at least this context's buffers and cache */
        CHECK(pi.be_buffer_bytes >= pi.buffer_bytes + pi.kv_bytes);
        CHECK(pi.input == (i == 0));
        next = pi.first_layer + pi.n_layers;
        if (pi.n_layers == 0) /* the embeddings or the output layer alone */
            CHECK(pi.first_layer == (i == 0 ? 0 : n));
        if (i == 0)
            CHECK(pi.be == rn_model_input_backend(m));
    }
    CHECK_EQ_INT(next, n);
    CHECK(rn_model_layer_backend(m, 0) == pl->host || pl->n_ranges > 0);
    rn_ctx_destroy(&c);
}

/* Splits of the model in b, each compared with the model on one instance. */
static void check_splits(const char *label, const rn_synth_opts_t *so)
{
    blob_t b = {0};
    cr_err_t err;
    cr_err_clear(&err);
    if (rn_synth_write_memory(so, &b.bytes, &b.len, &err)) {
        CHECK_MSG(false, "%s: synth: %s", label, err.msg);
        return;
    }
    rn_placement_t one = {.host = be_g[0]};
    rn_model_t *m = load(&b, &one);
    run_t ref = {0};
    if (!m || !run_script(m, &ref)) {
        rn_model_destroy(&m);
        free(b.bytes);
        return;
    }
    int n = rn_model_hparams(m)->n_layers;
    bool enc = rn_arch_is_encoder(rn_model_hparams(m)->arch_id);
    uint64_t kv_ref = 0;
    {
        rn_ctx_opts_t o = {.n_ctx = N_CTX, .n_batch = N_BATCH, .n_seq = N_SEQ};
        rn_ctx_t *c = NULL;
        if (!rn_ctx_new(m, &o, &c, &err)) {
            kv_ref = rn_ctx_kv_bytes(c);
            CHECK_EQ_INT(rn_ctx_n_parts(c), 1);
        }
        rn_ctx_destroy(&c);
    }
    rn_model_destroy(&m);
    int n_splits = 0;

    /* two instances: layers 0..k-1 on the first, k..n (and the output) on
     * the second; k = n puts the output layer alone on the second */
    for (int k = 1; k <= (enc ? n - 1 : n); k++) {
        rn_placement_t pl = {.host = be_g[0], .n_ranges = 1};
        pl.ranges[0] = (rn_range_t){be_g[1], k, n + 1 - k};
        rn_model_t *ms = load(&b, &pl);
        run_t got = {0};
        if (ms && run_script(ms, &got)) {
            char split[64];
            snprintf(split, sizeof split, "split at %d", k);
            check_same(label, split, &ref, &got);
            check_parts(label, ms, &pl, kv_ref);
            CHECK_EQ_INT(rn_model_n_instances(ms), 2);
            CHECK(rn_model_layer_backend(ms, k - 1) == be_g[0]);
            CHECK(rn_model_layer_backend(ms, k) == be_g[1]);
            CHECK(rn_model_layer_backend(ms, n) == (enc ? be_g[k < n ? 1 : 0] : be_g[1]));
            n_splits++;
        }
        run_free(&got);
        rn_model_destroy(&ms);
    }
    /* three instances: 0..k1-1, k1..k2-1, k2..n */
    for (int k1 = 1; k1 < n; k1++) {
        for (int k2 = k1 + 1; k2 <= (enc ? n - 1 : n); k2++) {
            rn_placement_t pl = {.host = be_g[0], .n_ranges = 2};
            pl.ranges[0] = (rn_range_t){be_g[2], k2, n + 1 - k2};
            pl.ranges[1] = (rn_range_t){be_g[1], k1, k2 - k1};
            rn_model_t *ms = load(&b, &pl);
            run_t got = {0};
            if (ms && run_script(ms, &got)) {
                char split[64];
                snprintf(split, sizeof split, "split at %d and %d", k1, k2);
                check_same(label, split, &ref, &got);
                check_parts(label, ms, &pl, kv_ref);
                CHECK_EQ_INT(rn_model_n_instances(ms), 3);
                n_splits++;
            }
            run_free(&got);
            rn_model_destroy(&ms);
        }
    }
    /* llama.cpp's count: the last 2 layers (the output and the last block) */
    if (!enc) {
        rn_placement_t pl = {.host = be_g[0], .n_ranges = 1};
        pl.ranges[0] = (rn_range_t){be_g[1], -1, 2};
        rn_model_t *ms = load(&b, &pl);
        run_t got = {0};
        if (ms && run_script(ms, &got)) {
            check_same(label, "last 2", &ref, &got);
            CHECK(rn_model_layer_backend(ms, n - 2) == be_g[0]);
            CHECK(rn_model_layer_backend(ms, n - 1) == be_g[1]);
            CHECK(rn_model_layer_backend(ms, n) == be_g[1]);
        }
        run_free(&got);
        rn_model_destroy(&ms);
    }
    printf("split: %s: %d splits identical to one instance\n", label, n_splits);
    run_free(&ref);
    free(b.bytes);
}

/* The most parts a placement makes: RN_MAX_RANGES one-layer ranges with
 * host layers between them (33 runs), alternating two instances. */
static void check_many_ranges(void)
{
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.n_layers = 2 * RN_MAX_RANGES + 2;
    blob_t b = {0};
    cr_err_t err;
    cr_err_clear(&err);
    if (rn_synth_write_memory(&so, &b.bytes, &b.len, &err)) {
        CHECK_MSG(false, "synth: %s", err.msg);
        return;
    }
    rn_placement_t one = {.host = be_g[0]};
    rn_placement_t pl = {.host = be_g[0], .n_ranges = RN_MAX_RANGES};
    for (int i = 0; i < RN_MAX_RANGES; i++)
        pl.ranges[i] = (rn_range_t){be_g[1 + i % 2], 2 * i + 1, 1};
    rn_model_t *m = load(&b, &one), *ms = load(&b, &pl);
    run_t ref = {0}, got = {0};
    if (m && ms && run_script(m, &ref) && run_script(ms, &got)) {
        check_same("llama", "16 ranges", &ref, &got);
        rn_ctx_opts_t o = {.n_ctx = N_CTX, .n_batch = N_BATCH, .n_seq = 1};
        rn_ctx_t *c = NULL;
        CHECK_EQ_INT(rn_ctx_new(ms, &o, &c, &err), CR_OK);
        if (c)
            CHECK_EQ_INT(rn_ctx_n_parts(c), 2 * RN_MAX_RANGES + 1);
        rn_ctx_destroy(&c);
        CHECK_EQ_INT(rn_model_n_instances(ms), 3);
    }
    run_free(&ref);
    run_free(&got);
    rn_model_destroy(&m);
    rn_model_destroy(&ms);
    free(b.bytes);
}

static void check_bad_placements(void)
{
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    blob_t b = {0};
    cr_err_t err;
    cr_err_clear(&err);
    if (rn_synth_write_memory(&so, &b.bytes, &b.len, &err)) {
        CHECK_MSG(false, "synth: %s", err.msg);
        return;
    }
    struct {
        rn_range_t r[2];
        int n;
        const char *what;
    } bad[] = {
        {{{be_g[1], 1, 5}}, 1, "outside"},            /* past the output layer */
        {{{be_g[1], 0, 2}, {be_g[2], 1, 1}}, 2, "two ranges"}, /* overlap */
        {{{NULL, 0, 1}}, 1, "outside"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        rn_placement_t pl = {.host = be_g[0], .n_ranges = bad[i].n};
        memcpy(pl.ranges, bad[i].r, sizeof bad[i].r);
        cr_gguf_t *g = NULL;
        rn_model_t *m = NULL;
        CHECK_EQ_INT(cr_gguf_open_memory(b.bytes, b.len, &g, &err), CR_OK);
        CHECK_EQ_INT(rn_model_load_gguf_placed(&g, &pl, &m, &err), CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, bad[i].what) != NULL, "placement %zu: %s", i, err.msg);
        CHECK(m == NULL);
    }
    free(b.bytes);
}

/* memory_used counts what an instance allocates and frees. */
static void check_memory_used(void)
{
    uint64_t w0, b0, w1, b1;
    be_memory_used(be_g[2], &w0, &b0);
    void *p = be_g[2]->ops->alloc(be_g[2], 1000);
    CHECK(p != NULL);
    be_memory_used(be_g[2], &w1, &b1);
    CHECK(b1 == b0 + 1000);
    CHECK(w1 == w0);
    be_g[2]->ops->free(be_g[2], p);
    be_memory_used(be_g[2], &w1, &b1);
    CHECK(b1 == b0);
    /* the host kind is registered and is host memory */
    size_t n = 0;
    const rn_backend_kind_t *k = rn_backends(&n);
    CHECK(n >= 1 && k == rn_backend_host() && k->host_memory);
    CHECK(be_g[0]->ops->host_memory);
    CHECK(be_check(be_g[0], NULL) == CR_OK);
}

int main(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    for (int i = 0; i < N_INST; i++) {
        if (rn_backend_host()->create(0, 2, &be_g[i], &err)) {
            fprintf(stderr, "backend: %s\n", err.msg);
            return 1;
        }
    }
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.type = CR_TYPE_Q8_0; /* packed matrices on the CPU */
    so.n_layers = 3;
    check_splits("llama q8_0", &so);

    rn_synth_defaults(&so);
    so.type = CR_TYPE_Q4_0;
    so.n_layers = 3;
    so.tied_output = true;
    so.rope_freqs = true;
    check_splits("llama q4_0 tied rope_freqs", &so);

    rn_synth_defaults(&so);
    so.arch = "gemma2";
    so.type = CR_TYPE_F16;
    so.n_layers = 3;
    so.sliding_window = 4;
    so.swa_pattern = 2;
    so.attn_softcap = 50.0f;
    so.final_softcap = 30.0f;
    check_splits("gemma2 f16", &so);

    rn_synth_defaults(&so);
    so.arch = "qwen2";
    so.type = CR_TYPE_F32;
    so.n_layers = 3;
    check_splits("qwen2 f32", &so);

    rn_synth_defaults(&so);
    so.arch = "phi3";
    so.type = CR_TYPE_F32;
    so.n_layers = 3;
    so.longrope = true;
    check_splits("phi3 longrope", &so);

    rn_synth_defaults(&so);
    so.arch = "bert";
    so.type = CR_TYPE_F32;
    so.n_layers = 3;
    check_splits("bert", &so);

    check_many_ranges();
    check_bad_placements();
    check_memory_used();
    for (int i = 0; i < N_INST; i++)
        be_destroy(&be_g[i]);
    return check_finish("split");
}
