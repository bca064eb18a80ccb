/* hf_vocab.c: tokenizer.json to GGUF tokenizer.* keys (see hf_vocab.h). */
#include "lib/prelude.h"
#include "services/registry/hf_vocab.h"

#define MAX_MERGES (1u << 23)

/* GGUF token types, as llama.cpp numbers them. */
enum { T_NORMAL = 1, T_UNKNOWN = 2, T_CONTROL = 3, T_USER = 4, T_UNUSED = 5,
       T_BYTE = 6 };

/* The pre-tokenizer regexes of tokenizer.json files, by the
 * tokenizer.ggml.pre name corral's tokenizer gives the same splitting. */
static const struct {
    const char *pre;
    const char *regex;
} known_splits[] = {
    {"llama-bpe",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen2",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

typedef struct vocab {
    const char **tok; /* borrowed from the JSON, or pads[] */
    float *score;
    int32_t *type;
    uint32_t n;
    char **pads;      /* owned "[PAD<id>]" strings */
    uint32_t n_pads;
    int32_t *slot;    /* hash table of ids by token text, -1 empty */
    uint32_t cap;
} vocab_t;

static void vocab_free(vocab_t *v)
{
    for (uint32_t i = 0; i < v->n_pads; i++)
        free(v->pads[i]);
    free(v->pads);
    free(v->tok);
    free(v->score);
    free(v->type);
    free(v->slot);
}

static uint32_t hash_str(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static cr_status_t index_build(vocab_t *v, cr_err_t *err)
{
    v->cap = 1;
    while (v->cap < 2 * v->n + 2)
        v->cap <<= 1;
    v->slot = malloc(v->cap * sizeof *v->slot);
    if (!v->slot)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    memset(v->slot, 0xff, v->cap * sizeof *v->slot);
    for (uint32_t i = 0; i < v->n; i++) {
        uint32_t h = hash_str(v->tok[i], strlen(v->tok[i])) & (v->cap - 1);
        while (v->slot[h] >= 0)
            h = (h + 1) & (v->cap - 1);
        v->slot[h] = (int32_t)i;
    }
    return CR_OK;
}

/* The lowest id of the token s (n bytes), or -1. */
static int32_t index_find(const vocab_t *v, const char *s, size_t n)
{
    uint32_t h = hash_str(s, n) & (v->cap - 1);
    int32_t best = -1;
    for (; v->slot[h] >= 0; h = (h + 1) & (v->cap - 1)) {
        const char *t = v->tok[v->slot[h]];
        if (strlen(t) == n && !memcmp(t, s, n) && (best < 0 || v->slot[h] < best))
            best = v->slot[h];
    }
    return best;
}

/* A token given by text in a tokenizer_config.json field: a string or an
 * AddedToken object {"content": ...}. */
static const char *token_text(const json_t *v)
{
    if (json_is_object(v))
        v = json_object_get(v, "content");
    return json_string_value(v);
}

static bool get_id(const json_t *v, int64_t *out)
{
    if (json_is_array(v))
        v = json_array_get(v, 0);
    if (!json_is_integer(v))
        return false;
    *out = json_integer_value(v);
    return true;
}

/* Finds the ByteLevel step and the Split regexes of a pre_tokenizer. */
typedef struct pre_info {
    bool byte_level, byte_level_regex, metaspace_prefix, other;
    const char *splits[4];
    int n_splits;
    const char *other_type;
} pre_info_t;

static void pre_scan(const json_t *p, pre_info_t *pi)
{
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type)
        return;
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(p, "pretokenizers");
        for (size_t i = 0; i < json_array_size(list); i++)
            pre_scan(json_array_get(list, i), pi);
    } else if (!strcmp(type, "ByteLevel")) {
        pi->byte_level = true;
        const json_t *ur = json_object_get(p, "use_regex");
        pi->byte_level_regex = !ur || json_is_true(ur);
        /* a space before the first word: no GGUF pre-tokenizer does that */
        if (json_is_true(json_object_get(p, "add_prefix_space"))) {
            pi->other = true;
            pi->other_type = "ByteLevel with add_prefix_space";
        }
    } else if (!strcmp(type, "Split")) {
        const char *re = json_string_value(
            json_object_get(json_object_get(p, "pattern"), "Regex"));
        if (re && pi->n_splits < (int)CR_ARRAY_LEN(pi->splits))
            pi->splits[pi->n_splits++] = re;
        else
            pi->other = true;
    } else if (!strcmp(type, "Metaspace")) {
        const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
        const json_t *aps = json_object_get(p, "add_prefix_space");
        pi->metaspace_prefix = scheme ? strcmp(scheme, "never") != 0
                                      : !aps || json_is_true(aps);
    } else {
        pi->other = true;
        pi->other_type = type;
    }
}

/* The tokenizer.ggml.pre name for a byte-level pre-tokenizer, or NULL. */
static const char *pre_name(const pre_info_t *pi)
{
    if (pi->other)
        return NULL;
    if (pi->n_splits == 0 && pi->byte_level_regex)
        return "gpt-2";
    if (pi->n_splits != 1 || pi->byte_level_regex)
        return NULL;
    for (size_t i = 0; i < CR_ARRAY_LEN(known_splits); i++)
        if (!strcmp(pi->splits[0], known_splits[i].regex))
            return known_splits[i].pre;
    return NULL;
}

/* Whether a normalizer prepends "▁" (SentencePiece's space prefix). */
static bool normalizer_prepends(const json_t *nz)
{
    const char *type = json_string_value(json_object_get(nz, "type"));
    if (!type)
        return false;
    if (!strcmp(type, "Prepend"))
        return true;
    if (!strcmp(type, "Sequence")) {
        const json_t *list = json_object_get(nz, "normalizers");
        for (size_t i = 0; i < json_array_size(list); i++)
            if (normalizer_prepends(json_array_get(list, i)))
                return true;
    }
    return false;
}

/* Fills v->tok from model.vocab and added_tokens, padding to vocab_size. */
static cr_status_t load_tokens(vocab_t *v, const json_t *vocab,
                               const json_t *added, uint32_t vocab_size,
                               cr_err_t *err)
{
    int64_t max_id = -1;
    const char *k;
    const json_t *val;
    json_object_foreach((json_t *)vocab, k, val) {
        if (!json_is_integer(val) || json_integer_value(val) < 0 ||
            json_integer_value(val) >= REG_HF_MAX_VOCAB)
            return cr_err_set(err, CR_E_INVALID, "tokenizer.json: model.vocab"
                              "['%.64s'] is not an id below %u", k,
                              REG_HF_MAX_VOCAB);
        max_id = CR_MAX(max_id, json_integer_value(val));
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        const json_t *id = json_object_get(a, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= REG_HF_MAX_VOCAB ||
            !json_is_string(json_object_get(a, "content")))
            return cr_err_set(err, CR_E_INVALID, "tokenizer.json: added_tokens"
                              "[%zu] needs an id below %u and a content", i,
                              REG_HF_MAX_VOCAB);
        max_id = CR_MAX(max_id, json_integer_value(id));
    }
    if (max_id < 0)
        return cr_err_set(err, CR_E_INVALID, "tokenizer.json: no tokens");
    v->n = CR_MAX((uint32_t)max_id + 1, vocab_size);
    v->tok = calloc(v->n, sizeof *v->tok);
    v->score = calloc(v->n, sizeof *v->score);
    v->type = calloc(v->n, sizeof *v->type);
    if (!v->tok || !v->score || !v->type)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    json_object_foreach((json_t *)vocab, k, val) {
        uint32_t id = (uint32_t)json_integer_value(val);
        if (v->tok[id])
            return cr_err_set(err, CR_E_INVALID, "tokenizer.json: id %u is "
                              "both '%.64s' and '%.64s'", id, v->tok[id], k);
        v->tok[id] = k;
        v->type[id] = T_NORMAL;
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *a = json_array_get(added, i);
        uint32_t id = (uint32_t)json_integer_value(json_object_get(a, "id"));
        v->tok[id] = json_string_value(json_object_get(a, "content"));
        v->type[id] = json_is_true(json_object_get(a, "special")) ? T_CONTROL : T_USER;
    }
    for (uint32_t id = 0; id < v->n; id++) {
        if (v->tok[id])
            continue;
        char **pads = realloc(v->pads, (v->n_pads + 1) * sizeof *pads);
        if (!pads)
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        v->pads = pads;
        if (asprintf(&v->pads[v->n_pads], "[PAD%u]", id) < 0)
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        v->tok[id] = v->pads[v->n_pads++];
        v->type[id] = T_UNUSED;
    }
    return index_build(v, err);
}

/* One merge as its two parts: "a b" or ["a", "b"]. */
static bool merge_parts(const json_t *m, const char **a, size_t *na,
                        const char **b, size_t *nb)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m), *sp = strchr(s, ' ');
        if (!sp || sp == s || !sp[1])
            return false;
        *a = s;
        *na = (size_t)(sp - s);
        *b = sp + 1;
        *nb = strlen(sp + 1);
        return true;
    }
    if (json_array_size(m) != 2 || !json_is_string(json_array_get(m, 0)) ||
        !json_is_string(json_array_get(m, 1)))
        return false;
    *a = json_string_value(json_array_get(m, 0));
    *b = json_string_value(json_array_get(m, 1));
    *na = strlen(*a);
    *nb = strlen(*b);
    return true;
}

