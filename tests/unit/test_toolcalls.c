/* test_toolcalls.c: the streaming tool-call parser on the three output
 * styles of issue 6 (llama3.1 bare JSON, qwen2.5/hermes <tool_call>,
 * mistral [TOOL_CALLS]) fed whole, at every one- and two-cut split and byte
 * by byte (same output each time); argument rules; ids and indexes; text
 * that is not a call; leftovers; bad tool lists and tags; an object past the
 * hold cap; hostile bytes; full output buffers; and the runner's chain
 * (thinking parser, then tool parser on its content) at every split. */
#include "lib/prelude.h"
#include "services/runner/template/template.h"
#include "services/runner/output/thinking.h"
#include "services/runner/output/toolcalls.h"
#include "tests/unit/check.h"
#include "tests/unit/tool_templates.h"

#include <jansson.h>

static const char *tools_json =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"description\":\"Weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_time\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"call\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"echo\"}}]";

#define SEED 42

typedef struct result {
    char content[8192];
    char calls[8192]; /* the elements of every pushed array, comma-joined */
    int n_calls;
} result_t;

static rn_toolcalls_t *make(const char *tag)
{
    cr_err_t err = {0};
    rn_toolcalls_t *p = rn_toolcalls_new(tag, tools_json, SEED, &err);
    CHECK_MSG(p != NULL, "%s", err.msg);
    return p;
}

static void add_calls(result_t *r, const cr_buf_t *calls)
{
    if (!calls->len)
        return;
    CHECK(calls->data[0] == '[' && calls->data[calls->len - 1] == ']');
    json_t *arr = json_loads(calls->data, 0, NULL);
    CHECK_MSG(json_is_array(arr), "calls not a JSON array: %s", calls->data);
    CHECK(json_array_size(arr) > 0);
    json_decref(arr);
    size_t n = strlen(r->calls);
    snprintf(r->calls + n, sizeof r->calls - n, "%s%.*s", n ? "," : "",
             (int)calls->len - 2, calls->data + 1);
}

static void run_cuts(const char *tag, const char *text, size_t len,
                     const size_t *cuts, size_t n_cuts, result_t *r)
{
    memset(r, 0, sizeof *r);
    rn_toolcalls_t *p = make(tag);
    cr_buf_t co, calls;
    cr_buf_init(&co, 1 << 20);
    cr_buf_init(&calls, 1 << 20);
    size_t at = 0;
    for (size_t i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        cr_buf_reset(&calls);
        CHECK_EQ_INT(rn_toolcalls_push(p, text + at, end - at, &co, &calls),
                     CR_OK);
        add_calls(r, &calls);
        at = end;
    }
    CHECK_EQ_INT(rn_toolcalls_finish(p, &co), CR_OK);
    CHECK_EQ_INT(rn_toolcalls_held(p), 0);
    r->n_calls = rn_toolcalls_count(p);
    snprintf(r->content, sizeof r->content, "%s", co.data ? co.data : "");
    cr_buf_free(&co);
    cr_buf_free(&calls);
    rn_toolcalls_destroy(&p);
}

/* The second cut after (i, j): every j up to PAIR_SPAN bytes after i (a
 * middle piece of token size, at every offset), then only the end (a
 * single cut at i). Keeps the sanitizer run short. */
#define PAIR_SPAN 24
static size_t next_cut(size_t i, size_t j, size_t len)
{
    if (j < len && j - i < PAIR_SPAN)
        return j + 1;
    return j < len ? len : len + 1;
}

/* Whole, every single cut, every pair of cuts PAIR_SPAN or fewer bytes
 * apart, and byte by byte must all give the same content and calls;
 * returns the whole-text run. */
static void check_splits(const char *tag, const char *text, result_t *whole)
{
    size_t len = strlen(text);
    run_cuts(tag, text, len, NULL, 0, whole);
    result_t r;
    int bad = 0;
    for (size_t i = 0; i <= len; i++) {
        for (size_t j = i; j <= len; j = next_cut(i, j, len)) {
            size_t cuts[2] = {i, j};
            run_cuts(tag, text, len, cuts, 2, &r);
            if (strcmp(r.content, whole->content) ||
                strcmp(r.calls, whole->calls) || r.n_calls != whole->n_calls) {
                if (!bad++)
                    fprintf(stderr, "cuts %zu,%zu: content \"%s\" calls %s\n"
                            "whole: content \"%s\" calls %s\n", i, j,
                            r.content, r.calls, whole->content, whole->calls);
            }
        }
    }
    size_t *all = malloc((len + 1) * sizeof *all);
    for (size_t i = 0; i < len; i++)
        all[i] = i + 1;
    run_cuts(tag, text, len, all, len ? len - 1 : 0, &r);
    free(all);
    CHECK_EQ_STR(r.content, whole->content);
    CHECK_EQ_STR(r.calls, whole->calls);
    CHECK_MSG(bad == 0, "%d split pairs differ for %s", bad, text);
}

