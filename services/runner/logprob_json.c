/* logprob_json.c: logprobs entries as JSON (see logprob_json.h). */
#include "lib/prelude.h"
#include "services/runner/logprob_json.h"

#include <float.h>
#include <math.h>

bool rn_utf8_valid(const char *p, size_t n)
{
    const unsigned char *s = (const unsigned char *)p;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t len;
        unsigned cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (i + len > n)
            return false;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += len;
    }
    return true;
}

/* A JSON string of valid UTF-8, escaped as jansson escapes by default:
 * quote, backslash and the C escapes by name, other controls as \u00XX,
 * everything else (non-ASCII included) as is. */
static cr_status_t put_string(cr_buf_t *b, const char *s, size_t n)
{
    cr_status_t st = cr_buf_putc(b, '"');
    for (size_t i = 0; !st && i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': st = cr_buf_puts(b, "\\\""); break;
        case '\\': st = cr_buf_puts(b, "\\\\"); break;
        case '\b': st = cr_buf_puts(b, "\\b"); break;
        case '\f': st = cr_buf_puts(b, "\\f"); break;
        case '\n': st = cr_buf_puts(b, "\\n"); break;
        case '\r': st = cr_buf_puts(b, "\\r"); break;
        case '\t': st = cr_buf_puts(b, "\\t"); break;
        default:
            st = c < 0x20 ? cr_buf_printf(b, "\\u%04X", c) : cr_buf_putc(b, (char)c);
        }
    }
    return st ? st : cr_buf_putc(b, '"');
}

/* A number as jansson writes a real: %.17g, with ".0" when it would read
 * as an integer, and the exponent without '+' or leading zeros ("1e-5",
 * "1e38"). A non-finite log-prob (never from a finite logit) has no JSON
 * form: the lowest float stands in. */
static cr_status_t put_real(cr_buf_t *b, double v)
{
    if (!isfinite(v))
        v = v > 0 ? FLT_MAX : -FLT_MAX;
    char num[48];
    int n = snprintf(num, sizeof num, "%.17g", v);
    if (n > 0 && !strchr(num, '.') && !strchr(num, 'e'))
        snprintf(num + n, sizeof num - (size_t)n, ".0");
    char *e = strchr(num, 'e');
    if (e) {
        char *start = e + 1, *end = e + 2;
        if (*start == '-')
            start++;
        while (*end == '0')
            end++;
        memmove(start, end, strlen(end) + 1);
    }
    return cr_buf_puts(b, num);
}

static cr_status_t put_piece(cr_buf_t *b, const rn_tokenizer_t *tok,
                             int32_t id, float lp)
{
    char piece[1024];
    size_t n = 0;
    if (rn_token_piece(tok, id, 0, piece, sizeof piece, &n, NULL))
        n = 0;
    cr_status_t st = cr_buf_puts(b, "{\"token\":");
    st = st ? st : put_string(b, piece, rn_utf8_valid(piece, n) ? n : 0);
    st = st ? st : cr_buf_puts(b, ",\"logprob\":");
    st = st ? st : put_real(b, (double)lp);
    st = st ? st : cr_buf_puts(b, ",\"bytes\":[");
    for (size_t i = 0; !st && i < n; i++)
        st = cr_buf_printf(b, i ? ",%u" : "%u", (unsigned)(unsigned char)piece[i]);
    return st ? st : cr_buf_putc(b, ']');
}

cr_status_t rn_logprob_json(cr_buf_t *out, const rn_tokenizer_t *tok,
                            int32_t token, float lp, const rn_logprob_t *top,
                            size_t n_top)
{
    cr_status_t st = put_piece(out, tok, token, lp);
    st = st ? st : cr_buf_puts(out, ",\"top_logprobs\":[");
    for (size_t i = 0; !st && i < n_top; i++) {
        if (i)
            st = cr_buf_putc(out, ',');
        st = st ? st : put_piece(out, tok, top[i].token, top[i].logprob);
        st = st ? st : cr_buf_putc(out, '}');
    }
    return st ? st : cr_buf_puts(out, "]}");
}
