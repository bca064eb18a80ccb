/* test_cuda_ops.c: every op of the CUDA backend against the CPU backend.
 *
 * Random inputs (seeded), the same op on both backends, and the difference
 * bounded by a stated tolerance:
 *   - matmul, matrix-vector path (n <= 8): the GPU quantizes activations
 *     exactly as the CPU does (Q8_0/Q8_1/Q8_K; f16/bf16 rounding), so the
 *     error is float summation order only: 1e-4 of the largest output.
 *   - matmul, cuBLAS path (n > 8 or forced): F32 1e-4, F16/BF16 (the CPU
 *     rounds activations the same way) 1e-3, quantized types (F16
 *     activations against the CPU's 8-bit ones) 3e-2.
 *   - get_rows, rmsnorm, swiglu, add, softmax: 1e-5 relative; rope 1e-5
 *     absolute on values in [-1, 1]; kv_store bit-exact F16, a quantized
 *     cache type refused (CR_E_UNSUPPORTED through check).
 *   - attention: 3e-3 absolute (the CPU rounds probabilities to F16, the
 *     GPU keeps them in f32), decode and prefill, GQA, head sizes 64, 80,
 *     128, contexts long enough to split the keys across blocks.
 *   - the optional ops (be_cuda_ops_ext): NEOX rope with factors, scale
 *     and mscale 1e-5 absolute; add_rows, scale 1e-6 and geglu 1e-5
 *     relative; attention_ext with soft-cap and sliding window 3e-3.
 * Plus the error contract: unsupported types and bad rows refused with the
 * tensor's name, no device -> CR_E_UNAVAILABLE, a huge alloc -> NULL,
 * device memory and byte counts. Skips (77) without a CUDA device. */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cuda/be_cuda.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/unit/check.h"

#include <math.h>

#define MAX_TOK 32
#define MAX_COLS 1024
#define MAX_CTX 2048
#define MAX_HEAD 8

static be_backend_t *cpu_g, *gpu_g;

/* One weight in both backends. */
typedef struct wpair {
    void *bytes;
    be_weight_t c, g;
    bool ok;
} wpair_t;

/* Random [rows][cols] weight of `type` (values in [-1, 1]), prepared on
 * both backends. */
static bool wpair_make(wpair_t *p, cr_type_t type, int64_t rows, int64_t cols, float scale)
{
    memset(p, 0, sizeof *p);
    const be_type_traits_t *tt = be_type_traits(type);
    uint64_t rb = 0;
    if (!tt || !cr_type_row_bytes(type, (uint64_t)cols, &rb))
        return false;
    float *f = malloc((size_t)(rows * cols) * sizeof(float));
    p->bytes = malloc((size_t)rows * rb);
    if (!f || !p->bytes) {
        free(f);
        return false;
    }
    rng_fill(f, (size_t)(rows * cols), scale);
    for (int64_t r = 0; r < rows; r++)
        tt->from_float(f + r * cols, (uint8_t *)p->bytes + (size_t)r * rb, cols);
    free(f);
    p->c = (be_weight_t){.name = "w", .type = type, .n_cols = cols, .n_rows = rows,
                         .row_bytes = rb, .data = p->bytes};
    p->g = p->c;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = cpu_g->ops->weight_prepare(cpu_g, &p->c, &err);
    CHECK_MSG(st == CR_OK, "cpu prepare %s: %s", tt->name, err.msg);
    cr_status_t st2 = gpu_g->ops->weight_prepare(gpu_g, &p->g, &err);
    CHECK_MSG(st2 == CR_OK, "gpu prepare %s: %s", tt->name, err.msg);
    p->ok = !st && !st2;
    return p->ok;
}

static void wpair_free(wpair_t *p)
{
    if (p->ok) {
        cpu_g->ops->weight_release(cpu_g, &p->c);
        gpu_g->ops->weight_release(gpu_g, &p->g);
    }
    free(p->bytes);
    memset(p, 0, sizeof *p);
}

/* Runs an op's output buffer back to the host. */
static void fetch(be_backend_t *be, float *host, const void *buf, size_t n)
{
    be->ops->download(be, host, buf, n * sizeof(float));
}

/* ---- matmul ------------------------------------------------------------- */

static double matmul_tol(cr_type_t t, bool gemm)
{
    if (!gemm)
        return 1e-4;
    if (t == CR_TYPE_F32)
        return 1e-4;
    if (t == CR_TYPE_F16 || t == CR_TYPE_BF16)
        return 1e-3;
    return 3e-2;
}

/* y = x W^T on both backends for n tokens; `gemm_from` is the GPU's
 * threshold (n > it: cuBLAS). */
