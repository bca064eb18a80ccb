/* template_val.c: the template value type, and how values print (Go's
 * fmt %v), marshal (Go's encoding/json) and arrive from JSON (jansson).
 *
 * Owns values only; the parser and executor live in template_parse.c and
 * template_exec.c. */
#include "lib/prelude.h"
#include "services/runner/template/template_impl.h"

#include "lib/gotext.h"

#include <math.h>

/* ---- construction and lifetime ---- */

static rn_val_t nil_g = {.kind = RN_VAL_NIL, .refs = VAL_IMMORTAL};

rn_val_t *rn_val_nil(void)
{
    return &nil_g;
}

static rn_val_t *val_alloc(rn_val_kind_t kind, unsigned flags)
{
    rn_val_t *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->kind = kind;
    v->flags = flags;
    v->refs = 1;
    return v;
}

rn_val_t *rn_val_bool_new(bool b)
{
    rn_val_t *v = val_alloc(RN_VAL_BOOL, 0);
    if (v)
        v->u.b = b;
    return v;
}

rn_val_t *rn_val_int_new(int64_t i)
{
    rn_val_t *v = val_alloc(RN_VAL_INT, 0);
    if (v)
        v->u.i = i;
    return v;
}

rn_val_t *rn_val_float_new(double f)
{
    rn_val_t *v = val_alloc(RN_VAL_FLOAT, 0);
    if (v)
        v->u.f = f;
    return v;
}

rn_val_t *rn_val_strn_new(const char *s, size_t n)
{
    if (n == SIZE_MAX)
        return NULL;
    rn_val_t *v = val_alloc(RN_VAL_STRING, 0);
    if (!v)
        return NULL;
    v->u.s.p = malloc(n + 1);
    if (!v->u.s.p) {
        free(v);
        return NULL;
    }
    if (n)
        memcpy(v->u.s.p, s, n);
    v->u.s.p[n] = '\0';
    v->u.s.len = n;
    return v;
}

rn_val_t *rn_val_str_new(const char *s)
{
    return rn_val_strn_new(s ? s : "", s ? strlen(s) : 0);
}

rn_val_t *rn_val_list_new(unsigned flags)
{
    return val_alloc(RN_VAL_LIST, flags);
}

rn_val_t *rn_val_map_new(unsigned flags)
{
    return val_alloc(RN_VAL_MAP, flags);
}

rn_val_t *rn_val_struct_new(const char *type_name, unsigned flags)
{
    rn_val_t *v = val_alloc(RN_VAL_STRUCT, flags);
    if (!v)
        return NULL;
    v->u.map.type_name = strdup(type_name ? type_name : "struct");
    if (!v->u.map.type_name) {
        free(v);
        return NULL;
    }
    return v;
}

rn_val_t *rn_val_trust(rn_val_t *v)
{
    if (v && v->refs != VAL_IMMORTAL)
        v->flags |= RN_VAL_F_TRUSTED;
    return v;
}

bool rn_val_is_trusted(const rn_val_t *v)
{
    if (!v)
        return true; /* reads as nil */
    switch (v->kind) {
    case RN_VAL_NIL:
    case RN_VAL_BOOL:
    case RN_VAL_INT:
    case RN_VAL_FLOAT:
        return true;
    default:
        return (v->flags & RN_VAL_F_TRUSTED) != 0;
    }
}

rn_val_t *rn_val_ref(rn_val_t *v)
{
    if (v && v->refs != VAL_IMMORTAL)
        v->refs++;
    return v;
}

static void val_free(rn_val_t *v)
{
    switch (v->kind) {
    case RN_VAL_STRING:
        free(v->u.s.p);
        break;
    case RN_VAL_LIST:
        for (size_t i = 0; i < v->u.list.len; i++)
            rn_val_destroy(&v->u.list.items[i]);
        free(v->u.list.items);
        break;
    case RN_VAL_MAP:
    case RN_VAL_STRUCT:
        for (size_t i = 0; i < v->u.map.len; i++) {
            val_entry_t *e = &v->u.map.ents[i];
            free(e->key);
            free(e->json_key);
            rn_val_destroy(&e->val);
        }
        free(v->u.map.ents);
        free(v->u.map.type_name);
        break;
    default:
        break;
    }
    free(v);
}

