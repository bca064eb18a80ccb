/* test_gptoss_forward.c: the gpt-oss architecture end to end against an
 * independent reference.
 *
 * A small gpt-oss model is written by synth.c (F32, and as real files ship
 * it: MXFP4 experts, the rest Q8_0), loaded and run. ref_forward below is a
 * plain double-precision gpt-oss written from the model's definition
 * (OpenAI's reference and llama.cpp's graph: q/k/v/o biases, YaRN NEOX
 * rope, attention sinks, a sliding window on even layers, the router with
 * its bias, softmax over the top-k logits, experts with biases and the
 * clamped SwiGLU); it reads the weights straight from the GGUF (quantized
 * ones dequantized) and shares no code with model.c, forward.c, moe.c or
 * the backend.
 *
 * Why cosine >= 0.9999 (F32): the engine rounds K/V, queries and attention
 * probabilities to F16 as llama.cpp does (~5e-4 relative each), so its
 * logits differ from the double reference by ~1e-3 relative; 0.9999
 * allows ~1.4% relative L2 error. For the quantized file the engine also
 * quantizes activations to Q8_0 for every matmul (llama.cpp's dot
 * formats), about 0.5% per matmul, hence the brief's 0.999. Each feature
 * is also removed from the reference ("mutants"); every mutant must fall
 * below 0.999, which shows the comparison sees that feature. A routing
 * near-tie could flip an expert between the two computations; the
 * smallest gap between the k-th and (k+1)-th router logit is printed so a
 * failure from that cause is recognisable. The same weights in Ollama's
 * layout ("gptoss", fused attn_qkv, its tensor names and missing keys)
 * must give the same bits. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/forward_check.h"

#include <math.h>
#include <stdarg.h>

#define N_TOK 14
#define MAX_W 128 /* reference weight cache entries */

static be_backend_t *be_g;
static const int32_t toks_g[N_TOK] = {1, 45, 300, 7, 99, 410, 12, 12, 256, 3, 77, 150,
                                      5, 222};

/* ---- the reference ---------------------------------------------------- */

typedef enum mutant {
    MUT_NONE,
    MUT_NO_SINKS,       /* softmax without the sink logits */
    MUT_NO_YARN,        /* plain linear scaling: no ramp, no magnitude */
    MUT_NO_MSCALE,      /* YaRN ramp but no magnitude factor */
    MUT_NO_WINDOW,      /* even layers attend to every earlier key */
    MUT_NO_ATTN_BIAS,   /* q/k/v/o biases ignored */
    MUT_NO_ROUTER_BIAS, /* router bias ignored */
    MUT_NO_EXPERT_BIAS, /* experts' gate/up/down biases ignored */
    MUT_PLAIN_SWIGLU,   /* silu(gate) * up instead of the clamped variant */
    MUT_SOFTMAX_ALL,    /* weights from a softmax over all experts */
} mutant_t;

static const char *const mutant_names[] = {
    "none", "no-sinks", "no-yarn", "no-mscale", "no-window", "no-attn-bias",
    "no-router-bias", "no-expert-bias", "plain-swiglu", "softmax-all",
};

typedef struct ref {
    const cr_gguf_t *g;
    int D, L, H, Hkv, hd, n_rot, E, K, Fe, V, W;
    double eps, base, factor, orig_ctx;
    mutant_t mut;
    double min_gap; /* smallest k-th vs (k+1)-th router logit gap seen */
    struct {
        char name[64];
        float *data;
    } w[MAX_W];
    int n_w;
} ref_t;

