/* main.c: the corral command: picks a verb and runs it.
 *
 * `corral VERB [flags] [args]`; errors print "Error: <message>" on stderr
 * and exit 1. The verbs live in serve.c, run.c/repl.c, create.c and
 * models.c. */
#include "lib/prelude.h"
#include "cli/cli.h"

#include <signal.h>

static const struct {
    const char *name;
    cli_cmd_fn fn;
    const char *help;
} verbs[] = {
    {"serve", cli_cmd_serve, "Start corral"},
    {"start", cli_cmd_serve, NULL},
    {"create", cli_cmd_create, "Create a model from a Modelfile"},
    {"show", cli_cmd_show, "Show information for a model"},
    {"run", cli_cmd_run, "Run a model"},
    {"stop", cli_cmd_stop, "Stop a running model"},
    {"pull", cli_cmd_pull, "Pull a model from a registry"},
    {"push", cli_cmd_push, "Push a model to a registry"},
    {"list", cli_cmd_list, "List models"},
    {"ls", cli_cmd_list, NULL},
    {"ps", cli_cmd_ps, "List running models"},
    {"cp", cli_cmd_cp, "Copy a model"},
    {"rm", cli_cmd_rm, "Remove a model"},
    {"keygen", cli_cmd_keygen, "Generate a CURVE keypair for a GPU node"},
    {"doctor", cli_cmd_doctor, "Check the model store (--fix removes broken entries)"},
};

static void usage(FILE *f)
{
    fprintf(f, "Large language model runner\n\nUsage:\n  corral [flags]\n  corral [command]\n\n"
               "Available Commands:\n");
    for (size_t i = 0; i < CR_ARRAY_LEN(verbs); i++)
        if (verbs[i].help)
            fprintf(f, "  %-11s %s\n", verbs[i].name, verbs[i].help);
    fprintf(f, "  %-11s %s\n\nFlags:\n  -h, --help      help for corral\n"
               "  -v, --version   Show version information\n\n"
               "Use \"corral [command] --help\" for more information about a command.\n",
            "help", "Help about any command");
}

static void on_sigint(int sig)
{
    CR_UNUSED(sig);
    cli_interrupted = 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    /* Ctrl-C stops a transfer or the prompt, not the program (no
     * SA_RESTART, so a blocked read returns). */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    cli_ctx_t ctx;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = cli_ctx_init(&ctx, &err);
    const char *verb = argv[1];
    if (!st && (!strcmp(verb, "-v") || !strcmp(verb, "--version"))) {
        st = cli_cmd_version(&ctx, argc - 1, argv + 1, &err);
    } else if (!st && !strcmp(verb, "help")) {
        if (argc > 2) {
            for (size_t i = 0; i < CR_ARRAY_LEN(verbs); i++) {
                if (!strcmp(verbs[i].name, argv[2])) {
                    char *h[] = {argv[2], (char *)"--help", NULL};
                    st = verbs[i].fn(&ctx, 2, h, &err);
                    cli_ctx_free(&ctx);
                    return st ? 1 : 0;
                }
            }
            fprintf(stderr, "Unknown help topic [`%s`]\n", argv[2]);
        }
        usage(stdout);
    } else if (!st) {
        size_t i = 0;
        while (i < CR_ARRAY_LEN(verbs) && strcmp(verbs[i].name, verb))
            i++;
        if (i == CR_ARRAY_LEN(verbs))
            st = cr_err_set(&err, CR_E_INVALID,
                            "unknown command \"%s\" for \"corral\"\nRun 'corral --help' for "
                            "usage.",
                            verb);
        else
            st = verbs[i].fn(&ctx, argc - 1, argv + 1, &err);
    }
    cli_ctx_free(&ctx);
    if (st) {
        fflush(stdout);
        fprintf(stderr, "Error: %s\n", err.msg[0] ? err.msg : cr_status_str(st));
        return 1;
    }
    return 0;
}
