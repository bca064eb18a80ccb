/* test_engine_pixtral.c: images in requests to a model with a Pixtral
 * projector (a synthetic mistral3 text model and corral-clip-synth
 * --pixtral), without the bus.
 *
 * Checks: an image's ids are one negative id per embedding row, then the
 * text model's tokens of "[IMG_END]" (libmtmd's layout); images of
 * different sizes take different token counts in prompt_eval_count
 * (97x61: 4x3 tokens + 2 [IMG_BREAK] rows; 150x90: 5x3 + 2), a portrait
 * and a landscape image too; the same image gives the same answer and is
 * served from the cache by content hash once the slot's prefix has
 * moved on; the embeddings the engine's tool writes are the tower's,
 * bit for bit; an image too elongated for the tower, one whose tokens do
 * not fit num_ctx, and a projector type nobody runs yet are clear
 * errors. The scheduler's estimate covers the tower.
 *
 * Ollama's single file (the same tower inside the mistral3 model file,
 * under Ollama's names, its q/k rows in Hugging Face's order, no break
 * tensor) gives the same rows bit for bit and the same answers as
 * llama.cpp's pair; an incomplete or misshapen tower, or a vocabulary
 * without [IMG_BREAK], is named and the model answers text but refuses
 * images as Ollama does. */
#include "lib/prelude.h"

#include <png.h>

#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "lib/vision_embedded.h"
#include "services/runner/backend/backend.h"
#include "services/runner/engine.h"
#include "services/runner/model/model.h"
#include "services/runner/text/tokenizer.h"
#include "services/runner/tools.h"
#include "services/runner/vision/image.h"
#include "services/runner/vision/pixtral.h"
#include "services/runner/vision/vision.h"
#include "services/scheduler/estimate.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"
#include "tests/unit/gguf_edit.h"

static char dir_g[] = "/tmp/corral-test-engine-pixtral-XXXXXX";
static char text_path[256], proj_path[256];

/* A w x h PNG's bytes; `seed` varies the pixels. Caller frees. */
static uint8_t *png_bytes(int w, int h, int seed, size_t *len)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (size_t i = 0; i < (size_t)w * h * 3; i++)
        rgb[i] = (uint8_t)((i * 31 + (size_t)seed * 97) ^ (i >> 5));
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    pi.width = (png_uint_32)w;
    pi.height = (png_uint_32)h;
    pi.format = PNG_FORMAT_RGB;
    png_alloc_size_t n = 0;
    png_image_write_to_memory(&pi, NULL, &n, 0, rgb, 0, NULL);
    uint8_t *buf = malloc(n);
    png_image_write_to_memory(&pi, buf, &n, 0, rgb, 0, NULL);
    free(rgb);
    *len = n;
    return buf;
}

static char *png_b64(int w, int h, int seed)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0;
    uint8_t *p = png_bytes(w, h, seed, &n);
    char *s = malloc(n / 3 * 4 + 8), *o = s;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) |
                     (i + 2 < n ? p[i + 2] : 0);
        *o++ = a[v >> 18 & 63];
        *o++ = a[v >> 12 & 63];
        *o++ = i + 1 < n ? a[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? a[v & 63] : '=';
    }
    *o = '\0';
    free(p);
    return s;
}

typedef struct capture {
    cr_buf_t text, logprobs;
} capture_t;

static bool cap_chunk(void *ctx, const msg_chunk_body_t *c)
{
    capture_t *cp = ctx;
    if (c->response)
        cr_buf_puts(&cp->text, c->response);
    if (c->logprobs)
        cr_buf_puts(&cp->logprobs, c->logprobs);
    return true;
}

static bool never(void *ctx)
{
    CR_UNUSED(ctx);
    return false;
}

static void cap_free(capture_t *c)
{
    cr_buf_free(&c->text);
    cr_buf_free(&c->logprobs);
}

