/* test_direct_replies.c: a stream's chunks from the runner straight to the
 * gateway (issue 18; `route` in proto/messages.def).
 *
 * The gateway's real call (services/gateway/call.c) and the runner's real
 * direct socket (services/runner/direct.c); the test plays the scheduler
 * on both sides: a ROUTER the call sends its request to, and a ROUTER the
 * runner's DEALER speaks to. What must hold:
 *   - a request's chunks held while its attach has not come go to the
 *     gateway, in order, once it comes; later ones go at once; the
 *     scheduler hears `started` before the first and no chunk;
 *   - an attach that comes before the request attaches it at its start;
 *   - the last reply, sent by the scheduler with direct_chunks before the
 *     chunks have come, reaches the caller after them;
 *   - the call and its side connection are reused by the next request;
 *   - no attach within RN_ATTACH_WAIT_MS, or a request that ends first:
 *     the held chunks go through the scheduler, in order;
 *   - a reader that stops reading ends its request past the bound; a
 *     gateway that goes away is noticed;
 *   - a last reply counting chunks the runner's socket never delivered
 *     ends the wait with an error, not with a short answer. */
#include "lib/prelude.h"
#include "proto/bus.h"
#include "services/gateway/call.h"
#include "services/runner/direct.h"
#include "tests/unit/check.h"

#include <pthread.h>

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

/* The runner reads its direct socket once an attach is there. */
static void runner_read_attach(world_t *w, rn_direct_req_t *q)
{
    CHECK_MSG(readable(rn_direct_sock(w->direct), 2000), "no attach came");
    rn_direct_req_t *reqs[] = {q};
    rn_direct_read(w->direct, reqs, 1);
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
 * its start. The call and its side connection come from the pool. */
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
    CHECK_EQ_INT(atomic_load(&w->limit.reused) - reused, 2); /* the call and its side */
    gw_call_destroy(&r.call);
    zframe_destroy(&client);
}

/* No attach within RN_ATTACH_WAIT_MS (the gateway could not reach the
 * endpoint it was given): held chunks go through the scheduler, in order,
 * and so do later ones; the gateway takes them from there. */
static void test_no_attach_falls_back(world_t *w)
{
    reader_t r;
    char id[MSG_ID_MAX + 1];
    zframe_t *client = NULL;
    request(w, &r, id, &client, 0);
    char nowhere[400];
    snprintf(nowhere, sizeof nowhere, "ipc://%s/nobody.sock", dir_g);
    sched_route(w, client, id, nowhere);
    rn_direct_req_t q = {0};
    rn_direct_req_t *reqs[] = {&q};
    rn_direct_begin(w->direct, &q, id, true);
    CHECK(runner_says(w->direct, &q, "p"));
    CHECK(runner_says(w->direct, &q, "q"));
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
    int64_t t0 = zclock_mono();
    while (q.route == RN_ROUTE_PENDING && zclock_mono() - t0 < 5000) {
        rn_direct_tick(w->direct, reqs, 1);
        zclock_sleep(RN_DIRECT_FLUSH_MS);
    }
    CHECK_EQ_INT(q.route, RN_ROUTE_NONE);
    CHECK_MSG(zclock_mono() - t0 >= RN_ATTACH_WAIT_MS - 50, "fell back after %lld ms",
              (long long)(zclock_mono() - t0));
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
    zsock_t *gw = zsock_new_dealer(direct_ep);
    msg_t a;
    msg_init(&a, MSG_attach, "quick");
    CHECK_EQ_INT(bus_send(gw, &a, NULL), CR_OK);
    runner_read_attach(w, &q);
    /* the chunk on the attached connection, the done (1 direct) after */
    msg_t got;
    CHECK_EQ_INT(bus_recv(gw, 2000, &got, NULL, NULL), CR_OK);
    CHECK_EQ_STR(got.type == MSG_chunk ? got.u.chunk.response : "", "z");
    msg_clear(&got);
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

    /* Its late attach is dropped, not kept for a later request. */
    msg_init(&a, MSG_attach, "lone");
    CHECK_EQ_INT(bus_send(gw, &a, NULL), CR_OK);
    runner_read_attach(w, &q);
    rn_direct_begin(w->direct, &q, "lone", true);
    CHECK_EQ_INT(q.route, RN_ROUTE_PENDING);
    rn_direct_begin(w->direct, &q, "none", false); /* q, for the next check */

    /* One still waiting when its runner stops: through the scheduler. (A
     * runner of its own: the shared one's pooled gateway connections
     * would see it go, and no endpoint is ever bound twice.) */
    char ep[400];
    snprintf(ep, sizeof ep, "ipc://%s/runner-exit.sock", dir_g);
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
    zsock_destroy(&gw);
}

/* A reader that attached and stopped reading: its queue passes a small
 * bound and the request must end (q.over). One that went away: q.gone. */
static void test_slow_and_gone(world_t *w)
{
    setenv("CORRAL_STREAM_BUFFER", "64KiB", 1);
    char ep[400];
    snprintf(ep, sizeof ep, "ipc://%s/runner-small.sock", dir_g);
    rn_direct_t *small = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_direct_new(ep, w->to_sched, &small, &err), CR_OK);
    unsetenv("CORRAL_STREAM_BUFFER");
    if (!small)
        return;
    CHECK_EQ_INT(rn_direct_max_bytes(small), 64 << 10);
    /* The reader's queue is small; the runner's is zmq's 1,000 messages
     * (its socket was bound before), then the outbox's 16 chunks. */
    zsock_t *gw = zsock_new(ZMQ_DEALER);
    zsock_set_rcvhwm(gw, 4);
    CHECK_EQ_INT(zsock_connect(gw, "%s", ep), 0);
    msg_t a;
    msg_init(&a, MSG_attach, "slow");
    CHECK_EQ_INT(bus_send(gw, &a, NULL), CR_OK);
    rn_direct_req_t q = {0};
    rn_direct_req_t *reqs[] = {&q};
    rn_direct_begin(small, &q, "slow", true);
    CHECK_MSG(readable(rn_direct_sock(small), 2000), "no attach came");
    rn_direct_read(small, reqs, 1);
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

    /* Gone: the reader's connection closes; sends and retries see it. */
    rn_direct_begin(small, &q, "gone", true);
    msg_init(&a, MSG_attach, "gone");
    zsock_t *gw2 = zsock_new_dealer(ep);
    CHECK_EQ_INT(bus_send(gw2, &a, NULL), CR_OK);
    CHECK_MSG(readable(rn_direct_sock(small), 2000), "no attach came");
    rn_direct_read(small, reqs, 1);
    CHECK_EQ_INT(q.route, RN_ROUTE_ATTACHED);
    zsock_destroy(&gw2);
    chunk_msg(&c, "gone", "g");
    int64_t t0 = zclock_mono();
    while (!q.gone && zclock_mono() - t0 < 5000) {
        rn_direct_chunk(small, &q, &c);
        rn_direct_tick(small, reqs, 1);
        zclock_sleep(RN_DIRECT_FLUSH_MS);
    }
    CHECK(q.gone);
    CHECK(!rn_direct_chunk(small, &q, &c));
    last = done_msg("gone");
    rn_direct_end(small, &q, &last);
    CHECK_EQ_INT(sched_heard(w, 2000, NULL, 0), MSG_started);
    zsock_destroy(&gw);
    rn_direct_destroy(&small, 0);
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
    snprintf(direct_ep, sizeof direct_ep, "ipc://%s/runner-rn1.sock", dir_g);
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
