/* test_e2e_vision.c: images through the whole services.
 *
 * A synthetic llama text model and a synthetic llava-shaped projector
 * (corral-clip-synth) become one model through a Modelfile with two FROM
 * lines; checked over HTTP: /api/show reports the "vision" capability and
 * projector_info; images in /api/generate, in /api/chat messages and as
 * image_url data: URLs in /v1/chat/completions are answered, with the
 * image's 64 tokens in the prompt count; a text-only model keeps Ollama's
 * 400 "does not support images"; bytes that are not an image and a remote
 * URL get a 400 that says so; `corral run` sends an image file named in the
 * prompt. A qwen2.5-vl model (a qwen2vl M-RoPE text model and a projector
 * of corral-qwen2vl-synth) answers /api/chat with an image, which takes
 * the tokens of its size (48x32: 4 x 3 = 12) and its marker text, not a
 * fixed count. */
#include "lib/prelude.h"

#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

/* ---- a PNG with stored (uncompressed) deflate blocks ---- */

static uint32_t crc32_of(const uint8_t *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return ~c;
}

static void be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static size_t chunk(uint8_t *out, const char *type, const uint8_t *data, uint32_t n)
{
    be32(out, n);
    memcpy(out + 4, type, 4);
    memcpy(out + 8, data, n);
    be32(out + 8 + n, crc32_of(out + 4, n + 4));
    return 12 + n;
}

/* A w x h RGB PNG (w * h * 3 + h < 65536), base64; with `file`, also
 * written there. */
static char *png_file_b64(int w, int h, int seed, const char *file)
{
    size_t raw_n = (size_t)h * (1 + (size_t)w * 3);
    uint8_t *raw = malloc(raw_n), *z = malloc(raw_n + 16), *png = malloc(raw_n + 128);
    for (int y = 0; y < h; y++) {
        uint8_t *row = raw + (size_t)y * (1 + (size_t)w * 3);
        row[0] = 0; /* filter: none */
        for (int i = 0; i < w * 3; i++)
            row[1 + i] = (uint8_t)((i * 13 + y * 7 + seed * 101) ^ (i >> 3));
    }
    /* zlib: header, one stored block, Adler-32 */
    size_t zn = 0;
    z[zn++] = 0x78, z[zn++] = 0x01, z[zn++] = 0x01;
    z[zn++] = (uint8_t)raw_n, z[zn++] = (uint8_t)(raw_n >> 8);
    z[zn++] = (uint8_t)~raw_n, z[zn++] = (uint8_t)(~raw_n >> 8);
    memcpy(z + zn, raw, raw_n);
    zn += raw_n;
    uint32_t a = 1, b = 0;
    for (size_t i = 0; i < raw_n; i++)
        a = (a + raw[i]) % 65521, b = (b + a) % 65521;
    be32(z + zn, b << 16 | a);
    zn += 4;
    uint8_t ihdr[13] = {0};
    be32(ihdr, (uint32_t)w);
    be32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8, ihdr[9] = 2; /* 8-bit RGB */
    size_t n = 0;
    memcpy(png, "\x89PNG\r\n\x1a\n", 8);
    n = 8;
    n += chunk(png + n, "IHDR", ihdr, 13);
    n += chunk(png + n, "IDAT", z, (uint32_t)zn);
    n += chunk(png + n, "IEND", NULL, 0);
    FILE *f = file ? fopen(file, "wb") : NULL;
    if (f) {
        CHECK(fwrite(png, 1, n, f) == n);
        fclose(f);
    }
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *s = malloc(n / 3 * 4 + 8), *o = s;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)png[i] << 16 | (i + 1 < n ? (uint32_t)png[i + 1] << 8 : 0) |
                     (i + 2 < n ? png[i + 2] : 0);
        *o++ = al[v >> 18 & 63];
        *o++ = al[v >> 12 & 63];
        *o++ = i + 1 < n ? al[v >> 6 & 63] : '=';
        *o++ = i + 2 < n ? al[v & 63] : '=';
    }
    *o = '\0';
    free(raw), free(z), free(png);
    return s;
}

static char *png_b64(int w, int h, int seed)
{
    return png_file_b64(w, h, seed, NULL);
}

static json_t *post(const char *path, const char *body, long want)
{
    e2e_resp_t r = e2e_http(&T, "POST", path, body, NULL, NULL);
    CHECK_MSG(r.status == want, "%s: HTTP %ld, want %ld: %s", path, r.status, want,
              r.body ? r.body : "");
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    e2e_resp_free(&r);
    return j;
}

