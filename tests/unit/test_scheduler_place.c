/* test_scheduler_place.c: the scheduler's view of the machine and of
 * models: inventories (CORRAL_GPU_INVENTORY, /proc/meminfo,
 * CUDA_VISIBLE_DEVICES), GGUF memory estimates against what the runner
 * really allocates, and layer placement over 1, 2 and 8 GPUs of mixed
 * sizes (fits, splits, spills to the CPU, cannot load). All pure: no
 * processes, no GPUs. */
#include "lib/prelude.h"

#include <unistd.h>

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/engine.h"
#include "tools/synth/synth.h"
#include "services/scheduler/estimate.h"
#include "lib/gpus.h"
#include "services/scheduler/options.h"
#include "services/scheduler/place.h"
#include "tests/unit/check.h"

#define GB 1000000000LL
#define MB 1000000LL

/* ---- inventories ---- */

static void test_inventory_parse(void)
{
    cr_inventory_t inv = {0};
    cr_err_t err;
    CHECK_EQ_INT(cr_inventory_parse("0:NVIDIA H200:141000000000,1:RTX 4090:"
                                     "24000000000",
                                     &inv, &err),
                 CR_OK);
    CHECK(inv.fake);
    CHECK_EQ_INT(inv.n_gpus, 2);
    CHECK_EQ_STR(inv.gpus[0].name, "NVIDIA H200");
    CHECK_EQ_INT(inv.gpus[0].index, 0);
    CHECK(inv.gpus[0].total_bytes == 141 * GB);
    CHECK(inv.gpus[0].free_bytes == 141 * GB);
    CHECK_EQ_STR(inv.gpus[1].name, "RTX 4090");
    CHECK(inv.gpus[1].total_bytes == 24 * GB);
    CHECK_EQ_STR(inv.gpus[1].uuid, "GPU-fake-1");

    /* A name with colons; spaces around entries; a cpu: entry. */
    inv.ram_total_bytes = 5;
    CHECK_EQ_INT(cr_inventory_parse(" 3:A:B:100 , cpu:64000000000", &inv,
                                     &err),
                 CR_OK);
    CHECK_EQ_INT(inv.n_gpus, 1);
    CHECK_EQ_STR(inv.gpus[0].name, "A:B");
    CHECK_EQ_INT(inv.gpus[0].index, 3);
    CHECK(inv.ram_total_bytes == 64 * GB && inv.ram_free_bytes == 64 * GB);

    /* The log lines the services print: notes, devices, memory. */
    char line[512];
    CHECK_EQ_INT(cr_inventory_lines(&inv), 2);
    cr_inventory_line(&inv, 0, line, sizeof line);
    CHECK(strstr(line, "gpu 3: A:B (cc 0.0)") == line);
    CHECK(strstr(line, "(described by CORRAL_GPU_INVENTORY)") != NULL);
    cr_inventory_line(&inv, 1, line, sizeof line);
    CHECK_EQ_STR(line, "system memory: 59.6 GiB total, 59.6 GiB available");
    inv.n_notes = 1;
    snprintf(inv.notes[0], sizeof inv.notes[0], "no NVIDIA GPUs (x)");
    CHECK_EQ_INT(cr_inventory_lines(&inv), 3);
    cr_inventory_line(&inv, 0, line, sizeof line);
    CHECK_EQ_STR(line, "no NVIDIA GPUs (x)");
    inv.n_notes = 0;

    /* Empty and "none": no GPUs, memory untouched. */
    CHECK_EQ_INT(cr_inventory_parse("", &inv, &err), CR_OK);
    CHECK_EQ_INT(inv.n_gpus, 0);
    CHECK_EQ_INT(cr_inventory_parse("none", &inv, &err), CR_OK);
    CHECK_EQ_INT(inv.n_gpus, 0);
    CHECK(inv.ram_total_bytes == 64 * GB);
}

