/* spec_draft.c: drafting with a draft model (spec_draft.h). */
#include "lib/prelude.h"
#include "services/runner/spec_draft.h"

#include <math.h>
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"

struct rn_spec_draft {
    rn_model_t *model;
    rn_ctx_t *ctx;
    int n_ctx, n_seq;
    int32_t *held; /* [n_seq][n_ctx]: the tokens each sequence's cache holds */
    int *n_held;   /* [n_seq] */
};

cr_status_t rn_spec_draft_new(const char *path, be_backend_t *be, int n_ctx, int n_seq,
                              int n_vocab, rn_spec_draft_t **out, cr_err_t *err)
{
    *out = NULL;
    rn_spec_draft_t *d = calloc(1, sizeof *d);
    if (!d)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = rn_model_load(path, be, &d->model, err);
    if (st) {
        cr_err_wrap(err, "draft model");
        goto fail;
    }
    int dv = rn_model_hparams(d->model)->n_vocab;
    if (dv != n_vocab) {
        st = cr_err_set(err, CR_E_INVALID, "draft model has %d tokens; the model has %d", dv,
                        n_vocab);
        goto fail;
    }
    rn_ctx_opts_t co = {.n_ctx = n_ctx, .n_seq = n_seq}; /* f16 cache */
    if ((st = rn_ctx_new(d->model, &co, &d->ctx, err))) {
        cr_err_wrap(err, "draft model");
        goto fail;
    }
    d->n_ctx = n_ctx;
    d->n_seq = n_seq;
    d->held = calloc((size_t)n_seq * (size_t)n_ctx, sizeof *d->held);
    d->n_held = calloc((size_t)n_seq, sizeof *d->n_held);
    if (!d->held || !d->n_held) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory for the draft's token lists");
        goto fail;
    }
    *out = d;
    return CR_OK;
fail:
    rn_spec_draft_destroy(&d);
    return st;
}

void rn_spec_draft_destroy(rn_spec_draft_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_spec_draft_t *d = *self_p;
    rn_ctx_destroy(&d->ctx);
    rn_model_destroy(&d->model);
    free(d->held);
    free(d->n_held);
    free(d);
    *self_p = NULL;
}

/* The draft's pick: the argmax, lowest id on ties (the sampler's greedy
 * rule, so a draft and target with equal logits agree). */
