/* test_registry_pull.c: pull against a fake OCI registry of our own (a
 * thread serving plain-socket HTTP/1.1, one request per connection).
 *
 * Cases: a multi-part pull with Ollama's progress statuses; a 404
 * manifest; wrong blob bytes (digest mismatch, nothing left behind); a
 * truncated body, then a resume that fetches only the missing bytes
 * (counted on the server); the 401 Bearer flow through a token endpoint;
 * a redirect to another host that must not see the Authorization header; a
 * refused token; two concurrent pulls sharing one download (and both
 * canceled: the waiter returns at once, the last stops it); pruning after a
 * tag is replaced (and not with noprune); hostile names; the server's pull
 * running in a job while tags is answered; challenge and URL helpers. */
#include "lib/prelude.h"
#include "proto/msg.h"
#include "services/registry/download.h"
#include "services/registry/manifest.h"
#include "services/registry/oci_client.h"
#include "services/registry/ops.h"
#include "services/registry/pull.h"
#include "services/registry/push.h"
#include "services/registry/server.h"
#include "services/registry/store.h"
#include "tests/unit/check.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/unit/fake_oci.h"

/* ---- the store and progress capture ---- */

static char tmp_g[256];

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    CR_UNUSED(sb);
    CR_UNUSED(flag);
    CR_UNUSED(ftw);
    return remove(p);
}

static reg_store_t *fresh_store(void)
{
    nftw(tmp_g, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    mkdir(tmp_g, 0755);
    cr_err_t err;
    reg_store_t *s = reg_store_new(tmp_g, &err);
    CHECK(s != NULL);
    return s;
}

#define MAX_EVENTS 4096

typedef struct events {
    pthread_mutex_t mu;
    char status[MAX_EVENTS][40];
    int64_t completed[MAX_EVENTS];
    int n;
} events_t;

static void on_event(void *ctx, const msg_progress_body_t *p)
{
    events_t *e = ctx;
    pthread_mutex_lock(&e->mu);
    if (e->n < MAX_EVENTS) {
        snprintf(e->status[e->n], sizeof e->status[0], "%s", p->status);
        e->completed[e->n] = p->has_completed ? p->completed : 0;
        e->n++;
    }
    pthread_mutex_unlock(&e->mu);
}

static bool saw(const events_t *e, const char *status)
{
    for (int i = 0; i < e->n; i++)
        if (!strcmp(e->status[i], status))
            return true;
    return false;
}

static int first(const events_t *e, const char *prefix)
{
    for (int i = 0; i < e->n; i++)
        if (!strncmp(e->status[i], prefix, strlen(prefix)))
            return i;
    return -1;
}

static void small_parts(reg_dl_opts_t *o)
{
    reg_dl_opts_default(o);
    o->part_min_bytes = 4000;
    o->part_max_bytes = 4000;
    o->max_active = 4;
    o->max_attempts = 3;
    o->backoff_ms = 10;
    o->stall_ms = 3000;
    o->ramp_ms = 0;
}

static char model_g[128];

static cr_status_t do_pull(reg_store_t *s, const reg_xfer_env_t *env,
                           events_t *ev, cr_err_t *err)
{
    memset(ev, 0, sizeof *ev);
    pthread_mutex_init(&ev->mu, NULL);
    cr_err_clear(err);
    return reg_pull(s, env, model_g, true, NULL, on_event, ev, err);
}

static bool has_manifest(reg_store_t *s)
{
    cr_model_name_t n, st;
    cr_model_name_parse(model_g, &n, NULL);
    return reg_store_manifest_find(s, &n, &st) == CR_OK;
}

static size_t count_files(const char *suffix_part)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s/blobs", tmp_g);
    DIR *d = opendir(dir);
    size_t n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strstr(e->d_name, suffix_part))
            n++;
    if (d)
        closedir(d);
    return n;
}

/* ---- cases ---- */

