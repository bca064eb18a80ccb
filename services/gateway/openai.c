/* openai.c: the /v1 routes (see openai.h).
 *
 * Requests: OpenAI JSON -> native JSON (jansson) -> gw_request_parse, so
 * every native check applies. Answers: generate/chat go through
 * gw_relay_fmt with the renderers below; embeddings and models are one
 * exchange each. Ids are "chatcmpl-<n>" / "cmpl-<n>" with n in 0..998 as
 * Ollama draws them; `created` is one value for a whole stream. */
#include "lib/prelude.h"
#include "services/gateway/openai.h"
#include "services/gateway/json_util.h"
#include "services/gateway/image_fetch.h"

#include "lib/log.h"
#include "lib/model_name.h"
#include "services/gateway/convert.h"
#include "services/gateway/exchange.h"
#include "services/gateway/metrics.h"
#include "services/gateway/relay.h"
#include "services/gateway/render.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <time.h>

#define NATIVE_CAP (64u * 1024 * 1024) /* translated body */
#define REPLY_CAP (512u * 1024 * 1024)

/* ================= requests ================= */

static const char *kind_of(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "object";
    case JSON_ARRAY: return "array";
    case JSON_STRING: return "string";
    case JSON_INTEGER:
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    default: return "null";
    }
}

static cr_status_t type_error(cr_err_t *err, const char *field,
                              const json_t *v, const char *want)
{
    return cr_err_set(err, CR_E_INVALID,
                      "json: cannot unmarshal %s into field '%s' of type %s",
                      kind_of(v), field, want);
}

/* Copies an optional number field into options[key]. */
static cr_status_t copy_number(const json_t *o, const char *from,
                               json_t *opts, const char *to, bool integer,
                               cr_err_t *err)
{
    json_t *v = gw_json_member(o, from);
    if (!v)
        return CR_OK;
    if (!json_is_number(v))
        return type_error(err, from, v, integer ? "int" : "float");
    return gw_json_put(opts, to, json_copy(v), err);
}

/* options: the extra `options` object (its keys are checked natively),
 * then the OpenAI fields on top. */
static cr_status_t base_options(const json_t *o, json_t **out, cr_err_t *err)
{
    json_t *v = gw_json_member(o, "options");
    if (v && !json_is_object(v))
        return type_error(err, "options", v, "object");
    *out = v ? json_deep_copy(v) : json_object();
    if (!*out)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    return CR_OK;
}

/* stop: a string or an array of strings -> options.stop. */
static cr_status_t get_stop(const json_t *o, json_t *opts, cr_err_t *err)
{
    json_t *v = gw_json_member(o, "stop");
    if (!v)
        return CR_OK;
    if (json_is_string(v))
        return gw_json_put(opts, "stop", json_pack("[O]", v), err);
    if (!json_is_array(v))
        return type_error(err, "stop", v, "string or []string");
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) if (!json_is_string(e)) return cr_err_set(
        err, CR_E_INVALID, "invalid type for 'stop' field: %s", kind_of(e));
    return gw_json_put(opts, "stop", json_copy(v), err);
}

/* stream and stream_options.include_usage. */
static cr_status_t get_stream(const json_t *o, gw_oai_info_t *info,
                              cr_err_t *err)
{
    json_t *v = gw_json_member(o, "stream");
    if (v && !json_is_boolean(v))
        return type_error(err, "stream", v, "bool");
    info->stream = v && json_is_true(v);
    json_t *so = gw_json_member(o, "stream_options");
    if (so && !json_is_object(so))
        return type_error(err, "stream_options", so, "object");
    json_t *iu = so ? gw_json_member(so, "include_usage") : NULL;
    if (iu && !json_is_boolean(iu))
        return type_error(err, "stream_options.include_usage", iu, "bool");
    info->include_usage = iu && json_is_true(iu);
    return CR_OK;
}

/* Fields every native request copies as they are. */
static cr_status_t copy_common(const json_t *o, json_t *n, cr_err_t *err)
{
    static const char *const keys[] = {"model", "keep_alive"};
    for (size_t i = 0; i < CR_ARRAY_LEN(keys); i++) {
        json_t *v = json_object_get(o, keys[i]);
        if (v) {
            cr_status_t st = gw_json_put(n, keys[i], json_copy(v), err);
            if (st)
                return st;
        }
    }
    return CR_OK;
}

/* _debug_render_only (an Ollama extension of both completion routes) goes
 * on as the native field. */
static cr_status_t copy_debug(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *v = gw_json_member(o, "_debug_render_only");
    if (!v)
        return CR_OK;
    if (!json_is_boolean(v))
        return type_error(err, "_debug_render_only", v, "bool");
    return gw_json_put(n, "_debug_render_only", json_copy(v), err);
}

/* ---- chat messages ---- */

/* An image part's data URI -> its base64 payload. */
static cr_status_t image_data(const char *url, json_t **out, cr_err_t *err)
{
    static const char *const prefixes[] = {
        "data:image/jpeg;base64,", "data:image/jpg;base64,",
        "data:image/png;base64,",  "data:image/webp;base64,",
        "data:;base64,",
    };
    if (!strncmp(url, "http://", 7) || !strncmp(url, "https://", 8)) {
        gw_fetch_limits_t lim;
        gw_fetch_limits_from_env(&lim);
        if (!lim.enabled)
            return cr_err_set(err, CR_E_INVALID,
                              "image URLs are not currently supported, please "
                              "use base64 encoded data instead");
        char *b64 = NULL;
        cr_status_t st = gw_image_fetch(url, &lim, &b64, err);
        if (st)
            return st;
        *out = json_string(b64);
        free(b64);
        return *out ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < CR_ARRAY_LEN(prefixes); i++) {
        size_t n = strlen(prefixes[i]);
        if (!strncmp(url, prefixes[i], n)) {
            *out = json_string(url + n);
            return *out ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
        }
    }
    return cr_err_set(err, CR_E_INVALID, "invalid image input");
}

