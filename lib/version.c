/* version.c: the Ollama version corral answers as (see version.h). */
#include "lib/prelude.h"
#include "lib/version.h"

#include <ctype.h>

bool cr_version_is_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > CR_VERSION_MAX || !isdigit((unsigned char)s[0]))
        return false;
    size_t i = 0;
    while (i < n && (isdigit((unsigned char)s[i]) || s[i] == '.'))
        i++;
    if (s[i - 1] == '.')
        return false;
    if (i == n)
        return true;
    if (s[i] != '-' || i + 1 == n)
        return false;
    for (i++; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '-')
            return false;
    return true;
}

const char *cr_compat_version(char *buf, size_t cap, bool *bad)
{
    /* Only CORRAL_: Ollama has no such setting to share. */
    const char *v = getenv("CORRAL_COMPAT_VERSION");
    bool set = v && *v;
    bool ok = set && cr_version_is_valid(v);
    if (bad)
        *bad = set && !ok;
    snprintf(buf, cap, "%s", ok ? v : CR_OLLAMA_COMPAT_VERSION);
    return buf;
}
