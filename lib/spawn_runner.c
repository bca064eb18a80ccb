/* spawn_runner.c: fork/exec of a runner (see spawn_runner.h). */
#include "lib/prelude.h"
#include "lib/spawn_runner.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

cr_status_t cr_spawn_runner(const char *bin, const char *endpoint,
                            const char *runner_id, const char *direct,
                            bool die_with_parent, pid_t *pid_out, cr_err_t *err)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return cr_err_set(err, CR_E_IO, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* Child: a clean signal state, then the runner. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        /* A runner that outlives its parent (the scheduler's) leads its
         * own process group: a Ctrl-C or a group signal meant for `corral
         * serve` does not kill it under a drain (the scheduler finishes
         * what it runs, then stops it). */
        if (!die_with_parent)
            setpgid(0, 0);
        if (die_with_parent) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) /* it died before prctl took effect */
                _exit(1);
        }
        if (direct && *direct)
            execl(bin, "corral-runner", "serve", "--endpoint", endpoint, "--id", runner_id,
                  "--direct", direct, (char *)NULL);
        else
            execl(bin, "corral-runner", "serve", "--endpoint", endpoint, "--id", runner_id,
                  (char *)NULL);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    *pid_out = pid;
    return CR_OK;
}
