/* quant_iq.h: private to backend/cpu: the 2- and 3-bit I-quants (IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): their grids, the decoding of one
 * 32-element sub-block that every kernel shares, and the scalar kernels
 * quant.c's traits table registers (same contracts as be_to_float_fn,
 * be_from_float_fn, be_vec_dot_fn; activations are Q8_K).
 *
 * All five store, per 256-element super-block, an f16 scale d and per
 * 32-element sub-block groups of 8 elements, each group one or two points
 * of a fixed grid (8 coordinates for the IQ2 types, 4 for IQ3) and 8 sign
 * bits. Element j of sub-block ib is
 *     d * unit * mul[j / 16] * grid[j] * (bit j of signs ? -1 : 1)
 * with mul = 2 * ls + 1 for a stored 4-bit ls and unit 1/8 (IQ2_*), 1/4
 * (IQ3_XXS) or 1 (IQ3_S). IQ2_XXS, IQ2_XS and IQ3_XXS store 7 sign bits
 * per group; the eighth makes the count of minus signs even. Bit layouts
 * are in quant.h. Does not own the SIMD kernels (quant_iq_avx2.c; the
 * AVX-512 level uses those, see there). */
#ifndef BE_CPU_QUANT_IQ_H
#define BE_CPU_QUANT_IQ_H

#include "lib/prelude.h"
#include "services/runner/backend/cpu/quant.h"

/* The grids as bytes (read-only once built) and the nearest-point maps the
 * quantizers use. */
typedef struct be_iq_grids {
    uint64_t iq2xxs[256];  /* byte k: coordinate k (8, 25 or 43) */
    uint64_t iq2xs[512];
    uint64_t iq2s[1024];
    uint32_t iq3xxs[256];  /* byte k: coordinate k (4, 12, ..., 52, 62) */
    uint32_t iq3s[512];    /* byte k: coordinate k (1, 3, ..., 15) */
    uint64_t iq1s[2048];   /* byte k: coordinate k as int8 (-1, 0, 1) */
    uint8_t signs[128];    /* 7 stored sign bits -> 8 (even parity) */
} be_iq_grids_t;

/* The grids, built on first use from the compact tables in
 * quant_iq_grid.c (thread-safe; never freed; borrowed for the process). */
const be_iq_grids_t *be_iq_grids(void);

/* The compact tables themselves, for the structural test: point p's
 * coordinate k is value set[(code[p] >> (bits * k)) & mask]. */
typedef struct be_iq_grid_def {
    const char *name;       /* "iq2xxs", ... */
    const uint16_t *code;   /* one code per point */
    int n_points;
    int dim;                /* coordinates per point: 8 or 4 */
    int bits;               /* bits per coordinate in a code: 2 or 3 */
    const int8_t *set;      /* the format's coordinate values, ascending */
    int n_set;
} be_iq_grid_def_t;

/* The n_defs (6: iq2xxs, iq2xs, iq2s, iq3xxs, iq3s, iq1s) compact grid definitions, static. */
const be_iq_grid_def_t *be_iq_grid_defs(int *n_defs);

/* Near-point search for the quantizers (quant_iq_search.c). */
typedef struct be_iq_search be_iq_search_t;

/* The search over grid def (be_iq_grid_defs' order), built on first use
 * (thread-safe, static); NULL for an unknown def. */
const be_iq_search_t *be_iq_search(int def);

/* Index of a grid point near t[0..dim) (in grid units): the best of the
 * points closest to t's per-coordinate rounding. NaN coordinates round to
 * the smallest value. */
int be_iq_search_nearest(const be_iq_search_t *s, const float *t);

/* Point p's coordinates as floats (dim of them); borrowed, static. */
const float *be_iq_search_point(const be_iq_search_t *s, int p);

/* One sub-block of 32 decoded from its bits. */
typedef struct be_iq_sub {
    uint64_t grid[4];   /* byte j of the 32: element j's magnitude step */
    uint32_t signs;     /* bit j: element j is negative */
    int32_t mul[2];     /* 2 ls + 1 for elements 0..15 and 16..31 */
} be_iq_sub_t;

