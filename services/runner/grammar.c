#include "lib/prelude.h"

/* grammar.c: structured output. A format compiles to schema nodes (below,
 * "compiling"); the matcher ("matching") keeps a few threads, each a stack
 * of frames, and advances them one byte at a time; masking walks the
 * vocabulary sorted by bytes as a trie ("tokens"). See grammar.h. */

#include "services/runner/grammar.h"

#include <jansson.h>
#include <math.h>

/* ---- schema nodes ------------------------------------------------------ */

enum {
    T_NULL = 1u << 0,
    T_BOOL = 1u << 1,
    T_INT = 1u << 2,
    T_NUM = 1u << 3, /* any number (integers included) */
    T_STR = 1u << 4,
    T_ARR = 1u << 5,
    T_OBJ = 1u << 6,
    T_ALL = (1u << 7) - 1,
};

#define INF_NEED 0x3fffffffu
#define NO_NODE (-1)

typedef struct node {
    uint32_t types;              /* T_* the value may take */
    uint32_t alt_lo, alt_n;      /* anyOf: alts[alt_lo .. alt_lo+alt_n) */
    bool has_lits;               /* enum/const: lits[lit_lo .. lit_hi) */
    uint32_t lit_lo, lit_hi;     /* sorted by bytes */
    uint32_t prop_lo, n_props;   /* props[prop_lo ..): required first */
    uint32_t n_req;              /* the first n_req props are required */
    int32_t additional;          /* node of extra keys, NO_NODE: none */
    int32_t items;               /* node of array items, NO_NODE: none */
    uint32_t min_items, max_items;
    uint32_t max_members;        /* extra keys at most */
    uint32_t min_len, max_len;   /* string length in characters */
    uint32_t need, need_obj, need_arr; /* container levels needed to finish
                                          a value (as an object, an array) */
} node_t;

typedef struct prop {
    char *enc;    /* the key as written: JSON-escaped, no quotes */
    uint32_t len; /* bytes of enc */
    int32_t node;
} prop_t;

typedef struct lit {
    char *s; /* compact JSON text of an enum/const value */
    uint32_t len;
} lit_t;

/* ---- matcher state ----------------------------------------------------- */

enum { K_VALUE = 1, K_OBJ, K_ARR, K_STR, K_NUM, K_LIT };
enum { O_OPEN = 1, O_COMMA, O_KEY, O_FREEKEY, O_COLON, O_VALUE, O_AFTER };
enum { A_OPEN = 1, A_ITEM, A_AFTER };
enum { S_NORMAL = 0, S_ESC, S_U1, S_U2, S_U3, S_U4 };
enum { N_START = 0, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };
enum { STR_VALUE = 0, STR_KEY = 1 };

#define FREE_KEY 0xffffffffu
#define MAX_FRAMES (2 * RN_GRAMMAR_MAX_DEPTH + 4)
#define MAX_THREADS 8
#define MAX_INT_DIGITS 16
#define MAX_FRAC_DIGITS 16
#define MAX_EXP_DIGITS 2

/* One stack entry; 32 bytes and no padding, so threads compare with memcmp.
 *   K_VALUE: ws = whitespace state.
 *   K_OBJ:   a = next declared property allowed, b = members written,
 *            c = key bytes matched (O_KEY) / chosen property (O_COLON),
 *            m = candidate properties (O_KEY).
 *   K_ARR:   b = items started.
 *   K_STR:   a = bytes, c = characters, x = STR_VALUE/STR_KEY,
 *            ws = UTF-8 continuation state, m = \u value so far.
 *   K_NUM:   x = 1 for integers only, a = integer digits, c = fraction or
 *            exponent digits.
 *   K_LIT:   a..m = candidate range in lits, c = bytes matched. */
typedef struct frame {
    uint8_t kind, st, ws, x;
    uint32_t node;
    uint32_t a, b, c;
    uint32_t pad;
    uint64_t m;
} frame_t;
_Static_assert(sizeof(frame_t) == 32, "frame_t has padding");

typedef struct thread {
    uint16_t depth; /* frames in use */
    uint16_t level; /* open containers */
    frame_t f[MAX_FRAMES];
} thread_t;

typedef struct mstate {
    uint32_t n;
    thread_t t[MAX_THREADS];
} mstate_t;

struct rn_grammar {
    rn_grammar_opts_t o;
    node_t *nodes;
    uint32_t n_nodes, cap_nodes;
    prop_t *props;
    uint32_t n_props, cap_props;
    lit_t *lits;
    uint32_t n_lits, cap_lits;
    int32_t *alts;
    uint32_t n_alts, cap_alts;
    int32_t root, any;
    uint32_t bool_lo, null_lo; /* "false","true" and "null" in lits */
    mstate_t cur;
    mstate_t scratch[2];
    mstate_t *dfs; /* [dfs_cap]: masking's state per trie depth */
    size_t dfs_cap;
};

void rn_grammar_opts_default(rn_grammar_opts_t *o)
{
    o->max_depth = 16;
    o->max_items = 256;
    o->max_string_bytes = 1024;
    o->max_indent = 20;
}

/* ---- compiling --------------------------------------------------------- */

typedef struct memo {
    const json_t *schema;
    int32_t node;
} memo_t;

typedef struct cc {
    rn_grammar_t *g;
    json_t *doc;
    memo_t *memo;
    uint32_t n_memo, cap_memo;
    cr_status_t st;
    char msg[400];
} cc_t;

static bool grow(void **p, uint32_t *cap, uint32_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    uint32_t nc = *cap ? *cap * 2 : 16;
    while (nc < need)
        nc *= 2;
    void *q = realloc(*p, (size_t)nc * elem);
    if (!q)
        return false;
    *p = q;
    *cap = nc;
    return true;
}

static int32_t fail(cc_t *cc, cr_status_t st, const char *path, const char *fmt, ...)
    CR_PRINTF(4, 5);

static int32_t fail(cc_t *cc, cr_status_t st, const char *path, const char *fmt, ...)
{
    if (cc->st)
        return NO_NODE;
    cc->st = st;
    size_t n = 0;
    if (path && *path)
        n = (size_t)snprintf(cc->msg, sizeof cc->msg, "%s: ", path);
    if (n >= sizeof cc->msg)
        n = sizeof cc->msg - 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cc->msg + n, sizeof cc->msg - n, fmt, ap);
    va_end(ap);
    return NO_NODE;
}

static int32_t new_node(cc_t *cc, const char *path)
{
    rn_grammar_t *g = cc->g;
    if (g->n_nodes >= RN_GRAMMAR_MAX_NODES)
        return fail(cc, CR_E_TOO_LARGE, path, "more than %d schema nodes",
                    RN_GRAMMAR_MAX_NODES);
    if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(node_t)))
        return fail(cc, CR_E_NOMEM, path, "out of memory");
    node_t *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->types = T_ALL;
    n->additional = g->any;
    n->items = g->any;
    n->max_items = (uint32_t)g->o.max_items;
    n->max_members = (uint32_t)g->o.max_items;
    n->max_len = UINT32_MAX;
    return (int32_t)g->n_nodes++;
}

static bool add_lit(cc_t *cc, const char *s, size_t len, const char *path)
{
    rn_grammar_t *g = cc->g;
    if (len > 65536) {
        fail(cc, CR_E_INVALID, path, "enum value longer than 65536 bytes");
        return false;
    }
    if (!grow((void **)&g->lits, &g->cap_lits, g->n_lits + 1, sizeof(lit_t)))
        goto nomem;
    char *c = malloc(len + 1);
    if (!c)
        goto nomem;
    memcpy(c, s, len);
    c[len] = 0;
    g->lits[g->n_lits++] = (lit_t){.s = c, .len = (uint32_t)len};
    return true;
nomem:
    fail(cc, CR_E_NOMEM, path, "out of memory");
    return false;
}

static int cmp_lit(const void *pa, const void *pb)
{
    const lit_t *a = pa, *b = pb;
    int r = memcmp(a->s, b->s, CR_MIN(a->len, b->len));
    if (r)
        return r;
    return a->len < b->len ? -1 : a->len > b->len;
}

