/* test_attn_prefill.c: the tiled prompt attention (backend/cpu/attn_prefill.h)
 * at every SIMD level this CPU runs (levels it lacks are printed as not
 * tested), for 1..70 queries after 0 or 37 cached tokens, GQA ratios 1, 3,
 * 4 and 8 (a decode step on the test's 3 threads splits the groups of 2 kv
 * heads into parts, 3 into 2 + 1), head_dim 64, 128 and 40, with and without attention sinks,
 * sliding windows (5 and 40 keys) and a soft-cap (attention_ext's):
 *
 * 1. bit for bit against the per-query path at the same level (the level's
 *    F16 dot per key, be_vec_softmax_row, probabilities rounded to F16,
 *    the level's attn_v), which it promises to equal;
 * 2. against causal softmax attention in double precision on the same
 *    inputs (q rounded to F16 as both paths do; k, v are F16 already),
 *    within the bound below;
 * 3. through the backend's attention op with CORRAL_CPU_PREFILL_ATTN unset
 *    and =0 (same bits), for a prompt chunk and a decode step (tiled too),
 *    and through attention_ext with a window and a soft-cap; and decode
 *    steps of groups of 2 and 3 (two heads a task where the scratch is
 *    on, one where it is off), within the bound too.
 *
 * The bound per output element, V = max |v|, u = 2^-24: each score scale *
 * q.k is an F32 sum of hd products, within gamma_hd * S (S = scale * sum_d
 * |q_d k_d|, at most the row's largest) plus u |s| for the scale; a score
 * error e moves a softmax average of values in [-V, V] by at most 2 e V.
 * The probabilities rounded to F16 are within 2^-11 relative (normal F16)
 * or 2^-25 absolute (subnormal) each: 2^-11 V plus n 2^-25 V. The vector
 * exp (4 ulp), the row sum, 1/sum and the weighted sum of n values add
 * (n + 16) u V. A soft-cap c tanh(s / c) passes a score's error on
 * (its slope is at most 1) and adds its division, the level's tanh
 * (tanhf, or vec.c's vector form: test_vec holds both, with the product,
 * within 8 ulp) and product: 8 u |s| more is ample. A dropped key, a tile edge or a wrong row misses this by
 * orders of magnitude (the probabilities are about 1/n). */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/attn_prefill.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cpu/threadpool.h"
#include "services/runner/backend/cpu/vec.h"
#include "tests/unit/check.h"
#include "tests/unit/splitmix.h"

#include <math.h>

#define U 0x1p-24

static uint64_t rng_s = 0x5eed;

typedef struct attn_case {
    be_attn_t a;
    float *q, *out;
    uint16_t *k, *v; /* [pos0 + n_tok][n_head_kv * hd] */
    float sink[64];
    be_weight_t sinks;
} attn_case_t;

static void case_new(attn_case_t *c, int n_tok, int pos0, int n_head_kv, int group, int hd,
                     bool sinks)
{
    memset(c, 0, sizeof *c);
    c->a = (be_attn_t){.n_tok = n_tok, .pos0 = pos0, .n_head = n_head_kv * group,
                       .n_head_kv = n_head_kv, .head_dim = hd,
                       .scale = 1.0f / sqrtf((float)hd), .kv_type = CR_TYPE_F16};
    size_t nq = (size_t)n_tok * c->a.n_head * hd, nkv = (size_t)(pos0 + n_tok) * n_head_kv * hd;
    c->q = malloc(nq * sizeof(float));
    c->out = malloc(nq * sizeof(float));
    c->k = malloc(nkv * sizeof(uint16_t));
    c->v = malloc(nkv * sizeof(uint16_t));
    float *tmp = malloc(nkv * sizeof(float));
    /* scores of a few units: peaked rows, some near-zero probabilities */
    for (size_t i = 0; i < nq; i++)
        c->q[i] = splitmix_sym(&rng_s) * 3.0f;
    for (size_t i = 0; i < nkv; i++)
        tmp[i] = splitmix_sym(&rng_s) * 2.0f;
    be_f32_to_f16_row(tmp, c->k, (int64_t)nkv);
    for (size_t i = 0; i < nkv; i++)
        tmp[i] = splitmix_sym(&rng_s);
    be_f32_to_f16_row(tmp, c->v, (int64_t)nkv);
    free(tmp);
    if (sinks) {
        for (int h = 0; h < c->a.n_head; h++)
            c->sink[h] = splitmix_sym(&rng_s) * 4.0f;
        c->sinks = (be_weight_t){.type = CR_TYPE_F32, .n_cols = c->a.n_head, .n_rows = 1,
                                 .row_bytes = (size_t)c->a.n_head * 4, .data = c->sink};
        c->a.sinks = &c->sinks;
    }
}

