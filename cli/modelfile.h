/* modelfile.h: the Modelfile language (§8 of the API reference).
 *
 * Parses Modelfile text into a list of commands, checks what can be checked
 * without touching the disk or the server (instruction names, parameter
 * names and value types, message roles, REQUIRES versions), and writes a
 * command list back as text. Errors carry "(line N): ..." with the line the
 * instruction starts on. Path expansion for FROM/ADAPTER/DRAFT (relative to
 * the Modelfile's directory, ~ and ~user) is here too, as pure string work;
 * hashing and uploading files is the create command's job.
 *
 * Lexing follows Ollama's parser: case-insensitive instruction keywords,
 * '#' comments at an instruction position, values running to the end of the
 * line and trimmed, `"""` values ending at a line that ends with `"""`, `"`
 * values ending at a line that ends with `"`, quotes removed. UTF-8 with or
 * without a BOM, or UTF-16 with a BOM; control characters are dropped. */
#ifndef CLI_MODELFILE_H
#define CLI_MODELFILE_H

#include "lib/prelude.h"
#include "lib/status.h"

#include <jansson.h>

#define CLI_MF_MAX_BYTES (16u << 20) /* largest Modelfile text */
#define CLI_MF_MAX_COMMANDS 65536

typedef enum cli_mf_kind {
    CLI_MF_FROM,
    CLI_MF_PARAMETER,
    CLI_MF_TEMPLATE,
    CLI_MF_SYSTEM,
    CLI_MF_ADAPTER,
    CLI_MF_LICENSE,
    CLI_MF_MESSAGE,
    CLI_MF_REQUIRES,
    CLI_MF_RENDERER,
    CLI_MF_PARSER,
    CLI_MF_DRAFT,
} cli_mf_kind_t;

typedef struct cli_mf_command {
    cli_mf_kind_t kind;
    char *name; /* PARAMETER: the option name; MESSAGE: the role; else NULL */
    char *args; /* the value, quotes removed (never NULL) */
    int line;   /* 1-based line the instruction starts on (0 if built) */
} cli_mf_command_t;

typedef struct cli_modelfile {
    cli_mf_command_t *cmds; /* owned, in file order */
    size_t n;
    size_t cap;
    char **warnings; /* owned: "parameter mirostat is deprecated", ... */
    size_t n_warnings;
} cli_modelfile_t;

/* The type of a PARAMETER, as the options object (§2) has it. */
typedef enum cli_param_type {
    CLI_PARAM_UNKNOWN = 0,
    CLI_PARAM_INT,
    CLI_PARAM_FLOAT,
    CLI_PARAM_BOOL,
    CLI_PARAM_STRINGS,    /* stop: repeated values accumulate */
    CLI_PARAM_DEPRECATED, /* accepted with a warning and ignored */
} cli_param_type_t;

/* Parses len bytes of Modelfile text. On success *out is the command list
 * (caller owns; free with cli_modelfile_destroy). CR_E_INVALID with
 * "(line N): ..." for a bad instruction, parameter, value or role, and
 * "no FROM line" when there is none; CR_E_TOO_LARGE past CLI_MF_MAX_BYTES or
 * CLI_MF_MAX_COMMANDS; CR_E_NOMEM. */
cr_status_t cli_modelfile_parse(const char *text, size_t len, cli_modelfile_t **out,
                                cr_err_t *err);

/* An empty command list (for building one, as the REPL's /save does). */
cli_modelfile_t *cli_modelfile_new(void);

/* Appends a command (copies name and args; name may be NULL).
 * CR_E_NOMEM or CR_E_TOO_LARGE. */
cr_status_t cli_modelfile_add(cli_modelfile_t *mf, cli_mf_kind_t kind, const char *name,
                              const char *args, int line);

/* Frees; accepts NULL and *mf_p == NULL; sets *mf_p = NULL. */
void cli_modelfile_destroy(cli_modelfile_t **mf_p);

/* Writes the commands back as Modelfile text, one instruction a line:
 * `FROM x`, `PARAMETER name value`, `MESSAGE role text`, `TEMPLATE ...`
 * with values quoted (`"` or `"""`) where plain text would not parse back.
 * Returns a string the caller frees with free(); NULL on allocation failure. */
char *cli_modelfile_serialize(const cli_modelfile_t *mf);

/* The type of the option `name` (case-sensitive JSON name). */
cli_param_type_t cli_param_type(const char *name);

/* Converts a parameter's text value to JSON by its type: json integer,
 * real, true/false, or (for stop) a string. CR_E_INVALID for an unknown
 * name ("unknown parameter 'x'") or a value that does not parse ("invalid
 * float value [abc]"); deprecated names give CR_E_UNSUPPORTED. *out is a new
 * reference on success. */
cr_status_t cli_param_value(const char *name, const char *text, json_t **out,
                            cr_err_t *err);

/* The `parameters` object of a create request: every PARAMETER (deprecated
 * ones skipped), stop values accumulated into one array. *out is a new
 * reference (an empty object when there are none). */
cr_status_t cli_modelfile_params_json(const cli_modelfile_t *mf, json_t **out,
                                      cr_err_t *err);

/* Expands a FROM/ADAPTER path as Ollama does: absolute stays, "~" and "~/x"
 * use $HOME, "~user/x" that user's home, anything else is joined to
 * rel_dir; the result is made absolute (against the working directory) and
 * cleaned of ".", ".." and doubled slashes. CR_E_NOT_FOUND for an unknown
 * ~user, CR_E_TOO_LARGE if it does not fit in cap. */
cr_status_t cli_mf_expand_path(const char *path, const char *rel_dir, char *out,
                               size_t cap, cr_err_t *err);

/* The upper-case instruction keyword of a kind ("FROM", "PARAMETER", ...). */
const char *cli_mf_kind_name(cli_mf_kind_t kind);

#endif
