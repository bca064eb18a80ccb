/* tokenizer.c: loading a vocabulary from GGUF metadata, the string table,
 * special-token partitioning, the encode driver, token pieces and the
 * streaming detokenizer. The algorithms live in tokenizer_spm.c,
 * tokenizer_bpe.c and tokenizer_pretok.c. */
#include "lib/prelude.h"
#include "lib/log.h"
#include "services/runner/text/tokenizer.h"
#include "services/runner/text/tokenizer_internal.h"
#include "services/runner/text/unicode.h"

#include <ctype.h>
#include <math.h>

#define ARENA_MAX_BYTES (1u << 30) /* token texts plus BPE extras */

/* ---- the string table ---------------------------------------------------- */

static uint32_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = RN_TOK_HASH_INIT;
    for (size_t i = 0; i < n; i++)
        h = rn_tok_hash_step(h, (uint8_t)p[i]);
    return rn_tok_hash_final(h);
}

static bool str_is(const rn_tokenizer_t *tok, uint32_t id, const char *p, size_t n)
{
    return tok->str_len[id] == n && !memcmp(tok->arena + tok->str_off[id], p, n);
}

int32_t rn_tok_lookup(const rn_tokenizer_t *tok, const char *text, size_t len)
{
    return rn_tok_lookup_hashed(tok, hash_bytes(text, len), text, len);
}

int32_t rn_tok_lookup_hashed(const rn_tokenizer_t *tok, uint32_t hash,
                             const char *text, size_t len)
{
    for (uint32_t i = hash & tok->map_mask;;
         i = (i + 1) & tok->map_mask) {
        uint32_t v = tok->map[i];
        if (v == 0)
            return -1;
        if (str_is(tok, v - 1, text, len))
            return (int32_t)(v - 1);
    }
}

/* Puts id into the map unless its text is there already (first id wins). */
static void map_insert(rn_tokenizer_t *tok, uint32_t id)
{
    const char *p = tok->arena + tok->str_off[id];
    size_t n = tok->str_len[id];
    for (uint32_t i = hash_bytes(p, n) & tok->map_mask;; i = (i + 1) & tok->map_mask) {
        uint32_t v = tok->map[i];
        if (v == 0) {
            tok->map[i] = id + 1;
            return;
        }
        if (str_is(tok, v - 1, p, n))
            return;
    }
}

static bool map_resize(rn_tokenizer_t *tok, size_t slots)
{
    uint32_t *m = calloc(slots, sizeof *m);
    if (!m)
        return false;
    free(tok->map);
    tok->map = m;
    tok->map_mask = (uint32_t)(slots - 1);
    for (uint32_t id = 0; id < tok->n_strs; id++)
        map_insert(tok, id);
    return true;
}

/* Capacity bookkeeping for the growable parts of the table. */
typedef struct strtab_caps {
    size_t arena_cap, arena_len, strs_cap;
} strtab_caps_t;

/* Lives in the tokenizer only during load (rn_tok_intern needs it). */
static strtab_caps_t *caps_of(rn_tokenizer_t *tok);

static cr_status_t str_append(rn_tokenizer_t *tok, const char *p, size_t n,
                              uint32_t *id_out)
{
    strtab_caps_t *c = caps_of(tok);
    if (c->arena_len + n > ARENA_MAX_BYTES || tok->n_strs >= INT32_MAX - 1)
        return CR_E_TOO_LARGE;
    if (c->arena_len + n > c->arena_cap) {
        size_t nc = CR_MAX(c->arena_cap * 2, c->arena_len + n + 4096);
        char *na = realloc(tok->arena, nc);
        if (!na)
            return CR_E_NOMEM;
        tok->arena = na;
        c->arena_cap = nc;
    }
    if (tok->n_strs >= c->strs_cap) {
        size_t nc = CR_MAX(c->strs_cap * 2, 1024);
        uint32_t *no = realloc(tok->str_off, nc * sizeof *no);
        if (!no)
            return CR_E_NOMEM;
        tok->str_off = no;
        uint32_t *nl = realloc(tok->str_len, nc * sizeof *nl);
        if (!nl)
            return CR_E_NOMEM;
        tok->str_len = nl;
        c->strs_cap = nc;
    }
    if (n)
        memcpy(tok->arena + c->arena_len, p, n);
    tok->str_off[tok->n_strs] = (uint32_t)c->arena_len;
    tok->str_len[tok->n_strs] = (uint32_t)n;
    c->arena_len += n;
    *id_out = tok->n_strs++;
    return CR_OK;
}

int32_t rn_tok_intern(rn_tokenizer_t *tok, const char *text, size_t len)
{
    int32_t id = rn_tok_lookup(tok, text, len);
    if (id >= 0)
        return id;
    if ((size_t)tok->n_strs * 2 + 2 > (size_t)tok->map_mask + 1 &&
        !map_resize(tok, ((size_t)tok->map_mask + 1) * 2))
        return -1;
    uint32_t nid;
    if (str_append(tok, text, len, &nid))
        return -1;
    map_insert(tok, nid);
    return (int32_t)nid;
}

/* ---- the merge heap --------------------------------------------------------- */

static bool bigram_less(const rn_bigram_t *a, const rn_bigram_t *b)
{
    return a->key < b->key || (a->key == b->key && a->left < b->left);
}

cr_status_t rn_tok_heap_push(rn_tok_heap_t *h, rn_bigram_t b)
{
    if (h->n == h->cap) {
        size_t nc = h->cap ? h->cap * 2 : 64;
        rn_bigram_t *nv = realloc(h->v, nc * sizeof *nv);
        if (!nv)
            return CR_E_NOMEM;
        h->v = nv;
        h->cap = nc;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_less(&b, &h->v[p]))
            break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = b;
    return CR_OK;
}

