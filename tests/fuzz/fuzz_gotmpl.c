/* fuzz_gotmpl: Go templates as Modelfiles and GGUF files carry them
 * (services/runner/template): parsed as Ollama parses them, then run over
 * a chat like the runner's, with a small step budget and output cap. */
#include "tests/fuzz/fuzz.h"

#include <jansson.h>

#include "lib/buf.h"
#include "services/runner/template/template.h"

static rn_val_t *g_data;

static const char DATA_JSON[] =
    "{\"System\":\"be brief\",\"Prompt\":\"hi <b>\",\"Response\":\"\",\"Suffix\":\"\","
    "\"Think\":true,\"IsThinkSet\":true,"
    "\"Messages\":[{\"Role\":\"system\",\"Content\":\"s\"},"
    "{\"Role\":\"user\",\"Content\":\"what is 2+2?\",\"Images\":[]},"
    "{\"Role\":\"assistant\",\"Content\":\"\",\"Thinking\":\"hm\","
    "\"ToolCalls\":[{\"Function\":{\"Name\":\"add\",\"Arguments\":{\"a\":2,\"b\":2}}}]},"
    "{\"Role\":\"tool\",\"Content\":\"4\",\"ToolName\":\"add\"}],"
    "\"Tools\":[{\"Type\":\"function\",\"Function\":{\"Name\":\"add\",\"Description\":\"adds\","
    "\"Parameters\":{\"Type\":\"object\",\"Required\":[\"a\"],"
    "\"Properties\":{\"a\":{\"Type\":\"integer\"}}}}}]}";

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    json_error_t jerr;
    json_t *j = json_loads(DATA_JSON, 0, &jerr);
    cr_err_t err = {0};
    if (!j || rn_val_from_json(j, RN_JSON_ORDERED | RN_JSON_KEEP_INTS, &g_data, &err) != CR_OK) {
        fprintf(stderr, "fuzz_gotmpl: bad built-in data\n");
        exit(1);
    }
    json_decref(j);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rn_tmpl_t *t = NULL;
    cr_err_t err = {0};
    if (rn_tmpl_parse((const char *)data, size, &t, &err) != CR_OK)
        return 0;
    (void)rn_tmpl_uses(t, "messages");
    char tag[64];
    rn_tmpl_tool_tag(t, tag, sizeof tag);
    cr_buf_t out;
    cr_buf_init(&out, 1u << 20);
    rn_tmpl_spans_t spans = {0};
    rn_tmpl_opts_t opts = {.max_steps = 200000, .now_unix = 1700000000, .spans = &spans};
    (void)rn_tmpl_exec(t, g_data, &opts, &out, &err);
    rn_tmpl_spans_free(&spans);
    cr_buf_reset(&out);
    opts = (rn_tmpl_opts_t){.max_steps = 200000, .now_unix = 1700000000,
                            .cut_after_response = true};
    (void)rn_tmpl_exec(t, g_data, &opts, &out, &err);
    cr_buf_free(&out);
    rn_tmpl_destroy(&t);
    return 0;
}
