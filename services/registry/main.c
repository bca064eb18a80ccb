/* main.c: corral-registry, the model store service.
 *
 * Parses flags, builds the server object (services/registry/server.h),
 * binds the ROUTER the gateway and scheduler talk to, and serves until
 * SIGINT/SIGTERM. */
#include "lib/prelude.h"
#include "lib/env.h"
#include "lib/log.h"
#include "lib/sd_notify.h"
#include "proto/bus.h"
#include "services/registry/doctor.h"
#include "services/registry/ops.h"
#include "services/registry/server.h"
#include "services/registry/uploads.h"

#include <czmq.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: corral-registry [--endpoint ENDPOINT] [--models DIR]\n"
            "       corral-registry doctor [--fix] [--models DIR]\n"
            "  --endpoint  socket to bind (default: CORRAL_REGISTRY_ENDPOINT or\n"
            "              ipc://$CORRAL_RUNTIME_DIR/registry.sock)\n"
            "  --models    model store (default: CORRAL_MODELS, OLLAMA_MODELS\n"
            "              or ~/.corral/models)\n");
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "doctor"))
        return reg_doctor_main(argc - 1, argv + 1);
    const char *endpoint_arg = NULL, *models_arg = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "--endpoint") || !strcmp(a, "--models")) && i + 1 < argc) {
            if (!strcmp(a, "--endpoint"))
                endpoint_arg = argv[++i];
            else
                models_arg = argv[++i];
        } else if (!strncmp(a, "--endpoint=", 11)) {
            endpoint_arg = a + 11;
        } else if (!strncmp(a, "--models=", 9)) {
            models_arg = a + 9;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            printf("corral-registry %s\n", CORRAL_VERSION);
            return 0;
        } else {
            fprintf(stderr, "corral-registry: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    cr_log_init("registry");

    char models[4096], endpoint[BUS_ENDPOINT_MAX];
    cr_err_t err;
    cr_err_clear(&err);
    if (models_arg)
        snprintf(models, sizeof models, "%s", models_arg);
    else
        cr_env_models_dir(models, sizeof models);
    if (endpoint_arg)
        snprintf(endpoint, sizeof endpoint, "%s", endpoint_arg);
    else if (bus_endpoint("registry", endpoint, sizeof endpoint, &err)) {
        cr_log_error("no endpoint: %s", err.msg);
        return 1;
    }

    int rc = 1;
    zsock_t *router = NULL;
    reg_server_t *srv = reg_server_new(models, &err);
    if (!srv) {
        cr_log_error("cannot open the model store %s: %s", models, err.msg);
        goto out;
    }
    /* An upload whose gateway died (nothing cancels it) is dropped, with
     * its temp file, after this much silence. */
    int64_t upload_ms = cr_env_duration_ms("UPLOAD_TIMEOUT", REG_UPLOAD_TIMEOUT_MS);
    if (upload_ms != REG_UPLOAD_TIMEOUT_MS && upload_ms > 0)
        reg_server_set_upload_timeout(srv, upload_ms);
    size_t removed = 0;
    if (reg_store_claim(reg_server_store(srv), &removed, &err))
        cr_log_warn("%s; temp files younger than an hour stay", err.msg);
    else if (removed)
        cr_log_info("removed %zu temp files a stopped registry left", removed);
    if (!cr_env_bool("NOPRUNE", false))
        reg_prune_store(reg_server_store(srv), 3600); /* 1 h grace, as Ollama */
    router = zsock_new(ZMQ_ROUTER);
    if (!router) {
        cr_log_error("cannot create the registry socket");
        goto out;
    }
    zsock_set_linger(router, 0);
    if (bus_listen(router, endpoint) < 0) {
        cr_log_error("cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
        goto out;
    }
    cr_log_info("serving %s on %s", reg_store_root(reg_server_store(srv)),
                endpoint);
    if (cr_sd_notify_ready(&err))
        cr_log_warn("sd_notify: %s", err.msg);
    if (reg_server_run(srv, router, &err) == CR_OK)
        rc = 0;
    else
        cr_log_error("stopped: %s", err.msg);
    cr_log_info("shutting down");
    (void)cr_sd_notify_stopping(NULL);
out:
    zsock_destroy(&router);
    reg_server_destroy(&srv);
    return rc;
}
