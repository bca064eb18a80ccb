/* parser_qwen3coder.c: the "qwen3-coder" parser, as Ollama's Qwen3CoderParser
 * splits the answer.
 *
 * Content streams out until `<tool_call>`; the whitespace before the tag
 * (and trailing whitespace at any point, until more text shows it is not
 * the end) is held back and dropped when a call or the end follows. The
 * call runs to `</tool_call>` and reads
 *     <function=NAME>
 *     <parameter=ARG>
 *     VALUE
 *     </parameter>
 *     </function>
 * (one newline after the opening and before the closing parameter tag is
 * not part of the value). Each VALUE is typed by the request's schema of
 * that tool's parameter (its `type`, or the types of its `anyOf`): "null"
 * is null whatever the type; then, in this order, boolean (true/false, any
 * case; a value that is neither is false when boolean is the only type),
 * integer, number (whole numbers become integers), array and object (JSON)
 * when the value parses as one; otherwise the text as a string. Whitespace
 * after a call is dropped. A call that is not of that shape fails the
 * request ("qwen3-coder: ..."). At the end of generation a call left open
 * is completed if it parses, else given back as content. */
#include "lib/prelude.h"
#include "services/runner/output/parser.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <strings.h>

static const char OPEN[] = "<tool_call>";
static const char CLOSE[] = "</tool_call>";

typedef struct qwen {
    bool in_call;
    bool after_call; /* eat whitespace that follows a call */
    cr_buf_t acc;
} qwen_t;

static cr_status_t q_init(rn_parser_t *p, const rn_parser_init_t *in, void **state,
                          cr_err_t *err)
{
    CR_UNUSED(p);
    CR_UNUSED(in);
    qwen_t *q = calloc(1, sizeof *q);
    if (!q)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for the qwen3-coder parser");
    cr_buf_init(&q->acc, RN_PARSER_HOLD_BYTES);
    *state = q;
    return CR_OK;
}

static void q_destroy(void *state)
{
    qwen_t *q = state;
    cr_buf_free(&q->acc);
    free(q);
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

static void consume(cr_buf_t *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    if (b->data)
        b->data[b->len] = '\0';
}

static size_t overlap(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t k = CR_MIN(n, m - 1); k > 0; k--)
        if (!memcmp(s + n - k, needle, k))
            return k;
    return 0;
}

/* ---- values ---- */

/* The declared types of parameter `arg` of tool `name` into types (up to
 * cap); returns the count (0: unknown, keep strings). */
static size_t param_types(const json_t *tools, const char *name, const char *arg,
                          const char **types, size_t cap)
{
    const json_t *prop = NULL;
    for (size_t i = 0; i < json_array_size(tools) && !prop; i++) {
        const json_t *f = json_object_get(json_array_get(tools, i), "function");
        const char *fn = json_string_value(json_object_get(f, "name"));
        if (fn && !strcmp(fn, name))
            prop = json_object_get(
                json_object_get(json_object_get(f, "parameters"), "properties"), arg);
    }
    size_t n = 0;
    const json_t *any = json_object_get(prop, "anyOf");
    size_t n_src = json_is_array(any) ? json_array_size(any) : 1;
    for (size_t s = 0; s < n_src; s++) {
        const json_t *t = json_object_get(json_is_array(any) ? json_array_get(any, s) : prop,
                                          "type");
        if (json_is_string(t) && n < cap)
            types[n++] = json_string_value(t);
        for (size_t k = 0; json_is_array(t) && k < json_array_size(t); k++)
            if (json_is_string(json_array_get(t, k)) && n < cap)
                types[n++] = json_string_value(json_array_get(t, k));
    }
    return n;
}

static bool has_type(const char **types, size_t n, const char *t)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(types[i], t))
            return true;
    return false;
}

