/* options.c: option layering and load-compatibility. */
#include "lib/prelude.h"
#include "services/scheduler/options.h"

#include "lib/env.h"
#include "proto/options.h"

void sch_options_overlay(msg_options_t *dst, const msg_options_t *src)
{
    for (size_t i = 0; src && i < msg_opt_count; i++)
        msg_opt_copy(dst, src, &msg_opt_defs[i]);
}

void sch_options_overlay_load(msg_options_t *dst, const msg_options_t *src)
{
    for (size_t i = 0; src && i < msg_opt_count; i++)
        if (msg_opt_defs[i].load)
            msg_opt_copy(dst, src, &msg_opt_defs[i]);
}

/* Whether a runner started with `loaded` meets want's value of load option
 * d: unset in want matches anything, num_gpu -1 (automatic) too. */
static bool load_field_ok(const msg_options_t *loaded,
                          const msg_options_t *want, const msg_opt_def_t *d)
{
    if (!msg_opt_has(want, d))
        return true;
    if (d->off == offsetof(msg_options_t, num_gpu) && want->num_gpu < 0)
        return true;
    if (!msg_opt_has(loaded, d))
        return false;
    const char *a = (const char *)loaded + d->off;
    const char *b = (const char *)want + d->off;
    switch (d->type) {
    case MSG_OPT_INT:
        return !memcmp(a, b, sizeof(int64_t));
    case MSG_OPT_BOOL:
        return *(const bool *)a == *(const bool *)b;
    case MSG_OPT_FLOAT: {
        double x, y;
        memcpy(&x, a, sizeof x);
        memcpy(&y, b, sizeof y);
        return x == y;
    }
    case MSG_OPT_STRS:
        break;
    }
    return false;
}

bool sch_options_load_compatible(const msg_options_t *loaded,
                                 const msg_options_t *want)
{
    for (size_t i = 0; want && i < msg_opt_count; i++)
        if (msg_opt_defs[i].load &&
            !load_field_ok(loaded, want, &msg_opt_defs[i]))
            return false;
    return true;
}

int64_t sch_options_default_ctx(int64_t vram_total_bytes)
{
    long long v = cr_env_int("CONTEXT_LENGTH", 0);
    if (v > 0)
        return v;
    const int64_t gib = 1LL << 30;
    if (vram_total_bytes >= 47 * gib)
        return 262144;
    if (vram_total_bytes >= 23 * gib)
        return 32768;
    return 4096;
}
