/* backends.c: the table of backends (see backends.h). */
#include "lib/prelude.h"
#include "services/runner/backends.h"

#include "lib/env.h"
#ifdef CORRAL_HAVE_CUDA
#include "services/runner/backend/cuda/be_cuda.h"
#endif

static int cpu_count(void) { return 1; }

static cr_status_t cpu_create(int device, int n_threads, be_backend_t **out,
                              cr_err_t *err)
{
    CR_UNUSED(device);
    return be_cpu_new(n_threads, out, err);
}

#ifdef CORRAL_HAVE_CUDA
/* Not yet run on a GPU in CI or development: used only when asked. */
static int cuda_count(void)
{
    return cr_env_bool("EXPERIMENTAL_CUDA", false) ? be_cuda_device_count() : 0;
}

static cr_status_t cuda_create(int device, int n_threads, be_backend_t **out,
                               cr_err_t *err)
{
    CR_UNUSED(n_threads);
    return be_cuda_new(device, out, err);
}
#endif

static const rn_backend_kind_t kinds[] = {
    {.name = "cpu", .host_memory = true, .device_count = cpu_count, .create = cpu_create},
#ifdef CORRAL_HAVE_CUDA
    {.name = "cuda", .host_memory = false, .device_count = cuda_count,
     .create = cuda_create},
#endif
};

const rn_backend_kind_t *rn_backends(size_t *n)
{
    *n = CR_ARRAY_LEN(kinds);
    return kinds;
}

const rn_backend_kind_t *rn_backend_host(void) { return &kinds[0]; }

const rn_backend_kind_t *rn_backend_accel(void)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(kinds); i++)
        if (!kinds[i].host_memory && kinds[i].device_count() > 0)
            return &kinds[i];
    return NULL;
}
