/* test_direct_replies.c: a stream's chunks from the runner straight to the
 * gateway (issue 18; `route` in proto/messages.def).
 *
 * The gateway's real call (services/gateway/call.c) and the runner's real
 * direct socket (services/runner/direct.c, a Unix socket: proto/wire.h);
 * the test plays the scheduler on both sides: a ROUTER the call sends its
 * request to, and a ROUTER the runner's DEALER speaks to. Where a check
 * needs a gateway that misbehaves, it speaks to the runner's socket
 * itself. What must hold:
 *   - a request's chunks held while its attach has not come go to the
 *     gateway, in order, once it comes; later ones go at once; the
 *     scheduler hears `started` before the first and no chunk;
 *   - an attach that comes before the request attaches it at its start;
 *   - the last reply, sent by the scheduler with direct_chunks before the
 *     chunks have come, reaches the caller after them;
 *   - the call is reused by the next request; the runner closes a direct
 *     connection once its request ended and what it wrote was taken;
 *   - no attach within RN_ATTACH_WAIT_MS, or a request that ends first:
 *     the held chunks go through the scheduler, in order;
 *   - a reader that stops reading ends its request past the bound; a
 *     gateway that goes away is noticed;
 *   - a last reply counting chunks the runner's socket never delivered
 *     ends the wait with an error, not with a short answer;
 *   - bytes that are not an attach (a frame that does not decode, a length
 *     past the limit) are answered by closing that connection only. */
#include "lib/prelude.h"
#include "proto/bus.h"
#include "proto/wire.h"
#include "services/gateway/call.h"
#include "services/runner/direct.h"
#include "tests/unit/check.h"

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

static char dir_g[] = "/tmp/test-direct-XXXXXX";
static char front_ep[300], runners_ep[300], direct_ep[300];

typedef struct world {
    gw_call_limit_t limit;
    zsock_t *front;     /* the scheduler's ROUTER for gateways */
    zsock_t *runners;   /* the scheduler's ROUTER for runners */
    zsock_t *to_sched;  /* the runner's DEALER */
    rn_direct_t *direct;
} world_t;

static bool readable(zsock_t *s, int ms)
{
    zmq_pollitem_t it = {zsock_resolve(s), 0, ZMQ_POLLIN, 0};
    return zmq_poll(&it, 1, ms) == 1;
}

static bool fd_readable(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, ms) == 1;
}

/* ---- a gateway of the test's own on a runner's socket ---- */

typedef struct fake_gw {
    int fd;
    bus_wire_reader_t in;
} fake_gw_t;

static void gw_dial(fake_gw_t *g, const char *ep)
{
    CHECK_EQ_INT(bus_wire_connect(ep, &g->fd, NULL), CR_OK);
    bus_wire_reader_init(&g->in);
}

static void gw_write(fake_gw_t *g, const void *p, size_t n)
{
    CHECK_EQ_INT((int)bus_wire_write(g->fd, p, n, NULL, 0), (int)n);
}

static void gw_attach(fake_gw_t *g, const char *id)
{
    msg_t a;
    msg_init(&a, MSG_attach, id);
    cr_buf_t b;
    cr_buf_init(&b, 4096);
    CHECK_EQ_INT(bus_wire_encode(&a, &b, NULL), CR_OK);
    gw_write(g, b.data, b.len);
    cr_buf_free(&b);
}

/* The next message the runner wrote: 1, with *out; 0 when none came
 * within ms; -1 when the runner closed the connection. */
static int gw_next(fake_gw_t *g, int ms, msg_t *out)
{
    int64_t until = zclock_mono() + ms;
    for (;;) {
        cr_status_t st = bus_wire_reader_next(&g->in, out, NULL);
        if (st == CR_OK)
            return 1;
        CHECK_EQ_INT(st, CR_E_TIMEOUT);
        int left = (int)(until - zclock_mono());
        if (left < 0 || !fd_readable(g->fd, left))
            return 0;
        if (bus_wire_reader_fill(&g->in, g->fd) == BUS_WIRE_EOF)
            return bus_wire_reader_next(&g->in, out, NULL) == CR_OK ? 1 : -1;
    }
}

static void gw_hangup(fake_gw_t *g)
{
    close(g->fd);
    bus_wire_reader_free(&g->in);
}

/* The runner reads its socket until n attaches came (a connection may be
 * taken before its attach is written). */
