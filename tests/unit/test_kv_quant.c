/* test_kv_quant.c: the KV cache in Q8_0 / Q4_0 (OLLAMA_KV_CACHE_TYPE).
 *
 * Ops (backend_cpu.c, ops_extra.c, attn_kvq.c):
 *   - kv_store quantizes each row: every stored element read back through
 *     the scalar dequantizer is within the format's bound of the input
 *     (Q8_0: half a step amax/127 plus the f16 rounding of the scale,
 *     127 d 2^-11 <= amax/2048; Q4_0: a full step amax/8, the side
 *     opposite the max clamps at +7, plus the same), and rows stored in two
 *     calls (`at`) equal rows stored in one.
 *   - attention (threaded op) and attention_ext (window, soft-cap) with and
 *     without sinks, on both types, against a double reference written
 *     here from the definition: K and V read back with the scalar
 *     dequantizer, q quantized to Q8_0 by the scalar quantizer (what the
 *     kernels dot with K, as llama.cpp's flash attention does), softmax and
 *     weighted sum in double. Both sides use the same quantized numbers, so
 *     the only difference is f32 rounding of sums of <= 16 terms of
 *     magnitude <= ~4: 1e-4 absolute is ~100x that, while a wrong block,
 *     head, row stride or dropped sink moves outputs by 1e-2..1.
 *   - be_kvq_attend at the scalar level and at the detected one (AVX2 K
 *     dot, exp and V sums) against the same reference, and the AVX2 V
 *     accumulation bitwise equal to the scalar one.
 * Model (forward.c): logits with a q8_0 cache against an f16 cache on
 * synthetic llama, qwen3, gemma2 (soft-cap, sliding window), gemma3
 * (sliding window through pointer offsets) and gpt-oss (sinks, YaRN) at
 * every prompt position and over decode steps: cosine >= 0.999 (issue 13;
 * measured 0.99983..0.99995, printed). q4_0: cosine >= 0.75, a sanity
 * floor, not a quality claim. Why no tighter bound: a Q4_0 element's error
 * is up to a full step amax/8 against Q8_0's half step amax/254 (~30x),
 * and once attention is peaked (gpt-oss's synthetic sinks and scores span
 * several units) that error moves the softmax weights themselves, so
 * 1 - cosine is no longer a small second-order quantity (measured
 * 0.97..0.99 on the dense models, 0.81 on gpt-oss). Q4_0's arithmetic is
 * pinned exactly by the op checks above; the floor only catches a cache
 * read with the wrong type or layout (cosines near 0). Also: the cache's bytes
 * (exactly 34/32 and 18/32 per element), a second sequence's cache
 * (batched, bitwise equal to alone), and a head_dim that is not a multiple
 * of 32 refused. */
#include "lib/prelude.h"

#include <math.h>

#include "lib/gguf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/attn_kvq.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"

#define T 16   /* cache rows */
#define NQ 3   /* queries, at positions T-NQ.. */
#define H 4    /* query heads */
#define HKV 2  /* kv heads */
#define HD 64  /* head_dim: two blocks per head */
#define ROW (HKV * HD)
#define OP_TOL 1e-4

static be_backend_t *be_g;
static uint64_t rng_g = 0x9e3779b97f4a7c15ull;

