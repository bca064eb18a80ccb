/* test_scheduler.c: the scheduler's brokering, residency and fault handling.
 *
 * The scheduler runs in-process; the test plays gateway (a DEALER) and
 * registry (a ROUTER) itself, and the runners are this same executable
 * re-executed as a scripted fake runner (CORRAL_RUNNER_BIN = ourselves), so
 * real processes are spawned, killed and reaped. Time is a test clock, so
 * keep-alive expiry is checked without waiting minutes. */
#include "lib/prelude.h"

#include <arpa/inet.h>
#include <ftw.h>
#include <pthread.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "proto/bus.h"
#include "proto/relay.h"
#include "services/runner/model/forward.h"
#include "tools/synth/synth.h"
#include "services/scheduler/estimate.h"
#include "services/scheduler/sched.h"
#include "tests/unit/check.h"

/* The scheduler's clamp is the runner's limit. */
_Static_assert(SCH_NUM_PARALLEL_MAX == RN_CTX_MAX_SEQ,
               "OLLAMA_NUM_PARALLEL clamp differs from the runner's slot limit");

/* ---- the fake runner (a child process) ---- */

static void fake_send(zsock_t *d, msg_t *m)
{
    bus_send(d, m, NULL);
}

static void fake_done(zsock_t *d, const char *id)
{
    msg_t m;
    msg_init(&m, MSG_done, id);
    m.u.done.done_reason = "stop";
    m.u.done.has_done_reason = true;
    fake_send(d, &m);
}

static void fake_chunk(zsock_t *d, const char *id, const char *text)
{
    msg_t m;
    msg_init(&m, MSG_chunk, id);
    m.u.chunk.response = (char *)text;
    m.u.chunk.has_response = true;
    fake_send(d, &m);
}

/* A runner left by a previous scheduler (id "adopt-*", started by
 * spawn_orphan): it waits for the file <dir>/go-<id>, then says hello
 * holding alpha:latest, as a real runner that outlived its scheduler
 * does; it exits once the test dir is gone. */
static bool orphan_wait(const char *endpoint, const char *id)
{
    char dir[300], go[400];
    snprintf(dir, sizeof dir, "%s", endpoint + strlen("ipc://"));
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    snprintf(go, sizeof go, "%s/go-%s", dir, id);
    while (access(go, F_OK)) {
        if (access(dir, F_OK))
            return false;
        zclock_sleep(10);
    }
    return true;
}

/* With <dir>/slow-hello present, a fake runner connects only once
 * <dir>/hello-go exists (a runner slow to start). */
static bool slow_hello_wait(const char *endpoint)
{
    char dir[300], flag[400], go[400];
    snprintf(dir, sizeof dir, "%s", endpoint + strlen("ipc://"));
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    snprintf(flag, sizeof flag, "%s/slow-hello", dir);
    snprintf(go, sizeof go, "%s/hello-go", dir);
    if (access(flag, F_OK))
        return true;
    while (access(go, F_OK)) {
        if (access(dir, F_OK))
            return false;
        zclock_sleep(10);
    }
    return true;
}

/* direct: the --direct endpoint it was given (NULL: none); its hello
 * names it, as a runner that bound it does. */
static int fake_runner(const char *endpoint, const char *id, const char *direct)
{
    bool orphan = !strncmp(id, "adopt-", 6);
    if (orphan && !orphan_wait(endpoint, id))
        return 0;
    if (!orphan && !slow_hello_wait(endpoint))
        return 0;
    zsock_t *d = zsock_new(ZMQ_DEALER);
    zsock_set_identity(d, id);
    zsock_set_linger(d, 1000);
    if (zsock_connect(d, "%s", endpoint) < 0)
        return 2;
    pid_t parent = getppid();
    msg_t m;
    msg_init(&m, MSG_hello, id);
    m.u.hello.runner_id = (char *)id;
    m.u.hello.has_runner_id = true;
    if (direct) {
        m.u.hello.direct = (char *)direct;
        m.u.hello.has_direct = true;
    }
    msg_options_t lo = {0};
    if (orphan) {
        m.u.hello.pid = getpid();
        m.u.hello.has_pid = true;
        m.u.hello.name = "alpha:latest";
        m.u.hello.has_name = true;
        m.u.hello.model_path = "/fake/alpha.gguf";
        m.u.hello.has_model_path = true;
        lo.num_ctx = 512;
        lo.has_num_ctx = true;
        m.u.hello.options = &lo;
        m.u.hello.has_options = true;
        m.u.hello.size = 4321;
        m.u.hello.has_size = true;
    }
    fake_send(d, &m);
    char plan[256] = "no plan";
    for (;;) {
        cr_status_t st = bus_recv(d, 200, &m, NULL, NULL);
        if (getppid() != parent)
            return 0;
        if (st == CR_E_TIMEOUT)
            continue;
        if (st)
            return 3;
        if (m.type == MSG_shutdown) {
            msg_clear(&m);
            break;
        }
        if (m.type == MSG_ping) {
            msg_t pong;
            msg_init(&pong, MSG_pong, m.id);
            fake_send(d, &pong);
        }
        if (m.type == MSG_load && strstr(m.u.load.model_path, "stuck")) {
            msg_clear(&m); /* a load that never finishes */
            continue;
        }
        if (m.type == MSG_load) {
            msg_t r;
            if (strstr(m.u.load.model_path, "bad")) {
                msg_make_error(&r, id, CR_E_CORRUPT, "%s is not a GGUF file",
                               m.u.load.model_path);
            } else {
                /* Remember the plan for a "plan" prompt to echo. */
                int w = snprintf(plan, sizeof plan, "gpu_layers=%" PRId64,
                                 m.u.load.has_gpu_layers ? m.u.load.gpu_layers
                                                         : -1);
                for (size_t i = 0; i < m.u.load.devices.n && w > 0 &&
                                   (size_t)w < sizeof plan;
                     i++) {
                    const msg_device_split_t *dv = &m.u.load.devices.v[i];
                    w += snprintf(plan + w, sizeof plan - (size_t)w,
                                  " gpu%" PRId64 ":%" PRId64 "+%" PRId64,
                                  dv->index, dv->first_layer, dv->layers);
                }
                if (m.u.load.has_kv_cache_type && w > 0 && (size_t)w < sizeof plan)
                    snprintf(plan + w, sizeof plan - (size_t)w, " kv=%s",
                             m.u.load.kv_cache_type);
                msg_init(&r, MSG_ready, id);
                r.u.ready.size = 1234;
                r.u.ready.has_size = true;
                r.u.ready.context_length = m.u.load.options->num_ctx;
                r.u.ready.has_context_length = true;
                /* a runner whose GPU backend could not be used says why */
                if (strstr(m.u.load.model_path, "nodriver") && m.u.load.gpu_layers > 0) {
                    r.u.ready.offload_error = "cuda: no NVIDIA driver (fake)";
                    r.u.ready.has_offload_error = true;
                }
            }
            fake_send(d, &r);
            msg_clear(&r);
        } else if (m.type == MSG_generate) {
            const char *p = m.u.generate.prompt ? m.u.generate.prompt : "";
            if (!strcmp(p, "no-route?")) {
                /* Whether the gateway's no_route reached us. */
                msg_t nr;
                bool heard = bus_recv(d, 5000, &nr, NULL, NULL) == CR_OK;
                bool said = heard && nr.type == MSG_no_route && !strcmp(nr.id, m.id);
                if (heard)
                    msg_clear(&nr);
                fake_chunk(d, m.id, said ? "no_route=yes" : "no_route=no");
                fake_done(d, m.id);
                msg_clear(&m);
                continue;
            }
            if (!strcmp(p, "direct?")) {
                /* Whether the request came marked for direct replies. */
                fake_chunk(d, m.id, m.u.generate.has_direct && m.u.generate.direct
                                        ? "direct=yes"
                                        : "direct=no");
                fake_done(d, m.id);
                msg_clear(&m);
                continue;
            }
            /* Says `started` (its chunks went direct) and dies, the first
             * time only. */
            if (!strncmp(p, "started-crash:", 14) && access(p + 14, F_OK)) {
                FILE *mk = fopen(p + 14, "w");
                if (mk)
                    fclose(mk);
                msg_t note;
                msg_init(&note, MSG_started, m.id);
                fake_send(d, &note);
                zclock_sleep(50);
                _exit(3);
            }
            if (!strcmp(p, "plan")) {
                fake_chunk(d, m.id, plan);
                fake_done(d, m.id);
                msg_clear(&m);
                continue;
            }
            if (!strcmp(p, "hang")) {
                /* Stops answering anything, as a SIGSTOPped or wedged
                 * runner would. */
                fake_chunk(d, m.id, "first");
                zclock_sleep(50);
                raise(SIGSTOP);
            }
            if (!strcmp(p, "crash")) {
                fake_chunk(d, m.id, "partial");
                zclock_sleep(50);
                _exit(3);
            }
            /* Dies before answering, the first time only (a marker file
             * named by the prompt's suffix remembers it). */
            if (!strncmp(p, "die-once:", 9) && access(p + 9, F_OK)) {
                FILE *mk = fopen(p + 9, "w");
                if (mk)
                    fclose(mk);
                _exit(4);
            }
            if (!strcmp(p, "die-always"))
                _exit(4);
            /* "drain-die:<dir>": says it got the request (<dir>/got),
             * waits for <dir>/go, then dies without output, the first time
             * only (<dir>/died); later it answers. */
            if (!strncmp(p, "drain-die:", 10)) {
                char got[400], go[400], died[400];
                snprintf(got, sizeof got, "%s/got", p + 10);
                snprintf(go, sizeof go, "%s/go", p + 10);
                snprintf(died, sizeof died, "%s/died", p + 10);
                if (access(died, F_OK)) {
                    FILE *mk = fopen(got, "w");
                    if (mk)
                        fclose(mk);
                    while (access(go, F_OK) && getppid() == parent)
                        zclock_sleep(5);
                    mk = fopen(died, "w");
                    if (mk)
                        fclose(mk);
                    _exit(4);
                }
            }
            /* SIGKILLed (as by the OOM killer) the first time only. */
            if (!strncmp(p, "killed-once:", 12) && access(p + 12, F_OK)) {
                FILE *mk = fopen(p + 12, "w");
                if (mk)
                    fclose(mk);
                raise(SIGKILL);
            }
            if (!strncmp(p, "flood:", 6)) {
                /* N chunks of 4 KiB ("<i>:" then padding), then done:
                 * more than a gateway's zmq queue holds. */
                static char text[4096];
                int n = atoi(p + 6);
                for (int i = 0; i < n; i++) {
                    memset(text, 'x', sizeof text - 1);
                    int w = snprintf(text, sizeof text, "%d:", i);
                    text[w] = 'x';
                    fake_chunk(d, m.id, text);
                }
                fake_done(d, m.id);
                msg_clear(&m);
                continue;
            }
            if (!strcmp(p, "deaf")) {
                /* Never ends it, cancel or not (a lost reply). */
                fake_chunk(d, m.id, "first");
                msg_clear(&m);
                continue;
            }
            if (!strcmp(p, "until-cancel")) {
                /* Runs until canceled, however long that takes. */
                fake_chunk(d, m.id, "first");
                msg_t c;
                for (;;) {
                    cr_status_t rs = bus_recv(d, 200, &c, NULL, NULL);
                    if (getppid() != parent)
                        return 0;
                    if (rs)
                        continue;
                    bool canceled = c.type == MSG_cancel &&
                                    !strcmp(c.id, m.id);
                    if (c.type == MSG_ping) {
                        msg_t pong;
                        msg_init(&pong, MSG_pong, c.id);
                        fake_send(d, &pong);
                    }
                    msg_clear(&c);
                    if (canceled)
                        break;
                }
                msg_t e;
                msg_make_error(&e, m.id, CR_E_CANCELED, "request canceled");
                fake_send(d, &e);
                msg_clear(&e);
                msg_clear(&m);
                continue;
            }
            if (!strcmp(p, "slow")) {
                fake_chunk(d, m.id, "first");
                msg_t c;
                bool canceled = false;
                for (int i = 0; i < 50 && !canceled; i++)
                    if (!bus_recv(d, 100, &c, NULL, NULL)) {
                        canceled = c.type == MSG_cancel;
                        msg_clear(&c);
                    }
                msg_t e;
                msg_make_error(&e, m.id, CR_E_CANCELED, "request canceled");
                fake_send(d, &e);
                msg_clear(&e);
            } else {
                /* Echo the merged options so the test can check merging. */
                char text[128];
                snprintf(text, sizeof text, "temp=%.2f ctx=%" PRId64,
                         m.u.generate.options->temperature,
                         m.u.generate.options->num_ctx);
                fake_chunk(d, m.id, text);
                msg_t done;
                msg_init(&done, MSG_done, m.id);
                done.u.done.done_reason = "stop";
                done.u.done.has_done_reason = true;
                done.u.done.eval_count = 1;
                done.u.done.has_eval_count = true;
                fake_send(d, &done);
            }
        }
        msg_clear(&m);
    }
    zsock_destroy(&d);
    return 0;
}

