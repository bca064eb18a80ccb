/* direct.c: a runner's direct replies to gateways (see direct.h). */
#include "lib/prelude.h"
#include "services/runner/direct.h"

#include "lib/env.h"
#include "lib/log.h"
#include "lib/size.h"
#include "proto/bus.h"
#include "proto/wire.h"

#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define EARLY_MAX 64 /* attaches for requests not started yet */
#define STREAM_BUFFER_DEFAULT (16LL << 20) /* as the scheduler's */
#define EVENTS_MAX 32

/* A gateway's connection. Requests, lingers and early attaches point at
 * it (held); once its attach was read and none does, it is closed as soon
 * as its queue is written (or at once when the gateway went away). One
 * that says nothing is closed after RN_ATTACH_KEEP_MS. */
struct rn_conn {
    int fd;
    bus_wire_reader_t in;
    cr_buf_t out;   /* bytes the socket has not taken yet */
    size_t out_off; /* of out, already taken */
    int64_t accepted_ms;
    bool attached; /* its attach was read (whatever came of it) */
    bool held;
    bool closed; /* the gateway went away (or broke the framing) */
    struct rn_conn *next;
};

/* An ended request whose attach has not come: its held chunks and its
 * last reply wait for it (direct.h). */
typedef struct held_end {
    rn_direct_req_t q;
    msg_t last; /* owned copy */
    struct held_end *next;
} linger_t;

typedef struct early {
    char id[MSG_ID_MAX + 1];
    rn_conn_t *conn; /* NULL: free */
    int64_t at_ms;
} early_t;

struct rn_direct {
    int listen_fd;
    int epoll_fd; /* the listener and every open connection */
    zsock_t *to_sched; /* borrowed */
    int64_t sched_sends; /* messages sent on to_sched (rn_direct_sched_sends) */
    cr_buf_t scratch;    /* an attached request's chunk, encoded */
    int64_t max_bytes;
    char endpoint[256];
    early_t early[EARLY_MAX];
    linger_t *lingers;
    rn_conn_t *conns;
};

static void fall_back(rn_direct_t *d, rn_direct_req_t *q, const char *why);
static void set_direct_chunks(msg_t *m, int64_t n);

static int64_t now_ms(void)
{
    return zclock_mono();
}

/* ---- connections ---- */

static size_t out_pending(const rn_conn_t *c)
{
    return c->out.len - c->out_off;
}

static void conn_lost(rn_direct_t *d, rn_conn_t *c)
{
    if (c->closed)
        return;
    c->closed = true;
    epoll_ctl(d->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
}

static void conn_free(rn_conn_t *c)
{
    close(c->fd);
    bus_wire_reader_free(&c->in);
    cr_buf_free(&c->out);
    free(c);
}

/* Takes the waiting connections; each is read at once (its attach is
 * written right after its connect). How many attaches came. */
static int conn_read(rn_direct_t *d, rn_conn_t *c, rn_direct_req_t *const *reqs, int n);

static int conn_accept(rn_direct_t *d, rn_direct_req_t *const *reqs, int n)
{
    int attaches = 0;
    for (;;) {
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                cr_log_warn("direct socket: accept: %s", strerror(errno));
            return attaches;
        }
        rn_conn_t *c = calloc(1, sizeof *c);
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
        if (!c || epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, fd, &ev)) {
            cr_log_warn("direct socket: a gateway's connection is refused: %s",
                        c ? strerror(errno) : "out of memory");
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->accepted_ms = now_ms();
        bus_wire_reader_init(&c->in);
        /* the bound is checked before each append (conn_send) */
        cr_buf_init(&c->out, (size_t)d->max_bytes + MSG_FRAME_MAX + BUS_WIRE_HEADER_BYTES);
        c->next = d->conns;
        d->conns = c;
        attaches += conn_read(d, c, reqs, n);
    }
}

/* Writes what the socket takes of c's queue; false when the gateway is
 * gone. */