/* The key as the model must write it: JSON string escaping, no quotes. */
static char *encode_key(const char *s, size_t len, uint32_t *out_len)
{
    char *e = malloc(len * 6 + 1);
    if (!e)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') {
            e[n++] = '\\';
            e[n++] = (char)ch;
        } else if (ch == '\n') {
            e[n++] = '\\';
            e[n++] = 'n';
        } else if (ch == '\t') {
            e[n++] = '\\';
            e[n++] = 't';
        } else if (ch < 0x20) {
            n += (size_t)sprintf(e + n, "\\u%04x", ch);
        } else {
            e[n++] = (char)ch;
        }
    }
    e[n] = 0;
    *out_len = (uint32_t)n;
    return e;
}

static const char *const unsupported_g[] = {
    "pattern", "patternProperties", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "multipleOf", "not", "if", "then", "else",
    "dependentRequired", "dependentSchemas", "dependencies", "propertyNames",
    "minProperties", "maxProperties", "contains", "minContains", "maxContains",
    "prefixItems", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
    "$recursiveRef",
};

/* Keywords that constrain a value (used to refuse combinations). */
static const char *const validation_g[] = {
    "type", "enum", "const", "properties", "required", "additionalProperties",
    "items", "minItems", "maxItems", "minLength", "maxLength", "anyOf", "oneOf",
    "allOf",
};

static bool has_validation_besides(const json_t *s, const char *except)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(validation_g); i++)
        if (strcmp(validation_g[i], except) && json_object_get(s, validation_g[i]))
            return true;
    return false;
}

/* Resolves a local JSON pointer ("#", "#/$defs/x", "#/a/0"). */
static json_t *resolve_ref(json_t *doc, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    const char *p = ref + 1;
    json_t *cur = doc;
    if (!*p)
        return cur;
    if (*p != '/')
        return NULL;
    char tok[256];
    while (*p == '/') {
        p++;
        size_t n = 0;
        while (*p && *p != '/') {
            char ch = *p++;
            if (ch == '~') {
                if (*p == '0')
                    ch = '~';
                else if (*p == '1')
                    ch = '/';
                else
                    return NULL;
                p++;
            }
            if (n + 1 >= sizeof tok)
                return NULL;
            tok[n++] = ch;
        }
        tok[n] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *end;
            errno = 0;
            unsigned long ix = strtoul(tok, &end, 10);
            if (!n || *end || errno)
                return NULL;
            cur = json_array_get(cur, ix);
        } else {
            return NULL;
        }
        if (!cur)
            return NULL;
    }
    return cur;
}

static bool get_count(cc_t *cc, const json_t *s, const char *key, uint32_t *out,
                      const char *path)
{
    json_t *v = json_object_get(s, key);
    if (!v)
        return true;
    double d = json_is_integer(v) ? (double)json_integer_value(v)
               : json_is_real(v)  ? json_real_value(v)
                                  : -1;
    if (!json_is_number(v) || d < 0 || d != floor(d)) {
        fail(cc, CR_E_INVALID, path, "%s must be a non-negative integer", key);
        return false;
    }
    *out = d > 65536 ? 65537u : (uint32_t)d;
    return true;
}

static uint32_t type_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE:
    case JSON_FALSE: return T_BOOL;
    case JSON_INTEGER: return T_INT | T_NUM;
    case JSON_REAL: return T_NUM;
    case JSON_STRING: return T_STR;
    case JSON_ARRAY: return T_ARR;
    case JSON_OBJECT: return T_OBJ;
    }
    return 0;
}

static int32_t compile(cc_t *cc, json_t *s, const char *path, int depth, int refs);

static bool compile_lits(cc_t *cc, json_t *s, node_t n_copy, int32_t idx,
                         const char *path)
{
    rn_grammar_t *g = cc->g;
    json_t *en = json_object_get(s, "enum"), *cst = json_object_get(s, "const");
    if (en && !json_is_array(en)) {
        fail(cc, CR_E_INVALID, path, "enum must be an array");
        return false;
    }
    uint32_t lo = g->n_lits;
    size_t n_vals = cst ? 1 : json_array_size(en);
    for (size_t i = 0; i < n_vals; i++) {
        json_t *v = cst ? cst : json_array_get(en, i);
        if (!(type_of(v) & n_copy.types))
            continue; /* a value the type forbids can never be written */
        char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!txt) {
            fail(cc, CR_E_NOMEM, path, "out of memory");
            return false;
        }
        bool ok = add_lit(cc, txt, strlen(txt), path);
        free(txt);
        if (!ok)
            return false;
    }
    if (g->n_lits == lo) {
        fail(cc, CR_E_INVALID, path, "%s has no value of the allowed type",
             cst ? "const" : "enum");
        return false;
    }
    qsort(g->lits + lo, g->n_lits - lo, sizeof(lit_t), cmp_lit);
    node_t *n = &g->nodes[idx];
    n->has_lits = true;
    n->lit_lo = lo;
    n->lit_hi = g->n_lits;
    return true;
}

static bool compile_types(cc_t *cc, json_t *s, uint32_t *types, const char *path)
{
    json_t *t = json_object_get(s, "type");
    if (!t) {
        *types = json_object_get(s, "properties") ? T_OBJ
                 : json_object_get(s, "items")    ? T_ARR
                                                  : T_ALL;
        return true;
    }
    size_t n = json_is_array(t) ? json_array_size(t) : 1;
    *types = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_is_array(t) ? json_array_get(t, i) : t;
        const char *name = json_string_value(e);
        if (!name) {
            fail(cc, CR_E_INVALID, path, "type must be a string or an array of strings");
            return false;
        }
        static const struct {
            const char *name;
            uint32_t bits;
        } names[] = {{"null", T_NULL},   {"boolean", T_BOOL}, {"integer", T_INT},
                     {"number", T_NUM},  {"string", T_STR},   {"array", T_ARR},
                     {"object", T_OBJ}};
        size_t k = 0;
        while (k < CR_ARRAY_LEN(names) && strcmp(names[k].name, name))
            k++;
        if (k == CR_ARRAY_LEN(names)) {
            fail(cc, CR_E_INVALID, path, "unknown type \"%.64s\"", name);
            return false;
        }
        *types |= names[k].bits;
    }
    if (!*types) {
        fail(cc, CR_E_INVALID, path, "type is an empty list");
        return false;
    }
    return true;
}

