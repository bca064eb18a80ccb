/* tools_image.c: `corral-runner image-embed` (tools.h). */
#include "lib/prelude.h"
#include "services/runner/tools.h"

#include "lib/buf.h"
#include "lib/gguf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/prompt/prompt_images.h"
#include "services/runner/text/tokenizer.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"

#include <time.h>

#define IMAGE_FILE_MAX (256u << 20)

static cr_status_t read_file(const char *path, cr_buf_t *b, cr_err_t *err)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_err_set(err, CR_E_IO, "%s: %s", path, strerror(errno));
    char chunk[65536];
    size_t n;
    cr_status_t st = CR_OK;
    while (!st && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if ((st = cr_buf_append(b, chunk, n)))
            cr_err_set(err, st, "%s: larger than %u bytes", path, IMAGE_FILE_MAX);
    if (!st && ferror(f))
        st = cr_err_set(err, CR_E_IO, "%s: read failed", path);
    fclose(f);
    return st;
}

static cr_status_t write_floats(const char *path, const float *v, size_t n, cr_err_t *err)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return cr_err_set(err, CR_E_IO, "%s: %s", path, strerror(errno));
    bool ok = fwrite(v, sizeof *v, n, f) == n;
    ok = fclose(f) == 0 && ok;
    return ok ? CR_OK : cr_err_set(err, CR_E_IO, "%s: write failed", path);
}

/* The text model's embedding length (<arch>.embedding_length). */
static cr_status_t text_dim(const char *path, int *out, cr_err_t *err)
{
    cr_gguf_t *g = NULL;
    cr_status_t st = cr_gguf_open(path, &g, err);
    if (st)
        return st;
    char key[96];
    snprintf(key, sizeof key, "%s.embedding_length", cr_gguf_arch(g));
    uint32_t v = 0;
    if (!cr_gguf_get_u32(g, key, &v) || v == 0 || v > INT_MAX)
        st = cr_err_set(err, CR_E_INVALID, "%s: no %s", path, key);
    *out = (int)v;
    cr_gguf_close(&g);
    return st;
}

/* rn_clip_encode, saying how long it took on stderr (for bench/vs_mtmd.sh). */
static cr_status_t encode_timed(rn_clip_t *clip, const float *pixels, float *emb,
                                cr_err_t *err)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    cr_status_t st = rn_clip_encode(clip, pixels, emb, err);
    clock_gettime(CLOCK_MONOTONIC, &b);
    if (!st)
        fprintf(stderr, "image encoded in %.1f ms\n",
                (double)(b.tv_sec - a.tv_sec) * 1e3 + (double)(b.tv_nsec - a.tv_nsec) / 1e6);
    return st;
}

/* The id of control token `text` in tok's vocabulary into *id (nothing
 * for ""); CR_E_INVALID when the vocabulary lacks it. */
static cr_status_t control_id(const rn_tokenizer_t *tok, const char *text, int32_t *id,
                              cr_err_t *err)
{
    size_t n = 0;
    if (!*text)
        return CR_OK;
    if (rn_tokenize(tok, text, strlen(text), false, true, id, 1, &n, NULL) || n != 1)
        return cr_err_set(err, CR_E_INVALID, "the text model's vocabulary lacks %s", text);
    return CR_OK;
}

/* The last position's logits of prompt (trusted text, BOS as the
 * vocabulary says, [img-0] where the image's n_tok rows emb go, between
 * the projector's wrapping tokens, read both ways if it says so) into
 * logits_path. */
