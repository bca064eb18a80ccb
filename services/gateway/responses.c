/* responses.c: the Responses route (see responses.h).
 *
 * Requests: Responses JSON -> native chat JSON -> gw_request_parse. Answers
 * go through gw_relay_fmt; the items are built as jansson objects, each
 * kept once finished, so the final response lists exactly what the stream
 * announced. */
#include "lib/prelude.h"
#include "services/gateway/responses.h"

#include "lib/log.h"
#include "services/gateway/convert.h"
#include "services/gateway/exchange.h"
#include "services/gateway/openai.h"
#include "services/gateway/relay.h"
#include "services/gateway/render.h"
#include "services/gateway/surface_ids.h"

#include <ctype.h>
#include <jansson.h>
#include <time.h>

#define NATIVE_CAP (64u * 1024 * 1024)
#define TEXT_CAP (256u * 1024 * 1024)

/* ================= requests ================= */

static json_t *member(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

static cr_status_t nomem(cr_err_t *err)
{
    return cr_err_set(err, CR_E_NOMEM, "out of memory");
}

static cr_status_t put(json_t *o, const char *key, json_t *v, cr_err_t *err)
{
    if (!v || json_object_set_new(o, key, v))
        return nomem(err);
    return CR_OK;
}

static cr_status_t append(json_t *arr, json_t *v, cr_err_t *err)
{
    if (!v || json_array_append_new(arr, v))
        return nomem(err);
    return CR_OK;
}

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
    const char *role = json_string_value(member(last, "role"));
    if (!role || strcmp(role, "assistant") != 0) {
        last = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
        if (append(c->msgs, last, err))
            return NULL;
    }
    if (c->thinking) {
        json_object_set_new(last, "thinking", json_string(c->thinking));
        c->thinking = NULL;
    }
    return last;
}

static const char *tool_name_of(const json_t *msgs, const char *id)
{
    size_t i, k;
    json_t *m, *c;
    json_array_foreach(msgs, i, m) {
        json_array_foreach(member(m, "tool_calls"), k, c) {
            const char *cid = json_string_value(member(c, "id"));
            if (cid && !strcmp(cid, id))
                return json_string_value(
                    member(member(c, "function"), "name"));
        }
    }
    return NULL;
}

