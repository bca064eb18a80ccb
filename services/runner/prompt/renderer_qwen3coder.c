/* renderer_qwen3coder.c: the "qwen3-coder" renderer, as Ollama's
 * Qwen3CoderRenderer writes the prompt.
 *
 * ChatML (`<|im_start|>ROLE\n...<|im_end|>\n`). The first system message is
 * the system prompt (later ones are dropped); with tools and no system
 * message it is "You are Qwen, a helpful AI assistant that can interact
 * with a computer to solve tasks.", followed by the tools in Qwen3-Coder's
 * XML (`<tools><function><name>..</name><description>..</description>
 * <parameters><parameter><name>..</name><type>..</type><description>..
 * </description>[<KEY>..</KEY>]</parameter>...</parameters></function>
 * </tools>`, properties in the request's order; besides type and
 * description a property shows anyOf, enum, items, properties, required,
 * and the parameters object $defs, items, required, as JSON, keys sorted
 * where Ollama's order is a Go map's) and the calling instructions. An
 * assistant's calls are `<tool_call>\n<function=NAME>\n<parameter=ARG>\n
 * VALUE\n</parameter>\n</function>\n</tool_call>` (strings as they are,
 * other values as JSON / Go's %v); consecutive tool results share one user
 * turn, each in <tool_response>; a last assistant message is a prefill. */
#include "lib/prelude.h"
#include "services/runner/prompt/renderer.h"

#include "lib/gotext.h"
#include "services/runner/output/calljson.h"

static const char DEFAULT_SYSTEM[] =
    "You are Qwen, a helpful AI assistant that can interact with a computer to "
    "solve tasks.";

static const char INSTRUCTIONS[] =
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

static const char *nz(const char *s)
{
    return s ? s : "";
}

static cr_status_t data(const rn_prompt_out_t *o, const char *s)
{
    return rn_prompt_out_data(o, s, strlen(s), false);
}

/* A value as Go's %v prints it (numbers decode as float64), or JSON for
 * arrays and objects; strings as they are. */
static cr_status_t put_value(const rn_prompt_out_t *o, const json_t *v, cr_buf_t *scratch)
{
    char num[CR_FLOAT_BUF];
    switch (json_typeof(v)) {
    case JSON_STRING:
        return rn_prompt_out_data(o, json_string_value(v), json_string_length(v), false);
    case JSON_INTEGER:
    case JSON_REAL:
        cr_float_format(json_number_value(v), 64, CR_FLOAT_G, num, sizeof num);
        return data(o, num);
    case JSON_TRUE:
        return rn_prompt_out_lit(o, "true");
    case JSON_FALSE:
        return rn_prompt_out_lit(o, "false");
    case JSON_NULL:
        return rn_prompt_out_lit(o, "null");
    default: {
        cr_buf_reset(scratch);
        cr_status_t st = rn_output_json(scratch, v, true);
        return st ? st : rn_prompt_out_data(o, scratch->data, scratch->len, false);
    }
    }
}

/* `\n<KEY>VALUE</KEY>` for each present key of keys (absent and null ones
 * are skipped; empty arrays too, as Go's omitempty drops them). */
static cr_status_t put_extra(const rn_prompt_out_t *o, const json_t *obj,
                             const char *const *keys, cr_buf_t *scratch)
{
    cr_status_t st = CR_OK;
    for (size_t i = 0; !st && keys[i]; i++) {
        const json_t *v = json_object_get(obj, keys[i]);
        if (!v || json_is_null(v) || (json_is_array(v) && !json_array_size(v)))
            continue;
        st = rn_prompt_out_lit(o, "\n<");
        if (!st)
            st = data(o, keys[i]);
        if (!st)
            st = rn_prompt_out_lit(o, ">");
        if (!st)
            st = put_value(o, v, scratch);
        if (!st)
            st = rn_prompt_out_lit(o, "</");
        if (!st)
            st = data(o, keys[i]);
        if (!st)
            st = rn_prompt_out_lit(o, ">");
    }
    return st;
}

