/* test_lora: LoRA adapters applied at run time (services/runner/model/
 * lora.c, forward.c steps 3L-11L) against models whose weights the test
 * merges by hand, W' = W + sum of (alpha / r) B A in double, from the A and
 * B it reads back out of the adapter files (written by tools/synth):
 * - one adapter on every projection kind: the logits match the merged
 *   model's (cosine >= 0.99999: both are F32 sums of the same products in
 *   another order), and differ from the base's (so the adapter is applied);
 * - two adapters at once, both on one weight too;
 * - F16, BF16 and Q8_0 adapters against the model merged with their
 *   rounded values (looser: the matmul rounds activations to the
 *   adapter's dot format);
 * - a Q8_0 base: the runtime adapter on it against the F32 merged model,
 *   cosine >= 0.9995 (what separates them is Q8_0's rounding of the base
 *   weights and of the activations it multiplies; measured 0.99994 here),
 *   and closer than the Q8_0 base without the adapter (0.975);
 * - refusals (lib/lora.h): another architecture, adapter type, a target
 *   LoRA is not applied to, shapes of another model, a missing lora_b, a
 *   file that is not an adapter;
 * - the engine's load message: adapters loaded with the model, a bad one
 *   failing the load; the memory the scheduler's estimate adds for them
 *   (sch_estimate_add_adapter) equals what the runner allocates more. */
#include "lib/prelude.h"

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "lib/lora.h"
#include "services/runner/model/forward.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/model/lora.h"
#include "services/scheduler/estimate.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"
#include "tools/synth/synth.h"

#include <math.h>
#include <unistd.h>

static char dir_g[64];

static const char *path_of(const char *name)
{
    static char buf[8][128];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 128, "%s/%s", dir_g, name);
    return p;
}

static double cos_f(const float *a, const float *b, size_t n)
{
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

/* Tensor t's values as floats (caller frees): the adapter's A or B as
 * the runner's matmul reads them, whatever their type. */
static float *dequant(const cr_gguf_tensor_t *t)
{
    const be_type_traits_t *tt = be_type_traits_at(t->type, BE_SIMD_SCALAR);
    float *v = malloc(t->n_elems * sizeof *v);
    uint64_t rows = t->ne[1], row_bytes = t->size_bytes / rows;
    for (uint64_t r = 0; v && tt && r < rows; r++)
        tt->to_float((const uint8_t *)t->data + r * row_bytes, v + r * t->ne[0],
                     (int64_t)t->ne[0]);
    return v;
}

/* Writes `out`: the F32 model at base with every adapter in ads merged into
 * its weights. */
static void write_merged(const char *base, const char *const *ads, size_t n_ads,
                         const char *out)
{
    cr_err_t err = {0};
    cr_gguf_t *g = NULL, *ad[4] = {0};
    CHECK(cr_gguf_open(base, &g, &err) == CR_OK);
    for (size_t i = 0; i < n_ads; i++)
        CHECK(cr_gguf_open(ads[i], &ad[i], &err) == CR_OK);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    CHECK(cr_gguf_writer_copy_prefix(w, g, "", &err) == CR_OK);
    size_t nt = cr_gguf_tensor_count(g);
    float **keep = calloc(nt, sizeof *keep);
    for (size_t i = 0; i < nt; i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        const void *data = t->data;
        uint64_t in = t->ne[0], outd = t->ne[1];
        for (size_t a = 0; a < n_ads; a++) {
            char name[300];
            snprintf(name, sizeof name, "%s.lora_a", t->name);
            const cr_gguf_tensor_t *ta = cr_gguf_tensor_find(ad[a], name);
            snprintf(name, sizeof name, "%s.lora_b", t->name);
            const cr_gguf_tensor_t *tb = cr_gguf_tensor_find(ad[a], name);
            if (!ta || !tb)
                continue;
            CHECK(t->type == CR_TYPE_F32);
            float alpha = 0;
            cr_gguf_get_f32(ad[a], "adapter.lora.alpha", &alpha);
            uint64_t r = ta->ne[1];
            double scale = alpha > 0 ? alpha / (double)r : 1.0;
            if (!keep[i]) {
                keep[i] = malloc(in * outd * sizeof(float));
                memcpy(keep[i], t->data, in * outd * sizeof(float));
            }
            float *A = dequant(ta), *B = dequant(tb); /* A [r][in], B [out][r] */
            for (uint64_t o = 0; o < outd; o++)
                for (uint64_t c = 0; c < in; c++) {
                    double d = 0;
                    for (uint64_t k = 0; k < r; k++)
                        d += (double)B[o * r + k] * A[k * in + c];
                    keep[i][o * in + c] = (float)(keep[i][o * in + c] + scale * d);
                }
            free(A);
            free(B);
            data = keep[i];
        }
        CHECK(cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, data, NULL,
                                        &err) == CR_OK);
    }
    CHECK_MSG(cr_gguf_writer_write(w, out, &err) == CR_OK, "%s", err.msg);
    for (size_t i = 0; i < nt; i++)
        free(keep[i]);
    free(keep);
    cr_gguf_writer_destroy(&w);
    for (size_t i = 0; i < n_ads; i++)
        cr_gguf_close(&ad[i]);
    cr_gguf_close(&g);
}

