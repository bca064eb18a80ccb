/* bench.c: CPU speed of the engine beside llama.cpp, on one GGUF file.
 *
 *   bench-bench MODEL.gguf [-t THREADS] [-r ROUNDS] [--llama-bench PATH] [--no-pp]
 *               [--load-only] [--no-load] [--depth N] [--kv f16|q8_0|q4_0]
 *   bench-bench --synth SHAPE TYPE OUT.gguf [LAYERS [DISTINCT_ROWS]]
 *
 * Each round measures, in this order and in this one process: our prompt
 * processing of 128 and 512 random tokens (pp128, pp512: tokens/s, cache
 * cleared first), text generation of 128 tokens one at a time (tg128)
 * bracketed by the machine's memory-read bandwidth (a streaming AVX2 read
 * of a 1 GiB buffer on the same number of threads, on 2 MiB pages as the
 * packed weights (CORRAL_CPU_HUGEPAGES=0: neither), median of 5, taken just
 * before and just after tg and averaged, so a change in the machine's load
 * falls on both), the time a fresh instance takes from nothing
 * to its first token with the file in the page cache (load: backend, model,
 * packing, context, one eval), and then, with --llama-bench, one run of
 * llama.cpp's llama-bench (`-p 512 -n 128 -r 1 -o jsonl`) on the same file
 * and threads. Rounds interleave ours and theirs, so both see the same
 * machine state; medians over rounds are reported with our/their ratios.
 *
 * The decode rate's fraction of the bandwidth limit is
 * tg * (bytes of weights read per token) / bandwidth, where a token reads
 * every matrix once and one row of token_embd (all of it when the output is
 * tied); of a mixture-of-experts layer's expert stacks only the
 * n_expert_used chosen experts' share. Peak RSS during tg is VmHWM after a reset (clear_refs) before tg;
 * llama-bench's is its whole-life maxrss.
 *
 * A runner's model is a store blob, whose packed weights are cached on disk
 * after its first load (pack_cache.h); a file given here is cached only
 * when CORRAL_PACK_CACHE names a folder, so set it to measure loads as a
 * runner makes them (the first load of the run builds the cache). The
 * counts of matrices mapped from / packed into the cache are printed.
 *
 * --load-only measures just the loads (for profiling the load path);
 * --no-load skips the rounds' load (a second instance of a model that may
 * not fit twice; bench/vs_llamabench_moe.sh runs one round per process).
 *
 * --depth N: tg128 after N cached tokens (a prompt of N random tokens,
 * not timed, before each tg; llama-bench gets -d N), where each token's
 * attention reads N more keys: a long chat's decode. The bandwidth
 * fraction still counts the weights only.
 *
 * --kv TYPE: the KV cache in TYPE (default f16; q8_0 and q4_0 as
 * OLLAMA_KV_CACHE_TYPE makes them); llama-bench gets -ctk/-ctv TYPE -fa 1
 * (its quantized V cache needs flash attention).
 *
 * --synth writes a model of realistic shape with random weights:
 * SHAPE tinyllama (dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632,
 * vocab 32000) or llama32 (dim 2048, 16 layers, 32/8 heads, FFN 8192,
 * vocab 128256, tied output), qwen3moe (Qwen3-30B-A3B's layout cut to 16
 * layers: dim 2048, 32 query / 4 KV heads of 128, 128 experts of FFN 768,
 * 8 used; the llama-bpe vocabulary of 128256 stands in for Qwen's 151936),
 * TYPE q4_0, q8_0, q4_k_m (Q4_K with Q6_K output/attn_v/ffn_down) or q6_k
 * (every matrix and token_embd Q6_K, as llama.cpp's Q6_K files).
 * Vocabularies come from CORRAL_TESTDATA (ggml-vocab-llama-spm.gguf /
 * ggml-vocab-llama-bpe.gguf). LAYERS overrides the shape's block count
 * (writing 16 qwen3moe layers, 9.7 B parameters, takes long on a small
 * machine; fewer keep each layer's layout). DISTINCT_ROWS draws only that
 * many rows per tensor and repeats them (rn_synth_opts_t.distinct_rows): the
 * same bytes to read, made in minutes; speed does not depend on the values.
 *
 * Never part of ctest: it takes minutes and needs gigabytes. */
