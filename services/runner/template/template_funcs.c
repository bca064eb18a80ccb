/* template_funcs.c: the builtin functions templates may call: Go's
 * (and, or, not, len, index, slice, eq, ne, lt, le, gt, ge, print, printf,
 * println, html, js, urlquery, call) and Ollama's (json, currentDate,
 * yesterdayDate, toTypeScriptType).
 *
 * Each takes evaluated arguments (borrowed) and returns a new reference,
 * or NULL after recording "error calling NAME: ..." in the execution
 * state. and/or are evaluated lazily in template_exec.c. printf implements
 * the fmt verbs templates use (v s q d x X o O b c U e E f F g G t %),
 * with flags, width and precision, and Go's %!verb(type=value) errors. */
#include "lib/prelude.h"
#include "services/runner/template/template_impl.h"

#include "lib/gotext.h"

#include <ctype.h>
#include <math.h>
#include <time.h>

static const char *const names[TF__COUNT] = {
    [TF_AND] = "and",
    [TF_OR] = "or",
    [TF_NOT] = "not",
    [TF_LEN] = "len",
    [TF_INDEX] = "index",
    [TF_SLICE] = "slice",
    [TF_EQ] = "eq",
    [TF_NE] = "ne",
    [TF_LT] = "lt",
    [TF_LE] = "le",
    [TF_GT] = "gt",
    [TF_GE] = "ge",
    [TF_PRINT] = "print",
    [TF_PRINTF] = "printf",
    [TF_PRINTLN] = "println",
    [TF_HTML] = "html",
    [TF_JS] = "js",
    [TF_URLQUERY] = "urlquery",
    [TF_CALL] = "call",
    [TF_JSON] = "json",
    [TF_CURRENT_DATE] = "currentDate",
    [TF_YESTERDAY_DATE] = "yesterdayDate",
    [TF_TO_TS_TYPE] = "toTypeScriptType",
};

tfunc_t rn_tmpl_func_lookup(const char *name, size_t len)
{
    for (int i = 0; i < TF__COUNT; i++)
        if (strlen(names[i]) == len && !memcmp(names[i], name, len))
            return (tfunc_t)i;
    return TF__COUNT;
}

const char *rn_tmpl_func_name(tfunc_t f)
{
    return f < TF__COUNT ? names[f] : "?";
}

/* ---- helpers ---- */

