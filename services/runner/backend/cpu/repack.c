/* repack.c: packing Q4_0/Q8_0/Q4_K/Q6_K matrices into interleaved groups of 8 rows,
 * unpacking a row, and the scalar reference product (layouts and contracts
 * in repack.h). The AVX2 versions are in repack_avx2.c. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/huge_map.h"
#include "services/runner/backend/cpu/quant_impl.h"
#include "services/runner/backend/cpu/repack.h"
#include "services/runner/backend/cpu/repack_q4_decode.h"
#include "services/runner/backend/cpu/repack_q4k_decode.h"
#include "services/runner/backend/cpu/repack_q8_decode.h"

#include <math.h>

#include <sys/mman.h>

#define PACK_ALIGN 64

bool be_pack_supported(cr_type_t t, int64_t n_rows, int64_t n_cols)
{
    bool kq = t == CR_TYPE_Q4_K || t == CR_TYPE_Q6_K;
    int64_t blk = kq ? BE_QK_K : 32;
    if (t != CR_TYPE_Q4_0 && t != CR_TYPE_Q8_0 && !kq)
        return false;
    return n_rows > 0 && n_rows % BE_PACK_ROWS == 0 && n_cols > 0 && n_cols % blk == 0;
}

cr_type_t be_pack_act_type(cr_type_t t)
{
    return t == CR_TYPE_Q4_K || t == CR_TYPE_Q6_K ? CR_TYPE_Q8_K : CR_TYPE_Q8_0;
}

int64_t be_pack_min_groups(const be_packed_t *p, int n)
{
    int64_t stream = 0; /* blocks each of a pair's two streams needs */
    if (n == 1 && p->type == CR_TYPE_Q4_0)
        stream = BE_Q4_DECODE_MIN_STREAM_BLOCKS;
    else if (n == 1 && p->type == CR_TYPE_Q8_0)
        stream = BE_Q8_DECODE_MIN_STREAM_BLOCKS;
    else if (n == 1 && p->type == CR_TYPE_Q4_K)
        stream = BE_Q4K_DECODE_MIN_STREAM_BLOCKS;
    else if (n == 1 && p->type == CR_TYPE_Q6_K)
        stream = BE_Q6K_DECODE_MIN_STREAM_BLOCKS;
    int64_t per_stream = (stream + p->n_blocks - 1) / p->n_blocks;
    return CR_MAX(4, 2 * per_stream);
}

/* Source type's block: elements and bytes; packed group block bytes. */
static void pack_sizes(cr_type_t t, int64_t *elems, size_t *src_blk, size_t *blk)
{
    switch (t) {
    case CR_TYPE_Q4_0:
        *elems = 32, *src_blk = sizeof(be_block_q4_0_t), *blk = sizeof(be_block_q4_0x8_t);
        break;
    case CR_TYPE_Q8_0:
        *elems = 32, *src_blk = sizeof(be_block_q8_0_t), *blk = sizeof(be_block_q8_0x8_t);
        break;
    case CR_TYPE_Q6_K:
        *elems = BE_QK_K, *src_blk = sizeof(be_block_q6_k_t);
        *blk = sizeof(be_block_q6_kx8_t);
        break;
    default:
        *elems = BE_QK_K, *src_blk = sizeof(be_block_q4_k_t);
        *blk = sizeof(be_block_q4_kx8_t);
        break;
    }
}

static void pack_group_q4_0(const uint8_t *src, size_t row_bytes, int64_t nb,
                            be_block_q4_0x8_t *dst)
{
    for (int i = 0; i < BE_PACK_ROWS; i++) {
        const be_block_q4_0_t *row = (const be_block_q4_0_t *)(src + (size_t)i * row_bytes);
        for (int64_t b = 0; b < nb; b++) {
            dst[b].d[i] = row[b].d;
            for (int j = 0; j < 4; j++)
                memcpy(dst[b].qs + 32 * j + 4 * i, row[b].qs + 4 * j, 4);
        }
    }
}

