/* test_sampler.c: every knob of the sampler on controlled logits, seeded
 * determinism, a frequency check against a known softmax, logprobs, and
 * hostile inputs (NaN/inf logits, bad sizes, bad params). */
#include "lib/prelude.h"
#include "services/runner/sampler.h"
#include "tests/unit/check.h"

#include <float.h>
#include <malloc.h>

/* A sampler with every truncation off and temperature 1: draws follow the
 * softmax of the (penalized) logits exactly. */
static rn_sampler_params_t plain_params(int64_t seed)
{
    rn_sampler_params_t p;
    rn_sampler_params_default(&p);
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.typical_p = 1.0f;
    p.seed = seed;
    return p;
}

static rn_sampler_t *make(int32_t n_vocab, const rn_sampler_params_t *p)
{
    cr_err_t err;
    rn_sampler_t *s = rn_sampler_new(n_vocab, 4096, p, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    return s;
}

static int32_t pick(rn_sampler_t *s, const float *logits)
{
    int32_t tok = -1;
    cr_err_t err;
    cr_status_t st = rn_sampler_pick(s, logits, &tok, &err);
    CHECK_MSG(st == CR_OK, "%s", err.msg);
    return tok;
}

/* The set of surviving tokens of the last pick as a bitmask (n <= 64). */
static uint64_t final_set(const rn_sampler_t *s)
{
    uint64_t m = 0;
    int32_t tok;
    for (size_t i = 0; rn_sampler_final_get(s, i, &tok, NULL); i++)
        m |= 1ULL << tok;
    return m;
}

static float final_prob(const rn_sampler_t *s, int32_t want)
{
    int32_t tok;
    float p;
    for (size_t i = 0; rn_sampler_final_get(s, i, &tok, &p); i++)
        if (tok == want)
            return p;
    return 0.0f;
}

/* Logits whose softmax is exactly probs (up to float rounding). */
static void logits_from_probs(const double *probs, float *logits, int n)
{
    for (int i = 0; i < n; i++)
        logits[i] = (float)log(probs[i]);
}

static void test_defaults_and_params(void)
{
    rn_sampler_params_t p;
    rn_sampler_params_default(&p);
    CHECK_NEAR(p.temperature, 0.8, 1e-7);
    CHECK_EQ_INT(p.top_k, 40);
    CHECK_NEAR(p.top_p, 0.9, 1e-7);
    CHECK_NEAR(p.min_p, 0.0, 0);
    CHECK_NEAR(p.typical_p, 1.0, 0);
    CHECK_EQ_INT(p.repeat_last_n, 64);
    CHECK_NEAR(p.repeat_penalty, 1.0, 0);
    CHECK_NEAR(p.presence_penalty, 0.0, 0);
    CHECK_NEAR(p.frequency_penalty, 0.0, 0);
    CHECK_EQ_INT(p.seed, -1);
    CHECK_EQ_INT(rn_sampler_params_check(&p, NULL), CR_OK);

    cr_err_t err;
    rn_sampler_params_t bad = p;
    bad.temperature = NAN;
    CHECK_EQ_INT(rn_sampler_params_check(&bad, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "temperature") != NULL);
    bad = p;
    bad.top_p = INFINITY;
    CHECK_EQ_INT(rn_sampler_params_check(&bad, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "top_p") != NULL);
    bad = p;
    bad.frequency_penalty = -INFINITY;
    CHECK_EQ_INT(rn_sampler_params_check(&bad, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "frequency_penalty") != NULL);
    bad = p;
    bad.repeat_penalty = 0.0f;
    CHECK_EQ_INT(rn_sampler_params_check(&bad, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "repeat_penalty") != NULL);
    bad = p;
    bad.repeat_last_n = -2;
    CHECK_EQ_INT(rn_sampler_params_check(&bad, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "repeat_last_n") != NULL);
    /* Values with a meaning are accepted. */
    bad = p;
    bad.temperature = -1.0f;
    bad.top_p = 5.0f;
    bad.min_p = -1.0f;
    bad.typical_p = 2.0f;
    bad.top_k = -7;
    bad.repeat_last_n = -1;
    CHECK_EQ_INT(rn_sampler_params_check(&bad, NULL), CR_OK);
}

static void test_new_bad_sizes(void)
{
    cr_err_t err;
    CHECK(rn_sampler_new(0, 16, NULL, &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_INVALID);
    CHECK(strstr(err.msg, "n_vocab") != NULL);
    CHECK(rn_sampler_new(-5, 16, NULL, &err) == NULL);
    CHECK(rn_sampler_new(RN_SAMPLER_MAX_VOCAB + 1, 16, NULL, &err) == NULL);
    CHECK(rn_sampler_new(10, 0, NULL, &err) == NULL);
    CHECK(strstr(err.msg, "n_ctx") != NULL);
    rn_sampler_params_t p;
    rn_sampler_params_default(&p);
    p.repeat_penalty = -1.0f;
    CHECK(rn_sampler_new(10, 16, &p, &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_INVALID);

    rn_sampler_t *s = rn_sampler_new(10, 16, NULL, &err); /* NULL = defaults */
    CHECK(s != NULL);
    CHECK_EQ_INT(rn_sampler_params(s)->top_k, 40);
    /* A bad reset keeps the old params. */
    CHECK_EQ_INT(rn_sampler_reset(s, &p, &err), CR_E_INVALID);
    CHECK_NEAR(rn_sampler_params(s)->repeat_penalty, 1.0, 0);
    CHECK(!rn_sampler_accept(s, -1));
    CHECK(!rn_sampler_accept(s, 10));
    CHECK(rn_sampler_accept(s, 9));
    rn_sampler_destroy(&s);
    CHECK(s == NULL);
    rn_sampler_destroy(&s); /* NULL is fine */
    rn_sampler_destroy(NULL);
}

static void test_greedy(void)
{
    rn_sampler_params_t p = plain_params(1);
    p.temperature = 0.0f;
    rn_sampler_t *s = make(6, &p);
    float l[6] = {0.1f, 2.0f, -3.0f, 2.0f, 1.9f, -INFINITY};
    for (int i = 0; i < 50; i++)
        CHECK_EQ_INT(pick(s, l), 1); /* tie 1 vs 3: lowest id */
    CHECK_EQ_INT(rn_sampler_final_count(s), 1);
    CHECK_NEAR(final_prob(s, 1), 1.0, 0);

    /* Negative temperature is greedy too; NaN never wins. */
    p.temperature = -0.5f;
    CHECK_EQ_INT(rn_sampler_reset(s, &p, NULL), CR_OK);
    float l2[6] = {NAN, 0.0f, NAN, 0.5f, -1.0f, 0.25f};
    CHECK_EQ_INT(pick(s, l2), 3);

    /* Greedy sees penalties: token 1 repeated loses to token 3. */
    p.temperature = 0.0f;
    p.repeat_penalty = 2.0f;
    CHECK_EQ_INT(rn_sampler_reset(s, &p, NULL), CR_OK);
    rn_sampler_accept(s, 1);
    CHECK_EQ_INT(pick(s, l), 3);
    rn_sampler_destroy(&s);
}

static void test_all_masked(void)
{
    rn_sampler_t *s = make(4, NULL);
    float l[4] = {-INFINITY, NAN, -INFINITY, NAN};
    int32_t tok = 77;
    cr_err_t err;
    CHECK_EQ_INT(rn_sampler_pick(s, l, &tok, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "-inf") != NULL);
    CHECK_EQ_INT(tok, 77);
    CHECK_EQ_INT(rn_sampler_final_count(s), 0);

    /* A huge repeat penalty on the only finite negative logit can push it to
     * -inf: that is "all masked" too, not a crash. */
    rn_sampler_params_t p = plain_params(3);
    p.presence_penalty = FLT_MAX;
    CHECK_EQ_INT(rn_sampler_reset(s, &p, NULL), CR_OK);
    rn_sampler_accept(s, 0);
    float l2[4] = {-FLT_MAX, -INFINITY, -INFINITY, -INFINITY};
    CHECK_EQ_INT(rn_sampler_pick(s, l2, &tok, &err), CR_E_INVALID);
    rn_sampler_destroy(&s);
}

static void test_plus_inf_logit(void)
{
    rn_sampler_params_t p = plain_params(9);
    rn_sampler_t *s = make(5, &p);
    float l[5] = {1.0f, INFINITY, 2.0f, 0.0f, 3.0f};
    for (int i = 0; i < 20; i++)
        CHECK_EQ_INT(pick(s, l), 1);
    p.temperature = 0.0f;
    rn_sampler_reset(s, &p, NULL);
    CHECK_EQ_INT(pick(s, l), 1);
    rn_sampler_destroy(&s);
}

static void test_top_k(void)
{
    rn_sampler_params_t p = plain_params(11);
    p.top_k = 1;
    p.temperature = 5.0f; /* flat: only top_k can explain argmax every time */
    enum { N = 300 };
    rn_sampler_t *s = make(N, &p);
    float l[N];
    rn_rng_t r;
    rn_rng_seed(&r, 5);
    for (int round = 0; round < 200; round++) {
        int best = 0;
        for (int i = 0; i < N; i++) {
            l[i] = (float)(rn_rng_uniform(&r) * 4.0 - 2.0);
            if (l[i] > l[best])
                best = i;
        }
        CHECK_EQ_INT(pick(s, l), best);
    }

    /* top_k = 3 keeps exactly the three best, renormalized. */
    p.top_k = 3;
    p.temperature = 1.0f;
    rn_sampler_reset(s, &p, NULL);
    double probs[6] = {0.05, 0.3, 0.1, 0.25, 0.2, 0.1};
    float l6[6];
    logits_from_probs(probs, l6, 6);
    rn_sampler_t *s6 = make(6, &p);
    pick(s6, l6);
    CHECK_EQ_INT(rn_sampler_final_count(s6), 3);
    CHECK_EQ_INT(final_set(s6), (1u << 1) | (1u << 3) | (1u << 4));
    CHECK_NEAR(final_prob(s6, 1), 0.3 / 0.75, 1e-6);
    CHECK_NEAR(final_prob(s6, 3), 0.25 / 0.75, 1e-6);
    CHECK_NEAR(final_prob(s6, 4), 0.2 / 0.75, 1e-6);

    /* top_k larger than the vocab, or <= 0, keeps everything. */
    p.top_k = 100;
    rn_sampler_reset(s6, &p, NULL);
    pick(s6, l6);
    CHECK_EQ_INT(rn_sampler_final_count(s6), 6);
    p.top_k = -1;
    rn_sampler_reset(s6, &p, NULL);
    pick(s6, l6);
    CHECK_EQ_INT(rn_sampler_final_count(s6), 6);
    rn_sampler_destroy(&s6);
    rn_sampler_destroy(&s);
}

static void test_top_p(void)
{
    /* probs 0.5, 0.25, 0.125, 0.0625, 0.0625 placed out of order. */
    double probs[5] = {0.125, 0.5, 0.0625, 0.25, 0.0625};
    float l[5];
    logits_from_probs(probs, l, 5);
    rn_sampler_params_t p = plain_params(21);
    p.top_p = 0.7f; /* 0.5 < 0.7 <= 0.75: keeps two */
    rn_sampler_t *s = make(5, &p);
    int hits[5] = {0};
    for (int i = 0; i < 500; i++)
        hits[pick(s, l)]++;
    CHECK_EQ_INT(rn_sampler_final_count(s), 2);
    CHECK_EQ_INT(final_set(s), (1u << 1) | (1u << 3));
    CHECK_EQ_INT(hits[0] + hits[2] + hits[4], 0);
    CHECK(hits[1] > 0 && hits[3] > 0);
    CHECK_NEAR(final_prob(s, 1), 2.0 / 3.0, 1e-6);

    p.top_p = 0.8f; /* 0.75 < 0.8 <= 0.875: three */
    rn_sampler_reset(s, &p, NULL);
    pick(s, l);
    CHECK_EQ_INT(final_set(s), (1u << 1) | (1u << 3) | (1u << 0));
    p.top_p = 0.9f; /* 0.875 < 0.9 <= 0.9375: four; the 0.0625 tie goes to id 2 */
    rn_sampler_reset(s, &p, NULL);
    pick(s, l);
    CHECK_EQ_INT(final_set(s), (1u << 1) | (1u << 3) | (1u << 0) | (1u << 2));
    p.top_p = 0.0f; /* keeps only the best */
    rn_sampler_reset(s, &p, NULL);
    CHECK_EQ_INT(pick(s, l), 1);
    CHECK_EQ_INT(rn_sampler_final_count(s), 1);
    p.top_p = 1.0f; /* off */
    rn_sampler_reset(s, &p, NULL);
    pick(s, l);
    CHECK_EQ_INT(rn_sampler_final_count(s), 5);
    rn_sampler_destroy(&s);
}

/* top_p over a big flat vocabulary exercises the full sort and the id
 * tie-break: exactly the 500 lowest ids survive. */
static void test_top_p_flat_large(void)
{
    enum { N = 1000 };
    float l[N];
    for (int i = 0; i < N; i++)
        l[i] = 0.0f;
    rn_sampler_params_t p = plain_params(2);
    p.top_p = 0.5f;
    rn_sampler_t *s = make(N, &p);
    pick(s, l);
    CHECK_EQ_INT(rn_sampler_final_count(s), 500);
    int32_t tok, max_tok = -1;
    for (size_t i = 0; rn_sampler_final_get(s, i, &tok, NULL); i++)
        max_tok = CR_MAX(max_tok, tok);
    CHECK_EQ_INT(max_tok, 499);
    rn_sampler_destroy(&s);
}

static int cmp_desc_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Random 50k vocabulary, top_p with the full sort, checked against qsort. */
static void test_top_p_random_large(void)
{
    enum { N = 50000 };
    float *l = malloc(N * sizeof *l), *sorted = malloc(N * sizeof *l);
    rn_rng_t r;
    rn_rng_seed(&r, 77);
    for (int i = 0; i < N; i++)
        l[i] = (float)(rn_rng_uniform(&r) * 12.0);
    memcpy(sorted, l, N * sizeof *l);
    qsort(sorted, N, sizeof *sorted, cmp_desc_float);
    double sum = 0.0;
    for (int i = 0; i < N; i++)
        sum += exp((double)sorted[i] - (double)sorted[0]);
    double cum = 0.0;
    int want = N;
    for (int i = 0; i < N; i++) {
        cum += exp((double)sorted[i] - (double)sorted[0]) / sum;
        if (cum >= 0.5) {
            want = i + 1;
            break;
        }
    }
    rn_sampler_params_t p = plain_params(4);
    p.top_p = 0.5f;
    rn_sampler_t *s = make(N, &p);
    pick(s, l);
    size_t got = rn_sampler_final_count(s);
    /* float vs double accumulation may move the cut by a token at most */
    CHECK_MSG(labs((long)got - want) <= 1, "got %zu want %d", got, want);
    float min_kept = INFINITY;
    int32_t tok;
    for (size_t i = 0; rn_sampler_final_get(s, i, &tok, NULL); i++)
        min_kept = CR_MIN(min_kept, l[tok]);
    CHECK(min_kept == sorted[got - 1]); /* the kept set is the best prefix */
    rn_sampler_destroy(&s);
    free(l);
    free(sorted);
}

/* A peaked 20k vocabulary: top_p is found by a partial selection (the
 * first 64 best) without sorting everything; the cut matches the exact one. */
static void test_top_p_peaked(void)
{
    enum { N = 20000 };
    float *l = malloc(N * sizeof *l);
    /* ids shuffled so the best are spread out: id (i * 7919) % N has logit -0.1 i */
    for (int i = 0; i < N; i++)
        l[(i * 7919) % N] = -0.1f * (float)i;
    double z = 0.0;
    for (int i = 0; i < N; i++)
        z += exp(-0.1 * i);
    double cum = 0.0;
    int want = 0;
    while (cum < 0.9)
        cum += exp(-0.1 * want++) / z;
    rn_sampler_params_t p = plain_params(8);
    p.top_p = 0.9f;
    rn_sampler_t *s = make(N, &p);
    pick(s, l);
    CHECK_EQ_INT(rn_sampler_final_count(s), want);
    int32_t tok;
    for (size_t i = 0; rn_sampler_final_get(s, i, &tok, NULL); i++)
        CHECK_MSG(tok == (int32_t)((i * 7919) % N), "rank %zu is id %d", i, tok);
    rn_sampler_destroy(&s);
    free(l);
}

static void test_min_p(void)
{
    double probs[5] = {0.0625, 0.25, 0.5, 0.125, 0.0625};
    float l[5];
    logits_from_probs(probs, l, 5);
    rn_sampler_params_t p = plain_params(31);
    p.min_p = 0.2f; /* threshold 0.1: keeps 0.5, 0.25, 0.125 */
    rn_sampler_t *s = make(5, &p);
    pick(s, l); /* unsorted path (top_k and top_p off) */
    CHECK_EQ_INT(final_set(s), (1u << 1) | (1u << 2) | (1u << 3));
    CHECK_NEAR(final_prob(s, 2), 0.5 / 0.875, 1e-6);
    p.top_k = 5; /* sorted path gives the same set */
    rn_sampler_reset(s, &p, NULL);
    pick(s, l);
    CHECK_EQ_INT(final_set(s), (1u << 1) | (1u << 2) | (1u << 3));
    p.min_p = 0.6f; /* threshold 0.3: only the best */
    rn_sampler_reset(s, &p, NULL);
    CHECK_EQ_INT(pick(s, l), 2);
    CHECK_EQ_INT(rn_sampler_final_count(s), 1);
    p.top_k = 0;
    rn_sampler_reset(s, &p, NULL);
    CHECK_EQ_INT(pick(s, l), 2);
    CHECK_EQ_INT(rn_sampler_final_count(s), 1);
    rn_sampler_destroy(&s);
}

static void test_typical_p(void)
{
    /* probs 0.5, 0.25, 0.125, 0.125: entropy 1.75 ln2; distances of the
     * surprisals (1, 2, 3, 3 ln2) from it: 0.75, 0.25, 1.25, 1.25 ln2. The
     * most typical token is id 1, then id 0. */
    double probs[4] = {0.5, 0.25, 0.125, 0.125};
    float l[4];
    logits_from_probs(probs, l, 4);
    rn_sampler_params_t p = plain_params(41);
    p.typical_p = 0.2f; /* 0.25 > 0.2 after the first: only id 1 */
    rn_sampler_t *s = make(4, &p);
    for (int i = 0; i < 100; i++)
        CHECK_EQ_INT(pick(s, l), 1);
    p.typical_p = 0.5f; /* 0.25 <= 0.5 < 0.75: ids 1 and 0 */
    rn_sampler_reset(s, &p, NULL);
    pick(s, l);
    CHECK_EQ_INT(final_set(s), (1u << 0) | (1u << 1));
    CHECK_NEAR(final_prob(s, 0), 2.0 / 3.0, 1e-6);
    p.typical_p = 0.8f; /* 0.75 <= 0.8 < 0.875: ids 1, 0 and, of the tie, 2 */
    rn_sampler_reset(s, &p, NULL);
    pick(s, l);
    CHECK_EQ_INT(final_set(s), 0x7u);
    p.typical_p = 0.9f; /* 0.875 < 0.9: all four */
    rn_sampler_reset(s, &p, NULL);
    pick(s, l);
    CHECK_EQ_INT(final_set(s), 0xFu);
    /* typical then top_p: top_p re-sorts the typical set by logit */
    p.typical_p = 0.5f;
    p.top_p = 0.5f; /* of {0: 2/3, 1: 1/3} only id 0 */
    rn_sampler_reset(s, &p, NULL);
    CHECK_EQ_INT(pick(s, l), 0);
    CHECK_EQ_INT(rn_sampler_final_count(s), 1);
    rn_sampler_destroy(&s);
}

static void test_temperature(void)
{
    float l[4] = {1.0f, 0.0f, -1.0f, 0.5f};
    rn_sampler_params_t p = plain_params(51);
    p.temperature = 0.5f;
    rn_sampler_t *s = make(4, &p);
    pick(s, l);
    double z = 0.0;
    for (int i = 0; i < 4; i++)
        z += exp(l[i] / 0.5);
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(final_prob(s, i), exp(l[i] / 0.5) / z, 1e-6);

    /* Near zero: effectively greedy. */
    p.temperature = 0.001f;
    rn_sampler_reset(s, &p, NULL);
    for (int i = 0; i < 200; i++)
        CHECK_EQ_INT(pick(s, l), 0);
    CHECK_NEAR(final_prob(s, 0), 1.0, 1e-9);

    /* Very high: nearly uniform, and every token gets drawn. */
    p.temperature = 1000.0f;
    rn_sampler_reset(s, &p, NULL);
    int hits[4] = {0};
    for (int i = 0; i < 2000; i++)
        hits[pick(s, l)]++;
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(final_prob(s, i), 0.25, 0.001);
        CHECK(hits[i] > 350); /* expected 500, sd ~19 */
    }
    rn_sampler_destroy(&s);
}

static void test_repeat_penalty(void)
{
    rn_sampler_params_t p = plain_params(61);
    p.repeat_penalty = 2.0f;
    p.repeat_last_n = 3;
    rn_sampler_t *s = make(6, &p);
    float l[6] = {3.0f, -1.5f, 0.5f, 0.0f, 4.0f, 1.0f};
    float out[6];
    rn_sampler_penalized(s, l, out); /* no history: unchanged */
    for (int i = 0; i < 6; i++)
        CHECK(out[i] == l[i]);

    rn_sampler_accept(s, 4); /* leaves the 3-token window below */
    rn_sampler_accept(s, 0);
    rn_sampler_accept(s, 1);
    rn_sampler_accept(s, 3);
    rn_sampler_penalized(s, l, out);
    CHECK(out[0] == 1.5f);  /* positive: divided */
    CHECK(out[1] == -3.0f); /* negative: multiplied */
    CHECK(out[2] == 0.5f);  /* not in history */
    CHECK(out[3] == 0.0f);  /* zero stays zero */
    CHECK(out[4] == 4.0f);  /* outside the window */
    CHECK(out[5] == 1.0f);

    /* The chance of a repeated token drops by the penalized softmax. */
    pick(s, l);
    double z = 0.0;
    for (int i = 0; i < 6; i++)
        z += exp(out[i]);
    CHECK_NEAR(final_prob(s, 0), exp(1.5) / z, 1e-6);
    double z0 = 0.0;
    for (int i = 0; i < 6; i++)
        z0 += exp(l[i]);
    CHECK(final_prob(s, 0) < exp(3.0) / z0);

    /* Occurrence count does not matter for repeat_penalty. */
    rn_sampler_reset(s, &p, NULL);
    rn_sampler_accept(s, 0);
    rn_sampler_accept(s, 0);
    rn_sampler_penalized(s, l, out);
    CHECK(out[0] == 1.5f);

    /* repeat_last_n 0: no penalties at all. */
    p.repeat_last_n = 0;
    rn_sampler_reset(s, &p, NULL);
    rn_sampler_accept(s, 0);
    rn_sampler_penalized(s, l, out);
    CHECK(out[0] == 3.0f);
    rn_sampler_destroy(&s);

    /* repeat_last_n -1 = n_ctx: with n_ctx 3 only the last 3 count. */
    p.repeat_last_n = -1;
    cr_err_t err;
    s = rn_sampler_new(6, 3, &p, &err);
    CHECK(s != NULL);
    rn_sampler_accept(s, 0);
    rn_sampler_accept(s, 2);
    rn_sampler_accept(s, 2);
    rn_sampler_penalized(s, l, out);
    CHECK(out[0] == 1.5f && out[2] == 0.25f);
    rn_sampler_accept(s, 5); /* 0 falls out of the 3-token ring */
    rn_sampler_penalized(s, l, out);
    CHECK(out[0] == 3.0f && out[2] == 0.25f && out[5] == 0.5f);
    for (int i = 0; i < 10; i++) /* many wraps keep counts exact */
        rn_sampler_accept(s, i % 2 ? 1 : 3);
    rn_sampler_penalized(s, l, out);
    CHECK(out[0] == 3.0f && out[2] == 0.5f && out[5] == 1.0f);
    CHECK(out[1] == -3.0f && out[3] == 0.0f);
    /* repeat_last_n beyond n_ctx is clamped to the ring. */
    p.repeat_last_n = 1000;
    rn_sampler_reset(s, &p, NULL);
    for (int i = 0; i < 5; i++)
        rn_sampler_accept(s, i);
    rn_sampler_penalized(s, l, out);
    CHECK(out[0] == 3.0f && out[1] == -1.5f && out[4] == 2.0f);
    rn_sampler_destroy(&s);
}

static void test_presence_frequency(void)
{
    rn_sampler_params_t p = plain_params(71);
    p.presence_penalty = 1.0f;
    p.frequency_penalty = 0.5f;
    rn_sampler_t *s = make(4, &p);
    float l[4] = {2.0f, 1.0f, -1.0f, 0.25f};
    rn_sampler_accept(s, 0);
    rn_sampler_accept(s, 0);
    rn_sampler_accept(s, 0);
    rn_sampler_accept(s, 2);
    float out[4];
    rn_sampler_penalized(s, l, out);
    CHECK(out[0] == 2.0f - 3 * 0.5f - 1.0f); /* -0.5 */
    CHECK(out[1] == 1.0f);
    CHECK(out[2] == -1.0f - 0.5f - 1.0f); /* -2.5 */
    CHECK(out[3] == 0.25f);

    /* Combined with repeat_penalty: divide first, then subtract. */
    p.repeat_penalty = 2.0f;
    rn_sampler_reset(s, &p, NULL);
    rn_sampler_accept(s, 0);
    rn_sampler_accept(s, 0);
    rn_sampler_accept(s, 2);
    rn_sampler_penalized(s, l, out);
    CHECK(out[0] == 2.0f / 2.0f - 2 * 0.5f - 1.0f); /* -1.0 */
    CHECK(out[2] == -1.0f * 2.0f - 0.5f - 1.0f);   /* -3.5 */

    /* Negative penalties boost. */
    p.repeat_penalty = 1.0f;
    p.presence_penalty = -1.0f;
    p.frequency_penalty = 0.0f;
    rn_sampler_reset(s, &p, NULL);
    rn_sampler_accept(s, 3);
    rn_sampler_penalized(s, l, out);
    CHECK(out[3] == 1.25f);
    rn_sampler_destroy(&s);
}

static void test_seed_determinism(void)
{
    enum { N = 50, DRAWS = 300 };
    float l[N];
    for (int i = 0; i < N; i++)
        l[i] = (float)(i % 7) * 0.1f;
    rn_sampler_params_t p;
    rn_sampler_params_default(&p); /* the real default chain */
    p.top_k = 0;
    p.top_p = 1.0f;
    p.seed = 1234;
    rn_sampler_t *a = make(N, &p), *b = make(N, &p);
    p.seed = 1235;
    rn_sampler_t *c = make(N, &p);
    int32_t first[DRAWS];
    int same_ab = 0, same_ac = 0;
    for (int i = 0; i < DRAWS; i++) {
        int32_t ta = pick(a, l), tb = pick(b, l), tc = pick(c, l);
        first[i] = ta;
        same_ab += ta == tb;
        same_ac += ta == tc;
        rn_sampler_accept(a, ta);
        rn_sampler_accept(b, tb);
        rn_sampler_accept(c, tc);
    }
    CHECK_EQ_INT(same_ab, DRAWS);
    CHECK(same_ac < DRAWS / 2); /* ~1/50 agree by chance */

    /* Reset with the same seed replays the same sequence. */
    p.seed = 1234;
    rn_sampler_reset(a, &p, NULL);
    int replay = 0;
    for (int i = 0; i < DRAWS; i++) {
        int32_t t = pick(a, l);
        replay += t == first[i];
        rn_sampler_accept(a, t);
    }
    CHECK_EQ_INT(replay, DRAWS);

    /* seed -1 comes from the OS: two samplers disagree somewhere. */
    p.seed = -1;
    rn_sampler_reset(a, &p, NULL);
    rn_sampler_reset(b, &p, NULL);
    int same_os = 0;
    for (int i = 0; i < DRAWS; i++)
        same_os += pick(a, l) == pick(b, l);
    CHECK(same_os < DRAWS);

    /* Seed 0 and negative seeds other than -1 are ordinary seeds. */
    p.seed = 0;
    rn_sampler_reset(a, &p, NULL);
    rn_sampler_reset(b, &p, NULL);
    int same0 = 0;
    for (int i = 0; i < DRAWS; i++)
        same0 += pick(a, l) == pick(b, l);
    CHECK_EQ_INT(same0, DRAWS);
    rn_sampler_destroy(&a);
    rn_sampler_destroy(&b);
    rn_sampler_destroy(&c);
}

static void test_rng(void)
{
    rn_rng_t r1, r2;
    rn_rng_seed(&r1, 42);
    rn_rng_seed(&r2, 42);
    for (int i = 0; i < 100; i++)
        CHECK(rn_rng_next(&r1) == rn_rng_next(&r2));
    rn_rng_seed(&r2, 43);
    CHECK(rn_rng_next(&r1) != rn_rng_next(&r2));
    /* Seed 0 must not give the all-zero state (xoshiro's fixed point). */
    rn_rng_seed(&r1, 0);
    CHECK(r1.s[0] | r1.s[1] | r1.s[2] | r1.s[3]);
    CHECK(r1.s[0] == 0xe220a8397b1dcdafULL); /* splitmix64(0), first output */
    double sum = 0.0, lo = 1.0, hi = 0.0;
    for (int i = 0; i < 100000; i++) {
        double u = rn_rng_uniform(&r1);
        sum += u;
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    CHECK(lo >= 0.0 && hi < 1.0);
    /* mean of 1e5 uniforms: sd = sqrt(1/12 / 1e5) = 0.00091; allow 5 sd */
    CHECK_NEAR(sum / 100000.0, 0.5, 0.0046);
}

/* 20000 draws from softmax = (0.4, 0.3, 0.2, 0.1). Each count is binomial
 * with sd = sqrt(n p (1-p)) (69.3, 64.8, 56.6, 42.4). We allow 5 sd per
 * bin: a correct sampler fails this with probability < 3e-6 per seed, while
 * a bias of 2 points of probability (400 draws) fails it surely. */
static void test_distribution(void)
{
    enum { DRAWS = 20000 };
    double probs[4] = {0.4, 0.3, 0.2, 0.1};
    float l[4];
    logits_from_probs(probs, l, 4);
    for (int64_t seed = 100; seed < 103; seed++) {
        rn_sampler_params_t p = plain_params(seed);
        rn_sampler_t *s = make(4, &p);
        int hits[4] = {0};
        for (int i = 0; i < DRAWS; i++)
            hits[pick(s, l)]++;
        for (int i = 0; i < 4; i++) {
            double expect = DRAWS * probs[i];
            double sd = sqrt(DRAWS * probs[i] * (1.0 - probs[i]));
            CHECK_MSG(fabs(hits[i] - expect) <= 5.0 * sd,
                      "seed %" PRId64 " token %d: %d draws, expected %.0f +- %.1f",
                      seed, i, hits[i], expect, 5.0 * sd);
        }
        rn_sampler_destroy(&s);
    }

    /* With top_k 2 the kept pair is renormalized: 4/7 and 3/7. */
    rn_sampler_params_t p = plain_params(7);
    p.top_k = 2;
    rn_sampler_t *s = make(4, &p);
    int hits[4] = {0};
    for (int i = 0; i < DRAWS; i++)
        hits[pick(s, l)]++;
    CHECK_EQ_INT(hits[2] + hits[3], 0);
    double p0 = 4.0 / 7.0, sd = sqrt(DRAWS * p0 * (1 - p0));
    CHECK_MSG(fabs(hits[0] - DRAWS * p0) <= 5.0 * sd, "%d", hits[0]);
    rn_sampler_destroy(&s);
}

static void test_logprobs(void)
{
    double probs[5] = {0.1, 0.4, 0.2, 0.2, 0.1};
    float l[5];
    logits_from_probs(probs, l, 5);
    l[4] = NAN; /* counts as -inf: the others renormalize over 0.9 */
    rn_logprob_t top[RN_LOGPROB_MAX_TOP + 5];
    float lp = 0.0f;
    size_t n = rn_logprobs_from_logits(l, 5, 2, &lp, top, 3);
    CHECK_EQ_INT(n, 3);
    CHECK_NEAR(lp, log(0.2 / 0.9), 1e-6);
    CHECK_EQ_INT(top[0].token, 1);
    CHECK_NEAR(top[0].logprob, log(0.4 / 0.9), 1e-6);
    CHECK_EQ_INT(top[1].token, 2); /* tie 2 vs 3: lower id first */
    CHECK_EQ_INT(top[2].token, 3);
    n = rn_logprobs_from_logits(l, 5, 4, &lp, top, 100); /* clamped */
    CHECK_EQ_INT(n, 4);
    CHECK(isinf(lp) && lp < 0);
    n = rn_logprobs_from_logits(l, 5, 0, &lp, top, 0);
    CHECK_EQ_INT(n, 0);
    CHECK_NEAR(lp, log(0.1 / 0.9), 1e-6);
    n = rn_logprobs_from_logits(l, 5, 99, &lp, NULL, 0); /* unknown token */
    CHECK(isinf(lp));
    float masked[3] = {-INFINITY, NAN, -INFINITY};
    CHECK_EQ_INT(rn_logprobs_from_logits(masked, 3, 0, &lp, top, 5), 0);
    CHECK_EQ_INT(rn_logprobs_from_logits(l, 0, 0, &lp, top, 5), 0);

    /* The final distribution after top_k 2 at temperature 1. */
    rn_sampler_params_t p = plain_params(81);
    p.top_k = 2;
    rn_sampler_t *s = make(5, &p);
    CHECK_EQ_INT(rn_sampler_final_logprobs(s, 1, &lp, top, 5), 0); /* no pick yet */
    pick(s, l);
    n = rn_sampler_final_logprobs(s, 1, &lp, top, 5);
    CHECK_EQ_INT(n, 2);
    CHECK_NEAR(lp, log(0.4 / 0.6), 1e-6);
    CHECK_EQ_INT(top[0].token, 1);
    CHECK_EQ_INT(top[1].token, 2); /* 2 and 3 tie in logit: top_k keeps id 2 */
    n = rn_sampler_final_logprobs(s, 0, &lp, top, 1);
    CHECK_EQ_INT(n, 1);
    CHECK(isinf(lp));
    rn_sampler_destroy(&s);
}

/* The token path allocates nothing: bytes in use by malloc do not change
 * across many picks (ASan replaces malloc, then this checks nothing). */
static void test_no_alloc_per_token(void)
{
    enum { N = 32000 };
    float *l = malloc(N * sizeof *l);
    rn_rng_t r;
    rn_rng_seed(&r, 3);
    for (int i = 0; i < N; i++)
        l[i] = (float)(rn_rng_uniform(&r) * 10.0);
    rn_sampler_params_t p;
    rn_sampler_params_default(&p);
    p.seed = 5;
    p.typical_p = 0.9f;
    p.min_p = 0.01f;
    p.repeat_penalty = 1.1f;
    p.presence_penalty = 0.1f;
    p.frequency_penalty = 0.1f;
    rn_sampler_t *s = make(N, &p);
    int32_t tok = 0;
    pick(s, l);
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < 100; i++) {
        rn_sampler_pick(s, l, &tok, NULL);
        rn_sampler_accept(s, tok);
    }
    p.top_k = 0; /* full sort path */
    rn_sampler_reset(s, &p, NULL);
    for (int i = 0; i < 20; i++) {
        rn_sampler_pick(s, l, &tok, NULL);
        rn_sampler_accept(s, tok);
    }
    struct mallinfo2 after = mallinfo2();
    CHECK_EQ_INT(after.uordblks, before.uordblks);
    CHECK_EQ_INT(after.hblkhd, before.hblkhd);
    rn_sampler_destroy(&s);
    free(l);
}

int main(void)
{
    test_defaults_and_params();
    test_new_bad_sizes();
    test_greedy();
    test_all_masked();
    test_plus_inf_logit();
    test_top_k();
    test_top_p();
    test_top_p_flat_large();
    test_top_p_random_large();
    test_top_p_peaked();
    test_min_p();
    test_typical_p();
    test_temperature();
    test_repeat_penalty();
    test_presence_frequency();
    test_seed_determinism();
    test_rng();
    test_distribution();
    test_logprobs();
    test_no_alloc_per_token();
    return check_finish("test_sampler");
}