static cr_status_t append_msg(json_t *msgs, const char *role, json_t *extra,
                              cr_err_t *err)
{
    json_t *m = json_object();
    if (!m || json_object_set_new(m, "role", json_string(role)) ||
        (extra && json_object_update(m, extra)) ||
        json_array_append_new(msgs, m)) {
        json_decref(m);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    return CR_OK;
}

/* One content part -> its own native message with the same role. */
static cr_status_t content_part(json_t *msgs, const char *role,
                                const json_t *part, cr_err_t *err)
{
    if (!json_is_object(part))
        return cr_err_set(err, CR_E_INVALID, "invalid message format");
    const char *type = json_string_value(gw_json_member(part, "type"));
    json_t *extra = json_object();
    if (!extra)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = CR_OK;
    if (type && !strcmp(type, "text")) {
        json_t *t = gw_json_member(part, "text");
        if (!json_is_string(t))
            st = cr_err_set(err, CR_E_INVALID, "invalid message format");
        else
            st = gw_json_put(extra, "content", json_copy(t), err);
    } else if (type && !strcmp(type, "image_url")) {
        json_t *iu = gw_json_member(part, "image_url");
        json_t *url = json_is_object(iu) ? gw_json_member(iu, "url") : iu;
        json_t *data = NULL;
        if (!json_is_string(url))
            st = cr_err_set(err, CR_E_INVALID, "invalid message format");
        else if (!(st = image_data(json_string_value(url), &data, err)))
            st = gw_json_put(extra, "images", json_pack("[o]", data), err);
    } else if (type && !strcmp(type, "input_audio")) {
        json_t *ia = gw_json_member(part, "input_audio");
        json_t *data = json_is_object(ia) ? gw_json_member(ia, "data") : NULL;
        if (!json_is_string(data))
            st = cr_err_set(err, CR_E_INVALID, "invalid message format");
        else
            st = gw_json_put(extra, "images", json_pack("[O]", data), err);
    } else {
        st = cr_err_set(err, CR_E_INVALID, "invalid message format");
    }
    if (!st)
        st = append_msg(msgs, role, extra, err);
    json_decref(extra);
    return st;
}

/* tool_calls with JSON-string arguments -> native calls with objects. */
static cr_status_t tool_calls_in(const json_t *calls, json_t **out,
                                 cr_err_t *err)
{
    if (!json_is_array(calls))
        return type_error(err, "messages.tool_calls", calls, "[]ToolCall");
    json_t *arr = json_array();
    if (!arr)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        json_t *fn = json_is_object(c) ? gw_json_member(c, "function") : NULL;
        json_t *name = fn ? gw_json_member(fn, "name") : NULL;
        json_t *args = fn ? gw_json_member(fn, "arguments") : NULL;
        if (!json_is_object(fn) || (name && !json_is_string(name)) ||
            (args && !json_is_string(args))) {
            json_decref(arr);
            return cr_err_set(err, CR_E_INVALID, "invalid tool call");
        }
        json_t *obj = NULL;
        if (args) {
            json_error_t je;
            obj = json_loads(json_string_value(args), JSON_DECODE_ANY, &je);
            if (!json_is_object(obj)) {
                json_decref(obj);
                json_decref(arr);
                return cr_err_set(err, CR_E_INVALID,
                                  "invalid tool call arguments");
            }
        } else {
            obj = json_object();
        }
        json_t *nf = json_pack("{s:I,s:s,s:o}", "index", (json_int_t)i, "name",
                               name ? json_string_value(name) : "",
                               "arguments", obj);
        json_t *nc = nf ? json_pack("{s:o}", "function", nf) : NULL;
        json_t *id = gw_json_member(c, "id");
        if (nc && json_is_string(id))
            json_object_set(nc, "id", id);
        if (!nc || json_array_append_new(arr, nc)) {
            json_decref(arr);
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        }
    }
    *out = arr;
    return CR_OK;
}

/* The function name of an earlier call with this id, or NULL. */
static const char *tool_name_of(const json_t *msgs, size_t before,
                                const char *call_id)
{
    for (size_t i = 0; i < before; i++) {
        json_t *calls = gw_json_member(json_array_get(msgs, i), "tool_calls");
        size_t k;
        json_t *c;
        json_array_foreach(calls, k, c) {
            const char *id = json_string_value(gw_json_member(c, "id"));
            json_t *fn = gw_json_member(c, "function");
            if (id && !strcmp(id, call_id))
                return json_string_value(gw_json_member(fn, "name"));
        }
    }
    return NULL;
}

static cr_status_t one_message(const json_t *all, size_t idx, json_t *msgs,
                               cr_err_t *err)
{
    const json_t *m = json_array_get(all, idx);
    if (!json_is_object(m))
        return type_error(err, "messages", m, "Message");
    json_t *rolev = gw_json_member(m, "role");
    if (rolev && !json_is_string(rolev))
        return type_error(err, "messages.role", rolev, "string");
    const char *role = rolev ? json_string_value(rolev) : "";
    if (!strcmp(role, "developer")) /* OpenAI's newer name for system */
        role = "system";
    json_t *content = gw_json_member(m, "content");
    json_t *calls = gw_json_member(m, "tool_calls");

    json_t *extra = json_object();
    if (!extra)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = CR_OK;
    json_t *v;
    if ((v = gw_json_member(m, "reasoning")) && json_is_string(v))
        st = gw_json_put(extra, "thinking", json_copy(v), err);
    if (!st && calls) {
        json_t *native = NULL;
        if (!(st = tool_calls_in(calls, &native, err)))
            st = gw_json_put(extra, "tool_calls", native, err);
    }
    if (!st && !strcmp(role, "tool")) {
        json_t *name = gw_json_member(m, "name");
        json_t *cid = gw_json_member(m, "tool_call_id");
        const char *tn = json_is_string(name) ? json_string_value(name) : NULL;
        if (!tn && json_is_string(cid))
            tn = tool_name_of(all, idx, json_string_value(cid));
        if (tn)
            st = gw_json_put(extra, "tool_name", json_string(tn), err);
        if (!st && json_is_string(cid))
            st = gw_json_put(extra, "tool_call_id", json_copy(cid), err);
    }
    if (st)
        goto out;
    if (!content) {
        if (!calls) {
            st = cr_err_set(err, CR_E_INVALID,
                            "invalid message content type: <nil>");
            goto out;
        }
        st = append_msg(msgs, role, extra, err);
    } else if (json_is_string(content)) {
        if (!(st = gw_json_put(extra, "content", json_copy(content), err)))
            st = append_msg(msgs, role, extra, err);
    } else if (json_is_array(content)) {
        size_t i;
        json_t *part;
        json_array_foreach(content, i, part) {
            if ((st = content_part(msgs, role, part, err)))
                goto out;
        }
        /* calls and reasoning ride on a message of their own */
        if (json_object_size(extra))
            st = append_msg(msgs, role, extra, err);
    } else {
        st = cr_err_set(err, CR_E_INVALID, "invalid message content type: %s",
                        kind_of(content));
    }
out:
    json_decref(extra);
    return st;
}

static cr_status_t get_messages(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *v = gw_json_member(o, "messages");
    if (v && !json_is_array(v))
        return type_error(err, "messages", v, "[]Message");
    if (!v || json_array_size(v) == 0)
        return cr_err_set(err, CR_E_INVALID, "[] is too short - 'messages'");
    json_t *msgs = json_array();
    if (!msgs)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(v); i++) {
        cr_status_t st = one_message(v, i, msgs, err);
        if (st) {
            json_decref(msgs);
            return st;
        }
    }
    return gw_json_put(n, "messages", msgs, err);
}

/* response_format -> format. */
static cr_status_t get_format(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *rf = gw_json_member(o, "response_format");
    if (!rf)
        return CR_OK;
    if (!json_is_object(rf))
        return type_error(err, "response_format", rf, "object");
    const char *type = json_string_value(gw_json_member(rf, "type"));
    if (!type || !strcmp(type, "text"))
        return CR_OK;
    if (!strcmp(type, "json_object"))
        return gw_json_put(n, "format", json_string("json"), err);
    if (!strcmp(type, "json_schema")) {
        json_t *js = gw_json_member(rf, "json_schema");
        json_t *schema = json_is_object(js) ? gw_json_member(js, "schema") : NULL;
        if (!json_is_object(schema))
            return gw_json_put(n, "format", json_string("json"), err);
        return gw_json_put(n, "format", json_copy(schema), err);
    }
    return cr_err_set(err, CR_E_INVALID,
                      "invalid response_format type: '%s' (must be \"text\", "
                      "\"json_object\" or \"json_schema\")",
                      type);
}

