/* overhead.c: bench-overhead, issue 18 ("the stack costs nothing visible").
 *
 *   bench-overhead [--model FILE.gguf] [--rounds N] [--tokens N]
 *                  [--requests N] [--threads N]
 *
 * Starts a private `corral serve` (tests/integration/e2e.c: temp runtime
 * dir and store, a free loopback port), creates a model from --model
 * (default: $CORRAL_TESTDATA or the build's testdata,
 * models/tiny-spm-Q8_0.gguf), and loads the same file in this process as
 * the engine alone (rn_engine, no bus, no HTTP). Each round, in turn:
 *   stream   --tokens (256) greedy tokens of a raw prompt streamed through
 *            HTTP (gateway -> scheduler -> runner and back), and the same
 *            request run by the engine alone; tokens/s of each is
 *            (pieces - 1) / (last piece - first piece), timed where the
 *            pieces arrive (the HTTP client; the engine's sink);
 *   version  --requests (100) sequential GET /api/version on one kept-
 *            alive connection, each timed request to last byte;
 *   gen1     --requests sequential stream:false generates of one token;
 *            overhead = the client's time minus the engine's own time
 *            for the same request, its prompt_eval_duration +
 *            eval_duration from the answer (the time inside the runner's
 *            forward passes); the engine alone's whole call time for the
 *            same request is printed beside it.
 * The engine alone and the stack never run at once (the engine's threads
 * would share the cores); rounds alternate which goes first, so a machine
 * that grows busier or quieter during a round favours neither. Both load
 * the model alike: num_ctx 2048, one slot (the scheduler's default
 * OLLAMA_NUM_PARALLEL), --threads threads, the same greedy sampler.
 *
 * Wall-clock rates on a shared machine move with its load, so each stream
 * is also accounted in CPU time (cpu.h: every thread's schedstat, ns):
 * per token, the time on a CPU of the engine alone (this process) against
 * the runner's, the scheduler's and the gateway's, and the time the
 * engine's and the runner's threads waited for a CPU. On a machine with as
 * many cores as --threads, the stack's extra CPU per token (runner beyond
 * the engine, plus scheduler and gateway) comes out of the compute's
 * cores: over the engine's time per token it bounds what the stream can
 * lose, whatever the load. The stream line also gives the client's rate
 * over the runner's own (eval_count / eval_duration of the same answer):
 * the delivery alone, whatever the two engines' runs differ by. A `rounds`
 * line gives each round's own HTTP / engine ratio (median, least, most):
 * not a verdict, it shows how far the machine moves one round. Verdicts
 * on the medians over rounds, each PASS or FAIL:
 *   stream   HTTP tokens/s >= 97% of the engine's;
 *   version  p99 < 1 ms;
 *   gen1     p50 overhead < 2 ms.
 * Both engines run --threads (2) threads (num_thread in the load, and in
 * the HTTP requests' options so the runner is loaded with it).
 *
 * CORRAL_BUILD_DIR names the build (default: the parent of this program's
 * folder). Never part of ctest: the targets are times, and a busy machine
 * misses them. */
#include "lib/prelude.h"
#include "bench/overhead/cpu.h"
#include "bench/soak/soak.h"
#include "bench/stats.h"
#include "services/runner/engine.h"
#include "tests/integration/e2e.h"

#include <curl/curl.h>
#include <jansson.h>
#include <libgen.h>
#include <unistd.h>

#define MAX_REQUESTS 100000
#define STREAM_RATIO_MIN 0.97
#define VERSION_P99_MAX_MS 1.0
#define GEN1_P50_MAX_MS 2.0
#define ENGINE_NUM_CTX 2048 /* both engines' context */
#define PROMPT "Once upon a time, in a quiet village by the sea, there lived"

typedef struct opts {
    const char *model;
    int rounds, tokens, requests, threads;
} opts_t;

/* The stack's services, found under serve once the runner is loaded. */
typedef struct services {
    pid_t runner, scheduler, gateway;
} services_t;

/* ---- percentiles ---- */

