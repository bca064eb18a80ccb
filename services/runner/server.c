/* server.c: the runner's bus loop (hello, load, requests, cancel, shutdown).
 *
 * Generate and chat requests run in the engine's slots (num_parallel of
 * them) at once: while any runs, the loop alternates reading every waiting
 * message (without blocking) with one engine step (one forward pass for all
 * slots). A cancel ends that request alone; a shutdown ends them all and
 * the loop; pings are answered between steps. Requests beyond the slots
 * (the scheduler sends at most num_parallel, so only around a restart) wait
 * in a small queue for a free slot. Embeddings run at once in a free slot;
 * tokenize and detokenize need none. */
#include "lib/prelude.h"
#include "services/runner/server.h"

#include <unistd.h>

#include "lib/duration.h"
#include "lib/env.h"
#include "lib/log.h"
#include "proto/bus.h"
#include "proto/bus_poll.h"
#include "services/runner/direct.h"
#include "services/runner/engine.h"

#define DEFERRED_MAX 1024 /* requests waiting for a free slot */
#define DRAIN_MAX 256     /* messages read between two steps, at most */
/* A runner says hello again, with the model it holds, as soon as its
 * connection to the scheduler's endpoint is made again (a zmonitor on its
 * DEALER reports CONNECTED: a restarted scheduler bound the endpoint), and
 * when the scheduler side asks with a hello of its own (a node agent that
 * rejoined its scheduler), so a new scheduler adopts it without a reload
 * within moments of starting. As a fallback (no monitor), the scheduler
 * pings an idle runner every CORRAL_HEARTBEAT_INTERVAL (default 5 s) that
 * has been quiet, so while a runner works it hears nothing, and its
 * silence is counted from the end of its work: idle and unheard for three
 * intervals, a runner says hello again, once an interval. Unheard for
 * CORRAL_RUNNER_ORPHAN_TIMEOUT seconds (default 60) it exits, so no runner
 * outlives its scheduler for good. */
#define HEARTBEAT_MS_DEFAULT 5000
#define ORPHAN_MS_DEFAULT 60000

struct rn_server {
    zsock_t *sock;
    zactor_t *monitor;    /* CONNECTED events of sock; NULL if unavailable */
    bus_poll_t poll;      /* sock, monitor and direct's descriptor */
    rn_direct_t *direct;  /* direct replies to gateways; NULL: none */
    int connects;         /* CONNECTED events seen */
    char id[MSG_ID_MAX + 1];
    rn_engine_t *engine;
    zlist_t *deferred; /* msg_t* waiting to run (owned) */
    int64_t heard_ms;     /* last message from the scheduler (monotonic) */
    int64_t rehello_ms;   /* last hello sent while unheard */
    int64_t orphan_ms;    /* silence after which the runner exits */
    int64_t heartbeat_ms; /* the scheduler's ping interval */
    msg_t load_msg;       /* the load it answered, for hellos after it */
    bool shutdown;
    int64_t sends;        /* messages sent on sock (send_msg) */
    int64_t sends_marked; /* sends, with direct's, when sock was last marked */
    /* The embed request running now (synchronously), for its sink. */
    const char *running_id;
    bool running_canceled;
    /* One record per slot: the request a slot runs, for its sink. */
    struct req_rec *recs; /* [n_recs] */
    rn_direct_req_t **dqs; /* [n_recs]: each record's direct side */
    int n_recs;
};

/* A generate or chat request in a slot: the sink's and finish's ctx. */
typedef struct req_rec {
    rn_server_t *s;
    bool busy;
    bool canceled;
    bool send_failed; /* a chunk could not be sent: the request ends */
    char id[MSG_ID_MAX + 1];
    rn_direct_req_t dq; /* its direct replies (direct.h) */
} req_rec_t;

static cr_status_t send_msg(rn_server_t *s, const msg_t *m)
{
    cr_err_t err;
    s->sends++;
    cr_status_t st = bus_send(s->sock, m, &err);
    if (st)
        cr_log_warn("send %s failed: %s", msg_type_name(m->type), err.msg);
    return st;
}

