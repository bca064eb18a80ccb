/* sched.h: the scheduler service: broker between gateways and runners.
 *
 * It owns three sockets: a ROUTER for gateways ("scheduler"), a ROUTER for
 * runners ("runners") and a DEALER to the registry. A request (generate,
 * chat, embed) is resolved through the registry, attached to a runner of
 * that model with compatible load options (spawning one if needed, one load
 * at a time, evicting the least recently used idle runner at the
 * OLLAMA_MAX_LOADED_MODELS cap or when the model does not fit the memory
 * left), forwarded, and its replies relayed back. Placement on GPUs and
 * the CPU comes from estimate.h and place.h over the inventory (gpus.h);
 * a ledger of every live runner's plan says what memory is left.
 * When a runner goes idle its keep-alive timer is armed; expiry unloads it.
 * A runner that dies, or stops answering heartbeat pings, fails its
 * in-flight requests with a clear error; the next request loads the model
 * again.
 *
 * It does not know how models compute, how the store is laid out, or HTTP. */
#ifndef SCH_SCHED_H
#define SCH_SCHED_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/bus.h"
#include "lib/gpus.h"

/* The most slots a runner makes (its RN_CTX_MAX_SEQ; it refuses a load
 * asking for more, so the scheduler clamps OLLAMA_NUM_PARALLEL to this). */
#define SCH_NUM_PARALLEL_MAX 64
#define SCH_STREAM_BUFFER_DEFAULT (16LL << 20) /* CORRAL_STREAM_BUFFER */

typedef struct sch_config {
    char front_endpoint[BUS_ENDPOINT_MAX];    /* ROUTER for gateways */
    char runners_endpoint[BUS_ENDPOINT_MAX];  /* ROUTER for runners */
    char registry_endpoint[BUS_ENDPOINT_MAX]; /* DEALER to the registry */
    char runner_bin[4096];                    /* corral-runner path */
    int64_t keep_alive_ms;   /* OLLAMA_KEEP_ALIVE, default 5m; <0 forever */
    int64_t load_timeout_ms; /* OLLAMA_LOAD_TIMEOUT, default 5m; <=0 none */
    int64_t resolve_timeout_ms; /* registry answer deadline */
    int max_loaded;          /* OLLAMA_MAX_LOADED_MODELS, 0 = 3 per GPU
                                (3 without GPUs) */
    int max_queue;           /* OLLAMA_MAX_QUEUE, default 512 */
    int num_parallel;        /* OLLAMA_NUM_PARALLEL, default 1, clamped to
                                1..SCH_NUM_PARALLEL_MAX */
    /* The machine. has_inventory false: sch_server_new discovers it
     * (CORRAL_GPU_INVENTORY, else NVML and /proc/meminfo). */
    bool has_inventory;
    cr_inventory_t inventory;
    int64_t gpu_overhead_bytes;  /* OLLAMA_GPU_OVERHEAD, per GPU */
    bool sched_spread;           /* OLLAMA_SCHED_SPREAD */
    char kv_cache_type[16];      /* OLLAMA_KV_CACHE_TYPE: "" (f16), f16,
                                    q8_0, q4_0 */
    bool flash_attention;        /* OLLAMA_FLASH_ATTENTION: needed for a
                                    quantized KV cache (estimate.h) */
    int64_t heartbeat_interval_ms; /* ping an idle runner this often; 0 =
                                      5 s (CORRAL_HEARTBEAT_INTERVAL) */
    int64_t heartbeat_timeout_ms;  /* unanswered ping -> killed; 0 = 60 s
                                      (CORRAL_HEARTBEAT_TIMEOUT) */
    int64_t adopt_grace_ms;  /* after a restart, no runner is started for
                                this long while runners of the previous
                                scheduler may still say hello; 0 = one
                                heartbeat interval, <0 = none
                                (CORRAL_ADOPT_GRACE) */
    /* Nodes (docs/deploy.md "Adding a GPU host"): "" = off. */
    char nodes_endpoint[BUS_ENDPOINT_MAX]; /* CORRAL_NODES_ENDPOINT, tcp:// */
    char nodes_cert[4096];     /* CORRAL_NODES_CERT: the scheduler's
                                  certificate (and its _secret) */
    char node_keys_dir[4096];  /* CORRAL_NODE_KEYS_DIR: admitted node keys */
    int64_t node_timeout_ms;   /* CORRAL_NODE_TIMEOUT: a silent node is lost
                                  after this; 0 = 10 s */
    char node_memo[4096];      /* file naming the nodes that hold runners, so
                                  a restart waits for them ("" = none;
                                  <runtime dir>/scheduler-nodes when nodes
                                  are on) */
    int64_t stream_buffer_bytes; /* CORRAL_STREAM_BUFFER: a request's
                                    replies a slow gateway client has not
                                    taken yet, beyond zmq's queues; over it
                                    the request ends with an error; 0 =
                                    SCH_STREAM_BUFFER_DEFAULT */
    /* CORRAL_DIRECT_REPLIES (default on): local runners bind an ipc
     * endpoint beside the front's, and a stream's chunks go from the
     * runner to the gateway without this process (`route`). Only when the
     * front is ipc: a gateway on another host could not reach it. */
    bool direct_replies;
    /* Monotonic clock in ms; NULL = CLOCK_MONOTONIC. Tests set their own. */
    int64_t (*now_ms)(void);
} sch_config_t;

/* Fills cfg from the environment (endpoints from bus_endpoint, the runner
 * binary beside this executable). Errors name the bad setting. */
cr_status_t sch_config_from_env(sch_config_t *cfg, cr_err_t *err);

typedef struct sch_server sch_server_t;

/* Binds the sockets. Caller owns the result; free with sch_server_destroy. */
cr_status_t sch_server_new(const sch_config_t *cfg, sch_server_t **out,
                           cr_err_t *err);

/* Stops every runner (shutdown message, then SIGKILL after a grace period)
 * and frees the server. Accepts NULL. */
void sch_server_destroy(sch_server_t **self_p);

/* Handles whatever arrives within timeout_ms, then runs timers. */
void sch_server_run_once(sch_server_t *s, int timeout_ms);

/* Loops until SIGINT/SIGTERM (zsys_interrupted). */
void sch_server_run(sch_server_t *s);

/* Graceful stop: refuses new requests ("server is shutting down") and
 * keeps serving the ones it has until none is left or timeout_ms passes.
 * Returns how many are left (sch_server_destroy fails them). */
int sch_server_drain(sch_server_t *s, int64_t timeout_ms);

/* Counts for tests and metrics. */
size_t sch_server_runner_count(const sch_server_t *s);
size_t sch_server_pending_count(const sch_server_t *s);

/* The memory ledger: what GPU slot `slot` of the inventory (or the system
 * memory, slot -1) has left after every live runner's plan. */
int64_t sch_server_free_bytes(const sch_server_t *s, int slot);

/* The inventory the server places over (borrowed). */
const cr_inventory_t *sch_server_inventory(const sch_server_t *s);

#endif
