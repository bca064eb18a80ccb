/* extras.h: routes beyond Ollama's API: /api/tokenize, /api/detokenize,
 * the readiness route /api/health and the Prometheus /metrics.
 *
 * GET/HEAD /api/health pings the scheduler and the registry (each on its
 * own call, 1 s to answer): 200 {"status":"ok","scheduler":"ok",
 * "registry":"ok"} when both answer, else 503 with "unavailable" for the
 * silent ones and the status. Needs no API key (auth.c), like "/".
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
