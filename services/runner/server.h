/* server.h: the runner process's bus loop.
 *
 * Connects a DEALER (identity = runner id) to the scheduler's runners
 * endpoint, says hello, loads the model it is told to, then answers up to
 * num_parallel generate/chat requests at once (the engine's slots, one
 * forward pass per step), reading cancel, shutdown and pings between
 * steps. Exits when told to shut down, when the scheduler's
 * process goes away, or on SIGTERM. */
#ifndef RN_SERVER_H
#define RN_SERVER_H

#include "lib/prelude.h"
#include "lib/status.h"

typedef struct rn_server rn_server_t;

/* direct (NULL or ""): none) is the ipc endpoint to bind for direct
 * replies to gateways (direct.h). */
cr_status_t rn_server_new(const char *endpoint, const char *runner_id, const char *direct,
                          rn_server_t **out, cr_err_t *err);

/* Runs until shutdown. Returns 0 for a clean exit. */
int rn_server_run(rn_server_t *s);

void rn_server_destroy(rn_server_t **self_p);

#endif
