/* exchange.h: one request, one reply, for every handler.
 *
 * The native and OpenAI routes, /metrics and tokenize send one message to
 * the scheduler or the registry and read one answer. These helpers are the
 * one place that does it, with one pair of waits (inference: no fixed limit but
 * liveness pings; control: cfg.reply_timeout_ms), and leave the reply's
 * shape (native or OpenAI errors) to the caller. */
#ifndef GW_EXCHANGE_H
#define GW_EXCHANGE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/gateway/call.h"
#include "services/gateway/http.h"

/* Waits for control requests (a bounded silence) and for inference ones
 * (pings). Both abort when the client goes or the server stops. */
gw_wait_t gw_wait_control(gw_req_t *r);
gw_wait_t gw_wait_inference(gw_req_t *r);

/* Opens a call to peer ("scheduler" or "registry") and sends m. On CR_OK
 * the caller owns *call (gw_call_destroy); else err says why. */
cr_status_t gw_call_start(gw_req_t *r, const char *peer, msg_t *m,
                          gw_call_t **call, cr_err_t *err);

/* Waits for call's one reply. On CR_OK *reply is a message that is not
 * `error` (caller msg_clears it). An `error` reply becomes its status (0:
 * CR_E_INTERNAL) and message, with *from_peer (may be NULL) set; any other
 * failure is the wait's (CR_E_CANCELED: the client went away; a timeout;
 * the bus), and the request is canceled on the bus. */
cr_status_t gw_call_await(gw_call_t *call, const gw_wait_t *w, msg_t *reply,
                          bool *from_peer, cr_err_t *err);

/* Sends m and waits for one reply (gw_call_start, then gw_call_await). On CR_OK *reply is a message that is
 * not `error` (caller msg_clears it). An `error` reply becomes its status
 * and message; CR_E_CANCELED means the client went away (nobody to
 * answer). The request is canceled on the bus when the wait fails. */
cr_status_t gw_exchange(gw_req_t *r, const char *peer, msg_t *m,
                        const gw_wait_t *w, msg_t *reply, cr_err_t *err);

#endif
