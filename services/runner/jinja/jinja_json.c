/* jinja_json.c: JSON in and out of template values: the render context
 * (jansson) becomes values, and `tojson` writes values as Python's
 * json.dumps(ensure_ascii=False) does, which is what Hugging Face's
 * `tojson` is: ", " and ": " separators unless indented, floats as
 * repr(), NaN/Infinity, control characters as \u00XX, the rest as is. */
#include "services/runner/jinja/jinja_impl.h"

#include "lib/gotext.h"

#include <math.h>

static jj_value_t from_json(jj_rt_t *rt, const json_t *j, bool tainted);

/* A string of the context: tainted when it lies in an untrusted subtree. */
static jj_value_t context_str(jj_rt_t *rt, const char *s, size_t n, bool tainted)
{
    jj_value_t v = jj_str(rt, s, n);
    if (tainted && n) {
        uint8_t *t = jj_alloc(&rt->arena, n);
        memset(t, 1, n);
        v.u.s->taint = t;
    }
    return v;
}

jj_value_t jj_from_json(jj_rt_t *rt, const json_t *j)
{
    return from_json(rt, j, false);
}

static jj_value_t from_json(jj_rt_t *rt, const json_t *j, bool tainted)
{
    for (size_t i = 0; !tainted && i < rt->n_untrusted; i++)
        tainted = rt->untrusted[i] == j;
    if (++rt->depth > rt->limits.max_depth)
        jj_throw(&rt->jump, CR_E_TOO_LARGE, "RecursionError: context nested too deeply");
    jj_value_t v;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        v = jj_dict_new(rt, JJ_DICT);
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)j, key, val)
            jj_dict_set(rt, v.u.d, context_str(rt, key, strlen(key), tainted),
                        from_json(rt, val, tainted));
        break;
    }
    case JSON_ARRAY: {
        v = jj_list_new(rt, JJ_LIST_PLAIN);
        size_t i;
        json_t *item;
        json_array_foreach(j, i, item)
            jj_list_push(rt, v.u.l, from_json(rt, item, tainted));
        break;
    }
    case JSON_STRING:
        v = context_str(rt, json_string_value(j), json_string_length(j), tainted);
        break;
    case JSON_INTEGER: v = jj_int((int64_t)json_integer_value(j)); break;
    case JSON_REAL: v = jj_float(json_real_value(j)); break;
    case JSON_TRUE: v = jj_bool(true); break;
    case JSON_FALSE: v = jj_bool(false); break;
    default: v = jj_none(); break;
    }
    rt->depth--;
    return v;
}

static void write_json_string(jj_sb_t *sb, const jj_str_t *str, bool ensure_ascii)
{
    const char *s = str->s;
    size_t n = str->len;
    jj_sb_append(sb, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char hex[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(hex, sizeof hex, "\\u%04x", c);
                esc = hex;
            } else if (c >= 0x80 && ensure_ascii) {
                uint32_t cp;
                size_t k = cr_utf8_decode((const unsigned char *)s + i, n - i, &cp);
                if (!k) {
                    k = 1;
                    cp = 0xfffd;
                }
                jj_sb_append_str(sb, str, run, i - run);
                size_t from = sb->len;
                if (cp >= 0x10000) {
                    cp -= 0x10000;
                    jj_sb_printf(sb, "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
                } else {
                    jj_sb_printf(sb, "\\u%04x", cp);
                }
                if (jj_str_tainted_at(str, i)) {
                    jj_str_t escaped = {.len = sb->len - from, .s = sb->p + from};
                    sb->len = from;
                    jj_sb_append_marked(sb, escaped.s, escaped.len, true);
                }
                i += k - 1;
                run = i + 1;
                continue;
            }
        }
        if (esc) {
            jj_sb_append_str(sb, str, run, i - run);
            jj_sb_append_marked(sb, esc, strlen(esc), jj_str_tainted_at(str, i));
            run = i + 1;
        }
    }
    jj_sb_append_str(sb, str, run, n - run);
    jj_sb_append(sb, "\"", 1);
}

static void write_json_float(jj_sb_t *sb, double f)
{
    if (isnan(f))
        jj_sb_puts(sb, "NaN");
    else if (isinf(f))
        jj_sb_puts(sb, f < 0 ? "-Infinity" : "Infinity");
    else
        jj_write_float(sb, f);
}

