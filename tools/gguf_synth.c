/* gguf_synth.c: corral-gguf-synth, writes a synthetic GGUF model.
 *
 *   corral-gguf-synth --out FILE
 *       [--arch llama|qwen2|qwen3|gemma|gemma2|gemma3|phi3|bert|nomic-bert|qwen3moe|
 *               gpt-oss|granite|olmo2|mistral3|exaone|exaone4|smollm3|
 *               command-r|cohere2|qwen2vl]
 *       [--seed N] [--type f32|f16|bf16|q8_0|q4_0|q4_k|q6_k|iq4_nl|iq4_xs|mxfp4|...]
 *       [--dim N] [--layers N] [--heads N] [--kv-heads N] [--head-dim N]
 *       [--ffn N] [--ctx N] [--rope-base F] [--window N] [--swa-pattern N]
 *       [--attn-softcap F] [--final-softcap F] [--rope-linear F] [--std F] [--tied]
 *       [--rope-freqs] [--longrope] [--vocab-from FILE.gguf] [--vocab-only]
 *       [--name NAME] [--pooling mean|cls|last|rank] [--mix TYPE]
 *       [--experts N --experts-used K [--expert-ffn N] [--shared-ffn N]
 *        [--shared-gate] [--gating 1|2|3] [--expert-norm 0|1]
 *        [--expert-scale F] [--router-std F] [--expert-type TYPE]]
 *        (qwen3moe, gpt-oss, llama)
 *       [--rope-yarn F --yarn-orig-ctx N] (gpt-oss, mistral3, qwen2, qwen3,
 *        olmo2) [--yarn-beta-fast F] [--yarn-beta-slow F] [--yarn-log-mul F]
 *        [--attn-temp F] (mistral3) [--vision-stub] [--image-tokens]
 *        [--pixtral-tokens]
 *
 * Weights are N(0, 0.02) from the seed (deterministic); norms are 1. The
 * writing itself lives in tools/synth/synth.c, shared with the tests. */
#include "lib/prelude.h"
#include "tools/synth/synth.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: corral-gguf-synth --out FILE [--arch "
            "llama|qwen2|qwen3|gemma|gemma2|gemma3|phi3|bert|nomic-bert|qwen3moe|\n"
            "         gpt-oss|granite|olmo2|mistral3|exaone|exaone4|smollm3|command-r|\n"
            "         cohere2|qwen2vl]\n"
            "         [--seed N] [--type TYPE: f32|f16|bf16|q8_0|q4_0|q4_k|q6_k|iq4_nl|\n"
            "          iq4_xs|mxfp4|... any type with CPU kernels]\n"
            "         [--head-dim N] [--window N] [--swa-pattern N] [--attn-softcap F]\n"
            "         [--final-softcap F] [--rope-linear F] [--std F] [--longrope]\n"
            "         [--dim N] [--layers N] [--heads N] [--kv-heads N] [--ffn N]"
            " [--ctx N]\n"
            "         [--rope-base F] [--tied] [--rope-freqs] [--vocab-from "
            "FILE.gguf] [--vocab-only]\n"
            "         [--name NAME] [--pooling mean|cls|last|rank] (rank: bert with a\n"
            "         classifier head)\n"
            "         [--chat-template FILE] (its text as tokenizer.chat_template)\n"
            "         [--mix TYPE] (output, attn_v, ffn_down in TYPE)\n"
            "         [--experts N --experts-used K] [--expert-ffn N] [--shared-ffn N]\n"
            "         [--shared-gate] [--gating 1|2|3] [--expert-norm 0|1]\n"
            "         [--expert-scale F] [--router-std F] [--expert-type TYPE]\n"
            "         (qwen3moe, gpt-oss, llama)\n"
            "         [--rope-yarn F --yarn-orig-ctx N] (gpt-oss)\n"
            "         [--yarn-beta-fast F] [--yarn-beta-slow F] [--yarn-log-mul F]\n"
            "         [--attn-temp F] (mistral3, with --rope-yarn)\n"
            "         [--vision-stub] (v.*/mm.* tensors as Ollama's mistral3)\n"
            "         [--image-tokens] (<start_of_image>, <end_of_image>: gemma3's)\n"
            "         [--pixtral-tokens] ([IMG_BREAK], [IMG_END] as control tokens)\n"
            "defaults: f32, dim 64, 2 layers, 4 heads, 2 kv heads, ffn 128, ctx "
            "256, built-in vocab\n");
}

