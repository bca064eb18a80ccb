/* test_e2e_faults.c: SIGKILL one service at a random point of a random
 * operation, round after round, and check that nothing is lost or left.
 *
 * Each round a seeded PRNG picks an operation (chat, create, pull, push,
 * copy, delete), a victim (gateway, scheduler, registry or a runner) and
 * a kill moment (after the Nth line of the operation's stream, once a
 * partial or temp file is in blobs/, or N ms after the request went out).
 * The victim is SIGKILLed by PID at that moment (only processes under this
 * test's own `corral serve`), serve restarts it, and then:
 *   - the client got an answer: a success or an error (an error line or
 *     an HTTP error); a cut connection only when the gateway died; none
 *     hangs;
 *   - the operation, run again, succeeds (a pull resumes, a create runs);
 *   - `corral doctor` finds no corrupt blob, no corrupt or dangling
 *     manifest, no partial or temp file;
 *   - every model listed before is listed still (but the one a delete
 *     removed) and answers a one-token generate;
 *   - every runner process is one the scheduler lists (none orphaned,
 *     none a zombie) and no quantize child is left.
 * At the end serve is stopped (no runner may outlive it) and started
 * again on the same store: doctor clean, every model answers.
 *
 * CORRAL_FAULTS_SEED=N replays a run (the seed is printed first);
 * CORRAL_FAULTS_ROUNDS=N (default 100) is how many rounds must kill
 * something (a round whose operation ended before its kill moment does
 * not count). CORRAL_FAULTS_OPS (e.g. "create,pull") and
 * CORRAL_FAULTS_VICTIMS (e.g. "registry,runner"; the scheduler is
 * "schedule", as /proc cuts its name) narrow the choice, to chase one
 * fault; CORRAL_FAULTS_VERBOSE=1 prints every round. Pull and push use
 * Debian's docker-registry on a private
 * port; without it those two are left out (said on stderr). */
#include "lib/prelude.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

#define DOCKER_REGISTRY "/usr/bin/docker-registry"
#define CALL_TIMEOUT_S 120L /* a client still waiting after this hung */
#define BACK_TIMEOUT_MS 60000
#define QUICK_S 6.0 /* serve counts a death within 5 s of a start as quick */

static e2e_t T;
static pid_t reg_pid_g = -1;
static char remote_g[64]; /* the docker-registry, 127.0.0.1:PORT */
static char pm_g[160];    /* the model pulled from it */
static char base_hex_g[65];

/* ---- time, PRNG ---- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static uint64_t rng_g;

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng_g += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static int rnd_below(int n)
{
    return (int)(rnd() % (uint64_t)n);
}

/* ---- processes ---- */

typedef enum { V_GATEWAY, V_SCHEDULER, V_REGISTRY, V_RUNNER, N_VICTIMS } victim_t;
/* Process names as /proc shows them (cut at 15 characters). */
static const char *const victim_comm[N_VICTIMS] = {"corral-gateway", "corral-schedule",
                                                   "corral-registry", "corral-runner"};

/* argv[1] of pid is verb. */
static bool argv1_is(pid_t pid, const char *verb)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    size_t a0 = strlen(buf);
    return a0 + 1 < n && !strcmp(buf + a0 + 1, verb);
}

/* Processes under serve named comm (for corral-runner, whose argv[1] is
 * verb: "serve" for a model's runner, "quantize" for a create's). A
 * service (verb NULL) is serve's own child: a child a service has forked
 * keeps the service's name until it execs (the registry's check-model and
 * quantize children), and killing that one instead left the service
 * running and the round waiting for it to come back (seed 11, round 113
 * in session 11's CI run). */
static size_t procs(const char *comm, const char *verb, pid_t *out, size_t cap)
{
    pid_t all[64];
    size_t n = e2e_find_procs(&T, comm, all, 64), k = 0;
    for (size_t i = 0; i < n && k < cap; i++)
        if (verb ? argv1_is(all[i], verb) : e2e_parent_of(all[i], NULL, 0) == T.serve_pid)
            out[k++] = all[i];
    return k;
}

static pid_t service_pid(victim_t v)
{
    pid_t p[4];
    return procs(victim_comm[v], NULL, p, 4) ? p[0] : 0;
}

/* ---- HTTP calls run by a client thread ---- */

typedef struct call {
    char method[8];
    char path[256];
    char *body; /* owned; NULL for none */
    size_t body_len;
    bool stream; /* NDJSON progress or chunks */
    /* results */
    CURLcode rc;
    long status;
    char *out; /* owned */
    size_t len;
} call_t;

typedef struct client {
    call_t calls[3];
    int n_calls;
    atomic_int lines; /* NDJSON lines received so far, all calls */
    atomic_bool done;
    int ran;          /* calls that ran (the first that failed is the last) */
    pthread_t th;
} client_t;

