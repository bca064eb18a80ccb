/* gguf_synth.c: corral-gguf-synth, writes a synthetic GGUF model.
 *
 *   corral-gguf-synth --out FILE
 *       [--arch llama|qwen2|qwen3|gemma|gemma2|gemma3|phi3|bert|nomic-bert|
 *               granite|olmo2|mistral3|exaone|exaone4|smollm3|command-r|
 *               cohere2]
 *       [--seed N] [--type f32|f16|bf16|q8_0|q4_0|q6_k]
 *       [--dim N] [--layers N] [--heads N] [--kv-heads N] [--head-dim N]
 *       [--ffn N] [--ctx N] [--rope-base F] [--window N] [--swa-pattern N]
 *       [--attn-softcap F] [--final-softcap F] [--rope-linear F] [--std F] [--tied]
 *       [--rope-freqs] [--longrope] [--vocab-from FILE.gguf] [--vocab-only]
 *       [--name NAME] [--pooling mean|cls|last] [--vision-stub]
 *       [--rope-yarn F] [--rope-orig-ctx N] [--yarn-beta-fast F]
 *       [--yarn-beta-slow F] [--yarn-log-mul F] [--attn-temp F]
 *
 * Weights are N(0, 0.02) from the seed (deterministic); norms are 1. The
 * writing itself lives in tools/synth/synth.c, shared with the tests. */
#include "lib/prelude.h"
#include "tools/synth/synth.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: corral-gguf-synth --out FILE [--arch "
            "llama|qwen2|qwen3|gemma|gemma2|gemma3|phi3|bert|nomic-bert|\n"
            "         granite|olmo2|mistral3|exaone|exaone4|smollm3|command-r|\n"
            "         cohere2]\n"
            "         [--seed N] [--type f32|f16|bf16|q8_0|q4_0|q6_k]\n"
            "         [--head-dim N] [--window N] [--swa-pattern N] [--attn-softcap F]\n"
            "         [--final-softcap F] [--rope-linear F] [--std F] [--longrope]\n"
            "         [--dim N] [--layers N] [--heads N] [--kv-heads N] [--ffn N]"
            " [--ctx N]\n"
            "         [--rope-base F] [--tied] [--rope-freqs] [--vocab-from "
            "FILE.gguf] [--vocab-only]\n"
            "         [--name NAME] [--pooling mean|cls|last] (bert family)\n"
            "         [--vision-stub] (v.*/mm.* tensors as Ollama's mistral3)\n"
            "         [--rope-yarn F] [--rope-orig-ctx N] [--yarn-beta-fast F]\n"
            "         [--yarn-beta-slow F] [--yarn-log-mul F] [--attn-temp F]\n"
            "defaults: f32, dim 64, 2 layers, 4 heads, 2 kv heads, ffn 128, ctx "
            "256, built-in vocab\n");
}

static bool parse_int(const char *s, long lo, long hi, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int)v;
    return true;
}

static bool parse_pos_float(const char *s, float *out)
{
    char *end = NULL;
    float v = strtof(s, &end);
    if (end == s || *end || !(v > 0) || v > 1e30f)
        return false;
    *out = v;
    return true;
}

static bool parse_type(const char *s, cr_type_t *t)
{
    static const struct {
        const char *name;
        cr_type_t t;
    } types[] = {{"f32", CR_TYPE_F32},   {"f16", CR_TYPE_F16},
                 {"bf16", CR_TYPE_BF16}, {"q8_0", CR_TYPE_Q8_0},
                 {"q4_0", CR_TYPE_Q4_0}, {"q6_k", CR_TYPE_Q6_K}};
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++) {
        if (!strcasecmp(s, types[i].name)) {
            *t = types[i].t;
            return true;
        }
    }
    return false;
}

