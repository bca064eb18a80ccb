/* extras.h: routes beyond Ollama's API: /api/tokenize, /api/detokenize
 * and the Prometheus /metrics.
 *
 * POST /api/tokenize {"model","content","options"?} -> {"tokens":[int...]}
 * POST /api/detokenize {"model","tokens":[int...]} -> {"text":"..."}
 * Both go to the scheduler as `tokenize` / `detokenize` (answered with
 * `tokens` / `text`); errors are Ollama-shaped ({"error":"..."}).
 * GET /metrics renders metrics.h's counters plus the scheduler's `ps`. */
#ifndef GW_EXTRAS_H
#define GW_EXTRAS_H

#include "lib/prelude.h"
#include "services/gateway/routes.h"

const gw_route_t *gw_extra_routes(size_t *n);

#endif
