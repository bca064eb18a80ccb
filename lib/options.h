/* options.h: the model options (§2 of the API reference) as one table,
 * expanded from lib/options.def: name, type, load or per request, built-in
 * default, and the removed options. It knows nothing of the bus, so the
 * CLI reads it too; proto/options.h adds each row's place in the bus
 * record. */
#ifndef CR_OPTIONS_H
#define CR_OPTIONS_H

#include "lib/prelude.h"
#include "lib/status.h"

typedef enum cr_opt_type {
    CR_OPT_INT,   /* int64; JSON numbers accepted, truncated */
    CR_OPT_FLOAT, /* double */
    CR_OPT_BOOL,  /* bool */
    CR_OPT_STRS,  /* array of strings (stop) */
} cr_opt_type_t;

/* What a value must satisfy (options.def's CHECK column). */
typedef enum cr_opt_check {
    CR_OPT_ANY,
    CR_OPT_FINITE,   /* not NaN or infinite */
    CR_OPT_POSITIVE, /* finite and above 0 */
    CR_OPT_MINUS1,   /* -1 or more */
} cr_opt_check_t;

typedef struct cr_opt_def {
    const char *name;
    cr_opt_type_t type;
    bool load;            /* fixed when a runner starts */
    double def;           /* built-in default; NAN: none (automatic or unset) */
    cr_opt_check_t check; /* what a value must satisfy */
} cr_opt_def_t;

/* Every option, in options.def order (cr_opt_count rows). */
extern const cr_opt_def_t cr_opt_defs[];
extern const size_t cr_opt_count;

/* Every removed option's name (cr_opt_removed_count entries). */
extern const char *const cr_opt_removed_names[];
extern const size_t cr_opt_removed_count;

/* The row of option `name` (case-sensitive), or NULL when it is not one
 * (removed or unknown). Borrowed, static. */
const cr_opt_def_t *cr_opt_find(const char *name);

/* Checks value v of option `name` (a number; ints as doubles) against
 * `check`: CR_E_INVALID with a message naming the option and the rule
 * ("option \"repeat_penalty\" must be greater than 0, got 0"). The runner,
 * the gateway and create all ask this. */
cr_status_t cr_opt_check_value(cr_opt_check_t check, const char *name, double v, cr_err_t *err);

/* True if `name` is a removed option. *modelfile_warns (may be NULL) is set
 * to whether a Modelfile PARAMETER of that name is warned about and skipped
 * (true) or rejected as unknown (false). */
bool cr_opt_is_removed(const char *name, bool *modelfile_warns);

#endif
