/* test_engine_qwen2vl.c: a qwen2.5-vl model (a qwen2vl text model, which
 * ropes with M-RoPE, and a qwen2.5-vl projector, whose images take tokens
 * by their size) answering generate requests with images in the engine.
 *
 * - an image takes its grid's tokens (300x200: 11 x 7 = 77) plus the
 *   <|vision_start|> / <|vision_end|> text around it, as mtmd lays it out;
 *   a 97x61 one takes 12;
 * - the first answer token's logprob equals one computed here without the
 *   engine: the same text ids (from the returned context), the image's
 *   rows from the tower, mtmd's M-RoPE positions worked out here
 *   (text one past the previous token, the image at (p, p + row, p + col),
 *   text after it from p + max(11, 7)); within 1e-4 (the same kernels, a
 *   different batch split). The same without the image's positions misses
 *   by more than 1e-2, so the comparison sees them;
 * - a repeated image comes from the cache (by content), the same answer;
 *   two images of different sizes in one prompt;
 * - the scheduler's estimate of the projector covers its weights, the
 *   image cache and the tower's buffers for the largest image (4096
 *   merged patches), extrapolated from those a 300x200 image takes (every
 *   buffer grows with the patches);
 * - Ollama's single file of the same model (arch qwen25vl, the tower
 *   inside under its names) gives the same rows bit for bit and the same
 *   answer; a missing or misshapen tower tensor is named, text still
 *   works and an image gets Ollama's "does not support images";
 * - a Qwen2-VL projector ("qwen2vl_merger") takes the same tokens per
 *   image as 2.5's and its image moves the answer. */
#include "lib/prelude.h"

#include <math.h>
#include <png.h>

#include "lib/buf.h"
#include "lib/gguf.h"
#include "lib/vision_embedded.h"
#include "services/runner/backend/backend.h"
#include "services/runner/engine.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/text/tokenizer.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"
#include "services/runner/vision/vision.h"
#include "services/scheduler/estimate.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"
#include "tests/unit/gguf_edit.h"

static char dir_g[] = "/tmp/corral-test-engine-qwen2vl-XXXXXX";
static char text_path[256], proj_path[256], single_path[256];

static char *b64(const uint8_t *p, size_t n)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
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
    return s;
}

/* A w x h gradient PNG: its bytes (*png, *n; caller frees) and base64. */
static char *png_b64(int w, int h, uint8_t **png, size_t *n)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)((x * 7 + y * 3) % 256);
            p[1] = (uint8_t)((x * y) % 256);
            p[2] = (uint8_t)((255 - x * 2 - y) & 255);
        }
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    pi.width = (png_uint_32)w;
    pi.height = (png_uint_32)h;
    pi.format = PNG_FORMAT_RGB;
    png_alloc_size_t len = 0;
    png_image_write_to_memory(&pi, NULL, &len, 0, rgb, 0, NULL);
    uint8_t *buf = malloc(len);
    png_image_write_to_memory(&pi, buf, &len, 0, rgb, 0, NULL);
    char *s = b64(buf, len);
    free(rgb);
    *png = buf;
    *n = len;
    return s;
}

