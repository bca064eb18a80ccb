/* gguf_to_hf.c: corral-gguf-to-hf, writes a Hugging Face model folder from
 * a GGUF file: the inverse of the registry's safetensors import, so the
 * import can be tested without downloads.
 *
 *   corral-gguf-to-hf IN.gguf OUTDIR [--shards N] [--vocab-only] [--jinja-file]
 *
 * (--jinja-file: the chat template in chat_template.jinja, as newer
 * folders have it, not in tokenizer_config.json)
 * Writes config.json, model.safetensors (or N shards and
 * model.safetensors.index.json), tokenizer.json and tokenizer_config.json.
 * Architectures: llama (Q/K rows un-permuted to Hugging Face's layout),
 * qwen2, qwen3, qwen3moe (expert stacks split per expert), gemma2,
 * gemma3 (norms stored 1 + w in GGUF written as w), phi3, bert; tensors F32,
 * F16 or BF16 (quantized ones are refused).
 * Tokenizers: "llama" (SentencePiece: a byte_fallback BPE whose merges are
 * every split of a token into two tokens, in score order) and "gpt2" with
 * the pre-tokenizers gpt-2, llama-bpe/llama3 and qwen2; "bert" as
 * WordPiece. */
#include "lib/prelude.h"
#include "lib/gguf.h"

#include <jansson.h>
#include <sys/stat.h>

static const char *const llama3_re =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char *const qwen2_re =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int fail(const char *fmt, ...) CR_PRINTF(1, 2);
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("corral-gguf-to-hf: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static char *gstr(cr_gguf_str_t s)
{
    return strndup(s.ptr, (size_t)s.len);
}

static bool get_u(const cr_gguf_t *g, const char *arch, const char *suffix, uint64_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return cr_gguf_get_u64(g, key, out);
}

static int write_json(const char *dir, const char *name, json_t *v)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int rc = json_dump_file(v, path, JSON_INDENT(1) | JSON_ENSURE_ASCII);
    json_decref(v);
    return rc ? fail("cannot write %s", path) : 0;
}

/* ---- config.json ---- */