/* reasoning_effort / reasoning.effort -> think. */
static cr_status_t get_reasoning(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *v = gw_json_member(o, "reasoning_effort");
    json_t *r = gw_json_member(o, "reasoning");
    if (!v && json_is_object(r))
        v = gw_json_member(r, "effort");
    if (!v)
        return CR_OK;
    const char *e = json_string_value(v);
    if (!e)
        return type_error(err, "reasoning_effort", v, "string");
    if (!strcmp(e, "none"))
        return gw_json_put(n, "think", json_false(), err);
    const char *level = NULL;
    if (!strcmp(e, "minimal"))
        level = "low";
    else if (!strcmp(e, "low") || !strcmp(e, "medium") ||
             !strcmp(e, "high") || !strcmp(e, "max"))
        level = e;
    else if (!strcmp(e, "xhigh") || !strcmp(e, "ultra"))
        level = "max";
    if (!level)
        return cr_err_set(err, CR_E_INVALID,
                          "invalid reasoning value: '%s' (must be \"none\", "
                          "\"minimal\", \"low\", \"medium\", \"high\", "
                          "\"xhigh\" or \"max\")",
                          e);
    return gw_json_put(n, "think", json_string(level), err);
}

/* tools, minus what tool_choice rules out: "none" drops them, a named
 * function keeps only that one; "auto" and "required" keep them all
 * (force_tools then makes a call the only possible answer). */
static cr_status_t get_tools(const json_t *o, json_t *n, cr_err_t *err)
{
    json_t *tools = gw_json_member(o, "tools");
    if (!tools)
        return CR_OK;
    json_t *choice = gw_json_member(o, "tool_choice");
    if (json_is_string(choice) && !strcmp(json_string_value(choice), "none"))
        return CR_OK;
    json_t *fn = json_is_object(choice) ? gw_json_member(choice, "function") : NULL;
    const char *want = json_string_value(gw_json_member(fn, "name"));
    if (!want || !json_is_array(tools))
        return gw_json_put(n, "tools", json_copy(tools), err);
    json_t *keep = json_array();
    if (!keep)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *name =
            json_string_value(gw_json_member(gw_json_member(t, "function"), "name"));
        if (name && !strcmp(name, want))
            json_array_append(keep, t);
    }
    if (json_array_size(keep) == 0) {
        json_decref(keep);
        return cr_err_set(err, CR_E_INVALID,
                          "tool_choice names function '%s', which is not in "
                          "tools",
                          want);
    }
    return gw_json_put(n, "tools", keep, err);
}

/* tool_choice "required" or a named function: the answer must be a call.
 * Generation is constrained to {"name": <one of the tools>, "arguments":
 * <that tool's parameters>} through `format` (a JSON Schema), and the
 * renderers turn that text back into a tool call. */
static cr_status_t force_tools(const json_t *o, json_t *n,
                               gw_oai_info_t *info, cr_err_t *err)
{
    json_t *choice = gw_json_member(o, "tool_choice");
    bool required =
        json_is_string(choice) && !strcmp(json_string_value(choice), "required");
    bool named = json_is_object(choice) &&
                 json_is_string(gw_json_member(gw_json_member(choice, "function"), "name"));
    json_t *tools = json_object_get(n, "tools");
    if ((!required && !named) || json_array_size(tools) == 0)
        return CR_OK;
    if (json_object_get(n, "format"))
        return cr_err_set(err, CR_E_INVALID,
                          "response_format cannot be combined with "
                          "tool_choice \"required\" or a named function");
    return gw_oai_force_call(n, &info->forced_call, err);
}

cr_status_t gw_oai_force_call(json_t *n, bool *forced, cr_err_t *err)
{
    json_t *tools = json_object_get(n, "tools");
    json_t *alts = json_array();
    if (!alts)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = gw_json_member(t, "function");
        const char *name = json_string_value(gw_json_member(fn, "name"));
        if (!name)
            continue;
        json_t *params = gw_json_member(fn, "parameters");
        json_t *args = json_is_object(params) ? json_deep_copy(params)
                                              : json_pack("{s:s}", "type",
                                                          "object");
        json_t *alt = json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s]}", "type",
                                "object", "properties", "name", "const", name,
                                "arguments", args, "required", "name",
                                "arguments");
        if (!alt || json_array_append_new(alts, alt)) {
            json_decref(alts);
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        }
    }
    if (json_array_size(alts) == 0) {
        json_decref(alts);
        return CR_OK;
    }
    json_t *schema = json_array_size(alts) == 1
                         ? json_incref(json_array_get(alts, 0))
                         : json_pack("{s:O}", "anyOf", alts);
    json_decref(alts);
    *forced = true;
    return gw_json_put(n, "format", schema, err);
}

static cr_status_t translate_chat(const json_t *o, json_t *n,
                                  gw_oai_info_t *info, cr_err_t *err)
{
    json_t *opts = NULL;
    cr_status_t st;
    if ((st = copy_common(o, n, err)) || (st = copy_debug(o, n, err)) ||
        (st = get_stream(o, info, err)) ||
        (st = get_messages(o, n, err)) || (st = get_format(o, n, err)) ||
        (st = get_reasoning(o, n, err)) || (st = get_tools(o, n, err)) ||
        (st = force_tools(o, n, info, err)) ||
        (st = base_options(o, &opts, err)))
        return st;
    /* max_completion_tokens (newer SDKs) when max_tokens is absent */
    const char *max_key = gw_json_member(o, "max_tokens") ? "max_tokens"
                                                  : "max_completion_tokens";
    if ((st = copy_number(o, max_key, opts, "num_predict", true, err)) ||
        (st = copy_number(o, "seed", opts, "seed", true, err)) ||
        (st = copy_number(o, "frequency_penalty", opts, "frequency_penalty",
                          false, err)) ||
        (st = copy_number(o, "presence_penalty", opts, "presence_penalty",
                          false, err)) ||
        (st = copy_number(o, "temperature", opts, "temperature", false,
                          err)) ||
        (st = copy_number(o, "top_p", opts, "top_p", false, err)) ||
        (st = get_stop(o, opts, err)))
        goto out;
    /* Ollama sends 1.0 when the client did not say (OpenAI's defaults),
     * unless the extra options gave a value. */
    if (!json_object_get(opts, "temperature") &&
        (st = gw_json_put(opts, "temperature", json_real(1.0), err)))
        goto out;
    if (!json_object_get(opts, "top_p") &&
        (st = gw_json_put(opts, "top_p", json_real(1.0), err)))
        goto out;
    json_t *v;
    if ((v = gw_json_member(o, "logprobs"))) {
        if (!json_is_boolean(v)) {
            st = type_error(err, "logprobs", v, "bool");
            goto out;
        }
        if ((st = gw_json_put(n, "logprobs", json_copy(v), err)))
            goto out;
    }
    if ((v = gw_json_member(o, "top_logprobs")) &&
        (st = gw_json_put(n, "top_logprobs", json_copy(v), err)))
        goto out;
    st = gw_json_put(n, "options", opts, err);
    opts = NULL;
    if (!st)
        st = gw_json_put(n, "stream", json_boolean(info->stream), err);
out:
    json_decref(opts);
    return st;
}

