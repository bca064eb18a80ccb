/* jinja_filters.c: the filters (`value | name(args)`), with Jinja2 3.1's
 * behaviour: tojson (Hugging Face's: json.dumps), length/count, trim,
 * string, default/d, join, items, safe, lower, upper, capitalize, title,
 * list, selectattr/rejectattr, select/reject, map, replace, dictsort,
 * indent, int, float, unique, min, max, first, last, abs, round, sort,
 * reverse, sum, format, attr, escape/e. select/reject/selectattr/rejectattr/map/unique/reverse
 * return generators as Jinja2's do: iterable and joinable, but printing
 * or tojson of one is not a list. An unknown filter is an error when it
 * is reached, as in Jinja2 3.x. */
#include "services/runner/jinja/jinja_impl.h"

#include <math.h>

static bool flag_arg(jj_args_t *a, size_t idx, const char *name, bool dflt)
{
    jj_value_t *v = jj_arg(a, idx, name);
    return v ? jj_truthy(*v) : dflt;
}

/* Jinja2's attribute getter: "a.b.0" walks attributes and indexes. */
static jj_value_t get_path(jj_rt_t *rt, jj_value_t v, jj_value_t attr)
{
    if (attr.kind != JJ_STR)
        return jj_getitem(rt, v, attr);
    const char *p = attr.u.s->s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char *part = jj_strndup(&rt->arena, p, n);
        char *end;
        long long idx = strtoll(part, &end, 10);
        if (n && *end == '\0')
            v = jj_getitem(rt, v, jj_int(idx));
        else
            v = jj_getitem(rt, v, jj_cstr(rt, part));
        if (!dot)
            return v;
        p = dot + 1;
    }
}

static jj_value_t generator(jj_rt_t *rt)
{
    return jj_list_new(rt, JJ_LIST_GENERATOR);
}

/* Arguments from `from` on, as the args of a test or filter call. */
static jj_args_t args_from(jj_args_t *a, size_t from)
{
    jj_args_t out = {0};
    if (a->n_pos > from) {
        out.pos = a->pos + from;
        out.n_pos = a->n_pos - from;
    }
    out.kw_names = a->kw_names;
    out.kw = a->kw;
    out.n_kw = a->n_kw;
    return out;
}

static jj_value_t select_items(jj_rt_t *rt, jj_value_t v, jj_args_t *a, bool by_attr, bool keep)
{
    jj_value_t out = generator(rt);
    if (!jj_truthy(v)) /* Jinja2 skips a false value (None) instead of iterating it */
        return out;
    jj_list_t *items = jj_iterate(rt, v);
    size_t first = by_attr ? 1 : 0;
    jj_value_t *attr = by_attr ? jj_arg(a, 0, NULL) : NULL;
    if (by_attr && !attr)
        jj_fail(rt, "TypeError: selectattr/rejectattr need an attribute");
    jj_value_t *test = jj_arg(a, first, NULL);
    if (test && test->kind != JJ_STR)
        jj_fail(rt, "TypeError: a test name must be a string");
    jj_args_t targs = args_from(a, first + 1);
    for (size_t i = 0; i < items->n; i++) {
        jj_value_t item = items->items[i];
        jj_value_t x = by_attr ? get_path(rt, item, *attr) : item;
        bool ok = test ? jj_test_apply(rt, test->u.s->s, x, &targs) : jj_truthy(x);
        if (ok == keep)
            jj_list_push(rt, out.u.l, item);
    }
    return out;
}

static jj_value_t map_items(jj_rt_t *rt, jj_value_t v, jj_args_t *a)
{
    jj_value_t out = generator(rt);
    if (!jj_truthy(v))
        return out;
    jj_list_t *items = jj_iterate(rt, v);
    jj_value_t *attr = jj_arg(a, SIZE_MAX, "attribute");
    if (attr) {
        jj_value_t *dflt = jj_arg(a, SIZE_MAX, "default");
        for (size_t i = 0; i < items->n; i++) {
            jj_value_t x = get_path(rt, items->items[i], *attr);
            if (x.kind == JJ_UNDEF && dflt)
                x = *dflt;
            jj_list_push(rt, out.u.l, x);
        }
        return out;
    }
    jj_value_t *name = jj_arg(a, 0, NULL);
    if (!name || name->kind != JJ_STR)
        jj_fail(rt, "TypeError: map needs a filter name or attribute=");
    jj_args_t fargs = args_from(a, 1);
    for (size_t i = 0; i < items->n; i++)
        jj_list_push(rt, out.u.l, jj_filter_apply(rt, name->u.s->s, items->items[i], &fargs));
    return out;
}

