/* agent.c: the node agent (agent.h): heartbeat, runner processes, the
 * frame relay and the blob step of a load. */
#include "lib/prelude.h"
#include "services/node/agent.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/duration.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/self_path.h"
#include "lib/size.h"
#include "lib/spawn_runner.h"
#include "proto/bus_poll.h"
#include "proto/relay.h"
#include "services/node/blobs.h"
#include "services/node/load_blobs.h"

#define TICK_MS 100
#define STOP_GRACE_MS 3000
#define FETCH_TIMEOUT_MS 30000 /* a blob_get unanswered this long fails */

typedef struct nd_runner {
    char id[BUS_RELAY_TO_MAX + 1];
    pid_t pid;
    /* the blobs it loaded (model, adapters, projector); none before its
     * load: the cache bound keeps them while it lives */
    char digests[ND_LOAD_BLOBS_MAX][ND_DIGEST_MAX];
    size_t n_digests;
    struct nd_runner *next;
} nd_runner_t;

/* A load waiting for its blobs. */
typedef struct nd_wait {
    char runner_id[BUS_RELAY_TO_MAX + 1];
    nd_load_blobs_t blobs;   /* found one after another */
    msg_t load;              /* owned */
    struct nd_wait *next;
} nd_wait_t;

struct nd_agent {
    nd_config_t cfg;
    zsock_t *up;             /* DEALER to the scheduler (CURVE client) */
    zactor_t *monitor;       /* CONNECTED events of up; NULL if unavailable */
    bool ask_runners;        /* connected again: once the scheduler speaks,
                                ask every runner to say hello */
    char instance[MSG_ID_MAX + 1]; /* this process, in node_hello */
    zsock_t *runners;        /* ROUTER for this node's runners */
    bus_poll_t poll;         /* up, runners, the monitor's pipe */
    nd_runner_t *runner_list;
    nd_wait_t *waits;        /* arrival order */
    nd_fetch_t *fetch;       /* the one blob being fetched, or NULL */
    char fetch_id[MSG_ID_MAX + 1]; /* request id of its blob_get */
    int64_t fetch_started_ms;
    int64_t fetch_asked_ms;  /* when the last blob_get went out */
    int64_t last_hello_ms;
    int64_t last_heard_ms;   /* last frame from the scheduler */
    int64_t started_ms;
    bool joined;             /* heard since the last loss */
    bool silence_logged;
    int64_t reconnect_ms;    /* last fresh connect while silent; 0 = none */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- configuration ---- */

static cr_status_t env_ms(const char *name, int64_t def, int64_t *out,
                          cr_err_t *err)
{
    char v[64];
    *out = def;
    if (!cr_env_get(name, v, sizeof v))
        return CR_OK;
    if (cr_duration_parse(v, out, err) || *out <= 0)
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_%s '%s' is not a positive duration", name, v);
    return CR_OK;
}

cr_status_t nd_config_from_env(nd_config_t *cfg, cr_err_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    if (!cr_env_get("NODE_NAME", cfg->name, sizeof cfg->name) &&
        gethostname(cfg->name, sizeof cfg->name - 1))
        snprintf(cfg->name, sizeof cfg->name, "node");
    if (!cr_env_get("NODE_SCHEDULER", cfg->scheduler_endpoint,
                    sizeof cfg->scheduler_endpoint))
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_NODE_SCHEDULER is not set (the scheduler's "
                          "CORRAL_NODES_ENDPOINT as this host reaches it, "
                          "tcp://ADDR:PORT)");
    if (strncmp(cfg->scheduler_endpoint, "tcp://", 6))
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_NODE_SCHEDULER '%s' must be tcp://ADDR:PORT",
                          cfg->scheduler_endpoint);
    if (!cr_env_get("NODE_CERT", cfg->cert, sizeof cfg->cert))
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_NODE_CERT is not set (this node's "
                          "certificate from `corral keygen`)");
    if (!cr_env_get("NODE_SERVER_CERT", cfg->server_cert,
                    sizeof cfg->server_cert))
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_NODE_SERVER_CERT is not set (the "
                          "scheduler's public certificate)");
    cr_status_t st;
    if ((st = bus_endpoint("node_runners", cfg->runners_endpoint,
                           sizeof cfg->runners_endpoint, err)))
        return st;
    if ((st = cr_sibling_bin("corral-runner", "CORRAL_RUNNER_BIN",
                             cfg->runner_bin, sizeof cfg->runner_bin, err)))
        return st;
    if (!cr_env_get("NODE_CACHE", cfg->cache_dir, sizeof cfg->cache_dir)) {
        const char *home = getenv("HOME");
        snprintf(cfg->cache_dir, sizeof cfg->cache_dir, "%s/.corral/node-cache",
                 home && *home ? home : "/tmp");
    }
    cr_env_get("NODE_STORE", cfg->store_dir, sizeof cfg->store_dir);
    char max[64];
    if (cr_env_get("NODE_CACHE_MAX", max, sizeof max) &&
        cr_size_parse(max, &cfg->cache_max_bytes, err))
        return cr_err_wrap(err, "CORRAL_NODE_CACHE_MAX");
    if ((st = env_ms("NODE_HEARTBEAT", 1000, &cfg->heartbeat_ms, err)) ||
        (st = env_ms("NODE_TIMEOUT", 10000, &cfg->timeout_ms, err)))
        return st;
    return cr_inventory_discover(&cfg->inv, err);
}

