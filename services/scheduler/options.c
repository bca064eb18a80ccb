/* options.c: option layering and load-compatibility. */
#include "lib/prelude.h"
#include "services/scheduler/options.h"

#include "lib/env.h"

#define OVERLAY_FIELD(name, kind, sub, req) \
    if (src->has_##name) {                  \
        dst->name = src->name;              \
        dst->has_##name = true;             \
    }

void sch_options_overlay(msg_options_t *dst, const msg_options_t *src)
{
    if (!src)
        return;
    MSG_REC_options(OVERLAY_FIELD)
}

void sch_options_overlay_load(msg_options_t *dst, const msg_options_t *src)
{
    if (!src)
        return;
#define LOAD_FIELD(name) OVERLAY_FIELD(name, _, _, _)
    LOAD_FIELD(num_ctx)
    LOAD_FIELD(num_batch)
    LOAD_FIELD(num_gpu)
    LOAD_FIELD(main_gpu)
    LOAD_FIELD(num_thread)
    LOAD_FIELD(use_mmap)
#undef LOAD_FIELD
}

#undef OVERLAY_FIELD

static bool int_compatible(bool loaded_has, int64_t loaded, bool want_has,
                           int64_t want)
{
    if (!want_has)
        return true;
    return loaded_has && loaded == want;
}

bool sch_options_load_compatible(const msg_options_t *loaded,
                                 const msg_options_t *want)
{
    static const msg_options_t none;
    if (!want)
        return true;
    if (!loaded)
        loaded = &none;
    /* num_gpu -1 means "automatic" and never forces a reload. */
    bool gpu_ok = !want->has_num_gpu || want->num_gpu < 0 ||
                  (loaded->has_num_gpu && loaded->num_gpu == want->num_gpu);
    bool mmap_ok = !want->has_use_mmap ||
                   (loaded->has_use_mmap && loaded->use_mmap == want->use_mmap);
    return gpu_ok && mmap_ok &&
           int_compatible(loaded->has_num_ctx, loaded->num_ctx,
                          want->has_num_ctx, want->num_ctx) &&
           int_compatible(loaded->has_num_batch, loaded->num_batch,
                          want->has_num_batch, want->num_batch) &&
           int_compatible(loaded->has_main_gpu, loaded->main_gpu,
                          want->has_main_gpu, want->main_gpu) &&
           int_compatible(loaded->has_num_thread, loaded->num_thread,
                          want->has_num_thread, want->num_thread);
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
