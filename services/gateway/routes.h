/* routes.h: the native API route table and its handlers.
 *
 * Each route names its path, the methods it serves, and a handler that runs
 * once the request body is in (server.c reads JSON bodies into r->body). A
 * route that streams its body (POST /api/blobs/:digest) also has begin and
 * data hooks that run while the body arrives. Handlers turn the body into a
 * bus message (convert.h), exchange it with the scheduler or the registry
 * (call.h), and answer (render.h, relay.h). */
#ifndef GW_ROUTES_H
#define GW_ROUTES_H

#include "lib/prelude.h"
#include "services/gateway/http.h"

enum {
    GW_M_GET = 1,
    GW_M_HEAD = 2,
    GW_M_POST = 4,
    GW_M_DELETE = 8,
};

typedef struct gw_route {
    const char *path;  /* exact path, or the prefix before the parameter */
    bool has_param;    /* path + one non-empty segment (":digest") */
    unsigned methods;  /* GW_M_* */
    /* Runs when the whole request is in. */
    enum MHD_Result (*handler)(gw_req_t *r);
    /* Streamed bodies (POST only; NULL = JSON body into r->body): begin
     * runs after the headers and may reply early; data gets each piece. A
     * data hook that fails records the error and lets the rest drain. */
    enum MHD_Result (*body_begin)(gw_req_t *r);
    enum MHD_Result (*body_data)(gw_req_t *r, const char *data, size_t n);
} gw_route_t;

typedef enum gw_route_result {
    GW_ROUTE_FOUND,
    GW_ROUTE_NOT_FOUND,    /* 404 "404 page not found" */
    GW_ROUTE_BAD_METHOD,   /* 405 "405 method not allowed" */
} gw_route_result_t;

/* Finds the route for path and method; copies a path parameter into param
 * (cap bytes). *route is set for GW_ROUTE_FOUND. */
gw_route_result_t gw_route_find(const char *path, const char *method,
                                const gw_route_t **route, char *param,
                                size_t cap);

/* GW_M_* bit of a method name, 0 if none. */
unsigned gw_method_bit(const char *method);

#endif
