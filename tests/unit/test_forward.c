/* test_forward.c: model loading and the forward pass on synthetic models.
 *
 * Models come from tools/synth/synth.c (the code behind
 * corral-gguf-synth), written in memory or to a temp file. Checks: every
 * weight type loads and gives finite, deterministic logits; a batch of n
 * tokens equals n single steps (12 tokens, and 48 for the tiled prompt
 * attention); truncating the cache and evaluating again
 * reproduces the logits; thread count does not change results; the backend
 * ops match plain double-precision references; and broken models (missing
 * tensor, wrong shape, unsupported type or architecture, bad
 * hyperparameters, truncated file) are refused with errors that name the
 * culprit. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/forward_check.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static be_backend_t *be_g;
static char tmpdir_g[256];

/* ---- helpers ---------------------------------------------------------- */

typedef struct mem_model {
    void *bytes;
    size_t len;
    rn_model_t *m;
} mem_model_t;

static cr_status_t load_mem(const void *bytes, size_t len, rn_model_t **m, cr_err_t *err)
{
    cr_gguf_t *g = NULL;
    cr_status_t st = cr_gguf_open_memory(bytes, len, &g, err);
    if (st)
        return st;
    return rn_model_load_gguf(&g, be_g, m, err);
}

static bool synth_mem(const rn_synth_opts_t *o, mem_model_t *mm)
{
    cr_err_t err;
    cr_err_clear(&err);
    memset(mm, 0, sizeof *mm);
    cr_status_t st = rn_synth_write_memory(o, &mm->bytes, &mm->len, &err);
    CHECK_MSG(st == CR_OK, "synth: %s", err.msg);
    if (st)
        return false;
    st = load_mem(mm->bytes, mm->len, &mm->m, &err);
    CHECK_MSG(st == CR_OK, "load: %s", err.msg);
    return st == CR_OK;
}

static void mem_free(mem_model_t *mm)
{
    rn_model_destroy(&mm->m);
    free(mm->bytes);
    mm->bytes = NULL;
}

static const int32_t toks_g[] = {1, 300, 17, 450, 42, 99, 260, 3, 498, 7, 123, 321};
#define N_TOKS ((int)CR_ARRAY_LEN(toks_g))

/* ---- the forward pass on every type ----------------------------------- */

static void check_model_runs(const char *label, const rn_model_t *m)
{
    const rn_hparams_t *hp = rn_model_hparams(m);
    size_t V = (size_t)hp->n_vocab;
    cr_err_t err;
    cr_err_clear(&err);
    rn_ctx_t *a = new_ctx(m, 64, 0), *b = new_ctx(m, 64, 5); /* b splits batches */
    if (!a || !b)
        goto out;
    CHECK_EQ_INT(rn_ctx_n_vocab(a), hp->n_vocab);
    CHECK_EQ_INT(rn_ctx_n_ctx(a), 64);
    CHECK(rn_ctx_kv_bytes(a) == 2ull * hp->n_layers * 64 * hp->kv_dim * 2);

    /* one batch, all logits */
    float *all = malloc(V * N_TOKS * sizeof *all);
    float *step = malloc(V * N_TOKS * sizeof *step);
    CHECK_EQ_INT(rn_ctx_eval(a, toks_g, N_TOKS, 0, all, &err), CR_OK);
    CHECK_EQ_INT(rn_ctx_n_past(a), N_TOKS);
    CHECK_MSG(all_finite(all, V * N_TOKS), "%s: non-finite logits", label);
    CHECK(same(rn_ctx_logits(a), all + V * (N_TOKS - 1), V));
    float spread = 0;
    for (size_t i = 1; i < V; i++)
        spread = fmaxf(spread, fabsf(all[i] - all[0]));
    CHECK_MSG(spread > 0, "%s: logits are all equal", label);

    /* n single steps == the batch (same kernels per token: bitwise) */
    for (int t = 0; t < N_TOKS; t++) {
        CHECK_EQ_INT(rn_ctx_eval(b, &toks_g[t], 1, t, NULL, &err), CR_OK);
        memcpy(step + V * t, rn_ctx_logits(b), V * sizeof(float));
    }
    CHECK_MSG(same(all, step, V * N_TOKS), "%s: batch != single steps", label);

    /* a batch split in chunks of 5 inside one call == one batch */
    rn_ctx_clear(b);
    CHECK_EQ_INT(rn_ctx_n_past(b), 0);
    CHECK_EQ_INT(rn_ctx_eval(b, toks_g, N_TOKS, 0, step, &err), CR_OK);
    CHECK_MSG(same(all, step, V * N_TOKS), "%s: chunked batch differs", label);

    /* truncate to a prefix and evaluate the rest again: identical */
    rn_ctx_truncate(b, 4);
    CHECK_EQ_INT(rn_ctx_n_past(b), 4);
    CHECK_EQ_INT(rn_ctx_eval(b, toks_g + 4, N_TOKS - 4, 4, NULL, &err), CR_OK);
    CHECK_MSG(same(rn_ctx_logits(b), all + V * (N_TOKS - 1), V),
              "%s: truncate + re-eval differs", label);
    /* evaluating at pos < n_past drops the tail itself */
    CHECK_EQ_INT(rn_ctx_eval(b, toks_g + 7, N_TOKS - 7, 7, NULL, &err), CR_OK);
    CHECK(same(rn_ctx_logits(b), all + V * (N_TOKS - 1), V));
    /* a different continuation after a kept prefix gives different logits,
     * and going back restores the original */
    int32_t other = 5;
    CHECK_EQ_INT(rn_ctx_eval(b, &other, 1, N_TOKS - 1, NULL, &err), CR_OK);
    CHECK(!same(rn_ctx_logits(b), all + V * (N_TOKS - 1), V));
    CHECK_EQ_INT(rn_ctx_eval(b, &toks_g[N_TOKS - 1], 1, N_TOKS - 1, NULL, &err), CR_OK);
    CHECK(same(rn_ctx_logits(b), all + V * (N_TOKS - 1), V));

    /* a prompt long enough for the tiled prompt attention (attn_prefill.c:
     * from 2 queries whose last sees 32 keys), in one batch and in b's
     * chunks of 5, == single steps (the per-query attention), bitwise */
    enum { N_LONG = 48 };
    int32_t longt[N_LONG];
    for (int i = 0; i < N_LONG; i++)
        longt[i] = (int32_t)((i * 37 + 11) % hp->n_vocab);
    float *lall = malloc(V * N_LONG * sizeof *lall);
    float *lstep = malloc(V * N_LONG * sizeof *lstep);
    rn_ctx_clear(a);
    CHECK_EQ_INT(rn_ctx_eval(a, longt, N_LONG, 0, lall, &err), CR_OK);
    rn_ctx_clear(b);
    for (int t = 0; t < N_LONG; t++) {
        CHECK_EQ_INT(rn_ctx_eval(b, &longt[t], 1, t, NULL, &err), CR_OK);
        memcpy(lstep + V * t, rn_ctx_logits(b), V * sizeof(float));
    }
    CHECK_MSG(same(lall, lstep, V * N_LONG), "%s: %d-token batch != single steps", label,
              N_LONG);
    rn_ctx_clear(b);
    CHECK_EQ_INT(rn_ctx_eval(b, longt, N_LONG, 0, lstep, &err), CR_OK);
    CHECK_MSG(same(lall, lstep, V * N_LONG), "%s: %d-token chunked batch differs", label,
              N_LONG);
    free(lall);
    free(lstep);

    free(all);
    free(step);
out:
    rn_ctx_destroy(&a);
    rn_ctx_destroy(&b);
    CHECK(a == NULL);
}

