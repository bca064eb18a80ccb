/* agent.h: the node agent: a GPU host's part of a corral spread over
 * several hosts (docs/architecture.md "Many hosts").
 *
 * It connects one DEALER to the scheduler's CORRAL_NODES_ENDPOINT as a
 * CURVE client, says node_hello (its name, GPUs and memory) every
 * heartbeat, starts `corral-runner serve` on node_spawn with its own
 * ipc:// ROUTER as the runner endpoint, and relays frames between its
 * runners and the scheduler ([runner id][payload], proto/relay.h). The one
 * frame it reads on the way is `load`: the model_path is the scheduler's
 * store path, so it is rewritten to this host's copy of the blob (the
 * cache, the shared store, or a verified chunked fetch from the
 * scheduler: blobs.h) before the runner sees it.
 *
 * A scheduler silent for the timeout is lost: the agent kills its runners
 * (the scheduler has already dropped them from its ledger) and keeps
 * saying hello until it is heard again.
 *
 * It knows nothing of placement or requests. */
#ifndef ND_AGENT_H
#define ND_AGENT_H

#include "lib/prelude.h"
#include "lib/gpus.h"
#include "lib/status.h"
#include "proto/bus.h"

typedef struct nd_config {
    char name[64];                              /* CORRAL_NODE_NAME, else the host name */
    char scheduler_endpoint[BUS_ENDPOINT_MAX];  /* CORRAL_NODE_SCHEDULER, tcp:// */
    char cert[4096];        /* CORRAL_NODE_CERT: this node's certificate */
    char server_cert[4096]; /* CORRAL_NODE_SERVER_CERT: the scheduler's public one */
    char runners_endpoint[BUS_ENDPOINT_MAX]; /* ipc://<runtime dir>/node-runners.sock */
    char runner_bin[4096];  /* corral-runner beside this binary, or CORRAL_RUNNER_BIN */
    char cache_dir[4096];   /* CORRAL_NODE_CACHE, default ~/.corral/node-cache */
    char store_dir[4096];   /* CORRAL_NODE_STORE: a shared models dir; "" = none */
    int64_t cache_max_bytes; /* CORRAL_NODE_CACHE_MAX; 0 = unlimited */
    int64_t heartbeat_ms;   /* CORRAL_NODE_HEARTBEAT, default 1 s */
    int64_t timeout_ms;     /* CORRAL_NODE_TIMEOUT, default 10 s */
    cr_inventory_t inv;     /* discovered as the scheduler does (gpus.h) */
} nd_config_t;

/* Fills cfg from the environment; errors name the setting. */
cr_status_t nd_config_from_env(nd_config_t *cfg, cr_err_t *err);

typedef struct nd_agent nd_agent_t;

/* Binds the runner socket and connects to the scheduler. Caller owns;
 * free with nd_agent_destroy. */
cr_status_t nd_agent_new(const nd_config_t *cfg, nd_agent_t **out,
                         cr_err_t *err);

/* Kills every runner (SIGTERM, then SIGKILL), frees the agent. NULL ok. */
void nd_agent_destroy(nd_agent_t **self_p);

/* Runs until SIGINT/SIGTERM. */
void nd_agent_run(nd_agent_t *a);

#endif
