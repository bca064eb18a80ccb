/* test_runner_orphan.c: a runner counts its scheduler's silence only while
 * it has nothing to do.
 *
 * The scheduler pings a runner only when the runner has been quiet for a
 * heartbeat interval, so during a long generation (the runner sends
 * tokens, nobody needs to ping it) the runner hears nothing. A runner that
 * counted that time as silence exited about a second after any request
 * longer than its orphan timeout (seen: "no scheduler for 213 s; exiting"
 * one second after a 212 s answer, and the model loaded again).
 *
 * The test plays the scheduler on a ROUTER, sets the orphan timeout to
 * T = 3 s, and runs greedy generations on a synthetic model whose answer
 * to "count" never reaches its end token, doubling num_predict until one
 * lasts longer than T + 1 s (the shorter ones are each followed by a ping
 * that must be answered). After that one it sends nothing: the runner
 * must stay for its orphan timeout after the work ended, so it
 * exits no sooner than T - 1 s after the test saw `done` (allowing a
 * second for `done` to reach the test on a busy machine); one that counted
 * the generation as silence exits within about a second (its receive
 * timeout). And it does exit: the orphan rule itself still holds. */
#include "lib/prelude.h"

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "proto/bus.h"
#include "services/runner/server.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"
#include "tests/unit/engine_load.h"

#define ORPHAN_S 3

static char dir_g[256], endpoint_g[400], model_g[400];
static zsock_t *router_g;
static zframe_t *peer_g;
static atomic_bool exited_g;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *serve(void *arg)
{
    CR_UNUSED(arg);
    rn_server_t *s = NULL;
    cr_err_t err;
    if (rn_server_new(endpoint_g, "rn1", NULL, &s, &err)) {
        fprintf(stderr, "server: %s\n", err.msg);
    } else {
        rn_server_run(s);
        rn_server_destroy(&s);
    }
    atomic_store(&exited_g, true);
    return NULL;
}

static void send_to_runner(msg_t *m)
{
    CHECK_EQ_INT(bus_send_to(router_g, peer_g, m, NULL), CR_OK);
}

static void send_generate(const char *id, int64_t n_predict)
{
    msg_options_t o = {0};
    o.temperature = 0;
    o.has_temperature = true;
    o.num_predict = n_predict;
    o.has_num_predict = true;
    msg_t m;
    msg_init(&m, MSG_generate, id);
    m.u.generate.model = "synth";
    m.u.generate.has_model = true;
    m.u.generate.prompt = "count";
    m.u.generate.has_prompt = true;
    m.u.generate.raw = true;
    m.u.generate.has_raw = true;
    m.u.generate.options = &o;
    m.u.generate.has_options = true;
    send_to_runner(&m);
}

/* Reads until request `id` ends, or with id NULL until a pong (or the
 * runner is silent for 10 s); returns the request's token count from
 * `done` (1 for the pong), or -1. */
static int64_t wait_done(const char *id)
{
    for (;;) {
        msg_t m;
        cr_status_t st = bus_recv(router_g, 10000, &m, NULL, NULL);
        if (st)
            return -1;
        int64_t n = -2;
        if (!id && m.type == MSG_pong)
            n = 1;
        else if (!id)
            ;
        else if (!strcmp(m.id, id) && m.type == MSG_done)
            n = m.u.done.eval_count;
        else if (!strcmp(m.id, id) && m.type == MSG_error)
            n = -1;
        msg_clear(&m);
        if (n != -2)
            return n;
    }
}

int main(void)
{
    char t[16];
    snprintf(t, sizeof t, "%d", ORPHAN_S);
    setenv("CORRAL_RUNNER_ORPHAN_TIMEOUT", t, 1);
    unsetenv("CORRAL_TEST_SCRIPT");
    snprintf(dir_g, sizeof dir_g, "/tmp/corral-rorph-%d", (int)getpid());
    mkdir(dir_g, 0700);
    snprintf(endpoint_g, sizeof endpoint_g, "ipc://%s/runners.sock", dir_g);
    snprintf(model_g, sizeof model_g, "%s/m.gguf", dir_g);
    /* the "long" model of the e2e tests: greedy on "count" never ends */
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.seed = 5;
    so.ctx = 8192;
    so.type = CR_TYPE_Q8_0;
    cr_err_t err;
    if (rn_synth_write(&so, model_g, &err)) {
        fprintf(stderr, "synth: %s\n", err.msg);
        return 1;
    }
    router_g = zsock_new(ZMQ_ROUTER);
    CHECK(zsock_bind(router_g, "%s", endpoint_g) == 0);
    pthread_t th;
    pthread_create(&th, NULL, serve, NULL);

    msg_t m;
    CHECK_EQ_INT(bus_recv(router_g, 5000, &m, &peer_g, NULL), CR_OK);
    CHECK_EQ_INT(m.type, MSG_hello);
    msg_clear(&m);
    msg_options_t o;
    msg_init(&m, MSG_load, "rn1");
    test_load_body(&m.u.load, &o, model_g, NULL, 8192, 0);
    send_to_runner(&m);
    CHECK_EQ_INT(bus_recv(router_g, 30000, &m, NULL, NULL), CR_OK);
    CHECK_EQ_INT(m.type, MSG_ready);
    msg_clear(&m);

    /* Generations of doubling length until one outlasts the orphan
     * timeout by a second; the shorter ones are followed by a ping that
     * must be answered (and keeps the runner's clock fresh). */
    int64_t n = 1000;
    double took = 0, done_at = 0;
    char id[32];
    for (int round = 0; round < 12; round++, n *= 2) {
        snprintf(id, sizeof id, "g%d", round);
        double t0 = now_s();
        send_generate(id, n);
        int64_t got = wait_done(id);
        done_at = now_s();
        took = done_at - t0;
        CHECK_MSG(got == n, "%s: %lld tokens of %lld (the answer ended early)", id,
                  (long long)got, (long long)n);
        printf("runner_orphan: %lld tokens in %.2f s\n", (long long)n, took);
        if (got != n || took > ORPHAN_S + 1)
            break;
        msg_init(&m, MSG_ping, "p");
        send_to_runner(&m);
        CHECK_MSG(wait_done(NULL) == 1, "no pong after a %.1f s generation", took);
    }
    CHECK_MSG(took > ORPHAN_S + 1, "no generation outlasted %d s", ORPHAN_S + 1);

    /* After that one, silence: the runner stays for its timeout after the
     * work, then leaves. */
    CHECK(!atomic_load(&exited_g));
    while (!atomic_load(&exited_g) && now_s() - done_at < 60)
        usleep(10000);
    double stayed = now_s() - done_at;
    printf("runner_orphan: after a %.2f s generation the runner stayed %.2f s (timeout %d s)\n",
           took, stayed, ORPHAN_S);
    CHECK_MSG(atomic_load(&exited_g), "the runner did not leave after %d s of silence",
              ORPHAN_S);
    CHECK_MSG(stayed >= ORPHAN_S - 1, "the runner left %.2f s after its work ended: it counted "
              "the generation as silence", stayed);
    pthread_join(th, NULL);
    zframe_destroy(&peer_g);
    zsock_destroy(&router_g);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir_g);
    CHECK(system(cmd) == 0);
    return check_finish("runner_orphan");
}
