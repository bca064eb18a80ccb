/* jinja_methods.c: the Python methods templates call on strings and dicts
 * (`s.startswith(..)`, `d.get(..)`, `d.items()`...), the sandbox's refusal
 * of mutating ones (`list.append` is an undefined that raises
 * SecurityError when called, as in Jinja2's ImmutableSandboxedEnvironment),
 * the globals (raise_exception, strftime_now, range, namespace, dict) and
 * the argument helpers filters share. */
#include "services/runner/jinja/jinja_impl.h"

#include "lib/gotext.h"

#include <math.h>

jj_value_t *jj_arg(jj_args_t *args, size_t idx, const char *name)
{
    if (idx < args->n_pos)
        return &args->pos[idx];
    for (size_t i = 0; name && i < args->n_kw; i++)
        if (!strcmp(args->kw_names[i], name))
            return &args->kw[i];
    return NULL;
}

void jj_args_check(jj_rt_t *rt, const char *fn, jj_args_t *args, size_t max_pos,
                   const char *const *names)
{
    if (args->n_pos > max_pos)
        jj_fail(rt, "TypeError: %s() takes at most %zu positional arguments (%zu given)", fn,
                max_pos, args->n_pos);
    for (size_t i = 0; i < args->n_kw; i++) {
        bool known = false;
        for (size_t k = 0; names && names[k]; k++)
            if (!strcmp(args->kw_names[i], names[k]))
                known = true;
        if (!known)
            jj_fail(rt, "TypeError: %s() got an unexpected keyword argument '%s'", fn,
                    args->kw_names[i]);
    }
}

static jj_str_t *str_arg(jj_rt_t *rt, const char *fn, jj_value_t *v)
{
    if (!v || v->kind != JJ_STR)
        jj_fail(rt, "TypeError: %s() argument must be str, not %s", fn,
                v ? jj_type_name(*v) : "nothing");
    return v->u.s;
}

/* ---- Python's whitespace and character classes ------------------------ */

static bool is_py_space(uint32_t cp)
{
    return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 ||
           cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

static uint32_t decode_at(const char *s, size_t n, size_t i, size_t *len)
{
    uint32_t cp;
    size_t k = cr_utf8_decode((const unsigned char *)s + i, n - i, &cp);
    if (!k) {
        k = 1;
        cp = 0xfffd;
    }
    *len = k;
    return cp;
}

/* The code point ending at byte `end` (exclusive) and its length. */
static uint32_t decode_before(const char *s, size_t end, size_t *len)
{
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && ((unsigned char)s[start] & 0xc0) == 0x80)
        start--;
    size_t k;
    uint32_t cp = decode_at(s, end, start, &k);
    if (start + k != end) {
        *len = 1;
        return 0xfffd;
    }
    *len = k;
    return cp;
}

static bool in_chars(uint32_t cp, const jj_str_t *chars)
{
    if (!chars)
        return is_py_space(cp);
    for (size_t i = 0; i < chars->len;) {
        size_t k;
        if (decode_at(chars->s, chars->len, i, &k) == cp)
            return true;
        i += k;
    }
    return false;
}

jj_value_t jj_str_strip(jj_rt_t *rt, jj_str_t *s, const jj_str_t *chars, bool left, bool right)
{
    size_t b = 0, e = s->len, k;
    while (left && b < e && in_chars(decode_at(s->s, e, b, &k), chars))
        b += k;
    while (right && e > b && in_chars(decode_before(s->s, e, &k), chars))
        e -= k;
    if (b == 0 && e == s->len)
        return jj_str_value(s);
    return jj_substr(rt, s, b, e - b);
}

static char ascii_lower(char c)
{
    return c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
}

static char ascii_upper(char c)
{
    return c >= 'a' && c <= 'z' ? (char)(c - 32) : c;
}

jj_value_t jj_str_case(jj_rt_t *rt, jj_str_t *s, int mode)
{
    char *p = jj_strndup(&rt->arena, s->s, s->len);
    bool prev_letter = false;
    for (size_t i = 0; i < s->len; i++) {
        char c = p[i];
        bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        switch (mode) {
        case 'l': p[i] = ascii_lower(c); break;
        case 'u': p[i] = ascii_upper(c); break;
        case 't': p[i] = prev_letter ? ascii_lower(c) : ascii_upper(c); break;
        default: p[i] = i == 0 ? ascii_upper(c) : ascii_lower(c); break;
        }
        prev_letter = letter || ((unsigned char)c >= 0x80);
    }
    jj_str_t *out = jj_alloc(&rt->arena, sizeof *out);
    out->s = p;
    out->len = s->len;
    out->taint = s->taint; /* same length, same places */
    return jj_str_value(out);
}

