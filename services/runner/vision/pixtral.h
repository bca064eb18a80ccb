/* pixtral.h: the Pixtral vision tower of Mistral Small 3.1/3.2 (mistral3)
 * and Pixtral 12B: llama.cpp's mmproj with clip.projector_type "pixtral",
 * loaded beside the text model, and its forward pass.
 *
 * Variable resolution: an image keeps its aspect ratio; its size is
 * rounded to the grid of patch_size * spatial_merge_size pixels and held
 * between 8 and 1024 image tokens' worth of pixels (llama.cpp's limits for
 * this projector), then fitted into that box with Pillow's bicubic filter
 * on black (PAD_CEIL) and normalized. The tower has no class token and no
 * learned positions: 2D rotary positions (the first half of each head
 * rotates by the patch's row, the second half by its column at the odd
 * frequencies), RMSNorm, a gated FFN (SiLU, or GELU with clip.use_gelu),
 * all blocks run. Then, when the file has them (Mistral Small), an
 * RMSNorm (mm.input_norm) and the patch merger: each 2x2 block of
 * patches concatenated (channel-major, then row, then column, as
 * torch's unfold) and projected back to the tower's width
 * (mm.patch_merger). Then mm.1 -> GELU -> mm.2 into the text embedding,
 * and the [IMG_BREAK] embedding (v.token_embd.img_break) after every row
 * of image tokens but the last, as llama.cpp's graph lays them out. The
 * text token [IMG_END] after the image is the caller's (vision.c).
 *
 * The tower runs through the backend interface (backend.h); buffers are
 * allocated once at load for the largest image, so encoding allocates
 * nothing. It follows llama.cpp's graph (tools/mtmd/models/pixtral.cpp at
 * the reference commit). Owns the mapping of the projector file and its
 * prepared weights; not the backend. Not thread-safe.
 *
 * The same tower also loads from inside Ollama's mistral3 model file
 * (lib/vision_embedded.h: its key and tensor names). Two things differ
 * there beyond names, both confirmed from Ollama's source
 * (convert/convert_mistral.go, model/models/mistral3 at f63eea3d): its
 * converter keeps the tower's q/k rows in Hugging Face's order (each
 * head's rotary halves, i and i + hd/2, as rotate_half pairs them) where
 * llama.cpp's permutes them into adjacent pairs (2i, 2i + 1), so the
 * loader reorders those rows into llama.cpp's order once; and the file
 * has no [IMG_BREAK] embedding of its own: Ollama feeds the text token,
 * whose embedding is the text model's token_embd row (the row llama.cpp's
 * converter copies into v.token_embd.img_break), so that row is read,
 * dequantized, at load. Ollama hard-codes the break, end and image token
 * ids (12, 13, 10); corral looks [IMG_BREAK] up in the vocabulary. The
 * preprocessing stays llama.cpp's (inferred equivalent for the tower's
 * numbers; Ollama's own resizes differently: longest edge 1540,
 * bilinear), with Ollama's hard-coded CLIP mean and std. */
#ifndef RN_PIXTRAL_H
#define RN_PIXTRAL_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"
#include "services/runner/vision/image.h"

#define RN_PIXTRAL_MIN_TOKENS 8    /* llama.cpp's image token limits */
#define RN_PIXTRAL_MAX_TOKENS 1024

typedef struct rn_pixtral_hparams {
    int patch_size;     /* clip.vision.patch_size: pixels per side */
    int n_merge;        /* clip.vision.spatial_merge_size: patches per side
                           of a merged token (1: no merger) */
    int dim;            /* clip.vision.embedding_length */
    int n_heads;        /* clip.vision.attention.head_count */
    int head_dim;       /* dim / n_heads (a multiple of 4: two rotary halves) */
    int ffn;            /* clip.vision.feed_forward_length */
    int n_layers;       /* clip.vision.block_count: all run */
    float eps;          /* clip.vision.attention.layer_norm_epsilon */
    float rope_theta;   /* 10000, as llama.cpp fixes it (Ollama's file:
                           mistral3.vision.rope.freq_base) */
    float mean[3], std[3]; /* clip.vision.image_mean / image_std (RGB) */
    bool gelu;          /* gate activation: GELU (clip.use_gelu), else SiLU */
    int64_t min_pixels; /* RN_PIXTRAL_MIN_TOKENS tokens' pixels */
    int64_t max_pixels; /* RN_PIXTRAL_MAX_TOKENS tokens' pixels */
    int max_patches;    /* patches the buffers hold: max_pixels / P^2 */
    int proj_hidden;    /* rows of mm.1 */
    int n_embd;         /* rows of mm.2: the text model's embedding length */
    bool has_merger;    /* mm.patch_merger present */
    bool has_break;     /* v.token_embd.img_break present (Ollama's file:
                           always, from token_embd) */
    bool ollama;        /* loaded from Ollama's single file */
} rn_pixtral_hparams_t;

