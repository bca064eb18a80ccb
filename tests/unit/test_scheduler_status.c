/* test_scheduler_status.c: what the scheduler's `status` reply says
 * (status.c, sch_status_build) over a server object built by hand: this
 * machine with two described GPUs, a node with one, runners with plans
 * on them, and requests in each waiting state. Checks each host's memory
 * (total, held by the runners' plans, left), each model's GPUs, the
 * queue per model, that ps lists the same models, and that the reply
 * survives the wire (encode, decode: records nested three deep). */
#include "lib/prelude.h"

#include "services/scheduler/sched_int.h"
#include "tests/unit/check.h"

#define MB 1000000LL
#define GB 1000000000LL

static int64_t clock_ms_g = 50000;
static int64_t test_clock(void) { return clock_ms_g; }

typedef struct world {
    sch_server_t s;
    sch_node_t node;
    runner_t runners[3];
    request_t reqs[4];
    size_t n_reqs;
} world_t;

/* A ready runner of model `name` on host (NULL: this machine): gpu_bytes
 * on GPU slot `slot` as `layers` layers (none when gpu_bytes is 0) and
 * cpu_bytes of system memory. Listed first (the list is newest first). */
static runner_t *add_runner(world_t *w, size_t k, const char *name,
                            sch_node_t *host, int slot, int64_t gpu_bytes,
                            int layers, int64_t cpu_bytes)
{
    runner_t *rn = &w->runners[k];
    snprintf(rn->id, sizeof rn->id, "r%zu", k);
    rn->node = host;
    rn->state = RS_READY;
    rn->keep_alive_ms = 300000;
    rn->expires_ms = clock_ms_g + 60000;
    msg_init(&rn->resolved, MSG_resolved, rn->id);
    rn->resolved.u.resolved.name = msg_strdup(&rn->resolved, name);
    char path[64];
    snprintf(path, sizeof path, "/store/blobs/sha256-%s", name);
    rn->resolved.u.resolved.model_path = msg_strdup(&rn->resolved, path);
    rn->has_plan = true;
    if (gpu_bytes) {
        const cr_inventory_t *inv = host ? &host->inv : &w->s.inv;
        rn->plan.n_devs = 1;
        rn->plan.devs[0].slot = slot;
        rn->plan.devs[0].index = inv->gpus[slot].index;
        rn->plan.devs[0].first_layer = 10;
        rn->plan.devs[0].n_layers = layers;
        rn->plan.devs[0].bytes = gpu_bytes;
        rn->plan.vram_bytes = gpu_bytes;
    }
    rn->plan.cpu_bytes = cpu_bytes;
    rn->plan.runner_bytes = 100 * MB;
    rn->plan.total_bytes = gpu_bytes + cpu_bytes;
    rn->size = gpu_bytes + cpu_bytes;
    rn->size_vram = gpu_bytes;
    rn->next = w->s.runner_list;
    w->s.runner_list = rn;
    return rn;
}

/* A request for `asked`, in state st, arrived at `at` ms; a pending one
 * carries the registry's canonical name and runner rn's model file. */
static void add_request(world_t *w, const char *asked, req_state_t st,
                        int64_t at, const runner_t *rn)
{
    request_t *r = &w->reqs[w->n_reqs++];
    snprintf(r->id, sizeof r->id, "q%zu", w->n_reqs);
    msg_init(&r->msg, MSG_generate, r->id);
    r->msg.u.generate.model = msg_strdup(&r->msg, asked);
    r->msg.u.generate.has_model = true;
    msg_init(&r->resolved, MSG_resolved, r->id);
    if (st != RQ_RESOLVING && rn) {
        const msg_resolved_body_t *res = &rn->resolved.u.resolved;
        r->resolved.u.resolved.name = msg_strdup(&r->resolved, res->name);
        r->resolved.u.resolved.model_path =
            msg_strdup(&r->resolved, res->model_path);
    }
    r->state = st;
    r->resolve_sent_ms = at;
    request_t **pp = &w->s.req_list;
    while (*pp)
        pp = &(*pp)->next;
    *pp = r;
}

