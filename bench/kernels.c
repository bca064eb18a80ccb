/* kernels.c: bench-kernels, the speed of one type's dot product per SIMD
 * level.
 *
 *   bench-kernels [TYPE ...] [--cols N] [--rows N] [--rounds N]
 *                 [--packed [--tokens N] [--threads T]]
 *
 * For each weight type named (default: IQ4_NL IQ4_XS MXFP4, with Q4_0 and
 * Q4_K beside them for scale), a ROWS x COLS matrix (default 1024 x 4096:
 * 2.1 to 2.4 MB, inside L2/L3, so the kernel's arithmetic is measured and
 * not the memory) of N(0, 0.02) weights is quantized once with one
 * activation row; each round runs vec_dot over every row at each level
 * the CPU has (scalar, avx2, avx512vnni: the last uses whatever traits
 * that level has, the AVX2 ones where no AVX-512 kernel exists). One
 * thread. Prints the median GB/s of weights read and the ratio to the
 * AVX2 level.
 *
 * --packed [--tokens N]: the packed products (repack.h) instead, for the
 * types that pack (Q4_0, Q8_0, Q4_K, Q6_K): the matrix is packed once and
 * each round times one product with N tokens (default 1: decode) at every
 * level that has its own kernel (scalar only on a CPU without AVX2), the
 * levels taking turns within a round
 * (A/B in one process, so the machine's load falls on all alike), timed
 * by the thread's CPU clock (time the thread was descheduled on a busy
 * machine does not count) and reported as the median and the best round.
 * Give a matrix larger than the caches (e.g. --rows 32768) to see decode
 * as memory-bound. Each round also times a plain streaming read of the
 * packed bytes (AVX2 loads, as bench-bench's bandwidth figure) and prints
 * it ("read") and each kernel's share of it ("% read"): decode's fraction
 * of the one-thread bandwidth limit, free of the machine's load of the
 * moment.
 *
 * --packed --threads T (T > 1): what a decode gets from T threads, rather
 * than the kernel alone: the CPU backend's matmul op (be_cpu_new(T): its
 * activation quantization, its split of the rows into units and the
 * detected level's kernel) over enough distinct copies of the matrix to
 * fill 512 MB (so each comes from DRAM, as a model's do), one call per
 * copy, against T threads reading each copy's packed bytes in turn (one
 * pool job per copy: the same number of wake-ups), wall-clock, medians.
 * Prints both rates and the op's share of the read ("% read"). Never part
 * of ctest. */
#include "lib/prelude.h"
#include "bench/stats.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/repack.h"
#include "services/runner/backend/cpu/threadpool.h"
#include "services/runner/backend/backend.h"
#include "tests/unit/splitmix.h"

#include <math.h>

enum { MAX_TYPES = 16, MAX_ROUNDS = BENCH_MEDIAN_MAX };

static uint64_t rng_s = 42;

static bool parse_type(const char *s, cr_type_t *t)
{
    for (uint32_t id = 0; id < CR_TYPE__COUNT; id++) {
        const cr_type_info_t *ti = cr_type_info(id);
        if (ti && !strcasecmp(s, ti->name)) {
            *t = (cr_type_t)id;
            return true;
        }
    }
    return false;
}

/* rows x cols N(0, 0.02) weights quantized to ts's type, row_bytes each,
 * into w (f: cols floats of scratch) */
static void random_rows(const be_type_traits_t *ts, uint8_t *w, uint64_t row_bytes, int rows,
                        int64_t cols, float *f)
{
    for (int r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++)
            f[i] = splitmix_normal(&rng_s) * 0.02f;
        ts->from_float(f, w + (size_t)r * row_bytes, cols);
    }
}

/* Seconds for one pass of vec_dot over every row. */
static double one_pass(const be_type_traits_t *tt, const uint8_t *w, size_t row_bytes,
                       int rows, const void *a, int64_t cols, float *out)
{
    double t0 = bench_now_s();
    for (int r = 0; r < rows; r++)
        tt->vec_dot(cols, out + r, w + (size_t)r * row_bytes, a);
    return bench_now_s() - t0;
}

