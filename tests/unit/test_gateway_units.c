/* test_gateway_units.c: the gateway's pure parts, without sockets.
 *
 * JSON -> msg (every validation rule and its exact message), msg -> JSON
 * (shapes, key order, omitted metrics, Go-style floats/strings/times), the
 * status table, CORS origins, the Host check and OLLAMA_HOST parsing. */
#include "lib/prelude.h"
#include "services/gateway/access.h"
#include "services/gateway/convert.h"
#include "services/gateway/http.h"
#include "services/gateway/render.h"
#include "services/gateway/server.h"
#include "tests/unit/check.h"

/* ---- helpers ---- */

static cr_status_t parse(gw_api_t api, const char *body, gw_request_t *q,
                         cr_err_t *err)
{
    return gw_request_parse(api, body, body ? strlen(body) : 0, q, err);
}

/* Expects body to fail for api with exactly `want` (status CR_E_INVALID). */
#define EXPECT_ERR(api, body, want)                                          \
    do {                                                                    \
        gw_request_t q_;                                                    \
        cr_err_t e_ = {0};                                                  \
        cr_status_t st_ = parse((api), (body), &q_, &e_);                   \
        CHECK_EQ_INT(st_, CR_E_INVALID);                                    \
        CHECK_EQ_STR(e_.msg, (want));                                        \
        CHECK(q_.msg.type == MSG_NONE && q_.msg.arena == NULL);             \
    } while (0)

/* Expects body to parse for api. */
#define EXPECT_OK(api, body, q)                                             \
    do {                                                                    \
        cr_err_t e_ = {0};                                                  \
        cr_status_t st_ = parse((api), (body), (q), &e_);                   \
        CHECK_MSG(st_ == CR_OK, "%s -> %s", (body), e_.msg);                \
    } while (0)

static char *f32_text(float v)
{
    static char out[64];
    cr_buf_t b;
    cr_buf_init(&b, 64);
    gw_jw_t w;
    gw_jw_init(&w, &b);
    gw_jw_f32(&w, v);
    snprintf(out, sizeof out, "%s", b.data ? b.data : "");
    cr_buf_free(&b);
    return out;
}

static char *f64_text(double v)
{
    static char out[64];
    cr_buf_t b;
    cr_buf_init(&b, 64);
    gw_jw_t w;
    gw_jw_init(&w, &b);
    gw_jw_f64(&w, v);
    snprintf(out, sizeof out, "%s", b.data ? b.data : "");
    cr_buf_free(&b);
    return out;
}

static char *str_text(const char *s, size_t n)
{
    static char out[256];
    cr_buf_t b;
    cr_buf_init(&b, 256);
    gw_jw_t w;
    gw_jw_init(&w, &b);
    gw_jw_strn(&w, s, n);
    snprintf(out, sizeof out, "%s", b.data ? b.data : "");
    cr_buf_free(&b);
    return out;
}

/* Removes the "created_at":"..." member so outputs compare exactly. */
static void strip_created(char *s)
{
    char *p = strstr(s, "\"created_at\":\"");
    if (!p)
        return;
    char *end = strchr(p + 14, '"');
    if (!end)
        return;
    end += 2; /* the closing quote and the comma */
    memmove(p, end, strlen(end) + 1);
}

/* ---- request parsing ---- */

static void test_body_errors(void)
{
    EXPECT_ERR(GW_API_GENERATE, "", "missing request body");
    EXPECT_ERR(GW_API_GENERATE, "  \n\t", "missing request body");
    EXPECT_ERR(GW_API_CHAT, NULL, "missing request body");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":",
               "unexpected token near end of file (line 1, column 9)");
    EXPECT_ERR(GW_API_GENERATE, "{bad",
               "string or '}' expected near 'bad' (line 1, column 4)");
    EXPECT_ERR(GW_API_GENERATE, "[1,2]",
               "json: cannot unmarshal array into Go value of type "
               "api.GenerateRequest");
    EXPECT_ERR(GW_API_CHAT, "\"x\"",
               "json: cannot unmarshal string into Go value of type "
               "api.ChatRequest");
    /* null decodes to the zero request: then the model is missing. */
    EXPECT_ERR(GW_API_GENERATE, "null", "model is required");
    /* Invalid UTF-8 and NUL escapes are refused by the decoder. */
    gw_request_t q;
    cr_err_t e;
    CHECK_EQ_INT(parse(GW_API_GENERATE, "{\"model\":\"\xff\"}", &q, &e),
                 CR_E_INVALID);
    CHECK_EQ_INT(parse(GW_API_GENERATE, "{\"model\":\"a\\u0000b\"}", &q, &e),
                 CR_E_INVALID);
    /* Deep nesting is bounded by the decoder, not the stack. */
    char deep[5000];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = '\0';
    CHECK_EQ_INT(parse(GW_API_GENERATE, deep, &q, &e), CR_E_INVALID);
    /* Trailing garbage after the object. */
    CHECK_EQ_INT(parse(GW_API_GENERATE, "{\"model\":\"m\"} x", &q, &e),
                 CR_E_INVALID);
}