#include "lib/prelude.h"
#include "bench/stats.h"
#include "services/runner/backend/cpu/huge_map.h"
#include "services/runner/backend/cpu/pack_cache.h"
#include "lib/status.h"
#include "services/runner/backend/backend.h"
#include "services/runner/model/forward.h"
#include "services/runner/model/model.h"
#include "tools/synth/synth.h"
#include "services/runner/backend/cpu/threadpool.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define MAX_ROUNDS 32
#define BW_BYTES ((size_t)1 << 30)
#define PP_SHORT 128
#define PP_LONG 512
#define TG_TOKENS 128

/* ---- memory bandwidth ------------------------------------------------- */

typedef struct bw_job {
    const uint8_t *buf;
    size_t bytes;
    double sums[RN_THREADPOOL_MAX_THREADS];
} bw_job_t;

#if defined(__x86_64__)
__attribute__((target("avx2"))) static double read_span(const uint8_t *p, size_t n)
{
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    int64_t out[4];
    _mm256_storeu_si256((__m256i *)out, a0);
    return (double)(out[0] + out[1] + out[2] + out[3]);
}
#else
static double read_span(const uint8_t *p, size_t n)
{
    uint64_t s = 0;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint64_t v;
        memcpy(&v, p + i, 8);
        s += v;
    }
    return (double)s;
}
#endif

static void bw_task(void *ctx, int ith, int nth)
{
    bw_job_t *j = ctx;
    size_t per = j->bytes / (size_t)nth / 4096 * 4096;
    j->sums[ith] = read_span(j->buf + per * (size_t)ith, per);
}

/* Median GB/s of 5 reads of buf (BW_BYTES, filled by the caller so the
 * pages are real; kept for the whole run, as faulting 1 GiB in twice a
 * round took longer than the reads), on pool's threads. */
static double measure_bandwidth(rn_threadpool_t *pool, const uint8_t *buf)
{
    static bw_job_t j;
    j.buf = buf;
    j.bytes = BW_BYTES;
    int nth = rn_threadpool_size(pool);
    rn_threadpool_run(pool, bw_task, &j, nth); /* warm */
    double gbs[5];
    for (int r = 0; r < 5; r++) {
        double t0 = bench_now_s();
        rn_threadpool_run(pool, bw_task, &j, nth);
        double dt = bench_now_s() - t0;
        size_t per = BW_BYTES / (size_t)nth / 4096 * 4096;
        gbs[r] = (double)(per * (size_t)nth) / dt / 1e9;
    }
    return bench_median(gbs, 5);
}

/* ---- RSS -------------------------------------------------------------- */

static void reset_peak_rss(void)
{
    int fd = open("/proc/self/clear_refs", O_WRONLY);
    if (fd >= 0) {
        ssize_t w = write(fd, "5", 1);
        CR_UNUSED(w);
        close(fd);
    }
}

/* VmHWM in bytes, or 0. */
static uint64_t peak_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    char line[256];
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = strtoull(line + 6, NULL, 10);
    fclose(f);
    return kb * 1024;
}

/* ---- ours ------------------------------------------------------------- */