static cr_status_t translate_completions(const json_t *o, json_t *n,
                                         gw_oai_info_t *info, cr_err_t *err)
{
    json_t *opts = NULL;
    cr_status_t st;
    if ((st = copy_common(o, n, err)) || (st = copy_debug(o, n, err)) ||
        (st = get_stream(o, info, err)))
        return st;
    json_t *p = gw_json_member(o, "prompt");
    if (p && !json_is_string(p))
        return cr_err_set(err, CR_E_INVALID,
                          "invalid type for 'prompt' field: %s", kind_of(p));
    if (p && (st = gw_json_put(n, "prompt", json_copy(p), err)))
        return st;
    json_t *sfx = gw_json_member(o, "suffix");
    if (sfx && !json_is_string(sfx))
        return type_error(err, "suffix", sfx, "string");
    if (sfx && (st = gw_json_put(n, "suffix", json_copy(sfx), err)))
        return st;
    if ((st = base_options(o, &opts, err)))
        return st;
    if ((st = copy_number(o, "max_tokens", opts, "num_predict", true, err)) ||
        (st = copy_number(o, "seed", opts, "seed", true, err)) ||
        (st = copy_number(o, "frequency_penalty", opts, "frequency_penalty",
                          false, err)) ||
        (st = copy_number(o, "presence_penalty", opts, "presence_penalty",
                          false, err)) ||
        (st = copy_number(o, "temperature", opts, "temperature", false,
                          err)) ||
        (st = copy_number(o, "top_p", opts, "top_p", false, err)) ||
        (st = get_stop(o, opts, err)))
        goto out;
    if (!json_object_get(opts, "temperature") &&
        (st = gw_json_put(opts, "temperature", json_real(1.0), err)))
        goto out;
    json_t *tp = json_object_get(opts, "top_p");
    if ((!tp || json_number_value(tp) == 0) &&
        (st = gw_json_put(opts, "top_p", json_real(1.0), err)))
        goto out;
    static const char *const pens[] = {"frequency_penalty",
                                       "presence_penalty"};
    for (size_t i = 0; i < CR_ARRAY_LEN(pens); i++)
        if (!json_object_get(opts, pens[i]) &&
            (st = gw_json_put(opts, pens[i], json_real(0), err)))
            goto out;
    json_t *lp = gw_json_member(o, "logprobs");
    if (lp) {
        if (!json_is_integer(lp)) {
            st = type_error(err, "logprobs", lp, "int");
            goto out;
        }
        if ((st = gw_json_put(n, "logprobs", json_true(), err)) ||
            (st = gw_json_put(n, "top_logprobs", json_copy(lp), err)))
            goto out;
    }
    st = gw_json_put(n, "options", opts, err);
    opts = NULL;
    if (!st)
        st = gw_json_put(n, "stream", json_boolean(info->stream), err);
out:
    json_decref(opts);
    return st;
}

static cr_status_t translate_embeddings(const json_t *o, json_t *n,
                                        gw_oai_info_t *info, cr_err_t *err)
{
    cr_status_t st;
    if ((st = copy_common(o, n, err)))
        return st;
    json_t *in = gw_json_member(o, "input");
    if (json_is_string(in)) {
        st = gw_json_put(n, "input", json_pack("[O]", in), err);
    } else if (json_is_array(in) && json_array_size(in) > 0) {
        size_t i;
        json_t *e;
        json_array_foreach(in, i, e) if (!json_is_string(e)) return cr_err_set(
            err, CR_E_INVALID, "invalid input");
        st = gw_json_put(n, "input", json_copy(in), err);
    } else {
        return cr_err_set(err, CR_E_INVALID, "invalid input");
    }
    if (st)
        return st;
    json_t *d = gw_json_member(o, "dimensions");
    if (d && (st = gw_json_put(n, "dimensions", json_copy(d), err)))
        return st;
    json_t *ef = gw_json_member(o, "encoding_format");
    if (ef) {
        const char *f = json_string_value(ef);
        if (!f || (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0))
            return cr_err_set(err, CR_E_INVALID,
                              "invalid encoding format: must be \"float\" or "
                              "\"base64\"");
        info->base64 = !strcmp(f, "base64");
    }
    json_t *opts = gw_json_member(o, "options");
    if (opts && (st = gw_json_put(n, "options", json_copy(opts), err)))
        return st;
    return CR_OK;
}

static bool all_space(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)p[i]))
            return false;
    return true;
}

cr_status_t gw_oai_translate(gw_oai_api_t api, const char *body, size_t len,
                             cr_buf_t *out, gw_oai_info_t *info,
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
    if (!json_is_object(o)) {
        st = cr_err_set(err, CR_E_INVALID,
                        "json: cannot unmarshal %s into a request object",
                        kind_of(o));
    } else if (!n) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    } else {
        switch (api) {
        case GW_OAI_CHAT: st = translate_chat(o, n, info, err); break;
        case GW_OAI_COMPLETIONS:
            st = translate_completions(o, n, info, err);
            break;
        default: st = translate_embeddings(o, n, info, err); break;
        }
    }
    if (!st) {
        char *text = json_dumps(n, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text)
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        else if ((st = cr_buf_puts(out, text)))
            cr_err_set(err, st, "request too large");
        free(text);
    }
    json_decref(n);
    json_decref(o);
    return st;
}

/* ================= answers ================= */

cr_status_t gw_oai_render_error(cr_buf_t *b, unsigned http, const char *msg)
{
    const char *type = http == 400   ? "invalid_request_error"
                       : http == 404 ? "not_found_error"
                                     : "api_error";
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "error");
    gw_jw_obj(&w);
    gw_jw_key(&w, "message");
    gw_jw_str(&w, msg);
    gw_jw_key(&w, "type");
    gw_jw_str(&w, type);
    gw_jw_key(&w, "param");
    gw_jw_null(&w);
    gw_jw_key(&w, "code");
    gw_jw_null(&w);
    gw_jw_end_obj(&w);
    gw_jw_end_obj(&w);
    return w.st;
}

static enum MHD_Result reply_error_http(gw_req_t *r, unsigned http,
                                        const char *msg)
{
    cr_buf_t b;
    cr_buf_init(&b, 64 * 1024);
    if (gw_oai_render_error(&b, http, msg)) {
        cr_buf_reset(&b);
        gw_oai_render_error(&b, http, "internal error");
    }
    cr_log_debug("%s %s -> %u %s", r->method, r->path, http, msg);
    enum MHD_Result ret = gw_reply_json(r, http, b.data, b.len);
    cr_buf_free(&b);
    return ret;
}

static enum MHD_Result reply_error(gw_req_t *r, cr_status_t st,
                                   const char *msg)
{
    if (st == CR_E_CANCELED)
        return MHD_NO; /* nobody to answer */
    return reply_error_http(r, gw_http_status(st), msg);
}

enum MHD_Result gw_oai_reply_error(gw_req_t *r, cr_status_t st,
                                   const char *msg)
{
    return reply_error(r, st, msg);
}

/* ---- chat and completions ---- */

typedef struct oai {
    bool chat;
    bool forced;     /* the answer is a forced tool call (force_tools) */
    cr_buf_t held;   /* its text, withheld until the end */
    bool include_usage;
    bool role_sent;
    bool saw_tools;
    int n_calls;     /* tool calls seen (their index) */
    char id[32];
    int64_t created; /* unix seconds */
    char *model;
} oai_t;

static void oai_free(void *arg)
{
    oai_t *x = arg;
    if (!x)
        return;
    cr_buf_free(&x->held);
    free(x->model);
    free(x);
}

static void head(gw_jw_t *w, const oai_t *x, const char *object)
{
    gw_jw_key(w, "id");
    gw_jw_str(w, x->id);
    gw_jw_key(w, "object");
    gw_jw_str(w, object);
    gw_jw_key(w, "created");
    gw_jw_i64(w, x->created);
    gw_jw_key(w, "model");
    gw_jw_str(w, x->model);
    gw_jw_key(w, "system_fingerprint");
    gw_jw_str(w, "fp_ollama");
}

