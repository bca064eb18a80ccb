/* test_spec_draft.c: speculative decoding with a draft model.
 *
 * - rn_sampler_pick_draft_q (the rule min(1, p/q) for a draft drawn from
 *   a full q) on controlled logits: the tokens it returns are distributed
 *   as p by a chi-square test, for q close to p, far from it, with mass
 *   where p has none (top_k) and a point mass; its acceptance rate is
 *   sum(min(p, q)).
 * - rn_spec_draft_new refuses a draft whose vocabulary size differs.
 * - rn_spec_draft_propose (alone and batched over sequences): the drafts are the draft model's greedy
 *   continuation (token-by-token argmax of a fresh context), and after a
 *   rejection (the sequence diverges from what the draft cache holds) the
 *   cache rolls back to the common prefix and proposes what a context that
 *   never saw the rejected drafts proposes.
 * - the engine: greedy answers with a draft model equal those without it
 *   (a synthetic Q8_0 target with its own weights quantized to Q4_0 as the
 *   draft, llama and qwen2, several prompts, one slot and three at once;
 *   the target as its own draft, where every draft must be accepted,
 *   greedy and sampled (q = p); stories260K-Q8_0 with
 *   stories260K-Q4_0 from the shared testdata when present), with drafts
 *   both accepted and rejected; the draft model wins over draft_ngram;
 *   sampled decoding runs; draft_num_predict 0 loads no draft and bad
 *   values are refused at load. */
#include "lib/prelude.h"

#include <math.h>
#include <unistd.h>

#include "lib/buf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/engine.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/sampler.h"
#include "services/runner/spec_draft.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_capture.h"
#include "tests/unit/engine_load.h"
#include "tests/unit/sampler_dist.h"

static be_backend_t *be_g;

/* ---- the accept/reject rule with a full q ---- */

#define N_TOK 8
#define N_DRAWS 200000
/* chi-square with N_TOK - 1 = 7 degrees of freedom: P(X > 24.32) = 0.001.
 * The draws are seeded, so the test is deterministic; a correct rule
 * passes with 99.9% of seeds, while one that returned the draft's q
 * instead of p, or skipped the residual, is off by whole percents of mass
 * (thousands in X at 200000 draws). */
#define CHI2_7_P001 24.32
/* The acceptance rate's tolerance: its standard deviation at N_DRAWS is
 * at most sqrt(0.25 / 200000) = 0.0011; five of them. */
#define ACC_TOL 0.0056

/* Draws N_DRAWS drafts from q (an RNG of the test's own) and judges each
 * with rn_sampler_pick_draft_q; the returned tokens must follow p (the
 * final distribution of a plain pick on the same logits). */
static void check_rule_q(const rn_sampler_params_t *sp, const float *logits, const float *q,
                         const char *what)
{
    cr_err_t err;
    rn_sampler_t *s = rn_sampler_new(N_TOK, 64, sp, &err);
    CHECK(s != NULL);
    if (!s)
        return;
    double p[N_TOK];
    int32_t tok;
    CHECK(rn_sampler_pick(s, logits, &tok, &err) == CR_OK);
    test_final_dist(s, p, N_TOK);
    double want_acc = 0;
    for (int t = 0; t < N_TOK; t++)
        want_acc += fmin(p[t], (double)q[t]);
    rn_rng_t rng;
    rn_rng_seed(&rng, 1234);
    long count[N_TOK] = {0}, acc = 0;
    for (int i = 0; i < N_DRAWS; i++) {
        double u = rn_rng_uniform(&rng), cum = 0;
        int32_t x = N_TOK - 1;
        for (int t = 0; t < N_TOK; t++) {
            cum += q[t];
            if (u < cum) {
                x = t;
                break;
            }
        }
        bool accepted;
        CHECK(rn_sampler_pick_draft_q(s, logits, x, q, &tok, &accepted, &err) == CR_OK);
        CHECK(tok >= 0 && tok < N_TOK && (!accepted || tok == x));
        count[tok]++;
        acc += accepted;
    }
    double x2 = test_chi2(p, count, N_TOK, N_DRAWS, what);
    CHECK_MSG(x2 < CHI2_7_P001, "%s: chi-square %.2f >= %.2f", what, x2, CHI2_7_P001);
    double rate = (double)acc / N_DRAWS;
    CHECK_MSG(fabs(rate - want_acc) < ACC_TOL, "%s: acceptance %.4f, sum(min(p, q)) %.4f", what,
              rate, want_acc);
    rn_sampler_destroy(&s);
}

