/* options.h: the model options (§2 of the API reference) as one table,
 * expanded from proto/options.def, for every service and the CLI.
 *
 * An option is found by its JSON name (case-sensitive); its row gives the
 * type, whether it is a load option, its built-in default and where it lives
 * in msg_options_t. Removed options are a second, smaller table. */
#ifndef CR_OPTIONS_H
#define CR_OPTIONS_H

#include "lib/prelude.h"
#include "proto/msg.h"

typedef enum msg_opt_type {
    MSG_OPT_INT,   /* int64_t; JSON numbers accepted, truncated */
    MSG_OPT_FLOAT, /* double */
    MSG_OPT_BOOL,  /* bool */
    MSG_OPT_STRS,  /* msg_strs_t (stop) */
} msg_opt_type_t;

typedef struct msg_opt_def {
    const char *name;
    msg_opt_type_t type;
    bool load;      /* fixed when a runner starts */
    double def;     /* built-in default; NAN: none (automatic or unset) */
    size_t off;     /* of the value in msg_options_t */
    size_t has_off; /* of its has_ flag */
} msg_opt_def_t;

/* Every option, in options.def order (MSG_OPT_COUNT rows). */
extern const msg_opt_def_t msg_opt_defs[];
extern const size_t msg_opt_count;

/* Every removed option's name (msg_opt_removed_count entries). */
extern const char *const msg_opt_removed_names[];
extern const size_t msg_opt_removed_count;

/* The row of option `name`, or NULL when it is not one (removed or
 * unknown). Borrowed, static. */
const msg_opt_def_t *msg_opt_find(const char *name);

/* True if `name` is a removed option. *modelfile_warns (may be NULL) is set
 * to whether a Modelfile PARAMETER of that name is warned about and skipped
 * (true) or rejected as unknown (false). */
bool msg_opt_is_removed(const char *name, bool *modelfile_warns);

/* Whether row d's field is set in o (o may be NULL: false). */
bool msg_opt_has(const msg_options_t *o, const msg_opt_def_t *d);

/* Copies row d's field (value and has_ flag) from src to dst when src has
 * it. String arrays are borrowed from src. */
void msg_opt_copy(msg_options_t *dst, const msg_options_t *src,
                  const msg_opt_def_t *d);

#endif
