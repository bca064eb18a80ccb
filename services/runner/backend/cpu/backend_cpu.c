/* backend_cpu.c: the CPU backend: be_ops_t over host memory.
 *
 * Owns the thread pool and the scratch space kernels need (activations
 * converted to a weight's dot format, per-thread attention rows), sized once
 * by reserve(). matmul and attention split their work over the pool; the
 * small elementwise ops run on the calling thread. Kernels for each element
 * type come from quant.h (scalar or AVX2, chosen at run time); Q4_0, Q8_0,
 * Q4_K and Q6_K matrices are packed at weight_prepare into groups of 8 rows
 * (repack.h) and the file pages they came from are dropped, so one copy
 * stays in RAM. CORRAL_CPU_REPACK=0 keeps every weight in place.
 *
 * One backend serves one thread at a time: contexts sharing it must not run
 * ops concurrently (the runner evaluates one batch at a time). */
#include "lib/prelude.h"
#include "lib/log.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/attn_full.h"
#include "services/runner/backend/cpu/attn_prefill.h"
#include "services/runner/backend/cpu/attn_kvq.h"
#include "services/runner/backend/cpu/gemm.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/pack_cache.h"
#include "services/runner/backend/cpu/repack.h"
#include "services/runner/backend/cpu/vec.h"
#include "services/runner/backend/cpu/threadpool.h"

#include <math.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALIGN_BYTES 64
#define ROW_TILE 16 /* weight rows per tile: reused across the batch */
/* attention is tiled (attn_prefill.h), a decode step too, where the last
 * query sees 16 keys or more: below, bench-attn measured the per-query
 * loop as fast (a decode step after 15 keys: tiled 1.25-1.6x; after 3:
 * 0.5-0.9x) and a unit has 4 query rows or more (the kernel's rows per
 * call: Gemma-3's groups of 2 decode at 0.76-0.92x tiled) */
#define TILED_MIN_KEYS 16
#define TILED_MIN_ROWS 4

typedef struct be_cpu {
    be_backend_t base;
    rn_threadpool_t *pool;
    int n_threads;
    be_simd_t simd;
    const be_vec_ops_t *vec; /* inner loops at the simd level */

    void *wdata;          /* activations in a weight's dot format */
    size_t wdata_bytes;
    int32_t *xsum;        /* per token and 32-block: be_pack_block_sums */
    size_t xsum_len;
    bool repack;          /* pack Q4_0/Q8_0/Q4_K/Q6_K at weight_prepare */
    be_pack_cache_t *cache; /* between model_begin and model_end */
    void *publisher;      /* a cache being published (pack_cache.h) */
    int64_t mapped0, built0; /* pack cache counts at model_begin */
    float *att;           /* per thread: scores [max_ctx] + acc [max_hd] */
    uint16_t *att16;      /* per thread: probs [max_ctx] + q [max_hd] */
    size_t att_ctx;       /* positions reserved per thread */
    size_t att_hd;        /* head elements reserved per thread */
    bool prefill;         /* tiled attention for many queries (attn_prefill.h) */
    bool group;           /* matmul_group: one pass over q, k, v (gate, up) */
    float *pf;            /* per thread: its scratch, pf_floats each */
    size_t pf_floats;
    uint64_t weight_bytes; /* packed copies of prepared weights */
    uint64_t buffer_bytes; /* buffers from alloc, not yet freed */
    be_cpu_scratch_t wide; /* matmul_wide and attention_full (gemm.h) */
} be_cpu_t;

static be_cpu_t *cpu_of(be_backend_t *be)
{
    return (be_cpu_t *)be;
}

static void *alloc_aligned(size_t bytes)
{
    void *p = NULL;
    size_t n = (bytes + ALIGN_BYTES - 1) / ALIGN_BYTES * ALIGN_BYTES;
    if (n == 0)
        n = ALIGN_BYTES;
    if (posix_memalign(&p, ALIGN_BYTES, n))
        return NULL;
    memset(p, 0, n);
    return p;
}

/* ---- devices and memory ----------------------------------------------- */

static int cpu_device_count(const be_backend_t *be)
{
    CR_UNUSED(be);
    return 1;
}

static cr_status_t cpu_device_memory(const be_backend_t *be, int device,
                                     uint64_t *free_bytes, uint64_t *total_bytes,
                                     cr_err_t *err)
{
    CR_UNUSED(be);
    if (device != 0)
        return cr_err_set(err, CR_E_INVALID, "cpu backend has no device %d", device);
    long page = sysconf(_SC_PAGESIZE);
    long total = sysconf(_SC_PHYS_PAGES);
    long avail = sysconf(_SC_AVPHYS_PAGES);
    if (page <= 0 || total <= 0 || avail < 0)
        return cr_err_set(err, CR_E_IO, "cannot read system memory size");
    *total_bytes = (uint64_t)total * (uint64_t)page;
    *free_bytes = (uint64_t)avail * (uint64_t)page;
    return CR_OK;
}

/* A buffer is preceded by ALIGN_BYTES holding its size (for
 * memory_used), so it stays ALIGN_BYTES-aligned. */
static void *cpu_alloc(be_backend_t *be, size_t bytes)
{
    if (bytes > SIZE_MAX - ALIGN_BYTES)
        return NULL;
    uint8_t *p = alloc_aligned(bytes + ALIGN_BYTES);
    if (!p)
        return NULL;
    memcpy(p, &bytes, sizeof bytes);
    cpu_of(be)->buffer_bytes += bytes;
    return p + ALIGN_BYTES;
}

static void cpu_free(be_backend_t *be, void *buf)
{
    if (!buf)
        return;
    uint8_t *p = (uint8_t *)buf - ALIGN_BYTES;
    size_t bytes;
    memcpy(&bytes, p, sizeof bytes);
    cpu_of(be)->buffer_bytes -= bytes;
    free(p);
}

static void cpu_memory_used(const be_backend_t *be, uint64_t *weight_bytes,
                            uint64_t *buffer_bytes)
{
    const be_cpu_t *c = (const be_cpu_t *)be;
    size_t per = c->att_ctx + c->att_hd;
    *weight_bytes = c->weight_bytes;
    *buffer_bytes = c->buffer_bytes + c->wdata_bytes + c->xsum_len * sizeof(int32_t) +
                    per * (sizeof(float) + sizeof(uint16_t)) * (size_t)c->n_threads +
                    c->wide.floats * sizeof(float) +
                    c->pf_floats * sizeof(float) * (size_t)c->n_threads;
}

static void cpu_copy(be_backend_t *be, void *dst, const void *src, size_t bytes)
{
    CR_UNUSED(be);
    if (bytes)
        memmove(dst, src, bytes);
}

/* True if [p, p + bytes) lies in one read-only mapping of a file (the
 * model's mmap), per /proc/self/maps; false for heap or anonymous memory,
 * whose pages must never be dropped (they would read back as zeros). */
