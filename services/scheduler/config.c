/* config.c: the scheduler's settings from the environment. */
#include "lib/prelude.h"
#include "services/scheduler/sched_int.h"

#include "lib/duration.h"
#include "lib/env.h"
#include "lib/size.h"
#include "lib/log.h"
#include "lib/runtime_dir.h"
#include "services/scheduler/spawn.h"

static int64_t env_duration_ms(const char *name, int64_t def, cr_err_t *err,
                               bool *bad)
{
    char v[64];
    if (!cr_env_get(name, v, sizeof v))
        return def;
    int64_t ms;
    if (cr_duration_parse(v, &ms, err)) {
        char var[96];
        cr_env_source(name, var, sizeof var);
        cr_err_wrap(err, "%s", var);
        *bad = true;
        return def;
    }
    return ms;
}

cr_status_t sch_config_from_env(sch_config_t *cfg, cr_err_t *err)
{
    memset(cfg, 0, sizeof *cfg);
    cr_status_t st;
    if ((st = bus_endpoint("scheduler", cfg->front_endpoint,
                           sizeof cfg->front_endpoint, err)) ||
        (st = bus_endpoint("runners", cfg->runners_endpoint,
                           sizeof cfg->runners_endpoint, err)) ||
        (st = bus_endpoint("registry", cfg->registry_endpoint,
                           sizeof cfg->registry_endpoint, err)))
        return st;
    if ((st = sch_runner_bin(cfg->runner_bin, sizeof cfg->runner_bin, err)))
        return st;
    bool bad = false;
    cfg->keep_alive_ms = env_duration_ms("KEEP_ALIVE", 5 * 60 * 1000, err, &bad);
    cfg->load_timeout_ms =
        env_duration_ms("LOAD_TIMEOUT", 5 * 60 * 1000, err, &bad);
    if (bad)
        return CR_E_INVALID;
    cfg->resolve_timeout_ms = 60 * 1000;
    cfg->max_loaded = (int)cr_env_int("MAX_LOADED_MODELS", 0);
    cfg->max_queue = (int)cr_env_int("MAX_QUEUE", 512);
    long long num_parallel = cr_env_int("NUM_PARALLEL", 1);
    cfg->gpu_overhead_bytes = cr_env_int("GPU_OVERHEAD", 0);
    if (cfg->gpu_overhead_bytes < 0)
        cfg->gpu_overhead_bytes = 0;
    cfg->sched_spread = cr_env_bool("SCHED_SPREAD", false);
    char kv[16];
    double kv_bytes;
    cfg->flash_attention = cr_env_bool("FLASH_ATTENTION", false);
    cfg->kv_cache_type[0] = '\0';
    if (cr_env_get("KV_CACHE_TYPE", kv, sizeof kv)) {
        if (!sch_kv_cache_bytes(kv, &kv_bytes))
            return cr_err_set(err, CR_E_INVALID,
                              "OLLAMA_KV_CACHE_TYPE '%s' is not f16, q8_0 or "
                              "q4_0",
                              kv);
        snprintf(cfg->kv_cache_type, sizeof cfg->kv_cache_type, "%s", kv);
        /* Ollama's rule: a quantized cache only with flash attention
         * (each model's own reasons are logged when it is planned). */
        if (kv[0] && strcmp(kv, "f16") && !cfg->flash_attention)
            cr_log_warn("OLLAMA_KV_CACHE_TYPE=%s needs OLLAMA_FLASH_ATTENTION=1: "
                        "the KV cache stays f16", kv);
    }
    cfg->heartbeat_interval_ms =
        env_duration_ms("HEARTBEAT_INTERVAL", HEARTBEAT_INTERVAL_MS, err, &bad);
    cfg->heartbeat_timeout_ms =
        env_duration_ms("HEARTBEAT_TIMEOUT", HEARTBEAT_TIMEOUT_MS, err, &bad);
    /* Unset: one heartbeat interval (0); set to 0: off (-1). */
    cfg->adopt_grace_ms = env_duration_ms("ADOPT_GRACE", 0, err, &bad);
    if (cr_env_get("ADOPT_GRACE", kv, sizeof kv) && cfg->adopt_grace_ms <= 0)
        cfg->adopt_grace_ms = -1;
    if (bad)
        return CR_E_INVALID;
    cfg->node_timeout_ms =
        env_duration_ms("NODE_TIMEOUT", NODE_TIMEOUT_MS, err, &bad);
    if (bad)
        return CR_E_INVALID;
    char sz[64];
    if (cr_env_get("STREAM_BUFFER", sz, sizeof sz) &&
        (cr_size_parse(sz, &cfg->stream_buffer_bytes, NULL) ||
         cfg->stream_buffer_bytes <= 0))
        return cr_err_set(err, CR_E_INVALID,
                          "CORRAL_STREAM_BUFFER '%s' is not a size in bytes "
                          "(e.g. 16MiB)",
                          sz);
    cfg->direct_replies = cr_env_bool("DIRECT_REPLIES", true);
    if (cr_env_get("NODES_ENDPOINT", cfg->nodes_endpoint,
                   sizeof cfg->nodes_endpoint)) {
        /* Nodes speak over the network: never without CURVE. */
        if (!cr_env_get("NODES_CERT", cfg->nodes_cert, sizeof cfg->nodes_cert))
            return cr_err_set(err, CR_E_INVALID,
                              "CORRAL_NODES_ENDPOINT needs CORRAL_NODES_CERT "
                              "(the scheduler's certificate from `corral "
                              "keygen`)");
        if (!cr_env_get("NODE_KEYS_DIR", cfg->node_keys_dir,
                        sizeof cfg->node_keys_dir))
            return cr_err_set(err, CR_E_INVALID,
                              "CORRAL_NODES_ENDPOINT needs CORRAL_NODE_KEYS_DIR "
                              "(the directory of admitted node public keys)");
        if (strncmp(cfg->nodes_endpoint, "tcp://", 6))
            return cr_err_set(err, CR_E_INVALID,
                              "CORRAL_NODES_ENDPOINT '%s' must be tcp://ADDR:PORT",
                              cfg->nodes_endpoint);
        /* Beside the sockets: private to this user, kept across a
         * restart of the scheduler (node_memo.c). */
        char dir[4000];
        if ((st = cr_runtime_dir(dir, sizeof dir, err)))
            return st;
        snprintf(cfg->node_memo, sizeof cfg->node_memo, "%s/scheduler-nodes", dir);
    }
    if ((st = cr_inventory_discover(&cfg->inventory, err)))
        return st;
    cfg->has_inventory = true;
    if (cfg->max_queue <= 0)
        cfg->max_queue = 512;
    /* The runner makes 1..SCH_NUM_PARALLEL_MAX slots and refuses other
     * counts at load: a value outside would make every load fail. */
    cfg->num_parallel = (int)num_parallel;
    if (num_parallel < 1 || num_parallel > SCH_NUM_PARALLEL_MAX) {
        cfg->num_parallel = num_parallel < 1 ? 1 : SCH_NUM_PARALLEL_MAX;
        cr_log_warn("OLLAMA_NUM_PARALLEL=%lld is outside 1..%d: using %d",
                    num_parallel, SCH_NUM_PARALLEL_MAX, cfg->num_parallel);
    }
    return CR_OK;
}

