/* test_engine_script.c: tool calls on real token streams.
 *
 * The scripted sampler (CORRAL_TEST_SCRIPT, testhooks.h) forces a synthetic
 * model's answers; the real tokenizer splits them into tokens, and the
 * engine's whole output path (detokenizer, stop matcher, thinking and tool
 * parsers) turns them into chunks. For each template style issue 6 names
 * (llama3.1 bare JSON, qwen2.5 hermes <tool_call>, mistral [TOOL_CALLS])
 * the first answer is a tool call, checked for name, arguments object,
 * function.index, id and the content around it; the second request feeds the
 * call and a `tool` result back through the template (checked in the
 * rendered prompt and in the prompt the engine evaluated) and gets the
 * scripted final answer as plain content. Built-in RENDERER/PARSER in the
 * engine (qwen3-coder's prompt and calls, a harmony call that fails, unknown
 * names, control tokens' text kept for a parser). Also: the script
 * module's own contract (answers in turn, round trip, bad files). */
#include "lib/prelude.h"

#include <stdlib.h>
#include <unistd.h>

#include <jansson.h>

#include "lib/buf.h"
#include "lib/gguf.h"
#include "services/runner/engine.h"
#include "services/runner/prompt/prompt.h"
#include "services/runner/prompt/renderer.h"
#include "services/runner/testhooks.h"
#include "tools/synth/synth.h"
#include "services/runner/template/template.h"
#include "services/runner/text/tokenizer.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"
#include "tests/unit/tool_templates.h"

static char model_path[256];
static char script_path[256];

typedef struct capture {
    cr_buf_t text;
    json_t *calls; /* every tool_calls entry, in order */
    int chunks;
    int call_chunks;
} capture_t;

static bool cap_chunk(void *ctx, const msg_chunk_body_t *c)
{
    capture_t *cp = ctx;
    cp->chunks++;
    if (c->response)
        cr_buf_puts(&cp->text, c->response);
    if (c->tool_calls) {
        cp->call_chunks++;
        json_t *arr = json_loads(c->tool_calls, 0, NULL);
        CHECK_MSG(json_is_array(arr), "tool_calls '%s'", c->tool_calls);
        if (json_is_array(arr))
            json_array_extend(cp->calls, arr);
        json_decref(arr);
    }
    return true;
}

