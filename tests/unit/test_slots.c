/* test_slots.c: parallel slots of the engine (rn_engine_start/step).
 *
 * With num_parallel 2..4, greedy requests started together give exactly the
 * text each gives alone in a one-slot engine; the step loop really batched
 * them (the engine's counters: passes over more than one sequence, and the
 * most sequences in one pass); canceling one leaves the others' text
 * unchanged; a request beyond the slots is refused as busy; a request
 * whose prompt a slot already holds goes to that slot and evaluates no
 * prompt token again, and says so (prompt_eval_cached_count, absent on a
 * fresh slot). While a slot decodes, a long prompt arriving in another is
 * taken in chunks of at most the pace's cap and still gives the text it
 * gives alone; one arriving before the decoder sent its first token (a
 * burst) is not capped and gives the same text; ignore_eos answers run to
 * num_predict. A synthetic model,
 * and stories260K with the shared testdata. */
#include "lib/prelude.h"

#include <unistd.h>

#include "lib/buf.h"
#include "services/runner/engine.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"

#define MAX_REQ 4

typedef struct req {
    cr_buf_t text;
    int chunks;
    int cancel_after; /* cancel once this many chunks arrived (0 = never) */
    bool finished;
    cr_status_t st;
    msg_done_body_t done;
} req_t;

static bool on_chunk(void *ctx, const msg_chunk_body_t *c)
{
    req_t *r = ctx;
    r->chunks++;
    if (c->response)
        cr_buf_puts(&r->text, c->response);
    return true;
}

static bool on_canceled(void *ctx)
{
    req_t *r = ctx;
    return r->cancel_after && r->chunks >= r->cancel_after;
}

static void on_finish(void *ctx, cr_status_t st, const msg_done_body_t *done,
                      const cr_err_t *err)
{
    CR_UNUSED(err);
    req_t *r = ctx;
    CHECK(!r->finished); /* exactly once */
    r->finished = true;
    r->st = st;
    if (done) {
        r->done = *done;
        r->done.context.v = NULL; /* points into the slot */
    }
}

static char model_path[2048];

static rn_engine_t *load(int n_par, int64_t num_ctx)
{
    return test_engine_load(model_path, NULL, num_ctx, n_par);
}

static msg_options_t greedy(int64_t n)
{
    msg_options_t o = {0};
    o.temperature = 0;
    o.has_temperature = true;
    o.num_predict = n;
    o.has_num_predict = true;
    return o;
}

static const char *txt(const req_t *r)
{
    return r->text.data ? r->text.data : "";
}

/* Each prompt alone in a one-slot engine: the reference texts. */
static void run_alone(const char *const *prompts, int n, int64_t n_predict,
                      int64_t num_ctx, req_t *out)
{
    rn_engine_t *e = load(1, num_ctx);
    for (int i = 0; e && i < n; i++) {
        msg_options_t o = greedy(n_predict);
        msg_t m;
        test_generate_msg(&m, prompts[i], &o);
        cr_buf_init(&out[i].text, 1 << 20);
        rn_sink_t sink = {&out[i], on_chunk, on_canceled};
        cr_err_t err;
        out[i].st = rn_engine_generate(e, &m, &sink, &out[i].done, &err);
        CHECK_EQ_INT(out[i].st, CR_OK);
        CHECK(out[i].text.len > 0);
    }
    rn_engine_destroy(&e);
}

/* All prompts started together in an n_par-slot engine, stepped to the
 * end. Returns the steps run. */
static int run_together(rn_engine_t *e, const char *const *prompts, int n,
                        int64_t n_predict, req_t *out)
{
    msg_options_t o[MAX_REQ];
    for (int i = 0; i < n; i++) {
        o[i] = greedy(n_predict);
        msg_t m;
        test_generate_msg(&m, prompts[i], &o[i]);
        if (!out[i].text.max_bytes)
            cr_buf_init(&out[i].text, 1 << 20);
        rn_sink_t sink = {&out[i], on_chunk, on_canceled};
        cr_err_t err;
        CHECK_EQ_INT(rn_engine_start(e, &m, &sink, on_finish, &err), CR_OK);
    }
    int steps = 0;
    while (rn_engine_step(e) > 0 && steps < 100000)
        steps++;
    for (int i = 0; i < n; i++)
        CHECK(out[i].finished);
    return steps;
}

static void free_reqs(req_t *r, int n)
{
    for (int i = 0; i < n; i++)
        cr_buf_free(&r[i].text);
    memset(r, 0, (size_t)n * sizeof *r);
}

