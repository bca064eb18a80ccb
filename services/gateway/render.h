/* render.h: bus replies -> JSON text, in Ollama's shapes and key order.
 *
 * A small JSON writer (gw_jw_*) builds every object the gateway sends, so
 * key order, float formatting and string escaping match what Go's
 * encoding/json produces for Ollama: metric fields are omitted when zero,
 * floats use the shortest text that reads back to the same float32/float64,
 * `<`, `>` and `&` are escaped, invalid UTF-8 becomes U+FFFD, and
 * created_at is RFC 3339 UTC with a nanosecond fraction (trailing zeros
 * dropped, as Go's RFC3339Nano does).
 *
 * It does not parse requests (convert.h) or talk to sockets. Every function
 * appends to a cr_buf_t; a buffer that hits its cap makes the writer's
 * status CR_E_TOO_LARGE (or CR_E_NOMEM), which render functions return. */
#ifndef GW_RENDER_H
#define GW_RENDER_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "proto/msg.h"

#include <time.h>

#define GW_JW_MAX_DEPTH 128

/* ---- the writer ---- */

typedef struct gw_jw {
    cr_buf_t *b;                         /* borrowed */
    int depth;                           /* open objects/arrays */
    bool need_comma[GW_JW_MAX_DEPTH + 1];
    bool after_key;                      /* a key was written, value next */
    cr_status_t st;                      /* first error, sticky */
} gw_jw_t;

void gw_jw_init(gw_jw_t *w, cr_buf_t *b);
void gw_jw_obj(gw_jw_t *w);
void gw_jw_end_obj(gw_jw_t *w);
void gw_jw_arr(gw_jw_t *w);
void gw_jw_end_arr(gw_jw_t *w);
void gw_jw_key(gw_jw_t *w, const char *key);
void gw_jw_str(gw_jw_t *w, const char *s); /* NULL writes "" */
void gw_jw_strn(gw_jw_t *w, const char *s, size_t n);
void gw_jw_i64(gw_jw_t *w, int64_t v);
void gw_jw_bool(gw_jw_t *w, bool v);
void gw_jw_null(gw_jw_t *w);
void gw_jw_f32(gw_jw_t *w, float v); /* finite values only; else null */
void gw_jw_f64(gw_jw_t *w, double v);
/* Writes json verbatim as one value: the caller vouches it is valid JSON. */
void gw_jw_raw(gw_jw_t *w, const char *json, size_t len);

/* ---- pieces ---- */

/* RFC 3339 UTC with nanoseconds, trailing zeros trimmed:
 * "2024-05-01T10:00:00.5Z". out needs GW_TIME_BUF bytes. */
#define GW_TIME_BUF 40
char *gw_time_rfc3339(struct timespec ts, char *out);
/* The same for the current time. */
char *gw_time_now(char *out);

/* Go's %q of s (double-quoted, escaped) appended to b. */
cr_status_t gw_go_quote(cr_buf_t *b, const char *s, size_t n);

/* ---- whole replies ---- */

/* One answer object of /api/generate or /api/chat. For a streamed chunk
 * `done` is NULL; for the final object it points at the done message, and
 * response/thinking/tool_calls/logprobs hold either the last delta (stream)
 * or everything accumulated (stream:false). tool_calls and logprobs are
 * JSON array texts or NULL. */
typedef struct gw_answer {
    const char *response;
    const char *thinking;
    const char *tool_calls;
    const char *logprobs;
    const msg_done_body_t *done;
    /* corral's load progress line ("loading model"): an empty,
     * not-done object with this extra "status" field; NULL otherwise */
    const char *status;
} gw_answer_t;

/* {"model","created_at","response",["thinking"],"done",["done_reason"],
 *  ["context"],[metrics...],["tool_calls"],["logprobs"]}; a done with
 * rendered_template (_debug_render_only) gives Ollama's
 * {"model","created_at","response":"","done":false,"_debug_info":
 *  {"rendered_template",["image_count"]}} (chat: "message" with empty
 * role and content). */
cr_status_t gw_render_generate(cr_buf_t *b, const char *model,
                               const gw_answer_t *a);

/* {"model","created_at","message":{"role":"assistant","content",
 *  ["thinking"],["tool_calls"]},"done",["done_reason"],[metrics...],
 *  ["logprobs"]} */
cr_status_t gw_render_chat(cr_buf_t *b, const char *model,
                           const gw_answer_t *a);

/* {"status",["digest"],["total"],["completed"]} */
cr_status_t gw_render_progress(cr_buf_t *b, const msg_progress_body_t *p);

/* {"error":"<text>"} */
cr_status_t gw_render_error(cr_buf_t *b, const char *text);

/* {"models":[...]} for /api/tags and /api/ps. */
cr_status_t gw_render_tags(cr_buf_t *b, const msg_tags_reply_body_t *r);
cr_status_t gw_render_ps(cr_buf_t *b, const msg_ps_reply_body_t *r);

/* The members of one /api/ps entry (name, model, size, ..., host,
 * offload_error), written into the object w has open. */
void gw_render_loaded_fields(gw_jw_t *w, const msg_loaded_model_t *e);

/* /api/embed: {"model","embeddings":[[f32...]...],[metrics]}. Checks that
 * data holds n_inputs*dims float32s (CR_E_PROTO) and that every value is
 * finite (CR_E_INTERNAL "embedding contains NaN or Inf values"). */
cr_status_t gw_render_embed(cr_buf_t *b, const char *model,
                            const msg_embeddings_body_t *e, cr_err_t *err);

/* /api/embeddings (legacy): {"embedding":[f64...]} of the first input, or
 * [] when there is none. Same checks. */
cr_status_t gw_render_embedding(cr_buf_t *b, const msg_embeddings_body_t *e,
                                cr_err_t *err);

#endif
