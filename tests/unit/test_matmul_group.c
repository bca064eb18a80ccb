/* test_matmul_group.c: the CPU backend's matmul_group (several weights,
 * one input: q, k and v, or gate and up, in one pass over the threads).
 *
 * The contract (backend.h) is the bits of one matmul per weight, so every
 * check is bitwise against ops->matmul on the same weights: each packed
 * type (Q4_0, Q8_0, Q4_K, Q6_K), Q4_K_M's mix of Q4_K and Q6_K (one
 * activation format), 1, 3 and 9 tokens, weights of 3 and 2 that share the
 * threads, with a guard word after every output that must stay untouched.
 * It declines (returning false and writing nothing) what it cannot take:
 * unpacked weights, activation formats that differ, widths that differ,
 * no or too many weights, and everything when CORRAL_CPU_MATMUL_GROUP=0;
 * be_matmul_group then falls back to the separate matmuls. The smallest
 * unit threads split a matrix into (be_pack_min_groups) is checked on its
 * own. The types run
 * at the detected SIMD level and at avx2 and scalar forced. */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/repack.h"
#include "tests/unit/check.h"

#include <math.h>
#include <sys/wait.h>
#include <unistd.h>

enum { C = 512, N_MAX = 9, GUARD = 4 };

static const float guard_g = -12345.0f;

typedef struct mat {
    be_weight_t w;
    uint8_t *q;
} mat_t;

/* rows x C of `type` from a fixed pseudo-random stream (seeded per matrix) */
static void mat_make(be_backend_t *be, mat_t *m, cr_type_t type, int rows, uint64_t seed)
{
    const be_type_traits_t *tt = be_type_traits(type);
    uint64_t rb = 0;
    cr_type_row_bytes(type, C, &rb);
    float *src = malloc(sizeof(float) * (size_t)rows * C);
    m->q = malloc(rb * (size_t)rows);
    for (size_t i = 0; i < (size_t)rows * C; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = (float)((double)(seed >> 40) / (1 << 24) - 0.5);
    }
    for (int r = 0; r < rows; r++)
        tt->from_float(src + (size_t)r * C, m->q + (size_t)r * rb, C);
    free(src);
    m->w = (be_weight_t){.name = tt->name, .type = type, .n_cols = C, .n_rows = rows,
                         .row_bytes = rb, .data = m->q};
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be->ops->weight_prepare(be, &m->w, &err), CR_OK);
}

static void mat_free(be_backend_t *be, mat_t *m)
{
    be->ops->weight_release(be, &m->w);
    free(m->q);
}

static float *out_new(int rows)
{
    float *y = malloc(sizeof(float) * ((size_t)N_MAX * rows + GUARD));
    for (size_t i = 0; i < (size_t)N_MAX * rows + GUARD; i++)
        y[i] = guard_g;
    return y;
}

static bool guards_kept(const float *y, size_t used)
{
    for (int i = 0; i < GUARD; i++)
        if (y[used + i] != guard_g)
            return false;
    return true;
}

static bool untouched(const float *y, int rows)
{
    for (size_t i = 0; i < (size_t)N_MAX * rows + GUARD; i++)
        if (y[i] != guard_g)
            return false;
    return true;
}

/* matmul_group over m[0..n_w) against one matmul each, at 1, 3 and 9
 * tokens; `take`: whether it must take them (else decline, untouched) */
