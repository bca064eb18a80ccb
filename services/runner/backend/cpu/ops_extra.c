/* ops_extra.c: the CPU backend's optional ops (be_ops_ext_t, backend.h).
 *
 * NEOX rotary embedding, row-broadcast bias add, scaling, GELU-tanh gating,
 * attention with logit soft-capping and a sliding window, LayerNorm and
 * plain GELU: what qwen2, qwen3, gemma2, gemma3, phi3, bert and nomic-bert
 * need beyond the llama ops; YaRN rope (mistral3's Ministral 3 files). CPU backend
 * buffers are plain host memory, so these run on them directly. They are
 * single-threaded: this file cannot reach the CPU backend's thread pool
 * (backend_cpu.c owns it); attention_ext is the one op where that costs
 * time on long contexts.
 *
 * Owns no state. Does not own the llama ops (backend_cpu.c) or any kernel
 * of a quant format (quant.c). */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/vec.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"

#include <math.h>

static void ext_rope_neox(be_backend_t *be, float *x, int n, int n_head, int head_dim,
                          int n_rot, const int32_t *pos, float freq_base,
                          float freq_scale, const be_weight_t *freq_factors,
                          float mscale)
{
    CR_UNUSED(be);
    const float *ff = freq_factors ? freq_factors->data : NULL;
    int half = n_rot / 2;
    /* Pair i's angle is pos * scale * base^(-2i/n_rot), built by repeated
     * multiplication in float as the reference engine does; the same for
     * every head of a token, so computed once per token (up to ROPE_MAX
     * pairs; past that, per head). */
    float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    enum { ROPE_MAX = 256 };
    float cs[ROPE_MAX], sn[ROPE_MAX];
    const be_vec_ops_t *vec = be_vec_ops();
    for (int t = 0; t < n; t++) {
        float theta = (float)pos[t] * freq_scale;
        for (int i = 0; i < half && half <= ROPE_MAX; i++) {
            float th = ff ? theta / ff[i] : theta;
            cs[i] = cosf(th) * mscale, sn[i] = sinf(th) * mscale;
            theta *= theta_scale;
        }
        for (int h = 0; h < n_head; h++) {
            float *v = x + ((size_t)t * n_head + h) * head_dim;
            if (half <= ROPE_MAX) {
                vec->rope_halves(half, v, v + half, cs, sn);
                continue;
            }
            theta = (float)pos[t] * freq_scale;
            for (int i = 0; i < half; i++) {
                float th = ff ? theta / ff[i] : theta;
                float c = cosf(th) * mscale, s = sinf(th) * mscale;
                float x0 = v[i], x1 = v[i + half];
                v[i] = x0 * c - x1 * s;
                v[i + half] = x0 * s + x1 * c;
                theta *= theta_scale;
            }
        }
    }
}

static void ext_add_rows(be_backend_t *be, float *y, const be_weight_t *b, int n)
{
    CR_UNUSED(be);
    const float *bv = b->data;
    size_t cols = (size_t)b->n_cols;
    for (int t = 0; t < n; t++) {
        float *yr = y + (size_t)t * cols;
        for (size_t i = 0; i < cols; i++)
            yr[i] += bv[i];
    }
}

static void ext_scale(be_backend_t *be, float *x, size_t n, float s)
{
    CR_UNUSED(be);
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

static void ext_geglu(be_backend_t *be, float *y, const float *gate, const float *up,
                      size_t n)
{
    CR_UNUSED(be);
    /* GELU, tanh approximation (what Gemma's gelu_pytorch_tanh and ggml's
     * gelu compute). */
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (size_t i = 0; i < n; i++) {
        float g = gate[i];
        float gl = 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
        y[i] = gl * up[i];
    }
}

static float gelu_tanh(float g)
{
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
}

static void ext_gelu(be_backend_t *be, float *y, const float *x, size_t n)
{
    CR_UNUSED(be);
    for (size_t i = 0; i < n; i++)
        y[i] = gelu_tanh(x[i]);
}

static void ext_layernorm(be_backend_t *be, float *y, const float *x, const be_weight_t *w,
                          const be_weight_t *b, int n, int dim, float eps)
{
    CR_UNUSED(be);
    const float *wv = w->data;
    const float *bv = b ? b->data : NULL;
    for (int t = 0; t < n; t++) {
        const float *xr = x + (size_t)t * dim;
        float *yr = y + (size_t)t * dim;
        /* ggml_norm: mean, then the variance of the centred row, sums in
         * double */
        double sum = 0;
        for (int i = 0; i < dim; i++)
            sum += xr[i];
        float mean = (float)(sum / dim);
        double ss = 0;
        for (int i = 0; i < dim; i++) {
            float d = xr[i] - mean;
            yr[i] = d;
            ss += (double)d * d;
        }
        float scale = 1.0f / sqrtf((float)(ss / dim) + eps);
        for (int i = 0; i < dim; i++)
            yr[i] = yr[i] * scale * wv[i] + (bv ? bv[i] : 0.0f);
    }
}

static void softmax_span(float *x, int n)
{
    float mx = x[0];
    for (int i = 1; i < n; i++)
        mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++)
        x[i] *= inv;
}

