/* test_e2e_gateway_gone.c: the registry notices a gateway that died
 * (issue 20).
 *
 * Besides `corral serve` (whose gateway stays up), the test starts gateways
 * of its own on other ports and SIGKILLs them mid-request:
 *   - mid-upload: a raw HTTP client has sent 3 MiB of an 8 MiB blob; once
 *     the registry holds the upload's temp file, the gateway is killed;
 *     the temp file must go (and the log say why) long before
 *     CORRAL_UPLOAD_TIMEOUT (set to 10 minutes here);
 *   - mid-pull: a pull from a slow fake registry (tests/unit/fake_oci.h,
 *     256 KB/s) is under way when its gateway is killed; the pull must end
 *     `canceled` well before the blob could have arrived;
 *   - a shared pull: the same model pulled through a doomed gateway and
 *     through serve's; the doomed one is killed; the other must finish
 *     with `success` and the model must be listed.
 * Conditions are waited for (polled), bounded by WAIT_MS. */
#include "lib/prelude.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/poll_wait.h"
#include "tests/unit/fake_oci.h"

#define WAIT_MS 30000            /* generous: a busy CI machine */
#define NAP_MS 50 /* between two polls */
#define SLOW_BPS (256 * 1024)    /* the fake registry's link */
#define LAYER_BYTES (4u << 20)   /* 16 s at SLOW_BPS */

static e2e_t T;

/* ---- a gateway of our own ---- */

typedef struct gateway {
    pid_t pid;
    int port;
    e2e_t at; /* T with this gateway's host, for e2e_http */
} gateway_t;

static bool gateway_start(gateway_t *g)
{
    g->port = e2e_free_port();
    g->at = T;
    snprintf(g->at.host, sizeof g->at.host, "127.0.0.1:%d", g->port);
    char log[1200], exe[1200];
    snprintf(log, sizeof log, "%s/serve.log", T.tmp);
    snprintf(exe, sizeof exe, "%s/corral-gateway", T.bin_dir);
    g->pid = fork();
    if (g->pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        setenv("CORRAL_HOST", g->at.host, 1);
        execl(exe, "corral-gateway", (char *)NULL);
        _exit(127);
    }
    for (int64_t t0 = test_mono_ms(); test_mono_ms() - t0 < WAIT_MS; test_nap_ms(NAP_MS)) {
        e2e_resp_t r = e2e_http(&g->at, "GET", "/", NULL, NULL, NULL);
        long st = r.status;
        e2e_resp_free(&r);
        if (st == 200)
            return true;
    }
    return false;
}

static void gateway_kill(gateway_t *g)
{
    if (g->pid > 0) {
        kill(g->pid, SIGKILL);
        waitpid(g->pid, NULL, 0);
        g->pid = -1;
    }
}

/* ---- conditions ---- */

static size_t temp_files(void)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/models/blobs", T.tmp);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, ".corral-tmp-", 12);
    closedir(d);
    return n;
}

static bool wait_log(const char *needle, size_t at_least)
{
    for (int64_t t0 = test_mono_ms(); test_mono_ms() - t0 < WAIT_MS; test_nap_ms(NAP_MS))
        if (e2e_log_count(&T, needle) >= at_least)
            return true;
    return false;
}

/* ---- mid-upload ---- */

static void test_upload(void)
{
    gateway_t g;
    if (!gateway_start(&g)) {
        CHECK_MSG(false, "our gateway did not start");
        gateway_kill(&g);
        return;
    }
    int fd = e2e_connect_port(g.port);
    CHECK(fd >= 0);
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST /api/blobs/sha256:%064d HTTP/1.1\r\nHost: %s\r\n"
                     "Content-Length: %u\r\n\r\n",
                     7, g.at.host, 8u << 20);
    CHECK(send(fd, head, (size_t)n, MSG_NOSIGNAL) == n);
    static char chunk[64 * 1024];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 48; i++) /* 3 MiB: three pieces reach the registry */
        CHECK(send(fd, chunk, sizeof chunk, MSG_NOSIGNAL) == (ssize_t)sizeof chunk);
    int64_t t0 = test_mono_ms();
    while (temp_files() == 0 && test_mono_ms() - t0 < WAIT_MS)
        test_nap_ms(NAP_MS);
    CHECK_MSG(temp_files() == 1, "the registry holds %zu upload temp files",
              temp_files());
    size_t said = e2e_log_count(&T, "its gateway connection is gone; dropping its upload");
    gateway_kill(&g);
    t0 = test_mono_ms();
    while (temp_files() > 0 && test_mono_ms() - t0 < WAIT_MS)
        test_nap_ms(NAP_MS);
    CHECK_MSG(temp_files() == 0, "the upload's temp file outlived its gateway by %lld ms",
              (long long)(test_mono_ms() - t0));
    CHECK(wait_log("its gateway connection is gone; dropping its upload", said + 1));
    close(fd);
}

