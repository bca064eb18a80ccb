/* serve.c: `corral serve`, a supervisor for the three services on one host.
 *
 * Starts corral-registry, corral-scheduler and corral-gateway (found in
 * $CORRAL_BIN_DIR or beside this executable) as children with the
 * environment unchanged, restarts one that dies after a backoff that grows
 * while it keeps dying young, forwards SIGTERM/SIGINT (SIGHUP as SIGTERM) to
 * all of them and waits, then exits. Every signal is taken synchronously
 * with sigtimedwait, so there is no handler state. A service that cannot
 * stay up (it dies within QUICK_S of starting MAX_QUICK times in a row, for
 * instance because the port is taken) makes serve stop everything and fail.
 *
 * It is their descendants' subreaper: an orphaned runner (its scheduler
 * died) is reaped here when it exits. It knows nothing of what the
 * services do. */
#include "lib/prelude.h"
#include "cli/serve.h"
#include "lib/env.h"
#include "lib/self_path.h"
#include "lib/log.h"
#include "lib/runtime_dir.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define N_SERVICES 3
#define BACKOFF_MIN_S 0.5
#define BACKOFF_MAX_MS (30 * 1000) /* CORRAL_RESTART_BACKOFF's default */
#define QUICK_S 5.0     /* a run shorter than this counts as a crash loop */
#define STABLE_S 60.0   /* a run longer than this resets the backoff */
#define MAX_QUICK 5
#define STOP_GRACE_S 10.0

typedef struct svc {
    const char *name;
    char path[PATH_MAX];
    pid_t pid;          /* 0 when not running */
    double started_s;   /* monotonic */
    double restart_at;  /* monotonic; 0 = no restart pending */
    double backoff_s;
    int quick_deaths;
} svc_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

cr_status_t cli_bin_dir(char *out, size_t cap, cr_err_t *err)
{
    char env[PATH_MAX];
    if (cr_env_get("BIN_DIR", env, sizeof env)) {
        snprintf(out, cap, "%s", env);
        return CR_OK;
    }
    return cr_self_dir(out, cap, err);
}

static cr_status_t start(svc_t *s, const sigset_t *old_mask, cr_err_t *err)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return cr_err_set(err, CR_E_IO, "fork %s: %s", s->name, strerror(errno));
    if (pid == 0) {
        /* Die with serve even if it is killed without a chance to forward. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        signal(SIGPIPE, SIG_DFL);
        sigprocmask(SIG_SETMASK, old_mask, NULL);
        char *argv[] = {(char *)s->name, NULL};
        execv(s->path, argv);
        fprintf(stderr, "corral serve: exec %s: %s\n", s->path, strerror(errno));
        _exit(127);
    }
    s->pid = pid;
    s->started_s = now_s();
    s->restart_at = 0;
    cr_log_info("serve: started %s (pid %d)", s->name, (int)pid);
    return CR_OK;
}

static void describe_exit(int wst, char *out, size_t cap)
{
    if (WIFEXITED(wst))
        snprintf(out, cap, "exit status %d", WEXITSTATUS(wst));
    else if (WIFSIGNALED(wst))
        snprintf(out, cap, "signal %d (%s)", WTERMSIG(wst), strsignal(WTERMSIG(wst)));
    else
        snprintf(out, cap, "status 0x%x", wst);
}

/* Reaps every exited child; returns how many of ours ended. With
 * `supervising`, schedules restarts; sets *give_up on a crash loop. */
static int reap(svc_t *svcs, bool supervising, double backoff_max_s, bool *give_up)
{
    int n = 0;
    for (;;) {
        int wst;
        pid_t pid = waitpid(-1, &wst, WNOHANG);
        if (pid <= 0)
            return n;
        for (int i = 0; i < N_SERVICES; i++) {
            svc_t *s = &svcs[i];
            if (s->pid != pid)
                continue;
            n++;
            s->pid = 0;
            char how[96];
            describe_exit(wst, how, sizeof how);
            if (!supervising) {
                cr_log_info("serve: %s stopped (%s)", s->name, how);
                break;
            }
            double ran = now_s() - s->started_s;
            if (ran >= STABLE_S)
                s->backoff_s = CR_MIN(BACKOFF_MIN_S, backoff_max_s);
            s->quick_deaths = ran < QUICK_S ? s->quick_deaths + 1 : 0;
            if (s->quick_deaths >= MAX_QUICK) {
                cr_log_error("serve: %s exited (%s) %d times within %.0fs of starting; "
                             "giving up",
                             s->name, how, s->quick_deaths, QUICK_S);
                *give_up = true;
                break;
            }
            s->restart_at = now_s() + s->backoff_s;
            cr_log_warn("serve: %s exited (%s) after %.1fs; restarting in %.1fs", s->name,
                        how, ran, s->backoff_s);
            s->backoff_s = CR_MIN(s->backoff_s * 2, backoff_max_s);
            break;
        }
    }
}

static int live(const svc_t *svcs)
{
    int n = 0;
    for (int i = 0; i < N_SERVICES; i++)
        n += svcs[i].pid > 0;
    return n;
}

static void signal_all(svc_t *svcs, int sig)
{
    for (int i = 0; i < N_SERVICES; i++)
        if (svcs[i].pid > 0)
            kill(svcs[i].pid, sig);
}

/* Forwards sig and waits for every service; SIGKILL after the grace time
 * or on a second request to stop. */
static void stop_all(svc_t *svcs, int sig, const sigset_t *set)
{
    signal_all(svcs, sig);
    /* The gateway and scheduler drain in-flight requests first. */
    double drain_s = (double)cr_env_duration_ms("DRAIN_TIMEOUT", 30 * 1000) / 1000;
    double deadline = now_s() + drain_s + STOP_GRACE_S;
    bool killed = false;
    while (live(svcs)) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        siginfo_t info;
        int got = sigtimedwait(set, &info, &ts);
        reap(svcs, false, 0, &(bool){false});
        if (!live(svcs))
            break;
        bool again = got == SIGINT || got == SIGTERM;
        if (!killed && (again || now_s() >= deadline)) {
            cr_log_warn("serve: %s; killing what is left",
                        again ? "asked again to stop" : "services did not stop in time");
            signal_all(svcs, SIGKILL);
            killed = true;
        }
    }
}

