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
 * llama-tokenize for strings that mix added tokens with text. */
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

/* A SentencePiece vocabulary with a mask token spelled mask, written with
 * general.architecture arch and general.name name. */
static rn_tokenizer_t *mask_vocab(const char *arch, const char *name, const char *mask)
{
    const char *toks[T_N] = {"<unk>", "<s>", "</s>", SP, "a", SP "a", mask};
    float scores[T_N] = {0, 0, 0, -1, -2, -1, 0};
    int32_t types[T_N] = {2, 3, 3, 1, 1, 1, 3};
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t e;
    cr_gguf_writer_add_str(w, "general.architecture", arch, &e);
    cr_gguf_writer_add_str(w, "general.name", name, &e);
    cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "llama", &e);
    cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", toks, T_N, &e);
    cr_gguf_writer_add_arr(w, "tokenizer.ggml.scores", CR_GGUF_F32, scores, T_N, &e);
    cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32, types, T_N, &e);
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

int main(void)
{
    test_strip_attrs();
    const char *root = check_testdata("vocab/ggml-vocab-mpt.gguf");
    if (!root) {
        printf("test_tokenizer_added: testdata absent (CORRAL_TESTDATA): real "
               "vocabularies skipped\n");
        return check_finish("test_tokenizer_added");
    }
    test_sweep(root);
    return check_finish("test_tokenizer_added");
}