static void test_inventory_parse_bad(void)
{
    static const struct {
        const char *spec, *want;
    } cases[] = {
        {"0:gpu", "expected index:name:total_bytes"},
        {"gpu", "expected index:name:total_bytes"},
        {"x:gpu:100", "index 'x'"},
        {"0:gpu:lots", "total bytes 'lots'"},
        {"0:gpu:-5", "total bytes '-5'"},
        {"0:gpu:0", "total bytes '0'"},
        {"0:gpu:99999999999999999999999", "total bytes"},
        {"0::100", "empty name"},
        {"0:a:100,0:b:100", "index 0 is listed twice"},
        {"0:a:100,", "ends with a comma"},
        {"0:a:100,,1:b:5", "entry 2"},
        {"cpu:many", "cpu bytes 'many'"},
        {"5000:a:1", "index '5000'"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        cr_inventory_t inv = {0};
        cr_err_t err = {0};
        cr_status_t st = cr_inventory_parse(cases[i].spec, &inv, &err);
        CHECK_MSG(st == CR_E_INVALID, "'%s' gave %d", cases[i].spec, st);
        CHECK_MSG(strstr(err.msg, cases[i].want) != NULL, "'%s': %s",
                  cases[i].spec, err.msg);
        CHECK_EQ_INT(inv.n_gpus, 0);
    }
    /* Too many devices. */
    char spec[1024] = "";
    for (int i = 0; i < CR_MAX_GPUS + 1; i++) {
        char e[32];
        snprintf(e, sizeof e, "%s%d:g:10", i ? "," : "", i);
        strcat(spec, e);
    }
    cr_inventory_t inv = {0};
    cr_err_t err;
    CHECK_EQ_INT(cr_inventory_parse(spec, &inv, &err), CR_E_TOO_LARGE);
    /* Hostile length. */
    char *big = malloc(CR_INVENTORY_SPEC_MAX + 10);
    memset(big, '1', CR_INVENTORY_SPEC_MAX + 9);
    big[CR_INVENTORY_SPEC_MAX + 9] = '\0';
    CHECK_EQ_INT(cr_inventory_parse(big, &inv, &err), CR_E_TOO_LARGE);
    free(big);
}

static void test_meminfo(void)
{
    int64_t total = 0, avail = 0;
    cr_err_t err;
    CHECK_EQ_INT(cr_meminfo_parse("MemTotal:       16384000 kB\n"
                                   "MemFree:         1000000 kB\n"
                                   "MemAvailable:    8192000 kB\n",
                                   &total, &avail, &err),
                 CR_OK);
    CHECK(total == 16384000LL * 1024);
    CHECK(avail == 8192000LL * 1024);
    /* No MemAvailable (old kernels): MemFree. */
    CHECK_EQ_INT(cr_meminfo_parse("MemTotal: 100 kB\nMemFree: 40 kB\n",
                                   &total, &avail, &err),
                 CR_OK);
    CHECK(avail == 40 * 1024);
    /* Neither: everything. */
    CHECK_EQ_INT(cr_meminfo_parse("MemTotal: 100 kB\n", &total, &avail,
                                   &err),
                 CR_OK);
    CHECK(avail == 100 * 1024);
    /* Garbage. */
    CHECK_EQ_INT(cr_meminfo_parse("", &total, &avail, &err), CR_E_CORRUPT);
    CHECK_EQ_INT(cr_meminfo_parse("MemTotal: lots kB\n", &total, &avail,
                                   &err),
                 CR_E_CORRUPT);
    CHECK_EQ_INT(cr_meminfo_parse("MemTotal: 99999999999999999999 kB\n",
                                   &total, &avail, &err),
                 CR_E_CORRUPT);
    CHECK_EQ_INT(cr_meminfo_parse(NULL, &total, &avail, &err), CR_E_CORRUPT);
}

static void four_gpus(cr_inventory_t *inv)
{
    cr_err_t err;
    CHECK_EQ_INT(cr_inventory_parse("0:a:10,1:b:20,2:c:30,3:d:40", inv, &err),
                 CR_OK);
}

static void test_visible_devices(void)
{
    cr_inventory_t inv;
    four_gpus(&inv);
    cr_inventory_filter_visible(&inv, NULL);
    CHECK_EQ_INT(inv.n_gpus, 4);

    /* Order follows the list, numbering restarts at 0. */
    cr_inventory_filter_visible(&inv, "2,0");
    CHECK_EQ_INT(inv.n_gpus, 2);
    CHECK_EQ_STR(inv.gpus[0].name, "c");
    CHECK_EQ_INT(inv.gpus[0].index, 0);
    CHECK_EQ_STR(inv.gpus[1].name, "a");
    CHECK_EQ_INT(inv.gpus[1].index, 1);

    /* UUIDs (or prefixes of them). */
    four_gpus(&inv);
    cr_inventory_filter_visible(&inv, "GPU-fake-3, 1");
    CHECK_EQ_INT(inv.n_gpus, 2);
    CHECK_EQ_STR(inv.gpus[0].name, "d");
    CHECK_EQ_STR(inv.gpus[1].name, "b");

    /* An invalid entry ends the list, as CUDA does. */
    four_gpus(&inv);
    cr_inventory_filter_visible(&inv, "1,7,2");
    CHECK_EQ_INT(inv.n_gpus, 1);
    CHECK_EQ_STR(inv.gpus[0].name, "b");
    /* An ambiguous UUID prefix is invalid. */
    four_gpus(&inv);
    cr_inventory_filter_visible(&inv, "GPU-fake");
    CHECK_EQ_INT(inv.n_gpus, 0);
    /* Hidden: "" and "-1". */
    four_gpus(&inv);
    cr_inventory_filter_visible(&inv, "");
    CHECK_EQ_INT(inv.n_gpus, 0);
    four_gpus(&inv);
    cr_inventory_filter_visible(&inv, "-1");
    CHECK_EQ_INT(inv.n_gpus, 0);
    /* Repeats stop the list. */
    four_gpus(&inv);
    cr_inventory_filter_visible(&inv, "0,0,1");
    CHECK_EQ_INT(inv.n_gpus, 1);
}

/* NVML through dlopen: absent here is a clean CR_E_NOT_FOUND; present (a
 * GPU host) lists devices with memory. */
static void test_nvml(void)
{
    cr_inventory_t inv = {0};
    cr_err_t err;
    cr_status_t st = cr_nvml_query(&inv, &err);
    if (st) {
        CHECK(st == CR_E_NOT_FOUND || st == CR_E_UNAVAILABLE);
        CHECK_EQ_INT(inv.n_gpus, 0);
        CHECK(strlen(err.msg) > 0);
        return;
    }
    for (size_t i = 0; i < inv.n_gpus; i++) {
        fprintf(stderr, "nvml: gpu %d %s %s cc %d.%d total %" PRId64
                        " free %" PRId64 "\n",
                inv.gpus[i].index, inv.gpus[i].name, inv.gpus[i].uuid,
                inv.gpus[i].cc_major, inv.gpus[i].cc_minor,
                inv.gpus[i].total_bytes, inv.gpus[i].free_bytes);
        CHECK(inv.gpus[i].total_bytes > 0);
        CHECK(inv.gpus[i].free_bytes <= inv.gpus[i].total_bytes);
        CHECK(inv.gpus[i].name[0] != '\0');
    }
}

/* ---- estimates ---- */

static void test_kv_cache_types(void)
{
    double b = 0;
    CHECK(sch_kv_cache_bytes(NULL, &b) && b == 2.0);
    CHECK(sch_kv_cache_bytes("", &b) && b == 2.0);
    CHECK(sch_kv_cache_bytes("f16", &b) && b == 2.0);
    CHECK(sch_kv_cache_bytes("q8_0", &b) && b == 34.0 / 32);
    CHECK(sch_kv_cache_bytes("q4_0", &b) && b == 18.0 / 32);
    CHECK(!sch_kv_cache_bytes("f32", &b));
    CHECK(!sch_kv_cache_bytes("Q8_0", &b));
}

static char dir_g[256];
static int par_g = 1; /* num_parallel of the estimate and the runner */
static const char *kv_g; /* OLLAMA_KV_CACHE_TYPE of both (flash attention
                            on); NULL: f16 */
static const char *draft_g; /* the runner's draft model; NULL: none */

/* The runner's own figure for a synthetic model at num_ctx. */
static int64_t runner_bytes(const char *path, int64_t num_ctx)
{
    msg_options_t o = {0};
    o.num_ctx = num_ctx;
    o.has_num_ctx = true;
    msg_load_body_t ld = {0};
    ld.name = "synth:latest";
    ld.has_name = true;
    ld.model_path = (char *)path;
    ld.has_model_path = true;
    ld.options = &o;
    ld.has_options = true;
    ld.num_parallel = par_g;
    ld.has_num_parallel = true;
    ld.kv_cache_type = (char *)kv_g;
    ld.has_kv_cache_type = kv_g != NULL;
    ld.draft_path = (char *)draft_g;
    ld.has_draft_path = draft_g != NULL;
    rn_engine_t *e = NULL;
    cr_err_t err;
    cr_status_t st = rn_engine_load(&ld, &e, &err);
    CHECK_MSG(st == CR_OK, "load %s: %s", path, err.msg);
    if (st)
        return -1;
    int64_t n = rn_engine_size_bytes(e);
    rn_engine_destroy(&e);
    return n;
}

/* The estimate against the runner's allocation: weights, KV cache and
 * activation buffers are the same formulas, so the stated margin is 1%
 * (the runner's small host-side arrays are not in its own figure). */
static void estimate_vs_runner(const char *label, rn_synth_opts_t *so,
                               int64_t num_ctx)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s.gguf", dir_g, label);
    cr_err_t err;
    cr_status_t st = rn_synth_write(so, path, &err);
    CHECK_MSG(st == CR_OK, "synth %s: %s", label, err.msg);
    if (st)
        return;
    sch_estimate_t *est = calloc(1, sizeof *est);
    sch_estimate_opts_t eo = {.num_ctx = num_ctx, .num_parallel = par_g,
                              .kv_cache_type = kv_g, .flash_attention = true};
    st = sch_estimate_file(path, &eo, est, &err);
    CHECK_MSG(st == CR_OK, "estimate %s: %s", label, err.msg);
    /* the runner's measured fixed overhead, per backend */
    CHECK_EQ_INT(est->runner_cpu_bytes, SCH_RUNNER_CPU_BYTES);
    CHECK_EQ_INT(est->runner_cuda_host_bytes, SCH_RUNNER_CUDA_HOST_BYTES);
    cr_type_t kv_type = CR_TYPE_F16;
    CHECK(cr_kv_cache_type_parse(kv_g, &kv_type));
    CHECK_MSG(est->kv_type == kv_type, "%s: estimate's KV type %d", label, est->kv_type);
    const cr_type_info_t *kvt = cr_type_info(kv_type);
    int64_t real = runner_bytes(path, num_ctx);
    if (!st && real > 0) {
        double ratio = (double)est->cpu_total_bytes / (double)real;
        fprintf(stderr, "estimate %-12s %-4s ctx %5" PRId64 ": %" PRId64
                        " vs runner %" PRId64 " (%.4f)\n",
                label, cr_kv_cache_type_name(kv_type), est->n_ctx,
                est->cpu_total_bytes, real, ratio);
        CHECK_MSG(ratio >= 0.99 && ratio <= 1.01, "%s: estimate %" PRId64
                  " vs runner %" PRId64, label, est->cpu_total_bytes, real);
        /* KV exactly: layers x ctx x num_parallel x kv_heads x head_dim
         * x 2 x bytes per element (2; 34/32, 18/32: whole blocks), one
         * cache per slot. */
        int hd = so->head_dim ? so->head_dim : so->dim / so->n_heads;
        int64_t ctx = CR_MIN(num_ctx, (int64_t)so->ctx);
        CHECK_EQ_INT(est->kv_bytes, (int64_t)so->n_layers * ctx * par_g *
                                        so->n_kv_heads * hd * 2 *
                                        (int64_t)kvt->block_bytes /
                                        (int64_t)kvt->block_elems);
        CHECK_EQ_INT(est->n_layers, so->n_layers);
        CHECK_EQ_INT(est->n_ctx, ctx);
        /* The parts add up (a tied output counts token_embd twice). */
        int64_t layers = 0;
        for (int l = 0; l < est->n_layers; l++)
            layers += est->layer_bytes[l];
        if (!so->tied_output)
            CHECK_EQ_INT(layers + est->embd_bytes + est->output_bytes,
                         est->weights_bytes + est->kv_bytes);
        CHECK(est->graph_bytes > est->cpu_graph_bytes);
    }
    free(est);
    unlink(path);
}

