/* test_engine.c: a loaded model answering requests, without the bus.
 *
 * Uses a synthetic model (random weights, built-in SentencePiece vocab) and
 * checks what the engine adds over its parts: num_predict gives "length",
 * the same seed gives the same text, stop strings are withheld and end the
 * answer, a cancel stops generation, a cached prefix gives identical output,
 * raw mode and templates shape the prompt, bad requests are clear errors.
 * With the shared testdata, stories260K greedy text matches llama.cpp's. */
#include "lib/prelude.h"

#include <unistd.h>

#include "lib/buf.h"

#include <jansson.h>
#include "services/runner/backends.h"
#include "services/runner/engine.h"
#include "services/runner/grammar/grammar.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"

typedef struct capture {
    cr_buf_t text;
    cr_buf_t thinking;
    cr_buf_t calls;
    json_t *logprobs; /* entries of every chunk, in order (or NULL) */
    int chunks;
    int cancel_after; /* cancel once this many chunks arrived (0 = never) */
} capture_t;

static bool cap_chunk(void *ctx, const msg_chunk_body_t *c)
{
    capture_t *cp = ctx;
    cp->chunks++;
    if (c->response)
        cr_buf_puts(&cp->text, c->response);
    if (c->thinking && cp->thinking.max_bytes)
        cr_buf_puts(&cp->thinking, c->thinking);
    if (c->tool_calls && cp->calls.max_bytes)
        cr_buf_puts(&cp->calls, c->tool_calls);
    if (c->logprobs && cp->logprobs) {
        json_t *arr = json_loads(c->logprobs, 0, NULL);
        if (json_is_array(arr))
            json_array_extend(cp->logprobs, arr);
        else
            json_array_append_new(cp->logprobs, json_string("not an array"));
        json_decref(arr);
    }
    return true;
}

static bool cap_canceled(void *ctx)
{
    capture_t *cp = ctx;
    return cp->cancel_after && cp->chunks >= cp->cancel_after;
}

static char model_path[2048];

static rn_engine_t *load(const char *template_src, int64_t num_ctx)
{
    return test_engine_load(model_path, template_src, num_ctx, 0);
}

/* Runs a generate request; returns the status, fills text and done. */
static cr_status_t gen(rn_engine_t *e, const char *prompt, bool raw,
                       msg_options_t *o, capture_t *cp, msg_done_body_t *done,
                       cr_err_t *err)
{
    msg_t m;
    msg_init(&m, MSG_generate, "t");
    m.u.generate.model = "synth";
    m.u.generate.has_model = true;
    m.u.generate.prompt = (char *)prompt;
    m.u.generate.has_prompt = true;
    m.u.generate.raw = raw;
    m.u.generate.has_raw = raw;
    m.u.generate.options = o;
    m.u.generate.has_options = o != NULL;
    cr_buf_init(&cp->text, 1 << 20);
    cp->chunks = 0;
    rn_sink_t sink = {cp, cap_chunk, cap_canceled};
    memset(done, 0, sizeof *done);
    return rn_engine_generate(e, &m, &sink, done, err);
}

static msg_options_t greedy(int64_t n)
{
    msg_options_t o = {0};
    o.temperature = 0;
    o.has_temperature = true;
    o.num_predict = n;
    o.has_num_predict = true;
    return o;
}

static void test_length_and_determinism(rn_engine_t *e)
{
    capture_t a = {0}, b = {0};
    msg_done_body_t d;
    cr_err_t err;
    msg_options_t o = greedy(5);
    o.temperature = 1.0;
    o.seed = 123;
    o.has_seed = true;
    o.top_k = 0;
    o.has_top_k = true;
    CHECK_EQ_INT(gen(e, "hello", false, &o, &a, &d, &err), CR_OK);
    bool eos = !strcmp(d.done_reason, "stop");
    CHECK(eos || (!strcmp(d.done_reason, "length") && d.eval_count == 5));
    CHECK(d.prompt_eval_count > 0 && d.eval_duration > 0);
    CHECK(d.has_context && d.context.n > 0);
    CHECK_EQ_INT(gen(e, "hello", false, &o, &b, &d, &err), CR_OK);
    CHECK_EQ_STR(a.text.data ? a.text.data : "", b.text.data ? b.text.data : "");
    cr_buf_free(&a.text);
    cr_buf_free(&b.text);
}