static void test_generate_fields(void)
{
    gw_request_t q;
    EXPECT_OK(GW_API_GENERATE,
              "{\"model\":\"llama3\",\"prompt\":\"hi\",\"suffix\":\"s\","
              "\"system\":\"sys\",\"template\":\"t\",\"context\":[1,2,3],"
              "\"stream\":false,\"format\":\"json\",\"keep_alive\":\"10m\","
              "\"images\":[\"aGVsbG8=\"],\"options\":{\"temperature\":0.5,"
              "\"num_ctx\":2048,\"top_k\":40.9,\"stop\":[\"a\",\"b\"],"
              "\"use_mmap\":false,\"seed\":-1,\"mirostat\":2,\"numa\":true},"
              "\"think\":\"high\",\"truncate\":false,\"shift\":true,"
              "\"logprobs\":true,\"top_logprobs\":5}",
              &q);
    const msg_generate_body_t *g = &q.msg.u.generate;
    CHECK_EQ_INT(q.msg.type, MSG_generate);
    CHECK_EQ_STR(q.model, "llama3");
    CHECK(!q.stream);
    CHECK_EQ_STR(g->model, "llama3");
    CHECK_EQ_STR(g->prompt, "hi");
    CHECK_EQ_STR(g->suffix, "s");
    CHECK_EQ_STR(g->system, "sys");
    CHECK_EQ_STR(g->template, "t");
    CHECK(g->has_context && g->context.n == 3 && g->context.v[2] == 3);
    CHECK_EQ_STR(g->format, "json");
    CHECK(g->has_keep_alive_ms && g->keep_alive_ms == 600000);
    CHECK(g->has_images && g->images.n == 1);
    CHECK_EQ_STR(g->images.v[0], "aGVsbG8=");
    CHECK(g->has_options);
    CHECK(g->options->has_temperature && g->options->temperature == 0.5);
    CHECK(g->options->has_num_ctx && g->options->num_ctx == 2048);
    CHECK(g->options->has_top_k && g->options->top_k == 40); /* truncated */
    CHECK(g->options->has_stop && g->options->stop.n == 2);
    CHECK_EQ_STR(g->options->stop.v[1], "b");
    CHECK(g->options->has_use_mmap && !g->options->use_mmap);
    CHECK(g->options->has_seed && g->options->seed == -1);
    CHECK(!g->options->has_top_p); /* unknown/removed keys are ignored */
    CHECK_EQ_STR(g->think, "high");
    CHECK(g->has_truncate && !g->truncate);
    CHECK(g->has_shift && g->shift);
    CHECK(g->has_logprobs && g->logprobs);
    CHECK(g->has_top_logprobs && g->top_logprobs == 5);
    gw_request_clear(&q);

    /* Defaults: stream on, nothing optional set. */
    EXPECT_OK(GW_API_GENERATE, "{\"model\":\"m\"}", &q);
    CHECK(q.stream);
    CHECK(!q.msg.u.generate.has_prompt && !q.msg.u.generate.has_options);
    CHECK(!q.msg.u.generate.has_keep_alive_ms && !q.msg.u.generate.has_think);
    CHECK(!q.msg.u.generate.has_format);
    gw_request_clear(&q);

    /* keep_alive as seconds, negative = forever, think bool. */
    EXPECT_OK(GW_API_GENERATE,
              "{\"model\":\"m\",\"keep_alive\":30,\"think\":false,"
              "\"format\":{\"type\":\"object\",\"properties\":{}}}",
              &q);
    CHECK(q.msg.u.generate.keep_alive_ms == 30000);
    CHECK_EQ_STR(q.msg.u.generate.think, "false");
    CHECK_EQ_STR(q.msg.u.generate.format,
                 "{\"type\":\"object\",\"properties\":{}}");
    gw_request_clear(&q);
    /* A schema nested 100 deep is kept; 200 deep is refused. */
    char deep[2048];
    int n = snprintf(deep, sizeof deep, "{\"model\":\"m\",\"format\":");
    for (int i = 0; i < 100; i++)
        n += snprintf(deep + n, sizeof deep - (size_t)n, "{\"a\":");
    n += snprintf(deep + n, sizeof deep - (size_t)n, "1.5");
    for (int i = 0; i < 101; i++)
        deep[n++] = '}';
    deep[n] = '\0';
    EXPECT_OK(GW_API_GENERATE, deep, &q);
    CHECK(strstr(q.msg.u.generate.format, "{\"a\":1.5}}") != NULL);
    gw_request_clear(&q);
    n = snprintf(deep, sizeof deep, "{\"model\":\"m\",\"format\":");
    for (int i = 0; i < 200; i++)
        n += snprintf(deep + n, sizeof deep - (size_t)n, "{\"a\":");
    n += snprintf(deep + n, sizeof deep - (size_t)n, "1");
    for (int i = 0; i < 201; i++)
        deep[n++] = '}';
    deep[n] = '\0';
    EXPECT_ERR(GW_API_GENERATE, deep, "JSON value nested deeper than 128 levels");
    EXPECT_OK(GW_API_GENERATE, "{\"model\":\"m\",\"keep_alive\":-1}", &q);
    CHECK(q.msg.u.generate.keep_alive_ms == -1);
    gw_request_clear(&q);
    EXPECT_OK(GW_API_GENERATE, "{\"model\":\"m\",\"keep_alive\":\"0\"}", &q);
    CHECK(q.msg.u.generate.has_keep_alive_ms &&
          q.msg.u.generate.keep_alive_ms == 0);
    gw_request_clear(&q);
    /* format null or "" is unset; null fields count as absent. */
    EXPECT_OK(GW_API_GENERATE,
              "{\"model\":\"m\",\"format\":\"\",\"options\":null,"
              "\"prompt\":null,\"keep_alive\":null}",
              &q);
    CHECK(!q.msg.u.generate.has_format && !q.msg.u.generate.has_options);
    CHECK(!q.msg.u.generate.has_prompt);
    gw_request_clear(&q);
    /* raw alone is fine. */
    EXPECT_OK(GW_API_GENERATE,
              "{\"model\":\"m\",\"raw\":true,\"prompt\":\"x\",\"system\":\"\"}",
              &q);
    gw_request_clear(&q);
}

static void test_generate_errors(void)
{
    EXPECT_ERR(GW_API_GENERATE, "{}", "model is required");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"\"}", "model is required");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":5}",
               "json: cannot unmarshal number into Go struct field "
               "GenerateRequest.model of type string");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"prompt\":[1]}",
               "json: cannot unmarshal array into Go struct field "
               "GenerateRequest.prompt of type string");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"stream\":\"no\"}",
               "json: cannot unmarshal string into Go struct field "
               "GenerateRequest.stream of type bool");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"top_logprobs\":1.5}",
               "json: cannot unmarshal number 1.5 into Go struct field "
               "GenerateRequest.top_logprobs of type int");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"top_logprobs\":21}",
               "top_logprobs must be between 0 and 20");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"top_logprobs\":-1}",
               "top_logprobs must be between 0 and 20");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"raw\":true,\"system\":\"s\"}",
               "raw mode does not support template, system, or context");
    EXPECT_ERR(GW_API_GENERATE,
               "{\"model\":\"m\",\"raw\":true,\"template\":\"t\"}",
               "raw mode does not support template, system, or context");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"raw\":true,\"context\":[1]}",
               "raw mode does not support template, system, or context");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"context\":[1,\"a\"]}",
               "json: cannot unmarshal string into Go struct field "
               "GenerateRequest.context of type int");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"context\":{}}",
               "json: cannot unmarshal object into Go struct field "
               "GenerateRequest.context of type []int");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"context\":[99999999999]}",
               "context token 99999999999 is out of range");
    /* options */
    EXPECT_ERR(GW_API_GENERATE,
               "{\"model\":\"m\",\"options\":{\"temperature\":\"hot\"}}",
               "option \"temperature\" must be of type float32");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"options\":{\"num_ctx\":\"1\"}}",
               "option \"num_ctx\" must be of type integer");
    EXPECT_ERR(GW_API_GENERATE,
               "{\"model\":\"m\",\"options\":{\"use_mmap\":1}}",
               "option \"use_mmap\" must be of type boolean");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"options\":{\"stop\":\"x\"}}",
               "option \"stop\" must be of type array");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"options\":{\"stop\":[1]}}",
               "option \"stop\" must be of an array of strings");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"options\":[1]}",
               "json: cannot unmarshal array into Go struct field "
               "GenerateRequest.options of type map[string]interface {}");
    /* keep_alive */
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"keep_alive\":\"5 min\"}",
               "time: invalid duration \"5 min\"");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"keep_alive\":true}",
               "Unsupported type: 'bool'");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"keep_alive\":[]}",
               "Unsupported type: '[]interface {}'");
    /* think */
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"think\":\"huge\"}",
               "invalid think value: \"huge\" (must be \"high\", \"medium\", "
               "\"low\", \"max\", true, or false)");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"think\":1}",
               "think must be a boolean or string (\"high\", \"medium\", "
               "\"low\", \"max\", true, or false)");
    /* format */
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"format\":\"xml\"}",
               "invalid format: \"\\\"xml\\\"\"; expected \"json\" or a valid "
               "JSON Schema object");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"format\":5}",
               "invalid format: \"5\"; expected \"json\" or a valid JSON "
               "Schema object");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"format\":[\"json\"]}",
               "invalid format: \"[\\\"json\\\"]\"; expected \"json\" or a "
               "valid JSON Schema object");
    /* images */
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"images\":[\"@@@@\"]}",
               "illegal base64 data at input byte 0");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"images\":[\"aGVsbG8\"]}",
               "illegal base64 data at input byte 4");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"images\":[\"aG==bG8=\"]}",
               "illegal base64 data at input byte 4");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"images\":[7]}",
               "json: cannot unmarshal number into Go struct field "
               "GenerateRequest.images of type api.ImageData");
    EXPECT_ERR(GW_API_GENERATE, "{\"model\":\"m\",\"images\":\"aGk=\"}",
               "json: cannot unmarshal string into Go struct field "
               "GenerateRequest.images of type []api.ImageData");
}

