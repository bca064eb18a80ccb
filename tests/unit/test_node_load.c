/* test_node_load.c: a load on a node host (services/node/agent.c) whose
 * blob cache is empty. The model, each LoRA adapter and the projector are
 * fetched from the scheduler and the load reaches its runner with every
 * path a local copy; the cache bound keeps a live runner's blobs (and
 * only while it lives); a blob that cannot be fetched, or a path that is
 * no store blob, fails the load naming it.
 *
 * This test is the scheduler (a CURVE ROUTER serving blob_get from a
 * table) and the runners (DEALERs on the node's runner socket). The agent
 * is this binary run again as `test_node_load agent` (a fresh process: no
 * ZeroMQ state crosses a fork); the runners it spawns are this binary as
 * `test_node_load serve ...`, which waits to be killed. */
#include "lib/prelude.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "proto/bus.h"
#include "proto/relay.h"
#include "services/node/agent.h"
#include "tests/unit/check.h"

#define WAIT_MS 30000 /* a cap on waiting for the agent, not a timing */

typedef struct blob {
    const char *bytes;
    const char *digest;
    bool fetched;
} blob_t;

enum { MODEL, AD1, AD2, PROJ, OTHER, THIRD, N_BLOBS };
static blob_t blobs_g[N_BLOBS] = {
    {"model weights", "sha256-a2d42c4aa884e21216cbb8da4c7ba2fcf9b6033b2331666e666145c24caf7a38", false},
    {"adapter one", "sha256-fda17da44541ad261130ec89451f67bd1049466af037c688689faea0a710d981", false},
    {"adapter two", "sha256-c1278867464abe9eebf05b21fe03477d064544ec4a94b74377ae50464e018697", false},
    {"vision projector", "sha256-9f76dfca81ae1293c6dcaa575174d42f51b9250ce59210b2c5536e3ececc13af", false},
    {"another model", "sha256-93dc44381b5260808085f4dd99e5d439f52b86f2938527faf30bd72eb21afbc1", false},
    {"third model", "sha256-ed7893240f885f30505647c892cc9ec6e86427dad3604a899d422580d7a42eb1", false},
};
/* Named by a load, served by no one. */
#define MISSING_DIGEST \
    "sha256-0000000000000000000000000000000000000000000000000000000000000001"

static char tmp_g[256];
static char cache_g[320];
static zsock_t *router_g;     /* the scheduler */
static zframe_t *peer_g;      /* the node, once it said hello */

/* ---- the two other roles of this binary ---- */

static int run_agent(void)
{
    zsys_init();
    zsys_set_logstream(NULL);
    nd_config_t *cfg = calloc(1, sizeof *cfg);
    cr_err_t err;
    nd_agent_t *agent = NULL;
    if (!cfg || nd_config_from_env(cfg, &err) ||
        nd_agent_new(cfg, &agent, &err)) {
        fprintf(stderr, "agent: %s\n", cfg ? err.msg : "out of memory");
        free(cfg);
        return 1;
    }
    nd_agent_run(agent); /* until SIGTERM */
    nd_agent_destroy(&agent);
    free(cfg);
    return 0;
}

/* ---- the scheduler's side ---- */

static void store_path(int i, char *out, size_t cap)
{
    snprintf(out, cap, "/scheduler/store/blobs/%s", blobs_g[i].digest);
}

static void send_node(const char *to, const msg_t *m)
{
    cr_err_t err;
    CHECK_MSG(bus_relay_send_msg(router_g, peer_g, to, m, &err) == CR_OK,
              "to the node: %s", err.msg);
}

