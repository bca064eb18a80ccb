/* image_fetch.c: see image_fetch.h. */
#include "lib/prelude.h"
#include "services/gateway/image_fetch.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/env.h"

void gw_fetch_limits_from_env(gw_fetch_limits_t *out)
{
    out->enabled = cr_env_bool("REMOTE_IMAGES", false);
    out->allow_private = cr_env_bool("REMOTE_IMAGES_PRIVATE", false);
    out->max_bytes = 20u << 20;
    out->timeout_ms = 15000;
}

typedef struct fetch {
    cr_buf_t body;
    bool too_large;
    bool refused; /* an address the limits do not allow */
    bool allow_private;
} fetch_t;

static bool public_v4(uint32_t a) /* host order */
{
    uint8_t b0 = (uint8_t)(a >> 24), b1 = (uint8_t)(a >> 16);
    return !(b0 == 0 || b0 == 10 || b0 == 127 || b0 >= 224 ||    /* this, private, loop, multicast+ */
             (b0 == 100 && (b1 & 0xc0) == 64) ||                /* 100.64/10 carrier NAT */
             (b0 == 169 && b1 == 254) ||                         /* link-local */
             (b0 == 172 && (b1 & 0xf0) == 16) ||                 /* 172.16/12 */
             (b0 == 192 && b1 == 168) ||                         /* 192.168/16 */
             (b0 == 192 && b1 == 0 && (uint8_t)(a >> 8) == 0) || /* 192.0.0/24 */
             (b0 == 198 && (b1 & 0xfe) == 18));                  /* 198.18/15 */
}

static bool public_addr(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return public_v4(ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr));
    if (sa->sa_family != AF_INET6)
        return false;
    const uint8_t *b = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
    static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (!memcmp(b, mapped, 12))
        return public_v4((uint32_t)b[12] << 24 | (uint32_t)b[13] << 16 |
                         (uint32_t)b[14] << 8 | b[15]);
    bool zero10 = true;
    for (int i = 0; i < 15; i++)
        zero10 &= b[i] == 0;
    if (zero10) /* :: and ::1 */
        return false;
    return !((b[0] & 0xfe) == 0xfc ||                /* fc00::/7 unique local */
             (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) || /* fe80::/10 link-local */
             b[0] == 0xff);                          /* multicast */
}

static curl_socket_t on_open(void *ctx, curlsocktype purpose, struct curl_sockaddr *a)
{
    fetch_t *f = ctx;
    if (purpose != CURLSOCKTYPE_IPCXN ||
        (!f->allow_private && !public_addr(&a->addr))) {
        f->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(a->family, a->socktype, a->protocol);
}

static size_t on_body(char *p, size_t size, size_t n, void *ctx)
{
    fetch_t *f = ctx;
    if (cr_buf_append(&f->body, p, size * n)) {
        f->too_large = true;
        return 0;
    }
    return size * n;
}

cr_status_t gw_image_fetch(const char *url, const gw_fetch_limits_t *lim, char **b64,
                           cr_err_t *err)
{
    *b64 = NULL;
    fetch_t f = {.allow_private = lim->allow_private};
    cr_buf_init(&f.body, lim->max_bytes);
    CURL *c = curl_easy_init();
    if (!c)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 3L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, lim->timeout_ms);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)lim->max_bytes);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, on_open);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &f);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &f);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "corral/" CORRAL_VERSION);
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    cr_status_t st = CR_OK;
    if (f.refused)
        st = cr_err_set(err, CR_E_INVALID, "image URL %s: the address is not a public one "
                        "(CORRAL_REMOTE_IMAGES_PRIVATE allows it)", url);
    else if (f.too_large || rc == CURLE_FILESIZE_EXCEEDED)
        st = cr_err_set(err, CR_E_INVALID, "image URL %s: larger than %zu bytes", url,
                        lim->max_bytes);
    else if (rc != CURLE_OK)
        st = cr_err_set(err, CR_E_INVALID, "image URL %s: %s", url, curl_easy_strerror(rc));
    else if (code != 200)
        st = cr_err_set(err, CR_E_INVALID, "image URL %s: HTTP %ld", url, code);
    else if (!(*b64 = cr_base64_encode((const uint8_t *)f.body.data, f.body.len)))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_buf_free(&f.body);
    return st;
}
