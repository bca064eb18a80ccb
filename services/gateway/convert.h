/* convert.h: HTTP request bodies (JSON) -> bus messages, with Ollama's checks.
 *
 * Every field's JSON type is checked and a mismatch is reported the way Go's
 * encoding/json reports it for Ollama ("json: cannot unmarshal number into
 * Go struct field GenerateRequest.prompt of type string"). Options are typed
 * per §2 of the API reference ("option \"temperature\" must be of type
 * float32"; unknown keys ignored), keep_alive is a duration string or a
 * number of seconds, think a bool or level, format "json" or a schema
 * object (re-serialized), images valid base64. All errors are CR_E_INVALID
 * (HTTP 400) with the client-facing message in err->msg.
 *
 * It holds no model logic: whether a model exists or supports a feature is
 * the scheduler's and the registry's to say. */
#ifndef GW_CONVERT_H
#define GW_CONVERT_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"

typedef enum gw_api {
    GW_API_GENERATE,
    GW_API_CHAT,
    GW_API_EMBED,      /* /api/embed */
    GW_API_EMBEDDINGS, /* /api/embeddings (legacy, one prompt) */
    GW_API_SHOW,
    GW_API_COPY,
    GW_API_DELETE,
    GW_API_CREATE,
    GW_API_PULL,
    GW_API_PUSH,
    GW_API_RERANK,     /* /api/rerank and /v1/rerank */
} gw_api_t;

/* One parsed request. */
typedef struct gw_request {
    msg_t msg;         /* the bus message; owns all
                          its data in its arena */
    bool stream;       /* NDJSON (the default) or one object */
    const char *model; /* the model as the client spelled it (in msg's
                          arena); "" when the request has none */
} gw_request_t;

/* Parses body (len bytes, need not be NUL-terminated) for api into *out.
 * On CR_OK the caller owns *out (gw_request_clear). On error *out is
 * cleared and err->msg is the client's message: "missing request body",
 * the JSON decoder's message, a type error, "model is required", ... */
cr_status_t gw_request_parse(gw_api_t api, const char *body, size_t len,
                             gw_request_t *out, cr_err_t *err);

void gw_request_clear(gw_request_t *r);

/* True if digest matches ^sha256[:-][0-9a-fA-F]{64}$. */
bool gw_digest_is_valid(const char *digest);

#endif
