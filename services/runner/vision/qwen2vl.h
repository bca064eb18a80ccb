/* qwen2vl.h: the Qwen2.5-VL vision tower (llama.cpp's mmproj projector
 * type "qwen2.5vl_merger"), which clip.c hands a projector file of that
 * type to; also Qwen2-VL's ("qwen2vl_merger"), the same graph in
 * llama.cpp with LayerNorms (with biases) for the RMSNorms, an ungated
 * MLP (ffn_up -> quick GELU, or GELU with clip.use_gelu -> ffn_down) and
 * no window attention (no n_wa_pattern: every block full).
 *
 * Dynamic resolution: each image is resized (Pillow's bicubic, aspect
 * nearly kept, black padding) to sides that are multiples of 28 (patch
 * 14 x merge 2) with between 8 and 4096 merged patches' worth of pixels,
 * as mtmd's dyn_size preprocessor does; the tower then sees one row per
 * 14 x 14 patch, the two temporal conv kernels summed over the still
 * image (the reference adds two convolutions of the same frame), 2D
 * rotary positions (rows for the first quarter of each head's pairs,
 * columns for the second, ggml's "vision" rope), window attention
 * (112-pixel windows of merged patches) except in the full-attention
 * layers (every n_wa_pattern-th), RMSNorm and a SiLU-gated MLP, then the
 * merger: an RMSNorm, 2 x 2 neighbouring patches concatenated, mm.0 ->
 * GELU -> mm.2 into the text model's embedding. Output rows are the merged
 * grid in raster order. It follows llama.cpp's graph and inputs
 * (tools/mtmd/models/qwen2vl.cpp, clip.cpp's set-inputs for QWEN25VL) at
 * the reference commit.
 *
 * The same tower also loads from inside Ollama's qwen25vl model file
 * (lib/vision_embedded.h: its names and keys). Confirmed from Ollama's
 * convert_qwen25vl.go and model/models/qwen25vl (f63eea3d): no row is
 * reordered (neither converter permutes this tower's q/k; both rope it in
 * halves); the full-attention blocks come as a list (fullatt_block_indexes)
 * rather than llama.cpp's period; the window's side and the rope base are
 * keys. The preprocessing stays llama.cpp's, as for the mmproj (Ollama's
 * own smart resize has other pixel limits), with Ollama's CLIP mean/std.
 *
 * Owns its prepared weights and activation buffers; borrows the GGUF
 * mapping and the backend (both must outlive it). Not thread-safe. */
#ifndef RN_QWEN2VL_H
#define RN_QWEN2VL_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"

/* llama.cpp's limits for qwen2.5-vl (set_limit_image_tokens(8, 4096)):
 * merged patches per image. */
#define RN_QWEN2VL_MIN_TOKENS 8
#define RN_QWEN2VL_MAX_TOKENS 4096

typedef struct rn_clip_qwen2vl rn_clip_qwen2vl_t;

/* Reads the tower from g (borrowed, must outlive it) onto be (borrowed),
 * filling the shared fields of *hp (projector, patch_size, dim, n_heads,
 * head_dim, ffn, n_layers, eps, mean, std, proj_hidden, n_embd;
 * image_size and n_patches describe the largest image: a side of 28 x 64
 * pixels, RN_QWEN2VL_MAX_TOKENS tokens). On success *out is owned by the
 * caller: free with rn_clip_qwen2vl_destroy. Errors as rn_clip_load
 * (CR_E_INVALID naming the key or tensor, CR_E_UNSUPPORTED for a feature
 * this tower does not run, CR_E_NOMEM). */
cr_status_t rn_clip_qwen2vl_load(const cr_gguf_t *g, be_backend_t *be,
                                 rn_clip_hparams_t *hp, rn_clip_qwen2vl_t **out,
                                 cr_err_t *err);

/* The tower inside Ollama's qwen25vl model file g (which
 * lib/vision_embedded.h must have passed); otherwise as
 * rn_clip_qwen2vl_load (hp->projector becomes "qwen2.5vl_merger"). */
cr_status_t rn_clip_qwen2vl_load_ollama(const cr_gguf_t *g, be_backend_t *be,
                                        rn_clip_hparams_t *hp, rn_clip_qwen2vl_t **out,
                                        cr_err_t *err);

void rn_clip_qwen2vl_destroy(rn_clip_qwen2vl_t **self_p);

uint64_t rn_clip_qwen2vl_weight_bytes(const rn_clip_qwen2vl_t *q);

/* The size an image of w x h pixels is resized to and its merged grid
 * (mtmd's calc_size_preserved_ratio in its float steps). CR_E_INVALID for
 * a shape so elongated that it needs more than RN_QWEN2VL_MAX_TOKENS
 * (the reference would run it; its activations would not be bounded). */
cr_status_t rn_clip_qwen2vl_layout(const rn_clip_qwen2vl_t *q, int w, int h,
                                   rn_clip_layout_t *out, cr_err_t *err);

/* pixels [3][L.height][L.width] (caller-owned; L = the image's layout):
 * the image fitted and normalized. CR_E_NOMEM, CR_E_INVALID as the
 * layout. */
cr_status_t rn_clip_qwen2vl_preprocess(const rn_clip_qwen2vl_t *q, const rn_image_t *im,
                                       float *pixels, cr_err_t *err);

/* The tower over pixels [3][L->height][L->width] (host) into out
 * [L->nx * L->ny][n_embd] (host, caller-owned). Grows the activation
 * buffers to the largest image seen (CR_E_NOMEM when they do not fit);
 * backend errors. */
cr_status_t rn_clip_qwen2vl_encode(rn_clip_qwen2vl_t *q, const rn_clip_layout_t *L,
                                   const float *pixels, float *out, cr_err_t *err);

#endif
