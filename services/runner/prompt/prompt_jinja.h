/* prompt_jinja.h: the chat prompt from the model's own Jinja chat template
 * (a GGUF's tokenizer.chat_template, when no Go template applies).
 *
 * Owns mapping a chat request onto the context Hugging Face's
 * apply_chat_template gives a template: `messages` (role, content;
 * thinking as `reasoning_content`; tool calls as
 * [{id, type: "function", function: {name, arguments}}]; a tool result's
 * tool_name as `name` and its tool_call_id), `tools`, `add_generation_prompt`,
 * `bos_token`/`eos_token` (the vocabulary's texts) and, when the request
 * says, `enable_thinking` and `reasoning_effort`; dropping old history to fit
 * num_ctx as prompt.c does; the trust spans (request text is untrusted
 * through every string operation of the template: jinja's taint), and
 * dropping a leading BOS / trailing EOS text the tokenizer adds itself. It
 * also infers, from the template's text, the thinking tags and the tool-call
 * tag the output stages split the answer by. Images are not placed (the
 * engine refuses them). */
#ifndef RN_PROMPT_JINJA_H
#define RN_PROMPT_JINJA_H

#include "lib/prelude.h"
#include "services/runner/jinja/jinja.h"
#include "services/runner/prompt/prompt.h"

typedef struct rn_prompt_jinja {
    const jj_template_t *tmpl;          /* required */
    const char *bos_token, *eos_token;  /* vocabulary texts; NULL = "" */
    bool strip_bos, strip_eos;          /* the tokenizer adds them itself */
    const char *model_system;           /* model SYSTEM, NULL/"" for none */
    const rn_prompt_msg_t *model_msgs;  /* Modelfile MESSAGEs (trusted) */
    size_t n_model_msgs;
    const rn_prompt_msg_t *msgs;        /* the request's (untrusted) */
    size_t n_msgs;
    const json_t *tools;                /* request tools (array) or NULL */
    rn_prompt_think_t think;
    rn_prompt_fit_t fit;
    rn_prompt_count_spans_fn count_prompt;
    rn_prompt_opts_t opts;
} rn_prompt_jinja_t;

/* Builds the chat prompt through the Jinja template. On success *out is
 * filled (caller frees with rn_prompt_result_free; n_images is 0).
 * Errors: CR_E_INVALID "chat template: <Jinja2's error>" when the template
 * fails or refuses the conversation (raise_exception), CR_E_TOO_LARGE
 * over a budget, the counter's errors, CR_E_NOMEM. *out is zeroed on
 * error. */
cr_status_t rn_prompt_jinja_chat(const rn_prompt_jinja_t *in, rn_prompt_result_t *out,
                                 cr_err_t *err);


#endif