static bool conn_flush(rn_direct_t *d, rn_conn_t *c)
{
    if (c->closed)
        return false;
    size_t left = out_pending(c);
    if (!left)
        return true;
    ssize_t n = bus_wire_write(c->fd, c->out.data + c->out_off, left, NULL, 0);
    if (n < 0) {
        conn_lost(d, c);
        return false;
    }
    c->out_off += (size_t)n;
    if (c->out_off == c->out.len) {
        cr_buf_reset(&c->out);
        c->out_off = 0;
    } else if (c->out_off > c->out.len / 2) {
        /* behind a slow reader: what was taken goes, the rest moves up */
        memmove(c->out.data, c->out.data + c->out_off, c->out.len - c->out_off);
        c->out.len -= c->out_off;
        c->out_off = 0;
    }
    return true;
}

typedef enum conn_out {
    CONN_SENT, /* the socket took it, or it waits behind what it has not */
    CONN_GONE, /* the gateway went away: dropped */
    CONN_OVER, /* the queue would pass the bound: dropped */
} conn_out_t;

/* One encoded message to c: written now when nothing waits, else queued
 * behind what does (within max_bytes). */
static conn_out_t conn_send(rn_direct_t *d, rn_conn_t *c, const void *body, size_t n)
{
    uint8_t head[BUS_WIRE_HEADER_BYTES];
    bus_wire_header(head, n);
    size_t skip = 0; /* of header and body, taken by the socket */
    if (!c->closed && !out_pending(c)) {
        ssize_t w = bus_wire_write(c->fd, head, sizeof head, body, n);
        if (w < 0)
            conn_lost(d, c);
        else if ((size_t)w == sizeof head + n)
            return CONN_SENT;
        else
            skip = (size_t)w;
    }
    if (c->closed)
        return CONN_GONE;
    /* Part of it went: the rest must follow, bound or not (the next
     * message cannot start mid-frame). */
    if (!skip && (int64_t)(out_pending(c) + sizeof head + n) > d->max_bytes)
        return CONN_OVER;
    /* what the socket did not take, of the header and then the body */
    const uint8_t *part[2] = {head, body};
    size_t len[2] = {sizeof head, n};
    for (int i = 0; i < 2; i++) {
        size_t taken = CR_MIN(skip, len[i]);
        skip -= taken;
        if (cr_buf_append(&c->out, part[i] + taken, len[i] - taken)) {
            cr_log_warn("direct socket: out of memory for a gateway's queue");
            conn_lost(d, c); /* its stream is cut mid-frame */
            return CONN_GONE;
        }
    }
    return CONN_SENT;
}

/* Gives q's connection up (it may be closed at the next reap). */
static void conn_release(rn_direct_req_t *q)
{
    if (q->conn)
        q->conn->held = false;
    q->conn = NULL;
}

/* Closes the connections no request needs: gone, written out, or silent
 * too long. */
static void conns_reap(rn_direct_t *d)
{
    int64_t now = now_ms();
    for (rn_conn_t **pp = &d->conns; *pp;) {
        rn_conn_t *c = *pp;
        if (!c->held)
            conn_flush(d, c);
        bool done = c->attached ? !out_pending(c) : now - c->accepted_ms > RN_ATTACH_KEEP_MS;
        if (!c->held && (c->closed || done)) {
            *pp = c->next;
            conn_free(c);
        } else {
            pp = &c->next;
        }
    }
}

/* ---- requests ---- */

/* Every send on to_sched goes through these two, so the count the
 * server's poller needs (rn_direct_sched_sends) misses none. */
static cr_status_t sched_send(rn_direct_t *d, const msg_t *m, cr_err_t *err)
{
    d->sched_sends++;
    return bus_send(d->to_sched, m, err);
}

static void sched_send_frame(rn_direct_t *d, zframe_t **f)
{
    d->sched_sends++;
    if (zframe_send(f, d->to_sched, 0) != 0)
        zframe_destroy(f);
}

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
    if (sched_send(d, &l->last, &err)) {
        /* As the server's send_final: the request must still end. */
        cr_log_warn("request %s: its last reply cannot be sent: %s", l->q.id, err.msg);
        msg_t e;
        msg_make_error(&e, l->q.id, CR_E_TOO_LARGE, "the %s reply is too large to send",
                       msg_type_name(l->last.type));
        if (direct)
            set_direct_chunks(&e, l->q.chunks);
        sched_send(d, &e, NULL);
        msg_clear(&e);
    }
    msg_clear(&l->last);
    conn_release(&l->q);
    zlist_destroy(&l->q.held);
    free(l);
}

