/* test_spec.c: speculative decoding (prompt lookup, the accept/reject
 * rule, the verify pass and the cache rollback).
 *
 * - rn_spec_ngram_draft on fixed token lists: longest tail first, newest
 *   occurrence, caps, image ids.
 * - rn_sampler_pick_draft on controlled logits: the tokens it returns are
 *   distributed as p (the distribution rn_sampler_pick draws from) for
 *   drafts of high, low and zero probability, by a chi-square test.
 * - forward: a span's every-token logits equal token-by-token evaluation,
 *   and after a rejected draft is dropped the cache gives the logits of a
 *   run that never saw it.
 * - the engine: greedy answers with draft_ngram equal those without
 *   (synthetic llama and qwen2 models, several prompts, two slots at once;
 *   stories260K and tiny-spm from the shared testdata when present), with
 *   drafts both accepted and rejected along the way; bad draft_ngram
 *   values are refused. */
#include "lib/prelude.h"

#include <math.h>
#include <unistd.h>

#include <jansson.h>

#include "lib/buf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/engine.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "services/runner/sampler.h"
#include "services/runner/spec.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_capture.h"
#include "tests/unit/engine_load.h"
#include "tests/unit/sampler_dist.h"

/* ---- prompt lookup ---- */

static void test_ngram(void)
{
    int32_t out[RN_SPEC_MAX_DRAFT];
    /* tail "2 3" occurred at 1: proposes what followed (4 5 6 2 3) */
    const int32_t a[] = {1, 2, 3, 4, 5, 6, 2, 3};
    int n = rn_spec_ngram_draft(a, 8, 3, out);
    CHECK_EQ_INT(n, 3);
    CHECK(out[0] == 4 && out[1] == 5 && out[2] == 6);
    /* k_max caps; the proposal stops at the end of the history */
    CHECK_EQ_INT(rn_spec_ngram_draft(a, 8, 16, out), 5);
    CHECK(out[3] == 2 && out[4] == 3);
    /* the newest occurrence wins: "7 8" at 0 (then 1) and at 3 (then 2) */
    const int32_t b[] = {7, 8, 1, 7, 8, 2, 9, 7, 8};
    CHECK_EQ_INT(rn_spec_ngram_draft(b, 9, 1, out), 1);
    CHECK_EQ_INT(out[0], 2);
    /* a longer tail wins over a newer short one: "5 7 8" at 0 (then 1) */
    const int32_t c[] = {5, 7, 8, 1, 7, 8, 2, 5, 7, 8};
    CHECK_EQ_INT(rn_spec_ngram_draft(c, 10, 1, out), 1);
    CHECK_EQ_INT(out[0], 1);
    /* a short loop: the newest "5 5 5 5" leaves one token after it, an
     * older "5 5" three: the longer continuation wins */
    const int32_t g[] = {4, 5, 5, 5, 5, 5};
    CHECK_EQ_INT(rn_spec_ngram_draft(g, 6, 3, out), 3);
    CHECK(out[0] == 5 && out[1] == 5 && out[2] == 5);
    /* a full continuation of a longer tail beats a newer short one's */
    const int32_t h[] = {1, 2, 3, 9, 8, 7, 6, 2, 3, 4, 1, 2, 3};
    CHECK_EQ_INT(rn_spec_ngram_draft(h, 13, 2, out), 2);
    CHECK(out[0] == 9 && out[1] == 8);
    /* no match, too short, no room */
    const int32_t d[] = {1, 2, 3, 4};
    CHECK_EQ_INT(rn_spec_ngram_draft(d, 4, 4, out), 0);
    CHECK_EQ_INT(rn_spec_ngram_draft(a, 2, 4, out), 0);
    CHECK_EQ_INT(rn_spec_ngram_draft(a, 8, 0, out), 0);
    /* image ids never match and are never proposed */
    const int32_t e[] = {-1, -1, 4, -1, -1};
    CHECK_EQ_INT(rn_spec_ngram_draft(e, 5, 4, out), 0);
    const int32_t f[] = {2, 3, -1, 9, 2, 3};
    CHECK_EQ_INT(rn_spec_ngram_draft(f, 6, 4, out), 0);
}

