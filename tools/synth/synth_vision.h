/* synth_vision.h: what the projector synths (synth_clip.c,
 * synth_pixtral.c) share: a GGUF writer and the tensors it borrows until
 * written. Internal to tools/synth. */
#ifndef RN_SYNTH_VISION_H
#define RN_SYNTH_VISION_H

#include "lib/prelude.h"
#include "lib/gguf_write.h"
#include "lib/status.h"

#define RN_SYNTH_VISION_MAX_TENSORS 512

typedef struct rn_synth_vision {
    cr_gguf_writer_t *w;
    void *data[RN_SYNTH_VISION_MAX_TENSORS]; /* borrowed by the writer until written */
    int n;
    uint64_t seed;
} rn_synth_vision_t;

/* Adds a tensor of GGUF shape ne[0..n_dims) in `type` (F32 or F16), its
 * values N(mean, std) from the writer's seed and the tensor's index.
 * CR_E_INTERNAL past the tensor limit, CR_E_NOMEM, the writer's errors. */
cr_status_t rn_synth_vision_add(rn_synth_vision_t *s, const char *name, cr_type_t type,
                                uint32_t n_dims, const uint64_t *ne, double mean, double std,
                                cr_err_t *err);

#endif