static void runner_read_attaches(rn_direct_t *d, rn_direct_req_t *const *reqs, int n_reqs,
                                 int n)
{
    int64_t until = zclock_mono() + 2000;
    int got = 0;
    while (got < n && zclock_mono() < until) {
        fd_readable(rn_direct_fd(d), 100);
        got += rn_direct_read(d, reqs, n_reqs);
    }
    CHECK_MSG(got == n, "%d of %d attaches came", got, n);
}

static void chunk_msg(msg_t *m, const char *id, const char *text)
{
    msg_init(m, MSG_chunk, id);
    m->u.chunk.response = (char *)text;
    m->u.chunk.has_response = true;
}

/* The runner sends a chunk of text for q by its route; true when it went. */
static bool runner_says(rn_direct_t *d, rn_direct_req_t *q, const char *text)
{
    msg_t c;
    chunk_msg(&c, q->id, text);
    return rn_direct_chunk(d, q, &c);
}

/* ---- the gateway's side: a thread reading replies until the last ---- */

#define MAX_GOT 16

typedef struct reader {
    pthread_t th;
    gw_call_t *call;
    cr_status_t st;    /* of the wait that ended it */
    char err[CR_ERR_MSG_MAX];
    int n;
    msg_type_t type[MAX_GOT];
    char text[MAX_GOT][16];
    int64_t direct_chunks; /* the last reply's, -1 none */
    int max;               /* > 0: stop after this many replies */
} reader_t;

static void *reader_main(void *arg)
{
    reader_t *r = arg;
    gw_wait_t w = {.idle_timeout_ms = 5000};
    r->direct_chunks = -1;
    for (;;) {
        msg_t m;
        cr_err_t err;
        r->st = gw_call_recv(r->call, &w, &m, &err);
        if (r->st) {
            snprintf(r->err, sizeof r->err, "%s", err.msg);
            return NULL;
        }
        if (r->n < MAX_GOT) {
            r->type[r->n] = m.type;
            snprintf(r->text[r->n], sizeof r->text[r->n], "%s",
                     m.type == MSG_chunk && m.u.chunk.response ? m.u.chunk.response : "");
            r->n++;
        }
        bool last = m.type != MSG_chunk || r->n == r->max;
        if (m.type == MSG_done && m.u.done.has_direct_chunks)
            r->direct_chunks = m.u.done.direct_chunks;
        msg_clear(&m);
        if (last)
            return NULL;
    }
}

/* The gateway sends a generate; the scheduler reads it: its id and the
 * gateway's identity out. The reader thread starts waiting (for max
 * replies, 0: up to the last). */
static void request(world_t *w, reader_t *r, char *id, zframe_t **client, int max)
{
    memset(r, 0, sizeof *r);
    r->max = max;
    cr_err_t err;
    CHECK_EQ_INT(gw_call_open(&w->limit, front_ep, "scheduler", 2000, &r->call, &err), CR_OK);
    msg_t m;
    msg_init(&m, MSG_generate, NULL);
    m.u.generate.model = "m";
    m.u.generate.has_model = true;
    CHECK_EQ_INT(gw_call_send(r->call, &m, &err), CR_OK);
    msg_t got;
    CHECK_EQ_INT(bus_recv(w->front, 2000, &got, client, &err), CR_OK);
    snprintf(id, MSG_ID_MAX + 1, "%s", got.id);
    msg_clear(&got);
    pthread_create(&r->th, NULL, reader_main, r);
}

static void sched_send(world_t *w, zframe_t *client, msg_t *m)
{
    cr_err_t err;
    CHECK_EQ_INT(bus_send_to(w->front, client, m, &err), CR_OK);
}

static void sched_route(world_t *w, zframe_t *client, const char *id, const char *ep)
{
    msg_t m;
    msg_init(&m, MSG_route, id);
    m.u.route.endpoint = (char *)ep;
    m.u.route.has_endpoint = true;
    sched_send(w, client, &m);
}

static void sched_done(world_t *w, zframe_t *client, const char *id, int64_t direct_chunks)
{
    msg_t m;
    msg_init(&m, MSG_done, id);
    m.u.done.done_reason = "stop";
    m.u.done.has_done_reason = true;
    if (direct_chunks >= 0) {
        m.u.done.direct_chunks = direct_chunks;
        m.u.done.has_direct_chunks = true;
    }
    sched_send(w, client, &m);
}

/* What the runner said to the scheduler next: its type (and a chunk's
 * text); MSG_ping when nothing came within ms. */
