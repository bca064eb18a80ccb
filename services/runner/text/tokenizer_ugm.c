/* tokenizer_ugm.c: SentencePiece unigram (tokenizer.ggml.model "t5": T5,
 * XLM-RoBERTa and so bge-m3), the way llama.cpp runs it.
 *
 * Normalization, one prefix of the raw text at a time: the longest prefix
 * along a user-defined token's text passes as is (llama.cpp walks its
 * trie of those texts and keeps the deepest node, token or not); else the
 * longest prefix the precompiled charsmap knows becomes its normalized
 * string; else one UTF-8 character stays as it is (an invalid byte becomes
 * U+FFFD). In what comes out, spaces become U+2581; a run of non-spaces
 * gets one U+2581 in front when it is the first (add_space_prefix) or
 * always (remove_extra_whitespaces, which also drops the spaces).
 *
 * Segmentation: Viterbi over byte offsets. Every normal, user-defined or
 * unused piece that starts at an offset extends the best path there by its
 * score (0 for user-defined pieces); a character that no single piece
 * spells is the unknown token at the lowest normal score minus 10. Runs of
 * unknown tokens come out as one. There is no byte fallback: llama.cpp's
 * unigram never emits <0xXX> tokens, and neither do we.
 *
 * Owns the charsmap's checking and the unigram tables; no other state. */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "services/runner/text/tokenizer_internal.h"

#include <float.h>

#define K_CHARSMAP "tokenizer.ggml.precompiled_charsmap"
#define UNKNOWN_PENALTY 10.0f

static const char ESCAPED_SPACE[3] = {(char)0xE2, (char)0x96, (char)0x81};

/* ---- the charsmap trie --------------------------------------------------
 *
 * A double array (Darts-clone's layout, XOR-compressed), one uint32 unit per
 * node. Walking from state s (an offset) over byte c reaches unit s ^ c,
 * which is a child only if its label is c; the child's state is its index
 * XOR its base. A child with the leaf bit ends a key: the unit at its state
 * holds the key's offset into the normalized strings (bit 31 set, so it is
 * never anyone's child). The root is unit 0 and starts at its base. */

static uint32_t unit_base(uint32_t u)
{
    /* bits 10..30; bit 9 says they are stored shifted right by 8 */
    return (u >> 10) << ((u & (1u << 9)) >> 6);
}

static uint32_t unit_label(uint32_t u) { return u & (0x80000000u | 0xffu); }
static bool unit_is_leaf(uint32_t u) { return (u >> 8) & 1u; }
static uint32_t unit_value(uint32_t u) { return u & 0x7fffffffu; }

/* Length of the longest prefix of p[0..n) that the charsmap maps, 0 if
 * none; *str gets the offset of its normalized string. */
static size_t charsmap_match(const rn_tokenizer_t *tok, const uint8_t *p, size_t n,
                             uint32_t *str)
{
    if (tok->n_xcda == 0)
        return 0;
    size_t best = 0;
    uint32_t s = unit_base(tok->xcda[0]);
    for (size_t i = 0; i < n && p[i] != 0; i++) {
        uint32_t idx = s ^ p[i];
        if (idx >= tok->n_xcda || unit_label(tok->xcda[idx]) != p[i])
            break;
        bool leaf = unit_is_leaf(tok->xcda[idx]);
        s = idx ^ unit_base(tok->xcda[idx]);
        if (leaf && s < tok->n_xcda) { /* checked at load; kept for safety */
            best = i + 1;
            *str = unit_value(tok->xcda[s]);
        }
    }
    return best;
}

/* Every node reachable from the root, each once: a leaf's value unit must
 * exist and point into the normalized strings. An index past the array
 * only ends a walk, so it is not an error. */
static cr_status_t check_trie(const rn_tokenizer_t *tok, cr_err_t *err)
{
    uint32_t n = tok->n_xcda;
    uint8_t *seen = calloc(n, 1);
    uint32_t *stack = malloc((size_t)n * sizeof *stack);
    cr_status_t st = CR_OK;
    if (!seen || !stack) {
        st = cr_err_set(err, CR_E_NOMEM, "%s: no memory to check %u units", K_CHARSMAP,
                        n);
        goto out;
    }
    size_t top = 0;
    stack[top++] = unit_base(tok->xcda[0]);
    seen[0] = 1;
    while (top > 0 && !st) {
        uint32_t s = stack[--top];
        for (uint32_t c = 1; c < 256; c++) {
            uint32_t idx = s ^ c;
            if (idx >= n || seen[idx] || unit_label(tok->xcda[idx]) != c)
                continue;
            seen[idx] = 1;
            uint32_t next = idx ^ unit_base(tok->xcda[idx]);
            if (unit_is_leaf(tok->xcda[idx])) {
                if (next >= n) {
                    st = cr_err_set(err, CR_E_CORRUPT,
                                    "%s: unit %u ends a key but its value unit %u is "
                                    "past the %u units",
                                    K_CHARSMAP, idx, next, n);
                    break;
                }
                uint32_t off = unit_value(tok->xcda[next]);
                if (off >= tok->n_norm_strs) {
                    st = cr_err_set(err, CR_E_CORRUPT,
                                    "%s: unit %u points at byte %u of %u bytes of "
                                    "normalized strings",
                                    K_CHARSMAP, next, off, tok->n_norm_strs);
                    break;
                }
            }
            /* each unit is pushed at most once, so the stack never
             * holds more than n states */
            stack[top++] = next;
        }
    }
out:
    free(seen);
    free(stack);
    return st;
}

