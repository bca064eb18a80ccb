/* cli.h: the corral command's verbs and the context they share.
 *
 * main.c picks a verb and calls its cli_cmd_* function with the arguments
 * after the verb. A verb returns CR_OK or an error whose message main
 * prints as "Error: <message>" (exit 1). Each verb parses its own flags;
 * -h/--help prints its usage. The HTTP client is made on first use so
 * `serve` and `help` never touch the network. */
#ifndef CLI_CLI_H
#define CLI_CLI_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "cli/host.h"
#include "cli/http.h"

#include <jansson.h>

typedef struct cli_ctx {
    cli_host_t host;   /* target from CORRAL_HOST / OLLAMA_HOST */
    cli_http_t *http;  /* owned; NULL until cli_ctx_http */
    bool stdin_tty;
    bool stdout_tty;
    bool stderr_tty;
} cli_ctx_t;

/* Fills ctx from the environment and the terminals. */
cr_status_t cli_ctx_init(cli_ctx_t *ctx, cr_err_t *err);
void cli_ctx_free(cli_ctx_t *ctx);

/* The shared client (created on the first call); borrowed. */
cr_status_t cli_ctx_http(cli_ctx_t *ctx, cli_http_t **out, cr_err_t *err);

/* A verb. argv[0] is the verb's name; flags and operands follow. */
typedef cr_status_t (*cli_cmd_fn)(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);

cr_status_t cli_cmd_serve(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_run(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_create(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_list(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_ps(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_show(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_rm(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_cp(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_stop(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_pull(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_push(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_keygen(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_version(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);

/* Shared helpers of the verbs (models.c). */

/* True if argv has -h or --help before a "--". */
bool cli_wants_help(int argc, char **argv);

/* The directory of the service binaries: $CORRAL_BIN_DIR, else this
 * executable's (serve.c). */
cr_status_t cli_bin_dir(char *out, size_t cap, cr_err_t *err);

/* POST /api/show {model} -> *out (new reference). */
cr_status_t cli_show_model(cli_ctx_t *ctx, const char *model, json_t **out, cr_err_t *err);

/* Prints the default `show` view (Model, Capabilities, Parameters, System,
 * License sections) of a show response to f. */
void cli_print_show_info(const json_t *show, FILE *f);

/* Streams /api/pull or /api/push for model, printing progress to stdout.
 * verb is "pull" or "push". */
cr_status_t cli_pull_push(cli_ctx_t *ctx, const char *verb, const char *model, bool insecure,
                          cr_err_t *err);

/* Prints one progress object {status, digest?, total?, completed?} of a
 * pull/push/create stream to f, rewriting the line in place on a TTY. */
typedef struct cli_progress {
    FILE *f;
    bool tty;
    char last_status[512];
    bool line_open; /* a TTY line waiting for its final newline */
    int last_pct;
} cli_progress_t;

void cli_progress_init(cli_progress_t *p, FILE *f, bool tty);
void cli_progress_show(cli_progress_t *p, const json_t *obj);
void cli_progress_done(cli_progress_t *p);

/* A string field of a JSON object, or NULL. */
const char *cli_jstr(const json_t *o, const char *key);

#endif