static void check_group(be_backend_t *be, const char *label, mat_t *m, int n_w, bool take)
{
    const be_ops_ext_t *ext = be_ext_ops(be);
    float x[N_MAX * C];
    for (int i = 0; i < N_MAX * C; i++)
        x[i] = sinf((float)i * 0.37f) * (1.0f + (float)(i % 7));
    static const int ns[] = {1, 3, N_MAX};
    for (size_t k = 0; k < CR_ARRAY_LEN(ns); k++) {
        int n = ns[k];
        const be_weight_t *w[4];
        float *y[4], *ref[4];
        for (int i = 0; i < n_w; i++) {
            w[i] = &m[i].w;
            y[i] = out_new((int)m[i].w.n_rows);
            ref[i] = out_new((int)m[i].w.n_rows);
            be->ops->matmul(be, w[i], x, n, ref[i]);
        }
        /* another input through the scratch the group converts x into:
         * a group that skipped its conversion would read this one */
        float *other = out_new((int)m[0].w.n_rows);
        be->ops->matmul(be, w[0], x + C, 1, other);
        free(other);
        bool took = ext->matmul_group(be, w, n_w, x, n, y);
        for (int i = 0; i < n_w; i++) {
            size_t used = (size_t)n * (size_t)m[i].w.n_rows;
            if (take) {
                CHECK_MSG(took, "%s, %d tokens: declined", label, n);
                CHECK_MSG(took && !memcmp(y[i], ref[i], used * sizeof(float)),
                          "%s, %d tokens: weight %d differs from its matmul", label, n, i);
                CHECK_MSG(guards_kept(y[i], used), "%s, %d tokens: weight %d wrote past "
                          "its output", label, n, i);
            } else {
                CHECK_MSG(!took && untouched(y[i], (int)m[i].w.n_rows),
                          "%s, %d tokens: should decline, writing nothing", label, n);
            }
            /* the helper gives the matmuls' bits either way */
            for (size_t e = 0; e < used; e++)
                y[i][e] = guard_g;
        }
        be_matmul_group(be, w, n_w, x, n, y);
        for (int i = 0; i < n_w; i++) {
            size_t used = (size_t)n * (size_t)m[i].w.n_rows;
            CHECK_MSG(!memcmp(y[i], ref[i], used * sizeof(float)),
                      "%s, %d tokens: be_matmul_group's weight %d differs", label, n, i);
            free(y[i]);
            free(ref[i]);
        }
    }
}

static be_backend_t *cpu_new(void)
{
    be_backend_t *be = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_cpu_new(2, &be, &err), CR_OK);
    if (be)
        CHECK_EQ_INT(be->ops->reserve(be, N_MAX, C, 8, 4, &err), CR_OK);
    return be;
}

/* q, k and v shapes (a wide q, narrow k and v: several units each), and
 * gate and up, in every packed type and Q4_K_M's mix */
static void test_types(be_backend_t *be)
{
    static const cr_type_t types[] = {CR_TYPE_Q4_0, CR_TYPE_Q8_0, CR_TYPE_Q4_K,
                                      CR_TYPE_Q6_K};
    for (size_t t = 0; t < CR_ARRAY_LEN(types); t++) {
        mat_t m[3];
        mat_make(be, &m[0], types[t], 1000, 11 + t); /* 125 groups: a short last unit */
        mat_make(be, &m[1], types[t], 200, 12 + t);
        mat_make(be, &m[2], types[t], 64, 13 + t);
        char label[64];
        snprintf(label, sizeof label, "%s q/k/v", be_type_traits(types[t])->name);
        check_group(be, label, m, 3, true);
        snprintf(label, sizeof label, "%s pair", be_type_traits(types[t])->name);
        check_group(be, label, m + 1, 2, true);
        snprintf(label, sizeof label, "%s one", be_type_traits(types[t])->name);
        check_group(be, label, m, 1, true);
        for (int i = 0; i < 3; i++)
            mat_free(be, &m[i]);
    }
    mat_t mix[3];
    mat_make(be, &mix[0], CR_TYPE_Q4_K, 512, 21);
    mat_make(be, &mix[1], CR_TYPE_Q4_K, 128, 22);
    mat_make(be, &mix[2], CR_TYPE_Q6_K, 128, 23);
    check_group(be, "Q4_K_M mix", mix, 3, true);
    for (int i = 0; i < 3; i++)
        mat_free(be, &mix[i]);
}

/* what it must decline, leaving every output as it was */
static void test_declines(be_backend_t *be)
{
    mat_t m[3];
    mat_make(be, &m[0], CR_TYPE_Q4_0, 256, 31);
    mat_make(be, &m[1], CR_TYPE_Q4_K, 64, 32); /* Q8_K activations, not Q8_0 */
    mat_make(be, &m[2], CR_TYPE_F16, 64, 33);  /* not packed */
    check_group(be, "Q4_0 with Q4_K", m, 2, false);
    check_group(be, "F16 alone", m + 2, 1, false);
    mat_t q[2];
    mat_make(be, &q[0], CR_TYPE_Q4_0, 64, 34);
    mat_make(be, &q[1], CR_TYPE_Q4_0, 64, 35);
    check_group(be, "Q4_0 with F16", (mat_t[]){q[0], m[2]}, 2, false);

    const be_ops_ext_t *ext = be_ext_ops(be);
    float x[C] = {0}, *y[4] = {0};
    const be_weight_t *w4[4] = {&q[0].w, &q[1].w, &q[0].w, &q[1].w};
    CHECK_MSG(!ext->matmul_group(be, w4, 0, x, 1, y), "no weights: should decline");
    CHECK_MSG(!ext->matmul_group(be, w4, 4, x, 1, y), "four weights: should decline");

    /* a weight of another width (its x would be read past its rows) */
    be_weight_t half = q[1].w;
    half.n_cols = C / 2;
    const be_weight_t *wh[2] = {&q[0].w, &half};
    float *yh[2] = {out_new(64), out_new(64)};
    CHECK_MSG(!ext->matmul_group(be, wh, 2, x, 1, yh) && untouched(yh[0], 64),
              "widths differ: should decline");
    free(yh[0]);
    free(yh[1]);
    for (int i = 0; i < 3; i++)
        mat_free(be, &m[i]);
    mat_free(be, &q[0]);
    mat_free(be, &q[1]);
}

