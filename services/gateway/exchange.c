/* exchange.c: one bus request, one reply (see exchange.h). */
#include "lib/prelude.h"
#include "services/gateway/exchange.h"

#include "lib/log.h"

gw_wait_t gw_wait_control(gw_req_t *r)
{
    gw_wait_t w = {.idle_timeout_ms = r->ctx->cfg.reply_timeout_ms,
                   .abort_fn = gw_req_should_abort,
                   .abort_arg = r};
    return w;
}

gw_wait_t gw_wait_inference(gw_req_t *r)
{
    gw_wait_t w = {.ping_after_ms = r->ctx->cfg.ping_after_ms,
                   .abort_fn = gw_req_should_abort,
                   .abort_arg = r};
    return w;
}

cr_status_t gw_call_start(gw_req_t *r, const char *peer, msg_t *m,
                          gw_call_t **call, cr_err_t *err)
{
    *call = NULL;
    const char *ep = !strcmp(peer, "scheduler") ? r->ctx->scheduler_ep
                                                : r->ctx->registry_ep;
    /* A stream's chunks may come straight from its runner (call.h). */
    if (m->type == MSG_generate || m->type == MSG_chat) {
        m->u.request.direct = true;
        m->u.request.has_direct = true;
    }
    cr_status_t st =
        gw_call_open(&r->ctx->calls, ep, peer, r->ctx->cfg.connect_timeout_ms, call, err);
    if (!st)
        st = gw_call_send(*call, m, err);
    if (st) {
        /* A full budget is load, not a fault: no warning per request. */
        if (st == CR_E_BUSY)
            cr_log_debug("%s %s: %s", r->method, r->path, err->msg);
        else
            cr_log_warn("%s %s: %s", r->method, r->path, err->msg);
        gw_call_destroy(call);
        return st;
    }
    cr_log_debug("%s %s -> %s %s", r->method, r->path, peer,
                 gw_call_id(*call));
    return CR_OK;
}

cr_status_t gw_call_await(gw_call_t *call, const gw_wait_t *w, msg_t *reply,
                          bool *from_peer, cr_err_t *err)
{
    if (from_peer)
        *from_peer = false;
    cr_status_t st = gw_call_recv(call, w, reply, err);
    if (st) {
        gw_call_cancel(call);
        return st;
    }
    if (reply->type == MSG_error) {
        st = (cr_status_t)reply->u.error.status;
        if (!st)
            st = CR_E_INTERNAL;
        cr_err_set(err, st, "%s",
                   reply->u.error.message ? reply->u.error.message
                                          : "unknown error");
        msg_clear(reply);
        if (from_peer)
            *from_peer = true;
        return st;
    }
    return CR_OK;
}

cr_status_t gw_exchange(gw_req_t *r, const char *peer, msg_t *m,
                        const gw_wait_t *w, msg_t *reply, cr_err_t *err)
{
    memset(reply, 0, sizeof *reply);
    gw_call_t *call = NULL;
    cr_status_t st = gw_call_start(r, peer, m, &call, err);
    if (!st)
        st = gw_call_await(call, w, reply, NULL, err);
    gw_call_destroy(&call);
    return st;
}
