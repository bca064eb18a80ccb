/* test_pack_cache.c: packed weights kept on disk (pack_cache.h).
 *
 * A model file in a store-like folder (blobs/sha256-<hex>) is loaded on a
 * fresh CPU backend each time, as a new runner would. The first load
 * builds packed/sha256-<hex>.pack; the next maps every packed tensor from
 * it; both give exactly the logits of a load without any cache (the same
 * packed bytes: compared bit for bit). A cache that does not match its
 * model (a corrupted record, a truncated file, a changed source file) is
 * never used: the load packs in memory, still exact, and the cache is
 * rebuilt. An unusable folder only means no cache. Over Q4_0, Q8_0 and a
 * Q4_K_M-like mix (Q4_K with Q6_K), every packed type. */
#include "lib/prelude.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/gguf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/pack_cache.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"

#define N_TOK 5

static char root_g[256];
static char blob_g[512];  /* root/blobs/sha256-<hex> */
static char cache_g[512]; /* root/packed/sha256-<hex>.pack */

/* Loads the model on a fresh backend, evaluates N_TOK tokens and leaves
 * their last logits in out[0..n_vocab). False on any error. */
static bool run(float *out, int *n_vocab)
{
    cr_err_t err = {0};
    be_backend_t *be = NULL;
    rn_model_t *m = NULL;
    rn_ctx_t *c = NULL;
    bool ok = false;
    if (be_cpu_new(2, &be, &err) || rn_model_load(blob_g, be, &m, &err)) {
        CHECK_MSG(false, "load: %s", err.msg);
        goto out;
    }
    rn_ctx_opts_t o = {.n_ctx = 16, .n_batch = 8};
    if (rn_ctx_new(m, &o, &c, &err)) {
        CHECK_MSG(false, "ctx: %s", err.msg);
        goto out;
    }
    int32_t toks[N_TOK] = {1, 7, 42, 3, 99};
    if (rn_ctx_eval(c, toks, N_TOK, 0, NULL, &err)) {
        CHECK_MSG(false, "eval: %s", err.msg);
        goto out;
    }
    *n_vocab = rn_ctx_n_vocab(c);
    memcpy(out, rn_ctx_logits(c), (size_t)*n_vocab * sizeof *out);
    ok = true;
out:
    rn_ctx_destroy(&c);
    rn_model_destroy(&m);
    if (be)
        be->ops->destroy(&be); /* waits for the cache's publication */
    return ok;
}

static int64_t mapped(void)
{
    int64_t n;
    be_pack_cache_counts(&n, NULL);
    return n;
}

static int64_t built(void)
{
    int64_t n;
    be_pack_cache_counts(NULL, &n);
    return n;
}

static bool exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

