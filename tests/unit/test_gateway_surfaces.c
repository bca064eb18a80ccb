/* test_gateway_surfaces.c: the request translations and renderers of the
 * newer API surfaces, without a server.
 *
 * Anthropic Messages -> native chat (system blocks, each content block
 * kind, tool results placed before the user's text and naming their tool,
 * options, tools and tool_choice, thinking, count_tokens) and its error
 * shapes; Responses -> native chat (instructions, items, reasoning carried
 * to the next assistant message, calls and outputs, text.format,
 * reasoning.effort) with the 400s it owes; the rerank answer (order, ties,
 * top_n, documents, malformed scores); the ids. */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "services/gateway/anthropic.h"
#include "services/gateway/rerank.h"
#include "services/gateway/responses.h"
#include "services/gateway/surface_ids.h"
#include "tests/unit/check.h"

#include <jansson.h>
#include <math.h>

static json_t *jget(json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *t = strtok_r(buf, ".", &save); t && o; t = strtok_r(NULL, ".", &save))
        o = json_is_array(o) ? json_array_get(o, strtoul(t, NULL, 10))
                             : json_object_get(o, t);
    return o;
}

static const char *jstr(json_t *o, const char *path)
{
    const char *s = json_string_value(jget(o, path));
    return s ? s : "(absent)";
}

/* Translates with fn; returns the native body (NULL on error, err set). */
static json_t *anth(const char *body, bool count, gw_anth_info_t *info, cr_err_t *err)
{
    cr_buf_t out;
    cr_buf_init(&out, 1 << 20);
    gw_anth_info_t dummy;
    cr_status_t st = gw_anth_translate(body, strlen(body), count, &out,
                                       info ? info : &dummy, err);
    json_t *j = st ? NULL : json_loads(out.data, 0, NULL);
    cr_buf_free(&out);
    return j;
}

static json_t *resp(const char *body, gw_resp_info_t *info, cr_err_t *err)
{
    cr_buf_t out;
    cr_buf_init(&out, 1 << 20);
    gw_resp_info_t dummy;
    cr_status_t st = gw_resp_translate(body, strlen(body), &out, info ? info : &dummy, err);
    json_t *j = st ? NULL : json_loads(out.data, 0, NULL);
    cr_buf_free(&out);
    return j;
}