static int write_config(const cr_gguf_t *g, const char *arch, const char *dir)
{
    static const struct {
        const char *arch, *hf, *type;
    } names[] = {{"llama", "LlamaForCausalLM", "llama"},
                 {"qwen2", "Qwen2ForCausalLM", "qwen2"},
                 {"qwen3", "Qwen3ForCausalLM", "qwen3"},
                 {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe"},
                 {"gemma2", "Gemma2ForCausalLM", "gemma2"},
                 {"gemma3", "Gemma3ForCausalLM", "gemma3_text"},
                 {"phi3", "Phi3ForCausalLM", "phi3"},
                 {"bert", "BertModel", "bert"}};
    const char *hf = NULL, *type = NULL;
    for (size_t i = 0; i < CR_ARRAY_LEN(names); i++)
        if (!strcmp(arch, names[i].arch)) {
            hf = names[i].hf;
            type = names[i].type;
        }
    if (!hf)
        return fail("architecture %s has no Hugging Face form here", arch);
    uint64_t dim, layers, heads, kv, ffn, ctx = 2048, kl = 0;
    if (!get_u(g, arch, "embedding_length", &dim) || !get_u(g, arch, "block_count", &layers) ||
        !get_u(g, arch, "attention.head_count", &heads) ||
        !get_u(g, arch, "feed_forward_length", &ffn))
        return fail("missing %s.* hyperparameters", arch);
    if (!get_u(g, arch, "attention.head_count_kv", &kv))
        kv = heads;
    get_u(g, arch, "context_length", &ctx);
    char key[128];
    float eps = 1e-5f, theta = 10000.0f;
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    cr_gguf_get_f32(g, key, &eps);
    bool bert = !strcmp(arch, "bert");
    if (bert) {
        snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", arch);
        cr_gguf_get_f32(g, key, &eps);
    }
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    cr_gguf_get_f32(g, key, &theta);
    const cr_gguf_array_t *toks = NULL;
    cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks);
    json_t *c = json_object();
    json_object_set_new(c, "architectures", json_pack("[s]", hf));
    json_object_set_new(c, "model_type", json_string(type));
    json_object_set_new(c, "hidden_size", json_integer((json_int_t)dim));
    json_object_set_new(c, "num_hidden_layers", json_integer((json_int_t)layers));
    json_object_set_new(c, "num_attention_heads", json_integer((json_int_t)heads));
    json_object_set_new(c, "num_key_value_heads", json_integer((json_int_t)kv));
    json_object_set_new(c, "intermediate_size", json_integer((json_int_t)ffn));
    json_object_set_new(c, "max_position_embeddings", json_integer((json_int_t)ctx));
    json_object_set_new(c, bert ? "layer_norm_eps" : "rms_norm_eps", json_real(eps));
    uint64_t ntt = 0;
    if (bert && cr_gguf_get_u64(g, "tokenizer.ggml.token_type_count", &ntt))
        json_object_set_new(c, "type_vocab_size", json_integer((json_int_t)ntt));
    json_object_set_new(c, "rope_theta", json_real(theta));
    if (get_u(g, arch, "attention.key_length", &kl))
        json_object_set_new(c, "head_dim", json_integer((json_int_t)kl));
    if (toks)
        json_object_set_new(c, "vocab_size", json_integer((json_int_t)toks->n));
    json_object_set_new(c, "tie_word_embeddings",
                        json_boolean(!cr_gguf_tensor_find(g, "output.weight")));
    json_object_set_new(c, "torch_dtype", json_string("float32"));
    static const char *const u_keys[][2] = {
        {"attention.sliding_window", "sliding_window"},
        {"attention.sliding_window_pattern", "sliding_window_pattern"}};
    for (size_t i = 0; i < CR_ARRAY_LEN(u_keys); i++) {
        uint64_t v;
        if (get_u(g, arch, u_keys[i][0], &v))
            json_object_set_new(c, u_keys[i][1], json_integer((json_int_t)v));
    }
    static const char *const f_keys[][2] = {
        {"attn_logit_softcapping", "attn_logit_softcapping"},
        {"final_logit_softcapping", "final_logit_softcapping"},
        {"rope.freq_base_swa", "rope_local_base_freq"}};
    for (size_t i = 0; i < CR_ARRAY_LEN(f_keys); i++) {
        float v;
        snprintf(key, sizeof key, "%s.%s", arch, f_keys[i][0]);
        if (cr_gguf_get_f32(g, key, &v))
            json_object_set_new(c, f_keys[i][1], json_real(v));
    }
    uint64_t rdims = 0, orig = 0;
    const cr_gguf_tensor_t *lf = cr_gguf_tensor_find(g, "rope_factors_long.weight");
    const cr_gguf_tensor_t *sf = cr_gguf_tensor_find(g, "rope_factors_short.weight");
    uint64_t hsize = get_u(g, arch, "attention.key_length", &kl) ? kl : dim / heads;
    if (get_u(g, arch, "rope.dimension_count", &rdims) && rdims != hsize)
        json_object_set_new(c, "partial_rotary_factor",
                            json_real((double)(rdims * heads) / (double)dim));
    if (lf && sf && lf->type == CR_TYPE_F32 && sf->type == CR_TYPE_F32 &&
        get_u(g, arch, "rope.scaling.original_context_length", &orig)) {
        /* phi3 LongRoPE: the factor tensors go back into config.json */
        json_t *lj = json_array(), *sj = json_array();
        for (uint64_t i = 0; i < lf->n_elems && i < sf->n_elems; i++) {
            float a, b;
            memcpy(&a, (const char *)lf->data + 4 * i, 4);
            memcpy(&b, (const char *)sf->data + 4 * i, 4);
            json_array_append_new(lj, json_real(a));
            json_array_append_new(sj, json_real(b));
        }
        json_object_set_new(c, "original_max_position_embeddings",
                            json_integer((json_int_t)orig));
        json_object_set_new(c, "rope_scaling", json_pack("{s:s, s:o, s:o}", "type",
                                                         "longrope", "long_factor", lj,
                                                         "short_factor", sj));
    }
    char rtype[16] = "";
    float factor = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    cr_gguf_get_strz(g, key, rtype, sizeof rtype);
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    if (!strcmp(rtype, "linear") && cr_gguf_get_f32(g, key, &factor))
        json_object_set_new(c, "rope_scaling",
                            json_pack("{s:s, s:f}", "rope_type", "linear", "factor", factor));
    uint64_t ne = 0, nu = 0, fe = 0;
    if (get_u(g, arch, "expert_count", &ne) && get_u(g, arch, "expert_used_count", &nu)) {
        json_object_set_new(c, "num_experts", json_integer((json_int_t)ne));
        json_object_set_new(c, "num_experts_per_tok", json_integer((json_int_t)nu));
        if (get_u(g, arch, "expert_feed_forward_length", &fe))
            json_object_set_new(c, "moe_intermediate_size", json_integer((json_int_t)fe));
        bool norm;
        snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
        if (cr_gguf_get_bool(g, key, &norm))
            json_object_set_new(c, "norm_topk_prob", json_boolean(norm));
    }
    return write_json(dir, "config.json", c);
}