static bool setup(void)
{
    char text[1200], proj[1200];
    snprintf(text, sizeof text, "%s/text.gguf", T.tmp);
    snprintf(proj, sizeof proj, "%s/mmproj.gguf", T.tmp);
    if (e2e_run_bin(&T, "corral-gguf-synth", "--out", text, "--seed", "5", NULL) ||
        e2e_run_bin(&T, "corral-clip-synth", "--out", proj, "--seed", "6", NULL)) {
        fprintf(stderr, "synth failed\n");
        return false;
    }
    char qtext[1200], qproj[1200];
    snprintf(qtext, sizeof qtext, "%s/qtext.gguf", T.tmp);
    snprintf(qproj, sizeof qproj, "%s/qmmproj.gguf", T.tmp);
    if (e2e_run_bin(&T, "corral-gguf-synth", "--out", qtext, "--seed", "5", "--arch",
                    "qwen2vl", NULL) ||
        e2e_run_bin(&T, "corral-qwen2vl-synth", "--out", qproj, "--seed", "6", NULL)) {
        fprintf(stderr, "qwen2.5-vl synth failed\n");
        return false;
    }
    bool ok = e2e_create(&T, "seer", "FROM ./text.gguf\nFROM ./mmproj.gguf\n"
                                     "PARAMETER num_ctx 512\n") &&
              e2e_create(&T, "blind", "FROM ./text.gguf\n") &&
              e2e_create(&T, "qseer", "FROM ./qtext.gguf\nFROM ./qmmproj.gguf\n"
                                      "PARAMETER num_ctx 512\n");
    CHECK(ok);
    return ok;
}

static void test_show(void)
{
    json_t *j = post("/api/show", "{\"model\":\"seer\"}", 200);
    json_t *caps = json_object_get(j, "capabilities");
    bool vision = false;
    for (size_t i = 0; i < json_array_size(caps); i++) {
        const char *c = json_string_value(json_array_get(caps, i));
        vision |= c && !strcmp(c, "vision");
    }
    CHECK_MSG(vision, "capabilities of seer lack vision");
    json_t *pi = json_object_get(j, "projector_info"); /* keys hold dots */
    const char *arch = json_string_value(json_object_get(pi, "general.architecture"));
    CHECK_EQ_STR(arch ? arch : "(absent)", "clip");
    CHECK(json_integer_value(json_object_get(pi, "clip.vision.image_size")) == 112);
    json_decref(j);
    j = post("/api/show", "{\"model\":\"blind\"}", 200);
    CHECK(e2e_jget(j, "projector_info") == NULL);
    json_decref(j);
}

static void test_requests(const char *img, const char *img2)
{
    char body[16384];
    const char *greedy = "\"options\":{\"temperature\":0,\"num_predict\":3,\"seed\":1}";
    snprintf(body, sizeof body,
             "{\"model\":\"seer\",\"prompt\":\"what is this\",\"images\":[\"%s\"],"
             "\"stream\":false,%s}", img, greedy);
    json_t *j = post("/api/generate", body, 200);
    json_int_t n_img = json_integer_value(e2e_jget(j, "prompt_eval_count"));
    CHECK_MSG(n_img >= 64, "prompt_eval_count %lld", (long long)n_img);
    CHECK(json_string_value(e2e_jget(j, "response")) != NULL);
    json_decref(j);
    snprintf(body, sizeof body,
             "{\"model\":\"seer\",\"prompt\":\"what is this\",\"stream\":false,%s}", greedy);
    j = post("/api/generate", body, 200);
    json_int_t n_txt = json_integer_value(e2e_jget(j, "prompt_eval_count"));
    CHECK_MSG(n_img >= n_txt + 64, "%lld tokens with the image, %lld without",
              (long long)n_img, (long long)n_txt);
    json_decref(j);

    snprintf(body, sizeof body,
             "{\"model\":\"seer\",\"messages\":[{\"role\":\"user\",\"content\":\"and "
             "these?\",\"images\":[\"%s\",\"%s\"]}],\"stream\":false,%s}", img, img2, greedy);
    j = post("/api/chat", body, 200);
    CHECK(json_integer_value(e2e_jget(j, "prompt_eval_count")) >= 128);
    CHECK_EQ_STR(e2e_jstr(j, "message.role"), "assistant");
    json_decref(j);

    snprintf(body, sizeof body,
             "{\"model\":\"seer\",\"max_tokens\":3,\"temperature\":0,\"messages\":[{\"role\":"
             "\"user\",\"content\":[{\"type\":\"text\",\"text\":\"describe\"},{\"type\":"
             "\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,%s\"}}]}]}", img);
    j = post("/v1/chat/completions", body, 200);
    CHECK(json_integer_value(e2e_jget(j, "usage.prompt_tokens")) >= 64);
    CHECK_EQ_STR(e2e_jstr(j, "choices.0.message.role"), "assistant");
    json_decref(j);
}