/* Tensor `name` as floats (dequantized, cached), or NULL. */
static const float *weight(ref_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static const float *weight(ref_t *r, const char *fmt, ...)
{
    char name[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    for (int i = 0; i < r->n_w; i++)
        if (!strcmp(r->w[i].name, name))
            return r->w[i].data;
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(r->g, name);
    if (!t || r->n_w == MAX_W)
        return NULL;
    uint64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *f = malloc(n * sizeof *f);
    if (!f)
        return NULL;
    if (t->type == CR_TYPE_F32)
        memcpy(f, t->data, n * sizeof *f);
    else
        be_type_traits(t->type)->to_float(t->data, f, (int64_t)n);
    snprintf(r->w[r->n_w].name, sizeof r->w[r->n_w].name, "%s", name);
    r->w[r->n_w++].data = f;
    return f;
}

static void ref_free(ref_t *r)
{
    for (int i = 0; i < r->n_w; i++)
        free(r->w[i].data);
    r->n_w = 0;
}

static int key_u32(const ref_t *r, const char *suffix)
{
    char key[96];
    snprintf(key, sizeof key, "gpt-oss.%s", suffix);
    uint32_t v = 0;
    return cr_gguf_get_u32(r->g, key, &v) ? (int)v : -1;
}

static double key_f32(const ref_t *r, const char *suffix)
{
    char key[96];
    snprintf(key, sizeof key, "gpt-oss.%s", suffix);
    float v = 0;
    return cr_gguf_get_f32(r->g, key, &v) ? v : -1;
}

static void ref_init(ref_t *r, const cr_gguf_t *g, mutant_t mut)
{
    memset(r, 0, sizeof *r);
    r->g = g;
    r->mut = mut;
    r->D = key_u32(r, "embedding_length");
    r->L = key_u32(r, "block_count");
    r->H = key_u32(r, "attention.head_count");
    r->Hkv = key_u32(r, "attention.head_count_kv");
    r->hd = key_u32(r, "attention.key_length");
    r->n_rot = key_u32(r, "rope.dimension_count");
    r->E = key_u32(r, "expert_count");
    r->K = key_u32(r, "expert_used_count");
    r->Fe = key_u32(r, "expert_feed_forward_length");
    r->W = key_u32(r, "attention.sliding_window");
    r->eps = key_f32(r, "attention.layer_norm_rms_epsilon");
    r->base = key_f32(r, "rope.freq_base");
    r->factor = key_f32(r, "rope.scaling.factor");
    r->orig_ctx = key_u32(r, "rope.scaling.original_context_length");
    r->V = (int)cr_gguf_tensor_find(g, "token_embd.weight")->ne[1];
    r->min_gap = INFINITY;
}

/* y[rows] = w[rows][cols] x (+ b) */
static void matvec(const float *w, const float *b, const double *x, int rows, int cols,
                   double *y)
{
    for (int i = 0; i < rows; i++) {
        double s = b ? b[i] : 0.0;
        for (int j = 0; j < cols; j++)
            s += (double)w[(size_t)i * cols + j] * x[j];
        y[i] = s;
    }
}

static void rmsnorm(double *y, const double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * s * w[i];
}

/* YaRN (Peng et al.): dims that turn more than beta_fast = 32 times over
 * the original context keep their angle, those under beta_slow = 1 are
 * interpolated by 1/factor, a linear ramp between; q and k are scaled by
 * 0.1 ln(factor) + 1. The ramp's ends are pair indices, floored/ceiled. */
static double corr_dim(const ref_t *r, double turns)
{
    return r->n_rot * log(r->orig_ctx / (turns * 2 * M_PI)) / (2 * log(r->base));
}

static void rope_head(const ref_t *r, double *v, int pos)
{
    int half = r->n_rot / 2;
    double lo = fmax(0, floor(corr_dim(r, 32))), hi = fmin(r->n_rot - 1, ceil(corr_dim(r, 1)));
    double mag = r->mut == MUT_NO_YARN || r->mut == MUT_NO_MSCALE ? 1 : 0.1 * log(r->factor) + 1;
    for (int i = 0; i < half; i++) {
        double extrap = pos * pow(r->base, -2.0 * i / r->n_rot);
        double interp = extrap / r->factor;
        double keep = 1 - fmin(1, fmax(0, (i - lo) / fmax(0.001, hi - lo)));
        double a = r->mut == MUT_NO_YARN ? interp : interp * (1 - keep) + extrap * keep;
        double x0 = v[i], x1 = v[i + half];
        v[i] = mag * (x0 * cos(a) - x1 * sin(a));
        v[i + half] = mag * (x0 * sin(a) + x1 * cos(a));
    }
}

static double swiglu_oai(double g, double u)
{
    g = fmin(g, 7.0);
    u = fmin(fmax(u, -7.0), 7.0);
    return g / (1 + exp(-1.702 * g)) * (u + 1);
}

/* xb: the normed row [D]; adds the experts' output to x [D]. */
static bool ref_moe(ref_t *r, int l, const double *xb, double *x)
{
    int D = r->D, E = r->E, K = r->K, Fe = r->Fe;
    const float *wr = weight(r, "blk.%d.ffn_gate_inp.weight", l);
    const float *br = weight(r, "blk.%d.ffn_gate_inp.bias", l);
    const float *wg = weight(r, "blk.%d.ffn_gate_exps.weight", l);
    const float *bg = weight(r, "blk.%d.ffn_gate_exps.bias", l);
    const float *wu = weight(r, "blk.%d.ffn_up_exps.weight", l);
    const float *bu = weight(r, "blk.%d.ffn_up_exps.bias", l);
    const float *wd = weight(r, "blk.%d.ffn_down_exps.weight", l);
    const float *bd = weight(r, "blk.%d.ffn_down_exps.bias", l);
    if (!wr || !br || !wg || !bg || !wu || !bu || !wd || !bd)
        return false;
    bool no_eb = r->mut == MUT_NO_EXPERT_BIAS;
    double logit[64], wsel[64], g[256], u[256], h[256], o[256];
    int ids[64];
    matvec(wr, r->mut == MUT_NO_ROUTER_BIAS ? NULL : br, xb, E, D, logit);
    /* top-k by logit, ties to the lower index */
    bool taken[64] = {false};
    for (int j = 0; j <= K && j < E; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || logit[e] > logit[best]))
                best = e;
        if (j == K) {
            r->min_gap = fmin(r->min_gap, logit[ids[K - 1]] - logit[best]);
            break;
        }
        taken[best] = true;
        ids[j] = best;
    }
    /* weights: softmax over the chosen logits (mutant: over all) */
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++)
        mx = fmax(mx, logit[e]);
    for (int e = 0; e < E; e++)
        if (taken[e] || r->mut == MUT_SOFTMAX_ALL)
            sum += exp(logit[e] - mx);
    for (int j = 0; j < K; j++)
        wsel[j] = exp(logit[ids[j]] - mx) / sum;
    for (int j = 0; j < K; j++) {
        int e = ids[j];
        matvec(wg + (size_t)e * Fe * D, no_eb ? NULL : bg + (size_t)e * Fe, xb, Fe, D, g);
        matvec(wu + (size_t)e * Fe * D, no_eb ? NULL : bu + (size_t)e * Fe, xb, Fe, D, u);
        for (int i = 0; i < Fe; i++)
            h[i] = r->mut == MUT_PLAIN_SWIGLU ? g[i] / (1 + exp(-g[i])) * u[i]
                                             : swiglu_oai(g[i], u[i]);
        matvec(wd + (size_t)e * D * Fe, no_eb ? NULL : bd + (size_t)e * D, h, D, Fe, o);
        for (int i = 0; i < D; i++)
            x[i] += wsel[j] * o[i];
    }
    return true;
}

