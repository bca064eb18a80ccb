/* proj_gemma3.h: gemma3's vision side: the SigLIP tower (siglip.h), then
 * gemma3's projector: the n_side x n_side patch grid average-pooled in
 * merge x merge squares (64x64 -> 16x16 = 256 tokens for gemma3's 896 px
 * images), an RMS norm ("soft embedding norm", weight as stored), and the
 * input projection into the text model's embedding space.
 *
 * Found in llama.cpp's mmproj (clip.projector_type "gemma3";
 * mm.soft_emb_norm.weight, mm.input_projection.weight; merge from
 * clip.vision.projector.scale_factor, default 4) or inside Ollama's gemma3
 * model file (gemma3.vision.* keys; mm.mm_soft_emb_norm.weight,
 * mm.mm_input_projection.weight; merge from the tokens per image,
 * gemma3.mm.tokens_per_image or gemma3.mm_tokens_per_image, default 256).
 * Both store the projection as ne {n_embd, dim} (x W, not W x): it is
 * transposed once at load.
 *
 * Preprocessing as llama.cpp's for gemma3: the image fitted inside
 * image_size x image_size (aspect kept, black padding, centred) with
 * Pillow's bilinear filter, then (v / 255 - mean) / std (the mmproj's
 * image_mean / image_std; 0.5 each in Ollama's file, as Ollama uses).
 *
 * In the text model an image is <start_of_image>, its tokens,
 * <end_of_image>, and its tokens attend to each other both ways (llama.cpp
 * decodes a gemma3 image non-causally); the engine does that part.
 *
 * Borrows the GGUF and the backend; owns the tower, the transposed
 * projection and its buffers. Not thread-safe. */
#ifndef RN_PROJ_GEMMA3_H
#define RN_PROJ_GEMMA3_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"
#include "services/runner/vision/image.h"
#include "services/runner/vision/siglip.h"

typedef struct rn_gemma3v rn_gemma3v_t;

typedef struct rn_gemma3v_info {
    rn_siglip_hparams_t tower;
    int merge;           /* pooling square's side, in patches */
    int n_tokens;        /* (n_side / merge)^2: tokens per image */
    int n_embd;          /* the text model's embedding length */
    float mean[3], std[3];
} rn_gemma3v_info_t;

/* Whether g holds gemma3's vision side: an mmproj of projector type
 * "gemma3" (*layout RN_SIGLIP_MMPROJ) or a gemma3 model file with
 * gemma3.vision.block_count (RN_SIGLIP_OLLAMA). */
bool rn_gemma3v_detect(const cr_gguf_t *g, rn_siglip_layout_t *layout);

/* Loads it from g (borrowed; must outlive it) onto be (borrowed). On
 * success *out is owned by the caller: free with rn_gemma3v_destroy.
 * Errors as rn_siglip_load, and CR_E_INVALID for a pooling that does not
 * divide the grid or a projection whose shape does not match the tower. */
cr_status_t rn_gemma3v_load(const cr_gguf_t *g, be_backend_t *be, rn_gemma3v_t **out,
                            cr_err_t *err);

void rn_gemma3v_destroy(rn_gemma3v_t **self_p);

/* Borrowed; valid while it lives. */
const rn_gemma3v_info_t *rn_gemma3v_info(const rn_gemma3v_t *m);

uint64_t rn_gemma3v_weight_bytes(const rn_gemma3v_t *m);

/* Describes it in clip.h's terms (projector "gemma3", n_patches the tokens
 * per image, n_pos the tower's positions, non_causal, the image's wrapping
 * tokens) into *hp. */
struct rn_clip_hparams;
void rn_gemma3v_describe(const rn_gemma3v_t *m, struct rn_clip_hparams *hp);

/* Fills pixels [3][S][S] (caller-owned) from im as the preprocessing above
 * says. CR_E_NOMEM only. */
cr_status_t rn_gemma3v_preprocess(const rn_gemma3v_t *m, const rn_image_t *im, float *pixels,
                                  cr_err_t *err);

/* Tower and projector over pixels [3][S][S]: out [n_tokens][n_embd]
 * (host, caller-owned), token (y, x) of the pooled grid at row
 * y * (n_side / merge) + x. Errors only from the backend. */
cr_status_t rn_gemma3v_encode(rn_gemma3v_t *m, const float *pixels, float *out,
                              cr_err_t *err);

#endif
