/* tokenizer.h: text <-> token ids from a model's GGUF vocabulary.
 *
 * Owns: reading and validating the tokenizer.ggml.* metadata, SentencePiece
 * (model "llama": BPE by piece score with byte fallback), byte-level BPE
 * (model "gpt2": GPT-2 byte alphabet, merges by rank, pre-tokenized by the
 * splitter that tokenizer.ggml.pre names), WordPiece (model "bert": NFD
 * first code point, lowercase, split on white space, punctuation and CJK,
 * greedy longest match with "##" continuations, [UNK] for a word it cannot
 * spell), SentencePiece unigram (model "t5": precompiled charsmap
 * normalization, then the best segmentation by piece scores; <unk> for
 * what no piece spells), special-token parsing, BOS/EOS,
 * token -> bytes, and a streaming detokenizer that never splits a UTF-8
 * character. Does not own: chat templates, stop strings, sampling.
 *
 * Behaviour follows llama.cpp's tokenizer (ids match its test vectors for
 * every vocabulary in the shared testdata that this module supports).
 * Deliberate differences: bytes that are not valid UTF-8 are kept as bytes
 * (byte tokens / byte-alphabet symbols) instead of becoming U+FFFD, so
 * decode(encode(s)) == s holds for any byte string the vocabulary can
 * spell; and a BPE symbol that no token spells falls back to the byte
 * tokens of its bytes (or <unk>) instead of being dropped.
 *
 * A loaded tokenizer is immutable: any number of threads may encode and
 * decode with it at once. It copies what it needs, so the GGUF handle may be
 * closed after rn_tokenizer_load returns. */
#ifndef RN_TOKENIZER_H
#define RN_TOKENIZER_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/gguf.h"
#include "lib/status.h"

/* Limits on what a vocabulary may claim, checked before allocation. */
#define RN_TOK_MAX_VOCAB (1u << 22)       /* tokens */
#define RN_TOK_MAX_MERGES (1u << 23)      /* BPE merges */
#define RN_TOK_MAX_TOKEN_BYTES 65536u     /* one token's text */
#define RN_TOK_MAX_INPUT_BYTES (16u << 20) /* one rn_tokenize() input */

typedef struct rn_tokenizer rn_tokenizer_t;

/* The tokenizer algorithm (tokenizer.ggml.model). */
typedef enum rn_tok_kind {
    RN_TOK_SPM = 1, /* "llama": SentencePiece BPE by score */
    RN_TOK_BPE = 2, /* "gpt2": byte-level BPE */
    RN_TOK_WPM = 3, /* "bert": WordPiece (BOS = [CLS], EOS = [SEP]) */
    RN_TOK_UGM = 4, /* "t5": SentencePiece unigram (T5, XLM-RoBERTa) */
} rn_tok_kind_t;

/* tokenizer.ggml.token_type values, as GGUF stores them. */
typedef enum rn_token_type {
    RN_TOKEN_UNDEFINED = 0,
    RN_TOKEN_NORMAL = 1,
    RN_TOKEN_UNKNOWN = 2,
    RN_TOKEN_CONTROL = 3,
    RN_TOKEN_USER_DEFINED = 4,
    RN_TOKEN_UNUSED = 5,
    RN_TOKEN_BYTE = 6,
} rn_token_type_t;

/* Builds a tokenizer from g's metadata (the vocabulary-only files of the
 * testdata work; tensors are never read). Reads tokenizer.ggml.model, .pre,
 * .tokens, .scores, .token_type, .merges, .bos/.eos/.unknown/.padding/
 * .eot/.eom/.seperator/.cls_token_id, .add_bos_token, .add_eos_token,
 * .add_sep_token, .add_space_prefix, and, for the spaces special tokens
 * eat (which GGUF does not record; llama.cpp decides by model, and so do
 * we): general.name (phi-3 strips spaces after its special tokens,
 * modern-bert before [MASK]), general.architecture and .pre
 * (nomic-bert-moe, jina-bert-v3 and jina-v2-* strip them before <mask>).
 * As llama.cpp does, tokens whose text marks an end of turn or a
 * fill-in-the-middle prefix/suffix/middle ("<|eot_id|>", "<fim_prefix>",
 * "<｜fim▁end｜>", ...) become control tokens whatever their stored type,
 * the FIM ones unless tokenizer.ggml.fim_pre/suf/mid_token_id (or
 * .prefix/.suffix/.middle_token_id) name a token of that kind.
 *
 * On success *out is owned by the caller (free with rn_tokenizer_destroy).
 * Errors: CR_E_CORRUPT when a key has the wrong type, arrays differ in
 * length, an id is out of range, a token type is unknown, a merge has no
 * separator, or add_bos/add_eos is set without the id (err->msg names the
 * key and index, e.g. "tokenizer.ggml.scores has 31999 entries, tokens
 * 32000"); CR_E_NOT_FOUND when tokenizer.ggml.model or .tokens is missing;
 * CR_E_UNSUPPORTED for a model ("rwkv", ...) or pre-tokenizer this
 * module does not implement (the message names it); CR_E_TOO_LARGE past
 * the RN_TOK_MAX_* limits; CR_E_NOMEM. An id of -1 (0xFFFFFFFF as u32)
 * means "none" and keeps llama.cpp's default; the padding and separator ids
 * may be out of range (real files have that): they are then ignored.
 * WordPiece ("bert"): BOS is [CLS] (cls_token_id, else bos_token_id, else
 * 101), EOS is [SEP] (eos_token_id, else seperator_token_id, else 102),
 * unknown 100, padding 0 by default; add_special adds both unless
 * add_bos_token / add_eos_token say otherwise. Unigram ("t5"): no BOS,
 * EOS 1 (added), unknown 2 (required), padding 0 by default; also reads
 * .precompiled_charsmap (CR_E_CORRUPT naming it when truncated or when a
 * trie path points outside it) and .remove_extra_whitespaces. */
