/* duration.c: Go-style duration strings and plain seconds. */
#include "lib/prelude.h"
#include "lib/duration.h"

#include <math.h>

struct timespec cr_duration_deadline(int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

int64_t cr_duration_from_seconds(double seconds)
{
    if (seconds < 0)
        return -1;
    double ms = seconds * 1000.0;
    if (ms > (double)INT64_MAX / 2)
        return INT64_MAX / 2;
    return (int64_t)llround(ms);
}

static double unit_ms(const char *u, size_t n)
{
    static const struct { const char *name; double ms; } units[] = {
        {"ns", 1e-6}, {"us", 1e-3}, {"\xc2\xb5s", 1e-3}, {"ms", 1.0},
        {"s", 1e3},   {"m", 60e3},  {"h", 3600e3},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(units); i++)
        if (strlen(units[i].name) == n && !memcmp(units[i].name, u, n))
            return units[i].ms;
    return -1;
}

cr_status_t cr_duration_parse(const char *text, int64_t *ms_out, cr_err_t *err)
{
    const char *s = text;
    if (!s || !*s)
        return cr_err_set(err, CR_E_INVALID, "invalid duration \"\"");
    /* Plain number: seconds. */
    char *end;
    errno = 0;
    double secs = strtod(s, &end);
    if (end != s && !*end && !errno && isfinite(secs)) {
        *ms_out = cr_duration_from_seconds(secs);
        return CR_OK;
    }
    bool neg = false;
    if (*s == '-' || *s == '+')
        neg = *s++ == '-';
    if (!strcmp(s, "0")) {
        *ms_out = 0;
        return CR_OK;
    }
    double total = 0;
    int parts = 0;
    while (*s) {
        if (!(*s >= '0' && *s <= '9') && *s != '.')
            goto bad;
        errno = 0;
        double v = strtod(s, &end);
        if (end == s || errno || v < 0)
            goto bad;
        s = end;
        const char *u = s;
        while (*s && !(*s >= '0' && *s <= '9') && *s != '.')
            s++;
        double mul = unit_ms(u, (size_t)(s - u));
        if (mul < 0)
            goto bad;
        total += v * mul;
        parts++;
    }
    if (!parts)
        goto bad;
    if (neg && total > 0) {
        *ms_out = -1;
        return CR_OK;
    }
    if (total > (double)INT64_MAX / 2)
        total = (double)INT64_MAX / 2;
    *ms_out = (int64_t)llround(total);
    return CR_OK;
bad:
    return cr_err_set(err, CR_E_INVALID, "invalid duration \"%s\"", text);
}
