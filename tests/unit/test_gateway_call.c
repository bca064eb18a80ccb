/* test_gateway_call.c: the gateway's budget of bus calls (call.h).
 *
 * bench-soak found it: each request in flight holds three ZeroMQ sockets,
 * libzmq's context allows 1,023 unless told otherwise, and CZMQ aborts
 * when a socket cannot be made, so about 341 requests at once crashed the
 * gateway (and its restarts, under the same load). gw_call_limit_init
 * sizes the socket table for the budget; a call past the budget is
 * CR_E_BUSY, not an abort. */
#include "lib/prelude.h"
#include "proto/bus.h"
#include "services/gateway/call.h"
#include "tests/unit/check.h"

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

static gw_call_t *open_call(gw_call_limit_t *l, cr_status_t *st)
{
    gw_call_t *c = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    *st = gw_call_open(l, ENDPOINT, "scheduler", 100, &c, &err);
    if (*st == CR_E_BUSY)
        CHECK_MSG(strstr(err.msg, "server busy") != NULL, "busy message: %s", err.msg);
    return c;
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
}

int main(void)
{
    raise_nofile();
    /* First: the table's size is fixed by the first socket. */
    test_many_calls();
    return check_finish("gateway_call");
}