static void check_parallel_equals_alone(const char *label, const char *const *prompts,
                                        int64_t n_predict, int64_t num_ctx)
{
    for (int n_par = 2; n_par <= MAX_REQ; n_par++) {
        req_t alone[MAX_REQ] = {0}, both[MAX_REQ] = {0};
        run_alone(prompts, n_par, n_predict, num_ctx, alone);
        rn_engine_t *e = load(n_par, num_ctx);
        if (!e)
            return;
        CHECK_EQ_INT(rn_engine_slots(e), n_par);
        run_together(e, prompts, n_par, n_predict, both);
        for (int i = 0; i < n_par; i++) {
            CHECK_EQ_INT(both[i].st, CR_OK);
            CHECK_MSG(!strcmp(txt(&alone[i]), txt(&both[i])),
                      "%s, %d slots, request %d: '%s' alone, '%s' together", label,
                      n_par, i, txt(&alone[i]), txt(&both[i]));
            CHECK_EQ_STR(both[i].done.done_reason, alone[i].done.done_reason);
            CHECK_EQ_INT(both[i].done.eval_count, alone[i].done.eval_count);
            CHECK_EQ_INT(both[i].done.prompt_eval_count,
                         alone[i].done.prompt_eval_count);
        }
        /* They overlapped: passes over several sequences, all n_par at once
         * at least once (every prompt is prefilled in the first pass). */
        rn_engine_stats_t st;
        rn_engine_get_stats(e, &st);
        CHECK(st.steps_multi > 0);
        CHECK_EQ_INT(st.max_seqs, n_par);
        CHECK_EQ_INT(rn_engine_busy(e), 0);
        rn_engine_destroy(&e);
        free_reqs(alone, MAX_REQ);
        free_reqs(both, MAX_REQ);
    }
}

static void check_cancel_busy_and_prefix(const char *const *prompts)
{
    req_t alone[3] = {0}, r[3] = {0};
    run_alone(prompts, 3, 16, 256, alone);
    rn_engine_t *e = load(3, 256);
    if (!e)
        return;
    /* Request 1 is canceled after its second piece; 0 and 2 go on. */
    r[1].cancel_after = 2;
    run_together(e, prompts, 3, 16, r);
    CHECK_EQ_INT(r[1].st, CR_E_CANCELED);
    CHECK_EQ_INT(r[1].chunks, 2);
    CHECK_EQ_INT(r[0].st, CR_OK);
    CHECK_EQ_INT(r[2].st, CR_OK);
    CHECK_EQ_STR(txt(&r[0]), txt(&alone[0]));
    CHECK_EQ_STR(txt(&r[2]), txt(&alone[2]));
    free_reqs(r, 3);

    /* All slots busy: a fourth request is refused, the three complete. */
    msg_options_t o[4] = {greedy(4), greedy(4), greedy(4), greedy(4)};
    req_t q[4] = {0};
    for (int i = 0; i < 4; i++) {
        msg_t m;
        test_generate_msg(&m, prompts[i % 3], &o[i]);
        cr_buf_init(&q[i].text, 1 << 20);
        rn_sink_t sink = {&q[i], on_chunk, on_canceled};
        cr_err_t err;
        CHECK_EQ_INT(rn_engine_start(e, &m, &sink, on_finish, &err),
                     i < 3 ? CR_OK : CR_E_BUSY);
    }
    while (rn_engine_step(e) > 0)
        ;
    for (int i = 0; i < 3; i++)
        CHECK_EQ_INT(q[i].st, CR_OK);
    CHECK(!q[3].finished);
    free_reqs(q, 4);

    /* Prompt 1 again: the slot holding it is chosen, and of the prompt only
     * the last token is evaluated again (tokens evaluated = eval_count:
     * that one, then every sampled token but the last). */
    rn_engine_stats_t before, after;
    rn_engine_get_stats(e, &before);
    req_t again = {0};
    run_together(e, &prompts[1], 1, 16, &again);
    rn_engine_get_stats(e, &after);
    CHECK_EQ_INT(again.st, CR_OK);
    CHECK_EQ_STR(txt(&again), txt(&alone[1]));
    CHECK_EQ_INT(after.tokens - before.tokens, again.done.eval_count);
    /* all but that last token came from the cache; the first request of
     * a fresh engine said none */
    CHECK(again.done.has_prompt_eval_cached_count);
    CHECK_EQ_INT(again.done.prompt_eval_cached_count, again.done.prompt_eval_count - 1);
    CHECK(!alone[0].done.has_prompt_eval_cached_count);
    free_reqs(&again, 1);
    free_reqs(alone, 3);
    rn_engine_destroy(&e);
}

/* Starts prompt as a greedy raw request of n_predict tokens (ignore_eos
 * when asked) into r. */
static void start_one(rn_engine_t *e, const char *prompt, msg_options_t *o, req_t *r)
{
    msg_t m;
    test_generate_msg(&m, prompt, o);
    cr_buf_init(&r->text, 1 << 20);
    rn_sink_t sink = {r, on_chunk, on_canceled};
    cr_err_t err;
    CHECK_EQ_INT(rn_engine_start(e, &m, &sink, on_finish, &err), CR_OK);
}