static bool cap_canceled(void *ctx)
{
    (void)ctx;
    return false;
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

static rn_engine_t *load(const char *tmpl)
{
    return test_engine_load(model_path, tmpl, 2048, 0);
}

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":"
    "\"string\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"zone\":{\"type\":"
    "\"string\"}}}}}]";

/* Runs one chat request over msgs; fills cp and d. */
static cr_status_t chat(rn_engine_t *e, msg_message_t *msgs, size_t n,
                        capture_t *cp, msg_done_body_t *d, cr_err_t *err)
{
    msg_t m;
    msg_init(&m, MSG_chat, "sc");
    m.u.chat.model = "synth";
    m.u.chat.has_model = true;
    m.u.chat.messages.v = msgs;
    m.u.chat.messages.n = n;
    m.u.chat.has_messages = true;
    m.u.chat.tools = (char *)tools_json;
    m.u.chat.has_tools = true;
    msg_options_t o = {0};
    o.num_predict = 400;
    o.has_num_predict = true;
    m.u.chat.options = &o;
    m.u.chat.has_options = true;
    cr_buf_init(&cp->text, 1 << 20);
    cp->calls = json_array();
    cp->chunks = cp->call_chunks = 0;
    rn_sink_t sink = {cp, cap_chunk, cap_canceled};
    memset(d, 0, sizeof *d);
    return rn_engine_generate(e, &m, &sink, d, err);
}

static void capture_free(capture_t *cp)
{
    cr_buf_free(&cp->text);
    json_decref(cp->calls);
    cp->calls = NULL;
}

/* call i: function name and arguments (compared as JSON), index, id. */
static void check_call(json_t *calls, size_t i, const char *name,
                       const char *args_json)
{
    json_t *c = json_array_get(calls, i);
    json_t *fn = json_object_get(c, "function");
    const char *got = json_string_value(json_object_get(fn, "name"));
    CHECK_MSG(got && !strcmp(got, name), "call %zu name '%s', want %s", i,
              got ? got : "(none)", name);
    json_t *want = json_loads(args_json, 0, NULL);
    json_t *args = json_object_get(fn, "arguments");
    CHECK_MSG(json_is_object(args) && json_equal(args, want),
              "call %zu arguments differ from %s", i, args_json);
    json_decref(want);
    json_t *idx = json_object_get(fn, "index");
    CHECK_MSG(json_is_integer(idx) && json_integer_value(idx) == (json_int_t)i,
              "call %zu index", i);
    const char *id = json_string_value(json_object_get(c, "id"));
    bool id_ok = id && strlen(id) == 13 && !strncmp(id, "call_", 5);
    for (size_t k = 5; id_ok && k < 13; k++)
        id_ok = (id[k] >= 'a' && id[k] <= 'z') || (id[k] >= '0' && id[k] <= '9');
    CHECK_MSG(id_ok, "call %zu id '%s'", i, id ? id : "(none)");
}

/* Counts the tokens the engine should evaluate for text (BOS as the
 * vocabulary asks; the synthetic vocabulary has no control-token texts the
 * templates use, so trust spans do not change the count). */
static int64_t count_tokens(rn_engine_t *e, const char *text)
{
    int32_t *ids = NULL;
    size_t n = 0;
    cr_err_t err;
    CHECK_EQ_INT(rn_engine_tokenize(e, text, &ids, &n, &err), CR_OK);
    free(ids);
    return (int64_t)n + 1; /* BOS */
}

/* Decode steps the first answer of the script file takes: its tokens and
 * the end token, counted through the script module itself. */
static int64_t answer_steps(void)
{
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    rn_script_t *sc = NULL;
    cr_err_t err;
    int64_t n = -1;
    if (!cr_gguf_open(model_path, &g, &err) &&
        !rn_tokenizer_load(g, &tok, &err) &&
        !rn_script_load(script_path, tok, &sc, &err)) {
        rn_script_cursor_t cur;
        rn_script_begin(sc, &cur);
        n = 1;
        while (rn_script_next(sc, &cur) != rn_tokenizer_eos(tok) && n < 100000)
            n++;
    }
    rn_script_destroy(&sc);
    rn_tokenizer_destroy(&tok);
    cr_gguf_close(&g);
    return n;
}

typedef struct style {
    const char *name;
    const char *tmpl;
    const char *answer;      /* the scripted tool-call answer */
    const char *content;     /* what of it is content */
    int n_calls;
    const char *in_prompt;   /* the tool result as the template renders it */
} style_t;

static const char final_answer[] = "It is 18 degrees in Paris at noon.";

static void run_style(const style_t *s)
{
    char script[1024];
    snprintf(script, sizeof script, "%s\n---\n%s\n", s->answer, final_answer);
    write_file(script_path, script);
    setenv("CORRAL_TEST_SCRIPT", script_path, 1);
    rn_engine_t *e = load(s->tmpl);
    unsetenv("CORRAL_TEST_SCRIPT");
    if (!e)
        return;

    /* 1: the call. */
    msg_message_t msgs[3] = {{0}};
    msgs[0].role = "user";
    msgs[0].content = "Weather and time in Paris?";
    capture_t cp = {0};
    msg_done_body_t d;
    cr_err_t err;
    cr_status_t st = chat(e, msgs, 1, &cp, &d, &err);
    CHECK_MSG(st == CR_OK, "%s: %s", s->name, err.msg);
    CHECK_MSG(!strcmp(d.done_reason, "stop"), "%s: done_reason %s", s->name,
              d.done_reason);
    /* Token by token: one step per scripted token, then the end token. */
    CHECK_EQ_INT(d.eval_count, answer_steps());
    CHECK_MSG((int)json_array_size(cp.calls) == s->n_calls,
              "%s: %zu calls, content '%s'", s->name, json_array_size(cp.calls),
              cp.text.data ? cp.text.data : "");
    check_call(cp.calls, 0, "get_weather", "{\"city\":\"Paris\"}");
    if (s->n_calls > 1)
        check_call(cp.calls, 1, "get_time", "{\"zone\":\"CET\"}");
    const char *content = cp.text.data ? cp.text.data : "";
    CHECK_MSG(!strcmp(content, s->content), "%s: content '%s', want '%s'",
              s->name, content, s->content);
    char *calls_text = json_dumps(cp.calls, JSON_COMPACT);
    capture_free(&cp);

    /* 2: the call and its result fed back; the answer is plain content. */
    msgs[1].role = "assistant";
    msgs[1].tool_calls = calls_text;
    msgs[2].role = "tool";
    msgs[2].content = "{\"temp\": 18}";
    msgs[2].tool_name = "get_weather";
    st = chat(e, msgs, 3, &cp, &d, &err);
    CHECK_MSG(st == CR_OK, "%s: %s", s->name, err.msg);
    CHECK_MSG(cp.text.data && !strcmp(cp.text.data, final_answer),
              "%s: final '%s'", s->name, cp.text.data ? cp.text.data : "");
    CHECK_EQ_INT((int)json_array_size(cp.calls), 0);
    capture_free(&cp);

    /* The prompt the engine evaluated is the template's rendering of the
     * three messages, tool result included. */
    rn_tmpl_t *t = NULL;
    CHECK_EQ_INT(rn_tmpl_parse(s->tmpl, strlen(s->tmpl), &t, &err), CR_OK);
    json_t *tools = json_loads(tools_json, 0, NULL);
    json_t *tc = json_loads(calls_text, 0, NULL);
    rn_prompt_msg_t pm[3] = {{0}};
    pm[0].role = "user";
    pm[0].content = msgs[0].content;
    pm[1].role = "assistant";
    pm[1].tool_calls = tc;
    pm[2].role = "tool";
    pm[2].content = msgs[2].content;
    pm[2].tool_name = "get_weather";
    rn_prompt_chat_t in = {0};
    in.tmpl = t;
    in.msgs = pm;
    in.n_msgs = 3;
    in.tools = tools;
    rn_prompt_result_t res = {0};
    CHECK_EQ_INT(rn_prompt_chat(&in, &res, &err), CR_OK);
    CHECK_MSG(res.text && strstr(res.text, s->in_prompt),
              "%s: prompt lacks the tool result:\n%s", s->name,
              res.text ? res.text : "");
    CHECK_MSG(res.text && strstr(res.text, "get_weather"),
              "%s: prompt lacks the call", s->name);
    if (res.text)
        CHECK_EQ_INT(d.prompt_eval_count, count_tokens(e, res.text));
    rn_prompt_result_free(&res);
    json_decref(tc);
    json_decref(tools);
    rn_tmpl_destroy(&t);
    free(calls_text);
    rn_engine_destroy(&e);
}

static void test_styles(void)
{
    static const style_t styles[] = {
        {"llama3.1", llama31_tmpl,
         "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
         "", 1, "ipython<|end_header_id|>\n\n{\"temp\": 18}<|eot_id|>"},
        {"qwen2.5", qwen25_tmpl,
         "Checking both.\n<tool_call>\n{\"name\": \"get_weather\", "
         "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
         "{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n"
         "</tool_call>",
         "Checking both.\n", 2,
         "<tool_response>\n{\"temp\": 18}\n</tool_response>"},
        {"mistral", mistral_tmpl,
         "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
         "{\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": "
         "{\"zone\": \"CET\"}}]",
         "", 2, "[TOOL_RESULTS] {\"content\": {\"temp\": 18}} [/TOOL_RESULTS]"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(styles); i++)
        run_style(&styles[i]);
}

/* An engine whose load names a built-in renderer and parser. */
static rn_engine_t *load_formats(const char *renderer, const char *parser,
                                 cr_status_t *st, cr_err_t *err)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, model_path, NULL, 2048, 0);
    ld.renderer = (char *)renderer;
    ld.has_renderer = renderer != NULL;
    ld.parser = (char *)parser;
    ld.has_parser = parser != NULL;
    rn_engine_t *e = NULL;
    *st = rn_engine_load(&ld, &e, err);
    return e;
}

