/* model.c: load a stored model's manifest and small layers (see model.h). */
#include "lib/prelude.h"
#include "services/registry/model.h"

#include "lib/chat_formats.h"
#include "lib/vision_embedded.h"
#include "services/registry/ggufinfo.h"

#include <ctype.h>
#include <strings.h>

void reg_model_destroy(reg_model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    reg_model_t *m = *self_p;
    reg_manifest_free(&m->manifest);
    free(m->template_text);
    free(m->system_text);
    json_decref(m->params);
    json_decref(m->messages);
    for (size_t i = 0; i < m->n_licenses; i++)
        free(m->licenses[i]);
    free(m->licenses);
    json_decref(m->config);
    free(m);
    *self_p = NULL;
}

static cr_status_t read_text(const reg_store_t *s, const reg_layer_t *l,
                             size_t max, char **out, cr_err_t *err)
{
    size_t len;
    cr_status_t st = reg_store_blob_read(s, l->hex, max, out, &len, err);
    if (st)
        cr_err_wrap(err, "layer %s", l->media_type);
    return st;
}

static cr_status_t read_json(const reg_store_t *s, const reg_layer_t *l,
                             size_t max, json_t **out, cr_err_t *err)
{
    char *text = NULL;
    size_t len = 0;
    *out = NULL;
    cr_status_t st = reg_store_blob_read(s, l->hex, max, &text, &len, err);
    if (st)
        return cr_err_wrap(err, "layer %s", l->media_type);
    json_error_t jerr;
    *out = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!*out)
        return cr_err_set(err, CR_E_CORRUPT, "layer %s sha256:%s: %s",
                          l->media_type, l->hex, jerr.text);
    return CR_OK;
}

static cr_status_t load_layers(const reg_store_t *s, reg_model_t *m,
                               cr_err_t *err)
{
    cr_status_t st = CR_OK;
    for (size_t i = 0; !st && i < m->manifest.n_layers; i++) {
        const reg_layer_t *l = &m->manifest.layers[i];
        const char *mt = l->media_type;
        if (!strcmp(mt, REG_MT_MODEL)) {
            if (!m->model_layer)
                m->model_layer = l;
        } else if (!strcmp(mt, REG_MT_TEMPLATE) || !strcmp(mt, REG_MT_PROMPT)) {
            free(m->template_text);
            m->template_text = NULL;
            st = read_text(s, l, REG_TEXT_LAYER_MAX, &m->template_text, err);
        } else if (!strcmp(mt, REG_MT_SYSTEM)) {
            free(m->system_text);
            m->system_text = NULL;
            st = read_text(s, l, REG_TEXT_LAYER_MAX, &m->system_text, err);
        } else if (!strcmp(mt, REG_MT_PARAMS)) {
            json_decref(m->params);
            m->params = NULL;
            st = read_json(s, l, REG_PARAMS_LAYER_MAX, &m->params, err);
            if (!st && !json_is_object(m->params))
                st = cr_err_set(err, CR_E_CORRUPT,
                                "params layer is not a JSON object");
        } else if (!strcmp(mt, REG_MT_MESSAGES)) {
            json_decref(m->messages);
            m->messages = NULL;
            st = read_json(s, l, REG_MESSAGES_LAYER_MAX, &m->messages, err);
            if (!st && !json_is_array(m->messages))
                st = cr_err_set(err, CR_E_CORRUPT,
                                "messages layer is not a JSON array");
        } else if (!strcmp(mt, REG_MT_LICENSE)) {
            char **v = realloc(m->licenses, (m->n_licenses + 1) * sizeof *v);
            if (!v)
                return cr_err_set(err, CR_E_NOMEM, "out of memory");
            m->licenses = v;
            st = read_text(s, l, REG_TEXT_LAYER_MAX, &v[m->n_licenses], err);
            if (!st)
                m->n_licenses++;
        }
    }
    return st;
}

