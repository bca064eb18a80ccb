/* vision.c: request images -> embeddings, with a bounded cache (see
 * vision.h). */
#include "lib/prelude.h"
#include "services/runner/vision/vision.h"

#include <openssl/sha.h>

#include "lib/base64.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"

typedef struct entry {
    uint8_t digest[32];
    float *rows;   /* [tokens][dim]; NULL: an empty entry */
    int64_t used;  /* clock at its last use (LRU) */
} entry_t;

struct rn_vision {
    rn_clip_t *clip;
    int n_tok, dim;
    float *pixels; /* [3][S][S], reused */
    entry_t cache[RN_VISION_CACHE_MAX];
    int n_cache;   /* entries the byte budget allows */
    int64_t clock, encoded, hits;
};

cr_status_t rn_vision_new(const char *path, be_backend_t *be, int text_dim,
                          rn_vision_t **out, cr_err_t *err)
{
    *out = NULL;
    rn_vision_t *v = calloc(1, sizeof *v);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = rn_clip_load(path, be, &v->clip, err);
    if (st) {
        cr_err_wrap(err, "%s", path);
        free(v);
        return st;
    }
    const rn_clip_hparams_t *hp = rn_clip_hparams(v->clip);
    v->n_tok = hp->n_patches;
    v->dim = hp->n_embd;
    if (v->dim != text_dim) {
        st = cr_err_set(err, CR_E_INVALID, "%s: the projector's embeddings are %d wide, "
                        "the text model's %d", path, v->dim, text_dim);
        rn_vision_destroy(&v);
        return st;
    }
    size_t entry_bytes = (size_t)v->n_tok * v->dim * sizeof(float);
    size_t n = RN_VISION_CACHE_BYTES / (entry_bytes ? entry_bytes : 1);
    v->n_cache = (int)CR_MAX(1, CR_MIN(n, (size_t)RN_VISION_CACHE_MAX));
    v->pixels = malloc(3 * (size_t)hp->image_size * hp->image_size * sizeof(float));
    if (!v->pixels) {
        rn_vision_destroy(&v);
        return cr_err_set(err, CR_E_NOMEM, "out of memory for the image buffer");
    }
    *out = v;
    return CR_OK;
}

void rn_vision_destroy(rn_vision_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_vision_t *v = *self_p;
    for (int i = 0; i < RN_VISION_CACHE_MAX; i++)
        free(v->cache[i].rows);
    free(v->pixels);
    rn_clip_destroy(&v->clip);
    free(v);
    *self_p = NULL;
}

int rn_vision_image_tokens(const rn_vision_t *v) { return v->n_tok; }

bool rn_vision_non_causal(const rn_vision_t *v) { return rn_clip_hparams(v->clip)->non_causal; }

const char *rn_vision_image_begin(const rn_vision_t *v)
{
    return rn_clip_hparams(v->clip)->img_beg;
}

const char *rn_vision_image_end(const rn_vision_t *v) { return rn_clip_hparams(v->clip)->img_end; }

uint64_t rn_vision_weight_bytes(const rn_vision_t *v)
{
    return rn_clip_weight_bytes(v->clip);
}

cr_status_t rn_vision_image_load(const char *b64, rn_vision_image_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    cr_status_t st = cr_base64_decode(b64 ? b64 : "", b64 ? strlen(b64) : 0, &out->bytes,
                                      &out->len, err);
    if (st)
        return st;
    SHA256(out->bytes, out->len, out->digest);
    return CR_OK;
}

void rn_vision_image_free(rn_vision_image_t *img)
{
    if (!img)
        return;
    free(img->bytes);
    memset(img, 0, sizeof *img);
}

void rn_vision_token_ids(const rn_vision_t *v, const rn_vision_image_t *img, int32_t *ids)
{
    uint32_t h = (uint32_t)img->digest[0] << 24 | (uint32_t)img->digest[1] << 16 |
                 (uint32_t)img->digest[2] << 8 | img->digest[3];
    for (int k = 0; k < v->n_tok; k++)
        ids[k] = -1 - (int32_t)((h + (uint32_t)k) & 0x3fffffffu);
}

/* The entry to overwrite: an empty one, else the least recently used. */
static entry_t *victim(rn_vision_t *v)
{
    entry_t *best = &v->cache[0];
    for (int i = 0; i < v->n_cache; i++) {
        entry_t *e = &v->cache[i];
        if (!e->rows)
            return e;
        if (e->used < best->used)
            best = e;
    }
    return best;
}

cr_status_t rn_vision_embed(rn_vision_t *v, const rn_vision_image_t *img, size_t index,
                            float *out, cr_err_t *err)
{
    size_t bytes = (size_t)v->n_tok * v->dim * sizeof(float);
    for (int i = 0; i < v->n_cache; i++) {
        entry_t *e = &v->cache[i];
        if (e->rows && !memcmp(e->digest, img->digest, sizeof e->digest)) {
            memcpy(out, e->rows, bytes);
            e->used = ++v->clock;
            v->hits++;
            return CR_OK;
        }
    }
    rn_image_t *im = NULL;
    cr_status_t st = rn_image_decode(img->bytes, img->len, rn_image_max_pixels(), &im, err);
    if (st && st != CR_E_NOMEM) {
        /* Whatever is wrong with a client's image is a bad request. */
        cr_err_wrap(err, "image %zu", index);
        if (err)
            err->status = CR_E_INVALID;
        return CR_E_INVALID;
    }
    if (!st)
        st = rn_clip_preprocess(v->clip, im, v->pixels, err);
    rn_image_destroy(&im);
    if (!st)
        st = rn_clip_encode(v->clip, v->pixels, out, err);
    if (st)
        return st;
    v->encoded++;
    entry_t *e = victim(v);
    if (!e->rows)
        e->rows = malloc(bytes);
    if (e->rows) { /* no room: simply not cached */
        memcpy(e->rows, out, bytes);
        memcpy(e->digest, img->digest, sizeof e->digest);
        e->used = ++v->clock;
    }
    return CR_OK;
}

void rn_vision_counts(const rn_vision_t *v, int64_t *encoded, int64_t *cache_hits)
{
    *encoded = v->encoded;
    *cache_hits = v->hits;
}