typedef struct capture {
    cr_buf_t text;
    cr_buf_t logprobs;
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

static cr_status_t gen(rn_engine_t *e, const char *prompt, char **images, size_t n_images,
                       capture_t *cp, msg_done_body_t *done, cr_err_t *err)
{
    msg_options_t o = {0};
    o.temperature = 0;
    o.has_temperature = true;
    o.num_predict = 3;
    o.has_num_predict = true;
    msg_t m;
    msg_init(&m, MSG_generate, "t");
    m.u.generate.model = "synth";
    m.u.generate.has_model = true;
    m.u.generate.prompt = (char *)prompt;
    m.u.generate.has_prompt = true;
    m.u.generate.images.v = images;
    m.u.generate.images.n = n_images;
    m.u.generate.has_images = n_images > 0;
    m.u.generate.options = &o;
    m.u.generate.has_options = true;
    m.u.generate.logprobs = true;
    m.u.generate.has_logprobs = true;
    cr_buf_init(&cp->text, 1 << 20);
    cr_buf_init(&cp->logprobs, 1 << 20);
    rn_sink_t sink = {cp, cap_chunk, never};
    memset(done, 0, sizeof *done);
    return rn_engine_generate(e, &m, &sink, done, err);
}

static void cap_free(capture_t *c)
{
    cr_buf_free(&c->text);
    cr_buf_free(&c->logprobs);
}

/* The first "logprob" value of the logprobs output (NAN when none). */
static double first_logprob(const capture_t *c)
{
    const char *p = c->logprobs.data ? strstr(c->logprobs.data, "\"logprob\":") : NULL;
    return p ? strtod(p + strlen("\"logprob\":"), NULL) : NAN;
}

/* Ids of text tokenized alone with special parsing, no BOS. */
static size_t marker_ids(const rn_tokenizer_t *tok, const char *text, int32_t *out, size_t cap)
{
    size_t n = 0;
    cr_err_t err = {0};
    CHECK(rn_tokenize(tok, text, strlen(text), false, true, out, cap, &n, &err) == CR_OK);
    return n;
}

/* The logprob of token `next` after ids [n] (image rows emb for the n_img
 * ids from index at, an nx x ny grid), with mtmd's M-RoPE positions, or
 * with plain positions when !mrope. Computed without the engine. */
static double reference_logprob(const int32_t *ids, int n, int at, int nx, int ny,
                                const float *emb, int32_t next, bool mrope)
{
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_ctx_t *c = NULL;
    cr_err_t err = {0};
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    CHECK_MSG(rn_model_load(text_path, be, &m, &err) == CR_OK, "%s", err.msg);
    rn_ctx_opts_t co = {.n_ctx = 512, .n_batch = 512};
    CHECK(m && rn_ctx_new(m, &co, &c, &err) == CR_OK);
    int32_t *pos = malloc(3 * (size_t)n * sizeof *pos);
    int32_t r = 0;
    for (int i = 0; i < n; i++) {
        int k = i - at;
        if (k >= 0 && k < nx * ny) {
            pos[3 * i] = at;
            pos[3 * i + 1] = at + k / nx;
            pos[3 * i + 2] = at + k % nx;
            r = at + (nx > ny ? nx : ny);
        } else {
            pos[3 * i] = pos[3 * i + 1] = pos[3 * i + 2] = r++;
        }
        if (!mrope)
            pos[3 * i] = pos[3 * i + 1] = pos[3 * i + 2] = i;
    }
    double lp = NAN;
    rn_ctx_span_t sp = {.seq = 0, .tokens = ids, .n = n, .pos = 0, .embd = emb,
                        .rope_pos = pos};
    if (c && rn_ctx_eval_batch(c, &sp, 1, &err) == CR_OK) {
        const float *lg = rn_ctx_logits(c);
        int V = rn_ctx_n_vocab(c);
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < V; i++)
            mx = fmax(mx, lg[i]);
        for (int i = 0; i < V; i++)
            sum += exp(lg[i] - mx);
        lp = lg[next] - mx - log(sum);
    }
    free(pos);
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    be_destroy(&be);
    return lp;
}

/* The image's rows straight from the tower of path (an mmproj, or
 * Ollama's single file). */
static float *tower_rows_of(const char *path, const uint8_t *png, size_t len, int *nx,
                            int *ny)
{
    be_backend_t *be = NULL;
    rn_clip_t *clip = NULL;
    rn_image_t *im = NULL;
    cr_err_t err = {0};
    float *px = NULL, *out = NULL;
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    CHECK_MSG(rn_clip_load(path, be, &clip, &err) == CR_OK, "%s: %s", path, err.msg);
    CHECK(rn_image_decode(png, len, 1u << 30, &im, &err) == CR_OK);
    rn_clip_layout_t L = {0};
    if (clip && im && rn_clip_layout(clip, im->width, im->height, &L, &err) == CR_OK) {
        px = malloc(3 * (size_t)L.width * L.height * sizeof *px);
        out = malloc((size_t)L.nx * L.ny * 64 * sizeof *out);
        CHECK(rn_clip_preprocess(clip, im, px, &err) == CR_OK);
        CHECK(rn_clip_encode_at(clip, &L, px, out, &err) == CR_OK);
    }
    *nx = L.nx, *ny = L.ny;
    free(px);
    rn_image_destroy(&im);
    rn_clip_destroy(&clip);
    be_destroy(&be);
    return out;
}

