/* bus.c: moving encoded messages over CZMQ sockets, and where sockets live.
 *
 * Owns endpoint names (the runtime dir is lib/runtime_dir.c's), framing ([frame] on a DEALER,
 * [identity][frame] on a ROUTER) and request ids. The codec is msg.c's;
 * which socket a service binds, and what it answers, are the service's.
 * Only CZMQ's stable API is used (zsock, zmsg, zframe, zpoller). */
#include "lib/prelude.h"
#include "proto/bus.h"
#include "proto/bus_poll.h"
#include "lib/runtime_dir.h"

#include <fcntl.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define PATH_CAP 4096
#define NAME_MAX_LEN 32

/* ---- endpoints ---- */

int bus_listen(zsock_t *sock, const char *endpoint)
{
    zsock_set_backlog(sock, BUS_LISTEN_BACKLOG);
    return zsock_bind(sock, "%s", endpoint) < 0 ? -1 : 0;
}

cr_status_t bus_endpoint(const char *name, char *out, size_t cap,
                         cr_err_t *err)
{
    size_t nlen = name ? strlen(name) : 0;
    if (nlen == 0 || nlen > NAME_MAX_LEN)
        return cr_err_set(err, CR_E_INVALID, "bad bus endpoint name");
    char var[NAME_MAX_LEN + 32] = "CORRAL_";
    size_t j = strlen(var);
    for (size_t i = 0; i < nlen; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return cr_err_set(err, CR_E_INVALID,
                              "bad bus endpoint name '%s'", name);
        var[j++] = (c >= 'a' && c <= 'z') ? (char)(c - 'a' + 'A') : c;
    }
    memcpy(var + j, "_ENDPOINT", sizeof "_ENDPOINT");

    const char *v = getenv(var);
    if (v && *v) {
        if (!strstr(v, "://"))
            return cr_err_set(err, CR_E_INVALID,
                              "%s='%s' is not an endpoint (want "
                              "tcp://host:port or ipc:///path)", var, v);
        if (strlen(v) >= cap)
            return cr_err_set(err, CR_E_TOO_LARGE, "%s is too long", var);
        memcpy(out, v, strlen(v) + 1);
        return CR_OK;
    }

    char dir[PATH_CAP];
    cr_status_t st = cr_runtime_dir(dir, sizeof dir, err);
    if (st)
        return st;
    char sock[PATH_CAP + NAME_MAX_LEN + 8];
    int n = snprintf(sock, sizeof sock, "%s/%s.sock", dir, name);
    struct sockaddr_un sun;
    if (n < 0 || (size_t)n >= sizeof sun.sun_path)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "socket path %s is %d bytes, over the %zu a Unix "
                          "socket allows; set CORRAL_RUNTIME_DIR to a shorter "
                          "dir or %s", sock, n, sizeof sun.sun_path - 1, var);
    n = snprintf(out, cap, "ipc://%s", sock);
    if (n < 0 || (size_t)n >= cap)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "endpoint ipc://%s does not fit %zu bytes", sock,
                          cap);
    return CR_OK;
}

/* ---- sending and receiving ---- */

static bool is_router(zsock_t *sock)
{
    return zsock_type(sock) == ZMQ_ROUTER;
}

cr_status_t bus_encode_frame(const msg_t *m, zframe_t **out, cr_err_t *err)
{
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_status_t st = msg_encode(m, &b, err);
    if (st) {
        cr_buf_free(&b);
        return st;
    }
    *out = zframe_new(b.data, b.len);
    cr_buf_free(&b);
    if (!*out)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for a frame");
    return CR_OK;
}

cr_status_t bus_send(zsock_t *sock, const msg_t *m, cr_err_t *err)
{
    if (!sock || !m)
        return cr_err_set(err, CR_E_INTERNAL, "bus_send: no socket or message");
    if (is_router(sock))
        return cr_err_set(err, CR_E_INTERNAL,
                          "bus_send on a ROUTER socket; use bus_send_to");
    zframe_t *f = NULL;
    cr_status_t st = bus_encode_frame(m, &f, err);
    if (st)
        return st;
    int rc = zframe_send(&f, sock, 0);
    int e = zmq_errno();
    zframe_destroy(&f);
    if (rc != 0)
        return cr_err_set(err, CR_E_IO, "sending %s: %s",
                          msg_type_name(m->type), zmq_strerror(e));
    return CR_OK;
}

cr_status_t bus_send_to(zsock_t *router, zframe_t *identity, const msg_t *m,
                        cr_err_t *err)
{
    if (!router || !identity || !m)
        return cr_err_set(err, CR_E_INTERNAL,
                          "bus_send_to: no socket, identity or message");
    if (!is_router(router))
        return cr_err_set(err, CR_E_INTERNAL,
                          "bus_send_to on a socket that is not a ROUTER");
    zframe_t *f = NULL;
    cr_status_t st = bus_encode_frame(m, &f, err);
    if (st)
        return st;
    return bus_send_frame_to(router, identity, &f, msg_type_name(m->type),
                             err);
}

