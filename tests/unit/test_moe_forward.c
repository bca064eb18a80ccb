/* test_moe_forward.c: mixture-of-experts models (qwen3moe, llama with
 * experts) against an independent reference, the MoE backend ops, the
 * routing, and broken MoE files.
 *
 * Each variant is a small random F32 model written by synth.c (the code
 * behind corral-gguf-synth --experts), loaded and run. Checks: logits
 * finite and deterministic; a prompt decoded token by token gives the
 * bits of the same prompt as one batched prefill (and as chunks of 5);
 * and, the real check, the logits at every position agree with
 * ref_forward below: a plain double-precision MoE transformer written from
 * the models' definition (llama.cpp's build_moe_ffn and the HF models),
 * reading the weights and metadata straight from the GGUF, sharing no code
 * with model.c, moe.c, forward.c or the backend.
 *
 * Why cosine >= 0.9999 (as test_arch_forward): the engine rounds K/V,
 * queries and attention probabilities to F16 like llama.cpp, so its logits
 * differ from the double reference by ~1e-3 relative; 0.9999 allows ~1.4%.
 * Routing is a discontinuous choice, so the reference also reports the
 * smallest gap between the last chosen and the first unchosen router logit
 * over every token and layer: the files are made with a router whose gaps
 * stay above 0.02, twenty times the ~1e-3 the engine's logits may differ
 * by, so both pick the same experts (checked, with the seed named when it
 * fails). Each MoE mistake (no renormalization, the other gating, one
 * expert fewer, gate/up swapped, the shared expert or its gate or the
 * weight scale ignored) is injected into the reference and must drop the
 * cosine under 0.999. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/model/moe.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/forward_check.h"

#include <math.h>
#include <stdarg.h>

#define N_TOK 12
#define MIN_GAP 0.02 /* router logit gap the files must keep (see top) */

static be_backend_t *be_g;
static const int32_t toks_g[N_TOK] = {1, 45, 300, 7, 99, 410, 12, 12, 256, 3, 77, 150};

/* ---- the reference ---------------------------------------------------- */

typedef enum mutant {
    MUT_NONE,
    MUT_NO_NORM,       /* chosen weights not renormalized */
    MUT_FORCE_NORM,    /* renormalized although the file says not */
    MUT_OTHER_GATING,  /* sigmoid for softmax and softmax for the others */
    MUT_ONE_FEWER,     /* top k-1 */
    MUT_SWAP_GATE_UP,  /* the experts' gate and up swapped */
    MUT_NO_SHARED,     /* shared expert ignored */
    MUT_NO_SHARED_GATE, /* shared expert taken with weight 1 */
    MUT_NO_SCALE,      /* expert_weights_scale ignored */
} mutant_t;

static const char *const mutant_names[] = {
    "none", "no-norm", "force-norm", "other-gating", "one-fewer", "swap-gate-up",
    "no-shared", "no-shared-gate", "no-scale",
};

typedef struct ref {
    const cr_gguf_t *g;
    char arch[16];
    bool llama; /* adjacent rope, no q/k norm */
    int D, L, H, Hkv, hd, V, E, K, Fe, Fs, gating;
    double eps, base, scale;
    bool norm;
    mutant_t mut;
    double min_gap; /* smallest last-chosen minus first-unchosen logit */
} ref_t;

static const float *tensor(const ref_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static const float *tensor(const ref_t *r, const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(r->g, name);
    return t && t->type == CR_TYPE_F32 ? t->data : NULL;
}

static int u32_key(const ref_t *r, const char *suffix, int def)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    uint32_t v = 0;
    return cr_gguf_get_u32(r->g, key, &v) ? (int)v : def;
}

static double f32_key(const ref_t *r, const char *suffix, double def)
{
    char key[96];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    float v = 0;
    return cr_gguf_get_f32(r->g, key, &v) ? v : def;
}

static bool ref_init(ref_t *r, const cr_gguf_t *g, mutant_t mut)
{
    memset(r, 0, sizeof *r);
    r->g = g;
    r->mut = mut;
    snprintf(r->arch, sizeof r->arch, "%s", cr_gguf_arch(g));
    r->llama = !strcmp(r->arch, "llama");
    r->D = u32_key(r, "embedding_length", 0);
    r->L = u32_key(r, "block_count", 0);
    r->H = u32_key(r, "attention.head_count", 0);
    r->Hkv = u32_key(r, "attention.head_count_kv", r->H);
    r->hd = u32_key(r, "attention.key_length", r->H ? r->D / r->H : 0);
    r->E = u32_key(r, "expert_count", 0);
    r->K = u32_key(r, "expert_used_count", 0);
    int F = u32_key(r, "feed_forward_length", 0);
    r->Fe = r->llama ? F : u32_key(r, "expert_feed_forward_length", F / (r->K ? r->K : 1));
    r->Fs = u32_key(r, "expert_shared_feed_forward_length", r->Fe);
    r->gating = u32_key(r, "expert_gating_func", 1);
    char key[96];
    snprintf(key, sizeof key, "%s.expert_weights_norm", r->arch);
    r->norm = true;
    cr_gguf_get_bool(g, key, &r->norm);
    r->scale = f32_key(r, "expert_weights_scale", 1.0);
    r->eps = f32_key(r, "attention.layer_norm_rms_epsilon", 1e-5);
    r->base = f32_key(r, "rope.freq_base", 10000);
    const cr_gguf_tensor_t *emb = cr_gguf_tensor_find(g, "token_embd.weight");
    r->V = emb ? (int)emb->ne[1] : 0;
    r->min_gap = INFINITY;
    if (mut == MUT_NO_NORM)
        r->norm = false;
    if (mut == MUT_FORCE_NORM)
        r->norm = true;
    if (mut == MUT_OTHER_GATING)
        r->gating = r->gating == 1 ? 2 : 1;
    if (mut == MUT_ONE_FEWER)
        r->K--;
    if (mut == MUT_NO_SCALE)
        r->scale = 1.0;
    return r->D && r->L && r->H && r->hd && r->V && r->E && r->K;
}