static float *tower_rows(const uint8_t *png, size_t len, int *nx, int *ny)
{
    return tower_rows_of(proj_path, png, len, nx, ny);
}

static void test_generate(void)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, text_path, NULL, 512, 1);
    ld.projector = proj_path;
    ld.has_projector = true;
    rn_engine_t *e = NULL;
    cr_err_t err = {0};
    CHECK_MSG(rn_engine_load(&ld, &e, &err) == CR_OK, "load: %s", err.msg);
    if (!e)
        return;
    /* the markers' ids, as the engine tokenizes them */
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    CHECK(cr_gguf_open(text_path, &g, &err) == CR_OK);
    CHECK(g && rn_tokenizer_load(g, &tok, &err) == CR_OK);
    int32_t beg[64], end[64];
    size_t n_beg = tok ? marker_ids(tok, "<|vision_start|>", beg, 64) : 0;
    size_t n_end = tok ? marker_ids(tok, "<|vision_end|>", end, 64) : 0;
    CHECK(n_beg > 0 && n_end > 0);

    uint8_t *png1 = NULL, *png2 = NULL;
    size_t len1 = 0, len2 = 0;
    char *img1 = png_b64(300, 200, &png1, &len1), *img2 = png_b64(97, 61, &png2, &len2);
    capture_t t = {0}, a = {0}, b = {0}, c = {0};
    msg_done_body_t d;
    CHECK_MSG(gen(e, "hello", NULL, 0, &t, &d, &err) == CR_OK, "%s", err.msg);
    int64_t text_only = d.prompt_eval_count;
    CHECK_MSG(gen(e, "hello", &img1, 1, &a, &d, &err) == CR_OK, "%s", err.msg);
    int64_t with_img = d.prompt_eval_count;
    fprintf(stderr, "prompt: %" PRId64 " tokens alone, %" PRId64 " with a 300x200 image "
            "(markers %zu + %zu)\n", text_only, with_img, n_beg, n_end);
    CHECK_EQ_INT(with_img, text_only + 77 + (int64_t)(n_beg + n_end));

    /* the first answer token's logprob, recomputed without the engine from
     * the context's text ids with the image put back after the begin marker */
    size_t n_text = d.has_context ? d.context.n : 0;
    int n_prompt = (int)with_img;
    int at = -1;
    for (size_t i = 0; i + n_beg <= n_text && at < 0; i++)
        if (!memcmp(d.context.v + i, beg, n_beg * sizeof *beg))
            at = (int)(i + n_beg);
    CHECK(at >= 0 && (int)n_text > n_prompt - 77);
    int nx = 0, ny = 0;
    float *emb = tower_rows(png1, len1, &nx, &ny);
    CHECK(nx == 11 && ny == 7);
    if (at >= 0 && emb && (int)n_text > n_prompt - 77) {
        int32_t *ids = malloc((size_t)n_prompt * sizeof *ids);
        memcpy(ids, d.context.v, (size_t)at * sizeof *ids);
        for (int k = 0; k < 77; k++)
            ids[at + k] = -1 - k;
        memcpy(ids + at + 77, d.context.v + at, (size_t)(n_prompt - 77 - at) * sizeof *ids);
        int32_t next = d.context.v[n_prompt - 77];
        double want = reference_logprob(ids, n_prompt, at, nx, ny, emb, next, true);
        double flat = reference_logprob(ids, n_prompt, at, nx, ny, emb, next, false);
        double got = first_logprob(&a);
        fprintf(stderr, "first token %d: logprob %.6f, reference %.6f, without the image's "
                "positions %.6f\n", next, got, want, flat);
        CHECK_MSG(fabs(got - want) < 1e-4, "logprob %.6f, reference %.6f", got, want);
        CHECK_MSG(fabs(flat - want) > 1e-2, "positions not seen (%.6f vs %.6f)", flat, want);
        free(ids);
    }
    free(emb);

    /* the same image again: the cache (or the slot's prefix), same answer */
    rn_engine_stats_t s;
    CHECK(gen(e, "hello", &img2, 1, &b, &d, &err) == CR_OK);
    CHECK_EQ_INT(d.prompt_eval_count, text_only + 12 + (int64_t)(n_beg + n_end));
    CHECK(gen(e, "hello", &img1, 1, &c, &d, &err) == CR_OK);
    CHECK_EQ_STR(a.logprobs.data ? a.logprobs.data : "", c.logprobs.data ? c.logprobs.data : "");
    rn_engine_get_stats(e, &s);
    CHECK_EQ_INT(s.images_encoded, 2);
    CHECK_EQ_INT(s.images_cached, 1);
    cap_free(&b);
    cap_free(&c);
    /* two images of different sizes in one prompt */
    char *two[2] = {img1, img2};
    CHECK_MSG(gen(e, "compare", two, 2, &c, &d, &err) == CR_OK, "%s", err.msg);
    CHECK(d.prompt_eval_count >= 77 + 12 + 2 * (int64_t)(n_beg + n_end));
    cap_free(&c);
    cap_free(&t);
    cap_free(&a);
    free(img1), free(img2), free(png1), free(png2);
    rn_tokenizer_destroy(&tok);
    cr_gguf_close(&g);
    rn_engine_destroy(&e);
}

