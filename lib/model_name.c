/* model_name.c: parsing and printing Ollama model names.
 *
 * The split follows Ollama: if the last ':' comes after the last '/', it
 * separates the tag; then the text is cut at '/' from the right into model,
 * namespace and host (an optional "scheme://" prefixes the host). A
 * separator that is present promises a non-empty part on each side. Each
 * part is then checked against its character class and length. */
#include "lib/prelude.h"
#include "lib/model_name.h"

#include <strings.h>

typedef enum part_kind { PART_HOST, PART_NS, PART_MODEL, PART_TAG } part_kind_t;

static const char *const part_names[] = {"host", "namespace", "model", "tag"};

/* A slice of the input. */
typedef struct span {
    const char *p;
    size_t n;
    bool present; /* the part was given (else the default applies) */
} span_t;

static bool is_alnum_us(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
}

static size_t part_max(part_kind_t k)
{
    switch (k) {
    case PART_HOST: return CR_NAME_HOST_MAX;
    case PART_NS: return CR_NAME_NS_MAX;
    case PART_MODEL: return CR_NAME_MODEL_MAX;
    case PART_TAG: return CR_NAME_TAG_MAX;
    }
    return 0;
}

static void put_char_desc(char *out, size_t cap, unsigned char c)
{
    if (c >= 0x21 && c < 0x7f)
        snprintf(out, cap, "'%c'", c);
    else
        snprintf(out, cap, "0x%02x", c);
}

/* Checks one part; on failure writes the reason into why. */
static bool check_part(part_kind_t k, span_t s, char *why, size_t cap)
{
    if (s.n == 0) {
        snprintf(why, cap, "%s is empty", part_names[k]);
        return false;
    }
    if (s.n > part_max(k)) {
        snprintf(why, cap, "%s is longer than %zu bytes", part_names[k],
                 part_max(k));
        return false;
    }
    for (size_t i = 0; i < s.n; i++) {
        unsigned char c = (unsigned char)s.p[i];
        bool ok;
        if (i == 0)
            ok = is_alnum_us(c);
        else if (c == '-' || is_alnum_us(c))
            ok = true;
        else if (c == '.')
            ok = k != PART_NS;
        else if (c == ':')
            ok = k == PART_HOST;
        else
            ok = false;
        if (!ok) {
            char cd[8];
            put_char_desc(cd, sizeof cd, c);
            snprintf(why, cap, "%s '%.*s' has invalid character %s at %zu",
                     part_names[k], (int)CR_MIN(s.n, (size_t)64), s.p, cd, i);
            return false;
        }
    }
    return true;
}

/* Last occurrence of c in [p, p+n), or NULL. */
static const char *last_of(const char *p, size_t n, char c)
{
    for (size_t i = n; i > 0; i--)
        if (p[i - 1] == c)
            return p + i - 1;
    return NULL;
}

static void copy_span(char *dst, size_t cap, span_t s, const char *def)
{
    if (!s.present) {
        snprintf(dst, cap, "%s", def);
        return;
    }
    size_t n = CR_MIN(s.n, cap - 1);
    memcpy(dst, s.p, n);
    dst[n] = '\0';
}