/* Checks the i-th call (0-based) of r: its index, name and arguments
 * (compact JSON as the parser writes it), and the id's shape. */
static void check_call(const result_t *r, size_t i, const char *name,
                       const char *args)
{
    char wrapped[8200];
    snprintf(wrapped, sizeof wrapped, "[%s]", r->calls);
    json_t *arr = json_loads(wrapped, 0, NULL);
    CHECK_MSG(json_is_array(arr), "calls: %s", wrapped);
    json_t *c = json_array_get(arr, i);
    CHECK_MSG(c != NULL, "no call %zu in %s", i, wrapped);
    json_t *fn = json_object_get(c, "function");
    CHECK_EQ_INT(json_integer_value(json_object_get(fn, "index")), i);
    CHECK_EQ_STR(json_string_value(json_object_get(fn, "name")), name);
    const char *id = json_string_value(json_object_get(c, "id"));
    CHECK_MSG(id && strlen(id) == 13 && !strncmp(id, "call_", 5) &&
                  strspn(id + 5, "abcdefghijklmnopqrstuvwxyz0123456789") == 8,
              "bad id %s", id ? id : "(null)");
    json_t *a = json_object_get(fn, "arguments");
    CHECK(json_is_object(a));
    json_decref(arr);
    /* The exact text, as sent on the bus. */
    char want[1024];
    snprintf(want, sizeof want, "\"name\":\"%s\",\"arguments\":%s}}", name, args);
    CHECK_MSG(strstr(r->calls, want) != NULL, "%s not in %s", want, r->calls);
}

/* ---- the three styles ---- */

static void test_llama31_bare_json(void)
{
    result_t r;
    check_splits("{",
                 "{\"name\": \"get_weather\", \"parameters\": "
                 "{\"city\": \"Paris\", \"unit\": \"celsius\"}}",
                 &r);
    CHECK_EQ_INT(r.n_calls, 1);
    CHECK_EQ_STR(r.content, "");
    check_call(&r, 0, "get_weather", "{\"city\":\"Paris\",\"unit\":\"celsius\"}");

    /* Leading whitespace is passed on; the call still counts. */
    check_splits("{", "\n\n{\"name\": \"get_time\", \"parameters\": {}}", &r);
    CHECK_EQ_INT(r.n_calls, 1);
    CHECK_EQ_STR(r.content, "\n\n");
    check_call(&r, 0, "get_time", "{}");

    /* Not the first output: all content. */
    check_splits("{", "Sure: {\"name\": \"get_time\", \"parameters\": {}}", &r);
    CHECK_EQ_INT(r.n_calls, 0);
    CHECK_EQ_STR(r.content, "Sure: {\"name\": \"get_time\", \"parameters\": {}}");

    /* JSON that is no call (no tool name): content, and what follows. */
    check_splits("{", "{\"answer\": 42} and more", &r);
    CHECK_EQ_INT(r.n_calls, 0);
    CHECK_EQ_STR(r.content, "{\"answer\": 42} and more");

    /* Two bare objects, then prose. */
    check_splits("{",
                 "{\"name\":\"get_time\",\"parameters\":{}}"
                 "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\"}}"
                 " Done.",
                 &r);
    CHECK_EQ_INT(r.n_calls, 2);
    check_call(&r, 0, "get_time", "{}");
    check_call(&r, 1, "get_weather", "{\"city\":\"Oslo\"}");
    CHECK_EQ_STR(r.content, "Done.");
}

static void test_hermes_tool_call_tags(void)
{
    result_t r;
    check_splits("<tool_call>",
                 "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                 "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
                 "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n"
                 "</tool_call>",
                 &r);
    CHECK_EQ_INT(r.n_calls, 2);
    CHECK_EQ_STR(r.content, "");
    check_call(&r, 0, "get_weather", "{\"city\":\"Paris\"}");
    check_call(&r, 1, "get_time", "{\"tz\":\"CET\"}");

    /* Text before the tag passes through; a partial tag is held back and
     * then released when it turns out not to be the tag. */
    check_splits("<tool_call>",
                 "Let me check <tool <tool_call>{\"name\": \"get_time\", "
                 "\"arguments\": {}}</tool_call>",
                 &r);
    CHECK_EQ_INT(r.n_calls, 1);
    CHECK_EQ_STR(r.content, "Let me check <tool ");

    /* No tag at all: everything is content, a trailing partial tag too. */
    check_splits("<tool_call>", "Just text, no call. <tool_ca", &r);
    CHECK_EQ_INT(r.n_calls, 0);
    CHECK_EQ_STR(r.content, "Just text, no call. <tool_ca");

    /* A tool named "call" is not found inside the tag itself. */
    check_splits("<tool_call>",
                 "<tool_call>{\"name\": \"echo\", \"arguments\": {\"x\": \"call\"}}"
                 "</tool_call>",
                 &r);
    CHECK_EQ_INT(r.n_calls, 1);
    check_call(&r, 0, "echo", "{\"x\":\"call\"}");
}

