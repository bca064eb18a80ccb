/* template_parse.c: lexer and parser for the Go text/template syntax, into
 * the tree in template_impl.h; plus Ollama's touch-ups at parse time (the
 * appended {{ .Response }}, the identifier set behind Vars(), and the legacy
 * "cut" tree that ends where the response begins).
 *
 * The grammar, the error wording and the whitespace-trim rules follow Go's
 * text/template/parse. The template is untrusted: the source size, the tree
 * size (arena) and nesting depth are bounded, and every error is a status
 * naming the line. */
#include "lib/prelude.h"
#include "services/runner/template/template_impl.h"

#include <ctype.h>
#include <math.h>

#define ARENA_MAX_BYTES (64u << 20)
#define ARENA_CHUNK_BYTES (64u << 10)

/* ---- arena ---- */

struct arena_chunk {
    arena_chunk_t *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *rn_tmpl_arena_alloc(arena_t *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > ARENA_MAX_BYTES || a->used_bytes > ARENA_MAX_BYTES - n)
        return NULL;
    arena_chunk_t *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > ARENA_CHUNK_BYTES ? n : ARENA_CHUNK_BYTES;
        c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used_bytes += n;
    memset(p, 0, n);
    return p;
}

char *rn_tmpl_arena_strndup(arena_t *a, const char *s, size_t n)
{
    char *p = rn_tmpl_arena_alloc(a, n + 1);
    if (p && n)
        memcpy(p, s, n);
    return p;
}

