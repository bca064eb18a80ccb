/* test_prompt_jinja: a chat request through a Jinja chat template
 * (services/runner/prompt/prompt_jinja.c): the context Hugging Face's
 * apply_chat_template would give (messages with reasoning_content, tool
 * calls and results, tools, add_generation_prompt, bos/eos), the model's
 * SYSTEM and MESSAGEs, trust spans that keep request text untrusted, BOS
 * dropping, history truncation, template errors, and the tags inferred
 * for the output stages. */
#include "lib/prelude.h"

#include "services/runner/prompt/prompt_jinja.h"
#include "lib/chat_formats.h"
#include "tests/unit/check.h"

static jj_template_t *parse(const char *src)
{
    cr_err_t err = {0};
    jj_template_t *t = jj_template_new(src, strlen(src), &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    return t;
}

/* Untrusted bytes of r as a string of '0' (trusted) and '1'. */
static void taint_string(const rn_prompt_result_t *r, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < r->n_spans; i++)
        for (size_t j = 0; j < r->spans[i].len && k + 1 < cap; j++)
            out[k++] = r->spans[i].trusted ? '0' : '1';
    out[k] = '\0';
}

static void test_context(void)
{
    jj_template_t *t = parse("{{ bos_token }}{{ messages | tojson }}|{{ tools | tojson }}|"
                             "{{ add_generation_prompt }}|{{ eos_token }}");
    json_t *calls = json_loads("[{\"id\": \"call_1\", \"function\": {\"index\": 0, \"name\": "
                               "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}}]",
                               0, NULL);
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", 0,
                               NULL);
    rn_prompt_msg_t msgs[] = {
        {.role = "user", .content = "Weather?"},
        {.role = "assistant", .content = "", .thinking = "hmm", .tool_calls = calls},
        {.role = "tool", .content = "sunny", .tool_name = "get_weather",
         .tool_call_id = "call_1"},
    };
    rn_prompt_jinja_t in = {.tmpl = t, .bos_token = "<s>", .eos_token = "</s>",
                            .model_system = "Be brief.", .msgs = msgs, .n_msgs = 3,
                            .tools = tools};
    rn_prompt_result_t r;
    cr_err_t err = {0};
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in, &r, &err), CR_OK);
    CHECK_EQ_STR(r.text,
                 "<s>[{\"role\": \"system\", \"content\": \"Be brief.\"}, "
                 "{\"role\": \"user\", \"content\": \"Weather?\"}, "
                 "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"hmm\", "
                 "\"tool_calls\": [{\"type\": \"function\", \"function\": {\"name\": "
                 "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, \"id\": \"call_1\"}]}, "
                 "{\"role\": \"tool\", \"content\": \"sunny\", \"name\": \"get_weather\", "
                 "\"tool_call_id\": \"call_1\"}]|"
                 "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]|True|</s>");
    rn_prompt_result_free(&r);
    /* The tokenizer adds BOS and EOS itself: the template's copies go. */
    in.strip_bos = in.strip_eos = true;
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in, &r, &err), CR_OK);
    CHECK(r.text && !strncmp(r.text, "[{", 2) && r.len > 5 &&
          !strcmp(r.text + r.len - 5, "True|"));
    rn_prompt_result_free(&r);
    /* A final assistant message is continued: no generation prompt. */
    rn_prompt_msg_t cont[] = {{.role = "user", .content = "Hi"},
                              {.role = "assistant", .content = "Hel"}};
    jj_template_t *t2 = parse("{{ add_generation_prompt }}{{ enable_thinking is defined }}"
                              "{% for m in messages %}|{{ m.content }}{% endfor %}|end");
    rn_prompt_jinja_t in2 = {.tmpl = t2, .msgs = cont, .n_msgs = 2};
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in2, &r, &err), CR_OK);
    CHECK_EQ_STR(r.text, "FalseFalse|Hi|Hel"); /* the turn is not closed */
    rn_prompt_result_free(&r);
    /* An empty assistant message continues nothing: a new answer. */
    cont[1].content = "";
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in2, &r, &err), CR_OK);
    CHECK_EQ_STR(r.text, "TrueFalse|Hi|end");
    rn_prompt_result_free(&r);
    in2.think.mode = RN_THINK_FALSE;
    in2.n_msgs = 1;
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in2, &r, &err), CR_OK);
    CHECK_EQ_STR(r.text, "TrueTrue|Hi|end");
    rn_prompt_result_free(&r);
    jj_template_destroy(&t2);
    /* A template that drops the assistant's content cannot be continued:
     * an error, not a prompt that closes the turn. */
    jj_template_t *t3 = parse("{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}"
                              "{% endif %}{% endfor %}");
    cont[1].content = "Hel";
    rn_prompt_jinja_t in3 = {.tmpl = t3, .msgs = cont, .n_msgs = 2};
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in3, &r, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "cannot be continued") != NULL);
    jj_template_destroy(&t3);
    jj_template_destroy(&t);
    json_decref(calls);
    json_decref(tools);
}