static void test_mistral_tool_calls(void)
{
    result_t r;
    check_splits("[TOOL_CALLS]",
                 "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": "
                 "{\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": "
                 "\"{\\\"tz\\\": \\\"CET\\\"}\"}]",
                 &r);
    CHECK_EQ_INT(r.n_calls, 2);
    CHECK_EQ_STR(r.content, "");
    check_call(&r, 0, "get_weather", "{\"city\":\"Paris\"}");
    /* Arguments given as a JSON string become an object. */
    check_call(&r, 1, "get_time", "{\"tz\":\"CET\"}");

    /* Closing form and the end-of-turn text after calls are dropped, real
     * prose after them is kept. */
    check_splits("[TOOL_CALLS]",
                 "[TOOL_CALLS][{\"name\":\"get_time\",\"arguments\":{}}]"
                 "[/TOOL_CALLS] Anything else?",
                 &r);
    CHECK_EQ_INT(r.n_calls, 1);
    CHECK_EQ_STR(r.content, "Anything else?");
}

static void test_bracket_tag(void)
{
    result_t r;
    check_splits("[", " [{\"name\":\"get_time\",\"arguments\":{}}]", &r);
    CHECK_EQ_INT(r.n_calls, 1);
    CHECK_EQ_STR(r.content, " ");
    check_splits("[", "no [{\"name\":\"get_time\",\"arguments\":{}}]", &r);
    CHECK_EQ_INT(r.n_calls, 0);
}

/* ---- argument rules ---- */

static void one_call(const char *text, const char *name, const char *args)
{
    result_t r;
    run_cuts("<tool_call>", text, strlen(text), NULL, 0, &r);
    CHECK_MSG(r.n_calls == 1, "%d calls from %s", r.n_calls, text);
    if (r.n_calls == 1)
        check_call(&r, 0, name, args);
}

static void test_argument_rules(void)
{
    /* parameters as an object, arguments as a string, null */
    one_call("<tool_call>{\"name\":\"get_time\",\"parameters\":{\"a\":1}}",
             "get_time", "{\"a\":1}");
    one_call("<tool_call>{\"name\":\"get_time\",\"arguments\":\"{\\\"a\\\":[1,2]}\"}",
             "get_time", "{\"a\":[1,2]}");
    one_call("<tool_call>{\"name\":\"get_time\",\"arguments\":null}", "get_time",
             "{}");
    /* a member named like the tool */
    one_call("<tool_call>{\"get_weather\": {\"city\": \"Rome\"}}", "get_weather",
             "{\"city\":\"Rome\"}");
    /* nested search (OpenAI-shaped) */
    one_call("<tool_call>{\"type\":\"function\",\"function\":{\"name\":"
             "\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}}",
             "get_weather", "{\"city\":\"Rome\"}");
    one_call("<tool_call>{\"items\":[{\"name\":\"get_weather\",\"parameters\":"
             "{\"city\":\"Rome\"}}]}",
             "get_weather", "{\"city\":\"Rome\"}");
    /* whole object less the name */
    one_call("<tool_call>{\"name\": \"get_weather\", \"city\": \"Rome\"}",
             "get_weather", "{\"city\":\"Rome\"}");
    one_call("<tool_call>{\"name\": \"get_time\"}", "get_time", "{}");
    /* arguments that are a non-object string fall through to the whole */
    one_call("<tool_call>{\"name\":\"get_time\",\"arguments\":\"soon\"}", "get_time",
             "{\"arguments\":\"soon\"}");
    /* earliest name wins, longest on ties ("get" vs "get_weather") */
    one_call("<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"q\":\"get_time\"}}",
             "get_weather", "{\"q\":\"get_time\"}");
    one_call("<tool_call>{\"name\":\"get\",\"arguments\":{}}", "get", "{}");
    /* the name before the object (functionary-like) */
    one_call("<tool_call>get_time {\"tz\":\"UTC\"}", "get_time", "{\"tz\":\"UTC\"}");
    /* strings with braces, quotes and escapes */
    one_call("<tool_call>{\"name\":\"echo\",\"arguments\":{\"t\":\"a } \\\" { \\\\\"}}",
             "echo", "{\"t\":\"a } \\\" { \\\\\"}");
    /* numbers, booleans, unicode, control characters */
    one_call("<tool_call>{\"name\":\"echo\",\"arguments\":{\"f\":0.1,\"g\":1e300,"
             "\"h\":2.5,\"i\":-7,\"b\":true,\"n\":null,\"u\":\"\\u00e9ü\","
             "\"c\":\"\\n\\t\\u0001\"}}",
             "echo",
             "{\"f\":0.1,\"g\":1e+300,\"h\":2.5,\"i\":-7,\"b\":true,\"n\":null,"
             "\"u\":\"éü\",\"c\":\"\\n\\t\\u0001\"}");
}