cr_status_t rn_direct_new(const char *endpoint, zsock_t *to_sched, rn_direct_t **out,
                          cr_err_t *err)
{
    *out = NULL;
    if (!bus_wire_path(endpoint) || strlen(endpoint) >= sizeof((rn_direct_t *)0)->endpoint)
        return cr_err_set(err, CR_E_INVALID, "--direct wants a unix:// endpoint");
    rn_direct_t *d = calloc(1, sizeof *d);
    if (!d)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    snprintf(d->endpoint, sizeof d->endpoint, "%s", endpoint);
    d->to_sched = to_sched;
    cr_buf_init(&d->scratch, MSG_FRAME_MAX);
    d->max_bytes = STREAM_BUFFER_DEFAULT;
    char sz[64];
    int64_t v;
    if (cr_env_get("STREAM_BUFFER", sz, sizeof sz) && !cr_size_parse(sz, &v, NULL) && v > 0)
        d->max_bytes = v;
    d->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    if (d->epoll_fd < 0) {
        free(d);
        return cr_err_set(err, CR_E_IO, "epoll: %s", strerror(errno));
    }
    cr_status_t st = bus_wire_listen(endpoint, &d->listen_fd, err);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL}; /* NULL: the listener */
    if (!st && epoll_ctl(d->epoll_fd, EPOLL_CTL_ADD, d->listen_fd, &ev))
        st = cr_err_set(err, CR_E_IO, "epoll: %s", strerror(errno));
    if (st) {
        if (d->listen_fd >= 0)
            close(d->listen_fd);
        close(d->epoll_fd);
        free(d);
        return st;
    }
    *out = d;
    return CR_OK;
}

/* Writes every queue; true while one still waits. */
static bool flush_all(rn_direct_t *d)
{
    bool waiting = false;
    for (rn_conn_t *c = d->conns; c; c = c->next)
        waiting |= conn_flush(d, c) && out_pending(c);
    return waiting;
}

void rn_direct_destroy(rn_direct_t **self_p, int linger_ms)
{
    if (!self_p || !*self_p)
        return;
    rn_direct_t *d = *self_p;
    /* Chunks of requests that ended wait only for their readers: give
     * them a moment (a shutdown right after a stream's last token). */
    int64_t until = now_ms() + linger_ms;
    while (flush_all(d) && now_ms() < until)
        zclock_sleep(RN_DIRECT_FLUSH_MS);
    if (flush_all(d))
        cr_log_warn("direct replies still waiting for a slow reader dropped at exit");
    while (d->lingers) { /* ended, never attached: through the scheduler */
        fall_back(d, &d->lingers->q, "the runner is stopping");
        linger_finish(d, d->lingers, false);
    }
    for (int i = 0; i < EARLY_MAX; i++)
        d->early[i].conn = NULL;
    while (d->conns) {
        rn_conn_t *c = d->conns;
        d->conns = c->next;
        conn_free(c);
    }
    close(d->listen_fd);
    close(d->epoll_fd);
    unlink(bus_wire_path(d->endpoint));
    cr_buf_free(&d->scratch);
    free(d);
    *self_p = NULL;
}

int64_t rn_direct_sched_sends(const rn_direct_t *d)
{
    return d ? d->sched_sends : 0;
}

int rn_direct_fd(const rn_direct_t *d)
{
    return d->epoll_fd;
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
    conn_release(q);
    if (q->held) {
        zframe_t *f;
        while ((f = zlist_pop(q->held)))
            zframe_destroy(&f);
        zlist_destroy(&q->held);
    }
    memset(q, 0, sizeof *q);
}