static void test_pull_ok(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 300, 1);              /* config */
    const char *big = fake_add_blob(&f, 18000, 2); /* 5 parts of 4000 */
    fake_add_blob(&f, 0, 3);                /* empty license */
    fake_set_manifest(&f);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    reg_xfer_env_t env = {NULL, &o, false};
    events_t ev;
    cr_err_t err;
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    CHECK_EQ_STR(ev.status[0], "pulling manifest");
    char want[40];
    snprintf(want, sizeof want, "pulling %.12s", big);
    CHECK(saw(&ev, want));
    CHECK(first(&ev, "pulling ") < first(&ev, "verifying sha256 digest"));
    CHECK_EQ_STR(ev.status[ev.n - 3], "verifying sha256 digest");
    CHECK_EQ_STR(ev.status[ev.n - 2], "writing manifest");
    CHECK_EQ_STR(ev.status[ev.n - 1], "success");
    CHECK(!saw(&ev, "removing unused layers"));
    /* Each layer's final event comes once (clients draw a line per event). */
    int n_final = 0;
    for (int i = 0; i < ev.n; i++)
        n_final += !strcmp(ev.status[i], want) && ev.completed[i] == 18000;
    CHECK_EQ_INT(n_final, 1);
    for (int i = 0; i < f.n_blobs; i++) {
        uint64_t sz = 0;
        CHECK(reg_store_blob_exists(s, f.blobs[i].hex, &sz));
        CHECK_EQ_INT((long long)sz, (long long)f.blobs[i].len);
    }
    CHECK(has_manifest(s));
    /* The manifest is stored byte for byte. */
    cr_model_name_t n;
    cr_model_name_parse(model_g, &n, NULL);
    char *data = NULL;
    size_t len = 0;
    CHECK_EQ_INT(reg_store_manifest_read(s, &n, &data, &len, NULL, NULL), CR_OK);
    CHECK_EQ_STR(data, f.manifest);
    free(data);
    CHECK_EQ_INT(count_files("-partial"), 0);
    CHECK_EQ_INT(atomic_load(&f.blob_bytes), 18300);
    /* Pulling again downloads nothing, and reports each blob complete. */
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    CHECK_EQ_INT(atomic_load(&f.blob_bytes), 18300);
    int k = first(&ev, want);
    CHECK(k > 0 && ev.completed[k] == 18000);
    reg_store_destroy(&s);
    fake_stop(&f);
}

/* A blob removed (by a concurrent delete's pruning) after it was fetched
 * is fetched again before the manifest is written. */
typedef struct remover {
    reg_store_t *s;
    char trigger[40];        /* status that triggers the removal */
    char hex[REG_HEX_LEN + 1];
    int removed;
} remover_t;

static void remove_once(void *ctx, const msg_progress_body_t *p)
{
    remover_t *r = ctx;
    if (!r->removed && !strcmp(p->status, r->trigger)) {
        reg_store_blob_remove(r->s, r->hex, NULL);
        r->removed++;
    }
}

static void test_blob_removed_midway(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 200, 30);
    const char *first_layer = fake_add_blob(&f, 3000, 31);
    fake_add_blob(&f, 50, 32);
    fake_set_manifest(&f);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    reg_xfer_env_t env = {NULL, &o, false};
    remover_t r = {.s = s};
    snprintf(r.trigger, sizeof r.trigger, "pulling %.12s", f.blobs[2].hex);
    snprintf(r.hex, sizeof r.hex, "%s", first_layer);
    cr_err_t err;
    CHECK_EQ_INT(reg_pull(s, &env, model_g, true, NULL, remove_once, &r, &err), CR_OK);
    CHECK_EQ_INT(r.removed, 1);
    CHECK(reg_store_blob_exists(s, first_layer, NULL));
    CHECK(has_manifest(s));
    CHECK_EQ_INT(atomic_load(&f.blob_bytes), 3250 + 3000);
    reg_store_destroy(&s);
    fake_stop(&f);
}

static void test_manifest_404(void)
{
    fake_t f;
    fake_start(&f);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    events_t ev;
    cr_err_t err;
    CHECK_EQ_INT(do_pull(s, NULL, &ev, &err), CR_E_NOT_FOUND);
    CHECK_EQ_STR(err.msg, "pull model manifest: file does not exist");
    CHECK(!has_manifest(s));
    /* Plain http needs insecure. */
    cr_err_clear(&err);
    snprintf(model_g, sizeof model_g, "http://127.0.0.1:%d/library/m:t", f.port);
    CHECK_EQ_INT(reg_pull(s, NULL, model_g, false, NULL, NULL, NULL, &err),
                 CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "insecure protocol http");
    reg_store_destroy(&s);
    fake_stop(&f);
}

/* A registry nobody answers: the error carries curl's own words (which
 * name the host and port, and for a proxy the CONNECT status), not only
 * its code's generic text ("Couldn't connect to server"). */
static void test_unreachable(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    CHECK(fd >= 0 && !bind(fd, (struct sockaddr *)&a, al) &&
          !getsockname(fd, (struct sockaddr *)&a, &al));
    int port = ntohs(a.sin_port);
    close(fd); /* bound, never listened: connections are refused */
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", port);
    reg_store_t *s = fresh_store();
    events_t ev;
    cr_err_t err;
    CHECK(do_pull(s, NULL, &ev, &err) != CR_OK);
    char want[64];
    snprintf(want, sizeof want, "port %d", port);
    CHECK_MSG(strstr(err.msg, want) != NULL, "%s", err.msg);
    reg_store_destroy(&s);
}

static void test_bad_manifest(void)
{
    fake_t f;
    fake_start(&f);
    snprintf(f.manifest, sizeof f.manifest, "{\"schemaVersion\":2,\"layers\":[{\"digest\":\"sha256:zz\"}]}");
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    events_t ev;
    cr_err_t err;
    CHECK_EQ_INT(do_pull(s, NULL, &ev, &err), CR_E_CORRUPT);
    CHECK(!strncmp(err.msg, "pull model manifest: ", 21));
    CHECK(!has_manifest(s));
    reg_store_destroy(&s);
    fake_stop(&f);
}

