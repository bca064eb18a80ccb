/* extras.c: tokenize, detokenize and /metrics (see extras.h). */
#include "lib/prelude.h"
#include "services/gateway/extras.h"

#include "lib/log.h"
#include "services/gateway/call.h"
#include "services/gateway/convert.h"
#include "services/gateway/exchange.h"
#include "services/gateway/metrics.h"
#include "services/gateway/render.h"

#include <jansson.h>

#define REPLY_CAP (256u * 1024 * 1024)

static enum MHD_Result reply_st(gw_req_t *r, cr_status_t st,
                                const char *msg)
{
    if (st == CR_E_CANCELED)
        return MHD_NO;
    return gw_reply_error(r, st, msg);
}

/* The body as a JSON object with a string "model"; 400s otherwise. */
static cr_status_t load_body(gw_req_t *r, const char *sname, json_t **out,
                             const char **model, cr_err_t *err)
{
    *out = NULL;
    if (!r->body.len)
        return cr_err_set(err, CR_E_INVALID, "missing request body");
    json_error_t je;
    json_t *o = json_loadb(r->body.data, r->body.len, 0, &je);
    if (!o)
        return cr_err_set(err, CR_E_INVALID, "%s (line %d, column %d)",
                          je.text, je.line, je.column);
    if (!json_is_object(o)) {
        json_decref(o);
        return cr_err_set(err, CR_E_INVALID,
                          "json: cannot unmarshal value into Go value of "
                          "type api.%s",
                          sname);
    }
    json_t *m = json_object_get(o, "model");
    if (m && !json_is_null(m) && !json_is_string(m)) {
        const char *kind = json_is_number(m) ? "number" : "value";
        cr_err_set(err, CR_E_INVALID,
                   "json: cannot unmarshal %s into Go struct field %s.model "
                   "of type string",
                   kind, sname);
        json_decref(o);
        return CR_E_INVALID;
    }
    *model = json_is_string(m) ? json_string_value(m) : "";
    if (!**model) {
        json_decref(o);
        return cr_err_set(err, CR_E_INVALID, "model is required");
    }
    *out = o;
    return CR_OK;
}

/* Sends m to the scheduler, expects `want`; answers errors itself. */
static bool ask(gw_req_t *r, msg_t *m, msg_type_t want, msg_t *reply,
                enum MHD_Result *ret)
{
    cr_err_t err;
    gw_wait_t w = gw_wait_inference(r);
    cr_status_t st = gw_exchange(r, "scheduler", m, &w, reply, &err);
    if (!st && reply->type != want) {
        st = cr_err_set(&err, CR_E_PROTO,
                        "unexpected reply '%s' from the scheduler",
                        msg_type_name(reply->type));
        msg_clear(reply);
    }
    if (st) {
        *ret = reply_st(r, st, err.msg);
        return false;
    }
    return true;
}

