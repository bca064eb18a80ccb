/* test_quant_forward.c: the forward pass on quantized synthetic models
 * against the same model in F32.
 *
 * tools/synth/synth.c draws the same float weights for every storage
 * type (one seeded stream per tensor), so a model written in F32 and in a
 * quantized type differ only by quantization. Checks: a Q4_K_M-like file
 * (Q4_K matrices; output, attn_v and ffn_down in Q6_K) loads with those
 * types in place and its logits stay close to F32's at every position
 * (cosine similarity and top-1 agreement); every other new type too, with a
 * bound per type, the table formats (IQ4_NL, IQ4_XS, MXFP4) and the 2- and
 * 3-bit I-quants included. The kernels themselves are tested in
 * test_quant.c, test_quant_nl.c and test_quant_iq.c. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"

#include <sys/wait.h>
#include <unistd.h>

static be_backend_t *be_g;

static const int32_t toks_g[] = {1, 300, 17, 250, 42, 99, 260, 3, 398, 7, 123, 321, 55, 8};
#define N_TOKS ((int)CR_ARRAY_LEN(toks_g))

typedef struct run {
    void *bytes;
    size_t len;
    rn_model_t *m;
    float *logits; /* [N_TOKS][n_vocab] */
    int n_vocab;
} run_t;

static void run_free(run_t *r)
{
    rn_model_destroy(&r->m);
    free(r->bytes);
    free(r->logits);
    memset(r, 0, sizeof *r);
}

