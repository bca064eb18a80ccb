/* http.h: one HTTP request as the route handlers see it, and the replies.
 *
 * server.c fills a gw_req_t per request (path, method, body, client socket)
 * and calls the route's handler once the body is in; handlers answer with
 * the gw_reply_* helpers, which add the CORS headers and queue the response
 * on the MHD connection. The cr_status_t -> HTTP status table lives here,
 * in gw_http_status(), and nowhere else.
 *
 * Everything here runs in the request's own connection thread (MHD thread
 * per connection), so a handler may block on the bus. */
#ifndef GW_HTTP_H
#define GW_HTTP_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "lib/version.h"
#include "proto/bus.h"
#include "services/gateway/call.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <sys/socket.h>

struct gw_cors;
struct gw_route;
struct gw_metrics;

/* Settings of one gateway (server.h fills it from the environment). */
typedef struct gw_config {
    char host[512];            /* OLLAMA_HOST form; "" = 127.0.0.1:11434 */
    char origins[4096];        /* OLLAMA_ORIGINS, comma-separated */
    size_t max_body_bytes;     /* cap on a JSON request body */
    int connect_timeout_ms;    /* a bus peer must take a message within */
    int reply_timeout_ms;      /* control routes: max wait for each reply */
    int create_timeout_ms;     /* create: max silence between progress */
    int ping_after_ms;         /* inference: silence before a liveness ping
                                  (no answer in as long again = gone) */
    char api_key[512];         /* CORRAL_API_KEY; "" = no auth */
    char tls_cert[4096];       /* CORRAL_TLS_CERT: PEM certificate (chain)
                                  file; "" = plain HTTP */
    char tls_key[4096];        /* CORRAL_TLS_KEY: its PEM private key file */
    char compat_version[CR_VERSION_MAX + 1]; /* /api/version's `version`
                                  (lib/version.h) */
    unsigned max_connections;  /* CORRAL_MAX_CONNECTIONS: open at once */
    unsigned max_per_ip;       /* CORRAL_MAX_CONNECTIONS_PER_IP: from one
                                  address, below max_connections so other
                                  addresses always find room (0 = none) */
    unsigned idle_timeout_s;   /* CORRAL_IDLE_TIMEOUT: a connection with no
                                  traffic either way for this long is
                                  closed (0 = never) */
} gw_config_t;

/* What every handler may read: settings, peers, and whether we stop. */
typedef struct gw_ctx {
    gw_config_t cfg;
    char scheduler_ep[BUS_ENDPOINT_MAX];
    char registry_ep[BUS_ENDPOINT_MAX];
    struct gw_cors *cors; /* allowed origins */
    bool loopback;        /* bound to a loopback address: check Host */
    struct gw_metrics *metrics; /* counters (metrics.h) */
    atomic_bool stopping; /* the server is shutting down */
    gw_call_limit_t calls; /* bus calls open at once (call.h) */
} gw_ctx_t;

/* Per-route state that lives as long as the request (blob uploads). */
typedef struct gw_req_state {
    void (*free_fn)(void *state);
} gw_req_state_t;

typedef struct gw_req {
    struct MHD_Connection *conn;
    gw_ctx_t *ctx;
    const struct gw_route *route;
    char method[16];
    char path[1024];
    char param[128];        /* the :digest of /api/blobs/:digest */
    char allow_origin[512]; /* Access-Control-Allow-Origin value, or "" */
    int fd;                 /* the client socket, for disconnect checks */
    cr_buf_t body;          /* JSON body (capped at max_body_bytes) */
    bool body_too_large;
    uint64_t body_bytes;    /* bytes received, kept or not */
    void *state;            /* route state; freed with state_free */
    void (*state_free)(void *state);
    int deferred;           /* an answer decided from the headers
                               (server.c), sent once the body is in */
    bool responded;         /* a response was queued */
    unsigned status;        /* its HTTP status, for the access log */
    int64_t start_ns;       /* monotonic arrival time */
} gw_req_t;

/* The one table: INVALID 400, NOT_FOUND 404, CANCELED 499, BUSY 503,
 * TOO_LARGE 413, UNAUTHORIZED 401, FORBIDDEN 403, UNAVAILABLE 502, every
 * other failure 500. */
unsigned gw_http_status(cr_status_t st);

/* Queues a response with a copy of len bytes of data (content type ctype,
 * may be NULL for none). Returns MHD_YES/MHD_NO for the access handler. */
enum MHD_Result gw_reply(gw_req_t *r, unsigned status, const char *ctype,
                         const void *data, size_t len);

/* 'application/json; charset=utf-8' body. */
enum MHD_Result gw_reply_json(gw_req_t *r, unsigned status, const char *json,
                              size_t len);

/* {"error":"<text>"} with gw_http_status(st). */
enum MHD_Result gw_reply_error(gw_req_t *r, cr_status_t st, const char *text);

/* {"error":"<text>"} with an explicit HTTP status. */
enum MHD_Result gw_reply_error_http(gw_req_t *r, unsigned status,
                                    const char *text);

/* Queues a prepared response (adds CORS headers; takes no ownership). */
enum MHD_Result gw_reply_response(gw_req_t *r, unsigned status,
                                  struct MHD_Response *resp);

/* True when the client closed its side of the connection. */
bool gw_req_client_gone(const gw_req_t *r);

/* gw_abort_fn for bus waits: client gone or server stopping. */
bool gw_req_should_abort(void *req);

#endif