bool rn_tok_heap_pop(rn_tok_heap_t *h, rn_bigram_t *out)
{
    if (h->n == 0)
        return false;
    *out = h->v[0];
    rn_bigram_t last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && bigram_less(&h->v[c + 1], &h->v[c]))
            c++;
        if (!bigram_less(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return true;
}

void rn_tok_heap_free(rn_tok_heap_t *h)
{
    free(h->v);
    h->v = NULL;
    h->n = h->cap = 0;
}

/* ---- loading ---------------------------------------------------------------- */

#define K_MODEL "tokenizer.ggml.model"
#define K_PRE "tokenizer.ggml.pre"
#define K_TOKENS "tokenizer.ggml.tokens"
#define K_SCORES "tokenizer.ggml.scores"
#define K_TYPES "tokenizer.ggml.token_type"
#define K_MERGES "tokenizer.ggml.merges"

/* The tokenizer under construction, with the load-only string capacities. */
typedef struct loader {
    rn_tokenizer_t tok; /* first: caps_of() casts back */
    strtab_caps_t caps;
} loader_t;

static strtab_caps_t *caps_of(rn_tokenizer_t *tok)
{
    return &((loader_t *)(void *)tok)->caps;
}

static bool is_int_type(cr_gguf_vtype_t t)
{
    switch (t) {
    case CR_GGUF_U8: case CR_GGUF_I8: case CR_GGUF_U16: case CR_GGUF_I16:
    case CR_GGUF_U32: case CR_GGUF_I32: case CR_GGUF_U64: case CR_GGUF_I64:
        return true;
    default:
        return false;
    }
}

/* An optional array key of n elements whose element type passes ok(). */
static cr_status_t get_array(const cr_gguf_t *g, const char *key, bool required,
                             bool (*ok)(cr_gguf_vtype_t), const char *want,
                             const cr_gguf_array_t **out, cr_err_t *err)
{
    *out = NULL;
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    if (!kv)
        return required ? cr_err_set(err, CR_E_NOT_FOUND, "%s is missing", key) : CR_OK;
    if (kv->type != CR_GGUF_ARRAY || !ok(kv->v.arr.type))
        return cr_err_set(
            err, CR_E_CORRUPT, "%s must be an array of %s, not %s%s%s", key, want,
            cr_gguf_vtype_name(kv->type), kv->type == CR_GGUF_ARRAY ? " of " : "",
            kv->type == CR_GGUF_ARRAY ? cr_gguf_vtype_name(kv->v.arr.type) : "");
    *out = &kv->v.arr;
    return CR_OK;
}

static bool t_string(cr_gguf_vtype_t t) { return t == CR_GGUF_STRING; }
static bool t_score(cr_gguf_vtype_t t)
{
    return t == CR_GGUF_F32 || t == CR_GGUF_F64 || is_int_type(t);
}
static bool t_int(cr_gguf_vtype_t t) { return is_int_type(t); }

/* An optional string key copied into buf; CR_E_CORRUPT if not a string. */
static cr_status_t get_strz(const cr_gguf_t *g, const char *key, char *buf,
                            size_t cap, bool *found, cr_err_t *err)
{
    *found = false;
    buf[0] = 0;
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    if (!kv)
        return CR_OK;
    if (kv->type != CR_GGUF_STRING)
        return cr_err_set(err, CR_E_CORRUPT, "%s must be a string, not %s", key,
                          cr_gguf_vtype_name(kv->type));
    if (kv->v.str.len >= cap)
        return cr_err_set(err, CR_E_CORRUPT, "%s is too long (%" PRIu64 " bytes)", key,
                          kv->v.str.len);
    memcpy(buf, kv->v.str.ptr, (size_t)kv->v.str.len);
    buf[kv->v.str.len] = 0;
    if (memchr(buf, 0, (size_t)kv->v.str.len))
        return cr_err_set(err, CR_E_CORRUPT, "%s holds a NUL byte", key);
    *found = true;
    return CR_OK;
}

static cr_status_t get_bool(const cr_gguf_t *g, const char *key, bool *v, cr_err_t *err)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    if (!kv)
        return CR_OK;
    if (kv->type != CR_GGUF_BOOL)
        return cr_err_set(err, CR_E_CORRUPT, "%s must be a bool, not %s", key,
                          cr_gguf_vtype_name(kv->type));
    *v = kv->v.b;
    return CR_OK;
}

/* An optional token id key. -1 (as i32/i64, or 0xFFFFFFFF as u32, which
 * converters write for "none") counts as absent: the default stays. Other
 * values must be in [0, n_vocab) for strict keys; lenient keys out of range
 * are ignored with a warning. */
static cr_status_t get_id(const cr_gguf_t *g, const char *key, uint32_t n_vocab,
                          bool strict, int32_t *id, cr_err_t *err)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    if (!kv)
        return CR_OK;
    int64_t v;
    if (kv->type == CR_GGUF_U8 || kv->type == CR_GGUF_U16 || kv->type == CR_GGUF_U32 ||
        kv->type == CR_GGUF_U64)
        v = kv->v.u64 > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)kv->v.u64;
    else if (is_int_type(kv->type))
        v = kv->v.i64;
    else
        return cr_err_set(err, CR_E_CORRUPT, "%s must be an integer, not %s", key,
                          cr_gguf_vtype_name(kv->type));
    if (v == -1 || (kv->type == CR_GGUF_U32 && v == (int64_t)UINT32_MAX) ||
        (kv->type == CR_GGUF_U64 && kv->v.u64 == UINT64_MAX))
        return CR_OK;
    if (v < 0 || v >= (int64_t)n_vocab) {
        if (!strict) {
            cr_log_warn("tokenizer: ignoring %s = %" PRId64 " (vocabulary has %u tokens)",
                        key, v, n_vocab);
            return CR_OK;
        }
        return cr_err_set(err, CR_E_CORRUPT,
                          "%s = %" PRId64 " is out of range (vocabulary has %u tokens)",
                          key, v, n_vocab);
    }
    *id = (int32_t)v;
    return CR_OK;
}

static bool text_is(const rn_tokenizer_t *tok, uint32_t id, const char *s)
{
    return str_is(tok, id, s, strlen(s));
}

/* Texts llama.cpp treats as end of turn, end of message, end of generation. */
static const char *const EOT_TEXTS[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
    ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"),
    "<end_of_utterance>",
};
static const char *const EOG_TEXTS[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
    "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
    "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "</s>", "<eos>", "<turn|>", "<|tool_response>",
    ("<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"),
};
static const char *const FIM_EOG_TEXTS[] = {
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
};

/* Fill-in-the-middle prefix, suffix and middle tokens, by text, and the
 * keys that name them instead. */
#define FIM_TEXTS_MAX 8
static const struct {
    const char *key, *old_key; /* tokenizer.ggml.<key>_token_id */
    const char *texts[FIM_TEXTS_MAX];
} FIM_KINDS[] = {
    {"fim_pre", "prefix",
     {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
      "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
      "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>"}},
    {"fim_suf", "suffix",
     {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
      "<\xef\xbd\x9c" "fim\xe2\x96\x81" "hole\xef\xbd\x9c>", "<SUF>",
      "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>"}},
    {"fim_mid", "middle",
     {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
      "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
      "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>"}},
};

/* Whether tokenizer.ggml.<name>_token_id holds an id in the vocabulary. */
static bool names_token(const rn_tokenizer_t *tok, const cr_gguf_t *g, const char *name)
{
    char key[96];
    snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", name);
    uint64_t v = 0;
    return cr_gguf_get_u64(g, key, &v) && v < tok->n_vocab;
}

/* llama.cpp finds the FIM prefix/suffix/middle tokens by text when no key
 * names them and makes them control tokens (a user-defined
 * "<｜fim▁end｜>" in DeepSeek Coder then stays text in request content).
 * Where a vocabulary has several texts of one kind, llama.cpp marks the
 * one its hash map yields first; we mark them all. */
