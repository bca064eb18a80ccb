/* test_repack.c: packed (interleaved 8-row) Q4_0/Q8_0 weights.
 *
 * Types: Q4_0, Q8_0, Q4_K, Q6_K.
 * - packing then unpacking a row gives the source type's to_float bits;
 * - the scalar packed product lies within float-accumulation rounding of the
 *   exact (double) dot product of the dequantized operands, with the bound
 *   test_quant uses: (blocks + 2) * FLT_EPSILON * sum|terms|;
 * - every SIMD level the CPU has gives the scalar product's bits, for token
 *   counts around the kernels' token tiles, 4 and 5 groups (Q4_0's 512-bit
 *   tiles take groups in pairs) and sub-ranges of groups;
 * - Q4_0, Q6_K and Q8_0 at their integer bounds give the exact sums;
 * - Q8_0 decode on rows long enough that groups go in pairs, for ranges
 *   with a pair and an odd group, gives the scalar bits;
 * - Q4_0 decode (repack_q4_decode.c pairs group g with g + half the
 *   range) gives the scalar bits on short and long rows for even and odd
 *   group counts and sub-ranges, writing nothing outside its range;
 * - Q4_K decode (repack_q4k_decode.c) and Q6_K decode (repack_avx512.c)
 *   on short rows and rows long enough that groups go in pairs, for ranges
 *   with a pair and an odd group, and at their integer bounds, give the
 *   scalar bits and write nothing else;
 * - through the backend: weight_prepare packs (and CORRAL_CPU_REPACK=0 does
 *   not), matmul on 1 and 3 threads and get_rows give the reference bits,
 *   each token alone gives the batch's bits, heap weights stay untouched and
 *   a file-mapped weight's pages leave the process's resident set. */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_impl.h"
#include "services/runner/backend/cpu/repack.h"
#include "services/runner/backend/cpu/repack_q4k_decode.h"
#include "services/runner/backend/cpu/repack_q8_decode.h"
#include "tests/unit/check.h"
#include "tests/unit/smaps.h"
#include "tests/unit/splitmix.h"

#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t rng_s = 0x7e57ab1e;

/* rows x n random weights quantized to t (caller frees). */
static uint8_t *make_weights(cr_type_t t, int64_t rows, int64_t n, size_t *row_bytes)
{
    const be_type_traits_t *tt = be_type_traits_at(t, BE_SIMD_SCALAR);
    uint64_t rb = 0;
    cr_type_row_bytes(t, (uint64_t)n, &rb);
    uint8_t *w = malloc((size_t)rb * (size_t)rows);
    float *row = malloc((size_t)n * sizeof *row);
    for (int64_t r = 0; r < rows; r++) {
        /* a few rows with a large outlier, as real weights have */
        for (int64_t i = 0; i < n; i++)
            row[i] = splitmix_normal(&rng_s) * 0.02f * (r % 5 == 0 && i % 97 == 3 ? 40.0f : 1.0f);
        tt->from_float(row, w + (size_t)r * rb, n);
    }
    free(row);
    *row_bytes = (size_t)rb;
    return w;
}

/* n tokens of activations in the format packed type wt reads (rows of
 * *act_bytes), plus Q8_0 block sums (Q8_0 activations only). */
static void make_acts(cr_type_t wt, int64_t n_cols, int n, uint8_t **xq, int32_t **xs,
                      size_t *act_bytes)
{
    const be_type_traits_t *vt = be_type_traits_at(be_pack_act_type(wt), BE_SIMD_SCALAR);
    int64_t nb = n_cols / 32;
    size_t ab = (size_t)(n_cols / vt->block_elems) * vt->block_bytes;
    float *x = malloc((size_t)n_cols * sizeof *x);
    *xq = malloc(ab * (size_t)n);
    *xs = calloc(2 * (size_t)nb * (size_t)n, sizeof **xs);
    for (int t = 0; t < n; t++) {
        for (int64_t i = 0; i < n_cols; i++)
            x[i] = splitmix_normal(&rng_s);
        vt->from_float(x, *xq + (size_t)t * ab, n_cols);
        if (vt->type == CR_TYPE_Q8_0)
            be_pack_block_sums((const be_block_q8_0_t *)(*xq + (size_t)t * ab), nb,
                               *xs + 2 * (size_t)t * (size_t)nb);
    }
    free(x);
    *act_bytes = ab;
}

static void test_supported(void)
{
    CHECK(be_pack_supported(CR_TYPE_Q4_0, 8, 32));
    CHECK(be_pack_supported(CR_TYPE_Q8_0, 2048, 5632));
    CHECK(!be_pack_supported(CR_TYPE_Q4_0, 12, 64));   /* not whole groups */
    CHECK(!be_pack_supported(CR_TYPE_Q4_0, 16, 48));   /* not whole blocks */
    CHECK(be_pack_supported(CR_TYPE_Q4_K, 16, 256));
    CHECK(!be_pack_supported(CR_TYPE_Q4_K, 16, 288));  /* not whole super-blocks */
    CHECK(be_pack_supported(CR_TYPE_Q6_K, 16, 256));
    CHECK(!be_pack_supported(CR_TYPE_Q5_K, 16, 256));  /* no packed layout */
    CHECK(!be_pack_supported(CR_TYPE_F32, 16, 32));
    be_packed_t *p = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    uint8_t dummy[18 * 12] = {0};
    CHECK_EQ_INT(be_pack_new(CR_TYPE_Q4_0, dummy, 12, 32, 18, &p, &err), CR_E_INVALID);
    CHECK(p == NULL);
    CHECK_EQ_INT(be_pack_new(CR_TYPE_Q4_0, dummy, 8, 32, 20, &p, &err), CR_E_INVALID);
    be_pack_destroy(&p); /* NULL-safe */
}

