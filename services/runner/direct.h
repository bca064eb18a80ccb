/* direct.h: a runner's direct replies to gateways (see `route` in
 * proto/messages.def).
 *
 * The runner listens on a Unix socket of its own (--direct unix://PATH,
 * proto/wire.h: no ZeroMQ, so no I/O thread wakes on either side for a
 * token). A gateway whose request the scheduler routed here connects,
 * one connection per request, and says `attach` with the request id; from
 * then on that request's chunks are written to that connection by the
 * runner's loop itself, not sent through the scheduler. A socket that
 * cannot take a chunk (its HTTP client reads slower than the model
 * writes) keeps it, and the ones after it, in the connection's queue of
 * at most CORRAL_STREAM_BUFFER bytes, retried every RN_DIRECT_FLUSH_MS;
 * past that the request ends. The request's done or error still goes
 * through the scheduler, carrying how many chunks went direct. Once its
 * request ended and its queue is written, the runner closes the
 * connection: the gateway reads what came, then the end.
 *
 * A request that may go direct is pending until its attach comes (it may
 * come before the request itself: kept for a while). Its chunks wait
 * meanwhile, and so does its last reply if it ends first (the gateway was
 * told to attach before the runner had the request: it comes in well
 * under a millisecond, a prompt takes longer). An attach that has not
 * come within RN_ATTACH_WAIT_MS sends them through the scheduler instead,
 * as if the request had never been routed. */
#ifndef RN_DIRECT_H
#define RN_DIRECT_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"

#include <czmq.h>

#define RN_ATTACH_WAIT_MS 1000 /* a pending request's chunks wait this long */
#define RN_ATTACH_KEEP_MS 10000 /* an attach for a request not seen yet */
#define RN_DIRECT_FLUSH_MS 5   /* retry of queues behind a full gateway */

typedef struct rn_direct rn_direct_t;

typedef enum rn_route {
    RN_ROUTE_NONE,     /* replies through the scheduler */
    RN_ROUTE_PENDING,  /* routed; its attach has not come: chunks wait */
    RN_ROUTE_ATTACHED, /* chunks go to the gateway's connection */
} rn_route_t;

typedef struct rn_conn rn_conn_t;

/* One request's side of it (lives in the runner's slot record). */
typedef struct rn_direct_req {
    char id[MSG_ID_MAX + 1];
    rn_route_t route;
    rn_conn_t *conn;    /* the gateway's connection (the rn_direct_t's;
                           kept open while a request holds it) */
    zlist_t *held;      /* encoded chunks waiting for the attach (owned) */
    int64_t since_ms;   /* when it became pending */
    int64_t chunks;     /* chunks given to the direct connection */
    bool started;       /* `started` went to the scheduler */
    bool gone;          /* the gateway's connection is gone */
    bool over;          /* its queue passed the bound (a slow reader) */
} rn_direct_req_t;

/* Listens on endpoint (unix://PATH). to_sched (borrowed) is
 * the runner's DEALER to the scheduler, for `started` and for chunks that
 * fall back. */
cr_status_t rn_direct_new(const char *endpoint, zsock_t *to_sched, rn_direct_t **out,
                          cr_err_t *err);
/* Gives what waits up to linger_ms to leave, then closes. */
void rn_direct_destroy(rn_direct_t **self_p, int linger_ms);

/* A descriptor that is readable when a connection or an attach came, or
 * a gateway went away (the caller then calls rn_direct_read). */
int rn_direct_fd(const rn_direct_t *d);
const char *rn_direct_endpoint(const rn_direct_t *d);
/* How many messages this side has sent on to_sched so far: a caller that
 * polls to_sched marks it after a change (proto/bus_poll.h: a send may
 * take the command that would wake the poller). 0 for NULL. */
int64_t rn_direct_sched_sends(const rn_direct_t *d);
/* The per-request bound (CORRAL_STREAM_BUFFER, default 16 MiB). */
int64_t rn_direct_max_bytes(const rn_direct_t *d);

/* A request starts: pending when routed (the scheduler set `direct`),
 * attached at once when its attach already came. */
void rn_direct_begin(rn_direct_t *d, rn_direct_req_t *q, const char *id, bool routed);

/* Sends one of q's chunks by its route. False when it cannot go (too large
 * to encode, the gateway gone, over the bound: q->gone / q->over say) and
 * the request must end. */
bool rn_direct_chunk(rn_direct_t *d, rn_direct_req_t *q, const msg_t *m);

/* q ends with *last (its done or error, for the scheduler). Attached: sets
 * last's direct_chunks, and the caller sends it. Never routed: the caller
 * sends it as it is. Pending: a copy waits with the held chunks for the
 * attach (then it gets its direct_chunks) or RN_ATTACH_WAIT_MS (then it
 * follows the chunks through the scheduler), and true says the caller
 * must not send it. q is free for another request after. */
bool rn_direct_end(rn_direct_t *d, rn_direct_req_t *q, msg_t *last);

/* Takes new connections and reads every waiting attach; finds each one's
 * request among reqs[0..n) (busy or not: the caller's records, pending
 * ones only attach) and the ended ones that wait for theirs. A closed
 * connection marks its request gone. How many attaches were read. */
int rn_direct_read(rn_direct_t *d, rn_direct_req_t *const *reqs, int n);

/* The gateway cannot reach this socket for request id (`no_route`): if
 * it waits for its attach among reqs[0..n) or has ended waiting, its
 * replies go through the scheduler now. */
void rn_direct_unroute(rn_direct_t *d, rn_direct_req_t *const *reqs, int n, const char *id);

/* Pending requests (running or ended) past RN_ATTACH_WAIT_MS fall back;
 * queues behind a full socket are retried (one whose gateway is gone
 * marks its request gone); connections done with are closed. True while
 * anything waits (the caller polls every RN_DIRECT_FLUSH_MS). */
bool rn_direct_tick(rn_direct_t *d, rn_direct_req_t *const *reqs, int n);

#endif
