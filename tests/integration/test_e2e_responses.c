/* test_e2e_responses.c: the OpenAI Responses API through the services.
 *
 * `corral serve` runs with the runner's scripted sampler (surface_model.h).
 * Checked: /v1/responses with instructions and a string input gives a
 * reasoning item and a message item (one object, and the SSE events
 * response.created .. response.completed with consecutive sequence
 * numbers, deltas that add up to the items, and a final response listing
 * the items the stream announced), function_call items (both ways) and the
 * function_call_output round trip, max_output_tokens (status incomplete),
 * and bad input (previous_response_id, unknown item and tool types)
 * answered in OpenAI's error shape. */
#include "lib/prelude.h"

#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/integration/surface_model.h"
#include "tests/unit/check.h"

static e2e_t T;

static const char TOOLS[] =
    "[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":" SURFACE_WEATHER_SCHEMA "}]";

static json_t *post(const char *body, long *status)
{
    e2e_resp_t r = e2e_http(&T, "POST", "/v1/responses", body, NULL, NULL);
    *status = r.status;
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    if (!j)
        fprintf(stderr, "not JSON: %s\n", r.body);
    e2e_resp_free(&r);
    return j;
}

static json_t *stream(const char *body, long *status)
{
    e2e_resp_t r = e2e_http(&T, "POST", "/v1/responses", body, NULL, NULL);
    *status = r.status;
    json_t *ev = e2e_sse(r.body);
    e2e_resp_free(&r);
    return ev;
}

/* The last event of a type, or NULL. */
static json_t *last_event(json_t *ev, const char *type)
{
    json_t *found = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) if (!strcmp(e2e_jstr(e, "data.type"), type)) found =
        e2e_jget(e, "data");
    return found;
}

static size_t count_events(json_t *ev, const char *type)
{
    size_t n = 0, i;
    json_t *e;
    json_array_foreach(ev, i, e) n += !strcmp(e2e_jstr(e, "data.type"), type);
    return n;
}

