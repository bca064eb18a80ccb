/* moe.h: the mixture-of-experts FFN layer (qwen3moe, llama with experts).
 *
 * For each token of a chunk: router logits (xb . ffn_gate_inp), gating
 * (softmax, sigmoid, or softmax of the chosen logits: hparams.expert_gating),
 * the top n_expert_used experts, their weights optionally renormalized to
 * sum 1 and scaled; then each chosen expert's SwiGLU FFN, weighted, added
 * to the residual stream, plus an optional shared expert (times
 * sigmoid(xb . ffn_gate_inp_shexp) when that gate exists).
 *
 * Only the chosen experts' rows are read: the chunk's tokens are grouped
 * by expert on the host, and each expert's rows are multiplied once by
 * that expert's slice of the stacked weights and scattered back with their
 * weights: several experts per backend call (be_ops_ext_t.matmul_experts,
 * slices of up to max_tok grouped rows), or one expert at a time over
 * gathered rows (matmul_rows) where the backend declines. So a
 * decoded token reads n_expert_used experts, and a prompt chunk reads each
 * expert it uses once. A token's experts are summed in expert order,
 * whatever the chunk, so a token gets the same bits alone or in a batch
 * (on a backend whose matmul does).
 *
 * gpt-oss plugs in here: a router bias after the router matmul, per-expert
 * biases after each matmul_rows (rows of an [E][rows] bias, add_row_of),
 * and its clamped SwiGLU (swiglu_oai) in place of swiglu.
 *
 * Owns the host routing scratch (rn_moe_t). Does not own the backend
 * buffers (forward.c allocates them per part, rn_moe_bufs_t) or weights. */
#ifndef RN_MOE_H
#define RN_MOE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/model/model.h"

/* Backend buffers one part lends the layer, for chunks of up to B tokens.
 * Fm = max(ffn_expert, ffn_shared when a shared expert exists). */
typedef struct rn_moe_bufs {
    float *logits; /* [B][n_expert] router logits (and the shared gate) */
    float *xe;     /* [B][D] the rows routed to one expert */
    float *he;     /* [B][Fm] gate, then silu(gate) * up */
    float *he2;    /* [B][Fm] up */
    float *oe;     /* [B][D] one expert's outputs */
} rn_moe_bufs_t;

typedef struct rn_moe rn_moe_t;

/* Host scratch for chunks of up to max_tok tokens of a model with experts
 * (hp->n_expert > 0). Caller owns *out; free with rn_moe_destroy.
 * CR_E_NOMEM. */
cr_status_t rn_moe_new(const rn_hparams_t *hp, int max_tok, rn_moe_t **out,
                       cr_err_t *err);
void rn_moe_destroy(rn_moe_t **self_p);

/* x[t] += MoE(xb[t]) for the n tokens (n <= max_tok) of layer L on be,
 * which must have the MoE ops (the loader checks). xb, x: backend [n][D]. */
void rn_moe_ffn(rn_moe_t *moe, be_backend_t *be, const rn_hparams_t *hp,
                const rn_layer_t *L, const float *xb, float *x, int n,
                const rn_moe_bufs_t *b);

/* Routing of one token: from its router logits [n_expert] (overwritten),
 * the n_expert_used chosen experts in ids (highest gate first; ties to the
 * lower index) and their final weights in w. */
void rn_moe_route(const rn_hparams_t *hp, float *logits, int32_t *ids, float *w);

#endif
