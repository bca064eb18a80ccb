/* unicode.c: UTF-8 decoding and category lookups over the generated tables
 * in unicode_data.c. Owns no state. */
#include "lib/prelude.h"
#include "services/runner/text/unicode.h"

#include "lib/gotext.h"

size_t rn_utf8_lead_len(uint8_t b)
{
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[b >> 4];
}

size_t rn_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    size_t len = cr_utf8_decode(s, n, cp);
    if (len)
        return len;
    *cp = RN_UTF8_RAW + s[0];
    return 1;
}

size_t rn_utf8_encode(uint32_t cp, char out[4])
{
    if (RN_UTF8_IS_RAW(cp)) {
        out[0] = (char)(uint8_t)(cp - RN_UTF8_RAW);
        return 1;
    }
    return cr_utf8_encode(cp, out);
}

/* True if s[0..n) (n < the announced length) is a prefix that more bytes
 * could complete into a valid sequence. */
static bool is_valid_prefix(const uint8_t *s, size_t n)
{
    uint8_t b0 = s[0];
    size_t len = rn_utf8_lead_len(b0);
    if (b0 < 0xC2 || b0 > 0xF4 || n >= len)
        return false;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return false;
    if (n >= 2) {
        /* The second byte narrows the ranges that rule out overlongs,
         * surrogates and values past U+10FFFF. */
        uint8_t b1 = s[1];
        if (b0 == 0xE0 && b1 < 0xA0)
            return false;
        if (b0 == 0xED && b1 > 0x9F)
            return false;
        if (b0 == 0xF0 && b1 < 0x90)
            return false;
        if (b0 == 0xF4 && b1 > 0x8F)
            return false;
    }
    return true;
}

size_t rn_utf8_complete_len(const uint8_t *s, size_t n)
{
    /* An incomplete tail is at most 3 bytes: look for its lead byte. */
    for (size_t back = 1; back <= 3 && back <= n; back++) {
        uint8_t b = s[n - back];
        if ((b & 0xC0) == 0x80)
            continue; /* continuation: keep looking for the lead */
        if (b >= 0xC0 && is_valid_prefix(s + n - back, back))
            return n - back;
        return n;
    }
    return n;
}

bool rn_utf8_valid(const char *p, size_t n)
{
    const uint8_t *s = (const uint8_t *)p;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += rn_utf8_decode(s + i, n - i, &cp);
        if (RN_UTF8_IS_RAW(cp))
            return false;
    }
    return true;
}

rn_ucat_t rn_unicode_cat(uint32_t cp)
{
    if (cp > 0x10FFFF)
        return RN_UCAT_UNASSIGNED;
    /* Last run whose start is <= cp. */
    size_t lo = 0, hi = rn_unicode_runs_n_g;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if ((rn_unicode_runs_g[mid] >> 3) <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return (rn_ucat_t)(rn_unicode_runs_g[lo] & 7u);
}

bool rn_unicode_is_space(uint32_t cp)
{
    if (cp < 128)
        return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
    for (size_t i = 0; i < rn_unicode_space_n_g; i++)
        if (cp >= rn_unicode_space_g[i][0] && cp <= rn_unicode_space_g[i][1])
            return true;
    return false;
}

uint32_t rn_unicode_nfd_first(uint32_t cp)
{
    if (cp < 0xC0 || cp > 0x10FFFF)
        return cp; /* ASCII and Latin-1 controls/symbols have no NFD change */
    /* Last range whose first code point is <= cp. */
    size_t lo = 0, hi = rn_unicode_nfd_n_g;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rn_unicode_nfd_g[mid][0] <= cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return cp;
    const uint32_t *r = rn_unicode_nfd_g[lo - 1];
    return cp <= r[1] ? r[2] : cp;
}

uint32_t rn_unicode_tolower(uint32_t cp)
{
    if (cp < 128)
        return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    size_t lo = 0, hi = rn_unicode_lower_n_g;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (rn_unicode_lower_g[mid][0] < cp)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < rn_unicode_lower_n_g && rn_unicode_lower_g[lo][0] == cp)
        return rn_unicode_lower_g[lo][1];
    return cp;
}
