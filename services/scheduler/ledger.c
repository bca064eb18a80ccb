/* ledger.c: the memory ledger (what every live runner's plan holds) and
 * the planning of a request's model over what is left (or over the room
 * view, idle runners gone). Policy (when to evict, when to wait) is
 * room.c's; sched.c's schedule() carries it out. */
#include "lib/prelude.h"
#include "services/scheduler/sched_int.h"

#include "lib/log.h"
#include "lib/vision_embedded.h"
#include "services/scheduler/options.h"

/* What is left on GPU slot `slot` (or system memory, slot -1) after every
 * runner that has not been reaped yet: a stopping runner still holds its
 * memory until its process is gone. A runner without a plan counts what it
 * reported in ready (on the CPU). */
int64_t sch_ledger_free(const sch_server_t *s, int slot)
{
    return sch_ledger_free_on(s, NULL, slot);
}

/* Is rn's memory to be had by evicting? An idle ready runner can be
 * stopped; a stopping one is on its way out already. */
static bool evictable(const runner_t *rn)
{
    return rn->state == RS_STOPPING ||
           (rn->state == RS_READY && rn->n_active == 0);
}

/* What the runners on host node hold on GPU slot `slot` (system memory:
 * slot -1). idle_gone: as if every evictable runner were gone (the room
 * view). */
static int64_t held(const sch_server_t *s, const sch_node_t *node, int slot,
                    bool idle_gone)
{
    int64_t sum = 0;
    for (const runner_t *rn = s->runner_list; rn; rn = rn->next) {
        if (rn->node != node || (idle_gone && evictable(rn)))
            continue;
        if (!rn->has_plan) {
            if (slot < 0)
                sum += rn->size;
            continue;
        }
        if (slot < 0) {
            sum += rn->plan.cpu_bytes + rn->plan.runner_bytes;
            continue;
        }
        for (size_t j = 0; j < rn->plan.n_devs; j++)
            if (rn->plan.devs[j].slot == slot)
                sum += rn->plan.devs[j].bytes;
    }
    return sum;
}

/* One ledger per host: a node's runners count against its inventory. */
static int64_t ledger_free(const sch_server_t *s, const sch_node_t *node,
                           int slot, bool idle_gone)
{
    const cr_inventory_t *inv = node ? &node->inv : &s->inv;
    int64_t left = slot < 0 ? inv->ram_free_bytes : inv->gpus[slot].free_bytes;
    left -= held(s, node, slot, idle_gone);
    return left > 0 ? left : 0;
}

int64_t sch_ledger_held_on(const sch_server_t *s, const sch_node_t *node,
                           int slot)
{
    return held(s, node, slot, false);
}

int64_t sch_ledger_free_on(const sch_server_t *s, const sch_node_t *node,
                           int slot)
{
    return ledger_free(s, node, slot, false);
}

bool sch_host_has_runners(const sch_server_t *s, const sch_node_t *host)
{
    for (const runner_t *rn = s->runner_list; rn; rn = rn->next)
        if (rn->node == host)
            return true;
    return false;
}

runner_t *sch_eviction_victim(const sch_server_t *s, const sch_node_t *host,
                              bool any_host)
{
    runner_t *best = NULL;
    for (runner_t *rn = s->runner_list; rn; rn = rn->next)
        if ((any_host || rn->node == host) && rn->state == RS_READY &&
            rn->n_active == 0 && (!best || rn->last_used_ms < best->last_used_ms))
            best = rn;
    return best;
}

int64_t sch_vram_total(const sch_server_t *s)
{
    if (s->inv.fake || !s->gpu_offload_seen)
        return 0;
    int64_t total = 0;
    for (size_t i = 0; i < s->inv.n_gpus; i++)
        total += s->inv.gpus[i].total_bytes;
    return total;
}

/* The load options a runner for r would be started with. */
void sch_request_load_opts(const request_t *r, msg_options_t *out)
{
    memset(out, 0, sizeof *out);
    msg_options_t **opts = sch_req_options_slot((msg_t *)&r->msg);
    sch_options_overlay_load(out, r->resolved.u.resolved.params);
    if (opts && *opts)
        sch_options_overlay_load(out, *opts);
}

/* Estimates r's model once (header only). A file that cannot be read is
 * not an error here: the runner's load reports it in its own words. */
