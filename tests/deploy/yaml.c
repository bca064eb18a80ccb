/* yaml.c: the compose-file YAML subset (see yaml.h), line by line.
 *
 * First every line is cut into (indentation, text) with its comment
 * removed; then a recursive descent over those lines builds the tree. A
 * "- key: v" item is parsed by moving that line's indentation past the
 * dash, so the item's mapping continues at the key's column like any other
 * mapping. Flow collections are parsed with a cursor over one line. */
#include "lib/prelude.h"
#include "tests/deploy/yaml.h"

typedef struct line {
    int indent;  /* columns of leading spaces */
    char *text;  /* after the indentation; comment and trailing blanks cut */
    char *buf;   /* what to free */
    int no;      /* 1-based */
} line_t;

typedef struct parser {
    line_t *lines;
    size_t n, pos;
    int depth;
    cr_err_t *err;
} parser_t;

/* ---- nodes ---- */

static dc_yaml_t *node_new(dc_yaml_kind_t kind, int line)
{
    dc_yaml_t *n = calloc(1, sizeof *n);
    if (n) {
        n->kind = kind;
        n->line = line;
    }
    return n;
}

void dc_yaml_free(dc_yaml_t **node_p)
{
    if (!node_p || !*node_p)
        return;
    dc_yaml_t *n = *node_p;
    for (size_t i = 0; i < n->n; i++) {
        if (n->keys)
            free(n->keys[i]);
        dc_yaml_free(&n->vals[i]);
    }
    free(n->keys);
    free(n->vals);
    free(n->tag);
    free(n->str);
    free(n);
    *node_p = NULL;
}

/* Appends (key may be NULL for sequences); takes ownership of key and val
 * even on failure. */
static cr_status_t node_add(dc_yaml_t *n, char *key, dc_yaml_t *val,
                            cr_err_t *err)
{
    if (n->kind == DC_YAML_MAP)
        for (size_t i = 0; i < n->n; i++)
            if (!strcmp(n->keys[i], key)) {
                cr_status_t st = cr_err_set(err, CR_E_CORRUPT,
                                            "line %d: duplicate key '%s'",
                                            val->line, key);
                free(key);
                dc_yaml_free(&val);
                return st;
            }
    dc_yaml_t **vals = realloc(n->vals, (n->n + 1) * sizeof *vals);
    if (vals)
        n->vals = vals;
    bool keys_ok = true;
    if (vals && n->kind == DC_YAML_MAP) {
        char **keys = realloc(n->keys, (n->n + 1) * sizeof *keys);
        if (keys)
            n->keys = keys;
        keys_ok = keys != NULL;
    }
    if (!vals || !keys_ok) {
        free(key);
        dc_yaml_free(&val);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    if (n->kind == DC_YAML_MAP)
        n->keys[n->n] = key;
    else
        free(key);
    n->vals[n->n++] = val;
    return CR_OK;
}

const dc_yaml_t *dc_yaml_get(const dc_yaml_t *map, const char *key)
{
    if (!map || map->kind != DC_YAML_MAP)
        return NULL;
    for (size_t i = 0; i < map->n; i++)
        if (!strcmp(map->keys[i], key))
            return map->vals[i];
    return NULL;
}

const char *dc_yaml_str(const dc_yaml_t *node)
{
    return node && node->kind == DC_YAML_SCALAR ? node->str : NULL;
}

/* ---- lines ---- */

/* Cuts a comment ('#' at the start or after a blank, outside quotes).
 * Returns false when a quote is left open (multi-line quoted scalars are
 * not part of the subset). */
static bool cut_comment(char *s)
{
    char q = 0;
    for (size_t i = 0; s[i]; i++) {
        char c = s[i];
        if (q == '"') {
            if (c == '\\' && s[i + 1])
                i++;
            else if (c == '"')
                q = 0;
            continue;
        }
        if (q == '\'') {
            if (c == '\'' && s[i + 1] == '\'')
                i++;
            else if (c == '\'')
                q = 0;
            continue;
        }
        if (c == '#' && (i == 0 || s[i - 1] == ' ')) {
            s[i] = '\0';
            break;
        }
        /* A quote opens a quoted scalar only where a scalar can start. */
        if ((c == '"' || c == '\'') &&
            (i == 0 || strchr(" [{,", s[i - 1])))
            q = c;
    }
    return q == 0;
}

static void lines_free(parser_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->lines[i].buf);
    free(p->lines);
}

