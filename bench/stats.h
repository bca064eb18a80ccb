/* stats.h: the clock and the median the bench programs share (a header,
 * not a .c: every bench/<x>.c is its own program). */
#ifndef BENCH_STATS_H
#define BENCH_STATS_H

#include "lib/prelude.h"

#include <time.h>

#define BENCH_MEDIAN_MAX 64 /* most values bench_median takes */

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (n <= BENCH_MEDIAN_MAX; v is left as it was); 0 if
 * n <= 0. */
static inline double bench_median(const double *v, int n)
{
    if (n <= 0)
        return 0;
    double s[BENCH_MEDIAN_MAX];
    n = n < BENCH_MEDIAN_MAX ? n : BENCH_MEDIAN_MAX;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, bench_cmp_double);
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

#endif
