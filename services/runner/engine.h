/* engine.h: one loaded model answering requests: the runner's core.
 *
 * An engine owns the model weights (mmapped), the tokenizer, the prompt
 * template and the model's default system prompt and messages, and
 * num_parallel slots (from the load message, default 1), each with its own
 * KV cache of num_ctx tokens, sampler, detokenizer and output stages. It
 * turns a generate or chat request into a prompt, gives it the free slot
 * whose cache shares the longest prefix with it, evaluates what the cache
 * lacks, decodes tokens and hands text pieces to the request's sink. The
 * step loop (rn_engine_step) advances all busy slots with one forward pass
 * per step. It knows nothing of sockets: the server (server.c) connects it
 * to the bus. */
#ifndef RN_ENGINE_H
#define RN_ENGINE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/runner/output/output.h" /* rn_sink_t */
#include "services/runner/pace.h"

typedef struct rn_engine rn_engine_t;

/* How a request started with rn_engine_start ended, called once with the
 * sink's ctx: st CR_OK with done (its `context` array points into the
 * slot: valid during the call), or an error (CR_E_CANCELED when the sink
 * said so) with err's message. done and err are borrowed for the call. */
typedef void (*rn_finish_fn)(void *ctx, cr_status_t st, const msg_done_body_t *done,
                             const cr_err_t *err);

/* Counters of the step loop: how much the slots overlapped. */
typedef struct rn_engine_stats {
    int64_t steps;       /* forward passes run by rn_engine_step */
    int64_t steps_multi; /* of those, passes over more than one sequence */
    int64_t tokens;      /* tokens evaluated by those passes */
    int max_seqs;        /* most sequences in one pass */
    int max_prompt_with_decode; /* most prompt tokens in a pass that also
                                   decoded (the pace's cap at work) */
    int64_t images_encoded; /* images run through the vision tower */
    int64_t images_cached;  /* images whose embeddings came from the cache */
    int64_t draft_tokens;   /* tokens drafted by speculation (draft_ngram) */
    int64_t draft_accepted; /* of those, accepted by the sampler */
} rn_engine_stats_t;

/* Loads the model described by a `load` message. Errors name the file and
 * what is wrong with it (CR_E_CORRUPT, CR_E_UNSUPPORTED, CR_E_NOMEM, ...).
 * Caller owns; free with rn_engine_destroy. */
cr_status_t rn_engine_load(const msg_load_body_t *load, rn_engine_t **out,
                           cr_err_t *err);

void rn_engine_destroy(rn_engine_t **self_p);

/* Bytes the engine allocated and mapped (weights + KV cache + buffers). */
int64_t rn_engine_size_bytes(const rn_engine_t *e);

/* Why layers the load's plan put on GPUs run on the CPU ("no cuda backend
 * module at ...", "cuda: CUDA driver version is insufficient ..."), or ""
 * when every planned device opened (or the plan had none). Borrowed; valid
 * while e lives. */
const char *rn_engine_offload_error(const rn_engine_t *e);

/* Bytes the engine holds in device memory (backend instances that are not
 * host memory; 0 on the CPU alone). */
int64_t rn_engine_vram_bytes(const rn_engine_t *e);

/* Layers (blocks and the output layer, as the scheduler counts them)
 * computed on device instances: the offload really made. */
int64_t rn_engine_gpu_layers(const rn_engine_t *e);

/* The context length (num_ctx) the slot was created with. */
int64_t rn_engine_ctx(const rn_engine_t *e);

/* Slots (num_parallel) and how many run a request now. */
int rn_engine_slots(const rn_engine_t *e);
int rn_engine_busy(const rn_engine_t *e);

void rn_engine_get_stats(const rn_engine_t *e, rn_engine_stats_t *out);

/* Starts a generate or chat request in a free slot: options, prompt,
 * tokens, slot choice. Nothing is evaluated yet: rn_engine_step does that.
 * sink (copied; its ctx must stay valid until finish) gets the text, and
 * finish is called once when the request ends: already inside this call
 * for a debug_render_only request (done carries rendered_template and
 * image_count; no slot is taken). A bad request returns its error here
 * (CR_E_INVALID with a message, "the input length exceeds the context
 * length" for an over-long prompt with truncate false) and finish is never
 * called; CR_E_BUSY when every slot is busy. shift false ends an answer
 * that fills the context ("length") instead of shifting it. */
cr_status_t rn_engine_start(rn_engine_t *e, const msg_t *req, const rn_sink_t *sink,
                            rn_finish_fn finish, cr_err_t *err);

/* One step of every busy slot: a canceled request ends (CR_E_CANCELED);
 * each decoding slot samples a token and sends its text (its answer may
 * end here); then ONE forward pass evaluates those tokens and the next
 * prompt chunks of prefilling slots (at most num_batch tokens together;
 * while any slot decodes, at most the pace's cap of prompt tokens).
 * A slot whose request ends calls its finish. Returns the slots still
 * busy. Allocates nothing per token. */
int rn_engine_step(rn_engine_t *e);

/* The engine's pace (pace.h), borrowed for the engine's life: tests fix
 * its cap. */
rn_pace_t *rn_engine_pace(rn_engine_t *e);

/* Runs a generate or chat request to completion (rn_engine_start, then
 * steps until it ends; meant for an engine with no other request). Text goes to sink as it is
 * produced (complete UTF-8 only, stop strings withheld); *done gets the
 * reason and counts (durations in ns; its `context` array points into the
 * engine and stays valid until the next call). A canceled request returns
 * CR_E_CANCELED. Bad requests (e.g. a template that fails on these
 * messages) are CR_E_INVALID with a message. */
cr_status_t rn_engine_generate(rn_engine_t *e, const msg_t *req,
                               const rn_sink_t *sink, msg_done_body_t *done,
                               cr_err_t *err);

/* Runs an embed request in a free slot (CR_E_BUSY without one), at once:
 * each input tokenized (BOS/EOS as the vocabulary
 * says), cut to the context unless truncate is false (then CR_E_INVALID
 * "the input length exceeds the context length"), pooled as the model's
 * pooling_type says (rn_ctx_embed: mean when absent), L2-normalized
 * unless normalize is false, cut to `dimensions` and normalized again.
 * Fills *out (an `embeddings` body whose data points into the engine,
 * valid until the next call). Empty input gives n_inputs 0. */
cr_status_t rn_engine_embed(rn_engine_t *e, const msg_embed_body_t *req,
                            const rn_sink_t *sink, msg_embeddings_body_t *out,
                            cr_err_t *err);

/* Scores docs[0..n_docs) against query with a reranker (a bert model with
 * pooling_type 4, rank), at once in a free slot (CR_E_BUSY without one):
 * each (query, document) pair is tokenized as rn_tokenizer_encode_pair says
 * (special texts in them are plain text) and run through the encoder and
 * the classifier head (rn_ctx_rank_seq); scores[i] (caller-owned, n_docs)
 * gets document i's relevance, the head's first output (a logit: higher
 * is more relevant, no sigmoid). A pair longer than the context keeps the
 * head that fits, its last token replaced by the closing one, unless
 * truncate is false (then CR_E_INVALID naming the document). *n_tokens
 * (may be NULL) gets the tokens evaluated. CR_E_UNSUPPORTED for a model
 * that is not a reranker. server.c answers the bus message `rerank` with
 * it (/api/rerank, /v1/rerank). */
cr_status_t rn_engine_rerank(rn_engine_t *e, const char *query,
                             const char *const *docs, size_t n_docs,
                             bool truncate, float *scores, int64_t *n_tokens,
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
