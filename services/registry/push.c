/* push.c: /api/push (see push.h). */
#include "lib/prelude.h"
#include "services/registry/push.h"
#include "lib/log.h"
#include "services/registry/manifest.h"
#include "services/registry/oci_client.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static void say(reg_xfer_progress_fn fn, void *ctx, const char *status)
{
    if (!fn)
        return;
    msg_progress_body_t p = {.status = (char *)status, .has_status = true};
    fn(ctx, &p);
}

static void blob_say(reg_xfer_progress_fn fn, void *ctx, const char *hex,
                     int64_t completed, int64_t total)
{
    if (!fn)
        return;
    char status[32], digest[80];
    snprintf(status, sizeof status, "pushing %.12s", hex);
    snprintf(digest, sizeof digest, "sha256:%s", hex);
    msg_progress_body_t p = {.status = status, .has_status = true,
                             .digest = digest, .has_digest = true,
                             .total = total, .has_total = true};
    if (completed > 0) {
        p.completed = completed;
        p.has_completed = true;
    }
    fn(ctx, &p);
}

/* "ns/model" of a layer's `from` model name, lower case; false if from
 * does not name a model on the same host. */
static bool mount_source(const char *from, const cr_model_name_t *to,
                         char *out, size_t cap)
{
    cr_model_name_t n;
    if (!from || cr_model_name_parse(from, &n, NULL) ||
        strcasecmp(n.host, to->host) != 0)
        return false;
    snprintf(out, cap, "%s/%s", n.ns, n.model);
    for (char *p = out; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return true;
}

static cr_status_t head_blob(reg_oci_t *c, const char *hex, bool *exists,
                             cr_err_t *err)
{
    char url[REG_URL_MAX];
    snprintf(url, sizeof url, "%s/v2/%s/blobs/sha256:%s", reg_oci_base(c),
             reg_oci_repo(c), hex);
    reg_http_req_t req;
    reg_http_req_init(&req, "HEAD", url);
    reg_http_resp_t resp = {0};
    cr_status_t st = reg_oci_send(c, &req, &resp, err);
    if (!st) {
        *exists = resp.status == 200;
        if (resp.status != 200 && resp.status != 404)
            st = reg_oci_status_err(&resp, err);
    }
    reg_http_resp_free(&resp);
    return st;
}

static cr_status_t upload_blob(reg_store_t *s, reg_oci_t *c,
                               const cr_model_name_t *name,
                               const reg_layer_t *l, const reg_dl_opts_t *o,
                               const atomic_bool *cancel,
                               reg_xfer_progress_fn fn, void *ctx,
                               cr_err_t *err)
{
    char url[REG_URL_MAX], loc[REG_URL_MAX], from[256];
    int n = snprintf(url, sizeof url, "%s/v2/%s/blobs/uploads/", reg_oci_base(c),
                     reg_oci_repo(c));
    if (mount_source(l->from, name, from, sizeof from) &&
        strcmp(from, reg_oci_repo(c)) != 0)
        snprintf(url + n, sizeof url - (size_t)n, "?mount=sha256:%s&from=%s",
                 l->hex, from);
    reg_http_req_t req;
    reg_http_req_init(&req, "POST", url);
    reg_http_resp_t resp = {0};
    cr_status_t st = reg_oci_send(c, &req, &resp, err);
    if (st)
        goto out;
    if (resp.status == 201) { /* mounted from the other repository */
        blob_say(fn, ctx, l->hex, l->size, l->size);
        goto out;
    }
    if (resp.status != 202) {
        st = reg_oci_status_err(&resp, err);
        goto out;
    }
    snprintf(loc, sizeof loc, "%s",
             resp.upload_location[0] ? resp.upload_location : resp.location);
    if (!loc[0]) {
        st = cr_err_set(err, CR_E_UNAVAILABLE, "upload has no location");
        goto out;
    }

    char path[REG_PATH_MAX];
    reg_store_blob_path(s, l->hex, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        st = cr_err_set(err, CR_E_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    int64_t part = l->size / 16;
    if (part < o->part_min_bytes)
        part = o->part_min_bytes;
    if (part > o->part_max_bytes)
        part = o->part_max_bytes;
    if (part < 1)
        part = 1;
    for (int64_t off = 0; off < l->size && !st; off += part) {
        if (cancel && atomic_load(cancel)) {
            st = cr_err_set(err, CR_E_CANCELED, "canceled");
            break;
        }
        int64_t len = l->size - off < part ? l->size - off : part;
        char range[64];
        snprintf(range, sizeof range, "%lld-%lld", (long long)off,
                 (long long)(off + len - 1));
        reg_http_req_init(&req, "PATCH", loc);
        req.content_type = "application/octet-stream";
        req.content_range = range;
        req.fd = fd;
        req.fd_offset = off;
        req.fd_len = len;
        int64_t delay = o->backoff_ms;
        for (int attempt = 1;; attempt++) {
            st = reg_oci_send(c, &req, &resp, err);
            if (!st && resp.status == 307 && resp.location[0]) {
                /* Bytes go to the redirect target, without our auth. */
                reg_http_req_t put = req;
                char target[REG_URL_MAX];
                snprintf(target, sizeof target, "%s", resp.location);
                put.method = "PUT";
                put.url = target;
                put.no_auth = true;
                put.content_range = NULL;
                char next[REG_URL_MAX];
                snprintf(next, sizeof next, "%s", resp.upload_location);
                st = reg_oci_send(c, &put, &resp, err);
                if (!st && resp.status / 100 != 2)
                    st = reg_oci_status_err(&resp, err);
                if (!st && next[0])
                    snprintf(loc, sizeof loc, "%s", next);
                break;
            }
            if (!st && resp.status / 100 == 2) {
                const char *next = resp.upload_location[0] ? resp.upload_location
                                                           : resp.location;
                if (next[0])
                    snprintf(loc, sizeof loc, "%s", next);
                break;
            }
            if (!st)
                st = reg_oci_status_err(&resp, err);
            if (st == CR_E_UNAUTHORIZED || st == CR_E_NOT_FOUND ||
                attempt >= o->max_attempts)
                break;
            reg_http_resp_free(&resp);
            cr_log_info("push sha256:%.12s: %s; retrying", l->hex, err->msg);
            usleep((useconds_t)(delay * 1000));
            delay *= 2;
        }
        reg_http_resp_free(&resp);
        if (!st)
            blob_say(fn, ctx, l->hex, off + len, l->size);
    }
    close(fd);
    if (st)
        goto out;

    char commit[REG_URL_MAX + 96];
    snprintf(commit, sizeof commit, "%s%cdigest=sha256:%s", loc,
             strchr(loc, '?') ? '&' : '?', l->hex);
    reg_http_req_init(&req, "PUT", commit);
    req.content_type = "application/octet-stream";
    if ((st = reg_oci_send(c, &req, &resp, err)))
        goto out;
    if (resp.status != 201 && resp.status != 204 && resp.status != 200)
        st = reg_oci_status_err(&resp, err);
    else if (l->size == 0)
        blob_say(fn, ctx, l->hex, 0, 0);
out:
    reg_http_resp_free(&resp);
    return st;
}

cr_status_t reg_push(reg_store_t *s, const reg_xfer_env_t *env,
                     const char *model, bool insecure, const atomic_bool *cancel,
                     reg_xfer_progress_fn fn, void *ctx, cr_err_t *err)
{
    cr_model_name_t name;
    if (!model || cr_model_name_parse(model, &name, err))
        return cr_err_set(err, CR_E_INVALID, CR_NAME_INVALID_MSG);
    reg_dl_opts_t def;
    const reg_dl_opts_t *o = env && env->opts ? env->opts : NULL;
    if (!o) {
        reg_dl_opts_default(&def);
        o = &def;
    }
    reg_oci_t *c = NULL;
    char *raw = NULL;
    size_t raw_len = 0;
    reg_manifest_t m;
    memset(&m, 0, sizeof m);
    cr_status_t st;

    say(fn, ctx, "retrieving manifest");
    cr_model_name_t stored;
    if (reg_store_manifest_find(s, &name, &stored) != CR_OK)
        return cr_err_set(err, CR_E_NOT_FOUND, "model \"%s\" not found", model);
    if ((st = reg_store_manifest_read(s, &stored, &raw, &raw_len, NULL, err)))
        return st;
    if ((st = reg_manifest_parse(raw, raw_len, &m, err)))
        goto out;
    /* The remote name is the one asked for (its host decides where). */
    if ((st = reg_oci_new(&name, insecure, &c, err)))
        goto out;

    for (size_t i = 0; i <= m.n_layers; i++) {
        const reg_layer_t *l = i < m.n_layers ? &m.layers[i] : &m.config;
        if (!l->hex[0])
            continue;
        if (cancel && atomic_load(cancel)) {
            st = cr_err_set(err, CR_E_CANCELED, "canceled");
            goto out;
        }
        blob_say(fn, ctx, l->hex, 0, l->size);
        bool exists = false;
        if ((st = head_blob(c, l->hex, &exists, err)))
            goto out;
        if (exists) {
            blob_say(fn, ctx, l->hex, l->size, l->size);
            continue;
        }
        if ((st = upload_blob(s, c, &name, l, o, cancel, fn, ctx, err)))
            goto out;
    }

    say(fn, ctx, "pushing manifest");
    char url[REG_URL_MAX];
    snprintf(url, sizeof url, "%s/v2/%s/manifests/%s", reg_oci_base(c),
             reg_oci_repo(c), name.tag);
    reg_http_req_t req;
    reg_http_req_init(&req, "PUT", url);
    req.content_type = m.media_type && *m.media_type ? m.media_type
                                                      : REG_MT_MANIFEST;
    req.body = raw;
    req.body_len = raw_len;
    reg_http_resp_t resp = {0};
    st = reg_oci_send(c, &req, &resp, err);
    if (!st && resp.status != 201 && resp.status != 200)
        st = reg_oci_status_err(&resp, err);
    reg_http_resp_free(&resp);
    if (!st)
        say(fn, ctx, "success");
out:
    if (st)
        cr_log_info("push %s failed: %s", model, err->msg);
    reg_manifest_free(&m);
    free(raw);
    reg_oci_destroy(&c);
    return st;
}
