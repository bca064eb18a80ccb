/* test_quant_iq.c: the 2- and 3-bit I-quants IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S and the 1.5-bit IQ1_S (quant_iq.c, quant_iq1.c,
 * quant_iq_grid.c and their AVX2 dot products, which the AVX-512 level
 * uses too).
 *
 * - the grids' structure: point count, coordinates from the format's
 *   value set, every value used, no point twice, a checksum of each table
 *   (taken when the tables were derived), the expanded byte grids equal to
 *   the compact ones, the 8th sign bit the parity of the 7 stored;
 * - blocks of random bytes (every bit pattern is a valid block) dequantize
 *   to values this file computes from the layouts in quant.h and the
 *   format's formula, in ggml's float steps: exact;
 * - dot products at every SIMD level the CPU has: the same bits as the
 *   scalar kernel (all sum integers), and the scalar one within 1e-5 of
 *   the exact dot product of the dequantized operands;
 * - quantize -> dequantize: relative rms error bounds on N(0, 1) rows; the
 *   blocks written decode to the same values at every level;
 * - edge rows: zeros stay zeros, huge values stay finite, NaN and inf are
 *   survived;
 * - traits geometry against lib/tensor_type. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/quant_iq.h"
#include "tests/unit/check.h"
#include "tests/unit/splitmix.h"

static uint64_t rng_s = 0x1a2b3c4d5e6fULL;

static const cr_type_t iq_types[] = {CR_TYPE_IQ2_XXS, CR_TYPE_IQ2_XS, CR_TYPE_IQ2_S,
                                     CR_TYPE_IQ3_XXS, CR_TYPE_IQ3_S, CR_TYPE_IQ1_S};

/* ---- grids ------------------------------------------------------------ */

/* FNV-1a over the codes, little end first: taken from the tables as
 * derived (a changed entry fails here even where the structure holds). */
static uint32_t fnv_codes(const uint16_t *c, int n)
{
    uint32_t h = 2166136261u;
    for (int p = 0; p < n; p++) {
        h = (h ^ (c[p] & 255)) * 16777619u;
        h = (h ^ (c[p] >> 8)) * 16777619u;
    }
    return h;
}