/* ---- the test side ---- */

static int64_t clock_ms_g;
static int64_t test_clock(void) { return clock_ms_g; }

/* Set: resolves carry this manifest digest. */
static const char *resolve_digest_g;

typedef struct env {
    char dir[256];
    sch_server_t *sched;
    zsock_t *client;   /* gateway */
    zsock_t *registry; /* fake registry ROUTER */
    bool registry_silent;
} env_t;

static void pump(env_t *e, int rounds)
{
    for (int i = 0; i < rounds; i++) {
        sch_server_run_once(e->sched, 5);
        /* Answer resolves as the registry would. */
        msg_t m;
        zframe_t *ident = NULL;
        while (!e->registry_silent &&
               bus_recv(e->registry, 0, &m, &ident, NULL) == CR_OK) {
            msg_t r;
            const char *name = m.u.resolve.model;
            if (!strcmp(name, "missing")) {
                msg_make_error(&r, m.id, CR_E_NOT_FOUND, "model not found");
            } else {
                msg_init(&r, MSG_resolved, m.id);
                char display[128], path[400];
                snprintf(display, sizeof display, "%s:latest", name);
                /* A real (synthetic) GGUF when the test wrote one. */
                snprintf(path, sizeof path, "%s/%s.gguf", e->dir, name);
                if (access(path, R_OK))
                    snprintf(path, sizeof path, "/fake/%s.gguf", name);
                r.u.resolved.name = msg_strdup(&r, display);
                r.u.resolved.has_name = true;
                r.u.resolved.model_path = msg_strdup(&r, path);
                r.u.resolved.has_model_path = true;
                msg_options_t *p = msg_alloc(&r, sizeof *p);
                p->temperature = 0.25; /* a model default */
                p->has_temperature = true;
                r.u.resolved.params = p;
                r.u.resolved.has_params = true;
                if (resolve_digest_g) {
                    r.u.resolved.digest = msg_strdup(&r, resolve_digest_g);
                    r.u.resolved.has_digest = true;
                }
            }
            bus_send_to(e->registry, ident, &r, NULL);
            msg_clear(&r);
            msg_clear(&m);
            zframe_destroy(&ident);
        }
        zframe_destroy(&ident);
    }
}

static int pongs_seen_g; /* liveness probes client_recv_on skipped */

/* Pumps until the client has a message (or ~5 s pass). */
static bool client_recv_on(env_t *e, zsock_t *client, msg_t *out)
{
    for (int i = 0; i < 1000; i++) {
        if (bus_recv(client, 0, out, NULL, NULL) == CR_OK) {
            if (out->type == MSG_pong) { /* a liveness probe: skipped, as
                                            gateways do */
                pongs_seen_g++;
                msg_clear(out);
                continue;
            }
            return true;
        }
        pump(e, 1);
    }
    return false;
}

/* True when nothing but liveness probes waits for the client. */
static bool client_quiet(env_t *e)
{
    msg_t m;
    while (bus_recv(e->client, 0, &m, NULL, NULL) == CR_OK) {
        bool probe = m.type == MSG_pong;
        msg_clear(&m);
        if (!probe)
            return false;
    }
    return true;
}

static bool client_recv(env_t *e, msg_t *out)
{
    return client_recv_on(e, e->client, out);
}

/* Set: the next env_start turns direct replies on (CORRAL_DIRECT_REPLIES). */
static bool direct_g;
/* Set: the next send_generate asks for direct replies. */
static bool next_direct_g;

static double next_temp_g = -1; /* >= 0: the next request sets temperature */

static void send_generate(env_t *e, const char *id, const char *model,
                          const char *prompt, const char *keep_alive_or_null,
                          int64_t keep_alive_ms)
{
    msg_t m;
    msg_init(&m, MSG_generate, id);
    m.u.generate.model = (char *)model;
    m.u.generate.has_model = true;
    if (prompt) {
        m.u.generate.prompt = (char *)prompt;
        m.u.generate.has_prompt = true;
    }
    if (keep_alive_or_null) {
        m.u.generate.keep_alive_ms = keep_alive_ms;
        m.u.generate.has_keep_alive_ms = true;
    }
    m.u.generate.direct = m.u.generate.has_direct = next_direct_g;
    next_direct_g = false;
    msg_options_t o = {0};
    o.num_ctx = 512;
    o.has_num_ctx = true;
    if (next_temp_g >= 0) {
        o.temperature = next_temp_g;
        o.has_temperature = true;
        next_temp_g = -1;
    }
    m.u.generate.options = &o;
    m.u.generate.has_options = true;
    CHECK_EQ_INT(bus_send(e->client, &m, NULL), CR_OK);
}

/* Runs one request to its end; returns the final message type and copies
 * the first chunk's text. */
static msg_type_t run_request(env_t *e, const char *id, const char *model,
                              const char *prompt, char *first_chunk,
                              msg_t *final_out)
{
    send_generate(e, id, model, prompt, NULL, 0);
    if (first_chunk)
        first_chunk[0] = '\0';
    for (;;) {
        msg_t m;
        if (!client_recv(e, &m))
            return MSG_NONE;
        CHECK_EQ_STR(m.id, id);
        if (m.type == MSG_chunk) {
            if (first_chunk && !first_chunk[0] && m.u.chunk.response)
                snprintf(first_chunk, 128, "%s", m.u.chunk.response);
            msg_clear(&m);
            continue;
        }
        msg_type_t t = m.type;
        if (final_out)
            *final_out = m;
        else
            msg_clear(&m);
        return t;
    }
}

/* Loops below wait for their condition; this much real time is only the
 * net under a hung test (a bounded count of pump rounds was ~4 s, which
 * ASan on a loaded 2-core machine outran). */
#define WAIT_NET_S 120.0

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void wait_runners(env_t *e, size_t n)
{
    double t0 = mono_s();
    while (sch_server_runner_count(e->sched) != n && mono_s() - t0 < WAIT_NET_S)
        pump(e, 2);
    CHECK_EQ_INT(sch_server_runner_count(e->sched), n);
}

/* > 0: the next env_start sets CORRAL_STREAM_BUFFER. */
static int64_t stream_buffer_g;

/* >= 0: the next env_start sets these heartbeat timings. */
static int64_t hb_interval_g = -1, hb_timeout_g = -1;

/* Set: the next env_start accepts nodes here (CURVE: these files). */
static char nodes_ep_g[64], nodes_cert_g[400], node_keys_g[400];

/* A described inventory for the next env_start (NULL: discover). */
static const char *inventory_g;
static const char *kv_cache_type_g = ""; /* OLLAMA_KV_CACHE_TYPE */
static bool flash_attention_g;           /* OLLAMA_FLASH_ATTENTION */
static bool inventory_real_g; /* pretend it was discovered, not described */

/* Set: the next env_start uses this dir (made already). */
static char env_dir_g[256];

static void env_start(env_t *e, int max_loaded, int max_queue)
{
    memset(e, 0, sizeof *e);
    if (env_dir_g[0]) {
        snprintf(e->dir, sizeof e->dir, "%s", env_dir_g);
        env_dir_g[0] = '\0';
    } else {
        snprintf(e->dir, sizeof e->dir, "/tmp/corral-sched-XXXXXX");
        CHECK(mkdtemp(e->dir) != NULL);
    }
    sch_config_t cfg = {0};
    snprintf(cfg.front_endpoint, sizeof cfg.front_endpoint,
             "ipc://%s/scheduler.sock", e->dir);
    snprintf(cfg.runners_endpoint, sizeof cfg.runners_endpoint,
             "ipc://%s/runners.sock", e->dir);
    snprintf(cfg.registry_endpoint, sizeof cfg.registry_endpoint,
             "ipc://%s/registry.sock", e->dir);
    ssize_t n = readlink("/proc/self/exe", cfg.runner_bin,
                         sizeof cfg.runner_bin - 1);
    CHECK(n > 0);
    cfg.keep_alive_ms = 5 * 60 * 1000;
    cfg.load_timeout_ms = 60 * 1000;
    cfg.resolve_timeout_ms = 2000;
    cfg.max_loaded = max_loaded;
    cfg.max_queue = max_queue;
    cfg.num_parallel = 1;
    cfg.now_ms = test_clock;
    cfg.stream_buffer_bytes = stream_buffer_g;
    stream_buffer_g = 0;
    cfg.direct_replies = direct_g;
    direct_g = false;
    snprintf(cfg.kv_cache_type, sizeof cfg.kv_cache_type, "%s", kv_cache_type_g);
    cfg.flash_attention = flash_attention_g;
    if (nodes_ep_g[0]) {
        snprintf(cfg.nodes_endpoint, sizeof cfg.nodes_endpoint, "%s",
                 nodes_ep_g);
        snprintf(cfg.nodes_cert, sizeof cfg.nodes_cert, "%s", nodes_cert_g);
        snprintf(cfg.node_keys_dir, sizeof cfg.node_keys_dir, "%s",
                 node_keys_g);
        snprintf(cfg.node_memo, sizeof cfg.node_memo, "%s/scheduler-nodes", e->dir);
        nodes_ep_g[0] = '\0';
    }
    if (hb_interval_g >= 0) {
        cfg.heartbeat_interval_ms = hb_interval_g;
        cfg.heartbeat_timeout_ms = hb_timeout_g;
    }
    if (inventory_g) {
        cr_err_t ierr;
        cfg.inventory.ram_total_bytes = 64LL << 30;
        cfg.inventory.ram_free_bytes = 64LL << 30;
        CHECK_EQ_INT(cr_inventory_parse(inventory_g, &cfg.inventory, &ierr),
                     CR_OK);
        cfg.inventory.fake = !inventory_real_g;
        cfg.has_inventory = true;
    }
    e->registry = zsock_new(ZMQ_ROUTER);
    CHECK(zsock_bind(e->registry, "%s", cfg.registry_endpoint) >= 0);
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = sch_server_new(&cfg, &e->sched, &err);
    CHECK_MSG(st == CR_OK, "sch_server_new: %d: %s", (int)st, err.msg);
    e->client = zsock_new(ZMQ_DEALER);
    CHECK(zsock_connect(e->client, "%s", cfg.front_endpoint) >= 0);
}

static int rm_entry(const char *p, const struct stat *sb, int f, struct FTW *w)
{
    CR_UNUSED(sb);
    CR_UNUSED(f);
    CR_UNUSED(w);
    return remove(p);
}