static void test_estimate(void)
{
    cr_err_t err = {0};
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open(proj_path, &g, &err) == CR_OK);
    sch_estimate_t est = {0};
    CHECK(g && sch_estimate_add_projector(&est, g, &err) == CR_OK);
    cr_gguf_close(&g);
    be_backend_t *be = NULL;
    rn_clip_t *c = NULL;
    CHECK(be_cpu_new(1, &be, &err) == CR_OK && rn_clip_load(proj_path, be, &c, &err) == CR_OK);
    if (!c) {
        be_destroy(&be);
        return;
    }
    uint64_t w0 = 0, b0 = 0, w1 = 0, b1 = 0;
    be_memory_used(be, &w0, &b0);
    uint8_t *png = NULL;
    size_t len = 0;
    free(png_b64(300, 200, &png, &len));
    rn_image_t *im = NULL;
    CHECK(rn_image_decode(png, len, 1u << 30, &im, &err) == CR_OK);
    rn_clip_layout_t L;
    CHECK(rn_clip_layout(c, im->width, im->height, &L, &err) == CR_OK);
    float *px = malloc(3 * (size_t)L.width * L.height * sizeof *px);
    float *out = malloc((size_t)L.nx * L.ny * 64 * sizeof *out);
    CHECK(rn_clip_preprocess(c, im, px, &err) == CR_OK);
    CHECK(rn_clip_encode_at(c, &L, px, out, &err) == CR_OK);
    be_memory_used(be, &w1, &b1);
    double per_patch = (double)(b1 - b0) / (4.0 * L.nx * L.ny);
    /* on the host: the patches and the pixels (3 x 14 x 14 floats each),
     * 4 rope positions */
    double largest = (per_patch + 2 * 3 * 14 * 14 * 4 + 16) * 16384;
    double need = (double)rn_clip_weight_bytes(c) + (double)SCH_VISION_CACHE_BYTES + largest;
    fprintf(stderr, "estimate %.1f MiB; weights + cache + largest image %.1f MiB\n",
            (double)est.projector_bytes / 1048576, need / 1048576);
    CHECK_MSG(b1 > b0 && (double)est.projector_bytes >= need, "estimate %lld < %.0f",
              (long long)est.projector_bytes, need);
    free(px), free(out), free(png);
    rn_image_destroy(&im);
    rn_clip_destroy(&c);
    be_destroy(&be);
}

/* Ollama's single file (the same tower inside the model file, arch
 * qwen25vl, its names and keys, the full-attention blocks as a list, the
 * M-RoPE sections as rope.mrope_section) against llama.cpp's pair: the
 * same rows bit for bit (tolerance 0: the same kernels over the same
 * numbers; neither converter reorders rows), the same answer with an
 * image (which sees the M-RoPE sections), the same estimate. */
