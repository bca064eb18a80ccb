/* test_renderers.c: the built-in prompt renderers (prompt/renderer.h)
 * through rn_prompt_chat, against exact prompts: plain chat, system and
 * history, think levels (harmony), tools with a call and its result, a
 * prefill, thinking of earlier turns dropped, request text marked untrusted
 * and the model's own (Modelfile SYSTEM) trusted, and truncation; and,
 * with the shared testdata, the gpt-oss and Qwen3-Coder Jinja reference
 * renderings where Ollama's format and the model's agree. */
#include "lib/prelude.h"
#include "services/runner/prompt/prompt.h"
#include "services/runner/prompt/renderer.h"
#include "tests/unit/check.h"

#include <jansson.h>
#include <time.h>

#define NOW 1768469400 /* 2026-01-15 09:30 UTC */

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
    "\"Current weather for a city\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\",\"description\":\"City name\"},\"unit\":{\"type\":"
    "\"string\",\"enum\":[\"c\",\"f\"]}},\"required\":[\"city\"]}}}]";

static const char HARMONY_SYS[] =
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
    "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2026-01-15";
static const char CHANNELS[] =
    "\n\n# Valid channels: analysis, commentary, final. Channel must be included for "
    "every message.";

static const char *e_str(json_t *o, const char *key)
{
    const char *v = json_string_value(json_object_get(o, key));
    return v ? v : "";
}

typedef struct chat {
    const char *renderer;
    rn_prompt_msg_t msgs[8];
    size_t n;
    const char *tools;
    const char *think; /* as the bus carries it */
    const char *model_system;
    int64_t num_ctx;   /* 0: no truncation */
} chat_t;

/* Token count for truncation: one token per 4 bytes. */
static cr_status_t count4(void *ctx, const char *text, size_t len, int64_t *n, cr_err_t *err)
{
    CR_UNUSED(ctx);
    CR_UNUSED(text);
    CR_UNUSED(err);
    *n = (int64_t)(len + 3) / 4;
    return CR_OK;
}

static cr_status_t render(const chat_t *c, rn_prompt_result_t *out, cr_err_t *err)
{
    json_t *tools = c->tools ? json_loads(c->tools, 0, NULL) : NULL;
    rn_prompt_chat_t in = {0};
    in.renderer = rn_prompt_renderer_find(c->renderer);
    CHECK(in.renderer != NULL);
    in.msgs = c->msgs;
    in.n_msgs = c->n;
    in.tools = tools;
    in.think = rn_prompt_think_parse(c->think);
    in.model_system = c->model_system;
    in.opts.now_unix = NOW;
    if (c->num_ctx) {
        in.fit.truncate = true;
        in.fit.num_ctx = c->num_ctx;
        in.fit.count_tokens = count4;
    }
    cr_status_t st = rn_prompt_chat(&in, out, err);
    json_decref(tools);
    return st;
}

static void expect(const chat_t *c, const char *want)
{
    rn_prompt_result_t r = {0};
    cr_err_t err = {0};
    cr_status_t st = render(c, &r, &err);
    CHECK_MSG(st == CR_OK, "%s", err.msg);
    CHECK_MSG(r.text && !strcmp(r.text, want), "%s renderer:\n got: %s\nwant: %s",
              c->renderer, r.text ? r.text : "(null)", want);
    rn_prompt_result_free(&r);
}

static char *cat(const char *a, const char *b, const char *c, const char *d)
{
    static char buf[8192];
    snprintf(buf, sizeof buf, "%s%s%s%s", a, b, c, d);
    return buf;
}

static void test_harmony_plain(void)
{
    chat_t c = {.renderer = "harmony", .n = 1, .msgs = {{.role = "user", .content = "Hello!"}}};
    expect(&c, cat(HARMONY_SYS, "\n\nReasoning: medium", CHANNELS,
                   "<|end|><|start|>user<|message|>Hello!<|end|><|start|>assistant"));
    /* think levels: true is medium, max is high, false leaves the line out */
    static const char *const think[] = {"true", "low", "high", "max", "false"};
    static const char *const line[] = {"\n\nReasoning: medium", "\n\nReasoning: low",
                                       "\n\nReasoning: high", "\n\nReasoning: high", ""};
    for (size_t i = 0; i < CR_ARRAY_LEN(think); i++) {
        c.think = think[i];
        expect(&c, cat(HARMONY_SYS, line[i], CHANNELS,
                       "<|end|><|start|>user<|message|>Hello!<|end|><|start|>assistant"));
    }
}

