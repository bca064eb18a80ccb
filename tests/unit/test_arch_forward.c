/* test_arch_forward.c: the non-llama architectures (qwen2, qwen3, gemma2,
 * gemma3, phi3, granite, olmo2, mistral3, exaone, smollm3, command-r,
 * cohere2, qwen2vl) against an independent reference.
 *
 * For each architecture a small random F32 model is written by synth.c
 * (the code behind corral-gguf-synth --arch), loaded, and run. Checks:
 * logits finite, deterministic, identical for one batch, single steps and
 * split batches; and, the real check, the logits at every position agree
 * with ref_forward below, a plain double-precision implementation of each
 * architecture written from its definition (llama.cpp's graph and the HF
 * model), reading the same weights and metadata straight from the GGUF and
 * sharing no code with forward.c, model.c or the backend.
 *
 * Why cosine >= 0.9999: the engine rounds K/V, queries and attention
 * probabilities to F16 (relative error ~5e-4 each) exactly as llama.cpp
 * does, so its logits differ from the double reference by ~1e-3 relative;
 * a cosine of 0.9999 allows a relative L2 error of ~1.4%, far above that
 * noise, and the relative L2 error itself must stay under 1.5% (a cosine
 * does not see a scale, such as granite's logit_scale). A structural
 * mistake (wrong rope pairing, missing bias or norm, soft-cap or window not
 * applied, gate/up halves swapped, wrong scale) is far below it: each such
 * mistake is injected into the reference ("mutants") and must drop the
 * cosine under 0.999 (or, for a pure scale, raise the relative error over
 * 5%), which shows the check can see it. Broken files of each architecture
 * are refused with errors naming the tensor or key. */
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_TOK 12

static be_backend_t *be_g;
static const int32_t toks_g[N_TOK] = {1, 45, 300, 7, 99, 410, 12, 12, 256, 3, 77, 150};

/* ---- the reference ---------------------------------------------------- */

/* Deliberate mistakes, to show the comparison notices each one. */
typedef enum mutant {
    MUT_NONE,
    MUT_ROPE_ADJACENT, /* llama's adjacent pairs instead of NEOX halves */
    MUT_NO_BIAS,       /* qwen2 biases ignored */
    MUT_NO_QK_NORM,    /* qwen3/gemma3 q/k norms ignored */
    MUT_NO_SOFTCAP,    /* gemma2 attention soft-cap ignored */
    MUT_NO_WINDOW,     /* gemma sliding window ignored */
    MUT_NO_POST_NORM,  /* gemma post-norms ignored */
    MUT_SILU,          /* silu instead of gelu (gemma) */
    MUT_NO_EMBD_SCALE, /* gemma's sqrt(dim) ignored */
    MUT_SWAP_HALVES,   /* phi3 gate/up halves swapped */
    MUT_SWA_BASE,      /* gemma3 sliding layers with the global rope base */
    MUT_NO_FINAL_CAP,  /* gemma2 final logit soft-cap ignored */
    MUT_NO_FACTORS,    /* rope frequency factors ignored */
    MUT_NO_MSCALE,     /* LongRoPE attention factor ignored */
    MUT_WRONG_FACTORS, /* LongRoPE long/short factors swapped */
    MUT_NO_LINEAR,     /* linear rope scaling ignored */
    MUT_ROPE_NEOX,     /* NEOX halves instead of normal-mode adjacent pairs
                          (granite, mistral3) */
    MUT_NO_RESIDUAL_SCALE, /* granite residual multiplier ignored */
    MUT_NO_LOGIT_SCALE,    /* granite logit scale ignored */
    MUT_SQRT_ATTN_SCALE,   /* granite attention.scale ignored (1/sqrt(hd)) */
    MUT_PRE_NORMS,         /* olmo2 with llama's pre-norms (unit weights) */
    MUT_QK_NORM_PER_HEAD,  /* olmo2 q/k norms per head, not whole vectors */
    MUT_ROPE_EVERY_LAYER,  /* smollm3's rope-free layers roped */
    MUT_NO_YARN_RAMP,      /* YaRN without extrapolated pairs (all
                              interpolated, as linear scaling) */
    MUT_YARN_MSCALE,       /* YaRN's magnitude correction left out */
    MUT_NO_TEMP,           /* mistral3 attention temperature ignored */
    MUT_YARN_SWA,          /* olmo3's sliding layers roped with YaRN too */
    MUT_RMS_NORM,          /* command-r's LayerNorms taken as RMSNorms */
    MUT_SERIAL_FFN,        /* command-r's ffn fed after the attention's
                              residual add (llama's order) */
    MUT_MROPE_ONE_PLANE,   /* qwen2vl: every pair at the t position */
    MUT_MROPE_CACHE_POS,   /* qwen2vl: text after an image at its cache
                              index, not one past the image's positions */
} mutant_t;

static const char *const mutant_names[] = {
    "none", "rope-adjacent", "no-bias", "no-qk-norm", "no-softcap", "no-window",
    "no-post-norm", "silu", "no-embd-scale", "swap-halves", "swa-base",
    "no-final-cap", "no-factors", "no-mscale", "wrong-factors", "no-linear",
    "rope-neox", "no-resid-scale", "no-logit-scale", "sqrt-attn-scale", "pre-norms",
    "qk-norm-per-head", "rope-every-layer", "no-yarn-ramp", "yarn-mscale",
    "no-temp", "yarn-swa", "rms-norm", "serial-ffn", "mrope-one-plane",
    "mrope-cache-pos",
};

typedef struct ref {
    const cr_gguf_t *g;
    char arch[16];
    int D, L, H, Hkv, hd, F, V, W, pattern;
    double eps, base, base_swa, attn_cap, final_cap, mscale;
    double pos_scale; /* linear rope scaling of full-attention layers */
    bool qwen2, qwen3, gemma1, gemma2, gemma3, phi3;
    bool gemma;      /* any gemma: sqrt(D) embeddings, GELU */
    bool post_norms; /* gemma2/3 */
    const float *ff; /* rope frequency factors [hd/2] or NULL */
    mutant_t mut;
    /* the dense families of issue 13 */
    bool granite, olmo2, smollm3, rope_normal; /* rope_normal: adjacent pairs */
    double embd_scale, residual_scale, logit_mult, attn_scale;
    bool cohere, cohere2;         /* command-r, cohere2 */
    bool exaone4, post_only;      /* post_only: olmo2, exaone4 (no pre-norms) */
    double norm_eps;              /* their LayerNorm epsilon */
    bool yarn;                    /* mistral3 (Ministral 3) */
    double yarn_fs, yarn_mscale, corr_lo, corr_hi;
    double temp;                  /* attention temperature, 0 none */
    int temp_len;
    bool mrope;                   /* qwen2vl */
    int sect[4];                  /* its rope.dimension_sections */
    const int32_t *mpos;          /* [n][3] (t, h, w) positions, or NULL:
                                     (t, t, t) */
} ref_t;