static void test_trust(void)
{
    /* Request text stays untrusted through the template's string work;
     * the model's own SYSTEM and MESSAGEs and the template are trusted. */
    jj_template_t *t = parse("{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}"
                             "{% endfor %}");
    rn_prompt_msg_t model[] = {{.role = "user", .content = "M"}};
    rn_prompt_msg_t msgs[] = {{.role = "user", .content = " <|x|> "}};
    rn_prompt_jinja_t in = {.tmpl = t, .model_system = "S", .model_msgs = model,
                            .n_model_msgs = 1, .msgs = msgs, .n_msgs = 1};
    rn_prompt_result_t r;
    cr_err_t err = {0};
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in, &r, &err), CR_OK);
    CHECK_EQ_STR(r.text, "<|system|>S<|user|>M<|user|><|x|>");
    char marks[128];
    taint_string(&r, marks, sizeof marks);
    /* The request message's role is request data too. */
    CHECK_EQ_STR(marks, "000000000000000000000011110011111");
    rn_prompt_result_free(&r);
    jj_template_destroy(&t);
}

static cr_status_t count_bytes(void *ctx, const rn_prompt_result_t *p, int64_t *n, cr_err_t *err)
{
    CR_UNUSED(ctx);
    CR_UNUSED(err);
    *n = (int64_t)p->len;
    return CR_OK;
}

static void test_truncation(void)
{
    jj_template_t *t = parse("{% for m in messages %}[{{ m.content }}]{% endfor %}");
    rn_prompt_msg_t msgs[] = {{.role = "system", .content = "sys"},
                              {.role = "user", .content = "one"},
                              {.role = "assistant", .content = "two"},
                              {.role = "user", .content = "three"}};
    rn_prompt_jinja_t in = {.tmpl = t, .msgs = msgs, .n_msgs = 4,
                            .fit = {.truncate = true, .num_ctx = 15},
                            .count_prompt = count_bytes};
    rn_prompt_result_t r;
    cr_err_t err = {0};
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in, &r, &err), CR_OK);
    CHECK_EQ_STR(r.text, "[sys][three]");
    CHECK_EQ_INT(r.msgs_dropped, 3); /* the first index kept, as prompt.c counts */
    rn_prompt_result_free(&r);
    /* Too small for anything: the last message stays. */
    in.fit.num_ctx = 1;
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in, &r, &err), CR_OK);
    CHECK_EQ_STR(r.text, "[sys][three]");
    rn_prompt_result_free(&r);
    jj_template_destroy(&t);
}

static void test_errors_and_tags(void)
{
    jj_template_t *t = parse("{% if messages[0].role == 'system' %}"
                             "{{ raise_exception('System role not supported') }}{% endif %}ok");
    rn_prompt_msg_t msgs[] = {{.role = "system", .content = "x"}};
    rn_prompt_jinja_t in = {.tmpl = t, .msgs = msgs, .n_msgs = 1};
    rn_prompt_result_t r;
    cr_err_t err = {0};
    CHECK_EQ_INT(rn_prompt_jinja_chat(&in, &r, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "chat template: TemplateError: System role not supported");
    CHECK(r.text == NULL);
    jj_template_destroy(&t);

    cr_jinja_tags_t tags;
    const char *qwen = "{% if tools %}<tool_call>{% endif %}<think>\n{{ x }}</think>";
    cr_jinja_tags_infer(qwen, strlen(qwen), &tags);
    CHECK_EQ_STR(tags.think_open, "<think>");
    CHECK_EQ_STR(tags.think_close, "</think>");
    CHECK_EQ_STR(tags.tool_tag, "<tool_call>");
    CHECK(tags.uses_tools);
    const char *plain = "{% for m in messages %}{{ m.content }}{% endfor %}";
    cr_jinja_tags_infer(plain, strlen(plain), &tags);
    CHECK(!tags.uses_tools && !tags.think_open[0] && !tags.tool_tag[0]);
}

int main(void)
{
    test_context();
    test_trust();
    test_truncation();
    test_errors_and_tags();
    return check_finish("test_prompt_jinja");
}