static void test_anthropic_request(void)
{
    cr_err_t err;
    gw_anth_info_t info;
    json_t *n = anth(
        "{\"model\":\"m\",\"max_tokens\":100,\"stream\":true,"
        "\"system\":[{\"type\":\"text\",\"text\":\"A \"},{\"type\":\"text\",\"text\":\"B\"}],"
        "\"stop_sequences\":[\"END\"],\"temperature\":0.5,\"top_k\":7,"
        "\"thinking\":{\"type\":\"disabled\"},"
        "\"tools\":[{\"name\":\"w\",\"description\":\"d\",\"input_schema\":{\"type\":\"object\"}}],"
        "\"messages\":["
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi \"},"
        "{\"type\":\"image\",\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AAAA\"}},"
        "{\"type\":\"text\",\"text\":\"there\"}]},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hmm\",\"signature\":\"s\"},"
        "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"w\",\"input\":{\"c\":1}}]},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"t1\","
        "\"content\":[{\"type\":\"text\",\"text\":\"r1\"},{\"type\":\"text\",\"text\":\"r2\"}],"
        "\"is_error\":true},{\"type\":\"text\",\"text\":\"go on\"}]}]}",
        false, &info, &err);
    CHECK_MSG(n != NULL, "%s", err.msg);
    if (!n)
        return;
    CHECK(info.stream && !info.forced_call);
    CHECK_EQ_STR(jstr(n, "model"), "m");
    CHECK(json_is_true(jget(n, "stream")));
    CHECK(json_is_false(jget(n, "think")));
    CHECK_EQ_INT(json_integer_value(jget(n, "options.num_predict")), 100);
    CHECK_EQ_STR(jstr(n, "options.stop.0"), "END");
    CHECK(json_real_value(jget(n, "options.temperature")) == 0.5);
    CHECK_EQ_INT(json_integer_value(jget(n, "options.top_k")), 7);
    CHECK_EQ_STR(jstr(n, "tools.0.type"), "function");
    CHECK_EQ_STR(jstr(n, "tools.0.function.name"), "w");
    CHECK_EQ_STR(jstr(n, "tools.0.function.description"), "d");
    CHECK_EQ_STR(jstr(n, "tools.0.function.parameters.type"), "object");
    json_t *m = jget(n, "messages");
    CHECK_EQ_INT(json_array_size(m), 5);
    CHECK_EQ_STR(jstr(m, "0.role"), "system");
    CHECK_EQ_STR(jstr(m, "0.content"), "A B");
    CHECK_EQ_STR(jstr(m, "1.content"), "hi there");
    CHECK_EQ_STR(jstr(m, "1.images.0"), "AAAA");
    CHECK_EQ_STR(jstr(m, "2.role"), "assistant");
    CHECK_EQ_STR(jstr(m, "2.thinking"), "hmm");
    CHECK_EQ_STR(jstr(m, "2.tool_calls.0.id"), "t1");
    CHECK_EQ_STR(jstr(m, "2.tool_calls.0.function.name"), "w");
    CHECK_EQ_INT(json_integer_value(jget(m, "2.tool_calls.0.function.arguments.c")), 1);
    /* the tool result first, then the user's text */
    CHECK_EQ_STR(jstr(m, "3.role"), "tool");
    CHECK_EQ_STR(jstr(m, "3.tool_call_id"), "t1");
    CHECK_EQ_STR(jstr(m, "3.tool_name"), "w");
    CHECK_EQ_STR(jstr(m, "3.content"), "Error: r1\nr2");
    CHECK_EQ_STR(jstr(m, "4.role"), "user");
    CHECK_EQ_STR(jstr(m, "4.content"), "go on");
    json_decref(n);

    /* tool_choice: none drops the tools; any and tool force a call */
    n = anth("{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"none\"},"
             "\"tools\":[{\"name\":\"w\",\"input_schema\":{}}],"
             "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
             false, &info, &err);
    CHECK(n && !jget(n, "tools") && !info.forced_call);
    json_decref(n);
    n = anth("{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"tool\",\"name\":\"b\"},"
             "\"tools\":[{\"name\":\"a\",\"input_schema\":{}},{\"name\":\"b\",\"input_schema\":"
             "{\"type\":\"object\"}}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
             false, &info, &err);
    CHECK(n && info.forced_call);
    CHECK_EQ_INT(json_array_size(jget(n, "tools")), 1);
    CHECK_EQ_STR(jstr(n, "format.properties.name.const"), "b");
    json_decref(n);

    /* structured output and effort */
    n = anth("{\"model\":\"m\",\"max_tokens\":5,\"output_format\":{\"type\":\"json_schema\","
             "\"schema\":{\"type\":\"object\"}},\"output_config\":{\"effort\":\"xhigh\"},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
             false, &info, &err);
    CHECK_EQ_STR(jstr(n, "format.type"), "object");
    CHECK_EQ_STR(jstr(n, "think"), "high");
    json_decref(n);

    /* count_tokens: no max_tokens needed, one token generated, no stream */
    n = anth("{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
             true, &info, &err);
    CHECK(n && !info.stream);
    CHECK_EQ_INT(json_integer_value(jget(n, "options.num_predict")), 1);
    json_decref(n);
}

static void check_anth_error(const char *body, const char *needle)
{
    cr_err_t err;
    cr_err_clear(&err);
    json_t *n = anth(body, false, NULL, &err);
    CHECK_MSG(!n && strstr(err.msg, needle), "%s -> '%s' (want '%s')", body, err.msg, needle);
    json_decref(n);
}