static void answer_blob_get(const msg_t *m)
{
    const msg_blob_get_body_t *g = &m->u.blob_get;
    const blob_t *b = NULL;
    for (int i = 0; i < N_BLOBS; i++)
        if (!strcmp(blobs_g[i].digest, g->digest))
            b = &blobs_g[i];
    msg_t r;
    if (!b) {
        msg_make_error(&r, m->id, CR_E_FORBIDDEN,
                       "blob %s belongs to no model placed on node 'test'",
                       g->digest);
    } else {
        blobs_g[b - blobs_g].fetched = true;
        int64_t total = (int64_t)strlen(b->bytes);
        int64_t off = CR_MIN(g->offset, total);
        msg_init(&r, MSG_blob_data, m->id);
        r.u.blob_data.offset = g->offset;
        r.u.blob_data.has_offset = true;
        r.u.blob_data.total = total;
        r.u.blob_data.has_total = true;
        r.u.blob_data.data.data = (uint8_t *)b->bytes + off;
        r.u.blob_data.data.len = (size_t)(total - off);
        r.u.blob_data.has_data = total > off;
    }
    send_node("", &r);
    msg_clear(&r); /* data is not in its arena: only the error text is */
}

/* Serves the node (its blob_gets, its hellos) until a message that is
 * none of those comes: from the node (*to its `to`) or, when runner is
 * not NULL, a message to that runner (*to "@runner"). False if nothing
 * came within WAIT_MS. */
static bool pump(zsock_t *runner, msg_t *out, char *to, size_t cap)
{
    memset(out, 0, sizeof *out); /* safe to msg_clear when nothing came */
    to[0] = '\0';
    zpoller_t *p = zpoller_new(router_g, runner, NULL);
    int64_t deadline = zclock_mono() + WAIT_MS;
    bool got = false;
    while (!got && zclock_mono() < deadline) {
        void *which = zpoller_wait(p, 200);
        cr_err_t err;
        if (which && which == runner) {
            CHECK(bus_recv(runner, 0, out, NULL, &err) == CR_OK);
            snprintf(to, cap, "@runner");
            got = true;
        } else if (which == router_g) {
            zframe_t *peer = NULL, *payload = NULL;
            char rto[BUS_RELAY_TO_MAX + 1];
            if (bus_relay_recv(router_g, &peer, rto, sizeof rto, &payload,
                               &err))
                continue;
            if (!peer_g)
                peer_g = zframe_dup(peer);
            zframe_destroy(&peer);
            msg_t m;
            cr_status_t st = msg_decode(zframe_data(payload),
                                        zframe_size(payload), &m, &err);
            zframe_destroy(&payload);
            if (st)
                continue; /* a runner's raw frame */
            if (m.type == MSG_blob_get && !rto[0]) {
                answer_blob_get(&m);
                msg_clear(&m);
            } else if (m.type == MSG_node_hello && !rto[0]) {
                msg_t pong;
                msg_init(&pong, MSG_pong, m.id);
                send_node("", &pong);
                msg_clear(&m);
            } else {
                *out = m;
                snprintf(to, cap, "%s", rto);
                got = true;
            }
        }
    }
    zpoller_destroy(&p);
    return got;
}

static void wait_hello(void)
{
    zpoller_t *p = zpoller_new(router_g, NULL);
    int64_t deadline = zclock_mono() + WAIT_MS;
    while (!peer_g && zclock_mono() < deadline) {
        if (!zpoller_wait(p, 200))
            continue;
        zframe_t *payload = NULL;
        char to[BUS_RELAY_TO_MAX + 1];
        cr_err_t err;
        if (!bus_relay_recv(router_g, &peer_g, to, sizeof to, &payload, &err))
            zframe_destroy(&payload);
    }
    zpoller_destroy(&p);
    CHECK_MSG(peer_g != NULL, "the node never said hello");
}

/* Spawns runner id on the node and connects as it; returns its socket
 * once the node relays a frame from it (the node's ROUTER knows it). */
