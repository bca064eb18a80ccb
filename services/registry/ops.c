/* ops.c: tags, copy, delete, resolve, show, blob_head, pruning (see ops.h). */
#include "lib/prelude.h"
#include "services/registry/ops.h"
#include "lib/buf.h"
#include "lib/gguf.h"
#include "lib/log.h"
#include "lib/model_name.h"
#include "services/registry/gojson.h"
#include "services/registry/model.h"
#include "services/registry/params.h"
#include "services/registry/show.h"

#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Go's %q of text, for error messages naming what the client sent. */
static void go_q(const char *text, char *buf, size_t cap)
{
    cr_buf_t b;
    cr_buf_init(&b, 1024);
    const char *t = text ? text : "";
    size_t n = strnlen(t, 512);
    if (reg_go_quote(t, n, &b) == CR_OK && b.data)
        snprintf(buf, cap, "%s", b.data);
    else
        snprintf(buf, cap, "\"\"");
    cr_buf_free(&b);
}

/* ---- pruning ---- */

/* Every stored manifest, parsed; false (and nothing to free) if any fails. */
static bool load_all(reg_store_t *s, reg_manifest_t **out, size_t *n_out)
{
    cr_model_name_t *names = NULL;
    size_t n = 0;
    *out = NULL;
    *n_out = 0;
    if (reg_store_manifest_list(s, &names, &n, NULL))
        return false;
    reg_manifest_t *all = calloc(n ? n : 1, sizeof *all);
    size_t parsed = 0;
    bool ok = all != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        char *bytes = NULL;
        size_t len = 0;
        cr_err_t err;
        if (reg_store_manifest_read(s, &names[i], &bytes, &len, NULL, &err) ||
            reg_manifest_parse(bytes, len, &all[parsed], &err)) {
            char disp[CR_NAME_BUF];
            cr_log_warn("not pruning blobs: manifest %s unreadable: %s",
                        cr_model_name_display(&names[i], disp, sizeof disp),
                        err.msg);
            ok = false;
        } else {
            parsed++;
        }
        free(bytes);
    }
    free(names);
    if (!ok) {
        for (size_t j = 0; j < parsed; j++)
            reg_manifest_free(&all[j]);
        free(all);
        return false;
    }
    *out = all;
    *n_out = parsed;
    return true;
}

static void free_all(reg_manifest_t *all, size_t n)
{
    for (size_t j = 0; j < n; j++)
        reg_manifest_free(&all[j]);
    free(all);
}

static bool referenced(const reg_manifest_t *all, size_t n, const char *hex)
{
    for (size_t j = 0; j < n; j++)
        if (reg_manifest_references(&all[j], hex))
            return true;
    return false;
}

size_t reg_prune_unreferenced(reg_store_t *s, const reg_manifest_t *old)
{
    reg_manifest_t *all = NULL;
    size_t n = 0;
    /* From listing to removing: no manifest is written meanwhile (store.h),
     * and a pinned blob is not removed. */
    reg_store_lock(s);
    if (!load_all(s, &all, &n)) {
        reg_store_unlock(s);
        return 0;
    }
    size_t removed = 0;
    for (size_t i = 0; i <= old->n_layers; i++) {
        const char *hex = i < old->n_layers ? old->layers[i].hex : old->config.hex;
        if (!hex[0] || referenced(all, n, hex))
            continue;
        if (reg_store_blob_exists(s, hex, NULL) &&
            reg_store_blob_remove(s, hex, NULL) == CR_OK) {
            cr_log_debug("removed unused blob sha256:%s", hex);
            removed++;
        }
    }
    reg_store_unlock(s);
    free_all(all, n);
    return removed;
}

/* Removes download state (`sha256-<hex>-partial`, `…-partial-<N>`) not
 * touched for grace_s seconds: a pull younger than that may resume. */
