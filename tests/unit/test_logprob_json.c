/* test_logprob_json.c: logprobs entries written without allocating match,
 * byte for byte, what jansson's compact dump gives for the same object
 * (the form the engine sent before), for every token of real vocabularies
 * (SentencePiece with byte tokens, byte-level BPE with 128k pieces) and of
 * the built-in synthetic one, with log-probs of every shape (integers,
 * tiny, large exponents, negative zero); and the UTF-8 check. */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/gguf.h"
#include "services/runner/output/logprob_json.h"
#include "tools/synth/synth.h"
#include "services/runner/text/tokenizer.h"
#include "services/runner/text/unicode.h"
#include "tests/unit/check.h"

#include <jansson.h>
#include <unistd.h>

/* The reference: the engine's former jansson construction. */
static json_t *ref_piece(const rn_tokenizer_t *tok, int32_t id, float lp)
{
    char piece[1024];
    size_t n = 0;
    if (rn_token_piece(tok, id, 0, piece, sizeof piece, &n, NULL))
        n = 0;
    json_t *bytes = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    json_t *text = json_stringn(piece, n);
    return json_pack("{s:o,s:f,s:o}", "token", text ? text : json_string(""),
                     "logprob", (double)lp, "bytes", bytes);
}

static char *ref_entry(const rn_tokenizer_t *tok, int32_t id, float lp,
                       const rn_logprob_t *top, size_t n_top)
{
    json_t *entry = ref_piece(tok, id, lp);
    json_t *alts = json_array();
    for (size_t i = 0; i < n_top; i++)
        json_array_append_new(alts, ref_piece(tok, top[i].token, top[i].logprob));
    json_object_set_new(entry, "top_logprobs", alts);
    char *text = json_dumps(entry, JSON_COMPACT);
    json_decref(entry);
    return text;
}

static const float LPS[] = {-0.0f,  -1.0f,     -2.5f,   -1e-5f, -1e-30f,
                            -123.456f, -0.333333f, -87.0f, -1e6f, -3e-8f};

/* Every token of tok as the chosen one, with two alternatives. */
static int compare_vocab(const rn_tokenizer_t *tok, const char *name)
{
    int32_t n = (int32_t)rn_tokenizer_n_vocab(tok);
    cr_buf_t b;
    cr_buf_init(&b, 1u << 20);
    int bad = 0;
    for (int32_t id = 0; id < n; id++) {
        float lp = LPS[id % (int32_t)(sizeof LPS / sizeof LPS[0])];
        rn_logprob_t top[2] = {{(id + 1) % n, -0.5f}, {(id + 7) % n, lp * 2}};
        size_t n_top = (size_t)(id % 3); /* 0, 1 or 2 alternatives */
        cr_buf_reset(&b);
        CHECK(rn_logprob_json(&b, tok, id, lp, top, n_top) == CR_OK);
        CHECK(cr_buf_putc(&b, '\0') == CR_OK);
        char *want = ref_entry(tok, id, lp, top, n_top);
        if (!want || strcmp(want, b.data)) {
            if (bad++ < 5)
                fprintf(stderr, "%s token %d:\n  got  %s\n  want %s\n", name,
                        (int)id, b.data, want ? want : "(null)");
        }
        free(want);
    }
    cr_buf_free(&b);
    CHECK_MSG(bad == 0, "%s: %d of %d entries differ", name, bad, (int)n);
    return bad;
}

static void test_vocab_file(const char *rel)
{
    const char *root = check_testdata(rel);
    if (!root) {
        fprintf(stderr, "test_logprob_json: %s absent; skipped\n", rel);
        return;
    }
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    cr_err_t err;
    CHECK_MSG(cr_gguf_open(path, &g, &err) == CR_OK, "%s: %s", rel, err.msg);
    CHECK_MSG(g && rn_tokenizer_load(g, &tok, &err) == CR_OK, "%s: %s", rel,
              err.msg);
    cr_gguf_close(&g);
    if (tok)
        compare_vocab(tok, rel);
    rn_tokenizer_destroy(&tok);
}

static void test_synth_vocab(void)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/corral-lpjson-%d.gguf", (int)getpid());
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.vocab_only = true;
    cr_err_t err;
    CHECK(rn_synth_write(&so, path, &err) == CR_OK);
    cr_gguf_t *g = NULL;
    rn_tokenizer_t *tok = NULL;
    CHECK(cr_gguf_open(path, &g, &err) == CR_OK);
    CHECK(g && rn_tokenizer_load(g, &tok, &err) == CR_OK);
    cr_gguf_close(&g);
    if (tok)
        compare_vocab(tok, "synth");
    rn_tokenizer_destroy(&tok);
    unlink(path);
}

static void test_utf8(void)
{
    CHECK(rn_utf8_valid("", 0));
    CHECK(rn_utf8_valid("plain", 5));
    CHECK(rn_utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9)); /* é € 😀 */
    CHECK(!rn_utf8_valid("\xc3", 1));             /* cut */
    CHECK(!rn_utf8_valid("\xc0\xaf", 2));         /* overlong */
    CHECK(!rn_utf8_valid("\xe0\x80\xaf", 3));     /* overlong */
    CHECK(!rn_utf8_valid("\xed\xa0\x80", 3));     /* surrogate */
    CHECK(!rn_utf8_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
    CHECK(!rn_utf8_valid("\x80", 1));             /* lone continuation */
    CHECK(!rn_utf8_valid("\xff", 1));
}

int main(void)
{
    test_utf8();
    test_synth_vocab();
    test_vocab_file("vocab/ggml-vocab-llama-spm.gguf");
    test_vocab_file("vocab/ggml-vocab-llama-bpe.gguf");
    test_vocab_file("vocab/ggml-vocab-bert-bge.gguf");
    return check_finish("logprob_json");
}