/* Unpacked rows equal to_float of the source rows, bit for bit. */
static void test_get_row(void)
{
    cr_type_t types[] = {CR_TYPE_Q4_0, CR_TYPE_Q8_0, CR_TYPE_Q4_K, CR_TYPE_Q6_K};
    for (size_t k = 0; k < CR_ARRAY_LEN(types); k++) {
        int64_t rows = 24, n = be_type_traits(types[k])->block_elems == 256 ? 256 * 3 : 32 * 9;
        size_t rb = 0;
        uint8_t *w = make_weights(types[k], rows, n, &rb);
        be_packed_t *p = NULL;
        cr_err_t err;
        cr_err_clear(&err);
        CHECK_EQ_INT(be_pack_new(types[k], w, rows, n, rb, &p, &err), CR_OK);
        if (!p) {
            free(w);
            continue;
        }
        CHECK_EQ_INT((int)p->n_blocks, (int)(n / be_type_traits(types[k])->block_elems));
        CHECK((uintptr_t)p->data % 64 == 0);
        const be_type_traits_t *tt = be_type_traits_at(types[k], BE_SIMD_SCALAR);
        float *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
        int bad = 0;
        for (int64_t r = 0; r < rows; r++) {
            tt->to_float(w + (size_t)r * rb, a, n);
            be_pack_get_row(p, r, b);
            bad += memcmp(a, b, (size_t)n * sizeof *a) != 0;
        }
        CHECK_MSG(bad == 0, "%s: %d unpacked rows differ", tt->name, bad);
        free(a);
        free(b);
        be_pack_destroy(&p);
        CHECK(p == NULL);
        free(w);
    }
}

/* Exact dot product of dequantized weight row r and activation row t.
 * mag: sum of |terms|, with Q4_K's min part (dmin * min * a, subtracted
 * after its own sum) counted twice more, as test_quant does. */
static double exact(const be_type_traits_t *tt, const uint8_t *w, size_t rb, int64_t r,
                    const uint8_t *xq, size_t ab, int64_t n, int t, double *mag)
{
    float *wf = malloc((size_t)n * sizeof *wf), *af = malloc((size_t)n * sizeof *af);
    tt->to_float(w + (size_t)r * rb, wf, n);
    be_type_traits_at(be_pack_act_type(tt->type), BE_SIMD_SCALAR)
        ->to_float(xq + (size_t)t * ab, af, n);
    double s = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        s += (double)wf[i] * af[i];
        m += fabs((double)wf[i] * af[i]);
        if (tt->type == CR_TYPE_Q4_K) {
            const be_block_q4_k_t *blk = (const be_block_q4_k_t *)(w + (size_t)r * rb) + i / 256;
            uint8_t sc, mn;
            be_k4_scale_min((int)(i % 256) / 32, blk->scales, &sc, &mn);
            m += 2 * fabs((double)be_f16_to_f32(blk->dmin) * mn * af[i]);
        }
    }
    free(wf);
    free(af);
    *mag = m;
    return s;
}