typedef struct rn_pixtral rn_pixtral_t;

/* Loads the projector at path (clip.projector_type "pixtral") and
 * prepares its weights on be (borrowed; must outlive the tower; it needs
 * the optional ops add_rows, gelu, rope_yarn and, for GELU-gated towers,
 * geglu). On success *out is owned by the caller: free with
 * rn_pixtral_destroy. Errors: the file's (CR_E_IO, CR_E_CORRUPT,
 * CR_E_TRUNCATED), CR_E_INVALID for missing keys or tensors or
 * inconsistent shapes (the message names them), CR_E_UNSUPPORTED for
 * another projector type or a feature this tower does not run,
 * CR_E_NOMEM. */
cr_status_t rn_pixtral_load(const char *path, be_backend_t *be, rn_pixtral_t **out,
                            cr_err_t *err);

/* The tower inside Ollama's mistral3 model file at path (which
 * lib/vision_embedded.h must have passed), its [IMG_BREAK] row the text
 * model's token_embd row break_id (the vocabulary's [IMG_BREAK]).
 * Otherwise as rn_pixtral_load: CR_E_INVALID names a missing or misshapen
 * key or tensor or a break_id out of the vocabulary. */
cr_status_t rn_pixtral_load_ollama(const char *path, be_backend_t *be, int32_t break_id,
                                   rn_pixtral_t **out, cr_err_t *err);

void rn_pixtral_destroy(rn_pixtral_t **self_p);

/* Borrowed; valid while the tower lives. */
const rn_pixtral_hparams_t *rn_pixtral_hparams(const rn_pixtral_t *p);

/* Bytes of weights the file maps. */
uint64_t rn_pixtral_weight_bytes(const rn_pixtral_t *p);

/* The size an image of width x height is resized to (llama.cpp's
 * calc_size_preserved_ratio: multiples of patch_size * n_merge, area
 * within min_pixels..max_pixels), and the embedding rows it yields
 * (tokens plus one [IMG_BREAK] per row but the last). CR_E_INVALID when
 * the rounded grid holds more than max_patches patches (only an extreme
 * aspect ratio gets there: the area limit does not bind a side that is
 * rounded up to one grid cell). */
cr_status_t rn_pixtral_fit(const rn_pixtral_t *p, int width, int height, int *out_w,
                           int *out_h, int *n_rows, cr_err_t *err);

/* Fills pixels [3][h][w] (w x h from rn_pixtral_fit; caller-owned, at
 * least 3 * max_patches * P^2 floats) with im resized, padded and
 * normalized; *out_w, *out_h get the size. Errors as rn_pixtral_fit,
 * CR_E_NOMEM. */
cr_status_t rn_pixtral_preprocess(const rn_pixtral_t *p, const rn_image_t *im, float *pixels,
                                  int *out_w, int *out_h, cr_err_t *err);

/* Runs the tower over pixels [3][h][w] (host; w, h from rn_pixtral_fit)
 * and writes out [n_rows][n_embd] (host, caller-owned): the image's rows
 * as the text model receives them, [IMG_BREAK] rows included. Errors:
 * CR_E_INVALID for a size rn_pixtral_fit does not give; the backend's
 * (be_check): CR_E_NOMEM, CR_E_INTERNAL. */
cr_status_t rn_pixtral_encode(rn_pixtral_t *p, const float *pixels, int w, int h, float *out,
                              cr_err_t *err);

#endif