/* A chat of one user message with images, greedy, 3 tokens. */
static cr_status_t chat(rn_engine_t *e, char **images, size_t n_images, capture_t *cp,
                        msg_done_body_t *done, cr_err_t *err)
{
    msg_options_t o = {0};
    o.temperature = 0;
    o.has_temperature = true;
    o.num_predict = 3;
    o.has_num_predict = true;
    msg_message_t m = {0};
    m.role = "user";
    m.has_role = true;
    m.content = "what is this";
    m.has_content = true;
    m.images.v = images;
    m.images.n = n_images;
    m.has_images = n_images > 0;
    msg_t r;
    msg_init(&r, MSG_chat, "t");
    r.u.chat.model = "synth";
    r.u.chat.has_model = true;
    r.u.chat.messages.v = &m;
    r.u.chat.messages.n = 1;
    r.u.chat.has_messages = true;
    r.u.chat.options = &o;
    r.u.chat.has_options = true;
    r.u.chat.logprobs = true;
    r.u.chat.has_logprobs = true;
    r.u.chat.top_logprobs = 3;
    r.u.chat.has_top_logprobs = true;
    cr_buf_init(&cp->text, 1 << 20);
    cr_buf_init(&cp->logprobs, 1 << 20);
    rn_sink_t sink = {cp, cap_chunk, never};
    memset(done, 0, sizeof *done);
    return rn_engine_generate(e, &r, &sink, done, err);
}

static rn_engine_t *load_engine(const char *proj, int64_t num_ctx, cr_status_t *st,
                                cr_err_t *err)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, text_path, NULL, num_ctx, 1);
    ld.projector = (char *)proj;
    ld.has_projector = true;
    rn_engine_t *e = NULL;
    *st = rn_engine_load(&ld, &e, err);
    return e;
}

/* The ids of an image: rows negative, then [IMG_END]'s tokens. */
static void test_ids(int *n_suffix)
{
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_tokenizer_t *tok = NULL;
    rn_vision_t *v = NULL;
    cr_err_t err = {0};
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    CHECK(rn_model_load(text_path, be, &m, &err) == CR_OK);
    CHECK(m && rn_tokenizer_load(rn_model_gguf(m), &tok, &err) == CR_OK);
    CHECK_MSG(tok && rn_vision_new(proj_path, be, tok, 64, &v, &err) == CR_OK, "%s", err.msg);
    if (v) {
        CHECK_EQ_INT(rn_vision_fixed_tokens(v), 0); /* it follows the image */
        int32_t end[16];
        size_t n_end = 0;
        CHECK(rn_tokenize(tok, "[IMG_END]", 9, false, true, end, 16, &n_end, &err) == CR_OK);
        *n_suffix = (int)n_end;
        char *b = png_b64(97, 61, 1);
        rn_vision_image_t img;
        CHECK(rn_vision_image_load(b, &img, &err) == CR_OK);
        CHECK(rn_vision_image_measure(v, &img, 0, &err) == CR_OK);
        CHECK_EQ_INT(img.n_rows, 14);
        CHECK_EQ_INT(img.n_ids, 14 + (int)n_end);
        int32_t ids[64];
        rn_vision_token_ids(v, &img, ids);
        bool neg = true;
        for (int k = 0; k < 14; k++)
            neg &= ids[k] < 0;
        CHECK(neg);
        CHECK(!memcmp(ids + 14, end, n_end * sizeof *end));
        rn_vision_image_free(&img);
        free(b);
    }
    rn_vision_destroy(&v);
    rn_tokenizer_destroy(&tok);
    rn_model_destroy(&m);
    be_destroy(&be);
}

