/* test_engine_vision.c: images in requests to a model with a projector
 * (a synthetic llama text model and llava-shaped projector), without the
 * bus.
 *
 * Checks: an image's embeddings enter the forward pass exactly where its
 * negative ids stand (evaluating a token's own embedding row as an
 * "image" gives bit-identical logits to the token); a generate and a chat
 * with images count the image's tokens in prompt_eval_count; the image
 * changes the answer's logprobs and the same image gives the same answer;
 * a repeated image is not encoded again (the slot's cached prefix, then
 * the per-runner cache by content hash); bad images, bad base64, a prompt
 * that does not fit num_ctx and a [img-N] past the images are clear
 * CR_E_INVALID errors. */
#include "lib/prelude.h"

#include <png.h>

#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/engine.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/tools.h"
#include "services/runner/vision/clip.h"
#include "services/runner/vision/image.h"
#include "services/runner/vision/vision.h"
#include "services/scheduler/estimate.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"

static char dir_g[] = "/tmp/corral-test-engine-vision-XXXXXX";
static char text_path[256], proj_path[256];

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

/* A w x h PNG, base64; `seed` varies the pixels. */
static char *png_b64(int w, int h, int seed)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++)
        rgb[i] = (uint8_t)((i * 31 + seed * 97) ^ (i >> 5));
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
    char *s = b64(buf, n);
    free(buf);
    free(rgb);
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
    o.num_predict = 4;
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
    m.u.generate.top_logprobs = 3;
    m.u.generate.has_top_logprobs = true;
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

static rn_engine_t *load_vision(int64_t num_ctx)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, text_path, NULL, num_ctx, 1);
    ld.projector = proj_path;
    ld.has_projector = true;
    rn_engine_t *e = NULL;
    cr_err_t err = {0};
    CHECK_MSG(rn_engine_load(&ld, &e, &err) == CR_OK, "load: %s", err.msg);
    return e;
}

/* An "image" whose rows are token 5's own embedding gives the logits of
 * token 5, bit for bit (the CPU backend's get_rows copies F32 rows). */
static void test_forward_injection(void)
{
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_ctx_t *c = NULL;
    cr_err_t err = {0};
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    CHECK_MSG(rn_model_load(text_path, be, &m, &err) == CR_OK, "%s", err.msg);
    rn_ctx_opts_t co = {.n_ctx = 32, .n_seq = 2};
    CHECK(m && rn_ctx_new(m, &co, &c, &err) == CR_OK);
    if (!c) {
        rn_model_destroy(&m);
        be_destroy(&be);
        return;
    }
    const cr_gguf_tensor_t *te = cr_gguf_tensor_find(rn_model_gguf(m), "token_embd.weight");
    CHECK(te && te->type == CR_TYPE_F32);
    int dim = rn_ctx_embd_dim(c), V = rn_ctx_n_vocab(c);
    float rows[2 * 64];
    CHECK(dim == 64);
    memcpy(rows, (const float *)te->data + 5 * dim, sizeof(float) * (size_t)dim);
    memcpy(rows + dim, (const float *)te->data + 9 * dim, sizeof(float) * (size_t)dim);
    int32_t text[5] = {1, 5, 7, 9, 3}, img[5] = {1, -1, 7, -2, 3};
    rn_ctx_span_t a = {.seq = 0, .tokens = text, .n = 5, .pos = 0};
    rn_ctx_span_t b = {.seq = 1, .tokens = img, .n = 5, .pos = 0, .embd = rows};
    CHECK(rn_ctx_eval_batch(c, &a, 1, &err) == CR_OK);
    CHECK(rn_ctx_eval_batch(c, &b, 1, &err) == CR_OK);
    CHECK(!memcmp(rn_ctx_seq_logits(c, 0), rn_ctx_seq_logits(c, 1), sizeof(float) * (size_t)V));
    /* Negative ids without rows are refused. */
    rn_ctx_span_t bad = {.seq = 1, .tokens = img, .n = 5, .pos = 0};
    CHECK(rn_ctx_eval_batch(c, &bad, 1, &err) == CR_E_INVALID);
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    be_destroy(&be);
}

