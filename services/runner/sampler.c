/* sampler.c: the sampling chain (see sampler.h for the contract).
 *
 * Candidates live in one array of n_vocab entries allocated at creation; each
 * stage shrinks `n` in place. `sorted` says whether the array is in
 * descending logit order (ties by lower id), which top_p and min_p use and
 * top_k and the full sort establish. */
#include "lib/prelude.h"
#include "services/runner/sampler.h"

#include "lib/options.h"

#include <float.h>
#include <math.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

typedef struct cand {
    int32_t id;
    float logit;
    float p;   /* probability after the last softmax */
    float key; /* scratch sort key (typical_p's shifted score) */
} cand_t;

struct rn_sampler {
    rn_sampler_params_t params;
    int32_t n_vocab;
    int32_t n_ctx;
    rn_rng_t rng;

    cand_t *cands; /* [n_vocab] candidates of the current pick */
    cand_t *tmp;   /* [n_vocab] scratch for typical_p */
    size_t n;      /* live candidates in cands */
    bool sorted;   /* cands[0..n) in descending logit order */
    bool picked;   /* a pick has happened since the last reset */

    int32_t *ring;   /* [n_ctx] the last n_ctx accepted tokens */
    size_t ring_head;  /* next write position */
    size_t ring_total; /* tokens stored, <= n_ctx */
    size_t window;     /* resolved repeat_last_n, <= n_ctx */
    int32_t *counts;   /* [n_vocab] occurrences inside the window */
};

/* ---- the generator: xoshiro256** seeded by splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rn_rng_seed(rn_rng_t *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rn_rng_next(rn_rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rn_rng_uniform(rn_rng_t *r)
{
    return (double)(rn_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

static uint64_t os_seed(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v)
        return v;
    /* getrandom can only fail on ancient kernels: mix what we have. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((uint64_t)ts.tv_sec * 1000000007ULL) ^ (uint64_t)ts.tv_nsec ^
           ((uint64_t)getpid() << 32);
}

/* ---- params ---- */

void rn_sampler_params_default(rn_sampler_params_t *p)
{
    p->temperature = 0.8f;
    p->top_k = 40;
    p->top_p = 0.9f;
    p->min_p = 0.0f;
    p->typical_p = 1.0f;
    p->repeat_last_n = 64;
    p->repeat_penalty = 1.0f;
    p->presence_penalty = 0.0f;
    p->frequency_penalty = 0.0f;
    p->seed = -1;
}

cr_status_t rn_sampler_params_check(const rn_sampler_params_t *p, cr_err_t *err)
{
    /* The rules are the option table's (lib/options.def), as the gateway
     * and create apply them to what they are given. */
    const struct {
        const char *name;
        double v;
    } vals[] = {
        {"temperature", p->temperature},
        {"top_p", p->top_p},
        {"min_p", p->min_p},
        {"typical_p", p->typical_p},
        {"repeat_penalty", p->repeat_penalty},
        {"presence_penalty", p->presence_penalty},
        {"frequency_penalty", p->frequency_penalty},
        {"repeat_last_n", p->repeat_last_n},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(vals); i++) {
        const cr_opt_def_t *d = cr_opt_find(vals[i].name);
        cr_status_t st = cr_opt_check_value(d ? d->check : CR_OPT_ANY, vals[i].name,
                                            vals[i].v, err);
        if (st)
            return st;
    }
    return CR_OK;
}

/* ---- construction ---- */

static size_t resolve_window(const rn_sampler_params_t *p, int32_t n_ctx)
{
    if (p->repeat_last_n < 0)
        return (size_t)n_ctx;
    return (size_t)CR_MIN(p->repeat_last_n, n_ctx);
}

/* Token at position i of the history, oldest first. */
static int32_t ring_at(const rn_sampler_t *s, size_t i)
{
    size_t cap = (size_t)s->n_ctx;
    return s->ring[(s->ring_head + cap - s->ring_total + i) % cap];
}

static void clear_history(rn_sampler_t *s)
{
    size_t w = CR_MIN(s->window, s->ring_total);
    for (size_t i = s->ring_total - w; i < s->ring_total; i++)
        s->counts[ring_at(s, i)] = 0;
    s->ring_head = 0;
    s->ring_total = 0;
}