static void test_requests(int n_suffix)
{
    cr_status_t st;
    cr_err_t err = {0};
    rn_engine_t *e = load_engine(proj_path, 512, &st, &err);
    CHECK_MSG(e, "load: %s", err.msg);
    if (!e)
        return;
    char *wide = png_b64(97, 61, 1), *wider = png_b64(150, 90, 2), *tall = png_b64(61, 97, 3);
    capture_t t = {0}, a = {0}, b = {0}, c = {0};
    msg_done_body_t d;
    rn_engine_stats_t s;
    CHECK_MSG(chat(e, NULL, 0, &t, &d, &err) == CR_OK, "%s", err.msg);
    int64_t text_only = d.prompt_eval_count;
    CHECK_MSG(chat(e, &wide, 1, &a, &d, &err) == CR_OK, "%s", err.msg);
    CHECK_MSG(d.prompt_eval_count == text_only + 14 + n_suffix, "%" PRId64 " tokens, text %"
              PRId64, d.prompt_eval_count, text_only);
    CHECK_MSG(chat(e, &wider, 1, &b, &d, &err) == CR_OK, "%s", err.msg);
    CHECK_EQ_INT(d.prompt_eval_count, text_only + 17 + n_suffix); /* 140x84 */
    CHECK(a.logprobs.data && b.logprobs.data && strcmp(a.logprobs.data, b.logprobs.data));
    cap_free(&b);
    /* portrait: 84x112, 3x4 tokens + 3 breaks */
    CHECK_MSG(chat(e, &tall, 1, &b, &d, &err) == CR_OK, "%s", err.msg);
    CHECK_EQ_INT(d.prompt_eval_count, text_only + 15 + n_suffix);
    cap_free(&b);
    /* the first image again: the slot holds another, so from the cache */
    CHECK(chat(e, &wide, 1, &c, &d, &err) == CR_OK);
    CHECK_EQ_STR(a.logprobs.data ? a.logprobs.data : "", c.logprobs.data ? c.logprobs.data : "");
    rn_engine_get_stats(e, &s);
    CHECK_EQ_INT(s.images_encoded, 3);
    CHECK_EQ_INT(s.images_cached, 1);
    cap_free(&c);
    /* two images of different sizes in one message */
    char *two[2] = {wider, wide};
    CHECK(chat(e, two, 2, &c, &d, &err) == CR_OK);
    CHECK_EQ_INT(d.prompt_eval_count, text_only + 17 + 14 + 2 * n_suffix);
    cap_free(&c);
    /* too elongated for the tower: a clear 400 */
    char *thin = png_b64(50000, 10, 4);
    CHECK(chat(e, &thin, 1, &c, &d, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "image 0") && strstr(err.msg, "too elongated"), "%s", err.msg);
    cap_free(&c);
    free(thin);
    /* 665 rows do not fit num_ctx (512 asked, the model's 256 given) */
    char *big = png_b64(1000, 500, 5);
    CHECK(chat(e, &big, 1, &c, &d, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "683 tokens") && strstr(err.msg, "num_ctx"), "%s", err.msg);
    cap_free(&c);
    free(big);
    /* not an image: said once, naming it */
    char notimg[] = "aGVsbG8sIHdvcmxk"; /* "hello, world" */
    char *bad[2] = {wide, notimg};
    CHECK(chat(e, bad, 2, &c, &d, &err) == CR_E_INVALID);
    CHECK_MSG(!strncmp(err.msg, "image 1: not an image", 21), "%s", err.msg);
    cap_free(&c);
    /* still answering */
    CHECK(chat(e, &wide, 1, &c, &d, &err) == CR_OK);
    cap_free(&c);
    cap_free(&a);
    cap_free(&t);
    free(wide), free(wider), free(tall);
    rn_engine_destroy(&e);
}

/* corral-runner image-embed over a Pixtral projector: the tower's rows
 * (breaks included) bit for bit, the pixels of the resized image. */
