/* test_e2e_request_fields.c: request fields that must work as Ollama's or
 * be refused, never accepted and ignored, through the whole services.
 *
 * `corral serve` runs with CORRAL_TEST_SCRIPT (the runner's scripted
 * sampler, testhooks.h) holding one long answer, so generation never ends
 * early by itself. Checked:
 *   - _debug_render_only (generate and chat, stream and not): no inference,
 *     Ollama's {"done":false,"_debug_info":{"rendered_template"}} shape with
 *     the exact prompt the template gives;
 *   - think omitted on a thinking model: the template sees Think and
 *     IsThinkSet true (Ollama's default), false when think is false, and
 *     neither on a model without the capability;
 *   - suffix: 400 "<full name> does not support insert" on a template
 *     without .Suffix; rendered in suffix mode on one with it;
 *   - truncate false: an over-long prompt is 400 "the input length exceeds
 *     the context length" (cut and answered without it);
 *   - shift false: a full context ends the answer ("length") within
 *     num_ctx tokens; with the default the context shifts and the answer
 *     runs to num_predict. */
#include "lib/prelude.h"

#include <stdlib.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

/* A template that shows what it was given. */
static const char SHOW_TMPL[] =
    "[{{ .System }}]{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ end }}"
    "{{ if $.IsThinkSet }} SET{{ end }}{{ if $.Think }} THINK{{ end }}";

/* The same with the thinking capability (tags around .Thinking). */
static const char THINK_TMPL[] =
    "{{ range .Messages }}<{{ .Role }}>"
    "{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}"
    "{{ end }}{{ if $.IsThinkSet }} SET{{ end }}{{ if $.Think }} THINK{{ end }}";

static const char FIM_TMPL[] = "<PRE>{{ .Prompt }}<SUF>{{ .Suffix }}<MID>";

static json_t *post(const char *path, const char *body, long *status)
{
    e2e_resp_t r = e2e_http(&T, "POST", path, body, NULL, NULL);
    *status = r.status;
    json_t *lines = e2e_ndjson(r.body ? r.body : "");
    if (!json_array_size(lines))
        fprintf(stderr, "%s %s: %ld '%s'\n", path, body, r.status,
                r.body ? r.body : "");
    e2e_resp_free(&r);
    return lines;
}

static bool create(const char *name, const char *tmpl)
{
    char text[2048];
    snprintf(text, sizeof text, "TEMPLATE \"\"\"%s\"\"\"\nSYSTEM sys\n", tmpl);
    bool ok = e2e_synth_create(&T, name, text, "--seed", "5", "--ctx", "1024", NULL);
    CHECK_MSG(ok, "create %s", name);
    return ok;
}

/* The rendered prompt of a render-only request; checks the shape. */
static void render_only(const char *api, const char *body, bool stream,
                        const char *want)
{
    long status;
    char path[64];
    snprintf(path, sizeof path, "/api/%s", api);
    json_t *lines = post(path, body, &status);
    CHECK_MSG(status == 200, "%s %s: %ld", path, body, status);
    CHECK_EQ_INT(json_array_size(lines), 1);
    json_t *o = json_array_get(lines, 0);
    CHECK(json_is_false(json_object_get(o, "done")));
    CHECK(json_object_get(o, "eval_count") == NULL);
    CHECK(json_object_get(o, "done_reason") == NULL);
    CHECK(json_object_get(o, "image_count") == NULL);
    if (!strcmp(api, "chat"))
        CHECK_EQ_STR(e2e_jstr(o, "message.content"), "");
    else
        CHECK_EQ_STR(e2e_jstr(o, "response"), "");
    CHECK_MSG(!strcmp(e2e_jstr(o, "_debug_info.rendered_template"), want),
              "%s (stream %d): rendered '%s', want '%s'", path, stream,
              e2e_jstr(o, "_debug_info.rendered_template"), want);
    json_decref(lines);
}

