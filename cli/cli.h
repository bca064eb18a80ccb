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
cr_status_t cli_cmd_doctor(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);
cr_status_t cli_cmd_version(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err);

/* Shared helpers of the verbs (models.c). */

/* True if argv has -h or --help before a "--". */
bool cli_wants_help(int argc, char **argv);

/* The directory of the service binaries: $CORRAL_BIN_DIR, else this
 * executable's (serve.c). */
cr_status_t cli_bin_dir(char *out, size_t cap, cr_err_t *err);

/* Runs `bin verb argv[1..]` from cli_bin_dir in place of this process
 * (service_exec.c); returns only with an error naming the path. */
cr_status_t cli_exec_service(const char *bin, const char *verb, int argc, char **argv,
                             cr_err_t *err);

/* POST /api/show {model} -> *out (new reference). */
cr_status_t cli_show_model(cli_ctx_t *ctx, const char *model, json_t **out, cr_err_t *err);

/* POST /api/show {model, verbose?} -> *out (new reference). */
cr_status_t cli_show_model_ex(cli_ctx_t *ctx, const char *model, bool verbose, json_t **out,
                              cr_err_t *err);

/* Prints the default `show` view (Model, Capabilities, Parameters, System,
 * License sections) of a show response to f; verbose adds Metadata (every
 * model_info key, sorted, arrays shortened as Ollama does) and Tensors
 * (name, type, shape) after Parameters, as `ollama show -v`. */
void cli_print_show_info(const json_t *show, bool verbose, FILE *f);

/* Streams /api/pull or /api/push for model, drawing progress on stderr
 * (progress.h). verb is "pull" or "push". */
cr_status_t cli_pull_push(cli_ctx_t *ctx, const char *verb, const char *model, bool insecure,
                          cr_err_t *err);

/* A string field of a JSON object, or NULL. */
const char *cli_jstr(const json_t *o, const char *key);

#endif
