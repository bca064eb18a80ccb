/* server.c: the MHD daemon, request bodies, and the middleware order.
 *
 * Per request: CORS (403 for a disallowed Origin, 204 for a preflight),
 * then the Host check when bound to loopback (403), then OPTIONS -> 204,
 * then the API key when one is set (401, auth.h), then routing (404 / 405), then the body: JSON bodies are read into a
 * capped buffer (413 past cfg.max_body_bytes), a streamed body goes to the
 * route's data hook; last, the route's handler answers. */
#include "lib/prelude.h"
#include "services/gateway/server.h"
#include "services/gateway/tls.h"

#include "lib/duration.h"
#include "lib/version.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/mem_trim.h"
#include "services/gateway/access.h"
#include "services/gateway/auth.h"
#include "services/gateway/metrics.h"
#include "services/gateway/routes.h"

#include <strings.h>
#include <sys/resource.h>
#include <time.h>

struct gw_server {
    gw_ctx_t ctx;
    struct MHD_Daemon *daemon;
    gw_tls_t tls;            /* certificate and key while the daemon runs */
    uint16_t port;
    atomic_int in_flight;    /* requests begun and not yet completed */
    atomic_bool draining;    /* SIGTERM: new requests are refused */
    unsigned ticks;          /* gw_server_tick calls (one a second) */
};

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- config ---- */

/* A count setting in 1..max; CR_E_INVALID names it otherwise. */
static cr_status_t env_count(const char *name, unsigned def, unsigned max,
                             unsigned *out, cr_err_t *err)
{
    char v[64], *end;
    *out = def;
    if (!cr_env_get(name, v, sizeof v))
        return CR_OK;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno || *end || end == v || n < 1 || n > max)
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_%s '%s' is not a count from 1 to %u", name,
                          v, max);
    *out = (unsigned)n;
    return CR_OK;
}

/* Connection limits: libmicrohttpd's default (about 1,020 connections, no
 * idle timeout) let idle connections lock every client out. */
static cr_status_t connection_limits(gw_config_t *cfg, cr_err_t *err)
{
    cr_status_t st = env_count("MAX_CONNECTIONS", GW_DEFAULT_MAX_CONNECTIONS,
                               1000000, &cfg->max_connections, err);
    if (st)
        return st;
    unsigned per_ip_def =
        cfg->max_connections * GW_DEFAULT_PER_IP_PERCENT / 100;
    if (per_ip_def < 1)
        per_ip_def = 1;
    if ((st = env_count("MAX_CONNECTIONS_PER_IP", per_ip_def,
                        cfg->max_connections, &cfg->max_per_ip, err)))
        return st;
    cfg->idle_timeout_s = GW_DEFAULT_IDLE_TIMEOUT_S;
    char v[64];
    if (cr_env_get("IDLE_TIMEOUT", v, sizeof v)) {
        int64_t ms = 0;
        cr_err_t e;
        if (cr_duration_parse(v, &ms, &e) || ms < 0)
            return cr_err_set(err, CR_E_INVALID,
                              "CORRAL_IDLE_TIMEOUT '%s' is not a duration "
                              "(e.g. 5m, 30s; 0 = never)",
                              v);
        /* microhttpd counts whole seconds; a positive value stays one. */
        cfg->idle_timeout_s =
            ms == 0 ? 0 : (unsigned)CR_MIN((ms + 999) / 1000, (int64_t)UINT_MAX);
    }
    return CR_OK;
}