static void test_gemm(void)
{
    cr_type_t types[] = {CR_TYPE_Q4_0, CR_TYPE_Q8_0, CR_TYPE_Q4_K, CR_TYPE_Q6_K};
    int64_t cols[] = {32, 32 * 7, 2048}, kcols[] = {256, 256 * 3, 2048};
    /* around the token tiles (8 in Q4_0's 512-bit tiles, 16 elsewhere) */
    int toks[] = {1, 2, 3, 7, 8, 9, 16, 17, 35};
    /* 5 groups: Q4_0's 512-bit tiles take groups in pairs, the last alone */
    int64_t n_rows[] = {32, 40};
    be_simd_t have = be_simd_detect();
    for (size_t k = 0; k < CR_ARRAY_LEN(types); k++)
        for (size_t c = 0; c < CR_ARRAY_LEN(cols) * CR_ARRAY_LEN(n_rows); c++) {
            bool kq = types[k] == CR_TYPE_Q4_K || types[k] == CR_TYPE_Q6_K;
            int64_t rows = n_rows[c % 2], n = kq ? kcols[c / 2] : cols[c / 2], nb = n / 32;
            /* float steps per block: one (two with Q4_K's mins) */
            int64_t terms = types[k] == CR_TYPE_Q4_K ? 2 * (n / 256) : kq ? n / 256 : nb;
            size_t rb = 0;
            uint8_t *w = make_weights(types[k], rows, n, &rb);
            const be_type_traits_t *tt = be_type_traits_at(types[k], BE_SIMD_SCALAR);
            be_packed_t *p = NULL;
            cr_err_t err;
            cr_err_clear(&err);
            CHECK_EQ_INT(be_pack_new(types[k], w, rows, n, rb, &p, &err), CR_OK);
            for (size_t q = 0; p && q < CR_ARRAY_LEN(toks); q++) {
                int nt = toks[q];
                uint8_t *xq;
                int32_t *xs;
                size_t ab;
                make_acts(types[k], n, nt, &xq, &xs, &ab);
                size_t ys = (size_t)rows + 3; /* a stride wider than the rows */
                float *ref = calloc(ys * (size_t)nt, sizeof *ref);
                float *got = calloc(ys * (size_t)nt, sizeof *got);
                be_pack_gemm_at(types[k], BE_SIMD_SCALAR)(p, 0, rows / 8, xq, xs, nt, ref, ys);
                int off = 0;
                for (int t = 0; t < nt; t++)
                    for (int64_t r = 0; r < rows; r++) {
                        double mag, want = exact(tt, w, rb, r, xq, ab, n, t, &mag);
                        double tol = (double)(terms + 2) * FLT_EPSILON * mag + 1e-30;
                        off += fabs(ref[(size_t)t * ys + (size_t)r] - want) > tol;
                    }
                CHECK_MSG(off == 0, "%s n=%" PRId64 " tokens=%d: scalar off %d times",
                          tt->name, n, nt, off);
                for (int lv = BE_SIMD_SCALAR; lv <= (int)have; lv++) {
                    be_pack_gemm_fn fn = be_pack_gemm_at(types[k], (be_simd_t)lv);
                    memset(got, 0, ys * (size_t)nt * sizeof *got);
                    fn(p, 0, rows / 8, xq, xs, nt, got, ys);
                    CHECK_MSG(!memcmp(got, ref, ys * (size_t)nt * sizeof *got),
                              "%s n=%" PRId64 " tokens=%d level %s: bits differ", tt->name, n,
                              nt, be_simd_name((be_simd_t)lv));
                    /* groups 1..2 (a pair) and 1..3 (a pair and one alone)
                     * only: their rows written, the rest left */
                    for (int64_t g1 = 3; g1 <= 4; g1++) {
                        memset(got, 0, ys * (size_t)nt * sizeof *got);
                        fn(p, 1, g1, xq, xs, nt, got, ys);
                        int wrong = 0;
                        for (int t = 0; t < nt; t++)
                            for (int64_t r = 0; r < (int64_t)ys; r++) {
                                float v = got[(size_t)t * ys + (size_t)r];
                                wrong += (r >= 8 && r < 8 * g1)
                                             ? v != ref[(size_t)t * ys + (size_t)r]
                                             : v != 0;
                            }
                        CHECK_MSG(wrong == 0, "%s level %s: groups 1..%" PRId64 " wrote %d wrong",
                                  tt->name, be_simd_name((be_simd_t)lv), g1 - 1, wrong);
                    }
                    /* each token alone: the batch's bits */
                    int diff = 0;
                    float one[40];
                    for (int t = 0; t < nt; t++) {
                        fn(p, 0, rows / 8, xq + (size_t)t * ab, xs + 2 * (size_t)t * (size_t)nb, 1,
                           one, 40);
                        diff += memcmp(one, ref + (size_t)t * ys, (size_t)rows * sizeof *one) != 0;
                    }
                    CHECK_MSG(diff == 0, "%s level %s: %d tokens alone differ", tt->name,
                              be_simd_name((be_simd_t)lv), diff);
                }
                free(xq);
                free(xs);
                free(ref);
                free(got);
            }
            be_pack_destroy(&p);
            free(w);
        }
}


/* Q6_K at the int16 bounds the SIMD kernels rely on: every q = 63 (ql and
 * qh all ones), scale 127, activations all -128, so two chunks' maddubs
 * pair sums reach 2 * 2*63*128 = 32256 in one int16 lane. The product is
 * exact in float: d = da = 1, 16 sub-blocks of 16 * (63 - 32) * -128 * 127
 * per super-block. Every level gives that value. */
static void q6_k_extremes(int rows, int nb)
{
    enum { TOK = 3 };
    be_block_q6_k_t *w = malloc(sizeof *w * (size_t)(rows * nb));
    memset(w, 0xff, sizeof *w * (size_t)(rows * nb));
    for (int i = 0; i < rows * nb; i++) {
        memset(w[i].scales, 127, sizeof w[i].scales);
        w[i].d = 0x3c00; /* f16 1.0 */
    }
    be_block_q8_k_t *x = malloc(sizeof *x * (size_t)(TOK * nb));
    for (int i = 0; i < TOK * nb; i++) {
        x[i].d = 1.0f;
        memset(x[i].qs, 0x80, sizeof x[i].qs); /* -128 */
        for (int k = 0; k < BE_QK_K / 16; k++)
            x[i].bsums[k] = 16 * -128;
    }
    be_packed_t *p = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_pack_new(CR_TYPE_Q6_K, w, rows, (int64_t)nb * BE_QK_K,
                             (size_t)nb * sizeof *w, &p, &err),
                 CR_OK);
    float want = (float)nb * 16.0f * 16.0f * 31.0f * -128.0f * 127.0f;
    float *y = malloc(sizeof *y * (size_t)(TOK * rows));
    for (int lv = BE_SIMD_SCALAR; p && lv <= (int)be_simd_detect(); lv++)
        for (int n = 1; n <= TOK; n += TOK - 1) {
            be_pack_gemm_at(CR_TYPE_Q6_K, (be_simd_t)lv)(p, 0, rows / 8, x, NULL, n, y,
                                                         (size_t)rows);
            int off = 0;
            for (int i = 0; i < n * rows; i++)
                off += y[i] != want;
            CHECK_MSG(off == 0, "Q6_K extremes %d rows x %d blocks, level %s tokens %d: %d "
                      "values off", rows, nb, be_simd_name((be_simd_t)lv), n, off);
        }
    be_pack_destroy(&p);
    free(w);
    free(x);
    free(y);
}

/* one group, then two whose streams are long enough for the one-token
 * kernel's pairs */
static void test_q6_k_extremes(void)
{
    q6_k_extremes(8, 2);
    q6_k_extremes(16, BE_Q6K_DECODE_MIN_STREAM_BLOCKS);
}

/* Q8_0 at the signed bounds: weights -128 (a file may hold it) and 127,
 * activations -127 and 127, mixed so every sign pairing occurs (the SIMD
 * kernels multiply |w| as unsigned by a with w's sign). d = da = 1, so
 * the exact integer sum is the float result at every level, decode and
 * a batch alike. */
