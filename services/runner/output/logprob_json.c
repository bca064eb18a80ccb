/* logprob_json.c: logprobs entries as JSON (see logprob_json.h). */
#include "lib/prelude.h"
#include "services/runner/output/logprob_json.h"
#include "services/runner/text/unicode.h"

#include <float.h>
#include <math.h>

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
