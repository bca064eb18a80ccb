/* spawn_runner.h: starting a runner process, for the scheduler (local
 * runners) and the node agent (runners on a GPU host).
 *
 * Forks and execs `corral-runner serve --endpoint EP --id ID [--direct D]`
 * with a clean signal state; its stdout/stderr are inherited (one log
 * stream). D, when not NULL, is the endpoint the runner binds for direct
 * replies to gateways (see `route` in proto/messages.def). */
#ifndef CR_SPAWN_RUNNER_H
#define CR_SPAWN_RUNNER_H

#include "lib/prelude.h"
#include "lib/status.h"

#include <sys/types.h>

/* Starts bin as a runner. With die_with_parent the runner is killed when
 * its parent dies, even by SIGKILL (a node agent's runners); without it
 * the runner outlives its parent (the scheduler's runners are adopted by
 * a restarted scheduler) and leads its own process group (signals sent to
 * the parent's group, a terminal's Ctrl-C, do not reach it). CR_E_IO if fork fails; an exec failure shows as
 * the child's exit status 127. */
cr_status_t cr_spawn_runner(const char *bin, const char *endpoint,
                            const char *runner_id, const char *direct,
                            bool die_with_parent, pid_t *pid_out, cr_err_t *err);

#endif
