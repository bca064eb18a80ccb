/* module_entry.c: the one exported symbol of lib/corral/backend-cuda.so.
 *
 * Hands the runner the CUDA backend's probe and constructor through the
 * be_module_t contract (backend/module.h), with what the runner checks
 * before calling them: the ABI number, the corral version and the sizes of
 * the structs both sides share. Everything else in the module is hidden
 * (the link uses module.ver). */
#include "lib/prelude.h"
#include "services/runner/backend/module.h"
#include "services/runner/backend/cuda/be_cuda.h"

const be_module_t *be_module_entry(void);

static const be_module_t cuda_module = {
    .abi = BE_MODULE_ABI,
    .version = CORRAL_VERSION,
    .module_size = sizeof(be_module_t),
    .ops_size = sizeof(be_ops_t),
    .err_size = sizeof(cr_err_t),
    .name = "cuda",
    .probe = be_cuda_probe,
    .create = be_cuda_new,
};

const be_module_t *be_module_entry(void) { return &cuda_module; }
