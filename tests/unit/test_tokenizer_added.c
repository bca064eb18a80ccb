/* test_tokenizer_added.c: added tokens in plain text.
 *
 * The rule (llama.cpp's tokenizer_st_partition, Hugging Face's added
 * vocabulary): user-defined tokens (GGUF token type 4) are cut out of any
 * text as their single id, parse_special or not; control and unknown tokens
 * only with parse_special, so request content can never produce one.
 *
 * In memory: the strip attributes llama.cpp sets by model (<mask> for
 * nomic-bert-moe, [MASK] for modern-bert). Testdata part (skipped, saying
 * so, without CORRAL_TESTDATA): every user-defined and control token of
 * every vocabulary in testdata/vocab, and ids recorded from llama.cpp's
 * llama-tokenize for strings that mix added tokens with text (each
 * vocabulary, special parsing on and off). */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "lib/status.h"
#include "services/runner/text/tokenizer.h"
#include "tests/unit/check.h"

/* Encodes into a malloc'd array (NULL on error). */
static int32_t *enc(const rn_tokenizer_t *tok, const char *s, size_t len,
                    bool parse_special, size_t *n)
{
    size_t cap = len + 16;
    int32_t *ids = malloc(cap * sizeof *ids);
    cr_err_t err;
    if (!ids || rn_tokenize(tok, s, len, false, parse_special, ids, cap, n, &err)) {
        free(ids);
        return NULL;
    }
    return ids;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n && i < 64; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

static bool check_ids(const rn_tokenizer_t *tok, const char *text, bool parse_special,
                      const int32_t *want, size_t n_want)
{
    size_t n = 0;
    int32_t *got = enc(tok, text, strlen(text), parse_special, &n);
    bool ok = got && n == n_want && (n == 0 || !memcmp(got, want, n * sizeof *got));
    CHECK_MSG(ok, "ids of \"%s\" (parse_special %d)", text, parse_special);
    if (!ok) {
        print_ids("want", want, n_want);
        if (got)
            print_ids("got ", got, n);
    }
    free(got);
    return ok;
}

#define CHECK_IDS(tok, text, parse, ...)                                       \
    do {                                                                       \
        const int32_t want_[] = {__VA_ARGS__};                                 \
        check_ids((tok), (text), (parse), want_, CR_ARRAY_LEN(want_));         \
    } while (0)

/* ---- strip attributes, in memory --------------------------------------- */

#define SP "\xe2\x96\x81" /* U+2581 */

enum { T_UNK, T_BOS, T_EOS, T_SP, T_A, T_SPA, T_MASK, T_N };

/* A SentencePiece vocabulary whose last token is spelled mask with token
 * type mask_type, written with general.architecture arch, general.name
 * name and, if key is not NULL, the u32 key naming the last token. */
static rn_tokenizer_t *vocab_with(const char *arch, const char *name, const char *mask,
                                  int mask_type, const char *key)
{
    const char *toks[T_N] = {"<unk>", "<s>", "</s>", SP, "a", SP "a", mask};
    float scores[T_N] = {0, 0, 0, -1, -2, -1, 0};
    int32_t types[T_N] = {2, 3, 3, 1, 1, 1, mask_type};
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t e;
    cr_gguf_writer_add_str(w, "general.architecture", arch, &e);
    cr_gguf_writer_add_str(w, "general.name", name, &e);
    cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", &e);
    cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, T_N, &e);
    cr_gguf_writer_add_arr(w, "tokenizer.ggml.scores", CR_GGUF_F32, scores, T_N, &e);
    cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32, types, T_N, &e);
    if (key)
        cr_gguf_writer_add_u32(w, key, T_MASK, &e);
    void *data = NULL;
    size_t len = 0;
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    if (!cr_gguf_writer_write_memory(w, &data, &len, &e) &&
        !cr_gguf_open_memory(data, len, &g, &e) && rn_tokenizer_load(g, &tok, &e))
        fprintf(stderr, "mask vocab: %s\n", e.msg);
    cr_gguf_close(&g);
    cr_gguf_writer_destroy(&w);
    free(data);
    return tok;
}

static rn_tokenizer_t *mask_vocab(const char *arch, const char *name, const char *mask)
{
    return vocab_with(arch, name, mask, RN_TOKEN_CONTROL, NULL);
}

/* FIM prefix/suffix/middle tokens found by text are control tokens (as in
 * llama.cpp), even when the file says user-defined; a key naming the
 * token leaves its type as stored. */
