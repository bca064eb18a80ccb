/* loadgen.c: many users at once against corral and llama-server (issue 18).
 *
 *   bench-loadgen --corral HOST:PORT --model NAME [--llama HOST:PORT]
 *                 [--corral-np1 HOST:PORT] [-n 1,2,4,8] [-r ROUNDS]
 *                 [--prompt TOKENS] [--gen TOKENS] [--long TOKENS]
 *                 [--interfere N] [--scenarios load,prefill,turns]
 *
 * Starts no server (bench/vs_llamaserver.sh starts both on private ports).
 * Every prompt is a text of English words that the servers' own tokenizers
 * count to exactly TOKENS - 1 (BOS makes TOKENS), checked on each
 * llama-server given, and every request asks for exactly --gen tokens
 * (corral: options.ignore_eos, llama-server: ignore_eos; greedy on both).
 * No prompt is sent twice to a server, so no answer comes from a cache
 * except in the turns scenario, which is about that.
 *
 * Scenarios (rounds interleave the servers: corral, llama-server, corral,
 * ...; figures are medians over rounds):
 *   load     N concurrent streaming clients (N from -n): aggregate
 *            generated tokens/s (all tokens / first send to last end),
 *            time to first token p50/p99, inter-token latency p50/p99;
 *            corral / llama-server tokens/s, PASS when >= 1.2 at N >= 4.
 *            With --corral-np1 (a second corral with OLLAMA_NUM_PARALLEL
 *            left at its default), the N=1 ratio of the two corrals too.
 *   prefill  --interfere N streams decode; once each has 32 tokens a new
 *            --long prompt arrives. ITL p99 of the running streams while
 *            it is prefilled (its send to its first token) over their ITL
 *            p99 before it came: PASS when <= 2.
 *   turns    a --long prompt, then a follow-up that repeats it and adds 32
 *            tokens: time to first token of turn 2 against turn 1, and the
 *            cached count each server reports for turn 2.
 * Speed figures only: never part of ctest. */
#include "lib/prelude.h"
#include "bench/loadgen/loadgen.h"
#include "bench/stats.h"

#include <curl/curl.h>

#define MAX_TARGETS 3
#define MAX_NS 8
#define MAX_ROUNDS 16
#define WARM_TOKENS 8     /* events before a stream counts as running */
#define INTERFERE_AT 32   /* events each stream has when the long prompt comes */
#define FOLLOWUP_TOKENS 32

typedef struct cfg {
    lg_target_t t[MAX_TARGETS];
    int n_targets;
    int llama;   /* index of llama-server, or -1 */
    int np1;     /* index of the default-parallel corral, or -1 */
    int ns[MAX_NS], n_ns;
    int rounds, prompt_tokens, gen, long_tokens, interfere;
    bool load, prefill, turns;
} cfg_t;

/* ---- statistics ---- */

typedef struct series {
    double *v;
    int n, cap;
} series_t;

static void series_add(series_t *s, double x)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v)
            return; /* a figure from fewer values; the bench goes on */
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

/* Nearest-rank percentile p (0..100) of s; 0 when empty. Sorts s. */
static double pct(series_t *s, double p)
{
    if (s->n == 0)
        return 0;
    qsort(s->v, (size_t)s->n, sizeof *s->v, bench_cmp_double);
    int k = (int)(p / 100.0 * s->n + 0.999999) - 1;
    return s->v[k < 0 ? 0 : k >= s->n ? s->n - 1 : k];
}

