/* manifest.c: parse and encode manifest JSON (see manifest.h). */
#include "lib/prelude.h"
#include "services/registry/manifest.h"
#include "services/registry/gojson.h"

#include <jansson.h>

static char *dup_n(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = '\0';
    }
    return p;
}

static void layer_free(reg_layer_t *l)
{
    free(l->media_type);
    free(l->from);
    free(l->name);
    memset(l, 0, sizeof *l);
}

void reg_manifest_free(reg_manifest_t *m)
{
    if (!m)
        return;
    free(m->media_type);
    layer_free(&m->config);
    for (size_t i = 0; i < m->n_layers; i++)
        layer_free(&m->layers[i]);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

cr_status_t reg_manifest_init(reg_manifest_t *m)
{
    memset(m, 0, sizeof *m);
    m->schema_version = 2;
    m->media_type = strdup(REG_MT_MANIFEST);
    return m->media_type ? CR_OK : CR_E_NOMEM;
}

/* Reads an optional string member of at most max bytes into *dst. */
static cr_status_t opt_str(json_t *obj, const char *key, size_t max,
                           char **dst, const char *where, cr_err_t *err)
{
    json_t *v = json_object_get(obj, key);
    *dst = NULL;
    if (!v || json_is_null(v))
        return CR_OK;
    if (!json_is_string(v))
        return cr_err_set(err, CR_E_CORRUPT, "manifest: %s.%s must be a string",
                          where, key);
    if (json_string_length(v) > max)
        return cr_err_set(err, CR_E_CORRUPT, "manifest: %s.%s is too long",
                          where, key);
    *dst = dup_n(json_string_value(v), json_string_length(v));
    return *dst ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
}

static cr_status_t parse_layer(json_t *obj, reg_layer_t *l, const char *where,
                               cr_err_t *err)
{
    memset(l, 0, sizeof *l);
    if (!json_is_object(obj))
        return cr_err_set(err, CR_E_CORRUPT, "manifest: %s must be an object",
                          where);
    cr_status_t st =
        opt_str(obj, "mediaType", REG_MAX_MEDIA_TYPE, &l->media_type, where, err);
    if (!st && !l->media_type)
        st = cr_err_set(err, CR_E_CORRUPT, "manifest: %s.mediaType is missing",
                        where);
    json_t *d = json_object_get(obj, "digest");
    if (!st && (!json_is_string(d) ||
                reg_digest_parse(json_string_value(d), l->hex, NULL) != CR_OK))
        st = cr_err_set(err, CR_E_CORRUPT,
                        "manifest: %s.digest: invalid digest format", where);
    json_t *sz = json_object_get(obj, "size");
    if (!st && (!json_is_integer(sz) || json_integer_value(sz) < 0))
        st = cr_err_set(err, CR_E_CORRUPT,
                        "manifest: %s.size must be a non-negative integer",
                        where);
    if (!st)
        l->size = (int64_t)json_integer_value(sz);
    if (!st)
        st = opt_str(obj, "from", REG_MAX_LAYER_NAME, &l->from, where, err);
    if (!st)
        st = opt_str(obj, "name", REG_MAX_LAYER_NAME, &l->name, where, err);
    if (st)
        layer_free(l);
    return st;
}

cr_status_t reg_manifest_parse(const char *data, size_t len,
                               reg_manifest_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    json_error_t jerr;
    json_t *root = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return cr_err_set(err, CR_E_CORRUPT, "manifest: %s (line %d)",
                          jerr.text, jerr.line);
    cr_status_t st = CR_OK;
    char where[48];
    if (!json_is_object(root)) {
        st = cr_err_set(err, CR_E_CORRUPT, "manifest: not a JSON object");
        goto out;
    }
    json_t *sv = json_object_get(root, "schemaVersion");
    out->schema_version = json_is_integer(sv) ? json_integer_value(sv) : 2;
    st = opt_str(root, "mediaType", REG_MAX_MEDIA_TYPE, &out->media_type,
                 "manifest", err);
    if (st)
        goto out;
    st = parse_layer(json_object_get(root, "config"), &out->config, "config",
                     err);
    if (st)
        goto out;
    json_t *layers = json_object_get(root, "layers");
    if (!layers || json_is_null(layers))
        goto out;
    if (!json_is_array(layers)) {
        st = cr_err_set(err, CR_E_CORRUPT, "manifest: layers must be an array");
        goto out;
    }
    size_t n = json_array_size(layers);
    if (n > REG_MAX_LAYERS) {
        st = cr_err_set(err, CR_E_CORRUPT, "manifest: %zu layers (limit %d)",
                        n, REG_MAX_LAYERS);
        goto out;
    }
    if (n) {
        out->layers = calloc(n, sizeof *out->layers);
        if (!out->layers) {
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        snprintf(where, sizeof where, "layers[%zu]", i);
        st = parse_layer(json_array_get(layers, i), &out->layers[i], where, err);
        if (st)
            goto out;
        out->n_layers = i + 1;
    }
out:
    json_decref(root);
    if (st)
        reg_manifest_free(out);
    return st;
}

static json_t *layer_json(const reg_layer_t *l)
{
    json_t *o = json_object();
    char digest[8 + REG_HEX_LEN];
    snprintf(digest, sizeof digest, "sha256:%s", l->hex);
    json_object_set_new(o, "mediaType", json_string(l->media_type));
    json_object_set_new(o, "digest", json_string(digest));
    json_object_set_new(o, "size", json_integer(l->size));
    if (l->from && *l->from)
        json_object_set_new(o, "from", json_string(l->from));
    if (l->name && *l->name)
        json_object_set_new(o, "name", json_string(l->name));
    return o;
}

cr_status_t reg_manifest_encode(const reg_manifest_t *m, cr_buf_t *out)
{
    json_t *root = json_object();
    if (!root)
        return CR_E_NOMEM;
    json_object_set_new(root, "schemaVersion", json_integer(m->schema_version));
    json_object_set_new(root, "mediaType",
                        json_string(m->media_type ? m->media_type
                                                  : REG_MT_MANIFEST));
    json_object_set_new(root, "config", layer_json(&m->config));
    json_t *layers = json_array();
    for (size_t i = 0; i < m->n_layers; i++)
        json_array_append_new(layers, layer_json(&m->layers[i]));
    json_object_set_new(root, "layers", layers);
    cr_status_t st = reg_gojson_dump_line(root, out);
    json_decref(root);
    return st;
}

int64_t reg_manifest_total_size(const reg_manifest_t *m)
{
    int64_t total = m->config.size;
    for (size_t i = 0; i < m->n_layers; i++)
        total += m->layers[i].size;
    return total;
}

const reg_layer_t *reg_manifest_find(const reg_manifest_t *m, const char *mt)
{
    for (size_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].media_type && !strcmp(m->layers[i].media_type, mt))
            return &m->layers[i];
    return NULL;
}

static cr_status_t fill_layer(reg_layer_t *l, const char *mt, const char *hex,
                              int64_t size, const char *from, const char *name)
{
    memset(l, 0, sizeof *l);
    l->media_type = strdup(mt);
    snprintf(l->hex, sizeof l->hex, "%s", hex);
    l->size = size;
    l->from = from && *from ? strdup(from) : NULL;
    l->name = name && *name ? strdup(name) : NULL;
    if (!l->media_type || (from && *from && !l->from) ||
        (name && *name && !l->name)) {
        layer_free(l);
        return CR_E_NOMEM;
    }
    return CR_OK;
}

cr_status_t reg_manifest_add(reg_manifest_t *m, const char *mt,
                             const char *hex, int64_t size, const char *from,
                             const char *name)
{
    if (m->n_layers >= REG_MAX_LAYERS)
        return CR_E_TOO_LARGE;
    reg_layer_t *v = realloc(m->layers, (m->n_layers + 1) * sizeof *v);
    if (!v)
        return CR_E_NOMEM;
    m->layers = v;
    cr_status_t st = fill_layer(&m->layers[m->n_layers], mt, hex, size, from,
                                name);
    if (!st)
        m->n_layers++;
    return st;
}

void reg_manifest_remove(reg_manifest_t *m, const char *mt)
{
    size_t j = 0;
    for (size_t i = 0; i < m->n_layers; i++) {
        if (m->layers[i].media_type && !strcmp(m->layers[i].media_type, mt))
            layer_free(&m->layers[i]);
        else
            m->layers[j++] = m->layers[i];
    }
    m->n_layers = j;
}

cr_status_t reg_manifest_set_config(reg_manifest_t *m, const char *hex,
                                    int64_t size)
{
    layer_free(&m->config);
    return fill_layer(&m->config, REG_MT_CONFIG, hex, size, NULL, NULL);
}

bool reg_manifest_references(const reg_manifest_t *m, const char *hex)
{
    if (!strcmp(m->config.hex, hex))
        return true;
    for (size_t i = 0; i < m->n_layers; i++)
        if (!strcmp(m->layers[i].hex, hex))
            return true;
    return false;
}