static rn_val_t *call_fail(exec_t *x, tfunc_t f, const char *fmt, ...) CR_PRINTF(3, 4);
static rn_val_t *call_fail(exec_t *x, tfunc_t f, const char *fmt, ...)
{
    char msg[CR_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rn_tmpl_exec_fail(x, CR_E_INVALID, "error calling %s: %s", names[f], msg);
}

static rn_val_t *nomem(exec_t *x)
{
    return rn_tmpl_exec_fail(x, CR_E_NOMEM, "out of memory");
}

static rn_val_t *bool_val(exec_t *x, bool b)
{
    rn_val_t *v = rn_val_bool_new(b);
    return v ? v : nomem(x);
}

/* Turns a scratch buffer into a string value; frees the buffer. A buffer
 * error (the output cap applies to scratch space too) fails the call. */
static rn_val_t *buf_val(exec_t *x, cr_buf_t *b, cr_status_t st)
{
    rn_val_t *v = NULL;
    if (!st)
        v = rn_val_strn_new(b->data ? b->data : "", b->len);
    cr_buf_free(b);
    if (st == CR_E_TOO_LARGE)
        return rn_tmpl_exec_fail(x, st, "template output exceeds %zu bytes", x->out->max_bytes);
    if (st || !v)
        return nomem(x);
    return v;
}

static void scratch(exec_t *x, cr_buf_t *b)
{
    cr_buf_init(b, x->out->max_bytes);
}

/* ---- comparisons ---- */

typedef enum kind { K_INVALID, K_BOOL, K_INT, K_FLOAT, K_STRING, K_OTHER } kind_t;

static kind_t basic_kind(const rn_val_t *v)
{
    switch (v->kind) {
    case RN_VAL_NIL: return K_INVALID;
    case RN_VAL_BOOL: return K_BOOL;
    case RN_VAL_INT: return K_INT;
    case RN_VAL_FLOAT: return K_FLOAT;
    case RN_VAL_STRING: return K_STRING;
    default: return K_OTHER;
    }
}

static int str_cmp(const rn_val_t *a, const rn_val_t *b)
{
    size_t n = CR_MIN(a->u.s.len, b->u.s.len);
    int c = memcmp(a->u.s.p, b->u.s.p, n);
    if (c)
        return c;
    return a->u.s.len < b->u.s.len ? -1 : a->u.s.len > b->u.s.len;
}

/* Go's eq for one pair: 1 true, 0 false, -1 error (message set). */
static int eq_pair(exec_t *x, tfunc_t f, const rn_val_t *a, const rn_val_t *b)
{
    kind_t ka = basic_kind(a), kb = basic_kind(b);
    if (ka != kb) {
        if (ka != K_INVALID && kb != K_INVALID) {
            call_fail(x, f, "incompatible types for comparison");
            return -1;
        }
        return 0;
    }
    switch (ka) {
    case K_INVALID: return 1;
    case K_BOOL: return a->u.b == b->u.b;
    case K_INT: return a->u.i == b->u.i;
    case K_FLOAT: return a->u.f == b->u.f;
    case K_STRING: return str_cmp(a, b) == 0;
    case K_OTHER:
        if (a->kind == RN_VAL_STRUCT && b->kind == RN_VAL_STRUCT)
            return a == b;
        {
            cr_buf_t vb;
            cr_buf_init(&vb, 200);
            rn_val_print_depth(b, &vb, 1);
            call_fail(x, f, "non-comparable type %s: %s", vb.data ? vb.data : "",
                      rn_val_type_name(b));
            cr_buf_free(&vb);
        }
        return -1;
    }
    return 0;
}

/* Go's lt: 1 true, 0 false, -1 error. */
static int lt_pair(exec_t *x, tfunc_t f, const rn_val_t *a, const rn_val_t *b)
{
    kind_t ka = basic_kind(a), kb = basic_kind(b);
    if (ka == K_INVALID || ka == K_OTHER || kb == K_INVALID || kb == K_OTHER) {
        call_fail(x, f, "invalid type for comparison");
        return -1;
    }
    if (ka != kb) {
        call_fail(x, f, "incompatible types for comparison");
        return -1;
    }
    switch (ka) {
    case K_INT: return a->u.i < b->u.i;
    case K_FLOAT: return a->u.f < b->u.f;
    case K_STRING: return str_cmp(a, b) < 0;
    default:
        call_fail(x, f, "invalid type for comparison");
        return -1;
    }
}

static rn_val_t *compare(exec_t *x, tfunc_t f, rn_val_t **a, size_t n)
{
    int r = 0;
    switch (f) {
    case TF_EQ:
        if (n < 2)
            return call_fail(x, f, "missing argument for comparison");
        for (size_t i = 1; i < n; i++) {
            r = eq_pair(x, f, a[0], a[i]);
            if (r != 0)
                break;
        }
        break;
    case TF_NE:
        r = eq_pair(x, f, a[0], a[1]);
        if (r >= 0)
            r = !r;
        break;
    case TF_LT:
        r = lt_pair(x, f, a[0], a[1]);
        break;
    case TF_GE:
        r = lt_pair(x, f, a[0], a[1]);
        if (r >= 0)
            r = !r;
        break;
    case TF_LE:
    case TF_GT:
        r = lt_pair(x, f, a[0], a[1]);
        if (r == 0)
            r = eq_pair(x, f, a[0], a[1]);
        if (r >= 0 && f == TF_GT)
            r = !r;
        break;
    default:
        break;
    }
    if (r < 0)
        return NULL;
    return bool_val(x, r != 0);
}

/* ---- len, index, slice ---- */

static rn_val_t *fn_len(exec_t *x, const rn_val_t *v)
{
    int64_t n;
    switch (v->kind) {
    case RN_VAL_NIL:
        return call_fail(x, TF_LEN, "len of nil pointer");
    case RN_VAL_STRING:
        n = (int64_t)v->u.s.len;
        break;
    case RN_VAL_LIST:
    case RN_VAL_MAP:
        n = (int64_t)rn_val_len(v);
        break;
    default:
        return call_fail(x, TF_LEN, "len of type %s", rn_val_type_name(v));
    }
    rn_val_t *r = rn_val_int_new(n);
    return r ? r : nomem(x);
}

/* An index argument for a list/string of length len (cap = len). */
static bool index_arg(exec_t *x, tfunc_t f, const rn_val_t *idx, size_t cap, int64_t *out)
{
    if (idx->kind == RN_VAL_NIL) {
        call_fail(x, f, "cannot index slice/array with nil");
        return false;
    }
    if (idx->kind != RN_VAL_INT) {
        call_fail(x, f, "cannot index slice/array with type %s", rn_val_type_name(idx));
        return false;
    }
    if (idx->u.i < 0 || (uint64_t)idx->u.i > cap) {
        call_fail(x, f, "index out of range: %" PRId64, idx->u.i);
        return false;
    }
    *out = idx->u.i;
    return true;
}

static rn_val_t *fn_index(exec_t *x, rn_val_t **a, size_t n)
{
    rn_val_t *item = a[0];
    if (item->kind == RN_VAL_NIL)
        return call_fail(x, TF_INDEX, "index of untyped nil");
    rn_val_t *cur = rn_val_ref(item);
    for (size_t i = 1; i < n; i++) {
        rn_val_t *next = NULL;
        int64_t k = 0;
        switch (cur->kind) {
        case RN_VAL_NIL:
            rn_val_destroy(&cur);
            return call_fail(x, TF_INDEX, "index of nil pointer");
        case RN_VAL_LIST:
        case RN_VAL_STRING: {
            size_t len = cur->kind == RN_VAL_LIST ? cur->u.list.len : cur->u.s.len;
            if (!index_arg(x, TF_INDEX, a[i], len, &k)) {
                rn_val_destroy(&cur);
                return NULL;
            }
            if ((size_t)k == len) {
                rn_val_destroy(&cur);
                return call_fail(x, TF_INDEX, "reflect: slice index out of range");
            }
            if (cur->kind == RN_VAL_LIST) {
                next = rn_val_ref(cur->u.list.items[k]);
            } else {
                next = rn_val_int_new((unsigned char)cur->u.s.p[k]); /* a byte */
                if (!next) {
                    rn_val_destroy(&cur);
                    return nomem(x);
                }
            }
            break;
        }
        case RN_VAL_MAP: {
            if (a[i]->kind != RN_VAL_STRING) {
                rn_val_destroy(&cur);
                if (a[i]->kind == RN_VAL_NIL)
                    return call_fail(x, TF_INDEX, "value is nil; should be of type string");
                return call_fail(x, TF_INDEX, "value has type %s; should be string",
                                 rn_val_type_name(a[i]));
            }
            rn_val_t *v = rn_val_get(cur, a[i]->u.s.p);
            /* Keys with NUL bytes never match (keys are C strings). */
            if (strlen(a[i]->u.s.p) != a[i]->u.s.len)
                v = NULL;
            next = rn_val_ref(v ? v : rn_val_nil());
            break;
        }
        default:
            rn_val_destroy(&cur);
            return call_fail(x, TF_INDEX, "can't index item of type %s", rn_val_type_name(item));
        }
        rn_val_destroy(&cur);
        cur = next;
    }
    return cur;
}

static rn_val_t *fn_slice(exec_t *x, rn_val_t **a, size_t n)
{
    rn_val_t *item = a[0];
    size_t nidx = n - 1;
    if (item->kind == RN_VAL_NIL)
        return call_fail(x, TF_SLICE, "slice of untyped nil");
    if (nidx > 3)
        return call_fail(x, TF_SLICE, "too many slice indexes: %zu", nidx);
    size_t len;
    if (item->kind == RN_VAL_STRING) {
        if (nidx == 3)
            return call_fail(x, TF_SLICE, "cannot 3-index slice a string");
        len = item->u.s.len;
    } else if (item->kind == RN_VAL_LIST) {
        len = item->u.list.len;
    } else {
        return call_fail(x, TF_SLICE, "can't slice item of type %s", rn_val_type_name(item));
    }
    int64_t idx[3] = {0, (int64_t)len, (int64_t)len};
    for (size_t i = 0; i < nidx; i++)
        if (!index_arg(x, TF_SLICE, a[i + 1], len, &idx[i]))
            return NULL;
    if (idx[0] > idx[1])
        return call_fail(x, TF_SLICE, "invalid slice index: %" PRId64 " > %" PRId64, idx[0], idx[1]);
    if (nidx == 3 && idx[1] > idx[2])
        return call_fail(x, TF_SLICE, "invalid slice index: %" PRId64 " > %" PRId64, idx[1], idx[2]);
    if (item->kind == RN_VAL_STRING) {
        rn_val_t *s = rn_val_strn_new(item->u.s.p + idx[0], (size_t)(idx[1] - idx[0]));
        return s ? s : nomem(x);
    }
    rn_val_t *l = rn_val_list_new(0);
    if (!l)
        return nomem(x);
    for (int64_t i = idx[0]; i < idx[1]; i++) {
        rn_val_t *e = rn_val_ref(item->u.list.items[i]);
        if (rn_val_list_append(l, &e)) {
            rn_val_destroy(&l);
            return nomem(x);
        }
    }
    return l;
}

/* ---- fmt ---- */

typedef struct spec {
    bool minus, plus, sharp, zero, space;
    bool plus_v; /* %+v: struct field names */
    int width; /* -1: none */
    int prec;  /* -1: none */
} spec_t;

static size_t rune_count(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80)
            c++;
    return c;
}

