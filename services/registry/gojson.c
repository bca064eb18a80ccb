/* gojson.c: Go-compatible JSON and fmt text (see gojson.h). */
#include "lib/prelude.h"
#include "services/registry/gojson.h"

#include "lib/gotext.h"

#include <math.h>

#define MAX_DEPTH 64

void reg_gojson_float(double v, int bits, reg_float_style_t style, char *buf,
                      size_t cap)
{
    cr_float_format(v, bits,
                    style == REG_FLOAT_JSON ? CR_FLOAT_JSON : CR_FLOAT_G, buf,
                    cap);
}

cr_status_t reg_gojson_string(const char *s, size_t n, cr_buf_t *out)
{
    return cr_json_quote(s, n, out);
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
            size_t l = cr_utf8_decode(p + i, n - i, &cp);
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
