/* sched_int.h: the scheduler's internal state, shared by its own modules
 * (sched.c, ledger.c, config.c) and nobody else.
 *
 * Runners and requests live in two lists owned by the server object; see
 * sched.c for their state machines. */
#ifndef SCH_SCHED_INT_H
#define SCH_SCHED_INT_H

#include "lib/prelude.h"
#include "proto/bus_poll.h"
#include "proto/msg.h"
#include "proto/relay.h"
#include "services/scheduler/estimate.h"
#include "services/scheduler/place.h"
#include "services/scheduler/sched.h"

#include <sys/types.h>

#define STOP_GRACE_MS 5000        /* shutdown -> SIGKILL */
#define HEARTBEAT_INTERVAL_MS 5000
#define HEARTBEAT_TIMEOUT_MS 60000
#define NODE_TIMEOUT_MS 10000   /* a silent node is lost */
#define NODE_BLOB_CHUNK_MAX (4 << 20) /* bytes per blob_data */
#define NODE_KEYS_CHECK_MS 1000 /* CORRAL_NODE_KEYS_DIR is looked at this often */
#define TICK_MS 100               /* timer resolution of the loop */
#define ORPHANS_MAX 256           /* runners of a previous scheduler tracked */
#define NODE_MEMO_MAX 64          /* nodes a restarted scheduler waits for */
#define FOREVER_MS INT64_MAX
#define OUTBOX_RETRY_MS 5         /* poll timeout while replies wait */
#define HOUSEKEEP_MS 5            /* most time between two housekeepings
                                     while only relayed tokens come */

typedef enum runner_state {
    RS_STARTING,
    RS_LOADING,
    RS_READY,
    RS_STOPPING,
} runner_state_t;

typedef enum req_state {
    RQ_RESOLVING,
    RQ_PENDING,
    RQ_RUNNING,
} req_state_t;

/* A GPU host whose node agent joined over CORRAL_NODES_ENDPOINT (nodes.c).
 * Its runners are runner_t entries with `node` pointing here. */
typedef struct sch_node {
    char name[64];           /* from node_hello; unique among nodes */
    zframe_t *ident;         /* its ROUTER identity on the nodes socket */
    cr_inventory_t inv;      /* what it announced; the ledger subtracts its
                                runners' plans from this */
    int64_t last_seen_ms;    /* last frame from it */
    char instance[MSG_ID_MAX + 1]; /* its agent process (node_hello) */
    /* Adoption grace: a node that joins with runners (this scheduler
     * restarted) holds loads back until that many of its runners said
     * hello, at most until grace_until_ms (0: none). */
    int64_t expect_runners, grace_until_ms;
    struct sch_node *next;
} sch_node_t;

typedef struct runner {
    char id[48];
    sch_node_t *node;        /* NULL: a local child; else the host it runs on
                                (pid is then 0: the node owns the process) */
    pid_t pid;
    runner_state_t state;
    msg_t resolved;          /* owned copy of what the registry said */
    msg_options_t load_opts; /* options the runner was started with */
    int64_t keep_alive_ms;   /* session duration; <0 forever */
    int64_t expires_ms;      /* monotonic; 0 = not armed */
    int64_t state_since_ms;  /* when the current state began */
    int64_t last_used_ms;
    int n_slots, n_active;
    int64_t size, size_vram, context_length;
    /* The runner's reason for running its planned GPU layers on the CPU
     * (ready.offload_error; "" when none), for the log and ps. */
    char offload_error[CR_ERR_MSG_MAX + 64];
    bool unload_when_idle;
    bool duplicate;          /* another runner holds the same model and
                                options: takes nothing new, stops when
                                idle, not listed by ps */
    bool adopted;            /* not our child: it re-registered after a
                                scheduler restart; liveness by kill(pid, 0)
                                and heartbeats, never waitpid */
    bool has_plan;           /* placed from an estimate (else unaccounted
                                until ready reports a size) */
    sch_plan_t plan;
    int64_t last_seen_ms;    /* last message from it */
    int64_t ping_sent_ms;    /* unanswered ping; 0 = none */
    /* Requests it was last told to cancel (a ring): its output for them
     * until it stops is dropped without a cancel each. */
    char canceled[4][MSG_ID_MAX + 1];
    unsigned n_canceled;
    /* The endpoint it binds for direct replies to gateways (`route`);
     * "" when none (a runner on a node, direct replies off). */
    char direct[BUS_ENDPOINT_MAX];
    struct runner *next;
} runner_t;