static void test_rule_q(void)
{
    const float logits[N_TOK] = {2.0f, 1.5f, 0.3f, -0.5f, 1.0f, 0.0f, -2.0f, 0.7f};
    rn_sampler_params_t sp;
    rn_sampler_params_default(&sp);
    sp.seed = 42;
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    /* q near p (a draft model of the same weights) */
    float near[N_TOK], far[N_TOK], point[N_TOK] = {0};
    double z = 0;
    for (int t = 0; t < N_TOK; t++)
        z += exp(logits[t] * 0.8);
    for (int t = 0; t < N_TOK; t++)
        near[t] = (float)(exp(logits[t] * 0.8) / z);
    check_rule_q(&sp, logits, near, "q near p");
    /* q far from p: the unlikely tokens likely */
    const float rev[N_TOK] = {0.02f, 0.03f, 0.15f, 0.25f, 0.05f, 0.2f, 0.25f, 0.05f};
    memcpy(far, rev, sizeof far);
    check_rule_q(&sp, logits, far, "q far from p");
    /* a point mass: the prompt-lookup rule */
    point[6] = 1.0f;
    check_rule_q(&sp, logits, point, "q a point mass");
    /* the whole chain defines p: top_k 4 cuts tokens q still drafts */
    sp.top_k = 4;
    sp.temperature = 0.7f;
    sp.seed = 7;
    check_rule_q(&sp, logits, near, "top_k 4, q near p");
    check_rule_q(&sp, logits, far, "top_k 4, q far from p");
    /* greedy: the argmax whatever the draft */
    sp.temperature = 0;
    cr_err_t err;
    rn_sampler_t *s = rn_sampler_new(N_TOK, 64, &sp, &err);
    int32_t tok;
    bool accepted;
    CHECK(rn_sampler_pick_draft_q(s, logits, 3, far, &tok, &accepted, &err) == CR_OK);
    CHECK(tok == 0 && !accepted);
    CHECK(rn_sampler_pick_draft_q(s, logits, 0, far, &tok, &accepted, &err) == CR_OK);
    CHECK(tok == 0 && accepted);
    /* a draft outside the vocabulary is rejected, not an error */
    sp.temperature = 1.0f;
    CHECK(rn_sampler_reset(s, &sp, &err) == CR_OK);
    CHECK(rn_sampler_pick_draft_q(s, logits, N_TOK + 5, far, &tok, &accepted, &err) == CR_OK);
    CHECK(!accepted && tok >= 0 && tok < N_TOK);
    rn_sampler_destroy(&s);
}

/* ---- the draft module ---- */

/* The vocabulary size of the model at path; 0 (and a failed check) when it
 * does not load. */
static int model_n_vocab(const char *path)
{
    cr_err_t err;
    rn_model_t *m = NULL;
    CHECK_MSG(rn_model_load(path, be_g, &m, &err) == CR_OK, "%s: %s", path, err.msg);
    if (!m)
        return 0;
    int V = rn_model_hparams(m)->n_vocab;
    rn_model_destroy(&m);
    return V;
}

static void test_vocab_size(const char *target, const char *wide_vocab)
{
    cr_err_t err;
    int V = model_n_vocab(target);
    if (!V)
        return;
    rn_spec_draft_t *d = NULL;
    CHECK_EQ_INT(rn_spec_draft_new(wide_vocab, be_g, 64, 1, V, &d, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "tokens") != NULL, "message: %s", err.msg);
    CHECK(d == NULL);
    /* a missing file names the draft */
    CHECK(rn_spec_draft_new("/nonexistent/draft.gguf", be_g, 64, 1, V, &d, &err) != CR_OK);
    CHECK_MSG(strstr(err.msg, "draft model") != NULL, "message: %s", err.msg);
}

/* The greedy continuation of hist[0..n) by model path, k tokens, in a
 * fresh context: the reference for what a draft proposes. */
/* The draft's greedy continuation of hist in a fresh context: k tokens
 * into out and, where prob is not NULL, the probability softmax(logits)
 * gave each (in double). */
static void greedy_ref_p(const char *path, const int32_t *hist, int n, int k, int32_t *out,
                         double *prob)
{
    cr_err_t err;
    rn_model_t *m = NULL;
    rn_ctx_t *c = NULL;
    rn_ctx_opts_t co = {.n_ctx = 1024};
    CHECK(rn_model_load(path, be_g, &m, &err) == CR_OK);
    CHECK(m && rn_ctx_new(m, &co, &c, &err) == CR_OK);
    if (!c) {
        rn_model_destroy(&m);
        return;
    }
    int V = rn_ctx_n_vocab(c);
    CHECK(rn_ctx_eval(c, hist, n, 0, NULL, &err) == CR_OK);
    for (int i = 0; i < k; i++) {
        const float *l = rn_ctx_logits(c);
        int32_t best = 0;
        for (int t = 1; t < V; t++)
            if (l[t] > l[best])
                best = t;
        out[i] = best;
        if (prob) {
            double z = 0;
            for (int t = 0; t < V; t++)
                z += exp((double)l[t] - (double)l[best]);
            prob[i] = 1.0 / z;
        }
        CHECK(rn_ctx_eval(c, &best, 1, n + i, NULL, &err) == CR_OK);
    }
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
}