/* RENDERER/PARSER qwen3-coder: the engine evaluates the renderer's prompt
 * (not the template's), the parser splits the scripted call with its value
 * typed; harmony: a call whose arguments are not JSON fails the request
 * with Ollama's message; unknown names fail the load. */
static void test_builtin_formats(void)
{
    static const char call[] =
        "Checking.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
        "</parameter>\n</function>\n</tool_call>";
    char script[1024];
    snprintf(script, sizeof script, "%s\n---\n%s\n", call, final_answer);
    write_file(script_path, script);
    setenv("CORRAL_TEST_SCRIPT", script_path, 1);
    cr_status_t st;
    cr_err_t err;
    rn_engine_t *e = load_formats("qwen3-coder", "qwen3-coder", &st, &err);
    unsetenv("CORRAL_TEST_SCRIPT");
    CHECK_MSG(st == CR_OK, "%s", err.msg);
    if (e) {
        msg_message_t msgs[3] = {{0}};
        msgs[0].role = "user";
        msgs[0].content = "Weather in Paris?";
        capture_t cp = {0};
        msg_done_body_t d;
        st = chat(e, msgs, 1, &cp, &d, &err);
        CHECK_MSG(st == CR_OK, "%s", err.msg);
        CHECK_EQ_INT((int)json_array_size(cp.calls), 1);
        check_call(cp.calls, 0, "get_weather", "{\"city\":\"Paris\"}");
        CHECK_EQ_STR(cp.text.data ? cp.text.data : "", "Checking.");
        capture_free(&cp);

        /* the prompt evaluated is the renderer's */
        rn_prompt_msg_t pm = {.role = "user", .content = msgs[0].content};
        json_t *tools = json_loads(tools_json, 0, NULL);
        rn_prompt_chat_t in = {0};
        in.renderer = rn_prompt_renderer_find("qwen3-coder");
        in.msgs = &pm;
        in.n_msgs = 1;
        in.tools = tools;
        rn_prompt_result_t res = {0};
        CHECK_EQ_INT(rn_prompt_chat(&in, &res, &err), CR_OK);
        CHECK(res.text && strstr(res.text, "<function>\n<name>get_weather</name>"));
        if (res.text)
            CHECK_EQ_INT(d.prompt_eval_count, count_tokens(e, res.text));
        rn_prompt_result_free(&res);
        json_decref(tools);

        msgs[1].role = "assistant";
        msgs[1].tool_calls = "[{\"function\":{\"name\":\"get_weather\",\"arguments\":"
                             "{\"city\":\"Paris\"}}}]";
        msgs[2].role = "tool";
        msgs[2].content = "{\"temp\": 18}";
        st = chat(e, msgs, 3, &cp, &d, &err);
        CHECK_MSG(st == CR_OK, "%s", err.msg);
        CHECK_EQ_STR(cp.text.data ? cp.text.data : "", final_answer);
        CHECK_EQ_INT((int)json_array_size(cp.calls), 0);
        capture_free(&cp);
        rn_engine_destroy(&e);
    }

    write_file(script_path, "<|channel|>commentary to=functions.get_weather<|message|>"
                            "{\"city\": Paris}<|call|>\n");
    setenv("CORRAL_TEST_SCRIPT", script_path, 1);
    e = load_formats("harmony", "harmony", &st, &err);
    unsetenv("CORRAL_TEST_SCRIPT");
    CHECK_MSG(st == CR_OK, "%s", err.msg);
    if (e) {
        msg_message_t m = {.role = "user", .content = "Weather?"};
        capture_t cp = {0};
        msg_done_body_t d;
        st = chat(e, &m, 1, &cp, &d, &err);
        CHECK_EQ_INT(st, CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "error parsing tool call: raw='{\"city\": Paris}'"),
                  "%s", err.msg);
        CHECK_EQ_INT((int)json_array_size(cp.calls), 0);
        capture_free(&cp);
        rn_engine_destroy(&e);
    }

    e = load_formats("gpt-oss", NULL, &st, &err);
    CHECK(e == NULL);
    CHECK_EQ_INT(st, CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "unknown renderer \"gpt-oss\""), "%s", err.msg);
    e = load_formats(NULL, "nope", &st, &err);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.msg, "unknown parser \"nope\""), "%s", err.msg);
}

