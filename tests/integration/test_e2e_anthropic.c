/* test_e2e_anthropic.c: the Anthropic Messages API through the services.
 *
 * `corral serve` runs with the runner's scripted sampler (surface_model.h),
 * so the model's answers are known token streams: a thinking answer, a tool
 * call, a final answer. Checked: /v1/messages thinking + text blocks (one
 * object, and the SSE events message_start .. message_stop whose deltas add
 * up to the same blocks), tool_use blocks with parsed input and stop_reason
 * tool_use (both ways), the tool_result round trip, stop_sequences
 * (stop_reason stop_sequence naming it, both ways) and max_tokens (stop_reason max_tokens, output_tokens), count_tokens growing
 * with the system prompt and the tool turns, bad input answered in
 * Anthropic's error shape with the right status, and a repeated prompt's
 * cached part as usage.cache_read_input_tokens (input_tokens the rest). */
#include "lib/prelude.h"

#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/integration/surface_model.h"
#include "tests/unit/check.h"

static e2e_t T;

static const char TOOLS[] =
    "[{\"name\":\"get_weather\",\"description\":\"Weather of a city\","
    "\"input_schema\":" SURFACE_WEATHER_SCHEMA "}]";

static json_t *post(const char *path, const char *body, long *status)
{
    e2e_resp_t r = e2e_http(&T, "POST", path, body, NULL, NULL);
    *status = r.status;
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    if (!j)
        fprintf(stderr, "not JSON from %s: %s\n", path, r.body);
    e2e_resp_free(&r);
    return j;
}

static json_t *stream(const char *body, long *status)
{
    e2e_resp_t r = e2e_http(&T, "POST", "/v1/messages", body, NULL, NULL);
    *status = r.status;
    json_t *ev = e2e_sse(r.body);
    e2e_resp_free(&r);
    return ev;
}

/* The event names in order, space-separated, deltas of a kind once per run
 * ("content_block_delta" repeated collapses to one). */
static void event_names(json_t *ev, char *out, size_t cap)
{
    out[0] = '\0';
    const char *prev = "";
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        const char *name = e2e_jstr(e, "event");
        CHECK_EQ_STR(name, e2e_jstr(e, "data.type"));
        if (!strcmp(name, prev) && !strcmp(name, "content_block_delta"))
            continue;
        if (*out)
            strncat(out, " ", cap - strlen(out) - 1);
        strncat(out, name, cap - strlen(out) - 1);
        prev = name;
    }
}

static void test_thinking(void)
{
    static const char body[] =
        "{\"model\":\"agent\",\"max_tokens\":64,\"system\":\"Be brief.\","
        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":32},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]%s}";
    char text[1024];
    snprintf(text, sizeof text, body, "");
    long st;
    json_t *j = post("/v1/messages", text, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(!strncmp(e2e_jstr(j, "id"), "msg_", 4) && strlen(e2e_jstr(j, "id")) == 28);
    CHECK_EQ_STR(e2e_jstr(j, "type"), "message");
    CHECK_EQ_STR(e2e_jstr(j, "role"), "assistant");
    CHECK_EQ_STR(e2e_jstr(j, "model"), "agent");
    CHECK_EQ_INT(json_array_size(e2e_jget(j, "content")), 2);
    CHECK_EQ_STR(e2e_jstr(j, "content.0.type"), "thinking");
    CHECK_EQ_STR(e2e_jstr(j, "content.0.thinking"), "reasoning here");
    CHECK_EQ_STR(e2e_jstr(j, "content.1.type"), "text");
    CHECK_EQ_STR(e2e_jstr(j, "content.1.text"), "final answer");
    CHECK_EQ_STR(e2e_jstr(j, "stop_reason"), "end_turn");
    CHECK(json_is_null(e2e_jget(j, "stop_sequence")));
    CHECK(json_integer_value(e2e_jget(j, "usage.input_tokens")) > 0);
    json_int_t out_tokens = json_integer_value(e2e_jget(j, "usage.output_tokens"));
    CHECK(out_tokens > 0);
    json_decref(j);

    snprintf(text, sizeof text, body, ",\"stream\":true");
    json_t *ev = stream(text, &st);
    CHECK_EQ_INT(st, 200);
    char names[1024];
    event_names(ev, names, sizeof names);
    CHECK_EQ_STR(names, "message_start content_block_start content_block_delta "
                        "content_block_stop content_block_start content_block_delta "
                        "content_block_stop message_delta message_stop");
    char thinking[256] = "", answer[256] = "";
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        json_t *d = e2e_jget(e, "data");
        const char *type = e2e_jstr(d, "type");
        if (!strcmp(type, "message_start")) {
            CHECK(!strncmp(e2e_jstr(d, "message.id"), "msg_", 4));
            CHECK_EQ_INT(json_array_size(e2e_jget(d, "message.content")), 0);
        } else if (!strcmp(type, "content_block_start")) {
            json_int_t idx = json_integer_value(e2e_jget(d, "index"));
            CHECK_EQ_STR(e2e_jstr(d, "content_block.type"), idx == 0 ? "thinking" : "text");
        } else if (!strcmp(type, "content_block_delta")) {
            const char *dt = e2e_jstr(d, "delta.type");
            CHECK(!strcmp(dt, "thinking_delta") || !strcmp(dt, "text_delta"));
            if (!strcmp(dt, "thinking_delta"))
                strncat(thinking, e2e_jstr(d, "delta.thinking"), 200);
            else if (!strcmp(dt, "text_delta"))
                strncat(answer, e2e_jstr(d, "delta.text"), 200);
        } else if (!strcmp(type, "message_delta")) {
            CHECK_EQ_STR(e2e_jstr(d, "delta.stop_reason"), "end_turn");
            CHECK_EQ_INT(json_integer_value(e2e_jget(d, "usage.output_tokens")),
                         out_tokens);
        }
    }
    CHECK_EQ_STR(thinking, "reasoning here");
    CHECK_EQ_STR(answer, "final answer");
    json_decref(ev);
}

