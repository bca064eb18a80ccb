/* jobs.h: pulls, pushes and long creates running beside the registry's
 * request loop.
 *
 * Each pull, push or long create (reg_create_runs_long: `quantize`, minutes
 * of work in a child corral-runner; a `from` to pull; a safetensors or PEFT
 * folder to convert) runs in a thread of its own, so the service keeps
 * answering tags, show and resolve meanwhile. A job never touches
 * the service's sockets: it encodes its replies (progress..., then ok or
 * error) and sends them with the requester's ROUTER identity to an inproc
 * PULL socket that the service loop polls and forwards (see
 * docs/architecture.md). Cancel sets the job's flag: a quantization is
 * killed, a conversion stops at its next tensor; a pull stops at once unless it is the one downloading a blob
 * another pull still waits for, in which case that download goes on until
 * the last such pull has gone too (download.h). */
#ifndef REG_JOBS_H
#define REG_JOBS_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/registry/pull.h"
#include "services/registry/store.h"

#include <czmq.h>

#define REG_JOBS_MAX 32 /* pulls, pushes and long creates at once */

typedef struct reg_jobs reg_jobs_t;

/* Jobs over store s with env (both borrowed; must outlive the table).
 * Caller owns; free with reg_jobs_destroy, which cancels and joins every
 * job. NULL on failure. */
reg_jobs_t *reg_jobs_new(reg_store_t *s, const reg_xfer_env_t *env);
void reg_jobs_destroy(reg_jobs_t **self_p);

/* The socket whose readability means reg_jobs_recv has something. */
zsock_t *reg_jobs_socket(reg_jobs_t *j);

/* Starts req (a pull, push or create; deep-copied) for the peer identity
 * (id_len bytes; may be 0). CR_E_BUSY with REG_JOBS_MAX jobs running;
 * CR_E_NOMEM. Cancel stops a create too: its quantization is killed or its
 * conversion stops, and no model is written (create.h). */
cr_status_t reg_jobs_start(reg_jobs_t *j, const msg_t *req,
                           const void *identity, size_t id_len, cr_err_t *err);

/* Sets the cancel flag of the job with request id; false if none. */
bool reg_jobs_cancel(reg_jobs_t *j, const char *id);

/* True while the job with request id runs (not yet finished). */
bool reg_jobs_has(reg_jobs_t *j, const char *id);

/* Sets the cancel flag of every job started for the peer identity (id_len
 * bytes): its connection is gone. Returns how many. */
size_t reg_jobs_cancel_peer(reg_jobs_t *j, const void *identity, size_t id_len);

/* Takes one queued reply: the peer identity and the encoded message
 * (caller owns both). False if none came within timeout_ms. */
bool reg_jobs_recv(reg_jobs_t *j, int timeout_ms, zframe_t **identity,
                   zframe_t **frame);

/* Joins finished jobs; returns how many still run. */
size_t reg_jobs_reap(reg_jobs_t *j);

#endif
