/* anthropic.c: the Anthropic Messages routes and their answers (see
 * anthropic.h; requests are translated in anthropic_request.c).
 *
 * The native answer comes through gw_relay_fmt and is rendered below: one
 * message object, or the SSE events. Ids are "msg_" / "toolu_" and 24 hex
 * digits. */
#include "lib/prelude.h"
#include "services/gateway/anthropic.h"
#include "services/gateway/json_util.h"

#include "lib/log.h"
#include "services/gateway/convert.h"
#include "services/gateway/exchange.h"
#include "services/gateway/openai.h"
#include "services/gateway/relay.h"
#include "services/gateway/render.h"
#include "services/gateway/surface_ids.h"

#include <jansson.h>

#define NATIVE_CAP (64u * 1024 * 1024) /* translated body */
#define REPLY_CAP (512u * 1024 * 1024)

cr_status_t gw_anth_render_error(cr_buf_t *b, unsigned http, const char *msg)
{
    const char *type = "api_error";
    switch (http) {
    case 400:
    case 413: type = "invalid_request_error"; break;
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 429: type = "rate_limit_error"; break;
    case 503:
    case 529: type = "overloaded_error"; break;
    default: break;
    }
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "type");
    gw_jw_str(&w, "error");
    gw_jw_key(&w, "error");
    gw_jw_obj(&w);
    gw_jw_key(&w, "type");
    gw_jw_str(&w, type);
    gw_jw_key(&w, "message");
    gw_jw_str(&w, msg);
    gw_jw_end_obj(&w);
    gw_jw_end_obj(&w);
    return w.st;
}

static enum MHD_Result reply_error(gw_req_t *r, cr_status_t st,
                                   const char *msg)
{
    if (st == CR_E_CANCELED)
        return MHD_NO; /* nobody to answer */
    unsigned http = gw_http_status(st);
    cr_buf_t b;
    cr_buf_init(&b, 64 * 1024);
    if (gw_anth_render_error(&b, http, msg)) {
        cr_buf_reset(&b);
        gw_anth_render_error(&b, http, "internal error");
    }
    cr_log_debug("%s %s -> %u %s", r->method, r->path, http, msg);
    enum MHD_Result ret = gw_reply_json(r, http, b.data, b.len);
    cr_buf_free(&b);
    return ret;
}

typedef enum block { B_NONE, B_THINKING, B_TEXT } block_t;

typedef struct anth {
    char id[GW_SURFACE_ID_MAX];
    char *model;
    bool forced;     /* a forced call: its text is held until the end */
    cr_buf_t held;
    bool started;    /* message_start sent */
    block_t open;    /* the content block open now */
    int index;       /* of the next content block */
    int n_calls;     /* tool_use blocks sent */
    bool count;      /* count_tokens */
    char **stops;    /* the request's stop_sequences (n_stops) */
    size_t n_stops;
} anth_t;

static void anth_free(void *arg)
{
    anth_t *x = arg;
    if (!x)
        return;
    cr_buf_free(&x->held);
    for (size_t i = 0; i < x->n_stops; i++)
        free(x->stops[i]);
    free(x->stops);
    free(x->model);
    free(x);
}

/* The stop sequence that ended the answer if the client asked for it
 * (a Modelfile's own stop strings end a turn as an end token does). */
static const char *client_stop(const anth_t *x, const msg_done_body_t *d)
{
    if (!d || !d->has_stop_sequence || !d->stop_sequence)
        return NULL;
    for (size_t i = 0; i < x->n_stops; i++)
        if (!strcmp(x->stops[i], d->stop_sequence))
            return x->stops[i];
    return NULL;
}

static const char *stop_reason(const anth_t *x, const msg_done_body_t *d)
{
    if (x->n_calls)
        return "tool_use";
    if (d && d->done_reason && !strcmp(d->done_reason, "length"))
        return "max_tokens";
    return client_stop(x, d) ? "stop_sequence" : "end_turn";
}

