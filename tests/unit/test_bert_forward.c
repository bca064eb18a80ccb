/* test_bert_forward.c: the bert family (bert, nomic-bert) against an
 * independent reference.
 *
 * For each architecture and pooling (mean, CLS, last) a small random F32
 * model is written by synth.c (the code behind corral-gguf-synth --arch
 * bert|nomic-bert), loaded, and embedded with rn_ctx_embed. The check:
 * the pooled, L2-normalized embedding agrees with ref_embed below, a plain
 * double-precision implementation written from the architecture's
 * definition (llama.cpp's bert graph), reading the same weights and
 * metadata straight from the GGUF and sharing no code with forward.c,
 * model.c or the backend.
 *
 * Why cosine >= 0.9999: the engine rounds K/V, queries and attention
 * probabilities to F16 (relative error ~5e-4 each); after the LayerNorms
 * the embeddings differ from the double reference by ~1e-3 relative, and a
 * cosine of 0.9999 allows ~1.4% relative L2 error. Each structural mistake
 * (causal mask, missing position or token-type embedding, missing biases,
 * RMSNorm instead of LayerNorm, SiLU instead of GELU, adjacent rope pairs,
 * gate/up swapped, wrong pooling) is injected into the reference and must
 * drop the cosine below 0.999, which shows the check can see it. Broken
 * files are refused with errors naming the tensor or key. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "services/runner/text/tokenizer.h"
#include "tests/unit/check.h"
#include "tests/unit/forward_check.h"

#include <math.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_TOK 12
#define MAX_D 64

static be_backend_t *be_g;
static const int32_t toks_g[N_TOK] = {1, 45, 300, 7, 99, 410, 12, 12, 256, 3, 77, 2};

/* ---- the reference ---------------------------------------------------- */

typedef enum mutant {
    MUT_NONE,
    MUT_CAUSAL,       /* causal mask instead of bidirectional attention */
    MUT_NO_POS,       /* bert's position embeddings ignored */
    MUT_NO_TYPES,     /* token type 0 embedding ignored */
    MUT_NO_BIAS,      /* q/k/v/o and ffn biases ignored */
    MUT_RMSNORM,      /* RMSNorm (no centring, no bias) instead of LayerNorm */
    MUT_SILU,         /* bert: silu instead of gelu */
    MUT_ROPE_ADJ,     /* nomic-bert: adjacent rope pairs instead of NEOX */
    MUT_NO_ROPE,      /* nomic-bert: rope ignored */
    MUT_SWAP_GATE_UP, /* nomic-bert: silu(up) * gate */
    MUT_POOL_OTHER,   /* mean <-> cls pooling */
} mutant_t;

static const char *const mutant_names[] = {
    "none", "causal", "no-pos", "no-types", "no-bias", "rmsnorm", "silu",
    "rope-adjacent", "no-rope", "swap-gate-up", "pool-other",
};

typedef struct ref {
    const cr_gguf_t *g;
    char arch[16];
    bool nomic;
    int D, L, H, Hkv, hd, F, pooling;
    double eps, base;
    mutant_t mut;
    bool raw; /* the pooled state as is, not L2-normalized */
} ref_t;

static const float *tensor(const ref_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static const float *tensor(const ref_t *r, const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(r->g, name);
    if (!t || t->type != CR_TYPE_F32)
        return NULL;
    return t->data;
}

static int u32_key(const ref_t *r, const char *suffix, int def)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    uint32_t v = 0;
    return cr_gguf_get_u32(r->g, key, &v) ? (int)v : def;
}

static double f32_key(const ref_t *r, const char *suffix, double def)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    float v = 0;
    return cr_gguf_get_f32(r->g, key, &v) ? v : def;
}

static void ref_init(ref_t *r, const cr_gguf_t *g, mutant_t mut)
{
    memset(r, 0, sizeof *r);
    r->g = g;
    r->mut = mut;
    snprintf(r->arch, sizeof r->arch, "%s", cr_gguf_arch(g));
    r->nomic = !strcmp(r->arch, "nomic-bert");
    r->D = u32_key(r, "embedding_length", 0);
    r->L = u32_key(r, "block_count", 0);
    r->H = u32_key(r, "attention.head_count", 1);
    r->Hkv = u32_key(r, "attention.head_count_kv", r->H);
    r->hd = r->D / r->H;
    r->F = u32_key(r, "feed_forward_length", 0);
    r->pooling = u32_key(r, "pooling_type", 1);
    r->eps = f32_key(r, "attention.layer_norm_epsilon", 1e-12);
    r->base = f32_key(r, "rope.freq_base", 10000);
}

/* y[i] = sum_c w[i][c] x[c] (+ b[i]), w: [rows][cols] F32. */
static void linear(const float *w, const float *b, const double *x, int rows, int cols,
                   double *y)
{
    for (int i = 0; i < rows; i++) {
        double s = b ? b[i] : 0;
        for (int c = 0; c < cols; c++)
            s += (double)w[(size_t)i * cols + c] * x[c];
        y[i] = s;
    }
}