static void apply_params(rn_sampler_t *s, const rn_sampler_params_t *p)
{
    s->params = *p;
    s->window = resolve_window(p, s->n_ctx);
    rn_rng_seed(&s->rng, p->seed == -1 ? os_seed() : (uint64_t)p->seed);
    s->n = 0;
    s->sorted = false;
    s->picked = false;
}

rn_sampler_t *rn_sampler_new(int32_t n_vocab, int32_t n_ctx,
                             const rn_sampler_params_t *params, cr_err_t *err)
{
    if (n_vocab <= 0 || n_vocab > RN_SAMPLER_MAX_VOCAB) {
        cr_err_set(err, CR_E_INVALID, "sampler: n_vocab %" PRId32 " out of range 1..%d",
                   n_vocab, RN_SAMPLER_MAX_VOCAB);
        return NULL;
    }
    if (n_ctx <= 0 || n_ctx > RN_SAMPLER_MAX_HISTORY) {
        cr_err_set(err, CR_E_INVALID, "sampler: n_ctx %" PRId32 " out of range 1..%d",
                   n_ctx, RN_SAMPLER_MAX_HISTORY);
        return NULL;
    }
    rn_sampler_params_t defaults;
    if (!params) {
        rn_sampler_params_default(&defaults);
        params = &defaults;
    }
    if (rn_sampler_params_check(params, err))
        return NULL;

    rn_sampler_t *s = calloc(1, sizeof *s);
    if (!s)
        goto fail_nomem;
    s->n_vocab = n_vocab;
    s->n_ctx = n_ctx;
    s->cands = malloc((size_t)n_vocab * sizeof *s->cands);
    s->tmp = malloc((size_t)n_vocab * sizeof *s->tmp);
    s->counts = calloc((size_t)n_vocab, sizeof *s->counts);
    s->ring = malloc((size_t)n_ctx * sizeof *s->ring);
    if (!s->cands || !s->tmp || !s->counts || !s->ring)
        goto fail_nomem;
    apply_params(s, params);
    return s;

fail_nomem:
    rn_sampler_destroy(&s);
    cr_err_set(err, CR_E_NOMEM, "sampler: out of memory for %" PRId32 " tokens", n_vocab);
    return NULL;
}

void rn_sampler_destroy(rn_sampler_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_sampler_t *s = *self_p;
    free(s->cands);
    free(s->tmp);
    free(s->counts);
    free(s->ring);
    free(s);
    *self_p = NULL;
}

cr_status_t rn_sampler_reset(rn_sampler_t *s, const rn_sampler_params_t *params,
                             cr_err_t *err)
{
    rn_sampler_params_t defaults;
    if (!params) {
        rn_sampler_params_default(&defaults);
        params = &defaults;
    }
    cr_status_t st = rn_sampler_params_check(params, err);
    if (st)
        return st;
    clear_history(s);
    apply_params(s, params);
    return CR_OK;
}

const rn_sampler_params_t *rn_sampler_params(const rn_sampler_t *s)
{
    return &s->params;
}

bool rn_sampler_accept(rn_sampler_t *s, int32_t token)
{
    if (token < 0 || token >= s->n_vocab)
        return false;
    size_t cap = (size_t)s->n_ctx;
    if (s->window > 0) {
        /* The token leaving the window is the window-th newest. */
        if (s->ring_total >= s->window)
            s->counts[ring_at(s, s->ring_total - s->window)]--;
        s->counts[token]++;
    }
    s->ring[s->ring_head] = token;
    s->ring_head = (s->ring_head + 1) % cap;
    if (s->ring_total < cap)
        s->ring_total++;
    return true;
}

/* ---- ordering ---- */

/* The one order every sort uses: descending logit, ties by lower id.
 * typical_p sorts by its own key by parking that key in `logit` for the
 * sort (see stage_typical). One comparator means it is inlined. */