/* Logits of every position of tok[0..n) into out [n][V]. */
static bool ref_forward(ref_t *r, const int32_t *tok, int n, double *out)
{
    int D = r->D, H = r->H, Hkv = r->Hkv, hd = r->hd, Q = H * hd, KV = Hkv * hd;
    double *x = calloc((size_t)n * D, sizeof *x), *xb = calloc((size_t)D, sizeof *xb);
    double *q = calloc((size_t)n * Q, sizeof *q), *k = calloc((size_t)n * KV, sizeof *k);
    double *v = calloc((size_t)n * KV, sizeof *v), *att = calloc((size_t)Q, sizeof *att);
    double *o = calloc((size_t)D, sizeof *o), *sc = calloc((size_t)n, sizeof *sc);
    const float *emb = weight(r, "token_embd.weight");
    bool ok = x && xb && q && k && v && att && o && sc && emb;
    for (int t = 0; ok && t < n; t++)
        for (int i = 0; i < D; i++)
            x[(size_t)t * D + i] = emb[(size_t)tok[t] * D + i];
    bool no_ab = r->mut == MUT_NO_ATTN_BIAS;
    for (int l = 0; ok && l < r->L; l++) {
        const float *an = weight(r, "blk.%d.attn_norm.weight", l);
        const float *wq = weight(r, "blk.%d.attn_q.weight", l);
        const float *bq = weight(r, "blk.%d.attn_q.bias", l);
        const float *wk = weight(r, "blk.%d.attn_k.weight", l);
        const float *bk = weight(r, "blk.%d.attn_k.bias", l);
        const float *wv = weight(r, "blk.%d.attn_v.weight", l);
        const float *bv = weight(r, "blk.%d.attn_v.bias", l);
        const float *wo = weight(r, "blk.%d.attn_output.weight", l);
        const float *bo = weight(r, "blk.%d.attn_output.bias", l);
        const float *sinks = weight(r, "blk.%d.attn_sinks.weight", l);
        const float *pn = weight(r, "blk.%d.post_attention_norm.weight", l);
        if (!an || !wq || !bq || !wk || !bk || !wv || !bv || !wo || !bo || !sinks || !pn) {
            ok = false;
            break;
        }
        bool slides = l % 2 == 0 && r->mut != MUT_NO_WINDOW;
        for (int t = 0; t < n; t++) {
            rmsnorm(xb, x + (size_t)t * D, an, D, r->eps);
            matvec(wq, no_ab ? NULL : bq, xb, Q, D, q + (size_t)t * Q);
            matvec(wk, no_ab ? NULL : bk, xb, KV, D, k + (size_t)t * KV);
            matvec(wv, no_ab ? NULL : bv, xb, KV, D, v + (size_t)t * KV);
            for (int h = 0; h < H; h++)
                rope_head(r, q + (size_t)t * Q + h * hd, t);
            for (int h = 0; h < Hkv; h++)
                rope_head(r, k + (size_t)t * KV + h * hd, t);
        }
        for (int t = 0; t < n; t++) {
            int first = slides && t - r->W + 1 > 0 ? t - r->W + 1 : 0;
            for (int h = 0; h < H; h++) {
                const double *qh = q + (size_t)t * Q + h * hd;
                int hk = h / (H / Hkv);
                double sink = r->mut == MUT_NO_SINKS ? -INFINITY : sinks[h];
                double mx = sink, sum = 0;
                for (int j = first; j <= t; j++) {
                    double d = 0;
                    for (int e = 0; e < hd; e++)
                        d += qh[e] * k[(size_t)j * KV + hk * hd + e];
                    sc[j] = d / sqrt((double)r->n_rot);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = first; j <= t; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                sum += exp(sink - mx); /* the sink: weight, no value */
                for (int e = 0; e < hd; e++) {
                    double a = 0;
                    for (int j = first; j <= t; j++)
                        a += sc[j] / sum * v[(size_t)j * KV + hk * hd + e];
                    att[h * hd + e] = a;
                }
            }
            matvec(wo, no_ab ? NULL : bo, att, D, Q, o);
            double *xt = x + (size_t)t * D;
            for (int i = 0; i < D; i++)
                xt[i] += o[i];
            rmsnorm(xb, xt, pn, D, r->eps);
            if (!ref_moe(r, l, xb, xt)) {
                ok = false;
                break;
            }
        }
    }
    const float *on = weight(r, "output_norm.weight"), *wout = weight(r, "output.weight");
    ok = ok && on && wout;
    for (int t = 0; ok && t < n; t++) {
        rmsnorm(xb, x + (size_t)t * D, on, D, r->eps);
        matvec(wout, NULL, xb, r->V, D, out + (size_t)t * r->V);
    }
    free(x), free(xb), free(q), free(k), free(v), free(att), free(o), free(sc);
    return ok;
}

/* ---- helpers ---------------------------------------------------------- */

static void gptoss_opts(rn_synth_opts_t *o, cr_type_t type, cr_type_t experts)
{
    rn_synth_defaults(o);
    o->arch = "gpt-oss";
    o->seed = 3;
    o->type = type;
    o->expert_type = experts;
    o->dim = 64;
    o->n_layers = 3; /* layers 0 and 2 slide */
    o->n_heads = 4;
    o->n_kv_heads = 2;
    o->head_dim = 32; /* q_dim 128 != dim, as in the real models */
    o->ffn = 64;
    o->ctx = 64;
    o->n_experts = 4;
    o->n_experts_used = 2;
    o->expert_ffn = 64;
    o->sliding_window = 4;
    o->rope_base = 150000.0f; /* the real base, orig ctx and factor */
    o->rope_yarn = 32.0f;
    o->yarn_orig_ctx = 4096;
    o->weight_std = 0.1f;
}

/* Loads o's model from memory; *bytes_out (caller frees) keeps the bytes
 * the reference reads. */
static rn_model_t *load_synth(const rn_synth_opts_t *o, void **bytes_out, size_t *len_out)
{
    cr_err_t err;
    cr_err_clear(&err);
    cr_gguf_t *g = NULL;
    rn_model_t *m = NULL;
    if (rn_synth_write_memory(o, bytes_out, len_out, &err) ||
        cr_gguf_open_memory(*bytes_out, *len_out, &g, &err) ||
        rn_model_load_gguf(&g, be_g, &m, &err))
        fprintf(stderr, "gpt-oss model: %s\n", err.msg);
    return m;
}

/* ---- the checks ------------------------------------------------------- */

static void check_model(const char *label, cr_type_t type, cr_type_t experts, double min_cos)
{
    rn_synth_opts_t o;
    gptoss_opts(&o, type, experts);
    void *bytes = NULL;
    size_t len = 0;
    rn_model_t *m = load_synth(&o, &bytes, &len);
    CHECK(m != NULL);
    if (!m) {
        free(bytes);
        return;
    }
    cr_err_t err;
    cr_err_clear(&err);
    const rn_hparams_t *hp = rn_model_hparams(m);
    size_t V = (size_t)hp->n_vocab;
    float *all = malloc(V * N_TOK * sizeof *all), *step = malloc(V * sizeof *step);
    double *ref = malloc(V * N_TOK * sizeof *ref);
    rn_ctx_t *c = new_ctx(m, 32, 64);
    CHECK(all && step && ref && c);
    if (!all || !step || !ref || !c)
        goto out;
    CHECK_EQ_INT(rn_ctx_eval(c, toks_g, N_TOK, 0, all, &err), CR_OK);

    /* decode == prefill: one token at a time, and chunks of 5, give the
     * same bits (every kernel takes the same float steps for a row alone
     * or in a batch; the sliding window's split calls too) */
    rn_ctx_t *c1 = new_ctx(m, 32, 64), *c5 = new_ctx(m, 32, 5);
    float *chunked = malloc(V * N_TOK * sizeof *chunked);
    bool same_decode = c1 && c5 && chunked;
    for (int t = 0; same_decode && t < N_TOK; t++) {
        same_decode = !rn_ctx_eval(c1, toks_g + t, 1, t, NULL, &err) &&
                      !memcmp(rn_ctx_logits(c1), all + V * t, V * sizeof(float));
    }
    same_decode = same_decode && !rn_ctx_eval(c5, toks_g, N_TOK, 0, chunked, &err) &&
                  !memcmp(chunked, all, V * N_TOK * sizeof(float));
    CHECK_MSG(same_decode, "%s: decode or chunked prefill differs from one prefill", label);
    rn_ctx_destroy(&c1);
    rn_ctx_destroy(&c5);
    free(chunked);

    /* against the reference, every position */
    cr_gguf_t *gr = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &gr, &err), CR_OK);
    ref_t r;
    ref_init(&r, gr, MUT_NONE);
    CHECK(ref_forward(&r, toks_g, N_TOK, ref));
    double worst = 1;
    for (int t = 0; t < N_TOK; t++)
        worst = fmin(worst, cosine(all + V * t, ref + V * t, V));
    printf("  %-12s cosine vs reference: worst position %.7f (routing gap >= %.4f)\n", label,
           worst, r.min_gap);
    CHECK_MSG(worst >= min_cos, "%s: cosine %.7f < %g", label, worst, min_cos);
    ref_free(&r);

    /* each feature, dropped from the reference, must show */
    for (int mu = MUT_NONE + 1; mu < (int)CR_ARRAY_LEN(mutant_names); mu++) {
        ref_init(&r, gr, (mutant_t)mu);
        CHECK(ref_forward(&r, toks_g, N_TOK, ref));
        double cm = cosine(all, ref, V * N_TOK);
        printf("  %-12s mutant %-15s cosine %.5f\n", label, mutant_names[mu], cm);
        CHECK_MSG(cm < 0.999, "%s: mutant %s not detected (cosine %.6f)", label,
                  mutant_names[mu], cm);
        ref_free(&r);
    }
    cr_gguf_close(&gr);
