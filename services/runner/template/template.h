/* template.h: the Go text/template subset that Ollama model templates use,
 * and the small dynamic value type templates run on.
 *
 * This module owns parsing a template (untrusted: it comes from a model file
 * or a request), executing it over a value tree into a bounded buffer, and
 * the value type itself: how values print (Go's fmt %v), marshal (Go's
 * encoding/json) and convert from JSON. It knows nothing about chat messages
 * or tokens: prompt.c builds the data Ollama passes to its templates.
 *
 * Supported: text and actions with {{- -}} trimming, comments, pipelines
 * with `|`, parenthesized sub-pipelines, fields (.A.B), variables ($, $x,
 * `$x := p`, `$x = p`, `range $i, $e := p`), if/else if/else, range (with
 * else, break, continue; over lists, maps and ints), with/else with,
 * define/template/block, literals (strings with escapes, raw strings,
 * chars, ints, floats, true/false/nil) and the builtins and, or, not, len,
 * index, slice, eq, ne, lt, le, gt, ge, print, printf, println, html, js,
 * urlquery, call, plus Ollama's json, currentDate, yesterdayDate and
 * toTypeScriptType. Methods on values are not supported.
 *
 * Errors read like Go's: "template: :3: function \"foo\" not defined" for
 * parse errors, "template: :1:3: executing \"\" at <.Foo>: can't evaluate
 * field Foo in type string" for execution errors.
 *
 * Trust: values carry RN_VAL_F_TRUSTED or not, and an execution can
 * record which output bytes came from template text and trusted values
 * and which from printing other (request) data (rn_tmpl_spans_t), so the
 * caller can keep control-token text in request data from being parsed.
 *
 * Limits (untrusted input): source size, parse nesting, execution depth
 * (nested actions and template calls), an execution step budget and the
 * output buffer's own max_bytes. */
#ifndef RN_TEMPLATE_H
#define RN_TEMPLATE_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

#include <jansson.h>

/* ------------------------------------------------------------------ */
/* Values                                                              */
/* ------------------------------------------------------------------ */

/* A reference-counted dynamic value. Values form a tree (a value may be
 * shared, never contain itself). Reference counts are not atomic: a value
 * tree belongs to one thread at a time. */
typedef struct rn_val rn_val_t;

typedef enum rn_val_kind {
    RN_VAL_NIL = 0, /* Go's untyped nil / a missing map key */
    RN_VAL_BOOL,
    RN_VAL_INT,    /* int64 */
    RN_VAL_FLOAT,  /* float64 */
    RN_VAL_STRING, /* bytes, not necessarily UTF-8 */
    RN_VAL_LIST,   /* Go slice */
    RN_VAL_MAP,    /* Go map[string]any: missing keys read as nil */
    RN_VAL_STRUCT, /* Go struct: fixed fields, a missing field is an error */
} rn_val_kind_t;

/* Flags for lists, maps and structs (bitwise or). */
enum {
    /* A typed nil slice or map: empty, false, marshals to JSON null. */
    RN_VAL_F_NIL = 1u << 0,
    /* Prints as its JSON encoding, like Go types whose String() method
     * marshals themselves (Ollama's tools and tool-call arguments). A nil
     * map with this flag prints "{}". */
    RN_VAL_F_JSON_PRINT = 1u << 1,
    /* Maps only: JSON and range keep insertion order instead of sorting
     * keys (an ordered map); printing with %v also keeps the order. */
    RN_VAL_F_ORDERED = 1u << 2,
    /* Structs only: a pointer to the struct; %v prints "&{...}". */
    RN_VAL_F_POINTER = 1u << 3,
    /* Any kind: the value's printed text is trusted, i.e. may be read as
     * control tokens ("<|eot_id|>") when the prompt is tokenized. Values
     * without it are request data and print into untrusted spans (see
     * rn_tmpl_spans_t). Template literals get it from the executor; the
     * prompt builder sets it on the model's own data (Modelfile SYSTEM and
     * MESSAGEs). Containers print trusted only when they carry it
     * themselves; nil, bools and numbers always print trusted (their text
     * is not chosen by a client). */
    RN_VAL_F_TRUSTED = 1u << 4,
};

/* Struct field flags. */
enum {
    RN_FIELD_OMITEMPTY = 1u << 0, /* encoding/json omitempty */
};

/* Limits on untrusted values. */
#define RN_VAL_MAX_DEPTH 128 /* nesting of lists/maps/structs */

/* The shared nil value: never NULL, never freed; rn_val_destroy on it is
 * harmless. */
rn_val_t *rn_val_nil(void);

/* Scalar constructors. Each returns a new reference (caller owns; drop
 * with rn_val_destroy) or NULL when allocation fails. */
rn_val_t *rn_val_bool_new(bool b);
rn_val_t *rn_val_int_new(int64_t i);
rn_val_t *rn_val_float_new(double f);
rn_val_t *rn_val_str_new(const char *s);            /* copies; NULL s = "" */
rn_val_t *rn_val_strn_new(const char *s, size_t n); /* copies n bytes */