static bool compile_object(cc_t *cc, json_t *s, int32_t idx, const char *path,
                           int depth)
{
    rn_grammar_t *g = cc->g;
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    char sub[256];
    if (props && !json_is_object(props)) {
        fail(cc, CR_E_INVALID, path, "properties must be an object");
        return false;
    }
    if (req && !json_is_array(req)) {
        fail(cc, CR_E_INVALID, path, "required must be an array");
        return false;
    }
    /* Names: declared ones, then required names that are not declared. */
    const char *names[RN_GRAMMAR_MAX_PROPS];
    json_t *schemas[RN_GRAMMAR_MAX_PROPS];
    bool is_req[RN_GRAMMAR_MAX_PROPS];
    size_t n = 0;
    const char *key;
    json_t *val;
    json_object_foreach(props, key, val) {
        if (n == RN_GRAMMAR_MAX_PROPS) {
            fail(cc, CR_E_INVALID, path, "more than %d properties", RN_GRAMMAR_MAX_PROPS);
            return false;
        }
        names[n] = key;
        schemas[n] = val;
        is_req[n++] = false;
    }
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *r = json_string_value(json_array_get(req, i));
        if (!r) {
            fail(cc, CR_E_INVALID, path, "required[%zu] is not a string", i);
            return false;
        }
        size_t k = 0;
        while (k < n && strcmp(names[k], r))
            k++;
        if (k == n) {
            if (n == RN_GRAMMAR_MAX_PROPS) {
                fail(cc, CR_E_INVALID, path, "more than %d properties", RN_GRAMMAR_MAX_PROPS);
                return false;
            }
            names[n] = r;
            schemas[n] = NULL; /* any value */
            n++;
        }
        is_req[k] = true;
    }
    /* Children first: their own properties must not land inside ours. */
    int32_t child[RN_GRAMMAR_MAX_PROPS];
    for (size_t i = 0; i < n; i++) {
        snprintf(sub, sizeof sub, "%s%sproperties.%s", path, *path ? "." : "", names[i]);
        child[i] = schemas[i] ? compile(cc, schemas[i], sub, depth + 1, 0) : g->any;
        if (child[i] == NO_NODE)
            return false;
    }
    /* Then ours, contiguous, in output order: required first, then optional. */
    uint32_t lo = g->n_props, n_req = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++) {
            if (is_req[i] != (pass == 0))
                continue;
            if (!grow((void **)&g->props, &g->cap_props, g->n_props + 1, sizeof(prop_t))) {
                fail(cc, CR_E_NOMEM, path, "out of memory");
                return false;
            }
            prop_t *p = &g->props[g->n_props];
            p->node = child[i];
            p->enc = encode_key(names[i], strlen(names[i]), &p->len);
            if (!p->enc) {
                fail(cc, CR_E_NOMEM, path, "out of memory");
                return false;
            }
            g->n_props++;
            n_req += pass == 0;
        }
    }
    int32_t add = NO_NODE;
    if (!addl) {
        add = props ? NO_NODE : g->any;
    } else if (json_is_boolean(addl)) {
        add = json_is_true(addl) ? g->any : NO_NODE;
    } else if (json_is_object(addl)) {
        snprintf(sub, sizeof sub, "%s%sadditionalProperties", path, *path ? "." : "");
        add = compile(cc, addl, sub, depth + 1, 0);
        if (add == NO_NODE)
            return false;
    } else {
        fail(cc, CR_E_INVALID, path, "additionalProperties must be a boolean or a schema");
        return false;
    }
    node_t *nd = &g->nodes[idx];
    nd->prop_lo = lo;
    nd->n_props = g->n_props - lo;
    nd->n_req = n_req;
    nd->additional = add;
    return true;
}

static bool compile_array(cc_t *cc, json_t *s, int32_t idx, const char *path, int depth)
{
    rn_grammar_t *g = cc->g;
    json_t *items = json_object_get(s, "items");
    uint32_t mn = 0, mx = UINT32_MAX;
    char sub[256];
    int32_t it = g->any;
    if (items && json_is_array(items)) {
        fail(cc, CR_E_INVALID, path, "unsupported keyword \"items\" as an array (tuple)");
        return false;
    }
    if (items && json_is_false(items)) {
        it = NO_NODE;
        mx = 0;
    } else if (items && json_is_object(items)) {
        snprintf(sub, sizeof sub, "%s%sitems", path, *path ? "." : "");
        it = compile(cc, items, sub, depth + 1, 0);
        if (it == NO_NODE)
            return false;
    } else if (items && !json_is_true(items)) {
        fail(cc, CR_E_INVALID, path, "items must be a schema");
        return false;
    }
    if (!get_count(cc, s, "minItems", &mn, path) || !get_count(cc, s, "maxItems", &mx, path))
        return false;
    bool has_max = json_object_get(s, "maxItems") != NULL || mx == 0;
    if (mn > 65536) {
        fail(cc, CR_E_INVALID, path, "minItems over 65536");
        return false;
    }
    if (mn > mx) {
        fail(cc, CR_E_INVALID, path, "minItems %u is more than maxItems %u", mn, mx);
        return false;
    }
    node_t *nd = &g->nodes[idx];
    nd->items = it;
    nd->min_items = mn;
    nd->max_items = has_max ? CR_MIN(mx, 65536u) : CR_MAX(mn, (uint32_t)g->o.max_items);
    return true;
}

static bool compile_string(cc_t *cc, json_t *s, int32_t idx, const char *path)
{
    uint32_t mn = 0, mx = UINT32_MAX;
    if (!get_count(cc, s, "minLength", &mn, path) || !get_count(cc, s, "maxLength", &mx, path))
        return false;
    if (mn > 65536) {
        fail(cc, CR_E_INVALID, path, "minLength over 65536");
        return false;
    }
    if (mn > mx) {
        fail(cc, CR_E_INVALID, path, "minLength %u is more than maxLength %u", mn, mx);
        return false;
    }
    cc->g->nodes[idx].min_len = mn;
    cc->g->nodes[idx].max_len = mx;
    return true;
}

static bool memo_add(cc_t *cc, const json_t *s, int32_t node, const char *path)
{
    if (!grow((void **)&cc->memo, &cc->cap_memo, cc->n_memo + 1, sizeof(memo_t))) {
        fail(cc, CR_E_NOMEM, path, "out of memory");
        return false;
    }
    cc->memo[cc->n_memo++] = (memo_t){s, node};
    return true;
}

/* Compiles schema s into a node; returns its index or NO_NODE (cc->st set).
 * `refs` counts $ref/allOf hops without a new node, to catch cycles. */
static int32_t compile(cc_t *cc, json_t *s, const char *path, int depth, int refs)
{
    rn_grammar_t *g = cc->g;
    if (depth > 128)
        return fail(cc, CR_E_INVALID, path, "schema nested more than 128 levels");
    if (refs > 64)
        return fail(cc, CR_E_INVALID, path, "circular $ref");
    for (uint32_t i = 0; i < cc->n_memo; i++)
        if (cc->memo[i].schema == s)
            return cc->memo[i].node;
    if (json_is_true(s))
        return g->any;
    if (json_is_false(s))
        return fail(cc, CR_E_INVALID, path, "schema false accepts nothing");
    if (!json_is_object(s))
        return fail(cc, CR_E_INVALID, path, "a schema must be an object or a boolean");

    for (size_t i = 0; i < CR_ARRAY_LEN(unsupported_g); i++)
        if (json_object_get(s, unsupported_g[i]))
            return fail(cc, CR_E_INVALID, path, "unsupported keyword \"%s\"", unsupported_g[i]);
    if (json_is_true(json_object_get(s, "uniqueItems")))
        return fail(cc, CR_E_INVALID, path, "unsupported keyword \"uniqueItems\"");

    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        /* Siblings of $ref are ignored (draft 7). */
        const char *r = json_string_value(ref);
        if (!r)
            return fail(cc, CR_E_INVALID, path, "$ref must be a string");
        json_t *target = resolve_ref(cc->doc, r);
        if (!target)
            return fail(cc, CR_E_INVALID, path, "cannot resolve $ref \"%.200s\"", r);
        if (target == s)
            return fail(cc, CR_E_INVALID, path, "circular $ref");
        char sub[256];
        snprintf(sub, sizeof sub, "%.200s", r);
        int32_t t = compile(cc, target, sub, depth + 1, refs + 1);
        if (t == NO_NODE || !memo_add(cc, s, t, path))
            return NO_NODE;
        return t;
    }
    json_t *all = json_object_get(s, "allOf");
    if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1 ||
            has_validation_besides(s, "allOf"))
            return fail(cc, CR_E_INVALID, path,
                        "unsupported keyword \"allOf\" (only one schema, alone)");
        char sub[256];
        snprintf(sub, sizeof sub, "%s%sallOf.0", path, *path ? "." : "");
        int32_t t = compile(cc, json_array_get(all, 0), sub, depth + 1, refs + 1);
        if (t == NO_NODE || !memo_add(cc, s, t, path))
            return NO_NODE;
        return t;
    }

    int32_t idx = new_node(cc, path);
    if (idx == NO_NODE || !memo_add(cc, s, idx, path))
        return NO_NODE;

    json_t *any = json_object_get(s, "anyOf"), *one = json_object_get(s, "oneOf");
    if (any || one) {
        const char *kw = any ? "anyOf" : "oneOf";
        json_t *arr = any ? any : one;
        if (any && one)
            return fail(cc, CR_E_INVALID, path, "both anyOf and oneOf");
        if (!json_is_array(arr) || !json_array_size(arr))
            return fail(cc, CR_E_INVALID, path, "%s must be a non-empty array", kw);
        if (has_validation_besides(s, kw))
            return fail(cc, CR_E_INVALID, path, "%s next to other validation keywords", kw);
        size_t n = json_array_size(arr);
        if (n > 1024)
            return fail(cc, CR_E_INVALID, path, "%s has more than 1024 entries", kw);
        int32_t tmp[1024];
        for (size_t i = 0; i < n; i++) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s%s%s.%zu", path, *path ? "." : "", kw, i);
            tmp[i] = compile(cc, json_array_get(arr, i), sub, depth + 1, 0);
            if (tmp[i] == NO_NODE)
                return NO_NODE;
        }
        if (!grow((void **)&g->alts, &g->cap_alts, g->n_alts + (uint32_t)n, sizeof(int32_t)))
            return fail(cc, CR_E_NOMEM, path, "out of memory");
        g->nodes[idx].alt_lo = g->n_alts;
        g->nodes[idx].alt_n = (uint32_t)n;
        memcpy(g->alts + g->n_alts, tmp, n * sizeof(int32_t));
        g->n_alts += (uint32_t)n;
        return idx;
    }

    uint32_t types;
    if (!compile_types(cc, s, &types, path))
        return NO_NODE;
    g->nodes[idx].types = types;
    if (json_object_get(s, "enum") || json_object_get(s, "const"))
        return compile_lits(cc, s, g->nodes[idx], idx, path) ? idx : NO_NODE;
    if ((types & T_OBJ) && !compile_object(cc, s, idx, path, depth))
        return NO_NODE;
    if ((types & T_ARR) && !compile_array(cc, s, idx, path, depth))
        return NO_NODE;
    if ((types & T_STR) && !compile_string(cc, s, idx, path))
        return NO_NODE;
    return idx;
}

