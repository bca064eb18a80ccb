/* test_parsers.c: the built-in output parsers (output/parser.h).
 *
 * harmony: analysis -> thinking, final -> content, commentary to=functions.X
 * -> a call (arguments parsed, harmony name mapped back to the request's),
 * the model starting with <|channel|> (the prompt opened the turn),
 * <|end|><|start|>assistant between messages, <|call|>/<|return|> ending a
 * message, prefills, malformed arguments failing with Ollama's message.
 * qwen3-coder: content around <tool_call> blocks, parameter values typed by
 * the tool's schema, several calls, malformed calls, an unclosed call at
 * the end. Every case is fed whole, byte by byte and at every two-piece cut,
 * and must give the same split each time with no marker text in content or
 * thinking. Also: the parser table, stop strings, tool names in harmony. */
#include "lib/prelude.h"
#include "lib/chat_formats.h"
#include "services/runner/output/parser.h"
#include "services/runner/output/parser_harmony.h"
#include "tests/unit/check.h"

#include <jansson.h>

#define SEED 7

static const char TOOLS[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{"
    "\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"metric\":{\"type\":\"boolean\"},\"temp\":{\"type\":\"number\"},"
    "\"tags\":{\"type\":\"array\"},\"opts\":{\"type\":\"object\"},"
    "\"either\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\"}]}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"my-tool.v2\"}}]";

typedef struct split {
    char content[4096], thinking[4096];
    json_t *calls;  /* every call of every push, in order */
    cr_status_t st; /* first failure */
    char err[CR_ERR_MSG_MAX];
} split_t;

static void split_free(split_t *s)
{
    json_decref(s->calls);
}

static void collect(split_t *s, cr_buf_t *c, cr_buf_t *t, cr_buf_t *k)
{
    strncat(s->content, c->data ? c->data : "", sizeof s->content - strlen(s->content) - 1);
    strncat(s->thinking, t->data ? t->data : "", sizeof s->thinking - strlen(s->thinking) - 1);
    if (k->len) {
        json_t *arr = json_loadb(k->data, k->len, 0, NULL);
        CHECK_MSG(json_is_array(arr), "calls are not a JSON array: %s", k->data);
        json_array_extend(s->calls, arr);
        json_decref(arr);
    }
    cr_buf_reset(c);
    cr_buf_reset(t);
    cr_buf_reset(k);
}

/* Runs text through parser `name`, cut at the given offsets (ascending,
 * n_cuts of them; cuts == NULL with n_cuts == SIZE_MAX: byte by byte). */
static split_t run(const char *name, const rn_parser_init_t *in, const char *text,
                   const size_t *cuts, size_t n_cuts)
{
    split_t s = {0};
    s.calls = json_array();
    cr_err_t err = {0};
    rn_parser_init_t init = in ? *in : (rn_parser_init_t){0};
    init.seed = SEED;
    rn_parser_t *p = rn_parser_new(name, &init, &err);
    CHECK_MSG(p != NULL, "%s", err.msg);
    if (!p)
        return s;
    cr_buf_t c, t, k;
    cr_buf_init(&c, 1 << 16);
    cr_buf_init(&t, 1 << 16);
    cr_buf_init(&k, 1 << 16);
    const rn_parser_out_t out = {&c, &t, &k};
    size_t len = strlen(text), at = 0;
    for (size_t i = 0; !s.st && at < len; i++) {
        size_t next = n_cuts == SIZE_MAX ? at + 1 : (i < n_cuts ? cuts[i] : len);
        s.st = rn_parser_push(p, text + at, next - at, &out, &err);
        at = next;
        collect(&s, &c, &t, &k);
    }
    if (!s.st)
        s.st = rn_parser_finish(p, &out, &err);
    collect(&s, &c, &t, &k);
    if (s.st)
        snprintf(s.err, sizeof s.err, "%s", err.msg);
    rn_parser_destroy(&p);
    cr_buf_free(&c);
    cr_buf_free(&t);
    cr_buf_free(&k);
    return s;
}

static bool same(const split_t *a, const split_t *b)
{
    return a->st == b->st && !strcmp(a->content, b->content) &&
           !strcmp(a->thinking, b->thinking) && json_equal(a->calls, b->calls);
}

/* The whole text's split, checked against byte-by-byte and every two-piece
 * cut. Caller frees. */
static split_t parse_all_ways(const char *name, const rn_parser_init_t *in,
                              const char *text)
{
    split_t whole = run(name, in, text, NULL, 0);
    split_t bytes = run(name, in, text, NULL, SIZE_MAX);
    CHECK_MSG(same(&whole, &bytes), "%s byte by byte differs on: %s\n[%s|%s] vs [%s|%s]",
              name, text, whole.content, whole.thinking, bytes.content, bytes.thinking);
    split_free(&bytes);
    for (size_t cut = 1; cut < strlen(text); cut++) {
        split_t two = run(name, in, text, &cut, 1);
        CHECK_MSG(same(&whole, &two), "%s cut at %zu differs on: %s", name, cut, text);
        split_free(&two);
    }
    return whole;
}

static const char *call_str(const split_t *s, size_t i, const char *path)
{
    json_t *f = json_object_get(json_array_get(s->calls, i), "function");
    return json_string_value(json_object_get(f, path));
}

static json_t *call_args(const split_t *s, size_t i)
{
    return json_object_get(json_object_get(json_array_get(s->calls, i), "function"),
                           "arguments");
}

static void check_args(const split_t *s, size_t i, const char *want_json)
{
    json_t *want = json_loads(want_json, 0, NULL);
    CHECK_MSG(json_equal(call_args(s, i), want), "call %zu arguments: %s", i,
              json_dumps(call_args(s, i), JSON_COMPACT));
    json_decref(want);
}

static bool has_marker(const char *s)
{
    return strstr(s, "<|") || strstr(s, "|>");
}

static void test_harmony(void)
{
    /* thinking then answer, the model starting with <|channel|> */
    split_t s = parse_all_ways(
        "harmony", NULL,
        "<|channel|>analysis<|message|>User says hi. Reply.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?");
    CHECK_EQ_INT(s.st, CR_OK);
    CHECK_EQ_STR(s.thinking, "User says hi. Reply.");
    CHECK_EQ_STR(s.content, "Hello! How can I help?");
    CHECK_EQ_INT(json_array_size(s.calls), 0);
    split_free(&s);

    /* a call in the commentary channel, ended by <|call|>; the recipient
     * after the channel and with <|constrain|>json */
    rn_parser_init_t in = {.tools_json = TOOLS};
    s = parse_all_ways("harmony", &in,
                       "<|channel|>analysis<|message|>Need weather.<|end|>"
                       "<|start|>assistant<|channel|>commentary to=functions.get_weather "
                       "<|constrain|>json<|message|>{\"city\":\"Paris\",\"days\":2}<|call|>");
    CHECK_EQ_INT(s.st, CR_OK);
    CHECK_EQ_STR(s.thinking, "Need weather.");
    CHECK_EQ_STR(s.content, "");
    CHECK_EQ_INT(json_array_size(s.calls), 1);
    CHECK_EQ_STR(call_str(&s, 0, "name"), "get_weather");
    check_args(&s, 0, "{\"city\":\"Paris\",\"days\":2}");
    const char *id = json_string_value(json_object_get(json_array_get(s.calls, 0), "id"));
    CHECK_MSG(id && !strncmp(id, "call_", 5) && strlen(id) == 13, "id %s", id ? id : "");
    split_free(&s);

    /* recipient before the channel (the HF template's form), no <|call|>
     * (generation stopped there), and a harmony name mapped back */
    s = parse_all_ways("harmony", &in,
                       "<|start|>assistant to=functions.my_tool_v2<|channel|>commentary json"
                       "<|message|>{}");
    CHECK_EQ_INT(s.st, CR_OK);
    CHECK_EQ_INT(json_array_size(s.calls), 1);
    CHECK_EQ_STR(call_str(&s, 0, "name"), "my-tool.v2");
    check_args(&s, 0, "{}");
    split_free(&s);

    /* two calls, indexes 0 and 1 */
    s = parse_all_ways("harmony", &in,
                       "<|channel|>commentary to=functions.get_weather<|message|>"
                       "{\"city\":\"A\"}<|end|><|start|>assistant<|channel|>commentary "
                       "to=functions.get_weather<|message|>{\"city\":\"B\"}<|call|>");
    CHECK_EQ_INT(json_array_size(s.calls), 2);
    check_args(&s, 1, "{\"city\":\"B\"}");
    CHECK_EQ_INT(json_integer_value(json_object_get(
                     json_object_get(json_array_get(s.calls, 1), "function"), "index")),
                 1);
    split_free(&s);

    /* a built-in tool, called in the analysis channel, keeps its name */
    rn_parser_init_t bt = {.tools_json = "[{\"function\":{\"name\":\"browser.search\"}}]"};
    s = parse_all_ways("harmony", &bt,
                       "<|channel|>analysis<|message|>Look it up.<|end|><|start|>assistant"
                       "<|channel|>analysis to=browser.search <|constrain|>json<|message|>"
                       "{\"query\":\"x\"}<|call|>");
    CHECK_EQ_STR(s.thinking, "Look it up.");
    CHECK_EQ_INT(json_array_size(s.calls), 1);
    CHECK_EQ_STR(call_str(&s, 0, "name"), "browser.search");
    split_free(&s);

    /* commentary without a recipient is content; <|return|> ends */
    s = parse_all_ways("harmony", NULL,
                       "<|channel|>commentary<|message|>Let me see.<|end|><|start|>assistant"
                       "<|channel|>final<|message|>Done.<|return|>");
    CHECK_EQ_STR(s.content, "Let me see.Done.");
    CHECK(!has_marker(s.content) && !has_marker(s.thinking));
    split_free(&s);

    /* text that only looks like a marker stays content */
    s = parse_all_ways("harmony", NULL,
                       "<|channel|>final<|message|>a <|en b |> c <|endx|> d");
    CHECK_EQ_STR(s.content, "a <|en b |> c <|endx|> d");
    split_free(&s);

    /* prefill: the last message was the assistant's content (final open) or
     * thinking only (analysis open) */
    rn_parser_init_t pf = {.last_role = "assistant", .last_content = "The answer is"};
    s = parse_all_ways("harmony", &pf, " 42.");
    CHECK_EQ_STR(s.content, " 42.");
    split_free(&s);
    rn_parser_init_t pt = {.last_role = "assistant", .last_thinking = "Hmm"};
    s = parse_all_ways("harmony", &pt,
                       " more.<|end|><|start|>assistant<|channel|>final<|message|>Yes.");
    CHECK_EQ_STR(s.thinking, " more.");
    CHECK_EQ_STR(s.content, "Yes.");
    split_free(&s);

    /* malformed arguments fail the request with Ollama's message */
    s = parse_all_ways("harmony", &in,
                       "<|channel|>commentary to=functions.get_weather<|message|>"
                       "{\"city\":<|call|>");
    CHECK_EQ_INT(s.st, CR_E_INVALID);
    CHECK_MSG(strstr(s.err, "error parsing tool call: raw='{\"city\":'") != NULL, "%s",
              s.err);
    split_free(&s);
    s = parse_all_ways("harmony", &in,
                       "<|channel|>commentary to=functions.get_weather<|message|>[1]");
    CHECK_EQ_INT(s.st, CR_E_INVALID);
    split_free(&s);

    /* a header that never ends is refused, not held forever */
    char *big = malloc(10000);
    memset(big, 'x', 9999);
    big[9999] = '\0';
    s = run("harmony", NULL, big, NULL, 0);
    CHECK_EQ_INT(s.st, CR_E_INVALID);
    split_free(&s);
    free(big);
}

static void test_qwen3coder(void)
{
    rn_parser_init_t in = {.tools_json = TOOLS};
    split_t s = parse_all_ways(
        "qwen3-coder", &in,
        "Let me check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
        "New York\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        "<parameter=metric>\nTrue\n</parameter>\n<parameter=temp>\n21.5\n</parameter>\n"
        "<parameter=tags>\n[\"a\", 1]\n</parameter>\n<parameter=opts>\n{\"x\": null}\n"
        "</parameter>\n<parameter=either>\nabc\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=my-tool.v2>\n<parameter=note>\nline 1\nline 2\n"
        "</parameter>\n</function>\n</tool_call>  ");
    CHECK_EQ_INT(s.st, CR_OK);
    CHECK_EQ_STR(s.content, "Let me check.");
    CHECK_EQ_INT(json_array_size(s.calls), 2);
    CHECK_EQ_STR(call_str(&s, 0, "name"), "get_weather");
    check_args(&s, 0,
               "{\"city\":\"New York\",\"days\":3,\"metric\":true,\"temp\":21.5,"
               "\"tags\":[\"a\",1],\"opts\":{\"x\":null},\"either\":\"abc\"}");
    CHECK_EQ_STR(call_str(&s, 1, "name"), "my-tool.v2");
    check_args(&s, 1, "{\"note\":\"line 1\\nline 2\"}");
    split_free(&s);

    /* values that do not fit their type, null, whole numbers */
    s = parse_all_ways("qwen3-coder", &in,
                       "<tool_call><function=get_weather><parameter=days>many</parameter>"
                       "<parameter=metric>maybe</parameter><parameter=temp>20.0</parameter>"
                       "<parameter=city>null</parameter><parameter=either>12</parameter>"
                       "</function></tool_call>");
    check_args(&s, 0,
               "{\"days\":\"many\",\"metric\":false,\"temp\":20,\"city\":null,"
               "\"either\":12}");
    split_free(&s);

    /* no call: all content; partial tags never leak, trailing space held */
    s = parse_all_ways("qwen3-coder", &in, "Use <tool_ or <tool_callx> freely. ");
    CHECK_EQ_STR(s.content, "Use <tool_ or <tool_callx> freely.");
    CHECK_EQ_INT(json_array_size(s.calls), 0);
    split_free(&s);

    /* malformed: no function, unclosed parameter */
    s = parse_all_ways("qwen3-coder", &in, "<tool_call>\nhello\n</tool_call>");
    CHECK_EQ_INT(s.st, CR_E_INVALID);
    CHECK_MSG(strstr(s.err, "qwen3-coder") != NULL, "%s", s.err);
    split_free(&s);
    s = parse_all_ways("qwen3-coder", &in,
                       "<tool_call><function=f><parameter=a>1</function></tool_call>");
    CHECK_EQ_INT(s.st, CR_E_INVALID);
    split_free(&s);

    /* generation ended inside a call: completed when it parses, else given
     * back as content */
    s = parse_all_ways("qwen3-coder", &in,
                       "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n"
                       "</parameter>\n</function>\n");
    CHECK_EQ_INT(s.st, CR_OK);
    CHECK_EQ_INT(json_array_size(s.calls), 1);
    split_free(&s);
    s = parse_all_ways("qwen3-coder", &in, "Hi <tool_call>\n<function=get_w");
    CHECK_EQ_INT(s.st, CR_OK);
    CHECK_EQ_STR(s.content, "Hi<tool_call>\n<function=get_w");
    CHECK_EQ_INT(json_array_size(s.calls), 0);
    split_free(&s);
}

static void test_table(void)
{
    cr_err_t err = {0};
    CHECK(rn_parser_new("nope", NULL, &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "nope") != NULL, "%s", err.msg);
    rn_parser_init_t bad = {.tools_json = "{"};
    CHECK(rn_parser_new("harmony", &bad, &err) == NULL);
    /* the runner has every parser the registry accepts, and no other */
    static const char *const names[] = {"harmony", "qwen3-coder", "passthrough", "HARMONY"};
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++)
        CHECK_EQ_INT(rn_parser_is_known(names[i]),
                     cr_format_is_known(CR_FORMAT_PARSER, names[i]));
    const char *const *stops = rn_parser_stops("harmony");
    CHECK(stops[0] && !strcmp(stops[0], "<|return|>") && stops[1] &&
          !strcmp(stops[1], "<|call|>") && !stops[2]);
    CHECK(rn_parser_stops("qwen3-coder")[0] == NULL);
    CHECK(rn_parser_stops(NULL)[0] == NULL);
    char known[128];
    cr_format_names(CR_FORMAT_PARSER, known, sizeof known);
    CHECK_EQ_STR(known, "harmony, qwen3-coder");
    CHECK(cr_parser_has_tools("harmony") && cr_parser_has_thinking("harmony"));
    CHECK(cr_parser_has_tools("qwen3-coder") && !cr_parser_has_thinking("qwen3-coder"));
}

static void test_harmony_names(void)
{
    json_t *tools = json_loads(
        "[{\"function\":{\"name\":\"get weather\"}},{\"function\":{\"name\":\"get-weather\"}},"
        "{\"function\":{\"name\":\"9lives\"}},{\"function\":{\"name\":\"@#!\"}},"
        "{\"function\":{\"name\":\"browser.search\"}},{\"function\":{\"name\":\"caf\\u00e9$x\"}},"
        "{\"function\":{}},{\"function\":{\"name\":\"get.weather\"}}]",
        0, NULL);
    static const char *const want[] = {"get_weather", "get_weather_2", "_9lives",
                                       "unnamed",     "browser.search", "caf\xc3\xa9$x",
                                       "",            "get_weather_3"};
    char out[RN_HARMONY_NAME_MAX];
    for (size_t i = 0; i < CR_ARRAY_LEN(want); i++) {
        CHECK_EQ_INT(rn_parser_harmony_name(tools, i, out, sizeof out), CR_OK);
        CHECK_EQ_STR(out, want[i]);
    }
    CHECK_EQ_INT(rn_parser_harmony_name(tools, 99, out, sizeof out), CR_E_INVALID);
    json_decref(tools);
}

int main(void)
{
    test_harmony();
    test_qwen3coder();
    test_table();
    test_harmony_names();
    return check_finish("parsers");
}
