/* test_e2e_pull_cancel.c: clients that leave a shared pull (issue 20).
 *
 * Two clients pulling the same model share one download (download.h). A
 * slow fake registry (tests/unit/fake_oci.h, 512 KB/s, bodies paused at
 * will) serves a 2 MiB layer through `corral serve`:
 *   - the first client, whose pull runs the download, leaves; the second
 *     still gets its model: success, listed, its blob's SHA-256 right, and
 *     every layer byte served once (the download went on, not again);
 *   - the second client leaves while the first stays (the registry paused):
 *     its pull must end at once, not when the download ends;
 *   - then the first leaves too: the download stops (no connection to the
 *     registry stays open), its partial file and part state stay, and a new
 *     pull resumes it, fetching exactly the bytes the state lacked.
 * Clients that leave are raw sockets closed by the test; conditions are
 * waited for (polled), bounded by WAIT_MS. */
#include "lib/prelude.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/fake_oci.h"

#define WAIT_MS 60000             /* generous: a busy CI machine */
#define SLOW_BPS (512 * 1024)     /* the fake registry's link */
#define LAYER_BYTES (2u << 20)    /* 4 s at SLOW_BPS */

static e2e_t T;
static fake_t F;
static char model_g[128], body_g[300], failed_g[300];

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap(void)
{
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
}

/* ---- clients ---- */

/* A client that leaves when told: a raw streaming POST /api/pull. */
typedef struct raw {
    int fd;
    char buf[1 << 16]; /* what came so far (its tail when long) */
    size_t len;
} raw_t;

static bool raw_start(raw_t *c)
{
    memset(c, 0, sizeof *c);
    const char *colon = strrchr(T.host, ':');
    int port = colon ? atoi(colon + 1) : 0;
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&a, sizeof a) != 0)
        return false;
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST /api/pull HTTP/1.1\r\nHost: %s\r\nContent-Type: "
                     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
                     T.host, strlen(body_g), body_g);
    return send(c->fd, head, (size_t)n, MSG_NOSIGNAL) == n;
}

