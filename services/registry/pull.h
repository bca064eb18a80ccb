/* pull.h: /api/pull, a model from a remote registry into the store (§7.1
 * of the API reference).
 *
 * Fetches the manifest (with the manifest Accept headers), then each layer
 * and the config that the store does not have yet through download.h
 * (parallel parts, resume, SHA-256 check before a blob enters blobs/),
 * writes the manifest bytes exactly as served, last and atomically, and
 * prunes the blobs the replaced manifest alone referenced (unless
 * CORRAL_NOPRUNE/OLLAMA_NOPRUNE). Progress goes through a callback with
 * Ollama's statuses: `pulling manifest`, `pulling <12 hex>` (digest, total,
 * completed; about every 60 ms), `verifying sha256 digest`, `writing
 * manifest`, `removing unused layers` (only when something was removed),
 * `success`. Runs on the caller's thread and blocks it: the server runs it
 * in a job thread. */
#ifndef REG_PULL_H
#define REG_PULL_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/registry/download.h"
#include "services/registry/store.h"

#include <stdatomic.h>

/* One progress record (borrowed for the call). */
typedef void (*reg_xfer_progress_fn)(void *ctx, const msg_progress_body_t *p);

/* Where pulls and pushes get their shared state: the download table (may
 * be NULL) and part/retry options (NULL: defaults). Borrowed. */
typedef struct reg_xfer_env {
    reg_transfers_t *transfers;
    const reg_dl_opts_t *opts;
    bool noprune; /* keep blobs a replaced manifest no longer needs */
} reg_xfer_env_t;

/* Pulls model. Errors: CR_E_INVALID `invalid model name`, `insecure
 * protocol http`; CR_E_NOT_FOUND `pull model manifest: file does not
 * exist`; CR_E_CORRUPT `pull model manifest: …` (a manifest that does not
 * parse) or a digest mismatch; CR_E_UNAUTHORIZED `pull model manifest:
 * unauthorized: access denied`; CR_E_CANCELED; CR_E_IO; CR_E_UNAVAILABLE
 * for other registry failures. A failed pull leaves no manifest behind
 * (partial downloads stay for a resume). */
cr_status_t reg_pull(reg_store_t *s, const reg_xfer_env_t *env,
                     const char *model, bool insecure, const atomic_bool *cancel,
                     reg_xfer_progress_fn fn, void *ctx, cr_err_t *err);

#endif