static zsock_t *start_runner(const char *id)
{
    msg_t m;
    msg_init(&m, MSG_node_spawn, "");
    m.u.node_spawn.runner_id = (char *)id;
    m.u.node_spawn.has_runner_id = true;
    send_node("", &m);
    char ep[512];
    cr_err_t err;
    CHECK(bus_endpoint("node_runners", ep, sizeof ep, &err) == CR_OK);
    zsock_t *r = zsock_new(ZMQ_DEALER);
    zsock_set_linger(r, 0);
    zsock_set_identity(r, id);
    CHECK(zsock_connect(r, "%s", ep) == 0);
    zstr_send(r, "here");
    msg_t got;
    /* the raw frame is dropped by pump's decode; a node_runner_exit would
     * mean the spawn failed */
    zpoller_t *p = zpoller_new(router_g, NULL);
    int64_t deadline = zclock_mono() + WAIT_MS;
    bool seen = false;
    while (!seen && zclock_mono() < deadline) {
        if (!zpoller_wait(p, 200))
            continue;
        zframe_t *peer = NULL, *payload = NULL;
        char rto[BUS_RELAY_TO_MAX + 1];
        if (bus_relay_recv(router_g, &peer, rto, sizeof rto, &payload, &err))
            continue;
        zframe_destroy(&peer);
        seen = !strcmp(rto, id);
        if (!seen && !msg_decode(zframe_data(payload), zframe_size(payload),
                                 &got, &err)) {
            if (got.type == MSG_blob_get)
                answer_blob_get(&got);
            CHECK_MSG(got.type != MSG_node_runner_exit,
                      "runner %s could not start", id);
            msg_clear(&got);
        }
        zframe_destroy(&payload);
    }
    zpoller_destroy(&p);
    CHECK_MSG(seen, "runner %s never reached the scheduler", id);
    return r;
}

/* A load of model with the given adapters and projector (-1: none); a
 * digest index of -2 is MISSING_DIGEST, -3 a path that is no blob. */
static void send_load(const char *runner_id, int model, const int *adapters,
                      size_t n_adapters, int projector)
{
    static char paths[8][300];
    char *ads[4];
    msg_t m;
    msg_init(&m, MSG_load, "L");
    m.u.load.name = (char *)"test:latest";
    m.u.load.has_name = true;
    store_path(model, paths[0], sizeof paths[0]);
    m.u.load.model_path = paths[0];
    m.u.load.has_model_path = true;
    for (size_t i = 0; i < n_adapters; i++) {
        if (adapters[i] == -2)
            snprintf(paths[1 + i], sizeof paths[1 + i],
                     "/scheduler/store/blobs/%s", MISSING_DIGEST);
        else if (adapters[i] == -3)
            snprintf(paths[1 + i], sizeof paths[1 + i], "/home/me/lora.gguf");
        else
            store_path(adapters[i], paths[1 + i], sizeof paths[1 + i]);
        ads[i] = paths[1 + i];
    }
    m.u.load.adapters.v = ads;
    m.u.load.adapters.n = n_adapters;
    m.u.load.has_adapters = n_adapters > 0;
    if (projector >= 0) {
        store_path(projector, paths[7], sizeof paths[7]);
        m.u.load.projector = paths[7];
        m.u.load.has_projector = true;
    }
    send_node(runner_id, &m);
}

/* path is a file in the node's cache holding blob i's bytes. */
static void check_local(const char *path, int i)
{
    CHECK_MSG(path && !strncmp(path, cache_g, strlen(cache_g)),
              "'%s' is not in the node's cache", path ? path : "(null)");
    const char *base = path ? strrchr(path, '/') : NULL;
    CHECK(base && !strcmp(base + 1, blobs_g[i].digest));
    char buf[64] = "";
    FILE *f = path ? fopen(path, "rb") : NULL;
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    CHECK_EQ_STR(buf, blobs_g[i].bytes);
}

static bool cached(int i)
{
    char path[600];
    snprintf(path, sizeof path, "%s/blobs/%s", cache_g, blobs_g[i].digest);
    return access(path, F_OK) == 0;
}

/* ---- the cases ---- */