static bool in_readonly_file_map(const void *p, size_t bytes)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return false;
    uintptr_t a = (uintptr_t)p;
    bool ok = false;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long lo = 0, hi = 0, inode = 0;
        char perms[8] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %lu", &lo, &hi, perms, &inode) != 4)
            continue;
        if (a < lo || a >= hi)
            continue;
        ok = inode != 0 && perms[1] == '-' && bytes <= hi - a;
        break;
    }
    fclose(f);
    return ok;
}

/* Drops the whole pages of a read-only file mapping in [p, p + bytes) from
 * this process (the page cache keeps them; touching them reads them back),
 * so a packed copy does not double the weights' resident memory. Anything
 * else is left alone. */
static void drop_pages(const void *p, size_t bytes)
{
    if (!in_readonly_file_map(p, bytes))
        return;
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0)
        return;
    uintptr_t a = (uintptr_t)p, e = a + bytes;
    uintptr_t a0 = (a + (uintptr_t)page - 1) / (uintptr_t)page * (uintptr_t)page;
    uintptr_t e0 = e / (uintptr_t)page * (uintptr_t)page;
    if (e0 > a0 && madvise((void *)a0, e0 - a0, MADV_DONTNEED))
        cr_log_debug("cpu backend: madvise: %s", strerror(errno));
}

/* Packing one matrix on every thread: groups split evenly. */
typedef struct pack_job {
    be_packed_t *p;
    const void *src;
    size_t row_bytes;
} pack_job_t;

static void pack_task(void *ctx, int ith, int nth)
{
    pack_job_t *j = ctx;
    int64_t groups = j->p->n_rows / BE_PACK_ROWS;
    be_pack_fill(j->p, j->src, j->row_bytes, groups * ith / nth, groups * (ith + 1) / nth);
}

static cr_status_t cpu_weight_prepare(be_backend_t *be, be_weight_t *w,
                                      cr_err_t *err)
{
    const be_type_traits_t *tt = be_type_traits(w->type);
    if (!tt || !tt->vec_dot) {
        const cr_type_info_t *ti = cr_type_info(w->type);
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "tensor '%s': type %s is not supported by the cpu backend",
                          w->name ? w->name : "?", ti ? ti->name : "unknown");
    }
    uint64_t rb = 0;
    if (w->n_cols <= 0 || w->n_rows <= 0 ||
        !cr_type_row_bytes(w->type, (uint64_t)w->n_cols, &rb) || rb != w->row_bytes)
        return cr_err_set(err, CR_E_INVALID,
                          "tensor '%s': %" PRId64 " columns of %s do not make whole "
                          "rows", w->name ? w->name : "?", w->n_cols, tt->name);
    w->dev = NULL;
    be_cpu_t *c = cpu_of(be);
    if (!c->repack || !be_pack_supported(w->type, w->n_rows, w->n_cols))
        return CR_OK;
    size_t bytes = be_pack_bytes(w->type, w->n_rows, w->n_cols);
    bool filled = false;
    void *mem = be_pack_cache_map(c->cache, w->name, (int)w->type, w->n_rows, w->n_cols,
                                  bytes, &filled);
    be_packed_t *p = NULL;
    /* packed below, on every thread, when not read from the cache */
    cr_status_t st = be_pack_new_at(w->type, w->data, w->n_rows, w->n_cols, w->row_bytes,
                                    mem, true, &p, err);
    if (st) {
        if (mem)
            munmap(mem, bytes);
        return st;
    }
    w->dev = p;
    c->weight_bytes += bytes;
    if (filled)
        return CR_OK; /* the source pages were never read: nothing to drop */
    pack_job_t j = {p, w->data, w->row_bytes};
    rn_threadpool_run(c->pool, pack_task, &j, c->n_threads);
    drop_pages(w->data, (size_t)w->n_rows * w->row_bytes);
    return CR_OK;
}

static void cpu_model_begin(be_backend_t *be, const char *path)
{
    be_cpu_t *c = cpu_of(be);
    be_pack_cache_close(&c->cache, false, NULL);
    if (c->repack)
        c->cache = be_pack_cache_open(path);
    be_pack_cache_counts(&c->mapped0, &c->built0);
}

static void cpu_model_end(be_backend_t *be, bool ok)
{
    be_cpu_t *c = cpu_of(be);
    be_pack_cache_join(&c->publisher); /* one publication at a time */
    int64_t mapped, built;
    be_pack_cache_counts(&mapped, &built);
    if (c->cache)
        cr_log_info("packed weights: %" PRId64 " matrices mapped from the pack cache, %" PRId64
                    " packed into it", mapped - c->mapped0, built - c->built0);
    be_pack_cache_close(&c->cache, ok, &c->publisher);
}

static void cpu_weight_release(be_backend_t *be, be_weight_t *w)
{
    if (w->dev)
        cpu_of(be)->weight_bytes -= be_pack_bytes(w->type, w->n_rows, w->n_cols);
    be_packed_t *p = w->dev;
    be_pack_destroy(&p);
    w->dev = NULL;
}