static cr_status_t split_lines(parser_t *p, const char *text, size_t len)
{
    bool content_seen = false;
    int no = 0;
    size_t i = 0;
    while (i < len) {
        size_t end = i;
        while (end < len && text[end] != '\n')
            end++;
        no++;
        size_t ll = end - i;
        if (ll && text[i + ll - 1] == '\r')
            ll--;
        char *buf = malloc(ll + 1);
        if (!buf)
            return cr_err_set(p->err, CR_E_NOMEM, "out of memory");
        memcpy(buf, text + i, ll);
        buf[ll] = '\0';
        i = end + 1;
        if (memchr(buf, '\0', ll)) {
            free(buf);
            return cr_err_set(p->err, CR_E_CORRUPT, "line %d: NUL byte", no);
        }
        int indent = 0;
        while (buf[indent] == ' ')
            indent++;
        if (buf[indent] == '\t') {
            free(buf);
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "line %d: tab in indentation", no);
        }
        char *t = buf + indent;
        if (!cut_comment(t)) {
            free(buf);
            return cr_err_set(p->err, CR_E_UNSUPPORTED,
                              "line %d: quoted scalar not closed on its line",
                              no);
        }
        size_t tl = strlen(t);
        while (tl && (t[tl - 1] == ' ' || t[tl - 1] == '\t'))
            t[--tl] = '\0';
        if (!tl) {
            free(buf);
            continue;
        }
        if (indent == 0 && (!strcmp(t, "---") || !strncmp(t, "--- ", 4))) {
            free(buf);
            if (content_seen)
                return cr_err_set(p->err, CR_E_UNSUPPORTED,
                                  "line %d: more than one document", no);
            continue;
        }
        if (indent == 0 && (!strcmp(t, "...") || t[0] == '%')) {
            free(buf);
            return cr_err_set(p->err, CR_E_UNSUPPORTED,
                              "line %d: directives and document ends are "
                              "not supported", no);
        }
        content_seen = true;
        line_t *ls = realloc(p->lines, (p->n + 1) * sizeof *ls);
        if (!ls) {
            free(buf);
            return cr_err_set(p->err, CR_E_NOMEM, "out of memory");
        }
        p->lines = ls;
        p->lines[p->n++] = (line_t){indent, t, buf, no};
    }
    return CR_OK;
}

/* ---- scalars ---- */