/* The runner really stores the quantized cache (it does not silently stay
 * f16): its allocation shrinks from the f16 one by exactly the KV bytes
 * the estimate saves, and the estimate stays within 1% of it. */
static void kv_types_vs_runner(const char *label, rn_synth_opts_t *so, int64_t num_ctx)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s-kv.gguf", dir_g, label);
    cr_err_t err;
    CHECK_EQ_INT(rn_synth_write(so, path, &err), CR_OK);
    static const char *const types[] = {"f16", "q8_0", "q4_0"};
    int64_t real[3], kv[3];
    sch_estimate_t *est = calloc(1, sizeof *est);
    for (int i = 0; i < 3; i++) {
        kv_g = types[i];
        sch_estimate_opts_t eo = {.num_ctx = num_ctx, .num_parallel = par_g,
                                  .kv_cache_type = kv_g, .flash_attention = true};
        CHECK_EQ_INT(sch_estimate_file(path, &eo, est, &err), CR_OK);
        kv[i] = est->kv_bytes;
        real[i] = runner_bytes(path, num_ctx);
        CHECK_MSG(real[i] > 0 && (double)est->cpu_total_bytes >= 0.99 * (double)real[i] &&
                      (double)est->cpu_total_bytes <= 1.01 * (double)real[i],
                  "%s %s: estimate %" PRId64 " vs runner %" PRId64, label, kv_g,
                  est->cpu_total_bytes, real[i]);
    }
    for (int i = 1; i < 3; i++) {
        fprintf(stderr, "runner %-12s %s: %" PRId64 " bytes, %" PRId64 " less than f16 "
                "(estimate's KV: %" PRId64 " less)\n", label, types[i], real[i],
                real[0] - real[i], kv[0] - kv[i]);
        CHECK_MSG(real[0] - real[i] == kv[0] - kv[i], "%s %s: runner saved %" PRId64
                  ", estimate %" PRId64, label, types[i], real[0] - real[i], kv[0] - kv[i]);
    }
    kv_g = NULL;
    free(est);
    unlink(path);
}

/* A draft model (speculative decoding) is charged on the CPU with its
 * weights, a KV cache per slot and its activations: the estimate with it
 * is within the same 1% of the runner's figure with it, and the draft's
 * share is exactly its own estimate's CPU total. A draft that is no model
 * is an error naming the draft. */
