/* bench_cuda.c: decode and prefill speed of the CUDA backend on a model of
 * realistic shape (never run by ctest).
 *
 *   bench-cuda [--shape 8b|1b|tiny] [--type q4_k_m|q8_0|f16] [--pp 512]
 *              [--tg 128] [--cpu]
 *
 * (--cpu runs the same sequence on the CPU backend: a check of the bench
 * itself, e.g. under ASan with --shape tiny.)
 * Builds the weights of a llama model of the given shape in device memory
 * (random blocks with small scales: the speed of a matrix-vector product
 * does not depend on the values, and no CPU quantizer has to run on
 * gigabytes), uploading each through weight_prepare so the load rate is
 * measured too, then runs the forward pass's op sequence (the one in
 * services/runner/model/forward.c, step for step) through the backend:
 * pp = one batch of --pp tokens (the cuBLAS path), tg = --tg single tokens
 * after it (the matrix-vector path), each ending with the logits download
 * that synchronizes. Prints tokens/s, the device's read bandwidth measured
 * in the same run, and tg's fraction of the bandwidth limit:
 * tg * (weight bytes read per token) / bandwidth.
 *
 * Shapes: 8b = Llama-3.1-8B (dim 4096, 32 layers, 32/8 heads, FFN 14336,
 * vocab 128256); 1b = Llama-3.2-1B (dim 2048, 16 layers, 32/8 heads, FFN
 * 8192, vocab 128256, tied output). q4_k_m = Q4_K matrices with Q6_K attn_v,
 * ffn_down and output, like llama.cpp's mix. */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cuda/be_cuda.h"

#include <math.h>
#include <time.h>

typedef struct shape {
    const char *name;
    int dim, n_layers, n_heads, n_kv_heads, ffn, vocab;
    bool tied;
} shape_t;

static const shape_t shapes[] = {
    {"8b", 4096, 32, 32, 8, 14336, 128256, false},
    {"1b", 2048, 16, 32, 8, 8192, 128256, true},
    {"tiny", 256, 2, 4, 2, 512, 1000, false}, /* for checking the bench itself */
};

typedef struct layer {
    be_weight_t attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
} layer_t;

static uint64_t rng_s = 88172645463325252ull;

