/* status.h: the one status enum every fallible function returns, and the
 * error record that carries a human message next to it.
 *
 * The enum is append-only: values travel on the bus as integers, so an old
 * service must read a new service's codes the same way. HTTP status codes are
 * mapped from these in exactly one table, in the gateway. */
#ifndef CR_STATUS_H
#define CR_STATUS_H

#include "lib/prelude.h"

typedef enum cr_status {
    CR_OK = 0,
    CR_E_INVALID = 1,      /* bad input from a client or file: HTTP 400 */
    CR_E_NOT_FOUND = 2,    /* unknown model, blob, route: 404 */
    CR_E_NOMEM = 3,        /* allocation failed (weights, KV cache, buffers) */
    CR_E_IO = 4,           /* read/write/open failed */
    CR_E_CORRUPT = 5,      /* malformed file or frame (GGUF, msgpack, JSON) */
    CR_E_TRUNCATED = 6,    /* input ended early */
    CR_E_TOO_LARGE = 7,    /* over a named limit: 413 for bodies */
    CR_E_UNSUPPORTED = 8,  /* valid but not implemented (arch, tensor type) */
    CR_E_TIMEOUT = 9,      /* a peer or a load took too long */
    CR_E_CANCELED = 10,    /* client went away: 499 */
    CR_E_BUSY = 11,        /* queue full: 503 */
    CR_E_RUNNER = 12,      /* runner failed or died: 500 */
    CR_E_INTERNAL = 13,    /* a bug or an impossible state: 500 */
    CR_E_PROTO = 14,       /* bus message malformed or of the wrong version */
    CR_E_EXISTS = 15,      /* already present */
    CR_E_UNAUTHORIZED = 16,/* 401 */
    CR_E_FORBIDDEN = 17,   /* 403 */
    CR_E_UNAVAILABLE = 18, /* a service is not reachable: 502/503 */
    CR_E__COUNT
} cr_status_t;

/* Static name of a status ("invalid", "not found", ...); never NULL. */
const char *cr_status_str(cr_status_t st);

#define CR_ERR_MSG_MAX 512

/* A status with its message. Functions that can fail for reasons a user
 * must read take a `cr_err_t *err` (which may be NULL) and fill it. */
typedef struct cr_err {
    cr_status_t status;
    char msg[CR_ERR_MSG_MAX];
} cr_err_t;

/* Sets err (if not NULL) and returns st, for `return cr_err_set(...)`. */
cr_status_t cr_err_set(cr_err_t *err, cr_status_t st, const char *fmt, ...)
    CR_PRINTF(3, 4);

/* Prepends "what: " to err's message (if err is set), returns err->status. */
cr_status_t cr_err_wrap(cr_err_t *err, const char *fmt, ...) CR_PRINTF(2, 3);

/* Clears err to CR_OK and an empty message. */
void cr_err_clear(cr_err_t *err);

/* Replaces every occurrence of `path` in text (a NUL-terminated message in
 * a buffer of cap bytes) with `shown`, cutting at cap: messages that reach
 * clients name a store file by its digest, never by an absolute path. */
void cr_msg_redact(char *text, size_t cap, const char *path, const char *shown);

#endif