static void test_chat(void)
{
    gw_request_t q;
    EXPECT_OK(GW_API_CHAT,
              "{\"model\":\"m\",\"messages\":[{\"role\":\"System\","
              "\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"hi\","
              "\"images\":[\"\"]},{\"role\":\"assistant\",\"content\":\"\","
              "\"thinking\":\"hm\",\"tool_calls\":[{\"function\":{\"name\":"
              "\"f\",\"arguments\":{\"b\":1,\"a\":2}}}]},{\"role\":\"tool\","
              "\"content\":\"42\",\"tool_name\":\"f\",\"tool_call_id\":\"c1\"}],"
              "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
              "\"stream\":true,\"keep_alive\":\"1h\"}",
              &q);
    const msg_chat_body_t *c = &q.msg.u.chat;
    CHECK_EQ_INT(q.msg.type, MSG_chat);
    CHECK(q.stream);
    CHECK(c->has_messages && c->messages.n == 4);
    CHECK_EQ_STR(c->messages.v[0].role, "system"); /* lower-cased */
    CHECK_EQ_STR(c->messages.v[0].content, "be brief");
    CHECK(c->messages.v[1].has_images && c->messages.v[1].images.n == 1);
    CHECK_EQ_STR(c->messages.v[2].thinking, "hm");
    /* key order of the arguments is kept */
    CHECK_EQ_STR(c->messages.v[2].tool_calls,
                 "[{\"function\":{\"name\":\"f\",\"arguments\":{\"b\":1,"
                 "\"a\":2}}}]");
    CHECK_EQ_STR(c->messages.v[3].tool_name, "f");
    CHECK_EQ_STR(c->messages.v[3].tool_call_id, "c1");
    CHECK_EQ_STR(c->tools,
                 "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
    CHECK(c->keep_alive_ms == 3600000);
    gw_request_clear(&q);

    /* No messages: a load request. */
    EXPECT_OK(GW_API_CHAT, "{\"model\":\"m\",\"keep_alive\":0}", &q);
    CHECK(!q.msg.u.chat.has_messages && q.msg.u.chat.keep_alive_ms == 0);
    gw_request_clear(&q);
    /* A message without a role still encodes (role is required on the bus). */
    EXPECT_OK(GW_API_CHAT, "{\"model\":\"m\",\"messages\":[{}]}", &q);
    CHECK(q.msg.u.chat.messages.v[0].has_role);
    CHECK_EQ_STR(q.msg.u.chat.messages.v[0].role, "");
    gw_request_clear(&q);

    EXPECT_ERR(GW_API_CHAT, "{\"messages\":[]}", "model is required");
    EXPECT_ERR(GW_API_CHAT, "{\"model\":\"m\",\"messages\":{}}",
               "json: cannot unmarshal object into Go struct field "
               "ChatRequest.messages of type []api.Message");
    EXPECT_ERR(GW_API_CHAT, "{\"model\":\"m\",\"messages\":[\"hi\"]}",
               "json: cannot unmarshal string into Go struct field "
               "ChatRequest.messages of type api.Message");
    EXPECT_ERR(GW_API_CHAT,
               "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":1}]}",
               "json: cannot unmarshal number into Go struct field "
               "ChatRequest.messages.content of type string");
    EXPECT_ERR(GW_API_CHAT,
               "{\"model\":\"m\",\"messages\":[{\"tool_calls\":{}}]}",
               "json: cannot unmarshal object into Go struct field "
               "ChatRequest.messages.tool_calls of type []api.ToolCall");
    EXPECT_ERR(GW_API_CHAT, "{\"model\":\"m\",\"tools\":{}}",
               "json: cannot unmarshal object into Go struct field "
               "ChatRequest.tools of type api.Tools");
    EXPECT_ERR(GW_API_CHAT, "{\"model\":\"m\",\"tools\":[1]}",
               "json: cannot unmarshal number into Go struct field "
               "ChatRequest.tools of type api.Tool");
    EXPECT_ERR(GW_API_CHAT, "{\"model\":\"m\",\"top_logprobs\":100}",
               "top_logprobs must be between 0 and 20");
    EXPECT_ERR(GW_API_CHAT, "{\"model\":\"m\",\"format\":\"yaml\"}",
               "invalid format: \"\\\"yaml\\\"\"; expected \"json\" or a "
               "valid JSON Schema object");
    EXPECT_ERR(GW_API_CHAT, "{\"model\":\"m\",\"options\":{\"top_p\":true}}",
               "option \"top_p\" must be of type float32");
}

