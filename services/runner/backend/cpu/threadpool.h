/* threadpool.h: a persistent pool of worker threads for the CPU kernels.
 *
 * Threads are created once (rn_threadpool_new) and sleep between jobs, so the
 * token path never creates a thread. A job is one function called once
 * per share index: fn(ctx, ith, nth) for each ith in [0, nth), each exactly
 * once, on some thread of the pool; the calling thread runs ith = 0 and any
 * share no worker had claimed when it finished (so a job's shares must not
 * wait for each other), and rn_threadpool_run returns when all have
 * finished. Jobs must not call rn_threadpool_run on the same pool. Owns no
 * kernel logic: splitting work by ith is up to fn. */
#ifndef RN_THREADPOOL_H
#define RN_THREADPOOL_H

#include "lib/prelude.h"
#include "lib/status.h"

#define RN_THREADPOOL_MAX_THREADS 256

typedef struct rn_threadpool rn_threadpool_t;

typedef void (*rn_task_fn)(void *ctx, int ith, int nth);

/* Number of online CPU cores (at least 1). */
int rn_cpu_count(void);

/* Creates a pool of n_threads (the caller counts as one; n_threads <= 0
 * means rn_cpu_count()), capped at RN_THREADPOOL_MAX_THREADS. More than
 * the cores is honoured (tests check partitioning with it); a request's
 * num_thread is capped at the cores before it gets here (backends.c). On
 * success
 * *out is owned by the caller (free with rn_threadpool_destroy). CR_E_NOMEM
 * or CR_E_INTERNAL when threads cannot be started. */
cr_status_t rn_threadpool_new(int n_threads, rn_threadpool_t **out,
                              cr_err_t *err);

void rn_threadpool_destroy(rn_threadpool_t **self_p);

int rn_threadpool_size(const rn_threadpool_t *p);

/* Runs fn(ctx, ith, nth) on nth = min(n_tasks, size) threads and waits for
 * all of them. n_tasks <= 1 runs fn(ctx, 0, 1) on the caller. Not
 * reentrant: one job at a time per pool (callers serialize). */
void rn_threadpool_run(rn_threadpool_t *p, rn_task_fn fn, void *ctx,
                       int n_tasks);

#endif