static void test_fim_by_text(void)
{
    static const char *const texts[] = {"<fim_prefix>", "<|fim_suffix|>", "<MID>",
                                        SP "<PRE>"};
    for (size_t i = 0; i < CR_ARRAY_LEN(texts); i++) {
        rn_tokenizer_t *tok = vocab_with("llama", "plain", texts[i],
                                         RN_TOKEN_USER_DEFINED, NULL);
        CHECK(tok && rn_tokenizer_is_control(tok, T_MASK));
        rn_tokenizer_destroy(&tok);
    }
    rn_tokenizer_t *tok = vocab_with("llama", "plain", "<fim_prefix>",
                                     RN_TOKEN_USER_DEFINED, NULL);
    if (tok) {
        /* plain text without parse_special, the token with it */
        size_t n = 0;
        int32_t *ids = enc(tok, "a<fim_prefix>", 13, false, &n);
        CHECK(ids && n > 2 && ids[n - 1] != T_MASK);
        free(ids);
        CHECK_IDS(tok, "a<fim_prefix>", true, T_SPA, T_MASK);
    }
    rn_tokenizer_destroy(&tok);
    tok = vocab_with("llama", "plain", "<fim_prefix>", RN_TOKEN_USER_DEFINED,
                     "tokenizer.ggml.fim_pre_token_id");
    if (tok) {
        CHECK(!rn_tokenizer_is_control(tok, T_MASK));
        CHECK_IDS(tok, "a<fim_prefix>", false, T_SPA, T_MASK);
    }
    rn_tokenizer_destroy(&tok);
}

static void test_strip_attrs(void)
{
    /* Without a strip attribute the space before the mask stays text. */
    rn_tokenizer_t *tok = mask_vocab("llama", "plain", "<mask>");
    CHECK(tok != NULL);
    if (tok)
        CHECK_IDS(tok, "a <mask>", true, T_SPA, T_SP, T_MASK);
    rn_tokenizer_destroy(&tok);
    /* nomic-bert-moe (and jina-bert-v3, jina-v2-*): <mask> eats the spaces
     * before it. */
    tok = mask_vocab("nomic-bert-moe", "plain", "<mask>");
    CHECK(tok != NULL);
    if (tok) {
        CHECK_IDS(tok, "a  <mask>", true, T_SPA, T_MASK);
        CHECK_IDS(tok, "a <mask> a", true, T_SPA, T_MASK, T_SP, T_SPA);
    }
    rn_tokenizer_destroy(&tok);
    /* modern-bert (by general.name): [MASK] does. */
    tok = mask_vocab("bert", "Modern-BERT-base", "[MASK]");
    CHECK(tok != NULL);
    if (tok)
        CHECK_IDS(tok, "a [MASK]", true, T_SPA, T_MASK);
    rn_tokenizer_destroy(&tok);
}

/* ---- every added token of every real vocabulary --------------------------- */

static rn_tokenizer_t *open_vocab(const char *root, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", root, name);
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    cr_err_t err;
    if (cr_gguf_open(path, &g, &err) || rn_tokenizer_load(g, &tok, &err))
        fprintf(stderr, "%s: %s\n", name, err.msg);
    cr_gguf_close(&g);
    return tok;
}