static const char *finish_reason(const oai_t *x, const msg_done_body_t *d)
{
    const char *r = d && d->done_reason ? d->done_reason : "stop";
    if (!strcmp(r, "length"))
        return "length";
    return x->saw_tools ? "tool_calls" : "stop";
}

static void usage(gw_jw_t *w, const msg_done_body_t *d)
{
    int64_t p = d && d->has_prompt_eval_count ? d->prompt_eval_count : 0;
    int64_t c = d && d->has_eval_count ? d->eval_count : 0;
    gw_jw_key(w, "usage");
    gw_jw_obj(w);
    gw_jw_key(w, "prompt_tokens");
    gw_jw_i64(w, p);
    gw_jw_key(w, "completion_tokens");
    gw_jw_i64(w, c);
    gw_jw_key(w, "total_tokens");
    gw_jw_i64(w, p + c);
    /* OpenAI's cached prompt tokens, as Ollama maps prompt_eval_cached_count;
     * absent when nothing was cached */
    if (d && d->has_prompt_eval_cached_count && d->prompt_eval_cached_count > 0) {
        gw_jw_key(w, "prompt_tokens_details");
        gw_jw_obj(w);
        gw_jw_key(w, "cached_tokens");
        gw_jw_i64(w, d->prompt_eval_cached_count);
        gw_jw_end_obj(w);
    }
    gw_jw_end_obj(w);
}

/* Native tool calls (JSON array text) -> OpenAI's, arguments as strings. */
static void tool_calls_out(gw_jw_t *w, oai_t *x, const char *native)
{
    json_t *arr = json_loads(native, JSON_DECODE_ANY, NULL);
    gw_jw_arr(w);
    size_t i;
    json_t *c;
    json_array_foreach(arr, i, c) {
        json_t *fn = gw_json_member(c, "function");
        json_t *idx = gw_json_member(fn, "index");
        const char *id = json_string_value(gw_json_member(c, "id"));
        char idbuf[32];
        int index = json_is_integer(idx) ? (int)json_integer_value(idx)
                                         : x->n_calls;
        if (!id) {
            /* Ollama's shape: call_ and 8 lowercase alphanumerics. */
            uint32_t h = (uint32_t)(x->created * 2654435761u) ^
                         (uint32_t)x->n_calls * 40503u ^
                         (uint32_t)strtoul(x->id + (x->chat ? 9 : 5), NULL,
                                           10);
            static const char al[] = "abcdefghijklmnopqrstuvwxyz0123456789";
            char s[9];
            for (int k = 0; k < 8; k++) {
                h = h * 1103515245u + 12345u;
                s[k] = al[(h >> 16) % 36];
            }
            s[8] = '\0';
            snprintf(idbuf, sizeof idbuf, "call_%s", s);
            id = idbuf;
        }
        x->n_calls++;
        json_t *av = gw_json_member(fn, "arguments");
        char *args = av ? json_dumps(av, JSON_COMPACT | JSON_ENCODE_ANY)
                        : NULL;
        gw_jw_obj(w);
        gw_jw_key(w, "id");
        gw_jw_str(w, id);
        gw_jw_key(w, "index");
        gw_jw_i64(w, index);
        gw_jw_key(w, "type");
        gw_jw_str(w, "function");
        gw_jw_key(w, "function");
        gw_jw_obj(w);
        gw_jw_key(w, "name");
        gw_jw_str(w, json_string_value(gw_json_member(fn, "name")));
        gw_jw_key(w, "arguments");
        gw_jw_str(w, args ? args : "{}");
        gw_jw_end_obj(w);
        gw_jw_end_obj(w);
        free(args);
    }
    gw_jw_end_arr(w);
    json_decref(arr);
}

/* "logprobs":{"content":[...]} from the native array text. */
static void logprobs_out(gw_jw_t *w, const char *native)
{
    gw_jw_key(w, "logprobs");
    gw_jw_obj(w);
    gw_jw_key(w, "content");
    gw_jw_raw(w, native, strlen(native));
    gw_jw_end_obj(w);
}

static bool nonempty(const char *s)
{
    return s && *s;
}

static cr_status_t sse_begin(cr_buf_t *b)
{
    return cr_buf_puts(b, "data: ");
}

static cr_status_t sse_end(cr_buf_t *b, cr_status_t st)
{
    return st ? st : cr_buf_puts(b, "\n\n");
}

/* One chat.completion.chunk with delta fields from the arguments (NULL
 * ones left out; all NULL = {}), finish_reason null unless given. */
static cr_status_t chat_chunk(cr_buf_t *b, oai_t *x, bool role,
                              const char *content, const char *reasoning,
                              const char *calls, const char *logprobs,
                              const char *finish)
{
    cr_status_t st = sse_begin(b);
    if (st)
        return st;
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    head(&w, x, "chat.completion.chunk");
    gw_jw_key(&w, "choices");
    gw_jw_arr(&w);
    gw_jw_obj(&w);
    gw_jw_key(&w, "index");
    gw_jw_i64(&w, 0);
    gw_jw_key(&w, "delta");
    gw_jw_obj(&w);
    if (role) {
        gw_jw_key(&w, "role");
        gw_jw_str(&w, "assistant");
    }
    if (content) {
        gw_jw_key(&w, "content");
        gw_jw_str(&w, content);
    }
    if (reasoning) {
        gw_jw_key(&w, "reasoning");
        gw_jw_str(&w, reasoning);
    }
    if (calls) {
        gw_jw_key(&w, "tool_calls");
        tool_calls_out(&w, x, calls);
    }
    gw_jw_end_obj(&w);
    if (logprobs)
        logprobs_out(&w, logprobs);
    gw_jw_key(&w, "finish_reason");
    if (finish)
        gw_jw_str(&w, finish);
    else
        gw_jw_null(&w);
    gw_jw_end_obj(&w);
    gw_jw_end_arr(&w);
    gw_jw_end_obj(&w);
    return sse_end(b, w.st);
}

/* The usage chunk: choices [] and the counts. */
static cr_status_t usage_chunk(cr_buf_t *b, oai_t *x, const char *object,
                               const msg_done_body_t *d)
{
    cr_status_t st = sse_begin(b);
    if (st)
        return st;
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    head(&w, x, object);
    gw_jw_key(&w, "choices");
    gw_jw_arr(&w);
    gw_jw_end_arr(&w);
    usage(&w, d);
    gw_jw_end_obj(&w);
    return sse_end(b, w.st);
}

char *gw_oai_forced_call(const char *text)
{
    json_t *v = json_loads(text ? text : "", JSON_DECODE_ANY, NULL);
    json_t *name = gw_json_member(v, "name");
    json_t *args = gw_json_member(v, "arguments");
    char *out = NULL;
    if (json_is_object(v) && json_is_string(name) && json_is_object(args)) {
        json_t *arr = json_pack("[{s:{s:i,s:O,s:O}}]", "function", "index", 0,
                                "name", name, "arguments", args);
        out = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
        json_decref(arr);
    }
    json_decref(v);
    return out;
}

