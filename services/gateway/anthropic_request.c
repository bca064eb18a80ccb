/* anthropic_request.c: an Anthropic Messages body -> the native chat body
 * (gw_anth_translate, see anthropic.h). Answers are anthropic.c's. */
#include "lib/prelude.h"
#include "services/gateway/anthropic.h"
#include "services/gateway/json_util.h"

#include "services/gateway/openai.h"

#include <ctype.h>
#include <jansson.h>

#define NATIVE_CAP (64u * 1024 * 1024) /* a joined text */

/* system: a string or an array of text blocks -> the first message. */
static cr_status_t get_system(const json_t *o, json_t *msgs, cr_err_t *err)
{
    json_t *sys = gw_json_member(o, "system");
    if (!sys)
        return CR_OK;
    if (json_is_string(sys)) {
        if (!json_string_length(sys))
            return CR_OK;
        return gw_json_append(msgs, json_pack("{s:s,s:O}", "role", "system",
                                              "content", sys), err);
    }
    if (!json_is_array(sys))
        return cr_err_set(err, CR_E_INVALID,
                          "system: must be a string or an array of text "
                          "blocks");
    cr_buf_t text;
    cr_buf_init(&text, NATIVE_CAP);
    cr_status_t st = CR_OK;
    size_t i;
    json_t *b;
    json_array_foreach(sys, i, b) {
        const char *type = json_string_value(gw_json_member(b, "type"));
        json_t *t = gw_json_member(b, "text");
        if (!type || strcmp(type, "text") != 0 || !json_is_string(t)) {
            st = cr_err_set(err, CR_E_INVALID,
                            "system[%zu]: must be a text block", i);
            break;
        }
        if (cr_buf_append(&text, json_string_value(t), json_string_length(t))) {
            st = gw_json_nomem(err);
            break;
        }
    }
    if (!st && text.len)
        st = gw_json_append(msgs, json_pack("{s:s,s:s%}", "role", "system", "content",
                                            text.data, text.len),
                            err);
    cr_buf_free(&text);
    return st;
}

/* An image block's base64 data. */
static cr_status_t image_of(const json_t *b, const char *where, json_t **out,
                            cr_err_t *err)
{
    json_t *src = gw_json_member(b, "source");
    const char *type = json_string_value(gw_json_member(src, "type"));
    json_t *data = gw_json_member(src, "data");
    if (!json_is_object(src) || !type)
        return cr_err_set(err, CR_E_INVALID, "%s: invalid image source",
                          where);
    if (strcmp(type, "base64") != 0)
        return cr_err_set(err, CR_E_INVALID,
                          "%s: invalid image source type: %s. Only base64 "
                          "images are supported.",
                          where, type);
    if (!json_is_string(data))
        return cr_err_set(err, CR_E_INVALID, "%s: image source has no data",
                          where);
    *out = json_copy(data);
    return *out ? CR_OK : gw_json_nomem(err);
}

/* A tool_result's content (a string or text/image blocks) -> the native
 * tool message's content and images. */
