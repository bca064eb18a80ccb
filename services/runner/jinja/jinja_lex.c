/* jinja_lex.c: template source -> tokens.
 *
 * Owns Jinja2's lexical rules with Hugging Face's settings: text runs
 * between {{ }}, {% %} and {# #} tags; `{%-`/`-%}` (and the same on the
 * other tags) strip all whitespace on that side; trim_blocks drops the
 * newline right after a block or comment tag; lstrip_blocks drops the
 * spaces and tabs from a line's start up to a block or comment tag
 * (`{%+` keeps them); `{% raw %}` bodies are text. Newlines are normalized
 * to "\n" and one trailing newline of the template is dropped. Inside tags
 * it yields names, Python string and number literals and operators; a `}`
 * closes a tag only outside brackets. It does not know statements: that is
 * the parser's. */
#include "services/runner/jinja/jinja_impl.h"

#include "lib/gotext.h"

#include <ctype.h>

typedef struct lexer {
    jj_arena_t *arena;
    const char *s;
    size_t n, pos;
    int line;
    jj_tok_t *v;
    size_t count, cap;
} lexer_t;

_Noreturn static void lex_fail(lexer_t *lx, const char *what)
{
    jj_throw(lx->arena->jump, CR_E_INVALID, "TemplateSyntaxError: %s (line %d)", what,
             lx->line);
}

static jj_tok_t *push(lexer_t *lx, jj_tok_kind_t kind, const char *text, size_t len)
{
    if (lx->count == lx->cap) {
        size_t cap = lx->cap ? lx->cap * 2 : 256;
        jj_tok_t *nv = jj_alloc_array(lx->arena, cap, sizeof *nv);
        if (lx->count)
            memcpy(nv, lx->v, lx->count * sizeof *nv);
        lx->v = nv;
        lx->cap = cap;
    }
    jj_tok_t *t = &lx->v[lx->count++];
    memset(t, 0, sizeof *t);
    t->kind = kind;
    t->line = lx->line;
    t->text = text;
    t->len = len;
    return t;
}

static void count_lines(lexer_t *lx, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] == '\n')
            lx->line++;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* Decodes a Python string literal's body (escapes as Python's
 * unicode-escape; an unknown escape stays as written). */
static void lex_string(lexer_t *lx)
{
    char quote = lx->s[lx->pos];
    size_t start = ++lx->pos;
    size_t end = start;
    while (end < lx->n && lx->s[end] != quote) {
        if (lx->s[end] == '\\' && end + 1 < lx->n)
            end++;
        end++;
    }
    if (end >= lx->n)
        lex_fail(lx, "unexpected end of string");
    char *out = jj_alloc(lx->arena, end - start + 1);
    size_t o = 0;
    for (size_t i = start; i < end; i++) {
        char c = lx->s[i];
        if (c != '\\') {
            out[o++] = c;
            continue;
        }
        char e = lx->s[++i];
        int hex_digits = 0;
        switch (e) {
        case 'n': out[o++] = '\n'; break;
        case 't': out[o++] = '\t'; break;
        case 'r': out[o++] = '\r'; break;
        case '\\': out[o++] = '\\'; break;
        case '\'': out[o++] = '\''; break;
        case '"': out[o++] = '"'; break;
        case 'a': out[o++] = '\a'; break;
        case 'b': out[o++] = '\b'; break;
        case 'f': out[o++] = '\f'; break;
        case 'v': out[o++] = '\v'; break;
        case '\n': break; /* line continuation */
        case 'x': hex_digits = 2; break;
        case 'u': hex_digits = 4; break;
        case 'U': hex_digits = 8; break;
        default:
            if (e >= '0' && e <= '7') {
                uint32_t cp = 0;
                int k = 0;
                for (; k < 3 && i < end && lx->s[i] >= '0' && lx->s[i] <= '7'; k++, i++)
                    cp = cp * 8 + (uint32_t)(lx->s[i] - '0');
                i--;
                o += cr_utf8_encode(cp, out + o);
            } else {
                out[o++] = '\\';
                out[o++] = e;
            }
        }
        if (hex_digits) {
            uint32_t cp = 0;
            for (int k = 0; k < hex_digits; k++) {
                char h = i + 1 < end ? lx->s[i + 1] : '\0';
                if (!isxdigit((unsigned char)h))
                    lex_fail(lx, "truncated \\x, \\u or \\U escape in a string");
                cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0'
                                                                   : (tolower(h) - 'a' + 10));
                i++;
            }
            o += cr_utf8_encode(cp, out + o);
        }
    }
    out[o] = '\0';
    count_lines(lx, lx->s + start, end - start);
    jj_tok_t *t = push(lx, JJ_T_STRING, out, o);
    CR_UNUSED(t);
    lx->pos = end + 1;
}

