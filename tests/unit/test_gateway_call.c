/* test_gateway_call.c: the gateway's budget of bus calls (call.h).
 *
 * bench-soak found it: each request in flight holds three ZeroMQ sockets,
 * libzmq's context allows 1,023 unless told otherwise, and CZMQ aborts
 * when a socket cannot be made, so about 341 requests at once crashed the
 * gateway (and its restarts, under the same load). gw_call_limit_init
 * sizes the socket table for the budget; a call past the budget is
 * CR_E_BUSY, not an abort.
 *
 * And the pool of idle calls (issue 18): a call that got its reply is
 * reused for the next request, with a new id and the old request's late
 * replies dropped; canceled, unanswered and dropped calls are not; idle
 * calls are closed after a while. A reused call whose connection turns out
 * to be gone before anything came back sends its request again on a new
 * one (stop 29's CI failure: a restarting scheduler's first request got
 * 502 where a fresh call waits for it).
 *
 * And the abort callback (the client's socket polled) runs at most once a
 * slice while replies flow, yet still ends a wait whose client left. */
#include "lib/prelude.h"
#include "proto/bus.h"
#include "services/gateway/call.h"
#include "tests/unit/check.h"

#include <pthread.h>
#include <sys/resource.h>

#define MANY 600 /* 1,800 sockets: past libzmq's default table */
#define ENDPOINT "inproc://test-gateway-call"

/* The open-files limit MANY calls need (the gateway raises its own). */
static void raise_nofile(void)
{
    struct rlimit rl;
    rlim_t want = MANY * (GW_CALL_FDS + 1) + 256;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
}

static gw_call_t *open_at(gw_call_limit_t *l, const char *ep, cr_status_t *st)
{
    gw_call_t *c = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    *st = gw_call_open(l, ep, "scheduler", 2000, &c, &err);
    if (*st == CR_E_BUSY)
        CHECK_MSG(strstr(err.msg, "server busy") != NULL, "busy message: %s", err.msg);
    return c;
}

static gw_call_t *open_call(gw_call_limit_t *l, cr_status_t *st)
{
    return open_at(l, ENDPOINT, st);
}

/* No limit (NULL): nothing counted (needs the peer bound). */
static void test_no_limit(void)
{
    gw_call_t *c = NULL;
    cr_err_t err;
    CHECK_EQ_INT(gw_call_open(NULL, ENDPOINT, "registry", 100, &c, &err), CR_OK);
    gw_call_destroy(&c);
    CHECK(c == NULL);
}

/* Many calls at once open (the table is sized), one past the budget is
 * refused, and closing one gives its place back. */
static void test_many_calls(void)
{
    static gw_call_t *calls[MANY];
    gw_call_limit_t l;
    gw_call_limit_init(&l, MANY);
    /* The peer the calls connect to (the scheduler's ROUTER). */
    zsock_t *peer = zsock_new_router(ENDPOINT);
    CHECK(peer != NULL);
    if (l.max < MANY) {
        /* A host whose hard open-files limit is low: the budget shrank to
         * fit it (what the gateway does too); still past 341. */
        fprintf(stderr, "budget %d of %d calls (open files limit)\n", l.max, MANY);
        CHECK(l.max >= 1);
    }
    int n = l.max;
    cr_status_t st = CR_OK;
    for (int i = 0; i < n; i++) {
        calls[i] = open_call(&l, &st);
        CHECK_MSG(st == CR_OK && calls[i], "call %d of %d: status %d", i + 1, n, (int)st);
        if (st)
            break;
    }
    CHECK_EQ_INT(atomic_load(&l.open), n);
    gw_call_t *extra = open_call(&l, &st);
    CHECK_EQ_INT(st, CR_E_BUSY);
    CHECK(extra == NULL);
    CHECK_EQ_INT(atomic_load(&l.open), n);
    gw_call_destroy(&calls[0]);
    calls[0] = open_call(&l, &st);
    CHECK_EQ_INT(st, CR_OK);
    for (int i = 0; i < n; i++)
        gw_call_destroy(&calls[i]);
    CHECK_EQ_INT(atomic_load(&l.open), 0);
    test_no_limit();
    zsock_destroy(&peer);
    gw_call_limit_fini(&l);
}

