/* jinja_impl.h: what the jinja module's files share and nothing outside
 * uses: the arena every allocation of a parse or render lives in, the
 * error jump, tokens, the syntax tree, values and the render state.
 *
 * Why an arena and a jump: a template is untrusted code, and any step of
 * it may fail (undefined name, type error, a budget exceeded). Everything a
 * parse or a render allocates lives in one arena that is freed whole at
 * the end, so an error unwinds with longjmp to jj_template_new/jj_render
 * without leaking, and reference cycles (a namespace holding itself) cost
 * nothing. Nothing between the setjmp and a throw may own memory outside
 * the arena. */
#ifndef JJ_JINJA_IMPL_H
#define JJ_JINJA_IMPL_H

#include "services/runner/jinja/jinja.h"

#include <setjmp.h>

/* ---- errors ---------------------------------------------------------- */

typedef struct jj_jump {
    jmp_buf env;
    cr_status_t status;
    char msg[CR_ERR_MSG_MAX];
} jj_jump_t;

/* Records the error (a printf format; by convention "Class: message") and
 * jumps back to the setjmp of j. */
_Noreturn void jj_throw(jj_jump_t *j, cr_status_t st, const char *fmt, ...)
    CR_PRINTF(3, 4);

/* ---- arena ----------------------------------------------------------- */

typedef struct jj_chunk jj_chunk_t;

typedef struct jj_arena {
    jj_chunk_t *chunks;
    size_t used_bytes; /* all chunk bytes allocated so far */
    size_t max_bytes;  /* over this, an allocation throws CR_E_TOO_LARGE */
    jj_jump_t *jump;   /* where a failed allocation goes */
} jj_arena_t;

void jj_arena_init(jj_arena_t *a, size_t max_bytes, jj_jump_t *jump);
void jj_arena_free(jj_arena_t *a);
/* Returns n zeroed bytes (16-byte aligned); throws when over budget. */
void *jj_alloc(jj_arena_t *a, size_t n);
/* n * size bytes, the product checked for overflow. */
void *jj_alloc_array(jj_arena_t *a, size_t n, size_t size);
char *jj_strndup(jj_arena_t *a, const char *s, size_t n);

/* ---- values ---------------------------------------------------------- */

typedef enum jj_kind {
    JJ_UNDEF, /* u.s: the error an access raises ("UndefinedError: ...") */
    JJ_NONE,
    JJ_BOOL,
    JJ_INT,
    JJ_FLOAT,
    JJ_STR,
    JJ_LIST,  /* also tuples and map/select's generators (flavor) */
    JJ_DICT,
    JJ_NS,    /* namespace(): a dict whose attributes `set` may assign */
    JJ_FUNC,  /* macro, caller, global function or bound method */
    JJ_LOOP,  /* the `loop` of a for */
} jj_kind_t;

typedef struct jj_str {
    size_t len;
    const char *s; /* NUL-terminated; may hold NULs (counted in len) */
    bool markup;   /* from `| safe`: `+` with a plain string HTML-escapes
                    * the plain one, as MarkupSafe's Markup does */
    /* Which bytes came from untrusted data (1 a byte), or NULL when none
     * did. Every operation that copies bytes of a string copies their
     * marks (jj_sb_append_str, jj_substr), so the caller can keep control
     * tokens in request text from being parsed (jj_render's taint). */
    const uint8_t *taint;
} jj_str_t;

typedef struct jj_list jj_list_t;
typedef struct jj_dict jj_dict_t;
typedef struct jj_func jj_func_t;
typedef struct jj_loop jj_loop_t;

typedef struct jj_value {
    jj_kind_t kind;
    union {
        bool b;
        int64_t i;
        double f;
        jj_str_t *s;
        jj_list_t *l;
        jj_dict_t *d;
        jj_func_t *fn;
        jj_loop_t *loop;
    } u;
} jj_value_t;

enum { JJ_LIST_PLAIN, JJ_LIST_TUPLE, JJ_LIST_GENERATOR };

struct jj_list {
    jj_value_t *items;
    size_t n, cap;
    int flavor; /* JJ_LIST_*: how it prints and whether tojson takes it */
};

/* Insertion-ordered, as Python's dict; lookups are linear (templates'
 * dicts are small, and the step budget bounds the rest). */
struct jj_dict {
    jj_value_t *keys, *vals;
    size_t n, cap;
};

/* ---- syntax tree ----------------------------------------------------- */

