/* gpu_harness.h: what the GPU tests share.
 *
 * gpu_open() creates the CUDA backend on device 0, or says why the test
 * must skip (no device: 77). With CORRAL_GPU_TEST_ON_CPU=1 it returns a
 * second CPU backend instead, so the tests' own logic (shapes, tolerances,
 * bookkeeping) can be checked on a machine without a GPU. Also: a seeded
 * random generator, helpers to move arrays into backend buffers, and the
 * error metrics the tests state their tolerances in. */
#ifndef TESTS_GPU_HARNESS_H
#define TESTS_GPU_HARNESS_H

#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cuda/be_cuda.h"
#include "tests/unit/check.h"

#include <math.h>

static bool gpu_on_cpu_g;

/* 0 and *out set: run; 77: skip (message printed); 1: failure. */
static inline int gpu_open(const char *test, be_backend_t **out)
{
    cr_err_t err;
    cr_err_clear(&err);
    *out = NULL;
    const char *env = getenv("CORRAL_GPU_TEST_ON_CPU");
    if (env && !strcmp(env, "1")) {
        gpu_on_cpu_g = true;
        printf("%s: CORRAL_GPU_TEST_ON_CPU=1: a second cpu backend stands in for cuda\n",
               test);
        return be_cpu_new(2, out, &err) ? 1 : 0;
    }
    int n = be_cuda_device_count();
    if (n == 0) {
        /* without a device, creating one must fail cleanly */
        be_backend_t *be = NULL;
        cr_status_t st = be_cuda_new(0, &be, &err);
        if (st != CR_E_UNAVAILABLE || be || !err.msg[0]) {
            fprintf(stderr, "%s: be_cuda_new without a device gave %d (%s)\n", test, st,
                    err.msg);
            return 1;
        }
        return check_skip(test, "no CUDA device (be_cuda_device_count() == 0)");
    }
    cr_status_t st = be_cuda_new(0, out, &err);
    if (st) {
        fprintf(stderr, "%s: be_cuda_new: %s\n", test, err.msg);
        return 1;
    }
    return 0;
}

/* The pending CUDA error, if any, as a failed check. */
#define GPU_CHECK_OK(be)                                                    \
    do {                                                                    \
        cr_err_t e_;                                                        \
        cr_err_clear(&e_);                                                  \
        cr_status_t s_ = be_cuda_check((be), &e_);                          \
        CHECK_MSG(s_ == CR_OK, "cuda error: %s", e_.msg);                   \
    } while (0)

/* xorshift64*: the same stream for the same seed. */
static uint64_t rng_g = 0x9e3779b97f4a7c15ull;

static inline void rng_seed(uint64_t s)
{
    rng_g = s ? s : 1;
}

static inline float rng_uniform(void) /* [-1, 1) */
{
    rng_g ^= rng_g >> 12;
    rng_g ^= rng_g << 25;
    rng_g ^= rng_g >> 27;
    uint64_t r = rng_g * 2685821657736338717ull;
    return (float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static inline void rng_fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = rng_uniform() * scale;
}

/* A backend buffer holding a copy of host[0..bytes). */
static inline void *buf_from(be_backend_t *be, const void *host, size_t bytes)
{
    void *p = be->ops->alloc(be, bytes);
    if (p && host)
        be->ops->upload(be, p, host, bytes);
    return p;
}

/* max |a - b| / max(max |b|, floor): error relative to the reference's
 * largest magnitude. */
static inline double rel_err(const float *a, const float *b, size_t n, double floor)
{
    double md = 0, mb = floor;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md)) /* NaN counts as infinite */
            md = d == d ? d : INFINITY;
        if (fabs((double)b[i]) > mb)
            mb = fabs((double)b[i]);
    }
    return md / mb;
}

static inline double max_abs_err(const float *a, const float *b, size_t n)
{
    double md = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= md))
            md = d == d ? d : INFINITY;
    }
    return md;
}

#endif