static cr_status_t cpu_reserve(be_backend_t *be, int max_tok, int64_t max_cols,
                               int max_ctx, int n_head, cr_err_t *err)
{
    CR_UNUSED(n_head);
    be_cpu_t *c = cpu_of(be);
    if (max_tok < 1 || max_cols < 1 || max_ctx < 1)
        return cr_err_set(err, CR_E_INVALID, "reserve: sizes must be positive");
    /* Every dot format takes at most 4 bytes per element (F32); Q8_K's
     * 292 bytes per 256 is less. Checked for overflow. */
    if ((uint64_t)max_cols > SIZE_MAX / 4 / (uint64_t)max_tok)
        return cr_err_set(err, CR_E_TOO_LARGE, "reserve: batch too large");
    size_t need = (size_t)max_tok * (size_t)max_cols * 4;
    if (need > c->wdata_bytes) {
        void *p = alloc_aligned(need);
        if (!p)
            return cr_err_set(err, CR_E_NOMEM, "cpu backend: cannot allocate %zu "
                              "bytes of scratch", need);
        free(c->wdata);
        c->wdata = p;
        c->wdata_bytes = need;
    }
    size_t sums = (size_t)max_tok * (size_t)((max_cols + 31) / 32) * 2;
    if (sums > c->xsum_len) {
        int32_t *p = alloc_aligned(sums * sizeof(int32_t));
        if (!p)
            return cr_err_set(err, CR_E_NOMEM, "cpu backend: cannot allocate %zu "
                              "block sums", sums);
        free(c->xsum);
        c->xsum = p;
        c->xsum_len = sums;
    }
    size_t ctx = (size_t)max_ctx, hd = (size_t)max_cols;
    if (ctx > c->att_ctx || hd > c->att_hd) {
        ctx = CR_MAX(ctx, c->att_ctx);
        hd = CR_MAX(hd, c->att_hd);
        size_t per = ctx + hd;
        float *a = alloc_aligned(per * sizeof(float) * (size_t)c->n_threads);
        uint16_t *a16 = alloc_aligned(per * sizeof(uint16_t) * (size_t)c->n_threads);
        if (!a || !a16) {
            free(a);
            free(a16);
            return cr_err_set(err, CR_E_NOMEM, "cpu backend: cannot allocate "
                              "attention scratch for %zu positions", ctx);
        }
        free(c->att);
        free(c->att16);
        c->att = a;
        c->att16 = a16;
        c->att_ctx = ctx;
        c->att_hd = hd;
    }
    /* heads are at most max_cols wide; wider than BE_PF_MAX_HD never tile.
     * Rows per unit: BE_PF_ROWS, fewer for long contexts (about 4 MiB a
     * thread), never under 8 (GQA groups of 8 fit) */
    int pf_hd = (int)CR_MIN(max_cols, BE_PF_MAX_HD);
    size_t pf_rows = ((size_t)1 << 20) / (c->att_ctx + 2 * (size_t)pf_hd);
    pf_rows = CR_MAX(8, CR_MIN(BE_PF_ROWS, pf_rows));
    size_t pf = be_cpu_attn_prefill_floats((int)pf_rows, (int)c->att_ctx, pf_hd);
    if (c->prefill && pf > c->pf_floats) {
        float *p = alloc_aligned(pf * sizeof(float) * (size_t)c->n_threads);
        if (!p)
            return cr_err_set(err, CR_E_NOMEM, "cpu backend: cannot allocate "
                              "prompt attention scratch for %zu positions", c->att_ctx);
        free(c->pf);
        c->pf = p;
        c->pf_floats = pf;
    }
    return CR_OK;
}

/* ---- get_rows --------------------------------------------------------- */

static void cpu_get_rows(be_backend_t *be, const be_weight_t *w,
                         const int32_t *ids, int n, float *out)
{
    CR_UNUSED(be);
    if (w->dev) {
        for (int i = 0; i < n; i++)
            be_pack_get_row(w->dev, ids[i], out + (size_t)i * w->n_cols);
        return;
    }
    const be_type_traits_t *tt = be_type_traits(w->type);
    const uint8_t *base = w->data;
    for (int i = 0; i < n; i++)
        tt->to_float(base + (size_t)ids[i] * w->row_bytes, out + (size_t)i * w->n_cols,
                     w->n_cols);
}

/* ---- matmul ----------------------------------------------------------- */

typedef struct matmul_job {
    const be_weight_t *w;
    const be_type_traits_t *tt;
    const be_type_traits_t *vt;
    const float *x;   /* [n][n_cols] */
    void *xq;         /* [n] rows of act_bytes, in vt's format */
    size_t act_bytes;
    int32_t *xsum;    /* packed weights: [n][2 * n_cols / 32] block sums */
    int n;
    float *y;         /* [n][n_rows] */
    int64_t chunk;    /* rows per work unit */
    atomic_int_fast64_t next; /* first row of the next unclaimed unit */
} matmul_job_t;

static void convert_task(void *ctx, int ith, int nth)
{
    matmul_job_t *j = ctx;
    int64_t nb = j->w->n_cols / 32;
    for (int t = ith; t < j->n; t += nth) {
        void *row = (uint8_t *)j->xq + (size_t)t * j->act_bytes;
        j->vt->from_float(j->x + (size_t)t * j->w->n_cols, row, j->w->n_cols);
        if (j->xsum)
            be_pack_block_sums(row, nb, j->xsum + 2 * (size_t)t * (size_t)nb);
    }
}

/* ---- packed weights: one weight, or several with one input ----------- */

#define GROUP_MAX 3 /* q, k and v */

/* Products of packed weights with one input: one weight (matmul), or 2-3
 * (matmul_group: q, k and v, gate and up). x is quantized once; then the
 * weights' groups of 8 rows, one after the other, are one range that
 * threads claim units of from a counter, so a group of weights takes one
 * wake-up of the pool where separate matmuls take one each (a decoded
 * layer ran 8, now 5), and every wake-up ends in a wait for the slower
 * thread. Units are guided: a share of what is left (1 / (2 nth)), so the
 * first are long (long streams for the kernels) and the last small (the
 * threads finish together), never under the kernel's smallest efficient
 * unit (be_pack_min_groups) and never across a weight's end. A kernel's
 * bits do not depend on its range (repack.h): any split gives the same
 * results. */
typedef struct packed_job {
    const be_packed_t *p[GROUP_MAX];
    be_pack_gemm_fn gemm[GROUP_MAX];
    float *y[GROUP_MAX];
    int64_t end[GROUP_MAX];   /* weight i's groups end at end[i] of the range */
    int64_t min[GROUP_MAX];   /* weight i's smallest unit */
    int n_w;
    int nth;
    const void *xq;
    const int32_t *xsum;
    int n;
    atomic_int_fast64_t next; /* first group of the range not yet claimed */
} packed_job_t;

static void packed_task(void *ctx, int ith, int nth)
{
    CR_UNUSED(ith), CR_UNUSED(nth);
    packed_job_t *j = ctx;
    int64_t total = j->end[j->n_w - 1];
    int64_t g = atomic_load_explicit(&j->next, memory_order_relaxed);
    while (g < total) {
        int i = 0;
        while (g >= j->end[i])
            i++;
        int64_t g1 = CR_MIN(j->end[i], g + CR_MAX(j->min[i], (total - g) / (2 * j->nth)));
        if (j->end[i] - g1 < j->min[i])
            g1 = j->end[i]; /* no tail under the smallest unit */
        if (!atomic_compare_exchange_weak_explicit(&j->next, &g, g1, memory_order_relaxed,
                                                   memory_order_relaxed))
            continue; /* g now holds the counter's value */
        int64_t base = i ? j->end[i - 1] : 0;
        j->gemm[i](j->p[i], g - base, g1 - base, j->xq, j->xsum, j->n, j->y[i],
                   (size_t)j->p[i]->n_rows);
        g = atomic_load_explicit(&j->next, memory_order_relaxed);
    }
}

/* w[0..n_w): packed, of x's width, with one activation format (callers
 * check); y[i]: [n][w[i]->n_rows] */