/* Layout: u32 trie size in bytes (little-endian), the trie's units, then
 * the normalized strings (at least one byte, the last one NUL). */
static cr_status_t load_charsmap(rn_tokenizer_t *tok, const cr_gguf_t *g, cr_err_t *err)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, K_CHARSMAP);
    if (!kv)
        return CR_OK; /* no normalization beyond whitespace */
    if (kv->type != CR_GGUF_ARRAY ||
        (kv->v.arr.type != CR_GGUF_U8 && kv->v.arr.type != CR_GGUF_I8))
        return cr_err_set(err, CR_E_CORRUPT, "%s must be an array of u8", K_CHARSMAP);
    const uint8_t *p = kv->v.arr.data;
    uint64_t size = kv->v.arr.n;
    if (size < 4)
        return cr_err_set(err, CR_E_CORRUPT,
                          "%s is %" PRIu64 " bytes, too short for its trie size",
                          K_CHARSMAP, size);
    uint64_t trie_bytes = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 |
                          (uint64_t)p[3] << 24;
    if (trie_bytes % 4 != 0)
        return cr_err_set(err, CR_E_CORRUPT,
                          "%s: trie size %" PRIu64 " is not a whole number of units",
                          K_CHARSMAP, trie_bytes);
    if (4 + trie_bytes >= size)
        return cr_err_set(err, CR_E_CORRUPT,
                          "%s: a trie of %" PRIu64 " bytes leaves no normalized strings "
                          "in %" PRIu64 " bytes",
                          K_CHARSMAP, trie_bytes, size);
    uint64_t n_strs = size - 4 - trie_bytes;
    if (n_strs > UINT32_MAX || trie_bytes / 4 > UINT32_MAX)
        return cr_err_set(err, CR_E_TOO_LARGE, "%s is %" PRIu64 " bytes", K_CHARSMAP, size);
    if (p[size - 1] != 0)
        return cr_err_set(err, CR_E_CORRUPT,
                          "%s: the last normalized string has no NUL (truncated?)",
                          K_CHARSMAP);
    tok->n_xcda = (uint32_t)(trie_bytes / 4);
    tok->n_norm_strs = (uint32_t)n_strs;
    tok->xcda = malloc((tok->n_xcda ? tok->n_xcda : 1) * sizeof *tok->xcda);
    tok->norm_strs = malloc((size_t)n_strs);
    if (!tok->xcda || !tok->norm_strs)
        return cr_err_set(err, CR_E_NOMEM, "%s: no memory for %" PRIu64 " bytes",
                          K_CHARSMAP, size);
    for (uint32_t i = 0; i < tok->n_xcda; i++) {
        const uint8_t *u = p + 4 + 4 * (size_t)i;
        tok->xcda[i] = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
                       (uint32_t)u[3] << 24;
    }
    memcpy(tok->norm_strs, p + 4 + trie_bytes, (size_t)n_strs);
    return tok->n_xcda ? check_trie(tok, err) : CR_OK;
}

/* ---- user-defined texts, sorted ------------------------------------------ */

static int cmp_text(const rn_tokenizer_t *tok, int32_t id, const uint8_t *p, size_t n)
{
    size_t tl = tok->str_len[id];
    int c = memcmp(tok->arena + tok->str_off[id], p, CR_MIN(tl, n));
    if (c)
        return c;
    return tl < n ? -1 : tl > n;
}

static int cmp_user(const void *a, const void *b, void *ctx)
{
    const rn_tokenizer_t *tok = ctx;
    int32_t y = *(const int32_t *)b;
    return cmp_text(tok, *(const int32_t *)a,
                    (const uint8_t *)tok->arena + tok->str_off[y], tok->str_len[y]);
}

