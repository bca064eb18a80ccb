/* grammar.h: structured output ("format"): constrains sampling so the text
 * generated is always a prefix of a JSON document that the format accepts.
 *
 * Owns: compiling a format (`json`, or a JSON Schema object as JSON text)
 * into a small graph of schema nodes; an incremental matcher over bytes
 * (a pushdown automaton: a stack of frames per thread, a few threads for
 * anyOf/oneOf and free object keys); masking a logits vector to the tokens
 * whose bytes keep the output a valid prefix; and "is the document
 * complete". Does not own: sampling (sampler.h), tokenizing (tokenizer.h),
 * stopping (the engine treats completion as a stop), thinking deferral.
 *
 * What "json" accepts: one JSON object (as Ollama's grammar does), any
 * values inside. What a schema accepts (keywords honoured):
 *   type (a name or a list), enum, const, properties, required,
 *   additionalProperties (false/true/schema; when absent: no extra keys if
 *   `properties` is given, any keys otherwise, as llama.cpp does), items,
 *   minItems, maxItems, minLength, maxLength (in characters), minimum,
 *   maximum, exclusiveMinimum, exclusiveMaximum (numbers or draft 4's
 *   booleans; a bounded integer has at most 16 digits, a bounded number at
 *   most 12 integer digits, 6 decimals and no exponent, and bounds are
 *   rounded inward to that grid), anyOf,
 *   oneOf (as anyOf: exclusivity is not enforced), allOf with one entry,
 *   $ref to "#", "#/$defs/..." or "#/definitions/..." (any JSON pointer into
 *   the document; recursion allowed), true/false schemas. Annotations
 *   (title, description, default, examples, format, $schema, $id, $comment,
 *   ...) and unknown keywords are ignored. Keywords this matcher cannot
 *   honour (pattern, multipleOf, not, if/then/else,
 *   prefixItems, uniqueItems:true, min/maxProperties, patternProperties,
 *   propertyNames, contains, ...) make the format invalid rather than be
 *   silently dropped.
 *
 * Output shape, like llama.cpp's schema grammars: object members are
 * written compactly in a fixed order, the required properties first (in
 * declaration order), then the optional ones (in declaration order, each
 * at most once, any may be skipped); extra keys (additionalProperties)
 * may come once every required key is written; enum/const values are
 * written as their compact JSON (jansson's dump). Extra keys are not
 * checked against the declared names.
 *
 * Bounds, so that even a model emitting noise finishes a document:
 * whitespace between tokens is nothing, one space, or a newline and at most
 * max_indent spaces/tabs (llama.cpp's `space` rule; none after the root
 * value); strings hold at most max_string_bytes bytes (more if minLength
 * needs it); numbers have at most 16 integer digits, 16 fraction digits
 * and 2 exponent digits (so every number parses as a finite double);
 * containers nest at most max_depth deep (a schema that needs deeper
 * nesting is invalid); arrays and objects without a schema bound hold at
 * most max_items items/members. Strings are valid UTF-8 with no control
 * bytes, no \u0000 and no surrogate escapes, so jansson accepts them.
 *
 * Tokens: rn_grammar_vocab_t caches every token's bytes once per tokenizer
 * (sorted, with common-prefix lengths), so masking walks the vocabulary as
 * a trie: a shared prefix is matched once, and a rejected prefix rejects
 * every token that starts with it. Tokens with no bytes (control tokens)
 * are never allowed, except end-of-generation tokens, which are allowed
 * exactly when the document is complete.
 *
 * Threads: a grammar is used by one thread at a time; a vocab is immutable
 * and may be shared. Accepting allocates nothing; the first mask allocates
 * one state per byte of the vocabulary's longest token, later ones nothing. */
#ifndef RN_GRAMMAR_H
#define RN_GRAMMAR_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/text/tokenizer.h"

/* Hard limits. */
#define RN_GRAMMAR_MAX_DEPTH 32        /* container nesting */
#define RN_GRAMMAR_MAX_NODES 65536     /* schema nodes after compilation */
#define RN_GRAMMAR_MAX_PROPS 64        /* properties of one object schema */
#define RN_GRAMMAR_MAX_TOKEN_BYTES 256 /* longer tokens are never allowed */
#define RN_GRAMMAR_MAX_FORMAT_BYTES (1u << 20)

