/* serve.h: `corral serve` lives in serve.c; its entry point is
 * cli_cmd_serve in cli.h. This header exists only so the module has its
 * contract next to it: start corral-registry, corral-scheduler and
 * corral-gateway from $CORRAL_BIN_DIR or this executable's directory, pass
 * the environment through unchanged, restart a service that dies (backoff
 * 0.5 s doubling to 30 s, reset after a minute of good running; five deaths
 * within 5 s of starting in a row stop serve with an error), forward
 * SIGTERM and SIGINT (SIGHUP as SIGTERM) to all, wait up to 10 s, then
 * SIGKILL what is left. */
#ifndef CLI_SERVE_H
#define CLI_SERVE_H

#include "cli/cli.h"

#endif
