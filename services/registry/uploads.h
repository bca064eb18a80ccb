/* uploads.h: chunked blob uploads (POST /api/blobs/:digest as blob_put
 * pieces, see proto/messages.def).
 *
 * Pieces of one upload share a request id and arrive in order; each is
 * streamed into a blob writer (store.h) and acknowledged; the piece with
 * last=true verifies the digest and renames the blob into place. An upload
 * idle for longer than the timeout is dropped and its temp file removed.
 * Holds no sockets: the server feeds it pieces and a clock. */
#ifndef REG_UPLOADS_H
#define REG_UPLOADS_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/registry/store.h"

#define REG_UPLOADS_MAX 64                 /* uploads in progress at once */
#define REG_UPLOAD_TIMEOUT_MS (60 * 1000)  /* idle time before one is dropped */

typedef struct reg_uploads reg_uploads_t;

/* A table of uploads into s (borrowed; must outlive it), dropping those
 * idle for timeout_ms. Caller owns; free with reg_uploads_destroy (which
 * removes every temp file). NULL if out of memory. */
reg_uploads_t *reg_uploads_new(reg_store_t *s, int64_t timeout_ms);
void reg_uploads_destroy(reg_uploads_t **self_p);

/* Handles one piece of upload `id` at time now_ms (any monotonic clock).
 * On CR_OK: *done is false for an accepted middle piece, true after the
 * last piece, with *created true if a new blob was stored (false if it
 * already existed; its bytes are then read and dropped unverified, as
 * Ollama answers 200 at once). On error the upload is dropped: CR_E_INVALID
 * `invalid digest format`, `digest mismatch, expected "sha256:…", got
 * "sha256:…"`, an out-of-order offset or a digest that changed mid-upload;
 * CR_E_BUSY with REG_UPLOADS_MAX uploads in progress; CR_E_IO. */
cr_status_t reg_uploads_put(reg_uploads_t *u, const char *id,
                            const msg_blob_put_body_t *piece, int64_t now_ms,
                            bool *done, bool *created, cr_err_t *err);

/* True while upload `id` is in progress. */
bool reg_uploads_has(const reg_uploads_t *u, const char *id);

/* Drops upload `id` (the client went away); true if there was one. */
bool reg_uploads_cancel(reg_uploads_t *u, const char *id);

/* Drops uploads idle since before now_ms - timeout. Returns how many. */
size_t reg_uploads_expire(reg_uploads_t *u, int64_t now_ms);

/* Uploads in progress. */
size_t reg_uploads_count(const reg_uploads_t *u);

#endif