static void send_error(rn_server_t *s, const char *id, cr_status_t st,
                       const char *text);

/* Sends a request's last reply. One that cannot go (over the bus's frame
 * or array limits) becomes an error, so the request still ends: a reply
 * that is never sent would leave it running in the scheduler for good. */
static void send_final(rn_server_t *s, const msg_t *m)
{
    if (send_msg(s, m) == CR_OK)
        return;
    char text[200];
    snprintf(text, sizeof text,
             "the %s reply is too large to send (over %u bytes or %u "
             "elements in one array)",
             msg_type_name(m->type), MSG_FRAME_MAX, MSG_MAX_ARRAY);
    msg_t e;
    msg_make_error(&e, m->id, CR_E_TOO_LARGE, "%s", text);
    if (m->type == MSG_done && m->u.done.has_direct_chunks) {
        e.u.error.direct_chunks = m->u.done.direct_chunks;
        e.u.error.has_direct_chunks = true;
    }
    send_msg(s, &e);
    msg_clear(&e);
}

static int64_t mono_ms(void)
{
    return zclock_mono();
}

/* hello, with the model this runner holds once it holds one. */
static void send_hello(rn_server_t *s)
{
    msg_t m;
    msg_init(&m, MSG_hello, s->id);
    msg_hello_body_t *h = &m.u.hello;
    h->runner_id = s->id;
    h->has_runner_id = true;
    h->pid = getpid();
    h->has_pid = true;
    if (s->direct) {
        h->direct = (char *)rn_direct_endpoint(s->direct); /* only encoded */
        h->has_direct = true;
    }
    if (s->engine && s->load_msg.type == MSG_load) {
        const msg_load_body_t *ld = &s->load_msg.u.load;
        h->name = ld->name;
        h->has_name = true;
        h->model_path = ld->model_path;
        h->has_model_path = true;
        h->options = ld->options;
        h->has_options = ld->options != NULL;
        h->num_parallel = ld->has_num_parallel ? ld->num_parallel : 1;
        h->has_num_parallel = true;
        h->size = rn_engine_size_bytes(s->engine);
        h->has_size = true;
        h->size_vram = rn_engine_vram_bytes(s->engine);
        h->has_size_vram = true;
        h->context_length = rn_engine_ctx(s->engine);
        h->has_context_length = true;
        const char *why = rn_engine_offload_error(s->engine);
        if (*why) {
            h->offload_error = (char *)why; /* borrowed: only encoded */
            h->has_offload_error = true;
        }
    }
    send_msg(s, &m);
}

/* Reads the monitor's events; a connection made after the first one is a
 * scheduler back on the endpoint (restarted): hello again at once. */
static void on_monitor(rn_server_t *s)
{
    while (s->monitor && (zsock_events(zactor_sock(s->monitor)) & ZMQ_POLLIN)) {
        zmsg_t *ev = zmsg_recv(s->monitor);
        if (!ev)
            return;
        char *name = zmsg_popstr(ev);
        if (name && !strcmp(name, "CONNECTED") && ++s->connects > 1) {
            cr_log_info("connected to the scheduler again; saying hello");
            send_hello(s);
        }
        free(name);
        zmsg_destroy(&ev);
    }
}

static void send_error(rn_server_t *s, const char *id, cr_status_t st,
                       const char *text)
{
    msg_t m;
    msg_make_error(&m, id, st, "%s", text);
    send_msg(s, &m);
    msg_clear(&m);
}

/* A cancel: flags the running request with that id (its slot ends at the
 * next step) or drops it from the queue. */
static void cancel_request(rn_server_t *s, const char *id)
{
    if (s->running_id && !strcmp(id, s->running_id))
        s->running_canceled = true;
    for (int i = 0; i < s->n_recs; i++)
        if (s->recs[i].busy && !strcmp(s->recs[i].id, id))
            s->recs[i].canceled = true;
    for (msg_t *q = zlist_first(s->deferred); q; q = zlist_next(s->deferred)) {
        if (!strcmp(q->id, id)) {
            zlist_remove(s->deferred, q);
            send_error(s, id, CR_E_CANCELED, "request canceled");
            msg_clear(q);
            free(q);
            return;
        }
    }
}