static enum MHD_Result h_tokenize(gw_req_t *r)
{
    json_t *o;
    const char *model;
    cr_err_t err;
    cr_status_t st = load_body(r, "TokenizeRequest", &o, &model, &err);
    if (st)
        return reply_st(r, st, err.msg);
    json_t *content = json_object_get(o, "content");
    if (content && !json_is_null(content) && !json_is_string(content)) {
        json_decref(o);
        return reply_st(r, CR_E_INVALID,
                        "json: cannot unmarshal value into Go struct field "
                        "TokenizeRequest.content of type string");
    }
    /* Options get the native checks through a generate request's parse;
     * the tokenize message borrows them from q's arena. */
    json_t *probe = json_pack("{s:s}", "model", model);
    json_t *opts = json_object_get(o, "options");
    if (probe && opts)
        json_object_set(probe, "options", opts);
    char *text = probe ? json_dumps(probe, JSON_COMPACT) : NULL;
    json_decref(probe);
    gw_request_t q;
    st = text ? gw_request_parse(GW_API_GENERATE, text, strlen(text), &q, &err)
              : cr_err_set(&err, CR_E_NOMEM, "out of memory");
    free(text);
    if (st) {
        json_decref(o);
        return reply_st(r, st, err.msg);
    }
    msg_t m, reply;
    msg_init(&m, MSG_tokenize, NULL);
    m.u.tokenize.model = q.msg.u.generate.model;
    m.u.tokenize.has_model = true;
    m.u.tokenize.content =
        (char *)(json_is_string(content) ? json_string_value(content) : "");
    m.u.tokenize.has_content = true;
    m.u.tokenize.options = q.msg.u.generate.options;
    m.u.tokenize.has_options = q.msg.u.generate.has_options;
    enum MHD_Result ret;
    bool ok = ask(r, &m, MSG_tokens, &reply, &ret);
    json_decref(o);
    gw_request_clear(&q);
    if (!ok)
        return ret;
    cr_buf_t b;
    cr_buf_init(&b, REPLY_CAP);
    gw_jw_t w;
    gw_jw_init(&w, &b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "tokens");
    gw_jw_arr(&w);
    for (size_t i = 0; i < reply.u.tokens.tokens.n; i++)
        gw_jw_i64(&w, reply.u.tokens.tokens.v[i]);
    gw_jw_end_arr(&w);
    gw_jw_end_obj(&w);
    ret = w.st ? reply_st(r, w.st, "reply too large")
               : gw_reply_json(r, MHD_HTTP_OK, b.data, b.len);
    cr_buf_free(&b);
    msg_clear(&reply);
    return ret;
}

static enum MHD_Result h_detokenize(gw_req_t *r)
{
    json_t *o;
    const char *model;
    cr_err_t err;
    cr_status_t st = load_body(r, "DetokenizeRequest", &o, &model, &err);
    if (st)
        return reply_st(r, st, err.msg);
    json_t *toks = json_object_get(o, "tokens");
    size_t n = json_is_array(toks) ? json_array_size(toks) : 0;
    if (toks && !json_is_null(toks) && !json_is_array(toks))
        st = cr_err_set(&err, CR_E_INVALID,
                        "json: cannot unmarshal value into Go struct field "
                        "DetokenizeRequest.tokens of type []int");
    else if (n > MSG_MAX_ARRAY)
        st = cr_err_set(&err, CR_E_INVALID, "too many tokens (%zu)", n);
    int32_t *v = st ? NULL : malloc((n ? n : 1) * sizeof *v);
    if (!st && !v)
        st = cr_err_set(&err, CR_E_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < n; i++) {
        json_t *e = json_array_get(toks, i);
        json_int_t t = json_is_integer(e) ? json_integer_value(e) : -1;
        if (!json_is_integer(e) || t < 0 || t > INT32_MAX)
            st = cr_err_set(&err, CR_E_INVALID,
                            "tokens[%zu] is not a token id", i);
        else
            v[i] = (int32_t)t;
    }
    if (st) {
        free(v);
        json_decref(o);
        return reply_st(r, st, err.msg);
    }
    msg_t m, reply;
    msg_init(&m, MSG_detokenize, NULL);
    m.u.detokenize.model = (char *)model;
    m.u.detokenize.has_model = true;
    m.u.detokenize.tokens.v = v;
    m.u.detokenize.tokens.n = n;
    m.u.detokenize.has_tokens = true;
    enum MHD_Result ret;
    bool ok = ask(r, &m, MSG_text, &reply, &ret);
    free(v);
    json_decref(o);
    if (!ok)
        return ret;
    cr_buf_t b;
    cr_buf_init(&b, REPLY_CAP);
    gw_jw_t w;
    gw_jw_init(&w, &b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "text");
    gw_jw_str(&w, reply.u.text.text ? reply.u.text.text : "");
    gw_jw_end_obj(&w);
    ret = w.st ? reply_st(r, w.st, "reply too large")
               : gw_reply_json(r, MHD_HTTP_OK, b.data, b.len);
    cr_buf_free(&b);
    msg_clear(&reply);
    return ret;
}