static cr_status_t tool_result(const json_t *b, const char *where,
                               const json_t *msgs, json_t *out, cr_err_t *err)
{
    json_t *id = gw_json_member(b, "tool_use_id");
    if (!json_is_string(id))
        return cr_err_set(err, CR_E_INVALID,
                          "%s: tool_result needs a string 'tool_use_id'",
                          where);
    json_t *c = gw_json_member(b, "content");
    json_t *m = json_pack("{s:s,s:O}", "role", "tool", "tool_call_id", id);
    if (!m)
        return gw_json_nomem(err);
    const char *name = gw_native_tool_name(msgs, json_string_value(id));
    cr_status_t st = CR_OK;
    if (name)
        st = gw_json_put(m, "tool_name", json_string(name), err);
    if (!st && (!c || json_is_string(c))) {
        st = gw_json_put(m, "content", c ? json_copy(c) : json_string(""), err);
    } else if (!st && json_is_array(c)) {
        cr_buf_t text;
        cr_buf_init(&text, NATIVE_CAP);
        json_t *images = json_array();
        size_t i;
        json_t *p;
        json_array_foreach(c, i, p) {
            const char *type = json_string_value(gw_json_member(p, "type"));
            char in[160];
            snprintf(in, sizeof in, "%s.content[%zu]", where, i);
            if (type && !strcmp(type, "text") &&
                json_is_string(gw_json_member(p, "text"))) {
                if (text.len && cr_buf_putc(&text, '\n'))
                    st = gw_json_nomem(err);
                else if (cr_buf_puts(&text,
                                     json_string_value(gw_json_member(p, "text"))))
                    st = gw_json_nomem(err);
            } else if (type && !strcmp(type, "image")) {
                json_t *data = NULL;
                if (!(st = image_of(p, in, &data, err)))
                    st = gw_json_append(images, data, err);
            } else {
                st = cr_err_set(err, CR_E_INVALID,
                                "%s: unknown content block type '%s' in a "
                                "tool_result",
                                in, type ? type : "(none)");
            }
            if (st)
                break;
        }
        if (!st)
            st = gw_json_put(m, "content", json_string(text.data ? text.data : ""),
                             err);
        if (!st && json_array_size(images))
            st = gw_json_put(m, "images", json_incref(images), err);
        json_decref(images);
        cr_buf_free(&text);
    } else if (!st) {
        st = cr_err_set(err, CR_E_INVALID,
                        "%s: tool_result content must be a string or an "
                        "array of blocks",
                        where);
    }
    if (!st && json_is_true(gw_json_member(b, "is_error"))) {
        /* the model reads that the call failed */
        const char *t = json_string_value(json_object_get(m, "content"));
        size_t n = strlen(t ? t : "") + 8;
        char *pre = malloc(n);
        if (!pre)
            st = gw_json_nomem(err);
        else {
            snprintf(pre, n, "Error: %s", t ? t : "");
            st = gw_json_put(m, "content", json_string(pre), err);
            free(pre);
        }
    }
    if (st) {
        json_decref(m);
        return st;
    }
    return gw_json_append(out, m, err);
}

