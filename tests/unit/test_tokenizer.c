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
#include "services/runner/text/tokenizer.h"
#include "services/runner/text/tokenizer_internal.h"
#include "services/runner/text/unicode.h"
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
    cr_status_t st =
        rn_tokenize(tok, s, len, add_special, parse_special, ids, cap, n, &err);
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

static rn_tokenizer_t *load_mem(const void *data, size_t len, cr_status_t *st_out,
                                cr_err_t *err)
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
    {"refact", false},       {"bert-bge", true},
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
        printf("  %-15s NOT IMPLEMENTED: %s (%s)\n", vc->name, err.msg,
               cr_status_str(st));
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
            fprintf(stderr, "%s case %d mismatch: \"%.*s\"\n", vc->name, cases,
                    (int)CR_MIN(slen, 80), ip);
            print_ids("want", want, nw);
            if (got)
                print_ids("got ", got, ng);
        } else {
            size_t dl = 0;
            unsigned fl = rn_tokenizer_kind(tok) == RN_TOK_SPM ? RN_PIECE_LSTRIP : 0;
            char *d = dec(tok, got, ng, fl, &dl);
            if (d && dl == slen && !memcmp(d, ip, slen))
                rt_ok++;
            else if (vc->required && rn_tokenizer_kind(tok) != RN_TOK_WPM)
                fprintf(stderr, "%s case %d: no round trip: \"%.*s\" -> \"%.*s\"\n",
                        vc->name, cases, (int)CR_MIN(slen, 60), ip, (int)CR_MIN(dl, 60),
                        d ? d : "");
            free(d);
        }
        free(got);
        ip = end + sizeof SEP - 1;
        op = nl + 1;
    }
    printf("  %-15s %d/%d cases match llama.cpp, %d/%d round-trip\n", vc->name,
           cases - fails, cases, rt_ok, cases - fails);
    CHECK_MSG(fails == 0, "%s: %d of %d cases differ", vc->name, fails, cases);
    CHECK_MSG(cases > 10, "%s: only %d cases parsed", vc->name, cases);
    /* WordPiece is lossy (lowercase, accents, spacing): no round trip */
    if (vc->required && rn_tokenizer_kind(tok) != RN_TOK_WPM)
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

/* ---- in-memory vocabularies ------------------------------------------------ */

#define SP "\xe2\x96\x81" /* U+2581, SentencePiece's space */

/* Token ids of the tiny SentencePiece vocabulary. */
enum {
    S_UNK = 0, S_BOS = 1, S_EOS = 2, S_BYTE0 = 3, /* <0x00>..<0xFF>: 3..258 */
    S_SP = 259, S_A, S_B, S_C, S_AB, S_SPA, S_SPAB, S_BC, S_ABC, S_BA,
    S_USER, S_EOT, S_UNUSED, S_N
};

/* Mutations of the tiny vocabularies, for the corrupt corpus. */
typedef enum mut {
    M_NONE, M_NO_MODEL, M_MODEL_U32, M_MODEL_RWKV, M_MODEL_BERT, M_NO_TOKENS,
    M_TOKENS_U32, M_TOKENS_EMPTY, M_SCORES_SHORT, M_SCORES_STR, M_TYPE_9,
    M_TYPE_NEG, M_TYPES_SHORT, M_BOS_RANGE, M_EOS_NEG, M_BOS_STR, M_PAD_RANGE,
    M_ADD_BOS_U8, M_TOKEN_HUGE, M_NO_SPACE_PREFIX, M_ADD_EOS, M_EOS_NONE,
    /* BPE only */
    M_NO_MERGES, M_MERGE_NOSEP, M_MERGES_U32, M_PRE_UNKNOWN, M_PRE_U32,
    M_PRE_LLAMA3, M_ADD_EOS_NO_EOS, M_EOT_KEY,
} mut_t;

static void *write_vocab(cr_gguf_writer_t *w, size_t *len)
{
    void *data = NULL;
    cr_err_t err;
    if (cr_gguf_writer_write_memory(w, &data, len, &err))
        fprintf(stderr, "write_memory: %s\n", err.msg);
    cr_gguf_writer_destroy(&w);
    return data;
}

static void *spm_vocab(mut_t m, size_t *len)
{
    static char bytes[256][8];
    const char *toks[S_N];
    float scores[S_N];
    int32_t types[S_N];
    toks[S_UNK] = "<unk>", types[S_UNK] = 2;
    toks[S_BOS] = "<s>", types[S_BOS] = 3;
    toks[S_EOS] = "</s>", types[S_EOS] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        toks[S_BYTE0 + b] = bytes[b];
        types[S_BYTE0 + b] = 6;
    }
    static const struct { int id; const char *t; float score; int type;
    } rest[] = {
        {S_SP, SP, -1.0f, 1},          {S_A, "a", -2.0f, 1},
        {S_B, "b", -2.0f, 1},          {S_C, "c", -2.0f, 1},
        {S_AB, "ab", -1.5f, 1},        {S_SPA, SP "a", -1.2f, 1},
        {S_SPAB, SP "ab", -0.5f, 1},   {S_BC, "bc", -0.6f, 1},
        {S_ABC, "abc", -3.0f, 1},      {S_BA, "ba", -1.5f, 1},
        {S_USER, "<|user|>", 0, 4},    {S_EOT, "<|eot_id|>", 0, 3},
        {S_UNUSED, "<unused0>", 0, 5},
    };
    for (int i = 0; i < S_N; i++)
        scores[i] = 0;
    for (size_t i = 0; i < CR_ARRAY_LEN(rest); i++) {
        toks[rest[i].id] = rest[i].t;
        scores[rest[i].id] = rest[i].score;
        types[rest[i].id] = rest[i].type;
    }
    static char huge[RN_TOK_MAX_TOKEN_BYTES + 2];
    if (m == M_TOKEN_HUGE) {
        memset(huge, 'z', sizeof huge - 1);
        toks[S_ABC] = huge;
    }
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t e;
    cr_gguf_writer_add_str(w, "general.architecture", "llama", &e);
    if (m == M_MODEL_U32)
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.model", 1, &e);
    else if (m != M_NO_MODEL)
        cr_gguf_writer_add_str(w, "tokenizer.ggml.model",
                               m == M_MODEL_RWKV   ? "rwkv"
                               : m == M_MODEL_BERT ? "bert"
                                                   : "llama",
                               &e);
    uint32_t n = S_N;
    if (m == M_TOKENS_U32)
        cr_gguf_writer_add_arr(w, "tokenizer.ggml.tokens", CR_GGUF_U32, types, n, &e);
    else if (m == M_TOKENS_EMPTY)
        cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 0, &e);
    else if (m != M_NO_TOKENS)
        cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, n, &e);
    if (m == M_SCORES_STR)
        cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.scores", toks, n, &e);
    else
        cr_gguf_writer_add_arr(w, "tokenizer.ggml.scores", CR_GGUF_F32, scores,
                               m == M_SCORES_SHORT ? n - 1 : n, &e);
    if (m == M_TYPE_9)
        types[S_C] = 9;
    if (m == M_TYPE_NEG)
        types[S_C] = -1;
    cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32, types,
                           m == M_TYPES_SHORT ? n - 1 : n, &e);
    if (m == M_BOS_RANGE)
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", S_N, &e);
    else if (m == M_BOS_STR)
        cr_gguf_writer_add_str(w, "tokenizer.ggml.bos_token_id", "1", &e);
    else
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", S_BOS, &e);
    if (m == M_EOS_NEG)
        cr_gguf_writer_add_i32(w, "tokenizer.ggml.eos_token_id", -5, &e);
    else if (m == M_EOS_NONE)
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", UINT32_MAX, &e);
    else
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", S_EOS, &e);
    cr_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", S_UNK, &e);
    cr_gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id",
                           m == M_PAD_RANGE ? 99999 : S_UNK, &e);
    if (m == M_ADD_BOS_U8)
        cr_gguf_writer_add_u8(w, "tokenizer.ggml.add_bos_token", 1, &e);
    else
        cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true, &e);
    cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", m == M_ADD_EOS, &e);
    if (m == M_NO_SPACE_PREFIX)
        cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix", false, &e);
    return write_vocab(w, len);
}