static void check_matmul(cr_type_t type, int64_t rows, int64_t cols, int n, int gemm_from)
{
    const char *tn = be_type_traits(type)->name;
    wpair_t w;
    if (!wpair_make(&w, type, rows, cols, 1.0f)) {
        CHECK_MSG(false, "cannot make %s weight", tn);
        wpair_free(&w);
        return;
    }
    size_t nx = (size_t)n * (size_t)cols, ny = (size_t)n * (size_t)rows;
    float *x = malloc(nx * sizeof(float));
    float *yc = malloc(ny * sizeof(float)), *yg = malloc(ny * sizeof(float));
    rng_fill(x, nx, 1.0f);
    void *xc = buf_from(cpu_g, x, nx * sizeof(float));
    void *xg = buf_from(gpu_g, x, nx * sizeof(float));
    void *oc = cpu_g->ops->alloc(cpu_g, ny * sizeof(float));
    void *og = gpu_g->ops->alloc(gpu_g, ny * sizeof(float));
    CHECK(xc && xg && oc && og);
    if (xc && xg && oc && og) {
        be_cuda_set_gemm_min_tokens(gpu_g, gemm_from);
        cpu_g->ops->matmul(cpu_g, &w.c, xc, n, oc);
        gpu_g->ops->matmul(gpu_g, &w.g, xg, n, og);
        be_cuda_set_gemm_min_tokens(gpu_g, 8);
        fetch(cpu_g, yc, oc, ny);
        fetch(gpu_g, yg, og, ny);
        GPU_CHECK_OK(gpu_g);
        bool gemm = n > gemm_from;
        double e = rel_err(yg, yc, ny, 1e-6), tol = matmul_tol(type, gemm);
        CHECK_MSG(e <= tol, "matmul %s [%" PRId64 "x%" PRId64 "] n=%d %s: rel err %.3g > %.3g",
                  tn, rows, cols, n, gemm ? "gemm" : "matvec", e, tol);
    }
    cpu_g->ops->free(cpu_g, xc);
    gpu_g->ops->free(gpu_g, xg);
    cpu_g->ops->free(cpu_g, oc);
    gpu_g->ops->free(gpu_g, og);
    free(x);
    free(yc);
    free(yg);
    wpair_free(&w);
}

static void test_matmul(void)
{
    static const cr_type_t types[] = {
        CR_TYPE_F32, CR_TYPE_F16, CR_TYPE_BF16, CR_TYPE_Q8_0, CR_TYPE_Q4_0,
        CR_TYPE_Q4_1, CR_TYPE_Q5_0, CR_TYPE_Q5_1, CR_TYPE_Q2_K, CR_TYPE_Q3_K,
        CR_TYPE_Q4_K, CR_TYPE_Q5_K, CR_TYPE_Q6_K,
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++) {
        rng_seed(100 + i);
        check_matmul(types[i], 37, 512, 1, 8);    /* decode, odd row count */
        check_matmul(types[i], 96, 768, 3, 8);    /* small batch */
        check_matmul(types[i], 64, 1024, 8, 8);   /* largest matvec batch */
        check_matmul(types[i], 130, 512, 17, 8);  /* prefill: cuBLAS */
        check_matmul(types[i], 40, 256, 2, 0);    /* cuBLAS forced for n = 2 */
    }
}

/* ---- get_rows ----------------------------------------------------------- */

static void test_get_rows(void)
{
    static const cr_type_t types[] = {
        CR_TYPE_F32, CR_TYPE_F16, CR_TYPE_BF16, CR_TYPE_Q8_0, CR_TYPE_Q4_0,
        CR_TYPE_Q4_1, CR_TYPE_Q5_0, CR_TYPE_Q5_1, CR_TYPE_Q2_K, CR_TYPE_Q3_K,
        CR_TYPE_Q4_K, CR_TYPE_Q5_K, CR_TYPE_Q6_K,
    };
    const int32_t ids[] = {3, 0, 95, 3, 50};
    const int n = (int)CR_ARRAY_LEN(ids);
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++) {
        rng_seed(200 + i);
        wpair_t w;
        if (!wpair_make(&w, types[i], 96, 512, 2.0f)) {
            wpair_free(&w);
            continue;
        }
        size_t ny = (size_t)n * 512;
        float *yc = malloc(ny * sizeof(float)), *yg = malloc(ny * sizeof(float));
        void *oc = cpu_g->ops->alloc(cpu_g, ny * sizeof(float));
        void *og = gpu_g->ops->alloc(gpu_g, ny * sizeof(float));
        if (oc && og) {
            cpu_g->ops->get_rows(cpu_g, &w.c, ids, n, oc);
            gpu_g->ops->get_rows(gpu_g, &w.g, ids, n, og);
            fetch(cpu_g, yc, oc, ny);
            fetch(gpu_g, yg, og, ny);
            GPU_CHECK_OK(gpu_g);
            double e = rel_err(yg, yc, ny, 1e-6);
            CHECK_MSG(e <= 1e-5, "get_rows %s: rel err %.3g", be_type_traits(types[i])->name, e);
        }
        cpu_g->ops->free(cpu_g, oc);
        gpu_g->ops->free(gpu_g, og);
        free(yc);
        free(yg);
        wpair_free(&w);
    }
}