static void test_anthropic_errors(void)
{
    check_anth_error("", "missing request body");
    check_anth_error("{", "line 1");
    check_anth_error("3", "JSON object");
    check_anth_error("{\"max_tokens\":5,\"messages\":[]}", "model is required");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                     "max_tokens is required and must be positive");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[]}", "messages is required");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
                     "[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"search_result\"}]}]}",
                     "messages[0].content[1]: unknown content block type 'search_result'");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
                     "[{\"text\":\"a\"}]}]}", "needs a string 'type'");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"assistant\",\"content\":"
                     "[{\"type\":\"tool_use\",\"name\":\"w\"}]}]}", "missing required 'id'");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
                     "[{\"type\":\"tool_result\",\"content\":\"x\"}]}]}", "tool_use_id");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
                     "[{\"type\":\"tool_result\",\"tool_use_id\":\"t\",\"content\":[{\"type\":\"audio\"}]}]}]}",
                     "unknown content block type 'audio' in a tool_result");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":7}]}",
                     "messages[0].content");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"stop_sequences\":[1],\"messages\":"
                     "[{\"role\":\"user\",\"content\":\"x\"}]}", "stop_sequences[0]");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"maybe\"},\"messages\":"
                     "[{\"role\":\"user\",\"content\":\"x\"}]}", "'maybe'");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"some\"},\"messages\":"
                     "[{\"role\":\"user\",\"content\":\"x\"}]}", "tool_choice.type");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"type\":\"bash_20250124\","
                     "\"name\":\"bash\"}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                     "'bash_20250124'");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"mcp_servers\":[{\"url\":\"x\"}],"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                     "mcp_servers is not supported");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"output_format\":{\"type\":\"json\"},"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "output_format");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"output_config\":{\"effort\":\"x\"},"
                     "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "output_config.effort");
    check_anth_error("{\"model\":\"m\",\"max_tokens\":5,\"system\":[{\"type\":\"image\"}],\"messages\":"
                     "[{\"role\":\"user\",\"content\":\"x\"}]}", "system[0]");

    /* the error body and its type per status */
    static const struct {
        unsigned http;
        const char *type;
    } cases[] = {{400, "invalid_request_error"}, {401, "authentication_error"},
                 {403, "permission_error"},      {404, "not_found_error"},
                 {429, "rate_limit_error"},      {503, "overloaded_error"},
                 {500, "api_error"},             {502, "api_error"}};
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        cr_buf_t b;
        cr_buf_init(&b, 4096);
        CHECK_EQ_INT(gw_anth_render_error(&b, cases[i].http, "boom \"x\""), CR_OK);
        json_t *j = json_loads(b.data, 0, NULL);
        CHECK_EQ_STR(jstr(j, "type"), "error");
        CHECK_EQ_STR(jstr(j, "error.type"), cases[i].type);
        CHECK_EQ_STR(jstr(j, "error.message"), "boom \"x\"");
        json_decref(j);
        cr_buf_free(&b);
    }
}

