/* console_status.c: GET /api/console/status (see console_status.h). */
#include "lib/prelude.h"
#include "services/gateway/console_status.h"

#include "lib/log.h"
#include "services/gateway/call.h"
#include "services/gateway/exchange.h"
#include "services/gateway/render.h"

/* A reply bound far above any real one (a few KB per host and model). */
#define STATUS_REPLY_CAP (16u * 1024 * 1024)

static void put_model(gw_jw_t *w, const msg_loaded_model_t *e)
{
    gw_jw_obj(w);
    gw_render_loaded_fields(w, e);
    /* The part of size not on GPUs: on the host's CPU. */
    gw_jw_key(w, "size_cpu");
    gw_jw_i64(w, e->size > e->size_vram ? e->size - e->size_vram : 0);
    gw_jw_key(w, "gpus");
    gw_jw_arr(w);
    for (size_t i = 0; e->has_devices && i < e->devices.n; i++) {
        const msg_device_split_t *d = &e->devices.v[i];
        gw_jw_obj(w);
        gw_jw_key(w, "index");
        gw_jw_i64(w, d->index);
        if (d->has_uuid && d->uuid && *d->uuid) {
            gw_jw_key(w, "uuid");
            gw_jw_str(w, d->uuid);
        }
        gw_jw_key(w, "first_layer");
        gw_jw_i64(w, d->first_layer);
        gw_jw_key(w, "layers");
        gw_jw_i64(w, d->layers);
        gw_jw_key(w, "bytes");
        gw_jw_i64(w, d->bytes);
        gw_jw_end_obj(w);
    }
    gw_jw_end_arr(w);
    gw_jw_end_obj(w);
}

static void put_memory(gw_jw_t *w, int64_t total, int64_t used, int64_t free)
{
    gw_jw_key(w, "total");
    gw_jw_i64(w, total);
    gw_jw_key(w, "used");
    gw_jw_i64(w, used);
    gw_jw_key(w, "free");
    gw_jw_i64(w, free);
}

static void put_host(gw_jw_t *w, const msg_host_status_t *h)
{
    bool local = !h->has_name || !h->name || !*h->name;
    gw_jw_obj(w);
    if (!local) {
        gw_jw_key(w, "name");
        gw_jw_str(w, h->name);
    }
    gw_jw_key(w, "local");
    gw_jw_bool(w, local);
    gw_jw_key(w, "described");
    gw_jw_bool(w, h->has_fake && h->fake);
    gw_jw_key(w, "ram");
    gw_jw_obj(w);
    put_memory(w, h->ram_total, h->ram_used, h->ram_free);
    gw_jw_end_obj(w);
    gw_jw_key(w, "gpus");
    gw_jw_arr(w);
    for (size_t i = 0; h->has_gpus && i < h->gpus.n; i++) {
        const msg_gpu_status_t *g = &h->gpus.v[i];
        gw_jw_obj(w);
        gw_jw_key(w, "index");
        gw_jw_i64(w, g->index);
        gw_jw_key(w, "name");
        gw_jw_str(w, g->has_name ? g->name : NULL);
        if (g->has_uuid && g->uuid && *g->uuid) {
            gw_jw_key(w, "uuid");
            gw_jw_str(w, g->uuid);
        }
        put_memory(w, g->total, g->used, g->free);
        gw_jw_end_obj(w);
    }
    gw_jw_end_arr(w);
    gw_jw_end_obj(w);
}

cr_status_t gw_render_console_status(cr_buf_t *b,
                                     const msg_status_reply_body_t *r)
{
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "models");
    gw_jw_arr(&w);
    for (size_t i = 0; r->has_models && i < r->models.n; i++)
        put_model(&w, &r->models.v[i]);
    gw_jw_end_arr(&w);
    gw_jw_key(&w, "hosts");
    gw_jw_arr(&w);
    for (size_t i = 0; r->has_hosts && i < r->hosts.n; i++)
        put_host(&w, &r->hosts.v[i]);
    gw_jw_end_arr(&w);
    int64_t depth = 0;
    gw_jw_key(&w, "queue");
    gw_jw_arr(&w);
    for (size_t i = 0; r->has_queue && i < r->queue.n; i++) {
        const msg_queue_entry_t *q = &r->queue.v[i];
        gw_jw_obj(&w);
        gw_jw_key(&w, "model");
        gw_jw_str(&w, q->model);
        gw_jw_key(&w, "waiting");
        gw_jw_i64(&w, q->waiting);
        gw_jw_key(&w, "oldest_seconds");
        gw_jw_f64(&w, (double)q->oldest_ms / 1000.0);
        gw_jw_end_obj(&w);
        depth += q->waiting;
    }
    gw_jw_end_arr(&w);
    gw_jw_key(&w, "queue_depth");
    gw_jw_i64(&w, depth);
    gw_jw_end_obj(&w);
    return w.st;
}

enum MHD_Result gw_console_status(gw_req_t *r)
{
    msg_t m, reply;
    msg_init(&m, MSG_status, NULL);
    memset(&reply, 0, sizeof reply);
    gw_call_t *call = NULL;
    cr_err_t err;
    cr_status_t st = gw_call_start(r, "scheduler", &m, &call, &err);
    if (st)
        return gw_reply_error(r, st, err.msg);
    gw_wait_t wait = gw_wait_control(r);
    bool from_peer = false;
    st = gw_call_await(call, &wait, &reply, &from_peer, &err);
    gw_call_destroy(&call);
    if (st == CR_E_CANCELED && !from_peer)
        return MHD_NO; /* the client went away: nobody to answer */
    if (st)
        return gw_reply_error(r, st, err.msg);
    if (reply.type != MSG_status_reply) {
        char text[160];
        snprintf(text, sizeof text, "unexpected reply '%s' from the scheduler",
                 msg_type_name(reply.type));
        cr_log_warn("%s %s: %s", r->method, r->path, text);
        msg_clear(&reply);
        return gw_reply_error(r, CR_E_PROTO, text);
    }
    cr_buf_t b;
    cr_buf_init(&b, STATUS_REPLY_CAP);
    st = gw_render_console_status(&b, &reply.u.status_reply);
    msg_clear(&reply);
    enum MHD_Result ret = st ? gw_reply_error(r, st, "reply too large")
                             : gw_reply_json(r, MHD_HTTP_OK, b.data, b.len);
    cr_buf_free(&b);
    return ret;
}