/* y[r] = sum_c w[r][c] x[c], w: [rows][cols] F32. */
static void matvec(const float *w, const double *x, int rows, int cols, double *y)
{
    for (int i = 0; i < rows; i++) {
        double s = 0;
        for (int c = 0; c < cols; c++)
            s += (double)w[(size_t)i * cols + c] * x[c];
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
        y[i] = x[i] * s * (double)w[i];
}

static void rope_head(const ref_t *r, double *v, double pos)
{
    int half = r->hd / 2;
    for (int i = 0; i < half; i++) {
        double ang = pos * pow(r->base, -2.0 * i / r->hd);
        int a = r->llama ? 2 * i : i, b = r->llama ? 2 * i + 1 : i + half;
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * cos(ang) - x1 * sin(ang);
        v[b] = x0 * sin(ang) + x1 * cos(ang);
    }
}

static double silu(double x)
{
    return x / (1 + exp(-x));
}

static double sigm(double x)
{
    return 1 / (1 + exp(-x));
}

/* out[i] += w * swiglu FFN of xb through gate/up [F][D] and down [D][F]
 * (each F32, rows of the given matrices). */
static void ffn_add(const ref_t *r, const float *wg, const float *wu, const float *wd,
                    int F, const double *xb, double w, double *out, double *g,
                    double *u, double *o)
{
    int D = r->D;
    matvec(wg, xb, F, D, g);
    matvec(wu, xb, F, D, u);
    for (int i = 0; i < F; i++)
        u[i] = r->mut == MUT_SWAP_GATE_UP ? silu(u[i]) * g[i] : silu(g[i]) * u[i];
    matvec(wd, u, D, F, o);
    for (int i = 0; i < D; i++)
        out[i] += w * o[i];
}

/* The MoE FFN of one token: out += sum_j w_j expert_ids[j](xb) (+ shared). */
static bool ref_moe(ref_t *r, int l, const double *xb, double *out, double *scratch)
{
    int D = r->D, E = r->E, K = r->K, Fe = r->Fe;
    const float *wr = tensor(r, "blk.%d.ffn_gate_inp.weight", l);
    const float *wg = tensor(r, "blk.%d.ffn_gate_exps.weight", l);
    const float *wu = tensor(r, "blk.%d.ffn_up_exps.weight", l);
    const float *wd = tensor(r, "blk.%d.ffn_down_exps.weight", l);
    if (!wr || !wg || !wu || !wd)
        return false;
    double *logit = scratch, *p = logit + E, *g = p + E;
    double *u = g + CR_MAX(Fe, r->Fs), *o = u + CR_MAX(Fe, r->Fs);
    matvec(wr, xb, E, D, logit);
    /* gates: softmax or sigmoid over all; gating 3 selects on the logits */
    double mx = -INFINITY, sum = 0;
    for (int e = 0; e < E; e++)
        mx = fmax(mx, logit[e]);
    for (int e = 0; e < E; e++)
        sum += exp(logit[e] - mx);
    for (int e = 0; e < E; e++)
        p[e] = r->gating == 1 ? exp(logit[e] - mx) / sum
             : r->gating == 2 ? sigm(logit[e]) : logit[e];
    int ids[64];
    bool taken[64] = {false};
    for (int j = 0; j < K; j++) {
        int best = -1;
        for (int e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || p[e] > p[best]))
                best = e;
        taken[best] = true;
        ids[j] = best;
    }
    /* the gap the engine must not cross (router logits, before gating) */
    double last = INFINITY, first_out = -INFINITY;
    for (int e = 0; e < E; e++) {
        if (taken[e])
            last = fmin(last, logit[e]);
        else
            first_out = fmax(first_out, logit[e]);
    }
    if (K < E)
        r->min_gap = fmin(r->min_gap, last - first_out);
    double w[64], wsum = 0;
    for (int j = 0; j < K; j++)
        w[j] = p[ids[j]];
    if (r->gating == 3) {
        double m2 = -INFINITY, s2 = 0;
        for (int j = 0; j < K; j++)
            m2 = fmax(m2, w[j]);
        for (int j = 0; j < K; j++)
            s2 += (w[j] = exp(w[j] - m2));
        for (int j = 0; j < K; j++)
            w[j] /= s2;
    }
    for (int j = 0; j < K; j++)
        wsum += w[j];
    for (int j = 0; j < K; j++) {
        double wj = (r->norm ? w[j] / wsum : w[j]) * r->scale;
        size_t e = (size_t)ids[j];
        ffn_add(r, wg + e * Fe * D, wu + e * Fe * D, wd + e * D * Fe, Fe, xb, wj, out, g, u,
                o);
    }
    const float *sg = tensor(r, "blk.%d.ffn_gate_shexp.weight", l);
    if (sg && r->mut != MUT_NO_SHARED) {
        const float *su = tensor(r, "blk.%d.ffn_up_shexp.weight", l);
        const float *sd = tensor(r, "blk.%d.ffn_down_shexp.weight", l);
        const float *sr = tensor(r, "blk.%d.ffn_gate_inp_shexp.weight", l);
        if (!su || !sd)
            return false;
        double s = 1;
        if (sr && r->mut != MUT_NO_SHARED_GATE) {
            matvec(sr, xb, 1, D, &s);
            s = sigm(s);
        }
        ffn_add(r, sg, su, sd, r->Fs, xb, s, out, g, u, o);
    }
    return true;
}

