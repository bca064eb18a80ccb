/* responses_request.c: a Responses API body -> the native chat body
 * (gw_resp_translate, see responses.h). Answers are responses.c's. */
#include "lib/prelude.h"
#include "services/gateway/responses.h"
#include "services/gateway/json_util.h"

#include "services/gateway/openai.h"

#include <ctype.h>
#include <jansson.h>

#define TEXT_CAP (256u * 1024 * 1024) /* a joined text */

/* What the items seen so far left for the next assistant message. */
typedef struct conv {
    json_t *msgs;           /* native messages */
    const char *thinking;   /* a reasoning item's text, not yet placed */
} conv_t;

/* The last message if it is an assistant's, else a new one (taking the
 * pending thinking). */
static json_t *assistant(conv_t *c, cr_err_t *err)
{
    size_t n = json_array_size(c->msgs);
    json_t *last = n ? json_array_get(c->msgs, n - 1) : NULL;
    const char *role = json_string_value(gw_json_member(last, "role"));
    if (!role || strcmp(role, "assistant") != 0) {
        last = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
        if (gw_json_append(c->msgs, last, err))
            return NULL;
    }
    if (c->thinking) {
        json_object_set_new(last, "thinking", json_string(c->thinking));
        c->thinking = NULL;
    }
    return last;
}

/* A message item's content parts -> text and images. */
static cr_status_t parts(const json_t *content, const char *where,
                         cr_buf_t *text, json_t *images, cr_err_t *err)
{
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        const char *type = json_string_value(gw_json_member(p, "type"));
        if (!type)
            return cr_err_set(err, CR_E_INVALID,
                              "%s.content[%zu]: a part needs a string 'type'",
                              where, i);
        if (!strcmp(type, "input_text") || !strcmp(type, "output_text") ||
            !strcmp(type, "refusal")) {
            json_t *t = gw_json_member(p, !strcmp(type, "refusal") ? "refusal"
                                                                    : "text");
            if (!json_is_string(t))
                return cr_err_set(err, CR_E_INVALID,
                                  "%s.content[%zu]: %s needs a string text",
                                  where, i, type);
            if (cr_buf_append(text, json_string_value(t),
                              json_string_length(t)))
                return gw_json_nomem(err);
        } else if (!strcmp(type, "input_image")) {
            const char *url = json_string_value(gw_json_member(p, "image_url"));
            const char *b64 = url && !strncmp(url, "data:", 5)
                                  ? strstr(url, ";base64,")
                                  : NULL;
            if (!b64)
                return cr_err_set(err, CR_E_INVALID,
                                  "%s.content[%zu]: input_image needs a "
                                  "base64 data URL in image_url (image URLs "
                                  "and file ids are not supported)",
                                  where, i);
            if (gw_json_append(images, json_string(b64 + 8), err))
                return CR_E_NOMEM;
        } else if (!strcmp(type, "input_file")) {
            return cr_err_set(err, CR_E_INVALID,
                              "%s.content[%zu]: file inputs are not "
                              "supported",
                              where, i);
        } else {
            return cr_err_set(err, CR_E_INVALID,
                              "%s.content[%zu]: unknown content type '%s'",
                              where, i, type);
        }
    }
    return CR_OK;
}

