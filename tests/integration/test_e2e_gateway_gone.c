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

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/fake_oci.h"

#define WAIT_MS 30000            /* generous: a busy CI machine */
#define SLOW_BPS (256 * 1024)    /* the fake registry's link */
#define LAYER_BYTES (4u << 20)   /* 16 s at SLOW_BPS */

static e2e_t T;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap(void)
{
    struct timespec ts = {0, 50 * 1000000L};
    nanosleep(&ts, NULL);
}

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
    for (int64_t t0 = mono_ms(); mono_ms() - t0 < WAIT_MS; nap()) {
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
    for (int64_t t0 = mono_ms(); mono_ms() - t0 < WAIT_MS; nap())
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
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
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
    int64_t t0 = mono_ms();
    while (temp_files() == 0 && mono_ms() - t0 < WAIT_MS)
        nap();
    CHECK_MSG(temp_files() == 1, "the registry holds %zu upload temp files",
              temp_files());
    size_t said = e2e_log_count(&T, "its gateway connection is gone; dropping its upload");
    gateway_kill(&g);
    t0 = mono_ms();
    while (temp_files() > 0 && mono_ms() - t0 < WAIT_MS)
        nap();
    CHECK_MSG(temp_files() == 0, "the upload's temp file outlived its gateway by %lld ms",
              (long long)(mono_ms() - t0));
    CHECK(wait_log("its gateway connection is gone; dropping its upload", said + 1));
    close(fd);
}

/* ---- pulls ---- */

static fake_t F;
static char model_g[128];

typedef struct puller {
    e2e_t *at;
    pthread_t th;
    pthread_mutex_t mu;
    char seen[1 << 16]; /* the stream so far (its tail when long) */
    size_t len;
    long status;
    char *body;
} puller_t;

static bool on_pull(void *ctx, const char *data, size_t len)
{
    puller_t *p = ctx;
    pthread_mutex_lock(&p->mu);
    if (p->len + len >= sizeof p->seen)
        p->len = 0;
    if (len < sizeof p->seen) {
        memcpy(p->seen + p->len, data, len);
        p->len += len;
        p->seen[p->len] = '\0';
    }
    pthread_mutex_unlock(&p->mu);
    return true;
}

static void *pull_main(void *arg)
{
    puller_t *p = arg;
    char body[300];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"insecure\":true}", model_g);
    e2e_resp_t r = e2e_http(p->at, "POST", "/api/pull", body, on_pull, p);
    p->status = r.status;
    p->body = r.body;
    r.body = NULL;
    e2e_resp_free(&r);
    return NULL;
}

static void pull_start(puller_t *p, e2e_t *at)
{
    memset(p, 0, sizeof *p);
    p->at = at;
    pthread_mutex_init(&p->mu, NULL);
    pthread_create(&p->th, NULL, pull_main, p);
}

static bool pull_saw(puller_t *p, const char *needle)
{
    pthread_mutex_lock(&p->mu);
    bool yes = strstr(p->seen, needle) != NULL;
    pthread_mutex_unlock(&p->mu);
    return yes;
}

static void pull_join(puller_t *p)
{
    pthread_join(p->th, NULL);
    pthread_mutex_destroy(&p->mu);
}

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
    for (int64_t t0 = mono_ms(); mono_ms() - t0 < WAIT_MS; nap())
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
    puller_t a;
    pull_start(&a, &g.at);
    CHECK_MSG(wait_bytes(0), "the pull did not start downloading");
    int64_t t_kill = mono_ms();
    gateway_kill(&g);
    pull_join(&a);
    free(a.body);
    /* The layer needs LAYER_BYTES / SLOW_BPS = 16 s at full speed: a pull
     * that ran on would end far later than this, and with success. */
    CHECK_MSG(wait_log(failed, before + 1), "the pull of a killed gateway ran on");
    int64_t took = mono_ms() - t_kill;
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
    puller_t a, b;
    pull_start(&a, &g.at);
    CHECK_MSG(wait_bytes(sent0), "the first pull did not start downloading");
    pull_start(&b, &T); /* serve's gateway: it stays */
    char pulling[64];
    snprintf(pulling, sizeof pulling, "pulling %.12s", F.blobs[1].hex);
    for (int64_t t0 = mono_ms(); !pull_saw(&b, pulling) && mono_ms() - t0 < WAIT_MS;)
        nap();
    CHECK_MSG(pull_saw(&b, pulling), "the second pull did not reach the layer");
    gateway_kill(&g);
    CHECK_MSG(wait_log("its gateway connection is gone; canceling", canceled + 1),
              "the registry did not notice the killed gateway");
    pull_join(&a);
    free(a.body);
    pull_join(&b); /* the rest of the layer at SLOW_BPS */
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
    const char *cfg = "{\"model_format\":\"gguf\",\"model_family\":\"llama\","
                      "\"model_families\":[\"llama\"],\"model_type\":\"1M\","
                      "\"file_type\":\"F32\",\"architecture\":\"amd64\",\"os\":\"linux\"}";
    blob_t *c = &F.blobs[F.n_blobs++];
    c->len = strlen(cfg);
    c->data = malloc(c->len);
    memcpy(c->data, cfg, c->len);
    fake_sha256_hex(c->data, c->len, c->hex);
    fake_add_blob(&F, LAYER_BYTES, 91);
    fake_set_manifest(&F);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", F.port);
    test_pull_alone();
    test_pull_shared();
    fake_stop(&F);

    if (check_failed_g) {
        char cmd[1300];
        snprintf(cmd, sizeof cmd, "tail -n 60 %s/serve.log >&2", T.tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "(no log)\n");
    }
    e2e_stop(&T);
    return check_finish("e2e_gateway_gone");
}