static void arena_free(arena_t *a)
{
    arena_chunk_t *c = a->head;
    while (c) {
        arena_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

/* ---- tokens ---- */

typedef enum tok_type {
    T_EOF,
    T_ERROR, /* lexer error; message in parser */
    T_TEXT,
    T_LEFT,  /* left delimiter */
    T_RIGHT, /* right delimiter */
    T_SPACE,
    T_IDENT,
    T_FIELD,
    T_VAR,
    T_DOT,
    T_STRING,
    T_RAW,
    T_CHAR,
    T_NUMBER,
    T_BOOL,
    T_NIL,
    T_LPAREN,
    T_RPAREN,
    T_PIPE,
    T_DECLARE,
    T_ASSIGN,
    T_OTHER, /* any other printable ASCII character (',' among them) */
    /* keywords */
    T_KW_BLOCK,
    T_KW_BREAK,
    T_KW_CONTINUE,
    T_KW_DEFINE,
    T_KW_ELSE,
    T_KW_END,
    T_KW_IF,
    T_KW_RANGE,
    T_KW_TEMPLATE,
    T_KW_WITH,
} tok_type_t;

typedef struct tok {
    tok_type_t type;
    uint32_t pos; /* offset in source */
    uint32_t len;
} tok_t;

static const struct {
    const char *word;
    tok_type_t type;
} keywords[] = {
    {"block", T_KW_BLOCK}, {"break", T_KW_BREAK},   {"continue", T_KW_CONTINUE},
    {"define", T_KW_DEFINE}, {"else", T_KW_ELSE},   {"end", T_KW_END},
    {"if", T_KW_IF},       {"range", T_KW_RANGE},   {"template", T_KW_TEMPLATE},
    {"with", T_KW_WITH},   {"nil", T_NIL},          {"true", T_BOOL},
    {"false", T_BOOL},
};

/* What the parser is looking for, for error messages ("in command"). */
typedef struct parser {
    rn_tmpl_t *t;
    const char *src;
    size_t len;
    /* lexer */
    size_t pos;
    bool in_action;
    bool trim_left; /* the last right delimiter had a trim marker */
    int paren_depth;
    uint32_t action_pos; /* where the current action started */
    char lex_err[160];
    tok_t back[4]; /* pushed-back tokens, top last */
    int n_back;
    /* parser */
    const char **vars;
    size_t n_vars, cap_vars;
    int nesting;
    int range_depth;
    uint32_t bare_template_pos; /* 1 + offset of a {{template "x"}} without data */
    uint32_t err_pos;
    cr_err_t *err;
    cr_status_t st;
} parser_t;

static bool is_space(int c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_alnum(int c)
{
    /* Go accepts Unicode letters and digits; every non-ASCII byte is
     * taken as part of one here. */
    return c == '_' || isalnum(c) || c >= 0x80;
}

void rn_tmpl_line_col(const rn_tmpl_t *t, uint32_t pos, int *line, int *col)
{
    int ln = 1;
    size_t last_nl = 0;
    bool seen = false;
    for (size_t i = 0; i < pos && i < t->src_len; i++) {
        if (t->src[i] == '\n') {
            ln++;
            last_nl = i;
            seen = true;
        }
    }
    *line = ln;
    *col = (int)(seen ? pos - last_nl - 1 : pos);
}

/* Records the first parse error: "template: :LINE: msg". */
static void perr(parser_t *p, uint32_t pos, const char *fmt, ...) CR_PRINTF(3, 4);
static void perr(parser_t *p, uint32_t pos, const char *fmt, ...)
{
    if (p->st)
        return;
    char msg[CR_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    rn_tmpl_line_col(p->t, pos, &line, &col);
    p->st = CR_E_INVALID;
    p->err_pos = pos;
    cr_err_set(p->err, CR_E_INVALID, "template: :%d: %s", line, msg);
}

static void perr_nomem(parser_t *p)
{
    if (p->st)
        return;
    p->st = CR_E_NOMEM;
    cr_err_set(p->err, CR_E_NOMEM, "template: out of memory (or tree over %u bytes)",
               ARENA_MAX_BYTES);
}

static void *palloc(parser_t *p, size_t n)
{
    void *q = rn_tmpl_arena_alloc(&p->t->arena, n);
    if (!q)
        perr_nomem(p);
    return q;
}

/* ---- lexer ---- */

static bool at_right_delim(parser_t *p, size_t at, bool *trim)
{
    const char *s = p->src + at;
    size_t left = p->len - at;
    if (left >= 4 && is_space(s[0]) && s[1] == '-' && s[2] == '}' && s[3] == '}') {
        *trim = true;
        return true;
    }
    if (left >= 2 && s[0] == '}' && s[1] == '}') {
        *trim = false;
        return true;
    }
    return false;
}

static tok_t lex_error(parser_t *p, uint32_t pos, const char *fmt, ...) CR_PRINTF(3, 4);
static tok_t lex_error(parser_t *p, uint32_t pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->lex_err, sizeof p->lex_err, fmt, ap);
    va_end(ap);
    p->pos = p->len; /* stop lexing */
    return (tok_t){T_ERROR, pos, 0};
}

/* Whether the byte after an identifier, field or variable may follow it. */
static bool at_terminator(parser_t *p)
{
    if (p->pos >= p->len)
        return true;
    int c = (unsigned char)p->src[p->pos];
    bool trim;
    if (is_space(c) || c == '.' || c == ',' || c == '|' || c == ':' || c == ')' || c == '(')
        return true;
    return at_right_delim(p, p->pos, &trim);
}

static tok_t lex_text(parser_t *p)
{
    for (;;) {
        size_t start = p->pos;
        if (p->trim_left) {
            while (start < p->len && is_space(p->src[start]))
                start++;
            p->trim_left = false;
        }
        const char *open = NULL;
        if (start < p->len)
            open = memmem(p->src + start, p->len - start, "{{", 2);
        size_t end = open ? (size_t)(open - p->src) : p->len;
        size_t text_end = end;
        if (open && end + 3 < p->len && p->src[end + 2] == '-' && is_space(p->src[end + 3])) {
            while (text_end > start && is_space(p->src[text_end - 1]))
                text_end--;
        }
        p->pos = end;
        if (text_end > start)
            return (tok_t){T_TEXT, (uint32_t)start, (uint32_t)(text_end - start)};
        if (!open)
            return (tok_t){T_EOF, (uint32_t)p->len, 0};
        /* At a left delimiter: consume it and its trim marker. */
        size_t at = end;
        p->pos = end + 2;
        if (p->pos + 1 < p->len && p->src[p->pos] == '-' && is_space(p->src[p->pos + 1]))
            p->pos += 2;
        if (!(p->pos + 1 < p->len && p->src[p->pos] == '/' && p->src[p->pos + 1] == '*')) {
            p->in_action = true;
            p->paren_depth = 0;
            p->action_pos = (uint32_t)at;
            return (tok_t){T_LEFT, (uint32_t)at, 2};
        }
        /* A comment runs to its end and a right delimiter; it leaves no
         * node. */
        const char *close = memmem(p->src + p->pos + 2, p->len - p->pos - 2, "*/", 2);
        if (!close)
            return lex_error(p, (uint32_t)at, "unclosed comment");
        p->pos = (size_t)(close - p->src) + 2;
        bool trim;
        if (!at_right_delim(p, p->pos, &trim))
            return lex_error(p, (uint32_t)at, "comment ends before closing delimiter");
        p->pos += trim ? 4 : 2;
        p->trim_left = trim;
    }
}

static tok_t lex_quote(parser_t *p, size_t start)
{
    for (;;) {
        if (p->pos >= p->len || p->src[p->pos] == '\n')
            return lex_error(p, (uint32_t)start, "unterminated quoted string");
        char c = p->src[p->pos++];
        if (c == '\\') {
            if (p->pos >= p->len || p->src[p->pos] == '\n')
                return lex_error(p, (uint32_t)start, "unterminated quoted string");
            p->pos++;
        } else if (c == '"') {
            return (tok_t){T_STRING, (uint32_t)start, (uint32_t)(p->pos - start)};
        }
    }
}

static tok_t lex_char(parser_t *p, size_t start)
{
    for (;;) {
        if (p->pos >= p->len || p->src[p->pos] == '\n')
            return lex_error(p, (uint32_t)start, "unterminated character constant");
        char c = p->src[p->pos++];
        if (c == '\\') {
            if (p->pos >= p->len || p->src[p->pos] == '\n')
                return lex_error(p, (uint32_t)start, "unterminated character constant");
            p->pos++;
        } else if (c == '\'') {
            return (tok_t){T_CHAR, (uint32_t)start, (uint32_t)(p->pos - start)};
        }
    }
}

static void accept_run(parser_t *p, const char *set)
{
    while (p->pos < p->len && strchr(set, p->src[p->pos]) && p->src[p->pos])
        p->pos++;
}

static bool accept(parser_t *p, const char *set)
{
    if (p->pos < p->len && p->src[p->pos] && strchr(set, p->src[p->pos])) {
        p->pos++;
        return true;
    }
    return false;
}

static tok_t lex_number(parser_t *p, size_t start)
{
    p->pos = start;
    accept(p, "+-");
    const char *digits = "0123456789_";
    if (accept(p, "0")) {
        if (accept(p, "xX"))
            digits = "0123456789abcdefABCDEF_";
        else if (accept(p, "oO"))
            digits = "01234567_";
        else if (accept(p, "bB"))
            digits = "01_";
    }
    accept_run(p, digits);
    if (accept(p, "."))
        accept_run(p, digits);
    if (strlen(digits) == 11 && accept(p, "eE")) {
        accept(p, "+-");
        accept_run(p, "0123456789_");
    }
    if (strlen(digits) == 23 && accept(p, "pP")) {
        accept(p, "+-");
        accept_run(p, "0123456789_");
    }
    accept(p, "i");
    if (p->pos < p->len && is_alnum((unsigned char)p->src[p->pos])) {
        p->pos++;
        return lex_error(p, (uint32_t)start, "bad number syntax: \"%.*s\"",
                         (int)(p->pos - start), p->src + start);
    }
    return (tok_t){T_NUMBER, (uint32_t)start, (uint32_t)(p->pos - start)};
}

static tok_t lex_action(parser_t *p)
{
    bool trim;
    size_t start = p->pos;
    if (at_right_delim(p, p->pos, &trim)) {
        if (p->paren_depth > 0)
            return lex_error(p, (uint32_t)start, "unclosed left paren");
        p->pos += trim ? 4 : 2;
        p->trim_left = trim;
        p->in_action = false;
        return (tok_t){T_RIGHT, (uint32_t)start, trim ? 4u : 2u};
    }
    if (p->pos >= p->len)
        return lex_error(p, (uint32_t)start, "unclosed action");
    unsigned char c = (unsigned char)p->src[p->pos++];
    if (is_space(c)) {
        while (p->pos < p->len && is_space(p->src[p->pos]))
            p->pos++;
        /* Leave " -}}" for the right delimiter. */
        if (at_right_delim(p, p->pos - 1, &trim) && trim) {
            p->pos--;
            if (p->pos == start)
                return lex_action(p);
        }
        return (tok_t){T_SPACE, (uint32_t)start, (uint32_t)(p->pos - start)};
    }
    switch (c) {
    case '=':
        return (tok_t){T_ASSIGN, (uint32_t)start, 1};
    case ':':
        if (p->pos >= p->len || p->src[p->pos] != '=')
            return lex_error(p, (uint32_t)start, "expected :=");
        p->pos++;
        return (tok_t){T_DECLARE, (uint32_t)start, 2};
    case '|':
        return (tok_t){T_PIPE, (uint32_t)start, 1};
    case '"':
        return lex_quote(p, start);
    case '`': {
        const char *close = memchr(p->src + p->pos, '`', p->len - p->pos);
        if (!close)
            return lex_error(p, (uint32_t)start, "unterminated raw quoted string");
        p->pos = (size_t)(close - p->src) + 1;
        return (tok_t){T_RAW, (uint32_t)start, (uint32_t)(p->pos - start)};
    }
    case '$':
        while (p->pos < p->len && is_alnum((unsigned char)p->src[p->pos]))
            p->pos++;
        if (!at_terminator(p))
            return lex_error(p, (uint32_t)p->pos, "bad character U+%04X", (unsigned char)p->src[p->pos]);
        return (tok_t){T_VAR, (uint32_t)start, (uint32_t)(p->pos - start)};
    case '\'':
        return lex_char(p, start);
    case '(':
        if (++p->paren_depth > RN_TMPL_MAX_NESTING)
            return lex_error(p, (uint32_t)start, "parentheses nested deeper than %d",
                             RN_TMPL_MAX_NESTING);
        return (tok_t){T_LPAREN, (uint32_t)start, 1};
    case ')':
        /* A stray ')' is reported by the parser ("unexpected \")\" in
         * command"), which sees it first, as in Go. */
        p->paren_depth--;
        return (tok_t){T_RPAREN, (uint32_t)start, 1};
    default:
        break;
    }
    if (c == '.' && !(p->pos < p->len && isdigit((unsigned char)p->src[p->pos]))) {
        while (p->pos < p->len && is_alnum((unsigned char)p->src[p->pos]))
            p->pos++;
        if (!at_terminator(p))
            return lex_error(p, (uint32_t)p->pos, "bad character U+%04X", (unsigned char)p->src[p->pos]);
        return (tok_t){p->pos - start == 1 ? T_DOT : T_FIELD, (uint32_t)start,
                       (uint32_t)(p->pos - start)};
    }
    if (c == '.' || c == '+' || c == '-' || isdigit(c))
        return lex_number(p, start);
    if (is_alnum(c)) {
        while (p->pos < p->len && is_alnum((unsigned char)p->src[p->pos]))
            p->pos++;
        if (!at_terminator(p))
            return lex_error(p, (uint32_t)p->pos, "bad character U+%04X", (unsigned char)p->src[p->pos]);
        size_t n = p->pos - start;
        for (size_t i = 0; i < CR_ARRAY_LEN(keywords); i++)
            if (strlen(keywords[i].word) == n && !memcmp(keywords[i].word, p->src + start, n))
                return (tok_t){keywords[i].type, (uint32_t)start, (uint32_t)n};
        return (tok_t){T_IDENT, (uint32_t)start, (uint32_t)n};
    }
    if (c < 0x80 && isprint(c))
        return (tok_t){T_OTHER, (uint32_t)start, 1};
    return lex_error(p, (uint32_t)start, "unrecognized character in action: U+%04X", c);
}

static tok_t next_tok(parser_t *p)
{
    if (p->n_back > 0)
        return p->back[--p->n_back];
    if (p->st)
        return (tok_t){T_EOF, (uint32_t)p->len, 0};
    if (p->in_action)
        return lex_action(p);
    if (p->pos >= p->len && !p->trim_left)
        return (tok_t){T_EOF, (uint32_t)p->len, 0};
    return lex_text(p);
}

static void backup(parser_t *p, tok_t t)
{
    if (p->n_back < (int)CR_ARRAY_LEN(p->back))
        p->back[p->n_back++] = t;
}

static tok_t peek_tok(parser_t *p)
{
    tok_t t = next_tok(p);
    backup(p, t);
    return t;
}

static tok_t next_nonspace(parser_t *p)
{
    tok_t t;
    do
        t = next_tok(p);
    while (t.type == T_SPACE);
    return t;
}

static tok_t peek_nonspace(parser_t *p)
{
    tok_t t = next_nonspace(p);
    backup(p, t);
    return t;
}

/* Go's item.String() for messages. */
static void tok_describe(parser_t *p, tok_t t, char *buf, size_t cap)
{
    if (t.type == T_EOF) {
        snprintf(buf, cap, "EOF");
    } else if (t.type == T_ERROR) {
        snprintf(buf, cap, "%s", p->lex_err);
    } else if (t.type >= T_KW_BLOCK) {
        snprintf(buf, cap, "<%.*s>", (int)t.len, p->src + t.pos);
    } else if (t.len > 10) {
        snprintf(buf, cap, "\"%.10s\"...", p->src + t.pos);
    } else {
        snprintf(buf, cap, "\"%.*s\"", (int)t.len, p->src + t.pos);
    }
}

static void unexpected(parser_t *p, tok_t t, const char *context)
{
    if (t.type == T_ERROR) {
        int l1, l2, c;
        rn_tmpl_line_col(p->t, t.pos, &l1, &c);
        rn_tmpl_line_col(p->t, p->action_pos, &l2, &c);
        size_t n = strlen(p->lex_err);
        if (p->in_action && l1 != l2) {
            if (n >= 7 && !strcmp(p->lex_err + n - 7, " action"))
                perr(p, t.pos, "%s started at :%d", p->lex_err, l2);
            else
                perr(p, t.pos, "%s in action started at :%d", p->lex_err, l2);
        } else {
            perr(p, t.pos, "%s", p->lex_err);
        }
        return;
    }
    char d[64];
    tok_describe(p, t, d, sizeof d);
    perr(p, t.pos, "unexpected %s in %s", d, context);
}

/* ---- growable pointer vectors (malloc, copied into the arena) ---- */

typedef struct vec {
    void **items;
    size_t n, cap;
} vec_t;

static bool vec_push(parser_t *p, vec_t *v, void *item)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 8;
        void **q = realloc(v->items, cap * sizeof *q);
        if (!q) {
            perr_nomem(p);
            return false;
        }
        v->items = q;
        v->cap = cap;
    }
    v->items[v->n++] = item;
    return true;
}

static void **vec_finish(parser_t *p, vec_t *v)
{
    void **out = NULL;
    if (v->n && !p->st) {
        out = palloc(p, v->n * sizeof *out);
        if (out)
            memcpy(out, v->items, v->n * sizeof *out);
    }
    free(v->items);
    v->items = NULL;
    v->cap = 0;
    return out;
}

/* ---- variables in scope (parse-time check) ---- */

static void push_var(parser_t *p, const char *name)
{
    if (p->n_vars == p->cap_vars) {
        size_t cap = p->cap_vars ? p->cap_vars * 2 : 16;
        const char **q = realloc(p->vars, cap * sizeof *q);
        if (!q) {
            perr_nomem(p);
            return;
        }
        p->vars = q;
        p->cap_vars = cap;
    }
    p->vars[p->n_vars++] = name;
}

static bool has_var(parser_t *p, const char *name)
{
    for (size_t i = p->n_vars; i-- > 0;)
        if (!strcmp(p->vars[i], name))
            return true;
    return false;
}

/* ---- nodes ---- */

static tnode_t *new_node(parser_t *p, tnode_type_t type, uint32_t pos)
{
    tnode_t *n = palloc(p, sizeof *n);
    if (n) {
        n->type = type;
        n->pos = pos;
    }
    return n;
}

/* Splits ".A.B" or "$x.A" into identifiers (arena strings). */
static bool split_idents(parser_t *p, const char *s, size_t len, bool is_var,
                         const char ***out, size_t *n_out)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (s[i] == '.')
            n++;
    if (is_var)
        n++;
    const char **ids = palloc(p, (n ? n : 1) * sizeof *ids);
    if (!ids)
        return false;
    size_t k = 0, i = 0;
    if (is_var) {
        size_t j = 0;
        while (j < len && s[j] != '.')
            j++;
        ids[k++] = rn_tmpl_arena_strndup(&p->t->arena, s, j);
        i = j;
    }
    while (i < len) {
        /* s[i] == '.' */
        size_t j = i + 1;
        while (j < len && s[j] != '.')
            j++;
        ids[k++] = rn_tmpl_arena_strndup(&p->t->arena, s + i + 1, j - i - 1);
        i = j;
    }
    for (size_t j = 0; j < k; j++)
        if (!ids[j]) {
            perr_nomem(p);
            return false;
        }
    *out = ids;
    *n_out = k;
    return true;
}

