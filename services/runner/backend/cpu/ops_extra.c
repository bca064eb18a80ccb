/* ops_extra.c: the CPU backend's optional ops (be_ops_ext_t, backend.h).
 *
 * NEOX rotary embedding (plain and YaRN, which also rotates adjacent
 * pairs), row-broadcast bias add, scaling, GELU-tanh gating, attention
 * with logit soft-capping, a sliding window and sinks, LayerNorm, plain
 * GELU and gpt-oss's clamped SwiGLU: what qwen2, qwen3, gemma2, gemma3,
 * phi3, bert, nomic-bert, gpt-oss and the dense families (granite, olmo2,
 * mistral3, command-r, ...) need beyond the llama ops; and the
 * mixture-of-experts ops (a matmul over one expert's rows of a stacked
 * weight, row gather; the grouped expert products and the weighted
 * scatter-add are backend_cpu.c's, which owns the thread pool). CPU
 * backend buffers are plain host memory, so these run on them directly.
 * They are single-threaded (this file cannot reach the pool) except
 * matmul_rows, which calls the backend's threaded matmul, and the ops
 * backend_cpu.c provides (matmul_group, attention_ext: the attention op's
 * threaded and tiled paths with a window and soft-cap).
 *
 * Owns no state. Does not own the llama ops (backend_cpu.c) or any kernel
 * of a quant format (quant.c). */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/vec.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/repack.h"

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
     * gelu compute), times up. */
    be_vec_ops()->gelu(n, y, gate, up);
}

static void ext_gelu(be_backend_t *be, float *y, const float *x, size_t n)
{
    CR_UNUSED(be);
    be_vec_ops()->gelu(n, y, x, NULL);
}

static void ext_gelu_quick(be_backend_t *be, float *y, const float *x, size_t n)
{
    CR_UNUSED(be);
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] / (1.0f + expf(-1.702f * x[i]));
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

/* ---- mixture of experts ------------------------------------------------ */

/* Rows r0..r0+nr-1 of w through the backend's own matmul (threads, packed
 * kernels): a packed stack is viewed as its groups of 8 rows from r0 / 8
 * when the slice starts and ends on a group (every real expert: rows are
 * multiples of 8); any other slice of a packed stack reads the row-major
 * bytes of the mapping, which stay readable after packing dropped them. */
static void ext_matmul_rows(be_backend_t *be, const be_weight_t *w, int64_t r0,
                            int64_t nr, const float *x, int n, float *y)
{
    be_weight_t sub = *w;
    sub.n_rows = nr;
    sub.data = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    sub.dev = NULL;
    be_packed_t view;
    const be_packed_t *p = w->dev;
    if (p && r0 % BE_PACK_ROWS == 0 && nr % BE_PACK_ROWS == 0) {
        view = *p;
        view.n_rows = nr;
        view.data = (uint8_t *)p->data + (size_t)(r0 / BE_PACK_ROWS) * p->group_bytes;
        sub.dev = &view;
    }
    be->ops->matmul(be, &sub, x, n, y);
}

static void ext_gather_rows(be_backend_t *be, float *dst, const float *src,
                            const int32_t *ids, int n, int cols)
{
    CR_UNUSED(be);
    size_t row = (size_t)cols * sizeof(float);
    for (int i = 0; i < n; i++)
        memcpy(dst + (size_t)i * cols, src + (size_t)ids[i] * cols, row);
}

/* ---- gpt-oss ------------------------------------------------------------ */

/* YaRN's blend of interpolated and extrapolated angle for pair i, and
 * the magnitude cos/sin carry (backend.h: be_rope_yarn_t; the steps and
 * their float order as ggml's rope_yarn takes them). */
static void yarn_angle(const be_rope_yarn_t *y, float theta_extrap, int i, float *cs,
                       float *sn)
{
    float theta_interp = y->freq_scale * theta_extrap;
    float theta = theta_interp, mscale = y->attn_factor;
    if (y->ext_factor != 0.0f) {
        float r = ((float)i - y->corr_lo) / fmaxf(0.001f, y->corr_hi - y->corr_lo);
        float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, r));
        float mix = ramp * y->ext_factor;
        theta = theta_interp * (1.0f - mix) + theta_extrap * mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / y->freq_scale);
    }
    *cs = cosf(theta) * mscale;
    *sn = sinf(theta) * mscale;
}

