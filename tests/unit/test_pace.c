/* test_pace.c: the prompt-token cap of a step with decoders (pace.c), fed
 * made-up times.
 *
 * Alone (no decoder) a prompt takes what it may; before any time is known
 * a step with decoders takes the probe; a CPU-like machine (a prompt token
 * costs a fifth of a decode-only step) gets a cap that keeps the step
 * within RN_PACE_RATIO decode steps; a GPU-like one (a 64-token chunk
 * costs little more than a decode step) keeps the whole chunk; the cap is
 * never below 1; a fixed cap wins.
 *
 * The plan of a step (rn_pace_plan), given decoders, arrival ticks and
 * prompt lengths: prompts that came before any decoder of the step sent
 * its first token (a burst) take whole chunks within the batch; those
 * that came later share the cap, the earliest arrival first; with no
 * decoder every prompt is a peer. */
#include "lib/prelude.h"
#include "services/runner/pace.h"
#include "tests/unit/check.h"

#define MS 1000000LL

static void test_alone_and_probe(void)
{
    rn_pace_t p = {0};
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 0, 64), 64);
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 3, 64), RN_PACE_PROBE);
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 3, 2), 2);
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 3, 0), 1);
}

static void test_cpu_like(void)
{
    /* decode step 100 ms; a prompt token 20 ms: a 64-token prompt-only
     * step is 100 + 64 x 20 ms */
    rn_pace_t p = {0};
    for (int i = 0; i < 20; i++) {
        rn_pace_observe(&p, 4, 0, 100 * MS);
        rn_pace_observe(&p, 0, 64, (100 + 64 * 20) * MS);
    }
    int cap = rn_pace_prompt_cap(&p, 4, 64);
    /* (1.75 - 1) x 100 / 20 = 3.75 */
    CHECK_EQ_INT(cap, 3);
    double step_ms = 100 + cap * 20;
    CHECK_MSG(step_ms <= RN_PACE_RATIO * 100, "a capped step costs %.0f ms", step_ms);
    /* mixed steps at that cap keep it there */
    for (int i = 0; i < 20; i++)
        rn_pace_observe(&p, 4, cap, (int64_t)(step_ms * MS));
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 4, 64), 3);
    /* the prompt alone is still not capped */
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 0, 64), 64);
}

static void test_gpu_like(void)
{
    /* decode step 10 ms; 64 prompt tokens 12 ms */
    rn_pace_t p = {0};
    for (int i = 0; i < 20; i++) {
        rn_pace_observe(&p, 8, 0, 10 * MS);
        rn_pace_observe(&p, 0, 64, 12 * MS);
    }
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 8, 64), 64);
}

static void test_never_below_one(void)
{
    rn_pace_t p = {0};
    for (int i = 0; i < 20; i++) {
        rn_pace_observe(&p, 1, 0, 1 * MS);
        rn_pace_observe(&p, 0, 8, 800 * MS);
    }
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 1, 64), 1);
    /* nonsense times change nothing */
    rn_pace_t q = p;
    rn_pace_observe(&p, 0, 0, 5 * MS);
    rn_pace_observe(&p, 2, 4, -1);
    CHECK(p.decode_ns == q.decode_ns && p.token_ns == q.token_ns);
}

static void test_fixed(void)
{
    rn_pace_t p = {.fixed = 5};
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 2, 64), 5);
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 2, 4), 4);
    CHECK_EQ_INT(rn_pace_prompt_cap(&p, 0, 64), 64);
}

#define N_PR 4

/* rn_pace_plan's take for the prompts pr over a step s. */
static int plan(const rn_pace_t *p, rn_pace_step_t s, const rn_pace_prompt_t *pr, int n,
                int *take)
{
    int total = rn_pace_plan(p, &s, pr, n, take), sum = 0;
    for (int i = 0; i < n; i++) {
        CHECK_MSG(take[i] >= 0 && take[i] <= pr[i].left && take[i] <= s.chunk,
                  "prompt %d takes %d of %d", i, take[i], pr[i].left);
        sum += take[i];
    }
    CHECK_EQ_INT(total, sum);
    CHECK_MSG(total <= s.budget, "%d tokens over a budget of %d", total, s.budget);
    return total;
}