/* ---- reuse (the pool) ---- */

/* The peer answers the next request with `type` under its id; the
 * request's id in *id. */
static void peer_answer(zsock_t *peer, msg_type_t type, char *id)
{
    msg_t m;
    zframe_t *who = NULL;
    cr_err_t err;
    id[0] = '\0';
    cr_status_t rst = bus_recv(peer, 2000, &m, &who, &err);
    CHECK_EQ_INT(rst, CR_OK);
    if (rst)
        return;
    snprintf(id, MSG_ID_MAX + 1, "%s", m.id);
    msg_t reply;
    msg_init(&reply, type, m.id);
    if (type == MSG_progress) {
        reply.u.progress.status = "loading model";
        reply.u.progress.has_status = true;
    }
    cr_status_t sst = bus_send_to(peer, who, &reply, &err);
    CHECK_MSG(sst == CR_OK, "answering %s: %s", msg_type_name(m.type), err.msg);
    msg_clear(&m);
    zframe_destroy(&who);
}

/* peer_answer on a thread, while the test's thread waits in
 * gw_call_recv (which is where a lost request is sent again). */
typedef struct answerer {
    pthread_t th;
    zsock_t *peer;
    msg_type_t type;
    char id[MSG_ID_MAX + 1];
} answerer_t;

static void *answer_main(void *arg)
{
    answerer_t *a = arg;
    peer_answer(a->peer, a->type, a->id);
    return NULL;
}

static void answer_start(answerer_t *a, zsock_t *peer, msg_type_t type)
{
    memset(a, 0, sizeof *a);
    a->peer = peer;
    a->type = type;
    pthread_create(&a->th, NULL, answer_main, a);
}

/* The peer exits (dropping whatever it had not read) and another binds
 * the same endpoint: a restarted service. */
static zsock_t *peer_restart(zsock_t **peer, const char *ep)
{
    zsock_destroy(peer);
    zsock_t *p = zsock_new_router(ep);
    CHECK(p != NULL);
    return p;
}

/* True once a message waits on peer (up to 2 s). */
static bool peer_readable(zsock_t *peer)
{
    zmq_pollitem_t it = {zsock_resolve(peer), 0, ZMQ_POLLIN, 0};
    return zmq_poll(&it, 1, 2000) == 1;
}

/* One request and its reply on c. */
static void round_trip(gw_call_t *c, zsock_t *peer)
{
    msg_t m, got;
    msg_init(&m, MSG_ping, NULL);
    cr_err_t err;
    CHECK_EQ_INT(gw_call_send(c, &m, &err), CR_OK);
    char id[MSG_ID_MAX + 1];
    peer_answer(peer, MSG_ok, id);
    CHECK_EQ_STR(id, gw_call_id(c));
    gw_wait_t w = {.idle_timeout_ms = 2000};
    CHECK_EQ_INT(gw_call_recv(c, &w, &got, &err), CR_OK);
    CHECK_EQ_INT(got.type, MSG_ok);
    msg_clear(&got);
}

/* A call that got its reply serves the next request on the same socket
 * with a new id; a late reply to the old id is dropped, not taken for the
 * new request's; a canceled call, one that never got a reply, and one
 * whose peer went away are closed, not reused. */