static void mark_fim(rn_tokenizer_t *tok, const cr_gguf_t *g)
{
    for (size_t k = 0; k < CR_ARRAY_LEN(FIM_KINDS); k++) {
        if (names_token(tok, g, FIM_KINDS[k].key) ||
            names_token(tok, g, FIM_KINDS[k].old_key))
            continue;
        for (size_t i = 0; i < FIM_TEXTS_MAX && FIM_KINDS[k].texts[i]; i++) {
            const char *t = FIM_KINDS[k].texts[i];
            int32_t id = rn_tok_lookup(tok, t, strlen(t));
            if (id >= 0 && (uint32_t)id < tok->n_vocab)
                tok->attr[id] |= RN_ATTR_CONTROL;
        }
    }
}

static bool in_list(const rn_tokenizer_t *tok, uint32_t id, const char *const *l,
                    size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (text_is(tok, id, l[i]))
            return true;
    return false;
}

/* End-of-generation set, after llama.cpp's text heuristics. */
static void mark_eog(rn_tokenizer_t *tok, bool eot_from_key, bool eom_from_key)
{
    /* The first text of the list that the vocabulary has is its EOT (so
     * Llama 3 gets <|eot_id|>, not <|end_of_text|>). */
    for (size_t i = 0; !eot_from_key && tok->eot < 0 && i < CR_ARRAY_LEN(EOT_TEXTS);
         i++) {
        int32_t id = rn_tok_lookup(tok, EOT_TEXTS[i], strlen(EOT_TEXTS[i]));
        if (id >= 0 && (uint32_t)id < tok->n_vocab) {
            tok->eot = id;
            tok->attr[id] |= RN_ATTR_CONTROL;
        }
    }
    int32_t eom = rn_tok_lookup(tok, "<|eom_id|>", 10);
    if (!eom_from_key && tok->eom < 0 && eom >= 0 && (uint32_t)eom < tok->n_vocab) {
        tok->eom = eom;
        tok->attr[eom] |= RN_ATTR_CONTROL;
    }
    for (uint32_t id = 0; id < tok->n_vocab; id++) {
        if (in_list(tok, id, EOG_TEXTS, CR_ARRAY_LEN(EOG_TEXTS))) {
            tok->attr[id] |= RN_ATTR_EOG | RN_ATTR_CONTROL;
        }
        if (in_list(tok, id, FIM_EOG_TEXTS, CR_ARRAY_LEN(FIM_EOG_TEXTS)))
            tok->attr[id] |= RN_ATTR_EOG | RN_ATTR_CONTROL;
    }
    if (tok->eos >= 0)
        tok->attr[tok->eos] |= RN_ATTR_EOG;
    if (tok->eot >= 0)
        tok->attr[tok->eot] |= RN_ATTR_EOG;
    if (tok->eom >= 0)
        tok->attr[tok->eom] |= RN_ATTR_EOG;

    /* gpt-oss style vocabularies end a message with <|end|> but keep
     * generating: drop it when <|return|> and <|call|> exist. */
    int32_t end_id = rn_tok_lookup(tok, "<|end|>", 7);
    if (end_id >= 0 && (uint32_t)end_id < tok->n_vocab &&
        ((rn_tok_lookup(tok, "<|return|>", 10) >= 0 &&
          rn_tok_lookup(tok, "<|call|>", 8) >= 0) ||
         (rn_tok_lookup(tok, "<|calls|>", 9) >= 0 &&
          rn_tok_lookup(tok, "<|flush|>", 9) >= 0))) {
        tok->attr[end_id] &= (uint16_t)~(RN_ATTR_EOG | RN_ATTR_CONTROL);
        tok->attr[end_id] |= RN_ATTR_USER_DEFINED;
    }
    /* Gemma 4 ends tool output with <|tool_response>, and </s> is text. */
    int32_t s_id = rn_tok_lookup(tok, "</s>", 4);
    int32_t tr_id = rn_tok_lookup(tok, "<|tool_response>", 16);
    if (s_id >= 0 && (uint32_t)s_id < tok->n_vocab && tr_id >= 0 &&
        (uint32_t)tr_id < tok->n_vocab && (tok->attr[tr_id] & RN_ATTR_EOG)) {
        tok->attr[s_id] &= (uint16_t)~(RN_ATTR_EOG | RN_ATTR_CONTROL);
        tok->attr[s_id] |= RN_ATTR_NORMAL;
    }
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const rn_tokenizer_t *tok = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = tok->str_len[x], ly = tok->str_len[y];
    if (lx != ly)
        return lx > ly ? -1 : 1; /* longest first */
    return x < y ? -1 : x > y;
}

static void set_strip_attrs(rn_tokenizer_t *tok, const cr_gguf_t *g);

static cr_status_t build_specials(rn_tokenizer_t *tok, const cr_gguf_t *g)
{
    uint32_t n = 0;
    for (uint32_t id = 0; id < tok->n_vocab; id++)
        if ((tok->attr[id] &
             (RN_ATTR_CONTROL | RN_ATTR_USER_DEFINED | RN_ATTR_UNKNOWN)) &&
            tok->str_len[id] > 0)
            n++;
    tok->specials = malloc((n ? n : 1) * sizeof *tok->specials);
    if (!tok->specials)
        return CR_E_NOMEM;
    for (uint32_t id = 0; id < tok->n_vocab; id++)
        if ((tok->attr[id] &
             (RN_ATTR_CONTROL | RN_ATTR_USER_DEFINED | RN_ATTR_UNKNOWN)) &&
            tok->str_len[id] > 0)
            tok->specials[tok->n_specials++] = (int32_t)id;
    qsort_r(tok->specials, tok->n_specials, sizeof *tok->specials, cmp_special, tok);

    set_strip_attrs(tok, g);
    return CR_OK;
}

/* The token named text, if the vocabulary has it, gets attr. */
static void add_attr(rn_tokenizer_t *tok, const char *text, uint16_t attr)
{
    int32_t id = rn_tok_lookup(tok, text, strlen(text));
    if (id >= 0 && (uint32_t)id < tok->n_vocab)
        tok->attr[id] |= attr;
}

/* Space stripping beside special tokens, which GGUF does not record:
 * llama.cpp decides it by model, and so do we, the same way. */
