/* console.c: the web console's files (see console.h). */
#include "lib/prelude.h"
#include "services/gateway/console.h"

#include "services/gateway/console_status.h"
#include "services/gateway/http.h"

const gw_console_asset_t *gw_console_asset_find(const char *name)
{
    for (size_t i = 0; i < gw_console_n_assets; i++)
        if (!strcmp(gw_console_assets[i].name, name))
            return &gw_console_assets[i];
    return NULL;
}

const char *gw_console_content_type(const char *name)
{
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < CR_ARRAY_LEN(types); i++)
        if (!strcmp(dot, types[i].ext))
            return types[i].type;
    return "application/octet-stream";
}

static enum MHD_Result send_asset(gw_req_t *r, const gw_console_asset_t *a)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        a->len, (void *)a->data, MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            gw_console_content_type(a->name));
    MHD_add_response_header(resp, "Content-Security-Policy", GW_CONSOLE_CSP);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(resp, "X-Frame-Options", "DENY");
    /* Revalidated each load: a new gateway's console is seen at once. */
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    enum MHD_Result ret = gw_reply_response(r, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result not_found(gw_req_t *r)
{
    static const char text[] = "404 page not found";
    return gw_reply(r, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", text,
                    sizeof text - 1);
}

static enum MHD_Result h_index(gw_req_t *r)
{
    const gw_console_asset_t *a = gw_console_asset_find("index.html");
    return a ? send_asset(r, a) : not_found(r);
}

static enum MHD_Result h_file(gw_req_t *r)
{
    const gw_console_asset_t *a = gw_console_asset_find(r->param);
    return a ? send_asset(r, a) : not_found(r);
}

static const gw_route_t routes[] = {
    {"/ui", false, GW_M_GET | GW_M_HEAD, h_index, NULL, NULL},
    {"/ui/", false, GW_M_GET | GW_M_HEAD, h_index, NULL, NULL},
    {"/ui/", true, GW_M_GET | GW_M_HEAD, h_file, NULL, NULL},
    {"/api/console/status", false, GW_M_GET, gw_console_status, NULL, NULL},
};

const gw_route_t *gw_console_routes(size_t *n)
{
    *n = CR_ARRAY_LEN(routes);
    return routes;
}