static inline bool before(const cand_t *a, const cand_t *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static inline void swap_cand(cand_t *a, cand_t *b)
{
    cand_t t = *a;
    *a = *b;
    *b = t;
}

/* Sift-down in a heap whose root is the element that comes LAST in the
 * order (so the heap holds the best elements seen). */
static void sift_down(cand_t *c, size_t n, size_t i)
{
    for (;;) {
        size_t l = 2 * i + 1, worst = i;
        if (l < n && before(&c[worst], &c[l]))
            worst = l;
        if (l + 1 < n && before(&c[worst], &c[l + 1]))
            worst = l + 1;
        if (worst == i)
            return;
        swap_cand(&c[i], &c[worst]);
        i = worst;
    }
}

/* Turns a heap of n (worst at the root) into best-first order. */
static void heap_pop_all(cand_t *c, size_t n)
{
    for (size_t end = n; end-- > 1;) {
        swap_cand(&c[0], &c[end]);
        sift_down(c, end, 0);
    }
}

static void heap_sort(cand_t *c, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(c, n, i);
    heap_pop_all(c, n);
}

static void insertion_sort(cand_t *c, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        cand_t x = c[i];
        size_t j = i;
        while (j > 0 && before(&x, &c[j - 1])) {
            c[j] = c[j - 1];
            j--;
        }
        c[j] = x;
    }
}

/* Introsort: quicksort with median-of-three, recursing on the smaller side,
 * heapsort past a depth limit, insertion sort for short runs. No allocation. */
static void intro_sort(cand_t *c, size_t n, int depth)
{
    while (n > 16) {
        if (depth-- == 0) {
            heap_sort(c, n);
            return;
        }
        size_t mid = n / 2;
        if (before(&c[mid], &c[0]))
            swap_cand(&c[mid], &c[0]);
        if (before(&c[n - 1], &c[0]))
            swap_cand(&c[n - 1], &c[0]);
        if (before(&c[n - 1], &c[mid]))
            swap_cand(&c[n - 1], &c[mid]);
        cand_t pivot = c[mid];
        size_t i = 0, j = n - 1;
        for (;;) {
            while (before(&c[i], &pivot))
                i++;
            while (before(&pivot, &c[j]))
                j--;
            if (i >= j)
                break;
            swap_cand(&c[i], &c[j]);
            i++;
            j--;
        }
        /* [0, j] and [j+1, n) */
        size_t left = j + 1, right = n - left;
        if (left < right) {
            intro_sort(c, left, depth);
            c += left;
            n = right;
        } else {
            intro_sort(c + left, right, depth);
            n = left;
        }
    }
    insertion_sort(c, n);
}

static void sort_cands(cand_t *c, size_t n)
{
    int depth = 0;
    for (size_t m = n; m > 1; m >>= 1)
        depth += 2;
    intro_sort(c, n, depth);
}

/* Moves the k best of c[0..n) to c[0..k), best first, keeping c a
 * permutation of what it held: O(n log k). 0 < k <= n. */
static void select_top(cand_t *c, size_t n, size_t k)
{
    for (size_t i = k / 2; i-- > 0;)
        sift_down(c, k, i);
    for (size_t i = k; i < n; i++) {
        if (before(&c[i], &c[0])) {
            swap_cand(&c[0], &c[i]);
            sift_down(c, k, 0);
        }
    }
    heap_pop_all(c, k);
}

static void sort_by_logit(rn_sampler_t *s)
{
    if (!s->sorted) {
        sort_cands(s->cands, s->n);
        s->sorted = true;
    }
}

/* ---- stages ---- */

static bool penalties_active(const rn_sampler_t *s)
{
    const rn_sampler_params_t *p = &s->params;
    return s->window > 0 && s->ring_total > 0 &&
           (p->repeat_penalty != 1.0f || p->presence_penalty != 0.0f ||
            p->frequency_penalty != 0.0f);
}

static inline float clean_logit(float l)
{
    if (isnan(l))
        return -INFINITY;
    if (l == INFINITY)
        return FLT_MAX;
    return l;
}

/* llama.cpp's penalty arithmetic for a token seen `count` times. */
static float penalize(const rn_sampler_params_t *p, float l, int32_t count)
{
    if (l <= 0.0f)
        l *= p->repeat_penalty;
    else
        l /= p->repeat_penalty;
    return l - (float)count * p->frequency_penalty - p->presence_penalty;
}

/* The logit of token i after penalties; -inf for a masked token. */
static inline float penalized(const rn_sampler_t *s, const float *logits, int32_t i, bool pen)
{
    float l = clean_logit(logits[i]);
    if (pen && l != -INFINITY && s->counts[i] > 0)
        l = penalize(&s->params, l, s->counts[i]);
    return l;
}

