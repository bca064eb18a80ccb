/* place.c: layer placement over GPUs and the CPU (policy in place.h). */
#include "lib/prelude.h"
#include "services/scheduler/place.h"

/* Bytes of placeable layer l (the output layer carries the embeddings). */
static int64_t layer_size(const sch_estimate_t *est, int l)
{
    if (l < est->n_layers)
        return est->layer_bytes[l];
    return est->output_bytes + est->embd_bytes;
}

/* What a GPU can give to layers once it holds overhead and a graph. */
static int64_t layer_room(const sch_estimate_t *est, const sch_place_opts_t *o,
                          int64_t free_bytes)
{
    int64_t fixed = est->graph_bytes + CR_MAX(o->gpu_overhead_bytes, 0);
    return free_bytes > fixed ? free_bytes - fixed : 0;
}

/* Places the last k layers across the GPU slots in set[0..n) (in that
 * order, contiguous ranges). proportional: each GPU's share of the bytes
 * follows its room; otherwise each is filled in turn. Returns whether all
 * k fit; devs/n_devs describe the split. */
static bool fill(const cr_inventory_t *inv, const int64_t *gpu_free,
                 const sch_estimate_t *est, const sch_place_opts_t *o,
                 const int *set, size_t n, int k, bool proportional,
                 sch_plan_dev_t *devs, size_t *n_devs)
{
    int n_total = est->n_layers + 1;
    int64_t room[CR_MAX_GPUS], room_sum = 0, need = 0;
    for (size_t j = 0; j < n; j++) {
        room[j] = layer_room(est, o, gpu_free[set[j]]);
        room_sum += room[j];
    }
    for (int l = n_total - k; l < n_total; l++)
        need += layer_size(est, l);
    int l = n_total - k;
    *n_devs = 0;
    for (size_t j = 0; j < n && l < n_total; j++) {
        double quota = proportional && room_sum > 0
                           ? (double)need * ((double)room[j] / (double)room_sum)
                           : (double)room[j];
        int64_t used = 0;
        int first = l;
        bool last = j + 1 == n;
        while (l < n_total) {
            int64_t sz = layer_size(est, l);
            if (used + sz > room[j])
                break;
            /* Round to the nearest layer boundary; the last GPU takes all
             * it can. */
            if (!last && (double)used + (double)sz / 2 > quota && used > 0)
                break;
            used += sz;
            l++;
        }
        if (l == first)
            continue;
        sch_plan_dev_t *d = &devs[(*n_devs)++];
        d->slot = set[j];
        d->index = inv->gpus[set[j]].index;
        d->first_layer = first;
        d->n_layers = l - first;
        d->bytes = used + est->graph_bytes + CR_MAX(o->gpu_overhead_bytes, 0);
    }
    return l == n_total;
}

static bool fill_any(const cr_inventory_t *inv, const int64_t *gpu_free,
                     const sch_estimate_t *est, const sch_place_opts_t *o,
                     const int *set, size_t n, int k, sch_plan_dev_t *devs,
                     size_t *n_devs)
{
    return fill(inv, gpu_free, est, o, set, n, k, true, devs, n_devs) ||
           fill(inv, gpu_free, est, o, set, n, k, false, devs, n_devs);
}

static void fmt_gib(int64_t bytes, char *out, size_t cap)
{
    snprintf(out, cap, "%.1f GiB", (double)bytes / (1024.0 * 1024 * 1024));
}

/* GiB, or MiB below one GiB (logs of small models). */
static void fmt_size(int64_t bytes, char *out, size_t cap)
{
    if (bytes >= (1LL << 30))
        fmt_gib(bytes, out, cap);
    else
        snprintf(out, cap, "%.1f MiB", (double)bytes / (1024.0 * 1024));
}

