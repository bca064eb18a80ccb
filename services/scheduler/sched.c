/* sched.c: request brokering, runner residency and keep-alive.
 *
 * Every request lives in one list in arrival order and moves through
 *   RESOLVING (asked the registry) -> PENDING (waiting for a runner)
 *   -> RUNNING (forwarded; replies relayed) -> freed.
 * Runners move through STARTING (spawned, no hello yet) -> LOADING (load
 * sent) -> READY -> STOPPING (shutdown sent) -> reaped. schedule() is run
 * after every event and is the only place that attaches requests to
 * runners, starts loads and evicts, so the policy reads in one function
 * (the memory part of it, which host and which victim, is room.c's pure
 * sch_room_decide). */
#include "lib/prelude.h"
#include "services/scheduler/sched.h"

#include <signal.h>
#include <sys/types.h>
#include <time.h>

#include "lib/env.h"
#include "lib/log.h"
#include "lib/mem_trim.h"
#include "lib/model_name.h"
#include "services/scheduler/options.h"
#include "proto/outbox.h"
#include "proto/wire.h"
#include "services/scheduler/sched_int.h"
#include "services/scheduler/spawn.h"

/* ---- clocks ---- */

static int64_t mono_ms_default(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t sch_now_ms(const sch_server_t *s)
{
    return s->cfg.now_ms ? s->cfg.now_ms() : mono_ms_default();
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ---- replies to gateways ---- */

/* Sends m to the gateway `client` through the outbox (never blocking).
 * `last`: m is its request's last reply, queued even past the bound.
 * A reply that cannot be encoded becomes an error saying so. */
static bus_out_t send_client(sch_server_t *s, zframe_t *client,
                             const msg_t *m, bool last)
{
    cr_err_t err;
    zframe_t *f = NULL;
    if (bus_encode_frame(m, &f, &err)) {
        cr_log_warn("%s: reply %s not encodable: %s", m->id,
                    msg_type_name(m->type), err.msg);
        msg_t e;
        msg_make_error(&e, m->id, CR_E_TOO_LARGE,
                       "the %s reply is too large to send: %s",
                       msg_type_name(m->type), err.msg);
        cr_status_t st = bus_encode_frame(&e, &f, NULL);
        msg_clear(&e);
        if (st)
            return BUS_OUT_GONE;
        last = true;
    }
    return last ? bus_outbox_close(s->outbox, client, m->id, &f)
                : bus_outbox_send(s->outbox, client, m->id, &f);
}

static void reply_error(sch_server_t *s, zframe_t *client, const char *id,
                        cr_status_t st, const char *text)
{
    msg_t m;
    msg_make_error(&m, id, st, "%s", text);
    send_client(s, client, &m, true);
    msg_clear(&m);
}

/* ---- request helpers ---- */

static const char *req_model(const msg_t *m)
{
    if (msg_is_request(m->type))
        return m->u.request.model;
    return m->type == MSG_detokenize ? m->u.detokenize.model : NULL;
}

/* True when the registry listed capability `cap` for the model (a reply
 * without the list counts as having it: older registries). */
static bool has_capability(const msg_t *resolved, const char *cap)
{
    const msg_resolved_body_t *res = &resolved->u.resolved;
    if (!res->has_capabilities)
        return true;
    for (size_t i = 0; i < res->capabilities.n; i++)
        if (!strcmp(res->capabilities.v[i], cap))
            return true;
    return false;
}

/* Reads keep_alive (the common head) and whether the request only loads
 * (an empty prompt). */
static void req_inspect(request_t *r)
{
    msg_t *m = &r->msg;
    if (!msg_is_request(m->type) || m->type == MSG_tokenize)
        return;
    r->has_keep_alive = m->u.request.has_keep_alive_ms;
    r->keep_alive_ms = m->u.request.keep_alive_ms;
    if (m->type == MSG_generate)
        r->load_only = (!m->u.generate.prompt || !*m->u.generate.prompt) &&
                       (!m->u.generate.suffix || !*m->u.generate.suffix) &&
                       !m->u.generate.has_context;
    else if (m->type == MSG_chat)
        r->load_only = m->u.chat.messages.n == 0;
    /* embed: empty input is answered by the runner */
}

static request_t *req_find(sch_server_t *s, const char *id)
{
    for (request_t *r = s->req_list; r; r = r->next)
        if (!strcmp(r->id, id))
            return r;
    return NULL;
}

static void req_unlink_free(sch_server_t *s, request_t *r)
{
    for (request_t **pp = &s->req_list; *pp; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    zframe_destroy(&r->client);
    msg_clear(&r->msg);
    msg_clear(&r->resolved);
    free(r->est);
    free(r);
}

static void req_fail(sch_server_t *s, request_t *r, cr_status_t st,
                     const char *text)
{
    reply_error(s, r->client, r->id, st, text);
    req_unlink_free(s, r);
}

/* ---- runners ---- */

static runner_t *runner_by_id(sch_server_t *s, const char *id)
{
    for (runner_t *rn = s->runner_list; rn; rn = rn->next)
        if (!strcmp(rn->id, id))
            return rn;
    return NULL;
}

static runner_t *runner_by_pid(sch_server_t *s, pid_t pid)
{
    for (runner_t *rn = s->runner_list; rn; rn = rn->next)
        if (rn->pid == pid)
            return rn;
    return NULL;
}

static void runner_set_state(sch_server_t *s, runner_t *rn, runner_state_t st)
{
    rn->state = st;
    rn->state_since_ms = sch_now_ms(s);
}

static void send_runner(sch_server_t *s, runner_t *rn, const msg_t *m)
{
    if (rn->node) {
        sch_node_send(s, rn->node, rn->id, m);
        return;
    }
    cr_err_t err;
    zframe_t *ident = zframe_new(rn->id, strlen(rn->id));
    if (bus_send_to(s->runners, ident, m, &err))
        cr_log_warn("runner %s: send %s failed: %s", rn->id,
                 msg_type_name(m->type), err.msg);
    bus_poll_mark(&s->poll, s->runners); /* a send may take its commands */
    zframe_destroy(&ident);
}

/* SIGKILL: a local child directly, a node's runner through its node. */
static void runner_kill(sch_server_t *s, runner_t *rn)
{
    if (rn->node) {
        msg_t m;
        msg_init(&m, MSG_node_kill, "");
        m.u.node_kill.runner_id = rn->id;
        m.u.node_kill.has_runner_id = true;
        sch_node_send(s, rn->node, "", &m);
    } else if (rn->pid > 0) {
        kill(rn->pid, SIGKILL);
    }
}

static void runner_stop(sch_server_t *s, runner_t *rn, const char *why)
{
    if (rn->state == RS_STOPPING)
        return;
    cr_log_info("unloading %s (runner %s, pid %d): %s", rn->resolved.u.resolved.name,
             rn->id, (int)rn->pid, why);
    msg_t m;
    msg_init(&m, MSG_shutdown, rn->id);
    send_runner(s, rn, &m);
    runner_set_state(s, rn, RS_STOPPING);
    rn->expires_ms = 0;
}

static void runner_free(sch_server_t *s, runner_t *rn)
{
    for (runner_t **pp = &s->runner_list; *pp; pp = &(*pp)->next) {
        if (*pp == rn) {
            *pp = rn->next;
            break;
        }
    }
    s->memo_stale = true;
    msg_clear(&rn->resolved);
    free(rn);
}

/* Fails every request waiting for (or running on) this runner's model. */
static void fail_model_requests(sch_server_t *s, runner_t *rn, cr_status_t st,
                                const char *text, bool pending_too)
{
    request_t *next;
    for (request_t *r = s->req_list; r; r = next) {
        next = r->next;
        bool running_here = r->state == RQ_RUNNING && r->runner == rn;
        bool waiting = pending_too && r->state == RQ_PENDING &&
                       !strcmp(r->resolved.u.resolved.model_path,
                               rn->resolved.u.resolved.model_path);
        if (running_here || waiting)
            req_fail(s, r, st, text);
    }
}

static void runner_arm_keep_alive(sch_server_t *s, runner_t *rn)
{
    if (rn->n_active > 0 || rn->state != RS_READY)
        return;
    if (rn->unload_when_idle || rn->keep_alive_ms == 0) {
        runner_stop(s, rn, rn->duplicate ? "another runner holds the same "
                                           "model and options"
                           : rn->unload_when_idle ? "options changed or evicted"
                                                  : "keep_alive 0");
        return;
    }
    rn->expires_ms = rn->keep_alive_ms < 0
                         ? FOREVER_MS
                         : sch_now_ms(s) + rn->keep_alive_ms;
}

/* ---- ending requests early ---- */

static bool runner_was_told(const runner_t *rn, const char *id)
{
    for (unsigned i = 0; i < CR_ARRAY_LEN(rn->canceled); i++)
        if (!strcmp(rn->canceled[i], id))
            return true;
    return false;
}

/* Tells runner rn to cancel request `id`, once: a runner streaming for a
 * request the scheduler already ended is not sent a cancel per chunk
 * (one that reads slowly would fill its queue, and the send would block). */
static void runner_cancel(sch_server_t *s, runner_t *rn, const char *id)
{
    if (runner_was_told(rn, id))
        return;
    snprintf(rn->canceled[rn->n_canceled++ % CR_ARRAY_LEN(rn->canceled)],
             sizeof rn->canceled[0], "%s", id);
    msg_t c;
    msg_init(&c, MSG_cancel, id);
    send_runner(s, rn, &c);
}

/* Ends request r on the scheduler's side in any state: a running one is
 * canceled at its runner (whose later replies for it are ignored) and
 * stops counting against it. The client hears the error unless `tell` is
 * false (it is gone). */
static void req_end(sch_server_t *s, request_t *r, cr_status_t st,
                    const char *text, bool tell)
{
    runner_t *rn = r->state == RQ_RUNNING ? r->runner : NULL;
    if (rn)
        runner_cancel(s, rn, r->id);
    if (tell)
        reply_error(s, r->client, r->id, st, text);
    req_unlink_free(s, r);
    if (rn) {
        rn->n_active--;
        rn->last_used_ms = sch_now_ms(s);
        runner_arm_keep_alive(s, rn);
    }
}

/* The gateway connection of request `id` is gone (a killed gateway, a
 * client that left without a cancel): nobody will read its output. */
static void req_gone(void *arg, const char *id)
{
    sch_server_t *s = arg;
    request_t *r = req_find(s, id);
    if (!r)
        return;
    cr_log_info("request %s: its gateway connection is gone; canceling", id);
    req_end(s, r, CR_E_CANCELED, "request canceled", false);
}

/* Relays one encoded output frame (*f, taken) of running request r. A
 * client too far behind (its queue over the bound) has its request ended
 * with an error that follows what it was sent; a gone one is canceled. */
static void req_forward(sch_server_t *s, request_t *r, zframe_t **f)
{
    bus_out_t o = bus_outbox_send(s->outbox, r->client, r->id, f);
    if (o == BUS_OUT_GONE) {
        req_gone(s, r->id);
    } else if (o == BUS_OUT_OVER) {
        char text[200];
        snprintf(text, sizeof text,
                 "the client reads too slowly: more than %" PRId64
                 " bytes of output were waiting for it; request canceled",
                 s->cfg.stream_buffer_bytes);
        cr_log_warn("request %s: %s", r->id, text);
        req_end(s, r, CR_E_BUSY, text, true);
    }
}

/* Every CLIENT_PROBE_MS a request whose gateway has heard nothing from
 * the scheduler lately gets a `pong` (which gateways skip), only to learn
 * whether its connection is still there: ROUTER_MANDATORY reports a gone
 * peer at once. A killed gateway's requests so end within a probe. */
#define CLIENT_PROBE_MS 1000

static void probe_clients(sch_server_t *s, int64_t now)
{
    request_t *next;
    for (request_t *r = s->req_list; r; r = next) {
        next = r->next;
        if (now - r->probe_ms < CLIENT_PROBE_MS ||
            bus_outbox_has(s->outbox, r->client, r->id))
            continue;
        r->probe_ms = now;
        msg_t m;
        msg_init(&m, MSG_pong, r->id);
        zframe_t *f = NULL;
        if (bus_encode_frame(&m, &f, NULL))
            continue;
        if (bus_outbox_send(s->outbox, r->client, r->id, &f) == BUS_OUT_GONE)
            req_gone(s, r->id);
    }
}

/* A canceled running request whose runner has not ended it after
 * CANCEL_GRACE_MS (a reply lost, a runner that ignores the cancel) is
 * ended here, so it cannot hold its model's slot for good. */
#define CANCEL_GRACE_MS 10000

static void end_stale_cancels(sch_server_t *s, int64_t now)
{
    request_t *next;
    for (request_t *r = s->req_list; r; r = next) {
        next = r->next;
        if (r->state == RQ_RUNNING && r->cancel_ms &&
            now - r->cancel_ms > CANCEL_GRACE_MS) {
            cr_log_warn("request %s: its runner did not end it %d s after a "
                        "cancel; ended",
                        r->id, CANCEL_GRACE_MS / 1000);
            req_end(s, r, CR_E_CANCELED, "request canceled", true);
        }
    }
}

/* The endpoint a local runner binds for direct replies: beside the
 * front's ipc socket, so any gateway that reaches this scheduler reaches
 * it. "" when off, when the front is not ipc, or when the path would not
 * fit a socket address. */
static void direct_endpoint(const sch_server_t *s, const char *runner_id, char *out,
                            size_t cap)
{
    out[0] = '\0';
    const char *front = s->cfg.front_endpoint;
    const char *slash = strrchr(front, '/');
    if (!s->cfg.direct_replies || strncmp(front, "ipc://", 6) || !slash || slash < front + 6)
        return;
    /* proto/wire.h: a Unix socket of the runner's own, not ZeroMQ's */
    char ep[BUS_ENDPOINT_MAX];
    int n = snprintf(ep, sizeof ep, "unix://%.*srunner-%s.sock", (int)(slash + 1 - front - 6),
                     front + 6, runner_id);
    if (n < 0 || (size_t)n >= cap || (size_t)n >= sizeof ep || !bus_wire_path(ep))
        return;
    memcpy(out, ep, (size_t)n + 1);
}

static runner_t *runner_start(sch_server_t *s, request_t *r,
                              const sch_plan_t *plan, sch_node_t *host)
{
    runner_t *rn = calloc(1, sizeof *rn);
    if (!rn)
        return NULL;
    snprintf(rn->id, sizeof rn->id, "r%d-%u", (int)getpid(), ++s->runner_seq);
    if (msg_copy(&r->resolved, &rn->resolved)) {
        free(rn);
        return NULL;
    }
    msg_options_t **opts = sch_req_options_slot(&r->msg);
    /* Only load options: the loading request's sampling knobs must not
     * stick to later requests. */
    sch_options_overlay_load(&rn->load_opts, r->resolved.u.resolved.params);
    if (opts && *opts)
        sch_options_overlay_load(&rn->load_opts, *opts);
    rn->n_slots = s->cfg.num_parallel;
    rn->keep_alive_ms = r->has_keep_alive ? r->keep_alive_ms
                                          : s->cfg.keep_alive_ms;
    cr_err_t err;
    char direct[BUS_ENDPOINT_MAX]; /* what its hello says it bound counts */
    if (host) {
        /* The node forks it; its frames come back through the node. */
        msg_t sp;
        msg_init(&sp, MSG_node_spawn, "");
        sp.u.node_spawn.runner_id = rn->id;
        sp.u.node_spawn.has_runner_id = true;
        if (!sch_node_send(s, host, "", &sp)) {
            msg_clear(&rn->resolved);
            free(rn);
            return NULL;
        }
        rn->node = host;
    } else if (direct_endpoint(s, rn->id, direct, sizeof direct),
               sch_spawn_runner(s->cfg.runner_bin, s->cfg.runners_endpoint, rn->id,
                                direct[0] ? direct : NULL, &rn->pid, &err)) {
        cr_log_error("cannot start a runner: %s", err.msg);
        msg_clear(&rn->resolved);
        free(rn);
        return NULL;
    }
    runner_set_state(s, rn, RS_STARTING);
    rn->last_used_ms = sch_now_ms(s);
    rn->last_seen_ms = rn->last_used_ms;
    char where[512] = "no estimate: CPU";
    if (plan) {
        rn->plan = *plan;
        rn->has_plan = true;
        rn->size = plan->total_bytes;
        rn->size_vram = plan->vram_bytes;
        sch_plan_describe(plan, where, sizeof where);
    }
    rn->next = s->runner_list;
    s->runner_list = rn;
    s->memo_stale = true;
    if (host)
        cr_log_info("loading %s in runner %s on node '%s': %s",
                    r->resolved.u.resolved.name, rn->id, host->name, where);
    else
        cr_log_info("loading %s in runner %s (pid %d): %s",
                    r->resolved.u.resolved.name, rn->id, (int)rn->pid, where);
    return rn;
}

/* ---- dispatch ---- */

static void reply_load_done(sch_server_t *s, request_t *r, const char *reason)
{
    msg_t m;
    msg_init(&m, MSG_done, r->id);
    m.u.done.done_reason = (char *)reason;
    m.u.done.has_done_reason = true;
    m.u.done.total_duration = mono_ns() - r->arrived_ns;
    m.u.done.has_total_duration = true;
    m.u.done.load_duration = m.u.done.total_duration;
    m.u.done.has_load_duration = true;
    send_client(s, r->client, &m, true);
}

static void dispatch(sch_server_t *s, request_t *r, runner_t *rn)
{
    if (r->has_keep_alive)
        rn->keep_alive_ms = r->keep_alive_ms;
    rn->expires_ms = 0;
    rn->last_used_ms = sch_now_ms(s);
    r->dispatched_ns = mono_ns();
    if (r->load_only) {
        reply_load_done(s, r, "load");
        req_unlink_free(s, r);
        runner_arm_keep_alive(s, rn);
        return;
    }
    /* The runner gets the request with the model's params under its options. */
    msg_options_t **slot = sch_req_options_slot(&r->msg);
    msg_options_t *merged = slot ? msg_alloc(&r->msg, sizeof *merged) : NULL;
    if (slot && !merged) {
        req_fail(s, r, CR_E_NOMEM, "out of memory");
        return;
    }
    if (slot) {
        memset(merged, 0, sizeof *merged);
        sch_options_overlay(merged, r->resolved.u.resolved.params);
        sch_options_overlay(merged, *slot);
        sch_options_overlay(merged, &rn->load_opts);
        *slot = merged;
    }
    if (slot)
        r->msg.u.request.has_options = true;
    r->state = RQ_RUNNING;
    r->runner = rn;
    rn->n_active++;
    /* Direct replies: the gateway hears where to attach before the runner
     * has the request, so the route is there when the first chunk is. */
    bool stream_kind = r->msg.type == MSG_generate || r->msg.type == MSG_chat;
    msg_request_head_t *head = &r->msg.u.request;
    if (stream_kind && head->has_direct && head->direct && rn->direct[0] && !rn->node) {
        msg_t route;
        msg_init(&route, MSG_route, r->id);
        route.u.route.endpoint = rn->direct;
        route.u.route.has_endpoint = true;
        send_client(s, r->client, &route, false);
    } else {
        head->direct = false;
        head->has_direct = false;
    }
    send_runner(s, rn, &r->msg);
}

static size_t loaded_count(const sch_server_t *s)
{
    size_t n = 0;
    for (runner_t *rn = s->runner_list; rn; rn = rn->next)
        n++;
    return n;
}

static bool any_loading(const sch_server_t *s)
{
    for (runner_t *rn = s->runner_list; rn; rn = rn->next)
        if (rn->state == RS_STARTING || rn->state == RS_LOADING)
            return true;
    return false;
}

/* The same model file: the same path, or the same store blob (a runner
 * adopted on a node names its copy in the node's cache). */
static bool same_blob(const char *a, const char *b)
{
    if (!strcmp(a, b))
        return true;
    const char *ba = strrchr(a, '/'), *bb = strrchr(b, '/');
    ba = ba ? ba + 1 : a;
    bb = bb ? bb + 1 : b;
    return !strncmp(ba, "sha256-", 7) && !strcmp(ba, bb);
}

bool sch_same_model(const runner_t *rn, const request_t *r)
{
    return same_blob(rn->resolved.u.resolved.model_path,
                     r->resolved.u.resolved.model_path) &&
           !strcmp(rn->resolved.u.resolved.name, r->resolved.u.resolved.name);
}

/* The runner was loaded from another manifest of the request's model
 * name: the model was created again (new weights, adapters, projector,
 * template or system prompt: the load carries them all), so the runner
 * must make way, as Ollama reloads a changed model. An adopted runner
 * whose manifest is unknown counts as current. */
static bool outdated(const runner_t *rn, const request_t *r)
{
    const msg_resolved_body_t *a = &rn->resolved.u.resolved,
                              *b = &r->resolved.u.resolved;
    if (strcmp(a->name, b->name))
        return false;
    if (!same_blob(a->model_path, b->model_path))
        return true;
    return a->has_digest && b->has_digest && a->digest && b->digest &&
           strcmp(a->digest, b->digest);
}

/* At the count cap: evicts the LRU idle runner of any host (the policy:
 * least recently used, as users expect; Ollama picks the shortest
 * keep-alive, which surprises people who set one model to stay forever and
 * then watch a recent one vanish) unless one is already on its way out
 * (its slot returns when it is reaped; evicting a second one before then
 * would unload more than needed). */
static void evict_one(sch_server_t *s, const char *why)
{
    for (runner_t *rn = s->runner_list; rn; rn = rn->next)
        if (rn->state == RS_STOPPING)
            return;
    runner_t *victim = sch_eviction_victim(s, NULL, true);
    if (victim)
        runner_stop(s, victim, why);
}

/* Two ready runners of one model whose load options suit the same
 * requests (a node back late, a runner's hello racing a load): one is
 * enough. The one serving more requests stays (on a tie the older: the
 * list is newest first); the other takes nothing new and stops once
 * idle. */
static void drop_duplicates(sch_server_t *s)
{
    for (runner_t *a = s->runner_list; a; a = a->next) {
        if (a->state != RS_READY || a->duplicate)
            continue;
        for (runner_t *b = a->next; b; b = b->next) {
            if (b->state != RS_READY || b->duplicate ||
                !same_blob(a->resolved.u.resolved.model_path,
                           b->resolved.u.resolved.model_path) ||
                strcmp(a->resolved.u.resolved.name,
                       b->resolved.u.resolved.name) ||
                (!sch_options_load_compatible(&a->load_opts, &b->load_opts) &&
                 !sch_options_load_compatible(&b->load_opts, &a->load_opts)))
                continue;
            runner_t *keep = b, *drop = a;
            if (a->n_active > b->n_active) {
                keep = a;
                drop = b;
            }
            cr_log_warn("runners %s and %s both hold %s: keeping %s, "
                        "draining and stopping %s (%d requests running)",
                        keep->id, drop->id, keep->resolved.u.resolved.name,
                        keep->id, drop->id, drop->n_active);
            drop->duplicate = true;
            drop->unload_when_idle = true;
            runner_arm_keep_alive(s, drop);
            if (drop == a)
                break;
        }
    }
}

static void schedule(sch_server_t *s)
{
    drop_duplicates(s);
    bool grace = sch_adopt_grace(s);
    size_t all_gpus = s->inv.n_gpus;
    for (const sch_node_t *nd = s->node_list; nd; nd = nd->next)
        all_gpus += nd->inv.n_gpus;
    size_t max_loaded = s->cfg.max_loaded > 0
                            ? (size_t)s->cfg.max_loaded
                            : 3 * CR_MAX(all_gpus, (size_t)1);
    bool load_waiting = false; /* loads go in arrival order */
    request_t *next;
    for (request_t *r = s->req_list; r; r = next) {
        next = r->next;
        if (r->state != RQ_PENDING)
            continue;
        msg_options_t **opts = sch_req_options_slot(&r->msg);
        runner_t *match = NULL;
        runner_t *stale = NULL;
        for (runner_t *rn = s->runner_list; rn; rn = rn->next) {
            if (rn->state == RS_STOPPING || rn->duplicate)
                continue;
            if (outdated(rn, r))
                stale = rn;
            else if (!sch_same_model(rn, r))
                continue;
            else if (sch_options_load_compatible(&rn->load_opts, opts ? *opts : NULL))
                match = rn;
            else
                stale = rn;
        }
        if (match) {
            if (match->state == RS_READY && match->n_active < match->n_slots)
                dispatch(s, r, match);
            continue; /* loading or busy: wait for it */
        }
        if (stale) {
            /* Load options differ, or the model changed: reload once the
             * old one is idle. */
            stale->unload_when_idle = true;
            runner_arm_keep_alive(s, stale);
            continue;
        }
        if (grace)
            continue; /* its runner may be about to say hello (adopt.c) */
        if (load_waiting || any_loading(s))
            continue; /* one load at a time, first come first served */
        load_waiting = true;
        if (loaded_count(s) >= max_loaded) {
            /* The cap counts every host: its victim may be on any. */
            evict_one(s, "evicted for another model");
            continue; /* wait for the victim (or a busy one) to go */
        }
        /* Memory: load, make room on one host, wait or fail (room.c). */
        sch_plan_t plan;
        bool has_plan;
        cr_err_t err;
        sch_node_t *host = NULL;
        runner_t *victim = NULL;
        cr_status_t st;
        switch (sch_room_decide(s, r, &plan, &has_plan, &host, &victim, &st,
                                &err)) {
        case SCH_ROOM_EVICT:
            runner_stop(s, victim, "evicted to make room");
            continue; /* memory returns when the victim is reaped */
        case SCH_ROOM_WAIT:
            continue;
        case SCH_ROOM_FAIL:
            req_fail(s, r, st, err.msg);
            continue;
        case SCH_ROOM_LOAD:
            break;
        }
        if (!runner_start(s, r, has_plan ? &plan : NULL, host))
            req_fail(s, r, CR_E_RUNNER, "failed to start a runner process");
    }
    /* A runner that became ready with nobody waiting (they were canceled)
     * stays for its keep-alive like any idle runner. */
    for (runner_t *rn = s->runner_list; rn; rn = rn->next)
        if (rn->state == RS_READY && rn->n_active == 0 && rn->expires_ms == 0)
            runner_arm_keep_alive(s, rn);
}

/* ---- inbound: gateways ---- */

static size_t pending_count(const sch_server_t *s)
{
    size_t n = 0;
    for (const request_t *r = s->req_list; r; r = r->next)
        if (r->state != RQ_RUNNING)
            n++;
    return n;
}

/* `keep_alive: 0` with an empty prompt: unload without loading. */
static void handle_unload(sch_server_t *s, request_t *r)
{
    for (runner_t *rn = s->runner_list; rn; rn = rn->next) {
        if (!sch_same_model(rn, r) || rn->state == RS_STOPPING)
            continue;
        rn->keep_alive_ms = 0;
        if (rn->n_active == 0 && rn->state == RS_READY)
            runner_stop(s, rn, "unload requested");
        else
            rn->unload_when_idle = true;
    }
    reply_load_done(s, r, "unload");
    req_unlink_free(s, r);
}

/* ps and status: what status.c builds, or an error when memory ran out. */
static void handle_report(sch_server_t *s, zframe_t *client, const char *id,
                          bool status)
{
    msg_t m;
    msg_init(&m, status ? MSG_status_reply : MSG_ps_reply, id);
    cr_status_t st = status ? sch_status_build(s, &m) : sch_ps_build(s, &m);
    if (st) {
        msg_clear(&m);
        reply_error(s, client, id, st, "out of memory");
        return;
    }
    send_client(s, client, &m, true);
    msg_clear(&m);
}

static void handle_cancel(sch_server_t *s, const char *id)
{
    request_t *r = req_find(s, id);
    if (!r)
        return;
    if (r->state == RQ_RUNNING) {
        msg_t m;
        msg_init(&m, MSG_cancel, id);
        send_runner(s, r->runner, &m);
        if (!r->cancel_ms)
            r->cancel_ms = sch_now_ms(s);
        return; /* the runner answers done/error, which ends the request */
    }
    req_fail(s, r, CR_E_CANCELED, "request canceled");
}

/* The gateway could not connect to the runner's direct socket: the
 * runner sends through us at once instead of after its attach wait. */
static void handle_no_route(sch_server_t *s, const char *id)
{
    request_t *r = req_find(s, id);
    if (!r || r->state != RQ_RUNNING || !r->runner || r->runner->node)
        return;
    msg_t m;
    msg_init(&m, MSG_no_route, id);
    send_runner(s, r->runner, &m);
}

static void on_front(sch_server_t *s)
{
    msg_t m;
    zframe_t *client = NULL;
    cr_err_t err;
    cr_status_t st = bus_recv(s->front, 0, &m, &client, &err);
    if (st) {
        if (client && st == CR_E_PROTO)
            reply_error(s, client, "", CR_E_PROTO, err.msg);
        zframe_destroy(&client);
        return;
    }
    switch (m.type) {
    case MSG_generate:
    case MSG_chat:
    case MSG_embed:
    case MSG_rerank:
    case MSG_tokenize:
    case MSG_detokenize: {
        if (req_find(s, m.id)) {
            reply_error(s, client, m.id, CR_E_INVALID, "duplicate request id");
            break;
        }
        if (s->draining) {
            reply_error(s, client, m.id, CR_E_UNAVAILABLE,
                        "server is shutting down");
            break;
        }
        if (pending_count(s) >= (size_t)s->cfg.max_queue) {
            reply_error(s, client, m.id, CR_E_BUSY,
                        "server busy, please try again.  maximum pending "
                        "requests exceeded");
            break;
        }
        request_t *r = calloc(1, sizeof *r);
        if (!r) {
            reply_error(s, client, m.id, CR_E_NOMEM, "out of memory");
            break;
        }
        snprintf(r->id, sizeof r->id, "%s", m.id);
        r->client = client;
        client = NULL;
        r->msg = m;
        memset(&m, 0, sizeof m); /* ownership moved */
        r->arrived_ns = mono_ns();
        /* The first probe is due a probe interval after arrival; from 0
         * every request got a pong at once: one more message and one more
         * wake-up of its gateway thread per request. */
        r->probe_ms = sch_now_ms(s);
        req_inspect(r);
        /* Append: the list is in arrival order (FIFO scheduling). */
        request_t **pp = &s->req_list;
        while (*pp)
            pp = &(*pp)->next;
        *pp = r;
        msg_t q;
        msg_init(&q, MSG_resolve, r->id);
        q.u.resolve.model = (char *)req_model(&r->msg);
        q.u.resolve.has_model = true;
        r->state = RQ_RESOLVING;
        r->resolve_sent_ms = sch_now_ms(s);
        cr_status_t sent = bus_send(s->registry, &q, &err);
        bus_poll_mark(&s->poll, s->registry);
        if (sent)
            req_fail(s, r, CR_E_UNAVAILABLE, "registry unavailable");
        break;
    }
    case MSG_cancel:
        handle_cancel(s, m.id);
        break;
    case MSG_no_route:
        handle_no_route(s, m.id);
        break;
    case MSG_ps:
        handle_report(s, client, m.id, false);
        break;
    case MSG_status:
        handle_report(s, client, m.id, true);
        break;
    case MSG_ping: {
        msg_t pong;
        msg_init(&pong, MSG_pong, m.id);
        send_client(s, client, &pong, false);
        break;
    }
    default:
        reply_error(s, client, m.id, CR_E_PROTO, "unexpected message type");
        break;
    }
    zframe_destroy(&client);
    msg_clear(&m);
}

/* ---- inbound: registry ---- */

static void on_registry(sch_server_t *s)
{
    msg_t m;
    cr_err_t err;
    if (bus_recv(s->registry, 0, &m, NULL, &err)) {
        cr_log_warn("bad message from the registry: %s", err.msg);
        return;
    }
    request_t *r = req_find(s, m.id);
    if (!r || r->state != RQ_RESOLVING) {
        msg_clear(&m);
        return; /* canceled meanwhile */
    }
    if (m.type == MSG_error) {
        cr_status_t st = (cr_status_t)m.u.error.status;
        if (st == CR_E_NOT_FOUND) {
            char text[600];
            snprintf(text, sizeof text,
                     "model \"%s\" not found, try pulling it first",
                     req_model(&r->msg));
            req_fail(s, r, st, text);
        } else {
            req_fail(s, r, st, m.u.error.message);
        }
        msg_clear(&m);
        return;
    }
    if (m.type != MSG_resolved) {
        req_fail(s, r, CR_E_PROTO, "registry sent an unexpected reply");
        msg_clear(&m);
        return;
    }
    r->resolved = m; /* ownership moved */
    if (r->load_only && r->has_keep_alive && r->keep_alive_ms == 0) {
        handle_unload(s, r);
        return;
    }
    if (r->msg.type == MSG_rerank && !has_capability(&r->resolved, "embedding")) {
        /* Only encoders rerank: say so before loading a chat model. */
        char text[600];
        snprintf(text, sizeof text, "\"%s\" does not support rerank",
                 req_model(&r->msg));
        req_fail(s, r, CR_E_INVALID, text);
        return;
    }
    bool completes = r->msg.type == MSG_generate || r->msg.type == MSG_chat;
    if (completes && r->resolved.u.resolved.has_capabilities) {
        /* Embedding-only models cannot chat or generate. */
        bool completion = false;
        for (size_t i = 0; i < r->resolved.u.resolved.capabilities.n; i++)
            if (!strcmp(r->resolved.u.resolved.capabilities.v[i], "completion"))
                completion = true;
        if (!completion) {
            char text[600];
            snprintf(text, sizeof text, "\"%s\" does not support %s",
                     req_model(&r->msg),
                     r->msg.type == MSG_chat ? "chat" : "generate");
            req_fail(s, r, CR_E_INVALID, text);
            return;
        }
    }
    if (r->msg.type == MSG_generate && r->msg.u.generate.suffix &&
        *r->msg.u.generate.suffix && !has_capability(&r->resolved, "insert")) {
        /* Ollama's CheckCapabilities text, with the model's full name. */
        cr_model_name_t n;
        cr_err_t nerr;
        char full[CR_NAME_BUF], text[CR_NAME_BUF + 64];
        if (cr_model_name_parse(req_model(&r->msg), &n, &nerr))
            snprintf(full, sizeof full, "%s", req_model(&r->msg));
        else
            cr_model_name_full(&n, full, sizeof full);
        snprintf(text, sizeof text, "%s does not support insert", full);
        req_fail(s, r, CR_E_INVALID, text);
        return;
    }
    r->state = RQ_PENDING;
    r->pending_ms = sch_now_ms(s);
}

/* ---- inbound: runners ---- */

static void finish_request(sch_server_t *s, request_t *r, msg_t *m)
{
    runner_t *rn = r->runner;
    if (m->type == MSG_done) {
        m->u.done.total_duration = mono_ns() - r->arrived_ns;
        m->u.done.has_total_duration = true;
        m->u.done.load_duration = r->dispatched_ns - r->arrived_ns;
        m->u.done.has_load_duration = true;
    } else if (m->type == MSG_ranked) {
        m->u.ranked.total_duration = mono_ns() - r->arrived_ns;
        m->u.ranked.has_total_duration = true;
        m->u.ranked.load_duration = r->dispatched_ns - r->arrived_ns;
        m->u.ranked.has_load_duration = true;
    } else if (m->type == MSG_embeddings) {
        m->u.embeddings.total_duration = mono_ns() - r->arrived_ns;
        m->u.embeddings.has_total_duration = true;
        m->u.embeddings.load_duration = r->dispatched_ns - r->arrived_ns;
        m->u.embeddings.has_load_duration = true;
    }
    send_client(s, r->client, m, true);
    req_unlink_free(s, r);
    if (rn) {
        rn->n_active--;
        rn->last_used_ms = sch_now_ms(s);
        runner_arm_keep_alive(s, rn);
    }
}

static void on_runner_control(sch_server_t *s, runner_t *rn, msg_t *m)
{
    switch (m->type) {
    case MSG_hello: {
        if (rn->state == RS_STOPPING) {
            /* Stopped before it connected (a load that timed out while it
             * started): the shutdown sent then reached nobody. */
            msg_t bye;
            msg_init(&bye, MSG_shutdown, rn->id);
            send_runner(s, rn, &bye);
            break;
        }
        if (rn->state != RS_STARTING)
            break;
        sch_runner_set_direct(s, rn, &m->u.hello);
        msg_t load;
        sch_load_scratch_t scratch;
        sch_load_build(s, rn, &load, &scratch);
        send_runner(s, rn, &load);
        /* The load timeout and the load notices count from the spawn, not
         * from this hello: a runner slow to start gets no extra time (and
         * a hello read late cannot restart the clock). */
        rn->state = RS_LOADING;
        break;
    }
    case MSG_ready:
        if (rn->state != RS_LOADING)
            break;
        /* The runner's own figures, except with a described inventory
         * (runners run on the CPU while the ledger plays GPUs): then ps
         * shows the plan, so PROCESSOR reads it. A real GPU plan that the
         * runner did not follow (a CPU-only runner) becomes a CPU one, so
         * the ledger does not hold VRAM nobody uses. */
        if (m->u.ready.size_vram > 0 && !rn->node)
            s->gpu_offload_seen = true;
        const cr_inventory_t *hinv = sch_runner_inv(s, rn);
        bool show_plan = rn->has_plan && hinv->fake &&
                         rn->plan.vram_bytes > 0 &&
                         m->u.ready.size_vram == 0;
        if (!show_plan) {
            if (m->u.ready.size > 0 || !rn->has_plan)
                rn->size = m->u.ready.size;
            rn->size_vram = m->u.ready.size_vram;
        }
        if (m->u.ready.has_offload_error && m->u.ready.offload_error)
            snprintf(rn->offload_error, sizeof rn->offload_error, "%s",
                     m->u.ready.offload_error);
        if (rn->has_plan && !hinv->fake && rn->plan.vram_bytes > 0 &&
            m->u.ready.size_vram == 0) {
            cr_log_warn("runner %s loaded %s on the CPU only (planned: %d "
                        "layers on GPUs): %s",
                        rn->id, rn->resolved.u.resolved.name,
                        rn->plan.gpu_layers,
                        rn->offload_error[0] ? rn->offload_error
                                             : "the runner gave no reason");
            rn->plan.n_devs = 0;
            rn->plan.gpu_layers = 0;
            rn->plan.vram_bytes = 0;
            rn->plan.full_offload = false;
            rn->plan.cpu_bytes = rn->size;
            rn->plan.total_bytes = rn->size;
            rn->plan.runner_bytes -= CR_MIN(rn->plan.runner_bytes,
                                            SCH_RUNNER_CUDA_HOST_BYTES);
        }
        rn->context_length = m->u.ready.context_length;
        if (rn->has_plan && m->u.ready.has_gpu_layers &&
            m->u.ready.gpu_layers != rn->plan.gpu_layers)
            cr_log_info("runner %s offloaded %" PRId64 " layers (planned %d)",
                        rn->id, m->u.ready.gpu_layers, rn->plan.gpu_layers);
        runner_set_state(s, rn, RS_READY);
        rn->last_used_ms = sch_now_ms(s);
        drop_duplicates(s);
        cr_log_info("runner %s ready: %s, %" PRId64 " bytes, ctx %" PRId64,
                 rn->id, rn->resolved.u.resolved.name, rn->size,
                 rn->context_length);
        /* Keep-alive is armed by schedule() if no request takes it. */
        break;
    case MSG_error: {
        /* A load failure: tell everyone waiting for this model. */
        char text[700];
        snprintf(text, sizeof text, "failed to load model: %s",
                 m->u.error.message);
        cr_log_error("runner %s: %s", rn->id, text);
        /* Clients see the blob's name, not where the store is. */
        const char *path = rn->resolved.u.resolved.model_path;
        const char *slash = path ? strrchr(path, '/') : NULL;
        if (slash)
            cr_msg_redact(text, sizeof text, path, slash + 1);
        fail_model_requests(s, rn, (cr_status_t)m->u.error.status, text, true);
        runner_stop(s, rn, "load failed");
        break;
    }
    case MSG_pong:
        break;
    default:
        cr_log_warn("runner %s sent unexpected %s", rn->id, msg_type_name(m->type));
        break;
    }
}

/* True when the message was a relayed chunk or progress (no state of the
 * scheduler's changed but the runner's last-seen time). */
static bool on_runners(sch_server_t *s)
{
    msg_t m;
    zframe_t *ident = NULL, *body = NULL;
    cr_err_t err;
    cr_status_t st = bus_recv_frame(s->runners, 0, &body, &ident, &err);
    char id[64] = "";
    if (ident) {
        size_t n = zframe_size(ident);
        if (n < sizeof id) {
            memcpy(id, zframe_data(ident), n);
            id[n] = '\0';
        }
    }
    zframe_destroy(&ident);
    if (!st && sch_runner_relay(s, NULL, id, &body))
        return true;
    if (!st)
        st = msg_decode(zframe_data(body), zframe_size(body), &m, &err);
    zframe_destroy(&body);
    if (st) {
        cr_log_warn("bad message from runner %s: %s", id, err.msg);
        return false;
    }
    sch_runner_msg(s, NULL, id, &m);
    return false;
}

bool sch_runner_relay(sch_server_t *s, sch_node_t *node, const char *id,
                      zframe_t **body_p)
{
    msg_t h;
    if (msg_peek(zframe_data(*body_p), zframe_size(*body_p), &h, NULL) ||
        (h.type != MSG_chunk && h.type != MSG_progress))
        return false;
    runner_t *rn = runner_by_id(s, id);
    request_t *r = rn && rn->node == node ? req_find(s, h.id) : NULL;
    if (!r || r->runner != rn)
        return false; /* sch_runner_msg says why, if anything */
    /* As sch_runner_msg: anything it says proves it alive. */
    rn->last_seen_ms = sch_now_ms(s);
    rn->ping_sent_ms = 0;
    r->got_output |= h.type == MSG_chunk;
    req_forward(s, r, body_p);
    return true;
}

void sch_runner_msg(sch_server_t *s, sch_node_t *node, const char *id,
                    msg_t *mp)
{
    msg_t m = *mp;
    memset(mp, 0, sizeof *mp); /* ownership moved */
    runner_t *rn = runner_by_id(s, id);
    if (rn && rn->node != node) {
        /* A node speaks only for its own runners. */
        cr_log_warn("message for runner '%s' from %s%s%s ignored", id,
                    node ? "node '" : "this host", node ? node->name : "",
                    node ? "'" : "");
        msg_clear(&m);
        return;
    }
    if (!rn && m.type == MSG_hello && node && sch_gone_has(s, id)) {
        /* A runner of a node this scheduler lost is not adopted: its
         * memory was given back (its node kills it too). */
        cr_log_info("runner '%s' on node '%s' was given up; asking it to exit",
                    id, node->name);
        if (node->expect_runners > 0)
            node->expect_runners--; /* not one to wait for */
        msg_t bye;
        msg_init(&bye, MSG_shutdown, id);
        sch_node_send(s, node, id, &bye);
        msg_clear(&m);
        return;
    }
    if (!rn && m.type == MSG_hello) {
        /* A runner from before a scheduler restart (here or on a node):
         * adopt its model, or (holding none) tell it to go. */
        rn = sch_runner_adopt(s, node, id, &m.u.hello);
        if (rn)
            drop_duplicates(s); /* before ps can list it twice */
        if (!rn && node) {
            cr_log_info("runner '%s' on node '%s' holds no model; asking it "
                        "to exit",
                        id, node->name);
            if (node->expect_runners > 0)
                node->expect_runners--;
            msg_t bye;
            msg_init(&bye, MSG_shutdown, id);
            sch_node_send(s, node, id, &bye);
        } else if (!rn && id[0]) {
            cr_log_info("runner '%s' holds no model; asking it to exit", id);
            msg_t bye;
            msg_init(&bye, MSG_shutdown, id);
            zframe_t *to = zframe_new(id, strlen(id));
            bus_send_to(s->runners, to, &bye, NULL);
            bus_poll_mark(&s->poll, s->runners);
            zframe_destroy(&to);
        }
        msg_clear(&m);
        return;
    }
    if (!rn) {
        /* Output queued while no scheduler listened comes before the
         * runner's hello: expected, and many. */
        if (m.type == MSG_chunk || m.type == MSG_pong)
            cr_log_debug("%s from unknown runner '%s' ignored",
                         msg_type_name(m.type), id);
        else
            cr_log_warn("message from unknown runner '%s' ignored", id);
        msg_clear(&m);
        return;
    }
    /* Anything it says proves it alive. */
    rn->last_seen_ms = sch_now_ms(s);
    rn->ping_sent_ms = 0;
    request_t *r = NULL;
    if (m.type == MSG_chunk || m.type == MSG_done || m.type == MSG_error ||
        m.type == MSG_embeddings || m.type == MSG_ranked ||
        m.type == MSG_progress || m.type == MSG_started ||
        m.type == MSG_tokens || m.type == MSG_text)
        r = req_find(s, m.id);
    if (r && r->runner == rn) {
        if (m.type == MSG_started) {
            r->got_output = true; /* its chunks go direct from here */
        } else if (m.type == MSG_chunk || m.type == MSG_progress) {
            r->got_output |= m.type == MSG_chunk;
            zframe_t *f = NULL;
            cr_err_t err;
            if (bus_encode_frame(&m, &f, &err) == CR_OK)
                req_forward(s, r, &f);
            else
                req_end(s, r, CR_E_TOO_LARGE, err.msg, true);
        }
        else
            finish_request(s, r, &m);
    } else if (!strcmp(m.id, rn->id)) {
        on_runner_control(s, rn, &m);
    } else if (!r && m.type == MSG_chunk) {
        /* Output for a request nobody waits for (one a previous scheduler
         * sent an adopted runner, or one ended here): free its slot. */
        runner_cancel(s, rn, m.id);
    }
    msg_clear(&m);
}

/* ---- timers and child exits ---- */

/* A local runner that exits removes its direct socket's file itself; one
 * killed (SIGKILL, a crash) leaves it in the runtime dir. Removed here,
 * once its process is gone, and only the name this scheduler gives its
 * runners (a hello names the endpoint; it is not trusted with a path). */
static void remove_direct_socket(const sch_server_t *s, const runner_t *rn)
{
    char mine[BUS_ENDPOINT_MAX];
    direct_endpoint(s, rn->id, mine, sizeof mine);
    if (!rn->direct[0] || strcmp(rn->direct, mine))
        return;
    const char *path = bus_wire_path(mine);
    if (path && unlink(path) == 0)
        cr_log_info("runner %s: removed its socket %s", rn->id, path);
}

/* A runner's process is gone: its requests fail (unless it was being
 * stopped) and it leaves the list, returning its memory to the ledger. */
void sch_runner_gone(sch_server_t *s, runner_t *rn, pid_t pid,
                     const char *how)
{
    if (rn->state == RS_STOPPING) {
        cr_log_info("runner %s (pid %d) exited: %s", rn->id, (int)pid, how);
    } else {
        /* SIGKILL from outside is most often the kernel's OOM killer, and
         * what the runner was doing (a huge prompt) would do it again. */
        bool killed = !strncmp(how, "signal 9 ", 9);
        char text[400];
        snprintf(text, sizeof text,
                 "model runner has unexpectedly stopped (%s%s); the next "
                 "request will load it again",
                 how,
                 killed ? "; if the kernel's OOM killer did it, the request "
                          "needs more memory than the machine has"
                        : "");
        cr_log_error("runner %s (pid %d): %s", rn->id, (int)pid, text);
        /* A request the dead runner had not answered at all runs again on
         * a fresh runner, once: its client never sees the crash. One that
         * already got output fails (its text cannot be taken back), and so
         * does one whose runner was SIGKILLed (it would likely kill the
         * next one too: Ollama's users get an error, not a second OOM) or
         * that arrived before a drain (nothing new starts then). */
        for (request_t *r = s->req_list; r; r = r->next)
            if (r->state == RQ_RUNNING && r->runner == rn && !r->got_output &&
                !r->retried && !killed && !s->draining) {
                r->state = RQ_PENDING;
                r->runner = NULL;
                r->retried = true;
                cr_log_info("request %s: runner died before answering; "
                            "running it again",
                            r->id);
            }
        /* A runner that dies while loading fails its waiters too, or a
         * model that always crashes would be respawned forever. */
        bool loading = rn->state != RS_READY;
        fail_model_requests(s, rn, CR_E_RUNNER, text, loading);
    }
    if (rn->node)
        sch_gone_note(s, rn->id);
    else
        remove_direct_socket(s, rn);
    runner_free(s, rn);
}

static void reap_children(sch_server_t *s)
{
    char how[128];
    pid_t pid;
    while ((pid = sch_reap_one(how, sizeof how)) > 0) {
        runner_t *rn = runner_by_pid(s, pid);
        if (rn)
            sch_runner_gone(s, rn, pid, how);
    }
    /* Adopted runners are not our children: ask /proc instead (a zombie,
     * a dead pid or a reused one no longer shows the runner binary). One
     * without a usable pid is gone once it stops (heartbeat or shutdown)
     * and its grace period has passed. */
    runner_t *next;
    int64_t now = sch_now_ms(s);
    for (runner_t *rn = s->runner_list; rn; rn = next) {
        next = rn->next;
        if (!rn->adopted)
            continue;
        if (rn->pid > 0 && !sch_pid_is_runner(rn->pid, s->cfg.runner_bin))
            sch_runner_gone(s, rn, rn->pid, "exited");
        else if (rn->pid <= 0 && rn->state == RS_STOPPING &&
                 now - rn->state_since_ms > STOP_GRACE_MS)
            sch_runner_gone(s, rn, 0, "stopped");
    }
}

/* Heartbeats: a ready runner that has been quiet for the interval gets a
 * ping; one that leaves a ping unanswered for the timeout is hung (stopped,
 * deadlocked, swapping to death): it is killed, its requests fail now, and
 * its memory returns to the ledger when it is reaped. Loading runners are
 * covered by the load timeout instead (a load does not answer pings). */
static void heartbeat(sch_server_t *s, runner_t *rn, int64_t now)
{
    int64_t interval = s->cfg.heartbeat_interval_ms > 0
                           ? s->cfg.heartbeat_interval_ms
                           : HEARTBEAT_INTERVAL_MS;
    int64_t timeout = s->cfg.heartbeat_timeout_ms > 0
                          ? s->cfg.heartbeat_timeout_ms
                          : HEARTBEAT_TIMEOUT_MS;
    if (rn->state != RS_READY)
        return;
    if (rn->ping_sent_ms && now - rn->ping_sent_ms > timeout) {
        char text[300];
        snprintf(text, sizeof text,
                 "model runner stopped responding (no heartbeat for %" PRId64
                 " s); the next request will load it again",
                 (now - rn->ping_sent_ms) / 1000);
        cr_log_error("runner %s (pid %d): %s", rn->id, (int)rn->pid, text);
        fail_model_requests(s, rn, CR_E_RUNNER, text, false);
        runner_set_state(s, rn, RS_STOPPING);
        rn->expires_ms = 0;
        runner_kill(s, rn);
        return;
    }
    if (!rn->ping_sent_ms && now - rn->last_seen_ms >= interval) {
        msg_t m;
        msg_init(&m, MSG_ping, rn->id);
        send_runner(s, rn, &m);
        rn->ping_sent_ms = now;
    }
}

/* Load progress for a waiting request: a generate or chat whose model has
 * been loading for LOAD_NOTICE_MS gets `progress` {status: "loading
 * model"}, then again every LOAD_NOTICE_REPEAT_MS while the load lasts.
 * Fast loads send nothing, so their answers stay byte for byte Ollama's
 * (and an early load failure keeps its HTTP status). A request held back
 * by the adoption grace (no runner of its model yet) counts as loading
 * from when it became pending. */
#define LOAD_NOTICE_MS 1000
#define LOAD_NOTICE_REPEAT_MS 5000

static void notify_loading(sch_server_t *s, int64_t now)
{
    bool grace = s->grace_until_ms != 0; /* waiting for adoptions */
    for (request_t *r = s->req_list; r; r = r->next) {
        if (r->state != RQ_PENDING || r->load_only ||
            (r->msg.type != MSG_generate && r->msg.type != MSG_chat))
            continue;
        if (r->load_notice_ms && now - r->load_notice_ms < LOAD_NOTICE_REPEAT_MS)
            continue;
        /* Also while the adoption grace holds its load back. */
        bool notice = false, has_runner = false;
        for (runner_t *rn = s->runner_list; rn; rn = rn->next) {
            has_runner |= sch_same_model(rn, r);
            if ((rn->state == RS_STARTING || rn->state == RS_LOADING) &&
                sch_same_model(rn, r) && now - rn->state_since_ms >= LOAD_NOTICE_MS)
                notice = true;
        }
        if (grace && !has_runner && now - r->pending_ms >= LOAD_NOTICE_MS)
            notice = true;
        if (notice) {
            msg_t m;
            msg_init(&m, MSG_progress, r->id);
            m.u.progress.status = "loading model";
            m.u.progress.has_status = true;
            send_client(s, r->client, &m, false);
            r->load_notice_ms = now;
        }
    }
}

/* How often the scheduler hands freed memory back (lib/mem_trim.h): its
 * libzmq I/O thread's arena otherwise stays at its busiest size. */
#define TRIM_EVERY_MS 10000

static void run_timers(sch_server_t *s)
{
    int64_t now = sch_now_ms(s);
    if (now - s->trimmed_ms >= TRIM_EVERY_MS) {
        s->trimmed_ms = now;
        cr_mem_trim();
    }
    for (runner_t *rn = s->runner_list; rn; rn = rn->next) {
        heartbeat(s, rn, now);
        if (rn->state == RS_READY && rn->n_active == 0 && rn->expires_ms &&
            rn->expires_ms != FOREVER_MS && now >= rn->expires_ms)
            runner_stop(s, rn, "keep-alive expired");
        if ((rn->state == RS_STARTING || rn->state == RS_LOADING) &&
            s->cfg.load_timeout_ms > 0 &&
            now - rn->state_since_ms > s->cfg.load_timeout_ms) {
            fail_model_requests(s, rn, CR_E_TIMEOUT,
                                "timed out waiting for the model runner to "
                                "start",
                                true);
            runner_stop(s, rn, "load timed out");
        }
        if (rn->state == RS_STOPPING &&
            now - rn->state_since_ms > STOP_GRACE_MS &&
            (rn->pid > 0 || rn->node)) {
            runner_kill(s, rn);
            rn->state_since_ms = now; /* once per grace period */
        }
    }
    sch_node_memo_write(s);
    notify_loading(s, now);
    probe_clients(s, now);
    end_stale_cancels(s, now);
    request_t *next;
    for (request_t *r = s->req_list; r; r = next) {
        next = r->next;
        if (r->state == RQ_RESOLVING &&
            now - r->resolve_sent_ms > s->cfg.resolve_timeout_ms)
            req_fail(s, r, CR_E_UNAVAILABLE, "registry did not answer");
    }
}

/* ---- lifecycle ---- */

cr_status_t sch_server_new(const sch_config_t *cfg, sch_server_t **out,
                           cr_err_t *err)
{
    sch_server_t *s = calloc(1, sizeof *s);
    if (!s)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    s->cfg = *cfg;
    if (cfg->has_inventory) {
        s->inv = cfg->inventory;
    } else {
        cr_status_t st = cr_inventory_discover(&s->inv, err);
        if (st) {
            free(s);
            return st;
        }
    }
    for (size_t k = 0; k < cr_inventory_lines(&s->inv); k++) {
        char line[512];
        cr_inventory_line(&s->inv, k, line, sizeof line);
        cr_log_info("%s", line);
    }
    s->front = zsock_new(ZMQ_ROUTER);
    s->runners = zsock_new(ZMQ_ROUTER);
    s->registry = zsock_new(ZMQ_DEALER);
    if (!s->front || !s->runners || !s->registry)
        goto fail_sockets;
    /* Replies to a gone peer fail fast instead of queueing forever; a
     * gateway that cannot take more waits in the outbox, never here. */
    zsock_set_router_mandatory(s->front, 1);
    zsock_set_router_mandatory(s->runners, 1);
    zsock_set_sndtimeo(s->front, 0);
    zsock_set_sndtimeo(s->runners, 1000);
    zsock_set_linger(s->front, 0);
    zsock_set_linger(s->runners, 0);
    zsock_set_linger(s->registry, 0);
    if (bus_listen(s->front, cfg->front_endpoint) < 0) {
        cr_err_set(err, CR_E_IO, "cannot bind %s: %s", cfg->front_endpoint,
                   zmq_strerror(zmq_errno()));
        goto fail_sockets;
    }
    if (zsock_bind(s->runners, "%s", cfg->runners_endpoint) < 0) {
        cr_err_set(err, CR_E_IO, "cannot bind %s: %s", cfg->runners_endpoint,
                   zmq_strerror(zmq_errno()));
        goto fail_sockets;
    }
    if (zsock_connect(s->registry, "%s", cfg->registry_endpoint) < 0) {
        cr_err_set(err, CR_E_IO, "cannot connect %s", cfg->registry_endpoint);
        goto fail_sockets;
    }
    s->outbox = bus_outbox_new(s->front, s->cfg.stream_buffer_bytes > 0
                                             ? s->cfg.stream_buffer_bytes
                                             : SCH_STREAM_BUFFER_DEFAULT);
    if (!s->outbox) {
        cr_err_set(err, CR_E_NOMEM, "cannot create the outbox");
        goto fail_sockets;
    }
    if (sch_nodes_open(s, err))
        goto fail_sockets;
    bus_poll_init(&s->poll); /* nodes is NULL when off: skipped */
    if (bus_poll_add(&s->poll, s->front) || bus_poll_add(&s->poll, s->runners) ||
        bus_poll_add(&s->poll, s->registry) || bus_poll_add(&s->poll, s->nodes)) {
        cr_err_set(err, CR_E_IO, "cannot poll the scheduler's sockets");
        goto fail_sockets;
    }
    sch_adopt_grace_begin(s);
    *out = s;
    return CR_OK;

fail_sockets:
    if (err && err->status == CR_OK)
        cr_err_set(err, CR_E_IO, "cannot create sockets");
    bus_outbox_destroy(&s->outbox);
    sch_nodes_close(s);
    zsock_destroy(&s->front);
    zsock_destroy(&s->runners);
    zsock_destroy(&s->registry);
    free(s);
    return err ? err->status : CR_E_IO;
}

void sch_server_run_once(sch_server_t *s, int timeout_ms)
{
    /* Replies waiting for slow gateways are retried often. */
    if (bus_outbox_flush(s->outbox, req_gone, s) && timeout_ms > OUTBOX_RETRY_MS)
        timeout_ms = OUTBOX_RETRY_MS;
    /* Every send marks its socket for the next wait (bus_poll.h). The
     * front's are the outbox's (replies, relays), so it is marked here. */
    bus_poll_mark(&s->poll, s->front);
    /* bus_poll asks only the sockets that may hold a message: a relayed
     * token costs a few system calls, not one pair per socket */
    zsock_t *which = bus_poll_wait(&s->poll, timeout_ms);
    /* Drain everything that is ready, not just one socket. */
    bool only_relays = which != NULL;
    for (int spin = 0; which && spin < 256; spin++) {
        if (which == s->front) {
            on_front(s);
            only_relays = false;
        } else if (which == s->runners) {
            only_relays &= on_runners(s);
        } else {
            if (which == s->registry)
                on_registry(s);
            else if (s->nodes && which == s->nodes)
                sch_nodes_on_readable(s);
            only_relays = false;
        }
        which = bus_poll_wait(&s->poll, 0);
    }
    /* A stream's tokens change nothing that the rest looks at (children,
     * nodes, timers, the queue): while only they come, it runs once every
     * HOUSEKEEP_MS, not once a token (a waitpid and list walks each). */
    int64_t now = mono_ms_default();
    if (only_relays && now - s->housekept_ms < HOUSEKEEP_MS)
        return;
    s->housekept_ms = now;
    reap_children(s);
    if (s->nodes)
        sch_nodes_check(s);
    run_timers(s);
    schedule(s);
}

void sch_server_run(sch_server_t *s)
{
    while (!zsys_interrupted)
        sch_server_run_once(s, TICK_MS);
}

int sch_server_drain(sch_server_t *s, int64_t timeout_ms)
{
    s->draining = true;
    s->poll.nonstop = true; /* past the SIGTERM */
    int64_t start = mono_ms_default();
    while (s->req_list && mono_ms_default() - start < timeout_ms)
        sch_server_run_once(s, TICK_MS);
    int n = 0;
    for (const request_t *r = s->req_list; r; r = r->next)
        n++;
    return n;
}

size_t sch_server_runner_count(const sch_server_t *s)
{
    return loaded_count(s);
}

size_t sch_server_pending_count(const sch_server_t *s)
{
    return pending_count(s);
}

int64_t sch_server_free_bytes(const sch_server_t *s, int slot)
{
    if (slot >= (int)s->inv.n_gpus)
        return 0;
    return sch_ledger_free(s, slot < 0 ? -1 : slot);
}

const cr_inventory_t *sch_server_inventory(const sch_server_t *s)
{
    return &s->inv;
}

void sch_server_destroy(sch_server_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    sch_server_t *s = *self_p;
    for (runner_t *rn = s->runner_list; rn; rn = rn->next)
        runner_stop(s, rn, "scheduler shutting down");
    sch_node_memo_remove(s); /* none of them is left to wait for */
    /* A node's runners got their shutdown through it; the node reaps them
     * (and kills what is left once it loses this scheduler). */
    runner_t *rnext;
    for (runner_t *rn = s->runner_list; rn; rn = rnext) {
        rnext = rn->next;
        if (rn->node)
            runner_free(s, rn);
    }
    /* Wait for them to exit, then make sure. */
    int64_t start = mono_ms_default();
    while (s->runner_list && mono_ms_default() - start < STOP_GRACE_MS) {
        reap_children(s);
        if (s->runner_list)
            zclock_sleep(20);
    }
    for (runner_t *rn = s->runner_list; rn; rn = rn->next)
        if (rn->pid > 0)
            kill(rn->pid, SIGKILL);
    zclock_sleep(50);
    reap_children(s);
    while (s->runner_list)
        runner_free(s, s->runner_list);
    while (s->req_list) {
        request_t *r = s->req_list;
        reply_error(s, r->client, r->id, CR_E_UNAVAILABLE,
                    "scheduler shutting down");
        req_unlink_free(s, r);
    }
    bus_outbox_flush(s->outbox, NULL, NULL); /* what can still go */
    bus_outbox_destroy(&s->outbox);
    zsock_destroy(&s->front);
    zsock_destroy(&s->runners);
    zsock_destroy(&s->registry);
    sch_nodes_close(s);
    free(s);
    *self_p = NULL;
}