static size_t common_prefix(const rn_tokenizer_t *tok, int32_t id, const uint8_t *p,
                            size_t n)
{
    const uint8_t *t = (const uint8_t *)tok->arena + tok->str_off[id];
    size_t m = CR_MIN((size_t)tok->str_len[id], n), i = 0;
    while (i < m && t[i] == p[i])
        i++;
    return i;
}

/* The longest prefix of p[0..n) that some user-defined text starts with.
 * In sorted order the text sharing the longest prefix with p sits right
 * before or right after where p would go. */
static size_t user_prefix(const rn_tokenizer_t *tok, const uint8_t *p, size_t n)
{
    size_t lo = 0, hi = tok->n_user;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_text(tok, tok->user_sorted[mid], p, n) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t best = 0;
    if (lo < tok->n_user)
        best = common_prefix(tok, tok->user_sorted[lo], p, n);
    if (lo > 0)
        best = CR_MAX(best, common_prefix(tok, tok->user_sorted[lo - 1], p, n));
    return best;
}

cr_status_t rn_ugm_load(rn_tokenizer_t *tok, const cr_gguf_t *g, cr_err_t *err)
{
    if (tok->unk < 0)
        return cr_err_set(err, CR_E_CORRUPT,
                          "tokenizer.ggml.unknown_token_id: a t5 vocabulary needs one");
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, "tokenizer.ggml.remove_extra_whitespaces");
    if (kv && kv->type != CR_GGUF_BOOL)
        return cr_err_set(err, CR_E_CORRUPT,
                          "tokenizer.ggml.remove_extra_whitespaces must be a bool, not %s",
                          cr_gguf_vtype_name(kv->type));
    tok->remove_extra_ws = kv && kv->v.b;
    cr_status_t st = load_charsmap(tok, g, err);
    if (st)
        return st;

    /* llama.cpp builds these from the stored token types, before any
     * end-of-generation adjustment, and so do we. */
    float min_score = FLT_MAX;
    uint32_t n_user = 0;
    for (uint32_t id = 0; id < tok->n_vocab; id++) {
        if (tok->type[id] == RN_TOKEN_NORMAL)
            min_score = CR_MIN(min_score, tok->scores[id]);
        if (tok->type[id] == RN_TOKEN_USER_DEFINED && tok->str_len[id] > 0)
            n_user++;
    }
    tok->ugm_unk_score = min_score - UNKNOWN_PENALTY;
    tok->user_sorted = malloc((n_user ? n_user : 1) * sizeof *tok->user_sorted);
    if (!tok->user_sorted)
        return cr_err_set(err, CR_E_NOMEM, "tokenizer: no memory for user-defined tokens");
    for (uint32_t id = 0; id < tok->n_vocab; id++)
        if (tok->type[id] == RN_TOKEN_USER_DEFINED && tok->str_len[id] > 0)
            tok->user_sorted[tok->n_user++] = (int32_t)id;
    qsort_r(tok->user_sorted, tok->n_user, sizeof *tok->user_sorted, cmp_user, tok);
    return CR_OK;
}

/* ---- normalization ---------------------------------------------------------- */

/* Bytes of the UTF-8 character at p[0..n) as llama.cpp's decoder accepts
 * it (lead byte and continuation bytes only; no overlong or surrogate
 * checks), 0 if it is not one. */
