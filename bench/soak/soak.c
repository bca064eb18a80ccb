/* soak.c: bench-soak, issue 20's load and soak run.
 *
 *   bench-soak [--clients N] [--duration S] [--warmup S] [--sample S]
 *              [--max-queue N] [--parallel N] [--probe-ms MS] [--timeout S]
 *
 * Starts a private `corral serve` (temp runtime dir and store, a free
 * loopback port: tests/integration/e2e.c), creates two synthetic models
 * (a llama for generate/chat, a bert for embed), loads both, then for
 * --duration seconds (600) runs --clients (500) clients of the mix in
 * clients.c against a queue of --max-queue (128) with --parallel (4) slots
 * per runner, while probe.c times /api/version and procs.c samples the
 * services every --sample seconds (60). Verdicts, each PASS or FAIL:
 *   clients   every request got its answer (tokens, vectors, list) or a
 *             503; none failed, none hung past --timeout (300 s);
 *   version   p99 of /api/version under 10 ms, every probe answered;
 *   rss       gateway, scheduler and each runner grow under 5% from the
 *             sample at --warmup (120 s) to the last one under load; no
 *             service restarted;
 *   fds       once the load is gone, every service holds no more open
 *             descriptors than at rest before it (waited for up to 30 s).
 *
 * Connection limits: 500 clients share 127.0.0.1, and a dropped
 * connection's slot is freed only when the gateway's thread for it
 * notices, so a client that reconnects at once can briefly count twice.
 * CORRAL_MAX_CONNECTIONS is set to 2 x clients + 64 and
 * CORRAL_MAX_CONNECTIONS_PER_IP to the same (no per-address cap: every
 * client is one address here), so what the bench measures is the queue,
 * not the connection cap (tests/integration/test_e2e_limits.c covers
 * that). The bench raises its own open-files limit likewise.
 *
 * CORRAL_BUILD_DIR names the build (default: the parent of this
 * program's folder). CORRAL_E2E_KEEP=1 keeps the temp dir and its
 * serve.log. Never part of ctest: it takes minutes and both cores. */
#include "lib/prelude.h"
#include "bench/soak/soak.h"
#include "bench/stats.h"
#include "tests/integration/e2e.h"

#include <libgen.h>
#include <pthread.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 1024
#define RSS_GROWTH_MAX 0.05
#define VERSION_P99_MAX_MS 10.0
#define FD_SETTLE_S 30.0

typedef struct opts {
    int clients, max_queue, parallel, probe_ms;
    double duration_s, warmup_s, sample_s;
    long timeout_s;
} opts_t;

typedef struct sampler {
    pid_t serve_pid;
    double t0, every_s, duration_s; /* the last sample is at duration_s */
    atomic_bool stop;
    atomic_int *active;
    soak_sample_t s[MAX_SAMPLES];
    int n;
    pthread_t th;
} sampler_t;

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void print_sample(const soak_sample_t *s, int active)
{
    printf("t=%5.0fs active=%-4d", s->t_s, active);
    for (int i = 0; i < s->n; i++)
        printf("  %s[%d] %ld kB %ld fds %.0f cpu-s", s->p[i].name, (int)s->p[i].pid,
               s->p[i].rss_kb, s->p[i].fds, s->p[i].cpu_s);
    printf("\n");
    fflush(stdout);
}

static void *sampler_main(void *arg)
{
    sampler_t *sp = arg;
    double next = sp->t0, end = sp->t0 + sp->duration_s;
    while (!atomic_load(&sp->stop) && sp->n < MAX_SAMPLES) {
        if (bench_now_s() < CR_MIN(next, end)) {
            sleep_s(0.1);
            continue;
        }
        soak_sample_t *s = &sp->s[sp->n];
        soak_procs_read(sp->serve_pid, bench_now_s() - sp->t0, s);
        print_sample(s, atomic_load(sp->active));
        sp->n++;
        if (bench_now_s() >= end)
            break;
        next += sp->every_s;
    }
    return NULL;
}