static void env_stop(env_t *e)
{
    sch_server_destroy(&e->sched);
    zsock_destroy(&e->client);
    zsock_destroy(&e->registry);
    nftw(e->dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static void test_request_and_keep_alive(void)
{
    env_t e;
    env_start(&e, 3, 16);
    char first[128];
    msg_t done;
    next_temp_g = 0.6;
    CHECK_EQ_INT(run_request(&e, "req-1", "alpha", "hi", first, &done),
                 MSG_done);
    /* Request options over the model's params; num_ctx from the request. */
    CHECK_EQ_STR(first, "temp=0.60 ctx=512");
    CHECK(done.u.done.has_total_duration && done.u.done.total_duration > 0);
    CHECK(done.u.done.has_load_duration);
    CHECK_EQ_STR(done.u.done.done_reason, "stop");
    msg_clear(&done);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);

    /* ps reports it. */
    msg_t ps;
    msg_init(&ps, MSG_ps, "ps-1");
    bus_send(e.client, &ps, NULL);
    msg_t r;
    CHECK(client_recv(&e, &r));
    CHECK_EQ_INT(r.type, MSG_ps_reply);
    CHECK_EQ_INT(r.u.ps_reply.models.n, 1);
    if (r.u.ps_reply.models.n == 1) {
        CHECK_EQ_STR(r.u.ps_reply.models.v[0].name, "alpha:latest");
        CHECK_EQ_INT(r.u.ps_reply.models.v[0].context_length, 512);
        CHECK_EQ_INT(r.u.ps_reply.models.v[0].size, 1234);
        CHECK(r.u.ps_reply.models.v[0].expires_at != NULL);
    }
    msg_clear(&r);

    /* A second request reuses the runner, and the loading request's
     * sampling options do not stick to it (only load options do): it gets
     * the model's default temperature. */
    CHECK_EQ_INT(run_request(&e, "req-2", "alpha", "hi", first, NULL), MSG_done);
    CHECK_EQ_STR(first, "temp=0.25 ctx=512");
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);

    /* Keep-alive: nothing happens before 5 minutes, unload after. */
    clock_ms_g += 5 * 60 * 1000 - 1000;
    pump(&e, 20);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    clock_ms_g += 2000;
    wait_runners(&e, 0);
    env_stop(&e);
}

/* A request answered within a probe interval (the test clock stands
 * still) gets no liveness probe: the first is due CLIENT_PROBE_MS after it
 * arrived, not at once (issue 18: a pong per request was one more message
 * and one more wake-up of the gateway's thread on every request). */
static void test_no_early_probe(void)
{
    env_t e;
    env_start(&e, 3, 16);
    clock_ms_g += 60 * 1000; /* far from the clock's zero */
    CHECK_EQ_INT(run_request(&e, "warm", "alpha", "hi", NULL, NULL), MSG_done);
    pongs_seen_g = 0;
    CHECK_EQ_INT(run_request(&e, "quick", "alpha", "hi", NULL, NULL), MSG_done);
    CHECK_EQ_INT(pongs_seen_g, 0);
    CHECK(client_quiet(&e));
    env_stop(&e);
}

/* The ps digest of the only model listed ("" unless exactly one). */
static void ps_digest(env_t *e, char *out, size_t cap)
{
    msg_t ps;
    msg_init(&ps, MSG_ps, "ps-d");
    bus_send(e->client, &ps, NULL);
    msg_t r;
    out[0] = '\0';
    if (!client_recv(e, &r))
        return;
    if (r.type == MSG_ps_reply && r.u.ps_reply.models.n == 1 &&
        r.u.ps_reply.models.v[0].digest)
        snprintf(out, cap, "%s", r.u.ps_reply.models.v[0].digest);
    msg_clear(&r);
}

/* A model created again under its name (another manifest) is loaded
 * afresh: the runner of the old one makes way, ps lists the model once,
 * with the new digest (the runner kept the old template, adapters and
 * projector until its keep-alive ran out). */
static void test_recreated_model_reloads(void)
{
    env_t e;
    env_start(&e, 3, 16);
    resolve_digest_g = "1111";
    CHECK_EQ_INT(run_request(&e, "rc-1", "alpha", "hi", NULL, NULL), MSG_done);
    char d[80];
    ps_digest(&e, d, sizeof d);
    CHECK_EQ_STR(d, "1111");
    resolve_digest_g = "2222";
    CHECK_EQ_INT(run_request(&e, "rc-2", "alpha", "hi", NULL, NULL), MSG_done);
    wait_runners(&e, 1);
    ps_digest(&e, d, sizeof d);
    CHECK_EQ_STR(d, "2222");
    /* the same manifest again: the runner is reused */
    CHECK_EQ_INT(run_request(&e, "rc-3", "alpha", "hi", NULL, NULL), MSG_done);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    resolve_digest_g = NULL;
    env_stop(&e);
}

static void test_keep_alive_zero_and_unload(void)
{
    env_t e;
    env_start(&e, 3, 16);
    /* keep_alive 0 on a request: unloaded as soon as it finishes. */
    send_generate(&e, "k0", "beta", "hi", "0", 0);
    msg_t m;
    int got_done = 0;
    while (client_recv(&e, &m)) {
        bool end = m.type != MSG_chunk;
        got_done += m.type == MSG_done;
        msg_clear(&m);
        if (end)
            break;
    }
    CHECK_EQ_INT(got_done, 1);
    wait_runners(&e, 0);

    /* Empty prompt loads (done_reason load) and stays (forever: -1). */
    send_generate(&e, "load", "beta", NULL, "-1", -1);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_done);
    CHECK_EQ_STR(m.u.done.done_reason, "load");
    msg_clear(&m);
    clock_ms_g += 24LL * 3600 * 1000;
    pump(&e, 20);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);

    /* Empty prompt with keep_alive 0: unload. */
    send_generate(&e, "unload", "beta", NULL, "0", 0);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_done);
    CHECK_EQ_STR(m.u.done.done_reason, "unload");
    msg_clear(&m);
    wait_runners(&e, 0);
    env_stop(&e);
}

static void test_errors(void)
{
    env_t e;
    env_start(&e, 3, 16);
    msg_t m;
    CHECK_EQ_INT(run_request(&e, "nf", "missing", "hi", NULL, &m), MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_NOT_FOUND);
    CHECK_EQ_STR(m.u.error.message,
                 "model \"missing\" not found, try pulling it first");
    msg_clear(&m);

    /* A model whose load fails: clear error, no runner left behind. */
    CHECK_EQ_INT(run_request(&e, "bad", "bad", "hi", NULL, &m), MSG_error);
    CHECK(strstr(m.u.error.message, "failed to load model") != NULL);
    CHECK(strstr(m.u.error.message, "not a GGUF") != NULL);
    /* The store's path is not told to clients (issue 20, 7). */
    CHECK_MSG(!strstr(m.u.error.message, "/fake/"), "%s", m.u.error.message);
    msg_clear(&m);
    wait_runners(&e, 0);

    /* A runner that dies mid-request: error for it, reload for the next. */
    CHECK_EQ_INT(run_request(&e, "crash", "gamma", "crash", NULL, &m),
                 MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_RUNNER);
    CHECK(strstr(m.u.error.message, "unexpectedly stopped") != NULL);
    msg_clear(&m);
    wait_runners(&e, 0);
    CHECK_EQ_INT(run_request(&e, "after", "gamma", "hi", NULL, NULL), MSG_done);

    /* A runner that dies before answering anything: the request runs again
     * on a fresh runner and its client never sees the crash... */
    char marker[300], prompt[400];
    snprintf(marker, sizeof marker, "%s/died-once", e.dir);
    snprintf(prompt, sizeof prompt, "die-once:%s", marker);
    CHECK_EQ_INT(run_request(&e, "retry", "gamma", prompt, NULL, NULL),
                 MSG_done);
    CHECK(access(marker, F_OK) == 0); /* it did die once */
    /* A runner SIGKILLed under a request (the OOM killer's way) does not
     * get the request again (issue 20, 2): its client gets the error. */
    snprintf(marker, sizeof marker, "%s/killed-once", e.dir);
    snprintf(prompt, sizeof prompt, "killed-once:%s", marker);
    CHECK_EQ_INT(run_request(&e, "oom", "gamma", prompt, NULL, &m), MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_RUNNER);
    CHECK(m.u.error.message && strstr(m.u.error.message, "signal 9") != NULL);
    msg_clear(&m);
    CHECK(access(marker, F_OK) == 0);
    wait_runners(&e, 0);
    /* ...but only once: a request that kills every runner fails. */
    CHECK_EQ_INT(run_request(&e, "doomed", "gamma", "die-always", NULL, &m),
                 MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_RUNNER);
    msg_clear(&m);
    wait_runners(&e, 0);

    /* Cancel while running: forwarded to the runner, which stops. */
    send_generate(&e, "slow", "gamma", "slow", NULL, 0);
    CHECK(client_recv(&e, &m)); /* the first chunk */
    CHECK_EQ_INT(m.type, MSG_chunk);
    msg_clear(&m);
    msg_t c;
    msg_init(&c, MSG_cancel, "slow");
    bus_send(e.client, &c, NULL);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_CANCELED);
    msg_clear(&m);

    /* A garbage frame is answered, and the scheduler keeps serving. */
    zframe_t *junk = zframe_new("\xc1\xc1\xc1", 3);
    zframe_send(&junk, e.client, 0);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_PROTO);
    msg_clear(&m);
    CHECK_EQ_INT(run_request(&e, "alive", "gamma", "hi", NULL, NULL), MSG_done);
    env_stop(&e);
}

/* A load that makes no progress: a waiting request hears `loading model`
 * once the load has lasted a second (not before: fast loads send nothing),
 * then fails cleanly at OLLAMA_LOAD_TIMEOUT, and the runner is stopped. */
static void test_load_progress_and_timeout(void)
{
    env_t e;
    env_start(&e, 3, 16);
    send_generate(&e, "st", "stuck", "hi", NULL, 0);
    for (double t0 = mono_s();
         sch_server_runner_count(e.sched) != 1 && mono_s() - t0 < WAIT_NET_S;)
        pump(&e, 2);
    pump(&e, 20);
    msg_t m;
    CHECK(client_quiet(&e)); /* nothing yet */
    clock_ms_g += 1500;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_progress);
    CHECK_EQ_STR(m.id, "st");
    if (m.type == MSG_progress)
        CHECK_EQ_STR(m.u.progress.status, "loading model");
    msg_clear(&m);
    clock_ms_g += 1000; /* repeats only every 5 s */
    pump(&e, 20);
    CHECK(client_quiet(&e));
    clock_ms_g += 60 * 1000; /* past the load timeout */
    int progress = 0;
    while (client_recv(&e, &m) && m.type == MSG_progress) {
        progress++;
        msg_clear(&m);
    }
    CHECK(progress <= 1);
    CHECK_EQ_INT(m.type, MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_TIMEOUT);
    CHECK_EQ_STR(m.u.error.message,
                 "timed out waiting for the model runner to start");
    msg_clear(&m);
    wait_runners(&e, 0);
    env_stop(&e);
}