/* The gateway cannot reach our direct socket for request id: a request
 * still queued starts unrouted; one waiting for its attach falls back now
 * (direct.h). */
static void no_route(rn_server_t *s, const char *id)
{
    for (msg_t *q = zlist_first(s->deferred); q; q = zlist_next(s->deferred))
        if (!strcmp(q->id, id) && (q->type == MSG_generate || q->type == MSG_chat)) {
            q->u.request.direct = false;
            return;
        }
    rn_direct_unroute(s->direct, s->dqs, s->n_recs, id);
}

/* One message from the scheduler while slots run: cancels and shutdown
 * take effect, pings are answered, requests are queued. Takes m. */
static void take_busy(rn_server_t *s, msg_t *m)
{
    s->heard_ms = mono_ms();
    if (m->type == MSG_cancel) {
        cancel_request(s, m->id);
    } else if (m->type == MSG_no_route) {
        no_route(s, m->id);
    } else if (m->type == MSG_shutdown) {
        s->shutdown = true;
    } else if (m->type == MSG_ping) {
        msg_t pong;
        msg_init(&pong, MSG_pong, m->id);
        send_msg(s, &pong);
    } else if (m->type == MSG_hello) {
        send_hello(s); /* who is there? */
    } else if (zlist_size(s->deferred) < DEFERRED_MAX) {
        msg_t *copy = malloc(sizeof *copy);
        if (copy) {
            *copy = *m; /* ownership moves into the queue */
            zlist_append(s->deferred, copy);
            return;
        }
        send_error(s, m->id, CR_E_NOMEM, "out of memory");
    } else {
        send_error(s, m->id, CR_E_BUSY, "runner queue is full");
    }
    msg_clear(m);
}

/* Reads whatever is waiting, without blocking, between two steps. One
 * poll() of the DEALER's, the monitor's and the direct socket's
 * descriptors says which have anything (proto/bus_poll.h); libzmq is
 * asked only about a socket whose descriptor fired, or that was sent on
 * since the last look (a send may take the command that would have fired
 * it). So a step with nothing new costs that one system call, where
 * asking each socket and the direct socket cost five: at a GPU's pace a
 * token is a few hundred microseconds, and each call about one. */
static void drain_inbox(rn_server_t *s)
{
    int64_t sends = s->sends + rn_direct_sched_sends(s->direct);
    if (sends != s->sends_marked) {
        bus_poll_mark(&s->poll, s->sock);
        s->sends_marked = sends;
    }
    for (int i = 0; i < DRAIN_MAX; i++) {
        zsock_t *which = bus_poll_wait(&s->poll, 0);
        if (!which) {
            if (zsys_interrupted) /* SIGTERM: not a stray EINTR */
                s->shutdown = true;
            break;
        }
        if (which == BUS_POLL_FD) {
            rn_direct_read(s->direct, s->dqs, s->n_recs);
            continue;
        }
        if (s->monitor && which == zactor_sock(s->monitor)) {
            on_monitor(s);
            continue;
        }
        msg_t m;
        cr_err_t err;
        cr_status_t st = bus_recv(s->sock, 0, &m, NULL, &err);
        if (st == CR_E_CANCELED) {
            s->shutdown = true;
            break;
        }
        if (st == CR_OK)
            take_busy(s, &m);
        else if (st != CR_E_TIMEOUT)
            cr_log_warn("bad message from the scheduler: %s", err.msg);
    }
    if (s->direct)
        rn_direct_tick(s->direct, s->dqs, s->n_recs);
}

/* A slot's last reply (done or error). With direct replies the count of
 * chunks that went direct goes on it, or it waits with the held chunks
 * for their attach (direct.h). */
