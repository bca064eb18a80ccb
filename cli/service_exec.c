/* service_exec.c: verbs whose work needs a service's code (`keygen`:
 * corral-node's CURVE keys; `doctor`: corral-registry's store checks) run
 * that binary from the service binaries' directory in place of the corral
 * process, so the corral command stays an HTTP client. */
#include "lib/prelude.h"
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <unistd.h>

cr_status_t cli_exec_service(const char *bin, const char *verb, int argc, char **argv,
                             cr_err_t *err)
{
    char dir[PATH_MAX], path[PATH_MAX + 64];
    cr_status_t st = cli_bin_dir(dir, sizeof dir, err);
    if (st)
        return st;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, bin) >= sizeof path)
        return cr_err_set(err, CR_E_TOO_LARGE, "binary path too long");
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    args[0] = (char *)bin;
    args[1] = (char *)verb;
    for (int i = 1; i < argc; i++)
        args[i + 1] = argv[i];
    fflush(stdout);
    execv(path, args);
    int e = errno;
    free(args);
    return cr_err_set(err, CR_E_UNAVAILABLE,
                      "%s runs %s, which cannot be started: %s (set CORRAL_BIN_DIR to "
                      "the folder of the corral binaries)",
                      verb, path, strerror(e));
}
