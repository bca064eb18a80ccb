/* bus_poll.h: waiting on a few CZMQ sockets with few system calls.
 *
 * zpoller_wait (zmq_poll) reads ZMQ_EVENTS of every socket before and
 * after it sleeps, and ZMQ_EVENTS on a socket with nothing new is two
 * system calls (libzmq's fork check, getpid, and a zero-timeout poll of
 * its mailbox). A scheduler relaying a stream asked four sockets that
 * twice a token: strace counted 51 system calls a token in it, 24 in the
 * gateway, at about a microsecond each on these machines.
 *
 * This poller asks ZMQ_EVENTS only of a socket that may hold a message:
 * one whose descriptor (ZMQ_FD) fired, or one it returned and that nobody
 * has seen empty since. That is sound because of how libzmq signals: a
 * socket whose ZMQ_EVENTS said "nothing to read" has marked its pipes
 * asleep and drained its mailbox, so the next message sends a command and
 * makes ZMQ_FD readable. A socket read to the end elsewhere (its caller
 * saw it empty) is covered as well.
 *
 * Sending is not: zmq_send may process the socket's commands (about once
 * a millisecond), the one that says a message came among them, and then
 * ZMQ_FD stays quiet about that message. A caller marks a socket it sent
 * on (bus_poll_mark) before it waits again.
 *
 * As a safety net every socket is asked again every BUS_POLL_SWEEP_MS,
 * busy or idle (a wait sleeps no longer than until the next sweep): a
 * send site that forgot its mark delays a message by that much at most,
 * and costs two system calls a socket a sweep. */
#ifndef CR_BUS_POLL_H
#define CR_BUS_POLL_H

#include "lib/prelude.h"

#include <czmq.h>
#include <poll.h>

#define BUS_POLL_MAX 8
#define BUS_POLL_SWEEP_MS 100

/* What bus_poll_wait returns for a plain descriptor (bus_poll_add_fd)
 * that is readable or closed; p->ready_fd says which. Never a socket. */
#define BUS_POLL_FD ((zsock_t *)&bus_poll_fd_token)
extern const char bus_poll_fd_token;

typedef struct bus_poll {
    zsock_t *socks[BUS_POLL_MAX]; /* borrowed; outlive the poller; NULL:
                                      a plain descriptor */
    struct pollfd fds[BUS_POLL_MAX];
    bool maybe[BUS_POLL_MAX]; /* may hold a message: ask before sleeping */
    int n;
    int64_t swept_ms; /* zclock_mono() of the last sweep */
    bool nonstop;    /* keep waiting past zsys_interrupted (a drain) */
    bool terminated; /* the last wait ended on a signal or interruption */
    int ready_fd;    /* the descriptor behind the last BUS_POLL_FD */
} bus_poll_t;

/* An empty poller. */
void bus_poll_init(bus_poll_t *p);

/* Adds sock (borrowed; NULL is skipped). 0, or -1 when the poller is full
 * or the socket has no descriptor. */
int bus_poll_add(bus_poll_t *p, zsock_t *sock);

/* Adds a plain descriptor (borrowed; a socket of our own, proto/wire.h):
 * a wait returns BUS_POLL_FD when poll() finds it readable or closed. Its
 * owner reads it until it would block; nothing is asked before sleeping.
 * 0, or -1 when the poller is full or fd < 0. */
int bus_poll_add_fd(bus_poll_t *p, int fd);

/* Marks sock (NULL: every socket) as one that may hold a message: the
 * next wait asks it first. After a send on it, or a read elsewhere that
 * left messages. */
void bus_poll_mark(bus_poll_t *p, zsock_t *sock);

/* A socket with a message waiting, in the order they were added, or NULL:
 * none within timeout_ms (0: do not sleep, but look at the descriptors;
 * < 0: no limit), or
 * interrupted (p->terminated: a signal arrived, or zsys_interrupted was
 * set and p->nonstop is not). The socket returned stays marked, so a
 * caller may read one message of it and wait again. */
zsock_t *bus_poll_wait(bus_poll_t *p, int timeout_ms);

#endif
