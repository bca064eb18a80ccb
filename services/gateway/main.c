/* main.c: corral-gateway: flags, start the HTTP server, wait for a signal.
 *
 * The server and everything it does live in server.c and its modules. */
#include "lib/prelude.h"

#include <curl/curl.h>

#include "lib/env.h"
#include "lib/log.h"
#include "lib/sd_notify.h"
#include "services/gateway/server.h"

#include <czmq.h>
#include <signal.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: corral-gateway [--host HOST[:PORT]] [--version]\n"
            "\n"
            "Serves the Ollama HTTP API and forwards requests over the bus to\n"
            "corral-scheduler and corral-registry.\n"
            "\n"
            "  --host H   listen address (default: CORRAL_HOST / OLLAMA_HOST,\n"
            "             else 127.0.0.1:11434)\n"
            "  --version  print the version and exit\n"
            "\n"
            "Environment: OLLAMA_HOST, OLLAMA_ORIGINS, OLLAMA_LOAD_TIMEOUT,\n"
            "CORRAL_RUNTIME_DIR, CORRAL_SCHEDULER_ENDPOINT,\n"
            "CORRAL_REGISTRY_ENDPOINT, OLLAMA_DEBUG (each OLLAMA_ name is\n"
            "also read as CORRAL_).\n");
}

int main(int argc, char **argv)
{
    cr_log_init("gateway");
    /* libcurl's one-time setup, before any thread (remote image URLs:
     * image_fetch.c). */
    curl_global_init(CURL_GLOBAL_DEFAULT);
    gw_config_t cfg;
    cr_err_t err;
    if (gw_config_from_env(&cfg, &err)) {
        cr_log_error("%s", err.msg);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--host") && i + 1 < argc) {
            snprintf(cfg.host, sizeof cfg.host, "%s", argv[++i]);
        } else if (!strcmp(argv[i], "--version")) {
            printf("corral-gateway %s\n", CORRAL_VERSION);
            return 0;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "corral-gateway: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }

    /* Signals are taken by sigwait below: block them before any thread
     * starts so every thread inherits the mask, and keep CZMQ from
     * installing its own handlers. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    zsys_handler_set(NULL);

    gw_server_t *srv = NULL;
    if (gw_server_new(&cfg, &srv, &err)) {
        cr_log_error("cannot start: %s", err.msg);
        return 1;
    }
    if (cr_sd_notify_ready(&err))
        cr_log_warn("sd_notify: %s", err.msg);
    /* A second at a time, for the server's housekeeping. */
    int sig;
    const struct timespec tick = {1, 0};
    while ((sig = sigtimedwait(&sigs, NULL, &tick)) < 0)
        gw_server_tick(srv);
    cr_sd_notify_stopping(NULL);
    int64_t drain_ms = cr_env_duration_ms("DRAIN_TIMEOUT", 30 * 1000);
    cr_log_info("signal %d: draining (up to %.1f s), then shutting down", sig,
                (double)drain_ms / 1000);
    int left = gw_server_drain(srv, drain_ms);
    if (left)
        cr_log_warn("%d requests still running after the drain timeout; "
                    "ending them",
                    left);
    gw_server_destroy(&srv);
    return 0;
}