/* The call both ways, then the tool_result follow-up. */
static void test_tool_round_trip(void)
{
    char body[2048];
    snprintf(body, sizeof body,
             "{\"model\":\"agent\",\"max_tokens\":64,\"tools\":%s,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]}",
             TOOLS);
    long st;
    json_t *j = post("/v1/messages", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(e2e_jstr(j, "stop_reason"), "tool_use");
    json_t *blocks = e2e_jget(j, "content");
    json_t *use = json_array_get(blocks, json_array_size(blocks) - 1);
    CHECK_EQ_STR(e2e_jstr(use, "type"), "tool_use");
    CHECK_EQ_STR(e2e_jstr(use, "name"), "get_weather");
    CHECK_EQ_STR(e2e_jstr(use, "input.city"), "Paris");
    CHECK(!strncmp(e2e_jstr(use, "id"), "toolu_", 6));
    char id[64];
    snprintf(id, sizeof id, "%s", e2e_jstr(use, "id"));
    json_decref(j);

    /* streamed: one tool_use block whose input_json_delta is the input */
    snprintf(body, sizeof body,
             "{\"model\":\"agent\",\"max_tokens\":64,\"stream\":true,\"tools\":%s,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"}]}",
             TOOLS);
    json_t *ev = stream(body, &st);
    CHECK_EQ_INT(st, 200);
    char json_text[256] = "";
    int uses = 0;
    const char *reason = "(none)";
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        json_t *d = e2e_jget(e, "data");
        if (!strcmp(e2e_jstr(d, "type"), "content_block_start") &&
            !strcmp(e2e_jstr(d, "content_block.type"), "tool_use")) {
            uses++;
            CHECK_EQ_STR(e2e_jstr(d, "content_block.name"), "get_weather");
            CHECK(json_is_object(e2e_jget(d, "content_block.input")));
        }
        if (!strcmp(e2e_jstr(d, "delta.type"), "input_json_delta"))
            strncat(json_text, e2e_jstr(d, "delta.partial_json"), 200);
        if (!strcmp(e2e_jstr(d, "type"), "message_delta"))
            reason = e2e_jstr(d, "delta.stop_reason");
    }
    CHECK_EQ_INT(uses, 1);
    CHECK_EQ_STR(reason, "tool_use");
    json_t *input = json_loads(json_text, 0, NULL);
    CHECK_EQ_STR(e2e_jstr(input, "city"), "Paris");
    json_decref(input);
    json_decref(ev);

    /* the result goes back as a tool_result block */
    snprintf(body, sizeof body,
             "{\"model\":\"agent\",\"max_tokens\":64,\"tools\":%s,\"messages\":["
             "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"%s\","
             "\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
             "\"tool_use_id\":\"%s\",\"content\":\"18 degrees\"}]}]}",
             TOOLS, id, id);
    j = post("/v1/messages", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(e2e_jstr(j, "content.0.text"), SURFACE_FINAL);
    CHECK_EQ_STR(e2e_jstr(j, "stop_reason"), "end_turn");
    json_decref(j);
}