/* anyOf cycles ({"anyOf":[{"$ref":"#"}]}) would make the matcher recurse
 * without reading a byte. color: 0 new, 1 on the path, 2 done. */
static bool alt_cycle(const rn_grammar_t *g, uint32_t n, uint8_t *color, int depth)
{
    if (color[n] == 2)
        return false;
    if (color[n] == 1 || depth > 1000)
        return true;
    color[n] = 1;
    const node_t *nd = &g->nodes[n];
    for (uint32_t i = 0; i < nd->alt_n; i++)
        if (alt_cycle(g, (uint32_t)g->alts[nd->alt_lo + i], color, depth + 1))
            return true;
    color[n] = 2;
    return false;
}

/* need: the fewest container levels a value of the node must open. */
static void compute_needs(rn_grammar_t *g)
{
    for (uint32_t i = 0; i < g->n_nodes; i++)
        g->nodes[i].need = g->nodes[i].need_obj = g->nodes[i].need_arr = INF_NEED;
    for (bool changed = true; changed;) {
        changed = false;
        for (uint32_t i = 0; i < g->n_nodes; i++) {
            node_t *n = &g->nodes[i];
            uint32_t need = INF_NEED, nobj = INF_NEED, narr = INF_NEED;
            if (n->alt_n) {
                for (uint32_t k = 0; k < n->alt_n; k++)
                    need = CR_MIN(need, g->nodes[g->alts[n->alt_lo + k]].need);
            } else if (n->has_lits) {
                need = 0;
            } else {
                if (n->types & (T_NULL | T_BOOL | T_INT | T_NUM | T_STR))
                    need = 0;
                if (n->types & T_OBJ) {
                    uint32_t mx = 0;
                    for (uint32_t k = 0; k < n->n_req; k++)
                        mx = CR_MAX(mx, g->nodes[g->props[n->prop_lo + k].node].need);
                    nobj = mx >= INF_NEED ? INF_NEED : mx + 1;
                }
                if (n->types & T_ARR) {
                    uint32_t it = n->min_items ? g->nodes[n->items].need : 0;
                    narr = it >= INF_NEED ? INF_NEED : it + 1;
                }
                need = CR_MIN(need, CR_MIN(nobj, narr));
            }
            if (need != n->need || nobj != n->need_obj || narr != n->need_arr) {
                n->need = need;
                n->need_obj = nobj;
                n->need_arr = narr;
                changed = true;
            }
        }
    }
}

static cr_status_t format_error(cr_err_t *err, cr_status_t st, const char *detail)
{
    if (st == CR_E_NOMEM)
        return cr_err_set(err, st, "out of memory compiling format");
    return cr_err_set(err, st,
                      "invalid format: %s; expected \"json\" or a valid JSON Schema object",
                      detail);
}

void rn_grammar_destroy(rn_grammar_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_grammar_t *g = *self_p;
    for (uint32_t i = 0; i < g->n_props; i++)
        free(g->props[i].enc);
    for (uint32_t i = 0; i < g->n_lits; i++)
        free(g->lits[i].s);
    free(g->props);
    free(g->lits);
    free(g->nodes);
    free(g->alts);
    free(g->dfs);
    free(g);
    *self_p = NULL;
}

static bool is_json_word(const char *s, size_t len)
{
    while (len && strchr(" \t\r\n", s[0]))
        s++, len--;
    while (len && strchr(" \t\r\n", s[len - 1]))
        len--;
    return (len == 4 && !memcmp(s, "json", 4)) || (len == 6 && !memcmp(s, "\"json\"", 6));
}

cr_status_t rn_grammar_new(const char *format, size_t len, const rn_grammar_opts_t *opts,
                           rn_grammar_t **out, cr_err_t *err)
{
    *out = NULL;
    rn_grammar_opts_t o;
    rn_grammar_opts_default(&o);
    if (opts)
        o = *opts;
    if (o.max_depth < 1 || o.max_depth > RN_GRAMMAR_MAX_DEPTH || o.max_items < 1 ||
        o.max_items > 65536 || o.max_string_bytes < 1 || o.max_indent < 0 ||
        o.max_indent > 200)
        return cr_err_set(err, CR_E_INVALID, "grammar options out of range");
    if (!format)
        return format_error(err, CR_E_INVALID, "\"\"");
    if (len > RN_GRAMMAR_MAX_FORMAT_BYTES)
        return cr_err_set(err, CR_E_TOO_LARGE, "format is longer than %u bytes",
                          RN_GRAMMAR_MAX_FORMAT_BYTES);
    rn_grammar_t *g = calloc(1, sizeof *g);
    if (!g)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    g->o = o;
    cc_t cc = {.g = g};
    json_t *doc = NULL;
    g->any = NO_NODE;
    g->any = new_node(&cc, ""); /* node 0: any value; items/extra keys are itself */
    if (g->any == NO_NODE)
        goto fail;
    g->nodes[g->any].items = g->any;
    g->nodes[g->any].additional = g->any;
    g->bool_lo = g->n_lits;
    if (!add_lit(&cc, "false", 5, "") || !add_lit(&cc, "true", 4, ""))
        goto fail;
    g->null_lo = g->n_lits;
    if (!add_lit(&cc, "null", 4, ""))
        goto fail;

    if (is_json_word(format, len)) {
        g->root = new_node(&cc, "");
        if (g->root == NO_NODE)
            goto fail;
        g->nodes[g->root].types = T_OBJ;
    } else {
        json_error_t je;
        doc = json_loadb(format, len, JSON_DECODE_ANY, &je);
        if (!json_is_object(doc)) {
            char shown[120];
            size_t n = CR_MIN(len, sizeof shown - 1);
            memcpy(shown, format, n);
            shown[n] = 0;
            fail(&cc, CR_E_INVALID, "", "%s%s", shown, len > n ? "..." : "");
            goto fail;
        }
        cc.doc = doc;
        g->root = compile(&cc, doc, "", 0, 0);
        if (g->root == NO_NODE)
            goto fail;
        uint8_t *color = calloc(g->n_nodes, 1);
        if (!color) {
            fail(&cc, CR_E_NOMEM, "", "out of memory");
            goto fail;
        }
        bool cyc = false;
        for (uint32_t i = 0; i < g->n_nodes && !cyc; i++)
            cyc = alt_cycle(g, i, color, 0);
        free(color);
        if (cyc) {
            fail(&cc, CR_E_INVALID, "", "anyOf/oneOf refers to itself without nesting");
            goto fail;
        }
    }
    compute_needs(g);
    uint32_t need = g->nodes[g->root].need;
    if (need >= INF_NEED) {
        fail(&cc, CR_E_INVALID, "", "the schema accepts no finite document");
        goto fail;
    }
    if (need > (uint32_t)o.max_depth) {
        fail(&cc, CR_E_INVALID, "", "the schema needs %u levels of nesting, more than %d",
             need, o.max_depth);
        goto fail;
    }
    json_decref(doc);
    free(cc.memo);
    rn_grammar_reset(g);
    *out = g;
    return CR_OK;
fail:
    json_decref(doc);
    free(cc.memo);
    rn_grammar_destroy(&g);
    return format_error(err, cc.st ? cc.st : CR_E_INVALID, cc.msg);
}

