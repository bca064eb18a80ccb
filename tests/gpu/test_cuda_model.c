/* test_cuda_model.c: whole-model logits, CUDA backend against CPU backend.
 *
 * Synthetic llama models (tools/synth/synth.h: dim 256, 2 layers, 4
 * heads over 2 KV heads, ffn 512, the built-in vocabulary) in each weight
 * type, loaded once per backend. Checks, per type:
 *   - a 14-token prompt (the GPU's cuBLAS prefill path) gives logits at
 *     every position with cosine similarity >= 0.9999 to the CPU's for
 *     F32/F16/BF16 and >= 0.999 for quantized types;
 *   - the same prompt through the matrix-vector path (GEMM disabled) agrees
 *     with the GEMM path to the same bound;
 *   - 32 greedy steps after a 4-token prompt (both backends run
 *     independently) pick the same tokens, with the same cosine bound on
 *     every step's logits.
 * Variants cover a Q4_K_M-like mix (Q6_K output, attn_v, ffn_down), Llama-3
 * rope frequency factors and a tied output. Skips (77) without a device. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cuda/be_cuda.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/unit/check.h"

#include <math.h>

#define N_GREEDY 32
#define N_CTX 128

static be_backend_t *cpu_g, *gpu_g;

static const int32_t prompt_g[] = {1, 300, 17, 250, 42, 99, 260, 3, 398, 7, 123, 321, 55, 8};
#define N_PROMPT ((int)CR_ARRAY_LEN(prompt_g))

typedef struct side {
    cr_gguf_t *g;
    rn_model_t *m;
    rn_ctx_t *c;
    int n_vocab;
} side_t;

static void side_free(side_t *s)
{
    rn_ctx_destroy(&s->c);
    rn_model_destroy(&s->m);
    cr_gguf_close(&s->g);
}

static bool side_open(side_t *s, be_backend_t *be, const void *bytes, size_t len)
{
    memset(s, 0, sizeof *s);
    cr_err_t err;
    cr_err_clear(&err);
    cr_gguf_t *g = NULL;
    cr_status_t st = cr_gguf_open_memory(bytes, len, &g, &err);
    if (!st)
        st = rn_model_load_gguf(&g, be, &s->m, &err);
    CHECK_MSG(st == CR_OK, "load on %s: %s", be->ops->name, err.msg);
    if (st)
        return false;
    rn_ctx_opts_t co = {.n_ctx = N_CTX, .n_batch = 0};
    st = rn_ctx_new(s->m, &co, &s->c, &err);
    CHECK_MSG(st == CR_OK, "ctx on %s: %s", be->ops->name, err.msg);
    s->n_vocab = rn_model_hparams(s->m)->n_vocab;
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

static bool eval(side_t *s, const int32_t *t, int n, int pos, float *all)
{
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = rn_ctx_eval(s->c, t, n, pos, all, &err);
    CHECK_MSG(st == CR_OK, "eval: %s", err.msg);
    return st == CR_OK;
}

/* Minimum cosine over the prompt's positions of a [N_PROMPT][V] pair. */
static double min_cos(const float *a, const float *b, int v)
{
    double m = 1;
    for (int t = 0; t < N_PROMPT; t++) {
        double c = cosine(a + (size_t)t * v, b + (size_t)t * v, v);
        m = c < m ? c : m;
    }
    return m;
}