/* ---- rmsnorm, rope, elementwise ---------------------------------------- */

/* Runs `op` on both backends over buffers made from host inputs; returns
 * the two outputs in yc/yg. Helpers for the small ops below. */
typedef struct bufs {
    void *c[3], *g[3];
} bufs_t;

static bool bufs_make(bufs_t *b, const float *const host[3], const size_t n[3])
{
    memset(b, 0, sizeof *b);
    bool ok = true;
    for (int i = 0; i < 3; i++) {
        if (!n[i])
            continue;
        b->c[i] = buf_from(cpu_g, host[i], n[i] * sizeof(float));
        b->g[i] = buf_from(gpu_g, host[i], n[i] * sizeof(float));
        ok = ok && b->c[i] && b->g[i];
    }
    CHECK(ok);
    return ok;
}

static void bufs_free(bufs_t *b)
{
    for (int i = 0; i < 3; i++) {
        cpu_g->ops->free(cpu_g, b->c[i]);
        gpu_g->ops->free(gpu_g, b->g[i]);
    }
}

static void test_rmsnorm(void)
{
    const int n = 5, dim = 320;
    size_t nx = (size_t)n * dim;
    float *x = malloc(nx * sizeof(float)), *yc = malloc(nx * sizeof(float)),
          *yg = malloc(nx * sizeof(float));
    rng_seed(300);
    rng_fill(x, nx, 3.0f);
    wpair_t w;
    if (wpair_make(&w, CR_TYPE_F32, 1, dim, 2.0f)) {
        const float *host[3] = {x, NULL, NULL};
        size_t sizes[3] = {nx, nx, 0};
        bufs_t b;
        if (bufs_make(&b, host, sizes)) {
            /* out of place, then in place */
            for (int pass = 0; pass < 2; pass++) {
                void *dc = pass ? b.c[0] : b.c[1], *dg = pass ? b.g[0] : b.g[1];
                cpu_g->ops->rmsnorm(cpu_g, dc, b.c[0], &w.c, n, dim, 1e-5f);
                gpu_g->ops->rmsnorm(gpu_g, dg, b.g[0], &w.g, n, dim, 1e-5f);
                fetch(cpu_g, yc, dc, nx);
                fetch(gpu_g, yg, dg, nx);
                GPU_CHECK_OK(gpu_g);
                double e = rel_err(yg, yc, nx, 1e-6);
                CHECK_MSG(e <= 1e-5, "rmsnorm pass %d: rel err %.3g", pass, e);
            }
        }
        bufs_free(&b);
    }
    wpair_free(&w);
    free(x);
    free(yc);
    free(yg);
}

static void check_rope(int n_rot, bool ff)
{
    const int n = 4, heads = 3, hd = 64;
    const int32_t pos[] = {0, 7, 100, 3000};
    size_t nx = (size_t)n * heads * hd;
    float *x = malloc(nx * sizeof(float)), *yc = malloc(nx * sizeof(float)),
          *yg = malloc(nx * sizeof(float));
    rng_seed(400 + (uint64_t)n_rot + ff);
    rng_fill(x, nx, 1.0f);
    wpair_t w = {0};
    float fac[32];
    for (int i = 0; i < n_rot / 2; i++)
        fac[i] = 1.0f + (float)i * 0.25f;
    if (ff) {
        w.c = (be_weight_t){.name = "rope_freqs", .type = CR_TYPE_F32, .n_cols = n_rot / 2,
                            .n_rows = 1, .row_bytes = (size_t)(n_rot / 2) * 4, .data = fac};
        w.g = w.c;
        cr_err_t err;
        cr_err_clear(&err);
        w.ok = !cpu_g->ops->weight_prepare(cpu_g, &w.c, &err) &&
               !gpu_g->ops->weight_prepare(gpu_g, &w.g, &err);
        CHECK_MSG(w.ok, "prepare freq factors: %s", err.msg);
    }
    const float *host[3] = {x, NULL, NULL};
    size_t sizes[3] = {nx, 0, 0};
    bufs_t b;
    if (bufs_make(&b, host, sizes)) {
        cpu_g->ops->rope(cpu_g, b.c[0], n, heads, hd, n_rot, pos, 500000.0f, ff ? &w.c : NULL);
        gpu_g->ops->rope(gpu_g, b.g[0], n, heads, hd, n_rot, pos, 500000.0f, ff ? &w.g : NULL);
        fetch(cpu_g, yc, b.c[0], nx);
        fetch(gpu_g, yg, b.g[0], nx);
        GPU_CHECK_OK(gpu_g);
        double e = max_abs_err(yg, yc, nx);
        CHECK_MSG(e <= 1e-5, "rope n_rot %d ff %d: abs err %.3g", n_rot, ff, e);
    }
    bufs_free(&b);
    if (w.ok) {
        cpu_g->ops->weight_release(cpu_g, &w.c);
        gpu_g->ops->weight_release(gpu_g, &w.g);
    }
    free(x);
    free(yc);
    free(yg);
}