/* Container constructors: empty, with RN_VAL_F_* flags. type_name is what
 * execution errors call the struct ("*template.templateMessage"); copied. */
rn_val_t *rn_val_list_new(unsigned flags);
rn_val_t *rn_val_map_new(unsigned flags);
rn_val_t *rn_val_struct_new(const char *type_name, unsigned flags);

/* Sets RN_VAL_F_TRUSTED on v and returns it (NULL and the shared nil pass
 * through unchanged). Only for a value the caller just created: flags are
 * not copied on write, so marking a shared value marks it everywhere. */
rn_val_t *rn_val_trust(rn_val_t *v);

/* Whether v prints as trusted text (see RN_VAL_F_TRUSTED). */
bool rn_val_is_trusted(const rn_val_t *v);

/* Adds a reference: returns v. */
rn_val_t *rn_val_ref(rn_val_t *v);

/* Drops the caller's reference (freeing the value at zero) and sets
 * *v_p = NULL. Accepts NULL and *v_p == NULL. */
void rn_val_destroy(rn_val_t **v_p);

/* Container mutation. Each takes ownership of *item_p (always, even on
 * failure) and sets *item_p = NULL; a NULL *item_p (a failed constructor)
 * yields CR_E_NOMEM, so constructors can be passed straight in.
 * Errors: CR_E_NOMEM; CR_E_INVALID when the container has the wrong kind
 * or the item would make a cycle. */
cr_status_t rn_val_list_push(rn_val_t *list, rn_val_t **item_p);
/* Sets key (replacing an existing entry in place). */
cr_status_t rn_val_map_set(rn_val_t *map, const char *key, rn_val_t **item_p);
/* Appends a field. json_name NULL means the Go name; "-" means never
 * marshalled. field_flags: RN_FIELD_*. */
cr_status_t rn_val_struct_add(rn_val_t *st, const char *name,
                              const char *json_name, unsigned field_flags,
                              rn_val_t **item_p);

/* Accessors (all borrow; NULL v reads as nil). */
rn_val_kind_t rn_val_kind(const rn_val_t *v);
unsigned rn_val_flags(const rn_val_t *v);
bool rn_val_as_bool(const rn_val_t *v);        /* false unless BOOL */
int64_t rn_val_as_int(const rn_val_t *v);      /* 0 unless INT */
double rn_val_as_float(const rn_val_t *v);     /* 0 unless FLOAT */
const char *rn_val_as_str(const rn_val_t *v);  /* "" unless STRING */
size_t rn_val_str_len(const rn_val_t *v);      /* 0 unless STRING */
/* Entries of a list, map or struct (0 for others). */
size_t rn_val_len(const rn_val_t *v);
/* The i-th element of a list or the i-th entry value of a map/struct, in
 * insertion order; NULL past the end. Borrowed. */
rn_val_t *rn_val_at(const rn_val_t *v, size_t i);
/* The i-th key of a map or field name of a struct; NULL otherwise. */
const char *rn_val_key_at(const rn_val_t *v, size_t i);
/* The value under key in a map or struct; NULL when absent. Borrowed. */
rn_val_t *rn_val_get(const rn_val_t *v, const char *key);
/* Go's truth: false for nil, false, 0, "", empty containers. */
bool rn_val_truth(const rn_val_t *v);

/* Options for rn_val_from_json. */
enum {
    /* Objects keep their key order (RN_VAL_F_ORDERED); default: Go map
     * semantics with sorted keys, as Go's `any` decoding gives. */
    RN_JSON_ORDERED = 1u << 0,
    /* Integers stay RN_VAL_INT; default: every number is a float64, as
     * Go's `any` decoding gives. */
    RN_JSON_KEEP_INTS = 1u << 1,
    /* The outermost list or map gets RN_VAL_F_JSON_PRINT. */
    RN_JSON_TOP_PRINTS_JSON = 1u << 2,
};

/* Converts JSON into a value (caller owns *out). Errors: CR_E_TOO_LARGE
 * deeper than RN_VAL_MAX_DEPTH, CR_E_NOMEM. */
cr_status_t rn_val_from_json(const json_t *j, unsigned opts, rn_val_t **out,
                             cr_err_t *err);

/* Appends v as Go's json.Marshal writes it (compact; <, >, & escaped as
 * \u003c...; struct fields in order with omitempty; map keys sorted unless
 * ordered). CR_E_INVALID for NaN/Inf or too deep; CR_E_TOO_LARGE when out
 * is full. */
cr_status_t rn_val_to_json(const rn_val_t *v, cr_buf_t *out);

/* Appends v as Go's fmt.Print writes it (%v): nil "<nil>", lists "[a b]",
 * maps "map[k:v]", structs "{a b}", floats %g-style ("1e+06"). */
cr_status_t rn_val_print(const rn_val_t *v, cr_buf_t *out);

/* ------------------------------------------------------------------ */
/* Templates                                                           */
/* ------------------------------------------------------------------ */