static void set_strip_attrs(rn_tokenizer_t *tok, const cr_gguf_t *g)
{
    char name[256], pre[64], arch[64];
    bool found = false;
    cr_err_t ignored;
    if (get_strz(g, K_PRE, pre, sizeof pre, &found, &ignored))
        pre[0] = 0;
    if (get_strz(g, "general.architecture", arch, sizeof arch, &found, &ignored))
        arch[0] = 0;
    /* Jina v2 (de, es, code), nomic-bert-moe and jina-bert-v3: <mask> eats
     * the spaces before it, as their Hugging Face tokenizers say. */
    if (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") ||
        strstr(pre, "jina-v2-code") || strstr(arch, "nomic-bert-moe") ||
        strstr(arch, "jina-bert-v3")) {
        add_attr(tok, "<mask>", RN_ATTR_LSTRIP);
        return;
    }
    if (get_strz(g, "general.name", name, sizeof name, &found, &ignored) || !found)
        return;
    for (char *p = name; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        /* Phi-3 eats the spaces after its special tokens, except <unk>,
         * <s> and <|endoftext|>. */
        for (uint32_t i = 0; i < tok->n_specials; i++)
            tok->attr[tok->specials[i]] |= RN_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t i = 0; i < CR_ARRAY_LEN(keep); i++) {
            int32_t id = rn_tok_lookup(tok, keep[i], strlen(keep[i]));
            if (id >= 0 && (uint32_t)id < tok->n_vocab)
                tok->attr[id] &= (uint16_t)~RN_ATTR_RSTRIP;
        }
        add_attr(tok, "</s>", RN_ATTR_RSTRIP);
    } else if (strstr(name, "modern-bert")) {
        add_attr(tok, "[MASK]", RN_ATTR_LSTRIP);
    }
}