static cr_status_t message_item(conv_t *c, const json_t *it, const char *where,
                                cr_err_t *err)
{
    const char *role = json_string_value(gw_json_member(it, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant") &&
                  strcmp(role, "system") && strcmp(role, "developer")))
        return cr_err_set(err, CR_E_INVALID,
                          "%s.role: must be \"user\", \"assistant\", "
                          "\"system\" or \"developer\"",
                          where);
    if (!strcmp(role, "developer"))
        role = "system";
    json_t *content = gw_json_member(it, "content");
    cr_buf_t text;
    cr_buf_init(&text, TEXT_CAP);
    json_t *images = json_array();
    cr_status_t st = images ? CR_OK : gw_json_nomem(err);
    if (!st && json_is_string(content)) {
        if (cr_buf_append(&text, json_string_value(content),
                          json_string_length(content)))
            st = gw_json_nomem(err);
    } else if (!st && json_is_array(content)) {
        st = parts(content, where, &text, images, err);
    } else if (!st) {
        st = cr_err_set(err, CR_E_INVALID,
                        "%s.content: must be a string or an array of parts",
                        where);
    }
    json_t *m = NULL;
    if (!st && !strcmp(role, "assistant")) {
        /* a new message: calls of the previous one stay there */
        m = json_pack("{s:s,s:s%}", "role", "assistant", "content",
                      text.data ? text.data : "", text.len);
        if (m && c->thinking) {
            json_object_set_new(m, "thinking", json_string(c->thinking));
            c->thinking = NULL;
        }
    } else if (!st) {
        m = json_pack("{s:s,s:s%}", "role", role, "content",
                      text.data ? text.data : "", text.len);
    }
    if (!st && m && json_array_size(images))
        json_object_set(m, "images", images);
    if (!st)
        st = gw_json_append(c->msgs, m, err);
    json_decref(images);
    cr_buf_free(&text);
    return st;
}

static cr_status_t call_item(conv_t *c, const json_t *it, const char *where,
                             cr_err_t *err)
{
    json_t *id = gw_json_member(it, "call_id"), *name = gw_json_member(it, "name");
    json_t *args = gw_json_member(it, "arguments");
    if (!json_is_string(id) || !json_is_string(name))
        return cr_err_set(err, CR_E_INVALID,
                          "%s: function_call needs string 'call_id' and "
                          "'name'",
                          where);
    json_t *obj = NULL;
    if (json_is_string(args)) {
        obj = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
        if (!json_is_object(obj)) {
            json_decref(obj);
            return cr_err_set(err, CR_E_INVALID,
                              "%s: function_call arguments must be a JSON "
                              "object text",
                              where);
        }
    } else if (args) {
        return cr_err_set(err, CR_E_INVALID,
                          "%s: function_call arguments must be a string",
                          where);
    } else {
        obj = json_object();
    }
    json_t *m = assistant(c, err);
    if (!m) {
        json_decref(obj);
        return CR_E_NOMEM;
    }
    json_t *calls = json_object_get(m, "tool_calls");
    if (!calls) {
        calls = json_array();
        if (gw_json_put(m, "tool_calls", calls, err)) {
            json_decref(obj);
            return CR_E_NOMEM;
        }
    }
    return gw_json_append(calls,
                          json_pack("{s:O,s:{s:I,s:O,s:o}}", "id", id, "function",
                                    "index", (json_int_t)json_array_size(calls),
                                    "name", name, "arguments", obj),
                          err);
}

static cr_status_t output_item(conv_t *c, const json_t *it, const char *where,
                               cr_err_t *err)
{
    json_t *id = gw_json_member(it, "call_id");
    json_t *out = gw_json_member(it, "output");
    if (!json_is_string(id))
        return cr_err_set(err, CR_E_INVALID,
                          "%s: function_call_output needs a string 'call_id'",
                          where);
    cr_buf_t text;
    cr_buf_init(&text, TEXT_CAP);
    json_t *images = json_array();
    cr_status_t st = images ? CR_OK : gw_json_nomem(err);
    if (!st && json_is_string(out)) {
        if (cr_buf_append(&text, json_string_value(out),
                          json_string_length(out)))
            st = gw_json_nomem(err);
    } else if (!st && json_is_array(out)) {
        st = parts(out, where, &text, images, err);
    } else if (!st) {
        st = cr_err_set(err, CR_E_INVALID,
                        "%s: function_call_output 'output' must be a string "
                        "or an array of parts",
                        where);
    }
    json_t *m = NULL;
    if (!st) {
        m = json_pack("{s:s,s:s%,s:O}", "role", "tool", "content",
                      text.data ? text.data : "", text.len, "tool_call_id",
                      id);
        const char *name = gw_native_tool_name(c->msgs, json_string_value(id));
        if (m && name)
            json_object_set_new(m, "tool_name", json_string(name));
        if (m && json_array_size(images))
            json_object_set(m, "images", images);
        st = gw_json_append(c->msgs, m, err);
    }
    json_decref(images);
    cr_buf_free(&text);
    return st;
}

