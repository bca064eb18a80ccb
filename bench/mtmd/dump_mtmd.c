/* dump_mtmd.c: llama.cpp's image embeddings and normalized pixels for
 * bench/vs_mtmd.sh. Built by that script against a llama.cpp build
 * (libmtmd, libllama, libggml); not part of corral's build (bench/'s
 * CMakeLists only globs bench/*.c).
 *
 *   dump_mtmd TEXT.gguf MMPROJ.gguf IMAGE EMB.f32 PIXELS.f32 [PROMPT LOGITS.f32]
 *
 * EMB.f32: mtmd_get_output_embd after encoding the image's chunk, one row
 * of n_embd floats per image token. PIXELS.f32: the graph's "inp_raw"
 * input (planar [3][S][S], after resize and normalization), caught by the
 * eval callback on the first node that reads it. Flash attention is off
 * unless DUMP_FA=1. With PROMPT (the image where it says <__media__>;
 * BOS added, special tokens parsed) LOGITS.f32 gets the last position's
 * logits after mtmd_helper_eval_chunks. Prints "TOKENS x DIM". */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"
#include "ggml-backend.h"
#include "mtmd_image.h"

static const char *pixels_path;
static bool pixels_done;

static bool on_eval(struct ggml_tensor *t, bool ask, void *ud)
{
    (void)ud;
    for (int i = 0; i < GGML_MAX_SRC && t->src[i]; i++) {
        struct ggml_tensor *s = t->src[i];
        if (strcmp(s->name, "inp_raw"))
            continue;
        if (ask)
            return true;
        if (!pixels_done) {
            size_t n = ggml_nbytes(s);
            void *buf = malloc(n);
            ggml_backend_tensor_get(s, buf, 0, n);
            FILE *f = fopen(pixels_path, "wb");
            if (f) {
                fwrite(buf, 1, n, f);
                fclose(f);
            }
            free(buf);
            pixels_done = true;
        }
        return true;
    }
    return !ask;
}

/* The last position's logits of prompt (the image at its marker). */
static int dump_logits(mtmd_context *ctx, struct llama_model *model, const char *prompt,
                       const mtmd_bitmap *bitmap, const char *out)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 2048; /* pixtral's largest images: 1024 tokens + breaks */
    cp.n_batch = 2048;
    cp.n_ubatch = 2048;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    struct llama_context *lctx = llama_init_from_model(model, cp);
    if (!lctx)
        return fprintf(stderr, "cannot create a llama context\n"), 1;
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    mtmd_input_text text = {prompt, strlen(prompt), true, true};
    const mtmd_bitmap *bitmaps[1] = {bitmap};
    if (mtmd_tokenize(ctx, chunks, &text, bitmaps, 1))
        return fprintf(stderr, "mtmd_tokenize of the prompt failed\n"), 1;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk *c = mtmd_input_chunks_get(chunks, i);
        size_t n = 0;
        const llama_token *t = mtmd_input_chunk_get_tokens_text(c, &n);
        fprintf(stderr, "chunk %zu:", i);
        for (size_t k = 0; t && k < n; k++)
            fprintf(stderr, " %d", t[k]);
        fprintf(stderr, t ? "\n" : " image of %zu tokens\n", mtmd_input_chunk_get_n_tokens(c));
    }
    llama_pos n_past = 0;
    if (mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, 2048, true, &n_past))
        return fprintf(stderr, "mtmd_helper_eval_chunks failed\n"), 1;
    const float *logits = llama_get_logits_ith(lctx, -1);
    int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *f = fopen(out, "wb");
    if (!f || fwrite(logits, sizeof(float), (size_t)n_vocab, f) != (size_t)n_vocab)
        return fprintf(stderr, "cannot write %s\n", out), 1;
    fclose(f);
    mtmd_input_chunks_free(chunks);
    llama_free(lctx);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 6 && argc != 8) {
        fprintf(stderr, "usage: dump_mtmd TEXT.gguf MMPROJ.gguf IMAGE EMB.f32 PIXELS.f32 "
                        "[PROMPT LOGITS.f32]\n");
        return 2;
    }
    pixels_path = argv[5];
    struct llama_model *model = mtmd_bench_load_text(argv[1]);
    struct mtmd_context_params p = mtmd_context_params_default();
    p.use_gpu = false;
    p.print_timings = false;
    p.warmup = false;
    p.n_threads = 2;
    const char *fa = getenv("DUMP_FA");
    p.flash_attn_type = fa && !strcmp(fa, "1") ? LLAMA_FLASH_ATTN_TYPE_ENABLED
                                               : LLAMA_FLASH_ATTN_TYPE_DISABLED;
    p.cb_eval = on_eval;
    p.cb_eval_user_data = NULL;
    mtmd_context *ctx = mtmd_bench_init(argv[2], model, p);
    const mtmd_bitmap *bitmap;
    const mtmd_input_chunk *c = mtmd_bench_image_chunk(ctx, argv[3], &bitmap);
    if (mtmd_encode_chunk(ctx, c))
        return fprintf(stderr, "mtmd_encode_chunk failed\n"), 1;
    size_t n_tok = mtmd_input_chunk_get_n_tokens(c);
    int n_embd = llama_model_n_embd(model);
    FILE *f = fopen(argv[4], "wb");
    if (!f || fwrite(mtmd_get_output_embd(ctx), sizeof(float) * n_embd, n_tok, f) != n_tok)
        return fprintf(stderr, "cannot write %s\n", argv[4]), 1;
    fclose(f);
    printf("%zu x %d\n", n_tok, n_embd);
    if (!pixels_done)
        return fprintf(stderr, "no inp_raw seen\n"), 1;
    if (argc == 8)
        return dump_logits(ctx, model, argv[6], bitmap, argv[7]);
    return 0;
}