static void test_digest_mismatch(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 100, 4);
    const char *hex = fake_add_blob(&f, 9000, 5);
    fake_set_manifest(&f);
    f.corrupt = true;
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    reg_xfer_env_t env = {NULL, &o, false};
    events_t ev;
    cr_err_t err;
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_E_CORRUPT);
    CHECK_MSG(!strncmp(err.msg,
                       "digest mismatch, file must be downloaded again: want sha256:",
                       60),
              "got: %s", err.msg);
    CHECK(strstr(err.msg, hex) != NULL);
    CHECK(strstr(err.msg, ", got sha256:") != NULL);
    CHECK_EQ_STR(ev.status[ev.n - 1], "verifying sha256 digest");
    CHECK(!reg_store_blob_exists(s, hex, NULL));
    CHECK_EQ_INT(count_files("-partial"), 0);
    CHECK(!has_manifest(s));
    reg_store_destroy(&s);
    fake_stop(&f);
}

static int64_t saved_completed(const char *hex)
{
    int64_t sum = 0;
    for (int i = 0; i < 64; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/blobs/sha256-%s-partial-%d", tmp_g, hex, i);
        FILE *fp = fopen(path, "r");
        if (!fp)
            break;
        char text[256] = "";
        size_t n = fread(text, 1, sizeof text - 1, fp);
        text[n] = '\0';
        fclose(fp);
        const char *c = strstr(text, "\"Completed\":");
        if (c)
            sum += atoll(c + 12);
    }
    return sum;
}

static void test_truncated_then_resume(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 100, 6);
    const char *hex = fake_add_blob(&f, 20000, 7);
    fake_set_manifest(&f);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    o.max_attempts = 1; /* no retries: the truncation ends the pull */
    o.max_active = 1;
    reg_xfer_env_t env = {NULL, &o, false};
    /* Parts 0 and 1 arrive whole, part 2 is cut after 1500 bytes. */
    f.truncate_count = 0;
    events_t ev;
    cr_err_t err;
    /* Let two parts through, then truncate: emulate with a byte budget. */
    f.truncate_after = 1500;
    f.truncate_count = 1;
    CHECK(do_pull(s, &env, &ev, &err) != CR_OK);
    CHECK(!has_manifest(s));
    CHECK(!reg_store_blob_exists(s, hex, NULL));
    CHECK_EQ_INT(count_files("-partial"), 6); /* data + 5 part files */
    int64_t saved = saved_completed(hex);
    CHECK_MSG(saved >= 1500 && saved < 20000, "saved %lld", (long long)saved);
    /* Layers come before the config, so the config (100 bytes) is still
     * to fetch. */
    long long before = atomic_load(&f.blob_bytes);

    /* Resume: only the missing bytes are served. */
    o.max_attempts = 3;
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    long long served = atomic_load(&f.blob_bytes) - before;
    CHECK_MSG(served == 20100 - saved, "served %lld, expected %lld", served,
              (long long)(20100 - saved));
    CHECK(reg_store_blob_exists(s, hex, NULL));
    CHECK(has_manifest(s));
    CHECK_EQ_INT(count_files("-partial"), 0);

    /* A truncation with retries left is retried within the same pull. */
    reg_store_destroy(&s);
    s = fresh_store();
    f.truncate_count = 2;
    before = atomic_load(&f.blob_bytes);
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    CHECK(reg_store_blob_exists(s, hex, NULL));
    reg_store_destroy(&s);
    fake_stop(&f);
}

static void test_bearer_and_cdn_redirect(void)
{
    fake_t f, cdn;
    fake_start(&f);
    fake_start(&cdn);
    fake_add_blob(&f, 500, 8);
    fake_add_blob(&f, 9000, 9);
    fake_set_manifest(&f);
    /* The CDN holds the same bytes. */
    for (int i = 0; i < f.n_blobs; i++) {
        cdn.blobs[i] = f.blobs[i];
        cdn.blobs[i].data = malloc(f.blobs[i].len ? f.blobs[i].len : 1);
        memcpy(cdn.blobs[i].data, f.blobs[i].data, f.blobs[i].len);
    }
    cdn.n_blobs = f.n_blobs;
    f.require_token = true;
    snprintf(f.redirect_to, sizeof f.redirect_to, "http://localhost:%d", cdn.port);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    reg_xfer_env_t env = {NULL, &o, false};
    events_t ev;
    cr_err_t err;
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    CHECK_EQ_INT(atomic_load(&f.token_hits), 1);
    CHECK(strstr(f.last_token_query, "service=fake-registry") != NULL);
    CHECK(strstr(f.last_token_query, "scope=repository%3Alibrary%2Fm%3Apull") != NULL);
    CHECK(strstr(f.last_token_query, "&ts=") != NULL);
    CHECK(strstr(f.last_token_query, "&nonce=") != NULL);
    CHECK(atomic_load(&f.auth_seen) > 0);
    /* Every byte came from the CDN, which never saw our Authorization. */
    CHECK_EQ_INT(atomic_load(&cdn.blob_bytes), 9500);
    CHECK_EQ_INT(atomic_load(&f.blob_bytes), 0);
    CHECK_EQ_INT(atomic_load(&cdn.auth_seen), 0);
    CHECK(has_manifest(s));
    reg_store_destroy(&s);

    /* A token endpoint that refuses: unauthorized. */
    s = fresh_store();
    f.token_refuse = true;
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_E_UNAUTHORIZED);
    CHECK_EQ_STR(err.msg, "pull model manifest: unauthorized: access denied");
    CHECK(!has_manifest(s));
    reg_store_destroy(&s);
    fake_stop(&cdn);
    fake_stop(&f);
}

