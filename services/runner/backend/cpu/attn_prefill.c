/* attn_prefill.c: tiled causal attention over an F16 cache (attn_prefill.h).
 *
 * Per unit (kv head hk, tokens t0..t1-1), rows r = (t - t0) * group + g
 * (query head hk * group + g), so rows grow in token order and a row's
 * keys are 0 .. pos0 + t (with a sliding window, the last `window` of
 * them: tiles start at the first row's first key's tile, and a row's
 * probabilities are zeros before its own first key):
 * 1. q rows rounded to F16 (as the per-query path rounds q) into qf;
 * 2. per tile of PF_KEYS keys: the keys converted to F32 and transposed,
 *    then scores for each group of 4 rows up to the last one's keys;
 * 3. per row: scale (and soft-cap), be_vec_softmax_row, probabilities
 *    rounded to F16,
 *    zeros past the row's keys (so a group's shorter rows add nothing);
 * 4. per tile: the values converted to F32, acc += p . v for each group;
 * 5. acc copied to out.
 * Units are claimed from an atomic counter, longest (last tokens) first. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/attn_prefill.h"
#include "services/runner/backend/cpu/vec.h"

#include <math.h>
#include <stdatomic.h>

#define PF_KEYS 64 /* keys per tile: a multiple of every kernel's kw */
#define PF_GROUP 4 /* rows per kernel call */

static size_t round16(size_t n)
{
    return (n + 15) / 16 * 16;
}

static size_t keys_stride(int ctx)
{
    return ((size_t)ctx + PF_KEYS - 1) / PF_KEYS * PF_KEYS;
}

/* floats of the parts that do not grow with the rows */
static size_t fixed_floats(int hd)
{
    return 2 * round16((size_t)PF_KEYS * (size_t)hd);
}

static size_t row_floats(int ctx, int hd)
{
    return 2 * (size_t)hd + keys_stride(ctx);
}

size_t be_cpu_attn_prefill_floats(int rows, int ctx, int hd)
{
    return fixed_floats(hd) + round16((size_t)rows * row_floats(ctx, hd));
}

/* ---- scalar kernels: the reference each level's kernel must match ------ */

static void qk_scalar(int nq, int hd, const float *q, const float *kt, size_t ldk, float *s,
                      size_t lds)
{
    /* dot_f16 in quant.c: products and sum in double, in d order */
    for (int r = 0; r < nq; r++)
        for (int j = 0; j < 8; j++) {
            double sum = 0;
            for (int d = 0; d < hd; d++)
                sum += (double)q[(size_t)r * hd + d] * (double)kt[(size_t)d * ldk + j];
            s[(size_t)r * lds + j] = (float)sum;
        }
}

static void pv_scalar(int nq, int n, int hd, const float *p, size_t ldp, const float *v,
                      float *acc)
{
    for (int j = 0; j < n; j++)
        for (int r = 0; r < nq; r++) {
            float pw = p[(size_t)r * ldp + j];
            float *a = acc + (size_t)r * hd;
            for (int d = 0; d < hd; d++)
                a[d] += pw * v[(size_t)j * hd + d];
        }
}

static void keys_scalar(int nk, int hd, const uint16_t *k, size_t kv_row, float *kt,
                        size_t ldk, int ahead)
{
    CR_UNUSED(ahead);
    for (int c = 0; c < nk; c++)
        for (int d = 0; d < hd; d++)
            kt[(size_t)d * ldk + c] = be_f16_to_f32(k[(size_t)c * kv_row + d]);
}

static void vals_scalar(int nk, int hd, const uint16_t *v, size_t kv_row, float *vt,
                        int ahead)
{
    CR_UNUSED(ahead);
    for (int c = 0; c < nk; c++)
        for (int d = 0; d < hd; d++)
            vt[(size_t)c * hd + d] = be_f16_to_f32(v[(size_t)c * kv_row + d]);
}

static const be_cpu_pf_kernel_t scalar_kernel = {"scalar", 8, qk_scalar, pv_scalar,
                                                 keys_scalar, vals_scalar};
#if defined(__x86_64__) || defined(__i386__)
static const be_cpu_pf_kernel_t avx2_kernel = {"avx2", 8, be_avx2_pf_qk, be_avx2_pf_pv,
                                               be_avx2_pf_keys, be_avx2_pf_vals};
static const be_cpu_pf_kernel_t avx512_kernel = {"avx512", 16, be_avx512_pf_qk,
                                                 be_avx512_pf_pv, be_avx2_pf_keys,
                                                 be_avx2_pf_vals};