/* Appends more field identifiers to a TN_FIELD/TN_VAR/TN_CHAIN node. */
static void add_idents(parser_t *p, const char ***ids, size_t *n, const char **more, size_t m)
{
    const char **all = palloc(p, (*n + m) * sizeof *all);
    if (!all)
        return;
    if (*n)
        memcpy(all, *ids, *n * sizeof *all);
    memcpy(all + *n, more, m * sizeof *all);
    *ids = all;
    *n += m;
}

/* ---- literals (decoded by template_lit.c) ---- */

static tnode_t *string_node(parser_t *p, tok_t t)
{
    const char *s = p->src + t.pos;
    tnode_t *n = new_node(p, TN_STRING, t.pos);
    if (!n)
        return NULL;
    n->u.text.quoted = rn_tmpl_arena_strndup(&p->t->arena, s, t.len);
    if (t.type == T_RAW) {
        /* Raw strings drop carriage returns, as Go does. */
        char *o = palloc(p, t.len);
        if (!o)
            return NULL;
        size_t k = 0;
        for (size_t i = 1; i + 1 < t.len; i++)
            if (s[i] != '\r')
                o[k++] = s[i];
        n->u.text.s = o;
        n->u.text.len = k;
        return n;
    }
    char *o = palloc(p, t.len);
    if (!o)
        return NULL;
    long k = rn_tmpl_lit_unquote(s + 1, t.len - 2, '"', o);
    if (k < 0) {
        perr(p, t.pos, "invalid syntax");
        return NULL;
    }
    n->u.text.s = o;
    n->u.text.len = (size_t)k;
    return n;
}

