/* routes.c: the native API handlers (see routes.h).
 *
 * Inference (generate, chat, embed, ps) goes to the scheduler; the store
 * (tags, show, copy, delete, create, blobs) to the registry. Each request
 * uses its own bus call. Waits: inference has no fixed limit but pings the
 * scheduler after cfg.ping_after_ms of silence (it answers pong; a model
 * load or a long queue is not an error, a dead scheduler is); registry
 * requests wait cfg.reply_timeout_ms per reply, create cfg.create_timeout_ms
 * between progress messages. */
#include "lib/prelude.h"
#include "services/gateway/routes.h"

#include "lib/log.h"
#include "services/gateway/call.h"
#include "services/gateway/console.h"
#include "services/gateway/convert.h"
#include "services/gateway/exchange.h"
#include "services/gateway/extras.h"
#include "services/gateway/metrics.h"
#include "services/gateway/anthropic.h"
#include "services/gateway/openai.h"
#include "services/gateway/rerank.h"
#include "services/gateway/responses.h"
#include "services/gateway/relay.h"
#include "services/gateway/render.h"

#define BLOB_PIECE_BYTES (1u << 20) /* blob_put payload */
#define REPLY_CAP (512u * 1024 * 1024) /* largest JSON reply we build */

unsigned gw_method_bit(const char *m)
{
    if (!strcmp(m, "GET"))
        return GW_M_GET;
    if (!strcmp(m, "HEAD"))
        return GW_M_HEAD;
    if (!strcmp(m, "POST"))
        return GW_M_POST;
    if (!strcmp(m, "DELETE"))
        return GW_M_DELETE;
    return 0;
}

/* ---- waits and exchanges ---- */

/* Opens a call to peer and sends m. On failure answers the client and
 * returns NULL with *ret set. */
static gw_call_t *start_call(gw_req_t *r, const char *peer, msg_t *m,
                             enum MHD_Result *ret)
{
    gw_call_t *call = NULL;
    cr_err_t err;
    cr_status_t st = gw_call_start(r, peer, m, &call, &err);
    if (st)
        *ret = gw_reply_error(r, st, err.msg);
    return call;
}

/* Sends m to peer and waits for its one reply (gw_exchange). On success
 * *reply is a non-error message; otherwise the client was answered (or,
 * gone, its connection is to be closed) and *ret says what to return. */
static bool exchange(gw_req_t *r, const char *peer, msg_t *m,
                     const gw_wait_t *w, msg_t *reply, enum MHD_Result *ret)
{
    memset(reply, 0, sizeof *reply);
    gw_call_t *call = start_call(r, peer, m, ret);
    if (!call)
        return false;
    cr_err_t err;
    bool from_peer;
    cr_status_t st = gw_call_await(call, w, reply, &from_peer, &err);
    gw_call_destroy(&call);
    if (st == CR_E_CANCELED && !from_peer)
        *ret = MHD_NO;
    else if (st)
        *ret = gw_reply_error(r, st, err.msg);
    return !st;
}

static enum MHD_Result unexpected(gw_req_t *r, msg_t *reply, const char *peer)
{
    char text[160];
    snprintf(text, sizeof text, "unexpected reply '%s' from the %s",
             msg_type_name(reply->type), peer);
    cr_log_warn("%s %s: %s", r->method, r->path, text);
    msg_clear(reply);
    return gw_reply_error(r, CR_E_PROTO, text);
}

/* Parses the JSON body for api; answers 400 (or the parse status) and
 * returns false on failure. */
static bool parse(gw_req_t *r, gw_api_t api, gw_request_t *q,
                  enum MHD_Result *ret)
{
    cr_err_t err;
    cr_status_t st = gw_request_parse(api, r->body.data, r->body.len, q, &err);
    if (st) {
        *ret = gw_reply_error(r, st, err.msg);
        return false;
    }
    return true;
}

static enum MHD_Result reply_buf(gw_req_t *r, cr_status_t st, cr_buf_t *b)
{
    enum MHD_Result ret =
        st ? gw_reply_error(r, st, "reply too large")
           : gw_reply_json(r, MHD_HTTP_OK, b->data, b->len);
    cr_buf_free(b);
    return ret;
}

/* ---- general ---- */

static enum MHD_Result h_root(gw_req_t *r)
{
    static const char text[] = "Ollama is running";
    return gw_reply(r, MHD_HTTP_OK, "text/plain; charset=utf-8", text,
                    sizeof text - 1);
}

/* The Ollama version corral answers as (clients gate features on it), and
 * corral's own (lib/version.h). */