/* ---- the accept/reject rule ---- */

#define N_TOK 8
#define N_DRAWS 200000
/* chi-square with N_TOK - 1 = 7 degrees of freedom: P(X > 24.32) = 0.001.
 * The draws are seeded, so the test is deterministic; a correct rule
 * passes with 99.9% of seeds, a rule off by even 1% of mass on one token
 * fails (at 200000 draws that adds about 2000 / p to X). */
#define CHI2_7_P001 24.32

/* Draws N_DRAWS tokens with draft `draft` and compares their counts with p
 * (the final distribution of a plain pick on the same logits). */
static void check_rule(const rn_sampler_params_t *sp, const float *logits, int32_t draft)
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
    long count[N_TOK] = {0}, acc = 0;
    for (int i = 0; i < N_DRAWS; i++) {
        bool accepted;
        CHECK(rn_sampler_pick_draft(s, logits, draft, &tok, &accepted, &err) == CR_OK);
        CHECK(tok >= 0 && tok < N_TOK && accepted == (tok == draft));
        count[tok]++;
        acc += accepted;
    }
    char what[32];
    snprintf(what, sizeof what, "draft %d", (int)draft);
    double x2 = test_chi2(p, count, N_TOK, N_DRAWS, what);
    CHECK_MSG(x2 < CHI2_7_P001, "%s: chi-square %.2f >= %.2f", what, x2, CHI2_7_P001);
    /* the draft is accepted exactly when drawn: its rate is p(draft) */
    CHECK_EQ_INT(acc, count[draft]);
    rn_sampler_destroy(&s);
}

static void test_rule(void)
{
    const float logits[N_TOK] = {2.0f, 1.5f, 0.3f, -0.5f, 1.0f, 0.0f, -2.0f, 0.7f};
    rn_sampler_params_t sp;
    rn_sampler_params_default(&sp);
    sp.seed = 42;
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    check_rule(&sp, logits, 0); /* likely draft */
    check_rule(&sp, logits, 6); /* unlikely draft */
    /* the whole chain defines p: top_k 4 and a temperature (token 6 is cut:
     * a draft p gives no mass is always rejected), top_p, min_p */
    sp.top_k = 4;
    sp.temperature = 0.7f;
    sp.seed = 7;
    check_rule(&sp, logits, 6);
    check_rule(&sp, logits, 1);
    sp.top_k = 0;
    sp.top_p = 0.8f;
    sp.min_p = 0.05f;
    sp.temperature = 1.3f;
    check_rule(&sp, logits, 4);
    /* greedy: the argmax whatever the draft */
    sp.temperature = 0;
    cr_err_t err;
    rn_sampler_t *s = rn_sampler_new(N_TOK, 64, &sp, &err);
    int32_t tok;
    bool accepted;
    CHECK(rn_sampler_pick_draft(s, logits, 3, &tok, &accepted, &err) == CR_OK);
    CHECK(tok == 0 && !accepted);
    CHECK(rn_sampler_pick_draft(s, logits, 0, &tok, &accepted, &err) == CR_OK);
    CHECK(tok == 0 && accepted);
    /* a draft outside the vocabulary is rejected, not an error */
    sp.temperature = 1.0f;
    CHECK(rn_sampler_reset(s, &sp, &err) == CR_OK);
    CHECK(rn_sampler_pick_draft(s, logits, N_TOK + 5, &tok, &accepted, &err) == CR_OK);
    CHECK(!accepted && tok >= 0 && tok < N_TOK);
    rn_sampler_destroy(&s);
}

/* ---- forward: every-token logits and rollback ---- */

static be_backend_t *be_g;

