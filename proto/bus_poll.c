/* bus_poll.c: see bus_poll.h. */
#include "lib/prelude.h"
#include "proto/bus_poll.h"

#include <errno.h>

const char bus_poll_fd_token = 0;

void bus_poll_init(bus_poll_t *p)
{
    memset(p, 0, sizeof *p);
}

int bus_poll_add(bus_poll_t *p, zsock_t *sock)
{
    if (!sock)
        return 0;
    if (p->n >= BUS_POLL_MAX)
        return -1;
    int fd = zsock_fd(sock);
    if (fd < 0)
        return -1;
    p->socks[p->n] = sock;
    p->fds[p->n] = (struct pollfd){.fd = fd, .events = POLLIN};
    p->maybe[p->n] = true; /* whatever came before it was added */
    p->n++;
    return 0;
}

int bus_poll_add_fd(bus_poll_t *p, int fd)
{
    if (p->n >= BUS_POLL_MAX || fd < 0)
        return -1;
    p->socks[p->n] = NULL;
    p->fds[p->n] = (struct pollfd){.fd = fd, .events = POLLIN};
    p->maybe[p->n] = false; /* poll() tells */
    p->n++;
    return 0;
}

void bus_poll_mark(bus_poll_t *p, zsock_t *sock)
{
    for (int i = 0; i < p->n; i++)
        if (p->socks[i] && (!sock || p->socks[i] == sock))
            p->maybe[i] = true;
}

/* The first socket marked maybe that has a message; the others asked are
 * unmarked. */
static zsock_t *first_ready(bus_poll_t *p)
{
    for (int i = 0; i < p->n; i++) {
        if (!p->maybe[i])
            continue;
        if (!p->socks[i]) { /* a plain descriptor poll() found ready */
            p->maybe[i] = false;
            p->ready_fd = p->fds[i].fd;
            return BUS_POLL_FD;
        }
        if (zsock_events(p->socks[i]) & ZMQ_POLLIN)
            return p->socks[i];
        p->maybe[i] = false;
    }
    return NULL;
}

static bool interrupted(bus_poll_t *p)
{
    p->terminated = zsys_interrupted && !p->nonstop;
    return p->terminated;
}

zsock_t *bus_poll_wait(bus_poll_t *p, int timeout_ms)
{
    int64_t now = zclock_mono(), deadline = now + (timeout_ms > 0 ? timeout_ms : 0);
    bool polled = false;
    for (;;) {
        if (now - p->swept_ms >= BUS_POLL_SWEEP_MS) {
            bus_poll_mark(p, NULL); /* the sweep (header) */
            p->swept_ms = now;
        }
        if (interrupted(p))
            return NULL;
        zsock_t *ready = first_ready(p);
        if (ready)
            return ready;
        if (polled && (timeout_ms == 0 || (timeout_ms > 0 && now >= deadline)))
            return NULL;
        /* sleep until the deadline or the next sweep, whichever is first */
        int64_t until = p->swept_ms + BUS_POLL_SWEEP_MS;
        if (timeout_ms > 0)
            until = CR_MIN(until, deadline);
        int wait_ms = timeout_ms == 0 ? 0 : (int)CR_MAX(until - now, 0);
        if (poll(p->fds, (nfds_t)p->n, wait_ms) < 0) {
            p->terminated = errno == EINTR; /* else: bad descriptors */
            return NULL;
        }
        polled = true;
        /* A command that was not a message (a peer connected, a pipe
         * ended) fires a descriptor too: first_ready then finds nothing,
         * and the loop sleeps on. */
        for (int i = 0; i < p->n; i++)
            if (p->fds[i].revents)
                p->maybe[i] = true;
        now = zclock_mono();
    }
}
