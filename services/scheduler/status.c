/* status.c: what the scheduler reports about itself: `ps` (the loaded
 * models) and `status` (ps with each model's GPUs, every host's memory and
 * the queue), for /api/ps, /metrics and the web console. Reads the server
 * object only; sched.c sends the replies. */
#include "lib/prelude.h"
#include "services/scheduler/sched_int.h"

#include <time.h>

#define TIME_MAX 40 /* an RFC 3339 time */

/* RFC 3339 UTC time `delta_ms` from now (Ollama's expires_at). */
static void rfc3339_from_now(int64_t delta_ms, char *out, size_t cap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    time_t t = ts.tv_sec;
    /* Forever: a date ~290 years ahead, as Ollama reports. */
    if (delta_ms == FOREVER_MS)
        t += (time_t)290 * 365 * 24 * 3600;
    else
        t += (time_t)(delta_ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static size_t listed_count(const sch_server_t *s)
{
    size_t n = 0;
    for (const runner_t *rn = s->runner_list; rn; rn = rn->next)
        n += !rn->duplicate;
    return n;
}

/* One runner's ps record; time is its expires_at (TIME_MAX bytes). */
static void fill_loaded(const sch_server_t *s, const runner_t *rn,
                        msg_loaded_model_t *e, char *time)
{
    const msg_resolved_body_t *res = &rn->resolved.u.resolved;
    memset(e, 0, sizeof *e);
    e->name = res->name;
    e->has_name = true;
    e->size = rn->size ? rn->size : res->size;
    e->has_size = true;
    e->size_vram = rn->size_vram;
    e->has_size_vram = true;
    if (res->digest) {
        e->digest = res->digest;
        e->has_digest = true;
    }
    if (res->details) {
        e->details = res->details;
        e->has_details = true;
    }
    int64_t delta;
    if (rn->keep_alive_ms < 0)
        delta = FOREVER_MS;
    else if (rn->expires_ms && rn->expires_ms != FOREVER_MS)
        delta = rn->expires_ms - sch_now_ms(s);
    else
        delta = rn->keep_alive_ms; /* busy or loading: now + keep-alive */
    rfc3339_from_now(delta < 0 ? 0 : delta, time, TIME_MAX);
    e->expires_at = time;
    e->has_expires_at = true;
    e->context_length = rn->context_length;
    e->has_context_length = rn->context_length > 0;
    e->active = rn->n_active;
    e->has_active = true;
    int queued = 0;
    for (const request_t *r = s->req_list; r; r = r->next)
        if (r->state == RQ_PENDING && sch_same_model(rn, r))
            queued++;
    e->queued = queued;
    e->has_queued = true;
    e->loading = rn->state == RS_STARTING || rn->state == RS_LOADING;
    e->has_loading = true;
    if (rn->node) { /* local runners carry no host: Ollama's shape */
        e->host = (char *)rn->node->name;
        e->has_host = true;
    }
    if (rn->offload_error[0]) {
        e->offload_error = (char *)rn->offload_error;
        e->has_offload_error = true;
    }
}

/* The ps records of s's runners into m (allocated there); *n_out their
 * count. */
static cr_status_t build_loaded(const sch_server_t *s, msg_t *m,
                                msg_loaded_model_t **out, size_t *n_out)
{
    size_t n = listed_count(s);
    *out = NULL;
    *n_out = 0;
    if (!n)
        return CR_OK;
    msg_loaded_model_t *v = msg_alloc(m, n * sizeof *v);
    char *times = msg_alloc(m, n * TIME_MAX);
    if (!v || !times)
        return CR_E_NOMEM;
    size_t i = 0;
    for (const runner_t *rn = s->runner_list; rn && i < n; rn = rn->next) {
        if (rn->duplicate)
            continue; /* on its way out: the model is listed once */
        fill_loaded(s, rn, &v[i], times + i * TIME_MAX);
        i++;
    }
    *out = v;
    *n_out = i;
    return CR_OK;
}

cr_status_t sch_ps_build(const sch_server_t *s, msg_t *m)
{
    msg_ps_reply_body_t *p = &m->u.ps_reply;
    cr_status_t st = build_loaded(s, m, &p->models.v, &p->models.n);
    p->has_models = !st;
    return st;
}

/* Each listed runner's part on each GPU, from its plan (a runner without
 * one, or whose GPU plan became a CPU one, has none). */
static cr_status_t add_devices(const sch_server_t *s, msg_t *m,
                               msg_loaded_model_t *v, size_t n)
{
    const runner_t *rn = s->runner_list;
    for (size_t i = 0; i < n; i++, rn = rn->next) {
        while (rn->duplicate)
            rn = rn->next;
        if (!rn->has_plan || !rn->plan.n_devs)
            continue;
        const cr_inventory_t *inv = sch_runner_inv(s, rn);
        msg_device_split_t *d = msg_alloc(m, rn->plan.n_devs * sizeof *d);
        if (!d)
            return CR_E_NOMEM;
        for (size_t j = 0; j < rn->plan.n_devs; j++) {
            const sch_plan_dev_t *pd = &rn->plan.devs[j];
            memset(&d[j], 0, sizeof d[j]);
            d[j].index = pd->index;
            d[j].has_index = true;
            if (pd->slot >= 0 && (size_t)pd->slot < inv->n_gpus &&
                inv->gpus[pd->slot].uuid[0]) {
                d[j].uuid = (char *)inv->gpus[pd->slot].uuid;
                d[j].has_uuid = true;
            }
            d[j].first_layer = pd->first_layer;
            d[j].has_first_layer = true;
            d[j].layers = pd->n_layers;
            d[j].has_layers = true;
            d[j].bytes = pd->bytes;
            d[j].has_bytes = true;
        }
        v[i].devices.v = d;
        v[i].devices.n = rn->plan.n_devs;
        v[i].has_devices = true;
    }
    return CR_OK;
}

/* Host node's (NULL: this machine's) memory into h. */
static cr_status_t fill_host(const sch_server_t *s, const sch_node_t *node,
                             msg_t *m, msg_host_status_t *h)
{
    const cr_inventory_t *inv = node ? &node->inv : &s->inv;
    memset(h, 0, sizeof *h);
    if (node) {
        h->name = (char *)node->name;
        h->has_name = true;
    }
    h->ram_total = inv->ram_total_bytes;
    h->has_ram_total = true;
    h->ram_used = sch_ledger_held_on(s, node, -1);
    h->has_ram_used = true;
    h->ram_free = sch_ledger_free_on(s, node, -1);
    h->has_ram_free = true;
    h->fake = inv->fake;
    h->has_fake = true;
    if (!inv->n_gpus)
        return CR_OK;
    msg_gpu_status_t *g = msg_alloc(m, inv->n_gpus * sizeof *g);
    if (!g)
        return CR_E_NOMEM;
    for (size_t i = 0; i < inv->n_gpus; i++) {
        const cr_gpu_t *d = &inv->gpus[i];
        memset(&g[i], 0, sizeof g[i]);
        g[i].index = d->index;
        g[i].has_index = true;
        g[i].name = (char *)d->name;
        g[i].has_name = d->name[0] != 0;
        g[i].uuid = (char *)d->uuid;
        g[i].has_uuid = d->uuid[0] != 0;
        g[i].total = d->total_bytes;
        g[i].has_total = true;
        g[i].used = sch_ledger_held_on(s, node, (int)i);
        g[i].has_used = true;
        int64_t left = sch_ledger_free_on(s, node, (int)i);
        /* What NVML last said is free, when smaller (other processes):
         * what the next placement on this machine will see too. */
        if (!node && s->nvml_at_ms && s->nvml_free[i] < left)
            left = s->nvml_free[i];
        g[i].free = left;
        g[i].has_free = true;
    }
    h->gpus.v = g;
    h->gpus.n = inv->n_gpus;
    h->has_gpus = true;
    return CR_OK;
}

static cr_status_t build_hosts(const sch_server_t *s, msg_t *m)
{
    size_t n = 1;
    for (const sch_node_t *nd = s->node_list; nd; nd = nd->next)
        n++;
    msg_host_status_t *v = msg_alloc(m, n * sizeof *v);
    if (!v)
        return CR_E_NOMEM;
    cr_status_t st = fill_host(s, NULL, m, &v[0]);
    size_t i = 1;
    for (const sch_node_t *nd = s->node_list; !st && nd; nd = nd->next)
        st = fill_host(s, nd, m, &v[i++]);
    m->u.status_reply.hosts.v = v;
    m->u.status_reply.hosts.n = n;
    m->u.status_reply.has_hosts = true;
    return st;
}

/* The name a waiting request is queued under: the registry's canonical
 * one once it answered, else the name asked for. */
static const char *waiting_name(const request_t *r)
{
    if (r->state == RQ_PENDING && r->resolved.u.resolved.name)
        return r->resolved.u.resolved.name;
    const char *asked = msg_is_request(r->msg.type) ? r->msg.u.request.model
                                                      : NULL;
    return asked ? asked : "";
}

static cr_status_t build_queue(const sch_server_t *s, msg_t *m)
{
    size_t n = 0;
    for (const request_t *r = s->req_list; r; r = r->next)
        n += r->state != RQ_RUNNING;
    if (!n)
        return CR_OK;
    msg_queue_entry_t *v = msg_alloc(m, n * sizeof *v);
    if (!v)
        return CR_E_NOMEM;
    size_t k = 0;
    int64_t now = sch_now_ms(s);
    /* req_list is in arrival order: an entry's first request is its
     * oldest. */
    for (const request_t *r = s->req_list; r; r = r->next) {
        if (r->state == RQ_RUNNING)
            continue;
        const char *name = waiting_name(r);
        size_t j = 0;
        while (j < k && strcmp(v[j].model, name))
            j++;
        if (j == k) {
            memset(&v[k], 0, sizeof v[k]);
            v[k].model = (char *)name;
            v[k].has_model = true;
            v[k].oldest_ms = CR_MAX(now - r->resolve_sent_ms, (int64_t)0);
            v[k].has_oldest_ms = true;
            v[k].has_waiting = true;
            k++;
        }
        v[j].waiting++;
    }
    m->u.status_reply.queue.v = v;
    m->u.status_reply.queue.n = k;
    m->u.status_reply.has_queue = true;
    return CR_OK;
}

cr_status_t sch_status_build(const sch_server_t *s, msg_t *m)
{
    msg_status_reply_body_t *p = &m->u.status_reply;
    cr_status_t st = build_loaded(s, m, &p->models.v, &p->models.n);
    p->has_models = !st;
    if (!st)
        st = add_devices(s, m, p->models.v, p->models.n);
    if (!st)
        st = build_hosts(s, m);
    if (!st)
        st = build_queue(s, m);
    return st;
}