/* A server that ignores Range: the probe is cut off by its body cap, a
 * one-part blob still arrives, a multi-part one fails clearly. */
static void test_range_ignored(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 100, 24);
    fake_add_blob(&f, 10000, 25);
    fake_set_manifest(&f);
    f.ignore_range = true;
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    o.part_min_bytes = o.part_max_bytes = 20000;
    reg_xfer_env_t env = {NULL, &o, false};
    events_t ev;
    cr_err_t err;
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    CHECK(has_manifest(s));
    reg_store_destroy(&s);
    s = fresh_store();
    small_parts(&o);
    o.max_attempts = 1;
    CHECK(do_pull(s, &env, &ev, &err) != CR_OK);
    CHECK_MSG(strstr(err.msg, "unexpected response 200 to a range request") != NULL,
              "got %s", err.msg);
    CHECK(!has_manifest(s));
    reg_store_destroy(&s);
    fake_stop(&f);
}

static void test_basic_credentials(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 100, 20);
    fake_add_blob(&f, 5000, 21);
    fake_set_manifest(&f);
    f.require_basic = true;
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    reg_xfer_env_t env = {NULL, &o, false};
    events_t ev;
    cr_err_t err;
    /* No credentials: unauthorized. */
    setenv("CORRAL_REGISTRY_AUTH_FILE", "/nonexistent/auth", 1);
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_E_UNAUTHORIZED);
    /* The file's line for this host answers the Basic challenge. */
    char path[400], text[300];
    snprintf(path, sizeof path, "%s.auth", tmp_g);
    snprintf(text, sizeof text, "# registries\nother.example u:p\n127.0.0.1:%d user:pass\n",
             f.port);
    FILE *fp = fopen(path, "w");
    fputs(text, fp);
    fclose(fp);
    setenv("CORRAL_REGISTRY_AUTH_FILE", path, 1);
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    CHECK(has_manifest(s));
    unsetenv("CORRAL_REGISTRY_AUTH_FILE");
    unlink(path);
    reg_store_destroy(&s);
    fake_stop(&f);
}

/* A write that fails (here: over RLIMIT_FSIZE, as a full disk would)
 * ends the pull at once, without retries. */
static void test_write_failure(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 100, 22);
    fake_add_blob(&f, 300000, 23);
    fake_set_manifest(&f);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    o.max_attempts = 6;
    o.backoff_ms = 1000; /* a retry would show in the time taken */
    reg_xfer_env_t env = {NULL, &o, false};
    events_t ev;
    cr_err_t err;
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 100000;
    signal(SIGXFSZ, SIG_IGN);
    setrlimit(RLIMIT_FSIZE, &lim);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_status_t st = do_pull(s, &env, &ev, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    setrlimit(RLIMIT_FSIZE, &old);
    CHECK_EQ_INT(st, CR_E_IO);
    CHECK_MSG(strstr(err.msg, "File too large") != NULL, "got %s", err.msg);
    CHECK(t1.tv_sec - t0.tv_sec < 2);
    CHECK(!has_manifest(s));
    reg_store_destroy(&s);
    fake_stop(&f);
}

typedef struct puller {
    reg_store_t *s;
    const reg_xfer_env_t *env;
    cr_status_t st;
    events_t ev;
} puller_t;

static void *pull_thread(void *arg)
{
    puller_t *p = arg;
    cr_err_t err;
    memset(&p->ev, 0, sizeof p->ev);
    pthread_mutex_init(&p->ev.mu, NULL);
    p->st = reg_pull(p->s, p->env, model_g, true, NULL, on_event, &p->ev, &err);
    return NULL;
}