/* Only the published file in packed/: no temporary left behind. */
static int packed_entries(void)
{
    char dir[600];
    snprintf(dir, sizeof dir, "%s/packed", root_g);
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void same(const float *a, const float *b, int n, const char *what)
{
    CHECK_MSG(!memcmp(a, b, (size_t)n * sizeof *a), "%s: logits differ", what);
}

static void one_model(const char *label, rn_synth_opts_t *so)
{
    cr_err_t err = {0};
    unsetenv("CORRAL_PACK_CACHE");
    if (rn_synth_write(so, blob_g, &err)) {
        CHECK_MSG(false, "%s: synth: %s", label, err.msg);
        return;
    }
    unlink(cache_g);
    int nv = 0;
    float *ref = malloc(sizeof(float) * 65536), *got = malloc(sizeof(float) * 65536);

    /* no cache at all: the reference */
    setenv("CORRAL_PACK_CACHE", "off", 1);
    CHECK(run(ref, &nv));
    CHECK_MSG(!exists(cache_g), "%s: 'off' wrote a cache", label);
    unsetenv("CORRAL_PACK_CACHE");

    /* first load builds it */
    int64_t b0 = built(), m0 = mapped();
    CHECK(run(got, &nv));
    int64_t n_packed = built() - b0;
    CHECK_MSG(n_packed > 0, "%s: nothing was packed into a cache", label);
    CHECK_EQ_INT(mapped() - m0, 0);
    CHECK_MSG(exists(cache_g), "%s: no cache file %s", label, cache_g);
    CHECK_EQ_INT(packed_entries(), 1);
    same(ref, got, nv, label);

    /* second load maps every packed tensor from it */
    b0 = built(), m0 = mapped();
    CHECK(run(got, &nv));
    CHECK_EQ_INT(mapped() - m0, n_packed);
    CHECK_EQ_INT(built() - b0, 0);
    same(ref, got, nv, label);

    /* a corrupted record (the first tensor's name): not used, removed,
     * and the next load builds it again */
    int fd = open(cache_g, O_WRONLY);
    CHECK(fd >= 0 && pwrite(fd, "X", 1, 4096 + 8 + 4 + 4 + 8 + 8 + 8) == 1);
    close(fd);
    b0 = built(), m0 = mapped();
    CHECK(run(got, &nv));
    CHECK_EQ_INT(mapped() - m0, 0);
    same(ref, got, nv, label);
    CHECK_MSG(!exists(cache_g), "%s: a corrupted cache was kept", label);
    CHECK(run(got, &nv));
    CHECK_EQ_INT(built() - b0, n_packed);
    same(ref, got, nv, label);

    /* truncated in the middle of a tensor: never mapped past its end (that
     * would be a SIGBUS); the tensors before it may be, the result is
     * exact */
    struct stat sb;
    CHECK(stat(cache_g, &sb) == 0 && truncate(cache_g, sb.st_size - 4096 * 2 - 7) == 0);
    CHECK(run(got, &nv));
    same(ref, got, nv, label);
    CHECK_MSG(!exists(cache_g), "%s: a truncated cache was kept", label);

    /* the source file changed (mtime): the old cache is not used */
    CHECK(run(got, &nv)); /* rebuild */
    struct timespec ts[2] = {{0, UTIME_NOW}, {12345, 0}};
    CHECK(utimensat(AT_FDCWD, blob_g, ts, 0) == 0);
    b0 = built(), m0 = mapped();
    CHECK(run(got, &nv));
    CHECK_EQ_INT(mapped() - m0, 0);
    CHECK_EQ_INT(built() - b0, n_packed);
    same(ref, got, nv, label);
    CHECK_EQ_INT(packed_entries(), 1);

    /* a folder that cannot be made: no cache, same answer */
    setenv("CORRAL_PACK_CACHE", "/proc/corral-no-such-dir", 1);
    b0 = built(), m0 = mapped();
    CHECK(run(got, &nv));
    CHECK_EQ_INT(built() - b0, 0);
    CHECK_EQ_INT(mapped() - m0, 0);
    same(ref, got, nv, label);
    unsetenv("CORRAL_PACK_CACHE");
    free(ref);
    free(got);
}

static void paths(void)
{
    char buf[512];
    setenv("CORRAL_PACK_CACHE", "off", 1);
    CHECK(!be_pack_cache_path(blob_g, buf, sizeof buf));
    unsetenv("CORRAL_PACK_CACHE");
    CHECK(be_pack_cache_path(blob_g, buf, sizeof buf));
    CHECK_EQ_STR(buf, cache_g);
    /* a node's blob cache: sha256-<hex> files in one folder */
    CHECK(be_pack_cache_path("/var/cache/corral/sha256-" "0123456789abcdef0123456789abcdef"
                             "0123456789abcdef0123456789abcdef", buf, sizeof buf));
    CHECK_EQ_STR(buf, "/var/cache/corral/packed/sha256-0123456789abcdef0123456789abcdef"
                      "0123456789abcdef0123456789abcdef.pack");
    /* any other file: only with a folder named */
    CHECK(!be_pack_cache_path("/tmp/model.gguf", buf, sizeof buf));
    CHECK(!be_pack_cache_path("/x/blobs/sha256-../../etc", buf, sizeof buf));
}

int main(void)
{
    snprintf(root_g, sizeof root_g, "/tmp/corral-packcache-XXXXXX");
    if (!mkdtemp(root_g)) {
        CHECK(!"mkdtemp");
        return check_finish("pack_cache");
    }
    char dir[300];
    snprintf(dir, sizeof dir, "%s/blobs", root_g);
    mkdir(dir, 0755);
    const char *hex = "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12";
    snprintf(blob_g, sizeof blob_g, "%s/sha256-%s", dir, hex);
    snprintf(cache_g, sizeof cache_g, "%s/packed/sha256-%s.pack", root_g, hex);
    paths();

    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.type = CR_TYPE_Q4_0;
    one_model("q4_0", &so);
    rn_synth_defaults(&so);
    so.type = CR_TYPE_Q8_0;
    one_model("q8_0", &so);
    rn_synth_defaults(&so); /* K-quants need rows of 256 */
    so.type = CR_TYPE_Q4_K;
    so.mix = true;
    so.mix_type = CR_TYPE_Q6_K;
    so.dim = 256;
    so.ffn = 512;
    one_model("q4_k_m", &so);

    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root_g);
    CHECK(system(cmd) == 0);
    return check_finish("pack_cache");
}