static void test_embed(void)
{
    gw_request_t q;
    EXPECT_OK(GW_API_EMBED,
              "{\"model\":\"e\",\"input\":[\"a\",\"b\"],\"truncate\":false,"
              "\"dimensions\":8}",
              &q);
    CHECK_EQ_INT(q.msg.type, MSG_embed);
    CHECK(!q.stream);
    CHECK(q.msg.u.embed.input.n == 2);
    CHECK_EQ_STR(q.msg.u.embed.input.v[1], "b");
    CHECK(q.msg.u.embed.has_truncate && !q.msg.u.embed.truncate);
    CHECK(q.msg.u.embed.dimensions == 8);
    gw_request_clear(&q);
    EXPECT_OK(GW_API_EMBED, "{\"model\":\"e\",\"input\":\"one\"}", &q);
    CHECK(q.msg.u.embed.input.n == 1);
    gw_request_clear(&q);
    EXPECT_OK(GW_API_EMBED, "{\"model\":\"e\",\"input\":\"\"}", &q);
    CHECK(q.msg.u.embed.has_input && q.msg.u.embed.input.n == 0);
    gw_request_clear(&q);
    EXPECT_OK(GW_API_EMBED, "{\"model\":\"e\"}", &q);
    CHECK(q.msg.u.embed.input.n == 0);
    gw_request_clear(&q);
    EXPECT_ERR(GW_API_EMBED, "{\"model\":\"e\",\"input\":[\"a\",1]}",
               "invalid input type");
    EXPECT_ERR(GW_API_EMBED, "{\"model\":\"e\",\"input\":5}",
               "invalid input type");
    EXPECT_ERR(GW_API_EMBED, "{\"input\":\"x\"}", "model is required");

    /* legacy /api/embeddings */
    EXPECT_OK(GW_API_EMBEDDINGS, "{\"model\":\"e\",\"prompt\":\"hello\"}", &q);
    CHECK_EQ_INT(q.msg.type, MSG_embed);
    CHECK(q.msg.u.embed.input.n == 1);
    CHECK_EQ_STR(q.msg.u.embed.input.v[0], "hello");
    gw_request_clear(&q);
    EXPECT_OK(GW_API_EMBEDDINGS, "{\"model\":\"e\"}", &q);
    CHECK(q.msg.u.embed.input.n == 0);
    gw_request_clear(&q);
    EXPECT_ERR(GW_API_EMBEDDINGS, "{\"prompt\":\"x\"}", "model is required");
    EXPECT_ERR(GW_API_EMBEDDINGS, "{\"model\":\"e\",\"prompt\":1}",
               "json: cannot unmarshal number into Go struct field "
               "EmbeddingRequest.prompt of type string");
}

static void test_store_requests(void)
{
    gw_request_t q;
    EXPECT_OK(GW_API_SHOW, "{\"name\":\"llama3\",\"verbose\":true}", &q);
    CHECK_EQ_STR(q.msg.u.show.model, "llama3"); /* deprecated alias */
    CHECK(q.msg.u.show.verbose);
    gw_request_clear(&q);
    EXPECT_ERR(GW_API_SHOW, "{}", "model is required");
    EXPECT_ERR(GW_API_SHOW, "{\"model\":\"m\",\"options\":{\"seed\":\"x\"}}",
               "option \"seed\" must be of type integer");

    EXPECT_OK(GW_API_COPY, "{\"source\":\"a\",\"destination\":\"b:tag\"}", &q);
    CHECK_EQ_STR(q.msg.u.copy.source, "a");
    CHECK_EQ_STR(q.msg.u.copy.destination, "b:tag");
    gw_request_clear(&q);
    EXPECT_ERR(GW_API_COPY, "{\"destination\":\"b\"}", "source \"\" is invalid");
    EXPECT_ERR(GW_API_COPY, "{\"source\":\"a\",\"destination\":\"../x\"}",
               "destination \"../x\" is invalid");

    EXPECT_OK(GW_API_DELETE, "{\"model\":\"a:b\"}", &q);
    CHECK_EQ_STR(q.msg.u.delete.model, "a:b");
    gw_request_clear(&q);
    EXPECT_ERR(GW_API_DELETE, "{}", "name \"\" is invalid");
    EXPECT_ERR(GW_API_DELETE, "{\"model\":\"a b\"}", "name \"a b\" is invalid");

    static const char d1[] =
        "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"mine\",\"files\":{\"model.gguf\":\"%s\"},"
             "\"adapters\":{\"lora.gguf\":\"%s\"},\"template\":\"{{ .Prompt }}\","
             "\"system\":\"s\",\"license\":\"MIT\",\"parameters\":{\"stop\":"
             "[\"x\"],\"temperature\":0.2},\"messages\":[{\"role\":\"user\","
             "\"content\":\"q\"}],\"quantization\":\"q4_K_M\","
             "\"stream\":false}",
             d1, d1);
    EXPECT_OK(GW_API_CREATE, body, &q);
    const msg_create_body_t *k = &q.msg.u.create;
    CHECK_EQ_STR(k->model, "mine");
    CHECK(k->files.n == 1 && k->adapters.n == 1);
    CHECK_EQ_STR(k->files.v[0].name, "model.gguf");
    CHECK_EQ_STR(k->files.v[0].digest, d1);
    CHECK(k->license.n == 1);
    CHECK_EQ_STR(k->license.v[0], "MIT");
    CHECK_EQ_STR(k->parameters, "{\"stop\":[\"x\"],\"temperature\":0.2}");
    CHECK(k->messages.n == 1);
    CHECK_EQ_STR(k->quantize, "q4_K_M"); /* deprecated alias */
    CHECK(!q.stream);
    gw_request_clear(&q);
    EXPECT_OK(GW_API_CREATE,
              "{\"model\":\"mine\",\"from\":\"llama3\",\"license\":[\"a\",\"b\"]}",
              &q);
    CHECK(q.stream && q.msg.u.create.license.n == 2);
    gw_request_clear(&q);
    EXPECT_ERR(GW_API_CREATE, "{\"from\":\"llama3\"}", "invalid model name");
    EXPECT_ERR(GW_API_CREATE, "{\"model\":\"x\"}",
               "neither 'from' or 'files' was specified");
    EXPECT_ERR(GW_API_CREATE,
               "{\"model\":\"x\",\"files\":{\"../m.gguf\":\"sha256:11\"}}",
               "file path must be relative");
    EXPECT_ERR(GW_API_CREATE,
               "{\"model\":\"x\",\"files\":{\"/abs.gguf\":\"sha256:11\"}}",
               "file path must be relative");
    EXPECT_ERR(GW_API_CREATE, "{\"model\":\"x\",\"files\":{\"m.gguf\":\"sha256:11\"}}",
               "invalid digest format");
    EXPECT_ERR(GW_API_CREATE, "{\"model\":\"x\",\"files\":[\"m.gguf\"]}",
               "json: cannot unmarshal array into Go struct field "
               "CreateRequest.files of type map[string]string");
    EXPECT_ERR(GW_API_CREATE,
               "{\"model\":\"x\",\"from\":\"y\",\"parameters\":{\"num_ctx\":true}}",
               "option \"num_ctx\" must be of type integer");

    EXPECT_OK(GW_API_PULL, "{\"name\":\"llama3\",\"insecure\":true}", &q);
    CHECK_EQ_STR(q.model, "llama3");
    gw_request_clear(&q);
    EXPECT_ERR(GW_API_PULL, "{}", "invalid model name");
    EXPECT_ERR(GW_API_PUSH, "{}", "model is required");
}