/* ---- ids, indexes, and the calls buffer ---- */

static void test_ids_and_indexes(void)
{
    result_t a, b;
    const char *text = "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}"
                       "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}"
                       "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}";
    run_cuts("<tool_call>", text, strlen(text), NULL, 0, &a);
    CHECK_EQ_INT(a.n_calls, 3);
    check_call(&a, 0, "get_time", "{}");
    check_call(&a, 1, "get_time", "{}");
    check_call(&a, 2, "get_time", "{}");
    /* same seed, same ids; the three ids differ */
    run_cuts("<tool_call>", text, strlen(text), NULL, 0, &b);
    CHECK_EQ_STR(a.calls, b.calls);
    char *i0 = strstr(a.calls, "call_");
    char *i1 = i0 ? strstr(i0 + 1, "call_") : NULL;
    CHECK(i0 && i1 && strncmp(i0, i1, 13));

    /* seed 0 draws from the clock and still gives the right shape */
    cr_err_t err = {0};
    rn_toolcalls_t *p = rn_toolcalls_new("<tool_call>", tools_json, 0, &err);
    CHECK(p != NULL);
    cr_buf_t co, calls;
    cr_buf_init(&co, 1 << 16);
    cr_buf_init(&calls, 1 << 16);
    CHECK_EQ_INT(rn_toolcalls_push(p, text, strlen(text), &co, &calls), CR_OK);
    result_t c = {0};
    add_calls(&c, &calls);
    c.n_calls = rn_toolcalls_count(p);
    CHECK_EQ_INT(c.n_calls, 3);
    check_call(&c, 2, "get_time", "{}");
    CHECK(rn_toolcalls_in_call(p));
    CHECK_EQ_INT(rn_toolcalls_finish(p, &co), CR_OK);
    CHECK(!rn_toolcalls_in_call(p));
    CHECK_EQ_INT(co.len, 0);
    /* after finish, text passes through */
    cr_buf_reset(&calls);
    CHECK_EQ_INT(rn_toolcalls_push(p, "<tool_call>x", 12, &co, &calls), CR_OK);
    CHECK_EQ_STR(co.data, "<tool_call>x");
    CHECK_EQ_INT(calls.len, 0);
    cr_buf_free(&co);
    cr_buf_free(&calls);
    rn_toolcalls_destroy(&p);
    CHECK(p == NULL);
    rn_toolcalls_destroy(&p);
    rn_toolcalls_destroy(NULL);
}

static void test_held_while_calling(void)
{
    rn_toolcalls_t *p = make("<tool_call>");
    cr_buf_t co, calls;
    cr_buf_init(&co, 1 << 16);
    cr_buf_init(&calls, 1 << 16);
    CHECK_EQ_INT(rn_toolcalls_push(p, "Hi <tool_", 9, &co, &calls), CR_OK);
    CHECK_EQ_STR(co.data, "Hi ");
    CHECK_EQ_INT(rn_toolcalls_held(p), 6);
    CHECK(!rn_toolcalls_in_call(p));
    CHECK_EQ_INT(rn_toolcalls_push(p, "call>{\"name\":\"get", 17, &co, &calls),
                 CR_OK);
    CHECK(rn_toolcalls_in_call(p));
    CHECK_EQ_STR(co.data, "Hi ");
    CHECK_EQ_INT(calls.len, 0);
    CHECK_EQ_INT(rn_toolcalls_push(p, "_time\",\"arguments\":{}}", 23, &co, &calls),
                 CR_OK);
    CHECK(calls.len > 0);
    CHECK_EQ_INT(rn_toolcalls_count(p), 1);
    CHECK_EQ_INT(rn_toolcalls_finish(p, &co), CR_OK);
    CHECK_EQ_STR(co.data, "Hi ");
    cr_buf_free(&co);
    cr_buf_free(&calls);
    rn_toolcalls_destroy(&p);
}

/* ---- text that is no call ---- */