/* Logits of every position: out [n][V]. */
static bool ref_forward(ref_t *r, const int32_t *tok, int n, double *out)
{
    int D = r->D, H = r->H, Hkv = r->Hkv, hd = r->hd, V = r->V;
    int Q = H * hd, KV = Hkv * hd;
    size_t scratch_n = 2 * (size_t)r->E + 3 * (size_t)CR_MAX(r->Fe, r->Fs) + (size_t)D;
    double *x = calloc((size_t)n * D, sizeof *x), *xb = calloc(D, sizeof *xb);
    double *q = calloc((size_t)n * Q, sizeof *q), *k = calloc((size_t)n * KV, sizeof *k);
    double *v = calloc((size_t)n * KV, sizeof *v), *att = calloc(Q, sizeof *att);
    double *o = calloc(D, sizeof *o), *sc = calloc(n, sizeof *sc);
    double *scratch = calloc(scratch_n, sizeof *scratch);
    const float *emb = tensor(r, "token_embd.weight");
    bool ok = x && xb && q && k && v && att && o && sc && scratch && emb;
    for (int t = 0; ok && t < n; t++)
        for (int i = 0; i < D; i++)
            x[(size_t)t * D + i] = emb[(size_t)tok[t] * D + i];
    for (int l = 0; ok && l < r->L; l++) {
        const float *an = tensor(r, "blk.%d.attn_norm.weight", l);
        const float *wq = tensor(r, "blk.%d.attn_q.weight", l);
        const float *wk = tensor(r, "blk.%d.attn_k.weight", l);
        const float *wv = tensor(r, "blk.%d.attn_v.weight", l);
        const float *wo = tensor(r, "blk.%d.attn_output.weight", l);
        const float *fn = tensor(r, "blk.%d.ffn_norm.weight", l);
        const float *qn = tensor(r, "blk.%d.attn_q_norm.weight", l);
        const float *kn = tensor(r, "blk.%d.attn_k_norm.weight", l);
        ok = an && wq && wk && wv && wo && fn && (r->llama || (qn && kn));
        for (int t = 0; ok && t < n; t++) {
            double *qt = q + (size_t)t * Q, *kt = k + (size_t)t * KV, *vt = v + (size_t)t * KV;
            rmsnorm(xb, x + (size_t)t * D, an, D, r->eps);
            matvec(wq, xb, Q, D, qt);
            matvec(wk, xb, KV, D, kt);
            matvec(wv, xb, KV, D, vt);
            for (int h = 0; !r->llama && h < H; h++)
                rmsnorm(qt + h * hd, qt + h * hd, qn, hd, r->eps);
            for (int h = 0; !r->llama && h < Hkv; h++)
                rmsnorm(kt + h * hd, kt + h * hd, kn, hd, r->eps);
            for (int h = 0; h < H; h++)
                rope_head(r, qt + h * hd, t);
            for (int h = 0; h < Hkv; h++)
                rope_head(r, kt + h * hd, t);
        }
        for (int t = 0; ok && t < n; t++) {
            for (int h = 0; h < H; h++) {
                int hk = h / (H / Hkv);
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int d = 0; d < hd; d++)
                        s += q[(size_t)t * Q + h * hd + d] * k[(size_t)j * KV + hk * hd + d];
                    sc[j] = s / sqrt((double)hd);
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j <= t; j++)
                    sum += (sc[j] = exp(sc[j] - mx));
                for (int d = 0; d < hd; d++) {
                    double a = 0;
                    for (int j = 0; j <= t; j++)
                        a += sc[j] / sum * v[(size_t)j * KV + hk * hd + d];
                    att[h * hd + d] = a;
                }
            }
            matvec(wo, att, D, Q, o);
            for (int i = 0; i < D; i++)
                x[(size_t)t * D + i] += o[i];
        }
        for (int t = 0; ok && t < n; t++) {
            rmsnorm(xb, x + (size_t)t * D, fn, D, r->eps);
            ok = ref_moe(r, l, xb, x + (size_t)t * D, scratch);
        }
    }
    const float *on = ok ? tensor(r, "output_norm.weight") : NULL;
    const float *wout = tensor(r, "output.weight");
    ok = ok && on && wout;
    for (int t = 0; ok && t < n; t++) {
        rmsnorm(xb, x + (size_t)t * D, on, D, r->eps);
        matvec(wout, xb, V, D, out + (size_t)t * V);
    }
    free(x);
    free(xb);
    free(q);
    free(k);
    free(v);
    free(att);
    free(o);
    free(sc);
    free(scratch);
    return ok;
}

/* ---- helpers ---------------------------------------------------------- */

/* Small MoE models: dim 64, 3 layers, 4 heads / 2 KV heads; qwen3moe with
 * 24-wide heads, 8 experts of 32 (2 used), a dense ffn length of 96 that
 * no tensor uses; llama (Mixtral style) with 4 experts of ffn 64. */
static void moe_opts(const char *arch, rn_synth_opts_t *o)
{
    rn_synth_defaults(o);
    o->arch = arch;
    o->seed = 11;
    o->n_layers = 3;
    o->weight_std = 0.1f;
    o->router_std = 0.4f; /* router logits of std ~3: clear top-k */
    if (!strcmp(arch, "qwen3moe")) {
        o->head_dim = 24;
        o->ffn = 96;
        o->n_experts = 8;
        o->n_experts_used = 2;
        o->expert_ffn = 32;
    } else {
        o->ffn = 64;
        o->n_experts = 4;
        o->n_experts_used = 2;
    }
}

/* ---- the forward pass ------------------------------------------------- */

static void check_variant(const char *label, const rn_synth_opts_t *o,
                          const mutant_t *mutants, int n_mut)
{
    void *bytes = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = rn_synth_write_memory(o, &bytes, &len, &err);
    CHECK_MSG(st == CR_OK, "%s: synth: %s", label, err.msg);
    if (st)
        return;
    cr_gguf_t *g = NULL, *gr = NULL;
    rn_model_t *m = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &gr, &err), CR_OK);
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &g, &err), CR_OK);
    st = rn_model_load_gguf(&g, be_g, &m, &err);
    CHECK_MSG(st == CR_OK, "%s: load: %s", label, err.msg);
    if (!m || !gr) {
        rn_model_destroy(&m);
        cr_gguf_close(&gr);
        free(bytes);
        return;
    }
    size_t V = (size_t)rn_model_hparams(m)->n_vocab;
    float *all = calloc(V * N_TOK, sizeof *all), *step = calloc(V * N_TOK, sizeof *step);
    double *ref = calloc(V * N_TOK, sizeof *ref);
    rn_ctx_t *a = new_ctx(m, 32, 0), *b = new_ctx(m, 32, 5), *c = new_ctx(m, 32, 0);
    if (all && step && ref && a && b && c) {
        /* one batched prefill: finite, not flat, deterministic */
        CHECK_EQ_INT(rn_ctx_eval(a, toks_g, N_TOK, 0, all, &err), CR_OK);
        CHECK_MSG(all_finite(all, V * N_TOK), "%s: non-finite logits", label);
        CHECK_EQ_INT(rn_ctx_eval(c, toks_g, N_TOK, 0, step, &err), CR_OK);
        CHECK_MSG(same(all, step, V * N_TOK), "%s: not deterministic", label);
        /* decode token by token == the batch, bitwise (a token's experts
         * are summed in expert order in both; same kernels per row) */
        for (int t = 0; t < N_TOK; t++) {
            CHECK_EQ_INT(rn_ctx_eval(b, &toks_g[t], 1, t, NULL, &err), CR_OK);
            memcpy(step + V * t, rn_ctx_logits(b), V * sizeof(float));
        }
        CHECK_MSG(same(all, step, V * N_TOK), "%s: decode != batched prefill", label);
        /* chunks of 5 in one call */
        rn_ctx_clear(b);
        CHECK_EQ_INT(rn_ctx_eval(b, toks_g, N_TOK, 0, step, &err), CR_OK);
        CHECK_MSG(same(all, step, V * N_TOK), "%s: chunked prefill differs", label);

        ref_t r;
        CHECK_MSG(ref_init(&r, gr, MUT_NONE), "%s: reference hparams", label);
        CHECK_MSG(ref_forward(&r, toks_g, N_TOK, ref), "%s: reference failed", label);
        double worst = 1;
        for (int t = 0; t < N_TOK; t++)
            worst = fmin(worst, cosine(all + V * t, ref + V * t, V));
        printf("  %-22s cosine vs reference (worst position) %.7f, min router gap %.3f\n",
               label, worst, r.min_gap);
        CHECK_MSG(r.min_gap > MIN_GAP, "%s: seed %" PRIu64 " gives a router gap %.4f <= "
                  "%.2f: pick another seed", label, o->seed, r.min_gap, MIN_GAP);
        CHECK_MSG(worst >= 0.9999, "%s: cosine %.7f < 0.9999", label, worst);
        for (int i = 0; i < n_mut; i++) {
            ref_init(&r, gr, mutants[i]);
            CHECK(ref_forward(&r, toks_g, N_TOK, ref));
            double cm = cosine(all, ref, V * N_TOK);
            printf("  %-22s mutant %-15s cosine %.5f\n", label, mutant_names[mutants[i]],
                   cm);
            CHECK_MSG(cm < 0.999, "%s: mutant %s not detected (cosine %.6f)", label,
                      mutant_names[mutants[i]], cm);
        }
    }
    rn_ctx_destroy(&a);
    rn_ctx_destroy(&b);
    rn_ctx_destroy(&c);
    free(all);
    free(step);
    free(ref);
    rn_model_destroy(&m);
    cr_gguf_close(&gr);
    free(bytes);
}

