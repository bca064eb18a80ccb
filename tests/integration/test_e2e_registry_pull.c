/* test_e2e_registry_pull.c: push and pull against a real OCI registry,
 * Debian's `docker-registry` (the CNCF distribution registry), run on a
 * private loopback port with its storage in the test's temp dir.
 *
 * Creates a model from a synthetic GGUF, pushes it, deletes it locally,
 * pulls it back and compares the manifest digest; pulls a model sharing
 * its weights with an installed one and checks (in the registry's log)
 * that the weights were not fetched again; pulls a larger model while
 * killing the corral-registry service mid-transfer, then resumes and
 * checks that fewer bytes than the blob were served the second time;
 * tampers with the registry's stored bytes and expects `digest mismatch`.
 * Then the Bearer token flow through the service against a fake registry
 * of our own (tests/unit/fake_oci.h). Prints the pull throughput of the larger blob against plain curl
 * fetching the same blob from the same registry (median of 3 each).
 * Skips (77) when /usr/bin/docker-registry is not installed. */
#include "lib/prelude.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/fake_oci.h"

#define DOCKER_REGISTRY "/usr/bin/docker-registry"

static e2e_t T;
static pid_t reg_pid_g = -1;
static int reg_port_g;
static char reg_dir_g[1200], reg_log_g[1300], reg_cfg_g[1300];
static char remote_g[64]; /* 127.0.0.1:PORT */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static size_t discard(char *p, size_t s, size_t n, void *u)
{
    CR_UNUSED(p);
    CR_UNUSED(u);
    return s * n;
}

/* GET url into nowhere; HTTP status (0 on failure) and seconds taken. */
static long curl_get(const char *url, double *secs)
{
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    double t0 = now_s();
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (secs)
        *secs = now_s() - t0;
    curl_easy_cleanup(c);
    return code;
}

/* GET url into a file (what a pull must do too), seconds taken. */
static long curl_get_file(const char *url, const char *path, double *secs)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return 0;
    CURL *c = curl_easy_init();
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, f);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 120L);
    double t0 = now_s();
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    fclose(f);
    *secs = now_s() - t0;
    curl_easy_cleanup(c);
    unlink(path);
    return code;
}

