/* test_scheduler_hosts.c: where room is made when a model fits nowhere
 * (sch_room_decide, room.c) over described inventories of several hosts.
 *
 * The server object is built by hand (no sockets, no processes): this
 * machine's inventory, nodes with theirs, runners with plans on them, and
 * a request whose estimate is given. Each case names the runner the old
 * policy (LRU over every host) would have evicted and checks that only
 * runners on the host where the model will be placed are touched. */
#include "lib/prelude.h"

#include "services/scheduler/sched_int.h"
#include "tests/unit/check.h"

#define MB 1000000LL
#define GB 1000000000LL

static int64_t clock_ms_g = 1000;
static int64_t test_clock(void) { return clock_ms_g; }

typedef struct world {
    sch_server_t s;
    sch_node_t nodes[2];
    runner_t runners[4];
    size_t n_runners;
    request_t req;
    sch_estimate_t est;
} world_t;

/* n layers of 200 MB, a 300 MB output layer, 400 MB compute buffer: whole
 * on one GPU it needs n x 200 + 300 + 400 MB (7.1 GB for 32 layers). */
static void model(sch_estimate_t *e, int n)
{
    memset(e, 0, sizeof *e);
    e->n_layers = n;
    for (int l = 0; l < n; l++)
        e->layer_bytes[l] = 200 * MB;
    e->output_bytes = 300 * MB;
    e->embd_bytes = 100 * MB;
    e->graph_bytes = 400 * MB;
    e->cpu_graph_bytes = 300 * MB;
    e->kv_bytes = n * 50 * MB;
    e->weights_bytes = n * 150 * MB + 400 * MB;
    e->cpu_total_bytes = e->weights_bytes + e->kv_bytes + e->cpu_graph_bytes;
}

/* local: this machine's inventory; node_specs: NULL-terminated, up to 2. */
static world_t *world_new(const char *local, const char *const *node_specs,
                          int model_layers)
{
    world_t *w = calloc(1, sizeof *w);
    cr_err_t err;
    w->s.cfg.now_ms = test_clock;
    CHECK_EQ_INT(cr_inventory_parse(local, &w->s.inv, &err), CR_OK);
    sch_node_t **tail = &w->s.node_list;
    for (size_t i = 0; node_specs && node_specs[i] && i < 2; i++) {
        sch_node_t *nd = &w->nodes[i];
        snprintf(nd->name, sizeof nd->name, "n%zu", i + 1);
        CHECK_EQ_INT(cr_inventory_parse(node_specs[i], &nd->inv, &err), CR_OK);
        *tail = nd;
        tail = &nd->next;
    }
    model(&w->est, model_layers);
    request_t *r = &w->req;
    snprintf(r->id, sizeof r->id, "req");
    msg_init(&r->msg, MSG_generate, "req");
    msg_init(&r->resolved, MSG_resolved, "req");
    r->est = &w->est; /* borrowed: est_done keeps ledger.c from freeing */
    r->est_done = true;
    r->state = RQ_PENDING;
    return w;
}

/* Adds a runner on host (NULL: this machine) holding gpu_bytes on GPU 0
 * (0: none) and cpu_bytes of system memory, last used at last_used. */
static runner_t *add_runner(world_t *w, const char *id, sch_node_t *host,
                            int64_t gpu_bytes, int64_t cpu_bytes,
                            int64_t last_used)
{
    runner_t *rn = &w->runners[w->n_runners++];
    snprintf(rn->id, sizeof rn->id, "%s", id);
    rn->node = host;
    rn->state = RS_READY;
    rn->n_slots = 1;
    rn->last_used_ms = last_used;
    rn->has_plan = true;
    if (gpu_bytes) {
        rn->plan.n_devs = 1;
        rn->plan.devs[0].slot = 0;
        rn->plan.devs[0].bytes = gpu_bytes;
        rn->plan.vram_bytes = gpu_bytes;
    }
    rn->plan.cpu_bytes = cpu_bytes;
    rn->plan.total_bytes = gpu_bytes + cpu_bytes;
    rn->next = w->s.runner_list;
    w->s.runner_list = rn;
    return rn;
}

static void remove_runner(world_t *w, runner_t *gone)
{
    for (runner_t **p = &w->s.runner_list; *p; p = &(*p)->next)
        if (*p == gone) {
            *p = gone->next;
            return;
        }
}

typedef struct decision {
    sch_room_t what;
    sch_node_t *host;
    runner_t *victim;
    sch_plan_t plan;
    bool has_plan;
    cr_status_t st;
    cr_err_t err;
} decision_t;

static decision_t decide(world_t *w)
{
    decision_t d;
    memset(&d, 0, sizeof d);
    d.what = sch_room_decide(&w->s, &w->req, &d.plan, &d.has_plan, &d.host,
                             &d.victim, &d.st, &d.err);
    return d;
}

static void world_free(world_t **w)
{
    msg_clear(&(*w)->req.msg);
    msg_clear(&(*w)->req.resolved);
    free(*w);
    *w = NULL;
}

