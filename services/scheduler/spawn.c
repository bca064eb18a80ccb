/* spawn.c: fork/exec and reaping of runner processes. */
#include "lib/prelude.h"
#include "services/scheduler/spawn.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lib/env.h"
#include "lib/self_path.h"
#include "lib/spawn_runner.h"

cr_status_t sch_runner_bin(char *out, size_t cap, cr_err_t *err)
{
    return cr_sibling_bin("corral-runner", "CORRAL_RUNNER_BIN", out, cap, err);
}

cr_status_t sch_spawn_runner(const char *bin, const char *endpoint,
                             const char *runner_id, const char *direct,
                             pid_t *pid_out, cr_err_t *err)
{
    /* Not tied to the scheduler: a restarted scheduler adopts it. */
    return cr_spawn_runner(bin, endpoint, runner_id, direct, false, pid_out, err);
}

bool sch_pid_is_runner(pid_t pid, const char *bin)
{
    if (pid <= 0 || !bin || !*bin)
        return false;
    char link[64], exe[4096], want[4096];
    snprintf(link, sizeof link, "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(link, exe, sizeof exe - 1);
    if (n <= 0)
        return false;
    exe[n] = '\0';
    if (!realpath(bin, want))
        snprintf(want, sizeof want, "%s", bin);
    return !strcmp(exe, want);
}

pid_t sch_reap_one(char *how, size_t cap)
{
    int wstatus = 0;
    pid_t pid = waitpid(-1, &wstatus, WNOHANG);
    if (pid <= 0)
        return 0;
    if (WIFEXITED(wstatus))
        snprintf(how, cap, "exit status %d", WEXITSTATUS(wstatus));
    else if (WIFSIGNALED(wstatus))
        snprintf(how, cap, "signal %d (%s)", WTERMSIG(wstatus),
                 strsignal(WTERMSIG(wstatus)));
    else
        snprintf(how, cap, "status %d", wstatus);
    return pid;
}
