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
 * Owns the projector and the cache. Not thread-safe (the engine's thread). */
#ifndef RN_VISION_H
#define RN_VISION_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"

#define RN_VISION_CACHE_BYTES (64u << 20) /* embeddings kept per runner */
#define RN_VISION_CACHE_MAX 64            /* images kept, at most */

typedef struct rn_vision rn_vision_t;

/* One image of a request: its file bytes and their digest. */
typedef struct rn_vision_image {
    uint8_t digest[32]; /* SHA-256 of bytes */
    uint8_t *bytes;     /* owned (rn_vision_image_free) */
    size_t len;
} rn_vision_image_t;

/* Loads the projector at path on be (borrowed, must outlive the vision;
 * the runner's host instance). text_dim: the text model's embedding
 * length, which the projector's output must match (CR_E_INVALID
 * otherwise). On success *out is owned by the caller: free with
 * rn_vision_destroy. Errors as rn_clip_load. */
cr_status_t rn_vision_new(const char *path, be_backend_t *be, int text_dim,
                          rn_vision_t **out, cr_err_t *err);

void rn_vision_destroy(rn_vision_t **self_p);

/* Tokens one image takes in a prompt. */
int rn_vision_image_tokens(const rn_vision_t *v);

/* How the text model reads an image (clip.h): its tokens attend to each
 * other both ways (gemma3), and the control token texts around them ("" for
 * none). Borrowed strings, valid while v lives. */
bool rn_vision_non_causal(const rn_vision_t *v);
const char *rn_vision_image_begin(const rn_vision_t *v);
const char *rn_vision_image_end(const rn_vision_t *v);

/* Bytes the projector's weights take. */
uint64_t rn_vision_weight_bytes(const rn_vision_t *v);

/* Decodes a request's base64 image into *out (free with
 * rn_vision_image_free) and hashes it. CR_E_INVALID for bad base64,
 * CR_E_NOMEM. Does not decode the picture (rn_vision_embed does). */
cr_status_t rn_vision_image_load(const char *b64, rn_vision_image_t *out, cr_err_t *err);

void rn_vision_image_free(rn_vision_image_t *img);

/* The image's rn_vision_image_tokens ids, all negative, into ids. */
void rn_vision_token_ids(const rn_vision_t *v, const rn_vision_image_t *img, int32_t *ids);

/* The image's embeddings [tokens][text_dim] into out (caller-owned): from
 * the cache, or decoded (CORRAL_MAX_IMAGE_PIXELS applies), preprocessed and
 * encoded, then cached. Errors are the client's image: CR_E_INVALID with a
 * message that says what is wrong ("image 2: truncated PNG image: ...");
 * index names it in the message. CR_E_NOMEM, backend errors. */
cr_status_t rn_vision_embed(rn_vision_t *v, const rn_vision_image_t *img, size_t index,
                            float *out, cr_err_t *err);

/* Images encoded, and served from the cache, since load. */
void rn_vision_counts(const rn_vision_t *v, int64_t *encoded, int64_t *cache_hits);

#endif