static void test_not_calls(void)
{
    result_t r;
    /* unknown tool: the whole thing is content, tag included */
    check_splits("<tool_call>",
                 "<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call> ok",
                 &r);
    CHECK_EQ_INT(r.n_calls, 0);
    CHECK_EQ_STR(r.content,
                 "<tool_call>{\"name\": \"launch\", \"arguments\": {}}</tool_call> ok");
    /* balanced but invalid JSON */
    check_splits("<tool_call>",
                 "<tool_call>{\"name\": \"get_weather\", \"arguments\": {city: 1}} x",
                 &r);
    CHECK_EQ_INT(r.n_calls, 0);
    CHECK_EQ_STR(r.content,
                 "<tool_call>{\"name\": \"get_weather\", \"arguments\": {city: 1}} x");
    /* a good call, then a bad one: the call stands, the rest is content */
    run_cuts("<tool_call>",
             "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>"
             "<tool_call>{oops}</tool_call>",
             strlen("<tool_call>{\"name\":\"get_time\",\"arguments\":{}}</tool_call>"
                    "<tool_call>{oops}</tool_call>"),
             NULL, 0, &r);
    CHECK_EQ_INT(r.n_calls, 1);
    CHECK_EQ_STR(r.content, "</tool_call><tool_call>{oops}</tool_call>");
    /* generation cut off inside the object: content at the end */
    check_splits("<tool_call>",
                 "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"ci", &r);
    CHECK_EQ_INT(r.n_calls, 0);
    CHECK_EQ_STR(r.content,
                 "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"ci");
    /* no tools at all: nothing is ever a call */
    cr_err_t err = {0};
    rn_toolcalls_t *p = rn_toolcalls_new("<tool_call>", NULL, 1, &err);
    CHECK(p != NULL);
    cr_buf_t co, calls;
    cr_buf_init(&co, 1 << 16);
    cr_buf_init(&calls, 1 << 16);
    const char *t = "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}";
    CHECK_EQ_INT(rn_toolcalls_push(p, t, strlen(t), &co, &calls), CR_OK);
    CHECK_EQ_INT(rn_toolcalls_finish(p, &co), CR_OK);
    CHECK_EQ_STR(co.data, t);
    CHECK_EQ_INT(calls.len, 0);
    cr_buf_free(&co);
    cr_buf_free(&calls);
    rn_toolcalls_destroy(&p);
}

/* ---- construction ---- */

static void test_bad_construction(void)
{
    cr_err_t err = {0};
    CHECK(rn_toolcalls_new("<tool_call>", "[{", 1, &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_INVALID);
    CHECK(strstr(err.msg, "tools") != NULL);
    CHECK(rn_toolcalls_new("<tool_call>", "{\"a\":1}", 1, &err) == NULL);
    CHECK(strstr(err.msg, "array") != NULL);
    char name[RN_TOOLCALLS_NAME_MAX + 2];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    char js[1024];
    snprintf(js, sizeof js,
             "[{\"function\":{\"name\":\"ok\"}},{\"function\":{\"name\":\"%s\"}}]",
             name);
    CHECK(rn_toolcalls_new("<tool_call>", js, 1, &err) == NULL);
    CHECK(strstr(err.msg, "tools[1].function.name") != NULL);
    cr_buf_t many;
    cr_buf_init(&many, 1 << 20);
    cr_buf_putc(&many, '[');
    for (int i = 0; i <= RN_TOOLCALLS_MAX_TOOLS; i++)
        cr_buf_printf(&many, "%s{\"function\":{\"name\":\"t%d\"}}", i ? "," : "", i);
    cr_buf_putc(&many, ']');
    CHECK(rn_toolcalls_new("<tool_call>", many.data, 1, &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_INVALID);
    cr_buf_free(&many);
    char tag[RN_TOOLCALLS_TAG_MAX + 2];
    memset(tag, 't', sizeof tag - 1);
    tag[sizeof tag - 1] = '\0';
    CHECK(rn_toolcalls_new(tag, tools_json, 1, &err) == NULL);
    CHECK(strstr(err.msg, "tag") != NULL);

    /* Odd but acceptable tool entries are skipped. */
    rn_toolcalls_t *p = rn_toolcalls_new(
        NULL,
        "[1,{},{\"function\":{\"name\":\"\"}},{\"function\":{\"name\":7}},"
        "{\"function\":{\"name\":\"get_time\"}}]",
        1, &err);
    CHECK(p != NULL);
    rn_toolcalls_destroy(&p);
    /* NULL, empty and blank tags mean "{" */
    result_t r;
    const char *t = " {\"name\":\"get_time\",\"arguments\":{}}";
    run_cuts(NULL, t, strlen(t), NULL, 0, &r);
    CHECK_EQ_INT(r.n_calls, 1);
    run_cuts(" \n", t, strlen(t), NULL, 0, &r);
    CHECK_EQ_INT(r.n_calls, 1);
    run_cuts("  <tool_call>\n", "<tool_call>{\"name\":\"get\"}", 26, NULL, 0, &r);
    CHECK_EQ_INT(r.n_calls, 1);
}

/* ---- limits and hostile text ---- */

static void test_hold_cap(void)
{
    /* An object that never closes: held up to RN_TOOLCALLS_HOLD_BYTES, then
     * everything becomes content, nothing lost. */
    rn_toolcalls_t *p = make("<tool_call>");
    cr_buf_t co, calls;
    cr_buf_init(&co, 1 << 22);
    cr_buf_init(&calls, 1 << 16);
    const char *head = "<tool_call>{\"name\":\"echo\",\"arguments\":{\"t\":\"";
    CHECK_EQ_INT(rn_toolcalls_push(p, head, strlen(head), &co, &calls), CR_OK);
    char chunk[1000];
    memset(chunk, 'x', sizeof chunk);
    size_t total = strlen(head);
    bool released = false;
    for (int i = 0; i < 300; i++) {
        CHECK_EQ_INT(rn_toolcalls_push(p, chunk, sizeof chunk, &co, &calls), CR_OK);
        total += sizeof chunk;
        CHECK(rn_toolcalls_held(p) <= RN_TOOLCALLS_HOLD_BYTES);
        if (co.len && !released) {
            released = true;
            CHECK(total > RN_TOOLCALLS_HOLD_BYTES);
        }
    }
    CHECK(released);
    CHECK(!rn_toolcalls_in_call(p));
    CHECK_EQ_INT(rn_toolcalls_finish(p, &co), CR_OK);
    CHECK_EQ_INT(co.len, total);
    CHECK(!strncmp(co.data, head, strlen(head)));
    CHECK_EQ_INT(calls.len, 0);
    cr_buf_free(&co);
    cr_buf_free(&calls);
    rn_toolcalls_destroy(&p);

    /* One push far larger than the cap works the same way. */
    p = make("{");
    size_t big = RN_TOOLCALLS_HOLD_BYTES * 2 + 17;
    char *text = malloc(big);
    memset(text, '{', big);
    cr_buf_init(&co, 1 << 22);
    CHECK_EQ_INT(rn_toolcalls_push(p, text, big, &co, &calls), CR_OK);
    CHECK_EQ_INT(rn_toolcalls_finish(p, &co), CR_OK);
    CHECK_EQ_INT(co.len, big);
    free(text);
    cr_buf_free(&co);
    cr_buf_free(&calls);
    rn_toolcalls_destroy(&p);
}

static void test_hostile_bytes(void)
{
    static const char frag[] =
        "<tool_call>{\"name\":\"get_time\",\"arguments\":{\"a\":\"\\\"}\\\\\"}}"
        "\0\xff\xfe}{[]\"\\</tool_call>get_weather{{{\"\"}}}";
    static const char *const tags[] = {"<tool_call>", "{", "[", "[TOOL_CALLS]"};
    uint32_t seed = 777;
    for (size_t t = 0; t < CR_ARRAY_LEN(tags); t++) {
        for (int round = 0; round < 20; round++) {
            rn_toolcalls_t *p = make(tags[t]);
            cr_buf_t co, calls;
            cr_buf_init(&co, 1 << 22);
            cr_buf_init(&calls, 1 << 22);
            for (int i = 0; i < 300; i++) {
                seed = seed * 1103515245u + 12345u;
                size_t a = (seed >> 16) % sizeof frag;
                size_t b = (seed >> 8) % (sizeof frag - a + 1);
                cr_buf_reset(&calls);
                CHECK_EQ_INT(rn_toolcalls_push(p, frag + a, b, &co, &calls), CR_OK);
                if (calls.len) {
                    json_t *v = json_loads(calls.data, 0, NULL);
                    CHECK(json_is_array(v));
                    json_decref(v);
                }
            }
            CHECK_EQ_INT(rn_toolcalls_finish(p, &co), CR_OK);
            cr_buf_free(&co);
            cr_buf_free(&calls);
            rn_toolcalls_destroy(&p);
        }
    }
}

static void test_full_output_buffers(void)
{
    rn_toolcalls_t *p = make("<tool_call>");
    cr_buf_t co, calls;
    cr_buf_init(&co, 4);
    cr_buf_init(&calls, 8);
    CHECK_EQ_INT(rn_toolcalls_push(p, "0123456789", 10, &co, &calls),
                 CR_E_TOO_LARGE);
    rn_toolcalls_destroy(&p);
    p = make("<tool_call>");
    cr_buf_reset(&co);
    const char *t = "<tool_call>{\"name\":\"get_time\",\"arguments\":{}}";
    CHECK_EQ_INT(rn_toolcalls_push(p, t, strlen(t), &co, &calls), CR_E_TOO_LARGE);
    rn_toolcalls_destroy(&p);
    cr_buf_free(&co);
    cr_buf_free(&calls);
}

/* Random texts built from call-like fragments, fed whole and cut at random
 * places: the output must never depend on the cuts. */
static void test_random_split_invariance(void)
{
    static const char *const frags[] = {
        "<tool_call>", "</tool_call>", "{", "}", "\"", "\\", "get_time",
        "get", "call", "\"name\":", "\"arguments\":", "\"parameters\":", " ",
        "\n", "x", "[", "]", ",", "[TOOL_CALLS]", "{}", "null", "\"{}\"",
        "<tool_", "[TOOL_", "<think>", "\"get_time\"",
        "{\"name\":\"get_time\",\"arguments\":{}}",
        "<tool_call>{\"name\":\"get\",\"parameters\":{\"a\":\"}\"}}"};
    static const char *const tags[] = {"<tool_call>", "{", "[TOOL_CALLS] [", "["};
    uint32_t seed = 2024;
    int bad = 0, with_calls = 0;
    char text[1024];
    for (int n = 0; n < 400; n++) {
        size_t len = 0;
        text[0] = '\0';
        seed = seed * 1103515245u + 12345u;
        int k = 4 + (int)((seed >> 16) % 24);
        for (int f = 0; f < k; f++) {
            seed = seed * 1103515245u + 12345u;
            const char *fr = frags[(seed >> 16) % CR_ARRAY_LEN(frags)];
            len += (size_t)snprintf(text + len, sizeof text - len, "%s", fr);
        }
        const char *tag = tags[n % CR_ARRAY_LEN(tags)];
        result_t whole, r;
        run_cuts(tag, text, len, NULL, 0, &whole);
        with_calls += whole.n_calls > 0;
        for (int rep = 0; rep < 6; rep++) {
            size_t cuts[6];
            for (int c = 0; c < 6; c++) {
                seed = seed * 1103515245u + 12345u;
                cuts[c] = (seed >> 16) % (len + 1);
            }
            for (int x = 1; x < 6; x++) /* sort ascending */
                for (int y = x; y > 0 && cuts[y - 1] > cuts[y]; y--) {
                    size_t t = cuts[y];
                    cuts[y] = cuts[y - 1];
                    cuts[y - 1] = t;
                }
            run_cuts(tag, text, len, cuts, 6, &r);
            if (strcmp(r.content, whole.content) || strcmp(r.calls, whole.calls)) {
                if (!bad++)
                    fprintf(stderr, "tag %s text %s\n whole: %s | %s\n cut: %s | %s\n",
                            tag, text, whole.content, whole.calls, r.content,
                            r.calls);
            }
        }
    }
    CHECK_MSG(bad == 0, "%d random splits differ", bad);
    CHECK_MSG(with_calls >= 40, "only %d random texts held calls", with_calls);
}

/* ---- tags inferred from real-style templates ---- */

static void tag_of(const char *src, char *tag, size_t cap)
{
    rn_tmpl_t *t = NULL;
    cr_err_t err = {0};
    CHECK_MSG(rn_tmpl_parse(src, strlen(src), &t, &err) == CR_OK, "%s", err.msg);
    tag[0] = '\0';
    if (t)
        rn_tmpl_tool_tag(t, tag, cap);
    rn_tmpl_destroy(&t);
}

static void test_template_tags(void)
{
    char tag[RN_TOOLCALLS_TAG_MAX + 1];
    result_t r;

    tag_of(llama31_tmpl, tag, sizeof tag);
    CHECK_EQ_STR(tag, "{");
    check_splits(tag, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                 &r);
    CHECK_EQ_INT(r.n_calls, 1);
    check_call(&r, 0, "get_weather", "{\"city\":\"Oslo\"}");

    tag_of(qwen25_tmpl, tag, sizeof tag);
    CHECK_EQ_STR(tag, "<tool_call>");
    check_splits(tag, "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
                 &r);
    CHECK_EQ_INT(r.n_calls, 1);
    CHECK_EQ_STR(r.content, "");

    tag_of(mistral_tmpl, tag, sizeof tag);
    CHECK_EQ_STR(tag, "[TOOL_CALLS] [");
    /* with the template's space, without it, and with a newline */
    static const char *const outs[] = {
        "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": {}}]",
        "[TOOL_CALLS][{\"name\": \"get_time\", \"arguments\": {}}]",
        "[TOOL_CALLS]\n [{\"name\": \"get_time\", \"arguments\": {}}]",
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(outs); i++) {
        check_splits(tag, outs[i], &r);
        CHECK_EQ_INT(r.n_calls, 1);
        CHECK_EQ_STR(r.content, "");
        check_call(&r, 0, "get_time", "{}");
    }
    /* the tag's words must still come in order: not a call */
    check_splits(tag, "[TOOL_CALLS] {\"name\": \"get_time\"}", &r);
    CHECK_EQ_INT(r.n_calls, 0);
    CHECK_EQ_STR(r.content, "[TOOL_CALLS] {\"name\": \"get_time\"}");
    /* a whitespace flood inside the tag is no tag (and is not held) */
    char flood[200];
    snprintf(flood, sizeof flood, "[TOOL_CALLS]%64s[{\"name\":\"get_time\"}]", "");
    run_cuts(tag, flood, strlen(flood), NULL, 0, &r);
    CHECK_EQ_INT(r.n_calls, 0);
    CHECK_EQ_STR(r.content, flood);
    rn_toolcalls_t *p = make(tag);
    cr_buf_t co, calls;
    cr_buf_init(&co, 1 << 16);
    cr_buf_init(&calls, 1 << 16);
    CHECK_EQ_INT(rn_toolcalls_push(p, flood, 60, &co, &calls), CR_OK);
    CHECK(rn_toolcalls_held(p) <= 12 + 32);
    cr_buf_free(&co);
    cr_buf_free(&calls);
    rn_toolcalls_destroy(&p);
}

/* ---- the chain the engine runs: thinking first, tools on its content ---- */

typedef struct chain_out {
    char thinking[4096], content[4096], calls[8192];
} chain_out_t;

static void run_chain(const char *text, const size_t *cuts, size_t n_cuts,
                      chain_out_t *o)
{
    cr_err_t err = {0};
    rn_thinking_t *th = rn_thinking_new("<think>", "</think>", false, &err);
    rn_toolcalls_t *tc = make("<tool_call>");
    cr_buf_t think_out, tmp, content, calls;
    cr_buf_init(&think_out, 1 << 16);
    cr_buf_init(&tmp, 1 << 16);
    cr_buf_init(&content, 1 << 16);
    cr_buf_init(&calls, 1 << 16);
    result_t r = {0};
    size_t len = strlen(text), at = 0;
    for (size_t i = 0; i <= n_cuts + 1; i++) {
        cr_buf_reset(&tmp);
        cr_buf_reset(&calls);
        if (i <= n_cuts) {
            size_t end = i < n_cuts ? cuts[i] : len;
            CHECK_EQ_INT(rn_thinking_push(th, text + at, end - at, &think_out,
                                          &tmp), CR_OK);
            at = end;
        } else {
            CHECK_EQ_INT(rn_thinking_flush(th, &think_out, &tmp), CR_OK);
        }
        CHECK_EQ_INT(rn_toolcalls_push(tc, tmp.data ? tmp.data : "", tmp.len,
                                       &content, &calls), CR_OK);
        add_calls(&r, &calls);
    }
    CHECK_EQ_INT(rn_toolcalls_finish(tc, &content), CR_OK);
    snprintf(o->thinking, sizeof o->thinking, "%s",
             think_out.data ? think_out.data : "");
    snprintf(o->content, sizeof o->content, "%s", content.data ? content.data : "");
    snprintf(o->calls, sizeof o->calls, "%s", r.calls);
    cr_buf_free(&think_out);
    cr_buf_free(&tmp);
    cr_buf_free(&content);
    cr_buf_free(&calls);
    rn_thinking_destroy(&th);
    rn_toolcalls_destroy(&tc);
}

static void test_thinking_then_tools_chain(void)
{
    const char *text =
        "<think>\nThe user wants the weather. {maybe}\n</think>\n\n"
        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
        "{\"city\": \"Paris\"}}\n</tool_call>";
    chain_out_t whole, o;
    run_chain(text, NULL, 0, &whole);
    CHECK_EQ_STR(whole.thinking, "The user wants the weather. {maybe}\n");
    CHECK_EQ_STR(whole.content, "");
    result_t r = {0};
    snprintf(r.calls, sizeof r.calls, "%s", whole.calls);
    check_call(&r, 0, "get_weather", "{\"city\":\"Paris\"}");
    size_t len = strlen(text);
    int bad = 0;
    for (size_t i = 0; i <= len; i++) {
        for (size_t j = i; j <= len; j = next_cut(i, j, len)) {
            size_t cuts[2] = {i, j};
            run_chain(text, cuts, 2, &o);
            if (strcmp(o.thinking, whole.thinking) ||
                strcmp(o.content, whole.content) || strcmp(o.calls, whole.calls))
                bad++;
        }
    }
    CHECK_MSG(bad == 0, "%d split pairs differ", bad);
}

int main(void)
{
    test_llama31_bare_json();
    test_hermes_tool_call_tags();
    test_mistral_tool_calls();
    test_bracket_tag();
    test_argument_rules();
    test_ids_and_indexes();
    test_held_while_calling();
    test_not_calls();
    test_bad_construction();
    test_hold_cap();
    test_hostile_bytes();
    test_full_output_buffers();
    test_template_tags();
    test_random_split_invariance();
    test_thinking_then_tools_chain();
    return check_finish("test_toolcalls");
}