/* Writes the model in memory, loads it and evaluates toks_g. */
static bool run_model(const rn_synth_opts_t *o, run_t *r)
{
    memset(r, 0, sizeof *r);
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = rn_synth_write_memory(o, &r->bytes, &r->len, &err);
    CHECK_MSG(st == CR_OK, "synth: %s", err.msg);
    if (st)
        return false;
    cr_gguf_t *g = NULL;
    st = cr_gguf_open_memory(r->bytes, r->len, &g, &err);
    if (!st)
        st = rn_model_load_gguf(&g, be_g, &r->m, &err);
    CHECK_MSG(st == CR_OK, "load: %s", err.msg);
    if (st)
        return false;
    rn_ctx_t *c = NULL;
    rn_ctx_opts_t co = {.n_ctx = 64, .n_batch = 0};
    st = rn_ctx_new(r->m, &co, &c, &err);
    CHECK_MSG(st == CR_OK, "ctx: %s", err.msg);
    if (st)
        return false;
    r->n_vocab = rn_model_hparams(r->m)->n_vocab;
    r->logits = malloc((size_t)N_TOKS * (size_t)r->n_vocab * sizeof(float));
    st = r->logits ? rn_ctx_eval(c, toks_g, N_TOKS, 0, r->logits, &err) : CR_E_NOMEM;
    CHECK_MSG(st == CR_OK, "eval: %s", err.msg);
    rn_ctx_destroy(&c);
    return st == CR_OK;
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Minimum over positions of the logits' cosine similarity, and how many
 * positions pick the same top token. */
static double compare(const run_t *ref, const run_t *q, int *same_top)
{
    double min_cos = 1;
    *same_top = 0;
    for (int t = 0; t < N_TOKS; t++) {
        const float *a = ref->logits + (size_t)t * ref->n_vocab;
        const float *b = q->logits + (size_t)t * q->n_vocab;
        double c = cosine(a, b, ref->n_vocab);
        min_cos = c < min_cos ? c : min_cos;
        *same_top += argmax(a, ref->n_vocab) == argmax(b, ref->n_vocab);
    }
    return min_cos;
}

static void base_opts(rn_synth_opts_t *o)
{
    rn_synth_defaults(o);
    o->seed = 7;
    o->dim = 256; /* K-quant rows are whole super-blocks of 256 */
    o->ffn = 512;
    o->n_heads = 4;
    o->n_kv_heads = 2;
    o->n_layers = 2;
}

/* Tolerances. The synthetic weights are N(0, 0.02) noise, so the logits are
 * a long chain of random projections and quantization noise is not averaged
 * away by structure; the bounds are set from the measured values (printed)
 * with margin, ordered by the formats' relative rms weight error (see
 * test_quant's round trips): Q8_0 ~0.004, Q6_K ~0.02, Q5_K/Q5_1 ~0.04,
 * Q4_K/Q4_1 ~0.08, Q3_K ~0.18, Q2_K ~0.25. */
static void test_q4_k_m(const run_t *ref)
{
    rn_synth_opts_t o;
    base_opts(&o);
    o.type = CR_TYPE_Q4_K;
    o.mix = true;
    o.mix_type = CR_TYPE_Q6_K;
    run_t q;
    if (run_model(&o, &q)) {
        const rn_weights_t *w = rn_model_weights(q.m);
        CHECK(w->token_embd.type == CR_TYPE_Q4_K);
        CHECK(w->output.type == CR_TYPE_Q6_K);
        CHECK(w->layers[0].wq.type == CR_TYPE_Q4_K);
        CHECK(w->layers[1].wv.type == CR_TYPE_Q6_K);
        CHECK(w->layers[1].w_down.type == CR_TYPE_Q6_K);
        CHECK(w->layers[1].w_up.type == CR_TYPE_Q4_K);
        int same = 0;
        double c = compare(ref, &q, &same);
        printf("test_quant_forward: Q4_K_M vs F32: min cosine %.5f, top-1 %d/%d\n", c,
               same, N_TOKS);
        /* measured 0.9895, 12/14 (plain Q4_K: 0.985) */
        CHECK_MSG(c >= 0.98, "Q4_K_M: min cosine %g < 0.98", c);
        CHECK_MSG(same >= N_TOKS - 3, "Q4_K_M: top-1 agrees at %d/%d positions", same,
                  N_TOKS);
    }
    run_free(&q);
}

static void test_each_type(const run_t *ref)
{
    static const struct {
        cr_type_t t;
        double min_cos;
    } cases[] = {
        /* measured (AVX2 and scalar alike): 0.99986, 0.9988, 0.9963, 0.9949,
         * 0.9928, 0.9846, 0.9793, 0.942, 0.768 */
        {CR_TYPE_Q8_0, 0.9995}, {CR_TYPE_Q6_K, 0.997}, {CR_TYPE_Q5_K, 0.99},
        {CR_TYPE_Q5_1, 0.99},   {CR_TYPE_Q5_0, 0.985}, {CR_TYPE_Q4_K, 0.975},
        {CR_TYPE_Q4_1, 0.97},   {CR_TYPE_Q3_K, 0.9},   {CR_TYPE_Q2_K, 0.6},
        /* the table formats (quant_nl.c; rms weight error on N(0, 1)
         * rows with outliers ~0.10, 0.10, 0.14, test_quant_nl): measured
         * 0.9831, 0.9826, 0.9633, scalar and AVX2 alike; bounds as for
         * Q4_K (0.01 below), MXFP4's coarser top steps give it 0.94 */
        {CR_TYPE_IQ4_NL, 0.973}, {CR_TYPE_IQ4_XS, 0.972}, {CR_TYPE_MXFP4, 0.94},
        /* the 2- and 3-bit I-quants (quant_iq.c; rms weight error on
         * N(0, 1) rows 0.33, 0.29, 0.24, 0.18, 0.13, test_quant_iq):
         * measured 0.7015, 0.7925, 0.8010, 0.9026, 0.9527, scalar, AVX2 and
         * AVX-512 alike (same bits); bounds 0.05 to 0.1 below, as Q2_K's.
         * IQ1_S (1.56 bits, rms weight error 0.46): 0.4981, bound 0.40 (a
         * wrong sign, shift or scale drops it towards 0) */
        {CR_TYPE_IQ2_XXS, 0.62}, {CR_TYPE_IQ2_XS, 0.69}, {CR_TYPE_IQ2_S, 0.70},
        {CR_TYPE_IQ3_XXS, 0.85}, {CR_TYPE_IQ3_S, 0.90}, {CR_TYPE_IQ1_S, 0.40},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        rn_synth_opts_t o;
        base_opts(&o);
        o.type = cases[i].t;
        run_t q;
        if (run_model(&o, &q)) {
            CHECK(rn_model_weights(q.m)->layers[0].wq.type == cases[i].t);
            int same = 0;
            double c = compare(ref, &q, &same);
            printf("test_quant_forward: %-4s vs F32: min cosine %.5f (bound %.4f), "
                   "top-1 %d/%d\n", cr_type_info(cases[i].t)->name, c, cases[i].min_cos,
                   same, N_TOKS);
            CHECK_MSG(c >= cases[i].min_cos, "%s: min cosine %g < %g",
                      cr_type_info(cases[i].t)->name, c, cases[i].min_cos);
        }
        run_free(&q);
    }
}

/* An MXFP4 model whose last tensor's data is one byte short is refused by
 * the loader naming that tensor, not read past its end. */
static void test_mxfp4_truncated(void)
{
    rn_synth_opts_t o;
    base_opts(&o);
    o.type = CR_TYPE_MXFP4;
    void *bytes = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &bytes, &len, &err), CR_OK);
    cr_gguf_t *g = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &g, &err), CR_OK);
    if (!g) {
        free(bytes);
        return;
    }
    const cr_gguf_tensor_t *last = NULL;
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (!last || t->offset > last->offset)
            last = t;
    }
    char name[sizeof last->name];
    snprintf(name, sizeof name, "%s", last->name);
    size_t end = (size_t)((const uint8_t *)last->data - (const uint8_t *)bytes) + last->size_bytes;
    bool is_mx = last->type == CR_TYPE_MXFP4;
    cr_gguf_close(&g);
    CHECK_MSG(is_mx, "last tensor '%s' is not MXFP4", name);
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, end - 1, &g, &err), CR_E_TRUNCATED);
    CHECK_MSG(strstr(err.msg, name) != NULL, "truncated MXFP4 model: %s", err.msg);
    CHECK(g == NULL);
    free(bytes);
}