static tnode_t *number_node(parser_t *p, tok_t t)
{
    tnode_t *n = new_node(p, TN_NUMBER, t.pos);
    if (!n)
        return NULL;
    const char *s = p->src + t.pos;
    n->u.num.text = rn_tmpl_arena_strndup(&p->t->arena, s, t.len);
    if (!n->u.num.text) {
        perr_nomem(p);
        return NULL;
    }
    char msg[160];
    if (!rn_tmpl_lit_number(s, t.len, t.type == T_CHAR, n, msg, sizeof msg)) {
        perr(p, t.pos, "%s", msg);
        return NULL;
    }
    return n;
}

/* ---- grammar ---- */

static tnode_t *parse_pipeline(parser_t *p, const char *context, tok_type_t end);
static tnode_t *parse_list(parser_t *p, tok_t *term);

static tnode_t *parse_term(parser_t *p)
{
    tok_t t = next_nonspace(p);
    switch (t.type) {
    case T_IDENT: {
        tfunc_t f = rn_tmpl_func_lookup(p->src + t.pos, t.len);
        if (f == TF__COUNT) {
            perr(p, t.pos, "function \"%.*s\" not defined", (int)t.len, p->src + t.pos);
            return NULL;
        }
        tnode_t *n = new_node(p, TN_IDENT, t.pos);
        if (n) {
            n->u.ident.name = rn_tmpl_func_name(f);
            n->u.ident.fn = f;
        }
        return n;
    }
    case T_DOT:
        return new_node(p, TN_DOT, t.pos);
    case T_NIL:
        return new_node(p, TN_NIL, t.pos);
    case T_VAR: {
        tnode_t *n = new_node(p, TN_VAR, t.pos);
        if (!n || !split_idents(p, p->src + t.pos, t.len, true, &n->u.field.idents, &n->u.field.n))
            return NULL;
        if (!has_var(p, n->u.field.idents[0])) {
            perr(p, t.pos, "undefined variable \"%s\"", n->u.field.idents[0]);
            return NULL;
        }
        return n;
    }
    case T_FIELD: {
        tnode_t *n = new_node(p, TN_FIELD, t.pos);
        if (!n || !split_idents(p, p->src + t.pos, t.len, false, &n->u.field.idents, &n->u.field.n))
            return NULL;
        return n;
    }
    case T_BOOL: {
        tnode_t *n = new_node(p, TN_BOOL, t.pos);
        if (n)
            n->u.b = t.len == 4; /* "true" */
        return n;
    }
    case T_NUMBER:
    case T_CHAR:
        return number_node(p, t);
    case T_LPAREN: {
        if (++p->nesting > RN_TMPL_MAX_NESTING) {
            perr(p, t.pos, "nesting deeper than %d", RN_TMPL_MAX_NESTING);
            return NULL;
        }
        tnode_t *n = parse_pipeline(p, "parenthesized pipeline", T_RPAREN);
        p->nesting--;
        return n;
    }
    case T_STRING:
    case T_RAW:
        return string_node(p, t);
    default:
        backup(p, t);
        return NULL;
    }
}

