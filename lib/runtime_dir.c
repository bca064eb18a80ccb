/* runtime_dir.c: where the bus sockets live (see runtime_dir.h). In lib,
 * not proto, so that `corral serve` can check the dir before it starts the
 * services (the CLI links no bus). */
#include "lib/prelude.h"
#include "lib/runtime_dir.h"

#include <errno.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_CAP 4096

/* Creates every missing directory of path (mode 0700). Sets *created when
 * the last component was made here. */
static cr_status_t mkdir_p(char *path, bool *created, cr_err_t *err)
{
    *created = false;
    size_t len = strlen(path);
    for (size_t i = 1; i <= len; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char saved = path[i];
        path[i] = '\0';
        int rc = mkdir(path, 0700);
        int e = errno;
        path[i] = saved;
        if (rc == 0) {
            if (i == len)
                *created = true;
        } else if (e != EEXIST) {
            char part[PATH_CAP];
            snprintf(part, sizeof part, "%.*s", (int)i, path);
            return cr_err_set(err, CR_E_IO, "cannot create directory %s: %s",
                              part, strerror(e));
        }
    }
    return CR_OK;
}

cr_status_t cr_runtime_dir(char *out, size_t cap, cr_err_t *err)
{
    char path[PATH_CAP];
    const char *env = getenv("CORRAL_RUNTIME_DIR");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    int n;
    if (env && *env) {
        n = snprintf(path, sizeof path, "%s", env);
    } else if (xdg && *xdg) {
        n = snprintf(path, sizeof path, "%s/corral", xdg);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) {
            struct passwd *pw = getpwuid(geteuid());
            home = pw ? pw->pw_dir : NULL;
        }
        if (!home || !*home)
            return cr_err_set(err, CR_E_IO,
                              "no runtime dir: set CORRAL_RUNTIME_DIR (no "
                              "XDG_RUNTIME_DIR and no home dir)");
        n = snprintf(path, sizeof path, "%s/.corral/run", home);
    }
    if (n < 0 || (size_t)n >= sizeof path)
        return cr_err_set(err, CR_E_TOO_LARGE, "runtime dir path is too long");
    size_t len = (size_t)n;
    while (len > 1 && path[len - 1] == '/')
        path[--len] = '\0';

    bool created;
    cr_status_t st = mkdir_p(path, &created, err);
    if (st)
        return st;
    /* mkdir's mode is filtered by the umask; make ours exactly 0700. */
    if (created && chmod(path, 0700) != 0)
        return cr_err_set(err, CR_E_IO, "cannot chmod runtime dir %s: %s",
                          path, strerror(errno));
    struct stat sb;
    if (stat(path, &sb) != 0)
        return cr_err_set(err, CR_E_IO, "cannot stat runtime dir %s: %s",
                          path, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return cr_err_set(err, CR_E_IO, "runtime dir %s is not a directory",
                          path);
    if (sb.st_uid != geteuid())
        return cr_err_set(err, CR_E_FORBIDDEN,
                          "runtime dir %s is owned by uid %u, not by this "
                          "user (uid %u)", path, (unsigned)sb.st_uid,
                          (unsigned)geteuid());
    if (sb.st_mode & 077)
        return cr_err_set(err, CR_E_FORBIDDEN,
                          "runtime dir %s is open to group or others (mode "
                          "%04o); run chmod 700 on it", path,
                          (unsigned)(sb.st_mode & 07777));
    if (len >= cap)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "runtime dir %s does not fit %zu bytes", path, cap);
    memcpy(out, path, len + 1);
    return CR_OK;
}