jj_value_t jj_str_replace(jj_rt_t *rt, jj_str_t *s, jj_str_t *old, jj_str_t *new_s,
                          int64_t count)
{
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    size_t i = 0;
    int64_t done = 0;
    if (old->len == 0) {
        /* Python inserts `new` between characters and at both ends. */
        size_t k;
        while (count < 0 || done < count) {
            jj_sb_append_str(&sb, new_s, 0, new_s->len);
            done++;
            if (i >= s->len)
                break;
            decode_at(s->s, s->len, i, &k);
            jj_sb_append_str(&sb, s, i, k);
            i += k;
        }
        jj_sb_append_str(&sb, s, i, s->len - i);
        return jj_str_value(jj_sb_finish(&sb));
    }
    while (i < s->len && (count < 0 || done < count)) {
        const char *hit = memmem(s->s + i, s->len - i, old->s, old->len);
        if (!hit)
            break;
        size_t at = (size_t)(hit - s->s);
        jj_sb_append_str(&sb, s, i, at - i);
        /* The replacement stands where the old text was: tainted if
         * either is. */
        bool was_tainted = false;
        for (size_t k = at; k < at + old->len && !was_tainted; k++)
            was_tainted = jj_str_tainted_at(s, k);
        size_t from = sb.len;
        jj_sb_append_str(&sb, new_s, 0, new_s->len);
        if (was_tainted && new_s->len) {
            sb.len = from;
            jj_sb_append_marked(&sb, new_s->s, new_s->len, true);
        }
        i = at + old->len;
        done++;
    }
    jj_sb_append_str(&sb, s, i, s->len - i);
    return jj_str_value(jj_sb_finish(&sb));
}

/* Python's printf-style `fmt % args`: flags - and 0, a width, a
 * precision, and the conversions s r d i f F x X o e E g G % (no mapping
 * keys). */
