/* nodes.c: GPU hosts that join through a node agent (services/node/).
 *
 * The scheduler binds a ROUTER on CORRAL_NODES_ENDPOINT, a CURVE server
 * whose ZAP handler admits only the public keys in CORRAL_NODE_KEYS_DIR.
 * Each node announces itself with node_hello (also its heartbeat, answered
 * pong), starts runners on node_spawn, reports their exits, and relays
 * their frames as [runner id][payload] (proto/relay.h). Runners on a node
 * are ordinary runner_t entries with `node` set, handled by sched.c like
 * local ones. A node silent for CORRAL_NODE_TIMEOUT is lost: its runners
 * are gone, their requests fail (or run again elsewhere if they had no
 * output yet), and their plans leave the ledger.
 *
 * Blobs: a node asks for each blob (GGUF, adapters, projector) of a model
 * placed on it with blob_get; this file serves it from the store path the
 * registry resolved (the scheduler reads those paths for estimates
 * already), and only for digests of models placed on that node. */
#include "lib/prelude.h"
#include "services/scheduler/sched_int.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/log.h"
#include "proto/relay.h"
#include "services/scheduler/node_blobs.h"

cr_status_t sch_nodes_open(sch_server_t *s, cr_err_t *err)
{
    if (!s->cfg.nodes_endpoint[0])
        return CR_OK;
    cr_status_t st = bus_curve_keys_stamp(s->cfg.node_keys_dir,
                                          &s->keys_stamp, err);
    if (!st)
        st = bus_curve_auth_new(s->cfg.node_keys_dir, &s->auth, err);
    if (st)
        return cr_err_wrap(err, "CORRAL_NODE_KEYS_DIR");
    s->keys_checked_ms = sch_now_ms(s);
    s->nodes = zsock_new(ZMQ_ROUTER);
    if (!s->nodes)
        return cr_err_set(err, CR_E_IO, "cannot create the nodes socket");
    zsock_set_router_mandatory(s->nodes, 1);
    zsock_set_sndtimeo(s->nodes, 1000);
    zsock_set_linger(s->nodes, 0);
    if ((st = bus_curve_server(s->nodes, s->cfg.nodes_cert, err)))
        return cr_err_wrap(err, "CORRAL_NODES_CERT");
    if (zsock_bind(s->nodes, "%s", s->cfg.nodes_endpoint) < 0)
        return cr_err_set(err, CR_E_IO, "cannot bind %s: %s",
                          s->cfg.nodes_endpoint, zmq_strerror(zmq_errno()));
    cr_log_info("accepting nodes on %s (CURVE; %" PRId64 " keys from %s)",
                s->cfg.nodes_endpoint, s->keys_stamp.n_keys,
                s->cfg.node_keys_dir);
    return CR_OK;
}

static sch_node_t *node_by_ident(sch_server_t *s, zframe_t *ident)
{
    for (sch_node_t *nd = s->node_list; nd; nd = nd->next)
        if (zframe_eq(nd->ident, ident))
            return nd;
    return NULL;
}

bool sch_node_send(sch_server_t *s, sch_node_t *nd, const char *to,
                   const msg_t *m)
{
    cr_err_t err;
    cr_status_t st = bus_relay_send_msg(s->nodes, nd->ident, to, m, &err);
    bus_poll_mark(&s->poll, s->nodes); /* a send may take its commands */
    if (st) {
        cr_log_warn("node '%s': send %s failed: %s", nd->name,
                    msg_type_name(m->type), err.msg);
        return false;
    }
    return true;
}

/* The node is gone: every runner on it is gone, then the node. */
static void node_lost(sch_server_t *s, sch_node_t *nd, const char *why)
{
    cr_log_error("node '%s' lost: %s", nd->name, why);
    char how[200];
    snprintf(how, sizeof how, "node '%s' lost: %s", nd->name, why);
    runner_t *next;
    for (runner_t *rn = s->runner_list; rn; rn = next) {
        next = rn->next;
        if (rn->node == nd)
            sch_runner_gone(s, rn, 0, how);
    }
    for (sch_node_t **pp = &s->node_list; *pp; pp = &(*pp)->next) {
        if (*pp == nd) {
            *pp = nd->next;
            break;
        }
    }
    zframe_destroy(&nd->ident);
    free(nd);
}

