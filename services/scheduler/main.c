/* main.c: corral-scheduler: the broker between gateways and runners.
 *
 * Settings come from the environment (docs/architecture.md lists them):
 * CORRAL_RUNTIME_DIR / endpoint overrides, OLLAMA_KEEP_ALIVE,
 * OLLAMA_LOAD_TIMEOUT, OLLAMA_MAX_LOADED_MODELS, OLLAMA_MAX_QUEUE,
 * OLLAMA_NUM_PARALLEL, OLLAMA_GPU_OVERHEAD, OLLAMA_SCHED_SPREAD,
 * OLLAMA_KV_CACHE_TYPE, OLLAMA_FLASH_ATTENTION, CUDA_VISIBLE_DEVICES,
 * CORRAL_GPU_INVENTORY,
 * CORRAL_HEARTBEAT_INTERVAL, CORRAL_HEARTBEAT_TIMEOUT, CORRAL_ADOPT_GRACE,
 * CORRAL_RUNNER_BIN. */
#include "lib/prelude.h"

#include <signal.h>

#include "lib/env.h"
#include "lib/log.h"
#include "lib/sd_notify.h"
#include "services/scheduler/sched.h"

static void usage(void)
{
    fprintf(stderr,
            "usage: corral-scheduler\n"
            "  Runs the scheduler; configured by the environment.\n");
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        usage();
        return strcmp(argv[1], "--help") && strcmp(argv[1], "-h") ? 2 : 0;
    }
    cr_log_init("scheduler");
    signal(SIGPIPE, SIG_IGN);
    zsys_init();
    zsys_set_logstream(NULL);

    sch_config_t cfg;
    cr_err_t err;
    if (sch_config_from_env(&cfg, &err)) {
        cr_log_error("%s", err.msg);
        return 1;
    }
    sch_server_t *server = NULL;
    if (sch_server_new(&cfg, &server, &err)) {
        cr_log_error("%s", err.msg);
        return 1;
    }
    cr_log_info("scheduler listening on %s (runners on %s)", cfg.front_endpoint,
             cfg.runners_endpoint);
    if (cr_sd_notify_ready(&err))
        cr_log_warn("sd_notify: %s", err.msg);
    sch_server_run(server);
    cr_sd_notify_stopping(NULL);
    int64_t drain_ms = cr_env_duration_ms("DRAIN_TIMEOUT", 30 * 1000);
    cr_log_info("draining: letting running requests finish (up to %.1f s)",
                (double)drain_ms / 1000);
    int left = sch_server_drain(server, drain_ms);
    if (left)
        cr_log_warn("%d requests still running after the drain timeout", left);
    cr_log_info("scheduler stopping");
    sch_server_destroy(&server);
    return 0;
}
