/* lora.h: LoRA adapters applied to a loaded model at run time.
 *
 * rn_lora_load reads llama.cpp GGUF LoRA adapters (lib/lora.h checks each
 * against the model's GGUF) and prepares each adapted weight's A [r][in]
 * and B [out][r] on the backend instance of its layer. The forward pass
 * (forward.c) then computes, after each adapted projection y = W x,
 *   y += scale * B (A x)
 * through the backend's matmul, scale and add ops, for every adapter in
 * the order given: the base weights are never modified, so quantized bases
 * work and several adapters stack. This is llama.cpp's un-merged LoRA
 * (llama_adapter_lora applied with scale 1, as Ollama loads adapters).
 *
 * Owns the adapters' mappings and prepared copies. Borrows the model,
 * which must outlive it. */
#ifndef RN_LORA_H
#define RN_LORA_H

#include "lib/prelude.h"
#include "lib/lora.h"
#include "lib/status.h"
#include "services/runner/model/model.h"

typedef struct rn_lora rn_lora_t;

/* One adapter's matrices for one weight. */
typedef struct rn_lora_mat {
    be_weight_t a;    /* [r][in] */
    be_weight_t b;    /* [out][r] */
    float scale;      /* alpha / r */
    be_backend_t *be; /* the instance a and b are prepared on */
} rn_lora_mat_t;

/* Loads the n adapter files (1..CR_LORA_MAX_ADAPTERS) for model m.
 * On success *out is owned by the caller: free with rn_lora_destroy.
 * Errors: CR_E_IO / CR_E_CORRUPT for a file that is not valid GGUF,
 * CR_E_INVALID for an adapter that does not fit the model (lib/lora.h,
 * prefixed with the path) or too many adapters, CR_E_UNSUPPORTED for a
 * tensor type the layer's backend cannot multiply, or a scale != 1 on a
 * backend without the scale op; CR_E_NOMEM. */
cr_status_t rn_lora_load(const rn_model_t *m, const char *const *paths, size_t n,
                         rn_lora_t **out, cr_err_t *err);

void rn_lora_destroy(rn_lora_t **self_p);

/* The adapters' matrices for weight `target` of layer l, in adapter order,
 * and their number in *n (0: the weight is not adapted). Borrowed; valid
 * until rn_lora_destroy. */
const rn_lora_mat_t *rn_lora_of(const rn_lora_t *lo, int l, cr_lora_target_t target,
                                size_t *n);

/* The largest rank of any matrix (sizes the forward pass's scratch). */
int rn_lora_max_rank(const rn_lora_t *lo);

/* Number of adapters; bytes of their tensor data. */
size_t rn_lora_count(const rn_lora_t *lo);
uint64_t rn_lora_bytes(const rn_lora_t *lo);

#endif