static tnode_t *parse_operand(parser_t *p)
{
    tnode_t *node = parse_term(p);
    if (!node || p->st)
        return NULL;
    tok_t t = peek_tok(p);
    if (t.type != T_FIELD)
        return node;
    uint32_t chain_pos = t.pos;
    vec_t ids = {0};
    while ((t = next_tok(p)).type == T_FIELD) {
        const char *name = rn_tmpl_arena_strndup(&p->t->arena, p->src + t.pos + 1, t.len - 1);
        if (!name || !vec_push(p, &ids, (void *)name)) {
            free(ids.items);
            perr_nomem(p);
            return NULL;
        }
    }
    backup(p, t);
    size_t m = ids.n;
    const char **more = (const char **)vec_finish(p, &ids);
    if (p->st)
        return NULL;
    switch (node->type) {
    case TN_FIELD:
    case TN_VAR:
        add_idents(p, &node->u.field.idents, &node->u.field.n, more, m);
        node->pos = chain_pos; /* Go places the merged node at the chain */
        return p->st ? NULL : node;
    case TN_BOOL:
    case TN_STRING:
    case TN_NUMBER:
    case TN_NIL:
    case TN_DOT: {
        cr_buf_t b;
        cr_buf_init(&b, 256);
        rn_tmpl_node_to_string(node, &b);
        cr_buf_t q;
        cr_buf_init(&q, 512);
        rn_tmpl_quote_go(b.data ? b.data : "", b.len, &q);
        perr(p, chain_pos, "unexpected . after term %s", q.data ? q.data : "");
        cr_buf_free(&q);
        cr_buf_free(&b);
        return NULL;
    }
    default: {
        tnode_t *c = new_node(p, TN_CHAIN, chain_pos);
        if (!c)
            return NULL;
        c->u.chain.node = node;
        c->u.chain.idents = more;
        c->u.chain.n = m;
        return c;
    }
    }
}

static tnode_t *parse_command(parser_t *p)
{
    tnode_t *cmd = new_node(p, TN_COMMAND, peek_nonspace(p).pos);
    if (!cmd)
        return NULL;
    vec_t args = {0};
    for (;;) {
        peek_nonspace(p);
        tnode_t *op = parse_operand(p);
        if (p->st)
            break;
        if (op && !vec_push(p, &args, op))
            break;
        tok_t t = next_tok(p);
        if (t.type == T_SPACE)
            continue;
        if (t.type == T_RIGHT || t.type == T_RPAREN) {
            backup(p, t);
        } else if (t.type != T_PIPE) {
            unexpected(p, t, "operand");
        }
        break;
    }
    size_t n = args.n;
    cmd->u.cmd.args = (tnode_t **)vec_finish(p, &args);
    cmd->u.cmd.n = n;
    if (!p->st && n == 0)
        perr(p, cmd->pos, "empty command");
    return p->st ? NULL : cmd;
}