static void pack_group_q8_0(const uint8_t *src, size_t row_bytes, int64_t nb,
                            be_block_q8_0x8_t *dst)
{
    for (int i = 0; i < BE_PACK_ROWS; i++) {
        const be_block_q8_0_t *row = (const be_block_q8_0_t *)(src + (size_t)i * row_bytes);
        for (int64_t b = 0; b < nb; b++) {
            dst[b].d[i] = row[b].d;
            for (int k = 0; k < 8; k++)
                memcpy(dst[b].qs + 32 * k + 4 * i, row[b].qs + 4 * k, 4);
        }
    }
}

static void pack_group_q4_k(const uint8_t *src, size_t row_bytes, int64_t nb,
                            be_block_q4_kx8_t *dst)
{
    for (int i = 0; i < BE_PACK_ROWS; i++) {
        const be_block_q4_k_t *row = (const be_block_q4_k_t *)(src + (size_t)i * row_bytes);
        for (int64_t b = 0; b < nb; b++) {
            dst[b].d[i] = row[b].d;
            dst[b].dmin[i] = row[b].dmin;
            for (int sb = 0; sb < 8; sb++) {
                uint8_t sc, m;
                be_k4_scale_min(sb, row[b].scales, &sc, &m);
                dst[b].scales[8 * sb + i] = sc;
                dst[b].mins[16 * (sb / 2) + 2 * i + sb % 2] = m;
            }
            for (int pr = 0; pr < 4; pr++)
                for (int c = 0; c < 8; c++)
                    memcpy(dst[b].qs + 256 * pr + 32 * c + 4 * i, row[b].qs + 32 * pr + 4 * c, 4);
        }
    }
}

/* q (0..63) of element e of a Q6_K block (layout in quant.h). */
static int q6_k_q(const be_block_q6_k_t *b, int e)
{
    int h = e / 128, r = e % 128, quarter = r / 32, l = r % 32;
    const uint8_t *ql = b->ql + 64 * h, *qh = b->qh + 32 * h;
    int lo = quarter == 0 ? ql[l] & 15
           : quarter == 1 ? ql[l + 32] & 15
           : quarter == 2 ? ql[l] >> 4
                          : ql[l + 32] >> 4;
    return lo | (((qh[l] >> (2 * quarter)) & 3) << 4);
}

/* q (0..63) of row i's chunk c element e (0..3) in a packed Q6_K block. */
static int q6_kx8_q(const be_block_q6_kx8_t *b, int i, int c, int e)
{
    const uint8_t *r = b->qs + 96 * (c / 4) + 4 * i + e; /* the quad's register 0 */
    if (c % 4 < 3)
        return r[32 * (c % 4)] & 63;
    return (r[0] >> 6) | ((r[32] >> 6) << 2) | ((r[64] >> 6) << 4);
}

/* Row i's scale of sub-block k in a packed Q6_K block. */
static int q6_kx8_scale(const be_block_q6_kx8_t *b, int i, int k)
{
    return b->scales[16 * (k / 2) + 2 * i + k % 2];
}

static void pack_group_q6_k(const uint8_t *src, size_t row_bytes, int64_t nb,
                            be_block_q6_kx8_t *dst)
{
    memset(dst, 0, (size_t)nb * sizeof *dst);
    for (int i = 0; i < BE_PACK_ROWS; i++) {
        const be_block_q6_k_t *row = (const be_block_q6_k_t *)(src + (size_t)i * row_bytes);
        for (int64_t b = 0; b < nb; b++) {
            dst[b].d[i] = row[b].d;
            for (int k = 0; k < 16; k++)
                dst[b].scales[16 * (k / 2) + 2 * i + k % 2] = row[b].scales[k];
            for (int c = 0; c < 64; c++)
                for (int e = 0; e < 4; e++) {
                    int q = q6_k_q(&row[b], 4 * c + e);
                    uint8_t *r = dst[b].qs + 96 * (c / 4) + 4 * i + e;
                    if (c % 4 < 3)
                        r[32 * (c % 4)] |= (uint8_t)q;
                    else
                        for (int j = 0; j < 3; j++)
                            r[32 * j] |= (uint8_t)(((q >> (2 * j)) & 3) << 6);
                }
        }
    }
}