typedef struct ours {
    be_backend_t *be;
    rn_model_t *model;
    rn_ctx_t *ctx;
    int32_t toks[PP_LONG];
    int n_vocab;
    uint64_t bytes_per_token;
    double load_s;
    int depth; /* cached tokens before tg (--depth) */
    cr_type_t kv; /* the KV cache's type (--kv) */
} ours_t;

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static cr_status_t ours_open(ours_t *o, const char *path, int threads, int depth,
                             cr_err_t *err)
{
    o->depth = depth;
    double t0 = bench_now_s();
    cr_status_t st = be_cpu_new(threads, &o->be, err);
    if (st)
        return st;
    if ((st = rn_model_load(path, o->be, &o->model, err)))
        return st;
    rn_ctx_opts_t co = {.n_ctx = CR_MAX(PP_LONG, depth) + TG_TOKENS, .n_batch = PP_LONG,
                        .kv_type = o->kv};
    if ((st = rn_ctx_new(o->model, &co, &o->ctx, err)))
        return st;
    o->n_vocab = rn_ctx_n_vocab(o->ctx);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < PP_LONG; i++)
        o->toks[i] = (int32_t)(rng_next(&seed) % (uint64_t)o->n_vocab);
    if ((st = rn_ctx_eval(o->ctx, o->toks, 1, 0, NULL, err)))
        return st;
    o->load_s = bench_now_s() - t0;
    const rn_weights_t *w = rn_model_weights(o->model);
    uint64_t embd = (uint64_t)w->token_embd.row_bytes * (uint64_t)w->token_embd.n_rows;
    o->bytes_per_token = rn_model_weight_bytes(o->model) - embd + w->token_embd.row_bytes;
    if (w->tied_output)
        o->bytes_per_token += embd;
    /* experts: a token reads n_expert_used of each stack's n_expert */
    const rn_hparams_t *hp = rn_model_hparams(o->model);
    for (int l = 0; l < hp->n_layers && hp->n_expert > 0; l++) {
        const be_weight_t *stk[3] = {&w->layers[l].exp_gate, &w->layers[l].exp_up,
                                    &w->layers[l].exp_down};
        for (int i = 0; i < 3; i++) {
            uint64_t all = (uint64_t)stk[i]->n_rows * stk[i]->row_bytes;
            o->bytes_per_token -= all / (uint64_t)hp->n_expert *
                                  (uint64_t)(hp->n_expert - hp->n_expert_used);
        }
    }
    return CR_OK;
}

/* pack cache counts of the load children (ours_load) */
static int64_t child_mapped_g, child_built_g;

static void ours_close(ours_t *o)
{
    rn_ctx_destroy(&o->ctx);
    rn_model_destroy(&o->model);
    if (o->be)
        o->be->ops->destroy(&o->be);
}

/* Seconds from nothing to a model's first token (backend, load, context,
 * one eval), the file already in the page cache (the open instance read
 * it); < 0 on error. A fresh instance each time, as a new runner; in a
 * child process, as a runner is, so the load's freed buffers (kept by
 * malloc for reuse) do not count in this process's RSS during tg. */
static double ours_load(const char *path, int threads)
{
    int fds[2];
    if (pipe(fds))
        return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        int64_t before[2];
        be_pack_cache_counts(&before[0], &before[1]); /* the parent's, inherited */
        ours_t o = {0};
        cr_err_t err = {0};
        double s = -1;
        if (!ours_open(&o, path, threads, 0, &err))
            s = o.load_s;
        else
            fprintf(stderr, "bench: load: %s\n", err.msg);
        ours_close(&o);
        int64_t counts[2];
        be_pack_cache_counts(&counts[0], &counts[1]);
        counts[0] -= before[0];
        counts[1] -= before[1];
        ssize_t w = write(fds[1], &s, sizeof s);
        w += write(fds[1], counts, sizeof counts);
        _exit(w == (ssize_t)(sizeof s + sizeof counts) ? 0 : 1);
    }
    close(fds[1]);
    double s = -1;
    int64_t counts[2] = {0, 0};
    if (read(fds[0], &s, sizeof s) != sizeof s ||
        read(fds[0], counts, sizeof counts) != sizeof counts)
        s = -1;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    child_mapped_g += counts[0];
    child_built_g += counts[1];
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? s : -1;
}

/* tokens/s of one prompt of n tokens from an empty cache; < 0 on error. */
static double ours_pp(ours_t *o, int n)
{
    cr_err_t err = {0};
    rn_ctx_clear(o->ctx);
    double t0 = bench_now_s();
    if (rn_ctx_eval(o->ctx, o->toks, n, 0, NULL, &err)) {
        fprintf(stderr, "bench: pp%d: %s\n", n, err.msg);
        return -1;
    }
    return n / (bench_now_s() - t0);
}