static void test_responses_request(void)
{
    cr_err_t err;
    gw_resp_info_t info;
    json_t *n = resp(
        "{\"model\":\"m\",\"instructions\":\"be kind\",\"max_output_tokens\":9,\"top_p\":0.5,"
        "\"reasoning\":{\"effort\":\"minimal\"},"
        "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":{\"type\":\"object\"}}},"
        "\"tools\":[{\"type\":\"function\",\"name\":\"w\",\"parameters\":{\"type\":\"object\"}}],"
        "\"input\":["
        "{\"role\":\"developer\",\"content\":\"rules\"},"
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"a\"},"
        "{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,QUJD\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"think\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"c1\",\"name\":\"w\",\"arguments\":\"{\\\"k\\\":2}\"},"
        "{\"type\":\"function_call\",\"call_id\":\"c2\",\"name\":\"w\",\"arguments\":\"{}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"r\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"done\"}]}]}",
        &info, &err);
    CHECK_MSG(n != NULL, "%s", err.msg);
    if (!n)
        return;
    CHECK(!info.stream && !info.forced_call);
    CHECK_EQ_STR(jstr(n, "think"), "low");
    CHECK_EQ_STR(jstr(n, "format.type"), "object");
    CHECK_EQ_INT(json_integer_value(jget(n, "options.num_predict")), 9);
    CHECK(json_real_value(jget(n, "options.top_p")) == 0.5);
    CHECK_EQ_STR(jstr(n, "tools.0.function.name"), "w");
    json_t *m = jget(n, "messages");
    CHECK_EQ_INT(json_array_size(m), 6);
    CHECK_EQ_STR(jstr(m, "0.role"), "system");
    CHECK_EQ_STR(jstr(m, "0.content"), "be kind");
    CHECK_EQ_STR(jstr(m, "1.role"), "system");
    CHECK_EQ_STR(jstr(m, "2.content"), "a");
    CHECK_EQ_STR(jstr(m, "2.images.0"), "QUJD");
    /* the reasoning and both calls on one assistant message */
    CHECK_EQ_STR(jstr(m, "3.role"), "assistant");
    CHECK_EQ_STR(jstr(m, "3.thinking"), "think");
    CHECK_EQ_INT(json_array_size(jget(m, "3.tool_calls")), 2);
    CHECK_EQ_INT(json_integer_value(jget(m, "3.tool_calls.0.function.arguments.k")), 2);
    CHECK_EQ_STR(jstr(m, "3.tool_calls.1.id"), "c2");
    CHECK_EQ_STR(jstr(m, "4.role"), "tool");
    CHECK_EQ_STR(jstr(m, "4.tool_name"), "w");
    CHECK_EQ_STR(jstr(m, "4.tool_call_id"), "c1");
    CHECK_EQ_STR(jstr(m, "5.content"), "done");
    json_decref(n);

    /* a string input; required forces a call */
    n = resp("{\"model\":\"m\",\"input\":\"hi\",\"stream\":true,\"tool_choice\":\"required\","
             "\"tools\":[{\"type\":\"function\",\"name\":\"w\"}]}", &info, &err);
    CHECK(n && info.stream && info.forced_call);
    CHECK_EQ_STR(jstr(n, "messages.0.role"), "user");
    CHECK_EQ_STR(jstr(n, "format.properties.name.const"), "w");
    json_decref(n);
    n = resp("{\"model\":\"m\",\"input\":\"hi\",\"reasoning\":{\"effort\":\"none\"}}", &info, &err);
    CHECK(n && json_is_false(jget(n, "think")));
    json_decref(n);
}

static void check_resp_error(const char *body, const char *needle)
{
    cr_err_t err;
    cr_err_clear(&err);
    json_t *n = resp(body, NULL, &err);
    CHECK_MSG(!n && strstr(err.msg, needle), "%s -> '%s' (want '%s')", body, err.msg, needle);
    json_decref(n);
}

static void test_responses_errors(void)
{
    check_resp_error("", "missing request body");
    check_resp_error("[]", "JSON object");
    check_resp_error("{\"input\":\"x\"}", "model is required");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"r\"}",
                     "previous_response_id is not supported");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"conversation\":\"c\"}",
                     "conversation is not supported");
    check_resp_error("{\"model\":\"m\"}", "input: must be");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"background\":true}",
                     "background is not supported");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"prompt\":{\"id\":\"p\"}}",
                     "prompt (a stored prompt template) is not supported");
    check_resp_error("{\"model\":\"m\",\"input\":[]}", "nothing to answer");
    check_resp_error("{\"model\":\"m\",\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}",
                     "input[0]: unknown input item type 'item_reference'");
    check_resp_error("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
                     "\"input_file\",\"file_id\":\"f\"}]}]}", "file inputs are not supported");
    check_resp_error("{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":"
                     "\"input_image\",\"image_url\":\"https://x/y.png\"}]}]}", "base64 data URL");
    check_resp_error("{\"model\":\"m\",\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}",
                     "input[0].role");
    check_resp_error("{\"model\":\"m\",\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\","
                     "\"name\":\"w\",\"arguments\":\"[1]\"}]}", "JSON object text");
    check_resp_error("{\"model\":\"m\",\"input\":[{\"type\":\"function_call_output\",\"output\":\"x\"}]}",
                     "call_id");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"file_search\"}]}",
                     "'file_search'");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":\"sometimes\"}", "tool_choice");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":{\"type\":\"function\","
                     "\"name\":\"q\"},\"tools\":[{\"type\":\"function\",\"name\":\"w\"}]}", "'q'");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{\"effort\":\"huge\"}}",
                     "reasoning.effort");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":-3}",
                     "max_output_tokens");
    check_resp_error("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\"}}}",
                     "json_schema needs an object 'schema'");
}