static void test_shared_download(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 100, 10);
    fake_add_blob(&f, 16000, 11);
    fake_set_manifest(&f);
    f.delay_ms = 150; /* slow enough for the two pulls to overlap */
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    reg_transfers_t *t = reg_transfers_new();
    reg_xfer_env_t env = {t, &o, false};
    static puller_t a, b;
    a.s = b.s = s;
    a.env = b.env = &env;
    pthread_t ta, tb;
    pthread_create(&ta, NULL, pull_thread, &a);
    usleep(100 * 1000);
    pthread_create(&tb, NULL, pull_thread, &b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
    CHECK_EQ_INT(a.st, CR_OK);
    CHECK_EQ_INT(b.st, CR_OK);
    CHECK_EQ_STR(b.ev.status[b.ev.n - 1], "success");
    /* One download: each byte served once. */
    CHECK_MSG(atomic_load(&f.blob_bytes) == 16100, "served %lld",
              (long long)atomic_load(&f.blob_bytes));
    CHECK(!reg_transfers_busy(t, f.blobs[1].hex));
    reg_transfers_destroy(&t);
    reg_store_destroy(&s);
    fake_stop(&f);
}

/* A pull with its own cancel flag, in a thread; `ended` once it returns. */
typedef struct leaver {
    reg_store_t *s;
    const reg_xfer_env_t *env;
    atomic_bool cancel, ended;
    cr_status_t st;
    events_t ev;
    pthread_t th;
} leaver_t;

static void *leaver_main(void *arg)
{
    leaver_t *p = arg;
    cr_err_t err;
    cr_err_clear(&err);
    p->st = reg_pull(p->s, p->env, model_g, true, &p->cancel, on_event, &p->ev,
                     &err);
    atomic_store(&p->ended, true);
    return NULL;
}

static void leaver_start(leaver_t *p, reg_store_t *s, const reg_xfer_env_t *env)
{
    p->s = s;
    p->env = env;
    atomic_init(&p->cancel, false);
    atomic_init(&p->ended, false);
    memset(&p->ev, 0, sizeof p->ev);
    pthread_mutex_init(&p->ev.mu, NULL);
    pthread_create(&p->th, NULL, leaver_main, p);
}

static bool wait_flag(atomic_bool *f)
{
    for (int i = 0; i < 2000 && !atomic_load(f); i++) /* 20 s */
        usleep(10 * 1000);
    return atomic_load(f);
}

/* Two pulls share a download held still by the registry: the waiting one,
 * canceled, returns at once (it does not wait for the download); the one
 * running it, canceled too, stops it and keeps the partial file. */
static void test_shared_cancel(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 100, 21);
    fake_add_blob(&f, 64000, 22);
    fake_set_manifest(&f);
    f.threaded = true;
    f.rate_bps = 64000; /* one second for the layer */
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    o.part_min_bytes = o.part_max_bytes = 64000; /* one part */
    o.stall_ms = 60000;
    reg_transfers_t *t = reg_transfers_new();
    reg_xfer_env_t env = {t, &o, false};
    static leaver_t a, b;
    leaver_start(&a, s, &env);
    for (int i = 0; i < 2000 && atomic_load(&f.blob_bytes) <= 100; i++)
        usleep(10 * 1000);
    CHECK(atomic_load(&f.blob_bytes) > 100);
    atomic_store(&f.hold, true);
    leaver_start(&b, s, &env);
    /* b waits on the shared download once it reports the bytes a has in
     * place (a waiter's first progress; its own start says 0). */
    bool waiting = false;
    for (int i = 0; i < 2000 && !waiting; i++) {
        pthread_mutex_lock(&b.ev.mu);
        for (int k = 0; k < b.ev.n; k++)
            waiting |= !strncmp(b.ev.status[k], "pulling ", 8) &&
                       strcmp(b.ev.status[k], "pulling manifest") &&
                       b.ev.completed[k] > 0;
        pthread_mutex_unlock(&b.ev.mu);
        if (!waiting)
            usleep(10 * 1000);
    }
    CHECK_MSG(waiting, "the second pull did not join the download");
    atomic_store(&b.cancel, true);
    CHECK_MSG(wait_flag(&b.ended), "the canceled waiter waited for the download");
    CHECK_EQ_INT(b.st, CR_E_CANCELED);
    CHECK(!atomic_load(&a.ended));
    atomic_store(&a.cancel, true);
    CHECK_MSG(wait_flag(&a.ended), "the download did not stop");
    CHECK_EQ_INT(a.st, CR_E_CANCELED);
    pthread_join(a.th, NULL);
    pthread_join(b.th, NULL);
    CHECK(!reg_transfers_busy(t, f.blobs[1].hex));
    CHECK(!has_manifest(s));
    char path[REG_PATH_MAX], partial[REG_PATH_MAX + 16];
    CHECK(reg_store_blob_path(s, f.blobs[1].hex, path, sizeof path));
    snprintf(partial, sizeof partial, "%s-partial", path);
    struct stat sb;
    CHECK_MSG(stat(partial, &sb) == 0, "no partial file kept");
    atomic_store(&f.hold, false);
    reg_transfers_destroy(&t);
    reg_store_destroy(&s);
    fake_stop(&f);
}