/* the smallest unit threads may split a packed matrix into: 4 groups, or
 * for one token what its one-token kernel pairs at full speed (two
 * streams of 256 blocks for Q4_0 and Q8_0, 64 super-blocks for Q4_K and
 * Q6_K) */
static void test_min_groups(void)
{
    static const struct {
        cr_type_t type;
        int64_t n_blocks;
        int n;
        int64_t want;
    } cases[] = {
        {CR_TYPE_Q4_0, 16, 1, 32},  {CR_TYPE_Q4_0, 64, 1, 8}, {CR_TYPE_Q4_0, 176, 1, 4},
        {CR_TYPE_Q4_0, 16, 3, 4},   {CR_TYPE_Q8_0, 100, 1, 6}, {CR_TYPE_Q8_0, 512, 1, 4},
        {CR_TYPE_Q4_K, 2, 1, 64},   {CR_TYPE_Q4_K, 8, 1, 16}, {CR_TYPE_Q4_K, 8, 2, 4},
        {CR_TYPE_Q6_K, 2, 1, 64},   {CR_TYPE_Q6_K, 22, 1, 6}, {CR_TYPE_Q6_K, 8, 3, 4},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        be_packed_t p = {.type = cases[i].type, .n_blocks = cases[i].n_blocks};
        CHECK_MSG(be_pack_min_groups(&p, cases[i].n) == cases[i].want,
                  "%s, %lld blocks, %d tokens: %lld groups, want %lld",
                  be_type_traits(cases[i].type)->name, (long long)cases[i].n_blocks,
                  cases[i].n, (long long)be_pack_min_groups(&p, cases[i].n),
                  (long long)cases[i].want);
    }
}

/* CORRAL_CPU_MATMUL_GROUP=0 (read when a backend is made) turns it off */
static void test_switch(void)
{
    setenv("CORRAL_CPU_MATMUL_GROUP", "0", 1);
    be_backend_t *be = cpu_new();
    unsetenv("CORRAL_CPU_MATMUL_GROUP");
    if (!be)
        return;
    mat_t m[2];
    mat_make(be, &m[0], CR_TYPE_Q8_0, 128, 41);
    mat_make(be, &m[1], CR_TYPE_Q8_0, 64, 42);
    check_group(be, "switched off", m, 2, false);
    mat_free(be, &m[0]);
    mat_free(be, &m[1]);
    be_destroy(&be);
}

/* this process's level, then (when nothing forced it) a child each for
 * the lower levels: the level is fixed once per process (quant.c) */
static void run_lower_levels(char **argv)
{
    be_simd_t have = be_simd_detect();
    static const char *const lower[] = {"avx2", "scalar"};
    for (size_t l = 0; l < CR_ARRAY_LEN(lower); l++) {
        if (l == 0 && have <= BE_SIMD_AVX2)
            continue;
        if (l == 1 && have == BE_SIMD_SCALAR)
            continue;
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            setenv("CORRAL_CPU_SIMD", lower[l], 1);
            execv("/proc/self/exe", argv);
            _exit(127);
        }
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the run at %s failed (status %d)", lower[l], status);
    }
}

int main(int argc, char **argv)
{
    CR_UNUSED(argc);
    be_backend_t *be = cpu_new();
    if (be) {
        CHECK(be_ext_ops(be) && be_ext_ops(be)->matmul_group);
        printf("simd level: %s\n", be_cpu_simd(be));
        test_types(be);
        test_declines(be);
        be_destroy(&be);
    }
    if (getenv("CORRAL_CPU_SIMD"))
        return check_finish("matmul_group");
    test_switch();
    test_min_groups();
    run_lower_levels(argv);
    return check_finish("matmul_group");
}