/* node_hello: a new node joins; a known one refreshes its heartbeat. */
static void on_node_hello(sch_server_t *s, zframe_t *ident, sch_node_t *nd,
                          const msg_t *m)
{
    const msg_node_hello_body_t *h = &m->u.node_hello;
    const char *inst = h->has_instance && h->instance ? h->instance : "";
    if (!nd) {
        /* Back with a new identity: the same agent whose connection broke
         * and came back keeps its runners; a restarted one's runners died
         * with it. */
        for (sch_node_t *old = s->node_list; old; old = old->next) {
            if (strcmp(old->name, h->name))
                continue;
            if (inst[0] && !strcmp(old->instance, inst)) {
                cr_log_info("node '%s' reconnected", old->name);
                zframe_destroy(&old->ident);
                old->ident = zframe_dup(ident);
                nd = old;
            } else {
                node_lost(s, old, "it reconnected (restarted)");
            }
            break;
        }
    }
    if (!nd) {
        nd = calloc(1, sizeof *nd);
        if (!nd)
            return;
        snprintf(nd->name, sizeof nd->name, "%s", h->name);
        snprintf(nd->instance, sizeof nd->instance, "%s", inst);
        nd->ident = zframe_dup(ident);
        size_t n = CR_MIN(h->gpus.n, (size_t)CR_MAX_GPUS);
        for (size_t i = 0; i < n; i++) {
            const msg_gpu_info_t *g = &h->gpus.v[i];
            cr_gpu_t *d = &nd->inv.gpus[i];
            d->index = (int)g->index;
            snprintf(d->name, sizeof d->name, "%s", g->has_name ? g->name : "");
            snprintf(d->uuid, sizeof d->uuid, "%s", g->has_uuid ? g->uuid : "");
            d->cc_major = (int)g->cc_major;
            d->cc_minor = (int)g->cc_minor;
            d->total_bytes = g->total > 0 ? g->total : 0;
            d->free_bytes = g->has_free ? CR_MAX(g->free, (int64_t)0)
                                        : d->total_bytes;
        }
        nd->inv.n_gpus = n;
        nd->inv.ram_total_bytes = CR_MAX(h->ram_total, (int64_t)0);
        nd->inv.ram_free_bytes = CR_MAX(h->ram_free, (int64_t)0);
        nd->inv.fake = h->fake;
        nd->next = NULL;
        sch_node_t **pp = &s->node_list;
        while (*pp)
            pp = &(*pp)->next;
        *pp = nd;
        int64_t vram = 0;
        for (size_t i = 0; i < n; i++)
            vram += nd->inv.gpus[i].free_bytes;
        cr_log_info("node '%s' joined: %zu GPUs (%.1f GiB free%s), %.1f GiB "
                    "memory available",
                    nd->name, n, (double)vram / (1 << 30),
                    nd->inv.fake ? ", described" : "",
                    (double)nd->inv.ram_free_bytes / (1 << 30));
        /* Runners it already has are from before a restart of this
         * scheduler: they say hello (the node asks them) and are adopted. */
        if (h->has_runners)
            sch_adopt_grace_node(s, nd, h->runners);
    }
    nd->last_seen_ms = sch_now_ms(s);
    msg_t pong;
    msg_init(&pong, MSG_pong, m->id);
    sch_node_send(s, nd, "", &pong);
}

/* blob_get: a chunk of a blob (model, adapter or projector) of a model
 * placed on this node. */
static void on_blob_get(sch_server_t *s, sch_node_t *nd, const msg_t *m)
{
    const msg_blob_get_body_t *g = &m->u.blob_get;
    const char *path = NULL;
    for (runner_t *rn = s->runner_list; rn && !path; rn = rn->next)
        if (rn->node == nd)
            path = sch_node_blob_path(&rn->resolved.u.resolved, g->digest);
    msg_t reply;
    if (!path) {
        msg_make_error(&reply, m->id, CR_E_FORBIDDEN,
                       "blob %s belongs to no model placed on node '%s'",
                       g->digest, nd->name);
        goto send;
    }
    if (g->offset < 0 || g->length < 0) {
        msg_make_error(&reply, m->id, CR_E_INVALID,
                       "blob_get: negative offset or length");
        goto send;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0 || fstat(fd, &sb)) {
        msg_make_error(&reply, m->id, CR_E_IO, "blob %s: %s", g->digest,
                       strerror(errno));
        if (fd >= 0)
            close(fd);
        goto send;
    }
    int64_t total = sb.st_size;
    int64_t want = CR_MIN(g->length, (int64_t)NODE_BLOB_CHUNK_MAX);
    if (g->offset >= total)
        want = 0;
    else
        want = CR_MIN(want, total - g->offset);
    msg_init(&reply, MSG_blob_data, m->id);
    uint8_t *buf = want ? msg_alloc(&reply, (size_t)want) : NULL;
    ssize_t got = 0;
    if (want && buf)
        got = pread(fd, buf, (size_t)want, g->offset);
    close(fd);
    if ((want && !buf) || got != want) {
        msg_clear(&reply);
        msg_make_error(&reply, m->id, CR_E_IO, "blob %s: short read",
                       g->digest);
        goto send;
    }
    reply.u.blob_data.offset = g->offset;
    reply.u.blob_data.has_offset = true;
    reply.u.blob_data.total = total;
    reply.u.blob_data.has_total = true;
    reply.u.blob_data.data.data = buf;
    reply.u.blob_data.data.len = (size_t)want;
    reply.u.blob_data.has_data = want > 0;
send:
    sch_node_send(s, nd, "", &reply);
    msg_clear(&reply);
}