static tnode_t *parse_pipeline(parser_t *p, const char *context, tok_type_t end)
{
    tnode_t *pipe = new_node(p, TN_PIPE, peek_nonspace(p).pos);
    if (!pipe)
        return NULL;
    vec_t decl = {0}, cmds = {0};
    bool is_range = !strcmp(context, "range");
    for (;;) { /* declarations */
        tok_t v = peek_nonspace(p);
        if (v.type != T_VAR)
            break;
        v = next_nonspace(p);
        tok_t after = peek_tok(p);
        tok_t nxt = peek_nonspace(p);
        if (nxt.type == T_ASSIGN || nxt.type == T_DECLARE) {
            pipe->u.pipe.is_assign = nxt.type == T_ASSIGN;
            next_nonspace(p);
        } else if (nxt.type == T_OTHER && p->src[nxt.pos] == ',') {
            next_nonspace(p);
        } else {
            /* Not a declaration: "$x" is the first operand. */
            if (after.type == T_SPACE)
                backup(p, after); /* the space next_nonspace dropped */
            backup(p, v);
            break;
        }
        tnode_t *var = new_node(p, TN_VAR, v.pos);
        if (!var || !split_idents(p, p->src + v.pos, v.len, true, &var->u.field.idents,
                                  &var->u.field.n))
            goto fail;
        if (var->u.field.n != 1) {
            perr(p, v.pos, "unexpected \"%.*s\" in %s", (int)v.len, p->src + v.pos, context);
            goto fail;
        }
        if (!vec_push(p, &decl, var))
            goto fail;
        push_var(p, var->u.field.idents[0]);
        if (nxt.type == T_OTHER) { /* a comma: only "range $i, $e :=" */
            if (is_range && decl.n < 2) {
                tok_t t2 = peek_nonspace(p);
                if (t2.type == T_VAR)
                    continue;
                perr(p, t2.pos, "range can only initialize variables");
                goto fail;
            }
            perr(p, nxt.pos, "too many declarations in %s", context);
            goto fail;
        }
        break;
    }
    for (;;) {
        tok_t t = next_nonspace(p);
        if (p->st)
            goto fail;
        if (t.type == end) {
            if (cmds.n == 0) {
                perr(p, t.pos, "missing value for %s", context);
                goto fail;
            }
            for (size_t i = 1; i < cmds.n; i++) {
                tnode_t *c = cmds.items[i];
                tnode_type_t ty = c->u.cmd.args[0]->type;
                if (ty == TN_BOOL || ty == TN_DOT || ty == TN_NIL || ty == TN_NUMBER ||
                    ty == TN_STRING) {
                    perr(p, c->pos, "non executable command in pipeline stage %zu", i + 1);
                    goto fail;
                }
            }
            break;
        }
        switch (t.type) {
        case T_BOOL:
        case T_CHAR:
        case T_DOT:
        case T_FIELD:
        case T_IDENT:
        case T_NUMBER:
        case T_NIL:
        case T_RAW:
        case T_STRING:
        case T_VAR:
        case T_LPAREN: {
            backup(p, t);
            tnode_t *c = parse_command(p);
            if (!c || !vec_push(p, &cmds, c))
                goto fail;
            break;
        }
        default:
            unexpected(p, t, context);
            goto fail;
        }
    }
    size_t nd = decl.n, nc = cmds.n;
    pipe->u.pipe.decl = (tnode_t **)vec_finish(p, &decl);
    pipe->u.pipe.n_decl = nd;
    pipe->u.pipe.cmds = (tnode_t **)vec_finish(p, &cmds);
    pipe->u.pipe.n_cmds = nc;
    return p->st ? NULL : pipe;
fail:
    free(decl.items);
    free(cmds.items);
    return NULL;
}

/* Parses the body of if/range/with after its keyword. */
static tnode_t *parse_control(parser_t *p, tnode_type_t type, uint32_t pos)
{
    const char *context = type == TN_IF ? "if" : type == TN_RANGE ? "range" : "with";
    if (++p->nesting > RN_TMPL_MAX_NESTING) {
        perr(p, pos, "nesting deeper than %d", RN_TMPL_MAX_NESTING);
        return NULL;
    }
    size_t vars_mark = p->n_vars;
    tnode_t *n = new_node(p, type, pos);
    tnode_t *pipe = n ? parse_pipeline(p, context, T_RIGHT) : NULL;
    if (!pipe)
        goto out;
    n->u.branch.pipe = pipe;
    if (type == TN_RANGE)
        p->range_depth++;
    tok_t term;
    n->u.branch.list = parse_list(p, &term);
    if (type == TN_RANGE)
        p->range_depth--;
    if (p->st)
        goto out;
    if (term.type == T_KW_ELSE) {
        tok_t nx = peek_tok(p);
        if ((type == TN_IF && nx.type == T_KW_IF) || (type == TN_WITH && nx.type == T_KW_WITH)) {
            /* {{else if x}} is {{else}}{{if x}}...{{end}} sharing the end. */
            next_tok(p);
            tnode_t *inner = parse_control(p, type, nx.pos);
            tnode_t *list = new_node(p, TN_LIST, term.pos);
            tnode_t **one = palloc(p, sizeof *one);
            if (!inner || !list || !one)
                goto out;
            one[0] = inner;
            list->u.list.nodes = one;
            list->u.list.n = 1;
            n->u.branch.else_list = list;
        } else {
            if (type == TN_RANGE)
                p->range_depth++;
            n->u.branch.else_list = parse_list(p, &term);
            if (type == TN_RANGE)
                p->range_depth--;
            if (!p->st && term.type != T_KW_END)
                perr(p, term.pos, "expected end; found {{else}}");
        }
    }
out:
    p->n_vars = vars_mark;
    p->nesting--;
    return p->st ? NULL : n;
}

static const char *parse_template_name(parser_t *p, tok_t t, const char *context)
{
    if (t.type != T_STRING && t.type != T_RAW) {
        unexpected(p, t, context);
        return NULL;
    }
    tnode_t *s = string_node(p, t);
    if (!s)
        return NULL;
    return rn_tmpl_arena_strndup(&p->t->arena, s->u.text.s, s->u.text.len);
}