static const sch_estimate_t *request_estimate(sch_server_t *s, request_t *r)
{
    if (r->est_done)
        return r->est_status ? NULL : r->est;
    r->est_done = true;
    r->est = calloc(1, sizeof *r->est);
    if (!r->est) {
        r->est_status = CR_E_NOMEM;
        return NULL;
    }
    msg_options_t lo;
    sch_request_load_opts(r, &lo);
    sch_estimate_opts_t eo = {
        .num_ctx = lo.has_num_ctx ? lo.num_ctx : sch_options_default_ctx(sch_vram_total(s)),
        .num_batch = lo.has_num_batch ? lo.num_batch : 0,
        .num_parallel = s->cfg.num_parallel,
    };
    eo.kv_cache_type = s->cfg.kv_cache_type;
    eo.flash_attention = s->cfg.flash_attention;
    /* planned as the runner will store it: with any GPU layer, f16 */
    eo.kv_f16_only = s->inv.n_gpus > 0;
    for (const sch_node_t *nd = s->node_list; nd && !eo.kv_f16_only; nd = nd->next)
        eo.kv_f16_only = nd->inv.n_gpus > 0;
    cr_err_t err;
    const msg_resolved_body_t *res = &r->resolved.u.resolved;
    r->est_status = sch_estimate_file(res->model_path, &eo, r->est, &err);
    /* LoRA adapters load with the model (counted with their layers) */
    for (size_t i = 0; !r->est_status && res->has_adapters && i < res->adapters.n; i++) {
        cr_gguf_t *g = NULL;
        r->est_status = cr_gguf_open(res->adapters.v[i], &g, &err);
        if (!r->est_status)
            r->est_status = sch_estimate_add_adapter(r->est, g, &err);
        cr_gguf_close(&g);
    }
    /* a draft model runs on the CPU in the same runner */
    if (!r->est_status && res->has_draft_path && res->draft_path) {
        cr_gguf_t *g = NULL;
        r->est_status = cr_gguf_open(res->draft_path, &g, &err);
        if (!r->est_status)
            r->est_status = sch_estimate_add_draft(r->est, g, &eo, &err);
        cr_gguf_close(&g);
    }
    /* a vision projector runs on the CPU in the same runner */
    if (!r->est_status && res->has_projector && res->projector) {
        cr_gguf_t *g = NULL;
        r->est_status = cr_gguf_open(res->projector, &g, &err);
        if (!r->est_status)
            r->est_status = sch_estimate_add_projector(r->est, g, &err);
        cr_gguf_close(&g);
    } else if (!r->est_status) {
        /* or a tower inside the model file (Ollama's gemma3) */
        cr_gguf_t *g = NULL;
        cr_vision_embedded_t v;
        r->est_status = cr_gguf_open(res->model_path, &g, &err);
        if (!r->est_status && cr_vision_embedded(g, &v, NULL) == CR_OK)
            r->est_status = sch_estimate_add_embedded_vision(r->est, &v, &err);
        cr_gguf_close(&g);
    }
    if (!r->est_status && r->est->kv_note[0] && s->cfg.flash_attention)
        cr_log_warn("%s: OLLAMA_KV_CACHE_TYPE=%s not used (%s): the KV cache "
                    "stays f16", r->resolved.u.resolved.name, s->cfg.kv_cache_type,
                    r->est->kv_note);
    if (r->est_status) {
        cr_log_warn("%s: no memory estimate (%s); placing it on the CPU "
                    "unaccounted",
                    r->resolved.u.resolved.name, err.msg);
        return NULL;
    }
    return r->est;
}

/* Real GPUs: what NVML says is free now, at most once a second, matched
 * to inventory slots by UUID. The plan takes the smaller of that and the
 * ledger (which already subtracts corral's own runners). */
static void refresh_nvml(sch_server_t *s)
{
    if (s->inv.fake || s->inv.n_gpus == 0)
        return;
    int64_t now = sch_now_ms(s);
    if (s->nvml_at_ms && now - s->nvml_at_ms < 1000)
        return;
    cr_inventory_t *now_inv = calloc(1, sizeof *now_inv);
    cr_err_t err;
    if (!now_inv || cr_nvml_query(now_inv, &err)) {
        free(now_inv);
        return;
    }
    for (size_t i = 0; i < s->inv.n_gpus; i++) {
        s->nvml_free[i] = s->inv.gpus[i].free_bytes;
        for (size_t j = 0; j < now_inv->n_gpus; j++)
            if (s->inv.gpus[i].uuid[0] &&
                !strcmp(s->inv.gpus[i].uuid, now_inv->gpus[j].uuid))
                s->nvml_free[i] = now_inv->gpus[j].free_bytes;
    }
    s->nvml_at_ms = now ? now : 1;
    free(now_inv);
}

static cr_status_t plan_on(sch_server_t *s, const sch_node_t *node,
                           request_t *r, bool idle_gone, sch_plan_t *plan,
                           bool *has_plan, int64_t *best_free_out,
                           cr_err_t *err);