static void test_estimate_draft(void)
{
    char target[400], draft[400], empty[400];
    snprintf(target, sizeof target, "%s/draft-target.gguf", dir_g);
    snprintf(draft, sizeof draft, "%s/draft-draft.gguf", dir_g);
    snprintf(empty, sizeof empty, "%s/draft-empty.gguf", dir_g);
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.dim = 128;
    so.ffn = 256;
    so.ctx = 512;
    so.type = CR_TYPE_Q8_0;
    cr_err_t err;
    CHECK_EQ_INT(rn_synth_write(&so, target, &err), CR_OK);
    so.type = CR_TYPE_Q4_0;
    CHECK_EQ_INT(rn_synth_write(&so, draft, &err), CR_OK);
    cr_gguf_writer_t *w = cr_gguf_writer_new(); /* no hyperparameters */
    CHECK(w && !cr_gguf_writer_add_str(w, "general.architecture", "llama", NULL));
    CHECK(!cr_gguf_writer_write(w, empty, NULL));
    cr_gguf_writer_destroy(&w);
    par_g = 2;
    sch_estimate_t *est = calloc(1, sizeof *est), *alone = calloc(1, sizeof *alone);
    sch_estimate_opts_t eo = {.num_ctx = 512, .num_parallel = par_g};
    CHECK_EQ_INT(sch_estimate_file(target, &eo, est, &err), CR_OK);
    CHECK_EQ_INT(sch_estimate_file(draft, &eo, alone, &err), CR_OK);
    int64_t before = est->cpu_total_bytes, embd = est->embd_bytes;
    cr_gguf_t *g = NULL;
    CHECK_EQ_INT(cr_gguf_open(draft, &g, &err), CR_OK);
    CHECK_EQ_INT(sch_estimate_add_draft(est, g, &eo, &err), CR_OK);
    cr_gguf_close(&g);
    CHECK_EQ_INT(est->draft_bytes, alone->cpu_total_bytes);
    CHECK_EQ_INT(est->cpu_total_bytes, before + alone->cpu_total_bytes);
    CHECK_EQ_INT(est->embd_bytes, embd + alone->cpu_total_bytes);
    draft_g = draft;
    int64_t real = runner_bytes(target, 512);
    draft_g = NULL;
    int64_t real_alone = runner_bytes(target, 512);
    if (real > 0 && real_alone > 0) {
        double ratio = (double)est->cpu_total_bytes / (double)real;
        fprintf(stderr, "estimate with a draft: %" PRId64 " vs runner %" PRId64
                        " (%.4f); the draft adds %" PRId64 " to the runner\n",
                est->cpu_total_bytes, real, ratio, real - real_alone);
        CHECK_MSG(ratio >= 0.99 && ratio <= 1.01, "estimate %" PRId64 " vs runner %" PRId64,
                  est->cpu_total_bytes, real);
    }
    CHECK_EQ_INT(cr_gguf_open(empty, &g, &err), CR_OK);
    if (g) {
        CHECK(sch_estimate_add_draft(est, g, &eo, &err) != CR_OK);
        CHECK_MSG(strstr(err.msg, "draft model") != NULL, "message: %s", err.msg);
    }
    cr_gguf_close(&g);
    par_g = 1;
    free(est);
    free(alone);
    unlink(target);
    unlink(draft);
    unlink(empty);
}

static void test_estimate_vs_runner(void)
{
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    estimate_vs_runner("llama-f32", &so, 256);
    estimate_vs_runner("llama-short", &so, 64);
    /* Asked for more than the trained context: capped like the runner. */
    estimate_vs_runner("llama-capped", &so, 100000);
    /* Parallel slots: a KV cache each, the activation buffers shared. */
    par_g = 4;
    estimate_vs_runner("llama-par4", &so, 256);
    par_g = 1;

    rn_synth_defaults(&so);
    so.type = CR_TYPE_Q8_0;
    so.mix = true;
    so.mix_type = CR_TYPE_Q6_K;
    so.dim = 256;
    so.ffn = 512;
    so.n_layers = 4;
    so.n_heads = 8;
    so.n_kv_heads = 2;
    so.ctx = 1024;
    estimate_vs_runner("llama-q8-mix", &so, 1024);

    rn_synth_defaults(&so);
    so.arch = "qwen3";
    so.head_dim = 32;
    so.n_layers = 3;
    estimate_vs_runner("qwen3", &so, 200);

    rn_synth_defaults(&so);
    so.arch = "gemma2";
    so.tied_output = true;
    so.head_dim = 32;
    estimate_vs_runner("gemma2-tied", &so, 128);

    /* Experts: every expert's weights are resident and counted (a token
     * reads only the chosen ones, memory holds them all), the FFN buffers
     * are one expert's. */
    rn_synth_defaults(&so);
    so.arch = "qwen3moe";
    so.head_dim = 32;
    so.ffn = 512; /* feed_forward_length: no tensor has it */
    so.n_experts = 16;
    so.n_experts_used = 4;
    so.expert_ffn = 64;
    so.shared_ffn = 96;
    so.shared_gate = true;
    estimate_vs_runner("qwen3moe", &so, 256);
    rn_synth_defaults(&so);
    so.n_experts = 8;
    so.n_experts_used = 2;
    so.type = CR_TYPE_Q8_0;
    estimate_vs_runner("llama-moe-q8", &so, 256);

    /* Quantized KV caches (head_dim 32: whole blocks per head). */
    static const char *const kv_types[] = {"q8_0", "q4_0"};
    for (size_t i = 0; i < CR_ARRAY_LEN(kv_types); i++) {
        kv_g = kv_types[i];
        rn_synth_defaults(&so);
        so.dim = 128;
        so.ctx = 1024;
        estimate_vs_runner("llama-kvq", &so, 1024);
        par_g = 3;
        estimate_vs_runner("llama-kvq-par3", &so, 512);
        par_g = 1;
        rn_synth_defaults(&so);
        so.arch = "gemma2";
        so.tied_output = true;
        so.head_dim = 32;
        estimate_vs_runner("gemma2-kvq", &so, 256);
        kv_g = NULL;
    }
    rn_synth_defaults(&so);
    so.arch = "qwen3";
    so.head_dim = 32;
    so.ctx = 2048;
    kv_types_vs_runner("qwen3", &so, 2048);

    /* A load asking for q8_0 on head_dim 16 (the scheduler never sends
     * that): the engine warns and keeps f16 rather than failing; an
     * unknown type fails the load, naming it. */
    rn_synth_defaults(&so);
    char path[400];
    snprintf(path, sizeof path, "%s/hd16.gguf", dir_g);
    cr_err_t err;
    CHECK_EQ_INT(rn_synth_write(&so, path, &err), CR_OK);
    int64_t f16 = runner_bytes(path, 256);
    kv_g = "q8_0";
    CHECK_EQ_INT(runner_bytes(path, 256), f16);
    msg_load_body_t ld = {.name = "hd16", .has_name = true, .model_path = path,
                          .has_model_path = true, .kv_cache_type = "q5_0",
                          .has_kv_cache_type = true};
    rn_engine_t *e = NULL;
    CHECK_EQ_INT(rn_engine_load(&ld, &e, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "kv_cache_type 'q5_0'") != NULL);
    CHECK(e == NULL);
    kv_g = NULL;
    unlink(path);

    /* the dense families of issue 13; mistral3 as Ollama ships it, with
     * vision tensors the runner does not load (nor the estimate count) */
    rn_synth_defaults(&so);
    so.arch = "granite";
    estimate_vs_runner("granite", &so, 128);
    rn_synth_defaults(&so);
    so.arch = "olmo2";
    so.n_layers = 3;
    estimate_vs_runner("olmo2", &so, 200);
    rn_synth_defaults(&so);
    so.arch = "cohere2";
    so.tied_output = true; /* as synth writes it anyway */
    estimate_vs_runner("cohere2", &so, 128);
    rn_synth_defaults(&so);
    so.arch = "mistral3";
    so.head_dim = 32;
    so.vision_stub = true;
    estimate_vs_runner("mistral3-vis", &so, 256);
    /* the vision tensors count for nothing: same estimate without them */
    int64_t with[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        so.vision_stub = i == 0;
        void *data = NULL;
        size_t len = 0;
        cr_gguf_t *g = NULL;
        sch_estimate_t *est = calloc(1, sizeof *est);
        if (est && !rn_synth_write_memory(&so, &data, &len, &err) &&
            !cr_gguf_open_memory(data, len, &g, &err) &&
            !sch_estimate_gguf(g, NULL, est, &err))
            with[i] = est->weights_bytes;
        cr_gguf_close(&g);
        free(data);
        free(est);
    }
    CHECK(with[0] > 0 && with[0] == with[1]);
}