size_t be_pack_bytes(cr_type_t t, int64_t n_rows, int64_t n_cols)
{
    if (!be_pack_supported(t, n_rows, n_cols))
        return 0;
    int64_t elems;
    size_t src_blk, blk;
    pack_sizes(t, &elems, &src_blk, &blk);
    /* 8 packed rows take the bytes of 8 source rows (Q4_K: 2.8% more, its
     * scales unpacked). */
    size_t group = (size_t)(n_cols / elems) * blk, groups = (size_t)(n_rows / BE_PACK_ROWS);
    if (groups > SIZE_MAX / group)
        return 0;
    return groups * group;
}

cr_status_t be_pack_new_at(cr_type_t t, const void *src, int64_t n_rows, int64_t n_cols,
                           size_t row_bytes, void *mem, bool filled, be_packed_t **out,
                           cr_err_t *err)
{
    *out = NULL;
    if (!be_pack_supported(t, n_rows, n_cols))
        return cr_err_set(err, CR_E_INVALID, "pack: %" PRId64 "x%" PRId64
                          " matrix of this type cannot be packed", n_rows, n_cols);
    int64_t elems;
    size_t src_blk, blk;
    pack_sizes(t, &elems, &src_blk, &blk);
    int64_t nb = n_cols / elems;
    if (row_bytes != (size_t)nb * src_blk)
        return cr_err_set(err, CR_E_INVALID, "pack: row of %zu bytes is not %" PRId64
                          " blocks", row_bytes, nb);
    size_t bytes = be_pack_bytes(t, n_rows, n_cols);
    if (!bytes)
        return cr_err_set(err, CR_E_TOO_LARGE, "pack: matrix too large");
    size_t group = (size_t)nb * blk, groups = (size_t)(n_rows / BE_PACK_ROWS);
    be_packed_t *p = calloc(1, sizeof *p);
    if (!p && mem)
        return cr_err_set(err, CR_E_NOMEM, "pack: out of memory");
    /* Without a given mapping, its own, populated in one call: page by
     * page, the faults on fresh memory were most of a model's load time
     * (sys 0.73 s of 1.07 s for TinyLlama Q4_0). On huge pages where the
     * kernel gives them (huge_map.h: decode walks fewer page tables).
     * Page-aligned, so 64-byte aligned too. */
    void *data = mem ? mem : p ? be_cpu_map_anon(bytes) : MAP_FAILED;
    if (!p || data == MAP_FAILED) {
        if (data != MAP_FAILED && !mem)
            munmap(data, bytes);
        free(p);
        return cr_err_set(err, CR_E_NOMEM, "pack: cannot allocate %zu bytes",
                          bytes);
    }
    *p = (be_packed_t){t, n_rows, n_cols, nb, group, data};
    if (!filled)
        be_pack_fill(p, src, row_bytes, 0, (int64_t)groups);
    *out = p;
    return CR_OK;
}

void be_pack_fill(be_packed_t *p, const void *src, size_t row_bytes, int64_t g0, int64_t g1)
{
    const uint8_t *s = src;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rows = s + (size_t)g * BE_PACK_ROWS * row_bytes;
        void *dst = (uint8_t *)p->data + (size_t)g * p->group_bytes;
        if (p->type == CR_TYPE_Q4_0)
            pack_group_q4_0(rows, row_bytes, p->n_blocks, dst);
        else if (p->type == CR_TYPE_Q8_0)
            pack_group_q8_0(rows, row_bytes, p->n_blocks, dst);
        else if (p->type == CR_TYPE_Q6_K)
            pack_group_q6_k(rows, row_bytes, p->n_blocks, dst);
        else
            pack_group_q4_k(rows, row_bytes, p->n_blocks, dst);
    }
}

cr_status_t be_pack_new(cr_type_t t, const void *src, int64_t n_rows, int64_t n_cols,
                        size_t row_bytes, be_packed_t **out, cr_err_t *err)
{
    return be_pack_new_at(t, src, n_rows, n_cols, row_bytes, NULL, false, out, err);
}

