/* test_registry_ramp.c: the parts-at-once ramp of a download (ramp.h),
 * driven by simulated links: the ramp is fed a clock and the bytes a link
 * of a given shape would have delivered. */
#include "lib/prelude.h"
#include "services/registry/ramp.h"
#include "tests/unit/check.h"

#define WINDOW_MS 250
#define STEP_MS 10      /* the download loop's turn, simulated */
#define SETUP_MS 120    /* a new connection's connect and request */

/* A link that gives each connection per_conn_bps up to total_bps in all. */
typedef struct link {
    double per_conn_bps, total_bps;
} link_t;

/* Runs the ramp for run_ms over link l with parts started as the width
 * allows (each connection carries data SETUP_MS after it starts); returns
 * the final width. */
static int simulate(const link_t *l, int max_active, int64_t run_ms)
{
    reg_ramp_t r;
    reg_ramp_init(&r, max_active, WINDOW_MS);
    int64_t started_ms[64];
    int n = 0;
    double bytes = 0;
    for (int64_t now = 0; now < run_ms; now += STEP_MS) {
        int carrying = 0;
        for (int i = 0; i < n; i++)
            carrying += now - started_ms[i] >= SETUP_MS;
        double bps = CR_MIN(carrying * l->per_conn_bps, l->total_bps);
        bytes += bps * STEP_MS / 1000.0;
        bool newest = n > 0 && now - started_ms[n - 1] >= SETUP_MS;
        reg_ramp_update(&r, now, (int64_t)bytes, newest);
        while (n < r.width && n < 64)
            started_ms[n++] = now;
        CHECK(r.width >= 1 && r.width <= max_active);
    }
    return r.width;
}

static void test_slow_link_reaches_max(void)
{
    /* 5 MB/s per connection, 1 GB/s in all: every part pays. */
    link_t l = {5e6, 1e9};
    CHECK_EQ_INT(simulate(&l, 16, 20000), 16);
}

static void test_fast_link_stays_narrow(void)
{
    /* One connection saturates the link: the second does not pay and the
     * width goes back to one. */
    link_t l = {1e9, 1e9};
    CHECK_EQ_INT(simulate(&l, 16, 20000), 1);
}

static void test_link_saturates_midway(void)
{
    /* 100 MB/s each, 400 MB/s in all: four connections; the fifth adds
     * nothing. */
    link_t l = {100e6, 400e6};
    CHECK_EQ_INT(simulate(&l, 16, 20000), 4);
}

static void test_no_window_is_all_at_once(void)
{
    reg_ramp_t r;
    reg_ramp_init(&r, 4, 0);
    CHECK_EQ_INT(r.width, 4);
    reg_ramp_update(&r, 1000, 100, true);
    CHECK_EQ_INT(r.width, 4);
    reg_ramp_init(&r, 0, 250); /* a nonsense maximum is one part */
    CHECK_EQ_INT(r.width, 1);
}

static void test_silent_window_measures_again(void)
{
    /* A stall (no bytes in a window) neither adds a part nor ends the
     * ramp. */
    reg_ramp_t r;
    reg_ramp_init(&r, 8, WINDOW_MS);
    reg_ramp_update(&r, 0, 0, true);      /* first byte: window opens */
    reg_ramp_update(&r, 300, 0, true);    /* silent window */
    CHECK_EQ_INT(r.width, 1);
    CHECK(r.growing);
    reg_ramp_update(&r, 600, 1000000, true);
    CHECK_EQ_INT(r.width, 2);
    /* The new part has no data yet: nothing is judged meanwhile. */
    reg_ramp_update(&r, 5000, 1000000, false);
    CHECK_EQ_INT(r.width, 2);
    CHECK(r.growing);
}

int main(void)
{
    test_slow_link_reaches_max();
    test_fast_link_stays_narrow();
    test_link_saturates_midway();
    test_no_window_is_all_at_once();
    test_silent_window_measures_again();
    return check_finish("registry_ramp");
}