cr_status_t gw_config_from_env(gw_config_t *cfg, cr_err_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->max_body_bytes = GW_DEFAULT_MAX_BODY;
    cfg->connect_timeout_ms = GW_DEFAULT_CONNECT_TIMEOUT_MS;
    cfg->reply_timeout_ms = GW_DEFAULT_REPLY_TIMEOUT_MS;
    cfg->ping_after_ms = GW_DEFAULT_PING_AFTER_MS;
    cr_env_get("HOST", cfg->host, sizeof cfg->host);
    cr_env_get("ORIGINS", cfg->origins, sizeof cfg->origins);
    /* Not OLLAMA_API_KEY: Ollama's clients use that name for ollama.com. */
    const char *key = getenv("CORRAL_API_KEY");
    snprintf(cfg->api_key, sizeof cfg->api_key, "%s", key ? key : "");
    const char *cert = getenv("CORRAL_TLS_CERT"), *tkey = getenv("CORRAL_TLS_KEY");
    snprintf(cfg->tls_cert, sizeof cfg->tls_cert, "%s", cert ? cert : "");
    snprintf(cfg->tls_key, sizeof cfg->tls_key, "%s", tkey ? tkey : "");
    if (!cfg->tls_cert[0] != !cfg->tls_key[0])
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_TLS_CERT and CORRAL_TLS_KEY go together: set both for "
                          "HTTPS, or neither");
    bool bad_version;
    cr_compat_version(cfg->compat_version, sizeof cfg->compat_version, &bad_version);
    if (bad_version)
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_COMPAT_VERSION: not a version (like %s)",
                          CR_OLLAMA_COMPAT_VERSION);

    int64_t load_ms = 5 * 60 * 1000;
    char v[64];
    if (cr_env_get("LOAD_TIMEOUT", v, sizeof v)) {
        cr_err_t e;
        if (cr_duration_parse(v, &load_ms, &e))
            return cr_err_set(err, CR_E_INVALID, "OLLAMA_LOAD_TIMEOUT: %s",
                              e.msg);
    }
    if (load_ms <= 0)
        cfg->create_timeout_ms = 0;
    else
        cfg->create_timeout_ms =
            (int)CR_MIN(load_ms + 60 * 1000, (int64_t)INT_MAX);
    return connection_limits(cfg, err);
}

/* Each connection holds its socket and, while it waits on the bus, its
 * calls' descriptors (call.h; room for two calls) and a stream's direct
 * connection to its runner: the soft RLIMIT_NOFILE (often 1024) is raised
 * toward the hard one so max_connections can be reached. */
#define CALLS_PER_CONNECTION 2
#define FDS_PER_CONNECTION (1 + CALLS_PER_CONNECTION * GW_CALL_FDS + 1)
#define FDS_SPARE 64

static void raise_fd_limit(unsigned max_connections)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl))
        return;
    rlim_t want = (rlim_t)max_connections * FDS_PER_CONNECTION + FDS_SPARE;
    if (rl.rlim_cur >= want)
        return;
    rlim_t was = rl.rlim_cur;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want
                      ? want
                      : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur < want)
        cr_log_warn("open files limit %llu (was %llu) is below the %llu that "
                    "%u connections may need; raise it (ulimit -n) or lower "
                    "CORRAL_MAX_CONNECTIONS",
                    (unsigned long long)rl.rlim_cur, (unsigned long long)was,
                    (unsigned long long)want, max_connections);
}

/* Each connection's memory pool (request line and headers, MHD's read and
 * write buffers). libmicrohttpd 0.9.75 mmaps a pool over 32 KiB and munmaps
 * it at close, and zeroes the whole pool between requests, so a 256 KiB
 * pool cost each new connection 64 page faults, a 256 KiB memset and an
 * munmap (2.3 ms of gateway CPU per connection here, against 0.6 ms at
 * 32 KiB): under bench-soak that work was what a /api/version probe
 * queued behind. At 32 KiB the pool comes from malloc; the price is the
 * header limit: about 15 KiB of request headers (Node's default is 16 KiB),
 * 431 past it. Bodies do not count: they stream through in pieces. */
#define CONN_POOL_BYTES (32 * 1024)

/* How often the gateway hands freed memory back (lib/mem_trim.h): the
 * connection pools now come from malloc's arenas, which otherwise stay at
 * their busiest size. */
#define TRIM_EVERY_S 10

/* ---- requests ---- */