static void test_requests(void)
{
    rn_engine_t *e = load_vision(512);
    if (!e)
        return;
    char *img1 = png_b64(40, 30, 1), *img2 = png_b64(40, 30, 2);
    capture_t a = {0}, b = {0}, c = {0}, t = {0};
    msg_done_body_t d;
    cr_err_t err = {0};
    rn_engine_stats_t s;

    CHECK_MSG(gen(e, "hello", NULL, 0, &t, &d, &err) == CR_OK, "%s", err.msg);
    int64_t text_only = d.prompt_eval_count;
    CHECK_MSG(gen(e, "hello", &img1, 1, &a, &d, &err) == CR_OK, "%s", err.msg);
    CHECK_MSG(d.prompt_eval_count >= text_only + 64, "%" PRId64 " tokens", d.prompt_eval_count);
    /* The returned context holds no image ids (a client sends it back). */
    bool ids_ok = d.has_context && d.context.n > 0;
    for (size_t i = 0; i < d.context.n; i++)
        ids_ok &= d.context.v[i] >= 0;
    CHECK(ids_ok);
    rn_engine_get_stats(e, &s);
    CHECK_EQ_INT(s.images_encoded, 1);
    CHECK_EQ_INT(s.images_cached, 0);

    /* Another image: other logprobs. The first again: the same answer;
     * the slot's prefix now holds the second image, so the first comes
     * from the cache by content hash, not the tower. */
    CHECK(gen(e, "hello", &img2, 1, &b, &d, &err) == CR_OK);
    CHECK(a.logprobs.data && b.logprobs.data && strcmp(a.logprobs.data, b.logprobs.data));
    CHECK(gen(e, "hello", &img1, 1, &c, &d, &err) == CR_OK);
    CHECK_EQ_STR(a.logprobs.data ? a.logprobs.data : "", c.logprobs.data ? c.logprobs.data : "");
    CHECK_EQ_STR(a.text.data ? a.text.data : "", c.text.data ? c.text.data : "");
    rn_engine_get_stats(e, &s);
    CHECK_EQ_INT(s.images_encoded, 2);
    CHECK_EQ_INT(s.images_cached, 1);
    cap_free(&b);
    cap_free(&c);
    /* The same request again: its image lies in the slot's cached prefix,
     * neither encoded nor fetched. */
    CHECK(gen(e, "hello", &img1, 1, &c, &d, &err) == CR_OK);
    rn_engine_get_stats(e, &s);
    CHECK_EQ_INT(s.images_encoded, 2);
    CHECK_EQ_INT(s.images_cached, 1);
    cap_free(&c);

    /* [img] places the image inside the prompt; a known image: cached. */
    CHECK_MSG(gen(e, "look at [img] please", &img2, 1, &c, &d, &err) == CR_OK, "%s", err.msg);
    rn_engine_get_stats(e, &s);
    CHECK_EQ_INT(s.images_encoded, 2);
    CHECK_EQ_INT(s.images_cached, 2);
    cap_free(&c);

    /* Two images in one prompt. */
    char *two[2] = {img1, img2};
    CHECK(gen(e, "compare", two, 2, &c, &d, &err) == CR_OK);
    CHECK(d.prompt_eval_count >= text_only + 128);
    cap_free(&c);

    /* Bad input. */
    char notimg[] = "aGVsbG8sIHdvcmxk"; /* "hello, world" */
    CHECK(gen(e, "hello", (char **)&(char *){notimg}, 1, &c, &d, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "not an image") != NULL, "%s", err.msg);
    cap_free(&c);
    char badb64[] = "@@@@";
    CHECK(gen(e, "hello", (char **)&(char *){badb64}, 1, &c, &d, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "base64") != NULL, "%s", err.msg);
    cap_free(&c);
    CHECK(gen(e, "[img-3] hello", &img1, 1, &c, &d, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "invalid image index: 3") != NULL, "%s", err.msg);
    cap_free(&c);
    /* The engine still answers afterwards. */
    CHECK(gen(e, "hello", &img1, 1, &c, &d, &err) == CR_OK);
    cap_free(&c);

    cap_free(&a);
    cap_free(&t);
    free(img1);
    free(img2);
    rn_engine_destroy(&e);

    /* 64 image tokens do not fit num_ctx 48. */
    e = load_vision(48);
    img1 = png_b64(8, 8, 3);
    CHECK(gen(e, "hi", &img1, 1, &c, &d, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "num_ctx 48") != NULL, "%s", err.msg);
    cap_free(&c);
    free(img1);
    rn_engine_destroy(&e);
}

/* A chat whose images do not all fit num_ctx drops its oldest messages
 * (history truncation counts images), not the request. */