static void case_free(attn_case_t *c)
{
    free(c->q);
    free(c->out);
    free(c->k);
    free(c->v);
}

/* The per-query path (backend_cpu.c attn_task) at level lv. */
static void per_query(be_simd_t lv, const attn_case_t *c, float *out)
{
    const be_attn_t *a = &c->a;
    be_vec_dot_fn dot = be_type_traits_at(CR_TYPE_F16, lv)->vec_dot;
    const be_vec_ops_t *vec = be_vec_ops_at(lv);
    int hd = a->head_dim, g = a->n_head / a->n_head_kv, n_ctx = a->pos0 + a->n_tok;
    size_t kv_row = (size_t)a->n_head_kv * hd;
    float *scores = malloc((size_t)n_ctx * sizeof(float));
    uint16_t *p16 = malloc((size_t)n_ctx * sizeof(uint16_t)), q16[256];
    for (int t = 0; t < a->n_tok; t++)
        for (int h = 0; h < a->n_head; h++) {
            int n = a->pos0 + t + 1, hk = h / g;
            int first = a->window > 0 ? CR_MAX(0, n - a->window) : 0;
            size_t off = ((size_t)t * a->n_head + h) * hd, at = (size_t)first * kv_row;
            be_f32_to_f16_row(c->q + off, q16, hd);
            n -= first;
            for (int p = 0; p < n; p++)
                dot(hd, &scores[p], c->k + at + (size_t)p * kv_row + (size_t)hk * hd, q16);
            vec->scores(n, scores, a->scale, a->softcap);
            be_vec_softmax_row(vec, scores, n, a->sinks ? &c->sink[h] : NULL);
            be_f32_to_f16_row(scores, p16, n);
            vec->attn_v(n, p16, c->v + at + (size_t)hk * hd, kv_row, hd, out + off);
        }
    free(scores);
    free(p16);
}

/* Double-precision causal attention on the same inputs, and each element's
 * bound; returns how many outputs of `got` lie outside it. */
static int check_double(const attn_case_t *c, const float *got, double *worst)
{
    const be_attn_t *a = &c->a;
    int hd = a->head_dim, g = a->n_head / a->n_head_kv, n_ctx = a->pos0 + a->n_tok, bad = 0;
    size_t kv_row = (size_t)a->n_head_kv * hd;
    double *s = malloc((size_t)n_ctx * sizeof(double));
    uint16_t q16[256];
    double vmax = 0;
    for (size_t i = 0; i < (size_t)n_ctx * kv_row; i++)
        vmax = fmax(vmax, fabs(be_f16_to_f32(c->v[i])));
    for (int t = 0; t < a->n_tok; t++)
        for (int h = 0; h < a->n_head; h++) {
            int n = a->pos0 + t + 1, hk = h / g;
            int lo = a->window > 0 ? CR_MAX(0, n - a->window) : 0;
            size_t off = ((size_t)t * a->n_head + h) * hd;
            be_f32_to_f16_row(c->q + off, q16, hd);
            double max = a->sinks ? c->sink[h] : -INFINITY, big = 0, smax = 0;
            for (int p = lo; p < n; p++) {
                const uint16_t *kr = c->k + (size_t)p * kv_row + (size_t)hk * hd;
                double dot = 0, abs = 0;
                for (int d = 0; d < hd; d++) {
                    double x = (double)be_f16_to_f32(q16[d]) * be_f16_to_f32(kr[d]);
                    dot += x;
                    abs += fabs(x);
                }
                s[p] = dot * a->scale;
                if (a->softcap > 0)
                    s[p] = a->softcap * tanh(s[p] / a->softcap);
                max = fmax(max, s[p]);
                big = fmax(big, abs * a->scale);
                smax = fmax(smax, fabs(s[p]));
            }
            double sum = a->sinks ? exp(c->sink[h] - max) : 0;
            for (int p = lo; p < n; p++)
                sum += s[p] = exp(s[p] - max);
            double gamma = hd * U / (1 - hd * U);
            double e = gamma * big + U * smax + (a->softcap > 0 ? 8 * U * smax : 0);
            double tol = vmax * (2 * e + 0x1p-11 + n * 0x1p-25 + (n + 16) * U);
            for (int d = 0; d < hd; d++) {
                double ref = 0;
                for (int p = lo; p < n; p++)
                    ref += s[p] / sum *
                           be_f16_to_f32(c->v[(size_t)p * kv_row + (size_t)hk * hd + d]);
                double err = fabs(got[off + d] - ref);
                *worst = fmax(*worst, err / tol);
                if (!(err <= tol) && bad++ < 3)
                    fprintf(stderr, "  t %d h %d d %d: %.9g vs %.9g (bound %.3g)\n", t, h, d,
                            got[off + d], ref, tol);
            }
        }
    free(s);
    return bad;
}

