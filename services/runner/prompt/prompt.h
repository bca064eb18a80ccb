/* prompt.h: Ollama's prompt construction on top of the template engine.
 *
 * Owns turning a chat or generate request into the prompt text: the data
 * Ollama hands its templates (collated messages, tools, thinking flags),
 * the three rendering modes (messages, legacy System/Prompt/Response with
 * the final turn cut after {{ .Response }}, suffix/FIM), image tags
 * ([img-N]), dropping old history to fit num_ctx, and recording which
 * bytes of the prompt are the template's and the model's own (trusted: may
 * be read as control tokens) and which were printed out of request data
 * (rn_prompt_span_t; prompt_tokens.h tokenizes by them). It does not tokenize
 * (the caller passes a counter), parse templates from model files (the
 * caller parses once with rn_tmpl_parse and keeps the template), or decode
 * HTTP/bus requests (the caller fills the plain structs below, borrowing
 * its strings and JSON).
 *
 * Modes, as Ollama's template.Execute picks them:
 *  - suffix: prompt and suffix both non-empty -> {Prompt, Suffix}.
 *  - messages: the template mentions Messages -> executed once over
 *    {System, Messages, Tools, Response:"", Think, ThinkLevel, IsThinkSet}.
 *  - legacy: messages walked; each time a user turn follows a response (or
 *    a system message follows either) the template runs for the collected
 *    (System, Prompt, Response); the last turn runs the template cut after
 *    its first .Response field, so the prompt ends where the model goes on.
 */
#ifndef RN_PROMPT_H
#define RN_PROMPT_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "services/runner/template/template.h"

#include <jansson.h>

/* One chat message. Everything is borrowed for the duration of a call.
 * tool_calls is the parsed JSON the bus carries as text (json_loads). */
typedef struct rn_prompt_msg {
    const char *role;         /* "system", "user", "assistant", "tool" (lower case) */
    const char *content;      /* NULL = "" */
    const char *thinking;     /* earlier reasoning; NULL = "" */
    size_t n_images;          /* images attached to this message */
    const json_t *tool_calls; /* [{id?, function:{index?, name, arguments{}}}] or NULL */
    const char *tool_name;    /* tool messages: which tool answered; NULL = "" */
    const char *tool_call_id; /* tool messages: the call answered; NULL = "" */
    bool trusted;             /* the model's own (Modelfile) data: set by the
                               * prompt builder for built-in renderers */
} rn_prompt_msg_t;

/* The request's `think`: absent, a bool, or a level string. */
typedef enum rn_think_mode {
    RN_THINK_UNSET = 0,
    RN_THINK_FALSE,
    RN_THINK_TRUE, /* ThinkLevel "medium" */
    RN_THINK_LEVEL /* level in `think_level`: "low", "medium", "high", "max" */
} rn_think_mode_t;

typedef struct rn_prompt_think {
    rn_think_mode_t mode;
    const char *level; /* RN_THINK_LEVEL only; borrowed */
} rn_prompt_think_t;

/* The bus carries `think` as a string: NULL/"" unset, "true", "false", or a
 * level. The level string is borrowed by the result. */
rn_prompt_think_t rn_prompt_think_parse(const char *s);

/* The template of models imported without one (Ollama's default). */
#define RN_PROMPT_DEFAULT_TEMPLATE "{{ .Prompt }}"

/* Counts the tokens of text (the runner's tokenizer, with whatever BOS
 * handling it applies to prompts). Returns a status; fills *n_tokens. */
typedef cr_status_t (*rn_prompt_count_fn)(void *ctx, const char *text, size_t len,
                                          int64_t *n_tokens, cr_err_t *err);

/* Counts the tokens of a rendered prompt with its trust spans (a
 * rn_prompt_result_t borrowed for the call; text, len, spans and n_spans
 * are set, the other fields are not), e.g. rn_prompt_tokenize with no
 * room. Preferred over rn_prompt_count_fn: it counts request text holding
 * control-token text as the plain text it will be tokenized as. */