void rn_val_destroy(rn_val_t **v_p)
{
    if (!v_p || !*v_p)
        return;
    rn_val_t *v = *v_p;
    *v_p = NULL;
    if (v->refs == VAL_IMMORTAL)
        return;
    if (--v->refs == 0)
        val_free(v);
}

/* ---- containers ---- */

/* Whether needle occurs anywhere inside hay (a cycle would form if needle
 * were added to hay's descendant). Bounded by RN_VAL_MAX_DEPTH. */
static bool val_contains(const rn_val_t *hay, const rn_val_t *needle, int depth)
{
    if (hay == needle)
        return true;
    if (depth > RN_VAL_MAX_DEPTH)
        return true; /* refuse absurdly deep trees as if cyclic */
    if (hay->kind == RN_VAL_LIST) {
        for (size_t i = 0; i < hay->u.list.len; i++)
            if (val_contains(hay->u.list.items[i], needle, depth + 1))
                return true;
    } else if (hay->kind == RN_VAL_MAP || hay->kind == RN_VAL_STRUCT) {
        for (size_t i = 0; i < hay->u.map.len; i++)
            if (val_contains(hay->u.map.ents[i].val, needle, depth + 1))
                return true;
    }
    return false;
}

cr_status_t rn_val_list_append(rn_val_t *list, rn_val_t **item_p)
{
    rn_val_t *item = *item_p;
    *item_p = NULL;
    if (!item)
        return CR_E_NOMEM;
    if (list->u.list.len == list->u.list.cap) {
        size_t cap = list->u.list.cap ? list->u.list.cap * 2 : 4;
        rn_val_t **p = realloc(list->u.list.items, cap * sizeof *p);
        if (!p) {
            rn_val_destroy(&item);
            return CR_E_NOMEM;
        }
        list->u.list.items = p;
        list->u.list.cap = cap;
    }
    list->u.list.items[list->u.list.len++] = item;
    return CR_OK;
}

static cr_status_t entry_append(rn_val_t *m, const char *key, size_t key_len,
                                const char *json_key, unsigned fflags,
                                rn_val_t **item_p)
{
    rn_val_t *item = *item_p;
    *item_p = NULL;
    if (!item)
        return CR_E_NOMEM;
    if (m->u.map.len == m->u.map.cap) {
        size_t cap = m->u.map.cap ? m->u.map.cap * 2 : 4;
        val_entry_t *p = realloc(m->u.map.ents, cap * sizeof *p);
        if (!p)
            goto nomem;
        m->u.map.ents = p;
        m->u.map.cap = cap;
    }
    val_entry_t *e = &m->u.map.ents[m->u.map.len];
    e->key = strndup(key, key_len);
    e->json_key = json_key ? strdup(json_key) : NULL;
    if (!e->key || (json_key && !e->json_key)) {
        free(e->key);
        free(e->json_key);
        goto nomem;
    }
    e->fflags = fflags;
    e->val = item;
    m->u.map.len++;
    return CR_OK;
nomem:
    rn_val_destroy(&item);
    return CR_E_NOMEM;
}

/* Appends without the cycle check or key lookup (a builder that knows the
 * item is fresh and the key new). Takes ownership of *item_p. */
static cr_status_t map_append(rn_val_t *map, const char *key, size_t key_len,
                              rn_val_t **item_p)
{
    return entry_append(map, key, key_len, NULL, 0, item_p);
}

cr_status_t rn_val_list_push(rn_val_t *list, rn_val_t **item_p)
{
    if (!list || list->kind != RN_VAL_LIST || (*item_p && val_contains(*item_p, list, 0))) {
        rn_val_destroy(item_p);
        return CR_E_INVALID;
    }
    return rn_val_list_append(list, item_p);
}

cr_status_t rn_val_map_set(rn_val_t *map, const char *key, rn_val_t **item_p)
{
    if (!map || map->kind != RN_VAL_MAP || !key ||
        (*item_p && val_contains(*item_p, map, 0))) {
        rn_val_destroy(item_p);
        return CR_E_INVALID;
    }
    if (!*item_p)
        return CR_E_NOMEM;
    for (size_t i = 0; i < map->u.map.len; i++) {
        if (!strcmp(map->u.map.ents[i].key, key)) {
            rn_val_destroy(&map->u.map.ents[i].val);
            map->u.map.ents[i].val = *item_p;
            *item_p = NULL;
            return CR_OK;
        }
    }
    return entry_append(map, key, strlen(key), NULL, 0, item_p);
}

