/* spec.c: speculative decoding's speed-up with prompt lookup (draft_ngram)
 * or a draft model (--draft).
 *
 *   bench-spec MODEL.gguf [--draft DRAFT.gguf] [-k K] [-n TOKENS] [-r ROUNDS]
 *              [-t THREADS] [-p PROMPT]
 *
 * With --draft, "with" is a second engine loaded with DRAFT.gguf as its
 * draft model (draft_num_predict K) and draft_ngram 0; "without" is the
 * model alone. Everything else is the same.
 *
 * One engine, one slot. Each round generates TOKENS greedy tokens (default
 * 128) for a prompt that repeats its own text (the default: two sentences
 * told three times and begun a fourth, raw; -p gives another) once with
 * draft_ngram 0 and once with K (default 4), in that order, and takes the
 * ratio of their decode speeds (eval_count / eval_duration) within the
 * round; the median over ROUNDS (default 3) is printed with the acceptance
 * rate (accepted / drafted tokens) and the tokens per forward pass. The
 * two answers must be the same text (greedy decoding is exact under
 * speculation); a difference is reported and the exit status is 1.
 *
 * Decoding a model too big for the CPU caches is bound by reading the
 * weights, which a pass over K+1 tokens does once, so the speed-up
 * approaches the tokens gained per pass; a tiny model (stories260K) is
 * bound by compute and gains little. Never part of ctest. */
#include "lib/prelude.h"
#include "bench/stats.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "services/runner/engine.h"

#include <stdlib.h>

#define MAX_ROUNDS 32

static const char default_prompt[] =
    "Lily saw a big red ball in the park. She ran to the ball and kicked it. "
    "Lily saw a big red ball in the park. She ran to the ball and kicked it. "
    "Lily saw a big red ball in the park. She ran to the ball and kicked it. "
    "Lily saw a big red ball";

static bool on_chunk(void *ctx, const msg_chunk_body_t *c)
{
    if (c->response)
        cr_buf_puts(ctx, c->response);
    return true;
}

static bool never(void *ctx)
{
    (void)ctx;
    return false;
}

typedef struct run {
    double tok_s;   /* decode tokens per second */
    int64_t drafted, accepted, steps, tokens;
} run_t;

/* One greedy answer with draft_ngram k (0 for an engine with a draft
 * model: it drafts by itself); its text into text. */
