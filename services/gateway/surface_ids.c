/* surface_ids.c: random answer ids (see surface_ids.h). */
#include "lib/prelude.h"
#include "services/gateway/surface_ids.h"

#include <stdatomic.h>
#include <sys/random.h>
#include <time.h>

void gw_surface_id(char *out, size_t cap, const char *prefix)
{
    uint8_t r[12];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* no entropy yet (early boot): time and a counter are unique */
        static atomic_uint_fast64_t counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t a = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
        uint64_t b = atomic_fetch_add(&counter, 1);
        memcpy(r, &a, 8);
        memcpy(r + 8, &b, 4);
    }
    static const char hex[] = "0123456789abcdef";
    char digits[25];
    for (size_t i = 0; i < sizeof r; i++) {
        digits[2 * i] = hex[r[i] >> 4];
        digits[2 * i + 1] = hex[r[i] & 15];
    }
    digits[24] = '\0';
    snprintf(out, cap, "%s%s", prefix, digits);
}