/* The rerank answer for scores v (n of them) with the given options. */
static json_t *rerank(const float *v, size_t n, size_t bytes, int64_t top_n, bool docs,
                      cr_status_t *st)
{
    static const char *const texts[] = {"a", "b", "c", "d"};
    msg_ranked_body_t r = {0};
    r.scores.data = (uint8_t *)v;
    r.scores.len = bytes;
    r.has_scores = true;
    r.prompt_eval_count = 12;
    r.has_prompt_eval_count = true;
    gw_rerank_opts_t o = {top_n, docs};
    cr_buf_t b;
    cr_buf_init(&b, 1 << 16);
    cr_err_t err;
    *st = gw_rerank_render(&b, "rr", texts, n, &r, &o, &err);
    json_t *j = *st ? NULL : json_loads(b.data, 0, NULL);
    cr_buf_free(&b);
    return j;
}

static void test_rerank_render(void)
{
    float v[4] = {0.5f, 2.0f, -1.0f, 2.0f};
    cr_status_t st;
    json_t *j = rerank(v, 4, sizeof v, 0, true, &st);
    CHECK(j != NULL);
    CHECK_EQ_STR(jstr(j, "model"), "rr");
    CHECK_EQ_INT(json_integer_value(jget(j, "usage.total_tokens")), 12);
    /* by score, the tie (1 and 3) in request order */
    static const int order[] = {1, 3, 0, 2};
    for (int i = 0; i < 4; i++) {
        char p[48];
        snprintf(p, sizeof p, "results.%d.index", i);
        CHECK_EQ_INT(json_integer_value(jget(j, p)), order[i]);
        snprintf(p, sizeof p, "results.%d.relevance_score", i);
        CHECK(json_number_value(jget(j, p)) == v[order[i]]);
        snprintf(p, sizeof p, "results.%d.document.text", i);
        static const char *const texts[] = {"a", "b", "c", "d"};
        CHECK_EQ_STR(jstr(j, p), texts[order[i]]);
    }
    json_decref(j);
    j = rerank(v, 4, sizeof v, 2, false, &st);
    CHECK_EQ_INT(json_array_size(jget(j, "results")), 2);
    CHECK(jget(j, "results.0.document") == NULL);
    json_decref(j);
    j = rerank(v, 4, sizeof v, 9, false, &st); /* top_n past the end: all */
    CHECK_EQ_INT(json_array_size(jget(j, "results")), 4);
    json_decref(j);
    /* malformed answers from the runner */
    CHECK(!rerank(v, 4, 3 * sizeof(float), 0, false, &st) && st == CR_E_PROTO);
    float bad[2] = {1.0f, NAN};
    CHECK(!rerank(bad, 2, sizeof bad, 0, false, &st) && st == CR_E_INTERNAL);

    gw_rerank_opts_t o;
    cr_err_t err;
    const char *ok = "{\"top_n\":3,\"return_documents\":true}";
    CHECK_EQ_INT(gw_rerank_opts_parse(ok, strlen(ok), &o, &err), CR_OK);
    CHECK(o.top_n == 3 && o.return_documents);
    const char *neg = "{\"top_n\":-1}";
    CHECK_EQ_INT(gw_rerank_opts_parse(neg, strlen(neg), &o, &err), CR_E_INVALID);
    const char *str = "{\"top_n\":\"2\"}";
    CHECK_EQ_INT(gw_rerank_opts_parse(str, strlen(str), &o, &err), CR_E_INVALID);
    const char *rd = "{\"return_documents\":1}";
    CHECK_EQ_INT(gw_rerank_opts_parse(rd, strlen(rd), &o, &err), CR_E_INVALID);
}

static void test_ids(void)
{
    char a[GW_SURFACE_ID_MAX], b[GW_SURFACE_ID_MAX];
    gw_surface_id(a, sizeof a, "toolu_");
    gw_surface_id(b, sizeof b, "toolu_");
    CHECK(strlen(a) == 30 && !strncmp(a, "toolu_", 6));
    CHECK(strspn(a + 6, "0123456789abcdef") == 24);
    CHECK(strcmp(a, b) != 0);
}

int main(void)
{
    test_anthropic_request();
    test_anthropic_errors();
    test_responses_request();
    test_responses_errors();
    test_rerank_render();
    test_ids();
    return check_finish("test_gateway_surfaces");
}
