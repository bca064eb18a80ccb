/* main.c: corral-node: joins this GPU host to a corral whose scheduler
 * listens on CORRAL_NODES_ENDPOINT (docs/deploy.md "Adding a GPU host").
 *
 * Settings come from the environment: CORRAL_NODE_SCHEDULER,
 * CORRAL_NODE_CERT, CORRAL_NODE_SERVER_CERT, CORRAL_NODE_NAME,
 * CORRAL_NODE_CACHE, CORRAL_NODE_CACHE_MAX, CORRAL_NODE_STORE, CORRAL_NODE_HEARTBEAT,
 * CORRAL_NODE_TIMEOUT, CORRAL_RUNTIME_DIR, CORRAL_GPU_INVENTORY,
 * CUDA_VISIBLE_DEVICES, CORRAL_RUNNER_BIN. */
#include "lib/prelude.h"

#include <signal.h>

#include "lib/log.h"
#include "lib/sd_notify.h"
#include "services/node/agent.h"
#include "services/node/keygen.h"

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "keygen"))
        return nd_keygen_main(argc - 1, argv + 1);
    if (argc > 1) {
        fprintf(stderr, "usage: corral-node\n"
                        "  Joins this host to a corral scheduler; configured "
                        "by the environment.\n"
                        "       corral-node keygen [--out DIR] NAME\n"
                        "  Writes a CURVE keypair for a node or the scheduler.\n");
        return strcmp(argv[1], "--help") && strcmp(argv[1], "-h") ? 2 : 0;
    }
    cr_log_init("node");
    signal(SIGPIPE, SIG_IGN);
    zsys_init();
    zsys_set_logstream(NULL);

    nd_config_t *cfg = calloc(1, sizeof *cfg);
    cr_err_t err;
    if (!cfg || nd_config_from_env(cfg, &err)) {
        cr_log_error("%s", cfg ? err.msg : "out of memory");
        free(cfg);
        return 1;
    }
    for (size_t k = 0; k < cr_inventory_lines(&cfg->inv); k++) {
        char line[512];
        cr_inventory_line(&cfg->inv, k, line, sizeof line);
        cr_log_info("%s", line);
    }
    nd_agent_t *agent = NULL;
    if (nd_agent_new(cfg, &agent, &err)) {
        cr_log_error("%s", err.msg);
        free(cfg);
        return 1;
    }
    cr_log_info("node '%s' connecting to %s (runners on %s, blob cache %s)",
                cfg->name, cfg->scheduler_endpoint, cfg->runners_endpoint,
                cfg->cache_dir);
    if (cr_sd_notify_ready(&err))
        cr_log_warn("sd_notify: %s", err.msg);
    nd_agent_run(agent);
    cr_sd_notify_stopping(NULL);
    cr_log_info("node stopping");
    nd_agent_destroy(&agent);
    free(cfg);
    return 0;
}
