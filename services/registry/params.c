/* params.c: option table, validation and conversions (see params.h). */
#include "lib/prelude.h"
#include "services/registry/params.h"
#include "services/registry/gojson.h"
#include "proto/options.h"

#include <math.h>

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A new object with obj's entries in sorted key order (values shared). */
static json_t *sorted_copy(const json_t *obj)
{
    size_t n = json_object_size(obj);
    const char **keys = calloc(n ? n : 1, sizeof *keys);
    json_t *out = json_object();
    if (!keys || !out) {
        free(keys);
        json_decref(out);
        return NULL;
    }
    size_t i = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)obj, k, v) keys[i++] = k;
    qsort(keys, n, sizeof *keys, cmp_str);
    for (i = 0; i < n; i++)
        json_object_set(out, keys[i], json_object_get(obj, keys[i]));
    free(keys);
    return out;
}

static cr_status_t convert(const msg_opt_def_t *d, const json_t *v,
                           json_t **out, cr_err_t *err)
{
    *out = NULL;
    switch (d->type) {
    case MSG_OPT_INT:
        if (json_is_integer(v)) {
            *out = json_integer(json_integer_value(v));
        } else if (json_is_real(v)) {
            double x = json_real_value(v);
            if (!isfinite(x) || x < -9.2e18 || x > 9.2e18)
                return cr_err_set(err, CR_E_INVALID,
                                  "option \"%s\" must be of type integer",
                                  d->name);
            *out = json_integer((json_int_t)x);
        } else {
            return cr_err_set(err, CR_E_INVALID,
                              "option \"%s\" must be of type integer", d->name);
        }
        break;
    case MSG_OPT_FLOAT:
        if (!json_is_number(v))
            return cr_err_set(err, CR_E_INVALID,
                              "option \"%s\" must be of type float32", d->name);
        *out = json_real(json_number_value(v));
        break;
    case MSG_OPT_BOOL:
        if (!json_is_boolean(v))
            return cr_err_set(err, CR_E_INVALID,
                              "option \"%s\" must be of type boolean", d->name);
        *out = json_boolean(json_is_true(v));
        break;
    case MSG_OPT_STRS:
        if (json_is_string(v)) {
            *out = json_array();
            json_array_append(*out, (json_t *)v);
            break;
        }
        if (!json_is_array(v))
            return cr_err_set(err, CR_E_INVALID,
                              "option \"%s\" must be of type array", d->name);
        if (json_array_size(v) > REG_PARAMS_MAX_STOP)
            return cr_err_set(err, CR_E_INVALID,
                              "option \"%s\" has more than %d values", d->name,
                              REG_PARAMS_MAX_STOP);
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_string(json_array_get(v, i)))
                return cr_err_set(err, CR_E_INVALID,
                                  "option \"%s\" must be of an array of strings",
                                  d->name);
        *out = json_deep_copy(v);
        break;
    }
    return *out ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
}

cr_status_t reg_params_validate(const json_t *in, reg_params_warn_fn warn,
                                void *ctx, json_t **out, cr_err_t *err)
{
    *out = NULL;
    json_t *clean = json_object();
    if (!clean)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (in && !json_is_null(in) && !json_is_object(in)) {
        json_decref(clean);
        return cr_err_set(err, CR_E_INVALID, "parameters must be an object");
    }
    const char *k;
    json_t *v;
    if (in && json_is_object(in)) {
        json_object_foreach((json_t *)in, k, v) {
            const msg_opt_def_t *d = msg_opt_find(k);
            if (!d) {
                if (warn)
                    warn(ctx, k,
                         msg_opt_is_removed(k, NULL) ? "deprecated"
                                                     : "unknown");
                continue;
            }
            if (json_is_null(v))
                continue;
            json_t *cv;
            cr_status_t st = convert(d, v, &cv, err);
            /* a value no request could use is refused now, not at every
             * generate */
            if (!st && json_is_number(cv))
                st = cr_opt_check_value(d->check, d->name, json_number_value(cv), err);
            if (st) {
                if (cv)
                    json_decref(cv);
                json_decref(clean);
                return st;
            }
            json_object_set_new(clean, k, cv);
        }
    }
    json_t *sorted = sorted_copy(clean);
    json_decref(clean);
    if (!sorted)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    *out = sorted;
    return CR_OK;
}

