/* template_lit.c: Go's literal syntax inside template actions: quoted and
 * raw strings' escapes, character constants, and numbers (ints with base
 * prefixes and underscores, floats), with Go's error wording. Pure
 * functions over a token's text; the parser (template_parse.c) owns the
 * tokens and the error positions. Complex numbers are not supported. */
#include "lib/prelude.h"
#include "services/runner/template/template_impl.h"

#include "lib/gotext.h"

#include <ctype.h>
#include <math.h>

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static size_t utf8_put(uint32_t cp, char *o)
{
    return cr_utf8_encode(cp, o);
}

/* Go's strconv.Unquote for "..." and '...' bodies: see template_impl.h. */
long rn_tmpl_lit_unquote(const char *s, size_t len, char quote, char *out)
{
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        char c = s[i++];
        if (c == quote)
            return -1;
        if (c != '\\') {
            out[k++] = c;
            continue;
        }
        if (i >= len)
            return -1;
        c = s[i++];
        int nd = 0;
        switch (c) {
        case 'a': out[k++] = '\a'; break;
        case 'b': out[k++] = '\b'; break;
        case 'f': out[k++] = '\f'; break;
        case 'n': out[k++] = '\n'; break;
        case 'r': out[k++] = '\r'; break;
        case 't': out[k++] = '\t'; break;
        case 'v': out[k++] = '\v'; break;
        case '\\': out[k++] = '\\'; break;
        case '\'':
        case '"':
            if (c != quote)
                    return -1;
            out[k++] = c;
            break;
        case 'x': nd = 2; goto hex;
        case 'u': nd = 4; goto hex;
        case 'U': nd = 8; goto hex;
        hex: {
            if (i + (size_t)nd > len)
                    return -1;
            uint32_t v = 0;
            for (int j = 0; j < nd; j++) {
                int h = hexval((unsigned char)s[i + (size_t)j]);
                if (h < 0)
                            return -1;
                v = v * 16 + (uint32_t)h;
            }
            i += (size_t)nd;
            if (c == 'x') {
                out[k++] = (char)v;
            } else {
                if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
                            return -1;
                k += utf8_put(v, out + k);
            }
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                if (i + 2 > len)
                            return -1;
                int v = c - '0';
                for (int j = 0; j < 2; j++) {
                    char d = s[i++];
                    if (d < '0' || d > '7')
                                    return -1;
                    v = v * 8 + (d - '0');
                }
                if (v > 255)
                            return -1;
                out[k++] = (char)v;
                break;
            }
            return -1;
        }
    }
    return (long)k;
}

/* Decodes exactly one UTF-8 character filling s[0..n); -1 otherwise. */
static long utf8_one(const unsigned char *s, size_t n)
{
    if (n == 1)
        return s[0];
    size_t want = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (want != n)
        return -1;
    long cp = s[0] & (0x7F >> want);
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return -1;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    return cp;
}

/* Go's rule for underscores in number literals: only between digits (or
 * right after a base prefix). */
static bool underscores_ok(const char *s, size_t n)
{
    size_t i = 0;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        i++;
    bool hex = false;
    char prev = '^'; /* start */
    if (i + 1 < n && s[i] == '0' && s[i + 1] &&
        strchr("xXbBoO", s[i + 1])) {
        hex = s[i + 1] == 'x' || s[i + 1] == 'X';
        i += 2;
        prev = '0'; /* a prefix counts as a digit */
    }
    for (; i < n; i++) {
        char c = s[i];
        bool digit = isdigit((unsigned char)c) || (hex && isxdigit((unsigned char)c));
        if (c == '_') {
            if (prev != '0')
                return false;
            prev = '_';
        } else {
            if (prev == '_' && !digit)
                return false;
            prev = digit ? '0' : '.';
        }
    }
    return prev != '_';
}

/* Parses a number token (or a character constant) the way Go's parser
 * does for the cases templates meet: ints (with 0x/0o/0b/0 prefixes and
 * underscores), floats, chars. Complex numbers are refused. */
bool rn_tmpl_lit_number(const char *s, size_t len, bool is_char, tnode_t *n, char *msg, size_t cap)
{
    if (is_char) {
        char buf[16];
        long k = len - 2 < sizeof buf ? rn_tmpl_lit_unquote(s + 1, len - 2, '\'', buf) : -1;
        if (k <= 0) {
            snprintf(msg, cap, "invalid syntax");
            return false;
        }
        long cp = utf8_one((const unsigned char *)buf, (size_t)k);
        if (cp < 0) {
            snprintf(msg, cap, "malformed character constant: %.*s", (int)len, s);
            return false;
        }
        n->u.num.is_int = true;
        n->u.num.i = cp;
        n->u.num.f = (double)cp;
        return true;
    }
    if (!underscores_ok(s, len)) {
        snprintf(msg, cap, "illegal number syntax: \"%.*s\"", (int)len, s);
        return false;
    }
    /* Copy without underscores. */
    char buf[128];
    size_t k = 0;
    if (len >= sizeof buf) {
        snprintf(msg, cap, "illegal number syntax: \"%.*s\"", (int)len, s);
        return false;
    }
    for (size_t i = 0; i < len; i++)
        if (s[i] != '_')
            buf[k++] = s[i];
    buf[k] = '\0';
    if (k == 0 || buf[k - 1] == 'i') {
        snprintf(msg, cap, "illegal number syntax: \"%.*s\"", (int)len, s);
        return false;
    }
    const char *b = buf;
    bool neg = false;
    if (*b == '+' || *b == '-') {
        neg = *b == '-';
        b++;
    }
    int base = 10;
    const char *digits = b;
    if (b[0] == '0' && (b[1] == 'x' || b[1] == 'X'))
        base = 16, digits = b + 2;
    else if (b[0] == '0' && (b[1] == 'o' || b[1] == 'O'))
        base = 8, digits = b + 2;
    else if (b[0] == '0' && (b[1] == 'b' || b[1] == 'B'))
        base = 2, digits = b + 2;
    else if (b[0] == '0' && b[1])
        base = 8, digits = b + 1;
    bool is_int = *digits && isalnum((unsigned char)*digits) &&
                  !strpbrk(digits, base == 16 ? ".pP" : ".eEpP");
    if (is_int) {
        errno = 0;
        char *end = NULL;
        unsigned long long u = strtoull(digits, &end, base);
        if (*end == '\0' && errno == 0) {
            if (u > (unsigned long long)INT64_MAX + (neg ? 1u : 0u)) {
                snprintf(msg, cap, "%.*s overflows int", (int)len, s);
                return false;
            }
            n->u.num.is_int = true;
            n->u.num.i = neg ? (int64_t)(0 - u) : (int64_t)u;
            n->u.num.f = (double)n->u.num.i;
            return true;
        }
        if (errno == ERANGE) {
            snprintf(msg, cap, "integer overflow: \"%.*s\"", (int)len, s);
            return false;
        }
        /* An integer-looking number that is no valid integer: Go reports
         * the float it would parse as an overflow ("08"). */
        snprintf(msg, cap, "integer overflow: \"%.*s\"", (int)len, s);
        return false;
    }
    char *end = NULL;
    double f = strtod(buf, &end);
    if (end == buf || *end != '\0' || !isfinite(f)) {
        snprintf(msg, cap, "illegal number syntax: \"%.*s\"", (int)len, s);
        return false;
    }
    n->u.num.is_int = false;
    n->u.num.f = f;
    return true;
}