static void test_types(void)
{
    static const struct {
        cr_type_t t;
        int dim, ffn;
    } types[] = {
        {CR_TYPE_F32, 64, 128},  {CR_TYPE_F16, 64, 128},  {CR_TYPE_BF16, 64, 96},
        {CR_TYPE_Q8_0, 64, 128}, {CR_TYPE_Q4_0, 64, 128}, {CR_TYPE_Q6_K, 256, 256},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++) {
        rn_synth_opts_t o;
        rn_synth_defaults(&o);
        o.type = types[i].t;
        o.dim = types[i].dim;
        o.ffn = types[i].ffn;
        o.seed = 11 + i;
        mem_model_t mm;
        if (!synth_mem(&o, &mm)) {
            mem_free(&mm);
            continue;
        }
        const rn_hparams_t *hp = rn_model_hparams(mm.m);
        CHECK_EQ_INT(hp->dim, o.dim);
        CHECK_EQ_INT(hp->n_layers, 2);
        CHECK_EQ_INT(hp->n_heads, 4);
        CHECK_EQ_INT(hp->n_kv_heads, 2);
        CHECK_EQ_INT(hp->head_dim, o.dim / 4);
        CHECK_EQ_INT(hp->kv_dim, o.dim / 2);
        CHECK_EQ_INT(hp->ffn, o.ffn);
        CHECK_EQ_INT(hp->n_ctx_train, 256);
        CHECK_EQ_INT(hp->n_vocab, rn_synth_builtin_vocab_size());
        CHECK_EQ_INT(hp->n_rot, o.dim / 4);
        CHECK(hp->rope_base == 10000.0f && hp->rms_eps == 1e-5f);
        CHECK_EQ_STR(hp->arch, "llama");
        const rn_weights_t *w = rn_model_weights(mm.m);
        CHECK(!w->tied_output && !w->has_rope_freqs);
        CHECK(w->layers[1].wq.type == o.type && w->layers[0].attn_norm.type == CR_TYPE_F32);
        /* weights are used in place: views point into the file bytes */
        const uint8_t *lo = mm.bytes, *hi = lo + mm.len;
        CHECK((const uint8_t *)w->layers[1].w_down.data > lo &&
              (const uint8_t *)w->layers[1].w_down.data < hi);
        uint64_t wb = rn_model_weight_bytes(mm.m);
        CHECK(wb > 0 && wb < mm.len);
        char label[32];
        snprintf(label, sizeof label, "%s", cr_type_info(o.type)->name);
        check_model_runs(label, mm.m);
        mem_free(&mm);
    }
}

