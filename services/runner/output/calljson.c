/* calljson.c: tool_calls entries and their ids. */
#include "lib/prelude.h"
#include "services/runner/output/calljson.h"

#include "lib/gotext.h"

#include <time.h>

uint64_t rn_output_call_seed(const void *salt)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t s = ((uint64_t)ts.tv_sec * 1000000007u) ^ (uint64_t)ts.tv_nsec ^
                 ((uint64_t)(uintptr_t)salt << 17);
    return s ? s : 0x9e3779b97f4a7c15ull; /* xorshift never leaves 0 */
}

void rn_output_call_id(uint64_t *rng, char out[9])
{
    static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    for (int i = 0; i < 8; i++) {
        /* xorshift64* */
        *rng ^= *rng >> 12;
        *rng ^= *rng << 25;
        *rng ^= *rng >> 27;
        uint64_t r = *rng * 2685821657736338717ull;
        out[i] = al[(r >> 32) % 36];
    }
    out[8] = '\0';
}

static cr_status_t put_real(cr_buf_t *b, double d)
{
    char tmp[CR_FLOAT_BUF];
    size_t n = cr_float_format(d, 64, CR_FLOAT_JSON, tmp, sizeof tmp);
    return cr_buf_append(b, tmp, n);
}

static int cmp_keys(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static cr_status_t put_object(cr_buf_t *b, const json_t *v, bool sort_keys)
{
    size_t n = json_object_size(v), i = 0;
    const char **keys = n ? malloc(n * sizeof *keys) : NULL;
    if (n && !keys)
        return CR_E_NOMEM;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val)
        keys[i++] = key;
    if (sort_keys && n > 1)
        qsort(keys, n, sizeof *keys, cmp_keys);
    cr_status_t st = cr_buf_putc(b, '{');
    for (i = 0; !st && i < n; i++) {
        if (i)
            st = cr_buf_putc(b, ',');
        if (!st)
            st = cr_json_quote(keys[i], strlen(keys[i]), b);
        if (!st)
            st = cr_buf_putc(b, ':');
        if (!st)
            st = rn_output_json(b, json_object_get(v, keys[i]), sort_keys);
    }
    free(keys);
    return st ? st : cr_buf_putc(b, '}');
}

cr_status_t rn_output_json(cr_buf_t *b, const json_t *v, bool sort_keys)
{
    cr_status_t st = CR_OK;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return put_object(b, v, sort_keys);
    case JSON_ARRAY: {
        size_t i;
        json_t *val;
        st = cr_buf_putc(b, '[');
        json_array_foreach((json_t *)v, i, val) {
            if (!st && i)
                st = cr_buf_putc(b, ',');
            if (!st)
                st = rn_output_json(b, val, sort_keys);
        }
        return st ? st : cr_buf_putc(b, ']');
    }
    case JSON_STRING:
        return cr_json_quote(json_string_value(v), json_string_length(v), b);
    case JSON_INTEGER:
        return cr_buf_printf(b, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
    case JSON_REAL:
        return put_real(b, json_real_value(v));
    case JSON_TRUE:
        return cr_buf_puts(b, "true");
    case JSON_FALSE:
        return cr_buf_puts(b, "false");
    case JSON_NULL:
        return cr_buf_puts(b, "null");
    }
    return CR_OK;
}

cr_status_t rn_output_call_json(cr_buf_t *calls, size_t mark, uint64_t *rng,
                                int index, const char *name, size_t name_len,
                                const json_t *args)
{
    char id[9];
    rn_output_call_id(rng, id);
    cr_status_t st = cr_buf_putc(calls, calls->len > mark ? ',' : '[');
    if (!st)
        st = cr_buf_printf(calls,
                           "{\"id\":\"call_%s\",\"function\":{\"index\":%d,"
                           "\"name\":",
                           id, index);
    if (!st)
        st = cr_json_quote(name, name_len, calls);
    if (!st)
        st = cr_buf_puts(calls, ",\"arguments\":");
    if (!st)
        st = rn_output_json(calls, args, false);
    if (!st)
        st = cr_buf_puts(calls, "}}");
    return st;
}
