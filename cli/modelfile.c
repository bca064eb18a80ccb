/* modelfile.c: Modelfile lexer, checks and writer (see modelfile.h). */
#include "lib/prelude.h"
#include "cli/modelfile.h"
#include "lib/buf.h"
#include "lib/gotext.h"
#include "lib/options.h"

#include <ctype.h>
#include <math.h>
#include <pwd.h>
#include <unistd.h>

/* ---- parameters: the rows of lib/options.def (§2) ---- */

cli_param_type_t cli_param_type(const char *name)
{
    static const cli_param_type_t by_type[] = {
        [CR_OPT_INT] = CLI_PARAM_INT,
        [CR_OPT_FLOAT] = CLI_PARAM_FLOAT,
        [CR_OPT_BOOL] = CLI_PARAM_BOOL,
        [CR_OPT_STRS] = CLI_PARAM_STRINGS,
    };
    const cr_opt_def_t *d = cr_opt_find(name);
    if (d)
        return by_type[d->type];
    bool warns = false;
    if (cr_opt_is_removed(name, &warns) && warns)
        return CLI_PARAM_DEPRECATED;
    return CLI_PARAM_UNKNOWN;
}

/* Go's strconv.ParseBool. */
static bool parse_go_bool(const char *s, bool *v)
{
    static const char *const t[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const f[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < CR_ARRAY_LEN(t); i++) {
        if (!strcmp(s, t[i])) {
            *v = true;
            return true;
        }
        if (!strcmp(s, f[i])) {
            *v = false;
            return true;
        }
    }
    return false;
}

cr_status_t cli_param_value(const char *name, const char *text, json_t **out,
                            cr_err_t *err)
{
    *out = NULL;
    char *end;
    switch (cli_param_type(name)) {
    case CLI_PARAM_UNKNOWN:
        return cr_err_set(err, CR_E_INVALID, "unknown parameter '%s'", name);
    case CLI_PARAM_DEPRECATED:
        return cr_err_set(err, CR_E_UNSUPPORTED, "parameter %s is deprecated", name);
    case CLI_PARAM_INT: {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (!*text || *end || errno || isspace((unsigned char)*text))
            return cr_err_set(err, CR_E_INVALID, "invalid int value [%s] for parameter '%s'",
                              text, name);
        *out = json_integer(v);
        break;
    }
    case CLI_PARAM_FLOAT: {
        errno = 0;
        double v = strtod(text, &end);
        if (!*text || *end || isspace((unsigned char)*text) || !isfinite(v))
            return cr_err_set(err, CR_E_INVALID,
                              "invalid float value [%s] for parameter '%s'", text, name);
        *out = json_real(v);
        break;
    }
    case CLI_PARAM_BOOL: {
        bool v;
        if (!parse_go_bool(text, &v))
            return cr_err_set(err, CR_E_INVALID, "invalid bool value [%s] for parameter '%s'",
                              text, name);
        *out = json_boolean(v);
        break;
    }
    case CLI_PARAM_STRINGS:
        *out = json_string(text);
        break;
    }
    if (!*out)
        return cr_err_set(err, CR_E_NOMEM, "out of memory (or invalid UTF-8) in parameter '%s'",
                          name);
    return CR_OK;
}

/* ---- command list ---- */

static const char *const kind_names[] = {
    [CLI_MF_FROM] = "FROM",         [CLI_MF_PARAMETER] = "PARAMETER",
    [CLI_MF_TEMPLATE] = "TEMPLATE", [CLI_MF_SYSTEM] = "SYSTEM",
    [CLI_MF_ADAPTER] = "ADAPTER",   [CLI_MF_LICENSE] = "LICENSE",
    [CLI_MF_MESSAGE] = "MESSAGE",   [CLI_MF_REQUIRES] = "REQUIRES",
    [CLI_MF_RENDERER] = "RENDERER", [CLI_MF_PARSER] = "PARSER",
    [CLI_MF_DRAFT] = "DRAFT",
};

const char *cli_mf_kind_name(cli_mf_kind_t kind)
{
    if ((size_t)kind < CR_ARRAY_LEN(kind_names) && kind_names[kind])
        return kind_names[kind];
    return "?";
}

static bool kind_from_word(const char *w, cli_mf_kind_t *kind)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(kind_names); i++) {
        if (!strcasecmp(w, kind_names[i])) {
            *kind = (cli_mf_kind_t)i;
            return true;
        }
    }
    return false;
}

