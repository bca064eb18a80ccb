/* test_unit_exec.c: starts each corral service the way systemd would from
 * its installed unit, and checks that it reports ready and stops cleanly.
 *
 * For every service of deploy/services.txt, in start order, the installed
 * corral-<name>.service is read and its ExecStart= argv is exec'd exactly
 * (same program, same arguments) with the environment systemd would build:
 * Environment= (specifiers expanded), then EnvironmentFile= (the example
 * corral.env standing for /etc/corral/corral.env), RUNTIME_DIRECTORY and
 * STATE_DIRECTORY, a NOTIFY_SOCKET this test listens on, UMask= and
 * LimitNOFILE=. Paths under /run and /var/lib become a private temp dir and
 * the gateway's port a free one; nothing else is changed.
 *
 * Then: READY=1 must come from the service's own pid (NotifyAccess=main)
 * within the start timeout, and by then its sockets must accept
 * connections (the bus sockets in the runtime dir; the gateway's HTTP port
 * answers GET / with 200); the image healthcheck script must agree. On
 * SIGTERM, in reverse order: STOPPING=1, then exit status 0 within the
 * stop timeout, and the healthcheck must then fail.
 *
 * A service whose binary is still the "not built yet" placeholder is
 * skipped, saying so; when all are, the test exits 77.
 *
 * usage: test_unit_exec --root DESTDIR --prefix PREFIX --unitdir DIR
 *                       --services FILE --env-file FILE [--healthcheck F] */
#include "lib/prelude.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tests/deploy/unitfile.h"
#include "tests/unit/check.h"

#define START_CAP_MS 30000
#define STOP_CAP_MS 30000

typedef struct opts {
    const char *root, *prefix, *unitdir, *services, *env_file, *healthcheck;
} opts_t;

typedef struct proc {
    const dc_service_t *svc;
    dc_unit_t *unit;
    pid_t pid;
    bool skipped, ready;
    char log[1200];
    char host[64]; /* gateway: 127.0.0.1:PORT */
    int start_ms, stop_ms;
} proc_t;

static char tmp_g[128];

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/* systemd time spans as the units write them: "60s", "2min", "90". */
static int span_ms(const char *v, int def)
{
    if (!v)
        return def;
    char *end;
    double x = strtod(v, &end);
    if (end == v)
        return def;
    if (!strcmp(end, "ms"))
        return (int)x;
    if (!strcmp(end, "min") || !strcmp(end, "m"))
        return (int)(x * 60000);
    return (int)(x * 1000); /* "", "s" */
}

static int notify_listener(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    if (snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path) >=
        (int)sizeof sa.sun_path) {
        close(fd);
        return -1;
    }
    int one = 1;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) ||
        setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one)) {
        perror("notify socket");
        return -1;
    }
    return fd;
}

/* Waits up to ms for a datagram containing `want` ("READY=1") from pid.
 * Returns 1 when it came, 0 on timeout, -1 when pid exited first. */
static int wait_notify(int fd, pid_t pid, const char *want, int ms,
                       int *exit_status)
{
    int64_t deadline = now_ms() + ms;
    while (now_ms() < deadline) {
        struct pollfd pf = {fd, POLLIN, 0};
        if (poll(&pf, 1, 100) > 0) {
            char buf[4097];
            union {
                struct cmsghdr h;
                char b[CMSG_SPACE(sizeof(struct ucred))];
            } ctl;
            struct iovec iov = {buf, sizeof buf - 1};
            struct msghdr mh = {0};
            mh.msg_iov = &iov;
            mh.msg_iovlen = 1;
            mh.msg_control = ctl.b;
            mh.msg_controllen = sizeof ctl.b;
            ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT);
            if (n < 0)
                continue;
            buf[n] = '\0';
            pid_t from = -1;
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c;
                 c = CMSG_NXTHDR(&mh, c))
                if (c->cmsg_type == SCM_CREDENTIALS) {
                    struct ucred cr;
                    memcpy(&cr, CMSG_DATA(c), sizeof cr);
                    from = cr.pid;
                }
            /* Each line is one assignment. */
            for (char *line = strtok(buf, "\n"); line;
                 line = strtok(NULL, "\n"))
                if (!strcmp(line, want)) {
                    if (from == pid)
                        return 1;
                    fprintf(stderr, "  %s from pid %ld, not the main pid "
                            "%ld: systemd would ignore it\n", want,
                            (long)from, (long)pid);
                }
        }
        if (waitpid(pid, exit_status, WNOHANG) == pid)
            return -1;
    }
    return 0;
}

