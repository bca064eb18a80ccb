/* test_threadpool.c: a request's num_thread is capped at the machine's
 * cores (issue 20, 7: num_thread 100000 gave a runner 256 threads on 2
 * cores, kept for every later request), while a pool made with an explicit
 * size keeps it (tests check partitioning over more threads than cores).
 * Every share of a job runs exactly once, with the job's own context, also
 * when the caller takes the shares of workers the scheduler has not run
 * yet (a pool of more threads than cores makes that common). A worker
 * asleep on its condition variable (idle past its spin) is woken by the
 * next job: no wake-up is lost between a job's opening and a worker going
 * to sleep, also when several threads sleep and wake at once. */
#include "lib/prelude.h"

#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/threadpool.h"
#include "services/runner/backends.h"
#include "tests/unit/check.h"
#include "tests/unit/poll_wait.h"

#include <dirent.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>

static int pool_size(int asked)
{
    rn_threadpool_t *p = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_threadpool_new(asked, &p, &err), CR_OK);
    int n = p ? rn_threadpool_size(p) : -1;
    rn_threadpool_destroy(&p);
    return n;
}

/* Threads of the host backend the runner makes for num_thread `asked`. */
static int host_threads(int asked)
{
    be_backend_t *be = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_backend_host()->create(0, asked, &be, &err), CR_OK);
    int n = be ? be_cpu_threads(be) : -1;
    be_destroy(&be);
    return n;
}

typedef struct share_job {
    atomic_int runs[16]; /* times share ith ran */
    int nth_seen;        /* nth every call got; -1 if they differed */
    atomic_int bad;      /* calls with an ith out of range */
} share_job_t;

static void share_task(void *ctx, int ith, int nth)
{
    share_job_t *j = ctx;
    if (ith < 0 || ith >= nth || nth > 16 || nth != j->nth_seen) {
        atomic_fetch_add(&j->bad, 1);
        return;
    }
    atomic_fetch_add(&j->runs[ith], 1);
}

/* 2000 jobs of 1..n_threads shares on a pool of n_threads, each job's
 * context a fresh stack object: each share once, nothing else touched. */
static void check_shares(int n_threads)
{
    rn_threadpool_t *p = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_threadpool_new(n_threads, &p, &err), CR_OK);
    int wrong = 0;
    for (int r = 0; p && r < 2000; r++) {
        int nt = 1 + r % n_threads;
        share_job_t j;
        memset(&j, 0, sizeof j);
        j.nth_seen = nt;
        rn_threadpool_run(p, share_task, &j, nt);
        for (int i = 0; i < 16; i++)
            wrong += atomic_load(&j.runs[i]) != (i < nt ? 1 : 0);
        wrong += atomic_load(&j.bad);
        memset(&j, 0xff, sizeof j); /* a late worker would now see garbage */
    }
    CHECK_MSG(wrong == 0, "%d threads: %d shares ran other than once", n_threads, wrong);
    rn_threadpool_destroy(&p);
}

/* True once every thread of this process but the caller is asleep
 * ('S' in /proc/self/task/TID/stat: the pool's workers on cv_work). */
static bool workers_asleep(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return false;
    bool all = true;
    pid_t self = (pid_t)gettid();
    struct dirent *e;
    while (all && (e = readdir(d))) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == self)
            continue;
        char path[320], buf[256];
        snprintf(path, sizeof path, "/proc/self/task/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f)
            fclose(f);
        buf[n] = 0;
        const char *st = strrchr(buf, ')'); /* the state follows "(comm) " */
        all = st && st[1] == ' ' && st[2] == 'S';
    }
    closedir(d);
    return all;
}

typedef struct wake_job {
    atomic_int started; /* shares ith >= 1 begun */
    int want;
    atomic_int late;    /* share 0 gave up waiting for them */
} wake_job_t;

/* share 0 (the caller's) waits for every other share to begin on a worker:
 * a worker that slept through the job's opening never would */
static void wake_task(void *ctx, int ith, int nth)
{
    CR_UNUSED(nth);
    wake_job_t *j = ctx;
    if (ith) {
        atomic_fetch_add(&j->started, 1);
        return;
    }
    int64_t end = test_mono_ms() + 10000;
    while (atomic_load(&j->started) < j->want)
        if (test_mono_ms() > end) {
            atomic_store(&j->late, 1);
            return;
        }
}

static void check_wakes(int n_threads)
{
    rn_threadpool_t *p = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_threadpool_new(n_threads, &p, &err), CR_OK);
    int lost = 0, asleep = 0;
    for (int r = 0; p && r < 5; r++) {
        int64_t end = test_mono_ms() + 30000;
        while (!workers_asleep() && test_mono_ms() < end)
            sched_yield();
        asleep += workers_asleep();
        wake_job_t j = {.want = n_threads - 1};
        rn_threadpool_run(p, wake_task, &j, n_threads);
        lost += atomic_load(&j.late);
    }
    CHECK_MSG(asleep == 5, "%d threads: workers asleep before %d of 5 jobs", n_threads, asleep);
    CHECK_MSG(lost == 0, "%d threads: a sleeping worker missed %d of 5 jobs", n_threads, lost);
    rn_threadpool_destroy(&p);
}

int main(void)
{
    int cores = rn_cpu_count();
    CHECK(cores >= 1);
    CHECK_EQ_INT(rn_backend_cpu_threads(0), cores); /* default: every core */
    CHECK_EQ_INT(rn_backend_cpu_threads(100000), cores);
    CHECK_EQ_INT(rn_backend_cpu_threads(cores + 1), cores);
    CHECK_EQ_INT(rn_backend_cpu_threads(1), 1);
    CHECK_EQ_INT(host_threads(100000), cores); /* what a load gets */
    CHECK_EQ_INT(host_threads(1), 1);
    CHECK_EQ_INT(pool_size(0), cores);
    CHECK_EQ_INT(pool_size(cores + 1), cores + 1); /* explicit: kept */
    CHECK_EQ_INT(pool_size(1), 1);
    check_shares(2);
    check_shares(4);
    check_shares(16);
    check_wakes(2);
    check_wakes(4);
    return check_finish("threadpool");
}
