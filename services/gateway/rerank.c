/* rerank.c: the rerank routes (see rerank.h). */
#include "lib/prelude.h"
#include "services/gateway/rerank.h"

#include "services/gateway/convert.h"
#include "services/gateway/exchange.h"
#include "services/gateway/metrics.h"
#include "services/gateway/openai.h"
#include "services/gateway/render.h"

#include <jansson.h>
#include <math.h>

#define REPLY_CAP (64u * 1024 * 1024)

cr_status_t gw_rerank_opts_parse(const char *body, size_t len,
                                 gw_rerank_opts_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    json_t *o = json_loadb(body ? body : "", len, JSON_DECODE_ANY, NULL);
    cr_status_t st = CR_OK;
    if (!json_is_object(o))
        goto out; /* gw_request_parse reports what is wrong with it */
    json_t *v = json_object_get(o, "top_n");
    if (v && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            st = cr_err_set(err, CR_E_INVALID,
                            "\"top_n\" must be a non-negative integer");
        else
            out->top_n = (int64_t)json_integer_value(v);
    }
    v = json_object_get(o, "return_documents");
    if (!st && v && !json_is_null(v)) {
        if (!json_is_boolean(v))
            st = cr_err_set(err, CR_E_INVALID,
                            "\"return_documents\" must be a boolean");
        else
            out->return_documents = json_is_true(v);
    }
out:
    json_decref(o);
    return st;
}

typedef struct ranked {
    size_t index;
    float score;
} ranked_t;

static int by_score(const void *a, const void *b)
{
    const ranked_t *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

cr_status_t gw_rerank_render(cr_buf_t *b, const char *model,
                             const char *const *docs, size_t n,
                             const msg_ranked_body_t *r,
                             const gw_rerank_opts_t *o, cr_err_t *err)
{
    if (r->scores.len != n * sizeof(float))
        return cr_err_set(err, CR_E_PROTO,
                          "rerank: %zu bytes of scores for %zu documents",
                          r->scores.len, n);
    ranked_t *v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        v[i].index = i;
        memcpy(&v[i].score, r->scores.data + i * sizeof(float), sizeof(float));
        if (!isfinite(v[i].score)) {
            free(v);
            return cr_err_set(err, CR_E_INTERNAL,
                              "rerank score of document %zu is not finite", i);
        }
    }
    qsort(v, n, sizeof *v, by_score);
    size_t keep = o->top_n > 0 && (uint64_t)o->top_n < n ? (size_t)o->top_n : n;
    int64_t tokens = r->has_prompt_eval_count ? r->prompt_eval_count : 0;
    gw_jw_t w;
    gw_jw_init(&w, b);
    gw_jw_obj(&w);
    gw_jw_key(&w, "model");
    gw_jw_str(&w, model);
    gw_jw_key(&w, "object");
    gw_jw_str(&w, "list");
    gw_jw_key(&w, "usage");
    gw_jw_obj(&w);
    gw_jw_key(&w, "prompt_tokens");
    gw_jw_i64(&w, tokens);
    gw_jw_key(&w, "total_tokens");
    gw_jw_i64(&w, tokens);
    gw_jw_end_obj(&w);
    gw_jw_key(&w, "results");
    gw_jw_arr(&w);
    for (size_t i = 0; i < keep; i++) {
        gw_jw_obj(&w);
        gw_jw_key(&w, "index");
        gw_jw_i64(&w, (int64_t)v[i].index);
        gw_jw_key(&w, "relevance_score");
        gw_jw_f32(&w, v[i].score);
        if (o->return_documents) {
            gw_jw_key(&w, "document");
            gw_jw_obj(&w);
            gw_jw_key(&w, "text");
            gw_jw_str(&w, docs[v[i].index]);
            gw_jw_end_obj(&w);
        }
        gw_jw_end_obj(&w);
    }
    gw_jw_end_arr(&w);
    gw_jw_end_obj(&w);
    free(v);
    if (w.st)
        return cr_err_set(err, w.st, "reply too large");
    return CR_OK;
}

static enum MHD_Result fail(gw_req_t *r, bool v1, cr_status_t st,
                            const char *msg)
{
    if (st == CR_E_CANCELED)
        return MHD_NO;
    return v1 ? gw_oai_reply_error(r, st, msg) : gw_reply_error(r, st, msg);
}

static enum MHD_Result rerank(gw_req_t *r, bool v1)
{
    cr_err_t err;
    gw_rerank_opts_t o;
    gw_request_t q;
    cr_status_t st = gw_request_parse(GW_API_RERANK, r->body.data,
                                      r->body.len, &q, &err);
    if (!st && (st = gw_rerank_opts_parse(r->body.data, r->body.len, &o,
                                          &err)))
        gw_request_clear(&q);
    if (st)
        return fail(r, v1, st, err.msg);
    msg_t reply;
    gw_wait_t w = gw_wait_inference(r);
    st = gw_exchange(r, "scheduler", &q.msg, &w, &reply, &err);
    if (!st && reply.type != MSG_ranked) {
        st = cr_err_set(&err, CR_E_PROTO,
                        "unexpected reply '%s' from the scheduler",
                        msg_type_name(reply.type));
        msg_clear(&reply);
    }
    enum MHD_Result ret;
    if (st) {
        ret = fail(r, v1, st, err.msg);
    } else {
        gw_metrics_prompt_tokens(r->ctx->metrics,
                                 reply.u.ranked.prompt_eval_count);
        cr_buf_t b;
        cr_buf_init(&b, REPLY_CAP);
        const msg_rerank_body_t *rq = &q.msg.u.rerank;
        st = gw_rerank_render(&b, q.model, (const char *const *)rq->documents.v,
                              rq->documents.n, &reply.u.ranked, &o, &err);
        ret = st ? fail(r, v1, st, err.msg)
                 : gw_reply_json(r, MHD_HTTP_OK, b.data, b.len);
        cr_buf_free(&b);
        msg_clear(&reply);
    }
    gw_request_clear(&q);
    return ret;
}

static enum MHD_Result h_api_rerank(gw_req_t *r)
{
    return rerank(r, false);
}

static enum MHD_Result h_v1_rerank(gw_req_t *r)
{
    return rerank(r, true);
}

static const gw_route_t routes[] = {
    {"/api/rerank", false, GW_M_POST, h_api_rerank, NULL, NULL},
    {"/v1/rerank", false, GW_M_POST, h_v1_rerank, NULL, NULL},
};

const gw_route_t *gw_rerank_routes(size_t *n)
{
    *n = CR_ARRAY_LEN(routes);
    return routes;
}