static void test_tool(void)
{
    char png[300], emb[300], px[300], lg[300];
    snprintf(png, sizeof png, "%s/t.png", dir_g);
    snprintf(emb, sizeof emb, "%s/emb.f32", dir_g);
    snprintf(px, sizeof px, "%s/px.f32", dir_g);
    snprintf(lg, sizeof lg, "%s/logits.f32", dir_g);
    size_t n = 0;
    uint8_t *bytes = png_bytes(97, 61, 7, &n);
    FILE *f = fopen(png, "wb");
    CHECK(f && fwrite(bytes, 1, n, f) == n);
    if (f)
        fclose(f);
    CHECK_EQ_INT(rn_tool_image_embed(text_path, proj_path, png, emb, px, 1,
                                     "describe [img-0] now", lg), 0);
    be_backend_t *be = NULL;
    rn_pixtral_t *p = NULL;
    rn_image_t *im = NULL;
    cr_err_t err = {0};
    size_t rows = 14, E = 64, npx = 3 * 112 * 84;
    float *want = malloc(rows * E * 4), *got = malloc(rows * E * 4), *pix = malloc(npx * 4);
    float *got_px = malloc(npx * 4);
    int w = 0, h = 0;
    CHECK(be_cpu_new(1, &be, &err) == CR_OK && rn_pixtral_load(proj_path, be, &p, &err) == CR_OK);
    CHECK(rn_image_decode(bytes, n, rn_image_max_pixels(), &im, &err) == CR_OK);
    CHECK(p && im && rn_pixtral_preprocess(p, im, pix, &w, &h, &err) == CR_OK &&
          rn_pixtral_encode(p, pix, w, h, want, &err) == CR_OK);
    CHECK(w == 112 && h == 84);
    f = fopen(emb, "rb");
    CHECK(f && fread(got, 4, rows * E, f) == rows * E && fgetc(f) == EOF);
    if (f)
        fclose(f);
    CHECK(!memcmp(got, want, rows * E * 4));
    f = fopen(px, "rb");
    CHECK(f && fread(got_px, 4, npx, f) == npx && fgetc(f) == EOF);
    if (f)
        fclose(f);
    CHECK(!memcmp(got_px, pix, npx * 4));
    rn_image_destroy(&im);
    rn_pixtral_destroy(&p);
    be_destroy(&be);
    free(want), free(got), free(pix), free(got_px), free(bytes);
}

/* Embeds image `seed` of w x h through v; true when it came from the
 * cache. */
static bool embed_one(rn_vision_t *v, int w, int h, int seed, float *out)
{
    cr_err_t err = {0};
    char *b = png_b64(w, h, seed);
    rn_vision_image_t img;
    int64_t enc0, hit0, enc1, hit1;
    rn_vision_counts(v, &enc0, &hit0);
    CHECK(rn_vision_image_load(b, &img, &err) == CR_OK);
    CHECK(rn_vision_image_measure(v, &img, 0, &err) == CR_OK);
    CHECK_MSG(rn_vision_embed(v, &img, 0, out, &err) == CR_OK, "%s", err.msg);
    rn_vision_counts(v, &enc1, &hit1);
    CHECK(enc1 + hit1 == enc0 + hit0 + 1);
    rn_vision_image_free(&img);
    free(b);
    return hit1 > hit0;
}

/* The per-runner cache holds at most RN_VISION_CACHE_MAX images and
 * RN_VISION_CACHE_BYTES of rows, evicting the least recently used. */
static void test_cache(void)
{
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_tokenizer_t *tok = NULL;
    rn_vision_t *v = NULL;
    cr_err_t err = {0};
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    CHECK(rn_model_load(text_path, be, &m, &err) == CR_OK);
    CHECK(m && rn_tokenizer_load(rn_model_gguf(m), &tok, &err) == CR_OK);
    /* by count: 14-row images, 3.5 KiB each */
    float *out = malloc((size_t)170 * 16384 * sizeof *out);
    CHECK(tok && rn_vision_new(proj_path, be, tok, 64, &v, &err) == CR_OK);
    for (int i = 0; v && i <= RN_VISION_CACHE_MAX; i++)
        CHECK(!embed_one(v, 97, 61, 100 + i, out));
    if (v) {
        CHECK(embed_one(v, 97, 61, 100 + RN_VISION_CACHE_MAX, out)); /* newest kept */
        CHECK(!embed_one(v, 97, 61, 100, out));                     /* oldest evicted */
    }
    rn_vision_destroy(&v);
    /* by bytes: 170 rows of 16384 floats (10.6 MiB) each, 6 of 64 MiB */
    char path[300];
    snprintf(path, sizeof path, "%s/wide.gguf", dir_g);
    rn_synth_clip_opts_t co;
    rn_synth_clip_defaults(&co);
    co.patch_size = 28;
    co.n_embd = 16384;
    CHECK(rn_synth_pixtral_write(&co, path, &err) == CR_OK);
    CHECK_MSG(rn_vision_new(path, be, tok, 16384, &v, &err) == CR_OK, "%s", err.msg);
    for (int i = 0; v && i < 7; i++)
        CHECK(!embed_one(v, 1000, 500, i, out));
    if (v) {
        CHECK(embed_one(v, 1000, 500, 6, out));
        CHECK(embed_one(v, 1000, 500, 2, out));
        CHECK(!embed_one(v, 1000, 500, 0, out));
    }
    rn_vision_destroy(&v);
    free(out);
    rn_tokenizer_destroy(&tok);
    rn_model_destroy(&m);
    be_destroy(&be);
}

