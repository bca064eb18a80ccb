/* test_threadpool.c: the CPU backend's thread pool sizes itself to the
 * machine (issue 20, 7: num_thread 100000 gave a runner 256 threads on 2
 * cores, kept for every later request). */
#include "lib/prelude.h"

#include "services/runner/backend/cpu/threadpool.h"
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

int main(void)
{
    int cores = rn_cpu_count();
    CHECK(cores >= 1);
    CHECK_EQ_INT(pool_size(0), cores);      /* default: every core */
    CHECK_EQ_INT(pool_size(100000), cores); /* a request's num_thread */
    CHECK_EQ_INT(pool_size(cores + 1), cores);
    CHECK_EQ_INT(pool_size(1), 1);
    return check_finish("threadpool");
}