static void send_last(rn_server_t *s, rn_direct_req_t *dq, msg_t *m)
{
    if (s->direct && rn_direct_end(s->direct, dq, m))
        return;
    if (m->type == MSG_done)
        send_final(s, m);
    else
        send_msg(s, m);
}

static bool slot_canceled(void *ctx);

static bool slot_chunk(void *ctx, const msg_chunk_body_t *chunk)
{
    req_rec_t *rec = ctx;
    msg_t m;
    msg_init(&m, MSG_chunk, rec->id);
    m.u.chunk = *chunk;
    if (rec->s->direct) {
        /* gone or over the bound: direct.h says which, finish tells */
        if (!rn_direct_chunk(rec->s->direct, &rec->dq, &m) && !rec->dq.gone &&
            !rec->dq.over)
            rec->send_failed = true;
    } else if (send_msg(rec->s, &m)) {
        rec->send_failed = true; /* its text would be lost: end it */
    }
    return !slot_canceled(rec);
}

static bool slot_canceled(void *ctx)
{
    req_rec_t *rec = ctx;
    return rec->canceled || rec->send_failed || rec->dq.gone || rec->dq.over ||
           rec->s->shutdown;
}

static void slot_finish(void *ctx, cr_status_t st, const msg_done_body_t *done,
                        const cr_err_t *err)
{
    req_rec_t *rec = ctx;
    rn_server_t *s = rec->s;
    msg_t m;
    char text[200];
    if (st == CR_OK) {
        msg_init(&m, MSG_done, rec->id);
        m.u.done = *done;
    } else if (rec->send_failed) {
        cr_log_warn("request %s: a chunk could not be sent; ended", rec->id);
        msg_make_error(&m, rec->id, CR_E_TOO_LARGE, "a reply chunk is too large to send");
    } else if (rec->dq.over) {
        /* The scheduler's words for the same case (sched.c req_forward). */
        snprintf(text, sizeof text,
                 "the client reads too slowly: more than %" PRId64
                 " bytes of output were waiting for it; request canceled",
                 rn_direct_max_bytes(s->direct));
        cr_log_warn("request %s: %s", rec->id, text);
        msg_make_error(&m, rec->id, CR_E_BUSY, "%s", text);
    } else if (st == CR_E_CANCELED) {
        cr_log_info("request %s canceled", rec->id);
        msg_make_error(&m, rec->id, CR_E_CANCELED, "request canceled");
    } else {
        const char *why = err && err->msg[0] ? err->msg : cr_status_str(st);
        cr_log_warn("request %s failed: %s", rec->id, why);
        msg_make_error(&m, rec->id, st, "%s", why);
    }
    send_last(s, &rec->dq, &m);
    if (m.type == MSG_error)
        msg_clear(&m);
    rec->busy = false;
}

static bool sink_chunk(void *ctx, const msg_chunk_body_t *chunk)
{
    rn_server_t *s = ctx;
    msg_t m;
    msg_init(&m, MSG_chunk, s->running_id);
    m.u.chunk = *chunk;
    if (send_msg(s, &m))
        s->running_canceled = true; /* nobody will see the rest */
    return !s->running_canceled && !s->shutdown;
}

static bool sink_canceled(void *ctx)
{
    rn_server_t *s = ctx;
    drain_inbox(s);
    return s->running_canceled || s->shutdown;
}

