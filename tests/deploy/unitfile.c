/* unitfile.c: systemd unit and environment file syntax (see unitfile.h). */
#include "lib/prelude.h"
#include "tests/deploy/unitfile.h"

#include <ctype.h>

cr_status_t dc_read_file(const char *path, size_t max, char **out,
                         size_t *len, cr_err_t *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_err_set(err, CR_E_IO, "%s: %s", path, strerror(errno));
    char *buf = malloc(max + 1);
    if (!buf) {
        fclose(f);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    size_t n = fread(buf, 1, max + 1, f);
    bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return cr_err_set(err, CR_E_IO, "%s: read error", path);
    }
    if (n > max) {
        free(buf);
        return cr_err_set(err, CR_E_TOO_LARGE, "%s: over %zu bytes", path,
                          max);
    }
    buf[n] = '\0';
    *out = buf;
    if (len)
        *len = n;
    return CR_OK;
}

/* ---- words ---- */

void dc_words_free(dc_words_t *w)
{
    for (size_t i = 0; i < w->n; i++)
        free(w->w[i]);
    memset(w, 0, sizeof *w);
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* One C escape after '\' at *sp; appends to out. False if unknown. */
static bool unescape(const char **sp, char *out, size_t *n)
{
    char c = *(*sp)++;
    switch (c) {
    case 'n': out[(*n)++] = '\n'; return true;
    case 't': out[(*n)++] = '\t'; return true;
    case 'r': out[(*n)++] = '\r'; return true;
    case '\\': case '"': case '\'': case ' ': case ';': case '$':
        out[(*n)++] = c;
        return true;
    default:
        return false;
    }
}

cr_status_t dc_split_words(const char *s, dc_words_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    size_t cap = strlen(s) + 1;
    for (;;) {
        while (is_blank(*s))
            s++;
        if (!*s)
            return CR_OK;
        if (out->n >= DC_ARGV_MAX) {
            dc_words_free(out);
            return cr_err_set(err, CR_E_TOO_LARGE, "over %d words",
                              DC_ARGV_MAX);
        }
        char *w = malloc(cap);
        if (!w) {
            dc_words_free(out);
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        }
        size_t n = 0;
        char q = 0;
        while (*s && (q || !is_blank(*s))) {
            char c = *s++;
            if (q && c == q) {
                q = 0;
            } else if (!q && (c == '"' || c == '\'')) {
                q = c;
            } else if (c == '\\' && q != '\'') {
                if (!*s || !unescape(&s, w, &n)) {
                    free(w);
                    dc_words_free(out);
                    return cr_err_set(err, CR_E_INVALID,
                                      "bad escape in '%.80s'", s - 1);
                }
            } else {
                w[n++] = c;
            }
        }
        if (q) {
            free(w);
            dc_words_free(out);
            return cr_err_set(err, CR_E_INVALID, "unterminated %c quote", q);
        }
        w[n] = '\0';
        out->w[out->n++] = w;
    }
}

cr_status_t dc_split_exec(const char *s, dc_words_t *argv, char prefix[8],
                          cr_err_t *err)
{
    while (is_blank(*s))
        s++;
    size_t k = 0;
    while (*s && strchr("-@:+!", *s) && k < 7)
        prefix[k++] = *s++;
    prefix[k] = '\0';
    cr_status_t st = dc_split_words(s, argv, err);
    if (!st && argv->n == 0)
        st = cr_err_set(err, CR_E_INVALID, "empty command line");
    return st;
}

/* ---- unit files ---- */

void dc_unit_free(dc_unit_t **u)
{
    if (!u || !*u)
        return;
    for (size_t i = 0; i < (*u)->n; i++)
        free((*u)->e[i].value);
    free((*u)->e);
    free(*u);
    *u = NULL;
}

static char *trim(char *s)
{
    while (is_blank(*s))
        s++;
    size_t n = strlen(s);
    while (n && is_blank(s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* Adds one "key=value" (already joined and trimmed) to u. */
static cr_status_t unit_add(dc_unit_t *u, const char *path, int no,
                            const char *section, char *t, cr_err_t *err)
{
    char *eq = strchr(t, '=');
    if (!eq)
        return cr_err_set(err, CR_E_INVALID, "%s:%d: no '=' in '%.80s'",
                          path, no, t);
    if (!section[0])
        return cr_err_set(err, CR_E_INVALID,
                          "%s:%d: assignment outside a section", path, no);
    *eq = '\0';
    char *key = trim(t), *val = trim(eq + 1);
    if (!*key || strlen(key) >= sizeof u->e[0].key)
        return cr_err_set(err, CR_E_INVALID, "%s:%d: bad key", path, no);
    dc_unit_entry_t *e = realloc(u->e, (u->n + 1) * sizeof *e);
    if (!e)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    u->e = e;
    char *v = strdup(val);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    dc_unit_entry_t *ne = &u->e[u->n++];
    snprintf(ne->section, sizeof ne->section, "%s", section);
    snprintf(ne->key, sizeof ne->key, "%s", key);
    ne->value = v;
    ne->line = no;
    return CR_OK;
}

cr_status_t dc_unit_load(const char *path, dc_unit_t **out, cr_err_t *err)
{
    *out = NULL;
    char *text;
    size_t len;
    cr_status_t st = dc_read_file(path, DC_UNIT_MAX_BYTES, &text, &len, err);
    if (st)
        return st;
    dc_unit_t *u = calloc(1, sizeof *u);
    char *joined = malloc(len + 1); /* continuation lines joined here */
    if (!u || !joined) {
        free(u);
        free(joined);
        free(text);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    char section[64] = "";
    int no = 0, first_no = 0;
    size_t jl = 0;
    bool continuing = false;
    char *p = text;
    while (*p && !st) {
        no++;
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        char *t = trim(p);
        p = nl ? nl + 1 : p + strlen(p);
        if (*t == '#' || *t == ';')
            continue; /* comments, also inside a continuation */
        if (!continuing) {
            if (!*t)
                continue;
            first_no = no;
            jl = 0;
        }
        size_t tl = strlen(t);
        memcpy(joined + jl, t, tl);
        jl += tl;
        joined[jl] = '\0';
        continuing = jl && joined[jl - 1] == '\\';
        if (continuing) {
            joined[jl - 1] = ' ';
            if (*p)
                continue;
        }
        continuing = false;
        char *j = trim(joined);
        if (*j == '[') {
            size_t n = strlen(j);
            if (n < 3 || j[n - 1] != ']' || n - 2 >= sizeof section) {
                st = cr_err_set(err, CR_E_INVALID, "%s:%d: bad section '%.80s'",
                                path, first_no, j);
                break;
            }
            memcpy(section, j + 1, n - 2);
            section[n - 2] = '\0';
            continue;
        }
        st = unit_add(u, path, first_no, section, j, err);
    }
    free(joined);
    free(text);
    if (st)
        dc_unit_free(&u);
    *out = u;
    return st;
}

const char *dc_unit_get(const dc_unit_t *u, const char *section,
                        const char *key)
{
    const char *v = NULL;
    for (size_t i = 0; i < u->n; i++)
        if (!strcmp(u->e[i].section, section) && !strcmp(u->e[i].key, key))
            v = u->e[i].value;
    return v;
}

size_t dc_unit_get_all(const dc_unit_t *u, const char *section,
                       const char *key, const char **out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < u->n; i++) {
        if (strcmp(u->e[i].section, section) || strcmp(u->e[i].key, key))
            continue;
        if (!u->e[i].value[0]) {
            n = 0; /* an empty assignment resets the list */
            continue;
        }
        if (n < cap)
            out[n++] = u->e[i].value;
    }
    return n;
}

cr_status_t dc_expand_specifiers(const char *s, const dc_specifiers_t *sp,
                                 char *out, size_t cap, cr_err_t *err)
{
    size_t n = 0;
    for (; *s; s++) {
        const char *add;
        char one[2] = {*s, '\0'};
        if (*s != '%') {
            add = one;
        } else {
            s++;
            switch (*s) {
            case 't': add = sp->runtime_root; break;
            case 'S': add = sp->state_root; break;
            case 'h': add = sp->home; break;
            case 'n': add = sp->unit_name; break;
            case '%': add = "%"; break;
            default:
                return cr_err_set(err, CR_E_UNSUPPORTED,
                                  "specifier %%%c is not expanded by this "
                                  "test", *s ? *s : '0');
            }
            if (!add)
                return cr_err_set(err, CR_E_UNSUPPORTED,
                                  "specifier %%%c has no value here", *s);
        }
        size_t al = strlen(add);
        if (n + al >= cap)
            return cr_err_set(err, CR_E_TOO_LARGE, "expansion too long");
        memcpy(out + n, add, al);
        n += al;
    }
    out[n] = '\0';
    return CR_OK;
}

/* ---- environments ---- */

static bool valid_env_key(const char *k, size_t n)
{
    if (!n || !(isalpha((unsigned char)k[0]) || k[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!(isalnum((unsigned char)k[i]) || k[i] == '_'))
            return false;
    return true;
}

cr_status_t dc_env_put(dc_env_t *env, const char *kv, cr_err_t *err)
{
    const char *eq = strchr(kv, '=');
    if (!eq || !valid_env_key(kv, (size_t)(eq - kv)))
        return cr_err_set(err, CR_E_INVALID, "bad assignment '%.80s'", kv);
    size_t kl = (size_t)(eq - kv);
    char *copy = strdup(kv);
    if (!copy)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (size_t i = 0; i < env->n; i++)
        if (!strncmp(env->kv[i], kv, kl + 1)) {
            free(env->kv[i]);
            env->kv[i] = copy;
            return CR_OK;
        }
    char **kvs = realloc(env->kv, (env->n + 2) * sizeof *kvs);
    if (!kvs) {
        free(copy);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    env->kv = kvs;
    env->kv[env->n++] = copy;
    env->kv[env->n] = NULL;
    return CR_OK;
}

const char *dc_env_value(const dc_env_t *env, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < env->n; i++)
        if (!strncmp(env->kv[i], key, kl) && env->kv[i][kl] == '=')
            return env->kv[i] + kl + 1;
    return NULL;
}

void dc_env_free(dc_env_t *env)
{
    for (size_t i = 0; i < env->n; i++)
        free(env->kv[i]);
    free(env->kv);
    memset(env, 0, sizeof *env);
}

cr_status_t dc_env_file_load(const char *path, dc_env_t *env, cr_err_t *err)
{
    char *text;
    cr_status_t st = dc_read_file(path, DC_UNIT_MAX_BYTES, &text, NULL, err);
    if (st)
        return st;
    char *buf = malloc(strlen(text) + 1);
    if (!buf) {
        free(text);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    int no = 0;
    char *p = text;
    while (*p && !st) {
        no++;
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        char *t = trim(p);
        p = nl ? nl + 1 : p + strlen(p);
        if (!*t || *t == '#' || *t == ';')
            continue;
        char *eq = strchr(t, '=');
        size_t kl = eq ? (size_t)(eq - t) : 0;
        while (kl && (t[kl - 1] == ' ' || t[kl - 1] == '\t'))
            kl--;
        if (!eq || !valid_env_key(t, kl)) {
            st = cr_err_set(err, CR_E_INVALID,
                            "%s:%d: not KEY=VALUE: '%.60s'", path, no, t);
            break;
        }
        memcpy(buf, t, kl);
        buf[kl] = '=';
        size_t n = kl + 1;
        const char *v = eq + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        if (*v == '"' || *v == '\'') {
            char q = *v++;
            while (*v && *v != q) {
                if (q == '"' && *v == '\\' && v[1])
                    v++;
                buf[n++] = *v++;
            }
            if (*v != q) {
                st = cr_err_set(err, CR_E_INVALID,
                                "%s:%d: unterminated quote", path, no);
                break;
            }
            v++;
            while (*v == ' ' || *v == '\t')
                v++;
            if (*v && *v != '#') {
                st = cr_err_set(err, CR_E_INVALID,
                                "%s:%d: text after a quoted value", path, no);
                break;
            }
        } else {
            size_t vl = strlen(v);
            memcpy(buf + n, v, vl);
            n += vl;
            if (n && buf[n - 1] == '\\') {
                st = cr_err_set(err, CR_E_UNSUPPORTED,
                                "%s:%d: continued lines are not supported "
                                "by this test", path, no);
                break;
            }
        }
        buf[n] = '\0';
        st = dc_env_put(env, buf, err);
    }
    free(buf);
    free(text);
    return st;
}

/* ---- services.txt ---- */

void dc_services_free(dc_services_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        dc_words_free(&s->s[i].argv);
    s->n = 0;
}

cr_status_t dc_services_load(const char *path, dc_services_t *out,
                             cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    char *text;
    cr_status_t st = dc_read_file(path, 64 * 1024, &text, NULL, err);
    if (st)
        return st;
    int no = 0;
    char *save = NULL;
    for (char *l = strtok_r(text, "\n", &save); l && !st;
         l = strtok_r(NULL, "\n", &save)) {
        no++;
        char *t = trim(l);
        if (!*t || *t == '#')
            continue;
        dc_words_t w;
        if ((st = dc_split_words(t, &w, err)))
            break;
        if (w.n < 2 || strlen(w.w[0]) >= sizeof out->s[0].name ||
            out->n >= CR_ARRAY_LEN(out->s)) {
            dc_words_free(&w);
            st = cr_err_set(err, CR_E_INVALID, "%s: bad line '%s'", path, t);
            break;
        }
        dc_service_t *s = &out->s[out->n++];
        snprintf(s->name, sizeof s->name, "%s", w.w[0]);
        free(w.w[0]);
        for (size_t i = 1; i < w.n; i++)
            s->argv.w[i - 1] = w.w[i];
        s->argv.n = w.n - 1;
        s->argv.w[s->argv.n] = NULL;
    }
    free(text);
    if (!st && out->n == 0)
        st = cr_err_set(err, CR_E_INVALID, "%s: no services", path);
    if (st)
        dc_services_free(out);
    return st;
}

const dc_service_t *dc_services_find(const dc_services_t *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->s[i].name, name))
            return &s->s[i];
    return NULL;
}
