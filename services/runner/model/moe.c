/* moe.c: the mixture-of-experts FFN layer (see moe.h).
 *
 * Shapes: B = tokens in the chunk, D = dim, E = n_expert, k =
 * n_expert_used, Fe = ffn_expert, Fs = ffn_shared. Routing runs on the
 * host over the downloaded router logits ([B][E] floats, small next to the
 * weights); everything else runs through backend ops on backend buffers. */
#include "lib/prelude.h"
#include "services/runner/model/moe.h"

#include <math.h>

/* llama.cpp clamps the sum of the chosen weights to the smallest normal
 * F16 before dividing, so all-zero sigmoid gates do not divide by zero. */
#define NORM_MIN_SUM 6.103515625e-5f

struct rn_moe {
    int max_tok;
    float *probs;    /* [B][E] router logits, then gates */
    int32_t *ids;    /* [B][k] each token's experts */
    float *w;        /* [B][k] their weights */
    int32_t *count;  /* [E] tokens routed to each expert */
    int32_t *start;  /* [E + 1] each expert's first entry in tok/tw */
    int32_t *tok;    /* [B * k] tokens grouped by expert, in token order */
    float *tw;       /* [B * k] their weights */
    int32_t *iota;   /* [B] 0, 1, .. B-1 (the shared expert's rows) */
    float *sh_w;     /* [B] the shared expert's weight per token */
    bool *taken;     /* [E] top-k scratch */
    int32_t *sl_exp;   /* [E] the used experts of one slice */
    int32_t *sl_start; /* [E + 1] their first grouped row, from 0 */
};

cr_status_t rn_moe_new(const rn_hparams_t *hp, int max_tok, rn_moe_t **out,
                       cr_err_t *err)
{
    *out = NULL;
    size_t B = (size_t)max_tok, E = (size_t)hp->n_expert, k = (size_t)hp->n_expert_used;
    rn_moe_t *m = calloc(1, sizeof *m);
    if (!m)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for expert routing");
    m->max_tok = max_tok;
    m->probs = calloc(B * E, sizeof *m->probs);
    m->ids = calloc(B * k, sizeof *m->ids);
    m->w = calloc(B * k, sizeof *m->w);
    m->count = calloc(E, sizeof *m->count);
    m->start = calloc(E + 1, sizeof *m->start);
    m->tok = calloc(B * k, sizeof *m->tok);
    m->tw = calloc(B * k, sizeof *m->tw);
    m->iota = calloc(B, sizeof *m->iota);
    m->sh_w = calloc(B, sizeof *m->sh_w);
    m->taken = calloc(E, sizeof *m->taken);
    m->sl_exp = calloc(E, sizeof *m->sl_exp);
    m->sl_start = calloc(E + 1, sizeof *m->sl_start);
    if (!m->probs || !m->ids || !m->w || !m->count || !m->start || !m->tok || !m->tw ||
        !m->iota || !m->sh_w || !m->taken || !m->sl_exp || !m->sl_start) {
        rn_moe_destroy(&m);
        return cr_err_set(err, CR_E_NOMEM, "out of memory for expert routing (%zu "
                          "tokens x %zu experts)", B, E);
    }
    for (int t = 0; t < max_tok; t++)
        m->iota[t] = t;
    *out = m;
    return CR_OK;
}

void rn_moe_destroy(rn_moe_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_moe_t *m = *self_p;
    free(m->probs);
    free(m->ids);
    free(m->w);
    free(m->count);
    free(m->start);
    free(m->tok);
    free(m->tw);
    free(m->iota);
    free(m->sh_w);
    free(m->taken);
    free(m->sl_exp);
    free(m->sl_start);
    free(m);
    *self_p = NULL;
}

/* ---- routing ------------------------------------------------------------ */

static void softmax(float *x, int n)
{
    float max = -INFINITY;
    for (int i = 0; i < n; i++)
        max = fmaxf(max, x[i]);
    float sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    for (int i = 0; i < n; i++)
        x[i] /= sum;
}

static float sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* The k highest of p[0..E) into ids (highest first, ties to the lower
 * index; a NaN never wins over a number), taken[] as scratch. */
static void top_k(const float *p, int E, int k, bool *taken, int32_t *ids)
{
    memset(taken, 0, (size_t)E * sizeof *taken);
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < E; i++)
            if (!taken[i] && (best < 0 || p[i] > p[best] || isnan(p[best])))
                best = i;
        taken[best] = true;
        ids[j] = best;
    }
}