static int32_t argmax(const float *logits, int n)
{
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* The probability softmax(logits) gives token x (temperature 1): a greedy
 * draft's confidence in its argmax. 0 where no logit is finite. */
static float prob_of(const float *logits, int n, int32_t x)
{
    float max = logits[x];
    double z = 0.0;
    for (int i = 0; i < n; i++)
        if (logits[i] > -INFINITY)
            z += exp((double)logits[i] - (double)max);
    return z > 0.0 && max > -INFINITY ? (float)(1.0 / z) : 0.0f;
}

/* A sampling draft's pick: q = softmax(logits / t) into q[n], then a draw
 * from it. NaN logits get no mass. */
static int32_t draw_q(const float *logits, int n, float t, rn_rng_t *rng, float *q)
{
    float max = -INFINITY;
    for (int i = 0; i < n; i++)
        max = logits[i] > max ? logits[i] : max;
    double z = 0.0;
    for (int i = 0; i < n; i++) {
        double e = logits[i] > -INFINITY ? exp(((double)logits[i] - (double)max) / t) : 0.0;
        q[i] = (float)e;
        z += e;
    }
    if (!(z > 0.0))
        return argmax(logits, n); /* every logit -inf or NaN: a point mass */
    double u = rn_rng_uniform(rng), cum = 0.0;
    int32_t pick = -1;
    for (int i = 0; i < n; i++) {
        q[i] = (float)(q[i] / z);
        cum += q[i];
        if (pick < 0 && u < cum && q[i] > 0.0f)
            pick = i;
    }
    if (pick < 0) /* rounding left cum a hair under 1 */
        for (int i = n; i-- > 0 && pick < 0;)
            if (q[i] > 0.0f)
                pick = i;
    return pick;
}

/* Evaluates spans[0..n) in as few passes as fit the draft's batch; a span
 * longer than the batch alone, in chunks. */
static cr_status_t eval_spans(rn_spec_draft_t *d, rn_ctx_span_t *spans, int n, cr_err_t *err)
{
    int batch = rn_ctx_n_batch(d->ctx);
    cr_status_t st = CR_OK;
    for (int i = 0; i < n && !st;) {
        if (spans[i].n > batch) {
            const rn_ctx_span_t *sp = &spans[i++];
            for (int at = 0; at < sp->n && !st; at += batch)
                st = rn_ctx_eval_seq(d->ctx, sp->seq, sp->tokens + at,
                                     CR_MIN(batch, sp->n - at), sp->pos + at, NULL, err);
            continue;
        }
        int j = i, tokens = 0;
        while (j < n && spans[j].n <= batch && tokens + spans[j].n <= batch)
            tokens += spans[j++].n;
        st = rn_ctx_eval_batch(d->ctx, spans + i, j - i, err);
        i = j;
    }
    return st;
}

/* Whether req can be drafted for (and its k_max capped to the context). */
static bool req_ok(const rn_spec_draft_t *d, rn_spec_draft_req_t *r)
{
    if (r->seq < 0 || r->seq >= d->n_seq || r->n < 1 || r->n > d->n_ctx)
        return false;
    r->k_max = CR_MIN(CR_MIN(r->k_max, d->n_ctx - r->n + 1), RN_SPEC_MAX_DRAFT);
    if (r->k_max < 1)
        return false;
    for (int i = 0; i < r->n; i++)
        if (r->hist[i] < 0)
            return false; /* the draft cannot read image embeddings */
    return true;
}

cr_status_t rn_spec_draft_propose_batch(rn_spec_draft_t *d, rn_spec_draft_req_t *reqs,
                                        int n_reqs, cr_err_t *err)
{
    rn_ctx_span_t spans[RN_CTX_MAX_SEQ];
    rn_spec_draft_req_t *act[RN_CTX_MAX_SEQ];
    int n_act = 0, k_most = 0;
    for (int i = 0; i < n_reqs; i++) {
        rn_spec_draft_req_t *r = &reqs[i];
        r->n_out = 0;
        if (n_act == RN_CTX_MAX_SEQ || !req_ok(d, r))
            continue;
        const int32_t *held = d->held + (size_t)r->seq * (size_t)d->n_ctx;
        int keep = 0;
        while (keep < d->n_held[r->seq] && keep < r->n && held[keep] == r->hist[keep])
            keep++;
        /* the last token is evaluated again even when held: its logits
         * were overwritten by the drafts that followed it */
        keep = CR_MIN(keep, r->n - 1);
        rn_ctx_seq_truncate(d->ctx, r->seq, keep);
        d->n_held[r->seq] = keep;
        spans[n_act] = (rn_ctx_span_t){r->seq, r->hist + keep, r->n - keep, keep,
                                       NULL, NULL, false, NULL};
        r->n_out = keep; /* scratch until the drafts are in: the kept prefix */
        act[n_act++] = r;
        k_most = CR_MAX(k_most, r->k_max);
    }
    /* what each cache has not seen, then one token per sequence per pass */
    cr_status_t st = eval_spans(d, spans, n_act, err);
    int V = rn_ctx_n_vocab(d->ctx);
    for (int k = 0; k < k_most && !st; k++) {
        int n_next = 0;
        for (int a = 0; a < n_act; a++) {
            rn_spec_draft_req_t *r = act[a];
            if (k >= r->k_max)
                continue;
            const rn_spec_draft_sampling_t *sm = r->samp;
            bool sampled = sm && sm->temperature > 0.0f && sm->rng && sm->q;
            const float *l = rn_ctx_seq_logits(d->ctx, r->seq);
            float *q = sampled ? sm->q + (size_t)k * V : NULL;
            r->out[k] = sampled ? draw_q(l, V, sm->temperature, sm->rng, q) : argmax(l, V);
            /* an unsure draft is proposed, but the last: no pass for more */
            if (r->p_min > 0.0f && k + 1 < r->k_max) {
                float p = sampled ? q[r->out[k]] : prob_of(l, V, r->out[k]);
                if (!(p >= r->p_min))
                    r->k_max = k + 1;
            }
            if (k + 1 < r->k_max)
                spans[n_next++] = (rn_ctx_span_t){r->seq, &r->out[k], 1, r->n + k,
                                                  NULL, NULL, false, NULL};
        }
        if (n_next)
            st = eval_spans(d, spans, n_next, err);
    }
    for (int a = 0; a < n_act; a++) {
        rn_spec_draft_req_t *r = act[a];
        int keep = r->n_out;
        if (st) {
            rn_ctx_seq_truncate(d->ctx, r->seq, 0);
            d->n_held[r->seq] = 0;
            r->n_out = 0;
            continue;
        }
        int32_t *held = d->held + (size_t)r->seq * (size_t)d->n_ctx;
        memcpy(held + keep, r->hist + keep, (size_t)(r->n - keep) * sizeof *held);
        memcpy(held + r->n, r->out, (size_t)(r->k_max - 1) * sizeof *held);
        d->n_held[r->seq] = r->n + r->k_max - 1;
        r->n_out = r->k_max;
    }
    if (st)
        cr_err_wrap(err, "draft model");
    return st;
}

cr_status_t rn_spec_draft_propose(rn_spec_draft_t *d, int seq, const int32_t *hist, int n,
                                  int k_max, const rn_spec_draft_sampling_t *samp,
                                  int32_t *out, int *n_out, cr_err_t *err)
{
    rn_spec_draft_req_t r = {seq, hist, n, k_max, samp, out, 0, 0.0f};
    cr_status_t st = rn_spec_draft_propose_batch(d, &r, 1, err);
    *n_out = r.n_out;
    return st;
}

int rn_spec_draft_n_past(const rn_spec_draft_t *d, int seq)
{
    return rn_ctx_seq_n_past(d->ctx, seq);
}

uint64_t rn_spec_draft_bytes(const rn_spec_draft_t *d)
{
    return rn_model_weight_bytes(d->model) + rn_ctx_kv_bytes(d->ctx) +
           rn_ctx_buffer_bytes(d->ctx);
}