typedef enum jj_node_kind {
    /* statements */
    JJ_N_BODY,      /* list: the statements */
    JJ_N_TEXT,      /* text, text_len */
    JJ_N_OUTPUT,    /* a: expression */
    JJ_N_IF,        /* a: condition, b: body, c: else (body or IF) or NULL */
    JJ_N_FOR,       /* names: targets, a: iterable, b: body, c: else,
                     * d: `if` filter or NULL */
    JJ_N_SET,       /* a: target (NAME, GETATTR, TUPLE of NAME), b: value */
    JJ_N_SET_BLOCK, /* a: target, b: body, c: filters over BLOCK_INPUT or NULL */
    JJ_N_MACRO,     /* name, names/list: params/defaults (NULL: none), b */
    JJ_N_CALL_BLOCK,/* a: the call, names/list: caller's params, b: body */
    JJ_N_FILTER_BLOCK, /* a: filters over BLOCK_INPUT, b: body */
    JJ_N_BREAK,
    JJ_N_CONTINUE,
    /* expressions */
    JJ_N_LIT,       /* lit */
    JJ_N_NAME,      /* name */
    JJ_N_GETATTR,   /* a.name */
    JJ_N_GETITEM,   /* a[b] */
    JJ_N_SLICE,     /* a[list[0]:list[1]:list[2]], NULLs for omitted */
    JJ_N_CALL,      /* a(list..., names[i]=list2[i]...) */
    JJ_N_FILTER,    /* a | name(list..., names=list2...) */
    JJ_N_TEST,      /* a is [not: flag] name(list...) */
    JJ_N_BINOP,     /* a op b */
    JJ_N_AND,
    JJ_N_OR,
    JJ_N_NOT,       /* not a */
    JJ_N_NEG,       /* -a */
    JJ_N_POS,       /* +a */
    JJ_N_COND,      /* a if b else c (c NULL: undefined) */
    JJ_N_LIST,      /* [list...] */
    JJ_N_TUPLE,     /* (list...) */
    JJ_N_DICT,      /* {list[i]: list2[i]} */
    JJ_N_BLOCK_INPUT, /* the rendered body of a filter block */
} jj_node_kind_t;

typedef enum jj_op {
    JJ_OP_ADD, JJ_OP_SUB, JJ_OP_MUL, JJ_OP_DIV, JJ_OP_FLOORDIV, JJ_OP_MOD,
    JJ_OP_POW, JJ_OP_CONCAT, JJ_OP_EQ, JJ_OP_NE, JJ_OP_LT, JJ_OP_LE,
    JJ_OP_GT, JJ_OP_GE, JJ_OP_IN, JJ_OP_NOT_IN,
} jj_op_t;

typedef struct jj_node jj_node_t;
struct jj_node {
    jj_node_kind_t kind;
    int line;
    jj_op_t op;
    bool flag;
    const char *name;
    const char *text;
    size_t text_len;
    jj_value_t lit;
    jj_node_t *a, *b, *c, *d;
    jj_node_t **list;  /* n entries */
    size_t n;
    jj_node_t **list2; /* n2 entries */
    size_t n2;
    const char **names; /* n_names entries */
    size_t n_names;
};

/* Parses src into a BODY allocated in `arena`; throws a
 * "TemplateSyntaxError: ..." through arena->jump. */
jj_node_t *jj_parse(jj_arena_t *arena, const char *src, size_t len);

/* ---- tokens (jinja_lex.c, read by jinja_parse.c) ---------------------- */

typedef enum jj_tok_kind {
    JJ_T_EOF,
    JJ_T_TEXT,     /* text outside tags, whitespace control applied */
    JJ_T_VAR_BEGIN, JJ_T_VAR_END,      /* {{ }} */
    JJ_T_BLOCK_BEGIN, JJ_T_BLOCK_END,  /* {% %} */
    JJ_T_NAME, JJ_T_STRING, JJ_T_INT, JJ_T_FLOAT,
    JJ_T_OP,       /* text: the operator's characters */
} jj_tok_kind_t;

typedef struct jj_tok {
    jj_tok_kind_t kind;
    int line;
    const char *text; /* NAME, OP, TEXT: the bytes; STRING: decoded */
    size_t len;
    int64_t i;
    double f;
} jj_tok_t;

typedef struct jj_toks {
    jj_tok_t *v;
    size_t n;
} jj_toks_t;

/* Splits src into tokens (comments dropped, trim_blocks, lstrip_blocks
 * and -/+ markers applied to the text, one trailing newline of the
 * template dropped as Jinja2's keep_trailing_newline=False does). */
void jj_lex(jj_arena_t *arena, const char *src, size_t len, jj_toks_t *out);

/* ---- render state ---------------------------------------------------- */

typedef struct jj_scope jj_scope_t;