/* Byte-level BPE: the merges as "a b" strings. */
static cr_status_t add_bpe_merges(cr_gguf_writer_t *w, const json_t *merges,
                                  cr_err_t *err)
{
    size_t n = json_array_size(merges);
    if (n > MAX_MERGES)
        return cr_err_set(err, CR_E_TOO_LARGE, "tokenizer.json: %zu merges", n);
    char **strs = calloc(n ? n : 1, sizeof *strs);
    cr_status_t st = strs ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < n; i++) {
        const char *a, *b;
        size_t na, nb;
        if (!merge_parts(json_array_get(merges, i), &a, &na, &b, &nb))
            st = cr_err_set(err, CR_E_INVALID, "tokenizer.json: model.merges[%zu] "
                            "is not a pair", i);
        else if (asprintf(&strs[i], "%.*s %.*s", (int)na, a, (int)nb, b) < 0)
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    if (!st)
        st = cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.merges",
                                        (const char *const *)strs, n, err);
    for (size_t i = 0; strs && i < n; i++)
        free(strs[i]);
    free(strs);
    return st;
}

/* SentencePiece-style: a merged token scores minus the rank of the first
 * merge that makes it; other tokens score below every merge. */
static cr_status_t spm_scores(vocab_t *v, const json_t *merges, cr_err_t *err)
{
    size_t n = json_array_size(merges);
    if (n > MAX_MERGES)
        return cr_err_set(err, CR_E_TOO_LARGE, "tokenizer.json: %zu merges", n);
    bool *set = calloc(v->n, sizeof *set);
    char *buf = NULL;
    size_t cap = 0;
    if (!set)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = CR_OK;
    for (size_t r = 0; r < n && !st; r++) {
        const char *a, *b;
        size_t na, nb;
        if (!merge_parts(json_array_get(merges, r), &a, &na, &b, &nb)) {
            st = cr_err_set(err, CR_E_INVALID, "tokenizer.json: model.merges[%zu] "
                            "is not a pair", r);
            break;
        }
        if (na + nb + 1 > cap) {
            char *g = realloc(buf, cap = na + nb + 64);
            if (!g) {
                st = cr_err_set(err, CR_E_NOMEM, "out of memory");
                break;
            }
            buf = g;
        }
        memcpy(buf, a, na);
        memcpy(buf + na, b, nb);
        int32_t id = index_find(v, buf, na + nb);
        if (id >= 0 && !set[id]) {
            set[id] = true;
            v->score[id] = -(float)(r + 1);
        }
    }
    for (uint32_t i = 0; i < v->n; i++)
        if (!set[i])
            v->score[i] = -(float)(n + 1);
    free(set);
    free(buf);
    return st;
}