static void test_history_truncation(void)
{
    rn_engine_t *e = load_vision(150);
    if (!e)
        return;
    char *img = png_b64(8, 8, 6);
    msg_message_t m[3];
    memset(m, 0, sizeof m);
    char *one[1] = {img};
    for (int i = 0; i < 3; i++) {
        m[i].role = i == 1 ? "assistant" : "user";
        m[i].has_role = true;
        m[i].content = i == 1 ? "ok" : "look";
        m[i].has_content = true;
        if (i != 1) {
            m[i].images.v = one;
            m[i].images.n = 1;
            m[i].has_images = true;
        }
    }
    msg_options_t o = {0};
    o.num_predict = 1;
    o.has_num_predict = true;
    msg_t r;
    msg_init(&r, MSG_chat, "t");
    r.u.chat.model = "synth";
    r.u.chat.has_model = true;
    r.u.chat.messages.v = m;
    r.u.chat.messages.n = 3;
    r.u.chat.has_messages = true;
    r.u.chat.options = &o;
    r.u.chat.has_options = true;
    capture_t c = {0};
    cr_buf_init(&c.text, 1 << 20);
    cr_buf_init(&c.logprobs, 1 << 20);
    rn_sink_t sink = {&c, cap_chunk, never};
    msg_done_body_t d = {0};
    cr_err_t err = {0};
    CHECK_MSG(rn_engine_generate(e, &r, &sink, &d, &err) == CR_OK, "%s", err.msg);
    CHECK(d.prompt_eval_count >= 64 && d.prompt_eval_count < 128); /* one image */
    cap_free(&c);
    free(img);
    rn_engine_destroy(&e);
}

/* A model whose only template is a GGUF Jinja one (which does not place
 * images) refuses them instead of dropping them. */
static void test_jinja_refuses(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/jinja.gguf", dir_g);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}";
    cr_err_t err = {0};
    CHECK(rn_synth_write(&so, path, &err) == CR_OK);
    msg_options_t mo;
    msg_load_body_t ld;
    test_load_body(&ld, &mo, path, NULL, 256, 1);
    ld.projector = proj_path;
    ld.has_projector = true;
    rn_engine_t *e = NULL;
    CHECK_MSG(rn_engine_load(&ld, &e, &err) == CR_OK, "%s", err.msg);
    if (!e)
        return;
    char *img = png_b64(8, 8, 4);
    capture_t c = {0};
    msg_done_body_t d;
    CHECK(gen(e, "hi", &img, 1, &c, &d, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "no place") != NULL, "%s", err.msg);
    cap_free(&c);
    free(img);
    rn_engine_destroy(&e);
}

static long file_size(const char *path)
{
    FILE *f = fopen(path, "rb");
    long n = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
    if (f)
        fclose(f);
    return n;
}

/* corral-runner image-embed: the embeddings file holds what rn_clip_encode
 * gives (bit for bit), the pixel file the preprocessed tensor, the logits
 * file one row of the vocabulary; a prompt without [img-0] fails. */
static void test_tool(void)
{
    char png[300], emb[300], px[300], lg[300];
    snprintf(png, sizeof png, "%s/t.png", dir_g);
    snprintf(emb, sizeof emb, "%s/emb.f32", dir_g);
    snprintf(px, sizeof px, "%s/px.f32", dir_g);
    snprintf(lg, sizeof lg, "%s/logits.f32", dir_g);
    char *b = png_b64(30, 20, 5);
    uint8_t *bytes = NULL;
    size_t n = 0;
    CHECK(cr_base64_decode(b, strlen(b), &bytes, &n, NULL) == CR_OK);
    FILE *f = fopen(png, "wb");
    CHECK(f && fwrite(bytes, 1, n, f) == n);
    if (f)
        fclose(f);
    CHECK_EQ_INT(rn_tool_image_embed(text_path, proj_path, png, emb, px, 1,
                                     "describe [img-0] now", lg), 0);
    CHECK_EQ_INT(file_size(emb), 64 * 64 * 4);
    CHECK_EQ_INT(file_size(px), 3 * 112 * 112 * 4);
    CHECK_EQ_INT(file_size(lg), rn_synth_builtin_vocab_size() * 4);
    /* the same numbers as the library's */
    be_backend_t *be = NULL;
    rn_clip_t *c = NULL;
    rn_image_t *im = NULL;
    cr_err_t err = {0};
    float *want = malloc(64 * 64 * 4), *got = malloc(64 * 64 * 4);
    float *pix = malloc(3 * 112 * 112 * 4);
    CHECK(be_cpu_new(1, &be, &err) == CR_OK && rn_clip_load(proj_path, be, &c, &err) == CR_OK);
    CHECK(rn_image_decode(bytes, n, rn_image_max_pixels(), &im, &err) == CR_OK);
    CHECK(c && im && rn_clip_preprocess(c, im, pix, &err) == CR_OK &&
          rn_clip_encode(c, pix, want, &err) == CR_OK);
    f = fopen(emb, "rb");
    CHECK(f && fread(got, 4, 64 * 64, f) == 64 * 64);
    if (f)
        fclose(f);
    CHECK(!memcmp(got, want, 64 * 64 * 4));
    rn_image_destroy(&im);
    rn_clip_destroy(&c);
    be_destroy(&be);
    free(want), free(got), free(pix);
    /* no image tag, a missing file: failures */
    CHECK_EQ_INT(rn_tool_image_embed(text_path, proj_path, png, emb, NULL, 1, "no tag", lg), 1);
    CHECK_EQ_INT(rn_tool_image_embed(text_path, proj_path, "/nonexistent.png", emb, NULL, 1,
                                     NULL, NULL), 1);
    free(bytes);
    free(b);
}

