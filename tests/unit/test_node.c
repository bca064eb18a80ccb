/* test_node.c: the node agent's blob cache and fetch (services/node/blobs),
 * the relay framing and CURVE key files (proto/relay). */
#include "lib/prelude.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "proto/relay.h"
#include "services/node/agent.h"
#include "services/node/blobs.h"
#include "tests/unit/check.h"

/* sha256("hello world") */
#define HELLO_DIGEST \
    "sha256-b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"

static char tmp_g[256];

static bool exists(const char *path)
{
    return access(path, F_OK) == 0;
}

static void test_digest_names(void)
{
    CHECK(nd_digest_valid(HELLO_DIGEST));
    CHECK(!nd_digest_valid("sha256-B94D27B9934D3E08A52E52D7DA7DABFAC484EFE37A5380EE9088F7ACE2EFCDE9"));
    CHECK(!nd_digest_valid("sha256-b94d"));
    CHECK(!nd_digest_valid("sha256-../../../../etc/passwd"));
    CHECK(!nd_digest_valid(NULL));
    nd_fetch_t *f = NULL;
    cr_err_t err;
    CHECK_EQ_INT(nd_fetch_new(tmp_g, "../x", &f, &err), CR_E_INVALID);
}

/* Two chunks, verified, renamed into place, found afterwards. */
static void test_fetch_whole(void)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/c1", tmp_g);
    nd_fetch_t *f = NULL;
    cr_err_t err;
    CHECK_EQ_INT(nd_fetch_new(dir, HELLO_DIGEST, &f, &err), CR_OK);
    CHECK_EQ_INT((int)nd_fetch_offset(f), 0);
    bool done = true;
    CHECK_EQ_INT(nd_fetch_feed(f, 0, 11, "hello ", 6, &done, &err), CR_OK);
    CHECK(!done);
    CHECK_EQ_INT((int)nd_fetch_offset(f), 6);
    CHECK_EQ_INT(nd_fetch_feed(f, 6, 11, "world", 5, &done, &err), CR_OK);
    CHECK(done);
    char path[512], found[512];
    snprintf(path, sizeof path, "%s", nd_fetch_path(f));
    nd_fetch_destroy(&f);
    CHECK(exists(path));
    char partial[600];
    snprintf(partial, sizeof partial, "%s-partial", path);
    CHECK(!exists(partial));
    CHECK(nd_blob_find(dir, NULL, HELLO_DIGEST, found, sizeof found));
    CHECK_EQ_STR(found, path);
}

/* A fetch that stopped halfway resumes from the partial file. */
static void test_fetch_resume(void)
{
    char dir[300];
    snprintf(dir, sizeof dir, "%s/c2", tmp_g);
    nd_fetch_t *f = NULL;
    cr_err_t err;
    bool done;
    CHECK_EQ_INT(nd_fetch_new(dir, HELLO_DIGEST, &f, &err), CR_OK);
    CHECK_EQ_INT(nd_fetch_feed(f, 0, 11, "hello w", 7, &done, &err), CR_OK);
    nd_fetch_destroy(&f); /* the node stops */
    CHECK_EQ_INT(nd_fetch_new(dir, HELLO_DIGEST, &f, &err), CR_OK);
    CHECK_EQ_INT((int)nd_fetch_offset(f), 7);
    CHECK_EQ_INT(nd_fetch_feed(f, 7, 11, "orld", 4, &done, &err), CR_OK);
    CHECK(done);
    nd_fetch_destroy(&f);
    char found[512];
    CHECK(nd_blob_find(dir, NULL, HELLO_DIGEST, found, sizeof found));
}