static cr_status_t reasoning_item(conv_t *c, const json_t *it,
                                  const char *where, cr_err_t *err)
{
    json_t *sum = gw_json_member(it, "summary");
    if (sum && !json_is_array(sum))
        return cr_err_set(err, CR_E_INVALID,
                          "%s: reasoning summary must be an array", where);
    /* the last summary_text is the thinking the model produced */
    size_t i;
    json_t *p;
    json_array_foreach(sum, i, p) {
        json_t *t = gw_json_member(p, "text");
        if (!json_is_string(t))
            return cr_err_set(err, CR_E_INVALID,
                              "%s.summary[%zu]: needs a string text", where,
                              i);
        c->thinking = json_string_value(t);
    }
    return CR_OK;
}

static cr_status_t get_input(const json_t *o, json_t *n, cr_err_t *err)
{
    conv_t c = {json_array(), NULL};
    if (!c.msgs)
        return gw_json_nomem(err);
    cr_status_t st = CR_OK;
    json_t *ins = gw_json_member(o, "instructions");
    if (ins && !json_is_string(ins))
        st = cr_err_set(err, CR_E_INVALID, "instructions: must be a string");
    else if (ins && json_string_length(ins))
        st = gw_json_append(c.msgs, json_pack("{s:s,s:O}", "role", "system",
                                              "content", ins), err);
    json_t *in = gw_json_member(o, "input");
    if (!st && json_is_string(in)) {
        st = gw_json_append(c.msgs, json_pack("{s:s,s:O}", "role", "user", "content",
                                              in), err);
    } else if (!st && json_is_array(in)) {
        size_t i;
        json_t *it;
        json_array_foreach(in, i, it) {
            char where[32];
            snprintf(where, sizeof where, "input[%zu]", i);
            const char *type = json_string_value(gw_json_member(it, "type"));
            if (!json_is_object(it))
                st = cr_err_set(err, CR_E_INVALID, "%s: must be an object",
                                where);
            else if (!type || !strcmp(type, "message"))
                st = message_item(&c, it, where, err);
            else if (!strcmp(type, "function_call"))
                st = call_item(&c, it, where, err);
            else if (!strcmp(type, "function_call_output"))
                st = output_item(&c, it, where, err);
            else if (!strcmp(type, "reasoning"))
                st = reasoning_item(&c, it, where, err);
            else
                st = cr_err_set(err, CR_E_INVALID,
                                "%s: unknown input item type '%s'", where,
                                type);
            if (st)
                break;
        }
    } else if (!st) {
        st = cr_err_set(err, CR_E_INVALID,
                        "input: must be a string or an array of items");
    }
    if (!st && !json_array_size(c.msgs))
        st = cr_err_set(err, CR_E_INVALID, "input: nothing to answer");
    if (st) {
        json_decref(c.msgs);
        return st;
    }
    return gw_json_put(n, "messages", c.msgs, err);
}