static double pct(double *v, int n, double p)
{
    if (n <= 0)
        return 0;
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    int i = (int)(p * (n - 1) + 0.5);
    return v[i];
}

/* ---- the engine alone ---- */

typedef struct pieces {
    int n;
    double first_s, last_s; /* arrival of the first and last piece */
} pieces_t;

static bool on_piece(void *ctx, const msg_chunk_body_t *c)
{
    pieces_t *p = ctx;
    if (!c->response || !*c->response)
        return true;
    double now = bench_now_s();
    if (!p->n++)
        p->first_s = now;
    p->last_s = now;
    return true;
}

static bool never_canceled(void *ctx)
{
    CR_UNUSED(ctx);
    return false;
}

static rn_engine_t *engine_load(const opts_t *o)
{
    msg_options_t lo = {0};
    lo.num_ctx = ENGINE_NUM_CTX;
    lo.has_num_ctx = true;
    lo.num_thread = o->threads;
    lo.has_num_thread = true;
    msg_load_body_t ld = {0};
    ld.name = "overhead:latest";
    ld.has_name = true;
    ld.model_path = (char *)o->model;
    ld.has_model_path = true;
    ld.options = &lo;
    ld.has_options = true;
    rn_engine_t *e = NULL;
    cr_err_t err;
    if (rn_engine_load(&ld, &e, &err)) {
        fprintf(stderr, "bench-overhead: engine load of %s: %s\n", o->model, err.msg);
        return NULL;
    }
    return e;
}

/* One raw greedy generate of n tokens; fills *p and *done. */
static bool engine_gen(rn_engine_t *e, int n, pieces_t *p, msg_done_body_t *done)
{
    msg_options_t ro = {0};
    ro.temperature = 0;
    ro.has_temperature = true;
    ro.num_predict = n;
    ro.has_num_predict = true;
    msg_t m;
    msg_init(&m, MSG_generate, "overhead");
    m.u.generate.model = "overhead";
    m.u.generate.has_model = true;
    m.u.generate.prompt = PROMPT;
    m.u.generate.has_prompt = true;
    m.u.generate.raw = true;
    m.u.generate.has_raw = true;
    m.u.generate.options = &ro;
    m.u.generate.has_options = true;
    memset(p, 0, sizeof *p);
    rn_sink_t sink = {p, on_piece, never_canceled};
    cr_err_t err;
    if (rn_engine_generate(e, &m, &sink, done, &err)) {
        fprintf(stderr, "bench-overhead: engine generate: %s\n", err.msg);
        return false;
    }
    return true;
}

/* ---- HTTP ---- */

typedef struct http {
    CURL *c;
    char base[128];
    cr_buf_t body;   /* the whole answer */
    size_t scanned;  /* of body, lines already timed */
    pieces_t p;      /* stream: NDJSON lines with a non-empty response */
    bool stream;
} http_t;

static size_t on_data(char *data, size_t size, size_t n, void *ud)
{
    http_t *h = ud;
    if (cr_buf_append(&h->body, data, size * n))
        return 0;
    if (!h->stream)
        return size * n;
    double now = bench_now_s();
    for (;;) {
        char *line = h->body.data + h->scanned;
        char *nl = memchr(line, '\n', h->body.len - h->scanned);
        if (!nl)
            break;
        /* A piece of text: {"model":..,"response":"x",..,"done":false} */
        if (!memmem(line, (size_t)(nl - line), "\"response\":\"\"", 13) &&
            memmem(line, (size_t)(nl - line), "\"done\":false", 12)) {
            if (!h->p.n++)
                h->p.first_s = now;
            h->p.last_s = now;
        }
        h->scanned = (size_t)(nl + 1 - h->body.data);
    }
    return size * n;
}

