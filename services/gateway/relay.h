/* relay.h: carrying a multi-reply bus answer back to the HTTP client.
 *
 * generate/chat answers (chunk... done) and progress answers (create:
 * progress... ok) are relayed either as an NDJSON stream, one line per
 * reply, or, with stream:false, as one object made of everything
 * (concatenated text and thinking, accumulated tool calls and logprobs,
 * final metrics; for progress the last status).
 *
 * The HTTP status is decided by the first reply: an error before anything
 * was written is sent with its real status and an {"error"} body; once the
 * stream started, an error becomes a final {"error":"..."} line and the
 * status stays 200. A client that goes away mid-answer gets the request
 * canceled on the bus (`cancel` on the same socket). */
#ifndef GW_RELAY_H
#define GW_RELAY_H

#include "lib/prelude.h"
#include "services/gateway/call.h"
#include "services/gateway/http.h"
#include "services/gateway/render.h"

typedef enum gw_relay_kind {
    GW_RELAY_GENERATE, /* chunk* done -> /api/generate objects */
    GW_RELAY_CHAT,     /* chunk* done -> /api/chat objects */
    GW_RELAY_PROGRESS, /* progress* ok -> {"status",...} objects */
} gw_relay_kind_t;

/* Relays the answer to an already-sent request and queues the HTTP
 * response on r. Takes ownership of *call (nulls it). model (borrowed) is
 * echoed in generate/chat objects. wait bounds the silences. Returns what
 * the MHD access handler returns. */
enum MHD_Result gw_relay(gw_req_t *r, gw_relay_kind_t kind, const char *model,
                         bool stream, gw_call_t **call, const gw_wait_t *wait);

/* Other wire shapes for generate/chat answers (the OpenAI routes): the
 * relay still reads the bus, accumulates stream:false answers and decides
 * the status; these hooks write the bytes. */
typedef struct gw_relay_fmt {
    const char *content_type; /* of a streamed answer */
    /* Appends what one answer piece becomes: a streamed chunk (a->done
     * NULL), or the end (a->done set; with stream:false a holds everything
     * accumulated and the output is the whole reply body). */
    cr_status_t (*render)(void *arg, cr_buf_t *out, bool stream,
                          const gw_answer_t *a);
    /* Appends the last bytes of a stream that failed after it started. */
    cr_status_t (*stream_error)(void *arg, cr_buf_t *out, const char *msg);
    /* Answers an error before anything was sent. */
    enum MHD_Result (*error_reply)(gw_req_t *r, cr_status_t st,
                                   const char *msg);
    void (*free_arg)(void *arg); /* may be NULL */
} gw_relay_fmt_t;

/* gw_relay for a chunk* done answer written through fmt (borrowed; lives
 * as long as the server). Takes ownership of arg (fmt->free_arg) and of
 * *call, in every case. */
enum MHD_Result gw_relay_fmt(gw_req_t *r, const gw_relay_fmt_t *fmt,
                             void *arg, bool stream, gw_call_t **call,
                             const gw_wait_t *wait);

#endif
