/* test_gemm.c: the CPU backend's many-token kernels (backend/cpu/gemm.h,
 * attn_full.h) against scalar double-precision references, at every SIMD
 * level this CPU runs (scalar, AVX2, AVX-512: the levels it lacks are
 * printed as not tested), and the wide ops through the backend's table.
 *
 * Tolerances are the textbook bounds for float arithmetic, u = 2^-24:
 * - a product y = sum_k x_k w_k of K terms, summed in any order with FMAs
 *   or separate multiply-adds, is within gamma_K = K u / (1 - K u) of the
 *   exact sum times sum_k |x_k w_k| (the inputs are exact: for F16
 *   weights the reference rounds x to F16 first, as the kernel must);
 * - attention: each score scale * q.k carries at most gamma_hd * S (S the
 *   largest scale * sum |q_d k_d|); a score error e moves a softmax
 *   average of values within [-V, V] by at most 2 e V; the vector exp (4
 *   ulp), the row sum and the weighted sum of n values add (n + hd + 16)
 *   u V. Everything else is exact. A kernel that drops a term, a tile
 *   edge or a panel misses these by orders of magnitude. */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/attn_full.h"
#include "services/runner/backend/cpu/gemm.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/threadpool.h"
#include "tests/unit/check.h"
#include "tests/unit/splitmix.h"

#include <float.h>
#include <math.h>

#define U 0x1p-24

static uint64_t rng_s = 0x9e11;
static be_cpu_scratch_t scratch_g; /* reused: stale contents must not leak in */

static double gamma_k(int64_t k)
{
    return (double)k * U / (1.0 - (double)k * U);
}

/* Checks be_cpu_gemm on an n x K by M x K product of weight type t. */
static void check_gemm(rn_threadpool_t *pool, be_simd_t lv, cr_type_t t, int n, int64_t M,
                       int64_t K)
{
    size_t esz = t == CR_TYPE_F16 ? 2 : 4;
    float *x = malloc((size_t)n * (size_t)K * sizeof(float));
    void *wd = malloc((size_t)M * (size_t)K * esz);
    float *wf = malloc((size_t)M * (size_t)K * sizeof(float)); /* weight as F32 */
    float *y = malloc((size_t)n * (size_t)M * sizeof(float));
    for (int64_t i = 0; i < (int64_t)n * K; i++)
        x[i] = splitmix_sym(&rng_s) * 4.0f;
    for (int64_t i = 0; i < M * K; i++) {
        float v = splitmix_sym(&rng_s);
        if (t == CR_TYPE_F16) {
            ((uint16_t *)wd)[i] = be_f32_to_f16(v);
            wf[i] = be_f16_to_f32(((uint16_t *)wd)[i]);
        } else {
            ((float *)wd)[i] = wf[i] = v;
        }
    }
    for (int64_t i = 0; i < (int64_t)n * M; i++)
        y[i] = NAN; /* every element must be written */
    be_weight_t w = {.name = "w", .type = t, .n_cols = K, .n_rows = M,
                     .row_bytes = (size_t)K * esz, .data = wd};
    bool took = be_cpu_gemm(pool, lv, &scratch_g, &w, x, n, y);
    CHECK_MSG(took, "%s: gemm declined %d x %" PRId64 " x %" PRId64, be_simd_name(lv), n, M, K);
    double worst = 0;
    int bad = 0;
    for (int r = 0; took && r < n; r++)
        for (int64_t c = 0; c < M; c++) {
            double ref = 0, mag = 0;
            for (int64_t k = 0; k < K; k++) {
                float xv = x[(size_t)r * K + k];
                if (t == CR_TYPE_F16)
                    xv = be_f16_to_f32(be_f32_to_f16(xv)); /* the F16 dot format */
                double p = (double)xv * wf[c * K + k];
                ref += p, mag += fabs(p);
            }
            double err = fabs(y[(size_t)r * M + c] - ref), tol = gamma_k(K) * mag + 1e-30;
            worst = CR_MAX(worst, err / tol);
            if (!(err <= tol) && bad++ < 3)
                fprintf(stderr, "%s %s [%d][%" PRId64 "]: %g, want %g (tol %g)\n",
                        be_simd_name(lv), t == CR_TYPE_F16 ? "f16" : "f32", r, c,
                        y[(size_t)r * M + c], ref, tol);
        }
    CHECK_MSG(bad == 0, "%s: %d of %d x %" PRId64 " outside the bound", be_simd_name(lv), bad,
              n, M);
    printf("  %-6s %s n %3d M %3" PRId64 " K %4" PRId64 ": worst error %.3f of the bound\n",
           be_simd_name(lv), t == CR_TYPE_F16 ? "f16" : "f32", n, M, K, worst);
    free(x), free(wd), free(wf), free(y);
}

