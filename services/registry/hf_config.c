/* hf_config.c: config.json to GGUF hyperparameters (see hf_config.h). */
#include "lib/prelude.h"
#include "services/registry/hf_config.h"
#include "services/registry/hf_vocab.h"

#include <math.h>

#define MAX_LAYERS 1024
#define MAX_DIM (1 << 20)
#define MAX_EXPERTS 1024

static const struct {
    const char *hf, *gguf;
    unsigned flags;
} archs[] = {
    {"LlamaForCausalLM", "llama", REG_HF_PERMUTE_QK},
    {"MistralForCausalLM", "llama", REG_HF_PERMUTE_QK},
    {"Qwen2ForCausalLM", "qwen2", REG_HF_QKV_BIAS},
    {"Qwen3ForCausalLM", "qwen3", REG_HF_QK_NORM},
    {"Qwen3MoeForCausalLM", "qwen3moe", REG_HF_QK_NORM | REG_HF_MOE},
    {"Gemma2ForCausalLM", "gemma2", REG_HF_GEMMA | REG_HF_TIED},
    {"Gemma3ForCausalLM", "gemma3",
     REG_HF_GEMMA | REG_HF_QK_NORM | REG_HF_TIED | REG_HF_CUT_VOCAB},
    {"Phi3ForCausalLM", "phi3", REG_HF_FUSED},
    {"BertModel", "bert", REG_HF_BERT},
};

static cr_status_t get_int(const json_t *cfg, const char *key, int64_t def,
                           int64_t lo, int64_t hi, int64_t *out, cr_err_t *err)
{
    const json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        if (def < 0)
            return cr_err_set(err, CR_E_INVALID, "config.json: %s is missing", key);
        *out = def;
        return CR_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo ||
        json_integer_value(v) > hi)
        return cr_err_set(err, CR_E_INVALID, "config.json: %s must be an integer "
                          "in %" PRId64 "..%" PRId64, key, lo, hi);
    *out = json_integer_value(v);
    return CR_OK;
}

static cr_status_t get_num(const json_t *cfg, const char *key, double def,
                           double *out, cr_err_t *err)
{
    const json_t *v = json_object_get(cfg, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return CR_OK;
    }
    if (!json_is_number(v) || !(json_number_value(v) > 0))
        return cr_err_set(err, CR_E_INVALID, "config.json: %s must be a positive "
                          "number", key);
    *out = json_number_value(v);
    return CR_OK;
}

