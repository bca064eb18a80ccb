/* test_cli_serve.c: `corral serve` as a supervisor, with stand-in services
 * (shell scripts named corral-registry, corral-scheduler, corral-gateway in
 * a temporary CORRAL_BIN_DIR): all three start with the environment passed
 * through, a killed one is restarted, SIGTERM stops all and serve exits 0,
 * a second SIGINT kills services that ignore the first, a service that
 * keeps dying at start makes serve give up, and missing programs are an
 * error. Needs the corral binary in $CORRAL_BUILD_DIR/bin (skips without). */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char corral_bin[4096];
static char tmpdir[4096];

static const char *const names[] = {"corral-registry", "corral-scheduler", "corral-gateway"};

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void write_script(const char *dir, const char *name, const char *body)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f)
        return;
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    chmod(path, 0755);
}

/* Lines (pids) recorded by a stand-in service. */
static int count_pids(const char *dir, const char *name, pid_t *pids, int cap)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.pids", dir, name);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = 0;
    long p;
    while (fscanf(f, "%ld", &p) == 1) {
        if (n < cap)
            pids[n] = (pid_t)p;
        n++;
    }
    fclose(f);
    return n;
}

static bool wait_count(const char *dir, const char *name, int want, int timeout_ms)
{
    pid_t pids[64];
    for (int t = 0; t < timeout_ms; t += 50) {
        if (count_pids(dir, name, pids, 64) >= want)
            return true;
        sleep_ms(50);
    }
    return false;
}

static pid_t start_serve(const char *bin_dir, const char *log)
{
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CORRAL_BIN_DIR", bin_dir, 1);
        setenv("CORRAL_TEST_MARK", "passed-through", 1);
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(corral_bin, "corral", "serve", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits for pid up to timeout_ms; returns its wait status or -1. */
static int wait_exit(pid_t pid, int timeout_ms)
{
    int wst;
    for (int t = 0; t < timeout_ms; t += 50) {
        if (waitpid(pid, &wst, WNOHANG) == pid)
            return wst;
        sleep_ms(50);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &wst, 0);
    return -1;
}

static bool log_has(const char *log, const char *what)
{
    FILE *f = fopen(log, "r");
    if (!f)
        return false;
    char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, what) != NULL;
}

static bool alive(pid_t pid)
{
    return kill(pid, 0) == 0;
}

static void make_dir(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", tmpdir, name);
    mkdir(out, 0700);
}

static void test_supervise(void)
{
    char dir[4200], log[4300];
    make_dir(dir, sizeof dir, "ok");
    snprintf(log, sizeof log, "%s/serve.log", dir);
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++) {
        char body[13000];
        /* the env file before the pid: a pid counted means the env
         * file is written (the other order raced the check below) */
        snprintf(body, sizeof body,
                 "echo \"$CORRAL_TEST_MARK\" > %s/%s.env\necho $$ >> %s/%s.pids\n"
                 "exec sleep 1000",
                 dir, names[i], dir, names[i]);
        write_script(dir, names[i], body);
    }
    pid_t serve = start_serve(dir, log);
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++)
        CHECK_MSG(wait_count(dir, names[i], 1, 20000), "%s did not start", names[i]);

    /* The environment reaches the services unchanged. */
    char envp[4300], mark[64] = "";
    snprintf(envp, sizeof envp, "%s/corral-gateway.env", dir);
    FILE *f = fopen(envp, "r");
    if (f) {
        if (!fgets(mark, sizeof mark, f))
            mark[0] = '\0';
        fclose(f);
    }
    CHECK_EQ_STR(mark, "passed-through\n");

    /* A killed service comes back. */
    pid_t pids[8];
    CHECK_EQ_INT(count_pids(dir, "corral-gateway", pids, 8), 1);
    kill(pids[0], SIGKILL);
    CHECK_MSG(wait_count(dir, "corral-gateway", 2, 20000), "gateway was not restarted");
    CHECK(log_has(log, "corral-gateway exited (signal 9"));
    CHECK(alive(serve));

    /* SIGTERM stops everything; serve exits 0. */
    pid_t all[8];
    int n = 0;
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++) {
        pid_t p[8];
        int c = count_pids(dir, names[i], p, 8);
        if (c > 0 && n < 8)
            all[n++] = p[c - 1];
    }
    kill(serve, SIGTERM);
    int wst = wait_exit(serve, 20000);
    CHECK_MSG(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "serve status %d", wst);
    sleep_ms(100);
    for (int i = 0; i < n; i++)
        CHECK_MSG(!alive(all[i]), "pid %d still alive", (int)all[i]);
    CHECK(log_has(log, "serve: stopped"));
}