static void greedy_ref(const char *path, const int32_t *hist, int n, int k, int32_t *out)
{
    greedy_ref_p(path, hist, n, k, out, NULL);
}

static void test_propose(const char *draft_path)
{
    cr_err_t err;
    rn_spec_draft_t *d = NULL;
    int V = model_n_vocab(draft_path);
    if (!V)
        return;
    CHECK_MSG(rn_spec_draft_new(draft_path, be_g, 64, 2, V, &d, &err) == CR_OK, "%s", err.msg);
    if (!d)
        return;
    int32_t hist[40] = {1, 20, 21, 22, 23, 24, 25};
    int32_t got[8], want[8];
    int n = 0;
    CHECK(rn_spec_draft_propose(d, 0, hist, 7, 5, NULL, got, &n, &err) == CR_OK);
    CHECK_EQ_INT(n, 5);
    greedy_ref(draft_path, hist, 7, 5, want);
    CHECK(!memcmp(got, want, 5 * sizeof *got));
    /* the cache holds hist and the drafts but the last */
    CHECK_EQ_INT(rn_spec_draft_n_past(d, 0), 7 + 4);
    /* the target kept two drafts and put another token in place of the
     * third; the sequence goes on with it pending */
    hist[7] = got[0];
    hist[8] = got[1];
    hist[9] = (got[2] + 1) % V;
    CHECK(rn_spec_draft_propose(d, 0, hist, 10, 4, NULL, got, &n, &err) == CR_OK);
    CHECK_EQ_INT(n, 4);
    greedy_ref(draft_path, hist, 10, 4, want);
    CHECK_MSG(!memcmp(got, want, 4 * sizeof *got), "after a rejection the drafts differ from "
              "a fresh context's");
    CHECK_EQ_INT(rn_spec_draft_n_past(d, 0), 10 + 3);
    /* every draft kept: the next proposal starts past the last draft */
    memcpy(hist + 10, got, 4 * sizeof *got);
    CHECK(rn_spec_draft_propose(d, 0, hist, 14, 3, NULL, got, &n, &err) == CR_OK);
    greedy_ref(draft_path, hist, 14, 3, want);
    CHECK(n == 3 && !memcmp(got, want, 3 * sizeof *got));
    /* sequence 1 is its own: a different prompt, unaffected by 0's */
    int32_t other[] = {1, 40, 41, 42};
    CHECK(rn_spec_draft_propose(d, 1, other, 4, 2, NULL, got, &n, &err) == CR_OK);
    greedy_ref(draft_path, other, 4, 2, want);
    CHECK(n == 2 && !memcmp(got, want, 2 * sizeof *got));
    CHECK_EQ_INT(rn_spec_draft_n_past(d, 0), 14 + 2);
    /* a shorter, different sequence (a new prompt): rolled back to the
     * common prefix of one token */
    int32_t fresh[] = {1, 50, 51};
    CHECK(rn_spec_draft_propose(d, 0, fresh, 3, 2, NULL, got, &n, &err) == CR_OK);
    greedy_ref(draft_path, fresh, 3, 2, want);
    CHECK(n == 2 && !memcmp(got, want, 2 * sizeof *got));
    CHECK_EQ_INT(rn_spec_draft_n_past(d, 0), 3 + 1);
    /* the context's end caps the drafts; image ids give none */
    int32_t full[64];
    for (int i = 0; i < 64; i++)
        full[i] = 1 + i % 30;
    CHECK(rn_spec_draft_propose(d, 0, full, 62, 8, NULL, got, &n, &err) == CR_OK);
    CHECK_EQ_INT(n, 3);
    int32_t img[] = {1, -1, -1, 5};
    CHECK(rn_spec_draft_propose(d, 1, img, 4, 4, NULL, got, &n, &err) == CR_OK);
    CHECK_EQ_INT(n, 0);
    /* sampling: each q row is a distribution the draft had mass in; a
     * temperature near 0 makes q the argmax's point mass (the greedy
     * drafts); the same seed draws the same drafts */
    float *q = malloc(4 * (size_t)V * sizeof *q);
    rn_rng_t rng;
    rn_rng_seed(&rng, 3);
    rn_spec_draft_sampling_t samp = {1.0f, &rng, q};
    int32_t again[8];
    CHECK(rn_spec_draft_propose(d, 0, hist, 14, 4, &samp, got, &n, &err) == CR_OK);
    CHECK_EQ_INT(n, 4);
    for (int i = 0; i < n; i++) {
        double sum = 0;
        for (int t = 0; t < V; t++)
            sum += q[(size_t)i * V + t];
        CHECK_MSG(fabs(sum - 1.0) < 1e-4, "q row %d sums to %g", i, sum);
        CHECK(q[(size_t)i * V + got[i]] > 0.0f);
    }
    rn_rng_seed(&rng, 3);
    CHECK(rn_spec_draft_propose(d, 0, hist, 14, 4, &samp, again, &n, &err) == CR_OK);
    CHECK(n == 4 && !memcmp(got, again, 4 * sizeof *got));
    samp.temperature = 1e-4f;
    CHECK(rn_spec_draft_propose(d, 0, hist, 14, 4, &samp, got, &n, &err) == CR_OK);
    greedy_ref(draft_path, hist, 14, 4, want);
    CHECK(n == 4 && !memcmp(got, want, 4 * sizeof *got));
    free(q);
    rn_spec_draft_destroy(&d);
}