static void test_prune_after_replace(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 100, 12);
    const char *old_hex = fake_add_blob(&f, 5000, 13);
    fake_set_manifest(&f);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    reg_dl_opts_t o;
    small_parts(&o);
    reg_xfer_env_t env = {NULL, &o, false};
    events_t ev;
    cr_err_t err;
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    char old_copy[REG_HEX_LEN + 1];
    snprintf(old_copy, sizeof old_copy, "%s", old_hex);
    /* The tag moves to new weights. */
    free(f.blobs[1].data);
    f.n_blobs = 1;
    fake_add_blob(&f, 6000, 14);
    fake_set_manifest(&f);
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    CHECK(saw(&ev, "removing unused layers"));
    CHECK_EQ_STR(ev.status[ev.n - 1], "success");
    CHECK(!reg_store_blob_exists(s, old_copy, NULL));
    CHECK(reg_store_blob_exists(s, f.blobs[0].hex, NULL)); /* config kept */

    /* With noprune the replaced blob stays. */
    free(f.blobs[1].data);
    f.n_blobs = 1;
    fake_add_blob(&f, 7000, 15);
    char prev[REG_HEX_LEN + 1];
    uint64_t dummy;
    snprintf(prev, sizeof prev, "%s", ev.status[0]); /* unused */
    CR_UNUSED(dummy);
    reg_manifest_t m;
    cr_model_name_t n;
    cr_model_name_parse(model_g, &n, NULL);
    char *data = NULL;
    size_t len = 0;
    reg_store_manifest_read(s, &n, &data, &len, NULL, NULL);
    reg_manifest_parse(data, len, &m, NULL);
    snprintf(prev, sizeof prev, "%s", m.layers[0].hex);
    reg_manifest_free(&m);
    free(data);
    fake_set_manifest(&f);
    env.noprune = true;
    CHECK_EQ_INT(do_pull(s, &env, &ev, &err), CR_OK);
    CHECK(!saw(&ev, "removing unused layers"));
    CHECK(reg_store_blob_exists(s, prev, NULL));
    reg_store_destroy(&s);
    fake_stop(&f);
}

static void test_startup_prune_partials(void)
{
    reg_store_t *s = fresh_store();
    const char *hex = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const char *names[] = {"-partial", "-partial-0", "-partial-1"};
    char path[600];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/blobs/sha256-%s%s", tmp_g, hex, names[i]);
        FILE *fp = fopen(path, "w");
        fputs("{}", fp);
        fclose(fp);
        if (i < 2) { /* two of them two hours old */
            struct timespec ts[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
            utimensat(AT_FDCWD, path, ts, 0);
        }
    }
    reg_prune_store(s, 3600);
    CHECK_EQ_INT(count_files("-partial"), 1); /* the young one stays */
    reg_prune_store(s, 0);
    CHECK_EQ_INT(count_files("-partial"), 0);
    reg_store_destroy(&s);
}

static void test_hostile_names(void)
{
    reg_store_t *s = fresh_store();
    const char *bad[] = {"../../etc/passwd", "a/../b", "/abs", "x:../y",
                         "host/ns/m/extra/part", "", "m:", "-lead", "a b"};
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        cr_err_t err;
        CHECK_EQ_INT(reg_pull(s, NULL, bad[i], true, NULL, NULL, NULL, &err),
                     CR_E_INVALID);
        CHECK_EQ_STR(err.msg, "invalid model name");
    }
    cr_err_t err;
    CHECK_EQ_INT(reg_pull(s, NULL, NULL, true, NULL, NULL, NULL, &err), CR_E_INVALID);
    reg_store_destroy(&s);
}

static void test_helpers(void)
{
    char realm[256], service[128], scope[256];
    CHECK(reg_parse_bearer("Bearer realm=\"https://auth.example/token\","
                           "service=\"registry.example\",scope=\"repository:a/b:pull,push\"",
                           realm, sizeof realm, service, sizeof service, scope,
                           sizeof scope));
    CHECK_EQ_STR(realm, "https://auth.example/token");
    CHECK_EQ_STR(service, "registry.example");
    CHECK_EQ_STR(scope, "repository:a/b:pull,push");
    CHECK(!reg_parse_bearer("Basic realm=\"x\"", realm, sizeof realm, service,
                            sizeof service, scope, sizeof scope));
    CHECK(!reg_parse_bearer("Bearer service=\"x\"", realm, sizeof realm, service,
                            sizeof service, scope, sizeof scope));
    /* truncated quotes do not overrun */
    CHECK(reg_parse_bearer("Bearer realm=\"http://a", realm, sizeof realm, service,
                           sizeof service, scope, sizeof scope));
    CHECK_EQ_STR(realm, "http://a");
    CHECK(reg_url_same_origin("http://a:80/x", "http://A/y"));
    CHECK(!reg_url_same_origin("http://a:5000/x", "http://a:5001/x"));
    CHECK(!reg_url_same_origin("http://a/x", "https://a/x"));
    char out[256];
    CHECK(reg_url_resolve("http://h:1/v2/x/blobs/uploads/", "/v2/x/up/1?_state=a",
                          out, sizeof out));
    CHECK_EQ_STR(out, "http://h:1/v2/x/up/1?_state=a");
    CHECK(reg_url_resolve("http://h:1/a", "http://other/b", out, sizeof out));
    CHECK_EQ_STR(out, "http://other/b");
}