/* A model with a built-in parser gets control tokens' text in its answer
 * (gpt-oss's <|channel|>... are control tokens; the parser must see them);
 * without one they print as nothing, as before. Needs a real vocabulary
 * with control tokens: Llama 3's, from the shared testdata. */
static void test_control_text(void)
{
    const char *root = check_testdata("vocab/ggml-vocab-llama-bpe.gguf");
    if (!root) {
        printf("engine_script: control-token text skipped: no shared testdata\n");
        return;
    }
    char vocab[1200], path[300];
    snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-llama-bpe.gguf", root);
    snprintf(path, sizeof path, "%s.bpe", model_path);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.seed = 9;
    so.ctx = 2048;
    so.vocab_from = vocab;
    cr_err_t err;
    CHECK_MSG(rn_synth_write(&so, path, &err) == CR_OK, "%s", err.msg);
    write_file(script_path, "Hi<|start_header_id|>there\n");
    static const char *const parsers[] = {"qwen3-coder", NULL};
    static const char *const want[] = {"Hi<|start_header_id|>there", "Hithere"};
    for (size_t i = 0; i < 2; i++) {
        msg_options_t o;
        msg_load_body_t ld;
        /* a template with tools: chat() offers some */
        test_load_body(&ld, &o, path, qwen25_tmpl, 2048, 0);
        ld.parser = (char *)parsers[i];
        ld.has_parser = parsers[i] != NULL;
        setenv("CORRAL_TEST_SCRIPT", script_path, 1);
        rn_engine_t *e = NULL;
        cr_status_t st = rn_engine_load(&ld, &e, &err);
        unsetenv("CORRAL_TEST_SCRIPT");
        CHECK_MSG(st == CR_OK, "%s", err.msg);
        if (!e)
            continue;
        msg_message_t m = {.role = "user", .content = "Hello"};
        capture_t cp = {0};
        msg_done_body_t d;
        CHECK_EQ_INT(chat(e, &m, 1, &cp, &d, &err), CR_OK);
        CHECK_EQ_STR(cp.text.data ? cp.text.data : "", want[i]);
        capture_free(&cp);
        rn_engine_destroy(&e);
    }
    unlink(path);
}