/* ---- matching ---------------------------------------------------------- */

static frame_t mkframe(int kind, uint32_t node)
{
    frame_t f;
    memset(&f, 0, sizeof f);
    f.kind = (uint8_t)kind;
    f.node = node;
    return f;
}

static void copy_thread(thread_t *dst, const thread_t *src)
{
    dst->depth = src->depth;
    dst->level = src->level;
    memcpy(dst->f, src->f, src->depth * sizeof(frame_t));
}

static void copy_state(mstate_t *dst, const mstate_t *src)
{
    dst->n = src->n;
    for (uint32_t i = 0; i < src->n; i++)
        copy_thread(&dst->t[i], &src->t[i]);
}

static void emit(mstate_t *out, const thread_t *t)
{
    for (uint32_t i = 0; i < out->n; i++) {
        const thread_t *o = &out->t[i];
        if (o->depth == t->depth && o->level == t->level &&
            !memcmp(o->f, t->f, t->depth * sizeof(frame_t)))
            return;
    }
    if (out->n < MAX_THREADS) /* dropping an alternative keeps output valid */
        copy_thread(&out->t[out->n++], t);
}

static bool push(thread_t *t, frame_t f)
{
    if (t->depth >= MAX_FRAMES)
        return false;
    t->f[t->depth++] = f;
    return true;
}

/* Pops the finished top frame and tells its parent. */
static void pop_done(thread_t *t)
{
    t->depth--;
    if (!t->depth)
        return;
    frame_t *p = &t->f[t->depth - 1];
    p->ws = 0;
    if (p->kind == K_OBJ && p->st == O_FREEKEY) {
        p->st = O_COLON;
        p->c = FREE_KEY;
    } else if (p->kind == K_OBJ) {
        p->st = O_AFTER;
    }
    else if (p->kind == K_ARR)
        p->st = A_AFTER;
}

static bool is_ws(int b)
{
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}

/* ws: 0 none yet, 1 after one space, 2+k after a newline and k indents. */
static bool ws_step(const rn_grammar_t *g, uint8_t *ws, int b)
{
    if (b == '\n' && *ws == 0) {
        *ws = 2;
        return true;
    }
    if (b == ' ' && *ws == 0) {
        *ws = 1;
        return true;
    }
    if ((b == ' ' || b == '\t') && *ws >= 2 && *ws - 2 < g->o.max_indent) {
        (*ws)++;
        return true;
    }
    return false;
}

static bool fits(const rn_grammar_t *g, int32_t node, unsigned level)
{
    return node != NO_NODE && g->nodes[node].need + level <= (unsigned)g->o.max_depth;
}

/* Declared properties a key may name now, as a bit mask. */
static uint64_t key_mask(const rn_grammar_t *g, const node_t *n, uint32_t s, unsigned level)
{
    uint64_t m = 0;
    uint32_t end = s < n->n_req ? s + 1 : n->n_props;
    for (uint32_t i = s; i < end; i++)
        if (fits(g, g->props[n->prop_lo + i].node, level))
            m |= 1ull << i;
    return m;
}

static bool free_key_ok(const rn_grammar_t *g, const node_t *n, const frame_t *f, unsigned level)
{
    return n->additional != NO_NODE && f->a >= n->n_req && f->b < n->max_members &&
           fits(g, n->additional, level);
}

static bool str_can_add(const rn_grammar_t *g, const node_t *n, const frame_t *f)
{
    return f->c < n->max_len && (f->a < (uint32_t)g->o.max_string_bytes || f->c < n->min_len);
}

static int hexval(int b)
{
    if (b >= '0' && b <= '9')
        return b - '0';
    if (b >= 'a' && b <= 'f')
        return b - 'a' + 10;
    if (b >= 'A' && b <= 'F')
        return b - 'A' + 10;
    return -1;
}

/* UTF-8: ws holds the continuation bytes still due (bits 0-1) and the
 * range the next one must fall in (bits 2-4). */
static const uint8_t cont_lo_g[5] = {0x80, 0xA0, 0x80, 0x90, 0x80};
static const uint8_t cont_hi_g[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};

static void step_thread(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out);

static void step_string(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    if (f->st == S_NORMAL) {
        unsigned rem = f->ws & 3, code = f->ws >> 2;
        if (rem) {
            if (b < cont_lo_g[code] || b > cont_hi_g[code])
                return;
            f->ws = (uint8_t)(rem - 1);
            f->a++;
            emit(out, t);
            return;
        }
        if (b == '"') {
            if (f->c >= n->min_len) {
                pop_done(t);
                emit(out, t);
            }
            return;
        }
        if (b < 0x20 || !str_can_add(g, n, f))
            return;
        if (b == '\\') {
            f->st = S_ESC;
        } else if (b >= 0x80) {
            unsigned r, c = 0;
            if (b >= 0xC2 && b <= 0xDF)
                r = 1;
            else if (b == 0xE0)
                r = 2, c = 1;
            else if (b == 0xED)
                r = 2, c = 2;
            else if (b >= 0xE1 && b <= 0xEF)
                r = 2;
            else if (b == 0xF0)
                r = 3, c = 3;
            else if (b >= 0xF1 && b <= 0xF3)
                r = 3;
            else if (b == 0xF4)
                r = 3, c = 4;
            else
                return;
            f->ws = (uint8_t)(r | c << 2);
        }
        f->a++;
        f->c++;
        emit(out, t);
        return;
    }
    if (f->st == S_ESC) {
        if (b == 'u') {
            f->st = S_U1;
            f->m = 0;
        } else if (b && strchr("\"\\/bfnrt", b)) {
            f->st = S_NORMAL;
        } else {
            return;
        }
        f->a++;
        emit(out, t);
        return;
    }
    int v = hexval(b);
    if (v < 0)
        return;
    f->m = f->m * 16 + (unsigned)v;
    f->a++;
    if (f->st == S_U2 && f->m >= 0xD8 && f->m <= 0xDF)
        return; /* surrogates: jansson refuses lone ones; refuse all */
    if (f->st == S_U4) {
        if (f->m == 0)
            return; /* \u0000 */
        f->st = S_NORMAL;
    } else {
        f->st++;
    }
    emit(out, t);
}

