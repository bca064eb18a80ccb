/* reg_capture.h: test helper: the replies an in-process registry server
 * gives (reg_server_handle's reply function), each first sent through the
 * codec so that every reply is known to encode and decode.
 *
 * A test may #define MAX_REPLIES before including this (default 256). */
#ifndef TESTS_UNIT_REG_CAPTURE_H
#define TESTS_UNIT_REG_CAPTURE_H

#include "lib/prelude.h"
#include "proto/msg.h"
#include "tests/unit/check.h"

#ifndef MAX_REPLIES
#define MAX_REPLIES 256
#endif

typedef struct capture {
    msg_t v[MAX_REPLIES];
    int n;
} capture_t;

static cr_status_t capture_fn(void *ctx, const msg_t *reply)
{
    capture_t *c = ctx;
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_err_t err;
    cr_status_t st = msg_encode(reply, &b, &err);
    CHECK_MSG(st == CR_OK, "reply %s does not encode: %s", msg_type_name(reply->type),
              err.msg);
    if (!st && c->n < MAX_REPLIES) {
        st = msg_decode(b.data, b.len, &c->v[c->n], &err);
        CHECK_MSG(st == CR_OK, "reply does not decode: %s", err.msg);
        if (!st)
            c->n++;
    }
    cr_buf_free(&b);
    return st;
}

static void capture_clear(capture_t *c)
{
    for (int i = 0; i < c->n; i++)
        msg_clear(&c->v[i]);
    c->n = 0;
}

#endif