/* One Anthropic message -> native messages appended to msgs. */
static cr_status_t one_message(const json_t *m, size_t idx, json_t *msgs,
                               cr_err_t *err)
{
    if (!json_is_object(m))
        return cr_err_set(err, CR_E_INVALID, "messages[%zu]: must be an object",
                          idx);
    const char *role = json_string_value(gw_json_member(m, "role"));
    if (!role || (strcmp(role, "user") != 0 && strcmp(role, "assistant") != 0))
        return cr_err_set(err, CR_E_INVALID,
                          "messages[%zu].role: must be \"user\" or "
                          "\"assistant\"",
                          idx);
    json_t *content = gw_json_member(m, "content");
    if (json_is_string(content))
        return gw_json_append(msgs, json_pack("{s:s,s:O}", "role", role, "content",
                                              content), err);
    if (!json_is_array(content))
        return cr_err_set(err, CR_E_INVALID,
                          "messages[%zu].content: must be a string or an "
                          "array of content blocks",
                          idx);
    cr_buf_t text;
    cr_buf_init(&text, NATIVE_CAP);
    json_t *images = json_array(), *calls = json_array(),
           *results = json_array();
    json_t *thinking = NULL;
    cr_status_t st = images && calls && results ? CR_OK : gw_json_nomem(err);
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b) {
        if (st)
            break;
        char where[96];
        snprintf(where, sizeof where, "messages[%zu].content[%zu]", idx, i);
        const char *type = json_string_value(gw_json_member(b, "type"));
        if (!json_is_object(b) || !type) {
            st = cr_err_set(err, CR_E_INVALID,
                            "%s: a content block needs a string 'type'", where);
        } else if (!strcmp(type, "text")) {
            json_t *t = gw_json_member(b, "text");
            if (!json_is_string(t))
                st = cr_err_set(err, CR_E_INVALID,
                                "%s: text block needs a string 'text'", where);
            else if (cr_buf_append(&text, json_string_value(t),
                                   json_string_length(t)))
                st = gw_json_nomem(err);
        } else if (!strcmp(type, "image")) {
            json_t *data = NULL;
            if (!(st = image_of(b, where, &data, err)))
                st = gw_json_append(images, data, err);
        } else if (!strcmp(type, "tool_use")) {
            json_t *id = gw_json_member(b, "id"), *name = gw_json_member(b, "name");
            json_t *input = gw_json_member(b, "input");
            if (!json_is_string(id) || !json_string_length(id))
                st = cr_err_set(err, CR_E_INVALID,
                                "%s: tool_use block missing required 'id' "
                                "field",
                                where);
            else if (!json_is_string(name) || !json_string_length(name))
                st = cr_err_set(err, CR_E_INVALID,
                                "%s: tool_use block missing required 'name' "
                                "field",
                                where);
            else if (input && !json_is_object(input))
                st = cr_err_set(err, CR_E_INVALID,
                                "%s: tool_use 'input' must be an object",
                                where);
            else
                st = gw_json_append(calls,
                                    json_pack("{s:O,s:{s:I,s:O,s:o}}", "id", id,
                                              "function", "index",
                                              (json_int_t)json_array_size(calls),
                                              "name", name, "arguments",
                                              input ? json_copy(input)
                                                    : json_object()),
                                    err);
        } else if (!strcmp(type, "tool_result")) {
            /* tool_use ids of this and earlier messages are in msgs */
            st = tool_result(b, where, msgs, results, err);
        } else if (!strcmp(type, "thinking")) {
            json_t *t = gw_json_member(b, "thinking");
            if (!json_is_string(t))
                st = cr_err_set(err, CR_E_INVALID,
                                "%s: thinking block needs a string "
                                "'thinking'",
                                where);
            else
                thinking = t;
        } else {
            st = cr_err_set(err, CR_E_INVALID,
                            "%s: unknown content block type '%s' (supported: "
                            "text, image, tool_use, tool_result, thinking)",
                            where, type);
        }
    }
    /* tool results answer the previous turn, so they come first */
    if (!st && json_array_size(results))
        st = json_array_extend(msgs, results) ? gw_json_nomem(err) : CR_OK;
    if (!st && (text.len || json_array_size(images) ||
                json_array_size(calls) || thinking)) {
        json_t *nm = json_pack("{s:s,s:s%}", "role", role, "content",
                               text.data ? text.data : "", text.len);
        st = nm ? CR_OK : gw_json_nomem(err);
        if (!st && json_array_size(images))
            st = gw_json_put(nm, "images", json_incref(images), err);
        if (!st && json_array_size(calls))
            st = gw_json_put(nm, "tool_calls", json_incref(calls), err);
        if (!st && thinking)
            st = gw_json_put(nm, "thinking", json_copy(thinking), err);
        if (!st)
            st = gw_json_append(msgs, nm, err);
        else
            json_decref(nm);
    }
    json_decref(images);
    json_decref(calls);
    json_decref(results);
    cr_buf_free(&text);
    return st;
}

static cr_status_t get_messages(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *v = gw_json_member(o, "messages");
    if (!json_is_array(v) || !json_array_size(v))
        return cr_err_set(err, CR_E_INVALID, "messages is required");
    json_t *msgs = json_array();
    cr_status_t st = msgs ? get_system(o, msgs, err) : gw_json_nomem(err);
    for (size_t i = 0; !st && i < json_array_size(v); i++)
        st = one_message(json_array_get(v, i), i, msgs, err);
    if (st) {
        json_decref(msgs);
        return st;
    }
    return gw_json_put(n, "messages", msgs, err);
}