static cr_status_t put_tool(const rn_prompt_out_t *o, const json_t *tool, cr_buf_t *scratch)
{
    static const char *const prop_keys[] = {"anyOf", "enum", "items", "properties",
                                            "required", NULL};
    static const char *const param_keys[] = {"$defs", "items", "required", NULL};
    const json_t *fn = json_object_get(tool, "function");
    const json_t *params = json_object_get(fn, "parameters");
    const char *desc = json_string_value(json_object_get(fn, "description"));
    cr_status_t st = rn_prompt_out_lit(o, "\n<function>\n<name>");
    if (!st)
        st = data(o, nz(json_string_value(json_object_get(fn, "name"))));
    if (!st)
        st = rn_prompt_out_lit(o, "</name>");
    if (!st && desc && *desc) {
        st = rn_prompt_out_lit(o, "\n<description>");
        if (!st)
            st = data(o, desc);
        if (!st)
            st = rn_prompt_out_lit(o, "</description>");
    }
    if (!st)
        st = rn_prompt_out_lit(o, "\n<parameters>");
    const char *name;
    json_t *prop;
    json_object_foreach(json_object_get(params, "properties"), name, prop) {
        if (st)
            break;
        const json_t *type = json_object_get(prop, "type");
        const char *pdesc = json_string_value(json_object_get(prop, "description"));
        st = rn_prompt_out_lit(o, "\n<parameter>\n<name>");
        if (!st)
            st = data(o, name);
        if (!st)
            st = rn_prompt_out_lit(o, "</name>");
        if (!st && (json_is_string(type) || json_array_size(type))) {
            st = rn_prompt_out_lit(o, "\n<type>");
            /* one type as is, several as a JSON list */
            if (!st)
                st = json_is_string(type) ? data(o, json_string_value(type))
                     : json_array_size(type) == 1
                         ? data(o, nz(json_string_value(json_array_get(type, 0))))
                         : put_value(o, type, scratch);
            if (!st)
                st = rn_prompt_out_lit(o, "</type>");
        }
        if (!st && pdesc && *pdesc) {
            st = rn_prompt_out_lit(o, "\n<description>");
            if (!st)
                st = data(o, pdesc);
            if (!st)
                st = rn_prompt_out_lit(o, "</description>");
        }
        if (!st)
            st = put_extra(o, prop, prop_keys, scratch);
        if (!st)
            st = rn_prompt_out_lit(o, "\n</parameter>");
    }
    if (!st)
        st = put_extra(o, params, param_keys, scratch);
    if (!st)
        st = rn_prompt_out_lit(o, "\n</parameters>\n</function>");
    return st;
}

static cr_status_t put_calls(const rn_prompt_out_t *o, const json_t *calls,
                             cr_buf_t *scratch)
{
    cr_status_t st = CR_OK;
    for (size_t j = 0; !st && j < json_array_size(calls); j++) {
        const json_t *fn = json_object_get(json_array_get(calls, j), "function");
        st = rn_prompt_out_lit(o, "\n<tool_call>\n<function=");
        if (!st)
            st = data(o, nz(json_string_value(json_object_get(fn, "name"))));
        if (!st)
            st = rn_prompt_out_lit(o, ">");
        const char *arg;
        json_t *v;
        json_object_foreach(json_object_get(fn, "arguments"), arg, v) {
            if (st)
                break;
            st = rn_prompt_out_lit(o, "\n<parameter=");
            if (!st)
                st = data(o, arg);
            if (!st)
                st = rn_prompt_out_lit(o, ">\n");
            if (!st)
                st = put_value(o, v, scratch);
            if (!st)
                st = rn_prompt_out_lit(o, "\n</parameter>");
        }
        if (!st)
            st = rn_prompt_out_lit(o, "\n</function>\n</tool_call>");
    }
    return st;
}