/* Returns true if the number ended before b (the caller re-steps b). */
static bool step_number(thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    bool digit = b >= '0' && b <= '9';
    bool integer = f->x;
    switch (f->st) {
    case N_START:
    case N_MINUS:
        if (b == '-' && f->st == N_START)
            f->st = N_MINUS;
        else if (b == '0')
            f->st = N_ZERO;
        else if (digit)
            f->st = N_INT, f->a = 1;
        else
            return false;
        break;
    case N_ZERO:
    case N_INT:
        if (digit) {
            if (f->st == N_ZERO || f->a >= MAX_INT_DIGITS)
                return false;
            f->a++;
        } else if (b == '.' && !integer) {
            f->st = N_DOT;
        } else if ((b == 'e' || b == 'E') && !integer) {
            f->st = N_E;
        } else {
            return true;
        }
        break;
    case N_DOT:
        if (!digit)
            return false;
        f->st = N_FRAC, f->c = 1;
        break;
    case N_FRAC:
        if (digit) {
            if (f->c >= MAX_FRAC_DIGITS)
                return false;
            f->c++;
        } else if (b == 'e' || b == 'E') {
            f->st = N_E;
        } else {
            return true;
        }
        break;
    case N_E:
    case N_ESIGN:
        if ((b == '+' || b == '-') && f->st == N_E)
            f->st = N_ESIGN;
        else if (digit)
            f->st = N_EXP, f->c = 1;
        else
            return false;
        break;
    case N_EXP:
        if (!digit)
            return true;
        if (f->c >= MAX_EXP_DIGITS)
            return false;
        f->c++;
        break;
    default:
        return false;
    }
    emit(out, t);
    return false;
}

static bool number_can_end(const frame_t *f)
{
    return f->st == N_ZERO || f->st == N_INT || f->st == N_FRAC || f->st == N_EXP;
}

static bool lit_can_end(const rn_grammar_t *g, const frame_t *f)
{
    for (uint64_t i = f->a; i < f->m; i++)
        if (g->lits[i].len == f->c)
            return true;
    return false;
}

/* Returns true if the literal ended before b (the caller re-steps b). */
static bool step_lit(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    uint32_t lo = UINT32_MAX, hi = 0;
    bool can_end = false;
    for (uint32_t i = f->a; i < (uint32_t)f->m; i++) {
        const lit_t *l = &g->lits[i];
        if (l->len == f->c)
            can_end = true;
        else if ((unsigned char)l->s[f->c] == b) {
            if (lo == UINT32_MAX)
                lo = i;
            hi = i + 1;
        }
    }
    if (lo != UINT32_MAX) {
        f->a = lo;
        f->m = hi;
        f->c++;
        emit(out, t);
        return false;
    }
    return can_end;
}

static void start_key(const rn_grammar_t *g, thread_t *t, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    uint64_t mask = key_mask(g, n, f->a, t->level);
    if (mask) {
        thread_t t2;
        copy_thread(&t2, t);
        frame_t *f2 = &t2.f[t2.depth - 1];
        f2->st = O_KEY;
        f2->c = 0;
        f2->m = mask;
        f2->ws = 0;
        emit(out, &t2);
    }
    if (free_key_ok(g, n, f, t->level)) {
        f->st = O_FREEKEY;
        f->ws = 0;
        frame_t s = mkframe(K_STR, (uint32_t)g->any);
        s.x = STR_KEY;
        if (push(t, s))
            emit(out, t);
    }
}

static void close_container(thread_t *t, mstate_t *out)
{
    t->level--;
    pop_done(t);
    emit(out, t);
}

static void step_object(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    switch (f->st) {
    case O_OPEN:
    case O_COMMA:
    case O_COLON:
    case O_AFTER:
        if (is_ws(b)) {
            if (ws_step(g, &f->ws, b))
                emit(out, t);
            return;
        }
        break;
    default:
        break;
    }
    switch (f->st) {
    case O_OPEN:
    case O_COMMA:
        if (b == '}' && f->st == O_OPEN && f->a >= n->n_req)
            close_container(t, out);
        else if (b == '"')
            start_key(g, t, out);
        return;
    case O_KEY: {
        uint32_t pos = f->c;
        if (b == '"') { /* closes the key, or is an escaped quote inside it */
            for (uint32_t i = 0; i < n->n_props; i++)
                if ((f->m >> i & 1) && g->props[n->prop_lo + i].len == pos) {
                    f->st = O_COLON;
                    f->c = i;
                    f->ws = 0;
                    emit(out, t);
                    return;
                }
        }
        uint64_t m2 = 0;
        for (uint32_t i = 0; i < n->n_props; i++) {
            const prop_t *p = &g->props[n->prop_lo + i];
            if ((f->m >> i & 1) && p->len > pos && (unsigned char)p->enc[pos] == b)
                m2 |= 1ull << i;
        }
        if (m2) {
            f->m = m2;
            f->c++;
            emit(out, t);
        }
        return;
    }
    case O_COLON: {
        if (b != ':')
            return;
        int32_t child;
        if (f->c == FREE_KEY) {
            child = n->additional;
        } else {
            child = g->props[n->prop_lo + f->c].node;
            f->a = f->c + 1;
        }
        f->b++;
        f->st = O_VALUE;
        f->ws = 0;
        f->m = 0;
        if (push(t, mkframe(K_VALUE, (uint32_t)child)))
            emit(out, t);
        return;
    }
    case O_AFTER:
        if (b == ',') {
            if (key_mask(g, n, f->a, t->level) || free_key_ok(g, n, f, t->level)) {
                f->st = O_COMMA;
                f->ws = 0;
                emit(out, t);
            }
        } else if (b == '}' && f->a >= n->n_req) {
            close_container(t, out);
        }
        return;
    default:
        return;
    }
}

/* Returns true if b must be stepped again on the (new) top frame. */
static bool step_array(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    bool item_ok = f->b < n->max_items && fits(g, n->items, t->level);
    if (is_ws(b)) {
        if (f->st != A_ITEM && ws_step(g, &f->ws, b))
            emit(out, t);
        return false;
    }
    if (f->st == A_OPEN || f->st == A_AFTER) {
        if (b == ']') {
            if (f->b >= n->min_items)
                close_container(t, out);
            return false;
        }
        if (!item_ok)
            return false;
        if (f->st == A_AFTER && b != ',')
            return false;
        if (f->st == A_OPEN && b == ',')
            return false;
        f->b++;
        f->st = A_ITEM;
        f->ws = 0;
        if (!push(t, mkframe(K_VALUE, (uint32_t)n->items)))
            return false;
        if (b == ',') {
            emit(out, t);
            return false;
        }
        return true; /* the first item starts with b */
    }
    return false;
}

static void step_value(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out);

static void step_thread(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    for (;;) {
        if (!t->depth)
            return; /* the document is complete: nothing may follow */
        frame_t *f = &t->f[t->depth - 1];
        switch (f->kind) {
        case K_VALUE:
            step_value(g, t, b, out);
            return;
        case K_OBJ:
            step_object(g, t, b, out);
            return;
        case K_ARR:
            if (!step_array(g, t, b, out))
                return;
            continue;
        case K_STR:
            step_string(g, t, b, out);
            return;
        case K_NUM:
            if (!step_number(t, b, out))
                return;
            pop_done(t);
            continue;
        case K_LIT:
            if (!step_lit(g, t, b, out))
                return;
            pop_done(t);
            continue;
        default:
            return;
        }
    }
}

static void step_value(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    if (is_ws(b)) {
        if (ws_step(g, &f->ws, b))
            emit(out, t);
        return;
    }
    if (n->alt_n) {
        for (uint32_t i = 0; i < n->alt_n; i++) {
            int32_t alt = g->alts[n->alt_lo + i];
            if (!fits(g, alt, t->level))
                continue;
            thread_t t2;
            copy_thread(&t2, t);
            t2.f[t2.depth - 1].node = (uint32_t)alt;
            step_value(g, &t2, b, out);
        }
        return;
    }
    frame_t nf;
    if (n->has_lits) {
        nf = mkframe(K_LIT, f->node);
        nf.a = n->lit_lo;
        nf.m = n->lit_hi;
    } else if (b == '{' || b == '[') {
        bool obj = b == '{';
        uint32_t need = obj ? n->need_obj : n->need_arr;
        if (!(n->types & (obj ? T_OBJ : T_ARR)) || need + t->level > (unsigned)g->o.max_depth)
            return;
        *f = mkframe(obj ? K_OBJ : K_ARR, f->node);
        f->st = obj ? O_OPEN : A_OPEN;
        t->level++;
        emit(out, t);
        return;
    } else if (b == '"') {
        if (!(n->types & T_STR))
            return;
        *f = mkframe(K_STR, f->node);
        f->x = STR_VALUE;
        emit(out, t);
        return;
    } else if ((b == 't' || b == 'f') && (n->types & T_BOOL)) {
        nf = mkframe(K_LIT, f->node);
        nf.a = g->bool_lo;
        nf.m = g->bool_lo + 2;
    } else if (b == 'n' && (n->types & T_NULL)) {
        nf = mkframe(K_LIT, f->node);
        nf.a = g->null_lo;
        nf.m = g->null_lo + 1;
    } else if ((b == '-' || (b >= '0' && b <= '9')) && (n->types & (T_INT | T_NUM))) {
        nf = mkframe(K_NUM, f->node);
        nf.x = !(n->types & T_NUM);
    } else {
        return;
    }
    *f = nf;
    step_thread(g, t, b, out);
}