static size_t prune_partials(reg_store_t *s, int64_t grace_s)
{
    char dir[REG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/blobs", reg_store_root(s));
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t removed = 0;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        if (strncmp(n, "sha256-", 7) != 0 || strlen(n) < 7 + REG_HEX_LEN + 8 ||
            strncmp(n + 7 + REG_HEX_LEN, "-partial", 8) != 0)
            continue;
        char path[REG_PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, n);
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode) ||
            (int64_t)(now - sb.st_mtime) < grace_s)
            continue;
        if (unlink(path) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

size_t reg_prune_store(reg_store_t *s, int64_t grace_s)
{
    size_t partials = prune_partials(s, grace_s);
    if (partials)
        cr_log_info("pruned %zu stale partial download files", partials);
    reg_manifest_t *all = NULL;
    size_t n = 0;
    if (!load_all(s, &all, &n))
        return 0;
    char (*hexes)[REG_HEX_LEN + 1] = NULL;
    size_t nb = 0, removed = 0;
    if (reg_store_blob_list(s, &hexes, &nb, grace_s) == CR_OK) {
        for (size_t i = 0; i < nb; i++) {
            if (referenced(all, n, hexes[i]))
                continue;
            if (reg_store_blob_remove(s, hexes[i], NULL) == CR_OK)
                removed++;
        }
    }
    free(hexes);
    free_all(all, n);
    if (removed)
        cr_log_info("pruned %zu unused blobs", removed);
    return removed;
}

/* ---- tags ---- */

typedef struct tag_item {
    reg_model_t *m;
} tag_item_t;

static int cmp_newest(const void *a, const void *b)
{
    const reg_model_t *x = ((const tag_item_t *)a)->m;
    const reg_model_t *y = ((const tag_item_t *)b)->m;
    if (x->mtime.tv_sec != y->mtime.tv_sec)
        return x->mtime.tv_sec < y->mtime.tv_sec ? 1 : -1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec)
        return x->mtime.tv_nsec < y->mtime.tv_nsec ? 1 : -1;
    return strcmp(x->display, y->display);
}

cr_status_t reg_op_tags(reg_store_t *s, const char *id, msg_t *reply,
                        cr_err_t *err)
{
    msg_init(reply, MSG_tags_reply, id);
    cr_model_name_t *names = NULL;
    size_t n = 0;
    cr_status_t st = reg_store_manifest_list(s, &names, &n, err);
    if (st)
        return st;
    tag_item_t *items = calloc(n ? n : 1, sizeof *items);
    if (!items) {
        free(names);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        cr_err_t lerr;
        if (reg_model_load_meta(s, &names[i], &items[k].m, &lerr)) {
            char disp[CR_NAME_BUF];
            cr_log_warn("tags: skipping %s: %s",
                        cr_model_name_display(&names[i], disp, sizeof disp),
                        lerr.msg);
            continue;
        }
        k++;
    }
    free(names);
    qsort(items, k, sizeof *items, cmp_newest);

    msg_tags_reply_body_t *b = &reply->u.tags_reply;
    b->has_models = true;
    b->models.v = msg_alloc(reply, (k ? k : 1) * sizeof *b->models.v);
    if (!b->models.v)
        st = CR_E_NOMEM;
    for (size_t i = 0; !st && i < k; i++) {
        const reg_model_t *m = items[i].m;
        msg_model_entry_t *e = &b->models.v[i];
        char when[48];
        reg_go_time(m->mtime, when, sizeof when);
        e->name = msg_strdup(reply, m->display);
        e->modified_at = msg_strdup(reply, when);
        e->digest = msg_strdup(reply, m->digest);
        e->details = msg_alloc(reply, sizeof *e->details);
        if (!e->name || !e->modified_at || !e->digest || !e->details ||
            reg_model_details_msg(m, false, e->details, reply)) {
            st = CR_E_NOMEM;
            break;
        }
        e->size = reg_manifest_total_size(&m->manifest);
        e->has_name = e->has_modified_at = e->has_digest = true;
        e->has_size = e->has_details = true;
        b->models.n = i + 1;
    }
    for (size_t i = 0; i < k; i++)
        reg_model_destroy(&items[i].m);
    free(items);
    if (st) {
        msg_clear(reply);
        return cr_err_set(err, st, "out of memory listing models");
    }
    return CR_OK;
}

/* ---- copy ---- */

