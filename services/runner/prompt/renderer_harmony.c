/* renderer_harmony.c: the "harmony" renderer: gpt-oss's prompt, byte for
 * byte what Ollama's gpt-oss template renders (Ollama runs gpt-oss through
 * that template and the harmony parser).
 *
 *   <|start|>system<|message|>You are ChatGPT, a large language model
 *   trained by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: DATE
 *   [\n\nReasoning: LEVEL]\n\n# Valid channels: analysis, commentary,
 *   final. Channel must be included for every message.[\nCalls to these
 *   tools must go to the commentary channel: 'functions'.]<|end|>
 *   [<|start|>developer<|message|>[# Tools ... } // namespace functions]
 *   [\n\n# Instructions\n\nSYSTEM]<|end|>]  MESSAGES  <|start|>assistant
 *
 * LEVEL is the request's think level ("max" becomes "high", as Ollama maps
 * it for gpt-oss), "medium" for think true or unset; think false leaves
 * the line out (gpt-oss still reasons: the parser still returns it). As in
 * the template, messages are collated first (all system contents joined by
 * blank lines become the instructions; consecutive messages of one role
 * but tool merge); tools are declared under their harmony names
 * (parser_harmony.h); an assistant's thinking is kept only after the last
 * user message; a last assistant message is a prefill (left open, no
 * generation prompt). The built-in tools browser.search/open/find and
 * python, when offered, are declared in the system message as gpt-oss
 * knows them (not in the functions namespace); their calls go to the
 * analysis channel and their results come from `browser.x`/`python`. */
#include "lib/prelude.h"
#include "services/runner/prompt/renderer.h"

#include "services/runner/output/calljson.h"
#include "services/runner/output/parser_harmony.h"

#include <time.h>

typedef struct cmsg {
    const char *role, *content, *thinking, *tool_name;
    const json_t *tool_calls;
    bool trusted;
    char *owned; /* merged content, freed */
} cmsg_t;

static const char *nz(const char *s)
{
    return s ? s : "";
}

static bool is_builtin(const char *name)
{
    return !strcmp(name, "browser.open") || !strcmp(name, "browser.search") ||
           !strcmp(name, "browser.find") || !strcmp(name, "python");
}

/* Ollama's collate: consecutive messages of one role (tool excepted) merge
 * with a blank line. */
static cr_status_t collate(const rn_prompt_msg_t *msgs, size_t n, cmsg_t *out,
                           size_t *n_out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const rn_prompt_msg_t *m = &msgs[i];
        const char *role = nz(m->role);
        if (k && !strcmp(out[k - 1].role, role) && strcmp(role, "tool")) {
            char *merged = NULL;
            if (asprintf(&merged, "%s\n\n%s", out[k - 1].content, nz(m->content)) < 0)
                return CR_E_NOMEM;
            free(out[k - 1].owned);
            out[k - 1].owned = merged;
            out[k - 1].content = merged;
            out[k - 1].trusted = out[k - 1].trusted && m->trusted;
            continue;
        }
        out[k++] = (cmsg_t){.role = role, .content = nz(m->content),
                            .thinking = nz(m->thinking), .tool_name = nz(m->tool_name),
                            .tool_calls = m->tool_calls, .trusted = m->trusted};
    }
    *n_out = k;
    return CR_OK;
}