/* tools -> native function tools; tool_choice none/auto/any/tool. */
static cr_status_t get_tools(const json_t *o, json_t *n, gw_anth_info_t *info,
                             cr_err_t *err)
{
    json_t *tools = gw_json_member(o, "tools");
    json_t *choice = gw_json_member(o, "tool_choice");
    if (tools && !json_is_array(tools))
        return cr_err_set(err, CR_E_INVALID, "tools: must be an array");
    const char *ctype = json_string_value(gw_json_member(choice, "type"));
    const char *want = NULL;
    if (choice) {
        if (!ctype || (strcmp(ctype, "auto") && strcmp(ctype, "any") &&
                       strcmp(ctype, "tool") && strcmp(ctype, "none")))
            return cr_err_set(err, CR_E_INVALID,
                              "tool_choice.type: must be \"auto\", \"any\", "
                              "\"tool\" or \"none\"");
        if (!strcmp(ctype, "tool") &&
            !(want = json_string_value(gw_json_member(choice, "name"))))
            return cr_err_set(err, CR_E_INVALID,
                              "tool_choice: type \"tool\" needs a 'name'");
    }
    if (!json_array_size(tools) || (ctype && !strcmp(ctype, "none")))
        return CR_OK;
    json_t *out = json_array();
    if (!out)
        return gw_json_nomem(err);
    size_t i;
    json_t *t;
    cr_status_t st = CR_OK;
    json_array_foreach(tools, i, t) {
        const char *type = json_string_value(gw_json_member(t, "type"));
        json_t *name = gw_json_member(t, "name");
        json_t *schema = gw_json_member(t, "input_schema");
        if (type && strcmp(type, "custom") != 0) {
            st = cr_err_set(err, CR_E_INVALID,
                            "tools[%zu]: tool type '%s' is not supported "
                            "(only client tools with an input_schema)",
                            i, type);
            break;
        }
        if (!json_is_string(name) || !json_is_object(schema)) {
            st = cr_err_set(err, CR_E_INVALID,
                            "tools[%zu]: needs a string 'name' and an object "
                            "'input_schema'",
                            i);
            break;
        }
        if (want && strcmp(json_string_value(name), want) != 0)
            continue;
        json_t *fn = json_pack("{s:O,s:O}", "name", name, "parameters", schema);
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
                        "tool_choice names tool '%s', which is not in tools",
                        want);
    if (st) {
        json_decref(out);
        return st;
    }
    if ((st = gw_json_put(n, "tools", out, err)))
        return st;
    if (ctype && (!strcmp(ctype, "any") || want))
        return gw_oai_force_call(n, &info->forced_call, err);
    return CR_OK;
}

/* thinking {type: enabled|disabled|adaptive} -> think; without it,
 * output_config.effort low/medium/high/max (xhigh: high) as Ollama. */
static cr_status_t get_thinking(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *t = gw_json_member(o, "thinking");
    const char *effort = json_string_value(gw_json_member(gw_json_member(o, "output_config"),
                                                          "effort"));
    if (!t && effort) {
        if (!strcmp(effort, "xhigh"))
            effort = "high";
        if (strcmp(effort, "low") && strcmp(effort, "medium") &&
            strcmp(effort, "high") && strcmp(effort, "max"))
            return cr_err_set(err, CR_E_INVALID,
                              "output_config.effort: must be \"low\", "
                              "\"medium\", \"high\", \"xhigh\" or \"max\"");
        return gw_json_put(n, "think", json_string(effort), err);
    }
    if (!t)
        return CR_OK;
    const char *type = json_string_value(gw_json_member(t, "type"));
    if (!json_is_object(t) || !type)
        return cr_err_set(err, CR_E_INVALID,
                          "thinking: must be an object with a 'type'");
    if (!strcmp(type, "enabled") || !strcmp(type, "adaptive"))
        return gw_json_put(n, "think", json_true(), err);
    if (!strcmp(type, "disabled"))
        return gw_json_put(n, "think", json_false(), err);
    return cr_err_set(err, CR_E_INVALID,
                      "thinking.type: must be \"enabled\", \"adaptive\" or "
                      "\"disabled\", not '%s'",
                      type);
}

static cr_status_t copy_number(const json_t *o, const char *from,
                               json_t *opts, const char *to, cr_err_t *err)
{
    json_t *v = gw_json_member(o, from);
    if (!v)
        return CR_OK;
    if (!json_is_number(v))
        return cr_err_set(err, CR_E_INVALID, "%s: must be a number", from);
    return gw_json_put(opts, to, json_copy(v), err);
}

/* output_format {type: json_schema, schema} (structured outputs) ->
 * format. */
static cr_status_t get_format(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *f = gw_json_member(o, "output_format");
    if (!f)
        f = gw_json_member(gw_json_member(o, "output_config"), "format");
    if (!f)
        return CR_OK;
    const char *type = json_string_value(gw_json_member(f, "type"));
    json_t *schema = gw_json_member(f, "schema");
    if (!type || strcmp(type, "json_schema") != 0 || !json_is_object(schema))
        return cr_err_set(err, CR_E_INVALID,
                          "output_format: must be {\"type\": \"json_schema\", "
                          "\"schema\": {...}}");
    if (json_object_get(n, "format"))
        return cr_err_set(err, CR_E_INVALID,
                          "output_format cannot be combined with tool_choice "
                          "\"any\" or \"tool\"");
    return gw_json_put(n, "format", json_copy(schema), err);
}