typedef struct sink {
    call_t *c;
    client_t *cl;
} sink_t;

static size_t on_write(char *p, size_t size, size_t n, void *ud)
{
    sink_t *s = ud;
    size_t len = size * n;
    char *b = realloc(s->c->out, s->c->len + len + 1);
    if (!b)
        return 0;
    memcpy(b + s->c->len, p, len);
    s->c->out = b;
    s->c->len += len;
    b[s->c->len] = '\0';
    for (size_t i = 0; i < len; i++)
        if (p[i] == '\n')
            atomic_fetch_add(&s->cl->lines, 1);
    return len;
}

static void call_run(client_t *cl, call_t *c)
{
    CURL *h = curl_easy_init();
    char url[400];
    snprintf(url, sizeof url, "http://%s%s", T.host, c->path);
    sink_t s = {c, cl};
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, c->method);
    struct curl_slist *hdr = NULL;
    if (c->body) {
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, c->body);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->body_len);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, CALL_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    c->rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &c->status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(h);
}

static void call_set(call_t *c, const char *method, const char *path, char *body,
                     size_t body_len, bool stream)
{
    memset(c, 0, sizeof *c);
    snprintf(c->method, sizeof c->method, "%s", method);
    snprintf(c->path, sizeof c->path, "%s", path);
    c->body = body;
    c->body_len = body ? (body_len ? body_len : strlen(body)) : 0;
    c->stream = stream;
}

static void call_free(call_t *c)
{
    free(c->body);
    free(c->out);
    c->body = c->out = NULL;
}

typedef enum { OUT_OK, OUT_ERROR, OUT_CUT, OUT_BAD } outcome_t;
static const char *const outcome_name[] = {"success", "error", "connection cut", "BAD"};

/* What the client of c saw; why says it for all but OUT_OK. */
static outcome_t judge(const call_t *c, char *why, size_t cap)
{
    why[0] = '\0';
    if (c->rc == CURLE_OPERATION_TIMEDOUT) {
        snprintf(why, cap, "no answer in %ld s (hung)", CALL_TIMEOUT_S);
        return OUT_BAD;
    }
    if (c->rc != CURLE_OK) {
        snprintf(why, cap, "%s", curl_easy_strerror(c->rc));
        return OUT_CUT;
    }
    if (c->status >= 400) {
        json_t *j = json_loads(c->out ? c->out : "", 0, NULL);
        const char *e = json_string_value(json_object_get(j, "error"));
        snprintf(why, cap, "HTTP %ld: %.200s", c->status, e ? e : "(no error field)");
        json_decref(j);
        return e ? OUT_ERROR : OUT_BAD;
    }
    if (!c->stream)
        return OUT_OK;
    json_t *lines = e2e_ndjson(c->out ? c->out : "");
    size_t n = json_array_size(lines), i;
    json_t *l;
    outcome_t o = OUT_BAD;
    json_array_foreach(lines, i, l) {
        const char *e = json_string_value(json_object_get(l, "error"));
        if (e) {
            snprintf(why, cap, "%.200s", e);
            o = OUT_ERROR;
            break;
        }
    }
    if (o == OUT_BAD && n) {
        json_t *last = json_array_get(lines, n - 1);
        const char *st = json_string_value(json_object_get(last, "status"));
        if ((st && !strcmp(st, "success")) || json_is_true(json_object_get(last, "done")))
            o = OUT_OK;
    }
    if (o == OUT_BAD)
        snprintf(why, cap, "the stream (%zu lines) ended with neither success nor an error: "
                 "%.200s", n, c->out ? c->out : "");
    json_decref(lines);
    return o;
}

static void *client_main(void *ud)
{
    client_t *cl = ud;
    for (int i = 0; i < cl->n_calls; i++) {
        call_run(cl, &cl->calls[i]);
        cl->ran = i + 1;
        char why[512];
        if (judge(&cl->calls[i], why, sizeof why) != OUT_OK)
            break;
    }
    atomic_store(&cl->done, true);
    return NULL;
}

/* ---- plain (unfaulted) API calls ---- */

static long api(const char *method, const char *path, const char *body, char **out)
{
    e2e_resp_t r = e2e_http(&T, method, path, body, NULL, NULL);
    long st = r.status;
    if (out)
        *out = r.body;
    else
        e2e_resp_free(&r);
    return st;
}

static long api_quiet(const char *method, const char *path, const char *fmt, ...)
{
    char body[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    char *out = NULL;
    long st = api(method, path, body, &out);
    if (st != 200)
        fprintf(stderr, "faults: %s %s %s -> %ld %.300s\n", method, path, body, st,
                out ? out : "");
    free(out);
    return st;
}

/* Names /api/tags lists (caller frees the array); NULL when it fails. */
static json_t *listed(void)
{
    char *out = NULL;
    long st = api("GET", "/api/tags", NULL, &out);
    json_t *j = st == 200 ? json_loads(out, 0, NULL) : NULL;
    free(out);
    if (!j)
        return NULL;
    json_t *names = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(json_object_get(j, "models"), i, m)
        json_array_append(names, json_object_get(m, "name"));
    json_decref(j);
    return names;
}

static bool in_list(json_t *names, const char *name)
{
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n)
        if (!strcmp(json_string_value(n), name))
            return true;
    return false;
}