static void cpu_packed_run(be_cpu_t *c, const be_weight_t *const *w, int n_w, const float *x,
                           int n, float *const *y)
{
    const be_packed_t *p0 = w[0]->dev;
    matmul_job_t cj = {.w = w[0], .x = x, .n = n};
    cj.vt = be_type_traits(be_pack_act_type(p0->type));
    cj.act_bytes = (size_t)p0->n_blocks * cj.vt->block_bytes;
    cj.xq = c->wdata;
    cj.xsum = cj.vt->type == CR_TYPE_Q8_0 ? c->xsum : NULL; /* K-quants need none */
    rn_threadpool_run(c->pool, convert_task, &cj, n);

    packed_job_t j = {.n_w = n_w, .xq = cj.xq, .xsum = cj.xsum, .n = n};
    int64_t work = 0, at = 0;
    for (int i = 0; i < n_w; i++) {
        const be_packed_t *p = w[i]->dev;
        work += w[i]->n_rows * w[i]->n_cols * (int64_t)n;
        j.p[i] = p;
        j.gemm[i] = be_pack_gemm_at(p->type, c->simd);
        j.y[i] = y[i];
        j.min[i] = be_pack_min_groups(p, n);
        at += p->n_rows / BE_PACK_ROWS;
        j.end[i] = at;
    }
    int tasks = work < 4096 ? 1 : c->n_threads; /* small: not worth a wake-up */
    j.nth = tasks;
    atomic_init(&j.next, 0);
    rn_threadpool_run(c->pool, packed_task, &j, tasks);
}

static void cpu_matmul_packed(be_cpu_t *c, const be_weight_t *w, const float *x, int n,
                              float *y)
{
    cpu_packed_run(c, (const be_weight_t *[]){w}, 1, x, n, (float *[]){y});
}

bool be_cpu_matmul_group(be_backend_t *be, const be_weight_t *const *w, int n_w,
                         const float *x, int n, float *const *y)
{
    be_cpu_t *c = cpu_of(be);
    if (!c->group || n_w < 1 || n_w > GROUP_MAX)
        return false;
    const be_packed_t *p0 = w[0]->dev;
    for (int i = 0; i < n_w; i++) {
        const be_packed_t *p = w[i]->dev;
        if (!p || w[i]->n_cols != w[0]->n_cols ||
            be_pack_act_type(p->type) != be_pack_act_type(p0->type))
            return false;
    }
    cpu_packed_run(c, w, n_w, x, n, y);
    return true;
}

/* Rows r0..r1 (r0 a multiple of ROW_TILE) against every token, a tile of
 * ROW_TILE rows at a time, so the tile stays in cache while the tokens go
 * by. Types with four-row kernels group rows by four (from multiples of 4)
 * for any number of tokens, so every (row, token) takes the same float steps
 * in a batch as alone; the rest use vec_dot4 (four tokens per weight row,
 * each bitwise vec_dot) or vec_dot. */
static void matmul_rows(const matmul_job_t *j, int64_t r0, int64_t r1)
{
    const be_weight_t *w = j->w;
    size_t rows = (size_t)w->n_rows, rb = w->row_bytes, ab = j->act_bytes;
    int64_t nc = w->n_cols;
    const uint8_t *wb = w->data;
    const uint8_t *xb = j->xq;
    be_vec_dot_fn dot = j->tt->vec_dot;
    be_vec_dot4_fn dot4 = j->tt->vec_dot4;
    be_vec_dot_r4_fn dot_r4 = j->tt->vec_dot_r4;
    be_vec_dot44_fn dot44 = j->tt->vec_dot44;
    int64_t tile = j->n == 1 ? r1 - r0 : ROW_TILE;
    for (int64_t rt = r0; rt < r1; rt += tile) {
        int64_t re = CR_MIN(r1, rt + tile);
        int64_t rg = dot_r4 ? rt + (re - rt) / 4 * 4 : rt; /* end of four-row groups */
        int t = 0;
        if (dot44)
            for (; t + 4 <= j->n; t += 4)
                for (int64_t r = rt; r < rg; r += 4)
                    dot44(nc, j->y + (size_t)t * rows + (size_t)r, rows, wb + (size_t)r * rb,
                          rb, xb + (size_t)t * ab, ab);
        if (dot_r4)
            for (; t < j->n; t++)
                for (int64_t r = rt; r < rg; r += 4)
                    dot_r4(nc, j->y + (size_t)t * rows + (size_t)r, wb + (size_t)r * rb, rb,
                           xb + (size_t)t * ab);
        t = 0;
        if (dot4 && !dot_r4)
            for (; t + 4 <= j->n; t += 4)
                for (int64_t r = rg; r < re; r++)
                    dot4(nc, j->y + (size_t)t * rows + (size_t)r, rows, wb + (size_t)r * rb,
                         xb + (size_t)t * ab, ab);
        for (; t < j->n; t++)
            for (int64_t r = rg; r < re; r++)
                dot(nc, j->y + (size_t)t * rows + (size_t)r, wb + (size_t)r * rb,
                    xb + (size_t)t * ab);
    }
}

/* Threads claim units of `chunk` rows from a shared counter until none are
 * left, so a thread slowed by anything else on the machine takes fewer and
 * all finish together. */
static void matmul_task(void *ctx, int ith, int nth)
{
    CR_UNUSED(ith), CR_UNUSED(nth);
    matmul_job_t *j = ctx;
    int64_t rows = j->w->n_rows;
    for (;;) {
        int64_t r0 = atomic_fetch_add_explicit(&j->next, j->chunk, memory_order_relaxed);
        if (r0 >= rows)
            return;
        matmul_rows(j, r0, CR_MIN(rows, r0 + j->chunk));
    }
}

static void cpu_matmul(be_backend_t *be, const be_weight_t *w, const float *x,
                       int n, float *y)
{
    be_cpu_t *c = cpu_of(be);
    if (w->dev) {
        cpu_matmul_packed(c, w, x, n, y);
        return;
    }
    matmul_job_t j = {.w = w, .x = x, .n = n, .y = y};
    j.tt = be_type_traits(w->type);
    j.vt = be_type_traits(j.tt->vec_dot_type);
    j.act_bytes = (size_t)(w->n_cols / j.vt->block_elems) * j.vt->block_bytes;
    if (j.tt->vec_dot_type == CR_TYPE_F32) {
        j.xq = (void *)x; /* used as is: the kernels only read it */
    } else {
        j.xq = c->wdata;
        rn_threadpool_run(c->pool, convert_task, &j, n);
    }
    /* Small matrices are not worth waking the pool for. */
    int tasks = w->n_rows * w->n_cols * (int64_t)n < 4096 ? 1 : c->n_threads;
    /* About 8 units per thread, whole row tiles. */
    int64_t chunk = w->n_rows / ((int64_t)tasks * 8);
    chunk = CR_MAX(ROW_TILE, chunk / ROW_TILE * ROW_TILE);
    j.chunk = chunk;
    atomic_init(&j.next, 0);
    rn_threadpool_run(c->pool, matmul_task, &j, tasks);
}

/* ---- vision towers: many tokens at once ------------------------------- */