static float frand(void) /* uniform in [-1, 1) */
{
    rng_g ^= rng_g << 13;
    rng_g ^= rng_g >> 7;
    rng_g ^= rng_g << 17;
    return (float)((double)(rng_g >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

static const char *tname(cr_type_t t)
{
    return cr_kv_cache_type_name(t);
}

/* ---- kv_store ---------------------------------------------------------- */

static void check_store(cr_type_t t, const float *src, const uint8_t *cache)
{
    const be_type_traits_t *sc = be_type_traits_at(t, BE_SIMD_SCALAR);
    size_t rb = be_kv_row_bytes(t, ROW);
    float back[ROW];
    double worst = 0;
    for (int r = 0; r < T; r++) {
        sc->to_float(cache + (size_t)r * rb, back, ROW);
        for (int b = 0; b < ROW; b += 32) {
            float amax = 0;
            for (int i = b; i < b + 32; i++)
                amax = fmaxf(amax, fabsf(src[r * ROW + i]));
            double step = t == CR_TYPE_Q8_0 ? amax / 254.0 : amax / 8.0;
            double bound = step + amax / 2048.0 + 1e-7;
            for (int i = b; i < b + 32; i++) {
                double e = fabs((double)back[i] - src[r * ROW + i]);
                worst = fmax(worst, e / bound);
            }
        }
    }
    CHECK_MSG(worst <= 1.0, "%s kv_store: error %.3f x the bound", tname(t), worst);
}

/* ---- attention reference ------------------------------------------------ */

/* out [NQ][H][HD] from the quantized caches, in double (see the top). */
static void ref_attention(cr_type_t t, const float *q, const uint8_t *kc, const uint8_t *vc,
                          float scale, float softcap, int window, const float *sinks,
                          double *out)
{
    const be_type_traits_t *sc = be_type_traits_at(t, BE_SIMD_SCALAR);
    const be_type_traits_t *q8 = be_type_traits_at(CR_TYPE_Q8_0, BE_SIMD_SCALAR);
    size_t rb = be_kv_row_bytes(t, ROW);
    static float k[T][ROW], v[T][ROW];
    for (int r = 0; r < T; r++) {
        sc->to_float(kc + (size_t)r * rb, k[r], ROW);
        sc->to_float(vc + (size_t)r * rb, v[r], ROW);
    }
    for (int i = 0; i < NQ; i++) {
        int qpos = T - NQ + i;
        int first = window > 0 && qpos - window + 1 > 0 ? qpos - window + 1 : 0;
        for (int h = 0; h < H; h++) {
            int hk = h / (H / HKV);
            be_block_q8_0_t blocks[HD / 32];
            float qq[HD];
            q8->from_float(q + ((size_t)i * H + h) * HD, blocks, HD);
            q8->to_float(blocks, qq, HD);
            double s[T], mx = sinks ? sinks[h] : -INFINITY, sum = 0;
            for (int j = first; j <= qpos; j++) {
                double d = 0;
                for (int e = 0; e < HD; e++)
                    d += (double)qq[e] * k[j][hk * HD + e];
                d *= scale;
                if (softcap > 0)
                    d = softcap * tanh(d / softcap);
                s[j] = d;
                mx = fmax(mx, d);
            }
            if (sinks)
                sum += exp(sinks[h] - mx);
            for (int j = first; j <= qpos; j++)
                sum += (s[j] = exp(s[j] - mx));
            double *o = out + ((size_t)i * H + h) * HD;
            for (int e = 0; e < HD; e++)
                o[e] = 0;
            for (int j = first; j <= qpos; j++)
                for (int e = 0; e < HD; e++)
                    o[e] += s[j] / sum * v[j][hk * HD + e];
        }
    }
}

static double max_diff(const float *a, const double *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void test_ops(cr_type_t t)
{
    static float kf[T * ROW], vf[T * ROW], q[NQ * H * HD], out[NQ * H * HD];
    static double ref[NQ * H * HD];
    float sinks_v[H];
    for (size_t i = 0; i < CR_ARRAY_LEN(kf); i++) {
        kf[i] = 2 * frand();
        vf[i] = frand();
    }
    for (size_t i = 0; i < CR_ARRAY_LEN(q); i++)
        q[i] = frand();
    for (int h = 0; h < H; h++)
        sinks_v[h] = 1.0f + frand();
    be_weight_t sinks = {.name = "sinks", .type = CR_TYPE_F32, .n_cols = H, .n_rows = 1,
                         .row_bytes = H * 4, .data = sinks_v};
    size_t rb = be_kv_row_bytes(t, ROW);
    CHECK_EQ_INT(rb, ROW / 32 * (t == CR_TYPE_Q8_0 ? 34 : 18));
    CHECK(be_kv_type_supported(be_g, t));
    uint8_t *kc = be_g->ops->alloc(be_g, T * rb), *vc = be_g->ops->alloc(be_g, T * rb);
    uint8_t *k2 = be_g->ops->alloc(be_g, T * rb);
    /* K in two calls (rows 0..4, then 5..T-1 at 5), V in one */
    be_g->ops->kv_store(be_g, kc, t, kf, 5, 0, ROW);
    be_g->ops->kv_store(be_g, kc, t, kf + 5 * ROW, T - 5, 5, ROW);
    be_g->ops->kv_store(be_g, vc, t, vf, T, 0, ROW);
    be_g->ops->kv_store(be_g, k2, t, kf, T, 0, ROW);
    CHECK_MSG(!memcmp(kc, k2, T * rb), "%s: kv_store at an offset differs", tname(t));
    check_store(t, kf, kc);
    check_store(t, vf, vc);

    cr_err_t err;
    CHECK_EQ_INT(be_g->ops->reserve(be_g, NQ, H * HD, T, H, &err), CR_OK);
    const be_ops_ext_t *ext = be_ext_ops(be_g);
    float scratch[2 * T + 2 * HD];
    CHECK(be_attention_ext_scratch(T, HD) <= CR_ARRAY_LEN(scratch));
    static const struct {
        bool ext;
        float softcap;
        int window;
    } cases[] = {{false, 0, 0}, {true, 0, 0}, {true, 0, 5}, {true, 3, 0}, {true, 3, 4}};
    for (size_t c = 0; c < CR_ARRAY_LEN(cases); c++) {
        for (int with_sinks = 0; with_sinks < 2; with_sinks++) {
            be_attn_t a = {.n_tok = NQ, .pos0 = T - NQ, .n_head = H, .n_head_kv = HKV,
                           .head_dim = HD, .scale = 0.125f,
                           .sinks = with_sinks ? &sinks : NULL, .kv_type = t};
            if (cases[c].ext)
                ext->attention_ext(be_g, out, q, kc, vc, &a, cases[c].softcap,
                                   cases[c].window, scratch);
            else
                be_g->ops->attention(be_g, out, q, kc, vc, &a);
            ref_attention(t, q, kc, vc, a.scale, cases[c].softcap, cases[c].window,
                          with_sinks ? sinks_v : NULL, ref);
            double d = max_diff(out, ref, CR_ARRAY_LEN(out));
            CHECK_MSG(d <= OP_TOL, "%s attention case %zu sinks %d: differs by %g",
                      tname(t), c, with_sinks, d);
        }
    }

    /* the kernel itself at the scalar and the detected level */
    be_simd_t levels[] = {BE_SIMD_SCALAR, be_simd_detect()};
    ref_attention(t, q, kc, vc, 0.125f, 0, 0, sinks_v, ref);
    for (size_t l = 0; l < CR_ARRAY_LEN(levels); l++) {
        be_block_q8_0_t q8[HD / 32];
        float scores[T];
        for (int i = 0; i < NQ; i++) {
            for (int h = 0; h < H; h++) {
                be_kvq_head_t kh = {.type = t, .level = levels[l], .head_dim = HD,
                                    .k = kc + (size_t)(h / 2) * (rb / HKV),
                                    .v = vc + (size_t)(h / 2) * (rb / HKV),
                                    .row_bytes = rb, .n_kv = T - NQ + i + 1,
                                    .scale = 0.125f, .sink = &sinks_v[h]};
                size_t off = ((size_t)i * H + h) * HD;
                be_kvq_attend(&kh, q + off, scores, q8, out + off);
            }
        }
        double d = max_diff(out, ref, CR_ARRAY_LEN(out));
        CHECK_MSG(d <= OP_TOL, "%s be_kvq_attend at %s: differs by %g", tname(t),
                  be_simd_name(levels[l]), d);
    }
    be_g->ops->free(be_g, kc);
    be_g->ops->free(be_g, vc);
    be_g->ops->free(be_g, k2);
}

/* The AVX2 V accumulation takes the scalar's float steps: same bits. */
static void test_axpy_levels(void)
{
    if (be_simd_detect() < BE_SIMD_AVX2) {
        fprintf(stderr, "axpy: AVX2 not in use (CPU or CORRAL_CPU_SIMD): not compared\n");
        return;
    }
    float row[HD], a[HD], b[HD];
    be_block_q8_0_t q8[HD / 32];
    be_block_q4_0_t q4[HD / 32];
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < HD; i++) {
            row[i] = 3 * frand();
            a[i] = b[i] = frand();
        }
        float p = 0.5f + frand() / 4;
        be_type_traits_at(CR_TYPE_Q8_0, BE_SIMD_SCALAR)->from_float(row, q8, HD);
        be_type_traits_at(CR_TYPE_Q4_0, BE_SIMD_SCALAR)->from_float(row, q4, HD);
        be_kvq_axpy_q8_0(HD, p, q8, a);
        be_kvq_axpy_q8_0_avx2(HD, p, q8, b);
        be_kvq_axpy_q4_0(HD, p, q4, a);
        be_kvq_axpy_q4_0_avx2(HD, p, q4, b);
        CHECK_MSG(!memcmp(a, b, sizeof a), "axpy: AVX2 differs from scalar (rep %d)", rep);
    }
}

/* ---- whole models ---------------------------------------------------- */

#define N_PROMPT 40
#define N_DECODE 4
#define N_CTX 64

static rn_model_t *load_synth(const rn_synth_opts_t *so, void **bytes)
{
    size_t len = 0;
    cr_err_t err;
    cr_err_clear(&err);
    *bytes = NULL;
    if (rn_synth_write_memory(so, bytes, &len, &err)) {
        CHECK_MSG(false, "synth %s: %s", so->arch, err.msg);
        return NULL;
    }
    cr_gguf_t *g = NULL;
    rn_model_t *m = NULL;
    cr_status_t st = cr_gguf_open_memory(*bytes, len, &g, &err);
    if (!st)
        st = rn_model_load_gguf(&g, be_g, &m, &err);
    CHECK_MSG(st == CR_OK, "load %s: %s", so->arch, err.msg);
    return m;
}

static rn_ctx_t *new_ctx(const rn_model_t *m, cr_type_t t, int n_seq)
{
    cr_err_t err;
    cr_err_clear(&err);
    rn_ctx_t *c = NULL;
    /* n_batch 16: the prompt runs in chunks, later ones over cached rows */
    rn_ctx_opts_t o = {.n_ctx = N_CTX, .n_batch = 16, .n_seq = n_seq, .kv_type = t};
    CHECK_MSG(rn_ctx_new(m, &o, &c, &err) == CR_OK, "ctx %s: %s", tname(t), err.msg);
    return c;
}

static double cosine(const float *a, const float *b, int n)
{
    double ab = 0, aa = 0, bb = 0;
    for (int i = 0; i < n; i++) {
        ab += (double)a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += (double)b[i] * b[i];
    }
    return ab / sqrt(aa * bb);
}

/* Every prompt position's logits, then N_DECODE decode steps, into
 * out [N_PROMPT + N_DECODE][V]. */
static void run(rn_ctx_t *c, int V, float *out)
{
    int32_t tok[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++)
        tok[i] = (int32_t)((3 + i * 37) % V);
    cr_err_t err;
    CHECK_EQ_INT(rn_ctx_eval(c, tok, N_PROMPT, 0, out, &err), CR_OK);
    for (int s = 0; s < N_DECODE; s++) {
        int32_t next = (int32_t)((11 + s * 53) % V);
        CHECK_EQ_INT(rn_ctx_eval(c, &next, 1, N_PROMPT + s, NULL, &err), CR_OK);
        memcpy(out + (size_t)(N_PROMPT + s) * V, rn_ctx_logits(c), (size_t)V * 4);
    }
}

static void test_model(const char *label, const rn_synth_opts_t *so)
{
    void *bytes = NULL;
    rn_model_t *m = load_synth(so, &bytes);
    if (!m) {
        free(bytes);
        return;
    }
    const rn_hparams_t *hp = rn_model_hparams(m);
    int V = hp->n_vocab, rows = N_PROMPT + N_DECODE;
    float *f16 = calloc((size_t)rows * V, 4), *qt = calloc((size_t)rows * V, 4);
    rn_ctx_t *c = new_ctx(m, CR_TYPE_F16, 1);
    uint64_t f16_bytes = c ? rn_ctx_kv_bytes(c) : 0;
    if (c)
        run(c, V, f16);
    rn_ctx_destroy(&c);
    CHECK_EQ_INT(f16_bytes, (uint64_t)2 * hp->n_layers * N_CTX * hp->kv_dim * 2);

    static const struct {
        cr_type_t t;
        double min_cos;
        uint64_t num, den; /* bytes per element */
    } types[] = {{CR_TYPE_Q8_0, 0.999, 34, 32}, {CR_TYPE_Q4_0, 0.75, 18, 32}};
    for (size_t k = 0; k < CR_ARRAY_LEN(types); k++) {
        c = new_ctx(m, types[k].t, 1);
        if (!c)
            continue;
        CHECK_EQ_INT(rn_ctx_kv_type(c), types[k].t);
        CHECK_EQ_INT(rn_ctx_kv_bytes(c), (uint64_t)2 * hp->n_layers * N_CTX * hp->kv_dim *
                                             types[k].num / types[k].den);
        run(c, V, qt);
        rn_ctx_destroy(&c);
        double worst = 1;
        for (int r = 0; r < rows; r++)
            worst = fmin(worst, cosine(f16 + (size_t)r * V, qt + (size_t)r * V, V));
        fprintf(stderr, "%-8s %s cache: min cosine vs f16 over %d rows %.6f (1-cos %.2e)\n",
                label, tname(types[k].t), rows, worst, 1 - worst);
        CHECK_MSG(worst >= types[k].min_cos, "%s %s: cosine %.6f < %.3f", label,
                  tname(types[k].t), worst, types[k].min_cos);
    }

    /* a second sequence's quantized cache: batched = alone, bitwise */
    rn_ctx_t *two = new_ctx(m, CR_TYPE_Q8_0, 2);
    if (two) {
        int32_t a[N_PROMPT], b[6];
        for (int i = 0; i < N_PROMPT; i++)
            a[i] = (int32_t)((5 + i * 13) % V);
        for (int i = 0; i < 6; i++)
            b[i] = (int32_t)((7 + i * 29) % V);
        cr_err_t err;
        /* 6 + 10 tokens fill n_batch (16); then sequence 1 alone */
        rn_ctx_span_t sp[2] = {{.seq = 0, .tokens = b, .n = 6, .pos = 0},
                               {.seq = 1, .tokens = a, .n = 10, .pos = 0}};
        CHECK_EQ_INT(rn_ctx_eval_batch(two, sp, 2, &err), CR_OK);
        sp[1] = (rn_ctx_span_t){.seq = 1, .tokens = a + 10, .n = 16, .pos = 10};
        CHECK_EQ_INT(rn_ctx_eval_batch(two, &sp[1], 1, &err), CR_OK);
        sp[1] = (rn_ctx_span_t){.seq = 1, .tokens = a + 26, .n = 6, .pos = 26};
        CHECK_EQ_INT(rn_ctx_eval_batch(two, &sp[1], 1, &err), CR_OK);
        rn_ctx_t *one = new_ctx(m, CR_TYPE_Q8_0, 1);
        if (one) {
            CHECK_EQ_INT(rn_ctx_eval(one, a, 32, 0, NULL, &err), CR_OK);
            CHECK_MSG(!memcmp(rn_ctx_seq_logits(two, 1), rn_ctx_logits(one), (size_t)V * 4),
                      "%s: q8_0 sequence 1 batched differs from alone", label);
        }
        rn_ctx_destroy(&one);
    }
    rn_ctx_destroy(&two);
    free(f16);
    free(qt);
    rn_model_destroy(&m);
    free(bytes);
}

static void test_models(void)
{
    rn_synth_opts_t so;
    rn_synth_defaults(&so); /* llama: head_dim = dim / heads = 32 */
    so.dim = 128;
    so.ctx = N_CTX;
    so.weight_std = 0.08f;
    test_model("llama", &so);

    rn_synth_defaults(&so);
    so.arch = "qwen3";
    so.type = CR_TYPE_Q8_0;
    so.head_dim = 32;
    so.ctx = N_CTX;
    test_model("qwen3", &so);

    rn_synth_defaults(&so);
    so.arch = "gemma2";
    so.head_dim = 32;
    so.ctx = N_CTX;
    so.sliding_window = 8; /* binds in the prompt: attention_ext's window */
    so.attn_softcap = 50.0f;
    so.final_softcap = 30.0f;
    test_model("gemma2", &so);

    rn_synth_defaults(&so);
    so.arch = "gemma3";
    so.head_dim = 32;
    so.n_layers = 3;
    so.ctx = N_CTX;
    so.sliding_window = 8; /* no soft-cap: attention_window's row offsets */
    so.swa_pattern = 2;
    test_model("gemma3", &so);

    rn_synth_defaults(&so);
    so.arch = "gpt-oss";
    so.seed = 3;
    so.n_layers = 3;
    so.head_dim = 32;
    so.ffn = 64;
    so.ctx = N_CTX;
    so.n_experts = 4;
    so.n_experts_used = 2;
    so.expert_ffn = 64;
    so.sliding_window = 4;
    so.rope_base = 150000.0f;
    so.rope_yarn = 32.0f;
    so.yarn_orig_ctx = 4096;
    so.weight_std = 0.1f;
    test_model("gpt-oss", &so);
}

/* Query heads of one GQA group share each K/V row: be_kvq_attend_heads
 * over 1..16 heads is each head's be_kvq_attend, bit for bit (scalar and
 * detected levels, sinks per head), and so is the backend's attention op,
 * which hands whole groups (or, for a decode step on more threads than kv
 * heads, parts of them) to it: G of 3, 8 and 16 on 3 threads, one and
 * five queries after 37 cached rows. */
static void test_grouped(cr_type_t t)
{
    enum { HK = 2, GMAX = 16, HDIM = 64, ROWS = 42 };
    static float kf[ROWS * HK * HDIM], vf[ROWS * HK * HDIM];
    static float q[5 * HK * GMAX * HDIM], got[5 * HK * GMAX * HDIM], want[5 * HK * GMAX * HDIM];
    float sinks_v[HK * GMAX];
    for (size_t i = 0; i < CR_ARRAY_LEN(kf); i++) {
        kf[i] = 2 * frand();
        vf[i] = frand();
    }
    for (size_t i = 0; i < CR_ARRAY_LEN(q); i++)
        q[i] = frand();
    for (size_t i = 0; i < CR_ARRAY_LEN(sinks_v); i++)
        sinks_v[i] = 1.0f + frand();
    cr_err_t err;
    be_backend_t *be3 = NULL;
    CHECK_EQ_INT(be_cpu_new(3, &be3, &err), CR_OK);
    if (!be3)
        return;
    size_t rb = be_kv_row_bytes(t, HK * HDIM);
    uint8_t *kc = be3->ops->alloc(be3, ROWS * rb), *vc = be3->ops->alloc(be3, ROWS * rb);
    be3->ops->kv_store(be3, kc, t, kf, ROWS, 0, HK * HDIM);
    be3->ops->kv_store(be3, vc, t, vf, ROWS, 0, HK * HDIM);
    static float scores[GMAX * ROWS];
    static be_block_q8_0_t q8[GMAX * HDIM / 32];
    be_simd_t levels[] = {BE_SIMD_SCALAR, be_simd_detect()};
    for (size_t l = 0; l < CR_ARRAY_LEN(levels); l++)
        for (int n = 1; n <= GMAX; n += n < 4 ? 1 : 4) {
            be_kvq_head_t kh = {.type = t, .level = levels[l], .head_dim = HDIM, .k = kc,
                                .v = vc, .row_bytes = rb, .n_kv = ROWS, .scale = 0.125f,
                                .sink = sinks_v};
            be_kvq_attend_heads(&kh, n, q, scores, ROWS, q8, got);
            for (int g = 0; g < n; g++) {
                kh.sink = &sinks_v[g];
                be_kvq_attend(&kh, q + g * HDIM, scores, q8, want + g * HDIM);
            }
            CHECK_MSG(!memcmp(got, want, (size_t)n * HDIM * sizeof *got),
                      "%s: %d heads at %s differ from one at a time", tname(t), n,
                      be_simd_name(levels[l]));
        }
    static const int groups[] = {3, 8, 16}, toks[] = {1, 5};
    for (size_t gi = 0; gi < CR_ARRAY_LEN(groups); gi++)
        for (size_t ti = 0; ti < CR_ARRAY_LEN(toks); ti++) {
            int G = groups[gi], nq = toks[ti], nh = HK * G;
            be_weight_t sinks = {.name = "sinks", .type = CR_TYPE_F32, .n_cols = nh,
                                 .n_rows = 1, .row_bytes = (size_t)nh * 4, .data = sinks_v};
            CHECK_EQ_INT(be3->ops->reserve(be3, nq, nh * HDIM, ROWS, nh, &err), CR_OK);
            be_attn_t a = {.n_tok = nq, .pos0 = ROWS - nq, .n_head = nh, .n_head_kv = HK,
                           .head_dim = HDIM, .scale = 0.125f, .sinks = &sinks, .kv_type = t};
            be3->ops->attention(be3, got, q, kc, vc, &a);
            for (int i = 0; i < nq; i++)
                for (int h = 0; h < nh; h++) {
                    be_kvq_head_t kh = {.type = t, .level = be_simd_detect(), .head_dim = HDIM,
                                        .k = kc + (size_t)(h / G) * (rb / HK),
                                        .v = vc + (size_t)(h / G) * (rb / HK),
                                        .row_bytes = rb, .n_kv = a.pos0 + i + 1,
                                        .scale = 0.125f, .sink = &sinks_v[h]};
                    size_t off = ((size_t)i * nh + h) * HDIM;
                    be_kvq_attend(&kh, q + off, scores, q8, want + off);
                }
            CHECK_MSG(!memcmp(got, want, (size_t)nq * nh * HDIM * sizeof *got),
                      "%s: attention op, groups of %d, %d queries: not the per-head bits",
                      tname(t), G, nq);
        }
    be3->ops->free(be3, kc);
    be3->ops->free(be3, vc);
    be_destroy(&be3);
}

/* A head_dim that is not a multiple of 32 cannot hold whole blocks per
 * head: refused, naming it (the engine then falls back to f16). */
static void test_refused(void)
{
    rn_synth_opts_t so;
    rn_synth_defaults(&so); /* head_dim 16 */
    void *bytes = NULL;
    rn_model_t *m = load_synth(&so, &bytes);
    if (m) {
        rn_ctx_t *c = NULL;
        cr_err_t err;
        cr_err_clear(&err);
        rn_ctx_opts_t o = {.n_ctx = 32, .kv_type = CR_TYPE_Q8_0};
        CHECK_EQ_INT(rn_ctx_new(m, &o, &c, &err), CR_E_UNSUPPORTED);
        CHECK_MSG(strstr(err.msg, "head_dim") && strstr(err.msg, "q8_0"), "%s", err.msg);
        CHECK(c == NULL);
        o.kv_type = CR_TYPE_Q4_1;
        CHECK_EQ_INT(rn_ctx_new(m, &o, &c, &err), CR_E_INVALID);
        o.kv_type = CR_TYPE_F16;
        CHECK_EQ_INT(rn_ctx_new(m, &o, &c, &err), CR_OK);
        CHECK_EQ_INT(rn_ctx_kv_type(c), CR_TYPE_F16);
        rn_ctx_destroy(&c);
    }
    rn_model_destroy(&m);
    free(bytes);
}

int main(void)
{
    cr_err_t err;
    if (be_cpu_new(2, &be_g, &err)) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    test_ops(CR_TYPE_Q8_0);
    test_ops(CR_TYPE_Q4_0);
    test_axpy_levels();
    test_grouped(CR_TYPE_Q8_0);
    test_grouped(CR_TYPE_Q4_0);
    test_models();
    test_refused();
    be_destroy(&be_g);
    return check_finish("kv_quant");
}