static void route(const rn_hparams_t *hp, float *p, bool *taken, int32_t *ids, float *w)
{
    int E = hp->n_expert, k = hp->n_expert_used;
    if (hp->expert_gating == RN_GATING_SOFTMAX)
        softmax(p, E);
    else if (hp->expert_gating == RN_GATING_SIGMOID)
        for (int i = 0; i < E; i++)
            p[i] = sigmoid(p[i]);
    top_k(p, E, k, taken, ids);
    for (int j = 0; j < k; j++)
        w[j] = p[ids[j]];
    /* gpt-oss: the chosen logits' softmax */
    if (hp->expert_gating == RN_GATING_SOFTMAX_WEIGHT)
        softmax(w, k);
    if (hp->expert_norm) {
        float sum = 0;
        for (int j = 0; j < k; j++)
            sum += w[j];
        sum = fmaxf(sum, NORM_MIN_SUM);
        for (int j = 0; j < k; j++)
            w[j] /= sum;
    }
    if (hp->expert_scale != 1.0f)
        for (int j = 0; j < k; j++)
            w[j] *= hp->expert_scale;
}

void rn_moe_route(const rn_hparams_t *hp, float *logits, int32_t *ids, float *w)
{
    bool taken[RN_MODEL_MAX_EXPERTS];
    route(hp, logits, taken, ids, w);
}

/* Counting sort of the (token, expert) pairs by expert, tokens in order
 * within an expert: expert e's tokens are tok[start[e] .. start[e+1]). */
static void group(rn_moe_t *m, int n, int E, int k)
{
    memset(m->count, 0, (size_t)E * sizeof *m->count);
    for (int i = 0; i < n * k; i++)
        m->count[m->ids[i]]++;
    m->start[0] = 0;
    for (int e = 0; e < E; e++)
        m->start[e + 1] = m->start[e] + m->count[e];
    memset(m->count, 0, (size_t)E * sizeof *m->count);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int e = m->ids[t * k + j];
            int at = m->start[e] + m->count[e]++;
            m->tok[at] = t;
            m->tw[at] = m->w[t * k + j];
        }
}

/* ---- the layer ---------------------------------------------------------- */

/* y = the products of the slice's nu experts (m->sl_exp, m->sl_start)
 * with their rows of x (x_rows picks them, or x is grouped already): the
 * backend's grouped op when it takes the stacks, else matmul_rows per
 * expert over rows gathered into xe ([max_tok][cols]). w2/y2: the same
 * for a second stack of the same shape, or NULL. */
static void experts_matmul(be_backend_t *be, const be_weight_t *w, const be_weight_t *w2,
                           int64_t rpe, const rn_moe_t *m, int nu, const float *x,
                           const int32_t *x_rows, float *y, float *y2, float *xe)
{
    const be_ops_ext_t *ext = be_ext_ops(be);
    if (ext->matmul_experts &&
        ext->matmul_experts(be, w, w2, rpe, m->sl_exp, m->sl_start, nu, x, x_rows, y, y2))
        return;
    int64_t cols = w->n_cols;
    for (int i = 0; i < nu; i++) {
        int at = m->sl_start[i], ne = m->sl_start[i + 1] - at;
        const float *xr = x + (size_t)at * (size_t)cols;
        if (x_rows) {
            ext->gather_rows(be, xe, x, x_rows + at, ne, (int)cols);
            xr = xe;
        }
        int64_t r0 = (int64_t)m->sl_exp[i] * rpe;
        ext->matmul_rows(be, w, r0, rpe, xr, ne, y + (size_t)at * (size_t)rpe);
        if (w2)
            ext->matmul_rows(be, w2, r0, rpe, xr, ne, y2 + (size_t)at * (size_t)rpe);
    }
}