/* The type of one property: its types joined by " | " ("any" without). */
static cr_status_t put_type(const rn_prompt_out_t *o, const json_t *prop)
{
    const json_t *t = json_object_get(prop, "type");
    if (json_is_string(t))
        return rn_prompt_out_data(o, json_string_value(t), json_string_length(t), false);
    cr_status_t st = CR_OK;
    size_t n = 0;
    for (size_t i = 0; !st && json_is_array(t) && i < json_array_size(t); i++) {
        const json_t *e = json_array_get(t, i);
        if (!json_is_string(e))
            continue;
        if (n++)
            st = rn_prompt_out_lit(o, " | ");
        if (!st)
            st = rn_prompt_out_data(o, json_string_value(e), json_string_length(e), false);
    }
    return st ? st : (n ? CR_OK : rn_prompt_out_lit(o, "any"));
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* One tool of the functions namespace. */
static cr_status_t put_tool(const rn_prompt_out_t *o, const json_t *tools, size_t i)
{
    const json_t *fn = json_object_get(json_array_get(tools, i), "function");
    const char *desc = json_string_value(json_object_get(fn, "description"));
    const json_t *props =
        json_object_get(json_object_get(fn, "parameters"), "properties");
    char name[RN_HARMONY_NAME_MAX];
    cr_status_t st = rn_parser_harmony_name(tools, i, name, sizeof name);
    if (st)
        return st;
    st = rn_prompt_out_lit(o, "\n");
    if (!st && desc && *desc) {
        st = rn_prompt_out_lit(o, "\n// ");
        if (!st)
            st = rn_prompt_out_data(o, desc, strlen(desc), false);
    }
    if (!st)
        st = rn_prompt_out_lit(o, "\ntype ");
    if (!st)
        st = rn_prompt_out_data(o, name, strlen(name), false);
    size_t n = json_is_object(props) ? json_object_size(props) : 0;
    if (st || !n)
        return st ? st : rn_prompt_out_lit(o, " = () => any;");
    /* A Go map ranges in key order. */
    const char **keys = malloc(n * sizeof *keys);
    if (!keys)
        return CR_E_NOMEM;
    size_t k = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)props, key, val)
        keys[k++] = key;
    qsort(keys, n, sizeof *keys, cmp_str);
    st = rn_prompt_out_lit(o, " = (_: {");
    for (k = 0; !st && k < n; k++) {
        const json_t *prop = json_object_get(props, keys[k]);
        const char *pdesc = json_string_value(json_object_get(prop, "description"));
        if (pdesc && *pdesc) {
            st = rn_prompt_out_lit(o, "\n  // ");
            if (!st)
                st = rn_prompt_out_data(o, pdesc, strlen(pdesc), false);
        }
        if (!st)
            st = rn_prompt_out_lit(o, "\n  ");
        if (!st)
            st = rn_prompt_out_data(o, keys[k], strlen(keys[k]), false);
        if (!st)
            st = rn_prompt_out_lit(o, ": ");
        if (!st)
            st = put_type(o, prop);
        if (!st)
            st = rn_prompt_out_lit(o, ",");
    }
    free(keys);
    return st ? st : rn_prompt_out_lit(o, "\n}) => any;");
}

/* gpt-oss's built-in tools, declared in the system message when a request
 * offers a tool of that name (the text is the model's, as Ollama's gpt-oss
 * template carries it). */
static const char BROWSER_HEAD[] =
    "\n\n## browser\n\n// Tool for browsing.\n// The `cursor` appears in brackets "
    "before each browsing display: `[{cursor}]`.\n// Cite information from the tool "
    "using the following format:\n// `\u3010{cursor}\u2020L{line_start}(-L{line_end})?"
    "\u3011`, for example: `\u30106\u2020L9-L11\u3011` or `\u30108\u2020L3\u3011`.\n"
    "// Do not quote more than 10 words directly from the tool output.\n// sources=web "
    "(default: web)\nnamespace browser {";
static const char BROWSER_SEARCH[] =
    "\n\n// Searches for information related to `query` and displays `topn` results.\n"
    "type search = (_: {\nquery: string,\ntopn?: number, // default: 10\nsource?: "
    "string,\n}) => any;";
static const char BROWSER_OPEN[] =
    "\n\n// Opens the link `id` from the page indicated by `cursor` starting at line "
    "number `loc`, showing `num_lines` lines.\n// Valid link ids are displayed with the "
    "formatting: `\u3010{id}\u2020.*\u3011`.\n// If `cursor` is not provided, the most "
    "recent page is implied.\n// If `id` is a string, it is treated as a fully qualified "
    "URL associated with `source`.\n// If `loc` is not provided, the viewport will be "
    "positioned at the beginning of the document or centered on the most relevant "
    "passage, if available.\n// Use this function without `id` to scroll to a new "
    "location of an opened page.\ntype open = (_: {\nid?: number | string, // default: "
    "-1\ncursor?: number, // default: -1\nloc?: number, // default: -1\nnum_lines?: "
    "number, // default: -1\nview_source?: boolean, // default: false\nsource?: "
    "string,\n}) => any;";
static const char BROWSER_FIND[] =
    "\n\n// Finds exact matches of `pattern` in the current page, or the page given by "
    "`cursor`.\ntype find = (_: {\npattern: string,\ncursor?: number, // default: -1\n"
    "}) => any;";
static const char BROWSER_TAIL[] = "\n\n} // namespace browser";
static const char PYTHON[] =
    "\n\n## python\n\nUse this tool to execute Python code in your chain of thought. "
    "The code will not be shown to the user. This tool should be used for internal "
    "reasoning, but not for code that is intended to be visible to the user (e.g. when "
    "creating plots, tables, or files).\n\nWhen you send a message containing Python "
    "code to python, it will be executed in a stateful Jupyter notebook environment. "
    "python will respond with the output of the execution or time out after 120.0 "
    "seconds. The drive at '/mnt/data' can be used to save and persist user files. "
    "Internet access for this session is UNKNOWN. Depends on the cluster.";

static bool offers(const json_t *tools, const char *name)
{
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const char *n = json_string_value(json_object_get(
            json_object_get(json_array_get(tools, i), "function"), "name"));
        if (n && !strcmp(n, name))
            return true;
    }
    return false;
}