/* ---- sending ---- */

static void send_up(nd_agent_t *a, const char *to, const msg_t *m)
{
    cr_err_t err;
    cr_status_t st = bus_relay_send_msg(a->up, NULL, to, m, &err);
    bus_poll_mark(&a->poll, a->up); /* a send may take its commands */
    if (st) {
        /* Until the CURVE handshake succeeds there is no connection to
         * queue on; the heartbeat says hello again. */
        if (a->joined)
            cr_log_warn("to the scheduler: %s dropped: %s",
                        msg_type_name(m->type), err.msg);
        else
            cr_log_debug("to the scheduler: %s dropped: %s",
                         msg_type_name(m->type), err.msg);
    }
}

static void send_hello(nd_agent_t *a)
{
    msg_t m;
    msg_init(&m, MSG_node_hello, "");
    msg_node_hello_body_t *h = &m.u.node_hello;
    msg_gpu_info_t gpus[CR_MAX_GPUS];
    const cr_inventory_t *inv = &a->cfg.inv;
    for (size_t i = 0; i < inv->n_gpus; i++) {
        const cr_gpu_t *g = &inv->gpus[i];
        msg_gpu_info_t *o = &gpus[i];
        memset(o, 0, sizeof *o);
        o->index = g->index;
        o->has_index = true;
        o->name = (char *)g->name;
        o->has_name = true;
        o->uuid = (char *)g->uuid;
        o->has_uuid = g->uuid[0] != '\0';
        o->cc_major = g->cc_major;
        o->has_cc_major = true;
        o->cc_minor = g->cc_minor;
        o->has_cc_minor = true;
        o->total = g->total_bytes;
        o->has_total = true;
        o->free = g->free_bytes;
        o->has_free = true;
    }
    h->name = a->cfg.name;
    h->has_name = true;
    h->gpus.v = gpus;
    h->gpus.n = inv->n_gpus;
    h->has_gpus = inv->n_gpus > 0;
    h->ram_total = inv->ram_total_bytes;
    h->has_ram_total = true;
    h->ram_free = inv->ram_free_bytes;
    h->has_ram_free = true;
    h->fake = inv->fake;
    h->has_fake = true;
    int64_t n = 0;
    for (const nd_runner_t *r = a->runner_list; r; r = r->next)
        n++;
    h->runners = n;
    h->has_runners = true;
    h->instance = a->instance;
    h->has_instance = true;
    send_up(a, "", &m);
    a->last_hello_ms = mono_ms();
}