out:
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    free(all);
    free(step);
    free(ref);
    free(bytes);
}

static void test_hparams(void)
{
    rn_synth_opts_t o;
    gptoss_opts(&o, CR_TYPE_F32, CR_TYPE_F32);
    void *bytes = NULL;
    size_t len = 0;
    rn_model_t *m = load_synth(&o, &bytes, &len);
    CHECK(m != NULL);
    if (m) {
        const rn_hparams_t *hp = rn_model_hparams(m);
        const rn_weights_t *w = rn_model_weights(m);
        CHECK_EQ_INT(hp->arch_id, RN_ARCH_GPT_OSS);
        CHECK_EQ_INT(hp->n_swa, 4);
        CHECK(w->layers[0].swa && !w->layers[1].swa && w->layers[2].swa);
        CHECK_EQ_INT(hp->q_dim, 128);
        CHECK_NEAR(hp->attn_scale, 1 / sqrt(32.0), 1e-7);
        CHECK(hp->rope_yarn && hp->rope_neox);
        /* n_rot 32, original context 4096, base 150000: the ramp runs from
         * pair floor(4.05) = 4 to pair ceil(8.70) = 9 */
        CHECK_NEAR(hp->yarn.corr_lo, 4, 0);
        CHECK_NEAR(hp->yarn.corr_hi, 9, 0);
        CHECK_NEAR(hp->yarn.freq_scale, 1.0 / 32, 0);
        CHECK_NEAR(hp->yarn.ext_factor, 1, 0);
        CHECK_NEAR(hp->yarn.attn_factor, 1, 1e-6); /* the kernel adds 1 + 0.1 ln 32 */
        CHECK_NEAR(hp->yarn_swa.freq_base, 150000, 0);
        CHECK_EQ_INT(hp->n_expert, 4);
        CHECK_EQ_INT(hp->ffn_expert, 64);
        CHECK_EQ_INT(hp->expert_gating, RN_GATING_SOFTMAX_WEIGHT);
        CHECK(!hp->expert_norm && hp->swiglu_oai);
        const rn_layer_t *L = &w->layers[1];
        CHECK_EQ_STR(L->ffn_norm.name, "blk.1.post_attention_norm.weight");
        CHECK(L->attn_sinks.n_cols == 4 && L->bq.data && L->bo.data && L->router_b.data);
        CHECK(L->exp_gate_b.n_rows == 4 && L->exp_down_b.n_cols == 64);
    }
    rn_model_destroy(&m);
    free(bytes);
}