typedef struct request {
    char id[MSG_ID_MAX + 1];
    zframe_t *client;        /* gateway identity (owned) */
    msg_t msg;               /* the request as received (owned) */
    msg_t resolved;          /* registry answer (owned) */
    req_state_t state;
    runner_t *runner;        /* set while RUNNING */
    bool load_only;          /* empty prompt: load (or unload) only */
    bool has_keep_alive;
    int64_t keep_alive_ms;
    int64_t arrived_ns, dispatched_ns;
    int64_t resolve_sent_ms;
    sch_estimate_t *est;     /* owned; estimated once, when it must load */
    cr_status_t est_status;  /* CR_OK, or why the GGUF could not be read */
    bool est_done;
    bool got_output;         /* a chunk was relayed to the client, or its
                                runner said `started` (direct replies) */
    bool retried;            /* already re-queued once after a runner died */
    int64_t load_notice_ms;  /* last `loading model` progress sent; 0 none */
    int64_t pending_ms;      /* when it became PENDING */
    int64_t probe_ms;        /* last liveness probe of its gateway */
    int64_t cancel_ms;       /* when a cancel went to its runner; 0 none */
    struct request *next;
} request_t;

struct sch_server {
    sch_config_t cfg;
    zsock_t *front;    /* ROUTER: gateways */
    struct bus_outbox *outbox; /* replies gateways could not take yet */
    zsock_t *runners;  /* ROUTER: runners */
    zsock_t *registry; /* DEALER: registry */
    zsock_t *nodes;    /* ROUTER: node agents (CURVE); NULL when off */
    zactor_t *auth;    /* ZAP handler admitting listed node keys */
    bus_keys_stamp_t keys_stamp; /* the keys dir when auth last loaded it */
    int64_t keys_checked_ms;     /* last look at the keys dir */
    bool keys_dir_bad;           /* unreadable at the last look (warned) */
    int64_t trimmed_ms;          /* last cr_mem_trim */
    int64_t housekept_ms;        /* last reap, timers and schedule */
    sch_node_t *node_list;
    bus_poll_t poll; /* front, runners, registry, nodes */
    runner_t *runner_list;
    request_t *req_list; /* arrival order */
    unsigned runner_seq;
    cr_inventory_t inv;
    bool draining;         /* SIGTERM: finishing what runs, refusing new */
    bool gpu_offload_seen; /* a runner reported VRAM: runners use GPUs */
    int64_t nvml_free[CR_MAX_GPUS]; /* per inventory slot, last query */
    int64_t nvml_at_ms;    /* when; 0 = never */
    /* Adoption grace (adopt.c): runners of a previous scheduler on this
     * endpoint, found in /proc at start, may still say hello; no runner is
     * started until they all did or the grace ends. */
    int64_t grace_start_ms, grace_until_ms; /* until 0: none (over) */
    pid_t orphans[ORPHANS_MAX];
    int n_orphans;
    /* Ids of node runners this scheduler declared gone (their node was
     * lost): a late hello from one is told to exit, not adopted. */
    char gone_ids[ORPHANS_MAX][48];
    unsigned n_gone;
    /* node_memo.c: the nodes that held runners when the previous scheduler
     * last wrote cfg.node_memo (waited for during the grace); and whether
     * the runner list changed since this one last wrote it. */
    char memo_nodes[NODE_MEMO_MAX][64];
    int n_memo_nodes;
    bool memo_stale;
};