static cr_status_t load(const reg_store_t *s, const cr_model_name_t *want,
                        bool full, reg_model_t **out, cr_err_t *err)
{
    *out = NULL;
    reg_model_t *m = calloc(1, sizeof *m);
    if (!m)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    char *bytes = NULL;
    size_t len = 0;
    cr_status_t st = reg_store_manifest_find(s, want, &m->name);
    if (st) {
        char disp[CR_NAME_BUF];
        cr_err_set(err, CR_E_NOT_FOUND, "model '%s' not found",
                   cr_model_name_display(want, disp, sizeof disp));
        goto fail;
    }
    cr_model_name_display(&m->name, m->display, sizeof m->display);
    st = reg_store_manifest_read(s, &m->name, &bytes, &len, &m->mtime, err);
    if (st)
        goto fail;
    reg_sha256_hex(bytes, len, m->digest);
    st = reg_manifest_parse(bytes, len, &m->manifest, err);
    if (st)
        goto fail;
    if (full) {
        st = load_layers(s, m, err);
        if (st)
            goto fail;
    } else {
        m->model_layer = reg_manifest_find(&m->manifest, REG_MT_MODEL);
    }
    /* The config blob is informational: a bad one does not hide the model. */
    json_t *cfg = NULL;
    cr_err_t cerr;
    if (reg_store_blob_exists(s, m->manifest.config.hex, NULL) &&
        read_json(s, &m->manifest.config, REG_CONFIG_MAX, &cfg, &cerr) == CR_OK) {
        if (json_is_object(cfg))
            m->config = cfg;
        else
            json_decref(cfg);
    }
    free(bytes);
    *out = m;
    return CR_OK;
fail:
    free(bytes);
    reg_model_destroy(&m);
    return st;
}

cr_status_t reg_model_load(const reg_store_t *s, const cr_model_name_t *want,
                           reg_model_t **out, cr_err_t *err)
{
    return load(s, want, true, out, err);
}

cr_status_t reg_model_load_meta(const reg_store_t *s,
                                const cr_model_name_t *want, reg_model_t **out,
                                cr_err_t *err)
{
    return load(s, want, false, out, err);
}

const char *reg_model_config_str(const reg_model_t *m, const char *key)
{
    const char *v = m->config ? json_string_value(json_object_get(m->config, key))
                              : NULL;
    return v ? v : "";
}

json_t *reg_model_details_json(const reg_model_t *m, bool with_parent)
{
    json_t *d = json_object();
    if (!d)
        return NULL;
    const char *parent = with_parent && m->model_layer && m->model_layer->from
                             ? m->model_layer->from
                             : "";
    json_object_set_new(d, "parent_model", json_string(parent));
    json_object_set_new(d, "format", json_string(reg_model_config_str(m, "model_format")));
    json_object_set_new(d, "family", json_string(reg_model_config_str(m, "model_family")));
    json_t *fams = m->config ? json_object_get(m->config, "model_families") : NULL;
    if (json_is_array(fams)) {
        json_t *copy = json_array();
        for (size_t i = 0; i < json_array_size(fams); i++)
            if (json_is_string(json_array_get(fams, i)))
                json_array_append(copy, json_array_get(fams, i));
        json_object_set_new(d, "families", copy);
    } else {
        json_object_set_new(d, "families", json_null());
    }
    json_object_set_new(d, "parameter_size", json_string(reg_model_config_str(m, "model_type")));
    json_object_set_new(d, "quantization_level", json_string(reg_model_config_str(m, "file_type")));
    return d;
}