static void ext_attention(be_backend_t *be, float *out, const float *q, const uint16_t *k,
                          const uint16_t *v, const be_attn_t *a, float softcap,
                          int window, float *scratch)
{
    CR_UNUSED(be);
    be_vec_dot_fn dot_f16 = be_type_traits(CR_TYPE_F16)->vec_dot;
    int hd = a->head_dim, group = a->n_head / a->n_head_kv;
    int ctx = a->pos0 + a->n_tok;
    size_t kv_row = (size_t)a->n_head_kv * hd;
    /* scratch: scores [ctx] f32 | probs [ctx] f16 (ctx floats reserved) |
     * q [hd] f16 (hd floats reserved) | acc [hd] f32 */
    float *scores = scratch;
    uint16_t *p16 = (uint16_t *)(scratch + ctx);
    uint16_t *q16 = (uint16_t *)(scratch + 2 * (size_t)ctx);
    float *acc = scratch + 2 * (size_t)ctx + hd;

    for (int t = 0; t < a->n_tok; t++) {
        int qpos = a->pos0 + t;
        int first = window > 0 && qpos - window + 1 > 0 ? qpos - window + 1 : 0;
        int n_kv = qpos - first + 1;
        for (int h = 0; h < a->n_head; h++) {
            int hk = h / group;
            const float *qh = q + ((size_t)t * a->n_head + h) * hd;
            be_f32_to_f16_row(qh, q16, hd);
            for (int j = 0; j < n_kv; j++) {
                float s;
                dot_f16(hd, &s, k + (size_t)(first + j) * kv_row + (size_t)hk * hd, q16);
                s *= a->scale;
                if (softcap > 0)
                    s = softcap * tanhf(s / softcap);
                scores[j] = s;
            }
            softmax_span(scores, n_kv);
            be_f32_to_f16_row(scores, p16, n_kv);
            for (int d = 0; d < hd; d++)
                acc[d] = 0;
            for (int j = 0; j < n_kv; j++) {
                float pw = be_f16_to_f32(p16[j]);
                if (pw == 0)
                    continue;
                const uint16_t *vr = v + (size_t)(first + j) * kv_row + (size_t)hk * hd;
                for (int d = 0; d < hd; d++)
                    acc[d] += pw * be_f16_to_f32(vr[d]);
            }
            memcpy(out + ((size_t)t * a->n_head + h) * hd, acc, (size_t)hd * sizeof(float));
        }
    }
}

/* YaRN (be_rope_yarn_t): angles by repeated multiplication in float and
 * the ramp on the pair index, in ggml's order of operations. */
static void ext_rope_yarn(be_backend_t *be, float *x, int n, int n_head, int head_dim,
                          int n_rot, const int32_t *pos, const be_weight_t *freq_factors,
                          const be_rope_yarn_t *y)
{
    CR_UNUSED(be);
    const float *ff = freq_factors ? freq_factors->data : NULL;
    int half = n_rot / 2;
    float theta_scale = powf(y->freq_base, -2.0f / (float)n_rot);
    float mscale = y->attn_factor;
    if (y->ext_factor != 0.0f)
        mscale *= 1.0f + 0.1f * logf(1.0f / y->freq_scale);
    enum { ROPE_MAX = 256 };
    float cs[ROPE_MAX], sn[ROPE_MAX];
    const be_vec_ops_t *vec = be_vec_ops();
    for (int t = 0; t < n; t++) {
        /* per token; pairs past ROPE_MAX rotate one by one below */
        float theta = (float)pos[t];
        for (int i = 0; i < half; i++) {
            float te = ff ? theta / ff[i] : theta;
            float th = y->freq_scale * te;
            if (y->ext_factor != 0.0f) {
                float r = ((float)i - y->corr_lo) / fmaxf(0.001f, y->corr_hi - y->corr_lo);
                float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, r))) * y->ext_factor;
                th = th * (1.0f - mix) + te * mix;
            }
            float c = cosf(th) * mscale, s = sinf(th) * mscale;
            theta *= theta_scale;
            if (i < ROPE_MAX) {
                cs[i] = c, sn[i] = s;
                continue;
            }
            for (int h = 0; h < n_head; h++) {
                float *v = x + ((size_t)t * n_head + h) * head_dim;
                int a = y->neox ? i : 2 * i, b = y->neox ? i + half : 2 * i + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
            }
        }
        int cached = CR_MIN(half, ROPE_MAX);
        for (int h = 0; h < n_head; h++) {
            float *v = x + ((size_t)t * n_head + h) * head_dim;
            if (y->neox)
                vec->rope_halves(cached, v, v + half, cs, sn);
            else
                vec->rope_pairs(cached, v, cs, sn);
        }
    }
}

static const be_ops_ext_t cpu_ext_ops = {
    .rope_neox = ext_rope_neox,
    .add_rows = ext_add_rows,
    .scale = ext_scale,
    .geglu = ext_geglu,
    .attention_ext = ext_attention,
    .layernorm = ext_layernorm,
    .gelu = ext_gelu,
    .rope_yarn = ext_rope_yarn,
};

const be_ops_ext_t *be_cpu_ext_ops(const be_backend_t *be)
{
    CR_UNUSED(be);
    return &cpu_ext_ops;
}