/* Waits until sock is readable (timeout_ms > 0). */
static cr_status_t wait_readable(zsock_t *sock, int timeout_ms, cr_err_t *err)
{
    bus_poll_t p;
    bus_poll_init(&p);
    if (bus_poll_add(&p, sock))
        return cr_err_set(err, CR_E_INTERNAL, "a socket without a descriptor");
    if (bus_poll_wait(&p, timeout_ms))
        return CR_OK;
    if (p.terminated)
        return cr_err_set(err, CR_E_CANCELED, "interrupted");
    return cr_err_set(err, CR_E_TIMEOUT, "no message within %d ms",
                      timeout_ms);
}

cr_status_t bus_recv_frame(zsock_t *sock, int timeout_ms, zframe_t **body_out,
                          zframe_t **identity_out, cr_err_t *err)
{
    *body_out = NULL;
    if (identity_out)
        *identity_out = NULL;
    if (!sock)
        return cr_err_set(err, CR_E_INTERNAL, "bus_recv: no socket");
    cr_status_t st = CR_OK;
    zmsg_t *zm;
    if (timeout_ms == 0) {
        /* A receive that finds a message makes no system call, where
         * asking ZMQ_EVENTS first makes two (bus_poll.h): a stream's
         * relays and a runner's check between tokens take this path. */
        zm = zmsg_recv_nowait(sock);
        if (!zm && zmq_errno() == EAGAIN)
            return cr_err_set(err, CR_E_TIMEOUT, "no message within 0 ms");
    } else {
        if (timeout_ms > 0 && (st = wait_readable(sock, timeout_ms, err)))
            return st;
        zm = zmsg_recv(sock);
    }
    if (!zm) {
        if (zsys_interrupted || zmq_errno() == EINTR)
            return cr_err_set(err, CR_E_CANCELED, "interrupted");
        return cr_err_set(err, CR_E_IO, "receiving: %s",
                          zmq_strerror(zmq_errno()));
    }
    bool router = is_router(sock);
    zframe_t *identity = NULL;
    if (router)
        identity = zmsg_pop(zm); /* the ROUTER always prepends it */
    if (zmsg_size(zm) != 1)
        st = cr_err_set(err, CR_E_PROTO,
                        "a bus message has %zu frames, expected %d",
                        zmsg_size(zm) + (identity ? 1 : 0), router ? 2 : 1);
    else
        *body_out = zmsg_pop(zm);
    zmsg_destroy(&zm);
    if (identity_out)
        *identity_out = identity;
    else
        zframe_destroy(&identity);
    return st;
}

cr_status_t bus_recv(zsock_t *sock, int timeout_ms, msg_t *out,
                     zframe_t **identity_out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    zframe_t *body = NULL, *identity = NULL;
    cr_status_t st = bus_recv_frame(sock, timeout_ms, &body, &identity, err);
    if (!st)
        st = msg_decode(zframe_data(body), zframe_size(body), out, err);
    zframe_destroy(&body);
    /* The identity comes back with CR_E_PROTO too, so the caller can answer
     * the sender with an error. */
    if (identity_out && (st == CR_OK || st == CR_E_PROTO))
        *identity_out = identity;
    else
        zframe_destroy(&identity);
    return st;
}

cr_status_t bus_send_frame_to(zsock_t *router, zframe_t *identity,
                              zframe_t **frame_p, const char *what,
                              cr_err_t *err)
{
    if (!router || !identity || !frame_p || !*frame_p) {
        if (frame_p)
            zframe_destroy(frame_p);
        return cr_err_set(err, CR_E_INTERNAL,
                          "bus_send_frame_to: no socket, identity or frame");
    }
    if (!is_router(router)) {
        zframe_destroy(frame_p);
        return cr_err_set(err, CR_E_INTERNAL,
                          "bus_send_frame_to on a socket that is not a ROUTER");
    }
    zmsg_t *zm = zmsg_new();
    zframe_t *id = zframe_dup(identity);
    if (!zm || !id) {
        zmsg_destroy(&zm);
        zframe_destroy(&id);
        zframe_destroy(frame_p);
        return cr_err_set(err, CR_E_NOMEM, "out of memory for a message");
    }
    zmsg_append(zm, &id);
    zmsg_append(zm, frame_p);
    int rc = zmsg_send(&zm, router);
    int e = zmq_errno();
    zmsg_destroy(&zm);
    if (rc != 0)
        return cr_err_set(err, CR_E_IO, "sending %s: %s",
                          what ? what : "a frame", zmq_strerror(e));
    return CR_OK;
}

/* ---- request ids ---- */

static bool urandom_bytes(uint8_t *p, size_t n)
{
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    close(fd);
    return got == n;
}

/* Last resort when no randomness source works: unique within a process and
 * unlikely to collide across processes, though not unpredictable. */
static void fallback_bytes(uint8_t *p, size_t n)
{
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    x ^= (uint64_t)getpid() << 32;
    x += ++counter * 0x9e3779b97f4a7c15u;
    for (size_t i = 0; i < n; i++) {
        /* splitmix64 step per 8 bytes */
        if (i % 8 == 0) {
            x += 0x9e3779b97f4a7c15u;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
            x = z ^ (z >> 31);
        }
        p[i] = (uint8_t)(x >> (8 * (i % 8)));
    }
}

void bus_new_id(char *out)
{
    uint8_t raw[16];
    if (RAND_bytes(raw, (int)sizeof raw) != 1 && !urandom_bytes(raw, sizeof raw))
        fallback_bytes(raw, sizeof raw);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * sizeof raw] = '\0';
}
