/* tokenizer_internal.h: the tokenizer's private state, shared by its files
 * (tokenizer.c: load, special tokens, decode; tokenizer_spm.c;
 * tokenizer_bpe.c; tokenizer_pretok.c; tokenizer_wpm.c; tokenizer_ugm.c).
 * Nothing else may include it except the tokenizer's own unit test
 * (tests/unit/test_tokenizer.c), which checks the pre-tokenizers directly. */
#ifndef RN_TOKENIZER_INTERNAL_H
#define RN_TOKENIZER_INTERNAL_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"
#include "services/runner/text/tokenizer.h"

/* Per-token attribute bits (rn_tokenizer.attr). */
enum {
    RN_ATTR_NORMAL = 1u << 0,
    RN_ATTR_UNKNOWN = 1u << 1,
    RN_ATTR_CONTROL = 1u << 2,
    RN_ATTR_USER_DEFINED = 1u << 3,
    RN_ATTR_UNUSED = 1u << 4,
    RN_ATTR_BYTE = 1u << 5,
    RN_ATTR_EOG = 1u << 6,
    RN_ATTR_LSTRIP = 1u << 7, /* special token eats spaces before it */
    RN_ATTR_RSTRIP = 1u << 8, /* special token eats spaces after it */
};

/* Pre-tokenizers (which splitter runs before byte-level BPE). */
typedef enum rn_pre {
    RN_PRE_DEFAULT = 0,
    RN_PRE_LLAMA3,
    RN_PRE_QWEN2,
    RN_PRE_GPT2,
    RN_PRE_STARCODER,
    RN_PRE_FALCON,
    RN_PRE_DEEPSEEK_LLM,
    RN_PRE_DEEPSEEK_CODER,
    RN_PRE_TEKKEN,
    RN_PRE_GPT4O,
    RN_PRE_PORO,
    RN_PRE_VIKING,
} rn_pre_t;

struct rn_tokenizer {
    rn_tok_kind_t kind;
    rn_pre_t pre;
    char pre_name[64];

    uint32_t n_vocab;
    /* Strings: ids 0..n_vocab-1 are the tokens; BPE adds ids past them for
     * merge parts and results that no token spells. Text of id i is
     * arena[str_off[i] .. str_off[i] + str_len[i]). */
    uint32_t n_strs;
    char *arena;
    uint32_t *str_off;
    uint32_t *str_len;
    /* Open-addressing text -> id table: slot holds id + 1 (0 = empty). */
    uint32_t *map;
    uint32_t map_mask;

    float *scores;  /* [n_vocab] SentencePiece piece scores */
    uint16_t *attr; /* [n_vocab] RN_ATTR_* */
    uint8_t *type;  /* [n_vocab] tokenizer.ggml.token_type as stored */

    /* BPE merges: open-addressing (left id, right id) -> rank and result. */
    uint64_t *merge_key; /* ((left + 1) << 32) | (right + 1); 0 = empty */
    uint32_t *merge_rank;
    uint32_t *merge_res;
    uint32_t merge_mask;
    uint32_t n_merges;

    int32_t byte_sym[256]; /* BPE: string id of byte b's alphabet char */
    int32_t byte_tok[256]; /* token for raw byte b (<0xXX> or the byte's
                              alphabet char), or -1 */

    int32_t bos, eos, eot, eom, unk, pad, sep;
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    bool add_sep; /* tokenizer.ggml.add_sep_token: a pair's middle [SEP] */

    int32_t *specials; /* control/user-defined/unknown ids, longest first */
    uint32_t n_specials;

    /* Unigram ("t5", tokenizer_ugm.c): the precompiled charsmap, a trie of
     * XOR-compressed double-array units (tokenizer_ugm.c says how to walk
     * it) over NUL-terminated normalized strings, and the whitespace rule. */
    uint32_t *xcda;        /* [n_xcda] trie units, host order */
    uint32_t n_xcda;
    char *norm_strs;       /* [n_norm_strs] bytes; the last one is NUL */
    uint32_t n_norm_strs;
    bool remove_extra_ws;  /* tokenizer.ggml.remove_extra_whitespaces */
    float ugm_unk_score;   /* lowest normal score - 10 */
    int32_t *user_sorted;  /* [n_user] user-defined ids by text (memcmp) */
    uint32_t n_user;

    uint32_t max_token_len;   /* bytes */
    uint32_t max_piece_bytes; /* bytes rn_token_piece can produce */
};

/* Collects output ids: stores while there is room, always counts. */
typedef struct rn_emit {
    int32_t *out;
    size_t cap;
    size_t n;
} rn_emit_t;

static inline void rn_emit_id(rn_emit_t *e, int32_t id)
{
    if (e->n < e->cap)
        e->out[e->n] = id;
    e->n++;
}

/* A min-heap of candidate merges, ordered by key then left position (the
 * leftmost wins ties). SentencePiece keys are -score, BPE keys the rank. */