static bool has_id(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

/* The token whose text is text[0..len) when the partition reaches it
 * first: the lowest id among the longest user-defined texts. */
static bool is_first_spelling(const rn_tokenizer_t *tok, int32_t id)
{
    size_t len = 0;
    const char *text = rn_tokenizer_token_text(tok, id, &len);
    return rn_tokenizer_find(tok, text, len) == id;
}

/* Checks every user-defined and control token of one vocabulary; returns
 * how many user-defined tokens it has. */
static int sweep_vocab(const char *root, const char *name)
{
    rn_tokenizer_t *tok = open_vocab(root, name);
    CHECK_MSG(tok != NULL, "%s does not load", name);
    if (!tok)
        return 0;
    int n_user = 0, n_control = 0, n_dup = 0;
    char buf[1024];
    for (int32_t id = 0; id < (int32_t)rn_tokenizer_n_vocab(tok); id++) {
        size_t len = 0;
        const char *text = rn_tokenizer_token_text(tok, id, &len);
        if (len == 0 || len + 8 > sizeof buf)
            continue;
        bool control = rn_tokenizer_is_control(tok, id) ||
                       rn_tokenizer_token_type(tok, id) == RN_TOKEN_UNKNOWN;
        bool user = !control && rn_tokenizer_token_type(tok, id) == RN_TOKEN_USER_DEFINED;
        if (!control && !user)
            continue;
        if (!is_first_spelling(tok, id)) {
            n_dup++; /* another id spells it; that one wins */
            continue;
        }
        size_t n = 0;
        int32_t *ids = NULL;
        if (user) {
            /* Alone and between words, with special parsing off: its id. */
            n_user++;
            ids = enc(tok, text, len, false, &n);
            CHECK_MSG(ids && n == 1 && ids[0] == id, "%s: user-defined %d alone", name,
                      id);
            free(ids);
            int bl = snprintf(buf, sizeof buf, "x%.*sy", (int)len, text);
            ids = enc(tok, buf, (size_t)bl, false, &n);
            CHECK_MSG(ids && has_id(ids, n, id), "%s: user-defined %d in text", name, id);
        } else {
            /* Plain text without parse_special (no control id at all), its
             * id with it. */
            n_control++;
            ids = enc(tok, text, len, false, &n);
            bool any = false;
            for (size_t i = 0; ids && i < n; i++)
                any |= rn_tokenizer_is_control(tok, ids[i]) ||
                       rn_tokenizer_token_type(tok, ids[i]) == RN_TOKEN_UNKNOWN;
            CHECK_MSG(ids && !any, "%s: control %d came from plain text", name, id);
            free(ids);
            ids = enc(tok, text, len, true, &n);
            CHECK_MSG(ids && n == 1 && ids[0] == id, "%s: control %d parsed", name, id);
        }
        free(ids);
    }
    printf("  %-15s %5d user-defined matched, %3d control kept as text, %d spelled "
           "twice\n",
           name, n_user, n_control, n_dup);
    rn_tokenizer_destroy(&tok);
    return n_user;
}

static void test_sweep(const char *root)
{
    static const struct {
        const char *name;
        bool has_user; /* the file has user-defined tokens */
    } vocabs[] = {
        {"llama-spm", false},      {"llama-bpe", false}, {"phi-3", false},
        {"baichuan", false},       {"gpt-2", false},     {"deepseek-llm", true},
        {"deepseek-coder", true},  {"falcon", false},    {"mpt", true},
        {"gpt-neox", true},        {"starcoder", false}, {"refact", true},
        {"bert-bge", false},
    };
    printf("added tokens in plain text:\n");
    for (size_t i = 0; i < CR_ARRAY_LEN(vocabs); i++) {
        int n_user = sweep_vocab(root, vocabs[i].name);
        CHECK_MSG(!vocabs[i].has_user || n_user > 0, "%s: no user-defined token",
                  vocabs[i].name);
    }
}

/* ---- ids recorded from llama.cpp ------------------------------------------ */

/* Strings mixing added tokens (user-defined and control) with text, with
 * and without special parsing, for every vocabulary. Produced by llama.cpp
 * de3ff815 (tools/tokenize, vocab-only, CPU build):
 *   llama-tokenize -m ggml-vocab-NAME.gguf -p TEXT --ids --log-disable \
 *       --no-bos --no-escape [--no-parse-special]
 * (--no-bos also means no EOS: add_special off; parse_special is the
 * tool's default, --no-parse-special turns it off). */
typedef struct recorded {
    const char *vocab;
    bool parse_special;
    const char *text;
    int32_t ids[48];
    size_t n;
} recorded_t;

static const recorded_t RECORDED[] = {
    /* DeepSeek Coder's FIM tokens are user-defined in the file, but
     * llama.cpp finds them by text and makes them control tokens; its
     * <|EOT|> stays user-defined (matched in plain text) */
    {"deepseek-coder", false,
     "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>def f(<\xef\xbd\x9c"
     "fim\xe2\x96\x81" "hole\xef\xbd\x9c>):<\xef\xbd\x9c" "fim\xe2\x96\x81"
     "end\xef\xbd\x9c><|EOT|>",
     {27, 169, 121, 237, 69, 308, 11028, 210, 946, 169, 121, 237, 29, 1551, 267, 7, 27,
      169, 121, 237, 69, 308, 11028, 210, 19496, 169, 121, 237, 29, 1772, 27, 169, 121,
      237, 69, 308, 11028, 210, 408, 169, 121, 237, 29, 32021}, 44},
    {"deepseek-coder", true,
     "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>def f(<\xef\xbd\x9c"
     "fim\xe2\x96\x81" "hole\xef\xbd\x9c>):<\xef\xbd\x9c" "fim\xe2\x96\x81"
     "end\xef\xbd\x9c><|EOT|>",
     {32016, 1551, 267, 7, 32015, 1772, 32017, 32021}, 8},
    {"deepseek-coder", false,
     "Hello \xc3\xb5 world \xc3\xb7\xc3\x81!",
     {17535, 207, 32000, 1835, 207, 32001, 32002, 0}, 8},
    {"deepseek-coder", true,
     "Hello \xc3\xb5 world \xc3\xb7\xc3\x81!",
     {17535, 207, 32000, 1835, 207, 32001, 32002, 0}, 8},
    {"deepseek-coder", false,
     "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>x \xc3\xbd\xc3\xbe",
     {27, 169, 121, 237, 946, 11028, 210, 990, 11028, 210, 18119, 720, 169, 121, 237, 29,
      87, 207, 32003, 32008}, 20},
    {"deepseek-coder", true,
     "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>x \xc3\xbd\xc3\xbe",
     {32013, 87, 207, 32003, 32008}, 5},
    {"deepseek-llm", false,
     "na\xc3\xafve caf\xc3\xa9 \xc3\xb8\xc3\xb6\xc3\xba",
     {2490, 2865, 313, 26506, 587, 207, 100002, 100003, 100004}, 9},
    {"deepseek-llm", true,
     "na\xc3\xafve caf\xc3\xa9 \xc3\xb8\xc3\xb6\xc3\xba",
     {2490, 2865, 313, 26506, 587, 207, 100002, 100003, 100004}, 9},
    {"deepseek-llm", false,
     "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c> \xc3\x80\xc3\xbf",
     {27, 68940, 237, 409, 11009, 210, 994, 11009, 210, 53582, 68940, 237, 29, 207,
      100010, 100005}, 16},
    {"deepseek-llm", true,
     "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c> \xc3\x80\xc3\xbf",
     {100001, 207, 100010, 100005}, 4},
    {"mpt", false,
     "a          b\n\n   c",
     {66, 50268, 67, 535, 50275, 68}, 6},
    {"mpt", true,
     "a          b\n\n   c",
     {66, 50268, 67, 535, 50275, 68}, 6},
    {"mpt", false,
     "x<|endoftext|>y<|padding|>z    w",
     {89, 29, 93, 423, 1171, 1156, 49651, 90, 29, 93, 17333, 49651, 91, 50274, 88}, 15},
    {"mpt", true,
     "x<|endoftext|>y<|padding|>z    w",
     {89, 0, 90, 1, 91, 50274, 88}, 7},
    {"gpt-neox", false,
     "def f():\n        return 1",
     {1545, 269, 14850, 187, 50270, 2309, 209, 18}, 8},
    {"gpt-neox", true,
     "def f():\n        return 1",
     {1545, 269, 14850, 187, 50270, 2309, 209, 18}, 8},
    {"gpt-neox", false,
     "<|endoftext|>  a   ",
     {29, 93, 423, 1171, 1156, 49651, 50276, 66, 50275}, 9},
    {"gpt-neox", true,
     "<|endoftext|>  a   ",
     {0, 50276, 66, 50275}, 4},
    {"refact", false,
     "x[PAD49152]y[PAD49160]",
     {106, 49152, 107, 49160}, 4},
    {"refact", true,
     "x[PAD49152]y[PAD49160]",
     {106, 49152, 107, 49160}, 4},
    {"refact", false,
     "<fim_prefix>def f():<fim_suffix>",
     {46, 88, 449, 81, 4254, 48, 589, 296, 2262, 46, 88, 449, 81, 12420, 48}, 15},
    {"refact", true,
     "<fim_prefix>def f():<fim_suffix>",
     {1, 589, 296, 2262, 3}, 5},
    {"phi-3", false,
     "<|user|>\nHi</s><|end|> <s>x",
     {529, 29989, 1792, 29989, 29958, 13, 18567, 829, 29879, 5299, 29989, 355, 29989,
      29958, 529, 29879, 29958, 29916}, 18},
    {"phi-3", true,
     "<|user|>\nHi</s><|end|> <s>x",
     {32010, 6324, 2, 32007, 1, 921}, 6},
    {"phi-3", false,
     "a </s> b",
     {263, 1533, 29879, 29958, 289}, 5},
    {"phi-3", true,
     "a </s> b",
     {263, 29871, 2, 289}, 4},
    {"llama-spm", false,
     "<s>Hello</s> world",
     {529, 29879, 29958, 10994, 829, 29879, 29958, 3186}, 8},
    {"llama-spm", true,
     "<s>Hello</s> world",
     {1, 15043, 2, 29871, 3186}, 5},
    {"llama-spm", false,
     " <unk> x",
     {29871, 529, 2960, 29958, 921}, 5},
    {"llama-spm", true,
     " <unk> x",
     {259, 0, 29871, 921}, 4},
    {"llama-bpe", false,
     "<|begin_of_text|>Hi<|eot_id|>",
     {27, 91, 7413, 3659, 4424, 91, 29, 13347, 27, 91, 68, 354, 851, 91, 29}, 15},
    {"llama-bpe", true,
     "<|begin_of_text|>Hi<|eot_id|>",
     {128000, 13347, 128009}, 3},
    {"llama-bpe", false,
     "a<|reserved_special_token_0|>b",
     {64, 27, 91, 52202, 42729, 6594, 62, 15, 91, 29, 65}, 11},
    {"llama-bpe", true,
     "a<|reserved_special_token_0|>b",
     {64, 128002, 65}, 3},
    {"bert-bge", false,
     "[CLS] hello [SEP] [MASK] world",
     {1031, 18856, 2015, 1033, 7592, 1031, 19802, 1033, 1031, 7308, 1033, 2088}, 12},
    {"bert-bge", true,
     "[CLS] hello [SEP] [MASK] world",
     {101, 7592, 102, 103, 2088}, 5},
    {"bert-bge", false,
     "[UNK]x",
     {1031, 4895, 2243, 1033, 1060}, 5},
    {"bert-bge", true,
     "[UNK]x",
     {100, 1060}, 2},
    {"gpt-2", false,
     "<|endoftext|>Hello",
     {27, 91, 437, 1659, 5239, 91, 29, 15496}, 8},
    {"gpt-2", true,
     "<|endoftext|>Hello",
     {50256, 15496}, 2},
    {"gpt-2", false,
     "a<|endoftext|> b",
     {64, 27, 91, 437, 1659, 5239, 91, 29, 275}, 9},
    {"gpt-2", true,
     "a<|endoftext|> b",
     {64, 50256, 275}, 3},
    {"falcon", false,
     ">>TITLE<<Hi",
     {500, 6539, 503, 5516}, 4},
    {"falcon", true,
     ">>TITLE<<Hi",
     {0, 5516}, 2},
    {"falcon", false,
     "x<|endoftext|>y",
     {99, 39, 103, 415, 1487, 2164, 54146, 100}, 8},
    {"falcon", true,
     "x<|endoftext|>y",
     {99, 11, 100}, 3},
    {"starcoder", false,
     "<fim_prefix>def<fim_middle>",
     {65, 107, 468, 100, 4271, 67, 610, 65, 107, 468, 100, 10519, 67}, 13},
    {"starcoder", true,
     "<fim_prefix>def<fim_middle>",
     {1, 610, 2}, 3},
    {"starcoder", false,
     "<|endoftext|>x",
     {65, 129, 15546, 31124, 28339, 125}, 6},
    {"starcoder", true,
     "<|endoftext|>x",
     {0, 125}, 2},
    {"baichuan", false,
     "<s>\xe4\xbd\xa0\xe5\xa5\xbd</s>",
     {1557, 31114, 31219, 25211, 2154, 31114, 31219}, 7},
    {"baichuan", true,
     "<s>\xe4\xbd\xa0\xe5\xa5\xbd</s>",
     {1, 9875, 31213, 2}, 4},
    {"baichuan", false,
     "a </s>",
     {650, 4600, 31114, 31219}, 4},
    {"baichuan", true,
     "a </s>",
     {650, 31106, 2}, 3},
};

static void test_recorded(const char *root)
{
    int ok = 0;
    for (size_t i = 0; i < CR_ARRAY_LEN(RECORDED); i++) {
        const recorded_t *r = &RECORDED[i];
        rn_tokenizer_t *tok = open_vocab(root, r->vocab);
        CHECK_MSG(tok != NULL, "%s does not load", r->vocab);
        if (!tok)
            continue;
        if (check_ids(tok, r->text, r->parse_special, r->ids, r->n))
            ok++;
        else
            fprintf(stderr, "  (%s)\n", r->vocab);
        rn_tokenizer_destroy(&tok);
    }
    printf("  %d of %zu strings match llama-tokenize\n", ok, CR_ARRAY_LEN(RECORDED));
}

int main(void)
{
    test_strip_attrs();
    test_fim_by_text();
    const char *root = check_testdata("vocab/ggml-vocab-mpt.gguf");
    if (!root) {
        printf("test_tokenizer_added: testdata absent (CORRAL_TESTDATA): real "
               "vocabularies skipped\n");
        return check_finish("test_tokenizer_added");
    }
    test_sweep(root);
    test_recorded(root);
    return check_finish("test_tokenizer_added");
}