/* A MoE file's layer holds all its experts: the estimate's layer bytes are
 * its tensors', experts included, E times one expert's stack share. */
static void test_estimate_experts(void)
{
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.arch = "qwen3moe";
    so.head_dim = 32;
    so.n_experts = 16;
    so.n_experts_used = 2;
    so.expert_ffn = 64;
    void *data = NULL;
    size_t len = 0;
    cr_err_t err;
    CHECK_EQ_INT(rn_synth_write_memory(&so, &data, &len, &err), CR_OK);
    cr_gguf_t *g = NULL;
    if (!data || cr_gguf_open_memory(data, len, &g, &err)) {
        free(data);
        CHECK(false);
        return;
    }
    sch_estimate_t *a = calloc(1, sizeof *a);
    sch_estimate_opts_t eo = {.num_ctx = 256};
    CHECK_EQ_INT(sch_estimate_gguf(g, &eo, a, &err), CR_OK);
    int64_t blk0 = 0, exps = 0;
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (!strncmp(t->name, "blk.0.", 6))
            blk0 += (int64_t)t->size_bytes;
        if (!strncmp(t->name, "blk.0.", 6) && strstr(t->name, "_exps."))
            exps += (int64_t)t->size_bytes;
    }
    /* 3 stacks of 16 experts of 64 x 64 F32 */
    CHECK_EQ_INT(exps, 3 * 16 * 64 * 64 * 4);
    CHECK_EQ_INT(a->layer_bytes[0] - a->kv_bytes / a->n_layers, blk0);
    free(a);
    cr_gguf_close(&g);
    free(data);
}

static void test_estimate_scaling_and_bad(void)
{
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.ctx = 4096;
    so.dim = 128; /* head_dim 32: whole Q8_0 / Q4_0 blocks per head */
    void *data = NULL;
    size_t len = 0;
    cr_err_t err;
    CHECK_EQ_INT(rn_synth_write_memory(&so, &data, &len, &err), CR_OK);
    cr_gguf_t *g = NULL;
    CHECK_EQ_INT(cr_gguf_open_memory(data, len, &g, &err), CR_OK);
    if (!g) {
        free(data);
        return;
    }
    sch_estimate_t *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    sch_estimate_opts_t eo = {.num_ctx = 1024};
    CHECK_EQ_INT(sch_estimate_gguf(g, &eo, a, &err), CR_OK);
    /* num_parallel and the KV cache type scale the cache alone. */
    eo.num_parallel = 4;
    CHECK_EQ_INT(sch_estimate_gguf(g, &eo, b, &err), CR_OK);
    CHECK_EQ_INT(b->kv_bytes, 4 * a->kv_bytes);
    CHECK_EQ_INT(b->weights_bytes, a->weights_bytes);
    eo.num_parallel = 1;
    CHECK_EQ_INT(a->kv_type, CR_TYPE_F16);
    eo.kv_cache_type = "q8_0";
    eo.flash_attention = true;
    CHECK_EQ_INT(sch_estimate_gguf(g, &eo, b, &err), CR_OK);
    CHECK_EQ_INT(b->kv_type, CR_TYPE_Q8_0);
    CHECK_EQ_STR(b->kv_note, "");
    CHECK_EQ_INT(b->kv_bytes, a->kv_bytes * 17 / 32);
    eo.kv_cache_type = "q4_0";
    CHECK_EQ_INT(sch_estimate_gguf(g, &eo, b, &err), CR_OK);
    CHECK_EQ_INT(b->kv_type, CR_TYPE_Q4_0);
    CHECK_EQ_INT(b->kv_bytes, a->kv_bytes * 9 / 32);
    /* Ollama's rule: without flash attention the cache stays f16 */
    eo.flash_attention = false;
    CHECK_EQ_INT(sch_estimate_gguf(g, &eo, b, &err), CR_OK);
    CHECK_EQ_INT(b->kv_type, CR_TYPE_F16);
    CHECK_EQ_INT(b->kv_bytes, a->kv_bytes);
    CHECK(strstr(b->kv_note, "OLLAMA_FLASH_ATTENTION") != NULL);
    eo.kv_cache_type = "q5_0";
    CHECK_EQ_INT(sch_estimate_gguf(g, &eo, b, &err), CR_E_INVALID);
    eo.kv_cache_type = NULL;
    /* Default context (4096) and the floor of 4. */
    sch_estimate_opts_t dflt = {0};
    CHECK_EQ_INT(sch_estimate_gguf(g, &dflt, b, &err), CR_OK);
    CHECK_EQ_INT(b->n_ctx, 4096);
    dflt.num_ctx = 1;
    CHECK_EQ_INT(sch_estimate_gguf(g, &dflt, b, &err), CR_OK);
    CHECK_EQ_INT(b->n_ctx, 4);
    /* Layer sizes are equal across identical blocks and add up. */
    CHECK_EQ_INT(a->layer_bytes[0], a->layer_bytes[1]);
    CHECK(a->output_bytes > 0 && a->embd_bytes > 0);
    cr_gguf_close(&g);
    free(data);

    /* Metadata only (no tensors): estimates nothing to place but works. */
    so.vocab_only = true;
    CHECK_EQ_INT(rn_synth_write_memory(&so, &data, &len, &err), CR_OK);
    CHECK_EQ_INT(cr_gguf_open_memory(data, len, &g, &err), CR_OK);
    if (g) {
        CHECK_EQ_INT(sch_estimate_gguf(g, &eo, b, &err), CR_OK);
        CHECK_EQ_INT(b->weights_bytes, 0);
        cr_gguf_close(&g);
    }
    free(data);

    /* A file that is not a GGUF: the path is in the message. */
    char path[400];
    snprintf(path, sizeof path, "%s/garbage.gguf", dir_g);
    FILE *f = fopen(path, "wb");
    fputs("this is not a model", f);
    fclose(f);
    CHECK(sch_estimate_file(path, &eo, b, &err) != CR_OK);
    CHECK(strstr(err.msg, "garbage.gguf") != NULL);
    unlink(path);
    CHECK_EQ_INT(sch_estimate_file("/nonexistent/x.gguf", &eo, b, &err),
                 CR_E_IO);
    free(a);
    free(b);
}

