/* console.h: the web console at /ui (chat, models, server), served from
 * files embedded in the gateway binary at build time
 * (services/gateway/ui/, cmake/embed_files.cmake).
 *
 * GET/HEAD /ui and /ui/ answer index.html; /ui/<name> answers the embedded
 * file of that name (one path segment; anything else is 404). Every answer
 * carries a strict Content-Security-Policy (scripts, styles, images and
 * requests from this origin only, no inline script, no framing), nosniff
 * and no-referrer. The files hold no data, so they are served without the
 * API key (auth.h); the page asks for the key and sends it with each API
 * request it makes. */
#ifndef GW_CONSOLE_H
#define GW_CONSOLE_H

#include "lib/prelude.h"
#include "services/gateway/routes.h"

typedef struct gw_console_asset {
    const char *name;          /* file name, no folder */
    const unsigned char *data; /* static; NUL after the last byte */
    size_t len;
} gw_console_asset_t;

/* The embedded files (generated: gw_console_assets.c in the build dir). */
extern const gw_console_asset_t gw_console_assets[];
extern const size_t gw_console_n_assets;

/* The header every console answer carries. */
#define GW_CONSOLE_CSP                                                        \
    "default-src 'none'; script-src 'self'; style-src 'self'; "               \
    "img-src 'self' data:; connect-src 'self'; base-uri 'none'; "             \
    "form-action 'none'; frame-ancestors 'none'"

/* The embedded file called name, or NULL. */
const gw_console_asset_t *gw_console_asset_find(const char *name);

/* Content-Type for a file name, by its extension
 * (application/octet-stream when unknown). */
const char *gw_console_content_type(const char *name);

/* The console's routes (static table). */
const gw_route_t *gw_console_routes(size_t *n);

#endif