static void test_variants(void)
{
    rn_synth_opts_t o;
    /* qwen3moe as its files are: softmax, renormalized (no keys written) */
    static const mutant_t base[] = {MUT_NO_NORM, MUT_OTHER_GATING, MUT_ONE_FEWER,
                                    MUT_SWAP_GATE_UP};
    moe_opts("qwen3moe", &o);
    check_variant("qwen3moe", &o, base, (int)CR_ARRAY_LEN(base));
    /* expert_weights_norm false: the softmax weights as they are */
    static const mutant_t no_norm[] = {MUT_FORCE_NORM};
    moe_opts("qwen3moe", &o);
    o.expert_norm = 0;
    check_variant("qwen3moe norm=false", &o, no_norm, (int)CR_ARRAY_LEN(no_norm));
    /* sigmoid gating, renormalized */
    static const mutant_t sig[] = {MUT_OTHER_GATING, MUT_NO_NORM};
    moe_opts("qwen3moe", &o);
    o.expert_gating = 2;
    o.seed = 12; /* router gaps above MIN_GAP with sigmoid */
    check_variant("qwen3moe sigmoid", &o, sig, (int)CR_ARRAY_LEN(sig));
    /* sigmoid without renormalization */
    moe_opts("qwen3moe", &o);
    o.expert_gating = 2;
    o.expert_norm = 0;
    check_variant("qwen3moe sigmoid norm=0", &o, no_norm, (int)CR_ARRAY_LEN(no_norm));
    /* softmax of the chosen logits (gpt-oss's gating) */
    static const mutant_t sw[] = {MUT_OTHER_GATING};
    moe_opts("qwen3moe", &o);
    o.expert_gating = 3;
    o.expert_norm = 0;
    check_variant("qwen3moe softmax-weight", &o, sw, (int)CR_ARRAY_LEN(sw));
    /* shared expert with its sigmoid gate, and a weight scale */
    static const mutant_t sh[] = {MUT_NO_SHARED, MUT_NO_SHARED_GATE, MUT_NO_SCALE};
    moe_opts("qwen3moe", &o);
    o.shared_ffn = 48;
    o.shared_gate = true;
    o.expert_scale = 2.5f;
    check_variant("qwen3moe shared+scale", &o, sh, (int)CR_ARRAY_LEN(sh));
    /* shared expert without a gate (weight 1) */
    static const mutant_t sh1[] = {MUT_NO_SHARED};
    moe_opts("qwen3moe", &o);
    o.shared_ffn = 32;
    check_variant("qwen3moe shared", &o, sh1, (int)CR_ARRAY_LEN(sh1));
    /* llama with experts (Mixtral): softmax, renormalized, adjacent rope */
    static const mutant_t mix[] = {MUT_NO_NORM, MUT_ONE_FEWER, MUT_SWAP_GATE_UP};
    moe_opts("llama", &o);
    check_variant("llama experts", &o, mix, (int)CR_ARRAY_LEN(mix));
}

/* Quantized expert stacks (Q8_0, Q4_0, Q4_K: packed by the CPU backend in
 * groups of 8 rows, each expert a view of its groups): finite, and decode
 * agrees with the batched prefill bitwise. */
static void test_quantized(void)
{
    static const cr_type_t types[] = {CR_TYPE_Q8_0, CR_TYPE_Q4_0, CR_TYPE_Q4_K};
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++) {
        rn_synth_opts_t o;
        moe_opts("qwen3moe", &o);
        o.type = types[i];
        o.dim = 256; /* whole Q4_K super-blocks */
        o.head_dim = 64;
        o.ffn = 256;
        o.expert_ffn = 256;
        o.shared_ffn = 256;
        void *bytes = NULL;
        size_t len = 0;
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = rn_synth_write_memory(&o, &bytes, &len, &err);
        CHECK_MSG(st == CR_OK, "type %d: synth: %s", (int)types[i], err.msg);
        cr_gguf_t *g = NULL;
        rn_model_t *m = NULL;
        if (!st && !cr_gguf_open_memory(bytes, len, &g, &err))
            st = rn_model_load_gguf(&g, be_g, &m, &err);
        CHECK_MSG(m != NULL, "type %d: load: %s", (int)types[i], err.msg);
        if (m) {
            size_t V = (size_t)rn_model_hparams(m)->n_vocab;
            rn_ctx_t *a = new_ctx(m, 16, 0), *b = new_ctx(m, 16, 0);
            float *all = calloc(V * N_TOK, sizeof *all);
            if (a && b && all) {
                CHECK_EQ_INT(rn_ctx_eval(a, toks_g, N_TOK, 0, all, &err), CR_OK);
                CHECK(all_finite(all, V * N_TOK));
                for (int t = 0; t < N_TOK; t++)
                    CHECK_EQ_INT(rn_ctx_eval(b, &toks_g[t], 1, t, NULL, &err), CR_OK);
                CHECK_MSG(same(rn_ctx_logits(b), all + V * (N_TOK - 1), V),
                          "type %d: decode != batched prefill", (int)types[i]);
            }
            free(all);
            rn_ctx_destroy(&a);
            rn_ctx_destroy(&b);
        }
        rn_model_destroy(&m);
        free(bytes);
    }
}

/* ---- ops and routing -------------------------------------------------- */

/* matmul_rows over an expert's slice of a stack == matmul over a weight of
 * just those rows, bitwise: packed (Q8_0, Q4_K: rows in groups of 8), row
 * major (F32), and an unaligned slice of a packed stack. */
