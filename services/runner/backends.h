/* backends.h: the one table of backends compiled into this build.
 *
 * Each backend registers a kind here: its name, whether its memory is the
 * host's, how many devices it sees, and how to create an instance on one
 * of them. The runner (engine.c) creates every instance through this
 * table and never names a backend; the CPU kind is always present, the
 * CUDA kind when the build has CUDA (the only #ifdef on a backend outside
 * the backends themselves is in backends.c). It sits at the runner's top,
 * beside the engine that uses it, so that backend/ (the interface) depends
 * on no implementation and backend/cpu, backend/cuda only on backend/.
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
    /* Devices this kind can create instances on now (0: none usable; the
     * CUDA kind also reports 0 unless CORRAL_EXPERIMENTAL_CUDA=1, as it has
     * not yet run on a GPU in CI). Never fails. */
    int (*device_count)(void);
    /* An instance on device `device` (0-based; ignored by the CPU) with
     * n_threads host threads (<= 0: one per core; ignored by devices). On
     * success *out is owned by the caller (be_destroy). */
    cr_status_t (*create)(int device, int n_threads, be_backend_t **out, cr_err_t *err);
} rn_backend_kind_t;

/* The registered kinds, host first; *n gets their number. Static. */
const rn_backend_kind_t *rn_backends(size_t *n);

/* The host kind (the CPU): always present. */
const rn_backend_kind_t *rn_backend_host(void);

/* The first kind that is not host memory and has a device now, or NULL
 * (no accelerator usable). */
const rn_backend_kind_t *rn_backend_accel(void);

#endif