cli_modelfile_t *cli_modelfile_new(void)
{
    return calloc(1, sizeof(cli_modelfile_t));
}

cr_status_t cli_modelfile_add(cli_modelfile_t *mf, cli_mf_kind_t kind, const char *name,
                              const char *args, int line)
{
    if (mf->n >= CLI_MF_MAX_COMMANDS)
        return CR_E_TOO_LARGE;
    if (mf->n == mf->cap) {
        size_t cap = mf->cap ? mf->cap * 2 : 16;
        cli_mf_command_t *p = realloc(mf->cmds, cap * sizeof *p);
        if (!p)
            return CR_E_NOMEM;
        mf->cmds = p;
        mf->cap = cap;
    }
    cli_mf_command_t *c = &mf->cmds[mf->n];
    c->kind = kind;
    c->line = line;
    c->name = name ? strdup(name) : NULL;
    c->args = strdup(args ? args : "");
    if ((name && !c->name) || !c->args) {
        free(c->name);
        free(c->args);
        return CR_E_NOMEM;
    }
    mf->n++;
    return CR_OK;
}

static cr_status_t add_warning(cli_modelfile_t *mf, const char *msg)
{
    char **p = realloc(mf->warnings, (mf->n_warnings + 1) * sizeof *p);
    if (!p)
        return CR_E_NOMEM;
    mf->warnings = p;
    if (!(p[mf->n_warnings] = strdup(msg)))
        return CR_E_NOMEM;
    mf->n_warnings++;
    return CR_OK;
}

void cli_modelfile_destroy(cli_modelfile_t **mf_p)
{
    if (!mf_p || !*mf_p)
        return;
    cli_modelfile_t *mf = *mf_p;
    for (size_t i = 0; i < mf->n; i++) {
        free(mf->cmds[i].name);
        free(mf->cmds[i].args);
    }
    for (size_t i = 0; i < mf->n_warnings; i++)
        free(mf->warnings[i]);
    free(mf->warnings);
    free(mf->cmds);
    free(mf);
    *mf_p = NULL;
}

/* ---- decoding to UTF-8 code points ---- */

static cr_status_t put_utf8(cr_buf_t *b, uint32_t cp)
{
    char s[4];
    return cr_buf_append(b, s, cr_utf8_encode(cp, s));
}

/* Decodes one UTF-8 code point at p (n bytes left); invalid or truncated
 * sequences decode as U+FFFD consuming one byte, as Go does. */
static uint32_t next_cp(const unsigned char *p, size_t n, size_t *used)
{
    uint32_t cp;
    *used = cr_utf8_decode(p, n, &cp);
    if (*used)
        return cp;
    *used = 1;
    return 0xFFFD;
}

