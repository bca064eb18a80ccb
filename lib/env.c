/* env.c: CORRAL_/OLLAMA_ settings. */
#include "lib/prelude.h"
#include "lib/env.h"
#include "lib/duration.h"

#include <ctype.h>

static bool get_one(const char *prefix, const char *name, char *buf, size_t cap)
{
    char key[128];
    snprintf(key, sizeof key, "%s%s", prefix, name);
    const char *v = getenv(key);
    if (!v)
        return false;
    while (isspace((unsigned char)*v))
        v++;
    size_t n = strlen(v);
    while (n && isspace((unsigned char)v[n - 1]))
        n--;
    if (n >= 2 && ((v[0] == '"' && v[n - 1] == '"') ||
                   (v[0] == '\'' && v[n - 1] == '\''))) {
        v++;
        n -= 2;
    }
    if (!n || !cap)
        return false;
    if (n >= cap)
        n = cap - 1;
    memcpy(buf, v, n);
    buf[n] = '\0';
    return true;
}

bool cr_env_get(const char *name, char *buf, size_t cap)
{
    if (cap)
        buf[0] = '\0';
    return get_one("CORRAL_", name, buf, cap) ||
           get_one("OLLAMA_", name, buf, cap);
}

void cr_env_source(const char *name, char *buf, size_t cap)
{
    char v[8];
    bool corral = get_one("CORRAL_", name, v, sizeof v) ||
                  !get_one("OLLAMA_", name, v, sizeof v);
    snprintf(buf, cap, "%s%s", corral ? "CORRAL_" : "OLLAMA_", name);
}

long long cr_env_int(const char *name, long long def)
{
    char v[64];
    if (!cr_env_get(name, v, sizeof v))
        return def;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end)
        return def;
    return x;
}

bool cr_env_bool(const char *name, bool def)
{
    char v[64];
    if (!cr_env_get(name, v, sizeof v))
        return def;
    return !(!strcmp(v, "0") || !strcasecmp(v, "false") ||
             !strcasecmp(v, "no") || !strcasecmp(v, "off"));
}

void cr_env_models_dir(char *buf, size_t cap)
{
    if (cr_env_get("MODELS", buf, cap))
        return;
    const char *home = getenv("HOME");
    snprintf(buf, cap, "%s/.corral/models", home && *home ? home : ".");
}

int64_t cr_env_duration_ms(const char *name, int64_t def)
{
    char v[64];
    int64_t ms;
    if (!cr_env_get(name, v, sizeof v) || cr_duration_parse(v, &ms, NULL) ||
        ms < 0)
        return def;
    return ms;
}
