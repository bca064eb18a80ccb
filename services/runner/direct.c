/* direct.c: a runner's direct replies to gateways (see direct.h). */
#include "lib/prelude.h"
#include "services/runner/direct.h"

#include "lib/env.h"
#include "lib/log.h"
#include "lib/size.h"
#include "proto/bus.h"
#include "proto/outbox.h"

#define EARLY_MAX 64 /* attaches for requests not started yet */
#define STREAM_BUFFER_DEFAULT (16LL << 20) /* as the scheduler's */

/* An ended request whose attach has not come: its held chunks and its
 * last reply wait for it (direct.h). */
typedef struct held_end {
    rn_direct_req_t q;
    msg_t last; /* owned copy */
    struct held_end *next;
} linger_t;

typedef struct early {
    char id[MSG_ID_MAX + 1];
    zframe_t *client; /* NULL: free */
    int64_t at_ms;
} early_t;

struct rn_direct {
    zsock_t *sock;     /* ROUTER the gateways connect to */
    zsock_t *to_sched; /* borrowed */
    bus_outbox_t *outbox;
    int64_t max_bytes;
    char endpoint[256];
    early_t early[EARLY_MAX];
    linger_t *lingers;
};

static void fall_back(rn_direct_t *d, rn_direct_req_t *q, const char *why);
static void set_direct_chunks(msg_t *m, int64_t n);

/* The lingering request's end: its chunks went (direct or not); now its
 * last reply, with their count when they went direct. */
static void linger_finish(rn_direct_t *d, linger_t *l, bool direct)
{
    for (linger_t **pp = &d->lingers; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            break;
        }
    if (direct)
        set_direct_chunks(&l->last, l->q.chunks);
    cr_err_t err;
    if (bus_send(d->to_sched, &l->last, &err)) {
        /* As the server's send_final: the request must still end. */
        cr_log_warn("request %s: its last reply cannot be sent: %s", l->q.id, err.msg);
        msg_t e;
        msg_make_error(&e, l->q.id, CR_E_TOO_LARGE, "the %s reply is too large to send",
                       msg_type_name(l->last.type));
        if (direct)
            set_direct_chunks(&e, l->q.chunks);
        bus_send(d->to_sched, &e, NULL);
        msg_clear(&e);
    }
    msg_clear(&l->last);
    zframe_destroy(&l->q.client);
    zlist_destroy(&l->q.held);
    free(l);
}

static int64_t now_ms(void)
{
    return zclock_mono();
}

