/* options.h: the model options (§2 of the API reference) of lib/options.h
 * with each row's place in the bus record msg_options_t, for the services
 * (the CLI, which has no bus, reads lib/options.h).
 *
 * An option is found by its JSON name (case-sensitive); its row gives the
 * type, whether it is a load option, its built-in default and where it lives
 * in msg_options_t. Removed options are lib/options.h's. */
#ifndef CR_MSG_OPTIONS_H
#define CR_MSG_OPTIONS_H

#include "lib/prelude.h"
#include "lib/options.h"
#include "proto/msg.h"

typedef cr_opt_type_t msg_opt_type_t;
#define MSG_OPT_INT CR_OPT_INT     /* int64_t */
#define MSG_OPT_FLOAT CR_OPT_FLOAT /* double */
#define MSG_OPT_BOOL CR_OPT_BOOL   /* bool */
#define MSG_OPT_STRS CR_OPT_STRS   /* msg_strs_t (stop) */

typedef struct msg_opt_def {
    const char *name;
    msg_opt_type_t type;
    bool load;      /* fixed when a runner starts */
    double def;     /* built-in default; NAN: none (automatic or unset) */
    cr_opt_check_t check; /* what a value must satisfy (cr_opt_check_value) */
    size_t off;     /* of the value in msg_options_t */
    size_t has_off; /* of its has_ flag */
} msg_opt_def_t;

/* Every option, in options.def order (msg_opt_count rows; row i is
 * cr_opt_defs[i] with its offsets). */
extern const msg_opt_def_t msg_opt_defs[];
extern const size_t msg_opt_count;

/* The row of option `name`, or NULL when it is not one (removed or
 * unknown). Borrowed, static. */
const msg_opt_def_t *msg_opt_find(const char *name);

/* True if `name` is a removed option (cr_opt_is_removed). */
static inline bool msg_opt_is_removed(const char *name, bool *modelfile_warns)
{
    return cr_opt_is_removed(name, modelfile_warns);
}

/* Whether row d's field is set in o (o may be NULL: false). */
bool msg_opt_has(const msg_options_t *o, const msg_opt_def_t *d);

/* Copies row d's field (value and has_ flag) from src to dst when src has
 * it. String arrays are borrowed from src. */
void msg_opt_copy(msg_options_t *dst, const msg_options_t *src,
                  const msg_opt_def_t *d);

#endif