/* Turns the file bytes into clean UTF-8: BOM removed, UTF-16 converted. */
static cr_status_t to_utf8(const unsigned char *t, size_t len, cr_buf_t *out)
{
    cr_status_t st = CR_OK;
    if (len >= 2 && ((t[0] == 0xFF && t[1] == 0xFE) || (t[0] == 0xFE && t[1] == 0xFF))) {
        bool le = t[0] == 0xFF;
        for (size_t i = 2; i + 1 < len && !st; i += 2) {
            uint32_t u = le ? (uint32_t)(t[i] | (t[i + 1] << 8))
                            : (uint32_t)((t[i] << 8) | t[i + 1]);
            if (u >= 0xD800 && u <= 0xDBFF && i + 3 < len) {
                uint32_t lo = le ? (uint32_t)(t[i + 2] | (t[i + 3] << 8))
                                 : (uint32_t)((t[i + 2] << 8) | t[i + 3]);
                if (lo >= 0xDC00 && lo <= 0xDFFF) {
                    u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00);
                    i += 2;
                } else {
                    u = 0xFFFD;
                }
            } else if (u >= 0xD800 && u <= 0xDFFF) {
                u = 0xFFFD;
            }
            st = put_utf8(out, u);
        }
        if (!st && (len & 1))
            st = put_utf8(out, 0xFFFD); /* a dangling odd byte */
        return st;
    }
    size_t i = 0;
    if (len >= 3 && t[0] == 0xEF && t[1] == 0xBB && t[2] == 0xBF)
        i = 3;
    while (i < len && !st) {
        size_t used;
        uint32_t cp = next_cp(t + i, len - i, &used);
        st = put_utf8(out, cp);
        i += used;
    }
    return st;
}

/* ---- the lexer ---- */

typedef enum lex_state {
    ST_NIL,
    ST_NAME,
    ST_VALUE,
    ST_PARAMETER,
    ST_MESSAGE,
    ST_COMMENT,
} lex_state_t;

static bool is_space(uint32_t c)
{
    return c == ' ' || c == '\t';
}

static bool is_newline(uint32_t c)
{
    return c == '\r' || c == '\n';
}

static bool is_alpha(uint32_t c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Printable as Go's strconv.IsPrint sees the characters that matter here:
 * C0 and C1 controls and DEL are dropped. */
static bool is_print(uint32_t c)
{
    return c >= 0x20 && c != 0x7F && !(c >= 0x80 && c <= 0x9F);
}

/* Trims ASCII whitespace in place; returns the trimmed start. */
static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    s[n] = '\0';
    return s;
}

/* Removes `"""` or `"` quotes from a trimmed value in place; false if an
 * opening quote has no closing one yet. */
static bool unquote(char *s, char **inner)
{
    size_t n = strlen(s);
    if (n >= 3 && !strncmp(s, "\"\"\"", 3)) {
        if (n >= 6 && !strcmp(s + n - 3, "\"\"\"")) {
            s[n - 3] = '\0';
            *inner = s + 3;
            return true;
        }
        return false;
    }
    if (n >= 1 && s[0] == '"') {
        if (n >= 2 && s[n - 1] == '"') {
            s[n - 1] = '\0';
            *inner = s + 1;
            return true;
        }
        return false;
    }
    *inner = s;
    return true;
}

/* Checks a REQUIRES value as semver ("v" optional): MAJOR.MINOR.PATCH with
 * optional -prerelease and +build, no leading zeros in numbers. Also accepts
 * "1" and "1.2", as golang.org/x/mod/semver does. */
static bool valid_semver(const char *s)
{
    if (*s == 'v')
        s++;
    for (int part = 0; part < 3; part++) {
        if (!isdigit((unsigned char)*s))
            return false;
        if (*s == '0' && isdigit((unsigned char)s[1]))
            return false;
        while (isdigit((unsigned char)*s))
            s++;
        if (part < 2 && *s == '.') {
            s++;
            continue;
        }
        if (!*s)
            return true;
        if (part < 2)
            return false;
    }
    if (*s == '-') {
        s++;
        if (!*s)
            return false;
        while (*s && *s != '+') {
            if (!isalnum((unsigned char)*s) && *s != '-' && *s != '.')
                return false;
            s++;
        }
    }
    if (*s == '+') {
        s++;
        if (!*s)
            return false;
        while (*s) {
            if (!isalnum((unsigned char)*s) && *s != '-' && *s != '.')
                return false;
            s++;
        }
    }
    return *s == '\0';
}

typedef struct lexer {
    cli_modelfile_t *mf;
    cr_buf_t tok;          /* current word or value */
    cli_mf_kind_t kind;    /* instruction being read */
    char pname[256];       /* PARAMETER name or MESSAGE role */
    int cmd_line;          /* line the instruction started on */
    cr_err_t *err;
} lexer_t;

