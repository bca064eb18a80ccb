/* test_prompt_jinja_prefill: real chat templates from
 * $CORRAL_TESTDATA/templates (skips with 77 without them):
 * - a final assistant message is continued (Ollama's prefill): the prompt
 *   for [user, assistant X] is exactly the prompt for [user] with the
 *   generation prompt, followed by X; the template's end-of-turn text is
 *   not in it, also when X ("end") occurs inside that text;
 * - the built-in parser each template's output format implies
 *   (cr_jinja_parser_infer). */
#include "lib/prelude.h"

#include "lib/chat_formats.h"
#include "services/runner/prompt/prompt_jinja.h"
#include "tests/unit/check.h"

#include <unistd.h>

static char dir_g[1024];

static char *read_template(const char *name, size_t *len)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s.jinja", dir_g, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *s = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1))) {
            if (fread(s, 1, (size_t)n, f) != (size_t)n) {
                free(s);
                s = NULL;
            } else {
                s[n] = '\0';
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return s;
}

static jj_template_t *load(const char *name)
{
    size_t len = 0;
    char *src = read_template(name, &len);
    CHECK_MSG(src != NULL, "%s/%s.jinja unreadable", dir_g, name);
    if (!src)
        return NULL;
    cr_err_t err = {0};
    jj_template_t *t = jj_template_new(src, len, &err);
    CHECK_MSG(t != NULL, "%s: %s", name, err.msg);
    free(src);
    return t;
}

static char *render(jj_template_t *t, const rn_prompt_msg_t *msgs, size_t n)
{
    rn_prompt_jinja_t in = {.tmpl = t, .bos_token = "<s>", .eos_token = "</s>",
                            .msgs = msgs, .n_msgs = n};
    rn_prompt_result_t r;
    cr_err_t err = {0};
    cr_status_t st = rn_prompt_jinja_chat(&in, &r, &err);
    CHECK_MSG(st == CR_OK, "%s", err.msg);
    if (st)
        return NULL;
    char *s = strdup(r.text);
    rn_prompt_result_free(&r);
    return s;
}

static void check_prefill(const char *name)
{
    jj_template_t *t = load(name);
    if (!t)
        return;
    rn_prompt_msg_t msgs[] = {{.role = "user", .content = "Hi"},
                              {.role = "assistant", .content = NULL}};
    char *gen = render(t, msgs, 1);
    const char *prefixes[] = {"Hel", "end", "The answer is"};
    for (size_t i = 0; gen && i < CR_ARRAY_LEN(prefixes); i++) {
        msgs[1].content = prefixes[i];
        char *cont = render(t, msgs, 2);
        char want[4096];
        snprintf(want, sizeof want, "%s%s", gen, prefixes[i]);
        CHECK_MSG(cont && !strcmp(cont, want), "%s, prefill \"%s\":\n got: %s\nwant: %s", name,
                  prefixes[i], cont ? cont : "(null)", want);
        free(cont);
    }
    free(gen);
    jj_template_destroy(&t);
}

static void check_parser(const char *name, const char *want)
{
    size_t len = 0;
    char *src = read_template(name, &len);
    CHECK_MSG(src != NULL, "%s unreadable", name);
    if (!src)
        return;
    const char *got = cr_jinja_parser_infer(src, len);
    CHECK_MSG(want ? got && !strcmp(got, want) : got == NULL, "%s: parser %s, want %s", name,
              got ? got : "(none)", want ? want : "(none)");
    free(src);
}

int main(void)
{
    const char *root = getenv("CORRAL_TESTDATA");
    if (!root || !*root)
        return check_skip("test_prompt_jinja_prefill", "CORRAL_TESTDATA not set");
    snprintf(dir_g, sizeof dir_g, "%s/templates", root);
    char probe[1200];
    snprintf(probe, sizeof probe, "%s/Qwen-Qwen2.5-7B-Instruct.jinja", dir_g);
    if (access(probe, R_OK) != 0)
        return check_skip("test_prompt_jinja_prefill", "no templates in the testdata");

    check_prefill("Qwen-Qwen2.5-7B-Instruct");      /* <|im_end|> */
    check_prefill("meta-llama-Llama-3.1-8B-Instruct"); /* <|eot_id|>, content trimmed */
    check_prefill("google-gemma-2-2b-it");          /* <end_of_turn>, role renamed */
    check_prefill("microsoft-Phi-3.5-mini-instruct"); /* <|end|> */

    check_parser("openai-gpt-oss-120b", "harmony");
    check_parser("Qwen3-Coder", "qwen3-coder");
    check_parser("Qwen3.5-4B", NULL);                    /* thinks: tag splitting */
    check_parser("ByteDance-Seed-OSS", NULL);            /* <seed:tool_call> */
    check_parser("meetkai-functionary-medium-v3.1", NULL); /* <function=..> JSON */
    check_parser("Qwen-Qwen2.5-7B-Instruct", NULL);
    return check_finish("test_prompt_jinja_prefill");
}