/* A tiny WordPiece vocabulary (as the GGUF converter writes BERT's: word
 * starts with U+2581, "##" continuations bare). */
enum {
    W_PAD, W_UNK, W_CLS, W_SEP, W_HELLO, W_PLAY, W_ING, W_BANG, W_CAFE, W_ZHONG,
    W_S, W_COMMA, W_DOLLAR, W_N
};

static void *wpm_vocab(bool with_ids, size_t *len)
{
    const char *toks[W_N] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", SP "hello", SP "play",
                             "ing", SP "!", SP "cafe", SP "\xe4\xb8\xad", "s", SP ",",
                             SP "$"};
    int32_t types[W_N];
    for (int i = 0; i < W_N; i++)
        types[i] = i <= W_SEP ? 3 : 1;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t e;
    cr_gguf_writer_add_str(w, "general.architecture", "bert", &e);
    cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "bert", &e);
    cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, W_N, &e);
    cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32, types, W_N, &e);
    if (with_ids) {
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", W_UNK, &e);
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.cls_token_id", W_CLS, &e);
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.seperator_token_id", W_SEP, &e);
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", W_PAD, &e);
    }
    return write_vocab(w, len);
}

/* The tiny BPE vocabulary: ids 0..255 are the byte alphabet in byte order,
 * then merge results and two control tokens. */
enum { B_GA = 256, B_BC, B_AB, B_ABC, B_EOT, B_IMEND, B_N };

static void *bpe_vocab(mut_t m, size_t *len)
{
    static char alpha[256][4];
    const char *toks[B_N];
    int32_t types[B_N];
    for (int b = 0; b < 256; b++) {
        size_t n = rn_utf8_encode(rn_bpe_byte_to_cp((uint8_t)b), alpha[b]);
        alpha[b][n] = 0;
        toks[b] = alpha[b];
        types[b] = 1;
    }
    toks[B_GA] = "\xc4\xa0"
                 "a",
    toks[B_BC] = "bc", toks[B_AB] = "ab", toks[B_ABC] = "abc";
    toks[B_EOT] = "<|endoftext|>", toks[B_IMEND] = "<|im_end|>";
    for (int i = B_GA; i < B_N; i++)
        types[i] = i >= B_EOT ? 3 : 1;
    /* Ranks: "Ġ a" 0, "b c" 1, "a b" 2, "ab c" 3. */
    const char *merges[] = {"\xc4\xa0 a", "b c", "a b", "ab c"};
    if (m == M_MERGE_NOSEP)
        merges[2] = "ab";
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t e;
    cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", &e);
    if (m == M_PRE_UNKNOWN)
        cr_gguf_writer_add_str(w, "tokenizer.ggml.pre", "no-such-pre", &e);
    else if (m == M_PRE_U32)
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.pre", 3, &e);
    else
        cr_gguf_writer_add_str(w, "tokenizer.ggml.pre",
                               m == M_PRE_LLAMA3 ? "llama-bpe" : "gpt-2", &e);
    cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, B_N, &e);
    cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32, types, B_N, &e);
    if (m == M_MERGES_U32)
        cr_gguf_writer_add_arr(w, "tokenizer.ggml.merges", CR_GGUF_I32, types, 4, &e);
    else if (m != M_NO_MERGES)
        cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", merges, 4, &e);
    if (m != M_ADD_EOS_NO_EOS) {
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", B_EOT, &e);
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", B_EOT, &e);
    }
    if (m == M_ADD_EOS_NO_EOS) {
        /* No eos key and a default (11) that is a plain byte: still an id,
         * so use a vocabulary too small for the default instead. */
        cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, 5, &e);
        cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32, types, 5, &e);
        cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", true, &e);
    }
    if (m == M_EOT_KEY)
        cr_gguf_writer_add_u32(w, "tokenizer.ggml.eot_token_id", B_IMEND, &e);
    return write_vocab(w, len);
}

static rn_tokenizer_t *spm_tok(mut_t m)
{
    size_t len = 0;
    void *data = spm_vocab(m, &len);
    cr_err_t err;
    cr_status_t st;
    rn_tokenizer_t *tok = load_mem(data, len, &st, &err);
    if (!tok)
        fprintf(stderr, "spm vocab: %s\n", err.msg);
    free(data);
    return tok;
}

static rn_tokenizer_t *bpe_tok(mut_t m)
{
    size_t len = 0;
    void *data = bpe_vocab(m, &len);
    cr_err_t err;
    cr_status_t st;
    rn_tokenizer_t *tok = load_mem(data, len, &st, &err);
    if (!tok)
        fprintf(stderr, "bpe vocab: %s\n", err.msg);
    free(data);
    return tok;
}

#define CHECK_IDS(tok, text, add, parse, ...)                                  \
    do {                                                                       \
        const int32_t want_[] = {__VA_ARGS__};                                 \
        size_t n_ = 0;                                                         \
        int32_t *got_ = enc((tok), (text), strlen(text), (add), (parse), &n_); \
        bool ok_ = got_ && ids_eq(got_, n_, want_, CR_ARRAY_LEN(want_));       \
        CHECK_MSG(ok_, "ids of \"%s\"", (text));                               \
        if (!ok_ && got_)                                                      \
            print_ids("got", got_, n_);                                        \
        free(got_);                                                            \
    } while (0)

static void check_piece(const rn_tokenizer_t *tok, int32_t id, unsigned flags,
                        const char *want)
{
    char buf[64];
    size_t n = 0;
    cr_err_t err;
    cr_status_t st = rn_token_piece(tok, id, flags, buf, sizeof buf, &n, &err);
    CHECK_MSG(st == CR_OK && n == strlen(want) && !memcmp(buf, want, n),
              "piece of %d (flags %u): \"%.*s\" want \"%s\"", id, flags, (int)n, buf,
              want);
}

