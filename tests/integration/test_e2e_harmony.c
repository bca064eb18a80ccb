/* test_e2e_harmony.c: a model created with `RENDERER harmony` and
 * `PARSER harmony` through the whole services.
 *
 * `corral serve` runs with CORRAL_TEST_SCRIPT (the runner's scripted
 * sampler, testhooks.h): a synthetic model answers, in turn, gpt-oss's
 * reasoning plus a tool call in the commentary channel (ended by <|call|>),
 * then reasoning plus a final answer (ended by <|return|>). On those real
 * token streams /api/chat must return message.thinking, message.content and
 * message.tool_calls split by the harmony parser, streaming and not, with
 * no harmony marker in any chunk (and on /v1/chat/completions as
 * `reasoning` and `tool_calls`); `corral show --modelfile` prints the
 * RENDERER and PARSER lines; a Modelfile naming an unknown renderer is
 * refused by create. */
#include "lib/prelude.h"

#include <stdlib.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

static const char CALL_ANSWER[] =
    "<|channel|>analysis<|message|>User wants the weather. Call the tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather "
    "<|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
static const char FINAL_ANSWER[] =
    "<|channel|>analysis<|message|>The tool says 18.<|end|><|start|>assistant"
    "<|channel|>final<|message|>It is 18 degrees in Paris.<|return|>";

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
    "\"Current weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
    "{\"type\":\"string\"}},\"required\":[\"city\"]}}}]";

typedef struct answer {
    char thinking[1024], content[1024];
    json_t *calls;
    char reason[32];
    bool marker; /* some chunk carried harmony marker text */
} answer_t;

static answer_t chat(bool stream, const char *messages)
{
    answer_t a = {.calls = json_array(), .reason = "(none)"};
    char body[4096];
    snprintf(body, sizeof body,
             "{\"model\":\"oss\",\"stream\":%s,\"tools\":%s,\"messages\":%s}",
             stream ? "true" : "false", TOOLS, messages);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/chat", body, NULL, NULL);
    CHECK_MSG(r.status == 200, "status %ld: %s", (long)r.status, r.body ? r.body : "");
    json_t *lines = e2e_ndjson(r.body ? r.body : "");
    CHECK(stream ? json_array_size(lines) > 2 : json_array_size(lines) == 1);
    for (size_t i = 0; i < json_array_size(lines); i++) {
        json_t *l = json_array_get(lines, i);
        const char *t = json_string_value(e2e_jget(l, "message.thinking"));
        const char *c = json_string_value(e2e_jget(l, "message.content"));
        if (t)
            strncat(a.thinking, t, sizeof a.thinking - strlen(a.thinking) - 1);
        if (c)
            strncat(a.content, c, sizeof a.content - strlen(a.content) - 1);
        a.marker = a.marker || (t && strstr(t, "<|")) || (c && strstr(c, "<|"));
        json_t *tc = e2e_jget(l, "message.tool_calls");
        if (json_is_array(tc))
            json_array_extend(a.calls, tc);
        if (json_is_true(json_object_get(l, "done")))
            snprintf(a.reason, sizeof a.reason, "%s", e2e_jstr(l, "done_reason"));
    }
    json_decref(lines);
    e2e_resp_free(&r);
    return a;
}

