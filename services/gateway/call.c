/* call.c: a DEALER per HTTP request, with liveness checks (see call.h).
 *
 * The monitor is libzmq's stable zmq_socket_monitor(): the DEALER reports
 * its connection events on an inproc PAIR that we poll beside it, so a
 * refused connect or a dropped connection ends a wait at once instead of
 * at a timeout. */
#include "lib/prelude.h"
#include "services/gateway/call.h"

#include "lib/log.h"
#include "proto/bus.h"
#include "proto/bus_poll.h"
#include "proto/wire.h"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define SEND_SLICE_MS 50
#define REFUSED_GRACE_MS 2000 /* how long a refused connect is retried */
#define CANCEL_LINGER_MS 1000

struct gw_call {
    gw_call_limit_t *limit; /* counted against; may be NULL */
    zsock_t *sock;     /* DEALER to the peer */
    zsock_t *mon;      /* PAIR receiving the DEALER's monitor events */
    bus_poll_t poll;   /* sock and mon; empty while not connected */
    char id[MSG_ID_MAX + 1];
    char peer[32];
    char endpoint[256]; /* what the pool matches on */
    int connect_timeout_ms;
    bool refused;      /* a connect attempt failed (CONNECT_RETRIED) */
    bool connected;    /* the connection came up at least once */
    bool dropped;      /* the connection went down after coming up */
    bool sent;         /* the request left */
    bool canceled;     /* gw_call_cancel ran: the socket lingers */
    bool clean;        /* the last wait ended with a reply */
    int64_t idle_since_ms; /* when it went into the pool */
    int64_t abort_checked_ms; /* the wait's abort callback last ran then */
    unsigned monitors; /* monitor endpoints made: each needs its own name */
    /* A call taken from the pool may send into a connection that is
     * already down (the peer exited while the call sat idle, and the
     * monitor had not said so yet); a fresh call would have waited for a
     * restarting peer instead. So until the first message of this use
     * comes back, the last request is kept, and a drop sends it again,
     * once, on a new connection. */
    bool resend_ok;      /* reused and nothing came back yet */
    zframe_t *unanswered; /* the last request, while resend_ok */
    /* Direct replies (`route`): a connection of the request's own to its
     * runner's socket (proto/wire.h), whose chunks come on it; the last
     * reply still comes from the scheduler, with how many chunks went
     * direct, and is held here until they all came. */
    int side_fd;          /* -1: none */
    bus_wire_reader_t side_in;
    bool side_ended;      /* the runner closed it: what came is still read */
    int64_t side_chunks;  /* chunks that came on side */
    msg_t held;           /* the last reply, waiting for side's chunks */
    bool holding;
    int64_t want_chunks;  /* held's direct_chunks */
    bool direct_shown;    /* a direct chunk went to the caller in this use */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sockets and descriptors kept aside from the calls' budget: the
 * service's own (logging, listeners, libzmq's reaper and I/O thread). */
#define SPARE_SOCKETS 64
#define SPARE_FDS 64

void gw_call_limit_init(gw_call_limit_t *l, unsigned want_calls)
{
    /* What libzmq can hold at all (65,535 with epoll). */
    long sockets = zsys_socket_limit();
    long calls = CR_MIN((long)want_calls, (sockets - SPARE_SOCKETS) / GW_CALL_SOCKETS);
    /* Descriptors: each call's four, besides every HTTP connection's
     * socket (counted by the caller as part of want_calls' origin). */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY) {
        long fd_calls = ((long)CR_MIN(rl.rlim_cur, (rlim_t)LONG_MAX) - SPARE_FDS) /
                        (GW_CALL_FDS + 1);
        calls = CR_MIN(calls, fd_calls);
    }
    calls = CR_MAX(calls, 1L);
    /* The context exists from here on; the size applies to the first
     * socket it makes (and is ignored once one was made). */
    void *ctx = zsys_init();
    if (ctx)
        zmq_ctx_set(ctx, ZMQ_MAX_SOCKETS, (int)(calls * GW_CALL_SOCKETS + SPARE_SOCKETS));
    atomic_init(&l->open, 0);
    atomic_init(&l->reused, 0);
    pthread_mutex_init(&l->pool_lock, NULL);
    l->n_pool = 0;
    l->max = (int)calls;
    if ((unsigned long)calls < want_calls)
        cr_log_warn("at most %ld bus calls at once (wanted %u): the open files limit "
                    "or libzmq's socket limit is lower; more requests in flight get 503",
                    calls, want_calls);
}