/* ---- tokenizer ---- */

static const char *tok_at(const cr_gguf_array_t *a, uint64_t i, char *buf, size_t cap)
{
    cr_gguf_str_t s;
    if (!cr_gguf_arr_get_str(a, i, &s))
        return "";
    snprintf(buf, cap, "%.*s", (int)s.len, s.ptr);
    return buf;
}

typedef struct scored {
    uint32_t id;
    float score;
} scored_t;

static int by_score(const void *a, const void *b)
{
    const scored_t *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* SentencePiece merges: every split of a normal token into two vocabulary
 * tokens, tokens in descending score. */
static json_t *spm_merges(const cr_gguf_t *g, const cr_gguf_array_t *toks,
                          const json_t *vocab)
{
    const cr_gguf_array_t *scores = NULL, *types = NULL;
    cr_gguf_get_arr(g, "tokenizer.ggml.scores", &scores);
    cr_gguf_get_arr(g, "tokenizer.ggml.token_type", &types);
    scored_t *order = calloc(toks->n, sizeof *order);
    json_t *merges = json_array();
    if (!order || !merges) {
        free(order);
        return merges;
    }
    for (uint64_t i = 0; i < toks->n; i++) {
        float s = 0;
        if (scores)
            cr_gguf_arr_get_f32(scores, i, &s);
        order[i] = (scored_t){(uint32_t)i, s};
    }
    qsort(order, toks->n, sizeof *order, by_score);
    char buf[1024], a[1024];
    for (uint64_t k = 0; k < toks->n; k++) {
        int64_t type = 1;
        if (types)
            cr_gguf_arr_get_i64(types, order[k].id, &type);
        if (type != 1)
            continue;
        const char *t = tok_at(toks, order[k].id, buf, sizeof buf);
        size_t n = strlen(t);
        for (size_t cut = 1; cut < n; cut++) {
            if (((uint8_t)t[cut] & 0xc0) == 0x80)
                continue; /* inside a UTF-8 character */
            memcpy(a, t, cut);
            a[cut] = '\0';
            if (json_object_get(vocab, a) && json_object_get(vocab, t + cut))
                json_array_append_new(merges, json_pack("[ss]", a, t + cut));
        }
    }
    free(order);
    return merges;
}

static json_t *pre_tokenizer_for(const char *pre)
{
    if (!strcmp(pre, "gpt-2") || !strcmp(pre, "gpt2"))
        return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0,
                         "trim_offsets", 1, "use_regex", 1);
    const char *re = !strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3") ? llama3_re
                     : !strcmp(pre, "qwen2")                                ? qwen2_re
                                                                            : NULL;
    if (!re)
        return NULL;
    return json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b, s:b, s:b}]}", "type",
                     "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", re,
                     "behavior", "Isolated", "invert", 0, "type", "ByteLevel",
                     "add_prefix_space", 0, "trim_offsets", 0, "use_regex", 0);
}