static void layernorm(const ref_t *r, double *x, const float *w, const float *b)
{
    int n = r->D;
    double mean = 0, var = 0;
    if (r->mut != MUT_RMSNORM) {
        for (int i = 0; i < n; i++)
            mean += x[i];
        mean /= n;
    }
    for (int i = 0; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean);
    double s = 1.0 / sqrt(var / n + r->eps);
    for (int i = 0; i < n; i++)
        x[i] = (x[i] - mean) * s * w[i] + (r->mut == MUT_RMSNORM ? 0 : b[i]);
}

static void rope(const ref_t *r, double *v, int pos)
{
    int half = r->hd / 2;
    for (int i = 0; i < half; i++) {
        double ang = pos * pow(r->base, -2.0 * i / r->hd);
        double c = cos(ang), s = sin(ang);
        int a = i, b = i + half;
        if (r->mut == MUT_ROPE_ADJ)
            a = 2 * i, b = 2 * i + 1;
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

static double gelu(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double silu(double x)
{
    return x / (1 + exp(-x));
}

/* The pooled, L2-normalized embedding of tok[0..n): out [D]. */
static bool ref_embed(const ref_t *r, const int32_t *tok, int n, double *out)
{
    int D = r->D, F = r->F, H = r->H, hd = r->hd, KV = r->Hkv * hd;
    bool nob = r->mut == MUT_NO_BIAS;
    double *x = calloc((size_t)n * D, sizeof *x);
    double *q = calloc((size_t)n * D, sizeof *q), *k = calloc((size_t)n * KV, sizeof *k);
    double *v = calloc((size_t)n * KV, sizeof *v), *att = calloc((size_t)n * D, sizeof *att);
    double *h1 = calloc((size_t)F, sizeof *h1), *h2 = calloc((size_t)F, sizeof *h2);
    double *o = calloc((size_t)D, sizeof *o), *sc = calloc((size_t)n, sizeof *sc);
    bool ok = x && q && k && v && att && h1 && h2 && o && sc;
    const float *emb = tensor(r, "token_embd.weight");
    const float *types = tensor(r, "token_types.weight");
    const float *pos = tensor(r, "position_embd.weight");
    ok = ok && emb && types && (r->nomic || pos);
    for (int t = 0; ok && t < n; t++) {
        for (int i = 0; i < D; i++) {
            double e = emb[(size_t)tok[t] * D + i];
            if (r->mut != MUT_NO_TYPES)
                e += types[i];
            if (!r->nomic && r->mut != MUT_NO_POS)
                e += pos[(size_t)t * D + i];
            x[(size_t)t * D + i] = e;
        }
        layernorm(r, x + (size_t)t * D, tensor(r, "token_embd_norm.weight"),
                  tensor(r, "token_embd_norm.bias"));
    }
    for (int l = 0; ok && l < r->L; l++) {
        for (int t = 0; t < n; t++) {
            const double *xt = x + (size_t)t * D;
            if (r->nomic) {
                const float *wqkv = tensor(r, "blk.%d.attn_qkv.weight", l);
                linear(wqkv, NULL, xt, D, D, q + (size_t)t * D);
                linear(wqkv + (size_t)D * D, NULL, xt, KV, D, k + (size_t)t * KV);
                linear(wqkv + (size_t)(D + KV) * D, NULL, xt, KV, D, v + (size_t)t * KV);
                for (int h = 0; h < H && r->mut != MUT_NO_ROPE; h++)
                    rope(r, q + (size_t)t * D + h * hd, t);
                for (int h = 0; h < r->Hkv && r->mut != MUT_NO_ROPE; h++)
                    rope(r, k + (size_t)t * KV + h * hd, t);
            } else {
                linear(tensor(r, "blk.%d.attn_q.weight", l),
                       nob ? NULL : tensor(r, "blk.%d.attn_q.bias", l), xt, D, D,
                       q + (size_t)t * D);
                linear(tensor(r, "blk.%d.attn_k.weight", l),
                       nob ? NULL : tensor(r, "blk.%d.attn_k.bias", l), xt, KV, D,
                       k + (size_t)t * KV);
                linear(tensor(r, "blk.%d.attn_v.weight", l),
                       nob ? NULL : tensor(r, "blk.%d.attn_v.bias", l), xt, KV, D,
                       v + (size_t)t * KV);
            }
        }
        /* attention: every query over every key (MUT_CAUSAL: keys <= t) */
        for (int t = 0; t < n; t++)
            for (int h = 0; h < H; h++) {
                int hk = h / (H / r->Hkv), nk = r->mut == MUT_CAUSAL ? t + 1 : n;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < nk; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++)
                        d += q[(size_t)t * D + h * hd + e] * k[(size_t)j * KV + hk * hd + e];
                    sc[j] = d / sqrt((double)hd);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < nk; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int e = 0; e < hd; e++) {
                    double a = 0;
                    for (int j = 0; j < nk; j++)
                        a += sc[j] / sum * v[(size_t)j * KV + hk * hd + e];
                    att[(size_t)t * D + h * hd + e] = a;
                }
            }
        for (int t = 0; t < n; t++) {
            double *xt = x + (size_t)t * D;
            const float *bo = r->nomic || nob ? NULL : tensor(r, "blk.%d.attn_output.bias", l);
            linear(tensor(r, "blk.%d.attn_output.weight", l), bo, att + (size_t)t * D, D, D,
                   o);
            for (int i = 0; i < D; i++)
                xt[i] += o[i];
            layernorm(r, xt, tensor(r, "blk.%d.attn_output_norm.weight", l),
                      tensor(r, "blk.%d.attn_output_norm.bias", l));
            if (r->nomic) {
                linear(tensor(r, "blk.%d.ffn_up.weight", l), NULL, xt, F, D, h1);
                linear(tensor(r, "blk.%d.ffn_gate.weight", l), NULL, xt, F, D, h2);
                for (int i = 0; i < F; i++)
                    h1[i] = r->mut == MUT_SWAP_GATE_UP ? silu(h1[i]) * h2[i]
                                                       : silu(h2[i]) * h1[i];
                linear(tensor(r, "blk.%d.ffn_down.weight", l), NULL, h1, D, F, o);
            } else {
                linear(tensor(r, "blk.%d.ffn_up.weight", l),
                       nob ? NULL : tensor(r, "blk.%d.ffn_up.bias", l), xt, F, D, h1);
                for (int i = 0; i < F; i++)
                    h1[i] = r->mut == MUT_SILU ? silu(h1[i]) : gelu(h1[i]);
                linear(tensor(r, "blk.%d.ffn_down.weight", l),
                       nob ? NULL : tensor(r, "blk.%d.ffn_down.bias", l), h1, D, F, o);
            }
            for (int i = 0; i < D; i++)
                xt[i] += o[i];
            layernorm(r, xt, tensor(r, "blk.%d.layer_output_norm.weight", l),
                      tensor(r, "blk.%d.layer_output_norm.bias", l));
        }
    }
    if (ok) {
        int pooling = r->pooling;
        if (r->mut == MUT_POOL_OTHER)
            pooling = pooling == 2 ? 1 : 2;
        double norm = 0;
        for (int i = 0; i < D; i++) {
            double s = 0;
            if (pooling == 2 || pooling == 4)
                s = x[i];
            else if (pooling == 3)
                s = x[(size_t)(n - 1) * D + i];
            else
                for (int t = 0; t < n; t++)
                    s += x[(size_t)t * D + i] / n;
            out[i] = s;
            norm += s * s;
        }
        for (int i = 0; i < D && !r->raw; i++)
            out[i] /= sqrt(norm);
    }
    free(x), free(q), free(k), free(v), free(att), free(h1), free(h2), free(o), free(sc);
    return ok;
}

/* ---- helpers ---------------------------------------------------------- */

static void bert_opts(const char *arch, int pooling, rn_synth_opts_t *o)
{
    rn_synth_defaults(o);
    o->arch = arch;
    o->seed = 11;
    o->n_layers = 2;
    o->n_heads = 4;
    o->n_kv_heads = 4;
    o->ffn = 96;
    o->ctx = 32;
    o->weight_std = 0.3f;
    o->rms_eps = 1e-12f;
    o->pooling_type = pooling;
}

/* Writes and loads the model; *bytes keeps the file alive (caller frees
 * after destroying the model). */
static rn_model_t *load_synth(const rn_synth_opts_t *o, void **bytes, cr_gguf_t **ref_g)
{
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    *bytes = NULL;
    cr_status_t st = rn_synth_write_memory(o, bytes, &len, &err);
    CHECK_MSG(st == CR_OK, "synth %s: %s", o->arch, err.msg);
    if (st)
        return NULL;
    cr_gguf_t *g = NULL;
    rn_model_t *m = NULL;
    st = cr_gguf_open_memory(*bytes, len, &g, &err);
    if (!st && ref_g)
        st = cr_gguf_open_memory(*bytes, len, ref_g, &err);
    if (!st)
        st = rn_model_load_gguf(&g, be_g, &m, &err);
    CHECK_MSG(st == CR_OK, "load %s: %s", o->arch, err.msg);
    cr_gguf_close(&g);
    return m;
}

/* ---- the tests -------------------------------------------------------- */

static void check_arch(const char *arch, int pooling, const mutant_t *mutants, int n_mut)
{
    rn_synth_opts_t o;
    bert_opts(arch, pooling, &o);
    void *bytes = NULL;
    cr_gguf_t *rg = NULL;
    rn_model_t *m = load_synth(&o, &bytes, &rg);
    if (!m) {
        cr_gguf_close(&rg);
        free(bytes);
        return;
    }
    const rn_hparams_t *hp = rn_model_hparams(m);
    CHECK(hp->non_causal && rn_arch_is_encoder(hp->arch_id));
    CHECK_EQ_INT(hp->pooling, pooling ? pooling : RN_POOL_MEAN);
    rn_ctx_opts_t co = {.n_ctx = 32, .n_batch = 4};
    rn_ctx_t *c = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_ctx_new(m, &co, &c, &err), CR_OK);
    float emb[MAX_D], emb2[MAX_D], raw[MAX_D];
    double want[MAX_D];
    int D = hp->dim;
    if (c && D <= MAX_D) {
        /* n_batch 4 is raised to n_ctx: all 12 tokens in one pass */
        CHECK_EQ_INT(rn_ctx_embed(c, toks_g, N_TOK, true, emb, &err), CR_OK);
        ref_t r;
        ref_init(&r, rg, MUT_NONE);
        CHECK(ref_embed(&r, toks_g, N_TOK, want));
        double cs = cosine(emb, want, D);
        printf("  %-10s pooling %d: cosine %.7f\n", arch, pooling, cs);
        CHECK_MSG(cs >= 0.9999, "%s pooling %d: cosine %.7f", arch, pooling, cs);
        for (int i = 0; i < n_mut; i++) {
            ref_init(&r, rg, mutants[i]);
            CHECK(ref_embed(&r, toks_g, N_TOK, want));
            double mc = cosine(emb, want, D);
            CHECK_MSG(mc < 0.999, "%s mutant %s not detected: cosine %.6f", arch,
                      mutant_names[mutants[i]], mc);
        }
        /* deterministic, independent of what ran before; unnormalized is
         * the same direction */
        int32_t other[3] = {5, 6, 7};
        CHECK_EQ_INT(rn_ctx_embed(c, other, 3, true, emb2, &err), CR_OK);
        CHECK_EQ_INT(rn_ctx_embed(c, toks_g, N_TOK, true, emb2, &err), CR_OK);
        CHECK(!memcmp(emb, emb2, (size_t)D * sizeof(float)));
        CHECK_EQ_INT(rn_ctx_embed(c, toks_g, N_TOK, false, raw, &err), CR_OK);
        double nn = 0;
        for (int i = 0; i < D; i++)
            nn += (double)raw[i] * raw[i];
        CHECK(nn > 0 && fabs(nn - 1) > 1e-3);
        for (int i = 0; i < D; i++)
            CHECK_NEAR(raw[i] / sqrt(nn), emb[i], 1e-5);
        /* one token works (a sequence of one attends to itself) */
        CHECK_EQ_INT(rn_ctx_embed(c, toks_g, 1, true, emb2, &err), CR_OK);
        CHECK(rn_ctx_n_past(c) == 1);
        /* no logits: eval is refused, saying why */
        float logits[1];
        cr_status_t st = rn_ctx_eval(c, toks_g, 2, 0, NULL, &err);
        CHECK(st == CR_E_UNSUPPORTED && strstr(err.msg, "embedding-only"));
        CHECK_EQ_INT(rn_ctx_eval(c, toks_g, 1, 0, logits, &err), CR_E_UNSUPPORTED);
        /* bad input */
        int32_t bad[2] = {1, 100000};
        CHECK_EQ_INT(rn_ctx_embed(c, bad, 2, true, emb2, &err), CR_E_INVALID);
        CHECK_EQ_INT(rn_ctx_embed(c, toks_g, 0, true, emb2, &err), CR_E_INVALID);
        int32_t longer[33] = {0};
        CHECK_EQ_INT(rn_ctx_embed(c, longer, 33, true, emb2, &err), CR_E_TOO_LARGE);
    }
    rn_ctx_destroy(&c);
    /* bert's learned positions bound the input even in a larger context */
    if (!strcmp(arch, "bert")) {
        rn_ctx_opts_t big = {.n_ctx = 64};
        CHECK_EQ_INT(rn_ctx_new(m, &big, &c, &err), CR_OK);
        int32_t longer[40] = {0};
        cr_status_t st = c ? rn_ctx_embed(c, longer, 40, true, emb2, &err) : CR_E_INTERNAL;
        CHECK(st == CR_E_TOO_LARGE && strstr(err.msg, "learned positions"));
        rn_ctx_destroy(&c);
    }
    rn_model_destroy(&m);
    cr_gguf_close(&rg);
    free(bytes);
}