/* A finished value: unquote, check, append. */
static cr_status_t finish_command(lexer_t *lx, char *value)
{
    cli_modelfile_t *mf = lx->mf;
    const char *name = NULL;
    if (lx->kind == CLI_MF_PARAMETER) {
        name = lx->pname;
        json_t *v = NULL;
        cr_err_t perr;
        cr_status_t st = cli_param_value(name, value, &v, &perr);
        json_decref(v);
        if (st == CR_E_UNSUPPORTED) {
            st = add_warning(mf, perr.msg);
            if (st)
                return cr_err_set(lx->err, st, "out of memory");
        } else if (st) {
            return cr_err_set(lx->err, st, "(line %d): %s", lx->cmd_line, perr.msg);
        }
    } else if (lx->kind == CLI_MF_MESSAGE) {
        name = lx->pname;
    } else if (lx->kind == CLI_MF_REQUIRES && !valid_semver(value)) {
        return cr_err_set(lx->err, CR_E_INVALID,
                          "(line %d): requires must be a valid semver (e.g. 0.14.0)",
                          lx->cmd_line);
    }
    cr_status_t st = cli_modelfile_add(mf, lx->kind, name, value, lx->cmd_line);
    if (st == CR_E_TOO_LARGE)
        return cr_err_set(lx->err, st, "(line %d): more than %d instructions", lx->cmd_line,
                          CLI_MF_MAX_COMMANDS);
    if (st)
        return cr_err_set(lx->err, st, "out of memory");
    return CR_OK;
}

static const char *const invalid_command_msg =
    "command must be one of \"from\", \"license\", \"template\", \"system\", \"adapter\", "
    "\"draft\", \"renderer\", \"parser\", \"parameter\", \"message\", or \"requires\"";

/* Handles the end of the instruction word (at a space). */
static cr_status_t end_name(lexer_t *lx, lex_state_t *next)
{
    cli_mf_kind_t kind;
    if (!kind_from_word(lx->tok.data ? lx->tok.data : "", &kind))
        return cr_err_set(lx->err, CR_E_INVALID, "(line %d): %s", lx->cmd_line,
                          invalid_command_msg);
    lx->kind = kind;
    lx->pname[0] = '\0';
    *next = kind == CLI_MF_PARAMETER ? ST_PARAMETER
          : kind == CLI_MF_MESSAGE   ? ST_MESSAGE
                                     : ST_VALUE;
    return CR_OK;
}

