/* test_e2e_vision1file.c: Ollama's single-file vision models for
 * mistral3 (Mistral Small 3.x's Pixtral tower) and qwen25vl (Qwen2.5-VL)
 * through the whole services.
 *
 * For each family the same synthetic tower is written twice by the synth
 * tools: inside the text model under Ollama's names and keys (one FROM:
 * "m3", "q25") and as llama.cpp's text model + mmproj (two FROMs:
 * "m3pair", "q25pair"). Over HTTP: /api/show reports vision for both,
 * projector_info only for the pair; /api/chat with an image answers the
 * single file with the pair's prompt_eval_count and greedy answer; a
 * single file whose tower lacks a tensor ("m3broken", "q25broken")
 * reports no vision, answers text, and an image gets Ollama's 400. The
 * mistral3 single file pulled as Ollama publishes it (a manifest whose
 * model layer is the GGUF, from a fake OCI registry over http) shows
 * vision and answers the image as the created one does. */
#include "lib/prelude.h"

#include <unistd.h>

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/fake_oci.h"
#include "tests/unit/gguf_edit.h"

static e2e_t T;
static fake_t F;

/* A 30x20 RGB PNG, base64 (stored deflate: the bytes need no encoder). */
static char *png_b64(void)
{
    enum { W = 30, H = 20 };
    size_t raw_n = (size_t)H * (1 + W * 3);
    uint8_t raw[H * (1 + W * 3)], png[H * (1 + W * 3) + 128];
    for (int y = 0; y < H; y++) {
        uint8_t *row = raw + (size_t)y * (1 + W * 3);
        row[0] = 0;
        for (int i = 0; i < W * 3; i++)
            row[1 + i] = (uint8_t)((i * 13 + y * 7) ^ (i >> 3));
    }
    uint32_t crc_table[256];
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        crc_table[n] = c;
    }
    size_t n = 0;
#define PUT32(v) (png[n++] = (uint8_t)((v) >> 24), png[n++] = (uint8_t)((v) >> 16), \
                  png[n++] = (uint8_t)((v) >> 8), png[n++] = (uint8_t)(v))
    memcpy(png, "\x89PNG\r\n\x1a\n", 8);
    n = 8;
    /* chunk: length, type, data, CRC of type + data */
    const struct {
        const char *type;
        size_t len;
    } chunks[] = {{"IHDR", 13}, {"IDAT", raw_n + 11}, {"IEND", 0}};
    for (size_t c = 0; c < 3; c++) {
        PUT32((uint32_t)chunks[c].len);
        size_t at = n;
        memcpy(png + n, chunks[c].type, 4);
        n += 4;
        if (c == 0) {
            PUT32(W);
            PUT32(H);
            png[n++] = 8, png[n++] = 2, png[n++] = 0, png[n++] = 0, png[n++] = 0;
        } else if (c == 1) {
            png[n++] = 0x78, png[n++] = 0x01, png[n++] = 0x01;
            png[n++] = (uint8_t)raw_n, png[n++] = (uint8_t)(raw_n >> 8);
            png[n++] = (uint8_t)~raw_n, png[n++] = (uint8_t)(~raw_n >> 8);
            memcpy(png + n, raw, raw_n);
            n += raw_n;
            uint32_t a = 1, b = 0;
            for (size_t i = 0; i < raw_n; i++)
                a = (a + raw[i]) % 65521, b = (b + a) % 65521;
            PUT32(b << 16 | a);
        }
        uint32_t crc = 0xffffffffu;
        for (size_t i = at; i < n; i++)
            crc = crc_table[(crc ^ png[i]) & 0xff] ^ (crc >> 8);
        PUT32(~crc);
    }