void rn_sampler_penalized(const rn_sampler_t *s, const float *logits, float *out)
{
    bool pen = penalties_active(s);
    for (int32_t i = 0; i < s->n_vocab; i++)
        out[i] = penalized(s, logits, i, pen);
}

/* Penalties, then top_k, in one pass: candidates come from the penalized
 * logits (masked ones dropped) and, when top_k cuts, only the k best are
 * kept as they stream by (a bounded heap), so the common path writes k
 * entries instead of n_vocab. */
static void stage_penalties_top_k(rn_sampler_t *s, const float *logits)
{
    bool pen = penalties_active(s);
    int32_t k = s->params.top_k;
    size_t cap = k > 0 && k < s->n_vocab ? (size_t)k : (size_t)s->n_vocab;
    bool cutting = cap < (size_t)s->n_vocab;
    cand_t *c = s->cands;
    size_t n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = penalized(s, logits, i, pen);
        if (l == -INFINITY)
            continue;
        cand_t x = {.id = i, .logit = l, .p = 0.0f, .key = 0.0f};
        if (n < cap) {
            c[n++] = x;
            if (cutting && n == cap)
                for (size_t j = cap / 2; j-- > 0;)
                    sift_down(c, cap, j);
        } else if (before(&x, &c[0])) {
            c[0] = x;
            sift_down(c, cap, 0);
        }
    }
    s->n = n;
    s->sorted = false;
    if (cutting && n == cap) {
        heap_pop_all(c, n);
        s->sorted = true;
    }
}

/* Softmax over the live candidates (any order). */
static void softmax(rn_sampler_t *s)
{
    cand_t *c = s->cands;
    float max = -INFINITY;
    if (s->sorted) {
        max = c[0].logit;
    } else {
        for (size_t i = 0; i < s->n; i++)
            max = c[i].logit > max ? c[i].logit : max;
    }
    double sum = 0.0;
    for (size_t i = 0; i < s->n; i++) {
        double e = exp((double)c[i].logit - (double)max);
        c[i].p = (float)e;
        sum += e;
    }
    for (size_t i = 0; i < s->n; i++)
        c[i].p = (float)((double)c[i].p / sum);
}

/* Locally typical sampling (Meister et al.), as llama.cpp implements it:
 * keep the tokens whose surprisal is closest to the entropy until their
 * probability mass exceeds typical_p. Equal distances keep the lower id
 * first. */
static void stage_typical(rn_sampler_t *s)
{
    float tp = s->params.typical_p;
    if (tp >= 1.0f || s->n <= 1)
        return;
    softmax(s);
    cand_t *c = s->cands;
    double entropy = 0.0;
    for (size_t i = 0; i < s->n; i++)
        if (c[i].p > 0.0f)
            entropy -= (double)c[i].p * log((double)c[i].p);
    /* Sort ascending by distance: park the logit in `key` and sort on
     * -distance with the common (descending) order. */
    for (size_t i = 0; i < s->n; i++) {
        double surprisal = c[i].p > 0.0f ? -log((double)c[i].p) : INFINITY;
        s->tmp[i] = c[i];
        s->tmp[i].key = c[i].logit;
        s->tmp[i].logit = -(float)fabs(surprisal - entropy);
    }
    sort_cands(s->tmp, s->n);
    double cum = 0.0;
    size_t last = s->n;
    for (size_t i = 0; i < s->n; i++) {
        cum += (double)s->tmp[i].p;
        if (cum > (double)tp) { /* min_keep is 1: i + 1 >= 1 always */
            last = i + 1;
            break;
        }
    }
    for (size_t i = 0; i < last; i++) {
        c[i] = s->tmp[i];
        c[i].logit = s->tmp[i].key;
        c[i].key = 0.0f;
    }
    s->n = last;
    s->sorted = false;
}

/* Cuts the best-first c[0..n) where the mass first reaches tp; returns
 * false if it never does within n. */
static bool cut_mass(rn_sampler_t *s, size_t n, double tp)
{
    double cum = 0.0;
    for (size_t i = 0; i < n; i++) {
        cum += (double)s->cands[i].p;
        if (cum >= tp) {
            s->n = i + 1;
            return true;
        }
    }
    return false;
}