static void test_single_file(void)
{
    cr_err_t err = {0};
    cr_gguf_t *g = NULL;
    cr_vision_embedded_t ve;
    CHECK(cr_gguf_open(single_path, &g, &err) == CR_OK);
    CHECK_MSG(g && cr_vision_embedded(g, &ve, &err) == CR_OK, "%s", err.msg);
    if (g) {
        CHECK_EQ_INT(ve.family, CR_VISION_QWEN25VL);
        CHECK_EQ_INT(ve.ffn, 96); /* from the gate's rows: no key in Ollama's file */
        CHECK_EQ_INT(ve.proj_hidden, 256);
        CHECK_EQ_INT(ve.n_embd, 64);
        CHECK(!cr_gguf_kv_find(g, "qwen25vl.rope.dimension_sections") &&
              cr_gguf_kv_find(g, "qwen25vl.rope.mrope_section"));
    }
    cr_gguf_close(&g);
    uint8_t *png = NULL;
    size_t n = 0;
    char *img = png_b64(300, 200, &png, &n);
    int nx1 = 0, ny1 = 0, nx2 = 0, ny2 = 0;
    float *want = tower_rows_of(proj_path, png, n, &nx1, &ny1);
    float *got = tower_rows_of(single_path, png, n, &nx2, &ny2);
    CHECK(nx1 == 11 && ny1 == 7 && nx2 == 11 && ny2 == 7);
    CHECK(want && got && !memcmp(want, got, (size_t)77 * 64 * sizeof *got));
    free(want), free(got);
    msg_options_t o;
    msg_load_body_t ld;
    rn_engine_t *one = NULL, *two = NULL;
    test_load_body(&ld, &o, single_path, NULL, 512, 1);
    CHECK_MSG(rn_engine_load(&ld, &one, &err) == CR_OK, "%s", err.msg);
    test_load_body(&ld, &o, text_path, NULL, 512, 1);
    ld.projector = proj_path;
    ld.has_projector = true;
    CHECK_MSG(rn_engine_load(&ld, &two, &err) == CR_OK, "%s", err.msg);
    capture_t a = {0}, b = {0};
    msg_done_body_t da, db;
    if (one && two) {
        CHECK_MSG(gen(one, "look: ", &img, 1, &a, &da, &err) == CR_OK, "%s", err.msg);
        CHECK_MSG(gen(two, "look: ", &img, 1, &b, &db, &err) == CR_OK, "%s", err.msg);
        CHECK_EQ_INT(da.prompt_eval_count, db.prompt_eval_count);
        CHECK(a.logprobs.data != NULL);
        CHECK_EQ_STR(a.logprobs.data ? a.logprobs.data : "", b.logprobs.data ? b.logprobs.data : "");
    }
    cap_free(&a), cap_free(&b);
    rn_engine_destroy(&one);
    rn_engine_destroy(&two);
    free(img), free(png);
    sch_estimate_t e1 = {0}, e2 = {0};
    CHECK(cr_gguf_open(single_path, &g, &err) == CR_OK);
    CHECK(g && cr_vision_embedded(g, &ve, &err) == CR_OK &&
          sch_estimate_add_embedded_vision(&e1, &ve, &err) == CR_OK);
    cr_gguf_close(&g);
    CHECK(cr_gguf_open(proj_path, &g, &err) == CR_OK);
    CHECK(g && sch_estimate_add_projector(&e2, g, &err) == CR_OK);
    cr_gguf_close(&g);
    CHECK_MSG(e1.projector_bytes == e2.projector_bytes, "single %" PRId64 ", mmproj %" PRId64,
              e1.projector_bytes, e2.projector_bytes);
}

/* A single file whose tower misses a tensor or has one misshapen is named
 * by the header check; it answers text, and an image with Ollama's 400. */
static void test_single_broken(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/broken.gguf", dir_g);
    const struct {
        test_edit_t how;
        const char *name, *said;
    } cases[] = {
        {TEST_EDIT_DROP, "v.merger.mlp.0.bias", "tensor 'v.merger.mlp.0.bias' is missing"},
        {TEST_EDIT_RESHAPE, "v.blk.2.attn_v.weight",
         "tensor 'v.blk.2.attn_v.weight' is not 64 x 64"},
        {TEST_EDIT_DROP, "v.patch_embd_1.weight", "tensor 'v.patch_embd_1.weight' is missing"},
    };
    cr_err_t err = {0};
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        CHECK(test_gguf_edit(single_path, path, cases[i].how, cases[i].name));
        cr_gguf_t *g = NULL;
        CHECK(cr_gguf_open(path, &g, &err) == CR_OK);
        CHECK(g && cr_vision_embedded(g, NULL, &err) == CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, cases[i].said), "%s", err.msg);
        cr_gguf_close(&g);
        msg_options_t o;
        msg_load_body_t ld;
        test_load_body(&ld, &o, path, NULL, 512, 1);
        rn_engine_t *e = NULL;
        CHECK_MSG(rn_engine_load(&ld, &e, &err) == CR_OK, "%s", err.msg);
        if (!e)
            continue;
        uint8_t *png = NULL;
        size_t n = 0;
        char *img = png_b64(56, 56, &png, &n);
        capture_t c = {0};
        msg_done_body_t d;
        CHECK(gen(e, "look: ", &img, 1, &c, &d, &err) == CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "does not support images"), "%s", err.msg);
        cap_free(&c);
        CHECK(gen(e, "look: ", NULL, 0, &c, &d, &err) == CR_OK);
        cap_free(&c);
        free(img), free(png);
        rn_engine_destroy(&e);
    }
}

