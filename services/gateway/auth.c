/* auth.c: the API key check (see auth.h). */
#include "lib/prelude.h"
#include "services/gateway/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <strings.h>

bool gw_auth_required(const char *key, const char *path)
{
    /* "/" and the readiness probe say only whether corral is up; the
     * console's files (console.h) hold no data, and the page they make
     * asks for the key before it calls the API. */
    return key && *key && path && strcmp(path, "/") != 0 &&
           strcmp(path, "/api/health") != 0 && strcmp(path, "/ui") != 0 &&
           strncmp(path, "/ui/", 4) != 0;
}

static bool same_key(const char *key, const char *given)
{
    /* Hashing first makes the compared lengths equal and the time
     * independent of where the texts differ. */
    unsigned char a[SHA256_DIGEST_LENGTH], b[SHA256_DIGEST_LENGTH];
    SHA256((const unsigned char *)key, strlen(key), a);
    SHA256((const unsigned char *)given, strlen(given), b);
    return CRYPTO_memcmp(a, b, sizeof a) == 0;
}

bool gw_auth_check(const char *key, const char *authorization)
{
    if (!key || !*key || !authorization)
        return false;
    if (strncasecmp(authorization, "Bearer ", 7) != 0)
        return false;
    const char *given = authorization + 7;
    while (*given == ' ')
        given++;
    return same_key(key, given);
}

bool gw_auth_check_api_key(const char *key, const char *x_api_key)
{
    if (!key || !*key || !x_api_key)
        return false;
    return same_key(key, x_api_key);
}