static bool is_listed(const char *name)
{
    json_t *names = listed();
    bool yes = names && in_list(names, name);
    json_decref(names);
    return yes;
}

/* Models /api/ps lists, or -1. */
static int ps_count(void)
{
    char *out = NULL;
    long st = api("GET", "/api/ps", NULL, &out);
    json_t *j = st == 200 ? json_loads(out, 0, NULL) : NULL;
    free(out);
    int n = j ? (int)json_array_size(json_object_get(j, "models")) : -1;
    json_decref(j);
    return n;
}

/* ---- the docker-registry ---- */

static bool registry_start(void)
{
    char dir[1100], cfg_path[1200], log_path[1200], cfg[2048], url[128];
    snprintf(remote_g, sizeof remote_g, "127.0.0.1:%d", e2e_free_port());
    snprintf(dir, sizeof dir, "%s/oci", T.tmp);
    mkdir(dir, 0755);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.yml", dir);
    snprintf(log_path, sizeof log_path, "%s/registry.log", dir);
    snprintf(cfg, sizeof cfg,
             "version: 0.1\nlog:\n  level: warn\n  formatter: text\n"
             "storage:\n  filesystem:\n    rootdirectory: %s/data\n"
             "http:\n  addr: %s\n  secret: corral-test-secret\n",
             dir, remote_g);
    if (!e2e_write_file(cfg_path, cfg))
        return false;
    reg_pid_g = fork();
    if (reg_pid_g == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(DOCKER_REGISTRY, DOCKER_REGISTRY, "serve", cfg_path, (char *)NULL);
        _exit(127);
    }
    snprintf(url, sizeof url, "http://%s/v2/", remote_g);
    for (int i = 0; i < 300; i++) { /* up to 30 s */
        CURL *c = curl_easy_init();
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        long code = 0;
        if (curl_easy_perform(c) == CURLE_OK)
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(c);
        if (code == 200)
            return true;
        sleep_ms(100);
    }
    return false;
}

static void registry_stop(void)
{
    if (reg_pid_g <= 0)
        return;
    kill(reg_pid_g, SIGTERM);
    for (int i = 0; i < 50; i++) {
        if (waitpid(reg_pid_g, NULL, WNOHANG) == reg_pid_g) {
            reg_pid_g = -1;
            return;
        }
        sleep_ms(100);
    }
    kill(reg_pid_g, SIGKILL);
    waitpid(reg_pid_g, NULL, 0);
    reg_pid_g = -1;
}

/* ---- a round ---- */

typedef enum { OP_CHAT, OP_CREATE, OP_PULL, OP_PUSH, OP_COPY, OP_DELETE, N_OPS } op_t;
static const char *const op_name[N_OPS] = {"chat", "create", "pull", "push", "copy", "delete"};

typedef enum { AT_LINE, AT_BLOB_FILE, AT_MS } moment_t;

typedef struct round {
    int no;
    op_t op;
    victim_t victim;
    moment_t at;
    int n;              /* the line or ms of the kill moment */
    int variant;        /* per op */
    char target[200];   /* the model the op makes or removes */
    bool killed;
    pid_t killed_pid;
} round_t;

/* Per service: when the test saw its process start, and kills in a row
 * that came soon after a start (serve gives up on five). */
static double seen_start_g[N_VICTIMS];
static int quick_kills_g[N_VICTIMS];

static char *fmt_body(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

/* Reads a file into a buffer (caller frees); NULL on failure. */
static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    FILE *m = open_memstream(&buf, len);
    char tmp[65536];
    size_t n;
    while (m && (n = fread(tmp, 1, sizeof tmp, f)) > 0)
        fwrite(tmp, 1, n, m);
    if (m)
        fclose(m);
    fclose(f);
    return buf;
}

static bool sha256_file(const char *path, char hex[65])
{
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", path);
    FILE *p = popen(cmd, "r");
    if (!p)
        return false;
    bool ok = fscanf(p, "%64s", hex) == 1;
    pclose(p);
    return ok && strlen(hex) == 64;
}

/* A fresh GGUF for an upload (new bytes each round): its path and digest. */
static bool fresh_gguf(int no, char *path, size_t cap, char hex[65])
{
    char seed[16];
    snprintf(path, cap, "%s/up.gguf", T.tmp);
    snprintf(seed, sizeof seed, "%d", 100 + no);
    /* About 8 MB: an upload and a quantize that last long enough to be
     * cut. */
    return e2e_run_bin(&T, "corral-gguf-synth", "--out", path, "--seed", seed, "--dim", "256",
                       "--ffn", "1024", NULL) == 0 &&
           sha256_file(path, hex);
}