static bool registry_start(void)
{
    char url[128];
    reg_pid_g = fork();
    if (reg_pid_g == 0) {
        int fd = open(reg_log_g, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(DOCKER_REGISTRY, DOCKER_REGISTRY, "serve", reg_cfg_g, (char *)NULL);
        _exit(127);
    }
    snprintf(url, sizeof url, "http://%s/v2/", remote_g);
    for (int i = 0; i < 300; i++) { /* up to 30 s */
        if (curl_get(url, NULL) == 200)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

static void registry_stop(void)
{
    if (reg_pid_g > 0) {
        kill(reg_pid_g, SIGTERM);
        for (int i = 0; i < 50; i++) {
            if (waitpid(reg_pid_g, NULL, WNOHANG) == reg_pid_g) {
                reg_pid_g = -1;
                return;
            }
            usleep(100 * 1000);
        }
        kill(reg_pid_g, SIGKILL);
        waitpid(reg_pid_g, NULL, 0);
        reg_pid_g = -1;
    }
}

static bool registry_setup(void)
{
    reg_port_g = e2e_free_port();
    snprintf(remote_g, sizeof remote_g, "127.0.0.1:%d", reg_port_g);
    snprintf(reg_dir_g, sizeof reg_dir_g, "%s/oci", T.tmp);
    mkdir(reg_dir_g, 0755);
    snprintf(reg_log_g, sizeof reg_log_g, "%s/registry.log", reg_dir_g);
    snprintf(reg_cfg_g, sizeof reg_cfg_g, "%s/config.yml", reg_dir_g);
    char cfg[4096];
    snprintf(cfg, sizeof cfg,
             "version: 0.1\n"
             "log:\n  level: info\n  formatter: text\n"
             "storage:\n  filesystem:\n    rootdirectory: %s/data\n"
             "  delete:\n    enabled: true\n"
             "http:\n  addr: %s\n  secret: corral-test-secret\n",
             reg_dir_g, remote_g);
    return e2e_write_file(reg_cfg_g, cfg) && registry_start();
}

/* ---- helpers over the corral API ---- */

static json_t *post_stream(const char *path, const char *body, long *status)
{
    e2e_resp_t r = e2e_http(&T, "POST", path, body, NULL, NULL);
    *status = r.status;
    json_t *j = e2e_ndjson(r.body ? r.body : "");
    e2e_resp_free(&r);
    return j;
}

static const char *jstr(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool has_status(json_t *lines, const char *prefix)
{
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l) {
        const char *s = jstr(l, "status");
        if (s && !strncmp(s, prefix, strlen(prefix)))
            return true;
    }
    return false;
}

static const char *last_error(json_t *lines)
{
    size_t n = json_array_size(lines);
    return n ? jstr(json_array_get(lines, n - 1), "error") : NULL;
}

/* The manifest digest of name in /api/tags, or "" (into out). */
static void tag_digest(const char *name, char *out, size_t cap)
{
    out[0] = '\0';
    e2e_resp_t r = e2e_http(&T, "GET", "/api/tags", NULL, NULL, NULL);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(j, "models"), i, m) {
        const char *n = jstr(m, "name");
        if (n && !strcmp(n, name))
            snprintf(out, cap, "%s", jstr(m, "digest") ? jstr(m, "digest") : "");
    }
    json_decref(j);
    e2e_resp_free(&r);
}

static long api_delete(const char *name)
{
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"%s\"}", name);
    e2e_resp_t r = e2e_http(&T, "DELETE", "/api/delete", body, NULL, NULL);
    long st = r.status;
    e2e_resp_free(&r);
    return st;
}

static long api_copy(const char *from, const char *to)
{
    char body[512];
    snprintf(body, sizeof body, "{\"source\":\"%s\",\"destination\":\"%s\"}", from, to);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/copy", body, NULL, NULL);
    long st = r.status;
    e2e_resp_free(&r);
    return st;
}

static json_t *pull(const char *name, long *status)
{
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"insecure\":true}", name);
    return post_stream("/api/pull", body, status);
}

static json_t *push(const char *name, long *status)
{
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"insecure\":true}", name);
    return post_stream("/api/push", body, status);
}

static bool create_from_gguf(const char *file, const char *name,
                             const char *gguf_args[], const char *extra)
{
    char gguf[1300], mf[1300], text[2000];
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", T.tmp, file);
    snprintf(mf, sizeof mf, "%s/%s.Modelfile", T.tmp, file);
    const char *a[16] = {"--out", gguf};
    int k = 2;
    for (int i = 0; gguf_args && gguf_args[i] && k < 15; i++)
        a[k++] = gguf_args[i];
    a[k] = NULL;
    int rc = e2e_run_bin(&T, "corral-gguf-synth", a[0], a[1], a[2], a[3], a[4],
                         a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12],
                         a[13], a[14], NULL);
    if (rc != 0)
        return false;
    snprintf(text, sizeof text, "FROM %s\n%s", gguf, extra ? extra : "");
    if (!e2e_write_file(mf, text))
        return false;
    char *out = NULL, *progress = NULL;
    rc = e2e_cli_err(&T, NULL, &out, &progress, "create", name, "-f", mf, NULL);
    bool ok = rc == 0 && progress && strstr(progress, "success");
    if (!ok)
        fprintf(stderr, "create %s: %d %s\n", name, rc, progress ? progress : "");
    free(out);
    free(progress);
    unlink(gguf);
    return ok;
}

/* Bytes the registry sent for GETs of blob hex (any repository) in its
 * log from byte offset `from`. */
static long long served_bytes(const char *hex, long from, int *gets)
{
    FILE *f = fopen(reg_log_g, "r");
    long long sum = 0;
    *gets = 0;
    if (!f)
        return -1;
    fseek(f, from, SEEK_SET);
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "http.request.method=GET") || !strstr(line, hex))
            continue;
        const char *w = strstr(line, "http.response.written=");
        if (w) {
            sum += atoll(w + 22);
            (*gets)++;
        }
    }
    fclose(f);
    return sum;
}

static long log_size(void)
{
    struct stat sb;
    return stat(reg_log_g, &sb) == 0 ? (long)sb.st_size : 0;
}

