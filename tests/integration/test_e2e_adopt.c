/* test_e2e_adopt.c: runners adopted right after a scheduler restart, with
 * the default heartbeat settings (docs/architecture.md "Scheduler
 * restarts").
 *
 * With one, two and three models loaded (the third round with a request
 * streaming), the scheduler gets SIGKILL; `corral serve` restarts it. Each
 * round checks that ps lists every model again, that a request sent 100 ms
 * after the new scheduler listens is served by the adopted runner
 * (no `loading` in the log, no new runner process), and that the runner
 * processes are the same ones afterwards.
 *
 * Timing is printed, not asserted: adoption takes a runner's reconnect
 * (ZeroMQ retries every 100 ms) plus the scheduler's start, ~0.1-0.3 s on
 * an idle machine (the bound is 1 s), but a loaded 2-core CI
 * machine can stretch a process start past any such bound. What a slow
 * adoption would break is asserted instead: a runner not adopted within
 * the adopt grace (5 s by default) has its model loaded a second time,
 * which the log and the runner processes show. */
#include "lib/prelude.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* corral-runner processes serving this test's services (after a restart
 * they are no longer serve's descendants: their scheduler died). Sorted. */
static size_t runner_pids(pid_t *out, size_t cap)
{
    size_t n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0)
            continue;
        char path[64], buf[4096];
        snprintf(path, sizeof path, "/proc/%d/comm", (int)pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        bool runner = fgets(buf, sizeof buf, f) && !strcmp(buf, "corral-runner\n");
        fclose(f);
        if (!runner)
            continue;
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
        f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < len; i++)
            if (!buf[i])
                buf[i] = ' ';
        buf[len] = '\0';
        if (strstr(buf, T.tmp))
            out[n++] = pid;
    }
    closedir(d);
    for (size_t i = 1; i < n; i++) /* insertion sort */
        for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
            pid_t t = out[j];
            out[j] = out[j - 1];
            out[j - 1] = t;
        }
    return n;
}

static pid_t scheduler_pid(void)
{
    pid_t p[4];
    return e2e_find_procs(&T, "corral-schedule", p, 4) == 1 ? p[0] : 0;
}

/* How many ps entries name `model`, for each of the first k models;
 * true if each is listed exactly once and nothing else is. */
static const char *models_g[3] = {"m1:latest", "m2:latest", "m3:latest"};

static bool ps_has_all(int k, bool *twice)
{
    e2e_resp_t r = e2e_http(&T, "GET", "/api/ps", NULL, NULL, NULL);
    json_t *j = r.status == 200 ? json_loads(r.body, 0, NULL) : NULL;
    e2e_resp_free(&r);
    json_t *arr = j ? json_object_get(j, "models") : NULL;
    int seen[3] = {0};
    size_t n = json_array_size(arr);
    for (size_t i = 0; i < n; i++) {
        const char *name =
            json_string_value(json_object_get(json_array_get(arr, i), "name"));
        for (int m = 0; m < 3; m++)
            if (name && !strcmp(name, models_g[m]))
                seen[m]++;
    }
    json_decref(j);
    bool all = (int)n == k;
    for (int m = 0; m < k; m++) {
        all &= seen[m] == 1;
        if (seen[m] > 1 && twice)
            *twice = true;
    }
    return all;
}

static bool generate(const char *model, long *status, int64_t *load_ns)
{
    char body[300];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"hello\",\"stream\":false,"
             "\"options\":{\"num_predict\":4}}",
             model);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/generate", body, NULL, NULL);
    *status = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    if (load_ns)
        *load_ns = j ? json_integer_value(json_object_get(j, "load_duration"))
                     : -1;
    bool done = j && json_is_true(json_object_get(j, "done"));
    if (!done)
        fprintf(stderr, "generate %s: %ld %s\n", model, r.status,
                r.body ? r.body : "");
    json_decref(j);
    e2e_resp_free(&r);
    return done;
}

/* The request sent 100 ms after the new scheduler appears. */
typedef struct late {
    pthread_t th;
    const char *model;
    int64_t at_ms; /* when to send it */
    long status;
    int64_t load_ns;
    bool done;
} late_t;