static void lex_number(lexer_t *lx)
{
    size_t i = lx->pos;
    char buf[64];
    size_t b = 0;
    bool is_float = false;
    while (i < lx->n && (isdigit((unsigned char)lx->s[i]) || lx->s[i] == '_')) {
        if (lx->s[i] != '_' && b < sizeof buf - 1)
            buf[b++] = lx->s[i];
        i++;
    }
    /* "1.5" is a float; "x.0" (an index after a dot) never reaches here
     * as a float because the dot before it was an operator. */
    bool after_dot = lx->count && lx->v[lx->count - 1].kind == JJ_T_OP &&
                     lx->v[lx->count - 1].len == 1 && lx->v[lx->count - 1].text[0] == '.';
    if (!after_dot && i + 1 < lx->n && lx->s[i] == '.' && isdigit((unsigned char)lx->s[i + 1])) {
        is_float = true;
        buf[b++] = lx->s[i++];
        while (i < lx->n && (isdigit((unsigned char)lx->s[i]) || lx->s[i] == '_')) {
            if (lx->s[i] != '_' && b < sizeof buf - 1)
                buf[b++] = lx->s[i];
            i++;
        }
    }
    if (!after_dot && i < lx->n && (lx->s[i] == 'e' || lx->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < lx->n && (lx->s[j] == '+' || lx->s[j] == '-'))
            j++;
        if (j < lx->n && isdigit((unsigned char)lx->s[j])) {
            is_float = true;
            while (i < j && b < sizeof buf - 1)
                buf[b++] = lx->s[i++];
            while (i < lx->n && isdigit((unsigned char)lx->s[i])) {
                if (b < sizeof buf - 1)
                    buf[b++] = lx->s[i];
                i++;
            }
        }
    }
    if (b >= sizeof buf - 1)
        lex_fail(lx, "number literal too long");
    buf[b] = '\0';
    jj_tok_t *t = push(lx, is_float ? JJ_T_FLOAT : JJ_T_INT, lx->s + lx->pos, i - lx->pos);
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno)
            lex_fail(lx, "integer literal out of range");
        t->i = v;
    }
    lx->pos = i;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", "<=", ">="};
static const char OPS1[] = "+-*/%~<>=()[]{},.:|";

/* Tokens of one tag up to its end marker ("}}" or "%}"). Returns the
 * whitespace control at the end: '-', '+' or 0. */
static char lex_tag(lexer_t *lx, char close)
{
    int depth = 0;
    for (;;) {
        while (lx->pos < lx->n && is_space(lx->s[lx->pos])) {
            if (lx->s[lx->pos] == '\n')
                lx->line++;
            lx->pos++;
        }
        if (lx->pos >= lx->n)
            lex_fail(lx, close == '}' ? "unexpected end of template, expected '}}'"
                                      : "unexpected end of template, expected '%}'");
        const char *p = lx->s + lx->pos;
        size_t left = lx->n - lx->pos;
        if (depth == 0) {
            if (left >= 2 && p[0] == close && p[1] == '}') {
                lx->pos += 2;
                return 0;
            }
            if (left >= 3 && (p[0] == '-' || p[0] == '+') && p[1] == close && p[2] == '}') {
                lx->pos += 3;
                return p[0];
            }
        }
        unsigned char c = (unsigned char)p[0];
        if (isalpha(c) || c == '_') {
            size_t i = 1;
            while (i < left && (isalnum((unsigned char)p[i]) || p[i] == '_'))
                i++;
            push(lx, JJ_T_NAME, p, i);
            lx->pos += i;
        } else if (isdigit(c)) {
            lex_number(lx);
        } else if (c == '\'' || c == '"') {
            lex_string(lx);
        } else {
            size_t len = 0;
            for (size_t k = 0; k < CR_ARRAY_LEN(OPS2); k++)
                if (left >= 2 && p[0] == OPS2[k][0] && p[1] == OPS2[k][1])
                    len = 2;
            if (!len && strchr(OPS1, (char)c) && c)
                len = 1;
            if (!len) {
                char what[48];
                snprintf(what, sizeof what, "unexpected char '%c'", c >= 32 && c < 127 ? c : '?');
                lex_fail(lx, what);
            }
            if (len == 1 && (c == '(' || c == '[' || c == '{'))
                depth++;
            if (len == 1 && (c == ')' || c == ']' || c == '}')) {
                if (depth == 0)
                    lex_fail(lx, "unexpected closing bracket");
                depth--;
            }
            push(lx, JJ_T_OP, p, len);
            lx->pos += len;
        }
    }
}

/* If the block tag at `pos` (just after "{%") is `raw`, returns the
 * position just after its "%}", else 0. */
static size_t raw_tag_end(lexer_t *lx, size_t pos, const char *word)
{
    size_t i = pos;
    if (i < lx->n && (lx->s[i] == '-' || lx->s[i] == '+'))
        i++;
    while (i < lx->n && is_space(lx->s[i]))
        i++;
    size_t wl = strlen(word);
    if (lx->n - i < wl || memcmp(lx->s + i, word, wl) != 0)
        return 0;
    i += wl;
    while (i < lx->n && is_space(lx->s[i]))
        i++;
    if (i < lx->n && (lx->s[i] == '-' || lx->s[i] == '+'))
        i++;
    if (lx->n - i < 2 || lx->s[i] != '%' || lx->s[i + 1] != '}')
        return 0;
    return i + 2;
}

