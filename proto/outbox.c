/* outbox.c: per-request queues of replies a gateway could not take yet
 * (see outbox.h). */
#include "lib/prelude.h"
#include "proto/outbox.h"

#include "proto/msg.h"

typedef struct item {
    zframe_t *frame;
    struct item *next;
} item_t;

typedef struct queue {
    char id[MSG_ID_MAX + 1];
    zframe_t *client; /* owned copy of the gateway identity */
    item_t *head, *tail;
    int64_t bytes;
    bool closed; /* its last reply is queued: nothing more */
    struct queue *next;
} queue_t;

struct bus_outbox {
    zsock_t *front;
    int64_t max_bytes;
    queue_t *list;
};

bus_outbox_t *bus_outbox_new(zsock_t *front, int64_t max_bytes)
{
    bus_outbox_t *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->front = front;
    o->max_bytes = max_bytes;
    return o;
}

static void queue_free(queue_t *q)
{
    item_t *next;
    for (item_t *it = q->head; it; it = next) {
        next = it->next;
        zframe_destroy(&it->frame);
        free(it);
    }
    zframe_destroy(&q->client);
    free(q);
}

void bus_outbox_destroy(bus_outbox_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    bus_outbox_t *o = *self_p;
    queue_t *next;
    for (queue_t *q = o->list; q; q = next) {
        next = q->next;
        queue_free(q);
    }
    free(o);
    *self_p = NULL;
}

/* The queue of request `id` from gateway `client` (both: ids are the
 * gateway's, and an error to an unreadable frame has none). */
static queue_t *find(const bus_outbox_t *o, zframe_t *client, const char *id)
{
    for (queue_t *q = o->list; q; q = q->next)
        if (!strcmp(q->id, id) && zframe_eq(q->client, client))
            return q;
    return NULL;
}

/* One attempt, never blocking: SENT, QUEUED (the gateway's queue is full:
 * try again later) or GONE. The frame is kept unless SENT. */
static bus_out_t try_send(bus_outbox_t *o, zframe_t *client, zframe_t *frame)
{
    void *z = zsock_resolve(o->front);
    if (zmq_send(z, zframe_data(client), zframe_size(client),
                 ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0)
        return zmq_errno() == EAGAIN ? BUS_OUT_QUEUED : BUS_OUT_GONE;
    /* The identity part passed the peer's queue check: the body goes. */
    if (zmq_send(z, zframe_data(frame), zframe_size(frame), ZMQ_DONTWAIT) < 0)
        return BUS_OUT_GONE;
    return BUS_OUT_SENT;
}

static bool push(queue_t *q, zframe_t **frame_p)
{
    item_t *it = calloc(1, sizeof *it);
    if (!it)
        return false;
    it->frame = *frame_p;
    *frame_p = NULL;
    q->bytes += (int64_t)zframe_size(it->frame);
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    return true;
}

static queue_t *queue_new(bus_outbox_t *o, zframe_t *client, const char *id)
{
    queue_t *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    snprintf(q->id, sizeof q->id, "%s", id);
    q->client = zframe_dup(client);
    if (!q->client) {
        free(q);
        return NULL;
    }
    q->next = o->list;
    o->list = q;
    return q;
}

static void unlink_queue(bus_outbox_t *o, queue_t *q)
{
    for (queue_t **pp = &o->list; *pp; pp = &(*pp)->next)
        if (*pp == q) {
            *pp = q->next;
            break;
        }
    queue_free(q);
}

static bus_out_t send_or_queue(bus_outbox_t *o, zframe_t *client,
                               const char *id, zframe_t **frame_p, bool last)
{
    queue_t *q = find(o, client, id);
    if (q && q->closed) {
        zframe_destroy(frame_p); /* after its last reply: nothing to say */
        return BUS_OUT_SENT;
    }
    if (!q) {
        bus_out_t r = try_send(o, client, *frame_p);
        if (r != BUS_OUT_QUEUED) {
            zframe_destroy(frame_p); /* sent (a copy) or nobody to take it */
            return r;
        }
        if (!(q = queue_new(o, client, id))) {
            zframe_destroy(frame_p);
            return BUS_OUT_OVER;
        }
    }
    if (!last && q->bytes + (int64_t)zframe_size(*frame_p) > o->max_bytes) {
        zframe_destroy(frame_p);
        return BUS_OUT_OVER;
    }
    if (!push(q, frame_p)) {
        zframe_destroy(frame_p);
        return BUS_OUT_OVER;
    }
    q->closed |= last;
    return BUS_OUT_QUEUED;
}

bus_out_t bus_outbox_send(bus_outbox_t *o, zframe_t *client, const char *id,
                          zframe_t **frame_p)
{
    return send_or_queue(o, client, id, frame_p, false);
}

bus_out_t bus_outbox_close(bus_outbox_t *o, zframe_t *client, const char *id,
                           zframe_t **frame_p)
{
    return send_or_queue(o, client, id, frame_p, true);
}

bool bus_outbox_flush(bus_outbox_t *o, void (*gone)(void *arg, const char *id),
                      void *arg)
{
    queue_t *next;
    for (queue_t *q = o->list; q; q = next) {
        next = q->next;
        bus_out_t r = BUS_OUT_SENT;
        while (q->head && (r = try_send(o, q->client, q->head->frame)) ==
                              BUS_OUT_SENT) {
            item_t *it = q->head;
            q->head = it->next;
            if (!q->head)
                q->tail = NULL;
            q->bytes -= (int64_t)zframe_size(it->frame);
            zframe_destroy(&it->frame);
            free(it);
        }
        if (r == BUS_OUT_GONE) {
            char id[MSG_ID_MAX + 1];
            snprintf(id, sizeof id, "%s", q->id);
            unlink_queue(o, q);
            if (gone)
                gone(arg, id);
        } else if (!q->head) {
            unlink_queue(o, q);
        }
    }
    return o->list != NULL;
}

bool bus_outbox_has(const bus_outbox_t *o, zframe_t *client, const char *id)
{
    return find(o, client, id) != NULL;
}