static void ext_rope_yarn(be_backend_t *be, float *x, int n, int n_head, int head_dim,
                          int n_rot, const int32_t *pos, const be_rope_yarn_t *y,
                          const be_weight_t *freq_factors)
{
    CR_UNUSED(be);
    const float *ff = freq_factors ? freq_factors->data : NULL;
    int half = n_rot / 2;
    float theta_scale = powf(y->freq_base, -2.0f / (float)n_rot);
    /* angles once per token, shared by its heads (up to ROPE_MAX pairs;
     * n_rot <= head_dim <= RN_MODEL_MAX_DIM, so per pair past that) */
    enum { ROPE_MAX = 256 };
    float cs[ROPE_MAX], sn[ROPE_MAX];
    const be_vec_ops_t *vec = be_vec_ops();
    for (int t = 0; t < n; t++) {
        if (half <= ROPE_MAX) {
            float theta = (float)pos[t];
            for (int i = 0; i < half; i++) {
                yarn_angle(y, ff ? theta / ff[i] : theta, i, &cs[i], &sn[i]);
                theta *= theta_scale;
            }
        }
        for (int h = 0; h < n_head; h++) {
            float *v = x + ((size_t)t * n_head + h) * head_dim;
            if (half <= ROPE_MAX) {
                if (y->normal) /* mistral3: llama's adjacent pairs */
                    vec->rope_pairs(half, v, cs, sn);
                else
                    vec->rope_halves(half, v, v + half, cs, sn);
                continue;
            }
            float theta = (float)pos[t];
            for (int i = 0; i < half; i++) {
                float c, s;
                yarn_angle(y, ff ? theta / ff[i] : theta, i, &c, &s);
                int a = y->normal ? 2 * i : i, b = y->normal ? 2 * i + 1 : i + half;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
                theta *= theta_scale;
            }
        }
    }
}

static void ext_swiglu_oai(be_backend_t *be, float *y, const float *gate, const float *up,
                           size_t n, float alpha, float limit)
{
    CR_UNUSED(be);
    for (size_t i = 0; i < n; i++) {
        float g = fminf(gate[i], limit);
        float u = fminf(fmaxf(up[i], -limit), limit);
        y[i] = g / (1.0f + expf(alpha * -g)) * (u + 1.0f);
    }
}

static void ext_add_row_of(be_backend_t *be, float *y, const be_weight_t *b, int64_t r,
                           int n)
{
    CR_UNUSED(be);
    size_t cols = (size_t)b->n_cols;
    const float *bv = (const float *)((const uint8_t *)b->data + (size_t)r * b->row_bytes);
    for (int t = 0; t < n; t++) {
        float *yr = y + (size_t)t * cols;
        for (size_t i = 0; i < cols; i++)
            yr[i] += bv[i];
    }
}

/* ---- M-RoPE (qwen2-vl) --------------------------------------------------- */

static void ext_rope_multi(be_backend_t *be, float *x, int n, int n_head, int head_dim,
                           int n_rot, const int32_t *pos, const int sections[4],
                           float freq_base, bool vision)
{
    CR_UNUSED(be);
    int n_pairs = vision ? n_rot : n_rot / 2;
    int sect = sections[0] + sections[1] + sections[2] + sections[3];
    int b1 = sections[0], b2 = b1 + sections[1], b3 = b2 + sections[2];
    float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    enum { ROPE_MAX = 512 };
    float cs[ROPE_MAX], sn[ROPE_MAX];
    const be_vec_ops_t *vec = be_vec_ops();
    if (n_pairs > ROPE_MAX || sect <= 0)
        return; /* the loaders bound head_dim and check the sections */
    for (int t = 0; t < n; t++) {
        float th[4];
        for (int p = 0; p < 4; p++)
            th[p] = (float)pos[(size_t)p * n + t];
        for (int i = 0; i < n_pairs; i++) {
            int s = i % sect;
            /* the vision kind restarts a plane's angle at its section */
            if (vision && (s == 0 || s == b1 || s == b2 || s == b3)) {
                int p = s == 0 ? 0 : s == b1 ? 1 : s == b2 ? 2 : 3;
                th[p] = (float)pos[(size_t)p * n + t];
            }
            int p = s < b1 ? 0 : s < b2 ? 1 : s < b3 ? 2 : 3;
            cs[i] = cosf(th[p]), sn[i] = sinf(th[p]);
            for (int q = 0; q < 4; q++)
                th[q] *= theta_scale;
        }
        for (int h = 0; h < n_head; h++) {
            float *v = x + ((size_t)t * n_head + h) * head_dim;
            vec->rope_halves(n_pairs, v, v + (vision ? n_rot : n_pairs), cs, sn);
        }
    }
}

static const be_ops_ext_t cpu_ext_ops = {
    .rope_neox = ext_rope_neox,
    .add_rows = ext_add_rows,
    .scale = ext_scale,
    .geglu = ext_geglu,
    .attention_ext = be_cpu_attention_ext,
    .layernorm = ext_layernorm,
    .gelu = ext_gelu,
    .matmul_rows = ext_matmul_rows,
    .gather_rows = ext_gather_rows,
    .scatter_add = be_cpu_scatter_add,
    .matmul_experts = be_cpu_matmul_experts,
    .matmul_group = be_cpu_matmul_group,
    .rope_yarn = ext_rope_yarn,
    .swiglu_oai = ext_swiglu_oai,
    .add_row_of = ext_add_row_of,
    .gelu_quick = ext_gelu_quick,
    .rope_multi = ext_rope_multi,
    .matmul_wide = be_cpu_matmul_wide,
    .attention_full = be_cpu_attention_full,
};

const be_ops_ext_t *be_cpu_ext_ops(const be_backend_t *be)
{
    CR_UNUSED(be);
    return &cpu_ext_ops;
}
