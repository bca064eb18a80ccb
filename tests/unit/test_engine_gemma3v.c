/* test_engine_gemma3v.c: gemma3 images in requests, without the bus: a
 * synthetic gemma3 text model (sliding window 16, so it binds inside an
 * image) with <start_of_image>/<end_of_image> in its vocabulary, its
 * tower in the model file (Ollama's single file) or in a projector layer
 * (llama.cpp's mmproj, the same numbers).
 *
 * Checks: the forward pass reads a run of image rows both ways
 * (rn_ctx_span_t.embd_full: the logits differ from a causal read, and a
 * one-row run is the same either way); the engine wraps each image in the
 * two control tokens (prompt_eval_count, the returned context) and loads
 * the tower from the model file when there is no projector layer, with
 * the same answer as from the mmproj; a step boundary that would cut an
 * image does not (the answer equals the one-pass tool's); a num_batch
 * that cannot hold an image, a vocabulary without the wrapping tokens
 * and a model file with an incomplete tower are refused or answered
 * clearly. */
#include "lib/prelude.h"

#include <math.h>
#include <png.h>

#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "lib/vision_embedded.h"
#include "services/runner/backend/backend.h"
#include "services/runner/engine.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/tools.h"
#include "services/runner/vision/clip.h"
#include "services/scheduler/estimate.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"

static char dir_g[] = "/tmp/corral-test-engine-gemma3v-XXXXXX";
static char text_path[256], proj_path[256], single_path[256], plain_path[256];
static int32_t beg_id, end_id;

/* A w x h PNG; `seed` varies the pixels. Its bytes into *out (caller
 * frees), base64 returned (caller frees). */
static char *png_b64(int w, int h, int seed, uint8_t **out, size_t *out_len)
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
    free(rgb);
    char *s = cr_base64_encode(buf, n);
    CHECK(s != NULL);
    if (out) {
        *out = buf;
        *out_len = n;
    } else {
        free(buf);
    }
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

static void cap_free(capture_t *c)
{
    cr_buf_free(&c->text);
    cr_buf_free(&c->logprobs);
}

static cr_status_t gen(rn_engine_t *e, const char *prompt, bool raw, char **images,
                       size_t n_images, int num_predict, capture_t *cp, msg_done_body_t *done,
                       cr_err_t *err)
{
    msg_options_t o = {0};
    o.temperature = 0;
    o.has_temperature = true;
    o.num_predict = num_predict;
    o.has_num_predict = true;
    msg_t m;
    msg_init(&m, MSG_generate, "t");
    m.u.generate.model = "synth";
    m.u.generate.has_model = true;
    m.u.generate.prompt = (char *)prompt;
    m.u.generate.has_prompt = true;
    m.u.generate.raw = raw;
    m.u.generate.has_raw = raw;
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

static rn_engine_t *load(const char *model, const char *projector, int64_t num_batch,
                         cr_err_t *err)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, model, NULL, 512, 1);
    if (projector) {
        ld.projector = (char *)projector;
        ld.has_projector = true;
    }
    if (num_batch) {
        o.num_batch = num_batch;
        o.has_num_batch = true;
    }
    rn_engine_t *e = NULL;
    cr_err_clear(err);
    rn_engine_load(&ld, &e, err);
    return e;
}

/* ---- the forward pass ---------------------------------------------------- */