/* Sets up the round's op (unfaulted steps first) and fills the client's
 * calls. False when the round cannot run (said on stderr). */
static bool prepare(round_t *r, client_t *cl)
{
    char path[128];
    memset(cl, 0, sizeof *cl);
    switch (r->op) {
    case OP_CHAT:
        call_set(&cl->calls[cl->n_calls++], "POST", "/api/chat",
                 fmt_body("{\"model\":\"base\",\"messages\":[{\"role\":\"user\","
                          "\"content\":\"round %d\"}],\"options\":{\"num_predict\":40,"
                          "\"temperature\":0}}", r->no), 0, true);
        return true;
    case OP_CREATE:
        snprintf(r->target, sizeof r->target, "c%d:latest", r->no);
        if (r->variant == 0) { /* a new system layer over base */
            call_set(&cl->calls[cl->n_calls++], "POST", "/api/create",
                     fmt_body("{\"model\":\"%s\",\"from\":\"base\",\"system\":\"round %d\"}",
                              r->target, r->no), 0, true);
        } else if (r->variant == 1) { /* base's weights quantized by a child */
            call_set(&cl->calls[cl->n_calls++], "POST", "/api/create",
                     fmt_body("{\"model\":\"%s\",\"files\":{\"m.gguf\":\"sha256:%s\"},"
                              "\"quantize\":\"q8_0\"}", r->target, base_hex_g), 0, true);
        } else { /* an upload of new weights, then a quantized create from them */
            char gguf[1200], hex[65];
            if (!fresh_gguf(r->no, gguf, sizeof gguf, hex))
                return false;
            size_t len = 0;
            char *bytes = slurp(gguf, &len);
            if (!bytes)
                return false;
            snprintf(path, sizeof path, "/api/blobs/sha256:%s", hex);
            call_set(&cl->calls[cl->n_calls++], "POST", path, bytes, len, false);
            call_set(&cl->calls[cl->n_calls++], "POST", "/api/create",
                     fmt_body("{\"model\":\"%s\",\"files\":{\"m.gguf\":\"sha256:%s\"},"
                              "\"quantize\":\"q8_0\"}", r->target, hex), 0, true);
        }
        return true;
    case OP_PULL:
        snprintf(r->target, sizeof r->target, "%s", pm_g);
        if (is_listed(pm_g) &&
            api_quiet("DELETE", "/api/delete", "{\"model\":\"%s\"}", pm_g) != 200)
            return false;
        call_set(&cl->calls[cl->n_calls++], "POST", "/api/pull",
                 fmt_body("{\"model\":\"%s\",\"insecure\":true}", pm_g), 0, true);
        return true;
    case OP_PUSH:
        /* A new repository each round, so the blobs are uploaded. */
        snprintf(r->target, sizeof r->target, "%s/library/p%d:t", remote_g, r->no);
        if (api_quiet("POST", "/api/copy", "{\"source\":\"base\",\"destination\":\"%s\"}",
                      r->target) != 200)
            return false;
        call_set(&cl->calls[cl->n_calls++], "POST", "/api/push",
                 fmt_body("{\"model\":\"%s\",\"insecure\":true}", r->target), 0, true);
        return true;
    case OP_COPY:
        snprintf(r->target, sizeof r->target, "cp%d:latest", r->no);
        call_set(&cl->calls[cl->n_calls++], "POST", "/api/copy",
                 fmt_body("{\"source\":\"base\",\"destination\":\"%s\"}", r->target), 0,
                 false);
        return true;
    case OP_DELETE:
        if (r->variant == 0 && pm_g[0] && is_listed(pm_g)) { /* its blobs go too */
            snprintf(r->target, sizeof r->target, "%s", pm_g);
        } else {
            snprintf(r->target, sizeof r->target, "d%d:latest", r->no);
            if (api_quiet("POST", "/api/copy",
                          "{\"source\":\"base\",\"destination\":\"%s\"}", r->target) != 200)
                return false;
        }
        call_set(&cl->calls[cl->n_calls++], "DELETE", "/api/delete",
                 fmt_body("{\"model\":\"%s\"}", r->target), 0, false);
        return true;
    default:
        return false;
    }
}

/* A partial download or a temp file of a blob write is in blobs/. */
static bool blob_file_in_progress(void)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/models/blobs", T.tmp);
    DIR *d = opendir(dir);
    bool yes = false;
    struct dirent *e;
    while (d && !yes && (e = readdir(d)))
        yes = strstr(e->d_name, "-partial") || !strncmp(e->d_name, ".corral-tmp-", 12);
    if (d)
        closedir(d);
    return yes;
}