/* A GGUF token as tokenizer.json spells it: WordPiece ("bert") pieces go
 * from llama.cpp's "▁word" / "cont" / "[SPECIAL]" back to "word" / "##cont"
 * / "[SPECIAL]"; others are the same. */
static const char *hf_piece(bool wpm, const char *t, char *out, size_t cap)
{
    if (!wpm)
        return t;
    size_t n = strlen(t);
    if (!strncmp(t, "\xe2\x96\x81", 3))
        snprintf(out, cap, "%s", t + 3);
    else if (n >= 2 && t[0] == '[' && t[n - 1] == ']')
        snprintf(out, cap, "%s", t);
    else
        snprintf(out, cap, "##%s", t);
    return out;
}

static int write_tokenizer(const cr_gguf_t *g, const char *dir, bool jinja_file)
{
    char model[32] = "", pre[64] = "default", buf[1024];
    cr_gguf_get_strz(g, "tokenizer.ggml.model", model, sizeof model);
    cr_gguf_get_strz(g, "tokenizer.ggml.pre", pre, sizeof pre);
    const cr_gguf_array_t *toks = NULL, *types = NULL, *merges_in = NULL;
    if (!cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks))
        return fail("no tokenizer.ggml.tokens");
    cr_gguf_get_arr(g, "tokenizer.ggml.token_type", &types);
    bool spm = !strcmp(model, "llama"), wpm = !strcmp(model, "bert");
    if (!spm && !wpm && strcmp(model, "gpt2"))
        return fail("tokenizer model %s has no tokenizer.json form here", model);
    json_t *vocab = json_object(), *added = json_array();
    for (uint64_t i = 0; i < toks->n; i++) {
        int64_t type = 1;
        if (types)
            cr_gguf_arr_get_i64(types, i, &type);
        const char *t = tok_at(toks, i, buf, sizeof buf);
        char piece[1100];
        t = hf_piece(wpm, t, piece, sizeof piece);
        if (json_object_get(vocab, t))
            return fail("token %" PRIu64 " '%s' appears twice", i, t);
        json_object_set_new(vocab, t, json_integer((json_int_t)i));
        if (type == 2 || type == 3 || type == 4 || type == 5)
            json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}",
                                                   "id", (json_int_t)i, "content", t,
                                                   "single_word", 0, "lstrip", 0, "rstrip", 0,
                                                   "normalized", 0, "special", type != 4));
    }
    json_t *m = json_pack("{s:s, s:o}", "type", "BPE", "vocab", vocab);
    json_t *root = json_pack("{s:s, s:o}", "version", "1.0", "added_tokens", added);
    if (wpm) {
        uint64_t unk = 100;
        cr_gguf_get_u64(g, "tokenizer.ggml.unknown_token_id", &unk);
        json_object_set_new(m, "type", json_string("WordPiece"));
        json_object_set_new(m, "continuing_subword_prefix", json_string("##"));
        json_object_set_new(m, "max_input_chars_per_word", json_integer(100));
        if (unk < toks->n) {
            char piece[1100];
            const char *u = hf_piece(true, tok_at(toks, unk, buf, sizeof buf), piece,
                                     sizeof piece);
            json_object_set_new(m, "unk_token", json_string(u));
        }
        json_object_set_new(root, "normalizer",
                            json_pack("{s:s, s:b, s:b, s:n, s:b}", "type", "BertNormalizer",
                                      "clean_text", 1, "handle_chinese_chars", 1,
                                      "strip_accents", "lowercase", 1));
        json_object_set_new(root, "pre_tokenizer", json_pack("{s:s}", "type",
                                                             "BertPreTokenizer"));
    } else if (spm) {
        json_object_set_new(m, "merges", spm_merges(g, toks, vocab));
        json_object_set_new(m, "byte_fallback", json_true());
        json_object_set_new(m, "fuse_unk", json_true());
        uint64_t unk = 0;
        cr_gguf_get_u64(g, "tokenizer.ggml.unknown_token_id", &unk);
        if (unk < toks->n)
            json_object_set_new(m, "unk_token", json_string(tok_at(toks, unk, buf, sizeof buf)));
        bool prefix = true;
        cr_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &prefix);
        json_t *rep = json_pack("{s:s, s:{s:s}, s:s}", "type", "Replace", "pattern", "String",
                                " ", "content", "\xe2\x96\x81");
        json_t *nz = prefix ? json_pack("{s:s, s:[{s:s, s:s}, o]}", "type", "Sequence",
                                        "normalizers", "type", "Prepend", "prepend",
                                        "\xe2\x96\x81", rep)
                            : rep;
        json_object_set_new(root, "normalizer", nz);
        json_object_set_new(root, "pre_tokenizer", json_null());
    } else {
        json_t *pt = pre_tokenizer_for(pre);
        if (!pt)
            return fail("pre-tokenizer %s has no tokenizer.json form here", pre);
        if (!cr_gguf_get_arr(g, "tokenizer.ggml.merges", &merges_in))
            return fail("no tokenizer.ggml.merges");
        json_t *ms = json_array();
        for (uint64_t i = 0; i < merges_in->n; i++)
            json_array_append_new(ms, json_string(tok_at(merges_in, i, buf, sizeof buf)));
        json_object_set_new(m, "merges", ms);
        json_object_set_new(root, "normalizer", json_null());
        json_object_set_new(root, "pre_tokenizer", pt);
    }
    json_object_set_new(root, "model", m);
    if (write_json(dir, "tokenizer.json", root))
        return 1;

    json_t *tc = json_object();
    static const char *const specials[][2] = {
        {"bos", "bos"},         {"eos", "eos"},   {"unknown", "unk"}, {"padding", "pad"},
        {"cls", "cls"},         {"seperator", "sep"}, {"mask", "mask"}};
    for (size_t i = 0; i < CR_ARRAY_LEN(specials); i++) {
        char key[96];
        uint64_t id;
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", specials[i][0]);
        if (cr_gguf_get_u64(g, key, &id) && id < toks->n) {
            snprintf(key, sizeof key, "%s_token", specials[i][1]);
            char piece[1100];
            json_object_set_new(tc, key, json_string(hf_piece(wpm, tok_at(toks, id, buf,
                                                                          sizeof buf),
                                                              piece, sizeof piece)));
        }
    }
    static const char *const flags[] = {"add_bos_token", "add_eos_token"};
    for (size_t i = 0; i < CR_ARRAY_LEN(flags); i++) {
        char key[96];
        bool b;
        snprintf(key, sizeof key, "tokenizer.ggml.%s", flags[i]);
        if (cr_gguf_get_bool(g, key, &b))
            json_object_set_new(tc, flags[i], json_boolean(b));
    }
    cr_gguf_str_t ct;
    if (cr_gguf_get_str(g, "tokenizer.chat_template", &ct)) {
        char *s = gstr(ct);
        if (jinja_file) {
            char path[1024];
            snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
            FILE *f = fopen(path, "wb");
            if (!f || fputs(s, f) < 0) {
                free(s);
                if (f)
                    fclose(f);
                return fail("cannot write %s", path);
            }
            fclose(f);
        } else {
            json_object_set_new(tc, "chat_template", json_string(s));
        }
        free(s);
    }
    return write_json(dir, "tokenizer_config.json", tc);
}