static void add_define(parser_t *p, const char *name, tnode_t *body, uint32_t pos)
{
    for (size_t i = 0; i < p->t->n_defs; i++) {
        tdef_t *d = &p->t->defs[i];
        if (!strcmp(d->name, name)) {
            if (d->body->u.list.n == 0) {
                d->body = body;
                return;
            }
            if (body->u.list.n == 0)
                return;
            perr(p, pos, "template: multiple definition of template \"%s\"", name);
            return;
        }
    }
    tdef_t *defs = palloc(p, (p->t->n_defs + 1) * sizeof *defs);
    if (!defs)
        return;
    if (p->t->n_defs)
        memcpy(defs, p->t->defs, p->t->n_defs * sizeof *defs);
    defs[p->t->n_defs].name = name;
    defs[p->t->n_defs].body = body;
    p->t->defs = defs;
    p->t->n_defs++;
}

/* {{define "name"}} body {{end}} or {{block "name" pipe}} body {{end}}:
 * the body gets a fresh variable scope and no enclosing range. */
static tnode_t *parse_definition_body(parser_t *p, const char *context, uint32_t pos)
{
    size_t vars_mark = p->n_vars;
    int range_depth = p->range_depth;
    const char **saved = p->vars;
    size_t saved_cap = p->cap_vars;
    p->vars = NULL;
    p->n_vars = p->cap_vars = 0;
    p->range_depth = 0;
    push_var(p, "$");
    tok_t term;
    tnode_t *body = parse_list(p, &term);
    free(p->vars);
    p->vars = saved;
    p->n_vars = vars_mark;
    p->cap_vars = saved_cap;
    p->range_depth = range_depth;
    if (!p->st && term.type != T_KW_END)
        perr(p, term.pos, "unexpected {{else}} in %s", context);
    CR_UNUSED(pos);
    return p->st ? NULL : body;
}

/* After "{{" (and any trim marker): one action, or a block keyword. Sets
 * *term to {{end}}/{{else}} instead of returning a node for those. */
static tnode_t *parse_action(parser_t *p, tok_t *term)
{
    tok_t t = next_nonspace(p);
    switch (t.type) {
    case T_KW_BLOCK: {
        tok_t nt = next_nonspace(p);
        const char *name = parse_template_name(p, nt, "block clause");
        if (!name)
            return NULL;
        tnode_t *pipe = parse_pipeline(p, "block clause", T_RIGHT);
        if (!pipe)
            return NULL;
        if (++p->nesting > RN_TMPL_MAX_NESTING) {
            perr(p, t.pos, "nesting deeper than %d", RN_TMPL_MAX_NESTING);
            return NULL;
        }
        tnode_t *body = parse_definition_body(p, "block clause", t.pos);
        p->nesting--;
        if (!body)
            return NULL;
        add_define(p, name, body, t.pos);
        tnode_t *n = new_node(p, TN_TEMPLATE, nt.pos);
        if (n) {
            n->u.tmpl.name = name;
            n->u.tmpl.pipe = pipe;
        }
        return n;
    }
    case T_KW_BREAK:
    case T_KW_CONTINUE: {
        const char *kw = t.type == T_KW_BREAK ? "{{break}}" : "{{continue}}";
        tok_t r = next_nonspace(p);
        if (r.type != T_RIGHT) {
            unexpected(p, r, kw);
            return NULL;
        }
        if (p->range_depth == 0) {
            perr(p, t.pos, "%s outside {{range}}", kw);
            return NULL;
        }
        return new_node(p, t.type == T_KW_BREAK ? TN_BREAK : TN_CONTINUE, t.pos);
    }
    case T_KW_ELSE: {
        tok_t nx = peek_nonspace(p);
        if (nx.type != T_KW_IF && nx.type != T_KW_WITH) {
            nx = next_nonspace(p);
            if (nx.type != T_RIGHT) {
                unexpected(p, nx, "else");
                return NULL;
            }
        }
        *term = t;
        return NULL;
    }
    case T_KW_END: {
        tok_t r = next_nonspace(p);
        if (r.type != T_RIGHT) {
            unexpected(p, r, "end");
            return NULL;
        }
        *term = t;
        return NULL;
    }
    case T_KW_IF:
        return parse_control(p, TN_IF, t.pos);
    case T_KW_RANGE:
        return parse_control(p, TN_RANGE, t.pos);
    case T_KW_WITH:
        return parse_control(p, TN_WITH, t.pos);
    case T_KW_TEMPLATE: {
        tok_t nt = next_nonspace(p);
        const char *name = parse_template_name(p, nt, "template clause");
        if (!name)
            return NULL;
        tnode_t *n = new_node(p, TN_TEMPLATE, nt.pos);
        if (!n)
            return NULL;
        n->u.tmpl.name = name;
        tok_t r = next_nonspace(p);
        if (r.type != T_RIGHT) {
            backup(p, r);
            n->u.tmpl.pipe = parse_pipeline(p, "template clause", T_RIGHT);
            if (!n->u.tmpl.pipe)
                return NULL;
        } else if (!p->bare_template_pos) {
            p->bare_template_pos = t.pos + 1; /* Ollama refuses these */
        }
        return n;
    }
    default: {
        backup(p, t);
        tnode_t *pipe = parse_pipeline(p, "command", T_RIGHT);
        if (!pipe)
            return NULL;
        tnode_t *n = new_node(p, TN_ACTION, pipe->pos);
        if (n)
            n->u.action.pipe = pipe;
        return n;
    }
    }
}

/* Parses text and actions until {{end}}, {{else}} (reported in *term) or
 * the end of input (*term = T_EOF, an error inside a block). */
