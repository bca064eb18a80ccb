/* json_util.h: the small jansson helpers every request converter and
 * answer renderer of the gateway uses (native, OpenAI, Anthropic,
 * Responses): read a member that JSON null leaves absent, and add to an
 * object or array with a failed allocation as CR_E_NOMEM. */
#ifndef GW_JSON_UTIL_H
#define GW_JSON_UTIL_H

#include "lib/prelude.h"

#include <jansson.h>

/* A present, non-null member, or NULL (Go's decoder treats null as
 * absent). */
static inline json_t *gw_json_member(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static inline cr_status_t gw_json_nomem(cr_err_t *err)
{
    return cr_err_set(err, CR_E_NOMEM, "out of memory");
}

/* o[key] = v, taking v's reference; v NULL (a failed allocation) fails. */
static inline cr_status_t gw_json_put(json_t *o, const char *key, json_t *v, cr_err_t *err)
{
    if (!v || json_object_set_new(o, key, v))
        return gw_json_nomem(err);
    return CR_OK;
}

/* Appends v to arr, taking v's reference; v NULL fails. */
static inline cr_status_t gw_json_append(json_t *arr, json_t *v, cr_err_t *err)
{
    if (!v || json_array_append_new(arr, v))
        return gw_json_nomem(err);
    return CR_OK;
}

#endif