static size_t lenient_char_len(const uint8_t *p, size_t n)
{
    size_t need = p[0] < 0x80 ? 1 : p[0] < 0xC0 ? 0 : p[0] < 0xE0 ? 2 : p[0] < 0xF0 ? 3
                  : p[0] < 0xF8 ? 4 : 0;
    if (need == 0 || need > n)
        return 0;
    for (size_t i = 1; i < need; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return need;
}

typedef struct norm {
    cr_buf_t *out;
    bool in_word;       /* the last byte out was not a space */
    bool prefix_added;  /* the dummy prefix is out */
} norm_t;

static cr_status_t emit_normalized(const rn_tokenizer_t *tok, norm_t *nm,
                                   const char *p, size_t n)
{
    cr_status_t st = CR_OK;
    for (size_t i = 0; i < n && !st; i++) {
        if (p[i] != ' ') {
            if (!nm->in_word) {
                nm->in_word = true;
                if ((tok->add_space_prefix && !nm->prefix_added) || tok->remove_extra_ws) {
                    st = cr_buf_append(nm->out, ESCAPED_SPACE, 3);
                    nm->prefix_added = true;
                }
            }
            if (!st)
                st = cr_buf_putc(nm->out, p[i]);
        } else {
            nm->in_word = false;
            if (!tok->remove_extra_ws)
                st = cr_buf_append(nm->out, ESCAPED_SPACE, 3);
        }
    }
    return st;
}

static cr_status_t normalize(const rn_tokenizer_t *tok, const uint8_t *in, size_t len,
                             cr_buf_t *out)
{
    norm_t nm = {out, false, false};
    cr_status_t st = CR_OK;
    for (size_t off = 0; off < len && !st;) {
        const uint8_t *p = in + off;
        size_t rest = len - off, used;
        uint32_t str = 0;
        if (tok->n_user && (used = user_prefix(tok, p, rest)) > 0) {
            st = emit_normalized(tok, &nm, (const char *)p, used);
        } else if ((used = charsmap_match(tok, p, rest, &str)) > 0) {
            const char *s = tok->norm_strs + str;
            st = emit_normalized(tok, &nm, s, strlen(s)); /* NUL-ended: checked */
        } else if ((used = lenient_char_len(p, rest)) > 0) {
            st = emit_normalized(tok, &nm, (const char *)p, used);
        } else {
            used = 1;
            st = emit_normalized(tok, &nm, "\xEF\xBF\xBD", 3); /* U+FFFD */
        }
        off += used;
    }
    return st;
}

/* ---- Viterbi ---------------------------------------------------------------- */

/* The best segmentation of the text up to a byte offset: its last piece
 * and where that piece starts. */
typedef struct best {
    double score;
    int32_t id;
    uint32_t start;
} best_t;

static size_t char_len(uint8_t lead)
{
    static const uint8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                               1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[lead >> 4];
}

static bool is_piece(const rn_tokenizer_t *tok, int32_t id)
{
    if (id < 0 || (uint32_t)id >= tok->n_vocab)
        return false;
    uint8_t t = tok->type[id];
    return t == RN_TOKEN_NORMAL || t == RN_TOKEN_USER_DEFINED || t == RN_TOKEN_UNUSED;
}

static cr_status_t viterbi(const rn_tokenizer_t *tok, const char *s, size_t n,
                           rn_emit_t *e)
{
    best_t *best = malloc((n + 1) * sizeof *best);
    int32_t *path = NULL;
    if (!best)
        return CR_E_NOMEM;
    best[0] = (best_t){0, tok->unk, 0};
    for (size_t i = 1; i <= n; i++)
        best[i] = (best_t){-DBL_MAX, tok->unk, 0};
    for (size_t off = 0; off < n;) {
        size_t cl = CR_MIN(char_len((uint8_t)s[off]), n - off);
        size_t max_end = CR_MIN(n, off + tok->max_token_len);
        double here = best[off].score;
        bool char_spelled = false;
        uint64_t h = RN_TOK_HASH_INIT;
        for (size_t end = off + 1; end <= max_end; end++) {
            h = rn_tok_hash_step(h, (uint8_t)s[end - 1]);
            int32_t id = rn_tok_lookup_hashed(tok, rn_tok_hash_final(h), s + off,
                                              end - off);
            if (!is_piece(tok, id))
                continue;
            if (end - off == cl)
                char_spelled = true;
            /* user-defined pieces score 0, above any log probability */
            double sc = here + ((tok->attr[id] & RN_ATTR_USER_DEFINED)
                                    ? 0.0
                                    : (double)tok->scores[id]);
            if (sc > best[end].score)
                best[end] = (best_t){sc, id, (uint32_t)off};
        }
        if (!char_spelled) {
            double sc = here + (double)tok->ugm_unk_score;
            if (sc > best[off + cl].score)
                best[off + cl] = (best_t){sc, tok->unk, (uint32_t)off};
        }
        off += cl;
    }
    /* Walk back from the end, then emit in order; runs of unknowns are
     * one token. */
    size_t k = 0;
    for (size_t at = n; at > 0; at = best[at].start)
        k++;
    path = malloc((k ? k : 1) * sizeof *path);
    if (!path) {
        free(best);
        return CR_E_NOMEM;
    }
    size_t i = k;
    for (size_t at = n; at > 0; at = best[at].start)
        path[--i] = best[at].id;
    for (i = 0; i < k; i++)
        if (!(i > 0 && path[i] == tok->unk && path[i - 1] == tok->unk))
            rn_emit_id(e, path[i]);
    free(path);
    free(best);
    return CR_OK;
}

cr_status_t rn_ugm_encode(const rn_tokenizer_t *tok, const char *text, size_t len,
                          rn_emit_t *e)
{
    cr_buf_t norm;
    cr_buf_init(&norm, 4 * (size_t)RN_TOK_MAX_INPUT_BYTES);
    cr_status_t st = normalize(tok, (const uint8_t *)text, len, &norm);
    if (!st && norm.len > UINT32_MAX - 1)
        st = CR_E_TOO_LARGE;
    if (!st && norm.len > 0)
        st = viterbi(tok, norm.data, norm.len, e);
    cr_buf_free(&norm);
    return st;
}
