/* self_path.c: the running executable's directory and its siblings. */
#include "lib/prelude.h"
#include "lib/self_path.h"

#include <unistd.h>

cr_status_t cr_self_dir(char *out, size_t cap, cr_err_t *err)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return cr_err_set(err, CR_E_IO, "cannot read /proc/self/exe: %s",
                          strerror(errno));
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (slash)
        *slash = '\0';
    int w = snprintf(out, cap, "%s", self);
    if (w < 0 || (size_t)w >= cap)
        return cr_err_set(err, CR_E_TOO_LARGE, "program directory too long");
    return CR_OK;
}

cr_status_t cr_sibling_bin(const char *name, const char *env_name, char *out,
                           size_t cap, cr_err_t *err)
{
    const char *env = env_name ? getenv(env_name) : NULL;
    if (env && *env) {
        if (access(env, X_OK))
            return cr_err_set(err, CR_E_NOT_FOUND, "%s '%s' is not executable",
                              env_name, env);
        int w = snprintf(out, cap, "%s", env);
        if (w < 0 || (size_t)w >= cap)
            return cr_err_set(err, CR_E_TOO_LARGE, "%s is too long", env_name);
        return CR_OK;
    }
    char dir[4096];
    cr_status_t st = cr_self_dir(dir, sizeof dir, err);
    if (st)
        return st;
    int w = snprintf(out, cap, "%s/%s", dir, name);
    if (w < 0 || (size_t)w >= cap)
        return cr_err_set(err, CR_E_TOO_LARGE, "path of %s too long", name);
    if (access(out, X_OK))
        return cr_err_set(err, CR_E_NOT_FOUND, "%s not found beside this program "
                          "(%s)", name, out);
    return CR_OK;
}