static bool moment_reached(const round_t *r, client_t *cl, double t0)
{
    switch (r->at) {
    case AT_LINE:
        return atomic_load(&cl->lines) >= r->n;
    case AT_BLOB_FILE:
        return blob_file_in_progress();
    case AT_MS:
        return (now_s() - t0) * 1000 >= r->n;
    }
    return false;
}

/* Kills the victim at the round's moment, unless the client is done
 * first; then waits for the client. */
static void run_faulted(round_t *r, client_t *cl)
{
    pthread_create(&cl->th, NULL, client_main, cl);
    double t0 = now_s();
    while (!atomic_load(&cl->done)) {
        if (moment_reached(r, cl, t0)) {
            pid_t pids[8];
            size_t n = procs(victim_comm[r->victim], r->victim == V_RUNNER ? "serve" : NULL,
                             pids, 8);
            if (n) {
                r->killed_pid = pids[rnd_below((int)n)];
                kill(r->killed_pid, SIGKILL);
                r->killed = true;
            } else if (r->victim != V_RUNNER || r->op != OP_CHAT) {
                break; /* nothing of that kind runs: no kill this round */
            }
            if (r->killed)
                break;
        }
        sleep_ms(1);
    }
    pthread_join(cl->th, NULL);
}

/* Waits until service v runs again (a process other than old) and the
 * gateway reaches it; records when it was seen. */
static bool wait_back(victim_t v, pid_t old)
{
    double t0 = now_s();
    while ((now_s() - t0) * 1000 < BACK_TIMEOUT_MS) {
        pid_t p = service_pid(v);
        if (p && p != old) {
            long a = api("GET", "/api/tags", NULL, NULL);
            long b = api("GET", "/api/ps", NULL, NULL);
            if (a == 200 && b == 200) {
                seen_start_g[v] = now_s();
                return true;
            }
        }
        sleep_ms(20);
    }
    return false;
}

/* Every runner process is one the scheduler lists, and no quantize child
 * is left; waits for runners that are on their way out. */
static bool runners_accounted(char *why, size_t cap)
{
    double t0 = now_s();
    size_t n = 0, q = 0;
    int ps = -1;
    while ((now_s() - t0) * 1000 < BACK_TIMEOUT_MS) {
        pid_t p[16];
        n = procs("corral-runner", "serve", p, 16);
        q = procs("corral-runner", "quantize", p, 16);
        ps = ps_count();
        if (ps >= 0 && (size_t)ps == n && q == 0)
            return true;
        sleep_ms(20);
    }
    snprintf(why, cap, "%zu runner processes, %d listed by /api/ps, %zu quantize children",
             n, ps, q);
    return false;
}

/* `corral doctor`: sound, or the findings in *report (owned); *writing
 * says whether all of them are temp files of blob writes (an upload or
 * job still open, which its timeout or end removes). */
static bool doctor_once(char **report, bool *writing)
{
    char store[1200];
    snprintf(store, sizeof store, "%s/models", T.tmp);
    char *out = NULL;
    int rc = e2e_cli(&T, NULL, &out, "doctor", "--models", store, NULL);
    /* Unused blobs are garbage, not damage: a delete or create cut short
     * leaves them (pruned once an hour old, as Ollama does). */
    bool bad = rc != 0 && rc != 1;
    *writing = !bad;
    for (const char *l = out; l && *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)CR_MIN(len, sizeof line - 1), l);
        if (len && strncmp(line, "unused blob ", 12) && !strstr(line, " problems")) {
            bad = true;
            if (!strstr(line, "(an unfinished write)"))
                *writing = false;
        }
        l = nl ? nl + 1 : l + len;
    }
    *report = out;
    return !bad;
}

/* doctor_once until the store is sound, waiting out writes still open:
 * an upload whose gateway was killed lasts until CORRAL_UPLOAD_TIMEOUT
 * (1 s here). A temp file that outlives that is a leftover. */
static bool doctor_clean(char **report)
{
    double t0 = now_s();
    for (;;) {
        bool writing = false;
        if (doctor_once(report, &writing))
            return true;
        if (!writing || now_s() - t0 > 20)
            return false;
        free(*report);
        sleep_ms(100);
    }
}

/* Every listed model answers a one-token generate. */
static bool models_run(json_t *names, char *why, size_t cap)
{
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n) {
        char body[400], *out = NULL;
        snprintf(body, sizeof body, "{\"model\":\"%s\",\"prompt\":\"hi\",\"stream\":false,"
                 "\"options\":{\"num_predict\":1}}", json_string_value(n));
        long st = api("POST", "/api/generate", body, &out);
        bool ok = st == 200 && out && strstr(out, "\"done\":true");
        if (!ok)
            snprintf(why, cap, "%s: HTTP %ld %.200s", json_string_value(n), st, out ? out : "");
        free(out);
        if (!ok)
            return false;
    }
    return true;
}