static void stop_sequence(gw_jw_t *w, const anth_t *x,
                          const msg_done_body_t *d)
{
    const char *s = x->n_calls ? NULL : client_stop(x, d);
    gw_jw_key(w, "stop_sequence");
    if (s)
        gw_jw_str(w, s);
    else
        gw_jw_null(w);
}

/* Anthropic counts a prompt in two parts: input_tokens is what was
 * evaluated, cache_read_input_tokens what the slot's cache already held
 * (prompt_eval_cached_count; prompt_eval_count includes it), as Ollama's
 * cache-metrics change maps them. Nothing is ever written to a cache on
 * request, so cache_creation_input_tokens is 0. */
static void usage(gw_jw_t *w, const msg_done_body_t *d)
{
    int64_t prompt = d && d->has_prompt_eval_count ? d->prompt_eval_count : 0;
    int64_t cached = d && d->has_prompt_eval_cached_count
                         ? d->prompt_eval_cached_count
                         : 0;
    cached = CR_MIN(CR_MAX(cached, (int64_t)0), prompt);
    gw_jw_key(w, "usage");
    gw_jw_obj(w);
    gw_jw_key(w, "input_tokens");
    gw_jw_i64(w, prompt - cached);
    gw_jw_key(w, "cache_creation_input_tokens");
    gw_jw_i64(w, 0);
    gw_jw_key(w, "cache_read_input_tokens");
    gw_jw_i64(w, cached);
    gw_jw_key(w, "output_tokens");
    gw_jw_i64(w, d && d->has_eval_count ? d->eval_count : 0);
    gw_jw_end_obj(w);
}

/* "event: <name>\ndata: " ... "\n\n" around one JSON object. */
static cr_status_t ev_begin(cr_buf_t *b, const char *name, gw_jw_t *w)
{
    cr_status_t st = cr_buf_printf(b, "event: %s\ndata: ", name);
    gw_jw_init(w, b);
    gw_jw_obj(w);
    gw_jw_key(w, "type");
    gw_jw_str(w, name);
    return st;
}

static cr_status_t ev_end(cr_buf_t *b, gw_jw_t *w, cr_status_t st)
{
    gw_jw_end_obj(w);
    if (!st)
        st = w->st;
    return st ? st : cr_buf_puts(b, "\n\n");
}

/* The message object's head: id, type, role, model. */
static void message_head(gw_jw_t *w, const anth_t *x)
{
    gw_jw_key(w, "id");
    gw_jw_str(w, x->id);
    gw_jw_key(w, "type");
    gw_jw_str(w, "message");
    gw_jw_key(w, "role");
    gw_jw_str(w, "assistant");
    gw_jw_key(w, "model");
    gw_jw_str(w, x->model);
}

static cr_status_t message_start(anth_t *x, cr_buf_t *b)
{
    gw_jw_t w;
    cr_status_t st = ev_begin(b, "message_start", &w);
    gw_jw_key(&w, "message");
    gw_jw_obj(&w);
    message_head(&w, x);
    gw_jw_key(&w, "content");
    gw_jw_arr(&w);
    gw_jw_end_arr(&w);
    gw_jw_key(&w, "stop_reason");
    gw_jw_null(&w);
    gw_jw_key(&w, "stop_sequence");
    gw_jw_null(&w);
    usage(&w, NULL);
    gw_jw_end_obj(&w);
    return ev_end(b, &w, st);
}

static cr_status_t block_stop(anth_t *x, cr_buf_t *b)
{
    if (x->open == B_NONE)
        return CR_OK;
    gw_jw_t w;
    cr_status_t st = ev_begin(b, "content_block_stop", &w);
    gw_jw_key(&w, "index");
    gw_jw_i64(&w, x->index);
    x->open = B_NONE;
    x->index++;
    return ev_end(b, &w, st);
}

