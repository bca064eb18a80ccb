/* responses.h: the OpenAI Responses API (/v1/responses), stateless, a
 * translation layer over /api/chat.
 *
 * A request becomes a native chat body: `instructions` the system message;
 * `input` a string (one user message) or items: messages (role user,
 * assistant, system or developer; content a string or input_text /
 * output_text / input_image / refusal parts), function_call (an assistant
 * tool call), function_call_output (a tool message naming the call's
 * function) and reasoning (its summary text the next assistant message's
 * thinking). tools (type "function") -> function tools, tool_choice
 * none/auto/required/{"type":"function","name"} (required and a named
 * function force a call as /v1/chat/completions does), reasoning.effort ->
 * think, max_output_tokens -> num_predict, temperature/top_p -> options,
 * text.format (text, json_object, json_schema) -> format. Nothing is
 * stored: previous_response_id is a 400 saying so, as are unknown item,
 * part and tool types.
 *
 * Answers: a `response` object (output items reasoning, message with
 * output_text, function_call; status completed, or incomplete with
 * incomplete_details.reason max_output_tokens; usage) or, streaming, SSE
 * events response.created, response.in_progress, response.output_item.added
 * / .done, response.content_part.added / .done, response.output_text.delta /
 * .done, response.reasoning_summary_part.added / .done,
 * response.reasoning_summary_text.delta / .done,
 * response.function_call_arguments.delta / .done and response.completed (or
 * response.incomplete), each with a sequence_number. Errors have OpenAI's
 * shape (openai.h); an error after the stream started is an `error` event. */
#ifndef GW_RESPONSES_H
#define GW_RESPONSES_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "services/gateway/routes.h"

typedef struct gw_resp_info {
    bool stream;
    bool forced_call; /* tool_choice forces a call */
} gw_resp_info_t;

/* Translates a Responses body (len bytes) into the native chat body
 * (appended to out). CR_E_INVALID with the client's message. */
cr_status_t gw_resp_translate(const char *body, size_t len, cr_buf_t *out,
                              gw_resp_info_t *info, cr_err_t *err);

/* The route. */
const gw_route_t *gw_responses_routes(size_t *n);

#endif
