/* test_e2e_tools.c: tool calls through the whole services.
 *
 * `corral serve` runs with CORRAL_TEST_SCRIPT (the runner's scripted
 * sampler, testhooks.h), so a synthetic model with the qwen2.5 (hermes
 * <tool_call>) template answers, in turn, a tool call (with content before
 * it) and then a final text. Each route and mode is checked on a real
 * token stream: /api/chat and /v1/chat/completions, streaming and not,
 * parsed calls (name, arguments, function.index, id; on /v1 arguments as a
 * JSON string and finish_reason "tool_calls"), the content around them,
 * and the follow-up with the `tool` result answered as plain content. */
#include "lib/prelude.h"

#include <stdlib.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/tool_templates.h"

static e2e_t T;

static const char CALL_ANSWER[] =
    "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": "
    "\"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>";
static const char FINAL_ANSWER[] = "It is 18 degrees in Paris.";

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":"
    "\"get_time\",\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"zone\":{\"type\":\"string\"}}}}}]";

static bool create_model(void)
{
    char text[8192];
    snprintf(text, sizeof text, "TEMPLATE \"\"\"%s\"\"\"\nPARAMETER num_ctx 2048\n",
             qwen25_tmpl);
    bool created =
        e2e_synth_create(&T, "qwen-tools", text, "--seed", "7", "--ctx", "2048", NULL);
    CHECK(created);
    return created;
}

/* The two calls of CALL_ANSWER in a native (arguments object) or OpenAI
 * (arguments string) tool_calls array. */
static void check_calls(json_t *calls, bool openai)
{
    CHECK_MSG(json_array_size(calls) == 2, "%zu calls", json_array_size(calls));
    static const char *const names[] = {"get_weather", "get_time"};
    static const char *const args[] = {"{\"city\":\"Paris\"}",
                                       "{\"zone\":\"CET\"}"};
    for (size_t i = 0; i < 2 && i < json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, i);
        CHECK_EQ_STR(e2e_jstr(c, "function.name"), names[i]);
        json_t *want = json_loads(args[i], 0, NULL);
        json_t *a = e2e_jget(c, "function.arguments");
        json_t *got = openai ? json_loads(json_string_value(a) ? json_string_value(a) : "",
                                          0, NULL)
                             : json_incref(a);
        CHECK_MSG(json_is_object(got) && json_equal(got, want),
                  "call %zu arguments", i);
        json_decref(got);
        json_decref(want);
        const char *id = e2e_jstr(c, "id");
        CHECK_MSG(!strncmp(id, "call_", 5) && strlen(id) == 13, "id %s", id);
        if (openai) {
            CHECK_EQ_STR(e2e_jstr(c, "type"), "function");
            CHECK_EQ_INT(json_integer_value(e2e_jget(c, "index")), (json_int_t)i);
        } else {
            CHECK_EQ_INT(json_integer_value(e2e_jget(c, "function.index")),
                         (json_int_t)i);
        }
    }
}

/* messages of the follow-up: the user turn, the calls, the tool's result. */
static void followup_messages(char *out, size_t cap)
{
    snprintf(out, cap,
             "[{\"role\":\"user\",\"content\":\"Weather and time?\"},"
             "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"function\":"
             "{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}}]},"
             "{\"role\":\"tool\",\"content\":\"{\\\"temp\\\": 18}\","
             "\"tool_name\":\"get_weather\"}]");
}

static void test_native(bool stream)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"model\":\"qwen-tools\",\"stream\":%s,\"tools\":%s,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Weather and time?\"}]}",
             stream ? "true" : "false", TOOLS);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/chat", body, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *calls = json_array();
    char content[1024] = "";
    const char *reason = "(none)";
    json_t *lines = e2e_ndjson(r.body ? r.body : "");
    CHECK(stream ? json_array_size(lines) > 2 : json_array_size(lines) == 1);
    for (size_t i = 0; i < json_array_size(lines); i++) {
        json_t *l = json_array_get(lines, i);
        json_t *tc = e2e_jget(l, "message.tool_calls");
        if (json_is_array(tc))
            json_array_extend(calls, tc);
        const char *c = json_string_value(e2e_jget(l, "message.content"));
        if (c)
            strncat(content, c, sizeof content - strlen(content) - 1);
        if (json_is_true(json_object_get(l, "done")))
            reason = e2e_jstr(l, "done_reason");
    }
    check_calls(calls, false);
    CHECK_EQ_STR(content, "Checking.\n");
    CHECK_EQ_STR(reason, "stop");
    json_decref(lines);
    json_decref(calls);
    e2e_resp_free(&r);

    /* the follow-up with the tool's result: plain content */
    char msgs[1024];
    followup_messages(msgs, sizeof msgs);
    snprintf(body, sizeof body,
             "{\"model\":\"qwen-tools\",\"stream\":%s,\"tools\":%s,\"messages\":%s}",
             stream ? "true" : "false", TOOLS, msgs);
    r = e2e_http(&T, "POST", "/api/chat", body, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    lines = e2e_ndjson(r.body ? r.body : "");
    content[0] = '\0';
    size_t n_calls = 0;
    for (size_t i = 0; i < json_array_size(lines); i++) {
        json_t *l = json_array_get(lines, i);
        n_calls += json_array_size(e2e_jget(l, "message.tool_calls"));
        const char *c = json_string_value(e2e_jget(l, "message.content"));
        if (c)
            strncat(content, c, sizeof content - strlen(content) - 1);
    }
    CHECK_EQ_STR(content, FINAL_ANSWER);
    CHECK_EQ_INT((int)n_calls, 0);
    json_decref(lines);
    e2e_resp_free(&r);
}

