/* test_threadpool.c: a request's num_thread is capped at the machine's
 * cores (issue 20, 7: num_thread 100000 gave a runner 256 threads on 2
 * cores, kept for every later request), while a pool made with an explicit
 * size keeps it (tests check partitioning over more threads than cores). */
#include "lib/prelude.h"

#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/threadpool.h"
#include "services/runner/backends.h"
#include "tests/unit/check.h"

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
    return check_finish("threadpool");
}