/* Same bytes, same logits; and a different thread count changes nothing. */
static void test_determinism(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.type = CR_TYPE_Q8_0;
    void *b1 = NULL, *b2 = NULL;
    size_t l1 = 0, l2 = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b1, &l1, &err), CR_OK);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b2, &l2, &err), CR_OK);
    CHECK(l1 == l2 && b1 && b2 && !memcmp(b1, b2, l1));
    o.seed = 2;
    void *b3 = NULL;
    size_t l3 = 0;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b3, &l3, &err), CR_OK);
    CHECK(l3 == l1 && b3 && memcmp(b1, b3, l1) != 0); /* seed matters */

    be_backend_t *be1 = NULL;
    CHECK_EQ_INT(be_cpu_new(1, &be1, &err), CR_OK);
    cr_gguf_t *g1 = NULL, *g2 = NULL;
    rn_model_t *m1 = NULL, *m2 = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(b1, l1, &g1, &err), CR_OK);
    CHECK_EQ_INT(cr_gguf_open_memory(b2, l2, &g2, &err), CR_OK);
    CHECK_EQ_INT(rn_model_load_gguf(&g1, be_g, &m1, &err), CR_OK);
    CHECK_EQ_INT(rn_model_load_gguf(&g2, be1, &m2, &err), CR_OK);
    CHECK(g1 == NULL && g2 == NULL);
    if (m1 && m2) {
        rn_ctx_t *c1 = new_ctx(m1, 32, 0), *c2 = new_ctx(m2, 32, 0);
        if (c1 && c2) {
            CHECK_EQ_INT(rn_ctx_eval(c1, toks_g, N_TOKS, 0, NULL, &err), CR_OK);
            CHECK_EQ_INT(rn_ctx_eval(c2, toks_g, N_TOKS, 0, NULL, &err), CR_OK);
            CHECK(same(rn_ctx_logits(c1), rn_ctx_logits(c2),
                       (size_t)rn_ctx_n_vocab(c1)));
        }
        rn_ctx_destroy(&c1);
        rn_ctx_destroy(&c2);
    }
    rn_model_destroy(&m1);
    rn_model_destroy(&m2);
    be_destroy(&be1);
    free(b1);
    free(b2);
    free(b3);
}

static void test_variants(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    /* tied output: output.weight absent, token_embd used for logits */
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.tied_output = true;
    mem_model_t mm;
    if (synth_mem(&o, &mm)) {
        const rn_weights_t *w = rn_model_weights(mm.m);
        CHECK(w->tied_output && w->output.data == w->token_embd.data);
        check_model_runs("tied", mm.m);
    }
    mem_free(&mm);

    /* rope frequency factors and a larger base; MHA (kv heads == heads) */
    rn_synth_defaults(&o);
    o.rope_freqs = true;
    o.rope_base = 500000.0f;
    o.n_kv_heads = 4;
    o.n_layers = 1;
    if (synth_mem(&o, &mm)) {
        const rn_weights_t *w = rn_model_weights(mm.m);
        CHECK(w->has_rope_freqs && w->rope_freqs.n_cols == 8);
        CHECK(rn_model_hparams(mm.m)->rope_base == 500000.0f);
        check_model_runs("rope_freqs", mm.m);
    }
    mem_free(&mm);

    /* loading from a path (mmap) equals loading from memory */
    rn_synth_defaults(&o);
    o.type = CR_TYPE_Q4_0;
    char path[512];
    snprintf(path, sizeof path, "%s/q4.gguf", tmpdir_g);
    CHECK_EQ_INT(rn_synth_write(&o, path, &err), CR_OK);
    rn_model_t *mf = NULL;
    CHECK_EQ_INT(rn_model_load(path, be_g, &mf, &err), CR_OK);
    if (synth_mem(&o, &mm) && mf) {
        rn_ctx_t *c1 = new_ctx(mf, 16, 0), *c2 = new_ctx(mm.m, 16, 0);
        if (c1 && c2) {
            CHECK_EQ_INT(rn_ctx_eval(c1, toks_g, 6, 0, NULL, &err), CR_OK);
            CHECK_EQ_INT(rn_ctx_eval(c2, toks_g, 6, 0, NULL, &err), CR_OK);
            CHECK(same(rn_ctx_logits(c1), rn_ctx_logits(c2), (size_t)rn_ctx_n_vocab(c1)));
        }
        rn_ctx_destroy(&c1);
        rn_ctx_destroy(&c2);
        CHECK(rn_model_gguf(mf) != NULL && rn_model_backend(mf) == be_g);
    }
    rn_model_destroy(&mf);
    mem_free(&mm);

    /* bad synth options are refused by name */
    rn_synth_defaults(&o);
    o.type = CR_TYPE_Q4_0;
    o.dim = 48;
    o.n_heads = 4;
    void *b = NULL;
    size_t l = 0;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &l, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "multiples of 32"), "%s", err.msg);
    rn_synth_defaults(&o);
    o.n_kv_heads = 3;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &l, &err), CR_E_INVALID);
    CHECK(b == NULL);
}

/* Eval argument checks. */
static void test_eval_errors(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    mem_model_t mm;
    cr_err_t err;
    cr_err_clear(&err);
    if (!synth_mem(&o, &mm)) {
        mem_free(&mm);
        return;
    }
    rn_ctx_t *c = new_ctx(mm.m, 8, 0);
    if (c) {
        int32_t bad[2] = {5, 100000};
        CHECK_EQ_INT(rn_ctx_eval(c, bad, 2, 0, NULL, &err), CR_E_INVALID);
        CHECK(strstr(err.msg, "100000") && strstr(err.msg, "index 1"));
        int32_t neg = -1;
        CHECK_EQ_INT(rn_ctx_eval(c, &neg, 1, 0, NULL, &err), CR_E_INVALID);
        CHECK_EQ_INT(rn_ctx_eval(c, toks_g, 0, 0, NULL, &err), CR_E_INVALID);
        CHECK_EQ_INT(rn_ctx_eval(c, toks_g, 1, 1, NULL, &err), CR_E_INVALID); /* gap */
        CHECK_EQ_INT(rn_ctx_eval(c, toks_g, 9, 0, NULL, &err), CR_E_TOO_LARGE);
        CHECK_EQ_INT(rn_ctx_eval(c, toks_g, 8, 0, NULL, &err), CR_OK);  /* exactly full */
        CHECK_EQ_INT(rn_ctx_eval(c, toks_g, 1, 8, NULL, &err), CR_E_TOO_LARGE);
        CHECK_EQ_INT(rn_ctx_n_past(c), 8);
        rn_ctx_truncate(c, -3);
        CHECK_EQ_INT(rn_ctx_n_past(c), 0);
    }
    rn_ctx_destroy(&c);
    rn_ctx_opts_t bad_o = {.n_ctx = 0};
    CHECK_EQ_INT(rn_ctx_new(mm.m, &bad_o, &c, &err), CR_E_INVALID);
    CHECK(c == NULL);
    rn_ctx_destroy(&c); /* NULL-safe */
    mem_free(&mm);
}