/* ---- IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: scalar kernels ------------ */
void be_iq2_xxs_to_float(const void *x, float *y, int64_t n);
void be_iq2_xxs_from_float(const float *x, void *y, int64_t n);
void be_iq2_xxs_dot(int64_t n, float *s, const void *w, const void *a);
void be_iq2_xs_to_float(const void *x, float *y, int64_t n);
void be_iq2_xs_from_float(const float *x, void *y, int64_t n);
void be_iq2_xs_dot(int64_t n, float *s, const void *w, const void *a);
void be_iq2_s_to_float(const void *x, float *y, int64_t n);
void be_iq2_s_from_float(const float *x, void *y, int64_t n);
void be_iq2_s_dot(int64_t n, float *s, const void *w, const void *a);
void be_iq3_xxs_to_float(const void *x, float *y, int64_t n);
void be_iq3_xxs_from_float(const float *x, void *y, int64_t n);
void be_iq3_xxs_dot(int64_t n, float *s, const void *w, const void *a);
void be_iq3_s_to_float(const void *x, float *y, int64_t n);
void be_iq3_s_from_float(const float *x, void *y, int64_t n);
void be_iq3_s_dot(int64_t n, float *s, const void *w, const void *a);

/* IQ1_S (quant_iq1.c): grid points of -1, 0, 1 plus a shift of +-1/8,
 * no sign bits: value = d * (2 ls + 1) * (grid + delta). */
