/* kernels.c: bench-kernels, the speed of one type's dot product per SIMD
 * level.
 *
 *   bench-kernels [TYPE ...] [--cols N] [--rows N] [--rounds N]
 *
 * For each weight type named (default: IQ4_NL IQ4_XS MXFP4, with Q4_0 and
 * Q4_K beside them for scale), a ROWS x COLS matrix (default 1024 x 4096:
 * 2.1 to 2.4 MB, inside L2/L3, so the kernel's arithmetic is measured and
 * not the memory) of N(0, 0.02) weights is quantized once with one
 * activation row; each round runs vec_dot over every row at each level
 * the CPU has (scalar, avx2, avx512vnni: the last uses whatever traits
 * that level has, the AVX2 ones where no AVX-512 kernel exists). One
 * thread. Prints the median GB/s of weights read and the ratio to the
 * AVX2 level. The row-major kernels only: packed GEMM (repack.c) is not
 * measured. Never part of ctest. */
#include "lib/prelude.h"
#include "bench/stats.h"
#include "services/runner/backend/cpu/quant.h"

#include <math.h>

enum { MAX_TYPES = 16, MAX_ROUNDS = BENCH_MEDIAN_MAX };

static uint64_t rng_s = 42;

static float rnd_normal(void)
{
    uint64_t a = (rng_s = rng_s * 6364136223846793005ull + 1442695040888963407ull) >> 11;
    uint64_t b = (rng_s = rng_s * 6364136223846793005ull + 1442695040888963407ull) >> 11;
    double u1 = ((double)a + 0.5) / 9007199254740992.0, u2 = (double)b / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

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
    for (int r = 0; r < rows; r++) {
        for (int64_t i = 0; i < cols; i++)
            f[i] = rnd_normal() * 0.02f;
        ts->from_float(f, w + (size_t)r * rb, cols);
    }
    for (int64_t i = 0; i < cols; i++)
        f[i] = rnd_normal();
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

int main(int argc, char **argv)
{
    cr_type_t types[MAX_TYPES];
    int n_types = 0, rows = 1024, rounds = 15;
    int64_t cols = 4096;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--cols") && v) {
            cols = strtoll(v, NULL, 10), i++;
        } else if (!strcmp(argv[i], "--rows") && v) {
            rows = atoi(v), i++;
        } else if (!strcmp(argv[i], "--rounds") && v) {
            rounds = atoi(v), i++;
        } else if (n_types < MAX_TYPES && parse_type(argv[i], &types[n_types])) {
            n_types++;
        } else {
            fprintf(stderr, "usage: bench-kernels [TYPE ...] [--cols N] [--rows N] "
                            "[--rounds N]\n");
            return 2;
        }
    }
    if (cols < 256 || cols > (1 << 20) || rows < 1 || rows > (1 << 16) || rounds < 1 ||
        rounds > MAX_ROUNDS) {
        fprintf(stderr, "bench-kernels: cols 256..2^20, rows 1..65536, rounds 1..%d\n",
                MAX_ROUNDS);
        return 2;
    }
    if (!n_types) {
        static const cr_type_t dflt[] = {CR_TYPE_IQ4_NL, CR_TYPE_IQ4_XS, CR_TYPE_MXFP4,
                                         CR_TYPE_Q4_0, CR_TYPE_Q4_K};
        memcpy(types, dflt, sizeof dflt);
        n_types = (int)CR_ARRAY_LEN(dflt);
    }
    printf("bench-kernels: one thread, median of %d rounds, CPU level %s\n", rounds,
           be_simd_name(be_simd_detect()));
    int rc = 0;
    for (int k = 0; k < n_types; k++)
        rc |= bench_type(types[k], cols, rows, rounds);
    return rc;
}