static bool parse_opts(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.clients = 500, .max_queue = 128, .parallel = 4, .probe_ms = 20,
                  .duration_s = 600, .warmup_s = 120, .sample_s = 60, .timeout_s = 300};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return false;
        i++;
        if (!strcmp(a, "--clients"))
            o->clients = atoi(v);
        else if (!strcmp(a, "--duration"))
            o->duration_s = atof(v);
        else if (!strcmp(a, "--warmup"))
            o->warmup_s = atof(v);
        else if (!strcmp(a, "--sample"))
            o->sample_s = atof(v);
        else if (!strcmp(a, "--max-queue"))
            o->max_queue = atoi(v);
        else if (!strcmp(a, "--parallel"))
            o->parallel = atoi(v);
        else if (!strcmp(a, "--probe-ms"))
            o->probe_ms = atoi(v);
        else if (!strcmp(a, "--timeout"))
            o->timeout_s = atol(v);
        else
            return false;
    }
    return o->clients >= 1 && o->clients <= 20000 && o->duration_s > 0 &&
           o->warmup_s >= 0 && o->warmup_s < o->duration_s && o->sample_s > 0 &&
           o->max_queue >= 1 && o->parallel >= 1 && o->probe_ms >= 1 && o->timeout_s >= 1;
}

/* Sets an environment variable to a number. */
static void setenv_int(const char *name, long v)
{
    char s[32];
    snprintf(s, sizeof s, "%ld", v);
    setenv(name, s, 1);
}

static void raise_nofile(long want)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= (rlim_t)want)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= (rlim_t)want
                      ? (rlim_t)want
                      : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur < (rlim_t)want)
        fprintf(stderr, "bench-soak: open files limit %llu is below %ld; raise ulimit -n\n",
                (unsigned long long)rl.rlim_cur, want);
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

/* Creates and loads both models (a load inside the run would show as a
 * latency spike and as growth). */
static bool setup_models(e2e_t *t)
{
    if (!e2e_synth_create(t, "soak-gen",
                          "TEMPLATE \"\"\"{{ range .Messages }}{{ .Role }}: {{ .Content }}\n"
                          "{{ end }}assistant: \"\"\"\n",
                          "--seed", "5", "--ctx", "4096", NULL) ||
        !e2e_synth_create(t, "soak-embed", NULL, "--arch", "bert", "--pooling", "mean",
                          "--ctx", "512", NULL))
        return false;
    e2e_resp_t g = e2e_http(t, "POST", "/api/generate",
                            "{\"model\":\"soak-gen\",\"prompt\":\"hi\",\"stream\":false,"
                            "\"options\":{\"num_predict\":2}}",
                            NULL, NULL);
    e2e_resp_t e = e2e_http(t, "POST", "/api/embed",
                            "{\"model\":\"soak-embed\",\"input\":\"hi\"}", NULL, NULL);
    bool ok = g.status == 200 && e.status == 200;
    if (!ok)
        fprintf(stderr, "bench-soak: warm-up: generate %ld %.200s, embed %ld %.200s\n",
                g.status, g.body, e.status, e.body);
    e2e_resp_free(&g);
    e2e_resp_free(&e);
    return ok;
}

static bool verdict(const char *what, bool pass, const char *detail)
{
    printf("%-8s %s  %s\n", what, pass ? "PASS" : "FAIL", detail);
    return pass;
}

static bool judge_clients(const soak_tally_t *t)
{
    long ok = 0, busy = 0, dropped = 0, failed = 0;
    printf("\n%-12s %9s %9s %9s %9s\n", "kind", "ok", "503", "dropped", "failed");
    for (int k = 0; k < SOAK_KINDS; k++) {
        printf("%-12s %9ld %9ld %9ld %9ld\n", soak_kind_names[k], t->ok[k], t->busy[k],
               t->dropped[k], t->failed[k]);
        ok += t->ok[k];
        busy += t->busy[k];
        dropped += t->dropped[k];
        failed += t->failed[k];
    }
    printf("%-12s %9ld %9ld %9ld %9ld   (%ld tokens; %ld answers ended at once with "
           "the end token)\n",
           "all", ok, busy, dropped, failed, t->tokens, t->empty);
    for (int i = 0; i < t->n_failures; i++)
        printf("  failure: %s\n", t->failures[i]);
    char d[200];
    snprintf(d, sizeof d, "%ld requests: %ld answered, %ld 503, %ld dropped by the client, "
             "%ld failed, %ld unfinished",
             ok + busy + dropped + failed, ok, busy, dropped, failed, t->unfinished);
    return verdict("clients", failed == 0 && t->unfinished == 0 && ok > 0, d);
}