/* tokens/s of TG_TOKENS single-token evals after o->depth cached tokens
 * (the random tokens again, PP_LONG at a time; not timed). */
static double ours_tg(ours_t *o)
{
    cr_err_t err = {0};
    rn_ctx_clear(o->ctx);
    for (int p = 0; p < o->depth; p += PP_LONG) {
        if (rn_ctx_eval(o->ctx, o->toks, CR_MIN(PP_LONG, o->depth - p), p, NULL, &err)) {
            fprintf(stderr, "bench: depth %d: %s\n", o->depth, err.msg);
            return -1;
        }
    }
    double t0 = bench_now_s();
    for (int i = 0; i < TG_TOKENS; i++) {
        if (rn_ctx_eval(o->ctx, &o->toks[i], 1, o->depth + i, NULL, &err)) {
            fprintf(stderr, "bench: tg: %s\n", err.msg);
            return -1;
        }
    }
    return TG_TOKENS / (bench_now_s() - t0);
}

/* ---- theirs (llama-bench) --------------------------------------------- */

typedef struct theirs {
    double pp, tg, load_s;
    uint64_t maxrss;
} theirs_t;

/* Mean of the numbers in "samples_ts": [...] or the "avg_ts" value. */
static double json_rate(const char *line)
{
    const char *p = strstr(line, "\"samples_ts\"");
    if (p && (p = strchr(p, '['))) {
        double sum = 0;
        int n = 0;
        for (p++; *p && *p != ']';) {
            char *end;
            double v = strtod(p, &end);
            if (end == p) {
                p++;
                continue;
            }
            sum += v;
            n++;
            p = end;
        }
        if (n)
            return sum / n;
    }
    if ((p = strstr(line, "\"avg_ts\"")) && (p = strchr(p, ':')))
        return strtod(p + 1, NULL);
    return -1;
}

static int json_int(const char *line, const char *key)
{
    const char *p = strstr(line, key);
    if (!p || !(p = strchr(p, ':')))
        return -1;
    return atoi(p + 1);
}

static bool theirs_run(const char *bin, const char *model, int threads, bool no_pp,
                       int depth, const char *kv, theirs_t *out)
{
    memset(out, 0, sizeof *out);
    out->pp = out->tg = out->load_s = -1;
    int fds[2];
    if (pipe(fds))
        return false;
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        char tbuf[16], dbuf[16];
        snprintf(tbuf, sizeof tbuf, "%d", threads);
        snprintf(dbuf, sizeof dbuf, "%d", depth);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        int dn = open("/dev/null", O_WRONLY);
        if (dn >= 0)
            dup2(dn, 2);
        if (strcmp(kv, "f16"))
            execl(bin, bin, "-m", model, "-t", tbuf, "-p", no_pp ? "0" : "512", "-n", "128",
                  "-r", "1", "-d", dbuf, "-ctk", kv, "-ctv", kv, "-fa", "1", "-o", "jsonl",
                  (char *)NULL);
        else
            execl(bin, bin, "-m", model, "-t", tbuf, "-p", no_pp ? "0" : "512", "-n", "128",
                  "-r", "1", "-d", dbuf, "-o", "jsonl", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[8192];
    while (f && fgets(line, sizeof line, f)) {
        int np = json_int(line, "\"n_prompt\""), ng = json_int(line, "\"n_gen\"");
        double rate = json_rate(line);
        if (np > 0 && ng == 0)
            out->pp = rate;
        else if (ng > 0 && np == 0)
            out->tg = rate;
        const char *ls = strstr(line, "\"load_s\"");
        if (ls && (ls = strchr(ls, ':')))
            out->load_s = strtod(ls + 1, NULL);
    }
    if (f)
        fclose(f);
    int status = 0;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0)
        return false;
    out->maxrss = (uint64_t)ru.ru_maxrss * 1024;
    if (no_pp)
        out->pp = 0;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 && (no_pp || out->pp > 0) &&
           out->tg > 0;
}

