/* run.h: what `run` (run.c) and its REPL (repl.c) share: the session
 * options and the calls that send a prompt and stream the answer to stdout.
 * Ctrl-C (cli_interrupted) ends an answer early without an error. */
#ifndef CLI_RUN_H
#define CLI_RUN_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "cli/cli.h"

#include <jansson.h>

typedef struct cli_run_opts {
    char *model;          /* owned */
    json_t *format;       /* owned: "json" or a schema object; NULL = none */
    const char *keepalive;/* borrowed from argv: "5m", "300", "-1" */
    const char *think;    /* borrowed: NULL or true/false/low/medium/high/max */
    bool verbose;         /* timing summary on stderr */
    bool hide_thinking;
    bool insecure;        /* --insecure: the automatic pull may use http */
    bool nowordwrap;      /* --nowordwrap, /set nowordwrap */
    bool has_truncate;    /* --truncate given (embedding models) */
    bool truncate;
    int64_t dimensions;   /* --dimensions N (embedding models); 0 = all */
    json_t *options;      /* owned: session options (REPL /set parameter) */
    char *system;         /* owned: REPL /set system */
    json_t *messages;     /* owned: REPL history [{role, content}] */
    json_t *images;       /* borrowed: the next generate's images (base64
                             array, images.h), or NULL */
} cli_run_opts_t;

/* Frees the owned fields and zeroes o. */
void cli_run_opts_free(cli_run_opts_t *o);

/* POST /api/generate {model, prompt, stream}: prints the response text as
 * it arrives, a final newline, and with verbose the timing summary. */
cr_status_t cli_run_generate(cli_ctx_t *ctx, const cli_run_opts_t *o, const char *prompt,
                             cr_err_t *err);

/* POST /api/chat with the system message and o->messages (the last being
 * the new user turn); prints the answer and appends it to o->messages. */
cr_status_t cli_run_chat(cli_ctx_t *ctx, cli_run_opts_t *o, cr_err_t *err);

/* An empty generate that loads the model (keep_alive honoured). */
cr_status_t cli_run_preload(cli_ctx_t *ctx, const cli_run_opts_t *o, cr_err_t *err);

/* /api/show of model into *show (new reference), pulling it first (plain
 * http allowed when insecure) if the server answers "not found". */
cr_status_t cli_run_ensure_model(cli_ctx_t *ctx, const char *model, bool insecure,
                                 json_t **show, cr_err_t *err);

/* POST /api/embed {model, input: prompt, truncate?, dimensions?,
 * keep_alive?} and prints the first vector as JSON (Ollama's floats) on
 * one line: what `run` does for an embedding model. */
cr_status_t cli_run_embed(cli_ctx_t *ctx, const cli_run_opts_t *o, const char *prompt,
                          cr_err_t *err);

/* The interactive loop (repl.c). show is the model's /api/show reply. */
cr_status_t cli_repl(cli_ctx_t *ctx, cli_run_opts_t *o, const json_t *show, cr_err_t *err);

#endif