static void test_forward_full(void)
{
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_ctx_t *c = NULL;
    cr_err_t err = {0};
    CHECK(be_cpu_new(1, &be, &err) == CR_OK);
    CHECK_MSG(rn_model_load(text_path, be, &m, &err) == CR_OK, "%s", err.msg);
    rn_ctx_opts_t co = {.n_ctx = 64, .n_seq = 2};
    CHECK(m && rn_ctx_new(m, &co, &c, &err) == CR_OK);
    if (!c) {
        rn_model_destroy(&m);
        be_destroy(&be);
        return;
    }
    int dim = rn_ctx_embd_dim(c), V = rn_ctx_n_vocab(c);
    float *rows = malloc(sizeof(float) * 24 * (size_t)dim);
    rn_synth_fill_normal(3, rows, 24 * (size_t)dim, 0, 1);
    /* 20 text tokens, then an image of 24 rows (past the window of 16),
     * then text: read both ways, the last logits differ */
    int32_t toks[48];
    for (int i = 0; i < 48; i++)
        toks[i] = i < 20 ? 360 + i : i < 44 ? -1 - (i - 20) : 370 + i - 44;
    rn_ctx_span_t a = {.seq = 0, .tokens = toks, .n = 48, .pos = 0, .embd = rows};
    rn_ctx_span_t b = a;
    b.seq = 1;
    b.embd_full = true;
    CHECK(rn_ctx_eval_batch(c, &a, 1, &err) == CR_OK);
    CHECK(rn_ctx_eval_batch(c, &b, 1, &err) == CR_OK);
    double diff = 0;
    for (int i = 0; i < V; i++)
        diff = fmax(diff, fabs(rn_ctx_seq_logits(c, 0)[i] - rn_ctx_seq_logits(c, 1)[i]));
    CHECK_MSG(diff > 1e-4, "full and causal image reads agree (%g)", diff);
    /* a one-row run has nothing after it: the same bits either way */
    int32_t one[4] = {360, 361, -1, 362};
    a = (rn_ctx_span_t){.seq = 0, .tokens = one, .n = 4, .pos = 0, .embd = rows};
    b = a;
    b.seq = 1;
    b.embd_full = true;
    CHECK(rn_ctx_eval_batch(c, &a, 1, &err) == CR_OK);
    CHECK(rn_ctx_eval_batch(c, &b, 1, &err) == CR_OK);
    CHECK(!memcmp(rn_ctx_seq_logits(c, 0), rn_ctx_seq_logits(c, 1), sizeof(float) * (size_t)V));
    free(rows);
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    be_destroy(&be);
}

/* ---- requests ------------------------------------------------------------ */

static void test_requests(void)
{
    cr_err_t err = {0};
    rn_engine_t *e = load(single_path, NULL, 0, &err);
    CHECK_MSG(e != NULL, "load: %s", err.msg);
    if (!e)
        return;
    char *img1 = png_b64(40, 30, 1, NULL, NULL), *img2 = png_b64(40, 30, 2, NULL, NULL);
    capture_t t = {0}, a = {0}, b = {0}, c = {0};
    msg_done_body_t d;
    rn_engine_stats_t s;
    CHECK_MSG(gen(e, "hello", false, NULL, 0, 4, &t, &d, &err) == CR_OK, "%s", err.msg);
    int64_t text_only = d.prompt_eval_count;
    CHECK_MSG(gen(e, "hello", false, &img1, 1, 4, &a, &d, &err) == CR_OK, "%s", err.msg);
    /* 16 image tokens and the two around them */
    CHECK_EQ_INT(d.prompt_eval_count, text_only + 18);
    bool has_beg = false, has_end = false, neg = false;
    for (size_t i = 0; i < d.context.n; i++) {
        has_beg |= d.context.v[i] == beg_id;
        has_end |= d.context.v[i] == end_id;
        neg |= d.context.v[i] < 0;
    }
    CHECK(d.has_context && has_beg && has_end && !neg);
    rn_engine_get_stats(e, &s);
    CHECK_EQ_INT(s.images_encoded, 1);
    CHECK(gen(e, "hello", false, &img2, 1, 4, &b, &d, &err) == CR_OK);
    CHECK(a.logprobs.data && b.logprobs.data && strcmp(a.logprobs.data, b.logprobs.data));
    CHECK(gen(e, "hello", false, &img1, 1, 4, &c, &d, &err) == CR_OK);
    CHECK_EQ_STR(a.logprobs.data ? a.logprobs.data : "", c.logprobs.data ? c.logprobs.data : "");
    rn_engine_get_stats(e, &s);
    CHECK_EQ_INT(s.images_encoded, 2);
    CHECK_EQ_INT(s.images_cached, 1);
    cap_free(&b);
    cap_free(&c);
    /* two images */
    char *two[2] = {img1, img2};
    CHECK(gen(e, "compare", false, two, 2, 2, &c, &d, &err) == CR_OK);
    cap_free(&c);
    rn_engine_destroy(&e);

    /* the same model with the tower in a projector layer: the same answer */
    e = load(text_path, proj_path, 0, &err);
    CHECK_MSG(e != NULL, "load: %s", err.msg);
    if (e) {
        CHECK(gen(e, "hello", false, &img1, 1, 4, &c, &d, &err) == CR_OK);
        CHECK_EQ_STR(a.logprobs.data ? a.logprobs.data : "",
                     c.logprobs.data ? c.logprobs.data : "");
        cap_free(&c);
        rn_engine_destroy(&e);
    }

    /* num_batch 8 cannot hold an image's 16 tokens */
    e = load(single_path, NULL, 8, &err);
    CHECK_MSG(e != NULL, "load: %s", err.msg);
    if (e) {
        CHECK(gen(e, "hello", false, &img1, 1, 1, &c, &d, &err) == CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "num_batch 8") != NULL, "%s", err.msg);
        cap_free(&c);
        CHECK(gen(e, "hello", false, NULL, 0, 1, &c, &d, &err) == CR_OK);
        cap_free(&c);
        rn_engine_destroy(&e);
    }
    cap_free(&a);
    cap_free(&t);
    free(img1);
    free(img2);
}

