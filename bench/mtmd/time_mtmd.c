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
#include <time.h>

#include "mtmd_image.h"

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
    struct llama_model *model = mtmd_bench_load_text(argv[1]);
    struct mtmd_context_params p = mtmd_context_params_default();
    p.use_gpu = false;
    p.print_timings = false;
    p.n_threads = 2;
    mtmd_context *ctx = mtmd_bench_init(argv[2], model, p);
    const mtmd_bitmap *bitmap;
    const mtmd_input_chunk *c = mtmd_bench_image_chunk(ctx, argv[3], &bitmap);
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