/* Embeddings: unit length when normalized, same direction otherwise,
 * independent of batch splitting, and they leave the prompt in the cache. */
static void test_embed(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.type = CR_TYPE_F16;
    mem_model_t mm;
    cr_err_t err;
    cr_err_clear(&err);
    if (!synth_mem(&o, &mm)) {
        mem_free(&mm);
        return;
    }
    rn_ctx_t *a = new_ctx(mm.m, 32, 0), *b = new_ctx(mm.m, 32, 3);
    float e1[64], e2[64], e3[64];
    if (a && b) {
        CHECK_EQ_INT(rn_ctx_embed(a, toks_g, N_TOKS, true, e1, &err), CR_OK);
        CHECK_EQ_INT(rn_ctx_n_past(a), N_TOKS);
        CHECK_EQ_INT(rn_ctx_embed(b, toks_g, N_TOKS, true, e2, &err), CR_OK);
        CHECK(same(e1, e2, 64));
        CHECK_EQ_INT(rn_ctx_embed(a, toks_g, N_TOKS, false, e3, &err), CR_OK);
        double n1 = 0, n3 = 0, dot = 0;
        for (int i = 0; i < 64; i++) {
            n1 += (double)e1[i] * e1[i];
            n3 += (double)e3[i] * e3[i];
            dot += (double)e1[i] * e3[i];
        }
        CHECK_NEAR(n1, 1.0, 1e-5);
        CHECK(fabs(n3 - 1.0) > 1e-3);          /* really unnormalized */
        CHECK_NEAR(dot / sqrt(n1 * n3), 1.0, 1e-6); /* same direction */
        /* a different text gives a different embedding */
        CHECK_EQ_INT(rn_ctx_embed(a, toks_g + 1, N_TOKS - 1, true, e3, &err), CR_OK);
        CHECK(!same(e1, e3, 64));
        int32_t bad = 99999;
        CHECK_EQ_INT(rn_ctx_embed(a, &bad, 1, true, e3, &err), CR_E_INVALID);
        CHECK_EQ_INT(rn_ctx_embed(a, toks_g, 33, true, e3, &err), CR_E_TOO_LARGE);
    }
    rn_ctx_destroy(&a);
    rn_ctx_destroy(&b);
    mem_free(&mm);
}

/* ---- broken models ---------------------------------------------------- */

typedef struct edit {
    const char *skip_tensor;    /* drop this tensor */
    const char *reshape_tensor; /* give it ne = {ne0, ne1} (zero data) */
    uint64_t ne0, ne1;
    const char *retype_tensor;  /* store it as `type` (zero data) */
    cr_type_t type;
    const char *drop_key;
    const char *str_key;        /* set a string key */
    const char *str_val;
    const char *u32_key;        /* set a u32 key */
    uint32_t u32_val;
} edit_t;

/* Rebuilds the GGUF in src with one edit, loads it, and returns the status
 * (message in err). */
static cr_status_t load_edited(const void *src, size_t src_len, const edit_t *e,
                               cr_err_t *err)
{
    cr_gguf_t *g = NULL;
    cr_err_t e2;
    if (cr_gguf_open_memory(src, src_len, &g, &e2))
        return CR_E_INTERNAL;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_gguf_writer_copy_prefix(w, g, "", &e2);
    if (e->drop_key)
        cr_gguf_writer_remove(w, e->drop_key);
    if (e->str_key)
        cr_gguf_writer_add_str(w, e->str_key, e->str_val, &e2);
    if (e->u32_key)
        cr_gguf_writer_add_u32(w, e->u32_key, e->u32_val, &e2);
    void *zeros = calloc(1, 1 << 22);
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (e->skip_tensor && !strcmp(t->name, e->skip_tensor))
            continue;
        if (e->reshape_tensor && !strcmp(t->name, e->reshape_tensor)) {
            uint64_t ne[2] = {e->ne0, e->ne1};
            cr_gguf_writer_add_tensor(w, t->name, e->ne1 > 1 ? 2 : 1, ne, t->type, zeros,
                                      NULL, &e2);
        } else if (e->retype_tensor && !strcmp(t->name, e->retype_tensor)) {
            cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, e->type, zeros, NULL,
                                      &e2);
        } else {
            cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data,
                                      NULL, &e2);
        }
    }
    void *out = NULL;
    size_t len = 0;
    cr_status_t st = cr_gguf_writer_write_memory(w, &out, &len, &e2);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
    free(zeros);
    if (st) {
        fprintf(stderr, "rebuild failed: %s\n", e2.msg);
        return CR_E_INTERNAL;
    }
    rn_model_t *m = NULL;
    st = load_mem(out, len, &m, err);
    rn_model_destroy(&m);
    free(out);
    return st;
}