static void test_eviction_and_queue(void)
{
    env_t e;
    env_start(&e, 1, 2);
    CHECK_EQ_INT(run_request(&e, "a1", "alpha", "hi", NULL, NULL), MSG_done);
    clock_ms_g += 10;
    /* At the cap of one: alpha (idle) is evicted for beta. */
    CHECK_EQ_INT(run_request(&e, "b1", "beta", "hi", NULL, NULL), MSG_done);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    CHECK_EQ_INT(run_request(&e, "a2", "alpha", "hi", NULL, NULL), MSG_done);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);

    /* The queue: with the registry silent, requests pile up unresolved;
     * the third is refused with Ollama's 503 text. */
    e.registry_silent = true;
    send_generate(&e, "q1", "alpha", "hi", NULL, 0);
    send_generate(&e, "q2", "alpha", "hi", NULL, 0);
    pump(&e, 10);
    send_generate(&e, "q3", "alpha", "hi", NULL, 0);
    msg_t m;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_STR(m.id, "q3");
    CHECK_EQ_INT(m.u.error.status, CR_E_BUSY);
    CHECK_EQ_STR(m.u.error.message, "server busy, please try again.  maximum "
                                    "pending requests exceeded");
    msg_clear(&m);
    /* A queued request that is canceled is removed with 499's status. */
    msg_t c;
    msg_init(&c, MSG_cancel, "q1");
    bus_send(e.client, &c, NULL);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_STR(m.id, "q1");
    CHECK_EQ_INT(m.u.error.status, CR_E_CANCELED);
    msg_clear(&m);
    /* The registry never answers q2: it fails after the resolve deadline. */
    clock_ms_g += 3000;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_STR(m.id, "q2");
    CHECK_EQ_INT(m.u.error.status, CR_E_UNAVAILABLE);
    msg_clear(&m);
    env_stop(&e);
}

/* Writes a small synthetic model as <dir>/<name>.gguf (the fake registry
 * then resolves <name> to it) and returns its estimated size whole on a
 * GPU at the tests' num_ctx (512): weights + KV + compute buffer. */
static int64_t write_model(env_t *e, const char *name, int64_t *layer_bytes)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s.gguf", e->dir, name);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.ctx = 1024;
    cr_err_t err;
    CHECK_EQ_INT(rn_synth_write(&so, path, &err), CR_OK);
    sch_estimate_t *est = calloc(1, sizeof *est);
    sch_estimate_opts_t eo = {.num_ctx = 512, .num_parallel = 1};
    CHECK_EQ_INT(sch_estimate_file(path, &eo, est, &err), CR_OK);
    int64_t whole = est->weights_bytes + est->kv_bytes + est->graph_bytes;
    if (!est->output_bytes || !est->embd_bytes)
        whole = -1;
    /* The output layer carries the embeddings: counted twice if tied. */
    if (layer_bytes)
        *layer_bytes = est->layer_bytes[0];
    free(est);
    return whole;
}

/* ps for the one model expected; returns false if not exactly one. */
static bool ps_one(env_t *e, char *name, size_t cap, int64_t *size,
                   int64_t *size_vram)
{
    msg_t ps;
    msg_init(&ps, MSG_ps, "ps");
    bus_send(e->client, &ps, NULL);
    msg_t r;
    if (!client_recv(e, &r))
        return false;
    bool one = r.type == MSG_ps_reply && r.u.ps_reply.models.n == 1;
    if (one) {
        snprintf(name, cap, "%s", r.u.ps_reply.models.v[0].name);
        *size = r.u.ps_reply.models.v[0].size;
        *size_vram = r.u.ps_reply.models.v[0].size_vram;
    }
    msg_clear(&r);
    return one;
}

/* ps: the offload_error of `model` into out ("" when it has none); false
 * when ps fails or lists no such model. */
static bool ps_offload_error(env_t *e, const char *model, char *out, size_t cap)
{
    msg_t ps;
    msg_init(&ps, MSG_ps, "ps");
    bus_send(e->client, &ps, NULL);
    msg_t r;
    if (!client_recv(e, &r))
        return false;
    bool found = false;
    for (size_t i = 0; r.type == MSG_ps_reply && i < r.u.ps_reply.models.n && !found; i++) {
        const msg_loaded_model_t *lm = &r.u.ps_reply.models.v[i];
        if (strcmp(lm->name, model))
            continue;
        found = true;
        snprintf(out, cap, "%s", lm->has_offload_error && lm->offload_error
                                     ? lm->offload_error : "");
    }
    msg_clear(&r);
    return found;
}

/* A runner that ran its planned GPU layers on the CPU: ps names its reason
 * (offload_error); one that did not fall back has none. The ledger holds
 * each runner's own memory (estimate.h) in system memory. */
static void test_offload_error_in_ps(void)
{
    inventory_g = "0:Fake GPU:100000000000";
    env_t e;
    env_start(&e, 3, 16);
    CHECK(write_model(&e, "nodriver", NULL) > 0);
    CHECK(write_model(&e, "fine", NULL) > 0);
    CHECK_EQ_INT(run_request(&e, "n1", "nodriver", "hi", NULL, NULL), MSG_done);
    CHECK_EQ_INT(run_request(&e, "f1", "fine", "hi", NULL, NULL), MSG_done);
    char why[256];
    CHECK(ps_offload_error(&e, "nodriver:latest", why, sizeof why));
    CHECK_EQ_STR(why, "cuda: no NVIDIA driver (fake)");
    CHECK(ps_offload_error(&e, "fine:latest", why, sizeof why));
    CHECK_EQ_STR(why, "");
    /* Both plans are whole on the (described) GPU: system memory holds
     * only each runner process, its CPU overhead and the CUDA module's. */
    CHECK_EQ_INT(sch_server_free_bytes(e.sched, -1),
                 (64LL << 30) - 2 * (SCH_RUNNER_CPU_BYTES + SCH_RUNNER_CUDA_HOST_BYTES));
    env_stop(&e);
    inventory_g = NULL;
}

static void test_heartbeat(void)
{
    hb_interval_g = 1000;
    hb_timeout_g = 3000;
    inventory_g = "0:Fake GPU:100000000000";
    env_t e;
    env_start(&e, 3, 16);
    int64_t whole = write_model(&e, "hb", NULL);
    CHECK(whole > 0);
    int64_t total = 100000000000LL;
    CHECK_EQ_INT(sch_server_free_bytes(e.sched, 0), total);

    /* A runner that stops answering mid-request. */
    send_generate(&e, "hang", "hb", "hang", NULL, 0);
    msg_t m;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_chunk);
    msg_clear(&m);
    CHECK_EQ_INT(sch_server_free_bytes(e.sched, 0), total - whole);
    zclock_sleep(100); /* let it stop itself */
    clock_ms_g += 1500; /* quiet for the interval: pinged */
    pump(&e, 20);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    clock_ms_g += 2000; /* not yet the timeout */
    pump(&e, 20);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    clock_ms_g += 1500; /* past it: killed, its request failed */
    CHECK(client_recv(&e, &m));
    CHECK_EQ_STR(m.id, "hang");
    CHECK_EQ_INT(m.type, MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_RUNNER);
    CHECK(strstr(m.u.error.message, "stopped responding") != NULL);
    msg_clear(&m);
    wait_runners(&e, 0);
    /* Its memory is back in the ledger; the next request reloads. */
    CHECK_EQ_INT(sch_server_free_bytes(e.sched, 0), total);
    CHECK_EQ_INT(run_request(&e, "after", "hb", "hi", NULL, NULL), MSG_done);

    /* A healthy idle runner answers its pings and stays, however long. */
    for (int i = 0; i < 6; i++) {
        clock_ms_g += 1500;
        pump(&e, 30);
    }
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    CHECK_EQ_INT(run_request(&e, "still", "hb", "hi", NULL, NULL), MSG_done);
    env_stop(&e);
    hb_interval_g = hb_timeout_g = -1;
    inventory_g = NULL;
}

static void test_memory_eviction(void)
{
    /* Size the GPU from the estimate: one model fits whole, two do not. */
    env_t e;
    inventory_g = "none"; /* replaced below once sizes are known */
    env_start(&e, 3, 16);
    int64_t whole = write_model(&e, "alpha", NULL);
    env_stop(&e);
    CHECK(whole > 0);
    char spec[128];
    snprintf(spec, sizeof spec, "0:Fake GPU:%" PRId64, whole * 3 / 2);
    inventory_g = spec;
    env_start(&e, 3, 16);
    CHECK_EQ_INT(write_model(&e, "alpha", NULL), whole);
    CHECK_EQ_INT(write_model(&e, "beta", NULL), whole);

    char first[128], name[128];
    int64_t size = 0, vram = 0;
    CHECK_EQ_INT(run_request(&e, "a1", "alpha", "plan", first, NULL),
                 MSG_done);
    /* The plan travelled in load: 2 blocks + output on GPU 0. */
    CHECK_EQ_STR(first, "gpu_layers=3 gpu0:0+3");
    /* ps reports the plan (the fake runner ran on the CPU): 100% GPU. */
    CHECK(ps_one(&e, name, sizeof name, &size, &vram));
    CHECK_EQ_STR(name, "alpha:latest");
    CHECK_EQ_INT(size, whole);
    CHECK_EQ_INT(vram, whole);

    /* beta does not fit beside alpha: idle alpha is evicted (the count cap
     * of 3 is not the reason). */
    clock_ms_g += 10;
    CHECK_EQ_INT(run_request(&e, "b1", "beta", "hi", NULL, NULL), MSG_done);
    CHECK(ps_one(&e, name, sizeof name, &size, &vram));
    CHECK_EQ_STR(name, "beta:latest");

    /* A busy runner is waited for, not killed. */
    send_generate(&e, "slow", "beta", "slow", NULL, 0);
    msg_t m;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_chunk);
    msg_clear(&m);
    send_generate(&e, "a2", "alpha", "hi", NULL, 0);
    pump(&e, 60);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    CHECK(ps_one(&e, name, sizeof name, &size, &vram));
    CHECK_EQ_STR(name, "beta:latest");
    CHECK_EQ_INT(sch_server_pending_count(e.sched), 1);
    /* beta's request ends; then beta goes and alpha comes. */
    msg_t c;
    msg_init(&c, MSG_cancel, "slow");
    bus_send(e.client, &c, NULL);
    int got_slow = 0, got_a2 = 0;
    while ((got_slow == 0 || got_a2 == 0) && client_recv(&e, &m)) {
        if (!strcmp(m.id, "slow") && m.type != MSG_chunk)
            got_slow = 1;
        if (!strcmp(m.id, "a2") && m.type == MSG_done)
            got_a2 = 1;
        msg_clear(&m);
    }
    CHECK(got_slow && got_a2);
    CHECK(ps_one(&e, name, sizeof name, &size, &vram));
    CHECK_EQ_STR(name, "alpha:latest");
    env_stop(&e);
    inventory_g = NULL;
}

static void test_spill_and_cannot_load(void)
{
    /* A GPU a bit smaller than the model: the first block spills to the
     * CPU; ps shows the split. */
    env_t e;
    inventory_g = "none";
    env_start(&e, 3, 16);
    int64_t layer = 0;
    int64_t whole = write_model(&e, "gamma", &layer);
    env_stop(&e);
    char spec[128];
    snprintf(spec, sizeof spec, "0:Fake GPU:%" PRId64, whole - layer / 2);
    inventory_g = spec;
    env_start(&e, 3, 16);
    write_model(&e, "gamma", NULL);
    char first[128], name[128];
    CHECK_EQ_INT(run_request(&e, "g1", "gamma", "plan", first, NULL),
                 MSG_done);
    CHECK_EQ_STR(first, "gpu_layers=2 gpu0:1+2");
    int64_t size = 0, vram = 0;
    CHECK(ps_one(&e, name, sizeof name, &size, &vram));
    CHECK(vram > 0 && vram < size);
    env_stop(&e);

    /* num_gpu 0 in the model's options... here via CPU only: no GPU and
     * too little system memory: a clear error, nothing started. */
    inventory_g = "cpu:1000";
    env_start(&e, 3, 16);
    write_model(&e, "delta", NULL);
    msg_t m;
    CHECK_EQ_INT(run_request(&e, "d1", "delta", "hi", NULL, &m), MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_NOMEM);
    CHECK(strstr(m.u.error.message, "model requires more system memory") !=
          NULL);
    msg_clear(&m);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 0);
    env_stop(&e);

    /* OLLAMA_MAX_LOADED_MODELS unset: 3 per GPU (here 2 GPUs: 6). */
    inventory_g = "0:a:1000000000000,1:b:1000000000000";
    env_start(&e, 0, 16);
    const char *models[] = {"m1", "m2", "m3", "m4"};
    for (size_t i = 0; i < CR_ARRAY_LEN(models); i++)
        CHECK_EQ_INT(run_request(&e, models[i], models[i], "hi", NULL, NULL),
                     MSG_done);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 4);
    env_stop(&e);
    inventory_g = NULL;
}