jj_value_t jj_str_format(jj_rt_t *rt, jj_str_t *fmt, const jj_value_t *args, size_t n_args)
{
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    size_t next = 0, i = 0;
    while (i < fmt->len) {
        const char *pct = memchr(fmt->s + i, '%', fmt->len - i);
        size_t at = pct ? (size_t)(pct - fmt->s) : fmt->len;
        jj_sb_append_str(&sb, fmt, i, at - i);
        if (!pct)
            break;
        i = at + 1;
        bool left = false, zero = false;
        for (; i < fmt->len && (fmt->s[i] == '-' || fmt->s[i] == '0' || fmt->s[i] == ' ' ||
                                fmt->s[i] == '+' || fmt->s[i] == '#');
             i++) {
            left |= fmt->s[i] == '-';
            zero |= fmt->s[i] == '0';
        }
        int width = 0, prec = -1;
        for (; i < fmt->len && fmt->s[i] >= '0' && fmt->s[i] <= '9' && width < 10000; i++)
            width = width * 10 + (fmt->s[i] - '0');
        if (i < fmt->len && fmt->s[i] == '.') {
            prec = 0;
            for (i++; i < fmt->len && fmt->s[i] >= '0' && fmt->s[i] <= '9' && prec < 1000; i++)
                prec = prec * 10 + (fmt->s[i] - '0');
        }
        if (i >= fmt->len)
            jj_fail(rt, "ValueError: incomplete format");
        char conv = fmt->s[i++];
        if (conv == '%') {
            jj_sb_append(&sb, "%", 1);
            continue;
        }
        if (conv == '(')
            jj_fail(rt, "TypeError: format requires a mapping: %%(name) is not supported");
        if (next >= n_args)
            jj_fail(rt, "TypeError: not enough arguments for format string");
        jj_value_t v = args[next++];
        jj_sb_t piece;
        jj_sb_init(&piece, rt);
        if (conv == 's' || conv == 'r') {
            if (conv == 's')
                jj_write_str(&piece, v);
            else
                jj_write_repr(&piece, v);
            if (prec >= 0 && (size_t)prec < piece.len)
                piece.len = (size_t)prec; /* bytes: precision on ASCII text */
        } else if (conv && strchr("diouxXeEfFgG", conv)) { /* strchr finds a NUL too */
            if (!jj_is_number(v))
                jj_fail(rt, "TypeError: %%%c format: a real number is required, not %s", conv,
                        jj_type_name(v));
            char spec[16], num[512];
            if (v.kind == JJ_FLOAT && strchr("xXo", conv))
                jj_fail(rt, "TypeError: %%%c format: an integer is required, not float", conv);
            if (v.kind == JJ_FLOAT && strchr("diu", conv) && !isfinite(v.u.f))
                jj_fail(rt, isnan(v.u.f) ? "ValueError: cannot convert float NaN to integer"
                                         : "OverflowError: cannot convert float infinity to "
                                           "integer");
            if (v.kind == JJ_FLOAT && strchr("diu", conv) && fabs(v.u.f) >= 0x1p63) {
                /* past int64: Python prints the float's exact integer */
                snprintf(num, sizeof num, "%.0f", v.u.f);
                jj_sb_puts(&piece, num);
            } else if (strchr("dixXou", conv)) {
                int64_t iv = v.kind == JJ_FLOAT ? (int64_t)v.u.f : v.kind == JJ_INT ? v.u.i : v.u.b;
                snprintf(spec, sizeof spec, "%%%s%s", "ll", conv == 'i' || conv == 'u' ? "d"
                                                           : (char[]){conv, 0});
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
                snprintf(num, sizeof num, spec, (long long)iv);
                jj_sb_puts(&piece, num);
            } else {
                snprintf(spec, sizeof spec, "%%.%d%c", prec < 0 ? 6 : CR_MIN(prec, 100), conv);
                snprintf(num, sizeof num, spec, jj_as_double(v));
#pragma GCC diagnostic pop
                jj_sb_puts(&piece, num);
            }
        } else {
            jj_fail(rt, "ValueError: unsupported format character '%c' (0x%x)",
                    conv >= 32 && conv < 127 ? conv : '?', (unsigned char)conv);
        }
        jj_str_t *p = jj_sb_finish(&piece);
        size_t chars = jj_utf8_count(p->s, p->len);
        size_t pad = (size_t)width > chars ? (size_t)width - chars : 0;
        bool zero_pad = zero && !left && conv != 's' && conv != 'r';
        if (!left && !zero_pad)
            for (size_t k = 0; k < pad; k++)
                jj_sb_append(&sb, " ", 1);
        if (zero_pad) {
            size_t sign = p->len && (p->s[0] == '-' || p->s[0] == '+') ? 1 : 0;
            jj_sb_append_str(&sb, p, 0, sign);
            for (size_t k = 0; k < pad; k++)
                jj_sb_append(&sb, "0", 1);
            jj_sb_append_str(&sb, p, sign, p->len - sign);
        } else {
            jj_sb_append_str(&sb, p, 0, p->len);
        }
        if (left)
            for (size_t k = 0; k < pad; k++)
                jj_sb_append(&sb, " ", 1);
    }
    if (next < n_args)
        jj_fail(rt, "TypeError: not all arguments converted during string formatting");
    return jj_str_value(jj_sb_finish(&sb));
}

static jj_value_t str_split(jj_rt_t *rt, jj_str_t *s, jj_value_t *sep_v, int64_t maxsplit)
{
    jj_value_t out = jj_list_new(rt, JJ_LIST_PLAIN);
    if (!sep_v || sep_v->kind == JJ_NONE) {
        size_t i = 0, k;
        while (i < s->len) {
            while (i < s->len && is_py_space(decode_at(s->s, s->len, i, &k)))
                i += k;
            if (i >= s->len)
                break;
            if (maxsplit >= 0 && (int64_t)out.u.l->n >= maxsplit) {
                size_t e = s->len;
                while (e > i && is_py_space(decode_before(s->s, e, &k)))
                    e -= k;
                jj_list_push(rt, out.u.l, jj_substr(rt, s, i, e - i));
                break;
            }
            size_t start = i;
            while (i < s->len && !is_py_space(decode_at(s->s, s->len, i, &k)))
                i += k;
            jj_list_push(rt, out.u.l, jj_substr(rt, s, start, i - start));
        }
        return out;
    }
    jj_str_t *sep = str_arg(rt, "split", sep_v);
    if (sep->len == 0)
        jj_fail(rt, "ValueError: empty separator");
    size_t i = 0;
    for (;;) {
        const char *hit = NULL;
        if (maxsplit < 0 || (int64_t)out.u.l->n < maxsplit)
            hit = memmem(s->s + i, s->len - i, sep->s, sep->len);
        if (!hit) {
            jj_list_push(rt, out.u.l, jj_substr(rt, s, i, s->len - i));
            return out;
        }
        size_t at = (size_t)(hit - s->s);
        jj_list_push(rt, out.u.l, jj_substr(rt, s, i, at - i));
        i = at + sep->len;
    }
}