/* The whole parse; why gets the reason on failure. */
static bool parse(const char *text, size_t len, cr_model_name_t *out,
                  char *why, size_t cap)
{
    memset(out, 0, sizeof *out);
    why[0] = '\0';
    if (!text) {
        snprintf(why, cap, "name is missing");
        return false;
    }
    if (len == 0) {
        snprintf(why, cap, "name is empty");
        return false;
    }
    if (len > CR_NAME_TEXT_MAX) {
        snprintf(why, cap, "name is longer than %d bytes", CR_NAME_TEXT_MAX);
        return false;
    }
    if (memchr(text, '\0', len)) {
        snprintf(why, cap, "name has a NUL byte");
        return false;
    }

    span_t host = {0}, ns = {0}, model = {0}, tag = {0};
    span_t scheme = {0};
    const char *p = text;
    size_t n = len;

    const char *colon = last_of(p, n, ':');
    const char *slash = last_of(p, n, '/');
    if (colon && (!slash || colon > slash)) {
        tag = (span_t){colon + 1, (size_t)(p + n - colon - 1), true};
        n = (size_t)(colon - p);
    }

    slash = last_of(p, n, '/');
    if (!slash) {
        model = (span_t){p, n, true};
    } else {
        model = (span_t){slash + 1, (size_t)(p + n - slash - 1), true};
        n = (size_t)(slash - p);
        slash = last_of(p, n, '/');
        if (!slash) {
            ns = (span_t){p, n, true};
        } else {
            ns = (span_t){slash + 1, (size_t)(p + n - slash - 1), true};
            n = (size_t)(slash - p);
            host = (span_t){p, n, true};
            /* "scheme://host": the first "://" ends the scheme. */
            for (size_t i = 0; i + 3 <= n; i++) {
                if (!memcmp(p + i, "://", 3)) {
                    scheme = (span_t){p, i, true};
                    host = (span_t){p + i + 3, n - i - 3, true};
                    break;
                }
            }
        }
    }

    if (scheme.present) {
        if (scheme.n == 5 && !strncasecmp(scheme.p, "https", 5))
            snprintf(out->scheme, sizeof out->scheme, "https");
        else if (scheme.n == 4 && !strncasecmp(scheme.p, "http", 4))
            snprintf(out->scheme, sizeof out->scheme, "http");
        else {
            snprintf(why, cap, "scheme '%.*s' is not http or https",
                     (int)CR_MIN(scheme.n, (size_t)16), scheme.p);
            return false;
        }
    } else {
        snprintf(out->scheme, sizeof out->scheme, CR_NAME_DEFAULT_SCHEME);
    }

    if ((host.present && !check_part(PART_HOST, host, why, cap)) ||
        (ns.present && !check_part(PART_NS, ns, why, cap)) ||
        !check_part(PART_MODEL, model, why, cap) ||
        (tag.present && !check_part(PART_TAG, tag, why, cap))) {
        memset(out, 0, sizeof *out);
        return false;
    }

    copy_span(out->host, sizeof out->host, host, CR_NAME_DEFAULT_HOST);
    copy_span(out->ns, sizeof out->ns, ns, CR_NAME_DEFAULT_NS);
    copy_span(out->model, sizeof out->model, model, "");
    copy_span(out->tag, sizeof out->tag, tag, CR_NAME_DEFAULT_TAG);
    return true;
}

cr_status_t cr_model_name_parse_n(const char *text, size_t len,
                                  cr_model_name_t *out, cr_err_t *err)
{
    char why[160];
    if (!parse(text, len, out, why, sizeof why))
        return cr_err_set(err, CR_E_INVALID, CR_NAME_INVALID_MSG);
    return CR_OK;
}

cr_status_t cr_model_name_parse(const char *text, cr_model_name_t *out,
                                cr_err_t *err)
{
    return cr_model_name_parse_n(text, text ? strlen(text) : 0, out, err);
}

bool cr_model_name_is_valid(const char *text)
{
    cr_model_name_t n;
    return cr_model_name_parse(text, &n, NULL) == CR_OK;
}

char *cr_model_name_why(const char *text, size_t len, char *buf, size_t cap)
{
    cr_model_name_t n;
    if (cap == 0)
        return buf;
    char why[160];
    if (parse(text, len, &n, why, sizeof why))
        buf[0] = '\0';
    else
        snprintf(buf, cap, "%s", why);
    return buf;
}

char *cr_model_name_display(const cr_model_name_t *n, char *buf, size_t cap)
{
    if (strcasecmp(n->host, CR_NAME_DEFAULT_HOST) != 0)
        snprintf(buf, cap, "%s/%s/%s:%s", n->host, n->ns, n->model, n->tag);
    else if (strcasecmp(n->ns, CR_NAME_DEFAULT_NS) != 0)
        snprintf(buf, cap, "%s/%s:%s", n->ns, n->model, n->tag);
    else
        snprintf(buf, cap, "%s:%s", n->model, n->tag);
    return buf;
}

char *cr_model_name_full(const cr_model_name_t *n, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/%s/%s:%s", n->host, n->ns, n->model, n->tag);
    return buf;
}

bool cr_model_name_equal(const cr_model_name_t *a, const cr_model_name_t *b)
{
    return !strcasecmp(a->host, b->host) && !strcasecmp(a->ns, b->ns) &&
           !strcasecmp(a->model, b->model) && !strcasecmp(a->tag, b->tag);
}

void cr_model_name_path_parts(const cr_model_name_t *n, const char *parts[4])
{
    parts[0] = n->host;
    parts[1] = n->ns;
    parts[2] = n->model;
    parts[3] = n->tag;
}

bool cr_model_name_manifest_relpath(const cr_model_name_t *n, char *buf,
                                    size_t cap)
{
    int w = snprintf(buf, cap, "manifests/%s/%s/%s/%s", n->host, n->ns,
                     n->model, n->tag);
    return w >= 0 && (size_t)w < cap;
}