static void test_digest(void)
{
    /* 64 hex digits, either separator, either case */
    CHECK(gw_digest_is_valid("sha256:0123456789abcdefABCDEF0123456789abcdef"
                             "0123456789abcdef0123456789"));
    CHECK(gw_digest_is_valid("sha256-0123456789abcdef0123456789abcdef"
                             "0123456789abcdef0123456789abcdef"));
    /* 63 and 65 digits, another algorithm, a non-hex digit */
    CHECK(!gw_digest_is_valid("sha256:0123456789abcdef0123456789abcdef"
                              "0123456789abcdef0123456789abcde"));
    CHECK(!gw_digest_is_valid("sha256:0123456789abcdef0123456789abcdef"
                              "0123456789abcdef0123456789abcdef0"));
    CHECK(!gw_digest_is_valid("sha512:0123456789abcdef0123456789abcdef"
                              "0123456789abcdef0123456789abcdef"));
    CHECK(!gw_digest_is_valid("sha256:0123456789abcdef0123456789abcdef"
                              "0123456789abcdef0123456789abcdeg"));
    CHECK(!gw_digest_is_valid("sha256:../../etc/passwd"));
    CHECK(!gw_digest_is_valid(""));
    CHECK(!gw_digest_is_valid(NULL));
}

/* ---- rendering ---- */

static void test_floats(void)
{
    CHECK_EQ_STR(f32_text(0.1f), "0.1");
    CHECK_EQ_STR(f32_text(-0.25f), "-0.25");
    CHECK_EQ_STR(f32_text(100.0f), "100");
    CHECK_EQ_STR(f32_text(0.0f), "0");
    CHECK_EQ_STR(f32_text(-0.0f), "-0");
    CHECK_EQ_STR(f32_text(1e-6f), "0.000001");
    CHECK_EQ_STR(f32_text(1e-7f), "1e-7");
    CHECK_EQ_STR(f32_text(1.5e-10f), "1.5e-10");
    CHECK_EQ_STR(f32_text(123456789.0f), "123456790");
    CHECK_EQ_STR(f32_text(1e21f), "1e+21");
    CHECK_EQ_STR(f32_text(3.4028235e38f), "3.4028235e+38");
    CHECK_EQ_STR(f32_text(0.33333334f), "0.33333334");
    CHECK_EQ_STR(f64_text(0.1), "0.1");
    CHECK_EQ_STR(f64_text((double)0.1f), "0.10000000149011612");
    CHECK_EQ_STR(f64_text(1e21), "1e+21");
    CHECK_EQ_STR(f64_text(123.0), "123");
    CHECK_EQ_STR(f64_text(5e-324), "5e-324");
    CHECK_EQ_STR(f32_text(NAN), "null");
}