/* Wrong bytes never land in the cache; protocol slips are errors. */
static void test_fetch_bad(void)
{
    char dir[300], found[512];
    snprintf(dir, sizeof dir, "%s/c3", tmp_g);
    nd_fetch_t *f = NULL;
    cr_err_t err;
    bool done;
    CHECK_EQ_INT(nd_fetch_new(dir, HELLO_DIGEST, &f, &err), CR_OK);
    CHECK_EQ_INT(nd_fetch_feed(f, 0, 11, "HELLO WORLD", 11, &done, &err),
                 CR_E_CORRUPT);
    CHECK(strstr(err.msg, "hash to") != NULL);
    nd_fetch_destroy(&f);
    CHECK(!nd_blob_find(dir, NULL, HELLO_DIGEST, found, sizeof found));
    /* The partial file went with it: a new fetch starts at 0. */
    CHECK_EQ_INT(nd_fetch_new(dir, HELLO_DIGEST, &f, &err), CR_OK);
    CHECK_EQ_INT((int)nd_fetch_offset(f), 0);
    CHECK_EQ_INT(nd_fetch_feed(f, 3, 11, "lo", 2, &done, &err), CR_E_PROTO);
    CHECK_EQ_INT(nd_fetch_feed(f, 0, 11, "", 0, &done, &err), CR_E_TRUNCATED);
    CHECK_EQ_INT(nd_fetch_feed(f, 0, 11, "hello world!", 12, &done, &err),
                 CR_E_PROTO);
    CHECK_EQ_INT(nd_fetch_feed(f, 0, 11, "hel", 3, &done, &err), CR_OK);
    CHECK_EQ_INT(nd_fetch_feed(f, 3, 12, "lo", 2, &done, &err), CR_E_PROTO);
    nd_fetch_destroy(&f);
    /* A shared store is read when the cache lacks the blob. */
    char store[300], blobs[320], path[400];
    snprintf(store, sizeof store, "%s/store", tmp_g);
    snprintf(blobs, sizeof blobs, "%s/blobs", store);
    mkdir(store, 0700);
    mkdir(blobs, 0700);
    snprintf(path, sizeof path, "%s/%s", blobs, HELLO_DIGEST);
    FILE *fp = fopen(path, "w");
    CHECK(fp != NULL);
    if (fp)
        fclose(fp);
    CHECK(nd_blob_find(dir, store, HELLO_DIGEST, found, sizeof found));
    CHECK_EQ_STR(found, path);
}

static void test_relay_frames(void)
{
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    zsock_t *dealer = zsock_new(ZMQ_DEALER);
    CHECK(zsock_bind(router, "inproc://relay-test") == 0);
    CHECK(zsock_connect(dealer, "inproc://relay-test") == 0);
    cr_err_t err;
    msg_t m;
    msg_init(&m, MSG_node_spawn, "q1");
    m.u.node_spawn.runner_id = (char *)"r1-2";
    m.u.node_spawn.has_runner_id = true;
    CHECK_EQ_INT(bus_relay_send_msg(dealer, NULL, "r1-2", &m, &err), CR_OK);
    zframe_t *peer = NULL, *payload = NULL;
    char to[BUS_RELAY_TO_MAX + 1];
    CHECK_EQ_INT(bus_relay_recv(router, &peer, to, sizeof to, &payload, &err),
                 CR_OK);
    CHECK_EQ_STR(to, "r1-2");
    msg_t got;
    CHECK_EQ_INT(msg_decode(zframe_data(payload), zframe_size(payload), &got,
                            &err),
                 CR_OK);
    CHECK_EQ_INT(got.type, MSG_node_spawn);
    CHECK_EQ_STR(got.u.node_spawn.runner_id, "r1-2");
    msg_clear(&got);
    zframe_destroy(&payload);
    /* Back to the dealer, addressed to the node itself. */
    CHECK_EQ_INT(bus_relay_send(router, peer, "", "xyz", 3, &err), CR_OK);
    CHECK_EQ_INT(bus_relay_recv(dealer, NULL, to, sizeof to, &payload, &err),
                 CR_OK);
    CHECK_EQ_STR(to, "");
    CHECK_EQ_INT((int)zframe_size(payload), 3);
    zframe_destroy(&payload);
    /* A bare frame (no `to`) is a protocol error, and a ROUTER send
     * without a peer a programming error. */
    zstr_send(dealer, "just one");
    CHECK_EQ_INT(bus_relay_recv(router, NULL, to, sizeof to, &payload, &err),
                 CR_E_PROTO);
    CHECK_EQ_INT(bus_relay_send(router, NULL, "", "x", 1, &err), CR_E_INTERNAL);
    zframe_destroy(&peer);
    zsock_destroy(&dealer);
    zsock_destroy(&router);
}

