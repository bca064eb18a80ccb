/* test_e2e_version_busy.c: /api/version answers while every generation
 * slot streams to a client that does not read.
 *
 * serve runs with OLLAMA_NUM_PARALLEL=4. Four raw connections each ask for
 * 3000 greedy tokens with 20 top logprobs (about 4 MB of NDJSON, more than
 * the loopback socket buffers hold) and read only until their first token
 * line; then nobody reads them, and the test waits until the gateway holds
 * 64 KiB unsent for each (/proc/net/tcp's tx_queue): their gateway threads
 * sit blocked on full sockets and the runner's slots are all busy. While they are open,
 * /api/version is asked on fresh connections and on one kept-alive
 * connection, and must answer 200 with its body each time (a health probe
 * must not wait behind streams: issue 20's soak). Then the streams are
 * dropped, and a new generate must still be answered: the slots came
 * free. Waits are conditions (a line seen, an answer), each with a
 * generous bound that only turns a hang into a failure. */
#include "lib/prelude.h"

#include <jansson.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/poll_wait.h"

static e2e_t T;

#define N_STREAMS 4
#define N_PROBES 20
#define FIRST_TOKEN_WAIT_MS 120000 /* a model load on a loaded machine */

#define STUCK_BYTES (64 * 1024) /* unsent at the gateway: the reader's window is full */

/* Bytes the gateway has written to client socket fd that the client has
 * not taken (tx_queue of the gateway's end in /proc/net/tcp), or -1. */
static long server_send_queue(int fd)
{
    struct sockaddr_in me;
    socklen_t n = sizeof me;
    if (getsockname(fd, (struct sockaddr *)&me, &n))
        return -1;
    unsigned client_port = ntohs(me.sin_port);
    const char *colon = strrchr(T.host, ':');
    unsigned server_port = colon ? (unsigned)atoi(colon + 1) : 0;
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        return -1;
    char line[512];
    long found = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned lport, rport;
        unsigned long tx;
        if (sscanf(line, " %*d: %*8x:%x %*8x:%x %*x %lx:", &lport, &rport, &tx) == 3 &&
            lport == server_port && rport == client_port) {
            found = (long)tx;
            break;
        }
    }
    fclose(f);
    return found;
}

static bool version_ok(const e2e_resp_t *r)
{
    if (r->status != 200 || !r->body)
        return false;
    json_t *j = json_loads(r->body, 0, NULL);
    bool ok = e2e_jstr(j, "version") && e2e_jstr(j, "corral_version");
    json_decref(j);
    return ok;
}

static void test_version_beside_unread_streams(void)
{
    const char *body = "{\"model\":\"synth\",\"prompt\":\"count\",\"options\":{"
                       "\"temperature\":0,\"seed\":1,\"num_predict\":3000},"
                       "\"logprobs\":true,\"top_logprobs\":20}";
    int fds[N_STREAMS];
    for (int i = 0; i < N_STREAMS; i++) {
        fds[i] = e2e_post_raw(&T, "/api/generate", body);
        CHECK(fds[i] >= 0);
    }
    /* Each stream has begun: its first token line arrived. */
    for (int i = 0; i < N_STREAMS; i++) {
        char buf[8192] = "";
        size_t len = 0;
        bool begun = fds[i] >= 0 && e2e_read_until(fds[i], buf, sizeof buf, &len,
                                                   "\"response\":", FIRST_TOKEN_WAIT_MS);
        CHECK_MSG(begun, "stream %d: no token line (%.200s)", i, buf);
    }
    /* Nobody reads them now: wait until the gateway holds unsent bytes for
     * each (its threads are then stuck on full sockets). */
    for (int i = 0; i < N_STREAMS; i++) {
        long queued = -1;
        for (int64_t t0 = test_mono_ms(); fds[i] >= 0 && test_mono_ms() - t0 < FIRST_TOKEN_WAIT_MS;) {
            queued = server_send_queue(fds[i]);
            if (queued >= STUCK_BYTES)
                break;
            test_nap_ms(20);
        }
        CHECK_MSG(queued >= STUCK_BYTES, "stream %d: %ld bytes queued at the gateway", i,
                  queued);
    }
    /* The probes, fresh connections first. */
    int ok = 0;
    for (int i = 0; i < N_PROBES; i++) {
        e2e_resp_t r = e2e_http(&T, "GET", "/api/version", NULL, NULL, NULL);
        ok += version_ok(&r);
        e2e_resp_free(&r);
    }
    CHECK_EQ_INT(ok, N_PROBES);
    /* The same probes on one raw kept-alive connection. */
    const char *colon = strrchr(T.host, ':');
    int kfd = e2e_connect_port(colon ? atoi(colon + 1) : 0);
    CHECK(kfd >= 0);
    ok = 0;
    for (int i = 0; kfd >= 0 && i < N_PROBES; i++) {
        char req[256], buf[4096] = "";
        size_t len = 0;
        int n = snprintf(req, sizeof req, "GET /api/version HTTP/1.1\r\nHost: %s\r\n\r\n",
                         T.host);
        if (send(kfd, req, (size_t)n, MSG_NOSIGNAL) != n)
            break;
        /* The body ends with "}"; the next request waits for it. */
        if (e2e_read_until(kfd, buf, sizeof buf, &len, "\"corral_version\":", 30000) &&
            e2e_read_until(kfd, buf, sizeof buf, &len, "}", 30000) &&
            !strncmp(buf, "HTTP/1.1 200", 12))
            ok++;
    }
    CHECK_EQ_INT(ok, N_PROBES);
    if (kfd >= 0)
        close(kfd);
    for (int i = 0; i < N_STREAMS; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    /* The dropped streams gave their slots back. */
    e2e_resp_t g = e2e_http(&T, "POST", "/api/generate",
                            "{\"model\":\"synth\",\"prompt\":\"hi\",\"stream\":false,"
                            "\"options\":{\"num_predict\":2}}",
                            NULL, NULL);
    CHECK_MSG(g.status == 200, "generate after the drops: %ld %.200s", g.status,
              g.body ? g.body : "");
    e2e_resp_free(&g);
}

int main(void)
{
    unsetenv("CORRAL_TEST_SCRIPT");
    setenv("OLLAMA_NUM_PARALLEL", "4", 1);
    if (!e2e_start(&T))
        return 1;
    if (e2e_synth_create(&T, "synth", "TEMPLATE \"{{ .Prompt }}\"\n", "--seed", "5",
                         "--ctx", "8192", NULL))
        test_version_beside_unread_streams();
    else
        CHECK_MSG(false, "could not create the synthetic model");
    e2e_stop(&T);
    return check_finish("e2e_version_busy");
}
