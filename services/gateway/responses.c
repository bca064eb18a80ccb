/* responses.c: the Responses route and its answers (see responses.h;
 * requests are translated in responses_request.c).
 *
 * The native answer comes through gw_relay_fmt; the items are built as
 * jansson objects, each kept once finished, so the final response lists
 * exactly what the stream announced. */
#include "lib/prelude.h"
#include "services/gateway/responses.h"
#include "services/gateway/json_util.h"

#include "lib/log.h"
#include "services/gateway/convert.h"
#include "services/gateway/exchange.h"
#include "services/gateway/openai.h"
#include "services/gateway/relay.h"
#include "services/gateway/render.h"
#include "services/gateway/surface_ids.h"

#include <jansson.h>
#include <time.h>

#define NATIVE_CAP (64u * 1024 * 1024)
#define TEXT_CAP (256u * 1024 * 1024)

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
        int64_t cached =
            d->has_prompt_eval_cached_count ? d->prompt_eval_cached_count : 0;
        json_object_set_new(
            r, "usage",
            json_pack("{s:I,s:{s:I},s:I,s:{s:i},s:I}", "input_tokens",
                      (json_int_t)p, "input_tokens_details", "cached_tokens",
                      (json_int_t)cached, "output_tokens", (json_int_t)c,
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
        json_t *fn = gw_json_member(c, "function");
        char fc[GW_SURFACE_ID_MAX], call[GW_SURFACE_ID_MAX];
        gw_surface_id(fc, sizeof fc, "fc_");
        const char *cid = json_string_value(gw_json_member(c, "id"));
        if (!cid || !*cid) {
            gw_surface_id(call, sizeof call, "call_");
            cid = call;
        }
        json_t *args = gw_json_member(fn, "arguments");
        char *text = args ? json_dumps(args, JSON_COMPACT) : NULL;
        const char *name = json_string_value(gw_json_member(fn, "name"));
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
        json_t *v = gw_json_member(o, keys[i]);
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