static int bench_type(cr_type_t t, int64_t cols, int rows, int rounds)
{
    const be_type_traits_t *ts = be_type_traits_at(t, BE_SIMD_SCALAR);
    if (!ts || !ts->vec_dot) {
        fprintf(stderr, "bench-kernels: type %d has no dot product\n", (int)t);
        return 1;
    }
    uint64_t rb = 0, ab = 0;
    if (!cr_type_row_bytes(t, (uint64_t)cols, &rb) ||
        !cr_type_row_bytes(ts->vec_dot_type, (uint64_t)cols, &ab)) {
        fprintf(stderr, "bench-kernels: %" PRId64 " columns are not whole %s blocks\n", cols,
                ts->name);
        return 1;
    }
    uint8_t *w = malloc((size_t)rb * (size_t)rows), *a = malloc((size_t)ab);
    float *f = malloc((size_t)cols * sizeof *f), *out = malloc((size_t)rows * sizeof *out);
    if (!w || !a || !f || !out) {
        free(w), free(a), free(f), free(out);
        fprintf(stderr, "bench-kernels: out of memory\n");
        return 1;
    }
    random_rows(ts, w, rb, rows, cols, f);
    for (int64_t i = 0; i < cols; i++)
        f[i] = splitmix_normal(&rng_s);
    be_type_traits_at(ts->vec_dot_type, BE_SIMD_SCALAR)->from_float(f, a, cols);

    be_simd_t have = be_simd_detect();
    double gbs[BE_SIMD_AVX512_VNNI + 1] = {0};
    for (int lv = BE_SIMD_SCALAR; lv <= (int)have; lv++) {
        const be_type_traits_t *tl = be_type_traits_at(t, (be_simd_t)lv);
        double secs[MAX_ROUNDS];
        one_pass(tl, w, (size_t)rb, rows, a, cols, out); /* warm the caches */
        for (int k = 0; k < rounds; k++)
            secs[k] = one_pass(tl, w, (size_t)rb, rows, a, cols, out);
        gbs[lv] = (double)rb * rows / bench_median(secs, rounds) / 1e9;
    }
    printf("%-7s %5d x %-6" PRId64 " %6.2f MB", ts->name, rows, cols,
           (double)rb * rows / 1e6);
    for (int lv = BE_SIMD_SCALAR; lv <= (int)have; lv++) {
        printf("  %s %6.2f GB/s", be_simd_name((be_simd_t)lv), gbs[lv]);
        if (have >= BE_SIMD_AVX2 && lv != BE_SIMD_AVX2)
            printf(" (%.2fx avx2)", gbs[lv] / gbs[BE_SIMD_AVX2]);
    }
    printf("\n");
    free(w), free(a), free(f), free(out);
    return 0;
}

/* The calling thread's CPU time in seconds. */
static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double min_of(const double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        m = v[i] < m ? v[i] : m;
    return m;
}

#if defined(__x86_64__)
#include <immintrin.h>
/* A plain streaming read of n bytes (as bench-bench's bandwidth figure):
 * the rate the packed kernels are held against. */
__attribute__((target("avx2"))) static int64_t read_bytes(const uint8_t *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    int64_t out[4];
    _mm256_storeu_si256((__m256i *)out, a0);
    return out[0] + out[1] + out[2] + out[3];
}
#else
static int64_t read_bytes(const uint8_t *p, size_t n)
{
    int64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        int64_t v;
        memcpy(&v, p + i, 8);
        s += v;
    }
    return s;
}
#endif

/* The packed products of a rows x cols matrix of type t with n_tok tokens,
 * per level with its own kernel, levels interleaved within each round. */
