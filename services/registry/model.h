/* model.h: one stored model as the registry's operations see it: its
 * manifest, the small layers read into memory (template, system, params,
 * messages, licenses, config) and what follows from them (details,
 * capabilities).
 *
 * Loading is read-only; every blob is read with a size cap. A model's GGUF
 * weights are not opened here (callers open them with cr_gguf_open when
 * they need metadata). */
#ifndef REG_MODEL_H
#define REG_MODEL_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/model_name.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/registry/manifest.h"
#include "services/registry/store.h"

#include <jansson.h>
#include <time.h>

#define REG_TEXT_LAYER_MAX (4u << 20)      /* template, system, license */
#define REG_PARAMS_LAYER_MAX (1u << 20)    /* params JSON */
#define REG_MESSAGES_LAYER_MAX (32u << 20) /* messages JSON */
#define REG_CONFIG_MAX (1u << 20)          /* config blob */
#define REG_MESSAGES_MAX 4096              /* stored MESSAGEs, at create */
#define REG_MAX_CAPS 8

typedef struct reg_model {
    cr_model_name_t name;           /* as stored */
    char display[CR_NAME_BUF];      /* shortest form: "llama3:latest" */
    char digest[REG_HEX_LEN + 1];   /* sha256 of the manifest file bytes */
    struct timespec mtime;          /* manifest file mtime */
    reg_manifest_t manifest;
    const reg_layer_t *model_layer; /* first model layer; NULL if none */
    char *template_text;            /* owned; NULL without a template layer */
    char *system_text;              /* owned; NULL without a system layer */
    json_t *params;                 /* owned object; NULL without params */
    json_t *messages;               /* owned array; NULL without messages */
    char **licenses;                /* owned, n_licenses texts */
    size_t n_licenses;
    json_t *config;                 /* owned object; NULL if unreadable */
} reg_model_t;

/* Loads the model named want (matched ignoring case). Caller owns *out
 * (reg_model_destroy). CR_E_NOT_FOUND if there is no such manifest;
 * CR_E_CORRUPT for a bad manifest or layer; CR_E_IO. A config blob that is
 * missing or not JSON leaves config NULL (the model still loads). */
cr_status_t reg_model_load(const reg_store_t *s, const cr_model_name_t *want,
                           reg_model_t **out, cr_err_t *err);

/* Same, but reads only the manifest and the config blob (no template,
 * system, params, messages or licenses): enough for tags. */
cr_status_t reg_model_load_meta(const reg_store_t *s,
                                const cr_model_name_t *want, reg_model_t **out,
                                cr_err_t *err);

void reg_model_destroy(reg_model_t **self_p);

/* A string field of the config blob ("model_format", ...), or "" . */
const char *reg_model_config_str(const reg_model_t *m, const char *key);

/* `details` as JSON in Ollama's field order (parent_model, format, family,
 * families, parameter_size, quantization_level). parent_model is the model
 * layer's `from` when with_parent, else "". Caller owns. */
json_t *reg_model_details_json(const reg_model_t *m, bool with_parent);

/* The same into a bus record; every string is copied into arena's arena
 * (so d outlives m). */
cr_status_t reg_model_details_msg(const reg_model_t *m, bool with_parent,
                                  msg_details_t *d, msg_t *arena);

/* True if the template uses field `field` (e.g. "Tools"), matched as Go's
 * template Vars() does: a `.Field` reference inside an action, ignoring
 * case. */
bool reg_template_uses(const char *tmpl, const char *field);

/* The Jinja chat template that applies to m: the GGUF's (g, may be NULL)
 * tokenizer.chat_template when m has no template layer and is not an
 * embedding model (the runner then renders it: services/runner/jinja). Fills *src (pointing into g's
 * mapping) and returns true, else false. */
bool reg_model_jinja_template(const reg_model_t *m, const cr_gguf_t *g, cr_gguf_str_t *src);

/* Capabilities in Ollama's order: completion or embedding (from the GGUF,
 * g may be NULL if it could not be opened: then neither), vision, tools
 * (template uses .Tools), insert (.Suffix), vision (projector layer, or a
 * complete tower in the model file: lib/vision_embedded.h),
 * thinking (.Thinking). With a Jinja template instead: tools when it reads
 * `tools`, thinking when it writes both <think> and </think> (what the
 * runner's output stages split by, prompt_jinja.h). Pointers are static
 * strings. Returns the count. */
size_t reg_model_capabilities(const reg_model_t *m, const cr_gguf_t *g,
                              const char *out[REG_MAX_CAPS]);

/* Absolute path of the blob of layer l into buf; false if it does not fit. */
bool reg_model_layer_path(const reg_store_t *s, const reg_layer_t *l,
                          char *buf, size_t cap);

#endif
