/* http.c: replies, the status table, and client-liveness checks. */
#include "lib/prelude.h"
#include "services/gateway/http.h"

#include "lib/log.h"
#include "services/gateway/render.h"

#include <poll.h>

unsigned gw_http_status(cr_status_t st)
{
    switch (st) {
    case CR_OK: return MHD_HTTP_OK;
    case CR_E_INVALID: return MHD_HTTP_BAD_REQUEST;
    case CR_E_NOT_FOUND: return MHD_HTTP_NOT_FOUND;
    case CR_E_CANCELED: return 499; /* nginx's "client closed request" */
    case CR_E_BUSY: return MHD_HTTP_SERVICE_UNAVAILABLE;
    case CR_E_TOO_LARGE: return MHD_HTTP_CONTENT_TOO_LARGE;
    case CR_E_UNAUTHORIZED: return MHD_HTTP_UNAUTHORIZED;
    case CR_E_FORBIDDEN: return MHD_HTTP_FORBIDDEN;
    case CR_E_UNAVAILABLE: return MHD_HTTP_BAD_GATEWAY;
    default: return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
}

static void add_cors(gw_req_t *r, struct MHD_Response *resp)
{
    if (!r->allow_origin[0])
        return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin",
                            r->allow_origin);
    MHD_add_response_header(resp, "Vary", "Origin");
}

enum MHD_Result gw_reply_response(gw_req_t *r, unsigned status,
                                  struct MHD_Response *resp)
{
    add_cors(r, resp);
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    if (ret == MHD_YES) {
        r->responded = true;
        r->status = status;
    }
    return ret;
}

enum MHD_Result gw_reply(gw_req_t *r, unsigned status, const char *ctype,
                         const void *data, size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, (void *)(len ? data : ""), MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    if (ctype)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    enum MHD_Result ret = gw_reply_response(r, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

enum MHD_Result gw_reply_json(gw_req_t *r, unsigned status, const char *json,
                              size_t len)
{
    return gw_reply(r, status, "application/json; charset=utf-8", json, len);
}

enum MHD_Result gw_reply_error_http(gw_req_t *r, unsigned status,
                                    const char *text)
{
    cr_buf_t b;
    cr_buf_init(&b, 64 * 1024);
    if (gw_render_error(&b, text)) {
        cr_buf_reset(&b);
        cr_buf_puts(&b, "{\"error\":\"internal error\"}");
    }
    cr_log_debug("%s %s -> %u %s", r->method, r->path, status, text);
    enum MHD_Result ret = gw_reply_json(r, status, b.data, b.len);
    cr_buf_free(&b);
    return ret;
}

enum MHD_Result gw_reply_error(gw_req_t *r, cr_status_t st, const char *text)
{
    return gw_reply_error_http(r, gw_http_status(st), text);
}

bool gw_req_client_gone(const gw_req_t *r)
{
    if (r->fd < 0)
        return false;
    struct pollfd p = {.fd = r->fd, .events = POLLRDHUP};
    int n = poll(&p, 1, 0);
    return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

bool gw_req_should_abort(void *req)
{
    gw_req_t *r = req;
    return atomic_load(&r->ctx->stopping) || gw_req_client_gone(r);
}