static bool affix_match(jj_str_t *s, jj_str_t *affix, bool at_start)
{
    if (affix->len > s->len)
        return false;
    const char *p = at_start ? s->s : s->s + s->len - affix->len;
    return memcmp(p, affix->s, affix->len) == 0;
}

static jj_value_t str_affix(jj_rt_t *rt, const char *fn, jj_str_t *s, jj_value_t *arg,
                            bool at_start)
{
    if (arg && arg->kind == JJ_LIST) {
        for (size_t i = 0; i < arg->u.l->n; i++)
            if (affix_match(s, str_arg(rt, fn, &arg->u.l->items[i]), at_start))
                return jj_bool(true);
        return jj_bool(false);
    }
    return jj_bool(affix_match(s, str_arg(rt, fn, arg), at_start));
}

static int64_t int_arg(jj_rt_t *rt, jj_value_t *v, int64_t dflt)
{
    if (!v || v->kind == JJ_NONE)
        return dflt;
    if (v->kind != JJ_INT && v->kind != JJ_BOOL)
        jj_fail(rt, "TypeError: '%s' object cannot be interpreted as an integer",
                jj_type_name(*v));
    return v->kind == JJ_INT ? v->u.i : v->u.b;
}

static jj_value_t str_method(jj_rt_t *rt, const char *m, jj_str_t *s, jj_args_t *a)
{
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith"))
        return str_affix(rt, m, s, jj_arg(a, 0, NULL), m[0] == 's');
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        jj_value_t *chars = jj_arg(a, 0, NULL);
        const jj_str_t *cs = chars && chars->kind != JJ_NONE ? str_arg(rt, m, chars) : NULL;
        return jj_str_strip(rt, s, cs, m[0] != 'r', m[0] != 'l');
    }
    if (!strcmp(m, "split"))
        return str_split(rt, s, jj_arg(a, 0, "sep"), int_arg(rt, jj_arg(a, 1, "maxsplit"), -1));
    if (!strcmp(m, "replace"))
        return jj_str_replace(rt, s, str_arg(rt, m, jj_arg(a, 0, NULL)),
                              str_arg(rt, m, jj_arg(a, 1, NULL)),
                              int_arg(rt, jj_arg(a, 2, "count"), -1));
    if (!strcmp(m, "lower"))
        return jj_str_case(rt, s, 'l');
    if (!strcmp(m, "upper"))
        return jj_str_case(rt, s, 'u');
    if (!strcmp(m, "title"))
        return jj_str_case(rt, s, 't');
    if (!strcmp(m, "capitalize"))
        return jj_str_case(rt, s, 'c');
    if (!strcmp(m, "find") || !strcmp(m, "count")) {
        jj_str_t *sub = str_arg(rt, m, jj_arg(a, 0, NULL));
        int64_t hits = 0;
        for (size_t i = 0; i + sub->len <= s->len;) {
            const char *hit = memmem(s->s + i, s->len - i, sub->s, sub->len);
            if (!hit)
                break;
            if (m[0] == 'f')
                return jj_int((int64_t)jj_utf8_count(s->s, (size_t)(hit - s->s)));
            hits++;
            i = (size_t)(hit - s->s) + (sub->len ? sub->len : 1);
        }
        return jj_int(m[0] == 'f' ? -1 : hits);
    }
    if (!strcmp(m, "join")) {
        jj_value_t *it = jj_arg(a, 0, NULL);
        if (!it)
            jj_fail(rt, "TypeError: join() takes exactly one argument");
        jj_list_t *items = jj_iterate(rt, *it);
        jj_sb_t sb;
        jj_sb_init(&sb, rt);
        for (size_t i = 0; i < items->n; i++) {
            if (i)
                jj_sb_append_str(&sb, s, 0, s->len);
            jj_str_t *part = str_arg(rt, "join", &items->items[i]);
            jj_sb_append_str(&sb, part, 0, part->len);
        }
        return jj_str_value(jj_sb_finish(&sb));
    }
    jj_fail(rt, "TypeError: str has no method %s", m);
}