/* Runs the op again to its end and removes what the round added, so the
 * next round starts from base (+ the pulled model). */
static bool redo(const round_t *r, char *why, size_t cap)
{
    long st = 200;
    switch (r->op) {
    case OP_CHAT:
        break;
    case OP_CREATE: {
        client_t cl;
        round_t again = *r;
        if (!prepare(&again, &cl))
            return snprintf(why, cap, "cannot prepare the create again"), false;
        for (int i = 0; i < cl.n_calls; i++) {
            call_run(&cl, &cl.calls[i]);
            char w[512];
            outcome_t o = judge(&cl.calls[i], w, sizeof w);
            if (o != OUT_OK) {
                snprintf(why, cap, "the create again: %s %s", outcome_name[o], w);
                st = 0;
                break;
            }
        }
        for (int i = 0; i < cl.n_calls; i++)
            call_free(&cl.calls[i]);
        if (st && is_listed(r->target))
            st = api_quiet("DELETE", "/api/delete", "{\"model\":\"%s\"}", r->target);
        break;
    }
    case OP_PULL:
        st = api_quiet("POST", "/api/pull", "{\"model\":\"%s\",\"insecure\":true,"
                       "\"stream\":false}", pm_g);
        break;
    case OP_PUSH:
        st = api_quiet("POST", "/api/push", "{\"model\":\"%s\",\"insecure\":true,"
                       "\"stream\":false}", r->target);
        if (st == 200)
            st = api_quiet("DELETE", "/api/delete", "{\"model\":\"%s\"}", r->target);
        break;
    case OP_COPY:
        if (is_listed(r->target))
            st = api_quiet("DELETE", "/api/delete", "{\"model\":\"%s\"}", r->target);
        break;
    case OP_DELETE:
        if (is_listed(r->target))
            st = api_quiet("DELETE", "/api/delete", "{\"model\":\"%s\"}", r->target);
        break;
    default:
        break;
    }
    if (st != 200 && !why[0])
        snprintf(why, cap, "%s again answered %ld", op_name[r->op], st);
    return st == 200;
}