static void test_reuse(const char *ep)
{
    gw_call_limit_t l;
    gw_call_limit_init(&l, 16);
    zsock_t *peer = zsock_new_router(ep);
    CHECK(peer != NULL);
    cr_status_t st;
    cr_err_t err;
    gw_call_t *c = NULL;
    CHECK_EQ_INT(gw_call_open(&l, ep, "scheduler", 2000, &c, &err), CR_OK);
    (void)st;
    round_trip(c, peer);
    char old_id[MSG_ID_MAX + 1];
    snprintf(old_id, sizeof old_id, "%s", gw_call_id(c));
    gw_call_t *was = c;
    gw_call_destroy(&c);
    CHECK_EQ_INT(atomic_load(&l.open), 1); /* idle, still counted */
    CHECK_EQ_INT(l.n_pool, 1);

    /* Reused: the same call, a new id. */
    c = open_at(&l, ep, &st);
    CHECK(c == was);
    CHECK_EQ_INT((int)atomic_load(&l.reused), 1);
    CHECK(strcmp(gw_call_id(c), old_id) != 0);
    /* The peer's late reply to the old request, then the new one's. */
    msg_t m, late, got;
    msg_init(&m, MSG_ping, NULL);
    CHECK_EQ_INT(gw_call_send(c, &m, &err), CR_OK);
    zframe_t *who = NULL;
    CHECK_EQ_INT(bus_recv(peer, 2000, &m, &who, &err), CR_OK);
    msg_init(&late, MSG_error, old_id);
    late.u.error.status = CR_E_INTERNAL;
    late.u.error.has_status = true;
    late.u.error.message = "late";
    late.u.error.has_message = true;
    CHECK_EQ_INT(bus_send_to(peer, who, &late, &err), CR_OK);
    msg_t reply;
    msg_init(&reply, MSG_ok, m.id);
    CHECK_EQ_INT(bus_send_to(peer, who, &reply, &err), CR_OK);
    msg_clear(&m);
    zframe_destroy(&who);
    gw_wait_t w = {.idle_timeout_ms = 2000};
    CHECK_EQ_INT(gw_call_recv(c, &w, &got, &err), CR_OK);
    CHECK_EQ_INT(got.type, MSG_ok);
    msg_clear(&got);

    /* Canceled: closed. */
    gw_call_cancel(c);
    gw_call_destroy(&c);
    CHECK_EQ_INT(l.n_pool, 0);
    CHECK_EQ_INT(atomic_load(&l.open), 0);
    msg_t cancel;
    CHECK_EQ_INT(bus_recv(peer, 2000, &cancel, NULL, &err), CR_OK);
    CHECK_EQ_INT(cancel.type, MSG_cancel);
    msg_clear(&cancel);

    /* Sent but never answered: closed. */
    c = open_at(&l, ep, &st);
    CHECK(c != NULL);
    msg_init(&m, MSG_ping, NULL);
    CHECK_EQ_INT(gw_call_send(c, &m, &err), CR_OK);
    gw_call_destroy(&c);
    CHECK_EQ_INT(l.n_pool, 0);
    CHECK_EQ_INT(atomic_load(&l.open), 0);
    msg_t dropped;
    CHECK_EQ_INT(bus_recv(peer, 2000, &dropped, NULL, &err), CR_OK);
    msg_clear(&dropped);

    /* The peer restarts while the call is idle. The monitor's word of the
     * drop may come before the next open (the call is closed and a fresh
     * one reaches the new peer) or after it (the reused call sends into
     * the dead connection, sees the drop, and sends again on a new
     * connection): either way the request reaches the new peer. */
    c = open_at(&l, ep, &st);
    round_trip(c, peer);
    was = c;
    gw_call_destroy(&c);
    CHECK_EQ_INT(l.n_pool, 1);
    peer = peer_restart(&peer, ep);
    c = open_at(&l, ep, &st);
    CHECK(c != NULL);
    answerer_t a;
    answer_start(&a, peer, MSG_ok);
    msg_init(&m, MSG_ping, NULL);
    CHECK_EQ_INT(gw_call_send(c, &m, &err), CR_OK);
    CHECK_EQ_INT(gw_call_recv(c, &w, &got, &err), CR_OK);
    CHECK_EQ_INT(got.type, MSG_ok);
    msg_clear(&got);
    pthread_join(a.th, NULL);
    CHECK_EQ_STR(a.id, gw_call_id(c));
    gw_call_destroy(&c);
    CHECK_EQ_INT(l.n_pool, 1);
    CHECK_EQ_INT(atomic_load(&l.open), 1);

    /* The same, made certain: the reused call's request reaches the peer,
     * which exits without reading it (as one that died at that moment);
     * the drop sends it again, once, to the peer that takes its place. */
    c = open_at(&l, ep, &st);
    CHECK(c != NULL);
    msg_init(&m, MSG_ping, NULL);
    CHECK_EQ_INT(gw_call_send(c, &m, &err), CR_OK);
    CHECK(peer_readable(peer));
    peer = peer_restart(&peer, ep);
    answer_start(&a, peer, MSG_ok);
    CHECK_EQ_INT(gw_call_recv(c, &w, &got, &err), CR_OK);
    CHECK_EQ_INT(got.type, MSG_ok);
    msg_clear(&got);
    pthread_join(a.th, NULL);
    CHECK_EQ_STR(a.id, gw_call_id(c));
    gw_call_destroy(&c);

    /* But once something of this use came back, the connection was alive
     * after the request left: a drop then is the peer going down with the
     * request, and the wait ends "unavailable" (nothing is sent twice). */
    c = open_at(&l, ep, &st);
    CHECK(c != NULL && atomic_load(&l.reused) >= 3);
    msg_init(&m, MSG_ping, NULL);
    CHECK_EQ_INT(gw_call_send(c, &m, &err), CR_OK);
    char id[MSG_ID_MAX + 1];
    peer_answer(peer, MSG_progress, id);
    CHECK_EQ_INT(gw_call_recv(c, &w, &got, &err), CR_OK);
    CHECK_EQ_INT(got.type, MSG_progress);
    msg_clear(&got);
    peer = peer_restart(&peer, ep);
    CHECK_EQ_INT(gw_call_recv(c, &w, &got, &err), CR_E_UNAVAILABLE);
    gw_call_destroy(&c);
    CHECK_EQ_INT(l.n_pool, 0);
    CHECK_EQ_INT(atomic_load(&l.open), 0);
    msg_t stray;
    CHECK_EQ_INT(bus_recv(peer, 200, &stray, NULL, &err), CR_E_TIMEOUT);

    /* A fresh call (not reused) is not sent twice either. */
    CHECK_EQ_INT(gw_call_open(&l, ep, "scheduler", 2000, &c, &err), CR_OK);
    msg_init(&m, MSG_ping, NULL);
    CHECK_EQ_INT(gw_call_send(c, &m, &err), CR_OK);
    CHECK(peer_readable(peer));
    peer = peer_restart(&peer, ep);
    CHECK_EQ_INT(gw_call_recv(c, &w, &got, &err), CR_E_UNAVAILABLE);
    gw_call_destroy(&c);
    CHECK_EQ_INT(bus_recv(peer, 200, &stray, NULL, &err), CR_E_TIMEOUT);
    zsock_destroy(&peer);

    /* Idle calls are closed by the sweep once idle long enough: a call
     * just put back stays for a minute's limit, goes for a zero one. */
    peer = zsock_new_router(ep);
    CHECK(peer != NULL);
    c = open_at(&l, ep, &st);
    round_trip(c, peer);
    gw_call_destroy(&c);
    int pooled = l.n_pool;
    CHECK(pooled >= 1);
    CHECK_EQ_INT(gw_call_limit_sweep(&l, 60000), pooled);
    CHECK_EQ_INT(atomic_load(&l.open), pooled);
    CHECK_EQ_INT(gw_call_limit_sweep(&l, 0), 0);
    CHECK_EQ_INT(l.n_pool, 0);
    CHECK_EQ_INT(atomic_load(&l.open), 0);
    zsock_destroy(&peer);

    gw_call_limit_fini(&l);
}

