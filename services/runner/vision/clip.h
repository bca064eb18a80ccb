/* clip.h: a vision projector file (llama.cpp's "mmproj" GGUF, general.
 * architecture "clip") loaded beside a text model, and its forward pass:
 * normalized pixels in, one embedding per image token out, in the text
 * model's embedding space.
 *
 * Supported today: the llava-style tower (clip.projector_type "mlp"): a
 * CLIP ViT (patch embedding, optional class embedding, learned positions,
 * optional pre-LayerNorm, pre-norm blocks with bidirectional attention and
 * a GELU / quick-GELU / SiLU MLP) up to its second-to-last block, then the
 * two-layer MLP projector mm.0 -> GELU -> mm.2. Its preprocessing is a
 * fixed square: the image is fitted inside image_size x image_size with
 * Pillow's bicubic filter, centred on llava's pad colour, then normalized
 * by image_mean / image_std (preprocess.h). Also qwen2.5-vl's tower
 * ("qwen2.5vl_merger", and Qwen2-VL's "qwen2vl_merger", qwen2vl.h), whose
 * size depends on the image
 * (rn_clip_layout, rn_clip_encode_at).
 *
 * gemma3 (clip.projector_type "gemma3", or Ollama's gemma3 model file with
 * the tower inside) is dispatched to proj_gemma3.h; Ollama's qwen25vl
 * model file with the tower inside to qwen2vl.h. Other projector types
 * (pixtral has a file of its own, pixtral.h) are refused with
 * CR_E_UNSUPPORTED.
 *
 * The tower runs through the backend interface (backend.h); buffers are
 * allocated once at load, so encoding allocates nothing. It follows
 * llama.cpp's graph (tools/mtmd/models/llava.cpp at the reference commit),
 * including where it puts the class token: after the patches, at position
 * n_patches, with the projector reading rows 1..n_patches.
 *
 * Owns the mapping of the projector file and its prepared weights; not the
 * backend (borrowed) nor the text model. Not thread-safe. */
#ifndef RN_CLIP_H
#define RN_CLIP_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"
#include "services/runner/vision/image.h"

#define RN_CLIP_MAX_LAYERS 256
#define RN_CLIP_MAX_IMAGE_SIZE 2048 /* pixels per side */

typedef enum rn_clip_act {
    RN_CLIP_ACT_GELU_QUICK, /* clip.use_gelu and use_silu absent or false */
    RN_CLIP_ACT_GELU,       /* clip.use_gelu: tanh approximation */
    RN_CLIP_ACT_SILU,       /* clip.use_silu */
} rn_clip_act_t;

typedef struct rn_clip_hparams {
    char projector[32];   /* clip.projector_type: "mlp" */
    int image_size;       /* clip.vision.image_size: pixels per side */
    int patch_size;       /* clip.vision.patch_size: pixels per side */
    int n_side;           /* patches per side: image_size / patch_size */
    int n_patches;        /* image tokens the text model gets: n_side^2
                             (gemma3: the pooled grid's) */
    int n_pos;            /* positions in the tower: n_patches (+1 class;
                             gemma3: n_side^2 before pooling) */
    int dim;              /* clip.vision.embedding_length */
    int n_heads;          /* clip.vision.attention.head_count */
    int head_dim;         /* dim / n_heads */
    int ffn;              /* clip.vision.feed_forward_length */
    int n_layers;         /* clip.vision.block_count */
    int n_layers_run;     /* blocks run: n_layers - 1 (llava reads the
                             second-to-last block's output) */
    float eps;            /* clip.vision.attention.layer_norm_epsilon */
    float mean[3], std[3]; /* clip.vision.image_mean / image_std (RGB) */
    uint8_t pad_color[3]; /* letterbox colour (llava: 122, 116, 104) */
    rn_clip_act_t act;
    int proj_hidden;      /* rows of mm.0 */
    int n_embd;           /* rows of the last projector matrix: the text
                             model's embedding length */
    bool dynamic;         /* size per image (rn_clip_layout; qwen2.5-vl):
                             image_size x image_size and n_patches are then
                             the largest image's pixels and tokens */
    /* How the text model reads an image (gemma3; false and "" for llava): */
    bool non_causal;      /* an image's tokens attend to each other both
                             ways (llama.cpp decodes them non-causally) */
    char img_beg[32];     /* control token text before an image's tokens */
    char img_end[32];     /* and after them */
} rn_clip_hparams_t;

/* What one image becomes: the pixels the tower reads and its grid of
 * tokens. Fixed-size towers: image_size x image_size and n_side x n_side;
 * dynamic ones (qwen2.5-vl) depend on the image. */
typedef struct rn_clip_layout {
    int width, height; /* pixels after resizing */
    int nx, ny;        /* tokens per row, rows: nx * ny tokens */
} rn_clip_layout_t;

typedef struct rn_clip rn_clip_t;

/* Loads the projector at path and prepares its weights on be (borrowed;
 * must outlive the clip; it needs the optional ops layernorm, add_rows,
 * gelu and, for quick-GELU towers, gelu_quick). On success *out is owned
 * by the caller: free with rn_clip_destroy. Errors: CR_E_IO / CR_E_CORRUPT
 * / CR_E_TRUNCATED from the file, CR_E_INVALID for a file that is not a
 * vision projector or has inconsistent shapes (message names the key or
 * tensor), CR_E_UNSUPPORTED for a projector type or feature this tower
 * does not run, CR_E_NOMEM. */
cr_status_t rn_clip_load(const char *path, be_backend_t *be, rn_clip_t **out,
                         cr_err_t *err);

void rn_clip_destroy(rn_clip_t **self_p);

/* Borrowed; valid while the clip lives. */
const rn_clip_hparams_t *rn_clip_hparams(const rn_clip_t *c);

/* Bytes of weights the file maps (for memory reports). */
uint64_t rn_clip_weight_bytes(const rn_clip_t *c);

/* The layout of an image of w x h pixels (see rn_clip_layout_t).
 * CR_E_INVALID when a dynamic tower cannot take it (a shape so elongated
 * that it needs more tokens than the tower's limit). */
cr_status_t rn_clip_layout(const rn_clip_t *c, int w, int h, rn_clip_layout_t *out,
                           cr_err_t *err);

/* Fills pixels [3][S][S] (S = image_size, planes R, G, B; caller-owned)
 * with im fitted, padded and normalized as the projector's preprocessing
 * says (preprocess.h); dynamic towers: [3][height][width] of im's layout.
 * CR_E_NOMEM; CR_E_INVALID as rn_clip_layout. */
cr_status_t rn_clip_preprocess(const rn_clip_t *c, const rn_image_t *im, float *pixels,
                               cr_err_t *err);

/* Runs the tower and projector over pixels [3][S][S] (host) and writes
 * out [n_patches][n_embd] (host, caller-owned): the image's embeddings as
 * the text model receives them, one row per image token. Errors only from
 * the backend (be_check): CR_E_NOMEM, CR_E_INTERNAL. */
cr_status_t rn_clip_encode(rn_clip_t *c, const float *pixels, float *out, cr_err_t *err);

/* rn_clip_encode of an image of layout L (from rn_clip_layout):
 * pixels [3][L->height][L->width], out [L->nx * L->ny][n_embd]. Dynamic
 * towers also CR_E_NOMEM when the activations for this size do not fit.
 * For a fixed-size tower L must be its one layout. */
cr_status_t rn_clip_encode_at(rn_clip_t *c, const rn_clip_layout_t *L, const float *pixels,
                              float *out, cr_err_t *err);

#endif