cr_status_t cli_cmd_serve(cli_ctx_t *ctx, int argc, char **argv, cr_err_t *err)
{
    CR_UNUSED(ctx);
    if (cli_wants_help(argc, argv)) {
        printf("Start corral: the registry, scheduler and gateway services\n\n"
               "Usage:\n  corral serve\n\n"
               "Environment Variables:\n"
               "      CORRAL_HOST / OLLAMA_HOST        address the gateway listens on "
               "(default 127.0.0.1:11434)\n"
               "      CORRAL_MODELS / OLLAMA_MODELS    model store\n"
               "      CORRAL_RUNTIME_DIR               bus sockets\n"
               "      CORRAL_BIN_DIR                   where the service programs are\n"
               "      CORRAL_RESTART_BACKOFF           longest wait before restarting a service "
               "that died (default 30s)\n"
               "      OLLAMA_KEEP_ALIVE, OLLAMA_MAX_LOADED_MODELS, OLLAMA_NUM_PARALLEL,\n"
               "      OLLAMA_MAX_QUEUE, OLLAMA_LOAD_TIMEOUT, OLLAMA_DEBUG\n");
        return CR_OK;
    }
    if (argc > 1)
        return cr_err_set(err, CR_E_INVALID, "serve takes no arguments, got '%s'", argv[1]);
    cr_log_init("serve");

    svc_t svcs[N_SERVICES] = {
        {.name = "corral-registry"},
        {.name = "corral-scheduler"},
        {.name = "corral-gateway"},
    };
    char dir[PATH_MAX];
    cr_status_t st = cli_bin_dir(dir, sizeof dir, err);
    if (st)
        return st;
    for (int i = 0; i < N_SERVICES; i++) {
        svc_t *s = &svcs[i];
        int n = snprintf(s->path, sizeof s->path, "%s/%s", dir, s->name);
        if (n < 0 || (size_t)n >= sizeof s->path)
            return cr_err_set(err, CR_E_TOO_LARGE, "path too long: %s", dir);
        if (access(s->path, X_OK))
            return cr_err_set(err, CR_E_NOT_FOUND,
                              "cannot run %s: %s (set CORRAL_BIN_DIR to the folder of the "
                              "corral-* programs)",
                              s->path, strerror(errno));
        s->backoff_s = BACKOFF_MIN_S;
    }

    /* The services would each fail on a bad runtime dir and be restarted
     * with back-off until serve gave up; say why once, before any starts.
     * Not needed when every bus socket is given as an endpoint. */
    if (!getenv("CORRAL_SCHEDULER_ENDPOINT") || !getenv("CORRAL_RUNNERS_ENDPOINT") ||
        !getenv("CORRAL_REGISTRY_ENDPOINT")) {
        char run[PATH_MAX];
        if ((st = cr_runtime_dir(run, sizeof run, err)))
            return st;
    }

    /* The wait before a restart doubles from BACKOFF_MIN_S while a service
     * keeps dying within STABLE_S, up to this. */
    double backoff_max_s =
        (double)cr_env_duration_ms("RESTART_BACKOFF", BACKOFF_MAX_MS) / 1000;
    for (int i = 0; i < N_SERVICES; i++)
        svcs[i].backoff_s = CR_MIN(svcs[i].backoff_s, backoff_max_s);

    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &old);

    /* Runners outlive a scheduler that dies (a restarted one adopts them);
     * as their subreaper serve reaps those that exit later, where an init
     * that does not reap (a container's) would keep them as zombies. */
    if (prctl(PR_SET_CHILD_SUBREAPER, 1))
        cr_log_warn("serve: cannot become a subreaper: %s", strerror(errno));
    cr_log_info("serve: corral %s, services from %s", CORRAL_VERSION, dir);
    for (int i = 0; i < N_SERVICES && !st; i++)
        st = start(&svcs[i], &old, err);

    bool give_up = false;
    int stop_sig = 0;
    while (!st && !give_up && !stop_sig) {
        /* Sleep until a signal or the next pending restart. */
        double wait = 1.0, t = now_s();
        for (int i = 0; i < N_SERVICES; i++)
            if (svcs[i].restart_at > 0)
                wait = CR_MIN(wait, CR_MAX(svcs[i].restart_at - t, 0.0));
        struct timespec ts = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
        siginfo_t info;
        int got = sigtimedwait(&set, &info, &ts);
        if (got == SIGTERM || got == SIGINT || got == SIGHUP) {
            stop_sig = got == SIGHUP ? SIGTERM : got;
            cr_log_info("serve: %s received; stopping", strsignal(got));
            break;
        }
        reap(svcs, true, backoff_max_s, &give_up);
        t = now_s();
        for (int i = 0; i < N_SERVICES && !give_up && !st; i++)
            if (!svcs[i].pid && svcs[i].restart_at > 0 && svcs[i].restart_at <= t)
                st = start(&svcs[i], &old, err);
    }

    stop_all(svcs, stop_sig ? stop_sig : SIGTERM, &set);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (st)
        return st;
    if (give_up)
        return cr_err_set(err, CR_E_UNAVAILABLE,
                          "a service kept failing at start; see the log above");
    cr_log_info("serve: stopped");
    return CR_OK;
}