/* ---- push ---- */

static void put_local_model(reg_store_t *s, const char *name, const char *from,
                            char model_hex[REG_HEX_LEN + 1])
{
    size_t n = 10000;
    unsigned char *w = malloc(n);
    unsigned seed = 99;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        w[i] = (unsigned char)(seed >> 16);
    }
    const char *cfg = "{\"model_format\":\"gguf\"}";
    char cfg_hex[REG_HEX_LEN + 1];
    CHECK_EQ_INT(reg_store_blob_put(s, w, n, model_hex, NULL, NULL), CR_OK);
    CHECK_EQ_INT(reg_store_blob_put(s, cfg, strlen(cfg), cfg_hex, NULL, NULL), CR_OK);
    free(w);
    reg_manifest_t m;
    reg_manifest_init(&m);
    reg_manifest_set_config(&m, cfg_hex, (int64_t)strlen(cfg));
    reg_manifest_add(&m, REG_MT_MODEL, model_hex, (int64_t)n, from, NULL);
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    reg_manifest_encode(&m, &b);
    cr_model_name_t nm;
    CHECK_EQ_INT(cr_model_name_parse(name, &nm, NULL), CR_OK);
    CHECK_EQ_INT(reg_store_manifest_write(s, &nm, b.data, b.len, NULL), CR_OK);
    cr_buf_free(&b);
    reg_manifest_free(&m);
}

static void test_push(void)
{
    fake_t f;
    fake_start(&f);
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    reg_store_t *s = fresh_store();
    char model_hex[REG_HEX_LEN + 1];
    put_local_model(s, model_g, NULL, model_hex);
    reg_dl_opts_t o;
    small_parts(&o);
    reg_xfer_env_t env = {NULL, &o, false};
    events_t ev;
    memset(&ev, 0, sizeof ev);
    pthread_mutex_init(&ev.mu, NULL);
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(reg_push(s, &env, model_g, true, NULL, on_event, &ev, &err), CR_OK);
    CHECK_EQ_STR(ev.status[0], "retrieving manifest");
    char want[40];
    snprintf(want, sizeof want, "pushing %.12s", model_hex);
    CHECK(saw(&ev, want));
    CHECK_EQ_STR(ev.status[ev.n - 2], "pushing manifest");
    CHECK_EQ_STR(ev.status[ev.n - 1], "success");
    CHECK_EQ_INT(f.uploads_opened, 2);
    CHECK_EQ_INT(f.patches, 4); /* 10000 bytes in parts of 4000 + config */
    CHECK_EQ_STR(f.manifest_ctype, REG_MT_MANIFEST);
    bool found = false;
    for (int i = 0; i < f.n_blobs; i++)
        if (!strcmp(f.blobs[i].hex, model_hex) && f.blobs[i].len == 10000)
            found = true;
    CHECK(found);
    /* the manifest went up byte for byte */
    cr_model_name_t nm;
    cr_model_name_parse(model_g, &nm, NULL);
    char *data = NULL;
    size_t len = 0;
    reg_store_manifest_read(s, &nm, &data, &len, NULL, NULL);
    CHECK_EQ_STR(f.manifest, data);
    free(data);
    /* Again: every blob is there already (HEAD), nothing uploads. */
    int patches = f.patches;
    CHECK_EQ_INT(reg_push(s, &env, model_g, true, NULL, NULL, NULL, &err), CR_OK);
    CHECK_EQ_INT(f.patches, patches);

    /* Bearer auth on every request, and a layer mounted from its parent. */
    reg_store_destroy(&s);
    s = fresh_store();
    char parent[160];
    snprintf(parent, sizeof parent, "127.0.0.1:%d/library/base:v1", f.port);
    for (int i = 0; i < f.n_blobs; i++)
        free(f.blobs[i].data);
    f.n_blobs = 0;
    put_local_model(s, model_g, parent, model_hex);
    f.require_token = true;
    CHECK_EQ_INT(reg_push(s, &env, model_g, true, NULL, NULL, NULL, &err), CR_OK);
    CHECK_EQ_INT(f.mounts, 1);
    CHECK(strstr(f.last_mount_query, "from=library/base") != NULL);
    CHECK(atomic_load(&f.token_hits) >= 1);
    /* A refused token: unauthorized. */
    f.token_refuse = true;
    CHECK_EQ_INT(reg_push(s, &env, model_g, true, NULL, NULL, NULL, &err),
                 CR_E_UNAUTHORIZED);
    CHECK_EQ_STR(err.msg, "unauthorized: access denied");
    /* Unknown model, bad name, http without insecure. */
    CHECK_EQ_INT(reg_push(s, &env, "nope:t", true, NULL, NULL, NULL, &err),
                 CR_E_NOT_FOUND);
    CHECK_EQ_STR(err.msg, "model \"nope:t\" not found");
    CHECK_EQ_INT(reg_push(s, &env, "../x", true, NULL, NULL, NULL, &err), CR_E_INVALID);
    reg_store_destroy(&s);
    fake_stop(&f);
}

