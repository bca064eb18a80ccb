/* poll_wait.h: test helpers for waiting on a condition by polling it (tests
 * wait for conditions, bounded by a deadline, never for durations): a
 * monotonic clock, a short nap between polls, and a pid file's pid. */
#ifndef TESTS_UNIT_POLL_WAIT_H
#define TESTS_UNIT_POLL_WAIT_H

#include "lib/prelude.h"

#include <sys/types.h>
#include <time.h>

/* Milliseconds on the monotonic clock (only differences mean anything). */
static inline int64_t test_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sleeps ms (< 1000) milliseconds between two polls. */
static inline void test_nap_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* The pid written to the file at path, or 0 until a positive one is. */
static inline pid_t test_read_pid(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    long v = 0;
    int n = fscanf(f, "%ld", &v);
    fclose(f);
    return n == 1 && v > 0 ? (pid_t)v : 0;
}

#endif