static void test_q8_0_extremes(void)
{
    enum { ROWS = 8, NB = 3, TOK = 3 };
    be_block_q8_0_t w[ROWS * NB], x[TOK * NB];
    for (int i = 0; i < ROWS * NB; i++) {
        w[i].d = 0x3c00; /* f16 1.0 */
        for (int e = 0; e < 32; e++)
            w[i].qs[e] = (int8_t)((e + i) % 3 ? -128 : 127);
    }
    for (int i = 0; i < TOK * NB; i++) {
        x[i].d = 0x3c00;
        for (int e = 0; e < 32; e++)
            x[i].qs[e] = (int8_t)((e / 2 + i) % 2 ? -127 : 127);
    }
    int32_t xs[TOK * NB * 2];
    for (int t = 0; t < TOK; t++)
        be_pack_block_sums(x + t * NB, NB, xs + 2 * t * NB);
    be_packed_t *p = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_pack_new(CR_TYPE_Q8_0, w, ROWS, NB * 32, NB * sizeof *w, &p, &err), CR_OK);
    for (int lv = BE_SIMD_SCALAR; p && lv <= (int)be_simd_detect(); lv++)
        for (int n = 1; n <= TOK; n += TOK - 1) {
            float y[TOK * ROWS];
            be_pack_gemm_at(CR_TYPE_Q8_0, (be_simd_t)lv)(p, 0, 1, x, xs, n, y, ROWS);
            int off = 0;
            for (int t = 0; t < n; t++)
                for (int r = 0; r < ROWS; r++) {
                    int64_t want = 0;
                    for (int b = 0; b < NB; b++)
                        for (int e = 0; e < 32; e++)
                            want += w[r * NB + b].qs[e] * x[t * NB + b].qs[e];
                    off += y[t * ROWS + r] != (float)want;
                }
            CHECK_MSG(off == 0, "Q8_0 extremes level %s tokens %d: %d values off",
                      be_simd_name((be_simd_t)lv), n, off);
        }
    be_pack_destroy(&p);
}

/* Q4_0 at its bounds: nibbles 0 and 15 (weights -8 and 7) against
 * activations -127 and 127, mixed so every sign pairing occurs, for 1
 * token (decode), 2 and 9 tokens (a full 8-token tile and one more) on
 * 24 rows of 3 blocks (a 512-bit pair of groups and a lone one; VNNI
 * decode takes such short streams one group at a time) and 40 rows of
 * 128 blocks (VNNI decode pairs groups 0-1 with 2-3, group 4 alone),
 * so both decode paths meet the bounds. Row 0 is all 15s and
 * row 1 all 0s, and token 0's block 0 is all 127: the largest sums one
 * block's high-nibble chain can hold in decode (16 * 15 * 127 per element
 * there). d = da = 1, so the exact integer sum is the float result at
 * every level. */
static void q4_0_extremes(int rows, int nb)
{
    enum { TOK = 9, MAX_ROWS = 40 };
    be_block_q4_0_t *w = malloc((size_t)(rows * nb) * sizeof *w);
    be_block_q8_0_t *x = malloc((size_t)(TOK * nb) * sizeof *x);
    int32_t *xs = malloc((size_t)(TOK * nb * 2) * sizeof *xs);
    for (int i = 0; i < rows * nb; i++) {
        w[i].d = 0x3c00; /* f16 1.0 */
        for (int e = 0; e < 16; e++)
            w[i].qs[e] = (uint8_t)(i < nb       ? 0xff
                                   : i < 2 * nb ? 0x00
                                                : ((e + i) % 3 ? 0x0 : 0xf) |
                                                      ((e + i) % 2 ? 0xf0 : 0x00));
    }
    for (int i = 0; i < TOK * nb; i++) {
        x[i].d = 0x3c00;
        for (int e = 0; e < 32; e++)
            x[i].qs[e] = (int8_t)(i == 0 ? 127 : (e / 3 + i) % 2 ? -127 : 127);
    }
    for (int t = 0; t < TOK; t++)
        be_pack_block_sums(x + t * nb, nb, xs + 2 * t * nb);
    be_packed_t *p = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_pack_new(CR_TYPE_Q4_0, w, rows, nb * 32, nb * sizeof *w, &p, &err), CR_OK);
    for (int lv = BE_SIMD_SCALAR; p && lv <= (int)be_simd_detect(); lv++)
        for (int n = 1; n <= TOK; n += n == 1 ? 1 : TOK - 2) {
            float y[TOK * MAX_ROWS];
            be_pack_gemm_at(CR_TYPE_Q4_0, (be_simd_t)lv)(p, 0, rows / 8, x, xs, n, y, rows);
            int off = 0;
            for (int t = 0; t < n; t++)
                for (int r = 0; r < rows; r++) {
                    int64_t want = 0;
                    for (int b = 0; b < nb; b++)
                        for (int e = 0; e < 16; e++) {
                            uint8_t q = w[r * nb + b].qs[e];
                            want += ((q & 15) - 8) * x[t * nb + b].qs[e];
                            want += ((q >> 4) - 8) * x[t * nb + b].qs[16 + e];
                        }
                    off += y[t * rows + r] != (float)want;
                }
            CHECK_MSG(off == 0, "Q4_0 extremes level %s tokens %d: %d values off",
                      be_simd_name((be_simd_t)lv), n, off);
        }
    be_pack_destroy(&p);
    free(w);
    free(x);
    free(xs);
}

static void test_q4_0_extremes(void)
{
    q4_0_extremes(24, 3);
    q4_0_extremes(40, 128);
}