bool be_cpu_matmul_wide(be_backend_t *be, const be_weight_t *w, const float *x, int n,
                        float *y)
{
    be_cpu_t *c = cpu_of(be);
    if (w->dev)
        return false; /* packed at weight_prepare: its file pages may be gone */
    return be_cpu_gemm(c->pool, c->simd, &c->wide, w, x, n, y);
}

bool be_cpu_attention_full(be_backend_t *be, float *out, const float *q, const float *k,
                           const float *v, int n, int n_head, int head_dim, float scale)
{
    be_cpu_t *c = cpu_of(be);
    size_t ld = (size_t)n_head * (size_t)head_dim;
    return be_cpu_attn_full(c->pool, c->simd, &c->wide, out, q, k, v, ld, n, n_head, head_dim,
                            scale);
}

/* ---- mixture of experts ----------------------------------------------- */

/* Grouped expert products (be_ops_ext_t.matmul_experts) on packed stacks:
 * one pass converts every grouped row (picked from x through x_rows, so no
 * gather copy), then threads claim units of (stack, expert, groups of 8
 * rows) from one counter, so a decoded token's 8 experts x rows share the
 * threads in one wake-up instead of one per expert and matrix. Each unit is
 * the packed kernel over its expert's rows and tokens, as matmul_rows runs
 * it: the same float steps per (row, token). */
typedef struct experts_job {
    const be_packed_t *p[2]; /* the stacks; p[1] NULL for one */
    float *y[2];
    be_pack_gemm_fn gemm[2];
    const be_type_traits_t *vt; /* activation format */
    size_t act_bytes;
    int64_t n_blocks;  /* activation blocks per row */
    int64_t n_cols;
    int n_w;           /* 1 or 2 */
    const float *x;
    const int32_t *x_rows;
    void *xq;
    int32_t *xsum;     /* Q8_0 activations only */
    const int32_t *experts, *start;
    int n_experts, n_rows; /* grouped rows in all */
    int64_t rpe;       /* rows per expert */
    int64_t chunk;     /* groups of 8 rows per unit */
    int64_t units;     /* per (stack, expert) */
    atomic_int_fast64_t next;
} experts_job_t;

static void experts_convert_task(void *ctx, int ith, int nth)
{
    experts_job_t *j = ctx;
    for (int g = ith; g < j->n_rows; g += nth) {
        int src = j->x_rows ? j->x_rows[g] : g;
        void *row = (uint8_t *)j->xq + (size_t)g * j->act_bytes;
        j->vt->from_float(j->x + (size_t)src * (size_t)j->n_cols, row, j->n_cols);
        if (j->xsum)
            be_pack_block_sums(row, j->n_blocks, j->xsum + 2 * (size_t)g * (size_t)j->n_blocks);
    }
}

static void experts_gemm_task(void *ctx, int ith, int nth)
{
    CR_UNUSED(ith), CR_UNUSED(nth);
    experts_job_t *j = ctx;
    int64_t groups = j->rpe / BE_PACK_ROWS, total = (int64_t)j->n_experts * j->n_w * j->units;
    for (;;) {
        int64_t u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= total)
            return;
        /* expert-major, so the threads of a decode share one expert's
         * rows before moving to the next */
        int i = (int)(u / (j->n_w * j->units));
        int s = (int)(u / j->units % j->n_w);
        int64_t g0 = u % j->units * j->chunk;
        int g = j->start[i] - j->start[0], ne = j->start[i + 1] - j->start[i];
        if (ne == 0)
            continue;
        const be_packed_t *p = j->p[s];
        be_packed_t view = *p;
        view.n_rows = j->rpe;
        view.data = (uint8_t *)p->data +
                    (size_t)((int64_t)j->experts[i] * groups) * p->group_bytes;
        j->gemm[s](&view, g0, CR_MIN(groups, g0 + j->chunk),
                   (const uint8_t *)j->xq + (size_t)g * j->act_bytes,
                   j->xsum ? j->xsum + 2 * (size_t)g * (size_t)j->n_blocks : NULL, ne,
                   j->y[s] + (size_t)g * (size_t)j->rpe, (size_t)j->rpe);
    }
}

bool be_cpu_matmul_experts(be_backend_t *be, const be_weight_t *w, const be_weight_t *w2,
                           int64_t rows_per_expert, const int32_t *experts,
                           const int32_t *start, int n_experts, const float *x,
                           const int32_t *x_rows, float *y, float *y2)
{
    be_cpu_t *c = cpu_of(be);
    const be_packed_t *p = w->dev, *p2 = w2 ? w2->dev : NULL;
    if (!p || (w2 && (!p2 || be_pack_act_type(p2->type) != be_pack_act_type(p->type) ||
                      p2->n_cols != p->n_cols || p2->n_rows != p->n_rows)) ||
        rows_per_expert % BE_PACK_ROWS != 0 || n_experts < 1)
        return false;
    experts_job_t j = {.p = {p, p2}, .y = {y, y2}, .n_w = w2 ? 2 : 1, .x = x,
                       .x_rows = x_rows, .experts = experts, .start = start,
                       .n_experts = n_experts, .rpe = rows_per_expert};
    j.n_rows = start[n_experts] - start[0];
    j.vt = be_type_traits(be_pack_act_type(p->type));
    j.n_cols = p->n_cols;
    j.n_blocks = p->n_blocks;
    j.act_bytes = (size_t)p->n_blocks * j.vt->block_bytes;
    /* reserve() sized the scratch for max_tok rows; the caller's slices
     * stay within that, anything larger goes the matmul_rows way */
    bool sums = j.vt->type == CR_TYPE_Q8_0;
    if ((size_t)j.n_rows * j.act_bytes > c->wdata_bytes ||
        (sums && (size_t)j.n_rows * 2 * (size_t)p->n_blocks > c->xsum_len))
        return false;
    j.xq = c->wdata;
    j.xsum = sums ? c->xsum : NULL;
    j.gemm[0] = be_pack_gemm_at(p->type, c->simd);
    j.gemm[1] = p2 ? be_pack_gemm_at(p2->type, c->simd) : NULL;
    rn_threadpool_run(c->pool, experts_convert_task, &j, j.n_rows);
    /* About 8 units per thread over everything, at least 4 groups each */
    int64_t groups = rows_per_expert / BE_PACK_ROWS;
    int64_t all = groups * n_experts * j.n_w;
    j.chunk = CR_MIN(groups, CR_MAX(4, all / ((int64_t)c->n_threads * 8)));
    j.units = (groups + j.chunk - 1) / j.chunk;
    atomic_init(&j.next, 0);
    rn_threadpool_run(c->pool, experts_gemm_task, &j, c->n_threads);
    return true;
}

/* be_ops_ext_t.scatter_add, threads over column ranges: each element
 * still takes its additions in the order of i. */
typedef struct scatter_job {
    float *y;
    const float *x, *s;
    const int32_t *ids;
    int n, cols;
} scatter_job_t;