static void test_rope(void)
{
    check_rope(64, false);
    check_rope(64, true);
    check_rope(32, false); /* partial rotation: dims 32..63 untouched */
}

static void test_elementwise(void)
{
    const size_t n = 3000;
    float *a = malloc(n * sizeof(float)), *b2 = malloc(n * sizeof(float)),
          *yc = malloc(n * sizeof(float)), *yg = malloc(n * sizeof(float));
    rng_seed(500);
    rng_fill(a, n, 6.0f);
    rng_fill(b2, n, 2.0f);
    const float *host[3] = {a, b2, NULL};
    size_t sizes[3] = {n, n, n};
    bufs_t b;
    if (bufs_make(&b, host, sizes)) {
        cpu_g->ops->swiglu(cpu_g, b.c[2], b.c[0], b.c[1], n);
        gpu_g->ops->swiglu(gpu_g, b.g[2], b.g[0], b.g[1], n);
        fetch(cpu_g, yc, b.c[2], n);
        fetch(gpu_g, yg, b.g[2], n);
        GPU_CHECK_OK(gpu_g);
        double e = rel_err(yg, yc, n, 1e-6);
        CHECK_MSG(e <= 1e-5, "swiglu: rel err %.3g", e);

        cpu_g->ops->add(cpu_g, b.c[2], b.c[0], n);
        gpu_g->ops->add(gpu_g, b.g[2], b.g[0], n);
        fetch(cpu_g, yc, b.c[2], n);
        fetch(gpu_g, yg, b.g[2], n);
        GPU_CHECK_OK(gpu_g);
        e = rel_err(yg, yc, n, 1e-6);
        CHECK_MSG(e <= 1e-5, "add: rel err %.3g", e);

        /* softmax of 3 rows of 1000 (and of 30 rows of 100) */
        for (int pass = 0; pass < 2; pass++) {
            int rows = pass ? 30 : 3, cols = (int)(n / (size_t)rows);
            cpu_g->ops->upload(cpu_g, b.c[0], a, n * sizeof(float));
            gpu_g->ops->upload(gpu_g, b.g[0], a, n * sizeof(float));
            cpu_g->ops->softmax(cpu_g, b.c[0], rows, cols);
            gpu_g->ops->softmax(gpu_g, b.g[0], rows, cols);
            fetch(cpu_g, yc, b.c[0], n);
            fetch(gpu_g, yg, b.g[0], n);
            GPU_CHECK_OK(gpu_g);
            e = rel_err(yg, yc, n, 1e-6);
            CHECK_MSG(e <= 1e-5, "softmax %dx%d: rel err %.3g", rows, cols, e);
        }
    }
    bufs_free(&b);
    free(a);
    free(b2);
    free(yc);
    free(yg);
}

/* ---- kv_store and attention ------------------------------------------- */

static void test_kv_store(void)
{
    const int row = 48, n = 3, at = 5, ctx = 10;
    size_t nc = (size_t)ctx * row;
    float *src = malloc((size_t)n * row * sizeof(float));
    uint16_t *hc = calloc(nc, 2), *hg = calloc(nc, 2);
    rng_seed(600);
    rng_fill(src, (size_t)n * row, 100.0f);
    src[0] = 1e-7f;    /* subnormal in f16 */
    src[1] = 70000.0f; /* overflows f16 */
    void *sc = buf_from(cpu_g, src, (size_t)n * row * sizeof(float));
    void *sg = buf_from(gpu_g, src, (size_t)n * row * sizeof(float));
    void *cc = cpu_g->ops->alloc(cpu_g, nc * 2), *cg = gpu_g->ops->alloc(gpu_g, nc * 2);
    if (sc && sg && cc && cg) {
        cpu_g->ops->kv_store(cpu_g, cc, CR_TYPE_F16, sc, n, at, row);
        gpu_g->ops->kv_store(gpu_g, cg, CR_TYPE_F16, sg, n, at, row);
        cpu_g->ops->download(cpu_g, hc, cc, nc * 2);
        gpu_g->ops->download(gpu_g, hg, cg, nc * 2);
        GPU_CHECK_OK(gpu_g);
        CHECK_MSG(!memcmp(hc, hg, nc * 2), "kv_store: f16 bits differ");
        /* F16 caches only: a quantized one fails the op, never stored as
         * F16 (the engine falls back to f16 before it gets here) */
        CHECK(!be_kv_type_supported(gpu_g, CR_TYPE_Q8_0));
        gpu_g->ops->kv_store(gpu_g, cg, CR_TYPE_Q8_0, sg, n, at, 64);
        cr_err_t e;
        cr_err_clear(&e);
        CHECK_EQ_INT(be_cuda_check(gpu_g, &e), CR_E_UNSUPPORTED);
        CHECK_MSG(strstr(e.msg, "KV cache type Q8_0") != NULL, "%s", e.msg);
    }
    cpu_g->ops->free(cpu_g, sc);
    gpu_g->ops->free(gpu_g, sg);
    cpu_g->ops->free(cpu_g, cc);
    gpu_g->ops->free(gpu_g, cg);
    free(src);
    free(hc);
    free(hg);
}