static msg_type_t sched_heard(world_t *w, int ms, char *text, size_t cap)
{
    if (!readable(w->runners, ms))
        return MSG_ping;
    msg_t m;
    zframe_t *who = NULL;
    cr_err_t err;
    CHECK_EQ_INT(bus_recv(w->runners, 0, &m, &who, &err), CR_OK);
    zframe_destroy(&who);
    if (text)
        snprintf(text, cap, "%s", m.type == MSG_chunk && m.u.chunk.response ? m.u.chunk.response : "");
    msg_type_t t = m.type;
    msg_clear(&m);
    return t;
}

/* The runner's next message to the scheduler, whole (false: none in ms). */
static bool sched_heard_msg(world_t *w, int ms, msg_t *out)
{
    memset(out, 0, sizeof *out);
    if (!readable(w->runners, ms))
        return false;
    zframe_t *who = NULL;
    cr_err_t err;
    cr_status_t st = bus_recv(w->runners, 0, out, &who, &err);
    zframe_destroy(&who);
    CHECK_EQ_INT(st, CR_OK);
    return st == CR_OK;
}

static msg_t done_msg(const char *id)
{
    msg_t m;
    msg_init(&m, MSG_done, id);
    m.u.done.done_reason = "stop";
    m.u.done.has_done_reason = true;
    return m;
}

/* The runner reads its direct socket until an attach came. */
static void runner_read_attach(world_t *w, rn_direct_req_t *q)
{
    rn_direct_req_t *reqs[] = {q};
    runner_read_attaches(w->direct, reqs, 1, 1);
}

/* The scheduler routes request id to the runner, which reads the attach,
 * begins q and says text directly (`started` to the scheduler first). */
static void routed_says(world_t *w, zframe_t *client, const char *id, rn_direct_req_t *q,
                        const char *text)
{
    sched_route(w, client, id, direct_ep);
    runner_read_attach(w, q);
    rn_direct_begin(w->direct, q, id, true);
    CHECK(runner_says(w->direct, q, text));
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
}

static void expect_got(const reader_t *r, const char *want)
{
    /* want: the chunks' texts in order, then the last reply */
    char got[256] = "";
    for (int i = 0; i < r->n; i++) {
        size_t len = strlen(got);
        snprintf(got + len, sizeof got - len, "%s%s", i ? " " : "",
                 r->type[i] == MSG_chunk ? r->text[i] : msg_type_name(r->type[i]));
    }
    CHECK_EQ_STR(got, want);
}

/* The rest of a stream, sent by the runner from inside the gateway's wait
 * once it has waited a slice with the last reply in hand. */
typedef struct rest {
    world_t *w;
    rn_direct_req_t *q;
    int calls;
} rest_t;

static bool send_rest(void *arg)
{
    rest_t *r = arg;
    if (++r->calls == 2) { /* the second check: a slice into the wait */
        CHECK(runner_says(r->w->direct, r->q, "b"));
        CHECK(runner_says(r->w->direct, r->q, "c"));
    }
    return false;
}

/* Chunks held until the attach; the last reply overtakes the chunks on
 * the bus and is held by the gateway until they came. */
static void test_pending_then_attach(world_t *w)
{
    reader_t r;
    char id[MSG_ID_MAX + 1];
    zframe_t *client = NULL;
    request(w, &r, id, &client, 1);

    rn_direct_req_t q = {0};
    rn_direct_begin(w->direct, &q, id, true);
    CHECK_EQ_INT(q.route, RN_ROUTE_PENDING);
    CHECK(runner_says(w->direct, &q, "a"));
    /* The scheduler hears `started`, and not the chunk. */
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
    CHECK_EQ_INT(sched_heard(w, 50, NULL, 0), MSG_ping);

    sched_route(w, client, id, direct_ep);
    runner_read_attach(w, &q);
    CHECK_EQ_INT(q.route, RN_ROUTE_ATTACHED);
    pthread_join(r.th, NULL); /* it got "a" */
    CHECK_MSG(r.st == CR_OK, "wait: %s", r.err);
    expect_got(&r, "a");
    /* done (3 direct) is on its way before b and c leave the runner,
     * which sends them from inside the next wait, a slice into it. */
    sched_done(w, client, id, 3);
    rest_t rest = {w, &q, 0};
    gw_wait_t wt = {.idle_timeout_ms = 5000, .abort_fn = send_rest, .abort_arg = &rest};
    const char *want[] = {"b", "c", "done"};
    for (int i = 0; i < 3; i++) {
        msg_t got;
        cr_err_t err;
        CHECK_EQ_INT(gw_call_recv(r.call, &wt, &got, &err), CR_OK);
        CHECK_EQ_STR(got.type == MSG_chunk ? got.u.chunk.response : msg_type_name(got.type),
                     want[i]);
        if (got.type == MSG_done)
            CHECK_EQ_INT(got.u.done.direct_chunks, 3);
        msg_clear(&got);
    }
    CHECK_MSG(rest.calls >= 2, "the rest was never sent (%d checks)", rest.calls);
    msg_t last = done_msg(id);
    CHECK(!rn_direct_end(w->direct, &q, &last));
    CHECK_EQ_INT(last.u.done.direct_chunks, 3);
    CHECK_EQ_INT(sched_heard(w, 50, NULL, 0), MSG_ping); /* nothing more */
    gw_call_destroy(&r.call);
    zframe_destroy(&client);
}

