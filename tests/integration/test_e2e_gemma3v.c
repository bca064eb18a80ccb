/* test_e2e_gemma3v.c: gemma3 images through the whole services.
 *
 * A synthetic gemma3 text model with <start_of_image>/<end_of_image> in
 * its vocabulary, its SigLIP tower and projector either inside the model
 * file (Ollama's single GGUF: "g3") or in a projector layer (llama.cpp's
 * mmproj as a second FROM: "g3proj"), the same numbers in both. Checked
 * over HTTP: /api/show reports vision for both, projector_info only for
 * the layer; /api/chat and /api/generate with an image are answered with
 * the image's 16 tokens and the 2 around them in prompt_eval_count, and
 * both forms give the same greedy answer; a model file whose tower lacks a
 * tensor ("g3broken") and the text model alone ("g3text") report no
 * vision and answer an image with Ollama's 400. */
#include "lib/prelude.h"

#include <unistd.h>

#include "lib/base64.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

/* A tiny valid PNG (2x2 RGB), base64. */
static const char *const png2x2 =
    "iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEElEQVR4nGPgOiEHRAwQCgAZ/gPBqzAfUgAAAABJRU5E"
    "rkJggg==";

static json_t *post(const char *path, const char *body, long want)
{
    e2e_resp_t r = e2e_http(&T, "POST", path, body, NULL, NULL);
    CHECK_MSG(r.status == want, "%s: HTTP %ld, want %ld: %s", path, r.status, want,
              r.body ? r.body : "");
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    e2e_resp_free(&r);
    return j;
}

/* src copied to dst without tensor `drop`. */
static bool drop_tensor(const char *src, const char *dst, const char *drop)
{
    cr_gguf_t *g = NULL;
    cr_err_t err = {0};
    if (cr_gguf_open(src, &g, &err))
        return false;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    for (size_t i = 0; i < cr_gguf_kv_count(g); i++)
        cr_gguf_writer_copy_kv(w, cr_gguf_kv_at(g, i), NULL);
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (strcmp(t->name, drop))
            cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data, NULL,
                                      NULL);
    }
    bool ok = cr_gguf_writer_write(w, dst, &err) == CR_OK;
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
    return ok;
}

static bool setup(void)
{
    char text[1200], proj[1200], single[1200], broken[1200];
    snprintf(text, sizeof text, "%s/text.gguf", T.tmp);
    snprintf(proj, sizeof proj, "%s/mmproj.gguf", T.tmp);
    snprintf(single, sizeof single, "%s/single.gguf", T.tmp);
    snprintf(broken, sizeof broken, "%s/broken.gguf", T.tmp);
    if (e2e_run_bin(&T, "corral-gguf-synth", "--out", text, "--arch", "gemma3", "--seed", "5",
                    "--image-tokens", "--window", "16", "--swa-pattern", "2", NULL) ||
        e2e_run_bin(&T, "corral-gemma3v-synth", "--out", proj, "--seed", "6", NULL) ||
        e2e_run_bin(&T, "corral-gemma3v-synth", "--out", single, "--embed", text, "--seed",
                    "6", NULL) ||
        !drop_tensor(single, broken, "v.blk.2.attn_k.weight")) {
        fprintf(stderr, "synth failed\n");
        return false;
    }
    bool ok = e2e_create(&T, "g3", "FROM ./single.gguf\nPARAMETER num_ctx 512\n") &&
              e2e_create(&T, "g3proj", "FROM ./text.gguf\nFROM ./mmproj.gguf\n"
                                       "PARAMETER num_ctx 512\n") &&
              e2e_create(&T, "g3broken", "FROM ./broken.gguf\n") &&
              e2e_create(&T, "g3text", "FROM ./text.gguf\n");
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
    CHECK_MSG(has_vision("g3"), "g3 lacks vision");
    CHECK_MSG(has_vision("g3proj"), "g3proj lacks vision");
    CHECK_MSG(!has_vision("g3broken"), "g3broken claims vision");
    CHECK_MSG(!has_vision("g3text"), "g3text claims vision");
    json_t *j = post("/api/show", "{\"model\":\"g3\"}", 200);
    CHECK(e2e_jget(j, "projector_info") == NULL);
    json_t *mi = json_object_get(j, "model_info"); /* keys hold dots */
    CHECK(json_integer_value(json_object_get(mi, "gemma3.vision.block_count")) == 3);
    json_decref(j);
    j = post("/api/show", "{\"model\":\"g3proj\"}", 200);
    json_t *pi = json_object_get(j, "projector_info");
    CHECK(json_integer_value(json_object_get(pi, "clip.vision.image_size")) == 224);
    json_decref(j);
}

/* A greedy chat with the image: its answer, and prompt_eval_count. */
static char *chat(const char *model, const char *img, json_int_t *n_prompt)
{
    char body[4096];
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

static void test_requests(void)
{
    json_int_t n_txt = 0, n_img = 0, n_proj = 0;
    free(chat("g3", NULL, &n_txt));
    char *a = chat("g3", png2x2, &n_img);
    CHECK_MSG(n_img == n_txt + 18, "%lld tokens with the image, %lld without",
              (long long)n_img, (long long)n_txt);
    char *b = chat("g3proj", png2x2, &n_proj);
    CHECK_EQ_INT(n_proj, n_img);
    CHECK_EQ_STR(a, b);
    free(a);
    free(b);
    char body[4096];
    snprintf(body, sizeof body,
             "{\"model\":\"g3\",\"prompt\":\"what is this\",\"images\":[\"%s\"],"
             "\"stream\":false,\"options\":{\"num_predict\":2}}", png2x2);
    json_t *j = post("/api/generate", body, 200);
    CHECK(json_integer_value(e2e_jget(j, "prompt_eval_count")) >= 18);
    json_decref(j);
}

static void test_refused(void)
{
    const char *models[] = {"g3broken", "g3text"};
    for (size_t i = 0; i < CR_ARRAY_LEN(models); i++) {
        char body[4096], want[128];
        snprintf(body, sizeof body,
                 "{\"model\":\"%s\",\"prompt\":\"hi\",\"images\":[\"%s\"],\"stream\":false}",
                 models[i], png2x2);
        json_t *j = post("/api/generate", body, 400);
        snprintf(want, sizeof want, "\"%s\" does not support images", models[i]);
        CHECK_EQ_STR(e2e_jstr(j, "error"), want);
        json_decref(j);
    }
    /* the broken one still answers text */
    json_decref(post("/api/generate", "{\"model\":\"g3broken\",\"prompt\":\"hi\","
                                      "\"stream\":false,\"options\":{\"num_predict\":1}}", 200));
}

int main(void)
{
    if (!e2e_start(&T))
        return 1;
    if (setup()) {
        test_show();
        test_requests();
        test_refused();
    }
    e2e_stop(&T);
    return check_finish("e2e_gemma3v");
}