static bool is_byte_token(const char *s)
{
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' &&
           strchr("0123456789ABCDEF", s[3]) && strchr("0123456789ABCDEF", s[4]);
}

/* tokenizer.ggml.<what>_token_id from tokenizer_config's <what>_token text,
 * else config.json's <what>_token_id. */
static cr_status_t add_special(cr_gguf_writer_t *w, const vocab_t *v,
                               const json_t *tok_config, const json_t *config,
                               const char *what, const char *gguf_what,
                               int32_t *id_out, cr_err_t *err)
{
    char key[64];
    snprintf(key, sizeof key, "%s_token", what);
    const char *text = token_text(json_object_get(tok_config, key));
    int64_t id = -1;
    if (text) {
        id = index_find(v, text, strlen(text));
        if (id < 0)
            return cr_err_set(err, CR_E_INVALID, "tokenizer_config.json: %s "
                              "'%.64s' is not a token", key, text);
    } else {
        snprintf(key, sizeof key, "%s_token_id", what);
        if (!get_id(json_object_get(config, key), &id))
            return CR_OK;
        if (id < 0 || id >= v->n)
            return cr_err_set(err, CR_E_INVALID, "config.json: %s %" PRId64
                              " is not a token id", key, id);
    }
    *id_out = (int32_t)id;
    snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", gguf_what);
    return cr_gguf_writer_add_u32(w, key, (uint32_t)id, err);
}