/* corral-gguf-synth --type takes any type name (case-insensitive): an
 * IQ4_XS file from the tool is the library's bytes; a type without weight
 * kernels is refused (exit 1), an unknown name too (exit 2). */
static void test_tool_types(void)
{
    const char *bd = getenv("CORRAL_BUILD_DIR");
    char tool[1024];
    snprintf(tool, sizeof tool, "%s/bin/corral-gguf-synth", bd ? bd : ".");
    if (!bd || access(tool, X_OK) != 0) {
        printf("test_quant_forward: %s not built; tool checks skipped\n", tool);
        return;
    }
    char dir[] = "/tmp/corral-test-qtypes-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    char out[128], cmd[2048];
    snprintf(out, sizeof out, "%s/iq4_xs.gguf", dir);
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --type Iq4_Xs --dim 256 --ffn 512 --seed 7",
             tool, out);
    CHECK_EQ_INT(system(cmd), 0);
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.seed = 7;
    o.dim = 256;
    o.ffn = 512;
    o.type = CR_TYPE_IQ4_XS;
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
    CHECK_MSG(got == l && b && !memcmp(fb, b, l), "tool bytes differ (%zu vs %zu)", got, l);
    free(fb);
    free(b);
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --type q8_k --dim 256 --ffn 512 2>/dev/null",
             tool, out);
    int rc = system(cmd);
    CHECK_EQ_INT(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 1);
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --type iq9_zz 2>/dev/null", tool, out);
    rc = system(cmd);
    CHECK_EQ_INT(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 2);
    unlink(out);
    rmdir(dir);
}

/* synth refuses rows that are not whole blocks, for the mix type too. */
static void test_synth_opts(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.type = CR_TYPE_Q4_K; /* dim 64 */
    void *b = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &len, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "Q4_K") != NULL);
    o.type = CR_TYPE_Q8_0;
    o.mix = true;
    o.mix_type = CR_TYPE_Q6_K;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &len, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "Q6_K") != NULL);
    o.mix_type = CR_TYPE_Q8_1; /* activation-only: no weight kernels */
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &len, &err), CR_E_INVALID);
    o.mix_type = CR_TYPE_Q5_0;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &len, &err), CR_OK);
    free(b);
}

int main(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(2, &be_g, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    printf("test_quant_forward: %s kernels\n", be_cpu_simd(be_g));
    rn_synth_opts_t o;
    base_opts(&o);
    run_t ref;
    if (run_model(&o, &ref)) {
        test_q4_k_m(&ref);
        test_each_type(&ref);
    }
    run_free(&ref);
    test_synth_opts();
    test_mxfp4_truncated();
    test_tool_types();
    be_destroy(&be_g);
    return check_finish("test_quant_forward");
}