static void series_free(series_t *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

/* ---- prompts ---- */

/* A prompt of cfg->prompt_tokens (or n) tokens for seed, checked on every
 * llama-server; false on error. */
static bool make_prompt(const cfg_t *c, uint64_t seed, int n, char *out)
{
    if (!lg_prompt_build(&c->t[0], seed, n - 1, out))
        return false;
    for (int i = 1; i < c->n_targets; i++) {
        if (c->t[i].kind != LG_LLAMA)
            continue;
        int m = lg_count_tokens(&c->t[i], out);
        if (m != n - 1) {
            fprintf(stderr, "loadgen: %s counts %d tokens where corral counts %d "
                            "(not the same model?)\n", c->t[i].label, m, n - 1);
            return false;
        }
    }
    return true;
}

static bool check_req(const lg_req_t *r, int want_gen)
{
    if (r->error[0]) {
        fprintf(stderr, "loadgen: %s: %s\n", r->target->label, r->error);
        return false;
    }
    if (r->eval_count != want_gen)
        fprintf(stderr, "loadgen: %s generated %ld tokens, not %d\n", r->target->label,
                r->eval_count, want_gen);
    return true;
}

/* ---- load ---- */

typedef struct load_fig {
    double tps, ttft50, ttft99, itl50, itl99; /* t/s, s, s, ms, ms */
} load_fig_t;

static bool run_load(const cfg_t *c, const lg_target_t *t, char prompts[][LG_TEXT_MAX], int n,
                     load_fig_t *f)
{
    static lg_req_t reqs[LG_MAX_STREAMS];
    for (int i = 0; i < n; i++)
        reqs[i] = (lg_req_t){.target = t, .prompt = prompts[i], .num_predict = c->gen};
    if (!lg_streams_run(reqs, n))
        return false;
    series_t ttft = {0}, itl = {0};
    double t0 = 1e300, t1 = 0;
    long tokens = 0;
    bool ok = true;
    for (int i = 0; i < n && ok; i++) {
        lg_req_t *r = &reqs[i];
        ok = check_req(r, c->gen);
        if (ok && r->prompt_count != c->prompt_tokens)
            fprintf(stderr, "loadgen: %s counted a %ld-token prompt, not %d\n",
                    t->label, r->prompt_count, c->prompt_tokens);
        tokens += r->eval_count > 0 ? r->eval_count : 0;
        t0 = CR_MIN(t0, r->t_send);
        t1 = CR_MAX(t1, r->t_end);
        series_add(&ttft, r->t_first - r->t_send);
        for (int k = 1; k < CR_MIN(r->n_events, LG_MAX_EVENTS); k++)
            series_add(&itl, 1e3 * (r->t_event[k] - r->t_event[k - 1]));
    }
    f->tps = tokens / (t1 - t0);
    f->ttft50 = pct(&ttft, 50);
    f->ttft99 = pct(&ttft, 99);
    f->itl50 = pct(&itl, 50);
    f->itl99 = pct(&itl, 99);
    series_free(&ttft);
    series_free(&itl);
    return ok;
}

static bool scenario_load(const cfg_t *c)
{
    static char prompts[LG_MAX_STREAMS][LG_TEXT_MAX];
    printf("== load: %d-token prompts, %d generated, %d rounds\n", c->prompt_tokens, c->gen,
           c->rounds);
    for (int k = 0; k < c->n_ns; k++) {
        int n = c->ns[k];
        double v[MAX_TARGETS][5][MAX_ROUNDS], ratio[MAX_ROUNDS], ratio_np1[MAX_ROUNDS];
        for (int r = 0; r < c->rounds; r++) {
            for (int i = 0; i < n; i++)
                if (!make_prompt(c, 1000u * (uint64_t)n + 31u * (uint64_t)r + (uint64_t)i,
                                 c->prompt_tokens, prompts[i]))
                    return false;
            for (int ti = 0; ti < c->n_targets; ti++) {
                load_fig_t f;
                if (!run_load(c, &c->t[ti], prompts, n, &f))
                    return false;
                double fv[5] = {f.tps, f.ttft50, f.ttft99, f.itl50, f.itl99};
                for (int q = 0; q < 5; q++)
                    v[ti][q][r] = fv[q];
            }
            if (c->llama >= 0)
                ratio[r] = v[0][0][r] / v[c->llama][0][r];
            if (c->np1 >= 0)
                ratio_np1[r] = v[0][0][r] / v[c->np1][0][r];
        }
        printf("N=%d\n", n);
        for (int ti = 0; ti < c->n_targets; ti++)
            printf("  %-14s %8.2f t/s  TTFT p50 %7.3f p99 %7.3f s  ITL p50 %7.1f p99 %7.1f ms\n",
                   c->t[ti].label, bench_median(v[ti][0], c->rounds),
                   bench_median(v[ti][1], c->rounds), bench_median(v[ti][2], c->rounds),
                   bench_median(v[ti][3], c->rounds), bench_median(v[ti][4], c->rounds));
        if (c->llama >= 0) {
            double q = bench_median(ratio, c->rounds);
            printf("  corral / llama-server tokens/s x%.2f", q);
            if (n >= 4)
                printf("  (target >= 1.2: %s)", q >= 1.2 ? "PASS" : "FAIL");
            printf("\n");
        }
        if (c->np1 >= 0 && n == 1) {
            double q = bench_median(ratio_np1, c->rounds);
            printf("  corral / %s tokens/s x%.2f  (single user not slower: %s)\n",
                   c->t[c->np1].label, q, q >= 0.95 ? "PASS" : "FAIL");
        }
        fflush(stdout);
    }
    return true;
}

/* ---- prefill interference ---- */

static bool run_prefill(const cfg_t *c, const lg_target_t *t, char prompts[][LG_TEXT_MAX],
                        double *idle99, double *busy99, int *n_busy)
{
    static lg_req_t reqs[LG_MAX_STREAMS];
    int n = c->interfere;
    for (int i = 0; i < n; i++)
        reqs[i] = (lg_req_t){.target = t, .prompt = prompts[i], .num_predict = c->gen};
    reqs[n] = (lg_req_t){.target = t, .prompt = prompts[n], .num_predict = 8,
                         .start_after_tokens = INTERFERE_AT};
    if (!lg_streams_run(reqs, n + 1))
        return false;
    for (int i = 0; i <= n; i++)
        if (!check_req(&reqs[i], i < n ? c->gen : 8))
            return false;
    /* windows: steady decoding before the long prompt; its prefill */
    double warm = 0, send = reqs[n].t_send, first = reqs[n].t_first;
    for (int i = 0; i < n; i++)
        warm = CR_MAX(warm, reqs[i].t_event[WARM_TOKENS - 1]);
    series_t idle = {0}, busy = {0};
    for (int i = 0; i < n; i++) {
        const lg_req_t *r = &reqs[i];
        for (int k = 1; k < CR_MIN(r->n_events, LG_MAX_EVENTS); k++) {
            double end = r->t_event[k], gap = 1e3 * (end - r->t_event[k - 1]);
            if (end > warm && end <= send)
                series_add(&idle, gap);
            else if (end > send && end <= first)
                series_add(&busy, gap);
        }
    }
    *idle99 = pct(&idle, 99);
    *busy99 = pct(&busy, 99);
    *n_busy = busy.n;
    series_free(&idle);
    series_free(&busy);
    return true;
}

static bool scenario_prefill(const cfg_t *c)
{
    static char prompts[LG_MAX_STREAMS][LG_TEXT_MAX];
    int n = c->interfere;
    printf("== prefill: %d streams decoding, a %d-token prompt arrives once each has %d "
           "tokens\n", n, c->long_tokens, INTERFERE_AT);
    double idle[MAX_TARGETS][MAX_ROUNDS], busy[MAX_TARGETS][MAX_ROUNDS];
    double ratio[MAX_TARGETS][MAX_ROUNDS];
    int gaps[MAX_TARGETS][MAX_ROUNDS];
    for (int r = 0; r < c->rounds; r++) {
        for (int i = 0; i <= n; i++)
            if (!make_prompt(c, 500000u + 97u * (uint64_t)r + (uint64_t)i,
                             i < n ? c->prompt_tokens : c->long_tokens, prompts[i]))
                return false;
        for (int ti = 0; ti < c->n_targets; ti++) {
            if (!run_prefill(c, &c->t[ti], prompts, &idle[ti][r], &busy[ti][r], &gaps[ti][r]))
                return false;
            ratio[ti][r] = idle[ti][r] > 0 ? busy[ti][r] / idle[ti][r] : 0;
        }
    }
    for (int ti = 0; ti < c->n_targets; ti++) {
        double q = bench_median(ratio[ti], c->rounds);
        printf("  %-14s ITL p99 idle %7.1f ms, during prefill %7.1f ms (%d gaps in round 1)"
               "  x%.2f  (target <= 2: %s)\n",
               c->t[ti].label, bench_median(idle[ti], c->rounds),
               bench_median(busy[ti], c->rounds), gaps[ti][0], q, q <= 2 ? "PASS" : "FAIL");
    }
    fflush(stdout);
    return true;
}

/* ---- turns ---- */

static bool scenario_turns(const cfg_t *c)
{
    static char p1[LG_TEXT_MAX], add[LG_TEXT_MAX], p2[2 * LG_TEXT_MAX];
    printf("== turns: a %d-token prompt, then it again with %d tokens more\n", c->long_tokens,
           FOLLOWUP_TOKENS);
    double t1[MAX_TARGETS][MAX_ROUNDS], t2[MAX_TARGETS][MAX_ROUNDS];
    long cached[MAX_TARGETS], prompt2[MAX_TARGETS];
    for (int r = 0; r < c->rounds; r++) {
        if (!make_prompt(c, 900000u + 13u * (uint64_t)r, c->long_tokens, p1) ||
            !lg_prompt_build(&c->t[0], 950000u + 13u * (uint64_t)r, FOLLOWUP_TOKENS, add))
            return false;
        snprintf(p2, sizeof p2, "%s %s", p1, add);
        for (int ti = 0; ti < c->n_targets; ti++) {
            static lg_req_t q;
            q = (lg_req_t){.target = &c->t[ti], .prompt = p1, .num_predict = 8};
            if (!lg_streams_run(&q, 1) || !check_req(&q, 8))
                return false;
            t1[ti][r] = q.t_first - q.t_send;
            q = (lg_req_t){.target = &c->t[ti], .prompt = p2, .num_predict = 8};
            if (!lg_streams_run(&q, 1) || !check_req(&q, 8))
                return false;
            t2[ti][r] = q.t_first - q.t_send;
            cached[ti] = q.cached_count;
            prompt2[ti] = q.prompt_count;
        }
    }
    for (int ti = 0; ti < c->n_targets; ti++) {
        double a = bench_median(t1[ti], c->rounds), b = bench_median(t2[ti], c->rounds);
        printf("  %-14s TTFT turn 1 %7.3f s, turn 2 %7.3f s (x%.2f); turn 2: %ld of %ld "
               "prompt tokens cached\n",
               c->t[ti].label, a, b, a > 0 ? b / a : 0, cached[ti], prompt2[ti]);
    }
    fflush(stdout);
    return true;
}

/* ---- main ---- */

static bool parse_ns(cfg_t *c, const char *s)
{
    c->n_ns = 0;
    while (*s && c->n_ns < MAX_NS) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 1 || v > LG_MAX_STREAMS)
            return false;
        c->ns[c->n_ns++] = (int)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return false;
    }
    return c->n_ns > 0 && !*s;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: bench-loadgen --corral HOST:PORT --model NAME [--llama HOST:PORT]\n"
            "         [--corral-np1 HOST:PORT] [-n 1,2,4,8] [-r ROUNDS 1..%d]\n"
            "         [--prompt TOKENS] [--gen TOKENS] [--long TOKENS] [--interfere N]\n"
            "         [--scenarios load,prefill,turns]\n",
            MAX_ROUNDS);
    return 2;
}