cr_status_t reg_op_copy(reg_store_t *s, const msg_copy_body_t *req,
                        cr_err_t *err)
{
    char q[600];
    cr_model_name_t src, dst;
    if (!req->source || cr_model_name_parse(req->source, &src, NULL)) {
        go_q(req->source, q, sizeof q);
        return cr_err_set(err, CR_E_INVALID, "source %s is invalid", q);
    }
    if (!req->destination ||
        cr_model_name_parse(req->destination, &dst, NULL)) {
        go_q(req->destination, q, sizeof q);
        return cr_err_set(err, CR_E_INVALID, "destination %s is invalid", q);
    }
    if (reg_store_manifest_find(s, &src, &src) != CR_OK) {
        go_q(req->source, q, sizeof q);
        return cr_err_set(err, CR_E_NOT_FOUND, "model %s not found", q);
    }
    (void)reg_store_manifest_find(s, &dst, &dst); /* reuse its spelling */
    if (!strcmp(src.host, dst.host) && !strcmp(src.ns, dst.ns) &&
        !strcmp(src.model, dst.model) && !strcmp(src.tag, dst.tag))
        return CR_OK; /* copying onto itself */
    char *bytes = NULL;
    size_t len = 0;
    /* No prune between the read and the write (store.h): the source's
     * blobs are all there when the copy names them. */
    reg_store_lock(s);
    cr_status_t st = reg_store_manifest_read(s, &src, &bytes, &len, NULL, err);
    if (st == CR_E_NOT_FOUND) {
        go_q(req->source, q, sizeof q);
        st = cr_err_set(err, CR_E_NOT_FOUND, "model %s not found", q);
    }
    if (!st)
        st = reg_store_manifest_write(s, &dst, bytes, len, err);
    reg_store_unlock(s);
    free(bytes);
    return st;
}

/* ---- delete ---- */

cr_status_t reg_op_delete(reg_store_t *s, const msg_delete_body_t *req,
                          cr_err_t *err)
{
    cr_model_name_t name;
    if (!req->model || cr_model_name_parse(req->model, &name, NULL)) {
        char q[600];
        go_q(req->model, q, sizeof q);
        return cr_err_set(err, CR_E_INVALID, "name %s is invalid", q);
    }
    if (reg_store_manifest_find(s, &name, &name) != CR_OK)
        return cr_err_set(err, CR_E_NOT_FOUND, "model '%s' not found",
                          req->model);
    char *bytes = NULL;
    size_t len = 0;
    reg_manifest_t old = {0};
    cr_err_t perr;
    /* What is removed is what is pruned: no create or pull replaces the
     * manifest in between. */
    reg_store_lock(s);
    bool parsed = reg_store_manifest_read(s, &name, &bytes, &len, NULL, &perr) ==
                      CR_OK &&
                  reg_manifest_parse(bytes, len, &old, &perr) == CR_OK;
    free(bytes);
    cr_status_t st = reg_store_manifest_remove(s, &name, err);
    if (st == CR_E_NOT_FOUND)
        st = cr_err_set(err, CR_E_NOT_FOUND, "model '%s' not found", req->model);
    if (!st) {
        if (parsed)
            reg_prune_unreferenced(s, &old);
        else
            cr_log_warn("deleted %s without pruning its blobs: %s", req->model,
                        perr.msg);
    }
    reg_store_unlock(s);
    reg_manifest_free(&old);
    return st;
}

/* ---- resolve ---- */

static cr_status_t message_from_json(const json_t *j, msg_message_t *out,
                                     msg_t *arena)
{
    memset(out, 0, sizeof *out);
    const char *role = json_string_value(json_object_get(j, "role"));
    out->role = msg_strdup(arena, role ? role : "");
    out->has_role = true;
    if (!out->role)
        return CR_E_NOMEM;
    static const char *const keys[] = {"content", "thinking", "tool_name",
                                       "tool_call_id"};
    char **dst[] = {&out->content, &out->thinking, &out->tool_name,
                    &out->tool_call_id};
    bool *has[] = {&out->has_content, &out->has_thinking, &out->has_tool_name,
                   &out->has_tool_call_id};
    for (size_t i = 0; i < CR_ARRAY_LEN(keys); i++) {
        const char *v = json_string_value(json_object_get(j, keys[i]));
        if (!v)
            continue;
        *dst[i] = msg_strdup(arena, v);
        if (!*dst[i])
            return CR_E_NOMEM;
        *has[i] = true;
    }
    json_t *imgs = json_object_get(j, "images");
    if (json_is_array(imgs) && json_array_size(imgs)) {
        size_t n = json_array_size(imgs);
        out->images.v = msg_alloc(arena, n * sizeof(char *));
        if (!out->images.v)
            return CR_E_NOMEM;
        for (size_t i = 0; i < n; i++) {
            const char *v = json_string_value(json_array_get(imgs, i));
            if (!v)
                continue;
            out->images.v[out->images.n] = msg_strdup(arena, v);
            if (!out->images.v[out->images.n++])
                return CR_E_NOMEM;
        }
        out->has_images = true;
    }
    json_t *tc = json_object_get(j, "tool_calls");
    if (tc && !json_is_null(tc)) {
        cr_buf_t b;
        cr_buf_init(&b, 16u << 20);
        cr_status_t st = reg_gojson_dump(tc, &b);
        if (!st) {
            out->tool_calls = msg_strdup(arena, b.data ? b.data : "null");
            out->has_tool_calls = out->tool_calls != NULL;
            if (!out->tool_calls)
                st = CR_E_NOMEM;
        }
        cr_buf_free(&b);
        if (st)
            return st;
    }
    return CR_OK;
}