static const float *tensor(const ref_t *r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static float ones_g[256]; /* unit norm weights (olmo2's pre-norm mutant) */

static const float *tensor(const ref_t *r, const char *fmt, ...)
{
    char name[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(r->g, name);
    if (!t || t->type != CR_TYPE_F32) {
        fprintf(stderr, "reference: no F32 tensor %s\n", name);
        return NULL;
    }
    return t->data;
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

/* YaRN as llama.cpp sets it up (llama_context's yarn_attn_factor, ggml's
 * correction dims and magnitude), and mistral3's attention temperature. */
static void ref_init_yarn(ref_t *r)
{
    char key[96], type[16] = "";
    snprintf(key, sizeof key, "%s.rope.scaling.type", r->arch);
    cr_gguf_get_strz(r->g, key, type, sizeof type);
    int orig = u32_key(r, "rope.scaling.original_context_length",
                       u32_key(r, "context_length", 0));
    if (!strcmp(r->arch, "mistral3") && r->mut != MUT_NO_TEMP) {
        r->temp = f32_key(r, "attention.temperature_scale", 0);
        r->temp_len = orig;
    }
    r->yarn = !strcmp(type, "yarn");
    if (!r->yarn)
        return;
    /* only mistral3 takes betas and mscale_all_dim from the file */
    bool m3 = !strcmp(r->arch, "mistral3");
    double f = f32_key(r, "rope.scaling.factor", 1);
    double log_mul = m3 ? f32_key(r, "rope.scaling.yarn_log_multiplier", 0) : 0;
    double bf = m3 ? f32_key(r, "rope.scaling.yarn_beta_fast", 32) : 32;
    double bs = m3 ? f32_key(r, "rope.scaling.yarn_beta_slow", 1) : 1;
#define MSC(m) (f <= 1 ? 1.0 : 0.1 * (m) * log(f) + 1.0)
    double attn = log_mul != 0 ? MSC(1.0) / MSC(log_mul) : MSC(1.0);
#undef MSC
    attn /= 1.0 + 0.1 * log(f);
    r->yarn_fs = 1.0 / f;
    r->yarn_mscale = attn * (1.0 + 0.1 * log(f)); /* the kernel's own factor */
    if (r->mut == MUT_YARN_MSCALE)
        r->yarn_mscale = attn;
    double lo = floor(r->hd * log(orig / (bf * 2 * M_PI)) / (2 * log(r->base)));
    double hi = ceil(r->hd * log(orig / (bs * 2 * M_PI)) / (2 * log(r->base)));
    r->corr_lo = fmax(0, lo);
    r->corr_hi = fmin(r->hd - 1, hi);
}

/* granite's multipliers (llama.cpp: embeddings times embedding_scale,
 * sub-layer outputs times residual_scale, q.k times attention.scale,
 * logits over logit_scale), olmo2's post-norms and sliding window
 * (olmo3: 3 of 4 layers), and which of them rope in normal mode. */
static void ref_init_family(ref_t *r)
{
    r->granite = !strcmp(r->arch, "granite");
    r->olmo2 = !strcmp(r->arch, "olmo2");
    r->exaone4 = !strcmp(r->arch, "exaone4");
    r->post_only = r->olmo2 || r->exaone4;
    r->smollm3 = !strcmp(r->arch, "smollm3");
    r->rope_normal = r->granite || r->smollm3 || !strcmp(r->arch, "mistral3") ||
                     !strcmp(r->arch, "llama");
    r->embd_scale = r->granite ? f32_key(r, "embedding_scale", 1) : 1;
    r->residual_scale = r->granite && r->mut != MUT_NO_RESIDUAL_SCALE
                            ? f32_key(r, "residual_scale", 1) : 1;
    r->cohere2 = !strcmp(r->arch, "cohere2");
    r->cohere = r->cohere2 || !strcmp(r->arch, "command-r");
    r->rope_normal = r->rope_normal || r->cohere;
    r->logit_mult = 1; /* granite divides by logit_scale, command-r multiplies */
    if (r->granite && r->mut != MUT_NO_LOGIT_SCALE)
        r->logit_mult = 1 / f32_key(r, "logit_scale", 1);
    if (r->cohere && r->mut != MUT_NO_LOGIT_SCALE)
        r->logit_mult = f32_key(r, "logit_scale", 1);
    r->norm_eps = f32_key(r, "attention.layer_norm_epsilon", 1e-5);
    if (r->cohere2) { /* 3 of 4 layers slide and rope; the 4th neither */
        r->W = u32_key(r, "attention.sliding_window", 0);
        r->pattern = u32_key(r, "attention.sliding_window_pattern", 4);
    }
    r->attn_scale = 1.0 / sqrt((double)r->hd);
    if (r->granite && r->mut != MUT_SQRT_ATTN_SCALE)
        r->attn_scale = f32_key(r, "attention.scale", r->attn_scale);
    ref_init_yarn(r);
    if (r->exaone4) { /* only the 64-layer one slides (and ropes there only) */
        r->post_norms = true;
        r->W = r->L == 64 ? u32_key(r, "attention.sliding_window", 4096) : 0;
        r->pattern = u32_key(r, "attention.sliding_window_pattern", 4);
    }
    if (r->olmo2) {
        r->post_norms = true;
        r->W = u32_key(r, "attention.sliding_window", 0);
        r->pattern = u32_key(r, "attention.sliding_window_pattern", 4);
        r->base_swa = r->base; /* llama.cpp's olmo2 graph: the global base */
    }
}

/* n_ctx: the context the engine runs with (picks LongRoPE factors). */
static bool ref_init(ref_t *r, const cr_gguf_t *g, mutant_t mut, int n_ctx)
{
    memset(r, 0, sizeof *r);
    r->g = g;
    r->mut = mut;
    snprintf(r->arch, sizeof r->arch, "%s", cr_gguf_arch(g));
    r->mrope = !strcmp(r->arch, "qwen2vl");
    r->qwen2 = !strcmp(r->arch, "qwen2") || r->mrope;
    if (r->mrope) {
        const cr_gguf_array_t *a = NULL;
        char key[96];
        snprintf(key, sizeof key, "%s.rope.dimension_sections", r->arch);
        if (cr_gguf_get_arr(g, key, &a))
            for (uint64_t i = 0; i < 4 && i < a->n; i++) {
                int64_t v = 0;
                cr_gguf_arr_get_i64(a, i, &v);
                r->sect[i] = (int)v;
            }
    }
    r->qwen3 = !strcmp(r->arch, "qwen3");
    r->gemma2 = !strcmp(r->arch, "gemma2");
    r->gemma3 = !strcmp(r->arch, "gemma3");
    r->phi3 = !strcmp(r->arch, "phi3");
    r->gemma1 = !strcmp(r->arch, "gemma");
    r->gemma = r->gemma1 || r->gemma2 || r->gemma3;
    r->post_norms = r->gemma2 || r->gemma3;
    r->D = u32_key(r, "embedding_length", 0);
    r->L = u32_key(r, "block_count", 0);
    r->H = u32_key(r, "attention.head_count", 0);
    r->Hkv = u32_key(r, "attention.head_count_kv", r->H);
    r->hd = u32_key(r, "attention.key_length", r->H ? r->D / r->H : 0);
    r->F = u32_key(r, "feed_forward_length", 0);
    r->eps = f32_key(r, "attention.layer_norm_rms_epsilon", 1e-5);
    r->base = f32_key(r, "rope.freq_base", 10000);
    r->base_swa = r->gemma3 ? 10000 : r->base;
    r->W = r->post_norms ? u32_key(r, "attention.sliding_window", r->gemma2 ? 4096 : 0) : 0;
    r->pattern = u32_key(r, "attention.sliding_window_pattern", r->gemma2 ? 2 : 6);
    r->attn_cap = r->gemma2 ? f32_key(r, "attn_logit_softcapping", 50) : 0;
    r->final_cap = r->gemma2 ? f32_key(r, "final_logit_softcapping", 30) : 0;
    const cr_gguf_tensor_t *emb = cr_gguf_tensor_find(g, "token_embd.weight");
    r->V = emb ? (int)emb->ne[1] : 0;
    /* rope factors: rope_freqs, else LongRoPE long past the original
     * context, short within it; the attention factor scales rotations */
    int orig = u32_key(r, "rope.scaling.original_context_length",
                       u32_key(r, "context_length", 0));
    bool use_long = n_ctx > orig;
    if (mut == MUT_WRONG_FACTORS)
        use_long = !use_long;
    if (cr_gguf_tensor_find(g, "rope_freqs.weight"))
        r->ff = tensor(r, "rope_freqs.weight");
    else if (cr_gguf_tensor_find(g, "rope_factors_long.weight"))
        r->ff = tensor(r, use_long ? "rope_factors_long.weight"
                                   : "rope_factors_short.weight");
    if (mut == MUT_NO_FACTORS)
        r->ff = NULL;
    char tkey[96], type[16] = "";
    snprintf(tkey, sizeof tkey, "%s.rope.scaling.type", r->arch);
    cr_gguf_get_strz(g, tkey, type, sizeof type);
    r->pos_scale = !strcmp(type, "linear") && mut != MUT_NO_LINEAR
                       ? 1.0 / f32_key(r, "rope.scaling.factor", 1.0) : 1.0;
    r->mscale = mut == MUT_NO_MSCALE ? 1.0 : f32_key(r, "rope.scaling.attn_factor", 1.0);
    ref_init_family(r);
    return r->D && r->L && r->H && r->hd && r->F && r->V;
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

/* Rotates one head of hd values at position pos (already scaled); full:
 * a full-attention layer (YaRN applies; sliding layers rope plainly). */
static void rope_head(const ref_t *r, double *v, double pos, double base, bool full)
{
    int half = r->hd / 2;
    for (int i = 0; i < half; i++) {
        double ang = pos * pow(base, -2.0 * i / r->hd);
        if (r->ff)
            ang /= r->ff[i];
        double ms = r->mscale;
        if (r->yarn && (full || r->mut == MUT_YARN_SWA)) { /* interpolated, and
                                       extrapolated for the fast pairs */
            double ramp = (i - r->corr_lo) / fmax(0.001, r->corr_hi - r->corr_lo);
            double mix = r->mut == MUT_NO_YARN_RAMP ? 0 : 1 - fmin(1, fmax(0, ramp));
            ang = ang * r->yarn_fs * (1 - mix) + ang * mix;
            ms = r->yarn_mscale;
        }
        double c = cos(ang) * ms, s = sin(ang) * ms;
        int a = i + 0, b = i + half; /* NEOX: first half with second half */
        bool adjacent = r->rope_normal ? r->mut != MUT_ROPE_NEOX
                                       : r->mut == MUT_ROPE_ADJACENT;
        if (adjacent) {
            a = 2 * i;
            b = 2 * i + 1;
        }
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

/* M-RoPE (qwen2vl, ggml_rope_multi's definition): NEOX pairs, pair i at
 * the position of the plane whose section holds i % (sum of sections):
 * t, h, w, then e (always 0 for text and images). pos3: (t, h, w). */
static void mrope_head(const ref_t *r, double *v, const int32_t pos3[3])
{
    int half = r->hd / 2;
    int sum = r->sect[0] + r->sect[1] + r->sect[2] + r->sect[3];
    for (int i = 0; i < half; i++) {
        int s = i % sum, plane = 3;
        for (int p = 0, end = 0; p < 4; p++) {
            end += r->sect[p];
            if (s < end) {
                plane = p;
                break;
            }
        }
        if (r->mut == MUT_MROPE_ONE_PLANE)
            plane = 0;
        double ang = (plane < 3 ? pos3[plane] : 0) * pow(r->base, -2.0 * i / r->hd);
        double c = cos(ang), sn = sin(ang);
        int a = i, b = i + half;
        if (r->mut == MUT_ROPE_ADJACENT)
            a = 2 * i, b = 2 * i + 1;
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * sn;
        v[b] = x0 * sn + x1 * c;
    }
}

/* LayerNorm without bias (command-r's norms). */
static void layernorm(double *y, const double *x, const float *w, int n, double eps)
{
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++)
        mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++)
        var += (x[i] - mean) * (x[i] - mean);
    double s = 1.0 / sqrt(var / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = (x[i] - mean) * s * (double)w[i];
}

/* The pre-attention (and final) norm: command-r's LayerNorm or RMSNorm. */
static void pre_norm(const ref_t *r, double *y, const double *x, const float *w, int n)
{
    if (r->cohere && r->mut != MUT_RMS_NORM)
        layernorm(y, x, w, n, r->norm_eps);
    else
        rmsnorm(y, x, w, n, r->cohere ? r->norm_eps : r->eps);
}

static double gelu_tanh(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double silu(double x)
{
    return x / (1 + exp(-x));
}

/* Logits of every position: out [n][V]. Returns false if a tensor is
 * missing. */
static bool ref_forward(const ref_t *r, const int32_t *tok, int n, double *out)
{
    int D = r->D, H = r->H, Hkv = r->Hkv, hd = r->hd, F = r->F, V = r->V;
    int Q = H * hd, KV = Hkv * hd;
    size_t nD = (size_t)n * D;
    double *x = calloc(nD, sizeof *x), *xb = calloc(D, sizeof *xb);
    double *q = calloc((size_t)n * Q, sizeof *q), *k = calloc((size_t)n * KV, sizeof *k);
    double *v = calloc((size_t)n * KV, sizeof *v), *att = calloc(Q, sizeof *att);
    double *o = calloc(D, sizeof *o), *g = calloc(2 * (size_t)F, sizeof *g);
    double *u = calloc(F, sizeof *u), *sc = calloc(n, sizeof *sc);
    double *qkv = calloc((size_t)Q + 2 * KV, sizeof *qkv);
    double *xn = calloc(nD, sizeof *xn); /* each position's normed input */
    bool ok = x && xb && q && k && v && att && o && g && u && sc && qkv && xn;
    const float *emb = ok ? tensor(r, "token_embd.weight") : NULL;
    ok = ok && emb;

    /* embeddings (gemma: times sqrt(D)) */
    double es = r->gemma ? sqrt((double)D) : r->embd_scale; /* granite's */
    if (r->mut == MUT_NO_EMBD_SCALE)
        es = 1.0;
    for (int t = 0; ok && t < n; t++)
        for (int i = 0; i < D; i++)
            x[(size_t)t * D + i] = emb[(size_t)tok[t] * D + i] * es;

    for (int l = 0; ok && l < r->L; l++) {
        bool swa = r->W > 0 && (r->pattern == 0 || l % r->pattern < r->pattern - 1);
        if (r->mut == MUT_NO_WINDOW)
            swa = false;
        double base = swa && r->mut != MUT_SWA_BASE ? r->base_swa : r->base;
        double ps = swa ? 1.0 : r->pos_scale; /* gemma3: sliding layers unscaled */
        /* olmo2 has no pre-norms (its mutant: unit weights) */
        const float *an = r->post_only ? ones_g : tensor(r, "blk.%d.attn_norm.weight", l);
        const float *wo = tensor(r, "blk.%d.attn_output.weight", l);
        const float *fn = r->post_only || r->cohere ? ones_g
                                                : tensor(r, "blk.%d.ffn_norm.weight", l);
        const float *wd = tensor(r, "blk.%d.ffn_down.weight", l);
        bool pre_norms = !r->post_only || r->mut == MUT_PRE_NORMS;
        ok = an && wo && fn && wd && D <= (int)CR_ARRAY_LEN(ones_g);
        /* q, k, v for every position */
        for (int t = 0; ok && t < n; t++) {
            if (pre_norms)
                pre_norm(r, xb, x + (size_t)t * D, an, D);
            else
                memcpy(xb, x + (size_t)t * D, (size_t)D * sizeof *xb);
            memcpy(xn + (size_t)t * D, xb, (size_t)D * sizeof *xb);
            double *qt = q + (size_t)t * Q, *kt = k + (size_t)t * KV, *vt = v + (size_t)t * KV;
            if (r->phi3) {
                const float *w = tensor(r, "blk.%d.attn_qkv.weight", l);
                if (!(ok = w != NULL))
                    break;
                matvec(w, xb, Q + 2 * KV, D, qkv);
                memcpy(qt, qkv, (size_t)Q * sizeof *qt);
                memcpy(kt, qkv + Q, (size_t)KV * sizeof *kt);
                memcpy(vt, qkv + Q + KV, (size_t)KV * sizeof *vt);
            } else {
                const float *wq = tensor(r, "blk.%d.attn_q.weight", l);
                const float *wk = tensor(r, "blk.%d.attn_k.weight", l);
                const float *wv = tensor(r, "blk.%d.attn_v.weight", l);
                if (!(ok = wq && wk && wv))
                    break;
                matvec(wq, xb, Q, D, qt);
                matvec(wk, xb, KV, D, kt);
                matvec(wv, xb, KV, D, vt);
            }
            if (r->qwen2 && r->mut != MUT_NO_BIAS) {
                const float *bq = tensor(r, "blk.%d.attn_q.bias", l);
                const float *bk = tensor(r, "blk.%d.attn_k.bias", l);
                const float *bv = tensor(r, "blk.%d.attn_v.bias", l);
                if (!(ok = bq && bk && bv))
                    break;
                for (int i = 0; i < Q; i++)
                    qt[i] += bq[i];
                for (int i = 0; i < KV; i++) {
                    kt[i] += bk[i];
                    vt[i] += bv[i];
                }
            }
            if ((r->qwen3 || r->gemma3 || r->exaone4) && r->mut != MUT_NO_QK_NORM) {
                const float *qn = tensor(r, "blk.%d.attn_q_norm.weight", l);
                const float *kn = tensor(r, "blk.%d.attn_k_norm.weight", l);
                if (!(ok = qn && kn))
                    break;
                for (int h = 0; h < H; h++)
                    rmsnorm(qt + h * hd, qt + h * hd, qn, hd, r->eps);
                for (int h = 0; h < Hkv; h++)
                    rmsnorm(kt + h * hd, kt + h * hd, kn, hd, r->eps);
            }
            if (r->olmo2 && r->mut != MUT_NO_QK_NORM) {
                /* over the whole q [Q] and k [KV] (mutant: per head, each
                 * with its slice of the weights) */
                const float *qn = tensor(r, "blk.%d.attn_q_norm.weight", l);
                const float *kn = tensor(r, "blk.%d.attn_k_norm.weight", l);
                if (!(ok = qn && kn))
                    break;
                bool per_head = r->mut == MUT_QK_NORM_PER_HEAD;
                for (int h = 0; h < (per_head ? H : 1); h++)
                    rmsnorm(qt + h * hd, qt + h * hd, qn + h * hd, per_head ? hd : Q,
                            r->eps);
                for (int h = 0; h < (per_head ? Hkv : 1); h++)
                    rmsnorm(kt + h * hd, kt + h * hd, kn + h * hd, per_head ? hd : KV,
                            r->eps);
            }
            /* smollm3: layers 3, 7, ... have no rope */
            if (r->smollm3 && (l + 1) % 4 == 0 && r->mut != MUT_ROPE_EVERY_LAYER)
                continue;
            if ((r->cohere2 || (r->exaone4 && r->W > 0)) && !swa &&
                r->mut != MUT_ROPE_EVERY_LAYER)
                continue; /* cohere2's, exaone4's global layers */
            if (r->mrope) {
                int32_t p3[3] = {t, t, t};
                if (r->mpos)
                    memcpy(p3, r->mpos + 3 * (size_t)t, sizeof p3);
                for (int h = 0; h < H; h++)
                    mrope_head(r, qt + h * hd, p3);
                for (int h = 0; h < Hkv; h++)
                    mrope_head(r, kt + h * hd, p3);
                continue;
            }
            for (int h = 0; h < H; h++)
                rope_head(r, qt + h * hd, t * ps, base, !swa);
            for (int h = 0; h < Hkv; h++)
                rope_head(r, kt + h * hd, t * ps, base, !swa);
            if (r->temp != 0) /* mistral3: attention temperature */
                for (int i = 0; i < Q; i++)
                    qt[i] *= 1 + r->temp * log(1 + floor((double)t / r->temp_len));
        }
        /* attention, output projection, residual (positions in order; x of
         * earlier positions is no longer needed for k/v) */
        double scale = r->attn_scale;
        for (int t = 0; ok && t < n; t++) {
            int first = swa && t - r->W + 1 > 0 ? t - r->W + 1 : 0;
            for (int h = 0; h < H; h++) {
                int hk = h / (H / Hkv);
                double mx = -INFINITY, sum = 0;
                for (int j = first; j <= t; j++) {
                    double s = 0;
                    for (int d = 0; d < hd; d++)
                        s += q[(size_t)t * Q + h * hd + d] * k[(size_t)j * KV + hk * hd + d];
                    s *= scale;
                    if (r->attn_cap > 0 && r->mut != MUT_NO_SOFTCAP)
                        s = r->attn_cap * tanh(s / r->attn_cap);
                    sc[j] = s;
                    mx = fmax(mx, s);
                }
                for (int j = first; j <= t; j++) {
                    sc[j] = exp(sc[j] - mx);
                    sum += sc[j];
                }
                for (int d = 0; d < hd; d++) {
                    double a = 0;
                    for (int j = first; j <= t; j++)
                        a += sc[j] / sum * v[(size_t)j * KV + hk * hd + d];
                    att[h * hd + d] = a;
                }
            }
            matvec(wo, att, D, Q, o);
            if (r->post_norms && r->mut != MUT_NO_POST_NORM) {
                const float *pn = tensor(r, "blk.%d.post_attention_norm.weight", l);
                if (!(ok = pn != NULL))
                    break;
                rmsnorm(o, o, pn, D, r->eps);
            }
            for (int i = 0; i < D; i++)
                x[(size_t)t * D + i] += o[i] * r->residual_scale;
        }
        /* feed-forward, residual */
        for (int t = 0; ok && t < n; t++) {
            double *xt = x + (size_t)t * D;
            if (r->cohere && r->mut == MUT_SERIAL_FFN)
                pre_norm(r, xb, xt, an, D);
            else if (r->cohere) /* parallel: the attention's normed input */
                memcpy(xb, xn + (size_t)t * D, (size_t)D * sizeof *xb);
            else if (pre_norms)
                rmsnorm(xb, xt, fn, D, r->eps);
            else
                memcpy(xb, xt, (size_t)D * sizeof *xb);
            if (r->phi3) {
                const float *w = tensor(r, "blk.%d.ffn_up.weight", l);
                if (!(ok = w != NULL))
                    break;
                matvec(w, xb, 2 * F, D, g); /* gate rows, then up rows */
                for (int i = 0; i < F; i++) {
                    double gate = g[i], up = g[F + i];
                    if (r->mut == MUT_SWAP_HALVES) {
                        gate = g[F + i];
                        up = g[i];
                    }
                    u[i] = silu(gate) * up;
                }
            } else {
                const float *wg = tensor(r, "blk.%d.ffn_gate.weight", l);
                const float *wu = tensor(r, "blk.%d.ffn_up.weight", l);
                if (!(ok = wg && wu))
                    break;
                matvec(wg, xb, F, D, g);
                matvec(wu, xb, F, D, u);
                for (int i = 0; i < F; i++) {
                    bool gelu = r->gemma && r->mut != MUT_SILU;
                    u[i] *= gelu ? gelu_tanh(g[i]) : silu(g[i]);
                }
            }
            matvec(wd, u, D, F, o);
            if (r->post_norms && r->mut != MUT_NO_POST_NORM) {
                const float *pn = tensor(r, "blk.%d.post_ffw_norm.weight", l);
                if (!(ok = pn != NULL))
                    break;
                rmsnorm(o, o, pn, D, r->eps);
            }
            for (int i = 0; i < D; i++)
                xt[i] += o[i] * r->residual_scale;
        }
    }
    /* final norm, output (tied to token_embd when absent), soft-cap */
    const float *on = ok ? tensor(r, "output_norm.weight") : NULL;
    const float *wout = cr_gguf_tensor_find(r->g, "output.weight")
                            ? tensor(r, "output.weight") : emb;
    ok = ok && on && wout;
    for (int t = 0; ok && t < n; t++) {
        pre_norm(r, xb, x + (size_t)t * D, on, D);
        matvec(wout, xb, V, D, out + (size_t)t * V);
        if (r->final_cap > 0 && r->mut != MUT_NO_FINAL_CAP)
            for (int i = 0; i < V; i++)
                out[(size_t)t * V + i] = r->final_cap * tanh(out[(size_t)t * V + i] /
                                                             r->final_cap);
        for (int i = 0; i < V; i++) /* granite, command-r */
            out[(size_t)t * V + i] *= r->logit_mult;
    }
    free(x);
    free(xb);
    free(q);
    free(k);
    free(v);
    free(att);
    free(o);
    free(g);
    free(u);
    free(sc);
    free(qkv);
    free(xn);
    return ok;
}

/* ---- helpers ---------------------------------------------------------- */

/* ||a - b|| / ||b||: what a cosine cannot see (a scale, like granite's
 * logit_scale). */
static double rel_err(const float *a, const double *b, size_t n)
{
    double dd = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        dd += (a[i] - b[i]) * (a[i] - b[i]);
        bb += b[i] * b[i];
    }
    return bb > 0 ? sqrt(dd / bb) : 1;
}

/* The small models: dim 64, 4 heads / 2 KV heads, ffn 96; qwen3 and gemma
 * with 24-wide heads so Q = 96 != dim; windows of 4 over 12 tokens. */
static void arch_opts(const char *arch, rn_synth_opts_t *o)
{
    rn_synth_defaults(o);
    o->arch = arch;
    o->seed = 7;
    o->n_layers = 3;
    o->ffn = 96;
    o->weight_std = 0.1f;
    o->rope_base = 10000.0f;
    if (!strcmp(arch, "qwen3") || !strncmp(arch, "gemma", 5))
        o->head_dim = 24;
    if (!strcmp(arch, "gemma"))
        o->tied_output = true;
    if (!strcmp(arch, "gemma2")) {
        o->tied_output = true;
        o->sliding_window = 4;
        o->attn_softcap = 1.0f; /* small enough to bite on these scores */
        o->final_softcap = 2.0f;
    }
    if (!strcmp(arch, "gemma3")) {
        o->tied_output = true;
        o->sliding_window = 4;
        o->swa_pattern = 3;        /* layers 0, 1 slide; 2 is global */
        o->rope_base = 1000000.0f; /* global layers; sliding ones use 10000 */
    }
    if (!strcmp(arch, "cohere2")) { /* layers 0-2 slide and rope, 3 neither */
        o->n_layers = 4;
        o->sliding_window = 4;
        o->rope_base = 100.0f; /* pairs turn fast: layer 3's missing rope shows */
    }
    if (!strcmp(arch, "smollm3")) {
        o->n_layers = 4;      /* layer 3 without rope */
        o->rope_base = 100.0f; /* every pair turns over 12 tokens, and */
        o->weight_std = 0.25f; /* sharp attention: a roped layer 3 differs
                                  from a rope-free one */
    }
    if (!strcmp(arch, "mistral3")) {
        o->head_dim = 24;       /* Q != dim, as Mistral Small's 32 x 128 */
        o->vision_stub = true;  /* Ollama's files: vision tensors too */
        o->tied_output = true;
    }
}

/* ---- the tests -------------------------------------------------------- */

/* variant: NULL, "longrope" (phi3 factors; also checked at n_ctx 16, where
 * the short factors apply) or "rope_freqs". */
static void check_arch(const char *arch, const char *variant, const mutant_t *mutants,
                       int n_mut)
{
    rn_synth_opts_t o;
    arch_opts(arch, &o);
    o.longrope = variant && !strcmp(variant, "longrope");
    o.rope_freqs = variant && !strcmp(variant, "rope_freqs");
    if (variant && !strcmp(variant, "linear"))
        o.rope_linear = 8.0f;
    if (variant && !strncmp(variant, "yarn", 4)) {
        /* Ministral 3's rope, scaled down: factor 4 over an original
         * context of 4, betas that put the ramp on pairs 4..8 of 12, an
         * attention temperature that turns at positions 4 and 8;
         * "yarn-logmul" adds mscale_all_dim 1 (as Ministral 3 has) */
        o.rope_yarn = 4;
        o.yarn_orig_ctx = 4;
        o.yarn_beta_fast = 0.02f;
        o.yarn_beta_slow = 0.002f;
        o.attn_temp = 0.5f;
        o.yarn_log_mul = !strcmp(variant, "yarn-logmul") ? 1.0f : 0.0f;
    }
    if (variant && !strcmp(variant, "yarn-qwen")) {
        /* qwen3's and olmo3's: default betas (32, 1), which over an
         * original context of 4096 put the ramp on pairs 3..9 of 12 */
        o.rope_yarn = 4;
        o.yarn_orig_ctx = 4096;
        if (!strcmp(arch, "olmo2")) { /* olmo3: layers 0, 2 slide (plain rope) */
            o.sliding_window = 4;
            o.swa_pattern = 2;
            o.n_layers = 4;
        }
    }
    if (variant && !strcmp(variant, "32b")) { /* exaone4's 64 layers slide */
        o.n_layers = 64;
        o.dim = 32;
        o.ffn = 32;
        o.sliding_window = 4;
        o.rope_base = 100.0f;
    }
    if (variant && !strcmp(variant, "window")) { /* olmo3: 3 of 4 layers slide */
        o.sliding_window = 4;
        o.n_layers = 4;
    }
    char label[48];
    snprintf(label, sizeof label, "%s%s%s", arch, variant ? "+" : "",
             variant ? variant : "");
    arch = label; /* messages name the variant */
    void *bytes = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = rn_synth_write_memory(&o, &bytes, &len, &err);
    CHECK_MSG(st == CR_OK, "%s: synth: %s", arch, err.msg);
    if (st)
        return;
    cr_gguf_t *g = NULL, *gr = NULL;
    rn_model_t *m = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &gr, &err), CR_OK);
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &g, &err), CR_OK);
    st = rn_model_load_gguf(&g, be_g, &m, &err);
    CHECK_MSG(st == CR_OK, "%s: load: %s", arch, err.msg);
    if (!m || !gr)
        goto out;
    const rn_hparams_t *hp = rn_model_hparams(m);
    CHECK(!strncmp(arch, hp->arch, strlen(hp->arch)));
    size_t V = (size_t)hp->n_vocab;
    float *all = calloc(V * N_TOK, sizeof *all), *step = calloc(V * N_TOK, sizeof *step);
    double *ref = calloc(V * N_TOK, sizeof *ref);
    rn_ctx_t *a = new_ctx(m, 32, 0), *b = new_ctx(m, 32, 5), *c = new_ctx(m, 32, 0);
    if (!all || !step || !ref || !a || !b || !c)
        goto done;

    /* one batch: finite, not flat */
    CHECK_EQ_INT(rn_ctx_eval(a, toks_g, N_TOK, 0, all, &err), CR_OK);
    CHECK_MSG(all_finite(all, V * N_TOK), "%s: non-finite logits", arch);
    float spread = 0;
    for (size_t i = 1; i < V; i++)
        spread = fmaxf(spread, fabsf(all[i] - all[0]));
    CHECK_MSG(spread > 0.01f, "%s: flat logits", arch);
    /* deterministic: a second context gives the same bits */
    CHECK_EQ_INT(rn_ctx_eval(c, toks_g, N_TOK, 0, step, &err), CR_OK);
    CHECK_MSG(same(all, step, V * N_TOK), "%s: not deterministic", arch);
    /* single steps == the batch (bitwise: same kernels per token) */
    for (int t = 0; t < N_TOK; t++) {
        CHECK_EQ_INT(rn_ctx_eval(b, &toks_g[t], 1, t, NULL, &err), CR_OK);
        memcpy(step + V * t, rn_ctx_logits(b), V * sizeof(float));
    }
    CHECK_MSG(same(all, step, V * N_TOK), "%s: batch != single steps", arch);
    /* batches of 5 inside one call, then truncate and re-evaluate */
    rn_ctx_clear(b);
    CHECK_EQ_INT(rn_ctx_eval(b, toks_g, N_TOK, 0, step, &err), CR_OK);
    CHECK_MSG(same(all, step, V * N_TOK), "%s: chunked batch differs", arch);
    rn_ctx_truncate(b, 6);
    CHECK_EQ_INT(rn_ctx_eval(b, toks_g + 6, N_TOK - 6, 6, NULL, &err), CR_OK);
    CHECK_MSG(same(rn_ctx_logits(b), all + V * (N_TOK - 1), V),
              "%s: truncate + re-eval differs", arch);

    /* the reference */
    ref_t r;
    CHECK_MSG(ref_init(&r, gr, MUT_NONE, 32), "%s: reference hparams", arch);
    CHECK_MSG(ref_forward(&r, toks_g, N_TOK, ref), "%s: reference failed", arch);
    double cs = cosine(all, ref, V * N_TOK);
    double worst = 1;
    for (int t = 0; t < N_TOK; t++)
        worst = fmin(worst, cosine(all + V * t, ref + V * t, V));
    double maxd = 0;
    for (size_t i = 0; i < V * N_TOK; i++)
        maxd = fmax(maxd, fabs(all[i] - ref[i]));
    double re = rel_err(all, ref, V * N_TOK);
    printf("  %-15s cosine vs reference %.7f (worst position %.7f), max |diff| %.2e, "
           "rel err %.1e\n", arch, cs, worst, maxd, re);
    CHECK_MSG(worst >= 0.9999, "%s: cosine %.7f < 0.9999", arch, worst);
    CHECK_MSG(re < 0.015, "%s: relative error %.4f", arch, re);

    /* each mutant of the reference must be told apart */
    for (int i = 0; i < n_mut; i++) {
        ref_init(&r, gr, mutants[i], 32);
        CHECK(ref_forward(&r, toks_g, N_TOK, ref));
        double cm = cosine(all, ref, V * N_TOK), rm = rel_err(all, ref, V * N_TOK);
        printf("  %-15s mutant %-14s cosine %.5f, rel err %.3f\n", arch,
               mutant_names[mutants[i]], cm, rm);
        CHECK_MSG(cm < 0.999 || rm > 0.05, "%s: mutant %s not detected (cosine %.6f, "
                  "rel err %.4f)", arch, mutant_names[mutants[i]], cm, rm);
    }
    /* LongRoPE within the original context (16): the short factors */
    if (o.longrope) {
        rn_ctx_t *s16 = new_ctx(m, 16, 0);
        if (s16) {
            CHECK_EQ_INT(rn_ctx_eval(s16, toks_g, N_TOK, 0, all, &err), CR_OK);
            ref_init(&r, gr, MUT_NONE, 16);
            CHECK(ref_forward(&r, toks_g, N_TOK, ref));
            double c16 = cosine(all, ref, V * N_TOK);
            ref_init(&r, gr, MUT_WRONG_FACTORS, 16);
            CHECK(ref_forward(&r, toks_g, N_TOK, ref));
            double w16 = cosine(all, ref, V * N_TOK);
            printf("  %-15s n_ctx 16 (short factors) cosine %.7f, long factors %.5f\n",
                   arch, c16, w16);
            CHECK_MSG(c16 >= 0.9999, "%s: n_ctx 16 cosine %.7f", arch, c16);
            CHECK_MSG(w16 < 0.999, "%s: factors choice not detected (%.6f)", arch, w16);
        }
        rn_ctx_destroy(&s16);
    }
done:
    rn_ctx_destroy(&a);
    rn_ctx_destroy(&b);
    rn_ctx_destroy(&c);
    free(all);
    free(step);
    free(ref);
out:
    rn_model_destroy(&m);
    cr_gguf_close(&gr);
    free(bytes);
}

/* qwen2vl with an image's positions (mtmd's layout): tokens 0-2 text at
 * 0, 1, 2; tokens 3-8 a 3-wide, 2-high grid at t = 3, h = 3 + row, w = 3
 * + col; tokens 9-11 text from 3 + max(3, 2) = 6. The spans pass their
 * positions (rn_ctx_span_t.rope_pos), except the last text, which must
 * follow on from the grid by itself. The last logits of each span agree
 * with the reference fed the same positions; a reference that ropes every
 * pair at t, or that puts the trailing text at its cache index, does not. */
static void check_mrope_grid(void)
{
    static const int32_t grid[N_TOK][3] = {
        {0, 0, 0}, {1, 1, 1}, {2, 2, 2},
        {3, 3, 3}, {3, 3, 4}, {3, 3, 5}, {3, 4, 3}, {3, 4, 4}, {3, 4, 5},
        {6, 6, 6}, {7, 7, 7}, {8, 8, 8}};
    static const int32_t cache_pos[N_TOK][3] = {
        {0, 0, 0}, {1, 1, 1}, {2, 2, 2},
        {3, 3, 3}, {3, 3, 4}, {3, 3, 5}, {3, 4, 3}, {3, 4, 4}, {3, 4, 5},
        {9, 9, 9}, {10, 10, 10}, {11, 11, 11}};
    rn_synth_opts_t o;
    arch_opts("qwen2vl", &o);
    o.rope_base = 100.0f;  /* pairs turn fast enough, and attention is */
    o.weight_std = 0.25f;  /* sharp enough, for a wrong plane to show */
    void *bytes = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &bytes, &len, &err), CR_OK);
    cr_gguf_t *g = NULL, *gr = NULL;
    rn_model_t *m = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &gr, &err), CR_OK);
    CHECK_EQ_INT(cr_gguf_open_memory(bytes, len, &g, &err), CR_OK);
    CHECK_EQ_INT(rn_model_load_gguf(&g, be_g, &m, &err), CR_OK);
    size_t V = m ? (size_t)rn_model_hparams(m)->n_vocab : 0;
    double *ref = calloc(V * N_TOK + 1, sizeof *ref);
    float *got = calloc(3 * V + 1, sizeof *got), *one = calloc(V + 1, sizeof *one);
    rn_ctx_t *c = m ? new_ctx(m, 32, 0) : NULL, *d = m ? new_ctx(m, 32, 0) : NULL;
    if (!ref || !got || !one || !c || !d)
        goto out;
    /* spans 0-5 and 6-8 with positions, 9-11 without */
    const int cut[4] = {0, 6, 9, N_TOK};
    for (int s = 0; s < 3; s++) {
        rn_ctx_span_t sp = {.seq = 0, .tokens = toks_g + cut[s], .n = cut[s + 1] - cut[s],
                            .pos = cut[s], .rope_pos = s < 2 ? grid[cut[s]] : NULL};
        CHECK_EQ_INT(rn_ctx_eval_batch(c, &sp, 1, &err), CR_OK);
        memcpy(got + (size_t)s * V, rn_ctx_logits(c), V * sizeof(float));
    }
    /* the whole sequence in one span with every position given */
    rn_ctx_span_t all = {.seq = 0, .tokens = toks_g, .n = N_TOK, .pos = 0,
                         .rope_pos = grid[0]};
    CHECK_EQ_INT(rn_ctx_eval_batch(d, &all, 1, &err), CR_OK);
    memcpy(one, rn_ctx_logits(d), V * sizeof(float));
    CHECK_MSG(same(one, got + 2 * V, V), "qwen2vl grid: one span != three");
    ref_t r;
    for (int k = 0; k < 3; k++) {
        mutant_t mut = k == 1 ? MUT_MROPE_ONE_PLANE : k == 2 ? MUT_MROPE_CACHE_POS
                                                            : MUT_NONE;
        CHECK(ref_init(&r, gr, mut, 32));
        r.mpos = k == 2 ? cache_pos[0] : grid[0];
        CHECK(ref_forward(&r, toks_g, N_TOK, ref));
        double worst = 1;
        for (int s = 0; s < 3; s++)
            worst = fmin(worst, cosine(got + (size_t)s * V,
                                       ref + (size_t)(cut[s + 1] - 1) * V, V));
        printf("  %-15s %-16s worst cosine of the spans' last logits %.7f\n",
               "qwen2vl+grid", mutant_names[mut], worst);
        if (k == 0)
            CHECK_MSG(worst >= 0.9999, "qwen2vl grid: cosine %.7f < 0.9999", worst);
        else
            CHECK_MSG(worst < 0.999, "qwen2vl grid: mutant %s not detected (%.6f)",
                      mutant_names[mut], worst);
    }