static void test_corrupt(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.type = CR_TYPE_Q8_0;
    void *src = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &src, &len, &err), CR_OK);
    if (!src)
        return;

    static const struct {
        const char *name;
        edit_t e;
        cr_status_t want;
        const char *msg1, *msg2; /* substrings of the message */
    } cases[] = {
        {"unchanged", {0}, CR_OK, NULL, NULL},
        {"missing tensor", {.skip_tensor = "blk.1.ffn_up.weight"}, CR_E_CORRUPT,
         "missing tensor", "blk.1.ffn_up.weight"},
        {"missing embedding", {.skip_tensor = "token_embd.weight"}, CR_E_CORRUPT,
         "missing tensor", "token_embd.weight"},
        {"missing output norm", {.skip_tensor = "output_norm.weight"}, CR_E_CORRUPT,
         "missing tensor", "output_norm.weight"},
        {"wrong shape k", {.reshape_tensor = "blk.0.attn_k.weight", .ne0 = 64, .ne1 = 64},
         CR_E_CORRUPT, "blk.0.attn_k.weight", "[64, 64], expected [64, 32]"},
        {"wrong shape down", {.reshape_tensor = "blk.1.ffn_down.weight", .ne0 = 64,
                              .ne1 = 128},
         CR_E_CORRUPT, "blk.1.ffn_down.weight", "expected [128, 64]"},
        {"wrong shape output", {.reshape_tensor = "output.weight", .ne0 = 64, .ne1 = 32},
         CR_E_CORRUPT, "output.weight", "expected"},
        {"wrong shape norm", {.reshape_tensor = "blk.0.attn_norm.weight", .ne0 = 32,
                              .ne1 = 1},
         CR_E_CORRUPT, "blk.0.attn_norm.weight", "expected [64]"},
        {"wrong shape rope_freqs", {.reshape_tensor = "rope_freqs.weight"}, CR_OK, NULL,
         NULL}, /* not present: edit is a no-op */
        {"unsupported type", {.retype_tensor = "blk.0.attn_q.weight",
                              .type = CR_TYPE_I32},
         CR_E_UNSUPPORTED, "blk.0.attn_q.weight", "I32"},
        {"f16 norm", {.retype_tensor = "output_norm.weight", .type = CR_TYPE_F16},
         CR_E_UNSUPPORTED, "output_norm.weight", "expected F32"},
        {"architecture", {.str_key = "general.architecture", .str_val = "gpt9"},
         CR_E_UNSUPPORTED, "unsupported architecture 'gpt9'", NULL},
        {"no architecture", {.drop_key = "general.architecture"}, CR_E_UNSUPPORTED,
         "unsupported architecture ''", NULL},
        {"missing block_count", {.drop_key = "llama.block_count"}, CR_E_CORRUPT,
         "llama.block_count", NULL},
        {"missing embedding_length", {.drop_key = "llama.embedding_length"},
         CR_E_CORRUPT, "llama.embedding_length", NULL},
        {"more layers than tensors", {.u32_key = "llama.block_count", .u32_val = 3},
         CR_E_CORRUPT, "missing tensor 'blk.2.attn_norm.weight'", NULL},
        {"zero heads", {.u32_key = "llama.attention.head_count", .u32_val = 0},
         CR_E_CORRUPT, "llama.attention.head_count", "out of range"},
        {"heads not dividing", {.u32_key = "llama.attention.head_count", .u32_val = 5},
         CR_E_CORRUPT, "llama.attention.head_count", NULL},
        {"kv heads not dividing", {.u32_key = "llama.attention.head_count_kv",
                                   .u32_val = 3},
         CR_E_CORRUPT, "head_count_kv", NULL},
        {"huge dim", {.u32_key = "llama.embedding_length", .u32_val = 0xffffffffu},
         CR_E_CORRUPT, "llama.embedding_length", "out of range"},
        {"odd rope dims", {.u32_key = "llama.rope.dimension_count", .u32_val = 7},
         CR_E_CORRUPT, "rope.dimension_count", NULL},
        {"rope dims > head", {.u32_key = "llama.rope.dimension_count", .u32_val = 64},
         CR_E_CORRUPT, "rope.dimension_count", NULL},
        {"ffn mismatch", {.u32_key = "llama.feed_forward_length", .u32_val = 96},
         CR_E_CORRUPT, "blk.0.ffn_gate.weight", "expected [64, 96]"},
        {"string hparam", {.str_key = "llama.block_count", .str_val = "2"},
         CR_E_CORRUPT, "llama.block_count", NULL},
        {"missing context_length", {.drop_key = "llama.context_length"}, CR_E_CORRUPT,
         "llama.context_length", NULL},
        {"kv heads default", {.drop_key = "llama.attention.head_count_kv"},
         CR_E_CORRUPT, "blk.0.attn_k.weight", "expected [64, 64]"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        cr_err_clear(&err);
        cr_status_t st = load_edited(src, len, &cases[i].e, &err);
        CHECK_MSG(st == cases[i].want, "%s: status %d (%s), want %d", cases[i].name,
                  (int)st, err.msg, (int)cases[i].want);
        if (cases[i].msg1)
            CHECK_MSG(strstr(err.msg, cases[i].msg1), "%s: message '%s' lacks '%s'",
                      cases[i].name, err.msg, cases[i].msg1);
        if (cases[i].msg2)
            CHECK_MSG(strstr(err.msg, cases[i].msg2), "%s: message '%s' lacks '%s'",
                      cases[i].name, err.msg, cases[i].msg2);
    }

    /* a model with rope_freqs of the wrong length */
    rn_synth_defaults(&o);
    o.rope_freqs = true;
    void *rf = NULL;
    size_t rl = 0;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &rf, &rl, &err), CR_OK);
    edit_t e = {.reshape_tensor = "rope_freqs.weight", .ne0 = 16, .ne1 = 1};
    CHECK_EQ_INT(load_edited(rf, rl, &e, &err), CR_E_CORRUPT);
    CHECK(strstr(err.msg, "rope_freqs.weight") && strstr(err.msg, "expected [8]"));
    free(rf);

    /* truncated files: every cut is refused, never crashes */
    size_t cuts[] = {0, 3, 16, 100, len / 2, len - 1};
    for (size_t i = 0; i < CR_ARRAY_LEN(cuts); i++) {
        rn_model_t *m = NULL;
        cr_status_t st = load_mem(src, cuts[i], &m, &err);
        CHECK_MSG(st == CR_E_TRUNCATED || st == CR_E_CORRUPT,
                  "cut at %zu: status %d (%s)", cuts[i], (int)st, err.msg);
        CHECK(m == NULL);
    }
    /* and through a file path */
    char path[512];
    snprintf(path, sizeof path, "%s/trunc.gguf", tmpdir_g);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(src, 1, len - 10, f);
        fclose(f);
    }
    rn_model_t *m = NULL;
    cr_status_t st = rn_model_load(path, be_g, &m, &err);
    CHECK_MSG(st == CR_E_TRUNCATED || st == CR_E_CORRUPT, "truncated file: %d (%s)",
              (int)st, err.msg);
    snprintf(path, sizeof path, "%s/does-not-exist.gguf", tmpdir_g);
    CHECK_EQ_INT(rn_model_load(path, be_g, &m, &err), CR_E_IO);

    /* a vocabulary-only file is not a model */
    rn_synth_defaults(&o);
    o.vocab_only = true;
    void *vo = NULL;
    size_t vl = 0;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &vo, &vl, &err), CR_OK);
    CHECK_EQ_INT(load_mem(vo, vl, &m, &err), CR_E_CORRUPT);
    CHECK(strstr(err.msg, "token_embd.weight"));
    free(vo);
    free(src);
}

