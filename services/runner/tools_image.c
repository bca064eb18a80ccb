/* tools_image.c: `corral-runner image-embed` (tools.h). */
#include "lib/prelude.h"
#include "services/runner/tools.h"

#include "lib/buf.h"
#include "lib/gguf.h"
#include "lib/vision_embedded.h"
#include "services/runner/backend/backend.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/prompt/prompt_images.h"
#include "services/runner/text/tokenizer.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"
#include "services/runner/vision/pixtral.h"
#include "services/runner/vision/vision.h"

#include <time.h>

#define AFFIX_MAX 16 /* ids of a marker text around an image, at most */

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

static double ms_since(const struct timespec *a)
{
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a->tv_sec) * 1e3 + (double)(b.tv_nsec - a->tv_nsec) / 1e6;
}

/* The image through the projector at path: its normalized pixels
 * (*pixels, *n_px floats) and embeddings (*emb, [*n_rows][*n_embd]), the
 * encoding's time on stderr (for bench/vs_mtmd.sh); *suffix: the text
 * after the image (Pixtral's [IMG_END]) or NULL. Caller frees both. */
static cr_status_t run_tower(const char *path, be_backend_t *be, const rn_image_t *im,
                             float **pixels, size_t *n_px, float **emb, int *n_rows,
                             int *nx, int *n_embd, const char **prefix, const char **suffix,
                             bool *both_ways, cr_err_t *err)
{
    char type[32] = "";
    cr_status_t st = rn_vision_projector_type(path, type, sizeof type, err);
    struct timespec t0;
    *prefix = *suffix = NULL;
    *both_ways = false;
    int32_t brk = -1; /* Ollama's mistral3: [IMG_BREAK]'s id, its row's */
    if (st == CR_E_INVALID) {
        /* a model file with its tower inside (Ollama's single file):
         * lib/vision_embedded.h says which */
        cr_gguf_t *g = NULL;
        cr_vision_embedded_t ve;
        if ((st = cr_gguf_open(path, &g, err)) || (st = cr_vision_embedded(g, &ve, err))) {
            cr_gguf_close(&g);
            return st;
        }
        snprintf(type, sizeof type, "%s", ve.family == CR_VISION_MISTRAL3 ? "pixtral"
                                          : ve.family == CR_VISION_QWEN25VL ? "qwen2.5vl_merger"
                                                                            : "gemma3");
        const cr_gguf_array_t *a = NULL;
        if (ve.family == CR_VISION_MISTRAL3 && cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &a))
            for (uint64_t i = 0; a->strs && i < a->n && brk < 0; i++)
                if (cr_gguf_str_eq(a->strs[i], "[IMG_BREAK]"))
                    brk = (int32_t)i;
        cr_gguf_close(&g);
    }
    if (!st && !strcmp(type, "pixtral")) {
        rn_pixtral_t *p = NULL;
        int w = 0, h = 0;
        if ((st = brk >= 0 ? rn_pixtral_load_ollama(path, be, brk, &p, err)
                           : rn_pixtral_load(path, be, &p, err)))
            return st;
        const rn_pixtral_hparams_t *hp = rn_pixtral_hparams(p);
        *n_embd = hp->n_embd;
        *suffix = "[IMG_END]";
        st = rn_pixtral_fit(p, im->width, im->height, &w, &h, n_rows, err);
        *n_px = 3 * (size_t)w * h;
        if (!st && (!(*pixels = malloc(*n_px * sizeof **pixels)) ||
                    !(*emb = malloc((size_t)*n_rows * hp->n_embd * sizeof **emb))))
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        if (!st)
            st = rn_pixtral_preprocess(p, im, *pixels, &w, &h, err);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (!st && !(st = rn_pixtral_encode(p, *pixels, w, h, *emb, err)))
            fprintf(stderr, "image encoded in %.1f ms\n", ms_since(&t0));
        rn_pixtral_destroy(&p);
        return st;
    }
    if (!st && strcmp(type, "mlp") && strcmp(type, "qwen2.5vl_merger") &&
        strcmp(type, "qwen2vl_merger") && strcmp(type, "gemma3"))
        st = cr_err_set(err, CR_E_UNSUPPORTED, "projector type '%s' is not supported yet "
                        "(supported: mlp, the llava-style projector; gemma3; pixtral; "
                        "qwen2.5vl_merger; qwen2vl_merger)", type);
    rn_clip_t *clip = NULL;
    if (st || (st = rn_clip_load(path, be, &clip, err)))
        return st;
    const rn_clip_hparams_t *hp = rn_clip_hparams(clip);
    rn_clip_layout_t L;
    if ((st = rn_clip_layout(clip, im->width, im->height, &L, err))) {
        rn_clip_destroy(&clip);
        return st;
    }
    *n_embd = hp->n_embd;
    *n_rows = L.nx * L.ny;
    *nx = L.nx;
    /* gemma3's wrapping control tokens (copied: hp goes with the tower) */
    static char beg[sizeof hp->img_beg], end[sizeof hp->img_end];
    snprintf(beg, sizeof beg, "%s", hp->img_beg);
    snprintf(end, sizeof end, "%s", hp->img_end);
    *prefix = *beg ? beg : NULL;
    *suffix = *end ? end : NULL;
    *both_ways = hp->non_causal;
    *n_px = 3 * (size_t)L.width * L.height;
    if (!(*pixels = malloc(*n_px * sizeof **pixels)) ||
        !(*emb = malloc((size_t)*n_rows * hp->n_embd * sizeof **emb)))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (!st)
        st = rn_clip_preprocess(clip, im, *pixels, err);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (!st && !(st = rn_clip_encode_at(clip, &L, *pixels, *emb, err)))
        fprintf(stderr, "image encoded in %.1f ms\n", ms_since(&t0));
    rn_clip_destroy(&clip);
    return st;
}