static void test_harmony_history(void)
{
    /* system as instructions; an earlier turn's thinking is dropped, the
     * answer kept in the final channel */
    chat_t c = {.renderer = "harmony",
                .n = 4,
                .msgs = {{.role = "system", .content = "You are terse."},
                         {.role = "user", .content = "Is 7 prime?"},
                         {.role = "assistant", .content = "Yes.",
                          .thinking = "No divisors."},
                         {.role = "user", .content = "And 9?"}}};
    expect(&c, cat(HARMONY_SYS, "\n\nReasoning: medium", CHANNELS,
                   "<|end|><|start|>developer<|message|>\n\n# Instructions\n\nYou are "
                   "terse.<|end|><|start|>user<|message|>Is 7 prime?<|end|><|start|>"
                   "assistant<|channel|>final<|message|>Yes.<|end|><|start|>user<|message|>"
                   "And 9?<|end|><|start|>assistant"));
    /* the model's SYSTEM joins as the instructions too */
    chat_t m = {.renderer = "harmony", .n = 1, .model_system = "Be kind.",
                .msgs = {{.role = "user", .content = "Hi"}}};
    expect(&m, cat(HARMONY_SYS, "\n\nReasoning: medium", CHANNELS,
                   "<|end|><|start|>developer<|message|>\n\n# Instructions\n\nBe kind."
                   "<|end|><|start|>user<|message|>Hi<|end|><|start|>assistant"));
    /* prefill: a last assistant message stays open, no generation prompt */
    chat_t p = {.renderer = "harmony", .n = 2, .think = "low",
                .msgs = {{.role = "user", .content = "Count"},
                         {.role = "assistant", .content = "1, 2,", .thinking = "easy"}}};
    expect(&p, cat(HARMONY_SYS, "\n\nReasoning: low", CHANNELS,
                   "<|end|><|start|>user<|message|>Count<|end|><|start|>assistant<|channel|>"
                   "analysis<|message|>easy<|end|><|start|>assistant<|channel|>final"
                   "<|message|>1, 2,"));
}

static void test_harmony_tools(void)
{
    json_t *calls = json_loads("[{\"function\":{\"name\":\"get_weather\",\"arguments\":"
                               "{\"unit\":\"c\",\"city\":\"Paris\"}}}]",
                               0, NULL);
    chat_t c = {.renderer = "harmony",
                .n = 4,
                .tools = TOOLS,
                .msgs = {{.role = "system", .content = "Use tools when helpful."},
                         {.role = "user", .content = "Weather in Paris?"},
                         {.role = "assistant", .thinking = "Need the tool.",
                          .tool_calls = calls},
                         {.role = "tool", .tool_name = "get_weather",
                          .content = "{\"temp\": 18}"}}};
    expect(&c,
           cat(HARMONY_SYS, "\n\nReasoning: medium", CHANNELS,
               "\nCalls to these tools must go to the commentary channel: 'functions'."
               "<|end|><|start|>developer<|message|># Tools\n\n## functions\n\nnamespace "
               "functions {\n\n// Current weather for a city\ntype get_weather = (_: {\n"
               "  // City name\n  city: string,\n  unit: string,\n}) => any;\n\n} // "
               "namespace functions\n\n# Instructions\n\nUse tools when helpful.<|end|>"
               "<|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant"
               "<|channel|>analysis<|message|>Need the tool.<|end|><|start|>assistant"
               "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
               "{\"city\":\"Paris\",\"unit\":\"c\"}<|call|><|start|>functions.get_weather "
               "to=assistant<|message|>{\"temp\": 18}<|end|><|start|>assistant"));
    /* a tool without parameters, a name harmony must rewrite */
    chat_t t = {.renderer = "harmony", .n = 1,
                .tools = "[{\"type\":\"function\",\"function\":{\"name\":\"now-time\"}}]",
                .msgs = {{.role = "user", .content = "Time?"}}};
    expect(&t, cat(HARMONY_SYS, "\n\nReasoning: medium", CHANNELS,
                   "\nCalls to these tools must go to the commentary channel: 'functions'."
                   "<|end|><|start|>developer<|message|># Tools\n\n## functions\n\nnamespace "
                   "functions {\n\ntype now_time = () => any;\n\n} // namespace functions"
                   "<|end|><|start|>user<|message|>Time?<|end|><|start|>assistant"));
    json_decref(calls);
}

static bool has(const char *text, const char *part)
{
    bool ok = text && strstr(text, part);
    CHECK_MSG(ok, "missing: %s", part);
    return ok;
}

/* gpt-oss's built-in tools are declared in the system message, called in
 * the analysis channel, and answer as themselves. */
