/* gojson.c: Go-compatible JSON and fmt text (see gojson.h). */
#include "lib/prelude.h"
#include "services/registry/gojson.h"

#include <math.h>

#define MAX_DEPTH 64

/* Shortest decimal digits of v (v finite, > 0): digits[] without trailing
 * zeros and the decimal point position dp (v = 0.digits * 10^dp). */
static void shortest_digits(double v, int bits, char *digits, int *nd, int *dp)
{
    char tmp[40];
    int maxp = bits == 32 ? 9 : 17;
    for (int p = 1; p <= maxp; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, v);
        double back = strtod(tmp, NULL);
        bool same = bits == 32 ? (float)back == (float)v : back == v;
        if (same || p == maxp)
            break;
    }
    /* tmp = "d.ddde[+-]XX" */
    int n = 0;
    const char *s = tmp;
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9')
            digits[n++] = *s;
    int exp10 = *s == 'e' ? atoi(s + 1) : 0;
    while (n > 1 && digits[n - 1] == '0')
        n--;
    digits[n] = '\0';
    *nd = n;
    *dp = exp10 + 1;
}

static void fmt_fixed(char *buf, size_t cap, bool neg, const char *d, int nd,
                      int dp)
{
    size_t o = 0;
#define PUT(c)                     \
    do {                           \
        if (o + 1 < cap)           \
            buf[o++] = (char)(c);  \
    } while (0)
    if (neg)
        PUT('-');
    if (dp <= 0) {
        PUT('0');
        PUT('.');
        for (int i = 0; i < -dp; i++)
            PUT('0');
        for (int i = 0; i < nd; i++)
            PUT(d[i]);
    } else if (dp >= nd) {
        for (int i = 0; i < nd; i++)
            PUT(d[i]);
        for (int i = nd; i < dp; i++)
            PUT('0');
    } else {
        for (int i = 0; i < dp; i++)
            PUT(d[i]);
        PUT('.');
        for (int i = dp; i < nd; i++)
            PUT(d[i]);
    }
    buf[o] = '\0';
}

static void fmt_exp(char *buf, size_t cap, bool neg, const char *d, int nd,
                    int dp, bool two_digit_exp)
{
    int e = dp - 1;
    char mant[40];
    size_t o = 0;
    mant[o++] = d[0];
    if (nd > 1) {
        mant[o++] = '.';
        for (int i = 1; i < nd && o < sizeof mant - 1; i++)
            mant[o++] = d[i];
    }
    mant[o] = '\0';
    int ae = e < 0 ? -e : e;
    snprintf(buf, cap, "%s%se%c%s%d", neg ? "-" : "", mant, e < 0 ? '-' : '+',
             (two_digit_exp && ae < 10) ? "0" : "", ae);
}

void reg_gojson_float(double v, int bits, reg_float_style_t style, char *buf,
                      size_t cap)
{
    if (isnan(v)) {
        snprintf(buf, cap, style == REG_FLOAT_JSON ? "null" : "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, cap, style == REG_FLOAT_JSON ? "null"
                           : v > 0                 ? "+Inf"
                                                   : "-Inf");
        return;
    }
    if (v == 0) {
        snprintf(buf, cap, signbit(v) && style == REG_FLOAT_FMT ? "-0" : "0");
        return;
    }
    bool neg = v < 0;
    double a = neg ? -v : v;
    char d[40];
    int nd, dp;
    shortest_digits(a, bits, d, &nd, &dp);
    if (style == REG_FLOAT_JSON) {
        double lim = bits == 32 ? (double)(float)a : a;
        if (lim < 1e-6 || lim >= 1e21)
            fmt_exp(buf, cap, neg, d, nd, dp, false);
        else
            fmt_fixed(buf, cap, neg, d, nd, dp);
    } else {
        int e = dp - 1;
        if (e < -4 || e >= 6) /* shortest %v: precision 6 rule */
            fmt_exp(buf, cap, neg, d, nd, dp, true);
        else
            fmt_fixed(buf, cap, neg, d, nd, dp);
    }
}