static void test_archs(void)
{
    static const mutant_t bert_mut[] = {MUT_CAUSAL, MUT_NO_POS, MUT_NO_TYPES, MUT_NO_BIAS,
                                        MUT_RMSNORM, MUT_SILU, MUT_POOL_OTHER};
    static const mutant_t nomic_mut[] = {MUT_CAUSAL, MUT_NO_TYPES, MUT_RMSNORM,
                                         MUT_ROPE_ADJ, MUT_NO_ROPE, MUT_SWAP_GATE_UP,
                                         MUT_POOL_OTHER};
    check_arch("bert", 1, bert_mut, (int)CR_ARRAY_LEN(bert_mut));
    check_arch("bert", 2, bert_mut, (int)CR_ARRAY_LEN(bert_mut));
    check_arch("bert", 3, NULL, 0);
    check_arch("bert", 0, NULL, 0); /* no pooling key: mean */
    check_arch("nomic-bert", 1, nomic_mut, (int)CR_ARRAY_LEN(nomic_mut));
    check_arch("nomic-bert", 2, NULL, 0);
    check_arch("nomic-bert", 3, NULL, 0);
}

/* The synth model's tokenizer is WordPiece: [CLS] words [SEP]. */
static void test_tokenizer(void)
{
    rn_synth_opts_t o;
    bert_opts("bert", 1, &o);
    o.vocab_only = true;
    void *bytes = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    cr_status_t st = rn_synth_write_memory(&o, &bytes, &len, &err);
    if (!st)
        st = cr_gguf_open_memory(bytes, len, &g, &err);
    if (!st)
        st = rn_tokenizer_load(g, &tok, &err);
    CHECK_MSG(st == CR_OK, "bert vocab: %s", err.msg);
    if (tok) {
        CHECK(rn_tokenizer_kind(tok) == RN_TOK_WPM);
        int32_t ids[8];
        size_t n = 0;
        st = rn_tokenize(tok, "Hello World", 11, true, false, ids, 8, &n, &err);
        int32_t hello = rn_tokenizer_find(tok, "\xe2\x96\x81hello", 8);
        int32_t world = rn_tokenizer_find(tok, "\xe2\x96\x81world", 8);
        CHECK(st == CR_OK && n == 4 && ids[0] == 1 && ids[1] == hello && ids[2] == world &&
              ids[3] == 2 && hello > 0 && world > 0);
    }
    rn_tokenizer_destroy(&tok);
    cr_gguf_close(&g);
    free(bytes);
}