/* Opens a thinking or text block (closing another one) if needed. */
static cr_status_t block_open(anth_t *x, cr_buf_t *b, block_t kind)
{
    if (x->open == kind)
        return CR_OK;
    cr_status_t st = block_stop(x, b);
    if (st)
        return st;
    gw_jw_t w;
    st = ev_begin(b, "content_block_start", &w);
    gw_jw_key(&w, "index");
    gw_jw_i64(&w, x->index);
    gw_jw_key(&w, "content_block");
    gw_jw_obj(&w);
    gw_jw_key(&w, "type");
    if (kind == B_THINKING) {
        gw_jw_str(&w, "thinking");
        gw_jw_key(&w, "thinking");
        gw_jw_str(&w, "");
        gw_jw_key(&w, "signature");
        gw_jw_str(&w, "");
    } else {
        gw_jw_str(&w, "text");
        gw_jw_key(&w, "text");
        gw_jw_str(&w, "");
    }
    gw_jw_end_obj(&w);
    x->open = kind;
    return ev_end(b, &w, st);
}

static cr_status_t block_delta(anth_t *x, cr_buf_t *b, block_t kind,
                               const char *text)
{
    cr_status_t st = block_open(x, b, kind);
    if (st)
        return st;
    gw_jw_t w;
    st = ev_begin(b, "content_block_delta", &w);
    gw_jw_key(&w, "index");
    gw_jw_i64(&w, x->index);
    gw_jw_key(&w, "delta");
    gw_jw_obj(&w);
    gw_jw_key(&w, "type");
    gw_jw_str(&w, kind == B_THINKING ? "thinking_delta" : "text_delta");
    gw_jw_key(&w, kind == B_THINKING ? "thinking" : "text");
    gw_jw_str(&w, text);
    gw_jw_end_obj(&w);
    return ev_end(b, &w, st);
}

/* A new toolu_ id (in buf): Anthropic's form, whatever id the parser
 * gave the call (the next request names the call by this id, and
 * gw_native_tool_name finds its function from it). */
static const char *call_id(const json_t *c, char *buf, size_t cap)
{
    CR_UNUSED(c);
    gw_surface_id(buf, cap, "toolu_");
    return buf;
}

/* Each native tool call as a tool_use block: start, one input_json_delta
 * with the whole input, stop. */
static cr_status_t tool_blocks(anth_t *x, cr_buf_t *b, const char *native)
{
    cr_status_t st = block_stop(x, b);
    json_t *arr = json_loads(native, JSON_DECODE_ANY, NULL);
    size_t i;
    json_t *c;
    json_array_foreach(arr, i, c) {
        if (st)
            break;
        json_t *fn = gw_json_member(c, "function");
        char idbuf[GW_SURFACE_ID_MAX];
        const char *id = call_id(c, idbuf, sizeof idbuf);
        json_t *args = gw_json_member(fn, "arguments");
        char *input = args ? json_dumps(args, JSON_COMPACT) : NULL;
        gw_jw_t w;
        st = ev_begin(b, "content_block_start", &w);
        gw_jw_key(&w, "index");
        gw_jw_i64(&w, x->index);
        gw_jw_key(&w, "content_block");
        gw_jw_obj(&w);
        gw_jw_key(&w, "type");
        gw_jw_str(&w, "tool_use");
        gw_jw_key(&w, "id");
        gw_jw_str(&w, id);
        gw_jw_key(&w, "name");
        gw_jw_str(&w, json_string_value(gw_json_member(fn, "name")));
        gw_jw_key(&w, "input");
        gw_jw_obj(&w);
        gw_jw_end_obj(&w);
        gw_jw_end_obj(&w);
        st = ev_end(b, &w, st);
        if (!st) {
            st = ev_begin(b, "content_block_delta", &w);
            gw_jw_key(&w, "index");
            gw_jw_i64(&w, x->index);
            gw_jw_key(&w, "delta");
            gw_jw_obj(&w);
            gw_jw_key(&w, "type");
            gw_jw_str(&w, "input_json_delta");
            gw_jw_key(&w, "partial_json");
            gw_jw_str(&w, input ? input : "{}");
            gw_jw_end_obj(&w);
            st = ev_end(b, &w, st);
        }
        free(input);
        x->open = B_TEXT; /* closed by block_stop below */
        if (!st)
            st = block_stop(x, b);
        x->n_calls++;
    }
    json_decref(arr);
    return st;
}

static bool nonempty(const char *s)
{
    return s && *s;
}

