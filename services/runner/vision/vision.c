/* vision.c: request images -> embeddings, with a bounded cache (see
 * vision.h). Dispatches between the towers by clip.projector_type. */
#include "lib/prelude.h"
#include "services/runner/vision/vision.h"

#include <openssl/sha.h>

#include "lib/base64.h"
#include "lib/gguf.h"
#include "lib/vision_embedded.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"
#include "services/runner/vision/pixtral.h"

#define AFFIX_MAX 16 /* text ids before or after an image (a marker's bytes, at worst) */
#define PROJ_QWEN25VL "qwen2.5vl_merger"
#define PROJ_QWEN2VL "qwen2vl_merger"

typedef struct entry {
    uint8_t digest[32];
    float *rows;   /* [n_rows][dim]; NULL: an empty entry */
    int n_rows, nx, ny;
    int64_t used;  /* clock at its last use (LRU) */
} entry_t;

struct rn_vision {
    rn_clip_t *clip;     /* one of these two */
    rn_pixtral_t *pix;
    int fixed_rows;      /* rows per image of a fixed-size tower, else 0 */
    int dim;
    char type[32];       /* clip.projector_type */
    int32_t prefix[AFFIX_MAX], suffix[AFFIX_MAX]; /* text ids around each image */
    int n_prefix, n_suffix;
    float *pixels;       /* the largest preprocessed image so far, reused */
    size_t pixels_cap;   /* floats */
    entry_t cache[RN_VISION_CACHE_MAX];
    size_t cache_bytes;  /* held by the cache's rows */
    int64_t clock, encoded, hits;
};

cr_status_t rn_vision_projector_type(const char *path, char *buf, size_t cap, cr_err_t *err)
{
    cr_gguf_t *g = NULL;
    cr_status_t st = cr_gguf_open(path, &g, err);
    if (st)
        return st;
    const char *arch = cr_gguf_arch(g);
    if (strcmp(arch, "clip"))
        st = cr_err_set(err, CR_E_INVALID, "not a vision projector: architecture is '%s', "
                        "expected 'clip'", *arch ? arch : "(none)");
    else if (!cr_gguf_get_strz(g, "clip.projector_type", buf, cap) &&
             !cr_gguf_get_strz(g, "clip.vision.projector_type", buf, cap))
        snprintf(buf, cap, "mlp"); /* old llava files */
    cr_gguf_close(&g);
    return st;
}

static cr_status_t control_id(const rn_tokenizer_t *tok, const char *text, int32_t *id,
                              int *n_out, cr_err_t *err);

/* A model file with its tower inside (Ollama's single file; the engine
 * checked it with lib/vision_embedded.h): the family's projector type
 * into v->type. */
static cr_status_t embedded_type(rn_vision_t *v, const char *path, cr_err_t *err)
{
    cr_gguf_t *g = NULL;
    cr_status_t st = cr_gguf_open(path, &g, err);
    cr_vision_embedded_t ve;
    if (!st)
        st = cr_vision_embedded(g, &ve, err);
    cr_gguf_close(&g);
    if (st)
        return st;
    const char *type = ve.family == CR_VISION_MISTRAL3   ? "pixtral"
                       : ve.family == CR_VISION_QWEN25VL ? PROJ_QWEN25VL
                                                         : "gemma3";
    snprintf(v->type, sizeof v->type, "%s", type);
    return CR_OK;
}

/* The tower for the file's projector type. tok: the text model's, for
 * Ollama's mistral3 (its [IMG_BREAK] row). */
