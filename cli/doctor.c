/* doctor.c: `corral doctor [--fix]` runs `corral-registry doctor` from the
 * service binaries' directory (as keygen runs corral-node): checking the
 * store needs the registry's code, and the corral command stays an HTTP
 * client. */
#include "lib/prelude.h"
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <unistd.h>

cr_status_t cli_cmd_doctor(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    CR_UNUSED(ctx);
    char dir[PATH_MAX], path[PATH_MAX + 32];
    cr_status_t st = cli_bin_dir(dir, sizeof dir, err);
    if (st)
        return st;
    if ((size_t)snprintf(path, sizeof path, "%s/corral-registry", dir) >= sizeof path)
        return cr_err_set(err, CR_E_TOO_LARGE, "binary path too long");
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    args[0] = "corral-registry";
    args[1] = "doctor";
    for (int i = 1; i < argc; i++)
        args[i + 1] = argv[i];
    fflush(stdout);
    execv(path, args);
    int e = errno;
    free(args);
    return cr_err_set(err, CR_E_UNAVAILABLE,
                      "doctor runs %s, which cannot be started: %s (set CORRAL_BIN_DIR to "
                      "the folder of the corral binaries)",
                      path, strerror(e));
}