static const char *header(gw_req_t *r, const char *name)
{
    return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

static gw_req_t *req_new(gw_server_t *s, struct MHD_Connection *conn,
                         const char *url, const char *method)
{
    gw_req_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->conn = conn;
    r->ctx = &s->ctx;
    r->start_ns = mono_ns();
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    cr_buf_init(&r->body, s->ctx.cfg.max_body_bytes);
    gw_metrics_request_begin(s->ctx.metrics);
    atomic_fetch_add(&s->in_flight, 1);
    return r;
}

static void req_free(gw_req_t *r)
{
    if (!r)
        return;
    if (r->state_free)
        r->state_free(r->state);
    cr_buf_free(&r->body);
    free(r);
}

static enum MHD_Result reply_text(gw_req_t *r, unsigned status,
                                  const char *text)
{
    return gw_reply(r, status, "text/plain; charset=utf-8", text,
                    strlen(text));
}

static enum MHD_Result reply_preflight(gw_req_t *r)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    if (r->allow_origin[0]) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods",
                                GW_CORS_ALLOW_METHODS);
        MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                                GW_CORS_ALLOW_HEADERS);
        MHD_add_response_header(resp, "Access-Control-Max-Age",
                                GW_CORS_MAX_AGE);
    }
    enum MHD_Result ret = gw_reply_response(r, MHD_HTTP_NO_CONTENT, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Answers decided from the headers wait for the end of the request (any
 * body is drained, within limits) so the connection can be kept alive. */
enum {
    DEFER_NONE = 0,
    DEFER_FORBIDDEN,
    DEFER_PREFLIGHT,
    DEFER_NOT_FOUND,
    DEFER_BAD_METHOD,
    DEFER_UNAUTHORIZED,
    DEFER_NO_HOST,
    DEFER_MANY_HOSTS,
};

static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind,
                                  const char *key, const char *value)
{
    CR_UNUSED(kind);
    CR_UNUSED(value);
    if (!strcasecmp(key, "Host"))
        (*(int *)cls)++;
    return MHD_YES;
}

/* Go's server: an HTTP/1.1 request needs exactly one Host header (400
 * otherwise; HTTP/1.0 may leave it out). */
static int host_problem(gw_req_t *r, const char *version)
{
    int n = 0;
    MHD_get_connection_values(r->conn, MHD_HEADER_KIND, count_host, &n);
    if (n > 1)
        return DEFER_MANY_HOSTS;
    if (n == 0 && version && strcmp(version, MHD_HTTP_VERSION_1_0) != 0)
        return DEFER_NO_HOST;
    return DEFER_NONE;
}

/* CORS: sets r->allow_origin, or defers 403 / the preflight. */
static void apply_cors(gw_req_t *r)
{
    const char *origin = header(r, "Origin");
    if (!origin || !*origin)
        return;
    const char *host = header(r, "Host");
    if (host) {
        char same[600];
        snprintf(same, sizeof same, "http://%s", host);
        if (!strcmp(origin, same))
            return;
        snprintf(same, sizeof same, "https://%s", host);
        if (!strcmp(origin, same))
            return;
    }
    if (!gw_cors_allowed(r->ctx->cors, origin)) {
        cr_log_info("%s %s: origin %s not allowed", r->method, r->path,
                    origin);
        r->deferred = DEFER_FORBIDDEN;
        return;
    }
    snprintf(r->allow_origin, sizeof r->allow_origin, "%s",
             gw_cors_allows_all(r->ctx->cors) ? "*" : origin);
    if (!strcmp(r->method, "OPTIONS"))
        r->deferred = DEFER_PREFLIGHT;
}

static enum MHD_Result too_large(gw_req_t *r)
{
    char text[128];
    snprintf(text, sizeof text,
             "request body is larger than the %zu-byte limit",
             r->ctx->cfg.max_body_bytes);
    return gw_reply_error(r, CR_E_TOO_LARGE, text);
}