/* ---- backend ops against plain references ----------------------------- */

static void test_ops(void)
{
    be_backend_t *be = be_g;
    const be_ops_t *op = be->ops;
    cr_err_t err;
    cr_err_clear(&err);
    enum { NT = 3, NH = 4, NKV = 2, HD = 16, CTX = 7 };
    CHECK_EQ_INT(op->reserve(be, NT, 64, CTX, NH, &err), CR_OK);
    CHECK_EQ_INT(op->device_count(be), 1);
    uint64_t fr = 0, tot = 0;
    CHECK_EQ_INT(op->device_memory(be, 0, &fr, &tot, &err), CR_OK);
    CHECK(tot > 0 && fr <= tot);
    CHECK_EQ_INT(op->device_memory(be, 1, &fr, &tot, &err), CR_E_INVALID);
    CHECK_EQ_STR(op->name, "cpu");

    /* rmsnorm */
    float x[NT * 64], y[NT * 64], g[64];
    for (int i = 0; i < NT * 64; i++)
        x[i] = (float)sin(i * 0.37) * 3;
    for (int i = 0; i < 64; i++)
        g[i] = 0.5f + (float)i / 64;
    be_weight_t gw = {"g", CR_TYPE_F32, 64, 1, 256, g, NULL};
    op->rmsnorm(be, y, x, &gw, NT, 64, 1e-5f);
    double maxe = 0;
    for (int t = 0; t < NT; t++) {
        double ss = 0;
        for (int i = 0; i < 64; i++)
            ss += (double)x[t * 64 + i] * x[t * 64 + i];
        double sc = 1 / sqrt(ss / 64 + 1e-5);
        for (int i = 0; i < 64; i++)
            maxe = fmax(maxe, fabs(y[t * 64 + i] - x[t * 64 + i] * sc * g[i]));
    }
    CHECK_MSG(maxe < 1e-5, "rmsnorm error %g", maxe);

    /* rope, with and without frequency factors, partial rotation */
    float ff[4] = {1, 2, 4, 8};
    be_weight_t ffw = {"ff", CR_TYPE_F32, 4, 1, 16, ff, NULL};
    int32_t pos[NT] = {0, 5, 1000};
    for (int variant = 0; variant < 2; variant++) {
        float r[NT * NH * HD], orig[NT * NH * HD];
        for (int i = 0; i < NT * NH * HD; i++)
            r[i] = orig[i] = (float)cos(i * 0.11);
        int n_rot = 8;
        op->rope(be, r, NT, NH, HD, n_rot, pos, 10000.0f, variant ? &ffw : NULL);
        maxe = 0;
        for (int t = 0; t < NT; t++) {
            for (int h = 0; h < NH; h++) {
                const float *o = orig + (t * NH + h) * HD;
                const float *v = r + (t * NH + h) * HD;
                for (int i = 0; i < HD; i += 2) {
                    double a0 = o[i], a1 = o[i + 1];
                    if (i < n_rot) {
                        double th = pos[t] * pow(10000.0, -(double)i / n_rot);
                        if (variant)
                            th /= ff[i / 2];
                        double c = cos(th), s = sin(th);
                        double b0 = a0 * c - a1 * s, b1 = a0 * s + a1 * c;
                        a0 = b0;
                        a1 = b1;
                    }
                    maxe = fmax(maxe, fmax(fabs(v[i] - a0), fabs(v[i + 1] - a1)));
                }
            }
        }
        /* angles reach 1000 rad; float theta carries ~1e-4 rad error there */
        CHECK_MSG(maxe < 2e-3, "rope (variant %d) error %g", variant, maxe);
    }

    /* attention: causal, grouped heads, F16 cache, vs double reference */
    int KV = NKV * HD;
    uint16_t *kc = op->alloc(be, CTX * KV * 2), *vc = op->alloc(be, CTX * KV * 2);
    float kf[CTX * NKV * HD], vf[CTX * NKV * HD], q[NT * NH * HD], out[NT * NH * HD];
    for (int i = 0; i < CTX * KV; i++) {
        kf[i] = (float)sin(i * 0.7);
        vf[i] = (float)cos(i * 0.3);
    }
    for (int i = 0; i < NT * NH * HD; i++)
        q[i] = (float)sin(i * 0.13) * 2;
    int pos0 = 2; /* rows 0..4 filled; queries at positions 2, 3, 4 */
    op->kv_store(be, kc, CR_TYPE_F16, kf, pos0 + NT, 0, KV);
    op->kv_store(be, vc, CR_TYPE_F16, vf, pos0 + NT, 0, KV);
    CHECK(kc[5] == be_f32_to_f16(kf[5]));
    be_attn_t a = {NT, pos0, NH, NKV, HD, 1.0f / sqrtf(HD), NULL, CR_TYPE_F16, 0, 0};
    op->attention(be, out, q, kc, vc, &a);
    maxe = 0;
    for (int t = 0; t < NT; t++) {
        for (int h = 0; h < NH; h++) {
            int hk = h / (NH / NKV), n_kv = pos0 + t + 1;
            double s[CTX], mx = -1e30, sum = 0;
            for (int p = 0; p < n_kv; p++) {
                double d = 0;
                for (int i = 0; i < HD; i++)
                    d += (double)q[(t * NH + h) * HD + i] *
                         be_f16_to_f32(be_f32_to_f16(kf[p * KV + hk * HD + i]));
                s[p] = d / sqrt(HD);
                mx = fmax(mx, s[p]);
            }
            for (int p = 0; p < n_kv; p++)
                sum += s[p] = exp(s[p] - mx);
            for (int i = 0; i < HD; i++) {
                double o = 0;
                for (int p = 0; p < n_kv; p++)
                    o += s[p] / sum * be_f16_to_f32(be_f32_to_f16(vf[p * KV + hk * HD + i]));
                maxe = fmax(maxe, fabs(o - out[(t * NH + h) * HD + i]));
            }
        }
    }
    /* q and the probabilities are rounded to F16 (relative 2^-11) */
    CHECK_MSG(maxe < 5e-3, "attention error %g", maxe);
    op->free(be, kc);
    op->free(be, vc);

    /* swiglu, add, softmax, get_rows */
    float ga[5] = {-2, -0.5f, 0, 1, 3}, up[5] = {1, 2, 3, 4, 5}, sw[5];
    op->swiglu(be, sw, ga, up, 5);
    for (int i = 0; i < 5; i++)
        CHECK_NEAR(sw[i], ga[i] / (1 + exp(-ga[i])) * up[i], 1e-6);
    op->add(be, sw, up, 5);
    CHECK_NEAR(sw[4], 3 / (1 + exp(-3.0)) * 5 + 5, 1e-5);
    float sm[6] = {1, 2, 3, 1000, 1000, -1000};
    op->softmax(be, sm, 2, 3);
    CHECK_NEAR(sm[0] + sm[1] + sm[2], 1, 1e-6);
    CHECK_NEAR(sm[2], exp(3) / (exp(1) + exp(2) + exp(3)), 1e-6);
    CHECK_NEAR(sm[3], 0.5, 1e-6);
    CHECK(sm[5] == 0);
    be_block_q8_0_t rows[3];
    for (int r = 0; r < 3; r++) {
        rows[r].d = be_f32_to_f16((float)(r + 1));
        for (int i = 0; i < 32; i++)
            rows[r].qs[i] = (int8_t)(i - r);
    }
    be_weight_t rw = {"emb", CR_TYPE_Q8_0, 32, 3, 34, rows, NULL};
    int32_t ids[2] = {2, 0};
    float emb[64];
    op->get_rows(be, &rw, ids, 2, emb);
    CHECK(emb[0] == 3.0f * -2 && emb[31] == 3.0f * 29 && emb[32] == 0 && emb[63] == 31);

    /* upload/download round trip */
    float *dev = op->alloc(be, 16);
    float hsrc[4] = {1, 2, 3, 4}, hdst[4] = {0};
    op->upload(be, dev, hsrc, sizeof hsrc);
    op->download(be, hdst, dev, sizeof hdst);
    CHECK(!memcmp(hsrc, hdst, sizeof hsrc));
    op->free(be, dev);
}

