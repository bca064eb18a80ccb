/* test_fidelity.c: the engine against llama.cpp's outputs on real models.
 *
 * Needs $CORRAL_TESTDATA (skips with 77 without it). For each model the
 * reference folder holds the prompt ids, llama.cpp's greedy ids, and its
 * logits at every prompt position and at every generated step (teacher
 * forced: row k is what chose generated token k).
 *
 * stories260K (trained; F32, F16, Q8_0, Q4_0): free-running greedy decoding
 * of 64 tokens must give exactly the reference ids (its smallest top-1/top-2
 * margin is 0.05, far above our rounding differences), and teacher-forced
 * logits must match by cosine similarity.
 *
 * tiny-spm (random weights, 32000-token vocabulary; F16, Q8_0, Q4_0 whose
 * output.weight is Q6_K): logits are flat and some greedy steps win by less
 * than 0.005, so only teacher-forced logits are compared: cosine, and the
 * argmax wherever the reference's own top-1/top-2 margin exceeds 0.01.
 *
 * Tolerances. Both engines round at the same points (activations to F16
 * before F16 dot products, to int8 blocks before quantized ones, KV cache in
 * F16, attention probabilities to F16) and differ only in float summation
 * order and libm (expf, cosf) details, i.e. relative errors of ~1e-6 per
 * operation, ~1e-5 on logits. cosine >= 0.9999 for F32/F16 leaves an order
 * of magnitude of room above that. For Q8_0/Q4_0 the activations are
 * requantized to 8 bits in every matmul; a 1e-6 difference before
 * quantization occasionally flips one int8 rounding (a step of amax/127,
 * ~0.8% of that element), which propagates: cosine >= 0.999.
 *
 * Embeddings (reference/stories260K-embed): mean pooling of the final-normed
 * hidden state over all positions, L2-normalized, from stories260K with the
 * prompt tokenized by our tokenizer (BOS added): cosine >= 0.9999 with
 * llama-embedding's vectors, for the same reasons as the F32 logits.
 *
 * With AVX2 present the test runs again under CORRAL_CPU_SIMD=scalar (a
 * re-exec of itself), so the scalar reference kernels pass the same bar. */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/text/tokenizer.h"
#include "tests/unit/check.h"

#include <sys/wait.h>
#include <unistd.h>

static const char *root_g;

static int32_t *read_ids(const char *dir, const char *file, int *n_out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/reference/%s/%s", root_g, dir, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    int cap = 256, n = 0;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    long v;
    while (ids && fscanf(f, "%ld", &v) == 1) {
        if (n == cap) {
            int32_t *p = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!p) {
                free(ids);
                ids = NULL;
                break;
            }
            ids = p;
        }
        ids[n++] = (int32_t)v;
    }
    fclose(f);
    *n_out = n;
    return ids;
}

static float *read_f32(const char *dir, const char *file, size_t *n_out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/reference/%s/%s", root_g, dir, file);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long bytes = ftell(f);
    fseek(f, 0, SEEK_SET);
    float *v = bytes > 0 ? malloc((size_t)bytes) : NULL;
    if (v && fread(v, 1, (size_t)bytes, f) != (size_t)bytes) {
        free(v);
        v = NULL;
    }
    fclose(f);
    *n_out = (size_t)bytes / sizeof(float);
    return v;
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / (sqrt(aa) * sqrt(bb) + 1e-30);
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Top-1 minus top-2 of a reference row. */
static float margin(const float *x, int n)
{
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (x[i] > a) {
            b = a;
            a = x[i];
        } else if (x[i] > b) {
            b = x[i];
        }
    }
    return a - b;
}

typedef struct fcase {
    const char *model;  /* under models/ */
    const char *ref;    /* under reference/ */
    double min_cos;
    bool exact_greedy;  /* free-running greedy must match exactly */
} fcase_t;