void be_pack_destroy(be_packed_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    be_packed_t *p = *self_p;
    munmap(p->data, (size_t)(p->n_rows / BE_PACK_ROWS) * p->group_bytes);
    free(p);
    *self_p = NULL;
}

void be_pack_get_row(const be_packed_t *p, int64_t r, float *out)
{
    int i = (int)(r % BE_PACK_ROWS);
    const uint8_t *grp = (const uint8_t *)p->data + (size_t)(r / BE_PACK_ROWS) * p->group_bytes;
    for (int64_t b = 0; b < p->n_blocks; b++) {
        float *o = out + b * 32;
        if (p->type == CR_TYPE_Q4_0) {
            const be_block_q4_0x8_t *blk = (const be_block_q4_0x8_t *)grp + b;
            float d = be_f16_to_f32(blk->d[i]);
            for (int j = 0; j < 4; j++)
                for (int e = 0; e < 4; e++) {
                    uint8_t q = blk->qs[32 * j + 4 * i + e];
                    o[4 * j + e] = (float)((q & 15) - 8) * d;
                    o[16 + 4 * j + e] = (float)((q >> 4) - 8) * d;
                }
        } else if (p->type == CR_TYPE_Q6_K) {
            /* as Q6_K's to_float: d * scale * (q - 32) */
            const be_block_q6_kx8_t *blk = (const be_block_q6_kx8_t *)grp + b;
            float d = be_f16_to_f32(blk->d[i]);
            o = out + b * BE_QK_K;
            for (int c = 0; c < 64; c++)
                for (int e = 0; e < 4; e++)
                    o[4 * c + e] = d * (float)q6_kx8_scale(blk, i, c / 4) *
                                   (float)(q6_kx8_q(blk, i, c, e) - 32);
        } else if (p->type == CR_TYPE_Q4_K) {
            /* as be_q4_k_to_float: dl * q - ml per element */
            const be_block_q4_kx8_t *blk = (const be_block_q4_kx8_t *)grp + b;
            float d = be_f16_to_f32(blk->d[i]), dmin = be_f16_to_f32(blk->dmin[i]);
            o = out + b * BE_QK_K;
            for (int sb = 0; sb < 8; sb++) {
                float dl = d * (float)blk->scales[8 * sb + i];
                float ml = dmin * (float)blk->mins[16 * (sb / 2) + 2 * i + sb % 2];
                for (int c = 0; c < 8; c++)
                    for (int e = 0; e < 4; e++) {
                        uint8_t q = blk->qs[256 * (sb / 2) + 32 * c + 4 * i + e];
                        q = sb % 2 ? q >> 4 : q & 15;
                        o[32 * sb + 4 * c + e] = dl * (float)q - ml;
                    }
            }
        } else {
            const be_block_q8_0x8_t *blk = (const be_block_q8_0x8_t *)grp + b;
            float d = be_f16_to_f32(blk->d[i]);
            for (int k = 0; k < 8; k++)
                for (int e = 0; e < 4; e++)
                    o[4 * k + e] = (float)blk->qs[32 * k + 4 * i + e] * d;
        }
    }
}

void be_pack_block_sums(const be_block_q8_0_t *x, int64_t n_blocks, int32_t *xsum)
{
    for (int64_t b = 0; b < n_blocks; b++) {
        int32_t s = 0;
        for (int e = 0; e < 32; e++)
            s += x[b].qs[e];
        float f = be_f16_to_f32(x[b].d);
        xsum[2 * b] = s;
        memcpy(&xsum[2 * b + 1], &f, sizeof f);
    }
}

/* ---- scalar reference ------------------------------------------------- */