static void test_prefix_reuse(rn_engine_t *e)
{
    /* Same prompt twice (the second reuses the cache), then a different
     * prompt, then the first again: greedy output must not depend on what
     * the cache held. */
    msg_options_t o = greedy(8);
    capture_t a = {0}, b = {0}, c = {0};
    msg_done_body_t d;
    cr_err_t err;
    CHECK_EQ_INT(gen(e, "one two three", true, &o, &a, &d, &err), CR_OK);
    CHECK_EQ_INT(gen(e, "four five", true, &o, &c, &d, &err), CR_OK);
    CHECK_EQ_INT(gen(e, "one two three", true, &o, &b, &d, &err), CR_OK);
    CHECK_EQ_STR(a.text.data ? a.text.data : "", b.text.data ? b.text.data : "");
    cr_buf_free(&a.text);
    cr_buf_free(&b.text);
    cr_buf_free(&c.text);
}

static void test_stop_and_cancel(rn_engine_t *e)
{
    /* Find greedy output, then ask to stop at a piece of it. */
    msg_options_t o = greedy(24);
    capture_t a = {0};
    msg_done_body_t d;
    cr_err_t err;
    CHECK_EQ_INT(gen(e, "abc", true, &o, &a, &d, &err), CR_OK);
    size_t n = a.text.len;
    if (n >= 6) {
        char stop[4];
        memcpy(stop, a.text.data + n / 2, 3);
        stop[3] = '\0';
        char *first = strstr(a.text.data, stop);
        size_t want = (size_t)(first - a.text.data);
        char *strs[1] = {stop};
        o.stop.v = strs;
        o.stop.n = 1;
        o.has_stop = true;
        capture_t b = {0};
        CHECK_EQ_INT(gen(e, "abc", true, &o, &b, &d, &err), CR_OK);
        CHECK_EQ_STR(d.done_reason, "stop");
        CHECK_EQ_INT(b.text.len, want); /* everything before, nothing after */
        CHECK(!b.text.data || strstr(b.text.data, stop) == NULL);
        cr_buf_free(&b.text);
        o.has_stop = false;
    } else {
        printf("engine: greedy output too short for the stop check\n");
    }
    cr_buf_free(&a.text);

    /* Cancel after the first chunk: CR_E_CANCELED, no more pieces. */
    capture_t c = {0};
    c.cancel_after = 1;
    o = greedy(200);
    cr_status_t st = gen(e, "abc", true, &o, &c, &d, &err);
    if (c.chunks >= 1) {
        CHECK_EQ_INT(st, CR_E_CANCELED);
        CHECK_EQ_INT(c.chunks, 1);
    }
    cr_buf_free(&c.text);
}