/* Rebuilds the synth model of arch with one tensor dropped and/or one u32
 * or bool key set, and loads it. */
static cr_status_t load_edited(const char *arch, const char *skip_tensor,
                               const char *u32_key, uint32_t u32_val, const char *bool_key,
                               cr_err_t *err)
{
    rn_synth_opts_t o;
    bert_opts(arch, 1, &o);
    void *src = NULL, *out = NULL;
    size_t len = 0, out_len = 0;
    cr_err_t e2;
    cr_err_clear(&e2);
    cr_gguf_t *g = NULL;
    if (rn_synth_write_memory(&o, &src, &len, &e2) ||
        cr_gguf_open_memory(src, len, &g, &e2)) {
        free(src);
        return CR_E_INTERNAL;
    }
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_status_t st = w ? cr_gguf_writer_copy_prefix(w, g, "", &e2) : CR_E_NOMEM;
    if (!st && u32_key) {
        cr_gguf_writer_remove(w, u32_key);
        st = cr_gguf_writer_add_u32(w, u32_key, u32_val, &e2);
    }
    if (!st && bool_key) {
        cr_gguf_writer_remove(w, bool_key);
        st = cr_gguf_writer_add_bool(w, bool_key, true, &e2);
    }
    for (size_t i = 0; !st && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (skip_tensor && !strcmp(t->name, skip_tensor))
            continue;
        st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data,
                                       NULL, &e2);
    }
    if (!st)
        st = cr_gguf_writer_write_memory(w, &out, &out_len, &e2);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
    free(src);
    if (st) {
        fprintf(stderr, "rebuild failed: %s\n", e2.msg);
        free(out);
        return CR_E_INTERNAL;
    }
    rn_model_t *m = NULL;
    st = cr_gguf_open_memory(out, out_len, &g, err);
    if (!st)
        st = rn_model_load_gguf(&g, be_g, &m, err);
    rn_model_destroy(&m);
    free(out);
    return st;
}