static void run_case(const char *label, const rn_synth_opts_t *o, double bound)
{
    cr_err_t err;
    cr_err_clear(&err);
    void *bytes = NULL;
    size_t len = 0;
    cr_status_t st = rn_synth_write_memory(o, &bytes, &len, &err);
    CHECK_MSG(st == CR_OK, "%s: synth: %s", label, err.msg);
    if (st)
        return;
    side_t c, g;
    bool ok = side_open(&c, cpu_g, bytes, len);
    ok = side_open(&g, gpu_g, bytes, len) && ok;
    float *lc = NULL, *lg = NULL, *lm = NULL;
    int v = c.n_vocab;
    if (ok) {
        size_t nl = (size_t)N_PROMPT * (size_t)v;
        lc = malloc(nl * sizeof(float));
        lg = malloc(nl * sizeof(float));
        lm = malloc(nl * sizeof(float));
        ok = lc && lg && lm;
    }
    if (ok && eval(&c, prompt_g, N_PROMPT, 0, lc) && eval(&g, prompt_g, N_PROMPT, 0, lg)) {
        GPU_CHECK_OK(gpu_g);
        double mc = min_cos(lc, lg, v);
        printf("%s: prefill min cosine %.7f\n", label, mc);
        CHECK_MSG(mc >= bound, "%s: prefill cosine %.7f < %.4f", label, mc, bound);
        /* the matrix-vector path for the same prompt */
        be_cuda_set_gemm_min_tokens(gpu_g, 1 << 30);
        if (eval(&g, prompt_g, N_PROMPT, 0, lm)) {
            double mm = min_cos(lm, lg, v), mcm = min_cos(lc, lm, v);
            printf("%s: matvec prefill min cosine vs gemm %.7f, vs cpu %.7f\n", label, mm,
                   mcm);
            CHECK_MSG(mm >= bound, "%s: matvec vs gemm cosine %.7f", label, mm);
            CHECK_MSG(mcm >= bound, "%s: matvec vs cpu cosine %.7f", label, mcm);
        }
        be_cuda_set_gemm_min_tokens(gpu_g, 8);
        GPU_CHECK_OK(gpu_g);

        /* greedy: 4-token prompt, then 32 tokens chosen by each backend */
        int32_t tc = 0, tg = 0;
        bool same = true;
        double worst = 1;
        if (eval(&c, prompt_g, 4, 0, NULL) && eval(&g, prompt_g, 4, 0, NULL)) {
            for (int step = 0; step < N_GREEDY && same; step++) {
                const float *a = rn_ctx_logits(c.c), *b = rn_ctx_logits(g.c);
                double cs = cosine(a, b, v);
                worst = cs < worst ? cs : worst;
                tc = argmax(a, v);
                tg = argmax(b, v);
                if (tc != tg) {
                    same = false;
                    CHECK_MSG(false, "%s: greedy step %d: cpu %d, gpu %d", label, step, tc,
                              tg);
                    break;
                }
                if (!eval(&c, &tc, 1, 4 + step, NULL) || !eval(&g, &tg, 1, 4 + step, NULL)) {
                    same = false;
                    break;
                }
            }
            GPU_CHECK_OK(gpu_g);
            printf("%s: greedy %s, min cosine %.7f\n", label, same ? "same" : "differs",
                   worst);
            CHECK_MSG(worst >= bound, "%s: decode cosine %.7f < %.4f", label, worst, bound);
        }
    }
    free(lc);
    free(lg);
    free(lm);
    side_free(&c);
    side_free(&g);
    free(bytes);
}

static void base_opts(rn_synth_opts_t *o, cr_type_t t)
{
    rn_synth_defaults(o);
    o->seed = 11;
    o->type = t;
    o->dim = 256; /* whole K-quant super-blocks */
    o->ffn = 512;
    o->n_heads = 4;
    o->n_kv_heads = 2;
    o->n_layers = 2;
    o->ctx = N_CTX;
    /* larger weights than the default 0.02 so the logits are not flat */
    o->weight_std = 0.08f;
}

int main(void)
{
    int rc = gpu_open("test_cuda_model", &gpu_g);
    if (rc)
        return rc;
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(0, &cpu_g, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        be_destroy(&gpu_g);
        return 1;
    }
    static const struct {
        const char *label;
        cr_type_t type;
        double bound;
    } cases[] = {
        {"F32", CR_TYPE_F32, 0.9999},   {"F16", CR_TYPE_F16, 0.9999},
        {"BF16", CR_TYPE_BF16, 0.9999}, {"Q8_0", CR_TYPE_Q8_0, 0.999},
        {"Q4_0", CR_TYPE_Q4_0, 0.999},  {"Q4_1", CR_TYPE_Q4_1, 0.999},
        {"Q5_0", CR_TYPE_Q5_0, 0.999},  {"Q5_1", CR_TYPE_Q5_1, 0.999},
        {"Q2_K", CR_TYPE_Q2_K, 0.999},  {"Q3_K", CR_TYPE_Q3_K, 0.999},
        {"Q4_K", CR_TYPE_Q4_K, 0.999},  {"Q5_K", CR_TYPE_Q5_K, 0.999},
        {"Q6_K", CR_TYPE_Q6_K, 0.999},
    };
    rn_synth_opts_t o;
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        base_opts(&o, cases[i].type);
        run_case(cases[i].label, &o, cases[i].bound);
    }
    /* Q4_K_M-like mix */
    base_opts(&o, CR_TYPE_Q4_K);
    o.mix = true;
    o.mix_type = CR_TYPE_Q6_K;
    run_case("Q4_K_M", &o, 0.999);
    /* Llama-3 rope factors and a tied output, in F16 */
    base_opts(&o, CR_TYPE_F16);
    o.rope_freqs = true;
    o.tied_output = true;
    o.rope_base = 500000.0f;
    run_case("F16 rope_freqs tied", &o, 0.9999);

    GPU_CHECK_OK(gpu_g);
    be_destroy(&cpu_g);
    be_destroy(&gpu_g);
    return check_finish("test_cuda_model");
}