cr_status_t rn_direct_new(const char *endpoint, zsock_t *to_sched, rn_direct_t **out,
                          cr_err_t *err)
{
    *out = NULL;
    if (!endpoint || strlen(endpoint) >= sizeof((rn_direct_t *)0)->endpoint ||
        strncmp(endpoint, "ipc://", 6))
        return cr_err_set(err, CR_E_INVALID, "--direct wants an ipc:// endpoint");
    rn_direct_t *d = calloc(1, sizeof *d);
    if (!d)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    snprintf(d->endpoint, sizeof d->endpoint, "%s", endpoint);
    d->to_sched = to_sched;
    d->max_bytes = STREAM_BUFFER_DEFAULT;
    char sz[64];
    int64_t v;
    if (cr_env_get("STREAM_BUFFER", sz, sizeof sz) && !cr_size_parse(sz, &v, NULL) && v > 0)
        d->max_bytes = v;
    d->sock = zsock_new(ZMQ_ROUTER);
    if (!d->sock) {
        free(d);
        return cr_err_set(err, CR_E_IO, "cannot create the direct socket");
    }
    zsock_set_router_mandatory(d->sock, 1);
    zsock_set_sndtimeo(d->sock, 0);
    zsock_set_linger(d->sock, 0); /* rn_direct_destroy lingers itself */
    if (bus_listen(d->sock, endpoint) != 0) {
        int e = zmq_errno();
        zsock_destroy(&d->sock);
        free(d);
        return cr_err_set(err, CR_E_IO, "cannot bind %s: %s", endpoint, zmq_strerror(e));
    }
    d->outbox = bus_outbox_new(d->sock, d->max_bytes);
    if (!d->outbox) {
        zsock_destroy(&d->sock);
        free(d);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    *out = d;
    return CR_OK;
}

void rn_direct_destroy(rn_direct_t **self_p, int linger_ms)
{
    if (!self_p || !*self_p)
        return;
    rn_direct_t *d = *self_p;
    /* Chunks of requests that ended wait only for their readers: give
     * them a moment (a shutdown right after a stream's last token). */
    int64_t until = now_ms() + linger_ms;
    while (bus_outbox_flush(d->outbox, NULL, NULL) && now_ms() < until)
        zclock_sleep(RN_DIRECT_FLUSH_MS);
    if (bus_outbox_flush(d->outbox, NULL, NULL))
        cr_log_warn("direct replies still waiting for a slow reader dropped at exit");
    while (d->lingers) { /* ended, never attached: through the scheduler */
        fall_back(d, &d->lingers->q, "the runner is stopping");
        linger_finish(d, d->lingers, false);
    }
    bus_outbox_destroy(&d->outbox);
    zsock_set_linger(d->sock, linger_ms);
    zsock_destroy(&d->sock);
    for (int i = 0; i < EARLY_MAX; i++)
        zframe_destroy(&d->early[i].client);
    free(d);
    *self_p = NULL;
}

zsock_t *rn_direct_sock(const rn_direct_t *d)
{
    return d->sock;
}

const char *rn_direct_endpoint(const rn_direct_t *d)
{
    return d->endpoint;
}

int64_t rn_direct_max_bytes(const rn_direct_t *d)
{
    return d->max_bytes;
}

static void req_reset(rn_direct_req_t *q)
{
    zframe_destroy(&q->client);
    if (q->held) {
        zframe_t *f;
        while ((f = zlist_pop(q->held)))
            zframe_destroy(&f);
        zlist_destroy(&q->held);
    }
    memset(q, 0, sizeof *q);
}

/* Through the outbox to the attached gateway; false when it cannot go. */
static bool to_gateway(rn_direct_t *d, rn_direct_req_t *q, zframe_t **f)
{
    if (q->gone || q->over) {
        zframe_destroy(f);
        return false;
    }
    bus_out_t r = bus_outbox_send(d->outbox, q->client, q->id, f);
    if (r == BUS_OUT_GONE) {
        cr_log_info("request %s: its gateway connection is gone", q->id);
        q->gone = true;
        return false;
    }
    if (r == BUS_OUT_OVER) {
        q->over = true;
        return false;
    }
    q->chunks++;
    return true;
}

/* The held chunks, in order, to the scheduler: the attach never came. */
static void fall_back(rn_direct_t *d, rn_direct_req_t *q, const char *why)
{
    if (q->held && zlist_size(q->held))
        cr_log_info("request %s: %s; its replies go through the scheduler", q->id, why);
    zframe_t *f;
    while (q->held && (f = zlist_pop(q->held))) {
        if (zframe_send(&f, d->to_sched, 0) != 0)
            zframe_destroy(&f);
    }
    zlist_destroy(&q->held);
    q->route = RN_ROUTE_NONE;
}

static void attach(rn_direct_t *d, rn_direct_req_t *q, zframe_t *client)
{
    q->client = zframe_dup(client);
    if (!q->client) {
        fall_back(d, q, "out of memory at its attach");
        return;
    }
    q->route = RN_ROUTE_ATTACHED;
    zframe_t *f;
    while (q->held && (f = zlist_pop(q->held)))
        to_gateway(d, q, &f);
    zlist_destroy(&q->held);
}

void rn_direct_begin(rn_direct_t *d, rn_direct_req_t *q, const char *id, bool routed)
{
    req_reset(q);
    snprintf(q->id, sizeof q->id, "%s", id);
    if (!d || !routed)
        return;
    q->route = RN_ROUTE_PENDING;
    q->since_ms = now_ms();
    for (int i = 0; i < EARLY_MAX; i++) {
        early_t *e = &d->early[i];
        if (e->client && !strcmp(e->id, id)) {
            attach(d, q, e->client);
            zframe_destroy(&e->client);
            return;
        }
    }
}

bool rn_direct_chunk(rn_direct_t *d, rn_direct_req_t *q, const msg_t *m)
{
    if (q->route == RN_ROUTE_NONE) {
        cr_err_t err;
        cr_status_t st = bus_send(d->to_sched, m, &err);
        if (st)
            cr_log_warn("send %s failed: %s", msg_type_name(m->type), err.msg);
        return st == CR_OK;
    }
    zframe_t *f = NULL;
    cr_err_t err;
    if (bus_encode_frame(m, &f, &err)) {
        cr_log_warn("request %s: %s", q->id, err.msg);
        return false;
    }
    if (!q->started) {
        /* Before its first output leaves: a request the scheduler knows
         * had output is not run again if this runner dies. */
        msg_t note;
        msg_init(&note, MSG_started, q->id);
        bus_send(d->to_sched, &note, NULL);
        q->started = true;
    }
    if (q->route == RN_ROUTE_PENDING) {
        if (!q->held)
            q->held = zlist_new();
        if (!q->held || zlist_append(q->held, f)) {
            zframe_destroy(&f);
            return false;
        }
        return true;
    }
    return to_gateway(d, q, &f);
}

static void set_direct_chunks(msg_t *m, int64_t n)
{
    if (m->type == MSG_done) {
        m->u.done.direct_chunks = n;
        m->u.done.has_direct_chunks = true;
    } else if (m->type == MSG_error) {
        m->u.error.direct_chunks = n;
        m->u.error.has_direct_chunks = true;
    }
}

bool rn_direct_end(rn_direct_t *d, rn_direct_req_t *q, msg_t *last)
{
    bool taken = false;
    if (q->route == RN_ROUTE_PENDING) {
        linger_t *l = calloc(1, sizeof *l);
        if (l && msg_copy(last, &l->last) == CR_OK) {
            l->q = *q; /* the held chunks move with it */
            q->held = NULL;
            l->next = d->lingers;
            d->lingers = l;
            taken = true;
        } else {
            free(l);
            fall_back(d, q, "out of memory to wait for its attach");
        }
    } else if (q->route == RN_ROUTE_ATTACHED) {
        set_direct_chunks(last, q->chunks);
    }
    char id[MSG_ID_MAX + 1];
    snprintf(id, sizeof id, "%s", q->id);
    req_reset(q);
    snprintf(q->id, sizeof q->id, "%s", id); /* a late attach finds it ended */
    return taken;
}

static rn_direct_req_t *find(rn_direct_req_t *const *reqs, int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (reqs[i] && !strcmp(reqs[i]->id, id))
            return reqs[i];
    return NULL;
}

static void keep_early(rn_direct_t *d, const char *id, zframe_t *client)
{
    early_t *slot = &d->early[0];
    for (int i = 0; i < EARLY_MAX; i++) {
        early_t *e = &d->early[i];
        if (!e->client) {
            slot = e;
            break;
        }
        if (e->at_ms < slot->at_ms)
            slot = e; /* full: the oldest goes */
    }
    zframe_destroy(&slot->client);
    slot->client = zframe_dup(client);
    snprintf(slot->id, sizeof slot->id, "%s", id);
    slot->at_ms = now_ms();
}

void rn_direct_read(rn_direct_t *d, rn_direct_req_t *const *reqs, int n)
{
    if (!d)
        return;
    for (;;) {
        zframe_t *body = NULL, *ident = NULL;
        cr_err_t err;
        cr_status_t st = bus_recv_frame(d->sock, 0, &body, &ident, &err);
        if (st == CR_E_TIMEOUT || st == CR_E_CANCELED)
            return;
        msg_t h;
        if (!st)
            st = msg_peek(zframe_data(body), zframe_size(body), &h, &err);
        if (st || !ident) {
            cr_log_warn("direct socket: %s", st ? err.msg : "no sender");
        } else if (h.type != MSG_attach) {
            cr_log_warn("direct socket: %s ignored (only attach is read here)",
                        msg_type_name(h.type));
        } else {
            linger_t *l = d->lingers;
            while (l && strcmp(l->q.id, h.id))
                l = l->next;
            rn_direct_req_t *q = l ? NULL : find(reqs, n, h.id);
            if (l) {
                attach(d, &l->q, ident);
                linger_finish(d, l, l->q.route == RN_ROUTE_ATTACHED);
            } else if (q && q->route == RN_ROUTE_PENDING)
                attach(d, q, ident);
            else if (!q)
                keep_early(d, h.id, ident); /* its request comes next */
            /* else attached already, or ended: nothing to do */
        }
        zframe_destroy(&body);
        zframe_destroy(&ident);
    }
}

typedef struct gone_ctx {
    rn_direct_req_t *const *reqs;
    int n;
} gone_ctx_t;

static void on_gone(void *arg, const char *id)
{
    gone_ctx_t *g = arg;
    rn_direct_req_t *q = find(g->reqs, g->n, id);
    cr_log_info("request %s: its gateway connection is gone", id);
    if (q && q->route == RN_ROUTE_ATTACHED)
        q->gone = true;
}

/* A pending request whose attach is overdue falls back (true). */
static bool gave_up(rn_direct_t *d, rn_direct_req_t *q, int64_t now)
{
    if (now - q->since_ms < RN_ATTACH_WAIT_MS)
        return false;
    cr_log_warn("request %s: no gateway attached within %d ms", q->id, RN_ATTACH_WAIT_MS);
    fall_back(d, q, "no attach");
    return true;
}

bool rn_direct_tick(rn_direct_t *d, rn_direct_req_t *const *reqs, int n)
{
    if (!d)
        return false;
    int64_t now = now_ms();
    bool pending = false;
    for (int i = 0; i < n; i++)
        if (reqs[i] && reqs[i]->route == RN_ROUTE_PENDING)
            pending |= !gave_up(d, reqs[i], now);
    for (linger_t *l = d->lingers, *next; l; l = next) {
        next = l->next;
        if (gave_up(d, &l->q, now))
            linger_finish(d, l, false);
        else
            pending = true;
    }
    for (int i = 0; i < EARLY_MAX; i++)
        if (d->early[i].client && now - d->early[i].at_ms > RN_ATTACH_KEEP_MS)
            zframe_destroy(&d->early[i].client);
    gone_ctx_t g = {reqs, n};
    return bus_outbox_flush(d->outbox, on_gone, &g) || pending;
}