out:
    rn_ctx_destroy(&c);
    rn_ctx_destroy(&d);
    free(ref);
    free(got);
    free(one);
    rn_model_destroy(&m);
    cr_gguf_close(&gr);
    free(bytes);
}

static void test_archs(void)
{
    static const mutant_t qwen2[] = {MUT_ROPE_ADJACENT, MUT_NO_BIAS};
    static const mutant_t qwen3[] = {MUT_ROPE_ADJACENT, MUT_NO_QK_NORM};
    static const mutant_t gemma2[] = {MUT_ROPE_ADJACENT, MUT_NO_SOFTCAP, MUT_NO_WINDOW,
                                      MUT_NO_POST_NORM, MUT_SILU, MUT_NO_EMBD_SCALE,
                                      MUT_NO_FINAL_CAP};
    static const mutant_t gemma3[] = {MUT_ROPE_ADJACENT, MUT_NO_QK_NORM, MUT_NO_WINDOW,
                                      MUT_NO_POST_NORM, MUT_SILU, MUT_SWA_BASE};
    static const mutant_t phi3[] = {MUT_ROPE_ADJACENT, MUT_SWAP_HALVES};
    static const mutant_t gemma1[] = {MUT_ROPE_ADJACENT, MUT_SILU, MUT_NO_EMBD_SCALE};
    static const mutant_t longrope[] = {MUT_NO_FACTORS, MUT_NO_MSCALE,
                                        MUT_WRONG_FACTORS};
    static const mutant_t freqs[] = {MUT_NO_FACTORS};
    check_arch("qwen2", NULL, qwen2, (int)CR_ARRAY_LEN(qwen2));
    check_arch("qwen3", NULL, qwen3, (int)CR_ARRAY_LEN(qwen3));
    check_arch("gemma", NULL, gemma1, (int)CR_ARRAY_LEN(gemma1));
    check_arch("gemma2", NULL, gemma2, (int)CR_ARRAY_LEN(gemma2));
    check_arch("gemma3", NULL, gemma3, (int)CR_ARRAY_LEN(gemma3));
    check_arch("phi3", NULL, phi3, (int)CR_ARRAY_LEN(phi3));
    check_arch("phi3", "longrope", longrope, (int)CR_ARRAY_LEN(longrope));
    check_arch("qwen2", "rope_freqs", freqs, (int)CR_ARRAY_LEN(freqs));
    static const mutant_t linear[] = {MUT_NO_LINEAR};
    check_arch("gemma3", "linear", linear, (int)CR_ARRAY_LEN(linear));
    check_arch("qwen3", "linear", linear, (int)CR_ARRAY_LEN(linear));
    /* llama's adjacent pairs, scaled through the YaRN op (it once ran
     * unscaled) */
    check_arch("llama", "linear", linear, (int)CR_ARRAY_LEN(linear));

    /* the dense families of issue 13 */
    static const mutant_t granite[] = {MUT_ROPE_NEOX, MUT_NO_EMBD_SCALE,
                                       MUT_NO_RESIDUAL_SCALE, MUT_NO_LOGIT_SCALE,
                                       MUT_SQRT_ATTN_SCALE};
    static const mutant_t olmo2[] = {MUT_ROPE_ADJACENT, MUT_NO_QK_NORM,
                                     MUT_QK_NORM_PER_HEAD, MUT_NO_POST_NORM,
                                     MUT_PRE_NORMS};
    static const mutant_t olmo3[] = {MUT_NO_WINDOW};
    static const mutant_t mistral3[] = {MUT_ROPE_NEOX};
    check_arch("granite", NULL, granite, (int)CR_ARRAY_LEN(granite));
    check_arch("olmo2", NULL, olmo2, (int)CR_ARRAY_LEN(olmo2));
    check_arch("olmo2", "window", olmo3, (int)CR_ARRAY_LEN(olmo3));
    check_arch("mistral3", NULL, mistral3, (int)CR_ARRAY_LEN(mistral3));
    check_arch("granite", "rope_freqs", freqs, (int)CR_ARRAY_LEN(freqs));
    static const mutant_t exaone[] = {MUT_ROPE_ADJACENT};
    check_arch("exaone", NULL, exaone, (int)CR_ARRAY_LEN(exaone));
    check_arch("exaone", "rope_freqs", freqs, (int)CR_ARRAY_LEN(freqs));
    static const mutant_t smollm3[] = {MUT_ROPE_NEOX, MUT_ROPE_EVERY_LAYER};
    check_arch("smollm3", NULL, smollm3, (int)CR_ARRAY_LEN(smollm3));
    static const mutant_t yarn[] = {MUT_ROPE_NEOX, MUT_NO_YARN_RAMP, MUT_YARN_MSCALE,
                                    MUT_NO_TEMP};
    static const mutant_t yarn_lm[] = {MUT_NO_YARN_RAMP, MUT_NO_TEMP};
    static const mutant_t command_r[] = {MUT_ROPE_NEOX, MUT_RMS_NORM, MUT_SERIAL_FFN,
                                         MUT_NO_LOGIT_SCALE};
    static const mutant_t cohere2[] = {MUT_RMS_NORM, MUT_SERIAL_FFN, MUT_NO_WINDOW,
                                       MUT_ROPE_EVERY_LAYER};
    static const mutant_t exaone4[] = {MUT_ROPE_ADJACENT, MUT_NO_QK_NORM, MUT_NO_POST_NORM,
                                       MUT_PRE_NORMS};
    static const mutant_t exaone4_32b[] = {MUT_NO_WINDOW, MUT_ROPE_EVERY_LAYER};
    check_arch("exaone4", NULL, exaone4, (int)CR_ARRAY_LEN(exaone4));
    check_arch("exaone4", "32b", exaone4_32b, (int)CR_ARRAY_LEN(exaone4_32b));
    check_arch("exaone4", "rope_freqs", freqs, (int)CR_ARRAY_LEN(freqs));
    check_arch("command-r", NULL, command_r, (int)CR_ARRAY_LEN(command_r));
    check_arch("cohere2", NULL, cohere2, (int)CR_ARRAY_LEN(cohere2));
    check_arch("mistral3", "yarn", yarn, (int)CR_ARRAY_LEN(yarn));
    check_arch("mistral3", "yarn-logmul", yarn_lm, (int)CR_ARRAY_LEN(yarn_lm));
    static const mutant_t yarn_q[] = {MUT_NO_YARN_RAMP, MUT_YARN_MSCALE};
    check_arch("qwen3", "yarn-qwen", yarn_q, (int)CR_ARRAY_LEN(yarn_q));
    check_arch("qwen2", "yarn-qwen", yarn_q, (int)CR_ARRAY_LEN(yarn_q));
    check_arch("llama", "yarn-qwen", yarn_q, (int)CR_ARRAY_LEN(yarn_q));
    static const mutant_t yarn_o[] = {MUT_NO_YARN_RAMP, MUT_YARN_MSCALE, MUT_YARN_SWA};
    check_arch("olmo2", "yarn-qwen", yarn_o, (int)CR_ARRAY_LEN(yarn_o));
    /* text alone: M-RoPE with equal planes is NEOX rope */
    check_arch("qwen2vl", NULL, qwen2, (int)CR_ARRAY_LEN(qwen2));
    check_mrope_grid();
}

