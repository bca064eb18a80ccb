/* test_e2e_thinking.c: thinking (reasoning) through the whole services.
 *
 * `corral serve` runs with CORRAL_TEST_SCRIPT (the runner's scripted
 * sampler, testhooks.h): a synthetic model with a qwen3-style template (its
 * messages carry `.Thinking` between <think> tags, so the model has the
 * "thinking" capability) answers every request with THE_ANSWER. Checked on
 * that real token stream: native /api/chat `message.thinking` apart from
 * `message.content` (stream and not), /api/generate `thinking`,
 * /v1/chat/completions `reasoning` on the message and on deltas (stream
 * and not), and `think: false` (native) / `reasoning_effort: "none"` (/v1):
 * no split, the model's raw text is the content (docs/api.md). */
#include "lib/prelude.h"

#include <stdlib.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

static const char THE_ANSWER[] = "<think>reasoning here</think>final answer";
static const char THINKING[] = "reasoning here";
static const char CONTENT[] = "final answer";

/* A qwen3-like chat template, written for this test: the thinking tags are
 * the literals around `.Thinking` inside the range over Messages. */
static const char THINK_TMPL[] =
    "{{- range $i, $_ := .Messages }}"
    "{{- $last := eq (len (slice $.Messages $i)) 1 -}}"
    "{{- if eq .Role \"user\" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n"
    "{{ else if eq .Role \"assistant\" }}<|im_start|>assistant\n"
    "{{ if .Thinking }}<think>{{ .Thinking }}</think>\n{{ end }}"
    "{{ .Content }}<|im_end|>\n"
    "{{ end }}"
    "{{- if and (ne .Role \"assistant\") $last }}<|im_start|>assistant\n"
    "{{ if and $.IsThinkSet (not $.Think) }}<think>\n\n</think>\n\n{{ end }}"
    "{{ end }}"
    "{{- end }}";

static void cat(char *dst, size_t cap, json_t *o, const char *path)
{
    const char *s = json_string_value(e2e_jget(o, path));
    if (s)
        strncat(dst, s, cap - strlen(dst) - 1);
}

static bool create_model(void)
{
    char text[4096];
    snprintf(text, sizeof text, "TEMPLATE \"\"\"%s\"\"\"\nPARAMETER num_ctx 1024\n",
             THINK_TMPL);
    bool created =
        e2e_synth_create(&T, "thinker", text, "--seed", "11", "--ctx", "1024", NULL);
    CHECK(created);
    return created;
}

/* /api/show lists the capability the template gives. */
static void test_capability(void)
{
    e2e_resp_t r = e2e_http(&T, "POST", "/api/show", "{\"model\":\"thinker\"}",
                            NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    json_t *caps = json_object_get(j, "capabilities");
    bool thinking = false;
    for (size_t i = 0; i < json_array_size(caps); i++)
        thinking |= !strcmp(json_string_value(json_array_get(caps, i))
                                ? json_string_value(json_array_get(caps, i))
                                : "",
                            "thinking");
    CHECK_MSG(thinking, "capabilities: %s", r.body ? r.body : "");
    json_decref(j);
    e2e_resp_free(&r);
}

/* think: "" omitted, "true" or "false" (JSON text of the field). */
static void native_chat(bool stream, const char *think, const char *want_thinking,
                        const char *want_content)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"thinker\",\"stream\":%s%s%s,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"why?\"}]}",
             stream ? "true" : "false", *think ? ",\"think\":" : "", think);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/chat", body, NULL, NULL);
    CHECK_MSG(r.status == 200, "chat %s: %ld %s", body, (long)r.status,
              r.body ? r.body : "");
    json_t *lines = e2e_ndjson(r.body ? r.body : "");
    CHECK(stream ? json_array_size(lines) > 2 : json_array_size(lines) == 1);
    char thinking[512] = "", content[512] = "";
    bool done = false, mixed = false;
    for (size_t i = 0; i < json_array_size(lines); i++) {
        json_t *l = json_array_get(lines, i);
        const char *t = json_string_value(e2e_jget(l, "message.thinking"));
        const char *c = json_string_value(e2e_jget(l, "message.content"));
        /* A streamed piece is reasoning or answer, never both. */
        if (stream && t && *t && c && *c)
            mixed = true;
        cat(thinking, sizeof thinking, l, "message.thinking");
        cat(content, sizeof content, l, "message.content");
        if (json_is_true(json_object_get(l, "done"))) {
            done = true;
            CHECK_EQ_STR(e2e_jstr(l, "done_reason"), "stop");
        }
    }
    CHECK(done);
    CHECK_MSG(!mixed, "a chunk carried thinking and content: %s", r.body);
    CHECK_MSG(!strcmp(thinking, want_thinking), "think=%s stream=%d thinking '%s'",
              think, stream, thinking);
    CHECK_MSG(!strcmp(content, want_content), "think=%s stream=%d content '%s'",
              think, stream, content);
    json_decref(lines);
    e2e_resp_free(&r);
}

