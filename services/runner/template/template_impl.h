/* template_impl.h: what the template_*.c files share and nothing else
 * includes: the value layout, the syntax tree, the arena the tree lives in,
 * and the execution state the builtins see.
 *
 * template_val.c    values: constructors, printing (%v), JSON
 * template_parse.c  lexer and parser -> tree
 * template_lit.c    Go literal syntax: string escapes, chars, numbers
 * template_tree.c   Ollama's touch-ups (Vars, appended Response, cut tree),
 *                   Node.String()
 * template_exec.c   walking the tree over values
 * template_funcs.c  the builtin functions (printf, eq, index, json, ...)
 * template_infer.c  tag inference from the tree (tool-call, thinking) */
#ifndef RN_TEMPLATE_IMPL_H
#define RN_TEMPLATE_IMPL_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "services/runner/template/template.h"

/* ---- values ---- */

typedef struct val_entry {
    char *key;       /* map key or Go field name */
    char *json_key;  /* structs: JSON name (NULL = key; "-" = skipped) */
    unsigned fflags; /* RN_FIELD_* */
    rn_val_t *val;   /* owned reference */
} val_entry_t;

#define VAL_IMMORTAL UINT32_MAX

struct rn_val {
    rn_val_kind_t kind;
    unsigned flags;
    uint32_t refs; /* VAL_IMMORTAL for the shared nil */
    union {
        bool b;
        int64_t i;
        double f;
        struct {
            char *p; /* owned, NUL-terminated */
            size_t len;
        } s;
        struct {
            rn_val_t **items;
            size_t len, cap;
        } list;
        struct {
            val_entry_t *ents;
            size_t len, cap;
            char *type_name; /* structs: owned */
        } map;               /* maps and structs */
    } u;
};

/* Appends without the cycle check or key lookup (builder paths that know
 * the item is fresh and the key new). Takes ownership of *item_p. */
cr_status_t rn_val_list_append(rn_val_t *list, rn_val_t **item_p);

/* Entry order for range and printing: insertion order for structs and
 * ordered maps, byte-wise sorted keys for Go maps. Fills idx[0..len) with
 * entry indices; idx must hold rn_val_len(v) entries. */
void rn_val_map_order(const rn_val_t *v, size_t *idx);

/* Go's name for v's type in messages ("string", "int", "[]interface {}",
 * "map[string]interface {}", the struct's type_name). */
const char *rn_val_type_name(const rn_val_t *v);

/* Appends a float the way fmt's %v (strconv 'g', shortest) writes it
 * (cr_float_format, CR_FLOAT_G). */
cr_status_t rn_val_fmt_float_g(double f, cr_buf_t *out);

/* %v printing with the nesting depth known: depth 0 is an action's value. */
cr_status_t rn_val_print_depth(const rn_val_t *v, cr_buf_t *out, int depth);

/* ---- arena: the tree and its strings, freed at once ---- */

typedef struct arena_chunk arena_chunk_t;
typedef struct arena {
    arena_chunk_t *head;
    size_t used_bytes; /* total handed out, for the source-size bound */
} arena_t;

void *rn_tmpl_arena_alloc(arena_t *a, size_t n); /* zeroed; NULL on OOM */
char *rn_tmpl_arena_strndup(arena_t *a, const char *s, size_t n);

/* ---- the syntax tree (mirrors Go's text/template/parse) ---- */

typedef enum tnode_type {
    TN_LIST,
    TN_TEXT,
    TN_ACTION,
    TN_IF,
    TN_RANGE,
    TN_WITH,
    TN_TEMPLATE,
    TN_BREAK,
    TN_CONTINUE,
    TN_PIPE,
    TN_COMMAND,
    TN_FIELD,  /* .A.B: idents "A","B" */
    TN_VAR,    /* $x.A: idents "$x","A" */
    TN_CHAIN,  /* (pipe).A, or a field chain on another term */
    TN_IDENT,  /* a function name */
    TN_DOT,
    TN_NIL,
    TN_BOOL,
    TN_NUMBER,
    TN_STRING,
} tnode_type_t;

typedef struct tnode tnode_t;

/* Builtin function ids (template_funcs.c has the table). */
typedef enum tfunc {
    TF_AND,
    TF_OR,
    TF_NOT,
    TF_LEN,
    TF_INDEX,
    TF_SLICE,
    TF_EQ,
    TF_NE,
    TF_LT,
    TF_LE,
    TF_GT,
    TF_GE,
    TF_PRINT,
    TF_PRINTF,
    TF_PRINTLN,
    TF_HTML,
    TF_JS,
    TF_URLQUERY,
    TF_CALL,
    TF_JSON,
    TF_CURRENT_DATE,
    TF_YESTERDAY_DATE,
    TF_TO_TS_TYPE,
    TF__COUNT
} tfunc_t;