/* The attach comes before the request: kept, and the request attached at
 * its start. The call comes from the pool. */
static void test_early_attach(world_t *w)
{
    long reused = atomic_load(&w->limit.reused);
    reader_t r;
    char id[MSG_ID_MAX + 1];
    zframe_t *client = NULL;
    request(w, &r, id, &client, 0);
    sched_route(w, client, id, direct_ep);
    rn_direct_req_t q = {0};
    runner_read_attach(w, &q); /* q has not begun: kept for it */
    rn_direct_begin(w->direct, &q, id, true);
    CHECK_EQ_INT(q.route, RN_ROUTE_ATTACHED);
    CHECK(runner_says(w->direct, &q, "x"));
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
    msg_t last = done_msg(id);
    CHECK(!rn_direct_end(w->direct, &q, &last));
    CHECK_EQ_INT(last.u.done.direct_chunks, 1);
    sched_done(w, client, id, 1);
    pthread_join(r.th, NULL);
    CHECK_MSG(r.st == CR_OK, "wait: %s", r.err);
    expect_got(&r, "x done");
    CHECK_EQ_INT(atomic_load(&w->limit.reused) - reused, 1);
    gw_call_destroy(&r.call);
    zframe_destroy(&client);
}

/* The gateway cannot reach the endpoint it was given: it says no_route
 * to the scheduler, which tells the runner, whose held chunks then go
 * through the scheduler at once, in order, and so do later ones; the
 * gateway takes them from there. A scheduler that does not pass it on
 * leaves the runner to give up after RN_ATTACH_WAIT_MS. An older
 * scheduler's endpoint (ZeroMQ's ipc://) gets no no_route: that scheduler
 * would answer it with an error. */
static void test_no_attach_falls_back(world_t *w)
{
    for (int mode = 0; mode < 3; mode++) {
        bool told = mode == 1, older = mode == 2;
        reader_t r;
        char id[MSG_ID_MAX + 1];
        zframe_t *client = NULL;
        request(w, &r, id, &client, 0);
        char nowhere[400];
        snprintf(nowhere, sizeof nowhere, "%s://%s/nobody.sock", older ? "ipc" : "unix",
                 dir_g);
        sched_route(w, client, id, nowhere);
        rn_direct_req_t q = {0};
        rn_direct_req_t *reqs[] = {&q};
        rn_direct_begin(w->direct, &q, id, true);
        CHECK(runner_says(w->direct, &q, "p"));
        CHECK(runner_says(w->direct, &q, "q"));
        CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
        if (!older) {
            msg_t no;
            zframe_t *who = NULL;
            CHECK_EQ_INT(bus_recv(w->front, 2000, &no, &who, NULL), CR_OK);
            CHECK_EQ_INT(no.type, MSG_no_route);
            CHECK_EQ_STR(no.id, id);
            msg_clear(&no);
            zframe_destroy(&who);
        }
        int64_t t0 = zclock_mono();
        if (told)
            rn_direct_unroute(w->direct, reqs, 1, id);
        while (q.route == RN_ROUTE_PENDING && zclock_mono() - t0 < 5000) {
            rn_direct_tick(w->direct, reqs, 1);
            zclock_sleep(RN_DIRECT_FLUSH_MS);
        }
        CHECK_EQ_INT(q.route, RN_ROUTE_NONE);
        if (older) /* a second on: the gateway said nothing more */
            CHECK(!readable(w->front, 0));
        int64_t took = zclock_mono() - t0;
        if (told)
            CHECK_MSG(took < RN_ATTACH_WAIT_MS / 2, "fell back after %lld ms", (long long)took);
        else
            CHECK_MSG(took >= RN_ATTACH_WAIT_MS - 50, "fell back after %lld ms", (long long)took);
        CHECK(runner_says(w->direct, &q, "r"));
        msg_t last = done_msg(id);
        CHECK(!rn_direct_end(w->direct, &q, &last)); /* the caller sends it */
        CHECK(!last.u.done.has_direct_chunks);
        /* The scheduler relays what it heard, in order. */
        const char *want[] = {"p", "q", "r"};
        for (int i = 0; i < 3; i++) {
            char text[16];
            CHECK_EQ_INT(sched_heard(w, 2000, text, sizeof text), MSG_chunk);
            CHECK_EQ_STR(text, want[i]);
            msg_t relay;
            chunk_msg(&relay, id, want[i]);
            sched_send(w, client, &relay);
        }
        sched_done(w, client, id, -1);
        pthread_join(r.th, NULL);
        CHECK_MSG(r.st == CR_OK, "wait: %s", r.err);
        expect_got(&r, "p q r done");
        gw_call_destroy(&r.call);
        zframe_destroy(&client);
    }
}