static const int32_t TOKENS[] = {1, 17, 42, 99, 5, 230, 64, 7};

/* The last token's logits of the model with the adapters, into out [V];
 * returns V (0 on failure). */
static int logits(const char *model, const char *const *ads, size_t n_ads, float *out,
                  int cap)
{
    cr_err_t err = {0};
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_lora_t *lo = NULL;
    rn_ctx_t *c = NULL;
    int V = 0;
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    CHECK_MSG(rn_model_load(model, be, &m, &err) == CR_OK, "%s", err.msg);
    if (!m)
        goto out;
    if (n_ads && rn_lora_load(m, ads, n_ads, &lo, &err) != CR_OK) {
        CHECK_MSG(false, "%s", err.msg);
        goto out;
    }
    rn_ctx_opts_t co = {.n_ctx = 32, .lora = lo};
    CHECK_MSG(rn_ctx_new(m, &co, &c, &err) == CR_OK, "%s", err.msg);
    if (!c)
        goto out;
    /* two evals: a prompt, then one more token (decode reads the cache
     * the adapted k and v wrote) */
    CHECK(rn_ctx_eval(c, TOKENS, 6, 0, NULL, &err) == CR_OK);
    CHECK(rn_ctx_eval(c, TOKENS + 6, 2, 6, NULL, &err) == CR_OK);
    V = rn_ctx_n_vocab(c);
    CHECK(V <= cap);
    memcpy(out, rn_ctx_logits(c), (size_t)CR_MIN(V, cap) * sizeof *out);
out:
    rn_ctx_destroy(&c);
    rn_lora_destroy(&lo);
    rn_model_destroy(&m);
    be_destroy(&be);
    return V;
}

static void write_adapter(const char *base, const char *out, uint64_t seed, int rank,
                          float alpha, const char *const *targets)
{
    cr_err_t err = {0};
    rn_synth_lora_opts_t o = {.seed = seed, .rank = rank, .alpha = alpha, .targets = targets};
    CHECK_MSG(rn_synth_lora_write(&o, base, out, &err) == CR_OK, "%s", err.msg);
}

#define VMAX 4096