typedef struct rn_grammar_opts {
    int max_depth;        /* container nesting, 1..RN_GRAMMAR_MAX_DEPTH (16) */
    int max_items;        /* items/members where the schema sets no bound
                             (maxItems overrides for arrays) (256) */
    int max_string_bytes; /* bytes in one string, escapes counted as written
                             (8192) */
    int max_indent;       /* spaces/tabs after a newline, 0..200 (20) */
} rn_grammar_opts_t;

void rn_grammar_opts_default(rn_grammar_opts_t *o);

/* ---- token bytes, once per tokenizer ---------------------------------- */

typedef struct rn_grammar_vocab rn_grammar_vocab_t;

/* Caches each token's piece (rn_token_piece, no flags) and whether it ends
 * generation (rn_tokenizer_is_eog). tok is only read during the call.
 * Caller owns *out; free with rn_grammar_vocab_destroy. CR_E_NOMEM. */
cr_status_t rn_grammar_vocab_new(const rn_tokenizer_t *tok,
                                 rn_grammar_vocab_t **out, cr_err_t *err);

/* Same from explicit pieces (for tests and other tokenizers): token i has
 * bytes pieces[i][0..lens[i]) and ends generation if is_eog && is_eog[i].
 * Everything is copied. CR_E_INVALID if n < 1 or n > RN_TOK_MAX_VOCAB. */
cr_status_t rn_grammar_vocab_new_pieces(int32_t n, const char *const *pieces,
                                        const size_t *lens, const bool *is_eog,
                                        rn_grammar_vocab_t **out,
                                        cr_err_t *err);

void rn_grammar_vocab_destroy(rn_grammar_vocab_t **self_p);

int32_t rn_grammar_vocab_size(const rn_grammar_vocab_t *v);

/* ---- the constraint --------------------------------------------------- */

typedef struct rn_grammar rn_grammar_t;

/* Compiles format[0..len): `json` or `"json"` (any JSON object), or a JSON
 * Schema object. opts NULL means defaults. Caller owns *out; free with
 * rn_grammar_destroy. The matcher starts at the empty document.
 * Errors: CR_E_INVALID with Ollama's wording, e.g. `invalid format:
 * properties.age: unsupported keyword "multipleOf"; expected "json" or a valid
 * JSON Schema object` (the middle part names the place in the schema);
 * CR_E_TOO_LARGE past RN_GRAMMAR_MAX_FORMAT_BYTES / _NODES; CR_E_NOMEM. */
cr_status_t rn_grammar_new(const char *format, size_t len,
                           const rn_grammar_opts_t *opts, rn_grammar_t **out,
                           cr_err_t *err);

void rn_grammar_destroy(rn_grammar_t **self_p);

/* Back to the empty document. */
void rn_grammar_reset(rn_grammar_t *g);

/* True if bytes[0..n) appended to the text so far keep it a valid prefix.
 * Does not change the state. */
bool rn_grammar_allows(rn_grammar_t *g, const char *bytes, size_t n);

/* Appends bytes[0..n) if rn_grammar_allows says so and returns true; else
 * returns false and leaves the state unchanged. */
bool rn_grammar_feed(rn_grammar_t *g, const char *bytes, size_t n);

/* True if the text so far is a whole document the format accepts; an EOG
 * token is allowed only now. The engine should stop generating as soon as
 * rn_grammar_is_complete() && !rn_grammar_can_continue() (always the case
 * right after the closing brace of an object root); a root that can still
 * grow (a bare number) stops at EOG or when the next token would break it. */
bool rn_grammar_is_complete(const rn_grammar_t *g);

/* True if some byte may still follow (false once an object root closed). */
bool rn_grammar_can_continue(const rn_grammar_t *g);

/* Sets logits[t] = -INFINITY for every token t in [0, n_vocab) that may not
 * come next: tokens whose bytes break the document, tokens with no bytes,
 * ids the vocab does not have, and EOG tokens unless complete. Leaves the
 * others untouched. Returns how many tokens stay allowed (0 only if the
 * document is complete and the vocabulary has no EOG token). */
size_t rn_grammar_mask(rn_grammar_t *g, const rn_grammar_vocab_t *v,
                       float *logits, int32_t n_vocab);

/* Appends token's bytes (after sampling a masked distribution). An EOG
 * token is accepted (state unchanged) iff the document is complete.
 * CR_E_INVALID ("token 17 is not allowed here") if the token may not come
 * next or is out of range; the state is then unchanged. */
cr_status_t rn_grammar_accept(rn_grammar_t *g, const rn_grammar_vocab_t *v,
                              int32_t token, cr_err_t *err);

#endif