/* A load that cannot be served: answered as the runner's load error. */
static void fail_load(nd_agent_t *a, const char *runner_id, cr_status_t st,
                      const char *text)
{
    msg_t e;
    msg_make_error(&e, runner_id, st, "node '%s': %s", a->cfg.name, text);
    send_up(a, runner_id, &e);
    msg_clear(&e);
}

/* ---- runners ---- */

static nd_runner_t *runner_find(nd_agent_t *a, const char *id)
{
    for (nd_runner_t *r = a->runner_list; r; r = r->next)
        if (!strcmp(r->id, id))
            return r;
    return NULL;
}

static void runner_spawn(nd_agent_t *a, const char *id)
{
    if (!*id || strlen(id) > BUS_RELAY_TO_MAX || runner_find(a, id)) {
        cr_log_warn("spawn of runner '%s' refused: bad or duplicate id", id);
        return;
    }
    nd_runner_t *r = calloc(1, sizeof *r);
    if (!r)
        return;
    snprintf(r->id, sizeof r->id, "%s", id);
    pid_t pid = 0;
    cr_err_t err;
    /* A runner never outlives its node agent (kill -9 included). */
    if (cr_spawn_runner(a->cfg.runner_bin, a->cfg.runners_endpoint, id, NULL, true,
                        &pid, &err)) {
        cr_log_error("runner %s: %s", id, err.msg);
        free(r);
        msg_t m;
        msg_init(&m, MSG_node_runner_exit, "");
        m.u.node_runner_exit.runner_id = (char *)id;
        m.u.node_runner_exit.has_runner_id = true;
        m.u.node_runner_exit.how = (char *)"could not be started";
        m.u.node_runner_exit.has_how = true;
        send_up(a, "", &m);
        return;
    }
    r->pid = pid;
    r->next = a->runner_list;
    a->runner_list = r;
    cr_log_info("runner %s started (pid %d)", id, (int)pid);
}

static void kill_all(nd_agent_t *a, int sig)
{
    for (nd_runner_t *r = a->runner_list; r; r = r->next)
        kill(r->pid, sig);
}

static void reap(nd_agent_t *a)
{
    int wst;
    pid_t pid;
    while ((pid = waitpid(-1, &wst, WNOHANG)) > 0) {
        nd_runner_t **pp = &a->runner_list;
        while (*pp && (*pp)->pid != pid)
            pp = &(*pp)->next;
        if (!*pp)
            continue;
        nd_runner_t *r = *pp;
        *pp = r->next;
        char how[96];
        if (WIFEXITED(wst))
            snprintf(how, sizeof how, "exit status %d", WEXITSTATUS(wst));
        else if (WIFSIGNALED(wst))
            snprintf(how, sizeof how, "signal %d (%s)", WTERMSIG(wst),
                     strsignal(WTERMSIG(wst)));
        else
            snprintf(how, sizeof how, "status %d", wst);
        cr_log_info("runner %s (pid %d) exited: %s", r->id, (int)pid, how);
        msg_t m;
        msg_init(&m, MSG_node_runner_exit, "");
        m.u.node_runner_exit.runner_id = r->id;
        m.u.node_runner_exit.has_runner_id = true;
        m.u.node_runner_exit.how = how;
        m.u.node_runner_exit.has_how = true;
        send_up(a, "", &m);
        free(r);
    }
}

/* ---- loads and blobs ---- */

/* Sends the load to its runner with every blob path set to this host's
 * copy. */