static void test_text(void)
{
    static const char body[] =
        "{\"model\":\"agent\",\"instructions\":\"Be brief.\",\"input\":\"hello\","
        "\"reasoning\":{\"effort\":\"medium\"}%s}";
    char text[512];
    snprintf(text, sizeof text, body, "");
    long st;
    json_t *j = post(text, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(!strncmp(e2e_jstr(j, "id"), "resp_", 5));
    CHECK_EQ_STR(e2e_jstr(j, "object"), "response");
    CHECK_EQ_STR(e2e_jstr(j, "status"), "completed");
    CHECK_EQ_STR(e2e_jstr(j, "model"), "agent");
    CHECK_EQ_STR(e2e_jstr(j, "instructions"), "Be brief.");
    CHECK_EQ_INT(json_array_size(e2e_jget(j, "output")), 2);
    CHECK_EQ_STR(e2e_jstr(j, "output.0.type"), "reasoning");
    CHECK_EQ_STR(e2e_jstr(j, "output.0.summary.0.text"), "reasoning here");
    CHECK_EQ_STR(e2e_jstr(j, "output.1.type"), "message");
    CHECK_EQ_STR(e2e_jstr(j, "output.1.role"), "assistant");
    CHECK_EQ_STR(e2e_jstr(j, "output.1.content.0.type"), "output_text");
    CHECK_EQ_STR(e2e_jstr(j, "output.1.content.0.text"), "final answer");
    json_int_t in = json_integer_value(e2e_jget(j, "usage.input_tokens"));
    json_int_t out = json_integer_value(e2e_jget(j, "usage.output_tokens"));
    CHECK(in > 0 && out > 0);
    CHECK_EQ_INT(json_integer_value(e2e_jget(j, "usage.total_tokens")), in + out);
    json_decref(j);

    snprintf(text, sizeof text, body, ",\"stream\":true");
    json_t *ev = stream(text, &st);
    CHECK_EQ_INT(st, 200);
    size_t i;
    json_t *e;
    char reasoning[256] = "", answer[256] = "";
    json_array_foreach(ev, i, e) {
        CHECK_EQ_STR(e2e_jstr(e, "event"), e2e_jstr(e, "data.type"));
        CHECK_EQ_INT(json_integer_value(e2e_jget(e, "data.sequence_number")), (json_int_t)i);
        const char *type = e2e_jstr(e, "data.type");
        if (!strcmp(type, "response.reasoning_summary_text.delta"))
            strncat(reasoning, e2e_jstr(e, "data.delta"), 200);
        if (!strcmp(type, "response.output_text.delta")) {
            strncat(answer, e2e_jstr(e, "data.delta"), 200);
            CHECK_EQ_INT(json_integer_value(e2e_jget(e, "data.output_index")), 1);
        }
    }
    CHECK_EQ_STR(e2e_jstr(json_array_get(ev, 0), "data.type"), "response.created");
    CHECK_EQ_STR(e2e_jstr(json_array_get(ev, 0), "data.response.status"), "in_progress");
    CHECK_EQ_STR(e2e_jstr(json_array_get(ev, 1), "data.type"), "response.in_progress");
    CHECK_EQ_STR(reasoning, "reasoning here");
    CHECK_EQ_STR(answer, "final answer");
    CHECK_EQ_INT(count_events(ev, "response.output_item.added"), 2);
    CHECK_EQ_INT(count_events(ev, "response.output_item.done"), 2);
    CHECK_EQ_INT(count_events(ev, "response.content_part.added"), 1);
    CHECK_EQ_INT(count_events(ev, "response.reasoning_summary_part.added"), 1);
    CHECK_EQ_STR(e2e_jstr(last_event(ev, "response.output_text.done"), "text"),
                 "final answer");
    json_t *done = last_event(ev, "response.completed");
    CHECK(done && i > 0 &&
          !strcmp(e2e_jstr(json_array_get(ev, i - 1), "data.type"), "response.completed"));
    CHECK_EQ_STR(e2e_jstr(done, "response.status"), "completed");
    CHECK_EQ_STR(e2e_jstr(done, "response.output.1.content.0.text"), "final answer");
    CHECK_EQ_STR(e2e_jstr(done, "response.output.0.summary.0.text"), "reasoning here");
    /* the items the stream announced are the ones the response lists */
    json_t *msg_done = last_event(ev, "response.output_item.done");
    CHECK_EQ_STR(e2e_jstr(msg_done, "item.id"), e2e_jstr(done, "response.output.1.id"));
    CHECK(json_integer_value(e2e_jget(done, "response.usage.output_tokens")) == out);
    json_decref(ev);
}

static void test_function_calls(void)
{
    char body[2048];
    snprintf(body, sizeof body,
             "{\"model\":\"agent\",\"tools\":%s,\"input\":[{\"role\":\"user\","
             "\"content\":[{\"type\":\"input_text\",\"text\":\"Weather in Paris?\"}]}]}",
             TOOLS);
    long st;
    json_t *j = post(body, &st);
    CHECK_EQ_INT(st, 200);
    json_t *out = e2e_jget(j, "output");
    json_t *fc = json_array_get(out, json_array_size(out) - 1);
    CHECK_EQ_STR(e2e_jstr(fc, "type"), "function_call");
    CHECK_EQ_STR(e2e_jstr(fc, "name"), "get_weather");
    CHECK_EQ_STR(e2e_jstr(fc, "status"), "completed");
    CHECK(!strncmp(e2e_jstr(fc, "id"), "fc_", 3));
    json_t *args = json_loads(e2e_jstr(fc, "arguments"), 0, NULL);
    CHECK_EQ_STR(e2e_jstr(args, "city"), "Paris");
    json_decref(args);
    char call_id[64];
    snprintf(call_id, sizeof call_id, "%s", e2e_jstr(fc, "call_id"));
    CHECK(strcmp(call_id, "(absent)") != 0 && *call_id);
    json_decref(j);

    snprintf(body, sizeof body,
             "{\"model\":\"agent\",\"stream\":true,\"tools\":%s,\"input\":\"Weather?\"}",
             TOOLS);
    json_t *ev = stream(body, &st);
    CHECK_EQ_INT(st, 200);
    json_t *argdone = last_event(ev, "response.function_call_arguments.done");
    args = json_loads(e2e_jstr(argdone, "arguments"), 0, NULL);
    CHECK_EQ_STR(e2e_jstr(args, "city"), "Paris");
    json_decref(args);
    json_t *added = last_event(ev, "response.output_item.added");
    CHECK_EQ_STR(e2e_jstr(added, "item.type"), "function_call");
    CHECK_EQ_STR(e2e_jstr(added, "item.id"), e2e_jstr(argdone, "item_id"));
    json_t *done = last_event(ev, "response.completed");
    CHECK_EQ_STR(e2e_jstr(done, "response.output.0.type"), "function_call");
    json_decref(ev);

    /* the output goes back as a function_call_output item */
    snprintf(body, sizeof body,
             "{\"model\":\"agent\",\"tools\":%s,\"input\":["
             "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
             "{\"type\":\"function_call\",\"call_id\":\"%s\",\"name\":\"get_weather\","
             "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"},"
             "{\"type\":\"function_call_output\",\"call_id\":\"%s\",\"output\":\"18 degrees\"}]}",
             TOOLS, call_id, call_id);
    j = post(body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(e2e_jstr(j, "output.0.content.0.text"), SURFACE_FINAL);
    json_decref(j);
}

static void test_incomplete(void)
{
    long st;
    json_t *j = post("{\"model\":\"agent\",\"input\":\"hi\",\"max_output_tokens\":2}", &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(e2e_jstr(j, "status"), "incomplete");
    CHECK_EQ_STR(e2e_jstr(j, "incomplete_details.reason"), "max_output_tokens");
    CHECK_EQ_INT(json_integer_value(e2e_jget(j, "usage.output_tokens")), 2);
    CHECK_EQ_INT(json_integer_value(e2e_jget(j, "max_output_tokens")), 2);
    json_decref(j);
}

static void check_error(const char *body, long want_status, const char *needle)
{
    long st;
    json_t *j = post(body, &st);
    CHECK_MSG(st == want_status, "%s: status %ld, want %ld", body, st, want_status);
    CHECK_EQ_STR(e2e_jstr(j, "error.type"),
                 want_status == 404 ? "not_found_error" : "invalid_request_error");
    const char *msg = e2e_jstr(j, "error.message");
    CHECK_MSG(strstr(msg, needle) != NULL, "'%s' lacks '%s'", msg, needle);
    json_decref(j);
}

static void test_bad_input(void)
{
    check_error("{", 400, "line 1");
    check_error("{\"input\":\"x\"}", 400, "model is required");
    check_error("{\"model\":\"agent\"}", 400, "input");
    check_error("{\"model\":\"agent\",\"input\":\"x\",\"previous_response_id\":\"resp_1\"}",
                400, "previous_response_id is not supported");
    check_error("{\"model\":\"agent\",\"input\":[{\"type\":\"computer_call\"}]}", 400,
                "unknown input item type 'computer_call'");
    check_error("{\"model\":\"agent\",\"input\":[{\"role\":\"user\",\"content\":"
                "[{\"type\":\"input_audio\"}]}]}",
                400, "unknown content type 'input_audio'");
    check_error("{\"model\":\"agent\",\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}",
                400, "'web_search'");
    check_error("{\"model\":\"agent\",\"input\":\"x\",\"text\":{\"format\":{\"type\":"
                "\"yaml\"}}}", 400, "'yaml'");
    check_error("{\"model\":\"nosuch\",\"input\":\"x\"}", 404, "nosuch");
    e2e_resp_t r = e2e_http(&T, "GET", "/", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

int main(void)
{
    char script[256];
    snprintf(script, sizeof script, "/tmp/corral-e2e-responses-%d.txt", (int)getpid());
    const char *const answers[] = {
        SURFACE_THOUGHT, SURFACE_THOUGHT, SURFACE_CALL,
        SURFACE_CALL,    SURFACE_FINAL,   SURFACE_FINAL,
    };
    if (surface_start(&T, script, answers, CR_ARRAY_LEN(answers))) {
        test_text();
        test_function_calls();
        test_incomplete();
        test_bad_input();
    } else {
        CHECK(!"serve and the agent model");
    }
    e2e_stop(&T);
    unlink(script);
    return check_finish("e2e_responses");
}
