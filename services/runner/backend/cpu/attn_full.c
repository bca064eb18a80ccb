/* attn_full.c: bidirectional attention over all keys (attn_full.h).
 *
 * 1. Per head (threads split the heads): keys packed into column panels
 *    kp[h][p][d][nr] (nr keys side by side, head_dim deep, zeros past n),
 *    values into vp[h][p][j][nr] (nr value dims side by side, n deep).
 * 2. Threads claim (head, tile of mr queries) units: the tile is packed
 *    scaled, s[mr][n] = tile . keys (one microkernel call per key panel),
 *    each row becomes exp(s - max) with its sum (vector exp_sum), the rows
 *    are packed as a token panel of depth n, and out = that . values (one
 *    call per value panel), then each row divided by its sum. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/attn_full.h"
#include "services/runner/backend/cpu/gemm.h"
#include "services/runner/backend/cpu/vec.h"

#include <stdatomic.h>

typedef struct attn_job {
    const be_cpu_gemm_kernel_t *kr;
    const be_vec_ops_t *vec;
    float *out;
    const float *q, *k, *v;
    size_t ld;
    int n, n_head, hd;
    float scale;
    int kpanels, vpanels; /* key panels (n / nr), value panels (hd / nr) */
    float *kp, *vp;       /* [n_head][kpanels][hd][nr], [n_head][vpanels][n][nr] */
    float *scratch;       /* per share: q [hd][mr], s [mr][n], p [n][mr] */
    size_t per_share;     /* floats */
    int q_tiles;          /* tiles of mr queries per head */
    atomic_int_fast64_t next;
} attn_job_t;

static void pack_task(void *ctx, int ith, int nth)
{
    attn_job_t *j = ctx;
    int nr = j->kr->nr, hd = j->hd, n = j->n;
    for (int h = ith; h < j->n_head; h += nth) {
        float *kp = j->kp + (size_t)h * j->kpanels * hd * nr;
        for (int p = 0; p < j->kpanels; p++)
            for (int c = 0; c < nr; c++) {
                int key = p * nr + c;
                float *dst = kp + (size_t)p * hd * nr + c;
                const float *src = j->k + (size_t)key * j->ld + (size_t)h * hd;
                for (int d = 0; d < hd; d++)
                    dst[(size_t)d * nr] = key < n ? src[d] : 0.0f;
            }
        float *vp = j->vp + (size_t)h * j->vpanels * n * nr;
        for (int p = 0; p < j->vpanels; p++)
            for (int key = 0; key < n; key++) {
                float *dst = vp + ((size_t)p * n + key) * nr;
                const float *src = j->v + (size_t)key * j->ld + (size_t)h * hd;
                for (int c = 0; c < nr; c++) {
                    int d = p * nr + c;
                    dst[c] = d < hd ? src[d] : 0.0f;
                }
            }
    }
}

static void tile(attn_job_t *j, float *buf, int h, int t0)
{
    const be_cpu_gemm_kernel_t *kr = j->kr;
    int mr = kr->mr, nr = kr->nr, hd = j->hd, n = j->n;
    int mt = CR_MIN(mr, n - t0);
    float *qp = buf, *s = qp + (size_t)hd * mr, *pp = s + (size_t)mr * n;
    be_cpu_gemm_pack_a(j->q + (size_t)t0 * j->ld + (size_t)h * hd, j->ld, mt, hd, j->scale,
                       mr, qp);
    const float *kp = j->kp + (size_t)h * j->kpanels * hd * nr;
    for (int p = 0; p < j->kpanels; p++)
        kr->fn(hd, qp, kp + (size_t)p * hd * nr, s + (size_t)p * nr, (size_t)n, mt,
               CR_MIN(nr, n - p * nr), false);
    float inv[BE_CPU_GEMM_MAX_MR];
    for (int t = 0; t < mt; t++) {
        float *row = s + (size_t)t * n;
        /* eight running maxima: independent chains the compiler can keep
         * in flight */
        float m8[8];
        for (int i = 0; i < 8; i++)
            m8[i] = row[0];
        int key = 0;
        for (; key + 8 <= n; key += 8)
            for (int i = 0; i < 8; i++)
                m8[i] = row[key + i] > m8[i] ? row[key + i] : m8[i];
        float max = m8[0];
        for (int i = 1; i < 8; i++)
            max = m8[i] > max ? m8[i] : max;
        for (; key < n; key++)
            max = row[key] > max ? row[key] : max;
        inv[t] = (float)(1.0 / j->vec->exp_sum(n, row, max));
    }
    /* key outer: the panel is written in order */
    for (int key = 0; key < n; key++) {
        float *dst = pp + (size_t)key * mr;
        int t = 0;
        for (; t < mt; t++)
            dst[t] = s[(size_t)t * n + key];
        for (; t < mr; t++)
            dst[t] = 0.0f;
    }
    const float *vp = j->vp + (size_t)h * j->vpanels * n * nr;
    float *o = j->out + (size_t)t0 * j->ld + (size_t)h * hd;
    for (int p = 0; p < j->vpanels; p++)
        kr->fn(n, pp, vp + (size_t)p * n * nr, o + (size_t)p * nr, j->ld, mt,
               CR_MIN(nr, hd - p * nr), false);
    for (int t = 0; t < mt; t++)
        for (int d = 0; d < hd; d++)
            o[(size_t)t * j->ld + d] *= inv[t];
}

static void attn_task(void *ctx, int ith, int nth)
{
    CR_UNUSED(nth);
    attn_job_t *j = ctx;
    float *buf = j->scratch + (size_t)ith * j->per_share;
    int64_t units = (int64_t)j->n_head * j->q_tiles;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= units)
            return;
        tile(j, buf, (int)(u / j->q_tiles), (int)(u % j->q_tiles) * j->kr->mr);
    }
}

bool be_cpu_attn_full(rn_threadpool_t *pool, be_simd_t level, be_cpu_scratch_t *sc,
                      float *out, const float *q, const float *k, const float *v, size_t ld,
                      int n, int n_head, int head_dim, float scale)
{
    attn_job_t j = {.kr = be_cpu_gemm_kernel_at(level), .vec = be_vec_ops_at(level),
                    .out = out, .q = q, .k = k, .v = v, .ld = ld, .n = n,
                    .n_head = n_head, .hd = head_dim, .scale = scale};
    int mr = j.kr->mr, nr = j.kr->nr;
    j.kpanels = (n + nr - 1) / nr;
    j.vpanels = (head_dim + nr - 1) / nr;
    j.q_tiles = (n + mr - 1) / mr;
    int shares = rn_threadpool_size(pool);
    size_t kp = (size_t)n_head * j.kpanels * head_dim * nr;
    size_t vp = (size_t)n_head * j.vpanels * n * nr;
    kp = (kp + 15) / 16 * 16;
    vp = (vp + 15) / 16 * 16;
    j.per_share = (size_t)head_dim * mr + 2 * (size_t)mr * n;
    j.per_share = (j.per_share + 15) / 16 * 16;
    float *mem = be_cpu_scratch_get(sc, kp + vp + j.per_share * (size_t)shares);
    if (!mem)
        return false;
    j.kp = mem;
    j.vp = mem + kp;
    j.scratch = mem + kp + vp;
    atomic_init(&j.next, 0);
    rn_threadpool_run(pool, pack_task, &j, shares);
    rn_threadpool_run(pool, attn_task, &j, shares);
    return true;
}