/* ---- tensors ---- */

/* The Hugging Face name of a GGUF tensor, or false. */
static bool bert_name(const char *gn, char *out, size_t cap)
{
    static const char *const top[][2] = {
        {"token_embd.weight", "embeddings.word_embeddings.weight"},
        {"token_types.weight", "embeddings.token_type_embeddings.weight"},
        {"position_embd.weight", "embeddings.position_embeddings.weight"},
        {"token_embd_norm.weight", "embeddings.LayerNorm.weight"},
        {"token_embd_norm.bias", "embeddings.LayerNorm.bias"}};
    for (size_t i = 0; i < CR_ARRAY_LEN(top); i++)
        if (!strcmp(gn, top[i][0])) {
            snprintf(out, cap, "%s", top[i][1]);
            return true;
        }
    static const char *const per[][2] = {
        {"attn_q", "attention.self.query"},
        {"attn_k", "attention.self.key"},
        {"attn_v", "attention.self.value"},
        {"attn_output", "attention.output.dense"},
        {"attn_output_norm", "attention.output.LayerNorm"},
        {"ffn_up", "intermediate.dense"},
        {"ffn_down", "output.dense"},
        {"layer_output_norm", "output.LayerNorm"}};
    int l, used = 0;
    char part[64], kind[16];
    if (sscanf(gn, "blk.%d.%63[a-z_].%15[a-z]%n", &l, part, kind, &used) != 3 || gn[used])
        return false;
    for (size_t i = 0; i < CR_ARRAY_LEN(per); i++)
        if (!strcmp(part, per[i][0])) {
            snprintf(out, cap, "encoder.layer.%d.%s.%s", l, per[i][1], kind);
            return true;
        }
    return false;
}