static void check_attn(rn_threadpool_t *pool, be_simd_t lv, int n, int n_head, int hd)
{
    size_t D = (size_t)n_head * hd, ld = D + 3; /* rows with a gap: ld is honoured */
    size_t sz = (size_t)n * ld;
    float *q = malloc(sz * 4), *k = malloc(sz * 4), *v = malloc(sz * 4), *o = malloc(sz * 4);
    for (size_t i = 0; i < sz; i++)
        q[i] = splitmix_sym(&rng_s) * 2.0f, k[i] = splitmix_sym(&rng_s) * 2.0f, v[i] = splitmix_sym(&rng_s), o[i] = NAN;
    float scale = 1.0f / sqrtf((float)hd);
    CHECK(be_cpu_attn_full(pool, lv, &scratch_g, o, q, k, v, ld, n, n_head, hd, scale));
    double *s = malloc((size_t)n * sizeof(double));
    int bad = 0;
    double worst = 0;
    for (int h = 0; h < n_head; h++)
        for (int t = 0; t < n; t++) {
            double max = -INFINITY, smax = 0, sum = 0;
            for (int j = 0; j < n; j++) {
                double dot = 0, mag = 0;
                for (int d = 0; d < hd; d++) {
                    double p = (double)q[t * ld + h * hd + d] * k[j * ld + h * hd + d];
                    dot += p, mag += fabs(p);
                }
                s[j] = dot * scale;
                smax = CR_MAX(smax, mag * scale);
                max = CR_MAX(max, s[j]);
            }
            for (int j = 0; j < n; j++)
                sum += (s[j] = exp(s[j] - max));
            double tol = 2 * gamma_k(hd) * smax + (n + hd + 16) * U; /* V = 1 */
            for (int d = 0; d < hd; d++) {
                double ref = 0;
                for (int j = 0; j < n; j++)
                    ref += s[j] / sum * v[j * ld + h * hd + d];
                double err = fabs(o[t * ld + h * hd + d] - ref);
                worst = CR_MAX(worst, err / tol);
                if (!(err <= tol) && bad++ < 3)
                    fprintf(stderr, "%s attn n %d head %d query %d dim %d: %g, want %g\n",
                            be_simd_name(lv), n, h, t, d, o[t * ld + h * hd + d], ref);
            }
        }
    CHECK_MSG(bad == 0, "%s: attention n %d hd %d: %d outside the bound", be_simd_name(lv), n,
              hd, bad);
    printf("  %-6s attention n %3d heads %d hd %2d: worst error %.3f of the bound\n",
           be_simd_name(lv), n, n_head, hd, worst);
    free(q), free(k), free(v), free(o), free(s);
}

/* The ext table's matmul_wide and attention_full on a CPU backend, and what
 * they decline. */