static cr_status_t put_builtin_tools(const rn_prompt_out_t *o, const json_t *tools)
{
    bool search = offers(tools, "browser.search"), open = offers(tools, "browser.open");
    bool find = offers(tools, "browser.find"), python = offers(tools, "python");
    bool browser = search || open || find;
    if (!browser && !python)
        return CR_OK;
    cr_status_t st = rn_prompt_out_lit(o, "\n\n# Tools");
    if (!st && browser) {
        st = rn_prompt_out_lit(o, BROWSER_HEAD);
        if (!st && search)
            st = rn_prompt_out_lit(o, BROWSER_SEARCH);
        if (!st && open)
            st = rn_prompt_out_lit(o, BROWSER_OPEN);
        if (!st && find)
            st = rn_prompt_out_lit(o, BROWSER_FIND);
        if (!st)
            st = rn_prompt_out_lit(o, BROWSER_TAIL);
    }
    if (!st && python)
        st = rn_prompt_out_lit(o, PYTHON);
    return st;
}

static cr_status_t put_system(const rn_prompt_out_t *o, const rn_prompt_think_t *think,
                              const rn_prompt_opts_t *opts, const json_t *tools,
                              bool functions)
{
    time_t now = opts->now_unix ? (time_t)opts->now_unix : time(NULL);
    struct tm tm;
    char date[32] = "";
    if (localtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%d", &tm);
    cr_status_t st = rn_prompt_out_lit(
        o, "<|start|>system<|message|>You are ChatGPT, a large language model trained "
           "by OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: ");
    if (!st)
        st = rn_prompt_out_lit(o, date);
    const char *level = NULL;
    if (think->mode == RN_THINK_LEVEL && think->level && *think->level)
        level = !strcmp(think->level, "max") ? "high" : think->level;
    else if (think->mode != RN_THINK_FALSE)
        level = "medium";
    if (!st && level) {
        st = rn_prompt_out_lit(o, "\n\nReasoning: ");
        if (!st)
            st = rn_prompt_out_data(o, level, strlen(level), false);
    }
    if (!st)
        st = put_builtin_tools(o, tools);
    if (!st)
        st = rn_prompt_out_lit(o, "\n\n# Valid channels: analysis, commentary, final. "
                                  "Channel must be included for every message.");
    if (!st && functions)
        st = rn_prompt_out_lit(
            o, "\nCalls to these tools must go to the commentary channel: 'functions'.");
    return st ? st : rn_prompt_out_lit(o, "<|end|>");
}

static cr_status_t put_developer(const rn_prompt_out_t *o, const json_t *tools,
                                 bool functions, const char *system, bool sys_trusted)
{
    if (!functions && !*system)
        return CR_OK;
    cr_status_t st = rn_prompt_out_lit(o, "<|start|>developer<|message|>");
    if (!st && functions) {
        st = rn_prompt_out_lit(o, "# Tools\n\n## functions\n\nnamespace functions {");
        for (size_t i = 0; !st && i < json_array_size(tools); i++) {
            const char *name = json_string_value(json_object_get(
                json_object_get(json_array_get(tools, i), "function"), "name"));
            if (name && !is_builtin(name))
                st = put_tool(o, tools, i);
        }
        if (!st)
            st = rn_prompt_out_lit(o, "\n\n} // namespace functions");
    }
    if (!st && *system) {
        st = rn_prompt_out_lit(o, "\n\n# Instructions\n\n");
        if (!st)
            st = rn_prompt_out_data(o, system, strlen(system), sys_trusted);
    }
    return st ? st : rn_prompt_out_lit(o, "<|end|>");
}

/* The calls of one assistant message. */
static cr_status_t put_calls(const rn_prompt_out_t *o, const json_t *calls,
                             const rn_prompt_opts_t *opts, cr_buf_t *scratch)
{
    cr_status_t st = CR_OK;
    for (size_t j = 0; !st && j < json_array_size(calls); j++) {
        const json_t *fn = json_object_get(json_array_get(calls, j), "function");
        const char *name = nz(json_string_value(json_object_get(fn, "name")));
        const json_t *args = json_object_get(fn, "arguments");
        bool builtin = is_builtin(name);
        st = rn_prompt_out_lit(o, builtin ? "<|start|>assistant<|channel|>analysis to="
                                          : "<|start|>assistant<|channel|>commentary "
                                            "to=functions.");
        if (!st)
            st = rn_prompt_out_data(o, name, strlen(name), false);
        if (!st)
            st = rn_prompt_out_lit(o, " <|constrain|>json<|message|>");
        cr_buf_reset(scratch);
        if (!st) {
            json_t *empty = json_object();
            st = rn_output_json(scratch, args ? args : empty, !opts->tool_args_ordered);
            json_decref(empty);
        }
        if (!st)
            st = rn_prompt_out_data(o, scratch->data, scratch->len, false);
        if (!st)
            st = rn_prompt_out_lit(o, "<|call|>");
    }
    return st;
}

static cr_status_t render(const rn_prompt_msg_t *msgs, size_t n, const json_t *tools,
                          const rn_prompt_think_t *think, const rn_prompt_opts_t *opts,
                          const rn_prompt_out_t *o, cr_err_t *err)
{
    cmsg_t *m = calloc(n ? n : 1, sizeof *m);
    cr_buf_t system, scratch;
    cr_buf_init(&system, opts->max_bytes ? opts->max_bytes : RN_PROMPT_DEFAULT_MAX_BYTES);
    cr_buf_init(&scratch, opts->max_bytes ? opts->max_bytes : RN_PROMPT_DEFAULT_MAX_BYTES);
    size_t nc = 0;
    cr_status_t st = m ? collate(msgs, n, m, &nc) : CR_E_NOMEM;
    bool sys_trusted = true, functions = false;
    for (size_t i = 0; !st && i < n; i++) {
        if (strcmp(nz(msgs[i].role), "system"))
            continue;
        if (system.len)
            st = cr_buf_puts(&system, "\n\n");
        if (!st)
            st = cr_buf_puts(&system, nz(msgs[i].content));
        sys_trusted = sys_trusted && msgs[i].trusted;
    }
    for (size_t i = 0; i < json_array_size(tools); i++) {
        const char *name = json_string_value(json_object_get(
            json_object_get(json_array_get(tools, i), "function"), "name"));
        functions = functions || (name && !is_builtin(name));
    }
    size_t last_user = SIZE_MAX;
    bool prefill_content = false, prefill_thinking = false;
    for (size_t i = 0; i < nc; i++)
        if (!strcmp(m[i].role, "user"))
            last_user = i;
    if (nc && !strcmp(m[nc - 1].role, "assistant")) {
        prefill_content = *m[nc - 1].content != '\0';
        prefill_thinking = !prefill_content && *m[nc - 1].thinking != '\0';
    }
    if (!st)
        st = put_system(o, think, opts, tools, functions);
    if (!st)
        st = put_developer(o, tools, functions, system.data ? system.data : "", sys_trusted);
    for (size_t i = 0; !st && i < nc; i++) {
        const cmsg_t *c = &m[i];
        if (!strcmp(c->role, "tool")) {
            st = rn_prompt_out_lit(o, is_builtin(c->tool_name) ? "<|start|>"
                                                               : "<|start|>functions.");
            if (!st)
                st = rn_prompt_out_data(o, c->tool_name, strlen(c->tool_name), false);
            if (!st)
                st = rn_prompt_out_lit(o, " to=assistant<|message|>");
            if (!st)
                st = rn_prompt_out_data(o, c->content, strlen(c->content), c->trusted);
            if (!st)
                st = rn_prompt_out_lit(o, "<|end|>");
        } else if (!strcmp(c->role, "assistant")) {
            if (*c->thinking && (last_user == SIZE_MAX || i > last_user)) {
                st = rn_prompt_out_lit(o, "<|start|>assistant<|channel|>analysis<|message|>");
                if (!st)
                    st = rn_prompt_out_data(o, c->thinking, strlen(c->thinking), c->trusted);
                if (!st && !prefill_thinking)
                    st = rn_prompt_out_lit(o, "<|end|>");
            }
            if (!st && *c->content) {
                st = rn_prompt_out_lit(o, "<|start|>assistant<|channel|>final<|message|>");
                if (!st)
                    st = rn_prompt_out_data(o, c->content, strlen(c->content), c->trusted);
                if (!st && !prefill_content)
                    st = rn_prompt_out_lit(o, "<|end|>");
            }
            if (!st)
                st = put_calls(o, c->tool_calls, opts, &scratch);
        } else if (!strcmp(c->role, "user")) {
            st = rn_prompt_out_lit(o, "<|start|>user<|message|>");
            if (!st)
                st = rn_prompt_out_data(o, c->content, strlen(c->content), c->trusted);
            if (!st)
                st = rn_prompt_out_lit(o, "<|end|>");
        }
    }
    if (!st && !prefill_content && !prefill_thinking)
        st = rn_prompt_out_lit(o, "<|start|>assistant");
    if (st)
        cr_err_set(err, st, "harmony renderer: %s", cr_status_str(st));
    for (size_t i = 0; m && i < nc; i++)
        free(m[i].owned);
    free(m);
    cr_buf_free(&system);
    cr_buf_free(&scratch);
    return st;
}

const rn_prompt_renderer_t rn_prompt_renderer_harmony = {
    .name = "harmony",
    .render = render,
};