/* Layers on two CPU instances (layer 2 and the output on the second, so a
 * sliding layer, its sinks and biases and the residual hand-over cross):
 * the same ops in the same order, so the same bits as one instance. */
static void test_split(void)
{
    rn_synth_opts_t o;
    gptoss_opts(&o, CR_TYPE_Q8_0, CR_TYPE_MXFP4);
    void *bytes = NULL;
    size_t len = 0;
    rn_model_t *m1 = load_synth(&o, &bytes, &len), *m2 = NULL;
    be_backend_t *be2 = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    cr_gguf_t *g = NULL;
    CHECK_EQ_INT(be_cpu_new(1, &be2, &err), CR_OK);
    rn_placement_t pl = {.host = be_g, .n_ranges = 1,
                         .ranges = {{.be = be2, .first_layer = 2, .n_layers = 2}}};
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &g, &err), CR_OK);
    CHECK_EQ_INT(rn_model_load_gguf_placed(&g, &pl, &m2, &err), CR_OK);
    rn_ctx_t *c1 = m1 ? new_ctx(m1, 32, 64) : NULL, *c2 = m2 ? new_ctx(m2, 32, 64) : NULL;
    CHECK(c1 && c2);
    if (c1 && c2) {
        /* the embeddings (with the output layer, on be2), layers 0-1,
         * then layer 2 and the output */
        CHECK_EQ_INT(rn_ctx_n_parts(c2), 3);
        size_t V = (size_t)rn_model_hparams(m1)->n_vocab;
        float *a = malloc(V * N_TOK * sizeof *a), *b = malloc(V * N_TOK * sizeof *b);
        CHECK(a && b && !rn_ctx_eval(c1, toks_g, N_TOK, 0, a, &err) &&
              !rn_ctx_eval(c2, toks_g, N_TOK, 0, b, &err) &&
              !memcmp(a, b, V * N_TOK * sizeof *a));
        free(a);
        free(b);
    }
    rn_ctx_destroy(&c1);
    rn_ctx_destroy(&c2);
    rn_model_destroy(&m1);
    rn_model_destroy(&m2);
    be_destroy(&be2);
    free(bytes);
}

/* ---- Ollama's layout --------------------------------------------------- */

