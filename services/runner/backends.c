/* backends.c: the table of backends (see backends.h). */
#include "lib/prelude.h"
#include "services/runner/backends.h"

#include <dlfcn.h>
#include <unistd.h>

#include "lib/env.h"
#include "services/runner/backend_module.h"

static cr_status_t cpu_probe(int *n, cr_err_t *err)
{
    CR_UNUSED(err);
    *n = 1;
    return CR_OK;
}

/* A request's num_thread: more threads than cores only contend (100000
 * made 256 threads on 2 cores, kept for every later request), so at most
 * one per core; <= 0 is every core. */
int rn_backend_cpu_threads(int asked)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    return asked <= 0 || asked > cores ? (int)cores : asked;
}

static cr_status_t cpu_create(int device, int n_threads, be_backend_t **out,
                              cr_err_t *err)
{
    CR_UNUSED(device);
    return be_cpu_new(rn_backend_cpu_threads(n_threads), out, err);
}

/* The CUDA backend is the module lib/corral/backend-cuda.so
 * (backend_module.h), loaded on the first probe. Not yet run on a GPU in
 * CI or development: used only when asked. */
static cr_status_t cuda_probe(int *n, cr_err_t *err)
{
    *n = 0;
    if (!cr_env_bool("EXPERIMENTAL_CUDA", false))
        return cr_err_set(err, CR_E_UNAVAILABLE, "the CUDA backend is off (it runs only "
                          "with CORRAL_EXPERIMENTAL_CUDA=1)");
    /* The module's file, then the driver, then the module: loading it maps
     * the CUDA runtime and cuBLAS (~150 MB resident: libcublasLt grows a
     * process by that much as it loads), which a host without the driver
     * can never use. Where the driver is, the CUDA runtime loads it
     * anyway: it stays loaded. */
    char path[4200];
    cr_status_t st = rn_backend_module_find("cuda", path, sizeof path, err);
    if (st)
        return st;
    char driver[256];
    if (!cr_env_get("CUDA_DRIVER_LIB", driver, sizeof driver))
        snprintf(driver, sizeof driver, "libcuda.so.1");
    if (!dlopen(driver, RTLD_NOW | RTLD_LOCAL)) {
        const char *why = dlerror();
        return cr_err_set(err, CR_E_UNAVAILABLE, "no NVIDIA driver (%s)",
                          why ? why : driver);
    }
    const be_module_t *m;
    st = rn_backend_module_open("cuda", &m, err);
    if (st)
        return st;
    return m->probe(n, err);
}

static cr_status_t cuda_create(int device, int n_threads, be_backend_t **out,
                               cr_err_t *err)
{
    CR_UNUSED(n_threads);
    const be_module_t *m;
    cr_status_t st = rn_backend_module_open("cuda", &m, err);
    if (st)
        return st;
    return m->create(device, out, err);
}

static const rn_backend_kind_t kinds[] = {
    {.name = "cpu", .host_memory = true, .probe = cpu_probe, .create = cpu_create},
    {.name = "cuda", .host_memory = false, .probe = cuda_probe, .create = cuda_create},
};

const rn_backend_kind_t *rn_backends(size_t *n)
{
    *n = CR_ARRAY_LEN(kinds);
    return kinds;
}

const rn_backend_kind_t *rn_backend_host(void) { return &kinds[0]; }

const rn_backend_kind_t *rn_backend_accel(cr_err_t *why)
{
    cr_err_set(why, CR_E_UNAVAILABLE, "no accelerator backend");
    for (size_t i = 0; i < CR_ARRAY_LEN(kinds); i++) {
        if (kinds[i].host_memory)
            continue;
        int n = 0;
        cr_err_t e;
        cr_err_clear(&e);
        if (!kinds[i].probe(&n, &e) && n > 0)
            return &kinds[i];
        if (!e.status)
            cr_err_set(&e, CR_E_UNAVAILABLE, "no device");
        cr_err_set(why, e.status, "%s: %s", kinds[i].name, e.msg);
    }
    return NULL;
}