/* A prompt whose 64-token prefill step would end inside the image: the
 * step takes the image whole, and the first token's logits are the
 * one-pass tool's (corral-runner image-embed --logits), to the last bit
 * the logprobs print. */
static void test_step_boundary(void)
{
    char prompt[1024] = "";
    for (int i = 0; i < 58; i++)
        strcat(prompt, "the ");
    strcat(prompt, "[img-0] now");
    uint8_t *bytes = NULL;
    size_t n = 0;
    char *img = png_b64(30, 20, 7, &bytes, &n);
    char png[300], emb[300], lg[300];
    snprintf(png, sizeof png, "%s/t.png", dir_g);
    snprintf(emb, sizeof emb, "%s/emb.f32", dir_g);
    snprintf(lg, sizeof lg, "%s/logits.f32", dir_g);
    FILE *f = fopen(png, "wb");
    CHECK(f && fwrite(bytes, 1, n, f) == n);
    if (f)
        fclose(f);
    CHECK_EQ_INT(rn_tool_image_embed(single_path, single_path, png, emb, NULL, 1, prompt, lg),
                 0);
    int V = rn_synth_builtin_vocab_size() + 2;
    float *logits = malloc(sizeof(float) * (size_t)V);
    f = fopen(lg, "rb");
    CHECK(f && fread(logits, sizeof(float), (size_t)V, f) == (size_t)V);
    if (f)
        fclose(f);
    int best = 0;
    double mx = logits[0], sum = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > mx)
            mx = logits[best = i];
    for (int i = 0; i < V; i++)
        sum += exp(logits[i] - mx);
    double want = -log(sum); /* the best token's log-probability */

    cr_err_t err = {0};
    rn_engine_t *e = load(single_path, NULL, 0, &err);
    CHECK_MSG(e != NULL, "load: %s", err.msg);
    capture_t c = {0};
    msg_done_body_t d;
    if (e) {
        CHECK_MSG(gen(e, prompt, true, &img, 1, 1, &c, &d, &err) == CR_OK, "%s", err.msg);
        CHECK(d.prompt_eval_count > 64 + 4);
        const char *lp = c.logprobs.data ? strstr(c.logprobs.data, "\"logprob\":") : NULL;
        double got = lp ? strtod(lp + 10, NULL) : 0;
        CHECK_MSG(lp && fabs(got - want) < 1e-4, "logprob %.6f, one pass %.6f (token %d)", got,
                  want, best);
        cap_free(&c);
        rn_engine_destroy(&e);
    }
    free(logits);
    free(bytes);
    free(img);
}

/* ---- refusals ------------------------------------------------------------- */