static void test_merged(void)
{
    cr_err_t err = {0};
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.seed = 3;
    char base[128], baseq[128]; /* kept: path_of's buffers are reused */
    snprintf(base, sizeof base, "%s", path_of("base.gguf"));
    snprintf(baseq, sizeof baseq, "%s", path_of("base-q8.gguf"));
    CHECK(rn_synth_write(&so, base, &err) == CR_OK);
    so.type = CR_TYPE_Q8_0;
    CHECK(rn_synth_write(&so, baseq, &err) == CR_OK);
    const char *t1[] = {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight",
                        "blk.0.attn_output.weight", "blk.1.ffn_gate.weight",
                        "blk.1.ffn_up.weight", "blk.1.ffn_down.weight", NULL};
    const char *t2[] = {"blk.0.attn_q.weight", "blk.1.attn_v.weight", "blk.0.ffn_down.weight",
                        NULL};
    const char *ad1 = path_of("ad1.gguf"), *ad2 = path_of("ad2.gguf");
    write_adapter(base, ad1, 11, 4, 8.0f, t1); /* scale 2 */
    write_adapter(base, ad2, 12, 8, 4.0f, t2); /* scale 0.5 */
    const char *one[] = {ad1}, *two[] = {ad1, ad2};
    const char *m1 = path_of("merged1.gguf"), *m12 = path_of("merged12.gguf");
    write_merged(base, one, 1, m1);
    write_merged(base, two, 2, m12);

    static float l_base[VMAX], l_m1[VMAX], l_lora1[VMAX], l_m12[VMAX], l_lora12[VMAX];
    static float l_q[VMAX], l_qlora1[VMAX];
    int V = logits(base, NULL, 0, l_base, VMAX);
    CHECK(V > 0);
    CHECK(logits(m1, NULL, 0, l_m1, VMAX) == V);
    CHECK(logits(base, one, 1, l_lora1, VMAX) == V);
    CHECK(logits(m12, NULL, 0, l_m12, VMAX) == V);
    CHECK(logits(base, two, 2, l_lora12, VMAX) == V);
    CHECK(logits(baseq, NULL, 0, l_q, VMAX) == V);
    CHECK(logits(baseq, one, 1, l_qlora1, VMAX) == V);

    double c_1 = cos_f(l_lora1, l_m1, (size_t)V), c_base = cos_f(l_base, l_m1, (size_t)V);
    double c_12 = cos_f(l_lora12, l_m12, (size_t)V), c_1vs12 = cos_f(l_lora1, l_m12, (size_t)V);
    double c_q = cos_f(l_qlora1, l_m1, (size_t)V), c_qbase = cos_f(l_q, l_m1, (size_t)V);
    printf("test_lora: cosine vs merged: one adapter %.7f (base %.5f), two %.7f (one "
           "of them %.5f), Q8_0 base %.6f (without the adapter %.5f)\n",
           c_1, c_base, c_12, c_1vs12, c_q, c_qbase);
    CHECK(c_1 >= 0.99999);
    CHECK(c_base < 0.999);     /* the adapter changes the answer */
    CHECK(c_12 >= 0.99999);
    CHECK(c_1vs12 < 0.9999);   /* and so does the second one */
    CHECK(c_q >= 0.9995);
    CHECK(c_qbase < c_q && c_qbase < 0.999);

    /* F16, BF16 and Q8_0 adapters (rank 32: Q8_0's B rows are blocks of
     * 32) against the merged model of their own rounded values: what is
     * left is the matmul rounding x (and A x) to the weight's dot format
     * as for any such weight. Tolerances about ten times the measured distance
     * from 1: F16 0.99999 (measured 1.0000000), BF16 0.99999 (0.9999999),
     * Q8_0 0.99999 (0.9999988). */
    const cr_type_t types[] = {CR_TYPE_F16, CR_TYPE_BF16, CR_TYPE_Q8_0};
    const double tol[] = {0.99999, 0.99999, 0.99999};
    const char *names[] = {"F16", "BF16", "Q8_0"};
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++) {
        char adt[128], mt[128];
        snprintf(adt, sizeof adt, "%s", path_of("adt.gguf"));
        snprintf(mt, sizeof mt, "%s", path_of("mergedt.gguf"));
        rn_synth_lora_opts_t o = {.seed = 13, .rank = 32, .alpha = 32, .std = 0.03,
                                  .targets = t1, .type = types[i]};
        CHECK_MSG(rn_synth_lora_write(&o, base, adt, &err) == CR_OK, "%s", err.msg);
        const char *ot[] = {adt};
        write_merged(base, ot, 1, mt);
        static float l_mt[VMAX], l_t[VMAX];
        CHECK(logits(mt, NULL, 0, l_mt, VMAX) == V);
        CHECK(logits(base, ot, 1, l_t, VMAX) == V);
        double c = cos_f(l_t, l_mt, (size_t)V), c0 = cos_f(l_base, l_mt, (size_t)V);
        printf("test_lora: %s adapter vs merged %.7f (base %.5f)\n", names[i], c, c0);
        CHECK(c >= tol[i]);
        CHECK(c0 < 0.999);
    }
}