/* Reads until needle has come (true) or WAIT_MS pass. */
static bool raw_wait(raw_t *c, const char *needle)
{
    for (int64_t t0 = mono_ms(); mono_ms() - t0 < WAIT_MS;) {
        if (strstr(c->buf, needle))
            return true;
        struct pollfd p = {c->fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        if (c->len + 1 >= sizeof c->buf)
            c->len = 0;
        ssize_t r = recv(c->fd, c->buf + c->len, sizeof c->buf - 1 - c->len, 0);
        if (r <= 0)
            break;
        c->len += (size_t)r;
        c->buf[c->len] = '\0';
    }
    return strstr(c->buf, needle) != NULL;
}

static void raw_leave(raw_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* A client that stays to the end, in a thread. */
typedef struct stayer {
    pthread_t th;
    pthread_mutex_t mu;
    char seen[1 << 16];
    size_t len;
    long status;
    char *body;
} stayer_t;

static bool on_data(void *ctx, const char *data, size_t len)
{
    stayer_t *s = ctx;
    pthread_mutex_lock(&s->mu);
    if (s->len + len >= sizeof s->seen)
        s->len = 0;
    if (len < sizeof s->seen) {
        memcpy(s->seen + s->len, data, len);
        s->len += len;
        s->seen[s->len] = '\0';
    }
    pthread_mutex_unlock(&s->mu);
    return true;
}

static void *stay_main(void *arg)
{
    stayer_t *s = arg;
    e2e_resp_t r = e2e_http(&T, "POST", "/api/pull", body_g, on_data, s);
    s->status = r.status;
    s->body = r.body;
    r.body = NULL;
    e2e_resp_free(&r);
    return NULL;
}

static void stay_start(stayer_t *s)
{
    memset(s, 0, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_create(&s->th, NULL, stay_main, s);
}

static bool stay_saw(stayer_t *s, const char *needle)
{
    pthread_mutex_lock(&s->mu);
    bool yes = strstr(s->seen, needle) != NULL;
    pthread_mutex_unlock(&s->mu);
    return yes;
}

static void stay_join(stayer_t *s)
{
    pthread_join(s->th, NULL);
    pthread_mutex_destroy(&s->mu);
}

/* ---- conditions ---- */

static bool wait_for(bool (*cond)(void *), void *arg)
{
    for (int64_t t0 = mono_ms(); mono_ms() - t0 < WAIT_MS; nap())
        if (cond(arg))
            return true;
    return cond(arg);
}

static bool bytes_above(void *arg)
{
    return atomic_load(&F.blob_bytes) > *(long long *)arg;
}

static bool canceled_at_least(void *arg)
{
    return e2e_log_count(&T, failed_g) >= *(size_t *)arg;
}

static bool no_connections(void *arg)
{
    CR_UNUSED(arg);
    return atomic_load(&F.conns) == 0;
}

static bool model_listed(void)
{
    e2e_resp_t r = e2e_http(&T, "GET", "/api/tags", NULL, NULL, NULL);
    bool yes = r.body && strstr(r.body, model_g);
    e2e_resp_free(&r);
    return yes;
}

static void blob_path(char *out, size_t cap, const char *suffix)
{
    snprintf(out, cap, "%s/models/blobs/sha256-%s%s", T.tmp, F.blobs[1].hex, suffix);
}

/* The layer in the store hashes to its digest. */
static bool layer_verified(void)
{
    char path[1400];
    blob_path(path, sizeof path, "");
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    unsigned char *data = malloc(LAYER_BYTES + 1);
    size_t n = data ? fread(data, 1, LAYER_BYTES + 1, f) : 0;
    fclose(f);
    char hex[REG_HEX_LEN + 1] = "";
    if (n == LAYER_BYTES)
        fake_sha256_hex(data, n, hex);
    free(data);
    return !strcmp(hex, F.blobs[1].hex);
}

/* Bytes the layer's part state says are in place. */
static long long saved_completed(void)
{
    long long sum = 0;
    for (int i = 0; i < 1024; i++) {
        char path[1400], suffix[32];
        snprintf(suffix, sizeof suffix, "-partial-%d", i);
        blob_path(path, sizeof path, suffix);
        json_t *j = json_load_file(path, 0, NULL);
        if (!j)
            break;
        sum += json_integer_value(json_object_get(j, "Completed"));
        json_decref(j);
    }
    return sum;
}

static void delete_model(void)
{
    char body[300];
    snprintf(body, sizeof body, "{\"model\":\"%s\"}", model_g);
    e2e_resp_t r = e2e_http(&T, "DELETE", "/api/delete", body, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

/* ---- cases ---- */

static char pulling_g[64]; /* "pulling <12 hex>" of the layer */

static void test_first_leaves(void)
{
    size_t canceled = e2e_log_count(&T, failed_g);
    long long sent0 = atomic_load(&F.blob_bytes);
    raw_t a;
    CHECK(raw_start(&a));
    CHECK_MSG(wait_for(bytes_above, &sent0), "the first pull did not start downloading");
    stayer_t b;
    stay_start(&b);
    for (int64_t t0 = mono_ms(); !stay_saw(&b, pulling_g) && mono_ms() - t0 < WAIT_MS;)
        nap();
    CHECK_MSG(stay_saw(&b, pulling_g), "the second pull did not reach the layer");
    raw_leave(&a);
    stay_join(&b);
    CHECK_EQ_INT(b.status, 200);
    CHECK_MSG(b.body && strstr(b.body, "\"success\""), "the second pull: %.300s",
              b.body ? b.body + (strlen(b.body) > 300 ? strlen(b.body) - 300 : 0) : "");
    free(b.body);
    CHECK(model_listed());
    CHECK_MSG(layer_verified(), "the pulled layer does not hash to its digest");
    long long sent = atomic_load(&F.blob_bytes) - sent0;
    CHECK_MSG(sent == (long long)(LAYER_BYTES + F.blobs[0].len),
              "%lld bytes served for one layer of %u and a config of %zu", sent,
              LAYER_BYTES, F.blobs[0].len);
    size_t want = canceled + 1;
    CHECK_MSG(wait_for(canceled_at_least, &want), "the first pull did not end canceled");
    delete_model();
}

static void test_both_leave(void)
{
    size_t canceled = e2e_log_count(&T, failed_g);
    long long sent0 = atomic_load(&F.blob_bytes);
    raw_t a, b;
    CHECK(raw_start(&a));
    CHECK_MSG(wait_for(bytes_above, &sent0), "the first pull did not start downloading");
    /* The registry pauses: the first pull cannot finish meanwhile. */
    atomic_store(&F.hold, true);
    CHECK(raw_start(&b));
    CHECK_MSG(raw_wait(&b, pulling_g), "the second pull did not reach the layer: %.300s",
              b.buf);
    int64_t t_leave = mono_ms();
    raw_leave(&b);
    size_t want = canceled + 1;
    CHECK_MSG(wait_for(canceled_at_least, &want),
              "the second pull went on waiting after its client left");
    fprintf(stderr, "the second pull ended %lld ms after its client left\n",
            (long long)(mono_ms() - t_leave));
    CHECK(!model_listed());

    /* Now nobody waits: the download stops and keeps what it has. */
    raw_leave(&a);
    want = canceled + 2;
    CHECK_MSG(wait_for(canceled_at_least, &want), "the first pull did not end canceled");
    atomic_store(&F.hold, false); /* the paused bodies find their peers gone */
    CHECK_MSG(wait_for(no_connections, NULL),
              "%d connections to the registry stay open", atomic_load(&F.conns));
    char partial[1400];
    struct stat sb;
    blob_path(partial, sizeof partial, "-partial");
    CHECK_MSG(stat(partial, &sb) == 0, "no partial file stayed");
    long long saved = saved_completed();
    CHECK_MSG(saved > 0 && saved < (long long)LAYER_BYTES, "part state: %lld of %u bytes",
              saved, LAYER_BYTES);
    CHECK(!model_listed());

    /* A new pull resumes: the rest of the layer, then the config. */
    long long mark = atomic_load(&F.blob_bytes);
    stayer_t c;
    stay_start(&c);
    stay_join(&c);
    CHECK_EQ_INT(c.status, 200);
    CHECK_MSG(c.body && strstr(c.body, "\"success\""), "the resumed pull: %.300s",
              c.body ? c.body + (strlen(c.body) > 300 ? strlen(c.body) - 300 : 0) : "");
    free(c.body);
    long long second = atomic_load(&F.blob_bytes) - mark;
    fprintf(stderr, "resume: %lld of %u layer bytes were kept; the new pull fetched %lld "
                    "(with a %zu-byte config)\n", saved, LAYER_BYTES, second, F.blobs[0].len);
    CHECK_MSG(second == (long long)(LAYER_BYTES - saved + F.blobs[0].len),
              "the resumed pull fetched %lld bytes, expected %lld", second,
              (long long)(LAYER_BYTES - saved + F.blobs[0].len));
    CHECK(model_listed());
    CHECK_MSG(layer_verified(), "the resumed layer does not hash to its digest");
}

int main(void)
{
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_pull_cancel");
    }
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
    fake_add_blob(&F, LAYER_BYTES, 93);
    fake_set_manifest(&F);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", F.port);
    snprintf(body_g, sizeof body_g, "{\"model\":\"%s\",\"insecure\":true}", model_g);
    snprintf(failed_g, sizeof failed_g, "pull %s failed: canceled", model_g);
    snprintf(pulling_g, sizeof pulling_g, "pulling %.12s", F.blobs[1].hex);

    test_first_leaves();
    test_both_leave();
    atomic_store(&F.hold, false);
    fake_stop(&F);

    if (check_failed_g) {
        char cmd[1300];
        snprintf(cmd, sizeof cmd, "tail -n 60 %s/serve.log >&2", T.tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "(no log)\n");
    }
    e2e_stop(&T);
    return check_finish("e2e_pull_cancel");
}