static void test_strings(void)
{
    CHECK_EQ_STR(str_text("<a&b>", 5), "\"\\u003ca\\u0026b\\u003e\"");
    CHECK_EQ_STR(str_text("q\"\\", 3), "\"q\\\"\\\\\"");
    CHECK_EQ_STR(str_text("\n\t\r\x01\x1f", 5),
                 "\"\\n\\t\\r\\u0001\\u001f\"");
    CHECK_EQ_STR(str_text("\xff", 1), "\"\\ufffd\"");
    CHECK_EQ_STR(str_text("a\xc3", 2), "\"a\\ufffd\""); /* cut sequence */
    CHECK_EQ_STR(str_text("\xed\xa0\x80", 3),
                 "\"\\ufffd\\ufffd\\ufffd\""); /* surrogate */
    CHECK_EQ_STR(str_text("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9),
                 "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
    CHECK_EQ_STR(str_text("\xe2\x80\xa8", 3), "\"\\u2028\"");
    CHECK_EQ_STR(str_text("a\0b", 3), "\"a\\u0000b\"");
}

static void test_time(void)
{
    char out[GW_TIME_BUF];
    struct timespec t0 = {0, 0};
    CHECK_EQ_STR(gw_time_rfc3339(t0, out), "1970-01-01T00:00:00Z");
    struct timespec t1 = {1714557600, 500000000};
    CHECK_EQ_STR(gw_time_rfc3339(t1, out), "2024-05-01T10:00:00.5Z");
    struct timespec t2 = {1714557600, 123456789};
    CHECK_EQ_STR(gw_time_rfc3339(t2, out), "2024-05-01T10:00:00.123456789Z");
    struct timespec t3 = {1714557600, 1000};
    CHECK_EQ_STR(gw_time_rfc3339(t3, out), "2024-05-01T10:00:00.000001Z");
    gw_time_now(out);
    CHECK(strlen(out) >= 20 && out[strlen(out) - 1] == 'Z' && out[10] == 'T');
}

static void test_answers(void)
{
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    gw_answer_t a = {.response = "Hel"};
    CHECK_EQ_INT(gw_render_generate(&b, "m", &a), CR_OK);
    CHECK(strstr(b.data, "\"created_at\":\"") != NULL);
    strip_created(b.data);
    CHECK_EQ_STR(b.data, "{\"model\":\"m\",\"response\":\"Hel\",\"done\":false}");

    cr_buf_reset(&b);
    int32_t ctx[] = {1, 2};
    msg_done_body_t d = {.done_reason = "stop", .has_done_reason = true,
                         .context = {ctx, 2}, .has_context = true,
                         .total_duration = 10, .has_total_duration = true,
                         .load_duration = 0, .has_load_duration = true,
                         .prompt_eval_count = 3, .has_prompt_eval_count = true,
                         .eval_count = 4, .has_eval_count = true,
                         .eval_duration = 5, .has_eval_duration = true};
    gw_answer_t fin = {.response = "", .done = &d};
    CHECK_EQ_INT(gw_render_generate(&b, "m", &fin), CR_OK);
    strip_created(b.data);
    CHECK_EQ_STR(b.data,
                 "{\"model\":\"m\",\"response\":\"\",\"done\":true,"
                 "\"done_reason\":\"stop\",\"context\":[1,2],"
                 "\"total_duration\":10,\"prompt_eval_count\":3,"
                 "\"eval_count\":4,\"eval_duration\":5}");

    cr_buf_reset(&b);
    gw_answer_t th = {.response = "", .thinking = "hmm",
                      .tool_calls = "[{\"function\":{\"name\":\"f\"}}]",
                      .logprobs = "[]"};
    CHECK_EQ_INT(gw_render_chat(&b, "m", &th), CR_OK);
    strip_created(b.data);
    CHECK_EQ_STR(b.data,
                 "{\"model\":\"m\",\"message\":{\"role\":\"assistant\","
                 "\"content\":\"\",\"thinking\":\"hmm\",\"tool_calls\":"
                 "[{\"function\":{\"name\":\"f\"}}]},\"done\":false}");

    cr_buf_reset(&b);
    msg_done_body_t load = {.done_reason = "load", .has_done_reason = true};
    gw_answer_t lf = {.response = "", .done = &load};
    CHECK_EQ_INT(gw_render_chat(&b, "m", &lf), CR_OK);
    strip_created(b.data);
    CHECK_EQ_STR(b.data,
                 "{\"model\":\"m\",\"message\":{\"role\":\"assistant\","
                 "\"content\":\"\"},\"done\":true,\"done_reason\":\"load\"}");

    cr_buf_reset(&b);
    msg_progress_body_t p = {.status = "pulling x", .has_status = true,
                             .digest = "sha256:ab", .has_digest = true,
                             .total = 10, .has_total = true, .completed = 0,
                             .has_completed = true};
    CHECK_EQ_INT(gw_render_progress(&b, &p), CR_OK);
    CHECK_EQ_STR(b.data, "{\"status\":\"pulling x\",\"digest\":\"sha256:ab\","
                         "\"total\":10}");

    cr_buf_reset(&b);
    CHECK_EQ_INT(gw_render_error(&b, "bad \"x\""), CR_OK);
    CHECK_EQ_STR(b.data, "{\"error\":\"bad \\\"x\\\"\"}");

    /* A capped buffer reports TOO_LARGE instead of writing half. */
    cr_buf_t small;
    cr_buf_init(&small, 16);
    CHECK_EQ_INT(gw_render_error(&small, "this message is too long"),
                 CR_E_TOO_LARGE);
    cr_buf_free(&small);
    cr_buf_free(&b);
}

static void test_lists(void)
{
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    char *fam[] = {"llama"};
    msg_details_t det = {.format = "gguf", .has_format = true,
                         .family = "llama", .has_family = true,
                         .families = {fam, 1}, .has_families = true,
                         .parameter_size = "8.0B", .has_parameter_size = true,
                         .quantization_level = "Q4_0",
                         .has_quantization_level = true};
    msg_model_entry_t ents[2] = {
        {.name = "llama3:latest", .has_name = true,
         .modified_at = "2024-05-01T10:00:00Z", .has_modified_at = true,
         .size = 42, .has_size = true, .digest = "abc", .has_digest = true,
         .details = &det, .has_details = true},
        {.name = "x:1", .has_name = true},
    };
    msg_tags_reply_body_t tags = {.models = {ents, 2}, .has_models = true};
    CHECK_EQ_INT(gw_render_tags(&b, &tags), CR_OK);
    CHECK_EQ_STR(b.data,
                 "{\"models\":[{\"name\":\"llama3:latest\",\"model\":"
                 "\"llama3:latest\",\"modified_at\":\"2024-05-01T10:00:00Z\","
                 "\"size\":42,\"digest\":\"abc\",\"details\":{\"parent_model\":"
                 "\"\",\"format\":\"gguf\",\"family\":\"llama\",\"families\":"
                 "[\"llama\"],\"parameter_size\":\"8.0B\",\"quantization_level\":"
                 "\"Q4_0\"}},{\"name\":\"x:1\",\"model\":\"x:1\",\"modified_at\":"
                 "\"0001-01-01T00:00:00Z\",\"size\":0,\"digest\":\"\","
                 "\"details\":{\"parent_model\":\"\",\"format\":\"\",\"family\":"
                 "\"\",\"families\":null,\"parameter_size\":\"\","
                 "\"quantization_level\":\"\"}}]}");

    cr_buf_reset(&b);
    msg_tags_reply_body_t none = {0};
    CHECK_EQ_INT(gw_render_tags(&b, &none), CR_OK);
    CHECK_EQ_STR(b.data, "{\"models\":[]}");

    cr_buf_reset(&b);
    msg_loaded_model_t lm = {.name = "llama3:latest", .has_name = true,
                             .size = 100, .has_size = true, .size_vram = 60,
                             .has_size_vram = true, .digest = "abc",
                             .has_digest = true,
                             .expires_at = "2024-05-01T10:05:00Z",
                             .has_expires_at = true, .context_length = 4096,
                             .has_context_length = true, .active = 1,
                             .has_active = true, .queued = 2,
                             .has_queued = true, .has_loading = true};
    msg_ps_reply_body_t ps = {.models = {&lm, 1}, .has_models = true};
    CHECK_EQ_INT(gw_render_ps(&b, &ps), CR_OK);
    CHECK_EQ_STR(b.data,
                 "{\"models\":[{\"name\":\"llama3:latest\",\"model\":"
                 "\"llama3:latest\",\"size\":100,\"digest\":\"abc\",\"details\":"
                 "{\"parent_model\":\"\",\"format\":\"\",\"family\":\"\","
                 "\"families\":null,\"parameter_size\":\"\","
                 "\"quantization_level\":\"\"},\"expires_at\":"
                 "\"2024-05-01T10:05:00Z\",\"size_vram\":60,\"context_length\":"
                 "4096,\"active\":1,\"queued\":2,\"loading\":false}]}");

    /* A model on a node says which; a local one (above) has no host. */
    cr_buf_reset(&b);
    msg_loaded_model_t on_node[2] = {lm, lm};
    on_node[0].host = "gpu1";
    on_node[0].has_host = true;
    on_node[1].name = "x:1";
    on_node[1].host = ""; /* empty: treated as local */
    on_node[1].has_host = true;
    msg_ps_reply_body_t ps2 = {.models = {on_node, 2}, .has_models = true};
    CHECK_EQ_INT(gw_render_ps(&b, &ps2), CR_OK);
    CHECK(strstr(b.data, "\"loading\":false,\"host\":\"gpu1\"}") != NULL);
    CHECK(strstr(b.data, "\"name\":\"x:1\"") != NULL);
    const char *second = strstr(b.data, "\"name\":\"x:1\"");
    CHECK(second && strstr(second, "\"host\"") == NULL);
    CHECK(strstr(b.data, "offload_error") == NULL); /* none fell back */

    /* A model whose GPU layers run on the CPU says why, after the rest. */
    cr_buf_reset(&b);
    msg_loaded_model_t fell = lm;
    fell.offload_error = "cuda: no NVIDIA driver (\"x\")";
    fell.has_offload_error = true;
    msg_ps_reply_body_t ps3 = {.models = {&fell, 1}, .has_models = true};
    CHECK_EQ_INT(gw_render_ps(&b, &ps3), CR_OK);
    CHECK(strstr(b.data, "\"loading\":false,\"offload_error\":"
                         "\"cuda: no NVIDIA driver (\\\"x\\\")\"}]}") != NULL);
    cr_buf_free(&b);
}

static void test_embeddings(void)
{
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    float v[4] = {0.1f, -0.5f, 1.0f, 0.0f};
    msg_embeddings_body_t e = {.n_inputs = 2, .has_n_inputs = true,
                               .dims = 2, .has_dims = true,
                               .data = {(uint8_t *)v, sizeof v},
                               .has_data = true, .total_duration = 7,
                               .has_total_duration = true,
                               .prompt_eval_count = 3,
                               .has_prompt_eval_count = true};
    cr_err_t err;
    CHECK_EQ_INT(gw_render_embed(&b, "e", &e, &err), CR_OK);
    CHECK_EQ_STR(b.data, "{\"model\":\"e\",\"embeddings\":[[0.1,-0.5],[1,0]],"
                         "\"total_duration\":7,\"prompt_eval_count\":3}");
    cr_buf_reset(&b);
    CHECK_EQ_INT(gw_render_embedding(&b, &e, &err), CR_OK);
    CHECK_EQ_STR(b.data, "{\"embedding\":[0.10000000149011612,-0.5]}");

    msg_embeddings_body_t empty = {.has_n_inputs = true, .has_dims = true};
    cr_buf_reset(&b);
    CHECK_EQ_INT(gw_render_embed(&b, "e", &empty, &err), CR_OK);
    CHECK_EQ_STR(b.data, "{\"model\":\"e\",\"embeddings\":[]}");
    cr_buf_reset(&b);
    CHECK_EQ_INT(gw_render_embedding(&b, &empty, &err), CR_OK);
    CHECK_EQ_STR(b.data, "{\"embedding\":[]}");

    /* hostile shapes */
    msg_embeddings_body_t bad = e;
    bad.dims = 3; /* 2 x 3 floats claimed, 4 given */
    CHECK_EQ_INT(gw_render_embed(&b, "e", &bad, &err), CR_E_PROTO);
    bad = e;
    bad.n_inputs = -1;
    CHECK_EQ_INT(gw_render_embed(&b, "e", &bad, &err), CR_E_PROTO);
    bad = e;
    bad.n_inputs = INT64_MAX;
    bad.dims = INT64_MAX;
    CHECK_EQ_INT(gw_render_embed(&b, "e", &bad, &err), CR_E_PROTO);
    float nan4[4] = {0, NAN, 0, 0};
    bad = e;
    bad.data.data = (uint8_t *)nan4;
    CHECK_EQ_INT(gw_render_embed(&b, "e", &bad, &err), CR_E_INTERNAL);
    CHECK_EQ_STR(err.msg, "embedding contains NaN or Inf values");
    cr_buf_free(&b);
}

/* ---- the status table ---- */

static void test_status_table(void)
{
    CHECK_EQ_INT(gw_http_status(CR_E_INVALID), 400);
    CHECK_EQ_INT(gw_http_status(CR_E_NOT_FOUND), 404);
    CHECK_EQ_INT(gw_http_status(CR_E_CANCELED), 499);
    CHECK_EQ_INT(gw_http_status(CR_E_BUSY), 503);
    CHECK_EQ_INT(gw_http_status(CR_E_TOO_LARGE), 413);
    CHECK_EQ_INT(gw_http_status(CR_E_UNAUTHORIZED), 401);
    CHECK_EQ_INT(gw_http_status(CR_E_FORBIDDEN), 403);
    CHECK_EQ_INT(gw_http_status(CR_E_UNAVAILABLE), 502);
    CHECK_EQ_INT(gw_http_status(CR_E_RUNNER), 500);
    CHECK_EQ_INT(gw_http_status(CR_E_TIMEOUT), 500);
    CHECK_EQ_INT(gw_http_status(CR_E_PROTO), 500);
    CHECK_EQ_INT(gw_http_status((cr_status_t)1234), 500);
}

/* ---- access ---- */

static void test_cors(void)
{
    gw_cors_t *c = gw_cors_new(" https://app.example.com , http://*.corp.lan,"
                               "*.suffix.io");
    CHECK(c != NULL);
    CHECK(gw_cors_allowed(c, "http://localhost"));
    CHECK(gw_cors_allowed(c, "http://localhost:3000"));
    CHECK(gw_cors_allowed(c, "https://127.0.0.1:8080"));
    CHECK(gw_cors_allowed(c, "http://0.0.0.0"));
    CHECK(gw_cors_allowed(c, "HTTP://LOCALHOST:5173"));
    CHECK(gw_cors_allowed(c, "app://obsidian.md"));
    CHECK(gw_cors_allowed(c, "tauri://localhost"));
    CHECK(gw_cors_allowed(c, "vscode-webview://abc"));
    CHECK(gw_cors_allowed(c, "chrome-extension://abcdef"));
    CHECK(gw_cors_allowed(c, "https://app.example.com"));
    CHECK(gw_cors_allowed(c, "http://ci.corp.lan"));
    CHECK(gw_cors_allowed(c, "https://x.suffix.io"));
    CHECK(!gw_cors_allowed(c, "https://evil.com"));
    CHECK(!gw_cors_allowed(c, "http://localhost.evil.com"));
    CHECK(!gw_cors_allowed(c, "https://app.example.com.evil"));
    CHECK(!gw_cors_allowed(c, "null"));
    CHECK(!gw_cors_allows_all(c));
    gw_cors_destroy(&c);
    CHECK(c == NULL);
    c = gw_cors_new("*");
    CHECK(gw_cors_allowed(c, "https://anything.example"));
    CHECK(gw_cors_allows_all(c));
    gw_cors_destroy(&c);
    gw_cors_destroy(&c); /* NULL is fine */
}

static void test_host_check(void)
{
    CHECK(gw_host_allowed(NULL));
    CHECK(gw_host_allowed(""));
    CHECK(gw_host_allowed("localhost"));
    CHECK(gw_host_allowed("localhost:11434"));
    CHECK(gw_host_allowed("LOCALHOST:11434"));
    CHECK(gw_host_allowed("127.0.0.1:11434"));
    CHECK(gw_host_allowed("127.9.9.9"));
    CHECK(gw_host_allowed("[::1]:11434"));
    CHECK(gw_host_allowed("10.1.2.3"));
    CHECK(gw_host_allowed("172.16.0.1"));
    CHECK(gw_host_allowed("172.31.255.255"));
    CHECK(gw_host_allowed("192.168.1.1:80"));
    CHECK(gw_host_allowed("0.0.0.0"));
    CHECK(gw_host_allowed("[fd00::1]:1"));
    CHECK(gw_host_allowed("myapp.localhost"));
    CHECK(gw_host_allowed("printer.local:631"));
    CHECK(gw_host_allowed("svc.internal"));
    CHECK(!gw_host_allowed("evil.com"));
    CHECK(!gw_host_allowed("evil.com:11434"));
    CHECK(!gw_host_allowed("8.8.8.8"));
    CHECK(!gw_host_allowed("172.32.0.1"));
    CHECK(!gw_host_allowed("localhost.evil.com"));
    CHECK(!gw_host_allowed("[2001:4860::8888]:80"));
    char host[256];
    if (gethostname(host, sizeof host) == 0 && !strchr(host, '.'))
        CHECK(gw_host_allowed(host));
}

static void test_listen(void)
{
    char host[300];
    uint16_t port;
    gw_listen_split("", host, sizeof host, &port);
    CHECK_EQ_STR(host, "127.0.0.1");
    CHECK_EQ_INT(port, 11434);
    gw_listen_split("0.0.0.0", host, sizeof host, &port);
    CHECK_EQ_STR(host, "0.0.0.0");
    CHECK_EQ_INT(port, 11434);
    gw_listen_split("0.0.0.0:8080", host, sizeof host, &port);
    CHECK_EQ_STR(host, "0.0.0.0");
    CHECK_EQ_INT(port, 8080);
    gw_listen_split(" \"example.com:99\" ", host, sizeof host, &port);
    CHECK_EQ_INT(port, 11434); /* quotes are the env reader's job */
    gw_listen_split("http://10.0.0.1", host, sizeof host, &port);
    CHECK_EQ_STR(host, "10.0.0.1");
    CHECK_EQ_INT(port, 80);
    gw_listen_split("https://h.example:8443/path", host, sizeof host, &port);
    CHECK_EQ_STR(host, "h.example");
    CHECK_EQ_INT(port, 8443);
    gw_listen_split("https://h.example/", host, sizeof host, &port);
    CHECK_EQ_INT(port, 443);
    gw_listen_split("[::1]:9000", host, sizeof host, &port);
    CHECK_EQ_STR(host, "::1");
    CHECK_EQ_INT(port, 9000);
    gw_listen_split("::1", host, sizeof host, &port);
    CHECK_EQ_STR(host, "::1");
    CHECK_EQ_INT(port, 11434);
    gw_listen_split("[::]", host, sizeof host, &port);
    CHECK_EQ_STR(host, "::");
    gw_listen_split(":7000", host, sizeof host, &port);
    CHECK_EQ_STR(host, "");
    CHECK_EQ_INT(port, 7000);
    gw_listen_split("localhost:99999", host, sizeof host, &port);
    CHECK_EQ_STR(host, "localhost");
    CHECK_EQ_INT(port, 11434); /* bad port -> default */
    gw_listen_split("h:abc", host, sizeof host, &port);
    CHECK_EQ_INT(port, 11434);

    struct sockaddr_storage ss;
    socklen_t len;
    bool lo;
    cr_err_t err;
    CHECK_EQ_INT(gw_listen_resolve("127.0.0.1", 1, &ss, &len, &lo, &err), CR_OK);
    CHECK(lo && ss.ss_family == AF_INET);
    CHECK_EQ_INT(gw_listen_resolve("::1", 1, &ss, &len, &lo, &err), CR_OK);
    CHECK(lo && ss.ss_family == AF_INET6);
    CHECK_EQ_INT(gw_listen_resolve("0.0.0.0", 1, &ss, &len, &lo, &err), CR_OK);
    CHECK(!lo);
    CHECK_EQ_INT(gw_listen_resolve("", 1, &ss, &len, &lo, &err), CR_OK);
    CHECK(!lo);
    CHECK_EQ_INT(gw_listen_resolve("localhost", 1, &ss, &len, &lo, &err), CR_OK);
    CHECK(lo);
    CHECK_EQ_INT(gw_listen_resolve("no-such-host.invalid", 1, &ss, &len, &lo,
                                   &err),
                 CR_E_INVALID);
}

static void test_config(void)
{
    gw_config_t cfg;
    cr_err_t err;
    unsetenv("CORRAL_HOST");
    unsetenv("CORRAL_ORIGINS");
    unsetenv("CORRAL_LOAD_TIMEOUT");
    setenv("OLLAMA_HOST", "0.0.0.0:9999", 1);
    setenv("OLLAMA_ORIGINS", "https://a.example", 1);
    unsetenv("OLLAMA_LOAD_TIMEOUT");
    CHECK_EQ_INT(gw_config_from_env(&cfg, &err), CR_OK);
    CHECK_EQ_STR(cfg.host, "0.0.0.0:9999");
    CHECK_EQ_STR(cfg.origins, "https://a.example");
    CHECK_EQ_INT(cfg.max_body_bytes, GW_DEFAULT_MAX_BODY);
    CHECK_EQ_INT(cfg.create_timeout_ms, 6 * 60 * 1000); /* 5m + 1m */
    CHECK_EQ_INT(cfg.ping_after_ms, GW_DEFAULT_PING_AFTER_MS);
    setenv("OLLAMA_LOAD_TIMEOUT", "2m", 1);
    CHECK_EQ_INT(gw_config_from_env(&cfg, &err), CR_OK);
    CHECK_EQ_INT(cfg.create_timeout_ms, 3 * 60 * 1000);
    setenv("CORRAL_LOAD_TIMEOUT", "0", 1); /* CORRAL_ wins; 0 = no limit */
    CHECK_EQ_INT(gw_config_from_env(&cfg, &err), CR_OK);
    CHECK_EQ_INT(cfg.create_timeout_ms, 0);
    setenv("CORRAL_LOAD_TIMEOUT", "soon", 1);
    CHECK_EQ_INT(gw_config_from_env(&cfg, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "OLLAMA_LOAD_TIMEOUT: invalid duration \"soon\"");
    unsetenv("CORRAL_LOAD_TIMEOUT");
    unsetenv("OLLAMA_LOAD_TIMEOUT");
    unsetenv("OLLAMA_HOST");
    unsetenv("OLLAMA_ORIGINS");
    CHECK_EQ_INT(gw_config_from_env(&cfg, &err), CR_OK);
    CHECK_EQ_STR(cfg.host, "");
}

int main(void)
{
    test_body_errors();
    test_generate_fields();
    test_generate_errors();
    test_chat();
    test_embed();
    test_store_requests();
    test_digest();
    test_floats();
    test_strings();
    test_time();
    test_answers();
    test_lists();
    test_embeddings();
    test_status_table();
    test_cors();
    test_host_check();
    test_listen();
    test_config();
    return check_finish("test_gateway_units");
}