/* Q8_0 decode (repack_q8_decode.h) on rows and ranges on both sides of
 * where groups go in pairs: every level gives the scalar bits for the
 * whole matrix and for group ranges that start odd, end odd or hold one
 * group (pairs and the odd group after them), and writes nothing outside
 * its range. */
static void test_q8_0_decode_pairs(void)
{
    enum { ROWS = 88 }; /* 11 groups */
    /* Pairs split a range in halves (g with g + half): 64 blocks pair at
     * VNNI only, from 8 groups (two 256-block streams); the AVX2 kernel's
     * row threshold at 127/128; at 127 and 128 blocks a range of 4 or 5
     * groups sits just under / at the stream threshold. */
    int64_t nbs[] = {1, 64, BE_Q8_DECODE_PAIR_BLOCKS - 1, BE_Q8_DECODE_PAIR_BLOCKS,
                     BE_Q8_DECODE_PAIR_BLOCKS + 3};
    int ranges[][2] = {{0, 11}, {1, 11}, {1, 10}, {0, 9}, {2, 3}, {3, 11}, {1, 5},
                       {0, 4}, {6, 11}, {2, 10}};
    be_simd_t have = be_simd_detect();
    for (size_t c = 0; c < CR_ARRAY_LEN(nbs); c++) {
        int64_t n = 32 * nbs[c];
        size_t rb = 0, ab = 0;
        uint8_t *w = make_weights(CR_TYPE_Q8_0, ROWS, n, &rb), *xq = NULL;
        int32_t *xs = NULL;
        make_acts(CR_TYPE_Q8_0, n, 1, &xq, &xs, &ab);
        be_packed_t *p = NULL;
        cr_err_t err;
        cr_err_clear(&err);
        CHECK_EQ_INT(be_pack_new(CR_TYPE_Q8_0, w, ROWS, n, rb, &p, &err), CR_OK);
        float ref[ROWS], got[ROWS];
        if (p)
            be_pack_gemm_q8_0_scalar(p, 0, ROWS / 8, xq, xs, 1, ref, ROWS);
        for (int lv = BE_SIMD_AVX2; p && lv <= (int)have; lv++)
            for (size_t k = 0; k < CR_ARRAY_LEN(ranges); k++) {
                int g0 = ranges[k][0], g1 = ranges[k][1], wrong = 0;
                for (int r = 0; r < ROWS; r++)
                    got[r] = -1.0f;
                be_pack_gemm_at(CR_TYPE_Q8_0, (be_simd_t)lv)(p, g0, g1, xq, xs, 1, got, ROWS);
                for (int r = 0; r < ROWS; r++)
                    wrong += r >= 8 * g0 && r < 8 * g1 ? memcmp(&got[r], &ref[r], sizeof *got) != 0
                                                       : got[r] != -1.0f;
                CHECK_MSG(wrong == 0, "Q8_0 decode %" PRId64 " blocks level %s groups %d..%d: "
                          "%d values wrong", nbs[c], be_simd_name((be_simd_t)lv), g0, g1, wrong);
            }
        be_pack_destroy(&p);
        free(w);
        free(xq);
        free(xs);
    }
}

/* Q4_0 decode (repack_q4_decode.c at VNNI, the tiles elsewhere) on short
 * rows and on rows around 128 blocks (4096 columns), for 5 and 6 groups:
 * every level gives the scalar bits for the whole matrix and for ranges
 * that start odd, end odd, hold one group or two, and writes nothing
 * outside its range. */
static void test_q4_0_decode(void)
{
    int64_t nbs[] = {1, 4, 127, 128, 131};
    int n_groups[] = {5, 6};
    int ranges[][2] = {{0, 5}, {0, 6}, {1, 5}, {1, 4}, {0, 4}, {2, 3}, {3, 5}, {4, 6}, {1, 6}};
    be_simd_t have = be_simd_detect();
    for (size_t c = 0; c < CR_ARRAY_LEN(nbs); c++)
        for (size_t k = 0; k < CR_ARRAY_LEN(n_groups); k++) {
            int rows = 8 * n_groups[k];
            int64_t n = 32 * nbs[c];
            size_t rb = 0, ab = 0;
            uint8_t *w = make_weights(CR_TYPE_Q4_0, rows, n, &rb), *xq = NULL;
            int32_t *xs = NULL;
            make_acts(CR_TYPE_Q4_0, n, 1, &xq, &xs, &ab);
            be_packed_t *p = NULL;
            cr_err_t err;
            cr_err_clear(&err);
            CHECK_EQ_INT(be_pack_new(CR_TYPE_Q4_0, w, rows, n, rb, &p, &err), CR_OK);
            float ref[48], got[48];
            if (p)
                be_pack_gemm_q4_0_scalar(p, 0, rows / 8, xq, xs, 1, ref, (size_t)rows);
            for (int lv = BE_SIMD_AVX2; p && lv <= (int)have; lv++)
                for (size_t r = 0; r < CR_ARRAY_LEN(ranges); r++) {
                    int g0 = ranges[r][0], g1 = ranges[r][1], wrong = 0;
                    if (g1 > n_groups[k])
                        continue;
                    for (int i = 0; i < rows; i++)
                        got[i] = -1.0f;
                    be_pack_gemm_at(CR_TYPE_Q4_0, (be_simd_t)lv)(p, g0, g1, xq, xs, 1, got,
                                                                 (size_t)rows);
                    for (int i = 0; i < rows; i++)
                        wrong += i >= 8 * g0 && i < 8 * g1
                                     ? memcmp(&got[i], &ref[i], sizeof *got) != 0
                                     : got[i] != -1.0f;
                    CHECK_MSG(wrong == 0,
                              "Q4_0 decode %" PRId64 " blocks %d groups level %s range %d..%d: "
                              "%d values wrong",
                              nbs[c], n_groups[k], be_simd_name((be_simd_t)lv), g0, g1, wrong);
                }
            be_pack_destroy(&p);
            free(w);
            free(xq);
            free(xs);
        }
}