/* ---- synth ------------------------------------------------------------ */

static int synth_main(const char *shape, const char *type, const char *out,
                      const char *layers, const char *distinct)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    const char *td = getenv("CORRAL_TESTDATA");
    if (!td)
        td = "/work/shared/testdata";
    static char vocab[4096];
    o.dim = 2048;
    o.n_heads = 32;
    o.ctx = 4096;
    if (!strcmp(shape, "tinyllama")) {
        o.n_layers = 22;
        o.n_kv_heads = 4;
        o.ffn = 5632;
        snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-llama-spm.gguf", td);
        o.name = "synth-tinyllama-1.1b";
    } else if (!strcmp(shape, "llama32")) {
        o.n_layers = 16;
        o.n_kv_heads = 8;
        o.ffn = 8192;
        o.rope_base = 500000;
        o.tied_output = true;
        snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-llama-bpe.gguf", td);
        o.name = "synth-llama-3.2-1b";
    } else if (!strcmp(shape, "qwen3moe")) {
        o.arch = "qwen3moe";
        o.n_layers = 16;
        o.n_kv_heads = 4;
        o.head_dim = 128;
        o.ffn = 6144;
        o.n_experts = 128;
        o.n_experts_used = 8;
        o.expert_ffn = 768;
        o.rope_base = 1000000;
        snprintf(vocab, sizeof vocab, "%s/vocab/ggml-vocab-llama-bpe.gguf", td);
        o.name = "synth-qwen3-30b-a3b-16l";
    } else {
        fprintf(stderr, "bench: unknown shape '%s' (tinyllama, llama32, qwen3moe)\n",
                shape);
        return 2;
    }
    o.vocab_from = vocab;
    if (layers && (atoi(layers) < 1 || atoi(layers) > 256)) {
        fprintf(stderr, "bench: layers '%s' out of range 1..256\n", layers);
        return 2;
    }
    if (layers)
        o.n_layers = atoi(layers);
    if (distinct && atoi(distinct) < 1) {
        fprintf(stderr, "bench: distinct rows '%s' must be positive\n", distinct);
        return 2;
    }
    if (distinct)
        o.distinct_rows = atoi(distinct);
    if (!strcmp(type, "q4_0")) {
        o.type = CR_TYPE_Q4_0;
    } else if (!strcmp(type, "q8_0")) {
        o.type = CR_TYPE_Q8_0;
    } else if (!strcmp(type, "q4_k_m")) {
        o.type = CR_TYPE_Q4_K;
        o.mix = true;
        o.mix_type = CR_TYPE_Q6_K;
    } else if (!strcmp(type, "q6_k")) {
        o.type = CR_TYPE_Q6_K;
    } else {
        fprintf(stderr, "bench: unknown type '%s' (q4_0, q8_0, q4_k_m, q6_k)\n", type);
        return 2;
    }
    cr_err_t err = {0};
    if (rn_synth_write(&o, out, &err)) {
        fprintf(stderr, "bench: synth: %s\n", err.msg);
        return 1;
    }
    return 0;
}

/* ---- main ------------------------------------------------------------- */

static void print_cache_counts(void)
{
    int64_t mapped, built;
    be_pack_cache_counts(&mapped, &built);
    mapped += child_mapped_g;
    built += child_built_g;
    const char *pc = getenv("CORRAL_PACK_CACHE");
    printf("pack cache %s: %" PRId64 " matrices mapped from it, %" PRId64 " packed into it\n",
           pc && *pc ? pc : "(not set: none for this file)", mapped, built);
}