static cr_status_t get_tools(const json_t *o, json_t *n, gw_resp_info_t *info,
                             cr_err_t *err)
{
    json_t *tools = gw_json_member(o, "tools");
    json_t *choice = gw_json_member(o, "tool_choice");
    if (tools && !json_is_array(tools))
        return cr_err_set(err, CR_E_INVALID, "tools: must be an array");
    const char *mode = json_string_value(choice);
    const char *want = NULL;
    if (choice && mode && strcmp(mode, "none") && strcmp(mode, "auto") &&
        strcmp(mode, "required"))
        return cr_err_set(err, CR_E_INVALID,
                          "tool_choice: must be \"none\", \"auto\", "
                          "\"required\" or {\"type\":\"function\",\"name\"}");
    if (choice && !mode) {
        const char *type = json_string_value(gw_json_member(choice, "type"));
        want = json_string_value(gw_json_member(choice, "name"));
        if (!type || strcmp(type, "function") || !want)
            return cr_err_set(err, CR_E_INVALID,
                              "tool_choice: only {\"type\":\"function\","
                              "\"name\"} objects are supported");
    }
    if (!json_array_size(tools) || (mode && !strcmp(mode, "none")))
        return CR_OK;
    json_t *out = json_array();
    if (!out)
        return gw_json_nomem(err);
    cr_status_t st = CR_OK;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(gw_json_member(t, "type"));
        json_t *name = gw_json_member(t, "name");
        if (!type || strcmp(type, "function") != 0) {
            st = cr_err_set(err, CR_E_INVALID,
                            "tools[%zu]: tool type '%s' is not supported "
                            "(only \"function\")",
                            i, type ? type : "(none)");
            break;
        }
        if (!json_is_string(name)) {
            st = cr_err_set(err, CR_E_INVALID,
                            "tools[%zu]: needs a string 'name'", i);
            break;
        }
        if (want && strcmp(json_string_value(name), want) != 0)
            continue;
        json_t *params = gw_json_member(t, "parameters");
        json_t *fn = json_pack("{s:O}", "name", name);
        if (fn && json_is_object(params))
            json_object_set(fn, "parameters", params);
        json_t *d = gw_json_member(t, "description");
        if (fn && json_is_string(d))
            json_object_set(fn, "description", d);
        if ((st = gw_json_append(out, json_pack("{s:s,s:o}", "type", "function",
                                                "function", fn),
                                 err)))
            break;
    }
    if (!st && want && !json_array_size(out))
        st = cr_err_set(err, CR_E_INVALID,
                        "tool_choice names function '%s', which is not in "
                        "tools",
                        want);
    if (st) {
        json_decref(out);
        return st;
    }
    if ((st = gw_json_put(n, "tools", out, err)))
        return st;
    if (want || (mode && !strcmp(mode, "required"))) {
        if (json_object_get(n, "format"))
            return cr_err_set(err, CR_E_INVALID,
                              "text.format cannot be combined with "
                              "tool_choice \"required\" or a named function");
        return gw_oai_force_call(n, &info->forced_call, err);
    }
    return CR_OK;
}

/* text.format -> format. */
static cr_status_t get_format(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *text = gw_json_member(o, "text");
    json_t *f = gw_json_member(text, "format");
    if (!f)
        return CR_OK;
    const char *type = json_string_value(gw_json_member(f, "type"));
    if (!type)
        return cr_err_set(err, CR_E_INVALID,
                          "text.format: needs a string 'type'");
    if (!strcmp(type, "text"))
        return CR_OK;
    if (!strcmp(type, "json_object"))
        return gw_json_put(n, "format", json_string("json"), err);
    if (!strcmp(type, "json_schema")) {
        json_t *schema = gw_json_member(f, "schema");
        if (!json_is_object(schema))
            return cr_err_set(err, CR_E_INVALID,
                              "text.format: json_schema needs an object "
                              "'schema'");
        return gw_json_put(n, "format", json_copy(schema), err);
    }
    return cr_err_set(err, CR_E_INVALID,
                      "text.format.type: must be \"text\", \"json_object\" "
                      "or \"json_schema\", not '%s'",
                      type);
}

/* reasoning.effort -> think. */
static cr_status_t get_reasoning(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *r = gw_json_member(o, "reasoning");
    json_t *e = gw_json_member(r, "effort");
    if (!e)
        return CR_OK;
    const char *v = json_string_value(e);
    if (!v)
        return cr_err_set(err, CR_E_INVALID,
                          "reasoning.effort: must be a string");
    if (!strcmp(v, "none"))
        return gw_json_put(n, "think", json_false(), err);
    if (!strcmp(v, "minimal"))
        v = "low";
    else if (!strcmp(v, "xhigh"))
        v = "max";
    if (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high") &&
        strcmp(v, "max"))
        return cr_err_set(err, CR_E_INVALID,
                          "reasoning.effort: must be \"none\", \"minimal\", "
                          "\"low\", \"medium\", \"high\" or \"xhigh\"");
    return gw_json_put(n, "think", json_string(v), err);
}