/* M-RoPE positions (t, h, w) of ids [n] (forward.h's rope_pos), as mtmd
 * places them: text one past the previous token's largest, an image's
 * tokens (negative ids, nx per row) at t = p, h = p + row, w = p + col,
 * p the position the image starts at. */
static void mrope_positions(const int32_t *ids, size_t n, int nx, int32_t *pos)
{
    int32_t next = 0;
    for (size_t i = 0; i < n;) {
        if (ids[i] >= 0) {
            pos[3 * i] = pos[3 * i + 1] = pos[3 * i + 2] = next++;
            i++;
            continue;
        }
        int32_t p0 = next;
        size_t k = 0;
        for (; i < n && ids[i] < 0; i++, k++) {
            pos[3 * i] = p0;
            pos[3 * i + 1] = p0 + (int32_t)(k / (size_t)nx);
            pos[3 * i + 2] = p0 + (int32_t)(k % (size_t)nx);
            next = CR_MAX(next, CR_MAX(pos[3 * i + 1], pos[3 * i + 2]) + 1);
        }
    }
}

/* Appends text's ids (special ones parsed; NULL: none) to ids at *n (room
 * for AFFIX_MAX more). */
static cr_status_t append_marker(const rn_tokenizer_t *tok, const char *text, int32_t *ids,
                                 int *n, cr_err_t *err)
{
    size_t k = 0;
    if (!text)
        return CR_OK;
    cr_status_t st = rn_tokenize(tok, text, strlen(text), false, true, ids + *n, AFFIX_MAX, &k,
                                 err);
    *n += (int)k;
    return st;
}

/* The last position's logits of prompt (trusted text, BOS as the
 * vocabulary says, [img-0] where prefix's tokens, the image's n_tok rows
 * emb (nx per row of its grid) and suffix's tokens go, special ones
 * parsed; M-RoPE models get mrope_positions; both_ways: the image's rows
 * attend to each other both ways) into logits_path. */