/* ---- cases ---- */

static char small_name_g[128], layer_hex_g[65];

static void test_push_pull_roundtrip(void)
{
    const char *args[] = {"--seed", "3", NULL};
    CHECK(create_from_gguf("base", "base", args, NULL));
    snprintf(small_name_g, sizeof small_name_g, "%s/library/m:t", remote_g);
    CHECK_EQ_INT(api_copy("base", small_name_g), 200);
    char before[80];
    tag_digest(small_name_g, before, sizeof before);
    CHECK(strlen(before) == 64);

    long st;
    json_t *lines = push(small_name_g, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(jstr(json_array_get(lines, 0), "status"), "retrieving manifest");
    CHECK(has_status(lines, "pushing "));
    CHECK(has_status(lines, "pushing manifest"));
    CHECK_EQ_STR(jstr(json_array_get(lines, json_array_size(lines) - 1), "status"),
                 "success");
    /* the model layer's digest, for the later cases */
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l) {
        const char *d = jstr(l, "digest");
        json_t *tot = json_object_get(l, "total");
        if (d && strlen(d) == 71 && json_integer_value(tot) > 100000)
            snprintf(layer_hex_g, sizeof layer_hex_g, "%s", d + 7);
    }
    json_decref(lines);
    CHECK(strlen(layer_hex_g) == 64);
    /* A second push finds every blob in place. */
    lines = push(small_name_g, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(has_status(lines, "success"));
    json_decref(lines);

    CHECK_EQ_INT(api_delete(small_name_g), 200);
    CHECK_EQ_INT(api_delete("base"), 200);
    char gone[80];
    tag_digest(small_name_g, gone, sizeof gone);
    CHECK_EQ_STR(gone, "");

    lines = pull(small_name_g, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(jstr(json_array_get(lines, 0), "status"), "pulling manifest");
    CHECK(has_status(lines, "pulling "));
    CHECK(has_status(lines, "verifying sha256 digest"));
    CHECK(has_status(lines, "writing manifest"));
    CHECK_EQ_STR(jstr(json_array_get(lines, json_array_size(lines) - 1), "status"),
                 "success");
    json_decref(lines);
    char after[80];
    tag_digest(small_name_g, after, sizeof after);
    CHECK_EQ_STR(after, before);

    /* The CLI pulls too (and prints Ollama's statuses). */
    char *out = NULL;
    int rc = e2e_cli(&T, NULL, &out, "pull", "--insecure", small_name_g, NULL);
    CHECK_MSG(rc == 0, "corral pull exited %d: %s", rc, out ? out : "");
    free(out);

    /* A tag the registry lacks. */
    char missing[160];
    snprintf(missing, sizeof missing,
             "{\"model\":\"%s/library/m:nope\",\"insecure\":true,\"stream\":false}",
             remote_g);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/pull", missing, NULL, NULL);
    CHECK_EQ_INT(r.status, 404);
    CHECK(r.body && strstr(r.body, "pull model manifest: file does not exist"));
    e2e_resp_free(&r);
    /* http without insecure */
    snprintf(missing, sizeof missing, "{\"model\":\"%s/library/m:t\",\"stream\":false}",
             remote_g);
    r = e2e_http(&T, "POST", "/api/pull", missing, NULL, NULL);
    CHECK(r.status >= 400);
    e2e_resp_free(&r);
}

static void test_shared_base(void)
{
    /* m2 = m:t plus a system prompt: same weights layer. */
    char mf[1300], text[600], m2[160];
    snprintf(mf, sizeof mf, "%s/m2.Modelfile", T.tmp);
    snprintf(text, sizeof text, "FROM %s\nSYSTEM \"\"\"shared base\"\"\"\n",
             small_name_g);
    CHECK(e2e_write_file(mf, text));
    snprintf(m2, sizeof m2, "%s/library/m2:t", remote_g);
    char *out = NULL;
    int rc = e2e_cli(&T, NULL, &out, "create", m2, "-f", mf, NULL);
    CHECK_MSG(rc == 0, "create m2: %s", out ? out : "");
    free(out);
    long st;
    json_t *lines = push(m2, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(has_status(lines, "success"));
    json_decref(lines);
    CHECK_EQ_INT(api_delete(m2), 200);

    long mark = log_size();
    lines = pull(m2, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(has_status(lines, "success"));
    json_decref(lines);
    int gets = 0;
    long long bytes = served_bytes(layer_hex_g, mark, &gets);
    CHECK_MSG(gets == 0 && bytes == 0, "the shared layer was fetched again: %d GETs, %lld bytes",
              gets, bytes);
}

/* Aborts the pull's HTTP stream after killing corral-registry once the
 * big blob is partly in. */
typedef struct killer {
    const char *hex;
    bool killed;
    long long completed, total;
    char buf[65536];
    size_t len;
} killer_t;

static bool on_pull_data(void *ctx, const char *data, size_t len)
{
    killer_t *k = ctx;
    if (k->killed)
        return false;
    if (k->len + len >= sizeof k->buf)
        k->len = 0;
    memcpy(k->buf + k->len, data, len);
    k->len += len;
    k->buf[k->len] = '\0';
    char *nl;
    while ((nl = strchr(k->buf, '\n'))) {
        *nl = '\0';
        json_t *j = json_loads(k->buf, 0, NULL);
        const char *d = j ? jstr(j, "digest") : NULL;
        if (d && strstr(d, k->hex)) {
            k->completed = json_integer_value(json_object_get(j, "completed"));
            k->total = json_integer_value(json_object_get(j, "total"));
        }
        json_decref(j);
        size_t rest = k->len - (size_t)(nl + 1 - k->buf);
        memmove(k->buf, nl + 1, rest + 1);
        k->len = rest;
        if (k->total && k->completed > 0) {
            /* Mid-pull by construction, not by the pull being slow (a fast
             * machine moves the 270 MB in a fraction of a second): the
             * remote registry is stopped (SIGSTOP) once bytes arrive, and
             * let run in 20 ms steps only until a part's state is saved
             * (every 2 MB of a part at most), so the pull is killed with
             * state on disk and most of the blob still to come. */
            kill(reg_pid_g, SIGSTOP);
            for (int step = 0; step < 500 && !e2e_blob_part_completed(&T, k->hex); step++) {
                kill(reg_pid_g, SIGCONT);
                usleep(20 * 1000);
                kill(reg_pid_g, SIGSTOP);
                usleep(50 * 1000); /* what was under way lands */
            }
            pid_t pids[4];
            size_t n = e2e_find_procs(&T, "corral-registry", pids, 4);
            for (size_t i = 0; i < n; i++)
                kill(pids[i], SIGKILL);
            kill(reg_pid_g, SIGCONT);
            k->killed = n > 0;
            return false;
        }
    }
    return true;
}

static bool wait_registry_back(void)
{
    for (int i = 0; i < 600; i++) { /* up to 60 s: serve restarts it */
        e2e_resp_t r = e2e_http(&T, "GET", "/api/tags", NULL, NULL, NULL);
        long st = r.status;
        e2e_resp_free(&r);
        if (st == 200)
            return true;
        usleep(100 * 1000);
    }
    return false;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void test_big_resume_and_speed(void)
{
    /* ~270 MB of f32 weights. */
    const char *args[] = {"--seed", "5", "--dim", "1024", "--layers", "4",
                          "--ffn", "4096", NULL};
    char big[160];
    snprintf(big, sizeof big, "%s/library/big:t", remote_g);
    CHECK(create_from_gguf("big", big, args, NULL));
    long st;
    json_t *lines = push(big, &st);
    CHECK_EQ_INT(st, 200);
    CHECK(has_status(lines, "success"));
    char hex[65] = "";
    long long total = 0;
    size_t i;
    json_t *l;
    json_array_foreach(lines, i, l) {
        const char *d = jstr(l, "digest");
        long long t = json_integer_value(json_object_get(l, "total"));
        if (d && strlen(d) == 71 && t > total) {
            total = t;
            snprintf(hex, sizeof hex, "%s", d + 7);
        }
    }
    json_decref(lines);
    CHECK(total > 200 * 1000 * 1000);
    char want[80];
    tag_digest(big, want, sizeof want);

    /* Throughput: plain curl vs pull, median of 3 each. */
    char url[300];
    snprintf(url, sizeof url, "http://%s/v2/library/big/blobs/sha256:%s", remote_g, hex);
    double tc[3], tp[3], tf[3];
    char fpath[1300];
    snprintf(fpath, sizeof fpath, "%s/curl.out", T.tmp);
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(curl_get(url, &tc[k]), 200);
        CHECK_EQ_INT(curl_get_file(url, fpath, &tf[k]), 200);
    }
    char body[300];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"insecure\":true,\"stream\":false}", big);
    for (int k = 0; k < 3; k++) {
        CHECK_EQ_INT(api_delete(big), 200);
        double t0 = now_s();
        e2e_resp_t r = e2e_http(&T, "POST", "/api/pull", body, NULL, NULL);
        tp[k] = now_s() - t0;
        CHECK_EQ_INT(r.status, 200);
        e2e_resp_free(&r);
    }
    qsort(tc, 3, sizeof tc[0], cmp_d);
    qsort(tp, 3, sizeof tp[0], cmp_d);
    qsort(tf, 3, sizeof tf[0], cmp_d);
    fprintf(stderr, "THROUGHPUT curl into a file: median %.3f s (%.1f MB/s)\n",
            tf[1], (double)total / tf[1] / 1e6);
    fprintf(stderr,
            "THROUGHPUT blob %lld bytes: curl median %.3f s (%.1f MB/s), "
            "pull median %.3f s (%.1f MB/s), pull/curl rate %.0f%%\n",
            total, tc[1], (double)total / tc[1] / 1e6, tp[1],
            (double)total / tp[1] / 1e6, 100.0 * tc[1] / tp[1]);

    /* Kill corral-registry mid-pull, let serve restart it, pull again. */
    CHECK_EQ_INT(api_delete(big), 200);
    killer_t k = {.hex = hex};
    char sbody[300];
    snprintf(sbody, sizeof sbody, "{\"model\":\"%s\",\"insecure\":true}", big);
    long mark = log_size();
    e2e_resp_t r = e2e_http(&T, "POST", "/api/pull", sbody, on_pull_data, &k);
    e2e_resp_free(&r);
    CHECK_MSG(k.killed, "the pull ended before corral-registry was killed "
                        "(completed %lld of %lld)", k.completed, k.total);
    usleep(300 * 1000);
    int gets = 0;
    long long first = served_bytes(hex, mark, &gets);
    CHECK(wait_registry_back());
    long long saved = e2e_blob_part_completed(&T, hex);
    CHECK_MSG(saved > 0, "no part state survived the kill");
    CHECK_MSG(saved < total / 2, "the kill came late: %lld of %lld bytes in place", saved,
              total);
    char gone[80];
    tag_digest(big, gone, sizeof gone);
    CHECK_EQ_STR(gone, ""); /* a killed pull lists no model */
    mark = log_size();
    lines = pull(big, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(has_status(lines, "success"), "resume failed: %s",
              last_error(lines) ? last_error(lines) : "?");
    json_decref(lines);
    long long second = served_bytes(hex, mark, &gets);
    fprintf(stderr, "RESUME first pull served %lld bytes before the kill, "
                    "%lld were saved as in place, the resumed pull fetched %lld "
                    "of %lld\n", first, saved, second, total);
    /* Exactly the bytes the state did not account for, plus the one-byte
     * GET that resolves the blob URL. */
    CHECK_MSG(second == total - saved + 1, "resumed pull fetched %lld of %lld bytes, "
              "expected %lld", second, total, total - saved + 1);
    char got[80];
    tag_digest(big, got, sizeof got);
    CHECK_EQ_STR(got, want);
    CHECK_EQ_INT(api_delete(big), 200);
}

static void test_tampered_blob(void)
{
    /* Nothing local may hold the layer, so the pull must fetch it. */
    char m2[160];
    snprintf(m2, sizeof m2, "%s/library/m2:t", remote_g);
    api_delete(m2);
    CHECK_EQ_INT(api_delete(small_name_g), 200);
    char path[1600];
    snprintf(path, sizeof path, "%s/data/docker/registry/v2/blobs/sha256/%.2s/%s/data",
             reg_dir_g, layer_hex_g, layer_hex_g);
    int fd = open(path, O_RDWR);
    CHECK_MSG(fd >= 0, "no stored blob at %s", path);
    if (fd < 0)
        return;
    unsigned char b;
    CHECK(pread(fd, &b, 1, 1000) == 1);
    b ^= 0x5a;
    CHECK(pwrite(fd, &b, 1, 1000) == 1);
    long st;
    json_t *lines = pull(small_name_g, &st);
    const char *e = last_error(lines);
    CHECK_MSG(e && strstr(e, "digest mismatch, file must be downloaded again: want sha256:"),
              "got %s", e ? e : "(no error)");
    json_decref(lines);
    char gone[80];
    tag_digest(small_name_g, gone, sizeof gone);
    CHECK_EQ_STR(gone, "");
    /* stream:false carries the error with a status code */
    char body[300];
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"insecure\":true,\"stream\":false}",
             small_name_g);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/pull", body, NULL, NULL);
    CHECK(r.status >= 400);
    CHECK(r.body && strstr(r.body, "digest mismatch"));
    e2e_resp_free(&r);
    /* restore, and it pulls again */
    b ^= 0x5a;
    CHECK(pwrite(fd, &b, 1, 1000) == 1);
    close(fd);
    lines = pull(small_name_g, &st);
    CHECK(has_status(lines, "success"));
    json_decref(lines);
}

/* The Bearer flow through the whole service: a fake registry of our own
 * that answers 401 with a token challenge (the real one would need JWT
 * certificates to do so). */
static void test_bearer_via_service(void)
{
    fake_t f;
    fake_start(&f);
    fake_add_config(&f, "llama");
    fake_add_blob(&f, 50000, 77);
    fake_set_manifest(&f);
    f.require_token = true;
    char name[128], body[300];
    snprintf(name, sizeof name, "127.0.0.1:%d/library/m:t", f.port);
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"insecure\":true}", name);
    long st;
    json_t *lines = post_stream("/api/pull", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_MSG(has_status(lines, "success"), "bearer pull: %s",
              last_error(lines) ? last_error(lines) : "?");
    json_decref(lines);
    CHECK(atomic_load(&f.token_hits) >= 1);
    CHECK(strstr(f.last_token_query, "service=fake-registry") != NULL);
    char d[80];
    tag_digest(name, d, sizeof d);
    CHECK(strlen(d) == 64);
    /* A refused token: 401 with Ollama's message. */
    CHECK_EQ_INT(api_delete(name), 200);
    f.token_refuse = true;
    snprintf(body, sizeof body, "{\"model\":\"%s\",\"insecure\":true,\"stream\":false}",
             name);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/pull", body, NULL, NULL);
    CHECK_EQ_INT(r.status, 401);
    CHECK(r.body && strstr(r.body, "pull model manifest: unauthorized: access denied"));
    e2e_resp_free(&r);
    fake_stop(&f);
}

int main(void)
{
    if (access(DOCKER_REGISTRY, X_OK) != 0)
        return check_skip("e2e_registry_pull", DOCKER_REGISTRY " is not installed");
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_registry_pull");
    }
    if (!registry_setup()) {
        CHECK_MSG(false, "docker-registry did not start (log: %s)", reg_log_g);
    } else {
        test_push_pull_roundtrip();
        test_shared_base();
        test_big_resume_and_speed();
        test_tampered_blob();
    }
    test_bearer_via_service();
    {
        /* the registry's own timing of each big download */
        char cmd[1300];
        snprintf(cmd, sizeof cmd, "grep ' new) in ' %s/serve.log | grep -v ' 0 new' | tail -n 30 >&2", T.tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "(no timings)\n");
    }
    if (check_failed_g) {
        char cmd[3000];
        snprintf(cmd, sizeof cmd,
                 "tail -n 40 %s/serve.log >&2; tail -n 10 %s >&2", T.tmp, reg_log_g);
        if (system(cmd) != 0)
            fprintf(stderr, "(no logs)\n");
    }
    registry_stop();
    e2e_stop(&T);
    return check_finish("e2e_registry_pull");
}