/* ---- placement ---- */

/* A llama-7B-like estimate: 32 layers of 200 MB (weights + KV), a 300 MB
 * output layer with 100 MB of embeddings, a 400 MB compute buffer. Whole
 * on one GPU: 32 x 200 + 400 + 400 = 7.2 GB. */
static void model_7b(sch_estimate_t *e)
{
    memset(e, 0, sizeof *e);
    e->n_layers = 32;
    for (int l = 0; l < 32; l++)
        e->layer_bytes[l] = 200 * MB;
    e->output_bytes = 300 * MB;
    e->embd_bytes = 100 * MB;
    e->graph_bytes = 400 * MB;
    e->cpu_graph_bytes = 300 * MB;
    e->kv_bytes = 32 * 50 * MB;
    e->weights_bytes = 32 * 150 * MB + 400 * MB;
    e->cpu_total_bytes = e->weights_bytes + e->kv_bytes + e->cpu_graph_bytes;
}

/* n layers of `layer` bytes each (for big models). */
static void model_n(sch_estimate_t *e, int n, int64_t layer)
{
    model_7b(e);
    e->n_layers = n;
    for (int l = 0; l < n; l++)
        e->layer_bytes[l] = layer;
}

static int64_t sum_layers(const sch_estimate_t *e, int from, int to)
{
    int64_t s = 0;
    for (int l = from; l < to; l++)
        s += l < e->n_layers ? e->layer_bytes[l]
                             : e->output_bytes + e->embd_bytes;
    return s;
}

/* Invariants every plan keeps: contiguous ranges ending at the last layer,
 * bytes that add up, nothing over a GPU's free memory. */
static void check_plan(const cr_inventory_t *inv, const int64_t *free_b,
                       const sch_estimate_t *e, const sch_place_opts_t *o,
                       const sch_plan_t *p)
{
    int n_total = e->n_layers + 1;
    CHECK_EQ_INT(p->n_layers_total, n_total);
    int next = n_total - p->gpu_layers;
    int64_t vram = 0;
    for (size_t j = 0; j < p->n_devs; j++) {
        const sch_plan_dev_t *d = &p->devs[j];
        CHECK_EQ_INT(d->first_layer, next);
        CHECK(d->n_layers > 0);
        next += d->n_layers;
        CHECK_EQ_INT(d->bytes, sum_layers(e, d->first_layer,
                                          d->first_layer + d->n_layers) +
                                   e->graph_bytes + o->gpu_overhead_bytes);
        CHECK_MSG(d->bytes <= free_b[d->slot], "gpu %d: %" PRId64 " > %" PRId64,
                  d->index, d->bytes, free_b[d->slot]);
        CHECK_EQ_INT(d->index, inv->gpus[d->slot].index);
        vram += d->bytes;
    }
    CHECK_EQ_INT(next, n_total);
    CHECK_EQ_INT(p->vram_bytes, vram);
    int64_t cpu = sum_layers(e, 0, n_total - p->gpu_layers) +
                  (p->gpu_layers < n_total ? e->cpu_graph_bytes : 0);
    CHECK_EQ_INT(p->cpu_bytes, cpu);
    CHECK_EQ_INT(p->runner_bytes,
                 e->runner_cpu_bytes + (p->n_devs > 0 ? e->runner_cuda_host_bytes : 0));
    CHECK_EQ_INT(p->total_bytes, p->vram_bytes + p->cpu_bytes);
    CHECK_EQ_INT(p->full_offload, p->gpu_layers == n_total);
}

typedef struct placed {
    cr_inventory_t inv;
    int64_t free_b[CR_MAX_GPUS];
    sch_plan_t plan;
    cr_status_t st;
    cr_err_t err;
} placed_t;

static void place(placed_t *p, const char *spec, int64_t ram,
                  const sch_estimate_t *e, const sch_place_opts_t *o)
{
    memset(p, 0, sizeof *p);
    CHECK_EQ_INT(cr_inventory_parse(spec, &p->inv, &p->err), CR_OK);
    for (size_t i = 0; i < p->inv.n_gpus; i++)
        p->free_b[i] = p->inv.gpus[i].free_bytes;
    p->st = sch_place(&p->inv, p->free_b, ram, e, o, &p->plan, &p->err);
    check_plan(&p->inv, p->free_b, e, o, &p->plan);
}

static const sch_place_opts_t AUTO = {.num_gpu = -1, .main_gpu = -1};