/* The scheduler's estimate of a Pixtral projector covers what the tower
 * holds (its weights mapped, the backend's buffers and scratch for the
 * largest image, host staging) plus the image cache, and is not the
 * llava formula (image_size 112 would give 64 patches, the tower takes
 * 4096); within 25% of it. */
static void test_estimate(void)
{
    CHECK_EQ_INT(SCH_PIXTRAL_MAX_TOKENS, RN_PIXTRAL_MAX_TOKENS); /* one figure */
    cr_err_t err = {0};
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open(proj_path, &g, &err) == CR_OK);
    sch_estimate_t est = {0};
    CHECK(g && sch_estimate_add_projector(&est, g, &err) == CR_OK);
    cr_gguf_close(&g);
    be_backend_t *be = NULL;
    rn_pixtral_t *p = NULL;
    CHECK(be_cpu_new(1, &be, &err) == CR_OK && rn_pixtral_load(proj_path, be, &p, &err) == CR_OK);
    if (!p) {
        be_destroy(&be);
        return;
    }
    const rn_pixtral_hparams_t *hp = rn_pixtral_hparams(p);
    uint64_t wb = 0, bb = 0;
    be->ops->memory_used(be, &wb, &bb);
    /* host: patches, the merger's two copies, positions, the pixels */
    double P2 = (double)hp->patch_size * hp->patch_size, N = hp->max_patches;
    double host = N * 3 * P2 * 4 * 2 + N * hp->dim * 4 * 2 + N * 8;
    double held = (double)rn_pixtral_weight_bytes(p) + (double)wb + (double)bb + host +
                  SCH_VISION_CACHE_BYTES;
    double e = (double)est.projector_bytes;
    CHECK_MSG(e >= held && e <= held * 1.25, "estimate %.0f, held %.0f (weights %.0f, packed "
              "%.0f, buffers %.0f, host %.0f)", e, held, (double)rn_pixtral_weight_bytes(p),
              (double)wb, (double)bb, host);
    rn_pixtral_destroy(&p);
    be_destroy(&be);
}

/* The same synthetic tower in llama.cpp's layout (text model + mmproj,
 * the mmproj's [IMG_BREAK] row copied from the text model as llama.cpp's
 * converter does) and in Ollama's single file (names, keys, q/k rows in
 * Hugging Face's order, no break tensor). */
static char pt_text[300], pt_mmproj[300], pt_single[300];

static void write_pair(void)
{
    static const char *const tokens[] = {"[IMG_BREAK]", "[IMG_END]", NULL};
    snprintf(pt_text, sizeof pt_text, "%s/pt-text.gguf", dir_g);
    snprintf(pt_mmproj, sizeof pt_mmproj, "%s/pt-mmproj.gguf", dir_g);
    snprintf(pt_single, sizeof pt_single, "%s/pt-single.gguf", dir_g);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.arch = "mistral3";
    so.seed = 3;
    so.weight_std = 0.1f; /* sharp enough for the image to move the answer */
    so.extra_tokens = tokens;
    rn_synth_clip_opts_t co;
    rn_synth_clip_defaults(&co);
    co.seed = 4;
    co.break_from = pt_text;
    cr_err_t err = {0};
    CHECK_MSG(rn_synth_write(&so, pt_text, &err) == CR_OK, "%s", err.msg);
    CHECK_MSG(rn_synth_pixtral_write(&co, pt_mmproj, &err) == CR_OK, "%s", err.msg);
    CHECK_MSG(rn_synth_pixtral_embed(&co, pt_text, pt_single, &err) == CR_OK, "%s", err.msg);
}