/* After a scheduler restart a runner that kept its model says hello with
 * it; the scheduler adopts it and serves the model without a load. The
 * test plays that runner (a DEALER) with a sleeping child as its process. */
static void test_adopt_after_restart(void)
{
    env_t e;
    env_start(&e, 3, 16);
    /* Not our child (its parent exits), as after a real restart. */
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t mid = fork();
    if (mid == 0) {
        pid_t g = fork();
        if (g == 0) {
            close(fds[1]);
            for (;;)
                pause();
        }
        ssize_t w = write(fds[1], &g, sizeof g);
        _exit(w == sizeof g ? 0 : 1);
    }
    pid_t sleeper = 0;
    close(fds[1]);
    CHECK(read(fds[0], &sleeper, sizeof sleeper) == sizeof sleeper);
    close(fds[0]);
    CHECK(sleeper > 0);
    zsock_t *rn = zsock_new(ZMQ_DEALER);
    zsock_set_identity(rn, "old-runner-1");
    CHECK(zsock_connect(rn, "ipc://%s/runners.sock", e.dir) >= 0);
    msg_t h;
    msg_init(&h, MSG_hello, "old-runner-1");
    h.u.hello.runner_id = "old-runner-1";
    h.u.hello.has_runner_id = true;
    h.u.hello.pid = sleeper;
    h.u.hello.has_pid = true;
    h.u.hello.name = "alpha:latest";
    h.u.hello.has_name = true;
    h.u.hello.model_path = "/fake/alpha.gguf";
    h.u.hello.has_model_path = true;
    msg_options_t o = {0};
    o.num_ctx = 512;
    o.has_num_ctx = true;
    h.u.hello.options = &o;
    h.u.hello.has_options = true;
    h.u.hello.size = 4321;
    h.u.hello.has_size = true;
    h.u.hello.context_length = 512;
    h.u.hello.has_context_length = true;
    h.u.hello.offload_error = "cuda: no NVIDIA driver (adopted)";
    h.u.hello.has_offload_error = true;
    CHECK_EQ_INT(bus_send(rn, &h, NULL), CR_OK);
    wait_runners(&e, 1);
    char name[128];
    int64_t size = 0, vram = 0;
    CHECK(ps_one(&e, name, sizeof name, &size, &vram));
    CHECK_EQ_STR(name, "alpha:latest");
    CHECK_EQ_INT(size, 4321);
    /* the reason its GPU layers run on the CPU survives the restart */
    char why[256];
    CHECK(ps_offload_error(&e, "alpha:latest", why, sizeof why));
    CHECK_EQ_STR(why, "cuda: no NVIDIA driver (adopted)");

    /* A request for it goes to the adopted runner: no load, no spawn. */
    send_generate(&e, "ad1", "alpha", "hi", NULL, 0);
    msg_t m;
    bool forwarded = false;
    for (double t0 = mono_s(); !forwarded && mono_s() - t0 < WAIT_NET_S;) {
        pump(&e, 1);
        if (bus_recv(rn, 0, &m, NULL, NULL) == CR_OK) {
            if (m.type == MSG_generate) {
                forwarded = true;
                CHECK_EQ_STR(m.id, "ad1");
                CHECK_EQ_INT(m.u.generate.options->num_ctx, 512);
                msg_t d;
                msg_init(&d, MSG_done, "ad1");
                d.u.done.done_reason = "stop";
                d.u.done.has_done_reason = true;
                bus_send(rn, &d, NULL);
            }
            msg_clear(&m);
        }
    }
    CHECK(forwarded);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_STR(m.id, "ad1");
    CHECK_EQ_INT(m.type, MSG_done);
    msg_clear(&m);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);

    /* Its process dies: noticed, the next request loads the model anew. */
    kill(sleeper, SIGKILL);
    wait_runners(&e, 0);
    CHECK_EQ_INT(run_request(&e, "ad2", "alpha", "hi", NULL, NULL), MSG_done);

    /* A hello naming no model from an unknown runner: told to exit. */
    zsock_t *orphan = zsock_new(ZMQ_DEALER);
    zsock_set_identity(orphan, "orphan-1");
    CHECK(zsock_connect(orphan, "ipc://%s/runners.sock", e.dir) >= 0);
    msg_init(&h, MSG_hello, "orphan-1");
    h.u.hello.runner_id = "orphan-1";
    h.u.hello.has_runner_id = true;
    h.u.hello.pid = 1; /* not a runner: never signalled */
    h.u.hello.has_pid = true;
    CHECK_EQ_INT(bus_send(orphan, &h, NULL), CR_OK);
    bool told = false;
    for (double t0 = mono_s(); !told && mono_s() - t0 < WAIT_NET_S;) {
        pump(&e, 1);
        if (bus_recv(orphan, 0, &m, NULL, NULL) == CR_OK) {
            told = m.type == MSG_shutdown;
            msg_clear(&m);
        }
    }
    CHECK(told);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    zsock_destroy(&orphan);
    zsock_destroy(&rn);
    env_stop(&e);
}

/* A runner process left by a previous scheduler on dir's endpoint (not
 * our child, as after a real restart): this executable as `serve
 * --endpoint ipc://<dir>/runners.sock --id <id>`. Its pid. */
static pid_t spawn_orphan(const char *dir, const char *id)
{
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t mid = fork();
    if (mid == 0) {
        pid_t g = fork();
        if (g == 0) {
            close(fds[0]);
            close(fds[1]);
            char ep[400];
            snprintf(ep, sizeof ep, "ipc://%s/runners.sock", dir);
            execl("/proc/self/exe", "corral-runner", "serve", "--endpoint",
                  ep, "--id", id, (char *)NULL);
            _exit(127);
        }
        ssize_t w = write(fds[1], &g, sizeof g);
        _exit(w == sizeof g ? 0 : 1);
    }
    pid_t pid = 0;
    close(fds[1]);
    CHECK(read(fds[0], &pid, sizeof pid) == sizeof pid);
    close(fds[0]);
    waitpid(mid, NULL, 0);
    /* Exec'd (what the scheduler looks for at start), within 10 s. */
    char path[64], cmd[64] = "";
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    for (int i = 0; i < 1000 && strcmp(cmd, "corral-runner"); i++) {
        FILE *f = fopen(path, "r");
        size_t n = f ? fread(cmd, 1, sizeof cmd - 1, f) : 0;
        cmd[n] = '\0';
        if (f)
            fclose(f);
        if (strcmp(cmd, "corral-runner"))
            zclock_sleep(10);
    }
    CHECK_EQ_STR(cmd, "corral-runner");
    return pid;
}

static void orphan_go(const env_t *e, const char *id)
{
    char go[400];
    snprintf(go, sizeof go, "%s/go-%s", e->dir, id);
    FILE *f = fopen(go, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
}

/* The number of models ps lists. */
static int ps_count(env_t *e)
{
    msg_t ps;
    msg_init(&ps, MSG_ps, "ps");
    bus_send(e->client, &ps, NULL);
    msg_t r;
    if (!client_recv(e, &r))
        return -1;
    int n = r.type == MSG_ps_reply ? (int)r.u.ps_reply.models.n : -1;
    msg_clear(&r);
    return n;
}

/* Adoption grace: a scheduler that finds runners of a previous one on its
 * endpoint starts none while they may still say hello. A request for the
 * model of one of them waits (pending, progress after a second) and goes
 * to it once it says hello: no second runner. A second runner of the same
 * model saying hello later is drained and stopped; ps lists the model
 * once. A runner that never says hello holds loads back for one heartbeat
 * interval (the default grace), not longer. */
/* A request for model that the adoption grace holds back: no runner is
 * started until the grace (the default, one heartbeat interval) is over;
 * then it loads and is answered. */
static void expect_load_after_grace(env_t *e, const char *id, const char *model)
{
    send_generate(e, id, model, "hi", NULL, 0);
    pump(e, 40);
    CHECK_EQ_INT(sch_server_runner_count(e->sched), 0);
    clock_ms_g += 5000; /* the default grace: one heartbeat interval */
    wait_runners(e, 1);
    bool done = false;
    msg_t m;
    for (int i = 0; i < 8 && !done && client_recv(e, &m); i++) {
        done = m.type == MSG_done;
        msg_clear(&m);
    }
    CHECK(done);
}

static void test_adopt_grace(void)
{
    snprintf(env_dir_g, sizeof env_dir_g, "/tmp/corral-sched-XXXXXX");
    CHECK(mkdtemp(env_dir_g) != NULL);
    pid_t first = spawn_orphan(env_dir_g, "adopt-1");
    env_t e;
    env_start(&e, 3, 16);
    send_generate(&e, "gr1", "alpha", "hi", NULL, 0);
    pump(&e, 40);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 0); /* nothing started */
    CHECK_EQ_INT(sch_server_pending_count(e.sched), 1);
    clock_ms_g += 1000;
    msg_t m;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_progress);
    msg_clear(&m);
    orphan_go(&e, "adopt-1");
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_chunk);
    msg_clear(&m);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_done);
    msg_clear(&m);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1); /* the adopted one */

    /* A second runner of alpha says hello: adopted, found a duplicate,
     * stopped (it exits on shutdown); the first one stays. */
    pid_t second = spawn_orphan(e.dir, "adopt-2");
    orphan_go(&e, "adopt-2");
    bool gone = false;
    for (double t0 = mono_s(); !gone && mono_s() - t0 < WAIT_NET_S;) {
        pump(&e, 1);
        char exe[64], target[16];
        snprintf(exe, sizeof exe, "/proc/%d/exe", (int)second);
        gone = readlink(exe, target, sizeof target) < 0; /* or a zombie */
    }
    CHECK_MSG(gone, "the duplicate runner was not stopped");
    wait_runners(&e, 1);
    CHECK_EQ_INT(ps_count(&e), 1);
    CHECK_EQ_INT(kill(first, 0), 0);
    CHECK_EQ_INT(run_request(&e, "gr2", "alpha", "hi", NULL, NULL), MSG_done);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    env_stop(&e);

    /* One that never says hello: loads wait one heartbeat interval. */
    snprintf(env_dir_g, sizeof env_dir_g, "/tmp/corral-sched-XXXXXX");
    CHECK(mkdtemp(env_dir_g) != NULL);
    pid_t silent = spawn_orphan(env_dir_g, "adopt-3");
    env_start(&e, 3, 16);
    expect_load_after_grace(&e, "gr3", "beta");
    kill(silent, SIGKILL);
    env_stop(&e);
}

/* ---- a fake node agent (a CURVE DEALER speaking the relay framing) ---- */

static zsock_t *node_connect(const env_t *e, const char *ep)
{
    char cert[400], srv[400];
    snprintf(cert, sizeof cert, "%s/keys/nd", e->dir);
    snprintf(srv, sizeof srv, "%s/keys/srv", e->dir);
    zsock_t *d = zsock_new(ZMQ_DEALER);
    zsock_set_linger(d, 0);
    CHECK_EQ_INT(bus_curve_client(d, cert, srv, NULL), CR_OK);
    CHECK(zsock_connect(d, "%s", ep) == 0);
    return d;
}

static void node_hello(zsock_t *d, const char *instance, int64_t runners)
{
    msg_t m;
    msg_init(&m, MSG_node_hello, "");
    m.u.node_hello.name = "gpu1";
    m.u.node_hello.has_name = true;
    m.u.node_hello.ram_total = 64LL << 30;
    m.u.node_hello.has_ram_total = true;
    m.u.node_hello.ram_free = 64LL << 30;
    m.u.node_hello.has_ram_free = true;
    m.u.node_hello.runners = runners;
    m.u.node_hello.has_runners = true;
    m.u.node_hello.instance = (char *)instance;
    m.u.node_hello.has_instance = true;
    CHECK_EQ_INT(bus_relay_send_msg(d, NULL, "", &m, NULL), CR_OK);
}

