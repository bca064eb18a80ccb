/* ramp.c: the parts-at-once ramp of a download (see ramp.h). */
#include "lib/prelude.h"
#include "services/registry/ramp.h"

void reg_ramp_init(reg_ramp_t *r, int max_active, int64_t window_ms)
{
    memset(r, 0, sizeof *r);
    r->max = max_active > 0 ? max_active : 1;
    r->window_ms = window_ms;
    r->growing = window_ms > 0 && r->max > 1;
    r->width = window_ms > 0 ? 1 : r->max;
    r->waiting = true;
}

void reg_ramp_update(reg_ramp_t *r, int64_t now_ms, int64_t bytes,
                     bool newest_receiving)
{
    if (!r->growing)
        return;
    if (r->waiting) {
        /* The window opens once the new connection carries data: its
         * connect and first request say nothing about the link. */
        if (!newest_receiving)
            return;
        r->waiting = false;
        r->win_start_ms = now_ms;
        r->win_start_bytes = bytes;
        return;
    }
    int64_t span = now_ms - r->win_start_ms;
    if (span < r->window_ms)
        return;
    int64_t got = bytes - r->win_start_bytes;
    r->win_start_ms = now_ms;
    r->win_start_bytes = bytes;
    if (got <= 0)
        return; /* a silent window (a stall) says nothing: measure again */
    int64_t bps = (int64_t)((double)got * 1000.0 / (double)span);
    bool first = r->base_bps == 0;
    /* The part added must carry at least REG_RAMP_GAIN_PCT percent of
     * what each of the width - 1 before it carried on average. */
    double want = (double)r->base_bps *
                  (1.0 + REG_RAMP_GAIN_PCT / 100.0 / (double)(r->width - 1));
    if (!first && (double)bps < want) {
        /* The last part added did not pay: back to the width before it
         * (parts running go on; an ended one is not replaced). */
        r->width--;
        r->growing = false;
        return;
    }
    r->base_bps = bps;
    r->width++;
    r->waiting = true;
    if (r->width >= r->max)
        r->growing = false;
}