cr_status_t rn_tokenizer_load(const cr_gguf_t *g, rn_tokenizer_t **out,
                              cr_err_t *err);

void rn_tokenizer_destroy(rn_tokenizer_t **self_p);

/* True if rn_tokenizer_load supports tokenizer.ggml.pre = name for a "gpt2"
 * vocabulary (NULL or "" means the file has no pre key: "default"). */
bool rn_tokenizer_pre_supported(const char *name);

/* Encodes text[0..len) (any bytes; need not be NUL-terminated) into ids.
 *
 * add_special: prepend BOS / append EOS where the vocabulary asks for them
 * (tokenizer.ggml.add_bos_token / add_eos_token, with llama.cpp's defaults).
 * parse_special: when true, the texts of control, unknown and user-defined
 * tokens (e.g. "<|eot_id|>", "<s>") found in text become those ids, longest
 * texts first, and the text between is tokenized normally; when false only
 * user-defined tokens are matched (llama.cpp does the same) and control
 * texts are plain text.
 *
 * Writes at most cap ids to out and sets *n_out to the number of ids the
 * text needs. Returns CR_E_TOO_LARGE if that is more than cap (out then holds
 * the first cap ids), or if len > RN_TOK_MAX_INPUT_BYTES; CR_E_NOMEM. The
 * empty string gives no ids (plus BOS/EOS if add_special). */
cr_status_t rn_tokenize(const rn_tokenizer_t *tok, const char *text,
                        size_t len, bool add_special, bool parse_special,
                        int32_t *out, size_t cap, size_t *n_out,
                        cr_err_t *err);

/* Encodes a (query, document) pair for a reranker the way llama.cpp's
 * server does without a rerank template: [BOS] a [EOS] [SEP] b [EOS], each
 * special only where the vocabulary adds it (add_bos_token, add_eos_token,
 * add_sep_token; EOS falls back to the separator id). Special-token texts
 * in a and b are never parsed. An XLM-RoBERTa vocabulary (all three set)
 * gives <s> a </s> </s> b </s>; a BERT one ([CLS] as BOS, [SEP] as EOS,
 * no add_sep_token) [CLS] a [SEP] b [SEP], as Hugging Face pairs them.
 * Output and errors as rn_tokenize. */
cr_status_t rn_tokenizer_encode_pair(const rn_tokenizer_t *tok, const char *a, size_t a_len,
                             const char *b, size_t b_len, int32_t *out, size_t cap,
                             size_t *n_out, cr_err_t *err);

/* Flags for rn_token_piece and rn_detok_new. */
enum {
    /* Render control and unknown tokens as their text (else as nothing). */
    RN_PIECE_SPECIAL = 1u << 0,
    /* Strip one leading space from the piece (for the first token after
     * BOS with SentencePiece's space prefix). */
    RN_PIECE_LSTRIP = 1u << 1,
};

/* The bytes token id stands for: SentencePiece pieces with U+2581 turned
 * back into spaces and <0xXX> into that byte; byte-level BPE pieces mapped
 * back through the byte alphabet; user-defined tokens as their text; control
 * and unknown tokens as nothing unless RN_PIECE_SPECIAL; unused tokens as
 * nothing. Not NUL-terminated; may be invalid UTF-8 on its own (byte tokens).
 *
 * Writes at most cap bytes to buf and sets *n_out to the piece length;
 * CR_E_TOO_LARGE if that exceeds cap (buf then holds the first cap bytes);
 * CR_E_INVALID if id is out of range. A buffer of
 * rn_tokenizer_max_piece_bytes() always suffices. Allocates nothing. */
cr_status_t rn_token_piece(const rn_tokenizer_t *tok, int32_t id,
                           unsigned flags, char *buf, size_t cap,
                           size_t *n_out, cr_err_t *err);