/* Appends body padded to the width; zero padding goes after a sign. */
static cr_status_t pad(cr_buf_t *out, const spec_t *sp, const char *body, size_t n, bool numeric)
{
    size_t runes = rune_count(body, n);
    if (sp->width < 0 || (size_t)sp->width <= runes)
        return cr_buf_append(out, body, n);
    size_t fill = (size_t)sp->width - runes;
    cr_status_t st = CR_OK;
    if (sp->minus) {
        st = cr_buf_append(out, body, n);
        for (size_t i = 0; !st && i < fill; i++)
            st = cr_buf_putc(out, ' ');
        return st;
    }
    if (sp->zero) {
        size_t sign = numeric && n && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
        st = cr_buf_append(out, body, sign);
        for (size_t i = 0; !st && i < fill; i++)
            st = cr_buf_putc(out, '0');
        return st ? st : cr_buf_append(out, body + sign, n - sign);
    }
    for (size_t i = 0; !st && i < fill; i++)
        st = cr_buf_putc(out, ' ');
    return st ? st : cr_buf_append(out, body, n);
}

static size_t utf8_put_rune(uint32_t cp, char *o)
{
    return cr_utf8_encode(cp, o);
}

/* Length of a valid UTF-8 sequence at s, 0 if invalid. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    uint32_t cp;
    return cr_utf8_decode(s, n, &cp);
}

/* strconv.Quote (and QuoteRune for quote == '\''). */
static cr_status_t go_quote(cr_buf_t *out, const char *s, size_t n, char quote)
{
    static const char hex[] = "0123456789abcdef";
    cr_status_t st = cr_buf_putc(out, quote);
    for (size_t i = 0; !st && i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t w = utf8_len((const unsigned char *)s + i, n - i);
        if (w == 0) {
            char e[5] = {'\\', 'x', hex[c >> 4], hex[c & 15], 0};
            st = cr_buf_puts(out, e);
            i++;
            continue;
        }
        if (w > 1) {
            st = cr_buf_append(out, s + i, w);
            i += w;
            continue;
        }
        const char *esc = NULL;
        switch (c) {
        case '\a': esc = "\\a"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\v': esc = "\\v"; break;
        case '\\': esc = "\\\\"; break;
        default: break;
        }
        if (esc) {
            st = cr_buf_puts(out, esc);
        } else if (c == (unsigned char)quote) {
            char e[3] = {'\\', quote, 0};
            st = cr_buf_puts(out, e);
        } else if (c < 0x20 || c == 0x7f) {
            char e[5] = {'\\', 'x', hex[c >> 4], hex[c & 15], 0};
            st = cr_buf_puts(out, e);
        } else {
            st = cr_buf_putc(out, (char)c);
        }
        i++;
    }
    return st ? st : cr_buf_putc(out, quote);
}

static bool can_backquote(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '`' || c == 0x7f || (c < 0x20 && c != '\t'))
            return false;
    }
    return true;
}

static cr_status_t fmt_value(exec_t *x, const rn_val_t *v, char verb, const spec_t *sp,
                             cr_buf_t *out, int depth);

