/* clip_synth.c: corral-clip-synth, writes a synthetic llava-shaped vision
 * projector (an mmproj GGUF in llama.cpp's layout) with random weights, or
 * with --pixtral a Pixtral / Mistral Small 3.x one.
 *
 *   corral-clip-synth --out FILE [--seed N] [--type f32|f16]
 *       [--image-size N] [--patch N] [--dim N] [--heads N] [--ffn N]
 *       [--layers N] [--hidden N] [--n-embd N] [--gelu] [--std F]
 *       [--pixtral [--merge N] [--break-from TEXT.gguf | --embed TEXT.gguf]]
 *
 * --n-embd must equal the text model's dim (corral-gguf-synth --dim; 64 by
 * default on both). --break-from copies the mmproj's [IMG_BREAK] row from
 * that text model (as llama.cpp's converter does); --embed writes Ollama's
 * single file instead: that mistral3 text model with the same tower
 * inside (corral-gguf-synth --arch mistral3 --pixtral-tokens). The
 * writing lives in tools/synth/synth_clip.c and synth_pixtral.c. */
#include "lib/prelude.h"
#include "tools/synth/synth.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: corral-clip-synth --out FILE [--seed N] [--type f32|f16]\n"
               "         [--image-size N] [--patch N] [--dim N] [--heads N] [--ffn N]\n"
               "         [--layers N] [--hidden N] [--n-embd N] [--gelu] [--std F]\n"
               "         [--pixtral [--merge N] [--break-from TEXT.gguf | --embed "
               "TEXT.gguf]]\n"
               "defaults: f32, image 112, patch 14, dim 64, 4 heads, ffn 160, 3 layers,\n"
               "hidden 96, n-embd 64, quick GELU (pixtral: SiLU, merge 2), std 0.1\n");
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
    rn_synth_clip_opts_t o;
    rn_synth_clip_defaults(&o);
    const char *out = NULL;
    bool pixtral = false;
    const char *embed = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        struct {
            const char *flag;
            int *dst;
        } ints[] = {
            {"--image-size", &o.image_size}, {"--patch", &o.patch_size},
            {"--dim", &o.dim},               {"--heads", &o.n_heads},
            {"--ffn", &o.ffn},               {"--layers", &o.n_layers},
            {"--hidden", &o.proj_hidden},    {"--n-embd", &o.n_embd},
            {"--merge", &o.merge},
        };
        bool done = false;
        for (size_t k = 0; k < CR_ARRAY_LEN(ints) && !done; k++) {
            if (strcmp(a, ints[k].flag))
                continue;
            if (!v || !parse_int(v, ints[k].dst)) {
                fprintf(stderr, "corral-clip-synth: %s needs a positive integer\n", a);
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
                fprintf(stderr, "corral-clip-synth: --type must be f32 or f16\n");
                return 2;
            }
            i++;
        } else if (!strcmp(a, "--std") && v) {
            o.std = strtod(v, NULL);
            i++;
        } else if (!strcmp(a, "--gelu")) {
            o.use_gelu = true;
        } else if (!strcmp(a, "--pixtral")) {
            pixtral = true;
        } else if (!strcmp(a, "--break-from") && v) {
            o.break_from = v;
            i++;
        } else if (!strcmp(a, "--embed") && v) {
            embed = v;
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
    if ((embed || o.break_from) && !pixtral) {
        fprintf(stderr, "corral-clip-synth: --embed and --break-from need --pixtral\n");
        return 2;
    }
    cr_err_t err = {0};
    if (embed ? rn_synth_pixtral_embed(&o, embed, out, &err)
              : (pixtral ? rn_synth_pixtral_write : rn_synth_clip_write)(&o, out, &err)) {
        fprintf(stderr, "corral-clip-synth: %s\n", err.msg);
        return 1;
    }
    return 0;
}