/* The hello of runner nr-1 on the node, holding alpha. */
static void node_runner_hello(zsock_t *d)
{
    msg_t m;
    msg_init(&m, MSG_hello, "nr-1");
    m.u.hello.runner_id = "nr-1";
    m.u.hello.has_runner_id = true;
    m.u.hello.pid = 1; /* the node's pid space: never looked at */
    m.u.hello.has_pid = true;
    m.u.hello.name = "alpha:latest";
    m.u.hello.has_name = true;
    m.u.hello.model_path = "/fake/alpha.gguf";
    m.u.hello.has_model_path = true;
    msg_options_t o = {0}; /* what its load had (send_generate's) */
    o.num_ctx = 512;
    o.has_num_ctx = true;
    m.u.hello.options = &o;
    m.u.hello.has_options = true;
    CHECK_EQ_INT(bus_relay_send_msg(d, NULL, "nr-1", &m, NULL), CR_OK);
}

/* Pumps until the node gets a message of `type` for `to` (answering
 * generate with done on the way); false after ~5 s. */
static bool node_await(env_t *e, zsock_t *d, msg_type_t type, const char *to)
{
    for (int i = 0; i < 1000; i++) {
        pump(e, 1);
        zframe_t *payload = NULL;
        char dst[64];
        while (zsock_events(d) & ZMQ_POLLIN) {
            if (bus_relay_recv(d, NULL, dst, sizeof dst, &payload, NULL))
                continue;
            msg_t m;
            bool hit = false;
            if (!msg_decode(zframe_data(payload), zframe_size(payload), &m,
                            NULL)) {
                hit = m.type == type && !strcmp(dst, to);
                if (m.type == MSG_generate) {
                    msg_t done;
                    msg_init(&done, MSG_done, m.id);
                    done.u.done.done_reason = "stop";
                    done.u.done.has_done_reason = true;
                    bus_relay_send_msg(d, NULL, dst, &done, NULL);
                }
                msg_clear(&m);
            }
            zframe_destroy(&payload);
            if (hit)
                return true;
        }
    }
    return false;
}

/* The next env_start (in env_dir_g, made here when empty) gets a nodes
 * endpoint on a free port, with keys: the scheduler's ("srv") and one
 * admitted node's ("nd"). ep: the endpoint, for node_connect. */
static void nodes_prepare(char *ep, size_t cap)
{
    if (!env_dir_g[0]) {
        snprintf(env_dir_g, sizeof env_dir_g, "/tmp/corral-sched-XXXXXX");
        CHECK(mkdtemp(env_dir_g) != NULL);
    }
    char keys[300], pub[500], dst[500];
    snprintf(keys, sizeof keys, "%s/keys", env_dir_g);
    snprintf(node_keys_g, sizeof node_keys_g, "%s/admitted", env_dir_g);
    CHECK_EQ_INT(bus_curve_keygen(keys, "srv", NULL, NULL), CR_OK);
    CHECK_EQ_INT(bus_curve_keygen(keys, "nd", NULL, NULL), CR_OK);
    CHECK(mkdir(node_keys_g, 0700) == 0);
    snprintf(pub, sizeof pub, "%s/nd", keys);
    snprintf(dst, sizeof dst, "%s/nd", node_keys_g);
    FILE *in = fopen(pub, "r"), *out = fopen(dst, "w");
    CHECK(in && out);
    char buf[4096];
    size_t n = in ? fread(buf, 1, sizeof buf, in) : 0;
    if (out)
        CHECK(fwrite(buf, 1, n, out) == n);
    if (in)
        fclose(in);
    if (out)
        fclose(out);
    snprintf(nodes_cert_g, sizeof nodes_cert_g, "%s/srv", keys);
    /* A free port below the ephemeral range (where "*" binds of tests
     * running beside this one land). The probe is a plain socket: a ZMQ
     * socket's close finishes later in its I/O thread, so the scheduler's
     * bind right after it sometimes met "Address already in use". */
    static int calls; /* each call its own first try: the last one's port
                         may still be closing */
    calls++;
    int port = -1;
    for (int i = 0; i < 50 && port < 0; i++) {
        int p = 20000 + (int)((getpid() * 7919 + (i + 50 * calls) * 131) % 12000);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0)
            port = p;
        if (fd >= 0)
            close(fd);
    }
    CHECK(port > 0);
    snprintf(nodes_ep_g, sizeof nodes_ep_g, "tcp://127.0.0.1:%d", port);
    snprintf(ep, cap, "%s", nodes_ep_g);
}

/* A node's runners after a scheduler restart: the node joins saying it has
 * one runner; loads wait (grace) until that runner's hello, relayed by the
 * node, is adopted; the request goes to it. The same agent reconnecting
 * (new connection, same instance) keeps its runner; a restarted agent
 * (another instance) loses it, and that runner's later hello is answered
 * shutdown, not adopted. */
static void test_node_adopt(void)
{
    if (!bus_curve_available()) {
        printf("scheduler: node adoption skipped: no CURVE\n");
        return;
    }
    char ep[64];
    nodes_prepare(ep, sizeof ep);
    env_t e;
    env_start(&e, 3, 16);
    if (!e.sched) {
        env_stop(&e);
        return;
    }

    zsock_t *d = node_connect(&e, ep);
    node_hello(d, "inst-1", 1);
    CHECK(node_await(&e, d, MSG_pong, ""));
    send_generate(&e, "nd1", "alpha", "hi", NULL, 0);
    pump(&e, 40);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 0); /* grace: no load */
    CHECK_EQ_INT(sch_server_pending_count(e.sched), 1);
    node_runner_hello(d);
    CHECK(node_await(&e, d, MSG_generate, "nr-1")); /* adopted, served */
    msg_t m;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_done);
    msg_clear(&m);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);

    /* The same agent over a new connection: it keeps its runner. */
    zsock_t *d2 = node_connect(&e, ep);
    node_hello(d2, "inst-1", 1);
    CHECK(node_await(&e, d2, MSG_pong, ""));
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    send_generate(&e, "nd2", "alpha", "hi", NULL, 0);
    CHECK(node_await(&e, d2, MSG_generate, "nr-1"));
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_done);
    msg_clear(&m);
    zsock_destroy(&d);

    /* A restarted agent: its old runners are gone; a late hello from one
     * is told to exit. */
    zsock_t *d3 = node_connect(&e, ep);
    node_hello(d3, "inst-2", 0);
    CHECK(node_await(&e, d3, MSG_pong, ""));
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 0);
    node_runner_hello(d3);
    CHECK(node_await(&e, d3, MSG_shutdown, "nr-1"));
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 0);
    zsock_destroy(&d2);
    zsock_destroy(&d3);
    env_stop(&e);
}

/* The file (up to 255 bytes) or "" when there is none. */
static void file_text(const char *path, char *out, size_t cap)
{
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* Pumps until the memo says want ("": there is none); false after ~2 s.
 * got: what it said last. */
static bool memo_await(env_t *e, const char *memo, const char *want, char *got, size_t cap)
{
    for (int i = 0; i < 400; i++) {
        file_text(memo, got, cap);
        if (!strcmp(got, want))
            return true;
        pump(e, 1);
    }
    return false;
}

/* A scheduler that restarts in dir after a crash that left `text` in its
 * memo (the dir was removed with the last one's env: keys made again). */
static void restart_after_crash(env_t *e, const char *dir, const char *memo, const char *text,
                                char *ep, size_t cap)
{
    CHECK(mkdir(dir, 0700) == 0);
    snprintf(env_dir_g, sizeof env_dir_g, "%s", dir);
    nodes_prepare(ep, cap);
    FILE *f = fopen(memo, "w");
    CHECK(f != NULL);
    if (f) {
        CHECK(fputs(text, f) >= 0);
        fclose(f);
    }
    env_start(e, 3, 16);
}

/* The memo of nodes holding runners (node_memo.c): written when a node's
 * runner is adopted, removed by a clean stop. A scheduler that starts with
 * one left by a crash holds loads back until the node it names joined and
 * its runner said hello (a request sent before the node came back is
 * served by that runner, no load), or until the grace is over, after
 * which the file says what is true now (no node runner: no file). */
static void test_node_memo(void)
{
    if (!bus_curve_available()) {
        printf("scheduler: node memo skipped: no CURVE\n");
        return;
    }
    char ep[64], dir[256], memo[400], text[256];
    nodes_prepare(ep, sizeof ep);
    snprintf(dir, sizeof dir, "%s", env_dir_g);
    snprintf(memo, sizeof memo, "%s/scheduler-nodes", dir);
    env_t e;
    env_start(&e, 3, 16);
    zsock_t *d = node_connect(&e, ep);
    node_hello(d, "inst-1", 1);
    CHECK(node_await(&e, d, MSG_pong, ""));
    node_runner_hello(d);
    CHECK_MSG(memo_await(&e, memo, "gpu1\n", text, sizeof text), "memo: '%s'", text);
    zsock_destroy(&d);
    env_stop(&e);
    CHECK_MSG(access(memo, F_OK) != 0, "a clean stop left %s", memo);

    /* A crash left the memo (and a line that is no node's name). The
     * request comes before the node is back: it waits for it. */
    restart_after_crash(&e, dir, memo, "gpu1\nnot a name\n", ep, sizeof ep);
    send_generate(&e, "nm1", "alpha", "hi", NULL, 0);
    pump(&e, 40);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 0); /* no load */
    CHECK_EQ_INT(sch_server_pending_count(e.sched), 1);
    file_text(memo, text, sizeof text);
    CHECK_EQ_STR(text, "gpu1\nnot a name\n"); /* kept while waiting */
    d = node_connect(&e, ep);
    node_hello(d, "inst-1", 1);
    CHECK(node_await(&e, d, MSG_pong, ""));
    pump(&e, 20);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 0); /* its runner next */
    node_runner_hello(d);
    CHECK(node_await(&e, d, MSG_generate, "nr-1")); /* adopted, served */
    msg_t m;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_done);
    msg_clear(&m);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    /* what is true now */
    CHECK_MSG(memo_await(&e, memo, "gpu1\n", text, sizeof text), "memo: '%s'", text);
    /* Its runner exits: no node holds one, the file goes. */
    msg_t gone;
    msg_init(&gone, MSG_node_runner_exit, "");
    gone.u.node_runner_exit.runner_id = "nr-1";
    gone.u.node_runner_exit.has_runner_id = true;
    CHECK_EQ_INT(bus_relay_send_msg(d, NULL, "", &gone, NULL), CR_OK);
    CHECK_MSG(memo_await(&e, memo, "", text, sizeof text), "memo: '%s'", text);
    zsock_destroy(&d);
    env_stop(&e);

    /* The node never comes back: loads wait one grace, then go on, and no
     * node holds a runner: the file goes. */
    restart_after_crash(&e, dir, memo, "gpu1\n", ep, sizeof ep);
    expect_load_after_grace(&e, "nm2", "beta");
    CHECK_MSG(memo_await(&e, memo, "", text, sizeof text), "memo: '%s'", text);
    env_stop(&e);
}