static void on_node_control(sch_server_t *s, zframe_t *ident, sch_node_t *nd,
                            msg_t *m)
{
    if (m->type == MSG_node_hello) {
        on_node_hello(s, ident, nd, m);
        return;
    }
    if (!nd) {
        /* Lost and back (a cut link): it must say hello again first. */
        msg_t e;
        msg_make_error(&e, m->id, CR_E_UNAVAILABLE, "unknown node; send "
                                                    "node_hello");
        cr_err_t err;
        bus_relay_send_msg(s->nodes, ident, "", &e, &err);
        bus_poll_mark(&s->poll, s->nodes);
        msg_clear(&e);
        return;
    }
    switch (m->type) {
    case MSG_node_runner_exit: {
        for (runner_t *rn = s->runner_list; rn; rn = rn->next) {
            if (rn->node == nd && !strcmp(rn->id, m->u.node_runner_exit.runner_id)) {
                const char *how = m->u.node_runner_exit.has_how
                                      ? m->u.node_runner_exit.how
                                      : "exited";
                char text[200];
                snprintf(text, sizeof text, "%s on node '%s'", how, nd->name);
                sch_runner_gone(s, rn, 0, text);
                break;
            }
        }
        break;
    }
    case MSG_blob_get:
        on_blob_get(s, nd, m);
        break;
    case MSG_ping: {
        msg_t pong;
        msg_init(&pong, MSG_pong, m->id);
        sch_node_send(s, nd, "", &pong);
        break;
    }
    default:
        cr_log_warn("node '%s' sent unexpected %s", nd->name,
                    msg_type_name(m->type));
        break;
    }
}

void sch_nodes_on_readable(sch_server_t *s)
{
    for (int spin = 0; spin < 256 && (zsock_events(s->nodes) & ZMQ_POLLIN);
         spin++) {
        zframe_t *ident = NULL, *payload = NULL;
        char to[BUS_RELAY_TO_MAX + 1];
        cr_err_t err;
        cr_status_t st = bus_relay_recv(s->nodes, &ident, to, sizeof to,
                                        &payload, &err);
        sch_node_t *nd = ident ? node_by_ident(s, ident) : NULL;
        if (st) {
            cr_log_warn("bad frame from node '%s': %s", nd ? nd->name : "?",
                        err.msg);
            goto next;
        }
        if (to[0] && nd && sch_runner_relay(s, nd, to, &payload)) {
            nd->last_seen_ms = sch_now_ms(s);
            goto next;
        }
        msg_t m;
        if (msg_decode(zframe_data(payload), zframe_size(payload), &m, &err)) {
            cr_log_warn("bad message from node '%s' (for '%s'): %s",
                        nd ? nd->name : "?", to, err.msg);
            goto next;
        }
        if (nd)
            nd->last_seen_ms = sch_now_ms(s);
        if (to[0] && nd)
            sch_runner_msg(s, nd, to, &m); /* takes m */
        else if (!to[0])
            on_node_control(s, ident, nd, &m);
        msg_clear(&m);
    next:
        zframe_destroy(&ident);
        zframe_destroy(&payload);
    }
}

/* Key rotation without a restart (docs/deploy.md): when the keys dir's
 * stamp changes, the ZAP handler loads it afresh. Connected nodes stay;
 * the new set decides every later handshake. An unreadable dir keeps the
 * keys loaded last (a dir vanishing for a moment must not lock out every
 * node), with one warning. */
static void keys_check(sch_server_t *s, int64_t now)
{
    if (!s->auth || now - s->keys_checked_ms < NODE_KEYS_CHECK_MS)
        return;
    s->keys_checked_ms = now;
    bus_keys_stamp_t st;
    cr_err_t err;
    if (bus_curve_keys_stamp(s->cfg.node_keys_dir, &st, &err)) {
        if (!s->keys_dir_bad)
            cr_log_warn("%s; keeping the %" PRId64 " node keys loaded before",
                        err.msg, s->keys_stamp.n_keys);
        s->keys_dir_bad = true;
        return;
    }
    s->keys_dir_bad = false;
    if (!memcmp(&st, &s->keys_stamp, sizeof st))
        return;
    bus_curve_auth_reload(s->auth, s->cfg.node_keys_dir);
    s->keys_stamp = st;
    cr_log_info("node keys reloaded from %s: %" PRId64 " admitted",
                s->cfg.node_keys_dir, st.n_keys);
}

void sch_nodes_check(sch_server_t *s)
{
    int64_t timeout = s->cfg.node_timeout_ms > 0 ? s->cfg.node_timeout_ms
                                                 : NODE_TIMEOUT_MS;
    int64_t now = sch_now_ms(s);
    keys_check(s, now);
    sch_node_t *next;
    for (sch_node_t *nd = s->node_list; nd; nd = next) {
        next = nd->next;
        if (now - nd->last_seen_ms > timeout) {
            char why[96];
            snprintf(why, sizeof why, "no heartbeat for %.1f s",
                     (double)(now - nd->last_seen_ms) / 1000);
            node_lost(s, nd, why);
        }
    }
}

void sch_nodes_close(sch_server_t *s)
{
    while (s->node_list) {
        sch_node_t *nd = s->node_list;
        s->node_list = nd->next;
        zframe_destroy(&nd->ident);
        free(nd);
    }
    zsock_destroy(&s->nodes);
    zactor_destroy(&s->auth);
}
