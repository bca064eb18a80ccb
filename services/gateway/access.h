/* access.h: who may talk to the gateway, and where it listens.
 *
 * CORS as Ollama configures gin-contrib/cors (§1.1, §5 OLLAMA_ORIGINS): the
 * default origins (http(s)://localhost, 127.0.0.1 and 0.0.0.0 with any
 * port, app://, file://, tauri://, vscode-webview://, vscode-file://, and
 * browser-extension schemes) plus OLLAMA_ORIGINS, each pattern with at most
 * one '*' wildcard; "*" alone allows every origin. The DNS-rebinding check
 * on the Host header applies when the server listens on loopback. And the
 * OLLAMA_HOST forms: host, host:port, scheme://host[:port][/path], [v6]:port.
 *
 * Pure functions over strings and addresses; server.c applies them. */
#ifndef GW_ACCESS_H
#define GW_ACCESS_H

#include "lib/prelude.h"
#include "lib/status.h"

#include <sys/socket.h>

/* Request headers a cross-origin caller may send (preflight answer). */
#define GW_CORS_ALLOW_HEADERS                                               \
    "Authorization,Content-Type,User-Agent,Accept,X-Requested-With,"        \
    "OpenAI-Beta,x-stainless-arch,x-stainless-async,"                       \
    "x-stainless-custom-poll-interval,x-stainless-helper-method,"           \
    "x-stainless-lang,x-stainless-os,x-stainless-package-version,"          \
    "x-stainless-poll-helper,x-stainless-retry-count,x-stainless-runtime,"  \
    "x-stainless-runtime-version,x-stainless-timeout,"                     \
    "x-api-key,anthropic-version,anthropic-beta,"                           \
    "anthropic-dangerous-direct-browser-access"
#define GW_CORS_ALLOW_METHODS "GET,POST,PUT,PATCH,DELETE,HEAD,OPTIONS"
#define GW_CORS_MAX_AGE "43200"

typedef struct gw_cors gw_cors_t;

/* The default origins plus extra (OLLAMA_ORIGINS; may be NULL or "").
 * Caller owns the result (gw_cors_destroy); NULL when out of memory. */
gw_cors_t *gw_cors_new(const char *extra);
void gw_cors_destroy(gw_cors_t **self_p);

/* True if a request with Origin `origin` may proceed. */
bool gw_cors_allowed(const gw_cors_t *c, const char *origin);

/* True if "*" was configured (the reply then says "*"). */
bool gw_cors_allows_all(const gw_cors_t *c);

/* The DNS-rebinding check: the Host header (may carry a port, may be NULL)
 * is empty, localhost, a loopback/private/unspecified IP, an address of a
 * local interface, this machine's hostname, or ends in .localhost, .local
 * or .internal. */
bool gw_host_allowed(const char *host_header);

/* Splits an OLLAMA_HOST value the way Ollama does: no scheme -> port 11434,
 * http:// -> 80, https:// -> 443; an unparsable host:port binds 127.0.0.1
 * (or the bare IP/name given); a bad port falls back to the default.
 * host_out gets the host without brackets ("" = all interfaces). */
void gw_listen_split(const char *spec, char *host_out, size_t cap,
                     uint16_t *port_out);

/* Resolves host/port for bind(): an IP literal, "" (all interfaces) or a
 * name. Sets *loopback when the address is 127.0.0.0/8 or ::1.
 * CR_E_INVALID if the name does not resolve. */
cr_status_t gw_listen_resolve(const char *host, uint16_t port,
                              struct sockaddr_storage *ss, socklen_t *len,
                              bool *loopback, cr_err_t *err);

#endif
