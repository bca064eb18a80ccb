/* test_pace.c: the prompt-token cap of a step with decoders (pace.c), fed
 * made-up times.
 *
 * Alone (no decoder) a prompt takes what it may; before any time is known
 * a step with decoders takes the probe; a CPU-like machine (a prompt token
 * costs a fifth of a decode-only step) gets a cap that keeps the step
 * within RN_PACE_RATIO decode steps; a GPU-like one (a 64-token chunk
 * costs little more than a decode step) keeps the whole chunk; the cap is
 * never below 1; a fixed cap wins. */
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

int main(void)
{
    test_alone_and_probe();
    test_cpu_like();
    test_gpu_like();
    test_never_below_one();
    test_fixed();
    return check_finish("pace");
}