#endif

const be_cpu_pf_kernel_t *be_cpu_pf_kernel_at(be_simd_t level)
{
#if defined(__x86_64__) || defined(__i386__)
    be_simd_t have = be_simd_detect();
    if (level >= BE_SIMD_AVX512_VNNI && have >= BE_SIMD_AVX512_VNNI)
        return &avx512_kernel;
    if (level >= BE_SIMD_AVX2 && have >= BE_SIMD_AVX2)
        return &avx2_kernel;
#else
    CR_UNUSED(level);
#endif
    return &scalar_kernel;
}

/* ---- the tiled op ----------------------------------------------------- */

typedef struct pf_job {
    const be_cpu_pf_kernel_t *kr;
    const be_vec_ops_t *vec;
    float *out;
    const float *q;
    const uint16_t *k, *v;
    const be_attn_t *a;
    int group, block, n_blocks;
    int parts, part; /* a unit's heads: `part` of the group's (the last
                        part may have fewer), parts per group */
    size_t lds;       /* floats between score rows */
    float *scratch;
    size_t per_thread;
    atomic_int next;
} pf_job_t;

/* Rounds x[0..n) to F16 values in place, as be_f32_to_f16_row does. */
static void round_f16(float *x, int n)
{
    uint16_t h[64];
    for (int i = 0; i < n; i += 64) {
        int m = CR_MIN(64, n - i);
        be_f32_to_f16_row(x + i, h, m);
        be_f16_to_f32_row(h, x + i, m);
    }
}

/* Query heads h0 .. h0 + G - 1 (of kv head hk) of tokens t0 .. t1 - 1. */
static void unit(pf_job_t *j, float *buf, int hk, int h0, int G, int t0, int t1)
{
    const be_attn_t *a = j->a;
    const be_cpu_pf_kernel_t *kr = j->kr;
    int hd = a->head_dim, R = (t1 - t0) * G;
    size_t kv_row = (size_t)a->n_head_kv * hd, lds = j->lds;
    float *kt = buf, *vt = kt + round16((size_t)PF_KEYS * hd);
    float *qf = vt + round16((size_t)PF_KEYS * hd);
    float *acc = qf + (size_t)R * hd, *s = acc + (size_t)R * hd;
    const float *sinks = a->sinks ? a->sinks->data : NULL; /* [n_head] */
    int n_max = a->pos0 + t1; /* keys of the last row */
    /* a sliding window: tiles from the first row's first key's tile */
    int k_start = be_attn_first_key(a, a->pos0 + t0 + 1) / PF_KEYS * PF_KEYS;

    /* the unit's query heads are adjacent in q and out: one copy per token */
    for (int t = t0; t < t1; t++) {
        size_t off = ((size_t)t * a->n_head + (size_t)h0) * hd;
        memcpy(qf + (size_t)(t - t0) * G * hd, j->q + off, (size_t)G * hd * sizeof(float));
    }
    round_f16(qf, R * hd);

    for (int k0 = k_start; k0 < n_max; k0 += PF_KEYS) {
        int nk = CR_MIN(PF_KEYS, n_max - k0);
        kr->keys(nk, hd, j->k + (size_t)k0 * kv_row + (size_t)hk * hd, kv_row, kt, PF_KEYS,
                 n_max - k0 - nk);
        for (int c = nk; c < (nk + kr->kw - 1) / kr->kw * kr->kw; c++)
            for (int d = 0; d < hd; d++)
                kt[(size_t)d * PF_KEYS + c] = 0.0f;
        for (int r0 = 0; r0 < R; r0 += PF_GROUP) {
            int nq = CR_MIN(PF_GROUP, R - r0);
            int lim = a->pos0 + t0 + (r0 + nq - 1) / G + 1; /* the group's most keys */
            int n = CR_MIN(nk, lim - k0);
            for (int c = 0; c < n; c += kr->kw)
                kr->qk(nq, hd, qf + (size_t)r0 * hd, kt + c, PF_KEYS, s + r0 * lds + k0 + c,
                       lds);
        }
    }

    for (int r = 0; r < R; r++) {
        int n = a->pos0 + t0 + r / G + 1, h = h0 + r % G;
        int lo = be_attn_first_key(a, n);
        float *row = s + (size_t)r * lds;
        j->vec->scores(n - lo, row + lo, a->scale, a->softcap);
        be_vec_softmax_row(j->vec, row + lo, n - lo, sinks ? &sinks[h] : NULL);
        round_f16(row + lo, n - lo);
        /* zeros where the row sees no key: they add nothing (+0) to acc */
        for (int c = k_start; c < lo; c++)
            row[c] = 0.0f;
        for (int c = n; c < n_max; c++)
            row[c] = 0.0f;
    }

    memset(acc, 0, (size_t)R * hd * sizeof(float));
    for (int k0 = k_start; k0 < n_max; k0 += PF_KEYS) {
        int nk = CR_MIN(PF_KEYS, n_max - k0);
        kr->vals(nk, hd, j->v + (size_t)k0 * kv_row + (size_t)hk * hd, kv_row, vt,
                 n_max - k0 - nk);
        for (int r0 = 0; r0 < R; r0 += PF_GROUP) {
            int nq = CR_MIN(PF_GROUP, R - r0);
            int lim = a->pos0 + t0 + (r0 + nq - 1) / G + 1;
            int n = CR_MIN(nk, lim - k0);
            if (n > 0)
                kr->pv(nq, n, hd, s + r0 * lds + k0, lds, vt, acc + (size_t)r0 * hd);
        }
    }

    for (int t = t0; t < t1; t++) {
        size_t off = ((size_t)t * a->n_head + (size_t)h0) * hd;
        memcpy(j->out + off, acc + (size_t)(t - t0) * G * hd, (size_t)G * hd * sizeof(float));
    }
}