static cr_status_t stream_piece(anth_t *x, cr_buf_t *b, const gw_answer_t *a)
{
    cr_status_t st = CR_OK;
    if (!x->started) {
        x->started = true;
        st = message_start(x, b);
    }
    if (!st && nonempty(a->thinking))
        st = block_delta(x, b, B_THINKING, a->thinking);
    const char *text = a->response;
    if (!st && x->forced && nonempty(text)) {
        st = cr_buf_puts(&x->held, text);
        text = NULL;
    }
    if (!st && nonempty(text))
        st = block_delta(x, b, B_TEXT, text);
    if (!st && a->tool_calls)
        st = tool_blocks(x, b, a->tool_calls);
    if (st || !a->done)
        return st;
    if (x->forced && x->held.len) {
        char *calls = x->n_calls ? NULL : gw_oai_forced_call(x->held.data);
        st = calls ? tool_blocks(x, b, calls)
                   : block_delta(x, b, B_TEXT, x->held.data);
        free(calls);
    }
    if (!st)
        st = block_stop(x, b);
    if (st)
        return st;
    gw_jw_t w;
    st = ev_begin(b, "message_delta", &w);
    gw_jw_key(&w, "delta");
    gw_jw_obj(&w);
    gw_jw_key(&w, "stop_reason");
    gw_jw_str(&w, stop_reason(x, a->done));
    stop_sequence(&w, x, a->done);
    gw_jw_end_obj(&w);
    usage(&w, a->done);
    if ((st = ev_end(b, &w, st)))
        return st;
    st = ev_begin(b, "message_stop", &w);
    return ev_end(b, &w, st);
}

/* The tool_use blocks of a whole message. */
static void tool_use_blocks(gw_jw_t *w, anth_t *x, const char *native)
{
    json_t *arr = json_loads(native, JSON_DECODE_ANY, NULL);
    size_t i;
    json_t *c;
    json_array_foreach(arr, i, c) {
        json_t *fn = gw_json_member(c, "function");
        char idbuf[GW_SURFACE_ID_MAX];
        json_t *args = gw_json_member(fn, "arguments");
        char *input = args ? json_dumps(args, JSON_COMPACT) : NULL;
        gw_jw_obj(w);
        gw_jw_key(w, "type");
        gw_jw_str(w, "tool_use");
        gw_jw_key(w, "id");
        gw_jw_str(w, call_id(c, idbuf, sizeof idbuf));
        gw_jw_key(w, "name");
        gw_jw_str(w, json_string_value(gw_json_member(fn, "name")));
        gw_jw_key(w, "input");
        if (input)
            gw_jw_raw(w, input, strlen(input));
        else {
            gw_jw_obj(w);
            gw_jw_end_obj(w);
        }
        gw_jw_end_obj(w);
        free(input);
        x->n_calls++;
    }
    json_decref(arr);
}

static cr_status_t whole(anth_t *x, cr_buf_t *b, const gw_answer_t *a)
{
    gw_jw_t w;
    gw_jw_init(&w, b);
    if (x->count) {
        gw_jw_obj(&w);
        gw_jw_key(&w, "input_tokens");
        gw_jw_i64(&w, a->done->has_prompt_eval_count
                          ? a->done->prompt_eval_count
                          : 0);
        gw_jw_end_obj(&w);
        return w.st;
    }
    char *forced = x->forced && !a->tool_calls
                       ? gw_oai_forced_call(a->response)
                       : NULL;
    const char *text = forced ? "" : a->response;
    const char *calls = forced ? forced : a->tool_calls;
    gw_jw_obj(&w);
    message_head(&w, x);
    gw_jw_key(&w, "content");
    gw_jw_arr(&w);
    if (nonempty(a->thinking)) {
        gw_jw_obj(&w);
        gw_jw_key(&w, "type");
        gw_jw_str(&w, "thinking");
        gw_jw_key(&w, "thinking");
        gw_jw_str(&w, a->thinking);
        gw_jw_key(&w, "signature");
        gw_jw_str(&w, "");
        gw_jw_end_obj(&w);
    }
    if (nonempty(text)) {
        gw_jw_obj(&w);
        gw_jw_key(&w, "type");
        gw_jw_str(&w, "text");
        gw_jw_key(&w, "text");
        gw_jw_str(&w, text);
        gw_jw_end_obj(&w);
    }
    if (calls)
        tool_use_blocks(&w, x, calls);
    gw_jw_end_arr(&w);
    gw_jw_key(&w, "stop_reason");
    gw_jw_str(&w, stop_reason(x, a->done));
    stop_sequence(&w, x, a->done);
    usage(&w, a->done);
    gw_jw_end_obj(&w);
    free(forced);
    return w.st;
}