static const uint16_t TYPE_ATTR[7] = {
    [RN_TOKEN_UNDEFINED] = 0,
    [RN_TOKEN_NORMAL] = RN_ATTR_NORMAL,
    [RN_TOKEN_UNKNOWN] = RN_ATTR_UNKNOWN,
    [RN_TOKEN_CONTROL] = RN_ATTR_CONTROL,
    [RN_TOKEN_USER_DEFINED] = RN_ATTR_USER_DEFINED,
    [RN_TOKEN_UNUSED] = RN_ATTR_UNUSED,
    [RN_TOKEN_BYTE] = RN_ATTR_BYTE,
};

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The byte a "<0xXX>" text stands for, or -1. */
static int byte_of_text(const char *p, size_t n)
{
    if (n != 6 || memcmp(p, "<0x", 3) || p[5] != '>')
        return -1;
    int hi = hexval(p[3]), lo = hexval(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static cr_status_t load_tokens(rn_tokenizer_t *tok, const cr_gguf_array_t *toks,
                               cr_err_t *err)
{
    uint64_t n = toks->n;
    if (n == 0)
        return cr_err_set(err, CR_E_CORRUPT, "%s is empty", K_TOKENS);
    if (n > RN_TOK_MAX_VOCAB)
        return cr_err_set(err, CR_E_TOO_LARGE, "%s has %" PRIu64 " tokens (limit %u)",
                          K_TOKENS, n, RN_TOK_MAX_VOCAB);
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = toks->strs[i].len;
        if (l > RN_TOK_MAX_TOKEN_BYTES)
            return cr_err_set(err, CR_E_TOO_LARGE,
                              "%s[%" PRIu64 "] is %" PRIu64 " bytes (limit %u)", K_TOKENS,
                              i, l, RN_TOK_MAX_TOKEN_BYTES);
        total += l;
    }
    if (total > ARENA_MAX_BYTES / 2)
        return cr_err_set(err, CR_E_TOO_LARGE, "%s holds %" PRIu64 " bytes of text",
                          K_TOKENS, total);
    tok->n_vocab = (uint32_t)n;
    strtab_caps_t *c = caps_of(tok);
    c->arena_cap = (size_t)total + 4096;
    c->strs_cap = (size_t)n + 1024;
    tok->arena = malloc(c->arena_cap);
    tok->str_off = malloc(c->strs_cap * sizeof *tok->str_off);
    tok->str_len = malloc(c->strs_cap * sizeof *tok->str_len);
    size_t slots = 1024;
    while (slots < 2 * (size_t)n + 2048)
        slots <<= 1;
    tok->map = calloc(slots, sizeof *tok->map);
    tok->map_mask = (uint32_t)(slots - 1);
    tok->scores = calloc((size_t)n, sizeof *tok->scores);
    tok->attr = malloc((size_t)n * sizeof *tok->attr);
    tok->type = malloc((size_t)n);
    if (!tok->arena || !tok->str_off || !tok->str_len || !tok->map || !tok->scores ||
        !tok->attr || !tok->type)
        return cr_err_set(err, CR_E_NOMEM, "tokenizer: no memory for %" PRIu64 " tokens",
                          n);
    for (uint64_t i = 0; i < n; i++) {
        uint32_t id;
        cr_status_t st =
            str_append(tok, toks->strs[i].ptr, (size_t)toks->strs[i].len, &id);
        if (st)
            return cr_err_set(err, st, "tokenizer: cannot store %s[%" PRIu64 "]",
                              K_TOKENS, i);
        /* An empty token can never match text; llama.cpp renames it. */
        if (toks->strs[i].len)
            map_insert(tok, id);
        tok->max_token_len = CR_MAX(tok->max_token_len, (uint32_t)toks->strs[i].len);
        tok->attr[i] = RN_ATTR_NORMAL;
        tok->type[i] = RN_TOKEN_NORMAL;
    }
    return CR_OK;
}

static cr_status_t load_scores_types(rn_tokenizer_t *tok, const cr_gguf_t *g,
                                     cr_err_t *err)
{
    const cr_gguf_array_t *a;
    cr_status_t st = get_array(g, K_SCORES, false, t_score, "f32", &a, err);
    if (st)
        return st;
    if (a) {
        if (a->n != tok->n_vocab)
            return cr_err_set(err, CR_E_CORRUPT, "%s has %" PRIu64 " entries, %s %u",
                              K_SCORES, a->n, K_TOKENS, tok->n_vocab);
        for (uint32_t i = 0; i < tok->n_vocab; i++) {
            float f = 0;
            int64_t v;
            if (a->type == CR_GGUF_F32 || a->type == CR_GGUF_F64) {
                if (!cr_gguf_arr_get_f32(a, i, &f))
                    return cr_err_set(err, CR_E_CORRUPT, "%s[%u] is unreadable", K_SCORES,
                                      i);
            } else {
                if (!cr_gguf_arr_get_i64(a, i, &v))
                    return cr_err_set(err, CR_E_CORRUPT, "%s[%u] is unreadable", K_SCORES,
                                      i);
                f = (float)v;
            }
            tok->scores[i] = isnan(f) ? -INFINITY : f; /* keep the order total */
        }
    }
    if ((st = get_array(g, K_TYPES, false, t_int, "i32", &a, err)))
        return st;
    if (a) {
        if (a->n != tok->n_vocab)
            return cr_err_set(err, CR_E_CORRUPT, "%s has %" PRIu64 " entries, %s %u",
                              K_TYPES, a->n, K_TOKENS, tok->n_vocab);
        for (uint32_t i = 0; i < tok->n_vocab; i++) {
            int64_t v;
            if (!cr_gguf_arr_get_i64(a, i, &v) || v < 0 || v > RN_TOKEN_BYTE)
                return cr_err_set(err, CR_E_CORRUPT, "%s[%u] is not a token type (0..6)",
                                  K_TYPES, i);
            tok->attr[i] = TYPE_ATTR[v];
            tok->type[i] = (uint8_t)v;
        }
    }
    return CR_OK;
}

static cr_status_t load_merges(rn_tokenizer_t *tok, const cr_gguf_t *g, cr_err_t *err)
{
    const cr_gguf_array_t *a;
    cr_status_t st = get_array(g, K_MERGES, true, t_string, "string", &a, err);
    if (st)
        return st;
    if (a->n > RN_TOK_MAX_MERGES)
        return cr_err_set(err, CR_E_TOO_LARGE, "%s has %" PRIu64 " entries (limit %u)",
                          K_MERGES, a->n, RN_TOK_MAX_MERGES);
    rn_span_t *sp = malloc((a->n ? a->n : 1) * sizeof *sp);
    if (!sp)
        return cr_err_set(err, CR_E_NOMEM, "tokenizer: no memory for merges");
    for (uint64_t i = 0; i < a->n; i++) {
        if (a->strs[i].len > 2 * (uint64_t)RN_TOK_MAX_TOKEN_BYTES) {
            free(sp);
            return cr_err_set(err, CR_E_TOO_LARGE, "%s[%" PRIu64 "] is %" PRIu64 " bytes",
                              K_MERGES, i, a->strs[i].len);
        }
        sp[i].ptr = a->strs[i].ptr;
        sp[i].len = (size_t)a->strs[i].len;
    }
    st = rn_bpe_build_merges(tok, sp, (size_t)a->n, err);
    free(sp);
    return st;
}

static cr_status_t load_ids(rn_tokenizer_t *tok, const cr_gguf_t *g, cr_err_t *err,
                            bool *eot_key, bool *eom_key)
{
    cr_status_t st;
    uint32_t n = tok->n_vocab;
    if ((st = get_id(g, "tokenizer.ggml.bos_token_id", n, true, &tok->bos, err)) ||
        (st = get_id(g, "tokenizer.ggml.eos_token_id", n, true, &tok->eos, err)) ||
        (st = get_id(g, "tokenizer.ggml.unknown_token_id", n, true, &tok->unk, err)) ||
        (st = get_id(g, "tokenizer.ggml.padding_token_id", n, false, &tok->pad, err)) ||
        (st = get_id(g, "tokenizer.ggml.seperator_token_id", n, false, &tok->sep, err)))
        return st;
    int32_t before = tok->eot;
    if ((st = get_id(g, "tokenizer.ggml.eot_token_id", n, true, &tok->eot, err)))
        return st;
    *eot_key = tok->eot != before;
    before = tok->eom;
    if ((st = get_id(g, "tokenizer.ggml.eom_token_id", n, true, &tok->eom, err)))
        return st;
    *eom_key = tok->eom != before;
    return CR_OK;
}

static void set_byte_tokens(rn_tokenizer_t *tok)
{
    for (int b = 0; b < 256; b++) {
        tok->byte_tok[b] = -1;
        tok->byte_sym[b] = -1;
        char s[8];
        if (tok->kind == RN_TOK_SPM) {
            snprintf(s, sizeof s, "<0x%02X>", b);
            int32_t id = rn_tok_lookup(tok, s, 6);
            if (id < 0) {
                s[0] = (char)b; /* llama.cpp's fallback: the byte itself */
                id = rn_tok_lookup(tok, s, 1);
            }
            if (id >= 0 && (uint32_t)id < tok->n_vocab)
                tok->byte_tok[b] = id;
        } else if (tok->kind == RN_TOK_BPE) {
            size_t n = rn_utf8_encode(rn_bpe_byte_to_cp((uint8_t)b), s);
            int32_t id = rn_tok_lookup(tok, s, n);
            tok->byte_sym[b] = id;
            if (id >= 0 && (uint32_t)id < tok->n_vocab)
                tok->byte_tok[b] = id;
        }
    }
}

bool rn_tokenizer_pre_supported(const char *name)
{
    rn_pre_t pre;
    bool a, b, c;
    return rn_pretok_from_name(name, &pre, &a, &b, &c);
}

static cr_status_t load(rn_tokenizer_t *tok, const cr_gguf_t *g, cr_err_t *err)
{
    char model[32];
    bool found;
    cr_status_t st = get_strz(g, K_MODEL, model, sizeof model, &found, err);
    if (st)
        return st;
    if (!found)
        return cr_err_set(err, CR_E_NOT_FOUND, "%s is missing", K_MODEL);
    bool add_bos_default = false, no_bos = false;
    if (!strcmp(model, "llama")) {
        tok->kind = RN_TOK_SPM;
        tok->add_space_prefix = true;
        add_bos_default = true;
    } else if (!strcmp(model, "gpt2")) {
        tok->kind = RN_TOK_BPE;
        if ((st = get_strz(g, K_PRE, tok->pre_name, sizeof tok->pre_name, &found, err)))
            return st;
        if (!rn_pretok_from_name(tok->pre_name, &tok->pre, &tok->ignore_merges,
                                 &add_bos_default, &no_bos))
            return cr_err_set(err, CR_E_UNSUPPORTED, "%s '%s' is not supported", K_PRE,
                              tok->pre_name);
    } else if (!strcmp(model, "bert")) {
        tok->kind = RN_TOK_WPM; /* BOS = [CLS], EOS = [SEP], both added */
        add_bos_default = true;
    } else if (!strcmp(model, "t5")) {
        tok->kind = RN_TOK_UGM; /* EOS added, no BOS, by default */
    } else {
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s '%s' is not supported", K_MODEL,
                          model);
    }

    const cr_gguf_array_t *toks;
    if ((st = get_array(g, K_TOKENS, true, t_string, "string", &toks, err)) ||
        (st = load_tokens(tok, toks, err)) || (st = load_scores_types(tok, g, err)))
        return st;
    if (tok->kind == RN_TOK_BPE && (st = load_merges(tok, g, err)))
        return st;

    /* llama.cpp's defaults, then the file's keys. */
    uint32_t n = tok->n_vocab;
    tok->bos = tok->eos = tok->eot = tok->eom = tok->unk = tok->pad = tok->sep = -1;
    if (tok->kind == RN_TOK_SPM) {
        tok->bos = n > 1 ? 1 : -1;
        tok->eos = n > 2 ? 2 : -1;
        tok->unk = 0;
    } else if (tok->kind == RN_TOK_WPM) {
        /* BERT's [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102 */
        tok->bos = n > 101 ? 101 : -1;
        tok->eos = tok->sep = n > 102 ? 102 : -1;
        tok->unk = n > 100 ? 100 : -1;
        tok->pad = 0;
    } else if (tok->kind == RN_TOK_UGM) {
        /* T5's <pad> 0, </s> 1, <unk> 2; no BOS */
        tok->eos = n > 1 ? 1 : -1;
        tok->unk = n > 2 ? 2 : -1;
        tok->pad = 0;
    } else {
        tok->bos = tok->eos = n > 11 ? 11 : -1; /* Falcon's <|endoftext|> */
    }
    if (no_bos)
        tok->bos = -1;
    bool eot_key = false, eom_key = false;
    if ((st = load_ids(tok, g, err, &eot_key, &eom_key)))
        return st;
    tok->add_bos = add_bos_default;
    tok->add_eos = tok->kind == RN_TOK_UGM;
    if (tok->kind == RN_TOK_WPM) {
        /* [CLS] is the BOS (cls_token_id wins), [SEP] the EOS unless the file
         * names an eos_token_id; both are added. */
        if ((st = get_id(g, "tokenizer.ggml.cls_token_id", n, true, &tok->bos, err)))
            return st;
        if (!cr_gguf_kv_find(g, "tokenizer.ggml.eos_token_id") && tok->sep >= 0)
            tok->eos = tok->sep;
        tok->add_bos = tok->bos >= 0;
        tok->add_eos = tok->eos >= 0;
    }
    if ((st = get_bool(g, "tokenizer.ggml.add_bos_token", &tok->add_bos, err)) ||
        (st = get_bool(g, "tokenizer.ggml.add_eos_token", &tok->add_eos, err)) ||
        (st =
             get_bool(g, "tokenizer.ggml.add_space_prefix", &tok->add_space_prefix, err)) ||
        (st = get_bool(g, "tokenizer.ggml.add_sep_token", &tok->add_sep, err)))
        return st;
    if (tok->add_bos && tok->bos < 0)
        return cr_err_set(
            err, CR_E_CORRUPT,
            "tokenizer.ggml.add_bos_token is true but there is no bos_token_id");
    if (tok->add_eos && tok->eos < 0)
        return cr_err_set(
            err, CR_E_CORRUPT,
            "tokenizer.ggml.add_eos_token is true but there is no eos_token_id");

    /* Before mark_eog: the unigram tables follow the stored token types. */
    if (tok->kind == RN_TOK_UGM && (st = rn_ugm_load(tok, g, err)))
        return st;
    mark_eog(tok, eot_key, eom_key);
    mark_fim(tok, g);
    if ((st = build_specials(tok, g)))
        return cr_err_set(err, st, "tokenizer: no memory for special tokens");
    set_byte_tokens(tok);
    tok->max_piece_bytes = CR_MAX(tok->max_token_len, 1u);
    return CR_OK;
}

