/* outbox.h: replies to gateways that never block the scheduler.
 *
 * Every reply to a gateway goes out without waiting (ZMQ_DONTWAIT on the
 * front ROUTER). When the gateway's queue for that connection is full (its
 * HTTP client reads slower than the model writes), the reply and every
 * later one for the same request wait here, in order, in a per-request
 * queue of at most cfg.stream_buffer_bytes, and are retried on every turn
 * of the loop. So a slow reader delays only its own stream; a request
 * whose queue would pass the bound is ended by the caller with an error
 * that follows what was queued (nothing is dropped without one). */
#ifndef SCH_OUTBOX_H
#define SCH_OUTBOX_H

#include "lib/prelude.h"

#include <czmq.h>

typedef struct sch_outbox sch_outbox_t;

typedef enum sch_out {
    SCH_OUT_SENT,   /* handed to zmq */
    SCH_OUT_QUEUED, /* waiting here behind a full gateway queue */
    SCH_OUT_GONE,   /* the gateway's connection is gone: dropped */
    SCH_OUT_OVER,   /* the request's queue is over its bound: dropped; the
                       caller ends the request (sch_outbox_close) */
} sch_out_t;

/* An outbox on `front` (borrowed; a ROUTER with ROUTER_MANDATORY) holding
 * at most max_bytes per request. NULL when out of memory. */
sch_outbox_t *sch_outbox_new(zsock_t *front, int64_t max_bytes);
void sch_outbox_destroy(sch_outbox_t **self_p);

/* Sends the encoded reply *frame_p (taken) for request `id` to `client`
 * (borrowed): now when nothing of that request waits, else behind it. */
sch_out_t sch_outbox_send(sch_outbox_t *o, zframe_t *client, const char *id,
                          zframe_t **frame_p);

/* Queues *frame_p (taken; the request's last reply, an error) behind what
 * waits for `id` even past the bound, and accepts nothing more for it.
 * With nothing waiting it is sent as sch_outbox_send would. */
sch_out_t sch_outbox_close(sch_outbox_t *o, zframe_t *client, const char *id,
                           zframe_t **frame_p);

/* Retries every waiting queue; a queue whose gateway is gone is dropped
 * and its request id reported through gone(arg, id). True while anything
 * still waits (the loop then polls more often). */
bool sch_outbox_flush(sch_outbox_t *o, void (*gone)(void *arg, const char *id),
                      void *arg);

/* True when replies for request `id` of gateway `client` wait here. */
bool sch_outbox_has(const sch_outbox_t *o, zframe_t *client, const char *id);

#endif