static void pf_task(void *ctx, int ith, int nth)
{
    CR_UNUSED(nth);
    pf_job_t *j = ctx;
    float *buf = j->scratch + (size_t)ith * j->per_thread;
    int per_block = j->a->n_head_kv * j->parts, units = j->n_blocks * per_block;
    for (;;) {
        int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= units)
            return;
        int b = j->n_blocks - 1 - u / per_block; /* last blocks see the most keys */
        int hk = u % per_block / j->parts, g0 = u % j->parts * j->part;
        int t0 = b * j->block;
        unit(j, buf, hk, hk * j->group + g0, CR_MIN(j->part, j->group - g0), t0,
             CR_MIN(j->a->n_tok, t0 + j->block));
    }
}

bool be_cpu_attn_prefill(rn_threadpool_t *pool, be_simd_t level, float *scratch,
                         size_t per_thread, float *out, const float *q, const uint16_t *k,
                         const uint16_t *v, const be_attn_t *a)
{
    const be_cpu_pf_kernel_t *kr = be_cpu_pf_kernel_at(level);
    int hd = a->head_dim;
    if (a->kv_type != CR_TYPE_F16 || hd < 1 || hd > BE_PF_MAX_HD || a->n_tok < 1 ||
        a->n_head_kv < 1 || a->n_head % a->n_head_kv)
        return false;
    if (kr != &scalar_kernel && hd % 8)
        return false;
    int G = a->n_head / a->n_head_kv, n_ctx = a->pos0 + a->n_tok;
    size_t fixed = fixed_floats(hd), per_row = row_floats(n_ctx, hd);
    if (!scratch || per_thread < fixed)
        return false;
    size_t fit = (per_thread - fixed) / per_row; /* rows that fit */
    int rows = CR_MAX(BE_PF_ROWS, G);
    int block = (int)CR_MIN(fit, (size_t)rows) / G;
    if (block < 1)
        return false;
    /* enough units for every thread to claim several */
    int nth = rn_threadpool_size(pool);
    while (block > 1 && (int64_t)a->n_head_kv * ((a->n_tok + block - 1) / block) < 4 * nth)
        block = (block + 1) / 2;
    int n_blocks = (a->n_tok + block - 1) / block;
    /* a decode step (one block) with fewer kv heads than threads: each
     * group's heads in parts, so every thread has a unit (each part
     * converts its kv head's keys again) */
    int parts = 1;
    if (n_blocks == 1 && a->n_head_kv < nth)
        parts = CR_MIN(G, (nth + a->n_head_kv - 1) / a->n_head_kv);
    int part = (G + parts - 1) / parts;
    parts = (G + part - 1) / part;
    pf_job_t j = {.kr = kr, .vec = be_vec_ops_at(level), .out = out, .q = q, .k = k,
                  .v = v, .a = a, .group = G, .block = block, .n_blocks = n_blocks,
                  .parts = parts, .part = part, .lds = keys_stride(n_ctx),
                  .scratch = scratch, .per_thread = per_thread};
    atomic_init(&j.next, 0);
    rn_threadpool_run(pool, pf_task, &j, n_blocks * a->n_head_kv * parts);
    return true;
}
