/* attn.c: bench-attn, the CPU backend's attention op for one prompt chunk,
 * per query (CORRAL_CPU_PREFILL_ATTN=0) against tiled (attn_prefill.h;
 * decode steps of groups under 4 rows: the per-query loop, two heads a
 * task).
 *
 *   bench-attn [--shape llama32|tinyllama|gemma3] [--tokens N] [--pos0 P]
 *              [--window W] [--softcap S] [-t THREADS] [-r ROUNDS]
 *
 * One layer's attention of N queries (default 512) after P cached tokens
 * (default 0) over an F16 cache with random contents, the head layout of
 * Llama-3.2-1B (32 heads, 8 KV heads, head_dim 64; default) or
 * TinyLlama-1.1B (32 heads, 4 KV heads) or Gemma-3-4B (8 heads, 4 KV heads,
 * head_dim 256). --window W (a sliding window of W keys) or --softcap S
 * runs attention_ext instead (gemma2/3's local layers, gpt-oss's). Two backends of T threads
 * (default 2), one per path, take turns within each round (A/B in one
 * process: the machine's load falls on both alike); prints each path's
 * median wall time, the ratio, the load average, and whether the outputs
 * are the same bits. Never part of ctest. */
#include "lib/prelude.h"
#include "bench/stats.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "tests/unit/splitmix.h"

#include <math.h>

static uint64_t rng_s = 7;

static double load1(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

int main(int argc, char **argv)
{
    int n_tok = 512, pos0 = 0, threads = 2, rounds = 7, n_head = 32, n_head_kv = 8, hd = 64;
    int window = 0;
    float softcap = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--shape") && v) {
            n_head_kv = !strcmp(v, "tinyllama") || !strcmp(v, "gemma3") ? 4 : 8;
            if (!strcmp(v, "gemma3"))
                n_head = 8, hd = 256;
            i++;
        } else if (!strcmp(argv[i], "--window") && v) {
            window = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--softcap") && v) {
            softcap = (float)atof(argv[++i]);
        } else if (!strcmp(argv[i], "--tokens") && v) {
            n_tok = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--pos0") && v) {
            pos0 = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-t") && v) {
            threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "-r") && v) {
            rounds = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench-attn [--shape llama32|tinyllama|gemma3] [--tokens N] "
                            "[--pos0 P] [--window W] [--softcap S] [-t THREADS] "
                            "[-r ROUNDS]\n");
            return 2;
        }
    }
    if (n_tok < 1 || pos0 < 0 || threads < 1 || rounds < 1 || rounds > BENCH_MEDIAN_MAX) {
        fprintf(stderr, "bench-attn: bad sizes\n");
        return 2;
    }
    int n_ctx = pos0 + n_tok;
    size_t nq = (size_t)n_tok * n_head * hd, nkv = (size_t)n_ctx * n_head_kv * hd;
    float *q = malloc(nq * sizeof(float)), *o[2] = {malloc(nq * 4), malloc(nq * 4)};
    float *tmp = malloc(nkv * sizeof(float));
    uint16_t *k = malloc(nkv * 2), *v = malloc(nkv * 2);
    for (size_t i = 0; i < nq; i++)
        q[i] = splitmix_sym(&rng_s) * 3.0f;
    for (size_t i = 0; i < nkv; i++)
        tmp[i] = splitmix_sym(&rng_s) * 2.0f;
    be_f32_to_f16_row(tmp, k, (int64_t)nkv);
    for (size_t i = 0; i < nkv; i++)
        tmp[i] = splitmix_sym(&rng_s);
    be_f32_to_f16_row(tmp, v, (int64_t)nkv);

    cr_err_t err;
    cr_err_clear(&err);
    be_backend_t *be[2] = {NULL, NULL}; /* 0: per query, 1: tiled */
    setenv("CORRAL_CPU_PREFILL_ATTN", "0", 1);
    cr_status_t st = be_cpu_new(threads, &be[0], &err);
    unsetenv("CORRAL_CPU_PREFILL_ATTN");
    if (!st)
        st = be_cpu_new(threads, &be[1], &err);
    for (int b = 0; b < 2 && !st; b++)
        st = be[b]->ops->reserve(be[b], n_tok, n_head * hd, n_ctx, n_head, &err);
    if (st) {
        fprintf(stderr, "bench-attn: %s\n", err.msg);
        return 1;
    }
    be_attn_t a = {.n_tok = n_tok, .pos0 = pos0, .n_head = n_head, .n_head_kv = n_head_kv,
                   .head_dim = hd, .scale = 1.0f / sqrtf((float)hd), .kv_type = CR_TYPE_F16};
    bool ext = window > 0 || softcap > 0;
    float *scratch = malloc(be_attention_ext_scratch(n_ctx, hd) * sizeof(float));
    double ms[2][BENCH_MEDIAN_MAX];
    for (int r = -1; r < rounds; r++) /* round -1: warm-up (pages, caches) */
        for (int i = 0; i < 2; i++) {
            int b = (r + 2 + i) % 2; /* the order alternates */
            double t0 = bench_now_s();
            if (ext)
                be_ext_ops(be[b])->attention_ext(be[b], o[b], q, k, v, &a, softcap, window,
                                                 scratch);
            else
                be[b]->ops->attention(be[b], o[b], q, k, v, &a);
            if (r >= 0)
                ms[b][r] = (bench_now_s() - t0) * 1e3;
        }
    free(scratch);
    double m0 = bench_median(ms[0], rounds), m1 = bench_median(ms[1], rounds);
    printf("attention%s %d heads / %d kv, hd %d, %d queries after %d, window %d, softcap "
           "%g, %d threads, %d rounds, load %.2f\n",
           ext ? "_ext" : "", n_head, n_head_kv, hd, n_tok, pos0, window, softcap, threads,
           rounds, load1());
    printf("per query %.2f ms, tiled %.2f ms (median): %.2fx; same bits: %s\n", m0, m1,
           m0 / m1, memcmp(o[0], o[1], nq * 4) ? "NO" : "yes");
    for (int b = 0; b < 2; b++)
        be[b]->ops->destroy(&be[b]);
    free(q);
    free(o[0]);
    free(o[1]);
    free(tmp);
    free(k);
    free(v);
    return 0;
}