/* The whole file as a NUL-terminated string (caller frees), or NULL. */
static char *read_text_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *s = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && n < (1L << 24) && fseek(f, 0, SEEK_SET) == 0 && (s = malloc((size_t)n + 1))) {
        if (fread(s, 1, (size_t)n, f) != (size_t)n) {
            free(s);
            s = NULL;
        } else {
            s[n] = '\0';
        }
    }
    fclose(f);
    return s;
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

/* Any type lib/tensor_type names ("q4_k", "iq4_xs", "mxfp4", ...); the
 * writer refuses those without CPU kernels. */
static bool parse_type(const char *s, cr_type_t *t)
{
    for (uint32_t id = 0; id < CR_TYPE__COUNT; id++) {
        const cr_type_info_t *ti = cr_type_info(id);
        if (ti && !strcasecmp(s, ti->name)) {
            *t = (cr_type_t)id;
            return true;
        }
    }
    return false;
}

int main(int argc, char **argv)
{
    rn_synth_opts_t o;
    char *chat_template = NULL; /* --chat-template text, owned */
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
            ok = v && (!strcmp(v, "mean") || !strcmp(v, "cls") || !strcmp(v, "last") ||
                       !strcmp(v, "rank"));
            if (ok)
                o.pooling_type = !strcmp(v, "mean")  ? 1
                                 : !strcmp(v, "cls") ? 2
                                 : !strcmp(v, "last") ? 3
                                                      : 4;
        } else if (!strcmp(a, "--mix")) {
            ok = v && parse_type(v, &o.mix_type);
            o.mix = ok;
        } else if (!strcmp(a, "--experts")) {
            ok = v && parse_int(v, 1, 1024, &o.n_experts);
        } else if (!strcmp(a, "--experts-used")) {
            ok = v && parse_int(v, 1, 1024, &o.n_experts_used);
        } else if (!strcmp(a, "--expert-ffn")) {
            ok = v && parse_int(v, 1, 1 << 16, &o.expert_ffn);
        } else if (!strcmp(a, "--shared-ffn")) {
            ok = v && parse_int(v, 1, 1 << 16, &o.shared_ffn);
        } else if (!strcmp(a, "--gating")) {
            ok = v && parse_int(v, 1, 3, &o.expert_gating);
        } else if (!strcmp(a, "--expert-norm")) {
            ok = v && parse_int(v, 0, 1, &o.expert_norm);
        } else if (!strcmp(a, "--expert-scale")) {
            ok = v && parse_pos_float(v, &o.expert_scale);
        } else if (!strcmp(a, "--expert-type")) {
            ok = v && parse_type(v, &o.expert_type);
        } else if (!strcmp(a, "--rope-yarn")) {
            ok = v && parse_pos_float(v, &o.rope_yarn);
        } else if (!strcmp(a, "--yarn-orig-ctx")) {
            ok = v && parse_int(v, 1, 1 << 24, &o.yarn_orig_ctx);
        } else if (!strcmp(a, "--router-std")) {
            ok = v && parse_pos_float(v, &o.router_std);
        } else if (!strcmp(a, "--name")) {
            o.name = v;
            ok = v != NULL;
        } else if (!strcmp(a, "--chat-template")) {
            free(chat_template);
            chat_template = v ? read_text_file(v) : NULL;
            o.chat_template = chat_template;
            ok = chat_template != NULL;
        } else {
            takes = false;
            if (!strcmp(a, "--tied")) {
                o.tied_output = true;
            } else if (!strcmp(a, "--rope-freqs")) {
                o.rope_freqs = true;
            } else if (!strcmp(a, "--longrope")) {
                o.longrope = true;
            } else if (!strcmp(a, "--shared-gate")) {
                o.shared_gate = true;
            } else if (!strcmp(a, "--vocab-only")) {
                o.vocab_only = true;
            } else if (!strcmp(a, "--vision-stub")) {
                o.vision_stub = true;
            } else if (!strcmp(a, "--image-tokens")) {
                static const char *const gemma3_image[] = {"<start_of_image>",
                                                           "<end_of_image>", NULL};
                o.extra_tokens = gemma3_image;
            } else if (!strcmp(a, "--pixtral-tokens")) {
                static const char *const pixtral_image[] = {"[IMG_BREAK]", "[IMG_END]",
                                                            NULL};
                o.extra_tokens = pixtral_image;
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
    int rc = 0;
    if (rn_synth_write(&o, out, &err)) {
        fprintf(stderr, "corral-gguf-synth: %s\n", err.msg);
        rc = 1;
    }
    free(chat_template);
    return rc;
}