static void check_attention(int n_tok, int pos0, int n_head, int n_head_kv, int hd)
{
    int ctx = pos0 + n_tok;
    size_t kv_row = (size_t)n_head_kv * hd;
    size_t nq = (size_t)n_tok * n_head * hd, nkv = (size_t)ctx * kv_row;
    float *q = malloc(nq * sizeof(float)), *kf = malloc(nkv * sizeof(float)),
          *vf = malloc(nkv * sizeof(float)), *yc = malloc(nq * sizeof(float)),
          *yg = malloc(nq * sizeof(float));
    rng_seed(700 + (uint64_t)(n_tok * 7 + pos0 + hd));
    rng_fill(q, nq, 2.0f);
    rng_fill(kf, nkv, 2.0f);
    rng_fill(vf, nkv, 1.0f);
    const float *host[3] = {q, kf, vf};
    size_t sizes[3] = {nq, nkv, nkv};
    bufs_t b;
    void *kc = cpu_g->ops->alloc(cpu_g, nkv * 2), *vc = cpu_g->ops->alloc(cpu_g, nkv * 2);
    void *kg = gpu_g->ops->alloc(gpu_g, nkv * 2), *vg = gpu_g->ops->alloc(gpu_g, nkv * 2);
    void *oc = cpu_g->ops->alloc(cpu_g, nq * 4), *og = gpu_g->ops->alloc(gpu_g, nq * 4);
    if (bufs_make(&b, host, sizes) && kc && vc && kg && vg && oc && og) {
        /* caches filled through each backend's own kv_store */
        cpu_g->ops->kv_store(cpu_g, kc, CR_TYPE_F16, b.c[1], ctx, 0, (int)kv_row);
        cpu_g->ops->kv_store(cpu_g, vc, CR_TYPE_F16, b.c[2], ctx, 0, (int)kv_row);
        gpu_g->ops->kv_store(gpu_g, kg, CR_TYPE_F16, b.g[1], ctx, 0, (int)kv_row);
        gpu_g->ops->kv_store(gpu_g, vg, CR_TYPE_F16, b.g[2], ctx, 0, (int)kv_row);
        be_attn_t a = {.n_tok = n_tok, .pos0 = pos0, .n_head = n_head, .n_head_kv = n_head_kv,
                       .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                       .kv_type = CR_TYPE_F16};
        cpu_g->ops->attention(cpu_g, oc, b.c[0], kc, vc, &a);
        gpu_g->ops->attention(gpu_g, og, b.g[0], kg, vg, &a);
        fetch(cpu_g, yc, oc, nq);
        fetch(gpu_g, yg, og, nq);
        GPU_CHECK_OK(gpu_g);
        double e = max_abs_err(yg, yc, nq);
        CHECK_MSG(e <= 3e-3, "attention n_tok %d pos0 %d heads %d/%d hd %d: abs err %.3g",
                  n_tok, pos0, n_head, n_head_kv, hd, e);
    } else {
        CHECK(false);
    }
    bufs_free(&b);
    cpu_g->ops->free(cpu_g, kc);
    cpu_g->ops->free(cpu_g, vc);
    gpu_g->ops->free(gpu_g, kg);
    gpu_g->ops->free(gpu_g, vg);
    cpu_g->ops->free(cpu_g, oc);
    gpu_g->ops->free(gpu_g, og);
    free(q);
    free(kf);
    free(vf);
    free(yc);
    free(yg);
}

static void test_attention(void)
{
    check_attention(1, 0, 4, 4, 64);      /* first token: one key */
    check_attention(1, 37, 8, 2, 64);     /* decode with GQA */
    check_attention(1, 300, 8, 2, 128);   /* decode, keys split in two */
    check_attention(1, 2000, 8, 8, 64);   /* decode, many splits */
    check_attention(2, 700, 4, 1, 80);    /* head size not a multiple of 32 */
    check_attention(17, 0, 8, 2, 64);     /* prefill from empty */
    check_attention(13, 40, 4, 2, 128);   /* prefill after a prefix */
    check_attention(32, 500, 8, 4, 64);   /* larger prefill */
}