static void test_corrupt(void)
{
    static const struct {
        const char *name, *arch, *skip, *u32_key;
        uint32_t u32_val;
        const char *bool_key;
        cr_status_t want;
        const char *msg;
    } cases[] = {
        {"no position_embd", "bert", "position_embd.weight", NULL, 0, NULL, CR_E_CORRUPT,
         "position_embd.weight"},
        {"no embd norm bias", "bert", "token_embd_norm.bias", NULL, 0, NULL, CR_E_CORRUPT,
         "token_embd_norm.bias"},
        {"no out norm", "bert", "blk.1.attn_output_norm.weight", NULL, 0, NULL,
         CR_E_CORRUPT, "blk.1.attn_output_norm.weight"},
        {"no layer norm bias", "nomic-bert", "blk.0.layer_output_norm.bias", NULL, 0, NULL,
         CR_E_CORRUPT, "blk.0.layer_output_norm.bias"},
        {"no ffn_gate", "nomic-bert", "blk.1.ffn_gate.weight", NULL, 0, NULL, CR_E_CORRUPT,
         "blk.1.ffn_gate.weight"},
        {"no attn_qkv", "nomic-bert", "blk.0.attn_qkv.weight", NULL, 0, NULL, CR_E_CORRUPT,
         "blk.0.attn_q.weight"},
        {"one bias missing", "bert", "blk.0.attn_k.bias", NULL, 0, NULL, CR_E_CORRUPT,
         "biases"},
        {"rank without a head", "bert", NULL, "bert.pooling_type", 4, NULL, CR_E_CORRUPT,
         "cls.weight"},
        {"rank on nomic-bert", "nomic-bert", NULL, "nomic-bert.pooling_type", 4, NULL,
         CR_E_UNSUPPORTED, "bert only"},
        {"pooling out of range", "bert", NULL, "bert.pooling_type", 9, NULL, CR_E_CORRUPT,
         "bert.pooling_type"},
        {"causal", "nomic-bert", NULL, NULL, 0, "nomic-bert.attention.causal",
         CR_E_UNSUPPORTED, "causal"},
        {"positions past limit", "bert", NULL, "bert.context_length", 64, NULL,
         CR_E_CORRUPT, "position_embd.weight"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = load_edited(cases[i].arch, cases[i].skip, cases[i].u32_key,
                                     cases[i].u32_val, cases[i].bool_key, &err);
        CHECK_MSG(st == cases[i].want && strstr(err.msg, cases[i].msg),
                  "corrupt case '%s': status %s, msg \"%s\"", cases[i].name,
                  cr_status_str(st), err.msg);
    }
    /* optional pieces may be absent: token types, biases of bert */
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(load_edited("bert", "token_types.weight", NULL, 0, NULL, &err), CR_OK);
    CHECK_EQ_INT(load_edited("bert", "blk.0.ffn_up.bias", NULL, 0, NULL, &err), CR_OK);
}

/* ---- rerank: the classifier head --------------------------------------- */

/* Why 6e-3: the score is w_out . tanh(Wcls x0 + b) + b_out over D = 64.
 * The engine's x0 differs from the double reference by ~1e-3 relative
 * (F16 K/V, queries and probabilities: see the top), |x0| ~ 8, and the
 * 64-term sums pass that on as ~1e-3 absolute error (measured: at most
 * 2e-3 over the three heads). Each mistake below must move the score by
 * more than 4 x the tolerance (the smallest, cls.bias ignored, moves it by
 * ~0.05). */
#define RANK_TOL 6e-3

typedef enum head_mut {
    HM_NONE,
    HM_NO_TANH,     /* the cls layer without its tanh */
    HM_NO_CLS_BIAS, /* cls.bias ignored */
    HM_NO_OUT_BIAS, /* cls.output.bias ignored */
    HM_LAST,        /* the last position instead of the first */
    HM_MEAN,        /* the mean of all positions instead of the first */
} head_mut_t;

static const char *const head_mut_names[] = {"none", "no-tanh", "no-cls-bias",
                                             "no-out-bias", "last", "mean"};

/* The head over the reference's hidden states: out [D]; returns how many
 * outputs (1 with cls.output.weight, else D), 0 on error. */
static int ref_rank(const cr_gguf_t *g, const int32_t *tok, int n, head_mut_t hm,
                    double *out)
{
    ref_t r;
    ref_init(&r, g, MUT_NONE);
    r.raw = true;
    r.pooling = hm == HM_LAST ? 3 : hm == HM_MEAN ? 1 : 2;
    double h[MAX_D], t[MAX_D];
    if (r.D > MAX_D || !ref_embed(&r, tok, n, h))
        return 0;
    int D = r.D, n_out = D;
    const float *cls = tensor(&r, "cls.weight"), *cls_b = tensor(&r, "cls.bias");
    const float *wo = tensor(&r, "cls.output.weight");
    const float *bo = tensor(&r, "cls.output.bias");
    if (cls) {
        linear(cls, hm == HM_NO_CLS_BIAS ? NULL : cls_b, h, D, D, t);
        for (int i = 0; i < D; i++)
            h[i] = hm == HM_NO_TANH ? t[i] : tanh(t[i]);
    }
    if (wo) {
        linear(wo, hm == HM_NO_OUT_BIAS ? NULL : bo, h, 1, D, t);
        h[0] = t[0];
        n_out = 1;
    }
    memcpy(out, h, (size_t)n_out * sizeof *out);
    return n_out;
}

/* The GGUF at src without the tensors named in skip (NULL-ended); caller
 * frees. */
static void *rebuild_without(const void *src, size_t len, const char *const *skip,
                             size_t *out_len)
{
    cr_err_t e;
    cr_gguf_t *g = NULL;
    void *out = NULL;
    if (cr_gguf_open_memory(src, len, &g, &e))
        return NULL;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_status_t st = w ? cr_gguf_writer_copy_prefix(w, g, "", &e) : CR_E_NOMEM;
    for (size_t i = 0; !st && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        bool drop = false;
        for (const char *const *k = skip; *k; k++)
            drop |= !strcmp(t->name, *k);
        if (!drop)
            st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data,
                                           NULL, &e);
    }
    if (!st)
        st = cr_gguf_writer_write_memory(w, &out, out_len, &e);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
    return st ? NULL : out;
}