static jj_value_t dict_method(jj_rt_t *rt, const char *m, jj_dict_t *d, jj_args_t *a)
{
    if (!strcmp(m, "get")) {
        jj_value_t *key = jj_arg(a, 0, NULL);
        if (!key)
            jj_fail(rt, "TypeError: get expected at least 1 argument, got 0");
        jj_value_t *v = jj_dict_find(d, *key);
        if (v)
            return *v;
        jj_value_t *dflt = jj_arg(a, 1, NULL);
        return dflt ? *dflt : jj_none();
    }
    jj_value_t out = jj_list_new(rt, JJ_LIST_PLAIN);
    for (size_t i = 0; i < d->n; i++) {
        if (!strcmp(m, "keys")) {
            jj_list_push(rt, out.u.l, d->keys[i]);
        } else if (!strcmp(m, "values")) {
            jj_list_push(rt, out.u.l, d->vals[i]);
        } else {
            jj_value_t pair = jj_list_new(rt, JJ_LIST_TUPLE);
            jj_list_push(rt, pair.u.l, d->keys[i]);
            jj_list_push(rt, pair.u.l, d->vals[i]);
            jj_list_push(rt, out.u.l, pair);
        }
    }
    return out;
}

static const char *const STR_METHODS[] = {
    "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "replace", "lower",
    "upper", "title", "capitalize", "find", "count", "join", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", NULL};
static const char *const LOOP_METHODS[] = {"cycle", NULL};
/* What the immutable sandbox refuses: every method that changes a list
 * or dict in place. */
static const char *const LIST_UNSAFE[] = {"append", "extend", "insert", "pop", "remove",
                                          "clear", "sort", "reverse", NULL};
static const char *const DICT_UNSAFE[] = {"pop", "popitem", "setdefault", "update", "clear",
                                          NULL};

static bool in_list(const char *const *list, const char *name)
{
    for (size_t i = 0; list[i]; i++)
        if (!strcmp(list[i], name))
            return true;
    return false;
}

static jj_value_t bound(jj_rt_t *rt, jj_func_kind_t kind, jj_value_t self, const char *name)
{
    jj_func_t *fn = jj_alloc(&rt->arena, sizeof *fn);
    fn->kind = kind;
    fn->self = self;
    fn->name = name;
    return (jj_value_t){.kind = JJ_FUNC, .u.fn = fn};
}

bool jj_method_lookup(jj_rt_t *rt, jj_value_t self, const char *name, jj_value_t *out)
{
    const char *const *methods = NULL, *const *unsafe = NULL;
    if (self.kind == JJ_STR) {
        methods = STR_METHODS;
    } else if (self.kind == JJ_DICT) {
        methods = DICT_METHODS;
        unsafe = DICT_UNSAFE;
    } else if (self.kind == JJ_LIST && self.u.l->flavor == JJ_LIST_PLAIN) {
        unsafe = LIST_UNSAFE;
    } else if (self.kind == JJ_LOOP) {
        methods = LOOP_METHODS;
    }
    for (size_t i = 0; methods && methods[i]; i++)
        if (!strcmp(methods[i], name)) {
            *out = bound(rt, JJ_FN_METHOD, self, methods[i]);
            return true;
        }
    if (unsafe && in_list(unsafe, name)) {
        *out = jj_undef(rt, "SecurityError: access to attribute '%s' of '%s' object is unsafe.",
                        name, jj_type_name(self));
        return true;
    }
    return false;
}

jj_value_t jj_method_call(jj_rt_t *rt, jj_func_t *fn, jj_args_t *args)
{
    if (fn->self.kind == JJ_LOOP) {
        /* loop.cycle(a, b, ...): the argument at the loop's index. */
        if (args->n_pos == 0)
            jj_fail(rt, "TypeError: no items for cycling given");
        return args->pos[jj_loop_index(fn->self) % args->n_pos];
    }
    if (fn->self.kind == JJ_STR)
        return str_method(rt, fn->name, fn->self.u.s, args);
    return dict_method(rt, fn->name, fn->self.u.d, args);
}

/* ---- globals ---------------------------------------------------------- */

static const char *const GLOBALS[] = {"raise_exception", "strftime_now", "range", "namespace",
                                      "dict", NULL};

bool jj_global_lookup(jj_rt_t *rt, const char *name, jj_value_t *out)
{
    for (size_t i = 0; GLOBALS[i]; i++)
        if (!strcmp(GLOBALS[i], name)) {
            *out = bound(rt, JJ_FN_GLOBAL, jj_none(), GLOBALS[i]);
            return true;
        }
    return false;
}

static jj_value_t range_list(jj_rt_t *rt, jj_args_t *a)
{
    jj_args_check(rt, "range", a, 3, NULL);
    if (a->n_pos == 0)
        jj_fail(rt, "TypeError: range expected at least 1 argument, got 0");
    int64_t start = 0, stop, step = 1;
    if (a->n_pos == 1) {
        stop = int_arg(rt, &a->pos[0], 0);
    } else {
        start = int_arg(rt, &a->pos[0], 0);
        stop = int_arg(rt, &a->pos[1], 0);
        if (a->n_pos == 3)
            step = int_arg(rt, &a->pos[2], 1);
    }
    if (step == 0)
        jj_fail(rt, "ValueError: range() arg 3 must not be zero");
    /* Counted in doubles: the ends may be anywhere in int64. */
    double count = step > 0 ? ((double)stop - (double)start) / (double)step
                            : ((double)start - (double)stop) / (double)-step;
    if (count > (double)rt->limits.max_steps)
        jj_throw(&rt->jump, CR_E_TOO_LARGE,
                 "BudgetError: range() of more items than the step budget (%" PRIu64 ")",
                 rt->limits.max_steps);
    jj_value_t out = jj_list_new(rt, JJ_LIST_PLAIN);
    if (count > 0) { /* sized once: no doubling garbage */
        out.u.l->cap = (size_t)ceil(count);
        out.u.l->items = jj_alloc_array(&rt->arena, out.u.l->cap, sizeof *out.u.l->items);
    }
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        jj_list_push(rt, out.u.l, jj_int(i));
        if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step))
            break;
    }
    return out;
}