static cr_status_t fmt_render(void *arg, cr_buf_t *out, bool stream,
                              const gw_answer_t *a)
{
    anth_t *x = arg;
    if (stream && a->status && !a->done) { /* a model loads: keep alive */
        gw_jw_t w;
        cr_status_t st = ev_begin(out, "ping", &w);
        return ev_end(out, &w, st);
    }
    if (stream)
        return stream_piece(x, out, a);
    return a->done ? whole(x, out, a) : CR_OK;
}

static cr_status_t fmt_stream_error(void *arg, cr_buf_t *out, const char *msg)
{
    CR_UNUSED(arg);
    cr_status_t st = cr_buf_puts(out, "event: error\ndata: ");
    if (!st)
        st = gw_anth_render_error(out, 500, msg);
    return st ? st : cr_buf_puts(out, "\n\n");
}

static const gw_relay_fmt_t anth_fmt = {
    .content_type = "text/event-stream",
    .render = fmt_render,
    .stream_error = fmt_stream_error,
    .error_reply = reply_error,
    .free_arg = anth_free,
};

static enum MHD_Result messages(gw_req_t *r, bool count)
{
    cr_buf_t native;
    cr_buf_init(&native, NATIVE_CAP);
    gw_anth_info_t info;
    cr_err_t err;
    gw_request_t q;
    cr_status_t st = gw_anth_translate(r->body.data, r->body.len, count,
                                       &native, &info, &err);
    if (!st)
        st = gw_request_parse(GW_API_CHAT, native.data, native.len, &q, &err);
    cr_buf_free(&native);
    if (st)
        return reply_error(r, st, err.msg);
    anth_t *x = calloc(1, sizeof *x);
    if (!x || !(x->model = strdup(q.model))) {
        free(x);
        gw_request_clear(&q);
        return reply_error(r, CR_E_NOMEM, "out of memory");
    }
    x->forced = info.forced_call;
    x->count = count;
    const msg_options_t *o = q.msg.u.chat.options;
    if (q.msg.u.chat.has_options && o && o->has_stop && o->stop.n) {
        x->stops = calloc(o->stop.n, sizeof *x->stops);
        for (size_t i = 0; x->stops && i < o->stop.n; i++)
            if ((x->stops[x->n_stops] = strdup(o->stop.v[i])))
                x->n_stops++;
    }
    cr_buf_init(&x->held, REPLY_CAP);
    gw_surface_id(x->id, sizeof x->id, "msg_");
    gw_call_t *call = NULL;
    st = gw_call_start(r, "scheduler", &q.msg, &call, &err);
    gw_request_clear(&q);
    if (st) {
        anth_free(x);
        return reply_error(r, st, err.msg);
    }
    gw_wait_t w = gw_wait_inference(r);
    return gw_relay_fmt(r, &anth_fmt, x, info.stream, &call, &w);
}

static enum MHD_Result h_messages(gw_req_t *r)
{
    return messages(r, false);
}

static enum MHD_Result h_count_tokens(gw_req_t *r)
{
    return messages(r, true);
}

static const gw_route_t routes[] = {
    {"/v1/messages", false, GW_M_POST, h_messages, NULL, NULL},
    {"/v1/messages/count_tokens", false, GW_M_POST, h_count_tokens, NULL,
     NULL},
};

const gw_route_t *gw_anthropic_routes(size_t *n)
{
    *n = CR_ARRAY_LEN(routes);
    return routes;
}