static void test_embed(rn_engine_t *e)
{
    char *inputs[2] = {"hello world", "a different sentence"};
    msg_embed_body_t req = {0};
    req.model = "synth";
    req.input.v = inputs;
    req.input.n = 2;
    req.has_input = true;
    capture_t cp = {0};
    rn_sink_t sink = {&cp, cap_chunk, cap_canceled};
    msg_embeddings_body_t out;
    cr_err_t err;
    CHECK_EQ_INT(rn_engine_embed(e, &req, &sink, &out, &err), CR_OK);
    CHECK_EQ_INT(out.n_inputs, 2);
    CHECK(out.dims > 16);
    CHECK_EQ_INT(out.data.len, 2 * out.dims * sizeof(float));
    const float *v = (const float *)out.data.data;
    double n0 = 0, dot = 0;
    for (int64_t j = 0; j < out.dims; j++) {
        n0 += (double)v[j] * v[j];
        dot += (double)v[j] * v[out.dims + j];
    }
    CHECK_NEAR(n0, 1.0, 1e-5); /* L2-normalized */
    CHECK(dot < 0.99999);      /* different inputs, different vectors */
    float first[64];
    int64_t full_dims = out.dims;
    memcpy(first, v, 16 * sizeof *first);

    /* dimensions: the first k components, normalized again. */
    req.dimensions = 16;
    req.has_dimensions = true;
    CHECK_EQ_INT(rn_engine_embed(e, &req, &sink, &out, &err), CR_OK);
    CHECK_EQ_INT(out.dims, 16);
    v = (const float *)out.data.data;
    double n1 = 0, scale = 0;
    for (int j = 0; j < 16; j++)
        n1 += (double)v[j] * v[j];
    CHECK_NEAR(n1, 1.0, 1e-5);
    scale = v[0] / first[0];
    for (int j = 1; j < 16; j++)
        CHECK_NEAR(v[j], first[j] * scale, 1e-5); /* same direction */
    CHECK(full_dims > 16);

    /* Too long with truncate:false is Ollama's 400; with truncate it fits. */
    static char longtext[20000];
    for (size_t i = 0; i + 2 < sizeof longtext; i += 2)
        memcpy(longtext + i, "a ", 2);
    char *one[1] = {longtext};
    req.input.v = one;
    req.input.n = 1;
    req.has_dimensions = false;
    req.truncate = false;
    req.has_truncate = true;
    CHECK_EQ_INT(rn_engine_embed(e, &req, &sink, &out, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "the input length exceeds the context length");
    req.truncate = true;
    CHECK_EQ_INT(rn_engine_embed(e, &req, &sink, &out, &err), CR_OK);

    /* The cache held the embedding input: generation afterwards is sane. */
    msg_options_t o = greedy(3);
    capture_t g = {0};
    msg_done_body_t d;
    CHECK_EQ_INT(gen(e, "hello", true, &o, &g, &d, &err), CR_OK);
    cr_buf_free(&g.text);
}

static void test_logprobs(rn_engine_t *e)
{
    msg_t m;
    msg_init(&m, MSG_generate, "lp");
    m.u.generate.model = "synth";
    m.u.generate.has_model = true;
    m.u.generate.prompt = "abc";
    m.u.generate.has_prompt = true;
    m.u.generate.raw = true;
    m.u.generate.logprobs = true;
    m.u.generate.has_logprobs = true;
    m.u.generate.top_logprobs = 3;
    m.u.generate.has_top_logprobs = true;
    msg_options_t o = greedy(6);
    m.u.generate.options = &o;
    m.u.generate.has_options = true;
    capture_t cp = {0};
    cr_buf_init(&cp.text, 1 << 20);
    cp.logprobs = json_array();
    rn_sink_t sink = {&cp, cap_chunk, cap_canceled};
    msg_done_body_t d = {0};
    cr_err_t err;
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_OK);
    /* One entry per generated token, greedy = the best alternative. */
    CHECK_EQ_INT(json_array_size(cp.logprobs), d.eval_count);
    json_t *first = json_array_get(cp.logprobs, 0);
    double lp = json_real_value(json_object_get(first, "logprob"));
    json_t *top = json_object_get(first, "top_logprobs");
    CHECK_EQ_INT(json_array_size(top), 3);
    CHECK(lp <= 0.0);
    CHECK_NEAR(lp, json_real_value(json_object_get(json_array_get(top, 0),
                                                   "logprob")),
               1e-6);
    CHECK(json_real_value(json_object_get(json_array_get(top, 1), "logprob")) <=
          lp);
    CHECK(json_is_array(json_object_get(first, "bytes")));
    json_decref(cp.logprobs);
    cr_buf_free(&cp.text);
}