/* B's long prompt in the pacing checks. */
static const char *const longp_g[1] = {
    "the quick brown fox jumps over the lazy dog and then the dog wakes up and "
    "chases the fox around the old red barn until both of them are very tired"};

/* The pacing checks' set-up: longp_g's answer (8 tokens) alone into *alone,
 * then a two-slot engine whose prompt cap is fixed at 5 tokens a step. */
static rn_engine_t *load_paced(req_t *alone)
{
    run_alone(longp_g, 1, 8, 256, alone);
    rn_engine_t *e = load(2, 256);
    if (e)
        rn_engine_pace(e)->fixed = 5;
    return e;
}

static void check_paced_prefill(void)
{
    req_t alone = {0};
    rn_engine_t *e = load_paced(&alone);
    if (!e)
        return;
    /* A decodes (to num_predict: ignore_eos) while B's prompt comes in */
    msg_options_t oa = greedy(120), ob = greedy(8);
    oa.ignore_eos = true;
    oa.has_ignore_eos = true;
    req_t a = {0}, b = {0};
    start_one(e, "abc", &oa, &a);
    for (int i = 0; i < 4; i++)
        rn_engine_step(e);
    start_one(e, longp_g[0], &ob, &b);
    int steps = 0;
    while (rn_engine_step(e) > 0 && steps < 100000)
        steps++;
    CHECK_EQ_INT(a.st, CR_OK);
    CHECK_EQ_INT(b.st, CR_OK);
    CHECK_EQ_INT(a.done.eval_count, 120);
    CHECK_EQ_STR(a.done.done_reason, "length");
    CHECK_MSG(b.done.prompt_eval_count > 20, "the long prompt is %lld tokens",
              (long long)b.done.prompt_eval_count);
    rn_engine_stats_t st;
    rn_engine_get_stats(e, &st);
    CHECK_EQ_INT(st.max_prompt_with_decode, 5);
    CHECK_EQ_STR(txt(&b), txt(&alone));
    free_reqs(&a, 1);
    free_reqs(&b, 1);
    free_reqs(&alone, 1);
    rn_engine_destroy(&e);
}

/* B comes while A is prefilled, before A sent a token (a burst of users):
 * B's whole prompt goes into A's first decoding step, past the cap that
 * holds a prompt coming later (check_paced_prefill). */
static void check_burst_prefill(void)
{
    req_t alone = {0};
    rn_engine_t *e = load_paced(&alone);
    if (!e)
        return;
    msg_options_t oa = greedy(16), ob = greedy(8);
    req_t a = {0}, b = {0};
    start_one(e, "abc", &oa, &a);
    rn_engine_step(e); /* A's prompt */
    CHECK_EQ_INT(a.chunks, 0);
    start_one(e, longp_g[0], &ob, &b);
    while (rn_engine_step(e) > 0)
        ;
    CHECK_EQ_INT(a.st, CR_OK);
    CHECK_EQ_INT(b.st, CR_OK);
    rn_engine_stats_t st;
    rn_engine_get_stats(e, &st);
    CHECK_MSG(b.done.prompt_eval_count > 20, "the long prompt is %lld tokens",
              (long long)b.done.prompt_eval_count);
    /* a whole chunk of B beside A's token, not the cap of 5 */
    CHECK_MSG(st.max_prompt_with_decode > 5, "B took %d tokens in a step with A",
              st.max_prompt_with_decode);
    CHECK_EQ_STR(txt(&b), txt(&alone));
    free_reqs(&a, 1);
    free_reqs(&b, 1);
    free_reqs(&alone, 1);
    rn_engine_destroy(&e);
}

int main(void)
{
    snprintf(model_path, sizeof model_path, "/tmp/corral-slots-%d.gguf", (int)getpid());
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.seed = 11;
    so.type = CR_TYPE_Q8_0;
    cr_err_t err;
    if (rn_synth_write(&so, model_path, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return 1;
    }
    static const char *const synth_prompts[MAX_REQ] = {
        "abc", "one two three four five six", "hello", "a b c d e f g h i j k l m"};
    check_parallel_equals_alone("synth", synth_prompts, 24, 256);
    check_cancel_busy_and_prefix(synth_prompts);
    check_paced_prefill();
    check_burst_prefill();
    unlink(model_path);

    const char *root = check_testdata("models/stories260K.gguf");
    if (root) {
        snprintf(model_path, sizeof model_path, "%s/models/stories260K.gguf", root);
        static const char *const stories[MAX_REQ] = {
            "Once upon a time", "The little dog", "Lily wanted to", "One day, Tom"};
        check_parallel_equals_alone("stories260K", stories, 48, 512);
    } else {
        printf("slots: stories260K check skipped: no shared testdata\n");
    }
    return check_finish("slots");
}