static void usage(void)
{
    fprintf(stderr,
            "usage: bench-bench MODEL.gguf [-t THREADS] [-r ROUNDS] [--llama-bench PATH] "
            "[--no-pp] [--load-only] [--no-load] [--depth N] [--kv f16|q8_0|q4_0]\n"
            "       bench-bench --synth tinyllama|llama32|qwen3moe q4_0|q8_0|q4_k_m|q6_k "
            "OUT.gguf [LAYERS [DISTINCT_ROWS]]\n");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc >= 5 && !strcmp(argv[1], "--synth"))
        return synth_main(argv[2], argv[3], argv[4], argc >= 6 ? argv[5] : NULL,
                          argc >= 7 ? argv[6] : NULL);
    const char *model = NULL, *lb = NULL;
    int threads = 2, rounds = 5, depth = 0;
    const char *kv = "f16";
    bool no_pp = false, load_only = false, no_load = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-t") && v) {
            threads = atoi(v);
            i++;
        } else if (!strcmp(a, "-r") && v) {
            rounds = atoi(v);
            i++;
        } else if (!strcmp(a, "--llama-bench") && v) {
            lb = v;
            i++;
        } else if (!strcmp(a, "--depth") && v) {
            depth = atoi(v);
            i++;
        } else if (!strcmp(a, "--kv") && v) {
            kv = v;
            i++;
        } else if (!strcmp(a, "--no-pp")) {
            no_pp = true; /* tg only (quick checks); pp columns read 0 */
        } else if (!strcmp(a, "--load-only")) {
            load_only = true;
        } else if (!strcmp(a, "--no-load")) {
            no_load = true;
        } else if (a[0] != '-' && !model) {
            model = a;
        } else {
            usage();
            return 2;
        }
    }
    cr_type_t kv_type = CR_TYPE_F16;
    if (!model || threads < 1 || rounds < 1 || rounds > MAX_ROUNDS || depth < 0 ||
        depth > 131072 || !cr_kv_cache_type_parse(kv, &kv_type)) {
        usage();
        return 2;
    }
    struct stat sb;
    if (stat(model, &sb)) {
        fprintf(stderr, "bench: %s: %s\n", model, strerror(errno));
        return 1;
    }
    if (load_only) {
        double t[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            t[r] = ours_load(model, threads);
            printf("load %d: %.3f s\n", r, t[r]);
        }
        printf("median load+first token %.3f s\n", bench_median(t, rounds));
        print_cache_counts();
        return 0;
    }
    rn_threadpool_t *bwpool = NULL;
    cr_err_t err = {0};
    if (rn_threadpool_new(threads, &bwpool, &err)) {
        fprintf(stderr, "bench: %s\n", err.msg);
        return 1;
    }
    /* on the page size the packed weights get (huge_map.h), so the read
     * and the decode it is held against walk page tables alike */
    uint8_t *bwbuf = be_cpu_map_anon(BW_BYTES);
    if (bwbuf == MAP_FAILED) {
        fprintf(stderr, "bench: no 1 GiB buffer for the bandwidth read: bw reads 0\n");
        bwbuf = NULL;
    }
    for (size_t i = 0; bwbuf && i < BW_BYTES; i += 4096)
        memset(bwbuf + i, (int)(i >> 12), 4096);
    ours_t o = {.kv = kv_type};
    if (ours_open(&o, model, threads, depth, &err)) {
        fprintf(stderr, "bench: %s: %s\n", model, err.msg);
        ours_close(&o);
        rn_threadpool_destroy(&bwpool);
        if (bwbuf)
            munmap(bwbuf, BW_BYTES);
        return 1;
    }
    printf("model %s: %.2f GB file, %.2f GB read per token, %d threads, simd %s, "
           "first load+first token %.2f s, tg after %d cached tokens\n",
           model, (double)sb.st_size / 1e9, (double)o.bytes_per_token / 1e9, threads,
           be_cpu_simd(o.be), o.load_s, depth);
    if (!no_pp)
        ours_pp(&o, PP_SHORT); /* warm */
    ours_tg(&o);

    double bw[MAX_ROUNDS], pp128[MAX_ROUNDS], pp512[MAX_ROUNDS], tg[MAX_ROUNDS];
    double frac[MAX_ROUNDS], tpp[MAX_ROUNDS], ttg[MAX_ROUNDS], tfrac[MAX_ROUNDS];
    double tload[MAX_ROUNDS], load[MAX_ROUNDS];
    uint64_t rss_tg = 0, trss = 0;
    int nt = 0;
    printf("%-5s %8s %9s %9s %9s %6s %6s", "round", "bw GB/s", "pp128", "pp512", "tg128", "bw%",
           "load");
    if (lb)
        printf(" | %9s %9s %6s %6s", "lb pp512", "lb tg128", "bw%", "load");
    printf("\n");
    for (int r = 0; r < rounds; r++) {
        pp128[r] = no_pp ? 0 : ours_pp(&o, PP_SHORT);
        pp512[r] = no_pp ? 0 : ours_pp(&o, PP_LONG);
        /* the bandwidth right before and right after tg, averaged: the
         * limit tg is held to, under the machine's load of that moment */
        double bw0 = bwbuf ? measure_bandwidth(bwpool, bwbuf) : 0;
        reset_peak_rss();
        tg[r] = ours_tg(&o);
        rss_tg = CR_MAX(rss_tg, peak_rss_bytes());
        bw[r] = bwbuf ? 0.5 * (bw0 + measure_bandwidth(bwpool, bwbuf)) : 0;
        frac[r] = bw[r] > 0 ? tg[r] * (double)o.bytes_per_token / (bw[r] * 1e9) : 0;
        load[r] = no_load ? 0 : ours_load(model, threads);
        printf("%-5d %8.1f %9.1f %9.1f %9.2f %5.0f%% %6.2f", r, bw[r], pp128[r], pp512[r],
               tg[r], 100 * frac[r], load[r]);
        if (lb) {
            theirs_t t;
            if (theirs_run(lb, model, threads, no_pp, depth, kv, &t)) {
                tpp[nt] = t.pp;
                ttg[nt] = t.tg;
                tload[nt] = t.load_s;
                tfrac[nt] = bw[r] > 0 ? t.tg * (double)o.bytes_per_token / (bw[r] * 1e9) : 0;
                trss = CR_MAX(trss, t.maxrss);
                printf(" | %9.1f %9.2f %5.0f%% %6.2f", t.pp, t.tg, 100 * tfrac[nt], t.load_s);
                nt++;
            } else {
                printf(" | llama-bench failed");
            }
        }
        printf("\n");
        fflush(stdout);
    }
    double m_pp512 = bench_median(pp512, rounds), m_tg = bench_median(tg, rounds);
    double m_load = bench_median(load, rounds);
    printf("median: bw %.1f GB/s  pp128 %.1f  pp512 %.1f  tg128 %.2f t/s  "
           "(%.0f%% of the bandwidth limit)  load+first token %.2f s\n",
           bench_median(bw, rounds), bench_median(pp128, rounds), m_pp512, m_tg,
           100 * bench_median(frac, rounds), m_load);
    printf("peak RSS during tg: %.2f GB (file %.2f GB, KV cache %.3f GB, buffers %.3f GB)\n",
           (double)rss_tg / 1e9, (double)sb.st_size / 1e9,
           (double)rn_ctx_kv_bytes(o.ctx) / 1e9, (double)rn_ctx_buffer_bytes(o.ctx) / 1e9);
    if (lb && nt > 0) {
        double t_pp = bench_median(tpp, nt), t_tg = bench_median(ttg, nt);
        printf("llama-bench median: pp512 %.1f  tg128 %.2f t/s (%.0f%% of the bandwidth "
               "limit), max RSS %.2f GB, load+first token %.2f s\n",
               t_pp, t_tg, 100 * bench_median(tfrac, nt), (double)trss / 1e9, bench_median(tload, nt));
        printf("ratio ours/llama.cpp: pp512 %.2fx  tg128 %.2fx  load %.2fx\n",
               t_pp > 0 ? m_pp512 / t_pp : 0,
               m_tg / t_tg, bench_median(tload, nt) > 0 ? m_load / bench_median(tload, nt) : 0);
    }
    print_cache_counts();
    ours_close(&o);
    rn_threadpool_destroy(&bwpool);
    if (bwbuf)
        munmap(bwbuf, BW_BYTES);
    return 0;
}