static bool is_null_word(const char *s)
{
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") ||
           !strcmp(s, "Null") || !strcmp(s, "NULL");
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Parses a quoted scalar at *sp (which is at the quote); advances past the
 * closing quote. Returns the unquoted, unescaped text (caller frees). */
static char *parse_quoted(const char **sp, int no, cr_err_t *err)
{
    const char *s = *sp;
    char q = *s++;
    size_t cap = strlen(s) * 4 + 1; /* \u escapes expand to <= 4 bytes */
    char *out = malloc(cap);
    if (!out) {
        cr_err_set(err, CR_E_NOMEM, "out of memory");
        return NULL;
    }
    size_t n = 0;
    for (;;) {
        char c = *s++;
        if (!c) {
            free(out);
            cr_err_set(err, CR_E_CORRUPT, "line %d: unterminated quote", no);
            return NULL;
        }
        if (c == q) {
            if (q == '\'' && *s == '\'') {
                out[n++] = '\'';
                s++;
                continue;
            }
            break;
        }
        if (c != '\\' || q == '\'') {
            out[n++] = c;
            continue;
        }
        char e = *s++;
        unsigned long cp = 0;
        int digits = 0;
        switch (e) {
        case '\\': out[n++] = '\\'; break;
        case '"': out[n++] = '"'; break;
        case '/': out[n++] = '/'; break;
        case ' ': out[n++] = ' '; break;
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case '0': out[n++] = '\0'; break;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        default:
            free(out);
            cr_err_set(err, CR_E_CORRUPT, "line %d: unknown escape '\\%c'",
                       no, e ? e : '0');
            return NULL;
        }
        if (!digits)
            continue;
        for (int k = 0; k < digits; k++) {
            int h = hexval(s[k]);
            if (h < 0) {
                free(out);
                cr_err_set(err, CR_E_CORRUPT, "line %d: bad \\%c escape", no,
                           e);
                return NULL;
            }
            cp = cp * 16 + (unsigned long)h;
        }
        s += digits;
        if (cp == 0 || (cp >= 0xD800 && cp <= 0xDFFF)) {
            free(out);
            cr_err_set(err, CR_E_CORRUPT, "line %d: escape of code point "
                       "U+%04lX refused", no, cp);
            return NULL;
        }
        if (cp < 0x80) {
            out[n++] = (char)cp;
        } else if (cp < 0x800) {
            out[n++] = (char)(0xC0 | (cp >> 6));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[n++] = (char)(0xE0 | (cp >> 12));
            out[n++] = (char)(0x80 | ((cp >> 6) & 0x3F));
            out[n++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[n] = '\0';
    if (memchr(out, '\0', n)) {
        free(out);
        cr_err_set(err, CR_E_CORRUPT, "line %d: NUL in a quoted scalar", no);
        return NULL;
    }
    *sp = s;
    return out;
}

static dc_yaml_t *scalar_node(char *str, bool quoted, int no, cr_err_t *err)
{
    if (!str)
        return NULL;
    dc_yaml_t *n = node_new(DC_YAML_SCALAR, no);
    if (!n) {
        free(str);
        cr_err_set(err, CR_E_NOMEM, "out of memory");
        return NULL;
    }
    if (!quoted && is_null_word(str)) {
        n->kind = DC_YAML_NULL;
        free(str);
        return n;
    }
    n->str = str;
    n->quoted = quoted;
    return n;
}

/* Checks a plain scalar's first character: indicators YAML reserves, and
 * the features this subset refuses. */
static cr_status_t check_plain_start(const char *s, int no, cr_err_t *err)
{
    if (*s == '&' || *s == '*')
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "line %d: anchors and aliases are not supported",
                          no);
    if (*s == '|' || *s == '>')
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "line %d: block scalars (| and >) are not "
                          "supported", no);
    if (*s == '@' || *s == '`' || *s == '%')
        return cr_err_set(err, CR_E_CORRUPT,
                          "line %d: '%c' cannot start a plain scalar", no,
                          *s);
    return CR_OK;
}

/* ---- flow collections (one line) ---- */

static void skip_blank(const char **sp)
{
    while (**sp == ' ' || **sp == '\t')
        (*sp)++;
}

static dc_yaml_t *flow_value(const char **sp, int no, int depth, bool key,
                             cr_err_t *err);

static dc_yaml_t *flow_plain(const char **sp, int no, bool key, cr_err_t *err)
{
    const char *s = *sp, *start = s;
    if (check_plain_start(s, no, err))
        return NULL;
    while (*s && !strchr(",[]{}", *s)) {
        if (*s == ':' && (key || s[1] == ' ' || s[1] == ',' || !s[1]))
            break;
        s++;
    }
    size_t n = (size_t)(s - start);
    while (n && start[n - 1] == ' ')
        n--;
    char *str = strndup(start, n);
    if (!str) {
        cr_err_set(err, CR_E_NOMEM, "out of memory");
        return NULL;
    }
    *sp = s;
    return scalar_node(str, false, no, err);
}

static dc_yaml_t *flow_collection(const char **sp, int no, int depth,
                                  cr_err_t *err)
{
    char open = **sp, close = open == '[' ? ']' : '}';
    dc_yaml_t *n = node_new(open == '[' ? DC_YAML_SEQ : DC_YAML_MAP, no);
    if (!n) {
        cr_err_set(err, CR_E_NOMEM, "out of memory");
        return NULL;
    }
    (*sp)++;
    skip_blank(sp);
    while (**sp != close) {
        if (!**sp) {
            cr_err_set(err, CR_E_UNSUPPORTED,
                       "line %d: flow collection not closed on its line "
                       "(multi-line flow collections are not supported)", no);
            goto fail;
        }
        char *key = NULL;
        if (open == '{') {
            dc_yaml_t *k = flow_value(sp, no, depth + 1, true, err);
            if (!k)
                goto fail;
            if (k->kind != DC_YAML_SCALAR) {
                cr_err_set(err, CR_E_CORRUPT,
                           "line %d: flow mapping key must be a scalar", no);
                dc_yaml_free(&k);
                goto fail;
            }
            key = k->str;
            k->str = NULL;
            dc_yaml_free(&k);
            skip_blank(sp);
            if (**sp != ':') {
                free(key);
                cr_err_set(err, CR_E_CORRUPT,
                           "line %d: expected ':' in flow mapping", no);
                goto fail;
            }
            (*sp)++;
            skip_blank(sp);
        }
        dc_yaml_t *v;
        if (open == '{' && (**sp == ',' || **sp == '}'))
            v = node_new(DC_YAML_NULL, no);
        else
            v = flow_value(sp, no, depth + 1, false, err);
        if (!v) {
            free(key);
            goto fail;
        }
        if (node_add(n, key, v, err))
            goto fail;
        skip_blank(sp);
        if (**sp == ',') {
            (*sp)++;
            skip_blank(sp);
        } else if (**sp != close && **sp) {
            cr_err_set(err, CR_E_CORRUPT,
                       "line %d: expected ',' or '%c' in flow collection", no,
                       close);
            goto fail;
        }
    }
    (*sp)++;
    return n;
fail:
    dc_yaml_free(&n);
    return NULL;
}

static dc_yaml_t *flow_value(const char **sp, int no, int depth, bool key,
                             cr_err_t *err)
{
    if (depth > DC_YAML_MAX_DEPTH) {
        cr_err_set(err, CR_E_TOO_LARGE, "line %d: nested too deeply", no);
        return NULL;
    }
    skip_blank(sp);
    char c = **sp;
    if (c == '[' || c == '{')
        return flow_collection(sp, no, depth, err);
    if (c == '"' || c == '\'')
        return scalar_node(parse_quoted(sp, no, err), true, no, err);
    if (c == ']' || c == '}' || c == ',') {
        cr_err_set(err, CR_E_CORRUPT, "line %d: missing value before '%c'",
                   no, c);
        return NULL;
    }
    return flow_plain(sp, no, key, err);
}

/* ---- block structure ---- */

static bool is_seq_item(const char *t)
{
    return t[0] == '-' && (t[1] == '\0' || t[1] == ' ');
}

/* If t starts with "key:" (then a blank or the end), returns the offset of
 * the ':' and sets the key (caller frees); else returns 0. */
static size_t map_key(const char *t, char **key, int no, cr_err_t *err,
                      bool *failed)
{
    *key = NULL;
    *failed = false;
    if (t[0] == '"' || t[0] == '\'') {
        const char *s = t;
        char *k = parse_quoted(&s, no, err);
        if (!k) {
            *failed = true;
            return 0;
        }
        if (s[0] != ':' || (s[1] && s[1] != ' ')) {
            free(k);
            return 0;
        }
        *key = k;
        return (size_t)(s - t);
    }
    if (t[0] == '[' || t[0] == '{' || t[0] == '?')
        return 0;
    for (size_t i = 0; t[i]; i++)
        if (t[i] == ':' && (t[i + 1] == ' ' || !t[i + 1])) {
            size_t n = i;
            while (n && t[n - 1] == ' ')
                n--;
            if (!n)
                return 0;
            *key = strndup(t, n);
            if (!*key) {
                cr_err_set(err, CR_E_NOMEM, "out of memory");
                *failed = true;
                return 0;
            }
            return i;
        }
    return 0;
}

static cr_status_t parse_block(parser_t *p, int indent, dc_yaml_t **out);

/* A value written on the same line as its key or dash. */
static cr_status_t inline_value(parser_t *p, const char *s, int no,
                                dc_yaml_t **out)
{
    const char *c = s;
    dc_yaml_t *v;
    if (*c == '[' || *c == '{' || *c == '"' || *c == '\'') {
        v = flow_value(&c, no, p->depth, false, p->err);
        if (!v)
            return p->err ? p->err->status : CR_E_CORRUPT;
        skip_blank(&c);
        if (*c) {
            dc_yaml_free(&v);
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "line %d: text after a value: '%.40s'", no, c);
        }
    } else {
        cr_status_t st = check_plain_start(s, no, p->err);
        if (st)
            return st;
        if (strstr(s, ": "))
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "line %d: ': ' inside a plain scalar (quote "
                              "it, or start a nested mapping on its own "
                              "line)", no);
        char *str = strdup(s);
        if (!str)
            return cr_err_set(p->err, CR_E_NOMEM, "out of memory");
        v = scalar_node(str, false, no, p->err);
        if (!v)
            return CR_E_NOMEM;
    }
    *out = v;
    return CR_OK;
}

