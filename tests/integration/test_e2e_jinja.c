/* test_e2e_jinja.c: a GGUF's own Jinja chat template through the whole
 * services.
 *
 * A synthetic model carries tokenizer.chat_template (a qwen3-like template
 * written for this test, with markers no Go template is autodetected
 * from) and is created without TEMPLATE. `corral serve` runs with
 * CORRAL_TEST_SCRIPT, so the model answers THE_ANSWER. Checked: `show
 * --template` prints the Jinja source and the capabilities come from it;
 * chat renders through it and the answer's thinking is split by its
 * <think> tags (the prompt already opened one); a conversation the template refuses (raise_exception) is a
 * 400 with the template's message; and a template the renderer cannot
 * parse fails the create naming the construct. */
#include "lib/prelude.h"

#include <stdlib.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

/* The template's generation prompt opens <think> (as Qwen3's thinking
 * templates do), so the model's answer starts inside its reasoning. */
static const char THE_ANSWER[] = "reasoning here</think>final answer";

static const char JINJA[] =
    "{%- if messages[0].role == 'system' and messages[0].content == 'refuse' -%}\n"
    "{{- raise_exception('System prompt refused') -}}\n"
    "{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    "[{{ m.role | upper }}]"
    "{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif -%}"
    "{{ m.content | trim }}[/END]\n"
    "{%- endfor -%}\n"
    "{%- if tools %}[TOOLS]{{ tools | tojson }}{% endif -%}\n"
    "{%- if add_generation_prompt %}[ASSISTANT]<think>\n{% endif -%}\n";

static bool synth(const char *name, const char *jinja)
{
    char path[1200], gguf[1200], exe[1200];
    snprintf(path, sizeof path, "%s/%s.jinja", T.tmp, name);
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", T.tmp, name);
    snprintf(exe, sizeof exe, "%s/corral-gguf-synth", T.bin_dir);
    if (!e2e_write_file(path, jinja))
        return false;
    char cmd[4000];
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --seed 11 --ctx 1024 --chat-template '%s'", exe,
             gguf, path);
    return system(cmd) == 0;
}

static void test_show(void)
{
    char *out = NULL;
    int rc = e2e_cli(&T, NULL, &out, "show", "jinja", "--template", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(out && strstr(out, "raise_exception('System prompt refused')"), "%s",
              out ? out : "");
    free(out);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/show", "{\"model\":\"jinja\"}", NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    json_t *caps = json_object_get(j, "capabilities");
    bool thinking = false, tools = false;
    for (size_t i = 0; i < json_array_size(caps); i++) {
        const char *c = json_string_value(json_array_get(caps, i));
        thinking |= c && !strcmp(c, "thinking");
        tools |= c && !strcmp(c, "tools");
    }
    CHECK_MSG(thinking && tools, "capabilities: %s", r.body ? r.body : "");
    json_decref(j);
    e2e_resp_free(&r);
}

static void test_chat(void)
{
    e2e_resp_t r = e2e_http(&T, "POST", "/api/chat",
                            "{\"model\":\"jinja\",\"stream\":false,\"messages\":"
                            "[{\"role\":\"user\",\"content\":\"why?\"}]}",
                            NULL, NULL);
    CHECK_MSG(r.status == 200, "%ld %s", (long)r.status, r.body ? r.body : "");
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_EQ_STR(e2e_jstr(j, "message.thinking"), "reasoning here");
    CHECK_EQ_STR(e2e_jstr(j, "message.content"), "final answer");
    CHECK(json_integer_value(json_object_get(j, "prompt_eval_count")) > 5);
    json_decref(j);
    e2e_resp_free(&r);

    r = e2e_http(&T, "POST", "/api/chat",
                 "{\"model\":\"jinja\",\"stream\":false,\"messages\":"
                 "[{\"role\":\"system\",\"content\":\"refuse\"},"
                 "{\"role\":\"user\",\"content\":\"hi\"}]}",
                 NULL, NULL);
    CHECK_EQ_INT(r.status, 400);
    CHECK_MSG(r.body && strstr(r.body, "TemplateError: System prompt refused"), "%s",
              r.body ? r.body : "");
    e2e_resp_free(&r);
}

static void test_bad_template(void)
{
    if (!synth("badjinja", "{% for m in messages %}{{ m.content }}{% endfor %}\n"
                           "{% include 'tools.jinja' %}"))
        return;
    char mf[1200], log[1200], cmd[4000];
    snprintf(mf, sizeof mf, "%s/Modelfile", T.tmp);
    snprintf(log, sizeof log, "%s/create.out", T.tmp);
    CHECK(e2e_write_file(mf, "FROM ./badjinja.gguf\n"));
    /* The CLI prints the error on stderr: both streams into one file (the
     * environment already points it at this test's corral). */
    snprintf(cmd, sizeof cmd, "'%s/corral' create badjinja -f '%s' > '%s' 2>&1", T.bin_dir,
             mf, log);
    CHECK(system(cmd) != 0);
    FILE *f = fopen(log, "r");
    char out[4096] = "";
    if (f) {
        size_t n = fread(out, 1, sizeof out - 1, f);
        out[n] = '\0';
        fclose(f);
    }
    CHECK_MSG(strstr(out, "Encountered unknown tag 'include' (line 2)"), "%s", out);
}

int main(void)
{
    char script[1200];
    snprintf(script, sizeof script, "/tmp/corral-e2e-jinja-%d.txt", (int)getpid());
    char text[256];
    snprintf(text, sizeof text, "%s\n", THE_ANSWER);
    if (!e2e_write_file(script, text))
        return 1;
    setenv("CORRAL_TEST_SCRIPT", script, 1);
    if (!e2e_start(&T)) {
        unlink(script);
        return 1;
    }
    bool made = synth("jinja", JINJA) && e2e_create(&T, "jinja", "FROM ./jinja.gguf\n");
    CHECK(made);
    if (made) {
        test_show();
        test_chat();
    }
    test_bad_template();
    e2e_stop(&T);
    unlink(script);
    return check_finish("e2e_jinja");
}