int main(int argc, char **argv)
{
    cfg_t c = {.llama = -1, .np1 = -1, .rounds = 3, .prompt_tokens = 128, .gen = 128,
               .long_tokens = 512, .interfere = 4, .load = true, .prefill = true,
               .turns = true};
    const char *corral = NULL, *llama = NULL, *np1 = NULL, *model = NULL;
    parse_ns(&c, "1,2,4,8");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "--corral"))
            corral = v;
        else if (!strcmp(a, "--llama"))
            llama = v;
        else if (!strcmp(a, "--corral-np1"))
            np1 = v;
        else if (!strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "-n")) {
            if (!parse_ns(&c, v))
                return usage();
        } else if (!strcmp(a, "-r"))
            c.rounds = atoi(v);
        else if (!strcmp(a, "--prompt"))
            c.prompt_tokens = atoi(v);
        else if (!strcmp(a, "--gen"))
            c.gen = atoi(v);
        else if (!strcmp(a, "--long"))
            c.long_tokens = atoi(v);
        else if (!strcmp(a, "--interfere"))
            c.interfere = atoi(v);
        else if (!strcmp(a, "--scenarios")) {
            c.load = strstr(v, "load") != NULL;
            c.prefill = strstr(v, "prefill") != NULL;
            c.turns = strstr(v, "turns") != NULL;
        } else
            return usage();
    }
    if (!corral || !model || c.rounds < 1 || c.rounds > MAX_ROUNDS || c.prompt_tokens < 8 ||
        c.gen < INTERFERE_AT + 16 || c.long_tokens < 8 || c.interfere < 1 ||
        c.interfere >= LG_MAX_STREAMS)
        return usage();
    c.t[c.n_targets++] = (lg_target_t){"corral", LG_CORRAL, corral, model};
    if (llama) {
        c.llama = c.n_targets;
        c.t[c.n_targets++] = (lg_target_t){"llama-server", LG_LLAMA, llama, NULL};
    }
    if (np1) {
        c.np1 = c.n_targets;
        c.t[c.n_targets++] = (lg_target_t){"corral-np1", LG_CORRAL, np1, model};
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* warm-up: loads the model on each server, outside every figure */
    static char warm[LG_TEXT_MAX];
    bool ok = make_prompt(&c, 1, 16, warm);
    for (int ti = 0; ok && ti < c.n_targets; ti++) {
        static lg_req_t q;
        q = (lg_req_t){.target = &c.t[ti], .prompt = warm, .num_predict = 4};
        ok = lg_streams_run(&q, 1) && check_req(&q, 4);
    }
    ok = ok && (!c.load || scenario_load(&c));
    ok = ok && (!c.prefill || scenario_prefill(&c));
    ok = ok && (!c.turns || scenario_turns(&c));
    curl_global_cleanup();
    return ok ? 0 : 1;
}