/* Settings from the environment: the new ones, and bad values named. */
static void test_config(void)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(n > 0);
    self[n > 0 ? n : 0] = '\0';
    setenv("CORRAL_RUNNER_BIN", self, 1);
    char rt[64] = "/tmp/corral-cfg-XXXXXX";
    CHECK(mkdtemp(rt) != NULL);
    setenv("CORRAL_RUNTIME_DIR", rt, 1);
    setenv("CORRAL_GPU_INVENTORY", "0:A:1000,1:B:2000,cpu:5000", 1);
    setenv("OLLAMA_GPU_OVERHEAD", "123", 1);
    setenv("OLLAMA_SCHED_SPREAD", "1", 1);
    setenv("OLLAMA_KV_CACHE_TYPE", "q8_0", 1);
    setenv("CORRAL_HEARTBEAT_TIMEOUT", "2m", 1);
    sch_config_t *cfg = calloc(1, sizeof *cfg);
    cr_err_t err;
    cr_status_t st = sch_config_from_env(cfg, &err);
    CHECK_MSG(st == CR_OK, "config: %s", err.msg);
    CHECK(cfg->has_inventory);
    CHECK_EQ_INT(cfg->inventory.n_gpus, 2);
    CHECK(cfg->inventory.fake);
    CHECK_EQ_INT(cfg->inventory.ram_total_bytes, 5000);
    CHECK_EQ_INT(cfg->gpu_overhead_bytes, 123);
    CHECK(cfg->sched_spread);
    /* q8_0 is accepted (CR_OK above) and kept for the estimate, which
     * uses it only with OLLAMA_FLASH_ATTENTION (Ollama's rule); only
     * unknown types are refused. */
    CHECK_EQ_STR(cfg->kv_cache_type, "q8_0");
    CHECK(!cfg->flash_attention);
    setenv("OLLAMA_FLASH_ATTENTION", "1", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_OK);
    CHECK(cfg->flash_attention);
    unsetenv("OLLAMA_FLASH_ATTENTION");
    CHECK_EQ_INT(cfg->heartbeat_timeout_ms, 120000);
    CHECK_EQ_INT(cfg->heartbeat_interval_ms, 5000);
    CHECK_EQ_INT(cfg->adopt_grace_ms, 0); /* unset: one heartbeat interval */
    CHECK(cfg->direct_replies); /* on unless told */
    setenv("CORRAL_DIRECT_REPLIES", "0", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_OK);
    CHECK(!cfg->direct_replies);
    unsetenv("CORRAL_DIRECT_REPLIES");
    setenv("CORRAL_ADOPT_GRACE", "2s", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_OK);
    CHECK_EQ_INT(cfg->adopt_grace_ms, 2000);
    setenv("CORRAL_ADOPT_GRACE", "0", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_OK);
    CHECK(cfg->adopt_grace_ms < 0); /* off */
    setenv("CORRAL_ADOPT_GRACE", "a while", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "CORRAL_ADOPT_GRACE") != NULL, "%s", err.msg);
    unsetenv("CORRAL_ADOPT_GRACE");
    st = sch_config_from_env(cfg, &err);

    CHECK_EQ_INT(cfg->num_parallel, 1);

    /* OLLAMA_NUM_PARALLEL is clamped to what the runner accepts (it
     * refuses a load asking for more than RN_CTX_MAX_SEQ slots). */
    static const struct {
        const char *v;
        int want;
    } par[] = {{"8", 8},    {"64", 64}, {"65", 64}, {"1000", 64},
               {"99999999999", 64}, {"0", 1}, {"-3", 1}};
    for (size_t i = 0; i < sizeof par / sizeof par[0]; i++) {
        setenv("OLLAMA_NUM_PARALLEL", par[i].v, 1);
        st = sch_config_from_env(cfg, &err);
        CHECK_MSG(st == CR_OK, "NUM_PARALLEL=%s: %s", par[i].v, err.msg);
        CHECK_MSG(cfg->num_parallel == par[i].want, "NUM_PARALLEL=%s -> %d",
                  par[i].v, cfg->num_parallel);
    }
    unsetenv("OLLAMA_NUM_PARALLEL");

    setenv("OLLAMA_KV_CACHE_TYPE", "f32", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "OLLAMA_KV_CACHE_TYPE 'f32'") != NULL);
    unsetenv("OLLAMA_KV_CACHE_TYPE");
    setenv("CORRAL_GPU_INVENTORY", "0:A:lots", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "CORRAL_GPU_INVENTORY") != NULL);
    unsetenv("CORRAL_GPU_INVENTORY");
    setenv("CORRAL_HEARTBEAT_TIMEOUT", "soon", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "CORRAL_HEARTBEAT_TIMEOUT") != NULL);
    unsetenv("CORRAL_HEARTBEAT_TIMEOUT");
    /* a bad duration is named by the variable that was set */
    setenv("CORRAL_NODE_TIMEOUT", "later", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "CORRAL_NODE_TIMEOUT") != NULL, "%s", err.msg);
    unsetenv("CORRAL_NODE_TIMEOUT");
    setenv("OLLAMA_KEEP_ALIVE", "forever", 1);
    CHECK_EQ_INT(sch_config_from_env(cfg, &err), CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "OLLAMA_KEEP_ALIVE") != NULL, "%s", err.msg);
    unsetenv("OLLAMA_KEEP_ALIVE");
    unsetenv("OLLAMA_GPU_OVERHEAD");
    unsetenv("OLLAMA_SCHED_SPREAD");
    unsetenv("CORRAL_RUNTIME_DIR");
    unsetenv("CORRAL_RUNNER_BIN");
    rmdir(rt);
    free(cfg);
}

/* At the cap, exactly one runner goes: the least recently used. */
static void test_evict_lru_only_one(void)
{
    env_t e;
    env_start(&e, 2, 16);
    CHECK_EQ_INT(run_request(&e, "l1", "alpha", "hi", NULL, NULL), MSG_done);
    clock_ms_g += 10;
    CHECK_EQ_INT(run_request(&e, "l2", "beta", "hi", NULL, NULL), MSG_done);
    clock_ms_g += 10;
    CHECK_EQ_INT(run_request(&e, "l3", "alpha", "hi", NULL, NULL), MSG_done);
    clock_ms_g += 10;
    /* beta is now the least recently used. */
    CHECK_EQ_INT(run_request(&e, "l4", "gamma", "hi", NULL, NULL), MSG_done);
    wait_runners(&e, 2);
    msg_t ps;
    msg_init(&ps, MSG_ps, "ps-lru");
    bus_send(e.client, &ps, NULL);
    msg_t r;
    CHECK(client_recv(&e, &r));
    bool alpha = false, beta = false, gamma = false;
    for (size_t i = 0; i < r.u.ps_reply.models.n; i++) {
        const char *n = r.u.ps_reply.models.v[i].name;
        alpha |= !strcmp(n, "alpha:latest");
        beta |= !strcmp(n, "beta:latest");
        gamma |= !strcmp(n, "gamma:latest");
    }
    CHECK(alpha && gamma && !beta);
    msg_clear(&r);
    env_stop(&e);
}

/* Real GPUs but a runner that loaded on the CPU (today's runner): ps
 * shows what the runner says, and the ledger gives the VRAM back. */
static void test_real_gpu_cpu_runner(void)
{
    inventory_g = "0:Real GPU:100000000000";
    inventory_real_g = true;
    env_t e;
    env_start(&e, 3, 16);
    int64_t whole = write_model(&e, "eps", NULL);
    CHECK(whole > 0);
    CHECK_EQ_INT(run_request(&e, "r1", "eps", "hi", NULL, NULL), MSG_done);
    char name[128];
    int64_t size = 0, vram = -1;
    CHECK(ps_one(&e, name, sizeof name, &size, &vram));
    CHECK_EQ_INT(size, 1234);
    CHECK_EQ_INT(vram, 0);
    CHECK_EQ_INT(sch_server_free_bytes(e.sched, 0), 100000000000LL);
    env_stop(&e);
    inventory_g = NULL;
    inventory_real_g = false;
}

/* OLLAMA_KV_CACHE_TYPE reaches the runner in load.kv_cache_type when
 * Ollama's rule allows it (flash attention on, head_dim a multiple of 32),
 * and is left out (the runner's f16) otherwise. */
static void test_kv_cache_type(void)
{
    static const struct {
        const char *kv;
        bool fa;
        int dim; /* 4 heads: head_dim dim / 4 */
        const char *want;
    } cases[] = {
        {"q8_0", true, 128, "gpu_layers=0 kv=q8_0"},
        {"q4_0", true, 128, "gpu_layers=0 kv=q4_0"},
        {"q8_0", false, 128, "gpu_layers=0"}, /* no flash attention */
        {"q8_0", true, 64, "gpu_layers=0"},   /* head_dim 16 */
        {"f16", true, 128, "gpu_layers=0"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        env_t e;
        inventory_g = "none";
        kv_cache_type_g = cases[i].kv;
        flash_attention_g = cases[i].fa;
        env_start(&e, 3, 16);
        char path[400];
        snprintf(path, sizeof path, "%s/kvq.gguf", e.dir);
        rn_synth_opts_t so;
        rn_synth_defaults(&so);
        so.dim = cases[i].dim;
        cr_err_t err;
        CHECK_EQ_INT(rn_synth_write(&so, path, &err), CR_OK);
        char first[128] = "";
        CHECK_EQ_INT(run_request(&e, "kv", "kvq", "plan", first, NULL), MSG_done);
        CHECK_MSG(!strcmp(first, cases[i].want), "%s fa %d dim %d: load said '%s', "
                  "want '%s'", cases[i].kv, cases[i].fa, cases[i].dim, first,
                  cases[i].want);
        env_stop(&e);
    }
    /* a host with a GPU: the CUDA backend's caches are f16 only, so the
     * plan (and the estimate) is f16 rather than a size the runner would
     * not keep to */
    env_t e;
    inventory_g = "0:Fake GPU:100000000000";
    kv_cache_type_g = "q8_0";
    flash_attention_g = true;
    env_start(&e, 3, 16);
    char path[400];
    snprintf(path, sizeof path, "%s/kvq.gguf", e.dir);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.dim = 128;
    cr_err_t err;
    CHECK_EQ_INT(rn_synth_write(&so, path, &err), CR_OK);
    char first[128] = "";
    CHECK_EQ_INT(run_request(&e, "kv", "kvq", "plan", first, NULL), MSG_done);
    CHECK_MSG(strstr(first, "gpu_layers=") && !strstr(first, "kv="),
              "GPU host: load said '%s'", first);
    env_stop(&e);
    inventory_g = NULL;
    kv_cache_type_g = "";
    flash_attention_g = false;
}

/* A gateway whose client stops reading (issue 20, 4): its output waits in
 * the scheduler's bounded outbox, not in a blocking send; past the bound
 * the request ends with an error that follows every chunk it was sent (in
 * order, none dropped), and the runner is free for the next request at
 * once. */
static void test_slow_reader(void)
{
    stream_buffer_g = 64 * 1024;
    env_t e;
    env_start(&e, 3, 16);
    zsock_t *slow = zsock_new(ZMQ_DEALER);
    zsock_set_rcvhwm(slow, 1);
    char ep[400];
    snprintf(ep, sizeof ep, "ipc://%s/scheduler.sock", e.dir);
    CHECK(zsock_connect(slow, "%s", ep) >= 0);
    msg_t m;
    msg_init(&m, MSG_generate, "flood");
    m.u.generate.model = "fl";
    m.u.generate.has_model = true;
    m.u.generate.prompt = "flood:6000"; /* 24 MiB: far past every queue */
    m.u.generate.has_prompt = true;
    msg_options_t o = {0};
    o.num_ctx = 512;
    o.has_num_ctx = true;
    m.u.generate.options = &o;
    m.u.generate.has_options = true;
    CHECK_EQ_INT(bus_send(slow, &m, NULL), CR_OK);
    /* Nobody reads `slow`; another client's request on the same model
     * (one slot) is served once the flood was cut off. */
    CHECK_EQ_INT(run_request(&e, "next", "fl", "hi", NULL, NULL), MSG_done);
    /* Now the slow client reads: chunks 0..k in order, then the error. */
    int want = 0;
    bool ended = false;
    while (!ended) {
        msg_t r;
        if (!client_recv_on(&e, slow, &r))
            break;
        if (r.type == MSG_chunk) {
            CHECK_MSG(r.u.chunk.response && atoi(r.u.chunk.response) == want,
                      "chunk %d arrived as '%.12s'", want,
                      r.u.chunk.response ? r.u.chunk.response : "(none)");
            want++;
        } else {
            CHECK_EQ_INT(r.type, MSG_error);
            CHECK_EQ_INT(r.u.error.status, CR_E_BUSY);
            CHECK(r.u.error.message &&
                  strstr(r.u.error.message, "reads too slowly") != NULL);
            ended = true;
        }
        msg_clear(&r);
    }
    CHECK(ended);
    CHECK(want > 0 && want < 6000);
    zsock_destroy(&slow);
    env_stop(&e);
}

/* A gateway that goes away without a word (killed; issue 20, 5): the
 * scheduler notices at its next probe and cancels its requests, so the
 * model's one slot is free for the next request. */
static void test_gateway_gone(void)
{
    env_t e;
    env_start(&e, 3, 16);
    zsock_t *gw = zsock_new(ZMQ_DEALER);
    char ep[400];
    snprintf(ep, sizeof ep, "ipc://%s/scheduler.sock", e.dir);
    CHECK(zsock_connect(gw, "%s", ep) >= 0);
    msg_t m;
    msg_init(&m, MSG_generate, "orphan");
    m.u.generate.model = "gg";
    m.u.generate.has_model = true;
    m.u.generate.prompt = "until-cancel";
    m.u.generate.has_prompt = true;
    msg_options_t o = {0};
    o.num_ctx = 512;
    o.has_num_ctx = true;
    m.u.generate.options = &o;
    m.u.generate.has_options = true;
    CHECK_EQ_INT(bus_send(gw, &m, NULL), CR_OK);
    msg_t r;
    CHECK(client_recv_on(&e, gw, &r)); /* it runs */
    CHECK_EQ_INT(r.type, MSG_chunk);
    msg_clear(&r);
    zsock_destroy(&gw); /* the gateway dies */
    send_generate(&e, "after", "gg", "hi", NULL, 0);
    bool done = false;
    double t0 = mono_s();
    while (!done && mono_s() - t0 < WAIT_NET_S) {
        clock_ms_g += 500; /* probes are due */
        pump(&e, 5);
        if (bus_recv(e.client, 0, &r, NULL, NULL) == CR_OK) {
            done = r.type == MSG_done;
            CHECK(r.type == MSG_done || r.type == MSG_chunk ||
                  r.type == MSG_pong);
            msg_clear(&r);
        }
    }
    CHECK(done);
    CHECK_EQ_INT(sch_server_runner_count(e.sched), 1);
    env_stop(&e);
}

/* A canceled request whose runner never ends it (a lost reply; issue 20,
 * 1) is ended by the scheduler after the cancel grace, so it does not hold
 * its model for good. */
static void test_cancel_grace(void)
{
    env_t e;
    env_start(&e, 3, 16);
    send_generate(&e, "deaf", "dg", "deaf", NULL, 0);
    msg_t m;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_chunk);
    msg_clear(&m);
    msg_t c;
    msg_init(&c, MSG_cancel, "deaf");
    bus_send(e.client, &c, NULL);
    pump(&e, 20);
    CHECK(client_quiet(&e)); /* not ended yet */
    clock_ms_g += 11000; /* past the grace */
    CHECK(client_recv(&e, &m));
    CHECK_EQ_STR(m.id, "deaf");
    CHECK_EQ_INT(m.type, MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_CANCELED);
    msg_clear(&m);
    CHECK_EQ_INT(run_request(&e, "after", "dg", "hi", NULL, NULL), MSG_done);
    env_stop(&e);
}

