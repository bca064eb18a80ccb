/* test_wire.c: bus messages on a plain Unix socket (proto/wire.h): the
 * endpoint's form, listen and connect, frames read whole whatever the
 * pieces they come in, a frame that does not decode skipped, a length past
 * the limit refused, the peer's end seen after what it wrote, and a write
 * to a closed peer that fails without SIGPIPE. */
#include "lib/prelude.h"
#include "proto/wire.h"
#include "tests/unit/check.h"

#include <sys/socket.h>
#include <unistd.h>

static char dir_g[] = "/tmp/test-wire-XXXXXX";

static void chunk(msg_t *m, const char *id, const char *text)
{
    msg_init(m, MSG_chunk, id);
    m->u.chunk.response = (char *)text;
    m->u.chunk.has_response = true;
}

/* m framed into b (reset first) */
static void framed(cr_buf_t *b, const msg_t *m)
{
    cr_buf_reset(b);
    CHECK_EQ_INT(bus_wire_encode(m, b, NULL), CR_OK);
}

/* The next message r holds: its text, "" for none whole yet, "ERR<code>"
 * for an error. */
static const char *next_text(bus_wire_reader_t *r, char *out, size_t cap)
{
    msg_t m;
    cr_status_t st = bus_wire_reader_next(r, &m, NULL);
    if (st == CR_E_TIMEOUT)
        snprintf(out, cap, "%s", "");
    else if (st)
        snprintf(out, cap, "ERR%d", (int)st);
    else
        snprintf(out, cap, "%s", m.type == MSG_chunk && m.u.chunk.response ? m.u.chunk.response : "?");
    if (!st)
        msg_clear(&m);
    return out;
}

static void test_paths(void)
{
    CHECK_EQ_STR(bus_wire_path("unix:///run/x.sock"), "/run/x.sock");
    CHECK(bus_wire_path("ipc:///run/x.sock") == NULL);
    CHECK(bus_wire_path("unix://") == NULL);
    CHECK(bus_wire_path(NULL) == NULL);
    char long_ep[200] = "unix:///";
    memset(long_ep + 8, 'a', 120);
    CHECK(bus_wire_path(long_ep) == NULL); /* past sun_path */
    int fd;
    cr_err_t err;
    CHECK_EQ_INT(bus_wire_listen("tcp://127.0.0.1:1", &fd, &err), CR_E_INVALID);
    CHECK_EQ_INT(fd, -1);
    char ep[300];
    snprintf(ep, sizeof ep, "unix://%s/nobody.sock", dir_g);
    CHECK_EQ_INT(bus_wire_connect(ep, &fd, &err), CR_E_UNAVAILABLE);
    CHECK_MSG(strstr(err.msg, "nobody.sock") != NULL, "error: %s", err.msg);
}

/* Listen, connect, a message each way, fed one byte at a time on one side;
 * a stale socket file is replaced by the next listener. */