static void test_templates_and_errors(void)
{
    /* A template that reads .Messages: chat renders through it. */
    rn_engine_t *e = load("{{ range .Messages }}<{{ .Role }}>{{ .Content }}"
                          "{{ end }}<assistant>",
                          128);
    if (!e)
        return;
    msg_t m;
    msg_init(&m, MSG_chat, "c");
    m.u.chat.model = "synth";
    m.u.chat.has_model = true;
    msg_message_t msgs[2] = {{0}};
    msgs[0].role = "system";
    msgs[0].content = "be brief";
    msgs[1].role = "user";
    msgs[1].content = "hi";
    m.u.chat.messages.v = msgs;
    m.u.chat.messages.n = 2;
    m.u.chat.has_messages = true;
    msg_options_t o = greedy(3);
    m.u.chat.options = &o;
    m.u.chat.has_options = true;
    capture_t cp = {0};
    cr_buf_init(&cp.text, 1 << 20);
    rn_sink_t sink = {&cp, cap_chunk, cap_canceled};
    msg_done_body_t d = {0};
    cr_err_t err;
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_OK);
    CHECK(d.prompt_eval_count > 4);
    CHECK(!d.has_context); /* chat returns no context ids */
    cr_buf_free(&cp.text);

    /* format "json": the answer is a JSON object, whatever the (random)
     * model prefers; a schema constrains the shape; a bad format is 400. */
    m.u.chat.format = "\"json\"";
    m.u.chat.has_format = true;
    msg_options_t fo = greedy(300);
    fo.temperature = 1.0;
    fo.seed = 3;
    fo.has_seed = true;
    m.u.chat.options = &fo;
    cr_buf_init(&cp.text, 1 << 20);
    cr_status_t st = rn_engine_generate(e, &m, &sink, &d, &err);
    CHECK_MSG(st == CR_OK, "format json: %s", err.msg);
    /* A random model may wander inside a long string until num_predict;
     * what it wrote is always a valid prefix, and complete when it says
     * "stop". */
    rn_grammar_t *g = NULL;
    CHECK_EQ_INT(rn_grammar_new("json", 4, NULL, &g, &err), CR_OK);
    const char *txt = cp.text.data ? cp.text.data : "";
    CHECK_MSG(g && rn_grammar_feed(g, txt, strlen(txt)), "not a JSON prefix: '%s'",
              txt);
    json_t *doc = json_loads(txt, 0, NULL);
    if (!strcmp(d.done_reason, "stop"))
        CHECK_MSG(json_is_object(doc), "not a JSON object: '%s'", txt);
    else
        CHECK_EQ_STR(d.done_reason, "length");
    rn_grammar_destroy(&g);
    json_decref(doc);
    cr_buf_free(&cp.text);
    m.u.chat.format = "{\"type\":\"object\",\"properties\":{\"n\":"
                      "{\"type\":\"integer\"}},\"required\":[\"n\"]}";
    cr_buf_init(&cp.text, 1 << 20);
    st = rn_engine_generate(e, &m, &sink, &d, &err);
    CHECK_MSG(st == CR_OK, "format schema: %s", err.msg);
    doc = json_loads(cp.text.data ? cp.text.data : "", 0, NULL);
    CHECK_MSG(json_is_integer(json_object_get(doc, "n")), "schema: '%s'",
              cp.text.data ? cp.text.data : "");
    json_decref(doc);
    cr_buf_free(&cp.text);
    m.u.chat.format = "{\"type\":\"object\",\"pattern\":\"x\"}";
    st = rn_engine_generate(e, &m, &sink, &d, &err);
    CHECK_EQ_INT(st, CR_E_INVALID);
    CHECK(strstr(err.msg, "invalid format") != NULL);
    m.u.chat.options = &o;
    m.u.chat.has_format = false;
    m.u.chat.format = NULL;

    /* A tool message with malformed tool_calls JSON is a clear 400. */
    msgs[1].tool_calls = "[{broken";
    st = rn_engine_generate(e, &m, &sink, &d, &err);
    CHECK_EQ_INT(st, CR_E_INVALID);
    CHECK(strstr(err.msg, "tool_calls") != NULL);
    msgs[1].tool_calls = NULL;
    rn_engine_destroy(&e);

    /* A template that does not parse fails the load with a clear error. */
    msg_load_body_t ld = {0};
    ld.name = "bad";
    ld.model_path = model_path;
    ld.template = "{{ if .Prompt }}unclosed";
    ld.has_template = true;
    CHECK(rn_engine_load(&ld, &e, &err) != CR_OK);
    CHECK(strstr(err.msg, "template") != NULL);
    /* A missing file too. */
    ld.template = NULL;
    ld.model_path = "/nonexistent/model.gguf";
    CHECK(rn_engine_load(&ld, &e, &err) != CR_OK);
    CHECK(e == NULL);
}

/* Tool calls on a real token stream: the synthetic model's output is forced
 * into a call by a schema, and the llama3.1-style parser (tag "{") turns it
 * into tool_calls instead of content. A template without .Tools refuses
 * tools; a template without thinking tags refuses think:true. */