/* Quantized weights load and run for every architecture (the reference
 * above needs F32; here only finiteness and batch == steps). */
static void test_quantized(void)
{
    static const char *const archs[] = {"qwen2", "qwen3", "gemma", "gemma2", "gemma3",
                                        "phi3", "granite", "olmo2", "mistral3",
                                        "exaone", "smollm3", "command-r", "cohere2",
                                        "qwen2vl"};
    for (size_t i = 0; i < CR_ARRAY_LEN(archs); i++) {
        rn_synth_opts_t o;
        arch_opts(archs[i], &o);
        o.type = CR_TYPE_Q8_0;
        if (o.head_dim)
            o.head_dim = 16; /* Q = 64: whole Q8_0 blocks for attn_output */
        void *bytes = NULL;
        size_t len = 0;
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = rn_synth_write_memory(&o, &bytes, &len, &err);
        CHECK_MSG(st == CR_OK, "%s q8_0: synth: %s", archs[i], err.msg);
        cr_gguf_t *g = NULL;
        rn_model_t *m = NULL;
        if (!st && !cr_gguf_open_memory(bytes, len, &g, &err))
            st = rn_model_load_gguf(&g, be_g, &m, &err);
        CHECK_MSG(m != NULL, "%s q8_0: load: %s", archs[i], err.msg);
        if (m) {
            size_t V = (size_t)rn_model_hparams(m)->n_vocab;
            rn_ctx_t *a = new_ctx(m, 16, 0), *b = new_ctx(m, 16, 1);
            float *all = calloc(V * N_TOK, sizeof *all);
            if (a && b && all) {
                CHECK_EQ_INT(rn_ctx_eval(a, toks_g, N_TOK, 0, all, &err), CR_OK);
                CHECK(all_finite(all, V * N_TOK));
                CHECK_EQ_INT(rn_ctx_eval(b, toks_g, N_TOK, 0, NULL, &err), CR_OK);
                CHECK_MSG(same(rn_ctx_logits(b), all + V * (N_TOK - 1), V),
                          "%s q8_0: batch of 1 differs", archs[i]);
            }
            free(all);
            rn_ctx_destroy(&a);
            rn_ctx_destroy(&b);
        }
        rn_model_destroy(&m);
        free(bytes);
    }
}

