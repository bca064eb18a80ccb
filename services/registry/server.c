/* server.c: request dispatch and the ROUTER loop (see server.h). */
#include "lib/prelude.h"
#include "services/registry/server.h"
#include "lib/log.h"
#include "proto/bus.h"
#include "lib/env.h"
#include "services/registry/create.h"
#include "services/registry/jobs.h"
#include "services/registry/ops.h"
#include "services/registry/peers.h"
#include "services/registry/uploads.h"

#include <errno.h>
#include <time.h>

#define TICK_MS 1000 /* how often run() wakes with nothing to read */
/* How often the owner of an upload or job is asked whether it is still
 * there (peers.h): a killed gateway's work is dropped within about two. */
#define PEER_PROBE_MS 1000

struct reg_server {
    reg_store_t *store;
    reg_uploads_t *uploads;
    reg_transfers_t *transfers; /* downloads shared between pulls */
    reg_dl_opts_t dl_opts;
    reg_xfer_env_t env;         /* what jobs see (points into this) */
    reg_jobs_t *jobs;           /* pulls and pushes in flight */
    reg_resolve_cache_t *resolved; /* recent resolve answers */
    const zframe_t *peer;       /* identity of the request being handled */
    reg_peers_t *peers;         /* owners of uploads and jobs */
    zsock_t *router;            /* run()'s socket while it runs, else NULL */
};

static void send_reply(reg_reply_fn fn, void *ctx, const msg_t *m);

int64_t reg_server_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

reg_server_t *reg_server_new(const char *models_dir, cr_err_t *err)
{
    reg_server_t *s = calloc(1, sizeof *s);
    if (!s) {
        cr_err_set(err, CR_E_NOMEM, "out of memory");
        return NULL;
    }
    s->store = reg_store_new(models_dir, err);
    if (!s->store)
        goto fail;
    s->uploads = reg_uploads_new(s->store, REG_UPLOAD_TIMEOUT_MS);
    s->transfers = reg_transfers_new();
    s->peers = reg_peers_new();
    reg_dl_opts_default(&s->dl_opts);
    s->env.transfers = s->transfers;
    s->env.opts = &s->dl_opts;
    s->env.noprune = cr_env_bool("NOPRUNE", false);
    if (s->uploads && s->transfers)
        s->jobs = reg_jobs_new(s->store, &s->env);
    s->resolved = reg_resolve_cache_new();
    if (!s->uploads || !s->transfers || !s->jobs || !s->peers || !s->resolved) {
        cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto fail;
    }
    return s;
fail:
    reg_server_destroy(&s);
    return NULL;
}

void reg_server_destroy(reg_server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    reg_server_t *s = *self_p;
    reg_jobs_destroy(&s->jobs); /* joins: before what the jobs borrow */
    reg_transfers_destroy(&s->transfers);
    reg_uploads_destroy(&s->uploads);
    reg_peers_destroy(&s->peers);
    reg_resolve_cache_destroy(&s->resolved);
    reg_store_destroy(&s->store);
    free(s);
    *self_p = NULL;
}

reg_store_t *reg_server_store(reg_server_t *s)
{
    return s->store;
}

void reg_server_set_upload_timeout(reg_server_t *s, int64_t ms)
{
    reg_uploads_t *u = reg_uploads_new(s->store, ms);
    if (!u)
        return;
    reg_uploads_destroy(&s->uploads);
    s->uploads = u;
}

size_t reg_server_uploads(const reg_server_t *s)
{
    return reg_uploads_count(s->uploads);
}

/* Sends frame (len bytes) to the peer `who` on router without waiting:
 * false only when the peer is gone (its connection closed); a full queue
 * drops the frame, as a ROUTER without ROUTER_MANDATORY would. */
