/* spec_draft.h: speculative decoding's drafting with a draft model.
 *
 * A small model with the target's vocabulary (registry: create's `draft`,
 * checked token for token) proposes the next tokens of each slot's
 * sequence: K one-token forward passes of the draft, each taking the
 * argmax of its logits (lowest id on ties), or, for a sampling request, a
 * draw from q = softmax(logits / temperature) whose rows it hands back.
 * The engine then verifies the proposal in the target's span as prompt
 * lookup's (spec.h): greedy drafts are a point-mass q
 * (rn_sampler_pick_draft), sampled ones are judged against their q
 * (rn_sampler_pick_draft_q); either rule keeps the target's
 * distribution. The draft has its own context: one sequence
 * per slot on the host backend (the scheduler charges it to the CPU), f16
 * cache, as long as the target's. It remembers which tokens each
 * sequence's cache holds, so a proposal first keeps the longest common
 * prefix with the slot's sequence and evaluates only the rest: rejected
 * drafts, a new prompt or a context shift all reduce to that. It owns the
 * draft model and context and nothing of the target's; allocates at
 * creation only. */
#ifndef RN_SPEC_DRAFT_H
#define RN_SPEC_DRAFT_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"
#include "services/runner/sampler.h"
#include "services/runner/spec.h" /* RN_SPEC_MAX_DRAFT */

typedef struct rn_spec_draft rn_spec_draft_t;

/* Loads the draft model at path on be (borrowed; must outlive it) with n_seq
 * sequences of n_ctx positions. CR_E_INVALID when its vocabulary size is
 * not n_vocab ("draft model has 512 tokens; the model has 260"); errors of
 * rn_model_load and rn_ctx_new otherwise, wrapped with "draft model".
 * Caller owns *out; free with rn_spec_draft_destroy. */
cr_status_t rn_spec_draft_new(const char *path, be_backend_t *be, int n_ctx, int n_seq,
                              int n_vocab, rn_spec_draft_t **out, cr_err_t *err);

void rn_spec_draft_destroy(rn_spec_draft_t **self_p);

/* How a proposal samples (NULL: greedy). */
typedef struct rn_spec_draft_sampling {
    float temperature; /* > 0: q = softmax(draft logits / temperature) */
    rn_rng_t *rng;     /* draws the drafts (borrowed) */
    float *q;          /* out: [k_max][n_vocab], row i the q draft i was
                          drawn from (caller-owned) */
} rn_spec_draft_sampling_t;

/* Proposes up to k_max tokens (capped at the draft's context: n + k_max - 1
 * <= n_ctx) to follow hist[0..n) (sequence seq's tokens, the last one the
 * token about to be evaluated) into out; *n_out gets how many. No drafts
 * (0, CR_OK) for an image id (< 0) in hist, n < 1 or k_max < 1. Afterwards
 * the sequence's cache holds hist and the drafts but the last. Errors of
 * the draft's forward pass (its cache is then cleared). */
cr_status_t rn_spec_draft_propose(rn_spec_draft_t *d, int seq, const int32_t *hist, int n,
                                  int k_max, const rn_spec_draft_sampling_t *samp,
                                  int32_t *out, int *n_out, cr_err_t *err);

/* One sequence's proposal in a batch (the arguments of
 * rn_spec_draft_propose). */
typedef struct rn_spec_draft_req {
    int seq;
    const int32_t *hist; /* [n], borrowed for the call */
    int n;
    int k_max;           /* capped as rn_spec_draft_propose does */
    const rn_spec_draft_sampling_t *samp; /* NULL: greedy */
    int32_t *out;        /* [k_max] */
    int n_out;           /* out: drafts proposed */
    float p_min;         /* > 0: drafting stops after a draft the draft model
                            gave less probability (the greedy pick's under
                            softmax(logits), a drawn one's under q); that
                            draft is still proposed. 0: always k_max */
} rn_spec_draft_req_t;

/* rn_spec_draft_propose for several sequences (each at most once) at once:
 * the tokens each cache has not seen go in one pass of the draft (as many
 * as fit its batch), then each draft round is one pass over every
 * sequence still drafting, so K drafts for S slots cost K passes, not
 * K x S. On a forward error every request gets no drafts and its cache is
 * cleared. */
cr_status_t rn_spec_draft_propose_batch(rn_spec_draft_t *d, rn_spec_draft_req_t *reqs,
                                        int n_reqs, cr_err_t *err);

/* Positions sequence seq's draft cache holds (for tests). */
int rn_spec_draft_n_past(const rn_spec_draft_t *d, int seq);

/* Bytes the draft holds: weights, KV cache and buffers. */
uint64_t rn_spec_draft_bytes(const rn_spec_draft_t *d);

#endif