cr_status_t rn_tokenizer_load(const cr_gguf_t *g, rn_tokenizer_t **out, cr_err_t *err)
{
    *out = NULL;
    loader_t *ld = calloc(1, sizeof *ld);
    if (!ld)
        return cr_err_set(err, CR_E_NOMEM, "tokenizer: out of memory");
    rn_tokenizer_t *tok = &ld->tok;
    cr_status_t st = load(tok, g, err);
    if (st) {
        rn_tokenizer_destroy(&tok);
        return st;
    }
    *out = tok;
    return CR_OK;
}

void rn_tokenizer_destroy(rn_tokenizer_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_tokenizer_t *t = *self_p;
    free(t->arena);
    free(t->str_off);
    free(t->str_len);
    free(t->map);
    free(t->scores);
    free(t->attr);
    free(t->type);
    free(t->merge_key);
    free(t->merge_rank);
    free(t->merge_res);
    free(t->specials);
    free(t->xcda);
    free(t->norm_strs);
    free(t->user_sorted);
    free((loader_t *)(void *)t); /* allocated as a loader */
    *self_p = NULL;
}

/* ---- encoding ------------------------------------------------------------------ */

/* A piece of the input: raw text [off, off + len) when id < 0, else a
 * special token. */
typedef struct frag {
    int32_t id;
    uint32_t off, len;
} frag_t;

typedef struct frags {
    frag_t *v;
    size_t n, cap;
} frags_t;

static bool frags_push(frags_t *f, int32_t id, size_t off, size_t len)
{
    if (f->n == f->cap) {
        size_t nc = f->cap ? f->cap * 2 : 16;
        frag_t *nv = realloc(f->v, nc * sizeof *nv);
        if (!nv)
            return false;
        f->v = nv;
        f->cap = nc;
    }
    f->v[f->n++] = (frag_t){id, (uint32_t)off, (uint32_t)len};
    return true;
}

static bool c_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Cuts the raw-text fragments at every occurrence of special token id. */
static cr_status_t split_special(const rn_tokenizer_t *tok, const char *text,
                                 int32_t id, frags_t *in, frags_t *out)
{
    const char *t = tok->arena + tok->str_off[id];
    size_t tl = tok->str_len[id];
    uint16_t attr = tok->attr[id];
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        frag_t f = in->v[k];
        if (f.id >= 0) {
            if (!frags_push(out, f.id, 0, 0))
                return CR_E_NOMEM;
            continue;
        }
        size_t off = f.off, len = f.len;
        while (len > 0) {
            const char *m = memmem(text + off, len, t, tl);
            if (!m) {
                if (!frags_push(out, -1, off, len))
                    return CR_E_NOMEM;
                break;
            }
            size_t mpos = (size_t)(m - text);
            size_t left = mpos - off;
            if (attr & RN_ATTR_LSTRIP)
                while (left > 0 && c_space(text[off + left - 1]))
                    left--;
            if (left > 0 && !frags_push(out, -1, off, left))
                return CR_E_NOMEM;
            if (!frags_push(out, id, 0, 0))
                return CR_E_NOMEM;
            size_t end = off + len;
            off = mpos + tl;
            len = end - off;
            if (attr & RN_ATTR_RSTRIP)
                while (len > 0 && c_space(text[off]))
                    off++, len--;
        }
    }
    return CR_OK;
}