/* Scores the model in bytes with rn_ctx_rank_seq and compares each output
 * with ref_rank; returns the first output (NAN on failure). */
static double rank_vs_ref(const void *bytes, size_t len, const char *what, int want_n_out)
{
    cr_err_t err;
    cr_err_clear(&err);
    cr_gguf_t *g = NULL, *rg = NULL;
    rn_model_t *m = NULL;
    rn_ctx_t *c = NULL;
    double first = NAN;
    cr_status_t st = cr_gguf_open_memory(bytes, len, &g, &err);
    st = st ? st : cr_gguf_open_memory(bytes, len, &rg, &err);
    st = st ? st : rn_model_load_gguf(&g, be_g, &m, &err);
    rn_ctx_opts_t co = {.n_ctx = 32};
    st = st ? st : rn_ctx_new(m, &co, &c, &err);
    CHECK_MSG(st == CR_OK, "%s: %s", what, err.msg);
    float got[MAX_D];
    double want[MAX_D];
    if (!st) {
        CHECK_EQ_INT(rn_ctx_rank_n_out(c), want_n_out);
        CHECK_EQ_INT(rn_ctx_rank_seq(c, 0, toks_g, N_TOK, got, &err), CR_OK);
        int n_out = ref_rank(rg, toks_g, N_TOK, HM_NONE, want);
        CHECK_EQ_INT(n_out, want_n_out);
        double diff = 0;
        for (int i = 0; i < n_out && i < MAX_D; i++)
            diff = fmax(diff, fabs(got[i] - want[i]));
        printf("  rank %-18s score %+.6f, reference %+.6f, max diff %.2g\n", what, got[0],
               want[0], diff);
        CHECK_MSG(diff <= RANK_TOL, "%s: differs from the reference by %g", what, diff);
        first = got[0];
    }
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    cr_gguf_close(&g);
    cr_gguf_close(&rg);
    return first;
}