/* Length of the valid UTF-8 sequence at s (n bytes left), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xe0) == 0xc0) {
        len = 2, v = c & 0x1f, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
        len = 3, v = c & 0x0f, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return len;
}

cr_status_t reg_gojson_string(const char *s, size_t n, cr_buf_t *out)
{
    static const char hex[] = "0123456789abcdef";
    cr_status_t st = cr_buf_putc(out, '"');
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (!st && i < n) {
        unsigned char c = p[i];
        if (c >= 0x80) {
            uint32_t cp;
            size_t l = utf8_len(p + i, n - i, &cp);
            if (l == 0) {
                st = cr_buf_puts(out, "\\ufffd");
                i++;
            } else if (cp == 0x2028 || cp == 0x2029) {
                st = cr_buf_printf(out, "\\u%04x", (unsigned)cp);
                i += l;
            } else {
                st = cr_buf_append(out, p + i, l);
                i += l;
            }
            continue;
        }
        switch (c) {
        case '"': st = cr_buf_puts(out, "\\\""); break;
        case '\\': st = cr_buf_puts(out, "\\\\"); break;
        case '\n': st = cr_buf_puts(out, "\\n"); break;
        case '\r': st = cr_buf_puts(out, "\\r"); break;
        case '\t': st = cr_buf_puts(out, "\\t"); break;
        case '<':
        case '>':
        case '&':
            st = cr_buf_printf(out, "\\u00%c%c", hex[c >> 4], hex[c & 15]);
            break;
        default:
            if (c < 0x20)
                st = cr_buf_printf(out, "\\u00%c%c", hex[c >> 4], hex[c & 15]);
            else
                st = cr_buf_putc(out, (char)c);
        }
        i++;
    }
    if (!st)
        st = cr_buf_putc(out, '"');
    return st;
}

static cr_status_t dump(const json_t *v, cr_buf_t *out, int depth)
{
    if (depth > MAX_DEPTH)
        return CR_E_INVALID;
    char num[64];
    cr_status_t st = CR_OK;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        st = cr_buf_putc(out, '{');
        bool first = true;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) {
            if (!st && !first)
                st = cr_buf_putc(out, ',');
            first = false;
            if (!st)
                st = reg_gojson_string(key, strlen(key), out);
            if (!st)
                st = cr_buf_putc(out, ':');
            if (!st)
                st = dump(val, out, depth + 1);
            if (st)
                return st;
        }
        return cr_buf_putc(out, '}');
    }
    case JSON_ARRAY: {
        st = cr_buf_putc(out, '[');
        for (size_t i = 0; !st && i < json_array_size(v); i++) {
            if (i)
                st = cr_buf_putc(out, ',');
            if (!st)
                st = dump(json_array_get(v, i), out, depth + 1);
        }
        return st ? st : cr_buf_putc(out, ']');
    }
    case JSON_STRING:
        return reg_gojson_string(json_string_value(v), json_string_length(v),
                                 out);
    case JSON_INTEGER:
        return cr_buf_printf(out, "%" PRId64, (int64_t)json_integer_value(v));
    case JSON_REAL:
        reg_gojson_float(json_real_value(v), 64, REG_FLOAT_JSON, num,
                         sizeof num);
        return cr_buf_puts(out, num);
    case JSON_TRUE: return cr_buf_puts(out, "true");
    case JSON_FALSE: return cr_buf_puts(out, "false");
    case JSON_NULL: return cr_buf_puts(out, "null");
    }
    return CR_E_INVALID;
}

cr_status_t reg_gojson_dump(const json_t *v, cr_buf_t *out)
{
    if (!v)
        return cr_buf_puts(out, "null");
    size_t mark = out->len;
    cr_status_t st = dump(v, out, 0);
    if (st) {
        out->len = mark;
        if (out->data)
            out->data[mark] = '\0';
    }
    return st;
}

cr_status_t reg_gojson_dump_line(const json_t *v, cr_buf_t *out)
{
    cr_status_t st = reg_gojson_dump(v, out);
    return st ? st : cr_buf_putc(out, '\n');
}

cr_status_t reg_go_quote(const char *s, size_t n, cr_buf_t *out)
{
    const unsigned char *p = (const unsigned char *)s;
    cr_status_t st = cr_buf_putc(out, '"');
    size_t i = 0;
    while (!st && i < n) {
        unsigned char c = p[i];
        if (c >= 0x80) {
            uint32_t cp;
            size_t l = utf8_len(p + i, n - i, &cp);
            if (l == 0) {
                st = cr_buf_printf(out, "\\x%02x", c);
                i++;
            } else {
                st = cr_buf_append(out, p + i, l);
                i += l;
            }
            continue;
        }
        switch (c) {
        case '"': st = cr_buf_puts(out, "\\\""); break;
        case '\\': st = cr_buf_puts(out, "\\\\"); break;
        case '\a': st = cr_buf_puts(out, "\\a"); break;
        case '\b': st = cr_buf_puts(out, "\\b"); break;
        case '\f': st = cr_buf_puts(out, "\\f"); break;
        case '\n': st = cr_buf_puts(out, "\\n"); break;
        case '\r': st = cr_buf_puts(out, "\\r"); break;
        case '\t': st = cr_buf_puts(out, "\\t"); break;
        case '\v': st = cr_buf_puts(out, "\\v"); break;
        default:
            if (c < 0x20 || c == 0x7f)
                st = cr_buf_printf(out, "\\x%02x", c);
            else
                st = cr_buf_putc(out, (char)c);
        }
        i++;
    }
    return st ? st : cr_buf_putc(out, '"');
}

static cr_status_t go_value(const json_t *v, bool sharp, cr_buf_t *out,
                            int depth)
{
    if (depth > MAX_DEPTH)
        return CR_E_INVALID;
    char num[64];
    cr_status_t st = CR_OK;
    switch (json_typeof(v)) {
    case JSON_STRING:
        if (sharp)
            return reg_go_quote(json_string_value(v), json_string_length(v),
                                out);
        return cr_buf_append(out, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        reg_gojson_float((double)json_integer_value(v), 64, REG_FLOAT_FMT, num,
                         sizeof num);
        return cr_buf_puts(out, num);
    case JSON_REAL:
        reg_gojson_float(json_real_value(v), 64, REG_FLOAT_FMT, num,
                         sizeof num);
        return cr_buf_puts(out, num);
    case JSON_TRUE: return cr_buf_puts(out, "true");
    case JSON_FALSE: return cr_buf_puts(out, "false");
    case JSON_NULL: return cr_buf_puts(out, "<nil>");
    case JSON_ARRAY:
        st = cr_buf_puts(out, sharp ? "[]interface {}{" : "[");
        for (size_t i = 0; !st && i < json_array_size(v); i++) {
            if (i)
                st = cr_buf_puts(out, sharp ? ", " : " ");
            if (!st)
                st = go_value(json_array_get(v, i), sharp, out, depth + 1);
        }
        return st ? st : cr_buf_putc(out, sharp ? '}' : ']');
    case JSON_OBJECT: {
        st = cr_buf_puts(out, sharp ? "map[string]interface {}{" : "map[");
        bool first = true;
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) {
            if (!st && !first)
                st = cr_buf_puts(out, sharp ? ", " : " ");
            first = false;
            if (!st)
                st = sharp ? reg_go_quote(key, strlen(key), out)
                           : cr_buf_puts(out, key);
            if (!st)
                st = cr_buf_putc(out, ':');
            if (!st)
                st = go_value(val, sharp, out, depth + 1);
        }
        return st ? st : cr_buf_putc(out, sharp ? '}' : ']');
    }
    }
    return CR_E_INVALID;
}

cr_status_t reg_go_value(const json_t *v, bool sharp, cr_buf_t *out)
{
    return go_value(v, sharp, out, 0);
}

void reg_go_time(struct timespec ts, char *buf, size_t cap)
{
    struct tm tm;
    time_t t = ts.tv_sec;
    if (!localtime_r(&t, &tm)) {
        snprintf(buf, cap, "1970-01-01T00:00:00Z");
        return;
    }
    char frac[16] = "";
    if (ts.tv_nsec > 0 && ts.tv_nsec < 1000000000L) {
        snprintf(frac, sizeof frac, ".%09ld", ts.tv_nsec);
        size_t n = strlen(frac);
        while (n > 1 && frac[n - 1] == '0')
            frac[--n] = '\0';
    }
    char zone[40];
    long off = tm.tm_gmtoff;
    if (off == 0) {
        snprintf(zone, sizeof zone, "Z");
    } else {
        char sign = off < 0 ? '-' : '+';
        long a = off < 0 ? -off : off;
        snprintf(zone, sizeof zone, "%c%02ld:%02ld", sign, a / 3600,
                 (a / 60) % 60);
    }
    snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d%s%s", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac,
             zone);
}
