/* yaml.h: the YAML subset that compose files are written in, parsed into a
 * tree for tests/deploy's compose check. Not a general YAML library.
 *
 * Handled: block mappings and sequences (a sequence may sit at its key's
 * indentation), "- key: value" items, single-line flow collections ([a, b],
 * {k: v}), plain, 'single' and "double" quoted scalars, comments, one
 * leading "---", and a tag before a value (compose's !reset, !override).
 * Refused with a message naming the line, rather than misread: tabs in
 * indentation, anchors and aliases, block scalars (| and >), flow
 * collections over several lines, more than one document, duplicate keys,
 * inconsistent indentation. Inputs are bounded (size and depth). */
#ifndef DC_YAML_H
#define DC_YAML_H

#include "lib/prelude.h"
#include "lib/status.h"

#define DC_YAML_MAX_BYTES (1u << 20)
#define DC_YAML_MAX_DEPTH 64

typedef enum dc_yaml_kind {
    DC_YAML_NULL,   /* empty value, "null" or "~" */
    DC_YAML_SCALAR, /* text in str */
    DC_YAML_MAP,    /* keys[i] -> vals[i], keys unique, in file order */
    DC_YAML_SEQ,    /* vals[i] */
} dc_yaml_kind_t;

typedef struct dc_yaml {
    dc_yaml_kind_t kind;
    int line;        /* 1-based line where the node starts */
    char *tag;       /* "!reset" etc., or NULL */
    char *str;       /* DC_YAML_SCALAR: the unquoted text */
    bool quoted;     /* the scalar was quoted (so "true" is a string) */
    size_t n;        /* entries in keys/vals */
    char **keys;     /* DC_YAML_MAP only */
    struct dc_yaml **vals;
} dc_yaml_t;

/* Parses text (len bytes, need not be NUL-terminated). On success *out is
 * the root (caller owns; free with dc_yaml_free); an empty document is a
 * DC_YAML_NULL root. Errors (CR_E_CORRUPT, CR_E_UNSUPPORTED, CR_E_TOO_LARGE)
 * say "line N: ...". */
cr_status_t dc_yaml_parse(const char *text, size_t len, dc_yaml_t **out,
                          cr_err_t *err);

/* Frees a tree; accepts NULL; sets *node_p to NULL. */
void dc_yaml_free(dc_yaml_t **node_p);

/* The value of key in a map, or NULL (not a map, or no such key). */
const dc_yaml_t *dc_yaml_get(const dc_yaml_t *map, const char *key);

/* The scalar's text, or NULL when node is not a scalar. */
const char *dc_yaml_str(const dc_yaml_t *node);

#endif