static cr_status_t chat_stream(oai_t *x, cr_buf_t *b, const gw_answer_t *a)
{
    cr_status_t st = CR_OK;
    if (!x->role_sent) {
        x->role_sent = true;
        st = chat_chunk(b, x, true, "", NULL, NULL, NULL, NULL);
    }
    if (!st && nonempty(a->thinking))
        st = chat_chunk(b, x, false, NULL, a->thinking, NULL, NULL, NULL);
    const char *response = a->response;
    if (x->forced && !st && nonempty(response)) {
        st = cr_buf_puts(&x->held, response);
        response = NULL;
    }
    if (!st && (nonempty(response) || a->logprobs))
        st = chat_chunk(b, x, false, response ? response : "", NULL, NULL,
                        a->logprobs, NULL);
    if (!st && a->tool_calls) {
        x->saw_tools = true;
        st = chat_chunk(b, x, false, NULL, NULL, a->tool_calls, NULL, NULL);
    }
    if (st || !a->done)
        return st;
    if (x->forced && x->held.len) {
        char *calls = x->saw_tools ? NULL : gw_oai_forced_call(x->held.data);
        if (calls) {
            x->saw_tools = true;
            st = chat_chunk(b, x, false, NULL, NULL, calls, NULL, NULL);
            free(calls);
        } else {
            st = chat_chunk(b, x, false, x->held.data, NULL, NULL, NULL, NULL);
        }
        if (st)
            return st;
    }
    st = chat_chunk(b, x, false, NULL, NULL, NULL, NULL,
                    finish_reason(x, a->done));
    if (!st && x->include_usage)
        st = usage_chunk(b, x, "chat.completion.chunk", a->done);
    return st ? st : cr_buf_puts(b, "data: [DONE]\n\n");
}

static cr_status_t chat_whole(oai_t *x, cr_buf_t *b, const gw_answer_t *a)
{
    char *forced = x->forced && !a->tool_calls ? gw_oai_forced_call(a->response)
                                               : NULL;
    gw_answer_t conv;
    if (forced) {
        conv = *a;
        conv.response = "";
        conv.tool_calls = forced;
        a = &conv;
    }
    if (a->tool_calls)
        x->saw_tools = true;
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    head(&w, x, "chat.completion");
    gw_jw_key(&w, "choices");
    gw_jw_arr(&w);
    gw_jw_obj(&w);
    gw_jw_key(&w, "index");
    gw_jw_i64(&w, 0);
    gw_jw_key(&w, "message");
    gw_jw_obj(&w);
    gw_jw_key(&w, "role");
    gw_jw_str(&w, "assistant");
    gw_jw_key(&w, "content");
    gw_jw_str(&w, a->response ? a->response : "");
    if (nonempty(a->thinking)) {
        gw_jw_key(&w, "reasoning");
        gw_jw_str(&w, a->thinking);
    }
    if (a->tool_calls) {
        gw_jw_key(&w, "tool_calls");
        tool_calls_out(&w, x, a->tool_calls);
    }
    gw_jw_end_obj(&w);
    gw_jw_key(&w, "finish_reason");
    gw_jw_str(&w, finish_reason(x, a->done));
    if (a->logprobs)
        logprobs_out(&w, a->logprobs);
    gw_jw_end_obj(&w);
    gw_jw_end_arr(&w);
    usage(&w, a->done);
    gw_jw_end_obj(&w);
    free(forced);
    return w.st;
}

/* Native logprobs -> the legacy completions shape: {"tokens","token_logprobs",
 * "top_logprobs":[{token:logprob}...]}. */
static void legacy_logprobs(gw_jw_t *w, const char *native)
{
    json_t *arr = json_loads(native, JSON_DECODE_ANY, NULL);
    size_t i;
    json_t *e;
    gw_jw_key(w, "logprobs");
    gw_jw_obj(w);
    gw_jw_key(w, "tokens");
    gw_jw_arr(w);
    json_array_foreach(arr, i, e)
        gw_jw_str(w, json_string_value(gw_json_member(e, "token")));
    gw_jw_end_arr(w);
    gw_jw_key(w, "token_logprobs");
    gw_jw_arr(w);
    json_array_foreach(arr, i, e)
        gw_jw_f64(w, json_number_value(gw_json_member(e, "logprob")));
    gw_jw_end_arr(w);
    gw_jw_key(w, "top_logprobs");
    gw_jw_arr(w);
    json_array_foreach(arr, i, e) {
        gw_jw_obj(w);
        size_t k;
        json_t *t;
        json_array_foreach(gw_json_member(e, "top_logprobs"), k, t) {
            const char *tok = json_string_value(gw_json_member(t, "token"));
            gw_jw_key(w, tok ? tok : "");
            gw_jw_f64(w, json_number_value(gw_json_member(t, "logprob")));
        }
        gw_jw_end_obj(w);
    }
    gw_jw_end_arr(w);
    gw_jw_end_obj(w);
    json_decref(arr);
}

/* One text_completion object (a stream chunk when sse). */
static cr_status_t completion(cr_buf_t *b, oai_t *x, bool sse,
                              const char *text, const char *logprobs,
                              const char *finish, bool with_usage,
                              const msg_done_body_t *d)
{
    cr_status_t st = sse ? sse_begin(b) : CR_OK;
    if (st)
        return st;
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    head(&w, x, "text_completion");
    gw_jw_key(&w, "choices");
    gw_jw_arr(&w);
    gw_jw_obj(&w);
    gw_jw_key(&w, "text");
    gw_jw_str(&w, text ? text : "");
    gw_jw_key(&w, "index");
    gw_jw_i64(&w, 0);
    if (logprobs)
        legacy_logprobs(&w, logprobs);
    gw_jw_key(&w, "finish_reason");
    if (finish)
        gw_jw_str(&w, finish);
    else
        gw_jw_null(&w);
    gw_jw_end_obj(&w);
    gw_jw_end_arr(&w);
    if (with_usage)
        usage(&w, d);
    gw_jw_end_obj(&w);
    return sse ? sse_end(b, w.st) : w.st;
}

static cr_status_t completions_stream(oai_t *x, cr_buf_t *b,
                                      const gw_answer_t *a)
{
    cr_status_t st = CR_OK;
    if (nonempty(a->response) || a->logprobs)
        st = completion(b, x, true, a->response, a->logprobs, NULL,
                        x->include_usage, NULL);
    if (st || !a->done)
        return st;
    st = completion(b, x, true, "", NULL, finish_reason(x, a->done),
                    x->include_usage, NULL);
    if (!st && x->include_usage)
        st = usage_chunk(b, x, "text_completion", a->done);
    return st ? st : cr_buf_puts(b, "data: [DONE]\n\n");
}

/* _debug_render_only: Ollama's chat.completion with an empty message (a
 * text_completion with empty text) and _debug_info; one SSE event then
 * [DONE] when streaming (Ollama's stream chunks drop the info). */
static cr_status_t render_debug(oai_t *x, cr_buf_t *b, bool sse, const msg_done_body_t *d)
{
    cr_status_t st = sse ? sse_begin(b) : CR_OK;
    if (st)
        return st;
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    head(&w, x, x->chat ? "chat.completion" : "text_completion");
    gw_jw_key(&w, "choices");
    gw_jw_arr(&w);
    gw_jw_obj(&w);
    if (x->chat) {
        gw_jw_key(&w, "index");
        gw_jw_i64(&w, 0);
        gw_jw_key(&w, "message");
        gw_jw_obj(&w);
        gw_jw_key(&w, "role");
        gw_jw_str(&w, "");
        gw_jw_key(&w, "content");
        gw_jw_str(&w, "");
        gw_jw_end_obj(&w);
    } else {
        gw_jw_key(&w, "text");
        gw_jw_str(&w, "");
        gw_jw_key(&w, "index");
        gw_jw_i64(&w, 0);
    }
    gw_jw_key(&w, "finish_reason");
    gw_jw_null(&w);
    gw_jw_end_obj(&w);
    gw_jw_end_arr(&w);
    usage(&w, NULL);
    gw_jw_key(&w, "_debug_info");
    gw_jw_obj(&w);
    gw_jw_key(&w, "rendered_template");
    gw_jw_str(&w, d->rendered_template ? d->rendered_template : "");
    if (d->image_count > 0) {
        gw_jw_key(&w, "image_count");
        gw_jw_i64(&w, d->image_count);
    }
    gw_jw_end_obj(&w);
    gw_jw_end_obj(&w);
    if (!sse)
        return w.st;
    st = sse_end(b, w.st);
    return st ? st : cr_buf_puts(b, "data: [DONE]\n\n");
}