static jj_value_t make_mapping(jj_rt_t *rt, const char *fn, jj_kind_t kind, jj_args_t *a)
{
    if (a->n_pos > 1)
        jj_fail(rt, "TypeError: %s() takes at most 1 positional argument (%zu given)", fn,
                a->n_pos);
    jj_value_t out = jj_dict_new(rt, kind);
    if (a->n_pos == 1) {
        jj_value_t src = a->pos[0];
        if (src.kind != JJ_DICT && src.kind != JJ_NS)
            jj_fail(rt, "TypeError: %s() argument must be a mapping, not %s", fn,
                    jj_type_name(src));
        for (size_t i = 0; i < src.u.d->n; i++)
            jj_dict_set(rt, out.u.d, src.u.d->keys[i], src.u.d->vals[i]);
    }
    for (size_t i = 0; i < a->n_kw; i++)
        jj_dict_set(rt, out.u.d, jj_cstr(rt, a->kw_names[i]), a->kw[i]);
    return out;
}

jj_value_t jj_global_call(jj_rt_t *rt, jj_func_t *fn, jj_args_t *a)
{
    const char *name = fn->name;
    if (!strcmp(name, "raise_exception")) {
        jj_value_t *msg = jj_arg(a, 0, NULL);
        jj_fail(rt, "TemplateError: %s", msg ? jj_to_str(rt, *msg)->s : "");
    }
    if (!strcmp(name, "strftime_now")) {
        jj_str_t *f = str_arg(rt, name, jj_arg(a, 0, NULL));
        time_t now = rt->now;
        struct tm tm;
        gmtime_r(&now, &tm);
        char out[256];
        /* The format is the template's: strftime reads no arguments but
         * tm, so any format is memory-safe. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
        size_t n = f->len < 128 ? strftime(out, sizeof out, f->s, &tm) : 0;
#pragma GCC diagnostic pop
        if (n == 0 && f->len)
            jj_fail(rt, "ValueError: strftime_now: format too long or invalid");
        return jj_str(rt, out, n);
    }
    if (!strcmp(name, "range"))
        return range_list(rt, a);
    if (!strcmp(name, "namespace"))
        return make_mapping(rt, name, JJ_NS, a);
    return make_mapping(rt, name, JJ_DICT, a);
}