static bool step_state(const rn_grammar_t *g, const mstate_t *in, int b, mstate_t *out)
{
    thread_t t;
    out->n = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        copy_thread(&t, &in->t[i]);
        step_thread(g, &t, b, out);
    }
    return out->n > 0;
}

static bool thread_can_end(const rn_grammar_t *g, const thread_t *t)
{
    if (!t->depth)
        return true;
    if (t->depth != 1)
        return false;
    const frame_t *f = &t->f[0];
    return (f->kind == K_NUM && number_can_end(f)) || (f->kind == K_LIT && lit_can_end(g, f));
}

void rn_grammar_reset(rn_grammar_t *g)
{
    g->cur.n = 1;
    g->cur.t[0].depth = 0;
    g->cur.t[0].level = 0;
    push(&g->cur.t[0], mkframe(K_VALUE, (uint32_t)g->root));
}

static bool run_bytes(rn_grammar_t *g, const char *bytes, size_t n, const mstate_t **res)
{
    const mstate_t *in = &g->cur;
    for (size_t i = 0; i < n; i++) {
        mstate_t *o = &g->scratch[i & 1];
        if (!step_state(g, in, (unsigned char)bytes[i], o))
            return false;
        in = o;
    }
    *res = in;
    return true;
}

bool rn_grammar_allows(rn_grammar_t *g, const char *bytes, size_t n)
{
    const mstate_t *res;
    return run_bytes(g, bytes, n, &res);
}

bool rn_grammar_feed(rn_grammar_t *g, const char *bytes, size_t n)
{
    const mstate_t *res;
    if (!run_bytes(g, bytes, n, &res))
        return false;
    if (res != &g->cur)
        copy_state(&g->cur, res);
    return true;
}

bool rn_grammar_is_complete(const rn_grammar_t *g)
{
    for (uint32_t i = 0; i < g->cur.n; i++)
        if (thread_can_end(g, &g->cur.t[i]))
            return true;
    return false;
}

bool rn_grammar_can_continue(const rn_grammar_t *g)
{
    for (uint32_t i = 0; i < g->cur.n; i++)
        if (g->cur.t[i].depth)
            return true;
    return false;
}

/* ---- tokens ------------------------------------------------------------ */

enum { TF_EOG = 1, TF_SKIP = 2 }; /* SKIP: empty or too long: never allowed */

struct rn_grammar_vocab {
    int32_t n;
    uint8_t *bytes;   /* all pieces */
    uint32_t *off;    /* [n] */
    uint16_t *len;    /* [n] */
    uint8_t *flags;   /* [n] TF_* */
    uint16_t *chars;  /* [n] characters if the piece is "plain": whole valid
                         UTF-8 with no quote, backslash or control byte, so
                         it may be appended to a string as is; else 0 */
    int32_t *order;   /* [n_order] ids with bytes, sorted by bytes */
    uint16_t *lcp;    /* [n_order] common prefix with the previous in order */
    int32_t n_order;
    int32_t *other;   /* [n_other] ids not in order */
    int32_t n_other;
    uint32_t max_len; /* longest piece in order */
};

void rn_grammar_vocab_destroy(rn_grammar_vocab_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_grammar_vocab_t *v = *self_p;
    free(v->bytes);
    free(v->off);
    free(v->len);
    free(v->flags);
    free(v->chars);
    free(v->order);
    free(v->lcp);
    free(v->other);
    free(v);
    *self_p = NULL;
}

int32_t rn_grammar_vocab_size(const rn_grammar_vocab_t *v)
{
    return v->n;
}

static int cmp_tok(const void *pa, const void *pb, void *arg)
{
    const rn_grammar_vocab_t *v = arg;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint16_t la = v->len[a], lb = v->len[b];
    int r = memcmp(v->bytes + v->off[a], v->bytes + v->off[b], CR_MIN(la, lb));
    if (r)
        return r;
    if (la != lb)
        return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Fills order/lcp/other once bytes, off, len and flags are set. */
/* Characters in p[0..len) if it is plain string content, else 0. */
static uint16_t plain_chars(const uint8_t *p, size_t len)
{
    uint16_t chars = 0;
    for (size_t i = 0; i < len;) {
        unsigned b = p[i], r, code = 0;
        if (b < 0x20 || b == '"' || b == '\\')
            return 0;
        if (b < 0x80)
            r = 0;
        else if (b >= 0xC2 && b <= 0xDF)
            r = 1;
        else if (b == 0xE0)
            r = 2, code = 1;
        else if (b == 0xED)
            r = 2, code = 2;
        else if (b >= 0xE1 && b <= 0xEF)
            r = 2;
        else if (b == 0xF0)
            r = 3, code = 3;
        else if (b >= 0xF1 && b <= 0xF3)
            r = 3;
        else if (b == 0xF4)
            r = 3, code = 4;
        else
            return 0;
        i++;
        for (unsigned k = 0; k < r; k++, i++) {
            if (i >= len || p[i] < cont_lo_g[k ? 0 : code] || p[i] > cont_hi_g[k ? 0 : code])
                return 0;
        }
        chars++;
    }
    return chars;
}

static cr_status_t vocab_index(rn_grammar_vocab_t *v, cr_err_t *err)
{
    v->chars = malloc((size_t)v->n * sizeof *v->chars);
    if (!v->chars)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < v->n; i++)
        v->chars[i] = v->flags[i] ? 0 : plain_chars(v->bytes + v->off[i], v->len[i]);
    v->order = malloc((size_t)v->n * sizeof *v->order);
    v->lcp = malloc((size_t)v->n * sizeof *v->lcp);
    v->other = malloc((size_t)v->n * sizeof *v->other);
    if (!v->order || !v->lcp || !v->other)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < v->n; i++) {
        if (v->flags[i])
            v->other[v->n_other++] = i;
        else
            v->order[v->n_order++] = i;
    }
    qsort_r(v->order, (size_t)v->n_order, sizeof *v->order, cmp_tok, v);
    for (int32_t i = 0; i < v->n_order; i++) {
        int32_t t = v->order[i];
        v->max_len = CR_MAX(v->max_len, v->len[t]);
        uint16_t l = 0;
        if (i) {
            int32_t p = v->order[i - 1];
            const uint8_t *a = v->bytes + v->off[p], *b = v->bytes + v->off[t];
            uint16_t mx = CR_MIN(v->len[p], v->len[t]);
            while (l < mx && a[l] == b[l])
                l++;
        }
        v->lcp[i] = l;
    }
    return CR_OK;
}

cr_status_t rn_grammar_vocab_new_pieces(int32_t n, const char *const *pieces, const size_t *lens,
                                        const bool *is_eog, rn_grammar_vocab_t **out,
                                        cr_err_t *err)
{
    *out = NULL;
    if (n < 1 || (uint32_t)n > RN_TOK_MAX_VOCAB)
        return cr_err_set(err, CR_E_INVALID, "vocabulary size %d out of range", (int)n);
    rn_grammar_vocab_t *v = calloc(1, sizeof *v);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    v->n = n;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++)
        if (lens[i] <= RN_GRAMMAR_MAX_TOKEN_BYTES)
            total += lens[i];
    v->bytes = malloc(total ? total : 1);
    v->off = malloc((size_t)n * sizeof *v->off);
    v->len = malloc((size_t)n * sizeof *v->len);
    v->flags = malloc((size_t)n);
    cr_status_t st;
    if (!v->bytes || !v->off || !v->len || !v->flags) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto fail;
    }
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t l = lens[i];
        v->flags[i] = 0;
        if (is_eog && is_eog[i])
            v->flags[i] = TF_EOG;
        else if (l == 0 || l > RN_GRAMMAR_MAX_TOKEN_BYTES)
            v->flags[i] = TF_SKIP;
        if (l > RN_GRAMMAR_MAX_TOKEN_BYTES)
            l = 0;
        memcpy(v->bytes + at, pieces[i], l);
        v->off[i] = (uint32_t)at;
        v->len[i] = (uint16_t)l;
        at += l;
    }
    if ((st = vocab_index(v, err)))
        goto fail;
    *out = v;
    return CR_OK;