static cr_status_t fmt_render(void *arg, cr_buf_t *out, bool stream,
                              const gw_answer_t *a)
{
    oai_t *x = arg;
    if (a->done && a->done->has_rendered_template)
        return render_debug(x, out, stream, a->done);
    if (stream && a->status && !a->done) /* load progress: an SSE comment */
        return cr_buf_printf(out, ": %s\n\n", a->status);
    if (stream)
        return x->chat ? chat_stream(x, out, a)
                       : completions_stream(x, out, a);
    if (!a->done)
        return CR_OK;
    return x->chat ? chat_whole(x, out, a)
                   : completion(out, x, false, a->response, a->logprobs,
                                finish_reason(x, a->done), true, a->done);
}

static cr_status_t fmt_stream_error(void *arg, cr_buf_t *out, const char *msg)
{
    CR_UNUSED(arg);
    cr_status_t st = sse_begin(out);
    if (!st)
        st = sse_end(out, gw_oai_render_error(out, 500, msg));
    return st;
}

static const gw_relay_fmt_t oai_fmt = {
    .content_type = "text/event-stream",
    .render = fmt_render,
    .stream_error = fmt_stream_error,
    .error_reply = reply_error,
    .free_arg = oai_free,
};

/* chatcmpl-/cmpl- and a number in 0..998, like Ollama's rand.Intn(999). */
static void make_id(char *out, size_t cap, const char *prefix,
                    const gw_req_t *r)
{
    uint64_t h = (uint64_t)r->start_ns * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t)(uintptr_t)r >> 4;
    snprintf(out, cap, "%s%u", prefix, (unsigned)((h >> 33) % 999));
}

static enum MHD_Result generate_like(gw_req_t *r, bool chat)
{
    cr_buf_t native;
    cr_buf_init(&native, NATIVE_CAP);
    gw_oai_info_t info;
    cr_err_t err;
    gw_request_t q;
    cr_status_t st =
        gw_oai_translate(chat ? GW_OAI_CHAT : GW_OAI_COMPLETIONS,
                         r->body.data, r->body.len, &native, &info, &err);
    if (!st)
        st = gw_request_parse(chat ? GW_API_CHAT : GW_API_GENERATE,
                              native.data, native.len, &q, &err);
    cr_buf_free(&native);
    if (st)
        return reply_error(r, st, err.msg);
    oai_t *x = calloc(1, sizeof *x);
    if (!x || !(x->model = strdup(q.model))) {
        free(x);
        gw_request_clear(&q);
        return reply_error(r, CR_E_NOMEM, "out of memory");
    }
    x->chat = chat;
    x->forced = info.forced_call;
    cr_buf_init(&x->held, REPLY_CAP);
    x->include_usage = info.stream && info.include_usage;
    x->created = (int64_t)time(NULL);
    make_id(x->id, sizeof x->id, chat ? "chatcmpl-" : "cmpl-", r);

    gw_call_t *call = NULL;
    st = gw_call_start(r, "scheduler", &q.msg, &call, &err);
    gw_request_clear(&q);
    if (st) {
        oai_free(x);
        return reply_error(r, st, err.msg);
    }
    gw_wait_t w = gw_wait_inference(r);
    return gw_relay_fmt(r, &oai_fmt, x, info.stream, &call, &w);
}

static enum MHD_Result h_chat(gw_req_t *r)
{
    return generate_like(r, true);
}

static enum MHD_Result h_completions(gw_req_t *r)
{
    return generate_like(r, false);
}

/* ---- embeddings ---- */

static void base64_of(cr_buf_t *b, const uint8_t *p, size_t n)
{
    static const char al[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < n)
            v |= p[i + 2];
        char q[4] = {al[(v >> 18) & 63], al[(v >> 12) & 63],
                     i + 1 < n ? al[(v >> 6) & 63] : '=',
                     i + 2 < n ? al[v & 63] : '='};
        cr_buf_append(b, q, 4);
    }
}

static cr_status_t render_embeddings(cr_buf_t *b, const char *model,
                                     const msg_embeddings_body_t *e,
                                     bool base64, cr_err_t *err)
{
    int64_t n = e->n_inputs, d = e->dims;
    if (n < 0 || d < 0 ||
        (d && (uint64_t)n > SIZE_MAX / sizeof(float) / (uint64_t)d) ||
        (size_t)n * (size_t)d * sizeof(float) != e->data.len)
        return cr_err_set(err, CR_E_PROTO,
                          "embeddings: %zu bytes for %" PRId64 " x %" PRId64,
                          e->data.len, n, d);
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "object");
    gw_jw_str(&w, "list");
    gw_jw_key(&w, "data");
    gw_jw_arr(&w);
    cr_buf_t tmp;
    cr_buf_init(&tmp, REPLY_CAP);
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *row = e->data.data + (size_t)i * (size_t)d * 4;
        gw_jw_obj(&w);
        gw_jw_key(&w, "object");
        gw_jw_str(&w, "embedding");
        gw_jw_key(&w, "embedding");
        if (base64) {
            /* little-endian float32, whatever the host order */
            cr_buf_reset(&tmp);
            uint8_t le[4];
            cr_buf_t raw;
            cr_buf_init(&raw, REPLY_CAP);
            for (int64_t k = 0; k < d; k++) {
                uint32_t u;
                memcpy(&u, row + k * 4, 4);
                le[0] = (uint8_t)u;
                le[1] = (uint8_t)(u >> 8);
                le[2] = (uint8_t)(u >> 16);
                le[3] = (uint8_t)(u >> 24);
                cr_buf_append(&raw, le, 4);
            }
            base64_of(&tmp, (const uint8_t *)raw.data, raw.len);
            cr_buf_free(&raw);
            gw_jw_strn(&w, tmp.data ? tmp.data : "", tmp.len);
        } else {
            gw_jw_arr(&w);
            for (int64_t k = 0; k < d; k++) {
                float f;
                memcpy(&f, row + k * 4, 4);
                if (!isfinite(f)) {
                    cr_buf_free(&tmp);
                    return cr_err_set(err, CR_E_INTERNAL,
                                      "embedding contains NaN or Inf values");
                }
                gw_jw_f32(&w, f);
            }
            gw_jw_end_arr(&w);
        }
        gw_jw_key(&w, "index");
        gw_jw_i64(&w, i);
        gw_jw_end_obj(&w);
    }
    cr_buf_free(&tmp);
    gw_jw_end_arr(&w);
    gw_jw_key(&w, "model");
    gw_jw_str(&w, model);
    int64_t pt = e->has_prompt_eval_count ? e->prompt_eval_count : 0;
    gw_jw_key(&w, "usage");
    gw_jw_obj(&w);
    gw_jw_key(&w, "prompt_tokens");
    gw_jw_i64(&w, pt);
    gw_jw_key(&w, "total_tokens");
    gw_jw_i64(&w, pt);
    gw_jw_end_obj(&w);
    gw_jw_end_obj(&w);
    if (w.st)
        return cr_err_set(err, w.st, "reply too large");
    return CR_OK;
}