static enum MHD_Result h_version(gw_req_t *r)
{
    char json[128 + CR_VERSION_MAX];
    int n = snprintf(json, sizeof json,
                     "{\"version\":\"%s\",\"corral_version\":\"" CORRAL_VERSION "\"}",
                     r->ctx->cfg.compat_version);
    return gw_reply_json(r, MHD_HTTP_OK, json, (size_t)n);
}

/* ---- inference ---- */

static enum MHD_Result relay_request(gw_req_t *r, gw_api_t api,
                                     gw_relay_kind_t kind, const char *peer,
                                     gw_wait_t w)
{
    enum MHD_Result ret = MHD_NO;
    gw_request_t q;
    if (!parse(r, api, &q, &ret))
        return ret;
    gw_call_t *call = start_call(r, peer, &q.msg, &ret);
    if (call)
        ret = gw_relay(r, kind, q.model, q.stream, &call, &w);
    gw_request_clear(&q);
    return ret;
}

static enum MHD_Result h_generate(gw_req_t *r)
{
    return relay_request(r, GW_API_GENERATE, GW_RELAY_GENERATE, "scheduler",
                         gw_wait_inference(r));
}

static enum MHD_Result h_chat(gw_req_t *r)
{
    return relay_request(r, GW_API_CHAT, GW_RELAY_CHAT, "scheduler",
                         gw_wait_inference(r));
}

static enum MHD_Result embed_common(gw_req_t *r, gw_api_t api)
{
    enum MHD_Result ret;
    gw_request_t q;
    if (!parse(r, api, &q, &ret))
        return ret;
    msg_t reply;
    gw_wait_t w = gw_wait_inference(r);
    bool ok = exchange(r, "scheduler", &q.msg, &w, &reply, &ret);
    if (ok && reply.type != MSG_embeddings)
        ret = unexpected(r, &reply, "scheduler");
    else if (ok) {
        gw_metrics_prompt_tokens(r->ctx->metrics,
                                 reply.u.embeddings.prompt_eval_count);
        cr_buf_t b;
        cr_buf_init(&b, REPLY_CAP);
        cr_err_t err;
        cr_status_t st =
            api == GW_API_EMBED
                ? gw_render_embed(&b, q.model, &reply.u.embeddings, &err)
                : gw_render_embedding(&b, &reply.u.embeddings, &err);
        ret = st ? gw_reply_error(r, st, err.msg)
                 : gw_reply_json(r, MHD_HTTP_OK, b.data, b.len);
        cr_buf_free(&b);
        msg_clear(&reply);
    }
    gw_request_clear(&q);
    return ret;
}

static enum MHD_Result h_embed(gw_req_t *r)
{
    return embed_common(r, GW_API_EMBED);
}

static enum MHD_Result h_embeddings(gw_req_t *r)
{
    return embed_common(r, GW_API_EMBEDDINGS);
}

static enum MHD_Result h_ps(gw_req_t *r)
{
    enum MHD_Result ret;
    msg_t m, reply;
    msg_init(&m, MSG_ps, NULL);
    gw_wait_t w = gw_wait_control(r);
    if (!exchange(r, "scheduler", &m, &w, &reply, &ret))
        return ret;
    if (reply.type != MSG_ps_reply)
        return unexpected(r, &reply, "scheduler");
    cr_buf_t b;
    cr_buf_init(&b, REPLY_CAP);
    cr_status_t st = gw_render_ps(&b, &reply.u.ps_reply);
    msg_clear(&reply);
    return reply_buf(r, st, &b);
}

/* ---- the store ---- */

static enum MHD_Result h_tags(gw_req_t *r)
{
    enum MHD_Result ret;
    msg_t m, reply;
    msg_init(&m, MSG_tags, NULL);
    gw_wait_t w = gw_wait_control(r);
    if (!exchange(r, "registry", &m, &w, &reply, &ret))
        return ret;
    if (reply.type != MSG_tags_reply)
        return unexpected(r, &reply, "registry");
    cr_buf_t b;
    cr_buf_init(&b, REPLY_CAP);
    cr_status_t st = gw_render_tags(&b, &reply.u.tags_reply);
    msg_clear(&reply);
    return reply_buf(r, st, &b);
}

static enum MHD_Result h_show(gw_req_t *r)
{
    enum MHD_Result ret;
    gw_request_t q;
    if (!parse(r, GW_API_SHOW, &q, &ret))
        return ret;
    msg_t reply;
    gw_wait_t w = gw_wait_control(r);
    if (exchange(r, "registry", &q.msg, &w, &reply, &ret)) {
        if (reply.type != MSG_show_reply)
            ret = unexpected(r, &reply, "registry");
        else {
            const char *body = reply.u.show_reply.body;
            ret = gw_reply_json(r, MHD_HTTP_OK, body, body ? strlen(body) : 0);
            msg_clear(&reply);
        }
    }
    gw_request_clear(&q);
    return ret;
}