cr_status_t rn_tokenize(const rn_tokenizer_t *tok, const char *text, size_t len,
                        bool add_special, bool parse_special, int32_t *out,
                        size_t cap, size_t *n_out, cr_err_t *err)
{
    *n_out = 0;
    if (len > RN_TOK_MAX_INPUT_BYTES)
        return cr_err_set(err, CR_E_TOO_LARGE, "tokenize: input is %zu bytes (limit %u)",
                          len, RN_TOK_MAX_INPUT_BYTES);
    rn_emit_t e = {out, cap, 0};
    frags_t a = {0}, b = {0};
    cr_status_t st = CR_E_NOMEM;
    if (len > 0) {
        if (!frags_push(&a, -1, 0, len))
            goto out;
        for (uint32_t i = 0; i < tok->n_specials; i++) {
            int32_t id = tok->specials[i];
            if (!parse_special && (tok->attr[id] & (RN_ATTR_CONTROL | RN_ATTR_UNKNOWN)))
                continue;
            /* Most specials never occur: one scan of the whole text first. */
            if (!memmem(text, len, tok->arena + tok->str_off[id], tok->str_len[id]))
                continue;
            if ((st = split_special(tok, text, id, &a, &b)))
                goto out;
            frags_t t = a;
            a = b, b = t;
        }
    }

    if (add_special && tok->add_bos && tok->bos >= 0)
        rn_emit_id(&e, tok->bos);
    bool prev_special = true; /* SentencePiece prefixes the first text */
    st = CR_OK;
    for (size_t k = 0; k < a.n && !st; k++) {
        frag_t f = a.v[k];
        if (f.id >= 0) {
            rn_emit_id(&e, f.id);
            prev_special = true;
        } else if (tok->kind == RN_TOK_SPM) {
            st = rn_spm_encode(tok, text + f.off, f.len,
                               tok->add_space_prefix && prev_special, &e);
            prev_special = false;
        } else if (tok->kind == RN_TOK_WPM) {
            st = rn_wpm_encode(tok, text + f.off, f.len, &e);
        } else if (tok->kind == RN_TOK_UGM) {
            st = rn_ugm_encode(tok, text + f.off, f.len, &e);
        } else {
            st = rn_bpe_encode(tok, text + f.off, f.len, &e);
        }
    }
    if (st)
        goto out;
    if (add_special && tok->add_eos && tok->eos >= 0)
        rn_emit_id(&e, tok->eos);
    *n_out = e.n;
    if (e.n > cap)
        st = cr_err_set(err, CR_E_TOO_LARGE, "tokenize: %zu tokens do not fit in %zu",
                        e.n, cap);
out:
    if (st == CR_E_NOMEM)
        cr_err_set(err, st, "tokenize: out of memory (%zu bytes of input)", len);
    else if (st == CR_E_TOO_LARGE && e.n <= cap)
        cr_err_set(err, st, "tokenize: %zu bytes of input normalize past the limit",
                   len);
    free(a.v);
    free(b.v);
    return st;
}

/* Appends one special id to a pair being counted into out[0..cap). */
static void pair_put(int32_t id, int32_t *out, size_t cap, size_t *n)
{
    if (*n < cap)
        out[*n] = id;
    (*n)++;
}

/* Appends text's ids (no specials added or parsed) the same way. */
static cr_status_t pair_text(const rn_tokenizer_t *tok, const char *text, size_t len,
                             int32_t *out, size_t cap, size_t *n, cr_err_t *err)
{
    size_t at = CR_MIN(*n, cap), got = 0;
    cr_status_t st = rn_tokenize(tok, text, len, false, false, out ? out + at : NULL,
                                 cap - at, &got, err);
    if (st && st != CR_E_TOO_LARGE)
        return st;
    *n += got;
    return CR_OK;
}

cr_status_t rn_tokenizer_encode_pair(const rn_tokenizer_t *tok, const char *a, size_t a_len,
                             const char *b, size_t b_len, int32_t *out, size_t cap,
                             size_t *n_out, cr_err_t *err)
{
    *n_out = 0;
    int32_t eos = tok->eos >= 0 ? tok->eos : tok->sep;
    size_t n = 0;
    cr_status_t st;
    if (tok->add_bos && tok->bos >= 0)
        pair_put(tok->bos, out, cap, &n);
    if ((st = pair_text(tok, a, a_len, out, cap, &n, err)))
        return st;
    if (tok->add_eos && eos >= 0)
        pair_put(eos, out, cap, &n);
    if (tok->add_sep && tok->sep >= 0)
        pair_put(tok->sep, out, cap, &n);
    if ((st = pair_text(tok, b, b_len, out, cap, &n, err)))
        return st;
    if (tok->add_eos && eos >= 0)
        pair_put(eos, out, cap, &n);
    *n_out = n;
    if (n > cap)
        return cr_err_set(err, CR_E_TOO_LARGE, "tokenize: the pair's %zu tokens do not "
                          "fit in %zu", n, cap);
    return CR_OK;
}

/* ---- decoding ------------------------------------------------------------------ */

static bool id_ok(const rn_tokenizer_t *tok, int32_t id)
{
    return id >= 0 && (uint32_t)id < tok->n_vocab;
}

/* Where piece bytes go: at most cap stored, all counted; with strip, a
 * first byte that is a space is dropped. */
typedef struct sink {
    char *buf;
    size_t cap, n;
    bool strip;
} sink_t;

static inline void put(sink_t *k, char c)
{
    if (k->strip) {
        k->strip = false;
        if (c == ' ')
            return;
    }
    if (k->n < k->cap)
        k->buf[k->n] = c;
    k->n++;
}

static void put_all(sink_t *k, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put(k, p[i]);
}

/* Writes the piece of id (with LSTRIP as flags say) into buf, at most cap
 * bytes; returns its full length. Allocates nothing. */
static size_t piece(const rn_tokenizer_t *tok, int32_t id, unsigned flags, char *buf,
                    size_t cap)
{
    uint16_t attr = tok->attr[id];
    const char *t = tok->arena + tok->str_off[id];
    size_t tl = tok->str_len[id];
    sink_t k = {buf, cap, 0, (flags & RN_PIECE_LSTRIP) != 0};
    if ((attr & (RN_ATTR_UNKNOWN | RN_ATTR_CONTROL)) && !(flags & RN_PIECE_SPECIAL))
        return 0;
    if (attr & (RN_ATTR_UNKNOWN | RN_ATTR_CONTROL | RN_ATTR_USER_DEFINED)) {
        put_all(&k, t, tl);
    } else if (attr & RN_ATTR_NORMAL) {
        if (tok->kind != RN_TOK_BPE) {
            for (size_t i = 0; i < tl; i++) {
                if (i + 3 <= tl && !memcmp(t + i, "\xe2\x96\x81", 3)) {
                    put(&k, ' ');
                    i += 2;
                } else {
                    put(&k, t[i]);
                }
            }
        } else {
            for (size_t i = 0; i < tl;) {
                uint32_t cp;
                size_t cl = rn_utf8_decode((const uint8_t *)t + i, tl - i, &cp);
                int b = rn_bpe_cp_to_byte(cp);
                if (b >= 0)
                    put(&k, (char)b);
                else
                    put_all(&k, t + i, cl); /* not in the alphabet: as is */
                i += cl;
            }
        }
    } else if (attr & RN_ATTR_BYTE) {
        int b = byte_of_text(t, tl);
        if (b >= 0)
            put(&k, (char)b);
        else
            put_all(&k, t, tl);
    }
    return k.n;
}

cr_status_t rn_token_piece(const rn_tokenizer_t *tok, int32_t id, unsigned flags,
                           char *buf, size_t cap, size_t *n_out, cr_err_t *err)
{
    *n_out = 0;
    if (!id_ok(tok, id))
        return cr_err_set(err, CR_E_INVALID,
                          "token id %" PRId32 " is out of range (vocabulary has %u)", id,
                          tok->n_vocab);
    size_t n = piece(tok, id, flags, buf, cap);
    *n_out = n;
    if (n > cap)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "token %" PRId32 " needs %zu bytes, room for %zu", id, n, cap);
    return CR_OK;
}

