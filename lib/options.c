/* options.c: the option tables expanded from options.def (see options.h). */
#include "lib/prelude.h"
#include "lib/options.h"

#include "lib/options.def"

#include <math.h>

#define OPT_TYPE_I64 CR_OPT_INT
#define OPT_TYPE_F64 CR_OPT_FLOAT
#define OPT_TYPE_BOOL CR_OPT_BOOL
#define OPT_TYPE_STRS CR_OPT_STRS
#define OPT_LOAD_LOAD true
#define OPT_LOAD_RUN false

#define OPT_CHECK_ANY CR_OPT_ANY
#define OPT_CHECK_FINITE CR_OPT_FINITE
#define OPT_CHECK_POSITIVE CR_OPT_POSITIVE
#define OPT_CHECK_MINUS1 CR_OPT_MINUS1

#define OPT_ROW(x, name, kind, when, def, check) \
    {#name, OPT_TYPE_##kind, OPT_LOAD_##when, (double)(def), OPT_CHECK_##check},
const cr_opt_def_t cr_opt_defs[] = {MSG_OPTIONS(OPT_ROW, _)};
#undef OPT_ROW
const size_t cr_opt_count = CR_ARRAY_LEN(cr_opt_defs);

#define REMOVED_NAME(name, mf) #name,
const char *const cr_opt_removed_names[] = {MSG_OPTIONS_REMOVED(REMOVED_NAME)};
#undef REMOVED_NAME
const size_t cr_opt_removed_count = CR_ARRAY_LEN(cr_opt_removed_names);

#define MF_WARN true /* the Modelfile parser warns and skips */
#define MF_UNKNOWN false
#define REMOVED_WARN(name, mf) MF_##mf,
static const bool removed_warns[] = {MSG_OPTIONS_REMOVED(REMOVED_WARN)};
#undef REMOVED_WARN

const cr_opt_def_t *cr_opt_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < cr_opt_count; i++)
        if (!strcmp(cr_opt_defs[i].name, name))
            return &cr_opt_defs[i];
    return NULL;
}

bool cr_opt_is_removed(const char *name, bool *modelfile_warns)
{
    for (size_t i = 0; name && i < cr_opt_removed_count; i++) {
        if (!strcmp(cr_opt_removed_names[i], name)) {
            if (modelfile_warns)
                *modelfile_warns = removed_warns[i];
            return true;
        }
    }
    return false;
}

cr_status_t cr_opt_check_value(cr_opt_check_t check, const char *name, double v, cr_err_t *err)
{
    switch (check) {
    case CR_OPT_ANY:
        return CR_OK;
    case CR_OPT_FINITE:
        if (!isfinite(v))
            return cr_err_set(err, CR_E_INVALID, "option \"%s\" must be a finite number", name);
        return CR_OK;
    case CR_OPT_POSITIVE:
        if (!isfinite(v))
            return cr_err_set(err, CR_E_INVALID, "option \"%s\" must be a finite number", name);
        if (!(v > 0))
            return cr_err_set(err, CR_E_INVALID, "option \"%s\" must be greater than 0, got %g",
                              name, v);
        return CR_OK;
    case CR_OPT_MINUS1:
        if (!(v >= -1))
            return cr_err_set(err, CR_E_INVALID, "option \"%s\" must be -1 or more, got %.0f",
                              name, v);
        return CR_OK;
    }
    return CR_OK;
}
