/* pull.c: /api/pull (see pull.h). */
#include "lib/prelude.h"
#include "services/registry/pull.h"
#include "lib/log.h"
#include "services/registry/manifest.h"
#include "services/registry/oci_client.h"
#include "services/registry/ops.h"

#include <time.h>

#define PROGRESS_EVERY_MS 60 /* Ollama's progress cadence */

/* The manifest media types we take, best first. */
#define MANIFEST_ACCEPT                                                     \
    "application/vnd.docker.distribution.manifest.v2+json, "                \
    "application/vnd.oci.image.manifest.v1+json"

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void say(reg_xfer_progress_fn fn, void *ctx, const char *status)
{
    if (!fn)
        return;
    msg_progress_body_t p = {.status = (char *)status, .has_status = true};
    fn(ctx, &p);
}

/* Progress of one blob, throttled. */
typedef struct blob_progress {
    reg_xfer_progress_fn fn;
    void *ctx;
    char status[32];  /* "pulling <12 hex>" */
    char digest[80];  /* "sha256:<hex>" */
    int64_t last_ms;
    int64_t last_completed;
} blob_progress_t;

static void blob_say(blob_progress_t *b, int64_t completed, int64_t total)
{
    if (!b->fn)
        return;
    msg_progress_body_t p = {.status = b->status, .has_status = true,
                             .digest = b->digest, .has_digest = true,
                             .total = total, .has_total = true};
    if (completed > 0) {
        p.completed = completed;
        p.has_completed = true;
    }
    b->fn(b->ctx, &p);
}

static void on_blob_progress(void *ud, int64_t completed, int64_t total)
{
    blob_progress_t *b = ud;
    int64_t now = mono_ms();
    /* A repeat says nothing new; the final one in particular would show
     * the layer twice (the download reports its end once more after the
     * digest check). */
    if (completed == b->last_completed)
        return;
    if (now - b->last_ms < PROGRESS_EVERY_MS && completed != total)
        return;
    b->last_ms = now;
    b->last_completed = completed;
    blob_say(b, completed, total);
}

#define PULL_ROUNDS 3 /* passes over the blobs before giving up */

static bool all_present(reg_store_t *s, const reg_manifest_t *m)
{
    for (size_t i = 0; i <= m->n_layers; i++) {
        const reg_layer_t *l = i < m->n_layers ? &m->layers[i] : &m->config;
        if (!reg_store_blob_exists(s, l->hex, NULL))
            return false;
    }
    return true;
}

static cr_status_t fetch_manifest(reg_oci_t *c, const char *tag, char **data,
                                  size_t *len, cr_err_t *err)
{
    char url[REG_URL_MAX];
    snprintf(url, sizeof url, "%s/v2/%s/manifests/%s", reg_oci_base(c),
             reg_oci_repo(c), tag);
    reg_http_req_t req;
    reg_http_req_init(&req, "GET", url);
    req.accept = MANIFEST_ACCEPT;
    req.body_max = REG_MANIFEST_MAX;
    reg_http_resp_t resp = {0};
    cr_err_t e;
    cr_err_clear(&e);
    cr_status_t st = reg_oci_send(c, &req, &resp, &e);
    if (!st && resp.status != 200) {
        st = reg_oci_status_err(&resp, &e);
        if (st == CR_E_NOT_FOUND)
            cr_err_set(&e, CR_E_NOT_FOUND, "file does not exist");
    }
    if (st) {
        reg_http_resp_free(&resp);
        return cr_err_set(err, st, "pull model manifest: %s", e.msg);
    }
    *len = resp.body.len;
    *data = cr_buf_steal(&resp.body);
    if (!*data)
        *data = strdup("");
    reg_http_resp_free(&resp);
    return *data ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
}