/* copy and delete: ok -> 200 with an empty body. */
static enum MHD_Result simple_store_op(gw_req_t *r, gw_api_t api)
{
    enum MHD_Result ret;
    gw_request_t q;
    if (!parse(r, api, &q, &ret))
        return ret;
    msg_t reply;
    gw_wait_t w = gw_wait_control(r);
    if (exchange(r, "registry", &q.msg, &w, &reply, &ret)) {
        if (reply.type != MSG_ok)
            ret = unexpected(r, &reply, "registry");
        else {
            ret = gw_reply(r, MHD_HTTP_OK, NULL, NULL, 0);
            msg_clear(&reply);
        }
    }
    gw_request_clear(&q);
    return ret;
}

static enum MHD_Result h_copy(gw_req_t *r)
{
    return simple_store_op(r, GW_API_COPY);
}

static enum MHD_Result h_delete(gw_req_t *r)
{
    return simple_store_op(r, GW_API_DELETE);
}

static enum MHD_Result h_create(gw_req_t *r)
{
    gw_wait_t w = gw_wait_control(r);
    w.idle_timeout_ms = r->ctx->cfg.create_timeout_ms;
    return relay_request(r, GW_API_CREATE, GW_RELAY_PROGRESS, "registry", w);
}

/* pull and push: progress lines from the registry, like create. Their
 * silences can be long (a manifest behind a slow registry, a stalled part
 * being restarted), so they wait as long as create does. */
static enum MHD_Result h_pull(gw_req_t *r)
{
    gw_wait_t w = gw_wait_control(r);
    w.idle_timeout_ms = r->ctx->cfg.create_timeout_ms;
    return relay_request(r, GW_API_PULL, GW_RELAY_PROGRESS, "registry", w);
}

static enum MHD_Result h_push(gw_req_t *r)
{
    gw_wait_t w = gw_wait_control(r);
    w.idle_timeout_ms = r->ctx->cfg.create_timeout_ms;
    return relay_request(r, GW_API_PUSH, GW_RELAY_PROGRESS, "registry", w);
}

/* ---- blobs ---- */

/* The digest as the registry wants it: "sha256:<hex>". */
static void norm_digest(const char *in, char *out, size_t cap)
{
    snprintf(out, cap, "sha256:%s", in + 7);
}

/* HEAD /api/blobs/:digest -> blob_head: ok 200, else the error's status. */
static enum MHD_Result blob_head(gw_req_t *r, bool *exists)
{
    enum MHD_Result ret = MHD_YES;
    char digest[80];
    norm_digest(r->param, digest, sizeof digest);
    msg_t m, reply;
    msg_init(&m, MSG_blob_head, NULL);
    m.u.blob_head.digest = digest;
    m.u.blob_head.has_digest = true;
    gw_wait_t w = gw_wait_control(r);
    *exists = false;
    gw_call_t *call = start_call(r, "registry", &m, &ret);
    if (!call)
        return ret;
    cr_err_t err;
    cr_status_t st = gw_call_recv(call, &w, &reply, &err);
    gw_call_destroy(&call);
    if (st == CR_E_CANCELED)
        return MHD_NO;
    if (st)
        return gw_reply_error(r, st, err.msg);
    if (reply.type == MSG_ok) {
        *exists = true;
    } else if (reply.type == MSG_error) {
        cr_status_t es = (cr_status_t)reply.u.error.status;
        if (es != CR_E_NOT_FOUND)
            ret = gw_reply_error(r, es, reply.u.error.message);
    } else {
        return unexpected(r, &reply, "registry");
    }
    msg_clear(&reply);
    return ret;
}

static enum MHD_Result h_blob_head(gw_req_t *r)
{
    if (!gw_digest_is_valid(r->param))
        return gw_reply_error(r, CR_E_INVALID, "invalid digest format");
    bool exists;
    enum MHD_Result ret = blob_head(r, &exists);
    if (r->responded || ret == MHD_NO)
        return ret;
    if (exists)
        return gw_reply(r, MHD_HTTP_OK, NULL, NULL, 0);
    char text[200];
    snprintf(text, sizeof text, "blob \"%s\" not found", r->param);
    return gw_reply_error(r, CR_E_NOT_FOUND, text);
}

/* An upload in progress: the body goes to the registry in 1 MiB pieces,
 * each acknowledged before the next is sent. */