typedef struct rn_prompt_result rn_prompt_result_t;
typedef cr_status_t (*rn_prompt_count_spans_fn)(void *ctx, const rn_prompt_result_t *prompt,
                                                int64_t *n_tokens, cr_err_t *err);

/* History truncation (Ollama's chatPrompt): when truncate is set and a
 * counter is given, the oldest messages are dropped until the rendered
 * prompt (plus 768 tokens per image when the model has a projector) fits
 * num_ctx; system messages from the dropped part are kept, and the last
 * message is always kept even if it alone does not fit. */
typedef struct rn_prompt_fit {
    bool truncate;
    int64_t num_ctx;
    bool has_projector;
    rn_prompt_count_fn count_tokens; /* NULL (and no count_prompt): no truncation */
    void *count_ctx;                 /* passed to either counter */
} rn_prompt_fit_t;

#define RN_PROMPT_IMAGE_TOKENS 768
#define RN_PROMPT_DEFAULT_MAX_BYTES (32u << 20)

/* Options shared by both entry points. */
typedef struct rn_prompt_opts {
    size_t max_bytes;       /* cap on any rendering; 0 = RN_PROMPT_DEFAULT_MAX_BYTES */
    int64_t now_unix;       /* clock for currentDate; 0 = now */
    bool tool_args_ordered; /* tool-call arguments keep their key order in
                             * templates; default false sorts them as
                             * Ollama's templateArgs (a Go map) does */
} rn_prompt_opts_t;

typedef struct rn_prompt_renderer rn_prompt_renderer_t; /* renderer.h */

/* /api/chat. */
typedef struct rn_prompt_chat {
    const rn_tmpl_t *tmpl;                 /* the model's template (required
                                            * unless renderer is set) */
    const rn_prompt_renderer_t *renderer;  /* built-in renderer (the model's
                                            * RENDERER): used instead of tmpl */
    const char *model_system;              /* model SYSTEM, NULL/"" for none */
    const rn_prompt_msg_t *model_msgs;     /* Modelfile MESSAGEs, prepended */
    size_t n_model_msgs;
    const rn_prompt_msg_t *msgs;           /* the request's messages */
    size_t n_msgs;
    const json_t *tools;                   /* request tools (array) or NULL */
    rn_prompt_think_t think;
    /* qwen3 / deepseek-r1: strip <think>...</think> from assistant messages
     * before the last user message, as Ollama's filterThinkTags does. */
    bool strip_old_thinking;
    rn_prompt_fit_t fit;
    /* Optional: counts for truncation instead of fit.count_tokens (with
     * fit.count_ctx), seeing the trust spans. */
    rn_prompt_count_spans_fn count_prompt;
    rn_prompt_opts_t opts;
} rn_prompt_chat_t;

/* /api/generate. */
typedef struct rn_prompt_gen {
    const rn_tmpl_t *tmpl;   /* the model's template, or the request's own */
    const rn_prompt_renderer_t *renderer; /* built-in renderer: used instead
                              * of tmpl in the chat-like flow (no suffix, no
                              * request template), as Ollama does */
    bool tmpl_from_request;  /* `template` was given: executed directly over
                              * the messages, without truncation or tags */
    const char *prompt;      /* NULL = "" */
    const char *suffix;      /* FIM suffix; NULL/"" for none */
    const char *system;      /* request `system`, overrides model_system */
    const char *model_system;
    const rn_prompt_msg_t *model_msgs; /* used only without context */
    size_t n_model_msgs;
    size_t n_images;          /* images of the request */
    const char *context_text; /* the request `context`, detokenized; NULL if absent */
    bool raw;                 /* prompt verbatim */
    rn_prompt_think_t think;
    rn_prompt_fit_t fit;
    rn_prompt_count_spans_fn count_prompt; /* as in rn_prompt_chat_t */
    rn_prompt_opts_t opts;
} rn_prompt_gen_t;