static void test_limits(void)
{
    long st;
    /* the stop sequence ends the text before it */
    json_t *j = post("/v1/messages",
                     "{\"model\":\"agent\",\"max_tokens\":64,\"stop_sequences\":[\"answer\"],"
                     "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":32},"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                     &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(e2e_jstr(j, "content.1.text"), "final ");
    CHECK_EQ_STR(e2e_jstr(j, "stop_reason"), "stop_sequence");
    CHECK_EQ_STR(e2e_jstr(j, "stop_sequence"), "answer");
    json_decref(j);
    /* the same streamed: message_delta says which */
    json_t *ev = stream("{\"model\":\"agent\",\"max_tokens\":64,\"stream\":true,"
                        "\"stop_sequences\":[\"zzz\",\"answer\"],"
                        "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                        &st);
    CHECK_EQ_INT(st, 200);
    json_t *delta = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) if (!strcmp(e2e_jstr(e, "event"), "message_delta")) delta =
        e2e_jget(e, "data.delta");
    CHECK_EQ_STR(e2e_jstr(delta, "stop_reason"), "stop_sequence");
    CHECK_EQ_STR(e2e_jstr(delta, "stop_sequence"), "answer");
    json_decref(ev);
    /* max_tokens cuts the answer */
    j = post("/v1/messages",
             "{\"model\":\"agent\",\"max_tokens\":3,"
             "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
             &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(e2e_jstr(j, "stop_reason"), "max_tokens");
    CHECK_EQ_INT(json_integer_value(e2e_jget(j, "usage.output_tokens")), 3);
    json_decref(j);
}

static json_int_t count(const char *body)
{
    long st;
    json_t *j = post("/v1/messages/count_tokens", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_object_size(j), 1);
    json_int_t n = json_integer_value(e2e_jget(j, "input_tokens"));
    json_decref(j);
    return n;
}

static void test_count_tokens(void)
{
    json_int_t plain = count("{\"model\":\"agent\",\"messages\":[{\"role\":\"user\","
                             "\"content\":\"hello\"}]}");
    json_int_t sys = count("{\"model\":\"agent\",\"system\":\"You answer in French.\","
                           "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]}");
    json_int_t tools = count(
        "{\"model\":\"agent\",\"messages\":[{\"role\":\"user\",\"content\":\"hello\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\","
        "\"name\":\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":"
        "\"t1\",\"content\":\"18 degrees\"}]}]}");
    printf("  count_tokens: plain %lld, with system %lld, with a tool turn %lld\n",
           (long long)plain, (long long)sys, (long long)tools);
    CHECK(plain > 0);
    CHECK(sys > plain);
    CHECK(tools > plain);
}

/* Anthropic's error shape, its type and a needle in the message. */
static void check_error(const char *path, const char *body, long want_status,
                        const char *want_type, const char *needle)
{
    long st;
    json_t *j = post(path, body, &st);
    CHECK_MSG(st == want_status, "%s: status %ld, want %ld", body, st, want_status);
    CHECK_EQ_STR(e2e_jstr(j, "type"), "error");
    CHECK_EQ_STR(e2e_jstr(j, "error.type"), want_type);
    const char *msg = e2e_jstr(j, "error.message");
    CHECK_MSG(strstr(msg, needle) != NULL, "'%s' lacks '%s'", msg, needle);
    json_decref(j);
}

static void test_bad_input(void)
{
    const char *inv = "invalid_request_error";
    check_error("/v1/messages", "{", 400, inv, "line 1");
    check_error("/v1/messages", "[1]", 400, inv, "JSON object");
    check_error("/v1/messages", "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\","
                "\"content\":\"x\"}]}", 400, inv, "model is required");
    check_error("/v1/messages", "{\"model\":\"agent\",\"messages\":[{\"role\":\"user\","
                "\"content\":\"x\"}]}", 400, inv, "max_tokens is required");
    check_error("/v1/messages", "{\"model\":\"agent\",\"max_tokens\":5}", 400, inv,
                "messages is required");
    check_error("/v1/messages", "{\"model\":\"agent\",\"max_tokens\":5,\"messages\":["
                "{\"role\":\"user\",\"content\":[{\"type\":\"document\",\"source\":{}}]}]}",
                400, inv, "unknown content block type 'document'");
    check_error("/v1/messages", "{\"model\":\"agent\",\"max_tokens\":5,\"messages\":["
                "{\"role\":\"robot\",\"content\":\"x\"}]}", 400, inv, "messages[0].role");
    check_error("/v1/messages", "{\"model\":\"agent\",\"max_tokens\":5,\"messages\":["
                "{\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":{\"type\":"
                "\"url\",\"url\":\"http://x\"}}]}]}", 400, inv, "Only base64");
    check_error("/v1/messages", "{\"model\":\"agent\",\"max_tokens\":5,\"tools\":[{\"type\":"
                "\"web_search_20250305\",\"name\":\"web_search\"}],\"messages\":["
                "{\"role\":\"user\",\"content\":\"x\"}]}", 400, inv, "web_search_20250305");
    check_error("/v1/messages", "{\"model\":\"agent\",\"max_tokens\":5,\"tool_choice\":"
                "{\"type\":\"tool\",\"name\":\"nope\"},\"tools\":[{\"name\":\"a\","
                "\"input_schema\":{}}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                400, inv, "'nope'");
    check_error("/v1/messages", "{\"model\":\"nosuch\",\"max_tokens\":5,\"messages\":["
                "{\"role\":\"user\",\"content\":\"x\"}]}", 404, "not_found_error", "nosuch");
    check_error("/v1/messages/count_tokens", "{\"model\":\"agent\"}", 400, inv,
                "messages is required");
    /* the server is still fine */
    e2e_resp_t r = e2e_http(&T, "GET", "/", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

static json_int_t usage_of(json_t *usage, const char *key)
{
    json_t *v = e2e_jget(usage, key);
    CHECK_MSG(json_is_integer(v), "usage.%s is absent", key);
    return json_integer_value(v);
}

/* The same request twice: the second finds its prompt in the slot but for
 * the last token (evaluated again for its logits), as Ollama's
 * prompt_eval_cached_count says; Anthropic's usage splits the prompt into
 * input_tokens (evaluated) and cache_read_input_tokens (cached), both
 * ways. */
static void test_cached_tokens(void)
{
    static const char body[] =
        "{\"model\":\"agent\",\"max_tokens\":32%s,\"messages\":[{\"role\":"
        "\"user\",\"content\":\"how warm is it in Paris today?\"}]}";
    char text[512];
    snprintf(text, sizeof text, body, "");
    long st;
    json_t *first = post("/v1/messages", text, &st);
    CHECK_EQ_INT(st, 200);
    json_t *u1 = e2e_jget(first, "usage");
    /* a prefix of an earlier test's prompt may be cached already */
    json_int_t whole = usage_of(u1, "input_tokens") + usage_of(u1, "cache_read_input_tokens");
    CHECK(whole > 2);
    json_t *second = post("/v1/messages", text, &st);
    CHECK_EQ_INT(st, 200);
    json_t *u2 = e2e_jget(second, "usage");
    CHECK_EQ_INT(usage_of(u2, "cache_read_input_tokens"), whole - 1);
    CHECK_EQ_INT(usage_of(u2, "input_tokens"), 1);
    CHECK_EQ_INT(usage_of(u2, "cache_creation_input_tokens"), 0);
    CHECK(usage_of(u2, "output_tokens") > 0);
    json_decref(first);
    json_decref(second);

    snprintf(text, sizeof text, body, ",\"stream\":true");
    json_t *ev = stream(text, &st);
    CHECK_EQ_INT(st, 200);
    json_t *start = NULL, *delta = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        if (!strcmp(e2e_jstr(e, "event"), "message_start"))
            start = e2e_jget(e, "data.message.usage");
        if (!strcmp(e2e_jstr(e, "event"), "message_delta"))
            delta = e2e_jget(e, "data.usage");
    }
    /* message_start comes before any count: zeros, the same keys */
    CHECK_EQ_INT(usage_of(start, "cache_read_input_tokens"), 0);
    CHECK_EQ_INT(usage_of(start, "cache_creation_input_tokens"), 0);
    CHECK_EQ_INT(usage_of(delta, "cache_read_input_tokens"), whole - 1);
    CHECK_EQ_INT(usage_of(delta, "input_tokens"), 1);
    CHECK_EQ_INT(usage_of(delta, "cache_creation_input_tokens"), 0);
    json_decref(ev);
}

int main(void)
{
    char script[256];
    snprintf(script, sizeof script, "/tmp/corral-e2e-anthropic-%d.txt", (int)getpid());
    /* one answer per model request, in the order below */
    const char *const answers[] = {
        SURFACE_THOUGHT, SURFACE_THOUGHT, SURFACE_CALL, SURFACE_CALL,
        SURFACE_FINAL,   SURFACE_THOUGHT, SURFACE_THOUGHT, SURFACE_FINAL,
        SURFACE_FINAL,   SURFACE_FINAL,   SURFACE_FINAL,
    };
    if (surface_start(&T, script, answers, CR_ARRAY_LEN(answers))) {
        test_thinking();
        test_tool_round_trip();
        test_limits();
        test_count_tokens();
        test_bad_input();
        test_cached_tokens();
    } else {
        CHECK(!"serve and the agent model");
    }
    e2e_stop(&T);
    unlink(script);
    return check_finish("e2e_anthropic");
}