/* Whether name is in the comma list env (all when env is unset). */
static bool chosen(const char *env, const char *name)
{
    const char *list = getenv(env);
    if (!list || !*list)
        return true;
    size_t n = strlen(name);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

static void pick(round_t *r, bool have_oci)
{
    do
        r->op = (op_t)rnd_below(N_OPS);
    while ((!have_oci && (r->op == OP_PULL || r->op == OP_PUSH)) ||
           !chosen("CORRAL_FAULTS_OPS", op_name[r->op]));
    do
        r->victim = (victim_t)rnd_below(N_VICTIMS);
    while (!chosen("CORRAL_FAULTS_VICTIMS", victim_comm[r->victim] + 7));
    r->variant = rnd_below(3);
    switch (r->op) {
    case OP_CHAT:
        r->at = rnd_below(4) ? AT_LINE : AT_MS;
        r->n = r->at == AT_LINE ? rnd_below(25) : rnd_below(40);
        break;
    case OP_CREATE:
        r->at = (moment_t)rnd_below(3);
        r->n = r->at == AT_LINE ? rnd_below(6) : rnd_below(30);
        break;
    case OP_PULL:
        r->at = (moment_t)rnd_below(3);
        r->n = r->at == AT_LINE ? rnd_below(8) : rnd_below(60);
        break;
    case OP_PUSH:
        r->at = rnd_below(2) ? AT_LINE : AT_MS;
        r->n = r->at == AT_LINE ? rnd_below(8) : rnd_below(40);
        break;
    case OP_COPY:
    case OP_DELETE:
        r->at = AT_MS;
        r->n = rnd_below(15);
        break;
    default:
        break;
    }
}

static void fail_round(const round_t *r, uint64_t seed, const char *what, const char *detail)
{
    CHECK_MSG(false, "seed %llu round %d: %s (%s, victim %s%s, kill after %d %s): %s",
              (unsigned long long)seed, r->no, what, op_name[r->op], victim_comm[r->victim],
              r->killed ? "" : " not killed", r->n,
              r->at == AT_LINE ? "lines" : r->at == AT_MS ? "ms" : "(blob file)", detail);
}

/* One round; false when the run cannot go on. */
static bool round_run(round_t *r, uint64_t seed, json_t **names)
{
    client_t cl;
    double t_prep = now_s();
    if (!prepare(r, &cl)) {
        fail_round(r, seed, "setup", "the unfaulted steps failed");
        return false;
    }
    /* Serve gives up on a service that dies within 5 s of starting five
     * times in a row: stay below that. */
    if (r->victim != V_RUNNER && quick_kills_g[r->victim] >= 3)
        while (now_s() - seen_start_g[r->victim] < QUICK_S)
            sleep_ms(50);
    pid_t before = r->victim == V_RUNNER ? 0 : service_pid(r->victim);
    run_faulted(r, &cl);
    if (r->killed && r->victim != V_RUNNER)
        quick_kills_g[r->victim] =
            now_s() - seen_start_g[r->victim] < QUICK_S ? quick_kills_g[r->victim] + 1 : 0;

    bool go_on = true;
    char why[600];
    for (int i = 0; i < cl.ran; i++) {
        outcome_t o = judge(&cl.calls[i], why, sizeof why);
        bool cut_ok = o == OUT_CUT && r->killed && r->victim == V_GATEWAY;
        if (o == OUT_BAD || (o == OUT_CUT && !cut_ok))
            fail_round(r, seed, "the client's answer", why);
        if (getenv("CORRAL_FAULTS_VERBOSE"))
            fprintf(stderr, "  call %d %s: %s %s\n", i, cl.calls[i].path, outcome_name[o],
                    why);
    }
    for (int i = 0; i < cl.n_calls; i++)
        call_free(&cl.calls[i]);
    double t_op = now_s();
    if (r->killed && r->victim != V_RUNNER && !wait_back(r->victim, before)) {
        fail_round(r, seed, "restart", "the service did not come back");
        return false;
    }
    double t_back = now_s();
    if (getenv("CORRAL_FAULTS_DEBUG")) {
        char cmd[1300];
        snprintf(cmd, sizeof cmd, "ls -la %s/models/blobs >&2", T.tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "(ls failed)\n");
    }
    why[0] = '\0';
    if (!redo(r, why, sizeof why))
        fail_round(r, seed, "the operation again", why);

    double t_redo = now_s();
    char *report = NULL;
    if (!doctor_clean(&report))
        fail_round(r, seed, "corral doctor", report ? report : "");
    free(report);
    double t_doctor = now_s();

    json_t *now = listed();
    if (!now) {
        fail_round(r, seed, "listing", "/api/tags failed");
        return false;
    }
    size_t i;
    json_t *n;
    json_array_foreach(*names, i, n) {
        const char *name = json_string_value(n);
        bool removed = r->op == OP_DELETE && !strcmp(name, r->target);
        bool pulled_again = r->op == OP_PULL && !strcmp(name, pm_g);
        if (!removed && !pulled_again && !in_list(now, name))
            fail_round(r, seed, "a listed model is gone", name);
    }
    if (!models_run(now, why, sizeof why))
        fail_round(r, seed, "a listed model does not run", why);
    double t_run = now_s();
    if (!runners_accounted(why, sizeof why))
        fail_round(r, seed, "runner processes", why);
    if (getenv("CORRAL_FAULTS_VERBOSE")) {
        char *l = json_dumps(now, JSON_COMPACT);
        fprintf(stderr, "  listed %s\n", l);
        free(l);
    }
    if (getenv("CORRAL_FAULTS_VERBOSE"))
        fprintf(stderr, "  prepare+op %.2f s, back %.2f s, again %.2f s, doctor %.2f s, generate %zu models "
                "%.2f s, runners %.2f s\n", t_op - t_prep, t_back - t_op, t_redo - t_back,
                t_doctor - t_redo, json_array_size(now), t_run - t_doctor, now_s() - t_run);
    json_decref(*names);
    *names = now;
    return go_on && check_failed_g < 5;
}

/* No runner of ours survives serve (they are found by the runtime dir in
 * their command line: serve is gone, so they have no ancestor to match). */
static size_t stray_runners(void)
{
    DIR *d = opendir("/proc");
    size_t n = 0;
    struct dirent *e;
    char want[1200];
    snprintf(want, sizeof want, "%s/run/", T.tmp);
    while (d && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0)
            continue;
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%d/cmdline", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            if (!buf[i])
                buf[i] = ' ';
        buf[len] = '\0';
        n += strstr(buf, "corral-runner") && strstr(buf, want);
    }
    if (d)
        closedir(d);
    return n;
}

static bool setup_models(bool have_oci)
{
    if (!e2e_synth_create(&T, "base", NULL, "--seed", "1", NULL))
        return false;
    char gguf[1200];
    snprintf(gguf, sizeof gguf, "%s/base.gguf", T.tmp);
    if (!sha256_file(gguf, base_hex_g))
        return false;
    if (!have_oci)
        return true;
    /* A model with weights of its own (about 8 MB), pushed, then pulled
     * back by the rounds. */
    snprintf(pm_g, sizeof pm_g, "%s/library/pm:t", remote_g);
    char dst[1200];
    snprintf(dst, sizeof dst, "%s/pm.gguf", T.tmp);
    if (e2e_run_bin(&T, "corral-gguf-synth", "--out", dst, "--seed", "2", "--dim", "256",
                    "--ffn", "1024", NULL) != 0)
        return false;
    char mf[1300];
    snprintf(mf, sizeof mf, "FROM %s\n", dst);
    return e2e_create(&T, pm_g, mf) &&
           api_quiet("POST", "/api/push", "{\"model\":\"%s\",\"insecure\":true,"
                     "\"stream\":false}", pm_g) == 200;
}

