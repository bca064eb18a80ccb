/* engine.h: one loaded model answering requests: the runner's core.
 *
 * An engine owns the model weights (mmapped), the tokenizer, the prompt
 * template and the model's default system prompt and messages, one KV-cache
 * slot and a sampler. It turns a generate or chat request into a prompt,
 * evaluates it (reusing the cached prefix of the previous request), decodes
 * tokens and hands text pieces to a sink. It knows nothing of sockets: the
 * server (server.c) connects it to the bus. */
#ifndef RN_ENGINE_H
#define RN_ENGINE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"

typedef struct rn_engine rn_engine_t;

/* Where a request's output goes. Both callbacks are called on the engine's
 * thread, between tokens. */
typedef struct rn_sink {
    void *ctx;
    /* Sends one piece (response text, thinking, ...). False = stop now. */
    bool (*chunk)(void *ctx, const msg_chunk_body_t *chunk);
    /* True if the request was canceled (the client went away). */
    bool (*canceled)(void *ctx);
} rn_sink_t;

/* Loads the model described by a `load` message. Errors name the file and
 * what is wrong with it (CR_E_CORRUPT, CR_E_UNSUPPORTED, CR_E_NOMEM, ...).
 * Caller owns; free with rn_engine_destroy. */
cr_status_t rn_engine_load(const msg_load_body_t *load, rn_engine_t **out,
                           cr_err_t *err);

void rn_engine_destroy(rn_engine_t **self_p);

/* Bytes the engine allocated and mapped (weights + KV cache + buffers). */
int64_t rn_engine_size_bytes(const rn_engine_t *e);

/* Bytes the engine holds in GPU memory (0 on the CPU backend). */
int64_t rn_engine_vram_bytes(const rn_engine_t *e);

/* The context length (num_ctx) the slot was created with. */
int64_t rn_engine_ctx(const rn_engine_t *e);

/* Runs a generate or chat request to completion. Text goes to sink as it is
 * produced (complete UTF-8 only, stop strings withheld); *done gets the
 * reason and counts (durations in ns; its `context` array points into the
 * engine and stays valid until the next call). A canceled request returns
 * CR_E_CANCELED. Bad requests (e.g. a template that fails on these
 * messages) are CR_E_INVALID with a message. */
cr_status_t rn_engine_generate(rn_engine_t *e, const msg_t *req,
                               const rn_sink_t *sink, msg_done_body_t *done,
                               cr_err_t *err);

/* Runs an embed request: each input tokenized (BOS/EOS as the vocabulary
 * says), cut to the context unless truncate is false (then CR_E_INVALID
 * "the input length exceeds the context length"), mean-pooled, L2-normalized
 * unless normalize is false, cut to `dimensions` and normalized again.
 * Fills *out (an `embeddings` body whose data points into the engine,
 * valid until the next call). Empty input gives n_inputs 0. */
cr_status_t rn_engine_embed(rn_engine_t *e, const msg_embed_body_t *req,
                            const rn_sink_t *sink, msg_embeddings_body_t *out,
                            cr_err_t *err);

/* /api/tokenize: the ids of `content` in this model's vocabulary (no BOS,
 * special-token texts parsed). *ids is owned by the caller (free()). */
cr_status_t rn_engine_tokenize(rn_engine_t *e, const char *content,
                               int32_t **ids, size_t *n, cr_err_t *err);

/* /api/detokenize: the text of ids (CR_E_INVALID naming the first id
 * outside the vocabulary). *text is owned by the caller (free()). */
cr_status_t rn_engine_detokenize(rn_engine_t *e, const int32_t *ids, size_t n,
                                 char **text, cr_err_t *err);

#endif