static void check_level(rn_threadpool_t *pool, be_simd_t lv)
{
    static const int n_toks[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 33, 64, 70};
    static const int groups[] = {1, 3, 4, 8};
    static const int hds[] = {64, 128, 40};
    int cases = 0, differ = 0, outside = 0;
    double worst = 0;
    int nth = rn_threadpool_size(pool);
    for (size_t hi = 0; hi < CR_ARRAY_LEN(hds); hi++)
        for (size_t gi = 0; gi < CR_ARRAY_LEN(groups); gi++)
            for (size_t ni = 0; ni < CR_ARRAY_LEN(n_toks); ni++)
                for (int pos0 = 0; pos0 <= 37; pos0 += 37) {
                    int hd = hds[hi], n_tok = n_toks[ni];
                    bool sinks = (ni + gi) % 3 == 0;
                    attn_case_t c;
                    case_new(&c, n_tok, pos0, 2, groups[gi], hd, sinks);
                    c.a.window = ni % 3 == 1 ? 5 : ni % 3 == 2 ? 40 : 0;
                    c.a.softcap = (ni + hi + gi) % 2 ? 2.5f : 0.0f;
                    size_t per = be_cpu_attn_prefill_floats(BE_PF_ROWS, pos0 + n_tok, hd);
                    float *scratch = malloc(per * (size_t)nth * sizeof(float));
                    float *ref = malloc((size_t)n_tok * c.a.n_head * hd * sizeof(float));
                    bool took = be_cpu_attn_prefill(pool, lv, scratch, per, c.out, c.q, c.k,
                                                    c.v, &c.a);
                    CHECK_MSG(took, "%s: declined n_tok %d hd %d", be_simd_name(lv), n_tok, hd);
                    if (took) {
                        per_query(lv, &c, ref);
                        size_t n = (size_t)n_tok * c.a.n_head * hd;
                        bool same = !memcmp(ref, c.out, n * sizeof(float));
                        if (!same && differ++ < 3)
                            fprintf(stderr,
                                    "%s: n_tok %d pos0 %d group %d hd %d sinks %d window %d "
                                    "softcap %g: not the per-query bits\n",
                                    be_simd_name(lv), n_tok, pos0, groups[gi], hd, sinks,
                                    c.a.window, c.a.softcap);
                        int bad = check_double(&c, c.out, &worst);
                        if (bad)
                            fprintf(stderr, "%s: n_tok %d pos0 %d group %d hd %d: %d outside\n",
                                    be_simd_name(lv), n_tok, pos0, groups[gi], hd, bad);
                        outside += bad;
                        cases++;
                    }
                    free(scratch);
                    free(ref);
                    case_free(&c);
                }
    CHECK_MSG(differ == 0, "%s: %d of %d cases differ from the per-query path",
              be_simd_name(lv), differ, cases);
    CHECK_MSG(outside == 0, "%s: %d outputs outside the bound", be_simd_name(lv), outside);
    printf("%s (kernel %s): %d cases, %s, worst error %.3f of the bound\n",
           be_simd_name(lv), be_cpu_pf_kernel_at(lv)->name, cases,
           differ ? "NOT the per-query bits" : "per-query bits", worst);
}

