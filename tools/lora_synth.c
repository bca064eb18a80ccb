/* lora_synth.c: corral-lora-synth, synthetic LoRA adapters for tests.
 *
 *   corral-lora-synth --base MODEL.gguf --out ADAPTER.gguf --target NAME...
 *       [--seed N] [--rank R] [--alpha A] [--std F]
 *     writes a GGUF LoRA adapter for MODEL (tools/synth/synth.h) adapting
 *     each base tensor NAME ("blk.0.attn_q.weight"; --target repeats)
 *   corral-lora-synth --merge --base MODEL.gguf --out MERGED.gguf ADAPTER...
 *     writes MODEL (F32) with the adapters merged into its weights, the
 *     reference the runner's run-time adapters are compared with
 *   corral-lora-synth --to-peft DIR --base MODEL.gguf ADAPTER.gguf
 *     writes the F32 adapter as a PEFT folder in DIR (which must exist). */
#include "lib/prelude.h"
#include "tools/synth/synth.h"

#define MAX_TARGETS 64

static int usage(void)
{
    fprintf(stderr, "usage: corral-lora-synth --base MODEL.gguf --out ADAPTER.gguf "
                    "--target NAME [--target NAME...] [--seed N] [--rank R] [--alpha A] "
                    "[--std F]\n"
                    "       corral-lora-synth --merge --base MODEL.gguf --out MERGED.gguf "
                    "ADAPTER...\n"
                    "       corral-lora-synth --to-peft DIR --base MODEL.gguf ADAPTER.gguf\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *base = NULL, *out = NULL, *peft = NULL, *targets[MAX_TARGETS + 1] = {0};
    const char *ads[MAX_TARGETS];
    size_t n_t = 0, n_ads = 0;
    bool merge = false;
    rn_synth_lora_opts_t o = {.seed = 1, .rank = 4};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--merge"))
            merge = true;
        else if (!strcmp(a, "--to-peft") && v)
            peft = argv[++i];
        else if (!strcmp(a, "--base") && v)
            base = argv[++i];
        else if (!strcmp(a, "--out") && v)
            out = argv[++i];
        else if (!strcmp(a, "--target") && v && n_t < MAX_TARGETS)
            targets[n_t++] = argv[++i];
        else if (!strcmp(a, "--seed") && v)
            o.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--rank") && v)
            o.rank = atoi(argv[++i]);
        else if (!strcmp(a, "--alpha") && v)
            o.alpha = strtof(argv[++i], NULL);
        else if (!strcmp(a, "--std") && v)
            o.std = strtof(argv[++i], NULL);
        else if (a[0] != '-' && n_ads < MAX_TARGETS)
            ads[n_ads++] = a;
        else
            return usage();
    }
    if (!base || (peft ? n_ads != 1 : !out || (merge ? !n_ads : !n_t)))
        return usage();
    cr_err_t err = {0};
    o.targets = targets;
    cr_status_t st = peft    ? rn_synth_lora_to_peft(ads[0], base, peft, &err)
                     : merge ? rn_synth_lora_merge(base, ads, n_ads, out, &err)
                             : rn_synth_lora_write(&o, base, out, &err);
    if (st) {
        fprintf(stderr, "corral-lora-synth: %s\n", err.msg);
        return 1;
    }
    return 0;
}