static void test_spm_memory(void)
{
    rn_tokenizer_t *tok = spm_tok(M_NONE);
    CHECK(tok != NULL);
    if (!tok)
        return;
    CHECK_EQ_INT(rn_tokenizer_kind(tok), RN_TOK_SPM);
    CHECK_EQ_INT(rn_tokenizer_n_vocab(tok), S_N);
    CHECK(rn_tokenizer_add_bos(tok) && !rn_tokenizer_add_eos(tok));
    CHECK(rn_tokenizer_add_space_prefix(tok));
    /* Highest score first: bc (-0.6) before ▁a (-1.2); "abc" (-3) never. */
    CHECK_IDS(tok, "abc", false, false, S_SPA, S_BC);
    /* ▁a, then ▁a+b = ▁ab. */
    CHECK_IDS(tok, "ab", false, false, S_SPAB);
    /* Equal scores (ba, ab: -1.5): the leftmost pair wins. */
    CHECK_IDS(tok, "bab", false, false, S_SP, S_BA, S_B);
    /* Spaces become ▁, and each word gets the ▁ of its space. */
    CHECK_IDS(tok, "a a", false, false, S_SPA, S_SPA);
    /* Byte fallback for pieces the vocabulary lacks (é = C3 A9). */
    CHECK_IDS(tok, "\xc3\xa9", false, false, S_SP, S_BYTE0 + 0xC3, S_BYTE0 + 0xA9);
    /* BOS where the vocabulary asks; EOS not. */
    CHECK_IDS(tok, "ab", true, false, S_BOS, S_SPAB);
    CHECK_IDS(tok, "", true, false, S_BOS);
    {
        size_t n = 99;
        int32_t *ids = enc(tok, "", 0, false, false, &n);
        CHECK(ids && n == 0);
        free(ids);
    }
    /* User-defined tokens are matched even without parse_special; the text
     * after a special token gets the space prefix again. */
    CHECK_IDS(tok, "a<|user|>b", false, false, S_SPA, S_USER, S_SP, S_B);
    /* Control tokens only with parse_special; else they are plain text. */
    CHECK_IDS(tok, "<|eot_id|>", false, true, S_EOT);
    CHECK_IDS(tok, "<s>ab</s>", false, true, S_BOS, S_SPAB, S_EOS);
    {
        size_t n = 0;
        int32_t *ids = enc(tok, "<s>ab", 5, false, false, &n);
        bool has_bos = false;
        for (size_t i = 0; ids && i < n; i++)
            has_bos |= ids[i] == S_BOS;
        CHECK(ids && !has_bos && n > 3);
        free(ids);
    }
    /* End of generation: eos, and <|eot_id|> by its text. */
    CHECK(rn_tokenizer_is_eog(tok, S_EOS));
    CHECK(rn_tokenizer_is_eog(tok, S_EOT));
    CHECK(!rn_tokenizer_is_eog(tok, S_A));
    CHECK(!rn_tokenizer_is_eog(tok, -1) && !rn_tokenizer_is_eog(tok, S_N));
    CHECK_EQ_INT(rn_tokenizer_eot(tok), S_EOT);
    CHECK_EQ_INT(rn_tokenizer_bos(tok), S_BOS);
    CHECK_EQ_INT(rn_tokenizer_eos(tok), S_EOS);
    CHECK_EQ_INT(rn_tokenizer_unk(tok), S_UNK);
    CHECK_EQ_INT(rn_tokenizer_pad(tok), S_UNK);
    CHECK(rn_tokenizer_is_control(tok, S_BOS) && !rn_tokenizer_is_control(tok, S_A));
    CHECK_EQ_INT(rn_tokenizer_token_type(tok, S_BYTE0), RN_TOKEN_BYTE);
    CHECK_EQ_INT(rn_tokenizer_token_type(tok, S_USER), RN_TOKEN_USER_DEFINED);
    CHECK_EQ_INT(rn_tokenizer_token_type(tok, S_N), RN_TOKEN_UNDEFINED);
    CHECK_EQ_INT(rn_tokenizer_find(tok, SP "ab", 5), S_SPAB);
    CHECK_EQ_INT(rn_tokenizer_find(tok, "zz", 2), -1);
    size_t tl = 0;
    const char *tt = rn_tokenizer_token_text(tok, S_SPA, &tl);
    CHECK(tt && tl == 4 && !memcmp(tt, SP "a", 4));
    CHECK(rn_tokenizer_token_text(tok, -5, &tl) == NULL && tl == 0);

    /* Pieces. */
    check_piece(tok, S_SPA, 0, " a");
    check_piece(tok, S_SPA, RN_PIECE_LSTRIP, "a");
    check_piece(tok, S_BOS, 0, "");
    check_piece(tok, S_BOS, RN_PIECE_SPECIAL, "<s>");
    check_piece(tok, S_UNK, 0, "");
    check_piece(tok, S_USER, 0, "<|user|>");
    check_piece(tok, S_UNUSED, RN_PIECE_SPECIAL, "");
    check_piece(tok, S_BYTE0 + 0x0A, 0, "\n");
    {
        char small[1];
        size_t n = 0;
        cr_err_t err;
        CHECK_EQ_INT(rn_token_piece(tok, S_SPAB, 0, small, sizeof small, &n, &err),
                     CR_E_TOO_LARGE);
        CHECK_EQ_INT(n, 3);
        CHECK_EQ_INT(rn_token_piece(tok, S_N, 0, small, sizeof small, &n, &err),
                     CR_E_INVALID);
        CHECK(strstr(err.msg, "out of range") != NULL);
    }
    /* Whole-sequence decode: LSTRIP skips pieces that render empty. */
    {
        int32_t ids[] = {S_BOS, S_SPA, S_BC, S_SPA};
        size_t n = 0;
        char *d = dec(tok, ids, 4, RN_PIECE_LSTRIP, &n);
        CHECK(d && !strcmp(d, "abc a"));
        free(d);
        d = dec(tok, ids, 4, RN_PIECE_SPECIAL, &n);
        CHECK(d && !strcmp(d, "<s> abc a"));
        free(d);
        int32_t bad[] = {S_A, -3};
        cr_buf_t b;
        cr_buf_init(&b, 100);
        cr_err_t err;
        CHECK_EQ_INT(rn_detokenize(tok, bad, 2, 0, &b, &err), CR_E_INVALID);
        cr_buf_free(&b);
    }
    /* The output is cut at cap and the needed count reported. */
    {
        int32_t out[2];
        size_t n = 0;
        cr_err_t err;
        CHECK_EQ_INT(rn_tokenize(tok, "a a a a", 7, true, false, out, 2, &n, &err),
                     CR_E_TOO_LARGE);
        CHECK_EQ_INT(n, 5);
        CHECK(out[0] == S_BOS && out[1] == S_SPA);
        CHECK_EQ_INT(rn_tokenize(tok, "a", 1, false, false, NULL, 0, &n, &err),
                     CR_E_TOO_LARGE);
        CHECK_EQ_INT(n, 1);
    }
    rn_tokenizer_destroy(&tok);
    CHECK(tok == NULL);
    rn_tokenizer_destroy(&tok); /* NULL is fine */

    /* add_space_prefix false: no leading ▁. */
    tok = spm_tok(M_NO_SPACE_PREFIX);
    CHECK(tok && !rn_tokenizer_add_space_prefix(tok));
    if (tok)
        CHECK_IDS(tok, "ab", false, false, S_AB);
    rn_tokenizer_destroy(&tok);
    /* add_eos_token true: EOS appended with add_special only. */
    tok = spm_tok(M_ADD_EOS);
    if (tok) {
        CHECK_IDS(tok, "ab", true, false, S_BOS, S_SPAB, S_EOS);
        CHECK_IDS(tok, "ab", false, false, S_SPAB);
    }
    rn_tokenizer_destroy(&tok);
    /* eos 0xFFFFFFFF means "none": llama's default (2) stays. */
    tok = spm_tok(M_EOS_NONE);
    CHECK(tok && rn_tokenizer_eos(tok) == S_EOS);
    rn_tokenizer_destroy(&tok);
    /* An out-of-range padding id is ignored, not fatal. */
    tok = spm_tok(M_PAD_RANGE);
    CHECK(tok && rn_tokenizer_pad(tok) == -1);
    rn_tokenizer_destroy(&tok);
}