static void test_keygen(void)
{
    if (!bus_curve_available()) {
        fprintf(stderr, "libzmq without CURVE: keygen not tested\n");
        return;
    }
    char dir[300], pub[400], sec[420];
    snprintf(dir, sizeof dir, "%s/keys", tmp_g);
    cr_err_t err;
    char txt[41];
    CHECK_EQ_INT(bus_curve_keygen(dir, "gpu1", txt, &err), CR_OK);
    CHECK_EQ_INT((int)strlen(txt), 40);
    snprintf(pub, sizeof pub, "%s/gpu1", dir);
    snprintf(sec, sizeof sec, "%s/gpu1_secret", dir);
    struct stat sb;
    CHECK(stat(sec, &sb) == 0 && (sb.st_mode & 0777) == 0600);
    CHECK(stat(pub, &sb) == 0 && (sb.st_mode & 0777) == 0644);
    CHECK_EQ_INT(bus_curve_keygen(dir, "gpu1", NULL, &err), CR_E_EXISTS);
    CHECK_EQ_INT(bus_curve_keygen(dir, "../evil", NULL, &err), CR_E_INVALID);
    CHECK_EQ_INT(bus_curve_keygen(dir, "", NULL, &err), CR_E_INVALID);
    /* A client needs the secret half; the public file alone will not do. */
    zsock_t *s = zsock_new(ZMQ_DEALER);
    CHECK_EQ_INT(bus_curve_client(s, pub, pub, &err), CR_OK);
    char pubonly[400];
    snprintf(pubonly, sizeof pubonly, "%s/pubonly", dir);
    CHECK(link(pub, pubonly) == 0);
    CHECK_EQ_INT(bus_curve_client(s, pubonly, pub, &err), CR_E_NOT_FOUND);
    CHECK_EQ_INT(bus_curve_server(s, "/nonexistent/cert", &err),
                 CR_E_NOT_FOUND);
    zsock_destroy(&s);
}

static bool copy_file(const char *from, const char *to)
{
    char buf[4096];
    FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
    size_t n = 0;
    if (in && out)
        n = fread(buf, 1, sizeof buf, in);
    bool ok = in && out && n > 0 && fwrite(buf, 1, n, out) == n;
    if (in)
        fclose(in);
    if (out && fclose(out))
        ok = false;
    return ok;
}

/* Waits up to ms for a message on router; true if one came. */
static bool router_hears(zsock_t *router, int ms)
{
    zpoller_t *p = zpoller_new(router, NULL);
    bool got = zpoller_wait(p, ms) != NULL;
    zpoller_destroy(&p);
    if (got) {
        zmsg_t *m = zmsg_recv(router);
        zmsg_destroy(&m);
    }
    return got;
}

static zsock_t *curve_dealer(const char *cert, const char *server_cert,
                             const char *endpoint)
{
    cr_err_t err;
    zsock_t *d = zsock_new(ZMQ_DEALER);
    zsock_set_linger(d, 0);
    zsock_set_sndtimeo(d, 0);
    CHECK_EQ_INT(bus_curve_client(d, cert, server_cert, &err), CR_OK);
    CHECK(zsock_connect(d, "%s", endpoint) == 0);
    zstr_send(d, "hello");
    return d;
}

/* Key rotation: the keys dir's stamp sees additions, removals and
 * rewrites (never _secret files), and a reloaded ZAP handler admits a key
 * it refused before, over a real CURVE handshake. */