/* The options slot of a generate, chat, embed or tokenize request (their
 * common head); NULL otherwise. */
static inline msg_options_t **sch_req_options_slot(msg_t *m)
{
    return msg_is_request(m->type) ? &m->u.request.options : NULL;
}

/* Total memory of the GPUs runners really use, for the default context
 * tier: 0 for a described (CORRAL_GPU_INVENTORY) inventory, whose runners
 * run on the CPU, and 0 until a runner has reported VRAM (today's runner
 * is CPU-only: a 256k default context would be allocated in RAM). */
int64_t sch_vram_total(const sch_server_t *s);

/* The scheduler's monotonic clock in ms (the config's, for tests). */
int64_t sch_now_ms(const sch_server_t *s);

/* The inventory runner rn is placed over: its node's or this machine's. */
static inline const cr_inventory_t *sch_runner_inv(const sch_server_t *s,
                                                   const runner_t *rn)
{
    return rn->node ? &rn->node->inv : &s->inv;
}

/* ---- sched.c, for nodes.c ---- */

/* Handles one message from runner `id` (a local one when node is NULL, else
 * one relayed by node). Takes ownership of *m (cleared). */
void sch_runner_msg(sch_server_t *s, sch_node_t *node, const char *id,
                    msg_t *m);

/* The token path: if the frame *body_p from runner `id` (node as above) is
 * a chunk or progress of a request that runner is running, sends it to the
 * request's gateway as it is, having read only its header (msg_peek), and
 * returns true with *body_p taken. Otherwise returns false and leaves the
 * frame for msg_decode and sch_runner_msg. */
bool sch_runner_relay(sch_server_t *s, sch_node_t *node, const char *id,
                      zframe_t **body_p);

/* Runner rn is gone (exited, or its node was lost, as `how` says): its
 * requests fail or run again, and it leaves the list (freed). */
void sch_runner_gone(sch_server_t *s, runner_t *rn, pid_t pid,
                     const char *how);

/* True when runner rn serves r's model (the same name and model file). */
bool sch_same_model(const runner_t *rn, const request_t *r);

/* ---- status.c ---- */

/* Fills m (msg_init'd as MSG_ps_reply; what it points to is allocated in
 * m or borrowed from s: send it before s changes) with one loaded_model
 * per runner that is not a duplicate. CR_E_NOMEM when out of memory. */
cr_status_t sch_ps_build(const sch_server_t *s, msg_t *m);

/* Fills m (msg_init'd as MSG_status_reply; lifetime as above): the ps
 * records with each model's GPUs (its plan's devices), every host (this
 * machine first, then the nodes in join order) with its memory (total,
 * what corral's runners hold, what is left to place in), and the queue:
 * one entry per model that requests wait for (resolving, waiting for a
 * runner, a load or room), in order of their first arrival. */
cr_status_t sch_status_build(const sch_server_t *s, msg_t *m);

/* ---- nodes.c ---- */

/* Binds the nodes ROUTER (CURVE server, ZAP over the keys dir) when
 * cfg.nodes_endpoint is set; a no-op otherwise. Errors name the setting. */
cr_status_t sch_nodes_open(sch_server_t *s, cr_err_t *err);

/* Reads everything waiting on the nodes socket. */
void sch_nodes_on_readable(sch_server_t *s);

/* Drops nodes silent for the node timeout (their runners are gone), and
 * reloads the admitted keys when CORRAL_NODE_KEYS_DIR changed (looked at
 * every NODE_KEYS_CHECK_MS). */
void sch_nodes_check(sch_server_t *s);

/* Sends m to node nd, addressed to runner `to` ("" for the node itself).
 * False (logged) if the node cannot be reached. */
bool sch_node_send(sch_server_t *s, sch_node_t *nd, const char *to,
                   const msg_t *m);

/* Frees every node and the socket (runners must be gone already). */
void sch_nodes_close(sch_server_t *s);