static void test_bpe_memory(void)
{
    rn_tokenizer_t *tok = bpe_tok(M_NONE);
    CHECK(tok != NULL);
    if (!tok)
        return;
    CHECK_EQ_INT(rn_tokenizer_kind(tok), RN_TOK_BPE);
    CHECK_EQ_STR(rn_tokenizer_pre_name(tok), "gpt-2");
    CHECK(!rn_tokenizer_add_bos(tok) && !rn_tokenizer_add_space_prefix(tok));
    /* Lowest rank first: Ġa (0), then bc (1); ab (2) never gets its turn. */
    CHECK_IDS(tok, " abc", false, false, B_GA, B_BC);
    CHECK_IDS(tok, "abc", false, false, 'a', B_BC);
    /* Pre-tokens are merged apart: "ab" and " c" never join. */
    CHECK_IDS(tok, "ab c", false, false, B_AB, ' ', 'c');
    /* Bytes outside the ASCII letters go through the byte alphabet. */
    CHECK_IDS(tok, "\n\xff", false, false, '\n', 0xFF);
    CHECK_IDS(tok, "<|endoftext|>", false, true, B_EOT);
    CHECK_IDS(tok, "x<|im_end|>", false, true, 'x', B_IMEND);
    CHECK(rn_tokenizer_is_eog(tok, B_EOT) && rn_tokenizer_is_eog(tok, B_IMEND));
    CHECK_EQ_INT(rn_tokenizer_eot(tok), B_IMEND); /* <|im_end|> ranks first */
    check_piece(tok, B_GA, 0, " a");
    check_piece(tok, 0x0A, 0, "\n");
    check_piece(tok, B_EOT, 0, "");
    check_piece(tok, B_EOT, RN_PIECE_SPECIAL, "<|endoftext|>");
    /* Round trip over every byte value. */
    {
        char all[256];
        for (int i = 0; i < 256; i++)
            all[i] = (char)i;
        size_t n = 0, dl = 0;
        int32_t *ids = enc(tok, all, 256, false, false, &n);
        char *d = ids ? dec(tok, ids, n, 0, &dl) : NULL;
        CHECK(d && dl == 256 && !memcmp(d, all, 256));
        free(ids);
        free(d);
    }
    rn_tokenizer_destroy(&tok);

    /* Llama 3 pre-tokenizer: a pre-token that is a token is taken whole
     * (ignore_merges), and BOS is added by default. */
    tok = bpe_tok(M_PRE_LLAMA3);
    CHECK(tok != NULL);
    if (tok) {
        CHECK(rn_tokenizer_add_bos(tok));
        CHECK_IDS(tok, "abc", false, false, B_ABC);
        CHECK_IDS(tok, "abc", true, false, B_EOT, B_ABC);
    }
    rn_tokenizer_destroy(&tok);
    /* An explicit eot key wins over the text heuristics. */
    tok = bpe_tok(M_EOT_KEY);
    CHECK(tok && rn_tokenizer_eot(tok) == B_IMEND);
    rn_tokenizer_destroy(&tok);
}

/* The pre-tokenizers without test vectors, against hand-derived splits. */
static void check_split(rn_pre_t pre, const char *text, const char *want)
{
    uint32_t cps[256];
    size_t n = 0;
    for (size_t i = 0; text[i];)
        i += rn_utf8_decode((const uint8_t *)text + i, strlen(text) - i, &cps[n++]);
    uint32_t *ends = NULL;
    size_t n_ends = 0;
    CHECK(rn_pretok_split(pre, cps, n, &ends, &n_ends) == CR_OK);
    /* Render pieces as "|"-separated ASCII. */
    char got[512];
    size_t g = 0, start = 0;
    for (size_t k = 0; k < n_ends; k++) {
        if (k)
            got[g++] = '|';
        for (size_t i = start; i < ends[k]; i++)
            g += rn_utf8_encode(cps[i], got + g);
        start = ends[k];
    }
    got[g] = 0;
    CHECK_MSG(!strcmp(got, want), "pre %d on \"%s\": got \"%s\" want \"%s\"", pre, text,
              got, want);
    free(ends);
}

/* Splits of three mixed strings by every pre-tokenizer, as llama.cpp's
 * regex path produces them (generated with a Python re-implementation of
 * its category-collapsing std::regex splitter, which agreed with this
 * module on 54,000 random strings). */