cr_status_t reg_hf_hparams_read(const json_t *cfg, reg_hf_hparams_t *hp, cr_err_t *err)
{
    const char *hf = json_string_value(json_array_get(
        json_object_get(cfg, "architectures"), 0));
    if (!hf)
        return cr_err_set(err, CR_E_INVALID, "config.json: no architectures");
    for (size_t i = 0; i < CR_ARRAY_LEN(archs); i++)
        if (!strcmp(hf, archs[i].hf)) {
            hp->arch = archs[i].gguf;
            hp->flags = archs[i].flags;
        }
    if (!hp->arch)
        return cr_err_set(err, CR_E_UNSUPPORTED, "config.json: architecture %.64s "
                          "is not supported (LlamaForCausalLM, MistralForCausalLM, "
                          "Qwen2ForCausalLM, Qwen3ForCausalLM, Qwen3MoeForCausalLM, "
                          "Gemma2ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM, "
                          "BertModel are)", hf);
    cr_status_t st;
    if ((st = get_int(cfg, "hidden_size", -1, 1, MAX_DIM, &hp->dim, err)) ||
        (st = get_int(cfg, "num_hidden_layers", -1, 1, MAX_LAYERS, &hp->n_layers, err)) ||
        (st = get_int(cfg, "num_attention_heads", -1, 1, 4096, &hp->n_heads, err)) ||
        (st = get_int(cfg, "num_key_value_heads", hp->n_heads, 1, hp->n_heads, &hp->n_kv,
                      err)) ||
        (st = get_int(cfg, "intermediate_size", -1, 1, MAX_DIM, &hp->ffn, err)) ||
        (st = get_int(cfg, "max_position_embeddings", 2048, 1, INT32_MAX, &hp->ctx, err)) ||
        (st = get_int(cfg, "head_dim", hp->dim / hp->n_heads, 1, MAX_DIM, &hp->head_dim,
                      err)) ||
        (st = get_int(cfg, "vocab_size", 0, 0, REG_HF_MAX_VOCAB, &hp->vocab, err)) ||
        (st = get_num(cfg, (hp->flags & REG_HF_BERT) ? "layer_norm_eps" : "rms_norm_eps",
                      (hp->flags & REG_HF_BERT) ? 1e-12 : 1e-6, &hp->eps, err)) ||
        (st = get_int(cfg, "type_vocab_size", 2, 1, 1024, &hp->n_token_types, err)) ||
        (st = get_num(cfg, "rope_theta", 10000.0, &hp->rope_base, err)))
        return st;
    if (hp->head_dim < 1)
        return cr_err_set(err, CR_E_INVALID, "config.json: hidden_size %" PRId64 " over "
                          "%" PRId64 " heads leaves no head_dim", hp->dim, hp->n_heads);
    hp->rope_dims = hp->head_dim;
    const json_t *prf = json_object_get(cfg, "partial_rotary_factor");
    if (prf && !json_is_null(prf)) {
        double f = json_number_value(prf);
        if (!json_is_number(prf) || !(f > 0) || f > 1)
            return cr_err_set(err, CR_E_INVALID, "config.json: partial_rotary_factor "
                              "must be in (0, 1]");
        /* llama.cpp: int(factor * hidden_size) // heads; a product a hair
         * below a whole number (0.4 * 2560) counts as that number */
        double x = f * (double)hp->dim, r = nearbyint(x);
        hp->rope_dims = (int64_t)(fabs(x - r) < 1e-6 ? r : floor(x)) / hp->n_heads;
        if (hp->rope_dims < 2 || hp->rope_dims > hp->head_dim || hp->rope_dims % 2)
            return cr_err_set(err, CR_E_INVALID, "config.json: partial_rotary_factor "
                              "%g gives %" PRId64 " rotated dims of %" PRId64, f,
                              hp->rope_dims, hp->head_dim);
    }
    if (hp->n_heads % hp->n_kv)
        return cr_err_set(err, CR_E_INVALID, "config.json: num_attention_heads "
                          "%" PRId64 " is not a multiple of num_key_value_heads %"
                          PRId64, hp->n_heads, hp->n_kv);
    if ((hp->flags & REG_HF_PERMUTE_QK) && hp->head_dim % 2)
        return cr_err_set(err, CR_E_INVALID, "config.json: head_dim %" PRId64
                          " is odd", hp->head_dim);
    hp->tied = json_is_true(json_object_get(cfg, "tie_word_embeddings"));
    if (hp->flags & REG_HF_MOE) {
        if ((st = get_int(cfg, "num_experts", -1, 1, MAX_EXPERTS, &hp->n_expert, err)) ||
            (st = get_int(cfg, "num_experts_per_tok", -1, 1, hp->n_expert,
                          &hp->n_expert_used, err)) ||
            (st = get_int(cfg, "moe_intermediate_size", -1, 1, MAX_DIM, &hp->expert_ffn,
                          err)))
            return st;
    }
    return CR_OK;
}

#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, hp->arch), key)

/* One LongRoPE factor list of rope_scaling: n floats, kept in *out. */
static cr_status_t rope_factors(const json_t *rs, const char *field, int64_t n,
                                float **out, cr_err_t *err)
{
    const json_t *a = json_object_get(rs, field);
    if (json_array_size(a) != (size_t)n)
        return cr_err_set(err, CR_E_INVALID, "config.json: rope_scaling.%s must hold "
                          "%" PRId64 " numbers (rotated dims / 2)", field, n);
    if (!(*out = malloc((size_t)n * sizeof **out)))
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v) || !(json_number_value(v) > 0))
            return cr_err_set(err, CR_E_INVALID, "config.json: rope_scaling.%s[%" PRId64
                              "] is not a positive number", field, i);
        (*out)[i] = (float)json_number_value(v);
    }
    return CR_OK;
}