cr_status_t rn_val_struct_add(rn_val_t *st, const char *name,
                              const char *json_name, unsigned field_flags,
                              rn_val_t **item_p)
{
    if (!st || st->kind != RN_VAL_STRUCT || !name ||
        (*item_p && val_contains(*item_p, st, 0))) {
        rn_val_destroy(item_p);
        return CR_E_INVALID;
    }
    return entry_append(st, name, strlen(name), json_name, field_flags, item_p);
}

/* ---- accessors ---- */

rn_val_kind_t rn_val_kind(const rn_val_t *v)
{
    return v ? v->kind : RN_VAL_NIL;
}

unsigned rn_val_flags(const rn_val_t *v)
{
    return v ? v->flags : 0;
}

bool rn_val_as_bool(const rn_val_t *v)
{
    return v && v->kind == RN_VAL_BOOL && v->u.b;
}

int64_t rn_val_as_int(const rn_val_t *v)
{
    return v && v->kind == RN_VAL_INT ? v->u.i : 0;
}

double rn_val_as_float(const rn_val_t *v)
{
    return v && v->kind == RN_VAL_FLOAT ? v->u.f : 0.0;
}

const char *rn_val_as_str(const rn_val_t *v)
{
    return v && v->kind == RN_VAL_STRING ? v->u.s.p : "";
}

size_t rn_val_str_len(const rn_val_t *v)
{
    return v && v->kind == RN_VAL_STRING ? v->u.s.len : 0;
}

size_t rn_val_len(const rn_val_t *v)
{
    if (!v)
        return 0;
    if (v->kind == RN_VAL_LIST)
        return v->u.list.len;
    if (v->kind == RN_VAL_MAP || v->kind == RN_VAL_STRUCT)
        return v->u.map.len;
    return 0;
}

rn_val_t *rn_val_at(const rn_val_t *v, size_t i)
{
    if (!v || i >= rn_val_len(v))
        return NULL;
    return v->kind == RN_VAL_LIST ? v->u.list.items[i] : v->u.map.ents[i].val;
}

const char *rn_val_key_at(const rn_val_t *v, size_t i)
{
    if (!v || (v->kind != RN_VAL_MAP && v->kind != RN_VAL_STRUCT) || i >= v->u.map.len)
        return NULL;
    return v->u.map.ents[i].key;
}

rn_val_t *rn_val_get(const rn_val_t *v, const char *key)
{
    if (!v || (v->kind != RN_VAL_MAP && v->kind != RN_VAL_STRUCT) || !key)
        return NULL;
    for (size_t i = 0; i < v->u.map.len; i++)
        if (!strcmp(v->u.map.ents[i].key, key))
            return v->u.map.ents[i].val;
    return NULL;
}

bool rn_val_truth(const rn_val_t *v)
{
    switch (rn_val_kind(v)) {
    case RN_VAL_NIL:
        return false;
    case RN_VAL_BOOL:
        return v->u.b;
    case RN_VAL_INT:
        return v->u.i != 0;
    case RN_VAL_FLOAT:
        return v->u.f != 0.0;
    case RN_VAL_STRING:
        return v->u.s.len > 0;
    case RN_VAL_LIST:
        return v->u.list.len > 0;
    case RN_VAL_MAP:
        return v->u.map.len > 0;
    case RN_VAL_STRUCT:
        return true; /* a non-nil struct is always true */
    }
    return false;
}

const char *rn_val_type_name(const rn_val_t *v)
{
    switch (rn_val_kind(v)) {
    case RN_VAL_NIL:
        return "interface {}";
    case RN_VAL_BOOL:
        return "bool";
    case RN_VAL_INT:
        return "int";
    case RN_VAL_FLOAT:
        return "float64";
    case RN_VAL_STRING:
        return "string";
    case RN_VAL_LIST:
        return "[]interface {}";
    case RN_VAL_MAP:
        return "map[string]interface {}";
    case RN_VAL_STRUCT:
        return v->u.map.type_name;
    }
    return "?";
}