static void *late_main(void *arg)
{
    late_t *l = arg;
    int64_t wait = l->at_ms - now_ms();
    if (wait > 0)
        usleep((useconds_t)wait * 1000); /* the scenario: a request at +100 ms */
    l->done = generate(l->model, &l->status, &l->load_ns);
    return NULL;
}

/* When the scheduler's socket for gateways accepts a connection (a killed
 * scheduler leaves the file; connects to it are refused until the new one
 * binds): now_ms() then, or 0 past deadline_ms. */
static int64_t wait_listening(int64_t deadline_ms)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path, sizeof a.sun_path, "%.80s/run/scheduler.sock", T.tmp);
    if (n < 0 || (size_t)n >= sizeof a.sun_path)
        return 0;
    while (now_ms() < deadline_ms) {
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        bool up = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
        if (fd >= 0)
            close(fd);
        if (up)
            return now_ms();
        usleep(5000);
    }
    return 0;
}

/* A streamed request in flight when the scheduler dies. */
typedef struct stream {
    pthread_t th;
    volatile bool got_data;
} stream_t;

static bool stream_data(void *ctx, const char *data, size_t len)
{
    CR_UNUSED(data);
    CR_UNUSED(len);
    ((stream_t *)ctx)->got_data = true;
    return true;
}

static void *stream_main(void *arg)
{
    stream_t *s = arg;
    e2e_resp_t r = e2e_http(&T, "POST", "/api/generate",
                            "{\"model\":\"m1\",\"prompt\":\"tell me more\","
                            "\"options\":{\"num_predict\":100000}}",
                            stream_data, s);
    e2e_resp_free(&r); /* it ends with an error: its scheduler died */
    return NULL;
}

static void restart_round(int k, bool streaming)
{
    printf("adopt: round with %d models%s\n", k,
           streaming ? " and a request streaming" : "");
    for (int m = 0; m < k; m++) {
        long st;
        char name[16];
        snprintf(name, sizeof name, "m%d", m + 1);
        CHECK_MSG(generate(name, &st, NULL), "warm-up of %s", name);
    }
    pid_t before[16], after[16];
    size_t nb = runner_pids(before, 16);
    CHECK_EQ_INT(nb, k);
    stream_t stream = {0};
    if (streaming) {
        pthread_create(&stream.th, NULL, stream_main, &stream);
        int64_t t0 = now_ms();
        while (!stream.got_data && now_ms() - t0 < 30000)
            usleep(10000);
        CHECK_MSG(stream.got_data, "the streamed request did not start");
    }
    size_t loads = e2e_log_count(&T, " loading m");
    pid_t old = scheduler_pid();
    CHECK(old > 0);
    if (old <= 0)
        return;
    kill(old, SIGKILL);
    int64_t killed = now_ms();
    pid_t fresh = 0;
    while (now_ms() - killed < 30000) { /* serve restarts it in ~0.5 s */
        fresh = scheduler_pid();
        if (fresh > 0 && fresh != old)
            break;
        usleep(5000);
    }
    CHECK_MSG(fresh > 0 && fresh != old, "the scheduler was not restarted");
    int64_t restarted = now_ms();
    /* The request at +100 ms: for a model no stream occupies. From when the
     * new scheduler listens, not when its process appears: the gateway
     * retries a refused connect for 2 s only, and a loaded machine can
     * take longer than that to start a process (seen: a 502). */
    int64_t listening = wait_listening(restarted + 60000);
    CHECK_MSG(listening > 0, "the restarted scheduler never listened");
    late_t late = {.model = k > 1 ? "m2" : "m1", .at_ms = listening + 100};
    pthread_create(&late.th, NULL, late_main, &late);
    bool all = false, twice = false;
    int64_t listed = -1;
    while (!all && now_ms() - restarted < 60000) { /* a loaded machine */
        all = ps_has_all(k, &twice);
        if (all)
            listed = now_ms() - restarted;
        else
            usleep(10000);
    }
    printf("adopt: restarted %lld ms after the kill, listening %lld ms later; "
           "every model in ps %lld ms after the restart\n",
           (long long)(restarted - killed), (long long)(listening - restarted),
           (long long)listed);
    CHECK_MSG(all, "ps did not list the %d models again", k);
    CHECK_MSG(!twice, "ps listed a model twice");
    pthread_join(late.th, NULL);
    CHECK_MSG(late.done && late.status == 200,
              "the request 100 ms after the restart: %ld", late.status);
    printf("adopt: the request at +100 ms: load_duration %.1f ms\n",
           (double)late.load_ns / 1e6);
    /* That it did not load the model again is the log check below. */
    CHECK_MSG(late.load_ns >= 0, "load_duration %lld ns", (long long)late.load_ns);
    if (streaming) {
        pthread_join(stream.th, NULL);
        /* Its runner is free again: the old stream was canceled. */
        long st;
        CHECK_MSG(generate("m1", &st, NULL), "m1 after the streamed request");
    }
    CHECK_MSG(e2e_log_count(&T, " loading m") == loads,
              "a model was loaded again instead of adopted");
    size_t na = runner_pids(after, 16);
    CHECK_EQ_INT(na, nb);
    for (size_t i = 0; i < na && i < nb; i++)
        CHECK_MSG(after[i] == before[i], "runner %zu: pid %d, was %d", i,
                  (int)after[i], (int)before[i]);
    CHECK(ps_has_all(k, NULL));
}

