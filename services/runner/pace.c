/* pace.c: the step's prompt-token cap (see pace.h). */
#include "lib/prelude.h"
#include "services/runner/pace.h"

/* Weight of a new time in the running averages: a few steps follow a
 * change of load (other programs, a new model shape) without letting one
 * noisy step swing the cap. */
#define NEW_WEIGHT 0.25

static void average(double *avg, double x)
{
    *avg = *avg > 0 ? (1 - NEW_WEIGHT) * *avg + NEW_WEIGHT * x : x;
}

void rn_pace_observe(rn_pace_t *p, int n_decode, int n_prompt, int64_t ns)
{
    if (ns <= 0 || (n_decode <= 0 && n_prompt <= 0))
        return;
    double t = (double)ns;
    if (n_prompt == 0) {
        average(&p->decode_ns, t);
        return;
    }
    /* The prompt's share: the step less what its decoders alone would
     * cost. A prompt-only step reads all weights once as a decode-only
     * step does, so that part is taken off it too, but at least half of
     * it is the prompt's: a stale decode average never makes tokens look
     * free. In a step with decoders a tenth at least. */
    double share = p->decode_ns > 0 ? t - p->decode_ns : t;
    double least = n_decode > 0 ? t / 10 : t / 2;
    if (share < least)
        share = least;
    average(&p->token_ns, share / n_prompt);
}

int rn_pace_prompt_cap(const rn_pace_t *p, int n_decode, int max)
{
    if (max < 1)
        return 1;
    if (n_decode <= 0)
        return max;
    if (p->fixed > 0)
        return CR_MIN(p->fixed, max);
    if (p->decode_ns <= 0 || p->token_ns <= 0)
        return CR_MIN(RN_PACE_PROBE, max);
    double cap = (RN_PACE_RATIO - 1) * p->decode_ns / p->token_ns;
    if (cap < 1)
        return 1;
    return cap >= max ? max : (int)cap;
}

static bool is_peer(const rn_pace_step_t *s, const rn_pace_prompt_t *q)
{
    return s->n_decode <= 0 || q->arrived <= s->streaming_since;
}

/* The waiting prompt (take 0, left > 0) of the earliest arrival among
 * peers (peer true) or the others; -1 when none is left. */
static int earliest(const rn_pace_step_t *s, const rn_pace_prompt_t *pr, int n,
                    const int *take, bool peer)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (take[i] == 0 && pr[i].left > 0 && is_peer(s, &pr[i]) == peer &&
            (best < 0 || pr[i].arrived < pr[best].arrived))
            best = i;
    return best;
}

int rn_pace_plan(const rn_pace_t *p, const rn_pace_step_t *s, const rn_pace_prompt_t *pr,
                 int n, int *take)
{
    int budget = s->budget, chunk = CR_MAX(s->chunk, 1), total = 0, i;
    for (i = 0; i < n; i++)
        take[i] = 0;
    while (budget > 0 && (i = earliest(s, pr, n, take, true)) >= 0) {
        take[i] = CR_MIN(CR_MIN(chunk, pr[i].left), budget);
        budget -= take[i];
        total += take[i];
    }
    if (budget <= 0)
        return total;
    int cap = CR_MIN(rn_pace_prompt_cap(p, s->n_decode, budget), budget);
    while (cap > 0 && (i = earliest(s, pr, n, take, false)) >= 0) {
        take[i] = CR_MIN(CR_MIN(chunk, pr[i].left), cap);
        cap -= take[i];
        total += take[i];
    }
    return total;
}