static void test_plan_burst(void)
{
    /* the decoder sent its first token at tick 5; three prompts came at
     * ticks 3..5: all peers, whole chunks (or what is left) */
    rn_pace_t p = {.fixed = 5};
    rn_pace_prompt_t pr[N_PR] = {{5, 128}, {3, 40}, {5, 200}};
    int take[N_PR];
    CHECK_EQ_INT(plan(&p, (rn_pace_step_t){1, 5, 511, 64}, pr, 3, take), 64 + 40 + 64);
    CHECK_EQ_INT(take[0], 64);
    CHECK_EQ_INT(take[1], 40);
    CHECK_EQ_INT(take[2], 64);
    /* a small batch: the earliest arrivals first */
    CHECK_EQ_INT(plan(&p, (rn_pace_step_t){1, 5, 100, 64}, pr, 3, take), 100);
    CHECK_EQ_INT(take[1], 40);
    CHECK_EQ_INT(take[0] + take[2], 60);
    /* the same prompts with no decoder: peers too, whatever their ticks */
    rn_pace_prompt_t late[2] = {{9, 128}, {8, 10}};
    CHECK_EQ_INT(plan(&p, (rn_pace_step_t){0, INT64_MAX, 512, 64}, late, 2, take), 74);
}

static void test_plan_late(void)
{
    /* streams sending since tick 5; prompts that came at 6 and 7 share
     * the cap (fixed 5), the earlier first, whole prompt before the next */
    rn_pace_t p = {.fixed = 5};
    rn_pace_prompt_t pr[N_PR] = {{7, 300}, {6, 3}};
    int take[N_PR];
    CHECK_EQ_INT(plan(&p, (rn_pace_step_t){4, 5, 508, 64}, pr, 2, take), 5);
    CHECK_EQ_INT(take[1], 3);
    CHECK_EQ_INT(take[0], 2);
    /* one came before the streams: it takes its chunk, the late one the cap */
    rn_pace_prompt_t mix[N_PR] = {{7, 300}, {2, 300}};
    CHECK_EQ_INT(plan(&p, (rn_pace_step_t){4, 5, 508, 64}, mix, 2, take), 64 + 5);
    CHECK_EQ_INT(take[0], 5);
    CHECK_EQ_INT(take[1], 64);
    /* a peer that fills the batch leaves the late one nothing */
    CHECK_EQ_INT(plan(&p, (rn_pace_step_t){4, 5, 50, 64}, mix, 2, take), 50);
    CHECK_EQ_INT(take[0], 0);
    /* measured times instead of a fixed cap: a CPU-like machine */
    rn_pace_t q = {0};
    for (int i = 0; i < 20; i++) {
        rn_pace_observe(&q, 4, 0, 100 * MS);
        rn_pace_observe(&q, 0, 64, (100 + 64 * 20) * MS);
    }
    CHECK_EQ_INT(plan(&q, (rn_pace_step_t){4, 5, 508, 64}, pr, 2, take), 3);
    /* prompts with nothing left take nothing; an empty list is fine */
    rn_pace_prompt_t done[1] = {{1, 0}};
    CHECK_EQ_INT(plan(&q, (rn_pace_step_t){4, 5, 508, 64}, done, 1, take), 0);
    CHECK_EQ_INT(plan(&q, (rn_pace_step_t){4, 5, 508, 64}, done, 0, take), 0);
}

int main(void)
{
    test_alone_and_probe();
    test_cpu_like();
    test_gpu_like();
    test_never_below_one();
    test_fixed();
    test_plan_burst();
    test_plan_late();
    return check_finish("pace");
}
