/* show.h: the /api/show response body and the Modelfile text in it
 * (§1.9 and §8 of the API reference).
 *
 * Reads the model (model.h) and its GGUF metadata (lib/gguf.h); writes
 * nothing. */
#ifndef REG_SHOW_H
#define REG_SHOW_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/registry/model.h"
#include "services/registry/store.h"

#include <jansson.h>

/* The template a model without a template layer gets (as Ollama). */
#define REG_DEFAULT_TEMPLATE "{{ .Prompt }}"

/* Appends the show body (a JSON object, Ollama's field order) for m.
 * verbose keeps long arrays in model_info; system (may be NULL/"")
 * replaces the model's system prompt in the output; opts (may be NULL) are
 * merged into the Modelfile's PARAMETER lines only (as Ollama does).
 * CR_E_CORRUPT if the GGUF cannot be read (err says why), CR_E_NOMEM. */
cr_status_t reg_show_body(const reg_store_t *s, const reg_model_t *m,
                          bool verbose, const char *system,
                          const msg_options_t *opts, cr_buf_t *out,
                          cr_err_t *err);

/* Appends the Modelfile text: the comment header, FROM <blob path>,
 * ADAPTER lines, FROM <projector>, TEMPLATE, SYSTEM, PARAMETER (sorted; one
 * line per stop), LICENSE, MESSAGE, values quoted per §8. params may be
 * NULL; system NULL means the model's own. With jinja (the GGUF's Jinja
 * chat template applies, reg_model_jinja_template) there is no TEMPLATE
 * line, so a model created from the text keeps using it. */
cr_status_t reg_modelfile_text(const reg_store_t *s, const reg_model_t *m,
                               const char *system, const json_t *params, bool jinja,
                               cr_buf_t *out);

/* Appends v quoted as a Modelfile value: `"""v"""` if it has a newline or
 * an edge space and a '"', `"v"` if it only has a newline or edge space,
 * else v as is. */
cr_status_t reg_modelfile_quote(const char *v, cr_buf_t *out);

#endif
