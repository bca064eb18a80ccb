/* gemm.c: the blocked F16 / F32 product for many tokens (gemm.h): the
 * packing, the scalar microkernel and the threaded driver.
 *
 * Plan of one product y [n][M] = x [n][K] . w [M][K]^T:
 * 1. x is packed once into token tiles [n/mr][K][mr] (rounded to F16 and
 *    back for an F16 weight), shared by every thread;
 * 2. threads claim units of GROUP column panels (GROUP * nr weight rows);
 *    for each KC-wide slice of K a thread converts its panels' rows to F32
 *    into [GROUP][KC][nr] (about 256 KB at AVX-512: stays in L2), then runs
 *    the microkernel over every token tile, each tile slice (KC * mr
 *    floats) staying in L1 while the GROUP panels pass it.
 * Slices after the first add to y (the microkernel's acc), so a y element
 * is its K-order sum in KC-sized partial sums, whatever n or the thread
 * count. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/gemm.h"

#include <stdatomic.h>
#include <stdlib.h>

#define KC 512   /* K elements per slice */
#define GROUP 4  /* column panels per unit of work */

/* ---- scalar microkernel (the reference) ---------------------------------- */

enum { SC_MR = 4, SC_NR = 8 };

static void ukernel_scalar(int64_t K, const float *a, const float *b, float *c, size_t ldc,
                           int mt, int nc, bool acc)
{
    float s[SC_MR][SC_NR] = {{0}};
    for (int64_t k = 0; k < K; k++)
        for (int t = 0; t < SC_MR; t++)
            for (int j = 0; j < SC_NR; j++)
                s[t][j] += a[k * SC_MR + t] * b[k * SC_NR + j];
    for (int t = 0; t < mt; t++)
        for (int j = 0; j < nc; j++)
            c[(size_t)t * ldc + j] = acc ? c[(size_t)t * ldc + j] + s[t][j] : s[t][j];
}

static const be_cpu_gemm_kernel_t kernels[] = {
    {"scalar", SC_MR, SC_NR, ukernel_scalar},
#if defined(__x86_64__) || defined(__i386__)
    {"avx2", 6, 16, be_avx2_gemm_ukernel},
    {"avx512", 12, 32, be_avx512_gemm_ukernel},
#endif
};

const be_cpu_gemm_kernel_t *be_cpu_gemm_kernel_at(be_simd_t level)
{
    be_simd_t have = be_simd_detect();
    if (level > have)
        level = have;
    size_t i = level == BE_SIMD_AVX512_VNNI ? 2 : level == BE_SIMD_AVX2 ? 1 : 0;
    return &kernels[CR_MIN(i, CR_ARRAY_LEN(kernels) - 1)];
}

void be_cpu_gemm_pack_a(const float *x, size_t ldx, int mt, int64_t K, float s, int mr,
                        float *a)
{
    /* k outer: the panel is written in order while mt rows are read in
     * order side by side */
    for (int64_t k = 0; k < K; k++) {
        float *dst = a + k * mr;
        int t = 0;
        for (; t < mt; t++)
            dst[t] = x[(size_t)t * ldx + (size_t)k] * s;
        for (; t < mr; t++)
            dst[t] = 0.0f;
    }
}

float *be_cpu_scratch_get(be_cpu_scratch_t *sc, size_t floats)
{
    if (floats <= sc->floats)
        return sc->p;
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    float *p = aligned_alloc(64, bytes);
    if (!p)
        return NULL;
    free(sc->p);
    sc->p = p;
    sc->floats = floats;
    return p;
}

void be_cpu_scratch_free(be_cpu_scratch_t *sc)
{
    free(sc->p);
    sc->p = NULL;
    sc->floats = 0;
}

/* ---- the threaded product ------------------------------------------------ */

typedef struct gemm_job {
    const be_cpu_gemm_kernel_t *kr;
    const be_weight_t *w;
    const float *x; /* [n][K] */
    float *y;       /* [n][M] */
    int n, n_tiles;
    float *ap;      /* [n_tiles][K][mr] */
    float *scratch; /* per share: [GROUP][KC][nr] panels, KC floats, K * mr u16 */
    size_t per_share; /* floats */
    int64_t n_units;  /* row groups x token chunks */
    int t_chunks;     /* token chunks per row group */
    atomic_int_fast64_t next;
} gemm_job_t;

static void pack_a_task(void *ctx, int ith, int nth)
{
    gemm_job_t *j = ctx;
    int mr = j->kr->mr;
    int64_t K = j->w->n_cols;
    uint16_t *h = (uint16_t *)(j->scratch + (size_t)ith * j->per_share +
                               (size_t)GROUP * KC * (size_t)j->kr->nr + KC);
    for (int i = ith; i < j->n_tiles; i += nth) {
        float *a = j->ap + (size_t)i * (size_t)K * (size_t)mr;
        int t0 = i * mr;
        be_cpu_gemm_pack_a(j->x + (size_t)t0 * (size_t)K, (size_t)K, CR_MIN(mr, j->n - t0), K,
                           1.0f, mr, a);
        if (j->w->type != CR_TYPE_F16)
            continue;
        /* the F16 dot format: each value rounded to F16 */
        be_f32_to_f16_row(a, h, K * mr);
        be_f16_to_f32_row(h, a, K * mr);
    }
}