static void handle_load(rn_server_t *s, const msg_t *m)
{
    if (s->engine) {
        send_error(s, s->id, CR_E_INVALID, "a model is already loaded");
        return;
    }
    cr_err_t err;
    cr_err_clear(&err);
    if (rn_engine_load(&m->u.load, &s->engine, &err)) {
        cr_log_error("load %s: %s", m->u.load.name, err.msg);
        send_error(s, s->id, err.status, err.msg);
        return;
    }
    s->n_recs = rn_engine_slots(s->engine);
    s->recs = calloc((size_t)s->n_recs, sizeof *s->recs);
    s->dqs = calloc((size_t)s->n_recs, sizeof *s->dqs);
    if (!s->recs || !s->dqs) {
        free(s->recs);
        free(s->dqs);
        s->recs = NULL;
        s->dqs = NULL;
        rn_engine_destroy(&s->engine);
        s->n_recs = 0;
        send_error(s, s->id, CR_E_NOMEM, "out of memory for the slots");
        return;
    }
    for (int i = 0; i < s->n_recs; i++) {
        s->recs[i].s = s;
        s->dqs[i] = &s->recs[i].dq;
    }
    msg_t wrap;
    msg_init(&wrap, MSG_load, s->id);
    wrap.u.load = m->u.load;
    if (msg_copy(&wrap, &s->load_msg))
        cr_log_warn("cannot keep the load message; a restarted scheduler "
                    "will not adopt this runner");
    msg_t r;
    msg_init(&r, MSG_ready, s->id);
    r.u.ready.size = rn_engine_size_bytes(s->engine);
    r.u.ready.has_size = true;
    r.u.ready.size_vram = rn_engine_vram_bytes(s->engine);
    r.u.ready.has_size_vram = true;
    r.u.ready.gpu_layers = rn_engine_gpu_layers(s->engine);
    r.u.ready.has_gpu_layers = true;
    r.u.ready.context_length = rn_engine_ctx(s->engine);
    r.u.ready.has_context_length = true;
    const char *why = rn_engine_offload_error(s->engine);
    if (*why) {
        r.u.ready.offload_error = (char *)why; /* borrowed: only encoded */
        r.u.ready.has_offload_error = true;
    }
    send_msg(s, &r);
    cr_log_info("loaded %s (%" PRId64 " bytes, ctx %" PRId64 ", %d slots)",
                m->u.load.name, r.u.ready.size, r.u.ready.context_length,
                s->n_recs);
}

/* tokenize / detokenize: quick, no generation slot. */
static void handle_tokens(rn_server_t *s, const msg_t *m)
{
    cr_err_t err;
    cr_err_clear(&err);
    msg_t r;
    cr_status_t st;
    if (m->type == MSG_tokenize) {
        int32_t *ids = NULL;
        size_t n = 0;
        st = rn_engine_tokenize(s->engine, m->u.tokenize.content, &ids, &n,
                                &err);
        if (!st && n > MSG_MAX_ARRAY)
            st = cr_err_set(&err, CR_E_TOO_LARGE,
                            "content is %zu tokens; a tokenize reply carries "
                            "at most %u",
                            n, MSG_MAX_ARRAY);
        msg_init(&r, MSG_tokens, m->id);
        r.u.tokens.tokens.v = ids;
        r.u.tokens.tokens.n = n;
        r.u.tokens.has_tokens = true;
        if (!st)
            send_final(s, &r);
        free(ids);
    } else {
        char *text = NULL;
        st = rn_engine_detokenize(s->engine, m->u.detokenize.tokens.v,
                                  m->u.detokenize.tokens.n, &text, &err);
        msg_init(&r, MSG_text, m->id);
        r.u.text.text = text;
        r.u.text.has_text = true;
        if (!st)
            send_final(s, &r);
        free(text);
    }
    if (st)
        send_error(s, m->id, st, err.msg[0] ? err.msg : cr_status_str(st));
}

/* A rerank runs at once, like an embed: one score per document. A model
 * that is not a reranker is the client's mistake (400), not ours. */
