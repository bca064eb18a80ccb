/* relay.h: frames between a node agent and the scheduler, and the CURVE
 * security of that link.
 *
 * The scheduler binds a ROUTER "nodes" (CORRAL_NODES_ENDPOINT); each node
 * agent connects one DEALER. A message on that link is two frames after
 * the ROUTER's identity: [to][payload]. `to` is "" for the node's own
 * messages (node_hello, node_spawn, blob_get, ...) and a runner id for a
 * runner's frame the node relays unchanged in either direction. Payloads
 * are ordinary encoded bus messages (msg.h).
 *
 * CURVE: the scheduler's socket is a CURVE server holding the secret key
 * of its certificate; a ZAP handler (CZMQ's zauth) admits only clients
 * whose public certificate is in the keys dir. A node is a CURVE client
 * with its own certificate and the scheduler's public one. Certificates
 * are CZMQ's zcert files: NAME (public) and NAME_secret (secret, 0600),
 * as `corral keygen` writes them.
 *
 * Nothing here knows runners, models or placement. */
#ifndef CR_RELAY_H
#define CR_RELAY_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"

#include <czmq.h>

#define BUS_RELAY_TO_MAX 63 /* a runner id */

/* Sends [peer][to][data] on a ROUTER (peer borrowed) or [to][data] on a
 * DEALER (peer NULL). CR_E_IO if zmq refuses (an unknown peer on a
 * mandatory ROUTER, a full queue past the send timeout). */
cr_status_t bus_relay_send(zsock_t *sock, zframe_t *peer, const char *to,
                           const void *data, size_t len, cr_err_t *err);

/* Encodes m and sends it as bus_relay_send does. */
cr_status_t bus_relay_send_msg(zsock_t *sock, zframe_t *peer, const char *to,
                               const msg_t *m, cr_err_t *err);

/* Receives one relay message (the socket must be readable). On a ROUTER
 * *peer_out gets the sender's identity (caller owns), on a DEALER pass
 * NULL. `to` (cap >= BUS_RELAY_TO_MAX + 1) gets the to frame; *payload_out
 * the payload (caller owns; zframe_destroy). CR_E_PROTO for a wrong frame
 * count or a `to` that is too long or holds a NUL (*peer_out is still set
 * then); CR_E_IO on a receive error. */
cr_status_t bus_relay_recv(zsock_t *sock, zframe_t **peer_out, char *to,
                           size_t to_cap, zframe_t **payload_out,
                           cr_err_t *err);

/* ---- CURVE ---- */

/* True if libzmq was built with CURVE (libsodium). */
bool bus_curve_available(void);

/* Makes sock a CURVE server with the certificate at cert_path (its
 * `_secret` file is read too) and ZAP domain "corral-nodes". Call before
 * bind. CR_E_NOT_FOUND / CR_E_INVALID name the file; CR_E_UNAVAILABLE
 * without CURVE support. */
cr_status_t bus_curve_server(zsock_t *sock, const char *cert_path,
                             cr_err_t *err);

/* Makes sock a CURVE client with its own certificate (cert_path and its
 * `_secret`) that trusts only the server's public certificate. Call
 * before connect. Errors as bus_curve_server. */
cr_status_t bus_curve_client(zsock_t *sock, const char *cert_path,
                             const char *server_cert_path, cr_err_t *err);

/* Starts a ZAP handler (zauth actor) that admits CURVE clients whose
 * public certificate is in dir. Caller owns; zactor_destroy. CR_E_NOT_FOUND
 * if dir is not a readable directory. */
cr_status_t bus_curve_auth_new(const char *dir, zactor_t **out,
                               cr_err_t *err);

/* What the admitted keys in dir look like on disk: the number and total
 * size of its public certificates (regular files not ending in `_secret`)
 * and the newest change time (ns) of the directory and of those files. Two
 * equal stamps mean nothing was added, removed, renamed or rewritten. */
typedef struct bus_keys_stamp {
    int64_t n_keys;
    int64_t bytes;
    int64_t changed_ns;
} bus_keys_stamp_t;

/* Reads dir's stamp. CR_E_NOT_FOUND if dir is not a readable directory. */
cr_status_t bus_curve_keys_stamp(const char *dir, bus_keys_stamp_t *out,
                                 cr_err_t *err);

/* Makes the ZAP handler auth re-read every public certificate in dir now
 * (a fresh certificate store, swapped inside the actor: no handshake is
 * ever answered without one). CZMQ's store also refreshes itself when a
 * lookup sees the directory's file count, total size or newest mtime (in
 * whole seconds) change; this catches what that misses, such as a key
 * replaced by one of the same size within the same second. */
void bus_curve_auth_reload(zactor_t *auth, const char *dir);

/* Writes a new keypair as dir/name (public, 0644) and dir/name_secret
 * (secret, 0600), creating dir (0700) if needed. CR_E_EXISTS if either file
 * is already there (keys are never overwritten). */
cr_status_t bus_curve_keygen(const char *dir, const char *name,
                             char *public_txt_out, cr_err_t *err);

#endif