/* What rn_lora_load says of adapter ad on model base: the status, and the
 * message in msg. */
static cr_status_t load_msg(const char *base, const char *ad, char *msg, size_t cap)
{
    cr_err_t err = {0};
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_lora_t *lo = NULL;
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    CHECK(rn_model_load(base, be, &m, &err) == CR_OK);
    const char *ads[] = {ad};
    cr_status_t st = m ? rn_lora_load(m, ads, 1, &lo, &err) : CR_E_INTERNAL;
    snprintf(msg, cap, "%s", st ? err.msg : "");
    CHECK(st != CR_OK || lo != NULL);
    rn_lora_destroy(&lo);
    rn_model_destroy(&m);
    be_destroy(&be);
    return st;
}

static void expect_refused(const char *base, const char *ad, const char *needle)
{
    char msg[512];
    cr_status_t st = load_msg(base, ad, msg, sizeof msg);
    CHECK_MSG(st == CR_E_INVALID && strstr(msg, needle), "status %d, message '%s', want '%s'",
              (int)st, msg, needle);
}

static void test_refusals(void)
{
    cr_err_t err = {0};
    const char *base = path_of("base.gguf"), *ad = path_of("bad.gguf");
    const char *q[] = {"blk.0.attn_q.weight", NULL};
    rn_synth_lora_opts_t o = {.seed = 1, .rank = 2, .targets = q, .arch = "qwen2"};
    CHECK(rn_synth_lora_write(&o, base, ad, &err) == CR_OK);
    expect_refused(base, ad, "is for architecture \"qwen2\", the model is \"llama\"");
    o.arch = NULL;
    o.adapter_type = "control_vector";
    CHECK(rn_synth_lora_write(&o, base, ad, &err) == CR_OK);
    expect_refused(base, ad, "adapter.type \"control_vector\" is not supported");
    o.adapter_type = NULL;
    const char *emb[] = {"token_embd.weight", NULL};
    o.targets = emb;
    CHECK(rn_synth_lora_write(&o, base, ad, &err) == CR_OK);
    expect_refused(base, ad, "LoRA on 'token_embd.weight' is not supported");
    /* an adapter made for a wider model of the same architecture */
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.dim = 96;
    const char *wide = path_of("wide.gguf");
    CHECK(rn_synth_write(&so, wide, &err) == CR_OK);
    o.targets = q;
    CHECK(rn_synth_lora_write(&o, wide, ad, &err) == CR_OK);
    expect_refused(base, ad, "do not fit 'blk.0.attn_q.weight' [64, 64]");
    /* lora_a without its lora_b */
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    float a[64 * 2] = {0};
    uint64_t ne[2] = {64, 2};
    CHECK(cr_gguf_writer_add_str(w, "general.architecture", "llama", &err) == CR_OK);
    CHECK(cr_gguf_writer_add_str(w, "general.type", "adapter", &err) == CR_OK);
    CHECK(cr_gguf_writer_add_str(w, "adapter.type", "lora", &err) == CR_OK);
    CHECK(cr_gguf_writer_add_tensor(w, "blk.0.attn_q.weight.lora_a", 2, ne, CR_TYPE_F32, a,
                                    NULL, &err) == CR_OK);
    CHECK(cr_gguf_writer_write(w, ad, &err) == CR_OK);
    cr_gguf_writer_destroy(&w);
    expect_refused(base, ad, "tensor 'blk.0.attn_q.weight.lora_a' has no "
                             "'blk.0.attn_q.weight.lora_b'");
    /* a model is not an adapter */
    expect_refused(base, base, "general.type is \"\", not \"adapter\"");
}

