/* test_e2e_openai.c: the /v1 routes and /metrics against the real services.
 *
 * Starts `corral serve` on a private port, creates a synthetic model through
 * the CLI, and checks what an OpenAI client sees: chat completions (one
 * object, and an SSE stream with the role chunk, deltas that add up to the
 * same text, the finish chunk, usage and [DONE]), seeded completions that
 * repeat, embeddings whose base64 form decodes to the float form, the model
 * list and retrieve, OpenAI-shaped errors from the real scheduler, and the
 * metrics counters moving with the traffic. */
#include "lib/prelude.h"

#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

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

static void create_model(void)
{
    bool created = e2e_synth_create(&T, "synth",
                              "TEMPLATE \"\"\"{{- range .Messages }}[{{ .Role }}] "
                              "{{ .Content }}\n{{ end }}[assistant] \"\"\"\n"
                              "PARAMETER num_predict 8\n"
                              "PARAMETER stop \"<never>\"\n",
                              "--seed", "7", "--type", "q8_0", NULL);
    CHECK(created);
}

static const char CHAT[] =
    "{\"model\":\"synth\",\"seed\":3,\"temperature\":0,\"max_tokens\":6,"
    "\"messages\":[{\"role\":\"user\",\"content\":\"hello\"}]";

static void test_chat(void)
{
    char body[512];
    snprintf(body, sizeof body, "%s}", CHAT);
    long st;
    json_t *j = post("/v1/chat/completions", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(!strncmp(e2e_jstr(j, "id"), "chatcmpl-", 9));
    CHECK_EQ_STR(e2e_jstr(j, "object"), "chat.completion");
    CHECK_EQ_STR(e2e_jstr(j, "model"), "synth");
    CHECK_EQ_STR(e2e_jstr(j, "choices.0.message.role"), "assistant");
    const char *text = e2e_jstr(j, "choices.0.message.content");
    CHECK(strcmp(text, "(absent)") != 0);
    char whole[4096];
    snprintf(whole, sizeof whole, "%s", text);
    /* the synthetic model may end on its end-of-generation token */
    char reason[32];
    snprintf(reason, sizeof reason, "%s", e2e_jstr(j, "choices.0.finish_reason"));
    CHECK(!strcmp(reason, "length") || !strcmp(reason, "stop"));
    json_int_t n_out = json_integer_value(e2e_jget(j, "usage.completion_tokens"));
    CHECK(n_out > 0 && n_out <= 6);
    CHECK(strcmp(reason, "length") != 0 || n_out == 6);
    CHECK(json_integer_value(e2e_jget(j, "usage.prompt_tokens")) > 0);
    json_decref(j);

    /* the same request streamed: deltas add up to the same text */
    snprintf(body, sizeof body,
             "%s,\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
             CHAT);
    e2e_resp_t r = e2e_http(&T, "POST", "/v1/chat/completions", body, NULL,
                            NULL);
    CHECK_EQ_INT(r.status, 200);
    char acc[4096] = "";
    int events = 0, finish = 0, usage = 0, role = 0;
    bool done = false;
    for (const char *p = r.body; p && *p;) {
        CHECK_MSG(!strncmp(p, "data: ", 6), "not an event: %s", p);
        const char *end = strstr(p, "\n\n");
        if (strncmp(p, "data: ", 6) != 0 || !end)
            break;
        events++;
        if (!strncmp(p + 6, "[DONE]", 6)) {
            done = true;
            CHECK(end[2] == '\0');
            break;
        }
        json_t *e = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
        CHECK_EQ_STR(e2e_jstr(e, "object"), "chat.completion.chunk");
        if (json_array_size(e2e_jget(e, "choices")) == 0) {
            usage++;
            CHECK_EQ_INT(
                json_integer_value(e2e_jget(e, "usage.completion_tokens")), n_out);
        } else {
            if (json_is_string(e2e_jget(e, "choices.0.delta.role")))
                role++;
            const char *c = json_string_value(e2e_jget(e, "choices.0.delta.content"));
            if (c)
                strncat(acc, c, sizeof acc - strlen(acc) - 1);
            if (json_is_string(e2e_jget(e, "choices.0.finish_reason"))) {
                finish++;
                CHECK_EQ_STR(e2e_jstr(e, "choices.0.finish_reason"), reason);
            }
        }
        json_decref(e);
        p = end + 2;
    }
    CHECK(done);
    CHECK_EQ_INT(role, 1);
    CHECK_EQ_INT(finish, 1);
    CHECK_EQ_INT(usage, 1);
    CHECK(events >= 5);
    CHECK_EQ_STR(acc, whole);
    e2e_resp_free(&r);
}

static void test_completions_seeded(void)
{
    const char *body = "{\"model\":\"synth\",\"prompt\":\"once\",\"seed\":11,"
                       "\"max_tokens\":8}";
    long st;
    json_t *a = post("/v1/completions", body, &st);
    CHECK_EQ_INT(st, 200);
    json_t *b = post("/v1/completions", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(e2e_jstr(a, "object"), "text_completion");
    CHECK(!strncmp(e2e_jstr(a, "id"), "cmpl-", 5));
    CHECK_EQ_STR(e2e_jstr(a, "choices.0.text"), e2e_jstr(b, "choices.0.text"));
    json_decref(a);
    json_decref(b);
}

static void test_embeddings(void)
{
    long st;
    json_t *f = post("/v1/embeddings",
                     "{\"model\":\"synth\",\"input\":[\"a b\",\"c\"]}", &st);
    CHECK_EQ_INT(st, 200);
    json_t *b = post("/v1/embeddings",
                     "{\"model\":\"synth\",\"input\":[\"a b\",\"c\"],"
                     "\"encoding_format\":\"base64\"}",
                     &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_array_size(e2e_jget(f, "data")), 2);
    for (int row = 0; row < 2; row++) {
        char path[64];
        snprintf(path, sizeof path, "data.%d.embedding", row);
        json_t *vec = e2e_jget(f, path);
        const char *s = json_string_value(e2e_jget(b, path));
        CHECK(json_array_size(vec) > 0 && s != NULL);
        if (!s)
            continue;
        static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
                                 "qrstuvwxyz0123456789+/";
        size_t n = 0, k = 0;
        uint32_t acc = 0;
        int bits = 0;
        unsigned char raw[4];
        bool same = true;
        for (; *s && *s != '='; s++) {
            acc = acc << 6 | (uint32_t)(strchr(al, *s) - al);
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                raw[n++ % 4] = (unsigned char)(acc >> bits);
                if (n % 4 == 0) {
                    uint32_t u = (uint32_t)raw[0] | (uint32_t)raw[1] << 8 |
                                 (uint32_t)raw[2] << 16 |
                                 (uint32_t)raw[3] << 24;
                    float v;
                    memcpy(&v, &u, 4);
                    if ((float)json_number_value(json_array_get(vec, k)) != v)
                        same = false;
                    k++;
                }
            }
        }
        CHECK_EQ_INT(k, json_array_size(vec));
        CHECK(same);
    }
    json_decref(f);
    json_decref(b);
}

static void test_models_and_errors(void)
{
    e2e_resp_t r = e2e_http(&T, "GET", "/v1/models", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    CHECK_EQ_STR(e2e_jstr(j, "data.0.id"), "synth:latest");
    CHECK_EQ_STR(e2e_jstr(j, "data.0.owned_by"), "library");
    CHECK(json_integer_value(e2e_jget(j, "data.0.created")) > 1700000000);
    json_decref(j);
    e2e_resp_free(&r);
    r = e2e_http(&T, "GET", "/v1/models/synth", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    e2e_resp_free(&r);

    long st;
    j = post("/v1/chat/completions",
             "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\","
             "\"content\":\"x\"}]}",
             &st);
    CHECK_EQ_INT(st, 404);
    CHECK_EQ_STR(e2e_jstr(j, "error.type"), "not_found_error");
    CHECK(strstr(e2e_jstr(j, "error.message"), "not found") != NULL);
    json_decref(j);
}

static double metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p;) {
        if (!strncmp(p, series, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return -1;
}

static bool metrics_caught_up(const char *text)
{
    return metric(text, "corral_http_requests_total{route=\"/v1/chat/"
                        "completions\",code=\"200\"}") >= 2 &&
           metric(text, "corral_completion_tokens_total") >= 12 &&
           metric(text, "corral_time_to_first_token_seconds_count") >= 2 &&
           metric(text, "corral_direct_generations_total") >= 2;
}

static void test_metrics(void)
{
    /* A request is counted when the gateway has finished with it, which
     * may be just after the client got the whole answer: scrape until the
     * two chats above are in (a counter that never moves fails). */
    e2e_resp_t r = {0};
    for (int i = 0; i < 300; i++) { /* up to 30 s */
        e2e_resp_free(&r);
        r = e2e_http(&T, "GET", "/metrics", NULL, NULL, NULL);
        if (r.status != 200 || metrics_caught_up(r.body))
            break;
        usleep(100 * 1000);
    }
    CHECK_EQ_INT(r.status, 200);
    CHECK(metric(r.body, "corral_http_requests_total{route=\"/v1/chat/"
                         "completions\",code=\"200\"}") >= 2);
    CHECK(metric(r.body, "corral_completion_tokens_total") >= 12);
    CHECK(metric(r.body, "corral_time_to_first_token_seconds_count") >= 2);
    /* The chats' chunks came from their runner, not through the scheduler
     * (direct replies: the test's runtime dir is ipc, its runner local). */
    CHECK(metric(r.body, "corral_direct_generations_total") >= 2);
    CHECK(metric(r.body, "corral_scheduler_up") == 1);
    CHECK(metric(r.body, "corral_models_loaded") >= 1);
    CHECK(metric(r.body, "corral_scheduler_queue_depth") >= 0);
    e2e_resp_free(&r);
}

int main(void)
{
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_openai");
    }
    create_model();
    test_chat();
    test_completions_seeded();
    test_embeddings();
    test_models_and_errors();
    test_metrics();
    if (check_failed_g) {
        char cmd[1300];
        snprintf(cmd, sizeof cmd, "tail -n 60 %s/serve.log >&2", T.tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "(no serve log)\n");
    }
    e2e_stop(&T);
    return check_finish("e2e_openai");
}