#undef PUT32
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
    char p[6][1200];
    const char *names[] = {"m3text", "m3mmproj", "m3single", "q25text", "q25mmproj",
                           "q25single"};
    for (int i = 0; i < 6; i++)
        snprintf(p[i], sizeof p[i], "%s/%s.gguf", T.tmp, names[i]);
    char m3broken[1200], q25broken[1200];
    snprintf(m3broken, sizeof m3broken, "%s/m3broken.gguf", T.tmp);
    snprintf(q25broken, sizeof q25broken, "%s/q25broken.gguf", T.tmp);
    if (e2e_run_bin(&T, "corral-gguf-synth", "--out", p[0], "--arch", "mistral3", "--seed",
                    "5", "--pixtral-tokens", NULL) ||
        e2e_run_bin(&T, "corral-clip-synth", "--pixtral", "--out", p[1], "--seed", "6",
                    "--break-from", p[0], NULL) ||
        e2e_run_bin(&T, "corral-clip-synth", "--pixtral", "--out", p[2], "--seed", "6",
                    "--embed", p[0], NULL) ||
        e2e_run_bin(&T, "corral-gguf-synth", "--out", p[3], "--arch", "qwen2vl", "--seed",
                    "5", NULL) ||
        e2e_run_bin(&T, "corral-qwen2vl-synth", "--out", p[4], "--seed", "6", NULL) ||
        e2e_run_bin(&T, "corral-qwen2vl-synth", "--out", p[5], "--seed", "6", "--embed", p[3],
                    NULL) ||
        !test_gguf_edit(p[2], m3broken, TEST_EDIT_DROP, "v.blk.2.attn_v.weight") ||
        !test_gguf_edit(p[5], q25broken, TEST_EDIT_DROP, "v.merger.ln_q.weight")) {
        fprintf(stderr, "synth failed\n");
        return false;
    }
    bool ok = e2e_create(&T, "m3", "FROM ./m3single.gguf\nPARAMETER num_ctx 512\n") &&
              e2e_create(&T, "m3pair", "FROM ./m3text.gguf\nFROM ./m3mmproj.gguf\n"
                                       "PARAMETER num_ctx 512\n") &&
              e2e_create(&T, "m3broken", "FROM ./m3broken.gguf\n") &&
              e2e_create(&T, "q25", "FROM ./q25single.gguf\nPARAMETER num_ctx 512\n") &&
              e2e_create(&T, "q25pair", "FROM ./q25text.gguf\nFROM ./q25mmproj.gguf\n"
                                        "PARAMETER num_ctx 512\n") &&
              e2e_create(&T, "q25broken", "FROM ./q25broken.gguf\n");
    CHECK(ok);
    return ok;
}

static bool has_vision(const char *model)
{
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"%s\"}", model);
    json_t *j = post("/api/show", body, 200);
    json_t *caps = json_object_get(j, "capabilities");
    bool vision = false;
    for (size_t i = 0; i < json_array_size(caps); i++) {
        const char *c = json_string_value(json_array_get(caps, i));
        vision |= c && !strcmp(c, "vision");
    }
    json_decref(j);
    return vision;
}

static void test_show(void)
{
    const char *yes[] = {"m3", "m3pair", "q25", "q25pair"};
    const char *no[] = {"m3broken", "q25broken"};
    for (size_t i = 0; i < CR_ARRAY_LEN(yes); i++)
        CHECK_MSG(has_vision(yes[i]), "%s lacks vision", yes[i]);
    for (size_t i = 0; i < CR_ARRAY_LEN(no); i++)
        CHECK_MSG(!has_vision(no[i]), "%s claims vision", no[i]);
    json_t *j = post("/api/show", "{\"model\":\"m3\"}", 200);
    CHECK(e2e_jget(j, "projector_info") == NULL);
    json_t *mi = json_object_get(j, "model_info"); /* keys hold dots */
    CHECK(json_integer_value(json_object_get(mi, "mistral3.vision.block_count")) == 3);
    json_decref(j);
    j = post("/api/show", "{\"model\":\"q25\"}", 200);
    mi = json_object_get(j, "model_info");
    CHECK_EQ_STR(json_string_value(json_object_get(mi, "general.architecture")), "qwen25vl");
    CHECK(json_integer_value(json_object_get(mi, "qwen25vl.vision.block_count")) == 4);
    json_decref(j);
}

/* A greedy chat with the image: its answer, and prompt_eval_count. */
static char *chat(const char *model, const char *img, json_int_t *n_prompt)
{
    char body[8192];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\",\"content\":\"what is "
             "this\"%s%s%s}],\"stream\":false,\"options\":{\"temperature\":0,"
             "\"num_predict\":4,\"seed\":1}}",
             model, img ? ",\"images\":[\"" : "", img ? img : "", img ? "\"]" : "");
    json_t *j = post("/api/chat", body, 200);
    *n_prompt = json_integer_value(e2e_jget(j, "prompt_eval_count"));
    const char *c = e2e_jstr(j, "message.content");
    char *out = strdup(c ? c : "(none)");
    json_decref(j);
    return out;
}

