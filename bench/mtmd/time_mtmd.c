/* time_mtmd.c: llama.cpp's image encode time (libmtmd) for
 * bench/vs_mtmd_speed.sh, beside corral's bench-vision_encode. Built by
 * that script against a llama.cpp build; not part of corral's build.
 *
 *   time_mtmd TEXT.gguf MMPROJ.gguf IMAGE ROUNDS
 *
 * mtmd's defaults (flash attention AUTO, which picks it on the CPU
 * backend, and its warm-up encode at load) with no GPU and 2 threads; then
 * ROUNDS encodes of the image's chunk, each printed as "encode N ms" (the
 * clock covers mtmd_encode_chunk only: preprocessing is done by
 * mtmd_tokenize before it). mtmd logs on stderr whether flash attention is
 * enabled. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: time_mtmd TEXT.gguf MMPROJ.gguf IMAGE ROUNDS\n");
        return 2;
    }
    int rounds = atoi(argv[4]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model)
        return fprintf(stderr, "cannot load %s\n", argv[1]), 1;
    struct mtmd_context_params p = mtmd_context_params_default();
    p.use_gpu = false;
    p.print_timings = false;
    p.n_threads = 2;
    mtmd_context *ctx = mtmd_init_from_file(argv[2], model, p);
    if (!ctx)
        return fprintf(stderr, "cannot load %s\n", argv[2]), 1;
    struct mtmd_helper_bitmap_wrapper bw =
        mtmd_helper_bitmap_init_from_file(ctx, argv[3], false, mtmd_helper_init_opt_default());
    if (!bw.bitmap)
        return fprintf(stderr, "cannot read %s\n", argv[3]), 1;
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    mtmd_input_text text = {mtmd_default_marker(), strlen(mtmd_default_marker()), false, true};
    const mtmd_bitmap *bitmaps[1] = {bw.bitmap};
    if (mtmd_tokenize(ctx, chunks, &text, bitmaps, 1))
        return fprintf(stderr, "mtmd_tokenize failed\n"), 1;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(c) != MTMD_INPUT_CHUNK_TYPE_IMAGE)
            continue;
        for (int r = 0; r < rounds; r++) {
            double t0 = now_ms();
            if (mtmd_encode_chunk(ctx, c))
                return fprintf(stderr, "mtmd_encode_chunk failed\n"), 1;
            printf("encode %.1f ms\n", now_ms() - t0);
            fflush(stdout);
        }
        printf("%zu x %d\n", mtmd_input_chunk_get_n_tokens(c), llama_model_n_embd(model));
        return 0;
    }
    fprintf(stderr, "no image chunk\n");
    return 1;
}