struct tnode {
    tnode_type_t type;
    uint32_t pos; /* byte offset in the source, for line:col */
    union {
        struct {
            tnode_t **nodes;
            size_t n;
        } list;
        struct {
            const char *s; /* TN_TEXT: the (trimmed) text; TN_STRING: value */
            size_t len;
            const char *quoted; /* TN_STRING: as written, for messages */
        } text;
        struct {
            tnode_t *pipe;
        } action;
        struct {
            tnode_t *pipe;
            tnode_t *list;
            tnode_t *else_list; /* NULL when absent */
        } branch; /* TN_IF, TN_RANGE, TN_WITH */
        struct {
            const char *name;
            tnode_t *pipe; /* NULL when absent */
        } tmpl;
        struct {
            bool is_assign;
            tnode_t **decl; /* TN_VAR nodes */
            size_t n_decl;
            tnode_t **cmds;
            size_t n_cmds;
        } pipe;
        struct {
            tnode_t **args;
            size_t n;
        } cmd;
        struct {
            const char **idents;
            size_t n;
        } field; /* TN_FIELD and TN_VAR */
        struct {
            tnode_t *node;
            const char **idents;
            size_t n;
        } chain;
        struct {
            const char *name;
            tfunc_t fn;
        } ident;
        bool b;
        struct {
            bool is_int;
            int64_t i;
            double f;
            const char *text;
        } num;
    } u;
};

typedef struct tdef {
    const char *name;
    tnode_t *body; /* TN_LIST */
} tdef_t;

struct rn_tmpl {
    arena_t arena;
    char *src; /* owned copy, NUL-terminated */
    size_t src_len;
    tnode_t *root;     /* TN_LIST */
    tnode_t *cut_root; /* root with everything after .Response removed */
    tdef_t *defs;      /* arena; later definitions replace earlier ones */
    size_t n_defs;
    char **idents; /* lower-cased identifiers (arena) */
    size_t n_idents;
};

/* Decodes the body of a Go "..." or '...' literal (quotes stripped) into
 * out, which has room for len bytes (escapes never grow). Returns the
 * decoded length, or -1 for invalid syntax. */
long rn_tmpl_lit_unquote(const char *s, size_t len, char quote, char *out);

/* Parses a number or character-constant token's text into n->u.num
 * (is_int, i, f). On error returns false with Go's message in msg. */
bool rn_tmpl_lit_number(const char *s, size_t len, bool is_char, tnode_t *n, char *msg, size_t cap);

/* Builtin lookup by name: TF__COUNT when unknown. */
tfunc_t rn_tmpl_func_lookup(const char *name, size_t len);
const char *rn_tmpl_func_name(tfunc_t f);

/* Appends the node as Go's Node.String() writes it (for "at <...>"). */
void rn_tmpl_node_to_string(const tnode_t *n, cr_buf_t *out);
/* Appends s as a Go double-quoted string (%q). */
void rn_tmpl_quote_go(const char *s, size_t len, cr_buf_t *out);

/* After parsing: collects the identifiers, appends {{ .Response }} when
 * `ollama` asks for it and the template lacks Messages and Response, and
 * builds the cut tree. CR_E_NOMEM when the arena is exhausted. */
cr_status_t rn_tmpl_touch_up(rn_tmpl_t *t, bool ollama);

/* 1-based line and 0-based byte column of a source offset. */
void rn_tmpl_line_col(const rn_tmpl_t *t, uint32_t pos, int *line, int *col);

/* ---- execution state ---- */

typedef struct exec_var {
    const char *name;
    rn_val_t *val; /* owned reference */
} exec_var_t;

typedef struct exec {
    const rn_tmpl_t *t;
    const char *name; /* template being executed, for messages */
    cr_buf_t *out;
    rn_tmpl_spans_t *spans; /* NULL: not recorded */
    exec_var_t *vars;
    size_t n_vars, cap_vars;
    uint64_t steps, max_steps;
    int depth;
    int64_t now_unix;
    const tnode_t *at; /* node being evaluated, for messages */
    bool dot_iface;    /* dot is a range element of a []any or map: Go sees
                        * it through interface {} (nil is an error there) */
    cr_err_t *err;
    cr_status_t st; /* first error */
} exec_t;

/* Records an execution error at x->at (first one wins) and returns NULL,
 * for `return rn_tmpl_exec_fail(...)` in value-returning helpers. */
rn_val_t *rn_tmpl_exec_fail(exec_t *x, cr_status_t st, const char *fmt, ...)
    CR_PRINTF(3, 4);

/* Calls builtin f with evaluated args (borrowed). Returns a new reference,
 * or NULL with the error recorded. and/or are evaluated lazily by the
 * caller and never reach here. */
rn_val_t *rn_tmpl_func_call(exec_t *x, tfunc_t f, rn_val_t **args, size_t n);

#endif