/* phi3's LongRoPE ("longrope", formerly "su"): the long and short factor
 * tensors, the original context and llama.cpp's attention factor
 * sqrt(1 + ln(scale) / ln(original)), scale = context / original. */
static cr_status_t add_longrope(cr_gguf_writer_t *w, const json_t *cfg, const json_t *rs,
                                const reg_hf_hparams_t *hp, reg_hf_rope_t *c,
                                cr_err_t *err)
{
    char key[96];
    int64_t orig = 0, half = hp->rope_dims / 2;
    const json_t *o = json_object_get(rs, "original_max_position_embeddings");
    cr_status_t st = get_int(o ? rs : cfg, "original_max_position_embeddings", -1, 1,
                             INT32_MAX, &orig, err);
    st = st ? st : rope_factors(rs, "long_factor", half, &c->long_f, err);
    st = st ? st : rope_factors(rs, "short_factor", half, &c->short_f, err);
    if (st)
        return st;
    double scale = (double)hp->ctx / (double)orig;
    double attn = scale > 1.0 ? sqrt(1.0 + log(scale) / log((double)orig)) : 1.0;
    st = cr_gguf_writer_add_u32(w, KEY("rope.scaling.original_context_length"),
                                (uint32_t)orig, err);
    st = st ? st : cr_gguf_writer_add_f32(w, KEY("rope.scaling.attn_factor"), (float)attn,
                                          err);
    uint64_t ne[1] = {(uint64_t)half};
    st = st ? st : cr_gguf_writer_add_tensor(w, "rope_factors_long.weight", 1, ne,
                                             CR_TYPE_F32, c->long_f, NULL, err);
    return st ? st : cr_gguf_writer_add_tensor(w, "rope_factors_short.weight", 1, ne,
                                               CR_TYPE_F32, c->short_f, NULL, err);
}

/* Llama 3.1's rope scaling as the tensor rope_freqs.weight, computed as
 * llama.cpp's converter does: per rotated pair, base frequency f =
 * theta^(-2i/d) and wavelength 2 pi / f; factor 1 below original /
 * high_freq_factor, `factor` above original / low_freq_factor, and
 * 1 / ((1 - s) / factor + s) between, s = (original / wavelength - low) /
 * (high - low). */
static cr_status_t add_llama3_rope(cr_gguf_writer_t *w, const json_t *rs,
                                   const reg_hf_hparams_t *hp, reg_hf_rope_t *c,
                                   cr_err_t *err)
{
    double factor, low, high, orig;
    cr_status_t st;
    if ((st = get_num(rs, "factor", 8.0, &factor, err)) ||
        (st = get_num(rs, "low_freq_factor", 1.0, &low, err)) ||
        (st = get_num(rs, "high_freq_factor", 4.0, &high, err)) ||
        (st = get_num(rs, "original_max_position_embeddings", 8192.0, &orig, err)))
        return cr_err_wrap(err, "rope_scaling");
    if (high == low)
        return cr_err_set(err, CR_E_INVALID, "config.json: rope_scaling has "
                          "high_freq_factor = low_freq_factor");
    int64_t half = hp->rope_dims / 2;
    if (!(c->freqs = malloc((size_t)half * sizeof *c->freqs)))
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    double lo_wave = orig / low, hi_wave = orig / high;
    for (int64_t i = 0; i < half; i++) {
        /* f in float, as the converter's float32 torch tensor */
        float f = 1.0f / powf((float)hp->rope_base, (float)(2 * i) / (float)hp->rope_dims);
        double wave = 2.0 * M_PI / (double)f;
        double r;
        if (wave < hi_wave) {
            r = 1.0;
        } else if (wave > lo_wave) {
            r = factor;
        } else {
            double sm = (orig / wave - low) / (high - low);
            r = 1.0 / ((1.0 - sm) / factor + sm);
        }
        c->freqs[i] = (float)r;
    }
    uint64_t ne[1] = {(uint64_t)half};
    return cr_gguf_writer_add_tensor(w, "rope_freqs.weight", 1, ne, CR_TYPE_F32,
                                     c->freqs, NULL, err);
}