static bool judge_version(const soak_probe_stats_t *p)
{
    char d[200];
    snprintf(d, sizeof d, "%ld probes, %ld failed: p50 %.2f ms, p99 %.2f ms "
             "(fresh connections %.2f ms), max %.1f ms",
             p->n, p->failed, p->p50_ms, p->p99_ms, p->p99_fresh_ms, p->max_ms);
    return verdict("version", p->n > 0 && p->failed == 0 && p->p99_ms < VERSION_P99_MAX_MS, d);
}

/* RSS from the first sample at warmup to the last one under load. */
static bool judge_rss(const sampler_t *sp, double warmup_s)
{
    const soak_sample_t *base = NULL, *last = sp->n ? &sp->s[sp->n - 1] : NULL;
    for (int i = 0; i < sp->n && !base; i++)
        if (sp->s[i].t_s >= warmup_s - 0.5)
            base = &sp->s[i];
    if (!base || !last || base == last)
        return verdict("rss", false, "not enough samples (a run shorter than warmup + one sample)");
    /* The criterion's services must all be there to be judged. */
    int judged_n = 0;
    for (int i = 0; i < base->n; i++)
        judged_n += strcmp(base->p[i].name, "registry") != 0;
    bool pass = judged_n >= 3; /* gateway, scheduler, a runner at least */
    char d[600];
    size_t n = (size_t)snprintf(d, sizeof d, "t=%.0fs -> t=%.0fs:%s", base->t_s, last->t_s,
                                pass ? "" : " (services missing at the first sample)");
    for (int i = 0; i < base->n; i++) {
        const soak_proc_t *b = &base->p[i], *l = soak_sample_find(last, b->pid);
        double g = l && b->rss_kb > 0 ? (double)(l->rss_kb - b->rss_kb) / (double)b->rss_kb : 1;
        /* The registry is not among the criterion's services. */
        bool judged = strcmp(b->name, "registry") != 0;
        if (judged && (!l || g >= RSS_GROWTH_MAX))
            pass = false;
        if (n < sizeof d)
            n += (size_t)snprintf(d + n, sizeof d - n, " %s %+.1f%%%s", b->name, 100 * g,
                                  l ? "" : " (gone)");
    }
    for (int i = 0; i < last->n; i++)
        if (!soak_sample_find(base, last->p[i].pid)) {
            pass = false; /* a service (re)started during the run */
            if (n < sizeof d)
                n += (size_t)snprintf(d + n, sizeof d - n, " %s[%d] new", last->p[i].name,
                                      (int)last->p[i].pid);
        }
    return verdict("rss", pass, d);
}

/* True when every process of before is in now with no more fds. */
static bool fds_back(const soak_sample_t *before, const soak_sample_t *now)
{
    for (int i = 0; i < before->n; i++) {
        const soak_proc_t *p = soak_sample_find(now, before->p[i].pid);
        if (!p || p->fds > before->p[i].fds)
            return false;
    }
    return true;
}

