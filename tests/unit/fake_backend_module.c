/* fake_backend_module.c: backend modules the runner's loader must handle
 * (test_backend_module.c). Built once per case into
 * build/tests/fake_modules/<case>/backend-cuda.so, with FAKE_CASE naming it:
 *   nodev    a well-formed module whose probe finds no device
 *   dev      probe finds one device; create fails, naming why
 *   abi      an entry of another module ABI
 *   version  an entry of another corral version
 *   noentry  no be_module_entry symbol at all
 * Needs nothing of corral's libraries (a module carries its own). */
#include "lib/prelude.h"
#include "services/runner/backend/module.h"

#define CASE_nodev 1
#define CASE_dev 2
#define CASE_abi 3
#define CASE_version 4
#define CASE_noentry 5
#define CASE_(c) CASE_##c
#define CASE(c) CASE_(c)

static cr_status_t say(cr_err_t *err, cr_status_t st, const char *msg)
{
    if (err) {
        err->status = st;
        snprintf(err->msg, sizeof err->msg, "%s", msg);
    }
    return st;
}

static cr_status_t fake_probe(int *n, cr_err_t *err)
{
#if CASE(FAKE_CASE) == CASE_dev
    CR_UNUSED(err);
    *n = 1;
    return CR_OK;
#else
    *n = 0;
    return say(err, CR_E_UNAVAILABLE, "fake module: no device");
#endif
}

static cr_status_t fake_create(int device, be_backend_t **out, cr_err_t *err)
{
    CR_UNUSED(device);
    *out = NULL;
    return say(err, CR_E_UNAVAILABLE, "fake module: cannot open the device");
}

/* noentry exports its table under another name: a file that is a shared
 * object but not a corral backend module */
#if CASE(FAKE_CASE) == CASE_noentry
#define ENTRY not_the_module_entry
#else
#define ENTRY be_module_entry
#endif
const be_module_t *ENTRY(void);

static const be_module_t fake = {
#if CASE(FAKE_CASE) == CASE_abi
    .abi = BE_MODULE_ABI + 1,
#else
    .abi = BE_MODULE_ABI,
#endif
#if CASE(FAKE_CASE) == CASE_version
    .version = "0.0.0-other",
#else
    .version = CORRAL_VERSION,
#endif
    .module_size = sizeof(be_module_t),
    .ops_size = sizeof(be_ops_t),
    .err_size = sizeof(cr_err_t),
    .name = "cuda",
    .probe = fake_probe,
    .create = fake_create,
};

const be_module_t *ENTRY(void) { return &fake; }