cr_status_t cli_modelfile_parse(const char *text, size_t len, cli_modelfile_t **out,
                                cr_err_t *err)
{
    *out = NULL;
    if (len > CLI_MF_MAX_BYTES)
        return cr_err_set(err, CR_E_TOO_LARGE, "Modelfile is %zu bytes, at most %u", len,
                          CLI_MF_MAX_BYTES);
    cr_buf_t u;
    cr_buf_init(&u, (size_t)CLI_MF_MAX_BYTES * 2 + 16);
    cr_status_t st = to_utf8((const unsigned char *)text, len, &u);
    if (st) {
        cr_buf_free(&u);
        return cr_err_set(err, st, "Modelfile: out of memory decoding");
    }
    lexer_t lx = {.mf = cli_modelfile_new(), .err = err};
    cr_buf_init(&lx.tok, (size_t)CLI_MF_MAX_BYTES * 2 + 16);
    if (!lx.mf) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }

    lex_state_t state = ST_NIL;
    int line = 1;
    const unsigned char *p = (const unsigned char *)(u.data ? u.data : "");
    size_t n = u.len;
    for (size_t i = 0; i < n;) {
        size_t used;
        uint32_t c = next_cp(p + i, n - i, &used);
        i += used;
        bool nl = c == '\n' || (c == '\r' && !(i < n && p[i] == '\n'));
        bool append = false;

        switch (state) {
        case ST_NIL:
            if (c == '#') {
                state = ST_COMMENT;
            } else if (!is_space(c) && !is_newline(c)) {
                state = ST_NAME;
                lx.cmd_line = line;
                cr_buf_reset(&lx.tok);
                append = true;
            }
            break;
        case ST_COMMENT:
            if (is_newline(c))
                state = ST_NIL;
            break;
        case ST_NAME:
            if (is_alpha(c)) {
                append = true;
            } else if (is_space(c)) {
                lex_state_t next = ST_NIL;
                if ((st = end_name(&lx, &next)))
                    goto out;
                state = next;
                cr_buf_reset(&lx.tok);
            } else {
                st = cr_err_set(err, CR_E_INVALID, "(line %d): %s", lx.cmd_line,
                                invalid_command_msg);
                goto out;
            }
            break;
        case ST_PARAMETER:
        case ST_MESSAGE:
            if (is_space(c) && !lx.tok.len) {
                break; /* extra blanks before the name */
            } else if (state == ST_PARAMETER && c < 0x80 && (isalnum((int)c) || c == '_')) {
                append = true;
            } else if (state == ST_MESSAGE && is_alpha(c)) {
                append = true;
            } else if (is_space(c)) {
                const char *w = lx.tok.data;
                if (state == ST_MESSAGE && strcmp(w, "system") && strcmp(w, "user") &&
                    strcmp(w, "assistant")) {
                    st = cr_err_set(err, CR_E_INVALID,
                                    "(line %d): message role must be one of \"system\", "
                                    "\"user\", or \"assistant\"",
                                    lx.cmd_line);
                    goto out;
                }
                if (lx.tok.len >= sizeof lx.pname) {
                    st = cr_err_set(err, CR_E_INVALID, "(line %d): name too long",
                                    lx.cmd_line);
                    goto out;
                }
                memcpy(lx.pname, w, lx.tok.len + 1);
                cr_buf_reset(&lx.tok);
                state = ST_VALUE;
            } else if (state == ST_MESSAGE) {
                st = cr_err_set(err, CR_E_INVALID,
                                "(line %d): message role must be one of \"system\", "
                                "\"user\", or \"assistant\"",
                                lx.cmd_line);
                goto out;
            } else if (is_newline(c)) {
                st = cr_err_set(err, CR_E_INVALID, "(line %d): missing value for PARAMETER %s",
                                lx.cmd_line, lx.tok.data ? lx.tok.data : "");
                goto out;
            } else {
                st = cr_err_set(err, CR_E_INVALID,
                                "(line %d): invalid character in parameter name",
                                lx.cmd_line);
                goto out;
            }
            break;
        case ST_VALUE:
            if (is_newline(c)) {
                /* The value ends here if its quotes are balanced. */
                char *copy = strdup(lx.tok.data ? lx.tok.data : "");
                if (!copy) {
                    st = cr_err_set(err, CR_E_NOMEM, "out of memory");
                    goto out;
                }
                char *inner;
                if (unquote(trim(copy), &inner)) {
                    st = finish_command(&lx, inner);
                    free(copy);
                    if (st)
                        goto out;
                    cr_buf_reset(&lx.tok);
                    state = ST_NIL;
                } else {
                    free(copy);
                    append = true; /* newlines inside quotes are kept */
                }
            } else {
                append = is_space(c) || is_print(c);
            }
            break;
        }
        if (append && (st = put_utf8(&lx.tok, c))) {
            st = cr_err_set(err, st, "(line %d): value too large", lx.cmd_line);
            goto out;
        }
        if (nl)
            line++;
    }

    /* End of input. */
    switch (state) {
    case ST_NIL:
    case ST_COMMENT:
        break;
    case ST_VALUE: {
        char *copy = strdup(lx.tok.data ? lx.tok.data : "");
        if (!copy) {
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
            goto out;
        }
        char *inner;
        if (unquote(trim(copy), &inner))
            st = finish_command(&lx, inner);
        else
            st = cr_err_set(err, CR_E_INVALID, "(line %d): unexpected EOF: unterminated quote",
                            lx.cmd_line);
        free(copy);
        if (st)
            goto out;
        break;
    }
    default:
        st = cr_err_set(err, CR_E_INVALID, "(line %d): unexpected EOF", lx.cmd_line);
        goto out;
    }

    bool has_from = false;
    for (size_t i = 0; i < lx.mf->n; i++)
        has_from |= lx.mf->cmds[i].kind == CLI_MF_FROM;
    if (!has_from) {
        st = cr_err_set(err, CR_E_INVALID, "no FROM line");
        goto out;
    }
    *out = lx.mf;
    lx.mf = NULL;
    st = CR_OK;