/* The value after "key:" or "-" with nothing on that line: a nested block,
 * a sequence at the key's own indentation (allowed for mapping values), or
 * null. */
static cr_status_t nested_value(parser_t *p, int indent, bool in_map, int no,
                                dc_yaml_t **out)
{
    if (p->pos < p->n) {
        line_t *nx = &p->lines[p->pos];
        if (nx->indent > indent)
            return parse_block(p, nx->indent, out);
        if (in_map && nx->indent == indent && is_seq_item(nx->text))
            return parse_block(p, indent, out);
    }
    *out = node_new(DC_YAML_NULL, no);
    return *out ? CR_OK : cr_err_set(p->err, CR_E_NOMEM, "out of memory");
}

/* Fails when the line after a one-line value is indented under it (a
 * multi-line plain scalar, or a mapping under a scalar). */
static cr_status_t no_continuation(parser_t *p, int indent)
{
    if (p->pos < p->n && p->lines[p->pos].indent > indent)
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "line %d: unexpected indentation (a value "
                          "continued on the next line is not supported)",
                          p->lines[p->pos].no);
    return CR_OK;
}

static cr_status_t parse_seq(parser_t *p, int indent, dc_yaml_t *n)
{
    cr_status_t st;
    while (p->pos < p->n) {
        line_t *l = &p->lines[p->pos];
        if (l->indent < indent || !is_seq_item(l->text))
            break;
        if (l->indent > indent)
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "line %d: unexpected indentation", l->no);
        int k = 1;
        while (l->text[k] == ' ')
            k++;
        dc_yaml_t *item = NULL;
        if (!l->text[k]) {
            p->pos++;
            st = nested_value(p, indent, false, l->no, &item);
        } else {
            char *key = NULL;
            bool failed;
            size_t colon = map_key(l->text + k, &key, l->no, p->err, &failed);
            free(key);
            if (failed)
                return p->err ? p->err->status : CR_E_CORRUPT;
            if (colon || is_seq_item(l->text + k)) {
                /* "- key: v" or "- - x": the item is a block starting at
                 * the column after the dash. */
                l->indent += k;
                l->text += k;
                st = parse_block(p, l->indent, &item);
            } else {
                p->pos++;
                st = inline_value(p, l->text + k, l->no, &item);
                if (!st)
                    st = no_continuation(p, indent);
            }
        }
        if (st) {
            dc_yaml_free(&item);
            return st;
        }
        if ((st = node_add(n, NULL, item, p->err)))
            return st;
    }
    return CR_OK;
}