/* The first call: everything that can be decided from the headers. */
static enum MHD_Result on_headers(gw_req_t *r, const char *version)
{
    if ((r->deferred = host_problem(r, version)))
        return MHD_YES;
    apply_cors(r);
    if (r->deferred)
        return MHD_YES;
    if (r->ctx->loopback && !gw_host_allowed(header(r, "Host"))) {
        cr_log_info("%s %s: host %s refused (DNS rebinding check)", r->method,
                    r->path, header(r, "Host") ? header(r, "Host") : "");
        r->deferred = DEFER_FORBIDDEN;
        return MHD_YES;
    }
    if (!strcmp(r->method, "OPTIONS")) {
        r->deferred = DEFER_PREFLIGHT;
        return MHD_YES;
    }
    if (gw_auth_required(r->ctx->cfg.api_key, r->path) &&
        !gw_auth_check(r->ctx->cfg.api_key, header(r, "Authorization")) &&
        !gw_auth_check_api_key(r->ctx->cfg.api_key, header(r, "x-api-key"))) {
        cr_log_info("%s %s: missing or wrong API key", r->method, r->path);
        r->deferred = DEFER_UNAUTHORIZED;
        return MHD_YES;
    }
    switch (gw_route_find(r->path, r->method, &r->route, r->param,
                          sizeof r->param)) {
    case GW_ROUTE_NOT_FOUND:
        r->deferred = DEFER_NOT_FOUND;
        return MHD_YES;
    case GW_ROUTE_BAD_METHOD:
        r->deferred = DEFER_BAD_METHOD;
        return MHD_YES;
    case GW_ROUTE_FOUND:
        break;
    }
    bool post = !strcmp(r->method, "POST");
    if (post && r->route->body_begin)
        return r->route->body_begin(r);
    const char *cl = header(r, "Content-Length");
    unsigned long long len = cl ? strtoull(cl, NULL, 10) : 0;
    if (cl && (post || !strcmp(r->method, "DELETE")) && len > r->ctx->cfg.max_body_bytes) {
        /* Up to the drain bound the body is read and dropped and the 413
         * comes after it: answered while the client still sends, it raced
         * the close (an unread body makes the kernel reset the connection,
         * and the client saw a reset, not the answer: test_gateway_http
         * under load). Past the bound, at once: a client that sends that
         * much without `Expect: 100-continue` may see the reset. */
        if (len <= 4 * (unsigned long long)r->ctx->cfg.max_body_bytes) {
            r->body_too_large = true;
            return MHD_YES;
        }
        return too_large(r);
    }
    return MHD_YES;
}

static enum MHD_Result on_body(gw_req_t *r, const char *data, size_t n)
{
    r->body_bytes += n;
    if (r->deferred) /* drained, within the same bound */
        return r->body_bytes > 4 * (uint64_t)r->ctx->cfg.max_body_bytes
                   ? MHD_NO
                   : MHD_YES;
    bool post = !strcmp(r->method, "POST");
    if (post && r->route->body_data)
        return r->route->body_data(r, data, n);
    if (!post && strcmp(r->method, "DELETE") != 0)
        return MHD_YES; /* bodies of GET/HEAD are ignored */
    if (r->body_too_large) {
        /* A chunked body that will not stop: close rather than drain. */
        return r->body_bytes > 4 * (uint64_t)r->ctx->cfg.max_body_bytes
                   ? MHD_NO
                   : MHD_YES;
    }
    if (cr_buf_append(&r->body, data, n)) {
        r->body_too_large = true;
        cr_buf_free(&r->body);
    }
    return MHD_YES;
}

