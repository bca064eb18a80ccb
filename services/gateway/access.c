/* access.c: CORS origins, the Host check and OLLAMA_HOST (see access.h). */
#include "lib/prelude.h"
#include "services/gateway/access.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#define MAX_ORIGINS 256
#define ORIGIN_MAX 512

struct gw_cors {
    size_t n;
    bool all;                       /* "*" configured */
    char pat[MAX_ORIGINS][ORIGIN_MAX]; /* lower-cased patterns */
};

static void add_origin(gw_cors_t *c, const char *s, size_t n)
{
    while (n && isspace((unsigned char)*s)) {
        s++;
        n--;
    }
    while (n && isspace((unsigned char)s[n - 1]))
        n--;
    if (!n || c->n >= MAX_ORIGINS || n >= ORIGIN_MAX)
        return;
    if (n == 1 && s[0] == '*') {
        c->all = true;
        return;
    }
    for (size_t i = 0; i < n; i++)
        c->pat[c->n][i] = (char)tolower((unsigned char)s[i]);
    c->pat[c->n][n] = '\0';
    c->n++;
}

gw_cors_t *gw_cors_new(const char *extra)
{
    gw_cors_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    for (const char *p = extra; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        add_origin(c, p, n);
        p = comma ? comma + 1 : p + n;
    }
    static const char *const hosts[] = {"localhost", "127.0.0.1", "0.0.0.0"};
    static const char *const schemes_hp[] = {"http://", "https://"};
    for (size_t i = 0; i < CR_ARRAY_LEN(hosts); i++) {
        for (size_t f = 0; f < 2 * CR_ARRAY_LEN(schemes_hp); f++) {
            char o[64];
            int n = snprintf(o, sizeof o, "%s%s%s", schemes_hp[f % 2],
                             hosts[i], f >= 2 ? ":*" : "");
            add_origin(c, o, (size_t)n);
        }
    }
    static const char *const schemes[] = {
        "app://*", "file://*", "tauri://*", "vscode-webview://*",
        "vscode-file://*",
        /* gin-contrib/cors AllowBrowserExtensions */
        "chrome-extension://*", "safari-extension://*", "moz-extension://*",
        "ms-browser-extension://*"};
    for (size_t i = 0; i < CR_ARRAY_LEN(schemes); i++)
        add_origin(c, schemes[i], strlen(schemes[i]));
    return c;
}

void gw_cors_destroy(gw_cors_t **self_p)
{
    if (self_p && *self_p) {
        free(*self_p);
        *self_p = NULL;
    }
}

bool gw_cors_allows_all(const gw_cors_t *c)
{
    return c->all;
}

/* Pattern with at most one '*': prefix and suffix must both match. */
static bool match(const char *pat, const char *s)
{
    const char *star = strchr(pat, '*');
    if (!star)
        return !strcmp(pat, s);
    size_t pre = (size_t)(star - pat), suf = strlen(star + 1), n = strlen(s);
    return n >= pre + suf && !memcmp(s, pat, pre) &&
           !memcmp(s + n - suf, star + 1, suf);
}

bool gw_cors_allowed(const gw_cors_t *c, const char *origin)
{
    if (c->all)
        return true;
    char low[ORIGIN_MAX];
    size_t n = strlen(origin);
    if (n >= sizeof low)
        return false;
    for (size_t i = 0; i <= n; i++)
        low[i] = (char)tolower((unsigned char)origin[i]);
    for (size_t i = 0; i < c->n; i++)
        if (match(c->pat[i], low))
            return true;
    return false;
}

/* ---- the Host check ---- */

static bool v4_allowed(const struct in_addr *a)
{
    uint32_t x = ntohl(a->s_addr);
    return (x >> 24) == 127 ||           /* loopback */
           (x >> 24) == 10 ||            /* private */
           (x >> 20) == (172u << 4 | 1) || /* 172.16/12 */
           (x >> 16) == (192u << 8 | 168) || /* 192.168/16 */
           x == 0;                       /* unspecified */
}

static bool v6_allowed(const struct in6_addr *a)
{
    static const struct in6_addr zero;
    if (!memcmp(a, &zero, sizeof zero))
        return true; /* :: */
    if (IN6_IS_ADDR_LOOPBACK(a))
        return true;
    return (a->s6_addr[0] & 0xfe) == 0xfc; /* fc00::/7 unique local */
}