static void run_case(be_backend_t *be, const fcase_t *fc)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s", root_g, fc->model);
    cr_err_t err;
    cr_err_clear(&err);
    rn_model_t *m = NULL;
    cr_status_t st = rn_model_load(path, be, &m, &err);
    CHECK_MSG(st == CR_OK, "%s: %s", fc->model, err.msg);
    if (st)
        return;
    const rn_hparams_t *hp = rn_model_hparams(m);
    int V = hp->n_vocab;

    int n_prompt = 0, n_gen = 0;
    size_t n_gen_logits = 0, n_prompt_logits = 0;
    int32_t *prompt = read_ids(fc->ref, "ref.prompt_ids.txt", &n_prompt);
    int32_t *greedy = read_ids(fc->ref, "ref.greedy_ids.txt", &n_gen);
    float *gen_logits = read_f32(fc->ref, "ref.gen_logits.f32", &n_gen_logits);
    float *prompt_logits = read_f32(fc->ref, "ref.prompt_logits.f32", &n_prompt_logits);
    CHECK_MSG(prompt && greedy && gen_logits && prompt_logits, "%s: reference files",
              fc->ref);
    if (!prompt || !greedy || !gen_logits || !prompt_logits)
        goto out;
    CHECK_EQ_INT(n_gen_logits, (size_t)n_gen * V);
    CHECK_EQ_INT(n_prompt_logits, (size_t)n_prompt * V);

    rn_ctx_t *c = NULL;
    rn_ctx_opts_t o = {.n_ctx = n_prompt + n_gen + 8, .n_batch = 0};
    st = rn_ctx_new(m, &o, &c, &err);
    CHECK_MSG(st == CR_OK, "%s: %s", fc->model, err.msg);
    if (st)
        goto out;

    /* Prompt logits, all positions, from one batch. */
    float *mine = malloc((size_t)n_prompt * V * sizeof *mine);
    CHECK_EQ_INT(rn_ctx_eval(c, prompt, n_prompt, 0, mine, &err), CR_OK);
    double min_cos = 1;
    for (int r = 0; r < n_prompt; r++)
        min_cos = fmin(min_cos, cosine(mine + (size_t)r * V, prompt_logits + (size_t)r * V, V));
    CHECK_MSG(min_cos >= fc->min_cos, "%s: prompt logits cosine %.7f < %.4f", fc->model,
              min_cos, fc->min_cos);
    double prompt_cos = min_cos;
    free(mine);

    /* Teacher-forced generated steps: feed the reference's own tokens. */
    min_cos = 1;
    double max_abs = 0;
    int argmax_checked = 0, argmax_bad = 0;
    for (int k = 0; k < n_gen; k++) {
        if (k > 0) {
            st = rn_ctx_eval(c, &greedy[k - 1], 1, n_prompt + k - 1, NULL, &err);
            CHECK_MSG(st == CR_OK, "%s step %d: %s", fc->model, k, err.msg);
            if (st)
                break;
        }
        const float *lg = rn_ctx_logits(c);
        const float *ref = gen_logits + (size_t)k * V;
        min_cos = fmin(min_cos, cosine(lg, ref, V));
        for (int i = 0; i < V; i++)
            max_abs = fmax(max_abs, fabs((double)lg[i] - ref[i]));
        if (margin(ref, V) > 0.01f) {
            argmax_checked++;
            if (argmax(lg, V) != argmax(ref, V)) {
                argmax_bad++;
                fprintf(stderr, "%s step %d: argmax %d, reference %d\n", fc->model, k,
                        argmax(lg, V), argmax(ref, V));
            }
        }
    }
    CHECK_MSG(min_cos >= fc->min_cos, "%s: generated logits cosine %.7f < %.4f",
              fc->model, min_cos, fc->min_cos);
    CHECK_MSG(argmax_bad == 0, "%s: %d of %d clear-margin argmaxes differ", fc->model,
              argmax_bad, argmax_checked);

    /* Free-running greedy decoding from a cleared cache. */
    int first_bad = -1;
    if (fc->exact_greedy) {
        rn_ctx_clear(c);
        CHECK_EQ_INT(rn_ctx_eval(c, prompt, n_prompt, 0, NULL, &err), CR_OK);
        for (int k = 0; k < n_gen; k++) {
            int32_t tok = argmax(rn_ctx_logits(c), V);
            if (tok != greedy[k]) {
                first_bad = k;
                fprintf(stderr, "%s: greedy step %d gave %d, reference %d\n", fc->model,
                        k, tok, greedy[k]);
                break;
            }
            if (k + 1 < n_gen &&
                rn_ctx_eval(c, &tok, 1, n_prompt + k, NULL, &err) != CR_OK) {
                first_bad = k;
                break;
            }
        }
        CHECK_MSG(first_bad < 0, "%s: greedy ids differ from step %d", fc->model,
                  first_bad);
    }
    printf("%-24s %-6s prompt cos %.7f, gen cos %.7f, max |diff| %.4f, argmax %d/%d%s\n",
           fc->model, be_cpu_simd(be), prompt_cos, min_cos, max_abs,
           argmax_checked - argmax_bad, argmax_checked,
           fc->exact_greedy ? (first_bad < 0 ? ", greedy exact" : ", GREEDY DIFFERS")
                            : "");
    rn_ctx_destroy(&c);
out:
    free(prompt);
    free(greedy);
    free(gen_logits);
    free(prompt_logits);
    rn_model_destroy(&m);
}