/* A scratch too small for one token's rows, other cache types and a head
 * over BE_PF_MAX_HD are declined, with out untouched. */
static void check_declines(rn_threadpool_t *pool)
{
    attn_case_t c;
    case_new(&c, 8, 4, 2, 4, 64, false);
    size_t n = (size_t)8 * c.a.n_head * 64;
    for (size_t i = 0; i < n; i++)
        c.out[i] = 7.0f;
    size_t per = be_cpu_attn_prefill_floats(4, 12, 64);
    float *scratch = malloc(per * (size_t)rn_threadpool_size(pool) * sizeof(float));
    CHECK(!be_cpu_attn_prefill(pool, be_simd_detect(), scratch, per - 200, c.out, c.q, c.k,
                               c.v, &c.a));
    c.a.kv_type = CR_TYPE_Q8_0;
    CHECK(!be_cpu_attn_prefill(pool, be_simd_detect(), scratch, per, c.out, c.q, c.k, c.v,
                               &c.a));
    c.a.kv_type = CR_TYPE_F16;
    c.a.head_dim = BE_PF_MAX_HD + 8;
    CHECK(!be_cpu_attn_prefill(pool, be_simd_detect(), scratch, per, c.out, c.q, c.k, c.v,
                               &c.a));
    bool untouched = true;
    for (size_t i = 0; i < n; i++)
        untouched &= c.out[i] == 7.0f;
    CHECK(untouched);
    /* exactly enough for one token's rows (4 heads): taken */
    c.a.head_dim = 64;
    CHECK(be_cpu_attn_prefill(pool, be_simd_detect(), scratch, per, c.out, c.q, c.k, c.v,
                              &c.a));
    free(scratch);
    case_free(&c);
}

/* attention_ext with softcap and window on case c through the backend
 * with the tiled path and pairs on and with them off
 * (CORRAL_CPU_PREFILL_ATTN=0): the same bits, both within the bound. */
static void ext_on_off(be_backend_t *on, be_backend_t *off, attn_case_t *c, float softcap,
                       int window)
{
    cr_err_t err;
    const be_attn_t *a = &c->a;
    int hd = a->head_dim, group = a->n_head / a->n_head_kv;
    size_t n = (size_t)a->n_tok * a->n_head * hd;
    float *ref = malloc(n * sizeof(float));
    float *scratch = malloc(be_attention_ext_scratch(128, hd) * sizeof(float));
    CHECK_EQ_INT(on->ops->reserve(on, 64, 2048, 128, a->n_head, &err), CR_OK);
    CHECK_EQ_INT(off->ops->reserve(off, 64, 2048, 128, a->n_head, &err), CR_OK);
    be_ext_ops(on)->attention_ext(on, c->out, c->q, c->k, c->v, a, softcap, window, scratch);
    be_ext_ops(off)->attention_ext(off, ref, c->q, c->k, c->v, a, softcap, window, scratch);
    CHECK_MSG(!memcmp(ref, c->out, n * sizeof(float)),
              "backend ext: n_tok %d group %d hd %d pos0 %d window %d differs with "
              "CORRAL_CPU_PREFILL_ATTN=0", a->n_tok, group, hd, a->pos0, window);
    c->a.window = window;
    c->a.softcap = softcap;
    double worst = 0;
    CHECK_MSG(check_double(c, c->out, &worst) == 0 && check_double(c, ref, &worst) == 0,
              "backend ext: n_tok %d group %d hd %d pos0 %d outside the bound", a->n_tok,
              group, hd, a->pos0);
    free(scratch);
    free(ref);
}

/* The backend's attention op: the same bits with the tiled path switched
 * off (CORRAL_CPU_PREFILL_ATTN=0), for a prompt chunk after cached tokens
 * and a decode step. */