/* ---- optional ops ------------------------------------------------------- */

static const be_ops_ext_t *gpu_ext(void)
{
    return gpu_on_cpu_g ? be_ext_ops(gpu_g) : be_cuda_ops_ext();
}

static void check_rope_neox(int n_rot, bool ff, float freq_scale, float mscale)
{
    const int n = 4, heads = 3, hd = 64;
    const int32_t pos[] = {0, 9, 250, 4000};
    size_t nx = (size_t)n * heads * hd;
    float *x = malloc(nx * sizeof(float)), *yc = malloc(nx * sizeof(float)),
          *yg = malloc(nx * sizeof(float));
    rng_seed(800 + (uint64_t)n_rot);
    rng_fill(x, nx, 1.0f);
    float fac[32];
    for (int i = 0; i < n_rot / 2; i++)
        fac[i] = 1.0f + (float)i * 0.5f;
    wpair_t w = {0};
    if (ff) {
        w.c = (be_weight_t){.name = "rope_long", .type = CR_TYPE_F32, .n_cols = n_rot / 2,
                            .n_rows = 1, .row_bytes = (size_t)(n_rot / 2) * 4, .data = fac};
        w.g = w.c;
        cr_err_t err;
        cr_err_clear(&err);
        w.ok = !cpu_g->ops->weight_prepare(cpu_g, &w.c, &err) &&
               !gpu_g->ops->weight_prepare(gpu_g, &w.g, &err);
        CHECK_MSG(w.ok, "prepare factors: %s", err.msg);
    }
    const float *host[3] = {x, NULL, NULL};
    size_t sizes[3] = {nx, 0, 0};
    bufs_t b;
    if (bufs_make(&b, host, sizes)) {
        be_ext_ops(cpu_g)->rope_neox(cpu_g, b.c[0], n, heads, hd, n_rot, pos, 10000.0f,
                                     freq_scale, ff ? &w.c : NULL, mscale);
        gpu_ext()->rope_neox(gpu_g, b.g[0], n, heads, hd, n_rot, pos, 10000.0f, freq_scale,
                             ff ? &w.g : NULL, mscale);
        fetch(cpu_g, yc, b.c[0], nx);
        fetch(gpu_g, yg, b.g[0], nx);
        GPU_CHECK_OK(gpu_g);
        double e = max_abs_err(yg, yc, nx);
        CHECK_MSG(e <= 1e-5, "rope_neox n_rot %d ff %d: abs err %.3g", n_rot, ff, e);
    }
    bufs_free(&b);
    if (w.ok) {
        cpu_g->ops->weight_release(cpu_g, &w.c);
        gpu_g->ops->weight_release(gpu_g, &w.g);
    }
    free(x);
    free(yc);
    free(yg);
}

static void test_ext_elementwise(void)
{
    const int n = 7, cols = 96;
    size_t nx = (size_t)n * cols;
    float *a = malloc(nx * sizeof(float)), *u = malloc(nx * sizeof(float)),
          *yc = malloc(nx * sizeof(float)), *yg = malloc(nx * sizeof(float));
    rng_seed(900);
    rng_fill(a, nx, 5.0f);
    rng_fill(u, nx, 1.0f);
    wpair_t bias;
    const float *host[3] = {a, u, NULL};
    size_t sizes[3] = {nx, nx, nx};
    bufs_t b;
    if (wpair_make(&bias, CR_TYPE_F32, 1, cols, 1.0f) && bufs_make(&b, host, sizes)) {
        const be_ops_ext_t *ce = be_ext_ops(cpu_g), *ge = gpu_ext();
        ce->add_rows(cpu_g, b.c[0], &bias.c, n);
        ge->add_rows(gpu_g, b.g[0], &bias.g, n);
        ce->scale(cpu_g, b.c[0], nx, 0.75f);
        ge->scale(gpu_g, b.g[0], nx, 0.75f);
        fetch(cpu_g, yc, b.c[0], nx);
        fetch(gpu_g, yg, b.g[0], nx);
        GPU_CHECK_OK(gpu_g);
        double e = rel_err(yg, yc, nx, 1e-6);
        CHECK_MSG(e <= 1e-6, "add_rows + scale: rel err %.3g", e);
        ce->geglu(cpu_g, b.c[2], b.c[0], b.c[1], nx);
        ge->geglu(gpu_g, b.g[2], b.g[0], b.g[1], nx);
        fetch(cpu_g, yc, b.c[2], nx);
        fetch(gpu_g, yg, b.g[2], nx);
        GPU_CHECK_OK(gpu_g);
        e = rel_err(yg, yc, nx, 1e-6);
        CHECK_MSG(e <= 1e-5, "geglu: rel err %.3g", e);
        bufs_free(&b);
    }
    wpair_free(&bias);
    free(a);
    free(u);
    free(yc);
    free(yg);
}