/* Reads the next JSON string after *p (simple escapes only) into buf. */
static bool next_json_string(const char **p, char *buf, size_t cap)
{
    const char *q = strchr(*p, '"');
    if (!q)
        return false;
    size_t n = 0;
    for (q++; *q && *q != '"'; q++) {
        if (*q == '\\' && q[1])
            q++;
        if (n + 1 < cap)
            buf[n++] = *q;
    }
    buf[n] = 0;
    *p = *q ? q + 1 : q;
    return true;
}

static void test_embeddings(be_backend_t *be)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/reference/stories260K-embed/embeddings.json", root_g);
    FILE *f = fopen(path, "rb");
    if (!f) {
        printf("test_fidelity: no embeddings reference; skipped\n");
        return;
    }
    static char json[1 << 16];
    size_t len = fread(json, 1, sizeof json - 1, f);
    fclose(f);
    json[len] = 0;
    char inputs[3][256];
    const char *p = strstr(json, "\"inputs\"");
    const char *e = strstr(json, "\"embeddings\"");
    CHECK(p && e);
    if (!p || !e)
        return;
    p = strchr(p, '[');
    for (int i = 0; i < 3; i++)
        CHECK(p && next_json_string(&p, inputs[i], sizeof inputs[i]) && p < e);
    static float ref[3][64];
    p = strchr(e, '[') + 1;
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 64; j++) {
            while (*p && !(*p == '-' || (*p >= '0' && *p <= '9')))
                p++;
            char *end = NULL;
            ref[i][j] = strtof(p, &end);
            p = end;
        }
    }

    snprintf(path, sizeof path, "%s/models/stories260K.gguf", root_g);
    cr_err_t err;
    cr_err_clear(&err);
    rn_model_t *m = NULL;
    rn_tokenizer_t *tok = NULL;
    rn_ctx_t *c = NULL;
    CHECK_EQ_INT(rn_model_load(path, be, &m, &err), CR_OK);
    if (!m)
        return;
    CHECK_EQ_INT(rn_tokenizer_load(rn_model_gguf(m), &tok, &err), CR_OK);
    rn_ctx_opts_t o = {.n_ctx = 128};
    CHECK_EQ_INT(rn_ctx_new(m, &o, &c, &err), CR_OK);
    for (int i = 0; tok && c && i < 3; i++) {
        int32_t ids[128];
        size_t n = 0;
        CHECK_EQ_INT(rn_tokenize(tok, inputs[i], strlen(inputs[i]), true, true, ids, 128,
                                 &n, &err), CR_OK);
        float emb[64];
        CHECK_EQ_INT(rn_ctx_embed(c, ids, (int)n, true, emb, &err), CR_OK);
        double cs = cosine(emb, ref[i], 64);
        printf("embedding %d (%zu tokens): cosine %.7f\n", i, n, cs);
        CHECK_MSG(cs >= 0.9999, "embedding %d cosine %.7f", i, cs);
    }
    rn_ctx_destroy(&c);
    rn_tokenizer_destroy(&tok);
    rn_model_destroy(&m);
}

int main(int argc, char **argv)
{
    CR_UNUSED(argc);
    root_g = check_testdata("models/stories260K.gguf");
    if (!root_g)
        return check_skip("test_fidelity", "CORRAL_TESTDATA with models/ not found");
    static char root_copy[4096];
    snprintf(root_copy, sizeof root_copy, "%s", root_g);
    root_g = root_copy;

    static const fcase_t cases[] = {
        {"stories260K.gguf", "stories260K-F32", 0.9999, true},
        {"stories260K-F16.gguf", "stories260K-F16", 0.9999, true},
        {"stories260K-Q8_0.gguf", "stories260K-Q8_0", 0.999, true},
        {"stories260K-Q4_0.gguf", "stories260K-Q4_0", 0.999, true},
        {"tiny-spm-f16.gguf", "tiny-spm-f16", 0.9999, false},
        {"tiny-spm-Q8_0.gguf", "tiny-spm-Q8_0", 0.999, false},
        {"tiny-spm-Q4_0.gguf", "tiny-spm-Q4_0", 0.999, false},
    };
    be_backend_t *be = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(0, &be, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++)
        run_case(be, &cases[i]);
    test_embeddings(be);
    bool was_simd = be_simd_detect() != BE_SIMD_SCALAR;
    be_destroy(&be);

    /* Same bar for the scalar kernels: run again in a child with SIMD off. */
    if (was_simd && !getenv("CORRAL_CPU_SIMD")) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("CORRAL_CPU_SIMD", "scalar", 1);
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "scalar run failed (status %d)", status);
    }
    return check_finish("test_fidelity");
}