/* One-token products of p (type t) at every level for each group range:
 * the scalar bits inside the range and the sentinel -1 left outside.
 * Returns the number of wrong values; what names the case in messages. */
static int decode_ranges(cr_type_t t, const be_packed_t *p, const void *xq, const int32_t *xs,
                         const char *what)
{
    enum { MAX_ROWS = 40 };
    int ranges[][2] = {{0, 5}, {1, 5}, {1, 4}, {0, 4}, {2, 3}, {3, 5}, {0, 1}, {0, 2}};
    int rows = (int)p->n_rows, bad = 0;
    float ref[MAX_ROWS], got[MAX_ROWS];
    be_pack_gemm_at(t, BE_SIMD_SCALAR)(p, 0, rows / 8, xq, xs, 1, ref, (size_t)rows);
    for (int lv = BE_SIMD_AVX2; lv <= (int)be_simd_detect(); lv++)
        for (size_t k = 0; k < CR_ARRAY_LEN(ranges); k++) {
            int g0 = ranges[k][0], g1 = ranges[k][1], wrong = 0;
            if (8 * g1 > rows)
                continue;
            for (int r = 0; r < MAX_ROWS; r++)
                got[r] = -1.0f;
            be_pack_gemm_at(t, (be_simd_t)lv)(p, g0, g1, xq, xs, 1, got, (size_t)rows);
            for (int r = 0; r < MAX_ROWS; r++)
                wrong += r >= 8 * g0 && r < 8 * g1 ? memcmp(&got[r], &ref[r], sizeof *got) != 0
                                                   : got[r] != -1.0f;
            CHECK_MSG(wrong == 0, "%s level %s groups %d..%d: %d values wrong", what,
                      be_simd_name((be_simd_t)lv), g0, g1, wrong);
            bad += wrong;
        }
    return bad;
}

/* K-quant decode on random weights (Q4_K, Q6_K: their one-token kernels
 * pair groups from min_stream super-blocks per stream): rows of 1 to 3
 * super-blocks and around half of min_stream (a range of 4 or 5 groups
 * pairs g with g + 2 from there on, one group at a time below), 5 groups
 * (pairs and an odd one), 1 to 5 groups in a range. */
static void k_decode(cr_type_t t, int64_t min_stream)
{
    enum { ROWS = 40 };
    int64_t half = min_stream / 2, nbs[] = {1, 2, 3, half - 1, half, half + 3};
    for (size_t c = 0; c < CR_ARRAY_LEN(nbs); c++) {
        int64_t n = 256 * nbs[c];
        size_t rb = 0, ab = 0;
        uint8_t *w = make_weights(t, ROWS, n, &rb), *xq = NULL;
        int32_t *xs = NULL;
        make_acts(t, n, 1, &xq, &xs, &ab);
        be_packed_t *p = NULL;
        cr_err_t err;
        cr_err_clear(&err);
        CHECK_EQ_INT(be_pack_new(t, w, ROWS, n, rb, &p, &err), CR_OK);
        char what[64];
        snprintf(what, sizeof what, "%s decode %" PRId64 " blocks",
                 be_type_traits(t)->name, nbs[c]);
        if (p)
            decode_ranges(t, p, xq, xs, what);
        be_pack_destroy(&p);
        free(w);
        free(xq);
        free(xs);
    }
}

static void test_q4_k_decode(void)
{
    k_decode(CR_TYPE_Q4_K, BE_Q4K_DECODE_MIN_STREAM_BLOCKS);
}

static void test_q6_k_decode(void)
{
    k_decode(CR_TYPE_Q6_K, BE_Q6K_DECODE_MIN_STREAM_BLOCKS);
}

/* Sub-block sb's 6-bit scale and min into a Q4_K block's packed scales
 * (quant.h: be_k4_scale_min reads them back). */
static void set_k4_scale_min(be_block_q4_k_t *b, int sb, uint8_t sc, uint8_t m)
{
    uint8_t *s = b->scales;
    if (sb < 4) {
        s[sb] = (uint8_t)((s[sb] & 0xc0) | sc);
        s[sb + 4] = (uint8_t)((s[sb + 4] & 0xc0) | m);
    } else {
        s[sb + 4] = (uint8_t)((sc & 15) | (m & 15) << 4);
        s[sb - 4] = (uint8_t)((s[sb - 4] & 0x3f) | (sc >> 4) << 6);
        s[sb] = (uint8_t)((s[sb] & 0x3f) | (m >> 4) << 6);
    }
}

/* Q4_K decode at its integer bounds: nibbles 0 and 15, scales and mins 0
 * and 63, activations -128 and 127, mixed so that most sub-blocks reach
 * |sum of q * a| = 32 * 15 * 128 with scale 63, on rows one super-block
 * short of pairs and on paired rows. d = dmin = da = 1, so the result is
 * fma(-(float)msum, 1, (float)isum) of the exact integer sums, computed
 * here from the source blocks (not the packed layout); every level gives
 * it bit for bit. */