static cr_status_t copy_number(const json_t *o, const char *from,
                               json_t *opts, const char *to, bool integer,
                               cr_err_t *err)
{
    json_t *v = gw_json_member(o, from);
    if (!v)
        return CR_OK;
    if (integer ? !json_is_integer(v) || json_integer_value(v) <= 0
                : !json_is_number(v))
        return cr_err_set(err, CR_E_INVALID, "%s: must be a %s", from,
                          integer ? "positive integer" : "number");
    return gw_json_put(opts, to, json_copy(v), err);
}

static cr_status_t translate(const json_t *o, json_t *n, gw_resp_info_t *info,
                             cr_err_t *err)
{
    json_t *model = gw_json_member(o, "model");
    if (!json_is_string(model) || !json_string_length(model))
        return cr_err_set(err, CR_E_INVALID, "model is required");
    if (gw_json_member(o, "previous_response_id"))
        return cr_err_set(err, CR_E_INVALID,
                          "previous_response_id is not supported: responses "
                          "are not stored; send the whole conversation in "
                          "'input'");
    if (gw_json_member(o, "conversation"))
        return cr_err_set(err, CR_E_INVALID,
                          "conversation is not supported: responses are not "
                          "stored; send the whole conversation in 'input'");
    if (json_is_true(gw_json_member(o, "background")))
        return cr_err_set(err, CR_E_INVALID,
                          "background is not supported: responses are "
                          "answered while the request waits");
    if (gw_json_member(o, "prompt"))
        return cr_err_set(err, CR_E_INVALID,
                          "prompt (a stored prompt template) is not "
                          "supported");
    json_t *stream = gw_json_member(o, "stream");
    if (stream && !json_is_boolean(stream))
        return cr_err_set(err, CR_E_INVALID, "stream: must be a boolean");
    info->stream = json_is_true(stream);
    cr_status_t st;
    if ((st = gw_json_put(n, "model", json_copy(model), err)) ||
        (st = get_input(o, n, err)) || (st = get_format(o, n, err)) ||
        (st = get_tools(o, n, info, err)) || (st = get_reasoning(o, n, err)))
        return st;
    json_t *opts = json_object();
    if (!opts)
        return gw_json_nomem(err);
    if ((st = copy_number(o, "max_output_tokens", opts, "num_predict", true,
                          err)) ||
        (st = copy_number(o, "temperature", opts, "temperature", false,
                          err)) ||
        (st = copy_number(o, "top_p", opts, "top_p", false, err))) {
        json_decref(opts);
        return st;
    }
    if ((st = gw_json_put(n, "options", opts, err)))
        return st;
    return gw_json_put(n, "stream", json_boolean(info->stream), err);
}

static bool all_space(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)p[i]))
            return false;
    return true;
}

/* Parses body into *o (an object) or says why not. */
static cr_status_t load_body(const char *body, size_t len, json_t **o,
                             cr_err_t *err)
{
    *o = NULL;
    if (!body || all_space(body, len))
        return cr_err_set(err, CR_E_INVALID, "missing request body");
    json_error_t je;
    *o = json_loadb(body, len, JSON_DECODE_ANY, &je);
    if (!*o)
        return cr_err_set(err, CR_E_INVALID, "%s (line %d, column %d)",
                          je.text, je.line, je.column);
    if (!json_is_object(*o)) {
        json_decref(*o);
        *o = NULL;
        return cr_err_set(err, CR_E_INVALID,
                          "the request body must be a JSON object");
    }
    return CR_OK;
}

cr_status_t gw_resp_translate(const char *body, size_t len, cr_buf_t *out,
                              gw_resp_info_t *info, cr_err_t *err)
{
    memset(info, 0, sizeof *info);
    json_t *o;
    cr_status_t st = load_body(body, len, &o, err);
    if (st)
        return st;
    json_t *n = json_object();
    st = n ? translate(o, n, info, err) : gw_json_nomem(err);
    if (!st) {
        char *text = json_dumps(n, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text)
            st = gw_json_nomem(err);
        else if ((st = cr_buf_puts(out, text)))
            cr_err_set(err, st, "request too large");
        free(text);
    }
    json_decref(n);
    json_decref(o);
    return st;
}