static void test_place_one_gpu(void)
{
    sch_estimate_t *e = calloc(1, sizeof *e);
    placed_t *p = calloc(1, sizeof *p);
    model_7b(e);

    /* Fits: everything on the GPU, nothing on the CPU. */
    place(p, "0:RTX 4090:24000000000", 64 * GB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_OK);
    CHECK(p->plan.full_offload);
    CHECK_EQ_INT(p->plan.n_devs, 1);
    CHECK_EQ_INT(p->plan.gpu_layers, 33);
    CHECK_EQ_INT(p->plan.cpu_bytes, 0);
    CHECK_EQ_INT(p->plan.vram_bytes, 7200 * MB);

    /* Just fits, then one byte short: the first layer spills. */
    char spec[64];
    snprintf(spec, sizeof spec, "0:g:%lld", 7200 * MB);
    place(p, spec, 64 * GB, e, &AUTO);
    CHECK(p->plan.full_offload);
    snprintf(spec, sizeof spec, "0:g:%lld", 7200 * MB - 1);
    place(p, spec, 64 * GB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_OK);
    CHECK(!p->plan.full_offload);
    CHECK_EQ_INT(p->plan.gpu_layers, 32);
    CHECK_EQ_INT(p->plan.cpu_bytes, 200 * MB + 300 * MB);

    /* Spills: an 8 GB card... no, a 4 GB card holds the output layer and
     * (4000 - 400 - 400) / 200 = 16 blocks; 16 blocks stay on the CPU. */
    place(p, "0:small:4000000000", 64 * GB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_OK);
    CHECK_EQ_INT(p->plan.gpu_layers, 17);
    CHECK_EQ_INT(p->plan.devs[0].first_layer, 16);
    CHECK_EQ_INT(p->plan.cpu_bytes, 16 * 200 * MB + 300 * MB);

    /* OLLAMA_GPU_OVERHEAD takes room: 2 layers fewer per 400 MB. */
    sch_place_opts_t o = AUTO;
    o.gpu_overhead_bytes = 400 * MB;
    place(p, "0:small:4000000000", 64 * GB, e, &o);
    CHECK_EQ_INT(p->plan.gpu_layers, 15);

    /* A GPU that cannot hold its graph and one layer is not used. */
    place(p, "0:tiny:500000000", 64 * GB, e, &AUTO);
    CHECK_EQ_INT(p->plan.gpu_layers, 0);
    CHECK_EQ_INT(p->plan.n_devs, 0);
    CHECK_EQ_INT(p->plan.vram_bytes, 0);

    /* num_gpu 0: CPU only even with room on the GPU. */
    o = AUTO;
    o.num_gpu = 0;
    place(p, "0:big:80000000000", 64 * GB, e, &o);
    CHECK_EQ_INT(p->plan.gpu_layers, 0);
    CHECK_EQ_INT(p->plan.cpu_bytes, sum_layers(e, 0, 33) + 300 * MB);

    /* num_gpu 5: the last five layers (four blocks and the output). */
    o.num_gpu = 5;
    place(p, "0:big:80000000000", 64 * GB, e, &o);
    CHECK_EQ_INT(p->plan.gpu_layers, 5);
    CHECK_EQ_INT(p->plan.devs[0].first_layer, 28);
    /* num_gpu above the layer count: all of them. */
    o.num_gpu = 999;
    place(p, "0:big:80000000000", 64 * GB, e, &o);
    CHECK(p->plan.full_offload);
    /* num_gpu that does not fit is clamped to what does. */
    o.num_gpu = 33;
    place(p, "0:small:4000000000", 64 * GB, e, &o);
    CHECK_EQ_INT(p->plan.gpu_layers, 17);

    /* No GPU at all: the CPU, within system memory... */
    place(p, "", 64 * GB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_OK);
    CHECK_EQ_INT(p->plan.n_devs, 0);
    CHECK_EQ_INT(p->plan.total_bytes, p->plan.cpu_bytes);
    /* ...or not at all, in Ollama's words. */
    place(p, "", 2 * GB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_E_NOMEM);
    CHECK(strstr(p->err.msg, "model requires more system memory (") != NULL);
    CHECK(strstr(p->err.msg, "than is available (1.9 GiB)") != NULL);
    /* A partial offload needs only the CPU part in memory. */
    place(p, "0:small:4000000000", 4 * GB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_OK);
    place(p, "0:small:4000000000", 3 * GB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_E_NOMEM);
    /* Unknown system memory (0) is not checked. */
    place(p, "", 0, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_OK);
    free(p);
    free(e);
}

static void test_place_two_gpus(void)
{
    sch_estimate_t *e = calloc(1, sizeof *e);
    placed_t *p = calloc(1, sizeof *p);
    model_7b(e);

    /* Fits on either: the one with the most free memory. */
    place(p, "0:A:16000000000,1:B:24000000000", 64 * GB, e, &AUTO);
    CHECK_EQ_INT(p->plan.n_devs, 1);
    CHECK_EQ_INT(p->plan.devs[0].index, 1);
    /* main_gpu picks the other. */
    sch_place_opts_t o = AUTO;
    o.main_gpu = 0;
    place(p, "0:A:16000000000,1:B:24000000000", 64 * GB, e, &o);
    CHECK_EQ_INT(p->plan.n_devs, 1);
    CHECK_EQ_INT(p->plan.devs[0].index, 0);
    /* A main_gpu that does not exist is ignored. */
    o.main_gpu = 9;
    place(p, "0:A:16000000000,1:B:24000000000", 64 * GB, e, &o);
    CHECK_EQ_INT(p->plan.devs[0].index, 1);

    /* The free memory given (what the ledger left), not the total, counts. */
    CHECK_EQ_INT(cr_inventory_parse("0:A:16000000000,1:B:24000000000",
                                     &p->inv, &p->err),
                 CR_OK);
    int64_t free_b[2] = {16 * GB, 5 * GB};
    CHECK_EQ_INT(sch_place(&p->inv, free_b, 64 * GB, e, &AUTO, &p->plan,
                           &p->err),
                 CR_OK);
    check_plan(&p->inv, free_b, e, &AUTO, &p->plan);
    CHECK_EQ_INT(p->plan.devs[0].index, 0);
    CHECK(p->plan.full_offload);

    /* Spread: both GPUs even though one would do, shares by free memory
     * (16:24 of 6.8 GB of layers: about 2.7 and 4.1 GB). */
    o = AUTO;
    o.spread = true;
    place(p, "0:A:16000000000,1:B:24000000000", 64 * GB, e, &o);
    CHECK(p->plan.full_offload);
    CHECK_EQ_INT(p->plan.n_devs, 2);
    CHECK_EQ_INT(p->plan.devs[0].index, 1); /* most free first */
    CHECK_EQ_INT(p->plan.devs[0].n_layers, 20);
    CHECK_EQ_INT(p->plan.devs[1].n_layers, 13);

    /* Needs both: 6 GB cards hold 26 blocks each way, so split. */
    place(p, "0:A:6000000000,1:B:6000000000", 64 * GB, e, &AUTO);
    CHECK(p->plan.full_offload);
    CHECK_EQ_INT(p->plan.n_devs, 2);
    CHECK(abs(p->plan.devs[0].n_layers - p->plan.devs[1].n_layers) <= 1);

    /* Neither both: partial offload over both, the rest on the CPU. */
    place(p, "0:A:3000000000,1:B:3000000000", 64 * GB, e, &AUTO);
    CHECK(!p->plan.full_offload);
    CHECK_EQ_INT(p->plan.n_devs, 2);
    /* (3000 - 400) / 200 = 13 layers on each; the output layer is 400. */
    CHECK_EQ_INT(p->plan.gpu_layers, 25);
    CHECK(p->plan.cpu_bytes > 0);
    free(p);
    free(e);
}

