/* gemma3v_synth.c: corral-gemma3v-synth, writes a synthetic gemma3 vision
 * tower and projector: an mmproj GGUF in llama.cpp's layout, or (--embed)
 * Ollama's single file, a gemma3 text model with the tower inside.
 *
 *   corral-gemma3v-synth --out FILE [--embed TEXT.gguf] [--seed N]
 *       [--type f32|f16] [--image-size N] [--patch N] [--dim N] [--heads N]
 *       [--ffn N] [--layers N] [--merge N] [--n-embd N] [--std F]
 *
 * --n-embd must equal the text model's dim (corral-gguf-synth --arch
 * gemma3 --image-tokens; 64 by default on both). The writing lives in
 * tools/synth/synth_gemma3v.c. */
#include "lib/prelude.h"
#include "tools/synth/synth.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: corral-gemma3v-synth --out FILE [--embed TEXT.gguf] [--seed N]\n"
               "         [--type f32|f16] [--image-size N] [--patch N] [--dim N]\n"
               "         [--heads N] [--ffn N] [--layers N] [--merge N] [--n-embd N]\n"
               "         [--std F]\n"
               "defaults: f32, image 224, patch 14, dim 64, 4 heads, ffn 160, 3 layers,\n"
               "merge 4 (16 tokens), n-embd 64, std 0.1\n");
}

static bool parse_int(const char *s, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || v < 1 || v > 1 << 20)
        return false;
    *out = (int)v;
    return true;
}

int main(int argc, char **argv)
{
    rn_synth_gemma3v_opts_t o;
    rn_synth_gemma3v_defaults(&o);
    const char *out = NULL, *embed = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        const struct {
            const char *flag;
            int *dst;
        } ints[] = {
            {"--image-size", &o.image_size}, {"--patch", &o.patch_size},
            {"--dim", &o.dim},               {"--heads", &o.n_heads},
            {"--ffn", &o.ffn},               {"--layers", &o.n_layers},
            {"--merge", &o.merge},           {"--n-embd", &o.n_embd},
        };
        bool done = false;
        for (size_t k = 0; k < CR_ARRAY_LEN(ints) && !done; k++) {
            if (strcmp(a, ints[k].flag))
                continue;
            if (!v || !parse_int(v, ints[k].dst)) {
                fprintf(stderr, "corral-gemma3v-synth: %s needs a positive integer\n", a);
                return 2;
            }
            i++;
            done = true;
        }
        if (done)
            continue;
        if (!strcmp(a, "--out") && v) {
            out = argv[++i];
        } else if (!strcmp(a, "--embed") && v) {
            embed = argv[++i];
        } else if (!strcmp(a, "--seed") && v) {
            o.seed = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(a, "--type") && v) {
            i++;
            if (!strcmp(v, "f32") || !strcmp(v, "f16")) {
                o.type = v[1] == '3' ? CR_TYPE_F32 : CR_TYPE_F16;
            } else {
                fprintf(stderr, "corral-gemma3v-synth: --type must be f32 or f16\n");
                return 2;
            }
        } else if (!strcmp(a, "--std") && v) {
            o.std = strtod(argv[++i], NULL);
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
    cr_status_t st = embed ? rn_synth_gemma3v_embed(&o, embed, out, &err)
                           : rn_synth_gemma3v_write(&o, out, &err);
    if (st) {
        fprintf(stderr, "corral-gemma3v-synth: %s\n", err.msg);
        return 1;
    }
    return 0;
}
