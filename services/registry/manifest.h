/* manifest.h: the manifest JSON of a stored model (§6.3 of the API
 * reference): a config layer and the model's layers, by media type.
 *
 * Parsing is strict about what corral uses (every digest well formed, sizes
 * non-negative, counts bounded) and ignores fields it does not know, so
 * manifests pulled from a registry or written by Ollama read fine. Encoding
 * writes Ollama's field order. Knows nothing of the disk. */
#ifndef REG_MANIFEST_H
#define REG_MANIFEST_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "services/registry/store.h"

#define REG_MT_MANIFEST "application/vnd.docker.distribution.manifest.v2+json"
#define REG_MT_CONFIG "application/vnd.docker.container.image.v1+json"
#define REG_MT_MODEL "application/vnd.ollama.image.model"
#define REG_MT_PROJECTOR "application/vnd.ollama.image.projector"
#define REG_MT_ADAPTER "application/vnd.ollama.image.adapter"
#define REG_MT_TEMPLATE "application/vnd.ollama.image.template"
#define REG_MT_PROMPT "application/vnd.ollama.image.prompt" /* legacy template */
#define REG_MT_SYSTEM "application/vnd.ollama.image.system"
#define REG_MT_PARAMS "application/vnd.ollama.image.params"
#define REG_MT_MESSAGES "application/vnd.ollama.image.messages"
#define REG_MT_LICENSE "application/vnd.ollama.image.license"
#define REG_MT_DRAFT "application/vnd.ollama.image.draft" /* draft model GGUF */
#define REG_MT_EMBED "application/vnd.ollama.image.embed" /* obsolete */

#define REG_MAX_LAYERS 65536        /* layers in one manifest */
#define REG_MAX_MEDIA_TYPE 255      /* bytes of a media type */
#define REG_MAX_LAYER_NAME 4096     /* bytes of a layer's from/name */

typedef struct reg_layer {
    char *media_type;           /* owned */
    char hex[REG_HEX_LEN + 1];  /* lower-case sha256 hex */
    int64_t size;               /* bytes of the blob */
    char *from;                 /* owned; NULL if absent */
    char *name;                 /* owned; NULL if absent */
} reg_layer_t;

typedef struct reg_manifest {
    int64_t schema_version;  /* 2 */
    char *media_type;        /* owned */
    reg_layer_t config;
    reg_layer_t *layers;     /* owned, n_layers entries */
    size_t n_layers;
} reg_manifest_t;

/* Parses manifest JSON. On success *out owns its strings (free with
 * reg_manifest_free). CR_E_CORRUPT naming the field otherwise, e.g.
 * "manifest: layers[2].digest: invalid digest format"; *out is left empty. */
cr_status_t reg_manifest_parse(const char *data, size_t len,
                               reg_manifest_t *out, cr_err_t *err);

/* An empty schema-2 manifest (no config, no layers). */
cr_status_t reg_manifest_init(reg_manifest_t *m);

void reg_manifest_free(reg_manifest_t *m);

/* Appends the manifest as JSON plus a newline (Go's json.Encoder form). */
cr_status_t reg_manifest_encode(const reg_manifest_t *m, cr_buf_t *out);

/* Sum of layer sizes and the config size. */
int64_t reg_manifest_total_size(const reg_manifest_t *m);

/* First layer of media type mt, or NULL. */
const reg_layer_t *reg_manifest_find(const reg_manifest_t *m, const char *mt);

/* Appends a layer (strings copied; from/name may be NULL). */
cr_status_t reg_manifest_add(reg_manifest_t *m, const char *mt,
                             const char *hex, int64_t size, const char *from,
                             const char *name);

/* Removes every layer of media type mt. */
void reg_manifest_remove(reg_manifest_t *m, const char *mt);

/* Sets the config layer. */
cr_status_t reg_manifest_set_config(reg_manifest_t *m, const char *hex,
                                    int64_t size);

/* True if the manifest references hex (a layer or the config). */
bool reg_manifest_references(const reg_manifest_t *m, const char *hex);

#endif