/* Several sequences at once (rn_spec_draft_propose_batch): each gets what
 * it would get alone, whether its unseen tokens fit one pass of the
 * draft's batch (512 here) together with the others', alone, or only in
 * chunks (a 600-token prompt). */
static void test_propose_batch(const char *draft_path)
{
    cr_err_t err;
    int V = model_n_vocab(draft_path);
    if (!V)
        return;
    rn_spec_draft_t *d = NULL;
    CHECK_MSG(rn_spec_draft_new(draft_path, be_g, 1024, 3, V, &d, &err) == CR_OK, "%s", err.msg);
    if (!d)
        return;
    static int32_t h[3][700];
    const int lens[3] = {600, 300, 9};
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 700; i++)
            h[s][i] = i == 0 ? 1 : 3 + (i * (s + 2) + s) % 40;
    int32_t out[3][8], want[8];
    rn_spec_draft_req_t reqs[3];
    for (int s = 0; s < 3; s++)
        reqs[s] = (rn_spec_draft_req_t){s, h[s], lens[s], 2 + s, NULL, out[s], 0, 0.0f};
    CHECK(rn_spec_draft_propose_batch(d, reqs, 3, &err) == CR_OK);
    for (int s = 0; s < 3; s++) {
        CHECK_EQ_INT(reqs[s].n_out, 2 + s);
        greedy_ref(draft_path, h[s], lens[s], 2 + s, want);
        CHECK_MSG(!memcmp(out[s], want, (size_t)(2 + s) * sizeof *want), "sequence %d's drafts "
                  "differ from its greedy continuation", s);
        CHECK_EQ_INT(rn_spec_draft_n_past(d, s), lens[s] + 2 + s - 1);
    }
    /* the next step: each kept its first draft and goes on from there */
    int n2[3];
    for (int s = 0; s < 3; s++) {
        h[s][lens[s]] = out[s][0];
        h[s][lens[s] + 1] = (out[s][1] + 1) % V;
        n2[s] = lens[s] + 2;
        reqs[s] = (rn_spec_draft_req_t){s, h[s], n2[s], 3, NULL, out[s], 0, 0.0f};
    }
    CHECK(rn_spec_draft_propose_batch(d, reqs, 3, &err) == CR_OK);
    for (int s = 0; s < 3; s++) {
        greedy_ref(draft_path, h[s], n2[s], 3, want);
        CHECK_MSG(reqs[s].n_out == 3 && !memcmp(out[s], want, 3 * sizeof *want),
                  "sequence %d after a rejection", s);
    }
    rn_spec_draft_destroy(&d);
}

/* p_min: drafting stops after the first draft the draft model gave less
 * probability than p_min (that draft still proposed). Greedy: for
 * thresholds between the continuation's probabilities (computed apart in
 * a fresh context, so only thresholds clear of every probability by 1e-3
 * of it are used), the drafts are the continuation up to and with its
 * first token under the threshold; sampled: each proposal's q rows say
 * where it had to stop. */