typedef struct blob_up {
    gw_call_t *call;
    char digest[80];
    cr_buf_t piece;
    int64_t offset;    /* bytes sent before this piece */
    bool exists;       /* already stored: the body is discarded */
    bool finished;     /* the last piece was answered */
    cr_status_t err;   /* a failure: the rest of the body is discarded */
    char err_msg[CR_ERR_MSG_MAX];
    gw_req_t *req;
} blob_up_t;

static void blob_up_free(void *p)
{
    blob_up_t *u = p;
    if (!u)
        return;
    if (!u->finished && !u->err && u->call)
        gw_call_cancel(u->call); /* the client went away mid-upload */
    gw_call_destroy(&u->call);
    cr_buf_free(&u->piece);
    free(u);
}

static void blob_fail(blob_up_t *u, cr_status_t st, const char *msg)
{
    u->err = st ? st : CR_E_INTERNAL;
    snprintf(u->err_msg, sizeof u->err_msg, "%s", msg ? msg : "upload failed");
}

/* Sends the buffered piece and waits for its ack. Returns the reply's ok
 * message in *reply_ok when last (caller clears it). */
static void blob_send_piece(blob_up_t *u, bool last, bool *created)
{
    msg_t m;
    msg_init(&m, MSG_blob_put, NULL);
    m.u.blob_put.digest = u->digest;
    m.u.blob_put.has_digest = true;
    m.u.blob_put.offset = u->offset;
    m.u.blob_put.has_offset = true;
    m.u.blob_put.data.data = (uint8_t *)u->piece.data;
    m.u.blob_put.data.len = u->piece.len;
    m.u.blob_put.has_data = u->piece.len > 0;
    m.u.blob_put.last = last;
    m.u.blob_put.has_last = last;
    cr_err_t err;
    cr_status_t st = gw_call_send(u->call, &m, &err);
    if (st) {
        blob_fail(u, st, err.msg);
        return;
    }
    msg_t reply;
    gw_wait_t w = gw_wait_control(u->req);
    st = gw_call_recv(u->call, &w, &reply, &err);
    if (st) {
        gw_call_cancel(u->call);
        blob_fail(u, st, err.msg);
        return;
    }
    if (reply.type == MSG_error) {
        blob_fail(u, (cr_status_t)reply.u.error.status, reply.u.error.message);
        u->finished = true; /* the registry ended the upload itself */
    } else if (reply.type != MSG_ok) {
        gw_call_cancel(u->call);
        char text[128];
        snprintf(text, sizeof text, "unexpected reply '%s' from the registry",
                 msg_type_name(reply.type));
        blob_fail(u, CR_E_PROTO, text);
    } else {
        u->offset += (int64_t)u->piece.len;
        cr_buf_reset(&u->piece);
        if (last) {
            u->finished = true;
            *created = reply.u.ok.has_created && reply.u.ok.created;
        }
    }
    msg_clear(&reply);
}

static enum MHD_Result blob_begin(gw_req_t *r)
{
    if (!gw_digest_is_valid(r->param))
        return gw_reply_error(r, CR_E_INVALID, "invalid digest format");
    bool exists;
    enum MHD_Result ret = blob_head(r, &exists);
    if (r->responded || ret == MHD_NO)
        return ret;
    blob_up_t *u = calloc(1, sizeof *u);
    if (!u)
        return gw_reply_error(r, CR_E_NOMEM, "out of memory");
    cr_buf_init(&u->piece, BLOB_PIECE_BYTES);
    norm_digest(r->param, u->digest, sizeof u->digest);
    u->req = r;
    u->exists = exists;
    r->state = u;
    r->state_free = blob_up_free;
    if (exists)
        return MHD_YES;
    cr_err_t err;
    cr_status_t st = gw_call_open(&r->ctx->calls, r->ctx->registry_ep, "registry",
                                  r->ctx->cfg.connect_timeout_ms, &u->call,
                                  &err);
    if (st)
        return gw_reply_error(r, st, err.msg);
    return MHD_YES;
}

static enum MHD_Result blob_data(gw_req_t *r, const char *data, size_t n)
{
    blob_up_t *u = r->state;
    if (!u || u->exists || u->err)
        return MHD_YES; /* discard */
    while (n > 0) {
        size_t room = BLOB_PIECE_BYTES - u->piece.len;
        size_t take = CR_MIN(room, n);
        if (cr_buf_append(&u->piece, data, take)) {
            blob_fail(u, CR_E_NOMEM, "out of memory");
            return MHD_YES;
        }
        data += take;
        n -= take;
        if (u->piece.len == BLOB_PIECE_BYTES) {
            bool created;
            blob_send_piece(u, false, &created);
            if (u->err) {
                cr_log_warn("POST %s: upload failed at %" PRId64 ": %s",
                            r->path, u->offset, u->err_msg);
                return gw_req_client_gone(r) ? MHD_NO : MHD_YES;
            }
        }
    }
    return MHD_YES;
}