static void test_render_only(void)
{
    render_only("generate",
                "{\"model\":\"plain\",\"prompt\":\"hi\",\"stream\":false,"
                "\"think\":false,\"_debug_render_only\":true}",
                false, "[sys]<system>sys<user>hi SET");
    render_only("generate",
                "{\"model\":\"plain\",\"prompt\":\"hi\",\"system\":\"S2\","
                "\"_debug_render_only\":true}",
                true, "[S2]<system>S2<user>hi");
    render_only("chat",
                "{\"model\":\"plain\",\"stream\":false,\"_debug_render_only\":true,"
                "\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                "{\"role\":\"assistant\",\"content\":\"b\"},"
                "{\"role\":\"user\",\"content\":\"c\"}]}",
                false, "[sys]<system>sys<user>a<assistant>b<user>c");
    render_only("chat",
                "{\"model\":\"plain\",\"_debug_render_only\":true,"
                "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                true, "[sys]<system>sys<user>x");
}

/* The OpenAI routes pass _debug_render_only on and answer with
 * _debug_info too. */
static void test_render_only_openai(void)
{
    e2e_resp_t r = e2e_http(&T, "POST", "/v1/chat/completions",
                            "{\"model\":\"plain\",\"_debug_render_only\":true,"
                            "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                            NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_EQ_STR(e2e_jstr(j, "object"), "chat.completion");
    CHECK_EQ_STR(e2e_jstr(j, "_debug_info.rendered_template"), "[sys]<system>sys<user>x");
    CHECK_EQ_STR(e2e_jstr(j, "choices.0.message.content"), "");
    CHECK(json_is_null(e2e_jget(j, "choices.0.finish_reason")));
    json_decref(j);
    e2e_resp_free(&r);
    r = e2e_http(&T, "POST", "/v1/completions",
                 "{\"model\":\"plain\",\"prompt\":\"y\",\"_debug_render_only\":true}",
                 NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    j = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_EQ_STR(e2e_jstr(j, "object"), "text_completion");
    CHECK_EQ_STR(e2e_jstr(j, "_debug_info.rendered_template"), "[sys]<system>sys<user>y");
    json_decref(j);
    e2e_resp_free(&r);
    r = e2e_http(&T, "POST", "/v1/chat/completions",
                 "{\"model\":\"plain\",\"stream\":true,\"_debug_render_only\":true,"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"z\"}]}",
                 NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    CHECK_MSG(r.body && /* Go's encoding escapes < and > */
                  strstr(r.body, "\"rendered_template\":\"[sys]\\u003csystem\\u003esys"
                                 "\\u003cuser\\u003ez\"") &&
                  strstr(r.body, "data: [DONE]"),
              "stream: %s", r.body ? r.body : "");
    e2e_resp_free(&r);
    r = e2e_http(&T, "POST", "/v1/chat/completions",
                 "{\"model\":\"plain\",\"_debug_render_only\":1,"
                 "\"messages\":[{\"role\":\"user\",\"content\":\"z\"}]}",
                 NULL, NULL);
    CHECK_EQ_INT(r.status, 400);
    e2e_resp_free(&r);
}

static void test_think_default(void)
{
    /* A thinking model: omitted = true, as Ollama sets it. */
    render_only("chat",
                "{\"model\":\"thinker\",\"stream\":false,\"_debug_render_only\":true,"
                "\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
                false, "<system>sys<user>q SET THINK");
    render_only("chat",
                "{\"model\":\"thinker\",\"stream\":false,\"_debug_render_only\":true,"
                "\"think\":false,\"messages\":[{\"role\":\"user\",\"content\":\"q\"}]}",
                false, "<system>sys<user>q SET");
    render_only("generate",
                "{\"model\":\"thinker\",\"prompt\":\"q\",\"stream\":false,"
                "\"_debug_render_only\":true}",
                false, "<system>sys<user>q SET THINK");
}

static void test_suffix(void)
{
    long status;
    json_t *lines = post("/api/generate",
                         "{\"model\":\"plain\",\"prompt\":\"a\",\"suffix\":\"b\","
                         "\"stream\":false}",
                         &status);
    CHECK_EQ_INT(status, 400);
    CHECK_EQ_STR(e2e_jstr(json_array_get(lines, 0), "error"),
                 "registry.ollama.ai/library/plain:latest does not support insert");
    json_decref(lines);
    render_only("generate",
                "{\"model\":\"fim\",\"prompt\":\"a\",\"suffix\":\"b\",\"stream\":false,"
                "\"_debug_render_only\":true}",
                false, "<PRE>a<SUF>b<MID>");
}

static void test_truncate(void)
{
    char body[8192];
    char prompt[6000] = "";
    for (int i = 0; i < 400; i++)
        strcat(prompt, "word ");
    long status;
    snprintf(body, sizeof body,
             "{\"model\":\"plain\",\"prompt\":\"%s\",\"stream\":false,"
             "\"truncate\":false,\"options\":{\"num_ctx\":128,\"num_predict\":2}}",
             prompt);
    json_t *lines = post("/api/generate", body, &status);
    CHECK_EQ_INT(status, 400);
    CHECK_EQ_STR(e2e_jstr(json_array_get(lines, 0), "error"),
                 "the input length exceeds the context length");
    json_decref(lines);
    snprintf(body, sizeof body,
             "{\"model\":\"plain\",\"stream\":false,\"truncate\":false,"
             "\"options\":{\"num_ctx\":128,\"num_predict\":2},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}]}",
             prompt);
    lines = post("/api/chat", body, &status);
    CHECK_EQ_INT(status, 400);
    CHECK_EQ_STR(e2e_jstr(json_array_get(lines, 0), "error"),
                 "the input length exceeds the context length");
    json_decref(lines);
    /* The default cuts it and answers. */
    snprintf(body, sizeof body,
             "{\"model\":\"plain\",\"prompt\":\"%s\",\"stream\":false,"
             "\"options\":{\"num_ctx\":128,\"num_predict\":2}}",
             prompt);
    lines = post("/api/generate", body, &status);
    CHECK_EQ_INT(status, 200);
    CHECK_EQ_INT(json_integer_value(e2e_jget(json_array_get(lines, 0), "eval_count")), 2);
    json_decref(lines);
}

static void test_shift(void)
{
    long status;
    json_t *lines = post("/api/generate",
                         "{\"model\":\"plain\",\"prompt\":\"go\",\"stream\":false,"
                         "\"shift\":false,\"options\":{\"num_ctx\":128,\"num_predict\":400}}",
                         &status);
    CHECK_EQ_INT(status, 200);
    json_t *o = json_array_get(lines, 0);
    CHECK_EQ_STR(e2e_jstr(o, "done_reason"), "length");
    json_int_t n_prompt = json_integer_value(json_object_get(o, "prompt_eval_count"));
    json_int_t n_eval = json_integer_value(json_object_get(o, "eval_count"));
    CHECK_MSG(n_eval > 0 && n_prompt + n_eval <= 129,
              "shift false: %lld prompt + %lld generated tokens in num_ctx 128",
              (long long)n_prompt, (long long)n_eval);
    json_decref(lines);
    lines = post("/api/generate",
                 "{\"model\":\"plain\",\"prompt\":\"go\",\"stream\":false,"
                 "\"options\":{\"num_ctx\":128,\"num_predict\":400}}",
                 &status);
    CHECK_EQ_INT(status, 200);
    o = json_array_get(lines, 0);
    CHECK_EQ_STR(e2e_jstr(o, "done_reason"), "length");
    CHECK_EQ_INT(json_integer_value(json_object_get(o, "eval_count")), 400);
    json_decref(lines);
}

int main(void)
{
    char script[1200];
    snprintf(script, sizeof script, "/tmp/corral-e2e-fields-%d.txt", (int)getpid());
    /* One answer far longer than any context here. */
    static char answer[8192];
    for (int i = 0; i < 1000; i++)
        strcat(answer, "ab ");
    strcat(answer, "\n");
    if (!e2e_write_file(script, answer))
        return 1;
    setenv("CORRAL_TEST_SCRIPT", script, 1);
    if (!e2e_start(&T)) {
        unlink(script);
        return 1;
    }
    if (create("plain", SHOW_TMPL) && create("thinker", THINK_TMPL) &&
        create("fim", FIM_TMPL)) {
        test_render_only();
        test_render_only_openai();
        test_think_default();
        test_suffix();
        test_truncate();
        test_shift();
    }
    e2e_stop(&T);
    unlink(script);
    return check_finish("e2e_request_fields");
}
