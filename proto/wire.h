/* wire.h: bus messages on a plain Unix stream socket, without ZeroMQ.
 *
 * For direct replies (services/runner/direct.h): a message through
 * ZeroMQ wakes its I/O thread on the sending side and the one on the
 * receiving side, two wake-ups a token on cores the compute threads fill
 * (issue 18). On a socket of our own the runner's loop writes a chunk
 * itself and the gateway's connection thread reads it itself.
 *
 * An endpoint is "unix://<path>". Each message is a 4-byte little-endian
 * length and the msgpack frame msg_encode makes (at most MSG_FRAME_MAX).
 * Sockets are non-blocking; writes never raise SIGPIPE. */
#ifndef BUS_WIRE_H
#define BUS_WIRE_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "proto/msg.h"

#define BUS_WIRE_SCHEME "unix://"
#define BUS_WIRE_HEADER_BYTES 4
#define BUS_WIRE_BACKLOG 128

/* The socket path of a "unix://" endpoint, or NULL when it is not one or
 * its path does not fit a socket address. */
const char *bus_wire_path(const char *endpoint);

/* Binds and listens on endpoint (a stale socket file there is replaced);
 * *fd_out is non-blocking. CR_E_INVALID for a bad endpoint, CR_E_IO (err
 * says why). */
cr_status_t bus_wire_listen(const char *endpoint, int *fd_out, cr_err_t *err);

/* Connects to endpoint without blocking: a local listener takes it at
 * once or refuses (nobody there, its backlog full). CR_E_UNAVAILABLE then,
 * CR_E_INVALID for a bad endpoint. */
cr_status_t bus_wire_connect(const char *endpoint, int *fd_out, cr_err_t *err);

/* The 4-byte header of a body of n bytes. */
void bus_wire_header(uint8_t out[BUS_WIRE_HEADER_BYTES], size_t n);

/* Appends m, framed, to out. Errors as msg_encode. */
cr_status_t bus_wire_encode(const msg_t *m, cr_buf_t *out, cr_err_t *err);

/* Writes what the socket takes of the n1 + n2 bytes (header and body, or
 * one piece with n2 = 0) in one system call. The count written (0: the
 * socket is full); -1 when the peer is gone or the socket failed. */
ssize_t bus_wire_write(int fd, const void *p1, size_t n1, const void *p2, size_t n2);

/* Frames read from a socket: whole ones are decoded, a partial one waits
 * for the rest. At most one frame and a read's worth beyond it. */
typedef struct bus_wire_reader {
    cr_buf_t buf;
    size_t off; /* where the next frame starts in buf */
} bus_wire_reader_t;

void bus_wire_reader_init(bus_wire_reader_t *r);
void bus_wire_reader_free(bus_wire_reader_t *r);

typedef enum bus_wire_fill {
    BUS_WIRE_READ,  /* bytes came */
    BUS_WIRE_EMPTY, /* nothing waiting now */
    BUS_WIRE_EOF,   /* the peer closed (or the socket failed) */
} bus_wire_fill_t;

/* One read of what fd holds. */
bus_wire_fill_t bus_wire_reader_fill(bus_wire_reader_t *r, int fd);

/* The next whole frame: CR_OK with *out decoded (caller owns; msg_clear);
 * CR_E_TIMEOUT when none is whole yet; CR_E_PROTO for a frame that does
 * not decode (skipped: the next one may); CR_E_TOO_LARGE for a length
 * past MSG_FRAME_MAX (the stream cannot be framed any more: the caller
 * closes it); CR_E_NOMEM. */
cr_status_t bus_wire_reader_next(bus_wire_reader_t *r, msg_t *out, cr_err_t *err);

#endif