static const struct {
    rn_pre_t pre;
    const char *text, *want;
} SPLITS[] = {
    {RN_PRE_DEFAULT,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89" "COLEs| I|'|ve| |123|45|/|x|\n\n | ok"},
    {RN_PRE_DEFAULT,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0|x|+=|y|;| |$|1|,|000|.|50|!!| |\xe3\x80\x80|z"},
    {RN_PRE_DEFAULT,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They|'|RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81|b| |\xc2\xb2\xd9\xa3| \t\r|\n|end|.|  "},
    {RN_PRE_LLAMA3,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89" "COLEs| I|'ve| |123|45|/x|\n\n| | ok"},
    {RN_PRE_LLAMA3,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0x|+=|y|;| $|1|,|000|.|50|!!| |\xe3\x80\x80z"},
    {RN_PRE_LLAMA3,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They|'RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81" "b| |\xc2\xb2\xd9\xa3| \t\r\n|end|.|  "},
    {RN_PRE_QWEN2,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89" "COLEs| I|'ve| |1|2|3|4|5|/x|\n\n| | ok"},
    {RN_PRE_QWEN2,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0x|+=|y|;| $|1|,|0|0|0|.|5|0|!!| |\xe3\x80\x80z"},
    {RN_PRE_QWEN2,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They|'RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81" "b| |\xc2\xb2|\xd9\xa3| \t\r\n|end|.|  "},
    {RN_PRE_GPT2,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89" "COLEs| I|'ve| 12345|/|x|\n\n | ok"},
    {RN_PRE_GPT2,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0|x|+=|y|;| $|1|,|000|.|50|!!| |\xe3\x80\x80|z"},
    {RN_PRE_GPT2,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They|'|RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81|b| \xc2\xb2\xd9\xa3| \t\r|\n|end|.|  "},
    {RN_PRE_STARCODER,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89" "COLEs| I|'ve| |1|2|3|4|5|/|x|\n\n | ok"},
    {RN_PRE_STARCODER,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0|x|+=|y|;| $|1|,|0|0|0|.|5|0|!!| |\xe3\x80\x80|z"},
    {RN_PRE_STARCODER,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They|'|RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81|b| |\xc2\xb2|\xd9\xa3| \t\r|\n|end|.|  "},
    {RN_PRE_FALCON,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89" "COLEs| I|'|ve| |123|45|/|x|\n\n | ok"},
    {RN_PRE_FALCON,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0|x|+=|y|;| |$|1|,|000|.|50|!!| |\xe3\x80\x80|z"},
    {RN_PRE_FALCON,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They|'|RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81|b| \xc2\xb2\xd9\xa3| \t\r|\n|end|.|  "},
    {RN_PRE_DEEPSEEK_LLM,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89|COLEs| I|'|ve| |12345|/|x|\n|\n| | ok"},
    {RN_PRE_DEEPSEEK_LLM,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf|\xc3\xa9| |\xe4\xb8\xad\xe6\x96\x87| |\xea\xb0\x80|\xc2\xa0x|+=|y|;| $|1|,|000|.|50|!!| |\xe3\x80\x80z"},
    {RN_PRE_DEEPSEEK_LLM,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They|'|RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81|b| |\xc2\xb2\xd9\xa3| \t|\r|\n|end|.|  "},
    {RN_PRE_DEEPSEEK_CODER,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89" "COLEs| I|'|ve| |1|2|3|4|5|/|x|\n|\n| | ok"},
    {RN_PRE_DEEPSEEK_CODER,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| |\xe4\xb8\xad\xe6\x96\x87| |\xea\xb0\x80|\xc2\xa0x|+=|y|;| $|1|,|0|0|0|.|5|0|!!| |\xe3\x80\x80z"},
    {RN_PRE_DEEPSEEK_CODER,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They|'|RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81|b| |\xc2\xb2|\xd9\xa3| \t|\r|\n|end|.|  "},
    {RN_PRE_TEKKEN,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| He|LLo| \xc3\x89" "COLEs| I|'ve| |1|2|3|4|5|/x|\n\n| | ok"},
    {RN_PRE_TEKKEN,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0x|+=|y|;| $|1|,|0|0|0|.|5|0|!!| |\xe3\x80\x80z"},
    {RN_PRE_TEKKEN,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They|'RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81" "b| |\xc2\xb2|\xd9\xa3| \t\r\n|end|.|  "},
    {RN_PRE_GPT4O,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| He|LLo| \xc3\x89" "COLEs| I've| |123|45|/x|\n\n| | ok"},
    {RN_PRE_GPT4O,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0x|+=|y|;| $|1|,|000|.|50|!!| |\xe3\x80\x80z"},
    {RN_PRE_GPT4O,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They'RE| \xd0\x96\xd0\xb6\xd0\x96| a|\xcc\x81" "b| |\xc2\xb2\xd9\xa3| \t\r\n|end|.|  "},
    {RN_PRE_PORO,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89" "COLEs| I've| 12345/x|\n\n | ok"},
    {RN_PRE_PORO,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0|x+=y;| $1|,|000|.|50|!! \xe3\x80\x80|z"},
    {RN_PRE_PORO,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They'RE| \xd0\x96\xd0\xb6\xd0\x96| a\xcc\x81" "b| \xc2\xb2\xd9\xa3| \t\r\n|end|.  "},
    {RN_PRE_VIKING,
     "HELLOworld HeLLo \xc3\x89" "COLEs I've 12345/x\n\n  ok",
     "HELLOworld| HeLLo| \xc3\x89" "COLEs| I've| |1|2|3|4|5|/x|\n\n | ok"},
    {RN_PRE_VIKING,
     "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xea\xb0\x80\xc2\xa0x+=y; $1,000.50!! \xe3\x80\x80z",
     "caf\xc3\xa9| \xe4\xb8\xad\xe6\x96\x87| \xea\xb0\x80|\xc2\xa0|x+=y;| $|1|,|0|0|0|.|5|0|!! \xe3\x80\x80|z"},
    {RN_PRE_VIKING,
     "They'RE \xd0\x96\xd0\xb6\xd0\x96 a\xcc\x81" "b \xc2\xb2\xd9\xa3 \t\r\nend.  ",
     "They'RE| \xd0\x96\xd0\xb6\xd0\x96| a\xcc\x81" "b| |\xc2\xb2|\xd9\xa3| \t\r\n|end|.  "},
};

static void test_wpm_memory(void)
{
    size_t len = 0;
    void *data = wpm_vocab(true, &len);
    cr_status_t st = CR_OK;
    cr_err_t err;
    rn_tokenizer_t *tok = data ? load_mem(data, len, &st, &err) : NULL;
    CHECK_MSG(tok, "wordpiece vocab: %s", tok ? "" : err.msg);
    free(data);
    if (!tok)
        return;
    CHECK(rn_tokenizer_kind(tok) == RN_TOK_WPM);
    /* the normalizer's maps: first code point of NFD, first of lowercase */
    CHECK_EQ_INT(rn_unicode_nfd_first(0xE9), 'e');      /* e acute */
    CHECK_EQ_INT(rn_unicode_nfd_first(0x1E09), 'c');    /* c cedilla acute */
    CHECK_EQ_INT(rn_unicode_nfd_first(0xAC00), 0x1100); /* Hangul GA -> G */
    CHECK_EQ_INT(rn_unicode_nfd_first('a'), 'a');
    CHECK_EQ_INT(rn_unicode_nfd_first(0x4E2D), 0x4E2D);
    CHECK_EQ_INT(rn_unicode_nfd_first(RN_UTF8_RAW + 0xFF), RN_UTF8_RAW + 0xFF);
    CHECK_EQ_INT(rn_unicode_tolower('Q'), 'q');
    CHECK_EQ_INT(rn_unicode_tolower(0x391), 0x3B1);  /* Greek Alpha */
    CHECK_EQ_INT(rn_unicode_tolower(0x130), 'i');    /* I with dot above */
    CHECK_EQ_INT(rn_unicode_tolower(0x10400), 0x10428); /* Deseret */
    CHECK_EQ_INT(rn_unicode_tolower(0x3B1), 0x3B1);
    CHECK_EQ_INT(rn_unicode_tolower(0x110000), 0x110000);
    CHECK_EQ_INT(rn_tokenizer_bos(tok), W_CLS);
    CHECK_EQ_INT(rn_tokenizer_eos(tok), W_SEP);
    CHECK_EQ_INT(rn_tokenizer_unk(tok), W_UNK);
    CHECK(rn_tokenizer_add_bos(tok) && rn_tokenizer_add_eos(tok));
    /* [CLS] ... [SEP] with add_special; lowercase; "##" continuation */
    CHECK_IDS(tok, "Hello PLAYING!", true, false, W_CLS, W_HELLO, W_PLAY, W_ING, W_BANG,
              W_SEP);
    CHECK_IDS(tok, "Hello", false, false, W_HELLO);
    CHECK_IDS(tok, "", true, false, W_CLS, W_SEP);
    /* longest match first, then the rest of the word */
    CHECK_IDS(tok, "plays playing", false, false, W_PLAY, W_S, W_PLAY, W_ING);
    /* precomposed accents drop (NFD first code point), uppercase too */
    CHECK_IDS(tok, "CAF\xc3\x89 caf\xc3\xa9", false, false, W_CAFE, W_CAFE);
    /* a word it cannot spell is one [UNK], pieces already matched dropped */
    CHECK_IDS(tok, "hello xyz hello", false, false, W_HELLO, W_UNK, W_HELLO);
    CHECK_IDS(tok, "playx", false, false, W_UNK);
    /* punctuation, ASCII symbols and CJK ideographs are words of their own */
    CHECK_IDS(tok, "hello,hello", false, false, W_HELLO, W_COMMA, W_HELLO);
    CHECK_IDS(tok, "$hello", false, false, W_DOLLAR, W_HELLO);
    CHECK_IDS(tok, "\xe4\xb8\xad\xe4\xb8\xad", false, false, W_ZHONG, W_ZHONG);
    /* white space of any kind splits; controls, NUL and invalid bytes vanish */
    CHECK_IDS(tok, " \t hello\xe3\x80\x80\nhello  ", false, false, W_HELLO, W_HELLO);
    {
        static const char s[] = "hel\x01lo hel\xfflo he\0llo";
        size_t n = 0;
        int32_t *ids = enc(tok, s, sizeof s - 1, false, false, &n);
        const int32_t want[] = {W_HELLO, W_HELLO, W_HELLO};
        CHECK(ids && ids_eq(ids, n, want, 3));
        free(ids);
    }
    /* special tokens only when parsing is allowed */
    CHECK_IDS(tok, "[CLS]hello", false, true, W_CLS, W_HELLO);
    CHECK_IDS(tok, "[CLS]hello", false, false, W_UNK, W_UNK, W_UNK, W_HELLO);
    /* pieces: word starts get their space back, continuations none */
    check_piece(tok, W_HELLO, 0, " hello");
    check_piece(tok, W_ING, 0, "ing");
    check_piece(tok, W_CLS, 0, "");
    check_piece(tok, W_CLS, RN_PIECE_SPECIAL, "[CLS]");
    {
        const int32_t ids[] = {W_CLS, W_HELLO, W_PLAY, W_ING, W_SEP};
        size_t dl = 0;
        char *d = dec(tok, ids, 5, RN_PIECE_LSTRIP, &dl);
        CHECK(d && dl == 13 && !memcmp(d, "hello playing", 13));
        free(d);
    }
    rn_tokenizer_destroy(&tok);

    /* without id keys: BERT's default ids (past this vocabulary: none) */
    data = wpm_vocab(false, &len);
    tok = data ? load_mem(data, len, &st, &err) : NULL;
    CHECK(tok && rn_tokenizer_bos(tok) == -1 && rn_tokenizer_unk(tok) == -1);
    if (tok)
        CHECK_IDS(tok, "xyz hello", false, false, W_HELLO);
    rn_tokenizer_destroy(&tok);
    free(data);
}

static void test_pretok(void)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(SPLITS); i++)
        check_split(SPLITS[i].pre, SPLITS[i].text, SPLITS[i].want);
    check_split(RN_PRE_QWEN2, "abc 12345 x", "abc| |1|2|3|4|5| x");
    check_split(RN_PRE_LLAMA3, "abc 12345 x", "abc| |123|45| x");
    check_split(RN_PRE_LLAMA3, "I'M here\n\n  ok", "I|'M| here|\n\n| | ok");
    check_split(RN_PRE_GPT2, "I'M  a", "I|'|M| | a");
    check_split(RN_PRE_PORO, "Hello, world!(x)", "Hello|,| world|!(|x|)");
    check_split(RN_PRE_VIKING, "ab12 c", "ab|1|2| c");
    check_split(RN_PRE_DEFAULT, "a+=b 1234", "a|+=|b| |123|4");
    check_split(RN_PRE_STARCODER, "x12", "x|1|2");
    check_split(RN_PRE_TEKKEN, "HELLOworld HeLLo abc/d\n",
                "HELLOworld| He|LLo| abc|/d|\n");
    check_split(RN_PRE_GPT4O, "HELLO'S they'RE 12345", "HELLO'S| they'RE| |123|45");
    /* deepseek-llm's punctuation class spans the ASCII letters, so a word
     * ending in a non-ASCII letter splits there. */
    check_split(RN_PRE_DEEPSEEK_LLM, "caf\xc3\xa9 ok  ", "caf|\xc3\xa9| ok|  ");
    uint32_t *ends = (uint32_t *)1;
    size_t n = 7;
    CHECK(rn_pretok_split(RN_PRE_GPT2, NULL, 0, &ends, &n) == CR_OK && ends == NULL &&
          n == 0);
}

static void test_detok_memory(void)
{
    rn_tokenizer_t *tok = spm_tok(M_NONE);
    if (!tok)
        return;
    rn_detok_t *d = rn_detok_new(tok, RN_PIECE_LSTRIP);
    CHECK(d != NULL);
    const char *c;
    size_t n;
    cr_err_t err;
    /* ▁, <0xC3>, <0xA9>: "é" arrives only when complete. */
    CHECK(!rn_detok_push(d, S_SP, &c, &n, &err) && n == 0); /* stripped */
    CHECK(!rn_detok_push(d, S_BYTE0 + 0xC3, &c, &n, &err) && n == 0);
    CHECK_EQ_INT(rn_detok_pending(d), 1);
    CHECK(!rn_detok_push(d, S_BYTE0 + 0xA9, &c, &n, &err) && n == 2 &&
          !memcmp(c, "\xc3\xa9", 2));
    CHECK(!rn_detok_push(d, S_SPA, &c, &n, &err) && n == 2 && !memcmp(c, " a", 2));
    /* A lead byte followed by something else becomes U+FFFD. */
    CHECK(!rn_detok_push(d, S_BYTE0 + 0xE2, &c, &n, &err) && n == 0);
    CHECK(!rn_detok_push(d, S_A, &c, &n, &err) && n == 4 &&
          !memcmp(c,
                  "\xef\xbf\xbd"
                  "a",
                  4));
    /* A stray continuation byte can never complete. */
    CHECK(!rn_detok_push(d, S_BYTE0 + 0x80, &c, &n, &err) && n == 3);
    /* An id out of range is refused and changes nothing. */
    CHECK(!rn_detok_push(d, S_BYTE0 + 0xF0, &c, &n, &err) && n == 0);
    CHECK_EQ_INT(rn_detok_push(d, 99999, &c, &n, &err), CR_E_INVALID);
    CHECK_EQ_INT(rn_detok_pending(d), 1);
    /* Flush: the unfinished character becomes U+FFFD; the stream resets. */
    rn_detok_flush(d, &c, &n);
    CHECK(n == 3 && !memcmp(c, "\xef\xbf\xbd", 3));
    CHECK_EQ_INT(rn_detok_pending(d), 0);
    rn_detok_flush(d, &c, &n);
    CHECK_EQ_INT(n, 0);
    CHECK(!rn_detok_push(d, S_SPA, &c, &n, &err) && n == 1 &&
          c[0] == 'a'); /* LSTRIP again */
    rn_detok_destroy(&d);
    CHECK(d == NULL);
    rn_detok_destroy(&d);
    rn_tokenizer_destroy(&tok);
}

/* Each corrupt vocabulary must be refused with its status and a message
 * naming the key. */
static void test_corrupt(void)
{
    static const struct {
        const char *name;
        bool bpe;
        mut_t m;
        cr_status_t want;
        const char *msg;
    } cases[] = {
        {"model missing", false, M_NO_MODEL, CR_E_NOT_FOUND, "tokenizer.ggml.model"},
        {"model not a string", false, M_MODEL_U32, CR_E_CORRUPT, "tokenizer.ggml.model"},
        {"model rwkv", false, M_MODEL_RWKV, CR_E_UNSUPPORTED, "'rwkv'"},
        {"tokens missing", false, M_NO_TOKENS, CR_E_NOT_FOUND, "tokenizer.ggml.tokens"},
        {"tokens not strings", false, M_TOKENS_U32, CR_E_CORRUPT,
         "tokenizer.ggml.tokens"},
        {"tokens empty", false, M_TOKENS_EMPTY, CR_E_CORRUPT, "empty"},
        {"scores short", false, M_SCORES_SHORT, CR_E_CORRUPT,
         "tokenizer.ggml.scores has"},
        {"scores not numbers", false, M_SCORES_STR, CR_E_CORRUPT,
         "tokenizer.ggml.scores"},
        {"token type 9", false, M_TYPE_9, CR_E_CORRUPT, "tokenizer.ggml.token_type[262]"},
        {"token type -1", false, M_TYPE_NEG, CR_E_CORRUPT,
         "tokenizer.ggml.token_type[262]"},
        {"token types short", false, M_TYPES_SHORT, CR_E_CORRUPT,
         "tokenizer.ggml.token_type has"},
        {"bos out of range", false, M_BOS_RANGE, CR_E_CORRUPT, "bos_token_id"},
        {"eos negative", false, M_EOS_NEG, CR_E_CORRUPT, "eos_token_id = -5"},
        {"bos a string", false, M_BOS_STR, CR_E_CORRUPT, "bos_token_id"},
        {"add_bos not a bool", false, M_ADD_BOS_U8, CR_E_CORRUPT, "add_bos_token"},
        {"token too long", false, M_TOKEN_HUGE, CR_E_TOO_LARGE,
         "tokenizer.ggml.tokens[267]"},
        {"merges missing", true, M_NO_MERGES, CR_E_NOT_FOUND, "tokenizer.ggml.merges"},
        {"merge without separator", true, M_MERGE_NOSEP, CR_E_CORRUPT, "merges[2]"},
        {"merges not strings", true, M_MERGES_U32, CR_E_CORRUPT, "tokenizer.ggml.merges"},
        {"pre unknown", true, M_PRE_UNKNOWN, CR_E_UNSUPPORTED, "no-such-pre"},
        {"pre not a string", true, M_PRE_U32, CR_E_CORRUPT, "tokenizer.ggml.pre"},
        {"add_eos without eos", true, M_ADD_EOS_NO_EOS, CR_E_CORRUPT, "add_eos_token"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        size_t len = 0;
        void *data =
            cases[i].bpe ? bpe_vocab(cases[i].m, &len) : spm_vocab(cases[i].m, &len);
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = CR_OK;
        rn_tokenizer_t *tok = data ? load_mem(data, len, &st, &err) : NULL;
        CHECK_MSG(data && !tok && st == cases[i].want && strstr(err.msg, cases[i].msg),
                  "corrupt case '%s': status %s, msg \"%s\"", cases[i].name,
                  cr_status_str(st), err.msg);
        rn_tokenizer_destroy(&tok);
        free(data);
    }
    CHECK(rn_tokenizer_pre_supported("llama-bpe") && rn_tokenizer_pre_supported(NULL) &&
          rn_tokenizer_pre_supported("qwen2") && rn_tokenizer_pre_supported("tekken") &&
          !rn_tokenizer_pre_supported("deepseek-v3"));
}

/* ---- testdata: specials, streaming, hostile input --------------------------- */

static void test_specials_real(const char *root)
{
    cr_status_t st;
    cr_err_t err;
    rn_tokenizer_t *bpe = open_vocab(root, "llama-bpe", &st, &err);
    rn_tokenizer_t *spm = open_vocab(root, "llama-spm", &st, &err);
    CHECK(bpe && spm);
    if (!bpe || !spm)
        goto out;
    int32_t bot = rn_tokenizer_find(bpe, "<|begin_of_text|>", 17);
    int32_t eot = rn_tokenizer_find(bpe, "<|eot_id|>", 10);
    CHECK(bot == 128000 && eot == 128009);
    CHECK_EQ_INT(rn_tokenizer_bos(bpe), 128000);
    CHECK_EQ_INT(rn_tokenizer_eot(bpe), 128009);
    CHECK(rn_tokenizer_is_eog(bpe, 128001) && rn_tokenizer_is_eog(bpe, 128009));
    CHECK(!rn_tokenizer_is_eog(bpe, 128000) && !rn_tokenizer_is_eog(bpe, 9906));
    CHECK_IDS(bpe, "Hello", false, false, 9906);
    CHECK_IDS(bpe, "Hello", true, false, 128000, 9906);
    CHECK_IDS(bpe, "<|begin_of_text|>Hello<|eot_id|>", false, true, 128000, 9906, 128009);
    {
        const char *s = "<|begin_of_text|>Hello<|eot_id|>";
        size_t n = 0, dl = 0;
        int32_t *ids = enc(bpe, s, strlen(s), false, false, &n);
        bool any = false;
        for (size_t i = 0; ids && i < n; i++)
            any |= ids[i] >= 128000;
        CHECK(ids && !any && n > 3);
        char *d = ids ? dec(bpe, ids, n, 0, &dl) : NULL;
        CHECK(d && !strcmp(d, s)); /* plain text, round trip */
        free(ids);
        free(d);
    }
    /* SentencePiece: <s> and </s> only with parse_special; the text after
     * <s> gets its space prefix. */
    CHECK_IDS(spm, "Hello", true, false, 1, 15043);
    CHECK_IDS(spm, "<s>Hello</s>", false, true, 1, 15043, 2);
    {
        size_t n = 0;
        int32_t *ids = enc(spm, "<s>Hello</s>", 12, false, false, &n);
        bool any = false;
        for (size_t i = 0; ids && i < n; i++)
            any |= ids[i] == 1 || ids[i] == 2;
        CHECK(ids && !any);
        free(ids);
    }
    CHECK(rn_tokenizer_is_eog(spm, 2) && !rn_tokenizer_is_eog(spm, 1));
    check_piece(spm, 13, 0, "\n"); /* <0x0A> */
    check_piece(spm, 15043, 0, " Hello");
    check_piece(spm, 1, 0, "");
    check_piece(bpe, 128009, RN_PIECE_SPECIAL, "<|eot_id|>");
    check_piece(bpe, 128009, 0, "");
out:
    rn_tokenizer_destroy(&bpe);
    rn_tokenizer_destroy(&spm);
}

/* Streams text's ids one at a time: every chunk must be valid UTF-8 and the
 * chunks must add up to text. Returns how often bytes were held back. */
static int stream_check(const rn_tokenizer_t *tok, const char *text, unsigned flags)
{
    size_t n = 0;
    int32_t *ids = enc(tok, text, strlen(text), false, false, &n);
    rn_detok_t *d = rn_detok_new(tok, flags);
    CHECK(ids && d);
    if (!ids || !d) {
        free(ids);
        rn_detok_destroy(&d);
        return 0;
    }
    cr_buf_t all;
    cr_buf_init(&all, 1 << 20);
    int held = 0;
    bool valid = true;
    for (size_t i = 0; i < n; i++) {
        const char *c;
        size_t cl;
        cr_err_t err;
        CHECK(rn_detok_push(d, ids[i], &c, &cl, &err) == CR_OK);
        valid &= utf8_valid(c, cl);
        held += rn_detok_pending(d) > 0;
        cr_buf_append(&all, c, cl);
    }
    const char *c;
    size_t cl;
    rn_detok_flush(d, &c, &cl);
    cr_buf_append(&all, c, cl);
    CHECK_MSG(valid, "a chunk split a UTF-8 character");
    CHECK_MSG(all.len == strlen(text) && !memcmp(all.data, text, all.len),
              "stream of \"%s\" gave \"%s\"", text, all.data ? all.data : "");
    cr_buf_free(&all);
    rn_detok_destroy(&d);
    free(ids);
    return held;
}

static void test_stream_real(const char *root)
{
    cr_status_t st;
    cr_err_t err;
    rn_tokenizer_t *spm = open_vocab(root, "llama-spm", &st, &err);
    rn_tokenizer_t *bpe = open_vocab(root, "llama-bpe", &st, &err);
    if (spm) {
        /* 🦙 and ᑌ have no piece in LLaMA's vocabulary: byte tokens. */
        int held = stream_check(
            spm, "\xf0\x9f\xa6\x99\xf0\x9f\xa6\x99 h\xc3\xa9llo \xe1\x91\x8c!",
            RN_PIECE_LSTRIP);
        CHECK_MSG(held >= 6, "llama-spm held back only %d times", held);
    }
    if (bpe) {
        int held =
            stream_check(bpe,
                         "\xf0\x9f\x98\xb6\xe2\x80\x8d\xf0\x9f\x8c\xab\xef\xb8\x8f "
                         "\xe1\x9e\x80\xe1\x9e\xb6\xe1\x9e\x93",
                         0);
        CHECK_MSG(held >= 1, "llama-bpe held back only %d times", held);
    }
    rn_tokenizer_destroy(&spm);
    rn_tokenizer_destroy(&bpe);
}

/* Encodes s and checks the round trip (and no failure). */
static void hostile_one(const rn_tokenizer_t *tok, const char *what, const char *s,
                        size_t len, bool want_rt)
{
    size_t n = 0, dl = 0;
    int32_t *ids = enc(tok, s, len, false, false, &n);
    CHECK_MSG(ids != NULL, "%s: tokenize failed", what);
    for (size_t i = 0; ids && i < n; i++)
        if (ids[i] < 0 || (size_t)ids[i] >= rn_tokenizer_n_vocab(tok)) {
            CHECK_MSG(false, "%s: id %d out of range", what, ids[i]);
            break;
        }
    unsigned fl = rn_tokenizer_kind(tok) == RN_TOK_SPM ? RN_PIECE_LSTRIP : 0;
    char *d = ids ? dec(tok, ids, n, fl, &dl) : NULL;
    bool rt = d && dl == len && !memcmp(d, s, len);
    if (!want_rt) {
        free(ids);
        free(d);
        return;
    }
    CHECK_MSG(rt, "%s: no round trip (%zu -> %zu bytes)", what, len, dl);
    if (!rt && d && len < 100) {
        fprintf(stderr, "  in : ");
        for (size_t i = 0; i < len; i++)
            fprintf(stderr, "%02x", (uint8_t)s[i]);
        fprintf(stderr, "\n  out: ");
        for (size_t i = 0; i < dl; i++)
            fprintf(stderr, "%02x", (uint8_t)d[i]);
        fprintf(stderr, "\n");
        print_ids("ids", ids, n);
    }
    free(ids);
    free(d);
}

static void test_hostile_real(const char *root)
{
    /* Round trips hold for any bytes with llama-spm (byte fallback) and
     * llama-bpe (a token for every byte). Not with deepseek-llm, whose
     * tokens for bytes like 0xFF are user-defined and so decode as text
     * (llama.cpp does the same), nor with falcon, which has no token for
     * bytes that valid UTF-8 never holds: those only must not fail. */
    static const char *names[] = {"llama-spm", "llama-bpe", "deepseek-llm", "falcon"};
    /* 1 MB: words, numbers, emoji, long runs of one letter, of spaces and
     * of newlines, and every byte value. */
    size_t big_len = (size_t)1 << 20;
    char *big = malloc(big_len);
    static const char sample[] =
        "Hello, y'all! 12345 \xf0\x9f\xa6\x99 \xe4\xbd\xa0\xe5\xa5\xbd  \t\n\n"
        "caf\xc3\xa9 <s> \xff\xfe ";
    size_t k = 0;
    while (k < big_len / 2) {
        size_t c = CR_MIN(sizeof sample - 1, big_len / 2 - k);
        memcpy(big + k, sample, c);
        k += c;
    }
    memset(big + k, 'a', big_len / 8), k += big_len / 8;
    memset(big + k, ' ', big_len / 8), k += big_len / 8;
    memset(big + k, '\n', big_len / 16), k += big_len / 16;
    for (uint32_t x = 12345; k < big_len; k++) {
        x = x * 1103515245u + 12345u;
        big[k] = (char)(x >> 16);
    }
    static const char bad[] =
        "\xff\xfe abc \xc3\x28 \xe2\x82 \xf0\x9f\x98 \x80\x80 \xed\xa0\x80 "
        "\xc0\xaf \xf4\x90\x80\x80 end\xe2";
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++) {
        cr_status_t st;
        cr_err_t err;
        rn_tokenizer_t *tok = open_vocab(root, names[i], &st, &err);
        CHECK_MSG(tok != NULL, "%s: %s", names[i], err.msg);
        if (!tok)
            continue;
        bool rt = i < 2;
        hostile_one(tok, "invalid UTF-8", bad, sizeof bad - 1, rt);
        hostile_one(tok, "1 MB", big, big_len, rt);
        hostile_one(tok, "empty", "", 0, true);
        size_t n = 99;
        int32_t one[4];
        CHECK(rn_tokenize(tok, "", 0, false, true, one, 4, &n, &err) == CR_OK && n == 0);
        CHECK(rn_tokenize(tok, "", 0, true, true, one, 4, &n, &err) == CR_OK &&
              n == (rn_tokenizer_add_bos(tok) ? 1u : 0u));
        /* Special texts everywhere, parsed. */
        cr_buf_t sb;
        cr_buf_init(&sb, 1 << 20);
        for (int r = 0; r < 20000; r++)
            cr_buf_puts(&sb, r % 3 ? "<|eot_id|><s>x" : "</s><|begin_of_text|> ");
        size_t sn = 0;
        int32_t *ids = enc(tok, sb.data, sb.len, true, true, &sn);
        CHECK_MSG(ids && sn > 20000, "%s: specials everywhere", names[i]);
        free(ids);
        cr_buf_free(&sb);
        rn_tokenizer_destroy(&tok);
    }
    free(big);
    /* An input over the limit is refused before any work. */
    {
        cr_status_t st;
        cr_err_t err;
        rn_tokenizer_t *tok = open_vocab(root, "llama-spm", &st, &err);
        size_t n = 0;
        int32_t out[1];
        if (tok)
            CHECK_EQ_INT(rn_tokenize(tok, "x", (size_t)RN_TOK_MAX_INPUT_BYTES + 1, false,
                                     false, out, 1, &n, &err),
                         CR_E_TOO_LARGE);
        rn_tokenizer_destroy(&tok);
    }
    /* The vocabulary with a duplicated key never reaches the tokenizer. */
    {
        char path[4096];
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-dbrx-corrupt.gguf", root);
        cr_gguf_t *g = NULL;
        cr_err_t err;
        CHECK(cr_gguf_open(path, &g, &err) != CR_OK && g == NULL);
    }
}

/* Parses whitespace-separated ids; returns how many (at most cap). */
static size_t parse_ids(const char *s, int32_t *out, size_t cap)
{
    size_t n = 0;
    for (const char *p = s; *p && n < cap;) {
        char *q;
        long v = strtol(p, &q, 10);
        if (q == p)
            break;
        out[n++] = (int32_t)v;
        p = q;
    }
    return n;
}

/* The models' own vocabularies against llama.cpp's reference runs: the
 * prompt's ids (BOS added, specials parsed) and the generated text. */
static void test_models_real(const char *root)
{
    static const char *models[][2] = {
        {"stories260K.gguf", "stories260K-F32"},
        {"tiny-spm-f16.gguf", "tiny-spm-f16"},
    };
    for (size_t m = 0; m < CR_ARRAY_LEN(models); m++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/models/%s", root, models[m][0]);
        cr_gguf_t *g = NULL;
        rn_tokenizer_t *tok = NULL;
        cr_err_t err;
        if (cr_gguf_open(path, &g, &err) || rn_tokenizer_load(g, &tok, &err)) {
            CHECK_MSG(false, "%s: %s", models[m][0], err.msg);
            cr_gguf_close(&g);
            continue;
        }
        cr_gguf_close(&g); /* the tokenizer keeps its own copy */
        size_t len = 0;
        snprintf(path, sizeof path, "%s/reference/%s/ref.prompt_ids.txt", root,
                 models[m][1]);
        char *txt = read_file(path, &len);
        int32_t want[64], gen[256];
        size_t nw = txt ? parse_ids(txt, want, 64) : 0;
        free(txt);
        const char *prompt = "Once upon a time";
        size_t n = 0;
        int32_t *got = enc(tok, prompt, strlen(prompt), true, true, &n);
        CHECK_MSG(got && nw > 1 && ids_eq(got, n, want, nw), "%s: prompt ids",
                  models[m][0]);
        free(got);

        snprintf(path, sizeof path, "%s/reference/%s/ref.greedy_ids.txt", root,
                 models[m][1]);
        txt = read_file(path, &len);
        size_t ng = txt ? parse_ids(txt, gen, 256) : 0;
        free(txt);
        snprintf(path, sizeof path, "%s/reference/%s/ref.greedy_text.txt", root,
                 models[m][1]);
        char *want_text = read_file(path, &len);
        size_t dl = 0;
        char *d = dec(tok, gen, ng, 0, &dl);
        CHECK_MSG(d && want_text && ng > 10 && dl == len && !memcmp(d, want_text, len),
                  "%s: generated text differs:\n  got  \"%s\"\n  want \"%s\"",
                  models[m][0], d ? d : "", want_text ? want_text : "");
        /* The stream gives the same text (the reference is valid UTF-8). */
        rn_detok_t *ds = rn_detok_new(tok, 0);
        cr_buf_t b;
        cr_buf_init(&b, 1 << 20);
        for (size_t i = 0; ds && i < ng; i++) {
            const char *c;
            size_t cl;
            if (!rn_detok_push(ds, gen[i], &c, &cl, &err))
                cr_buf_append(&b, c, cl);
        }
        if (ds) {
            const char *c;
            size_t cl;
            rn_detok_flush(ds, &c, &cl);
            cr_buf_append(&b, c, cl);
        }
        CHECK_MSG(want_text && b.len == len && !memcmp(b.data, want_text, len),
                  "%s: streamed text differs", models[m][0]);
        cr_buf_free(&b);
        rn_detok_destroy(&ds);
        free(d);
        free(want_text);
        rn_tokenizer_destroy(&tok);
    }
}

int main(void)
{
    test_spm_memory();
    test_bpe_memory();
    test_wpm_memory();
    test_pretok();
    test_detok_memory();
    test_corrupt();
    const char *root = check_testdata("vocab/ggml-vocab-llama-spm.gguf");
    if (!root) {
        printf(
            "test_tokenizer: testdata absent (CORRAL_TESTDATA): vocabulary vectors, "
            "specials, streaming and hostile-input cases on real vocabularies skipped\n");
        return check_finish("test_tokenizer");
    }
    test_vectors(root);
    test_specials_real(root);
    test_stream_real(root);
    test_hostile_real(root);
    if (check_testdata("models/stories260K.gguf"))
        test_models_real(root);
    return check_finish("test_tokenizer");
}