static void test_full_load(zsock_t *r1)
{
    const int ads[] = {AD1, AD2};
    send_load("r1", MODEL, ads, 2, PROJ);
    msg_t m;
    char to[64];
    CHECK_MSG(pump(r1, &m, to, sizeof to), "the load never reached r1");
    if (strcmp(to, "@runner")) {
        CHECK_MSG(false, "node said %s to '%s': %s", msg_type_name(m.type), to,
                  m.type == MSG_error ? m.u.error.message : "");
        msg_clear(&m);
        return;
    }
    CHECK_EQ_INT(m.type, MSG_load);
    for (int i = MODEL; i <= PROJ; i++)
        CHECK_MSG(blobs_g[i].fetched, "blob %d was not fetched", i);
    check_local(m.u.load.model_path, MODEL);
    CHECK_EQ_INT((int)m.u.load.adapters.n, 2);
    if (m.u.load.adapters.n == 2) {
        check_local(m.u.load.adapters.v[0], AD1);
        check_local(m.u.load.adapters.v[1], AD2);
    }
    CHECK(m.u.load.has_projector);
    check_local(m.u.load.projector, PROJ);
    msg_clear(&m);
}

/* CORRAL_NODE_CACHE_MAX is 1 byte: every fetch prunes all it may. */
static void test_cache_keeps_live_runner(zsock_t *r2)
{
    send_load("r2", OTHER, NULL, 0, -1);
    msg_t m;
    char to[64];
    CHECK_MSG(pump(r2, &m, to, sizeof to), "the load never reached r2");
    CHECK_EQ_STR(to, "@runner");
    msg_clear(&m);
    CHECK(blobs_g[OTHER].fetched);
    for (int i = MODEL; i <= PROJ; i++)
        CHECK_MSG(cached(i), "blob %d of live runner r1 was pruned", i);

    /* r1 ends: its blobs go at the next fetch; r2's stays. */
    msg_t k;
    msg_init(&k, MSG_node_kill, "");
    k.u.node_kill.runner_id = (char *)"r1";
    k.u.node_kill.has_runner_id = true;
    send_node("", &k);
    bool exited = false;
    while (!exited && pump(NULL, &m, to, sizeof to)) {
        exited = m.type == MSG_node_runner_exit &&
                 !strcmp(m.u.node_runner_exit.runner_id, "r1");
        msg_clear(&m);
    }
    CHECK_MSG(exited, "r1 did not exit");
    zsock_t *r3 = start_runner("r3");
    send_load("r3", THIRD, NULL, 0, -1);
    CHECK_MSG(pump(r3, &m, to, sizeof to), "the load never reached r3");
    CHECK_EQ_STR(to, "@runner");
    msg_clear(&m);
    for (int i = MODEL; i <= PROJ; i++)
        CHECK_MSG(!cached(i), "blob %d of ended runner r1 was kept", i);
    CHECK(cached(OTHER) && cached(THIRD));
    zsock_destroy(&r3);
}

/* A load whose second adapter no one serves fails naming it; one whose
 * adapter is no store blob fails before any fetch. */