static void test_grid_structure(void)
{
    static const struct {
        const char *name;
        int n_points, dim;
        int8_t set[8];
        int n_set;
        uint32_t fnv;
    } want[] = {
        {"iq2xxs", 256, 8, {8, 25, 43}, 3, 0x0e66d01du},
        {"iq2xs", 512, 8, {8, 25, 43}, 3, 0xf65db7a3u},
        {"iq2s", 1024, 8, {8, 25, 43}, 3, 0xa1eb5434u},
        {"iq3xxs", 256, 4, {4, 12, 20, 28, 36, 44, 52, 62}, 8, 0x4818d567u},
        {"iq3s", 512, 4, {1, 3, 5, 7, 9, 11, 13, 15}, 8, 0xf6248ac2u},
        {"iq1s", 2048, 8, {-1, 0, 1}, 3, 0xfd6cbae4u},
    };
    int n_defs = 0;
    const be_iq_grid_def_t *defs = be_iq_grid_defs(&n_defs);
    CHECK_EQ_INT(n_defs, (int)CR_ARRAY_LEN(want));
    const be_iq_grids_t *g = be_iq_grids();
    for (int t = 0; t < n_defs && t < (int)CR_ARRAY_LEN(want); t++) {
        const be_iq_grid_def_t *d = &defs[t];
        CHECK_EQ_STR(d->name, want[t].name);
        CHECK_EQ_INT(d->n_points, want[t].n_points);
        CHECK_EQ_INT(d->dim, want[t].dim);
        CHECK_EQ_INT(d->n_set, want[t].n_set);
        for (int k = 0; k < d->n_set && k < want[t].n_set; k++)
            CHECK_EQ_INT(d->set[k], want[t].set[k]);
        uint32_t h = fnv_codes(d->code, d->n_points);
        CHECK_MSG(h == want[t].fnv, "%s: checksum %08x, want %08x", d->name, h, want[t].fnv);
        unsigned mask = (1u << d->bits) - 1;
        int used[8] = {0}, bad = 0, dup = 0;
        for (int p = 0; p < d->n_points; p++) {
            /* no bits above the coordinates, every index inside the set */
            if (d->code[p] >> (d->bits * d->dim))
                bad++;
            for (int c = 0; c < d->dim; c++) {
                unsigned k = (d->code[p] >> (d->bits * c)) & mask;
                if (k >= (unsigned)d->n_set)
                    bad++;
                else
                    used[k]++;
            }
            for (int q = 0; q < p; q++)
                dup += d->code[q] == d->code[p];
            /* the expanded bytes are the same point */
            uint64_t e = t == 0 ? g->iq2xxs[p] : t == 1 ? g->iq2xs[p] : t == 2 ? g->iq2s[p]
                         : t == 3 ? g->iq3xxs[p] : t == 4 ? g->iq3s[p] : g->iq1s[p];
            for (int c = 0; c < d->dim; c++) {
                unsigned k = (d->code[p] >> (d->bits * c)) & mask;
                if (k < (unsigned)d->n_set && (int8_t)(uint8_t)(e >> (8 * c)) != d->set[k])
                    bad++;
            }
            if (d->dim < 8 && e >> (8 * d->dim))
                bad++;
        }
        CHECK_MSG(bad == 0, "%s: %d bad coordinates", d->name, bad);
        CHECK_MSG(dup == 0, "%s: %d duplicate points", d->name, dup);
        for (int k = 0; k < d->n_set; k++)
            CHECK_MSG(used[k] > 0, "%s: value %d never used", d->name, d->set[k]);
    }
    /* the 7 stored sign bits come back, and the 8th makes the count even */
    int bad = 0;
    for (int s = 0; s < 128; s++) {
        int full = g->signs[s];
        if ((full & 127) != s || (__builtin_popcount((unsigned)full) & 1))
            bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

/* ---- dequantize against the formula ----------------------------------- */

static int grid_coord(int def, int point, int c)
{
    int n = 0;
    const be_iq_grid_def_t *d = &be_iq_grid_defs(&n)[def];
    return d->set[(d->code[point] >> (d->bits * c)) & ((1u << d->bits) - 1)];
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Sign c (0..7) of a group stored as 7 bits with even parity. */
static int parity_sign(unsigned s7, int c)
{
    return c < 7 ? (s7 >> c) & 1 : __builtin_popcount(s7) & 1;
}

/* Element e (0..255) of one block b of type t, from quant.h's layouts:
 * db is ggml's d * (0.5 + ls) * 0.25 (IQ2_*), * 0.5 (IQ3_XXS), or
 * d * (1 + 2 ls) (IQ3_S); value = db * grid coordinate, negated by its
 * sign. IQ1_S: d * (2 ls + 1) * (coordinate +- 1/8). */
static float expect(cr_type_t t, const uint8_t *b, int e)
{
    float d = be_f16_to_f32((uint16_t)(b[0] | b[1] << 8));
    const uint8_t *q = b + 2;
    int ib = e / 32, j = e % 32, l = j / 8, c = j % 8;
    int coord = 0, neg = 0;
    float db = 0;
    if (t == CR_TYPE_IQ1_S) {
        unsigned h = q[32 + 2 * ib] | q[32 + 2 * ib + 1] << 8;
        int idx = q[4 * ib + l] | ((h >> (3 * l)) & 7) << 8;
        float dl = d * (float)(2 * ((h >> 12) & 7) + 1);
        return dl * ((float)grid_coord(5, idx, c) + (h >> 15 ? -0.125f : 0.125f));
    }
    if (t == CR_TYPE_IQ2_XXS) {
        uint32_t u = le32(q + 8 * ib + 4);
        coord = grid_coord(0, q[8 * ib + l], c);
        neg = parity_sign((u >> (7 * l)) & 127, c);
        db = d * (0.5f + (float)(u >> 28)) * 0.25f;
    } else if (t == CR_TYPE_IQ2_XS) {
        unsigned v = q[2 * (4 * ib + l)] | q[2 * (4 * ib + l) + 1] << 8;
        coord = grid_coord(1, v & 511, c);
        neg = parity_sign(v >> 9, c);
        int sc = q[64 + ib];
        db = d * (0.5f + (float)(j < 16 ? sc & 15 : sc >> 4)) * 0.25f;
    } else if (t == CR_TYPE_IQ2_S) {
        int idx = q[4 * ib + l] | ((q[64 + ib] >> (2 * l)) & 3) << 8;
        coord = grid_coord(2, idx, c);
        neg = (q[32 + 4 * ib + l] >> c) & 1;
        int sc = q[72 + ib];
        db = d * (0.5f + (float)(j < 16 ? sc & 15 : sc >> 4)) * 0.25f;
    } else if (t == CR_TYPE_IQ3_XXS) {
        uint32_t u = le32(q + 64 + 4 * ib);
        coord = grid_coord(3, q[8 * ib + j / 4], j % 4);
        neg = parity_sign((u >> (7 * l)) & 127, c);
        db = d * (0.5f + (float)(u >> 28)) * 0.5f;
    } else {
        int k = j / 4;
        int idx = q[8 * ib + k] | ((q[64 + ib] >> k) & 1) << 8;
        coord = grid_coord(4, idx, j % 4);
        neg = (q[72 + 4 * ib + l] >> c) & 1;
        int ls = (q[104 + ib / 2] >> (4 * (ib % 2))) & 15;
        db = d * (float)(1 + 2 * ls);
    }
    return db * (float)coord * (neg ? -1.0f : 1.0f);
}

/* A random block with a finite, modest f16 scale (0.5 .. 2). */
static void random_block(uint8_t *b, size_t bytes)
{
    for (size_t k = 0; k < bytes; k++)
        b[k] = (uint8_t)splitmix_next(&rng_s);
    uint16_t d = be_f32_to_f16(0.5f + 1.5f * (float)(splitmix_next(&rng_s) >> 40) / 16777216.0f);
    b[0] = (uint8_t)d;
    b[1] = (uint8_t)(d >> 8);
}

static void test_dequant_formula(void)
{
    enum { NB = 16 };
    for (size_t ti = 0; ti < CR_ARRAY_LEN(iq_types); ti++) {
        cr_type_t t = iq_types[ti];
        const be_type_traits_t *tt = be_type_traits_at(t, BE_SIMD_SCALAR);
        size_t bb = cr_type_info(t)->block_bytes;
        uint8_t *blk = malloc(bb * NB);
        float *out = malloc(sizeof(float) * 256 * NB);
        for (size_t k = 0; k < bb * NB; k += bb)
            random_block(blk + k, bb);
        tt->to_float(blk, out, 256 * NB);
        int bad = 0;
        for (int i = 0; i < NB; i++) {
            for (int e = 0; e < 256; e++) {
                float want = expect(t, blk + (size_t)i * bb, e);
                if (memcmp(&want, &out[256 * i + e], 4)) {
                    if (bad < 4)
                        fprintf(stderr, "%s block %d element %d: %.9g, want %.9g\n",
                                tt->name, i, e, out[256 * i + e], want);
                    bad++;
                }
            }
        }
        CHECK_MSG(bad == 0, "%s: %d elements differ from the formula", tt->name, bad);
        free(blk);
        free(out);
    }
}

/* ---- dot products ------------------------------------------------------ */

/* Q8_K's sums per 16 (IQ1_S's shift reads them). */
static void fill_bsums(be_block_q8_k_t *y, int nb)
{
    for (int i = 0; i < nb; i++) {
        for (int k = 0; k < BE_QK_K / 16; k++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += y[i].qs[16 * k + l];
            y[i].bsums[k] = (int16_t)s;
        }
    }
}

static void random_q8_k(be_block_q8_k_t *y, int nb)
{
    for (int i = 0; i < nb; i++) {
        y[i].d = 0.001f + (float)(splitmix_next(&rng_s) >> 40) / 16777216.0f * 0.01f;
        for (int k = 0; k < BE_QK_K; k++)
            y[i].qs[k] = (int8_t)(uint8_t)splitmix_next(&rng_s); /* -128 included */
    }
    fill_bsums(y, nb);
}

static void test_dots(void)
{
    enum { NB = 12, N = NB * BE_QK_K };
    be_simd_t have = be_simd_detect();
    be_block_q8_k_t *y = malloc(sizeof *y * NB);
    float *wf = malloc(sizeof(float) * N);
    for (size_t ti = 0; ti < CR_ARRAY_LEN(iq_types); ti++) {
        cr_type_t t = iq_types[ti];
        const be_type_traits_t *ref = be_type_traits_at(t, BE_SIMD_SCALAR);
        CHECK(ref->vec_dot_type == CR_TYPE_Q8_K);
        size_t bb = ref->block_bytes;
        uint8_t *w = malloc(bb * NB);
        for (int rep = 0; rep < 8; rep++) {
            for (size_t k = 0; k < bb * NB; k += bb)
                random_block(w + k, bb);
            /* extremes: all scales 15, grids at their largest where the
             * bits allow, activations -128 */
            if (rep == 7) {
                memset(w + 2, 0xff, bb - 2);
                for (int i = 0; i < NB; i++)
                    memset(y[i].qs, 0x80, BE_QK_K);
                fill_bsums(y, NB);
            } else {
                random_q8_k(y, NB);
            }
            ref->to_float(w, wf, N);
            double exact = 0, mag = 0;
            for (int i = 0; i < NB; i++)
                for (int k = 0; k < BE_QK_K; k++) {
                    double p = (double)wf[i * BE_QK_K + k] * y[i].qs[k] * y[i].d;
                    exact += p;
                    mag += fabs(p);
                }
            float s_ref = 0;
            ref->vec_dot(N, &s_ref, w, y);
            CHECK_MSG(fabs(s_ref - exact) <= 1e-5 * mag + 1e-30, "%s scalar: %.9g vs exact %.9g",
                      ref->name, s_ref, exact);
            for (be_simd_t lv = BE_SIMD_AVX2; lv <= have; lv++) {
                const be_type_traits_t *tt = be_type_traits_at(t, lv);
                CHECK(tt->vec_dot != ref->vec_dot);
                float s = 0;
                tt->vec_dot(N, &s, w, y);
                CHECK_MSG(!memcmp(&s, &s_ref, 4), "%s %s: %.9g vs scalar %.9g", ref->name,
                          be_simd_name(lv), s, s_ref);
            }
        }
        free(w);
    }
    printf("test_quant_iq: dot products checked at scalar%s%s\n",
           have >= BE_SIMD_AVX2 ? ", avx2" : "", have >= BE_SIMD_AVX512_VNNI ? ", avx512vnni" : "");
    if (have < BE_SIMD_AVX512_VNNI)
        printf("test_quant_iq: this CPU lacks %s: those kernels were not run\n",
               have < BE_SIMD_AVX2 ? "AVX2 and AVX-512" : "AVX-512 VNNI");
    free(y);
    free(wf);
}

/* ---- quantize ---------------------------------------------------------- */

static void test_roundtrip(void)
{
    enum { N = 16 * BE_QK_K };
    /* relative rms error on N(0, 1) rows: measured 0.333, 0.286, 0.241,
     * 0.178, 0.130, 0.458 (IQ2_XXS .. IQ3_S, IQ1_S); bounds ~10% above */
    static const double bound[] = {0.37, 0.32, 0.27, 0.20, 0.145, 0.50};
    float *x = malloc(sizeof(float) * N), *back = malloc(sizeof(float) * N);
    for (int k = 0; k < N; k++)
        x[k] = splitmix_normal(&rng_s);
    for (size_t ti = 0; ti < CR_ARRAY_LEN(iq_types); ti++) {
        const be_type_traits_t *tt = be_type_traits_at(iq_types[ti], BE_SIMD_SCALAR);
        uint8_t *q = malloc((size_t)tt->block_bytes * (N / BE_QK_K));
        tt->from_float(x, q, N);
        tt->to_float(q, back, N);
        double e2 = 0, x2 = 0;
        for (int k = 0; k < N; k++) {
            e2 += (double)(x[k] - back[k]) * (x[k] - back[k]);
            x2 += (double)x[k] * x[k];
        }
        double rel = sqrt(e2 / x2);
        printf("test_quant_iq: %-7s round trip relative rms error %.4f (bound %.2f)\n", tt->name,
               rel, bound[ti]);
        CHECK_MSG(rel <= bound[ti], "%s: relative rms error %g > %g", tt->name, rel, bound[ti]);
        /* the quantizer is deterministic */
        uint8_t *q2 = malloc((size_t)tt->block_bytes * (N / BE_QK_K));
        tt->from_float(x, q2, N);
        CHECK(!memcmp(q, q2, (size_t)tt->block_bytes * (N / BE_QK_K)));
        free(q2);
        free(q);
    }
    free(x);
    free(back);
}

static void test_edge_rows(void)
{
    enum { N = BE_QK_K };
    float x[N], back[N];
    uint8_t q[256];
    for (size_t ti = 0; ti < CR_ARRAY_LEN(iq_types); ti++) {
        const be_type_traits_t *tt = be_type_traits_at(iq_types[ti], BE_SIMD_SCALAR);
        memset(x, 0, sizeof x);
        tt->from_float(x, q, N);
        tt->to_float(q, back, N);
        int nonzero = 0;
        for (int k = 0; k < N; k++)
            nonzero += back[k] != 0;
        CHECK_MSG(nonzero == 0, "%s: zeros came back with %d non-zero", tt->name, nonzero);
        for (int k = 0; k < N; k++)
            x[k] = (k % 3 ? 1e30f : -1e30f);
        tt->from_float(x, q, N);
        tt->to_float(q, back, N);
        int finite = 0;
        for (int k = 0; k < N; k++)
            finite += isfinite(back[k]);
        CHECK_MSG(finite == N, "%s: huge values gave %d non-finite", tt->name, N - finite);
        for (int k = 0; k < N; k++)
            x[k] = splitmix_normal(&rng_s);
        x[3] = NAN;
        x[100] = INFINITY;
        x[200] = -INFINITY;
        tt->from_float(x, q, N); /* survived is the check */
        tt->to_float(q, back, N);
        CHECK(1);
    }
}

static void test_traits(void)
{
    static const struct {
        cr_type_t t;
        const char *name;
        uint32_t bytes;
    } want[] = {{CR_TYPE_IQ2_XXS, "IQ2_XXS", 66}, {CR_TYPE_IQ2_XS, "IQ2_XS", 74},
                {CR_TYPE_IQ2_S, "IQ2_S", 82},     {CR_TYPE_IQ3_XXS, "IQ3_XXS", 98},
                {CR_TYPE_IQ3_S, "IQ3_S", 110},     {CR_TYPE_IQ1_S, "IQ1_S", 50}};
    for (size_t k = 0; k < CR_ARRAY_LEN(want); k++) {
        const be_type_traits_t *tt = be_type_traits_at(want[k].t, BE_SIMD_SCALAR);
        const cr_type_info_t *ti = cr_type_info(want[k].t);
        CHECK(tt && ti);
        if (!tt || !ti)
            continue;
        CHECK_EQ_STR(tt->name, want[k].name);
        CHECK_EQ_STR(ti->name, want[k].name);
        CHECK_EQ_INT(tt->block_elems, 256);
        CHECK_EQ_INT(ti->block_elems, 256);
        CHECK_EQ_INT(tt->block_bytes, want[k].bytes);
        CHECK_EQ_INT(ti->block_bytes, want[k].bytes);
        CHECK(be_type_is_supported(want[k].t));
    }
    /* GGML's type ids */
    CHECK_EQ_INT(CR_TYPE_IQ2_XXS, 16);
    CHECK_EQ_INT(CR_TYPE_IQ2_XS, 17);
    CHECK_EQ_INT(CR_TYPE_IQ3_XXS, 18);
    CHECK_EQ_INT(CR_TYPE_IQ3_S, 21);
    CHECK_EQ_INT(CR_TYPE_IQ2_S, 22);
    CHECK_EQ_INT(CR_TYPE_IQ1_S, 19);
    CHECK_EQ_STR(cr_file_type_name(19), "IQ2_XXS");
    CHECK_EQ_STR(cr_file_type_name(28), "IQ2_S");
}

int main(void)
{
    printf("test_quant_iq: kernels at level %s\n", be_simd_name(be_simd_detect()));
    test_grid_structure();
    test_dequant_formula();
    test_dots();
    test_roundtrip();
    test_edge_rows();
    test_traits();
    return check_finish("test_quant_iq");
}