static void test_matmul_rows(void)
{
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    CHECK(ext && ext->matmul_rows && ext->gather_rows && ext->scatter_add);
    if (!ext || !ext->matmul_rows)
        return;
    static const cr_type_t types[] = {CR_TYPE_F32, CR_TYPE_Q8_0, CR_TYPE_Q4_K};
    enum { E = 3, R = 16, C = 256, N = 5 };
    float *src = malloc(sizeof(float) * E * R * C), *x = malloc(sizeof(float) * N * C);
    float y1[N * R], y2[N * R];
    uint64_t s = 99;
    for (int i = 0; i < E * R * C; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = (float)((double)(s >> 40) / (1 << 24) - 0.5);
    }
    for (int i = 0; i < N * C; i++)
        x[i] = sinf((float)i * 0.37f);
    for (size_t ti = 0; ti < CR_ARRAY_LEN(types); ti++) {
        const be_type_traits_t *tt = be_type_traits(types[ti]);
        uint64_t rb = 0;
        cr_type_row_bytes(types[ti], C, &rb);
        uint8_t *q = malloc(rb * E * R);
        for (int r = 0; r < E * R; r++)
            tt->from_float(src + (size_t)r * C, q + (size_t)r * rb, C);
        cr_err_t err;
        cr_err_clear(&err);
        be_weight_t stack = {.name = "stack", .type = types[ti], .n_cols = C,
                             .n_rows = E * R, .row_bytes = rb, .data = q};
        CHECK_EQ_INT(be_g->ops->weight_prepare(be_g, &stack, &err), CR_OK);
        CHECK_EQ_INT(be_g->ops->reserve(be_g, N, C, 8, 4, &err), CR_OK);
        /* each expert, then an unaligned slice (rows 20..23) */
        int64_t r0s[E + 1] = {0, R, 2 * R, R + 4}, nrs[E + 1] = {R, R, R, 4};
        for (int k = 0; k < E + 1; k++) {
            be_weight_t one = {.name = "one", .type = types[ti], .n_cols = C,
                               .n_rows = nrs[k], .row_bytes = rb,
                               .data = q + (size_t)r0s[k] * rb};
            CHECK_EQ_INT(be_g->ops->weight_prepare(be_g, &one, &err), CR_OK);
            ext->matmul_rows(be_g, &stack, r0s[k], nrs[k], x, N, y1);
            be_g->ops->matmul(be_g, &one, x, N, y2);
            CHECK_MSG(same(y1, y2, (size_t)N * (size_t)nrs[k]),
                      "%s: matmul_rows of rows %d+%d differs", tt->name, (int)r0s[k],
                      (int)nrs[k]);
            be_g->ops->weight_release(be_g, &one);
        }
        be_g->ops->weight_release(be_g, &stack);
        free(q);
    }
    free(src);
    free(x);

    /* gather and weighted scatter-add (a repeated id adds twice, in order) */
    float rows[4 * 3] = {0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32}, got[2 * 3];
    int32_t ids[2] = {3, 1};
    ext->gather_rows(be_g, got, rows, ids, 2, 3);
    CHECK(got[0] == 30 && got[2] == 32 && got[3] == 10 && got[5] == 12);
    float y[3 * 3] = {0}, xs[3 * 3] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, ws[3] = {0.5f, 2, -1};
    int32_t to[3] = {2, 0, 2};
    ext->scatter_add(be_g, y, xs, to, ws, 3, 3);
    CHECK(y[0] == 8 && y[1] == 10 && y[2] == 12);
    CHECK(y[3] == 0 && y[4] == 0 && y[5] == 0);
    CHECK(y[6] == 0.5f - 7 && y[7] == 1 - 8 && y[8] == 1.5f - 9);
}

/* matmul_experts (several experts in one call, rows picked by x_rows,
 * two stacks at once) == matmul_rows per expert over gathered rows,
 * bitwise, on packed stacks (Q8_0, Q4_K; Q8_0 down with grouped input);
 * it declines a row-major (F32) stack, leaving y untouched; and the
 * threaded scatter_add of many rows == the sequential sum in order. */
static void test_matmul_experts(void)
{
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    CHECK(ext && ext->matmul_experts);
    if (!ext || !ext->matmul_experts)
        return;
    enum { E = 4, R = 32, C = 256, T = 7, G = 9 };
    /* grouped rows: expert 3 takes tokens 0, 2, 6; expert 0 takes 1;
     * expert 2 takes 0, 1, 3, 4, 5 (uneven, one expert unused, out of order) */
    static const int32_t experts[3] = {3, 0, 2}, start[4] = {0, 3, 4, 9};
    static const int32_t x_rows[G] = {0, 2, 6, 1, 0, 1, 3, 4, 5};
    float *src = malloc(sizeof(float) * 2 * E * R * C), *x = malloc(sizeof(float) * T * C);
    float *xg = malloc(sizeof(float) * G * C);
    float *y1 = malloc(sizeof(float) * G * R), *y2 = malloc(sizeof(float) * G * R);
    float *z1 = malloc(sizeof(float) * G * R), *z2 = malloc(sizeof(float) * G * R);
    uint64_t s = 7;
    for (int i = 0; i < 2 * E * R * C; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        src[i] = (float)((double)(s >> 40) / (1 << 24) - 0.5);
    }
    for (int i = 0; i < T * C; i++)
        x[i] = cosf((float)i * 0.21f);
    for (int g = 0; g < G; g++)
        memcpy(xg + (size_t)g * C, x + (size_t)x_rows[g] * C, sizeof(float) * C);
    static const cr_type_t types[] = {CR_TYPE_Q8_0, CR_TYPE_Q4_K, CR_TYPE_F32};
    for (size_t ti = 0; ti < CR_ARRAY_LEN(types); ti++) {
        const be_type_traits_t *tt = be_type_traits(types[ti]);
        uint64_t rb = 0;
        cr_type_row_bytes(types[ti], C, &rb);
        uint8_t *q = malloc(rb * 2 * E * R);
        for (int r = 0; r < 2 * E * R; r++)
            tt->from_float(src + (size_t)r * C, q + (size_t)r * rb, C);
        cr_err_t err;
        cr_err_clear(&err);
        be_weight_t a = {.name = "a", .type = types[ti], .n_cols = C, .n_rows = E * R,
                         .row_bytes = rb, .data = q};
        be_weight_t b = a;
        b.name = "b";
        b.data = q + (size_t)E * R * rb;
        CHECK_EQ_INT(be_g->ops->weight_prepare(be_g, &a, &err), CR_OK);
        CHECK_EQ_INT(be_g->ops->weight_prepare(be_g, &b, &err), CR_OK);
        CHECK_EQ_INT(be_g->ops->reserve(be_g, G, C, 8, 4, &err), CR_OK);
        for (int i = 0; i < G * R; i++)
            y1[i] = y2[i] = -1;
        bool took = ext->matmul_experts(be_g, &a, &b, R, experts, start, 3, x, x_rows, y1, y2);
        if (types[ti] == CR_TYPE_F32) {
            CHECK_MSG(!took && y1[0] == -1 && y2[G * R - 1] == -1,
                      "F32: matmul_experts should decline a row-major stack");
        } else {
            CHECK_MSG(took, "%s: matmul_experts declined a packed stack", tt->name);
            for (int i = 0; i < 3; i++) {
                int at = start[i], ne = start[i + 1] - at;
                ext->matmul_rows(be_g, &a, (int64_t)experts[i] * R, R, xg + (size_t)at * C, ne,
                                 z1 + (size_t)at * R);
                ext->matmul_rows(be_g, &b, (int64_t)experts[i] * R, R, xg + (size_t)at * C, ne,
                                 z2 + (size_t)at * R);
            }
            CHECK_MSG(same(y1, z1, (size_t)G * R) && same(y2, z2, (size_t)G * R),
                      "%s: matmul_experts != matmul_rows per expert", tt->name);
            /* one stack, x already grouped (the down projection's call) */
            CHECK(ext->matmul_experts(be_g, &a, NULL, R, experts, start, 3, xg, NULL, y1,
                                      NULL));
            CHECK_MSG(same(y1, z1, (size_t)G * R), "%s: grouped x differs", tt->name);
            /* a later slice: start[] need not begin at 0 */
            static const int32_t tail_start[2] = {4, 9};
            CHECK(ext->matmul_experts(be_g, &a, NULL, R, experts + 2, tail_start, 1, x,
                                      x_rows + 4, y1, NULL));
            CHECK_MSG(same(y1, z1 + 4 * R, (size_t)5 * R), "%s: offset slice differs",
                      tt->name);
        }
        be_g->ops->weight_release(be_g, &a);
        be_g->ops->weight_release(be_g, &b);
        free(q);
    }
    free(src);
    free(x);
    free(xg);
    free(y1);
    free(y2);
    free(z1);
    free(z2);

    /* scatter_add over enough rows to use the threads (ids repeat) */
    enum { N = 300, D = 400, OUT = 37 };
    float *xs = malloc(sizeof(float) * N * D), *ya = calloc(OUT * D, sizeof(float));
    float *yb = calloc(OUT * D, sizeof(float)), ws[N];
    int32_t to[N];
    for (int i = 0; i < N; i++) {
        to[i] = (i * 13) % OUT;
        ws[i] = 0.5f + (float)i / N;
        for (int c = 0; c < D; c++)
            xs[(size_t)i * D + c] = sinf((float)(i * D + c));
    }
    ext->scatter_add(be_g, ya, xs, to, ws, N, D);
    for (int i = 0; i < N; i++)
        for (int c = 0; c < D; c++)
            yb[(size_t)to[i] * D + c] += ws[i] * xs[(size_t)i * D + c];
    CHECK_MSG(same(ya, yb, (size_t)OUT * D), "threaded scatter_add != sequential sum");
    free(xs);
    free(ya);
    free(yb);
}