static cr_status_t fmt_string(const char *s, size_t n, char verb, const spec_t *sp,
                              cr_buf_t *out);

/* %!verb(type=value), the value printed with %v and the same flags, as
 * Go's badVerb does. */
static cr_status_t bad_verb(exec_t *x, const rn_val_t *v, char verb, const spec_t *sp,
                            cr_buf_t *out, int depth)
{
    cr_status_t st = cr_buf_printf(out, "%%!%c(", verb);
    if (st)
        return st;
    if (v->kind == RN_VAL_NIL)
        st = cr_buf_puts(out, "<nil>");
    else if (!(st = cr_buf_puts(out, rn_val_type_name(v))) && !(st = cr_buf_putc(out, '=')))
        st = fmt_value(x, v, 'v', sp, out, depth + 1);
    return st ? st : cr_buf_putc(out, ')');
}

/* A string (a map key) with a verb, or its bad-verb form. */
static cr_status_t fmt_str_verb(const char *s, size_t n, char verb, const spec_t *sp,
                                cr_buf_t *out)
{
    cr_status_t st = fmt_string(s, n, verb, sp, out);
    if (st != CR_E_INVALID)
        return st;
    st = cr_buf_printf(out, "%%!%c(string=", verb);
    if (!st)
        st = fmt_string(s, n, 'v', sp, out);
    return st ? st : cr_buf_putc(out, ')');
}

static cr_status_t fmt_string(const char *s, size_t n, char verb, const spec_t *sp, cr_buf_t *out)
{
    cr_buf_t b;
    cr_buf_init(&b, out->max_bytes);
    cr_status_t st = CR_OK;
    switch (verb) {
    case 'v':
    case 's': {
        size_t len = n;
        if (sp->prec >= 0) { /* precision counts runes */
            size_t runes = 0;
            len = 0;
            while (len < n && runes < (size_t)sp->prec) {
                size_t w = utf8_len((const unsigned char *)s + len, n - len);
                len += w ? w : 1;
                runes++;
            }
        }
        st = cr_buf_append(&b, s, len);
        break;
    }
    case 'q':
        if (sp->sharp && can_backquote(s, n)) {
            st = cr_buf_putc(&b, '`');
            if (!st)
                st = cr_buf_append(&b, s, n);
            if (!st)
                st = cr_buf_putc(&b, '`');
        } else {
            st = go_quote(&b, s, n, '"');
        }
        break;
    case 'x':
    case 'X': {
        const char *digits = verb == 'x' ? "0123456789abcdef" : "0123456789ABCDEF";
        if (sp->sharp && n)
            st = cr_buf_puts(&b, verb == 'x' ? "0x" : "0X");
        for (size_t i = 0; !st && i < n; i++) {
            unsigned char c = (unsigned char)s[i];
            if (sp->space && i) {
                st = cr_buf_putc(&b, ' ');
                if (!st && sp->sharp)
                    st = cr_buf_puts(&b, verb == 'x' ? "0x" : "0X");
            }
            if (!st)
                st = cr_buf_putc(&b, digits[c >> 4]);
            if (!st)
                st = cr_buf_putc(&b, digits[c & 15]);
        }
        break;
    }
    default:
        cr_buf_free(&b);
        return CR_E_INVALID; /* caller writes the bad-verb form */
    }
    if (!st)
        st = pad(out, sp, b.data ? b.data : "", b.len, false);
    cr_buf_free(&b);
    return st;
}

static cr_status_t fmt_int(int64_t i, char verb, const spec_t *sp, cr_buf_t *out)
{
    char body[160];
    size_t k = 0;
    uint64_t u = i < 0 ? (uint64_t)0 - (uint64_t)i : (uint64_t)i;
    if (verb == 'c' || verb == 'q' || verb == 'U') {
        uint32_t cp = (i < 0 || i > 0x10FFFF) ? 0xFFFD : (uint32_t)i;
        if (verb == 'c') {
            k = utf8_put_rune(cp, body);
        } else if (verb == 'U') {
            k = (size_t)snprintf(body, sizeof body, "U+%04" PRIX32, cp);
            if (sp->sharp) {
                char r[5];
                size_t w = utf8_put_rune(cp, r);
                k += (size_t)snprintf(body + k, sizeof body - k, " '%.*s'", (int)w, r);
            }
        } else {
            char r[5];
            size_t w = utf8_put_rune(cp, r);
            cr_buf_t b;
            cr_buf_init(&b, 64);
            cr_status_t st = go_quote(&b, r, w, '\'');
            if (!st)
                st = pad(out, sp, b.data, b.len, false);
            cr_buf_free(&b);
            return st;
        }
        return pad(out, sp, body, k, false);
    }
    int base;
    const char *digits = "0123456789abcdef";
    const char *prefix = "";
    switch (verb) {
    case 'v':
    case 'd': base = 10; break;
    case 'b': base = 2; prefix = sp->sharp ? "0b" : ""; break;
    case 'o': base = 8; prefix = sp->sharp ? "0" : ""; break;
    case 'O': base = 8; prefix = "0o"; break;
    case 'x': base = 16; prefix = sp->sharp ? "0x" : ""; break;
    case 'X': base = 16; digits = "0123456789ABCDEF"; prefix = sp->sharp ? "0X" : ""; break;
    default: return CR_E_INVALID;
    }
    char rev[72];
    size_t nd = 0;
    do {
        rev[nd++] = digits[u % (uint64_t)base];
        u /= (uint64_t)base;
    } while (u);
    if (sp->prec == 0 && i == 0)
        nd = 0; /* %.0d of 0 prints nothing */
    if (i < 0)
        body[k++] = '-';
    else if (sp->plus)
        body[k++] = '+';
    else if (sp->space)
        body[k++] = ' ';
    for (const char *p = prefix; *p; p++)
        body[k++] = *p;
    for (int z = (int)nd; sp->prec > z && k < 140; z++)
        body[k++] = '0';
    while (nd)
        body[k++] = rev[--nd];
    spec_t s2 = *sp;
    if (sp->prec >= 0)
        s2.zero = false; /* precision wins over zero padding */
    return pad(out, &s2, body, k, true);
}