static cr_status_t render(const rn_prompt_msg_t *msgs, size_t n, const json_t *tools,
                          const rn_prompt_think_t *think, const rn_prompt_opts_t *opts,
                          const rn_prompt_out_t *o, cr_err_t *err)
{
    CR_UNUSED(think);
    cr_buf_t scratch;
    cr_buf_init(&scratch, opts->max_bytes ? opts->max_bytes : RN_PROMPT_DEFAULT_MAX_BYTES);
    const rn_prompt_msg_t *sys = NULL;
    size_t last = SIZE_MAX; /* the last message that is not a system one */
    for (size_t i = 0; i < n; i++) {
        if (strcmp(nz(msgs[i].role), "system"))
            last = i;
        else if (!sys && *nz(msgs[i].content))
            sys = &msgs[i];
    }
    bool has_tools = json_array_size(tools) > 0;
    cr_status_t st = CR_OK;
    if (sys || has_tools) {
        st = rn_prompt_out_lit(o, "<|im_start|>system\n");
        if (!st)
            st = sys ? rn_prompt_out_data(o, sys->content, strlen(sys->content), sys->trusted)
                     : rn_prompt_out_lit(o, DEFAULT_SYSTEM);
        if (!st && has_tools) {
            st = rn_prompt_out_lit(
                o, "\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>");
            for (size_t i = 0; !st && i < json_array_size(tools); i++)
                st = put_tool(o, json_array_get(tools, i), &scratch);
            if (!st)
                st = rn_prompt_out_lit(o, "\n</tools>");
            if (!st)
                st = rn_prompt_out_lit(o, INSTRUCTIONS);
        }
        if (!st)
            st = rn_prompt_out_lit(o, "<|im_end|>\n");
    }
    const char *prev_role = NULL;
    for (size_t i = 0; !st && i < n; i++) {
        const rn_prompt_msg_t *m = &msgs[i];
        const char *role = nz(m->role), *content = nz(m->content);
        if (!strcmp(role, "system"))
            continue;
        bool is_last = i == last;
        bool prefill = is_last && !strcmp(role, "assistant");
        /* the next message that is not a system one */
        const char *next_role = NULL;
        for (size_t j = i + 1; j < n && !next_role; j++)
            if (strcmp(nz(msgs[j].role), "system"))
                next_role = nz(msgs[j].role);
        if (!strcmp(role, "assistant")) {
            st = rn_prompt_out_lit(o, "<|im_start|>assistant\n");
            if (json_array_size(m->tool_calls)) {
                if (!st && *content) {
                    st = rn_prompt_out_data(o, content, strlen(content), m->trusted);
                    if (!st)
                        st = rn_prompt_out_lit(o, "\n");
                }
                if (!st)
                    st = put_calls(o, m->tool_calls, &scratch);
                if (!st)
                    st = rn_prompt_out_lit(o, "<|im_end|>\n");
            } else {
                if (!st)
                    st = rn_prompt_out_data(o, content, strlen(content), m->trusted);
                if (!st && !prefill)
                    st = rn_prompt_out_lit(o, "<|im_end|>\n");
            }
        } else if (!strcmp(role, "tool")) {
            if (!prev_role || strcmp(prev_role, "tool"))
                st = rn_prompt_out_lit(o, "<|im_start|>user");
            if (!st)
                st = rn_prompt_out_lit(o, "\n<tool_response>\n");
            if (!st)
                st = rn_prompt_out_data(o, content, strlen(content), m->trusted);
            if (!st)
                st = rn_prompt_out_lit(o, "\n</tool_response>");
            if (!st && (!next_role || strcmp(next_role, "tool")))
                st = rn_prompt_out_lit(o, "<|im_end|>\n");
        } else {
            st = rn_prompt_out_lit(o, "<|im_start|>");
            if (!st)
                st = rn_prompt_out_data(o, role, strlen(role), m->trusted);
            if (!st)
                st = rn_prompt_out_lit(o, "\n");
            if (!st)
                st = rn_prompt_out_data(o, content, strlen(content), m->trusted);
            if (!st)
                st = rn_prompt_out_lit(o, "<|im_end|>\n");
        }
        if (!st && is_last && !prefill)
            st = rn_prompt_out_lit(o, "<|im_start|>assistant\n");
        prev_role = role;
    }
    if (st)
        cr_err_set(err, st, "qwen3-coder renderer: %s", cr_status_str(st));
    cr_buf_free(&scratch);
    return st;
}

const rn_prompt_renderer_t rn_prompt_renderer_qwen3coder = {
    .name = "qwen3-coder",
    .render = render,
};
