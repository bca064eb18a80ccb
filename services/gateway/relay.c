/* relay.c: multi-reply answers as NDJSON streams or single objects.
 *
 * The first reply is awaited inside the access handler, so its status can
 * still become the HTTP status. A stream then continues in MHD's content
 * reader, which blocks on the bus in the connection's own thread; the
 * reader's free callback runs when MHD is done with the response, and
 * cancels the request on the bus unless the peer already ended it. */
#include "lib/prelude.h"
#include "services/gateway/relay.h"

#include "lib/log.h"
#include "services/gateway/metrics.h"
#include "services/gateway/render.h"

#include <jansson.h>
#include <poll.h>
#include <time.h>

#define LINE_CAP (64u * 1024 * 1024)  /* one NDJSON line */
#define TEXT_CAP (256u * 1024 * 1024) /* accumulated text of stream:false */
#define BLOCK_BYTES (32 * 1024)       /* MHD read block */

typedef struct relay {
    gw_relay_kind_t kind;
    char *model;       /* owned copy */
    bool stream;
    gw_call_t *call;
    gw_wait_t wait;    /* abort_fn/arg point at this relay */
    gw_ctx_t *ctx;     /* server context (outlives every request) */
    struct MHD_Connection *conn; /* its connection (streams lift its idle
                                    timeout while they run) */
    int fd;            /* client socket */
    cr_buf_t out;      /* bytes ready for the client */
    size_t out_off;    /* of them already handed to MHD */
    bool finished;     /* nothing more will be written */
    bool peer_ended;   /* the peer sent its terminal reply */
    /* stream:false accumulators */
    cr_buf_t text, thinking;
    cr_buf_t tool_calls, logprobs; /* array elements, comma-joined */
    char last_status[64];          /* of the last progress */
    /* a terminal error (stream:false, or before the stream started) */
    cr_status_t err_status;
    char err_msg[CR_ERR_MSG_MAX];
    /* another wire shape (NULL: Ollama's NDJSON) */
    const gw_relay_fmt_t *fmt;
    void *fmt_arg;
    /* metrics */
    int64_t start_ns;  /* the request's arrival (monotonic) */
    bool first_token;  /* the first token was seen */
} relay_t;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static bool relay_should_abort(void *arg)
{
    relay_t *x = arg;
    if (atomic_load(&x->ctx->stopping))
        return true;
    struct pollfd p = {.fd = x->fd, .events = POLLRDHUP};
    return x->fd >= 0 && poll(&p, 1, 0) > 0 &&
           (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static relay_t *relay_new(gw_req_t *r, gw_relay_kind_t kind, const char *model,
                          bool stream, gw_call_t **call, const gw_wait_t *wait)
{
    relay_t *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    x->model = strdup(model ? model : "");
    if (!x->model) {
        free(x);
        return NULL;
    }
    x->kind = kind;
    x->stream = stream;
    x->call = *call;
    *call = NULL;
    x->wait = *wait;
    x->wait.abort_fn = relay_should_abort;
    x->wait.abort_arg = x;
    x->ctx = r->ctx;
    x->conn = r->conn;
    x->fd = r->fd;
    x->start_ns = r->start_ns;
    cr_buf_init(&x->out, LINE_CAP);
    cr_buf_init(&x->text, TEXT_CAP);
    cr_buf_init(&x->thinking, TEXT_CAP);
    cr_buf_init(&x->tool_calls, TEXT_CAP);
    cr_buf_init(&x->logprobs, TEXT_CAP);
    return x;
}

static void relay_free(relay_t *x)
{
    if (!x)
        return;
    gw_call_destroy(&x->call);
    if (x->fmt && x->fmt->free_arg)
        x->fmt->free_arg(x->fmt_arg);
    cr_buf_free(&x->out);
    cr_buf_free(&x->text);
    cr_buf_free(&x->thinking);
    cr_buf_free(&x->tool_calls);
    cr_buf_free(&x->logprobs);
    free(x->model);
    free(x);
}

static void fail(relay_t *x, cr_status_t st, const char *fmt, ...)
    CR_PRINTF(3, 4);
static void fail(relay_t *x, cr_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->err_msg, sizeof x->err_msg, fmt, ap);
    va_end(ap);
    x->err_status = st ? st : CR_E_INTERNAL;
    x->finished = true;
}

/* Appends the elements of the JSON array text `json` to acc (comma-joined).
 * Text that is not a JSON array is dropped with a warning. */
static cr_status_t add_elements(relay_t *x, cr_buf_t *acc, const char *json)
{
    json_error_t je;
    json_t *v = json_loads(json, JSON_DECODE_ANY, &je);
    bool ok = json_is_array(v);
    size_t n = ok ? json_array_size(v) : 0;
    json_decref(v);
    if (!ok) {
        cr_log_warn("%s: dropped a malformed JSON array from the peer",
                    x->model);
        return CR_OK;
    }
    if (n == 0)
        return CR_OK;
    const char *a = strchr(json, '[') + 1;
    const char *b = strrchr(json, ']');
    cr_status_t st = CR_OK;
    if (acc->len)
        st = cr_buf_putc(acc, ',');
    if (!st)
        st = cr_buf_append(acc, a, (size_t)(b - a));
    return st;
}

/* A JSON array text that parses, else NULL (so a bad one is not sent). */
static const char *valid_array(relay_t *x, bool has, const char *json)
{
    if (!has || !json)
        return NULL;
    json_error_t je;
    json_t *v = json_loads(json, JSON_DECODE_ANY, &je);
    bool ok = json_is_array(v);
    json_decref(v);
    if (!ok)
        cr_log_warn("%s: dropped a malformed JSON array from the peer",
                    x->model);
    return ok ? json : NULL;
}

/* Ends the line rendered since `mark` (or drops it if rendering failed). */
static cr_status_t end_line(relay_t *x, size_t mark, cr_status_t st)
{
    if (!st)
        st = cr_buf_putc(&x->out, '\n');
    if (st) {
        x->out.len = mark;
        if (x->out.data)
            x->out.data[mark] = '\0';
        fail(x, CR_E_INTERNAL, "reply too large to send");
    }
    return st;
}

static void render_answer(relay_t *x, const gw_answer_t *a)
{
    size_t mark = x->out.len;
    if (x->fmt) {
        if (x->fmt->render(x->fmt_arg, &x->out, x->stream, a)) {
            x->out.len = mark;
            if (x->out.data)
                x->out.data[mark] = '\0';
            fail(x, CR_E_INTERNAL, "reply too large to send");
        }
        return;
    }
    cr_status_t st = x->kind == GW_RELAY_CHAT
                         ? gw_render_chat(&x->out, x->model, a)
                         : gw_render_generate(&x->out, x->model, a);
    if (x->stream)
        end_line(x, mark, st);
    else if (st)
        fail(x, CR_E_INTERNAL, "reply too large to send");
}

/* The accumulated arrays as "[...]" texts (in out bufs), or NULL. */
static const char *wrapped(cr_buf_t *acc, cr_buf_t *tmp)
{
    if (!acc->len)
        return NULL;
    cr_buf_init(tmp, TEXT_CAP + 2);
    if (cr_buf_putc(tmp, '[') || cr_buf_append(tmp, acc->data, acc->len) ||
        cr_buf_putc(tmp, ']'))
        return NULL;
    return tmp->data;
}

static void feed_answer(relay_t *x, const msg_t *m)
{
    if (m->type == MSG_chunk) {
        const msg_chunk_body_t *c = &m->u.chunk;
        if (!x->first_token &&
            ((c->response && *c->response) || (c->thinking && *c->thinking) ||
             (c->has_tool_calls && c->tool_calls))) {
            x->first_token = true;
            gw_metrics_first_token(x->ctx->metrics,
                                   (double)(mono_ns() - x->start_ns) / 1e9);
        }
        if (x->stream) {
            gw_answer_t a = {
                .response = c->response,
                .thinking = c->thinking,
                .tool_calls = valid_array(x, c->has_tool_calls, c->tool_calls),
                .logprobs = valid_array(x, c->has_logprobs, c->logprobs),
            };
            render_answer(x, &a);
            return;
        }
        cr_status_t st = CR_OK;
        if (c->response)
            st = cr_buf_puts(&x->text, c->response);
        if (!st && c->thinking)
            st = cr_buf_puts(&x->thinking, c->thinking);
        if (!st && c->has_tool_calls && c->tool_calls)
            st = add_elements(x, &x->tool_calls, c->tool_calls);
        if (!st && c->has_logprobs && c->logprobs)
            st = add_elements(x, &x->logprobs, c->logprobs);
        if (st)
            fail(x, CR_E_INTERNAL, "response too large");
        return;
    }
    /* done */
    x->peer_ended = true;
    gw_metrics_done(x->ctx->metrics, &m->u.done);
    gw_answer_t a = {.response = "", .done = &m->u.done};
    cr_buf_t t1 = {0}, t2 = {0};
    if (!x->stream) {
        a.response = x->text.data ? x->text.data : "";
        a.thinking = x->thinking.data;
        a.tool_calls = wrapped(&x->tool_calls, &t1);
        a.logprobs = wrapped(&x->logprobs, &t2);
    }
    render_answer(x, &a);
    cr_buf_free(&t1);
    cr_buf_free(&t2);
    x->finished = true;
}

static void feed_progress(relay_t *x, const msg_t *m)
{
    if (m->type == MSG_progress) {
        if (x->stream) {
            size_t mark = x->out.len;
            end_line(x, mark, gw_render_progress(&x->out, &m->u.progress));
        }
        snprintf(x->last_status, sizeof x->last_status, "%s",
                 m->u.progress.status ? m->u.progress.status : "");
        return;
    }
    /* ok: the last progress of a successful answer is "success". */
    x->peer_ended = true;
    if (!x->stream || strcmp(x->last_status, "success") != 0) {
        msg_progress_body_t done = {.status = "success", .has_status = true};
        size_t mark = x->out.len;
        cr_status_t st = gw_render_progress(&x->out, &done);
        if (x->stream)
            end_line(x, mark, st);
        else if (st)
            fail(x, CR_E_INTERNAL, "reply too large to send");
    }
    x->finished = true;
}

static const char *nonempty_or(const char *s, const char *def)
{
    return s && *s ? s : def;
}

static const char *peer_name(const relay_t *x)
{
    return x->kind == GW_RELAY_PROGRESS ? "registry" : "scheduler";
}

/* One reply: output lines (stream), accumulation (stream:false), or the
 * end. Errors end the relay with err_status/err_msg set. */
static void feed(relay_t *x, const msg_t *m)
{
    switch (m->type) {
    case MSG_error:
        x->peer_ended = true;
        fail(x, (cr_status_t)m->u.error.status, "%s",
             m->u.error.message ? m->u.error.message : "unknown error");
        return;
    case MSG_chunk:
    case MSG_done:
        if (x->kind != GW_RELAY_PROGRESS) {
            feed_answer(x, m);
            return;
        }
        break;
    case MSG_progress:
        if (x->kind != GW_RELAY_PROGRESS) {
            /* Load progress: a stream shows it as an empty, not-done
             * object with "status" (SSE: a comment line), which Ollama
             * and OpenAI clients skip; stream:false only stays alive. */
            if (x->stream && !x->first_token) {
                gw_answer_t a = {.response = "",
                                 .status = nonempty_or(m->u.progress.status,
                                                       "loading model")};
                render_answer(x, &a);
            }
            return;
        }
        feed_progress(x, m);
        return;
    case MSG_ok:
        if (x->kind == GW_RELAY_PROGRESS) {
            feed_progress(x, m);
            return;
        }
        break;
    default:
        break;
    }
    cr_log_warn("%s: unexpected %s from the %s", gw_call_id(x->call),
                msg_type_name(m->type), peer_name(x));
    fail(x, CR_E_PROTO, "unexpected reply '%s' from the %s",
         msg_type_name(m->type), peer_name(x));
}

/* ---- the stream ---- */

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    CR_UNUSED(pos);
    relay_t *x = cls;
    while (x->out_off >= x->out.len) {
        cr_buf_reset(&x->out);
        x->out_off = 0;
        if (x->finished) {
            if (!x->err_status) {
                /* The connection may carry another request: idle again
                 * counts (a cut stream closes it anyway). */
                if (x->ctx->cfg.idle_timeout_s)
                    MHD_set_connection_option(x->conn,
                                              MHD_CONNECTION_OPTION_TIMEOUT,
                                              x->ctx->cfg.idle_timeout_s);
                return MHD_CONTENT_READER_END_OF_STREAM;
            }
            /* Bytes went out already: the error is the last line. */
            cr_status_t st;
            if (x->fmt) {
                st = x->fmt->stream_error(x->fmt_arg, &x->out, x->err_msg);
            } else {
                st = gw_render_error(&x->out, x->err_msg);
                if (!st)
                    st = cr_buf_putc(&x->out, '\n');
            }
            x->err_status = CR_OK;
            if (st)
                return MHD_CONTENT_READER_END_WITH_ERROR;
            continue;
        }
        msg_t m;
        cr_err_t err;
        cr_status_t st = gw_call_recv(x->call, &x->wait, &m, &err);
        if (st == CR_E_CANCELED) {
            cr_log_info("%s: client went away; canceling",
                        gw_call_id(x->call));
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (st) {
            fail(x, st, "%s", err.msg);
            continue;
        }
        feed(x, &m);
        msg_clear(&m);
    }
    size_t n = CR_MIN(max, x->out.len - x->out_off);
    memcpy(buf, x->out.data + x->out_off, n);
    x->out_off += n;
    return (ssize_t)n;
}

static void reader_free(void *cls)
{
    relay_t *x = cls;
    if (!x->peer_ended)
        gw_call_cancel(x->call);
    relay_free(x);
}

/* ---- entry ---- */

static enum MHD_Result run(gw_req_t *r, relay_t *x);

enum MHD_Result gw_relay(gw_req_t *r, gw_relay_kind_t kind, const char *model,
                         bool stream, gw_call_t **call, const gw_wait_t *wait)
{
    relay_t *x = relay_new(r, kind, model, stream, call, wait);
    if (!x) {
        gw_call_destroy(call);
        return gw_reply_error(r, CR_E_NOMEM, "out of memory");
    }
    return run(r, x);
}

enum MHD_Result gw_relay_fmt(gw_req_t *r, const gw_relay_fmt_t *fmt,
                             void *arg, bool stream, gw_call_t **call,
                             const gw_wait_t *wait)
{
    relay_t *x = relay_new(r, GW_RELAY_CHAT, "", stream, call, wait);
    if (!x) {
        gw_call_destroy(call);
        if (fmt->free_arg)
            fmt->free_arg(arg);
        return fmt->error_reply(r, CR_E_NOMEM, "out of memory");
    }
    x->fmt = fmt;
    x->fmt_arg = arg;
    return run(r, x);
}

/* Waits for the first output (or the end) and answers. Takes x. */
static enum MHD_Result run(gw_req_t *r, relay_t *x)
{
    /* Until the first line (stream) or the end (stream:false). */
    while (!x->finished && !(x->stream && x->out.len)) {
        msg_t m;
        cr_err_t err;
        cr_status_t st = gw_call_recv(x->call, &x->wait, &m, &err);
        if (st == CR_E_CANCELED) {
            cr_log_info("%s: client went away; canceling", gw_call_id(x->call));
            gw_call_cancel(x->call);
            relay_free(x);
            return MHD_NO; /* nobody to answer: close the connection */
        }
        if (st) {
            fail(x, st, "%s", err.msg);
            break;
        }
        feed(x, &m);
        msg_clear(&m);
    }
    enum MHD_Result ret;
    if (x->err_status) {
        if (!x->peer_ended)
            gw_call_cancel(x->call);
        ret = x->fmt ? x->fmt->error_reply(r, x->err_status, x->err_msg)
                     : gw_reply_error(r, x->err_status, x->err_msg);
        relay_free(x);
        return ret;
    }
    if (!x->stream) {
        ret = gw_reply_json(r, MHD_HTTP_OK, x->out.data, x->out.len);
        relay_free(x);
        return ret;
    }
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, BLOCK_BYTES, reader, x, reader_free);
    if (!resp) {
        gw_call_cancel(x->call);
        relay_free(x);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            x->fmt ? x->fmt->content_type
                                   : "application/x-ndjson");
    /* A stream waits on the bus inside the reader, where libmicrohttpd
     * sees no traffic: a model load or a pull silent past
     * CORRAL_IDLE_TIMEOUT was cut as idle. Not idle while it runs (a
     * client that stops reading is the relay's flow control's). */
    if (x->ctx->cfg.idle_timeout_s)
        MHD_set_connection_option(r->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    ret = gw_reply_response(r, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp); /* MHD holds it (and x) from here */
    return ret;
}
