/* adopt.c: taking over runners that outlived a scheduler restart.
 *
 * A runner whose scheduler went away keeps its model and, as soon as the
 * new scheduler binds the runners endpoint again (ZeroMQ reconnects its
 * DEALER by itself; a socket monitor tells the runner), says hello again
 * with what it holds. The new scheduler knows nothing of it: it builds a
 * READY runner from the hello so the next request for that model is
 * served without a load. Until every runner left by the previous
 * scheduler did so (found in /proc at start; on nodes, counted in their
 * node_hello), the adoption grace holds loads back, for at most
 * CORRAL_ADOPT_GRACE (docs/architecture.md "Scheduler restarts"). */
#include "lib/prelude.h"
#include "services/scheduler/sched_int.h"

#include <dirent.h>
#include <unistd.h>

#include "lib/log.h"
#include "proto/wire.h"
#include "services/scheduler/options.h"
#include "services/scheduler/spawn.h"

void sch_runner_set_direct(const sch_server_t *s, runner_t *rn, const msg_hello_body_t *h)
{
    rn->direct[0] = '\0';
    /* Only a local runner: a gateway cannot reach a node's socket. */
    if (!rn->node && s->cfg.direct_replies && h->has_direct && h->direct &&
        bus_wire_path(h->direct) && strlen(h->direct) < sizeof rn->direct)
        snprintf(rn->direct, sizeof rn->direct, "%s", h->direct);
}

runner_t *sch_runner_adopt(sch_server_t *s, sch_node_t *node, const char *id,
                           const msg_hello_body_t *h)
{
    if (!h->has_name || !h->name || !*h->name || !h->has_model_path ||
        !h->model_path || !*h->model_path)
        return NULL;
    if (!id[0] || strlen(id) >= sizeof(((runner_t *)0)->id))
        return NULL;
    runner_t *rn = calloc(1, sizeof *rn);
    if (!rn)
        return NULL;
    snprintf(rn->id, sizeof rn->id, "%s", id);
    msg_init(&rn->resolved, MSG_resolved, id);
    msg_resolved_body_t *res = &rn->resolved.u.resolved;
    res->name = msg_strdup(&rn->resolved, h->name);
    res->model_path = msg_strdup(&rn->resolved, h->model_path);
    if (!res->name || !res->model_path) {
        msg_clear(&rn->resolved);
        free(rn);
        return NULL;
    }
    res->has_name = res->has_model_path = true;
    if (h->has_options)
        sch_options_overlay_load(&rn->load_opts, h->options);
    /* Signal only a process that is really a runner. */
    pid_t pid = h->has_pid && h->pid > 0 && h->pid < INT32_MAX
                    ? (pid_t)h->pid
                    : 0;
    rn->node = node;
    if (node)
        pid = 0; /* its node reports its exit */
    rn->pid = sch_pid_is_runner(pid, s->cfg.runner_bin) ? pid : 0;
    rn->adopted = !node;
    sch_runner_set_direct(s, rn, h);
    rn->n_slots = h->has_num_parallel && h->num_parallel > 0 &&
                          h->num_parallel < 1024
                      ? (int)h->num_parallel
                      : s->cfg.num_parallel;
    rn->keep_alive_ms = s->cfg.keep_alive_ms;
    rn->size = h->has_size && h->size > 0 ? h->size : 0;
    rn->size_vram = h->has_size_vram && h->size_vram > 0 ? h->size_vram : 0;
    rn->context_length = h->has_context_length && h->context_length > 0
                             ? h->context_length
                             : 0;
    if (h->has_offload_error && h->offload_error)
        snprintf(rn->offload_error, sizeof rn->offload_error, "%s", h->offload_error);
    rn->state = RS_READY;
    rn->state_since_ms = rn->last_used_ms = rn->last_seen_ms = sch_now_ms(s);
    rn->next = s->runner_list;
    s->runner_list = rn;
    s->memo_stale = true;
    if (pid > 0 && rn->pid == 0)
        cr_log_warn("runner %s claims pid %d, which is not %s; it will not "
                    "be signalled",
                    id, (int)pid, s->cfg.runner_bin);
    if (node)
        cr_log_info("adopted runner %s on node '%s' with %s already loaded "
                    "(%" PRId64 " bytes, ctx %" PRId64 ")",
                    id, node->name, res->name, rn->size, rn->context_length);
    else
        cr_log_info("adopted runner %s (pid %d) with %s already loaded (%" PRId64
                    " bytes, ctx %" PRId64 ")",
                    id, (int)rn->pid, res->name, rn->size, rn->context_length);
    return rn;
}

/* True if /proc/<pid>/cmdline is `... serve --endpoint <endpoint> ...`. */
static bool serves_endpoint(pid_t pid, const char *endpoint)
{
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *args[4] = {0};
    size_t off = 0;
    for (int i = 0; i < 4 && off < n; i++) {
        args[i] = buf + off;
        off += strlen(buf + off) + 1;
    }
    return args[1] && args[2] && args[3] && !strcmp(args[1], "serve") &&
           !strcmp(args[2], "--endpoint") && !strcmp(args[3], endpoint);
}

static int64_t grace_ms(const sch_server_t *s)
{
    if (s->cfg.adopt_grace_ms)
        return s->cfg.adopt_grace_ms;
    return s->cfg.heartbeat_interval_ms > 0 ? s->cfg.heartbeat_interval_ms
                                            : HEARTBEAT_INTERVAL_MS;
}