/* Nucleus sampling: the smallest best-first prefix whose mass reaches top_p.
 * Unsorted candidates are not fully sorted at first: growing partial
 * selections find the prefix when the distribution is peaked, as it nearly
 * always is; a flat one falls back to the full sort. */
static void stage_top_p(rn_sampler_t *s)
{
    float tp = s->params.top_p;
    if (tp >= 1.0f || s->n <= 1)
        return;
    softmax(s);
    if (!s->sorted) {
        for (size_t k = 64; k < s->n / 4; k *= 8) {
            select_top(s->cands, s->n, k);
            if (cut_mass(s, k, (double)tp)) {
                s->sorted = true;
                return;
            }
        }
        sort_by_logit(s);
    }
    cut_mass(s, s->n, (double)tp);
}

/* min_p: drop tokens whose probability is below min_p times the best one's,
 * i.e. whose logit is below max + log(min_p). */
static void stage_min_p(rn_sampler_t *s)
{
    float mp = s->params.min_p;
    if (mp <= 0.0f || s->n <= 1)
        return;
    cand_t *c = s->cands;
    if (s->sorted) {
        float min_logit = c[0].logit + logf(mp);
        size_t i = 1;
        while (i < s->n && c[i].logit >= min_logit)
            i++;
        s->n = i;
        return;
    }
    float max = -INFINITY;
    for (size_t i = 0; i < s->n; i++)
        max = c[i].logit > max ? c[i].logit : max;
    float min_logit = max + logf(mp);
    size_t kept = 0;
    for (size_t i = 0; i < s->n; i++)
        if (c[i].logit >= min_logit)
            c[kept++] = c[i];
    s->n = kept; /* the max itself always survives, so kept >= 1 */
}

/* Divides by the temperature. The max is subtracted first (softmax does not
 * care) so a tiny temperature underflows the losers to -inf instead of
 * overflowing the winner to +inf. */
static void stage_temperature(rn_sampler_t *s)
{
    float t = s->params.temperature;
    if (t == 1.0f)
        return;
    float max = -INFINITY;
    for (size_t i = 0; i < s->n; i++)
        max = s->cands[i].logit > max ? s->cands[i].logit : max;
    for (size_t i = 0; i < s->n; i++)
        s->cands[i].logit = (float)(((double)s->cands[i].logit - (double)max) / (double)t);
}

/* The stages after penalties and top_k, in order, ending with the
 * candidates' final probabilities. */
static void stage_rest(rn_sampler_t *s)
{
    stage_typical(s);
    stage_top_p(s);
    stage_min_p(s);
    stage_temperature(s);
    softmax(s);
}

/* Draws one candidate by its probability. */
static int32_t draw(rn_sampler_t *s)
{
    double u = rn_rng_uniform(&s->rng);
    double cum = 0.0;
    for (size_t i = 0; i < s->n; i++) {
        cum += (double)s->cands[i].p;
        if (u < cum)
            return s->cands[i].id;
    }
    /* Rounding left cum a hair under 1: take the last with mass. */
    for (size_t i = s->n; i-- > 0;)
        if (s->cands[i].p > 0.0f)
            return s->cands[i].id;
    return s->cands[0].id;
}

/* Greedy: the best penalized logit, lowest id on ties, without building
 * the candidate list. False when every token is masked. */
static bool pick_greedy(rn_sampler_t *s, const float *logits)
{
    bool pen = penalties_active(s);
    int32_t best = -1;
    float best_l = -INFINITY;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = penalized(s, logits, i, pen);
        if (l != -INFINITY && (best < 0 || l > best_l)) {
            best = i;
            best_l = l;
        }
    }
    if (best < 0)
        return false;
    s->cands[0] = (cand_t){.id = best, .logit = best_l, .p = 1.0f, .key = 0.0f};
    s->n = 1;
    s->sorted = true;
    return true;
}

cr_status_t rn_sampler_pick(rn_sampler_t *s, const float *logits,
                            int32_t *token_out, cr_err_t *err)
{
    bool any;
    if (s->params.temperature <= 0.0f) {
        any = pick_greedy(s, logits);
    } else {
        stage_penalties_top_k(s, logits);
        any = s->n > 0;
    }
    if (!any) {
        s->n = 0;
        s->picked = false;
        return cr_err_set(err, CR_E_INVALID,
                          "sampler: every logit is -inf or NaN (%" PRId32 " tokens)",
                          s->n_vocab);
    }
    s->picked = true;
    if (s->params.temperature <= 0.0f) {
        *token_out = s->cands[0].id;
        return CR_OK;
    }
    stage_rest(s);
    *token_out = draw(s);
    return CR_OK;
}