/* A request that ends before its attach: its held chunks and its last
 * reply wait for the attach, then go as if it had come in time; with no
 * attach they go through the scheduler after RN_ATTACH_WAIT_MS. A late
 * attach for a request that fell back is dropped, not kept. */
static void test_end_while_pending(world_t *w)
{
    rn_direct_req_t q = {0};
    rn_direct_req_t *reqs[] = {&q};
    rn_direct_begin(w->direct, &q, "quick", true);
    msg_t last, heard;
    CHECK(runner_says(w->direct, &q, "z"));
    last = done_msg("quick");
    CHECK(rn_direct_end(w->direct, &q, &last)); /* taken: it waits */
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
    CHECK_EQ_INT(sched_heard(w, 50, NULL, 0), MSG_ping); /* nothing yet */
    fake_gw_t gw;
    gw_dial(&gw, direct_ep);
    gw_attach(&gw, "quick");
    runner_read_attach(w, &q);
    /* the chunk on the attached connection, then its end; the done (1
     * direct) to the scheduler */
    msg_t got;
    CHECK_EQ_INT(gw_next(&gw, 2000, &got), 1);
    CHECK_EQ_STR(got.type == MSG_chunk ? got.u.chunk.response : "", "z");
    msg_clear(&got);
    CHECK_EQ_INT(gw_next(&gw, 2000, &got), -1);
    gw_hangup(&gw);
    CHECK(sched_heard_msg(w, 2000, &heard));
    CHECK_EQ_INT(heard.type, MSG_done);
    CHECK(heard.u.done.has_direct_chunks && heard.u.done.direct_chunks == 1);
    msg_clear(&heard);
    CHECK(!rn_direct_tick(w->direct, reqs, 1)); /* nothing waits */

    /* No attach: after the wait, chunk then done through the scheduler. */
    rn_direct_begin(w->direct, &q, "lone", true);
    CHECK(runner_says(w->direct, &q, "y"));
    last = done_msg("lone");
    CHECK(rn_direct_end(w->direct, &q, &last));
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
    int64_t t0 = zclock_mono();
    while (rn_direct_tick(w->direct, reqs, 1) && zclock_mono() - t0 < 5000)
        zclock_sleep(RN_DIRECT_FLUSH_MS);
    CHECK_MSG(zclock_mono() - t0 >= RN_ATTACH_WAIT_MS - 50, "fell back after %lld ms",
              (long long)(zclock_mono() - t0));
    char text[16];
    CHECK_EQ_INT(sched_heard(w, 2000, text, sizeof text), MSG_chunk);
    CHECK_EQ_STR(text, "y");
    CHECK(sched_heard_msg(w, 2000, &heard));
    CHECK_EQ_INT(heard.type, MSG_done);
    CHECK(!heard.u.done.has_direct_chunks);
    msg_clear(&heard);

    /* Its late attach is dropped, not kept for a later request: the
     * runner closes that connection. */
    gw_dial(&gw, direct_ep);
    gw_attach(&gw, "lone");
    runner_read_attach(w, &q);
    CHECK_EQ_INT(gw_next(&gw, 2000, &got), -1);
    gw_hangup(&gw);
    rn_direct_begin(w->direct, &q, "lone", true);
    CHECK_EQ_INT(q.route, RN_ROUTE_PENDING);
    rn_direct_begin(w->direct, &q, "none", false); /* q, for the next check */

    /* Told no_route while it waits ended: chunk then done at once. */
    rn_direct_begin(w->direct, &q, "told", true);
    CHECK(runner_says(w->direct, &q, "t"));
    last = done_msg("told");
    CHECK(rn_direct_end(w->direct, &q, &last));
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
    rn_direct_unroute(w->direct, reqs, 1, "told"); /* no tick: it went at once */
    CHECK_EQ_INT(sched_heard(w, 2000, text, sizeof text), MSG_chunk);
    CHECK_EQ_STR(text, "t");
    CHECK(sched_heard_msg(w, 2000, &heard));
    CHECK_EQ_INT(heard.type, MSG_done);
    CHECK(!heard.u.done.has_direct_chunks);
    msg_clear(&heard);
    CHECK(!rn_direct_tick(w->direct, reqs, 1)); /* nothing waits */

    /* One still waiting when its runner stops: through the scheduler. (A
     * runner of its own: the shared one's pooled gateway connections
     * would see it go, and no endpoint is ever bound twice.) */
    char ep[400];
    snprintf(ep, sizeof ep, "unix://%s/runner-exit.sock", dir_g);
    rn_direct_t *exiting = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_direct_new(ep, w->to_sched, &exiting, &err), CR_OK);
    if (exiting) {
        rn_direct_begin(exiting, &q, "at-exit", true);
        last = done_msg("at-exit");
        CHECK(rn_direct_end(exiting, &q, &last));
        rn_direct_destroy(&exiting, 0);
        CHECK(sched_heard_msg(w, 2000, &heard));
        CHECK_EQ_INT(heard.type, MSG_done);
        CHECK_EQ_STR(heard.id, "at-exit");
        msg_clear(&heard);
    }
}

