/* oci_client.h: one remote OCI distribution registry, spoken to over HTTP
 * with libcurl (§7 of the API reference).
 *
 * Owns the base URL of a model's registry (scheme://host), its repository
 * ("namespace/model"), and authentication: a request answered 401 with
 * `WWW-Authenticate: Bearer realm=…,service=…,scope=…` fetches a token from
 * the realm and is retried once (a second 401 is `unauthorized: access
 * denied`); `Basic` challenges are answered with credentials from the
 * credentials file. Credentials and tokens are never logged.
 *
 * Credentials file: $CORRAL_REGISTRY_AUTH_FILE (or OLLAMA_…), else
 * ~/.corral/registry-auth; one `host user:password` per line, `#` comments.
 * Basic credentials go to the registry host and to a token realm on the
 * same host only.
 *
 * Knows nothing of the store, of blobs' meaning or of progress. Every call
 * blocks the calling thread (pull and push run in job threads). */
#ifndef REG_OCI_CLIENT_H
#define REG_OCI_CLIENT_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/model_name.h"
#include "lib/status.h"

#define REG_URL_MAX 4096            /* bytes of any URL we build or follow */
#define REG_TOKEN_MAX 16384         /* bytes of a bearer token */
#define REG_HTTP_BODY_MAX (4u << 20) /* default cap on a buffered body */

typedef struct reg_oci reg_oci_t;

/* One request. Exactly one body source: memory (body/body_len), a file
 * range (fd >= 0: fd_len bytes from fd_offset, read with pread), or none. */
typedef struct reg_http_req {
    const char *method;        /* GET, HEAD, PUT, POST, PATCH */
    const char *url;           /* absolute */
    const char *accept;        /* Accept header or NULL */
    const char *content_type;  /* Content-Type or NULL */
    const char *content_range; /* Content-Range or NULL */
    const char *range;         /* Range ("0-0") or NULL */
    const void *body;
    size_t body_len;
    int fd;                    /* -1 for none */
    int64_t fd_offset, fd_len;
    bool no_auth;              /* never send Authorization */
    size_t body_max;           /* response body cap (0: REG_HTTP_BODY_MAX) */
} reg_http_req_t;

/* One response. Free with reg_http_resp_free. */
typedef struct reg_http_resp {
    long status;                     /* HTTP status */
    cr_buf_t body;                   /* capped at the request's body_max */
    char location[REG_URL_MAX];      /* Location, resolved to absolute */
    char upload_location[REG_URL_MAX]; /* Docker-Upload-Location, absolute */
    char www_auth[1024];             /* WWW-Authenticate */
    int64_t content_length;          /* -1 when absent */
} reg_http_resp_t;

void reg_http_req_init(reg_http_req_t *r, const char *method, const char *url);
void reg_http_resp_free(reg_http_resp_t *r);

/* A client for name's registry. insecure selects http; a name spelled with
 * an explicit http:// scheme without insecure is CR_E_INVALID
 * `insecure protocol http`. Caller owns; free with reg_oci_destroy. */
cr_status_t reg_oci_new(const cr_model_name_t *name, bool insecure,
                        reg_oci_t **out, cr_err_t *err);
void reg_oci_destroy(reg_oci_t **self_p);

/* "scheme://host" (borrowed). */
const char *reg_oci_base(const reg_oci_t *c);
/* "namespace/model", lower case (borrowed). */
const char *reg_oci_repo(const reg_oci_t *c);

/* The Authorization header value the client would send now ("" if none)
 * into buf; for the download loop, which drives libcurl itself. */
void reg_oci_auth_header(reg_oci_t *c, char *buf, size_t cap);

/* Sends req, handling a 401 challenge as described above. Authorization
 * is sent only to URLs of the registry's own scheme, host and port. CR_OK for any
 * HTTP status except a 401 that persists after authenticating
 * (CR_E_UNAUTHORIZED `unauthorized: access denied`); a transport failure
 * is CR_E_UNAVAILABLE with curl's message. *resp is filled either way
 * (free it). */
cr_status_t reg_oci_send(reg_oci_t *c, const reg_http_req_t *req,
                         reg_http_resp_t *resp, cr_err_t *err);

/* Sets err from an unexpected response: 404 -> CR_E_NOT_FOUND
 * "not found"; other -> CR_E_UNAVAILABLE "<status>: <body>" (the body
 * trimmed and cut at 200 bytes). Returns the status. */
cr_status_t reg_oci_status_err(const reg_http_resp_t *resp, cr_err_t *err);

/* Resolves ref (absolute or relative) against base into out; false if it
 * does not parse or fit. */
bool reg_url_resolve(const char *base, const char *ref, char *out, size_t cap);

/* True if a and b have the same scheme, host and port. */
bool reg_url_same_origin(const char *a, const char *b);

/* Parses a `Bearer realm="…",service="…",scope="…"` challenge; false if
 * it is not a Bearer challenge with a realm. Fields missing are "". */
bool reg_parse_bearer(const char *hdr, char *realm, size_t realm_cap,
                      char *service, size_t service_cap, char *scope,
                      size_t scope_cap);

/* The User-Agent every request carries. */
#define REG_USER_AGENT "ollama/0.12.0 (amd64 linux) Go/go1.24.0 corral/" CORRAL_VERSION

#endif
