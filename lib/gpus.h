/* gpus.h: what the machine has: GPUs (through NVML, loaded at run time)
 * and system memory.
 *
 * The scheduler has no link-time CUDA dependency: NVML is opened with
 * dlopen("libnvidia-ml.so.1") when the server starts, and its absence just
 * means "no GPUs". CUDA_VISIBLE_DEVICES (indices or GPU-UUID prefixes,
 * comma separated) selects and orders devices the way the runner will see
 * them.
 *
 * For tests and for hosts whose GPUs corral should pretend to have, the
 * CORRAL_GPU_INVENTORY environment variable describes the inventory
 * instead of discovering it:
 *
 *     CORRAL_GPU_INVENTORY="0:NVIDIA H200:141000000000,1:RTX 4090:24000000000"
 *
 * Each comma-separated entry is `index:name:total_bytes` (free = total;
 * the scheduler subtracts what it places). An entry `cpu:BYTES` sets the
 * system memory instead of reading /proc/meminfo; an empty value or
 * "none" means no GPUs. A fake inventory is only bookkeeping: runners are
 * still started in CPU mode.
 *
 * Knows nothing of models or placement (estimate.h, place.h). */
#ifndef CR_GPUS_H
#define CR_GPUS_H

#include "lib/prelude.h"
#include "lib/status.h"

#define CR_MAX_GPUS 16
#define CR_GPU_NAME_MAX 96
#define CR_INVENTORY_SPEC_MAX 2048

typedef struct cr_gpu {
    int index;                   /* as the runner will number it (CUDA order) */
    char name[CR_GPU_NAME_MAX]; /* "NVIDIA H200" */
    char uuid[CR_GPU_NAME_MAX]; /* "GPU-..."; "" when unknown */
    int cc_major, cc_minor;      /* compute capability; 0.0 when unknown */
    int64_t total_bytes;         /* device memory */
    int64_t free_bytes;          /* free when discovered (before corral
                                    placed anything) */
} cr_gpu_t;

#define CR_INVENTORY_NOTES 4

typedef struct cr_inventory {
    cr_gpu_t gpus[CR_MAX_GPUS];
    size_t n_gpus;
    int64_t ram_total_bytes;     /* MemTotal */
    int64_t ram_free_bytes;      /* MemAvailable when discovered */
    bool fake;                   /* from CORRAL_GPU_INVENTORY: runners run
                                    on the CPU whatever the plan says */
    /* What discovery could not read (no NVML, an unreadable device or
     * /proc/meminfo), for the service to log: lib/ never prints. */
    char notes[CR_INVENTORY_NOTES][160];
    size_t n_notes;
} cr_inventory_t;

/* Parses a CORRAL_GPU_INVENTORY value (grammar above) into inv. System
 * memory is left as inv had it unless a `cpu:` entry sets it. CR_E_INVALID
 * names the bad entry ("entry 2 'x:y': total bytes 'y' is not a number");
 * more than CR_MAX_GPUS devices is CR_E_TOO_LARGE. */
cr_status_t cr_inventory_parse(const char *spec, cr_inventory_t *inv,
                                cr_err_t *err);

/* Reads MemTotal and MemAvailable (kB lines) from the text of
 * /proc/meminfo. CR_E_CORRUPT if MemTotal is missing or malformed;
 * MemAvailable falls back to MemFree, then to MemTotal. */
cr_status_t cr_meminfo_parse(const char *text, int64_t *total_bytes,
                              int64_t *avail_bytes, cr_err_t *err);

/* Keeps only the devices CUDA_VISIBLE_DEVICES-style `visible` selects, in
 * its order, renumbered 0..n-1 (as CUDA renumbers them). Entries are
 * indices into inv's current order or UUID prefixes ("GPU-8f3a"); an
 * unknown entry ends the list, as CUDA does. NULL keeps everything; "" or
 * "-1" hides all devices. */
void cr_inventory_filter_visible(cr_inventory_t *inv, const char *visible);

/* Fills inv with what this machine has: CORRAL_GPU_INVENTORY if set,
 * otherwise NVML devices (none if NVML is absent) filtered by
 * CUDA_VISIBLE_DEVICES, and system memory from /proc/meminfo. Only a bad
 * CORRAL_GPU_INVENTORY is an error; a missing NVML is a note in inv->notes
 * and is not. */
cr_status_t cr_inventory_discover(cr_inventory_t *inv, cr_err_t *err);

/* Asks NVML for devices. CR_E_NOT_FOUND if the library cannot be loaded,
 * CR_E_UNAVAILABLE if it fails to initialise. For cr_inventory_discover
 * and the GPU test. */
cr_status_t cr_nvml_query(cr_inventory_t *inv, cr_err_t *err);

/* Lines describing inv for the service's log: its notes, one line per
 * device ("gpu 0: NVIDIA H200 (cc 9.0) GPU-..., 139.8 GiB total, ..."),
 * then system memory. cr_inventory_line writes line k (< the count). */
size_t cr_inventory_lines(const cr_inventory_t *inv);
void cr_inventory_line(const cr_inventory_t *inv, size_t k, char *out,
                       size_t cap);

#endif