static float max_diff(const float *a, const float *b, int n)
{
    float m = 0;
    for (int i = 0; i < n; i++)
        m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

/* Tolerance for logits of the same positions computed in a different
 * batch shape: the CPU backend's matmul takes the same float steps for a
 * row whatever the batch (forward.h), so 0 is expected; 1e-4 leaves room
 * for a kernel that splits its sums by batch size, far below the logit
 * gaps greedy decoding turns on in these models. */
#define ROW_TOL 1e-4f

static void test_rollback(const char *path)
{
    cr_err_t err;
    rn_model_t *m = NULL;
    CHECK_MSG(rn_model_load(path, be_g, &m, &err) == CR_OK, "load: %s", err.msg);
    if (!m)
        return;
    rn_ctx_opts_t co = {.n_ctx = 64, .n_seq = 2};
    rn_ctx_t *c = NULL;
    CHECK_MSG(rn_ctx_new(m, &co, &c, &err) == CR_OK, "ctx: %s", err.msg);
    int V = rn_ctx_n_vocab(c);
    const int32_t prompt[] = {1, 20, 21, 22, 23, 24};
    const int32_t span[] = {30, 31, 32, 33}; /* pending 30, drafts 31..33 */
    float *all = malloc(4 * (size_t)V * sizeof *all);
    float *one = malloc((size_t)V * sizeof *one);
    CHECK(rn_ctx_eval_seq(c, 0, prompt, 6, 0, NULL, &err) == CR_OK);
    CHECK(rn_ctx_eval_seq(c, 1, prompt, 6, 0, NULL, &err) == CR_OK);
    /* sequence 0 verifies the span in one batch beside sequence 1's
     * single token; sequence 1 then walks the same tokens one by one */
    rn_ctx_span_t b[2] = {{0, span, 4, 6, NULL, NULL, false, all},
                          {1, span, 1, 6, NULL, NULL, false, NULL}};
    CHECK(rn_ctx_eval_batch(c, b, 2, &err) == CR_OK);
    CHECK_EQ_INT(rn_ctx_seq_n_past(c, 0), 10);
    CHECK(max_diff(rn_ctx_seq_logits(c, 0), all + 3 * (size_t)V, V) == 0);
    CHECK_MSG(max_diff(rn_ctx_seq_logits(c, 1), all, V) <= ROW_TOL, "row 0 differs by %g",
              max_diff(rn_ctx_seq_logits(c, 1), all, V));
    for (int t = 1; t < 4; t++) {
        CHECK(rn_ctx_eval_seq(c, 1, span + t, 1, 6 + t, NULL, &err) == CR_OK);
        float d = max_diff(rn_ctx_seq_logits(c, 1), all + (size_t)t * V, V);
        CHECK_MSG(d <= ROW_TOL, "row %d differs by %g", t, d);
    }
    /* reject drafts 32, 33: keep 6 + 2 positions, then a different token
     * at position 8; a clean context that saw only prompt, 30, 31, 40
     * must give the same logits */
    rn_ctx_seq_truncate(c, 0, 8);
    const int32_t other = 40;
    CHECK(rn_ctx_eval_seq(c, 0, &other, 1, 8, NULL, &err) == CR_OK);
    memcpy(one, rn_ctx_seq_logits(c, 0), (size_t)V * sizeof *one);
    rn_ctx_t *clean = NULL;
    co.n_seq = 1;
    CHECK(rn_ctx_new(m, &co, &clean, &err) == CR_OK);
    const int32_t seen[] = {1, 20, 21, 22, 23, 24, 30, 31};
    CHECK(rn_ctx_eval(clean, seen, 8, 0, NULL, &err) == CR_OK);
    CHECK(rn_ctx_eval(clean, &other, 1, 8, NULL, &err) == CR_OK);
    float d = max_diff(rn_ctx_logits(clean), one, V);
    CHECK_MSG(d <= ROW_TOL, "after rollback the logits differ by %g", d);
    /* and the next position too (the dropped rows are really gone) */
    const int32_t next = 41;
    CHECK(rn_ctx_eval_seq(c, 0, &next, 1, 9, NULL, &err) == CR_OK);
    CHECK(rn_ctx_eval(clean, &next, 1, 9, NULL, &err) == CR_OK);
    d = max_diff(rn_ctx_logits(clean), rn_ctx_seq_logits(c, 0), V);
    CHECK_MSG(d <= ROW_TOL, "a step after rollback the logits differ by %g", d);
    free(all);
    free(one);
    rn_ctx_destroy(&clean);
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
}

/* ---- the engine ---- */

/* An engine on one thread: these models are tiny, and a thread pool's
 * waits only cost on a shared machine. */
static rn_engine_t *load_engine(const char *path, int64_t num_ctx, int n_par)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, path, NULL, num_ctx, n_par);
    o.num_thread = 1;
    o.has_num_thread = true;
    rn_engine_t *e = NULL;
    cr_err_t err;
    CHECK_MSG(rn_engine_load(&ld, &e, &err) == CR_OK, "load: %s", err.msg);
    return e;
}