/* A reader that attached and stopped reading: its queue passes a small
 * bound and the request must end (q.over); what was counted still reaches
 * it, whole and in order, once it reads, and then the connection closes.
 * One that went away: q.gone, seen by a send or by the read alone. */
static void test_slow_and_gone(world_t *w)
{
    setenv("CORRAL_STREAM_BUFFER", "64KiB", 1);
    char ep[400];
    snprintf(ep, sizeof ep, "unix://%s/runner-small.sock", dir_g);
    rn_direct_t *small = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_direct_new(ep, w->to_sched, &small, &err), CR_OK);
    unsetenv("CORRAL_STREAM_BUFFER");
    if (!small)
        return;
    CHECK_EQ_INT(rn_direct_max_bytes(small), 64 << 10);
    /* The socket takes what its buffer holds (about 200 KiB), then the
     * runner's queue its 64 KiB. */
    fake_gw_t gw;
    gw_dial(&gw, ep);
    gw_attach(&gw, "slow");
    rn_direct_req_t q = {0};
    rn_direct_req_t *reqs[] = {&q};
    rn_direct_begin(small, &q, "slow", true);
    runner_read_attaches(small, reqs, 1, 1);
    CHECK_EQ_INT(q.route, RN_ROUTE_ATTACHED);
    static char big[4096];
    memset(big, 'w', sizeof big - 1);
    msg_t c;
    chunk_msg(&c, "slow", big);
    int sent = 0;
    while (sent < 5000 && rn_direct_chunk(small, &q, &c))
        sent++;
    CHECK(q.over);
    CHECK(!q.gone);
    CHECK_MSG(sent > 64 / 4, "over after %d chunks of 4 KiB", sent);
    CHECK_MSG(sent < 5000, "never over the bound");
    msg_t last = done_msg("slow");
    CHECK(!rn_direct_end(small, &q, &last));
    CHECK_EQ_INT(last.u.done.direct_chunks, sent);
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
    /* It reads now: every counted chunk, whole, then the end. */
    int got = 0, r;
    bool whole = true;
    msg_t m;
    int64_t t0 = zclock_mono();
    do {
        rn_direct_tick(small, reqs, 1);
        r = gw_next(&gw, 50, &m);
        if (r == 1) {
            got++;
            whole &= m.type == MSG_chunk && !strcmp(m.id, "slow") && m.u.chunk.response &&
                     strlen(m.u.chunk.response) == sizeof big - 1;
            msg_clear(&m);
        }
    } while (r >= 0 && zclock_mono() - t0 < 10000);
    CHECK_EQ_INT(r, -1);
    CHECK_EQ_INT(got, sent);
    CHECK(whole);
    gw_hangup(&gw);

    /* Gone: the reader's connection closes; a send sees it. */
    rn_direct_begin(small, &q, "gone", true);
    gw_dial(&gw, ep);
    gw_attach(&gw, "gone");
    runner_read_attaches(small, reqs, 1, 1);
    CHECK_EQ_INT(q.route, RN_ROUTE_ATTACHED);
    gw_hangup(&gw);
    chunk_msg(&c, "gone", "g");
    CHECK(!rn_direct_chunk(small, &q, &c));
    CHECK(q.gone);
    last = done_msg("gone");
    rn_direct_end(small, &q, &last);
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);

    /* Gone while it says nothing (a long prompt): the read sees it. */
    rn_direct_begin(small, &q, "quiet", true);
    gw_dial(&gw, ep);
    gw_attach(&gw, "quiet");
    runner_read_attaches(small, reqs, 1, 1);
    gw_hangup(&gw);
    t0 = zclock_mono();
    while (!q.gone && zclock_mono() - t0 < 5000) {
        fd_readable(rn_direct_fd(small), 100);
        rn_direct_read(small, reqs, 1);
    }
    CHECK(q.gone);
    last = done_msg("quiet");
    rn_direct_end(small, &q, &last);
    rn_direct_destroy(&small, 0);
}