/* synth's distinct_rows (how bench/vs_llamabench_moe.sh makes its
 * multi-GB model): an expert stack's row r holds the bytes of row r % 5,
 * the 5 drawn rows differ, and the file is as large as without it. */
static void test_synth_distinct_rows(void)
{
    rn_synth_opts_t o;
    moe_opts("qwen3moe", &o);
    o.type = CR_TYPE_Q8_0;
    o.head_dim = 32;
    o.expert_ffn = 64;
    void *plain = NULL, *bytes = NULL;
    size_t plain_len = 0, len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &plain, &plain_len, &err), CR_OK);
    o.distinct_rows = 5;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &bytes, &len, &err), CR_OK);
    CHECK(len == plain_len && len > 0);
    cr_gguf_t *g = NULL;
    if (bytes && cr_gguf_open_memory(bytes, len, &g, &err) == CR_OK) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_find(g, "blk.1.ffn_up_exps.weight");
        CHECK(t != NULL);
        if (t) {
            uint64_t rows = t->ne[1] * t->ne[2], rb = t->size_bytes / rows;
            const uint8_t *d = t->data;
            bool repeats = rows > 5, drawn_differ = true;
            for (uint64_t r = 5; r < rows; r++)
                repeats = repeats && !memcmp(d + r * rb, d + (r % 5) * rb, rb);
            for (uint64_t a = 0; a < 5; a++)
                for (uint64_t b = a + 1; b < 5; b++)
                    drawn_differ = drawn_differ && memcmp(d + a * rb, d + b * rb, rb);
            CHECK_MSG(repeats, "distinct_rows 5: rows do not repeat the first 5");
            CHECK_MSG(drawn_differ, "distinct_rows 5: the drawn rows are not distinct");
        }
        cr_gguf_close(&g);
    } else {
        CHECK_MSG(false, "distinct_rows: open: %s", err.msg);
    }
    free(plain);
    free(bytes);
}

static void test_route(void)
{
    rn_hparams_t hp = {0};
    hp.n_expert = 6;
    hp.n_expert_used = 3;
    hp.expert_gating = RN_GATING_SOFTMAX;
    hp.expert_norm = false;
    hp.expert_scale = 1.0f;
    float lg[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f}, l2[6];
    int32_t ids[3];
    float w[3];
    /* softmax, no norm: the gates themselves; a tie goes to the lower id */
    memcpy(l2, lg, sizeof lg);
    rn_moe_route(&hp, l2, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 4);
    double z = 0;
    for (int i = 0; i < 6; i++)
        z += exp(lg[i] - 2.0);
    CHECK_NEAR(w[0], 1 / z, 1e-6);
    CHECK_NEAR(w[2], exp(-1.0) / z, 1e-6);
    /* renormalized, then scaled */
    hp.expert_norm = true;
    hp.expert_scale = 2.0f;
    memcpy(l2, lg, sizeof lg);
    rn_moe_route(&hp, l2, ids, w);
    double s3 = 2 + exp(-1.0);
    CHECK_NEAR(w[0], 2 / s3, 1e-6);
    CHECK_NEAR(w[2], 2 * exp(-1.0) / s3, 1e-6);
    /* sigmoid */
    hp.expert_gating = RN_GATING_SIGMOID;
    hp.expert_norm = false;
    hp.expert_scale = 1.0f;
    memcpy(l2, lg, sizeof lg);
    rn_moe_route(&hp, l2, ids, w);
    CHECK(ids[0] == 1 && ids[1] == 3 && ids[2] == 4);
    CHECK_NEAR(w[2], 1 / (1 + exp(-1.0)), 1e-6);
    /* softmax of the chosen logits */
    hp.expert_gating = RN_GATING_SOFTMAX_WEIGHT;
    memcpy(l2, lg, sizeof lg);
    rn_moe_route(&hp, l2, ids, w);
    CHECK(ids[0] == 1 && ids[2] == 4);
    CHECK_NEAR(w[2], exp(-1.0) / s3, 1e-6);
    /* sigmoid gates near 0, renormalized: the sum is clamped (llama.cpp's
     * smallest normal F16), not divided by ~0 */
    hp.expert_gating = RN_GATING_SIGMOID;
    hp.expert_norm = true;
    float tiny[6] = {-100, -100, -100, -100, -100, -100};
    rn_moe_route(&hp, tiny, ids, w);
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2);
    CHECK(isfinite(w[0]) && w[0] < 1e-30f);
}

/* ---- broken files ----------------------------------------------------- */