static void print_log(const char *path)
{
    char *text = NULL;
    cr_err_t err;
    if (!dc_read_file(path, 64 * 1024, &text, NULL, &err)) {
        fprintf(stderr, "---- %s ----\n%s----\n", path, text);
        free(text);
    }
}

static bool log_has(const char *path, const char *needle)
{
    char *text = NULL;
    cr_err_t err;
    bool found = false;
    if (!dc_read_file(path, 64 * 1024, &text, NULL, &err)) {
        found = strstr(text, needle) != NULL;
        free(text);
    }
    return found;
}

/* ---- what "bound" means per service ---- */

static bool unix_connects(const char *path)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    bool fits = snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path) <
                (int)sizeof sa.sun_path;
    bool ok = fd >= 0 && fits &&
              !connect(fd, (struct sockaddr *)&sa, sizeof sa);
    if (fd >= 0)
        close(fd);
    return ok;
}

/* GET / on host ("127.0.0.1:PORT"); true on an HTTP 200. */
static bool http_ok(const char *host)
{
    int port = atoi(strchr(host, ':') + 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool ok = false;
    if (fd >= 0 && !connect(fd, (struct sockaddr *)&a, sizeof a)) {
        struct timeval tv = {5, 0};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        const char *req = "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n";
        char buf[64] = {0};
        if (write(fd, req, strlen(req)) == (ssize_t)strlen(req) &&
            read(fd, buf, sizeof buf - 1) > 12)
            ok = !strncmp(buf, "HTTP/1.", 7) && !strncmp(buf + 9, "200", 3);
    }
    if (fd >= 0)
        close(fd);
    return ok;
}

/* The bus sockets each service binds in the runtime dir. */
static const char *const *service_sockets(const char *name)
{
    static const char *const sched[] = {"scheduler.sock", "runners.sock",
                                        NULL};
    static const char *const reg[] = {"registry.sock", NULL};
    static const char *const none[] = {NULL};
    if (!strcmp(name, "scheduler"))
        return sched;
    if (!strcmp(name, "registry"))
        return reg;
    return none;
}

static bool curl_present(void)
{
    return system("command -v curl >/dev/null 2>&1") == 0;
}

/* Runs the image healthcheck script; its exit status. */
static int run_healthcheck(const opts_t *o, const char *kind,
                           const char *target)
{
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0) {
            dup2(null, 1);
            dup2(null, 2);
        }
        execl("/bin/sh", "sh", o->healthcheck, kind, target, (char *)NULL);
        _exit(127);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void check_bound(const opts_t *o, proc_t *p, bool up)
{
    const char *name = p->svc->name;
    char path[512];
    bool hc = o->healthcheck && curl_present();
    for (const char *const *s = service_sockets(name); *s; s++) {
        snprintf(path, sizeof path, "%s/run/corral/%s", tmp_g, *s);
        if (up)
            CHECK_MSG(unix_connects(path), "%s: %s does not accept "
                      "connections after READY=1", name, path);
        if (hc) {
            int rc = run_healthcheck(o, "ipc", path);
            CHECK_MSG(up ? rc == 0 : rc != 0, "%s: healthcheck ipc %s "
                      "exited %d while the service is %s", name, path, rc,
                      up ? "up" : "stopped");
        }
    }
    if (p->host[0]) {
        if (up)
            CHECK_MSG(http_ok(p->host), "%s: GET http://%s/ is not 200 "
                      "after READY=1", name, p->host);
        if (hc) {
            char url[128];
            snprintf(url, sizeof url, "http://%s/", p->host);
            int rc = run_healthcheck(o, "http", url);
            CHECK_MSG(up ? rc == 0 : rc != 0, "%s: healthcheck http %s "
                      "exited %d while the service is %s", name, url, rc,
                      up ? "up" : "stopped");
        }
    }
}

/* ---- starting ---- */

static bool mkdir_mode(const char *path, mode_t mode)
{
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *s = buf + 1; *s; s++)
        if (*s == '/') {
            *s = '\0';
            mkdir(buf, 0755);
            *s = '/';
        }
    if (mkdir(buf, mode) && errno != EEXIST)
        return false;
    return chmod(buf, mode) == 0;
}