/* ---- broken models ---------------------------------------------------- */

static void *kept_bytes_g; /* bytes behind a model load_edited kept */

typedef struct edit {
    const char *skip_tensor;
    const char *reshape_tensor; /* to ne {ne0, ne1}, zero data */
    uint64_t ne0, ne1;
    const char *add_tensor;     /* an extra F32 vector of ne0 zeros */
    const char *drop_key;
    const char *str_key, *str_val;
    const char *u32_key;
    uint32_t u32_val;
    const char *f32_key, *f32_key2; /* set to f32_val, f32_val2 */
    float f32_val, f32_val2;
    const char *bools_key;          /* a bool array of n_bools */
    uint8_t bools[4];
    int n_bools;
    const char *bool_key;           /* set to bool_val */
    bool bool_val;
    const char *u32s_key;           /* a u32 array of n_u32s */
    uint32_t u32s[4];
    int n_u32s;
} edit_t;

/* Rebuilds the synth model of arch with edit e and loads it; the model is
 * kept in *keep (caller destroys) when keep is not NULL. */
static cr_status_t load_edited(const char *arch, const edit_t *e, cr_err_t *err,
                               rn_model_t **keep)
{
    rn_synth_opts_t o;
    arch_opts(arch, &o);
    void *src = NULL, *out = NULL;
    size_t len = 0, out_len = 0;
    cr_err_t e2;
    cr_err_clear(&e2);
    cr_gguf_t *g = NULL;
    if (rn_synth_write_memory(&o, &src, &len, &e2) ||
        cr_gguf_open_memory(src, len, &g, &e2)) {
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
    if (!st && e->u32_key) {
        cr_gguf_writer_remove(w, e->u32_key);
        st = cr_gguf_writer_add_u32(w, e->u32_key, e->u32_val, &e2);
    }
    if (!st && e->f32_key) {
        cr_gguf_writer_remove(w, e->f32_key);
        st = cr_gguf_writer_add_f32(w, e->f32_key, e->f32_val, &e2);
    }
    if (!st && e->f32_key2) {
        cr_gguf_writer_remove(w, e->f32_key2);
        st = cr_gguf_writer_add_f32(w, e->f32_key2, e->f32_val2, &e2);
    }
    if (!st && e->bools_key) {
        cr_gguf_writer_remove(w, e->bools_key);
        st = cr_gguf_writer_add_arr(w, e->bools_key, CR_GGUF_BOOL, e->bools,
                                    (uint64_t)e->n_bools, &e2);
    }
    if (!st && e->bool_key) {
        cr_gguf_writer_remove(w, e->bool_key);
        st = cr_gguf_writer_add_bool(w, e->bool_key, e->bool_val, &e2);
    }
    if (!st && e->u32s_key) {
        cr_gguf_writer_remove(w, e->u32s_key);
        st = cr_gguf_writer_add_arr(w, e->u32s_key, CR_GGUF_U32, e->u32s,
                                    (uint64_t)e->n_u32s, &e2);
    }
    for (size_t i = 0; !st && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (e->skip_tensor && !strcmp(t->name, e->skip_tensor))
            continue;
        if (e->reshape_tensor && !strcmp(t->name, e->reshape_tensor)) {
            uint64_t ne[2] = {e->ne0, e->ne1};
            st = cr_gguf_writer_add_tensor(w, t->name, e->ne1 > 1 ? 2 : 1, ne, t->type,
                                           zeros, NULL, &e2);
        } else {
            st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type,
                                           t->data, NULL, &e2);
        }
    }
    if (!st && e->add_tensor) {
        uint64_t ne[1] = {e->ne0};
        st = cr_gguf_writer_add_tensor(w, e->add_tensor, 1, ne, CR_TYPE_F32, zeros, NULL,
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
        st = rn_model_load_gguf(&g, be_g, &m, err);
    if (keep && m) {
        /* the model reads its own copy: keep the bytes alive with it */
        *keep = m;
        kept_bytes_g = out;
        return st;
    }
    rn_model_destroy(&m);
    free(out);
    return st;
}

static void test_corrupt(void)
{
    static const struct {
        const char *name, *arch;
        edit_t e;
        cr_status_t want;
        const char *msg1, *msg2;
    } cases[] = {
        {"qwen2 unchanged", "qwen2", {0}, CR_OK, NULL, NULL},
        {"qwen2 missing bias", "qwen2", {.skip_tensor = "blk.1.attn_k.bias"},
         CR_E_CORRUPT, "missing tensor", "blk.1.attn_k.bias"},
        {"qwen2 bias shape", "qwen2",
         {.reshape_tensor = "blk.0.attn_q.bias", .ne0 = 32, .ne1 = 1}, CR_E_CORRUPT,
         "blk.0.attn_q.bias", "expected [64]"},
        {"qwen2 rope factors length", "qwen2",
         {.add_tensor = "rope_freqs.weight", .ne0 = 5}, CR_E_CORRUPT,
         "rope_freqs.weight", "expected [8]"},
        {"qwen3 missing q norm", "qwen3", {.skip_tensor = "blk.2.attn_q_norm.weight"},
         CR_E_CORRUPT, "missing tensor", "blk.2.attn_q_norm.weight"},
        {"qwen3 k norm shape", "qwen3",
         {.reshape_tensor = "blk.0.attn_k_norm.weight", .ne0 = 64, .ne1 = 1},
         CR_E_CORRUPT, "blk.0.attn_k_norm.weight", "expected [24]"},
        {"qwen3 value length", "qwen3",
         {.u32_key = "qwen3.attention.value_length", .u32_val = 32}, CR_E_UNSUPPORTED,
         "qwen3.attention.value_length", NULL},
        {"qwen3 key length", "qwen3",
         {.u32_key = "qwen3.attention.key_length", .u32_val = 0}, CR_E_CORRUPT,
         "qwen3.attention.key_length", "out of range"},
        {"qwen3 output shape", "qwen3",
         {.reshape_tensor = "blk.0.attn_output.weight", .ne0 = 64, .ne1 = 64},
         CR_E_CORRUPT, "blk.0.attn_output.weight", "expected [96, 64]"},
        {"gemma2 missing post ffw norm", "gemma2",
         {.skip_tensor = "blk.1.post_ffw_norm.weight"}, CR_E_CORRUPT, "missing tensor",
         "blk.1.post_ffw_norm.weight"},
        {"gemma2 missing post attention norm", "gemma2",
         {.skip_tensor = "blk.0.post_attention_norm.weight"}, CR_E_CORRUPT,
         "missing tensor", "blk.0.post_attention_norm.weight"},
        {"gemma2 string window", "gemma2",
         {.str_key = "gemma2.attention.sliding_window", .str_val = "4"}, CR_E_CORRUPT,
         "gemma2.attention.sliding_window", NULL},
        {"gemma2 string softcap", "gemma2",
         {.str_key = "gemma2.attn_logit_softcapping", .str_val = "x"}, CR_E_CORRUPT,
         "gemma2.attn_logit_softcapping", NULL},
        {"gemma3 yarn", "gemma3",
         {.str_key = "gemma3.rope.scaling.type", .str_val = "yarn"}, CR_E_UNSUPPORTED,
         "gemma3.rope.scaling.type", "yarn"},
        {"gemma3 linear", "gemma3",
         {.str_key = "gemma3.rope.scaling.type", .str_val = "linear"}, CR_OK, NULL, NULL},
        {"qwen2 yarn", "qwen2", {.str_key = "qwen2.rope.scaling.type", .str_val = "yarn"},
         CR_OK, NULL, NULL},
        {"phi3 yarn", "phi3", {.str_key = "phi3.rope.scaling.type", .str_val = "yarn"},
         CR_E_UNSUPPORTED, "phi3.rope.scaling.type", "yarn"},
        {"phi3 longrope type", "phi3",
         {.str_key = "phi3.rope.scaling.type", .str_val = "longrope"}, CR_OK, NULL, NULL},
        {"gemma3 missing k norm", "gemma3", {.skip_tensor = "blk.0.attn_k_norm.weight"},
         CR_E_CORRUPT, "missing tensor", "blk.0.attn_k_norm.weight"},
        {"phi3 missing qkv", "phi3", {.skip_tensor = "blk.0.attn_qkv.weight"},
         CR_E_CORRUPT, "missing tensor", "blk.0.attn_qkv.weight"},
        {"phi3 qkv shape", "phi3",
         {.reshape_tensor = "blk.1.attn_qkv.weight", .ne0 = 64, .ne1 = 64},
         CR_E_CORRUPT, "blk.1.attn_qkv.weight", "expected [64, 128]"},
        {"phi3 up not fused", "phi3",
         {.reshape_tensor = "blk.0.ffn_up.weight", .ne0 = 64, .ne1 = 96}, CR_E_CORRUPT,
         "blk.0.ffn_up.weight", "expected [64, 192]"},
        {"phi3 half longrope", "phi3",
         {.add_tensor = "rope_factors_long.weight", .ne0 = 8}, CR_E_CORRUPT,
         "missing tensor", "rope_factors_short.weight"},
        {"phi3 string attn factor", "phi3",
         {.str_key = "phi3.rope.scaling.attn_factor", .str_val = "1"}, CR_E_CORRUPT,
         "phi3.rope.scaling.attn_factor", NULL},
        {"phi3 missing block_count", "phi3", {.drop_key = "phi3.block_count"},
         CR_E_CORRUPT, "phi3.block_count", NULL},
        {"gemma3 pattern length", "gemma3",
         {.bools_key = "gemma3.attention.sliding_window_pattern", .bools = {1, 0},
          .n_bools = 2},
         CR_E_CORRUPT, "gemma3.attention.sliding_window_pattern", "2 values for 3"},
        {"gemma3 negative base", "gemma3",
         {.f32_key = "gemma3.rope.freq_base", .f32_val = -1}, CR_E_CORRUPT,
         "gemma3.rope.freq_base", NULL},
        {"unknown architecture", "qwen2",
         {.str_key = "general.architecture", .str_val = "t5encoder"}, CR_E_UNSUPPORTED,
         "unsupported architecture 't5encoder'", NULL},
        {"gemma3n is not gemma3", "gemma3",
         {.str_key = "general.architecture", .str_val = "gemma3n"}, CR_E_UNSUPPORTED,
         "unsupported architecture 'gemma3n'", NULL},
        /* the dense families of issue 13 */
        {"granite missing logit scale", "granite", {.drop_key = "granite.logit_scale"},
         CR_E_CORRUPT, "missing key 'granite.logit_scale'", NULL},
        {"granite negative residual scale", "granite",
         {.f32_key = "granite.residual_scale", .f32_val = -0.5f}, CR_E_CORRUPT,
         "granite.residual_scale", NULL},
        {"granite string embedding scale", "granite",
         {.str_key = "granite.embedding_scale", .str_val = "12"}, CR_E_CORRUPT,
         "granite.embedding_scale", NULL},
        {"granite without rope", "granite",
         {.bool_key = "granite.rope.scaling.finetuned", .bool_val = false},
         CR_E_UNSUPPORTED, "granite.rope.scaling.finetuned", NULL},
        {"granite with rope", "granite",
         {.bool_key = "granite.rope.scaling.finetuned", .bool_val = true}, CR_OK, NULL,
         NULL},
        {"granite linear rope", "granite",
         {.str_key = "granite.rope.scaling.type", .str_val = "linear",
          .f32_key = "granite.rope.scaling.factor", .f32_val = 4},
         CR_E_UNSUPPORTED, "granite.rope.scaling.type", "not supported for granite"},
        {"granite output bias", "granite",
         {.add_tensor = "blk.1.attn_output.bias", .ne0 = 64}, CR_E_UNSUPPORTED,
         "blk.1.attn_output.bias", "granite biases"},
        {"granite uniform per-layer kv heads", "granite",
         {.u32s_key = "granite.attention.head_count_kv", .u32s = {2, 2, 2},
          .n_u32s = 3},
         CR_OK, NULL, NULL},
        {"granite mixed per-layer kv heads", "granite",
         {.u32s_key = "granite.attention.head_count_kv", .u32s = {2, 4, 2},
          .n_u32s = 3},
         CR_E_UNSUPPORTED, "granite.attention.head_count_kv", "per-layer"},
        {"olmo2 missing q norm", "olmo2", {.skip_tensor = "blk.2.attn_q_norm.weight"},
         CR_E_CORRUPT, "missing tensor", "blk.2.attn_q_norm.weight"},
        {"olmo2 per-head k norm", "olmo2",
         {.reshape_tensor = "blk.0.attn_k_norm.weight", .ne0 = 16, .ne1 = 1},
         CR_E_CORRUPT, "blk.0.attn_k_norm.weight", "expected [32]"},
        {"olmo2 missing post ffw norm", "olmo2",
         {.skip_tensor = "blk.1.post_ffw_norm.weight"}, CR_E_CORRUPT, "missing tensor",
         "blk.1.post_ffw_norm.weight"},
        {"olmo2 dynamic rope", "olmo2",
         {.str_key = "olmo2.rope.scaling.type", .str_val = "dynamic"}, CR_E_UNSUPPORTED,
         "olmo2.rope.scaling.type", "dynamic"},
        {"olmo2 string window", "olmo2",
         {.str_key = "olmo2.attention.sliding_window", .str_val = "4"}, CR_E_CORRUPT,
         "olmo2.attention.sliding_window", NULL},
        {"mistral3 yarn", "mistral3",
         {.str_key = "mistral3.rope.scaling.type", .str_val = "yarn"}, CR_OK, NULL, NULL},
        {"mistral3 longrope", "mistral3",
         {.str_key = "mistral3.rope.scaling.type", .str_val = "longrope"},
         CR_E_UNSUPPORTED, "mistral3.rope.scaling.type", NULL},
        {"mistral3 string attention temperature", "mistral3",
         {.str_key = "mistral3.attention.temperature_scale", .str_val = "0.1"},
         CR_E_CORRUPT, "mistral3.attention.temperature_scale", NULL},
        {"mistral3 negative yarn beta", "mistral3",
         {.str_key = "mistral3.rope.scaling.type", .str_val = "yarn",
          .f32_key = "mistral3.rope.scaling.yarn_beta_fast", .f32_val = -1},
         CR_E_CORRUPT, "mistral3.rope.scaling.yarn_beta_fast", NULL},
        {"granite yarn", "granite", {.str_key = "granite.rope.scaling.type",
                                     .str_val = "yarn"},
         CR_E_UNSUPPORTED, "granite.rope.scaling.type", "yarn"},
        {"mistral3 ffn bias", "mistral3", {.add_tensor = "blk.0.ffn_up.bias", .ne0 = 96},
         CR_E_UNSUPPORTED, "blk.0.ffn_up.bias", NULL},
        {"mistral3 missing attn_k", "mistral3", {.skip_tensor = "blk.1.attn_k.weight"},
         CR_E_CORRUPT, "missing tensor", "blk.1.attn_k.weight"},
        {"exaone missing ffn_norm", "exaone", {.skip_tensor = "blk.2.ffn_norm.weight"},
         CR_E_CORRUPT, "missing tensor", "blk.2.ffn_norm.weight"},
        {"smollm3 down bias", "smollm3", {.add_tensor = "blk.3.ffn_down.bias", .ne0 = 64},
         CR_E_UNSUPPORTED, "blk.3.ffn_down.bias", NULL},
        {"smollm3 linear rope", "smollm3",
         {.str_key = "smollm3.rope.scaling.type", .str_val = "linear",
          .f32_key = "smollm3.rope.scaling.factor", .f32_val = 2},
         CR_E_UNSUPPORTED, "smollm3.rope.scaling.type", NULL},
        {"command-r missing layernorm epsilon", "command-r",
         {.drop_key = "command-r.attention.layer_norm_epsilon"}, CR_E_CORRUPT,
         "missing key 'command-r.attention.layer_norm_epsilon'", NULL},
        {"command-r without logit scale", "command-r",
         {.drop_key = "command-r.logit_scale"}, CR_OK, NULL, NULL},
        {"command-r plus q norm", "command-r",
         {.add_tensor = "blk.1.attn_q_norm.weight", .ne0 = 16}, CR_E_UNSUPPORTED,
         "blk.1.attn_q_norm.weight", "Command R+"},
        {"command-r missing attn_norm", "command-r",
         {.skip_tensor = "blk.0.attn_norm.weight"}, CR_E_CORRUPT, "missing tensor",
         "blk.0.attn_norm.weight"},
        {"cohere2 missing window", "cohere2",
         {.drop_key = "cohere2.attention.sliding_window"}, CR_E_CORRUPT,
         "missing key 'cohere2.attention.sliding_window'", NULL},
        {"cohere2 missing logit scale", "cohere2", {.drop_key = "cohere2.logit_scale"},
         CR_E_CORRUPT, "missing key 'cohere2.logit_scale'", NULL},
        {"cohere2 zero window", "cohere2",
         {.u32_key = "cohere2.attention.sliding_window", .u32_val = 0}, CR_E_CORRUPT,
         "cohere2.attention.sliding_window", NULL},
        {"exaone yarn", "exaone",
         {.str_key = "exaone.rope.scaling.type", .str_val = "yarn"}, CR_E_UNSUPPORTED,
         "exaone.rope.scaling.type", "yarn"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = load_edited(cases[i].arch, &cases[i].e, &err, NULL);
        CHECK_MSG(st == cases[i].want, "%s: status %d (%s), want %d", cases[i].name,
                  (int)st, err.msg, (int)cases[i].want);
        if (cases[i].msg1)
            CHECK_MSG(strstr(err.msg, cases[i].msg1), "%s: message '%s' lacks '%s'",
                      cases[i].name, err.msg, cases[i].msg1);
        if (cases[i].msg2)
            CHECK_MSG(strstr(err.msg, cases[i].msg2), "%s: message '%s' lacks '%s'",
                      cases[i].name, err.msg, cases[i].msg2);
    }

    /* synth refuses an unknown architecture and odd head sizes */
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.arch = "t5encoder";
    void *b = NULL;
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &len, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "t5encoder"), "%s", err.msg);
    arch_opts("qwen3", &o);
    o.head_dim = 7;
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &len, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "head size 7"), "%s", err.msg);
    free(b);
}