static void test_second_signal_kills(void)
{
    char dir[4200], log[4300];
    make_dir(dir, sizeof dir, "stubborn");
    snprintf(log, sizeof log, "%s/serve.log", dir);
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++) {
        char body[13000];
        /* the gateway ignores SIGTERM and SIGINT; it records its pid only
         * once the trap is set, so a recorded pid is a stubborn one */
        snprintf(body, sizeof body, "%secho $$ >> %s/%s.pids\n%s",
                 i == 2 ? "trap '' TERM INT\n" : "", dir, names[i],
                 i == 2 ? "while :; do sleep 0.2; done" : "exec sleep 1000");
        write_script(dir, names[i], body);
    }
    pid_t serve = start_serve(dir, log);
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++)
        CHECK(wait_count(dir, names[i], 1, 20000));
    pid_t gw[4];
    count_pids(dir, "corral-gateway", gw, 4);
    kill(serve, SIGINT);
    /* serve took the first signal (two signals sent before it runs would
     * arrive as one) */
    bool stopping = false;
    for (int t = 0; t < 20000 && !(stopping = log_has(log, "received; stopping")); t += 50)
        sleep_ms(50);
    CHECK_MSG(stopping, "serve did not log the first signal");
    sleep_ms(500);
    CHECK(alive(gw[0])); /* still waiting for the stubborn one */
    kill(serve, SIGINT);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int wst = wait_exit(serve, 20000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CHECK_MSG(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 0, "serve status %d", wst);
    /* well before the 40 s that serve waits otherwise (30 s drain and the
     * 10 s grace) */
    CHECK(t1.tv_sec - t0.tv_sec < 20);
    sleep_ms(100);
    CHECK(!alive(gw[0]));
    CHECK(log_has(log, "asked again to stop"));
}

static void test_crash_loop(void)
{
    char dir[4200], log[4300];
    make_dir(dir, sizeof dir, "crash");
    snprintf(log, sizeof log, "%s/serve.log", dir);
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++) {
        char body[13000];
        snprintf(body, sizeof body, "echo $$ >> %s/%s.pids\n%s", dir, names[i],
                 i == 2 ? "echo 'port in use' >&2; exit 1" : "exec sleep 1000");
        write_script(dir, names[i], body);
    }
    pid_t serve = start_serve(dir, log);
    int wst = wait_exit(serve, 20000);
    CHECK_MSG(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 1, "serve status %d", wst);
    pid_t p[16];
    CHECK_EQ_INT(count_pids(dir, "corral-gateway", p, 16), 5);
    CHECK(log_has(log, "giving up"));
    CHECK(log_has(log, "Error: a service kept failing at start"));
    /* The healthy ones were stopped too. */
    int c = count_pids(dir, "corral-registry", p, 16);
    CHECK(c == 1 && !alive(p[0]));
}

static void test_missing_programs(void)
{
    char dir[4200], log[4300];
    make_dir(dir, sizeof dir, "empty");
    snprintf(log, sizeof log, "%s/serve.log", dir);
    pid_t serve = start_serve(dir, log);
    int wst = wait_exit(serve, 20000);
    CHECK(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 1);
    CHECK(log_has(log, "Error: cannot run"));
    CHECK(log_has(log, "corral-registry"));
}

/* A runtime dir open to others: serve says so at once and starts nothing
 * (before, each service failed on it and serve restarted them with
 * back-off for seconds before giving up). */
static void test_bad_runtime_dir(void)
{
    char dir[4200], log[4300], run[4300];
    make_dir(dir, sizeof dir, "badrun");
    snprintf(log, sizeof log, "%s/serve.log", dir);
    snprintf(run, sizeof run, "%s/run", dir);
    mkdir(run, 0700);
    chmod(run, 0755);
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++) {
        char body[13000];
        snprintf(body, sizeof body, "echo $$ >> %s/%s.pids\nexec sleep 1000", dir, names[i]);
        write_script(dir, names[i], body);
    }
    char saved[4200];
    snprintf(saved, sizeof saved, "%s", getenv("CORRAL_RUNTIME_DIR"));
    setenv("CORRAL_RUNTIME_DIR", run, 1);
    pid_t serve = start_serve(dir, log);
    setenv("CORRAL_RUNTIME_DIR", saved, 1);
    int wst = wait_exit(serve, 20000);
    CHECK_MSG(wst != -1 && WIFEXITED(wst) && WEXITSTATUS(wst) == 1, "serve status %d", wst);
    CHECK(log_has(log, "open to group or others (mode 0755)"));
    pid_t p[16];
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++)
        CHECK_MSG(count_pids(dir, names[i], p, 16) == 0, "%s was started", names[i]);
}

int main(void)
{
    const char *build = getenv("CORRAL_BUILD_DIR");
    if (!build || !*build)
        return check_skip("test_cli_serve", "CORRAL_BUILD_DIR not set");
    snprintf(corral_bin, sizeof corral_bin, "%s/bin/corral", build);
    if (access(corral_bin, X_OK))
        return check_skip("test_cli_serve", "corral is not built");
    snprintf(tmpdir, sizeof tmpdir, "/tmp/corral-test-serve-XXXXXX");
    if (!mkdtemp(tmpdir))
        return check_skip("test_cli_serve", "no temp dir");
    signal(SIGPIPE, SIG_IGN);
    /* serve checks the runtime dir before it starts anything: a private one. */
    char run[4200];
    make_dir(run, sizeof run, "run");
    setenv("CORRAL_RUNTIME_DIR", run, 1);
    test_supervise();
    test_second_signal_kills();
    test_crash_loop();
    test_missing_programs();
    test_bad_runtime_dir();
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
    return check_finish("test_cli_serve");
}