static jj_value_t tojson(jj_rt_t *rt, jj_value_t v, jj_args_t *a)
{
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys",
                                        NULL};
    jj_args_check(rt, "tojson", a, 4, names);
    bool ensure_ascii = flag_arg(a, 0, "ensure_ascii", false);
    int indent = -1;
    jj_value_t *ind = jj_arg(a, 1, "indent");
    if (ind && ind->kind == JJ_INT)
        indent = (int)CR_MAX(0, CR_MIN(ind->u.i, 64));
    else if (ind && ind->kind != JJ_NONE)
        jj_fail(rt, "TypeError: tojson: indent must be an integer");
    const char *item_sep = NULL, *key_sep = NULL;
    jj_value_t *seps = jj_arg(a, 2, "separators");
    if (seps && seps->kind != JJ_NONE) {
        if (seps->kind != JJ_LIST || seps->u.l->n != 2 || seps->u.l->items[0].kind != JJ_STR ||
            seps->u.l->items[1].kind != JJ_STR)
            jj_fail(rt, "TypeError: tojson: separators must be two strings");
        item_sep = seps->u.l->items[0].u.s->s;
        key_sep = seps->u.l->items[1].u.s->s;
    }
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    jj_write_json(&sb, v, indent, item_sep, key_sep, flag_arg(a, 3, "sort_keys", false),
                  ensure_ascii);
    return jj_str_value(jj_sb_finish(&sb));
}

static jj_value_t indent(jj_rt_t *rt, jj_value_t v, jj_args_t *a)
{
    jj_value_t *w = jj_arg(a, 0, "width");
    jj_str_t *pad;
    if (!w) {
        pad = jj_cstr(rt, "    ").u.s;
    } else if (w->kind == JJ_STR) {
        pad = w->u.s;
    } else if (w->kind == JJ_INT) {
        jj_sb_t sb;
        jj_sb_init(&sb, rt);
        for (int64_t i = 0; i < w->u.i; i++)
            jj_sb_append(&sb, " ", 1);
        pad = jj_sb_finish(&sb);
    } else {
        jj_fail(rt, "TypeError: indent: width must be an int or a string");
    }
    bool first = flag_arg(a, 1, "first", false), blank = flag_arg(a, 2, "blank", false);
    jj_str_t *s = jj_to_str(rt, v);
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    if (first)
        jj_sb_append_str(&sb, pad, 0, pad->len);
    /* Lines as Python's (s + "\n").splitlines() gives them. */
    size_t i = 0;
    bool first_line = true;
    while (i < s->len || first_line) {
        const char *nl = memchr(s->s + i, '\n', s->len - i);
        size_t end = nl ? (size_t)(nl - s->s) : s->len;
        if (!first_line) {
            jj_sb_append(&sb, "\n", 1);
            if (blank || end > i)
                jj_sb_append_str(&sb, pad, 0, pad->len);
        }
        jj_sb_append_str(&sb, s, i, end - i);
        first_line = false;
        if (!nl)
            break;
        i = end + 1;
        if (i == s->len) {
            /* "a\n" + "\n" splits to ["a", ""]: one empty last line. */
            jj_sb_append(&sb, "\n", 1);
            if (blank)
                jj_sb_append_str(&sb, pad, 0, pad->len);
            break;
        }
    }
    return jj_str_value(jj_sb_finish(&sb));
}