static int bench_packed(cr_type_t t, int64_t cols, int rows, int rounds, int n_tok)
{
    const be_type_traits_t *ts = be_type_traits_at(t, BE_SIMD_SCALAR);
    if (!ts || !be_pack_supported(t, rows, cols)) {
        fprintf(stderr, "bench-kernels: %s %d x %" PRId64 " is not packed\n",
                ts ? ts->name : "?", rows, cols);
        return 1;
    }
    const be_type_traits_t *at = be_type_traits_at(be_pack_act_type(t), BE_SIMD_SCALAR);
    uint64_t rb = 0, ab = 0;
    if (!cr_type_row_bytes(t, (uint64_t)cols, &rb) ||
        !cr_type_row_bytes(at->type, (uint64_t)cols, &ab))
        return 1;
    int64_t nb32 = cols / 32;
    uint8_t *w = malloc((size_t)rb * (size_t)rows), *a = malloc((size_t)ab * (size_t)n_tok);
    float *f = malloc((size_t)cols * sizeof *f);
    float *out = malloc((size_t)rows * (size_t)n_tok * sizeof *out);
    int32_t *xs = malloc(2 * (size_t)nb32 * (size_t)n_tok * sizeof *xs);
    be_packed_t *p = NULL;
    cr_err_t err = {0};
    int rc = 1;
    if (!w || !a || !f || !out || !xs) {
        fprintf(stderr, "bench-kernels: out of memory\n");
        goto out;
    }
    random_rows(ts, w, rb, rows, cols, f);
    for (int k = 0; k < n_tok; k++) {
        for (int64_t i = 0; i < cols; i++)
            f[i] = splitmix_normal(&rng_s);
        at->from_float(f, a + (size_t)k * ab, cols);
        if (at->type == CR_TYPE_Q8_0)
            be_pack_block_sums((const be_block_q8_0_t *)(a + (size_t)k * ab), nb32,
                               xs + 2 * (size_t)k * (size_t)nb32);
    }
    if (be_pack_new(t, w, rows, cols, (size_t)rb, &p, &err)) {
        fprintf(stderr, "bench-kernels: pack: %s\n", err.msg);
        goto out;
    }
    be_simd_t have = be_simd_detect();
    /* scalar only where nothing else runs: it takes 100x the time */
    int lv0 = have >= BE_SIMD_AVX2 ? BE_SIMD_AVX2 : BE_SIMD_SCALAR;
    double secs[BE_SIMD_AVX512_VNNI + 1][MAX_ROUNDS], rsecs[MAX_ROUNDS];
    size_t pbytes = (size_t)(rows / BE_PACK_ROWS) * p->group_bytes;
    volatile int64_t sink = 0;
    for (int k = -1; k < rounds; k++) { /* round -1 warms the caches */
        double r0 = cpu_now_s();
        sink += read_bytes(p->data, pbytes);
        if (k >= 0)
            rsecs[k] = cpu_now_s() - r0;
        for (int lv = lv0; lv <= (int)have; lv++) {
            be_pack_gemm_fn fn = be_pack_gemm_compiled(t, (be_simd_t)lv);
            if (!fn)
                continue;
            double t0 = cpu_now_s();
            fn(p, 0, rows / BE_PACK_ROWS, a, xs, n_tok, out, (size_t)rows);
            if (k >= 0)
                secs[lv][k] = cpu_now_s() - t0;
        }
    }
    printf("%-7s packed %5d x %-6" PRId64 " %7.2f MB, %d tokens", ts->name, rows, cols,
           (double)rb * rows / 1e6, n_tok);
    double avx2 = 0, avx2_best = 0, mb = (double)rb * rows / 1e9;
    /* the plain read of the packed bytes, as a rate of the source's bytes
     * (the kernels' unit): "% read" is a kernel's share of that limit */
    double rd = mb / bench_median(rsecs, rounds);
    printf("  read %6.2f GB/s", rd);
    if (have >= BE_SIMD_AVX2 && be_pack_gemm_compiled(t, BE_SIMD_AVX2)) {
        avx2 = mb / bench_median(secs[BE_SIMD_AVX2], rounds);
        avx2_best = mb / min_of(secs[BE_SIMD_AVX2], rounds);
    }
    for (int lv = lv0; lv <= (int)have; lv++) {
        if (!be_pack_gemm_compiled(t, (be_simd_t)lv))
            continue;
        double g = mb / bench_median(secs[lv], rounds), gb = mb / min_of(secs[lv], rounds);
        printf("  %s %6.2f GB/s (best %6.2f)", be_simd_name((be_simd_t)lv), g, gb);
        if (avx2 > 0 && lv != BE_SIMD_AVX2)
            printf(" %.2fx avx2 (best %.2fx)", g / avx2, gb / avx2_best);
        printf(" %.0f%% read", 100 * g / rd);
    }
    printf("\n");
    rc = 0;
out:
    be_pack_destroy(&p);
    free(w), free(a), free(f), free(out), free(xs);
    return rc;
}

