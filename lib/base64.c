/* base64.c: see base64.h. */
#include "lib/prelude.h"
#include "lib/base64.h"

static int value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

bool cr_base64_valid(const char *s, size_t n, size_t *bad_offset)
{
    size_t q = 0;       /* position inside the current quantum */
    size_t q_start = 0; /* offset where the current quantum began */
    int pad = 0;
    bool ended = false; /* padding seen: nothing may follow */
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\r' || ch == '\n')
            continue;
        if (q == 0)
            q_start = i;
        /* after padding nothing; '=' only as a quantum's 3rd or 4th
         * character; letters only before any padding */
        if (ended || (ch == '=' ? q < 2 : value(ch) < 0 || pad > 0)) {
            *bad_offset = i;
            return false;
        }
        pad += ch == '=';
        if (++q == 4) {
            q = 0;
            ended = pad > 0;
        }
    }
    if (q) {
        *bad_offset = q_start;
        return false;
    }
    return true;
}

cr_status_t cr_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len,
                             cr_err_t *err)
{
    *out = NULL;
    *out_len = 0;
    size_t bad = 0;
    if (!cr_base64_valid(s, n, &bad))
        return cr_err_set(err, CR_E_INVALID, "illegal base64 data at input byte %zu", bad);
    uint8_t *buf = malloc(n / 4 * 3 + 3);
    if (!buf)
        return cr_err_set(err, CR_E_NOMEM, "out of memory decoding base64");
    size_t len = 0, q = 0;
    int pad = 0;
    uint32_t acc = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '\r' || ch == '\n')
            continue;
        pad += ch == '=';
        acc = acc << 6 | (uint32_t)(ch == '=' ? 0 : value(ch));
        if (++q == 4) {
            buf[len++] = (uint8_t)(acc >> 16);
            if (pad < 2)
                buf[len++] = (uint8_t)(acc >> 8);
            if (pad < 1)
                buf[len++] = (uint8_t)acc;
            q = 0;
            acc = 0;
        }
    }
    *out = buf;
    *out_len = len;
    return CR_OK;
}

char *cr_base64_encode(const uint8_t *p, size_t n)
{
    static const char al[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (n > (SIZE_MAX - 8) / 4 * 3)
        return NULL;
    char *s = malloc((n + 2) / 3 * 4 + 1), *o = s;
    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = al[v >> 18 & 63];
        *o++ = al[v >> 12 & 63];
        *o++ = i + 1 < n ? al[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? al[v & 63] : '=';
    }
    *o = '\0';
    return s;
}