/* What a run asks besides its draft length. */
typedef struct run_cfg {
    double temperature;
    int64_t top_k;         /* 0: the default */
    double repeat_penalty; /* 0: the default */
    bool logprobs;         /* with top_logprobs 3 */
} run_cfg_t;

/* Runs the prompts at once (one slot each) with draft_ngram k; their
 * answers into out[i] (caller frees). */
static void run_all(rn_engine_t *e, const char *const *prompts, int n, int k, int64_t n_pred,
                    const run_cfg_t *cfg, cr_buf_t *out, json_t **lp_out)
{
    msg_t m[4];
    msg_options_t o[4];
    test_capture_t cp[4];
    for (int i = 0; i < n; i++) {
        memset(&o[i], 0, sizeof o[i]);
        o[i].temperature = cfg->temperature;
        o[i].has_temperature = true;
        o[i].top_k = cfg->top_k;
        o[i].has_top_k = cfg->top_k != 0;
        o[i].repeat_penalty = cfg->repeat_penalty;
        o[i].has_repeat_penalty = cfg->repeat_penalty != 0;
        o[i].seed = 5;
        o[i].has_seed = true;
        o[i].num_predict = n_pred;
        o[i].has_num_predict = true;
        o[i].draft_ngram = k;
        o[i].has_draft_ngram = k > 0;
        test_generate_msg(&m[i], prompts[i], &o[i]);
        m[i].u.generate.logprobs = cfg->logprobs;
        m[i].u.generate.has_logprobs = cfg->logprobs;
        m[i].u.generate.top_logprobs = cfg->logprobs ? 3 : 0;
        m[i].u.generate.has_top_logprobs = cfg->logprobs;
        memset(&cp[i], 0, sizeof cp[i]);
        cr_buf_init(&cp[i].text, 1 << 20);
        cp[i].logprobs = json_array();
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
        if (lp_out)
            lp_out[i] = cp[i].logprobs;
        else
            json_decref(cp[i].logprobs);
    }
}

/* Logprobs of the same tokens computed in a verify pass of K+1 rows and
 * in single-token passes: the same tokens, values within LP_TOL. The F32
 * matmul sums a multi-row product in another order than one row (1.2e-7
 * seen on stories260K alone), and slots batched together prefill in other
 * chunks (1.3e-4 on stories260K with draft_ngram 0 too); 1e-3 is far
 * below the gaps between a row and its neighbours' (a wrong row moves
 * logprobs by whole units). */
#define LP_TOL 1e-3

static double entry_lp(const json_t *e)
{
    return json_number_value(json_object_get(e, "logprob"));
}

static bool same_logprobs(const json_t *a, const json_t *b)
{
    if (json_array_size(a) != json_array_size(b))
        return false;
    for (size_t i = 0; i < json_array_size(a); i++) {
        const json_t *x = json_array_get(a, i), *y = json_array_get(b, i);
        const char *tx = json_string_value(json_object_get(x, "token"));
        const char *ty = json_string_value(json_object_get(y, "token"));
        if (!tx || !ty || strcmp(tx, ty) || fabs(entry_lp(x) - entry_lp(y)) > LP_TOL)
            return false;
        const json_t *top_x = json_object_get(x, "top_logprobs");
        const json_t *top_y = json_object_get(y, "top_logprobs");
        if (json_array_size(top_x) != json_array_size(top_y))
            return false;
        for (size_t j = 0; j < json_array_size(top_x); j++)
            if (fabs(entry_lp(json_array_get(top_x, j)) - entry_lp(json_array_get(top_y, j))) >
                LP_TOL)
                return false;
    }
    return true;
}

