/* tokenizer_wpm.c: WordPiece (tokenizer.ggml.model "bert"), as llama.cpp's
 * WPM tokenizer does it.
 *
 * Normalize: each code point becomes the first code point of its NFD form
 * (so precomposed accents drop: "é" -> "e"), then lowercase. Split: white
 * space ends a word; NUL, U+FFFD, invalid bytes and control/format code
 * points vanish; punctuation, ASCII symbols and CJK ideographs are words of
 * their own. Match: each word, with U+2581 in front (the GGUF converter
 * writes word-initial pieces as "▁piece" and "##piece" continuations as
 * "piece"), is cut greedily into the longest vocabulary strings from left to
 * right, at byte positions; a word with any position nothing matches
 * becomes the unknown token as a whole. */
#include "lib/prelude.h"
#include "services/runner/text/tokenizer_internal.h"
#include "services/runner/text/unicode.h"

#define WORD_PREFIX "\xe2\x96\x81" /* U+2581 */
#define WORD_PREFIX_LEN 3

/* CJK ideograph blocks that BERT splits one per word (the ranges of its
 * reference implementation, kept as llama.cpp has them). */
static bool is_cjk(uint32_t cp)
{
    return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
           (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
           (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
           (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

/* Greedy longest-match of word[0..n) (which starts with U+2581). */
static void encode_word(const rn_tokenizer_t *tok, const char *word, size_t n,
                        rn_emit_t *e)
{
    size_t start = e->n;
    size_t max_len = tok->max_token_len;
    for (size_t i = 0; i < n;) {
        size_t j = n - i < max_len ? n : i + max_len;
        int32_t id = -1;
        for (; j > i; j--) {
            id = rn_tok_lookup(tok, word + i, j - i);
            if (id >= 0 && (uint32_t)id < tok->n_vocab)
                break;
            id = -1;
        }
        if (id < 0) {
            e->n = start; /* discard the word's pieces */
            break;
        }
        rn_emit_id(e, id);
        i = j;
    }
    if (e->n == start && tok->unk >= 0)
        rn_emit_id(e, tok->unk);
}

cr_status_t rn_wpm_encode(const rn_tokenizer_t *tok, const char *text, size_t len,
                          rn_emit_t *e)
{
    if (len == 0)
        return CR_OK;
    /* A lowercase form is at most twice its source's UTF-8 bytes. */
    char *word = malloc(2 * len + WORD_PREFIX_LEN + 8);
    if (!word)
        return CR_E_NOMEM;
    memcpy(word, WORD_PREFIX, WORD_PREFIX_LEN);
    size_t wn = WORD_PREFIX_LEN;
    const uint8_t *s = (const uint8_t *)text;
    for (size_t off = 0; off < len;) {
        uint32_t cp;
        off += rn_utf8_decode(s + off, len - off, &cp);
        if (RN_UTF8_IS_RAW(cp))
            continue; /* invalid UTF-8: llama.cpp's U+FFFD, dropped */
        cp = rn_unicode_nfd_first(cp);
        if (rn_unicode_is_space(cp)) {
            if (wn > WORD_PREFIX_LEN)
                encode_word(tok, word, wn, e);
            wn = WORD_PREFIX_LEN;
            continue;
        }
        rn_ucat_t cat = rn_unicode_cat(cp);
        if (cp == 0 || cp == 0xFFFD || cat == RN_UCAT_OTHER)
            continue;
        char u[4];
        size_t ul = rn_utf8_encode(rn_unicode_tolower(cp), u);
        if (cat == RN_UCAT_PUNCT || (cp < 0x7F && cat == RN_UCAT_SYMBOL) || is_cjk(cp)) {
            if (wn > WORD_PREFIX_LEN)
                encode_word(tok, word, wn, e);
            memcpy(word + WORD_PREFIX_LEN, u, ul);
            encode_word(tok, word, WORD_PREFIX_LEN + ul, e);
            wn = WORD_PREFIX_LEN;
            continue;
        }
        memcpy(word + wn, u, ul);
        wn += ul;
    }
    if (wn > WORD_PREFIX_LEN)
        encode_word(tok, word, wn, e);
    free(word);
    return CR_OK;
}
