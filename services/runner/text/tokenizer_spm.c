/* tokenizer_spm.c: SentencePiece (tokenizer.ggml.model "llama"), the way
 * llama.cpp runs it: spaces become U+2581 (with one more in front when the
 * caller asks), the text is cut into UTF-8 characters, and the adjacent pair
 * whose concatenation is a vocabulary piece with the highest score is merged
 * (leftmost on ties) until no pair spells a piece. A final symbol that is no
 * piece falls back to its bytes' <0xXX> tokens (or <unk> where the
 * vocabulary has none). Owns no state. */
#include "lib/prelude.h"
#include "services/runner/text/tokenizer_internal.h"
#include "services/runner/text/unicode.h"

static const char ESCAPED_SPACE[3] = {(char)0xE2, (char)0x96, (char)0x81};

typedef struct sym {
    uint32_t start;     /* byte offset in the normalized text */
    uint32_t n;         /* bytes; 0 once merged into its left neighbour */
    int32_t prev, next; /* neighbours, -1 at the ends */
} sym_t;

static cr_status_t try_pair(const rn_tokenizer_t *tok, rn_tok_heap_t *h,
                            const sym_t *s, const char *text, int32_t l,
                            int32_t r)
{
    if (l < 0 || r < 0)
        return CR_OK;
    /* Neighbours are adjacent in the text, so their concatenation is the
     * span from the left one's start. */
    uint32_t size = s[l].n + s[r].n;
    int32_t id = rn_tok_lookup(tok, text + s[l].start, size);
    if (id < 0 || (uint32_t)id >= tok->n_vocab)
        return CR_OK;
    rn_bigram_t b = {-(double)tok->scores[id], l, r, size};
    return rn_tok_heap_push(h, b);
}

cr_status_t rn_spm_encode(const rn_tokenizer_t *tok, const char *text,
                          size_t len, bool prefix_space, rn_emit_t *e)
{
    /* Normalize: every ' ' becomes U+2581 (3 bytes). */
    size_t cap = 3 * len + 3;
    char *buf = malloc(cap ? cap : 1);
    sym_t *s = NULL;
    rn_tok_heap_t heap = {0};
    cr_status_t st = CR_E_NOMEM;
    if (!buf)
        goto out;
    size_t n = 0;
    if (prefix_space) {
        memcpy(buf, ESCAPED_SPACE, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + n, ESCAPED_SPACE, 3);
            n += 3;
        } else {
            buf[n++] = text[i];
        }
    }
    if (n == 0) {
        st = CR_OK;
        goto out;
    }

    /* One symbol per character. A byte that is not valid UTF-8 is a symbol
     * of its own (llama.cpp trusts a lead byte's length instead, which lets
     * a stray lead byte swallow part of a following U+2581; on valid UTF-8
     * the two agree). */
    s = malloc(n * sizeof *s);
    if (!s)
        goto out;
    int32_t n_sym = 0;
    for (size_t off = 0; off < n;) {
        uint32_t cp;
        size_t cl = rn_utf8_decode((const uint8_t *)buf + off, n - off, &cp);
        s[n_sym].start = (uint32_t)off;
        s[n_sym].n = (uint32_t)cl;
        s[n_sym].prev = n_sym - 1;
        off += cl;
        s[n_sym].next = off < n ? n_sym + 1 : -1;
        n_sym++;
    }

    for (int32_t i = 1; i < n_sym; i++)
        if ((st = try_pair(tok, &heap, s, buf, i - 1, i)))
            goto out;
    rn_bigram_t b;
    while (rn_tok_heap_pop(&heap, &b)) {
        sym_t *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* one side changed since this pair was queued */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = b.left;
        if ((st = try_pair(tok, &heap, s, buf, l->prev, b.left)) ||
            (st = try_pair(tok, &heap, s, buf, b.left, l->next)))
            goto out;
    }

    for (int32_t i = 0; i >= 0; i = s[i].next) {
        int32_t id = rn_tok_lookup(tok, buf + s[i].start, s[i].n);
        if (id >= 0 && (uint32_t)id < tok->n_vocab) {
            rn_emit_id(e, id);
            continue;
        }
        for (uint32_t k = 0; k < s[i].n; k++) {
            int32_t bt = tok->byte_tok[(uint8_t)buf[s[i].start + k]];
            if (bt < 0)
                bt = tok->unk;
            if (bt >= 0)
                rn_emit_id(e, bt);
        }
    }
    st = CR_OK;
out:
    free(buf);
    free(s);
    rn_tok_heap_free(&heap);
    return st;
}