/* The common head of both draft checks. Greedy (temperature 0) decides
 * outright: the draft is kept iff it is the greedy pick. Otherwise it leaves
 * s->cands as the final sampling distribution the draft is checked against. */
static cr_status_t draft_head(rn_sampler_t *s, const float *logits, int32_t draft,
                              int32_t *token_out, bool *accepted, cr_err_t *err)
{
    *accepted = false;
    if (s->params.temperature <= 0.0f) {
        cr_status_t st = rn_sampler_pick(s, logits, token_out, err);
        *accepted = !st && *token_out == draft;
        return st;
    }
    stage_penalties_top_k(s, logits);
    if (s->n == 0) {
        s->picked = false;
        return cr_err_set(err, CR_E_INVALID,
                          "sampler: every logit is -inf or NaN (%" PRId32 " tokens)",
                          s->n_vocab);
    }
    s->picked = true;
    stage_rest(s);
    return CR_OK;
}

/* Draws from the candidates without token `skip` (whose probability is
 * p_skip < 1), the rest renormalised: u scaled to the mass left. */
static int32_t draw_without(rn_sampler_t *s, int32_t skip, double p_skip)
{
    double u = rn_rng_uniform(&s->rng) * (1.0 - p_skip);
    double cum = 0.0;
    int32_t last = -1;
    for (size_t i = 0; i < s->n; i++) {
        if (s->cands[i].id == skip || !(s->cands[i].p > 0.0f))
            continue;
        last = s->cands[i].id;
        cum += (double)s->cands[i].p;
        if (u < cum)
            return last;
    }
    return last; /* rounding left cum a hair under the mass */
}

cr_status_t rn_sampler_pick_draft(rn_sampler_t *s, const float *logits, int32_t draft,
                                  int32_t *token_out, bool *accepted, cr_err_t *err)
{
    cr_status_t st = draft_head(s, logits, draft, token_out, accepted, err);
    if (st || s->params.temperature <= 0.0f)
        return st;
    double p_draft = 0.0;
    for (size_t i = 0; i < s->n; i++)
        if (s->cands[i].id == draft)
            p_draft = (double)s->cands[i].p;
    /* accept with probability min(1, p/q) = p(draft) for q a point mass */
    if (p_draft > 0.0 && rn_rng_uniform(&s->rng) < p_draft) {
        *token_out = draft;
        *accepted = true;
        return CR_OK;
    }
    /* reject: norm(max(0, p - q)) is p without the draft, renormalised */
    int32_t t = p_draft < 1.0 ? draw_without(s, draft, p_draft) : -1;
    *token_out = t >= 0 ? t : draft; /* only the draft had mass */
    *accepted = t < 0;
    return CR_OK;
}

/* Draws from norm(max(0, p - q)) over the candidates (tokens outside them
 * have p 0, so nothing there); -1 when that mass is 0. */
static int32_t draw_residual(rn_sampler_t *s, const float *q)
{
    double z = 0.0;
    for (size_t i = 0; i < s->n; i++)
        z += fmax(0.0, (double)s->cands[i].p - (double)q[s->cands[i].id]);
    if (!(z > 0.0))
        return -1;
    double u = rn_rng_uniform(&s->rng) * z, cum = 0.0;
    int32_t last = -1;
    for (size_t i = 0; i < s->n; i++) {
        double r = (double)s->cands[i].p - (double)q[s->cands[i].id];
        if (!(r > 0.0))
            continue;
        last = s->cands[i].id;
        cum += r;
        if (u < cum)
            return last;
    }
    return last; /* rounding left cum a hair under z */
}

