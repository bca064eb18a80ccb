/* relay.c: the scheduler's per-token relay cost, runner -> gateway.
 *
 * A runner DEALER sends chunk frames to a ROUTER (the scheduler's runners
 * socket), which hands each to a gateway DEALER through a second ROUTER
 * (the scheduler's front), all over inproc in one thread. Two ways:
 *   decode: bus_recv (full msg_decode) then bus_send_to (msg_encode), what
 *           the scheduler did for every chunk before it relayed frames;
 *   opaque: bus_recv_frame, msg_peek (header only) and bus_send_frame_to,
 *           what sch_runner_frame does now.
 * Only the relay's receive-and-forward is timed; the runner's sends and
 * the gateway's reads run between batches. Prints ns per token, the median
 * of RUNS runs, for each way.
 *
 * Usage: bench-relay [tokens per run (20000)] [runs (9)] */
#include "lib/prelude.h"
#include "bench/stats.h"
#include "proto/bus.h"

#define BATCH 500 /* frames in flight at once */

typedef struct rig {
    zsock_t *runner, *runners, *front, *gateway;
    zframe_t *gw_ident;
    zframe_t *chunk; /* one encoded chunk frame */
} rig_t;

static int rig_open(rig_t *g)
{
    memset(g, 0, sizeof *g);
    g->runners = zsock_new(ZMQ_ROUTER);
    g->front = zsock_new(ZMQ_ROUTER);
    g->runner = zsock_new(ZMQ_DEALER);
    g->gateway = zsock_new(ZMQ_DEALER);
    if (!g->runners || !g->front || !g->runner || !g->gateway)
        return -1;
    /* No high-water marks: a ROUTER drops what a full pipe cannot take,
     * and the bench would wait for it forever. */
    zsock_t *all[] = {g->runners, g->front, g->runner, g->gateway};
    for (size_t i = 0; i < CR_ARRAY_LEN(all); i++) {
        zsock_set_sndhwm(all[i], 0);
        zsock_set_rcvhwm(all[i], 0);
    }
    if (zsock_bind(g->runners, "inproc://bench-runners") < 0 ||
        zsock_bind(g->front, "inproc://bench-front") < 0)
        return -1;
    zsock_set_identity(g->runner, "runner-1");
    zsock_set_identity(g->gateway, "gw");
    if (zsock_connect(g->runner, "inproc://bench-runners") < 0 ||
        zsock_connect(g->gateway, "inproc://bench-front") < 0)
        return -1;
    /* The gateway speaks first, so the front knows its identity. */
    msg_t m;
    msg_init(&m, MSG_ping, "x");
    if (bus_send(g->gateway, &m, NULL))
        return -1;
    zframe_t *ident = NULL;
    msg_t got;
    if (bus_recv(g->front, 1000, &got, &ident, NULL))
        return -1;
    msg_clear(&got);
    g->gw_ident = ident;
    /* A typical chunk: one token of text for a 32-hex request id. */
    msg_init(&m, MSG_chunk, "0123456789abcdef0123456789abcdef");
    m.u.chunk.response = " the";
    m.u.chunk.has_response = true;
    cr_buf_t b;
    cr_buf_init(&b, 1 << 16);
    if (msg_encode(&m, &b, NULL))
        return -1;
    g->chunk = zframe_new(b.data, b.len);
    cr_buf_free(&b);
    return 0;
}

static void rig_close(rig_t *g)
{
    zframe_destroy(&g->chunk);
    zframe_destroy(&g->gw_ident);
    zsock_destroy(&g->runner);
    zsock_destroy(&g->gateway);
    zsock_destroy(&g->runners);
    zsock_destroy(&g->front);
}

static int relay_decode(rig_t *g)
{
    msg_t m;
    zframe_t *ident = NULL;
    if (bus_recv(g->runners, -1, &m, &ident, NULL))
        return -1;
    zframe_destroy(&ident);
    cr_status_t st = bus_send_to(g->front, g->gw_ident, &m, NULL);
    msg_clear(&m);
    return st ? -1 : 0;
}

static int relay_opaque(rig_t *g)
{
    zframe_t *body = NULL, *ident = NULL;
    if (bus_recv_frame(g->runners, -1, &body, &ident, NULL))
        return -1;
    zframe_destroy(&ident);
    msg_t h;
    if (msg_peek(zframe_data(body), zframe_size(body), &h, NULL) ||
        h.type != MSG_chunk) {
        zframe_destroy(&body);
        return -1;
    }
    return bus_send_frame_to(g->front, g->gw_ident, &body, "chunk", NULL)
               ? -1
               : 0;
}

/* ns per token over one run of n tokens. */
static double run(rig_t *g, int (*relay)(rig_t *), int n)
{
    double relay_s = 0;
    for (int done = 0; done < n; done += BATCH) {
        int k = CR_MIN(BATCH, n - done);
        for (int i = 0; i < k; i++) {
            zframe_t *f = zframe_dup(g->chunk);
            zframe_send(&f, g->runner, 0);
        }
        double t0 = bench_now_s();
        for (int i = 0; i < k; i++)
            if (relay(g))
                return -1;
        relay_s += bench_now_s() - t0;
        for (int i = 0; i < k; i++) {
            zframe_t *f = zframe_recv(g->gateway);
            zframe_destroy(&f);
        }
    }
    return relay_s * 1e9 / n;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 20000;
    int runs = argc > 2 ? atoi(argv[2]) : 9;
    if (n <= 0 || runs <= 0 || runs > BENCH_MEDIAN_MAX) {
        fprintf(stderr, "usage: bench-relay [tokens] [runs <= %d]\n",
                BENCH_MEDIAN_MAX);
        return 2;
    }
    rig_t g;
    if (rig_open(&g)) {
        fprintf(stderr, "bench-relay: cannot set up the sockets\n");
        return 1;
    }
    static const struct {
        const char *name;
        int (*fn)(rig_t *);
    } ways[] = {{"decode", relay_decode}, {"opaque", relay_opaque}};
    double ns[2][BENCH_MEDIAN_MAX];
    for (int r = 0; r < runs; r++) /* interleaved, so drift hits both */
        for (int w = 0; w < 2; w++)
            if ((ns[w][r] = run(&g, ways[w].fn, n)) < 0) {
                fprintf(stderr, "bench-relay: %s failed\n", ways[w].name);
                return 1;
            }
    for (int w = 0; w < 2; w++)
        printf("relay %-6s %8.0f ns/token (median of %d runs of %d)\n",
               ways[w].name, bench_median(ns[w], runs), runs, n);
    rig_close(&g);
    return 0;
}