static cr_status_t load_tower(rn_vision_t *v, const char *path, be_backend_t *be,
                              const rn_tokenizer_t *tok, cr_err_t *err)
{
    char *type = v->type;
    bool embedded = false;
    cr_status_t st = rn_vision_projector_type(path, type, sizeof v->type, err);
    if (st == CR_E_INVALID) {
        /* not a clip file: a model file with its tower inside */
        embedded = true;
        st = embedded_type(v, path, err);
    }
    if (st)
        return st;
    if (!strcmp(type, "mlp") || !strcmp(type, PROJ_QWEN25VL) || !strcmp(type, PROJ_QWEN2VL) ||
        !strcmp(type, "gemma3")) {
        if ((st = rn_clip_load(path, be, &v->clip, err)))
            return st;
        const rn_clip_hparams_t *hp = rn_clip_hparams(v->clip);
        v->fixed_rows = hp->dynamic ? 0 : hp->n_patches;
        v->dim = hp->n_embd;
        return CR_OK;
    }
    if (!strcmp(type, "pixtral")) {
        int32_t brk = -1;
        int n = 0;
        if (embedded && (st = control_id(tok, "[IMG_BREAK]", &brk, &n, err)))
            return st;
        if ((st = embedded ? rn_pixtral_load_ollama(path, be, brk, &v->pix, err)
                           : rn_pixtral_load(path, be, &v->pix, err)))
            return st;
        v->dim = rn_pixtral_hparams(v->pix)->n_embd;
        return CR_OK;
    }
    return cr_err_set(err, CR_E_UNSUPPORTED, "projector type '%s' is not supported yet "
                      "(supported: mlp, the llava-style projector; gemma3; pixtral; " PROJ_QWEN25VL "; "
                      PROJ_QWEN2VL ")", type);
}

/* marker tokenized on its own into ids (AFFIX_MAX), as libmtmd does:
 * special tokens parsed, without BOS. */
static cr_status_t marker_ids(const rn_tokenizer_t *tok, const char *marker, int32_t *ids,
                              int *n_out, cr_err_t *err)
{
    size_t n = 0;
    cr_status_t st = rn_tokenize(tok, marker, strlen(marker), false, true, ids, AFFIX_MAX, &n,
                                 err);
    if (st == CR_E_TOO_LARGE)
        return cr_err_set(err, CR_E_UNSUPPORTED, "the text model spells %s in %zu tokens "
                          "(at most %d)", marker, n, AFFIX_MAX);
    *n_out = (int)n;
    return st;
}

/* A control token the tower's family wraps images in (gemma3's
 * <start_of_image>): one id of the vocabulary, else CR_E_INVALID. */
static cr_status_t control_id(const rn_tokenizer_t *tok, const char *text, int32_t *id,
                              int *n_out, cr_err_t *err)
{
    int32_t ids[AFFIX_MAX];
    int n = 0;
    if (marker_ids(tok, text, ids, &n, NULL) || n != 1)
        return cr_err_set(err, CR_E_INVALID, "the projector wraps images in %s, which the "
                          "model's vocabulary lacks", text);
    *id = ids[0];
    *n_out = 1;
    return CR_OK;
}

/* The text around each image: Pixtral's [IMG_END] after it, qwen2.5-vl's
 * <|vision_start|> before and <|vision_end|> after. */
static cr_status_t load_affixes(rn_vision_t *v, const rn_tokenizer_t *tok, cr_err_t *err)
{
    if (v->pix)
        return marker_ids(tok, "[IMG_END]", v->suffix, &v->n_suffix, err);
    if (!strcmp(v->type, PROJ_QWEN25VL) || !strcmp(v->type, PROJ_QWEN2VL)) {
        cr_status_t st = marker_ids(tok, "<|vision_start|>", v->prefix, &v->n_prefix, err);
        return st ? st : marker_ids(tok, "<|vision_end|>", v->suffix, &v->n_suffix, err);
    }
    const rn_clip_hparams_t *hp = rn_clip_hparams(v->clip);
    cr_status_t st = CR_OK;
    if (*hp->img_beg)
        st = control_id(tok, hp->img_beg, v->prefix, &v->n_prefix, err);
    if (!st && *hp->img_end)
        st = control_id(tok, hp->img_end, v->suffix, &v->n_suffix, err);
    return st;
}

/* Room for floats pixels in v->pixels (kept: the largest image so far). */
static cr_status_t reserve_pixels(rn_vision_t *v, size_t floats, cr_err_t *err)
{
    if (floats <= v->pixels_cap)
        return CR_OK;
    float *p = realloc(v->pixels, floats * sizeof *p);
    if (!p)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for the image buffer");
    v->pixels = p;
    v->pixels_cap = floats;
    return CR_OK;
}

