/* peers.h: which bus peer (a gateway's DEALER, one per HTTP request) owns
 * each upload and job, and when it was last asked whether it is still
 * there.
 *
 * A gateway killed mid-request sends no `cancel`: its connection just
 * goes. The registry's ROUTER (ROUTER_MANDATORY) refuses a send to a gone
 * peer at once, so the server sends each owner a `pong` now and then
 * (gateways skip pongs) and drops what a gone peer owned: the scheduler's
 * way with its requests (services/scheduler/sched.c, probe_clients). This
 * table only remembers owners and probe times; the server sends. */
#ifndef REG_PEERS_H
#define REG_PEERS_H

#include "lib/prelude.h"
#include "lib/status.h"

#define REG_PEER_ID_MAX 256 /* bytes of a ZMQ routing id (zmq's own cap) */

typedef struct reg_peers reg_peers_t;

/* Caller owns; free with reg_peers_destroy. NULL if out of memory. */
reg_peers_t *reg_peers_new(void);
void reg_peers_destroy(reg_peers_t **self_p);

/* Notes that request id is owned by peer identity (len bytes, copied; 1 to
 * REG_PEER_ID_MAX), first probed every_ms after now_ms. A request already
 * noted keeps its entry. CR_E_INVALID for an empty or overlong identity,
 * CR_E_NOMEM. */
cr_status_t reg_peers_note(reg_peers_t *p, const char *id, const void *identity,
                           size_t len, int64_t now_ms);

/* Requests noted. */
size_t reg_peers_count(const reg_peers_t *p);

/* Asks probe(ctx, id, identity, len) about every request whose last probe
 * is every_ms old at now_ms; probe returns false to forget the request
 * (it is over, or its peer is gone). */
typedef bool (*reg_peer_probe_fn)(void *ctx, const char *id,
                                  const void *identity, size_t len);
void reg_peers_probe(reg_peers_t *p, int64_t now_ms, int64_t every_ms,
                     reg_peer_probe_fn probe, void *ctx);

#endif