/* Compares run i's answer (and logprobs) with the base run's. */
static void check_run(const cr_buf_t *base, const json_t *base_lp, cr_buf_t *got, json_t *got_lp,
                      const char *what, int i, int k, bool batch)
{
    CHECK_MSG(!strcmp(base->data ? base->data : "", got->data ? got->data : ""),
              "%s: prompt %d%s, draft_ngram %d: '%.200s' != '%.200s'", what, i,
              batch ? " in a batch" : "", k, got->data, base->data);
    CHECK_MSG(same_logprobs(base_lp, got_lp), "%s: prompt %d%s, draft_ngram %d: the logprobs "
              "differ", what, i, batch ? " in a batch" : "", k);
    cr_buf_free(got);
    json_decref(got_lp);
}

/* Deterministic answers (greedy, or top_k 1) with the first n_ks draft
 * lengths of ks equal those without, one slot at a time and all slots
 * together. */
static void check_same(rn_engine_t *e, const char *const *prompts, int n, int64_t n_pred,
                       const run_cfg_t *cfg, int n_ks, const char *what)
{
    cr_buf_t base[4], got[4];
    json_t *base_lp[4], *got_lp[4];
    for (int i = 0; i < n; i++)
        run_all(e, &prompts[i], 1, 0, n_pred, cfg, &base[i], &base_lp[i]);
    const int ks[] = {4, 1, 16};
    for (int j = 0; j < n_ks && j < (int)CR_ARRAY_LEN(ks); j++) {
        for (int i = 0; i < n; i++) {
            run_all(e, &prompts[i], 1, ks[j], n_pred, cfg, &got[i], &got_lp[i]);
            check_run(&base[i], base_lp[i], &got[i], got_lp[i], what, i, ks[j], false);
        }
        if (rn_engine_slots(e) >= n) {
            run_all(e, prompts, n, ks[j], n_pred, cfg, got, got_lp);
            for (int i = 0; i < n; i++)
                check_run(&base[i], base_lp[i], &got[i], got_lp[i], what, i, ks[j], true);
        }
    }
    for (int i = 0; i < n; i++) {
        cr_buf_free(&base[i]);
        json_decref(base_lp[i]);
    }
}

static void test_engine_greedy(const char *path, const char *what)
{
    rn_engine_t *e = load_engine(path, 512, 3);
    if (!e)
        return;
    /* the third prompt takes several 64-token prefill steps: in a batch
     * the others speculate beside its prompt chunks */
    char long_prompt[1024] = "";
    for (int i = 0; i < 24; i++)
        strcat(long_prompt, i % 5 ? "hello world, " : "a story begins. ");
    const char *prompts[] = {"the cat sat on the mat and the cat sat on the",
                             "one two three four one two three four one two", long_prompt};
    int32_t *ids = NULL;
    size_t n_ids = 0;
    cr_err_t terr;
    CHECK(rn_engine_tokenize(e, long_prompt, &ids, &n_ids, &terr) == CR_OK);
    CHECK_MSG(n_ids > 64 && n_ids < 400, "%s: the long prompt is %zu tokens", what, n_ids);
    free(ids);
    rn_engine_stats_t before, after;
    rn_engine_get_stats(e, &before);
    run_cfg_t greedy = {0};
    check_same(e, prompts, 3, 48, &greedy, 3, what);
    rn_engine_get_stats(e, &after);
    int64_t drafted = after.draft_tokens - before.draft_tokens;
    int64_t accepted = after.draft_accepted - before.draft_accepted;
    printf("%s: %" PRId64 " drafted, %" PRId64 " accepted\n", what, drafted, accepted);
    /* both paths ran: some drafts kept, some dropped */
    CHECK_MSG(accepted > 0 && accepted < drafted, "%s: %" PRId64 " of %" PRId64 " accepted",
              what, accepted, drafted);
    /* the penalties see each accepted draft before judging the next */
    run_cfg_t pen = {.repeat_penalty = 1.5};
    check_same(e, prompts, 3, 32, &pen, 1, what);
    /* each token's logprobs come from its own row of the verify pass */
    run_cfg_t lp = {.logprobs = true};
    check_same(e, prompts, 2, 24, &lp, 1, what);
    /* the sampled path (rn_sampler_pick_draft) with top_k 1 is the argmax
     * too: rejected drafts are replaced by the one token with mass */
    run_cfg_t top1 = {.temperature = 0.9, .top_k = 1};
    check_same(e, prompts, 3, 32, &top1, 1, what);
    rn_engine_destroy(&e);
}