fail:
    rn_grammar_vocab_destroy(&v);
    return st;
}

cr_status_t rn_grammar_vocab_new(const rn_tokenizer_t *tok, rn_grammar_vocab_t **out,
                                 cr_err_t *err)
{
    *out = NULL;
    size_t nv = rn_tokenizer_n_vocab(tok);
    size_t cap = rn_tokenizer_max_piece_bytes(tok);
    if (nv < 1 || nv > RN_TOK_MAX_VOCAB)
        return cr_err_set(err, CR_E_INVALID, "vocabulary size %zu out of range", nv);
    /* Pieces are read into one arena, then handed to the generic builder. */
    char *arena = NULL, *tmp = malloc(cap ? cap : 1);
    char **ptrs = malloc(nv * sizeof *ptrs);
    size_t *lens = malloc(nv * sizeof *lens);
    bool *eog = malloc(nv * sizeof *eog);
    size_t *offs = malloc(nv * sizeof *offs);
    cr_status_t st = CR_OK;
    cr_buf_t ar;
    cr_buf_init(&ar, (size_t)1 << 31);
    if (!tmp || !ptrs || !lens || !eog || !offs) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nv; i++) {
        size_t n = 0;
        eog[i] = rn_tokenizer_is_eog(tok, (int32_t)i);
        if (rn_token_piece(tok, (int32_t)i, 0, tmp, cap, &n, NULL) != CR_OK)
            n = 0;
        offs[i] = ar.len;
        lens[i] = n;
        if (n > RN_GRAMMAR_MAX_TOKEN_BYTES) {
            lens[i] = RN_GRAMMAR_MAX_TOKEN_BYTES + 1; /* never allowed */
            continue;
        }
        if (n && (st = cr_buf_append(&ar, tmp, n))) {
            st = cr_err_set(err, st, "token pieces: out of memory");
            goto out;
        }
    }
    arena = ar.data;
    for (size_t i = 0; i < nv; i++)
        ptrs[i] = arena ? arena + offs[i] : tmp;
    st = rn_grammar_vocab_new_pieces((int32_t)nv, (const char *const *)ptrs, lens, eog, out, err);
out:
    cr_buf_free(&ar);
    free(tmp);
    free(ptrs);
    free(lens);
    free(eog);
    free(offs);
    return st;
}

/* Masking's fast path: inside a string, a plain piece of `chars`
 * characters and `bytes` bytes is accepted as is if some thread has room.
 * The check is conservative; what it does not accept goes the slow way. */
typedef struct str_room {
    uint32_t n;
    struct {
        uint32_t chars_left;  /* before maxLength */
        uint32_t bytes_left;  /* before max_string_bytes */
        uint32_t below_min;   /* characters still under minLength */
    } t[MAX_THREADS];
} str_room_t;

static bool string_room(const rn_grammar_t *g, str_room_t *r)
{
    r->n = 0;
    for (uint32_t i = 0; i < g->cur.n; i++) {
        const thread_t *t = &g->cur.t[i];
        if (!t->depth)
            continue;
        const frame_t *f = &t->f[t->depth - 1];
        if (f->kind != K_STR || f->st != S_NORMAL || (f->ws & 3))
            continue;
        const node_t *n = &g->nodes[f->node];
        uint32_t mb = (uint32_t)g->o.max_string_bytes;
        r->t[r->n].chars_left = n->max_len - f->c;
        r->t[r->n].bytes_left = f->a < mb ? mb - f->a : 0;
        r->t[r->n].below_min = f->c < n->min_len ? n->min_len - f->c : 0;
        r->n++;
    }
    return r->n > 0;
}

static bool room_fits(const str_room_t *r, uint32_t chars, uint32_t bytes)
{
    for (uint32_t i = 0; i < r->n; i++)
        if (chars <= r->t[i].chars_left &&
            (bytes <= r->t[i].bytes_left || chars <= r->t[i].below_min))
            return true;
    return false;
}

static bool ensure_dfs(rn_grammar_t *g, size_t depth)
{
    if (g->dfs_cap >= depth)
        return true;
    mstate_t *d = realloc(g->dfs, depth * sizeof *d);
    if (!d)
        return false;
    g->dfs = d;
    g->dfs_cap = depth;
    return true;
}

size_t rn_grammar_mask(rn_grammar_t *g, const rn_grammar_vocab_t *v, float *logits,
                       int32_t n_vocab)
{
    size_t allowed = 0;
    bool complete = rn_grammar_is_complete(g);
    for (int32_t i = v->n; i < n_vocab; i++)
        logits[i] = -INFINITY;
    for (int32_t k = 0; k < v->n_other; k++) {
        int32_t id = v->other[k];
        if (id >= n_vocab)
            continue;
        if ((v->flags[id] & TF_EOG) && complete)
            allowed++;
        else
            logits[id] = -INFINITY;
    }
    /* The first call sizes the per-depth states to the longest token; if
     * that allocation fails, nothing but EOG is allowed. */
    if (!ensure_dfs(g, (size_t)v->max_len + 1)) {
        for (int32_t k = 0; k < v->n_order; k++)
            if (v->order[k] < n_vocab)
                logits[v->order[k]] = -INFINITY;
        return allowed;
    }
    copy_state(&g->dfs[0], &g->cur);
    str_room_t room;
    bool in_str = string_room(g, &room);
    uint32_t valid = 0; /* dfs[0..valid] hold the states of the current prefix */
    for (int32_t k = 0; k < v->n_order; k++) {
        int32_t id = v->order[k];
        uint32_t len = v->len[id];
        const uint8_t *p = v->bytes + v->off[id];
        if (valid > v->lcp[k])
            valid = v->lcp[k];
        if (in_str && v->chars[id] && room_fits(&room, v->chars[id], len)) {
            allowed += id < n_vocab; /* plain text inside a string */
            continue;
        }
        bool ok = true;
        while (valid < len) {
            if (!step_state(g, &g->dfs[valid], p[valid], &g->dfs[valid + 1])) {
                ok = false;
                break;
            }
            valid++;
        }
        if (ok) {
            allowed += id < n_vocab;
            continue;
        }
        /* Every token sharing the rejected prefix p[0..valid] is rejected. */
        uint32_t bad = valid + 1;
        if (id < n_vocab)
            logits[id] = -INFINITY;
        while (k + 1 < v->n_order && v->lcp[k + 1] >= bad) {
            k++;
            if (v->order[k] < n_vocab)
                logits[v->order[k]] = -INFINITY;
        }
    }
    return allowed;
}

cr_status_t rn_grammar_accept(rn_grammar_t *g, const rn_grammar_vocab_t *v, int32_t token,
                              cr_err_t *err)
{
    if (token < 0 || token >= v->n)
        return cr_err_set(err, CR_E_INVALID, "token %d is outside the vocabulary", (int)token);
    if (v->flags[token] & TF_EOG) {
        if (rn_grammar_is_complete(g))
            return CR_OK;
    } else if (!(v->flags[token] & TF_SKIP) &&
               rn_grammar_feed(g, (const char *)v->bytes + v->off[token], v->len[token])) {
        return CR_OK;
    }
    return cr_err_set(err, CR_E_INVALID, "token %d is not allowed here", (int)token);
}
