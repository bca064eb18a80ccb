/* threadpool.c: persistent workers woken per job by a generation counter.
 *
 * Workers spin briefly on the counter (jobs arrive back to back during a
 * forward pass), then yield the core a number of times (on a machine with
 * more runnable threads than cores, a spinning thread would take time from
 * the very thread it waits for), and then sleep on a condition variable, so
 * an idle runner costs no CPU.
 *
 * A job's shares (ith 1..nth-1) are claimed, not assigned: a worker takes
 * one from `slots` when it wakes. Once the caller has run share 0 it closes
 * the job, takes every share still unclaimed and runs those itself, then
 * waits only for the workers that joined. On a busy machine a worker that
 * the scheduler has not run yet thus costs nothing, where before the caller
 * sat until it woke (17% of decode samples under load were such waits); a
 * worker that wakes after the close finds no share and never touches the
 * finished job's context.
 *
 * The mutex is only for sleeping: a job is opened and a worker checks for
 * stop without it, and the condition variables are signalled only when a
 * thread sleeps on them (counted in `sleepers` / `caller_sleeps`, seq_cst
 * against gen / done as in Dekker's handshake: a sleeper announces itself
 * and then rechecks; the waker changes the value and then checks for
 * sleepers). Taking the mutex per job made a worker that arrived during
 * the broadcast block on it in the kernel and start the job late. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

#define SPIN_ITERS 4000  /* pause loops before yielding */
#define YIELD_ITERS 200  /* sched_yield calls before sleeping */

typedef struct worker {
    rn_threadpool_t *pool;
    int ith;
} worker_t;

struct rn_threadpool {
    int n; /* threads including the caller */
    pthread_t *threads;
    worker_t *workers;
    int n_started;

    pthread_mutex_t mu;
    pthread_cond_t cv_work;
    pthread_cond_t cv_done;
    atomic_uint gen;     /* bumped once per job (and at stop): wakes workers */
    atomic_int slots;    /* shares of the open job not yet claimed: a worker
                            that takes slots from k runs share ith = k */
    atomic_int done;     /* joined workers that finished the current job */
    atomic_int want;     /* joined workers the closed job waits for; -1 open */
    atomic_int sleepers; /* workers on cv_work (or about to be) */
    atomic_bool caller_sleeps; /* the caller on cv_done (or about to be) */
    atomic_bool stop;

    rn_task_fn fn; /* current job; written before gen is bumped */
    void *ctx;
    int nth;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int rn_cpu_count(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > RN_THREADPOOL_MAX_THREADS ? RN_THREADPOOL_MAX_THREADS
                                                      : (int)n;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    rn_threadpool_t *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g = atomic_load_explicit(&p->gen, memory_order_acquire);
        for (int i = 0; g == seen && i < SPIN_ITERS + YIELD_ITERS; i++) {
            if (i < SPIN_ITERS)
                cpu_relax();
            else
                sched_yield();
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while ((g = atomic_load(&p->gen)) == seen)
                pthread_cond_wait(&p->cv_work, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        seen = g;
        if (atomic_load(&p->stop))
            return NULL;
        /* claim a share of whichever job is open (none: it was closed,
         * or others took them all) */
        int k = atomic_load(&p->slots);
        while (k > 0 && !atomic_compare_exchange_weak(&p->slots, &k, k - 1))
            ;
        if (k <= 0)
            continue;
        /* fn, ctx and nth were written before the slots were opened, and
         * stay until this share is done */
        p->fn(p->ctx, k, p->nth);
        if (atomic_fetch_add(&p->done, 1) + 1 == atomic_load(&p->want) &&
            atomic_load(&p->caller_sleeps)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

cr_status_t rn_threadpool_new(int n_threads, rn_threadpool_t **out, cr_err_t *err)
{
    *out = NULL;
    if (n_threads <= 0)
        n_threads = rn_cpu_count();
    if (n_threads > RN_THREADPOOL_MAX_THREADS)
        n_threads = RN_THREADPOOL_MAX_THREADS;
    rn_threadpool_t *p = calloc(1, sizeof *p);
    if (!p)
        return cr_err_set(err, CR_E_NOMEM, "thread pool: out of memory");
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->gen, 0);
    atomic_init(&p->slots, 0);
    atomic_init(&p->done, 0);
    atomic_init(&p->want, -1);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_sleeps, false);
    atomic_init(&p->stop, false);
    if (n_threads > 1) {
        p->threads = calloc((size_t)n_threads - 1, sizeof *p->threads);
        p->workers = calloc((size_t)n_threads - 1, sizeof *p->workers);
        if (!p->threads || !p->workers) {
            rn_threadpool_destroy(&p);
            return cr_err_set(err, CR_E_NOMEM, "thread pool: out of memory");
        }
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i] = (worker_t){p, i + 1};
            int rc = pthread_create(&p->threads[i], NULL, worker_main, &p->workers[i]);
            if (rc) {
                rn_threadpool_destroy(&p);
                return cr_err_set(err, CR_E_INTERNAL,
                                  "thread pool: cannot start thread %d of %d: %s",
                                  i + 2, n_threads, strerror(rc));
            }
            p->n_started++;
        }
    }
    *out = p;
    return CR_OK;
}

void rn_threadpool_destroy(rn_threadpool_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_threadpool_t *p = *self_p;
    atomic_store(&p->stop, true);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_started; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->cv_done);
    pthread_cond_destroy(&p->cv_work);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p->workers);
    free(p);
    *self_p = NULL;
}

int rn_threadpool_size(const rn_threadpool_t *p)
{
    return p ? p->n : 1;
}

void rn_threadpool_run(rn_threadpool_t *p, rn_task_fn fn, void *ctx, int n_tasks)
{
    if (!p || p->n <= 1 || n_tasks <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    /* no worker is in a job here (the last one's joined all finished) */
    p->fn = fn;
    p->ctx = ctx;
    p->nth = n_tasks < p->n ? n_tasks : p->n;
    atomic_store(&p->done, 0);
    atomic_store(&p->want, -1);
    atomic_store(&p->slots, p->nth - 1); /* opens the job */
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }

    fn(ctx, 0, p->nth);

    /* close: the shares nobody claimed (ith 1..left) are the caller's */
    int left = atomic_exchange(&p->slots, 0);
    for (int ith = 1; ith <= left; ith++)
        fn(ctx, ith, p->nth);
    int joined = p->nth - 1 - left;
    atomic_store(&p->want, joined);
    for (int i = 0; i < SPIN_ITERS + YIELD_ITERS; i++) {
        if (atomic_load(&p->done) == joined)
            return;
        if (i < SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_sleeps, true);
    while (atomic_load(&p->done) != joined)
        pthread_cond_wait(&p->cv_done, &p->mu);
    atomic_store(&p->caller_sleeps, false);
    pthread_mutex_unlock(&p->mu);
}