/* ---- pulls ---- */

static fake_t F;
static char model_g[128];
static char body_g[300]; /* a pull of model_g */

static bool model_listed(void)
{
    e2e_resp_t r = e2e_http(&T, "GET", "/api/tags", NULL, NULL, NULL);
    bool yes = r.body && strstr(r.body, model_g);
    e2e_resp_free(&r);
    return yes;
}

/* Waits until the fake registry has sent more layer bytes than `than`. */
static bool wait_bytes(long long than)
{
    for (int64_t t0 = test_mono_ms(); test_mono_ms() - t0 < WAIT_MS; test_nap_ms(NAP_MS))
        if (atomic_load(&F.blob_bytes) > than)
            return true;
    return false;
}

static void test_pull_alone(void)
{
    gateway_t g;
    if (!gateway_start(&g)) {
        CHECK_MSG(false, "our gateway did not start");
        gateway_kill(&g);
        return;
    }
    char failed[300];
    snprintf(failed, sizeof failed, "pull %s failed: canceled", model_g);
    size_t before = e2e_log_count(&T, failed);
    e2e_bg_t a;
    e2e_bg_start(&a, &g.at, "POST", "/api/pull", body_g);
    CHECK_MSG(wait_bytes(0), "the pull did not start downloading");
    int64_t t_kill = test_mono_ms();
    gateway_kill(&g);
    e2e_bg_join(&a);
    free(a.body);
    /* The layer needs LAYER_BYTES / SLOW_BPS = 16 s at full speed: a pull
     * that ran on would end far later than this, and with success. */
    CHECK_MSG(wait_log(failed, before + 1), "the pull of a killed gateway ran on");
    int64_t took = test_mono_ms() - t_kill;
    long long sent = atomic_load(&F.blob_bytes);
    CHECK_MSG(sent < (long long)LAYER_BYTES, "the whole layer was sent (%lld bytes)", sent);
    fprintf(stderr, "the pull ended %lld ms after its gateway was killed, "
                    "%lld of %u layer bytes sent\n", (long long)took, sent, LAYER_BYTES);
    CHECK(!model_listed());
}

static void test_pull_shared(void)
{
    gateway_t g;
    if (!gateway_start(&g)) {
        CHECK_MSG(false, "our gateway did not start");
        gateway_kill(&g);
        return;
    }
    size_t canceled = e2e_log_count(&T, "its gateway connection is gone; canceling");
    long long sent0 = atomic_load(&F.blob_bytes);
    e2e_bg_t a, b;
    e2e_bg_start(&a, &g.at, "POST", "/api/pull", body_g);
    CHECK_MSG(wait_bytes(sent0), "the first pull did not start downloading");
    e2e_bg_start(&b, &T, "POST", "/api/pull", body_g); /* serve's gateway: it stays */
    char pulling[64];
    snprintf(pulling, sizeof pulling, "pulling %.12s", F.blobs[1].hex);
    for (int64_t t0 = test_mono_ms(); !e2e_bg_saw(&b, pulling) && test_mono_ms() - t0 < WAIT_MS;)
        test_nap_ms(NAP_MS);
    CHECK_MSG(e2e_bg_saw(&b, pulling), "the second pull did not reach the layer");
    gateway_kill(&g);
    CHECK_MSG(wait_log("its gateway connection is gone; canceling", canceled + 1),
              "the registry did not notice the killed gateway");
    e2e_bg_join(&a);
    free(a.body);
    e2e_bg_join(&b); /* the rest of the layer at SLOW_BPS */
    CHECK_EQ_INT(b.status, 200);
    CHECK_MSG(b.body && strstr(b.body, "\"success\""),
              "the surviving pull did not succeed: %.300s",
              b.body ? b.body + (strlen(b.body) > 300 ? strlen(b.body) - 300 : 0) : "");
    free(b.body);
    CHECK(model_listed());
}

int main(void)
{
    /* The upload timeout must not be what drops the upload. */
    setenv("CORRAL_UPLOAD_TIMEOUT", "10m", 1);
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_gateway_gone");
    }
    test_upload();

    fake_start(&F);
    F.threaded = true;
    F.rate_bps = SLOW_BPS;
    fake_add_config(&F, "llama");
    fake_add_blob(&F, LAYER_BYTES, 91);
    fake_set_manifest(&F);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", F.port);
    snprintf(body_g, sizeof body_g, "{\"model\":\"%s\",\"insecure\":true}", model_g);
    test_pull_alone();
    test_pull_shared();
    fake_stop(&F);

    if (check_failed_g)
        e2e_log_tail(&T, 60);
    e2e_stop(&T);
    return check_finish("e2e_gateway_gone");
}