/* Which bytes of the prompt may be read as control tokens. Trusted: the
 * template's own text and literals, the model's Modelfile data (SYSTEM,
 * MESSAGE, its TEMPLATE: whoever wrote the Modelfile wrote the template,
 * so could put the tokens there anyway), the detokenized `context` (the client may send
 * those ids directly anyway) and the whole prompt in raw mode (the client
 * asked for it verbatim). Untrusted: everything printed out of request
 * data: message roles, contents and thinking, the request's system and
 * prompt/suffix, tools, tool calls and results, and anything a template
 * function computed from them. A request `template` is executed like the
 * model's: its literal text is trusted (the client wrote the whole
 * template, so it could write the tokens there anyway). Tokenize with
 * rn_prompt_tokenize (prompt_tokens.h). */
typedef rn_tmpl_span_t rn_prompt_span_t;

typedef struct rn_prompt_result {
    char *text;            /* the prompt; owned (free with rn_prompt_result_free) */
    size_t len;            /* bytes of text */
    /* Ascending, adjacent, non-empty spans covering text[0..len) exactly
     * (none when len is 0); owned like text. */
    rn_prompt_span_t *spans;
    size_t n_spans;
    size_t n_images;       /* images the prompt refers to as [img-0], [img-1], ... */
    size_t images_skipped; /* images of dropped messages: [img-k] is the request's
                            * (images_skipped + k)-th image in message order */
    size_t msgs_dropped;   /* leading messages dropped to fit num_ctx */
} rn_prompt_result_t;

/* Builds the chat prompt. On success *out is filled (caller frees with
 * rn_prompt_result_free). Errors: CR_E_INVALID for a template execution
 * error or malformed tools/tool_calls JSON (message names the field),
 * CR_E_TOO_LARGE over opts.max_bytes, the counter's own errors, CR_E_NOMEM.
 * *out is zeroed on error. */
cr_status_t rn_prompt_chat(const rn_prompt_chat_t *in, rn_prompt_result_t *out, cr_err_t *err);

/* Builds the generate prompt: raw -> the prompt as is (CR_E_INVALID "raw
 * mode does not support template, system, or context" when combined with
 * those); suffix -> the suffix mode; otherwise messages [system] + [model
 * MESSAGEs unless context] + user(prompt, images), rendered like chat
 * (tools empty) unless the template came from the request. The context
 * text, when given, is prepended. Errors and ownership as rn_prompt_chat. */
cr_status_t rn_prompt_generate(const rn_prompt_gen_t *in, rn_prompt_result_t *out,
                               cr_err_t *err);

/* Frees the text and spans and zeroes the result; accepts NULL. */
void rn_prompt_result_free(rn_prompt_result_t *r);

/* Ollama's template.Execute(Values): renders msgs (collated here), tools
 * (NULL = nil), prompt/suffix and think into out, choosing the mode as
 * described above. No truncation and no image tags. Errors as
 * rn_prompt_chat. */
typedef struct rn_prompt_values {
    const rn_prompt_msg_t *msgs;
    size_t n_msgs;
    const json_t *tools;
    const char *prompt;
    const char *suffix;
    rn_prompt_think_t think;
} rn_prompt_values_t;

cr_status_t rn_prompt_render(const rn_tmpl_t *tmpl, const rn_prompt_values_t *v,
                             const rn_prompt_opts_t *opts, cr_buf_t *out, cr_err_t *err);

/* Converts request tools JSON into the template's .Tools value (Ollama's
 * templateTools: tools, functions and their property maps print as JSON).
 * NULL tools gives a nil list. Caller owns *out. CR_E_INVALID names the
 * offending field ("tools[0].function.name: expected a string"). */
cr_status_t rn_prompt_tools_value(const json_t *tools, rn_val_t **out, cr_err_t *err);

#endif
