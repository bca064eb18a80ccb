/* doctor.c: `corral doctor [--fix]` runs `corral-registry doctor`
 * (service_exec.c): checking the store needs the registry's code. */
#include "lib/prelude.h"
#include "cli/cli.h"

cr_status_t cli_cmd_doctor(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    CR_UNUSED(ctx);
    return cli_exec_service("corral-registry", "doctor", argc, argv, err);
}