static void test_refusals(void)
{
    cr_err_t err = {0};
    /* a projector that wraps images in tokens the vocabulary lacks */
    rn_engine_t *e = load(plain_path, proj_path, 0, &err);
    CHECK(e == NULL && err.status == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "<start_of_image>") != NULL, "%s", err.msg);
    rn_engine_destroy(&e);

    /* a model file whose tower lacks a tensor: text only, images refused,
     * and the check says which tensor */
    char bad[300];
    snprintf(bad, sizeof bad, "%s/bad.gguf", dir_g);
    cr_gguf_t *g = NULL;
    CHECK(cr_gguf_open(single_path, &g, &err) == CR_OK);
    if (!g)
        return;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    for (size_t i = 0; i < cr_gguf_kv_count(g); i++)
        cr_gguf_writer_copy_kv(w, cr_gguf_kv_at(g, i), NULL);
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (strcmp(t->name, "v.blk.1.mlp.fc2.weight"))
            cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL,
                                      NULL);
    }
    CHECK(cr_gguf_writer_write(w, bad, &err) == CR_OK);
    cr_gguf_writer_destroy(&w);
    CHECK(cr_vision_embedded(g, NULL, &err) == CR_OK);
    cr_gguf_close(&g);
    CHECK(cr_gguf_open(bad, &g, &err) == CR_OK);
    CHECK(g && cr_vision_embedded(g, NULL, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "v.blk.1.mlp.fc2.weight") != NULL, "%s", err.msg);
    cr_gguf_close(&g);
    CHECK(cr_gguf_open(text_path, &g, &err) == CR_OK);
    CHECK(g && cr_vision_embedded(g, NULL, &err) == CR_E_NOT_FOUND);
    cr_gguf_close(&g);
    e = load(bad, NULL, 0, &err);
    CHECK_MSG(e != NULL, "load: %s", err.msg);
    if (e) {
        char *img = png_b64(8, 8, 3, NULL, NULL);
        capture_t c = {0};
        msg_done_body_t d;
        CHECK(gen(e, "hello", false, &img, 1, 1, &c, &d, &err) == CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "does not support images") != NULL, "%s", err.msg);
        cap_free(&c);
        free(img);
        rn_engine_destroy(&e);
    }
}

/* The scheduler's estimate of a tower in the model file covers what the
 * runner holds of it (weights with the transposed projection, the image
 * cache), as for a projector layer; the mmproj's covers its copy too. */
static void test_estimate(void)
{
    const char *paths[2] = {single_path, proj_path};
    for (int i = 0; i < 2; i++) {
        cr_err_t err = {0};
        cr_gguf_t *g = NULL;
        CHECK(cr_gguf_open(paths[i], &g, &err) == CR_OK);
        sch_estimate_t est = {.cpu_total_bytes = 100};
        cr_vision_embedded_t v;
        if (i == 0) {
            CHECK(g && cr_vision_embedded(g, &v, &err) == CR_OK);
            CHECK_EQ_INT(v.n_tokens, 16);
            CHECK_EQ_INT(v.n_embd, 64);
            CHECK(sch_estimate_add_embedded_vision(&est, &v, &err) == CR_OK);
        } else {
            CHECK(g && sch_estimate_add_projector(&est, g, &err) == CR_OK);
        }
        cr_gguf_close(&g);
        be_backend_t *be = NULL;
        rn_clip_t *c = NULL;
        CHECK(be_cpu_new(1, &be, &err) == CR_OK &&
              rn_clip_load(paths[i], be, &c, &err) == CR_OK);
        /* the mapped tensors, and the copy of the 64 x 64 F32 projection */
        int64_t w = c ? (int64_t)rn_clip_weight_bytes(c) + 64 * 64 * 4 : 0;
        CHECK_MSG(w > 0 && est.projector_bytes > w + SCH_VISION_CACHE_BYTES,
                  "estimate %lld, weights %lld", (long long)est.projector_bytes, (long long)w);
        CHECK(est.cpu_total_bytes == 100 + est.projector_bytes);
        rn_clip_destroy(&c);
        be_destroy(&be);
    }
}

int main(void)
{
    if (!mkdtemp(dir_g))
        return 1;
    snprintf(text_path, sizeof text_path, "%s/text.gguf", dir_g);
    snprintf(plain_path, sizeof plain_path, "%s/plain.gguf", dir_g);
    snprintf(proj_path, sizeof proj_path, "%s/mmproj.gguf", dir_g);
    snprintf(single_path, sizeof single_path, "%s/single.gguf", dir_g);
    static const char *const img_tokens[] = {"<start_of_image>", "<end_of_image>", NULL};
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.arch = "gemma3";
    so.sliding_window = 16;
    so.swa_pattern = 2;
    rn_synth_gemma3v_opts_t go;
    rn_synth_gemma3v_defaults(&go);
    go.seed = 4;
    cr_err_t err = {0};
    if (rn_synth_write(&so, plain_path, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return 1;
    }
    so.extra_tokens = img_tokens;
    if (rn_synth_write(&so, text_path, &err) || rn_synth_gemma3v_write(&go, proj_path, &err) ||
        rn_synth_gemma3v_embed(&go, text_path, single_path, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return 1;
    }
    beg_id = rn_synth_builtin_vocab_size();
    end_id = beg_id + 1;
    test_forward_full();
    test_requests();
    test_step_boundary();
    test_refusals();
    test_estimate();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("engine_gemma3v");
}