/* Strips the end of the last text token as a tag's left side asks. */
static void strip_before(lexer_t *lx, char mark, char kind, bool line_starting, size_t text_tok)
{
    if (text_tok == SIZE_MAX)
        return;
    jj_tok_t *t = &lx->v[text_tok];
    if (mark == '-') {
        while (t->len && is_space(t->text[t->len - 1]))
            t->len--;
    } else if (mark != '+' && kind != '{') {
        /* lstrip_blocks: only spaces from the line's start to the tag. */
        size_t l = t->len;
        while (l && t->text[l - 1] != '\n')
            l--;
        if (l == 0 && !line_starting)
            return;
        for (size_t i = l; i < t->len; i++)
            if (!is_space(t->text[i]))
                return;
        t->len = l;
    }
}

void jj_lex(jj_arena_t *arena, const char *src, size_t len, jj_toks_t *out)
{
    /* Normalize newlines first, as Jinja2 does for text and strings. */
    char *s = jj_alloc(arena, len + 1);
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n')
        n--; /* keep_trailing_newline=False */
    s[n] = '\0';

    lexer_t lx = {.arena = arena, .s = s, .n = n, .line = 1};
    bool line_starting = true;
    char strip_next = 0; /* '-': strip all leading whitespace of the next text */
    bool trim_newline = false;
    while (lx.pos < lx.n) {
        /* Text up to the next tag start. */
        size_t start = lx.pos, i = start;
        while (i + 1 < lx.n && !(s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')))
            i++;
        if (i + 1 >= lx.n)
            i = lx.n;
        size_t text_start = start;
        if (strip_next == '-') {
            while (text_start < i && is_space(s[text_start]))
                text_start++;
        } else if (trim_newline && text_start < i && s[text_start] == '\n') {
            text_start++;
        }
        size_t text_tok = SIZE_MAX;
        if (i > text_start) {
            push(&lx, JJ_T_TEXT, s + text_start, i - text_start);
            text_tok = lx.count - 1;
        }
        bool text_line_starting = line_starting || (text_start > start && s[text_start - 1] == '\n');
        count_lines(&lx, s + start, i - start);
        lx.pos = i;
        if (i >= lx.n)
            break;
        char kind = s[i + 1];
        char mark = i + 2 < lx.n && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
        strip_before(&lx, mark, kind, text_line_starting, text_tok);
        if (text_tok != SIZE_MAX && lx.v[text_tok].len == 0)
            lx.count--;
        lx.pos = i + 2 + (mark ? 1 : 0);
        char end_mark;
        if (kind == '#') {
            size_t j = lx.pos;
            while (j + 1 < lx.n && !(s[j] == '#' && s[j + 1] == '}'))
                j++;
            if (j + 1 >= lx.n)
                lex_fail(&lx, "missing end of comment tag");
            end_mark = j > lx.pos && (s[j - 1] == '-' || s[j - 1] == '+') ? s[j - 1] : 0;
            count_lines(&lx, s + lx.pos, j - lx.pos);
            lx.pos = j + 2;
            trim_newline = end_mark != '+';
        } else if (kind == '%' && raw_tag_end(&lx, i + 2, "raw")) {
            size_t body = raw_tag_end(&lx, i + 2, "raw");
            size_t j = body;
            size_t after = 0;
            for (; j + 1 < lx.n; j++)
                if (s[j] == '{' && s[j + 1] == '%' && (after = raw_tag_end(&lx, j + 2, "endraw")))
                    break;
            if (!after)
                lex_fail(&lx, "missing {% endraw %}");
            size_t b = body, e = j;
            if (s[body - 3] == '-')
                while (b < e && is_space(s[b]))
                    b++;
            if (s[j + 2] == '-')
                while (e > b && is_space(s[e - 1]))
                    e--;
            if (e > b)
                push(&lx, JJ_T_TEXT, s + b, e - b);
            count_lines(&lx, s + lx.pos, after - lx.pos);
            end_mark = s[after - 3] == '-' ? '-' : s[after - 3] == '+' ? '+' : 0;
            lx.pos = after;
            trim_newline = end_mark != '+';
        } else {
            push(&lx, kind == '{' ? JJ_T_VAR_BEGIN : JJ_T_BLOCK_BEGIN, s + i, 2);
            end_mark = lex_tag(&lx, kind == '{' ? '}' : '%');
            push(&lx, kind == '{' ? JJ_T_VAR_END : JJ_T_BLOCK_END, s + lx.pos - 2, 2);
            trim_newline = kind == '%' && end_mark != '+';
        }
        strip_next = end_mark == '-' ? '-' : 0;
        /* What the tag consumed after it decides whether the next text
         * starts a line (for lstrip_blocks). */
        line_starting = false;
        if (strip_next == '-') {
            size_t j = lx.pos;
            while (j < lx.n && is_space(s[j]))
                j++;
            line_starting = j > lx.pos && s[j - 1] == '\n';
        } else if (trim_newline && lx.pos < lx.n && s[lx.pos] == '\n') {
            line_starting = true;
        }
    }
    push(&lx, JJ_T_EOF, s + lx.n, 0);
    out->v = lx.v;
    out->n = lx.count;
}