/* ---- the corral-gguf-synth program ------------------------------------ */

static int run_tool(const char *tool, char *const args[])
{
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
        }
        execv(tool, args);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_tool(void)
{
    const char *bd = getenv("CORRAL_BUILD_DIR");
    char tool[1024];
    snprintf(tool, sizeof tool, "%s/bin/corral-gguf-synth", bd ? bd : ".");
    if (!bd || access(tool, X_OK) != 0) {
        printf("test_forward: %s not built; tool checks skipped\n", tool);
        return;
    }
    char out[512];
    snprintf(out, sizeof out, "%s/tool.gguf", tmpdir_g);
    char *args[] = {tool, "--out", out, "--seed", "7", "--type", "q8_0", "--layers",
                    "3", "--ffn", "96", NULL};
    CHECK_EQ_INT(run_tool(tool, args), 0);
    /* the program writes exactly what the library writes */
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.seed = 7;
    o.type = CR_TYPE_Q8_0;
    o.n_layers = 3;
    o.ffn = 96;
    void *b = NULL;
    size_t l = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &l, &err), CR_OK);
    FILE *f = fopen(out, "rb");
    char *fb = malloc(l + 1);
    size_t got = f && fb ? fread(fb, 1, l + 1, f) : 0;
    if (f)
        fclose(f);
    CHECK(got == l && b && !memcmp(fb, b, l));
    free(fb);
    free(b);

    char *bad1[] = {tool, "--out", out, "--type", "q9_9", NULL};
    CHECK_EQ_INT(run_tool(tool, bad1), 2);
    char *bad2[] = {tool, "--type", "f16", NULL}; /* no --out */
    CHECK_EQ_INT(run_tool(tool, bad2), 2);
    char *bad3[] = {tool, "--out", out, "--dim", "40", "--type", "q4_0", NULL};
    CHECK_EQ_INT(run_tool(tool, bad3), 1);
    char *bad4[] = {tool, "--out", out, "--bogus", NULL};
    CHECK_EQ_INT(run_tool(tool, bad4), 2);

    /* --vocab-from copies a real tokenizer and sizes the embedding to it */
    const char *td = check_testdata("vocab/ggml-vocab-llama-spm.gguf");
    if (td) {
        char vocab[4200];
        snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-llama-spm.gguf", td);
        char *args2[] = {tool, "--out", out, "--type", "q4_0", "--layers", "1",
                         "--vocab-from", vocab, NULL};
        CHECK_EQ_INT(run_tool(tool, args2), 0);
        rn_model_t *m = NULL;
        CHECK_EQ_INT(rn_model_load(out, be_g, &m, &err), CR_OK);
        if (m) {
            CHECK_EQ_INT(rn_model_hparams(m)->n_vocab, 32000);
            cr_gguf_str_t s;
            CHECK(cr_gguf_get_str(rn_model_gguf(m), "tokenizer.ggml.model", &s) &&
                  cr_gguf_str_eq(s, "llama"));
            rn_ctx_t *c = new_ctx(m, 8, 0);
            int32_t t[2] = {1, 31999};
            CHECK(c && rn_ctx_eval(c, t, 2, 0, NULL, &err) == CR_OK);
            CHECK(c && all_finite(rn_ctx_logits(c), 32000));
            rn_ctx_destroy(&c);
        }
        rn_model_destroy(&m);
    }
    char *args3[] = {tool, "--out", out, "--vocab-only", NULL};
    CHECK_EQ_INT(run_tool(tool, args3), 0);
    cr_gguf_t *g = NULL;
    CHECK_EQ_INT(cr_gguf_open(out, &g, &err), CR_OK);
    CHECK(g && cr_gguf_tensor_count(g) == 0);
    cr_gguf_close(&g);
}