/* ---- adopt.c ---- */

/* Adopts a runner that says hello from outside (it outlived the scheduler
 * that started it) holding a loaded model: a READY runner with its load
 * options, sizes and a fresh keep-alive, prepended to s's list. On a node
 * (node non-NULL) the node owns its process (pid 0). A local one's pid is
 * kept only if /proc says it is the runner binary (so a stray hello cannot
 * make the scheduler signal another process). NULL if the hello names no
 * model, the id is unusable, or memory runs out. */
runner_t *sch_runner_adopt(sch_server_t *s, sch_node_t *node, const char *id,
                           const msg_hello_body_t *hello);

/* rn->direct from its hello: the endpoint it bound for direct replies,
 * kept only for a local runner while CORRAL_DIRECT_REPLIES is on. */
void sch_runner_set_direct(const sch_server_t *s, runner_t *rn, const msg_hello_body_t *h);

/* The adoption grace for a node that joined holding runners (see
 * sch_node_t); one heartbeat-bounded window, like the local one. */
void sch_adopt_grace_node(sch_server_t *s, sch_node_t *nd, int64_t runners);

/* Remembers a node runner declared gone / asks whether id is one. */
void sch_gone_note(sch_server_t *s, const char *id);
bool sch_gone_has(const sch_server_t *s, const char *id);

/* At start: looks in /proc for runner processes (cfg.runner_bin) serving
 * this scheduler's runners endpoint, left by a previous scheduler (killed,
 * or crashed). If there are any, the adoption grace begins: it lasts until
 * each of them was adopted or exited, at most cfg.adopt_grace_ms (0: one
 * heartbeat interval). */
void sch_adopt_grace_begin(sch_server_t *s);

/* True while the adoption grace lasts: no runner may be started (a
 * request waits; the runner for its model may be about to say hello).
 * Logs its end. */
bool sch_adopt_grace(sch_server_t *s);

/* ---- node_memo.c ---- */

/* At start: reads cfg.node_memo (no file, or no memo configured: none) into
 * s->memo_nodes; lines that are not node names are skipped with a warning.
 * Returns how many nodes it names. */
int sch_node_memo_read(sch_server_t *s);

/* How many nodes of the memo have not joined yet; their names, quoted and
 * comma-separated, into names (cap bytes; cap 0: none). */
int sch_node_memo_missing(const sch_server_t *s, char *names, size_t cap);

/* The grace is over: the memo's nodes are no longer waited for. */
void sch_node_memo_forget(sch_server_t *s);

/* Writes the nodes that hold runners now to cfg.node_memo (none: the file
 * is removed) when s->memo_stale says the runner list changed: its
 * callers set it where a runner is added or freed. Not while the adoption
 * grace lasts. A failure is warned and waits for the next change. */
void sch_node_memo_write(sch_server_t *s);

/* A clean stop (every runner told to stop): the file goes. */
void sch_node_memo_remove(sch_server_t *s);

/* ---- load.c ---- */

/* Storage a load message borrows (lives as long as the message). */
typedef struct sch_load_scratch {
    msg_options_t opts;
    msg_device_split_t devs[CR_MAX_GPUS];
} sch_load_scratch_t;

/* Fills *load (initialised here) for runner rn: name, path, template,
 * system, messages from its resolved model; its load options over the
 * model's params with the default num_ctx; num_parallel; the plan
 * (gpu_layers, devices). Strings are borrowed from rn,
 * s and scratch: send it before any of them changes; do not msg_clear. */
void sch_load_build(const sch_server_t *s, const runner_t *rn, msg_t *load,
                    sch_load_scratch_t *scratch);

/* ---- ledger.c ---- */

/* What is left on GPU slot `slot` of the inventory (or of system memory,
 * slot -1) after every runner not yet reaped. */
int64_t sch_ledger_free(const sch_server_t *s, int slot);

