/* engine_capture.h: test helpers: a runner engine sink that keeps what one
 * request sent (its text, optionally its logprob entries) and how it
 * finished. */
#ifndef TESTS_UNIT_ENGINE_CAPTURE_H
#define TESTS_UNIT_ENGINE_CAPTURE_H

#include "lib/prelude.h"

#include <jansson.h>

#include "lib/buf.h"
#include "services/runner/engine.h"

typedef struct test_capture {
    cr_buf_t text;     /* cr_buf_init it before the start */
    json_t *logprobs;  /* every chunk's entries, in order; NULL: not kept */
    bool finished;
    cr_status_t st;
} test_capture_t;

static inline bool test_capture_chunk(void *ctx, const msg_chunk_body_t *c)
{
    test_capture_t *cp = ctx;
    if (c->response)
        cr_buf_puts(&cp->text, c->response);
    if (c->logprobs && cp->logprobs) {
        /* a random model's byte tokens include NUL */
        json_t *arr = json_loads(c->logprobs, JSON_ALLOW_NUL, NULL);
        if (json_is_array(arr))
            json_array_extend(cp->logprobs, arr);
        else
            json_array_append_new(cp->logprobs, json_string("not an array"));
        json_decref(arr);
    }
    return true;
}

static inline bool test_capture_canceled(void *ctx)
{
    (void)ctx;
    return false;
}

static inline void test_capture_finish(void *ctx, cr_status_t st, const msg_done_body_t *done,
                                       const cr_err_t *err)
{
    test_capture_t *cp = ctx;
    (void)done;
    (void)err;
    cp->finished = true;
    cp->st = st;
}

/* The sink that fills cp; pass test_capture_finish as the finish. */
static inline rn_sink_t test_capture_sink(test_capture_t *cp)
{
    return (rn_sink_t){cp, test_capture_chunk, test_capture_canceled};
}

#endif