out:
    cli_modelfile_destroy(&lx.mf);
    cr_buf_free(&lx.tok);
    cr_buf_free(&u);
    return st;
}

/* ---- writing back ---- */

/* Quotes a value so it parses back to itself. */
static cr_status_t put_quoted(cr_buf_t *b, const char *s)
{
    size_t n = strlen(s);
    bool edge = n && (isspace((unsigned char)s[0]) || isspace((unsigned char)s[n - 1]));
    bool needs = strchr(s, '\n') || strchr(s, '\r') || edge || s[0] == '"';
    if (!needs)
        return cr_buf_puts(b, s);
    if (strchr(s, '"'))
        return cr_buf_printf(b, "\"\"\"%s\"\"\"", s);
    return cr_buf_printf(b, "\"%s\"", s);
}

char *cli_modelfile_serialize(const cli_modelfile_t *mf)
{
    cr_buf_t b;
    cr_buf_init(&b, (size_t)CLI_MF_MAX_BYTES * 4);
    cr_status_t st = cr_buf_puts(&b, "");
    for (size_t i = 0; i < mf->n && !st; i++) {
        const cli_mf_command_t *c = &mf->cmds[i];
        switch (c->kind) {
        case CLI_MF_FROM: /* quoted too: a FROM of `"\t"x` is the text \tx */
            st = cr_buf_puts(&b, "FROM ");
            if (!st)
                st = put_quoted(&b, c->args);
            break;
        case CLI_MF_PARAMETER:
        case CLI_MF_MESSAGE:
            st = cr_buf_printf(&b, "%s %s ", cli_mf_kind_name(c->kind),
                               c->name ? c->name : "");
            if (!st)
                st = put_quoted(&b, c->args);
            break;
        default:
            st = cr_buf_printf(&b, "%s ", cli_mf_kind_name(c->kind));
            if (!st)
                st = put_quoted(&b, c->args);
            break;
        }
        if (!st)
            st = cr_buf_putc(&b, '\n');
    }
    if (st) {
        cr_buf_free(&b);
        return NULL;
    }
    return cr_buf_steal(&b);
}

cr_status_t cli_modelfile_params_json(const cli_modelfile_t *mf, json_t **out,
                                      cr_err_t *err)
{
    json_t *params = json_object();
    if (!params)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (size_t i = 0; i < mf->n; i++) {
        const cli_mf_command_t *c = &mf->cmds[i];
        if (c->kind != CLI_MF_PARAMETER)
            continue;
        json_t *v = NULL;
        cr_err_t perr;
        cr_status_t st = cli_param_value(c->name, c->args, &v, &perr);
        if (st == CR_E_UNSUPPORTED)
            continue;
        if (st) {
            json_decref(params);
            if (c->line)
                return cr_err_set(err, st, "(line %d): %s", c->line, perr.msg);
            return cr_err_set(err, st, "%s", perr.msg);
        }
        int rc;
        if (cli_param_type(c->name) == CLI_PARAM_STRINGS) {
            json_t *arr = json_object_get(params, c->name);
            if (!arr) {
                arr = json_array();
                rc = json_object_set_new(params, c->name, arr);
                if (rc || !arr) {
                    json_decref(v);
                    json_decref(params);
                    return cr_err_set(err, CR_E_NOMEM, "out of memory");
                }
            }
            rc = json_array_append_new(arr, v);
        } else {
            rc = json_object_set_new(params, c->name, v);
        }
        if (rc) {
            json_decref(params);
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        }
    }
    *out = params;
    return CR_OK;
}