static void test_keys_reload(void)
{
    if (!bus_curve_available())
        return;
    char keys[300], adm[300], path[400], dst[400], srv[400];
    snprintf(keys, sizeof keys, "%s/rk", tmp_g);
    snprintf(adm, sizeof adm, "%s/admitted", tmp_g);
    cr_err_t err;
    CHECK_EQ_INT(bus_curve_keygen(keys, "srv", NULL, &err), CR_OK);
    CHECK_EQ_INT(bus_curve_keygen(keys, "nd", NULL, &err), CR_OK);
    bus_keys_stamp_t s0, s1, s2;
    CHECK_EQ_INT(bus_curve_keys_stamp(adm, &s0, &err), CR_E_NOT_FOUND);
    CHECK(mkdir(adm, 0700) == 0);
    CHECK_EQ_INT(bus_curve_keys_stamp(adm, &s0, &err), CR_OK);
    CHECK_EQ_INT((int)s0.n_keys, 0);

    zactor_t *auth = NULL;
    CHECK_EQ_INT(bus_curve_auth_new(adm, &auth, &err), CR_OK);
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    zsock_set_linger(router, 0);
    snprintf(srv, sizeof srv, "%s/srv", keys);
    CHECK_EQ_INT(bus_curve_server(router, srv, &err), CR_OK);
    int port = zsock_bind(router, "tcp://127.0.0.1:*");
    CHECK(port > 0);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    snprintf(path, sizeof path, "%s/nd", keys);
    zsock_t *d = curve_dealer(path, srv, ep);
    CHECK_MSG(!router_hears(router, 300), "an unlisted key got through");
    zsock_destroy(&d);

    /* List it: the stamp moves; a secret file beside it is no key. */
    snprintf(dst, sizeof dst, "%s/nd", adm);
    CHECK(copy_file(path, dst));
    snprintf(dst, sizeof dst, "%s/nd_secret", adm);
    CHECK(copy_file(path, dst));
    CHECK_EQ_INT(bus_curve_keys_stamp(adm, &s1, &err), CR_OK);
    CHECK_EQ_INT((int)s1.n_keys, 1);
    CHECK(memcmp(&s0, &s1, sizeof s0) != 0);
    bus_curve_auth_reload(auth, adm);
    d = curve_dealer(path, srv, ep);
    CHECK_MSG(router_hears(router, 3000), "a listed key was refused");
    zsock_destroy(&d);

    /* Rewritten with the same bytes (same count and size): still seen. */
    usleep(20 * 1000); /* past the kernel's coarse timestamp tick */
    snprintf(dst, sizeof dst, "%s/nd", adm);
    CHECK(copy_file(path, dst));
    CHECK_EQ_INT(bus_curve_keys_stamp(adm, &s2, &err), CR_OK);
    CHECK(s2.n_keys == s1.n_keys && s2.bytes == s1.bytes);
    CHECK(s2.changed_ns > s1.changed_ns);

    /* Removed: refused again after a reload. */
    CHECK(unlink(dst) == 0);
    CHECK_EQ_INT(bus_curve_keys_stamp(adm, &s2, &err), CR_OK);
    CHECK_EQ_INT((int)s2.n_keys, 0);
    bus_curve_auth_reload(auth, adm);
    d = curve_dealer(path, srv, ep);
    CHECK_MSG(!router_hears(router, 300), "a removed key got through");
    zsock_destroy(&d);
    zsock_destroy(&router);
    zactor_destroy(&auth);
}

/* A fake cached blob of `bytes` bytes last used at second t. */
static void put_blob(const char *blobs, char tag, int64_t bytes, time_t t)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sha256-", blobs);
    size_t n = strlen(path);
    memset(path + n, tag, 64);
    path[n + 64] = '\0';
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    for (int64_t i = 0; f && i < bytes; i++)
        fputc('x', f);
    if (f)
        fclose(f);
    struct timespec ts[2] = {{t, 0}, {t, 0}};
    CHECK(utimensat(AT_FDCWD, path, ts, 0) == 0);
}

static bool has_blob(const char *blobs, char tag)
{
    char path[512];
    snprintf(path, sizeof path, "%s/sha256-", blobs);
    size_t n = strlen(path);
    memset(path + n, tag, 64);
    path[n + 64] = '\0';
    return exists(path);
}

static void digest_of(char tag, char *out)
{
    snprintf(out, ND_DIGEST_MAX, "sha256-");
    memset(out + 7, tag, 64);
    out[71] = '\0';
}

/* CORRAL_NODE_CACHE_MAX: least recently used first, kept blobs (runners
 * use them) stay, partial files are not blobs, a cache hit counts as a
 * use; the setting is parsed as a size and a bad one is refused. */