/* Rows of the image `seed` (w x h) through the tower of path: the
 * mmproj's, or the single file's (break row from the vocabulary's
 * [IMG_BREAK]). *n_rows set; caller frees. */
static float *tower_rows(const char *path, bool single, int w, int h, int seed, int *n_rows)
{
    be_backend_t *be = NULL;
    rn_pixtral_t *p = NULL;
    rn_image_t *im = NULL;
    cr_err_t err = {0};
    size_t n = 0;
    uint8_t *bytes = png_bytes(w, h, seed, &n);
    float *px = NULL, *out = NULL;
    *n_rows = 0;
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    int32_t brk = rn_synth_builtin_vocab_size(); /* the first extra token */
    cr_status_t st = single ? rn_pixtral_load_ollama(path, be, brk, &p, &err)
                            : rn_pixtral_load(path, be, &p, &err);
    CHECK_MSG(st == CR_OK, "%s: %s", path, err.msg);
    CHECK(rn_image_decode(bytes, n, rn_image_max_pixels(), &im, &err) == CR_OK);
    int fw = 0, fh = 0;
    if (p && im && rn_pixtral_fit(p, w, h, &fw, &fh, n_rows, &err) == CR_OK) {
        px = malloc(3 * (size_t)fw * fh * sizeof *px);
        out = malloc((size_t)*n_rows * 64 * sizeof *out);
        CHECK(rn_pixtral_preprocess(p, im, px, &fw, &fh, &err) == CR_OK);
        CHECK_MSG(rn_pixtral_encode(p, px, fw, fh, out, &err) == CR_OK, "%s", err.msg);
    }
    free(px), free(bytes);
    rn_image_destroy(&im);
    rn_pixtral_destroy(&p);
    be_destroy(&be);
    return out;
}

/* Ollama's single file and llama.cpp's pair give the same image rows and
 * the same answers. Both run the same kernels over the same numbers (q/k
 * rows moved whole, the break row the same F32 floats), so the rows must
 * match bit for bit (tolerance 0); the answers' top-3 logprobs too. */
