/* openai.h: the OpenAI-compatible routes (/v1), a translation layer.
 *
 * Each /v1 request body is translated into the native request's JSON
 * (§3 of the API reference: messages and content parts, tools and
 * JSON-string tool arguments, response_format, stop, max_tokens,
 * temperature/top_p defaulting to 1.0, penalties, seed, reasoning effort,
 * plus the extras `options` and `tool_choice`: "none" drops the tools,
 * "required" or a named function constrain generation to a call through
 * `format` and the answer's text is turned back into a tool call), which
 * then goes through convert.h's checks and the same bus path as /api/chat,
 * /api/generate and /api/embed. Answers are rendered in OpenAI's shapes:
 * chat.completion / text_completion objects, SSE chunks ending in
 * `data: [DONE]`, embedding lists (float or base64), model lists, and
 * errors as {"error":{"message","type","param":null,"code":null}}.
 *
 * The translation functions are public for the unit tests; the handlers
 * are reached only through the route table. */
#ifndef GW_OPENAI_H
#define GW_OPENAI_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "services/gateway/routes.h"

typedef enum gw_oai_api {
    GW_OAI_CHAT,        /* /v1/chat/completions -> /api/chat */
    GW_OAI_COMPLETIONS, /* /v1/completions -> /api/generate */
    GW_OAI_EMBEDDINGS,  /* /v1/embeddings -> /api/embed */
} gw_oai_api_t;

/* What the translation learned beyond the native body. */
typedef struct gw_oai_info {
    bool stream;        /* "stream" (default false) */
    bool include_usage; /* stream_options.include_usage */
    bool base64;        /* embeddings: encoding_format "base64" */
    bool forced_call;   /* chat: tool_choice forces a call (the native
                           format is the call's schema) */
} gw_oai_info_t;

/* Translates an OpenAI request body (len bytes) into the native JSON body
 * (appended to out, compact). CR_E_INVALID with the client's message
 * (e.g. "invalid tool call arguments", "[] is too short - 'messages'"). */
cr_status_t gw_oai_translate(gw_oai_api_t api, const char *body, size_t len,
                             cr_buf_t *out, gw_oai_info_t *info,
                             cr_err_t *err);

/* Makes the native request n (a JSON object with "tools") answer with a
 * call of one of its tools: n["format"] becomes the JSON Schema of
 * {"name": <a tool's name>, "arguments": <its parameters>} and *forced is
 * set; nothing changes when no tool has a name. Used by every surface
 * whose tool_choice can require a call (chat completions, responses,
 * messages). */
struct json_t;
cr_status_t gw_oai_force_call(struct json_t *n, bool *forced, cr_err_t *err);

/* The function name of the tool call with this id among the native
 * messages' tool_calls (a tool result names only the call's id in the
 * Anthropic and Responses APIs), or NULL. */
const char *gw_native_tool_name(const struct json_t *msgs, const char *id);

/* The text a forced call generated ({"name","arguments"}) as a native
 * tool-call array (caller frees), or NULL when it is not one (then it
 * stays content). */
char *gw_oai_forced_call(const char *text);

/* {"error":{"message","type","param":null,"code":null}}: the type is
 * invalid_request_error for 400, not_found_error for 404, else api_error. */
cr_status_t gw_oai_render_error(cr_buf_t *b, unsigned http_status,
                                const char *msg);

/* Answers r with that error body and gw_http_status(st); nothing for
 * CR_E_CANCELED (returns MHD_NO: the client is gone). */
enum MHD_Result gw_oai_reply_error(gw_req_t *r, cr_status_t st,
                                   const char *msg);

/* The /v1 routes. */
const gw_route_t *gw_openai_routes(size_t *n);

#endif
