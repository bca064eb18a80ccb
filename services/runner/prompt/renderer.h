/* renderer.h: the built-in prompt renderers a model can name (Modelfile
 * RENDERER; names in lib/chat_formats.h), used instead of its template.
 *
 * A renderer turns a chat (messages as the request and the model give
 * them, not collated; tools; think) into the whole prompt, ending where the
 * model goes on, as Ollama's Go renderers do:
 *   - "harmony": gpt-oss's format, as Ollama renders gpt-oss (its gpt-oss
 *     template): system message with knowledge cutoff, date and reasoning
 *     level, developer message with the tools as a TypeScript namespace and
 *     the instructions, then the messages and `<|start|>assistant`;
 *   - "qwen3-coder": ChatML with Qwen3-Coder's XML tool declarations and
 *     calls.
 * History truncation, trust spans and the result are prompt.c's: a
 * renderer only writes text, marking which bytes are its own (trusted) and
 * which are request data (rn_prompt_out_t). */
#ifndef RN_RENDERER_H
#define RN_RENDERER_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "services/runner/prompt/prompt.h"

#include <jansson.h>

/* Where a renderer writes: the text, and the trust spans when recorded. */
typedef struct rn_prompt_out {
    cr_buf_t *buf;
    rn_tmpl_spans_t *spans; /* NULL: not recorded */
} rn_prompt_out_t;

/* Appends the renderer's own text (trusted: control tokens in it count). */
cr_status_t rn_prompt_out_lit(const rn_prompt_out_t *o, const char *s);

/* Appends n bytes of data; trusted only when it is the model's own
 * (Modelfile SYSTEM and MESSAGEs), never the request's. */
cr_status_t rn_prompt_out_data(const rn_prompt_out_t *o, const char *s, size_t n,
                               bool trusted);

typedef cr_status_t (*rn_prompt_render_fn)(const rn_prompt_msg_t *msgs, size_t n,
                                           const json_t *tools,
                                           const rn_prompt_think_t *think,
                                           const rn_prompt_opts_t *opts,
                                           const rn_prompt_out_t *out, cr_err_t *err);

typedef struct rn_prompt_renderer {
    const char *name;
    rn_prompt_render_fn render; /* errors: the buffer's (CR_E_TOO_LARGE,
                                 * CR_E_NOMEM) with err set, CR_E_INVALID
                                 * for malformed tools/tool_calls */
} rn_prompt_renderer_t;

/* The renderer named name, or NULL. */
const rn_prompt_renderer_t *rn_prompt_renderer_find(const char *name);

extern const rn_prompt_renderer_t rn_prompt_renderer_harmony;
extern const rn_prompt_renderer_t rn_prompt_renderer_qwen3coder;

#endif