static void test_single_file(void)
{
    write_pair();
    cr_err_t err = {0};
    cr_gguf_t *g = NULL;
    cr_vision_embedded_t ve;
    CHECK(cr_gguf_open(pt_single, &g, &err) == CR_OK);
    CHECK_MSG(g && cr_vision_embedded(g, &ve, &err) == CR_OK, "%s", err.msg);
    if (g) {
        CHECK_EQ_INT(ve.family, CR_VISION_MISTRAL3);
        CHECK_EQ_INT(ve.n_embd, 64);
        CHECK_EQ_INT(ve.n_merge, 2);
        CHECK_EQ_INT(ve.n_layers, 3);
        CHECK(ve.copy_bytes == 3 * 2 * 64 * 64 * 4); /* q and k, F32, per block */
        /* the file's q rows are Hugging Face's: row 1 of head 0 (pair 0's
         * second half, llama.cpp's row 1) sits at hd/2 = 8 */
        cr_gguf_t *m = NULL;
        CHECK(cr_gguf_open(pt_mmproj, &m, &err) == CR_OK);
        const cr_gguf_tensor_t *a = m ? cr_gguf_tensor_find(m, "v.blk.0.attn_q.weight") : NULL;
        const cr_gguf_tensor_t *b = cr_gguf_tensor_find(g, "v.blk.0.attn_q.weight");
        CHECK(a && b && memcmp(a->data, b->data, a->size_bytes));
        CHECK(a && b && !memcmp((const float *)a->data + 64, (const float *)b->data + 8 * 64,
                                64 * sizeof(float)));
        cr_gguf_close(&m);
    }
    cr_gguf_close(&g);
    /* the towers' rows, [IMG_BREAK] rows included: 97x61 -> 4x3 + 2 */
    int n1 = 0, n2 = 0;
    float *want = tower_rows(pt_mmproj, false, 97, 61, 1, &n1);
    float *got = tower_rows(pt_single, true, 97, 61, 1, &n2);
    CHECK_EQ_INT(n1, 14);
    CHECK_EQ_INT(n2, 14);
    CHECK(want && got && !memcmp(want, got, (size_t)14 * 64 * sizeof *got));
    free(want), free(got);
    /* the engine: the single file alone, the pair as text + projector */
    msg_options_t o;
    msg_load_body_t ld;
    rn_engine_t *one = NULL, *two = NULL;
    test_load_body(&ld, &o, pt_single, NULL, 512, 1);
    CHECK_MSG(rn_engine_load(&ld, &one, &err) == CR_OK, "%s", err.msg);
    test_load_body(&ld, &o, pt_text, NULL, 512, 1);
    ld.projector = pt_mmproj;
    ld.has_projector = true;
    CHECK_MSG(rn_engine_load(&ld, &two, &err) == CR_OK, "%s", err.msg);
    char *img[2] = {png_b64(97, 61, 1), png_b64(150, 90, 2)};
    capture_t a = {0}, b = {0}, t = {0};
    msg_done_body_t da, db, dt;
    if (one && two) {
        CHECK_MSG(chat(one, img, 2, &a, &da, &err) == CR_OK, "%s", err.msg);
        CHECK_MSG(chat(two, img, 2, &b, &db, &err) == CR_OK, "%s", err.msg);
        CHECK(chat(one, NULL, 0, &t, &dt, &err) == CR_OK);
        CHECK_EQ_INT(da.prompt_eval_count, db.prompt_eval_count);
        /* 14 + 17 rows and [IMG_END] (one token now) after each image */
        CHECK_EQ_INT(da.prompt_eval_count, dt.prompt_eval_count + 14 + 17 + 2);
        CHECK(a.logprobs.data && b.logprobs.data);
        CHECK_EQ_STR(a.logprobs.data ? a.logprobs.data : "", b.logprobs.data ? b.logprobs.data : "");
        /* and the image matters to the answer */
        CHECK(t.logprobs.data && a.logprobs.data && strcmp(t.logprobs.data, a.logprobs.data));
    }
    cap_free(&a), cap_free(&b), cap_free(&t);
    free(img[0]), free(img[1]);
    rn_engine_destroy(&one);
    rn_engine_destroy(&two);
    /* the scheduler counts the tower: weights, the q/k copies, the
     * activations of the largest image, the image cache */
    sch_estimate_t est = {0};
    CHECK(cr_gguf_open(pt_single, &g, &err) == CR_OK);
    CHECK(g && cr_vision_embedded(g, &ve, &err) == CR_OK &&
          sch_estimate_add_embedded_vision(&est, &ve, &err) == CR_OK);
    cr_gguf_close(&g);
    sch_estimate_t est2 = {0};
    CHECK(cr_gguf_open(pt_mmproj, &g, &err) == CR_OK);
    CHECK(g && sch_estimate_add_projector(&est2, g, &err) == CR_OK);
    cr_gguf_close(&g);
    /* the mmproj's count plus the copies, less its break tensor (E floats) */
    CHECK_MSG(est.projector_bytes == est2.projector_bytes + (int64_t)ve.copy_bytes - 64 * 4,
              "single %" PRId64 ", mmproj %" PRId64, est.projector_bytes,
              est2.projector_bytes);
}

/* A single file whose tower is incomplete or misshapen, or whose
 * vocabulary lacks [IMG_BREAK], is named by the header check; it loads as
 * a text model and an image gets Ollama's "does not support images". So
 * does Ollama's file with only a stub of a tower. */
