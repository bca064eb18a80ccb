/* sd_notify.c: systemd's notification protocol over an AF_UNIX datagram. */
#include "lib/prelude.h"
#include "lib/sd_notify.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

bool cr_sd_notify_enabled(void)
{
    const char *path = getenv("NOTIFY_SOCKET");
    return path && *path;
}

/* Fills sa/len from a NOTIFY_SOCKET value: "/abs/path" or "@abstract". */
static cr_status_t notify_addr(const char *path, struct sockaddr_un *sa,
                               socklen_t *len, cr_err_t *err)
{
    size_t plen = strlen(path);
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    if (path[0] == '@') {
        /* Abstract namespace: a leading NUL, then the name; the length
         * counts exactly the bytes used (no terminating NUL). */
        if (plen < 2)
            return cr_err_set(err, CR_E_INVALID,
                              "NOTIFY_SOCKET '@' names no abstract socket");
        if (plen > sizeof sa->sun_path)
            return cr_err_set(err, CR_E_TOO_LARGE,
                              "NOTIFY_SOCKET is %zu bytes, over the %zu a "
                              "socket address holds", plen,
                              sizeof sa->sun_path);
        memcpy(sa->sun_path + 1, path + 1, plen - 1);
        *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen);
        return CR_OK;
    }
    if (path[0] != '/')
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "NOTIFY_SOCKET '%.200s' is neither an absolute "
                          "path nor an '@' abstract name", path);
    if (plen >= sizeof sa->sun_path)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "NOTIFY_SOCKET is %zu bytes, over the %zu a socket "
                          "path holds", plen, sizeof sa->sun_path - 1);
    memcpy(sa->sun_path, path, plen + 1);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + plen + 1);
    return CR_OK;
}

cr_status_t cr_sd_notify(const char *state, cr_err_t *err)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (!path || !*path)
        return CR_OK;
    size_t len = state ? strlen(state) : 0;
    if (len == 0)
        return cr_err_set(err, CR_E_INVALID, "sd_notify: empty state");
    if (len > CR_SD_NOTIFY_MAX)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "sd_notify: state is %zu bytes, over %d", len,
                          CR_SD_NOTIFY_MAX);

    struct sockaddr_un sa;
    socklen_t sa_len = 0;
    cr_status_t st = notify_addr(path, &sa, &sa_len, err);
    if (st)
        return st;

    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return cr_err_set(err, CR_E_IO, "sd_notify: socket: %s",
                          strerror(errno));
    ssize_t n;
    do {
        n = sendto(fd, state, len, MSG_NOSIGNAL, (struct sockaddr *)&sa,
                   sa_len);
    } while (n < 0 && errno == EINTR);
    int e = errno;
    close(fd);
    if (n < 0)
        return cr_err_set(err, CR_E_IO, "sd_notify: send to %.200s: %s",
                          path, strerror(e));
    if ((size_t)n != len)
        return cr_err_set(err, CR_E_IO,
                          "sd_notify: short send to %.200s (%zd of %zu "
                          "bytes)", path, n, len);
    return CR_OK;
}

cr_status_t cr_sd_notify_ready(cr_err_t *err)
{
    return cr_sd_notify("READY=1", err);
}

cr_status_t cr_sd_notify_stopping(cr_err_t *err)
{
    return cr_sd_notify("STOPPING=1", err);
}

cr_status_t cr_sd_notify_status(const char *text, cr_err_t *err)
{
    if (!cr_sd_notify_enabled())
        return CR_OK;
    char msg[sizeof "STATUS=" + CR_SD_NOTIFY_STATUS_MAX];
    size_t n = sizeof "STATUS=" - 1;
    memcpy(msg, "STATUS=", n);
    size_t tlen = text ? strlen(text) : 0;
    if (tlen > CR_SD_NOTIFY_STATUS_MAX) {
        /* Cut before a UTF-8 continuation byte never splits a character. */
        tlen = CR_SD_NOTIFY_STATUS_MAX;
        while (tlen > 0 && ((unsigned char)text[tlen] & 0xC0) == 0x80)
            tlen--;
    }
    for (size_t i = 0; i < tlen; i++) {
        unsigned char c = (unsigned char)text[i];
        msg[n++] = (c < 0x20 || c == 0x7F) ? ' ' : (char)c;
    }
    msg[n] = '\0';
    /* "STATUS=" alone is valid: it clears the shown status. */
    return cr_sd_notify(msg, err);
}
