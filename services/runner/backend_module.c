/* backend_module.c: finding, loading and checking backend modules (see
 * backend_module.h). */
#include "lib/prelude.h"
#include "services/runner/backend_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include "lib/self_path.h"

cr_status_t rn_backend_module_path(const char *kind, char *out, size_t cap, cr_err_t *err)
{
    const char *env = getenv("CORRAL_BACKEND_DIR");
    char dir[4096];
    int w;
    if (env && *env) {
        w = snprintf(out, cap, "%s/backend-%s.so", env, kind);
    } else {
        cr_status_t st = cr_self_dir(dir, sizeof dir, err);
        if (st)
            return st;
        /* bin/ and lib/corral/ are siblings, in the build tree as installed */
        w = snprintf(out, cap, "%s/../lib/corral/backend-%s.so", dir, kind);
    }
    if (w < 0 || (size_t)w >= cap)
        return cr_err_set(err, CR_E_TOO_LARGE, "path of the %s backend module too long", kind);
    return CR_OK;
}

cr_status_t rn_backend_module_find(const char *kind, char *out, size_t cap, cr_err_t *err)
{
    cr_status_t st = rn_backend_module_path(kind, out, cap, err);
    if (st)
        return st;
    if (access(out, R_OK))
        return cr_err_set(err, CR_E_NOT_FOUND, "no %s backend module at %s (%s): this "
                          "build or install has no %s backend", kind, out, strerror(errno),
                          kind);
    return CR_OK;
}

cr_status_t rn_backend_module_check(const be_module_t *m, const char *kind, const char *path,
                                    cr_err_t *err)
{
    if (!m)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: its entry returned no module", path);
    if (m->abi != BE_MODULE_ABI)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: module ABI %u, this runner needs %u "
                          "(install the module of the same corral build)", path,
                          (unsigned)m->abi, (unsigned)BE_MODULE_ABI);
    if (!m->version || strcmp(m->version, CORRAL_VERSION))
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s is from corral %s, this runner is %s "
                          "(install the module of the same corral build)", path,
                          m->version ? m->version : "(unknown)", CORRAL_VERSION);
    if (m->module_size != sizeof(be_module_t) || m->ops_size != sizeof(be_ops_t) ||
        m->err_size != sizeof(cr_err_t))
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: struct sizes differ from this runner's "
                          "(module %u/%u/%u, runner %zu/%zu/%zu): built from other sources",
                          path, (unsigned)m->module_size, (unsigned)m->ops_size,
                          (unsigned)m->err_size, sizeof(be_module_t), sizeof(be_ops_t),
                          sizeof(cr_err_t));
    if (!m->name || strcmp(m->name, kind))
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s holds backend '%s', not '%s'", path,
                          m->name ? m->name : "(none)", kind);
    if (!m->probe || !m->create)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: module lacks its probe or create", path);
    return CR_OK;
}

cr_status_t rn_backend_module_open(const char *kind, const be_module_t **out, cr_err_t *err)
{
    *out = NULL;
    char path[4200];
    cr_status_t st = rn_backend_module_find(kind, path, sizeof path, err);
    if (st)
        return st;
    /* RTLD_LOCAL: the module's CUDA libraries and its own copies of
     * corral's helpers stay out of the runner's symbol namespace. */
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char *why = dlerror();
        return cr_err_set(err, CR_E_UNAVAILABLE, "cannot load %s: %s", path,
                          why ? why : "unknown dlopen error");
    }
    /* dlsym returns an object pointer; POSIX guarantees it converts to a
     * function pointer, which ISO C does not say: copy the bits. */
    void *sym = dlsym(lib, BE_MODULE_ENTRY);
    if (!sym) {
        dlclose(lib);
        return cr_err_set(err, CR_E_UNAVAILABLE, "%s has no %s: not a corral backend module",
                          path, BE_MODULE_ENTRY);
    }
    be_module_entry_fn entry;
    memcpy(&entry, &sym, sizeof entry);
    const be_module_t *m = entry();
    if ((st = rn_backend_module_check(m, kind, path, err))) {
        dlclose(lib);
        return st;
    }
    *out = m;
    return CR_OK; /* lib stays open: see the header */
}
