/* template_check.h: the create-time check of a GGUF's Jinja chat template.
 *
 * A model without a Go template is prompted through its GGUF's
 * tokenizer.chat_template by the runner's Jinja renderer. The registry
 * never links the engine, so it runs `corral-runner check-template --model
 * FILE` (the runner binary found as for quantize) and turns a template the
 * renderer cannot parse into a create error naming the construct, instead
 * of a load failure at chat time. */
#ifndef REG_TEMPLATE_CHECK_H
#define REG_TEMPLATE_CHECK_H

#include "lib/prelude.h"
#include "lib/status.h"

/* Checks gguf_path's chat template (none is fine). CR_OK; CR_E_INVALID
 * "chat template: <the renderer's error>"; CR_E_NOT_FOUND without a
 * corral-runner binary; CR_E_IO if it cannot be started; CR_E_RUNNER if
 * it failed otherwise (crashed, or is not a runner that knows the check). */
cr_status_t reg_template_check(const char *gguf_path, cr_err_t *err);

/* Checks that the Go template in file `path` (a TEMPLATE layer) parses as
 * the runner's engine parses it: CR_E_INVALID "template: <the parser's
 * error>"; other statuses as reg_template_check. */
cr_status_t reg_go_template_check(const char *path, cr_err_t *err);

/* Checks that the runner's engine runs the GGUF's architecture:
 * CR_E_INVALID "unsupported architecture 'x'"; other statuses as
 * reg_template_check. */
cr_status_t reg_model_arch_check(const char *gguf_path, cr_err_t *err);

#endif