static void test_q4_k_decode_extremes(void)
{
    enum { ROWS = 40 };
    int64_t nbs[] = {1, BE_Q4K_DECODE_MIN_STREAM_BLOCKS / 2 - 1,
                     BE_Q4K_DECODE_MIN_STREAM_BLOCKS / 2};
    for (size_t c = 0; c < CR_ARRAY_LEN(nbs); c++) {
        int64_t nb = nbs[c];
        be_block_q4_k_t *w = calloc((size_t)(ROWS * nb), sizeof *w);
        be_block_q8_k_t *x = calloc((size_t)nb, sizeof *x);
        for (int64_t i = 0; i < ROWS * nb; i++) {
            w[i].d = w[i].dmin = 0x3c00; /* f16 1.0 */
            int hi = (int)(i % 7 == 0); /* mostly high nibble 15, low 0 */
            for (int e = 0; e < 128; e++)
                w[i].qs[e] = (uint8_t)((e + i) % 5 == 0 ? 0xff : hi ? 0x0f : 0xf0);
            for (int sb = 0; sb < 8; sb++) {
                uint8_t sc = (sb + i) % 4 == 3 ? 0 : 63, m = (sb + i) % 3 == 1 ? 0 : 63;
                set_k4_scale_min(&w[i], sb, sc, m);
                uint8_t rs, rm;
                be_k4_scale_min(sb, w[i].scales, &rs, &rm);
                CHECK(rs == sc && rm == m);
            }
        }
        for (int64_t b = 0; b < nb; b++) {
            x[b].d = 1.0f;
            for (int e = 0; e < 256; e++)
                x[b].qs[e] = (int8_t)((e / 32 + b) % 4 == 2 ? 127 : (e % 9 == 4 ? 127 : -128));
            for (int k = 0; k < 16; k++) {
                int s = 0;
                for (int e = 16 * k; e < 16 * k + 16; e++)
                    s += x[b].qs[e];
                x[b].bsums[k] = (int16_t)s;
            }
        }
        be_packed_t *p = NULL;
        cr_err_t err;
        cr_err_clear(&err);
        CHECK_EQ_INT(be_pack_new(CR_TYPE_Q4_K, w, ROWS, 256 * nb, (size_t)nb * sizeof *w, &p,
                                 &err),
                     CR_OK);
        if (!p)
            goto next;
        float ref[ROWS];
        be_pack_gemm_q4_k_scalar(p, 0, ROWS / 8, x, NULL, 1, ref, ROWS);
        int off = 0;
        for (int r = 0; r < ROWS; r++) {
            float f = 0;
            for (int64_t b = 0; b < nb; b++) {
                const be_block_q4_k_t *blk = &w[r * nb + b];
                int64_t isum = 0, msum = 0;
                for (int e = 0; e < 256; e++) {
                    uint8_t sc, m, byte = blk->qs[32 * (e / 64) + e % 32];
                    be_k4_scale_min(e / 32, blk->scales, &sc, &m);
                    int q = e % 64 < 32 ? byte & 15 : byte >> 4;
                    isum += (int64_t)sc * q * x[b].qs[e];
                    msum += (int64_t)m * x[b].qs[e];
                }
                f = fmaf((float)isum, 1.0f, f);
                f = fmaf(-(float)msum, 1.0f, f);
            }
            off += memcmp(&f, &ref[r], sizeof f) != 0;
        }
        CHECK_MSG(off == 0, "Q4_K extremes %" PRId64 " blocks: scalar off %d times", nb, off);
        char what[64];
        snprintf(what, sizeof what, "Q4_K decode extremes %" PRId64 " blocks", nb);
        decode_ranges(CR_TYPE_Q4_K, p, x, NULL, what);
    next:
        be_pack_destroy(&p);
        free(w);
        free(x);
    }
}

