/* http.h: the CLI's HTTP client for the gateway (libcurl + jansson).
 *
 * JSON requests with either one JSON reply or an NDJSON stream handed to a
 * callback line by line, HEAD, and raw file uploads for blobs. Any status
 * >= 400 becomes an error whose message is the server's {"error": "..."}
 * (or the body text when it is not JSON); an {"error"} line inside a stream
 * ends it with that message. A failed connection says where it tried.
 * SIGINT (cli_interrupted) aborts a transfer with CR_E_CANCELED.
 *
 * It owns the curl handle and nothing about particular routes. */
#ifndef CLI_HTTP_H
#define CLI_HTTP_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "cli/host.h"

#include <jansson.h>
#include <signal.h>

/* Set by the CLI's SIGINT handler; a transfer in progress stops soon after. */
extern volatile sig_atomic_t cli_interrupted;

#define CLI_HTTP_MAX_BODY (64u << 20) /* a non-streamed reply */
#define CLI_HTTP_MAX_LINE (16u << 20) /* one NDJSON line */

typedef struct cli_http cli_http_t;

/* Called for each NDJSON object of a stream (borrowed; valid during the
 * call). Return false to stop reading (the call then returns CR_OK). */
typedef bool (*cli_http_line_fn)(void *ctx, json_t *obj);

/* Called while a file uploads: bytes sent so far of total. */
typedef void (*cli_http_progress_fn)(void *ctx, uint64_t sent, uint64_t total);

/* A client for the base URL of host (copied). NULL with err on failure.
 * Caller owns; free with cli_http_destroy. */
cli_http_t *cli_http_new(const cli_host_t *host, cr_err_t *err);
void cli_http_destroy(cli_http_t **h_p);

/* The base URL ("http://127.0.0.1:11434"); borrowed. */
const char *cli_http_base(const cli_http_t *h);

/* Sends `method path` with body (borrowed JSON, or NULL for none).
 * With on_line: the reply is read as NDJSON and each object passed on.
 * Without: the reply is parsed as one JSON value into *out (a new
 * reference; NULL for an empty body) when out is not NULL.
 * status (may be NULL) gets the HTTP status. Errors: the server's message
 * with CR_E_NOT_FOUND (404), CR_E_INVALID (400), CR_E_UNAUTHORIZED (401),
 * CR_E_FORBIDDEN (403), CR_E_BUSY (503), CR_E_INTERNAL (other >= 400);
 * CR_E_UNAVAILABLE when the server cannot be reached; CR_E_CANCELED on
 * SIGINT; CR_E_CORRUPT for a reply that is not JSON; CR_E_TOO_LARGE past
 * the limits above. */
cr_status_t cli_http_json(cli_http_t *h, const char *method, const char *path,
                          const json_t *body, cli_http_line_fn on_line, void *ctx,
                          json_t **out, long *status, cr_err_t *err);

/* HEAD path: *status gets the HTTP status (no error for 4xx/5xx).
 * CR_E_UNAVAILABLE when unreachable. */
cr_status_t cli_http_head(cli_http_t *h, const char *path, long *status, cr_err_t *err);

/* POSTs size bytes read from f as application/octet-stream. Errors as
 * cli_http_json (the server's message for >= 400). */
cr_status_t cli_http_post_file(cli_http_t *h, const char *path, FILE *f, uint64_t size,
                               cli_http_progress_fn progress, void *ctx, long *status,
                               cr_err_t *err);

#endif
