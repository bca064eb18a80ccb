/* qwen2vl_synth.c: corral-qwen2vl-synth, writes a synthetic Qwen2.5-VL
 * vision projector (an mmproj GGUF in llama.cpp's layout, projector type
 * "qwen2.5vl_merger") with random weights.
 *
 *   corral-qwen2vl-synth --out FILE [--seed N] [--type f32|f16] [--patch N]
 *       [--dim N] [--heads N] [--ffn N] [--layers N] [--wa-pattern N]
 *       [--hidden N] [--n-embd N] [--std F] [--embed TEXT.gguf] [--qwen2]
 *
 * --n-embd must equal the text model's dim (corral-gguf-synth --arch
 * qwen2vl --dim; 64 by default on both). --embed writes Ollama's single
 * file instead: that qwen2vl text model as Ollama's qwen25vl with the
 * same tower inside. --qwen2 writes Qwen2-VL's projector ("qwen2vl_merger")
 * instead. The writing lives in tools/synth/synth_qwen2vl.c. */
#include "lib/prelude.h"
#include "tools/synth/synth.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: corral-qwen2vl-synth --out FILE [--seed N] [--type f32|f16]\n"
               "         [--patch N] [--dim N] [--heads N] [--ffn N] [--layers N]\n"
               "         [--wa-pattern N] [--hidden N] [--n-embd N] [--std F]\n"
               "         [--embed TEXT.gguf] [--qwen2]\n"
               "defaults: f32, patch 14, dim 64, 4 heads, ffn 96, 4 layers, wa-pattern 2,\n"
               "hidden 256, n-embd 64, std 0.1\n");
}

static bool parse_int(const char *s, int min, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || v < min || v > 1 << 20)
        return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv)
{
    rn_synth_qwen2vl_opts_t o;
    rn_synth_qwen2vl_defaults(&o);
    const char *out = NULL, *embed = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        struct {
            const char *flag;
            int *dst;
            int min;
        } ints[] = {
            {"--patch", &o.patch_size, 1}, {"--dim", &o.dim, 1},
            {"--heads", &o.n_heads, 1},    {"--ffn", &o.ffn, 1},
            {"--layers", &o.n_layers, 1},  {"--wa-pattern", &o.n_wa_pattern, 0},
            {"--hidden", &o.proj_hidden, 1}, {"--n-embd", &o.n_embd, 1},
        };
        bool done = false;
        for (size_t k = 0; k < CR_ARRAY_LEN(ints) && !done; k++) {
            if (strcmp(a, ints[k].flag))
                continue;
            if (!v || !parse_int(v, ints[k].min, ints[k].dst)) {
                fprintf(stderr, "corral-qwen2vl-synth: %s needs an integer >= %d\n", a,
                        ints[k].min);
                return 2;
            }
            i++;
            done = true;
        }
        if (done)
            continue;
        if (!strcmp(a, "--out") && v) {
            out = v;
            i++;
        } else if (!strcmp(a, "--seed") && v) {
            o.seed = strtoull(v, NULL, 10);
            i++;
        } else if (!strcmp(a, "--type") && v) {
            if (!strcmp(v, "f32"))
                o.type = CR_TYPE_F32;
            else if (!strcmp(v, "f16"))
                o.type = CR_TYPE_F16;
            else {
                fprintf(stderr, "corral-qwen2vl-synth: --type must be f32 or f16\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--qwen2")) {
            o.qwen2 = true;
        } else if (!strcmp(a, "--embed") && v) {
            embed = v;
            i++;
        } else if (!strcmp(a, "--std") && v) {
            o.std = strtod(v, NULL);
            i++;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    if (!out) {
        usage(stderr);
        return 2;
    }
    cr_err_t err = {0};
    if (embed ? rn_synth_qwen2vl_embed(&o, embed, out, &err)
              : rn_synth_qwen2vl_write(&o, out, &err)) {
        fprintf(stderr, "corral-qwen2vl-synth: %s\n", err.msg);
        return 1;
    }
    return 0;
}
