/* tokenizer_bpe.c: byte-level BPE (tokenizer.ggml.model "gpt2"): the GPT-2
 * byte alphabet, the merge table, and encoding one raw-text fragment.
 *
 * A fragment is split into pre-tokens (tokenizer_pretok.c); each pre-token's
 * bytes become one symbol per byte (the byte's alphabet character), and the
 * adjacent pair with the lowest merge rank (leftmost on ties) is merged
 * until no pair has a rank. Symbols carry string ids, and the merge table
 * maps a pair of ids to its rank and the id of the merged string, so the
 * loop compares integers, never strings. */
#include "lib/prelude.h"
#include "services/runner/text/tokenizer_internal.h"
#include "services/runner/text/unicode.h"

/* Bytes that stand for themselves: '!'..'~', 0xA1..0xAC, 0xAE..0xFF. The
 * other 68 (0x00..0x20, 0x7F..0xA0, 0xAD) take U+0100 onwards, in order. */
static bool byte_is_self(uint8_t b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

uint32_t rn_bpe_byte_to_cp(uint8_t b)
{
    if (byte_is_self(b))
        return b;
    if (b <= 0x20)
        return 0x100u + b;
    if (b >= 0x7F && b <= 0xA0)
        return 0x100u + 0x21u + (b - 0x7Fu);
    return 0x100u + 0x21u + 0x22u; /* 0xAD */
}

int rn_bpe_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return byte_is_self((uint8_t)cp) ? (int)cp : -1;
    if (cp <= 0x120)
        return (int)(cp - 0x100);
    if (cp <= 0x142)
        return (int)(cp - 0x121 + 0x7F);
    if (cp == 0x143)
        return 0xAD;
    return -1;
}

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static bool merge_find(const rn_tokenizer_t *tok, int32_t l, int32_t r,
                       uint32_t *rank, int32_t *res)
{
    if (l < 0 || r < 0 || !tok->merge_key)
        return false;
    uint64_t key = ((uint64_t)(uint32_t)(l + 1) << 32) | (uint32_t)(r + 1);
    for (uint32_t i = (uint32_t)mix64(key) & tok->merge_mask;;
         i = (i + 1) & tok->merge_mask) {
        if (tok->merge_key[i] == 0)
            return false;
        if (tok->merge_key[i] == key) {
            *rank = tok->merge_rank[i];
            *res = (int32_t)tok->merge_res[i];
            return true;
        }
    }
}

cr_status_t rn_bpe_build_merges(rn_tokenizer_t *tok, const rn_span_t *merges,
                                size_t n, cr_err_t *err)
{
    size_t slots = 16;
    while (slots < 2 * n)
        slots <<= 1;
    tok->merge_key = calloc(slots, sizeof *tok->merge_key);
    tok->merge_rank = malloc(slots * sizeof *tok->merge_rank);
    tok->merge_res = malloc(slots * sizeof *tok->merge_res);
    if (!tok->merge_key || !tok->merge_rank || !tok->merge_res)
        return cr_err_set(err, CR_E_NOMEM, "tokenizer: no memory for %zu merges", n);
    tok->merge_mask = (uint32_t)(slots - 1);

    char *joined = NULL;
    size_t joined_cap = 0;
    cr_status_t st = CR_OK;
    for (size_t i = 0; i < n; i++) {
        const char *p = merges[i].ptr;
        size_t len = merges[i].len;
        /* The separator is the first space after the first byte, so a left
         * part may itself start with a space (llama.cpp splits the same). */
        const char *sp = len > 1 ? memchr(p + 1, ' ', len - 1) : NULL;
        if (!sp) {
            st = cr_err_set(
                err, CR_E_CORRUPT,
                "tokenizer.ggml.merges[%zu] has no space separating its two parts", i);
            break;
        }
        size_t ll = (size_t)(sp - p), rl = len - ll - 1;
        if (rl == 0)
            continue; /* "a ": no symbol is empty, so it can never apply */
        if (ll + rl > joined_cap) {
            char *nj = realloc(joined, ll + rl);
            if (!nj) {
                st = cr_err_set(err, CR_E_NOMEM, "tokenizer: no memory for merges");
                break;
            }
            joined = nj;
            joined_cap = ll + rl;
        }
        memcpy(joined, p, ll);
        memcpy(joined + ll, sp + 1, rl);
        int32_t l = rn_tok_intern(tok, p, ll);
        int32_t r = rn_tok_intern(tok, sp + 1, rl);
        int32_t res = rn_tok_intern(tok, joined, ll + rl);
        if (l < 0 || r < 0 || res < 0) {
            st = cr_err_set(err, CR_E_NOMEM, "tokenizer: no memory for merge strings");
            break;
        }
        uint64_t key = ((uint64_t)(uint32_t)(l + 1) << 32) | (uint32_t)(r + 1);
        for (uint32_t k = (uint32_t)mix64(key) & tok->merge_mask;;
             k = (k + 1) & tok->merge_mask) {
            if (tok->merge_key[k] == key)
                break; /* a repeated pair keeps its first (best) rank */
            if (tok->merge_key[k] == 0) {
                tok->merge_key[k] = key;
                tok->merge_rank[k] = (uint32_t)i;
                tok->merge_res[k] = (uint32_t)res;
                tok->n_merges++;
                break;
            }
        }
    }
    free(joined);
    return st;
}