static void test_rank(void)
{
    rn_synth_opts_t o;
    bert_opts("bert", 4, &o);
    void *bytes = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    if (rn_synth_write_memory(&o, &bytes, &len, &err)) {
        CHECK_MSG(false, "synth reranker: %s", err.msg);
        return;
    }
    double score = rank_vs_ref(bytes, len, "full head", 1);

    /* every part of the head matters: each mistake moves the score */
    cr_gguf_t *rg = NULL;
    if (!cr_gguf_open_memory(bytes, len, &rg, &err)) {
        for (int hm = HM_NO_TANH; hm <= HM_MEAN; hm++) {
            double want = 0;
            CHECK(ref_rank(rg, toks_g, N_TOK, (head_mut_t)hm, &want) == 1);
            printf("  rank mutant %-12s moves the score by %.3f\n", head_mut_names[hm],
                   fabs(want - score));
            CHECK_MSG(fabs(want - score) > 4 * RANK_TOL, "head mutant %s not detected: "
                      "%.6f vs %.6f", head_mut_names[hm], want, score);
        }
        cr_gguf_close(&rg);
    }

    /* the engine's other paths on a reranker */
    void *mb = NULL;
    rn_model_t *m = load_synth(&o, &mb, NULL);
    rn_ctx_t *c = NULL;
    rn_ctx_opts_t co = {.n_ctx = 32};
    if (m && !rn_ctx_new(m, &co, &c, &err)) {
        CHECK_EQ_INT(rn_model_hparams(m)->pooling, RN_POOL_RANK);
        CHECK_EQ_INT(rn_model_hparams(m)->n_cls_out, 1);
        /* another pair scores differently; the same pair the same again */
        float a = 0, b = 0, again = 0;
        int32_t other[5] = {1, 45, 2, 300, 2};
        CHECK_EQ_INT(rn_ctx_rank_seq(c, 0, toks_g, N_TOK, &a, &err), CR_OK);
        CHECK_EQ_INT(rn_ctx_rank_seq(c, 0, other, 5, &b, &err), CR_OK);
        CHECK_EQ_INT(rn_ctx_rank_seq(c, 0, toks_g, N_TOK, &again, &err), CR_OK);
        CHECK(a != b && a == again);
        /* an embedding of a reranker is its first position's state */
        float emb[MAX_D];
        double want[MAX_D];
        ref_t r;
        cr_gguf_t *g2 = NULL;
        if (!cr_gguf_open_memory(mb, len, &g2, &err)) {
            ref_init(&r, g2, MUT_NONE);
            r.pooling = 2;
            CHECK_EQ_INT(rn_ctx_embed(c, toks_g, N_TOK, true, emb, &err), CR_OK);
            CHECK(ref_embed(&r, toks_g, N_TOK, want));
            CHECK(cosine(emb, want, rn_model_hparams(m)->dim) >= 0.9999);
            cr_gguf_close(&g2);
        }
        /* bad input */
        int32_t bad[2] = {1, 100000};
        CHECK_EQ_INT(rn_ctx_rank_seq(c, 0, bad, 2, &a, &err), CR_E_INVALID);
        CHECK_EQ_INT(rn_ctx_rank_seq(c, 0, toks_g, 0, &a, &err), CR_E_INVALID);
        int32_t longer[33] = {0};
        CHECK_EQ_INT(rn_ctx_rank_seq(c, 0, longer, 33, &a, &err), CR_E_TOO_LARGE);
    }
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    free(mb);

    /* heads with one matrix (both optional in llama.cpp) */
    static const char *const no_cls[] = {"cls.weight", "cls.bias", NULL};
    static const char *const no_out[] = {"cls.output.weight", "cls.output.bias", NULL};
    size_t l2 = 0;
    void *b2 = rebuild_without(bytes, len, no_cls, &l2);
    CHECK(b2 != NULL);
    if (b2)
        rank_vs_ref(b2, l2, "cls.output only", 1);
    free(b2);
    b2 = rebuild_without(bytes, len, no_out, &l2);
    CHECK(b2 != NULL);
    if (b2)
        rank_vs_ref(b2, l2, "cls only", o.dim);
    free(b2);
    free(bytes);

    /* a model that is not a reranker says so */
    bert_opts("bert", 2, &o);
    m = load_synth(&o, &mb, NULL);
    if (m && !rn_ctx_new(m, &co, &c, &err)) {
        float x;
        CHECK_EQ_INT(rn_ctx_rank_n_out(c), 0);
        cr_status_t st = rn_ctx_rank_seq(c, 0, toks_g, N_TOK, &x, &err);
        CHECK(st == CR_E_UNSUPPORTED && strstr(err.msg, "not a reranker"));
    }
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    free(mb);
}