static bool hf_name(const char *gn, const char *arch, char *out, size_t cap)
{
    if (!strcmp(arch, "bert"))
        return bert_name(gn, out, cap);
    bool gemma = !strncmp(arch, "gemma", 5), phi3 = !strcmp(arch, "phi3");
    static const char *const top[][2] = {{"token_embd.weight", "model.embed_tokens.weight"},
                                         {"output_norm.weight", "model.norm.weight"},
                                         {"output.weight", "lm_head.weight"}};
    for (size_t i = 0; i < CR_ARRAY_LEN(top); i++)
        if (!strcmp(gn, top[i][0])) {
            snprintf(out, cap, "%s", top[i][1]);
            return true;
        }
    static const char *const per[][2] = {
        {"attn_norm", "input_layernorm"},      {"attn_q", "self_attn.q_proj"},
        {"attn_k", "self_attn.k_proj"},        {"attn_v", "self_attn.v_proj"},
        {"attn_output", "self_attn.o_proj"},   {"attn_q_norm", "self_attn.q_norm"},
        {"attn_k_norm", "self_attn.k_norm"},   {"ffn_norm", "post_attention_layernorm"},
        {"ffn_gate", "mlp.gate_proj"},         {"ffn_up", "mlp.up_proj"},
        {"ffn_down", "mlp.down_proj"},         {"ffn_gate_inp", "mlp.gate"}};
    int l, used = 0;
    char part[64], kind[16];
    if (sscanf(gn, "blk.%d.%63[a-z_].%15[a-z]%n", &l, part, kind, &used) != 3 ||
        gn[used])
        return false;
    static const char *const gemma_per[][2] = {
        {"post_attention_norm", "post_attention_layernorm"},
        {"ffn_norm", "pre_feedforward_layernorm"},
        {"post_ffw_norm", "post_feedforward_layernorm"}};
    for (size_t i = 0; gemma && i < CR_ARRAY_LEN(gemma_per); i++)
        if (!strcmp(part, gemma_per[i][0])) {
            snprintf(out, cap, "model.layers.%d.%s.%s", l, gemma_per[i][1], kind);
            return true;
        }
    if (phi3 && (!strcmp(part, "attn_qkv") || !strcmp(part, "ffn_up"))) {
        snprintf(out, cap, "model.layers.%d.%s.%s", l,
                 part[0] == 'a' ? "self_attn.qkv_proj" : "mlp.gate_up_proj", kind);
        return true;
    }
    for (size_t i = 0; i < CR_ARRAY_LEN(per); i++)
        if (!strcmp(part, per[i][0])) {
            snprintf(out, cap, "model.layers.%d.%s.%s", l, per[i][1], kind);
            return true;
        }
    return false;
}

