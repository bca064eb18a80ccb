/* backends.h: the one table of backends (the CPU built in, the rest loaded as modules).
 *
 * Each backend registers a kind here: its name, whether its memory is the
 * host's, how many devices it sees (and why none), and how to create an
 * instance on one of them. The runner (engine.c) creates every instance
 * through this table and never names a backend. The CPU kind is compiled
 * in; the CUDA kind is always listed but its code is the module
 * lib/corral/backend-cuda.so (backend_module.h), loaded by its probe, so
 * the runner links no CUDA library and a host without the module (or
 * without a driver) gets a reason, not a failed start. It sits at the
 * runner's top, beside the engine that uses it, so that backend/ (the
 * interface) depends on no implementation and backend/cpu, backend/cuda
 * only on backend/.
 *
 * Owns no instance: callers free what create returns with be_destroy. */
#ifndef RN_BACKENDS_H
#define RN_BACKENDS_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"

typedef struct rn_backend_kind {
    const char *name;  /* "cpu", "cuda": for messages */
    bool host_memory;  /* instances compute in host memory (the CPU) */
    /* Devices this kind can create instances on now, into *n. CR_OK with
     * n > 0, or a status and err saying why there is none: the CUDA kind
     * is off unless CORRAL_EXPERIMENTAL_CUDA=1 (it has not yet run on a GPU
     * in CI), and its module may be missing, from another build, or find
     * no driver or device (backend_module.h). The first call loads the
     * kind's module; call it only when a plan wants the kind. */
    cr_status_t (*probe)(int *n, cr_err_t *err);
    /* An instance on device `device` (0-based; ignored by the CPU) with
     * n_threads host threads (<= 0: one per core; ignored by devices). On
     * success *out is owned by the caller (be_destroy). */
    cr_status_t (*create)(int device, int n_threads, be_backend_t **out, cr_err_t *err);
} rn_backend_kind_t;

/* The registered kinds, host first; *n gets their number. Static. */
const rn_backend_kind_t *rn_backends(size_t *n);

/* The host kind (the CPU): always present. */
const rn_backend_kind_t *rn_backend_host(void);

/* The CPU threads for a request's num_thread `asked`: every core when
 * asked <= 0, and never more than the cores. The host backend's create
 * applies it. */
int rn_backend_cpu_threads(int asked);

/* The first kind that is not host memory and has a device now (probing,
 * so loading modules, in table order), or NULL with why saying what each
 * kind lacked ("cuda: no cuda backend module at ..."). why may be NULL. */
const rn_backend_kind_t *rn_backend_accel(cr_err_t *why);

#endif