static cr_status_t fmt_float(double f, char verb, const spec_t *sp, cr_buf_t *out)
{
    cr_buf_t b;
    cr_buf_init(&b, 512);
    cr_status_t st = CR_OK;
    if (isinf(f) || isnan(f)) {
        const char *s = isnan(f) ? (sp->plus ? "+NaN" : "NaN") : f > 0 ? "+Inf" : "-Inf";
        spec_t s2 = *sp;
        s2.zero = false;
        st = pad(out, &s2, s, strlen(s), false);
        cr_buf_free(&b);
        return st;
    }
    switch (verb) {
    case 'x':
    case 'X': {
        /* Go's %x of a float: hex mantissa, at least two exponent digits. */
        char tmp[64];
        int n = snprintf(tmp, sizeof tmp, verb == 'x' ? "%a" : "%A", f);
        if (n < 0 || (size_t)n >= sizeof tmp) {
            cr_buf_free(&b);
            return CR_E_INVALID;
        }
        char *pe = strchr(tmp, verb == 'x' ? 'p' : 'P');
        if (!signbit(f) && (sp->plus || sp->space))
            st = cr_buf_putc(&b, sp->plus ? '+' : ' ');
        if (!st)
            st = cr_buf_append(&b, tmp, pe ? (size_t)(pe - tmp) + 2 : (size_t)n);
        if (!st && pe) {
            const char *digits = pe + 2;
            if (strlen(digits) < 2)
                st = cr_buf_putc(&b, '0');
            if (!st)
                st = cr_buf_puts(&b, digits);
        }
        break;
    }
    case 'v':
    case 'g':
    case 'G':
        if (sp->prec < 0) {
            if (sp->plus && !signbit(f))
                st = cr_buf_putc(&b, '+');
            else if (sp->space && !signbit(f))
                st = cr_buf_putc(&b, ' ');
            if (!st)
                st = rn_val_fmt_float_g(f, &b);
            if (!st && verb == 'G')
                for (size_t i = 0; i < b.len; i++)
                    if (b.data[i] == 'e')
                        b.data[i] = 'E';
            break;
        }
        /* An explicit precision is C's %g. */
        /* fallthrough */
    case 'e':
    case 'E':
    case 'f':
    case 'F': {
        int prec = sp->prec >= 0 ? CR_MIN(sp->prec, 400) : 6;
        char tmp[1024];
        int n;
        switch (verb) {
        case 'e': n = snprintf(tmp, sizeof tmp, "%.*e", prec, f); break;
        case 'E': n = snprintf(tmp, sizeof tmp, "%.*E", prec, f); break;
        case 'G': n = snprintf(tmp, sizeof tmp, "%.*G", prec, f); break;
        case 'v':
        case 'g': n = snprintf(tmp, sizeof tmp, "%.*g", prec, f); break;
        default: n = snprintf(tmp, sizeof tmp, "%.*f", prec, f); break;
        }
        if (n < 0 || (size_t)n >= sizeof tmp) {
            cr_buf_free(&b);
            return CR_E_TOO_LARGE;
        }
        if (!signbit(f) && (sp->plus || sp->space))
            st = cr_buf_putc(&b, sp->plus ? '+' : ' ');
        if (!st)
            st = cr_buf_append(&b, tmp, (size_t)n);
        break;
    }
    default:
        cr_buf_free(&b);
        return CR_E_INVALID;
    }
    if (!st)
        st = pad(out, sp, b.data ? b.data : "", b.len, true);
    cr_buf_free(&b);
    return st;
}

/* Formats one value with a verb; containers element by element. */
static cr_status_t fmt_value(exec_t *x, const rn_val_t *v, char verb, const spec_t *sp,
                             cr_buf_t *out, int depth)
{
    if (depth > RN_VAL_MAX_DEPTH)
        return CR_E_INVALID;
    if ((v->flags & RN_VAL_F_JSON_PRINT) && verb && strchr("vsqxX", verb)) {
        cr_buf_t b;
        cr_buf_init(&b, out->max_bytes);
        cr_status_t st = rn_val_print_depth(v, &b, depth + 1);
        if (!st)
            st = fmt_string(b.data ? b.data : "", b.len, verb, sp, out);
        cr_buf_free(&b);
        return st;
    }
    if (verb == 'T') {
        const char *tn = v->kind == RN_VAL_NIL ? "<nil>" : rn_val_type_name(v);
        return pad(out, sp, tn, strlen(tn), false);
    }
    cr_status_t st = CR_OK;
    switch (v->kind) {
    case RN_VAL_NIL:
        if (verb == 'v' || depth > 0)
            return pad(out, sp, "<nil>", 5, false);
        return bad_verb(x, v, verb, sp, out, depth);
    case RN_VAL_BOOL:
        if (verb != 'v' && verb != 't')
            return bad_verb(x, v, verb, sp, out, depth);
        return pad(out, sp, v->u.b ? "true" : "false", v->u.b ? 4 : 5, false);
    case RN_VAL_INT:
        st = fmt_int(v->u.i, verb, sp, out);
        return st == CR_E_INVALID ? bad_verb(x, v, verb, sp, out, depth) : st;
    case RN_VAL_FLOAT:
        st = fmt_float(v->u.f, verb, sp, out);
        return st == CR_E_INVALID ? bad_verb(x, v, verb, sp, out, depth) : st;
    case RN_VAL_STRING:
        st = fmt_string(v->u.s.p, v->u.s.len, verb, sp, out);
        return st == CR_E_INVALID ? bad_verb(x, v, verb, sp, out, depth) : st;
    case RN_VAL_LIST:
        st = cr_buf_putc(out, '[');
        for (size_t i = 0; !st && i < v->u.list.len; i++) {
            if (i)
                st = cr_buf_putc(out, ' ');
            if (!st)
                st = fmt_value(x, v->u.list.items[i], verb, sp, out, depth + 1);
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
                st = fmt_str_verb(e->key, strlen(e->key), verb, sp, out);
            if (!st)
                st = cr_buf_putc(out, ':');
            if (!st)
                st = fmt_value(x, e->val, verb, sp, out, depth + 1);
        }
        free(idx);
        return st ? st : cr_buf_putc(out, ']');
    }
    case RN_VAL_STRUCT:
        st = cr_buf_puts(out, (v->flags & RN_VAL_F_POINTER) ? "&{" : "{");
        for (size_t i = 0; !st && i < v->u.map.len; i++) {
            if (i)
                st = cr_buf_putc(out, ' ');
            if (!st && sp->plus_v && verb == 'v')
                st = cr_buf_printf(out, "%s:", v->u.map.ents[i].key);
            if (!st)
                st = fmt_value(x, v->u.map.ents[i].val, verb, sp, out, depth + 1);
        }
        return st ? st : cr_buf_putc(out, '}');
    }
    return CR_E_INTERNAL;
}