/* attention_ext against the CPU's, with a soft-cap and/or a window. */
static void check_attention_ext(int n_tok, int pos0, int hd, float softcap, int window)
{
    const int n_head = 4, n_head_kv = 2;
    int ctx = pos0 + n_tok;
    size_t kv_row = (size_t)n_head_kv * hd;
    size_t nq = (size_t)n_tok * n_head * hd, nkv = (size_t)ctx * kv_row;
    float *q = malloc(nq * sizeof(float)), *kf = malloc(nkv * sizeof(float)),
          *vf = malloc(nkv * sizeof(float)), *yc = malloc(nq * sizeof(float)),
          *yg = malloc(nq * sizeof(float));
    rng_seed(1000 + (uint64_t)(pos0 + window));
    rng_fill(q, nq, 4.0f);
    rng_fill(kf, nkv, 4.0f);
    rng_fill(vf, nkv, 1.0f);
    const float *host[3] = {q, kf, vf};
    size_t sizes[3] = {nq, nkv, nkv};
    bufs_t b;
    size_t scr = be_attention_ext_scratch(ctx, hd);
    void *kc = cpu_g->ops->alloc(cpu_g, nkv * 2), *vc = cpu_g->ops->alloc(cpu_g, nkv * 2);
    void *kg = gpu_g->ops->alloc(gpu_g, nkv * 2), *vg = gpu_g->ops->alloc(gpu_g, nkv * 2);
    void *oc = cpu_g->ops->alloc(cpu_g, nq * 4), *og = gpu_g->ops->alloc(gpu_g, nq * 4);
    void *sc = cpu_g->ops->alloc(cpu_g, scr * 4), *sg = gpu_g->ops->alloc(gpu_g, scr * 4);
    if (bufs_make(&b, host, sizes) && kc && vc && kg && vg && oc && og && sc && sg) {
        cpu_g->ops->kv_store(cpu_g, kc, CR_TYPE_F16, b.c[1], ctx, 0, (int)kv_row);
        cpu_g->ops->kv_store(cpu_g, vc, CR_TYPE_F16, b.c[2], ctx, 0, (int)kv_row);
        gpu_g->ops->kv_store(gpu_g, kg, CR_TYPE_F16, b.g[1], ctx, 0, (int)kv_row);
        gpu_g->ops->kv_store(gpu_g, vg, CR_TYPE_F16, b.g[2], ctx, 0, (int)kv_row);
        be_attn_t a = {.n_tok = n_tok, .pos0 = pos0, .n_head = n_head, .n_head_kv = n_head_kv,
                       .head_dim = hd, .scale = 1.0f / sqrtf((float)hd),
                       .kv_type = CR_TYPE_F16};
        be_ext_ops(cpu_g)->attention_ext(cpu_g, oc, b.c[0], kc, vc, &a, softcap, window, sc);
        gpu_ext()->attention_ext(gpu_g, og, b.g[0], kg, vg, &a, softcap, window, sg);
        fetch(cpu_g, yc, oc, nq);
        fetch(gpu_g, yg, og, nq);
        GPU_CHECK_OK(gpu_g);
        double e = max_abs_err(yg, yc, nq);
        CHECK_MSG(e <= 3e-3, "attention_ext n_tok %d pos0 %d cap %g window %d: abs err %.3g",
                  n_tok, pos0, softcap, window, e);
    } else {
        CHECK(false);
    }
    bufs_free(&b);
    void *all[] = {kc, vc, oc, sc};
    void *allg[] = {kg, vg, og, sg};
    for (int i = 0; i < 4; i++) {
        cpu_g->ops->free(cpu_g, all[i]);
        gpu_g->ops->free(gpu_g, allg[i]);
    }
    free(q);
    free(kf);
    free(vf);
    free(yc);
    free(yg);
}

static void test_ext(void)
{
    check_rope_neox(64, false, 1.0f, 1.0f);
    check_rope_neox(64, true, 0.25f, 1.2f); /* LongRoPE-style factors and mscale */
    check_rope_neox(32, false, 1.0f, 1.0f); /* partial rotation */
    test_ext_elementwise();
    check_attention_ext(1, 100, 64, 50.0f, 0);  /* gemma2 soft-cap, decode */
    check_attention_ext(1, 600, 128, 0.0f, 64); /* sliding window, decode, split keys */
    check_attention_ext(16, 40, 64, 30.0f, 20); /* prefill with both */
    check_attention_ext(5, 0, 80, 0.0f, 3);     /* window smaller than the prompt */
}

