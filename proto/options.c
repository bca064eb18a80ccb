/* options.c: the option rows with their place in the bus record, expanded
 * from lib/options.def (see options.h). */
#include "lib/prelude.h"
#include "proto/options.h"

#include <math.h>

#define OPT_TYPE_I64 MSG_OPT_INT
#define OPT_TYPE_F64 MSG_OPT_FLOAT
#define OPT_TYPE_BOOL MSG_OPT_BOOL
#define OPT_TYPE_STRS MSG_OPT_STRS
#define OPT_LOAD_LOAD true
#define OPT_LOAD_RUN false

#define OPT_CHECK_ANY CR_OPT_ANY
#define OPT_CHECK_FINITE CR_OPT_FINITE
#define OPT_CHECK_POSITIVE CR_OPT_POSITIVE
#define OPT_CHECK_MINUS1 CR_OPT_MINUS1
#define OPT_ROW(x, name, kind, when, def, check)                           \
    {#name, OPT_TYPE_##kind, OPT_LOAD_##when, (double)(def), OPT_CHECK_##check, \
     offsetof(msg_options_t, name), offsetof(msg_options_t, has_##name)},
const msg_opt_def_t msg_opt_defs[] = {MSG_OPTIONS(OPT_ROW, _)};
#undef OPT_ROW
const size_t msg_opt_count = CR_ARRAY_LEN(msg_opt_defs);

const msg_opt_def_t *msg_opt_find(const char *name)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < msg_opt_count; i++)
        if (!strcmp(msg_opt_defs[i].name, name))
            return &msg_opt_defs[i];
    return NULL;
}


bool msg_opt_has(const msg_options_t *o, const msg_opt_def_t *d)
{
    return o && *(const bool *)((const char *)o + d->has_off);
}

static size_t value_size(msg_opt_type_t t)
{
    switch (t) {
    case MSG_OPT_INT: return sizeof(int64_t);
    case MSG_OPT_FLOAT: return sizeof(double);
    case MSG_OPT_BOOL: return sizeof(bool);
    case MSG_OPT_STRS: return sizeof(msg_strs_t);
    }
    return 0;
}

void msg_opt_copy(msg_options_t *dst, const msg_options_t *src,
                  const msg_opt_def_t *d)
{
    if (!msg_opt_has(src, d))
        return;
    memcpy((char *)dst + d->off, (const char *)src + d->off,
           value_size(d->type));
    *(bool *)((char *)dst + d->has_off) = true;
}
