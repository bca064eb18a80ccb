/* vision.h: what the engine needs to see: the model's projector (clip.h),
 * a request's images turned into embeddings, and a bounded cache of those
 * embeddings by content hash (a conversation that sends the same image
 * again does not encode it again).
 *
 * An image's tokens in a prompt are negative ids (rn_ctx_span_t.embd):
 * ids derived from its SHA-256, so the slots' cached-prefix comparison
 * tells two images apart (two different images share ids only if 30 bits
 * of their digests collide) and the same image matches itself.
 *
 * Pixtral's and qwen2.5-vl's images take as many tokens as their size
 * gives (pixtral.h, qwen2vl.h), so a request's images are measured before
 * its prompt is tokenized.
 *
 * Owns the projector and the cache. Not thread-safe (the engine's thread). */
#ifndef RN_VISION_H
#define RN_VISION_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"
#include "services/runner/text/tokenizer.h"

#define RN_VISION_CACHE_BYTES (64u << 20) /* embeddings kept per runner */
#define RN_VISION_CACHE_MAX 64            /* images kept, at most */

typedef struct rn_vision rn_vision_t;

/* One image of a request: its file bytes, their digest and, once
 * measured, the ids it takes in a prompt. */
typedef struct rn_vision_image {
    uint8_t digest[32]; /* SHA-256 of bytes */
    uint8_t *bytes;     /* owned (rn_vision_image_free) */
    size_t len;
    int n_rows;         /* embedding rows (negative ids); set by measure */
    int n_ids;          /* n_rows plus the family's text ids around them */
    int nx, ny;         /* a clip tower's grid of rows (n_rows = nx * ny,
                           rows of nx: M-RoPE positions); 0 for Pixtral */
} rn_vision_image_t;

/* Loads the projector at path on be (borrowed, must outlive the vision;
 * the runner's host instance): a llava-style, gemma3 or qwen2.5-vl one
 * (clip.h, proj_gemma3.h, qwen2vl.h) or a Pixtral one (pixtral.h); other projector types are
 * CR_E_UNSUPPORTED "projector type 'X' is not supported yet". tok
 * (borrowed for the call): the text model's, for the text a family puts
 * around each image (Pixtral: "[IMG_END]" after it; qwen2.5-vl:
 * "<|vision_start|>" before, "<|vision_end|>" after; special tokens
 * parsed, each marker on its own, as libmtmd adds them; gemma3:
 * <start_of_image>, <end_of_image>, which must be one token each, else
 * CR_E_INVALID). path may also be a model file with the tower inside
 * (Ollama's gemma3, mistral3 or qwen25vl: lib/vision_embedded.h; for
 * mistral3 [IMG_BREAK] must be one token of tok). text_dim: the
 * text model's embedding length, which the projector's output must match
 * (CR_E_INVALID otherwise). On success *out is owned by the caller: free
 * with rn_vision_destroy. Errors as rn_clip_load / rn_pixtral_load. */
cr_status_t rn_vision_new(const char *path, be_backend_t *be, const rn_tokenizer_t *tok,
                          int text_dim, rn_vision_t **out, cr_err_t *err);

void rn_vision_destroy(rn_vision_t **self_p);

/* The projector's clip.projector_type ("mlp" when the key is absent, as
 * old llava files) into buf (cap bytes). Errors: the file's; CR_E_INVALID
 * for a file whose architecture is not "clip". */
cr_status_t rn_vision_projector_type(const char *path, char *buf, size_t cap, cr_err_t *err);

/* Tokens a fixed-size tower gives every image, or 0 when the count
 * follows the image's size (Pixtral, qwen2.5-vl): for log lines. */
int rn_vision_fixed_tokens(const rn_vision_t *v);

/* An image's tokens attend to each other both ways in the text model
 * (gemma3: clip.h's non_causal; llama.cpp decodes them non-causally). */
bool rn_vision_non_causal(const rn_vision_t *v);

/* Bytes the projector's weights take. */
uint64_t rn_vision_weight_bytes(const rn_vision_t *v);

/* Decodes a request's base64 image into *out (free with
 * rn_vision_image_free) and hashes it. CR_E_INVALID for bad base64,
 * CR_E_NOMEM. Does not decode the picture (measure and embed do). */
cr_status_t rn_vision_image_load(const char *b64, rn_vision_image_t *out, cr_err_t *err);

void rn_vision_image_free(rn_vision_image_t *img);

/* Sets img->n_rows, n_ids, nx, ny: fixed for a fixed-size tower; from the
 * cache or the decoded picture's size when it varies (the picture is
 * decoded to learn it, CORRAL_MAX_IMAGE_PIXELS applying). Errors are the
 * client's image, as rn_vision_embed's. */
cr_status_t rn_vision_image_measure(rn_vision_t *v, rn_vision_image_t *img, size_t index,
                                    cr_err_t *err);

/* The measured image's img->n_ids ids into ids: the family's text ids
 * before the image, n_rows negative ids (one per embedding row), then
 * its text ids after the image. */
void rn_vision_token_ids(const rn_vision_t *v, const rn_vision_image_t *img, int32_t *ids);

/* The measured image's embeddings [img->n_rows][text_dim] into out
 * (caller-owned): from the cache, or decoded (CORRAL_MAX_IMAGE_PIXELS
 * applies), preprocessed and encoded, then cached. Errors are the
 * client's image: CR_E_INVALID with a message that says what is wrong
 * ("image 2: truncated PNG image: ..."); index names it in the message.
 * CR_E_NOMEM, backend errors. */
cr_status_t rn_vision_embed(rn_vision_t *v, const rn_vision_image_t *img, size_t index,
                            float *out, cr_err_t *err);

/* Images encoded, and served from the cache, since load. */
void rn_vision_counts(const rn_vision_t *v, int64_t *encoded, int64_t *cache_hits);

#endif
