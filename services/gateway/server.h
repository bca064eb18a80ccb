/* server.h: the gateway's HTTP server (libmicrohttpd), start to stop.
 *
 * One thread per connection (each request may block on its own bus
 * socket), HTTP/1.1 keep-alive, the native Ollama API (routes.h), CORS and
 * the DNS-rebinding Host check (access.h). The server holds no model state;
 * everything it answers comes from the scheduler or the registry.
 *
 * Tests run it in-process: set CORRAL_RUNTIME_DIR (or the CORRAL_*_ENDPOINT
 * variables), fill a config with host "127.0.0.1:0", and read the port. */
#ifndef GW_SERVER_H
#define GW_SERVER_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/gateway/http.h"

#define GW_DEFAULT_MAX_BODY (32u * 1024 * 1024)
#define GW_DEFAULT_CONNECT_TIMEOUT_MS 3000
#define GW_DEFAULT_REPLY_TIMEOUT_MS 60000
#define GW_DEFAULT_PING_AFTER_MS 10000
#define GW_DEFAULT_MAX_CONNECTIONS 1000u
#define GW_DEFAULT_IDLE_TIMEOUT_S 300u
/* The share of max_connections one address may hold by default (the rest
 * is a reserve for everyone else: health checks, other clients). */
#define GW_DEFAULT_PER_IP_PERCENT 75u

typedef struct gw_server gw_server_t;

/* Defaults, then the environment: HOST and ORIGINS (CORRAL_/OLLAMA_),
 * LOAD_TIMEOUT (default 5m) which sets create_timeout_ms to that plus a
 * minute (<= 0: no limit), and the connection limits MAX_CONNECTIONS
 * (1000), MAX_CONNECTIONS_PER_IP (75% of it) and IDLE_TIMEOUT (5m; a
 * duration, 0 = never). CR_E_INVALID names a malformed setting. */
cr_status_t gw_config_from_env(gw_config_t *cfg, cr_err_t *err);

/* Resolves the bus endpoints, binds cfg->host and starts serving. Caller
 * owns the server (gw_server_destroy). CR_E_INVALID for a bad host,
 * CR_E_IO when the port cannot be bound (err says which). */
cr_status_t gw_server_new(const gw_config_t *cfg, gw_server_t **out,
                          cr_err_t *err);

/* The TCP port actually bound (useful with port 0). */
uint16_t gw_server_port(const gw_server_t *s);

/* Housekeeping, from the main thread about every second: closes bus calls
 * idle past GW_CALL_IDLE_MS (call.h) and, every tenth call, hands freed
 * malloc memory back (lib/mem_trim.h). */
void gw_server_tick(gw_server_t *s);

/* Graceful stop (SIGTERM): closes the listen socket (new connections are
 * refused; a new request on a kept-alive connection is answered 503
 * "server is shutting down") and waits up to timeout_ms for the requests
 * in flight to finish. Returns how many are still running. */
int gw_server_drain(gw_server_t *s, int64_t timeout_ms);

/* Stops accepting, ends requests that wait on the bus (their bus requests
 * are canceled), joins the connection threads and frees the server.
 * Accepts NULL. */
void gw_server_destroy(gw_server_t **self_p);

#endif
