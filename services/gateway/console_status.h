/* console_status.h: GET /api/console/status, the web console's picture of
 * the server in one JSON document (docs/api.md "Console status"): the
 * loaded models as /api/ps shows them plus each one's part on each GPU,
 * every host (this machine, then each corral-node) with its system memory
 * and GPUs (total, held by corral's runners, left to place models in),
 * and the queue (requests waiting, per model). Fed by the scheduler's
 * `status` message; answers as /api/ps does when the scheduler does not. */
#ifndef GW_CONSOLE_STATUS_H
#define GW_CONSOLE_STATUS_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/gateway/http.h"

/* The JSON of r into b. CR_E_NOMEM / CR_E_TOO_LARGE when b cannot hold
 * it. */
cr_status_t gw_render_console_status(cr_buf_t *b,
                                     const msg_status_reply_body_t *r);

/* The route's handler (console.c lists it). */
enum MHD_Result gw_console_status(gw_req_t *r);

#endif