/* The same for host node (NULL: this machine): only its runners count. */
int64_t sch_ledger_free_on(const sch_server_t *s, const sch_node_t *node,
                           int slot);

/* What host node's runners (NULL: this machine's) hold on GPU slot `slot`
 * (system memory: slot -1): their plans, or what a runner without one
 * reported (on the CPU). */
int64_t sch_ledger_held_on(const sch_server_t *s, const sch_node_t *node,
                           int slot);

/* The load options a runner for r would be started with (r's own over the
 * model's params). Strings are borrowed from r. */
void sch_request_load_opts(const request_t *r, msg_options_t *out);

/* Plans r's model over what the ledger has left. CR_OK with *has_plan
 * false when the model has no estimate (unreadable GGUF: the runner's
 * load will say why); CR_E_NOMEM with err set when the CPU part does not
 * fit. */
cr_status_t sch_request_plan(sch_server_t *s, request_t *r, sch_plan_t *plan,
                             bool *has_plan, cr_err_t *err);

/* Plans r's model on every host (this machine, then each node in join
 * order) and picks one, the local policy lifted to hosts: a host that
 * holds the whole model on GPUs wins; among those, the one whose chosen
 * GPU has the most free memory; otherwise the most layers on GPUs; ties
 * go to the earlier host (this machine first). *host is NULL for this
 * machine. Errors as sch_request_plan, from this machine's plan when no
 * host can take it. */
cr_status_t sch_request_place(sch_server_t *s, request_t *r, sch_plan_t *plan,
                              bool *has_plan, sch_node_t **host,
                              cr_err_t *err);

/* The room view, for eviction when r's model fits nowhere whole as things
 * are: the same choice as sch_request_place, made as if every idle runner
 * (and every stopping one) were gone, on every host. *host is where room
 * is made (its idle runners are evicted, LRU first, and its busy ones
 * waited for); once it has no runner left, *plan is what loads there.
 * An error means the model fits no host even with every idle runner gone
 * (busy runners still count). */
cr_status_t sch_request_place_room(sch_server_t *s, request_t *r,
                                   sch_plan_t *plan, bool *has_plan,
                                   sch_node_t **host, cr_err_t *err);

/* ---- room.c ---- */

typedef enum sch_room {
    SCH_ROOM_LOAD,  /* start a runner on *host with *plan (if *has_plan) */
    SCH_ROOM_EVICT, /* stop *victim first, then decide again */
    SCH_ROOM_WAIT,  /* a runner is stopping or busy there: decide later */
    SCH_ROOM_FAIL,  /* the model fits nowhere: fail r with *st and err */
} sch_room_t;

/* What r's pending load does about memory (docs/architecture.md
 * "Residency"): LOAD when the model fits whole on some host as things are
 * (sch_request_place; a host without GPUs, a forced num_gpu or a model
 * without an estimate always "fits"), or when nothing runs anywhere (it
 * may spill to the CPU). Otherwise room is made on the one host the room
 * view picks (sch_request_place_room): EVICT its least recently used idle
 * runner, WAIT while one there is stopping or only busy ones are left,
 * LOAD (spilling if need be) once it is empty. Runners on other hosts are
 * never evicted for it. FAIL when the model fits no host even with every
 * idle runner gone and nothing busy could free more; WAIT while something
 * is busy. *host, *plan, *has_plan as sch_request_place. */
sch_room_t sch_room_decide(sch_server_t *s, request_t *r, sch_plan_t *plan,
                           bool *has_plan, sch_node_t **host,
                           runner_t **victim, cr_status_t *st, cr_err_t *err);

/* True if any runner (any state) lives on host (NULL: this machine). */
bool sch_host_has_runners(const sch_server_t *s, const sch_node_t *host);

/* The idle ready runner to evict on host (NULL: this machine), or on any
 * host with any_host: the least recently used. NULL if none is idle. */
runner_t *sch_eviction_victim(const sch_server_t *s, const sch_node_t *host,
                              bool any_host);

#endif