/* Rewrites llama.cpp's gpt-oss file src as Ollama's converter writes the
 * model: architecture "gptoss" (keys gptoss.*), no rope.scaling.type (its
 * runner always applies YaRN), no expert_feed_forward_length (it is
 * feed_forward_length there), q/k/v fused into attn_qkv (rows q, k, v;
 * bias likewise), attn_out, attn_sinks without ".weight", ffn_norm for
 * post_attention_norm. F32 only (rows are concatenated). Caller frees
 * *out. */
static cr_status_t to_ollama_layout(const void *src, size_t len, int n_layers, void **out,
                                    size_t *out_len, cr_err_t *err)
{
    cr_gguf_t *g = NULL;
    cr_status_t st = cr_gguf_open_memory(src, len, &g, err);
    if (st)
        return st;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    void *fused = NULL;
    st = w ? CR_OK : CR_E_NOMEM;
    for (size_t i = 0; !st && i < cr_gguf_kv_count(g); i++) {
        cr_gguf_kv_t kv = *cr_gguf_kv_at(g, i);
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)kv.key.len, kv.key.ptr);
        if (!strcmp(key, "gpt-oss.rope.scaling.type") ||
            !strcmp(key, "gpt-oss.expert_feed_forward_length"))
            continue;
        if (!strcmp(key, "general.architecture")) {
            st = cr_gguf_writer_add_str(w, key, "gptoss", err);
            continue;
        }
        if (!strncmp(key, "gpt-oss.", 8)) {
            char renamed[128];
            snprintf(renamed, sizeof renamed, "gptoss.%s", key + 8);
            kv.key = (cr_gguf_str_t){renamed, strlen(renamed)};
            st = cr_gguf_writer_copy_kv(w, &kv, err);
            continue;
        }
        st = cr_gguf_writer_copy_kv(w, &kv, err);
    }
    /* the fused q/k/v of every layer, weights then biases */
    size_t fused_bytes = 0;
    for (int l = 0; l < n_layers; l++)
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 3; i++) {
                char name[64];
                snprintf(name, sizeof name, "blk.%d.attn_%c.%s", l, "qkv"[i],
                         k ? "bias" : "weight");
                const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, name);
                fused_bytes += t ? t->size_bytes : 0;
            }
    fused = malloc(fused_bytes ? fused_bytes : 1);
    if (!st && !fused)
        st = CR_E_NOMEM;
    uint8_t *at = fused;
    for (size_t i = 0; !st && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        char name[96];
        int l = -1;
        char what[48] = "";
        if (sscanf(t->name, "blk.%d.%47s", &l, what) != 2) {
            st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data,
                                           NULL, err);
            continue;
        }
        bool weight = !strcmp(what, "attn_q.weight"), bias = !strcmp(what, "attn_q.bias");
        if (weight || bias) {
            /* q's turn: write attn_qkv from q, k and v */
            const char *kind = weight ? "weight" : "bias";
            uint64_t rows = 0, cols = t->ne[0];
            uint8_t *start = at;
            for (int j = 0; j < 3; j++) {
                snprintf(name, sizeof name, "blk.%d.attn_%c.%s", l, "qkv"[j], kind);
                const cr_gguf_tensor_t *p = cr_gguf_tensor_find(g, name);
                memcpy(at, p->data, p->size_bytes);
                at += p->size_bytes;
                rows += weight ? p->ne[1] : p->ne[0];
            }
            snprintf(name, sizeof name, "blk.%d.attn_qkv.%s", l, kind);
            uint64_t ne[2] = {weight ? cols : rows, weight ? rows : 1};
            st = cr_gguf_writer_add_tensor(w, name, weight ? 2 : 1, ne, CR_TYPE_F32, start,
                                           NULL, err);
            continue;
        }
        if (!strncmp(what, "attn_k.", 7) || !strncmp(what, "attn_v.", 7))
            continue;
        if (!strncmp(what, "attn_output.", 12))
            snprintf(name, sizeof name, "blk.%d.attn_out.%s", l, what + 12);
        else if (!strcmp(what, "attn_sinks.weight"))
            snprintf(name, sizeof name, "blk.%d.attn_sinks", l);
        else if (!strcmp(what, "post_attention_norm.weight"))
            snprintf(name, sizeof name, "blk.%d.ffn_norm.weight", l);
        else
            snprintf(name, sizeof name, "blk.%d.%s", l, what);
        st = cr_gguf_writer_add_tensor(w, name, t->n_dims, t->ne, t->type, t->data, NULL, err);
    }
    if (!st)
        st = cr_gguf_writer_write_memory(w, out, out_len, err);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
    free(fused);
    return st;
}

/* The same weights in Ollama's layout give the same bits: fused q/k/v are
 * row views of one matrix (each row's dot product unchanged), and the
 * absent keys take the values llama.cpp's file spells out. */