cr_status_t rn_detokenize(const rn_tokenizer_t *tok, const int32_t *ids, size_t n,
                          unsigned flags, cr_buf_t *out, cr_err_t *err)
{
    char *tmp = malloc(tok->max_piece_bytes);
    if (!tmp)
        return cr_err_set(err, CR_E_NOMEM, "detokenize: out of memory");
    bool strip = flags & RN_PIECE_LSTRIP;
    cr_status_t st = CR_OK;
    for (size_t i = 0; i < n; i++) {
        if (!id_ok(tok, ids[i])) {
            st = cr_err_set(err, CR_E_INVALID,
                            "token id %" PRId32
                            " at [%zu] is out of range (vocabulary has %u)",
                            ids[i], i, tok->n_vocab);
            break;
        }
        size_t len =
            piece(tok, ids[i], flags & RN_PIECE_SPECIAL, tmp, tok->max_piece_bytes);
        if (strip && len > 0) {
            /* Only the first piece that has text loses its space. */
            len = piece(tok, ids[i], (flags & RN_PIECE_SPECIAL) | RN_PIECE_LSTRIP, tmp,
                        tok->max_piece_bytes);
            strip = false;
        }
        if ((st = cr_buf_append(out, tmp, len))) {
            cr_err_set(err, st, "detokenize: output over %zu bytes", out->max_bytes);
            break;
        }
    }
    free(tmp);
    return st;
}

/* ---- streaming ---------------------------------------------------------------- */

struct rn_detok {
    const rn_tokenizer_t *tok;
    unsigned flags;
    bool first;         /* no non-empty piece yet (for LSTRIP) */
    size_t n_pending;   /* bytes of an incomplete character held back */
    char *work;         /* pending + piece: 3 + max_piece_bytes */
    char *out;          /* 3 bytes per work byte at most (U+FFFD) */
};

rn_detok_t *rn_detok_new(const rn_tokenizer_t *tok, unsigned flags)
{
    rn_detok_t *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->tok = tok;
    d->flags = flags;
    d->first = true;
    size_t w = (size_t)tok->max_piece_bytes + 4;
    d->work = malloc(w);
    d->out = malloc(3 * w);
    if (!d->work || !d->out)
        rn_detok_destroy(&d);
    return d;
}

void rn_detok_destroy(rn_detok_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free((*self_p)->work);
    free((*self_p)->out);
    free(*self_p);
    *self_p = NULL;
}

static const char REPLACEMENT[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

cr_status_t rn_detok_push(rn_detok_t *d, int32_t id, const char **chunk, size_t *len,
                          cr_err_t *err)
{
    *chunk = d->out;
    *len = 0;
    if (!id_ok(d->tok, id))
        return cr_err_set(err, CR_E_INVALID,
                          "token id %" PRId32 " is out of range (vocabulary has %u)", id,
                          d->tok->n_vocab);
    char *dst = d->work + d->n_pending;
    unsigned special = d->flags & RN_PIECE_SPECIAL;
    size_t pl = piece(d->tok, id, special, dst, d->tok->max_piece_bytes);
    if (d->first && pl > 0) {
        if (d->flags & RN_PIECE_LSTRIP)
            pl = piece(d->tok, id, special | RN_PIECE_LSTRIP, dst,
                       d->tok->max_piece_bytes);
        d->first = false;
    }
    size_t n = d->n_pending + pl;
    const uint8_t *w = (const uint8_t *)d->work;
    size_t done = rn_utf8_complete_len(w, n), o = 0;
    for (size_t i = 0; i < done;) {
        uint32_t cp;
        size_t cl = rn_utf8_decode(w + i, done - i, &cp);
        if (RN_UTF8_IS_RAW(cp)) {
            memcpy(d->out + o, REPLACEMENT, 3);
            o += 3;
        } else {
            memcpy(d->out + o, w + i, cl);
            o += cl;
        }
        i += cl;
    }
    memmove(d->work, d->work + done, n - done);
    d->n_pending = n - done;
    *len = o;
    return CR_OK;
}

void rn_detok_flush(rn_detok_t *d, const char **chunk, size_t *len)
{
    *chunk = d->out;
    *len = 0;
    if (d->n_pending) {
        memcpy(d->out, REPLACEMENT, 3); /* an unfinished character */
        *len = 3;
    }
    d->n_pending = 0;
    d->first = true;
}

size_t rn_detok_pending(const rn_detok_t *d)
{
    return d->n_pending;
}

/* ---- facts ----------------------------------------------------------------------- */

rn_tok_kind_t rn_tokenizer_kind(const rn_tokenizer_t *tok) { return tok->kind; }
const char *rn_tokenizer_pre_name(const rn_tokenizer_t *tok) { return tok->pre_name; }
size_t rn_tokenizer_n_vocab(const rn_tokenizer_t *tok) { return tok->n_vocab; }
int32_t rn_tokenizer_bos(const rn_tokenizer_t *tok) { return tok->bos; }
int32_t rn_tokenizer_eos(const rn_tokenizer_t *tok) { return tok->eos; }
int32_t rn_tokenizer_eot(const rn_tokenizer_t *tok) { return tok->eot; }
int32_t rn_tokenizer_unk(const rn_tokenizer_t *tok) { return tok->unk; }
int32_t rn_tokenizer_pad(const rn_tokenizer_t *tok) { return tok->pad; }
bool rn_tokenizer_add_bos(const rn_tokenizer_t *tok) { return tok->add_bos; }
bool rn_tokenizer_add_eos(const rn_tokenizer_t *tok) { return tok->add_eos; }
bool rn_tokenizer_add_sep(const rn_tokenizer_t *tok) { return tok->add_sep; }
int32_t rn_tokenizer_sep(const rn_tokenizer_t *tok) { return tok->sep; }
bool rn_tokenizer_add_space_prefix(const rn_tokenizer_t *tok)
{
    return tok->add_space_prefix;
}
size_t rn_tokenizer_max_piece_bytes(const rn_tokenizer_t *tok)
{
    return tok->max_piece_bytes;
}

bool rn_tokenizer_is_eog(const rn_tokenizer_t *tok, int32_t id)
{
    return id_ok(tok, id) && (tok->attr[id] & RN_ATTR_EOG);
}

bool rn_tokenizer_is_control(const rn_tokenizer_t *tok, int32_t id)
{
    return id_ok(tok, id) && (tok->attr[id] & RN_ATTR_CONTROL);
}

rn_token_type_t rn_tokenizer_token_type(const rn_tokenizer_t *tok, int32_t id)
{
    return id_ok(tok, id) ? (rn_token_type_t)tok->type[id] : RN_TOKEN_UNDEFINED;
}

const char *rn_tokenizer_token_text(const rn_tokenizer_t *tok, int32_t id, size_t *len)
{
    if (!id_ok(tok, id)) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = tok->str_len[id];
    return tok->arena + tok->str_off[id];
}

int32_t rn_tokenizer_find(const rn_tokenizer_t *tok, const char *text, size_t len)
{
    int32_t id = rn_tok_lookup(tok, text, len);
    return id_ok(tok, id) ? id : -1;
}