typedef struct rn_tmpl rn_tmpl_t;

#define RN_TMPL_MAX_SOURCE (4u << 20)  /* bytes of template text */
#define RN_TMPL_MAX_NESTING 100        /* parse nesting of blocks and parens */
#define RN_TMPL_MAX_EXEC_DEPTH 256     /* nested walks + template calls */
#define RN_TMPL_DEFAULT_STEPS 20000000 /* execution step budget */

/* Parses a template the way Ollama does: Go syntax, missingkey=zero, and
 * `{{ .Response }}` appended when the template references neither
 * Messages nor Response. On success *out is owned by the caller (free
 * with rn_tmpl_destroy). Errors: CR_E_INVALID with "template: :LINE: ..."
 * in err; CR_E_TOO_LARGE for source over RN_TMPL_MAX_SOURCE; CR_E_NOMEM. */
cr_status_t rn_tmpl_parse(const char *src, size_t len, rn_tmpl_t **out,
                          cr_err_t *err);

/* Parses as Go does, without Ollama's appended {{ .Response }}. */
cr_status_t rn_tmpl_parse_plain(const char *src, size_t len, rn_tmpl_t **out,
                                cr_err_t *err);

/* Frees the template and sets *self_p = NULL; accepts NULL. */
void rn_tmpl_destroy(rn_tmpl_t **self_p);

/* The source text as given (borrowed; valid until destroy). */
const char *rn_tmpl_source(const rn_tmpl_t *t);

/* Whether an identifier appears in a field or variable anywhere in the
 * template (or its defined templates), compared case-insensitively: this
 * is Ollama's Vars() test, e.g. rn_tmpl_uses(t, "messages"). */
bool rn_tmpl_uses(const rn_tmpl_t *t, const char *ident);

/* Where the output came from, for tokenizing it safely: each span is a
 * byte range of the output buffer (offsets from out->data, so text already
 * in the buffer before execution is not covered) that was written either
 * by template text and trusted values (trusted) or by printing request
 * data (untrusted). Adjacent spans of the same kind are merged and empty
 * ones are not recorded, so spans ascend without gaps over what the
 * execution wrote. */
typedef struct rn_tmpl_span {
    size_t offset;
    size_t len;
    bool trusted;
} rn_tmpl_span_t;

typedef struct rn_tmpl_spans {
    rn_tmpl_span_t *v; /* owned; free with rn_tmpl_spans_free */
    size_t n, cap;
} rn_tmpl_spans_t;

/* Records [offset, offset+len) as trusted or not, merging with the last
 * span when it is adjacent and of the same kind; len 0 records nothing.
 * Offsets must not go backwards (CR_E_INVALID). CR_E_NOMEM. */
cr_status_t rn_tmpl_spans_add(rn_tmpl_spans_t *s, size_t offset, size_t len, bool trusted);

/* Frees the array and zeroes s; accepts NULL. */
void rn_tmpl_spans_free(rn_tmpl_spans_t *s);

typedef struct rn_tmpl_opts {
    uint64_t max_steps; /* 0 = RN_TMPL_DEFAULT_STEPS */
    int64_t now_unix;   /* clock for currentDate; 0 = time(NULL) */
    /* Execute the legacy "cut" tree: everything after the first
     * .Response field (in tree order) removed, as Ollama renders the
     * final turn of a legacy template. */
    bool cut_after_response;
    /* When set, every byte the execution appends is recorded here (see
     * rn_tmpl_span_t); on error the spans cover what was written. */
    rn_tmpl_spans_t *spans;
} rn_tmpl_opts_t;

/* Executes t over data (borrowed; `.` and `$` start there; its reference
 * counts are touched, so data must not be in use by another thread),
 * appending to out, whose max_bytes bounds the output. opts may be NULL.
 * One template may run in several threads at once. On error out keeps
 * what was written before the failing action.
 * Errors: CR_E_INVALID (execution error; message names line and action),
 * CR_E_TOO_LARGE (output over out->max_bytes, or step budget or depth
 * exceeded), CR_E_NOMEM. */
cr_status_t rn_tmpl_exec(const rn_tmpl_t *t, rn_val_t *data,
                         const rn_tmpl_opts_t *opts, cr_buf_t *out,
                         cr_err_t *err);

/* Tags inferred from the template for the output parsers (§12).
 * rn_tmpl_tool_tag: the first non-blank literal text inside the first
 * `{{ if ... .ToolCalls ... }}` block, cut before any '{' and trimmed; "{"
 * when there is none. Writes a NUL-terminated string into tag (truncated
 * to cap). */
void rn_tmpl_tool_tag(const rn_tmpl_t *t, char *tag, size_t cap);

/* rn_tmpl_thinking_tags: the trimmed first and last literal texts of the
 * list that holds a `.Thinking` field inside a range over Messages; empty
 * strings when not found. */
void rn_tmpl_thinking_tags(const rn_tmpl_t *t, char *open, size_t open_cap,
                           char *close, size_t close_cap);

#endif