static bool http_init(http_t *h, const char *host)
{
    memset(h, 0, sizeof *h);
    snprintf(h->base, sizeof h->base, "http://%s", host);
    cr_buf_init(&h->body, 64u << 20);
    h->c = curl_easy_init();
    if (!h->c)
        return false;
    curl_easy_setopt(h->c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(h->c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(h->c, CURLOPT_TIMEOUT, 600L);
    curl_easy_setopt(h->c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h->c, CURLOPT_TCP_NODELAY, 1L);
    return true;
}

/* One request on the kept-alive handle; its time in *s. Status or -1. */
static long http_do(http_t *h, const char *path, const char *json, bool stream, double *s)
{
    char url[256];
    snprintf(url, sizeof url, "%s%s", h->base, path);
    cr_buf_reset(&h->body);
    h->scanned = 0;
    memset(&h->p, 0, sizeof h->p);
    h->stream = stream;
    curl_easy_setopt(h->c, CURLOPT_URL, url);
    struct curl_slist *hdr = NULL;
    if (json) {
        hdr = curl_slist_append(NULL, "Content-Type: application/json");
        curl_easy_setopt(h->c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(h->c, CURLOPT_POSTFIELDS, json);
    } else {
        curl_easy_setopt(h->c, CURLOPT_HTTPHEADER, NULL);
        curl_easy_setopt(h->c, CURLOPT_HTTPGET, 1L);
    }
    double t0 = bench_now_s();
    CURLcode res = curl_easy_perform(h->c);
    *s = bench_now_s() - t0;
    curl_easy_setopt(h->c, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(hdr);
    long status = 0;
    curl_easy_getinfo(h->c, CURLINFO_RESPONSE_CODE, &status);
    if (res != CURLE_OK) {
        fprintf(stderr, "bench-overhead: %s: %s\n", path, curl_easy_strerror(res));
        return -1;
    }
    return status;
}

static void gen_json(char *out, size_t cap, int n, bool stream, int threads)
{
    snprintf(out, cap,
             "{\"model\":\"overhead\",\"prompt\":\"" PROMPT "\",\"raw\":true,"
             "\"stream\":%s,\"options\":{\"temperature\":0,\"num_predict\":%d,"
             "\"num_thread\":%d,\"num_ctx\":%d}}",
             stream ? "true" : "false", n, threads, ENGINE_NUM_CTX);
}

/* The last NDJSON object of the body (the whole body when not a stream). */
static json_t *last_object(const http_t *h)
{
    const char *b = h->body.data ? h->body.data : "";
    size_t n = h->body.len;
    while (n && (b[n - 1] == '\n' || b[n - 1] == '\r'))
        n--;
    const char *start = b;
    for (size_t i = n; i > 0; i--)
        if (b[i - 1] == '\n') {
            start = b + i;
            break;
        }
    return json_loadb(start, n - (size_t)(start - b), 0, NULL);
}

static double jnum_ns_to_s(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (double)json_integer_value(v) / 1e9 : -1;
}

/* ---- one round ---- */

typedef struct round {
    double http_tps, engine_tps;
    double http_eval_tps, engine_eval_tps; /* eval_count / eval_duration */
    int http_pieces, engine_pieces;
    double version_p50_ms, version_p99_ms;
    double gen1_wall_p50_ms, gen1_over_p50_ms, gen1_over_p99_ms;
    double gen1_engine_p50_ms; /* the engine alone's whole call */
    /* CPU per streamed token, us: on a CPU / waiting for one */
    double engine_cpu_us, engine_wait_us, runner_cpu_us, runner_wait_us;
    double sched_cpu_us, gw_cpu_us;
} round_t;

static double rate(const pieces_t *p)
{
    return p->n > 1 && p->last_s > p->first_s ? (p->n - 1) / (p->last_s - p->first_s) : 0;
}

/* Per-token CPU (us) of pid between two reads; 0 when either failed. */
static void per_token(const ovh_cpu_t *a, const ovh_cpu_t *b, bool ok, int tokens, double *run_us,
                      double *wait_us)
{
    *run_us = ok && tokens > 0 ? (double)(b->run_ns - a->run_ns) / 1e3 / tokens : 0;
    if (wait_us)
        *wait_us = ok && tokens > 0 ? (double)(b->wait_ns - a->wait_ns) / 1e3 / tokens : 0;
}

static bool stream_http(const opts_t *o, http_t *h, const services_t *sv, round_t *r)
{
    char json[1024];
    double s;
    ovh_cpu_t c0[3], c1[3];
    const pid_t pids[3] = {sv->runner, sv->scheduler, sv->gateway};
    bool ok = true;
    for (int i = 0; i < 3; i++)
        ok &= pids[i] > 0 && ovh_cpu_read(pids[i], &c0[i]);
    gen_json(json, sizeof json, o->tokens, true, o->threads);
    long st = http_do(h, "/api/generate", json, true, &s);
    for (int i = 0; i < 3; i++)
        ok &= pids[i] > 0 && ovh_cpu_read(pids[i], &c1[i]);
    if (st != 200) {
        fprintf(stderr, "bench-overhead: stream: HTTP %ld: %.300s\n", st,
                h->body.data ? h->body.data : "");
        return false;
    }
    r->http_tps = rate(&h->p);
    r->http_pieces = h->p.n;
    json_t *last = last_object(h);
    double sev = jnum_ns_to_s(last, "eval_duration");
    json_t *cnt = json_object_get(last, "eval_count");
    r->http_eval_tps = sev > 0 && json_is_integer(cnt) ? (double)json_integer_value(cnt) / sev : 0;
    json_decref(last);
    per_token(&c0[0], &c1[0], ok, r->http_pieces, &r->runner_cpu_us, &r->runner_wait_us);
    per_token(&c0[1], &c1[1], ok, r->http_pieces, &r->sched_cpu_us, NULL);
    per_token(&c0[2], &c1[2], ok, r->http_pieces, &r->gw_cpu_us, NULL);
    return true;
}

static bool stream_engine(const opts_t *o, rn_engine_t *e, round_t *r)
{
    msg_done_body_t done;
    pieces_t ep;
    ovh_cpu_t c0, c1;
    bool ok = ovh_cpu_read(getpid(), &c0);
    if (!engine_gen(e, o->tokens, &ep, &done))
        return false;
    ok &= ovh_cpu_read(getpid(), &c1);
    r->engine_tps = rate(&ep);
    r->engine_eval_tps =
        done.eval_duration > 0 ? (double)done.eval_count * 1e9 / (double)done.eval_duration : 0;
    r->engine_pieces = ep.n;
    per_token(&c0, &c1, ok, ep.n, &r->engine_cpu_us, &r->engine_wait_us);
    return true;
}

static bool run_round(const opts_t *o, http_t *h, rn_engine_t *e, const services_t *sv,
                      bool engine_first, round_t *r, double *scratch, double *scratch2)
{
    char json[1024];
    double s;
    long st;
    msg_done_body_t done;
    pieces_t ep;

    /* stream, the two in the round's order */
    if (engine_first ? !stream_engine(o, e, r) || !stream_http(o, h, sv, r)
                     : !stream_http(o, h, sv, r) || !stream_engine(o, e, r))
        return false;

    /* version */
    for (int i = 0; i < o->requests; i++) {
        if ((st = http_do(h, "/api/version", NULL, false, &s)) != 200) {
            fprintf(stderr, "bench-overhead: /api/version: HTTP %ld\n", st);
            return false;
        }
        scratch[i] = s * 1e3;
    }
    r->version_p50_ms = pct(scratch, o->requests, 0.50);
    r->version_p99_ms = pct(scratch, o->requests, 0.99);

    /* gen1 */
    gen_json(json, sizeof json, 1, false, o->threads);
    for (int i = 0; i < o->requests; i++) {
        if ((st = http_do(h, "/api/generate", json, false, &s)) != 200) {
            fprintf(stderr, "bench-overhead: gen1: HTTP %ld: %.300s\n", st,
                    h->body.data ? h->body.data : "");
            return false;
        }
        json_t *d = last_object(h);
        double pe = jnum_ns_to_s(d, "prompt_eval_duration"), ev = jnum_ns_to_s(d, "eval_duration");
        json_decref(d);
        if (pe < 0 || ev < 0) {
            fprintf(stderr, "bench-overhead: gen1: no durations in %.300s\n", h->body.data);
            return false;
        }
        scratch2[i] = s * 1e3;
        scratch[i] = (s - pe - ev) * 1e3;
    }
    r->gen1_wall_p50_ms = pct(scratch2, o->requests, 0.50);
    r->gen1_over_p50_ms = pct(scratch, o->requests, 0.50);
    r->gen1_over_p99_ms = pct(scratch, o->requests, 0.99);
    for (int i = 0; i < o->requests; i++) {
        double t0 = bench_now_s();
        if (!engine_gen(e, 1, &ep, &done))
            return false;
        scratch[i] = (bench_now_s() - t0) * 1e3;
    }
    r->gen1_engine_p50_ms = pct(scratch, o->requests, 0.50);
    return true;
}

/* CPU the stack spends per token beyond the engine alone's: the runner's
 * surplus, the scheduler's relay and the gateway's delivery. */
static double stack_extra_us(const round_t *r)
{
    return r->runner_cpu_us - r->engine_cpu_us + r->sched_cpu_us + r->gw_cpu_us;
}

/* The runner, scheduler and gateway under serve (0 for any not found:
 * its figures print as 0). */
static void find_services(pid_t serve_pid, services_t *sv)
{
    soak_sample_t smp;
    soak_procs_read(serve_pid, 0, &smp);
    for (int i = 0; i < smp.n; i++) {
        const soak_proc_t *p = &smp.p[i];
        if (!strcmp(p->name, "runner"))
            sv->runner = p->pid;
        else if (!strcmp(p->name, "scheduler"))
            sv->scheduler = p->pid;
        else if (!strcmp(p->name, "gateway"))
            sv->gateway = p->pid;
    }
    if (!sv->runner || !sv->scheduler || !sv->gateway)
        fprintf(stderr, "bench-overhead: not every service found under serve (pid %d); "
                        "their CPU figures print as 0\n", (int)serve_pid);
}

/* ---- main ---- */

static int count_arg(const char *v, int min, int max)
{
    char *end;
    long n = strtol(v, &end, 10);
    return *end || end == v || n < min || n > max ? -1 : (int)n;
}

static bool parse_opts(int argc, char **argv, opts_t *o, char *model_buf, size_t cap)
{
    *o = (opts_t){.rounds = 5, .tokens = 256, .requests = 100, .threads = 2};
    const char *td = getenv("CORRAL_TESTDATA");
    snprintf(model_buf, cap, "%s/models/tiny-spm-Q8_0.gguf", td ? td : CORRAL_TESTDATA_DEFAULT);
    o->model = model_buf;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return false;
        i++;
        if (!strcmp(a, "--model"))
            o->model = v;
        else if (!strcmp(a, "--rounds"))
            o->rounds = count_arg(v, 1, BENCH_MEDIAN_MAX);
        else if (!strcmp(a, "--tokens"))
            o->tokens = count_arg(v, 2, 100000);
        else if (!strcmp(a, "--requests"))
            o->requests = count_arg(v, 1, MAX_REQUESTS);
        else if (!strcmp(a, "--threads"))
            o->threads = count_arg(v, 1, 1024);
        else
            return false;
    }
    return o->rounds > 0 && o->tokens > 0 && o->requests > 0 && o->threads > 0;
}

static void default_build_dir(void)
{
    if (getenv("CORRAL_BUILD_DIR"))
        return;
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return;
    exe[n] = '\0';
    setenv("CORRAL_BUILD_DIR", dirname(dirname(exe)), 1);
}

static bool verdict(const char *what, bool pass, const char *detail)
{
    printf("%-8s %s  %s\n", what, pass ? "PASS" : "FAIL", detail);
    return pass;
}

/* The median over n rounds of the double at offset `off` of each. */
static double median_of(const round_t *rs, int n, size_t off)
{
    double v[BENCH_MEDIAN_MAX];
    for (int i = 0; i < n; i++)
        memcpy(&v[i], (const char *)&rs[i] + off, sizeof v[i]);
    return bench_median(v, n);
}
#define MEDIAN_OF(rs, n, field) median_of((rs), (n), offsetof(round_t, field))

int main(int argc, char **argv)
{
    opts_t o;
    char model_buf[2048];
    if (!parse_opts(argc, argv, &o, model_buf, sizeof model_buf)) {
        fprintf(stderr, "usage: bench-overhead [--model FILE.gguf] [--rounds N <= %d] "
                        "[--tokens N] [--requests N] [--threads N]\n",
                BENCH_MEDIAN_MAX);
        return 2;
    }
    if (access(o.model, R_OK)) {
        fprintf(stderr, "bench-overhead: cannot read %s (--model, or CORRAL_TESTDATA)\n",
                o.model);
        return 2;
    }
    default_build_dir();
    setenv("OLLAMA_KEEP_ALIVE", "-1", 1);
    unsetenv("CORRAL_TEST_SCRIPT");
    char abs_model[4096];
    if (!realpath(o.model, abs_model)) {
        fprintf(stderr, "bench-overhead: %s: %s\n", o.model, strerror(errno));
        return 2;
    }
    rn_engine_t *e = engine_load(&o);
    if (!e)
        return 1;
    static double scratch[MAX_REQUESTS], scratch2[MAX_REQUESTS];
    e2e_t t;
    if (!e2e_start(&t)) {
        rn_engine_destroy(&e);
        return 1;
    }
    int rc = 1;
    http_t h = {0};
    char mf[4200];
    snprintf(mf, sizeof mf, "FROM %s\n", abs_model);
    if (!e2e_create(&t, "overhead", mf) || !http_init(&h, t.host))
        goto out;
    /* Loads the runner (and warms both page caches). */
    round_t warm;
    opts_t wo = o;
    wo.tokens = 8;
    wo.requests = 3;
    services_t sv = {0};
    if (!run_round(&wo, &h, e, &sv, false, &warm, scratch, scratch2))
        goto out;
    find_services(t.serve_pid, &sv);
    printf("bench-overhead: %s, %d threads, %d tokens, %d requests, %d rounds, server %s\n",
           o.model, o.threads, o.tokens, o.requests, o.rounds, t.host);
    ovh_huge_t hr, he;
    if (ovh_huge_read(sv.runner, &hr) && ovh_huge_read(getpid(), &he))
        printf("huge pages: runner %.0f of %.0f MiB resident (anon %.0f, file %.0f); engine "
               "alone (this process) %.0f of %.0f MiB (anon %.0f, file %.0f)\n",
               (hr.anon_huge_kb + hr.file_pmd_kb) / 1024.0, hr.rss_kb / 1024.0,
               hr.anon_huge_kb / 1024.0, hr.file_pmd_kb / 1024.0,
               (he.anon_huge_kb + he.file_pmd_kb) / 1024.0, he.rss_kb / 1024.0,
               he.anon_huge_kb / 1024.0, he.file_pmd_kb / 1024.0);
    round_t rs[BENCH_MEDIAN_MAX];
    for (int i = 0; i < o.rounds; i++) {
        if (!run_round(&o, &h, e, &sv, i % 2, &rs[i], scratch, scratch2))
            goto out;
        round_t *r = &rs[i];
        printf("round %d: stream %.1f tok/s (%d pieces; runner's own %.1f) vs engine %.1f "
               "tok/s (%d; own %.1f) = %.3f; "
               "version p50 %.3f p99 %.3f ms; gen1 %.3f ms, overhead p50 %.3f p99 %.3f ms "
               "(engine alone %.3f ms)\n",
               i + 1, r->http_tps, r->http_pieces, r->http_eval_tps, r->engine_tps,
               r->engine_pieces, r->engine_eval_tps,
               r->engine_tps > 0 ? r->http_tps / r->engine_tps : 0, r->version_p50_ms,
               r->version_p99_ms, r->gen1_wall_p50_ms, r->gen1_over_p50_ms,
               r->gen1_over_p99_ms, r->gen1_engine_p50_ms);
        printf("  CPU per token: engine alone %.1f us (waited %.1f); runner %.1f us (waited "
               "%.1f), scheduler %.1f, gateway %.1f: the stack's extra %.1f us = %.1f%% of "
               "the engine's\n",
               r->engine_cpu_us, r->engine_wait_us, r->runner_cpu_us, r->runner_wait_us,
               r->sched_cpu_us, r->gw_cpu_us, stack_extra_us(r),
               r->engine_cpu_us > 0 ? 100 * stack_extra_us(r) / r->engine_cpu_us : 0);
        fflush(stdout);
    }
    int n = o.rounds;
    double ratio = MEDIAN_OF(rs, n, http_tps) / CR_MAX(MEDIAN_OF(rs, n, engine_tps), 1e-9);
    double v99 = MEDIAN_OF(rs, n, version_p99_ms), v50 = MEDIAN_OF(rs, n, version_p50_ms);
    double g50 = MEDIAN_OF(rs, n, gen1_over_p50_ms);
    char d[256];
    printf("medians of %d rounds:\n", n);
    /* Beside it, what the client saw against the runner's own count of
     * the same stream (eval_count / eval_duration): the delivery alone,
     * free of any difference between the two engines' runs. */
    snprintf(d, sizeof d,
             "HTTP %.1f tok/s / engine %.1f tok/s = %.3f (>= %.2f); HTTP / the runner's "
             "own rate = %.3f",
             MEDIAN_OF(rs, n, http_tps), MEDIAN_OF(rs, n, engine_tps), ratio,
             STREAM_RATIO_MIN,
             MEDIAN_OF(rs, n, http_tps) / CR_MAX(MEDIAN_OF(rs, n, http_eval_tps), 1e-9));
    bool pass = verdict("stream", ratio >= STREAM_RATIO_MIN, d);
    /* Not a verdict: each round's own ratio (its two streams ran back to
     * back), to show how far one round's machine state moves it. */
    double per[BENCH_MEDIAN_MAX], lo = 1e9, hi = 0;
    for (int i = 0; i < n; i++) {
        per[i] = rs[i].http_tps / CR_MAX(rs[i].engine_tps, 1e-9);
        lo = CR_MIN(lo, per[i]);
        hi = CR_MAX(hi, per[i]);
    }
    printf("rounds   each round's HTTP / engine: median %.3f, from %.3f to %.3f\n",
           bench_median(per, n), lo, hi);
    snprintf(d, sizeof d, "/api/version p50 %.3f ms, p99 %.3f ms (< %.1f)", v50, v99,
             VERSION_P99_MAX_MS);
    pass &= verdict("version", v99 < VERSION_P99_MAX_MS, d);
    /* Not a verdict: the CPU figures explain the stream's, whatever the load. */
    double ecpu = MEDIAN_OF(rs, n, engine_cpu_us), extra[BENCH_MEDIAN_MAX];
    for (int i = 0; i < n; i++)
        extra[i] = stack_extra_us(&rs[i]);
    printf("cpu      engine alone %.1f us/token; runner %.1f, scheduler %.1f, gateway %.1f: "
           "the stack's extra %.1f us/token = %.1f%% of the engine's (waiting for a CPU: "
           "engine %.1f, runner %.1f us/token)\n",
           ecpu, MEDIAN_OF(rs, n, runner_cpu_us), MEDIAN_OF(rs, n, sched_cpu_us),
           MEDIAN_OF(rs, n, gw_cpu_us), bench_median(extra, n),
           ecpu > 0 ? 100 * bench_median(extra, n) / ecpu : 0, MEDIAN_OF(rs, n, engine_wait_us),
           MEDIAN_OF(rs, n, runner_wait_us));
    snprintf(d, sizeof d,
             "1-token generate %.3f ms, minus the engine's durations: p50 %.3f ms (< %.1f); "
             "engine alone %.3f ms",
             MEDIAN_OF(rs, n, gen1_wall_p50_ms), g50, GEN1_P50_MAX_MS,
             MEDIAN_OF(rs, n, gen1_engine_p50_ms));
    pass &= verdict("gen1", g50 < GEN1_P50_MAX_MS, d);
    rc = pass ? 0 : 3;
out:
    if (h.c)
        curl_easy_cleanup(h.c);
    cr_buf_free(&h.body);
    e2e_stop(&t);
    rn_engine_destroy(&e);
    return rc;
}