/* The runner takes a connection before its attach is written (a gateway
 * connects, then writes): it keeps it for the attach, and the chunks go
 * on it. */
static void test_accept_before_attach(world_t *w)
{
    rn_direct_req_t q = {0};
    rn_direct_req_t *reqs[] = {&q};
    rn_direct_begin(w->direct, &q, "slow-writer", true);
    fake_gw_t gw;
    gw_dial(&gw, direct_ep);
    CHECK(fd_readable(rn_direct_fd(w->direct), 2000));
    CHECK_EQ_INT(rn_direct_read(w->direct, reqs, 1), 0); /* taken; nothing said yet */
    rn_direct_tick(w->direct, reqs, 1);
    gw_attach(&gw, "slow-writer");
    runner_read_attaches(w->direct, reqs, 1, 1);
    CHECK_EQ_INT(q.route, RN_ROUTE_ATTACHED);
    CHECK(runner_says(w->direct, &q, "s"));
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
    msg_t m;
    CHECK_EQ_INT(gw_next(&gw, 2000, &m), 1);
    CHECK_EQ_STR(m.type == MSG_chunk ? m.u.chunk.response : "", "s");
    msg_clear(&m);
    msg_t last = done_msg("slow-writer");
    CHECK(!rn_direct_end(w->direct, &q, &last));
    CHECK_EQ_INT(last.u.done.direct_chunks, 1);
    CHECK_EQ_INT(gw_next(&gw, 2000, &m), -1);
    gw_hangup(&gw);
}

/* Bytes that are not an attach: a frame that does not decode is skipped
 * (the attach after it still counts); a length past the limit closes that
 * connection, and the socket serves the next one. */
static void test_hostile_bytes(world_t *w)
{
    rn_direct_req_t q = {0};
    rn_direct_req_t *reqs[] = {&q};
    rn_direct_begin(w->direct, &q, "after-junk", true);
    fake_gw_t gw;
    gw_dial(&gw, direct_ep);
    static const uint8_t junk[] = {5, 0, 0, 0, 0xc1, 0xc1, 0xc1, 0xc1, 0xc1};
    gw_write(&gw, junk, sizeof junk);
    gw_attach(&gw, "after-junk");
    runner_read_attaches(w->direct, reqs, 1, 1);
    CHECK_EQ_INT(q.route, RN_ROUTE_ATTACHED);
    msg_t last = done_msg("after-junk");
    rn_direct_end(w->direct, &q, &last);
    msg_t m;
    CHECK_EQ_INT(gw_next(&gw, 2000, &m), -1); /* ended: closed */
    gw_hangup(&gw);

    rn_direct_begin(w->direct, &q, "huge", true);
    gw_dial(&gw, direct_ep);
    static const uint8_t huge[] = {0xff, 0xff, 0xff, 0x7f, 1, 2, 3};
    gw_write(&gw, huge, sizeof huge);
    int64_t t0 = zclock_mono();
    int r = 0;
    while (r == 0 && zclock_mono() - t0 < 5000) {
        fd_readable(rn_direct_fd(w->direct), 100);
        rn_direct_read(w->direct, reqs, 1);
        r = gw_next(&gw, 10, &m);
    }
    CHECK_EQ_INT(r, -1);
    gw_hangup(&gw);
    CHECK_EQ_INT(q.route, RN_ROUTE_PENDING);
    gw_dial(&gw, direct_ep);
    gw_attach(&gw, "huge");
    runner_read_attaches(w->direct, reqs, 1, 1);
    CHECK_EQ_INT(q.route, RN_ROUTE_ATTACHED);
    last = done_msg("huge");
    rn_direct_end(w->direct, &q, &last);
    gw_hangup(&gw);
}