/* Go's strconv.ParseInt(s, 10, 64). */
static bool parse_int(const char *s, long long *out)
{
    const char *d = s + (*s == '+' || *s == '-');
    if (!isdigit((unsigned char)*d))
        return false;
    for (const char *c = d; *c; c++)
        if (!isdigit((unsigned char)*c))
            return false;
    errno = 0;
    *out = strtoll(s, NULL, 10);
    return errno == 0;
}

/* A finite float, the whole text (no surrounding space). */
static bool parse_float(const char *s, double *out)
{
    if (!*s || is_space(*s))
        return false;
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return *end == '\0' && errno == 0 && isfinite(*out);
}

static json_t *typed_value(const char *raw, const char **types, size_t n)
{
    if (!strcasecmp(raw, "null"))
        return json_null();
    if (!n)
        return json_string(raw);
    if (has_type(types, n, "boolean")) {
        if (!strcasecmp(raw, "true"))
            return json_true();
        if (!strcasecmp(raw, "false"))
            return json_false();
        if (n == 1)
            return json_false();
    }
    long long i;
    double d;
    if (has_type(types, n, "integer")) {
        if (parse_int(raw, &i))
            return json_integer(i);
        if (n == 1)
            return json_string(raw);
    }
    if (has_type(types, n, "number")) {
        if (parse_float(raw, &d)) {
            if (d == trunc(d) && fabs(d) < 9.2e18)
                return json_integer((json_int_t)d);
            return json_real(d);
        }
        if (n == 1)
            return json_string(raw);
    }
    static const char *const containers[] = {"array", "object"};
    for (size_t k = 0; k < 2; k++) {
        if (!has_type(types, n, containers[k]))
            continue;
        json_t *v = json_loads(raw, JSON_DECODE_ANY, NULL);
        if (v && (k == 0 ? json_is_array(v) : json_is_object(v)))
            return v;
        json_decref(v);
        if (n == 1)
            return json_string(raw);
    }
    return json_string(raw);
}

/* ---- calls ---- */

static const char *find(const char *s, const char *end, const char *needle)
{
    return memmem(s, (size_t)(end - s), needle, strlen(needle));
}

/* Reads the `<tag=NAME>` that starts at s: NAME into name (NUL-terminated,
 * truncated to cap), returns the byte after '>', NULL without one. */
static const char *tag_name(const char *s, const char *end, size_t tag_len,
                            char *name, size_t cap)
{
    const char *n = s + tag_len, *gt = memchr(n, '>', (size_t)(end - n));
    if (!gt || gt == n)
        return NULL;
    snprintf(name, cap, "%.*s", (int)(gt - n), n);
    return gt + 1;
}

/* Parses one call's text and emits it. CR_E_INVALID names what is wrong. */
static cr_status_t parse_call(rn_parser_t *p, const char *raw, size_t len,
                              const rn_parser_out_t *out, cr_err_t *err)
{
    const char *end = raw + len;
    const char *f = find(raw, end, "<function=");
    char name[256], arg[256];
    const char *at = f ? tag_name(f, end, 10, name, sizeof name) : NULL;
    if (!at)
        return cr_err_set(err, CR_E_INVALID,
                          "qwen3-coder: tool call without <function=NAME>: '%.*s'",
                          (int)CR_MIN(len, 256), raw);
    json_t *args = json_object();
    if (!args)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = CR_OK;
    for (;;) {
        const char *pa = find(at, end, "<parameter=");
        const char *fe = find(at, end, "</function>");
        if (!fe) {
            st = cr_err_set(err, CR_E_INVALID,
                            "qwen3-coder: tool call %s has no </function>", name);
            break;
        }
        if (!pa || pa > fe)
            break;
        const char *v = tag_name(pa, fe, 11, arg, sizeof arg);
        const char *ve = v ? find(v, end, "</parameter>") : NULL;
        if (!v || !ve || ve > fe) {
            st = cr_err_set(err, CR_E_INVALID,
                            "qwen3-coder: parameter of tool call %s is not closed "
                            "by </parameter>",
                            name);
            break;
        }
        /* One newline on each side belongs to the layout, not the value. */
        if (v < ve && *v == '\n')
            v++;
        if (ve > v && ve[-1] == '\n')
            ve--;
        char *value = strndup(v, (size_t)(ve - v));
        const char *types[16];
        size_t nt = param_types(rn_parser_tools(p), name, arg, types, 16);
        json_t *jv = value ? typed_value(value, types, nt) : NULL;
        free(value);
        if (!jv || json_object_set_new(args, arg, jv)) {
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
            break;
        }
        at = ve + (ve[0] == '\n' ? 1 : 0) + 12;
    }
    if (!st)
        st = rn_parser_emit_call(p, out, name, strlen(name), args);
    json_decref(args);
    return st;
}