typedef struct jj_rt {
    jj_arena_t arena;
    const json_t *const *untrusted; /* context subtrees whose strings are tainted */
    size_t n_untrusted;
    jj_jump_t jump;
    jj_limits_t limits;
    uint64_t steps;
    int depth;
    time_t now;
    jj_scope_t *globals;
    jj_str_t *block_input; /* the body a filter block is filtering */
} jj_rt_t;

/* A string builder in the render's arena, capped at max_output_bytes. */
typedef struct jj_sb {
    jj_rt_t *rt;
    char *p;
    uint8_t *taint; /* NULL until a tainted byte is appended; cap bytes */
    size_t len, cap;
} jj_sb_t;

void jj_sb_init(jj_sb_t *sb, jj_rt_t *rt);
/* Appends bytes the template made (trusted). */
void jj_sb_append(jj_sb_t *sb, const char *p, size_t n);
/* Appends n bytes of s from byte off, with their taint. */
void jj_sb_append_str(jj_sb_t *sb, const jj_str_t *s, size_t off, size_t n);
/* Appends bytes marked tainted when `tainted`. */
void jj_sb_append_marked(jj_sb_t *sb, const char *p, size_t n, bool tainted);
void jj_sb_puts(jj_sb_t *sb, const char *s);
void jj_sb_printf(jj_sb_t *sb, const char *fmt, ...) CR_PRINTF(2, 3);
jj_str_t *jj_sb_finish(jj_sb_t *sb);

/* Throws through the render's jump (CR_E_INVALID). */
_Noreturn void jj_fail(jj_rt_t *rt, const char *fmt, ...) CR_PRINTF(2, 3);

/* ---- values (jinja_value.c) ------------------------------------------ */

jj_value_t jj_none(void);
jj_value_t jj_bool(bool b);
jj_value_t jj_int(int64_t i);
jj_value_t jj_float(double f);
jj_value_t jj_str(jj_rt_t *rt, const char *s, size_t n);
jj_value_t jj_cstr(jj_rt_t *rt, const char *s);
jj_value_t jj_str_value(jj_str_t *s);
/* n bytes of s from byte off, with their taint. */
jj_value_t jj_substr(jj_rt_t *rt, const jj_str_t *s, size_t off, size_t n);
/* Whether byte i of s is tainted. */
bool jj_str_tainted_at(const jj_str_t *s, size_t i);
/* An undefined whose use raises `fmt`'s message. */
jj_value_t jj_undef(jj_rt_t *rt, const char *fmt, ...) CR_PRINTF(2, 3);
jj_value_t jj_list_new(jj_rt_t *rt, int flavor);
void jj_list_push(jj_rt_t *rt, jj_list_t *l, jj_value_t v);
jj_value_t jj_dict_new(jj_rt_t *rt, jj_kind_t kind);
void jj_dict_set(jj_rt_t *rt, jj_dict_t *d, jj_value_t key, jj_value_t val);
/* Returns the value for key or NULL. */
jj_value_t *jj_dict_find(jj_dict_t *d, jj_value_t key);
jj_value_t *jj_dict_find_str(jj_dict_t *d, const char *key);

bool jj_is_number(jj_value_t v); /* int, float or bool, as Python */
double jj_as_double(jj_value_t v);
bool jj_truthy(jj_value_t v);
bool jj_equal(jj_value_t a, jj_value_t b);
/* <0, 0, >0; throws TypeError for unorderable types. */
int jj_compare(jj_rt_t *rt, jj_value_t a, jj_value_t b);
/* Python's type name: "str", "int", "dict", "NoneType"... */
const char *jj_type_name(jj_value_t v);
/* Throws the undefined's error. */
_Noreturn void jj_undef_fail(jj_rt_t *rt, jj_value_t v);

/* Python's str() and repr() (what {{ }} prints, how lists print). */
jj_str_t *jj_to_str(jj_rt_t *rt, jj_value_t v);
void jj_write_str(jj_sb_t *sb, jj_value_t v);
void jj_write_repr(jj_sb_t *sb, jj_value_t v);
void jj_write_float(jj_sb_t *sb, double f);
/* Appends s HTML-escaped as MarkupSafe's escape() does (& < > ' "). */
void jj_sb_append_escaped(jj_sb_t *sb, const jj_str_t *s);

/* The items a for loop or filter walks: lists as they are, dicts' keys,
 * strings' characters, undefined as empty; TypeError otherwise. */
jj_list_t *jj_iterate(jj_rt_t *rt, jj_value_t v);
/* Length (code points for strings); TypeError for what has none. */
int64_t jj_length(jj_rt_t *rt, jj_value_t v);