static cr_status_t fill_resolved(reg_store_t *s, const reg_model_t *m,
                                 const cr_gguf_t *g, msg_t *reply)
{
    msg_resolved_body_t *r = &reply->u.resolved;
    char path[REG_PATH_MAX];
    r->name = msg_strdup(reply, m->display);
    reg_model_layer_path(s, m->model_layer, path, sizeof path);
    r->model_path = msg_strdup(reply, path);
    r->digest = msg_strdup(reply, m->digest);
    /* No template layer but a Jinja chat template in the GGUF: an empty
     * template tells the runner to render that one. */
    cr_gguf_str_t jinja;
    r->template = msg_strdup(reply, m->template_text                       ? m->template_text
                                    : reg_model_jinja_template(m, g, &jinja) ? ""
                                                                           : REG_DEFAULT_TEMPLATE);
    if (!r->name || !r->model_path || !r->digest || !r->template)
        return CR_E_NOMEM;
    r->has_name = r->has_model_path = r->has_digest = r->has_template = true;
    if (m->system_text) {
        r->system = msg_strdup(reply, m->system_text);
        if (!r->system)
            return CR_E_NOMEM;
        r->has_system = true;
    }
    if (m->params) {
        r->params = msg_alloc(reply, sizeof *r->params);
        if (!r->params || reg_params_to_options(m->params, r->params, reply))
            return CR_E_NOMEM;
        r->has_params = true;
    }
    if (m->messages && json_array_size(m->messages)) {
        size_t n = json_array_size(m->messages);
        r->messages.v = msg_alloc(reply, n * sizeof *r->messages.v);
        if (!r->messages.v)
            return CR_E_NOMEM;
        for (size_t i = 0; i < n; i++) {
            json_t *j = json_array_get(m->messages, i);
            if (!json_is_object(j))
                continue;
            if (message_from_json(j, &r->messages.v[r->messages.n], reply))
                return CR_E_NOMEM;
            r->messages.n++;
        }
        r->has_messages = true;
    }
    size_t n_adapters = 0;
    for (size_t i = 0; i < m->manifest.n_layers; i++)
        n_adapters += !strcmp(m->manifest.layers[i].media_type, REG_MT_ADAPTER);
    if (n_adapters) {
        r->adapters.v = msg_alloc(reply, n_adapters * sizeof(char *));
        if (!r->adapters.v)
            return CR_E_NOMEM;
        for (size_t i = 0; i < m->manifest.n_layers; i++) {
            const reg_layer_t *l = &m->manifest.layers[i];
            if (strcmp(l->media_type, REG_MT_ADAPTER))
                continue;
            reg_model_layer_path(s, l, path, sizeof path);
            if (!(r->adapters.v[r->adapters.n++] = msg_strdup(reply, path)))
                return CR_E_NOMEM;
        }
        r->has_adapters = true;
    }
    const reg_layer_t *pl = reg_manifest_find(&m->manifest, REG_MT_PROJECTOR);
    if (pl) {
        reg_model_layer_path(s, pl, path, sizeof path);
        if (!(r->projector = msg_strdup(reply, path)))
            return CR_E_NOMEM;
        r->has_projector = true;
    }
    const reg_layer_t *dl = reg_manifest_find(&m->manifest, REG_MT_DRAFT);
    if (dl) {
        reg_model_layer_path(s, dl, path, sizeof path);
        if (!(r->draft_path = msg_strdup(reply, path)))
            return CR_E_NOMEM;
        r->has_draft_path = true;
    }
    r->size = reg_manifest_total_size(&m->manifest);
    r->has_size = true;
    r->details = msg_alloc(reply, sizeof *r->details);
    if (!r->details || reg_model_details_msg(m, true, r->details, reply))
        return CR_E_NOMEM;
    r->has_details = true;
    const char *renderer = reg_model_config_str(m, "renderer");
    const char *parser = reg_model_config_str(m, "parser");
    if (*renderer) {
        if (!(r->renderer = msg_strdup(reply, renderer)))
            return CR_E_NOMEM;
        r->has_renderer = true;
    }
    if (*parser) {
        if (!(r->parser = msg_strdup(reply, parser)))
            return CR_E_NOMEM;
        r->has_parser = true;
    }
    const char *caps[REG_MAX_CAPS];
    size_t nc = reg_model_capabilities(m, g, caps);
    r->capabilities.v = msg_alloc(reply, REG_MAX_CAPS * sizeof(char *));
    if (!r->capabilities.v)
        return CR_E_NOMEM;
    for (size_t i = 0; i < nc; i++)
        if (!(r->capabilities.v[r->capabilities.n++] = msg_strdup(reply, caps[i])))
            return CR_E_NOMEM;
    r->has_capabilities = true;
    return CR_OK;
}