/* Decodes ids[0..n) into text, appended to out (whose max_bytes caps it):
 * the pieces concatenated; RN_PIECE_LSTRIP strips one leading space from
 * the first piece that has any bytes (so "<s>" rendering empty does not
 * count). CR_E_INVALID for an id out of range (out keeps the pieces before
 * it); CR_E_TOO_LARGE / CR_E_NOMEM from the buffer. No "clean up
 * tokenization spaces" pass is made. */
cr_status_t rn_detokenize(const rn_tokenizer_t *tok, const int32_t *ids,
                          size_t n, unsigned flags, cr_buf_t *out,
                          cr_err_t *err);

/* Streaming detokenizer: push ids one at a time and get back only whole
 * UTF-8 characters. An incomplete multi-byte tail is held back until the
 * next push completes it; bytes that can never form valid UTF-8 come out as
 * U+FFFD, so every chunk is valid UTF-8 on its own. */
typedef struct rn_detok rn_detok_t;

/* A new stream over tok (borrowed: must outlive the stream). flags as for
 * rn_token_piece; RN_PIECE_LSTRIP strips the leading space of the first
 * piece that has any bytes, as rn_detokenize does. Allocates its buffers
 * once here; push and flush allocate nothing. Caller owns; free with
 * rn_detok_destroy. NULL if out of memory. */
rn_detok_t *rn_detok_new(const rn_tokenizer_t *tok, unsigned flags);

void rn_detok_destroy(rn_detok_t **self_p);

/* Adds token id. *chunk / *len receive the text now complete (possibly
 * empty); the chunk is borrowed and valid until the next call on the stream.
 * CR_E_INVALID for an id out of range (the stream is unchanged). */
cr_status_t rn_detok_push(rn_detok_t *d, int32_t id, const char **chunk,
                          size_t *len, cr_err_t *err);

/* Ends the stream: returns what was held back (an incomplete tail becomes
 * U+FFFD) and resets the stream for reuse, first-piece LSTRIP included. */
void rn_detok_flush(rn_detok_t *d, const char **chunk, size_t *len);

/* Bytes held back right now (0..3). */
size_t rn_detok_pending(const rn_detok_t *d);

/* Vocabulary facts. Ids are -1 where the vocabulary has none. */
rn_tok_kind_t rn_tokenizer_kind(const rn_tokenizer_t *tok);
const char *rn_tokenizer_pre_name(const rn_tokenizer_t *tok); /* "" if none */
size_t rn_tokenizer_n_vocab(const rn_tokenizer_t *tok);
int32_t rn_tokenizer_bos(const rn_tokenizer_t *tok);
int32_t rn_tokenizer_eos(const rn_tokenizer_t *tok);
int32_t rn_tokenizer_eot(const rn_tokenizer_t *tok);
int32_t rn_tokenizer_unk(const rn_tokenizer_t *tok);
int32_t rn_tokenizer_pad(const rn_tokenizer_t *tok);
bool rn_tokenizer_add_bos(const rn_tokenizer_t *tok);
bool rn_tokenizer_add_eos(const rn_tokenizer_t *tok);
/* tokenizer.ggml.add_sep_token (false when absent): a pair gets a
 * separator between its parts. */
bool rn_tokenizer_add_sep(const rn_tokenizer_t *tok);
/* tokenizer.ggml.seperator_token_id ([SEP] 102 for WordPiece), or -1. */
int32_t rn_tokenizer_sep(const rn_tokenizer_t *tok);
bool rn_tokenizer_add_space_prefix(const rn_tokenizer_t *tok);
/* Largest piece rn_token_piece can produce, in bytes. */
size_t rn_tokenizer_max_piece_bytes(const rn_tokenizer_t *tok);

/* End of generation: eos, eot, eom and the tokens llama.cpp treats as such
 * by their text (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>,
 * <|endoftext|>, <|eom_id|>, ...). False for ids out of range. */
bool rn_tokenizer_is_eog(const rn_tokenizer_t *tok, int32_t id);

/* A control token (type 3, or made one because its text marks an end of
 * turn). False for ids out of range. */
bool rn_tokenizer_is_control(const rn_tokenizer_t *tok, int32_t id);

/* The token's type as stored (RN_TOKEN_UNDEFINED for ids out of range). */
rn_token_type_t rn_tokenizer_token_type(const rn_tokenizer_t *tok,
                                        int32_t id);

/* The token's raw vocabulary text (e.g. "▁Hello", "Ġworld", "<0x0A>"),
 * borrowed until rn_tokenizer_destroy; *len gets its length. NULL for ids out
 * of range. */
const char *rn_tokenizer_token_text(const rn_tokenizer_t *tok, int32_t id,
                                    size_t *len);

/* The id whose raw text is exactly text[0..len), or -1. Where a vocabulary
 * spells two ids the same, the lower id. */
int32_t rn_tokenizer_find(const rn_tokenizer_t *tok, const char *text,
                          size_t len);

#endif