typedef struct sym {
    int32_t id;         /* string id, -1 if no string spells it */
    int32_t prev, next; /* neighbours, -1 at the ends */
    uint32_t n;         /* bytes; 0 once merged into its left neighbour */
} sym_t;

static cr_status_t try_pair(const rn_tokenizer_t *tok, rn_tok_heap_t *h,
                            const sym_t *s, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return CR_OK;
    uint32_t rank;
    int32_t res;
    if (!merge_find(tok, s[l].id, s[r].id, &rank, &res))
        return CR_OK;
    rn_bigram_t b = {(double)rank, l, r, s[l].n + s[r].n};
    return rn_tok_heap_push(h, b);
}

/* Emits the token of raw byte b, or <unk>, when no token spells a symbol. */
static void emit_byte(const rn_tokenizer_t *tok, uint8_t b, rn_emit_t *e)
{
    int32_t id = tok->byte_tok[b];
    if (id < 0)
        id = tok->unk;
    if (id >= 0)
        rn_emit_id(e, id);
}

/* Merges one pre-token (raw bytes w[0..n)) and emits its tokens. */
static cr_status_t encode_word(const rn_tokenizer_t *tok, const uint8_t *w,
                               size_t n, sym_t *s, rn_tok_heap_t *h, char *enc,
                               rn_emit_t *e)
{
    if (tok->ignore_merges) {
        /* Llama 3: a pre-token that is a token is taken whole. */
        size_t el = 0;
        for (size_t i = 0; i < n; i++)
            el += rn_utf8_encode(rn_bpe_byte_to_cp(w[i]), enc + el);
        int32_t id = rn_tok_lookup(tok, enc, el);
        if (id >= 0 && (uint32_t)id < tok->n_vocab) {
            rn_emit_id(e, id);
            return CR_OK;
        }
    }
    for (size_t i = 0; i < n; i++) {
        s[i].id = tok->byte_sym[w[i]];
        s[i].prev = (int32_t)i - 1;
        s[i].next = i + 1 < n ? (int32_t)i + 1 : -1;
        s[i].n = 1;
    }
    h->n = 0;
    cr_status_t st;
    for (size_t i = 1; i < n; i++)
        if ((st = try_pair(tok, h, s, (int32_t)i - 1, (int32_t)i)))
            return st;
    rn_bigram_t b;
    while (rn_tok_heap_pop(h, &b)) {
        sym_t *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size)
            continue; /* one side changed since this pair was queued */
        uint32_t rank;
        int32_t res;
        merge_find(tok, l->id, r->id, &rank, &res);
        l->id = res;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            s[r->next].prev = b.left;
        if ((st = try_pair(tok, h, s, l->prev, b.left)) ||
            (st = try_pair(tok, h, s, b.left, l->next)))
            return st;
    }
    for (int32_t i = 0; i >= 0; i = s[i].next) {
        if (s[i].id >= 0 && (uint32_t)s[i].id < tok->n_vocab) {
            rn_emit_id(e, s[i].id);
        } else {
            for (uint32_t k = 0; k < s[i].n; k++)
                emit_byte(tok, w[(size_t)i + k], e);
        }
    }
    return CR_OK;
}

cr_status_t rn_bpe_encode(const rn_tokenizer_t *tok, const char *text,
                          size_t len, rn_emit_t *e)
{
    if (len == 0)
        return CR_OK;
    const uint8_t *t = (const uint8_t *)text;
    cr_status_t st = CR_E_NOMEM;
    uint32_t *cps = malloc(len * sizeof *cps);
    uint32_t *offs = malloc((len + 1) * sizeof *offs);
    uint32_t *ends = NULL;
    sym_t *syms = NULL;
    char *enc = NULL;
    rn_tok_heap_t heap = {0};
    if (!cps || !offs)
        goto out;

    size_t n = 0;
    for (size_t i = 0; i < len;) {
        offs[n] = (uint32_t)i;
        i += rn_utf8_decode(t + i, len - i, &cps[n]);
        n++;
    }
    offs[n] = (uint32_t)len;

    size_t n_words = 0;
    if ((st = rn_pretok_split(tok->pre, cps, n, &ends, &n_words)))
        goto out;
    size_t max_word = 0, start = 0;
    for (size_t k = 0; k < n_words; k++) {
        size_t wl = offs[ends[k]] - offs[start];
        max_word = CR_MAX(max_word, wl);
        start = ends[k];
    }
    st = CR_E_NOMEM;
    syms = malloc(max_word * sizeof *syms);
    enc = malloc(max_word * 2 + 1); /* alphabet chars take 1 or 2 bytes */
    if (!syms || !enc)
        goto out;
    start = 0;
    st = CR_OK;
    for (size_t k = 0; k < n_words && !st; k++) {
        size_t a = offs[start], b = offs[ends[k]];
        st = encode_word(tok, t + a, b - a, syms, &heap, enc, e);
        start = ends[k];
    }
out:
    free(cps);
    free(offs);
    free(ends);
    free(syms);
    free(enc);
    rn_tok_heap_free(&heap);
    return st;
}
