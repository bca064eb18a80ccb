/* sampler.h: turns one logits vector into one token id.
 *
 * The sampler owns the sampling knobs of the options object (§2 of the API
 * reference) and the token history the repetition penalties look at. It does
 * not own stop strings (stop.h), grammars, or the logits themselves.
 *
 * The chain is llama.cpp's default order:
 *     penalties -> top_k -> typical_p -> top_p -> min_p -> temperature
 *     -> softmax -> draw
 * with temperature <= 0 meaning greedy (argmax over the penalized logits,
 * lowest id on ties). Every buffer (candidates, penalty counts, history ring)
 * is allocated once by rn_sampler_new: picking a token allocates nothing.
 *
 * Randomness comes from xoshiro256** seeded through splitmix64, so the same
 * seed and the same sequence of logits give the same tokens on every machine.
 * seed -1 draws the seed from the OS. */
#ifndef RN_SAMPLER_H
#define RN_SAMPLER_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/output/logprob_json.h" /* rn_logprob_t */

/* Largest vocabulary a sampler accepts (buffers are n_vocab-sized). */
#define RN_SAMPLER_MAX_VOCAB (1 << 24)
/* Largest history window (repeat_last_n, n_ctx) in tokens. */
#define RN_SAMPLER_MAX_HISTORY (1 << 24)
/* Most alternatives a logprob entry carries (the API allows 0..20). */
#define RN_LOGPROB_MAX_TOP 20

/* The knobs, with Ollama's defaults from rn_sampler_params_default(). */
typedef struct rn_sampler_params {
    float temperature;       /* 0.8; <= 0 = greedy */
    int32_t top_k;           /* 40; <= 0 disables */
    float top_p;             /* 0.9; >= 1 disables */
    float min_p;             /* 0.0; <= 0 disables */
    float typical_p;         /* 1.0; >= 1 disables */
    int32_t repeat_last_n;   /* 64 tokens; 0 = no penalties; -1 = n_ctx */
    float repeat_penalty;    /* 1.0 = off; logit > 0 divided, < 0 multiplied */
    float presence_penalty;  /* 0.0; subtracted once if the token occurred */
    float frequency_penalty; /* 0.0; subtracted once per occurrence */
    int64_t seed;            /* -1 = random from the OS */
} rn_sampler_params_t;

typedef struct rn_sampler rn_sampler_t;

/* Fills p with Ollama's current defaults (repeat_penalty 1.0, seed -1). */
void rn_sampler_params_default(rn_sampler_params_t *p);

/* Checks a parameter set. A NaN or infinite float, repeat_penalty <= 0 and
 * repeat_last_n < -1 are CR_E_INVALID with the option's name in err.
 * Everything else has a meaning, as in llama.cpp: temperature <= 0 is
 * greedy, top_p and typical_p >= 1 and min_p <= 0 disable their stage,
 * top_p <= 0 keeps only the best token. */
cr_status_t rn_sampler_params_check(const rn_sampler_params_t *p, cr_err_t *err);

/* Creates a sampler for a vocabulary of n_vocab tokens and a context of n_ctx
 * tokens (the longest history a penalty window may cover; repeat_last_n -1
 * resolves to it). Returns NULL with err set on bad sizes (CR_E_INVALID),
 * bad params, or allocation failure (CR_E_NOMEM).
 * Caller owns; free with rn_sampler_destroy. */
rn_sampler_t *rn_sampler_new(int32_t n_vocab, int32_t n_ctx,
                             const rn_sampler_params_t *params, cr_err_t *err);

/* Frees the sampler; accepts NULL and *self_p == NULL; sets *self_p = NULL. */
void rn_sampler_destroy(rn_sampler_t **self_p);

/* Starts a new sequence with new params: clears the history and reseeds the
 * generator (from the OS when seed is -1). Keeps the buffers. On an error the
 * old state is kept. */
cr_status_t rn_sampler_reset(rn_sampler_t *s, const rn_sampler_params_t *params,
                             cr_err_t *err);

/* The params in force (borrowed; valid until the next reset/destroy). */
const rn_sampler_params_t *rn_sampler_params(const rn_sampler_t *s);

/* Records a token in the history the penalties see. The caller decides what
 * counts: llama.cpp's server feeds prompt tokens and generated tokens. A token
 * outside [0, n_vocab) is ignored and returns false. */
bool rn_sampler_accept(rn_sampler_t *s, int32_t token);