/* A message item's content parts -> text and images. */
static cr_status_t parts(const json_t *content, const char *where,
                         cr_buf_t *text, json_t *images, cr_err_t *err)
{
    size_t i;
    json_t *p;
    json_array_foreach(content, i, p) {
        const char *type = json_string_value(member(p, "type"));
        if (!type)
            return cr_err_set(err, CR_E_INVALID,
                              "%s.content[%zu]: a part needs a string 'type'",
                              where, i);
        if (!strcmp(type, "input_text") || !strcmp(type, "output_text") ||
            !strcmp(type, "refusal")) {
            json_t *t = member(p, !strcmp(type, "refusal") ? "refusal"
                                                            : "text");
            if (!json_is_string(t))
                return cr_err_set(err, CR_E_INVALID,
                                  "%s.content[%zu]: %s needs a string text",
                                  where, i, type);
            if (cr_buf_append(text, json_string_value(t),
                              json_string_length(t)))
                return nomem(err);
        } else if (!strcmp(type, "input_image")) {
            const char *url = json_string_value(member(p, "image_url"));
            const char *b64 = url && !strncmp(url, "data:", 5)
                                  ? strstr(url, ";base64,")
                                  : NULL;
            if (!b64)
                return cr_err_set(err, CR_E_INVALID,
                                  "%s.content[%zu]: input_image needs a "
                                  "base64 data URL in image_url (image URLs "
                                  "and file ids are not supported)",
                                  where, i);
            if (append(images, json_string(b64 + 8), err))
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
    const char *role = json_string_value(member(it, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant") &&
                  strcmp(role, "system") && strcmp(role, "developer")))
        return cr_err_set(err, CR_E_INVALID,
                          "%s.role: must be \"user\", \"assistant\", "
                          "\"system\" or \"developer\"",
                          where);
    if (!strcmp(role, "developer"))
        role = "system";
    json_t *content = member(it, "content");
    cr_buf_t text;
    cr_buf_init(&text, TEXT_CAP);
    json_t *images = json_array();
    cr_status_t st = images ? CR_OK : nomem(err);
    if (!st && json_is_string(content)) {
        if (cr_buf_append(&text, json_string_value(content),
                          json_string_length(content)))
            st = nomem(err);
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
        st = append(c->msgs, m, err);
    json_decref(images);
    cr_buf_free(&text);
    return st;
}

static cr_status_t call_item(conv_t *c, const json_t *it, const char *where,
                             cr_err_t *err)
{
    json_t *id = member(it, "call_id"), *name = member(it, "name");
    json_t *args = member(it, "arguments");
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
        if (put(m, "tool_calls", calls, err)) {
            json_decref(obj);
            return CR_E_NOMEM;
        }
    }
    return append(calls,
                  json_pack("{s:O,s:{s:I,s:O,s:o}}", "id", id, "function",
                            "index", (json_int_t)json_array_size(calls),
                            "name", name, "arguments", obj),
                  err);
}

static cr_status_t output_item(conv_t *c, const json_t *it, const char *where,
                               cr_err_t *err)
{
    json_t *id = member(it, "call_id");
    json_t *out = member(it, "output");
    if (!json_is_string(id))
        return cr_err_set(err, CR_E_INVALID,
                          "%s: function_call_output needs a string 'call_id'",
                          where);
    cr_buf_t text;
    cr_buf_init(&text, TEXT_CAP);
    json_t *images = json_array();
    cr_status_t st = images ? CR_OK : nomem(err);
    if (!st && json_is_string(out)) {
        if (cr_buf_append(&text, json_string_value(out),
                          json_string_length(out)))
            st = nomem(err);
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
        const char *name = tool_name_of(c->msgs, json_string_value(id));
        if (m && name)
            json_object_set_new(m, "tool_name", json_string(name));
        if (m && json_array_size(images))
            json_object_set(m, "images", images);
        st = append(c->msgs, m, err);
    }
    json_decref(images);
    cr_buf_free(&text);
    return st;
}

static cr_status_t reasoning_item(conv_t *c, const json_t *it,
                                  const char *where, cr_err_t *err)
{
    json_t *sum = member(it, "summary");
    if (sum && !json_is_array(sum))
        return cr_err_set(err, CR_E_INVALID,
                          "%s: reasoning summary must be an array", where);
    /* the last summary_text is the thinking the model produced */
    size_t i;
    json_t *p;
    json_array_foreach(sum, i, p) {
        json_t *t = member(p, "text");
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
        return nomem(err);
    cr_status_t st = CR_OK;
    json_t *ins = member(o, "instructions");
    if (ins && !json_is_string(ins))
        st = cr_err_set(err, CR_E_INVALID, "instructions: must be a string");
    else if (ins && json_string_length(ins))
        st = append(c.msgs, json_pack("{s:s,s:O}", "role", "system",
                                      "content", ins), err);
    json_t *in = member(o, "input");
    if (!st && json_is_string(in)) {
        st = append(c.msgs, json_pack("{s:s,s:O}", "role", "user", "content",
                                      in), err);
    } else if (!st && json_is_array(in)) {
        size_t i;
        json_t *it;
        json_array_foreach(in, i, it) {
            char where[32];
            snprintf(where, sizeof where, "input[%zu]", i);
            const char *type = json_string_value(member(it, "type"));
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
    return put(n, "messages", c.msgs, err);
}

static cr_status_t get_tools(const json_t *o, json_t *n, gw_resp_info_t *info,
                             cr_err_t *err)
{
    json_t *tools = member(o, "tools");
    json_t *choice = member(o, "tool_choice");
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
        const char *type = json_string_value(member(choice, "type"));
        want = json_string_value(member(choice, "name"));
        if (!type || strcmp(type, "function") || !want)
            return cr_err_set(err, CR_E_INVALID,
                              "tool_choice: only {\"type\":\"function\","
                              "\"name\"} objects are supported");
    }
    if (!json_array_size(tools) || (mode && !strcmp(mode, "none")))
        return CR_OK;
    json_t *out = json_array();
    if (!out)
        return nomem(err);
    cr_status_t st = CR_OK;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(member(t, "type"));
        json_t *name = member(t, "name");
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
        json_t *params = member(t, "parameters");
        json_t *fn = json_pack("{s:O}", "name", name);
        if (fn && json_is_object(params))
            json_object_set(fn, "parameters", params);
        json_t *d = member(t, "description");
        if (fn && json_is_string(d))
            json_object_set(fn, "description", d);
        if ((st = append(out, json_pack("{s:s,s:o}", "type", "function",
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
    if ((st = put(n, "tools", out, err)))
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
    json_t *text = member(o, "text");
    json_t *f = member(text, "format");
    if (!f)
        return CR_OK;
    const char *type = json_string_value(member(f, "type"));
    if (!type)
        return cr_err_set(err, CR_E_INVALID,
                          "text.format: needs a string 'type'");
    if (!strcmp(type, "text"))
        return CR_OK;
    if (!strcmp(type, "json_object"))
        return put(n, "format", json_string("json"), err);
    if (!strcmp(type, "json_schema")) {
        json_t *schema = member(f, "schema");
        if (!json_is_object(schema))
            return cr_err_set(err, CR_E_INVALID,
                              "text.format: json_schema needs an object "
                              "'schema'");
        return put(n, "format", json_copy(schema), err);
    }
    return cr_err_set(err, CR_E_INVALID,
                      "text.format.type: must be \"text\", \"json_object\" "
                      "or \"json_schema\", not '%s'",
                      type);
}

/* reasoning.effort -> think. */
static cr_status_t get_reasoning(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *r = member(o, "reasoning");
    json_t *e = member(r, "effort");
    if (!e)
        return CR_OK;
    const char *v = json_string_value(e);
    if (!v)
        return cr_err_set(err, CR_E_INVALID,
                          "reasoning.effort: must be a string");
    if (!strcmp(v, "none"))
        return put(n, "think", json_false(), err);
    if (!strcmp(v, "minimal"))
        v = "low";
    else if (!strcmp(v, "xhigh"))
        v = "max";
    if (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high") &&
        strcmp(v, "max"))
        return cr_err_set(err, CR_E_INVALID,
                          "reasoning.effort: must be \"none\", \"minimal\", "
                          "\"low\", \"medium\", \"high\" or \"xhigh\"");
    return put(n, "think", json_string(v), err);
}

static cr_status_t copy_number(const json_t *o, const char *from,
                               json_t *opts, const char *to, bool integer,
                               cr_err_t *err)
{
    json_t *v = member(o, from);
    if (!v)
        return CR_OK;
    if (integer ? !json_is_integer(v) || json_integer_value(v) <= 0
                : !json_is_number(v))
        return cr_err_set(err, CR_E_INVALID, "%s: must be a %s", from,
                          integer ? "positive integer" : "number");
    return put(opts, to, json_copy(v), err);
}

static cr_status_t translate(const json_t *o, json_t *n, gw_resp_info_t *info,
                             cr_err_t *err)
{
    json_t *model = member(o, "model");
    if (!json_is_string(model) || !json_string_length(model))
        return cr_err_set(err, CR_E_INVALID, "model is required");
    if (member(o, "previous_response_id"))
        return cr_err_set(err, CR_E_INVALID,
                          "previous_response_id is not supported: responses "
                          "are not stored; send the whole conversation in "
                          "'input'");
    if (member(o, "conversation"))
        return cr_err_set(err, CR_E_INVALID,
                          "conversation is not supported: responses are not "
                          "stored; send the whole conversation in 'input'");
    if (json_is_true(member(o, "background")))
        return cr_err_set(err, CR_E_INVALID,
                          "background is not supported: responses are "
                          "answered while the request waits");
    if (member(o, "prompt"))
        return cr_err_set(err, CR_E_INVALID,
                          "prompt (a stored prompt template) is not "
                          "supported");
    json_t *stream = member(o, "stream");
    if (stream && !json_is_boolean(stream))
        return cr_err_set(err, CR_E_INVALID, "stream: must be a boolean");
    info->stream = json_is_true(stream);
    cr_status_t st;
    if ((st = put(n, "model", json_copy(model), err)) ||
        (st = get_input(o, n, err)) || (st = get_format(o, n, err)) ||
        (st = get_tools(o, n, info, err)) || (st = get_reasoning(o, n, err)))
        return st;
    json_t *opts = json_object();
    if (!opts)
        return nomem(err);
    if ((st = copy_number(o, "max_output_tokens", opts, "num_predict", true,
                          err)) ||
        (st = copy_number(o, "temperature", opts, "temperature", false,
                          err)) ||
        (st = copy_number(o, "top_p", opts, "top_p", false, err))) {
        json_decref(opts);
        return st;
    }
    if ((st = put(n, "options", opts, err)))
        return st;
    return put(n, "stream", json_boolean(info->stream), err);
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
    st = n ? translate(o, n, info, err) : nomem(err);
    if (!st) {
        char *text = json_dumps(n, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text)
            st = nomem(err);
        else if ((st = cr_buf_puts(out, text)))
            cr_err_set(err, st, "request too large");
        free(text);
    }
    json_decref(n);
    json_decref(o);
    return st;
}

/* ================= answers ================= */

typedef enum item { I_NONE, I_REASONING, I_MESSAGE } item_t;

typedef struct resp {
    char id[GW_SURFACE_ID_MAX];
    char *model;
    int64_t created; /* unix seconds */
    json_t *echo;    /* request fields the response object repeats */
    bool forced;
    cr_buf_t held;   /* a forced call's text */
    /* streaming */
    bool started;
    int64_t seq;     /* sequence_number of the next event */
    item_t open;
    char item_id[GW_SURFACE_ID_MAX];
    cr_buf_t text;   /* of the open item */
    json_t *items;   /* finished output items */
    bool saw_calls;
} resp_t;

static void resp_free(void *arg)
{
    resp_t *x = arg;
    if (!x)
        return;
    json_decref(x->echo);
    json_decref(x->items);
    cr_buf_free(&x->held);
    cr_buf_free(&x->text);
    free(x->model);
    free(x);
}

static json_t *echo_or(const resp_t *x, const char *key, json_t *dflt)
{
    json_t *v = json_object_get(x->echo, key);
    if (v) {
        json_decref(dflt);
        return json_incref(v);
    }
    return dflt;
}

/* The response object; usage only with d. */
static json_t *response_obj(const resp_t *x, const char *status,
                            json_t *output, const msg_done_body_t *d)
{
    json_t *r = json_pack(
        "{s:s,s:s,s:I,s:s,s:n,s:n,s:o,s:o,s:s,s:o,s:b,s:n,s:o,s:b,s:o,s:o,s:o,"
        "s:o,s:o,s:s,s:{}}",
        "id", x->id, "object", "response", "created_at", (json_int_t)x->created,
        "status", status, "error", "incomplete_details", "instructions",
        echo_or(x, "instructions", json_null()), "max_output_tokens",
        echo_or(x, "max_output_tokens", json_null()), "model", x->model,
        "output", output ? json_incref(output) : json_array(),
        "parallel_tool_calls", true, "previous_response_id", "reasoning",
        echo_or(x, "reasoning", json_pack("{s:n,s:n}", "effort", "summary")),
        "store", false, "temperature", echo_or(x, "temperature", json_real(1)),
        "text",
        echo_or(x, "text", json_pack("{s:{s:s}}", "format", "type", "text")),
        "tool_choice", echo_or(x, "tool_choice", json_string("auto")),
        "tools", echo_or(x, "tools", json_array()), "top_p",
        echo_or(x, "top_p", json_real(1)), "truncation", "disabled",
        "metadata");
    if (r && d) {
        int64_t p = d->has_prompt_eval_count ? d->prompt_eval_count : 0;
        int64_t c = d->has_eval_count ? d->eval_count : 0;
        json_object_set_new(
            r, "usage",
            json_pack("{s:I,s:{s:i},s:I,s:{s:i},s:I}", "input_tokens",
                      (json_int_t)p, "input_tokens_details", "cached_tokens",
                      0, "output_tokens", (json_int_t)c,
                      "output_tokens_details", "reasoning_tokens", 0,
                      "total_tokens", (json_int_t)(p + c)));
        if (d->done_reason && !strcmp(d->done_reason, "length") &&
            !x->saw_calls)
            json_object_set_new(r, "incomplete_details",
                                json_pack("{s:s}", "reason",
                                          "max_output_tokens"));
    }
    return r;
}

static const char *final_status(const resp_t *x, const msg_done_body_t *d)
{
    return d && d->done_reason && !strcmp(d->done_reason, "length") &&
                   !x->saw_calls
               ? "incomplete"
               : "completed";
}

static json_t *reasoning_item_obj(const char *id, const char *text)
{
    return json_pack("{s:s,s:s,s:[{s:s,s:s}]}", "id", id, "type", "reasoning",
                     "summary", "type", "summary_text", "text", text);
}

static json_t *text_part(const char *text)
{
    return json_pack("{s:s,s:s,s:[]}", "type", "output_text", "text", text,
                     "annotations");
}

static json_t *message_item_obj(const char *id, const char *status,
                                const char *text)
{
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "message",
                     "status", status, "role", "assistant", "content",
                     text ? json_pack("[o]", text_part(text)) : json_array());
}

/* Native tool calls -> function_call items (ids drawn here). */
static json_t *call_items(const char *native)
{
    json_t *out = json_array();
    json_t *arr = json_loads(native, JSON_DECODE_ANY, NULL);
    size_t i;
    json_t *c;
    json_array_foreach(arr, i, c) {
        json_t *fn = member(c, "function");
        char fc[GW_SURFACE_ID_MAX], call[GW_SURFACE_ID_MAX];
        gw_surface_id(fc, sizeof fc, "fc_");
        const char *cid = json_string_value(member(c, "id"));
        if (!cid || !*cid) {
            gw_surface_id(call, sizeof call, "call_");
            cid = call;
        }
        json_t *args = member(fn, "arguments");
        char *text = args ? json_dumps(args, JSON_COMPACT) : NULL;
        const char *name = json_string_value(member(fn, "name"));
        json_array_append_new(
            out, json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "id", fc, "type",
                           "function_call", "status", "completed", "call_id",
                           cid, "name", name ? name : "", "arguments",
                           text ? text : "{}"));
        free(text);
    }
    json_decref(arr);
    return out;
}

/* One SSE event: "event: <type>\ndata: <obj + type + sequence_number>". */
static cr_status_t event(resp_t *x, cr_buf_t *b, const char *type, json_t *o)
{
    if (!o)
        return CR_E_NOMEM;
    /* type and sequence_number first, as OpenAI writes them */
    json_t *e = json_pack("{s:s,s:I}", "type", type, "sequence_number",
                          (json_int_t)x->seq++);
    if (e && json_object_update(e, o)) {
        json_decref(e);
        e = NULL;
    }
    json_decref(o);
    char *text = e ? json_dumps(e, JSON_COMPACT) : NULL;
    json_decref(e);
    if (!text)
        return CR_E_NOMEM;
    cr_status_t st = cr_buf_printf(b, "event: %s\ndata: %s\n\n", type, text);
    free(text);
    return st;
}

static cr_status_t item_added(resp_t *x, cr_buf_t *b, json_t *item)
{
    return event(x, b, "response.output_item.added",
                 json_pack("{s:I,s:o}", "output_index",
                           (json_int_t)json_array_size(x->items), "item",
                           item));
}

static cr_status_t item_done(resp_t *x, cr_buf_t *b, json_t *item)
{
    json_t *o = json_pack("{s:I,s:O}", "output_index",
                          (json_int_t)json_array_size(x->items), "item",
                          item);
    json_array_append_new(x->items, item);
    return event(x, b, "response.output_item.done", o);
}

static cr_status_t close_item(resp_t *x, cr_buf_t *b)
{
    json_int_t idx = (json_int_t)json_array_size(x->items);
    const char *text = x->text.data ? x->text.data : "";
    cr_status_t st = CR_OK;
    if (x->open == I_REASONING) {
        st = event(x, b, "response.reasoning_summary_text.done",
                   json_pack("{s:s,s:I,s:i,s:s}", "item_id", x->item_id,
                             "output_index", idx, "summary_index", 0, "text",
                             text));
        if (!st)
            st = event(x, b, "response.reasoning_summary_part.done",
                       json_pack("{s:s,s:I,s:i,s:{s:s,s:s}}", "item_id",
                                 x->item_id, "output_index", idx,
                                 "summary_index", 0, "part", "type",
                                 "summary_text", "text", text));
        if (!st)
            st = item_done(x, b, reasoning_item_obj(x->item_id, text));
    } else if (x->open == I_MESSAGE) {
        st = event(x, b, "response.output_text.done",
                   json_pack("{s:s,s:I,s:i,s:s,s:[]}", "item_id", x->item_id,
                             "output_index", idx, "content_index", 0, "text",
                             text, "logprobs"));
        if (!st)
            st = event(x, b, "response.content_part.done",
                       json_pack("{s:s,s:I,s:i,s:o}", "item_id", x->item_id,
                                 "output_index", idx, "content_index", 0,
                                 "part", text_part(text)));
        if (!st)
            st = item_done(x, b,
                           message_item_obj(x->item_id, "completed", text));
    }
    x->open = I_NONE;
    cr_buf_reset(&x->text);
    return st;
}

static cr_status_t delta(resp_t *x, cr_buf_t *b, item_t kind, const char *d)
{
    cr_status_t st = CR_OK;
    json_int_t idx;
    if (x->open != kind) {
        if ((st = close_item(x, b)))
            return st;
        x->open = kind;
        idx = (json_int_t)json_array_size(x->items);
        if (kind == I_REASONING) {
            gw_surface_id(x->item_id, sizeof x->item_id, "rs_");
            st = item_added(x, b,
                            json_pack("{s:s,s:s,s:[]}", "id", x->item_id,
                                      "type", "reasoning", "summary"));
            if (!st)
                st = event(x, b, "response.reasoning_summary_part.added",
                           json_pack("{s:s,s:I,s:i,s:{s:s,s:s}}", "item_id",
                                     x->item_id, "output_index", idx,
                                     "summary_index", 0, "part", "type",
                                     "summary_text", "text", ""));
        } else {
            gw_surface_id(x->item_id, sizeof x->item_id, "msg_");
            st = item_added(x, b,
                            message_item_obj(x->item_id, "in_progress", NULL));
            if (!st)
                st = event(x, b, "response.content_part.added",
                           json_pack("{s:s,s:I,s:i,s:o}", "item_id",
                                     x->item_id, "output_index", idx,
                                     "content_index", 0, "part",
                                     text_part("")));
        }
        if (st)
            return st;
    }
    idx = (json_int_t)json_array_size(x->items);
    if (cr_buf_puts(&x->text, d))
        return CR_E_TOO_LARGE;
    if (kind == I_REASONING)
        return event(x, b, "response.reasoning_summary_text.delta",
                     json_pack("{s:s,s:I,s:i,s:s}", "item_id", x->item_id,
                               "output_index", idx, "summary_index", 0,
                               "delta", d));
    return event(x, b, "response.output_text.delta",
                 json_pack("{s:s,s:I,s:i,s:s,s:[]}", "item_id", x->item_id,
                           "output_index", idx, "content_index", 0, "delta",
                           d, "logprobs"));
}

static cr_status_t calls_stream(resp_t *x, cr_buf_t *b, const char *native)
{
    cr_status_t st = close_item(x, b);
    json_t *items = call_items(native);
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
        if (st)
            break;
        x->saw_calls = true;
        json_int_t idx = (json_int_t)json_array_size(x->items);
        const char *id = json_string_value(json_object_get(it, "id"));
        const char *args = json_string_value(json_object_get(it, "arguments"));
        json_t *added = json_deep_copy(it);
        json_object_set_new(added, "status", json_string("in_progress"));
        json_object_set_new(added, "arguments", json_string(""));
        st = item_added(x, b, added);
        if (!st)
            st = event(x, b, "response.function_call_arguments.delta",
                       json_pack("{s:s,s:I,s:s}", "item_id", id,
                                 "output_index", idx, "delta", args));
        if (!st)
            st = event(x, b, "response.function_call_arguments.done",
                       json_pack("{s:s,s:I,s:s}", "item_id", id,
                                 "output_index", idx, "arguments", args));
        if (!st)
            st = item_done(x, b, json_incref(it));
    }
    json_decref(items);
    return st;
}

static bool nonempty(const char *s)
{
    return s && *s;
}

static cr_status_t stream_piece(resp_t *x, cr_buf_t *b, const gw_answer_t *a)
{
    cr_status_t st = CR_OK;
    if (!x->started) {
        x->started = true;
        st = event(x, b, "response.created",
                   json_pack("{s:o}", "response",
                             response_obj(x, "in_progress", NULL, NULL)));
        if (!st)
            st = event(x, b, "response.in_progress",
                       json_pack("{s:o}", "response",
                                 response_obj(x, "in_progress", NULL, NULL)));
    }
    if (!st && nonempty(a->thinking))
        st = delta(x, b, I_REASONING, a->thinking);
    const char *text = a->response;
    if (!st && x->forced && nonempty(text)) {
        st = cr_buf_puts(&x->held, text);
        text = NULL;
    }
    if (!st && nonempty(text))
        st = delta(x, b, I_MESSAGE, text);
    if (!st && a->tool_calls)
        st = calls_stream(x, b, a->tool_calls);
    if (st || !a->done)
        return st;
    if (x->forced && x->held.len) {
        char *calls = x->saw_calls ? NULL : gw_oai_forced_call(x->held.data);
        st = calls ? calls_stream(x, b, calls)
                   : delta(x, b, I_MESSAGE, x->held.data);
        free(calls);
    }
    if (!st)
        st = close_item(x, b);
    if (st)
        return st;
    const char *status = final_status(x, a->done);
    return event(x, b,
                 !strcmp(status, "completed") ? "response.completed"
                                              : "response.incomplete",
                 json_pack("{s:o}", "response",
                           response_obj(x, status, x->items, a->done)));
}

static cr_status_t whole(resp_t *x, cr_buf_t *b, const gw_answer_t *a)
{
    char *forced = x->forced && !a->tool_calls
                       ? gw_oai_forced_call(a->response)
                       : NULL;
    const char *text = forced ? "" : a->response;
    const char *calls = forced ? forced : a->tool_calls;
    json_t *out = json_array();
    char id[GW_SURFACE_ID_MAX];
    if (nonempty(a->thinking)) {
        gw_surface_id(id, sizeof id, "rs_");
        json_array_append_new(out, reasoning_item_obj(id, a->thinking));
    }
    if (nonempty(text)) {
        gw_surface_id(id, sizeof id, "msg_");
        json_array_append_new(out, message_item_obj(id, "completed", text));
    }
    if (calls) {
        json_t *ci = call_items(calls);
        x->saw_calls = json_array_size(ci) > 0;
        json_array_extend(out, ci);
        json_decref(ci);
    }
    free(forced);
    json_t *r = response_obj(x, final_status(x, a->done), out, a->done);
    json_decref(out);
    char *s = r ? json_dumps(r, JSON_COMPACT) : NULL;
    json_decref(r);
    if (!s)
        return CR_E_NOMEM;
    cr_status_t st = cr_buf_puts(b, s);
    free(s);
    return st;
}

static cr_status_t fmt_render(void *arg, cr_buf_t *out, bool stream,
                              const gw_answer_t *a)
{
    resp_t *x = arg;
    if (stream && a->status && !a->done) /* load progress: an SSE comment */
        return cr_buf_printf(out, ": %s\n\n", a->status);
    if (stream)
        return stream_piece(x, out, a);
    return a->done ? whole(x, out, a) : CR_OK;
}

static cr_status_t fmt_stream_error(void *arg, cr_buf_t *out, const char *msg)
{
    resp_t *x = arg;
    return event(x, out, "error",
                 json_pack("{s:s,s:s,s:n}", "code", "server_error",
                           "message", msg, "param"));
}

static const gw_relay_fmt_t resp_fmt = {
    .content_type = "text/event-stream",
    .render = fmt_render,
    .stream_error = fmt_stream_error,
    .error_reply = gw_oai_reply_error,
    .free_arg = resp_free,
};

/* The request fields a response object repeats. */
static json_t *echo_of(const char *body, size_t len)
{
    static const char *const keys[] = {
        "instructions", "max_output_tokens", "reasoning", "temperature",
        "text",         "tool_choice",       "tools",     "top_p",
    };
    json_t *o = json_loadb(body, len, JSON_DECODE_ANY, NULL);
    json_t *e = json_object();
    for (size_t i = 0; e && i < CR_ARRAY_LEN(keys); i++) {
        json_t *v = member(o, keys[i]);
        if (v)
            json_object_set(e, keys[i], v);
    }
    json_decref(o);
    return e;
}

static enum MHD_Result h_responses(gw_req_t *r)
{
    cr_buf_t native;
    cr_buf_init(&native, NATIVE_CAP);
    gw_resp_info_t info;
    cr_err_t err;
    gw_request_t q;
    cr_status_t st =
        gw_resp_translate(r->body.data, r->body.len, &native, &info, &err);
    if (!st)
        st = gw_request_parse(GW_API_CHAT, native.data, native.len, &q, &err);
    cr_buf_free(&native);
    if (st)
        return gw_oai_reply_error(r, st, err.msg);
    resp_t *x = calloc(1, sizeof *x);
    if (!x || !(x->model = strdup(q.model)) ||
        !(x->echo = echo_of(r->body.data, r->body.len)) ||
        !(x->items = json_array())) {
        resp_free(x);
        gw_request_clear(&q);
        return gw_oai_reply_error(r, CR_E_NOMEM, "out of memory");
    }
    x->forced = info.forced_call;
    x->created = (int64_t)time(NULL);
    cr_buf_init(&x->held, TEXT_CAP);
    cr_buf_init(&x->text, TEXT_CAP);
    gw_surface_id(x->id, sizeof x->id, "resp_");
    gw_call_t *call = NULL;
    st = gw_call_start(r, "scheduler", &q.msg, &call, &err);
    gw_request_clear(&q);
    if (st) {
        resp_free(x);
        return gw_oai_reply_error(r, st, err.msg);
    }
    gw_wait_t w = gw_wait_inference(r);
    return gw_relay_fmt(r, &resp_fmt, x, info.stream, &call, &w);
}

static const gw_route_t routes[] = {
    {"/v1/responses", false, GW_M_POST, h_responses, NULL, NULL},
};

const gw_route_t *gw_responses_routes(size_t *n)
{
    *n = CR_ARRAY_LEN(routes);
    return routes;
}