/* A runner stopped before it connected (its load timed out while it
 * started) is told to go when it says hello at last: the shutdown sent at
 * the timeout reached nobody, and it would otherwise wait for the stop
 * grace's SIGKILL. */
static void test_stop_before_hello(void)
{
    env_t e;
    env_start(&e, 3, 16);
    char flag[400], go[400];
    snprintf(flag, sizeof flag, "%s/slow-hello", e.dir);
    snprintf(go, sizeof go, "%s/hello-go", e.dir);
    FILE *f = fopen(flag, "w");
    if (f)
        fclose(f);
    send_generate(&e, "sl", "slowstart", "hi", NULL, 0);
    wait_runners(&e, 1); /* spawned, silent */
    clock_ms_g += 61 * 1000; /* past the load timeout: stopped */
    msg_t m;
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_error);
    CHECK_EQ_INT(m.u.error.status, CR_E_TIMEOUT);
    msg_clear(&m);
    f = fopen(go, "w"); /* it connects now */
    if (f)
        fclose(f);
    wait_runners(&e, 0); /* without the stop grace (the clock stands) */
    env_stop(&e);
}

typedef struct drain_arg {
    sch_server_t *sched;
    int left;
} drain_arg_t;

static void *drain_main(void *p)
{
    drain_arg_t *a = p;
    a->left = sch_server_drain(a->sched, 30000);
    return NULL;
}

/* A runner that dies while the scheduler drains (issue 20, 7): its request
 * is not run again on a fresh runner (nothing new starts in a drain); it
 * fails, and the drain ends. */
static void test_drain_no_rerun(void)
{
    env_t e;
    env_start(&e, 3, 16);
    char prompt[400], got[400], go[400];
    snprintf(prompt, sizeof prompt, "drain-die:%s", e.dir);
    snprintf(got, sizeof got, "%s/got", e.dir);
    snprintf(go, sizeof go, "%s/go", e.dir);
    send_generate(&e, "dr", "dd", prompt, NULL, 0);
    double t0 = mono_s();
    while (access(got, F_OK) && mono_s() - t0 < WAIT_NET_S)
        pump(&e, 2); /* resolved, loaded, running */
    CHECK(access(got, F_OK) == 0);
    drain_arg_t a = {.sched = e.sched, .left = -1};
    pthread_t th;
    pthread_create(&th, NULL, drain_main, &a);
    /* The drain has begun once new requests are refused; the runner then
     * dies under it. */
    send_generate(&e, "late", "dd", "hi", NULL, 0);
    msg_t m;
    bool refused = false;
    t0 = mono_s();
    while (!refused && mono_s() - t0 < WAIT_NET_S)
        if (bus_recv(e.client, 100, &m, NULL, NULL) == CR_OK) {
            refused = !strcmp(m.id, "late") && m.type == MSG_error;
            msg_clear(&m);
        }
    CHECK(refused);
    FILE *mk = fopen(go, "w");
    if (mk)
        fclose(mk);
    pthread_join(th, NULL);
    CHECK_EQ_INT(a.left, 0);
    /* Its last reply is on its way (zmq delivers it without the loop). */
    bool failed = false, ended = false;
    t0 = mono_s();
    while (!ended && mono_s() - t0 < WAIT_NET_S)
        if (bus_recv(e.client, 100, &m, NULL, NULL) == CR_OK) {
            if (!strcmp(m.id, "dr") && m.type != MSG_pong &&
                m.type != MSG_chunk && m.type != MSG_progress) {
                ended = true;
                failed = m.type == MSG_error && m.u.error.status == CR_E_RUNNER;
            }
            msg_clear(&m);
        }
    CHECK_MSG(failed, "the request was not failed (run again?)");
    env_stop(&e);
}

/* The client's next replies: one chunk of `text`, then done. */
static void expect_answer(env_t *e, const char *text)
{
    msg_t m;
    CHECK(client_recv(e, &m));
    CHECK_EQ_INT(m.type, MSG_chunk);
    CHECK_EQ_STR(m.type == MSG_chunk ? m.u.chunk.response : "", text);
    msg_clear(&m);
    CHECK(client_recv(e, &m));
    CHECK_EQ_INT(m.type, MSG_done);
    msg_clear(&m);
}

/* Direct replies (issue 18): a local runner is started with --direct, an
 * endpoint beside the front's; a generate that asks for direct replies
 * gets `route` with that endpoint before anything else, and its runner
 * gets it marked direct; one that does not ask is relayed as ever. A
 * runner that said `started` and then died does not get the request
 * again (its chunks reached the client without the scheduler). */
static void test_direct_route(void)
{
    env_t e;
    direct_g = true;
    env_start(&e, 3, 16);
    msg_t m;
    next_direct_g = true;
    send_generate(&e, "d1", "gamma", "direct?", NULL, 0);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_route);
    char want[400];
    snprintf(want, sizeof want, "unix://%s/runner-", e.dir);
    CHECK_MSG(m.type == MSG_route && !strncmp(m.u.route.endpoint, want, strlen(want)) &&
                  strstr(m.u.route.endpoint, ".sock"),
              "route: %s", m.type == MSG_route ? m.u.route.endpoint : "none");
    msg_clear(&m);
    expect_answer(&e, "direct=yes");

    /* A gateway that cannot reach the runner says no_route: forwarded. */
    next_direct_g = true;
    send_generate(&e, "d5", "gamma", "no-route?", NULL, 0);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_route);
    msg_clear(&m);
    msg_t nr;
    msg_init(&nr, MSG_no_route, "d5");
    CHECK_EQ_INT(bus_send(e.client, &nr, NULL), CR_OK);
    expect_answer(&e, "no_route=yes");
    /* One for a request that is not running is dropped. */
    msg_init(&nr, MSG_no_route, "nobody");
    CHECK_EQ_INT(bus_send(e.client, &nr, NULL), CR_OK);

    /* Not asked: no route, and the runner sees it unmarked. */
    send_generate(&e, "d2", "gamma", "direct?", NULL, 0);
    expect_answer(&e, "direct=no");

    /* `started`, then a crash: the client gets the error, not a rerun
     * (which would answer done, the marker being there). */
    char marker[300], prompt[400];
    snprintf(marker, sizeof marker, "%s/started-once", e.dir);
    snprintf(prompt, sizeof prompt, "started-crash:%s", marker);
    next_direct_g = true;
    send_generate(&e, "d3", "gamma", prompt, NULL, 0);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_route);
    msg_clear(&m);
    CHECK(client_recv(&e, &m));
    CHECK_EQ_INT(m.type, MSG_error);
    CHECK_EQ_INT(m.type == MSG_error ? m.u.error.status : 0, CR_E_RUNNER);
    msg_clear(&m);
    CHECK(access(marker, F_OK) == 0);
    env_stop(&e);

    /* Off (the default of a config not from the environment): no route. */
    env_start(&e, 3, 16);
    next_direct_g = true;
    send_generate(&e, "d4", "gamma", "direct?", NULL, 0);
    expect_answer(&e, "direct=no");
    env_stop(&e);
}

int main(int argc, char **argv)
{
    if (argc == 6 && !strcmp(argv[1], "serve"))
        return fake_runner(argv[3], argv[5], NULL);
    if (argc == 8 && !strcmp(argv[1], "serve") && !strcmp(argv[6], "--direct"))
        return fake_runner(argv[3], argv[5], argv[7]);
    zsys_init();
    zsys_set_logstream(NULL);
    clock_ms_g = 1000000;
    test_config();
    test_request_and_keep_alive();
    test_no_early_probe();
    test_keep_alive_zero_and_unload();
    test_recreated_model_reloads();
    test_errors();
    test_load_progress_and_timeout();
    test_eviction_and_queue();
    test_evict_lru_only_one();
    test_offload_error_in_ps();
    test_heartbeat();
    test_memory_eviction();
    test_spill_and_cannot_load();
    test_adopt_after_restart();
    test_adopt_grace();
    test_node_adopt();
    test_node_memo();
    test_real_gpu_cpu_runner();
    test_kv_cache_type();
    test_slow_reader();
    test_gateway_gone();
    test_cancel_grace();
    test_drain_no_rerun();
    test_stop_before_hello();
    test_direct_route();
    return check_finish("scheduler");
}