/* A runner engine for model with the adapters (a load message as the
 * scheduler sends it): its status, and its size in *bytes. */
static cr_status_t engine_bytes(const char *model, const char *const *ads, size_t n,
                                int64_t *bytes, char *msg, size_t cap)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, model, NULL, 64, 1);
    ld.adapters.v = (char **)ads;
    ld.adapters.n = n;
    ld.has_adapters = n > 0;
    rn_engine_t *e = NULL;
    cr_err_t err = {0};
    cr_status_t st = rn_engine_load(&ld, &e, &err);
    *bytes = e ? rn_engine_size_bytes(e) : 0;
    snprintf(msg, cap, "%s", st ? err.msg : "");
    rn_engine_destroy(&e);
    return st;
}

static void test_engine_and_estimate(void)
{
    const char *base = path_of("base.gguf"), *ad1 = path_of("ad1.gguf");
    const char *ad2 = path_of("ad2.gguf"), *bad = path_of("bad.gguf");
    const char *two[] = {ad1, ad2}, *wrong[] = {bad};
    int64_t b0 = 0, b2 = 0, bb = 0;
    char msg[512];
    CHECK(engine_bytes(base, NULL, 0, &b0, msg, sizeof msg) == CR_OK);
    CHECK_MSG(engine_bytes(base, two, 2, &b2, msg, sizeof msg) == CR_OK, "%s", msg);
    /* bad.gguf is test_refusals' lora_a without its lora_b */
    CHECK(engine_bytes(base, wrong, 1, &bb, msg, sizeof msg) == CR_E_INVALID);
    CHECK_MSG(strstr(msg, "has no 'blk.0.attn_q.weight.lora_b'") != NULL, "%s", msg);

    cr_err_t err = {0};
    sch_estimate_opts_t eo = {.num_ctx = 64, .num_parallel = 1};
    sch_estimate_t *est = calloc(1, sizeof *est);
    CHECK(sch_estimate_file(base, &eo, est, &err) == CR_OK);
    int64_t cpu0 = est->cpu_total_bytes, layer0 = est->layer_bytes[0];
    for (size_t i = 0; i < 2; i++) {
        cr_gguf_t *g = NULL;
        CHECK(cr_gguf_open(two[i], &g, &err) == CR_OK);
        CHECK(sch_estimate_add_adapter(est, g, &err) == CR_OK);
        cr_gguf_close(&g);
    }
    printf("test_lora: two adapters: the runner holds %" PRId64 " bytes more, the estimate "
           "adds %" PRId64 "\n", b2 - b0, est->cpu_total_bytes - cpu0);
    CHECK_EQ_INT(est->cpu_total_bytes - cpu0, b2 - b0);
    CHECK(est->layer_bytes[0] > layer0); /* blk.0 tensors go with layer 0 */
    CHECK_EQ_INT(est->lora_rank, 8);
    free(est);
}

int main(void)
{
    snprintf(dir_g, sizeof dir_g, "/tmp/corral-test-lora-XXXXXX");
    if (!mkdtemp(dir_g)) {
        perror("mkdtemp");
        return 1;
    }
    test_merged();
    test_refusals();
    test_engine_and_estimate();
    const char *files[] = {"base.gguf", "base-q8.gguf", "ad1.gguf",    "ad2.gguf",
                           "merged1.gguf", "merged12.gguf", "bad.gguf", "wide.gguf",
                           "adt.gguf", "mergedt.gguf"};
    for (size_t i = 0; i < CR_ARRAY_LEN(files); i++)
        unlink(path_of(files[i]));
    rmdir(dir_g);
    return check_finish("test_lora");
}
