/* place.h: where a model's layers go: pure functions over an inventory, the
 * memory still free on each device, an estimate and the load options.
 *
 * A model has n_layers + 1 placeable layers: the repeating blocks 0..n-1
 * and the output layer n (output weights, and the token embeddings with
 * them so that a fully offloaded model reads "100% GPU"). Offloaded layers
 * are always the last ones (as llama.cpp numbers num_gpu), split into
 * contiguous ranges across the chosen GPUs in order.
 *
 * A GPU that holds any layer also holds OLLAMA_GPU_OVERHEAD and one compute
 * buffer (estimate graph_bytes). The CPU holds the layers that are not
 * offloaded, plus the CPU compute buffer when it holds any layer.
 *
 * Policy, in order:
 *  1. num_gpu 0, or no GPU: everything on the CPU.
 *  2. The whole model (or the num_gpu layers asked for) on the one GPU with
 *     the most free memory (main_gpu first when given).
 *  3. Else across the fewest GPUs that hold it, most free first, each given
 *     a share proportional to its free memory (OLLAMA_SCHED_SPREAD: all
 *     GPUs at once, even when one would do).
 *  4. Else partial offload: as many of the last layers as fit across all
 *     GPUs; the rest on the CPU. A num_gpu that does not fit is clamped the
 *     same way.
 * The CPU part must fit the system memory given, or there is no plan. */
#ifndef SCH_PLACE_H
#define SCH_PLACE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/scheduler/estimate.h"
#include "lib/gpus.h"

typedef struct sch_place_opts {
    int64_t num_gpu;            /* layers to offload; < 0 automatic */
    int64_t main_gpu;           /* GPU index tried first; < 0 none */
    bool spread;                /* OLLAMA_SCHED_SPREAD */
    int64_t gpu_overhead_bytes; /* OLLAMA_GPU_OVERHEAD, per GPU used */
} sch_place_opts_t;

typedef struct sch_plan_dev {
    int slot;          /* position in the inventory's gpus[] */
    int index;         /* the GPU's index (runner numbering) */
    int first_layer;   /* first of its contiguous layers */
    int n_layers;
    int64_t bytes;     /* weights + KV + graph + overhead on it */
} sch_plan_dev_t;

typedef struct sch_plan {
    int n_layers_total;      /* blocks + the output layer */
    int gpu_layers;          /* layers offloaded (the last ones) */
    size_t n_devs;
    sch_plan_dev_t devs[CR_MAX_GPUS];
    int64_t vram_bytes;      /* sum over devs */
    int64_t cpu_bytes;       /* the model's part on the CPU */
    int64_t total_bytes;     /* vram + cpu: the model's size (ps) */
    int64_t runner_bytes;    /* the runner process's own host memory
                                (estimate.h: runner_cpu_bytes, plus
                                runner_cuda_host_bytes with GPU layers):
                                system memory the ledger also holds */
    bool full_offload;       /* every layer on GPUs */
    cr_type_t kv_type;       /* the estimate's KV cache type (load's
                                kv_cache_type) */
} sch_plan_t;

/* Places est over inv. gpu_free_bytes[i] is what GPU slot i still has free
 * (its free memory less what corral has placed there); ram_free_bytes the
 * system memory still available. CR_E_NOMEM when the CPU part does not fit
 * ("model requires more system memory (8.2 GiB) than is available
 * (3.1 GiB)", Ollama's words); plan is filled either way. */
cr_status_t sch_place(const cr_inventory_t *inv, const int64_t *gpu_free_bytes,
                      int64_t ram_free_bytes, const sch_estimate_t *est,
                      const sch_place_opts_t *o, sch_plan_t *plan,
                      cr_err_t *err);

/* "2 of 33 layers on GPU 0 (1.2 GiB), 31 on CPU (7.0 GiB)" for logs. */
void sch_plan_describe(const sch_plan_t *plan, char *out, size_t cap);

#endif