void be_iq1_s_to_float(const void *x, float *y, int64_t n);
void be_iq1_s_from_float(const float *x, void *y, int64_t n);
void be_iq1_s_dot(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_iq1_s(int64_t n, float *s, const void *w, const void *a);

/* Sub-block ib of an IQ1_S block: grid[] bytes are int8 coordinates;
 * *mul = 2 ls + 1, *neg_delta: the shift is -1/8 (else +1/8). */
static inline void be_iq1_s_sub(const be_iq_grids_t *g, const be_block_iq1_s_t *b, int ib,
                                uint64_t grid[4], int32_t *mul, bool *neg_delta)
{
    unsigned h = b->qh[ib];
    const uint8_t *q = b->qs + 4 * ib;
    grid[0] = g->iq1s[q[0] | (h & 7) << 8];
    grid[1] = g->iq1s[q[1] | ((h >> 3) & 7) << 8];
    grid[2] = g->iq1s[q[2] | ((h >> 6) & 7) << 8];
    grid[3] = g->iq1s[q[3] | ((h >> 9) & 7) << 8];
    *mul = 2 * (int32_t)((h >> 12) & 7) + 1;
    *neg_delta = (h >> 15) & 1;
}

/* ---- SIMD dot products (same bits as the scalar ones: integer sums per
 * super-block, one float step each) ------------------------------------- */
void be_avx2_dot_iq2_xxs(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_iq2_xs(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_iq2_s(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_iq3_xxs(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_iq3_s(int64_t n, float *s, const void *w, const void *a);

/* ---- sub-block decoders (layouts in quant.h) --------------------------- */

static inline uint32_t be_iq_le32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Four 8-bit sign groups (expanded) as one 32-bit mask. */
static inline uint32_t be_iq_signs4(const be_iq_grids_t *g, uint32_t s0, uint32_t s1, uint32_t s2,
                                    uint32_t s3)
{
    return (uint32_t)g->signs[s0] | (uint32_t)g->signs[s1] << 8 | (uint32_t)g->signs[s2] << 16 |
           (uint32_t)g->signs[s3] << 24;
}

static inline void be_iq2_xxs_sub(const be_iq_grids_t *g, const be_block_iq2_xxs_t *b, int ib,
                                  be_iq_sub_t *o)
{
    const uint8_t *q = (const uint8_t *)b->qs + 8 * ib;
    uint32_t aux = be_iq_le32(q + 4);
    /* unrolled by hand: the struct then stays in registers in the SIMD
     * kernels (a loop left it on the stack, read back by a 32-byte load
     * that stalled on four 8-byte stores) */
    o->grid[0] = g->iq2xxs[q[0]];
    o->grid[1] = g->iq2xxs[q[1]];
    o->grid[2] = g->iq2xxs[q[2]];
    o->grid[3] = g->iq2xxs[q[3]];
    o->signs = be_iq_signs4(g, aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127);
    o->mul[0] = o->mul[1] = 2 * (int32_t)(aux >> 28) + 1;
}

static inline void be_iq2_xs_sub(const be_iq_grids_t *g, const be_block_iq2_xs_t *b, int ib,
                                 be_iq_sub_t *o)
{
    const uint16_t *q = b->qs + 4 * ib;
    o->grid[0] = g->iq2xs[q[0] & 511];
    o->grid[1] = g->iq2xs[q[1] & 511];
    o->grid[2] = g->iq2xs[q[2] & 511];
    o->grid[3] = g->iq2xs[q[3] & 511];
    o->signs = be_iq_signs4(g, q[0] >> 9, q[1] >> 9, q[2] >> 9, q[3] >> 9);
    o->mul[0] = 2 * (b->scales[ib] & 15) + 1;
    o->mul[1] = 2 * (b->scales[ib] >> 4) + 1;
}

static inline void be_iq2_s_sub(const be_iq_grids_t *g, const be_block_iq2_s_t *b, int ib,
                                be_iq_sub_t *o)
{
    const uint8_t *q = b->qs + 4 * ib;
    int h = b->qh[ib];
    o->grid[0] = g->iq2s[q[0] | (h & 3) << 8];
    o->grid[1] = g->iq2s[q[1] | ((h >> 2) & 3) << 8];
    o->grid[2] = g->iq2s[q[2] | ((h >> 4) & 3) << 8];
    o->grid[3] = g->iq2s[q[3] | ((h >> 6) & 3) << 8];
    o->signs = be_iq_le32(b->qs + BE_QK_K / 8 + 4 * ib);
    o->mul[0] = 2 * (b->scales[ib] & 15) + 1;
    o->mul[1] = 2 * (b->scales[ib] >> 4) + 1;
}

static inline void be_iq3_xxs_sub(const be_iq_grids_t *g, const be_block_iq3_xxs_t *b, int ib,
                                  be_iq_sub_t *o)
{
    const uint8_t *q = b->qs + 8 * ib;
    uint32_t aux = be_iq_le32(b->qs + BE_QK_K / 4 + 4 * ib);
#define BE_IQ3XXS_PAIR(l) (g->iq3xxs[q[2 * (l)]] | (uint64_t)g->iq3xxs[q[2 * (l) + 1]] << 32)
    o->grid[0] = BE_IQ3XXS_PAIR(0);
    o->grid[1] = BE_IQ3XXS_PAIR(1);
    o->grid[2] = BE_IQ3XXS_PAIR(2);
    o->grid[3] = BE_IQ3XXS_PAIR(3);
#undef BE_IQ3XXS_PAIR
    o->signs = be_iq_signs4(g, aux & 127, (aux >> 7) & 127, (aux >> 14) & 127, (aux >> 21) & 127);
    o->mul[0] = o->mul[1] = 2 * (int32_t)(aux >> 28) + 1;
}

static inline void be_iq3_s_sub(const be_iq_grids_t *g, const be_block_iq3_s_t *b, int ib,
                                be_iq_sub_t *o)
{
    const uint8_t *q = b->qs + 8 * ib;
    int h = b->qh[ib];
#define BE_IQ3S_PAIR(l)                                                                            \
    (g->iq3s[q[2 * (l)] | ((h >> (2 * (l))) & 1) << 8] |                                     \
     (uint64_t)g->iq3s[q[2 * (l) + 1] | ((h >> (2 * (l) + 1)) & 1) << 8] << 32)
    o->grid[0] = BE_IQ3S_PAIR(0);
    o->grid[1] = BE_IQ3S_PAIR(1);
    o->grid[2] = BE_IQ3S_PAIR(2);
    o->grid[3] = BE_IQ3S_PAIR(3);
#undef BE_IQ3S_PAIR
    o->signs = be_iq_le32(b->signs + 4 * ib);
    o->mul[0] = o->mul[1] = 2 * ((b->scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
}

#endif
