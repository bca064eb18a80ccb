/* fuzz_gguf: GGUF files (lib/gguf.c, opened from memory) and the
 * tokenizer loader that reads a vocabulary out of one
 * (services/runner/text). Every key, array element and tensor of a file
 * that opens is read back, so a lie the loader let through shows up. */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/text/tokenizer.h"

static void walk_array(const cr_gguf_array_t *a)
{
    uint64_t n = a->n < 64 ? a->n : 64;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t u;
        int64_t s;
        float f;
        cr_gguf_str_t str;
        (void)cr_gguf_arr_get_u64(a, i, &u);
        (void)cr_gguf_arr_get_i64(a, i, &s);
        (void)cr_gguf_arr_get_f32(a, i, &f);
        if (cr_gguf_arr_get_str(a, i, &str) && str.len && str.ptr[str.len - 1] == 0x7f)
            __asm__ volatile("" ::: "memory"); /* touch the last byte */
    }
    if (a->n) { /* the last element too: a count that lies ends past the file */
        cr_gguf_str_t str;
        uint64_t u;
        if (cr_gguf_arr_get_str(a, a->n - 1, &str) && str.len)
            (void)((volatile const char *)str.ptr)[str.len - 1];
        (void)cr_gguf_arr_get_u64(a, a->n - 1, &u);
    }
}

static void try_tokenizer(const cr_gguf_t *g)
{
    rn_tokenizer_t *tok = NULL;
    cr_err_t err = {0};
    if (rn_tokenizer_load(g, &tok, &err) != CR_OK)
        return;
    static const char text[] = "Hello <s> wörld\n\t 123 <|im_end|>";
    int32_t ids[256];
    size_t n = 0;
    if (rn_tokenize(tok, text, sizeof text - 1, true, true, ids, 256, &n, &err) == CR_OK) {
        cr_buf_t out;
        cr_buf_init(&out, 1 << 20);
        (void)rn_detokenize(tok, ids, n, 0, &out, &err);
        cr_buf_free(&out);
    }
    rn_tokenizer_destroy(&tok);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cr_gguf_t *g = NULL;
    cr_err_t err = {0};
    if (cr_gguf_open_memory(data, size, &g, &err) != CR_OK)
        return 0;
    (void)cr_gguf_arch(g);
    for (size_t i = 0; i < cr_gguf_kv_count(g); i++) {
        const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
        if (kv->key.len)
            (void)((volatile const char *)kv->key.ptr)[kv->key.len - 1];
        if (kv->type == CR_GGUF_ARRAY)
            walk_array(&kv->v.arr);
        else if (kv->type == CR_GGUF_STRING && kv->v.str.len)
            (void)((volatile const char *)kv->v.str.ptr)[kv->v.str.len - 1];
    }
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (t->size_bytes) { /* the tensor's data lies inside the input */
            const volatile uint8_t *p = t->data;
            (void)p[0];
            (void)p[t->size_bytes - 1];
        }
        if (cr_gguf_tensor_find(g, t->name) == NULL)
            abort();
    }
    try_tokenizer(g);
    cr_gguf_close(&g);
    return 0;
}

/* Seeds: a small model-like file with every value type, and a tiny
 * SentencePiece and BPE vocabulary (the shared test data adds real ones). */
static void write_seed(const char *dir, const char *name, cr_gguf_writer_t *w)
{
    void *buf = NULL;
    size_t len = 0;
    cr_err_t err = {0};
    if (cr_gguf_writer_write_memory(w, &buf, &len, &err) != CR_OK) {
        fprintf(stderr, "fuzz_gguf: seed %s: %s\n", name, err.msg);
        exit(1);
    }
    fuzz_write_seed(dir, name, buf, len);
    free(buf);
}

static void make_seeds(const char *dir)
{
    static const char *const pieces[] = {"<unk>", "<s>", "</s>", "\xe2\x96\x81h", "e", "l",
                                         "o", "\xe2\x96\x81", "lo", "hel"};
    static const float scores[] = {0, 0, 0, -1, -2, -3, -4, -5, -6, -7};
    static const int32_t types[] = {2, 3, 3, 1, 1, 1, 1, 1, 1, 1};
    static const float weights[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t ne[2] = {4, 2};

    cr_gguf_writer_t *w = cr_gguf_writer_new();
    if (!w)
        exit(1);
    (void)cr_gguf_writer_add_str(w, "general.architecture", "llama", NULL);
    (void)cr_gguf_writer_add_u32(w, "llama.block_count", 1, NULL);
    (void)cr_gguf_writer_add_f32(w, "llama.rope.freq_base", 10000.0f, NULL);
    (void)cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true, NULL);
    (void)cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", NULL);
    (void)cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", pieces, 10, NULL);
    (void)cr_gguf_writer_add_arr(w, "tokenizer.ggml.scores", CR_GGUF_F32, scores, 10, NULL);
    (void)cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32, types, 10, NULL);
    (void)cr_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1, NULL);
    (void)cr_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2, NULL);
    (void)cr_gguf_writer_add_tensor(w, "token_embd.weight", 2, ne, CR_TYPE_F32, weights,
                                    NULL, NULL);
    write_seed(dir, "spm.gguf", w);

    static const char *const bpe[] = {"h", "e", "l", "o", "\xc4\xa0", "he", "ll", "<|im_end|>"};
    static const char *const merges[] = {"h e", "l l"};
    static const int32_t bpe_types[] = {1, 1, 1, 1, 1, 1, 1, 3};
    (void)cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", NULL);
    (void)cr_gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2", NULL);
    (void)cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", bpe, 8, NULL);
    (void)cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32, bpe_types, 8, NULL);
    (void)cr_gguf_writer_add_arr(w, "tokenizer.ggml.scores", CR_GGUF_F32, scores, 8, NULL);
    (void)cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 2, NULL);
    (void)cr_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 7, NULL);
    write_seed(dir, "bpe.gguf", w);
    cr_gguf_writer_destroy(&w);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = fuzz_seed_dir();
    if (dir) {
        make_seeds(dir);
        exit(0);
    }
    return 0;
}
