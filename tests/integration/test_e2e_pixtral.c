/* test_e2e_pixtral.c: a Pixtral projector (Mistral Small 3.x's vision
 * tower) through the whole services.
 *
 * A synthetic mistral3 text model and corral-clip-synth --pixtral become
 * one model through a Modelfile with two FROM lines; over HTTP: /api/show
 * reports vision and the projector type; /api/chat with images of
 * different shapes charges each the tokens its size gives (97x61: 4x3
 * tokens + 2 [IMG_BREAK] rows, 150x90: 5x3 + 2, 61x97: 3x4 + 3, each plus
 * the [IMG_END] text), the same image gives the same greedy answer, and
 * /v1/chat/completions takes the image as a data: URL; an image whose
 * tokens do not fit num_ctx is a 400 that says so. */
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

/* A w x h RGB PNG (w * h * 3 + h < 65536), base64. */
static char *png_b64(int w, int h, int seed)
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
    if (e2e_run_bin(&T, "corral-gguf-synth", "--out", text, "--arch", "mistral3", "--seed",
                    "5", NULL) ||
        e2e_run_bin(&T, "corral-clip-synth", "--pixtral", "--out", proj, "--seed", "6",
                    NULL)) {
        fprintf(stderr, "synth failed\n");
        return false;
    }
    bool ok = e2e_create(&T, "mistral-seer", "FROM ./text.gguf\nFROM ./mmproj.gguf\n"
                                             "PARAMETER num_ctx 256\n");
    CHECK(ok);
    return ok;
}

static void test_show(void)
{
    json_t *j = post("/api/show", "{\"model\":\"mistral-seer\"}", 200);
    json_t *caps = json_object_get(j, "capabilities");
    bool vision = false;
    for (size_t i = 0; i < json_array_size(caps); i++) {
        const char *c = json_string_value(json_array_get(caps, i));
        vision |= c && !strcmp(c, "vision");
    }
    CHECK_MSG(vision, "capabilities of mistral-seer lack vision");
    json_t *pi = json_object_get(j, "projector_info"); /* keys hold dots */
    const char *type = json_string_value(json_object_get(pi, "clip.projector_type"));
    CHECK_EQ_STR(type ? type : "(absent)", "pixtral");
    json_decref(j);
}

/* A greedy /api/chat of one user message with an image (or none); its
 * prompt_eval_count, and its answer into *content (caller frees). */
static json_int_t chat(const char *img, char **content)
{
    char body[160000];
    snprintf(body, sizeof body,
             "{\"model\":\"mistral-seer\",\"messages\":[{\"role\":\"user\",\"content\":"
             "\"what is this\"%s%s%s}],\"stream\":false,\"options\":{\"temperature\":0,"
             "\"num_predict\":3,\"seed\":1}}", img ? ",\"images\":[\"" : "", img ? img : "",
             img ? "\"]" : "");
    json_t *j = post("/api/chat", body, 200);
    json_int_t n = json_integer_value(e2e_jget(j, "prompt_eval_count"));
    const char *c = e2e_jstr(j, "message.content");
    if (content)
        *content = strdup(c ? c : "");
    json_decref(j);
    return n;
}

static void test_chat(void)
{
    char *wide = png_b64(97, 61, 1), *wider = png_b64(150, 90, 2), *tall = png_b64(61, 97, 3);
    char *a = NULL, *b = NULL;
    json_int_t n_text = chat(NULL, NULL), n_wide = chat(wide, &a);
    json_int_t n_wider = chat(wider, NULL), n_tall = chat(tall, NULL);
    /* 14 rows and at least one token of [IMG_END] */
    CHECK_MSG(n_wide > n_text + 14, "%lld tokens with the image, %lld without",
              (long long)n_wide, (long long)n_text);
    CHECK_MSG(n_wider == n_wide + 3 && n_tall == n_wide + 1,
              "97x61: %lld, 150x90: %lld, 61x97: %lld tokens", (long long)n_wide,
              (long long)n_wider, (long long)n_tall);
    CHECK(chat(wide, &b) == n_wide);
    CHECK_EQ_STR(a, b);
    free(a), free(b);

    char body[160000];
    snprintf(body, sizeof body,
             "{\"model\":\"mistral-seer\",\"max_tokens\":3,\"temperature\":0,\"messages\":"
             "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"describe\"},"
             "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;base64,%s\"}}]}"
             "]}", wider);
    json_t *j = post("/v1/chat/completions", body, 200);
    CHECK(json_integer_value(e2e_jget(j, "usage.prompt_tokens")) > 17);
    CHECK_EQ_STR(e2e_jstr(j, "choices.0.message.role"), "assistant");
    json_decref(j);

    /* 20000x1: 714 tokens in one row, more than num_ctx 256 */
    char *thin = png_b64(20000, 1, 4);
    snprintf(body, sizeof body,
             "{\"model\":\"mistral-seer\",\"messages\":[{\"role\":\"user\",\"content\":"
             "\"hi\",\"images\":[\"%s\"]}],\"stream\":false}", thin);
    j = post("/api/chat", body, 400);
    const char *e = e2e_jstr(j, "error");
    CHECK_MSG(e && strstr(e, "num_ctx 256"), "%s", e ? e : "(no error)");
    json_decref(j);
    free(thin);
    /* still answering */
    CHECK(chat(wide, NULL) == n_wide);
    free(wide), free(wider), free(tall);
}

int main(void)
{
    if (!e2e_start(&T))
        return 1;
    if (setup()) {
        test_show();
        test_chat();
    }
    e2e_stop(&T);
    return check_finish("e2e_pixtral");
}