static void test_errors(const char *img)
{
    char body[16384];
    snprintf(body, sizeof body,
             "{\"model\":\"blind\",\"prompt\":\"hi\",\"images\":[\"%s\"],\"stream\":false}", img);
    json_t *j = post("/api/generate", body, 400);
    CHECK_EQ_STR(e2e_jstr(j, "error"), "\"blind\" does not support images");
    json_decref(j);

    j = post("/api/generate", "{\"model\":\"seer\",\"prompt\":\"hi\",\"images\":"
                              "[\"aGVsbG8sIHdvcmxk\"],\"stream\":false}", 400);
    const char *e = e2e_jstr(j, "error");
    CHECK_MSG(strstr(e, "not an image") != NULL, "%s", e);
    json_decref(j);

    j = post("/v1/chat/completions",
             "{\"model\":\"seer\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":"
             "\"image_url\",\"image_url\":{\"url\":\"https://example.com/cat.png\"}}]}]}", 400);
    e = e2e_jstr(j, "error.message");
    CHECK_MSG(strstr(e, "image URLs are not currently supported") != NULL, "%s", e);
    json_decref(j);
    /* The model still answers. */
    snprintf(body, sizeof body,
             "{\"model\":\"seer\",\"prompt\":\"hi\",\"images\":[\"%s\"],\"stream\":false,"
             "\"options\":{\"num_predict\":1}}", img);
    json_decref(post("/api/generate", body, 200));
}

/* qwen2.5-vl through /api/chat: the image's tokens follow its size. The
 * marker text (<|vision_start|>, <|vision_end|>) is plain text to the
 * synthetic vocabulary: 23 tokens. */
static void test_qwen(const char *img)
{
    json_t *j = post("/api/show", "{\"model\":\"qseer\"}", 200);
    const char *type = json_string_value(
        json_object_get(json_object_get(j, "projector_info"), "clip.projector_type"));
    CHECK_EQ_STR(type ? type : "(absent)", "qwen2.5vl_merger");
    json_decref(j);
    char body[16384];
    const char *greedy = "\"options\":{\"temperature\":0,\"num_predict\":3,\"seed\":1}";
    snprintf(body, sizeof body,
             "{\"model\":\"qseer\",\"messages\":[{\"role\":\"user\",\"content\":\"what "
             "is this\",\"images\":[\"%s\"]}],\"stream\":false,%s}", img, greedy);
    j = post("/api/chat", body, 200);
    json_int_t n_img = json_integer_value(e2e_jget(j, "prompt_eval_count"));
    CHECK_EQ_STR(e2e_jstr(j, "message.role"), "assistant");
    CHECK(e2e_jstr(j, "message.content") != NULL);
    json_decref(j);
    snprintf(body, sizeof body,
             "{\"model\":\"qseer\",\"messages\":[{\"role\":\"user\",\"content\":\"what "
             "is this\"}],\"stream\":false,%s}", greedy);
    j = post("/api/chat", body, 200);
    json_int_t n_txt = json_integer_value(e2e_jget(j, "prompt_eval_count"));
    json_decref(j);
    /* 12 image tokens and 23 of markers; the image tag may add a space */
    CHECK_MSG(n_img - n_txt >= 35 && n_img - n_txt <= 37, "%lld tokens with the image, "
              "%lld without", (long long)n_img, (long long)n_txt);
}

/* `corral run` picks up an image file named in the prompt for a vision
 * model (as ollama run), and leaves it as text for a text-only one. */
static void test_cli(void)
{
    char path[1200], prompt[1400];
    snprintf(path, sizeof path, "%s/cat.png", T.tmp);
    free(png_file_b64(16, 16, 3, path));
    snprintf(prompt, sizeof prompt, "what is in %s", path);
    char *out = NULL;
    int rc = e2e_cli(&T, NULL, &out, "run", "seer", prompt, NULL);
    CHECK_MSG(rc == 0, "corral run seer: exit %d: %s", rc, out ? out : "");
    CHECK_MSG(out && strstr(out, "Added image '") != NULL, "%s", out ? out : "");
    free(out);
    out = NULL;
    rc = e2e_cli(&T, NULL, &out, "run", "blind", prompt, NULL);
    CHECK_MSG(rc == 0 && out && !strstr(out, "Added image"), "corral run blind: exit %d: %s",
              rc, out ? out : "");
    free(out);
}

int main(void)
{
    if (!e2e_start(&T))
        return 1;
    char *img = png_b64(48, 32, 1), *img2 = png_b64(20, 60, 2);
    if (setup()) {
        test_show();
        test_requests(img, img2);
        test_errors(img);
        test_qwen(img);
        test_cli();
    }
    free(img);
    free(img2);
    e2e_stop(&T);
    return check_finish("e2e_vision");
}