static void test_roundtrip(void)
{
    char ep[300];
    snprintf(ep, sizeof ep, "unix://%s/r.sock", dir_g);
    int lfd, cfd;
    cr_err_t err;
    CHECK_EQ_INT(bus_wire_listen(ep, &lfd, &err), CR_OK);
    close(lfd); /* the file stays, as after a killed runner */
    CHECK_EQ_INT(bus_wire_listen(ep, &lfd, &err), CR_OK);
    CHECK_EQ_INT(bus_wire_connect(ep, &cfd, &err), CR_OK);
    int sfd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
    CHECK(sfd >= 0);

    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    msg_t m;
    chunk(&m, "id1", "hello");
    framed(&b, &m);
    /* byte by byte: nothing whole until the last one */
    bus_wire_reader_t r;
    bus_wire_reader_init(&r);
    char text[32];
    for (size_t i = 0; i < b.len; i++) {
        CHECK_EQ_INT((int)bus_wire_write(cfd, b.data + i, 1, NULL, 0), 1);
        CHECK_EQ_INT(bus_wire_reader_fill(&r, sfd), BUS_WIRE_READ);
        CHECK_EQ_STR(next_text(&r, text, sizeof text), i + 1 < b.len ? "" : "hello");
    }
    CHECK_EQ_INT(bus_wire_reader_fill(&r, sfd), BUS_WIRE_EMPTY);

    /* two in one write, the header and body as two pieces of one call */
    chunk(&m, "id1", "one");
    framed(&b, &m);
    CHECK_EQ_INT((int)bus_wire_write(sfd, b.data, BUS_WIRE_HEADER_BYTES, b.data + BUS_WIRE_HEADER_BYTES,
                                 b.len - BUS_WIRE_HEADER_BYTES),
                 (int)b.len);
    chunk(&m, "id1", "two");
    framed(&b, &m);
    CHECK_EQ_INT((int)bus_wire_write(sfd, b.data, b.len, NULL, 0), (int)b.len);
    bus_wire_reader_t rc;
    bus_wire_reader_init(&rc);
    CHECK_EQ_INT(bus_wire_reader_fill(&rc, cfd), BUS_WIRE_READ);
    CHECK_EQ_STR(next_text(&rc, text, sizeof text), "one");
    CHECK_EQ_STR(next_text(&rc, text, sizeof text), "two");
    CHECK_EQ_STR(next_text(&rc, text, sizeof text), "");

    /* what was written before the end is read before it */
    chunk(&m, "id1", "last");
    framed(&b, &m);
    CHECK_EQ_INT((int)bus_wire_write(sfd, b.data, b.len, NULL, 0), (int)b.len);
    close(sfd);
    CHECK_EQ_INT(bus_wire_reader_fill(&rc, cfd), BUS_WIRE_READ);
    CHECK_EQ_STR(next_text(&rc, text, sizeof text), "last");
    CHECK_EQ_INT(bus_wire_reader_fill(&rc, cfd), BUS_WIRE_EOF);

    /* a write to a closed peer: -1, and this process is still here */
    CHECK_EQ_INT((int)bus_wire_write(cfd, "x", 1, NULL, 0), -1);

    bus_wire_reader_free(&r);
    bus_wire_reader_free(&rc);
    cr_buf_free(&b);
    close(cfd);
    close(lfd);
}

/* A frame that does not decode is skipped and the next one read; a length
 * past MSG_FRAME_MAX cannot be framed: CR_E_TOO_LARGE, nothing after. A
 * full socket takes part of a write, then nothing. */
static void test_bad_frames(void)
{
    int sv[2];
    CHECK_EQ_INT(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    static const uint8_t junk[] = {3, 0, 0, 0, 0xc1, 0xc1, 0xc1};
    CHECK_EQ_INT((int)bus_wire_write(sv[0], junk, sizeof junk, NULL, 0), (int)sizeof junk);
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    msg_t m;
    chunk(&m, "id2", "fine");
    framed(&b, &m);
    CHECK_EQ_INT((int)bus_wire_write(sv[0], b.data, b.len, NULL, 0), (int)b.len);
    uint8_t huge[BUS_WIRE_HEADER_BYTES + 2] = {0};
    bus_wire_header(huge, (size_t)MSG_FRAME_MAX + 1);
    CHECK_EQ_INT((int)bus_wire_write(sv[0], huge, sizeof huge, NULL, 0), (int)sizeof huge);
    CHECK_EQ_INT((int)bus_wire_write(sv[0], b.data, b.len, NULL, 0), (int)b.len);

    bus_wire_reader_t r;
    bus_wire_reader_init(&r);
    CHECK_EQ_INT(bus_wire_reader_fill(&r, sv[1]), BUS_WIRE_READ);
    char text[32];
    msg_t out;
    cr_err_t err;
    CHECK_EQ_INT(bus_wire_reader_next(&r, &out, &err), CR_E_PROTO);
    CHECK_EQ_STR(next_text(&r, text, sizeof text), "fine");
    CHECK_EQ_INT(bus_wire_reader_next(&r, &out, &err), CR_E_TOO_LARGE);
    CHECK_MSG(strstr(err.msg, "over the") != NULL, "error: %s", err.msg);
    CHECK_EQ_INT(bus_wire_reader_next(&r, &out, &err), CR_E_TIMEOUT); /* all dropped */

    /* full: a big write is taken in part, then not at all */
    static uint8_t big[1 << 20];
    ssize_t n = bus_wire_write(sv[0], big, sizeof big, NULL, 0);
    CHECK_MSG(n > 0 && n < (ssize_t)sizeof big, "took %zd of %zu", n, sizeof big);
    CHECK_EQ_INT((int)bus_wire_write(sv[0], big, sizeof big, NULL, 0), 0);

    bus_wire_reader_free(&r);
    cr_buf_free(&b);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    CHECK(mkdtemp(dir_g) != NULL);
    test_paths();
    test_roundtrip();
    test_bad_frames();
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir_g);
    CHECK_EQ_INT(system(cmd), 0);
    return check_finish("wire");
}