static void test_p_min(const char *draft_path)
{
    enum { K = 6 };
    cr_err_t err;
    int V = model_n_vocab(draft_path);
    rn_spec_draft_t *d = NULL;
    if (!V || rn_spec_draft_new(draft_path, be_g, 128, 1, V, &d, &err) != CR_OK) {
        CHECK_MSG(0, "draft: %s", err.msg);
        return;
    }
    const int32_t hist[] = {1, 30, 31, 32, 33, 34};
    int n = (int)CR_ARRAY_LEN(hist);
    int32_t want[K], got[K];
    double prob[K], thr[2 * K + 2];
    greedy_ref_p(draft_path, hist, n, K, want, prob);
    int n_thr = 0;
    thr[n_thr++] = 0.0;  /* off: all K */
    thr[n_thr++] = 1.5;  /* nothing is that sure: one draft */
    for (int i = 0; i < K; i++)
        for (int sign = -1; sign <= 1; sign += 2) {
            double t = prob[i] * (1.0 + sign * 0.01);
            bool clear = t < 1.0;
            for (int j = 0; j < K; j++)
                clear = clear && fabs(t - prob[j]) > 1e-3 * prob[j];
            if (clear)
                thr[n_thr++] = t;
        }
    int short_stops = 0;
    for (int i = 0; i < n_thr; i++) {
        int expect = K;
        for (int j = 0; j < K; j++)
            if (prob[j] < thr[i]) {
                expect = j + 1;
                break;
            }
        short_stops += expect > 1 && expect < K;
        rn_spec_draft_req_t r = {0, hist, n, K, NULL, got, 0, (float)thr[i]};
        CHECK(rn_spec_draft_propose_batch(d, &r, 1, &err) == CR_OK);
        CHECK_MSG(r.n_out == expect && !memcmp(got, want, (size_t)expect * sizeof *got),
                  "p_min %g: %d drafts, want the continuation's first %d", thr[i], r.n_out,
                  expect);
        CHECK_EQ_INT(rn_spec_draft_n_past(d, 0), n + r.n_out - 1);
    }
    CHECK_MSG(short_stops > 0, "no threshold stopped between the first and the last draft "
              "(probabilities %g %g %g ...)", prob[0], prob[1], prob[2]);
    /* sampled at temperature 1: q rows decide */
    float *q = malloc((size_t)K * (size_t)V * sizeof *q);
    rn_rng_t rng;
    rn_rng_seed(&rng, 7);
    rn_spec_draft_sampling_t samp = {1.0f, &rng, q};
    int stopped = 0, full = 0;
    for (int round = 0; round < 40 && q; round++) {
        float t = powf(10.0f, -(float)(round % 8)); /* 1 .. 1e-7: a random model's q is flat */
        rn_spec_draft_req_t r = {0, hist, n, K, &samp, got, 0, t};
        CHECK(rn_spec_draft_propose_batch(d, &r, 1, &err) == CR_OK);
        CHECK(r.n_out >= 1 && r.n_out <= K);
        for (int i = 0; i + 1 < r.n_out; i++)
            CHECK_MSG(q[(size_t)i * V + got[i]] >= t, "sampled draft %d (q %g) under p_min %g "
                      "but drafting went on", i, q[(size_t)i * V + got[i]], t);
        if (r.n_out < K) {
            float last = q[(size_t)(r.n_out - 1) * V + got[r.n_out - 1]];
            CHECK_MSG(last < t, "drafting stopped after draft %d (q %g >= p_min %g)",
                      r.n_out - 1, last, t);
        }
        stopped += r.n_out < K;
        full += r.n_out == K;
    }
    CHECK_MSG(stopped > 0 && full > 0, "sampled: %d stopped early, %d drafted all", stopped,
              full);
    free(q);
    rn_spec_draft_destroy(&d);
}

/* ---- the engine ---- */

#define NO_K INT64_MIN /* load_engine: draft_num_predict unset */

static rn_engine_t *load_engine(const char *path, const char *draft, int64_t k, int n_par,
                                cr_status_t *st_out, cr_err_t *err)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, path, NULL, 512, n_par);
    o.num_thread = 1;
    o.has_num_thread = true;
    if (k != NO_K) {
        o.draft_num_predict = k;
        o.has_draft_num_predict = true;
    }
    ld.draft_path = (char *)draft;
    ld.has_draft_path = draft != NULL;
    rn_engine_t *e = NULL;
    cr_status_t st = rn_engine_load(&ld, &e, err);
    if (st_out)
        *st_out = st;
    else
        CHECK_MSG(st == CR_OK, "load: %s", err->msg);
    return e;
}

/* draft_p_min of the requests run_all_p makes: 0, so the checks below
 * see every step draft K (the default 0.75 cuts a random synthetic
 * model's drafts to one); test_engine_p_min sets others. */
static double p_min_g = 0.0;

/* Runs the prompts at once (one slot each) at `temperature` (top_k
 * top_k when > 0, or 0 (off) when < 0; top_p when >= 0) with draft_ngram
 * ngram and draft_p_min p_min_g; answers into out[i] (caller frees). */
static void run_all_p(rn_engine_t *e, const char *const *prompts, int n, double temperature,
                      int64_t top_k, double top_p, int ngram, int64_t n_pred, cr_buf_t *out)
{
    msg_t m[4];
    msg_options_t o[4];
    test_capture_t cp[4];
    for (int i = 0; i < n; i++) {
        memset(&o[i], 0, sizeof o[i]);
        o[i].temperature = temperature;
        o[i].has_temperature = true;
        o[i].top_k = top_k > 0 ? top_k : 0;
        o[i].has_top_k = top_k != 0;
        o[i].top_p = top_p;
        o[i].has_top_p = top_p >= 0;
        o[i].seed = 5;
        o[i].has_seed = true;
        o[i].num_predict = n_pred;
        o[i].has_num_predict = true;
        o[i].draft_ngram = ngram;
        o[i].has_draft_ngram = ngram > 0;
        o[i].draft_p_min = p_min_g;
        o[i].has_draft_p_min = true;
        test_generate_msg(&m[i], prompts[i], &o[i]);
        memset(&cp[i], 0, sizeof cp[i]);
        cr_buf_init(&cp[i].text, 1 << 20);
        rn_sink_t sink = test_capture_sink(&cp[i]);
        cr_err_t err;
        CHECK_MSG(rn_engine_start(e, &m[i], &sink, test_capture_finish, &err) == CR_OK, "start: %s",
                  err.msg);
    }
    while (rn_engine_step(e) > 0)
        ;
    for (int i = 0; i < n; i++) {
        CHECK(cp[i].finished && cp[i].st == CR_OK);
        out[i] = cp[i].text;
    }
}