/* One encoded chunk to the attached gateway; false when it cannot go. */
static bool to_gateway(rn_direct_t *d, rn_direct_req_t *q, const void *body, size_t n)
{
    if (q->gone || q->over)
        return false;
    conn_out_t r = conn_send(d, q->conn, body, n);
    if (r == CONN_GONE) {
        cr_log_info("request %s: its gateway connection is gone", q->id);
        q->gone = true;
        return false;
    }
    if (r == CONN_OVER) {
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
    while (q->held && (f = zlist_pop(q->held)))
        sched_send_frame(d, &f);
    zlist_destroy(&q->held);
    q->route = RN_ROUTE_NONE;
}

static void attach(rn_direct_t *d, rn_direct_req_t *q, rn_conn_t *c)
{
    q->conn = c;
    c->held = true;
    q->route = RN_ROUTE_ATTACHED;
    zframe_t *f;
    while (q->held && (f = zlist_pop(q->held))) {
        to_gateway(d, q, zframe_data(f), zframe_size(f));
        zframe_destroy(&f);
    }
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
        if (e->conn && !strcmp(e->id, id)) {
            rn_conn_t *c = e->conn;
            e->conn = NULL;
            if (c->closed) { /* it went away meanwhile */
                c->held = false;
                break;
            }
            attach(d, q, c);
            return;
        }
    }
}

/* Sends `started` before q's first output leaves: a request the
 * scheduler knows had output is not run again if this runner dies. */
static void note_started(rn_direct_t *d, rn_direct_req_t *q)
{
    if (q->started)
        return;
    msg_t note;
    msg_init(&note, MSG_started, q->id);
    sched_send(d, &note, NULL);
    q->started = true;
}

bool rn_direct_chunk(rn_direct_t *d, rn_direct_req_t *q, const msg_t *m)
{
    cr_err_t err;
    if (q->route == RN_ROUTE_NONE) {
        cr_status_t st = sched_send(d, m, &err);
        if (st)
            cr_log_warn("send %s failed: %s", msg_type_name(m->type), err.msg);
        return st == CR_OK;
    }
    /* Encoded into the one buffer: an attached request's chunk (once a
     * token) allocates nothing; a pending one's is copied to be held. */
    cr_buf_reset(&d->scratch);
    if (msg_encode(m, &d->scratch, &err)) {
        cr_log_warn("request %s: %s", q->id, err.msg);
        return false;
    }
    note_started(d, q);
    if (q->route == RN_ROUTE_ATTACHED)
        return to_gateway(d, q, d->scratch.data, d->scratch.len);
    zframe_t *f = zframe_new(d->scratch.data, d->scratch.len);
    if (!q->held)
        q->held = zlist_new();
    if (!f || !q->held || zlist_append(q->held, f)) {
        zframe_destroy(&f);
        return false;
    }
    return true;
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
    req_reset(q); /* its connection closes once written */
    snprintf(q->id, sizeof q->id, "%s", id); /* a late attach finds it ended */
    if (d)
        conns_reap(d);
    return taken;
}

static rn_direct_req_t *find(rn_direct_req_t *const *reqs, int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (reqs[i] && !strcmp(reqs[i]->id, id))
            return reqs[i];
    return NULL;
}

static void keep_early(rn_direct_t *d, const char *id, rn_conn_t *c)
{
    early_t *slot = &d->early[0];
    for (int i = 0; i < EARLY_MAX; i++) {
        early_t *e = &d->early[i];
        if (!e->conn) {
            slot = e;
            break;
        }
        if (e->at_ms < slot->at_ms)
            slot = e; /* full: the oldest goes */
    }
    if (slot->conn)
        slot->conn->held = false;
    slot->conn = c;
    c->held = true;
    snprintf(slot->id, sizeof slot->id, "%s", id);
    slot->at_ms = now_ms();
}

/* An attach on c: its request is found, or kept for, or it was too late
 * (c then closes: the gateway reads the end and waits for the scheduler). */