static void test_ollama_layout(void)
{
    rn_synth_opts_t o;
    gptoss_opts(&o, CR_TYPE_F32, CR_TYPE_F32);
    void *bytes = NULL, *ol = NULL;
    size_t len = 0, ol_len = 0;
    rn_model_t *m1 = load_synth(&o, &bytes, &len), *m2 = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    cr_gguf_t *g = NULL;
    CHECK_EQ_INT(to_ollama_layout(bytes, len, o.n_layers, &ol, &ol_len, &err), CR_OK);
    CHECK_EQ_INT(cr_gguf_open_memory(ol, ol_len, &g, &err), CR_OK);
    CHECK_EQ_STR(cr_gguf_arch(g), "gptoss");
    CHECK(!cr_gguf_tensor_find(g, "blk.0.attn_q.weight") &&
          cr_gguf_tensor_find(g, "blk.0.attn_qkv.bias") &&
          cr_gguf_tensor_find(g, "blk.2.attn_sinks"));
    cr_status_t st = rn_model_load_gguf(&g, be_g, &m2, &err);
    CHECK_MSG(st == CR_OK, "Ollama layout: %s", err.msg);
    rn_ctx_t *c1 = m1 ? new_ctx(m1, 32, 64) : NULL, *c2 = m2 ? new_ctx(m2, 32, 64) : NULL;
    if (c1 && c2) {
        const rn_hparams_t *hp = rn_model_hparams(m2);
        CHECK(hp->yarn.ext_factor == 1 && hp->ffn_expert == 64);
        CHECK_EQ_STR(rn_model_weights(m2)->layers[1].wo.name, "blk.1.attn_out.weight");
        size_t V = (size_t)hp->n_vocab;
        float *a = malloc(V * N_TOK * sizeof *a), *b = malloc(V * N_TOK * sizeof *b);
        CHECK(a && b && !rn_ctx_eval(c1, toks_g, N_TOK, 0, a, &err) &&
              !rn_ctx_eval(c2, toks_g, N_TOK, 0, b, &err) &&
              !memcmp(a, b, V * N_TOK * sizeof *a));
        free(a);
        free(b);
    }
    CHECK(c1 && c2);
    rn_ctx_destroy(&c1);
    rn_ctx_destroy(&c2);
    rn_model_destroy(&m1);
    rn_model_destroy(&m2);
    free(bytes);
    free(ol);
}

/* ---- broken files ----------------------------------------------------- */

typedef struct edit {
    const char *skip_tensor;
    const char *reshape_tensor; /* to ne {ne0, ne1} F32 zeros */
    uint64_t ne0, ne1;
    const char *f16_tensor;     /* same shape, stored as F16 */
    const char *drop_key;
    const char *str_key, *str_val;
    const char *f32_key;
    float f32_val;
} edit_t;

/* The F32 gpt-oss model with e applied, loaded into *m_out from *bytes
 * (both the caller's: destroy the model, then free the bytes). */
static cr_status_t load_edited(const edit_t *e, rn_model_t **m_out, void **bytes,
                               cr_err_t *err)
{
    rn_synth_opts_t o;
    gptoss_opts(&o, CR_TYPE_F32, CR_TYPE_F32);
    void *src = NULL, *out = NULL;
    size_t len = 0, out_len = 0;
    cr_err_t e2;
    cr_err_clear(&e2);
    cr_gguf_t *g = NULL;
    if (rn_synth_write_memory(&o, &src, &len, &e2) || cr_gguf_open_memory(src, len, &g, &e2)) {
        free(src);
        return CR_E_INTERNAL;
    }
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    void *zeros = calloc(1, 1 << 20);
    cr_status_t st = w && zeros ? cr_gguf_writer_copy_prefix(w, g, "", &e2) : CR_E_NOMEM;
    if (!st && e->drop_key)
        cr_gguf_writer_remove(w, e->drop_key);
    if (!st && e->str_key) {
        cr_gguf_writer_remove(w, e->str_key);
        st = cr_gguf_writer_add_str(w, e->str_key, e->str_val, &e2);
    }
    if (!st && e->f32_key) {
        cr_gguf_writer_remove(w, e->f32_key);
        st = cr_gguf_writer_add_f32(w, e->f32_key, e->f32_val, &e2);
    }
    for (size_t i = 0; !st && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (e->skip_tensor && !strcmp(t->name, e->skip_tensor))
            continue;
        if (e->reshape_tensor && !strcmp(t->name, e->reshape_tensor)) {
            uint64_t ne[2] = {e->ne0, e->ne1};
            st = cr_gguf_writer_add_tensor(w, t->name, e->ne1 > 1 ? 2 : 1, ne, CR_TYPE_F32,
                                           zeros, NULL, &e2);
        } else if (e->f16_tensor && !strcmp(t->name, e->f16_tensor)) {
            st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, CR_TYPE_F16, zeros,
                                           NULL, &e2);
        } else {
            st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data,
                                           NULL, &e2);
        }
    }
    if (!st)
        st = cr_gguf_writer_write_memory(w, &out, &out_len, &e2);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&g);
    free(zeros);
    free(src);
    if (st) {
        fprintf(stderr, "rebuild failed: %s\n", e2.msg);
        free(out);
        return CR_E_INTERNAL;
    }
    *bytes = out;
    st = cr_gguf_open_memory(out, out_len, &g, err);
    return st ? st : rn_model_load_gguf(&g, be_g, m_out, err);
}

