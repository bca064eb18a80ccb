/* test_runner_tools.c: `corral-runner tokenize` and `corral-runner logits`.
 *
 * Runs the real binary (from CORRAL_BUILD_DIR/bin) on a synthetic model and,
 * with the shared testdata, on the llama-spm vocabulary against llama.cpp's
 * vectors (no BOS, specials not parsed: how the .out files were made). */
#include "lib/prelude.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "services/runner/backend/backend.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"

static char runner_bin[1024];

/* Runs the runner with args, feeding `input` on stdin; stdout into out. */
static int run(const char *input, char *out, size_t cap, const char *a1,
               const char *a2, const char *a3, const char *a4, const char *a5,
               const char *a6, const char *a7)
{
    int in[2], o[2];
    if (pipe(in) || pipe(o))
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(in[0], 0);
        dup2(o[1], 1);
        close(in[1]);
        close(o[0]);
        execl(runner_bin, "corral-runner", a1, a2, a3, a4, a5, a6, a7,
              (char *)NULL);
        _exit(127);
    }
    close(in[0]);
    close(o[1]);
    if (input && write(in[1], input, strlen(input)) < 0)
        perror("write");
    close(in[1]);
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(o[0], out + n, cap - 1 - n)) > 0)
        n += (size_t)r;
    out[n] = '\0';
    close(o[0]);
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_synth(const char *model)
{
    char out[65536];
    /* BOS (id 1 in the built-in vocab) first by default, none with --no-bos. */
    CHECK_EQ_INT(run("hello", out, sizeof out, "tokenize", "--model", model,
                     NULL, NULL, NULL, NULL),
                 0);
    CHECK(!strncmp(out, "1 ", 2));
    char nobos[65536];
    CHECK_EQ_INT(run("hello", nobos, sizeof nobos, "tokenize", "--model", model,
                     "--no-bos", NULL, NULL, NULL),
                 0);
    CHECK_EQ_STR(nobos, out + 2);
    /* Special-token text is plain text unless --special. */
    CHECK_EQ_INT(run("<s>", out, sizeof out, "tokenize", "--model", model,
                     "--no-bos", "--special", NULL, NULL),
                 0);
    CHECK_EQ_STR(out, "1\n");
    CHECK_EQ_INT(run("<s>", out, sizeof out, "tokenize", "--model", model,
                     "--no-bos", NULL, NULL, NULL),
                 0);
    CHECK(strcmp(out, "1\n") != 0);

    /* logits: the same numbers the library computes. */
    char path[256];
    snprintf(path, sizeof path, "/tmp/corral-logits-%d.f32", (int)getpid());
    CHECK_EQ_INT(run(NULL, out, sizeof out, "logits", "--model", model,
                     "--tokens", "1 5 9", "--out", path),
                 0);
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_ctx_t *c = NULL;
    cr_err_t err;
    CHECK(!be_cpu_new(1, &be, &err) && !rn_model_load(model, be, &m, &err));
    rn_ctx_opts_t co = {.n_ctx = 3};
    CHECK(!rn_ctx_new(m, &co, &c, &err));
    int nv = rn_ctx_n_vocab(c);
    float *want = calloc((size_t)(3 * nv), sizeof *want);
    float *got = calloc((size_t)(3 * nv), sizeof *got);
    int32_t ids[3] = {1, 5, 9};
    CHECK(!rn_ctx_eval(c, ids, 3, 0, want, &err));
    FILE *f = fopen(path, "rb");
    CHECK(f && fread(got, sizeof *got, (size_t)(3 * nv), f) == (size_t)(3 * nv));
    if (f)
        fclose(f);
    /* Same kernels, same order: identical up to thread scheduling of
     * independent rows, which does not change any sum. */
    double maxd = 0;
    for (int i = 0; i < 3 * nv; i++)
        maxd = fmax(maxd, fabs((double)want[i] - got[i]));
    CHECK_MSG(maxd == 0.0, "max diff %g", maxd);
    unlink(path);
    free(want);
    free(got);
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    be_destroy(&be);

    /* Bad input: clear failure, not a crash. */
    CHECK(run(NULL, out, sizeof out, "logits", "--model", model, "--tokens",
              "1 x", "--out", "/tmp/x.f32") != 0);
    CHECK(run("x", out, sizeof out, "tokenize", "--model", "/nonexistent",
              NULL, NULL, NULL, NULL) != 0);
}

