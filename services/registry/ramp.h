/* ramp.h: how many parts of one download run at once.
 *
 * A download starts with one connection and adds another only while the
 * last one added paid: after a part is added, the first window of
 * window_ms that starts once it receives data is compared with the window
 * before it was added. When the new part carried at least
 * REG_RAMP_GAIN_PCT percent of what each part before it carried on
 * average, the next is added; else the ramp ends at the width before that
 * part. A window that received nothing (a stall) is measured again. A
 * slow link (a CDN that limits each connection) so reaches max parts,
 * while a fast one (a registry on the LAN or loopback, which one
 * connection already saturates) stays at one: every further connection
 * costs the serving registry and us CPU and scatters the writes, so the
 * hashing thread trails further behind the contiguous prefix.
 *
 * Pure arithmetic on a clock and a byte count the caller gives; no
 * threads, no I/O. */
#ifndef REG_RAMP_H
#define REG_RAMP_H

#include "lib/prelude.h"

#define REG_RAMP_GAIN_PCT 50 /* of a part's average share, see above */

typedef struct reg_ramp {
    int width;             /* parts allowed to run at once now (>= 1) */
    int max;               /* the most parts at once */
    int64_t window_ms;     /* measuring window; <= 0: width is max */
    bool growing;          /* false once an added part did not pay */
    bool waiting;          /* the newest part has no data yet */
    int64_t win_start_ms;  /* the window being measured */
    int64_t win_start_bytes;
    int64_t base_bps;      /* bytes/s of the window before the last add;
                              0 before the first window */
} reg_ramp_t;

/* Starts a ramp of at most max_active parts (>= 1) measuring over
 * window_ms; width 1 (max_active when window_ms <= 0). */
void reg_ramp_init(reg_ramp_t *r, int max_active, int64_t window_ms);

/* Feeds the state at now_ms: bytes received so far by this download
 * (monotonic), and whether the most recently started part has received
 * any. May raise r->width by one, or end the ramp (lowering it by one). */
void reg_ramp_update(reg_ramp_t *r, int64_t now_ms, int64_t bytes,
                     bool newest_receiving);

#endif
