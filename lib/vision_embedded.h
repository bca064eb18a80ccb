/* vision_embedded.h: whether a model GGUF carries, inside it, a vision
 * tower the runner runs (Ollama's single-file layout; today gemma3's:
 * gemma3.vision.* keys, the SigLIP tower's v.* tensors and the projector's
 * mm.mm_soft_emb_norm / mm.mm_input_projection), checked from the header
 * alone: every key the runner reads and every tensor it binds, present and
 * of the element count it expects.
 *
 * One answer for three services: the registry reports the vision
 * capability from it, the scheduler counts the tower's memory, and the
 * runner loads the tower only when it passes (its loader then checks the
 * same shapes again as it binds them). Reads the header; owns nothing. */
#ifndef CR_VISION_EMBEDDED_H
#define CR_VISION_EMBEDDED_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"

typedef struct cr_vision_embedded {
    int image_size, patch_size; /* pixels per side */
    int dim, ffn, n_heads, n_layers;
    int n_tokens;               /* tokens per image after pooling */
    int n_embd;                 /* the projection's output width */
    uint64_t tensor_bytes;      /* the tower's and projector's tensors */
} cr_vision_embedded_t;

/* CR_OK with *out (may be NULL) filled when g holds a complete tower;
 * CR_E_NOT_FOUND when it holds none (no <arch>.vision.block_count of a
 * family the runner runs); CR_E_INVALID naming the first missing or
 * misshapen key or tensor otherwise. */
cr_status_t cr_vision_embedded(const cr_gguf_t *g, cr_vision_embedded_t *out, cr_err_t *err);

#endif