static void check_backend(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    be_backend_t *on = NULL, *off = NULL;
    unsetenv("CORRAL_CPU_PREFILL_ATTN");
    CHECK_EQ_INT(be_cpu_new(2, &on, &err), CR_OK);
    setenv("CORRAL_CPU_PREFILL_ATTN", "0", 1);
    CHECK_EQ_INT(be_cpu_new(2, &off, &err), CR_OK);
    unsetenv("CORRAL_CPU_PREFILL_ATTN");
    if (!on || !off)
        goto out;
    for (int i = 0; i < 3; i++) {
        int n_tok = i == 2 ? 1 : 48, pos0 = i == 0 ? 0 : 21;
        attn_case_t c;
        case_new(&c, n_tok, pos0, 8, 4, 64, false);
        size_t n = (size_t)n_tok * c.a.n_head * 64;
        float *ref = malloc(n * sizeof(float));
        CHECK_EQ_INT(on->ops->reserve(on, 64, 2048, 128, c.a.n_head, &err), CR_OK);
        CHECK_EQ_INT(off->ops->reserve(off, 64, 2048, 128, c.a.n_head, &err), CR_OK);
        on->ops->attention(on, c.out, c.q, c.k, c.v, &c.a);
        off->ops->attention(off, ref, c.q, c.k, c.v, &c.a);
        CHECK_MSG(!memcmp(ref, c.out, n * sizeof(float)),
                  "backend: n_tok %d pos0 %d differs with CORRAL_CPU_PREFILL_ATTN=0", n_tok,
                  pos0);
        free(ref);
        case_free(&c);
    }
    /* attention_ext: the window and soft-cap on both paths, same bits */
    for (int i = 0; i < 4; i++) {
        attn_case_t c;
        case_new(&c, i % 2 ? 1 : 48, i < 2 ? 21 : 70, 8, 4, 64, i == 3);
        ext_on_off(on, off, &c, i % 2 ? 0.0f : 3.0f, i < 2 ? 16 : 40);
        case_free(&c);
    }
    /* Groups under TILED_MIN_ROWS (Gemma's 2, and 3) decode per query: two
     * heads a task where the scratch is on (each K/V row read once for
     * both), one where it is off; the same bits, within the bound. hd 40
     * runs the dots' 8-wide steps; 2 kv heads on 2 threads leave groups of
     * 2 one head a task. */
    for (int i = 0; i < 8; i++) {
        int group = i % 2 ? 3 : 2, hd = i % 4 < 2 ? 256 : 40, n_kv = i == 6 ? 1 : 4;
        attn_case_t c;
        case_new(&c, 1, i < 2 ? 5 : i < 4 ? 21 : 70, n_kv, group, hd, i % 3 == 1);
        ext_on_off(on, off, &c, i == 5 || i == 7 ? 2.5f : 0.0f, i >= 4 ? 16 : 0);
        case_free(&c);
    }
    /* the tiled path's scratch is reserved only where it is on */
    uint64_t w_on, b_on, w_off, b_off;
    on->ops->memory_used(on, &w_on, &b_on);
    off->ops->memory_used(off, &w_off, &b_off);
    CHECK_MSG(b_on >= b_off + be_cpu_attn_prefill_floats(8, 128, 256) * sizeof(float) * 2,
              "backend: %" PRIu64 " buffer bytes on, %" PRIu64 " off", b_on, b_off);
out:
    if (on)
        on->ops->destroy(&on);
    if (off)
        off->ops->destroy(&off);
}

int main(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    rn_threadpool_t *pool = NULL;
    CHECK_EQ_INT(rn_threadpool_new(3, &pool, &err), CR_OK);
    if (!pool)
        return check_finish("attn_prefill");
    be_simd_t have = be_simd_detect();
    for (int l = BE_SIMD_SCALAR; l <= BE_SIMD_AVX512_VNNI; l++) {
        if (l > (int)have) {
            printf("%s: not tested (above this CPU's level or CORRAL_CPU_SIMD)\n",
                   be_simd_name((be_simd_t)l));
            continue;
        }
        check_level(pool, (be_simd_t)l);
    }
    check_declines(pool);
    check_backend();
    rn_threadpool_destroy(&pool);
    return check_finish("attn_prefill");
}