int main(void)
{
    const char *seed_env = getenv("CORRAL_FAULTS_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10)
                             : ((uint64_t)time(NULL) << 20) ^ (uint64_t)getpid();
    const char *rounds_env = getenv("CORRAL_FAULTS_ROUNDS");
    int want = rounds_env ? atoi(rounds_env) : 100;
    if (want < 1)
        want = 100;
    rng_g = seed;
    fprintf(stderr, "faults: seed %llu (CORRAL_FAULTS_SEED=%llu replays it), %d rounds\n",
            (unsigned long long)seed, (unsigned long long)seed, want);

    /* serve restarts a killed service after 0.1 s every time, not after
     * a wait that doubles up to 30 s. */
    setenv("CORRAL_RESTART_BACKOFF", "100ms", 1);
    setenv("CORRAL_UPLOAD_TIMEOUT", "1s", 1);
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_faults");
    }
    bool have_oci = access(DOCKER_REGISTRY, X_OK) == 0;
    if (!have_oci)
        fprintf(stderr, "faults: no %s: pull and push are left out\n", DOCKER_REGISTRY);
    else if (!registry_start()) {
        CHECK_MSG(false, "docker-registry did not start");
        have_oci = false;
    }
    double t0 = now_s();
    if (!setup_models(have_oci)) {
        CHECK_MSG(false, "the models could not be set up");
    } else {
        for (int v = 0; v < N_VICTIMS; v++)
            seen_start_g[v] = t0;
        json_t *names = listed();
        int kills = 0, rounds = 0, per_op[N_OPS] = {0}, per_victim[N_VICTIMS] = {0};
        while (names && kills < want && rounds < want * 4) {
            round_t r = {.no = rounds++};
            pick(&r, have_oci);
            if (getenv("CORRAL_FAULTS_VERBOSE"))
                fprintf(stderr, "round %d: %s, %s, at %d %s v%d\n", r.no, op_name[r.op],
                        victim_comm[r.victim], r.n,
                        r.at == AT_LINE ? "lines" : r.at == AT_MS ? "ms" : "blob file",
                        r.variant);
            if (!round_run(&r, seed, &names))
                break;
            if (r.killed) {
                kills++;
                per_op[r.op]++;
                per_victim[r.victim]++;
            }
        }
        json_decref(names);
        fprintf(stderr, "faults: %d kills in %d rounds, %.1f s; by op:", kills, rounds,
                now_s() - t0);
        for (int i = 0; i < N_OPS; i++)
            fprintf(stderr, " %s %d", op_name[i], per_op[i]);
        fprintf(stderr, "; by victim:");
        for (int i = 0; i < N_VICTIMS; i++)
            fprintf(stderr, " %s %d", victim_comm[i], per_victim[i]);
        fprintf(stderr, "\n");
        CHECK_MSG(check_failed_g || kills >= want, "only %d kills in %d rounds", kills, rounds);
        /* serve never waited more than the backoff it was given. */
        size_t restarts = e2e_log_count(&T, "restarting in ");
        CHECK_MSG(restarts > 0 && restarts == e2e_log_count(&T, "restarting in 0.1s"),
                  "%zu restarts, %zu of them after 0.1 s", restarts,
                  e2e_log_count(&T, "restarting in 0.1s"));

        /* The next start: nothing of the old one is left. */
        e2e_serve_stop(&T);
        /* The scheduler stops its runners as it drains; they may still be
         * exiting when serve is gone. */
        for (double t1 = now_s(); stray_runners() && now_s() - t1 < 30;)
            sleep_ms(50);
        CHECK_MSG(stray_runners() == 0, "%zu runners outlived serve", stray_runners());
        if (!e2e_serve_start(&T)) {
            CHECK_MSG(false, "serve did not start again");
        } else {
            char *report = NULL;
            CHECK_MSG(doctor_clean(&report), "doctor after a restart: %s", report);
            free(report);
            json_t *after = listed();
            char why[600] = "";
            CHECK_MSG(after && models_run(after, why, sizeof why), "after a restart: %s", why);
            json_decref(after);
        }
    }
    if (check_failed_g) {
        fprintf(stderr, "faults: seed %llu failed; the services' log ends:\n",
                (unsigned long long)seed);
        char cmd[1400];
        snprintf(cmd, sizeof cmd, "tail -n 60 %s/serve.log >&2", T.tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "(no log)\n");
    }
    registry_stop();
    e2e_stop(&T);
    return check_finish("e2e_faults");
}
