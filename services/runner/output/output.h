/* output.h: what the runner sends of the text it generates.
 *
 * Generated text (after stop strings are withheld) goes through two
 * optional stages before it becomes `chunk` messages: the thinking parser
 * (reasoning between the template's think tags becomes `thinking`) and the
 * tool-call parser (calls become `tool_calls`, a JSON array). What is left
 * is `response`. A model that names a built-in parser (PARSER) uses that
 * instead of both stages. One object per engine; begin() per request. */
#ifndef RN_OUTPUT_H
#define RN_OUTPUT_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/runner/output/parser.h"

/* Where a request's output goes. Both callbacks are called on the engine's
 * thread, between tokens. */
typedef struct rn_sink {
    void *ctx;
    /* Sends one piece (response text, thinking, ...). False = stop now. */
    bool (*chunk)(void *ctx, const msg_chunk_body_t *chunk);
    /* True if the request was canceled (the client went away). */
    bool (*canceled)(void *ctx);
} rn_sink_t;

typedef struct rn_output rn_output_t;

/* Caller owns; free with rn_output_destroy. NULL when out of memory. */
rn_output_t *rn_output_new(void);
void rn_output_destroy(rn_output_t **self_p);

/* Starts a request. think_open/think_close: the template's thinking tags,
 * or NULL for no thinking split; starts_thinking: the prompt already ends
 * with the open tag. tool_tag/tools_json: the template's tool-call tag and
 * the request's tools, or NULL for no tool parsing. CR_E_INVALID for bad
 * tools JSON (err names the field). */
cr_status_t rn_output_begin(rn_output_t *o, const char *think_open,
                            const char *think_close, bool starts_thinking,
                            const char *tool_tag, const char *tools_json,
                            cr_err_t *err);

/* Starts a request whose model names a built-in parser (output/parser.h):
 * it alone splits the answer (the template's stages are not used).
 * CR_E_INVALID for an unknown name or bad tools JSON, CR_E_NOMEM. */
cr_status_t rn_output_begin_parser(rn_output_t *o, const char *parser,
                                   const rn_parser_init_t *init, cr_err_t *err);

/* Sends what `text` makes of the answer so far. False when the sink says
 * stop (the client went away) or a buffer failed. */
bool rn_output_push(rn_output_t *o, const char *text, size_t len,
                    const rn_sink_t *sink);

/* Ends the request: releases what the parsers held, sends it, and frees
 * the parsers. False as for push. */
bool rn_output_finish(rn_output_t *o, const char *text, size_t len,
                      const rn_sink_t *sink);

/* Starts one logprobs entry for the next chunk sent (per-token
 * log-probabilities travel with the text they produced): returns the
 * buffer to append the entry's JSON object to (rn_logprob_json), or NULL
 * when out of memory. */
cr_buf_t *rn_output_logprob_buf(rn_output_t *o);

/* Why the last push or finish returned false when it was not the sink
 * (output the parser could not take, e.g. a tool call whose arguments do
 * not parse): the error, or NULL when the sink said stop. */
const cr_err_t *rn_output_error(const rn_output_t *o);

/* Tool calls sent during this request. */
int rn_output_tool_calls(const rn_output_t *o);

#endif