/* Plans r's model over the memory the ledger has left. Returns CR_OK with
 * *has_plan false when there is no estimate; CR_E_NOMEM (err set) when
 * the CPU part does not fit. */
cr_status_t sch_request_plan(sch_server_t *s, request_t *r, sch_plan_t *plan,
                             bool *has_plan, cr_err_t *err)
{
    return plan_on(s, NULL, r, false, plan, has_plan, NULL, err);
}

/* Plans r on host node (NULL: this machine), over the ledger or, with
 * idle_gone, the room view. best_free_out (optional) gets what the plan's
 * first GPU had free before it. */
static cr_status_t plan_on(sch_server_t *s, const sch_node_t *node,
                           request_t *r, bool idle_gone, sch_plan_t *plan,
                           bool *has_plan, int64_t *best_free_out,
                           cr_err_t *err)
{
    *has_plan = false;
    const sch_estimate_t *est = request_estimate(s, r);
    if (!est)
        return CR_OK;
    const cr_inventory_t *inv = node ? &node->inv : &s->inv;
    int64_t gpu_free[CR_MAX_GPUS];
    if (!node)
        refresh_nvml(s);
    for (size_t i = 0; i < inv->n_gpus; i++) {
        gpu_free[i] = ledger_free(s, node, (int)i, idle_gone);
        /* Other processes may have taken memory since discovery. (NVML
         * also counts idle runners' memory: not in the room view.) */
        if (!node && !idle_gone && s->nvml_at_ms &&
            s->nvml_free[i] < gpu_free[i])
            gpu_free[i] = s->nvml_free[i];
    }
    msg_options_t lo;
    sch_request_load_opts(r, &lo);
    sch_place_opts_t po = {
        .num_gpu = lo.has_num_gpu ? lo.num_gpu : -1,
        .main_gpu = lo.has_main_gpu ? lo.main_gpu : -1,
        .spread = s->cfg.sched_spread,
        .gpu_overhead_bytes = s->cfg.gpu_overhead_bytes,
    };
    int64_t ram = inv->ram_total_bytes > 0 ? ledger_free(s, node, -1, idle_gone)
                                           : 0;
    if (inv->ram_total_bytes > 0 && ram == 0)
        ram = 1; /* nothing left: any CPU part fails */
    *has_plan = true;
    cr_status_t st = sch_place(inv, gpu_free, ram, est, &po, plan, err);
    if (!st && best_free_out)
        *best_free_out = plan->n_devs ? gpu_free[plan->devs[0].slot] : 0;
    return st;
}

/* Is candidate plan a better host than the best so far? (see sched_int.h) */
static bool better_host(const sch_plan_t *a, int64_t a_free,
                        const sch_plan_t *b, int64_t b_free)
{
    if (a->full_offload != b->full_offload)
        return a->full_offload;
    if (a->full_offload)
        return a_free > b_free;
    return a->gpu_layers > b->gpu_layers;
}

static cr_status_t place_on_hosts(sch_server_t *s, request_t *r,
                                  bool idle_gone, sch_plan_t *plan,
                                  bool *has_plan, sch_node_t **host,
                                  cr_err_t *err)
{
    *host = NULL;
    int64_t best_free = 0;
    cr_status_t st = plan_on(s, NULL, r, idle_gone, plan, has_plan, &best_free,
                             err);
    if (!*has_plan && !st && !s->node_list)
        return CR_OK;
    bool have_best = !st && *has_plan;
    sch_plan_t cand;
    for (sch_node_t *nd = s->node_list; nd; nd = nd->next) {
        bool cand_has = false;
        int64_t cand_free = 0;
        cr_err_t cerr;
        if (plan_on(s, nd, r, idle_gone, &cand, &cand_has, &cand_free, &cerr) ||
            !cand_has)
            continue;
        if (!have_best || better_host(&cand, cand_free, plan, best_free)) {
            *plan = cand;
            best_free = cand_free;
            *host = nd;
            have_best = true;
        }
    }
    if (*host) {
        *has_plan = true;
        return CR_OK;
    }
    return st;
}

cr_status_t sch_request_place(sch_server_t *s, request_t *r, sch_plan_t *plan,
                              bool *has_plan, sch_node_t **host,
                              cr_err_t *err)
{
    return place_on_hosts(s, r, false, plan, has_plan, host, err);
}

cr_status_t sch_request_place_room(sch_server_t *s, request_t *r,
                                   sch_plan_t *plan, bool *has_plan,
                                   sch_node_t **host, cr_err_t *err)
{
    return place_on_hosts(s, r, true, plan, has_plan, host, err);
}