typedef struct rn_bigram {
    double key;
    int32_t left, right;
    uint32_t size; /* bytes of left + right when queued */
} rn_bigram_t;

typedef struct rn_heap {
    rn_bigram_t *v;
    size_t n, cap;
} rn_tok_heap_t;

/* Pushes b, growing the heap; CR_E_NOMEM. */
cr_status_t rn_tok_heap_push(rn_tok_heap_t *h, rn_bigram_t b);
/* Pops the least entry into *b; false when empty. */
bool rn_tok_heap_pop(rn_tok_heap_t *h, rn_bigram_t *b);
void rn_tok_heap_free(rn_tok_heap_t *h);

/* Id of the string text[0..len) (tokens first, then BPE extras), or -1. */
int32_t rn_tok_lookup(const rn_tokenizer_t *tok, const char *text, size_t len);

/* The string table's hash, one byte at a time (FNV-1a, then a final mix),
 * so a caller trying every prefix of a text hashes each byte once: start
 * from RN_TOK_HASH_INIT, rn_tok_hash_step each byte, and look the prefix up
 * with rn_tok_lookup_hashed(tok, rn_tok_hash_final(state), text, len). */
#define RN_TOK_HASH_INIT 0xcbf29ce484222325ull

static inline uint64_t rn_tok_hash_step(uint64_t h, uint8_t byte)
{
    return (h ^ byte) * 0x100000001b3ull;
}

static inline uint32_t rn_tok_hash_final(uint64_t h)
{
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

/* rn_tok_lookup with the hash of text[0..len) already known. */
int32_t rn_tok_lookup_hashed(const rn_tokenizer_t *tok, uint32_t hash,
                             const char *text, size_t len);

/* SentencePiece over one raw-text fragment; prefix_space adds the leading
 * U+2581. CR_E_NOMEM. */
cr_status_t rn_spm_encode(const rn_tokenizer_t *tok, const char *text,
                          size_t len, bool prefix_space, rn_emit_t *e);

/* Byte-level BPE over one raw-text fragment (pre-tokenized first).
 * CR_E_NOMEM. */
cr_status_t rn_bpe_encode(const rn_tokenizer_t *tok, const char *text,
                          size_t len, rn_emit_t *e);

/* Reads the unigram tables (tokenizer.ggml.precompiled_charsmap, checked
 * whole: every trie path must end inside the normalized strings;
 * .remove_extra_whitespaces) once the tokens, scores, types and the
 * unknown id are loaded. CR_E_CORRUPT naming the key, CR_E_NOMEM. */
cr_status_t rn_ugm_load(rn_tokenizer_t *tok, const cr_gguf_t *g, cr_err_t *err);

/* Unigram over one raw-text fragment: normalized (charsmap, whitespace),
 * then the most probable segmentation (Viterbi over piece scores; a
 * character no piece spells costs the unknown score). CR_E_NOMEM,
 * CR_E_TOO_LARGE when normalization grows the text past its limit. */
cr_status_t rn_ugm_encode(const rn_tokenizer_t *tok, const char *text,
                          size_t len, rn_emit_t *e);

/* WordPiece over one raw-text fragment (normalized, split into words,
 * greedy longest match, the unknown token for a word that cannot be
 * spelled). CR_E_NOMEM. */
cr_status_t rn_wpm_encode(const rn_tokenizer_t *tok, const char *text,
                          size_t len, rn_emit_t *e);

/* Builds the BPE merge table from tokenizer.ggml.merges (strings as
 * counted byte spans). Adds string ids for merge parts that no token
 * spells. CR_E_CORRUPT for a merge without a separator, CR_E_NOMEM. */
typedef struct rn_span {
    const char *ptr;
    size_t len;
} rn_span_t;
cr_status_t rn_bpe_build_merges(rn_tokenizer_t *tok, const rn_span_t *merges,
                                size_t n, cr_err_t *err);

/* Interns text (returns its id, adding it past the tokens if new).
 * -1 on allocation failure or past the arena limit. */
int32_t rn_tok_intern(rn_tokenizer_t *tok, const char *text, size_t len);

/* GPT-2 byte alphabet: byte -> code point (U+0021..U+0143), and back
 * (-1 if cp is not in the alphabet). */
uint32_t rn_bpe_byte_to_cp(uint8_t b);
int rn_bpe_cp_to_byte(uint32_t cp);

/* Splits cps[0..n) into pre-tokens for pre: *ends_out (caller frees with
 * free(); NULL when n is 0) gets the end index of each piece, in order,
 * *n_ends their count. CR_E_NOMEM. */
cr_status_t rn_pretok_split(rn_pre_t pre, const uint32_t *cps, size_t n,
                            uint32_t **ends_out, size_t *n_ends);

/* Pre-tokenizer by tokenizer.ggml.pre name; false if unknown. */
bool rn_pretok_from_name(const char *name, rn_pre_t *pre,
                         bool *ignore_merges, bool *add_bos_default,
                         bool *no_bos);

#endif
