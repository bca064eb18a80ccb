/* model_name.h: Ollama model names, `[scheme://][host/][namespace/]model[:tag]`.
 *
 * Owns the grammar (per-part character classes and lengths, §6.1 of the API
 * reference), the defaults (registry.ollama.ai / library / latest, scheme
 * https), the shortest display form, case-insensitive equality and the
 * relative path of a name's manifest in the store. It does not touch the
 * disk: finding the stored spelling of a name is the registry's job.
 *
 * Every part of a valid name starts with an ASCII letter, digit or '_' and
 * holds no '/', '\\' or NUL, so a valid name can never yield `.`, `..` or
 * an absolute path: the manifest path it produces stays inside the store. */
#ifndef CR_MODEL_NAME_H
#define CR_MODEL_NAME_H

#include "lib/prelude.h"
#include "lib/status.h"

#define CR_NAME_HOST_MAX 350 /* bytes of a host, e.g. "registry.ollama.ai" */
#define CR_NAME_NS_MAX 80    /* bytes of a namespace */
#define CR_NAME_MODEL_MAX 80 /* bytes of a model */
#define CR_NAME_TAG_MAX 80   /* bytes of a tag */
#define CR_NAME_SCHEME_MAX 5 /* "https" */
/* Longest text a parse accepts (scheme + all parts + separators). */
#define CR_NAME_TEXT_MAX                                                    \
    (CR_NAME_SCHEME_MAX + 3 + CR_NAME_HOST_MAX + 1 + CR_NAME_NS_MAX + 1 +   \
     CR_NAME_MODEL_MAX + 1 + CR_NAME_TAG_MAX)
/* Buffer size that holds any display or full form, with its NUL. */
#define CR_NAME_BUF (CR_NAME_TEXT_MAX + 1)

#define CR_NAME_DEFAULT_HOST "registry.ollama.ai"
#define CR_NAME_DEFAULT_NS "library"
#define CR_NAME_DEFAULT_TAG "latest"
#define CR_NAME_DEFAULT_SCHEME "https"

/* A parsed, valid name with defaults filled in. Parts keep the spelling
 * they were given (comparison ignores case). */
typedef struct cr_model_name {
    char scheme[CR_NAME_SCHEME_MAX + 1]; /* "https" or "http" */
    char host[CR_NAME_HOST_MAX + 1];
    char ns[CR_NAME_NS_MAX + 1];
    char model[CR_NAME_MODEL_MAX + 1];
    char tag[CR_NAME_TAG_MAX + 1];
} cr_model_name_t;

/* The message of every parse error, as Ollama returns it (HTTP 400). */
#define CR_NAME_INVALID_MSG "invalid model name"

/* Parses text (NUL-terminated) into *out. CR_E_INVALID with err->msg exactly
 * CR_NAME_INVALID_MSG if any part is empty, too long or has a character its
 * class forbids (cr_model_name_why() says which). *out is zeroed on error. */
cr_status_t cr_model_name_parse(const char *text, cr_model_name_t *out,
                                cr_err_t *err);

/* Same over len bytes that need not be NUL-terminated; an embedded NUL is
 * invalid. */
cr_status_t cr_model_name_parse_n(const char *text, size_t len,
                                  cr_model_name_t *out, cr_err_t *err);

/* Why text does not parse, for logs and tests: e.g. "host 'a/..' has
 * invalid character '/' at 1", "tag is empty", "name is longer than 1001
 * bytes"; "" if it is valid. Returns buf. */
char *cr_model_name_why(const char *text, size_t len, char *buf, size_t cap);

/* True if text parses. */
bool cr_model_name_is_valid(const char *text);

/* Shortest display form into buf: host and namespace omitted when default
 * (compared ignoring case), tag always shown: "llama3.2:latest",
 * "user/m:tag", "host/ns/m:tag". Truncated to cap-1 (CR_NAME_BUF always
 * fits). Returns buf. */
char *cr_model_name_display(const cr_model_name_t *n, char *buf, size_t cap);

/* Full form "host/ns/model:tag" into buf. Returns buf. */
char *cr_model_name_full(const cr_model_name_t *n, char *buf, size_t cap);

/* Case-insensitive equality of host, namespace, model and tag (the scheme is
 * not part of a model's identity). */
bool cr_model_name_equal(const cr_model_name_t *a, const cr_model_name_t *b);

/* The four path parts of the manifest, relative to <store>/manifests:
 * parts[0..3] = host, ns, model, tag (borrowed from n). Each is a single
 * safe path component. */
void cr_model_name_path_parts(const cr_model_name_t *n, const char *parts[4]);

/* "manifests/<host>/<ns>/<model>/<tag>" into buf. Returns false if it does
 * not fit. */
bool cr_model_name_manifest_relpath(const cr_model_name_t *n, char *buf,
                                    size_t cap);

#endif