int main(int argc, char **argv)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, takes = true;
        if (!strcmp(a, "--out")) {
            out = v;
        } else if (!strcmp(a, "--seed")) {
            char *end = NULL;
            ok = v && (o.seed = strtoull(v, &end, 10), end != v && !*end);
        } else if (!strcmp(a, "--type")) {
            ok = v && parse_type(v, &o.type);
        } else if (!strcmp(a, "--dim")) {
            ok = v && parse_int(v, 1, 1 << 16, &o.dim);
        } else if (!strcmp(a, "--layers")) {
            ok = v && parse_int(v, 1, 256, &o.n_layers);
        } else if (!strcmp(a, "--heads")) {
            ok = v && parse_int(v, 1, 1024, &o.n_heads);
        } else if (!strcmp(a, "--kv-heads")) {
            ok = v && parse_int(v, 1, 1024, &o.n_kv_heads);
        } else if (!strcmp(a, "--ffn")) {
            ok = v && parse_int(v, 1, 1 << 16, &o.ffn);
        } else if (!strcmp(a, "--ctx")) {
            ok = v && parse_int(v, 1, 1 << 24, &o.ctx);
        } else if (!strcmp(a, "--rope-base")) {
            char *end = NULL;
            ok = v && (o.rope_base = strtof(v, &end), end != v && !*end && o.rope_base > 0);
        } else if (!strcmp(a, "--arch")) {
            o.arch = v;
            ok = v != NULL;
        } else if (!strcmp(a, "--head-dim")) {
            ok = v && parse_int(v, 1, 1 << 16, &o.head_dim);
        } else if (!strcmp(a, "--window")) {
            ok = v && parse_int(v, 1, 1 << 24, &o.sliding_window);
        } else if (!strcmp(a, "--swa-pattern")) {
            ok = v && parse_int(v, 1, 1024, &o.swa_pattern);
        } else if (!strcmp(a, "--attn-softcap")) {
            ok = v && parse_pos_float(v, &o.attn_softcap);
        } else if (!strcmp(a, "--final-softcap")) {
            ok = v && parse_pos_float(v, &o.final_softcap);
        } else if (!strcmp(a, "--rope-linear")) {
            ok = v && parse_pos_float(v, &o.rope_linear);
        } else if (!strcmp(a, "--std")) {
            ok = v && parse_pos_float(v, &o.weight_std);
        } else if (!strcmp(a, "--rope-yarn")) {
            ok = v && parse_pos_float(v, &o.rope_yarn);
        } else if (!strcmp(a, "--rope-orig-ctx")) {
            ok = v && parse_int(v, 1, 1 << 24, &o.rope_orig_ctx);
        } else if (!strcmp(a, "--yarn-beta-fast")) {
            ok = v && parse_pos_float(v, &o.yarn_beta_fast);
        } else if (!strcmp(a, "--yarn-beta-slow")) {
            ok = v && parse_pos_float(v, &o.yarn_beta_slow);
        } else if (!strcmp(a, "--yarn-log-mul")) {
            ok = v && parse_pos_float(v, &o.yarn_log_mul);
        } else if (!strcmp(a, "--attn-temp")) {
            ok = v && parse_pos_float(v, &o.attn_temp);
        } else if (!strcmp(a, "--vocab-from")) {
            o.vocab_from = v;
            ok = v != NULL;
        } else if (!strcmp(a, "--pooling")) {
            ok = v && (!strcmp(v, "mean") || !strcmp(v, "cls") || !strcmp(v, "last"));
            if (ok)
                o.pooling_type = !strcmp(v, "mean") ? 1 : !strcmp(v, "cls") ? 2 : 3;
        } else if (!strcmp(a, "--name")) {
            o.name = v;
            ok = v != NULL;
        } else {
            takes = false;
            if (!strcmp(a, "--tied")) {
                o.tied_output = true;
            } else if (!strcmp(a, "--rope-freqs")) {
                o.rope_freqs = true;
            } else if (!strcmp(a, "--longrope")) {
                o.longrope = true;
            } else if (!strcmp(a, "--vocab-only")) {
                o.vocab_only = true;
            } else if (!strcmp(a, "--vision-stub")) {
                o.vision_stub = true;
            } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
                usage(stdout);
                return 0;
            } else {
                fprintf(stderr, "corral-gguf-synth: unknown option '%s'\n", a);
                usage(stderr);
                return 2;
            }
        }
        if (!ok) {
            fprintf(stderr, "corral-gguf-synth: bad or missing value for %s\n", a);
            return 2;
        }
        if (takes)
            i++;
    }
    if (!out) {
        usage(stderr);
        return 2;
    }
    cr_err_t err;
    cr_err_clear(&err);
    if (rn_synth_write(&o, out, &err)) {
        fprintf(stderr, "corral-gguf-synth: %s\n", err.msg);
        return 1;
    }
    return 0;
}