static cr_status_t add_flags_template(cr_gguf_writer_t *w,
                                      const json_t *tok_config, cr_err_t *err)
{
    cr_status_t st = CR_OK;
    static const char *const flags[] = {"add_bos_token", "add_eos_token"};
    for (size_t i = 0; !st && i < CR_ARRAY_LEN(flags); i++) {
        const json_t *f = json_object_get(tok_config, flags[i]);
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s", flags[i]);
        if (json_is_boolean(f))
            st = cr_gguf_writer_add_bool(w, key, json_is_true(f), err);
    }
    const json_t *ct = json_object_get(tok_config, "chat_template");
    const char *tmpl = json_string_value(ct);
    for (size_t i = 0; !tmpl && i < json_array_size(ct); i++) {
        const json_t *e = json_array_get(ct, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && !strcmp(name, "default"))
            tmpl = json_string_value(json_object_get(e, "template"));
    }
    if (!st && tmpl && *tmpl)
        st = cr_gguf_writer_add_str(w, "tokenizer.chat_template", tmpl, err);
    return st;
}

/* WordPiece pieces in llama.cpp's form: a word start gets "▁", a "##"
 * continuation loses its prefix, "[...]" tokens stay as they are. */
static cr_status_t wordpiece_phantom(vocab_t *v, cr_err_t *err)
{
    for (uint32_t i = 0; i < v->n; i++) {
        const char *t = v->tok[i];
        size_t n = strlen(t);
        if (v->type[i] == T_UNUSED || (n >= 2 && t[0] == '[' && t[n - 1] == ']'))
            continue;
        char **pads = realloc(v->pads, (v->n_pads + 1) * sizeof *pads);
        if (!pads)
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        v->pads = pads;
        int r = !strncmp(t, "##", 2) ? asprintf(&v->pads[v->n_pads], "%s", t + 2)
                                     : asprintf(&v->pads[v->n_pads], "\xe2\x96\x81%s", t);
        if (r < 0)
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        v->tok[i] = v->pads[v->n_pads++];
    }
    return CR_OK;
}

/* A WordPiece (BERT) vocabulary: tokenizer.ggml.model "bert", the special
 * ids BERT names ([CLS], [SEP], [MASK], [PAD], [UNK]). */