static cr_status_t prompt_logits(const char *model_path, be_backend_t *be, const char *prompt,
                                 const rn_clip_hparams_t *hp, const float *emb,
                                 const char *logits_path, cr_err_t *err)
{
    rn_model_t *m = NULL;
    rn_tokenizer_t *tok = NULL;
    rn_ctx_t *c = NULL;
    int n_tok = hp->n_patches + 2, k0 = 0;
    int32_t *ids = NULL, *img = malloc((size_t)n_tok * sizeof *img);
    if (!img)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    const int32_t *imgs[1] = {img};
    rn_prompt_span_t sp = {0, strlen(prompt), true};
    rn_prompt_result_t r = {.text = (char *)prompt, .len = strlen(prompt), .spans = &sp,
                            .n_spans = sp.len ? 1 : 0};
    size_t n = 0, order = 0, n_order = 0;
    cr_status_t st = rn_model_load(model_path, be, &m, err);
    if (!st)
        st = rn_tokenizer_load(rn_model_gguf(m), &tok, err);
    if (!st && *hp->img_beg)
        st = control_id(tok, hp->img_beg, &img[k0++], err);
    for (int k = 0; !st && k < hp->n_patches; k++)
        img[k0++] = -1 - k;
    if (!st && *hp->img_end)
        st = control_id(tok, hp->img_end, &img[k0++], err);
    n_tok = k0;
    if (!st) {
        st = rn_prompt_tokenize_images(tok, &r, imgs, 1, n_tok, NULL, 0, &n, &order, 1,
                                       &n_order, err);
        if (st == CR_E_TOO_LARGE)
            st = CR_OK;
    }
    if (!st && (n == 0 || n > RN_MODEL_MAX_CTX - 1))
        st = cr_err_set(err, CR_E_INVALID, "the prompt is %zu tokens", n);
    if (!st && !(ids = malloc(n * sizeof *ids)))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (!st)
        st = rn_prompt_tokenize_images(tok, &r, imgs, 1, n_tok, ids, n, &n, &order, 1,
                                       &n_order, err);
    if (!st && n_order != 1)
        st = cr_err_set(err, CR_E_INVALID, "the prompt must hold [img-0] once (%zu times)",
                        n_order);
    rn_ctx_opts_t co = {.n_ctx = (int)n + 1, .n_batch = (int)n};
    if (!st)
        st = rn_ctx_new(m, &co, &c, err);
    if (!st) {
        rn_ctx_span_t span = {.seq = 0, .tokens = ids, .n = (int)n, .pos = 0, .embd = emb,
                              .embd_full = hp->non_causal};
        st = rn_ctx_eval_batch(c, &span, 1, err);
    }
    if (!st)
        st = write_floats(logits_path, rn_ctx_logits(c), (size_t)rn_ctx_n_vocab(c), err);
    rn_ctx_destroy(&c);
    rn_tokenizer_destroy(&tok);
    rn_model_destroy(&m);
    free(ids);
    free(img);
    return st;
}

int rn_tool_image_embed(const char *model_path, const char *mmproj_path,
                        const char *image_path, const char *out_path,
                        const char *pixels_path, int n_threads, const char *prompt,
                        const char *logits_path)
{
    cr_err_t err = {0};
    cr_buf_t file;
    cr_buf_init(&file, IMAGE_FILE_MAX);
    be_backend_t *be = NULL;
    rn_clip_t *clip = NULL;
    rn_image_t *im = NULL;
    float *pixels = NULL, *emb = NULL;
    int dim = 0, rc = 1;
    cr_status_t st;
    if ((st = text_dim(model_path, &dim, &err)) ||
        (st = read_file(image_path, &file, &err)) ||
        (st = rn_image_decode(file.data, file.len, rn_image_max_pixels(), &im, &err)) ||
        (st = be_cpu_new(n_threads, &be, &err)) ||
        (st = rn_clip_load(mmproj_path, be, &clip, &err)))
        goto out;
    const rn_clip_hparams_t *hp = rn_clip_hparams(clip);
    if (hp->n_embd != dim) {
        cr_err_set(&err, CR_E_INVALID, "projector output is %d wide but the text model's "
                   "embeddings are %d", hp->n_embd, dim);
        goto out;
    }
    size_t npx = 3 * (size_t)hp->image_size * hp->image_size;
    size_t nemb = (size_t)hp->n_patches * hp->n_embd;
    pixels = malloc(npx * sizeof *pixels);
    emb = malloc(nemb * sizeof *emb);
    if (!pixels || !emb) {
        cr_err_set(&err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    if ((st = rn_clip_preprocess(clip, im, pixels, &err)) ||
        (pixels_path && (st = write_floats(pixels_path, pixels, npx, &err))) ||
        (st = encode_timed(clip, pixels, emb, &err)) ||
        (st = write_floats(out_path, emb, nemb, &err)))
        goto out;
    if (prompt && logits_path &&
        (st = prompt_logits(model_path, be, prompt, hp, emb, logits_path, &err)))
        goto out;
    printf("%d x %d\n", hp->n_patches, hp->n_embd);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    free(pixels);
    free(emb);
    rn_image_destroy(&im);
    rn_clip_destroy(&clip);
    be_destroy(&be);
    cr_buf_free(&file);
    return rc;
}