int main(void)
{
    /* The defaults the issue is about. */
    unsetenv("CORRAL_HEARTBEAT_INTERVAL");
    unsetenv("CORRAL_HEARTBEAT_TIMEOUT");
    unsetenv("CORRAL_ADOPT_GRACE");
    unsetenv("CORRAL_RUNNER_ORPHAN_TIMEOUT");
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_adopt");
    }
    bool created = true;
    for (int m = 0; m < 3; m++) {
        char name[16];
        snprintf(name, sizeof name, "m%d", m + 1);
        created &= e2e_synth_create(&T, name, NULL, "--seed", m ? "7" : "5",
                                    NULL);
    }
    CHECK(created);
    if (created) {
        restart_round(1, false);
        restart_round(2, false);
        restart_round(3, true);
    }
    /* Adopted runners (their first scheduler was killed) that die are
     * reaped, not left as zombies under an init that does not reap:
     * serve is their subreaper (issue 20, 7). */
    pid_t adopted[16];
    size_t na = runner_pids(adopted, 16);
    CHECK(na > 0);
    for (size_t i = 0; i < na; i++) {
        /* Orphaned by the killed scheduler, each is serve's child now. */
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)adopted[i]);
        FILE *f = fopen(path, "r");
        int ppid = -1;
        if (f) {
            if (fscanf(f, "%*d %*s %*c %d", &ppid) != 1)
                ppid = -1;
            fclose(f);
        }
        CHECK_MSG(ppid == (int)T.serve_pid, "runner %d: parent %d, serve is %d",
                  (int)adopted[i], ppid, (int)T.serve_pid);
        kill(adopted[i], SIGKILL);
    }
    for (size_t i = 0; i < na; i++) {
        int64_t t0 = now_ms();
        bool reaped = false;
        while (!reaped && now_ms() - t0 < 30000) {
            reaped = kill(adopted[i], 0) != 0 && errno == ESRCH;
            if (!reaped)
                usleep(10000);
        }
        CHECK_MSG(reaped, "runner %d was not reaped after SIGKILL",
                  (int)adopted[i]);
    }
    if (check_failed_g) {
        char cmd[1300];
        snprintf(cmd, sizeof cmd, "tail -n 80 %s/serve.log >&2", T.tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "(no serve log)\n");
    }
    e2e_stop(&T);
    /* Runners left over (none expected) are stopped here, to make sure. */
    pid_t left[16];
    size_t n = runner_pids(left, 16);
    for (size_t i = 0; i < n; i++)
        kill(left[i], SIGKILL);
    return check_finish("e2e_adopt");
}