/* ---- --threads: the backend's op on T threads ------------------------ */

#define SPAN_BYTES ((size_t)512 << 20) /* copies enough to leave the caches */

typedef struct read_job {
    const uint8_t *p;
    size_t n;
    int64_t sums[RN_THREADPOOL_MAX_THREADS];
} read_job_t;

static void read_task(void *ctx, int ith, int nth)
{
    read_job_t *j = ctx;
    size_t per = j->n / (size_t)nth / 64 * 64;
    size_t n = ith == nth - 1 ? j->n - per * (size_t)(nth - 1) : per;
    j->sums[ith] = read_bytes(j->p + per * (size_t)ith, n);
}

static int bench_packed_threads(cr_type_t t, int64_t cols, int rows, int rounds, int n_tok,
                                int threads)
{
    const be_type_traits_t *ts = be_type_traits_at(t, BE_SIMD_SCALAR);
    uint64_t rb = 0;
    if (!ts || !be_pack_supported(t, rows, cols) || !cr_type_row_bytes(t, (uint64_t)cols, &rb)) {
        fprintf(stderr, "bench-kernels: %s %d x %" PRId64 " is not packed\n",
                ts ? ts->name : "?", rows, cols);
        return 1;
    }
    size_t bytes = (size_t)rb * (size_t)rows;
    int copies = (int)CR_MAX(1, (SPAN_BYTES + bytes - 1) / bytes);
    uint8_t *w = malloc(bytes);
    float *f = malloc((size_t)cols * n_tok * sizeof *f);
    float *out = malloc((size_t)rows * (size_t)n_tok * sizeof *out);
    be_weight_t *ws = calloc((size_t)copies, sizeof *ws);
    be_backend_t *be = NULL;
    rn_threadpool_t *pool = NULL;
    cr_err_t err = {0};
    int rc = 1, prepared = 0;
    if (!w || !f || !out || !ws) {
        fprintf(stderr, "bench-kernels: out of memory\n");
        goto out;
    }
    random_rows(ts, w, rb, rows, cols, f);
    for (int64_t i = 0; i < cols * n_tok; i++)
        f[i] = splitmix_normal(&rng_s);
    if (be_cpu_new(threads, &be, &err) || rn_threadpool_new(threads, &pool, &err) ||
        be->ops->reserve(be, n_tok, cols, 8, 4, &err)) {
        fprintf(stderr, "bench-kernels: %s\n", err.msg);
        goto out;
    }
    for (; prepared < copies; prepared++) {
        ws[prepared] = (be_weight_t){.name = "w", .type = t, .n_rows = rows, .n_cols = cols,
                                     .row_bytes = rb, .data = w};
        if (be->ops->weight_prepare(be, &ws[prepared], &err) || !ws[prepared].dev) {
            fprintf(stderr, "bench-kernels: weight_prepare did not pack: %s\n", err.msg);
            goto out;
        }
    }
    double op[MAX_ROUNDS], rd[MAX_ROUNDS];
    static read_job_t rj;
    volatile int64_t sink = 0;
    for (int k = -1; k < rounds; k++) { /* round -1 warms up */
        double t0 = bench_now_s();
        for (int c = 0; c < copies; c++) {
            const be_packed_t *p = ws[c].dev;
            rj.p = p->data;
            rj.n = (size_t)(rows / BE_PACK_ROWS) * p->group_bytes;
            rn_threadpool_run(pool, read_task, &rj, threads);
            sink += rj.sums[0];
        }
        double t1 = bench_now_s();
        for (int c = 0; c < copies; c++)
            be->ops->matmul(be, &ws[c], f, n_tok, out);
        double t2 = bench_now_s();
        if (k >= 0)
            rd[k] = t1 - t0, op[k] = t2 - t1;
    }
    double gb = (double)bytes * copies / 1e9;
    double g_rd = gb / bench_median(rd, rounds), g_op = gb / bench_median(op, rounds);
    printf("%-7s packed %5d x %-6" PRId64 " %7.2f MB x %d copies, %d tokens, %d threads "
           "(%s)  read %6.2f GB/s  matmul %6.2f GB/s  %.0f%% read\n",
           ts->name, rows, cols, (double)bytes / 1e6, copies, n_tok, threads, be_cpu_simd(be),
           g_rd, g_op, 100 * g_op / g_rd);
    rc = 0;
out:
    for (int c = 0; be && c < prepared; c++)
        be->ops->weight_release(be, &ws[c]);
    be_destroy(&be);
    rn_threadpool_destroy(&pool);
    free(w), free(f), free(out), free(ws);
    return rc;
}