static void test_tool_calls(void)
{
    rn_engine_t *e = load("{{ if .Tools }}{{ json .Tools }}{{ end }}"
                          "{{ range .Messages }}[{{ .Role }}] {{ .Content }}\n"
                          "{{ end }}[assistant] ",
                          256);
    if (!e)
        return;
    msg_t m;
    msg_init(&m, MSG_chat, "tc");
    m.u.chat.model = "synth";
    m.u.chat.has_model = true;
    msg_message_t msgs[1] = {{0}};
    msgs[0].role = "user";
    msgs[0].content = "weather in Paris?";
    m.u.chat.messages.v = msgs;
    m.u.chat.messages.n = 1;
    m.u.chat.has_messages = true;
    m.u.chat.tools = "[{\"type\":\"function\",\"function\":{\"name\":"
                     "\"get_weather\",\"parameters\":{\"type\":\"object\","
                     "\"properties\":{\"city\":{\"type\":\"string\"}}}}}]";
    m.u.chat.has_tools = true;
    m.u.chat.format = "{\"type\":\"object\",\"properties\":{\"name\":{"
                      "\"enum\":[\"get_weather\"]},\"parameters\":{\"type\":"
                      "\"object\",\"properties\":{\"city\":{\"enum\":"
                      "[\"Paris\"]}},\"required\":[\"city\"],"
                      "\"additionalProperties\":false}},\"required\":[\"name\","
                      "\"parameters\"],\"additionalProperties\":false}";
    m.u.chat.has_format = true;
    msg_options_t o = greedy(200);
    m.u.chat.options = &o;
    m.u.chat.has_options = true;
    capture_t cp = {0};
    cr_buf_init(&cp.text, 1 << 20);
    cr_buf_init(&cp.calls, 1 << 20);
    rn_sink_t sink = {&cp, cap_chunk, cap_canceled};
    msg_done_body_t d = {0};
    cr_err_t err;
    cr_status_t st = rn_engine_generate(e, &m, &sink, &d, &err);
    CHECK_MSG(st == CR_OK, "%s", err.msg);
    json_t *calls = json_loads(cp.calls.data ? cp.calls.data : "", 0, NULL);
    json_t *fn = json_object_get(json_array_get(calls, 0), "function");
    CHECK_MSG(json_is_string(json_object_get(fn, "name")) &&
                  !strcmp(json_string_value(json_object_get(fn, "name")),
                          "get_weather"),
              "calls '%s', content '%s'", cp.calls.data ? cp.calls.data : "",
              cp.text.data ? cp.text.data : "");
    json_t *city = json_object_get(json_object_get(fn, "arguments"), "city");
    CHECK(json_is_string(city) && !strcmp(json_string_value(city), "Paris"));
    CHECK(!cp.text.data || !strstr(cp.text.data, "get_weather"));
    json_decref(calls);
    cr_buf_free(&cp.text);
    cr_buf_free(&cp.calls);

    /* No thinking tags in this template: think:true is a 400. */
    m.u.chat.has_format = false;
    m.u.chat.format = NULL;
    m.u.chat.think = "true";
    m.u.chat.has_think = true;
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "\"synth\" does not support thinking");

    /* Images on a model without vision: a clear 400. */
    char *imgs[1] = {"aGVsbG8="};
    msgs[0].images.v = imgs;
    msgs[0].images.n = 1;
    m.u.chat.has_think = false;
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "\"synth\" does not support images");
    msgs[0].images.n = 0;
    msgs[0].images.v = NULL;
    rn_engine_destroy(&e);
    e = NULL;

    /* A template without .Tools: tools are a 400. */
    e = load("{{ range .Messages }}{{ .Content }}{{ end }}", 128);
    if (!e)
        return;
    m.u.chat.has_think = false;
    m.u.chat.think = NULL;
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "\"synth\" does not support tools");
    rn_engine_destroy(&e);
}

/* Thinking split on a forced stream: the prompt ends with the open tag, so
 * everything until the close tag is reasoning. */
static void test_thinking(void)
{
    rn_engine_t *e = load("{{ range .Messages }}{{ .Content }}"
                          "{{ if .Thinking }}<think>{{ .Thinking }}</think>"
                          "{{ end }}{{ end }}<think>",
                          128);
    if (!e)
        return;
    msg_t m;
    msg_init(&m, MSG_chat, "th");
    m.u.chat.model = "synth";
    m.u.chat.has_model = true;
    msg_message_t msgs[1] = {{0}};
    msgs[0].role = "user";
    msgs[0].content = "think";
    m.u.chat.messages.v = msgs;
    m.u.chat.messages.n = 1;
    m.u.chat.has_messages = true;
    msg_options_t o = greedy(12);
    m.u.chat.options = &o;
    m.u.chat.has_options = true;
    capture_t cp = {0};
    cr_buf_init(&cp.text, 1 << 20);
    cr_buf_init(&cp.thinking, 1 << 20);
    rn_sink_t sink = {&cp, cap_chunk, cap_canceled};
    msg_done_body_t d = {0};
    cr_err_t err;
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_OK);
    /* The random model never closes the tag: all of it is reasoning. */
    CHECK(cp.thinking.len > 0);
    CHECK_EQ_INT(cp.text.len, 0);
    /* think:false: no split, the same text is content. */
    m.u.chat.think = "false";
    m.u.chat.has_think = true;
    cr_buf_reset(&cp.thinking);
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_OK);
    CHECK_EQ_INT(cp.thinking.len, 0);
    CHECK(cp.text.len > 0);
    cr_buf_free(&cp.text);
    cr_buf_free(&cp.thinking);
    rn_engine_destroy(&e);
}

static void test_context_shift(void)
{
    /* A 32-token context with 100 tokens asked: generation goes on past
     * the end of the cache by shifting (or stops at EOS), never fails. */
    rn_engine_t *e = load(NULL, 32);
    if (!e)
        return;
    msg_options_t o = greedy(100);
    o.temperature = 1.0;
    o.seed = 5;
    o.has_seed = true;
    capture_t cp = {0};
    msg_done_body_t d;
    cr_err_t err;
    CHECK_EQ_INT(gen(e, "a b c d e f g h", true, &o, &cp, &d, &err), CR_OK);
    CHECK(d.eval_count <= 100);
    cr_buf_free(&cp.text);
    rn_engine_destroy(&e);
}