/* ---- the abort callback (issue 18: one poll of the client's socket a
 * token was the gateway's largest cost per streamed token) ---- */

typedef struct aborts {
    int calls;
    bool gone; /* what the callback answers */
} aborts_t;

static bool count_abort(void *arg)
{
    aborts_t *a = arg;
    a->calls++;
    return a->gone;
}

static int64_t now_ms(void)
{
    return zclock_mono();
}

/* The peer sends n chunks for the request it receives. */
static void peer_stream(zsock_t *peer, int n)
{
    msg_t m;
    zframe_t *who = NULL;
    cr_err_t err;
    CHECK_EQ_INT(bus_recv(peer, 2000, &m, &who, &err), CR_OK);
    for (int i = 0; i < n; i++) {
        msg_t chunk;
        msg_init(&chunk, MSG_chunk, m.id);
        chunk.u.chunk.response = "x";
        chunk.u.chunk.has_response = true;
        CHECK_EQ_INT(bus_send_to(peer, who, &chunk, &err), CR_OK);
    }
    msg_clear(&m);
    zframe_destroy(&who);
}

/* While replies flow, the callback runs on the first wait and then at
 * most once a GW_CALL_SLICE_MS, not once a reply; a client that is gone
 * is still seen, within a slice. */
static void test_abort_checks(const char *ep)
{
    enum { N = 300 };
    zsock_t *peer = zsock_new_router(ep);
    CHECK(peer != NULL);
    cr_status_t st;
    gw_call_t *c = open_at(NULL, ep, &st);
    CHECK_EQ_INT(st, CR_OK);
    msg_t m, got;
    msg_init(&m, MSG_ping, NULL);
    cr_err_t err;
    CHECK_EQ_INT(gw_call_send(c, &m, &err), CR_OK);
    peer_stream(peer, N);
    aborts_t a = {0, false};
    gw_wait_t w = {.idle_timeout_ms = 5000, .abort_fn = count_abort, .abort_arg = &a};
    int64_t t0 = now_ms();
    for (int i = 0; i < N; i++) {
        CHECK_EQ_INT(gw_call_recv(c, &w, &got, &err), CR_OK);
        CHECK_EQ_INT(got.type, MSG_chunk);
        msg_clear(&got);
    }
    int64_t slices = (now_ms() - t0) / GW_CALL_SLICE_MS;
    CHECK(a.calls >= 1); /* the first wait asks at once */
    CHECK_MSG(a.calls <= 1 + slices + 1, "%d abort checks for %d replies in %lld slices",
              a.calls, N, (long long)slices);

    /* The client goes after a few replies: the wait ends canceled within
     * a slice, whether replies keep coming or have run out. */
    gw_call_destroy(&c);
    c = open_at(NULL, ep, &st);
    CHECK_EQ_INT(st, CR_OK);
    msg_init(&m, MSG_ping, NULL);
    CHECK_EQ_INT(gw_call_send(c, &m, &err), CR_OK);
    peer_stream(peer, N);
    a.gone = false;
    int ok = 0;
    for (int i = 0; i <= N; i++) {
        if (i == 10)
            a.gone = true;
        st = gw_call_recv(c, &w, &got, &err);
        msg_clear(&got);
        if (st != CR_OK)
            break;
        ok++;
    }
    CHECK_MSG(ok >= 10, "only %d replies before the abort", ok);
    CHECK_EQ_INT(st, CR_E_CANCELED);
    gw_call_destroy(&c);
    zsock_destroy(&peer);
}

int main(void)
{
    raise_nofile();
    /* First: the table's size is fixed by the first socket. */
    test_many_calls();
    char dir[] = "/tmp/test-gateway-call-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char ep[300];
    snprintf(ep, sizeof ep, "ipc://%s/sched.sock", dir);
    test_reuse(ep);
    test_abort_checks(ep);
    char path[300];
    snprintf(path, sizeof path, "%s/sched.sock", dir);
    unlink(path);
    rmdir(dir);
    return check_finish("gateway_call");
}