static uint64_t rnd(void)
{
    rng_s ^= rng_s << 13;
    rng_s ^= rng_s >> 7;
    rng_s ^= rng_s << 17;
    return rng_s;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Host bytes of a [rows][cols] matrix of type t: random quants, scales set
 * to small finite values. Caller frees. */
static void *make_bytes(cr_type_t t, int64_t rows, int64_t cols, size_t *row_bytes)
{
    uint64_t rb = 0;
    if (!cr_type_row_bytes(t, (uint64_t)cols, &rb))
        return NULL;
    size_t total = (size_t)rb * (size_t)rows;
    uint8_t *p = malloc(total);
    if (!p)
        return NULL;
    for (size_t i = 0; i + 8 <= total; i += 8) {
        uint64_t r = rnd();
        memcpy(p + i, &r, 8);
    }
    uint16_t small = be_f32_to_f16(0.002f);
    if (t == CR_TYPE_F16) {
        uint16_t *h = (uint16_t *)p;
        for (size_t i = 0; i < total / 2; i++)
            h[i] = be_f32_to_f16((float)((int)(rnd() % 2001) - 1000) * 1e-5f);
    } else {
        const cr_type_info_t *ti = cr_type_info(t);
        size_t bb = ti->block_bytes;
        /* offsets of the f16 scale fields in each block */
        size_t off[2] = {0, 2};
        int n_off = 1;
        if (t == CR_TYPE_Q4_K || t == CR_TYPE_Q5_K)
            n_off = 2;
        else if (t == CR_TYPE_Q6_K)
            off[0] = 208;
        for (size_t b = 0; b + bb <= total; b += bb)
            for (int k = 0; k < n_off; k++)
                memcpy(p + b + off[k], &small, 2);
    }
    *row_bytes = (size_t)rb;
    return p;
}

/* One distinct host buffer per (role), shared by every layer. */
typedef struct hostw {
    void *bytes;
    size_t row_bytes;
    cr_type_t type;
    int64_t rows, cols;
} hostw_t;

static bool prepare(be_backend_t *be, be_weight_t *w, const char *name, const hostw_t *h,
                    uint64_t *bytes)
{
    *w = (be_weight_t){.name = name, .type = h->type, .n_cols = h->cols, .n_rows = h->rows,
                       .row_bytes = h->row_bytes, .data = h->bytes};
    cr_err_t err;
    cr_err_clear(&err);
    if (be->ops->weight_prepare(be, w, &err)) {
        fprintf(stderr, "prepare %s: %s\n", name, err.msg);
        return false;
    }
    *bytes += (uint64_t)h->rows * h->row_bytes;
    return true;
}

int main(int argc, char **argv)
{
    const char *shape_name = "8b", *type_name = "q4_k_m";
    int pp = 512, tg = 128;
    bool on_cpu = false;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--cpu"))
            on_cpu = true;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--cpu"))
            i--; /* a flag without a value */
        else if (!strcmp(argv[i], "--shape"))
            shape_name = argv[i + 1];
        else if (!strcmp(argv[i], "--type"))
            type_name = argv[i + 1];
        else if (!strcmp(argv[i], "--pp"))
            pp = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tg"))
            tg = atoi(argv[i + 1]);
    }
    const shape_t *S = NULL;
    for (size_t i = 0; i < CR_ARRAY_LEN(shapes); i++)
        if (!strcmp(shapes[i].name, shape_name))
            S = &shapes[i];
    cr_type_t mt = CR_TYPE_Q4_K, mix = CR_TYPE_Q6_K;
    if (!strcmp(type_name, "q4_k_m"))
        mt = CR_TYPE_Q4_K, mix = CR_TYPE_Q6_K;
    else if (!strcmp(type_name, "q8_0"))
        mt = mix = CR_TYPE_Q8_0;
    else if (!strcmp(type_name, "f16"))
        mt = mix = CR_TYPE_F16;
    else
        S = NULL;
    if (!S || pp < 1 || tg < 1 || pp > 4096) {
        fprintf(stderr, "usage: bench-cuda [--shape 8b|1b|tiny] [--type q4_k_m|q8_0|f16] "
                        "[--pp N] [--tg N] [--cpu]\n");
        return 2;
    }
    if (!on_cpu && be_cuda_device_count() == 0) {
        printf("bench-cuda: no CUDA device\n");
        return 77;
    }
    be_backend_t *be = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    if (on_cpu ? be_cpu_new(0, &be, &err) : be_cuda_new(0, &be, &err)) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    const be_ops_t *op = be->ops;
    int D = S->dim, L = S->n_layers, H = S->n_heads, HK = S->n_kv_heads, F = S->ffn;
    int hd = D / H, KV = HK * hd, V = S->vocab;
    int n_ctx = pp + tg + 8;
    printf("bench-cuda: shape %s (dim %d, %d layers, %d/%d heads, ffn %d, vocab %d), %s\n",
           S->name, D, L, H, HK, F, V, type_name);

    /* ---- weights ---- */
    float *ones = malloc((size_t)CR_MAX(D, F) * sizeof(float));
    for (int i = 0; i < CR_MAX(D, F); i++)
        ones[i] = 1.0f;
    hostw_t hw[8] = {
        {NULL, 0, mt, D, D},     /* wq */
        {NULL, 0, mt, KV, D},    /* wk */
        {NULL, 0, mix, KV, D},   /* wv */
        {NULL, 0, mt, D, D},     /* wo */
        {NULL, 0, mt, F, D},     /* gate, up */
        {NULL, 0, mix, D, F},    /* down */
        {NULL, 0, mix, V, D},    /* token_embd / output */
        {ones, (size_t)D * 4, CR_TYPE_F32, 1, D}, /* norms */
    };
    double t0 = now_s();
    for (int i = 0; i < 7; i++) {
        hw[i].bytes = make_bytes(hw[i].type, hw[i].rows, hw[i].cols, &hw[i].row_bytes);
        if (!hw[i].bytes) {
            fprintf(stderr, "out of host memory\n");
            return 1;
        }
    }
    printf("host weights generated in %.1f s\n", now_s() - t0);
    layer_t *ly = calloc((size_t)L, sizeof *ly);
    be_weight_t embd, out_norm, output;
    uint64_t wbytes = 0, read_per_tok = 0;
    bool ok = true;
    t0 = now_s();
    for (int l = 0; l < L && ok; l++) {
        layer_t *y = &ly[l];
        ok = prepare(be, &y->attn_norm, "attn_norm", &hw[7], &wbytes) &&
             prepare(be, &y->wq, "attn_q", &hw[0], &wbytes) &&
             prepare(be, &y->wk, "attn_k", &hw[1], &wbytes) &&
             prepare(be, &y->wv, "attn_v", &hw[2], &wbytes) &&
             prepare(be, &y->wo, "attn_output", &hw[3], &wbytes) &&
             prepare(be, &y->ffn_norm, "ffn_norm", &hw[7], &wbytes) &&
             prepare(be, &y->w_gate, "ffn_gate", &hw[4], &wbytes) &&
             prepare(be, &y->w_up, "ffn_up", &hw[4], &wbytes) &&
             prepare(be, &y->w_down, "ffn_down", &hw[5], &wbytes);
    }
    ok = ok && prepare(be, &embd, "token_embd", &hw[6], &wbytes) &&
         prepare(be, &out_norm, "output_norm", &hw[7], &wbytes);
    read_per_tok = wbytes; /* every matrix once, all of token_embd's if tied */
    if (ok && !S->tied) {
        ok = prepare(be, &output, "output", &hw[6], &wbytes);
        read_per_tok = wbytes - (uint64_t)V * hw[6].row_bytes + hw[6].row_bytes;
    } else {
        output = embd;
    }
    double load_s = now_s() - t0;
    if (!ok)
        return 1;
    printf("weights: %.2f GiB uploaded in %.2f s (%.1f GB/s through pinned staging)\n",
           (double)wbytes / (1 << 30), load_s, (double)wbytes / load_s / 1e9);

    /* ---- buffers (as rn_ctx_new) ---- */
    size_t B = (size_t)pp;
    float *x = op->alloc(be, B * D * 4), *xb = op->alloc(be, B * D * 4),
          *xb2 = op->alloc(be, B * D * 4), *q = op->alloc(be, B * D * 4),
          *k = op->alloc(be, B * KV * 4), *v = op->alloc(be, B * KV * 4),
          *att = op->alloc(be, B * D * 4), *hb = op->alloc(be, B * F * 4),
          *hb2 = op->alloc(be, B * F * 4), *logits = op->alloc(be, (size_t)V * 4);
    size_t layer_cache = (size_t)n_ctx * KV;
    uint16_t *kc = op->alloc(be, (size_t)L * layer_cache * 2);
    uint16_t *vc = op->alloc(be, (size_t)L * layer_cache * 2);
    if (!x || !xb || !xb2 || !q || !k || !v || !att || !hb || !hb2 || !logits || !kc || !vc) {
        fprintf(stderr, "out of device memory for buffers\n");
        return 1;
    }
    if (op->reserve(be, pp, CR_MAX(D, F), n_ctx, H, &err)) {
        fprintf(stderr, "reserve: %s\n", err.msg);
        return 1;
    }
    int32_t *tok = malloc(B * sizeof(int32_t)), *pos = malloc(B * sizeof(int32_t));
    float *host_logits = malloc((size_t)V * 4);
    for (size_t i = 0; i < B; i++)
        tok[i] = (int32_t)(rnd() % (uint64_t)V);

    /* forward_chunk's op sequence, then the last row's logits */
    double pp_s = 0, tg_s = 0;
    for (int phase = 0; phase < 2; phase++) {
        int steps = phase == 0 ? 1 : tg;
        double ts = now_s();
        for (int s = 0; s < steps; s++) {
            int n = phase == 0 ? pp : 1, p = phase == 0 ? 0 : pp + s;
            for (int t = 0; t < n; t++)
                pos[t] = p + t;
            be_attn_t a = {.n_tok = n, .pos0 = p, .n_head = H, .n_head_kv = HK,
                           .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                           .kv_type = CR_TYPE_F16};
            op->get_rows(be, &embd, tok + (phase ? s % pp : 0), n, x);
            for (int l = 0; l < L; l++) {
                const layer_t *y = &ly[l];
                uint16_t *kl = kc + (size_t)l * layer_cache, *vl = vc + (size_t)l * layer_cache;
                op->rmsnorm(be, xb, x, &y->attn_norm, n, D, 1e-5f);
                op->matmul(be, &y->wq, xb, n, q);
                op->matmul(be, &y->wk, xb, n, k);
                op->matmul(be, &y->wv, xb, n, v);
                op->rope(be, q, n, H, hd, hd, pos, 500000.0f, NULL);
                op->rope(be, k, n, HK, hd, hd, pos, 500000.0f, NULL);
                op->kv_store(be, kl, CR_TYPE_F16, k, n, p, KV);
                op->kv_store(be, vl, CR_TYPE_F16, v, n, p, KV);
                op->attention(be, att, q, kl, vl, &a);
                op->matmul(be, &y->wo, att, n, xb2);
                op->add(be, x, xb2, (size_t)n * D);
                op->rmsnorm(be, xb, x, &y->ffn_norm, n, D, 1e-5f);
                op->matmul(be, &y->w_gate, xb, n, hb);
                op->matmul(be, &y->w_up, xb, n, hb2);
                op->swiglu(be, hb, hb, hb2, (size_t)n * F);
                op->matmul(be, &y->w_down, hb, n, xb2);
                op->add(be, x, xb2, (size_t)n * D);
            }
            op->rmsnorm(be, xb, x + (size_t)(n - 1) * D, &out_norm, 1, D, 1e-5f);
            op->matmul(be, &output, xb, 1, logits);
            op->download(be, host_logits, logits, (size_t)V * 4);
        }
        if (phase == 0)
            pp_s = now_s() - ts;
        else
            tg_s = now_s() - ts;
    }
    if (be_cuda_check(be, &err)) {
        fprintf(stderr, "cuda error: %s\n", err.msg);
        return 1;
    }
    double bw = 0;
    if (!on_cpu && be_cuda_read_bandwidth(be, (size_t)4 << 30, &bw, &err))
        fprintf(stderr, "bandwidth: %s\n", err.msg);
    double pp_rate = pp / pp_s, tg_rate = tg / tg_s;
    printf("pp%d: %.1f tok/s\n", pp, pp_rate);
    printf("tg%d: %.1f tok/s (%.2f ms/token)\n", tg, tg_rate, 1e3 * tg_s / tg);
    printf("read bandwidth: %.0f GB/s; weights read per token %.2f GiB; "
           "tg at %.1f%% of the bandwidth limit (%.1f tok/s)\n",
           bw, (double)read_per_tok / (1 << 30),
           bw > 0 ? 100.0 * tg_rate * (double)read_per_tok / (bw * 1e9) : 0,
           bw > 0 ? bw * 1e9 / (double)read_per_tok : 0);
    /* teardown */
    for (int l = 0; l < L; l++) {
        be_weight_t *all[] = {&ly[l].attn_norm, &ly[l].wq, &ly[l].wk, &ly[l].wv, &ly[l].wo,
                              &ly[l].ffn_norm, &ly[l].w_gate, &ly[l].w_up, &ly[l].w_down};
        for (size_t i = 0; i < CR_ARRAY_LEN(all); i++)
            op->weight_release(be, all[i]);
    }
    op->weight_release(be, &embd);
    op->weight_release(be, &out_norm);
    if (!S->tied)
        op->weight_release(be, &output);
    void *bufs[] = {x, xb, xb2, q, k, v, att, hb, hb2, logits, kc, vc};
    for (size_t i = 0; i < CR_ARRAY_LEN(bufs); i++)
        op->free(be, bufs[i]);
    be_destroy(&be);
    for (int i = 0; i < 7; i++)
        free(hw[i].bytes);
    free(ones);
    free(ly);
    free(tok);
    free(pos);
    free(host_logits);
    return 0;
}
