/* surface_ids.h: random ids for the answers of the newer API surfaces
 * (Anthropic's msg_/toolu_, the Responses API's resp_/msg_/fc_/call_/rs_).
 * Clients treat them as opaque; they only need to be unique. */
#ifndef GW_SURFACE_IDS_H
#define GW_SURFACE_IDS_H

#include "lib/prelude.h"

#define GW_SURFACE_ID_MAX 48 /* prefix (up to 16 bytes) + 24 hex + NUL */

/* Writes prefix and 24 random lowercase hex digits into out (cap bytes). */
void gw_surface_id(char *out, size_t cap, const char *prefix);

#endif