/* An explicit argument index "[n]" at f[*i]: moves *argi to n-1. Returns
 * whether one was there; a bad one sets *bad. */
static bool arg_index(const char *f, size_t flen, size_t *i, size_t n, size_t *argi,
                      bool *reordered, bool *bad)
{
    if (*i >= flen || f[*i] != '[')
        return false;
    *reordered = true;
    size_t j = *i + 1;
    size_t v = 0;
    bool digits = false;
    while (j < flen && f[j] >= '0' && f[j] <= '9' && v < 1000000) {
        v = v * 10 + (size_t)(f[j] - '0');
        digits = true;
        j++;
    }
    if (j >= flen || f[j] != ']' || !digits || v < 1 || v > n) {
        /* Go skips to the closing bracket, if any. */
        while (j < flen && f[j] != ']')
            j++;
        *i = j < flen ? j + 1 : j;
        *bad = true;
        return true;
    }
    *argi = v - 1;
    *i = j + 1;
    return true;
}

/* Go's fmt.Sprintf over template values. */
static cr_status_t go_sprintf(exec_t *x, const char *f, size_t flen, rn_val_t **args, size_t n,
                              cr_buf_t *out)
{
    size_t argi = 0;
    bool reordered = false, bad_index = false;
    cr_status_t st = CR_OK;
    size_t i = 0;
    while (!st && i < flen) {
        size_t start = i;
        while (i < flen && f[i] != '%')
            i++;
        if (i > start)
            st = cr_buf_append(out, f + start, i - start);
        if (st || i >= flen)
            break;
        i++; /* '%' */
        spec_t sp = {.width = -1, .prec = -1};
        for (; i < flen; i++) {
            char c = f[i];
            if (c == '-')
                sp.minus = true, sp.zero = false;
            else if (c == '+')
                sp.plus = true;
            else if (c == '#')
                sp.sharp = true;
            else if (c == ' ')
                sp.space = true;
            else if (c == '0')
                sp.zero = !sp.minus;
            else
                break;
        }
        arg_index(f, flen, &i, n, &argi, &reordered, &bad_index);
        if (i < flen && f[i] == '*') {
            i++;
            if (argi < n && args[argi]->kind == RN_VAL_INT && llabs(args[argi]->u.i) <= 1000000) {
                int64_t w = args[argi++]->u.i;
                if (w < 0) {
                    sp.minus = true;
                    sp.zero = false;
                    w = -w;
                }
                sp.width = (int)w;
            } else {
                if (argi < n)
                    argi++;
                st = cr_buf_puts(out, "%!(BADWIDTH)");
            }
        } else {
            while (i < flen && f[i] >= '0' && f[i] <= '9') {
                sp.width = (sp.width < 0 ? 0 : sp.width) * 10 + (f[i] - '0');
                if (sp.width > 1000000)
                    sp.width = 1000000;
                i++;
            }
        }
        if (i < flen && f[i] == '.') {
            i++;
            sp.prec = 0;
            arg_index(f, flen, &i, n, &argi, &reordered, &bad_index);
            if (i < flen && f[i] == '*') {
                i++;
                if (argi < n && args[argi]->kind == RN_VAL_INT && args[argi]->u.i >= 0 &&
                    args[argi]->u.i <= 1000000) {
                    sp.prec = (int)args[argi++]->u.i;
                } else {
                    if (argi < n)
                        argi++;
                    sp.prec = -1;
                    st = cr_buf_puts(out, "%!(BADPREC)");
                }
            } else {
                while (i < flen && f[i] >= '0' && f[i] <= '9') {
                    sp.prec = sp.prec * 10 + (f[i] - '0');
                    if (sp.prec > 1000000)
                        sp.prec = 1000000;
                    i++;
                }
            }
        }
        arg_index(f, flen, &i, n, &argi, &reordered, &bad_index);
        if (st)
            break;
        if (i >= flen) {
            st = cr_buf_puts(out, "%!(NOVERB)");
            break;
        }
        char verb = f[i++];
        if (verb == 'v') { /* %+v asks for field names, not a sign */
            sp.plus_v = sp.plus;
            sp.plus = false;
        }
        if (verb == '%') {
            st = cr_buf_putc(out, '%');
            continue;
        }
        if (bad_index) {
            bad_index = false;
            st = cr_buf_printf(out, "%%!%c(BADINDEX)", verb);
            continue;
        }
        if (argi >= n) {
            st = cr_buf_printf(out, "%%!%c(MISSING)", verb);
            continue;
        }
        st = fmt_value(x, args[argi++], verb, &sp, out, 0);
    }
    if (!st && !reordered && argi < n) {
        st = cr_buf_puts(out, "%!(EXTRA ");
        for (size_t k = argi; !st && k < n; k++) {
            if (k > argi)
                st = cr_buf_puts(out, ", ");
            if (st)
                break;
            if (args[k]->kind == RN_VAL_NIL) {
                st = cr_buf_puts(out, "<nil>");
            } else {
                st = cr_buf_puts(out, rn_val_type_name(args[k]));
                if (!st)
                    st = cr_buf_putc(out, '=');
                if (!st)
                    st = rn_val_print_depth(args[k], out, 1);
            }
        }
        if (!st)
            st = cr_buf_putc(out, ')');
    }
    return st;
}

