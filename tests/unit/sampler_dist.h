/* sampler_dist.h: test helpers for checking that a sampler's picks follow
 * its final distribution p: p as an array, and the chi-square of drawn
 * counts against it. */
#ifndef TESTS_UNIT_SAMPLER_DIST_H
#define TESTS_UNIT_SAMPLER_DIST_H

#include "lib/prelude.h"
#include "services/runner/sampler.h"
#include "tests/unit/check.h"

/* p[id] = the final probability of each candidate of s's last pick, 0 for
 * the other tokens of the n in p. */
static inline void test_final_dist(const rn_sampler_t *s, double *p, int n)
{
    for (int t = 0; t < n; t++)
        p[t] = 0;
    for (size_t i = 0; i < rn_sampler_final_count(s); i++) {
        int32_t id;
        float pr;
        rn_sampler_final_get(s, i, &id, &pr);
        if (id >= 0 && id < n)
            p[id] = pr;
    }
}

/* Pearson's chi-square of count[0..n) against p * n_draws over the tokens
 * with p > 0; a token with p 0 that was drawn fails a check naming `what`. */
static inline double test_chi2(const double *p, const long *count, int n, long n_draws,
                               const char *what)
{
    double x2 = 0;
    for (int t = 0; t < n; t++) {
        if (p[t] == 0) {
            CHECK_MSG(count[t] == 0, "%s: token %d has p 0 but was drawn %ld times", what, t,
                      count[t]);
            continue;
        }
        double ex = p[t] * (double)n_draws;
        x2 += ((double)count[t] - ex) * ((double)count[t] - ex) / ex;
    }
    return x2;
}

#endif