/* Gemma 3 as Ollama's converter writes it: rope.global/local.freq_base and
 * a per-layer bool array for the sliding pattern. */
static void test_ollama_gemma3(void)
{
    edit_t e = {
        .drop_key = "gemma3.rope.freq_base",
        .f32_key = "gemma3.rope.global.freq_base",
        .f32_val = 500000.0f,
        .f32_key2 = "gemma3.rope.local.freq_base",
        .f32_val2 = 20000.0f,
        .bools_key = "gemma3.attention.sliding_window_pattern",
        .bools = {0, 1, 0},
        .n_bools = 3,
    };
    cr_err_t err;
    cr_err_clear(&err);
    rn_model_t *m = NULL;
    CHECK_EQ_INT(load_edited("gemma3", &e, &err, &m), CR_OK);
    if (m) {
        const rn_hparams_t *hp = rn_model_hparams(m);
        const rn_weights_t *w = rn_model_weights(m);
        CHECK_NEAR(hp->rope_base, 500000.0, 0);
        CHECK_NEAR(hp->rope_base_swa, 20000.0, 0);
        CHECK(!w->layers[0].swa && w->layers[1].swa && !w->layers[2].swa);
    }
    rn_model_destroy(&m);
    free(kept_bytes_g);
    kept_bytes_g = NULL;
}