typedef struct edit {
    const char *skip_tensor;
    const char *reshape_tensor; /* to ne {ne0, ne1, ne2} (zeros) */
    uint64_t ne[3];
    const char *add_split; /* an extra F32 [dim][ffn] matrix of this name */
    const char *u32_key;
    uint32_t u32_val;
    const char *drop_key;
    const char *str_key;
} edit_t;

/* The synth model of o with edit e applied, loaded on be. */
static cr_status_t load_edited(const rn_synth_opts_t *o, const edit_t *e, be_backend_t *be,
                               cr_err_t *err)
{
    void *src = NULL, *out = NULL;
    size_t len = 0, out_len = 0;
    cr_err_t e2;
    cr_err_clear(&e2);
    cr_gguf_t *g = NULL;
    if (rn_synth_write_memory(o, &src, &len, &e2) || cr_gguf_open_memory(src, len, &g, &e2)) {
        free(src);
        return CR_E_INTERNAL;
    }
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    void *zeros = calloc(1, 1 << 20);
    cr_status_t st = w && zeros ? cr_gguf_writer_copy_prefix(w, g, "", &e2) : CR_E_NOMEM;
    if (!st && e->drop_key)
        cr_gguf_writer_remove(w, e->drop_key);
    if (!st && e->u32_key) {
        cr_gguf_writer_remove(w, e->u32_key);
        st = cr_gguf_writer_add_u32(w, e->u32_key, e->u32_val, &e2);
    }
    if (!st && e->str_key) {
        cr_gguf_writer_remove(w, e->str_key);
        st = cr_gguf_writer_add_str(w, e->str_key, "yes", &e2);
    }
    for (size_t i = 0; !st && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (e->skip_tensor && !strcmp(t->name, e->skip_tensor))
            continue;
        if (e->reshape_tensor && !strcmp(t->name, e->reshape_tensor))
            st = cr_gguf_writer_add_tensor(w, t->name, e->ne[2] > 1 ? 3 : 2, e->ne,
                                           t->type, zeros, NULL, &e2);
        else
            st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type, t->data,
                                           NULL, &e2);
    }
    if (!st && e->add_split) {
        uint64_t ne[2] = {(uint64_t)o->dim, (uint64_t)o->ffn};
        st = cr_gguf_writer_add_tensor(w, e->add_split, 2, ne, CR_TYPE_F32, zeros, NULL,
                                       &e2);
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
    rn_model_t *m = NULL;
    st = cr_gguf_open_memory(out, out_len, &g, err);
    if (!st)
        st = rn_model_load_gguf(&g, be, &m, err);
    rn_model_destroy(&m);
    free(out);
    return st;
}

static void test_corrupt(void)
{
    static const struct {
        const char *name, *arch;
        int shared; /* shared_ffn of the file */
        edit_t e;
        cr_status_t want;
        const char *msg1, *msg2;
    } cases[] = {
        {"qwen3moe unchanged", "qwen3moe", 0, {0}, CR_OK, NULL, NULL},
        {"llama experts unchanged", "llama", 0, {0}, CR_OK, NULL, NULL},
        {"used above count", "qwen3moe", 0,
         {.u32_key = "qwen3moe.expert_used_count", .u32_val = 9}, CR_E_CORRUPT,
         "qwen3moe.expert_used_count", "exceeds qwen3moe.expert_count 8"},
        {"used zero", "qwen3moe", 0, {.u32_key = "qwen3moe.expert_used_count"},
         CR_E_CORRUPT, "qwen3moe.expert_used_count", "out of range"},
        {"used missing", "llama", 0, {.drop_key = "llama.expert_used_count"},
         CR_E_CORRUPT, "missing key 'llama.expert_used_count'", NULL},
        {"qwen3moe without experts", "qwen3moe", 0, {.u32_key = "qwen3moe.expert_count"},
         CR_E_CORRUPT, "qwen3moe.expert_count", "needs experts"},
        {"qwen3moe count missing", "qwen3moe", 0, {.drop_key = "qwen3moe.expert_count"},
         CR_E_CORRUPT, "missing key 'qwen3moe.expert_count'", NULL},
        {"count too large", "qwen3moe", 0,
         {.u32_key = "qwen3moe.expert_count", .u32_val = 5000}, CR_E_CORRUPT,
         "qwen3moe.expert_count", "out of range"},
        {"experts declared, no tensors", "llama", 0,
         {.skip_tensor = "blk.0.ffn_gate_exps.weight"}, CR_E_CORRUPT, "missing tensor",
         "blk.0.ffn_gate_exps.weight"},
        {"missing router", "qwen3moe", 0, {.skip_tensor = "blk.2.ffn_gate_inp.weight"},
         CR_E_CORRUPT, "missing tensor", "blk.2.ffn_gate_inp.weight"},
        {"missing down stack", "qwen3moe", 0,
         {.skip_tensor = "blk.1.ffn_down_exps.weight"}, CR_E_CORRUPT, "missing tensor",
         "blk.1.ffn_down_exps.weight"},
        {"stack of 7", "qwen3moe", 0,
         {.reshape_tensor = "blk.0.ffn_up_exps.weight", .ne = {64, 32, 7}}, CR_E_CORRUPT,
         "blk.0.ffn_up_exps.weight", "expected [64, 32, 8]"},
        {"stack flat", "qwen3moe", 0,
         {.reshape_tensor = "blk.0.ffn_down_exps.weight", .ne = {32, 512, 1}},
         CR_E_CORRUPT, "blk.0.ffn_down_exps.weight", "expected [32, 64, 8]"},
        {"router shape", "qwen3moe", 0,
         {.reshape_tensor = "blk.0.ffn_gate_inp.weight", .ne = {64, 7, 1}}, CR_E_CORRUPT,
         "blk.0.ffn_gate_inp.weight", "expected [64, 8]"},
        {"expert ffn key", "qwen3moe", 0,
         {.u32_key = "qwen3moe.expert_feed_forward_length", .u32_val = 48}, CR_E_CORRUPT,
         "blk.0.ffn_gate_exps.weight", "expected [64, 48, 8]"},
        {"per-expert split tensors", "llama", 0,
         {.skip_tensor = "blk.0.ffn_gate_exps.weight",
          .add_split = "blk.0.ffn_gate.0.weight"}, CR_E_UNSUPPORTED,
         "blk.0.ffn_gate.0.weight", "per-expert tensors"},
        {"gating 4", "qwen3moe", 0,
         {.u32_key = "qwen3moe.expert_gating_func", .u32_val = 4}, CR_E_UNSUPPORTED,
         "qwen3moe.expert_gating_func", NULL},
        {"norm not a bool", "qwen3moe", 0, {.str_key = "qwen3moe.expert_weights_norm"},
         CR_E_CORRUPT, "qwen3moe.expert_weights_norm", NULL},
        {"scale not a number", "qwen3moe", 0, {.str_key = "qwen3moe.expert_weights_scale"},
         CR_E_CORRUPT, "qwen3moe.expert_weights_scale", NULL},
        {"half a shared expert", "qwen3moe", 32,
         {.skip_tensor = "blk.1.ffn_down_shexp.weight"}, CR_E_CORRUPT,
         "blk.1.ffn_down_shexp.weight", "shared-expert"},
        {"shared expert shape", "qwen3moe", 32,
         {.reshape_tensor = "blk.0.ffn_up_shexp.weight", .ne = {64, 48, 1}},
         CR_E_CORRUPT, "blk.0.ffn_up_shexp.weight", "expected [64, 32]"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        rn_synth_opts_t o;
        moe_opts(cases[i].arch, &o);
        o.shared_ffn = cases[i].shared;
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = load_edited(&o, &cases[i].e, be_g, &err);
        CHECK_MSG(st == cases[i].want, "%s: status %d (%s), want %d", cases[i].name,
                  (int)st, err.msg, (int)cases[i].want);
        if (cases[i].msg1)
            CHECK_MSG(strstr(err.msg, cases[i].msg1), "%s: message '%s' lacks '%s'",
                      cases[i].name, err.msg, cases[i].msg1);
        if (cases[i].msg2)
            CHECK_MSG(strstr(err.msg, cases[i].msg2), "%s: message '%s' lacks '%s'",
                      cases[i].name, err.msg, cases[i].msg2);
    }

    /* synth refuses what it cannot write */
    rn_synth_opts_t o;
    moe_opts("qwen3moe", &o);
    o.n_experts_used = 9;
    void *b = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &len, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "used 9"), "%s", err.msg);
    moe_opts("qwen3moe", &o);
    o.n_experts = 0;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &len, &err), CR_E_INVALID);
    moe_opts("qwen2", &o);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &len, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "qwen2"), "%s", err.msg);
    free(b);
}