static void run_all(rn_engine_t *e, const char *const *prompts, int n, double temperature,
                    int64_t top_k, int ngram, int64_t n_pred, cr_buf_t *out)
{
    run_all_p(e, prompts, n, temperature, top_k, -1, ngram, n_pred, out);
}

#define N_PROMPTS 3
#define N_PRED 40

static const char *const prompts_g[N_PROMPTS] = {
    "the cat sat on the mat and the cat sat on the",
    "one two three four one two three four one two",
    "once upon a time there was a little girl",
};

/* The answers of the target alone, greedy, one request at a time. */
static void base_answers(const char *target, cr_buf_t *base)
{
    rn_engine_t *e = load_engine(target, NULL, NO_K, 1, NULL, &(cr_err_t){0});
    if (!e)
        return;
    for (int i = 0; i < N_PROMPTS; i++)
        run_all(e, &prompts_g[i], 1, 0, 0, 0, N_PRED, &base[i]);
    rn_engine_destroy(&e);
}

static void check_same(const cr_buf_t *base, cr_buf_t *got, const char *what, int i)
{
    CHECK_MSG(!strcmp(base->data ? base->data : "", got->data ? got->data : ""),
              "%s: prompt %d: '%.200s' != '%.200s'", what, i, got->data, base->data);
    cr_buf_free(got);
}

/* Greedy with the draft model equals the target alone: one slot at a
 * time and three together, K 4 and 16, and with draft_ngram asked too (the
 * draft model wins). Returns the acceptance of the K 4 runs in *rate. */
static void check_engine(const char *target, const char *draft, const char *what,
                         bool all_accepted, double *rate)
{
    cr_buf_t base[N_PROMPTS], got[N_PROMPTS];
    memset(base, 0, sizeof base);
    base_answers(target, base);
    const int64_t ks[] = {4, 16};
    for (size_t j = 0; j < CR_ARRAY_LEN(ks); j++) {
        cr_err_t err;
        rn_engine_t *e = load_engine(target, draft, ks[j], N_PROMPTS, NULL, &err);
        if (!e)
            break;
        rn_engine_stats_t before, after;
        rn_engine_get_stats(e, &before);
        for (int i = 0; i < N_PROMPTS; i++) {
            run_all(e, &prompts_g[i], 1, 0, 0, 0, N_PRED, &got[i]);
            check_same(&base[i], &got[i], what, i);
        }
        run_all(e, prompts_g, N_PROMPTS, 0, 0, 0, N_PRED, got);
        for (int i = 0; i < N_PROMPTS; i++)
            check_same(&base[i], &got[i], what, i);
        rn_engine_get_stats(e, &after);
        int64_t drafted = after.draft_tokens - before.draft_tokens;
        int64_t accepted = after.draft_accepted - before.draft_accepted;
        printf("%s, K %" PRId64 ": %" PRId64 " drafted, %" PRId64 " accepted\n", what, ks[j],
               drafted, accepted);
        if (all_accepted)
            CHECK_MSG(drafted > 0 && accepted == drafted, "%s: the target as its own draft: "
                      "%" PRId64 " of %" PRId64 " accepted", what, accepted, drafted);
        if (all_accepted) {
            /* sampling with q = p (the same logits, temperature, no
             * truncation): min(1, p/q) is 1 up to rounding, so every draft
             * stays; a q row out of step with its draft would reject */
            rn_engine_get_stats(e, &before);
            run_all_p(e, prompts_g, 2, 0.8, -1, 1.0, 0, N_PRED, got);
            cr_buf_free(&got[0]);
            cr_buf_free(&got[1]);
            rn_engine_get_stats(e, &after);
            drafted = after.draft_tokens - before.draft_tokens;
            accepted = after.draft_accepted - before.draft_accepted;
            printf("%s, K %" PRId64 ", sampled: %" PRId64 " drafted, %" PRId64 " accepted\n",
                   what, ks[j], drafted, accepted);
            CHECK_MSG(drafted > 0 && accepted >= drafted * 99 / 100, "%s sampled: %" PRId64
                      " of %" PRId64 " accepted", what, accepted, drafted);
        }
        else
            CHECK_MSG(accepted > 0 && accepted < drafted, "%s: %" PRId64 " of %" PRId64
                      " accepted (both paths must run)", what, accepted, drafted);
        if (j == 0 && rate)
            *rate = drafted ? (double)accepted / (double)drafted : 0;
        if (j == 0) {
            /* draft_ngram asked as well: the draft model drafts, same answers */
            rn_engine_get_stats(e, &before);
            run_all(e, &prompts_g[1], 1, 0, 0, 4, N_PRED, &got[0]);
            check_same(&base[1], &got[0], what, 1);
            rn_engine_get_stats(e, &after);
            CHECK(after.draft_tokens > before.draft_tokens);
            /* sampled: top_k 1 is the argmax too; temperature 0.8 runs */
            run_all(e, &prompts_g[0], 1, 0.9, 1, 0, N_PRED, &got[0]);
            check_same(&base[0], &got[0], what, 0);
            run_all(e, prompts_g, 2, 0.8, 0, 0, N_PRED, got);
            cr_buf_free(&got[0]);
            cr_buf_free(&got[1]);
        }
        rn_engine_destroy(&e);
    }
    for (int i = 0; i < N_PROMPTS; i++)
        cr_buf_free(&base[i]);
}