static void call_close(gw_call_t *c);
static void drain_monitor(gw_call_t *c);

void gw_call_limit_fini(gw_call_limit_t *l)
{
    pthread_mutex_lock(&l->pool_lock);
    while (l->n_pool > 0) {
        gw_call_t *c = l->pool[--l->n_pool];
        call_close(c);
    }
    pthread_mutex_unlock(&l->pool_lock);
    pthread_mutex_destroy(&l->pool_lock);
}

int gw_call_limit_sweep(gw_call_limit_t *l, int64_t idle_ms)
{
    gw_call_t *old[GW_CALL_POOL_MAX];
    int n_old = 0;
    int64_t now = mono_ms();
    pthread_mutex_lock(&l->pool_lock);
    int kept = 0;
    for (int i = 0; i < l->n_pool; i++) {
        if (now - l->pool[i]->idle_since_ms >= idle_ms)
            old[n_old++] = l->pool[i];
        else
            l->pool[kept++] = l->pool[i];
    }
    l->n_pool = kept;
    pthread_mutex_unlock(&l->pool_lock);
    /* Out of the lock: closing waits on libzmq's threads. */
    for (int i = 0; i < n_old; i++)
        call_close(old[i]);
    return kept;
}

/* The newest idle call to endpoint, out of the pool; NULL if none. */
static gw_call_t *pool_take(gw_call_limit_t *l, const char *endpoint)
{
    gw_call_t *c = NULL;
    pthread_mutex_lock(&l->pool_lock);
    for (int i = l->n_pool - 1; i >= 0; i--)
        if (!strcmp(l->pool[i]->endpoint, endpoint)) {
            c = l->pool[i];
            memmove(&l->pool[i], &l->pool[i + 1], (size_t)(l->n_pool - i - 1) * sizeof c);
            l->n_pool--;
            break;
        }
    pthread_mutex_unlock(&l->pool_lock);
    return c;
}

/* An idle call made ready for a new request, or NULL (closed) when its
 * connection went down while it waited. */
static gw_call_t *reuse(gw_call_t *c, const char *peer, int connect_timeout_ms)
{
    drain_monitor(c);
    if (c->dropped || !c->connected) {
        call_close(c);
        return NULL;
    }
    /* Replies to an earlier request (a pong, a late error) are strays. */
    while (zsock_events(c->sock) & ZMQ_POLLIN) {
        zmsg_t *stale = zmsg_recv(c->sock);
        if (!stale)
            break;
        zmsg_destroy(&stale);
    }
    bus_poll_mark(&c->poll, NULL); /* another thread's now: ask afresh */
    bus_new_id(c->id);
    snprintf(c->peer, sizeof c->peer, "%s", peer ? peer : "peer");
    c->connect_timeout_ms = connect_timeout_ms > 0 ? connect_timeout_ms : 1;
    c->sent = c->clean = c->canceled = c->refused = false;
    c->direct_shown = false;
    c->abort_checked_ms = 0;
    c->resend_ok = true;
    zframe_destroy(&c->unanswered);
    return c;
}