static void handle_rerank(rn_server_t *s, const msg_t *m)
{
    const msg_rerank_body_t *q = &m->u.rerank;
    size_t n = q->documents.n;
    float *scores = malloc((n ? n : 1) * sizeof *scores);
    cr_err_t err;
    cr_err_clear(&err);
    int64_t n_tokens = 0;
    bool truncate = !q->has_truncate || q->truncate;
    cr_status_t st = scores ? CR_OK : cr_err_set(&err, CR_E_NOMEM, "out of memory");
    if (!st)
        st = rn_engine_rerank(s->engine, q->query, (const char *const *)q->documents.v, n,
                              truncate, scores, &n_tokens, &err);
    if (st == CR_E_UNSUPPORTED) {
        st = CR_E_INVALID;
        cr_err_set(&err, st, "\"%s\" does not support rerank: %s", q->model, err.msg);
    }
    if (!st) {
        msg_t r;
        msg_init(&r, MSG_ranked, m->id);
        r.u.ranked.scores.data = (uint8_t *)scores;
        r.u.ranked.scores.len = n * sizeof *scores;
        r.u.ranked.has_scores = true;
        r.u.ranked.prompt_eval_count = n_tokens;
        r.u.ranked.has_prompt_eval_count = true;
        send_msg(s, &r);
    } else {
        send_error(s, m->id, st, err.msg[0] ? err.msg : cr_status_str(st));
    }
    free(scores);
}

static void handle_request(rn_server_t *s, const msg_t *m)
{
    if (!s->engine) {
        send_error(s, m->id, CR_E_RUNNER, "no model is loaded");
        return;
    }
    s->running_id = m->id;
    s->running_canceled = false;
    rn_sink_t sink = {s, sink_chunk, sink_canceled};
    cr_err_t err;
    cr_err_clear(&err);
    if (m->type == MSG_tokenize || m->type == MSG_detokenize) {
        handle_tokens(s, m);
        s->running_id = NULL;
        return;
    }
    if (m->type == MSG_embed) {
        msg_t r;
        msg_init(&r, MSG_embeddings, m->id);
        cr_status_t st = rn_engine_embed(s->engine, &m->u.embed, &sink,
                                         &r.u.embeddings, &err);
        if (st == CR_OK)
            send_final(s, &r);
        else
            send_error(s, m->id, st, err.msg[0] ? err.msg : cr_status_str(st));
        s->running_id = NULL;
        return;
    }
    if (m->type == MSG_rerank) {
        handle_rerank(s, m);
        s->running_id = NULL;
        return;
    }
    s->running_id = NULL;
    req_rec_t *rec = NULL;
    for (int i = 0; i < s->n_recs && !rec; i++)
        if (!s->recs[i].busy)
            rec = &s->recs[i];
    if (!rec) {
        send_error(s, m->id, CR_E_BUSY, "no free slot");
        return;
    }
    snprintf(rec->id, sizeof rec->id, "%s", m->id);
    rec->canceled = false;
    rec->send_failed = false;
    /* The scheduler sets `direct` only when it told the gateway to attach. */
    rn_direct_begin(s->direct, &rec->dq, m->id,
                    (m->type == MSG_generate || m->type == MSG_chat) &&
                        m->u.request.has_direct && m->u.request.direct);
    rn_sink_t slot_sink = {rec, slot_chunk, slot_canceled};
    rec->busy = true; /* before: a render-only request finishes inside */
    cr_status_t st = rn_engine_start(s->engine, m, &slot_sink, slot_finish, &err);
    if (st) {
        rec->busy = false;
        cr_log_warn("request %s failed: %s", m->id, err.msg);
        msg_t e;
        msg_make_error(&e, m->id, st, "%s", err.msg[0] ? err.msg : cr_status_str(st));
        send_last(s, &rec->dq, &e);
        msg_clear(&e);
        return;
    }
}

static void handle(rn_server_t *s, msg_t *m);

/* True when m can run now: requests that need a slot wait for one. */
static bool can_run(const rn_server_t *s, const msg_t *m)
{
    if (!s->engine)
        return true; /* answered with an error */
    if (m->type == MSG_generate || m->type == MSG_chat || m->type == MSG_embed ||
        m->type == MSG_rerank)
        return rn_engine_busy(s->engine) < rn_engine_slots(s->engine);
    return true;
}

/* Starts queued requests, in order, while slots are free. */
static void start_queued(rn_server_t *s)
{
    msg_t *q;
    while ((q = zlist_first(s->deferred)) && can_run(s, q) && !s->shutdown) {
        zlist_pop(s->deferred);
        handle(s, q);
        msg_clear(q);
        free(q);
    }
}