/* ---- the server runs pulls beside its loop ---- */

typedef struct cap {
    int n_progress, n_ok, n_error, n_tags;
    char last_error[256];
} cap_t;

static cr_status_t cap_fn(void *ctx, const msg_t *m)
{
    cap_t *c = ctx;
    if (m->type == MSG_progress)
        c->n_progress++;
    else if (m->type == MSG_ok)
        c->n_ok++;
    else if (m->type == MSG_tags_reply)
        c->n_tags++;
    else if (m->type == MSG_error) {
        c->n_error++;
        snprintf(c->last_error, sizeof c->last_error, "%s", m->u.error.message);
    }
    return CR_OK;
}

static void test_server_job(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_blob(&f, 100, 16);
    fake_add_blob(&f, 8000, 17);
    fake_set_manifest(&f);
    f.delay_ms = 300;
    snprintf(model_g, sizeof model_g, "127.0.0.1:%d/library/m:t", f.port);
    nftw(tmp_g, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    cr_err_t err;
    reg_server_t *srv = reg_server_new(tmp_g, &err);
    CHECK(srv != NULL);
    reg_dl_opts_t o;
    small_parts(&o);
    reg_server_set_dl_opts(srv, &o);
    msg_t req;
    msg_init(&req, MSG_pull, "job-1");
    req.u.pull.model = model_g;
    req.u.pull.has_model = true;
    req.u.pull.insecure = true;
    req.u.pull.has_insecure = true;
    cap_t c = {0};
    reg_server_handle(srv, &req, cap_fn, &c);
    CHECK_EQ_INT(c.n_ok + c.n_error + c.n_progress, 0); /* returned at once */
    CHECK_EQ_INT((int)reg_server_jobs(srv), 1);
    /* tags is answered while the pull runs */
    msg_t tags;
    msg_init(&tags, MSG_tags, "tags-1");
    reg_server_handle(srv, &tags, cap_fn, &c);
    CHECK_EQ_INT(c.n_tags, 1);
    CHECK_EQ_INT(c.n_ok, 0);
    for (int i = 0; i < 400 && !c.n_ok && !c.n_error; i++)
        reg_server_pump(srv, 50, cap_fn, &c);
    CHECK_EQ_INT(c.n_ok, 1);
    CHECK(c.n_progress >= 4);
    for (int i = 0; i < 1000 && reg_server_jobs(srv); i++) /* up to 10 s */
        usleep(10000);
    CHECK_EQ_INT((int)reg_server_jobs(srv), 0);

    /* A canceled pull ends with an error. */
    /* each blob body waits 1 s: the cancel sent 100 ms in comes well
     * before the pull could finish, on a slow machine too */
    f.delay_ms = 1000;
    free(f.blobs[1].data);
    f.n_blobs = 1;
    fake_add_blob(&f, 40000, 18);
    fake_set_manifest(&f);
    msg_init(&req, MSG_pull, "job-2");
    req.u.pull.model = model_g;
    req.u.pull.has_model = true;
    req.u.pull.insecure = true;
    req.u.pull.has_insecure = true;
    memset(&c, 0, sizeof c);
    reg_server_handle(srv, &req, cap_fn, &c);
    usleep(100 * 1000);
    msg_t cancel;
    msg_init(&cancel, MSG_cancel, "job-2");
    reg_server_handle(srv, &cancel, cap_fn, &c);
    for (int i = 0; i < 400 && !c.n_ok && !c.n_error; i++)
        reg_server_pump(srv, 50, cap_fn, &c);
    CHECK_EQ_INT(c.n_error, 1);
    CHECK_EQ_STR(c.last_error, "canceled");
    reg_server_destroy(&srv);
    fake_stop(&f);
}

int main(void)
{
    snprintf(tmp_g, sizeof tmp_g, "/tmp/corral-test-pull-%d", (int)getpid());
    test_helpers();
    test_hostile_names();
    test_startup_prune_partials();
    test_pull_ok();
    test_manifest_404();
    test_unreachable();
    test_blob_removed_midway();
    test_bad_manifest();
    test_digest_mismatch();
    test_truncated_then_resume();
    test_bearer_and_cdn_redirect();
    test_shared_download();
    test_shared_cancel();
    test_basic_credentials();
    test_range_ignored();
    test_write_failure();
    test_prune_after_replace();
    test_push();
    test_server_job();
    nftw(tmp_g, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_finish("test_registry_pull");
}