static void forward_load(nd_agent_t *a, const char *runner_id, msg_t *load,
                         const nd_load_blobs_t *lb)
{
    cr_err_t err;
    if (nd_load_blobs_rewrite(load, lb, &err)) {
        fail_load(a, runner_id, err.status, err.msg);
        return;
    }
    /* The blobs are in use while this runner lives: the cache bound keeps
     * them. */
    nd_runner_t *rn = runner_find(a, runner_id);
    if (rn) {
        rn->n_digests = lb->n;
        for (size_t i = 0; i < lb->n; i++)
            snprintf(rn->digests[i], sizeof rn->digests[i], "%s",
                     lb->v[i].digest);
    }
    zframe_t *to = zframe_new(runner_id, strlen(runner_id));
    if (bus_send_to(a->runners, to, load, &err))
        cr_log_warn("runner %s: load not delivered: %s", runner_id, err.msg);
    bus_poll_mark(&a->poll, a->runners);
    zframe_destroy(&to);
}

/* Finds the wait's blobs already on this node, in order; true when all
 * are. */
static bool resolve_blobs(nd_agent_t *a, nd_load_blobs_t *lb)
{
    nd_load_blob_t *b;
    while ((b = nd_load_blobs_pending(lb))) {
        if (!nd_blob_find(a->cfg.cache_dir, a->cfg.store_dir, b->digest,
                          b->path, sizeof b->path))
            return false;
        lb->next++;
    }
    return true;
}

static void ask_next_chunk(nd_agent_t *a)
{
    msg_t g;
    bus_new_id(a->fetch_id);
    msg_init(&g, MSG_blob_get, a->fetch_id);
    g.u.blob_get.digest = (char *)nd_fetch_digest(a->fetch);
    g.u.blob_get.has_digest = true;
    g.u.blob_get.offset = nd_fetch_offset(a->fetch);
    g.u.blob_get.has_offset = true;
    g.u.blob_get.length = ND_CHUNK_BYTES;
    g.u.blob_get.has_length = true;
    send_up(a, "", &g);
    a->fetch_asked_ms = mono_ms();
}

/* Starts the fetch of the first waiting load's blob, if none runs. */
static void start_next_fetch(nd_agent_t *a)
{
    while (!a->fetch && a->waits) {
        nd_wait_t *w = a->waits;
        if (resolve_blobs(a, &w->blobs)) {
            /* Every blob is here (fetched for this or an earlier load). */
            a->waits = w->next;
            forward_load(a, w->runner_id, &w->load, &w->blobs);
            msg_clear(&w->load);
            free(w);
            continue;
        }
        const nd_load_blob_t *b = nd_load_blobs_pending(&w->blobs);
        cr_err_t err;
        if (nd_fetch_new(a->cfg.cache_dir, b->digest, &a->fetch, &err)) {
            a->waits = w->next;
            char text[CR_ERR_MSG_MAX + 128]; /* role, digest, err.msg */
            snprintf(text, sizeof text, "%s blob %s: %s", b->role, b->digest,
                     err.msg);
            fail_load(a, w->runner_id, err.status, text);
            msg_clear(&w->load);
            free(w);
            continue;
        }
        a->fetch_started_ms = mono_ms();
        cr_log_info("fetching %s blob %s from the scheduler (resuming at "
                    "%" PRId64 " bytes)",
                    b->role, b->digest, nd_fetch_offset(a->fetch));
        ask_next_chunk(a);
    }
}

/* CORRAL_NODE_CACHE_MAX: after a fetch, least recently used blobs go
 * until the cache fits, except those of live runners, of loads waiting and
 * the one just fetched. */
