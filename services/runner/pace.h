/* pace.h: how many prompt tokens a step may take while other slots decode.
 *
 * One forward pass carries a token of every decoding slot plus prompt
 * chunks of prefilling ones, so a large chunk makes that step, and the
 * inter-token latency of every running answer, as slow as the chunk. The
 * pace keeps running averages of what steps cost (a decode-only step; one
 * prompt token) and caps the prompt tokens of a step with decoders so the
 * step costs at most RN_PACE_RATIO decode-only steps; a prompt alone is
 * never capped.
 *
 * The cap guards streams that were already sending when a prompt came:
 * their users read at a pace the new prompt must not break. A prompt that
 * came before every decoder of the step sent its first token arrived with
 * them (a burst of users at once): it is prefilled in whole chunks, as
 * llama-server prefills everything, since capping it prefills the members
 * of a burst one after another at a few tokens a step (issue 18: 0.93x and
 * 0.82x llama-server's aggregate tokens/s at 4 and 8 clients at once,
 * first tokens up to 17.7 s late). It only does arithmetic on the times
 * and ticks it is given (the engine measures them), so it is tested with
 * made-up ones. */
#ifndef RN_PACE_H
#define RN_PACE_H

#include "lib/prelude.h"

/* Target cost of a step with a prompt chunk over a decode-only step:
 * under issue 18's 2x bound on inter-token latency, with a margin. */
#define RN_PACE_RATIO 1.75
/* Prompt tokens of a step with decoders before any cost is known. */
#define RN_PACE_PROBE 8

typedef struct rn_pace {
    double decode_ns;    /* average decode-only step; 0: none seen */
    double token_ns;     /* average cost of one prompt token; 0: none seen */
    int fixed;           /* > 0: the cap with decoders, whatever the times
                            (tests set it through rn_engine_pace) */
} rn_pace_t;

/* Records one forward pass: n_decode decoding slots' tokens and
 * n_prompt prompt tokens took ns nanoseconds. */
void rn_pace_observe(rn_pace_t *p, int n_decode, int n_prompt, int64_t ns);

/* The most prompt tokens the next step may take, at most max (>= 1): max
 * when n_decode is 0; else what keeps the step within RN_PACE_RATIO
 * decode-only steps (at least 1, so a prompt always advances). */
int rn_pace_prompt_cap(const rn_pace_t *p, int n_decode, int max);

/* A prefilling slot as the plan sees it. Ticks are the engine's step
 * count: any clock that only goes forward and is read between steps. */
typedef struct rn_pace_prompt {
    int64_t arrived; /* tick at which its request started */
    int left;        /* prompt tokens still to evaluate */
} rn_pace_prompt_t;

/* One step as the plan sees it. */
typedef struct rn_pace_step {
    int n_decode;            /* decoding slots with a token in the step */
    int64_t streaming_since; /* earliest tick at which one of those sent its
                                first token (INT64_MAX: none has) */
    int budget;              /* batch tokens left after the decoders' */
    int chunk;               /* most tokens of one prompt in one step */
} rn_pace_step_t;

/* Chooses the step's prompt tokens: take[i] for each of the n prompts
 * (0: it waits), returns their sum (<= s->budget). A prompt that arrived
 * at or before s->streaming_since (no decoder of the step was sending
 * yet) is a peer of the decoders: it takes min(chunk, left). The others
 * share rn_pace_prompt_cap's tokens, the earliest arrival first (one
 * prompt finishes before the next starts: the same tokens, earlier first
 * tokens). Peers go first, then the others, within the budget. */
int rn_pace_plan(const rn_pace_t *p, const rn_pace_step_t *s, const rn_pace_prompt_t *pr,
                 int n, int *take);

#endif