static void test_cache_prune(void)
{
    char cache[300], blobs[320];
    snprintf(cache, sizeof cache, "%s/bounded", tmp_g);
    snprintf(blobs, sizeof blobs, "%s/blobs", cache);
    nd_prune_t pr;
    cr_err_t err;
    /* No cache yet: nothing to do. */
    CHECK_EQ_INT(nd_cache_prune(cache, 10, NULL, 0, &pr, &err), CR_OK);
    CHECK_EQ_INT((int)pr.total_bytes, 0);
    CHECK(mkdir(cache, 0700) == 0 && mkdir(blobs, 0700) == 0);
    put_blob(blobs, 'a', 1000, 1000000); /* oldest, but a runner uses it */
    put_blob(blobs, 'b', 1000, 2000000);
    put_blob(blobs, 'c', 1000, 3000000);
    put_blob(blobs, 'd', 1000, 4000000);
    char partial[400];
    snprintf(partial, sizeof partial, "%s/sha256-%064d-partial", blobs, 0);
    FILE *f = fopen(partial, "wb");
    CHECK(f != NULL);
    if (f) {
        fputs("half a blob", f);
        fclose(f);
    }
    char keep_a[ND_DIGEST_MAX];
    digest_of('a', keep_a);
    const char *keep[] = {keep_a};
    /* runners' packed copies (pack_cache.h) go with their blob */
    char packed_a[700], packed_b[700], dig[ND_DIGEST_MAX];
    snprintf(packed_a, sizeof packed_a, "%s/packed", cache);
    CHECK(mkdir(packed_a, 0700) == 0);
    snprintf(packed_a, sizeof packed_a, "%s/packed/%s.pack", cache, keep_a);
    digest_of('b', dig);
    snprintf(packed_b, sizeof packed_b, "%s/packed/%s.pack", cache, dig);
    fclose(fopen(packed_a, "w"));
    fclose(fopen(packed_b, "w"));
    CHECK_EQ_INT(nd_cache_prune(cache, 2500, keep, 1, &pr, &err), CR_OK);
    CHECK(exists(packed_a) && !exists(packed_b));
    CHECK_EQ_INT(pr.n_removed, 2);
    CHECK_EQ_INT((int)pr.removed_bytes, 2000);
    CHECK_EQ_INT((int)pr.total_bytes, 2000);
    CHECK(has_blob(blobs, 'a') && !has_blob(blobs, 'b') &&
          !has_blob(blobs, 'c') && has_blob(blobs, 'd'));
    CHECK(exists(partial));

    /* A cache hit on a makes it the most recently used: d and e go. */
    put_blob(blobs, 'e', 1000, 5000000);
    char path[512];
    CHECK(nd_blob_find(cache, NULL, keep_a, path, sizeof path));
    CHECK_EQ_INT(nd_cache_prune(cache, 1500, NULL, 0, &pr, &err), CR_OK);
    CHECK_EQ_INT(pr.n_removed, 2);
    CHECK(has_blob(blobs, 'a') && !has_blob(blobs, 'd') &&
          !has_blob(blobs, 'e'));

    /* Only kept blobs left over the bound: they stay. */
    CHECK_EQ_INT(nd_cache_prune(cache, 10, keep, 1, &pr, &err), CR_OK);
    CHECK_EQ_INT(pr.n_removed, 0);
    CHECK_EQ_INT((int)pr.total_bytes, 1000);
    CHECK(has_blob(blobs, 'a'));

    /* The setting: a size with a unit; a bad one names the variable. */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = '\0';
    setenv("CORRAL_NODE_SCHEDULER", "tcp://127.0.0.1:1", 1);
    setenv("CORRAL_NODE_CERT", "/nonexistent/c", 1);
    setenv("CORRAL_NODE_SERVER_CERT", "/nonexistent/s", 1);
    setenv("CORRAL_RUNNER_BIN", self, 1);
    setenv("CORRAL_RUNTIME_DIR", tmp_g, 1);
    setenv("CORRAL_GPU_INVENTORY", "none", 1);
    setenv("CORRAL_NODE_CACHE_MAX", "20GB", 1);
    nd_config_t *cfg = calloc(1, sizeof *cfg);
    cr_status_t st = nd_config_from_env(cfg, &err);
    CHECK_MSG(st == CR_OK, "node config: %s", err.msg);
    CHECK(cfg->cache_max_bytes == 20000000000LL);
    unsetenv("CORRAL_NODE_CACHE_MAX");
    CHECK_EQ_INT(nd_config_from_env(cfg, &err), CR_OK);
    CHECK_EQ_INT((int)cfg->cache_max_bytes, 0); /* unlimited */
    setenv("CORRAL_NODE_CACHE_MAX", "lots", 1);
    CHECK_EQ_INT(nd_config_from_env(cfg, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "CORRAL_NODE_CACHE_MAX") != NULL);
    free(cfg);
    static const char *const vars[] = {
        "CORRAL_NODE_SCHEDULER", "CORRAL_NODE_CERT", "CORRAL_NODE_SERVER_CERT",
        "CORRAL_RUNNER_BIN", "CORRAL_RUNTIME_DIR", "CORRAL_GPU_INVENTORY",
        "CORRAL_NODE_CACHE_MAX"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
}

int main(void)
{
    zsys_init();
    zsys_set_logstream(NULL);
    snprintf(tmp_g, sizeof tmp_g, "/tmp/corral-test-node.XXXXXX");
    if (!mkdtemp(tmp_g))
        return 1;
    test_digest_names();
    test_fetch_whole();
    test_fetch_resume();
    test_fetch_bad();
    test_relay_frames();
    test_keygen();
    test_keys_reload();
    test_cache_prune();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_g);
    if (system(cmd)) {
    }
    return check_finish("node");
}