static cr_status_t prompt_logits(const char *model_path, be_backend_t *be, const char *prompt,
                                 const float *emb, int n_tok, int nx, const char *prefix,
                                 const char *suffix, bool both_ways, const char *logits_path,
                                 cr_err_t *err)
{
    int32_t *rope = NULL;
    rn_model_t *m = NULL;
    rn_tokenizer_t *tok = NULL;
    rn_ctx_t *c = NULL;
    int32_t *ids = NULL, *img = malloc(((size_t)n_tok + 2 * AFFIX_MAX) * sizeof *img);
    if (!img)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    const int32_t *imgs[1] = {img};
    int n_img[1] = {0};
    rn_prompt_span_t sp = {0, strlen(prompt), true};
    rn_prompt_result_t r = {.text = (char *)prompt, .len = strlen(prompt), .spans = &sp,
                            .n_spans = sp.len ? 1 : 0};
    size_t n = 0, order = 0, n_order = 0;
    cr_status_t st = rn_model_load(model_path, be, &m, err);
    if (!st)
        st = rn_tokenizer_load(rn_model_gguf(m), &tok, err);
    if (!st && !(st = append_marker(tok, prefix, img, &n_img[0], err))) {
        for (int k = 0; k < n_tok; k++)
            img[n_img[0]++] = -1 - k;
        st = append_marker(tok, suffix, img, &n_img[0], err);
    }
    if (!st) {
        st = rn_prompt_tokenize_images(tok, &r, imgs, 1, n_img, NULL, 0, &n, &order, 1,
                                       &n_order, err);
        if (st == CR_E_TOO_LARGE)
            st = CR_OK;
    }
    if (!st && (n == 0 || n > RN_MODEL_MAX_CTX - 1))
        st = cr_err_set(err, CR_E_INVALID, "the prompt is %zu tokens", n);
    if (!st && !(ids = malloc(n * sizeof *ids)))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (!st)
        st = rn_prompt_tokenize_images(tok, &r, imgs, 1, n_img, ids, n, &n, &order, 1,
                                       &n_order, err);
    if (!st && n_order != 1)
        st = cr_err_set(err, CR_E_INVALID, "the prompt must hold [img-0] once (%zu times)",
                        n_order);
    rn_ctx_opts_t co = {.n_ctx = (int)n + 1, .n_batch = (int)n};
    if (!st)
        st = rn_ctx_new(m, &co, &c, err);
    if (!st && rn_model_hparams(m)->mrope) {
        if (!(rope = malloc(3 * n * sizeof *rope)))
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        else
            mrope_positions(ids, n, nx > 0 ? nx : n_tok, rope);
    }
    if (!st) {
        rn_ctx_span_t span = {.seq = 0, .tokens = ids, .n = (int)n, .pos = 0, .embd = emb,
                              .rope_pos = rope, .embd_full = both_ways};
        st = rn_ctx_eval_batch(c, &span, 1, err);
    }
    if (!st)
        st = write_floats(logits_path, rn_ctx_logits(c), (size_t)rn_ctx_n_vocab(c), err);
    rn_ctx_destroy(&c);
    rn_tokenizer_destroy(&tok);
    rn_model_destroy(&m);
    free(ids);
    free(img);
    free(rope);
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
    rn_image_t *im = NULL;
    float *pixels = NULL, *emb = NULL;
    const char *suffix = NULL;
    size_t n_px = 0;
    int dim = 0, n_rows = 0, nx = 0, n_embd = 0, rc = 1;
    const char *prefix = NULL;
    bool both_ways = false;
    cr_status_t st;
    if ((st = text_dim(model_path, &dim, &err)) ||
        (st = read_file(image_path, &file, &err)) ||
        (st = rn_image_decode(file.data, file.len, rn_image_max_pixels(), &im, &err)) ||
        (st = be_cpu_new(n_threads, &be, &err)) ||
        (st = run_tower(mmproj_path, be, im, &pixels, &n_px, &emb, &n_rows, &nx, &n_embd,
                        &prefix, &suffix, &both_ways, &err)))
        goto out;
    if (n_embd != dim) {
        cr_err_set(&err, CR_E_INVALID, "projector output is %d wide but the text model's "
                   "embeddings are %d", n_embd, dim);
        goto out;
    }
    if ((pixels_path && (st = write_floats(pixels_path, pixels, n_px, &err))) ||
        (st = write_floats(out_path, emb, (size_t)n_rows * n_embd, &err)))
        goto out;
    if (prompt && logits_path &&
        (st = prompt_logits(model_path, be, prompt, emb, n_rows, nx, prefix, suffix,
                            both_ways, logits_path, &err)))
        goto out;
    printf("%d x %d\n", n_rows, n_embd);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "%s\n", err.msg);
    free(pixels);
    free(emb);
    rn_image_destroy(&im);
    be_destroy(&be);
    cr_buf_free(&file);
    return rc;
}