cr_status_t reg_hf_rope_add(cr_gguf_writer_t *w, const json_t *cfg,
                            const reg_hf_hparams_t *hp, reg_hf_rope_t *c,
                            cr_err_t *err)
{
    const json_t *rs = json_object_get(cfg, "rope_scaling");
    if (!rs || json_is_null(rs))
        return CR_OK;
    const char *type = json_string_value(json_object_get(rs, "rope_type"));
    if (!type)
        type = json_string_value(json_object_get(rs, "type"));
    double factor = 0;
    cr_status_t st = get_num(rs, "factor", 0, &factor, err);
    if (st)
        return cr_err_wrap(err, "rope_scaling");
    char key[96];
    if (type && !strcmp(type, "default"))
        return CR_OK;
    if (type && (!strcmp(type, "longrope") || !strcmp(type, "su")) &&
        (hp->flags & REG_HF_FUSED))
        return add_longrope(w, cfg, rs, hp, c, err);
    if (type && !strcmp(type, "llama3") && (hp->flags & REG_HF_PERMUTE_QK))
        return add_llama3_rope(w, rs, hp, c, err);
    if (type && !strcmp(type, "linear") && factor > 0) {
        st = cr_gguf_writer_add_str(w, KEY("rope.scaling.type"), "linear", err);
        return st ? st : cr_gguf_writer_add_f32(w, KEY("rope.scaling.factor"),
                                                (float)factor, err);
    }
    if (type && !strcmp(type, "yarn") && factor > 0) {
        int64_t orig = 0;
        if ((st = get_int(rs, "original_max_position_embeddings", -1, 1, INT32_MAX,
                          &orig, err)))
            return cr_err_wrap(err, "rope_scaling");
        st = cr_gguf_writer_add_str(w, KEY("rope.scaling.type"), "yarn", err);
        st = st ? st : cr_gguf_writer_add_f32(w, KEY("rope.scaling.factor"),
                                              (float)factor, err);
        return st ? st : cr_gguf_writer_add_u32(w, KEY("rope.scaling.original_context_length"),
                                                (uint32_t)orig, err);
    }
    return cr_err_set(err, CR_E_UNSUPPORTED, "config.json: rope_scaling type "
                      "%.32s is not supported (linear, yarn, llama3 for llama, "
                      "longrope for phi3 are)",
                      type ? type : "(none)");
}

/* A number of config.json as an F32 key, if present and not null. */
static cr_status_t opt_f32(cr_gguf_writer_t *w, const json_t *cfg, const char *field,
                           const char *key, cr_err_t *err)
{
    const json_t *v = json_object_get(cfg, field);
    if (!v || json_is_null(v))
        return CR_OK;
    if (!json_is_number(v))
        return cr_err_set(err, CR_E_INVALID, "config.json: %s is not a number", field);
    return cr_gguf_writer_add_f32(w, key, (float)json_number_value(v), err);
}

static cr_status_t opt_u32(cr_gguf_writer_t *w, const json_t *cfg, const char *field,
                           const char *key, cr_err_t *err)
{
    const json_t *v = json_object_get(cfg, field);
    if (!v || json_is_null(v))
        return CR_OK;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > INT32_MAX)
        return cr_err_set(err, CR_E_INVALID, "config.json: %s is not a count", field);
    return cr_gguf_writer_add_u32(w, key, (uint32_t)json_integer_value(v), err);
}

/* gemma2/3: sliding window and its pattern, soft-capping, the local rope
 * base (llama.cpp's key names). */
