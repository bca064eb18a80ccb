/* rerank.h: /api/rerank and /v1/rerank, scoring documents against a query.
 *
 * Body: {"model", "query", "documents": [string | {"text"}...], "top_n",
 * "return_documents", "truncate", "keep_alive", "options"}. The documents go
 * to the scheduler in one `rerank` message and come back as one score each
 * (a reranker's logit: higher is more relevant); the answer lists them in
 * llama.cpp's server shape, which Jina's and Cohere's clients read:
 *   {"model","object":"list","usage":{"prompt_tokens","total_tokens"},
 *    "results":[{"index","relevance_score",["document":{"text"}]}...]}
 * sorted by relevance_score, highest first (ties keep request order), cut
 * to top_n. A model without a reranker head is a 400 ("... does not
 * support rerank"). Errors: /api/rerank answers {"error":"..."}, /v1/rerank
 * OpenAI's {"error":{"message","type",...}}. */
#ifndef GW_RERANK_H
#define GW_RERANK_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/gateway/routes.h"

/* What the gateway does with the scores (the runner never sees these). */
typedef struct gw_rerank_opts {
    int64_t top_n;          /* 0 = all */
    bool return_documents;  /* default false, as Cohere */
} gw_rerank_opts_t;

/* Reads top_n and return_documents from a rerank body (len bytes).
 * CR_E_INVALID naming the field for a wrong type or top_n < 0. */
cr_status_t gw_rerank_opts_parse(const char *body, size_t len,
                                 gw_rerank_opts_t *out, cr_err_t *err);

/* Renders the answer: docs (borrowed, n of them) are the request's
 * documents, r the runner's scores. CR_E_PROTO when the scores are not one
 * float32 per document, CR_E_INTERNAL for a score that is not finite. */
cr_status_t gw_rerank_render(cr_buf_t *b, const char *model,
                             const char *const *docs, size_t n,
                             const msg_ranked_body_t *r,
                             const gw_rerank_opts_t *o, cr_err_t *err);

/* The two routes. */
const gw_route_t *gw_rerank_routes(size_t *n);

#endif
