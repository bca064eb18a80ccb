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
    float *rows;   /* [n_tok][dim]; NULL: an empty entry */
    int n_tok, nx, ny;
    int64_t used;  /* clock at its last use (LRU) */
} entry_t;

struct rn_vision {
    rn_clip_t *clip;
    int n_tok, dim;  /* n_tok: fixed towers' tokens, dynamic ones' most */
    bool dynamic;
    float *pixels;   /* [3][H][W] of the largest image so far, reused */
    size_t pixels_cap; /* floats */
    entry_t cache[RN_VISION_CACHE_MAX];
    size_t cache_bytes;
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
    v->dynamic = hp->dynamic;
    if (v->dim != text_dim) {
        st = cr_err_set(err, CR_E_INVALID, "%s: the projector's embeddings are %d wide, "
                        "the text model's %d", path, v->dim, text_dim);
        rn_vision_destroy(&v);
        return st;
    }
    if (!v->dynamic) { /* dynamic towers: sized by the first image */
        v->pixels_cap = 3 * (size_t)hp->image_size * hp->image_size;
        if (!(v->pixels = malloc(v->pixels_cap * sizeof(float)))) {
            rn_vision_destroy(&v);
            return cr_err_set(err, CR_E_NOMEM, "out of memory for the image buffer");
        }
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

bool rn_vision_is_dynamic(const rn_vision_t *v) { return v->dynamic; }

const char *rn_vision_image_begin(const rn_vision_t *v)
{
    return v->dynamic ? "<|vision_start|>" : "";
}

const char *rn_vision_image_end(const rn_vision_t *v)
{
    return v->dynamic ? "<|vision_end|>" : "";
}

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
    rn_image_destroy(&img->decoded);
    memset(img, 0, sizeof *img);
}

static entry_t *lookup(rn_vision_t *v, const uint8_t digest[32])
{
    for (int i = 0; i < RN_VISION_CACHE_MAX; i++) {
        entry_t *e = &v->cache[i];
        if (e->rows && !memcmp(e->digest, digest, sizeof e->digest))
            return e;
    }
    return NULL;
}

/* Decodes img into img->decoded (once). A client's image that does not
 * decode is a bad request naming it. */
static cr_status_t decode(rn_vision_image_t *img, size_t index, cr_err_t *err)
{
    if (img->decoded)
        return CR_OK;
    cr_status_t st = rn_image_decode(img->bytes, img->len, rn_image_max_pixels(),
                                     &img->decoded, err);
    if (st && st != CR_E_NOMEM) {
        cr_err_wrap(err, "image %zu", index);
        if (err)
            err->status = CR_E_INVALID;
        return CR_E_INVALID;
    }
    return st;
}

cr_status_t rn_vision_image_prepare(rn_vision_t *v, rn_vision_image_t *img, size_t index,
                                    cr_err_t *err)
{
    const rn_clip_hparams_t *hp = rn_clip_hparams(v->clip);
    if (!v->dynamic) {
        img->nx = img->ny = hp->n_side;
        img->n_tok = v->n_tok;
        return CR_OK;
    }
    const entry_t *e = lookup(v, img->digest);
    if (e) {
        img->nx = e->nx, img->ny = e->ny, img->n_tok = e->n_tok;
        return CR_OK;
    }
    cr_status_t st = decode(img, index, err);
    if (st)
        return st;
    rn_clip_layout_t L;
    if ((st = rn_clip_layout(v->clip, img->decoded->width, img->decoded->height, &L, err))) {
        cr_err_wrap(err, "image %zu", index);
        return st;
    }
    img->nx = L.nx, img->ny = L.ny, img->n_tok = L.nx * L.ny;
    return CR_OK;
}

void rn_vision_token_ids(const rn_vision_t *v, const rn_vision_image_t *img, int32_t *ids)
{
    uint32_t h = (uint32_t)img->digest[0] << 24 | (uint32_t)img->digest[1] << 16 |
                 (uint32_t)img->digest[2] << 8 | img->digest[3];
    int n = img->n_tok > 0 ? img->n_tok : v->n_tok;
    for (int k = 0; k < n; k++)
        ids[k] = -1 - (int32_t)((h + (uint32_t)k) & 0x3fffffffu);
}

/* Room for bytes more in the cache: evicts the least recently used
 * entries until both the byte budget and a free entry allow it. NULL when
 * the embeddings alone are over the budget (then simply not cached). */
static entry_t *make_room(rn_vision_t *v, size_t bytes)
{
    if (bytes > RN_VISION_CACHE_BYTES)
        return NULL;
    for (;;) {
        entry_t *empty = NULL, *oldest = NULL;
        for (int i = 0; i < RN_VISION_CACHE_MAX; i++) {
            entry_t *e = &v->cache[i];
            if (!e->rows)
                empty = empty ? empty : e;
            else if (!oldest || e->used < oldest->used)
                oldest = e;
        }
        if (empty && v->cache_bytes + bytes <= RN_VISION_CACHE_BYTES)
            return empty;
        if (!oldest)
            return NULL;
        v->cache_bytes -= (size_t)oldest->n_tok * v->dim * sizeof(float);
        free(oldest->rows);
        oldest->rows = NULL;
    }
}

cr_status_t rn_vision_embed(rn_vision_t *v, const rn_vision_image_t *img, size_t index,
                            float *out, cr_err_t *err)
{
    entry_t *hit = lookup(v, img->digest);
    if (hit) {
        memcpy(out, hit->rows, (size_t)hit->n_tok * v->dim * sizeof(float));
        hit->used = ++v->clock;
        v->hits++;
        return CR_OK;
    }
    rn_image_t *own = NULL;
    const rn_image_t *im = img->decoded;
    cr_status_t st = CR_OK;
    if (!im) {
        rn_vision_image_t tmp = *img;
        tmp.decoded = NULL;
        st = decode(&tmp, index, err);
        im = own = tmp.decoded;
    }
    rn_clip_layout_t L;
    if (!st && (st = rn_clip_layout(v->clip, im->width, im->height, &L, err)))
        cr_err_wrap(err, "image %zu", index);
    size_t need = st ? 0 : 3 * (size_t)L.width * L.height;
    if (!st && need > v->pixels_cap) {
        float *p = realloc(v->pixels, need * sizeof(float));
        if (!p)
            st = cr_err_set(err, CR_E_NOMEM, "out of memory for the image buffer");
        else
            v->pixels = p, v->pixels_cap = need;
    }
    if (!st)
        st = rn_clip_preprocess(v->clip, im, v->pixels, err);
    rn_image_destroy(&own);
    if (!st)
        st = rn_clip_encode_at(v->clip, &L, v->pixels, out, err);
    if (st)
        return st;
    v->encoded++;
    int n_tok = L.nx * L.ny;
    size_t bytes = (size_t)n_tok * v->dim * sizeof(float);
    entry_t *e = make_room(v, bytes);
    if (e && (e->rows = malloc(bytes))) { /* no room: simply not cached */
        memcpy(e->rows, out, bytes);
        memcpy(e->digest, img->digest, sizeof e->digest);
        e->n_tok = n_tok, e->nx = L.nx, e->ny = L.ny;
        e->used = ++v->clock;
        v->cache_bytes += bytes;
    }
    return CR_OK;
}

void rn_vision_counts(const rn_vision_t *v, int64_t *encoded, int64_t *cache_hits)
{
    *encoded = v->encoded;
    *cache_hits = v->hits;
}