/* A Qwen2-VL projector (llama.cpp's "qwen2vl_merger") beside the same
 * text model: an image takes the same tokens as with 2.5's (the same
 * resize and merger grid, the same markers) and moves the answer. */
static void test_qwen2_projector(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/qwen2.mmproj.gguf", dir_g);
    rn_synth_qwen2vl_opts_t po;
    rn_synth_qwen2vl_defaults(&po);
    po.seed = 11;
    po.qwen2 = true;
    cr_err_t err = {0};
    CHECK_MSG(rn_synth_qwen2vl_write(&po, path, &err) == CR_OK, "%s", err.msg);
    msg_options_t o;
    msg_load_body_t ld;
    rn_engine_t *e2 = NULL, *e25 = NULL;
    test_load_body(&ld, &o, text_path, NULL, 512, 1);
    ld.projector = path;
    ld.has_projector = true;
    CHECK_MSG(rn_engine_load(&ld, &e2, &err) == CR_OK, "%s", err.msg);
    ld.projector = proj_path;
    CHECK_MSG(rn_engine_load(&ld, &e25, &err) == CR_OK, "%s", err.msg);
    uint8_t *png = NULL;
    size_t n = 0;
    char *img = png_b64(300, 200, &png, &n);
    capture_t a = {0}, b = {0}, t = {0};
    msg_done_body_t da, db, dt;
    if (e2 && e25) {
        CHECK_MSG(gen(e2, "look: ", &img, 1, &a, &da, &err) == CR_OK, "%s", err.msg);
        CHECK_MSG(gen(e25, "look: ", &img, 1, &b, &db, &err) == CR_OK, "%s", err.msg);
        CHECK(gen(e2, "look: ", NULL, 0, &t, &dt, &err) == CR_OK);
        CHECK_EQ_INT(da.prompt_eval_count, db.prompt_eval_count);
        CHECK(da.prompt_eval_count >= dt.prompt_eval_count + 77);
        CHECK(a.logprobs.data && t.logprobs.data && strcmp(a.logprobs.data, t.logprobs.data));
    }
    cap_free(&a), cap_free(&b), cap_free(&t);
    free(img), free(png);
    rn_engine_destroy(&e2);
    rn_engine_destroy(&e25);
}

int main(void)
{
    if (!mkdtemp(dir_g))
        return 1;
    snprintf(text_path, sizeof text_path, "%s/text.gguf", dir_g);
    snprintf(proj_path, sizeof proj_path, "%s/mmproj.gguf", dir_g);
    snprintf(single_path, sizeof single_path, "%s/single.gguf", dir_g);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.arch = "qwen2vl";
    so.seed = 7;
    so.weight_std = 0.1f;  /* sharp enough for the image's positions to */
    so.rope_base = 100.0f; /* change the answer */
    rn_synth_qwen2vl_opts_t po;
    rn_synth_qwen2vl_defaults(&po);
    po.seed = 11;
    cr_err_t err = {0};
    CHECK_MSG(rn_synth_write(&so, text_path, &err) == CR_OK, "%s", err.msg);
    CHECK_MSG(rn_synth_qwen2vl_write(&po, proj_path, &err) == CR_OK, "%s", err.msg);
    CHECK_MSG(rn_synth_qwen2vl_embed(&po, text_path, single_path, &err) == CR_OK, "%s",
              err.msg);
    test_generate();
    test_estimate();
    test_single_file();
    test_single_broken();
    test_qwen2_projector();
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("engine_qwen2vl");
}