cr_status_t rn_vision_new(const char *path, be_backend_t *be, const rn_tokenizer_t *tok,
                          int text_dim, rn_vision_t **out, cr_err_t *err)
{
    *out = NULL;
    rn_vision_t *v = calloc(1, sizeof *v);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = load_tower(v, path, be, tok, err);
    if (st) {
        cr_err_wrap(err, "%s", path);
        rn_vision_destroy(&v);
        return st;
    }
    if (v->dim != text_dim) {
        st = cr_err_set(err, CR_E_INVALID, "%s: the projector's embeddings are %d wide, "
                        "the text model's %d", path, v->dim, text_dim);
        rn_vision_destroy(&v);
        return st;
    }
    if ((st = load_affixes(v, tok, err))) {
        rn_vision_destroy(&v);
        return st;
    }
    size_t n_px = 0; /* a dynamic clip tower's: sized by its first image */
    if (v->clip && !rn_clip_hparams(v->clip)->dynamic) {
        const rn_clip_hparams_t *hp = rn_clip_hparams(v->clip);
        n_px = 3 * (size_t)hp->image_size * hp->image_size;
    } else if (v->pix) {
        const rn_pixtral_hparams_t *hp = rn_pixtral_hparams(v->pix);
        n_px = 3 * (size_t)hp->max_patches * hp->patch_size * hp->patch_size;
    }
    if ((st = reserve_pixels(v, n_px, err))) {
        rn_vision_destroy(&v);
        return st;
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
    rn_pixtral_destroy(&v->pix);
    free(v);
    *self_p = NULL;
}

int rn_vision_fixed_tokens(const rn_vision_t *v) { return v->fixed_rows; }

bool rn_vision_non_causal(const rn_vision_t *v)
{
    return v->clip && rn_clip_hparams(v->clip)->non_causal;
}

uint64_t rn_vision_weight_bytes(const rn_vision_t *v)
{
    return v->clip ? rn_clip_weight_bytes(v->clip) : rn_pixtral_weight_bytes(v->pix);
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

static entry_t *cached(rn_vision_t *v, const rn_vision_image_t *img)
{
    for (int i = 0; i < RN_VISION_CACHE_MAX; i++) {
        entry_t *e = &v->cache[i];
        if (e->rows && !memcmp(e->digest, img->digest, sizeof e->digest))
            return e;
    }
    return NULL;
}

/* The client's image decoded; whatever is wrong with it is a bad request. */
static cr_status_t decode(const rn_vision_image_t *img, size_t index, rn_image_t **im,
                          cr_err_t *err)
{
    cr_status_t st = rn_image_decode(img->bytes, img->len, rn_image_max_pixels(), im, err);
    if (st && st != CR_E_NOMEM) {
        cr_err_wrap(err, "image %zu", index);
        if (err)
            err->status = CR_E_INVALID;
        return CR_E_INVALID;
    }
    return st;
}

cr_status_t rn_vision_image_measure(rn_vision_t *v, rn_vision_image_t *img, size_t index,
                                    cr_err_t *err)
{
    img->n_rows = v->fixed_rows;
    img->nx = img->ny = 0;
    if (img->n_rows) {
        rn_clip_layout_t L;
        rn_clip_layout(v->clip, 0, 0, &L, NULL); /* fixed: never fails */
        img->nx = L.nx, img->ny = L.ny;
    } else {
        const entry_t *e = cached(v, img);
        if (e) {
            img->n_rows = e->n_rows, img->nx = e->nx, img->ny = e->ny;
        } else {
            rn_image_t *im = NULL;
            cr_status_t st = decode(img, index, &im, err); /* names the image */
            if (st)
                return st;
            if (v->clip) {
                rn_clip_layout_t L;
                st = rn_clip_layout(v->clip, im->width, im->height, &L, err);
                if (!st)
                    img->nx = L.nx, img->ny = L.ny, img->n_rows = L.nx * L.ny;
            } else {
                int w, h;
                st = rn_pixtral_fit(v->pix, im->width, im->height, &w, &h, &img->n_rows, err);
            }
            rn_image_destroy(&im);
            if (st) {
                cr_err_wrap(err, "image %zu", index);
                return st;
            }
        }
    }
    img->n_ids = v->n_prefix + img->n_rows + v->n_suffix;
    return CR_OK;
}

void rn_vision_token_ids(const rn_vision_t *v, const rn_vision_image_t *img, int32_t *ids)
{
    uint32_t h = (uint32_t)img->digest[0] << 24 | (uint32_t)img->digest[1] << 16 |
                 (uint32_t)img->digest[2] << 8 | img->digest[3];
    memcpy(ids, v->prefix, (size_t)v->n_prefix * sizeof *ids);
    ids += v->n_prefix;
    for (int k = 0; k < img->n_rows; k++)
        ids[k] = -1 - (int32_t)((h + (uint32_t)k) & 0x3fffffffu);
    memcpy(ids + img->n_rows, v->suffix, (size_t)v->n_suffix * sizeof *ids);
}

/* The least recently used entry holding rows, or NULL when none does. */
static entry_t *oldest(rn_vision_t *v)
{
    entry_t *best = NULL;
    for (int i = 0; i < RN_VISION_CACHE_MAX; i++) {
        entry_t *e = &v->cache[i];
        if (e->rows && (!best || e->used < best->used))
            best = e;
    }
    return best;
}

static void evict(rn_vision_t *v, entry_t *e)
{
    v->cache_bytes -= (size_t)e->n_rows * v->dim * sizeof(float);
    free(e->rows);
    e->rows = NULL;
    e->n_rows = e->nx = e->ny = 0;
}

/* Keeps rows [n_rows][dim] under img's digest, evicting the least recently
 * used entries to stay within RN_VISION_CACHE_BYTES and
 * RN_VISION_CACHE_MAX entries (an image larger than the budget is simply
 * not cached; so is one that finds no memory). */
static void remember(rn_vision_t *v, const rn_vision_image_t *img, const float *rows)
{
    int n_rows = img->n_rows;
    size_t bytes = (size_t)n_rows * v->dim * sizeof(float);
    if (bytes > RN_VISION_CACHE_BYTES)
        return;
    entry_t *e;
    while (v->cache_bytes + bytes > RN_VISION_CACHE_BYTES && (e = oldest(v)))
        evict(v, e);
    e = NULL;
    for (int i = 0; i < RN_VISION_CACHE_MAX && !e; i++)
        if (!v->cache[i].rows)
            e = &v->cache[i];
    if (!e) {
        e = oldest(v);
        evict(v, e);
    }
    if (!(e->rows = malloc(bytes)))
        return;
    memcpy(e->rows, rows, bytes);
    memcpy(e->digest, img->digest, sizeof e->digest);
    e->n_rows = n_rows, e->nx = img->nx, e->ny = img->ny;
    e->used = ++v->clock;
    v->cache_bytes += bytes;
}

cr_status_t rn_vision_embed(rn_vision_t *v, const rn_vision_image_t *img, size_t index,
                            float *out, cr_err_t *err)
{
    entry_t *e = cached(v, img);
    if (e && e->n_rows == img->n_rows) {
        memcpy(out, e->rows, (size_t)e->n_rows * v->dim * sizeof(float));
        e->used = ++v->clock;
        v->hits++;
        return CR_OK;
    }
    rn_image_t *im = NULL;
    cr_status_t st = decode(img, index, &im, err);
    int w = 0, h = 0;
    rn_clip_layout_t L;
    if (!st && v->clip) {
        if ((st = rn_clip_layout(v->clip, im->width, im->height, &L, err)))
            cr_err_wrap(err, "image %zu", index);
        else if (L.nx * L.ny != img->n_rows)
            st = cr_err_set(err, CR_E_INTERNAL, "image %zu: measured %d rows, encodes %d",
                            index, img->n_rows, L.nx * L.ny);
        if (!st && !(st = reserve_pixels(v, 3 * (size_t)L.width * L.height, err)))
            st = rn_clip_preprocess(v->clip, im, v->pixels, err);
    } else if (!st) {
        st = rn_pixtral_preprocess(v->pix, im, v->pixels, &w, &h, err);
    }
    rn_image_destroy(&im);
    if (!st && v->clip)
        st = rn_clip_encode_at(v->clip, &L, v->pixels, out, err);
    else if (!st)
        st = rn_pixtral_encode(v->pix, v->pixels, w, h, out, err);
    if (st)
        return st;
    v->encoded++;
    remember(v, img, out);
    return CR_OK;
}

void rn_vision_counts(const rn_vision_t *v, int64_t *encoded, int64_t *cache_hits)
{
    *encoded = v->encoded;
    *cache_hits = v->hits;
}