/* ---- contract ----------------------------------------------------------- */

static void test_contract(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    /* a type with no kernels names the tensor */
    uint8_t raw[64] = {0};
    be_weight_t w = {.name = "blk.0.odd", .type = CR_TYPE_I8, .n_cols = 64, .n_rows = 1,
                     .row_bytes = 64, .data = raw};
    CHECK_EQ_INT(gpu_g->ops->weight_prepare(gpu_g, &w, &err), CR_E_UNSUPPORTED);
    CHECK(strstr(err.msg, "blk.0.odd") != NULL);
    CHECK(w.dev == NULL);
    /* rows that are not whole blocks */
    cr_err_clear(&err);
    be_weight_t w2 = {.name = "blk.1.bad", .type = CR_TYPE_Q4_0, .n_cols = 40, .n_rows = 1,
                      .row_bytes = 18, .data = raw};
    CHECK_EQ_INT(gpu_g->ops->weight_prepare(gpu_g, &w2, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "blk.1.bad") != NULL);
    if (gpu_on_cpu_g)
        return; /* the rest is CUDA's own */

    CHECK_EQ_INT(gpu_g->ops->device_count(gpu_g), be_cuda_device_count());
    uint64_t fr = 0, tot = 0;
    CHECK_EQ_INT(gpu_g->ops->device_memory(gpu_g, 0, &fr, &tot, &err), CR_OK);
    CHECK(tot > 0 && fr <= tot);
    CHECK_EQ_INT(gpu_g->ops->device_memory(gpu_g, 999, &fr, &tot, &err), CR_E_INVALID);
    /* no such device */
    be_backend_t *none = NULL;
    CHECK_EQ_INT(be_cuda_new(be_cuda_device_count(), &none, &err), CR_E_UNAVAILABLE);
    CHECK(none == NULL);
    /* an allocation larger than any GPU fails cleanly, and the backend
     * keeps working */
    CHECK(gpu_g->ops->alloc(gpu_g, (size_t)1 << 50) == NULL);
    GPU_CHECK_OK(gpu_g);
    /* byte counts follow weights and buffers */
    uint64_t wb = be_cuda_weight_bytes(gpu_g), bb = be_cuda_buffer_bytes(gpu_g);
    wpair_t p;
    if (wpair_make(&p, CR_TYPE_Q8_0, 10, 256, 1.0f)) {
        CHECK_EQ_INT(be_cuda_weight_bytes(gpu_g), wb + 10 * 272);
        wpair_free(&p);
        CHECK_EQ_INT(be_cuda_weight_bytes(gpu_g), wb);
    }
    void *buf = gpu_g->ops->alloc(gpu_g, 4096);
    CHECK(buf != NULL);
    CHECK_EQ_INT(be_cuda_buffer_bytes(gpu_g), bb + 4096);
    /* alloc zeroes */
    uint8_t host[4096];
    memset(host, 0xab, sizeof host);
    gpu_g->ops->download(gpu_g, host, buf, sizeof host);
    bool zero = true;
    for (size_t i = 0; i < sizeof host; i++)
        zero = zero && host[i] == 0;
    CHECK(zero);
    gpu_g->ops->free(gpu_g, buf);
    CHECK_EQ_INT(be_cuda_buffer_bytes(gpu_g), bb);
    /* be_cuda_check on a non-CUDA backend is OK */
    CHECK_EQ_INT(be_cuda_check(cpu_g, &err), CR_OK);
}

int main(void)
{
    int rc = gpu_open("test_cuda_ops", &gpu_g);
    if (rc)
        return rc;
    cr_err_t err;
    cr_err_clear(&err);
    if (be_cpu_new(2, &cpu_g, &err)) {
        fprintf(stderr, "cpu backend: %s\n", err.msg);
        be_destroy(&gpu_g);
        return 1;
    }
    cr_status_t st = cpu_g->ops->reserve(cpu_g, MAX_TOK, MAX_COLS, MAX_CTX, MAX_HEAD, &err);
    CHECK_MSG(st == CR_OK, "cpu reserve: %s", err.msg);
    st = gpu_g->ops->reserve(gpu_g, MAX_TOK, MAX_COLS, MAX_CTX, MAX_HEAD, &err);
    CHECK_MSG(st == CR_OK, "gpu reserve: %s", err.msg);
    if (!st) {
        test_contract();
        test_matmul();
        test_get_rows();
        test_rmsnorm();
        test_rope();
        test_elementwise();
        test_kv_store();
        test_attention();
        test_ext();
        GPU_CHECK_OK(gpu_g);
    }
    be_destroy(&cpu_g);
    be_destroy(&gpu_g);
    return check_finish("test_cuda_ops");
}