void be_pack_gemm_q4_0_scalar(const be_packed_t *p, int64_t g0, int64_t g1,
                              const void *xv, const int32_t *xsum, int n, float *y,
                              size_t y_stride)
{
    CR_UNUSED(xsum);
    const be_block_q8_0_t *x = xv;
    int64_t nb = p->n_blocks;
    for (int64_t g = g0; g < g1; g++) {
        const be_block_q4_0x8_t *w =
            (const be_block_q4_0x8_t *)((const uint8_t *)p->data + (size_t)g * p->group_bytes);
        for (int t = 0; t < n; t++) {
            const be_block_q8_0_t *a = x + (size_t)t * (size_t)nb;
            for (int i = 0; i < BE_PACK_ROWS; i++) {
                float f = 0;
                for (int64_t b = 0; b < nb; b++) {
                    int32_t isum = 0;
                    for (int j = 0; j < 4; j++)
                        for (int e = 0; e < 4; e++) {
                            uint8_t q = w[b].qs[32 * j + 4 * i + e];
                            isum += ((q & 15) - 8) * a[b].qs[4 * j + e];
                            isum += ((q >> 4) - 8) * a[b].qs[16 + 4 * j + e];
                        }
                    float sc = be_f16_to_f32(w[b].d[i]) * be_f16_to_f32(a[b].d);
                    f = fmaf((float)isum, sc, f);
                }
                y[(size_t)t * y_stride + (size_t)g * BE_PACK_ROWS + (size_t)i] = f;
            }
        }
    }
}

void be_pack_gemm_q8_0_scalar(const be_packed_t *p, int64_t g0, int64_t g1,
                              const void *xv, const int32_t *xsum, int n, float *y,
                              size_t y_stride)
{
    CR_UNUSED(xsum);
    const be_block_q8_0_t *x = xv;
    int64_t nb = p->n_blocks;
    for (int64_t g = g0; g < g1; g++) {
        const be_block_q8_0x8_t *w =
            (const be_block_q8_0x8_t *)((const uint8_t *)p->data + (size_t)g * p->group_bytes);
        for (int t = 0; t < n; t++) {
            const be_block_q8_0_t *a = x + (size_t)t * (size_t)nb;
            for (int i = 0; i < BE_PACK_ROWS; i++) {
                float f = 0;
                for (int64_t b = 0; b < nb; b++) {
                    int32_t isum = 0;
                    for (int k = 0; k < 8; k++)
                        for (int e = 0; e < 4; e++)
                            isum += w[b].qs[32 * k + 4 * i + e] * a[b].qs[4 * k + e];
                    float sc = be_f16_to_f32(w[b].d[i]) * be_f16_to_f32(a[b].d);
                    f = fmaf((float)isum, sc, f);
                }
                y[(size_t)t * y_stride + (size_t)g * BE_PACK_ROWS + (size_t)i] = f;
            }
        }
    }
}

void be_pack_gemm_q4_k_scalar(const be_packed_t *p, int64_t g0, int64_t g1,
                              const void *xv, const int32_t *xsum, int n, float *y,
                              size_t y_stride)
{
    CR_UNUSED(xsum);
    const be_block_q8_k_t *x = xv;
    int64_t nb = p->n_blocks;
    for (int64_t g = g0; g < g1; g++) {
        const be_block_q4_kx8_t *w =
            (const be_block_q4_kx8_t *)((const uint8_t *)p->data + (size_t)g * p->group_bytes);
        for (int t = 0; t < n; t++) {
            const be_block_q8_k_t *a = x + (size_t)t * (size_t)nb;
            for (int i = 0; i < BE_PACK_ROWS; i++) {
                float f = 0;
                for (int64_t b = 0; b < nb; b++) {
                    int32_t isum = 0, msum = 0;
                    for (int sb = 0; sb < 8; sb++) {
                        int32_t sub = 0;
                        for (int c = 0; c < 8; c++)
                            for (int e = 0; e < 4; e++) {
                                uint8_t q = w[b].qs[256 * (sb / 2) + 32 * c + 4 * i + e];
                                q = sb % 2 ? q >> 4 : q & 15;
                                sub += q * a[b].qs[32 * sb + 4 * c + e];
                            }
                        isum += sub * w[b].scales[8 * sb + i];
                        msum += w[b].mins[16 * (sb / 2) + 2 * i + sb % 2] *
                                (a[b].bsums[2 * sb] + a[b].bsums[2 * sb + 1]);
                    }
                    float dv = be_f16_to_f32(w[b].d[i]) * a[b].d;
                    float dmv = be_f16_to_f32(w[b].dmin[i]) * a[b].d;
                    f = fmaf((float)isum, dv, f);
                    f = fmaf(-(float)msum, dmv, f);
                }
                y[(size_t)t * y_stride + (size_t)g * BE_PACK_ROWS + (size_t)i] = f;
            }
        }
    }
}