/* The DEALER, its monitor and the poller, connecting to c->endpoint. */
static cr_status_t call_connect(gw_call_t *c, cr_err_t *err)
{
    c->refused = c->connected = c->dropped = false;
    c->sock = zsock_new(ZMQ_DEALER);
    if (!c->sock)
        return cr_err_set(err, CR_E_IO, "cannot create a socket for the %s",
                          c->peer);
    zsock_set_linger(c->sock, 0);
    zsock_set_immediate(c->sock, 1);
    zsock_set_sndtimeo(c->sock, SEND_SLICE_MS);

    char mon_ep[80 + MSG_ID_MAX];
    snprintf(mon_ep, sizeof mon_ep, "inproc://gw-call-%s-%u", c->id,
             c->monitors++);
    if (zmq_socket_monitor(zsock_resolve(c->sock), mon_ep,
                           ZMQ_EVENT_CONNECTED | ZMQ_EVENT_CONNECT_RETRIED |
                               ZMQ_EVENT_DISCONNECTED) != 0 ||
        !(c->mon = zsock_new(ZMQ_PAIR)))
        return cr_err_set(err, CR_E_IO, "cannot monitor the %s socket", c->peer);
    zsock_set_linger(c->mon, 0);
    bus_poll_init(&c->poll);
    if (zsock_connect(c->mon, "%s", mon_ep) != 0 || bus_poll_add(&c->poll, c->sock) ||
        bus_poll_add(&c->poll, c->mon))
        return cr_err_set(err, CR_E_IO, "cannot monitor the %s socket", c->peer);
    if (zsock_connect(c->sock, "%s", c->endpoint) != 0)
        return cr_err_set(err, CR_E_IO, "cannot connect to %s at %s", c->peer,
                          c->endpoint);
    return CR_OK;
}

/* Closes what call_connect made (any part of it). */
static void call_disconnect(gw_call_t *c)
{
    bus_poll_init(&c->poll);
    if (c->sock && c->mon)
        zmq_socket_monitor(zsock_resolve(c->sock), NULL, 0);
    zsock_destroy(&c->mon);
    zsock_destroy(&c->sock);
}