static jj_value_t to_int(jj_rt_t *rt, jj_value_t v, jj_args_t *a)
{
    CR_UNUSED(rt);
    jj_value_t *dflt = jj_arg(a, 0, "default");
    jj_value_t fallback = dflt ? *dflt : jj_int(0);
    switch (v.kind) {
    case JJ_INT: return v;
    case JJ_BOOL: return jj_int(v.u.b);
    case JJ_FLOAT:
        if (!isfinite(v.u.f) || fabs(v.u.f) >= 9.2e18)
            return fallback;
        return jj_int((int64_t)v.u.f);
    case JJ_STR: {
        char *end;
        errno = 0;
        const char *s = v.u.s->s;
        long long i = strtoll(s, &end, 10);
        while (*end == ' ' || *end == '\t' || *end == '\n')
            end++;
        if (end != s && *end == '\0' && !errno)
            return jj_int(i);
        double f = strtod(s, &end);
        while (*end == ' ' || *end == '\t' || *end == '\n')
            end++;
        if (end != s && *end == '\0' && isfinite(f) && fabs(f) < 9.2e18)
            return jj_int((int64_t)f);
        return fallback;
    }
    default: return fallback;
    }
}

static jj_value_t to_float(jj_rt_t *rt, jj_value_t v, jj_args_t *a)
{
    CR_UNUSED(rt);
    jj_value_t *dflt = jj_arg(a, 0, "default");
    jj_value_t fallback = dflt ? *dflt : jj_float(0.0);
    if (jj_is_number(v))
        return jj_float(jj_as_double(v));
    if (v.kind == JJ_STR) {
        char *end;
        double f = strtod(v.u.s->s, &end);
        if (end != v.u.s->s && *end == '\0')
            return jj_float(f);
    }
    return fallback;
}

/* The key min/max/sort/unique/dictsort compare by: the attribute if
 * given, lower-cased if a string and not case-sensitive. */
static jj_value_t sort_key(jj_rt_t *rt, jj_value_t item, jj_value_t *attr, bool case_sensitive)
{
    jj_value_t k = attr ? get_path(rt, item, *attr) : item;
    if (!case_sensitive && k.kind == JJ_STR)
        k = jj_str_case(rt, k.u.s, 'l');
    return k;
}

static jj_list_t *sorted_copy(jj_rt_t *rt, jj_list_t *items, jj_value_t *attr,
                              bool case_sensitive, bool reverse)
{
    jj_list_t *out = jj_list_new(rt, JJ_LIST_PLAIN).u.l;
    jj_value_t *keys = jj_alloc_array(&rt->arena, items->n + 1, sizeof *keys);
    for (size_t i = 0; i < items->n; i++) {
        jj_list_push(rt, out, items->items[i]);
        keys[i] = sort_key(rt, items->items[i], attr, case_sensitive);
    }
    /* Insertion sort: stable like Python's, and the step budget bounds
     * how long a hostile list can make it. */
    for (size_t i = 1; i < out->n; i++)
        for (size_t j = i; j > 0; j--) {
            int c = jj_compare(rt, keys[j - 1], keys[j]);
            if (reverse ? c >= 0 : c <= 0)
                break;
            jj_value_t t = keys[j];
            keys[j] = keys[j - 1];
            keys[j - 1] = t;
            t = out->items[j];
            out->items[j] = out->items[j - 1];
            out->items[j - 1] = t;
            if (++rt->steps > rt->limits.max_steps)
                jj_throw(&rt->jump, CR_E_TOO_LARGE, "BudgetError: more than %" PRIu64 " steps",
                         rt->limits.max_steps);
        }
    return out;
}

static jj_value_t min_max(jj_rt_t *rt, jj_value_t v, jj_args_t *a, bool want_max)
{
    jj_list_t *items = jj_iterate(rt, v);
    if (items->n == 0)
        return jj_undef(rt, "UndefinedError: No aggregated item, sequence was empty.");
    jj_value_t *attr = jj_arg(a, 2, "attribute");
    bool cs = flag_arg(a, 0, "case_sensitive", false);
    size_t best = 0;
    jj_value_t best_key = sort_key(rt, items->items[0], attr, cs);
    for (size_t i = 1; i < items->n; i++) {
        jj_value_t k = sort_key(rt, items->items[i], attr, cs);
        int c = jj_compare(rt, k, best_key);
        if (want_max ? c > 0 : c < 0) {
            best = i;
            best_key = k;
        }
    }
    return items->items[best];
}