/* ---- /metrics ---- */

/* The scheduler's figures for a scrape, from the console's status message:
 * its queue counts every waiting request, also those for models no runner
 * holds yet (ps only knows loaded models' queues). */
static void sched_stats(gw_req_t *r, gw_sched_stats_t *s)
{
    memset(s, 0, sizeof *s);
    msg_t m, reply;
    msg_init(&m, MSG_status, NULL);
    gw_wait_t w = gw_wait_control(r);
    cr_err_t err;
    if (gw_exchange(r, "scheduler", &m, &w, &reply, &err))
        return;
    if (reply.type == MSG_status_reply) {
        s->up = true;
        const msg_status_reply_body_t *p = &reply.u.status_reply;
        s->models = (int64_t)p->models.n;
        for (size_t i = 0; i < p->models.n; i++)
            if (p->models.v[i].has_active)
                s->active += p->models.v[i].active;
        for (size_t i = 0; i < p->queue.n; i++)
            s->queued += p->queue.v[i].waiting;
    }
    msg_clear(&reply);
}

static enum MHD_Result h_metrics(gw_req_t *r)
{
    gw_sched_stats_t s;
    sched_stats(r, &s);
    cr_buf_t b;
    cr_buf_init(&b, GW_METRICS_TEXT_MAX);
    cr_status_t st = gw_metrics_render(r->ctx->metrics, &b, &s);
    enum MHD_Result ret =
        st ? gw_reply_error(r, st, "out of memory")
           : gw_reply(r, MHD_HTTP_OK,
                      "text/plain; version=0.0.4; charset=utf-8", b.data,
                      b.len);
    cr_buf_free(&b);
    return ret;
}

/* ---- readiness ---- */

/* How long a peer has to answer the health ping. */
#define HEALTH_PING_MS 1000

/* Pings peer on a call of its own: true when it answered. */
static bool peer_ok(gw_req_t *r, const char *peer)
{
    const char *ep = !strcmp(peer, "scheduler") ? r->ctx->scheduler_ep
                                                : r->ctx->registry_ep;
    gw_call_t *call = NULL;
    cr_err_t err;
    cr_status_t st = gw_call_open(&r->ctx->calls, ep, peer, CR_MIN(r->ctx->cfg.connect_timeout_ms,
                                                   HEALTH_PING_MS),
                                  &call, &err);
    if (!st)
        st = gw_call_ping(call, HEALTH_PING_MS, &err);
    gw_call_destroy(&call);
    if (st)
        cr_log_info("%s %s: %s", r->method, r->path, err.msg);
    return st == CR_OK;
}

static enum MHD_Result h_health(gw_req_t *r)
{
    bool sch = peer_ok(r, "scheduler");
    bool reg = peer_ok(r, "registry");
    char json[160];
    int n = snprintf(json, sizeof json,
                     "{\"status\":\"%s\",\"scheduler\":\"%s\",\"registry\":\"%s\"}",
                     sch && reg ? "ok" : "unavailable", sch ? "ok" : "unavailable",
                     reg ? "ok" : "unavailable");
    return gw_reply_json(r, sch && reg ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
                         json, (size_t)n);
}

static const gw_route_t routes[] = {
    {"/api/health", false, GW_M_GET | GW_M_HEAD, h_health, NULL, NULL},
    {"/api/tokenize", false, GW_M_POST, h_tokenize, NULL, NULL},
    {"/api/detokenize", false, GW_M_POST, h_detokenize, NULL, NULL},
    {"/metrics", false, GW_M_GET, h_metrics, NULL, NULL},
};

const gw_route_t *gw_extra_routes(size_t *n)
{
    *n = CR_ARRAY_LEN(routes);
    return routes;
}