static world_t *world_new(void)
{
    world_t *w = calloc(1, sizeof *w);
    cr_err_t err;
    w->s.cfg.now_ms = test_clock;
    CHECK_EQ_INT(cr_inventory_parse("0:GPU A:8000000000,1:GPU B:4000000000,"
                                    "cpu:16000000000",
                                    &w->s.inv, &err),
                 CR_OK);
    w->s.inv.ram_free_bytes = 12 * GB; /* available at discovery */
    snprintf(w->node.name, sizeof w->node.name, "gpu-box");
    CHECK_EQ_INT(cr_inventory_parse("0:GPU C:24000000000,cpu:64000000000",
                                    &w->node.inv, &err),
                 CR_OK);
    w->s.node_list = &w->node;
    /* a: 3 GB as 20 layers on this machine's GPU B (slot 1), 1 GB on its
     * CPU; b: CPU only (2 GB); c: 5 GB on the node's GPU. */
    runner_t *a = add_runner(w, 0, "a:latest", NULL, 1, 3 * GB, 20, 1 * GB);
    add_runner(w, 1, "b:latest", NULL, 0, 0, 0, 2 * GB);
    add_runner(w, 2, "c:latest", &w->node, 0, 5 * GB, 33, 0);
    a->n_active = 1;
    /* Waiting: two for a (pending), one still resolving "new", one for c
     * (pending); one running on a (not waiting). */
    add_request(w, "a", RQ_RUNNING, clock_ms_g - 9000, a);
    add_request(w, "a", RQ_PENDING, clock_ms_g - 4000, a);
    add_request(w, "new", RQ_RESOLVING, clock_ms_g - 2500, NULL);
    add_request(w, "a", RQ_PENDING, clock_ms_g - 1000, a);
    return w;
}

static void world_free(world_t **w)
{
    for (size_t i = 0; i < 3; i++)
        msg_clear(&(*w)->runners[i].resolved);
    for (size_t i = 0; i < (*w)->n_reqs; i++) {
        msg_clear(&(*w)->reqs[i].msg);
        msg_clear(&(*w)->reqs[i].resolved);
    }
    free(*w);
    *w = NULL;
}

static const msg_loaded_model_t *model_named(const msg_status_reply_body_t *r,
                                             const char *name)
{
    for (size_t i = 0; i < r->models.n; i++)
        if (!strcmp(r->models.v[i].name, name))
            return &r->models.v[i];
    return NULL;
}

/* The checks shared by the built reply and its decoded copy. */
static void check_reply(const msg_status_reply_body_t *r)
{
    CHECK_EQ_INT((int)r->models.n, 3);
    const msg_loaded_model_t *a = model_named(r, "a:latest");
    const msg_loaded_model_t *b = model_named(r, "b:latest");
    const msg_loaded_model_t *c = model_named(r, "c:latest");
    CHECK(a && b && c);
    if (!a || !b || !c)
        return;
    CHECK(a->has_devices && a->devices.n == 1);
    if (a->has_devices && a->devices.n == 1) {
        CHECK_EQ_INT((int)a->devices.v[0].index, 1);
        CHECK_EQ_INT((int)a->devices.v[0].layers, 20);
        CHECK_EQ_INT((int)a->devices.v[0].first_layer, 10);
        CHECK(a->devices.v[0].bytes == 3 * GB);
    }
    CHECK(!b->has_devices || b->devices.n == 0);
    CHECK_EQ_INT((int)a->active, 1);
    CHECK_EQ_INT((int)a->queued, 2);
    CHECK(!a->has_host);
    CHECK(c->has_host && !strcmp(c->host, "gpu-box"));
    CHECK(c->has_devices && c->devices.n == 1 && c->devices.v[0].bytes == 5 * GB);

    CHECK_EQ_INT((int)r->hosts.n, 2);
    if (r->hosts.n != 2)
        return;
    const msg_host_status_t *here = &r->hosts.v[0], *node = &r->hosts.v[1];
    CHECK(!here->has_name);
    CHECK(here->fake);
    CHECK(here->ram_total == 16 * GB);
    /* a: 1 GB + 100 MB runner; b: 2 GB + 100 MB */
    CHECK(here->ram_used == 3 * GB + 200 * MB);
    CHECK(here->ram_free == 12 * GB - (3 * GB + 200 * MB));
    CHECK_EQ_INT((int)here->gpus.n, 2);
    if (here->gpus.n == 2) {
        CHECK_EQ_STR(here->gpus.v[0].name, "GPU A");
        CHECK(here->gpus.v[0].total == 8 * GB && here->gpus.v[0].used == 0 &&
              here->gpus.v[0].free == 8 * GB);
        CHECK_EQ_INT((int)here->gpus.v[1].index, 1);
        CHECK(here->gpus.v[1].total == 4 * GB && here->gpus.v[1].used == 3 * GB &&
              here->gpus.v[1].free == 1 * GB);
    }
    CHECK(node->has_name && !strcmp(node->name, "gpu-box"));
    CHECK(node->ram_total == 64 * GB && node->ram_used == 100 * MB);
    CHECK_EQ_INT((int)node->gpus.n, 1);
    if (node->gpus.n == 1)
        CHECK(node->gpus.v[0].used == 5 * GB && node->gpus.v[0].free == 19 * GB);

    /* In order of first arrival: a (2, oldest 4 s), new (1, 2.5 s). */
    CHECK_EQ_INT((int)r->queue.n, 2);
    if (r->queue.n == 2) {
        CHECK_EQ_STR(r->queue.v[0].model, "a:latest");
        CHECK_EQ_INT((int)r->queue.v[0].waiting, 2);
        CHECK_EQ_INT((int)r->queue.v[0].oldest_ms, 4000);
        CHECK_EQ_STR(r->queue.v[1].model, "new");
        CHECK_EQ_INT((int)r->queue.v[1].waiting, 1);
        CHECK_EQ_INT((int)r->queue.v[1].oldest_ms, 2500);
    }
}

