/* loadgen.h: bench-loadgen's parts (bench/loadgen/): streaming clients
 * driven by one libcurl multi loop (streams.c), prompts of an exact token
 * count (prompts.c), and the scenarios and report (loadgen.c). */
#ifndef BENCH_LOADGEN_H
#define BENCH_LOADGEN_H

#include "lib/prelude.h"

#define LG_MAX_STREAMS 16   /* requests in flight in one run */
#define LG_MAX_EVENTS 2048  /* token events kept per request */
#define LG_TEXT_MAX 16384   /* prompt bytes */

typedef enum lg_kind {
    LG_CORRAL, /* POST /api/generate, NDJSON lines */
    LG_LLAMA   /* llama-server POST /completion, SSE events */
} lg_kind_t;

/* A server under test. */
typedef struct lg_target {
    const char *label; /* "corral", "llama-server", ... */
    lg_kind_t kind;
    const char *host;  /* HOST:PORT */
    const char *model; /* corral's model name (llama-server has one) */
} lg_target_t;

/* One streaming request and what it saw. */
typedef struct lg_req {
    /* in */
    const lg_target_t *target;
    const char *prompt;
    int num_predict;
    /* Start only once every earlier request in the run has had this many
     * token events (0: at once). */
    int start_after_tokens;
    /* out: times in seconds on bench_now_s's clock */
    double t_send, t_first, t_end;
    double t_event[LG_MAX_EVENTS]; /* arrival of each token event */
    int n_events;
    long eval_count;   /* generated tokens the server reported */
    long prompt_count; /* prompt tokens the server reported (cached included) */
    long cached_count; /* of those, reused from its cache (-1: not said) */
    bool done;         /* the final line/event arrived */
    char error[200];   /* "" when fine */
} lg_req_t;

/* Runs reqs[0..n) concurrently (each starting as its start_after_tokens
 * says) until all end. Returns false when a request could not be made at
 * all (reasons in each error); a request that failed on the server has its
 * error set and done false. */
bool lg_streams_run(lg_req_t *reqs, int n);

/* The number of tokens text makes on target without BOS (corral's
 * /api/tokenize, llama-server's /tokenize); -1 on error (message on
 * stderr). */
int lg_count_tokens(const lg_target_t *t, const char *text);

/* Writes into out (LG_TEXT_MAX) a text of English words, chosen by seed,
 * that t tokenizes to exactly n_tokens (without BOS: a request's prompt is
 * then n_tokens + 1). False when none was found (message on stderr). */
bool lg_prompt_build(const lg_target_t *t, uint64_t seed, int n_tokens, char *out);

#endif