/* ---- streaming ---- */

static size_t trailing_space(const char *s, size_t n)
{
    size_t k = 0;
    while (k < n && is_space(s[n - 1 - k]))
        k++;
    return k;
}

static cr_status_t run(rn_parser_t *p, qwen_t *q, const rn_parser_out_t *out,
                       cr_err_t *err)
{
    cr_status_t st = CR_OK;
    for (;;) {
        const char *a = q->acc.data ? q->acc.data : "";
        size_t n = q->acc.len;
        if (q->after_call) {
            size_t k = 0;
            while (k < n && is_space(a[k]))
                k++;
            consume(&q->acc, k);
            if (k == n)
                return CR_OK;
            q->after_call = false;
            continue;
        }
        if (q->in_call) {
            const char *c = find(a, a + n, CLOSE);
            if (!c)
                return CR_OK;
            if ((st = parse_call(p, a, (size_t)(c - a), out, err)))
                return st;
            consume(&q->acc, (size_t)(c - a) + sizeof CLOSE - 1);
            q->in_call = false;
            q->after_call = true;
            continue;
        }
        const char *o = find(a, a + n, OPEN);
        size_t upto = o ? (size_t)(o - a) : n - overlap(a, n, OPEN);
        size_t emit = upto - trailing_space(a, upto);
        if ((st = cr_buf_append(out->content, a, emit)))
            return st;
        if (!o) {
            consume(&q->acc, emit);
            return CR_OK;
        }
        consume(&q->acc, upto + sizeof OPEN - 1);
        q->in_call = true;
    }
}

static cr_status_t q_push(rn_parser_t *p, void *state, const char *text, size_t len,
                          const rn_parser_out_t *out, cr_err_t *err)
{
    qwen_t *q = state;
    cr_status_t st = cr_buf_append(&q->acc, text, len);
    if (st)
        return cr_err_set(err, st, "qwen3-coder: %s", cr_status_str(st));
    return run(p, q, out, err);
}

static cr_status_t q_finish(rn_parser_t *p, void *state, const rn_parser_out_t *out,
                            cr_err_t *err)
{
    qwen_t *q = state;
    cr_status_t st = CR_OK;
    if (q->in_call) {
        cr_err_t perr = {0};
        size_t mark = out->calls->len;
        if (parse_call(p, q->acc.data ? q->acc.data : "", q->acc.len, out, &perr)) {
            out->calls->len = mark; /* nothing of a failed call stays */
            if (!(st = cr_buf_puts(out->content, OPEN)))
                st = cr_buf_append(out->content, q->acc.data, q->acc.len);
        }
    }
    /* Held trailing whitespace at the end is dropped, as Ollama does. */
    cr_buf_reset(&q->acc);
    q->in_call = false;
    return st ? cr_err_set(err, st, "qwen3-coder: %s", cr_status_str(st)) : CR_OK;
}

const rn_parser_ops_t rn_parser_qwen3coder_ops = {
    .name = "qwen3-coder",
    .init = q_init,
    .destroy = q_destroy,
    .push = q_push,
    .finish = q_finish,
    .stops = NULL,
};