static void test_stories(void)
{
    const char *root = check_testdata("models/stories260K.gguf");
    if (!root) {
        printf("engine: stories260K check skipped: no shared testdata\n");
        return;
    }
    char ref_path[2048];
    snprintf(model_path, sizeof model_path, "%s/models/stories260K.gguf", root);
    snprintf(ref_path, sizeof ref_path,
             "%s/reference/stories260K-F32/ref.greedy_text.txt", root);
    FILE *f = fopen(ref_path, "r");
    if (!f)
        return;
    char ref[4096];
    size_t n = fread(ref, 1, sizeof ref - 1, f);
    fclose(f);
    ref[n] = '\0';
    rn_engine_t *e = load(NULL, 2048);
    if (!e)
        return;
    msg_options_t o = greedy(64);
    capture_t cp = {0};
    msg_done_body_t d;
    cr_err_t err;
    CHECK_EQ_INT(gen(e, "Once upon a time", true, &o, &cp, &d, &err), CR_OK);
    CHECK_EQ_INT(d.prompt_eval_count, 5); /* BOS + 4, as llama.cpp */
    CHECK_EQ_STR(cp.text.data, ref);
    cr_buf_free(&cp.text);
    rn_engine_destroy(&e);
}

/* An encoder (bert: [CLS] ... [SEP]) embedding a text longer than num_ctx
 * with truncate keeps [CLS], the head of the text that fits, and [SEP],
 * as Ollama does (it truncates and tokenizes again): the vector equals the
 * one of the text cut to that head by hand. */
static void test_embed_truncate_keeps_sep(void)
{
    char path[2048];
    snprintf(path, sizeof path, "/tmp/corral-engine-bert-%d.gguf", (int)getpid());
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.arch = "bert";
    so.seed = 5;
    so.n_kv_heads = so.n_heads;
    so.ctx = 32;
    so.pooling_type = 1; /* mean */
    cr_err_t err;
    CHECK_MSG(rn_synth_write(&so, path, &err) == CR_OK, "synth: %s", err.msg);
    char saved[2048];
    snprintf(saved, sizeof saved, "%s", model_path);
    snprintf(model_path, sizeof model_path, "%s", path);
    rn_engine_t *e = load(NULL, 16);
    snprintf(model_path, sizeof model_path, "%s", saved);
    if (e) {
        /* 14 words + [CLS] + [SEP] = 16 tokens: exactly num_ctx. */
        char *fit[1] = {"a b a b a b a b a b a b a b"};
        char *longer[1] = {"a b a b a b a b a b a b a b a b a b a b a b"};
        msg_embed_body_t req = {0};
        req.model = "synth";
        req.input.n = 1;
        req.has_input = true;
        capture_t cp = {0};
        rn_sink_t sink = {&cp, cap_chunk, cap_canceled};
        msg_embeddings_body_t out;
        req.input.v = fit;
        CHECK_EQ_INT(rn_engine_embed(e, &req, &sink, &out, &err), CR_OK);
        CHECK_EQ_INT(out.prompt_eval_count, 16);
        size_t dims = (size_t)out.dims;
        float *want = malloc(dims * sizeof *want);
        memcpy(want, out.data.data, dims * sizeof *want);
        req.input.v = longer;
        CHECK_EQ_INT(rn_engine_embed(e, &req, &sink, &out, &err), CR_OK);
        CHECK_EQ_INT(out.prompt_eval_count, 16);
        const float *got = (const float *)out.data.data;
        double diff = 0;
        for (size_t j = 0; j < dims; j++)
            diff = fmax(diff, fabs((double)got[j] - want[j]));
        /* the same tokens through the same kernels: bit-identical */
        CHECK_MSG(diff == 0, "truncated embedding differs by %g", diff);
        free(want);
        rn_engine_destroy(&e);
    }
    unlink(path);
}

/* A load message with the scheduler's GPU plan: without an accelerator
 * (none in the backend table has a device here) every layer stays on the
 * CPU, the engine says so (gpu_layers 0, no VRAM) and answers as without
 * a plan. */
