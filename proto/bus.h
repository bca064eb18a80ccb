/* bus.h: moving msg_t frames over CZMQ sockets, and where the sockets live.
 *
 * Topology (see docs/architecture.md):
 *   scheduler binds ROUTER "scheduler" (gateways) and ROUTER "runners";
 *   registry binds ROUTER "registry"; clients connect DEALERs.
 * A DEALER sends one frame (the encoded message); a ROUTER sees
 * [identity][frame] and replies to the identity.
 *
 * Endpoints default to ipc://$CORRAL_RUNTIME_DIR/<name>.sock, with the
 * runtime dir created mode 0700; CORRAL_<NAME>_ENDPOINT (e.g.
 * CORRAL_SCHEDULER_ENDPOINT=tcp://10.0.0.2:7001) overrides one endpoint. */
#ifndef CR_BUS_H
#define CR_BUS_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"

#include <czmq.h>

#define BUS_ENDPOINT_MAX 512

/* The endpoint for a named service socket ("scheduler", "runners",
 * "registry"; lowercase letters, digits, '_'), honouring
 * CORRAL_<NAME>_ENDPOINT, else ipc://<runtime dir>/<name>.sock (created
 * through cr_runtime_dir, lib/runtime_dir.h). CR_E_TOO_LARGE when that socket path is over
 * the 107 bytes a Unix socket allows, CR_E_INVALID for a bad name or an
 * override without "://". */
cr_status_t bus_endpoint(const char *name, char *out, size_t cap,
                         cr_err_t *err);

/* Listen backlog of a service's public socket. Every gateway request
 * connects anew, and ZeroMQ's default backlog of 100 refuses the rest of
 * a burst while the service's I/O thread is behind (bench-soak: 500
 * clients on a loaded machine got "scheduler unavailable" 502s, the
 * gateway's refused-connect grace running out). The kernel may cap it
 * lower (net.core.somaxconn). */
#define BUS_LISTEN_BACKLOG 1024

/* Binds sock to endpoint with BUS_LISTEN_BACKLOG. 0, or -1 as zsock_bind
 * (zmq_errno() says why). */
int bus_listen(zsock_t *sock, const char *endpoint);

/* Encodes m into a new frame *out (caller owns; zframe_destroy). Errors as
 * msg_encode; CR_E_NOMEM without memory for the frame. */
cr_status_t bus_encode_frame(const msg_t *m, zframe_t **out, cr_err_t *err);

/* Encodes and sends m on a DEALER (or any non-ROUTER socket; CR_E_INTERNAL
 * on a ROUTER). Encoding errors as msg_encode; CR_E_IO if zmq refuses. */
cr_status_t bus_send(zsock_t *sock, const msg_t *m, cr_err_t *err);

/* Encodes and sends m on a ROUTER to the peer `identity` (borrowed). Like
 * any ROUTER, it drops a message to an unknown peer silently unless the
 * socket has ZMQ_ROUTER_MANDATORY set (then CR_E_IO). CR_E_INTERNAL if
 * `router` is not a ROUTER. */
cr_status_t bus_send_to(zsock_t *router, zframe_t *identity, const msg_t *m,
                        cr_err_t *err);

/* Receives one message. For a ROUTER pass identity_out to receive the
 * sender's identity (caller owns; zframe_destroy), else NULL. Malformed frames
 * (bad msgpack, or the wrong number of frames) are consumed and reported as
 * CR_E_PROTO with *out zeroed but for out->id when one was readable; on a
 * ROUTER *identity_out is still set then, so the caller can decide whether
 * to answer the sender with an error. CR_E_TIMEOUT if timeout_ms (>= 0)
 * passes with nothing to read; a negative timeout waits forever.
 * CR_E_CANCELED if interrupted (zsys_interrupted). */
cr_status_t bus_recv(zsock_t *sock, int timeout_ms, msg_t *out,
                     zframe_t **identity_out, cr_err_t *err);

/* Receives one message without decoding it: *body_out is its one frame
 * (caller owns; zframe_destroy). identity_out, timeouts and errors as
 * bus_recv, but for a malformed frame only a wrong frame count is seen. */
cr_status_t bus_recv_frame(zsock_t *sock, int timeout_ms, zframe_t **body_out,
                           zframe_t **identity_out, cr_err_t *err);

/* Sends an encoded frame (*frame_p, taken: nulled even on error) on a
 * ROUTER to the peer `identity` (borrowed), as bus_send_to does; `what`
 * names it in errors. For a relay that forwards a frame unchanged. */
cr_status_t bus_send_frame_to(zsock_t *router, zframe_t *identity,
                              zframe_t **frame_p, const char *what,
                              cr_err_t *err);

/* A fresh random request id (32 hex chars) into out (>= 33 bytes). */
void bus_new_id(char *out);

#endif