static cr_status_t run_once(rn_engine_t *e, const char *prompt, int k, int64_t n,
                            cr_buf_t *text, run_t *r, cr_err_t *err)
{
    msg_options_t o = {0};
    o.temperature = 0;
    o.has_temperature = true;
    o.num_predict = n;
    o.has_num_predict = true;
    o.draft_ngram = k;
    o.has_draft_ngram = true;
    msg_t m;
    msg_init(&m, MSG_generate, "bench");
    m.u.generate.model = "bench";
    m.u.generate.has_model = true;
    m.u.generate.prompt = (char *)prompt;
    m.u.generate.has_prompt = true;
    m.u.generate.raw = true;
    m.u.generate.has_raw = true;
    m.u.generate.options = &o;
    m.u.generate.has_options = true;
    rn_sink_t sink = {text, on_chunk, never};
    msg_done_body_t done;
    rn_engine_stats_t a, b;
    rn_engine_get_stats(e, &a);
    cr_status_t st = rn_engine_generate(e, &m, &sink, &done, err);
    if (st)
        return st;
    rn_engine_get_stats(e, &b);
    r->tok_s = done.eval_duration > 0 ? (double)done.eval_count * 1e9 / (double)done.eval_duration
                                      : 0;
    r->drafted = b.draft_tokens - a.draft_tokens;
    r->accepted = b.draft_accepted - a.draft_accepted;
    r->steps = b.steps - a.steps;
    r->tokens = done.eval_count;
    return CR_OK;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *prompt = default_prompt, *draft = NULL;
    int k = 4, rounds = 3, threads = 0;
    int64_t n = 128;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-k") && i + 1 < argc)
            k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc)
            n = atoll(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc)
            prompt = argv[++i];
        else if (!strcmp(argv[i], "--draft") && i + 1 < argc)
            draft = argv[++i];
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            path = NULL;
            break;
        }
    }
    if (!path || k < 1 || k > 16 || n < 1 || rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: bench-spec MODEL.gguf [--draft DRAFT.gguf] [-k 1..16] "
                        "[-n TOKENS] [-r 1..%d] [-t THREADS] [-p PROMPT]\n", MAX_ROUNDS);
        return 2;
    }
    msg_options_t lo = {0};
    lo.num_ctx = 2048;
    lo.has_num_ctx = true;
    lo.num_thread = threads;
    lo.has_num_thread = threads > 0;
    msg_load_body_t ld = {0};
    ld.name = "bench";
    ld.has_name = true;
    ld.model_path = (char *)path;
    ld.has_model_path = true;
    ld.options = &lo;
    ld.has_options = true;
    rn_engine_t *e = NULL, *ed = NULL;
    cr_err_t err = {0};
    if (rn_engine_load(&ld, &e, &err)) {
        fprintf(stderr, "bench-spec: %s\n", err.msg);
        return 1;
    }
    if (draft) {
        lo.draft_num_predict = k;
        lo.has_draft_num_predict = true;
        ld.draft_path = (char *)draft;
        ld.has_draft_path = true;
        if (rn_engine_load(&ld, &ed, &err)) {
            fprintf(stderr, "bench-spec: %s\n", err.msg);
            rn_engine_destroy(&e);
            return 1;
        }
    }
    double ratio[MAX_ROUNDS], base_s[MAX_ROUNDS], spec_s[MAX_ROUNDS];
    int64_t drafted = 0, accepted = 0, steps = 0, tokens = 0;
    int rc = 0;
    for (int r = 0; r < rounds && !rc; r++) {
        cr_buf_t a, b;
        cr_buf_init(&a, 1 << 20);
        cr_buf_init(&b, 1 << 20);
        run_t ra, rb;
        if (run_once(e, prompt, 0, n, &a, &ra, &err) ||
            run_once(ed ? ed : e, prompt, ed ? 0 : k, n, &b, &rb, &err)) {
            fprintf(stderr, "bench-spec: %s\n", err.msg);
            rc = 1;
        } else if (a.len != b.len || (a.len && memcmp(a.data, b.data, a.len))) {
            fprintf(stderr, "bench-spec: the answers differ:\n--- without\n%s\n--- with\n%s\n",
                    a.data, b.data);
            rc = 1;
        }
        if (!rc) {
            base_s[r] = ra.tok_s;
            spec_s[r] = rb.tok_s;
            ratio[r] = ra.tok_s > 0 ? rb.tok_s / ra.tok_s : 0;
            drafted += rb.drafted;
            accepted += rb.accepted;
            steps += rb.steps;
            tokens += rb.tokens;
            if (r == 0)
                printf("answer (%" PRId64 " tokens): %.200s%s\n", rb.tokens, b.data ? b.data : "",
                       b.len > 200 ? "..." : "");
        }
        cr_buf_free(&a);
        cr_buf_free(&b);
    }
    if (!rc) {
        if (draft)
            printf("draft model %s, draft_num_predict %d, %d rounds of %" PRId64 " tokens\n",
                   draft, k, rounds, n);
        else
            printf("draft_ngram %d, %d rounds of %" PRId64 " tokens\n", k, rounds, n);
        printf("  tokens/s without: %.1f   with: %.1f   (medians)\n",
               bench_median(base_s, rounds), bench_median(spec_s, rounds));
        printf("  speed-up (median of per-round ratios): %.2fx\n", bench_median(ratio, rounds));
        printf("  acceptance: %" PRId64 " of %" PRId64 " drafted tokens (%.0f%%); %.2f tokens "
               "per forward pass (prefill passes included)\n", accepted, drafted,
               drafted ? 100.0 * (double)accepted / (double)drafted : 0.0,
               steps ? (double)tokens / (double)steps : 0.0);
    }
    rn_engine_destroy(&e);
    rn_engine_destroy(&ed);
    return rc;
}