/* The engine's draft_p_min: bad values are refused at start; the default
 * (0.75) and 1 leave greedy answers as they were, and 1 drafts one token a
 * step. */
static void test_engine_p_min(const char *target, const char *draft)
{
    cr_err_t err;
    rn_engine_t *e = load_engine(target, draft, 4, 1, NULL, &err);
    if (!e)
        return;
    const double bad[] = {-0.1, 1.5, NAN};
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        msg_options_t o;
        memset(&o, 0, sizeof o);
        o.draft_p_min = bad[i];
        o.has_draft_p_min = true;
        msg_t m;
        test_generate_msg(&m, "hi", &o);
        test_capture_t cp;
        memset(&cp, 0, sizeof cp);
        cr_buf_init(&cp.text, 1 << 10);
        rn_sink_t sink = test_capture_sink(&cp);
        cr_status_t st = rn_engine_start(e, &m, &sink, test_capture_finish, &err);
        CHECK_EQ_INT(st, CR_E_INVALID);
        CHECK_MSG(st && strstr(err.msg, "option \"draft_p_min\" must be 0..1") != NULL,
                  "message: %s", err.msg);
        cr_buf_free(&cp.text);
    }
    cr_buf_t base[N_PROMPTS], got;
    memset(base, 0, sizeof base);
    base_answers(target, base);
    const double ok[] = {0.75, 1.0};
    for (size_t j = 0; j < CR_ARRAY_LEN(ok); j++) {
        p_min_g = ok[j];
        rn_engine_stats_t before, after;
        rn_engine_get_stats(e, &before);
        int64_t steps = before.steps;
        for (int i = 0; i < N_PROMPTS; i++) {
            run_all(e, &prompts_g[i], 1, 0, 0, 0, N_PRED, &got);
            check_same(&base[i], &got, "draft_p_min", i);
        }
        rn_engine_get_stats(e, &after);
        int64_t drafted = after.draft_tokens - before.draft_tokens;
        printf("draft_p_min %g: %" PRId64 " drafted, %" PRId64 " accepted in %" PRId64
               " steps\n", ok[j], drafted, after.draft_accepted - before.draft_accepted,
               after.steps - steps);
        CHECK(drafted > 0);
        if (ok[j] == 1.0) /* each drafting step proposed exactly one token */
            CHECK_MSG(drafted <= after.steps - steps, "%" PRId64 " drafts in %" PRId64
                      " steps", drafted, after.steps - steps);
    }
    p_min_g = 0.0;
    for (int i = 0; i < N_PROMPTS; i++)
        cr_buf_free(&base[i]);
    rn_engine_destroy(&e);
}

/* A draft that keeps missing (other weights than the target's): each
 * step whose drafts all miss pauses drafting 1, 2, 4 .. steps, and the
 * sixth such step in a row drops the draft for the request; answers are
 * the target's own. Without the backoff every step would draft K. */
static void test_backoff(const char *target, const char *stranger)
{
    enum { K = 4, GIVE_UP = 6 };
    cr_err_t err;
    cr_buf_t base[N_PROMPTS], got;
    memset(base, 0, sizeof base);
    base_answers(target, base);
    rn_engine_t *e = load_engine(target, stranger, K, 1, NULL, &err);
    for (int i = 0; e && i < N_PROMPTS; i++) {
        rn_engine_stats_t before, after;
        rn_engine_get_stats(e, &before);
        run_all(e, &prompts_g[i], 1, 0, 0, 0, N_PRED, &got);
        check_same(&base[i], &got, "a stranger drafts", i);
        rn_engine_get_stats(e, &after);
        int64_t drafted = after.draft_tokens - before.draft_tokens;
        int64_t accepted = after.draft_accepted - before.draft_accepted;
        printf("a stranger drafts, prompt %d: %" PRId64 " drafted, %" PRId64 " accepted\n", i,
               drafted, accepted);
        /* every accepted draft may restart the count of misses */
        CHECK_MSG(drafted > 0 && drafted <= K * GIVE_UP * (1 + accepted),
                  "prompt %d: %" PRId64 " drafted, %" PRId64 " accepted", i, drafted, accepted);
    }
    for (int i = 0; i < N_PROMPTS; i++)
        cr_buf_free(&base[i]);
    rn_engine_destroy(&e);
}