/* corral-runner with argv (NULL-terminated, argv[0] included); exit code. */
static int run_argv(char *const *argv)
{
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execv(runner_bin, argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* logits --kv-cache-type q8_0: the library's numbers with that cache (a
 * head_dim of 32), and an unknown type refused with usage's code. */
static void test_kv_cache_type(void)
{
    char model[256], path[256];
    snprintf(model, sizeof model, "/tmp/corral-tools-kv-%d.gguf", (int)getpid());
    snprintf(path, sizeof path, "/tmp/corral-logits-kv-%d.f32", (int)getpid());
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.dim = 128; /* head_dim 32 */
    cr_err_t err;
    CHECK_EQ_INT(rn_synth_write(&so, model, &err), CR_OK);
    char *argv[] = {"corral-runner", "logits", "--model", model, "--tokens", "1 5 9 2",
                    "--out", path, "--kv-cache-type", "q8_0", NULL};
    CHECK_EQ_INT(run_argv(argv), 0);
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_ctx_t *c = NULL;
    CHECK(!be_cpu_new(1, &be, &err) && !rn_model_load(model, be, &m, &err));
    rn_ctx_opts_t co = {.n_ctx = 4, .kv_type = CR_TYPE_Q8_0};
    CHECK(m && !rn_ctx_new(m, &co, &c, &err));
    if (c) {
        int nv = rn_ctx_n_vocab(c);
        float *want = calloc((size_t)(4 * nv), sizeof *want);
        float *got = calloc((size_t)(4 * nv), sizeof *got);
        int32_t ids[4] = {1, 5, 9, 2};
        CHECK(!rn_ctx_eval(c, ids, 4, 0, want, &err));
        FILE *f = fopen(path, "rb");
        CHECK(f && fread(got, sizeof *got, (size_t)(4 * nv), f) == (size_t)(4 * nv));
        if (f)
            fclose(f);
        CHECK_MSG(!memcmp(want, got, (size_t)(4 * nv) * sizeof *got),
                  "logits --kv-cache-type q8_0 differ from the library's");
        free(want);
        free(got);
    }
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    be_destroy(&be);
    argv[9] = "q5_0";
    CHECK_EQ_INT(run_argv(argv), 2);
    unlink(path);
    unlink(model);
}

/* The first cases of llama-spm's vectors through the command line. */
static void test_vocab_vectors(void)
{
    const char *root = check_testdata("vocab/ggml-vocab-llama-spm.gguf.inp");
    if (!root) {
        printf("runner_tools: vocabulary vectors skipped: no shared testdata\n");
        return;
    }
    char p_inp[2100], p_out[2100], p_voc[2048];
    snprintf(p_voc, sizeof p_voc, "%s/vocab/ggml-vocab-llama-spm.gguf", root);
    snprintf(p_inp, sizeof p_inp, "%s.inp", p_voc);
    snprintf(p_out, sizeof p_out, "%s.out", p_voc);
    FILE *fi = fopen(p_inp, "rb"), *fo = fopen(p_out, "rb");
    CHECK(fi && fo);
    if (!fi || !fo)
        return;
    static char inp[1 << 20];
    size_t n = fread(inp, 1, sizeof inp - 1, fi);
    inp[n] = '\0';
    fclose(fi);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *cur = inp;
    char line[65536], out[65536];
    int cases = 0;
    while (cases < 12 && fgets(line, sizeof line, fo)) {
        char *end = strstr(cur, sep);
        if (!end)
            break;
        *end = '\0';
        if (run(cur, out, sizeof out, "tokenize", "--model", p_voc, "--no-bos",
                NULL, NULL, NULL) == 0) {
            /* .out lines have a trailing space-free id list. */
            size_t ll = strlen(line);
            while (ll && (line[ll - 1] == '\n' || line[ll - 1] == ' '))
                line[--ll] = '\0';
            size_t ol = strlen(out);
            while (ol && out[ol - 1] == '\n')
                out[--ol] = '\0';
            const char *want = line;
            while (*want == ' ')
                want++; /* the .out lines start with a space */
            CHECK_MSG(!strcmp(want, out), "case %d: '%s' vs '%s'", cases,
                      out, want);
        } else {
            CHECK_MSG(false, "tokenize failed on case %d", cases);
        }
        cur = end + strlen(sep);
        cases++;
    }
    fclose(fo);
    CHECK(cases > 0);
}

int main(void)
{
    const char *build = getenv("CORRAL_BUILD_DIR");
    if (!build)
        return check_skip("runner_tools", "CORRAL_BUILD_DIR not set");
    snprintf(runner_bin, sizeof runner_bin, "%s/bin/corral-runner", build);
    if (access(runner_bin, X_OK))
        return check_skip("runner_tools", "corral-runner not built");
    char model[256];
    snprintf(model, sizeof model, "/tmp/corral-tools-%d.gguf", (int)getpid());
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.type = CR_TYPE_F32;
    cr_err_t err;
    if (rn_synth_write(&so, model, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return 1;
    }
    test_synth(model);
    unlink(model);
    test_kv_cache_type();
    test_vocab_vectors();
    return check_finish("runner_tools");
}