void sch_adopt_grace_begin(sch_server_t *s)
{
    s->memo_stale = true; /* what a crash left is rewritten after the grace */
    s->n_orphans = 0;
    s->grace_until_ms = 0;
    if (grace_ms(s) <= 0)
        return;
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *de;
    pid_t self = getpid();
    while ((de = readdir(d)) && s->n_orphans < ORPHANS_MAX) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);
        if (*end || pid <= 0 || pid == self)
            continue;
        if (sch_pid_is_runner((pid_t)pid, s->cfg.runner_bin) &&
            serves_endpoint((pid_t)pid, s->cfg.runners_endpoint))
            s->orphans[s->n_orphans++] = (pid_t)pid;
    }
    closedir(d);
    int nodes = sch_node_memo_read(s);
    if (!s->n_orphans && !nodes)
        return;
    s->grace_start_ms = sch_now_ms(s);
    s->grace_until_ms = s->grace_start_ms + grace_ms(s);
    if (s->n_orphans)
        cr_log_info("%d runners of a previous scheduler are alive; no model "
                    "is loaded for up to %.1f s while they say hello",
                    s->n_orphans, (double)grace_ms(s) / 1000);
    if (nodes) {
        char names[512];
        sch_node_memo_missing(s, names, sizeof names);
        cr_log_info("nodes %s held runners before this scheduler started; no "
                    "model is loaded for up to %.1f s while they join",
                    names, (double)grace_ms(s) / 1000);
    }
}

void sch_adopt_grace_node(sch_server_t *s, sch_node_t *nd, int64_t runners)
{
    if (runners <= 0 || grace_ms(s) <= 0)
        return;
    nd->expect_runners = runners;
    nd->grace_until_ms = sch_now_ms(s) + grace_ms(s);
    cr_log_info("node '%s' has %" PRId64 " runners; no model is loaded for "
                "up to %.1f s while they say hello",
                nd->name, runners, (double)grace_ms(s) / 1000);
}

void sch_gone_note(sch_server_t *s, const char *id)
{
    snprintf(s->gone_ids[s->n_gone++ % ORPHANS_MAX], sizeof s->gone_ids[0],
             "%s", id);
}

bool sch_gone_has(const sch_server_t *s, const char *id)
{
    unsigned n = s->n_gone < ORPHANS_MAX ? s->n_gone : ORPHANS_MAX;
    for (unsigned i = 0; i < n; i++)
        if (!strcmp(s->gone_ids[i], id))
            return true;
    return false;
}

/* True while a node that joined with runners waits for their hellos. */
static bool node_grace(sch_server_t *s, int64_t now)
{
    bool any = false;
    for (sch_node_t *nd = s->node_list; nd; nd = nd->next) {
        if (!nd->grace_until_ms)
            continue;
        int64_t have = 0;
        for (const runner_t *rn = s->runner_list; rn; rn = rn->next)
            have += rn->node == nd;
        if (have < nd->expect_runners && now < nd->grace_until_ms) {
            any = true;
            continue;
        }
        if (have < nd->expect_runners)
            cr_log_warn("node '%s': adoption grace over: %" PRId64 " of its %" PRId64
                        " runners did not say hello",
                        nd->name, nd->expect_runners - have, nd->expect_runners);
        else
            cr_log_info("node '%s': its %" PRId64 " runners are adopted",
                        nd->name, nd->expect_runners);
        nd->grace_until_ms = 0;
    }
    return any;
}

bool sch_adopt_grace(sch_server_t *s)
{
    int64_t now = sch_now_ms(s);
    if (!s->grace_until_ms)
        return s->node_list && node_grace(s, now);
    /* A node of the memo that joined is waited for by node_grace. */
    int nodes_absent = sch_node_memo_missing(s, NULL, 0);
    bool nodes = s->node_list && node_grace(s, now);
    int waiting = 0;
    for (int i = 0; i < s->n_orphans; i++) {
        bool adopted = false;
        for (const runner_t *rn = s->runner_list; rn && !adopted; rn = rn->next)
            adopted = !rn->node && rn->pid == s->orphans[i];
        if (!adopted && sch_pid_is_runner(s->orphans[i], s->cfg.runner_bin))
            waiting++;
    }
    if ((waiting || nodes_absent) && now < s->grace_until_ms)
        return true;
    if (waiting)
        cr_log_warn("adoption grace over after %.1f s: %d of %d runners of "
                    "the previous scheduler did not say hello",
                    (double)(now - s->grace_start_ms) / 1000, waiting,
                    s->n_orphans);
    char absent[512];
    if (nodes_absent && sch_node_memo_missing(s, absent, sizeof absent))
        cr_log_warn("adoption grace over after %.1f s: nodes %s, which held "
                    "runners before, did not join",
                    (double)(now - s->grace_start_ms) / 1000, absent);
    if (!waiting && !nodes_absent)
        cr_log_info("every runner of the previous scheduler is adopted or "
                    "gone%s (%" PRId64 " ms)",
                    s->n_memo_nodes ? ", every node of it joined" : "",
                    now - s->grace_start_ms);
    s->grace_until_ms = 0;
    sch_node_memo_forget(s);
    return nodes;
}