static cr_status_t add_gemma_keys(cr_gguf_writer_t *w, const json_t *cfg,
                                  const reg_hf_hparams_t *hp, cr_err_t *err)
{
    char key[96];
    cr_status_t st = opt_u32(w, cfg, "sliding_window", KEY("attention.sliding_window"), err);
    st = st ? st : opt_u32(w, cfg, "sliding_window_pattern",
                           KEY("attention.sliding_window_pattern"), err);
    st = st ? st : opt_f32(w, cfg, "attn_logit_softcapping", KEY("attn_logit_softcapping"),
                           err);
    st = st ? st : opt_f32(w, cfg, "final_logit_softcapping",
                           KEY("final_logit_softcapping"), err);
    return st ? st : opt_f32(w, cfg, "rope_local_base_freq", KEY("rope.freq_base_swa"), err);
}

cr_status_t reg_hf_hparams_add(cr_gguf_writer_t *w, const json_t *cfg,
                               const reg_hf_hparams_t *hp, cr_type_t ftype, cr_err_t *err)
{
    char key[96];
    const char *name = json_string_value(json_object_get(cfg, "_name_or_path"));
    if (name && strrchr(name, '/'))
        name = strrchr(name, '/') + 1;
    cr_status_t st = cr_gguf_writer_add_str(w, "general.architecture", hp->arch, err);
    if (!st && name && *name)
        st = cr_gguf_writer_add_str(w, "general.name", name, err);
    st = st ? st : cr_gguf_writer_add_u32(w, "general.file_type",
                                          ftype == CR_TYPE_F32 ? 0
                                          : ftype == CR_TYPE_F16 ? 1 : 32, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)hp->ctx, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)hp->dim, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)hp->n_layers, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)hp->ffn,
                                          err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("attention.head_count"),
                                          (uint32_t)hp->n_heads, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("attention.head_count_kv"),
                                          (uint32_t)hp->n_kv, err);
    if (!st && (hp->flags & REG_HF_BERT)) {
        /* an encoder: LayerNorm epsilon, bidirectional, token types; no rope */
        st = cr_gguf_writer_add_f32(w, KEY("attention.layer_norm_epsilon"), (float)hp->eps,
                                    err);
        st = st ? st : cr_gguf_writer_add_bool(w, KEY("attention.causal"), false, err);
        st = st ? st : cr_gguf_writer_add_u32(w, "tokenizer.ggml.token_type_count",
                                              (uint32_t)hp->n_token_types, err);
        return st;
    }
    st = st ? st : cr_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"),
                                          (float)hp->eps, err);
    st = st ? st : cr_gguf_writer_add_f32(w, KEY("rope.freq_base"), (float)hp->rope_base,
                                          err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("rope.dimension_count"),
                                          (uint32_t)hp->rope_dims, err);
    if (!st && hp->head_dim * hp->n_heads != hp->dim) {
        st = cr_gguf_writer_add_u32(w, KEY("attention.key_length"), (uint32_t)hp->head_dim,
                                    err);
        st = st ? st : cr_gguf_writer_add_u32(w, KEY("attention.value_length"),
                                              (uint32_t)hp->head_dim, err);
    }
    if (!st && (hp->flags & REG_HF_MOE)) {
        st = cr_gguf_writer_add_u32(w, KEY("expert_count"), (uint32_t)hp->n_expert, err);
        st = st ? st : cr_gguf_writer_add_u32(w, KEY("expert_used_count"),
                                              (uint32_t)hp->n_expert_used, err);
        st = st ? st : cr_gguf_writer_add_u32(w, KEY("expert_feed_forward_length"),
                                              (uint32_t)hp->expert_ffn, err);
        const json_t *norm = json_object_get(cfg, "norm_topk_prob");
        if (!st && json_is_boolean(norm))
            st = cr_gguf_writer_add_bool(w, KEY("expert_weights_norm"), json_is_true(norm),
                                         err);
    }
    if (!st && (hp->flags & REG_HF_GEMMA))
        st = add_gemma_keys(w, cfg, hp, err);
    return st;
}

void reg_hf_rope_free(reg_hf_rope_t *rope)
{
    free(rope->long_f);
    free(rope->short_f);
    free(rope->freqs);
    memset(rope, 0, sizeof *rope);
}
