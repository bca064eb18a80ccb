/* gotext.c: Go's text forms (see gotext.h). */
#include "lib/prelude.h"
#include "lib/gotext.h"

#include <math.h>

/* ---- UTF-8 ---- */

size_t cr_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return len;
}

size_t cr_utf8_encode(uint32_t cp, char out[4])
{
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        cp = 0xFFFD;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- floats ---- */

int cr_float_digits(double a, int bits, char *digits, int *dp)
{
    char tmp[40];
    int maxp = bits == 32 ? 9 : 17;
    for (int p = 1; p <= maxp; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, a);
        bool same = bits == 32 ? strtof(tmp, NULL) == (float)a
                               : strtod(tmp, NULL) == a;
        if (same)
            break;
    }
    /* tmp is d[.ddd]e(+|-)XX */
    int nd = 0;
    const char *q = tmp;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9' && nd < 31)
            digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    *dp = (*q == 'e' ? atoi(q + 1) : 0) + 1;
    return nd;
}

typedef struct out {
    char *buf;
    size_t cap, len;
} out_t;

static void put(out_t *o, char c)
{
    if (o->len + 1 < o->cap)
        o->buf[o->len] = c;
    o->len++;
}

static void puts_(out_t *o, const char *s)
{
    while (*s)
        put(o, *s++);
}

/* d.ddde±X, the exponent zero-padded to min_exp digits. */
static void lay_exp(out_t *o, const char *d, int nd, int dp, int min_exp)
{
    put(o, d[0]);
    if (nd > 1) {
        put(o, '.');
        for (int i = 1; i < nd; i++)
            put(o, d[i]);
    }
    int e = dp - 1;
    char tmp[16];
    snprintf(tmp, sizeof tmp, "e%c%0*d", e < 0 ? '-' : '+', min_exp,
             e < 0 ? -e : e);
    puts_(o, tmp);
}

/* ddd.ddd with exactly the digits needed. */
static void lay_fixed(out_t *o, const char *d, int nd, int dp)
{
    if (dp <= 0) {
        puts_(o, "0.");
        for (int i = 0; i < -dp; i++)
            put(o, '0');
        for (int i = 0; i < nd; i++)
            put(o, d[i]);
        return;
    }
    for (int i = 0; i < dp; i++)
        put(o, i < nd ? d[i] : '0');
    if (nd > dp) {
        put(o, '.');
        for (int i = dp; i < nd; i++)
            put(o, d[i]);
    }
}

size_t cr_float_format(double v, int bits, cr_float_style_t style, char *buf,
                       size_t cap)
{
    out_t o = {buf, cap, 0};
    if (isnan(v) || isinf(v)) {
        puts_(&o, style == CR_FLOAT_JSON ? "null"
                  : isnan(v)             ? "NaN"
                  : v > 0                ? "+Inf"
                                         : "-Inf");
    } else if (v == 0) {
        puts_(&o, signbit(v) ? "-0" : "0");
    } else {
        double a = fabs(v);
        char d[32];
        int dp;
        int nd = cr_float_digits(a, bits, d, &dp);
        if (v < 0)
            put(&o, '-');
        bool expo;
        if (style == CR_FLOAT_JSON)
            expo = bits == 32 ? (float)a < 1e-6f || (float)a >= 1e21f
                              : a < 1e-6 || a >= 1e21;
        else
            expo = dp - 1 < -4 || dp - 1 >= 6;
        if (expo)
            lay_exp(&o, d, nd, dp, style == CR_FLOAT_JSON ? 1 : 2);
        else
            lay_fixed(&o, d, nd, dp);
    }
    if (cap)
        buf[o.len < cap ? o.len : cap - 1] = '\0';
    return o.len < cap ? o.len : (cap ? cap - 1 : 0);
}

/* ---- JSON strings ---- */

cr_status_t cr_json_quote(const char *s, size_t n, cr_buf_t *out)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    cr_status_t st = cr_buf_putc(out, '"');
    size_t start = 0, i = 0;
    while (!st && i < n) {
        unsigned char c = p[i];
        const char *esc = NULL;
        char ubuf[8];
        size_t adv = 1;
        if (c < 0x80) {
            switch (c) {
            case '"': esc = "\\\""; break;
            case '\\': esc = "\\\\"; break;
            case '\b': esc = "\\b"; break;
            case '\f': esc = "\\f"; break;
            case '\n': esc = "\\n"; break;
            case '\r': esc = "\\r"; break;
            case '\t': esc = "\\t"; break;
            default:
                if (c < 0x20 || c == '<' || c == '>' || c == '&') {
                    snprintf(ubuf, sizeof ubuf, "\\u00%c%c", hex[c >> 4],
                             hex[c & 15]);
                    esc = ubuf;
                }
            }
        } else {
            uint32_t cp = 0;
            adv = cr_utf8_decode(p + i, n - i, &cp);
            if (adv == 0) {
                esc = "\\ufffd";
                adv = 1;
            } else if (cp == 0x2028 || cp == 0x2029) {
                esc = cp == 0x2028 ? "\\u2028" : "\\u2029";
            }
        }
        if (esc) {
            st = cr_buf_append(out, s + start, i - start);
            if (!st)
                st = cr_buf_puts(out, esc);
            start = i + adv;
        }
        i += adv;
    }
    if (!st)
        st = cr_buf_append(out, s + start, n - start);
    if (!st)
        st = cr_buf_putc(out, '"');
    return st;
}