/* Fields that would change the answer and that corral cannot honour. */
static cr_status_t refuse_unsupported(const json_t *o, cr_err_t *err)
{
    static const char *const fields[] = {"mcp_servers", "container"};
    for (size_t i = 0; i < CR_ARRAY_LEN(fields); i++) {
        json_t *v = gw_json_member(o, fields[i]);
        if (v && !(json_is_array(v) && !json_array_size(v)))
            return cr_err_set(err, CR_E_INVALID, "%s is not supported",
                              fields[i]);
    }
    return CR_OK;
}

static cr_status_t translate(const json_t *o, json_t *n, bool count,
                             gw_anth_info_t *info, cr_err_t *err)
{
    json_t *model = gw_json_member(o, "model");
    if (!json_is_string(model) || !json_string_length(model))
        return cr_err_set(err, CR_E_INVALID, "model is required");
    cr_status_t st;
    if ((st = gw_json_put(n, "model", json_copy(model), err)))
        return st;
    json_t *stream = gw_json_member(o, "stream");
    if (stream && !json_is_boolean(stream))
        return cr_err_set(err, CR_E_INVALID, "stream: must be a boolean");
    info->stream = !count && json_is_true(stream);
    json_t *opts = json_object();
    if (!opts)
        return gw_json_nomem(err);
    json_t *mt = gw_json_member(o, "max_tokens");
    if (count) {
        st = gw_json_put(opts, "num_predict", json_integer(1), err);
    } else if (!json_is_integer(mt) || json_integer_value(mt) <= 0) {
        st = cr_err_set(err, CR_E_INVALID,
                        "max_tokens is required and must be positive");
    } else {
        st = gw_json_put(opts, "num_predict", json_copy(mt), err);
    }
    json_t *stops = gw_json_member(o, "stop_sequences");
    if (!st && stops) {
        size_t i;
        json_t *s;
        if (!json_is_array(stops))
            st = cr_err_set(err, CR_E_INVALID,
                            "stop_sequences: must be an array of strings");
        json_array_foreach(stops, i, s) if (!st && !json_is_string(s)) st =
            cr_err_set(err, CR_E_INVALID,
                       "stop_sequences[%zu]: must be a string", i);
        if (!st && json_array_size(stops))
            st = gw_json_put(opts, "stop", json_copy(stops), err);
    }
    if (!st)
        st = copy_number(o, "temperature", opts, "temperature", err);
    if (!st)
        st = copy_number(o, "top_p", opts, "top_p", err);
    if (!st)
        st = copy_number(o, "top_k", opts, "top_k", err);
    if (!st)
        st = gw_json_put(n, "options", opts, err);
    else
        json_decref(opts);
    if (st || (st = refuse_unsupported(o, err)) ||
        (st = get_messages(o, n, err)) || (st = get_tools(o, n, info, err)) ||
        (st = get_format(o, n, err)) || (st = get_thinking(o, n, err)))
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

cr_status_t gw_anth_translate(const char *body, size_t len, bool count_tokens,
                              cr_buf_t *out, gw_anth_info_t *info,
                              cr_err_t *err)
{
    memset(info, 0, sizeof *info);
    if (!body || all_space(body, len))
        return cr_err_set(err, CR_E_INVALID, "missing request body");
    json_error_t je;
    json_t *o = json_loadb(body, len, JSON_DECODE_ANY, &je);
    if (!o)
        return cr_err_set(err, CR_E_INVALID, "%s (line %d, column %d)",
                          je.text, je.line, je.column);
    cr_status_t st;
    json_t *n = json_object();
    if (!json_is_object(o))
        st = cr_err_set(err, CR_E_INVALID, "the request body must be a JSON "
                                           "object");
    else if (!n)
        st = gw_json_nomem(err);
    else
        st = translate(o, n, count_tokens, info, err);
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