static bool send_to_identity(zsock_t *router, const void *who, size_t who_len,
                             const void *frame, size_t len)
{
    void *z = zsock_resolve(router);
    if (zmq_send(z, who, who_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
        zmq_send(z, frame, len, ZMQ_DONTWAIT) < 0)
        return zmq_errno() != EHOSTUNREACH;
    return true;
}

/* A probe of one owner (peers.h): false once its request is over or its
 * connection is gone, the latter dropping its upload and canceling its
 * job (a pull shared with a live client goes on for that one). */
static bool probe_owner(void *ctx, const char *id, const void *who, size_t len)
{
    reg_server_t *s = ctx;
    if (!reg_uploads_has(s->uploads, id) && !reg_jobs_has(s->jobs, id))
        return false;
    msg_t m;
    msg_init(&m, MSG_pong, id);
    zframe_t *f = NULL;
    if (bus_encode_frame(&m, &f, NULL))
        return true;
    bool there = send_to_identity(s->router, who, len, zframe_data(f),
                                  zframe_size(f));
    zframe_destroy(&f);
    if (there)
        return true;
    if (reg_uploads_has(s->uploads, id)) {
        cr_log_info("request %s: its gateway connection is gone; dropping "
                    "its upload", id);
        reg_uploads_cancel(s->uploads, id);
    }
    reg_jobs_cancel_peer(s->jobs, who, len);
    return false;
}

void reg_server_tick(reg_server_t *s, int64_t now_ms)
{
    reg_uploads_expire(s->uploads, now_ms);
    reg_jobs_reap(s->jobs);
    if (s->router)
        reg_peers_probe(s->peers, now_ms, PEER_PROBE_MS, probe_owner, s);
}

/* Remembers the peer being served as the owner of request id. */
static void note_owner(reg_server_t *s, const char *id)
{
    if (!s->peer)
        return;
    zframe_t *who = (zframe_t *)s->peer;
    if (reg_peers_note(s->peers, id, zframe_data(who), zframe_size(who),
                       reg_server_now_ms()))
        cr_log_warn("request %s: its owner cannot be watched; it is dropped "
                    "only by cancel or timeout", id);
}

void reg_server_set_dl_opts(reg_server_t *s, const reg_dl_opts_t *o)
{
    s->dl_opts = *o;
}

size_t reg_server_jobs(reg_server_t *s)
{
    return reg_jobs_reap(s->jobs);
}

bool reg_server_pump(reg_server_t *s, int timeout_ms, reg_reply_fn fn, void *ctx)
{
    zframe_t *who = NULL, *frame = NULL;
    if (!reg_jobs_recv(s->jobs, timeout_ms, &who, &frame))
        return false;
    msg_t m;
    cr_err_t err;
    if (msg_decode(zframe_data(frame), zframe_size(frame), &m, &err) == CR_OK)
        send_reply(fn, ctx, &m);
    else
        cr_log_warn("job reply does not decode: %s", err.msg);
    msg_clear(&m);
    zframe_destroy(&who);
    zframe_destroy(&frame);
    return true;
}

/* ---- replies ---- */

static void send_reply(reg_reply_fn fn, void *ctx, const msg_t *m)
{
    cr_status_t st = fn(ctx, m);
    if (st)
        cr_log_warn("request %s: sending %s failed: %s", m->id,
                    msg_type_name(m->type), cr_status_str(st));
}

static void reply_error(reg_reply_fn fn, void *ctx, const char *id,
                        const cr_err_t *err)
{
    msg_t m;
    cr_status_t st = err->status ? err->status : CR_E_INTERNAL;
    msg_make_error(&m, id, st, "%s", err->msg[0] ? err->msg : cr_status_str(st));
    cr_log_debug("request %s: error %d: %s", id, (int)st, m.u.error.message);
    send_reply(fn, ctx, &m);
    msg_clear(&m);
}

static void reply_ok(reg_reply_fn fn, void *ctx, const char *id, bool has_created,
                     bool created)
{
    msg_t m;
    msg_init(&m, MSG_ok, id);
    if (has_created) {
        m.u.ok.created = created;
        m.u.ok.has_created = true;
    }
    send_reply(fn, ctx, &m);
    msg_clear(&m);
}

/* Progress of a create, forwarded as it happens. */
typedef struct progress_ctx {
    reg_reply_fn fn;
    void *ctx;
    const char *id;
} progress_ctx_t;

static void on_progress(void *ctx, const msg_progress_body_t *pb)
{
    progress_ctx_t *p = ctx;
    msg_t m;
    msg_init(&m, MSG_progress, p->id);
    m.u.progress = *pb; /* borrowed for the send */
    send_reply(p->fn, p->ctx, &m);
    msg_clear(&m);
}

/* ---- dispatch ---- */

/* Runs req in a job thread for the peer being served; its replies come
 * through the job socket (run() forwards them, tests reg_server_pump()). */
static cr_status_t start_job(reg_server_t *s, const msg_t *req, cr_err_t *err)
{
    const void *who = s->peer ? zframe_data((zframe_t *)s->peer) : NULL;
    size_t who_len = s->peer ? zframe_size((zframe_t *)s->peer) : 0;
    cr_status_t st = reg_jobs_start(s->jobs, req, who, who_len, err);
    if (!st)
        note_owner(s, req->id);
    return st;
}

void reg_server_handle(reg_server_t *s, const msg_t *req, reg_reply_fn fn,
                       void *ctx)
{
    cr_err_t err;
    cr_err_clear(&err);
    msg_t reply;
    memset(&reply, 0, sizeof reply);
    cr_status_t st = CR_OK;
    const char *id = req->id;
    cr_log_debug("request %s: %s", id, msg_type_name(req->type));
    switch (req->type) {
    case MSG_tags:
        st = reg_op_tags(s->store, id, &reply, &err);
        break;
    case MSG_show:
        st = reg_op_show(s->store, id, &req->u.show, &reply, &err);
        break;
    case MSG_resolve:
        st = reg_op_resolve_cached(s->store, s->resolved, id, &req->u.resolve, &reply, &err);
        break;
    case MSG_copy:
        st = reg_op_copy(s->store, &req->u.copy, &err);
        if (!st)
            msg_init(&reply, MSG_ok, id);
        break;
    case MSG_delete:
        st = reg_op_delete(s->store, &req->u.delete, &err);
        if (!st)
            msg_init(&reply, MSG_ok, id);
        break;
    case MSG_blob_head:
        st = reg_op_blob_head(s->store, &req->u.blob_head, &err);
        if (!st)
            msg_init(&reply, MSG_ok, id);
        break;
    case MSG_create: {
        if (reg_create_runs_long(s->store, &req->u.create)) {
            /* Minutes of work (quantizing, pulling the FROM model,
             * converting safetensors): a job thread, like a pull, that the
             * client's cancel stops. */
            if (!(st = start_job(s, req, &err)))
                return;
            break;
        }
        progress_ctx_t p = {fn, ctx, id};
        st = reg_create_ex(s->store, &req->u.create, NULL, on_progress, &p, &err);
        if (!st)
            msg_init(&reply, MSG_ok, id);
        else
            cr_log_info("create %s failed: %s",
                        req->u.create.model ? req->u.create.model : "?",
                        err.msg);
        break;
    }
    case MSG_blob_put: {
        bool done = false, created = false;
        st = reg_uploads_put(s->uploads, id, &req->u.blob_put,
                             reg_server_now_ms(), &done, &created, &err);
        if (!st) {
            if (!done)
                note_owner(s, id);
            reply_ok(fn, ctx, id, done, created);
            return;
        }
        break;
    }
    case MSG_cancel:
        /* The client went away: drop its upload or stop waiting for its
         * pull/push. Nothing to answer. */
        reg_uploads_cancel(s->uploads, id);
        reg_jobs_cancel(s->jobs, id);
        return;
    case MSG_pull:
    case MSG_push: {
        if (!(st = start_job(s, req, &err)))
            return;
        break;
    }
    case MSG_ping:
        msg_init(&reply, MSG_pong, id);
        break;
    default:
        st = cr_err_set(&err, CR_E_PROTO,
                        "registry: unexpected message type '%s'",
                        msg_type_name(req->type));
        break;
    }
    if (st) {
        msg_clear(&reply);
        reply_error(fn, ctx, id, &err);
        return;
    }
    send_reply(fn, ctx, &reply);
    msg_clear(&reply);
}

void reg_server_handle_frame(reg_server_t *s, const void *data, size_t len,
                             reg_reply_fn fn, void *ctx)
{
    msg_t m;
    cr_err_t err;
    cr_err_clear(&err);
    if (msg_decode(data, len, &m, &err) != CR_OK) {
        char id[MSG_ID_MAX + 1];
        snprintf(id, sizeof id, "%s", m.id);
        msg_clear(&m);
        cr_log_warn("request %s: malformed frame: %s", id, err.msg);
        err.status = CR_E_PROTO;
        reply_error(fn, ctx, id, &err);
        return;
    }
    reg_server_handle(s, &m, fn, ctx);
    msg_clear(&m);
}

/* ---- ROUTER loop ---- */

typedef struct peer {
    zsock_t *router;
    zframe_t *identity;
} peer_t;

static cr_status_t send_to_peer(void *ctx, const msg_t *reply)
{
    peer_t *p = ctx;
    cr_err_t err;
    cr_status_t st = bus_send_to(p->router, p->identity, reply, &err);
    if (st)
        cr_log_warn("request %s: %s", reply->id, err.msg);
    return st;
}

/* Sends every queued job reply on to its peer. */
static void forward_job_replies(reg_server_t *s, zsock_t *router)
{
    zframe_t *who, *frame;
    while (reg_jobs_recv(s->jobs, 0, &who, &frame)) {
        /* A reply its peer is not there for: the job's gateway is gone. */
        if (!send_to_identity(router, zframe_data(who), zframe_size(who),
                              zframe_data(frame), zframe_size(frame)))
            reg_jobs_cancel_peer(s->jobs, zframe_data(who), zframe_size(who));
        zframe_destroy(&who);
        zframe_destroy(&frame);
    }
}

cr_status_t reg_server_run(reg_server_t *s, zsock_t *router, cr_err_t *err)
{
    int64_t last_tick = reg_server_now_ms();
    /* A send to a gone peer fails (EHOSTUNREACH) instead of vanishing,
     * which is how a dead gateway is noticed; a send never waits. */
    zsock_set_router_mandatory(router, 1);
    zsock_set_sndtimeo(router, 0);
    zpoller_t *poller = zpoller_new(router, reg_jobs_socket(s->jobs), NULL);
    if (!poller)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    s->router = router;
    while (!zsys_interrupted) {
        void *which = zpoller_wait(poller, TICK_MS);
        int64_t now = reg_server_now_ms();
        if (now - last_tick >= TICK_MS) {
            reg_server_tick(s, now);
            last_tick = now;
        }
        if (which == reg_jobs_socket(s->jobs)) {
            forward_job_replies(s, router);
            continue;
        }
        if (which != router) {
            if (zpoller_terminated(poller))
                break;
            continue;
        }
        msg_t m;
        zframe_t *identity = NULL;
        cr_err_t rerr;
        cr_err_clear(&rerr);
        cr_status_t st = bus_recv(router, 0, &m, &identity, &rerr);
        if (st == CR_E_TIMEOUT) {
            zframe_destroy(&identity);
            continue;
        }
        if (st == CR_E_CANCELED) {
            zframe_destroy(&identity);
            break;
        }
        peer_t peer = {router, identity};
        if (st) {
            /* A malformed frame: answer it if we know who sent it. */
            if (identity) {
                char id[MSG_ID_MAX + 1];
                snprintf(id, sizeof id, "%s", m.id);
                rerr.status = CR_E_PROTO;
                cr_log_warn("request %s: malformed frame: %s", id, rerr.msg);
                reply_error(send_to_peer, &peer, id, &rerr);
            } else {
                cr_log_warn("bad frame on the registry socket: %s", rerr.msg);
            }
            msg_clear(&m);
            zframe_destroy(&identity);
            continue;
        }
        s->peer = identity;
        reg_server_handle(s, &m, send_to_peer, &peer);
        s->peer = NULL;
        msg_clear(&m);
        zframe_destroy(&identity);
    }
    zpoller_destroy(&poller);
    s->router = NULL;
    return CR_OK;
}