static void prune_cache(nd_agent_t *a, const char *fetched)
{
    if (a->cfg.cache_max_bytes <= 0)
        return;
    size_t n = 1;
    for (nd_runner_t *r = a->runner_list; r; r = r->next)
        n += r->n_digests;
    for (nd_wait_t *w = a->waits; w; w = w->next)
        n += w->blobs.n;
    const char **keep = calloc(n, sizeof *keep);
    if (!keep) {
        cr_log_warn("blob cache: out of memory; not pruned");
        return;
    }
    size_t k = 0;
    keep[k++] = fetched;
    for (nd_runner_t *r = a->runner_list; r; r = r->next)
        for (size_t i = 0; i < r->n_digests; i++)
            keep[k++] = r->digests[i];
    /* a waiting load's blobs found already must outlast the fetch of
     * the rest */
    for (nd_wait_t *w = a->waits; w; w = w->next)
        for (size_t i = 0; i < w->blobs.n; i++)
            keep[k++] = w->blobs.v[i].digest;
    nd_prune_t pr;
    cr_err_t err;
    if (nd_cache_prune(a->cfg.cache_dir, a->cfg.cache_max_bytes, keep, k, &pr,
                       &err))
        cr_log_warn("blob cache: %s", err.msg);
    else if (pr.n_removed || pr.total_bytes > a->cfg.cache_max_bytes)
        cr_log_info("blob cache: removed %d least recently used blobs "
                    "(%" PRId64 " bytes); %" PRId64 " bytes left of %" PRId64
                    "%s",
                    pr.n_removed, pr.removed_bytes, pr.total_bytes,
                    a->cfg.cache_max_bytes,
                    pr.total_bytes > a->cfg.cache_max_bytes
                        ? " (the rest is in use)"
                        : "");
    free(keep);
}

/* The fetch ended (st CR_OK: the blob is in place). On failure every
 * load still needing that digest fails, naming the blob; on success the
 * loads go on in order (start_next_fetch finds it in the cache). */
static void end_fetch(nd_agent_t *a, cr_status_t st, const char *text)
{
    const char *digest = nd_fetch_digest(a->fetch);
    nd_wait_t **pp = &a->waits;
    while (st && *pp) {
        nd_wait_t *w = *pp;
        if (!nd_load_blobs_waits_for(&w->blobs, digest)) {
            pp = &w->next;
            continue;
        }
        *pp = w->next;
        const char *role = "";
        for (size_t i = w->blobs.next; i < w->blobs.n && !*role; i++)
            if (!strcmp(w->blobs.v[i].digest, digest))
                role = w->blobs.v[i].role;
        char msg[CR_ERR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s blob %s cannot be fetched: %s", role,
                 digest, text);
        fail_load(a, w->runner_id, st, msg);
        msg_clear(&w->load);
        free(w);
    }
    if (st)
        cr_log_error("blob %s: %s", digest, text);
    else
        cr_log_info("blob %s fetched and verified in %.1f s", digest,
                    (double)(mono_ms() - a->fetch_started_ms) / 1000);
    if (!st)
        prune_cache(a, digest);
    nd_fetch_destroy(&a->fetch);
    a->fetch_id[0] = '\0';
    start_next_fetch(a);
}

static void on_blob_reply(nd_agent_t *a, const msg_t *m)
{
    if (!a->fetch || strcmp(m->id, a->fetch_id))
        return; /* an answer to a fetch that already ended */
    if (m->type == MSG_error) {
        end_fetch(a, (cr_status_t)m->u.error.status, m->u.error.message);
        return;
    }
    const msg_blob_data_body_t *d = &m->u.blob_data;
    bool done = false;
    cr_err_t err;
    if (nd_fetch_feed(a->fetch, d->offset, d->total, d->data.data,
                      d->has_data ? d->data.len : 0, &done, &err)) {
        end_fetch(a, err.status, err.msg);
        return;
    }
    if (done)
        end_fetch(a, CR_OK, NULL);
    else
        ask_next_chunk(a);
}

/* A load for runner_id: find or fetch its blobs (model, adapters,
 * projector) first. Takes *load. */
static void on_load(nd_agent_t *a, const char *runner_id, msg_t *load)
{
    nd_wait_t *w = calloc(1, sizeof *w);
    if (!w) {
        fail_load(a, runner_id, CR_E_NOMEM, "out of memory");
        msg_clear(load);
        return;
    }
    cr_err_t err;
    if (nd_load_blobs_of(load, &w->blobs, &err)) {
        fail_load(a, runner_id, err.status, err.msg);
        msg_clear(load);
        free(w);
        return;
    }
    if (resolve_blobs(a, &w->blobs)) {
        forward_load(a, runner_id, load, &w->blobs);
        msg_clear(load);
        free(w);
        return;
    }
    snprintf(w->runner_id, sizeof w->runner_id, "%s", runner_id);
    w->load = *load;
    memset(load, 0, sizeof *load);
    nd_wait_t **pp = &a->waits;
    while (*pp)
        pp = &(*pp)->next;
    *pp = w;
    start_next_fetch(a);
}