static void test_bad_option(const char *path)
{
    rn_engine_t *e = load_engine(path, 128, 1);
    if (!e)
        return;
    const int64_t bad[] = {-1, RN_SPEC_MAX_DRAFT + 1};
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        msg_options_t o = {0};
        o.draft_ngram = bad[i];
        o.has_draft_ngram = true;
        msg_t m;
        test_generate_msg(&m, "hi", &o);
        test_capture_t cp = {0};
        rn_sink_t sink = test_capture_sink(&cp);
        cr_err_t err;
        cr_err_clear(&err);
        CHECK_EQ_INT(rn_engine_start(e, &m, &sink, test_capture_finish, &err), CR_E_INVALID);
        CHECK_MSG(strstr(err.msg, "draft_ngram") != NULL, "message: %s", err.msg);
        CHECK(!cp.finished);
    }
    rn_engine_destroy(&e);
}

/* Sampled decoding with drafts runs to the end with the same lengths
 * rules (the distribution itself is test_rule's). */
static void test_engine_sampled(const char *path)
{
    rn_engine_t *e = load_engine(path, 256, 2);
    if (!e)
        return;
    const char *prompts[] = {"one two three four one two three four one two",
                             "the cat sat on the mat and the cat sat on the"};
    cr_buf_t got[2];
    run_cfg_t cfg = {.temperature = 0.7};
    run_all(e, prompts, 2, 4, 40, &cfg, got, NULL);
    for (int i = 0; i < 2; i++)
        cr_buf_free(&got[i]);
    rn_engine_destroy(&e);
}

int main(void)
{
    cr_err_t berr;
    if (be_cpu_new(1, &be_g, &berr)) {
        fprintf(stderr, "backend: %s\n", berr.msg);
        return 1;
    }
    test_ngram();
    test_rule();
    char path[256];
    snprintf(path, sizeof path, "/tmp/corral-spec-%d.gguf", (int)getpid());
    const char *archs[] = {"llama", "qwen2"};
    for (size_t a = 0; a < CR_ARRAY_LEN(archs); a++) {
        rn_synth_opts_t so;
        rn_synth_defaults(&so);
        so.seed = 11 + a;
        so.arch = archs[a];
        so.type = a ? CR_TYPE_Q4_0 : CR_TYPE_Q8_0;
        cr_err_t err;
        if (rn_synth_write(&so, path, &err)) {
            fprintf(stderr, "synth: %s\n", err.msg);
            return 1;
        }
        test_rollback(path);
        test_engine_greedy(path, archs[a]);
        if (a == 0) {
            test_bad_option(path);
            test_engine_sampled(path);
        }
        unlink(path);
    }
    const char *root = check_testdata("models/stories260K.gguf");
    if (!root) {
        printf("spec: stories260K / tiny-spm checks skipped: no shared testdata\n");
        be_destroy(&be_g);
        return check_finish("spec");
    }
#ifdef __SANITIZE_ADDRESS__
    /* under the sanitizers (about 10x slower) one real model: the F32 and
     * tiny-spm runs add minutes and no code path the others miss */
    const char *models[] = {"stories260K-Q8_0.gguf"};
#else
    const char *models[] = {"stories260K.gguf", "stories260K-Q8_0.gguf", "tiny-spm-Q8_0.gguf"};
#endif
    for (size_t i = 0; i < CR_ARRAY_LEN(models); i++) {
        char p[2048];
        snprintf(p, sizeof p, "%s/models/%s", root, models[i]);
        test_rollback(p);
        test_engine_greedy(p, models[i]);
    }
    be_destroy(&be_g);
    return check_finish("spec");
}
