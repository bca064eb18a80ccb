/* image_fetch.h: remote image URLs in /v1 `image_url` parts, fetched only
 * when the operator enables them (CORRAL_REMOTE_IMAGES=1; otherwise such a
 * URL keeps Ollama's 400).
 *
 * http and https only (redirects too, at most 3), a size cap and a time
 * limit, and no connection to a loopback, private, link-local or other
 * non-public address unless CORRAL_REMOTE_IMAGES_PRIVATE=1: the check runs
 * on every address curl is about to connect to, so a redirect or a DNS
 * answer cannot point the gateway at the host's own services. */
#ifndef GW_IMAGE_FETCH_H
#define GW_IMAGE_FETCH_H

#include "lib/prelude.h"
#include "lib/status.h"

typedef struct gw_fetch_limits {
    bool enabled;        /* CORRAL_REMOTE_IMAGES */
    bool allow_private;  /* CORRAL_REMOTE_IMAGES_PRIVATE */
    size_t max_bytes;    /* the body's cap: 20 MiB */
    long timeout_ms;     /* the whole transfer: 15 s */
} gw_fetch_limits_t;

/* The limits from the environment. */
void gw_fetch_limits_from_env(gw_fetch_limits_t *out);

/* Fetches url and returns its body as base64 in *b64 (caller frees).
 * CR_E_INVALID with a message naming the URL for every failure the client
 * caused or can fix (scheme, address refused, HTTP status, too large,
 * timeout, network errors); CR_E_NOMEM. */
cr_status_t gw_image_fetch(const char *url, const gw_fetch_limits_t *lim, char **b64,
                           cr_err_t *err);

#endif