static void handle(rn_server_t *s, msg_t *m)
{
    switch (m->type) {
    case MSG_load:
        handle_load(s, m);
        break;
    case MSG_generate:
    case MSG_chat:
    case MSG_embed:
    case MSG_rerank:
    case MSG_tokenize:
    case MSG_detokenize:
        handle_request(s, m);
        break;
    case MSG_cancel:
        cancel_request(s, m->id);
        break;
    case MSG_no_route:
        no_route(s, m->id);
        break;
    case MSG_shutdown:
        s->shutdown = true;
        break;
    case MSG_ping: {
        msg_t pong;
        msg_init(&pong, MSG_pong, m->id);
        send_msg(s, &pong);
        break;
    }
    case MSG_hello:
        send_hello(s); /* who is there? (a node agent that rejoined) */
        break;
    default:
        cr_log_warn("unexpected %s ignored", msg_type_name(m->type));
        break;
    }
}

cr_status_t rn_server_new(const char *endpoint, const char *runner_id, const char *direct,
                          rn_server_t **out, cr_err_t *err)
{
    if (!runner_id || !*runner_id || strlen(runner_id) > MSG_ID_MAX)
        return cr_err_set(err, CR_E_INVALID, "invalid runner id");
    rn_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    snprintf(s->id, sizeof s->id, "%s", runner_id);
    s->heard_ms = mono_ms();
    long long orphan = cr_env_int("RUNNER_ORPHAN_TIMEOUT", 0);
    s->orphan_ms = orphan > 0 ? orphan * 1000 : ORPHAN_MS_DEFAULT;
    char hb[64];
    int64_t hb_ms = 0;
    if (!cr_env_get("HEARTBEAT_INTERVAL", hb, sizeof hb) ||
        cr_duration_parse(hb, &hb_ms, NULL) || hb_ms <= 0)
        hb_ms = HEARTBEAT_MS_DEFAULT;
    s->heartbeat_ms = hb_ms;
    s->deferred = zlist_new();
    s->sock = zsock_new(ZMQ_DEALER);
    if (!s->deferred || !s->sock) {
        rn_server_destroy(&s);
        return cr_err_set(err, CR_E_NOMEM, "cannot create the socket");
    }
    zsock_set_identity(s->sock, s->id);
    zsock_set_linger(s->sock, 1000);
    /* Before connecting, so the first CONNECTED is seen (and skipped). */
    s->monitor = zactor_new(zmonitor, s->sock);
    if (s->monitor) {
        zstr_sendx(s->monitor, "LISTEN", "CONNECTED", NULL);
        zstr_send(s->monitor, "START");
        zsock_wait(s->monitor);
    } else {
        cr_log_warn("no socket monitor: a restarted scheduler hears from "
                    "this runner after three heartbeat intervals");
    }
    if (zsock_connect(s->sock, "%s", endpoint) < 0) {
        rn_server_destroy(&s);
        return cr_err_set(err, CR_E_IO, "cannot connect to %s", endpoint);
    }
    if (direct && *direct) {
        /* Without it every reply goes through the scheduler: slower, not
         * wrong (the hello tells the scheduler which). */
        cr_err_t derr;
        if (rn_direct_new(direct, s->sock, &s->direct, &derr))
            cr_log_warn("no direct replies: %s", derr.msg);
    }
    bus_poll_init(&s->poll);
    if (bus_poll_add(&s->poll, s->sock) ||
        (s->monitor && bus_poll_add(&s->poll, zactor_sock(s->monitor))) ||
        (s->direct && bus_poll_add_fd(&s->poll, rn_direct_fd(s->direct)))) {
        rn_server_destroy(&s);
        return cr_err_set(err, CR_E_NOMEM, "cannot create a poller");
    }
    *out = s;
    return CR_OK;
}

