/* auth.h: the optional API key (CORRAL_API_KEY).
 *
 * With a key configured, every request except `/` (GET and HEAD: the
 * liveness check clients use), the readiness probe `/api/health`, the web
 * console's files (`/ui`, `/ui/...`: console.h) and CORS preflights must
 * carry `Authorization: Bearer <key>` (or
 * `x-api-key: <key>`, Anthropic's form); anything else is 401
 * {"error":"unauthorized"}. The comparison takes the same time whatever
 * the header holds (both sides are hashed with SHA-256 and the digests
 * compared with CRYPTO_memcmp), so the key cannot be guessed byte by byte
 * from timings. Pure functions; server.c applies them. */
#ifndef GW_AUTH_H
#define GW_AUTH_H

#include "lib/prelude.h"

/* True if a request to path needs the key (key non-empty, path none of
 * "/", "/api/health", "/ui", "/ui/..."). */
bool gw_auth_required(const char *key, const char *path);

/* True if the Authorization header value (may be NULL) is "Bearer <key>"
 * (scheme case-insensitive, spaces after it skipped). */
bool gw_auth_check(const char *key, const char *authorization);

/* True if an `x-api-key` header value (may be NULL) is the key itself:
 * how Anthropic's clients send theirs (for /v1/messages), accepted on
 * every route like the Bearer form. Same constant-time comparison. */
bool gw_auth_check_api_key(const char *key, const char *x_api_key);

#endif