static void native_generate(void)
{
    e2e_resp_t r = e2e_http(&T, "POST", "/api/generate",
                            "{\"model\":\"thinker\",\"stream\":false,"
                            "\"prompt\":\"why?\"}",
                            NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_EQ_STR(e2e_jstr(j, "thinking"), THINKING);
    CHECK_EQ_STR(e2e_jstr(j, "response"), CONTENT);
    json_decref(j);
    e2e_resp_free(&r);
}

/* effort: "" omitted, else reasoning_effort's value. */
static void openai_chat(bool stream, const char *effort,
                        const char *want_reasoning, const char *want_content)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"thinker\",\"stream\":%s%s%s%s,\"messages\":[{\"role\":"
             "\"user\",\"content\":\"why?\"}]}",
             stream ? "true" : "false", *effort ? ",\"reasoning_effort\":\"" : "",
             effort, *effort ? "\"" : "");
    e2e_resp_t r = e2e_http(&T, "POST", "/v1/chat/completions", body, NULL, NULL);
    CHECK_MSG(r.status == 200, "v1 %s: %ld %s", body, (long)r.status,
              r.body ? r.body : "");
    char reasoning[512] = "", content[512] = "", reason[32] = "(none)";
    bool saw_done = false;
    if (!stream) {
        json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
        cat(reasoning, sizeof reasoning, j, "choices.0.message.reasoning");
        cat(content, sizeof content, j, "choices.0.message.content");
        snprintf(reason, sizeof reason, "%s", e2e_jstr(j, "choices.0.finish_reason"));
        json_decref(j);
    } else {
        for (const char *p = r.body; p && !strncmp(p, "data: ", 6);) {
            const char *end = strstr(p, "\n\n");
            if (!end)
                break;
            if (!strncmp(p + 6, "[DONE]", 6)) {
                saw_done = true;
                break;
            }
            json_t *e = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
            cat(reasoning, sizeof reasoning, e, "choices.0.delta.reasoning");
            cat(content, sizeof content, e, "choices.0.delta.content");
            if (json_is_string(e2e_jget(e, "choices.0.finish_reason")))
                snprintf(reason, sizeof reason, "%s",
                         e2e_jstr(e, "choices.0.finish_reason"));
            json_decref(e);
            p = end + 2;
        }
        CHECK_MSG(saw_done, "no [DONE]: %s", r.body ? r.body : "");
    }
    CHECK_MSG(!strcmp(reasoning, want_reasoning),
              "v1 effort='%s' stream=%d reasoning '%s'", effort, stream, reasoning);
    CHECK_MSG(!strcmp(content, want_content),
              "v1 effort='%s' stream=%d content '%s'", effort, stream, content);
    CHECK_EQ_STR(reason, "stop");
    e2e_resp_free(&r);
}

int main(void)
{
    char script[1200];
    snprintf(script, sizeof script, "/tmp/corral-e2e-think-%d.txt",
             (int)getpid());
    char text[256];
    snprintf(text, sizeof text, "%s\n", THE_ANSWER);
    if (!e2e_write_file(script, text))
        return 1;
    /* Only the environment of the serving processes enables the script. */
    setenv("CORRAL_TEST_SCRIPT", script, 1);
    if (!e2e_start(&T)) {
        unlink(script);
        return 1;
    }
    if (create_model()) {
        test_capability();
        /* think omitted: a thinking model thinks; true: the same. */
        native_chat(false, "", THINKING, CONTENT);
        native_chat(true, "", THINKING, CONTENT);
        native_chat(false, "true", THINKING, CONTENT);
        native_chat(true, "\"high\"", THINKING, CONTENT);
        /* think false: no split; what the model said is the content. */
        native_chat(false, "false", "", THE_ANSWER);
        native_chat(true, "false", "", THE_ANSWER);
        native_generate();
        openai_chat(false, "", THINKING, CONTENT);
        openai_chat(true, "", THINKING, CONTENT);
        openai_chat(false, "none", "", THE_ANSWER);
        openai_chat(true, "none", "", THE_ANSWER);
    }
    e2e_stop(&T);
    unlink(script);
    return check_finish("e2e_thinking");
}