static void test_single_broken(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/pt-broken.gguf", dir_g);
    const struct {
        test_edit_t how;
        const char *name, *said;
    } cases[] = {
        {TEST_EDIT_DROP, "v.blk.1.attn_k.weight", "tensor 'v.blk.1.attn_k.weight' is missing"},
        {TEST_EDIT_RESHAPE, "mm.patch_merger.merging_layer.weight",
         "tensor 'mm.patch_merger.merging_layer.weight' is not 64 x 256"},
        {TEST_EDIT_TOKEN, "[IMG_BREAK]", "the vocabulary lacks [IMG_BREAK]"},
        {TEST_EDIT_DROP, "v.encoder_norm.weight", "tensor 'v.encoder_norm.weight' is missing"},
    };
    cr_err_t err = {0};
    for (size_t i = 0; i <= CR_ARRAY_LEN(cases); i++) {
        if (i < CR_ARRAY_LEN(cases)) {
            CHECK(test_gguf_edit(pt_single, path, cases[i].how, cases[i].name));
            cr_gguf_t *g = NULL;
            CHECK(cr_gguf_open(path, &g, &err) == CR_OK);
            CHECK(g && cr_vision_embedded(g, NULL, &err) == CR_E_INVALID);
            CHECK_MSG(strstr(err.msg, cases[i].said), "%s", err.msg);
            cr_gguf_close(&g);
        } else {
            /* Ollama's mistral3 with a stub of a tower */
            rn_synth_opts_t so;
            rn_synth_defaults(&so);
            so.arch = "mistral3";
            so.vision_stub = true;
            CHECK(rn_synth_write(&so, path, &err) == CR_OK);
        }
        msg_options_t o;
        msg_load_body_t ld;
        test_load_body(&ld, &o, path, NULL, 256, 1);
        rn_engine_t *e = NULL;
        CHECK_MSG(rn_engine_load(&ld, &e, &err) == CR_OK, "%s", err.msg);
        if (!e)
            continue;
        char *img = png_b64(28, 28, 1);
        capture_t c = {0};
        msg_done_body_t d;
        CHECK(chat(e, &img, 1, &c, &d, &err) == CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "does not support images"), "%s", err.msg);
        cap_free(&c);
        CHECK(chat(e, NULL, 0, &c, &d, &err) == CR_OK); /* text still works */
        cap_free(&c);
        free(img);
        rn_engine_destroy(&e);
    }
}

/* A projector type nobody runs yet is refused at load, naming it. */
static void test_unsupported(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/other.gguf", dir_g);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_gguf_writer_add_str(w, "general.architecture", "clip", NULL);
    cr_gguf_writer_add_bool(w, "clip.has_vision_encoder", true, NULL);
    cr_gguf_writer_add_str(w, "clip.projector_type", "idefics3", NULL);
    cr_err_t err = {0};
    CHECK(cr_gguf_writer_write(w, path, &err) == CR_OK);
    cr_gguf_writer_destroy(&w);
    cr_status_t st;
    rn_engine_t *e = load_engine(path, 256, &st, &err);
    CHECK(st == CR_E_UNSUPPORTED && e == NULL);
    CHECK_MSG(strstr(err.msg, "projector type 'idefics3' is not supported yet") != NULL, "%s",
              err.msg);
    rn_engine_destroy(&e);
}

int main(void)
{
    if (!mkdtemp(dir_g))
        return 1;
    snprintf(text_path, sizeof text_path, "%s/text.gguf", dir_g);
    snprintf(proj_path, sizeof proj_path, "%s/mmproj.gguf", dir_g);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.arch = "mistral3";
    rn_synth_clip_opts_t co;
    rn_synth_clip_defaults(&co);
    cr_err_t err = {0};
    if (rn_synth_write(&so, text_path, &err) || rn_synth_pixtral_write(&co, proj_path, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return 1;
    }
    int n_suffix = 0;
    test_ids(&n_suffix);
    test_requests(n_suffix);
    test_tool();
    test_estimate();
    test_cache();
    test_single_file();
    test_single_broken();
    test_unsupported();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("engine_pixtral");
}