/* The built-in vocabulary has the pieces a SentencePiece tokenizer needs. */
static void test_builtin_vocab(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.vocab_only = true;
    void *b = NULL;
    size_t l = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &l, &err), CR_OK);
    cr_gguf_t *g = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(b, l, &g, &err), CR_OK);
    if (g) {
        const cr_gguf_array_t *toks = NULL, *scores = NULL, *types = NULL;
        CHECK(cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks));
        CHECK(cr_gguf_get_arr(g, "tokenizer.ggml.scores", &scores));
        CHECK(cr_gguf_get_arr(g, "tokenizer.ggml.token_type", &types));
        if (toks && scores && types) {
            CHECK_EQ_INT(toks->n, rn_synth_builtin_vocab_size());
            CHECK(toks->n >= 300 && scores->n == toks->n && types->n == toks->n);
            CHECK(cr_gguf_str_eq(toks->strs[0], "<unk>"));
            CHECK(cr_gguf_str_eq(toks->strs[1], "<s>"));
            CHECK(cr_gguf_str_eq(toks->strs[2], "</s>"));
            CHECK(cr_gguf_str_eq(toks->strs[3], "<0x00>"));
            CHECK(cr_gguf_str_eq(toks->strs[258], "<0xFF>"));
            int dups = 0;
            for (uint64_t i = 0; i < toks->n; i++)
                for (uint64_t j = i + 1; j < toks->n; j++)
                    dups += toks->strs[i].len == toks->strs[j].len &&
                            !memcmp(toks->strs[i].ptr, toks->strs[j].ptr,
                                    toks->strs[i].len);
            CHECK_EQ_INT(dups, 0);
        }
        cr_gguf_str_t s;
        CHECK(cr_gguf_get_str(g, "tokenizer.ggml.model", &s) && cr_gguf_str_eq(s, "llama"));
        uint32_t bos = 0;
        CHECK(cr_gguf_get_u32(g, "tokenizer.ggml.bos_token_id", &bos) && bos == 1);
        CHECK(cr_gguf_tensor_count(g) == 0);
    }
    cr_gguf_close(&g);
    free(b);
}

int main(void)
{
    snprintf(tmpdir_g, sizeof tmpdir_g, "/tmp/corral-test-forward-XXXXXX");
    if (!mkdtemp(tmpdir_g)) {
        perror("mkdtemp");
        return 1;
    }
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(2, &be_g, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    printf("test_forward: cpu backend, %d threads, %s kernels\n", be_cpu_threads(be_g),
           be_cpu_simd(be_g));
    test_types();
    test_determinism();
    test_variants();
    test_eval_errors();
    test_embed();
    test_corrupt();
    test_ops();
    test_builtin_vocab();
    test_tool();
    be_destroy(&be_g);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir_g);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir_g);
    return check_finish("test_forward");
}
