/* cpu.h: CPU time of a process, all its threads, in nanoseconds, for
 * bench-overhead's per-token accounting. /proc/PID/stat counts clock ticks
 * (10 ms), too coarse for a stream of a few hundred tokens; each thread's
 * /proc/PID/task/TID/schedstat gives its run time in ns. */
#ifndef BENCH_OVERHEAD_CPU_H
#define BENCH_OVERHEAD_CPU_H

#include "lib/prelude.h"

#include <sys/types.h>

typedef struct ovh_cpu {
    int64_t run_ns;  /* on a CPU */
    int64_t wait_ns; /* runnable, waiting in a run queue for a CPU */
} ovh_cpu_t;

/* The times so far, summed over every live thread of pid. False when pid
 * is gone or /proc has no schedstat (a kernel without CONFIG_SCHEDSTATS).
 * Threads that ended are not counted: call it around work whose threads
 * outlive it (a thread pool, a service's threads). */
bool ovh_cpu_read(pid_t pid, ovh_cpu_t *out);

#endif
