/* fuzz_tokenizer: arbitrary bytes through real vocabularies
 * (services/runner/text): encode with and without special tokens, decode
 * the ids back, and stream them through the incremental detokenizer,
 * whose every chunk must be valid UTF-8. The vocabularies are GGUF files
 * named by CORRAL_FUZZ_VOCABS (colon-separated paths; tests/fuzz/run.sh
 * sets it from the shared test data). The first input byte picks the
 * vocabulary and the flags; the rest is the text. */
#define _GNU_SOURCE /* strdup, strtok_r */
#include "tests/fuzz/fuzz.h"

#include <string.h>

#include "lib/buf.h"
#include "lib/gguf.h"
#include "services/runner/text/tokenizer.h"

#define MAX_VOCABS 16

static cr_gguf_t *g_gguf[MAX_VOCABS]; /* open while the process lives */
static rn_tokenizer_t *g_tok[MAX_VOCABS];
static size_t g_n;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *list = getenv("CORRAL_FUZZ_VOCABS");
    if (!list || !*list) {
        fprintf(stderr, "fuzz_tokenizer: set CORRAL_FUZZ_VOCABS to vocabulary GGUF files\n");
        exit(1);
    }
    char *copy = strdup(list), *save = NULL;
    for (char *p = strtok_r(copy, ":", &save); p && g_n < MAX_VOCABS;
         p = strtok_r(NULL, ":", &save)) {
        cr_err_t err = {0};
        if (cr_gguf_open(p, &g_gguf[g_n], &err) != CR_OK ||
            rn_tokenizer_load(g_gguf[g_n], &g_tok[g_n], &err) != CR_OK) {
            fprintf(stderr, "fuzz_tokenizer: %s: %s\n", p, err.msg);
            exit(1);
        }
        g_n++;
    }
    free(copy);
    return 0;
}

static bool utf8_valid(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
                                : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (k == 0 || i + k > n)
            return false;
        for (size_t j = 1; j < k; j++)
            if (((unsigned char)s[i + j] & 0xc0) != 0x80)
                return false;
        i += k;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || g_n == 0)
        return 0;
    const rn_tokenizer_t *tok = g_tok[data[0] % g_n];
    bool special = data[0] & 0x80;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    enum { CAP = 8192 };
    static int32_t ids[CAP];
    size_t n = 0;
    cr_err_t err = {0};
    cr_status_t st = rn_tokenize(tok, text, len, special, special, ids, CAP, &n, &err);
    if (st != CR_OK && st != CR_E_TOO_LARGE)
        return 0;
    if (n > CAP)
        n = CAP;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= rn_tokenizer_n_vocab(tok))
            abort();

    cr_buf_t out;
    cr_buf_init(&out, 4u << 20);
    (void)rn_detokenize(tok, ids, n, 0, &out, &err);
    cr_buf_free(&out);

    rn_detok_t *d = rn_detok_new(tok, 0);
    if (!d)
        return 0;
    for (size_t i = 0; i < n; i++) {
        const char *chunk;
        size_t clen;
        if (rn_detok_push(d, ids[i], &chunk, &clen, &err) == CR_OK && !utf8_valid(chunk, clen))
            abort();
    }
    const char *chunk;
    size_t clen;
    rn_detok_flush(d, &chunk, &clen);
    if (!utf8_valid(chunk, clen))
        abort();
    rn_detok_destroy(&d);
    return 0;
}
