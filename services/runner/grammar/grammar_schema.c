#include "lib/prelude.h"

/* grammar_schema.c: compiles a format ("json" or a JSON Schema as text)
 * into the schema nodes that grammar.c matches against: types, enum/const
 * literals (sorted, as compact JSON), properties (required first), items,
 * lengths, anyOf alternatives and $ref targets (memoized by schema object,
 * so recursive schemas compile to cyclic node graphs). Refuses keywords it
 * cannot honour, cycles that consume no input, and schemas with no finite
 * document, with Ollama's "invalid format" message. See grammar.h. */

#include "services/runner/grammar/grammar.h"
#include "services/runner/grammar/grammar_impl.h"

#include <jansson.h>
#include <math.h>

void rn_grammar_opts_default(rn_grammar_opts_t *o)
{
    o->max_depth = 16;
    o->max_items = 256;
    o->max_string_bytes = 8192;
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
    memo_t *memo; /* open addressing by schema pointer, cap_memo a power of 2 */
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
    "pattern", "patternProperties", "multipleOf", "not", "if", "then", "else",
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

/* x (a bound) in units of 10^-scale, rounded inward (up for a lower bound,
 * down for an upper one); exclusive bounds move one unit further in. Values
 * within 1e-9 (relative) of a unit count as that unit, so 0.1 stays 0.1. */
static int64_t scaled_bound(double x, int scale, bool lower, bool exclusive)
{
    double y = x * pow(10, scale), r = nearbyint(y);
    double lim = 9e18;
    if (fabs(y - r) <= 1e-9 * fmax(1.0, fabs(y)))
        y = r;
    else
        y = lower ? ceil(y) : floor(y), exclusive = false;
    if (exclusive)
        y += lower ? 1 : -1;
    if (y > lim)
        y = lim;
    if (y < -lim)
        y = -lim;
    return (int64_t)y;
}

static bool compile_bounds(cc_t *cc, json_t *s, int32_t idx, const char *path)
{
    node_t *n = &cc->g->nodes[idx];
    json_t *mn = json_object_get(s, "minimum"), *mx = json_object_get(s, "maximum");
    json_t *emn = json_object_get(s, "exclusiveMinimum");
    json_t *emx = json_object_get(s, "exclusiveMaximum");
    if (!mn && !mx && !emn && !emx)
        return true;
    int scale = (n->types & T_NUM) ? NUM_SCALE : 0;
    int digits = scale ? MAX_BOUNDED_NUM_DIGITS : MAX_INT_DIGITS;
    int64_t top = 1;
    for (int i = 0; i < digits + scale; i++)
        top *= 10;
    int64_t lo = -(top - 1), hi = top - 1;
    const char *names[4] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    json_t *vals[4] = {mn, mx, emn, emx};
    for (int i = 0; i < 4; i++) {
        json_t *v = vals[i];
        if (!v)
            continue;
        if (json_is_boolean(v) && i >= 2) /* draft 4: modifies minimum/maximum */
            continue;
        if (!json_is_number(v))
            return fail(cc, CR_E_INVALID, path, "%s must be a number", names[i]), false;
        bool lower = i == 0 || i == 2;
        bool excl = i >= 2 || json_is_true(vals[i + 2]); /* draft 4's boolean */
        int64_t b = scaled_bound(json_number_value(v), scale, lower, excl);
        if (lower)
            lo = CR_MAX(lo, b);
        else
            hi = CR_MIN(hi, b);
    }
    if (lo > hi)
        return fail(cc, CR_E_INVALID, path, "no %s lies between the bounds",
                    scale ? "number (to 6 decimals)" : "integer"),
               false;
    n->bounded = true;
    n->scale = (uint8_t)scale;
    n->lo = lo;
    n->hi = hi;
    return true;
}

static uint32_t memo_slot(const cc_t *cc, const json_t *s)
{
    uint64_t h = (uint64_t)(uintptr_t)s * 0x9E3779B97F4A7C15ull;
    uint32_t i = (uint32_t)(h >> 32) & (cc->cap_memo - 1);
    while (cc->memo[i].schema && cc->memo[i].schema != s)
        i = (i + 1) & (cc->cap_memo - 1);
    return i;
}

static int32_t memo_find(const cc_t *cc, const json_t *s)
{
    if (!cc->cap_memo)
        return NO_NODE;
    const memo_t *m = &cc->memo[memo_slot(cc, s)];
    return m->schema ? m->node : NO_NODE;
}

static bool memo_add(cc_t *cc, const json_t *s, int32_t node, const char *path)
{
    if ((cc->n_memo + 1) * 2 > cc->cap_memo) {
        uint32_t old_cap = cc->cap_memo, cap = old_cap ? old_cap * 2 : 64;
        memo_t *old = cc->memo, *m = calloc(cap, sizeof *m);
        if (!m) {
            fail(cc, CR_E_NOMEM, path, "out of memory");
            return false;
        }
        cc->memo = m;
        cc->cap_memo = cap;
        for (uint32_t i = 0; i < old_cap; i++)
            if (old[i].schema)
                cc->memo[memo_slot(cc, old[i].schema)] = old[i];
        free(old);
    }
    memo_t *e = &cc->memo[memo_slot(cc, s)];
    if (!e->schema)
        cc->n_memo++;
    *e = (memo_t){s, node};
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
    int32_t known = memo_find(cc, s);
    if (known != NO_NODE)
        return known;
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
    if ((types & (T_INT | T_NUM)) && !compile_bounds(cc, s, idx, path))
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
    while (len && s[0] && strchr(" \t\r\n", s[0]))
        s++, len--;
    while (len && s[len - 1] && strchr(" \t\r\n", s[len - 1]))
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
