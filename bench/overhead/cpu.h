/* cpu.h: CPU time of a process, all its threads, in nanoseconds, for
 * bench-overhead's per-token accounting; and its huge-page mappings. /proc/PID/stat counts clock ticks
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

/* How much of a process is mapped on 2 MiB pages (/proc/PID/smaps_rollup):
 * decode reads every weight each token, and on 4 KiB pages it pays a page
 * walk every 4 KiB (services/runner/backend/cpu/huge_map.h), so the runner
 * (packed weights mapped from the pack cache file) and the engine alone
 * (packed into anonymous memory) compare only where both get them. */
typedef struct ovh_huge {
    int64_t rss_kb;
    int64_t anon_huge_kb; /* AnonHugePages */
    int64_t file_pmd_kb;  /* FilePmdMapped */
} ovh_huge_t;

/* False when pid is gone or the kernel has no smaps_rollup. */
bool ovh_huge_read(pid_t pid, ovh_huge_t *out);

#endif
