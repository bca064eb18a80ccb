/* wire.c: bus messages on a plain Unix stream socket (see wire.h). */
#include "lib/prelude.h"
#include "proto/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define READ_BYTES (64 * 1024) /* one read's worth */

const char *bus_wire_path(const char *endpoint)
{
    size_t k = strlen(BUS_WIRE_SCHEME);
    if (!endpoint || strncmp(endpoint, BUS_WIRE_SCHEME, k))
        return NULL;
    const char *path = endpoint + k;
    size_t n = strlen(path);
    if (!n || n >= sizeof ((struct sockaddr_un *)0)->sun_path)
        return NULL;
    return path;
}

/* A non-blocking stream socket (*fd_out) and endpoint's address. */
static cr_status_t unix_socket(const char *endpoint, struct sockaddr_un *sa, int *fd_out,
                               cr_err_t *err)
{
    *fd_out = -1;
    const char *path = bus_wire_path(endpoint);
    if (!path)
        return cr_err_set(err, CR_E_INVALID, "'%s' is not a unix:// socket endpoint",
                          endpoint ? endpoint : "");
    memset(sa, 0, sizeof *sa);
    sa->sun_family = AF_UNIX;
    memcpy(sa->sun_path, path, strlen(path) + 1);
    *fd_out = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (*fd_out < 0)
        return cr_err_set(err, CR_E_IO, "socket: %s", strerror(errno));
    return CR_OK;
}

/* Closes *fd_out after a failed step: st, with what errno said. */
static cr_status_t failed(int *fd_out, cr_status_t st, const char *what, const char *endpoint,
                          cr_err_t *err)
{
    int e = errno;
    close(*fd_out);
    *fd_out = -1;
    return cr_err_set(err, st, "cannot %s %s: %s", what, endpoint, strerror(e));
}

cr_status_t bus_wire_listen(const char *endpoint, int *fd_out, cr_err_t *err)
{
    struct sockaddr_un sa;
    cr_status_t st = unix_socket(endpoint, &sa, fd_out, err);
    if (st)
        return st;
    /* Left by a runner that was killed: nobody listens there any more
     * (runner ids are never reused). */
    unlink(sa.sun_path);
    if (bind(*fd_out, (struct sockaddr *)&sa, sizeof sa) || listen(*fd_out, BUS_WIRE_BACKLOG))
        return failed(fd_out, CR_E_IO, "listen on", endpoint, err);
    return CR_OK;
}

cr_status_t bus_wire_connect(const char *endpoint, int *fd_out, cr_err_t *err)
{
    struct sockaddr_un sa;
    cr_status_t st = unix_socket(endpoint, &sa, fd_out, err);
    if (st)
        return st;
    /* A Unix socket connects at once or not at all: EAGAIN is a full
     * backlog, not a connection in progress. */
    if (connect(*fd_out, (struct sockaddr *)&sa, sizeof sa))
        return failed(fd_out, CR_E_UNAVAILABLE, "connect to", endpoint, err);
    return CR_OK;
}

void bus_wire_header(uint8_t out[BUS_WIRE_HEADER_BYTES], size_t n)
{
    for (int i = 0; i < BUS_WIRE_HEADER_BYTES; i++)
        out[i] = (uint8_t)(n >> (8 * i));
}

cr_status_t bus_wire_encode(const msg_t *m, cr_buf_t *out, cr_err_t *err)
{
    size_t at = out->len;
    uint8_t head[BUS_WIRE_HEADER_BYTES] = {0};
    cr_status_t st = cr_buf_append(out, head, sizeof head);
    if (st)
        return cr_err_set(err, st, "no room for a message");
    st = msg_encode(m, out, err);
    if (st) {
        out->len = at;
        return st;
    }
    bus_wire_header((uint8_t *)out->data + at, out->len - at - BUS_WIRE_HEADER_BYTES);
    return CR_OK;
}

ssize_t bus_wire_write(int fd, const void *p1, size_t n1, const void *p2, size_t n2)
{
    struct iovec iov[2] = {{(void *)p1, n1}, {(void *)p2, n2}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = n2 ? 2 : 1};
    for (;;) {
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
    }
}

void bus_wire_reader_init(bus_wire_reader_t *r)
{
    cr_buf_init(&r->buf, MSG_FRAME_MAX + BUS_WIRE_HEADER_BYTES + READ_BYTES);
    r->off = 0;
}

void bus_wire_reader_free(bus_wire_reader_t *r)
{
    cr_buf_free(&r->buf);
    r->off = 0;
}

bus_wire_fill_t bus_wire_reader_fill(bus_wire_reader_t *r, int fd)
{
    /* What was decoded goes; a partial frame moves to the front. */
    if (r->off) {
        memmove(r->buf.data, r->buf.data + r->off, r->buf.len - r->off);
        r->buf.len -= r->off;
        r->off = 0;
    }
    if (cr_buf_reserve(&r->buf, READ_BYTES))
        return BUS_WIRE_EOF; /* a frame past the bound: bus_wire_reader_next says so first */
    for (;;) {
        ssize_t n = read(fd, r->buf.data + r->buf.len, READ_BYTES);
        if (n > 0) {
            r->buf.len += (size_t)n;
            return BUS_WIRE_READ;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return BUS_WIRE_EMPTY;
        return BUS_WIRE_EOF;
    }
}

cr_status_t bus_wire_reader_next(bus_wire_reader_t *r, msg_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    size_t have = r->buf.len - r->off;
    if (have < BUS_WIRE_HEADER_BYTES)
        return CR_E_TIMEOUT;
    const uint8_t *p = (const uint8_t *)r->buf.data + r->off;
    size_t n = 0;
    for (int i = 0; i < BUS_WIRE_HEADER_BYTES; i++)
        n |= (size_t)p[i] << (8 * i);
    if (n > MSG_FRAME_MAX) {
        /* The rest of the stream cannot be framed: it is all dropped. */
        r->off = r->buf.len;
        return cr_err_set(err, CR_E_TOO_LARGE, "a frame of %zu bytes is over the %u-byte limit", n,
                          (unsigned)MSG_FRAME_MAX);
    }
    if (have - BUS_WIRE_HEADER_BYTES < n)
        return CR_E_TIMEOUT;
    r->off += BUS_WIRE_HEADER_BYTES + n;
    return msg_decode(p + BUS_WIRE_HEADER_BYTES, n, out, err);
}