/* fmt.Sprint / fmt.Sprintln. */
static cr_status_t go_sprint(rn_val_t **args, size_t n, bool ln, cr_buf_t *out)
{
    cr_status_t st = CR_OK;
    bool prev_string = false;
    for (size_t i = 0; !st && i < n; i++) {
        bool is_string = args[i]->kind == RN_VAL_STRING;
        if (i > 0 && (ln || (!is_string && !prev_string)))
            st = cr_buf_putc(out, ' ');
        if (!st)
            st = rn_val_print_depth(args[i], out, 1);
        prev_string = is_string;
    }
    if (!st && ln)
        st = cr_buf_putc(out, '\n');
    return st;
}

/* The text/template escapers' argument rule: one string as is, else
 * fmt.Sprint of all, where a nil has become the string "<no value>". */
static cr_status_t escaper_arg(rn_val_t **args, size_t n, cr_buf_t *out)
{
    if (n == 1 && args[0]->kind == RN_VAL_STRING)
        return cr_buf_append(out, args[0]->u.s.p, args[0]->u.s.len);
    cr_status_t st = CR_OK;
    bool prev_string = false;
    for (size_t i = 0; !st && i < n; i++) {
        bool nil = args[i]->kind == RN_VAL_NIL;
        bool is_string = nil || args[i]->kind == RN_VAL_STRING;
        if (i > 0 && !is_string && !prev_string)
            st = cr_buf_putc(out, ' ');
        if (!st)
            st = nil ? cr_buf_puts(out, "<no value>") : rn_val_print_depth(args[i], out, 1);
        prev_string = is_string;
    }
    return st;
}

static cr_status_t html_escape(const char *s, size_t n, cr_buf_t *out)
{
    cr_status_t st = CR_OK;
    for (size_t i = 0; !st && i < n; i++) {
        switch (s[i]) {
        case '"': st = cr_buf_puts(out, "&#34;"); break;
        case '\'': st = cr_buf_puts(out, "&#39;"); break;
        case '&': st = cr_buf_puts(out, "&amp;"); break;
        case '<': st = cr_buf_puts(out, "&lt;"); break;
        case '>': st = cr_buf_puts(out, "&gt;"); break;
        case '\0': st = cr_buf_puts(out, "\xEF\xBF\xBD"); break;
        default: st = cr_buf_putc(out, s[i]);
        }
    }
    return st;
}

static cr_status_t js_escape(const char *s, size_t n, cr_buf_t *out)
{
    static const char hex[] = "0123456789ABCDEF";
    cr_status_t st = CR_OK;
    for (size_t i = 0; !st && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '\\': st = cr_buf_puts(out, "\\\\"); break;
        case '\'': st = cr_buf_puts(out, "\\'"); break;
        case '"': st = cr_buf_puts(out, "\\\""); break;
        case '<': st = cr_buf_puts(out, "\\u003C"); break;
        case '>': st = cr_buf_puts(out, "\\u003E"); break;
        case '&': st = cr_buf_puts(out, "\\u0026"); break;
        case '=': st = cr_buf_puts(out, "\\u003D"); break;
        default:
            if (c < 0x20) {
                char e[7] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15], 0};
                st = cr_buf_puts(out, e);
            } else {
                st = cr_buf_putc(out, (char)c);
            }
        }
    }
    return st;
}

static cr_status_t url_query_escape(const char *s, size_t n, cr_buf_t *out)
{
    static const char hex[] = "0123456789ABCDEF";
    cr_status_t st = CR_OK;
    for (size_t i = 0; !st && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
            st = cr_buf_putc(out, (char)c);
        } else if (c == ' ') {
            st = cr_buf_putc(out, '+');
        } else {
            char e[4] = {'%', hex[c >> 4], hex[c & 15], 0};
            st = cr_buf_puts(out, e);
        }
    }
    return st;
}

/* ---- Ollama's functions ---- */

static rn_val_t *fn_date(exec_t *x, tfunc_t f, rn_val_t **a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i]->kind != RN_VAL_STRING)
            return rn_tmpl_exec_fail(x, CR_E_INVALID, "wrong type for value; expected string; got %s",
                                     rn_val_type_name(a[i]));
    time_t now = (time_t)x->now_unix;
    struct tm tm;
    if (!localtime_r(&now, &tm))
        return call_fail(x, f, "cannot read the clock");
    if (f == TF_YESTERDAY_DATE) {
        tm.tm_mday -= 1;
        tm.tm_isdst = -1;
        time_t y = mktime(&tm);
        if (y == (time_t)-1 || !localtime_r(&y, &tm))
            return call_fail(x, f, "cannot read the clock");
    }
    char buf[32];
    size_t k = strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    rn_val_t *v = rn_val_strn_new(buf, k);
    return v ? v : nomem(x);
}

