/* parallel.c: aggregate decode speed with B sequences batched per step.
 *
 *   bench-parallel MODEL.gguf [-t THREADS] [-r ROUNDS] [-n STEPS]
 *
 * One context with 4 sequences (the runner's slots). For B = 1, 2 and 4,
 * each round fills B sequences with a 16-token prompt (not timed), then
 * times STEPS forward passes (default 32) that each decode one token of
 * every one of the B sequences through rn_ctx_eval_batch, as the runner's
 * step loop does with B busy slots. Aggregate tokens/s = B x STEPS / time.
 * B values interleave within a round, so all see the same machine state;
 * the ratios B=2/B=1 and B=4/B=1 are taken within each round, and medians
 * over rounds are printed. Decoding is bound by reading the weights, which
 * a batched step does once for all B tokens, so the ideal ratio is B; the
 * per-sequence attention and the larger activations are what it costs.
 *
 * A model of realistic shape: bench-bench --synth tinyllama q4_0 OUT.gguf.
 * Never part of ctest. */
#include "lib/prelude.h"
#include "bench/stats.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"

#include <time.h>

#define MAX_ROUNDS 32
#define MAX_B 4
#define PROMPT 16
#define MAX_STEPS 512

static const int batch_sizes[] = {1, 2, 4};
#define N_SIZES ((int)CR_ARRAY_LEN(batch_sizes))

/* Aggregate tokens/s of `steps` batched decode steps over B sequences;
 * < 0 on error. */
static double decode_rate(rn_ctx_t *c, int B, int steps, int n_vocab)
{
    cr_err_t err = {0};
    int32_t prompt[PROMPT], tok[MAX_B];
    rn_ctx_span_t sp[MAX_B];
    for (int s = 0; s < B; s++) {
        for (int i = 0; i < PROMPT; i++)
            prompt[i] = (int32_t)((7 + 131 * s + 17 * i) % n_vocab);
        if (rn_ctx_eval_seq(c, s, prompt, PROMPT, 0, NULL, &err)) {
            fprintf(stderr, "bench: prompt: %s\n", err.msg);
            return -1;
        }
    }
    double t0 = bench_now_s();
    for (int step = 0; step < steps; step++) {
        for (int s = 0; s < B; s++) {
            tok[s] = (int32_t)((3 + 29 * s + 11 * step) % n_vocab);
            sp[s] = (rn_ctx_span_t){s, &tok[s], 1, PROMPT + step, NULL, NULL, false, NULL};
        }
        if (rn_ctx_eval_batch(c, sp, B, &err)) {
            fprintf(stderr, "bench: decode: %s\n", err.msg);
            return -1;
        }
    }
    return B * steps / (bench_now_s() - t0);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int threads = 0, rounds = 3, steps = 32;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else
            path = NULL, i = argc;
    }
    if (!path || rounds < 1 || rounds > MAX_ROUNDS || steps < 1 || steps > MAX_STEPS) {
        fprintf(stderr, "usage: bench-parallel MODEL.gguf [-t THREADS] "
                        "[-r ROUNDS 1..%d] [-n STEPS 1..%d]\n", MAX_ROUNDS, MAX_STEPS);
        return 2;
    }
    cr_err_t err = {0};
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_ctx_t *c = NULL;
    int rc = 1;
    rn_ctx_opts_t co = {.n_ctx = PROMPT + MAX_STEPS, .n_batch = 64, .n_seq = MAX_B};
    if (be_cpu_new(threads, &be, &err) || rn_model_load(path, be, &m, &err) ||
        rn_ctx_new(m, &co, &c, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        goto out;
    }
    int V = rn_ctx_n_vocab(c);
    double rate[N_SIZES][MAX_ROUNDS], ratio[N_SIZES][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < N_SIZES; k++) {
            rate[k][r] = decode_rate(c, batch_sizes[k], steps, V);
            if (rate[k][r] < 0)
                goto out;
            ratio[k][r] = rate[k][r] / rate[0][r];
        }
        printf("round %d:", r + 1);
        for (int k = 0; k < N_SIZES; k++)
            printf("  B=%d %.2f t/s (x%.2f)", batch_sizes[k], rate[k][r], ratio[k][r]);
        printf("\n");
        fflush(stdout);
    }
    printf("median of %d rounds, %d steps, %s:\n", rounds, steps, path);
    for (int k = 0; k < N_SIZES; k++)
        printf("  B=%d  aggregate decode %.2f t/s   B/1 ratio %.2f\n", batch_sizes[k],
               bench_median(rate[k], rounds), bench_median(ratio[k], rounds));
    rc = 0;
out:
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    be_destroy(&be);
    return rc;
}