static void on_attach(rn_direct_t *d, rn_conn_t *c, const char *id,
                      rn_direct_req_t *const *reqs, int n)
{
    if (c->attached) {
        cr_log_warn("direct socket: a second attach (%s) on one connection ignored", id);
        return;
    }
    c->attached = true;
    linger_t *l = d->lingers;
    while (l && strcmp(l->q.id, id))
        l = l->next;
    rn_direct_req_t *q = l ? NULL : find(reqs, n, id);
    if (l) {
        attach(d, &l->q, c);
        linger_finish(d, l, l->q.route == RN_ROUTE_ATTACHED);
    } else if (q && q->route == RN_ROUTE_PENDING) {
        attach(d, q, c);
    } else if (!q) {
        keep_early(d, id, c); /* its request comes next */
    }
    /* else attached already, or ended: nothing to do */
}

/* What c says (attaches: how many), and whether it went away. */
static int conn_read(rn_direct_t *d, rn_conn_t *c, rn_direct_req_t *const *reqs, int n)
{
    int attaches = 0;
    for (;;) {
        msg_t m;
        cr_err_t err;
        cr_status_t st = bus_wire_reader_next(&c->in, &m, &err);
        if (st == CR_OK) {
            if (m.type == MSG_attach) {
                on_attach(d, c, m.id, reqs, n);
                attaches++;
            } else {
                cr_log_warn("direct socket: %s ignored (only attach is read here)",
                            msg_type_name(m.type));
            }
            msg_clear(&m);
            continue;
        }
        if (st != CR_E_TIMEOUT) {
            cr_log_warn("direct socket: %s", err.msg);
            if (st != CR_E_PROTO) {
                conn_lost(d, c); /* cannot be framed any more */
                return attaches;
            }
            continue;
        }
        bus_wire_fill_t r = bus_wire_reader_fill(&c->in, c->fd);
        if (r == BUS_WIRE_EMPTY)
            return attaches;
        if (r == BUS_WIRE_EOF) {
            conn_lost(d, c);
            return attaches;
        }
    }
}

/* Requests (and lingers) whose gateway went away are gone. */
static void mark_gone(rn_direct_t *d, rn_direct_req_t *const *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        rn_direct_req_t *q = reqs[i];
        if (q && q->conn && q->conn->closed && !q->gone) {
            cr_log_info("request %s: its gateway connection is gone", q->id);
            q->gone = true;
        }
    }
    for (int i = 0; i < EARLY_MAX; i++) {
        early_t *e = &d->early[i];
        if (e->conn && e->conn->closed) {
            e->conn->held = false;
            e->conn = NULL;
        }
    }
}

int rn_direct_read(rn_direct_t *d, rn_direct_req_t *const *reqs, int n)
{
    if (!d)
        return 0;
    struct epoll_event evs[EVENTS_MAX];
    int got, attaches = 0;
    do {
        got = epoll_wait(d->epoll_fd, evs, EVENTS_MAX, 0);
        for (int i = 0; i < got; i++) {
            rn_conn_t *c = evs[i].data.ptr;
            attaches += c ? conn_read(d, c, reqs, n) : conn_accept(d, reqs, n);
        }
    } while (got == EVENTS_MAX);
    mark_gone(d, reqs, n);
    conns_reap(d);
    return attaches;
}

void rn_direct_unroute(rn_direct_t *d, rn_direct_req_t *const *reqs, int n, const char *id)
{
    if (!d)
        return;
    for (linger_t *l = d->lingers; l; l = l->next)
        if (!strcmp(l->q.id, id)) {
            fall_back(d, &l->q, "the gateway cannot reach this runner");
            linger_finish(d, l, false);
            return;
        }
    rn_direct_req_t *q = find(reqs, n, id);
    if (q && q->route == RN_ROUTE_PENDING)
        fall_back(d, q, "the gateway cannot reach this runner");
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
    for (int i = 0; i < EARLY_MAX; i++) {
        early_t *e = &d->early[i];
        if (e->conn && now - e->at_ms > RN_ATTACH_KEEP_MS) {
            e->conn->held = false;
            e->conn = NULL;
        }
    }
    bool waiting = flush_all(d);
    mark_gone(d, reqs, n);
    conns_reap(d);
    return waiting || pending;
}