cr_status_t reg_op_resolve(reg_store_t *s, const char *id,
                           const msg_resolve_body_t *req, msg_t *reply,
                           cr_err_t *err)
{
    return reg_op_resolve_cached(s, NULL, id, req, reply, err);
}

cr_status_t reg_op_resolve_cached(reg_store_t *s, reg_resolve_cache_t *cache,
                                  const char *id, const msg_resolve_body_t *req,
                                  msg_t *reply, cr_err_t *err)
{
    msg_init(reply, MSG_resolved, id);
    cr_model_name_t name;
    if (!req->model || cr_model_name_parse(req->model, &name, NULL))
        return cr_err_set(err, CR_E_INVALID, CR_NAME_INVALID_MSG);
    reg_model_t *m = NULL;
    cr_status_t st = reg_model_load(s, &name, &m, err);
    if (st == CR_E_NOT_FOUND)
        return cr_err_set(err, st, "model \"%s\" not found", req->model);
    if (st)
        return st;
    if (reg_resolve_cache_get(cache, req->model, m->digest, id, reply)) {
        reg_model_destroy(&m);
        return CR_OK;
    }
    cr_gguf_t *g = NULL;
    if (!m->model_layer) {
        st = cr_err_set(err, CR_E_INVALID, "model \"%s\" has no GGUF weights",
                        req->model);
        goto out;
    }
    char path[REG_PATH_MAX];
    reg_model_layer_path(s, m->model_layer, path, sizeof path);
    st = cr_gguf_open(path, &g, err);
    if (st) {
        cr_err_wrap(err, "model \"%s\"", req->model);
        goto out;
    }
    st = fill_resolved(s, m, g, reply);
    if (st) {
        msg_clear(reply);
        cr_err_set(err, st, "out of memory resolving \"%s\"", req->model);
    } else {
        reg_resolve_cache_put(cache, req->model, m->digest, reply);
    }
out:
    cr_gguf_close(&g);
    reg_model_destroy(&m);
    return st;
}

/* ---- show ---- */

cr_status_t reg_op_show(reg_store_t *s, const char *id,
                        const msg_show_body_t *req, msg_t *reply,
                        cr_err_t *err)
{
    msg_init(reply, MSG_show_reply, id);
    cr_model_name_t name;
    if (!req->model || cr_model_name_parse(req->model, &name, NULL))
        return cr_err_set(err, CR_E_INVALID, CR_NAME_INVALID_MSG);
    reg_model_t *m = NULL;
    cr_status_t st = reg_model_load(s, &name, &m, err);
    if (st == CR_E_NOT_FOUND)
        return cr_err_set(err, st, "model '%s' not found", req->model);
    if (st)
        return st;
    cr_buf_t body;
    cr_buf_init(&body, MSG_FRAME_MAX - 4096);
    st = reg_show_body(s, m, req->has_verbose && req->verbose,
                       req->has_system ? req->system : NULL,
                       req->has_options ? req->options : NULL, &body, err);
    if (!st) {
        reply->u.show_reply.body = msg_strdup(reply, body.data);
        reply->u.show_reply.has_body = reply->u.show_reply.body != NULL;
        if (!reply->u.show_reply.body)
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    cr_buf_free(&body);
    reg_model_destroy(&m);
    return st;
}

/* ---- blob_head ---- */

cr_status_t reg_op_blob_head(reg_store_t *s, const msg_blob_head_body_t *req,
                             cr_err_t *err)
{
    char hex[REG_HEX_LEN + 1];
    cr_status_t st = reg_digest_parse(req->digest, hex, err);
    if (st)
        return st;
    if (!reg_store_blob_exists(s, hex, NULL))
        return cr_err_set(err, CR_E_NOT_FOUND, "blob sha256:%s not found", hex);
    return CR_OK;
}
