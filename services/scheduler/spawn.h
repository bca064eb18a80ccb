/* spawn.h: starting and stopping runner processes.
 *
 * The scheduler is the parent of every local runner: it forks and execs
 * `corral-runner serve --endpoint EP --id ID`, and reaps exits with
 * waitpid. Nothing here knows about models or requests. */
#ifndef SCH_SPAWN_H
#define SCH_SPAWN_H

#include "lib/prelude.h"
#include "lib/status.h"

#include <sys/types.h>

/* Finds the runner binary: $CORRAL_RUNNER_BIN, else corral-runner beside
 * this executable. CR_E_NOT_FOUND if neither is executable. */
cr_status_t sch_runner_bin(char *out, size_t cap, cr_err_t *err);

/* Starts a runner; its stdout/stderr are inherited (one log stream).
 * direct (may be NULL): the endpoint it binds for direct replies. */
cr_status_t sch_spawn_runner(const char *bin, const char *endpoint,
                             const char *runner_id, const char *direct,
                             pid_t *pid_out, cr_err_t *err);

/* True if process pid runs the executable at bin (by /proc/<pid>/exe). */
bool sch_pid_is_runner(pid_t pid, const char *bin);

/* Returns the pid of one exited child (and a description of how it ended,
 * e.g. "exit status 1" or "signal 9 (Killed)") or 0 if none has exited. */
pid_t sch_reap_one(char *how, size_t cap);

#endif