/* A backend without the MoE ops (as CUDA is today) refuses MoE models at
 * load with a message naming the missing ops; dense llama still loads. */
static const be_ops_ext_t *no_moe_ext(const be_backend_t *be)
{
    static be_ops_ext_t ext;
    ext = *be_cpu_ext_ops(be);
    ext.matmul_rows = NULL;
    return &ext;
}

static void test_backend_without_moe(void)
{
    static be_ops_t ops;
    ops = *be_g->ops;
    ops.name = "no-moe";
    ops.ext_ops = no_moe_ext;
    /* the CPU backend's handle with these ops: its state stays valid */
    const be_ops_t *saved = be_g->ops;
    be_g->ops = &ops;
    edit_t none = {0};
    static const char *const archs[] = {"qwen3moe", "llama"};
    for (size_t i = 0; i < CR_ARRAY_LEN(archs); i++) {
        rn_synth_opts_t o;
        moe_opts(archs[i], &o);
        cr_err_t err;
        cr_err_clear(&err);
        CHECK_EQ_INT(load_edited(&o, &none, be_g, &err), CR_E_UNSUPPORTED);
        CHECK_MSG(strstr(err.msg, "mixture-of-experts ops") && strstr(err.msg, "no-moe"),
                  "%s: %s", archs[i], err.msg);
        o.n_experts = 0; /* dense llama loads on it */
        if (!strcmp(archs[i], "llama"))
            CHECK_EQ_INT(load_edited(&o, &none, be_g, &err), CR_OK);
    }
    be_g->ops = saved;
}

/* hparams read from the keys, with llama.cpp's defaults when absent. */
static void test_hparams(void)
{
    rn_synth_opts_t o;
    moe_opts("qwen3moe", &o);
    o.shared_ffn = 32;
    o.expert_gating = 2;
    o.expert_norm = 0;
    o.expert_scale = 2.5f;
    void *bytes = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &bytes, &len, &err), CR_OK);
    cr_gguf_t *g = NULL;
    rn_model_t *m = NULL;
    if (bytes && !cr_gguf_open_memory(bytes, len, &g, &err))
        rn_model_load_gguf(&g, be_g, &m, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (m) {
        const rn_hparams_t *hp = rn_model_hparams(m);
        CHECK_EQ_INT(hp->arch_id, RN_ARCH_QWEN3MOE);
        CHECK(hp->rope_neox);
        CHECK_EQ_INT(hp->n_expert, 8);
        CHECK_EQ_INT(hp->n_expert_used, 2);
        CHECK_EQ_INT(hp->ffn_expert, 32);
        CHECK_EQ_INT(hp->ffn_shared, 32);
        CHECK_EQ_INT(hp->expert_gating, RN_GATING_SIGMOID);
        CHECK(!hp->expert_norm);
        CHECK_NEAR(hp->expert_scale, 2.5, 0);
        const rn_layer_t *L = &rn_model_weights(m)->layers[1];
        CHECK_EQ_INT(L->exp_gate.n_rows, 8 * 32);
        CHECK_EQ_INT(L->exp_down.n_rows, 8 * 64);
        CHECK_EQ_INT(L->exp_down.n_cols, 32);
        CHECK(L->sh_gate.data && !L->sh_router.data && !L->w_gate.data);
        /* every expert is counted in the model's bytes */
        uint64_t sum = 0;
        for (size_t i = 0; i < cr_gguf_tensor_count(rn_model_gguf(m)); i++)
            sum += cr_gguf_tensor_at(rn_model_gguf(m), i)->size_bytes;
        CHECK_EQ_INT(rn_model_weight_bytes(m), sum);
    }
    rn_model_destroy(&m);
    free(bytes);
    /* defaults: softmax, renormalized, scale 1; qwen3moe's expert length
     * defaults to feed_forward_length / expert_used_count (96 / 2 = 48) */
    moe_opts("qwen3moe", &o);
    o.expert_ffn = 48;
    edit_t drop = {.drop_key = "qwen3moe.expert_feed_forward_length"};
    CHECK_EQ_INT(load_edited(&o, &drop, be_g, &err), CR_OK);
    moe_opts("llama", &o);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &bytes, &len, &err), CR_OK);
    if (bytes && !cr_gguf_open_memory(bytes, len, &g, &err))
        rn_model_load_gguf(&g, be_g, &m, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    if (m) {
        const rn_hparams_t *hp = rn_model_hparams(m);
        CHECK_EQ_INT(hp->expert_gating, RN_GATING_SOFTMAX);
        CHECK(hp->expert_norm && hp->expert_scale == 1.0f && !hp->rope_neox);
        CHECK_EQ_INT(hp->ffn_expert, 64);
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
    test_route();
    test_matmul_rows();
    test_matmul_experts();
    test_synth_distinct_rows();
    test_hparams();
    test_variants();
    test_quantized();
    test_corrupt();
    test_backend_without_moe();
    be_destroy(&be_g);
    return check_finish("test_moe_forward");
}