static void test_corrupt(void)
{
    static const struct {
        const char *name;
        edit_t e;
        cr_status_t want;
        const char *msg1, *msg2;
    } cases[] = {
        {"unchanged", {0}, CR_OK, NULL, NULL},
        {"missing sinks", {.skip_tensor = "blk.1.attn_sinks.weight"}, CR_E_CORRUPT,
         "missing tensor", "blk.1.attn_sinks.weight"},
        {"sinks shape", {.reshape_tensor = "blk.0.attn_sinks.weight", .ne0 = 3, .ne1 = 1},
         CR_E_CORRUPT, "blk.0.attn_sinks.weight", "expected [4]"},
        {"missing output bias", {.skip_tensor = "blk.2.attn_output.bias"}, CR_E_CORRUPT,
         "missing tensor", "blk.2.attn_output.bias"},
        {"one attention bias missing", {.skip_tensor = "blk.1.attn_k.bias"}, CR_E_CORRUPT,
         "missing tensor", "blk.1.attn_k.bias"},
        {"missing router bias", {.skip_tensor = "blk.0.ffn_gate_inp.bias"}, CR_E_CORRUPT,
         "missing tensor", "blk.0.ffn_gate_inp.bias"},
        {"expert bias shape",
         {.reshape_tensor = "blk.0.ffn_gate_exps.bias", .ne0 = 64, .ne1 = 3}, CR_E_CORRUPT,
         "blk.0.ffn_gate_exps.bias", "expected [64, 4]"},
        {"missing down bias", {.skip_tensor = "blk.2.ffn_down_exps.bias"}, CR_E_CORRUPT,
         "missing tensor", "blk.2.ffn_down_exps.bias"},
        {"F16 expert bias", {.f16_tensor = "blk.1.ffn_up_exps.bias"}, CR_E_UNSUPPORTED,
         "blk.1.ffn_up_exps.bias", "expected F32"},
        {"missing expert stack", {.skip_tensor = "blk.1.ffn_up_exps.weight"}, CR_E_CORRUPT,
         "missing tensor", "blk.1.ffn_up_exps.weight"},
        {"missing pre-expert norm", {.skip_tensor = "blk.0.post_attention_norm.weight"},
         CR_E_CORRUPT, "missing tensor", "blk.0.post_attention_norm.weight"},
        {"no sliding window", {.drop_key = "gpt-oss.attention.sliding_window"},
         CR_E_CORRUPT, "missing key", "gpt-oss.attention.sliding_window"},
        {"no expert length", {.drop_key = "gpt-oss.expert_feed_forward_length"},
         CR_E_CORRUPT, "missing key", "gpt-oss.expert_feed_forward_length"},
        {"no experts", {.drop_key = "gpt-oss.expert_count"}, CR_E_CORRUPT, "missing key",
         "gpt-oss.expert_count"},
        {"other scaling", {.str_key = "gpt-oss.rope.scaling.type", .str_val = "dynamic"},
         CR_E_UNSUPPORTED, "gpt-oss.rope.scaling.type", "dynamic"},
        {"negative base", {.f32_key = "gpt-oss.rope.freq_base_swa", .f32_val = -1},
         CR_E_CORRUPT, "gpt-oss.rope.freq_base_swa", NULL},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        cr_err_t err;
        cr_err_clear(&err);
        rn_model_t *m = NULL;
        void *bytes = NULL;
        cr_status_t st = load_edited(&cases[i].e, &m, &bytes, &err);
        rn_model_destroy(&m);
        free(bytes);
        CHECK_MSG(st == cases[i].want, "%s: status %d (%s), want %d", cases[i].name, (int)st,
                  err.msg, (int)cases[i].want);
        if (cases[i].msg1)
            CHECK_MSG(strstr(err.msg, cases[i].msg1), "%s: '%s'", cases[i].name, err.msg);
        if (cases[i].msg2)
            CHECK_MSG(strstr(err.msg, cases[i].msg2), "%s: '%s'", cases[i].name, err.msg);
    }

    /* a base of its own for the sliding layers moves their ramp */
    edit_t e = {.f32_key = "gpt-oss.rope.freq_base_swa", .f32_val = 10000.0f};
    cr_err_t err;
    cr_err_clear(&err);
    rn_model_t *m = NULL;
    void *bytes = NULL;
    CHECK_EQ_INT(load_edited(&e, &m, &bytes, &err), CR_OK);
    if (m) {
        const rn_hparams_t *hp = rn_model_hparams(m);
        /* base 10000: pairs floor(5.24) = 5 .. ceil(11.26) = 12 */
        CHECK_NEAR(hp->yarn_swa.freq_base, 10000, 0);
        CHECK_NEAR(hp->yarn_swa.corr_lo, 5, 0);
        CHECK_NEAR(hp->yarn_swa.corr_hi, 12, 0);
        CHECK_NEAR(hp->yarn.corr_lo, 4, 0);
    }
    rn_model_destroy(&m);
    free(bytes);
}

int main(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(2, &be_g, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    test_hparams();
    check_model("f32", CR_TYPE_F32, CR_TYPE_F32, 0.9999);
    check_model("mxfp4+q8_0", CR_TYPE_Q8_0, CR_TYPE_MXFP4, 0.999);
    test_split();
    test_ollama_layout();
    test_corrupt();
    be_destroy(&be_g);
    return check_finish("test_gptoss_forward");
}