static const char *ts_type_of(const char *json_type)
{
    if (!strcmp(json_type, "string"))
        return "string";
    if (!strcmp(json_type, "number") || !strcmp(json_type, "integer"))
        return "number";
    if (!strcmp(json_type, "boolean"))
        return "boolean";
    if (!strcmp(json_type, "array"))
        return "any[]";
    if (!strcmp(json_type, "object"))
        return "Record<string, any>";
    if (!strcmp(json_type, "null"))
        return "null";
    return "any";
}

static bool is_tool_property(const rn_val_t *v)
{
    return v->kind == RN_VAL_STRUCT && !strcmp(v->u.map.type_name, "api.ToolProperty");
}

/* api.ToolProperty.ToTypeScriptType. */
static cr_status_t ts_type(const rn_val_t *prop, cr_buf_t *out, int depth)
{
    if (depth > RN_VAL_MAX_DEPTH)
        return CR_E_INVALID;
    const rn_val_t *any_of = rn_val_get(prop, "AnyOf");
    cr_status_t st = CR_OK;
    if (any_of && any_of->kind == RN_VAL_LIST && any_of->u.list.len > 0) {
        for (size_t i = 0; !st && i < any_of->u.list.len; i++) {
            if (i)
                st = cr_buf_puts(out, " | ");
            const rn_val_t *e = any_of->u.list.items[i];
            if (!st)
                st = is_tool_property(e) ? ts_type(e, out, depth + 1) : cr_buf_puts(out, "any");
        }
        return st;
    }
    const rn_val_t *type = rn_val_get(prop, "Type");
    if (type && type->kind == RN_VAL_STRING && type->u.s.len > 0)
        return cr_buf_puts(out, ts_type_of(type->u.s.p));
    if (type && type->kind == RN_VAL_LIST && type->u.list.len > 0) {
        for (size_t i = 0; !st && i < type->u.list.len; i++) {
            if (i)
                st = cr_buf_puts(out, " | ");
            if (!st)
                st = cr_buf_puts(out, ts_type_of(rn_val_as_str(type->u.list.items[i])));
        }
        return st;
    }
    return cr_buf_puts(out, "any");
}

/* ---- dispatch ---- */

rn_val_t *rn_tmpl_func_call(exec_t *x, tfunc_t f, rn_val_t **a, size_t n)
{
    cr_buf_t b;
    cr_status_t st;
    switch (f) {
    case TF_NOT:
        return bool_val(x, !rn_val_truth(a[0]));
    case TF_LEN:
        return fn_len(x, a[0]);
    case TF_INDEX:
        return fn_index(x, a, n);
    case TF_SLICE:
        return fn_slice(x, a, n);
    case TF_EQ:
    case TF_NE:
    case TF_LT:
    case TF_LE:
    case TF_GT:
    case TF_GE:
        return compare(x, f, a, n);
    case TF_PRINT:
    case TF_PRINTLN:
        scratch(x, &b);
        st = go_sprint(a, n, f == TF_PRINTLN, &b);
        return buf_val(x, &b, st);
    case TF_PRINTF:
        if (a[0]->kind == RN_VAL_NIL)
            return rn_tmpl_exec_fail(x, CR_E_INVALID, "invalid value; expected string");
        if (a[0]->kind != RN_VAL_STRING)
            return rn_tmpl_exec_fail(x, CR_E_INVALID, "wrong type for value; expected string; got %s",
                                     rn_val_type_name(a[0]));
        scratch(x, &b);
        st = go_sprintf(x, a[0]->u.s.p, a[0]->u.s.len, a + 1, n - 1, &b);
        if (st == CR_E_INVALID) {
            cr_buf_free(&b);
            return call_fail(x, f, "value nested too deeply");
        }
        return buf_val(x, &b, st);
    case TF_HTML:
    case TF_JS:
    case TF_URLQUERY: {
        cr_buf_t arg;
        scratch(x, &arg);
        st = escaper_arg(a, n, &arg);
        scratch(x, &b);
        if (!st) {
            const char *s = arg.data ? arg.data : "";
            st = f == TF_HTML ? html_escape(s, arg.len, &b)
                 : f == TF_JS ? js_escape(s, arg.len, &b)
                              : url_query_escape(s, arg.len, &b);
        }
        cr_buf_free(&arg);
        return buf_val(x, &b, st);
    }
    case TF_CALL:
        if (a[0]->kind == RN_VAL_NIL)
            return call_fail(x, f, "call of nil");
        return call_fail(x, f, "non-function of type %s", rn_val_type_name(a[0]));
    case TF_JSON:
        scratch(x, &b);
        st = rn_val_to_json(a[0], &b);
        if (st == CR_E_INVALID) { /* Ollama ignores marshal errors: "" */
            cr_buf_reset(&b);
            st = CR_OK;
        }
        return buf_val(x, &b, st);
    case TF_CURRENT_DATE:
    case TF_YESTERDAY_DATE:
        return fn_date(x, f, a, n);
    case TF_TO_TS_TYPE:
        scratch(x, &b);
        st = is_tool_property(a[0]) ? ts_type(a[0], &b, 0) : cr_buf_puts(&b, "any");
        return buf_val(x, &b, st);
    default:
        return rn_tmpl_exec_fail(x, CR_E_INTERNAL, "function %s has no implementation", rn_tmpl_func_name(f));
    }
}