static bool judge_fds(pid_t serve_pid, const soak_sample_t *before)
{
    soak_sample_t now;
    double t0 = bench_now_s();
    do {
        soak_procs_read(serve_pid, 0, &now);
        if (fds_back(before, &now))
            break;
        sleep_s(0.2);
    } while (bench_now_s() - t0 < FD_SETTLE_S);
    char d[600];
    size_t n = (size_t)snprintf(d, sizeof d, "at rest before -> after:");
    for (int i = 0; i < before->n && n < sizeof d; i++) {
        const soak_proc_t *p = soak_sample_find(&now, before->p[i].pid);
        n += (size_t)snprintf(d + n, sizeof d - n, " %s %ld -> %ld", before->p[i].name,
                              before->p[i].fds, p ? p->fds : -1L);
    }
    return verdict("fds", fds_back(before, &now), d);
}

int main(int argc, char **argv)
{
    opts_t o;
    if (!parse_opts(argc, argv, &o)) {
        fprintf(stderr, "usage: bench-soak [--clients N] [--duration S] [--warmup S] "
                        "[--sample S] [--max-queue N] [--parallel N] [--probe-ms MS] "
                        "[--timeout S]\n");
        return 2;
    }
    default_build_dir();
    long max_conn = 2L * o.clients + 64;
    setenv_int("CORRAL_MAX_CONNECTIONS", max_conn);
    setenv_int("CORRAL_MAX_CONNECTIONS_PER_IP", max_conn);
    setenv_int("OLLAMA_MAX_QUEUE", o.max_queue);
    setenv_int("OLLAMA_NUM_PARALLEL", o.parallel);
    setenv("OLLAMA_KEEP_ALIVE", "-1", 1); /* no unload inside the run */
    unsetenv("CORRAL_TEST_SCRIPT");
    raise_nofile(max_conn + 256);

    e2e_t t;
    if (!e2e_start(&t))
        return 1;
    int rc = 1;
    if (!setup_models(&t))
        goto out;
    printf("bench-soak: %d clients, %.0f s (RSS from %.0f s), queue %d, %d slots per "
           "runner, server %s\n",
           o.clients, o.duration_s, o.warmup_s, o.max_queue, o.parallel, t.host);
    soak_sample_t rest_before;
    soak_procs_read(t.serve_pid, 0, &rest_before);
    printf("at rest: ");
    print_sample(&rest_before, 0);

    static sampler_t sp; /* large: its samples */
    atomic_int active = 0;
    sp.serve_pid = t.serve_pid;
    sp.every_s = o.sample_s;
    sp.duration_s = o.duration_s;
    sp.active = &active;
    sp.t0 = bench_now_s();
    soak_probe_t *probe = soak_probe_start(t.host, o.probe_ms);
    if (!probe || pthread_create(&sp.th, NULL, sampler_main, &sp)) {
        fprintf(stderr, "bench-soak: cannot start the probe or the sampler\n");
        soak_probe_stats_t ignored;
        soak_probe_stop(&probe, &ignored);
        goto out;
    }
    soak_clients_cfg_t cc = {.host = t.host, .gen_model = "soak-gen",
                             .embed_model = "soak-embed", .clients = o.clients,
                             .duration_s = o.duration_s, .drain_s = (double)o.timeout_s,
                             .timeout_s = o.timeout_s, .active = &active};
    soak_tally_t tally;
    int crc = soak_clients_run(&cc, &tally);
    /* The sampler took its last sample as the clients stopped starting. */
    atomic_store(&sp.stop, true);
    pthread_join(sp.th, NULL);
    soak_probe_stats_t ps;
    soak_probe_stop(&probe, &ps);
    if (crc) {
        fprintf(stderr, "bench-soak: libcurl could not be set up\n");
        goto out;
    }
    bool pass = judge_clients(&tally);
    pass &= judge_version(&ps);
    pass &= judge_rss(&sp, o.warmup_s);
    pass &= judge_fds(t.serve_pid, &rest_before);
    size_t errors = e2e_log_count(&t, " ERROR ");
    printf("serve.log: %zu ERROR lines\n", errors);
    /* The client side must stay cheap beside what it measures. */
    struct rusage ru;
    if (!getrusage(RUSAGE_SELF, &ru))
        printf("bench-soak itself: %.1f CPU-seconds\n",
               (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                   (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
    rc = pass ? 0 : 3;
out:
    e2e_stop(&t);
    return rc;
}