cr_status_t reg_params_merge(json_t *dst, const json_t *src)
{
    if (!src)
        return CR_OK;
    if (json_object_update(dst, (json_t *)src) != 0)
        return CR_E_NOMEM;
    json_t *sorted = sorted_copy(dst);
    if (!sorted)
        return CR_E_NOMEM;
    json_object_clear(dst);
    json_object_update(dst, sorted);
    json_decref(sorted);
    return CR_OK;
}

cr_status_t reg_params_to_options(const json_t *params, msg_options_t *opts,
                                  msg_t *m)
{
    memset(opts, 0, sizeof *opts);
    if (!params || !json_is_object(params))
        return CR_OK;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)params, k, v) {
        const msg_opt_def_t *d = msg_opt_find(k);
        if (!d)
            continue;
        char *base = (char *)opts;
        bool *has = (bool *)(base + d->has_off);
        switch (d->type) {
        case MSG_OPT_INT:
            if (!json_is_number(v))
                continue;
            *(int64_t *)(base + d->off) =
                json_is_integer(v) ? (int64_t)json_integer_value(v)
                                   : (int64_t)json_real_value(v);
            *has = true;
            break;
        case MSG_OPT_FLOAT:
            if (!json_is_number(v))
                continue;
            *(double *)(base + d->off) = json_number_value(v);
            *has = true;
            break;
        case MSG_OPT_BOOL:
            if (!json_is_boolean(v))
                continue;
            *(bool *)(base + d->off) = json_is_true(v);
            *has = true;
            break;
        case MSG_OPT_STRS: {
            if (!json_is_array(v))
                continue;
            size_t n = json_array_size(v);
            msg_strs_t *s = (msg_strs_t *)(base + d->off);
            s->v = msg_alloc(m, (n ? n : 1) * sizeof(char *));
            if (!s->v)
                return CR_E_NOMEM;
            s->n = 0;
            for (size_t i = 0; i < n; i++) {
                json_t *e = json_array_get(v, i);
                if (!json_is_string(e))
                    continue;
                s->v[s->n] = msg_strdup(m, json_string_value(e));
                if (!s->v[s->n])
                    return CR_E_NOMEM;
                s->n++;
            }
            *has = true;
            break;
        }
        }
    }
    return CR_OK;
}

json_t *reg_params_from_options(const msg_options_t *opts)
{
    json_t *o = json_object();
    if (!o || !opts)
        return o;
    for (size_t i = 0; i < msg_opt_count; i++) {
        const msg_opt_def_t *d = &msg_opt_defs[i];
        const char *base = (const char *)opts;
        if (!*(const bool *)(base + d->has_off))
            continue;
        switch (d->type) {
        case MSG_OPT_INT:
            json_object_set_new(o, d->name,
                                json_integer(*(const int64_t *)(base + d->off)));
            break;
        case MSG_OPT_FLOAT:
            json_object_set_new(o, d->name,
                                json_real(*(const double *)(base + d->off)));
            break;
        case MSG_OPT_BOOL:
            json_object_set_new(o, d->name,
                                json_boolean(*(const bool *)(base + d->off)));
            break;
        case MSG_OPT_STRS: {
            const msg_strs_t *s = (const msg_strs_t *)(base + d->off);
            json_t *a = json_array();
            for (size_t j = 0; j < s->n; j++)
                if (s->v[j])
                    json_array_append_new(a, json_string(s->v[j]));
            json_object_set_new(o, d->name, a);
            break;
        }
        }
    }
    /* Sorted by name, as every params object is. */
    json_t *sorted = sorted_copy(o);
    json_decref(o);
    return sorted;
}

static cr_status_t show_line(cr_buf_t *out, bool *first, const char *key,
                             const json_t *v)
{
    cr_status_t st = CR_OK;
    if (!*first)
        st = cr_buf_putc(out, '\n');
    *first = false;
    if (!st)
        st = cr_buf_printf(out, "%-30s ", key);
    if (!st)
        st = reg_go_value(v, true, out);
    return st;
}

cr_status_t reg_params_show_text(const json_t *params, cr_buf_t *out)
{
    if (!params || !json_is_object(params))
        return CR_OK;
    json_t *sorted = sorted_copy(params);
    if (!sorted)
        return CR_E_NOMEM;
    cr_status_t st = CR_OK;
    bool first = true;
    const char *k;
    json_t *v;
    json_object_foreach(sorted, k, v) {
        if (json_is_array(v)) {
            for (size_t i = 0; !st && i < json_array_size(v); i++)
                st = show_line(out, &first, k, json_array_get(v, i));
        } else {
            st = show_line(out, &first, k, v);
        }
        if (st)
            break;
    }
    json_decref(sorted);
    return st;
}