/* Picks the next token from logits[n_vocab] (borrowed, not modified).
 * NaN logits count as -inf. Returns CR_E_INVALID if every logit is -inf/NaN.
 * Does not record the token: call rn_sampler_accept for that. */
cr_status_t rn_sampler_pick(rn_sampler_t *s, const float *logits,
                            int32_t *token_out, cr_err_t *err);

/* Speculative decoding's pick when a draft proposed token `draft` with
 * certainty (a point-mass draft q: prompt lookup): with p the distribution
 * rn_sampler_pick would draw from (the whole chain), `draft` is kept with
 * probability p(draft), else the token is drawn from p with `draft`
 * removed and the rest renormalised: the standard accept/reject rule
 * (accept with min(1, p/q), else draw from norm(max(0, p - q))) for q a
 * point mass, so the token's law is exactly p. Greedy (temperature <= 0)
 * returns the argmax whatever the draft. *accepted says whether the
 * token is the draft. A draft outside the vocabulary is simply rejected.
 * Errors as rn_sampler_pick. */
cr_status_t rn_sampler_pick_draft(rn_sampler_t *s, const float *logits, int32_t draft,
                                  int32_t *token_out, bool *accepted, cr_err_t *err);

/* Speculative decoding's pick for a draft token `draft` drawn from a full
 * distribution q (q[n_vocab], probabilities summing to 1: a sampling draft
 * model's): with p the distribution rn_sampler_pick would draw from,
 * `draft` is kept with probability min(1, p(draft) / q(draft)), else the
 * token is drawn from norm(max(0, p - q)) (from p when rounding leaves
 * that empty), so the token is distributed as p whatever q is. Greedy
 * (temperature <= 0) returns the argmax whatever the draft. A draft
 * outside the vocabulary or with q(draft) 0 (it could not have been
 * drawn) is rejected. *accepted as rn_sampler_pick_draft; errors as
 * rn_sampler_pick. Allocates nothing. */
cr_status_t rn_sampler_pick_draft_q(rn_sampler_t *s, const float *logits, int32_t draft,
                                    const float *q, int32_t *token_out, bool *accepted,
                                    cr_err_t *err);

/* Applies the current penalties (params and history) to logits[n_vocab] and
 * writes the result to out[n_vocab]: what the chain's first stage sees.
 * NaN becomes -inf. For tests and debugging. */
void rn_sampler_penalized(const rn_sampler_t *s, const float *logits, float *out);

/* The final distribution of the last pick, after every truncation and the
 * temperature: the number of surviving candidates, and for index i < that
 * number its token and probability (sorted by nothing in particular unless
 * the last stage sorted). Returns 0 before the first pick. */
size_t rn_sampler_final_count(const rn_sampler_t *s);
bool rn_sampler_final_get(const rn_sampler_t *s, size_t i, int32_t *token,
                          float *prob);

/* Log-probabilities of the last pick's final distribution: the log-prob of
 * `token` (-INFINITY if it did not survive truncation) and the top_n most
 * likely surviving tokens, best first, ties by lower id. top_n is clamped to
 * RN_LOGPROB_MAX_TOP; returns how many entries were written to top. */
size_t rn_sampler_final_logprobs(const rn_sampler_t *s, int32_t token,
                                 float *token_logprob, rn_logprob_t *top,
                                 size_t top_n);

/* Log-softmax over a whole logits vector, as Ollama reports `logprobs`: the
 * log-prob of `token` and the top_n best tokens (best first, ties by lower
 * id; top_n clamped to RN_LOGPROB_MAX_TOP). NaN logits count as -inf.
 * Allocates nothing; O(n_vocab * top_n) worst case. Returns how many entries
 * were written to top (0 if n_vocab <= 0 or all logits are -inf). */
size_t rn_logprobs_from_logits(const float *logits, int32_t n_vocab,
                               int32_t token, float *token_logprob,
                               rn_logprob_t *top, size_t top_n);

/* The generator on its own (exposed for tests and for other seeded draws). */
typedef struct rn_rng {
    uint64_t s[4];
} rn_rng_t;

/* Seeds with splitmix64(seed) as xoshiro's authors recommend. */
void rn_rng_seed(rn_rng_t *r, uint64_t seed);
/* Next 64 random bits (xoshiro256**). */
uint64_t rn_rng_next(rn_rng_t *r);
/* Uniform double in [0, 1) with 53 random bits. */
double rn_rng_uniform(rn_rng_t *r);

#endif