/* The module itself: answers in turn, exact bytes, the end token, and
 * clear errors for a missing file. */
static void test_script_module(void)
{
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    cr_err_t err;
    CHECK_EQ_INT(cr_gguf_open(model_path, &g, &err), CR_OK);
    if (!g)
        return;
    CHECK_EQ_INT(rn_tokenizer_load(g, &tok, &err), CR_OK);
    if (!tok) {
        cr_gguf_close(&g);
        return;
    }
    write_file(script_path, "<a> b\n---\nHello there!\n---\n\n");
    rn_script_t *s = NULL;
    CHECK_EQ_INT(rn_script_load(script_path, tok, &s, &err), CR_OK);
    if (s) {
        CHECK_EQ_INT(rn_script_answers(s), 3);
        static const char *const want[] = {"<a> b", "Hello there!", "", "<a> b"};
        for (int k = 0; k < 4; k++) {
            rn_script_cursor_t cur;
            rn_script_begin(s, &cur);
            cr_buf_t b;
            cr_buf_init(&b, 4096);
            int32_t id;
            int guard = 0;
            while ((id = rn_script_next(s, &cur)) != rn_tokenizer_eos(tok) &&
                   guard++ < 100)
                CHECK_EQ_INT(rn_detokenize(tok, &id, 1, 0, &b, &err), CR_OK);
            CHECK_EQ_STR(b.data ? b.data : "", want[k]);
            /* spent: the end token again */
            CHECK_EQ_INT(rn_script_next(s, &cur), rn_tokenizer_eos(tok));
            cr_buf_free(&b);
        }
        rn_script_destroy(&s);
    }
    CHECK_EQ_INT(rn_script_load("/nonexistent/script", tok, &s, &err), CR_E_IO);
    CHECK(s == NULL);
    /* No env var: no script. */
    unsetenv("CORRAL_TEST_SCRIPT");
    CHECK_EQ_INT(rn_script_from_env(tok, &s, &err), CR_OK);
    CHECK(s == NULL);
    rn_tokenizer_destroy(&tok);
    cr_gguf_close(&g);
}

int main(void)
{
    snprintf(model_path, sizeof model_path, "/tmp/corral-script-%d.gguf",
             (int)getpid());
    snprintf(script_path, sizeof script_path, "/tmp/corral-script-%d.txt",
             (int)getpid());
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.seed = 5;
    so.ctx = 2048; /* the byte-level prompts of these templates are long */
    cr_err_t err;
    if (rn_synth_write(&so, model_path, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return 1;
    }
    test_script_module();
    test_styles();
    test_builtin_formats();
    test_control_text();
    unlink(model_path);
    unlink(script_path);
    return check_finish("engine_script");
}