static void test_missing_adapter(void)
{
    const int ads[] = {AD1, -2};
    send_load("r4", OTHER, ads, 2, -1);
    msg_t m;
    char to[64];
    CHECK_MSG(pump(NULL, &m, to, sizeof to), "no answer for r4");
    CHECK_EQ_STR(to, "r4");
    CHECK_EQ_INT(m.type, MSG_error);
    if (m.type == MSG_error) {
        CHECK_MSG(strstr(m.u.error.message, "adapter 2") &&
                      strstr(m.u.error.message, MISSING_DIGEST),
                  "error does not name the blob: %s", m.u.error.message);
        CHECK_EQ_INT((int)m.u.error.status, CR_E_FORBIDDEN);
    }
    msg_clear(&m);

    const int bad[] = {-3};
    send_load("r5", OTHER, bad, 1, -1);
    CHECK_MSG(pump(NULL, &m, to, sizeof to), "no answer for r5");
    CHECK_EQ_STR(to, "r5");
    CHECK_EQ_INT(m.type, MSG_error);
    if (m.type == MSG_error)
        CHECK_MSG(strstr(m.u.error.message, "adapter 1") &&
                      strstr(m.u.error.message, "/home/me/lora.gguf"),
                  "error does not name the path: %s", m.u.error.message);
    msg_clear(&m);
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "agent"))
        return run_agent();
    if (argc > 1 && !strcmp(argv[1], "serve")) {
        pause(); /* a runner: killed by the agent (or with it) */
        return 0;
    }
    zsys_init();
    zsys_set_logstream(NULL);
    if (!bus_curve_available()) {
        fprintf(stderr, "libzmq without CURVE: no node to test; skipped\n");
        return 77;
    }
    snprintf(tmp_g, sizeof tmp_g, "/tmp/corral-test-node-load.XXXXXX");
    if (!mkdtemp(tmp_g))
        return 1;
    char keys[300], adm[300], srv[400], nd[400], self[4096];
    snprintf(keys, sizeof keys, "%s/keys", tmp_g);
    snprintf(adm, sizeof adm, "%s/admitted", tmp_g);
    snprintf(cache_g, sizeof cache_g, "%s/cache", tmp_g);
    cr_err_t err;
    CHECK(bus_curve_keygen(keys, "srv", NULL, &err) == CR_OK);
    CHECK(bus_curve_keygen(adm, "nd", NULL, &err) == CR_OK);
    snprintf(srv, sizeof srv, "%s/srv", keys);
    snprintf(nd, sizeof nd, "%s/nd", adm);
    /* the node's keypair lives in the admitted dir: its public half is
     * the key admitted, its _secret file is no key */
    zactor_t *auth = NULL;
    CHECK(bus_curve_auth_new(adm, &auth, &err) == CR_OK);
    router_g = zsock_new(ZMQ_ROUTER);
    zsock_set_linger(router_g, 0);
    CHECK(bus_curve_server(router_g, srv, &err) == CR_OK);
    int port = zsock_bind(router_g, "tcp://127.0.0.1:*");
    CHECK(port > 0);
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    setenv("CORRAL_NODE_NAME", "test", 1);
    setenv("CORRAL_NODE_SCHEDULER", ep, 1);
    setenv("CORRAL_NODE_CERT", nd, 1);
    setenv("CORRAL_NODE_SERVER_CERT", srv, 1);
    setenv("CORRAL_RUNNER_BIN", self, 1);
    setenv("CORRAL_RUNTIME_DIR", tmp_g, 1);
    setenv("CORRAL_GPU_INVENTORY", "none", 1);
    setenv("CORRAL_NODE_CACHE", cache_g, 1);
    setenv("CORRAL_NODE_CACHE_MAX", "1", 1);
    unsetenv("CORRAL_NODE_STORE");
    pid_t agent = fork();
    if (agent == 0) {
        execl(self, self, "agent", (char *)NULL);
        _exit(127);
    }
    CHECK(agent > 0);
    wait_hello();
    if (peer_g) {
        zsock_t *r1 = start_runner("r1");
        zsock_t *r2 = start_runner("r2");
        test_full_load(r1);
        test_cache_keeps_live_runner(r2);
        test_missing_adapter();
        zsock_destroy(&r1);
        zsock_destroy(&r2);
    }
    if (agent > 0) {
        kill(agent, SIGTERM);
        int wst = 0;
        waitpid(agent, &wst, 0);
        CHECK_MSG(WIFEXITED(wst) && WEXITSTATUS(wst) == 0,
                  "the agent ended with status %d", wst);
    }
    zframe_destroy(&peer_g);
    zsock_destroy(&router_g);
    zactor_destroy(&auth);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_g);
    if (system(cmd)) {
    }
    return check_finish("node_load");
}