/* Shutdown or SIGTERM with requests in slots: each ends as canceled. */
static void stop_slots(rn_server_t *s)
{
    if (!s->engine || !rn_engine_busy(s->engine))
        return;
    for (int i = 0; i < s->n_recs; i++)
        s->recs[i].canceled = true;
    rn_engine_step(s->engine);
}

int rn_server_run(rn_server_t *s)
{
    send_hello(s);

    while (!s->shutdown && !zsys_interrupted) {
        start_queued(s);
        if (s->engine && rn_engine_busy(s->engine)) {
            /* Between steps: cancels, pings and new requests. */
            drain_inbox(s);
            if (s->shutdown)
                break;
            start_queued(s);
            rn_engine_step(s->engine);
            /* Working is not silence: the scheduler pings only a quiet
             * runner, so a long answer hears nothing. The orphan and
             * re-hello clocks start when the work ends. */
            s->heard_ms = mono_ms();
            continue;
        }
        msg_t m;
        cr_err_t err;
        /* Direct replies waiting behind a full gateway are retried soon. */
        bool waiting = s->direct && rn_direct_tick(s->direct, s->dqs, s->n_recs);
        /* Sends on sock (every reply) may have taken the command that
         * would wake the poller for a message that came (bus_poll.h). */
        bus_poll_mark(&s->poll, NULL);
        s->sends_marked = s->sends + rn_direct_sched_sends(s->direct);
        zsock_t *which = bus_poll_wait(&s->poll, waiting ? RN_DIRECT_FLUSH_MS : 1000);
        if (s->monitor && which == zactor_sock(s->monitor)) {
            on_monitor(s);
            continue;
        }
        if (which == BUS_POLL_FD) {
            rn_direct_read(s->direct, s->dqs, s->n_recs);
            continue;
        }
        cr_status_t st = which ? bus_recv(s->sock, 0, &m, NULL, &err)
                         : s->poll.terminated ? CR_E_CANCELED
                                              : CR_E_TIMEOUT;
        if (st == CR_E_TIMEOUT) {
            int64_t silent = mono_ms() - s->heard_ms;
            if (silent > s->orphan_ms) {
                cr_log_info("no scheduler for %lld s; exiting",
                            (long long)(silent / 1000));
                break;
            }
            if (silent > 3 * s->heartbeat_ms &&
                mono_ms() - s->rehello_ms > s->heartbeat_ms) {
                /* A restarted scheduler adopts us from this. */
                s->rehello_ms = mono_ms();
                send_hello(s);
            }
            continue;
        }
        s->heard_ms = mono_ms();
        if (st == CR_E_CANCELED)
            break;
        if (st) {
            cr_log_warn("bad message from the scheduler: %s", err.msg);
            continue;
        }
        if (m.type == MSG_generate || m.type == MSG_chat || m.type == MSG_embed ||
            m.type == MSG_rerank) {
            /* Through the queue, so requests keep their order. */
            msg_t *copy = zlist_size(s->deferred) < DEFERRED_MAX
                              ? malloc(sizeof *copy) : NULL;
            if (!copy) {
                send_error(s, m.id, CR_E_BUSY, "runner queue is full");
                msg_clear(&m);
                continue;
            }
            *copy = m;
            zlist_append(s->deferred, copy);
            continue;
        }
        handle(s, &m);
        msg_clear(&m);
    }
    stop_slots(s);
    return 0;
}

void rn_server_destroy(rn_server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_server_t *s = *self_p;
    if (s->deferred) {
        msg_t *m;
        while ((m = zlist_pop(s->deferred))) {
            msg_clear(m);
            free(m);
        }
        zlist_destroy(&s->deferred);
    }
    rn_engine_destroy(&s->engine);
    /* Before the scheduler's socket: chunks of a finished stream may
     * still be on their way to a reader. */
    rn_direct_destroy(&s->direct, 1000);
    free(s->recs);
    free(s->dqs);
    msg_clear(&s->load_msg);
    zactor_destroy(&s->monitor);
    zsock_destroy(&s->sock);
    free(s);
    *self_p = NULL;
}