/* Builds the environment systemd would give this unit. */
static bool build_env(const opts_t *o, proc_t *p, const char *unit_name,
                      dc_env_t *env)
{
    const dc_unit_t *u = p->unit;
    cr_err_t err;
    char buf[4096], home[512];
    snprintf(home, sizeof home, "%s/state/corral", tmp_g);
    char run_root[512], state_root[512];
    snprintf(run_root, sizeof run_root, "%s/run", tmp_g);
    snprintf(state_root, sizeof state_root, "%s/state", tmp_g);
    dc_specifiers_t sp = {run_root, state_root, home, unit_name};

    dc_env_put(env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:"
                    "/usr/bin:/sbin:/bin", NULL);
    snprintf(buf, sizeof buf, "HOME=%s", home);
    dc_env_put(env, buf, NULL);
    dc_env_put(env, "LANG=C.UTF-8", NULL);
    snprintf(buf, sizeof buf, "NOTIFY_SOCKET=%s/notify.sock", tmp_g);
    dc_env_put(env, buf, NULL);
    /* Sanitizer settings of this test run reach the services too. */
    const char *pass[] = {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"};
    for (size_t i = 0; i < CR_ARRAY_LEN(pass); i++)
        if (getenv(pass[i])) {
            snprintf(buf, sizeof buf, "%s=%s", pass[i], getenv(pass[i]));
            dc_env_put(env, buf, NULL);
        }

    /* RuntimeDirectory=/StateDirectory=: made with their modes, and named
     * in RUNTIME_DIRECTORY / STATE_DIRECTORY (':'-separated). */
    const char *kinds[][4] = {
        {"RuntimeDirectory", "RuntimeDirectoryMode", "RUNTIME_DIRECTORY",
         "run"},
        {"StateDirectory", "StateDirectoryMode", "STATE_DIRECTORY", "state"}};
    for (size_t k = 0; k < 2; k++) {
        const char *vals[8];
        size_t n = dc_unit_get_all(u, "Service", kinds[k][0], vals, 8);
        const char *mode_s = dc_unit_get(u, "Service", kinds[k][1]);
        mode_t mode = mode_s ? (mode_t)strtol(mode_s, NULL, 8) : 0755;
        char list[2048] = "";
        for (size_t i = 0; i < n; i++) {
            dc_words_t w;
            if (dc_split_words(vals[i], &w, &err))
                return false;
            for (size_t j = 0; j < w.n; j++) {
                char dir[1024];
                snprintf(dir, sizeof dir, "%s/%s/%s", tmp_g, kinds[k][3],
                         w.w[j]);
                if (!mkdir_mode(dir, mode)) {
                    fprintf(stderr, "cannot make %s: %s\n", dir,
                            strerror(errno));
                    dc_words_free(&w);
                    return false;
                }
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s%s", l ? ":" : "", dir);
            }
            dc_words_free(&w);
        }
        if (list[0]) {
            snprintf(buf, sizeof buf, "%s=%s", kinds[k][2], list);
            dc_env_put(env, buf, NULL);
        }
    }

    const char *vals[32];
    size_t n = dc_unit_get_all(u, "Service", "Environment", vals, 32);
    for (size_t i = 0; i < n; i++) {
        dc_words_t w;
        if (dc_split_words(vals[i], &w, &err)) {
            fprintf(stderr, "Environment=%s: %s\n", vals[i], err.msg);
            return false;
        }
        for (size_t j = 0; j < w.n; j++) {
            if (dc_expand_specifiers(w.w[j], &sp, buf, sizeof buf, &err) ||
                dc_env_put(env, buf, &err)) {
                fprintf(stderr, "Environment=%s: %s\n", w.w[j], err.msg);
                dc_words_free(&w);
                return false;
            }
        }
        dc_words_free(&w);
    }
    /* EnvironmentFile= is read after Environment= and overrides it. */
    n = dc_unit_get_all(u, "Service", "EnvironmentFile", vals, 32);
    for (size_t i = 0; i < n; i++) {
        const char *f = vals[i];
        bool optional = f[0] == '-';
        if (optional)
            f++;
        if (strcmp(f, "/etc/corral/corral.env")) {
            CHECK_MSG(false, "EnvironmentFile=%s: only /etc/corral/corral.env "
                      "is expected", vals[i]);
            continue;
        }
        if (dc_env_file_load(o->env_file, env, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return false;
        }
    }
    /* The one change: the gateway's port, so a busy 11434 or a parallel
     * test run cannot break this test. The host stays what the file says. */
    const char *h = dc_env_value(env, "CORRAL_HOST");
    if (h && !strcmp(p->svc->name, "gateway")) {
        char host[64];
        snprintf(host, sizeof host, "%.*s", (int)strcspn(h, ":"), h);
        CHECK_MSG(!strcmp(host, "127.0.0.1"), "corral.env: CORRAL_HOST=%s "
                  "is not loopback", h);
        snprintf(p->host, sizeof p->host, "127.0.0.1:%d", free_port());
        snprintf(buf, sizeof buf, "CORRAL_HOST=%s", p->host);
        dc_env_put(env, buf, NULL);
    }
    return true;
}

static bool start(const opts_t *o, proc_t *p, int notify_fd)
{
    const char *name = p->svc->name;
    char unit_name[64], path[2048];
    snprintf(unit_name, sizeof unit_name, "corral-%s.service", name);
    snprintf(path, sizeof path, "%s%s/%s", o->root, o->unitdir, unit_name);
    cr_err_t err;
    if (dc_unit_load(path, &p->unit, &err)) {
        CHECK_MSG(false, "%s", err.msg);
        return false;
    }
    const char *exec = dc_unit_get(p->unit, "Service", "ExecStart");
    dc_words_t argv;
    char prefix[8];
    if (!exec || dc_split_exec(exec, &argv, prefix, &err)) {
        CHECK_MSG(false, "%s: no usable ExecStart=", path);
        return false;
    }
    /* The installed unit names the installed binary. */
    char want[1024];
    snprintf(want, sizeof want, "%s/bin/%s", o->prefix, p->svc->argv.w[0]);
    CHECK_MSG(!strcmp(argv.w[0], want), "%s: ExecStart runs %s, not %s",
              path, argv.w[0], want);
    char prog[2048];
    snprintf(prog, sizeof prog, "%s%s", o->root, argv.w[0]);

    dc_env_t env = {0};
    if (!build_env(o, p, unit_name, &env)) {
        CHECK_MSG(false, "%s: cannot build the environment", unit_name);
        dc_words_free(&argv);
        dc_env_free(&env);
        return false;
    }
    const char *umask_s = dc_unit_get(p->unit, "Service", "UMask");
    const char *nofile_s = dc_unit_get(p->unit, "Service", "LimitNOFILE");
    p->start_ms = CR_MIN(span_ms(dc_unit_get(p->unit, "Service",
                                             "TimeoutStartSec"), 90000),
                         START_CAP_MS);
    p->stop_ms = CR_MIN(span_ms(dc_unit_get(p->unit, "Service",
                                            "TimeoutStopSec"), 90000),
                        STOP_CAP_MS);
    snprintf(p->log, sizeof p->log, "%s/%s.log", tmp_g, name);

    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(p->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0)
            dup2(null, 0);
        if (chdir("/"))
            _exit(126);
        umask(umask_s ? (mode_t)strtol(umask_s, NULL, 8) : 022);
        if (nofile_s) {
            struct rlimit rl;
            getrlimit(RLIMIT_NOFILE, &rl);
            rlim_t want_n = (rlim_t)strtoull(nofile_s, NULL, 10);
            rl.rlim_cur = want_n <= rl.rlim_max ? want_n : rl.rlim_max;
            if (geteuid() == 0)
                rl.rlim_cur = rl.rlim_max = want_n;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        setsid();
        execve(prog, argv.w, env.kv);
        fprintf(stderr, "exec %s: %s\n", prog, strerror(errno));
        _exit(127);
    }
    dc_words_free(&argv);
    dc_env_free(&env);
    p->pid = pid;
    int st = 0;
    int got = wait_notify(notify_fd, pid, "READY=1", p->start_ms, &st);
    if (got == 1) {
        p->ready = true;
        printf("%s: ready (READY=1 from pid %ld)\n", name, (long)pid);
        check_passed_g++;
        return true;
    }
    if (got < 0 && log_has(p->log, "not built yet")) {
        printf("%s: skipped: corral-%s is still the placeholder\n", name,
               name);
        p->skipped = true;
        p->pid = 0;
        return true;
    }
    CHECK_MSG(false, "%s: %s", name,
              got < 0 ? "exited before READY=1"
                      : "no READY=1 within TimeoutStartSec (does main() call "
                        "cr_sd_notify_ready() once its sockets are bound?)");
    print_log(p->log);
    if (got == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &st, 0);
    }
    p->pid = 0;
    return false;
}

static void stop(int notify_fd, proc_t *p)
{
    if (p->pid <= 0)
        return;
    const char *name = p->svc->name;
    kill(p->pid, SIGTERM);
    int st = 0;
    int64_t t0 = now_ms();
    int got = wait_notify(notify_fd, p->pid, "STOPPING=1", p->stop_ms, &st);
    CHECK_MSG(got != 0, "%s: no STOPPING=1 and no exit within "
              "TimeoutStopSec after SIGTERM", name);
    if (got >= 0) {
        CHECK_MSG(got == 1, "%s: no STOPPING=1 after SIGTERM", name);
        int left = p->stop_ms - (int)(now_ms() - t0);
        bool gone = false;
        while (left > 0 && !gone) {
            gone = waitpid(p->pid, &st, WNOHANG) == p->pid;
            if (!gone) {
                struct timespec ts = {0, 50 * 1000000L};
                nanosleep(&ts, NULL);
                left -= 50;
            }
        }
        if (!gone) {
            CHECK_MSG(false, "%s: still running %d ms after SIGTERM "
                      "(systemd would SIGKILL it now)", name, p->stop_ms);
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &st, 0);
        }
    } else {
        /* Exited before STOPPING=1 was seen: a service that exits at once
         * on SIGTERM has nothing to drain, but must still say so. */
        CHECK_MSG(false, "%s: exited without STOPPING=1", name);
    }
    CHECK_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "%s: did not exit 0 after SIGTERM (status 0x%x)", name, st);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0))
        print_log(p->log);
    else
        printf("%s: stopped in %ld ms\n", name, (long)(now_ms() - t0));
    p->pid = 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    CR_UNUSED(sb);
    CR_UNUSED(flag);
    CR_UNUSED(ftw);
    remove(path);
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o = {0};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (!strcmp(k, "--root"))
            o.root = v;
        else if (!strcmp(k, "--prefix"))
            o.prefix = v;
        else if (!strcmp(k, "--unitdir"))
            o.unitdir = v;
        else if (!strcmp(k, "--services"))
            o.services = v;
        else if (!strcmp(k, "--env-file"))
            o.env_file = v;
        else if (!strcmp(k, "--healthcheck"))
            o.healthcheck = v;
    }
    if (!o.root || !o.prefix || !o.unitdir || !o.services || !o.env_file) {
        fprintf(stderr, "usage: test_unit_exec --root DESTDIR --prefix P "
                "--unitdir DIR --services FILE --env-file FILE "
                "[--healthcheck FILE]\n");
        return 2;
    }
    dc_services_t svcs;
    cr_err_t err;
    if (dc_services_load(o.services, &svcs, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    snprintf(tmp_g, sizeof tmp_g, "/tmp/corral-unit-XXXXXX");
    if (!mkdtemp(tmp_g)) {
        perror("mkdtemp");
        return 1;
    }
    char path[256];
    snprintf(path, sizeof path, "%s/notify.sock", tmp_g);
    int nfd = notify_listener(path);
    if (nfd < 0)
        return 1;
    if (o.healthcheck && !curl_present())
        printf("test_unit_exec: curl absent, the healthcheck script is not "
               "run\n");

    proc_t procs[16] = {{0}};
    size_t started = 0, skipped = 0;
    bool ok = true;
    for (size_t i = 0; i < svcs.n && ok; i++) {
        procs[i].svc = &svcs.s[i];
        ok = start(&o, &procs[i], nfd);
        started = i + 1;
        skipped += procs[i].skipped;
        if (ok && procs[i].ready)
            check_bound(&o, &procs[i], true);
    }
    for (size_t i = started; i-- > 0;) {
        bool was_up = procs[i].ready;
        stop(nfd, &procs[i]);
        if (was_up)
            check_bound(&o, &procs[i], false);
        dc_unit_free(&procs[i].unit);
    }
    close(nfd);
    if (!getenv("CORRAL_E2E_KEEP"))
        nftw(tmp_g, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    size_t n = svcs.n;
    dc_services_free(&svcs);
    if (skipped == n && !check_failed_g)
        return check_skip("test_unit_exec", "every service binary is still "
                          "a placeholder");
    return check_finish("test_unit_exec");
}
