/* keygen.c: `corral keygen [--out DIR] NAME` runs `corral-node keygen`
 * (service_exec.c): key generation needs libzmq's CURVE code, which only
 * the bus services link. */
#include "lib/prelude.h"
#include "cli/cli.h"

cr_status_t cli_cmd_keygen(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    CR_UNUSED(ctx);
    return cli_exec_service("corral-node", "keygen", argc, argv, err);
}