static cr_status_t add_wordpiece(cr_gguf_writer_t *w, const json_t *tokenizer,
                                 const json_t *tok_config, const json_t *config,
                                 uint32_t vocab_size, uint32_t *n_tokens, cr_err_t *err)
{
    const json_t *model = json_object_get(tokenizer, "model");
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *added = json_object_get(tokenizer, "added_tokens");
    if (!json_is_object(vocab))
        return cr_err_set(err, CR_E_INVALID, "tokenizer.json: model.vocab is required");
    if (added && !json_is_array(added))
        return cr_err_set(err, CR_E_INVALID, "tokenizer.json: added_tokens is "
                          "not an array");
    const char *prefix = json_string_value(json_object_get(model,
                                                           "continuing_subword_prefix"));
    if (prefix && strcmp(prefix, "##"))
        return cr_err_set(err, CR_E_UNSUPPORTED, "tokenizer.json: WordPiece "
                          "continuing_subword_prefix '%.16s' (only '##' is supported)",
                          prefix);
    vocab_t v = {0};
    int32_t id = -1;
    cr_status_t st = load_tokens(&v, vocab, added, vocab_size, err);
    st = st ? st : cr_gguf_writer_add_str(w, "tokenizer.ggml.model", "bert", err);
    static const char *const specials[][2] = {{"cls", "cls"}, {"sep", "seperator"},
                                              {"mask", "mask"}, {"pad", "padding"},
                                              {"unk", "unknown"}, {"bos", "bos"},
                                              {"eos", "eos"}};
    for (size_t i = 0; !st && i < CR_ARRAY_LEN(specials); i++)
        st = add_special(w, &v, tok_config, config, specials[i][0], specials[i][1], &id,
                         err);
    if (!st && !json_object_get(tok_config, "unk_token")) {
        const char *ut = json_string_value(json_object_get(model, "unk_token"));
        id = ut ? index_find(&v, ut, strlen(ut)) : -1;
        if (id >= 0)
            st = cr_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)id,
                                        err);
    }
    st = st ? st : add_flags_template(w, tok_config, err);
    st = st ? st : wordpiece_phantom(&v, err);
    st = st ? st : cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens",
                                              (const char *const *)v.tok, v.n, err);
    st = st ? st : cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32,
                                          v.type, v.n, err);
    if (!st)
        *n_tokens = v.n;
    vocab_free(&v);
    return st;
}