static void test_load_options(const char *target, const char *draft)
{
    cr_err_t err;
    cr_status_t st;
    const int64_t bad[] = {-1, 17};
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        rn_engine_t *e = load_engine(target, draft, bad[i], 1, &st, &err);
        CHECK_EQ_INT(st, CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "draft_num_predict") != NULL, "message: %s", err.msg);
        CHECK(e == NULL);
    }
    /* 0: the draft is not loaded (a missing file would fail otherwise) */
    rn_engine_t *e = load_engine(target, "/nonexistent/draft.gguf", 0, 1, &st, &err);
    CHECK_EQ_INT(st, CR_OK);
    if (e) {
        rn_engine_stats_t s;
        cr_buf_t got;
        run_all(e, &prompts_g[0], 1, 0, 0, 0, 8, &got);
        cr_buf_free(&got);
        rn_engine_get_stats(e, &s);
        CHECK_EQ_INT(s.draft_tokens, 0);
        rn_engine_destroy(&e);
    }
    /* a draft that cannot load fails the load, naming it */
    e = load_engine(target, "/nonexistent/draft.gguf", NO_K, 1, &st, &err);
    CHECK(st != CR_OK && e == NULL);
    CHECK_MSG(strstr(err.msg, "draft model") != NULL, "message: %s", err.msg);
}

int main(void)
{
    cr_err_t berr;
    if (be_cpu_new(1, &be_g, &berr)) {
        fprintf(stderr, "backend: %s\n", berr.msg);
        return 1;
    }
    test_rule_q();
    char target[128], draft[128], wide[128], stranger[128];
    snprintf(target, sizeof target, "/tmp/corral-spec-draft-t-%d.gguf", (int)getpid());
    snprintf(draft, sizeof draft, "/tmp/corral-spec-draft-d-%d.gguf", (int)getpid());
    snprintf(wide, sizeof wide, "/tmp/corral-spec-draft-w-%d.gguf", (int)getpid());
    snprintf(stranger, sizeof stranger, "/tmp/corral-spec-draft-s-%d.gguf", (int)getpid());
    /* the same weights (one seed), quantized two ways: Q4_0 drafts Q8_0 */
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.seed = 11;
    so.type = CR_TYPE_Q8_0;
    cr_err_t err;
    CHECK(rn_synth_write(&so, target, &err) == CR_OK);
    so.type = CR_TYPE_Q4_0;
    CHECK(rn_synth_write(&so, draft, &err) == CR_OK);
    so.seed = 13; /* other weights, the same vocabulary */
    CHECK(rn_synth_write(&so, stranger, &err) == CR_OK);
    so.seed = 11;
    const char *const extra[] = {"<extra_a>", "<extra_b>", NULL};
    so.extra_tokens = extra;
    CHECK(rn_synth_write(&so, wide, &err) == CR_OK);
    test_vocab_size(target, wide);
    test_propose(draft);
    test_propose_batch(draft);
    test_p_min(draft);
    test_engine_p_min(target, draft);
    test_backoff(target, stranger);
    test_load_options(target, draft);
    double rate = 0;
    check_engine(target, draft, "synth Q4_0 drafts Q8_0", false, &rate);
    printf("synth: acceptance %.2f\n", rate);
    check_engine(target, target, "synth Q8_0 drafts itself", true, NULL);
    /* another architecture (qwen2: q/k/v biases), the same pairing */
    rn_synth_defaults(&so);
    so.seed = 12;
    so.arch = "qwen2";
    so.type = CR_TYPE_Q8_0;
    CHECK(rn_synth_write(&so, target, &err) == CR_OK);
    so.type = CR_TYPE_Q4_0;
    CHECK(rn_synth_write(&so, draft, &err) == CR_OK);
    check_engine(target, draft, "synth qwen2 Q4_0 drafts Q8_0", false, NULL);
    unlink(target);
    unlink(draft);
    unlink(wide);
    unlink(stranger);
    const char *root = check_testdata("models/stories260K-Q8_0.gguf");
    if (!root) {
        printf("spec_draft: stories260K checks skipped: no shared testdata\n");
    } else {
        char t[2048], d[2048];
        snprintf(t, sizeof t, "%s/models/stories260K-Q8_0.gguf", root);
        snprintf(d, sizeof d, "%s/models/stories260K-Q4_0.gguf", root);
        check_engine(t, d, "stories260K Q4_0 drafts Q8_0", false, NULL);
    }
    be_destroy(&be_g);
    return check_finish("spec_draft");
}