static void test_backend(void)
{
    be_backend_t *be1 = NULL, *be3 = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_cpu_new(1, &be1, &err), CR_OK);
    CHECK_EQ_INT(be_cpu_new(3, &be3, &err), CR_OK);
    if (!be1 || !be3)
        return;
    cr_type_t types[] = {CR_TYPE_Q4_0, CR_TYPE_Q8_0, CR_TYPE_Q4_K, CR_TYPE_Q6_K};
    enum { ROWS = 64, NTOK = 21 };
    for (size_t k = 0; k < CR_ARRAY_LEN(types); k++) {
        int64_t n = 512, nb = n / 32;
        size_t rb = 0;
        uint8_t *w = make_weights(types[k], ROWS, n, &rb);
        uint8_t *copy = malloc(rb * ROWS);
        memcpy(copy, w, rb * ROWS);
        be_weight_t bw = {"w", types[k], n, ROWS, rb, w, NULL};
        CHECK_EQ_INT(be1->ops->weight_prepare(be1, &bw, &err), CR_OK);
        CHECK(bw.dev != NULL);
        CHECK(!memcmp(w, copy, rb * ROWS)); /* heap bytes are never dropped */
        CHECK_EQ_INT(be1->ops->reserve(be1, NTOK, n, 16, 1, &err), CR_OK);
        CHECK_EQ_INT(be3->ops->reserve(be3, NTOK, n, 16, 1, &err), CR_OK);
        float *x = malloc((size_t)n * NTOK * sizeof *x);
        for (int64_t i = 0; i < n * NTOK; i++)
            x[i] = splitmix_normal(&rng_s);
        /* the reference: activations quantized by the scalar traits, the
         * scalar packed product */
        const be_type_traits_t *vt = be_type_traits_at(be_pack_act_type(types[k]),
                                                       BE_SIMD_SCALAR);
        size_t ab = (size_t)(n / vt->block_elems) * vt->block_bytes;
        uint8_t *xq = malloc(ab * NTOK);
        int32_t *xs = calloc(2 * (size_t)nb * NTOK, sizeof *xs);
        for (int t = 0; t < NTOK; t++) {
            vt->from_float(x + (size_t)t * (size_t)n, xq + (size_t)t * ab, n);
            if (vt->type == CR_TYPE_Q8_0)
                be_pack_block_sums((const be_block_q8_0_t *)(xq + (size_t)t * ab), nb,
                                   xs + 2 * (size_t)t * (size_t)nb);
        }
        float ref[ROWS * NTOK], y1[ROWS * NTOK], y3[ROWS * NTOK], one[ROWS];
        be_pack_gemm_at(types[k], BE_SIMD_SCALAR)(bw.dev, 0, ROWS / 8, xq, xs, NTOK, ref, ROWS);
        be1->ops->matmul(be1, &bw, x, NTOK, y1);
        be3->ops->matmul(be3, &bw, x, NTOK, y3);
        CHECK_MSG(!memcmp(y1, ref, sizeof ref), "%d: 1-thread matmul differs", (int)k);
        CHECK_MSG(!memcmp(y3, ref, sizeof ref), "%d: 3-thread matmul differs", (int)k);
        int diff = 0;
        for (int t = 0; t < NTOK; t++) {
            be3->ops->matmul(be3, &bw, x + (size_t)t * (size_t)n, 1, one);
            diff += memcmp(one, ref + (size_t)t * ROWS, sizeof one) != 0;
        }
        CHECK_MSG(diff == 0, "%d: %d tokens alone differ from the batch", (int)k, diff);
        /* get_rows from the packed copy: to_float's bits */
        int32_t ids[3] = {0, 37, ROWS - 1};
        float *got = malloc(3 * (size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
        be1->ops->get_rows(be1, &bw, ids, 3, got);
        int bad = 0;
        for (int i = 0; i < 3; i++) {
            be_type_traits(types[k])->to_float(copy + (size_t)ids[i] * rb, want, n);
            bad += memcmp(got + (size_t)i * (size_t)n, want, (size_t)n * sizeof *want) != 0;
        }
        CHECK_EQ_INT(bad, 0);
        be1->ops->weight_release(be1, &bw);
        CHECK(bw.dev == NULL);
        free(got);
        free(want);
        free(x);
        free(xq);
        free(xs);
        free(w);
        free(copy);
    }
    /* a matrix that is not whole groups stays in place */
    size_t rb = 0;
    uint8_t *w = make_weights(CR_TYPE_Q4_0, 12, 64, &rb);
    be_weight_t odd = {"odd", CR_TYPE_Q4_0, 64, 12, rb, w, NULL};
    CHECK_EQ_INT(be1->ops->weight_prepare(be1, &odd, &err), CR_OK);
    CHECK(odd.dev == NULL);
    free(w);
    be_destroy(&be1);
    be_destroy(&be3);

    /* CORRAL_CPU_REPACK=0: nothing is packed */
    setenv("CORRAL_CPU_REPACK", "0", 1);
    be_backend_t *be0 = NULL;
    CHECK_EQ_INT(be_cpu_new(1, &be0, &err), CR_OK);
    unsetenv("CORRAL_CPU_REPACK");
    if (be0) {
        w = make_weights(CR_TYPE_Q8_0, 16, 64, &rb);
        be_weight_t plain = {"plain", CR_TYPE_Q8_0, 64, 16, rb, w, NULL};
        CHECK_EQ_INT(be0->ops->weight_prepare(be0, &plain, &err), CR_OK);
        CHECK(plain.dev == NULL);
        free(w);
        be_destroy(&be0);
    }
}

/* A weight in a file mapping: after packing, its pages leave the resident
 * set (one copy in RAM), and products still read the packed copy. */
static void test_file_pages_dropped(void)
{
    char path[] = "/tmp/corral-test-repack-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    unlink(path);
    enum { ROWS = 256 };
    int64_t n = 2048;
    size_t rb = 0;
    uint8_t *w = make_weights(CR_TYPE_Q4_0, ROWS, n, &rb);
    size_t bytes = rb * ROWS; /* 288 kB */
    CHECK(write(fd, w, bytes) == (ssize_t)bytes);
    void *map = mmap(NULL, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    CHECK(map != MAP_FAILED);
    if (map == MAP_FAILED) {
        free(w);
        return;
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < bytes; i += 4096)
        sink ^= ((const uint8_t *)map)[i]; /* fault every page in */
    CR_UNUSED(sink);
    long before = mapping_rss_kb(map);
    be_backend_t *be = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(be_cpu_new(1, &be, &err), CR_OK);
    be_weight_t bw = {"mapped", CR_TYPE_Q4_0, n, ROWS, rb, map, NULL};
    CHECK_EQ_INT(be->ops->weight_prepare(be, &bw, &err), CR_OK);
    long after = mapping_rss_kb(map);
    CHECK_MSG(before >= 256 && after >= 0 && after <= 8,
              "mapped weight resident before %ld kB, after %ld kB", before, after);
    /* the packed copy still answers; the file bytes are still readable */
    int32_t id = 5;
    float got[2048], want[2048];
    be->ops->get_rows(be, &bw, &id, 1, got);
    be_type_traits(CR_TYPE_Q4_0)->to_float(w + 5 * rb, want, n);
    CHECK(!memcmp(got, want, sizeof got));
    CHECK(!memcmp(map, w, bytes));
    be->ops->weight_release(be, &bw);
    be_destroy(&be);
    munmap(map, bytes);
    free(w);
}

int main(void)
{
    test_supported();
    test_get_row();
    test_gemm();
    test_q6_k_extremes();
    test_q8_0_extremes();
    test_q4_0_extremes();
    test_q8_0_decode_pairs();
    test_q4_0_decode();
    test_q4_k_decode();
    test_q6_k_decode();
    test_q4_k_decode_extremes();
    test_backend();
    test_file_pages_dropped();
    return check_finish("test_repack");
}