static cr_status_t parse_map(parser_t *p, int indent, dc_yaml_t *n)
{
    cr_status_t st;
    while (p->pos < p->n) {
        line_t *l = &p->lines[p->pos];
        if (l->indent < indent)
            break;
        if (l->indent > indent)
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "line %d: unexpected indentation", l->no);
        if (is_seq_item(l->text))
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "line %d: a sequence item where a mapping key "
                              "was expected", l->no);
        char *key;
        bool failed;
        size_t colon = map_key(l->text, &key, l->no, p->err, &failed);
        if (failed)
            return p->err ? p->err->status : CR_E_CORRUPT;
        if (!colon)
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "line %d: expected 'key: value', got '%.60s'",
                              l->no, l->text);
        const char *rest = l->text + colon + 1;
        while (*rest == ' ')
            rest++;
        char *tag = NULL;
        if (*rest == '!') {
            size_t tl = strcspn(rest, " ");
            tag = strndup(rest, tl);
            rest += tl;
            while (*rest == ' ')
                rest++;
        }
        p->pos++;
        dc_yaml_t *val = NULL;
        if (!*rest) {
            st = nested_value(p, indent, true, l->no, &val);
        } else {
            st = inline_value(p, rest, l->no, &val);
            if (!st)
                st = no_continuation(p, indent);
        }
        if (st) {
            free(key);
            free(tag);
            dc_yaml_free(&val);
            return st;
        }
        val->tag = tag;
        if ((st = node_add(n, key, val, p->err)))
            return st;
    }
    return CR_OK;
}