/* hparams of the dense families of issue 13, as llama.cpp derives them;
 * mistral3's vision tensors are left unused and reported. */
static void test_family_hparams(void)
{
    static const char *const archs[] = {"granite", "olmo2",   "mistral3", "exaone",
                                        "smollm3", "command-r", "cohere2"};
    for (size_t i = 0; i < CR_ARRAY_LEN(archs); i++) {
        rn_synth_opts_t o;
        arch_opts(archs[i], &o);
        void *bytes = NULL;
        size_t len = 0;
        cr_err_t err;
        cr_err_clear(&err);
        CHECK_EQ_INT(rn_synth_write_memory(&o, &bytes, &len, &err), CR_OK);
        cr_gguf_t *g = NULL;
        rn_model_t *m = NULL;
        if (bytes && !cr_gguf_open_memory(bytes, len, &g, &err))
            rn_model_load_gguf(&g, be_g, &m, &err);
        CHECK_MSG(m != NULL, "%s: %s", archs[i], err.msg);
        if (m) {
            const rn_hparams_t *hp = rn_model_hparams(m);
            const rn_layer_t *L = &rn_model_weights(m)->layers[1];
            bool granite = !strcmp(archs[i], "granite");
            bool olmo2 = !strcmp(archs[i], "olmo2");
            CHECK(hp->rope_neox == (olmo2 || !strcmp(archs[i], "exaone")));
            bool smollm3 = !strcmp(archs[i], "smollm3");
            bool cohere2 = !strcmp(archs[i], "cohere2");
            bool cohere = cohere2 || !strcmp(archs[i], "command-r");
            CHECK(rn_hparams_llama_graph(hp) == (smollm3 || !strcmp(archs[i], "mistral3")));
            for (int l = 0; l < hp->n_layers; l++)
                CHECK(rn_model_weights(m)->layers[l].no_rope ==
                      ((smollm3 || cohere2) && l % 4 == 3));
            CHECK_NEAR(hp->embd_scale, granite ? 4.0 : 1.0, 0);
            CHECK_NEAR(hp->residual_scale, granite ? 0.5 : 1.0, 0);
            CHECK_NEAR(hp->logit_mult, granite ? 0.125 : cohere ? 0.25 : 1.0, 0);
            CHECK(hp->layer_norm == cohere && hp->parallel_ffn == cohere);
            CHECK(rn_model_weights(m)->tied_output == (cohere || o.tied_output));
            CHECK(cohere2 ? hp->n_swa == 4 && rn_model_weights(m)->layers[2].swa &&
                                !rn_model_weights(m)->layers[3].swa
                          : !cohere || hp->n_swa == 0);
            CHECK_NEAR(hp->attn_scale, granite ? 0.5 : 1.0 / sqrt(hp->head_dim), 1e-7);
            CHECK(hp->post_norms == olmo2 && hp->no_pre_norms == olmo2);
            CHECK((L->attn_norm.data == NULL) == olmo2 &&
                  (L->ffn_norm.data == NULL) == (olmo2 || cohere));
            CHECK((L->attn_post_norm.data != NULL) == olmo2);
            CHECK(olmo2 ? L->q_norm.n_cols == 64 && L->k_norm.n_cols == 32
                        : L->q_norm.data == NULL);
            const char *first = NULL;
            int unused = rn_model_unused_tensors(m, &first);
            if (o.vision_stub) {
                CHECK_EQ_INT(unused, 2);
                CHECK(first && !strcmp(first, "v.blk.0.attn_q.weight"));
            } else {
                CHECK_EQ_INT(unused, 0);
                CHECK(first == NULL);
            }
        }
        rn_model_destroy(&m);
        free(bytes);
    }
    /* olmo3's default pattern: 3 of 4 layers slide, with the same base */
    edit_t e = {.u32_key = "olmo2.attention.sliding_window", .u32_val = 8};
    rn_model_t *m = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(load_edited("olmo2", &e, &err, &m), CR_OK);
    if (m) {
        const rn_hparams_t *hp = rn_model_hparams(m);
        const rn_weights_t *w = rn_model_weights(m);
        CHECK_EQ_INT(hp->n_swa, 8);
        CHECK_EQ_INT(hp->swa_pattern, 4);
        CHECK_NEAR(hp->rope_base_swa, hp->rope_base, 0);
        CHECK(w->layers[0].swa && w->layers[1].swa && w->layers[2].swa);
    }
    rn_model_destroy(&m);
    free(kept_bytes_g);
    kept_bytes_g = NULL;
}

/* corral-gguf-synth --arch writes what the library writes. */
static void test_tool(void)
{
    const char *bd = getenv("CORRAL_BUILD_DIR");
    char tool[1024];
    snprintf(tool, sizeof tool, "%s/bin/corral-gguf-synth", bd ? bd : ".");
    if (!bd || access(tool, X_OK) != 0) {
        printf("test_arch_forward: %s not built; tool checks skipped\n", tool);
        return;
    }
    char dir[] = "/tmp/corral-test-arch-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    char out[128], cmd[2048];
    snprintf(out, sizeof out, "%s/gemma2.gguf", dir);
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --arch gemma2 --seed 7 --layers 3 "
             "--ffn 96 --head-dim 24 --window 4 --attn-softcap 1 --final-softcap 2 "
             "--std 0.1 --tied", tool, out);
    CHECK_EQ_INT(system(cmd), 0);
    rn_synth_opts_t o;
    arch_opts("gemma2", &o);
    void *b = NULL;
    size_t l = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_synth_write_memory(&o, &b, &l, &err), CR_OK);
    FILE *f = fopen(out, "rb");
    char *fb = malloc(l + 1);
    size_t got = f && fb ? fread(fb, 1, l + 1, f) : 0;
    if (f)
        fclose(f);
    CHECK_MSG(got == l && b && !memcmp(fb, b, l), "tool bytes differ (%zu vs %zu)", got, l);
    free(fb);
    free(b);
    /* an unknown architecture is refused (exit 1), a bad value too (2) */
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --arch t5encoder 2>/dev/null", tool, out);
    int rc = system(cmd);
    CHECK_EQ_INT(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 1);
    snprintf(cmd, sizeof cmd, "'%s' --out '%s' --arch qwen2 --std -1 2>/dev/null", tool,
             out);
    rc = system(cmd);
    CHECK_EQ_INT(WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, 2);
    unlink(out);
    rmdir(dir);
}