static enum MHD_Result on_complete(gw_req_t *r)
{
    switch (r->deferred) {
    case DEFER_FORBIDDEN:
        return gw_reply(r, MHD_HTTP_FORBIDDEN, NULL, NULL, 0);
    case DEFER_PREFLIGHT:
        return reply_preflight(r);
    case DEFER_NOT_FOUND:
        return reply_text(r, MHD_HTTP_NOT_FOUND, "404 page not found");
    case DEFER_BAD_METHOD:
        return reply_text(r, MHD_HTTP_METHOD_NOT_ALLOWED,
                          "405 method not allowed");
    case DEFER_UNAUTHORIZED:
        return gw_reply_error_http(r, MHD_HTTP_UNAUTHORIZED, "unauthorized");
    case DEFER_NO_HOST:
        return reply_text(r, MHD_HTTP_BAD_REQUEST,
                          "400 Bad Request: missing required Host header");
    case DEFER_MANY_HOSTS:
        return reply_text(r, MHD_HTTP_BAD_REQUEST,
                          "400 Bad Request: too many Host headers");
    default:
        break;
    }
    if (r->body_too_large)
        return too_large(r);
    return r->route->handler(r);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *data,
                                  size_t *size, void **con_cls)
{
    gw_server_t *s = cls;
    gw_req_t *r = *con_cls;
    if (!r) {
        r = req_new(s, conn, url, method);
        if (!r)
            return MHD_NO;
        *con_cls = r;
        if (atomic_load(&s->draining)) {
            /* A kept-alive connection asking again while we drain. */
            r->responded = true;
            return gw_reply_error_http(r, MHD_HTTP_SERVICE_UNAVAILABLE,
                                       "server is shutting down");
        }
        return on_headers(r, version);
    }
    if (r->responded) { /* answered early: drop the rest */
        *size = 0;
        return MHD_YES;
    }
    if (*size) {
        enum MHD_Result ret = on_body(r, data, *size);
        *size = 0;
        return ret;
    }
    return on_complete(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn,
                         void **con_cls, enum MHD_RequestTerminationCode why)
{
    CR_UNUSED(conn);
    gw_req_t *r = *con_cls;
    if (!r)
        return;
    double secs = (double)(mono_ns() - r->start_ns) / 1e9;
    char label[GW_METRICS_LABEL_MAX];
    if (r->route)
        snprintf(label, sizeof label, "%s%s", r->route->path,
                 r->route->has_param ? ":param" : "");
    else
        snprintf(label, sizeof label, "other");
    gw_metrics_request_end(r->ctx->metrics, label,
                           r->status ? r->status : 499, secs);
    if (why == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        cr_log_info("%u | %.6fs | %s %s", r->status, secs, r->method, r->path);
    else
        cr_log_info("%u | %.6fs | %s %s | ended early (%d)", r->status, secs,
                    r->method, r->path, (int)why);
    req_free(r);
    *con_cls = NULL;
    atomic_fetch_sub(&((gw_server_t *)cls)->in_flight, 1);
}

/* fmt is microhttpd's own format string (clang checks it as one). */
CR_PRINTF(2, 0) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    CR_UNUSED(cls);
    char text[512];
    vsnprintf(text, sizeof text, fmt, ap);
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        text[--n] = '\0';
    cr_log_debug("microhttpd: %s", text);
}

/* ---- lifecycle ---- */

cr_status_t gw_server_new(const gw_config_t *cfg, gw_server_t **out,
                          cr_err_t *err)
{
    *out = NULL;
    gw_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    s->ctx.cfg = *cfg;
    atomic_init(&s->ctx.stopping, false);
    atomic_init(&s->in_flight, 0);
    atomic_init(&s->draining, false);
    cr_status_t st;
    if ((st = bus_endpoint("scheduler", s->ctx.scheduler_ep,
                           sizeof s->ctx.scheduler_ep, err)) ||
        (st = bus_endpoint("registry", s->ctx.registry_ep,
                           sizeof s->ctx.registry_ep, err)))
        goto fail;
    s->ctx.cors = gw_cors_new(cfg->origins);
    s->ctx.metrics = gw_metrics_new();
    if (!s->ctx.cors || !s->ctx.metrics) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto fail;
    }

    char host[300];
    uint16_t port;
    gw_listen_split(cfg->host, host, sizeof host, &port);
    struct sockaddr_storage ss;
    socklen_t sslen;
    if ((st = gw_listen_resolve(host, port, &ss, &sslen, &s->ctx.loopback,
                                err)))
        goto fail;
    gw_config_t limits = *cfg;
    if (!limits.max_connections) /* a config not from gw_config_from_env */
        limits.max_connections = GW_DEFAULT_MAX_CONNECTIONS;
    if (limits.max_per_ip >= limits.max_connections)
        limits.max_per_ip = 0;
    raise_fd_limit(limits.max_connections);
    /* Before the first connection thread makes a socket. */
    gw_call_limit_init(&s->ctx.calls, limits.max_connections * CALLS_PER_CONNECTION);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION |
                     MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL |
                     MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_OptionItem tls_opts[3] = {{MHD_OPTION_END, 0, NULL}};
    if (cfg->tls_cert[0]) {
        if ((st = gw_tls_load(cfg->tls_cert, cfg->tls_key, &s->tls, err)))
            goto fail;
        flags |= MHD_USE_TLS;
        tls_opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls.cert_pem};
        tls_opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls.key_pem};
    }
    s->daemon = MHD_start_daemon(
        flags, port, NULL, NULL, on_request, s,
        /* first, or microhttpd logs a warning about it to the old logger */
        MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_SOCK_ADDR,
        (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_POOL_BYTES,
        MHD_OPTION_CONNECTION_LIMIT, limits.max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, limits.max_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, limits.idle_timeout_s, MHD_OPTION_ARRAY, tls_opts,
        MHD_OPTION_END);
    if (!s->daemon && cfg->tls_cert[0]) {
        /* The likeliest cause: a key that does not match, or no certificate. */
        st = cr_err_set(err, CR_E_INVALID,
                        "cannot serve HTTPS on %s port %u with CORRAL_TLS_CERT %s and "
                        "CORRAL_TLS_KEY %s (a PEM certificate and its private key?)%s%s",
                        host[0] ? host : "*", (unsigned)port, cfg->tls_cert, cfg->tls_key,
                        errno ? ": " : "", errno ? strerror(errno) : "");
        goto fail;
    }
    if (!s->daemon) {
        st = cr_err_set(err, CR_E_IO, "cannot listen on %s port %u: %s",
                        host[0] ? host : "*", (unsigned)port,
                        errno ? strerror(errno) : "microhttpd failed");
        goto fail;
    }
    const union MHD_DaemonInfo *di =
        MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : port;
    cr_log_info("listening on %s port %u (%s, version %s); scheduler %s, "
                "registry %s",
                host[0] ? host : "*", (unsigned)s->port, cfg->tls_cert[0] ? "https" : "http",
                CORRAL_VERSION,
                s->ctx.scheduler_ep, s->ctx.registry_ep);
    *out = s;
    return CR_OK;

fail:
    gw_cors_destroy(&s->ctx.cors);
    gw_metrics_destroy(&s->ctx.metrics);
    gw_tls_free(&s->tls);
    free(s);
    return st;
}