/* The scheduler runs a request again after its runner began to answer
 * (the runner went away before the scheduler heard its `started`): the
 * client already has direct text, so a new route, or a chunk through the
 * scheduler, would repeat it. The gateway ends the request with an error
 * instead, keeping what was shown. */
static void test_rerun_after_output(world_t *w)
{
    for (int through_scheduler = 0; through_scheduler < 2; through_scheduler++) {
        reader_t r;
        char id[MSG_ID_MAX + 1];
        zframe_t *client = NULL;
        request(w, &r, id, &client, 1);
        rn_direct_req_t q = {0};
        routed_says(w, client, id, &q, "a");
        pthread_join(r.th, NULL); /* "a" is shown */
        expect_got(&r, "a");
        r.max = 0;
        pthread_create(&r.th, NULL, reader_main, &r);
        if (through_scheduler) {
            msg_t c;
            chunk_msg(&c, id, "a");
            sched_send(w, client, &c);
        } else {
            sched_route(w, client, id, direct_ep);
        }
        pthread_join(r.th, NULL);
        CHECK_EQ_INT(r.st, CR_E_UNAVAILABLE);
        CHECK_MSG(strstr(r.err, "after it began to answer") != NULL, "error: %s", r.err);
        expect_got(&r, "a");
        msg_t last = done_msg(id);
        rn_direct_end(w->direct, &q, &last);
        gw_call_destroy(&r.call);
        zframe_destroy(&client);
    }
}

/* The last reply counts chunks the runner's socket never delivers (the
 * runner went away with them): an error, not a short answer. */
static void test_lost_chunks(world_t *w)
{
    reader_t r;
    char id[MSG_ID_MAX + 1];
    zframe_t *client = NULL;
    request(w, &r, id, &client, 0);
    rn_direct_req_t q = {0};
    routed_says(w, client, id, &q, "only");
    sched_done(w, client, id, 2);
    msg_t last = done_msg(id);
    rn_direct_end(w->direct, &q, &last);
    rn_direct_destroy(&w->direct, 1000);
    pthread_join(r.th, NULL);
    CHECK_EQ_INT(r.st, CR_E_UNAVAILABLE);
    CHECK_MSG(strstr(r.err, "before the whole answer") != NULL, "error: %s", r.err);
    expect_got(&r, "only");
    gw_call_destroy(&r.call);
    zframe_destroy(&client);
}

int main(void)
{
    CHECK(mkdtemp(dir_g) != NULL);
    snprintf(front_ep, sizeof front_ep, "ipc://%s/scheduler.sock", dir_g);
    snprintf(runners_ep, sizeof runners_ep, "ipc://%s/runners.sock", dir_g);
    snprintf(direct_ep, sizeof direct_ep, "unix://%s/runner-rn1.sock", dir_g);
    world_t w = {0};
    gw_call_limit_init(&w.limit, 64);
    w.front = zsock_new_router(front_ep);
    w.runners = zsock_new_router(runners_ep);
    w.to_sched = zsock_new(ZMQ_DEALER);
    CHECK(w.front && w.runners && w.to_sched);
    zsock_set_identity(w.to_sched, "rn1");
    CHECK_EQ_INT(zsock_connect(w.to_sched, "%s", runners_ep), 0);
    cr_err_t err;
    CHECK_EQ_INT(rn_direct_new(direct_ep, w.to_sched, &w.direct, &err), CR_OK);
    if (w.direct) {
        test_pending_then_attach(&w);
        test_early_attach(&w);
        test_no_attach_falls_back(&w);
        test_end_while_pending(&w);
        test_slow_and_gone(&w);
        test_accept_before_attach(&w);
        test_hostile_bytes(&w);
        test_rerun_after_output(&w);
        test_lost_chunks(&w); /* last: closes the runner's socket */
    }
    rn_direct_destroy(&w.direct, 0);
    gw_call_limit_fini(&w.limit);
    zsock_destroy(&w.to_sched);
    zsock_destroy(&w.runners);
    zsock_destroy(&w.front);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir_g);
    CHECK_EQ_INT(system(cmd), 0);
    return check_finish("direct_replies");
}