static void test_chat(bool stream)
{
    answer_t a = chat(stream, "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]");
    CHECK_EQ_STR(a.thinking, "User wants the weather. Call the tool.");
    CHECK_EQ_STR(a.content, "");
    CHECK(!a.marker);
    CHECK_EQ_STR(a.reason, "stop");
    CHECK_EQ_INT(json_array_size(a.calls), 1);
    json_t *c = json_array_get(a.calls, 0);
    CHECK_EQ_STR(e2e_jstr(c, "function.name"), "get_weather");
    json_t *want = json_loads("{\"city\":\"Paris\"}", 0, NULL);
    CHECK(json_equal(e2e_jget(c, "function.arguments"), want));
    json_decref(want);
    const char *id = e2e_jstr(c, "id");
    CHECK_MSG(!strncmp(id, "call_", 5) && strlen(id) == 13, "id %s", id);
    json_decref(a.calls);

    /* the follow-up with the tool's result: reasoning and the answer */
    answer_t b = chat(stream,
                      "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
                      "{\"role\":\"assistant\",\"thinking\":\"Call the tool.\","
                      "\"tool_calls\":[{\"function\":{\"name\":\"get_weather\","
                      "\"arguments\":{\"city\":\"Paris\"}}}]},"
                      "{\"role\":\"tool\",\"tool_name\":\"get_weather\","
                      "\"content\":\"{\\\"temp\\\": 18}\"}]");
    CHECK_EQ_STR(b.thinking, "The tool says 18.");
    CHECK_EQ_STR(b.content, "It is 18 degrees in Paris.");
    CHECK(!b.marker);
    CHECK_EQ_INT(json_array_size(b.calls), 0);
    CHECK_EQ_STR(b.reason, "stop");
    json_decref(b.calls);
}

/* /v1/chat/completions: reasoning and tool_calls on the OpenAI message. */
static void test_openai(void)
{
    char body[4096];
    snprintf(body, sizeof body,
             "{\"model\":\"oss\",\"tools\":%s,\"messages\":[{\"role\":\"user\","
             "\"content\":\"Weather in Paris?\"}]}",
             TOOLS);
    e2e_resp_t r = e2e_http(&T, "POST", "/v1/chat/completions", body, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_EQ_STR(e2e_jstr(j, "choices.0.message.reasoning"),
                 "User wants the weather. Call the tool.");
    CHECK_EQ_STR(e2e_jstr(j, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    json_t *args = json_loads(e2e_jstr(j, "choices.0.message.tool_calls.0.function.arguments"),
                              0, NULL);
    json_t *want = json_loads("{\"city\":\"Paris\"}", 0, NULL);
    CHECK(json_equal(args, want));
    CHECK_EQ_STR(e2e_jstr(j, "choices.0.finish_reason"), "tool_calls");
    json_decref(want);
    json_decref(args);
    json_decref(j);
    e2e_resp_free(&r);
}

static void test_show_and_refusal(void)
{
    char *out = NULL;
    CHECK_EQ_INT(e2e_cli(&T, NULL, &out, "show", "--modelfile", "oss", NULL), 0);
    CHECK_MSG(out && strstr(out, "\nRENDERER harmony\nPARSER harmony\n"), "%s",
              out ? out : "");
    free(out);
    out = NULL;
    CHECK_EQ_INT(e2e_cli(&T, NULL, &out, "show", "oss", NULL), 0);
    CHECK_MSG(out && strstr(out, "tools") && strstr(out, "thinking"), "%s", out ? out : "");
    free(out);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/create",
                            "{\"model\":\"nope\",\"from\":\"oss\",\"renderer\":\"gptoss\"}",
                            NULL, NULL);
    CHECK_MSG(r.body && strstr(r.body, "unknown renderer \\\"gptoss\\\""), "%ld %s", (long)r.status,
              r.body ? r.body : "");
    e2e_resp_free(&r);
}

int main(void)
{
    char script[1200];
    snprintf(script, sizeof script, "/tmp/corral-e2e-harmony-%d.txt", (int)getpid());
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
    bool created = e2e_synth_create(&T, "oss",
                                    "RENDERER harmony\nPARSER harmony\n"
                                    "PARAMETER num_ctx 2048\n",
                                    "--seed", "7", "--ctx", "2048", NULL);
    CHECK(created);
    if (created) {
        test_chat(false);
        test_chat(true);
        test_openai(); /* the script's next turn is the call again */
        test_show_and_refusal();
    }
    e2e_stop(&T);
    unlink(script);
    return check_finish("e2e_harmony");
}
