/* keygen.c: `corral keygen [--out DIR] NAME` runs `corral-node keygen`
 * from the service binaries' directory ($CORRAL_BIN_DIR or beside this
 * executable, as `corral serve` finds the services). Key generation needs
 * libzmq's CURVE code, which only the bus services link: the corral
 * command stays an HTTP client. */
#include "lib/prelude.h"
#include "cli/cli.h"

#include <errno.h>
#include <limits.h>
#include <unistd.h>

cr_status_t cli_cmd_keygen(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    CR_UNUSED(ctx);
    char dir[PATH_MAX], path[PATH_MAX + 16];
    cr_status_t st = cli_bin_dir(dir, sizeof dir, err);
    if (st)
        return st;
    if ((size_t)snprintf(path, sizeof path, "%s/corral-node", dir) >= sizeof path)
        return cr_err_set(err, CR_E_TOO_LARGE, "binary path too long");
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    args[0] = "corral-node";
    args[1] = "keygen";
    for (int i = 1; i < argc; i++)
        args[i + 1] = argv[i];
    fflush(stdout);
    execv(path, args);
    int e = errno;
    free(args);
    return cr_err_set(err, CR_E_UNAVAILABLE,
                      "keygen runs %s, which cannot be started: %s (set CORRAL_BIN_DIR to "
                      "the folder of the corral binaries)",
                      path, strerror(e));
}