void be_pack_gemm_q6_k_scalar(const be_packed_t *p, int64_t g0, int64_t g1,
                              const void *xv, const int32_t *xsum, int n, float *y,
                              size_t y_stride)
{
    CR_UNUSED(xsum);
    const be_block_q8_k_t *x = xv;
    int64_t nb = p->n_blocks;
    for (int64_t g = g0; g < g1; g++) {
        const be_block_q6_kx8_t *w =
            (const be_block_q6_kx8_t *)((const uint8_t *)p->data + (size_t)g * p->group_bytes);
        for (int t = 0; t < n; t++) {
            const be_block_q8_k_t *a = x + (size_t)t * (size_t)nb;
            for (int i = 0; i < BE_PACK_ROWS; i++) {
                float f = 0;
                for (int64_t b = 0; b < nb; b++) {
                    int32_t isum = 0, msum = 0;
                    for (int k = 0; k < 16; k++) {
                        int32_t sub = 0;
                        for (int c = 4 * k; c < 4 * k + 4; c++)
                            for (int e = 0; e < 4; e++)
                                sub += q6_kx8_q(&w[b], i, c, e) * a[b].qs[4 * c + e];
                        isum += sub * q6_kx8_scale(&w[b], i, k);
                        msum += q6_kx8_scale(&w[b], i, k) * a[b].bsums[k];
                    }
                    float sc = be_f16_to_f32(w[b].d[i]) * a[b].d;
                    f = fmaf((float)(isum - 32 * msum), sc, f);
                }
                y[(size_t)t * y_stride + (size_t)g * BE_PACK_ROWS + (size_t)i] = f;
            }
        }
    }
}

be_pack_gemm_fn be_pack_gemm_compiled(cr_type_t t, be_simd_t level)
{
    switch (level) {
    case BE_SIMD_AVX512_VNNI:
        return t == CR_TYPE_Q4_0   ? be_pack_gemm_q4_0_vnni
               : t == CR_TYPE_Q8_0 ? be_pack_gemm_q8_0_vnni
               : t == CR_TYPE_Q4_K ? be_pack_gemm_q4_k_vnni
               : t == CR_TYPE_Q6_K ? be_pack_gemm_q6_k_vnni
                                   : NULL;
    case BE_SIMD_AVX2:
        return t == CR_TYPE_Q4_0   ? be_pack_gemm_q4_0_avx2
               : t == CR_TYPE_Q8_0 ? be_pack_gemm_q8_0_avx2
               : t == CR_TYPE_Q4_K ? be_pack_gemm_q4_k_avx2
               : t == CR_TYPE_Q6_K ? be_pack_gemm_q6_k_avx2
                                   : NULL;
    case BE_SIMD_SCALAR:
        return t == CR_TYPE_Q4_0   ? be_pack_gemm_q4_0_scalar
               : t == CR_TYPE_Q8_0 ? be_pack_gemm_q8_0_scalar
               : t == CR_TYPE_Q4_K ? be_pack_gemm_q4_k_scalar
               : t == CR_TYPE_Q6_K ? be_pack_gemm_q6_k_scalar
                                   : NULL;
    }
    return NULL;
}

be_pack_gemm_fn be_pack_gemm_at(cr_type_t t, be_simd_t level)
{
    /* the best kernel at or below both the level asked and the CPU's */
    be_simd_t have = be_simd_detect();
    for (int lv = (int)(level < have ? level : have); lv >= BE_SIMD_SCALAR; lv--) {
        be_pack_gemm_fn fn = be_pack_gemm_compiled(t, (be_simd_t)lv);
        if (fn)
            return fn;
    }
    return NULL;
}