cr_status_t reg_model_details_msg(const reg_model_t *m, bool with_parent,
                                  msg_details_t *d, msg_t *arena)
{
    memset(d, 0, sizeof *d);
    const char *parent = with_parent && m->model_layer && m->model_layer->from
                             ? m->model_layer->from
                             : "";
    d->parent_model = msg_strdup(arena, parent);
    d->format = msg_strdup(arena, reg_model_config_str(m, "model_format"));
    d->family = msg_strdup(arena, reg_model_config_str(m, "model_family"));
    d->parameter_size = msg_strdup(arena, reg_model_config_str(m, "model_type"));
    d->quantization_level =
        msg_strdup(arena, reg_model_config_str(m, "file_type"));
    if (!d->parent_model || !d->format || !d->family || !d->parameter_size ||
        !d->quantization_level)
        return CR_E_NOMEM;
    d->has_parent_model = d->has_format = d->has_family = true;
    d->has_parameter_size = d->has_quantization_level = true;
    json_t *fams = m->config ? json_object_get(m->config, "model_families") : NULL;
    if (json_is_array(fams)) {
        size_t n = json_array_size(fams);
        d->families.v = msg_alloc(arena, (n ? n : 1) * sizeof(char *));
        if (!d->families.v)
            return CR_E_NOMEM;
        for (size_t i = 0; i < n; i++) {
            const char *f = json_string_value(json_array_get(fams, i));
            if (!f)
                continue;
            d->families.v[d->families.n] = msg_strdup(arena, f);
            if (!d->families.v[d->families.n])
                return CR_E_NOMEM;
            d->families.n++;
        }
        d->has_families = true;
    }
    return CR_OK;
}

static bool ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_';
}

bool reg_template_uses(const char *tmpl, const char *field)
{
    if (!tmpl)
        return false;
    size_t fl = strlen(field);
    const char *p = tmpl;
    while ((p = strstr(p, "{{")) != NULL) {
        const char *end = strstr(p + 2, "}}");
        if (!end)
            return false;
        /* Inside one action: look for ".Field" not followed by more
         * identifier characters and not preceded by one (so ".Tools" in
         * "$.Tools" and "(.Tools)" count, but ".ToolsX" or "a.Tools" of a
         * nested field still count as Go collects every field name). */
        for (const char *q = p + 2; q + 1 + fl <= end; q++) {
            if (*q != '.' || strncasecmp(q + 1, field, fl) != 0)
                continue;
            if (ident_char(q[1 + fl]))
                continue;
            return true;
        }
        p = end + 2;
    }
    return false;
}

bool reg_model_jinja_template(const reg_model_t *m, const cr_gguf_t *g, cr_gguf_str_t *src)
{
    return !m->template_text && g && !reg_gguf_is_embedding(g) &&
           cr_gguf_get_str(g, "tokenizer.chat_template", src) && src->len > 0;
}

size_t reg_model_capabilities(const reg_model_t *m, const cr_gguf_t *g,
                              const char *out[REG_MAX_CAPS])
{
    cr_gguf_str_t jinja;
    cr_jinja_tags_t jt = {0};
    if (reg_model_jinja_template(m, g, &jinja))
        cr_jinja_tags_infer(jinja.ptr, (size_t)jinja.len, &jt);
    size_t n = 0;
    if (g) {
        out[n++] = reg_gguf_is_embedding(g) ? "embedding" : "completion";
    }
    /* Vision through a projector layer, or a complete tower inside the
     * model file that the runner runs (lib/vision_embedded.h: Ollama's
     * gemma3, mistral3 and qwen25vl files). */
    bool embedded_vision = g && cr_vision_embedded(g, NULL, NULL) == CR_OK;
    /* A built-in parser that finds tool calls (thinking) gives the
     * capability as Ollama's parserCapabilities does. */
    const char *parser = reg_model_config_str(m, "parser");
    bool tools = cr_parser_has_tools(parser);
    if (m->template_text ? reg_template_uses(m->template_text, "Tools") : jt.uses_tools)
        tools = true;
    if (tools)
        out[n++] = "tools";
    if (m->template_text && reg_template_uses(m->template_text, "Suffix"))
        out[n++] = "insert";
    if (reg_manifest_find(&m->manifest, REG_MT_PROJECTOR) || embedded_vision)
        out[n++] = "vision";
    if (cr_parser_has_thinking(parser) ||
        (m->template_text ? reg_template_uses(m->template_text, "Thinking")
                          : jt.think_open[0] != '\0'))
        out[n++] = "thinking";
    return n;
}

bool reg_model_layer_path(const reg_store_t *s, const reg_layer_t *l,
                          char *buf, size_t cap)
{
    return reg_store_blob_path(s, l->hex, buf, cap);
}
