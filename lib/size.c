/* size.c: byte sizes written by people (size.h). */
#include "lib/prelude.h"
#include "lib/size.h"

#include <ctype.h>
#include <math.h>
#include <strings.h>

static const struct {
    const char *name;
    double factor;
} UNITS[] = {
    {"", 1},          {"b", 1},
    {"kb", 1e3},      {"mb", 1e6},      {"gb", 1e9},      {"tb", 1e12},
    {"kib", 1024.0},  {"mib", 1048576.0}, {"gib", 1073741824.0},
    {"tib", 1099511627776.0},
};

cr_status_t cr_size_parse(const char *text, int64_t *bytes_out, cr_err_t *err)
{
    const char *p = text ? text : "";
    while (isspace((unsigned char)*p))
        p++;
    /* Digits and at most one point: no sign, exponent, hex, inf or nan. */
    const char *num = p;
    size_t digits = 0, points = 0;
    for (; isdigit((unsigned char)*p) || *p == '.'; p++) {
        if (*p == '.')
            points++;
        else
            digits++;
    }
    size_t num_len = (size_t)(p - num);
    char buf[64];
    if (!digits || points > 1 || num_len >= sizeof buf)
        return cr_err_set(err, CR_E_INVALID,
                          "invalid size '%s' (want a number of bytes or "
                          "one with a unit: KB, MB, GB, TB, KiB, MiB, GiB, "
                          "TiB)",
                          text ? text : "");
    memcpy(buf, num, num_len);
    buf[num_len] = '\0';
    double v = strtod(buf, NULL);
    while (*p == ' ')
        p++;
    const char *unit = p;
    size_t unit_len = strlen(unit);
    while (unit_len && isspace((unsigned char)unit[unit_len - 1]))
        unit_len--;
    for (size_t i = 0; i < CR_ARRAY_LEN(UNITS); i++) {
        if (strlen(UNITS[i].name) != unit_len ||
            strncasecmp(unit, UNITS[i].name, unit_len))
            continue;
        double bytes = floor(v * UNITS[i].factor);
        /* 2^63 is exactly representable: anything at or past it overflows. */
        if (!(bytes < 9223372036854775808.0))
            return cr_err_set(err, CR_E_INVALID, "size '%s' is too large",
                              text);
        *bytes_out = (int64_t)bytes;
        return CR_OK;
    }
    return cr_err_set(err, CR_E_INVALID,
                      "invalid size '%s': unknown unit '%.*s' (want KB, MB, "
                      "GB, TB, KiB, MiB, GiB or TiB)",
                      text, (int)unit_len, unit);
}