cr_status_t sch_place(const cr_inventory_t *inv, const int64_t *gpu_free_bytes,
                      int64_t ram_free_bytes, const sch_estimate_t *est,
                      const sch_place_opts_t *o, sch_plan_t *plan,
                      cr_err_t *err)
{
    memset(plan, 0, sizeof *plan);
    plan->kv_type = est->kv_type;
    int n_total = est->n_layers + 1;
    plan->n_layers_total = n_total;

    /* GPUs by free memory, most first; main_gpu ahead of them all. */
    int order[CR_MAX_GPUS];
    size_t n = CR_MIN(inv->n_gpus, (size_t)CR_MAX_GPUS);
    for (size_t i = 0; i < n; i++)
        order[i] = (int)i;
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && gpu_free_bytes[order[j]] >
                                        gpu_free_bytes[order[j - 1]];
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    if (o->main_gpu >= 0) {
        for (size_t i = 0; i < n; i++) {
            if (inv->gpus[order[i]].index != o->main_gpu)
                continue;
            int t = order[i];
            memmove(&order[1], &order[0], i * sizeof order[0]);
            order[0] = t;
            break;
        }
    }

    int want = o->num_gpu < 0 ? n_total
                              : (int)CR_MIN(o->num_gpu, (int64_t)n_total);
    bool placed = false;
    if (n > 0 && want > 0) {
        /* The fewest GPUs that hold the layers wanted (all with spread). */
        for (size_t k = o->spread ? n : 1; k <= n && !placed; k++)
            placed = fill_any(inv, gpu_free_bytes, est, o, order, k, want,
                              plan->devs, &plan->n_devs);
        /* Partial: as many of the last layers as fit on all of them. */
        for (int k = want - 1; k > 0 && !placed; k--)
            placed = fill_any(inv, gpu_free_bytes, est, o, order, n, k,
                              plan->devs, &plan->n_devs);
        if (!placed)
            plan->n_devs = 0;
    }
    for (size_t j = 0; j < plan->n_devs; j++) {
        plan->gpu_layers += plan->devs[j].n_layers;
        plan->vram_bytes += plan->devs[j].bytes;
    }
    for (int l = 0; l < n_total - plan->gpu_layers; l++)
        plan->cpu_bytes += layer_size(est, l);
    if (plan->gpu_layers < n_total)
        plan->cpu_bytes += est->cpu_graph_bytes;
    plan->total_bytes = plan->vram_bytes + plan->cpu_bytes;
    /* The runner process itself, on the host whatever the plan. */
    plan->runner_bytes = est->runner_cpu_bytes +
                         (plan->n_devs > 0 ? est->runner_cuda_host_bytes : 0);
    plan->full_offload = plan->gpu_layers == n_total;
    if (ram_free_bytes > 0 && plan->cpu_bytes + plan->runner_bytes > ram_free_bytes) {
        char need[32], have[32];
        fmt_gib(plan->cpu_bytes + plan->runner_bytes, need, sizeof need);
        fmt_gib(ram_free_bytes, have, sizeof have);
        return cr_err_set(err, CR_E_NOMEM,
                          "model requires more system memory (%s) than is "
                          "available (%s)",
                          need, have);
    }
    return CR_OK;
}

void sch_plan_describe(const sch_plan_t *plan, char *out, size_t cap)
{
    size_t used = 0;
    int w = snprintf(out, cap, "%d of %d layers on GPU", plan->gpu_layers,
                     plan->n_layers_total);
    for (size_t j = 0; j < plan->n_devs && w > 0 && (size_t)w < cap - used;
         j++) {
        used += (size_t)w;
        char gib[32];
        fmt_size(plan->devs[j].bytes, gib, sizeof gib);
        w = snprintf(out + used, cap - used, "; gpu %d: layers %d-%d (%s)",
                     plan->devs[j].index,
                     plan->devs[j].first_layer,
                     plan->devs[j].first_layer + plan->devs[j].n_layers - 1,
                     gib);
    }
    if (w > 0 && (size_t)w < cap - used) {
        used += (size_t)w;
        char gib[32];
        fmt_size(plan->cpu_bytes, gib, sizeof gib);
        snprintf(out + used, cap - used, "; cpu: %d layers (%s)",
                 plan->n_layers_total - plan->gpu_layers, gib);
    }
}