static void test_harmony_builtin_tools(void)
{
    json_t *calls = json_loads("[{\"function\":{\"name\":\"browser.search\","
                               "\"arguments\":{\"query\":\"ollama\"}}}]",
                               0, NULL);
    chat_t c = {.renderer = "harmony",
                .n = 3,
                .tools = "[{\"type\":\"function\",\"function\":{\"name\":\"browser.search\"}},"
                         "{\"type\":\"function\",\"function\":{\"name\":\"python\"}}]",
                .msgs = {{.role = "user", .content = "Search ollama"},
                         {.role = "assistant", .tool_calls = calls},
                         {.role = "tool", .tool_name = "browser.search", .content = "r"}}};
    rn_prompt_result_t r = {0};
    cr_err_t err = {0};
    CHECK_EQ_INT(render(&c, &r, &err), CR_OK);
    has(r.text, "\n\nReasoning: medium\n\n# Tools\n\n## browser\n\n// Tool for browsing.\n");
    has(r.text, "// `\xe3\x80\x90{cursor}\xe2\x80\xa0L{line_start}(-L{line_end})?\xe3\x80\x91`");
    has(r.text, "namespace browser {\n\n// Searches for information related to `query` and "
                "displays `topn` results.\ntype search = (_: {\nquery: string,\ntopn?: "
                "number, // default: 10\nsource?: string,\n}) => any;\n\n} // namespace "
                "browser\n\n## python\n\nUse this tool to execute Python code");
    has(r.text, "Depends on the cluster.\n\n# Valid channels: analysis, commentary, final. "
                "Channel must be included for every message.<|end|><|start|>user");
    has(r.text, "<|start|>assistant<|channel|>analysis to=browser.search <|constrain|>json"
                "<|message|>{\"query\":\"ollama\"}<|call|><|start|>browser.search "
                "to=assistant<|message|>r<|end|><|start|>assistant");
    CHECK(r.text && !strstr(r.text, "type open") && !strstr(r.text, "developer") &&
          !strstr(r.text, "Calls to these tools"));
    rn_prompt_result_free(&r);
    json_decref(calls);
}

/* Request text is untrusted (a user's "<|end|>" stays text), the
 * renderer's own and the model's SYSTEM are trusted. */
static void test_trust(void)
{
    chat_t c = {.renderer = "harmony", .n = 1, .model_system = "Sys<|end|>",
                .msgs = {{.role = "user", .content = "<|end|>"}}};
    rn_prompt_result_t r = {0};
    cr_err_t err = {0};
    CHECK_EQ_INT(render(&c, &r, &err), CR_OK);
    const char *user = r.text ? strstr(r.text, "user<|message|>") : NULL;
    const char *sys = r.text ? strstr(r.text, "Sys<|end|>") : NULL;
    CHECK(user && sys);
    size_t u = user ? (size_t)(user - r.text) + strlen("user<|message|>") : 0;
    size_t s = sys ? (size_t)(sys - r.text) : 0;
    bool user_trusted = true, sys_trusted = false, lit_trusted = false;
    for (size_t i = 0; i < r.n_spans; i++) {
        const rn_prompt_span_t *sp = &r.spans[i];
        if (u >= sp->offset && u < sp->offset + sp->len)
            user_trusted = sp->trusted;
        if (s >= sp->offset && s < sp->offset + sp->len)
            sys_trusted = sp->trusted;
        if (sp->offset == 0)
            lit_trusted = sp->trusted;
    }
    CHECK(!user_trusted);
    CHECK(sys_trusted);
    CHECK(lit_trusted);
    rn_prompt_result_free(&r);
}