static jj_value_t join(jj_rt_t *rt, jj_value_t v, jj_args_t *a)
{
    jj_list_t *items = jj_iterate(rt, v);
    jj_value_t *sep = jj_arg(a, 0, "d");
    jj_str_t *sep_s = sep ? jj_to_str(rt, *sep) : NULL;
    jj_value_t *attr = jj_arg(a, 1, "attribute");
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    for (size_t i = 0; i < items->n; i++) {
        if (i && sep_s)
            jj_sb_append_str(&sb, sep_s, 0, sep_s->len);
        jj_value_t x = attr ? get_path(rt, items->items[i], *attr) : items->items[i];
        jj_write_str(&sb, x);
    }
    return jj_str_value(jj_sb_finish(&sb));
}

static jj_value_t items_of(jj_rt_t *rt, jj_value_t v)
{
    if (v.kind == JJ_UNDEF)
        return jj_list_new(rt, JJ_LIST_PLAIN);
    if (v.kind != JJ_DICT)
        jj_fail(rt, "TypeError: can only get item pairs from a mapping.");
    jj_value_t out = jj_list_new(rt, JJ_LIST_PLAIN);
    for (size_t i = 0; i < v.u.d->n; i++) {
        jj_value_t pair = jj_list_new(rt, JJ_LIST_TUPLE);
        jj_list_push(rt, pair.u.l, v.u.d->keys[i]);
        jj_list_push(rt, pair.u.l, v.u.d->vals[i]);
        jj_list_push(rt, out.u.l, pair);
    }
    return out;
}

static jj_value_t dictsort(jj_rt_t *rt, jj_value_t v, jj_args_t *a)
{
    jj_value_t pairs = items_of(rt, v);
    bool cs = flag_arg(a, 0, "case_sensitive", false);
    jj_value_t *by = jj_arg(a, 1, "by");
    bool by_value = by && by->kind == JJ_STR && !strcmp(by->u.s->s, "value");
    jj_value_t idx = jj_int(by_value ? 1 : 0);
    return (jj_value_t){.kind = JJ_LIST,
                        .u.l = sorted_copy(rt, pairs.u.l, &idx, cs,
                                           flag_arg(a, 2, "reverse", false))};
}

static jj_value_t unique(jj_rt_t *rt, jj_value_t v, jj_args_t *a)
{
    jj_list_t *items = jj_iterate(rt, v);
    bool cs = flag_arg(a, 0, "case_sensitive", false);
    jj_value_t *attr = jj_arg(a, 1, "attribute");
    jj_value_t out = generator(rt);
    jj_list_t *seen = jj_list_new(rt, JJ_LIST_PLAIN).u.l;
    for (size_t i = 0; i < items->n; i++) {
        jj_value_t k = sort_key(rt, items->items[i], attr, cs);
        bool dup = false;
        for (size_t j = 0; j < seen->n && !dup; j++)
            dup = jj_equal(seen->items[j], k);
        if (!dup) {
            jj_list_push(rt, seen, k);
            jj_list_push(rt, out.u.l, items->items[i]);
        }
    }
    return out;
}

static jj_value_t sum(jj_rt_t *rt, jj_value_t v, jj_args_t *a)
{
    jj_list_t *items = jj_iterate(rt, v);
    jj_value_t *attr = jj_arg(a, 0, "attribute");
    jj_value_t *start = jj_arg(a, 1, "start");
    bool is_float = start && start->kind == JJ_FLOAT;
    int64_t isum = start && !is_float ? (start->kind == JJ_INT ? start->u.i : 0) : 0;
    double fsum = is_float ? start->u.f : 0.0;
    for (size_t i = 0; i < items->n; i++) {
        jj_value_t x = attr ? get_path(rt, items->items[i], *attr) : items->items[i];
        if (!jj_is_number(x))
            jj_fail(rt, "TypeError: unsupported operand type(s) for +: 'int' and '%s'",
                    jj_type_name(x));
        if (x.kind == JJ_FLOAT && !is_float) {
            is_float = true;
            fsum = (double)isum;
        }
        if (is_float)
            fsum += jj_as_double(x);
        else if (__builtin_add_overflow(isum, x.kind == JJ_INT ? x.u.i : x.u.b, &isum))
            jj_fail(rt, "OverflowError: integer overflow in sum");
    }
    return is_float ? jj_float(fsum) : jj_int(isum);
}