/* `obj.name` (attributes, then items) and `obj[key]` (items, then
 * attributes), as Jinja2's sandbox: a missing one is an undefined. */
jj_value_t jj_getattr(jj_rt_t *rt, jj_value_t obj, const char *name);
jj_value_t jj_getitem(jj_rt_t *rt, jj_value_t obj, jj_value_t key);
jj_value_t jj_slice(jj_rt_t *rt, jj_value_t obj, const jj_value_t *start,
                    const jj_value_t *stop, const jj_value_t *step);

/* The `loop` of a for at item index0 of items. */
jj_value_t jj_loop_new(jj_rt_t *rt, jj_list_t *items, size_t index0);
/* Moves the loop to the next item (one loop object per for, as Jinja2's
 * LoopContext). */
void jj_loop_set_index(jj_value_t loop, size_t index0);
size_t jj_loop_index(jj_value_t loop);

/* UTF-8 helpers: code points in s, and the byte offset of code point i. */
size_t jj_utf8_count(const char *s, size_t n);

/* ---- calls ----------------------------------------------------------- */

typedef struct jj_args {
    jj_value_t *pos;
    size_t n_pos;
    const char **kw_names;
    jj_value_t *kw;
    size_t n_kw;
} jj_args_t;

/* Argument `idx` (positional) or `name` (keyword); NULL if not given. */
jj_value_t *jj_arg(jj_args_t *args, size_t idx, const char *name);
/* Throws TypeError when args has more positional than max_pos or a keyword
 * not in names (NULL-terminated). */
void jj_args_check(jj_rt_t *rt, const char *fn, jj_args_t *args, size_t max_pos,
                   const char *const *names);

typedef enum jj_func_kind { JJ_FN_MACRO, JJ_FN_GLOBAL, JJ_FN_METHOD } jj_func_kind_t;

struct jj_func {
    jj_func_kind_t kind;
    const char *name;
    /* macro or caller */
    const jj_node_t *def; /* MACRO or CALL_BLOCK */
    jj_scope_t *closure;  /* the scope it was defined in */
    jj_value_t caller;    /* for a macro called by {% call %}: the caller */
    /* method */
    jj_value_t self;
};

/* Calls fn (a JJ_FUNC value or an undefined, which raises). */
jj_value_t jj_call(jj_rt_t *rt, jj_value_t fn, jj_args_t *args);

/* jinja_methods.c: str/dict methods bound to self (found: true, out set)
 * and the globals. */
bool jj_method_lookup(jj_rt_t *rt, jj_value_t self, const char *name, jj_value_t *out);
jj_value_t jj_method_call(jj_rt_t *rt, jj_func_t *fn, jj_args_t *args);
/* Returns the global function named name, or false. */
bool jj_global_lookup(jj_rt_t *rt, const char *name, jj_value_t *out);
jj_value_t jj_global_call(jj_rt_t *rt, jj_func_t *fn, jj_args_t *args);

/* String operations methods and filters share (jinja_methods.c): strip
 * (chars NULL: Python's whitespace), case ('l'ower, 'u'pper, 't'itle,
 * 'c'apitalize; ASCII letters only), replace (count < 0: all). */
jj_value_t jj_str_strip(jj_rt_t *rt, jj_str_t *s, const jj_str_t *chars, bool left, bool right);
jj_value_t jj_str_case(jj_rt_t *rt, jj_str_t *s, int mode);
jj_value_t jj_str_replace(jj_rt_t *rt, jj_str_t *s, jj_str_t *old, jj_str_t *new_s,
                          int64_t count);
/* Python's `fmt % args` (and the `format` filter). */
jj_value_t jj_str_format(jj_rt_t *rt, jj_str_t *fmt, const jj_value_t *args, size_t n_args);

/* jinja_filters.c, jinja_tests.c */
jj_value_t jj_filter_apply(jj_rt_t *rt, const char *name, jj_value_t v, jj_args_t *args);
bool jj_test_apply(jj_rt_t *rt, const char *name, jj_value_t v, jj_args_t *args);
/* Python's `item in container`. */
bool jj_contains(jj_rt_t *rt, jj_value_t container, jj_value_t item);

/* jinja_json.c */
jj_value_t jj_from_json(jj_rt_t *rt, const json_t *j);
/* json.dumps(v, ensure_ascii=False, indent, separators, sort_keys);
 * indent < 0: none. item_sep/key_sep NULL: Python's defaults. */
void jj_write_json(jj_sb_t *sb, jj_value_t v, int indent, const char *item_sep,
                   const char *key_sep, bool sort_keys, bool ensure_ascii);

#endif