/* A projector whose output does not match the text model is refused at
 * load. */
static void test_mismatch(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/wide.gguf", dir_g);
    rn_synth_clip_opts_t o;
    rn_synth_clip_defaults(&o);
    o.n_embd = 96;
    cr_err_t err = {0};
    CHECK(rn_synth_clip_write(&o, path, &err) == CR_OK);
    msg_options_t mo;
    msg_load_body_t ld;
    test_load_body(&ld, &mo, text_path, NULL, 256, 1);
    ld.projector = path;
    ld.has_projector = true;
    rn_engine_t *e = NULL;
    CHECK(rn_engine_load(&ld, &e, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "96 wide") != NULL, "%s", err.msg);
    CHECK(e == NULL);
}

/* The scheduler's estimate of a projector covers what the runner holds of
 * it (its weights and the image cache, besides activations), on the CPU;
 * a projector without its sizes is refused, naming the key. */
static void test_estimate(void)
{
    cr_err_t err = {0};
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open(proj_path, &g, &err) == CR_OK);
    sch_estimate_t est = {.embd_bytes = 10, .cpu_total_bytes = 100};
    CHECK(g && sch_estimate_add_projector(&est, g, &err) == CR_OK);
    cr_gguf_close(&g);
    be_backend_t *be = NULL;
    rn_clip_t *c = NULL;
    CHECK(be_cpu_new(1, &be, &err) == CR_OK && rn_clip_load(proj_path, be, &c, &err) == CR_OK);
    int64_t w = c ? (int64_t)rn_clip_weight_bytes(c) : 0;
    CHECK_MSG(w > 0 && est.projector_bytes > w + SCH_VISION_CACHE_BYTES,
              "estimate %lld, weights %lld", (long long)est.projector_bytes, (long long)w);
    CHECK_EQ_INT(SCH_VISION_CACHE_BYTES, (int64_t)RN_VISION_CACHE_BYTES); /* one figure */
    CHECK(est.embd_bytes == 10 + est.projector_bytes);
    CHECK(est.cpu_total_bytes == 100 + est.projector_bytes);
    rn_clip_destroy(&c);
    be_destroy(&be);

    cr_gguf_writer_t *wr = cr_gguf_writer_new();
    CHECK(cr_gguf_writer_add_str(wr, "general.architecture", "clip", &err) == CR_OK &&
          cr_gguf_writer_add_u32(wr, "clip.vision.image_size", 224, &err) == CR_OK);
    void *mem = NULL;
    size_t len = 0;
    CHECK(cr_gguf_writer_write_memory(wr, &mem, &len, &err) == CR_OK);
    cr_gguf_writer_destroy(&wr);
    CHECK(cr_gguf_open_memory(mem, len, &g, &err) == CR_OK);
    sch_estimate_t e2 = {0};
    CHECK(g && sch_estimate_add_projector(&e2, g, &err) == CR_E_CORRUPT);
    CHECK_EQ_STR(err.msg, "projector: clip.vision.patch_size is missing");
    cr_gguf_close(&g);
    free(mem);
}

int main(void)
{
    if (!mkdtemp(dir_g))
        return 1;
    snprintf(text_path, sizeof text_path, "%s/text.gguf", dir_g);
    snprintf(proj_path, sizeof proj_path, "%s/mmproj.gguf", dir_g);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    rn_synth_clip_opts_t co;
    rn_synth_clip_defaults(&co);
    cr_err_t err = {0};
    if (rn_synth_write(&so, text_path, &err) || rn_synth_clip_write(&co, proj_path, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return 1;
    }
    test_forward_injection();
    test_requests();
    test_mismatch();
    test_jinja_refuses();
    test_tool();
    test_history_truncation();
    test_estimate();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("engine_vision");
}