static void scatter_task(void *ctx, int ith, int nth)
{
    scatter_job_t *j = ctx;
    int per = (j->cols + nth - 1) / nth;
    per = (per + 15) / 16 * 16; /* whole cache lines of floats */
    int c0 = CR_MIN(j->cols, ith * per), c1 = CR_MIN(j->cols, c0 + per);
    for (int i = 0; i < j->n; i++) {
        float *yr = j->y + (size_t)j->ids[i] * (size_t)j->cols;
        const float *xr = j->x + (size_t)i * (size_t)j->cols;
        float s = j->s[i];
        for (int col = c0; col < c1; col++)
            yr[col] += s * xr[col];
    }
}

void be_cpu_scatter_add(be_backend_t *be, float *y, const float *x, const int32_t *ids,
                        const float *s, int n, int cols)
{
    be_cpu_t *c = cpu_of(be);
    scatter_job_t j = {y, x, s, ids, n, cols};
    /* a decode's few rows are not worth waking the pool for */
    int tasks = (int64_t)n * cols < (1 << 16) ? 1 : c->n_threads;
    rn_threadpool_run(c->pool, scatter_task, &j, tasks);
}

/* ---- norms, rope, elementwise ----------------------------------------- */

static void cpu_rmsnorm(be_backend_t *be, float *y, const float *x,
                        const be_weight_t *w, int n, int dim, float eps)
{
    const be_vec_ops_t *v = cpu_of(be)->vec;
    for (int t = 0; t < n; t++)
        v->rmsnorm(dim, y + (size_t)t * dim, x + (size_t)t * dim, w->data, eps);
}

static void cpu_rope(be_backend_t *be, float *x, int n, int n_head, int head_dim,
                     int n_rot, const int32_t *pos, float freq_base,
                     const be_weight_t *freq_factors)
{
    const be_vec_ops_t *c_vec = cpu_of(be)->vec;
    const float *ff = freq_factors ? freq_factors->data : NULL;
    /* The angle for pair i is pos * base^(-2i/n_rot), built by repeated
     * multiplication in float as the reference engine does. */
    float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    /* Every head of a token turns by the same angles: cos/sin once per
     * token (same values as per head), for rotary sizes up to ROPE_MAX. */
    enum { ROPE_MAX = 512 };
    float cs[ROPE_MAX / 2], sn[ROPE_MAX / 2];
    for (int t = 0; t < n; t++) {
        bool cached = n_rot <= ROPE_MAX;
        if (cached) {
            float theta = (float)pos[t];
            for (int i = 0; i < n_rot; i += 2) {
                float th = ff ? theta / ff[i / 2] : theta;
                cs[i / 2] = cosf(th);
                sn[i / 2] = sinf(th);
                theta *= theta_scale;
            }
        }
        for (int h = 0; h < n_head && cached; h++)
            c_vec->rope_pairs(n_rot / 2, x + ((size_t)t * n_head + h) * head_dim, cs, sn);
        for (int h = 0; h < n_head && !cached; h++) {
            float *v = x + ((size_t)t * n_head + h) * head_dim;
            float theta = (float)pos[t];
            for (int i = 0; i < n_rot; i += 2) {
                float c, s;
                if (cached) {
                    c = cs[i / 2], s = sn[i / 2];
                } else {
                    float th = ff ? theta / ff[i / 2] : theta;
                    c = cosf(th), s = sinf(th);
                    theta *= theta_scale;
                }
                float x0 = v[i], x1 = v[i + 1];
                v[i] = x0 * c - x1 * s;
                v[i + 1] = x0 * s + x1 * c;
            }
        }
    }
}

static bool cpu_kv_type_supported(const be_backend_t *be, cr_type_t t)
{
    CR_UNUSED(be);
    return t == CR_TYPE_F16 || be_kvq_type_ok(t);
}

static void cpu_kv_store(be_backend_t *be, void *cache, cr_type_t t, const float *src,
                         int n, int at, int row)
{
    CR_UNUSED(be);
    if (t == CR_TYPE_F16)
        be_f32_to_f16_row(src, (uint16_t *)cache + (size_t)at * row, (int64_t)n * row);
    else
        be_kvq_store(t, cache, src, n, at, row);
}

static void cpu_swiglu(be_backend_t *be, float *y, const float *gate,
                       const float *up, size_t n)
{
    cpu_of(be)->vec->swiglu(n, y, gate, up);
}