int main(int argc, char **argv)
{
    cr_type_t types[MAX_TYPES];
    int n_types = 0, rows = 1024, rounds = 15, n_tok = 1, threads = 1;
    int64_t cols = 4096;
    bool packed = false;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--cols") && v) {
            cols = strtoll(v, NULL, 10), i++;
        } else if (!strcmp(argv[i], "--rows") && v) {
            rows = atoi(v), i++;
        } else if (!strcmp(argv[i], "--rounds") && v) {
            rounds = atoi(v), i++;
        } else if (!strcmp(argv[i], "--tokens") && v) {
            n_tok = atoi(v), i++;
        } else if (!strcmp(argv[i], "--threads") && v) {
            threads = atoi(v), i++;
        } else if (!strcmp(argv[i], "--packed")) {
            packed = true;
        } else if (n_types < MAX_TYPES && parse_type(argv[i], &types[n_types])) {
            n_types++;
        } else {
            fprintf(stderr, "usage: bench-kernels [TYPE ...] [--cols N] [--rows N] "
                            "[--rounds N] [--packed [--tokens N] [--threads T]]\n");
            return 2;
        }
    }
    if (cols < 256 || cols > (1 << 20) || rows < 1 || rows > (1 << 16) || rounds < 1 ||
        rounds > MAX_ROUNDS || n_tok < 1 || n_tok > 512 || threads < 1 ||
        threads > RN_THREADPOOL_MAX_THREADS) {
        fprintf(stderr, "bench-kernels: cols 256..2^20, rows 1..65536, rounds 1..%d, "
                        "tokens 1..512, threads 1..%d\n", MAX_ROUNDS, RN_THREADPOOL_MAX_THREADS);
        return 2;
    }
    if (!n_types && packed) {
        static const cr_type_t dflt[] = {CR_TYPE_Q4_0, CR_TYPE_Q8_0, CR_TYPE_Q4_K,
                                         CR_TYPE_Q6_K};
        memcpy(types, dflt, sizeof dflt);
        n_types = (int)CR_ARRAY_LEN(dflt);
    } else if (!n_types) {
        static const cr_type_t dflt[] = {CR_TYPE_IQ4_NL, CR_TYPE_IQ4_XS, CR_TYPE_MXFP4,
                                         CR_TYPE_Q4_0, CR_TYPE_Q4_K};
        memcpy(types, dflt, sizeof dflt);
        n_types = (int)CR_ARRAY_LEN(dflt);
    }
    printf("bench-kernels: %d thread%s, median of %d rounds, CPU level %s\n", threads,
           threads > 1 ? "s" : "", rounds, be_simd_name(be_simd_detect()));
    int rc = 0;
    for (int k = 0; k < n_types; k++)
        rc |= packed && threads > 1
                  ? bench_packed_threads(types[k], cols, rows, rounds, n_tok, threads)
              : packed ? bench_packed(types[k], cols, rows, rounds, n_tok)
                       : bench_type(types[k], cols, rows, rounds);
    return rc;
}