cr_status_t rn_sampler_pick_draft_q(rn_sampler_t *s, const float *logits, int32_t draft,
                                    const float *q, int32_t *token_out, bool *accepted,
                                    cr_err_t *err)
{
    cr_status_t st = draft_head(s, logits, draft, token_out, accepted, err);
    if (st || s->params.temperature <= 0.0f)
        return st;
    bool in_vocab = draft >= 0 && draft < s->n_vocab;
    double p_draft = 0.0, q_draft = in_vocab ? (double)q[draft] : 0.0;
    for (size_t i = 0; in_vocab && i < s->n; i++)
        if (s->cands[i].id == draft)
            p_draft = (double)s->cands[i].p;
    if (q_draft > 0.0 && p_draft > 0.0 &&
        (p_draft >= q_draft || rn_rng_uniform(&s->rng) < p_draft / q_draft)) {
        *token_out = draft;
        *accepted = true;
        return CR_OK;
    }
    int32_t t = draw_residual(s, q);
    *token_out = t >= 0 ? t : draw(s);
    *accepted = *token_out == draft;
    return CR_OK;
}

/* ---- final distribution and logprobs ---- */

size_t rn_sampler_final_count(const rn_sampler_t *s)
{
    return s->picked ? s->n : 0;
}

bool rn_sampler_final_get(const rn_sampler_t *s, size_t i, int32_t *token, float *prob)
{
    if (!s->picked || i >= s->n)
        return false;
    if (token)
        *token = s->cands[i].id;
    if (prob)
        *prob = s->cands[i].p;
    return true;
}

/* Inserts (id, value) into top[0..*n) kept best-first with at most cap
 * entries; ties keep the earlier (lower) id first because ids arrive in
 * ascending order. */
static void top_insert(rn_logprob_t *top, size_t *n, size_t cap, int32_t id, float v)
{
    if (cap == 0)
        return;
    if (*n == cap && !(v > top[cap - 1].logprob))
        return;
    size_t i = *n < cap ? (*n)++ : cap - 1;
    while (i > 0 && v > top[i - 1].logprob) {
        top[i] = top[i - 1];
        i--;
    }
    top[i].token = id;
    top[i].logprob = v;
}

size_t rn_sampler_final_logprobs(const rn_sampler_t *s, int32_t token,
                                 float *token_logprob, rn_logprob_t *top,
                                 size_t top_n)
{
    top_n = CR_MIN(top_n, (size_t)RN_LOGPROB_MAX_TOP);
    if (token_logprob)
        *token_logprob = -INFINITY;
    if (!s->picked)
        return 0;
    /* Candidates may be in any order; collect in id order for the tie rule
     * by scanning ids through a small selection instead of sorting. */
    size_t n_top = 0;
    for (size_t i = 0; i < s->n; i++) {
        const cand_t *c = &s->cands[i];
        float lp = c->p > 0.0f ? logf(c->p) : -INFINITY;
        if (c->id == token && token_logprob)
            *token_logprob = lp;
        if (lp == -INFINITY)
            continue;
        /* Equal values: keep lower id first, whatever the candidate order. */
        size_t j = n_top;
        if (n_top == top_n) {
            if (!top_n)
                continue;
            const rn_logprob_t *w = &top[top_n - 1];
            if (lp < w->logprob || (lp == w->logprob && c->id > w->token))
                continue;
            j = top_n - 1;
        } else {
            n_top++;
        }
        while (j > 0 && (lp > top[j - 1].logprob ||
                         (lp == top[j - 1].logprob && c->id < top[j - 1].token))) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].token = c->id;
        top[j].logprob = lp;
    }
    return n_top;
}

size_t rn_logprobs_from_logits(const float *logits, int32_t n_vocab,
                               int32_t token, float *token_logprob,
                               rn_logprob_t *top, size_t top_n)
{
    top_n = CR_MIN(top_n, (size_t)RN_LOGPROB_MAX_TOP);
    if (token_logprob)
        *token_logprob = -INFINITY;
    if (n_vocab <= 0)
        return 0;
    float max = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = clean_logit(logits[i]);
        max = l > max ? l : max;
    }
    if (max == -INFINITY)
        return 0;
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; i++)
        sum += exp((double)clean_logit(logits[i]) - (double)max);
    double lse = (double)max + log(sum);
    size_t n_top = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = clean_logit(logits[i]);
        if (l == -INFINITY)
            continue;
        float lp = (float)((double)l - lse);
        if (i == token && token_logprob)
            *token_logprob = lp;
        top_insert(top, &n_top, top_n, i, lp);
    }
    return n_top;
}