static enum MHD_Result h_blob_post(gw_req_t *r)
{
    blob_up_t *u = r->state;
    if (!u)
        return gw_reply_error(r, CR_E_INTERNAL, "no upload state");
    if (u->exists)
        return gw_reply(r, MHD_HTTP_OK, NULL, NULL, 0);
    bool created = false;
    if (!u->err)
        blob_send_piece(u, true, &created);
    if (u->err)
        return gw_reply_error(r, u->err, u->err_msg);
    return gw_reply(r, created ? MHD_HTTP_CREATED : MHD_HTTP_OK, NULL, NULL,
                    0);
}

static enum MHD_Result h_blob(gw_req_t *r)
{
    if (!strcmp(r->method, "HEAD"))
        return h_blob_head(r);
    return h_blob_post(r);
}

/* ---- the table ---- */

static const gw_route_t routes[] = {
    {"/", false, GW_M_GET | GW_M_HEAD, h_root, NULL, NULL},
    {"/api/version", false, GW_M_GET | GW_M_HEAD, h_version, NULL, NULL},
    {"/api/generate", false, GW_M_POST, h_generate, NULL, NULL},
    {"/api/chat", false, GW_M_POST, h_chat, NULL, NULL},
    {"/api/embed", false, GW_M_POST, h_embed, NULL, NULL},
    {"/api/embeddings", false, GW_M_POST, h_embeddings, NULL, NULL},
    {"/api/pull", false, GW_M_POST, h_pull, NULL, NULL},
    {"/api/push", false, GW_M_POST, h_push, NULL, NULL},
    {"/api/create", false, GW_M_POST, h_create, NULL, NULL},
    {"/api/blobs/", true, GW_M_HEAD | GW_M_POST, h_blob, blob_begin,
     blob_data},
    {"/api/tags", false, GW_M_GET | GW_M_HEAD, h_tags, NULL, NULL},
    {"/api/show", false, GW_M_POST, h_show, NULL, NULL},
    {"/api/copy", false, GW_M_POST, h_copy, NULL, NULL},
    {"/api/delete", false, GW_M_DELETE, h_delete, NULL, NULL},
    {"/api/ps", false, GW_M_GET, h_ps, NULL, NULL},
};

static gw_route_result_t find_in(const gw_route_t *table, size_t n_routes,
                                 const char *path, const char *method,
                                 const gw_route_t **route, char *param,
                                 size_t cap)
{
    for (size_t i = 0; i < n_routes; i++) {
        const gw_route_t *rt = &table[i];
        if (rt->has_param) {
            size_t n = strlen(rt->path);
            const char *rest = path + n;
            if (strncmp(path, rt->path, n) != 0 || !*rest ||
                strchr(rest, '/') || strlen(rest) >= cap)
                continue;
            snprintf(param, cap, "%s", rest);
        } else if (strcmp(path, rt->path) != 0) {
            continue;
        }
        if (!(rt->methods & gw_method_bit(method)))
            return GW_ROUTE_BAD_METHOD;
        *route = rt;
        return GW_ROUTE_FOUND;
    }
    return GW_ROUTE_NOT_FOUND;
}

/* The native table, then the /v1 routes (openai.h), the other API
 * surfaces (rerank.h, anthropic.h, responses.h), then the extras
 * (extras.h: tokenize, detokenize, metrics), then the web console
 * (console.h). */
gw_route_result_t gw_route_find(const char *path, const char *method,
                                const gw_route_t **route, char *param,
                                size_t cap)
{
    *route = NULL;
    if (cap)
        param[0] = '\0';
    const gw_route_t *(*const tables[])(size_t *) = {
        gw_openai_routes, gw_rerank_routes, gw_anthropic_routes,
        gw_responses_routes, gw_extra_routes, gw_console_routes,
    };
    gw_route_result_t res =
        find_in(routes, CR_ARRAY_LEN(routes), path, method, route, param, cap);
    for (size_t i = 0; i < CR_ARRAY_LEN(tables) && res == GW_ROUTE_NOT_FOUND;
         i++) {
        size_t n;
        const gw_route_t *t = tables[i](&n);
        res = find_in(t, n, path, method, route, param, cap);
    }
    return res;
}