int gw_server_drain(gw_server_t *s, int64_t timeout_ms)
{
    atomic_store(&s->draining, true);
    /* Close the listen socket: new connections are refused at once (a
     * load balancer moves on), the open ones finish. */
    MHD_socket lfd = MHD_quiesce_daemon(s->daemon);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    int64_t start = mono_ns();
    int n;
    while ((n = atomic_load(&s->in_flight)) > 0 &&
           (mono_ns() - start) / 1000000 < timeout_ms)
        zclock_sleep(20);
    return n;
}

uint16_t gw_server_port(const gw_server_t *s)
{
    return s->port;
}

void gw_server_tick(gw_server_t *s)
{
    gw_call_limit_sweep(&s->ctx.calls, GW_CALL_IDLE_MS);
    if (++s->ticks % TRIM_EVERY_S == 0)
        cr_mem_trim();
}

void gw_server_destroy(gw_server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    gw_server_t *s = *self_p;
    /* Waiting requests see the flag within one poll slice and give up,
     * so the connection threads that MHD joins below do end. */
    atomic_store(&s->ctx.stopping, true);
    if (s->daemon) {
        MHD_stop_daemon(s->daemon);
        gw_call_limit_fini(&s->ctx.calls); /* no request runs now */
    }
    gw_cors_destroy(&s->ctx.cors);
    gw_metrics_destroy(&s->ctx.metrics);
    gw_tls_free(&s->tls);
    free(s);
    *self_p = NULL;
}
