/* parser.h: the built-in output parsers a model can name (Modelfile
 * PARSER; names in lib/chat_formats.h), behind one small interface.
 *
 * A built-in parser replaces the template-inferred stages (thinking.c and
 * toolcalls.c) for a model that names one: it knows its model's output
 * format and splits the generated text itself into content, thinking and
 * tool calls:
 *   - "harmony" (gpt-oss): messages `<|start|>ROLE<|channel|>CH ...
 *     <|message|>BODY<|end|>`; analysis bodies are thinking, final (and
 *     commentary without a recipient) bodies are content, a body addressed
 *     `to=functions.NAME` is a call whose arguments are its JSON;
 *   - "qwen3-coder": content with `<tool_call><function=NAME>
 *     <parameter=ARG>VALUE</parameter></function></tool_call>` blocks,
 *     values typed by the tool's JSON schema.
 * Text is fed one piece at a time; a partial marker at the end of a piece
 * is held back until the next piece decides it, so no marker text ever
 * reaches content, and the split does not depend on how the text was cut.
 *
 * Memory: each parser holds a bounded buffer (RN_PARSER_HOLD_BYTES) and its
 * tools' names, allocated at construction; completing a call parses its
 * arguments (jansson), once per call. Knows nothing of tokens or the bus. */
#ifndef RN_PARSER_H
#define RN_PARSER_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

#include <jansson.h>

#define RN_PARSER_HOLD_BYTES (256 * 1024) /* text one parser may hold */

typedef struct rn_parser rn_parser_t;

/* Where a push or finish puts its results. Nothing is reset first. calls
 * receives one JSON array of the calls completed by this push (Ollama's
 * shape, see calljson.h), nothing when none: pass it empty. */
typedef struct rn_parser_out {
    cr_buf_t *content;
    cr_buf_t *thinking;
    cr_buf_t *calls;
} rn_parser_out_t;

/* What a parser is told of the request. */
typedef struct rn_parser_init {
    const char *tools_json;     /* the request's tools array; NULL/"" none */
    /* The chat's last message, when it is the assistant's (a prefill the
     * answer continues); NULL role otherwise. */
    const char *last_role;
    const char *last_content;
    const char *last_thinking;
    uint64_t seed;              /* call ids; 0 = from the clock */
} rn_parser_init_t;

/* The parser named name. NULL with CR_E_INVALID for an unknown name ("unknown
 * parser \"x\"") or bad tools JSON (the message names the field),
 * CR_E_NOMEM. Caller owns; free with rn_parser_destroy. */
rn_parser_t *rn_parser_new(const char *name, const rn_parser_init_t *in,
                           cr_err_t *err);

/* True if name is one of the parsers above. */
bool rn_parser_is_known(const char *name);

/* Frees; accepts NULL and *self_p == NULL; sets *self_p = NULL. */
void rn_parser_destroy(rn_parser_t **self_p);

/* Feeds len bytes of generated text. CR_E_INVALID for output the format
 * cannot hold (a call whose arguments do not parse: err says which, as
 * Ollama's "error parsing tool call: raw='...'"), CR_E_TOO_LARGE past the
 * hold cap, buffer errors as they come; the parser is then spent. */
cr_status_t rn_parser_push(rn_parser_t *p, const char *text, size_t len,
                           const rn_parser_out_t *out, cr_err_t *err);

/* End of generation: completes or releases what is held. Errors as push. */
cr_status_t rn_parser_finish(rn_parser_t *p, const rn_parser_out_t *out,
                             cr_err_t *err);

/* Calls completed so far. */
int rn_parser_tool_calls(const rn_parser_t *p);

/* Stop strings the format ends an answer with beyond the vocabulary's own
 * end tokens (harmony: "<|return|>", "<|call|>"); a NULL-terminated static
 * list, empty for unknown names. */
const char *const *rn_parser_stops(const char *name);

/* ---- for the implementations (parser_*.c) ---- */

typedef struct rn_parser_ops {
    const char *name;
    /* Builds the parser's own state into *state. */
    cr_status_t (*init)(rn_parser_t *p, const rn_parser_init_t *in, void **state,
                        cr_err_t *err);
    void (*destroy)(void *state);
    cr_status_t (*push)(rn_parser_t *p, void *state, const char *text, size_t len,
                        const rn_parser_out_t *out, cr_err_t *err);
    cr_status_t (*finish)(rn_parser_t *p, void *state, const rn_parser_out_t *out,
                          cr_err_t *err);
    const char *const *stops;
} rn_parser_ops_t;

extern const rn_parser_ops_t rn_parser_harmony_ops;
extern const rn_parser_ops_t rn_parser_qwen3coder_ops;

/* The request's tools as parsed JSON (NULL without tools), borrowed. */
const json_t *rn_parser_tools(const rn_parser_t *p);

/* Appends a completed call (name, parsed arguments object) to out->calls as
 * the next call of the answer. Buffer errors. */
cr_status_t rn_parser_emit_call(rn_parser_t *p, const rn_parser_out_t *out,
                                const char *name, size_t name_len,
                                const json_t *args);

#endif