static void test_gpu_plan_on_cpu(void)
{
    if (rn_backend_accel(NULL)) {
        printf("engine: gpu plan on the cpu skipped: an accelerator is present\n");
        return;
    }
    rn_engine_t *plain = load(NULL, 256);
    msg_options_t o = {0};
    o.num_ctx = 256;
    o.has_num_ctx = true;
    msg_device_split_t dev = {.index = 0, .has_index = true, .first_layer = 1,
                              .has_first_layer = true, .layers = 2, .has_layers = true};
    msg_load_body_t ld = {0};
    ld.name = "synth:latest";
    ld.has_name = true;
    ld.model_path = model_path;
    ld.has_model_path = true;
    ld.options = &o;
    ld.has_options = true;
    ld.gpu_layers = 2;
    ld.has_gpu_layers = true;
    ld.devices.v = &dev;
    ld.devices.n = 1;
    ld.has_devices = true;
    rn_engine_t *e = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_MSG(rn_engine_load(&ld, &e, &err) == CR_OK, "load: %s", err.msg);
    if (e && plain) {
        CHECK(rn_engine_gpu_layers(e) == 0);
        CHECK(rn_engine_vram_bytes(e) == 0);
        CHECK(rn_engine_size_bytes(e) == rn_engine_size_bytes(plain));
        msg_options_t g = greedy(8);
        capture_t a = {0}, b = {0};
        msg_done_body_t da, db;
        CHECK_EQ_INT(gen(plain, "hello", true, &g, &a, &da, &err), CR_OK);
        CHECK_EQ_INT(gen(e, "hello", true, &g, &b, &db, &err), CR_OK);
        CHECK(a.text.len > 0 && a.text.len == b.text.len &&
              !memcmp(a.text.data, b.text.data, a.text.len));
        cr_buf_free(&a.text);
        cr_buf_free(&b.text);
    }
    rn_engine_destroy(&e);
    rn_engine_destroy(&plain);
}

/* Chats with a synthetic model carrying chat_template (and no Go template),
 * through the Jinja renderer; returns the status and the prompt's token
 * count in *n_prompt. */
static cr_status_t jinja_chat(const char *chat_template, const char *path, int *n_prompt,
                              cr_err_t *err)
{
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.seed = 11;
    so.type = CR_TYPE_Q8_0;
    so.chat_template = chat_template;
    cr_status_t st = rn_synth_write(&so, path, err);
    if (st)
        return st;
    msg_options_t lo;
    msg_load_body_t ld;
    test_load_body(&ld, &lo, path, "", 256, 0);
    rn_engine_t *e = NULL;
    if ((st = rn_engine_load(&ld, &e, err)))
        return st;
    msg_t m;
    msg_init(&m, MSG_chat, "c");
    m.u.chat.model = "synth";
    m.u.chat.has_model = true;
    msg_message_t msgs[2] = {{0}};
    msgs[0].role = "system";
    msgs[0].content = "be brief";
    msgs[1].role = "user";
    msgs[1].content = "hi";
    m.u.chat.messages.v = msgs;
    m.u.chat.messages.n = 2;
    m.u.chat.has_messages = true;
    msg_options_t o = greedy(2);
    m.u.chat.options = &o;
    m.u.chat.has_options = true;
    capture_t cp = {0};
    cr_buf_init(&cp.text, 1 << 20);
    rn_sink_t sink = {&cp, cap_chunk, cap_canceled};
    msg_done_body_t d = {0};
    st = rn_engine_generate(e, &m, &sink, &d, err);
    *n_prompt = (int)d.prompt_eval_count;
    cr_buf_free(&cp.text);
    rn_engine_destroy(&e);
    return st;
}

/* Without a Go template the GGUF's Jinja chat template makes the prompt:
 * the same text as the equivalent Go template gives the same tokens; a
 * template's raise_exception is the request's error; a template the
 * renderer cannot parse fails the load naming the construct. */
static void test_jinja_template(void)
{
    char path[2100];
    snprintf(path, sizeof path, "%s.jinja.gguf", model_path);
    int n_go = 0, n_jinja = 0;
    cr_err_t err;
    rn_engine_t *e = load("{{ range .Messages }}<{{ .Role }}>{{ .Content }}{{ end }}<assistant>",
                          256);
    if (e) {
        capture_t cp = {0};
        cr_buf_init(&cp.text, 1 << 20);
        rn_sink_t sink = {&cp, cap_chunk, cap_canceled};
        msg_t m;
        msg_init(&m, MSG_chat, "c");
        m.u.chat.model = "synth";
        m.u.chat.has_model = true;
        msg_message_t msgs[2] = {{0}};
        msgs[0].role = "system";
        msgs[0].content = "be brief";
        msgs[1].role = "user";
        msgs[1].content = "hi";
        m.u.chat.messages.v = msgs;
        m.u.chat.messages.n = 2;
        m.u.chat.has_messages = true;
        msg_options_t o = greedy(2);
        m.u.chat.options = &o;
        m.u.chat.has_options = true;
        msg_done_body_t d = {0};
        CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_OK);
        n_go = (int)d.prompt_eval_count;
        cr_buf_free(&cp.text);
        rn_engine_destroy(&e);
    }
    CHECK_MSG(jinja_chat("{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
                         "{% if add_generation_prompt %}<assistant>{% endif %}",
                         path, &n_jinja, &err) == CR_OK, "%s", err.msg);
    CHECK(n_go > 4);
    CHECK_EQ_INT(n_jinja, n_go);
    CHECK(jinja_chat("{% if messages[0].role == 'system' %}"
                     "{{ raise_exception('no system role') }}{% endif %}",
                     path, &n_jinja, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "chat template: TemplateError: no system role") != NULL, "%s",
              err.msg);
    CHECK(jinja_chat("{% include 'x.jinja' %}", path, &n_jinja, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "chat template of") &&
              strstr(err.msg, "Encountered unknown tag 'include'"), "%s", err.msg);
    unlink(path);
}