static void test_status(void)
{
    world_t *w = world_new();
    msg_t m;
    msg_init(&m, MSG_status_reply, "id1");
    CHECK_EQ_INT(sch_status_build(&w->s, &m), CR_OK);
    check_reply(&m.u.status_reply);

    /* Over the wire: the same picture comes out. */
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_err_t err;
    CHECK_EQ_INT(msg_encode(&m, &b, &err), CR_OK);
    msg_t back;
    CHECK_EQ_INT(msg_decode(b.data, b.len, &back, &err), CR_OK);
    CHECK_EQ_INT(back.type, MSG_status_reply);
    check_reply(&back.u.status_reply);
    msg_clear(&back);
    cr_buf_free(&b);
    msg_clear(&m);

    /* ps: the same models, without the GPU parts. */
    msg_init(&m, MSG_ps_reply, "id2");
    CHECK_EQ_INT(sch_ps_build(&w->s, &m), CR_OK);
    CHECK_EQ_INT((int)m.u.ps_reply.models.n, 3);
    for (size_t i = 0; i < m.u.ps_reply.models.n; i++)
        CHECK(!m.u.ps_reply.models.v[i].has_devices);
    msg_clear(&m);
    world_free(&w);
}

/* Nothing loaded, nothing waiting: this machine alone, no queue. */
static void test_idle(void)
{
    sch_server_t s;
    memset(&s, 0, sizeof s);
    s.cfg.now_ms = test_clock;
    cr_err_t err;
    CHECK_EQ_INT(cr_inventory_parse("cpu:8000000000", &s.inv, &err), CR_OK);
    s.inv.ram_free_bytes = 6 * GB;
    msg_t m;
    msg_init(&m, MSG_status_reply, "id3");
    CHECK_EQ_INT(sch_status_build(&s, &m), CR_OK);
    const msg_status_reply_body_t *r = &m.u.status_reply;
    CHECK_EQ_INT((int)r->models.n, 0);
    CHECK_EQ_INT((int)r->queue.n, 0);
    CHECK_EQ_INT((int)r->hosts.n, 1);
    CHECK(r->hosts.v[0].ram_used == 0 && r->hosts.v[0].ram_free == 6 * GB);
    CHECK(!r->hosts.v[0].has_gpus);
    msg_clear(&m);
}

int main(void)
{
    test_status();
    test_idle();
    return check_finish("scheduler_status");
}