/* corral-gguf-synth --arch bert|nomic-bert --pooling writes the bytes
 * synth.c does. */
static void test_tool(void)
{
    const char *bd = getenv("CORRAL_BUILD_DIR");
    char tool[1024];
    snprintf(tool, sizeof tool, "%s/bin/corral-gguf-synth", bd ? bd : ".");
    if (!bd || access(tool, X_OK) != 0) {
        printf("test_bert_forward: %s not built; tool checks skipped\n", tool);
        return;
    }
    char dir[] = "/tmp/corral-test-bert-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    static const struct {
        const char *arch, *pooling;
        int pooling_type;
    } cases[] = {{"bert", "cls", 2}, {"nomic-bert", "last", 3}, {"bert", "rank", 4}};
    char out[128], cmd[2048];
    snprintf(out, sizeof out, "%s/m.gguf", dir);
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        snprintf(cmd, sizeof cmd, "'%s' --out '%s' --arch %s --pooling %s --seed 11 "
                 "--layers 2 --heads 4 --kv-heads 4 --ffn 96 --ctx 32 --std 0.3", tool,
                 out, cases[i].arch, cases[i].pooling);
        CHECK_EQ_INT(system(cmd), 0);
        rn_synth_opts_t o;
        bert_opts(cases[i].arch, cases[i].pooling_type, &o);
        o.rms_eps = 1e-5f; /* the tool's default epsilon */
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
        CHECK_MSG(got == l && b && !memcmp(fb, b, l), "%s: tool bytes differ",
                  cases[i].arch);
        free(fb);
        free(b);
    }
    /* a pooling the tool does not know is a usage error (2) */
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --arch bert --pooling max 2>/dev/null",
             tool, out);
    int rc = system(cmd);
    CHECK_EQ_INT(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 2);
    unlink(out);
    rmdir(dir);
}

/* The ext ops the bert family adds: layernorm and gelu. */
static void test_ext_ops(void)
{
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    CHECK(ext && ext->layernorm && ext->gelu);
    if (!ext || !ext->layernorm || !ext->gelu)
        return;
    float x[2][5] = {{1, 2, 3, 4, 10}, {-1, -1, -1, -1, -1}}, y[2][5];
    float wv[5] = {1, 2, 0.5f, -1, 1}, bv[5] = {0, 1, -1, 0.5f, 2};
    be_weight_t w = {.name = "w", .type = CR_TYPE_F32, .n_cols = 5, .n_rows = 1,
                     .row_bytes = sizeof wv, .data = wv};
    be_weight_t b = {.name = "b", .type = CR_TYPE_F32, .n_cols = 5, .n_rows = 1,
                     .row_bytes = sizeof bv, .data = bv};
    ext->layernorm(be_g, &y[0][0], &x[0][0], &w, &b, 2, 5, 1e-5f);
    double mean = 4, var = (9 + 4 + 1 + 0 + 36) / 5.0;
    for (int i = 0; i < 5; i++)
        CHECK_NEAR(y[0][i], (x[0][i] - mean) / sqrt(var + 1e-5) * wv[i] + bv[i], 1e-5);
    /* a constant row normalizes to the bias */
    for (int i = 0; i < 5; i++)
        CHECK_NEAR(y[1][i], bv[i], 1e-6);
    /* without bias, in place */
    ext->layernorm(be_g, &x[0][0], &x[0][0], &w, NULL, 1, 5, 1e-5f);
    CHECK_NEAR(x[0][4], 6 / sqrt(var + 1e-5), 1e-5);
    float g[4] = {-3, 0, 0.5f, 4}, gy[4];
    ext->gelu(be_g, gy, g, 4);
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(gy[i], gelu(g[i]), 1e-6);
}

int main(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(2, &be_g, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    test_ext_ops();
    test_tokenizer();
    test_archs();
    test_corrupt();
    test_rank();
    test_tool();
    be_destroy(&be_g);
    return check_finish("test_bert_forward");
}
