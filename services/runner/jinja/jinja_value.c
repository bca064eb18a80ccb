/* jinja_value.c: the values templates compute with, with Python's
 * semantics: truthiness, ==, ordering, str() and repr() (how {{ }} prints
 * numbers, lists and dicts), attribute and item lookup as Jinja2's sandbox
 * does them (a missing one is an undefined that raises when used),
 * slicing, iteration and len(). Strings are UTF-8 and indexed, sliced and
 * counted by code point. */
#include "services/runner/jinja/jinja_impl.h"

#include "lib/gotext.h"

#include <math.h>

jj_value_t jj_none(void)
{
    return (jj_value_t){.kind = JJ_NONE};
}

jj_value_t jj_bool(bool b)
{
    return (jj_value_t){.kind = JJ_BOOL, .u.b = b};
}

jj_value_t jj_int(int64_t i)
{
    return (jj_value_t){.kind = JJ_INT, .u.i = i};
}

jj_value_t jj_float(double f)
{
    return (jj_value_t){.kind = JJ_FLOAT, .u.f = f};
}

jj_value_t jj_str_value(jj_str_t *s)
{
    return (jj_value_t){.kind = JJ_STR, .u.s = s};
}

jj_value_t jj_str(jj_rt_t *rt, const char *s, size_t n)
{
    jj_str_t *str = jj_alloc(&rt->arena, sizeof *str);
    str->s = jj_strndup(&rt->arena, s, n);
    str->len = n;
    return jj_str_value(str);
}

jj_value_t jj_substr(jj_rt_t *rt, const jj_str_t *s, size_t off, size_t n)
{
    jj_value_t v = jj_str(rt, s->s + off, n);
    if (s->taint && n && memchr(s->taint + off, 1, n)) {
        uint8_t *t = jj_alloc(&rt->arena, n);
        memcpy(t, s->taint + off, n);
        v.u.s->taint = t;
    }
    return v;
}

bool jj_str_tainted_at(const jj_str_t *s, size_t i)
{
    return s->taint && i < s->len && s->taint[i];
}

jj_value_t jj_cstr(jj_rt_t *rt, const char *s)
{
    return jj_str(rt, s, strlen(s));
}

jj_value_t jj_undef(jj_rt_t *rt, const char *fmt, ...)
{
    char msg[CR_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jj_value_t v = jj_cstr(rt, msg);
    v.kind = JJ_UNDEF;
    return v;
}

void jj_undef_fail(jj_rt_t *rt, jj_value_t v)
{
    jj_fail(rt, "%s", v.u.s ? v.u.s->s : "UndefinedError: undefined value");
}

jj_value_t jj_list_new(jj_rt_t *rt, int flavor)
{
    jj_list_t *l = jj_alloc(&rt->arena, sizeof *l);
    l->flavor = flavor;
    return (jj_value_t){.kind = JJ_LIST, .u.l = l};
}

void jj_list_push(jj_rt_t *rt, jj_list_t *l, jj_value_t v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jj_value_t *nv = jj_alloc_array(&rt->arena, cap, sizeof *nv);
        if (l->n)
            memcpy(nv, l->items, l->n * sizeof *nv);
        l->items = nv;
        l->cap = cap;
    }
    l->items[l->n++] = v;
}

jj_value_t jj_dict_new(jj_rt_t *rt, jj_kind_t kind)
{
    jj_dict_t *d = jj_alloc(&rt->arena, sizeof *d);
    return (jj_value_t){.kind = kind, .u.d = d};
}

jj_value_t *jj_dict_find(jj_dict_t *d, jj_value_t key)
{
    for (size_t i = 0; i < d->n; i++)
        if (jj_equal(d->keys[i], key))
            return &d->vals[i];
    return NULL;
}

jj_value_t *jj_dict_find_str(jj_dict_t *d, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].kind == JJ_STR && d->keys[i].u.s->len == n &&
            memcmp(d->keys[i].u.s->s, key, n) == 0)
            return &d->vals[i];
    return NULL;
}

