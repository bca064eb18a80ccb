/* server.h: the registry service object: one store, the uploads in
 * progress, and the dispatch of bus requests to operations.
 *
 * Requests come in as decoded messages (or raw frames) and every reply goes
 * out through a callback, so tests drive the server in-process; run() wires
 * the same dispatch to a ROUTER socket. Every reply carries the request's
 * id. A frame that does not decode is answered with an `error` (CR_E_PROTO)
 * and the server keeps serving. */
#ifndef REG_SERVER_H
#define REG_SERVER_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/registry/download.h"
#include "services/registry/store.h"

#include <czmq.h>

typedef struct reg_server reg_server_t;

/* Receives one reply (borrowed for the call). A failure is logged; the
 * request is not retried. */
typedef cr_status_t (*reg_reply_fn)(void *ctx, const msg_t *reply);

/* A server over the store at models_dir (created if missing). Caller owns;
 * free with reg_server_destroy. NULL on failure (err says why). */
reg_server_t *reg_server_new(const char *models_dir, cr_err_t *err);
void reg_server_destroy(reg_server_t **self_p);

/* The store (borrowed). */
reg_store_t *reg_server_store(reg_server_t *s);

/* Idle time after which a chunked upload is dropped (default 60 s). */
void reg_server_set_upload_timeout(reg_server_t *s, int64_t ms);

/* Uploads in progress. */
size_t reg_server_uploads(const reg_server_t *s);

/* Handles one request: create sends progress replies then ok or error;
 * cancel (of a chunked upload) drops that upload and sends nothing; every
 * other request sends exactly one reply. */
void reg_server_handle(reg_server_t *s, const msg_t *req, reg_reply_fn fn,
                       void *ctx);

/* Decodes one frame and handles it; a frame that does not decode gets an
 * error reply (CR_E_PROTO, with the frame's id when it had a readable one). */
void reg_server_handle_frame(reg_server_t *s, const void *data, size_t len,
                             reg_reply_fn fn, void *ctx);

/* Housekeeping at now_ms (monotonic): drops abandoned uploads; while
 * run() serves, asks the owner of each upload and job whether its
 * connection is still there (peers.h) and drops what a gone one owned. */
void reg_server_tick(reg_server_t *s, int64_t now_ms);

/* Pull, push and create with `quantize` run in job threads: reg_server_handle() starts them and
 * returns at once; their replies (progress..., ok or error) queue up until
 * run() forwards them or, in tests, reg_server_pump() hands the next one
 * to fn (false if none came within timeout_ms). */
bool reg_server_pump(reg_server_t *s, int timeout_ms, reg_reply_fn fn, void *ctx);

/* Pulls and pushes still running (finished ones are joined). */
size_t reg_server_jobs(reg_server_t *s);

/* Part sizes, retries and stall time of downloads (tests shrink them). */
void reg_server_set_dl_opts(reg_server_t *s, const reg_dl_opts_t *o);

/* Monotonic milliseconds, the clock tick() and uploads use. */
int64_t reg_server_now_ms(void);

/* Serves requests arriving on a bound ROUTER until zsys_interrupted is
 * set. Returns CR_OK on interruption. */
cr_status_t reg_server_run(reg_server_t *s, zsock_t *router, cr_err_t *err);

#endif