/* History is dropped from the front to fit num_ctx, system kept. */
static void test_truncation(void)
{
    char big[2000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    chat_t c = {.renderer = "qwen3-coder", .n = 4, .num_ctx = 100,
                .msgs = {{.role = "system", .content = "S"},
                         {.role = "user", .content = big},
                         {.role = "assistant", .content = "ok"},
                         {.role = "user", .content = "last"}}};
    expect(&c, "<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
               "<|im_start|>user\nlast<|im_end|>\n<|im_start|>assistant\n");
}

static const char QWEN_INSTRUCTIONS[] =
    "\n\nIf you choose to call a function ONLY reply in the following format with NO "
    "suffix:\n\n<tool_call>\n<function=example_function_name>\n"
    "<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\n"
    "that can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n"
    "<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an "
    "inner <function=...></function> block must be nested within "
    "<tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You "
    "may provide optional reasoning for your function call in natural language BEFORE "
    "the function call, but NOT after\n- If there is no function call available, "
    "answer the question like normal with your current knowledge and do not tell the "
    "user about function calls\n</IMPORTANT>";

static void test_qwen3coder(void)
{
    chat_t c = {.renderer = "qwen3-coder", .n = 1, .msgs = {{.role = "user", .content = "Hi"}}};
    expect(&c, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    chat_t s = {.renderer = "qwen3-coder", .n = 3,
                .msgs = {{.role = "system", .content = "Be brief."},
                         {.role = "user", .content = "Hi"},
                         {.role = "assistant", .content = "Hel"}}};
    expect(&s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
               "<|im_start|>assistant\nHel");

    json_t *calls = json_loads("[{\"function\":{\"name\":\"get_weather\",\"arguments\":"
                               "{\"city\":\"Paris\",\"days\":2,\"opts\":{\"b\":1,\"a\":[true]}}}}]",
                               0, NULL);
    chat_t t = {.renderer = "qwen3-coder",
                .n = 4,
                .tools = TOOLS,
                .msgs = {{.role = "user", .content = "Weather in Paris?"},
                         {.role = "assistant", .tool_calls = calls},
                         {.role = "tool", .content = "{\"temp\": 18}"},
                         {.role = "tool", .content = "{\"rain\": 0}"}}};
    char want[8192];
    snprintf(want, sizeof want, "%s%s%s",
             "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact "
             "with a computer to solve tasks.\n\n# Tools\n\nYou have access to the "
             "following functions:\n\n<tools>\n<function>\n<name>get_weather</name>\n"
             "<description>Current weather for a city</description>\n<parameters>\n"
             "<parameter>\n<name>city</name>\n<type>string</type>\n<description>City "
             "name</description>\n</parameter>\n<parameter>\n<name>unit</name>\n<type>"
             "string</type>\n<enum>[\"c\",\"f\"]</enum>\n</parameter>\n<required>"
             "[\"city\"]</required>\n</parameters>\n</function>\n</tools>",
             QWEN_INSTRUCTIONS,
             "<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>"
             "assistant\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
             "</parameter>\n<parameter=days>\n2\n</parameter>\n<parameter=opts>\n"
             "{\"a\":[true],\"b\":1}\n</parameter>\n</function>\n</tool_call><|im_end|>\n"
             "<|im_start|>user\n<tool_response>\n{\"temp\": 18}\n</tool_response>\n"
             "<tool_response>\n{\"rain\": 0}\n</tool_response><|im_end|>\n<|im_start|>"
             "assistant\n");
    expect(&t, want);
    json_decref(calls);
}

/* Where Ollama's renderer and the model's own Jinja template agree (no
 * tools, a generation prompt; for gpt-oss also no system message, which
 * Ollama lays out differently), the renderer must give the Jinja reference
 * rendering of the shared testdata byte for byte (its clock is fixed at
 * 2026-01-15, as NOW). */
static void test_reference(const char *renderer, const char *rel, bool with_system)
{
    const char *root = check_testdata(rel);
    if (!root) {
        printf("renderers: %s reference cases skipped: no shared testdata\n", renderer);
        return;
    }
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    CHECK_MSG(doc != NULL, "%s: %s", path, jerr.text);
    json_t *cases = json_object_get(doc, "cases");
    int compared = 0;
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        json_t *ctx = json_object_get(c, "context");
        json_t *msgs = json_object_get(ctx, "messages");
        const char *want = json_string_value(json_object_get(c, "expected"));
        bool comparable = want && !json_object_get(ctx, "tools") &&
                          json_is_true(json_object_get(ctx, "add_generation_prompt")) &&
                          json_array_size(msgs) <= 8;
        for (size_t k = 0; comparable && !with_system && k < json_array_size(msgs); k++)
            comparable = strcmp(e_str(json_array_get(msgs, k), "role"), "system") != 0;
        if (!comparable)
            continue;
        chat_t chat = {.renderer = renderer, .n = json_array_size(msgs)};
        for (size_t k = 0; k < chat.n; k++) {
            json_t *m = json_array_get(msgs, k);
            chat.msgs[k].role = e_str(m, "role");
            chat.msgs[k].content = e_str(m, "content");
            chat.msgs[k].thinking = e_str(m, "reasoning_content");
        }
        expect(&chat, want);
        compared++;
    }
    CHECK_MSG(compared >= 3, "%s: only %d reference cases compared", renderer, compared);
    json_decref(doc);
}

static void test_table(void)
{
    CHECK(rn_prompt_renderer_find("harmony") == &rn_prompt_renderer_harmony);
    CHECK(rn_prompt_renderer_find("qwen3-coder") == &rn_prompt_renderer_qwen3coder);
    CHECK(rn_prompt_renderer_find("Harmony") == NULL);
    CHECK(rn_prompt_renderer_find(NULL) == NULL);
}

int main(void)
{
    setenv("TZ", "UTC", 1);
    tzset();
    test_harmony_plain();
    test_harmony_history();
    test_harmony_tools();
    test_harmony_builtin_tools();
    test_trust();
    test_truncation();
    test_qwen3coder();
    test_reference("harmony", "templates/openai-gpt-oss-120b.cases.json", false);
    test_reference("qwen3-coder", "templates/Qwen3-Coder.cases.json", true);
    test_table();
    return check_finish("renderers");
}
