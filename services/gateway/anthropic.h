/* anthropic.h: the Anthropic Messages API (/v1/messages and
 * /v1/messages/count_tokens), a translation layer over /api/chat.
 *
 * A Messages body becomes a native chat body (the same bus path and
 * checks as /api/chat): `system` (a string or text blocks) the first
 * message; each message's blocks become native messages: text joined,
 * images (base64 sources) as images, tool_use as tool calls, tool_result
 * as `tool` messages (before the user's text, naming the tool the earlier
 * tool_use called), thinking as the assistant's thinking. max_tokens ->
 * num_predict, stop_sequences -> stop, temperature/top_p/top_k ->
 * options, tools (input_schema) -> function tools, tool_choice auto/any/
 * tool/none (any and tool force a call as the /v1 routes do), thinking
 * enabled/disabled -> think. Unknown content block types, server tools and
 * a missing or wrong field are a 400 that names them.
 *
 * Answers: a `message` object (content blocks thinking, text, tool_use;
 * stop_reason end_turn / max_tokens / tool_use; usage) or, streaming, the
 * SSE events message_start, content_block_start/delta/stop (text_delta,
 * thinking_delta, input_json_delta), message_delta, message_stop, with
 * `ping` while a model loads. count_tokens renders the request as a chat
 * would and answers {"input_tokens": n} from the model's own tokenizer
 * (one token is generated and discarded). Errors have Anthropic's shape
 * {"type":"error","error":{"type","message"}}, with the type from the
 * HTTP status; an error after a stream started is an `error` event.
 *
 * The translation and renderers are public for the unit tests. */
#ifndef GW_ANTHROPIC_H
#define GW_ANTHROPIC_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "services/gateway/routes.h"

/* What the translation learned beyond the native body. */
typedef struct gw_anth_info {
    bool stream;      /* "stream" (default false) */
    bool forced_call; /* tool_choice any/tool: the answer is a call */
} gw_anth_info_t;

/* Translates a Messages body (len bytes) into the native chat body
 * (appended to out). count_tokens: the count_tokens body (max_tokens not
 * required; num_predict 1, no stream). CR_E_INVALID with the client's
 * message ("max_tokens is required and must be positive",
 * "messages[0].content[1]: unknown content block type 'foo'"). */
cr_status_t gw_anth_translate(const char *body, size_t len, bool count_tokens,
                              cr_buf_t *out, gw_anth_info_t *info,
                              cr_err_t *err);

/* {"type":"error","error":{"type","message"}}: invalid_request_error
 * (400, 413), authentication_error (401), permission_error (403),
 * not_found_error (404), rate_limit_error (429), overloaded_error (503,
 * 529), api_error otherwise. */
cr_status_t gw_anth_render_error(cr_buf_t *b, unsigned http_status,
                                 const char *msg);

/* The two routes. */
const gw_route_t *gw_anthropic_routes(size_t *n);

#endif
