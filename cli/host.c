/* host.c: OLLAMA_HOST parsing (see host.h). */
#include "lib/prelude.h"
#include "cli/host.h"
#include "lib/env.h"

#include <arpa/inet.h>
#include <ctype.h>

/* Splits "host:port" or "[v6]:port" as Go's net.SplitHostPort does; false
 * when there is no port or too many colons. */
static bool split_host_port(const char *hp, char *host, size_t host_cap,
                            char *port, size_t port_cap)
{
    const char *colon;
    const char *h = hp;
    size_t hlen;
    if (hp[0] == '[') {
        const char *end = strchr(hp, ']');
        if (!end || end[1] != ':')
            return false;
        h = hp + 1;
        hlen = (size_t)(end - h);
        colon = end + 1;
        if (memchr(h, '[', hlen))
            return false;
    } else {
        colon = strrchr(hp, ':');
        if (!colon)
            return false;
        hlen = (size_t)(colon - hp);
        if (memchr(hp, ':', hlen) || memchr(hp, '[', hlen) || memchr(hp, ']', hlen))
            return false;
    }
    const char *p = colon + 1;
    if (strchr(p, '[') || strchr(p, ']'))
        return false;
    if (hlen >= host_cap || strlen(p) >= port_cap)
        return false;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    snprintf(port, port_cap, "%s", p);
    return true;
}

/* If s is an IP address, writes its canonical text to out and returns true. */
static bool parse_ip(const char *s, char *out, size_t cap)
{
    unsigned char addr[16];
    char text[INET6_ADDRSTRLEN];
    if (inet_pton(AF_INET, s, addr) == 1) {
        inet_ntop(AF_INET, addr, text, sizeof text);
    } else if (inet_pton(AF_INET6, s, addr) == 1) {
        static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!memcmp(addr, v4mapped, 12))
            inet_ntop(AF_INET, addr + 12, text, sizeof text); /* as Go prints it */
        else
            inet_ntop(AF_INET6, addr, text, sizeof text);
    } else {
        return false;
    }
    snprintf(out, cap, "%s", text);
    return true;
}

/* Go's strconv.ParseInt(s, 10, 32) then the 0..65535 check. */
static bool parse_port(const char *s, int *out)
{
    const char *p = s;
    if (*p == '+' || *p == '-')
        p++;
    if (!*p)
        return false;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q))
            return false;
    errno = 0;
    long v = strtol(s, NULL, 10);
    if (errno || v < 0 || v > 65535)
        return false;
    *out = (int)v;
    return true;
}

cr_status_t cli_host_parse(const char *value, cli_host_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    if (!value)
        value = "";
    while (isspace((unsigned char)*value))
        value++;
    size_t n = strlen(value);
    while (n && isspace((unsigned char)value[n - 1]))
        n--;
    if (n > CLI_HOST_MAX)
        return cr_err_set(err, CR_E_TOO_LARGE, "OLLAMA_HOST: %zu bytes, at most %d", n,
                          CLI_HOST_MAX);
    char s[CLI_HOST_MAX + 1];
    memcpy(s, value, n);
    s[n] = '\0';

    int def_port = CLI_HOST_DEFAULT_PORT;
    char hostport[CLI_HOST_MAX + 1];
    const char *sep = strstr(s, "://");
    if (!sep) {
        snprintf(out->scheme, sizeof out->scheme, "http");
        snprintf(hostport, sizeof hostport, "%s", s);
        if (!strcmp(s, "ollama.com")) {
            snprintf(out->scheme, sizeof out->scheme, "https");
            snprintf(hostport, sizeof hostport, "ollama.com:443");
        }
    } else {
        size_t slen = (size_t)(sep - s);
        if (slen == 0 || slen >= sizeof out->scheme)
            return cr_err_set(err, CR_E_INVALID, "OLLAMA_HOST: bad scheme in \"%s\"", s);
        for (size_t i = 0; i < slen; i++) {
            char c = s[i];
            if (!isalnum((unsigned char)c) && c != '+' && c != '-' && c != '.')
                return cr_err_set(err, CR_E_INVALID, "OLLAMA_HOST: bad scheme in \"%s\"", s);
        }
        memcpy(out->scheme, s, slen);
        out->scheme[slen] = '\0';
        if (!strcmp(out->scheme, "http"))
            def_port = 80;
        else if (!strcmp(out->scheme, "https"))
            def_port = 443;
        snprintf(hostport, sizeof hostport, "%s", sep + 3);
    }

    char *slash = strchr(hostport, '/');
    if (slash) {
        *slash = '\0';
        size_t plen = strlen(slash + 1);
        while (plen && slash[plen] == '/') /* drop trailing slashes */
            plen--;
        if (plen)
            snprintf(out->path, sizeof out->path, "/%.*s", (int)plen, slash + 1);
    }

    char host[CLI_HOST_MAX + 1], port[CLI_HOST_MAX + 1];
    out->port = def_port;
    if (split_host_port(hostport, host, sizeof host, port, sizeof port)) {
        snprintf(out->host, sizeof out->host, "%s", host);
        if (!parse_port(port, &out->port))
            out->port = def_port;
    } else {
        /* No port: an IP (brackets trimmed), else the text itself. */
        char trimmed[CLI_HOST_MAX + 1];
        const char *t = hostport;
        while (*t == '[' || *t == ']')
            t++;
        size_t tl = strlen(t);
        while (tl && (t[tl - 1] == '[' || t[tl - 1] == ']'))
            tl--;
        memcpy(trimmed, t, tl);
        trimmed[tl] = '\0';
        if (parse_ip(trimmed, out->host, sizeof out->host))
            ;
        else if (hostport[0])
            snprintf(out->host, sizeof out->host, "%s", hostport);
        else
            snprintf(out->host, sizeof out->host, "127.0.0.1");
    }

    /* Wildcards are for binding; a client dials loopback. */
    char canon[CLI_HOST_MAX];
    if (!out->host[0] || !strcmp(out->host, "0.0.0.0"))
        snprintf(out->host, sizeof out->host, "127.0.0.1");
    else if (parse_ip(out->host, canon, sizeof canon) && !strcmp(canon, "::"))
        snprintf(out->host, sizeof out->host, "::1");

    bool v6 = strchr(out->host, ':') != NULL;
    snprintf(out->url, sizeof out->url, "%s://%s%s%s:%d%s", out->scheme, v6 ? "[" : "",
             out->host, v6 ? "]" : "", out->port, out->path);
    return CR_OK;
}

cr_status_t cli_host_from_env(cli_host_t *out, cr_err_t *err)
{
    char v[CLI_HOST_MAX + 2];
    cr_env_get("HOST", v, sizeof v);
    if (strlen(v) > CLI_HOST_MAX)
        return cr_err_set(err, CR_E_TOO_LARGE, "OLLAMA_HOST: longer than %d bytes",
                          CLI_HOST_MAX);
    return cli_host_parse(v, out, err);
}