static jj_value_t first_last(jj_rt_t *rt, jj_value_t v, bool last)
{
    if (v.kind == JJ_STR && v.u.s->len)
        return jj_getitem(rt, v, jj_int(last ? -1 : 0));
    jj_list_t *items = jj_iterate(rt, v);
    if (items->n == 0)
        return jj_undef(rt, "UndefinedError: No %s item, sequence was empty.",
                        last ? "last" : "first");
    return items->items[last ? items->n - 1 : 0];
}

jj_value_t jj_filter_apply(jj_rt_t *rt, const char *name, jj_value_t v, jj_args_t *a)
{
    if (!strcmp(name, "tojson"))
        return tojson(rt, v, a);
    if (!strcmp(name, "length") || !strcmp(name, "count"))
        return jj_int(jj_length(rt, v));
    if (!strcmp(name, "safe")) {
        if (v.kind != JJ_STR && v.kind != JJ_UNDEF)
            v = jj_str_value(jj_to_str(rt, v));
        if (v.kind != JJ_STR || v.u.s->markup)
            return v;
        jj_str_t *m = jj_alloc(&rt->arena, sizeof *m);
        *m = *v.u.s;
        m->markup = true;
        return jj_str_value(m);
    }
    if (!strcmp(name, "string"))
        return v.kind == JJ_STR ? v : jj_str_value(jj_to_str(rt, v));
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        bool use = v.kind == JJ_UNDEF || (flag_arg(a, 1, "boolean", false) && !jj_truthy(v));
        if (!use)
            return v;
        jj_value_t *dflt = jj_arg(a, 0, "default_value");
        return dflt ? *dflt : jj_cstr(rt, "");
    }
    if (!strcmp(name, "trim")) {
        jj_value_t *chars = jj_arg(a, 0, "chars");
        const jj_str_t *cs = chars && chars->kind == JJ_STR ? chars->u.s : NULL;
        return jj_str_strip(rt, jj_to_str(rt, v), cs, true, true);
    }
    if (!strcmp(name, "lower") || !strcmp(name, "upper") || !strcmp(name, "capitalize") ||
        !strcmp(name, "title"))
        return jj_str_case(rt, jj_to_str(rt, v), name[0] == 'l'   ? 'l'
                                                 : name[0] == 'u' ? 'u'
                                                 : name[0] == 't' ? 't'
                                                                  : 'c');
    if (!strcmp(name, "replace")) {
        jj_value_t *old = jj_arg(a, 0, "old"), *new_v = jj_arg(a, 1, "new");
        if (!old || !new_v)
            jj_fail(rt, "TypeError: replace needs old and new");
        jj_value_t *count = jj_arg(a, 2, "count");
        return jj_str_replace(rt, jj_to_str(rt, v), jj_to_str(rt, *old), jj_to_str(rt, *new_v),
                              count && count->kind == JJ_INT ? count->u.i : -1);
    }
    if (!strcmp(name, "join"))
        return join(rt, v, a);
    if (!strcmp(name, "items"))
        return items_of(rt, v);
    if (!strcmp(name, "list")) {
        jj_list_t *items = jj_iterate(rt, v);
        jj_value_t out = jj_list_new(rt, JJ_LIST_PLAIN);
        for (size_t i = 0; i < items->n; i++)
            jj_list_push(rt, out.u.l, items->items[i]);
        return out;
    }
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return select_items(rt, v, a, true, name[0] == 's');
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return select_items(rt, v, a, false, name[0] == 's');
    if (!strcmp(name, "map"))
        return map_items(rt, v, a);
    if (!strcmp(name, "dictsort"))
        return dictsort(rt, v, a);
    if (!strcmp(name, "indent"))
        return indent(rt, v, a);
    if (!strcmp(name, "int"))
        return to_int(rt, v, a);
    if (!strcmp(name, "float"))
        return to_float(rt, v, a);
    if (!strcmp(name, "unique"))
        return unique(rt, v, a);
    if (!strcmp(name, "min") || !strcmp(name, "max"))
        return min_max(rt, v, a, name[1] == 'a');
    if (!strcmp(name, "first") || !strcmp(name, "last"))
        return first_last(rt, v, name[0] == 'l');
    if (!strcmp(name, "abs")) {
        if (v.kind == JJ_INT)
            return v.u.i == INT64_MIN ? jj_float(9.223372036854775808e18) : jj_int(llabs(v.u.i));
        if (v.kind == JJ_BOOL)
            return jj_int(v.u.b);
        if (v.kind == JJ_FLOAT)
            return jj_float(fabs(v.u.f));
        jj_fail(rt, "TypeError: bad operand type for abs(): '%s'", jj_type_name(v));
    }
    if (!strcmp(name, "round")) {
        jj_value_t *prec = jj_arg(a, 0, "precision");
        jj_value_t *method = jj_arg(a, 1, "method");
        int64_t p = prec && prec->kind == JJ_INT ? prec->u.i : 0;
        const char *m = method && method->kind == JJ_STR ? method->u.s->s : "common";
        double scale = pow(10.0, (double)CR_MAX(-20, CR_MIN(p, 20)));
        double x = jj_as_double(v) * scale;
        x = !strcmp(m, "ceil") ? ceil(x) : !strcmp(m, "floor") ? floor(x) : round(x);
        return jj_float(x / scale);
    }
    if (!strcmp(name, "sort")) {
        jj_list_t *l = sorted_copy(rt, jj_iterate(rt, v), jj_arg(a, 2, "attribute"),
                                   flag_arg(a, 1, "case_sensitive", false),
                                   flag_arg(a, 0, "reverse", false));
        return (jj_value_t){.kind = JJ_LIST, .u.l = l};
    }
    if (!strcmp(name, "reverse")) {
        if (v.kind == JJ_STR) {
            jj_value_t step = jj_int(-1);
            return jj_slice(rt, v, NULL, NULL, &step);
        }
        jj_list_t *items = jj_iterate(rt, v);
        jj_value_t out = generator(rt);
        for (size_t i = items->n; i > 0; i--)
            jj_list_push(rt, out.u.l, items->items[i - 1]);
        return out;
    }
    if (!strcmp(name, "sum"))
        return sum(rt, v, a);
    if (!strcmp(name, "format"))
        return jj_str_format(rt, jj_to_str(rt, v), a->pos, a->n_pos);
    if (!strcmp(name, "attr")) {
        jj_value_t *attr = jj_arg(a, 0, NULL);
        if (!attr || attr->kind != JJ_STR)
            jj_fail(rt, "TypeError: attr needs a name");
        /* Python's getattr(): a dict's keys are not attributes. */
        jj_value_t method;
        if (v.kind == JJ_DICT)
            return jj_method_lookup(rt, v, attr->u.s->s, &method)
                       ? method
                       : jj_undef(rt, "UndefinedError: 'dict object' has no attribute '%s'",
                                  attr->u.s->s);
        return jj_getattr(rt, v, attr->u.s->s);
    }
    if (!strcmp(name, "escape") || !strcmp(name, "e")) {
        if (v.kind == JJ_STR && v.u.s->markup)
            return v;
        jj_sb_t sb;
        jj_sb_init(&sb, rt);
        jj_sb_append_escaped(&sb, jj_to_str(rt, v));
        jj_str_t *out = jj_sb_finish(&sb);
        out->markup = true;
        return jj_str_value(out);
    }
    jj_fail(rt, "TemplateRuntimeError: No filter named '%s' found.", name);
}