static enum MHD_Result h_embeddings(gw_req_t *r)
{
    cr_buf_t native;
    cr_buf_init(&native, NATIVE_CAP);
    gw_oai_info_t info;
    cr_err_t err;
    gw_request_t q;
    cr_status_t st = gw_oai_translate(GW_OAI_EMBEDDINGS, r->body.data,
                                      r->body.len, &native, &info, &err);
    if (!st)
        st = gw_request_parse(GW_API_EMBED, native.data, native.len, &q,
                              &err);
    cr_buf_free(&native);
    if (st)
        return reply_error(r, st, err.msg);
    msg_t reply;
    gw_wait_t w = gw_wait_inference(r);
    st = gw_exchange(r, "scheduler", &q.msg, &w, &reply, &err);
    if (!st && reply.type != MSG_embeddings) {
        st = cr_err_set(&err, CR_E_PROTO,
                        "unexpected reply '%s' from the scheduler",
                        msg_type_name(reply.type));
        msg_clear(&reply);
    }
    enum MHD_Result ret;
    if (st) {
        ret = reply_error(r, st, err.msg);
    } else {
        gw_metrics_prompt_tokens(r->ctx->metrics,
                                 reply.u.embeddings.prompt_eval_count);
        cr_buf_t b;
        cr_buf_init(&b, REPLY_CAP);
        st = render_embeddings(&b, q.model, &reply.u.embeddings, info.base64,
                               &err);
        ret = st ? reply_error(r, st, err.msg)
                 : gw_reply_json(r, MHD_HTTP_OK, b.data, b.len);
        cr_buf_free(&b);
        msg_clear(&reply);
    }
    gw_request_clear(&q);
    return ret;
}

/* ---- models ---- */

/* Unix seconds of an RFC 3339 time ("2024-05-01T10:00:00.5+02:00"), 0 if
 * it does not parse. */
static int64_t unix_of(const char *t)
{
    if (!t)
        return 0;
    struct tm tm = {0};
    int n = 0;
    if (sscanf(t, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon,
               &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &n) != 6)
        return 0;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    const char *p = t + n;
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++) {
        }
    int64_t off = 0;
    int oh, om;
    if ((*p == '+' || *p == '-') && sscanf(p + 1, "%2d:%2d", &oh, &om) == 2)
        off = (*p == '-' ? -1 : 1) * (int64_t)(oh * 3600 + om * 60);
    return (int64_t)timegm(&tm) - off;
}

static void model_obj(gw_jw_t *w, const char *id, const msg_model_entry_t *e)
{
    cr_model_name_t nm;
    cr_err_t err;
    const char *owner = "library";
    if (!cr_model_name_parse(e->name, &nm, &err))
        owner = nm.ns;
    gw_jw_obj(w);
    gw_jw_key(w, "id");
    gw_jw_str(w, id);
    gw_jw_key(w, "object");
    gw_jw_str(w, "model");
    gw_jw_key(w, "created");
    gw_jw_i64(w, unix_of(e->modified_at));
    gw_jw_key(w, "owned_by");
    gw_jw_str(w, owner);
    gw_jw_end_obj(w);
}

/* Asks the registry for its tags; answers the client itself on failure. */
static bool get_tags(gw_req_t *r, msg_t *reply, enum MHD_Result *ret)
{
    msg_t m;
    msg_init(&m, MSG_tags, NULL);
    gw_wait_t w = gw_wait_control(r);
    cr_err_t err;
    cr_status_t st = gw_exchange(r, "registry", &m, &w, reply, &err);
    if (!st && reply->type != MSG_tags_reply) {
        st = cr_err_set(&err, CR_E_PROTO,
                        "unexpected reply '%s' from the registry",
                        msg_type_name(reply->type));
        msg_clear(reply);
    }
    if (st) {
        *ret = reply_error(r, st, err.msg);
        return false;
    }
    return true;
}

static enum MHD_Result h_models(gw_req_t *r)
{
    msg_t reply;
    enum MHD_Result ret;
    if (!get_tags(r, &reply, &ret))
        return ret;
    cr_buf_t b;
    cr_buf_init(&b, REPLY_CAP);
    gw_jw_t w;
    gw_jw_init(&w, &b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "object");
    gw_jw_str(&w, "list");
    gw_jw_key(&w, "data");
    gw_jw_arr(&w);
    for (size_t i = 0; i < reply.u.tags_reply.models.n; i++) {
        const msg_model_entry_t *e = &reply.u.tags_reply.models.v[i];
        model_obj(&w, e->name, e);
    }
    gw_jw_end_arr(&w);
    gw_jw_end_obj(&w);
    ret = w.st ? reply_error(r, w.st, "reply too large")
               : gw_reply_json(r, MHD_HTTP_OK, b.data, b.len);
    cr_buf_free(&b);
    msg_clear(&reply);
    return ret;
}

static enum MHD_Result h_model(gw_req_t *r)
{
    char text[CR_ERR_MSG_MAX];
    cr_model_name_t want;
    cr_err_t err;
    if (cr_model_name_parse(r->param, &want, &err)) {
        snprintf(text, sizeof text, "model '%s' not found", r->param);
        return reply_error(r, CR_E_NOT_FOUND, text);
    }
    msg_t reply;
    enum MHD_Result ret;
    if (!get_tags(r, &reply, &ret))
        return ret;
    const msg_model_entry_t *found = NULL;
    for (size_t i = 0; i < reply.u.tags_reply.models.n && !found; i++) {
        const msg_model_entry_t *e = &reply.u.tags_reply.models.v[i];
        cr_model_name_t have;
        if (!cr_model_name_parse(e->name, &have, &err) &&
            cr_model_name_equal(&want, &have))
            found = e;
    }
    if (!found) {
        msg_clear(&reply);
        snprintf(text, sizeof text, "model '%s' not found", r->param);
        return reply_error(r, CR_E_NOT_FOUND, text);
    }
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    gw_jw_t w;
    gw_jw_init(&w, &b);
    model_obj(&w, r->param, found);
    ret = w.st ? reply_error(r, w.st, "reply too large")
               : gw_reply_json(r, MHD_HTTP_OK, b.data, b.len);
    cr_buf_free(&b);
    msg_clear(&reply);
    return ret;
}

static const gw_route_t routes[] = {
    {"/v1/chat/completions", false, GW_M_POST, h_chat, NULL, NULL},
    {"/v1/completions", false, GW_M_POST, h_completions, NULL, NULL},
    {"/v1/embeddings", false, GW_M_POST, h_embeddings, NULL, NULL},
    {"/v1/models", false, GW_M_GET, h_models, NULL, NULL},
    {"/v1/models/", true, GW_M_GET, h_model, NULL, NULL},
};

const gw_route_t *gw_openai_routes(size_t *n)
{
    *n = CR_ARRAY_LEN(routes);
    return routes;
}

const char *gw_native_tool_name(const json_t *msgs, const char *id)
{
    size_t i, k;
    json_t *m, *c;
    json_array_foreach(msgs, i, m) {
        json_array_foreach(gw_json_member(m, "tool_calls"), k, c) {
            const char *cid = json_string_value(gw_json_member(c, "id"));
            if (cid && !strcmp(cid, id))
                return json_string_value(
                    gw_json_member(gw_json_member(c, "function"), "name"));
        }
    }
    return NULL;
}