/* An address of one of this machine's interfaces. */
static bool is_local_ip(int family, const void *addr)
{
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return false;
    bool found = false;
    for (struct ifaddrs *i = list; i && !found; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != family)
            continue;
        if (family == AF_INET)
            found = !memcmp(&((struct sockaddr_in *)i->ifa_addr)->sin_addr,
                            addr, sizeof(struct in_addr));
        else
            found = !memcmp(&((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr,
                            addr, sizeof(struct in6_addr));
    }
    freeifaddrs(list);
    return found;
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

bool gw_host_allowed(const char *header)
{
    char host[512];
    if (!header)
        header = "";
    size_t n = strlen(header);
    if (n >= sizeof host)
        return false;
    /* Strip the port: "[v6]:port", "[v6]", "name:port". */
    if (header[0] == '[') {
        const char *end = strchr(header, ']');
        if (!end)
            return false;
        n = (size_t)(end - header - 1);
        memcpy(host, header + 1, n);
    } else {
        const char *colon = strchr(header, ':');
        if (colon && !strchr(colon + 1, ':'))
            n = (size_t)(colon - header);
        memcpy(host, header, n);
    }
    host[n] = '\0';
    for (size_t i = 0; i < n; i++)
        host[i] = (char)tolower((unsigned char)host[i]);

    if (!host[0] || !strcmp(host, "localhost"))
        return true;
    struct in_addr a4;
    struct in6_addr a6;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return v4_allowed(&a4) || is_local_ip(AF_INET, &a4);
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return v6_allowed(&a6) || is_local_ip(AF_INET6, &a6);
    char self[256];
    if (gethostname(self, sizeof self) == 0) {
        self[sizeof self - 1] = '\0';
        if (!strcasecmp(self, host))
            return true;
    }
    return ends_with(host, ".localhost") || ends_with(host, ".local") ||
           ends_with(host, ".internal");
}

/* ---- OLLAMA_HOST ---- */

/* Go's net.SplitHostPort: false on "missing port", "too many colons", ... */
static bool split_host_port(const char *hp, char *host, size_t cap,
                            char *port, size_t pcap)
{
    const char *h, *p;
    size_t hn;
    if (hp[0] == '[') {
        const char *end = strchr(hp, ']');
        if (!end || end[1] != ':')
            return false;
        h = hp + 1;
        hn = (size_t)(end - h);
        p = end + 2;
    } else {
        const char *colon = strrchr(hp, ':');
        if (!colon || strchr(hp, ':') != colon)
            return false;
        h = hp;
        hn = (size_t)(colon - hp);
        p = colon + 1;
    }
    if (hn >= cap || strlen(p) >= pcap)
        return false;
    memcpy(host, h, hn);
    host[hn] = '\0';
    snprintf(port, pcap, "%s", p);
    return true;
}

void gw_listen_split(const char *spec, char *host_out, size_t cap,
                     uint16_t *port_out)
{
    char buf[512];
    const char *s = spec ? spec : "";
    while (isspace((unsigned char)*s))
        s++;
    snprintf(buf, sizeof buf, "%s", s);
    size_t n = strlen(buf);
    while (n && isspace((unsigned char)buf[n - 1]))
        buf[--n] = '\0';

    unsigned defport = 11434;
    char *hp = buf;
    char *sep = strstr(buf, "://");
    if (sep) {
        *sep = '\0';
        if (!strcmp(buf, "http"))
            defport = 80;
        else if (!strcmp(buf, "https"))
            defport = 443;
        hp = sep + 3;
    } else if (!strcmp(buf, "ollama.com")) {
        defport = 443;
    }
    char *slash = strchr(hp, '/');
    if (slash)
        *slash = '\0';

    char host[300], port[32];
    if (!split_host_port(hp, host, sizeof host, port, sizeof port)) {
        snprintf(port, sizeof port, "%u", defport);
        /* A bare IP (brackets allowed) or name; empty means 127.0.0.1. */
        size_t hl = strlen(hp);
        if (hl >= 2 && hp[0] == '[' && hp[hl - 1] == ']') {
            hp[hl - 1] = '\0';
            hp++;
        }
        size_t len = strlen(hp);
        if (!len)
            snprintf(host, sizeof host, "127.0.0.1");
        else if (len < sizeof host)
            memcpy(host, hp, len + 1);
        else
            snprintf(host, sizeof host, "127.0.0.1"); /* absurdly long */
    }
    char *end;
    errno = 0;
    long pv = strtol(port, &end, 10);
    if (errno || end == port || *end || pv < 0 || pv > 65535)
        pv = defport;
    snprintf(host_out, cap, "%s", host);
    *port_out = (uint16_t)pv;
}

cr_status_t gw_listen_resolve(const char *host, uint16_t port,
                              struct sockaddr_storage *ss, socklen_t *len,
                              bool *loopback, cr_err_t *err)
{
    memset(ss, 0, sizeof *ss);
    *loopback = false;
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (!host[0] || inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        if (!host[0])
            s4->sin_addr.s_addr = htonl(INADDR_ANY);
        s4->sin_family = AF_INET;
        s4->sin_port = htons(port);
        *len = sizeof *s4;
        *loopback = (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
        return CR_OK;
    }
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons(port);
        *len = sizeof *s6;
        *loopback = IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr);
        return CR_OK;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return cr_err_set(err, CR_E_INVALID,
                          "cannot resolve listen host %s: %s", host,
                          gai_strerror(rc));
    /* Prefer IPv4 ("localhost" gives both). */
    struct addrinfo *pick = res;
    for (struct addrinfo *a = res; a; a = a->ai_next)
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    *len = pick->ai_addrlen;
    freeaddrinfo(res);
    char ip[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET) {
        s4->sin_port = htons(port);
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof ip);
        return gw_listen_resolve(ip, port, ss, len, loopback, err);
    }
    s6->sin6_port = htons(port);
    inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof ip);
    return gw_listen_resolve(ip, port, ss, len, loopback, err);
}