/* ---- inbound ---- */

/* The link to the scheduler was made again (a restarted scheduler, or a
 * connection that broke and came back): say hello at once, and have the
 * runners say hello once the scheduler answers, so a new scheduler adopts
 * them within moments. */
static void on_monitor(nd_agent_t *a)
{
    zmsg_t *ev = zmsg_recv(a->monitor);
    if (!ev)
        return;
    char *name = zmsg_popstr(ev);
    if (name && !strcmp(name, "CONNECTED")) {
        send_hello(a);
        a->ask_runners = a->runner_list != NULL;
    }
    free(name);
    zmsg_destroy(&ev);
}

/* Who is there? Each runner answers with its hello (what it holds). */
static void ask_runners(nd_agent_t *a)
{
    a->ask_runners = false;
    for (nd_runner_t *r = a->runner_list; r; r = r->next) {
        msg_t m;
        msg_init(&m, MSG_hello, r->id);
        m.u.hello.runner_id = r->id;
        m.u.hello.has_runner_id = true;
        zframe_t *to = zframe_new(r->id, strlen(r->id));
        cr_err_t err;
        if (bus_send_to(a->runners, to, &m, &err))
            cr_log_debug("runner %s: hello not delivered: %s", r->id, err.msg);
        bus_poll_mark(&a->poll, a->runners);
        zframe_destroy(&to);
    }
}

static void on_up(nd_agent_t *a)
{
    zframe_t *payload = NULL;
    char to[BUS_RELAY_TO_MAX + 1];
    cr_err_t err;
    if (bus_relay_recv(a->up, NULL, to, sizeof to, &payload, &err)) {
        cr_log_warn("bad frame from the scheduler: %s", err.msg);
        return;
    }
    a->last_heard_ms = mono_ms();
    if (a->ask_runners)
        ask_runners(a);
    if (!a->joined) {
        a->joined = true;
        a->silence_logged = false;
        cr_log_info("joined the scheduler at %s as '%s'",
                    a->cfg.scheduler_endpoint, a->cfg.name);
    }
    msg_t m;
    if (msg_decode(zframe_data(payload), zframe_size(payload), &m, &err)) {
        cr_log_warn("bad message from the scheduler (for '%s'): %s", to,
                    err.msg);
        zframe_destroy(&payload);
        return;
    }
    if (to[0]) {
        if (m.type == MSG_load) {
            on_load(a, to, &m);
        } else {
            zframe_t *id = zframe_new(to, strlen(to));
            cr_err_t serr;
            zmsg_t *zm = zmsg_new();
            zmsg_append(zm, &id);
            zmsg_append(zm, &payload);
            if (zmsg_send(&zm, a->runners))
                cr_log_debug("to runner %s: %s dropped (%s)", to,
                             msg_type_name(m.type), zmq_strerror(zmq_errno()));
            bus_poll_mark(&a->poll, a->runners);
            zmsg_destroy(&zm);
            CR_UNUSED(serr);
        }
        msg_clear(&m);
        zframe_destroy(&payload);
        return;
    }
    switch (m.type) {
    case MSG_pong:
        break;
    case MSG_node_spawn:
        runner_spawn(a, m.u.node_spawn.runner_id);
        break;
    case MSG_node_kill: {
        nd_runner_t *r = runner_find(a, m.u.node_kill.runner_id);
        if (r)
            kill(r->pid, SIGKILL);
        break;
    }
    case MSG_blob_data:
        on_blob_reply(a, &m);
        break;
    case MSG_error:
        if (a->fetch && !strcmp(m.id, a->fetch_id))
            on_blob_reply(a, &m);
        else if (m.u.error.status == CR_E_UNAVAILABLE)
            send_hello(a); /* it forgot us (we were lost): join again */
        else
            cr_log_warn("scheduler: %s", m.u.error.message);
        break;
    default:
        cr_log_warn("unexpected %s from the scheduler", msg_type_name(m.type));
        break;
    }
    msg_clear(&m);
    zframe_destroy(&payload);
}