static void test_openai(bool stream)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"model\":\"qwen-tools\",\"stream\":%s,\"tools\":%s,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Weather and time?\"}]}",
             stream ? "true" : "false", TOOLS);
    e2e_resp_t r = e2e_http(&T, "POST", "/v1/chat/completions", body, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *calls = json_array();
    char content[1024] = "";
    char reason[32] = "(none)";
    if (!stream) {
        json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
        json_array_extend(calls, e2e_jget(j, "choices.0.message.tool_calls"));
        snprintf(content, sizeof content, "%s", e2e_jstr(j, "choices.0.message.content"));
        snprintf(reason, sizeof reason, "%s", e2e_jstr(j, "choices.0.finish_reason"));
        json_decref(j);
    } else {
        for (const char *p = r.body; p && !strncmp(p, "data: ", 6);) {
            const char *end = strstr(p, "\n\n");
            if (!end || !strncmp(p + 6, "[DONE]", 6))
                break;
            json_t *e = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
            json_t *tc = e2e_jget(e, "choices.0.delta.tool_calls");
            if (json_is_array(tc))
                json_array_extend(calls, tc);
            const char *c = json_string_value(e2e_jget(e, "choices.0.delta.content"));
            if (c)
                strncat(content, c, sizeof content - strlen(content) - 1);
            if (json_is_string(e2e_jget(e, "choices.0.finish_reason")))
                snprintf(reason, sizeof reason, "%s",
                         e2e_jstr(e, "choices.0.finish_reason"));
            json_decref(e);
            p = end + 2;
        }
    }
    check_calls(calls, true);
    CHECK_EQ_STR(content, "Checking.\n");
    CHECK_EQ_STR(reason, "tool_calls");
    json_decref(calls);
    e2e_resp_free(&r);

    /* the follow-up, OpenAI-shaped: arguments as a string, tool_call_id */
    snprintf(body, sizeof body,
             "{\"model\":\"qwen-tools\",\"stream\":false,\"tools\":%s,\"messages\":["
             "{\"role\":\"user\",\"content\":\"Weather and time?\"},"
             "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":"
             "\"call_abc\",\"type\":\"function\",\"function\":{\"name\":"
             "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
             "{\"role\":\"tool\",\"tool_call_id\":\"call_abc\",\"content\":"
             "\"{\\\"temp\\\": 18}\"}]}",
             TOOLS);
    r = e2e_http(&T, "POST", "/v1/chat/completions", body, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_EQ_STR(e2e_jstr(j, "choices.0.message.content"), FINAL_ANSWER);
    CHECK_EQ_STR(e2e_jstr(j, "choices.0.finish_reason"), "stop");
    CHECK(e2e_jget(j, "choices.0.message.tool_calls") == NULL);
    json_decref(j);
    e2e_resp_free(&r);
}

int main(void)
{
    char script[1200];
    snprintf(script, sizeof script, "/tmp/corral-e2e-tools-%d.txt", (int)getpid());
    char text[2048];
    snprintf(text, sizeof text, "%s\n---\n%s\n", CALL_ANSWER, FINAL_ANSWER);
    if (!e2e_write_file(script, text))
        return 1;
    /* Only the environment of the serving processes enables the script. */
    setenv("CORRAL_TEST_SCRIPT", script, 1);
    if (!e2e_start(&T)) {
        unlink(script);
        return 1;
    }
    if (create_model()) {
        test_native(false);
        test_native(true);
        test_openai(false);
        test_openai(true);
    }
    e2e_stop(&T);
    unlink(script);
    return check_finish("e2e_tools");
}