void rn_moe_ffn(rn_moe_t *m, be_backend_t *be, const rn_hparams_t *hp,
                const rn_layer_t *L, const float *xb, float *x, int n,
                const rn_moe_bufs_t *b)
{
    const be_ops_t *op = be->ops;
    const be_ops_ext_t *ext = be_ext_ops(be);
    int D = hp->dim, E = hp->n_expert, k = hp->n_expert_used;
    int64_t Fe = hp->ffn_expert;

    /* 10m.1 router: logits = xb Wr^T (+ br, gpt-oss)     logits: [B][E] */
    op->matmul(be, &L->router, xb, n, b->logits);
    if (L->router_b.data)
        ext->add_rows(be, b->logits, &L->router_b, n);
    op->download(be, m->probs, b->logits, (size_t)n * (size_t)E * sizeof(float));

    /* 10m.2 each token's experts and weights (host)      ids, w: [B][k] */
    for (int t = 0; t < n; t++)
        route(hp, m->probs + (size_t)t * E, m->taken, m->ids + (size_t)t * k,
              m->w + (size_t)t * k);

    /* 10m.3 tokens grouped by expert */
    group(m, n, E, k);

    /* 10m.4 each used expert once over its tokens (n_e of them), in
     *    slices of whole experts of at most max_tok grouped rows (the
     *    buffers' rows; a decode is one slice):
     *    xe = xb[tok]                                    xe: [n_e][D]
     *    he = silu(xe Wgate_e^T) * (xe Wup_e^T)          he: [n_e][Fe]
     *    oe = he Wdown_e^T                               oe: [n_e][D]
     *    x[tok] += w * oe (the residual add, in grouped order)
     *    gpt-oss: each matmul plus expert e's bias row, and its clamped
     *    SwiGLU (be_ops_ext_t.swiglu_oai) for silu(gate) * up */
    for (int e0 = 0; e0 < E;) {
        int nu = 0, rows = 0, e = e0;
        m->sl_start[0] = 0;
        for (; e < E && rows + m->start[e + 1] - m->start[e] <= m->max_tok; e++) {
            int ne = m->start[e + 1] - m->start[e];
            if (ne == 0)
                continue;
            m->sl_exp[nu++] = e;
            rows += ne;
            m->sl_start[nu] = rows;
        }
        int g0 = m->start[e0];
        e0 = e;
        if (nu == 0)
            continue;
        experts_matmul(be, &L->exp_gate, &L->exp_up, Fe, m, nu, xb, m->tok + g0, b->he,
                       b->he2, b->xe);
        for (int i = 0; L->exp_gate_b.data && i < nu; i++) {
            int at = m->sl_start[i], ne = m->sl_start[i + 1] - at;
            ext->add_row_of(be, b->he + (size_t)at * Fe, &L->exp_gate_b, m->sl_exp[i], ne);
            ext->add_row_of(be, b->he2 + (size_t)at * Fe, &L->exp_up_b, m->sl_exp[i], ne);
        }
        if (hp->swiglu_oai)
            ext->swiglu_oai(be, b->he, b->he, b->he2, (size_t)rows * (size_t)Fe,
                            RN_SWIGLU_OAI_ALPHA, RN_SWIGLU_OAI_LIMIT);
        else
            op->swiglu(be, b->he, b->he, b->he2, (size_t)rows * (size_t)Fe);
        experts_matmul(be, &L->exp_down, NULL, D, m, nu, b->he, NULL, b->oe, NULL, NULL);
        for (int i = 0; L->exp_down_b.data && i < nu; i++) {
            int at = m->sl_start[i];
            ext->add_row_of(be, b->oe + (size_t)at * D, &L->exp_down_b, m->sl_exp[i],
                            m->sl_start[i + 1] - at);
        }
        ext->scatter_add(be, x, b->oe, m->tok + g0, m->tw + g0, rows, D);
    }

    /* 10m.5 shared expert over every token, weighted by
     *    sigmoid(xb . w_shexp_gate) (1 without that gate):
     *    x += s * (silu(xb Wsg^T) * (xb Wsu^T)) Wsd^T    he: [B][Fs] */
    if (!L->sh_gate.data)
        return;
    size_t Fs = (size_t)hp->ffn_shared;
    be_matmul_group(be, (const be_weight_t *[]){&L->sh_gate, &L->sh_up}, 2, xb, n,
                    (float *[]){b->he, b->he2});
    op->swiglu(be, b->he, b->he, b->he2, (size_t)n * Fs);
    op->matmul(be, &L->sh_down, b->he, n, b->oe);
    if (L->sh_router.data) {
        op->matmul(be, &L->sh_router, xb, n, b->logits); /* [B][1] */
        op->download(be, m->sh_w, b->logits, (size_t)n * sizeof(float));
        for (int t = 0; t < n; t++)
            m->sh_w[t] = sigmoid(m->sh_w[t]);
    } else {
        for (int t = 0; t < n; t++)
            m->sh_w[t] = 1.0f;
    }
    ext->scatter_add(be, x, b->oe, m->iota, m->sh_w, n, D);
}
