/* outbox.h: replies to gateways that never block their sender.
 *
 * Every reply to a gateway goes out without waiting (ZMQ_DONTWAIT on a
 * ROUTER with ROUTER_MANDATORY: the scheduler's front, a runner's direct
 * socket). When the gateway's queue for that connection is full (its HTTP
 * client reads slower than the model writes), the reply and every later
 * one for the same request wait here, in order, in a per-request queue of
 * at most max_bytes, and are retried on every turn of the owner's loop. So
 * a slow reader delays only its own stream; a request whose queue would
 * pass the bound is ended by the caller with an error that follows what
 * was queued (nothing is dropped without one). */
#ifndef BUS_OUTBOX_H
#define BUS_OUTBOX_H

#include "lib/prelude.h"

#include <czmq.h>

typedef struct bus_outbox bus_outbox_t;

typedef enum bus_out {
    BUS_OUT_SENT,   /* handed to zmq */
    BUS_OUT_QUEUED, /* waiting here behind a full gateway queue */
    BUS_OUT_GONE,   /* the gateway's connection is gone: dropped */
    BUS_OUT_OVER,   /* the request's queue is over its bound: dropped; the
                       caller ends the request (bus_outbox_close) */
} bus_out_t;

/* An outbox on `front` (borrowed; a ROUTER with ROUTER_MANDATORY) holding
 * at most max_bytes per request. NULL when out of memory. */
bus_outbox_t *bus_outbox_new(zsock_t *front, int64_t max_bytes);
void bus_outbox_destroy(bus_outbox_t **self_p);

/* Sends the encoded reply *frame_p (taken) for request `id` to `client`
 * (borrowed): now when nothing of that request waits, else behind it. */
bus_out_t bus_outbox_send(bus_outbox_t *o, zframe_t *client, const char *id,
                          zframe_t **frame_p);

/* Queues *frame_p (taken; the request's last reply, an error) behind what
 * waits for `id` even past the bound, and accepts nothing more for it.
 * With nothing waiting it is sent as bus_outbox_send would. */
bus_out_t bus_outbox_close(bus_outbox_t *o, zframe_t *client, const char *id,
                           zframe_t **frame_p);

/* Retries every waiting queue; a queue whose gateway is gone is dropped
 * and its request id reported through gone(arg, id). True while anything
 * still waits (the loop then polls more often). */
bool bus_outbox_flush(bus_outbox_t *o, void (*gone)(void *arg, const char *id),
                      void *arg);

/* True when replies for request `id` of gateway `client` wait here. */
bool bus_outbox_has(const bus_outbox_t *o, zframe_t *client, const char *id);

#endif