/* Rows r0 .. r0 + nr of w (zeros past the last), columns k0 .. k0 + kc,
 * into b[k][j]. row: kc floats of scratch. */
static void pack_b(const be_weight_t *w, int64_t r0, int nr, int64_t k0, int64_t kc,
                   float *row, float *b)
{
    for (int j = 0; j < nr; j++) {
        int64_t r = r0 + j;
        if (r >= w->n_rows) {
            for (int64_t k = 0; k < kc; k++)
                b[k * nr + j] = 0.0f;
            continue;
        }
        const uint8_t *src = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        const float *v;
        if (w->type == CR_TYPE_F16) {
            be_f16_to_f32_row((const uint16_t *)src + k0, row, kc);
            v = row;
        } else {
            v = (const float *)src + k0;
        }
        for (int64_t k = 0; k < kc; k++)
            b[k * nr + j] = v[k];
    }
}

static void gemm_task(void *ctx, int ith, int nth)
{
    CR_UNUSED(nth);
    gemm_job_t *j = ctx;
    const be_cpu_gemm_kernel_t *kr = j->kr;
    int mr = kr->mr, nr = kr->nr;
    int64_t K = j->w->n_cols, M = j->w->n_rows;
    float *bp = j->scratch + (size_t)ith * j->per_share;
    float *row = bp + (size_t)GROUP * KC * (size_t)nr;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= j->n_units)
            return;
        int64_t r0 = u / j->t_chunks * GROUP * nr;
        int tc = (int)(u % j->t_chunks);
        int i0 = (int)((int64_t)j->n_tiles * tc / j->t_chunks);
        int i1 = (int)((int64_t)j->n_tiles * (tc + 1) / j->t_chunks);
        int groups = (int)CR_MIN((int64_t)GROUP, (M - r0 + nr - 1) / nr);
        for (int64_t k0 = 0; k0 < K; k0 += KC) {
            int64_t kc = CR_MIN((int64_t)KC, K - k0);
            for (int g = 0; g < groups; g++)
                pack_b(j->w, r0 + (int64_t)g * nr, nr, k0, kc, row,
                       bp + (size_t)g * KC * (size_t)nr);
            for (int i = i0; i < i1; i++) {
                const float *a = j->ap + ((size_t)i * (size_t)K + (size_t)k0) * (size_t)mr;
                int t0 = i * mr, mt = CR_MIN(mr, j->n - t0);
                for (int g = 0; g < groups; g++) {
                    int64_t c0 = r0 + (int64_t)g * nr;
                    kr->fn(kc, a, bp + (size_t)g * KC * (size_t)nr,
                           j->y + (size_t)t0 * (size_t)M + (size_t)c0, (size_t)M, mt,
                           (int)CR_MIN((int64_t)nr, M - c0), k0 > 0);
                }
            }
        }
    }
}

bool be_cpu_gemm(rn_threadpool_t *pool, be_simd_t level, be_cpu_scratch_t *sc,
                 const be_weight_t *w, const float *x, int n, float *y)
{
    if (w->type != CR_TYPE_F16 && w->type != CR_TYPE_F32)
        return false;
    gemm_job_t j = {.kr = be_cpu_gemm_kernel_at(level), .w = w, .x = x, .y = y, .n = n};
    int mr = j.kr->mr, nr = j.kr->nr;
    j.n_tiles = (n + mr - 1) / mr;
    if (j.n_tiles < 2)
        return false;
    int64_t K = w->n_cols;
    int shares = rn_threadpool_size(pool);
    /* panels, one row of KC floats, and K * mr halves */
    j.per_share = (size_t)GROUP * KC * (size_t)nr + KC + ((size_t)K * (size_t)mr + 1) / 2;
    j.per_share = (j.per_share + 15) / 16 * 16; /* 64-byte aligned shares */
    size_t ap_floats = (size_t)j.n_tiles * (size_t)K * (size_t)mr;
    ap_floats = (ap_floats + 15) / 16 * 16;
    float *mem = be_cpu_scratch_get(sc, ap_floats + j.per_share * (size_t)shares);
    if (!mem)
        return false;
    j.ap = mem;
    j.scratch = mem + ap_floats;
    int64_t cols_per_unit = (int64_t)GROUP * nr;
    int64_t row_groups = (w->n_rows + cols_per_unit - 1) / cols_per_unit;
    /* About 8 units per share, so a share slowed by the machine takes
     * fewer; each unit repacks its panels, so no more chunks than that. */
    j.t_chunks = (int)CR_MAX((int64_t)1, CR_MIN((int64_t)j.n_tiles,
                                                (8 * (int64_t)shares + row_groups - 1) / row_groups));
    j.n_units = row_groups * j.t_chunks;
    atomic_init(&j.next, 0);
    rn_threadpool_run(pool, pack_a_task, &j, shares);
    rn_threadpool_run(pool, gemm_task, &j, shares);
    return true;
}