static void test_chat(const char *img)
{
    const char *pairs[][2] = {{"m3", "m3pair"}, {"q25", "q25pair"}};
    for (size_t i = 0; i < CR_ARRAY_LEN(pairs); i++) {
        json_int_t n_txt = 0, n_one = 0, n_two = 0;
        free(chat(pairs[i][0], NULL, &n_txt));
        char *a = chat(pairs[i][0], img, &n_one);
        char *b = chat(pairs[i][1], img, &n_two);
        CHECK_MSG(n_one > n_txt + 8, "%s: %lld tokens with the image, %lld without",
                  pairs[i][0], (long long)n_one, (long long)n_txt);
        CHECK_EQ_INT(n_one, n_two);
        CHECK_EQ_STR(a, b);
        free(a);
        free(b);
    }
}

static void test_refused(const char *img)
{
    const char *models[] = {"m3broken", "q25broken"};
    for (size_t i = 0; i < CR_ARRAY_LEN(models); i++) {
        char body[8192], want[128];
        snprintf(body, sizeof body,
                 "{\"model\":\"%s\",\"prompt\":\"hi\",\"images\":[\"%s\"],\"stream\":false}",
                 models[i], img);
        json_t *j = post("/api/generate", body, 400);
        snprintf(want, sizeof want, "\"%s\" does not support images", models[i]);
        CHECK_EQ_STR(e2e_jstr(j, "error"), want);
        json_decref(j);
        /* text still works */
        snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"hi\",\"stream\":false,"
                 "\"options\":{\"num_predict\":1}}", models[i]);
        json_decref(post("/api/generate", body, 200));
    }
}

static bool read_file(const char *path, unsigned char **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc(n > 0 ? (size_t)n : 1);
    *len = *data && n > 0 ? fread(*data, 1, (size_t)n, f) : 0;
    fclose(f);
    return *len == (size_t)n;
}

/* The fake registry serves library/m:t: Ollama's config and the single
 * file as the model layer; pulled, it is a vision model. */
static void test_pulled(const char *img)
{
    char single[1200], remote[96];
    snprintf(single, sizeof single, "%s/m3single.gguf", T.tmp);
    fake_start(&F);
    const char *cfg = "{\"model_format\":\"gguf\",\"model_family\":\"mistral3\","
                      "\"model_families\":[\"mistral3\"],\"model_type\":\"1M\","
                      "\"file_type\":\"F32\",\"architecture\":\"amd64\",\"os\":\"linux\"}";
    blob_t *b = &F.blobs[F.n_blobs++];
    b->len = strlen(cfg);
    b->data = malloc(b->len);
    memcpy(b->data, cfg, b->len);
    fake_sha256_hex(b->data, b->len, b->hex);
    b = &F.blobs[F.n_blobs++];
    bool ok = read_file(single, &b->data, &b->len);
    CHECK(ok);
    if (ok) {
        fake_sha256_hex(b->data, b->len, b->hex);
        fake_add_blob(&F, 300, 9); /* a license layer, as Ollama's library has */
        fake_set_manifest(&F);
        snprintf(remote, sizeof remote, "127.0.0.1:%d/library/m:t", F.port);
        char *out = NULL, *err = NULL;
        int rc = e2e_cli_err(&T, NULL, &out, &err, "pull", "--insecure", remote, NULL);
        CHECK_MSG(rc == 0, "pull: %d %s", rc, err ? err : "");
        free(out), free(err);
        CHECK_MSG(has_vision(remote), "the pulled %s lacks vision", remote);
        json_int_t n_pulled = 0, n_made = 0;
        char *a = chat(remote, img, &n_pulled);
        char *c = chat("m3", img, &n_made);
        CHECK_EQ_INT(n_pulled, n_made);
        CHECK_EQ_STR(a, c);
        free(a), free(c);
    }
    fake_stop(&F);
}

int main(void)
{
    if (!e2e_start(&T))
        return 1;
    char *img = png_b64();
    if (setup()) {
        test_show();
        test_chat(img);
        test_refused(img);
        test_pulled(img);
    }
    free(img);
    e2e_stop(&T);
    return check_finish("e2e_vision1file");
}