/* Fits whole somewhere as things are: load there, evict nothing. */
static void test_fits_somewhere(void)
{
    static const char *const nodes[] = {"0:N:16000000000,cpu:64000000000", NULL};
    world_t *w = world_new("0:L:8000000000,cpu:64000000000", nodes, 32);
    add_runner(w, "old-local", NULL, 6 * GB, 0, 10);
    decision_t d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_LOAD);
    CHECK(d.host == &w->nodes[0]);
    CHECK(d.plan.full_offload);
    CHECK(d.victim == NULL);
    world_free(&w);
}

/* The case that motivated per-host eviction: this machine has no GPU and
 * the least recently used runner of all; the node's GPU is full with a
 * newer idle runner. Only the node's runner helps: it is the victim. */
static void test_evict_on_the_gpu_host(void)
{
    static const char *const nodes[] = {"0:N:8000000000,cpu:64000000000", NULL};
    world_t *w = world_new("cpu:8000000000", nodes, 32);
    runner_t *local = add_runner(w, "old-local", NULL, 0, 5 * GB, 10);
    runner_t *remote = add_runner(w, "new-node", &w->nodes[0], 6 * GB, 0, 20);
    decision_t d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_EVICT);
    CHECK_MSG(d.victim == remote, "victim %s (global LRU would say %s)",
              d.victim ? d.victim->id : "none", local->id);
    CHECK(d.host == &w->nodes[0]);

    /* While it stops, wait (no second victim anywhere). */
    remote->state = RS_STOPPING;
    d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_WAIT);
    CHECK(d.victim == NULL);

    /* Reaped: the node is empty and takes the model whole. */
    remove_runner(w, remote);
    d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_LOAD);
    CHECK(d.host == &w->nodes[0]);
    CHECK(d.plan.full_offload);
    CHECK(w->s.runner_list == local); /* this machine's runner untouched */
    world_free(&w);
}

/* The room view counts busy runners: when the host it picks holds only a
 * busy one, the load waits and no idle runner elsewhere is evicted. */
static void test_busy_target_waits(void)
{
    static const char *const nodes[] = {"0:N:8000000000,cpu:64000000000", NULL};
    world_t *w = world_new("cpu:8000000000", nodes, 32);
    add_runner(w, "old-local", NULL, 0, 5 * GB, 10);
    runner_t *remote = add_runner(w, "busy-node", &w->nodes[0], 6 * GB, 0, 20);
    remote->n_active = 1;
    decision_t d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_WAIT);
    CHECK(d.victim == NULL);
    CHECK(d.host == &w->nodes[0]);
    world_free(&w);
}

/* Fits no GPU even on an empty host: room is made on the host that holds
 * the most layers (the 10 GB node), its runner goes, and the model spills
 * there; this machine's older runner stays. */
static void test_spill_on_the_best_host(void)
{
    static const char *const nodes[] = {"0:N:10000000000,cpu:64000000000",
                                        NULL};
    world_t *w = world_new("0:L:8000000000,cpu:64000000000", nodes, 64);
    runner_t *local = add_runner(w, "old-local", NULL, 6 * GB, 0, 10);
    runner_t *remote = add_runner(w, "new-node", &w->nodes[0], 6 * GB, 0, 20);
    decision_t d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_EVICT);
    CHECK(d.victim == remote);
    remove_runner(w, remote);
    d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_LOAD);
    CHECK(d.host == &w->nodes[0]);
    CHECK(!d.plan.full_offload && d.plan.gpu_layers > 0 &&
          d.plan.cpu_bytes > 0);
    CHECK(w->s.runner_list == local);
    world_free(&w);
}

/* On the chosen host, the least recently used idle runner goes first; two
 * equal hosts in the room view: this machine (ties go to it). */
static void test_lru_within_host_and_ties(void)
{
    static const char *const nodes[] = {"0:N:8000000000,cpu:64000000000", NULL};
    world_t *w = world_new("0:L:8000000000,cpu:64000000000", nodes, 32);
    add_runner(w, "node-oldest", &w->nodes[0], 3 * GB, 0, 5);
    add_runner(w, "local-new", NULL, 3 * GB, 0, 30);
    runner_t *lru = add_runner(w, "local-old", NULL, 3 * GB, 0, 20);
    decision_t d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_EVICT);
    CHECK(d.host == NULL);
    CHECK_MSG(d.victim == lru, "victim %s", d.victim ? d.victim->id : "none");
    world_free(&w);
}

/* Too big for any host even with every idle runner gone: fails at once
 * with the memory error, or waits while a busy runner could free more. */
static void test_fits_nowhere(void)
{
    world_t *w = world_new("cpu:4000000000", NULL, 32);
    runner_t *rn = add_runner(w, "idle", NULL, 0, 1 * GB, 10);
    decision_t d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_FAIL);
    CHECK_EQ_INT(d.st, CR_E_NOMEM);
    CHECK(strstr(d.err.msg, "model requires more system memory") != NULL);
    rn->n_active = 1;
    d = decide(w);
    CHECK_EQ_INT(d.what, SCH_ROOM_WAIT);
    CHECK(d.victim == NULL);
    world_free(&w);
}

int main(void)
{
    test_fits_somewhere();
    test_evict_on_the_gpu_host();
    test_busy_target_waits();
    test_spill_on_the_best_host();
    test_lru_within_host_and_ties();
    test_fits_nowhere();
    return check_finish("scheduler_hosts");
}