void jj_dict_set(jj_rt_t *rt, jj_dict_t *d, jj_value_t key, jj_value_t val)
{
    jj_value_t *slot = jj_dict_find(d, key);
    if (slot) {
        *slot = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jj_value_t *nk = jj_alloc_array(&rt->arena, cap, sizeof *nk);
        jj_value_t *nv = jj_alloc_array(&rt->arena, cap, sizeof *nv);
        if (d->n) {
            memcpy(nk, d->keys, d->n * sizeof *nk);
            memcpy(nv, d->vals, d->n * sizeof *nv);
        }
        d->keys = nk;
        d->vals = nv;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
}

bool jj_is_number(jj_value_t v)
{
    return v.kind == JJ_INT || v.kind == JJ_FLOAT || v.kind == JJ_BOOL;
}

double jj_as_double(jj_value_t v)
{
    switch (v.kind) {
    case JJ_BOOL: return v.u.b ? 1.0 : 0.0;
    case JJ_INT: return (double)v.u.i;
    case JJ_FLOAT: return v.u.f;
    default: return 0.0;
    }
}

bool jj_truthy(jj_value_t v)
{
    switch (v.kind) {
    case JJ_UNDEF:
    case JJ_NONE: return false;
    case JJ_BOOL: return v.u.b;
    case JJ_INT: return v.u.i != 0;
    case JJ_FLOAT: return v.u.f != 0.0;
    case JJ_STR: return v.u.s->len > 0;
    case JJ_LIST: return v.u.l->n > 0 || v.u.l->flavor == JJ_LIST_GENERATOR;
    case JJ_DICT: return v.u.d->n > 0;
    default: return true;
    }
}

static bool str_eq(const jj_str_t *a, const jj_str_t *b)
{
    return a->len == b->len && memcmp(a->s, b->s, a->len) == 0;
}

bool jj_equal(jj_value_t a, jj_value_t b)
{
    if (jj_is_number(a) && jj_is_number(b)) {
        if (a.kind != JJ_FLOAT && b.kind != JJ_FLOAT)
            return (a.kind == JJ_INT ? a.u.i : a.u.b) == (b.kind == JJ_INT ? b.u.i : b.u.b);
        return jj_as_double(a) == jj_as_double(b);
    }
    if (a.kind != b.kind)
        return false;
    switch (a.kind) {
    case JJ_UNDEF:
    case JJ_NONE: return true;
    case JJ_STR: return str_eq(a.u.s, b.u.s);
    case JJ_LIST:
        if (a.u.l == b.u.l)
            return true;
        if (a.u.l->flavor != b.u.l->flavor || a.u.l->flavor == JJ_LIST_GENERATOR ||
            a.u.l->n != b.u.l->n)
            return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!jj_equal(a.u.l->items[i], b.u.l->items[i]))
                return false;
        return true;
    case JJ_DICT:
        if (a.u.d->n != b.u.d->n)
            return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jj_value_t *bv = jj_dict_find(b.u.d, a.u.d->keys[i]);
            if (!bv || !jj_equal(a.u.d->vals[i], *bv))
                return false;
        }
        return true;
    case JJ_NS: return a.u.d == b.u.d;
    case JJ_FUNC: return a.u.fn == b.u.fn;
    case JJ_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

int jj_compare(jj_rt_t *rt, jj_value_t a, jj_value_t b)
{
    if (a.kind == JJ_UNDEF)
        jj_undef_fail(rt, a);
    if (b.kind == JJ_UNDEF)
        jj_undef_fail(rt, b);
    if (jj_is_number(a) && jj_is_number(b)) {
        if (a.kind != JJ_FLOAT && b.kind != JJ_FLOAT) {
            int64_t x = a.kind == JJ_INT ? a.u.i : a.u.b, y = b.kind == JJ_INT ? b.u.i : b.u.b;
            return x < y ? -1 : x > y;
        }
        double x = jj_as_double(a), y = jj_as_double(b);
        return x < y ? -1 : x > y;
    }
    if (a.kind == JJ_STR && b.kind == JJ_STR) {
        size_t n = CR_MIN(a.u.s->len, b.u.s->len);
        int c = memcmp(a.u.s->s, b.u.s->s, n);
        if (c)
            return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
    }
    if (a.kind == JJ_LIST && b.kind == JJ_LIST && a.u.l->flavor == b.u.l->flavor) {
        size_t n = CR_MIN(a.u.l->n, b.u.l->n);
        for (size_t i = 0; i < n; i++) {
            if (jj_equal(a.u.l->items[i], b.u.l->items[i]))
                continue;
            return jj_compare(rt, a.u.l->items[i], b.u.l->items[i]);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
    }
    jj_fail(rt, "TypeError: '<' not supported between instances of '%s' and '%s'",
            jj_type_name(a), jj_type_name(b));
}

const char *jj_type_name(jj_value_t v)
{
    switch (v.kind) {
    case JJ_UNDEF: return "Undefined";
    case JJ_NONE: return "NoneType";
    case JJ_BOOL: return "bool";
    case JJ_INT: return "int";
    case JJ_FLOAT: return "float";
    case JJ_STR: return "str";
    case JJ_LIST:
        return v.u.l->flavor == JJ_LIST_TUPLE       ? "tuple"
               : v.u.l->flavor == JJ_LIST_GENERATOR ? "generator"
                                                    : "list";
    case JJ_DICT: return "dict";
    case JJ_NS: return "Namespace";
    case JJ_FUNC: return v.u.fn->kind == JJ_FN_MACRO ? "Macro" : "function";
    case JJ_LOOP: return "LoopContext";
    }
    return "object";
}

/* ---- printing -------------------------------------------------------- */

void jj_write_float(jj_sb_t *sb, double f)
{
    if (isnan(f)) {
        jj_sb_puts(sb, "nan");
        return;
    }
    if (isinf(f)) {
        jj_sb_puts(sb, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0.0) {
        jj_sb_puts(sb, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char digits[32], out[64];
    int dp;
    int nd = cr_float_digits(fabs(f), 64, digits, &dp);
    size_t o = 0;
    if (f < 0)
        out[o++] = '-';
    int exp10 = dp - 1;
    /* repr(float): positional for 1e-4 <= |f| < 1e16, else exponent. */
    if (exp10 >= -4 && exp10 < 16) {
        if (dp <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -dp; i++)
                out[o++] = '0';
            memcpy(out + o, digits, (size_t)nd);
            o += (size_t)nd;
        } else if (dp >= nd) {
            memcpy(out + o, digits, (size_t)nd);
            o += (size_t)nd;
            for (int i = nd; i < dp; i++)
                out[o++] = '0';
            out[o++] = '.';
            out[o++] = '0';
        } else {
            memcpy(out + o, digits, (size_t)dp);
            o += (size_t)dp;
            out[o++] = '.';
            memcpy(out + o, digits + dp, (size_t)(nd - dp));
            o += (size_t)(nd - dp);
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, (size_t)(nd - 1));
            o += (size_t)(nd - 1);
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    jj_sb_puts(sb, out);
}

static void write_str_repr(jj_sb_t *sb, const jj_str_t *s)
{
    bool has_single = memchr(s->s, '\'', s->len) != NULL;
    bool has_double = memchr(s->s, '"', s->len) != NULL;
    char quote = has_single && !has_double ? '"' : '\'';
    jj_sb_append(sb, &quote, 1);
    size_t run = 0;
    for (size_t i = 0; i < s->len; i++) {
        unsigned char c = (unsigned char)s->s[i];
        const char *esc = NULL;
        char hex[8];
        if (c == '\\')
            esc = "\\\\";
        else if (c == (unsigned char)quote)
            esc = quote == '\'' ? "\\'" : "\\\"";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20 || c == 0x7f) {
            snprintf(hex, sizeof hex, "\\x%02x", c);
            esc = hex;
        }
        if (esc) {
            jj_sb_append_str(sb, s, run, i - run);
            jj_sb_append_marked(sb, esc, strlen(esc), jj_str_tainted_at(s, i));
            run = i + 1;
        }
    }
    jj_sb_append_str(sb, s, run, s->len - run);
    jj_sb_append(sb, &quote, 1);
}

static void write_container(jj_sb_t *sb, jj_value_t v)
{
    if (++sb->rt->depth > sb->rt->limits.max_depth)
        jj_throw(&sb->rt->jump, CR_E_TOO_LARGE, "RecursionError: value nested too deeply");
    if (v.kind == JJ_LIST) {
        bool tuple = v.u.l->flavor == JJ_LIST_TUPLE;
        if (v.u.l->flavor == JJ_LIST_GENERATOR) {
            jj_sb_puts(sb, "<generator object>");
        } else {
            jj_sb_puts(sb, tuple ? "(" : "[");
            for (size_t i = 0; i < v.u.l->n; i++) {
                if (i)
                    jj_sb_puts(sb, ", ");
                jj_write_repr(sb, v.u.l->items[i]);
            }
            if (tuple && v.u.l->n == 1)
                jj_sb_puts(sb, ",");
            jj_sb_puts(sb, tuple ? ")" : "]");
        }
    } else {
        jj_sb_puts(sb, v.kind == JJ_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i)
                jj_sb_puts(sb, ", ");
            jj_write_repr(sb, v.u.d->keys[i]);
            jj_sb_puts(sb, ": ");
            jj_write_repr(sb, v.u.d->vals[i]);
        }
        jj_sb_puts(sb, v.kind == JJ_NS ? "}>" : "}");
    }
    sb->rt->depth--;
}

void jj_write_str(jj_sb_t *sb, jj_value_t v)
{
    switch (v.kind) {
    case JJ_UNDEF: return;
    case JJ_NONE: jj_sb_puts(sb, "None"); return;
    case JJ_BOOL: jj_sb_puts(sb, v.u.b ? "True" : "False"); return;
    case JJ_INT: jj_sb_printf(sb, "%" PRId64, v.u.i); return;
    case JJ_FLOAT: jj_write_float(sb, v.u.f); return;
    case JJ_STR: jj_sb_append_str(sb, v.u.s, 0, v.u.s->len); return;
    case JJ_LIST:
    case JJ_DICT:
    case JJ_NS: write_container(sb, v); return;
    case JJ_FUNC: jj_sb_printf(sb, "<function %s>", v.u.fn->name ? v.u.fn->name : ""); return;
    case JJ_LOOP: jj_sb_puts(sb, "<LoopContext>"); return;
    }
}

void jj_write_repr(jj_sb_t *sb, jj_value_t v)
{
    if (v.kind == JJ_STR)
        write_str_repr(sb, v.u.s);
    else
        jj_write_str(sb, v);
}

void jj_sb_append_escaped(jj_sb_t *sb, const jj_str_t *s)
{
    size_t run = 0;
    for (size_t i = 0; i < s->len; i++) {
        const char *esc = NULL;
        switch (s->s[i]) {
        case '&': esc = "&amp;"; break;
        case '<': esc = "&lt;"; break;
        case '>': esc = "&gt;"; break;
        case '\'': esc = "&#39;"; break;
        case '"': esc = "&#34;"; break;
        default: continue;
        }
        jj_sb_append_str(sb, s, run, i - run);
        jj_sb_append_marked(sb, esc, strlen(esc), jj_str_tainted_at(s, i));
        run = i + 1;
    }
    jj_sb_append_str(sb, s, run, s->len - run);
}

jj_str_t *jj_to_str(jj_rt_t *rt, jj_value_t v)
{
    if (v.kind == JJ_STR)
        return v.u.s;
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    jj_write_str(&sb, v);
    return jj_sb_finish(&sb);
}

/* ---- UTF-8 ----------------------------------------------------------- */

static size_t utf8_next(const char *s, size_t n, size_t i)
{
    uint32_t cp;
    size_t k = cr_utf8_decode((const unsigned char *)s + i, n - i, &cp);
    return i + (k ? k : 1);
}

size_t jj_utf8_count(const char *s, size_t n)
{
    size_t count = 0;
    for (size_t i = 0; i < n; i = utf8_next(s, n, i))
        count++;
    return count;
}

/* Byte offsets of each code point of s, plus one past the end. */
static size_t *utf8_offsets(jj_rt_t *rt, const jj_str_t *s, size_t *count)
{
    size_t n = jj_utf8_count(s->s, s->len);
    size_t *off = jj_alloc_array(&rt->arena, n + 1, sizeof *off);
    size_t k = 0;
    for (size_t i = 0; i < s->len; i = utf8_next(s->s, s->len, i))
        off[k++] = i;
    off[k] = s->len;
    *count = n;
    return off;
}

/* ---- iteration and lookup -------------------------------------------- */

jj_list_t *jj_iterate(jj_rt_t *rt, jj_value_t v)
{
    switch (v.kind) {
    case JJ_UNDEF: return jj_list_new(rt, JJ_LIST_PLAIN).u.l;
    case JJ_LIST: return v.u.l;
    case JJ_DICT:
    case JJ_NS: {
        jj_list_t *l = jj_list_new(rt, JJ_LIST_PLAIN).u.l;
        for (size_t i = 0; i < v.u.d->n; i++)
            jj_list_push(rt, l, v.u.d->keys[i]);
        return l;
    }
    case JJ_STR: {
        jj_list_t *l = jj_list_new(rt, JJ_LIST_PLAIN).u.l;
        size_t n;
        size_t *off = utf8_offsets(rt, v.u.s, &n);
        for (size_t i = 0; i < n; i++)
            jj_list_push(rt, l, jj_substr(rt, v.u.s, off[i], off[i + 1] - off[i]));
        return l;
    }
    default: jj_fail(rt, "TypeError: '%s' object is not iterable", jj_type_name(v));
    }
}

int64_t jj_length(jj_rt_t *rt, jj_value_t v)
{
    switch (v.kind) {
    case JJ_UNDEF: return 0;
    case JJ_STR: return (int64_t)jj_utf8_count(v.u.s->s, v.u.s->len);
    case JJ_LIST:
        if (v.u.l->flavor == JJ_LIST_GENERATOR)
            break;
        return (int64_t)v.u.l->n;
    case JJ_DICT: return (int64_t)v.u.d->n;
    default: break;
    }
    jj_fail(rt, "TypeError: object of type '%s' has no len()", jj_type_name(v));
}

static jj_value_t missing_attr(jj_rt_t *rt, jj_value_t obj, const char *name)
{
    if (obj.kind == JJ_NONE)
        return jj_undef(rt, "UndefinedError: 'None' has no attribute '%s'", name);
    return jj_undef(rt, "UndefinedError: '%s object' has no attribute '%s'", jj_type_name(obj),
                    name);
}

static jj_value_t loop_attr(jj_rt_t *rt, jj_loop_t *loop, const char *name, bool *found);

jj_value_t jj_getattr(jj_rt_t *rt, jj_value_t obj, const char *name)
{
    jj_value_t out;
    switch (obj.kind) {
    case JJ_UNDEF: jj_undef_fail(rt, obj);
    case JJ_DICT: {
        if (jj_method_lookup(rt, obj, name, &out))
            return out;
        jj_value_t *v = jj_dict_find_str(obj.u.d, name);
        return v ? *v : missing_attr(rt, obj, name);
    }
    case JJ_NS: {
        jj_value_t *v = jj_dict_find_str(obj.u.d, name);
        return v ? *v : missing_attr(rt, obj, name);
    }
    case JJ_LOOP: {
        bool found;
        out = loop_attr(rt, obj.u.loop, name, &found);
        return found ? out : missing_attr(rt, obj, name);
    }
    default:
        if (jj_method_lookup(rt, obj, name, &out))
            return out;
        return missing_attr(rt, obj, name);
    }
}

/* Python's index normalization: negative counts from the end. */
static bool norm_index(jj_value_t key, size_t n, size_t *out)
{
    if (key.kind != JJ_INT && key.kind != JJ_BOOL)
        return false;
    int64_t i = key.kind == JJ_INT ? key.u.i : key.u.b;
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return false;
    *out = (size_t)i;
    return true;
}

jj_value_t jj_getitem(jj_rt_t *rt, jj_value_t obj, jj_value_t key)
{
    size_t idx;
    switch (obj.kind) {
    case JJ_UNDEF: jj_undef_fail(rt, obj);
    case JJ_DICT: {
        jj_value_t *v = jj_dict_find(obj.u.d, key);
        if (v)
            return *v;
        break;
    }
    case JJ_LIST:
        if (obj.u.l->flavor != JJ_LIST_GENERATOR && norm_index(key, obj.u.l->n, &idx))
            return obj.u.l->items[idx];
        break;
    case JJ_STR:
        if (key.kind == JJ_INT || key.kind == JJ_BOOL) {
            size_t n;
            size_t *off = utf8_offsets(rt, obj.u.s, &n);
            if (norm_index(key, n, &idx))
                return jj_substr(rt, obj.u.s, off[idx], off[idx + 1] - off[idx]);
        }
        break;
    default: break;
    }
    if (key.kind == JJ_STR)
        return jj_getattr(rt, obj, key.u.s->s);
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    jj_write_repr(&sb, key);
    if (obj.kind == JJ_NONE)
        return jj_undef(rt, "UndefinedError: None has no element %s", jj_sb_finish(&sb)->s);
    return jj_undef(rt, "UndefinedError: %s object has no element %s", jj_type_name(obj),
                    jj_sb_finish(&sb)->s);
}

static int64_t slice_arg(jj_rt_t *rt, const jj_value_t *v, int64_t dflt)
{
    if (!v || v->kind == JJ_NONE)
        return dflt;
    if (v->kind == JJ_INT)
        return v->u.i;
    if (v->kind == JJ_BOOL)
        return v->u.b;
    jj_fail(rt, "TypeError: slice indices must be integers or None");
}

jj_value_t jj_slice(jj_rt_t *rt, jj_value_t obj, const jj_value_t *start,
                    const jj_value_t *stop, const jj_value_t *step)
{
    if (obj.kind == JJ_UNDEF)
        jj_undef_fail(rt, obj);
    size_t n;
    size_t *off = NULL;
    if (obj.kind == JJ_STR)
        off = utf8_offsets(rt, obj.u.s, &n);
    else if (obj.kind == JJ_LIST && obj.u.l->flavor != JJ_LIST_GENERATOR)
        n = obj.u.l->n;
    else
        jj_fail(rt, "TypeError: '%s' object is not subscriptable", jj_type_name(obj));
    int64_t len = (int64_t)n;
    int64_t st = slice_arg(rt, step, 1);
    if (st == 0)
        jj_fail(rt, "ValueError: slice step cannot be zero");
    /* Python's slice.indices(). */
    int64_t lo = st < 0 ? -1 : 0, hi = st < 0 ? len - 1 : len;
    int64_t b = slice_arg(rt, start, st < 0 ? hi : lo);
    int64_t e = slice_arg(rt, stop, st < 0 ? lo : hi);
    if (start && start->kind != JJ_NONE) {
        if (b < 0)
            b = CR_MAX(b + len, lo);
        else
            b = CR_MIN(b, hi);
    }
    if (stop && stop->kind != JJ_NONE) {
        if (e < 0)
            e = CR_MAX(e + len, lo);
        else
            e = CR_MIN(e, hi);
    }
    if (obj.kind == JJ_STR) {
        jj_sb_t sb;
        jj_sb_init(&sb, rt);
        for (int64_t i = b; st > 0 ? i < e : i > e; i += st)
            jj_sb_append_str(&sb, obj.u.s, off[i], off[i + 1] - off[i]);
        return jj_str_value(jj_sb_finish(&sb));
    }
    jj_value_t out = jj_list_new(rt, obj.u.l->flavor);
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st)
        jj_list_push(rt, out.u.l, obj.u.l->items[i]);
    return out;
}

/* ---- the loop object ------------------------------------------------- */

struct jj_loop {
    jj_list_t *items;
    size_t index0;
};

static jj_value_t loop_attr(jj_rt_t *rt, jj_loop_t *loop, const char *name, bool *found)
{
    int64_t i = (int64_t)loop->index0, n = (int64_t)loop->items->n;
    *found = true;
    if (!strcmp(name, "index"))
        return jj_int(i + 1);
    if (!strcmp(name, "index0"))
        return jj_int(i);
    if (!strcmp(name, "revindex"))
        return jj_int(n - i);
    if (!strcmp(name, "revindex0"))
        return jj_int(n - i - 1);
    if (!strcmp(name, "first"))
        return jj_bool(i == 0);
    if (!strcmp(name, "last"))
        return jj_bool(i == n - 1);
    if (!strcmp(name, "length"))
        return jj_int(n);
    if (!strcmp(name, "depth"))
        return jj_int(1);
    if (!strcmp(name, "depth0"))
        return jj_int(0);
    if (!strcmp(name, "previtem"))
        return i > 0 ? loop->items->items[i - 1]
                     : jj_undef(rt, "UndefinedError: there is no previous item");
    if (!strcmp(name, "nextitem"))
        return i + 1 < n ? loop->items->items[i + 1]
                         : jj_undef(rt, "UndefinedError: there is no next item");
    jj_value_t self = {.kind = JJ_LOOP, .u.loop = loop}, method;
    if (jj_method_lookup(rt, self, name, &method))
        return method;
    *found = false;
    return jj_none();
}

size_t jj_loop_index(jj_value_t loop)
{
    return loop.u.loop->index0;
}

void jj_loop_set_index(jj_value_t loop, size_t index0)
{
    loop.u.loop->index0 = index0;
}

jj_value_t jj_loop_new(jj_rt_t *rt, jj_list_t *items, size_t index0)
{
    jj_loop_t *loop = jj_alloc(&rt->arena, sizeof *loop);
    loop->items = items;
    loop->index0 = index0;
    return (jj_value_t){.kind = JJ_LOOP, .u.loop = loop};
}