/* A request's work is bounded by the context (issue 20, finding 2;
 * prompt/precut.h): with num_ctx 128, tools past the prompt cap (1 MiB)
 * are 413 before parsing, more system messages than num_ctx are 400,
 * truncate:false over num_ctx messages is Ollama's 400, and 5,000 short
 * messages are answered within the context. */
static void test_request_bounds(void)
{
    rn_engine_t *e = load("{{ range .Messages }}<{{ .Role }}>{{ .Content }}"
                          "{{ end }}<assistant>",
                          128);
    if (!e)
        return;
    enum { N = 5000 };
    static msg_message_t msgs[N];
    for (int i = 0; i < N; i++)
        msgs[i] = (msg_message_t){.role = i % 2 ? "assistant" : "user", .content = "hi"};
    msgs[N - 1].role = "user";
    msg_t m;
    msg_init(&m, MSG_chat, "b");
    m.u.chat.model = "synth";
    m.u.chat.has_model = true;
    m.u.chat.messages.v = msgs;
    m.u.chat.messages.n = N;
    m.u.chat.has_messages = true;
    msg_options_t o = greedy(2);
    m.u.chat.options = &o;
    m.u.chat.has_options = true;
    capture_t cp = {0};
    rn_sink_t sink = {&cp, cap_chunk, cap_canceled};
    msg_done_body_t d = {0};
    cr_err_t err;
    cr_buf_init(&cp.text, 1 << 20);
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_OK);
    CHECK_MSG(d.prompt_eval_count > 0 && d.prompt_eval_count <= 128, "prompt_eval_count %d",
              (int)d.prompt_eval_count);
    cr_buf_free(&cp.text);

    m.u.chat.truncate = false;
    m.u.chat.has_truncate = true;
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "exceeds the context length") != NULL, "%s", err.msg);
    m.u.chat.has_truncate = false;

    for (int i = 0; i < 200; i++)
        msgs[i].role = "system";
    CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "200 system messages") != NULL, "%s", err.msg);
    for (int i = 0; i < 200; i++)
        msgs[i].role = i % 2 ? "assistant" : "user";

    size_t tools_len = (1u << 20) + 100;
    char *tools = malloc(tools_len + 1);
    if (tools) {
        memset(tools, ' ', tools_len);
        memcpy(tools, "[", 1);
        memcpy(tools + tools_len - 1, "]", 1);
        tools[tools_len] = '\0';
        m.u.chat.tools = tools;
        m.u.chat.has_tools = true;
        CHECK_EQ_INT(rn_engine_generate(e, &m, &sink, &d, &err), CR_E_TOO_LARGE);
        CHECK_MSG(strstr(err.msg, "num_ctx 128") != NULL, "%s", err.msg);
        free(tools);
    }
    rn_engine_destroy(&e);
}

int main(void)
{
    snprintf(model_path, sizeof model_path, "/tmp/corral-engine-%d.gguf",
             (int)getpid());
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.seed = 11;
    so.type = CR_TYPE_Q8_0;
    cr_err_t err;
    if (rn_synth_write(&so, model_path, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return 1;
    }
    rn_engine_t *e = load(NULL, 256);
    if (e) {
        test_length_and_determinism(e);
        test_prefix_reuse(e);
        test_stop_and_cancel(e);
        test_embed(e);
        test_logprobs(e);
        rn_engine_destroy(&e);
    }
    test_templates_and_errors();
    test_request_bounds();
    test_jinja_template();
    test_tool_calls();
    test_thinking();
    test_context_shift();
    test_embed_truncate_keeps_sep();
    test_gpu_plan_on_cpu();
    unlink(model_path);
    test_stories();
    return check_finish("engine");
}
