/* mtmd_image.h: what bench/mtmd's tools share: the text model loaded on the
 * CPU and the image chunk of one image (the media marker alone). Included
 * by dump_mtmd.c and time_mtmd.c, which bench/vs_mtmd.sh and
 * bench/vs_mtmd_speed.sh compile against a llama.cpp build. */
#ifndef BENCH_MTMD_IMAGE_H
#define BENCH_MTMD_IMAGE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"
#include "mtmd.h"
#include "mtmd-helper.h"

/* The text model at path with no GPU layers; exits 1, saying so, when it
 * does not load. */
static struct llama_model *mtmd_bench_load_text(const char *path)
{
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *model = llama_model_load_from_file(path, mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", path);
        exit(1);
    }
    return model;
}

/* The projector at path with p; exits 1, saying so, when it does not load. */
static mtmd_context *mtmd_bench_init(const char *path, struct llama_model *model,
                                     struct mtmd_context_params p)
{
    mtmd_context *ctx = mtmd_init_from_file(path, model, p);
    if (!ctx) {
        fprintf(stderr, "cannot load %s\n", path);
        exit(1);
    }
    return ctx;
}

/* The image file at path tokenized alone (mtmd's marker, no other text):
 * its image chunk, the bitmap into *bitmap_out. Exits 1, saying why, on
 * failure. */
static const mtmd_input_chunk *mtmd_bench_image_chunk(mtmd_context *ctx, const char *path,
                                                      const mtmd_bitmap **bitmap_out)
{
    struct mtmd_helper_bitmap_wrapper bw =
        mtmd_helper_bitmap_init_from_file(ctx, path, false, mtmd_helper_init_opt_default());
    if (!bw.bitmap) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    mtmd_input_text text = {mtmd_default_marker(), strlen(mtmd_default_marker()), false, true};
    const mtmd_bitmap *bitmaps[1] = {bw.bitmap};
    if (mtmd_tokenize(ctx, chunks, &text, bitmaps, 1)) {
        fprintf(stderr, "mtmd_tokenize failed\n");
        exit(1);
    }
    *bitmap_out = bw.bitmap;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_IMAGE)
            return c;
    }
    fprintf(stderr, "no image chunk\n");
    exit(1);
}

#endif