static void cpu_add(be_backend_t *be, float *y, const float *x, size_t n)
{
    CR_UNUSED(be);
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

static void cpu_softmax(be_backend_t *be, float *x, int n_rows, int n_cols)
{
    for (int r = 0; r < n_rows; r++)
        be_vec_softmax_row(cpu_of(be)->vec, x + (size_t)r * n_cols, n_cols, NULL);
}

/* ---- attention -------------------------------------------------------- */

typedef struct attn_job {
    be_cpu_t *c;
    float *out;
    const float *q;
    const void *k, *v;
    const be_attn_t *a;
    int kvq_heads;   /* quantized cache: query heads per task (a group or
                        part of one), scores in the pf scratch when > 1 */
    int f16_heads;   /* F16 cache: query heads per task, 1 or 2 (a pair,
                        scratch in the pf scratch) */
    atomic_int next; /* the next unclaimed (token, head) task: claimed, not
                        dealt, so a thread the machine slows takes fewer */
} attn_job_t;

/* attn_task over a quantized cache: tasks of (token, kv head, part of its
 * group: kvq_heads query heads) through attn_kvq.c, each K/V row read once
 * per task. One head a task: scores in the thread's score row, q's Q8_0
 * blocks where the F16 path keeps q16 (2 x head_dim bytes >= 34/32 x
 * head_dim); more: score rows and Q8_0 blocks (head_dim floats a head,
 * more than its 34/32 x head_dim bytes) in the thread's pf scratch. */
static void attn_task_kvq(attn_job_t *j, int ith, int nth)
{
    const be_attn_t *a = j->a;
    int hd = a->head_dim, group = a->n_head / a->n_head_kv, gh = j->kvq_heads;
    int parts = (group + gh - 1) / gh;
    size_t row_bytes = be_kv_row_bytes(a->kv_type, a->n_head_kv * hd);
    size_t head_bytes = row_bytes / (size_t)a->n_head_kv;
    size_t per = j->c->att_ctx + j->c->att_hd, lds = (size_t)(a->pos0 + a->n_tok);
    float *scores = j->c->att + per * (size_t)ith;
    void *q8 = j->c->att16 + per * (size_t)ith + j->c->att_ctx;
    if (gh > 1) {
        scores = j->c->pf + j->c->pf_floats * (size_t)ith;
        q8 = scores + (size_t)gh * lds;
    }
    const float *sinks = a->sinks ? a->sinks->data : NULL; /* [n_head] */

    CR_UNUSED(nth);
    for (int task; (task = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) <
                   a->n_tok * a->n_head_kv * parts;) {
        int per_tok = a->n_head_kv * parts;
        int t = task / per_tok, hk = task % per_tok / parts, g0 = task % parts * gh;
        int h = hk * group + g0, n_kv = a->pos0 + t + 1;
        int first = be_attn_first_key(a, n_kv);
        size_t at = (size_t)first * row_bytes + (size_t)hk * head_bytes;
        be_kvq_head_t kh = {
            .type = a->kv_type,
            .level = j->c->simd,
            .head_dim = hd,
            .k = (const uint8_t *)j->k + at,
            .v = (const uint8_t *)j->v + at,
            .row_bytes = row_bytes,
            .n_kv = n_kv - first,
            .scale = a->scale,
            .softcap = a->softcap,
            .sink = sinks ? &sinks[h] : NULL,
        };
        size_t off = ((size_t)t * a->n_head + h) * hd;
        be_kvq_attend_heads(&kh, CR_MIN(gh, group - g0), j->q + off, scores, lds, q8,
                            j->out + off);
    }
}

/* q rounded to F16 (the cache's precision, as every path rounds it), into
 * floats: the dots then need not convert it per key. */
static void query_f16(const float *q, int hd, uint16_t *q16, float *q32)
{
    be_f32_to_f16_row(q, q16, hd);
    be_f16_to_f32_row(q16, q32, hd);
}

/* Where query head h of token t finds its first key in the F16 cache
 * (elements: the window's first key, its kv head's slice), and in *n_kv
 * how many keys it sees. */
static size_t head_keys(const be_attn_t *a, int t, int h, int *n_kv)
{
    int n = a->pos0 + t + 1, first = be_attn_first_key(a, n);
    size_t hd = (size_t)a->head_dim, hk = (size_t)(h / (a->n_head / a->n_head_kv));
    *n_kv = n - first;
    return (size_t)first * (size_t)a->n_head_kv * hd + hk * hd;
}

/* One query head of a task over the F16 cache: scores, softmax,
 * probabilities rounded to F16, the weighted sum of values. The query's
 * floats sit in acc until attn_v fills it. */
static void attn_head_f16(const attn_job_t *j, int t, int h, float *scores, float *acc,
                          uint16_t *p16, uint16_t *q16)
{
    const be_attn_t *a = j->a;
    const be_vec_ops_t *vec = j->c->vec;
    int hd = a->head_dim, n_kv;
    size_t kv_row = (size_t)a->n_head_kv * hd, at = head_keys(a, t, h, &n_kv);
    const uint16_t *kc = j->k, *vc = j->v;
    size_t off = ((size_t)t * a->n_head + h) * hd;
    query_f16(j->q + off, hd, q16, acc);
    for (int p = 0; p < n_kv; p++)
        vec->dot_f16(hd, &scores[p], kc + at + (size_t)p * kv_row, acc);
    vec->scores(n_kv, scores, a->scale, a->softcap);
    const float *sinks = a->sinks ? a->sinks->data : NULL; /* [n_head] */
    be_vec_softmax_row(vec, scores, n_kv, sinks ? &sinks[h] : NULL);
    be_f32_to_f16_row(scores, p16, n_kv);
    vec->attn_v(n_kv, p16, vc + at, kv_row, hd, acc);
    memcpy(j->out + off, acc, (size_t)hd * sizeof(float));
}

/* Heads h and h + 1 (one GQA group) of a task over the F16 cache, each K
 * and V row read once for both: the same steps per head as
 * attn_head_f16, so the same bits. sc: the thread's pf scratch. */
static void attn_pair_f16(const attn_job_t *j, int t, int h, float *sc)
{
    const be_attn_t *a = j->a;
    const be_vec_ops_t *vec = j->c->vec;
    int hd = a->head_dim, n_kv;
    size_t kv_row = (size_t)a->n_head_kv * hd, at = head_keys(a, t, h, &n_kv);
    size_t lds = (size_t)(a->pos0 + a->n_tok);
    const uint16_t *kc = j->k, *vc = j->v;
    float *s0 = sc, *s1 = s0 + lds, *acc0 = s1 + lds, *acc1 = acc0 + hd;
    uint16_t *p0 = (uint16_t *)(acc1 + hd), *p1 = p0 + lds, *q16 = p1 + lds;
    size_t off = ((size_t)t * a->n_head + h) * hd;
    query_f16(j->q + off, hd, q16, acc0);
    query_f16(j->q + off + hd, hd, q16, acc1);
    for (int p = 0; p < n_kv; p++) {
        float s[2];
        vec->dot2_f16(hd, s, kc + at + (size_t)p * kv_row, acc0, acc1);
        s0[p] = s[0], s1[p] = s[1];
    }
    vec->scores(n_kv, s0, a->scale, a->softcap);
    vec->scores(n_kv, s1, a->scale, a->softcap);
    const float *sinks = a->sinks ? a->sinks->data : NULL; /* [n_head] */
    be_vec_softmax_row(vec, s0, n_kv, sinks ? &sinks[h] : NULL);
    be_vec_softmax_row(vec, s1, n_kv, sinks ? &sinks[h + 1] : NULL);
    be_f32_to_f16_row(s0, p0, n_kv);
    be_f32_to_f16_row(s1, p1, n_kv);
    vec->attn_v2(n_kv, p0, p1, vc + at, kv_row, hd, acc0, acc1);
    memcpy(j->out + off, acc0, (size_t)hd * sizeof(float));
    memcpy(j->out + off + hd, acc1, (size_t)hd * sizeof(float));
}

/* Floats of pf scratch attn_pair_f16 takes: two score rows and two
 * accumulators, then two rows of F16 probabilities and one F16 query. */
static size_t pair_floats(const be_attn_t *a)
{
    size_t lds = (size_t)(a->pos0 + a->n_tok), hd = (size_t)a->head_dim;
    return 2 * (lds + hd) + lds + (hd + 1) / 2;
}

static void attn_task(void *ctx, int ith, int nth)
{
    attn_job_t *j = ctx;
    const be_attn_t *a = j->a;
    if (a->kv_type != CR_TYPE_F16) {
        attn_task_kvq(j, ith, nth);
        return;
    }
    int group = a->n_head / a->n_head_kv, gh = j->f16_heads, parts = (group + gh - 1) / gh;
    size_t per = j->c->att_ctx + j->c->att_hd;
    float *scores = j->c->att + per * (size_t)ith;
    uint16_t *p16 = j->c->att16 + per * (size_t)ith;
    float *pair = gh > 1 ? j->c->pf + j->c->pf_floats * (size_t)ith : NULL;

    CR_UNUSED(nth);
    for (int task; (task = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) <
                   a->n_tok * a->n_head_kv * parts;) {
        int per_tok = a->n_head_kv * parts;
        int t = task / per_tok, hk = task % per_tok / parts, g0 = task % parts * gh;
        int h = hk * group + g0;
        if (gh > 1 && group - g0 > 1)
            attn_pair_f16(j, t, h, pair);
        else
            attn_head_f16(j, t, h, scores, scores + j->c->att_ctx, p16, p16 + j->c->att_ctx);
    }
}

/* Query heads per task over the F16 cache where the tiled path does not
 * run (a decode step of groups under TILED_MIN_ROWS, Gemma's 2): two, read
 * from each K/V row once, where the pf scratch holds them and there are
 * tasks enough for every thread; else one. */
static int f16_heads(const be_cpu_t *c, const be_attn_t *a)
{
    int G = a->n_head / a->n_head_kv;
    if (!c->pf || G < 2 || pair_floats(a) > c->pf_floats)
        return 1;
    if (a->n_tok * a->n_head_kv * (G / 2) < c->n_threads)
        return 1;
    return 2;
}

/* Query heads per task over a quantized cache: a whole GQA group (each
 * K/V row then read once for it) as far as the pf scratch holds their
 * score rows and Q8_0 blocks, split into parts when one token's groups
 * would leave threads idle (a decode step with fewer kv heads than
 * threads); 1 without the scratch (CORRAL_CPU_PREFILL_ATTN=0). */
static int kvq_heads(const be_cpu_t *c, const be_attn_t *a)
{
    int G = a->n_head / a->n_head_kv;
    if (!c->pf || G < 2)
        return 1;
    size_t fit = c->pf_floats / ((size_t)(a->pos0 + a->n_tok) + (size_t)a->head_dim);
    int gh = (int)CR_MIN((size_t)CR_MIN(G, BE_KVQ_MAX_HEADS), fit);
    if (a->n_tok * a->n_head_kv < c->n_threads) {
        int parts = (c->n_threads + a->n_head_kv - 1) / a->n_head_kv;
        gh = CR_MIN(gh, (G + parts - 1) / parts);
    }
    return CR_MAX(gh, 1);
}

static void cpu_attention(be_backend_t *be, float *out, const float *q,
                          const void *k, const void *v, const be_attn_t *a)
{
    be_cpu_t *c = cpu_of(be);
    /* tiled (same bits, attn_prefill.h) from TILED_MIN_KEYS keys, decode
     * steps too; per query below that and over a quantized cache */
    if (c->prefill && a->pos0 + a->n_tok >= TILED_MIN_KEYS &&
        a->n_tok * (a->n_head / CR_MAX(a->n_head_kv, 1)) >= TILED_MIN_ROWS &&
        be_cpu_attn_prefill(c->pool, c->simd, c->pf, c->pf_floats, out, q, k, v, a))
        return;
    attn_job_t j = {c, out, q, k, v, a, 1, 1, 0};
    atomic_init(&j.next, 0);
    int tasks = a->n_tok * a->n_head;
    if (a->kv_type == CR_TYPE_F16) {
        j.f16_heads = f16_heads(c, a);
        int G = a->n_head / a->n_head_kv;
        tasks = a->n_tok * a->n_head_kv * ((G + j.f16_heads - 1) / j.f16_heads);
    } else {
        j.kvq_heads = kvq_heads(c, a);
        int G = a->n_head / a->n_head_kv;
        tasks = a->n_tok * a->n_head_kv * ((G + j.kvq_heads - 1) / j.kvq_heads);
    }
    rn_threadpool_run(c->pool, attn_task, &j, tasks);
}

/* attention_ext (backend.h) on the attention op's threaded paths: the
 * window and soft-cap ride in be_attn_t. The scratch is not needed. */
void be_cpu_attention_ext(be_backend_t *be, float *out, const float *q, const void *kv_k,
                          const void *kv_v, const be_attn_t *a, float softcap, int window,
                          float *scratch)
{
    CR_UNUSED(scratch);
    be_attn_t b = *a;
    b.softcap = softcap;
    b.window = window;
    cpu_attention(be, out, q, kv_k, kv_v, &b);
}

/* ---- lifecycle -------------------------------------------------------- */

static void cpu_destroy(be_backend_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    be_cpu_t *c = cpu_of(*self_p);
    be_pack_cache_close(&c->cache, false, NULL);
    be_pack_cache_join(&c->publisher);
    rn_threadpool_destroy(&c->pool);
    free(c->wdata);
    free(c->xsum);
    free(c->att);
    free(c->att16);
    free(c->pf);
    be_cpu_scratch_free(&c->wide);
    free(c);
    *self_p = NULL;
}

static const be_ops_t cpu_ops = {
    .name = "cpu",
    .host_memory = true,
    .destroy = cpu_destroy,
    .device_count = cpu_device_count,
    .device_memory = cpu_device_memory,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memory_used = cpu_memory_used,
    .kv_type_supported = cpu_kv_type_supported,
    .ext_ops = be_cpu_ext_ops,
    .upload = cpu_copy,
    .download = cpu_copy,
    .weight_prepare = cpu_weight_prepare,
    .weight_release = cpu_weight_release,
    .model_begin = cpu_model_begin,
    .model_end = cpu_model_end,
    .reserve = cpu_reserve,
    .get_rows = cpu_get_rows,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .softmax = cpu_softmax,
};

cr_status_t be_cpu_new(int n_threads, be_backend_t **out, cr_err_t *err)
{
    *out = NULL;
    be_cpu_t *c = calloc(1, sizeof *c);
    if (!c)
        return cr_err_set(err, CR_E_NOMEM, "cpu backend: out of memory");
    c->base.ops = &cpu_ops;
    c->simd = be_simd_detect();
    c->vec = be_vec_ops_at(c->simd);
    const char *rp = getenv("CORRAL_CPU_REPACK");
    c->repack = !(rp && !strcmp(rp, "0"));
    const char *pa = getenv("CORRAL_CPU_PREFILL_ATTN");
    c->prefill = !(pa && !strcmp(pa, "0"));
    const char *mg = getenv("CORRAL_CPU_MATMUL_GROUP");
    c->group = !(mg && !strcmp(mg, "0"));
    cr_status_t st = rn_threadpool_new(n_threads, &c->pool, err);
    if (st) {
        free(c);
        return st;
    }
    c->n_threads = rn_threadpool_size(c->pool);
    *out = &c->base;
    return CR_OK;
}

int be_cpu_threads(const be_backend_t *be)
{
    if (!be || be->ops != &cpu_ops)
        return 1;
    return ((const be_cpu_t *)be)->n_threads;
}

const char *be_cpu_simd(const be_backend_t *be)
{
    if (!be || be->ops != &cpu_ops)
        return "none";
    return be_simd_name(((const be_cpu_t *)be)->simd);
}
