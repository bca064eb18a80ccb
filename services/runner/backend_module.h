/* backend_module.h: loads a backend shipped as a shared module.
 *
 * A GPU backend lives in lib/corral/backend-<kind>.so (backend/module.h),
 * so corral-runner links no GPU library and maps one only when the
 * scheduler's plan puts layers on that kind of device. The module is
 * looked for in $CORRAL_BACKEND_DIR when set, else in ../lib/corral
 * relative to this executable's directory (build/bin -> build/lib/corral,
 * <prefix>/bin -> <prefix>/lib/corral).
 *
 * Every failure is a status with a message a user can act on (which file,
 * what dlopen said, which versions differ), so the runner can fall back to
 * the CPU and tell the scheduler why. A module that opened stays loaded
 * for the life of the process (the instances it creates run its code);
 * dlopen counts references, so opening it again costs a lookup. */
#ifndef RN_BACKEND_MODULE_H
#define RN_BACKEND_MODULE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/module.h"

/* The path of kind's module (not checked for existence): as above.
 * CR_E_TOO_LARGE when it does not fit cap; CR_E_IO when the executable's
 * directory cannot be read. */
cr_status_t rn_backend_module_path(const char *kind, char *out, size_t cap, cr_err_t *err);

/* The path of kind's module (as rn_backend_module_path) when the file is
 * there; CR_E_NOT_FOUND naming the path tried when it is not ("this build
 * or install has no cuda backend"). Loads nothing. */
cr_status_t rn_backend_module_find(const char *kind, char *out, size_t cap, cr_err_t *err);

/* Loads kind's module and checks its entry. *out is static in the module
 * (valid for the life of the process). CR_E_NOT_FOUND: no file (the
 * message says the build or install has no such backend); CR_E_UNAVAILABLE:
 * dlopen failed (a library the module needs, such as libcublas, is
 * missing: dlerror's text) or the file has no entry symbol;
 * CR_E_UNSUPPORTED: a module of another ABI or corral version. */
cr_status_t rn_backend_module_open(const char *kind, const be_module_t **out, cr_err_t *err);

/* The checks rn_backend_module_open makes on an entry table, apart (for
 * tests): abi, version, struct sizes, kind name, both functions present.
 * `path` names the module in messages. */
cr_status_t rn_backend_module_check(const be_module_t *m, const char *kind, const char *path,
                                    cr_err_t *err);

#endif