static cr_status_t parse_block(parser_t *p, int indent, dc_yaml_t **out)
{
    *out = NULL;
    if (++p->depth > DC_YAML_MAX_DEPTH)
        return cr_err_set(p->err, CR_E_TOO_LARGE,
                          "line %d: nested too deeply",
                          p->lines[p->pos].no);
    line_t *l = &p->lines[p->pos];
    bool seq = is_seq_item(l->text);
    dc_yaml_t *n = node_new(seq ? DC_YAML_SEQ : DC_YAML_MAP, l->no);
    if (!n)
        return cr_err_set(p->err, CR_E_NOMEM, "out of memory");
    cr_status_t st = seq ? parse_seq(p, indent, n) : parse_map(p, indent, n);
    p->depth--;
    if (st) {
        dc_yaml_free(&n);
        return st;
    }
    *out = n;
    return CR_OK;
}

cr_status_t dc_yaml_parse(const char *text, size_t len, dc_yaml_t **out,
                          cr_err_t *err)
{
    *out = NULL;
    if (len > DC_YAML_MAX_BYTES)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "YAML input is %zu bytes, over %u", len,
                          DC_YAML_MAX_BYTES);
    cr_err_t local;
    parser_t p = {0};
    p.err = err ? err : &local;
    cr_status_t st = split_lines(&p, text, len);
    if (!st && p.n == 0) {
        *out = node_new(DC_YAML_NULL, 1);
        st = *out ? CR_OK : cr_err_set(p.err, CR_E_NOMEM, "out of memory");
    } else if (!st) {
        line_t *first = &p.lines[0];
        if (!is_seq_item(first->text)) {
            char *key;
            bool failed;
            size_t colon = map_key(first->text, &key, first->no, p.err,
                                   &failed);
            free(key);
            if (failed)
                st = p.err->status;
            else if (!colon) /* a lone scalar document */
                st = cr_err_set(p.err, CR_E_CORRUPT,
                                "line %d: expected a mapping or sequence",
                                first->no);
        }
        if (!st)
            st = parse_block(&p, first->indent, out);
        if (!st && p.pos < p.n) {
            st = cr_err_set(p.err, CR_E_CORRUPT,
                            "line %d: unexpected indentation",
                            p.lines[p.pos].no);
            dc_yaml_free(out);
        }
    }
    lines_free(&p);
    return st;
}