static tnode_t *parse_list(parser_t *p, tok_t *term)
{
    tnode_t *list = new_node(p, TN_LIST, (uint32_t)p->pos);
    vec_t nodes = {0};
    term->type = T_EOF;
    term->pos = (uint32_t)p->len;
    while (list && !p->st) {
        tok_t t = next_tok(p);
        if (t.type == T_EOF) {
            if (p->nesting > 0)
                perr(p, t.pos, "unexpected EOF");
            break;
        }
        if (t.type == T_ERROR) {
            unexpected(p, t, "input");
            break;
        }
        tnode_t *n = NULL;
        if (t.type == T_TEXT) {
            n = new_node(p, TN_TEXT, t.pos);
            if (n) {
                n->u.text.s = p->src + t.pos;
                n->u.text.len = t.len;
            }
        } else if (t.type == T_LEFT) {
            tok_t kw = peek_nonspace(p);
            if (kw.type == T_KW_DEFINE) {
                perr(p, kw.pos, "unexpected <define> in command");
                break;
            }
            tok_t end = {T_EOF, 0, 0};
            n = parse_action(p, &end);
            if (end.type == T_KW_END || end.type == T_KW_ELSE) {
                *term = end;
                break;
            }
        } else {
            unexpected(p, t, "input");
            break;
        }
        if (!n)
            break;
        if (!vec_push(p, &nodes, n))
            break;
    }
    size_t n = nodes.n;
    tnode_t **arr = (tnode_t **)vec_finish(p, &nodes);
    if (list) {
        list->u.list.nodes = arr;
        list->u.list.n = n;
    }
    return p->st ? NULL : list;
}

/* The top level: lists with {{define}} allowed between them. */
static tnode_t *parse_top(parser_t *p)
{
    tnode_t *root = new_node(p, TN_LIST, 0);
    vec_t nodes = {0};
    while (root && !p->st) {
        tok_t t = next_tok(p);
        if (t.type == T_EOF)
            break;
        if (t.type == T_LEFT) {
            tok_t kw = next_nonspace(p);
            if (kw.type == T_KW_DEFINE) {
                tok_t nt = next_nonspace(p);
                const char *name = parse_template_name(p, nt, "define clause");
                if (!name)
                    break;
                tok_t r = next_nonspace(p);
                if (r.type != T_RIGHT) {
                    unexpected(p, r, "define clause");
                    break;
                }
                p->nesting++;
                tnode_t *body = parse_definition_body(p, "define clause", kw.pos);
                p->nesting--;
                if (!body)
                    break;
                add_define(p, name, body, kw.pos);
                continue;
            }
            backup(p, kw);
            backup(p, t);
        } else {
            backup(p, t);
        }
        /* One node (text or action) from the ordinary list parser. */
        t = next_tok(p);
        tnode_t *n = NULL;
        if (t.type == T_TEXT) {
            n = new_node(p, TN_TEXT, t.pos);
            if (n) {
                n->u.text.s = p->src + t.pos;
                n->u.text.len = t.len;
            }
        } else if (t.type == T_LEFT) {
            tok_t end = {T_EOF, 0, 0};
            n = parse_action(p, &end);
            if (end.type == T_KW_END || end.type == T_KW_ELSE) {
                perr(p, end.pos, "unexpected {{%s}}", end.type == T_KW_END ? "end" : "else");
                break;
            }
        } else if (t.type == T_ERROR) {
            unexpected(p, t, "input");
            break;
        } else if (t.type == T_EOF) {
            break;
        } else {
            unexpected(p, t, "input");
            break;
        }
        if (!n || !vec_push(p, &nodes, n))
            break;
    }
    size_t n = nodes.n;
    tnode_t **arr = (tnode_t **)vec_finish(p, &nodes);
    if (root) {
        root->u.list.nodes = arr;
        root->u.list.n = n;
    }
    return p->st ? NULL : root;
}

/* ---- entry points ---- */

static cr_status_t tmpl_parse(const char *src, size_t len, bool ollama, rn_tmpl_t **out,
                              cr_err_t *err)
{
    *out = NULL;
    if (err)
        cr_err_clear(err);
    if (len > RN_TMPL_MAX_SOURCE)
        return cr_err_set(err, CR_E_TOO_LARGE, "template: %zu bytes exceeds the %u-byte limit",
                          len, RN_TMPL_MAX_SOURCE);
    if (!src)
        src = "";
    rn_tmpl_t *t = calloc(1, sizeof *t);
    if (!t)
        return cr_err_set(err, CR_E_NOMEM, "template: out of memory");
    t->src = malloc(len + 1);
    if (!t->src) {
        free(t);
        return cr_err_set(err, CR_E_NOMEM, "template: out of memory");
    }
    if (len)
        memcpy(t->src, src, len);
    t->src[len] = '\0';
    t->src_len = len;

    parser_t p = {.t = t, .src = t->src, .len = len, .err = err};
    push_var(&p, "$");
    t->root = parse_top(&p);
    free(p.vars);
    p.vars = NULL;

    if (ollama && !p.st && p.bare_template_pos) {
        /* Ollama's Vars() refuses a template call without a pipeline. */
        perr(&p, p.bare_template_pos - 1, "undefined template specified");
    }
    if (!p.st && rn_tmpl_touch_up(t, ollama))
        perr_nomem(&p);
    if (p.st) {
        cr_status_t st = p.st;
        rn_tmpl_destroy(&t);
        return st;
    }
    *out = t;
    return CR_OK;
}

cr_status_t rn_tmpl_parse(const char *src, size_t len, rn_tmpl_t **out, cr_err_t *err)
{
    return tmpl_parse(src, len, true, out, err);
}

cr_status_t rn_tmpl_parse_plain(const char *src, size_t len, rn_tmpl_t **out, cr_err_t *err)
{
    return tmpl_parse(src, len, false, out, err);
}

void rn_tmpl_destroy(rn_tmpl_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_tmpl_t *t = *self_p;
    arena_free(&t->arena);
    free(t->src);
    free(t);
    *self_p = NULL;
}

const char *rn_tmpl_source(const rn_tmpl_t *t)
{
    return t ? t->src : "";
}