/* ---- paths ---- */

/* Lexically cleans an absolute path in place (Go's filepath.Clean). */
static void clean_path(char *path)
{
    char *segs[4096];
    size_t nseg = 0;
    char *save = NULL;
    char tmp[PATH_MAX * 2];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *s = strtok_r(tmp, "/", &save); s; s = strtok_r(NULL, "/", &save)) {
        if (!strcmp(s, "."))
            continue;
        if (!strcmp(s, "..")) {
            if (nseg)
                nseg--;
            continue;
        }
        if (nseg < CR_ARRAY_LEN(segs))
            segs[nseg++] = s;
    }
    char *o = path;
    if (!nseg) {
        strcpy(path, "/");
        return;
    }
    for (size_t i = 0; i < nseg; i++) {
        size_t l = strlen(segs[i]);
        *o++ = '/';
        memmove(o, segs[i], l);
        o += l;
    }
    *o = '\0';
}

static const char *home_dir(void)
{
    const char *h = getenv("HOME");
    if (h && *h)
        return h;
    struct passwd *pw = getpwuid(getuid());
    return pw && pw->pw_dir ? pw->pw_dir : "/";
}

cr_status_t cli_mf_expand_path(const char *path, const char *rel_dir, char *out,
                               size_t cap, cr_err_t *err)
{
    char joined[PATH_MAX * 2];
    int n;
    if (path[0] == '/') {
        n = snprintf(joined, sizeof joined, "%s", path);
    } else if (path[0] == '~') {
        const char *rest = path + 1;
        const char *home;
        if (*rest == '\0' || *rest == '/') {
            home = home_dir();
        } else {
            char user[256];
            size_t ul = strcspn(rest, "/");
            if (ul >= sizeof user)
                return cr_err_set(err, CR_E_NOT_FOUND, "failed to find user '%.*s'",
                                  (int)CR_MIN(ul, 64), rest);
            memcpy(user, rest, ul);
            user[ul] = '\0';
            struct passwd *pw = getpwnam(user);
            if (!pw || !pw->pw_dir)
                return cr_err_set(err, CR_E_NOT_FOUND, "failed to find user '%s'", user);
            home = pw->pw_dir;
            rest += ul;
        }
        n = snprintf(joined, sizeof joined, "%s/%s", home, rest);
    } else {
        char cwd[PATH_MAX];
        const char *dir = rel_dir && *rel_dir ? rel_dir : ".";
        if (dir[0] != '/') {
            if (!getcwd(cwd, sizeof cwd))
                return cr_err_set(err, CR_E_IO, "cannot read the working directory: %s",
                                  strerror(errno));
            n = snprintf(joined, sizeof joined, "%s/%s/%s", cwd, dir, path);
        } else {
            n = snprintf(joined, sizeof joined, "%s/%s", dir, path);
        }
    }
    if (n < 0 || (size_t)n >= sizeof joined)
        return cr_err_set(err, CR_E_TOO_LARGE, "path too long: %s", path);
    if (joined[0] != '/') { /* a relative HOME */
        char cwd[PATH_MAX], tmp[PATH_MAX * 2];
        if (!getcwd(cwd, sizeof cwd))
            return cr_err_set(err, CR_E_IO, "cannot read the working directory: %s",
                              strerror(errno));
        n = snprintf(tmp, sizeof tmp, "%s/%s", cwd, joined);
        if (n < 0 || (size_t)n >= sizeof tmp)
            return cr_err_set(err, CR_E_TOO_LARGE, "path too long: %s", path);
        memcpy(joined, tmp, (size_t)n + 1);
    }
    clean_path(joined);
    if (strlen(joined) >= cap)
        return cr_err_set(err, CR_E_TOO_LARGE, "path too long: %s", path);
    snprintf(out, cap, "%s", joined);
    return CR_OK;
}