static void on_runners(nd_agent_t *a)
{
    zmsg_t *zm = zmsg_recv(a->runners);
    if (!zm)
        return;
    zframe_t *id = zmsg_pop(zm);
    zframe_t *body = zmsg_pop(zm);
    char rid[BUS_RELAY_TO_MAX + 1] = "";
    if (id && zframe_size(id) < sizeof rid) {
        memcpy(rid, zframe_data(id), zframe_size(id));
        rid[zframe_size(id)] = '\0';
    }
    cr_err_t err;
    if (!body || zmsg_size(zm) != 0 || !rid[0] || strlen(rid) != zframe_size(id))
        cr_log_warn("malformed frame from runner '%s' dropped", rid);
    else if (bus_relay_send(a->up, NULL, rid, zframe_data(body),
                            zframe_size(body), &err))
        cr_log_warn("runner %s: frame to the scheduler dropped: %s", rid,
                    err.msg);
    bus_poll_mark(&a->poll, a->up);
    zframe_destroy(&id);
    zframe_destroy(&body);
    zmsg_destroy(&zm);
}

/* Heartbeat out; a scheduler silent for the timeout is lost. */
static void timers(nd_agent_t *a)
{
    int64_t now = mono_ms();
    if (now - a->last_hello_ms >= a->cfg.heartbeat_ms)
        send_hello(a);
    if (a->fetch && now - a->fetch_asked_ms > FETCH_TIMEOUT_MS)
        end_fetch(a, CR_E_TIMEOUT, "the scheduler stopped sending the blob");
    int64_t heard = a->last_heard_ms ? a->last_heard_ms : a->started_ms;
    if (now - heard <= a->cfg.timeout_ms)
        return;
    if (!a->silence_logged) {
        if (a->joined)
            cr_log_error("lost the scheduler at %s: nothing heard for %.1f s; "
                         "stopping this node's runners and reconnecting",
                         a->cfg.scheduler_endpoint,
                         (double)(now - heard) / 1000);
        else
            cr_log_error("no answer from the scheduler at %s for %.1f s: is "
                         "it running, and is this node's public key (%s) in "
                         "its CORRAL_NODE_KEYS_DIR?",
                         a->cfg.scheduler_endpoint,
                         (double)(now - heard) / 1000, a->cfg.cert);
        a->silence_logged = true;
    }
    a->joined = false;
    /* The scheduler dropped them from its ledger: they must not hold
     * memory it will place something else in. */
    kill_all(a, SIGKILL);
    /* libzmq gives up on a connection whose CURVE handshake was refused
     * (a key not listed yet): connect afresh every timeout while silent,
     * so a key the scheduler admits later (docs/deploy.md "Rotating CURVE
     * keys") is tried again without restarting this node. */
    if (now - a->reconnect_ms >= a->cfg.timeout_ms) {
        zsock_disconnect(a->up, "%s", a->cfg.scheduler_endpoint);
        if (zsock_connect(a->up, "%s", a->cfg.scheduler_endpoint) < 0)
            cr_log_warn("cannot connect to %s again: %s",
                        a->cfg.scheduler_endpoint, zmq_strerror(zmq_errno()));
        bus_poll_mark(&a->poll, a->up);
        a->reconnect_ms = now;
    }
}

/* ---- lifecycle ---- */