typedef struct out_tensor {
    char name[160];
    const char *dtype;   /* "F32", "F16", "BF16" */
    const uint8_t *data; /* into the GGUF mapping */
    uint64_t size_bytes;
    uint32_t n_dims;
    uint64_t shape[4];   /* Hugging Face order: rows first */
    int64_t heads;       /* > 0: un-permute rows in this many heads */
    bool minus_one;      /* gemma norms: GGUF's 1 + w back to w (F32) */
} out_tensor_t;

static int write_shard(const char *path, const out_tensor_t *ts, size_t n)
{
    json_t *h = json_object();
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *shape = json_array();
        for (uint32_t d = 0; d < ts[i].n_dims; d++)
            json_array_append_new(shape, json_integer((json_int_t)ts[i].shape[d]));
        json_object_set_new(h, ts[i].name,
                            json_pack("{s:s, s:o, s:[I, I]}", "dtype", ts[i].dtype, "shape",
                                      shape, "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + ts[i].size_bytes)));
        off += ts[i].size_bytes;
    }
    json_object_set_new(h, "__metadata__", json_pack("{s:s}", "format", "pt"));
    char *text = json_dumps(h, JSON_COMPACT);
    json_decref(h);
    FILE *f = fopen(path, "wb");
    if (!f || !text) {
        free(text);
        if (f)
            fclose(f);
        return fail("cannot write %s", path);
    }
    size_t len = strlen(text), padded = (len + 7) & ~(size_t)7;
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    fwrite(lenb, 1, 8, f);
    fwrite(text, 1, len, f);
    for (size_t i = len; i < padded; i++)
        fputc(' ', f);
    free(text);
    for (size_t i = 0; i < n; i++) {
        const uint8_t *d = ts[i].data;
        if (ts[i].minus_one) {
            /* exact: the weights lie in [0.5, 2] (Sterbenz) */
            for (uint64_t k = 0; k < ts[i].size_bytes / 4; k++) {
                float v;
                memcpy(&v, d + 4 * k, 4);
                v -= 1.0f;
                fwrite(&v, 4, 1, f);
            }
            continue;
        }
        if (ts[i].heads <= 0) {
            fwrite(d, 1, (size_t)ts[i].size_bytes, f);
            continue;
        }
        /* HF row h*hd + j*hd/2 + i is GGUF row h*hd + 2i + j */
        uint64_t rows = ts[i].shape[0], rb = ts[i].size_bytes / rows;
        uint64_t hd = rows / (uint64_t)ts[i].heads, half = hd / 2;
        for (uint64_t r = 0; r < rows; r++) {
            uint64_t head = r / hd, jj = (r % hd) / half, ii = (r % hd) % half;
            fwrite(d + (head * hd + 2 * ii + jj) * rb, 1, (size_t)rb, f);
        }
    }
    return fclose(f) ? fail("cannot write %s", path) : 0;
}

/* Adds GGUF tensor t (or, for a [E][rows][cols] expert stack, one tensor
 * per expert) to ts at *n. */
static int add_out(const cr_gguf_tensor_t *t, const char *arch, out_tensor_t *ts, size_t *n,
                   size_t cap)
{
    const char *dt = t->type == CR_TYPE_F32 ? "F32" : t->type == CR_TYPE_F16 ? "F16" : "BF16";
    int l = 0, used = 0;
    char part[64];
    if (t->n_dims == 3 && sscanf(t->name, "blk.%d.ffn_%63[a-z]_exps.weight%n", &l, part,
                                 &used) == 2 && !t->name[used]) {
        uint64_t per = t->size_bytes / t->ne[2];
        for (uint64_t e = 0; e < t->ne[2]; e++) {
            if (*n >= cap)
                return fail("too many tensors");
            out_tensor_t *o = &ts[(*n)++];
            *o = (out_tensor_t){.dtype = dt, .data = (const uint8_t *)t->data + e * per,
                                .size_bytes = per, .n_dims = 2,
                                .shape = {t->ne[1], t->ne[0]}};
            snprintf(o->name, sizeof o->name, "model.layers.%d.mlp.experts.%" PRIu64
                     ".%s_proj.weight", l, e, part);
        }
        return 0;
    }
    if (*n >= cap)
        return fail("too many tensors");
    out_tensor_t *o = &ts[(*n)++];
    *o = (out_tensor_t){.dtype = dt, .data = t->data, .size_bytes = t->size_bytes,
                        .n_dims = t->n_dims};
    for (uint32_t d = 0; d < t->n_dims; d++)
        o->shape[d] = t->ne[t->n_dims - 1 - d];
    if (!hf_name(t->name, arch, o->name, sizeof o->name))
        return fail("tensor %s has no Hugging Face name here", t->name);
    o->minus_one = !strncmp(arch, "gemma", 5) && t->type == CR_TYPE_F32 &&
                   t->n_dims == 1 && strstr(t->name, "norm.weight");
    return 0;
}

static int write_tensors(const cr_gguf_t *g, const char *arch, const char *dir, int shards)
{
    size_t n_in = cr_gguf_tensor_count(g), n = 0, cap = 1 << 16;
    out_tensor_t *ts = calloc(cap, sizeof *ts);
    if (!ts)
        return fail("out of memory");
    uint64_t heads = 0, kv = 0;
    get_u(g, arch, "attention.head_count", &heads);
    if (!get_u(g, arch, "attention.head_count_kv", &kv))
        kv = heads;
    bool llama = !strcmp(arch, "llama");
    for (size_t i = 0; i < n_in; i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (!strncmp(t->name, "rope_factors_", 13))
            continue; /* in config.json's rope_scaling */
        if (t->type != CR_TYPE_F32 && t->type != CR_TYPE_F16 && t->type != CR_TYPE_BF16) {
            free(ts);
            return fail("tensor %s is quantized; only F32, F16, BF16 are written", t->name);
        }
        size_t at = n;
        if (add_out(t, arch, ts, &n, cap)) {
            free(ts);
            return 1;
        }
        if (llama && strstr(t->name, ".attn_q.weight"))
            ts[at].heads = (int64_t)heads;
        if (llama && strstr(t->name, ".attn_k.weight"))
            ts[at].heads = (int64_t)kv;
    }
    char path[1024];
    if (shards <= 1) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        int rc = write_shard(path, ts, n);
        free(ts);
        return rc;
    }
    json_t *map = json_object();
    size_t per = (n + (size_t)shards - 1) / (size_t)shards;
    int rc = 0;
    for (int s = 0; s < shards && !rc; s++) {
        size_t from = (size_t)s * per, to = CR_MIN(n, from + per);
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        rc = write_shard(path, ts + from, to > from ? to - from : 0);
        for (size_t i = from; i < to; i++)
            json_object_set_new(map, ts[i].name, json_string(name));
    }
    free(ts);
    if (rc) {
        json_decref(map);
        return rc;
    }
    return write_json(dir, "model.safetensors.index.json",
                      json_pack("{s:{}, s:o}", "metadata", "weight_map", map));
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: corral-gguf-to-hf IN.gguf OUTDIR [--shards N] "
                        "[--vocab-only] [--jinja-file]\n");
        return 2;
    }
    int shards = 1;
    bool vocab_only = false, jinja_file = false;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--shards") && i + 1 < argc)
            shards = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--vocab-only"))
            vocab_only = true;
        else if (!strcmp(argv[i], "--jinja-file"))
            jinja_file = true;
        else
            return fail("unknown option %s", argv[i]);
    }
    if (shards < 1 || shards > 64)
        return fail("--shards must be 1..64");
    cr_gguf_t *g = NULL;
    cr_err_t err;
    if (cr_gguf_open(argv[1], &g, &err))
        return fail("%s: %s", argv[1], err.msg);
    mkdir(argv[2], 0755);
    const char *arch = cr_gguf_arch(g);
    int rc = write_tokenizer(g, argv[2], jinja_file);
    if (!rc && !vocab_only)
        rc = write_config(g, arch, argv[2]);
    if (!rc && !vocab_only)
        rc = write_tensors(g, arch, argv[2], shards);
    cr_gguf_close(&g);
    return rc;
}
