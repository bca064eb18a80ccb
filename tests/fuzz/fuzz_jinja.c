/* fuzz_jinja: Jinja chat templates as GGUF files and Hugging Face folders
 * carry them (services/runner/jinja): parsed, then rendered over a chat
 * with tools, with small step, output and memory budgets. */
#include "tests/fuzz/fuzz.h"

#include <jansson.h>

#include "lib/buf.h"
#include "services/runner/jinja/jinja.h"

static json_t *g_ctx;

static const char CTX_JSON[] =
    "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"add_generation_prompt\":true,"
    "\"enable_thinking\":false,"
    "\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"what is 2+2?\"}]},"
    "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"hm\","
    "\"tool_calls\":[{\"type\":\"function\",\"id\":\"c1\","
    "\"function\":{\"name\":\"add\",\"arguments\":{\"a\":2,\"b\":2}}}]},"
    "{\"role\":\"tool\",\"content\":\"4\",\"tool_call_id\":\"c1\"},"
    "{\"role\":\"user\",\"content\":\"thanks\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"add\","
    "\"description\":\"adds\",\"parameters\":{\"type\":\"object\",\"required\":[\"a\"],"
    "\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"number\"}}}}}]}";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    json_error_t jerr;
    g_ctx = json_loads(CTX_JSON, 0, &jerr);
    if (!g_ctx) {
        fprintf(stderr, "fuzz_jinja: bad built-in context: %s\n", jerr.text);
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr_err_t err = {0};
    jj_template_t *t = jj_template_new((const char *)data, size, &err);
    if (!t)
        return 0;
    jj_render_opts_t opts = {0};
    jj_limits_default(&opts.limits);
    opts.limits.max_steps = 200000;
    opts.limits.max_output_bytes = 1u << 20;
    opts.limits.max_memory_bytes = 32u << 20;
    opts.now = 1700000000;
    const json_t *untrusted[] = {json_object_get(g_ctx, "messages")};
    opts.untrusted = untrusted;
    opts.n_untrusted = 1;
    cr_buf_t out, taint;
    cr_buf_init(&out, 2u << 20);
    cr_buf_init(&taint, 2u << 20);
    opts.taint = &taint;
    if (jj_render(t, g_ctx, &opts, &out, &err) == CR_OK && taint.len != out.len) {
        fprintf(stderr, "fuzz_jinja: %zu output bytes, %zu taint bytes\n", out.len, taint.len);
        abort();
    }
    cr_buf_free(&taint);
    cr_buf_free(&out);
    jj_template_destroy(&t);
    return 0;
}