cr_status_t nd_agent_new(const nd_config_t *cfg, nd_agent_t **out,
                         cr_err_t *err)
{
    nd_agent_t *a = calloc(1, sizeof *a);
    if (!a)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    a->cfg = *cfg;
    a->started_ms = mono_ms();
    bus_new_id(a->instance);
    cr_status_t st = CR_OK;
    a->up = zsock_new(ZMQ_DEALER);
    a->runners = zsock_new(ZMQ_ROUTER);
    if (!a->up || !a->runners) {
        st = cr_err_set(err, CR_E_IO, "cannot create sockets");
        goto fail;
    }
    zsock_set_linger(a->up, 0);
    zsock_set_linger(a->runners, 0);
    /* Never block the loop on the network: a frame that cannot be queued
     * now is dropped (a lost link is the heartbeat's business). */
    zsock_set_sndtimeo(a->up, 0);
    zsock_set_sndhwm(a->up, 10000);
    zsock_set_sndtimeo(a->runners, 1000);
    zsock_set_router_mandatory(a->runners, 1);
    if ((st = bus_curve_client(a->up, cfg->cert, cfg->server_cert, err)))
        goto fail;
    if (zsock_bind(a->runners, "%s", cfg->runners_endpoint) < 0) {
        st = cr_err_set(err, CR_E_IO, "cannot bind %s: %s",
                        cfg->runners_endpoint, zmq_strerror(zmq_errno()));
        goto fail;
    }
    a->monitor = zactor_new(zmonitor, a->up);
    if (a->monitor) {
        zstr_sendx(a->monitor, "LISTEN", "CONNECTED", NULL);
        zstr_send(a->monitor, "START");
        zsock_wait(a->monitor);
    }
    if (zsock_connect(a->up, "%s", cfg->scheduler_endpoint) < 0) {
        st = cr_err_set(err, CR_E_IO, "cannot connect to %s",
                        cfg->scheduler_endpoint);
        goto fail;
    }
    bus_poll_init(&a->poll);
    if (bus_poll_add(&a->poll, a->up) || bus_poll_add(&a->poll, a->runners) ||
        (a->monitor && bus_poll_add(&a->poll, zactor_sock(a->monitor)))) {
        st = cr_err_set(err, CR_E_IO, "cannot poll the node's sockets");
        goto fail;
    }
    *out = a;
    return CR_OK;
fail:
    nd_agent_destroy(&a);
    return st;
}

void nd_agent_run(nd_agent_t *a)
{
    send_hello(a);
    while (!zsys_interrupted) {
        /* bus_poll: ZMQ_EVENTS only of sockets that may hold a message
         * (a relayed token costs a few system calls, not two a socket) */
        zsock_t *which = bus_poll_wait(&a->poll, TICK_MS);
        for (int spin = 0; which && spin < 256; spin++) {
            if (which == a->up)
                on_up(a);
            else if (which == a->runners)
                on_runners(a);
            else if (a->monitor && which == zactor_sock(a->monitor))
                on_monitor(a);
            which = bus_poll_wait(&a->poll, 0);
        }
        reap(a);
        timers(a);
    }
}

void nd_agent_destroy(nd_agent_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    nd_agent_t *a = *self_p;
    kill_all(a, SIGTERM);
    int64_t start = mono_ms();
    while (a->runner_list && mono_ms() - start < STOP_GRACE_MS) {
        reap(a);
        if (a->runner_list)
            zclock_sleep(20);
    }
    kill_all(a, SIGKILL);
    zclock_sleep(20);
    reap(a);
    while (a->runner_list) {
        nd_runner_t *r = a->runner_list;
        a->runner_list = r->next;
        free(r);
    }
    while (a->waits) {
        nd_wait_t *w = a->waits;
        a->waits = w->next;
        msg_clear(&w->load);
        free(w);
    }
    nd_fetch_destroy(&a->fetch);
    zactor_destroy(&a->monitor);
    zsock_destroy(&a->up);
    zsock_destroy(&a->runners);
    free(a);
    *self_p = NULL;
}
