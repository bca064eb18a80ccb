/* keygen.c: `corral-node keygen [--out DIR] NAME` (also reached as
 * `corral keygen`, which runs this): a CURVE keypair for the link between
 * a node agent and the scheduler (docs/deploy.md "Adding a GPU host").
 * Writes DIR/NAME (public certificate: copy it to the scheduler's
 * CORRAL_NODE_KEYS_DIR, or to nodes for the scheduler's key) and
 * DIR/NAME_secret (mode 0600, stays on its host). It lives in the node
 * agent, which links the bus, so that the corral CLI stays an HTTP
 * client. */
#include "lib/prelude.h"
#include "services/node/keygen.h"

#include "proto/relay.h"

static void usage(FILE *f)
{
    fprintf(f, "Generate a CURVE keypair for a node or the scheduler\n\n"
               "Usage:\n  corral-node keygen [--out DIR] NAME   (or: corral keygen ...)\n\n"
               "Flags:\n"
               "  -o, --out DIR   Directory for NAME and NAME_secret "
               "(default: .)\n"
               "  -h, --help      help for keygen\n");
}

static bool wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return true;
    return false;
}

static cr_status_t keygen(int argc, char **argv, cr_err_t *err)
{
    if (wants_help(argc, argv)) {
        usage(stdout);
        return CR_OK;
    }
    const char *dir = ".";
    const char *name = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") || !strcmp(argv[i], "-o")) {
            if (i + 1 >= argc)
                return cr_err_set(err, CR_E_INVALID,
                                  "flag needs an argument: %s", argv[i]);
            dir = argv[++i];
        } else if (argv[i][0] == '-') {
            return cr_err_set(err, CR_E_INVALID, "unknown flag: %s", argv[i]);
        } else if (name) {
            return cr_err_set(err, CR_E_INVALID,
                              "accepts 1 arg(s), received more");
        } else {
            name = argv[i];
        }
    }
    if (!name)
        return cr_err_set(err, CR_E_INVALID, "accepts 1 arg(s), received 0");
    char pub[41];
    cr_status_t st = bus_curve_keygen(dir, name, pub, err);
    if (st)
        return st;
    printf("wrote %s/%s (public) and %s/%s_secret (secret, mode 0600)\n"
           "public key: %s\n",
           dir, name, dir, name, pub);
    return CR_OK;
}

int nd_keygen_main(int argc, char **argv)
{
    cr_err_t err;
    if (keygen(argc, argv, &err)) {
        fprintf(stderr, "Error: %s\n", err.msg);
        return 1;
    }
    return 0;
}