static void check_backend(void)
{
    be_backend_t *be = NULL;
    cr_err_t err = {0};
    CHECK(be_cpu_new(2, &be, &err) == CR_OK);
    const be_ops_ext_t *ext = be_ext_ops(be);
    CHECK(ext && ext->matmul_wide && ext->attention_full);
    if (!ext || !ext->matmul_wide || !ext->attention_full) {
        be_destroy(&be);
        return;
    }
    enum { N = 40, M = 24, K = 64 };
    static float x[N * K], wf[M * K], y[N * M], ref[N * M];
    for (int i = 0; i < N * K; i++)
        x[i] = splitmix_sym(&rng_s);
    for (int i = 0; i < M * K; i++)
        wf[i] = splitmix_sym(&rng_s);
    be_weight_t w = {.name = "w", .type = CR_TYPE_F32, .n_cols = K, .n_rows = M,
                     .row_bytes = K * 4, .data = wf};
    CHECK(be->ops->weight_prepare(be, &w, &err) == CR_OK);
    CHECK(be->ops->reserve(be, N, K, N, 1, &err) == CR_OK);
    CHECK(ext->matmul_wide(be, &w, x, N, y));
    be->ops->matmul(be, &w, x, N, ref);
    double worst = 0;
    for (int i = 0; i < N * M; i++)
        worst = CR_MAX(worst, fabs(y[i] - ref[i]));
    /* both within gamma_K * sum |x w| <= 64 u * 64 of the exact sum */
    CHECK_MSG(worst <= 2 * gamma_k(K) * K, "matmul_wide vs matmul: %g", worst);
    /* one token tile is matmul's job; a Q8_0 weight is not a wide one */
    CHECK(!ext->matmul_wide(be, &w, x, 1, y));
    static uint8_t q8[M * (K / 32) * 34];
    be_weight_t wq = {.name = "wq", .type = CR_TYPE_Q8_0, .n_cols = K, .n_rows = M,
                      .row_bytes = (K / 32) * 34, .data = q8};
    CHECK(!ext->matmul_wide(be, &wq, x, N, y));
    /* attention_full over the table: a 2-head, 8-dim case against the
     * kernel called directly at the backend's level */
    static float q[N * 16], k[N * 16], v[N * 16], o[N * 16];
    for (int i = 0; i < N * 16; i++)
        q[i] = splitmix_sym(&rng_s), k[i] = splitmix_sym(&rng_s), v[i] = splitmix_sym(&rng_s);
    CHECK(ext->attention_full(be, o, q, k, v, N, 2, 8, 0.35f));
    rn_threadpool_t *pool = NULL;
    CHECK(rn_threadpool_new(1, &pool, &err) == CR_OK);
    static float o2[N * 16];
    be_simd_t lv = be_simd_detect();
    CHECK(be_cpu_attn_full(pool, lv, &scratch_g, o2, q, k, v, 16, N, 2, 8, 0.35f));
    CHECK(!memcmp(o, o2, sizeof o)); /* same bits whatever the thread count */
    rn_threadpool_destroy(&pool);
    be_destroy(&be);
}

int main(void)
{
    rn_threadpool_t *pool = NULL;
    cr_err_t err = {0};
    /* three shares on any machine: the work splits unevenly */
    if (rn_threadpool_new(3, &pool, &err) != CR_OK)
        return fprintf(stderr, "threadpool: %s\n", err.msg), 1;
    be_simd_t have = be_simd_detect();
    for (int l = BE_SIMD_SCALAR; l <= BE_SIMD_AVX512_VNNI; l++) {
        be_simd_t lv = (be_simd_t)l;
        if (lv > have) {
            printf("== %s: not tested (this CPU or CORRAL_CPU_SIMD lacks it) ==\n",
                   be_simd_name(lv));
            continue;
        }
        printf("== %s (microkernel %s) ==\n", be_simd_name(lv),
               be_cpu_gemm_kernel_at(lv)->name);
        /* tile edges in every direction; K past one 512 slice */
        check_gemm(pool, lv, CR_TYPE_F32, 13, 37, 29);
        check_gemm(pool, lv, CR_TYPE_F16, 13, 37, 29);
        check_gemm(pool, lv, CR_TYPE_F16, 50, 100, 600);
        check_gemm(pool, lv, CR_TYPE_F32, 64, 129, 1100);
        check_gemm(pool, lv, CR_TYPE_F16, 25, 32, 588);
        check_attn(pool, lv, 1, 1, 8);
        check_attn(pool, lv, 37, 3, 72);
        check_attn(pool, lv, 100, 2, 16);
        check_attn(pool, lv, 70, 1, 40);
    }
    check_backend();
    rn_threadpool_destroy(&pool);
    be_cpu_scratch_free(&scratch_g);
    return check_finish("gemm");
}
