/* push.h: /api/push, a stored model to a remote registry (§7.2 of the API
 * reference).
 *
 * For the config and each layer: HEAD the blob; if the registry lacks it,
 * open an upload (POST …/blobs/uploads/, with ?mount=&from= for a layer
 * inherited from another repository: 201 means mounted), send the bytes in
 * parts with PATCH (Content-Range), finish with PUT ?digest=; then PUT the
 * manifest bytes with their media type as Content-Type. Progress:
 * `retrieving manifest`, `pushing <12 hex>` (digest, total, completed),
 * `pushing manifest`, `success`. Blocks the caller's thread. */
#ifndef REG_PUSH_H
#define REG_PUSH_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/registry/pull.h"

/* Pushes model. Errors: CR_E_INVALID `invalid model name`, `insecure
 * protocol http`; CR_E_NOT_FOUND `model "<x>" not found`;
 * CR_E_UNAUTHORIZED `unauthorized: access denied`; CR_E_CANCELED; CR_E_IO;
 * CR_E_UNAVAILABLE `<status>: <body>` for what the registry refused. */
cr_status_t reg_push(reg_store_t *s, const reg_xfer_env_t *env,
                     const char *model, bool insecure, const atomic_bool *cancel,
                     reg_xfer_progress_fn fn, void *ctx, cr_err_t *err);

#endif
