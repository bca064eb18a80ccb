/* duration.h: keep-alive durations as Ollama accepts them.
 *
 * A duration is a Go duration string ("5m", "1h30m", "1.5h", "300ms", "-1m")
 * or a number of seconds ("300", 300, -1). Negative means "forever". */
#ifndef CR_DURATION_H
#define CR_DURATION_H

#include "lib/prelude.h"
#include "lib/status.h"

#include <time.h>



/* Parses a Go duration string or a decimal number of seconds into
 * milliseconds. Any negative value becomes -1 (forever). CR_E_INVALID with a
 * message naming the text if it does not parse. */
cr_status_t cr_duration_parse(const char *text, int64_t *ms_out, cr_err_t *err);

/* Seconds (as in a JSON number) to milliseconds; negative -> -1. */
int64_t cr_duration_from_seconds(double seconds);

/* The CLOCK_REALTIME time ms (>= 0) milliseconds from now, normalized
 * (tv_nsec < 1e9): the absolute deadline pthread_cond_timedwait takes. */
struct timespec cr_duration_deadline(int64_t ms);

#endif