/* hparams the loader derives, as llama.cpp does. */
static void test_hparams(void)
{
    static const char *const archs[] = {"qwen2", "qwen3", "gemma", "gemma2", "gemma3",
                                        "phi3"};
    for (size_t i = 0; i < CR_ARRAY_LEN(archs); i++) {
        rn_synth_opts_t o;
        arch_opts(archs[i], &o);
        void *bytes = NULL;
        size_t len = 0;
        cr_err_t err;
        cr_err_clear(&err);
        CHECK_EQ_INT(rn_synth_write_memory(&o, &bytes, &len, &err), CR_OK);
        cr_gguf_t *g = NULL;
        rn_model_t *m = NULL;
        if (bytes && !cr_gguf_open_memory(bytes, len, &g, &err))
            rn_model_load_gguf(&g, be_g, &m, &err);
        CHECK_MSG(m != NULL, "%s: %s", archs[i], err.msg);
        if (m) {
            const rn_hparams_t *hp = rn_model_hparams(m);
            const rn_weights_t *w = rn_model_weights(m);
            int hd = o.head_dim ? o.head_dim : 16;
            CHECK(hp->rope_neox);
            CHECK_EQ_INT(hp->head_dim, hd);
            CHECK_EQ_INT(hp->q_dim, 4 * hd);
            CHECK_NEAR(hp->attn_scale, 1.0 / sqrt(hd), 1e-7);
            bool gemma = !strncmp(archs[i], "gemma", 5);
            CHECK(hp->ffn_gelu == gemma);
            CHECK(hp->post_norms == (gemma && strcmp(archs[i], "gemma")));
            CHECK_NEAR(hp->embd_scale, gemma ? 8.0 : 1.0, 1e-6);
            if (!strcmp(archs[i], "gemma2")) {
                CHECK_NEAR(hp->attn_softcap, 1.0, 0);
                CHECK_NEAR(hp->final_softcap, 2.0, 0);
                CHECK_EQ_INT(hp->n_swa, 4);
                CHECK(w->layers[0].swa && !w->layers[1].swa && w->layers[2].swa);
            }
            if (!strcmp(archs[i], "gemma3")) {
                CHECK_NEAR(hp->attn_softcap, 0, 0);
                CHECK_NEAR(hp->rope_base_swa, 10000, 0);
                CHECK_NEAR(hp->rope_base, 1e6, 0);
                CHECK(w->layers[0].swa && w->layers[1].swa && !w->layers[2].swa);
            }
            if (!strcmp(archs[i], "phi3")) {
                /* views of the fused tensors, in order */
                const rn_layer_t *L = &w->layers[0];
                CHECK(L->wk.data == (const char *)L->wq.data + 64 * L->wq.row_bytes);
                CHECK(L->wv.data == (const char *)L->wk.data + 32 * L->wk.row_bytes);
                CHECK(L->w_up.data == (const char *)L->w_gate.data + 96 * L->w_gate.row_bytes);
                CHECK_EQ_INT(L->w_up.n_rows, 96);
            }
            if (!strcmp(archs[i], "qwen2"))
                CHECK(w->layers[2].bq.data && w->layers[2].bv.n_cols == 32);
        }
        rn_model_destroy(&m);
        free(bytes);
    }
}

/* ---- the optional ops against plain references ------------------------ */

static float frand(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static void test_ext_ops(void)
{
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    CHECK(ext != NULL);
    if (!ext)
        return;
    uint64_t seed = 42;
    enum { T = 7, H = 4, HKV = 2, HD = 8, KVD = HKV * HD };
    float q[T * H * HD], x[T * H * HD], out1[T * H * HD], out2[T * H * HD];
    float kf[T * KVD], vf[T * KVD];
    uint16_t k16[T * KVD], v16[T * KVD];
    for (int i = 0; i < T * H * HD; i++)
        q[i] = 2 * frand(&seed);
    for (int i = 0; i < T * KVD; i++) {
        kf[i] = 2 * frand(&seed);
        vf[i] = frand(&seed);
    }
    be_f32_to_f16_row(kf, k16, T * KVD);
    be_f32_to_f16_row(vf, v16, T * KVD);

    /* rope_neox: pairs (i, i + 4) of each 8-wide head, factors and mscale */
    int32_t pos[T];
    for (int t = 0; t < T; t++)
        pos[t] = 3 * t + 1;
    float ffv[HD / 2] = {1, 2, 4, 8};
    be_weight_t ff = {.name = "ff", .type = CR_TYPE_F32, .n_cols = HD / 2, .n_rows = 1,
                      .row_bytes = sizeof ffv, .data = ffv};
    memcpy(x, q, sizeof x);
    ext->rope_neox(be_g, x, T, H, HD, HD, pos, 100.0f, 0.5f, &ff, 1.5f);
    double maxe = 0;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < HD / 2; i++) {
                const float *src = q + (t * H + h) * HD;
                double ang = pos[t] * 0.5 * pow(100.0, -2.0 * i / HD) / ffv[i];
                double e0 = 1.5 * (src[i] * cos(ang) - src[i + 4] * sin(ang));
                double e1 = 1.5 * (src[i] * sin(ang) + src[i + 4] * cos(ang));
                maxe = fmax(maxe, fabs(x[(t * H + h) * HD + i] - e0));
                maxe = fmax(maxe, fabs(x[(t * H + h) * HD + i + 4] - e1));
            }
    CHECK_MSG(maxe < 1e-5, "rope_neox error %g", maxe);

    /* add_rows, scale, geglu */
    float b[HD] = {1, -1, 2, -2, 0.5f, 0, 3, -3}, y[3 * HD];
    be_weight_t bw = {.name = "b", .type = CR_TYPE_F32, .n_cols = HD, .n_rows = 1,
                      .row_bytes = sizeof b, .data = b};
    for (int i = 0; i < 3 * HD; i++)
        y[i] = (float)i;
    ext->add_rows(be_g, y, &bw, 3);
    bool ok = true;
    for (int i = 0; i < 3 * HD; i++)
        ok = ok && y[i] == (float)i + b[i % HD];
    CHECK(ok);
    ext->scale(be_g, y, 3 * HD, 0.5f);
    CHECK(y[HD + 2] == 0.5f * (float)(HD + 2 + 2));
    float gt[5] = {-3, -0.5f, 0, 0.7f, 4}, up[5] = {1, 2, 3, 4, 5}, gg[5];
    ext->geglu(be_g, gg, gt, up, 5);
    for (int i = 0; i < 5; i++)
        CHECK_NEAR(gg[i], gelu_tanh(gt[i]) * up[i], 1e-6);

    /* attention_ext without window or cap == the attention op, bitwise */
    be_attn_t a = {.n_tok = 3, .pos0 = T - 3, .n_head = H, .n_head_kv = HKV,
                   .head_dim = HD, .scale = 0.35f, .kv_type = CR_TYPE_F16};
    float scratch[2 * T + 2 * HD];
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_g->ops->reserve(be_g, T, 64, T, H, &err), CR_OK); /* op scratch */
    CHECK(be_attention_ext_scratch(T, HD) <= CR_ARRAY_LEN(scratch));
    be_g->ops->attention(be_g, out1, q, k16, v16, &a);
    ext->attention_ext(be_g, out2, q, k16, v16, &a, 0, 0, scratch);
    CHECK(same(out1, out2, 3 * H * HD));
    /* with a window of 2 and a cap of 0.8: against a double reference on
     * the same F16 keys and values */
    ext->attention_ext(be_g, out2, q, k16, v16, &a, 0.8f, 2, scratch);
    maxe = 0;
    for (int t = 0; t < 3; t++)
        for (int h = 0; h < H; h++) {
            int qp = T - 3 + t, hk = h / (H / HKV);
            double sc[T], mx = -INFINITY, sum = 0;
            for (int j = qp - 1; j <= qp; j++) {
                double d = 0;
                for (int e = 0; e < HD; e++)
                    d += q[(t * H + h) * HD + e] *
                         (double)be_f16_to_f32(k16[j * KVD + hk * HD + e]);
                sc[j] = 0.8 * tanh(d * 0.35 / 0.8);
                mx = fmax(mx, sc[j]);
            }
            for (int j = qp - 1; j <= qp; j++)
                sum += (sc[j] = exp(sc[j] - mx));
            for (int e = 0; e < HD; e++) {
                double o = 0;
                for (int j = qp - 1; j <= qp; j++)
                    o += sc[j] / sum * be_f16_to_f32(v16[j * KVD + hk * HD + e]);
                maxe = fmax(maxe, fabs(o - out2[(t * H + h) * HD + e]));
            }
        }
    CHECK_MSG(maxe < 2e-3, "attention_ext error %g", maxe); /* F16 q and probs */
}

/* The CPU's rope_yarn against the definition (backend.h) in double, both
 * pairings, with frequency factors, 260 pairs (past the op's 256-pair
 * cache). Tolerance 2e-3: the op builds angles as ggml does, by repeated
 * float multiplication, which drifts ~3e-4 rad by pair 260 at position 20
 * (values are within +-2). */
static void test_rope_yarn_op(void)
{
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    CHECK(ext && ext->rope_yarn);
    if (!ext || !ext->rope_yarn)
        return;
    enum { T = 3, H = 2, HD = 524, NR = 520 };
    static float x0[T * H * HD], x[T * H * HD], ffv[NR / 2];
    uint64_t seed = 9;
    for (int i = 0; i < T * H * HD; i++)
        x0[i] = 2 * frand(&seed);
    for (int i = 0; i < NR / 2; i++)
        ffv[i] = 1.0f + (float)(i % 5);
    be_weight_t ff = {.name = "ff", .type = CR_TYPE_F32, .n_cols = NR / 2, .n_rows = 1,
                      .row_bytes = sizeof ffv, .data = ffv};
    int32_t pos[T] = {0, 7, 20};
    for (int neox = 0; neox < 2; neox++) {
        be_rope_yarn_t y = {.freq_base = 500.0f, .freq_scale = 0.25f, .ext_factor = 1.0f,
                            .attn_factor = 0.9f, .corr_lo = 10, .corr_hi = 40,
                            .normal = !neox};
        memcpy(x, x0, sizeof x);
        ext->rope_yarn(be_g, x, T, H, HD, NR, pos, &y, &ff);
        double maxe = 0;
        double ms = 0.9 * (1 + 0.1 * log(4.0));
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const float *src = x0 + (t * H + h) * HD;
                const float *got = x + (t * H + h) * HD;
                for (int i = 0; i < NR / 2; i++) {
                    double te = pos[t] * pow(500.0, -2.0 * i / NR) / ffv[i];
                    double r = (i - 10) / 30.0, mix = 1 - fmin(1, fmax(0, r));
                    double th = te * 0.25 * (1 - mix) + te * mix;
                    int a = neox ? i : 2 * i, b = neox ? i + NR / 2 : 2 * i + 1;
                    double e0 = ms * (src[a] * cos(th) - src[b] * sin(th));
                    double e1 = ms * (src[a] * sin(th) + src[b] * cos(th));
                    maxe = fmax(maxe, fmax(fabs(got[a] - e0), fabs(got[b] - e1)));
                }
                for (int i = NR; i < HD; i++) /* past n_rot: untouched */
                    maxe = fmax(maxe, fabs(got[i] - src[i]));
            }
        CHECK_MSG(maxe < 2e-3, "rope_yarn (%s) error %g", neox ? "neox" : "normal", maxe);
    }
}

int main(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(2, &be_g, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        return 1;
    }
    for (size_t i = 0; i < CR_ARRAY_LEN(ones_g); i++)
        ones_g[i] = 1.0f;
    test_ext_ops();
    test_rope_yarn_op();
    test_hparams();
    test_family_hparams();
    test_archs();
    test_quantized();
    test_corrupt();
    test_ollama_gemma3();
    test_tool();
    be_destroy(&be_g);
    return check_finish("test_arch_forward");
}