typedef struct json_style {
    int indent;
    const char *item_sep, *key_sep;
    bool sort_keys;
    bool ensure_ascii;
} json_style_t;

static void newline_indent(jj_sb_t *sb, const json_style_t *st, int level)
{
    jj_sb_append(sb, "\n", 1);
    for (int i = 0; i < st->indent * level; i++)
        jj_sb_append(sb, " ", 1);
}

static void write_json_key(jj_sb_t *sb, jj_value_t k, const json_style_t *st)
{
    switch (k.kind) {
    case JJ_STR: write_json_string(sb, k.u.s, st->ensure_ascii); return;
    case JJ_INT: jj_sb_printf(sb, "\"%" PRId64 "\"", k.u.i); return;
    case JJ_BOOL: jj_sb_puts(sb, k.u.b ? "\"true\"" : "\"false\""); return;
    case JJ_NONE: jj_sb_puts(sb, "\"null\""); return;
    case JJ_FLOAT:
        jj_sb_puts(sb, "\"");
        write_json_float(sb, k.u.f);
        jj_sb_puts(sb, "\"");
        return;
    default:
        jj_fail(sb->rt, "TypeError: keys must be str, int, float, bool or None, not %s",
                jj_type_name(k));
    }
}

static void write_json(jj_sb_t *sb, jj_value_t v, const json_style_t *st, int level)
{
    jj_rt_t *rt = sb->rt;
    if (++rt->depth > rt->limits.max_depth)
        jj_throw(&rt->jump, CR_E_TOO_LARGE, "RecursionError: value nested too deeply for tojson");
    switch (v.kind) {
    case JJ_NONE: jj_sb_puts(sb, "null"); break;
    case JJ_BOOL: jj_sb_puts(sb, v.u.b ? "true" : "false"); break;
    case JJ_INT: jj_sb_printf(sb, "%" PRId64, v.u.i); break;
    case JJ_FLOAT: write_json_float(sb, v.u.f); break;
    case JJ_STR: write_json_string(sb, v.u.s, st->ensure_ascii); break;
    case JJ_LIST:
        if (v.u.l->flavor == JJ_LIST_GENERATOR)
            goto unserializable;
        if (v.u.l->n == 0) {
            jj_sb_puts(sb, "[]");
            break;
        }
        jj_sb_puts(sb, "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                jj_sb_puts(sb, st->item_sep);
            if (st->indent >= 0)
                newline_indent(sb, st, level + 1);
            write_json(sb, v.u.l->items[i], st, level + 1);
        }
        if (st->indent >= 0)
            newline_indent(sb, st, level);
        jj_sb_puts(sb, "]");
        break;
    case JJ_DICT: {
        jj_dict_t *d = v.u.d;
        if (d->n == 0) {
            jj_sb_puts(sb, "{}");
            break;
        }
        size_t *order = jj_alloc_array(&rt->arena, d->n, sizeof *order);
        for (size_t i = 0; i < d->n; i++)
            order[i] = i;
        if (st->sort_keys) /* insertion sort: stable, dicts are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && jj_compare(rt, d->keys[order[j - 1]],
                                                       d->keys[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        jj_sb_puts(sb, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i)
                jj_sb_puts(sb, st->item_sep);
            if (st->indent >= 0)
                newline_indent(sb, st, level + 1);
            write_json_key(sb, d->keys[order[i]], st);
            jj_sb_puts(sb, st->key_sep);
            write_json(sb, d->vals[order[i]], st, level + 1);
        }
        if (st->indent >= 0)
            newline_indent(sb, st, level);
        jj_sb_puts(sb, "}");
        break;
    }
    default:
    unserializable:
        jj_fail(rt, "TypeError: Object of type %s is not JSON serializable", jj_type_name(v));
    }
    rt->depth--;
}

void jj_write_json(jj_sb_t *sb, jj_value_t v, int indent, const char *item_sep,
                   const char *key_sep, bool sort_keys, bool ensure_ascii)
{
    json_style_t st = {
        .indent = indent,
        .item_sep = item_sep ? item_sep : indent >= 0 ? "," : ", ",
        .key_sep = key_sep ? key_sep : ": ",
        .sort_keys = sort_keys,
        .ensure_ascii = ensure_ascii,
    };
    write_json(sb, v, &st, 0);
}