static void test_place_eight_gpus(void)
{
    sch_estimate_t *e = calloc(1, sizeof *e);
    placed_t *p = calloc(1, sizeof *p);
    const char *spec = "0:H100:80000000000,1:H100:80000000000,"
                       "2:A100:40000000000,3:A100:40000000000,"
                       "4:RTX 4090:24000000000,5:RTX 4090:24000000000,"
                       "6:RTX 4080:16000000000,7:T4:16000000000";
    /* 60 GB: one H100. */
    model_n(e, 80, 740 * MB);
    place(p, spec, 512 * GB, e, &AUTO);
    CHECK(p->plan.full_offload);
    CHECK_EQ_INT(p->plan.n_devs, 1);
    CHECK(p->plan.devs[0].index == 0 || p->plan.devs[0].index == 1);

    /* 140 GB: the two H100s. */
    model_n(e, 80, 1740 * MB);
    place(p, spec, 512 * GB, e, &AUTO);
    CHECK(p->plan.full_offload);
    CHECK_EQ_INT(p->plan.n_devs, 2);
    CHECK(p->plan.devs[0].index <= 1 && p->plan.devs[1].index <= 1);

    /* 200 GB: the fewest that hold it are the H100s and both A100s. */
    model_n(e, 100, 2000 * MB);
    place(p, spec, 512 * GB, e, &AUTO);
    CHECK(p->plan.full_offload);
    CHECK_EQ_INT(p->plan.n_devs, 4);
    for (size_t j = 0; j < p->plan.n_devs; j++)
        CHECK(p->plan.devs[j].index <= 3);

    /* Spread: all eight. */
    sch_place_opts_t o = AUTO;
    o.spread = true;
    place(p, spec, 512 * GB, e, &o);
    CHECK(p->plan.full_offload);
    CHECK_EQ_INT(p->plan.n_devs, 8);

    /* 400 GB (more than the 320 GB of all of them): spill to the CPU. */
    model_n(e, 100, 4000 * MB);
    place(p, spec, 512 * GB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_OK);
    CHECK(!p->plan.full_offload);
    CHECK_EQ_INT(p->plan.n_devs, 8);
    CHECK(p->plan.gpu_layers > 60 && p->plan.gpu_layers < 80);

    /* ...and with too little system memory for the rest: cannot load. */
    place(p, spec, 64 * GB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_E_NOMEM);
    free(p);
    free(e);
}

static void test_plan_describe(void)
{
    sch_estimate_t *e = calloc(1, sizeof *e);
    placed_t *p = calloc(1, sizeof *p);
    model_7b(e);
    place(p, "0:A:6000000000,1:B:6000000000", 64 * GB, e, &AUTO);
    char text[256];
    sch_plan_describe(&p->plan, text, sizeof text);
    CHECK(strstr(text, "33 of 33 layers on GPU") == text);
    CHECK(strstr(text, "gpu 0: layers 0-") != NULL);
    CHECK(strstr(text, "cpu: 0 layers") != NULL);
    char small[16];
    sch_plan_describe(&p->plan, small, sizeof small); /* truncates safely */
    CHECK(strlen(small) < sizeof small);
    free(p);
    free(e);
}

/* The default context by VRAM tier, as Ollama; OLLAMA_CONTEXT_LENGTH wins. */
static void test_default_ctx(void)
{
    unsetenv("CORRAL_CONTEXT_LENGTH");
    unsetenv("OLLAMA_CONTEXT_LENGTH");
    const int64_t gib = 1LL << 30;
    CHECK_EQ_INT(sch_options_default_ctx(0), 4096);
    CHECK_EQ_INT(sch_options_default_ctx(23 * gib - 1), 4096);
    CHECK_EQ_INT(sch_options_default_ctx(23 * gib), 32768);
    CHECK_EQ_INT(sch_options_default_ctx(47 * gib - 1), 32768);
    CHECK_EQ_INT(sch_options_default_ctx(141 * gib), 262144);
    setenv("OLLAMA_CONTEXT_LENGTH", "8192", 1);
    CHECK_EQ_INT(sch_options_default_ctx(141 * gib), 8192);
    setenv("OLLAMA_CONTEXT_LENGTH", "garbage", 1);
    CHECK_EQ_INT(sch_options_default_ctx(0), 4096);
    unsetenv("OLLAMA_CONTEXT_LENGTH");
}

/* The runner process's own memory counts on the host: its CPU overhead in
 * every plan, the CUDA module's only in one with GPU layers; the model's
 * size (ps) leaves both out, and the system memory check counts them. */
static void test_place_runner_overhead(void)
{
    sch_estimate_t *e = calloc(1, sizeof *e);
    placed_t *p = calloc(1, sizeof *p);
    model_7b(e);
    e->runner_cpu_bytes = 12 * MB;
    e->runner_cuda_host_bytes = 160 * MB;
    place(p, "", 64 * GB, e, &AUTO); /* CPU only */
    CHECK_EQ_INT(p->plan.runner_bytes, 12 * MB);
    CHECK_EQ_INT(p->plan.cpu_bytes, sum_layers(e, 0, 33) + 300 * MB);
    place(p, "0:RTX 4090:24000000000", 64 * GB, e, &AUTO); /* all on the GPU */
    CHECK(p->plan.full_offload);
    CHECK_EQ_INT(p->plan.runner_bytes, 172 * MB);
    CHECK_EQ_INT(p->plan.total_bytes, 7200 * MB);
    sch_place_opts_t o = AUTO;
    o.num_gpu = 0; /* a GPU host, a CPU plan: no CUDA module loaded */
    place(p, "0:RTX 4090:24000000000", 64 * GB, e, &o);
    CHECK_EQ_INT(p->plan.runner_bytes, 12 * MB);
    /* system memory: the model's CPU part fits alone, not with the runner */
    int64_t cpu = sum_layers(e, 0, 33) + 300 * MB;
    place(p, "", cpu + 12 * MB, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_OK);
    place(p, "", cpu + 12 * MB - 1, e, &AUTO);
    CHECK_EQ_INT(p->st, CR_E_NOMEM);
    free(p);
    free(e);
}

int main(void)
{
    snprintf(dir_g, sizeof dir_g, "/tmp/corral-place-XXXXXX");
    if (!mkdtemp(dir_g))
        return 1;
    test_inventory_parse();
    test_inventory_parse_bad();
    test_meminfo();
    test_visible_devices();
    test_nvml();
    test_kv_cache_types();
    test_estimate_vs_runner();
    test_estimate_draft();
    test_estimate_experts();
    test_estimate_scaling_and_bad();
    test_place_one_gpu();
    test_place_two_gpus();
    test_place_eight_gpus();
    test_place_runner_overhead();
    test_plan_describe();
    test_default_ctx();
    rmdir(dir_g);
    return check_finish("scheduler_place");
}
