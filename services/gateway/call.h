/* call.h: one bus exchange on behalf of one HTTP request.
 *
 * Each HTTP request that needs the scheduler or the registry opens its own
 * DEALER socket (so a request can block on it in its connection thread),
 * sends one message under a fresh request id and reads the replies that
 * carry that id until a terminal one. This module owns the socket, the
 * liveness rules and the timeouts; it does not know what the messages mean.
 *
 * Liveness, so that a dead peer never hangs a client:
 *   - the socket is ZMQ_IMMEDIATE: a send with no connected peer fails
 *     after connect_timeout_ms (or at once when the connect is refused)
 *     with CR_E_UNAVAILABLE "<peer> unavailable";
 *   - a socket monitor reports a dropped connection once the request was
 *     sent: the peer died or restarted, the request is lost, and the wait
 *     ends with CR_E_UNAVAILABLE. Except once: a call reused from the pool
 *     whose connection drops before anything of this use came back may
 *     have sent into a connection that was already gone, so the request
 *     goes again on a new connection (with the refused-connect grace);
 *   - with ping_after_ms set, silence that long sends a `ping` under the
 *     request id; no reply at all within another ping_after_ms is
 *     CR_E_UNAVAILABLE (the scheduler answers `pong`, which is consumed);
 *   - idle_timeout_ms bounds the silence between two replies.
 * A wait also polls an abort callback every GW_CALL_SLICE_MS (the client
 * went away, the server is stopping) and ends with CR_E_CANCELED. */
#ifndef GW_CALL_H
#define GW_CALL_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"

#include <pthread.h>
#include <stdatomic.h>

#define GW_CALL_SLICE_MS 100

/* ZeroMQ sockets and descriptors one open call holds: its DEALER (a
 * mailbox and the connection), the PAIR libzmq's monitor writes to and the
 * PAIR we read it from (a mailbox each). */
#define GW_CALL_SOCKETS 3
#define GW_CALL_FDS 4

typedef struct gw_call gw_call_t;

/* Idle calls kept for reuse, at most, and for how long: a burst's calls
 * are closed once it is over (each holds four descriptors here and a
 * connection at the peer). */
#define GW_CALL_POOL_MAX 128
#define GW_CALL_IDLE_MS 10000

/* How many calls may be open at once. libzmq's context allows 1,023
 * sockets unless told otherwise, and CZMQ aborts the process when a socket
 * cannot be made, so 341 requests in flight used to crash the gateway:
 * the socket table is sized for the calls, and a call past the budget is
 * refused (503) instead.
 *
 * It also keeps calls that ended cleanly, connected, for the next request
 * to the same endpoint: a fresh call costs three sockets, a monitor and a
 * connection handshake with the peer (on both sides), which made most of
 * the gateway's CPU time when it answered hundreds of 503s a second, and
 * a few hundred microseconds of every request. Idle calls count as open. */
typedef struct gw_call_limit {
    atomic_int open; /* calls open now, the idle ones included */
    int max;         /* budget */
    pthread_mutex_t pool_lock;
    gw_call_t *pool[GW_CALL_POOL_MAX]; /* idle calls, newest last */
    int n_pool;
    atomic_long reused; /* calls taken from the pool (for tests, metrics) */
} gw_call_limit_t;

/* Sizes ZeroMQ's socket table for want_calls calls at once (within what
 * libzmq and the open-files limit allow: the budget may come out lower)
 * and initializes CZMQ's context. Call once, before any thread makes a
 * socket: CZMQ's lazy initialization is not thread-safe, and the table's
 * size is fixed by the first socket. */
void gw_call_limit_init(gw_call_limit_t *l, unsigned want_calls);

/* Closes the idle calls (once no request runs: after the HTTP daemon
 * stopped). The limit may be initialized again. */
void gw_call_limit_fini(gw_call_limit_t *l);

/* Closes the calls idle for idle_ms or longer; returns how many are left
 * in the pool. Any thread (the gateway's main thread, every second). */
int gw_call_limit_sweep(gw_call_limit_t *l, int64_t idle_ms);

/* True when the waiting request should give up (client gone, stopping). */
typedef bool (*gw_abort_fn)(void *arg);

typedef struct gw_wait {
    int idle_timeout_ms; /* max silence between replies; <= 0 = no limit */
    int ping_after_ms;   /* silence before a liveness ping; 0 = never */
    gw_abort_fn abort_fn; /* may be NULL */
    void *abort_arg;
} gw_wait_t;

/* Opens a DEALER to endpoint (borrowed), or takes an idle one of limit's
 * to the same endpoint whose connection did not drop (replies still
 * queued on it for an earlier request are discarded). peer names the
 * service in error messages ("scheduler", "registry"). A fresh request id
 * is drawn. The call counts against limit (borrowed, outlives the call;
 * NULL: no limit and no reuse) until destroyed. Caller owns the call;
 * free with gw_call_destroy.
 * CR_E_BUSY "server busy ..." past the limit's budget; CR_E_NOMEM /
 * CR_E_IO on failure (err says why). */
cr_status_t gw_call_open(gw_call_limit_t *limit, const char *endpoint, const char *peer,
                         int connect_timeout_ms, gw_call_t **out,
                         cr_err_t *err);

/* The request id every message of this call carries. */
const char *gw_call_id(const gw_call_t *c);

/* Sends m with this call's id (m->id is overwritten). CR_E_UNAVAILABLE
 * "<peer> unavailable" when no peer takes it; other codes if m does not
 * encode. */
cr_status_t gw_call_send(gw_call_t *c, msg_t *m, cr_err_t *err);

/* Waits for the next reply to this call (replies with other ids are
 * dropped, `pong` is consumed). On CR_OK *out holds the message (caller
 * owns; msg_clear). CR_E_UNAVAILABLE when the peer is silent or gone,
 * CR_E_CANCELED when w->abort_fn said so. */
cr_status_t gw_call_recv(gw_call_t *c, const gw_wait_t *w, msg_t *out,
                         cr_err_t *err);

/* Liveness of the peer alone: sends `ping` under the call's id and waits
 * up to timeout_ms for its `pong`. CR_OK when it came; CR_E_UNAVAILABLE
 * "<peer> unavailable" when the peer cannot be reached or stays silent
 * (a reply of another kind is CR_E_PROTO). */
cr_status_t gw_call_ping(gw_call_t *c, int timeout_ms, cr_err_t *err);

/* Best effort: tells the peer to stop this request (`cancel` with the
 * call's id) and lets the socket linger so the message leaves. */
void gw_call_cancel(gw_call_t *c);

/* Ends the call. One whose last wait got a reply, that was not canceled
 * and whose connection stands goes back to its limit's pool (when there
 * is room): a later reply to its request id is dropped as a stray by the
 * next user. Others close their sockets. Accepts NULL. */
void gw_call_destroy(gw_call_t **self_p);

#endif