cr_status_t reg_hf_vocab_add(cr_gguf_writer_t *w, const json_t *tokenizer,
                             const json_t *tok_config, const json_t *config,
                             uint32_t vocab_size, uint32_t *n_tokens,
                             cr_err_t *err)
{
    const json_t *model = json_object_get(tokenizer, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!mtype)
        return cr_err_set(err, CR_E_INVALID, "tokenizer.json: no model.type");
    if (!strcmp(mtype, "WordPiece"))
        return add_wordpiece(w, tokenizer, tok_config, config, vocab_size, n_tokens, err);
    if (strcmp(mtype, "BPE"))
        return cr_err_set(err, CR_E_UNSUPPORTED, "tokenizer.json: model type "
                          "%.32s is not supported (BPE, WordPiece are)", mtype);
    const json_t *vocab = json_object_get(model, "vocab");
    const json_t *merges = json_object_get(model, "merges");
    const json_t *added = json_object_get(tokenizer, "added_tokens");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return cr_err_set(err, CR_E_INVALID, "tokenizer.json: model.vocab and "
                          "model.merges are required");
    if (added && !json_is_array(added))
        return cr_err_set(err, CR_E_INVALID, "tokenizer.json: added_tokens is "
                          "not an array");
    pre_info_t pi = {0};
    pre_scan(json_object_get(tokenizer, "pre_tokenizer"), &pi);
    bool byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    const char *pre = NULL;
    if (pi.byte_level) {
        if (!(pre = pre_name(&pi)))
            return cr_err_set(err, CR_E_UNSUPPORTED, "tokenizer.json: "
                              "pre_tokenizer not recognised (%d Split regex%s%s%.120s, "
                              "ByteLevel use_regex %s%s%.32s); known: GPT-2's "
                              "ByteLevel, Llama 3's and Qwen2's Split", pi.n_splits,
                              pi.n_splits == 1 ? "" : "es", pi.n_splits ? ", first " : "",
                              pi.n_splits ? pi.splits[0] : "",
                              pi.byte_level_regex ? "true" : "false",
                              pi.other_type ? ", a step of type " : "",
                              pi.other_type ? pi.other_type : "");
    } else if (!byte_fallback) {
        return cr_err_set(err, CR_E_UNSUPPORTED, "tokenizer.json: a BPE model "
                          "with neither a ByteLevel pre_tokenizer nor "
                          "byte_fallback is not supported");
    }

    vocab_t v = {0};
    cr_status_t st = load_tokens(&v, vocab, added, vocab_size, err);
    if (!st && !pre)
        st = spm_scores(&v, merges, err);
    if (!st && !pre)
        for (uint32_t i = 0; i < v.n; i++)
            if (v.type[i] == T_NORMAL && is_byte_token(v.tok[i]))
                v.type[i] = T_BYTE;
    int32_t unk = -1, dummy = -1;
    if (!st)
        st = cr_gguf_writer_add_str(w, "tokenizer.ggml.model", pre ? "gpt2" : "llama",
                                    err);
    if (!st)
        st = cr_gguf_writer_add_str(w, "tokenizer.ggml.pre", pre ? pre : "default",
                                    err);
    if (!st)
        st = add_special(w, &v, tok_config, config, "bos", "bos", &dummy, err);
    if (!st)
        st = add_special(w, &v, tok_config, config, "eos", "eos", &dummy, err);
    if (!st)
        st = add_special(w, &v, tok_config, config, "unk", "unknown", &unk, err);
    if (!st)
        st = add_special(w, &v, tok_config, config, "pad", "padding", &dummy, err);
    if (!st && unk < 0 && !pre) {
        const char *ut = json_string_value(json_object_get(model, "unk_token"));
        unk = ut ? index_find(&v, ut, strlen(ut)) : -1;
        if (unk >= 0)
            st = cr_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id",
                                        (uint32_t)unk, err);
    }
    if (!st && unk >= 0 && !pre)
        v.type[unk] = T_UNKNOWN;
    if (!st && !pre)
        st = cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_space_prefix",
                                     normalizer_prepends(json_object_get(tokenizer,
                                                                         "normalizer")) ||
                                         pi.metaspace_prefix,
                                     err);
    if (!st)
        st = add_flags_template(w, tok_config, err);
    if (!st)
        st = cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens",
                                        (const char *const *)v.tok, v.n, err);
    if (!st)
        st = cr_gguf_writer_add_arr(w, "tokenizer.ggml.scores", CR_GGUF_F32,
                                    v.score, v.n, err);
    if (!st)
        st = cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32,
                                    v.type, v.n, err);
    if (!st && pre)
        st = add_bpe_merges(w, merges, err);
    if (!st)
        *n_tokens = v.n;
    vocab_free(&v);
    return st;
}

uint32_t reg_hf_vocab_count(const json_t *tokenizer)
{
    const json_t *vocab = json_object_get(json_object_get(tokenizer, "model"), "vocab");
    const json_t *added = json_object_get(tokenizer, "added_tokens");
    int64_t max_id = -1;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)vocab, k, v) {
        if (json_is_integer(v))
            max_id = CR_MAX(max_id, json_integer_value(v));
    }
    for (size_t i = 0; i < json_array_size(added); i++) {
        const json_t *id = json_object_get(json_array_get(added, i), "id");
        if (json_is_integer(id))
            max_id = CR_MAX(max_id, json_integer_value(id));
    }
    return max_id >= 0 && max_id < REG_HF_MAX_VOCAB ? (uint32_t)max_id + 1 : 0;
}