/* ---- entry order ---- */

typedef struct key_idx {
    const char *key;
    size_t idx;
} key_idx_t;

static int key_idx_cmp(const void *a, const void *b)
{
    const key_idx_t *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

void rn_val_map_order(const rn_val_t *v, size_t *idx)
{
    size_t n = rn_val_len(v);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    if (v->kind != RN_VAL_MAP || (v->flags & RN_VAL_F_ORDERED) || n < 2)
        return;
    key_idx_t *k = malloc(n * sizeof *k);
    if (!k) {
        /* Fall back to an in-place insertion sort: slow but correct. */
        for (size_t i = 1; i < n; i++)
            for (size_t j = i; j > 0 && strcmp(v->u.map.ents[idx[j - 1]].key,
                                               v->u.map.ents[idx[j]].key) > 0; j--) {
                size_t t = idx[j];
                idx[j] = idx[j - 1];
                idx[j - 1] = t;
            }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        k[i].key = v->u.map.ents[i].key;
        k[i].idx = i;
    }
    qsort(k, n, sizeof *k, key_idx_cmp);
    for (size_t i = 0; i < n; i++)
        idx[i] = k[i].idx;
    free(k);
}

/* ---- numbers the Go way ---- */

cr_status_t rn_val_fmt_float_g(double f, cr_buf_t *out)
{
    char tmp[CR_FLOAT_BUF];
    size_t n = cr_float_format(f, 64, CR_FLOAT_G, tmp, sizeof tmp);
    return cr_buf_append(out, tmp, n);
}

/* encoding/json's float64 encoder. */
static cr_status_t json_float(double f, cr_buf_t *out)
{
    if (isnan(f) || isinf(f))
        return CR_E_INVALID;
    char tmp[CR_FLOAT_BUF];
    size_t n = cr_float_format(f, 64, CR_FLOAT_JSON, tmp, sizeof tmp);
    return cr_buf_append(out, tmp, n);
}

/* ---- JSON ---- */

/* Appends s as a JSON string with Go's escaping (HTML-safe). */
static cr_status_t go_json_string(const char *s, size_t len, cr_buf_t *out)
{
    return cr_json_quote(s, len, out);
}

/* encoding/json's isEmptyValue, for omitempty. */
static bool json_is_empty(const rn_val_t *v)
{
    switch (v->kind) {
    case RN_VAL_NIL:
        return true;
    case RN_VAL_BOOL:
        return !v->u.b;
    case RN_VAL_INT:
        return v->u.i == 0;
    case RN_VAL_FLOAT:
        return v->u.f == 0;
    case RN_VAL_STRING:
        return v->u.s.len == 0;
    case RN_VAL_LIST:
    case RN_VAL_MAP:
        return rn_val_len(v) == 0;
    case RN_VAL_STRUCT:
        return false;
    }
    return false;
}

static cr_status_t to_json(const rn_val_t *v, cr_buf_t *out, int depth)
{
    if (depth > RN_VAL_MAX_DEPTH)
        return CR_E_INVALID;
    cr_status_t st = CR_OK;
    switch (v->kind) {
    case RN_VAL_NIL:
        return cr_buf_puts(out, "null");
    case RN_VAL_BOOL:
        return cr_buf_puts(out, v->u.b ? "true" : "false");
    case RN_VAL_INT:
        return cr_buf_printf(out, "%" PRId64, v->u.i);
    case RN_VAL_FLOAT:
        return json_float(v->u.f, out);
    case RN_VAL_STRING:
        return go_json_string(v->u.s.p, v->u.s.len, out);
    case RN_VAL_LIST:
        if (v->flags & RN_VAL_F_NIL)
            return cr_buf_puts(out, "null");
        st = cr_buf_putc(out, '[');
        for (size_t i = 0; !st && i < v->u.list.len; i++) {
            if (i)
                st = cr_buf_putc(out, ',');
            if (!st)
                st = to_json(v->u.list.items[i], out, depth + 1);
        }
        return st ? st : cr_buf_putc(out, ']');
    case RN_VAL_MAP: {
        if (v->flags & RN_VAL_F_NIL)
            return cr_buf_puts(out, "null");
        size_t n = v->u.map.len;
        size_t *idx = n ? malloc(n * sizeof *idx) : NULL;
        if (n && !idx)
            return CR_E_NOMEM;
        rn_val_map_order(v, idx);
        st = cr_buf_putc(out, '{');
        for (size_t i = 0; !st && i < n; i++) {
            const val_entry_t *e = &v->u.map.ents[idx[i]];
            if (i)
                st = cr_buf_putc(out, ',');
            if (!st)
                st = go_json_string(e->key, strlen(e->key), out);
            if (!st)
                st = cr_buf_putc(out, ':');
            if (!st)
                st = to_json(e->val, out, depth + 1);
        }
        free(idx);
        return st ? st : cr_buf_putc(out, '}');
    }
    case RN_VAL_STRUCT: {
        st = cr_buf_putc(out, '{');
        bool first = true;
        for (size_t i = 0; !st && i < v->u.map.len; i++) {
            const val_entry_t *e = &v->u.map.ents[i];
            const char *name = e->json_key ? e->json_key : e->key;
            if (!strcmp(name, "-"))
                continue;
            if ((e->fflags & RN_FIELD_OMITEMPTY) && json_is_empty(e->val))
                continue;
            if (!first)
                st = cr_buf_putc(out, ',');
            first = false;
            if (!st)
                st = go_json_string(name, strlen(name), out);
            if (!st)
                st = cr_buf_putc(out, ':');
            if (!st)
                st = to_json(e->val, out, depth + 1);
        }
        return st ? st : cr_buf_putc(out, '}');
    }
    }
    return CR_E_INTERNAL;
}

cr_status_t rn_val_to_json(const rn_val_t *v, cr_buf_t *out)
{
    size_t mark = out->len;
    cr_status_t st = to_json(v ? v : &nil_g, out, 0);
    if (st) {
        out->len = mark; /* no partial JSON */
        if (out->data)
            out->data[mark] = '\0';
    }
    return st;
}

/* ---- printing (%v) ---- */

cr_status_t rn_val_print_depth(const rn_val_t *v, cr_buf_t *out, int depth)
{
    if (depth > RN_VAL_MAX_DEPTH)
        return CR_E_INVALID;
    if (v->flags & RN_VAL_F_JSON_PRINT) {
        /* The String() method: marshal; a nil map prints "{}", and a
         * marshal error prints nothing, as Ollama ignores it. */
        if (v->kind == RN_VAL_MAP && (v->flags & RN_VAL_F_NIL))
            return cr_buf_puts(out, "{}");
        cr_status_t st = rn_val_to_json(v, out);
        return st == CR_E_INVALID ? CR_OK : st;
    }
    cr_status_t st = CR_OK;
    switch (v->kind) {
    case RN_VAL_NIL:
        return cr_buf_puts(out, depth == 0 ? "<no value>" : "<nil>");
    case RN_VAL_BOOL:
        return cr_buf_puts(out, v->u.b ? "true" : "false");
    case RN_VAL_INT:
        return cr_buf_printf(out, "%" PRId64, v->u.i);
    case RN_VAL_FLOAT:
        return rn_val_fmt_float_g(v->u.f, out);
    case RN_VAL_STRING:
        return cr_buf_append(out, v->u.s.p, v->u.s.len);
    case RN_VAL_LIST:
        st = cr_buf_putc(out, '[');
        for (size_t i = 0; !st && i < v->u.list.len; i++) {
            if (i)
                st = cr_buf_putc(out, ' ');
            if (!st)
                st = rn_val_print_depth(v->u.list.items[i], out, depth + 1);
        }
        return st ? st : cr_buf_putc(out, ']');
    case RN_VAL_MAP: {
        size_t n = v->u.map.len;
        size_t *idx = n ? malloc(n * sizeof *idx) : NULL;
        if (n && !idx)
            return CR_E_NOMEM;
        rn_val_map_order(v, idx);
        st = cr_buf_puts(out, "map[");
        for (size_t i = 0; !st && i < n; i++) {
            const val_entry_t *e = &v->u.map.ents[idx[i]];
            if (i)
                st = cr_buf_putc(out, ' ');
            if (!st)
                st = cr_buf_puts(out, e->key);
            if (!st)
                st = cr_buf_putc(out, ':');
            if (!st)
                st = rn_val_print_depth(e->val, out, depth + 1);
        }
        free(idx);
        return st ? st : cr_buf_putc(out, ']');
    }
    case RN_VAL_STRUCT:
        st = cr_buf_puts(out, (v->flags & RN_VAL_F_POINTER) ? "&{" : "{");
        for (size_t i = 0; !st && i < v->u.map.len; i++) {
            if (i)
                st = cr_buf_putc(out, ' ');
            if (!st)
                st = rn_val_print_depth(v->u.map.ents[i].val, out, depth + 1);
        }
        return st ? st : cr_buf_putc(out, '}');
    }
    return CR_E_INTERNAL;
}

cr_status_t rn_val_print(const rn_val_t *v, cr_buf_t *out)
{
    /* A nil inside fmt.Print prints "<nil>"; "<no value>" is the
     * template's word for an action that yields nothing. */
    return rn_val_print_depth(v ? v : &nil_g, out, 1);
}

/* ---- from JSON ---- */

static cr_status_t from_json(const json_t *j, unsigned opts, int depth,
                             rn_val_t **out, cr_err_t *err)
{
    *out = NULL;
    if (depth > RN_VAL_MAX_DEPTH)
        return cr_err_set(err, CR_E_TOO_LARGE, "JSON nested deeper than %d",
                          RN_VAL_MAX_DEPTH);
    rn_val_t *v = NULL;
    cr_status_t st = CR_OK;
    switch (json_typeof(j)) {
    case JSON_NULL:
        *out = rn_val_nil();
        return CR_OK;
    case JSON_TRUE:
    case JSON_FALSE:
        v = rn_val_bool_new(json_is_true(j));
        break;
    case JSON_INTEGER:
        v = (opts & RN_JSON_KEEP_INTS) ? rn_val_int_new((int64_t)json_integer_value(j))
                                       : rn_val_float_new((double)json_integer_value(j));
        break;
    case JSON_REAL:
        v = rn_val_float_new(json_real_value(j));
        break;
    case JSON_STRING:
        v = rn_val_strn_new(json_string_value(j), json_string_length(j));
        break;
    case JSON_ARRAY: {
        v = rn_val_list_new(0);
        size_t i;
        json_t *e;
        json_array_foreach(j, i, e)
        {
            if (!v)
                break;
            rn_val_t *item = NULL;
            st = from_json(e, opts, depth + 1, &item, err);
            if (!st)
                st = rn_val_list_append(v, &item);
            if (st)
                goto fail;
        }
        break;
    }
    case JSON_OBJECT: {
        v = rn_val_map_new((opts & RN_JSON_ORDERED) ? RN_VAL_F_ORDERED : 0);
        const char *key;
        size_t key_len;
        json_t *e;
        void *tmp;
        json_object_keylen_foreach_safe((json_t *)j, tmp, key, key_len, e)
        {
            if (!v)
                break;
            rn_val_t *item = NULL;
            st = from_json(e, opts, depth + 1, &item, err);
            if (!st)
                st = map_append(v, key, key_len, &item);
            if (st)
                goto fail;
        }
        break;
    }
    }
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory converting JSON");
    *out = v;
    return CR_OK;
fail:
    rn_val_destroy(&v);
    if (st == CR_E_NOMEM && err && !err->msg[0])
        cr_err_set(err, st, "out of memory converting JSON");
    return st;
}

cr_status_t rn_val_from_json(const json_t *j, unsigned opts, rn_val_t **out,
                             cr_err_t *err)
{
    if (err)
        cr_err_clear(err);
    if (!j) {
        *out = rn_val_nil();
        return CR_OK;
    }
    cr_status_t st = from_json(j, opts, 0, out, err);
    if (!st && (opts & RN_JSON_TOP_PRINTS_JSON) &&
        ((*out)->kind == RN_VAL_LIST || (*out)->kind == RN_VAL_MAP))
        (*out)->flags |= RN_VAL_F_JSON_PRINT;
    return st;
}
