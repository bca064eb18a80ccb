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

#include <sys/stat.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/poll_wait.h"
#include "tests/unit/fake_oci.h"

#define WAIT_MS 60000             /* generous: a busy CI machine */
#define NAP_MS 20 /* between two polls */
#define SLOW_BPS (512 * 1024)     /* the fake registry's link */
#define LAYER_BYTES (2u << 20)    /* 4 s at SLOW_BPS */

static e2e_t T;
static fake_t F;
static char model_g[128], body_g[300], failed_g[300];

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
    c->fd = e2e_post_raw(&T, "/api/pull", body_g);
    return c->fd >= 0;
}

/* Reads until needle has come (true) or WAIT_MS pass. */
static bool raw_wait(raw_t *c, const char *needle)
{
    return e2e_read_until(c->fd, c->buf, sizeof c->buf, &c->len, needle, WAIT_MS);
}

static void raw_leave(raw_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* ---- conditions ---- */

static bool wait_for(bool (*cond)(void *), void *arg)
{
    for (int64_t t0 = test_mono_ms(); test_mono_ms() - t0 < WAIT_MS; test_nap_ms(NAP_MS))
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
    e2e_bg_t b;
    e2e_bg_start(&b, &T, "POST", "/api/pull", body_g);
    for (int64_t t0 = test_mono_ms(); !e2e_bg_saw(&b, pulling_g) && test_mono_ms() - t0 < WAIT_MS;)
        test_nap_ms(NAP_MS);
    CHECK_MSG(e2e_bg_saw(&b, pulling_g), "the second pull did not reach the layer");
    raw_leave(&a);
    e2e_bg_join(&b);
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
    int64_t t_leave = test_mono_ms();
    raw_leave(&b);
    size_t want = canceled + 1;
    CHECK_MSG(wait_for(canceled_at_least, &want),
              "the second pull went on waiting after its client left");
    fprintf(stderr, "the second pull ended %lld ms after its client left\n",
            (long long)(test_mono_ms() - t_leave));
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
    long long saved = e2e_blob_part_completed(&T, F.blobs[1].hex);
    CHECK_MSG(saved > 0 && saved < (long long)LAYER_BYTES, "part state: %lld of %u bytes",
              saved, LAYER_BYTES);
    CHECK(!model_listed());

    /* A new pull resumes: the rest of the layer, then the config. */
    long long mark = atomic_load(&F.blob_bytes);
    e2e_bg_t c;
    e2e_bg_start(&c, &T, "POST", "/api/pull", body_g);
    e2e_bg_join(&c);
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
    fake_add_config(&F, "llama");
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

    if (check_failed_g)
        e2e_log_tail(&T, 60);
    e2e_stop(&T);
    return check_finish("e2e_pull_cancel");
}
