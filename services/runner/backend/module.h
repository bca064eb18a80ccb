/* module.h: the contract between the runner and a backend loaded at run
 * time from a shared module (lib/corral/backend-<name>.so).
 *
 * A GPU backend and the libraries it needs (CUDA's runtime and cuBLAS)
 * live in a module, so corral-runner links none of them: a CPU-only host
 * never maps them, and one build serves CPU and GPU hosts (the GPU host
 * just has the module and its libraries installed). The module exports
 * one symbol, BE_MODULE_ENTRY, a function returning a static be_module_t;
 * the runner (services/runner/backend_module.c) checks its abi, version
 * and struct sizes before calling anything else in it, so a module from
 * another corral build is refused with a message, never called.
 *
 * Plain C, no CUDA header: included by the runner and by the module's
 * entry file (backend/cuda/module_entry.c). */
#ifndef BE_MODULE_H
#define BE_MODULE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"

/* Bumped whenever be_module_t, be_ops_t, be_ops_ext_t, be_weight_t or
 * cr_err_t change in a way an old module would misread. */
#define BE_MODULE_ABI 1
#define BE_MODULE_ENTRY "be_module_entry"

typedef struct be_module {
    uint32_t abi;              /* BE_MODULE_ABI the module was built with */
    const char *version;       /* CORRAL_VERSION of the module's build */
    uint32_t module_size;      /* sizeof(be_module_t) in the module */
    uint32_t ops_size;         /* sizeof(be_ops_t) */
    uint32_t err_size;         /* sizeof(cr_err_t) */
    const char *name;          /* the backend kind: "cuda" */
    /* Devices usable now into *n. CR_E_UNAVAILABLE (with why: no driver,
     * a driver older than the module's runtime, no device) when none. */
    cr_status_t (*probe)(int *n, cr_err_t *err);
    /* An instance on device `device`; *out owned by the caller
     * (be_destroy). Errors as the backend's constructor gives them. */
    cr_status_t (*create)(int device, be_backend_t **out, cr_err_t *err);
} be_module_t;

typedef const be_module_t *(*be_module_entry_fn)(void);

#endif