cr_status_t gw_call_open(gw_call_limit_t *limit, const char *endpoint, const char *peer,
                         int connect_timeout_ms, gw_call_t **out,
                         cr_err_t *err)
{
    *out = NULL;
    if (limit) {
        gw_call_t *idle;
        while ((idle = pool_take(limit, endpoint))) {
            if ((*out = reuse(idle, peer, connect_timeout_ms))) {
                atomic_fetch_add(&limit->reused, 1);
                return CR_OK;
            }
        }
    }
    if (limit && atomic_fetch_add(&limit->open, 1) >= limit->max) {
        atomic_fetch_sub(&limit->open, 1);
        return cr_err_set(err, CR_E_BUSY,
                          "server busy, please try again.  %d requests in flight",
                          limit->max);
    }
    gw_call_t *c = calloc(1, sizeof *c);
    if (!c) {
        if (limit)
            atomic_fetch_sub(&limit->open, 1);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    c->limit = limit;
    c->side_fd = -1;
    bus_wire_reader_init(&c->side_in);
    bus_new_id(c->id);
    snprintf(c->peer, sizeof c->peer, "%s", peer ? peer : "peer");
    snprintf(c->endpoint, sizeof c->endpoint, "%s", endpoint);
    c->connect_timeout_ms = connect_timeout_ms > 0 ? connect_timeout_ms : 1;

    cr_status_t st = call_connect(c, err);
    if (st) {
        gw_call_destroy(&c);
        return st;
    }
    *out = c;
    return CR_OK;
}

const char *gw_call_id(const gw_call_t *c)
{
    return c->id;
}

/* Reads every pending monitor event into the call's flags. */
static void drain_monitor(gw_call_t *c)
{
    while (zsock_events(c->mon) & ZMQ_POLLIN) {
        zmsg_t *ev = zmsg_recv(c->mon);
        if (!ev)
            return;
        zframe_t *f = zmsg_first(ev);
        if (f && zframe_size(f) >= 6) {
            uint16_t event;
            memcpy(&event, zframe_data(f), sizeof event);
            if (event == ZMQ_EVENT_CONNECTED) {
                c->connected = true;
            } else if (event == ZMQ_EVENT_CONNECT_RETRIED) {
                c->refused = true;
            } else if (event == ZMQ_EVENT_DISCONNECTED) {
                if (c->connected)
                    c->dropped = true;
            }
        }
        zmsg_destroy(&ev);
    }
}

static cr_status_t unavailable(gw_call_t *c, cr_err_t *err)
{
    return cr_err_set(err, CR_E_UNAVAILABLE, "%s unavailable", c->peer);
}

/* Sends f (kept: ZFRAME_REUSE) once a peer is connected. */
static cr_status_t send_frame(gw_call_t *c, zframe_t *f, cr_err_t *err)
{
    int64_t start = mono_ms();
    int64_t deadline = start + c->connect_timeout_ms;
    for (;;) {
        int rc = zframe_send(&f, c->sock, ZFRAME_REUSE);
        bus_poll_mark(&c->poll, c->sock); /* a send may take its commands */
        if (rc == 0) {
            c->sent = true;
            return CR_OK;
        }
        int e = zmq_errno();
        /* No connected peer yet: the connect may still be on its way. A
         * refused connect means nobody listens yet: a service that is
         * starting or being restarted (by serve or systemd) gets a short
         * grace, not the whole connect timeout. */
        drain_monitor(c);
        int64_t now = mono_ms();
        if (now >= deadline || (c->refused && now - start >= REFUSED_GRACE_MS)) {
            cr_log_debug("%s: %s: %s", c->id,
                         c->refused ? "connect refused" : "send timed out",
                         zmq_strerror(e));
            return unavailable(c, err);
        }
    }
}

cr_status_t gw_call_send(gw_call_t *c, msg_t *m, cr_err_t *err)
{
    memcpy(m->id, c->id, sizeof m->id);
    c->clean = false;
    zframe_t *f = NULL;
    cr_status_t st = bus_encode_frame(m, &f, err); /* the message itself is bad */
    if (!st)
        st = send_frame(c, f, err);
    zframe_destroy(&c->unanswered);
    if (!st && c->resend_ok)
        c->unanswered = f;
    else
        zframe_destroy(&f);
    return st;
}

/* A message of this use came back: the connection was alive after the
 * request left, so a later drop means the peer went down with it. */
static void answered(gw_call_t *c)
{
    c->resend_ok = false;
    zframe_destroy(&c->unanswered);
}

/* The connection dropped: true when the request was sent again on a new
 * one (see resend_ok), false when the wait must end. */
static bool resent_after_drop(gw_call_t *c)
{
    if (!c->unanswered)
        return false;
    zframe_t *f = c->unanswered;
    c->unanswered = NULL;
    c->resend_ok = false;
    cr_log_info("%s: the reused connection to the %s went down before an "
                "answer; sending again on a new one",
                c->id, c->peer);
    call_disconnect(c);
    cr_err_t e;
    cr_status_t st = call_connect(c, &e);
    if (!st)
        st = send_frame(c, f, &e);
    zframe_destroy(&f);
    if (st)
        cr_log_warn("%s: sending again to the %s: %s", c->id, c->peer, e.msg);
    return st == CR_OK;
}

/* The poller watches the call's own socket and monitor, and side's. */
static void poll_rebuild(gw_call_t *c)
{
    bus_poll_init(&c->poll);
    if (!c->sock || !c->mon)
        return;
    bus_poll_add(&c->poll, c->sock);
    bus_poll_add(&c->poll, c->mon);
    bus_poll_add_fd(&c->poll, c->side_fd);
}

/* Ends the direct side. */
static void side_close(gw_call_t *c)
{
    if (c->side_fd < 0)
        return;
    close(c->side_fd);
    c->side_fd = -1;
    bus_wire_reader_free(&c->side_in);
    poll_rebuild(c);
}

/* The runner's socket cannot be reached (why): the runner would wait a
 * second for the attach before it sends through the scheduler; `no_route`
 * tells it now. */
static void no_route(gw_call_t *c, const char *why)
{
    cr_log_warn("%s: direct replies: %s; through the scheduler instead", c->id, why);
    msg_t m;
    msg_init(&m, MSG_no_route, c->id);
    cr_err_t err;
    if (bus_send(c->sock, &m, &err))
        cr_log_warn("%s: no_route not sent: %s", c->id, err.msg);
    bus_poll_mark(&c->poll, c->sock);
}

/* `route`: connects to the runner's direct socket and attaches. A runner
 * that cannot be reached is told so (no_route). */
static void side_open(gw_call_t *c, const char *endpoint)
{
    side_close(c); /* a request run again on another runner */
    c->side_chunks = 0;
    c->side_ended = false;
    cr_err_t err;
    int fd;
    if (!bus_wire_path(endpoint)) {
        /* An older scheduler's (ZeroMQ) endpoint: that scheduler would
         * answer no_route with an error, so the runner's wait it is. */
        cr_log_warn("%s: direct replies: '%s' is not a unix:// endpoint", c->id, endpoint);
        return;
    }
    if (bus_wire_connect(endpoint, &fd, &err)) {
        no_route(c, err.msg);
        return;
    }
    /* A fresh socket takes a message this small whole. */
    msg_t m;
    msg_init(&m, MSG_attach, c->id);
    cr_buf_t b;
    cr_buf_init(&b, 4096);
    cr_status_t st = bus_wire_encode(&m, &b, &err);
    ssize_t n = st ? 0 : bus_wire_write(fd, b.data, b.len, NULL, 0);
    if (!st && n != (ssize_t)b.len)
        st = cr_err_set(&err, CR_E_IO, "the attach was not taken (%zd of %zu bytes: %s)", n,
                        b.len, n < 0 ? strerror(errno) : "the socket is full");
    cr_buf_free(&b);
    if (st) {
        close(fd);
        no_route(c, err.msg);
        return;
    }
    c->side_fd = fd;
    poll_rebuild(c);
}

/* The direct chunk count a last reply carries; -1 when none. */
static int64_t direct_chunks(const msg_t *m)
{
    if (m->type == MSG_done && m->u.done.has_direct_chunks)
        return m->u.done.direct_chunks;
    if (m->type == MSG_error && m->u.error.has_direct_chunks)
        return m->u.error.direct_chunks;
    return -1;
}

/* The next chunk of ours on side, counted (true); reads the socket when
 * none is buffered and may_read. The runner closing it sets side_ended. */
static bool side_take(gw_call_t *c, msg_t *out, bool may_read)
{
    for (;;) {
        msg_t m;
        cr_err_t e;
        cr_status_t st = bus_wire_reader_next(&c->side_in, &m, &e);
        if (st == CR_OK) {
            if (strcmp(m.id, c->id) || m.type != MSG_chunk) {
                cr_log_debug("%s: dropped a direct %s for %s", c->id, msg_type_name(m.type),
                             m.id);
                msg_clear(&m);
                continue;
            }
            c->side_chunks++;
            c->direct_shown = true;
            *out = m;
            return true;
        }
        if (st != CR_E_TIMEOUT) {
            cr_log_warn("%s: bad direct reply: %s", c->id, e.msg);
            if (st == CR_E_PROTO)
                continue; /* that frame is skipped; the next may do */
            c->side_ended = true; /* cannot be read on */
            return false;
        }
        if (!may_read || c->side_ended)
            return false;
        bus_wire_fill_t r = bus_wire_reader_fill(&c->side_in, c->side_fd);
        if (r == BUS_WIRE_EMPTY)
            return false;
        if (r == BUS_WIRE_EOF)
            c->side_ended = true; /* what it holds is read first */
    }
}

/* The held last reply once every direct chunk it counts came. */
static bool release_held(gw_call_t *c, msg_t *out)
{
    if (!c->holding || c->side_chunks < c->want_chunks)
        return false;
    *out = c->held;
    memset(&c->held, 0, sizeof c->held);
    c->holding = false;
    side_close(c);
    c->clean = true;
    return true;
}

/* The wait's abort callback, at most once a slice: it costs a system call
 * (a poll of the client's socket), and a stream's replies (one a token)
 * come far more often than that. */
static bool should_abort(gw_call_t *c, const gw_wait_t *w, int64_t now)
{
    if (!w->abort_fn ||
        (c->abort_checked_ms && now - c->abort_checked_ms < GW_CALL_SLICE_MS))
        return false;
    c->abort_checked_ms = now;
    return w->abort_fn(w->abort_arg);
}

/* The last reply counts more direct chunks than came before the runner's
 * connection ended. */
static cr_status_t cut_short(cr_err_t *err)
{
    return cr_err_set(err, CR_E_UNAVAILABLE,
                      "the model runner went away before the whole answer came");
}

cr_status_t gw_call_recv(gw_call_t *c, const gw_wait_t *w, msg_t *out,
                         cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    c->clean = false;
    int64_t last = mono_ms();
    bool pinged = false;
    for (;;) {
        if (release_held(c, out))
            return CR_OK;
        if (c->side_fd >= 0) {
            /* Chunks a read took beyond the one it returned go first,
             * without sleeping. Once the runner closed the connection
             * (its request ended, or it went away) and what came is
             * taken, the side is done; a held last reply that counts more
             * chunks than came is an answer cut short. */
            if (side_take(c, out, false)) {
                c->clean = !c->holding;
                return CR_OK;
            }
            if (c->side_ended) {
                side_close(c);
                if (c->holding && c->side_chunks < c->want_chunks) {
                    msg_clear(&c->held);
                    c->holding = false;
                    return cut_short(err);
                }
                continue;
            }
        }
        if (should_abort(c, w, mono_ms()))
            return cr_err_set(err, CR_E_CANCELED, "request canceled");
        /* bus_poll asks the DEALER first (it stays marked after a reply)
         * and the monitor only when its descriptor fires */
        zsock_t *which = bus_poll_wait(&c->poll, GW_CALL_SLICE_MS);
        if (which == BUS_POLL_FD) {
            if (side_take(c, out, true)) {
                c->clean = !c->holding;
                return CR_OK;
            }
            continue;
        }
        if (which == c->mon) {
            drain_monitor(c);
            if (c->dropped) {
                if (resent_after_drop(c)) {
                    last = mono_ms();
                    pinged = false;
                    continue;
                }
                cr_log_warn("%s: connection to the %s dropped", c->id,
                            c->peer);
                return unavailable(c, err);
            }
            continue;
        }
        int64_t now = mono_ms();
        if (which == c->sock) {
            msg_t m;
            cr_err_t e;
            cr_status_t st = bus_recv(c->sock, 0, &m, NULL, &e);
            if (st == CR_E_TIMEOUT)
                continue;
            if (st) {
                cr_log_warn("%s: bad reply from the %s: %s", c->id, c->peer,
                            e.msg);
                return cr_err_set(err, CR_E_PROTO, "bad reply from the %s: %s",
                                  c->peer, e.msg);
            }
            last = now;
            pinged = false;
            if (strcmp(m.id, c->id) != 0) {
                cr_log_debug("%s: dropped a stray %s for %s", c->id,
                             msg_type_name(m.type), m.id);
                msg_clear(&m);
                continue;
            }
            answered(c);
            if (m.type == MSG_pong) {
                msg_clear(&m);
                continue;
            }
            /* Run again after its runner's text reached the client (the
             * runner went away before the scheduler heard its `started`):
             * the new run's text would repeat it. */
            if (c->direct_shown && (m.type == MSG_route || m.type == MSG_chunk)) {
                cr_log_warn("%s: the request was run again after its answer had begun; "
                            "ended instead",
                            c->id);
                msg_clear(&m);
                return cr_err_set(err, CR_E_UNAVAILABLE,
                                  "model runner has unexpectedly stopped after it "
                                  "began to answer");
            }
            if (m.type == MSG_route) {
                side_open(c, m.u.route.endpoint);
                msg_clear(&m);
                continue;
            }
            int64_t want = direct_chunks(&m);
            if (want > c->side_chunks && c->side_fd >= 0) {
                /* its direct chunks are still on their way */
                c->held = m;
                c->holding = true;
                c->want_chunks = want;
                continue;
            }
            if (want >= 0 && want > c->side_chunks) {
                /* its connection ended (or never was) short of them */
                msg_clear(&m);
                return cut_short(err);
            }
            if (want >= 0)
                side_close(c);
            *out = m;
            c->clean = true;
            return CR_OK;
        }
        if (c->poll.terminated)
            return cr_err_set(err, CR_E_CANCELED, "interrupted");
        int64_t quiet = now - last;
        if (w->idle_timeout_ms > 0 && quiet >= w->idle_timeout_ms) {
            cr_log_warn("%s: no reply from the %s in %d ms", c->id, c->peer,
                        w->idle_timeout_ms);
            return unavailable(c, err);
        }
        if (w->ping_after_ms > 0 && quiet >= w->ping_after_ms) {
            if (pinged) {
                cr_log_warn("%s: the %s does not answer pings", c->id,
                            c->peer);
                return unavailable(c, err);
            }
            msg_t ping;
            msg_init(&ping, MSG_ping, c->id);
            cr_err_t e;
            cr_status_t sent = bus_send(c->sock, &ping, &e);
            bus_poll_mark(&c->poll, c->sock);
            if (sent != CR_OK)
                return unavailable(c, err);
            pinged = true;
            /* The pong has ping_after_ms to come back. */
            last = now;
        }
    }
}

cr_status_t gw_call_ping(gw_call_t *c, int timeout_ms, cr_err_t *err)
{
    msg_t ping;
    msg_init(&ping, MSG_ping, c->id);
    cr_status_t st = gw_call_send(c, &ping, err);
    if (st)
        return st;
    int64_t deadline = mono_ms() + timeout_ms;
    while (mono_ms() < deadline) {
        int left = (int)(deadline - mono_ms());
        zsock_t *which = bus_poll_wait(&c->poll, CR_MAX(1, CR_MIN(left, GW_CALL_SLICE_MS)));
        if (which == c->mon) {
            drain_monitor(c);
            if (c->dropped && !resent_after_drop(c))
                return unavailable(c, err);
            continue;
        }
        if (which != c->sock) {
            if (c->poll.terminated)
                return cr_err_set(err, CR_E_CANCELED, "interrupted");
            continue;
        }
        msg_t m;
        cr_err_t e;
        st = bus_recv(c->sock, 0, &m, NULL, &e);
        if (st == CR_E_TIMEOUT)
            continue;
        if (st)
            return cr_err_set(err, CR_E_PROTO, "bad reply from the %s: %s",
                              c->peer, e.msg);
        bool mine = !strcmp(m.id, c->id);
        msg_type_t type = m.type;
        msg_clear(&m);
        if (!mine)
            continue;
        answered(c);
        if (type == MSG_pong) {
            c->clean = true;
            return CR_OK;
        }
        return cr_err_set(err, CR_E_PROTO, "the %s answered ping with '%s'",
                          c->peer, msg_type_name(type));
    }
    return unavailable(c, err);
}

void gw_call_cancel(gw_call_t *c)
{
    if (!c || !c->sent)
        return;
    msg_t m;
    msg_init(&m, MSG_cancel, c->id);
    cr_err_t e;
    c->canceled = true;
    zsock_set_sndtimeo(c->sock, 0);
    if (bus_send(c->sock, &m, &e) != CR_OK)
        cr_log_debug("%s: cancel not sent: %s", c->id, e.msg);
    bus_poll_mark(&c->poll, c->sock);
    zsock_set_linger(c->sock, CANCEL_LINGER_MS);
}

static void call_close(gw_call_t *c)
{
    side_close(c);
    msg_clear(&c->held);
    c->holding = false;
    call_disconnect(c);
    zframe_destroy(&c->unanswered);
    if (c->limit)
        atomic_fetch_sub(&c->limit->open, 1);
    free(c);
}

/* Into the pool when it may serve another request; false when not. */
static bool pool_put(gw_call_t *c)
{
    gw_call_limit_t *l = c->limit;
    if (!l || !c->clean || c->canceled || !c->sock || !c->poll.n)
        return false;
    drain_monitor(c);
    if (c->dropped || !c->connected)
        return false;
    bool kept = false;
    pthread_mutex_lock(&l->pool_lock);
    if (l->n_pool < GW_CALL_POOL_MAX) {
        c->idle_since_ms = mono_ms();
        l->pool[l->n_pool++] = c;
        kept = true;
    }
    pthread_mutex_unlock(&l->pool_lock);
    return kept;
}

void gw_call_destroy(gw_call_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gw_call_t *c = *self_p;
    *self_p = NULL;
    /* A side still open here was not finished with: not reused. */
    if (c->side_fd >= 0 || c->holding)
        c->clean = false;
    side_close(c);
    msg_clear(&c->held);
    c->holding = false;
    if (!pool_put(c))
        call_close(c);
}