cr_status_t reg_pull(reg_store_t *s, const reg_xfer_env_t *env,
                     const char *model, bool insecure, const atomic_bool *cancel,
                     reg_xfer_progress_fn fn, void *ctx, cr_err_t *err)
{
    cr_model_name_t name;
    if (!model || cr_model_name_parse(model, &name, err))
        return cr_err_set(err, CR_E_INVALID, CR_NAME_INVALID_MSG);
    reg_oci_t *c = NULL;
    char *raw = NULL;
    size_t raw_len = 0;
    reg_manifest_t m, old;
    memset(&m, 0, sizeof m);
    memset(&old, 0, sizeof old);
    bool have_old = false, locked = false;
    cr_status_t st = reg_oci_new(&name, insecure, &c, err);
    if (st)
        return st;

    say(fn, ctx, "pulling manifest");
    if ((st = fetch_manifest(c, name.tag, &raw, &raw_len, err)))
        goto out;
    cr_err_t perr;
    cr_err_clear(&perr);
    if (reg_manifest_parse(raw, raw_len, &m, &perr)) {
        st = cr_err_set(err, CR_E_CORRUPT, "pull model manifest: %s", perr.msg);
        goto out;
    }
    if (!m.config.hex[0]) {
        st = cr_err_set(err, CR_E_CORRUPT, "pull model manifest: no config");
        goto out;
    }

    /* Layers, then the config, as Ollama does. A blob another model had
     * may be pruned by a concurrent delete while we fetch the rest, so
     * the set is checked again before the manifest goes in (a few
     * rounds; the remaining window is the manifest write itself). */
    for (int round = 0; round < PULL_ROUNDS && (round == 0 || !all_present(s, &m));
         round++)
    for (size_t i = 0; i <= m.n_layers; i++) {
        const reg_layer_t *l = i < m.n_layers ? &m.layers[i] : &m.config;
        blob_progress_t b = {.fn = fn, .ctx = ctx, .last_completed = -1};
        snprintf(b.status, sizeof b.status, "pulling %.12s", l->hex);
        snprintf(b.digest, sizeof b.digest, "sha256:%s", l->hex);
        if (cancel && atomic_load(cancel)) {
            st = cr_err_set(err, CR_E_CANCELED, "canceled");
            goto out;
        }
        if (reg_store_blob_exists(s, l->hex, NULL)) {
            blob_say(&b, l->size, l->size);
            continue;
        }
        blob_say(&b, 0, l->size);
        st = reg_blob_download(s, env ? env->transfers : NULL, c, l->hex,
                               l->size, env ? env->opts : NULL, cancel,
                               on_blob_progress, &b, err);
        if (st == CR_E_CORRUPT)
            say(fn, ctx, "verifying sha256 digest");
        if (st)
            goto out;
    }
    /* A canceled pull whose last blob was finished for another pull
     * (download.h) writes no manifest either. */
    if (cancel && atomic_load(cancel)) {
        st = cr_err_set(err, CR_E_CANCELED, "canceled");
        goto out;
    }
    say(fn, ctx, "verifying sha256 digest");
    say(fn, ctx, "writing manifest");
    /* From the last check of the blobs to the prune of what the manifest
     * replaced: no prune runs and no other manifest is written (store.h).
     * Nothing is said meanwhile: a send may wait for the request loop. */
    reg_store_lock(s);
    locked = true;
    if (!all_present(s, &m)) {
        st = cr_err_set(err, CR_E_IO, "blobs of %s were removed while pulling",
                        model);
        goto out;
    }

    /* The replaced manifest, if any, for pruning; write under its spelling. */
    cr_model_name_t stored = name;
    if (reg_store_manifest_find(s, &name, &stored) == CR_OK) {
        char *od = NULL;
        size_t ol = 0;
        if (reg_store_manifest_read(s, &stored, &od, &ol, NULL, NULL) == CR_OK &&
            reg_manifest_parse(od, ol, &old, NULL) == CR_OK)
            have_old = true;
        free(od);
    } else {
        stored = name;
    }
    if ((st = reg_store_manifest_write(s, &stored, raw, raw_len, err)))
        goto out;
    size_t removed = 0;
    if (have_old && !(env && env->noprune))
        removed = reg_prune_unreferenced(s, &old);
    reg_store_unlock(s);
    locked = false;
    if (removed) {
        cr_log_info("pull %s: removed %zu unused layers", model, removed);
        say(fn, ctx, "removing unused layers");
    }
    say(fn, ctx, "success");
out:
    if (locked)
        reg_store_unlock(s);
    if (st)
        cr_log_info("pull %s failed: %s", model, err->msg);
    if (have_old)
        reg_manifest_free(&old);
    reg_manifest_free(&m);
    free(raw);
    reg_oci_destroy(&c);
    return st;
}
