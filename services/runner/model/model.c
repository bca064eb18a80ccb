/* model.c: loads and checks a decoder GGUF model (see model.h).
 *
 * Order: architecture, hyperparameters (each range-checked), then every
 * tensor (present, shape, type, alignment, backend support). Nothing is
 * copied: weight views point into the GGUF mapping. */
#include "lib/prelude.h"
#include "services/runner/model/model.h"

#include <math.h>

struct rn_model {
    cr_gguf_t *g;
    be_backend_t *be;   /* the instance weights are being prepared on */
    rn_placement_t pl;  /* as asked */
    be_backend_t **lbe; /* [n_layers + 1] each layer's instance; [n_layers]
                           is the output layer's */
    be_backend_t *in_be; /* the token embeddings' instance: the output
                            layer's (an encoder's: layer 0's) */
    int n_inst;         /* distinct instances, in layer order */
    be_backend_t *inst[RN_MAX_RANGES + 1];
    rn_rope_factors_t rope[RN_MAX_RANGES + 1]; /* per instance */
    rn_hparams_t hp;
    rn_weights_t w;
    uint64_t weight_bytes;
    uint8_t *swa_layers; /* [n_layers] 1 = sliding, from a per-layer
                            sliding_window_pattern array; else NULL */
    uint8_t *used;       /* [tensor count] 1 = bound by the model */
    int n_unused;        /* tensors of the file the model does not use */
    const char *first_unused; /* the first of them (the handle's name) */
};

/* ---- hyperparameters -------------------------------------------------- */

static cr_status_t get_int(const cr_gguf_t *g, const char *arch, const char *suffix,
                           bool required, int def, int lo, int hi, int *out,
                           cr_err_t *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    if (!kv) {
        if (required)
            return cr_err_set(err, CR_E_CORRUPT, "missing key '%s'", key);
        *out = def;
        return CR_OK;
    }
    uint64_t v = 0;
    if (kv->type == CR_GGUF_ARRAY) {
        /* per-layer values that are all one value (granite 4's dense files
         * write head_count_kv so) are that value */
        const cr_gguf_array_t *a = NULL;
        uint64_t x = 0;
        bool same = cr_gguf_get_arr(g, key, &a) && a->n > 0 &&
                    cr_gguf_arr_get_u64(a, 0, &v);
        for (uint64_t i = 1; same && i < a->n; i++)
            same = cr_gguf_arr_get_u64(a, i, &x) && x == v;
        if (!same)
            return cr_err_set(err, CR_E_UNSUPPORTED,
                              "key '%s': per-layer values are not supported", key);
    } else if (!cr_gguf_get_u64(g, key, &v)) {
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is not a non-negative integer",
                          key);
    }
    if (v < (uint64_t)lo || v > (uint64_t)hi)
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' = %" PRIu64 " is out of range "
                          "%d..%d", key, v, lo, hi);
    *out = (int)v;
    return CR_OK;
}

static cr_status_t get_float(const cr_gguf_t *g, const char *arch, const char *suffix,
                             float def, float *out, cr_err_t *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!cr_gguf_kv_find(g, key)) {
        *out = def;
        return CR_OK;
    }
    float v = 0;
    if (!cr_gguf_get_f32(g, key, &v) || !(v > 0) || v > 1e30f)
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is not a positive number", key);
    *out = v;
    return CR_OK;
}

static const struct {
    const char *name;
    rn_arch_t id;
} arch_names[] = {
    {"llama", RN_ARCH_LLAMA},   {"qwen2", RN_ARCH_QWEN2}, {"qwen3", RN_ARCH_QWEN3},
    {"gemma2", RN_ARCH_GEMMA2}, {"gemma3", RN_ARCH_GEMMA3}, {"phi3", RN_ARCH_PHI3},
    {"gemma", RN_ARCH_GEMMA},   {"bert", RN_ARCH_BERT},   {"nomic-bert", RN_ARCH_NOMIC_BERT},
    {"qwen3moe", RN_ARCH_QWEN3MOE}, {"gpt-oss", RN_ARCH_GPT_OSS},
    {"gptoss", RN_ARCH_GPT_OSS}, /* Ollama's converter's name for it */
    {"granite", RN_ARCH_GRANITE}, {"olmo2", RN_ARCH_OLMO2}, {"mistral3", RN_ARCH_MISTRAL3},
    {"exaone", RN_ARCH_EXAONE}, {"smollm3", RN_ARCH_SMOLLM3},
    {"command-r", RN_ARCH_COMMAND_R}, {"cohere2", RN_ARCH_COHERE2},
    {"exaone4", RN_ARCH_EXAONE4}, {"qwen2vl", RN_ARCH_QWEN2VL},
    {"qwen25vl", RN_ARCH_QWEN2VL}, /* Ollama's converter's Qwen2.5-VL */
};

bool rn_model_arch_supported(const char *arch)
{
    for (size_t i = 0; arch && i < CR_ARRAY_LEN(arch_names); i++)
        if (!strcmp(arch, arch_names[i].name))
            return true;
    return false;
}

/* Architectures llama.cpp ropes in normal mode (adjacent pairs), as llama;
 * the rest use NEOX halves. */
static bool arch_rope_normal(rn_arch_t a)
{
    return a == RN_ARCH_LLAMA || a == RN_ARCH_GRANITE || a == RN_ARCH_MISTRAL3 ||
           a == RN_ARCH_SMOLLM3 || a == RN_ARCH_COMMAND_R || a == RN_ARCH_COHERE2;
}

/* <arch>.attention.sliding_window_pattern: a period p (layer l slides iff
 * l % p < p - 1; def when absent) or, as Ollama writes it, one bool per
 * layer (true = sliding). */
static cr_status_t read_swa_pattern(rn_model_t *m, int def, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch);
    const cr_gguf_array_t *a = NULL;
    if (!cr_gguf_get_arr(m->g, key, &a))
        return get_int(m->g, hp->arch, "attention.sliding_window_pattern", false, def, 0,
                       RN_MODEL_MAX_LAYERS, &hp->swa_pattern, err);
    if (a->n != (uint64_t)hp->n_layers)
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' has %" PRIu64 " values for %d "
                          "layers", key, a->n, hp->n_layers);
    m->swa_layers = calloc((size_t)hp->n_layers, 1);
    if (!m->swa_layers)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (int l = 0; l < hp->n_layers; l++) {
        uint64_t v = 0;
        if (a->type == CR_GGUF_BOOL)
            v = ((const uint8_t *)a->data)[l] != 0;
        else if (!cr_gguf_arr_get_u64(a, (uint64_t)l, &v))
            return cr_err_set(err, CR_E_CORRUPT, "key '%s' value %d is not a bool or "
                              "non-negative integer", key, l);
        m->swa_layers[l] = v != 0;
    }
    return CR_OK;
}

/* A reranker's classifier outputs: one per <arch>.classifier.output_labels
 * entry (llama.cpp's n_cls_out), 1 without the key. */
static cr_status_t read_cls_labels(rn_model_t *m, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.classifier.output_labels", hp->arch);
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(m->g, key);
    if (!kv)
        return CR_OK;
    if (kv->type != CR_GGUF_ARRAY || kv->v.arr.type != CR_GGUF_STRING)
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is not an array of strings", key);
    if (kv->v.arr.n < 1 || kv->v.arr.n > (uint64_t)hp->dim)
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' has %" PRIu64 " labels, expected "
                          "1..%d", key, kv->v.arr.n, hp->dim);
    hp->n_cls_out = (int)kv->v.arr.n;
    return CR_OK;
}

/* <arch>.pooling_type (any architecture): 0 none and absent pool by mean,
 * as the embed endpoint always did; 4 (rank: a reranker's classifier head)
 * for bert, whose head llama.cpp's graph defines (qwen3's rank models read
 * yes/no logits instead, not implemented). */
static cr_status_t read_pooling(rn_model_t *m, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    int v = 0;
    cr_status_t st = get_int(m->g, hp->arch, "pooling_type", false, 0, 0, 4, &v, err);
    if (st)
        return st;
    if (v == RN_POOL_RANK && hp->arch_id != RN_ARCH_BERT)
        return cr_err_set(err, CR_E_UNSUPPORTED, "key '%s.pooling_type' = 4 (rank) is "
                          "supported for bert only", hp->arch);
    hp->pooling = v == 0 ? RN_POOL_MEAN : (rn_pooling_t)v;
    hp->n_cls_out = 1;
    if (v == RN_POOL_RANK)
        return read_cls_labels(m, err);
    return CR_OK;
}

/* The bert family: LayerNorm epsilon, bidirectional attention unless the
 * file says causal, nomic-bert's NEOX rope (bert has learned positions). */
static cr_status_t read_encoder(rn_model_t *m, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.causal", hp->arch);
    bool causal = false;
    if (cr_gguf_kv_find(m->g, key) && !cr_gguf_get_bool(m->g, key, &causal))
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is not a bool", key);
    if (causal)
        return cr_err_set(err, CR_E_UNSUPPORTED, "key '%s' = true: a causal %s is not "
                          "supported", key, hp->arch);
    hp->non_causal = true;
    hp->rope_neox = hp->arch_id == RN_ARCH_NOMIC_BERT;
    return get_float(m->g, hp->arch, "attention.layer_norm_epsilon", 1e-12f,
                     &hp->norm_eps, err);
}

/* gpt-oss (llama.cpp's loader and graph for it): a sliding window (key
 * required) on even layers unless a pattern says otherwise, an optional
 * rope base of its own for them, q.k scaled by 1/sqrt(n_rot), experts'
 * clamped SwiGLU. Rope scaling: read_rope_scaling. */
static cr_status_t read_gpt_oss(rn_model_t *m, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    cr_status_t st;
    hp->attn_scale = 1.0f / sqrtf((float)hp->n_rot);
    hp->rope_yarn = true;
    hp->swiglu_oai = true;
    if ((st = get_int(m->g, hp->arch, "attention.sliding_window", true, 0, 1,
                      RN_MODEL_MAX_CTX, &hp->n_swa, err)) ||
        (st = read_swa_pattern(m, 2, err)) ||
        (st = get_float(m->g, hp->arch, "rope.freq_base_swa", hp->rope_base,
                        &hp->rope_base_swa, err)))
        return st;
    return CR_OK;
}

/* granite: its four multipliers (embedding_scale, residual_scale and
 * attention.scale optional, logit_scale required as llama.cpp reads them).
 * rope.scaling.finetuned false would turn rope off; llama.cpp's converter
 * writes it false only for hybrid (granitehybrid) files, so it is refused. */
static cr_status_t read_granite(rn_model_t *m, cr_err_t *err)
{
    const cr_gguf_t *g = m->g;
    rn_hparams_t *hp = &m->hp;
    const char *arch = hp->arch;
    char key[128];
    snprintf(key, sizeof key, "%s.logit_scale", arch);
    if (!cr_gguf_kv_find(g, key))
        return cr_err_set(err, CR_E_CORRUPT, "missing key '%s'", key);
    cr_status_t st;
    float logit_scale = 1.0f;
    if ((st = get_float(g, arch, "logit_scale", 1.0f, &logit_scale, err)) ||
        (st = get_float(g, arch, "embedding_scale", 1.0f, &hp->embd_scale, err)) ||
        (st = get_float(g, arch, "residual_scale", 1.0f, &hp->residual_scale, err)) ||
        (st = get_float(g, arch, "attention.scale", hp->attn_scale, &hp->attn_scale,
                        err)))
        return st;
    snprintf(key, sizeof key, "%s.rope.scaling.finetuned", arch);
    bool rope_on = true;
    if (cr_gguf_kv_find(g, key) && !cr_gguf_get_bool(g, key, &rope_on))
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is not a bool", key);
    if (!rope_on)
        return cr_err_set(err, CR_E_UNSUPPORTED, "key '%s' = false: granite without "
                          "rope is not supported", key);
    hp->logit_mult = 1.0f / logit_scale; /* as llama.cpp scales */
    return CR_OK;
}

/* command-r and cohere2: LayerNorm epsilon (required), logit_scale
 * (optional for command-r, required for cohere2: llama.cpp's reads), and
 * cohere2's sliding window (required; 3 of 4 layers, global base). */
static cr_status_t read_cohere(rn_model_t *m, cr_err_t *err)
{
    const cr_gguf_t *g = m->g;
    rn_hparams_t *hp = &m->hp;
    const char *arch = hp->arch;
    bool c2 = hp->arch_id == RN_ARCH_COHERE2;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", arch);
    if (!cr_gguf_kv_find(g, key))
        return cr_err_set(err, CR_E_CORRUPT, "missing key '%s'", key);
    snprintf(key, sizeof key, "%s.logit_scale", arch);
    if (c2 && !cr_gguf_kv_find(g, key))
        return cr_err_set(err, CR_E_CORRUPT, "missing key '%s'", key);
    hp->layer_norm = true;
    hp->parallel_ffn = true;
    cr_status_t st;
    if ((st = get_float(g, arch, "attention.layer_norm_epsilon", 1e-5f, &hp->norm_eps,
                        err)) ||
        (st = get_float(g, arch, "logit_scale", 1.0f, &hp->logit_mult, err)))
        return st;
    if (!c2)
        return CR_OK;
    if ((st = get_int(g, arch, "attention.sliding_window", true, 0, 1, RN_MODEL_MAX_CTX,
                      &hp->n_swa, err)))
        return st;
    return read_swa_pattern(m, 4, err);
}

/* The dense families of issue 13 (granite, olmo2, mistral3): what each
 * adds to llama's graph, as llama.cpp builds it. */
static cr_status_t read_dense_family(rn_model_t *m, cr_err_t *err)
{
    const cr_gguf_t *g = m->g;
    rn_hparams_t *hp = &m->hp;
    if (hp->arch_id == RN_ARCH_GRANITE)
        return read_granite(m, err);
    if (hp->arch_id == RN_ARCH_MISTRAL3) {
        /* Ministral 3's Llama-4 attention temperature (with YaRN, see
         * read_yarn): its period is the original context */
        hp->attn_temp_len = hp->n_ctx_orig;
        return get_float(g, hp->arch, "attention.temperature_scale", 0.0f, &hp->attn_temp,
                         err);
    }
    /* olmo2: post-norms only, whole-vector q/k norms; olmo3 (same
     * architecture) slides 3 of 4 layers, which rope with the same base
     * unscaled (llama.cpp's graph passes the global base there, whatever
     * rope.freq_base_swa says) */
    hp->post_norms = true;
    hp->no_pre_norms = true;
    cr_status_t st = get_int(g, hp->arch, "attention.sliding_window", false, 0, 0,
                             RN_MODEL_MAX_CTX, &hp->n_swa, err);
    if (st || hp->n_swa == 0)
        return st;
    hp->rope_base_swa = hp->rope_base;
    return read_swa_pattern(m, 4, err);
}

/* exaone4: post-norms only; llama.cpp slides only the 32B (64 layers):
 * window 4096 unless attention.sliding_window says otherwise, 3 of 4
 * layers, and only those rope (with the global base). Other sizes ignore
 * the window key. */
static cr_status_t read_exaone4(rn_model_t *m, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    hp->post_norms = true;
    hp->no_pre_norms = true;
    if (hp->n_layers != 64)
        return CR_OK;
    cr_status_t st = get_int(m->g, hp->arch, "attention.sliding_window", false, 4096, 1,
                             RN_MODEL_MAX_CTX, &hp->n_swa, err);
    return st ? st : read_swa_pattern(m, 4, err);
}

/* qwen2vl: qwen2 with M-RoPE. rope.dimension_sections (4 counts of pairs,
 * llama.cpp requires the key) splits the rotated pairs between the t, h,
 * w and e position planes. llama.cpp's graph passes no rope scaling to
 * its M-RoPE beyond the context's defaults; a file that asks for any is
 * refused rather than run wrong. */
static cr_status_t read_qwen2vl(rn_model_t *m, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", hp->arch);
    const cr_gguf_array_t *a = NULL;
    /* Ollama's qwen25vl writes Hugging Face's rope_scaling.mrope_section
     * (3 counts) as rope.mrope_section instead */
    if (!cr_gguf_kv_find(m->g, key))
        snprintf(key, sizeof key, "%s.rope.mrope_section", hp->arch);
    if (!cr_gguf_get_arr(m->g, key, &a) || a->n < 3 || a->n > 4)
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is missing or not 3 to 4 integers",
                          key);
    int sum = 0;
    for (uint64_t i = 0; i < 4; i++) {
        int64_t v = 0;
        if (i < a->n && !cr_gguf_arr_get_i64(a, i, &v))
            return cr_err_set(err, CR_E_CORRUPT, "key '%s' must hold integers", key);
        if (v < 0 || v > hp->head_dim)
            return cr_err_set(err, CR_E_CORRUPT, "key '%s': section %d of %" PRId64
                              " pairs is out of range", key, (int)i, v);
        hp->rope_sections[i] = (int)v;
        sum += (int)v;
    }
    if (sum <= 0 || sum > hp->head_dim)
        return cr_err_set(err, CR_E_CORRUPT, "key '%s': sections of %d pairs in all, "
                          "expected 1..%d (the head size)", key, sum, hp->head_dim);
    if (hp->head_dim > 1024) /* rope_multi's bound (backend.h) */
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: head size %d is above 1024",
                          hp->arch, hp->head_dim);
    if (hp->n_rot != hp->head_dim)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: rope.dimension_count %d differs "
                          "from the head size %d (llama.cpp requires them equal)",
                          hp->arch, hp->n_rot, hp->head_dim);
    char type[32] = "";
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch);
    if (cr_gguf_kv_find(m->g, key) &&
        (!cr_gguf_get_strz(m->g, key, type, sizeof type) || strcmp(type, "none")))
        return cr_err_set(err, CR_E_UNSUPPORTED, "key '%s' = '%s': rope scaling is not "
                          "supported with M-RoPE", key, type);
    hp->mrope = true;
    return CR_OK;
}

/* Features each architecture fixes (llama.cpp's graph for it), before the
 * metadata that may refine them. */
static cr_status_t read_arch_features(rn_model_t *m, cr_err_t *err)
{
    const cr_gguf_t *g = m->g;
    rn_hparams_t *hp = &m->hp;
    const char *arch = hp->arch;
    cr_status_t st;
    hp->rope_neox = !arch_rope_normal(hp->arch_id);
    hp->rope_scale = 1.0f;
    hp->residual_scale = 1.0f;
    hp->logit_mult = 1.0f;
    hp->rope_base_swa = hp->rope_base;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->embd_scale = 1.0f;
    hp->rope_attn_factor = 1.0f;
    hp->n_ctx_orig = hp->n_ctx_train;
    if (hp->arch_id == RN_ARCH_LLAMA)
        return CR_OK;
    if (rn_arch_is_encoder(hp->arch_id) && (st = read_encoder(m, err)))
        return st;
    /* Rope scaling the NEOX path understands: frequency factors (LongRoPE
     * for phi3) with an attention factor, and gemma3's linear scaling. */
    if ((st = get_float(g, arch, "rope.scaling.attn_factor", 1.0f, &hp->rope_attn_factor,
                        err)) ||
        (st = get_int(g, arch, "rope.scaling.original_context_length", false,
                      hp->n_ctx_train, 1, RN_MODEL_MAX_CTX, &hp->n_ctx_orig, err)))
        return st;
    if (hp->arch_id == RN_ARCH_GPT_OSS)
        return read_gpt_oss(m, err);
    if (hp->arch_id == RN_ARCH_GRANITE || hp->arch_id == RN_ARCH_OLMO2 ||
        hp->arch_id == RN_ARCH_MISTRAL3)
        return read_dense_family(m, err);
    if (hp->arch_id == RN_ARCH_COMMAND_R || hp->arch_id == RN_ARCH_COHERE2)
        return read_cohere(m, err);
    if (hp->arch_id == RN_ARCH_EXAONE4)
        return read_exaone4(m, err);
    if (hp->arch_id == RN_ARCH_QWEN2VL)
        return read_qwen2vl(m, err);
    if (hp->arch_id == RN_ARCH_GEMMA) {
        /* Gemma 1: sqrt(dim) embeddings, GELU, (1 + w) norms stored folded */
        hp->embd_scale = sqrtf((float)hp->dim);
        hp->ffn_gelu = true;
        return CR_OK;
    }
    if (hp->arch_id != RN_ARCH_GEMMA2 && hp->arch_id != RN_ARCH_GEMMA3)
        return CR_OK;

    /* Gemma: embeddings scaled by sqrt(dim); norms are plain RMSNorm because
     * the converter stores (1 + w); GELU-gated FFN; post-norms; the query
     * scale is 1/sqrt(head_dim) except for the 27B models (46 / 62 blocks),
     * which use 1/sqrt(dim / heads) (gemma_pytorch's query_pre_attn_scalar;
     * GGUF has no key for it, llama.cpp derives it the same way). */
    hp->embd_scale = sqrtf((float)hp->dim);
    hp->ffn_gelu = true;
    hp->post_norms = true;
    bool is_27b = (hp->arch_id == RN_ARCH_GEMMA2 && hp->n_layers == 46) ||
                  (hp->arch_id == RN_ARCH_GEMMA3 && hp->n_layers == 62);
    if (is_27b)
        hp->attn_scale = 1.0f / sqrtf((float)(hp->dim / hp->n_heads));
    if ((st = read_swa_pattern(m, hp->arch_id == RN_ARCH_GEMMA2 ? 2 : 6, err)))
        return st;
    if (hp->arch_id == RN_ARCH_GEMMA2) {
        if ((st = get_int(g, arch, "attention.sliding_window", false, 4096, 0,
                          RN_MODEL_MAX_CTX, &hp->n_swa, err)) ||
            (st = get_float(g, arch, "attn_logit_softcapping", 50.0f, &hp->attn_softcap,
                            err)) ||
            (st = get_float(g, arch, "final_logit_softcapping", 30.0f,
                            &hp->final_softcap, err)))
            return st;
        return CR_OK;
    }
    /* gemma3: sliding layers use base 10000 and no position scaling; full
     * layers use <arch>.rope.freq_base and a linear rope.scaling.factor
     * (read_rope_scaling). */
    /* Bases: llama.cpp writes rope.freq_base (+ optional rope.freq_base_swa),
     * Ollama's converter rope.global.freq_base and rope.local.freq_base. */
    char bkey[128];
    snprintf(bkey, sizeof bkey, "%s.rope.freq_base", arch);
    if (!cr_gguf_kv_find(g, bkey) &&
        (st = get_float(g, arch, "rope.global.freq_base", 1000000.0f, &hp->rope_base,
                        err)))
        return st;
    snprintf(bkey, sizeof bkey, "%s.rope.freq_base_swa", arch);
    const char *swa_base_key = cr_gguf_kv_find(g, bkey) ? "rope.freq_base_swa"
                                                         : "rope.local.freq_base";
    if ((st = get_int(g, arch, "attention.sliding_window", false, 0, 0, RN_MODEL_MAX_CTX,
                      &hp->n_swa, err)) ||
        (st = get_float(g, arch, swa_base_key, 10000.0f, &hp->rope_base_swa, err)) ||
        (st = get_float(g, arch, "final_logit_softcapping", 0.0f, &hp->final_softcap,
                        err)))
        return st;
    return CR_OK;
}

/* ggml_rope_yarn_corr_dims: the pair at which a rotation of n_dims dims
 * at this base turns `turns` times over the original context (YaRN's beta),
 * floored for beta_fast and ceiled for beta_slow, within 0..n_dims-1. */
static float yarn_corr_dim(int n_dims, int n_ctx_orig, float turns, float base)
{
    return (float)n_dims * logf((float)n_ctx_orig / (turns * 2.0f * (float)M_PI)) /
           (2.0f * logf(base));
}

/* YaRN for rope base `base` (backend.h: be_rope_yarn_t), as llama.cpp sets
 * it up for gpt-oss: ext_factor 1 when the type is yarn (else 0: plain
 * scaling), beta_fast 32 and beta_slow 1 (its defaults: the gpt-oss loader
 * reads no rope.scaling.yarn_* key, so neither do we), and an attention
 * factor of mscale(factor) / (1 + 0.1 ln factor) times
 * rope.scaling.attn_factor, in llama_context's float steps; the kernel's
 * own (1 + 0.1 ln factor) then gives the magnitude YaRN defines. */
static be_rope_yarn_t yarn_params(const rn_hparams_t *hp, float base, float freq_scale,
                                  bool yarn)
{
    be_rope_yarn_t y = {.freq_base = base, .freq_scale = freq_scale,
                        .ext_factor = yarn ? 1.0f : 0.0f, .attn_factor = 1.0f};
    if (yarn) {
        float factor = 1.0f / freq_scale;
        y.attn_factor = factor <= 1.0f ? 1.0f : 0.1f * 1.0f * logf(factor) + 1.0f;
        y.attn_factor *= 1.0f / (1.0f + 0.1f * logf(factor));
    }
    y.attn_factor *= hp->rope_attn_factor;
    const float beta_fast = 32.0f, beta_slow = 1.0f;
    float lo = floorf(yarn_corr_dim(hp->n_rot, hp->n_ctx_orig, beta_fast, base));
    float hi = ceilf(yarn_corr_dim(hp->n_rot, hp->n_ctx_orig, beta_slow, base));
    y.corr_lo = fmaxf(0.0f, lo);
    y.corr_hi = fminf((float)(hp->n_rot - 1), hi);
    return y;
}

/* Architectures whose llama.cpp graph ropes with the context's YaRN
 * parameters when the file says "yarn" (olmo2: its full-attention layers;
 * gpt-oss: yarn_params). */
static bool yarn_graph(rn_arch_t a)
{
    return a == RN_ARCH_MISTRAL3 || a == RN_ARCH_QWEN2 || a == RN_ARCH_QWEN3 ||
           a == RN_ARCH_OLMO2;
}

/* get_mscale of llama.cpp's context setup: YaRN's magnitude for factor f. */
static float yarn_mscale(float f, float mscale)
{
    return f <= 1.0f ? 1.0f : 0.1f * mscale * logf(f) + 1.0f;
}

/* YaRN as llama.cpp's context sets it up for a "yarn" file of a
 * yarn_graph architecture: freq_scale 1/factor, ext_factor 1, correction
 * dims from the betas (32, 1) over the original context, and an attention
 * factor that cancels the kernel's own magnitude correction when the log
 * multiplier (mscale_all_dim) is given, times rope.scaling.attn_factor.
 * Only mistral3 reads the betas (rope.scaling.yarn_beta_fast, _slow) and
 * the multiplier (rope.scaling.yarn_log_multiplier) from the file, as in
 * llama.cpp. Sliding layers (olmo3) rope plainly with the global base. */
static cr_status_t read_yarn(rn_model_t *m, float factor, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    const char *arch = hp->arch;
    float beta_fast = 32.0f, beta_slow = 1.0f, log_mul = 0.0f;
    cr_status_t st;
    if (hp->arch_id == RN_ARCH_MISTRAL3 &&
        ((st = get_float(m->g, arch, "rope.scaling.yarn_beta_fast", 32.0f, &beta_fast,
                         err)) ||
         (st = get_float(m->g, arch, "rope.scaling.yarn_beta_slow", 1.0f, &beta_slow,
                         err)) ||
         (st = get_float(m->g, arch, "rope.scaling.yarn_log_multiplier", 0.0f, &log_mul,
                         err))))
        return st;
    float attn = log_mul != 0.0f ? yarn_mscale(factor, 1.0f) / yarn_mscale(factor, log_mul)
                                 : yarn_mscale(factor, 1.0f);
    attn *= 1.0f / (1.0f + 0.1f * logf(factor));
    float lo = floorf(yarn_corr_dim(hp->n_rot, hp->n_ctx_orig, beta_fast, hp->rope_base));
    float hi = ceilf(yarn_corr_dim(hp->n_rot, hp->n_ctx_orig, beta_slow, hp->rope_base));
    hp->rope_yarn = true;
    hp->yarn = (be_rope_yarn_t){
        .freq_base = hp->rope_base,
        .freq_scale = 1.0f / factor,
        .ext_factor = 1.0f,
        .attn_factor = attn * hp->rope_attn_factor,
        .corr_lo = fmaxf(0.0f, lo),
        .corr_hi = fminf((float)(hp->n_rot - 1), hi),
        .normal = !hp->rope_neox,
    };
    hp->yarn_swa = (be_rope_yarn_t){.freq_base = hp->rope_base, .freq_scale = 1.0f,
                                    .attn_factor = 1.0f, .normal = !hp->rope_neox};
    return CR_OK;
}

/* <arch>.rope.scaling.type into type ("" when absent: *has_type false) and
 * the key's name into key. */
static cr_status_t read_scaling_type(const rn_model_t *m, char key[128], char type[32],
                                     bool *has_type, cr_err_t *err)
{
    snprintf(key, 128, "%s.rope.scaling.type", m->hp.arch);
    type[0] = '\0';
    *has_type = cr_gguf_kv_find(m->g, key) != NULL;
    if (*has_type && !cr_gguf_get_strz(m->g, key, type, 32))
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is not a short string", key);
    return CR_OK;
}

/* <arch>.rope.scaling.*: linear (positions times 1/factor; gemma3 keeps its
 * sliding layers unscaled), LongRoPE (factor tensors, see bind_all), YaRN
 * (gpt-oss; mistral3, qwen2, qwen3 and olmo2: read_yarn), or none.
 * Anything else is refused rather than run wrong. */
static cr_status_t read_rope_scaling(rn_model_t *m, cr_err_t *err)
{
    const cr_gguf_t *g = m->g;
    rn_hparams_t *hp = &m->hp;
    char key[128], type[32];
    bool has_type;
    cr_status_t tst = read_scaling_type(m, key, type, &has_type, err);
    if (tst)
        return tst;
    /* Ollama's gpt-oss files ("gptoss") carry no type: its runner always
     * applies YaRN to them */
    bool yarn = has_type ? !strcmp(type, "yarn") : !strcmp(hp->arch, "gptoss");
    if (has_type && !strcmp(type, "yarn") && yarn_graph(hp->arch_id)) {
        float f = 1.0f;
        cr_status_t st = get_float(g, hp->arch, "rope.scaling.factor", 1.0f, &f, err);
        return st ? st : read_yarn(m, f, err);
    }
    if (has_type && strcmp(type, "linear") && strcmp(type, "none") &&
        strcmp(type, "longrope") && !(yarn && hp->rope_yarn))
        return cr_err_set(err, CR_E_UNSUPPORTED, "key '%s' = '%s': only linear and "
                          "LongRoPE scaling are supported (and YaRN for gpt-oss)", key,
                          type);
    float factor = 1.0f;
    cr_status_t st = get_float(g, hp->arch, "rope.scaling.factor", 1.0f, &factor, err);
    if (st)
        return st;
    if (!has_type || !strcmp(type, "linear"))
        hp->rope_scale = 1.0f / factor;
    /* exaone4 scales its sliding layers too, which forward.c does not */
    if (hp->arch_id == RN_ARCH_EXAONE4 && hp->rope_scale != 1.0f)
        return cr_err_set(err, CR_E_UNSUPPORTED, "key '%s' (factor %g): rope scaling is "
                          "not supported for exaone4", key, (double)factor);
    /* the normal-mode rope op takes no scaling at all */
    if (!hp->rope_neox && (hp->rope_scale != 1.0f || !strcmp(type, "longrope")))
        return cr_err_set(err, CR_E_UNSUPPORTED, "key '%s' = '%s' (factor %g): rope "
                          "scaling is not supported for %s", key,
                          has_type ? type : "linear", (double)factor, hp->arch);
    if (hp->rope_yarn) {
        /* llama.cpp scales by the factor whatever the type but "none" */
        float freq_scale = has_type && !strcmp(type, "none") ? 1.0f : 1.0f / factor;
        hp->yarn = yarn_params(hp, hp->rope_base, freq_scale, yarn);
        hp->yarn_swa = yarn_params(hp, hp->rope_base_swa, freq_scale, yarn);
    }
    return CR_OK;
}

/* llama.rope.scaling.*: llama ropes adjacent pairs, which only the YaRN op
 * can scale, so linear scaling runs there with ext_factor 0 (plain
 * positions * 1/factor) and "yarn" as for mistral3. As in llama.cpp, the
 * factor applies unless the type is "none"; Llama 3's own scaling is the
 * rope_freqs tensor, not a key. Before this, a linear-scaled llama ran
 * unscaled without a word. */
static cr_status_t read_llama_scaling(rn_model_t *m, cr_err_t *err)
{
    const cr_gguf_t *g = m->g;
    rn_hparams_t *hp = &m->hp;
    char key[128], type[32];
    bool has_type;
    float factor = 1.0f;
    cr_status_t st = read_scaling_type(m, key, type, &has_type, err);
    if (!st)
        st = get_float(g, hp->arch, "rope.scaling.factor", 1.0f, &factor, err);
    if (st)
        return st;
    if (!strcmp(type, "none") || factor == 1.0f)
        return CR_OK;
    if (!(factor > 0.0f) || !isfinite(factor))
        return cr_err_set(err, CR_E_CORRUPT, "%s.rope.scaling.factor %g is not a "
                          "positive number", hp->arch, (double)factor);
    if ((st = get_float(g, hp->arch, "rope.scaling.attn_factor", 1.0f,
                        &hp->rope_attn_factor, err)) ||
        (st = get_int(g, hp->arch, "rope.scaling.original_context_length", false,
                      hp->n_ctx_train, 1, RN_MODEL_MAX_CTX, &hp->n_ctx_orig, err)))
        return st;
    if (!strcmp(type, "yarn"))
        return read_yarn(m, factor, err);
    if (has_type && strcmp(type, "linear"))
        return cr_err_set(err, CR_E_UNSUPPORTED, "key '%s' = '%s': llama supports "
                          "linear and YaRN rope scaling", key, type);
    hp->rope_yarn = true;
    hp->yarn = yarn_params(hp, hp->rope_base, 1.0f / factor, false);
    hp->yarn.normal = true;
    hp->yarn_swa = hp->yarn;
    return CR_OK;
}

/* <arch>.expert_*: the mixture-of-experts keys (model.h). qwen3moe and
 * gpt-oss must have experts; llama may (Mixtral); the other architectures
 * are read as dense whatever they say. gpt-oss's gating is fixed by
 * llama.cpp's graph (softmax of the chosen logits, no renormalization, no
 * scale), so its keys for those are not read. */
static cr_status_t read_experts(rn_model_t *m, cr_err_t *err)
{
    const cr_gguf_t *g = m->g;
    rn_hparams_t *hp = &m->hp;
    const char *arch = hp->arch;
    bool gpt_oss = hp->arch_id == RN_ARCH_GPT_OSS;
    bool needs = hp->arch_id == RN_ARCH_QWEN3MOE || gpt_oss;
    bool moe_arch = needs || hp->arch_id == RN_ARCH_LLAMA;
    cr_status_t st;
    hp->expert_gating = RN_GATING_SOFTMAX;
    hp->expert_norm = true;
    hp->expert_scale = 1.0f;
    if (!moe_arch)
        return CR_OK;
    if ((st = get_int(g, arch, "expert_count", needs, 0, 0, RN_MODEL_MAX_EXPERTS,
                      &hp->n_expert, err)))
        return st;
    if (hp->n_expert == 0) {
        if (needs)
            return cr_err_set(err, CR_E_CORRUPT, "key '%s.expert_count' = 0: %s needs "
                              "experts", arch, arch);
        return CR_OK;
    }
    char key[128];
    snprintf(key, sizeof key, "%s.expert_used_count", arch);
    if ((st = get_int(g, arch, "expert_used_count", true, 0, 1, RN_MODEL_MAX_EXPERTS,
                      &hp->n_expert_used, err)))
        return st;
    if (hp->n_expert_used > hp->n_expert)
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' = %d exceeds %s.expert_count %d",
                          key, hp->n_expert_used, arch, hp->n_expert);
    int def_fe = hp->ffn;
    if (hp->arch_id == RN_ARCH_QWEN3MOE) {
        /* llama.cpp's default when the key is absent */
        def_fe = CR_MAX(1, hp->ffn / hp->n_expert_used);
        if ((st = get_int(g, arch, "expert_feed_forward_length", false, def_fe, 1,
                          RN_MODEL_MAX_DIM, &def_fe, err)))
            return st;
    }
    /* llama.cpp's converter writes the experts' length; Ollama's leaves it
     * in feed_forward_length */
    if (gpt_oss && (st = get_int(g, arch, "expert_feed_forward_length",
                                 strcmp(arch, "gptoss") != 0, def_fe, 1, RN_MODEL_MAX_DIM,
                                 &def_fe, err)))
        return st;
    hp->ffn_expert = def_fe;
    if (gpt_oss) {
        hp->expert_gating = RN_GATING_SOFTMAX_WEIGHT;
        hp->expert_norm = false;
        return CR_OK;
    }
    int gating = 0;
    if ((st = get_int(g, arch, "expert_shared_feed_forward_length", false, def_fe, 1,
                      RN_MODEL_MAX_DIM, &hp->ffn_shared, err)) ||
        (st = get_int(g, arch, "expert_gating_func", false, 0, 0, 1000, &gating, err)))
        return st;
    if (gating > RN_GATING_SOFTMAX_WEIGHT)
        return cr_err_set(err, CR_E_UNSUPPORTED, "key '%s.expert_gating_func' = %d: "
                          "only 1 (softmax), 2 (sigmoid) and 3 (softmax of the chosen "
                          "weights) are supported", arch, gating);
    if (gating)
        hp->expert_gating = (rn_gating_t)gating;
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    if (cr_gguf_kv_find(g, key) && !cr_gguf_get_bool(g, key, &hp->expert_norm))
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is not a bool", key);
    snprintf(key, sizeof key, "%s.expert_weights_scale", arch);
    float scale = 0;
    if (cr_gguf_kv_find(g, key) &&
        (!cr_gguf_get_f32(g, key, &scale) || !(scale >= 0) || scale > 1e30f))
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is not a non-negative number",
                          key);
    if (scale > 0)
        hp->expert_scale = scale;
    return CR_OK;
}

static cr_status_t read_hparams(rn_model_t *m, cr_err_t *err)
{
    const cr_gguf_t *g = m->g;
    rn_hparams_t *hp = &m->hp;
    const char *arch = cr_gguf_arch(g);
    size_t ai = 0;
    while (ai < CR_ARRAY_LEN(arch_names) && strcmp(arch, arch_names[ai].name))
        ai++;
    if (ai == CR_ARRAY_LEN(arch_names))
        return cr_err_set(err, CR_E_UNSUPPORTED, "unsupported architecture '%.64s'",
                          arch);
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);
    hp->arch_id = arch_names[ai].id;

    cr_status_t st;
    if ((st = get_int(g, arch, "embedding_length", true, 0, 1, RN_MODEL_MAX_DIM,
                      &hp->dim, err)) ||
        (st = get_int(g, arch, "block_count", true, 0, 1, RN_MODEL_MAX_LAYERS,
                      &hp->n_layers, err)) ||
        (st = get_int(g, arch, "attention.head_count", true, 0, 1, RN_MODEL_MAX_HEADS,
                      &hp->n_heads, err)) ||
        (st = get_int(g, arch, "attention.head_count_kv", false, hp->n_heads, 1,
                      RN_MODEL_MAX_HEADS, &hp->n_kv_heads, err)) ||
        (st = get_int(g, arch, "feed_forward_length", true, 0, 1, RN_MODEL_MAX_DIM,
                      &hp->ffn, err)) ||
        (st = get_int(g, arch, "context_length", true, 0, 1, RN_MODEL_MAX_CTX,
                      &hp->n_ctx_train, err)))
        return st;
    if (hp->n_heads % hp->n_kv_heads)
        return cr_err_set(err, CR_E_CORRUPT, "%s.attention.head_count %d is not a "
                          "multiple of %s.attention.head_count_kv %d", arch,
                          hp->n_heads, arch, hp->n_kv_heads);
    /* Head size: key_length when given (qwen3 and gemma heads need not
     * divide dim), else dim / heads. */
    char key[128];
    snprintf(key, sizeof key, "%s.attention.key_length", arch);
    if (!cr_gguf_kv_find(g, key) && hp->dim % hp->n_heads)
        return cr_err_set(err, CR_E_CORRUPT, "%s.embedding_length %d is not a multiple "
                          "of %s.attention.head_count %d", arch, hp->dim, arch,
                          hp->n_heads);
    int def_hd = hp->dim % hp->n_heads ? 1 : hp->dim / hp->n_heads;
    int val_len = 0;
    if ((st = get_int(g, arch, "attention.key_length", false, def_hd, 1,
                      RN_MODEL_MAX_DIM, &hp->head_dim, err)) ||
        (st = get_int(g, arch, "attention.value_length", false, hp->head_dim, 1,
                      RN_MODEL_MAX_DIM, &val_len, err)))
        return st;
    if (val_len != hp->head_dim)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s.attention.value_length %d differs "
                          "from %s.attention.key_length %d", arch, val_len, arch,
                          hp->head_dim);
    if ((int64_t)hp->n_heads * hp->head_dim > RN_MODEL_MAX_DIM)
        return cr_err_set(err, CR_E_CORRUPT, "%s.attention.head_count %d x key_length "
                          "%d exceeds %d", arch, hp->n_heads, hp->head_dim,
                          RN_MODEL_MAX_DIM);
    hp->q_dim = hp->n_heads * hp->head_dim;
    hp->kv_dim = hp->head_dim * hp->n_kv_heads;
    if ((st = get_int(g, arch, "rope.dimension_count", false, hp->head_dim, 2,
                      hp->head_dim, &hp->n_rot, err)))
        return st;
    if (hp->n_rot % 2)
        return cr_err_set(err, CR_E_CORRUPT, "%s.rope.dimension_count %d is odd", arch,
                          hp->n_rot);
    if ((st = get_float(g, arch, "rope.freq_base", 10000.0f, &hp->rope_base, err)) ||
        (st = get_float(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f,
                        &hp->rms_eps, err)) ||
        (st = read_pooling(m, err)) || (st = read_arch_features(m, err)) ||
        (st = read_experts(m, err)))
        return st;
    return hp->arch_id == RN_ARCH_LLAMA ? read_llama_scaling(m, err)
                                        : read_rope_scaling(m, err);
}

/* ---- tensors ---------------------------------------------------------- */

static void format_shape(const cr_gguf_tensor_t *t, char *buf, size_t cap)
{
    size_t n = 0;
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (uint32_t i = 0; i < t->n_dims && n < cap; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%" PRIu64, i ? ", " : "", t->ne[i]);
    if (n < cap)
        snprintf(buf + n, cap - n, "]");
}

/* Finds tensor `name` and checks it has shape [rows][cols] (GGUF ne {cols,
 * rows}), F32 if a vector (rows == 1), and aligned data. A missing optional
 * tensor leaves *out NULL. */
/* ---- placement -------------------------------------------------------- */

/* Resolves m->pl into m->lbe and m->inst, and checks that every instance
 * has the ops the architecture needs. */
static cr_status_t place(rn_model_t *m, cr_err_t *err)
{
    const rn_hparams_t *hp = &m->hp;
    const rn_placement_t *pl = &m->pl;
    int n = hp->n_layers;
    if (!pl->host || pl->n_ranges < 0 || pl->n_ranges > RN_MAX_RANGES)
        return cr_err_set(err, CR_E_INVALID, "placement: no host backend or %d ranges "
                          "(at most %d)", pl->n_ranges, RN_MAX_RANGES);
    m->lbe = calloc((size_t)n + 1, sizeof *m->lbe);
    if (!m->lbe)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for %d layers", n);
    for (int i = 0; i < pl->n_ranges; i++) {
        const rn_range_t *r = &pl->ranges[i];
        /* first_layer < 0: the last n_layers layers (llama.cpp's count) */
        int cnt = r->first_layer < 0 ? CR_MIN(r->n_layers, n + 1) : r->n_layers;
        int first = r->first_layer < 0 ? n + 1 - cnt : r->first_layer;
        if (!r->be || cnt < 0 || first < 0 || cnt > n + 1 - first)
            return cr_err_set(err, CR_E_INVALID, "placement: range %d (layers %d+%d) is "
                              "outside the model's %d layers and output", i,
                              r->first_layer, r->n_layers, n);
        for (int l = first; l < first + cnt; l++) {
            if (m->lbe[l])
                return cr_err_set(err, CR_E_INVALID, "placement: layer %d is in two "
                                  "ranges", l);
            m->lbe[l] = r->be;
        }
    }
    for (int l = 0; l <= n; l++)
        if (!m->lbe[l])
            m->lbe[l] = pl->host;
    if (rn_arch_is_encoder(hp->arch_id))
        m->lbe[n] = m->lbe[n - 1]; /* no output layer: hidden states stay */
    m->in_be = rn_arch_is_encoder(hp->arch_id) ? m->lbe[0] : m->lbe[n];
    for (int l = 0; l <= n; l++) {
        int i = 0;
        while (i < m->n_inst && m->inst[i] != m->lbe[l])
            i++;
        if (i < m->n_inst)
            continue;
        if (m->n_inst == (int)CR_ARRAY_LEN(m->inst))
            return cr_err_set(err, CR_E_INVALID, "placement: more than %d instances",
                              (int)CR_ARRAY_LEN(m->inst));
        be_backend_t *be = m->lbe[l];
        m->inst[m->n_inst++] = be;
        const be_ops_ext_t *ext = be_ext_ops(be);
        if ((!rn_hparams_llama_graph(hp) && !ext) ||
            (hp->rope_yarn && (!ext || !ext->rope_yarn)) ||
            (hp->layer_norm && (!ext || !ext->layernorm)) ||
            (hp->mrope && (!ext || !ext->rope_multi)) ||
            (rn_arch_is_encoder(hp->arch_id) && (!ext->layernorm || !ext->gelu)))
            return cr_err_set(err, CR_E_UNSUPPORTED, "architecture '%s' needs ops the "
                              "%s backend does not have", hp->arch, be->ops->name);
        if (hp->arch_id == RN_ARCH_GPT_OSS &&
            (!ext || !ext->rope_yarn || !ext->swiglu_oai || !ext->add_row_of))
            return cr_err_set(err, CR_E_UNSUPPORTED, "architecture '%s' needs ops the "
                              "%s backend does not have", hp->arch, be->ops->name);
        if (hp->n_expert > 0 &&
            (!ext || !ext->matmul_rows || !ext->gather_rows || !ext->scatter_add))
            return cr_err_set(err, CR_E_UNSUPPORTED, "'%s' with experts (%s.expert_count "
                              "%d) needs mixture-of-experts ops the %s backend does not "
                              "have", hp->arch, hp->arch, hp->n_expert, be->ops->name);
    }
    return CR_OK;
}

static cr_status_t lookup(rn_model_t *m, const char *name, int64_t cols, int64_t rows,
                          bool required, const cr_gguf_tensor_t **out, cr_err_t *err)
{
    *out = NULL;
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(m->g, name);
    if (!t) {
        if (required)
            return cr_err_set(err, CR_E_CORRUPT, "missing tensor '%s'", name);
        return CR_OK;
    }
    if ((int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows || t->ne[2] != 1 ||
        t->ne[3] != 1) {
        char have[96];
        format_shape(t, have, sizeof have);
        if (rows == 1)
            return cr_err_set(err, CR_E_CORRUPT, "tensor '%s' has shape %s, expected "
                              "[%" PRId64 "]", name, have, cols);
        return cr_err_set(err, CR_E_CORRUPT, "tensor '%s' has shape %s, expected "
                          "[%" PRId64 ", %" PRId64 "]", name, have, cols, rows);
    }
    const cr_type_info_t *ti = cr_type_info(t->type);
    if (rows == 1 && t->type != CR_TYPE_F32)
        return cr_err_set(err, CR_E_UNSUPPORTED, "tensor '%s' has type %s, expected F32",
                          name, ti ? ti->name : "unknown");
    /* Kernels read f32 and f16 fields in place: the mapping must keep them
     * aligned (a file with general.alignment 1 could misplace them). */
    size_t align = t->type == CR_TYPE_F32 ? 4 : 2;
    if ((uintptr_t)t->data % align)
        return cr_err_set(err, CR_E_UNSUPPORTED, "tensor '%s' data at offset %" PRIu64
                          " is not %zu-byte aligned", name, t->offset, align);
    if (m->used)
        m->used[t - cr_gguf_tensor_at(m->g, 0)] = 1;
    *out = t;
    return CR_OK;
}

/* Makes *w a view of rows [r0, r0+rows) of t and prepares it. */
static cr_status_t view(rn_model_t *m, const cr_gguf_tensor_t *t, int64_t r0,
                        int64_t rows, be_weight_t *w, cr_err_t *err)
{
    size_t row_bytes = (size_t)(t->size_bytes / t->ne[1]);
    *w = (be_weight_t){
        .name = t->name,
        .type = t->type,
        .n_cols = (int64_t)t->ne[0],
        .n_rows = rows,
        .row_bytes = row_bytes,
        .data = (const uint8_t *)t->data + (size_t)r0 * row_bytes,
    };
    return m->be->ops->weight_prepare(m->be, w, err);
}

/* Binds tensor `name` of shape [rows][cols] into *w (see lookup). Missing
 * optional tensors leave *found false and *w untouched. */
static cr_status_t bind(rn_model_t *m, const char *name, int64_t cols, int64_t rows,
                        bool required, be_weight_t *w, bool *found, cr_err_t *err)
{
    if (found)
        *found = false;
    const cr_gguf_tensor_t *t = NULL;
    cr_status_t st = lookup(m, name, cols, rows, required, &t, err);
    if (st || !t)
        return st;
    if ((st = view(m, t, 0, rows, w, err)))
        return st;
    m->weight_bytes += t->size_bytes;
    if (found)
        *found = true;
    return CR_OK;
}

/* Binds a fused tensor of sum(rows[]) rows as n consecutive row views. */
static cr_status_t bind_split(rn_model_t *m, const char *name, int64_t cols,
                              const int64_t *rows, be_weight_t *const *dst, int n,
                              cr_err_t *err)
{
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += rows[i];
    const cr_gguf_tensor_t *t = NULL;
    cr_status_t st = lookup(m, name, cols, total, true, &t, err);
    if (st)
        return st;
    int64_t r0 = 0;
    for (int i = 0; i < n; i++) {
        if ((st = view(m, t, r0, rows[i], dst[i], err)))
            return st;
        r0 += rows[i];
    }
    m->weight_bytes += t->size_bytes;
    return CR_OK;
}

/* ---- experts ----------------------------------------------------------- */

/* Binds blk.l.<what>.weight, a stack of E matrices [rows][cols] (GGUF ne
 * {cols, rows, E}), as one weight of E * rows rows. */
static cr_status_t bind_stack(rn_model_t *m, int l, const char *what, int64_t cols,
                              int64_t rows, be_weight_t *w, cr_err_t *err)
{
    int64_t E = m->hp.n_expert;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s.weight", l, what);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(m->g, name);
    if (!t) {
        /* old converters wrote one tensor per expert: ffn_gate.0.weight */
        char split[96];
        snprintf(split, sizeof split, "blk.%d.ffn_gate.0.weight", l);
        if (cr_gguf_tensor_find(m->g, split))
            return cr_err_set(err, CR_E_UNSUPPORTED, "tensor '%s': per-expert tensors "
                              "are not supported (convert the model again for merged "
                              "'%s')", split, name);
        return cr_err_set(err, CR_E_CORRUPT, "missing tensor '%s'", name);
    }
    if ((int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows ||
        (int64_t)t->ne[2] != E || t->ne[3] != 1) {
        char have[96];
        format_shape(t, have, sizeof have);
        return cr_err_set(err, CR_E_CORRUPT, "tensor '%s' has shape %s, expected "
                          "[%" PRId64 ", %" PRId64 ", %" PRId64 "]", name, have, cols,
                          rows, E);
    }
    size_t align = t->type == CR_TYPE_F32 ? 4 : 2;
    if ((uintptr_t)t->data % align)
        return cr_err_set(err, CR_E_UNSUPPORTED, "tensor '%s' data at offset %" PRIu64
                          " is not %zu-byte aligned", name, t->offset, align);
    *w = (be_weight_t){
        .name = t->name,
        .type = t->type,
        .n_cols = cols,
        .n_rows = rows * E,
        .row_bytes = (size_t)(t->size_bytes / (uint64_t)(rows * E)),
        .data = t->data,
    };
    cr_status_t st = m->be->ops->weight_prepare(m->be, w, err);
    if (st) {
        w->data = NULL; /* not prepared: nothing to release */
        return st;
    }
    m->weight_bytes += t->size_bytes;
    return CR_OK;
}

/* A MoE layer's FFN: the router, the three expert stacks, and the optional
 * shared expert (its three matrices together, its gate optional). */
static cr_status_t bind_experts(rn_model_t *m, int l, rn_layer_t *L, cr_err_t *err)
{
    const rn_hparams_t *hp = &m->hp;
    int64_t D = hp->dim, E = hp->n_expert, Fe = hp->ffn_expert, Fs = hp->ffn_shared;
    char name[96];
    cr_status_t st;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", l);
    if ((st = bind(m, name, D, E, true, &L->router, NULL, err)) ||
        (st = bind_stack(m, l, "ffn_gate_exps", D, Fe, &L->exp_gate, err)) ||
        (st = bind_stack(m, l, "ffn_up_exps", D, Fe, &L->exp_up, err)) ||
        (st = bind_stack(m, l, "ffn_down_exps", Fe, D, &L->exp_down, err)))
        return st;
    bool have[3] = {false, false, false};
    const char *what[3] = {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp"};
    int64_t cols[3] = {D, D, Fs}, rows[3] = {Fs, Fs, D};
    be_weight_t *dst[3] = {&L->sh_gate, &L->sh_up, &L->sh_down};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, what[i]);
        if ((st = bind(m, name, cols[i], rows[i], false, dst[i], &have[i], err)))
            return st;
    }
    if (have[0] != have[1] || have[0] != have[2])
        return cr_err_set(err, CR_E_CORRUPT, "missing tensor 'blk.%d.%s.weight' (the "
                          "other shared-expert tensors are present)", l,
                          what[!have[0] ? 0 : !have[1] ? 1 : 2]);
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp_shexp.weight", l);
    bool have_gate = false;
    if ((st = bind(m, name, D, 1, false, &L->sh_router, &have_gate, err)))
        return st;
    if (have_gate && !have[0])
        return cr_err_set(err, CR_E_CORRUPT, "tensor '%s' without a shared expert "
                          "(blk.%d.ffn_*_shexp)", name, l);
    return CR_OK;
}

/* Binds F32 tensor `name` [rows][cols] (a bias of each expert, rows = E). */
static cr_status_t bind_f32_rows(rn_model_t *m, const char *name, int64_t cols,
                                 int64_t rows, be_weight_t *w, cr_err_t *err)
{
    const cr_gguf_tensor_t *t = NULL;
    cr_status_t st = lookup(m, name, cols, rows, true, &t, err);
    if (st)
        return st;
    if (t->type != CR_TYPE_F32) {
        const cr_type_info_t *ti = cr_type_info(t->type);
        return cr_err_set(err, CR_E_UNSUPPORTED, "tensor '%s' has type %s, expected F32",
                          name, ti ? ti->name : "unknown");
    }
    if ((st = view(m, t, 0, rows, w, err))) {
        w->data = NULL; /* not prepared: nothing to release */
        return st;
    }
    m->weight_bytes += t->size_bytes;
    return CR_OK;
}

static cr_status_t bind_qkv_bias(rn_model_t *m, int l, rn_layer_t *L, cr_err_t *err);

/* "blk.l.<alt>" when the file has it (Ollama's converter's name), else
 * "blk.l.<name>" (llama.cpp's, the one errors then report). */
static const char *layer_name(const rn_model_t *m, int l, const char *name, const char *alt,
                              char *buf, size_t cap)
{
    snprintf(buf, cap, "blk.%d.%s", l, alt);
    if (!cr_gguf_tensor_find(m->g, buf))
        snprintf(buf, cap, "blk.%d.%s", l, name);
    return buf;
}

/* gpt-oss's layer l but for the expert matrices (bind_experts): q/k/v as
 * separate tensors with optional biases (all or none, as llama.cpp allows)
 * or, as Ollama converts OpenAI's checkpoint, one attn_qkv with its bias;
 * the output projection and its bias (attn_output, Ollama: attn_out), the
 * sinks (attn_sinks.weight, Ollama: attn_sinks), the norm before the
 * experts into ffn_norm (post_attention_norm, Ollama: ffn_norm), and the
 * router's and experts' biases. */
static cr_status_t bind_gpt_oss(rn_model_t *m, int l, rn_layer_t *L, cr_err_t *err)
{
    const rn_hparams_t *hp = &m->hp;
    int64_t D = hp->dim, Q = hp->q_dim, KV = hp->kv_dim, E = hp->n_expert;
    int64_t Fe = hp->ffn_expert;
    char name[96];
    cr_status_t st;
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", l);
    if (cr_gguf_tensor_find(m->g, name)) {
        int64_t rows[3] = {Q, KV, KV};
        be_weight_t *dst[3] = {&L->wq, &L->wk, &L->wv};
        if ((st = bind_split(m, name, D, rows, dst, 3, err)) ||
            (st = bind_qkv_bias(m, l, L, err)))
            return st;
    } else {
        const char *qkv[3] = {"attn_q", "attn_k", "attn_v"};
        int64_t len[3] = {Q, KV, KV};
        be_weight_t *w[3] = {&L->wq, &L->wk, &L->wv}, *b[3] = {&L->bq, &L->bk, &L->bv};
        bool have[3] = {false, false, false};
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, qkv[i]);
            if ((st = bind(m, name, D, len[i], true, w[i], NULL, err)))
                return st;
            snprintf(name, sizeof name, "blk.%d.%s.bias", l, qkv[i]);
            if ((st = bind(m, name, len[i], 1, false, b[i], &have[i], err)))
                return st;
        }
        if (have[0] != have[1] || have[0] != have[2])
            return cr_err_set(err, CR_E_CORRUPT, "missing tensor 'blk.%d.%s.bias' (the "
                              "other attention biases are present)", l,
                              qkv[!have[0] ? 0 : !have[1] ? 1 : 2]);
    }
    if ((st = bind(m, layer_name(m, l, "attn_output.weight", "attn_out.weight", name,
                                 sizeof name),
                   Q, D, true, &L->wo, NULL, err)) ||
        (st = bind(m, layer_name(m, l, "post_attention_norm.weight", "ffn_norm.weight", name,
                                 sizeof name),
                   D, 1, true, &L->ffn_norm, NULL, err)))
        return st;
    typedef struct {
        const char *what, *alt;
        int64_t cols, rows;
        be_weight_t *dst;
    } bias_t;
    const bias_t per[] = {
        {"attn_output.bias", "attn_out.bias", D, 1, &L->bo},
        {"attn_sinks.weight", "attn_sinks", hp->n_heads, 1, &L->attn_sinks},
        {"ffn_gate_inp.bias", "ffn_gate_inp.bias", E, 1, &L->router_b},
        {"ffn_gate_exps.bias", "ffn_gate_exps.bias", Fe, E, &L->exp_gate_b},
        {"ffn_up_exps.bias", "ffn_up_exps.bias", Fe, E, &L->exp_up_b},
        {"ffn_down_exps.bias", "ffn_down_exps.bias", D, E, &L->exp_down_b},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(per); i++) {
        layer_name(m, l, per[i].what, per[i].alt, name, sizeof name);
        if ((st = bind_f32_rows(m, name, per[i].cols, per[i].rows, per[i].dst, err)))
            return st;
    }
    return CR_OK;
}

/* Whether layer l slides (a per-layer array, else the period). */
static bool layer_slides(const rn_model_t *m, int l)
{
    const rn_hparams_t *hp = &m->hp;
    if (m->swa_layers)
        return hp->n_swa > 0 && m->swa_layers[l];
    return hp->n_swa > 0 &&
           (hp->swa_pattern == 0 || l % hp->swa_pattern < hp->swa_pattern - 1);
}

/* One per-layer tensor: blk.N.<what>.<kind>, [rows][cols]. */
typedef struct layer_tensor {
    const char *what, *kind;
    int64_t cols, rows;
    be_weight_t *dst;
} layer_tensor_t;

/* granite, mistral3 and smollm3 files may carry attention-output and ffn
 * biases (llama.cpp's optional ones); real checkpoints have none and the
 * pass has no step for them, so a file with one is refused, not run
 * wrong; so is Command R+'s q/k LayerNorm (one weight row per head). */
static cr_status_t refuse_biases(rn_model_t *m, int l, cr_err_t *err)
{
    static const char *const biases[] = {"attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    rn_arch_t a = m->hp.arch_id;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_q_norm.weight", l);
    if (a == RN_ARCH_COMMAND_R && cr_gguf_tensor_find(m->g, name))
        return cr_err_set(err, CR_E_UNSUPPORTED, "tensor '%s': command-r's per-head q/k "
                          "LayerNorms (Command R+) are not supported", name);
    if (a != RN_ARCH_GRANITE && a != RN_ARCH_MISTRAL3 && a != RN_ARCH_SMOLLM3)
        return CR_OK;
    for (size_t i = 0; i < CR_ARRAY_LEN(biases); i++) {
        snprintf(name, sizeof name, "blk.%d.%s.bias", l, biases[i]);
        if (cr_gguf_tensor_find(m->g, name))
            return cr_err_set(err, CR_E_UNSUPPORTED, "tensor '%s': %s biases are not "
                              "supported", name, m->hp.arch);
    }
    return CR_OK;
}

static cr_status_t bind_layer(rn_model_t *m, int l, cr_err_t *err)
{
    const rn_hparams_t *hp = &m->hp;
    rn_layer_t *L = &m->w.layers[l];
    rn_arch_t a = hp->arch_id;
    int64_t D = hp->dim, Q = hp->q_dim, KV = hp->kv_dim, F = hp->ffn, HD = hp->head_dim;
    layer_tensor_t per[24];
    int n = 0;
    char name[96];
    cr_status_t st;

    if (!hp->no_pre_norms)
        per[n++] = (layer_tensor_t){"attn_norm", "weight", D, 1, &L->attn_norm};
    if (a == RN_ARCH_GPT_OSS) {
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        if ((st = bind(m, name, D, 1, true, &L->attn_norm, NULL, err)) ||
            (st = bind_gpt_oss(m, l, L, err)) || (st = bind_experts(m, l, L, err)))
            return st;
        L->swa = layer_slides(m, l);
        return CR_OK;
    }
    if (a == RN_ARCH_PHI3) {
        /* q, k and v are consecutive row blocks of one matrix. */
        snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", l);
        int64_t rows[3] = {Q, KV, KV};
        be_weight_t *dst[3] = {&L->wq, &L->wk, &L->wv};
        if ((st = bind_split(m, name, D, rows, dst, 3, err)))
            return st;
    } else {
        per[n++] = (layer_tensor_t){"attn_q", "weight", D, Q, &L->wq};
        per[n++] = (layer_tensor_t){"attn_k", "weight", D, KV, &L->wk};
        per[n++] = (layer_tensor_t){"attn_v", "weight", D, KV, &L->wv};
    }
    if (a == RN_ARCH_QWEN2 || a == RN_ARCH_QWEN2VL) {
        per[n++] = (layer_tensor_t){"attn_q", "bias", Q, 1, &L->bq};
        per[n++] = (layer_tensor_t){"attn_k", "bias", KV, 1, &L->bk};
        per[n++] = (layer_tensor_t){"attn_v", "bias", KV, 1, &L->bv};
    }
    if (a == RN_ARCH_QWEN3 || a == RN_ARCH_GEMMA3 || a == RN_ARCH_QWEN3MOE) {
        per[n++] = (layer_tensor_t){"attn_q_norm", "weight", HD, 1, &L->q_norm};
        per[n++] = (layer_tensor_t){"attn_k_norm", "weight", HD, 1, &L->k_norm};
    }
    if (a == RN_ARCH_EXAONE4) { /* per head */
        per[n++] = (layer_tensor_t){"attn_q_norm", "weight", HD, 1, &L->q_norm};
        per[n++] = (layer_tensor_t){"attn_k_norm", "weight", HD, 1, &L->k_norm};
    }
    if (a == RN_ARCH_OLMO2) { /* over the whole q and k */
        per[n++] = (layer_tensor_t){"attn_q_norm", "weight", Q, 1, &L->q_norm};
        per[n++] = (layer_tensor_t){"attn_k_norm", "weight", KV, 1, &L->k_norm};
    }
    per[n++] = (layer_tensor_t){"attn_output", "weight", Q, D, &L->wo};
    if (hp->post_norms)
        per[n++] = (layer_tensor_t){"post_attention_norm", "weight", D, 1,
                                    &L->attn_post_norm};
    if (!hp->no_pre_norms && !hp->parallel_ffn)
        per[n++] = (layer_tensor_t){"ffn_norm", "weight", D, 1, &L->ffn_norm};
    if (hp->n_expert > 0) {
        if ((st = bind_experts(m, l, L, err)))
            return st;
    } else if (a == RN_ARCH_PHI3) {
        /* ffn_up holds the gate rows, then the up rows. */
        snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l);
        int64_t rows[2] = {F, F};
        be_weight_t *dst[2] = {&L->w_gate, &L->w_up};
        if ((st = bind_split(m, name, D, rows, dst, 2, err)))
            return st;
    } else {
        per[n++] = (layer_tensor_t){"ffn_gate", "weight", D, F, &L->w_gate};
        per[n++] = (layer_tensor_t){"ffn_up", "weight", D, F, &L->w_up};
    }
    if (hp->n_expert == 0)
        per[n++] = (layer_tensor_t){"ffn_down", "weight", F, D, &L->w_down};
    if (hp->post_norms)
        per[n++] = (layer_tensor_t){"post_ffw_norm", "weight", D, 1, &L->ffn_post_norm};

    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "blk.%d.%s.%s", l, per[i].what, per[i].kind);
        if ((st = bind(m, name, per[i].cols, per[i].rows, true, per[i].dst, NULL, err)))
            return st;
    }
    if ((st = refuse_biases(m, l, err)))
        return st;
    /* smollm3 leaves rope out of every 4th layer (llama.cpp's fixed
     * n_no_rope_layer_step) */
    L->no_rope = a == RN_ARCH_SMOLLM3 && (l + 1) % 4 == 0;
    L->swa = layer_slides(m, l);
    if (a == RN_ARCH_COHERE2 || (a == RN_ARCH_EXAONE4 && hp->n_swa > 0))
        L->no_rope = !L->swa; /* only their sliding layers rope */
    return CR_OK;
}

/* nomic-bert's optional attn_qkv.bias [Q+2KV] as three F32 vectors. */
static cr_status_t bind_qkv_bias(rn_model_t *m, int l, rn_layer_t *L, cr_err_t *err)
{
    const rn_hparams_t *hp = &m->hp;
    int64_t Q = hp->q_dim, KV = hp->kv_dim;
    char name[96];
    snprintf(name, sizeof name, "blk.%d.attn_qkv.bias", l);
    const cr_gguf_tensor_t *t = NULL;
    cr_status_t st = lookup(m, name, Q + 2 * KV, 1, false, &t, err);
    if (st || !t)
        return st;
    int64_t len[3] = {Q, KV, KV}, off = 0;
    be_weight_t *dst[3] = {&L->bq, &L->bk, &L->bv};
    for (int i = 0; i < 3; i++) {
        *dst[i] = (be_weight_t){
            .name = t->name,
            .type = CR_TYPE_F32,
            .n_cols = len[i],
            .n_rows = 1,
            .row_bytes = (size_t)len[i] * sizeof(float),
            .data = (const float *)t->data + off,
        };
        if ((st = m->be->ops->weight_prepare(m->be, dst[i], err)))
            return st;
        off += len[i];
    }
    m->weight_bytes += t->size_bytes;
    return CR_OK;
}

/* One layer of the bert family (llama.cpp's tensor names). Optional biases
 * stay NULL when absent; nomic-bert's ffn biases are not used (llama.cpp's
 * SwiGLU path ignores them), so they are not bound. */
static cr_status_t bind_layer_encoder(rn_model_t *m, int l, cr_err_t *err)
{
    const rn_hparams_t *hp = &m->hp;
    rn_layer_t *L = &m->w.layers[l];
    bool bert = hp->arch_id == RN_ARCH_BERT;
    int64_t D = hp->dim, Q = hp->q_dim, KV = hp->kv_dim, F = hp->ffn;
    char name[96];
    cr_status_t st;
    typedef struct {
        const char *what, *kind;
        int64_t cols, rows;
        bool required;
        be_weight_t *dst;
    } part_t;
    part_t per[20];
    int n = 0;
    snprintf(name, sizeof name, "blk.%d.attn_qkv.weight", l);
    if (cr_gguf_tensor_find(m->g, name)) {
        int64_t rows[3] = {Q, KV, KV};
        be_weight_t *dst[3] = {&L->wq, &L->wk, &L->wv};
        if ((st = bind_split(m, name, D, rows, dst, 3, err)) ||
            (st = bind_qkv_bias(m, l, L, err)))
            return st;
    } else {
        per[n++] = (part_t){"attn_q", "weight", D, Q, true, &L->wq};
        per[n++] = (part_t){"attn_q", "bias", Q, 1, false, &L->bq};
        per[n++] = (part_t){"attn_k", "weight", D, KV, true, &L->wk};
        per[n++] = (part_t){"attn_k", "bias", KV, 1, false, &L->bk};
        per[n++] = (part_t){"attn_v", "weight", D, KV, true, &L->wv};
        per[n++] = (part_t){"attn_v", "bias", KV, 1, false, &L->bv};
    }
    per[n++] = (part_t){"attn_output", "weight", Q, D, true, &L->wo};
    per[n++] = (part_t){"attn_output", "bias", D, 1, false, &L->bo};
    per[n++] = (part_t){"attn_output_norm", "weight", D, 1, true, &L->ln_attn};
    per[n++] = (part_t){"attn_output_norm", "bias", D, 1, true, &L->ln_attn_b};
    per[n++] = (part_t){"ffn_up", "weight", D, F, true, &L->w_up};
    if (bert) {
        per[n++] = (part_t){"ffn_up", "bias", F, 1, false, &L->b_up};
        per[n++] = (part_t){"ffn_down", "bias", D, 1, false, &L->b_down};
    } else {
        per[n++] = (part_t){"ffn_gate", "weight", D, F, true, &L->w_gate};
    }
    per[n++] = (part_t){"ffn_down", "weight", F, D, true, &L->w_down};
    per[n++] = (part_t){"layer_output_norm", "weight", D, 1, true, &L->ln_out};
    per[n++] = (part_t){"layer_output_norm", "bias", D, 1, true, &L->ln_out_b};
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "blk.%d.%s.%s", l, per[i].what, per[i].kind);
        if ((st = bind(m, name, per[i].cols, per[i].rows, per[i].required, per[i].dst,
                       NULL, err)))
            return st;
    }
    /* q, k and v biases come together or not at all */
    if ((L->bq.data != NULL) != (L->bk.data != NULL) ||
        (L->bq.data != NULL) != (L->bv.data != NULL))
        return cr_err_set(err, CR_E_CORRUPT, "blk.%d: attn_q/attn_k/attn_v biases must "
                          "all be present or all absent", l);
    return CR_OK;
}

/* cls.output.weight [n_cls_out][dim]: a matrix even with one row, so any
 * type the backend multiplies (bind would take one row for an F32 vector). */
static cr_status_t bind_cls_out(rn_model_t *m, cr_err_t *err)
{
    const rn_hparams_t *hp = &m->hp;
    const char *name = "cls.output.weight";
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(m->g, name);
    if (!t)
        return CR_OK;
    if ((int64_t)t->ne[0] != hp->dim || (int64_t)t->ne[1] != hp->n_cls_out ||
        t->ne[2] != 1 || t->ne[3] != 1) {
        char have[96];
        format_shape(t, have, sizeof have);
        return cr_err_set(err, CR_E_CORRUPT, "tensor '%s' has shape %s, expected [%d, "
                          "%d]", name, have, hp->dim, hp->n_cls_out);
    }
    size_t align = t->type == CR_TYPE_F32 ? 4 : 2;
    if ((uintptr_t)t->data % align)
        return cr_err_set(err, CR_E_UNSUPPORTED, "tensor '%s' data at offset %" PRIu64
                          " is not %zu-byte aligned", name, t->offset, align);
    cr_status_t st = view(m, t, 0, hp->n_cls_out, &m->w.cls_out, err);
    if (!st)
        m->weight_bytes += t->size_bytes;
    return st;
}

/* A reranker's classifier head, on the instance of the last layer (which
 * holds the hidden states it reads). Each tensor is optional as in
 * llama.cpp, but a head without either matrix would score with a raw
 * hidden value: refused. */
static cr_status_t bind_cls_head(rn_model_t *m, cr_err_t *err)
{
    const rn_hparams_t *hp = &m->hp;
    rn_weights_t *w = &m->w;
    m->be = m->lbe[hp->n_layers];
    cr_status_t st;
    if ((st = bind(m, "cls.weight", hp->dim, hp->dim, false, &w->cls, NULL, err)) ||
        (st = bind(m, "cls.bias", hp->dim, 1, false, &w->cls_b, NULL, err)) ||
        (st = bind_cls_out(m, err)) ||
        (st = bind(m, "cls.output.bias", hp->n_cls_out, 1, false, &w->cls_out_b, NULL,
                   err)))
        return st;
    if (!w->cls.data && !w->cls_out.data)
        return cr_err_set(err, CR_E_CORRUPT, "pooling_type 4 (rank) needs tensor "
                          "'cls.weight' or 'cls.output.weight'");
    if (w->cls_b.data && !w->cls.data)
        return cr_err_set(err, CR_E_CORRUPT, "tensor 'cls.bias' without 'cls.weight'");
    if (w->cls_out_b.data && !w->cls_out.data)
        return cr_err_set(err, CR_E_CORRUPT, "tensor 'cls.output.bias' without "
                          "'cls.output.weight'");
    return CR_OK;
}

/* The bert family's global tensors: embeddings, token types, positions
 * (bert) and the embedding LayerNorm; no output norm or matrix. */
static cr_status_t bind_encoder(rn_model_t *m, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    rn_weights_t *w = &m->w;
    cr_status_t st;
    const cr_gguf_tensor_t *tt = cr_gguf_tensor_find(m->g, "token_types.weight");
    if (tt && (tt->ne[1] < 1 || tt->ne[1] > 64))
        return cr_err_set(err, CR_E_CORRUPT, "tensor 'token_types.weight' has %" PRIu64
                          " rows, expected 1..64", tt->ne[1]);
    m->be = m->in_be;
    if ((st = bind(m, "token_embd.weight", hp->dim, hp->n_vocab, true, &w->token_embd,
                   NULL, err)) ||
        (tt && (st = bind(m, "token_types.weight", hp->dim, (int64_t)tt->ne[1], true,
                          &w->token_types, NULL, err))) ||
        (hp->arch_id == RN_ARCH_BERT &&
         (st = bind(m, "position_embd.weight", hp->dim, hp->n_ctx_train, true,
                    &w->pos_embd, NULL, err))) ||
        (st = bind(m, "token_embd_norm.weight", hp->dim, 1, true, &w->tok_norm, NULL,
                   err)) ||
        (st = bind(m, "token_embd_norm.bias", hp->dim, 1, true, &w->tok_norm_b, NULL,
                   err)))
        return st;
    w->layers = calloc((size_t)hp->n_layers, sizeof *w->layers);
    if (!w->layers)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for %d layers", hp->n_layers);
    for (int l = 0; l < hp->n_layers; l++) {
        m->be = m->lbe[l];
        if ((st = bind_layer_encoder(m, l, err)))
            return st;
    }
    return hp->pooling == RN_POOL_RANK ? bind_cls_head(m, err) : CR_OK;
}

static cr_status_t bind_all(rn_model_t *m, cr_err_t *err)
{
    rn_hparams_t *hp = &m->hp;
    rn_weights_t *w = &m->w;
    const cr_gguf_tensor_t *emb = cr_gguf_tensor_find(m->g, "token_embd.weight");
    if (!emb)
        return cr_err_set(err, CR_E_CORRUPT, "missing tensor 'token_embd.weight'");
    if (emb->ne[1] < 1 || emb->ne[1] > RN_MODEL_MAX_VOCAB)
        return cr_err_set(err, CR_E_CORRUPT, "tensor 'token_embd.weight' has %" PRIu64
                          " rows, expected 1..%d", emb->ne[1], RN_MODEL_MAX_VOCAB);
    hp->n_vocab = (int)emb->ne[1];
    if (rn_arch_is_encoder(hp->arch_id))
        return bind_encoder(m, err);

    cr_status_t st;
    bool have_output = false;
    /* the embeddings, the output norm and the output matrix on the output
     * layer's instance (model.h) */
    m->be = m->in_be;
    if ((st = bind(m, "token_embd.weight", hp->dim, hp->n_vocab, true, &w->token_embd,
                   NULL, err)) ||
        (st = bind(m, "output_norm.weight", hp->dim, 1, true, &w->output_norm, NULL,
                   err)) ||
        (st = bind(m, "output.weight", hp->dim, hp->n_vocab, false, &w->output,
                   &have_output, err)))
        return st;
    if (!have_output) {
        w->output = w->token_embd;
        w->tied_output = true;
    }
    /* rope factors: prepared on every instance (each ropes its layers) */
    m->be = m->lbe[0];
    if (!hp->rope_neox) {
        if ((st = bind(m, "rope_freqs.weight", hp->n_rot / 2, 1, false, &w->rope_freqs,
                       &w->has_rope_freqs, err)))
            return st;
    } else {
        /* NEOX frequency factors: rope_freqs for every layer when present
         * (llama.cpp's precedence), else phi3's LongRoPE pair, long for
         * contexts past n_ctx_orig (forward.c picks). */
        bool have_long = false, have_short = false;
        if ((st = bind(m, "rope_freqs.weight", hp->n_rot / 2, 1, false, &w->rope_freqs,
                       &w->has_rope_freqs, err)) ||
            (st = bind(m, "rope_factors_long.weight", hp->n_rot / 2, 1, false,
                       &w->rope_long, &have_long, err)) ||
            (st = bind(m, "rope_factors_short.weight", hp->n_rot / 2, 1, false,
                       &w->rope_short, &have_short, err)))
            return st;
        if (have_long != have_short)
            return cr_err_set(err, CR_E_CORRUPT, "missing tensor '%s' (the other "
                              "LongRoPE factors are present)",
                              have_long ? "rope_factors_short.weight"
                                        : "rope_factors_long.weight");
    }

    m->rope[0] = (rn_rope_factors_t){w->rope_freqs, w->rope_long, w->rope_short};
    for (int i = 1; i < m->n_inst; i++) {
        be_backend_t *be = m->inst[i];
        rn_rope_factors_t *rf = &m->rope[i];
        be_weight_t *cp[] = {&rf->freqs, &rf->longf, &rf->shortf};
        const be_weight_t *src[] = {&w->rope_freqs, &w->rope_long, &w->rope_short};
        for (size_t k = 0; k < CR_ARRAY_LEN(cp); k++) {
            if (!src[k]->data)
                continue;
            *cp[k] = *src[k];
            cp[k]->dev = NULL;
            if ((st = be->ops->weight_prepare(be, cp[k], err))) {
                cp[k]->data = NULL; /* not prepared: nothing to release */
                return st;
            }
        }
    }

    w->layers = calloc((size_t)hp->n_layers, sizeof *w->layers);
    if (!w->layers)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for %d layers", hp->n_layers);
    for (int l = 0; l < hp->n_layers; l++) {
        m->be = m->lbe[l];
        if ((st = bind_layer(m, l, err)))
            return st;
    }
    return CR_OK;
}

/* ---- lifecycle -------------------------------------------------------- */

static void release_weights(rn_model_t *m)
{
    rn_weights_t *w = &m->w;
    if (!m->lbe)
        return;
    int n = m->hp.n_layers;
    /* Only bound weights (data set) were prepared; a tied output shares
     * token_embd's preparation. */
    be_backend_t *be = m->lbe[n];
    if (w->output_norm.data)
        be->ops->weight_release(be, &w->output_norm);
    if (w->output.data && !w->tied_output)
        be->ops->weight_release(be, &w->output);
    be_weight_t *head[] = {&w->cls, &w->cls_b, &w->cls_out, &w->cls_out_b};
    for (size_t i = 0; i < CR_ARRAY_LEN(head); i++)
        if (head[i]->data)
            be->ops->weight_release(be, head[i]);
    be = m->lbe[0];
    if (w->rope_freqs.data)
        be->ops->weight_release(be, &w->rope_freqs);
    if (w->rope_long.data)
        be->ops->weight_release(be, &w->rope_long);
    if (w->rope_short.data)
        be->ops->weight_release(be, &w->rope_short);
    for (int i = 1; i < m->n_inst; i++) {
        be_weight_t *cp[] = {&m->rope[i].freqs, &m->rope[i].longf, &m->rope[i].shortf};
        for (size_t k = 0; k < CR_ARRAY_LEN(cp); k++)
            if (cp[k]->data)
                m->inst[i]->ops->weight_release(m->inst[i], cp[k]);
    }
    be = m->in_be;
    if (w->token_embd.data)
        be->ops->weight_release(be, &w->token_embd);
    be_weight_t *enc[] = {&w->token_types, &w->pos_embd, &w->tok_norm, &w->tok_norm_b};
    for (size_t i = 0; i < CR_ARRAY_LEN(enc); i++)
        if (enc[i]->data)
            be->ops->weight_release(be, enc[i]);
    for (int l = 0; w->layers && l < m->hp.n_layers; l++) {
        rn_layer_t *L = &w->layers[l];
        be = m->lbe[l];
        be_weight_t *all[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->bq,
                              &L->bk, &L->bv, &L->q_norm, &L->k_norm, &L->wo,
                              &L->attn_post_norm, &L->ffn_norm, &L->w_gate,
                              &L->w_up, &L->w_down, &L->ffn_post_norm,
                              &L->bo, &L->ln_attn, &L->ln_attn_b, &L->b_up,
                              &L->b_down, &L->ln_out, &L->ln_out_b,
                              &L->router, &L->exp_gate, &L->exp_up,
                              &L->exp_down, &L->sh_gate, &L->sh_up,
                              &L->sh_down, &L->sh_router, &L->attn_sinks,
                              &L->router_b, &L->exp_gate_b, &L->exp_up_b,
                              &L->exp_down_b};
        for (size_t i = 0; i < CR_ARRAY_LEN(all); i++)
            if (all[i]->data)
                be->ops->weight_release(be, all[i]);
    }
}

void rn_model_destroy(rn_model_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_model_t *m = *self_p;
    release_weights(m);
    free(m->lbe);
    free(m->w.layers);
    free(m->swa_layers);
    free(m->used);
    cr_gguf_close(&m->g);
    free(m);
    *self_p = NULL;
}

cr_status_t rn_model_load_gguf(cr_gguf_t **g, be_backend_t *be, rn_model_t **out,
                               cr_err_t *err)
{
    rn_placement_t pl = {.host = be};
    return rn_model_load_gguf_placed(g, &pl, out, err);
}

/* Counts the tensors no bind looked up (m->used). */
static void count_unused(rn_model_t *m)
{
    for (size_t i = 0; i < cr_gguf_tensor_count(m->g); i++) {
        if (m->used[i])
            continue;
        if (m->n_unused++ == 0)
            m->first_unused = cr_gguf_tensor_at(m->g, i)->name;
    }
}

/* Loads from *g (taken) as pl says; with a path, layer 0's instance gets
 * the per-file hooks around the weights' preparation (the CPU's pack
 * cache): another instance sees a different subset of the tensors, and two
 * would fight over one cache file, so the others prepare as usual. */
static cr_status_t load_placed(cr_gguf_t **g, const rn_placement_t *pl,
                               const char *path, rn_model_t **out, cr_err_t *err)
{
    *out = NULL;
    rn_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        cr_gguf_close(g);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    m->g = *g;
    *g = NULL;
    m->pl = *pl;
    cr_status_t st = read_hparams(m, err);
    size_t n_tensors = cr_gguf_tensor_count(m->g);
    if (!st && n_tensors && !(m->used = calloc(n_tensors, 1)))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (!st)
        st = place(m, err);
    be_backend_t *hook = !st && path ? m->lbe[0] : NULL;
    if (hook && hook->ops->model_begin)
        hook->ops->model_begin(hook, path);
    if (!st)
        st = bind_all(m, err);
    if (!st)
        count_unused(m);
    if (st)
        rn_model_destroy(&m);
    if (hook && hook->ops->model_end)
        hook->ops->model_end(hook, st == CR_OK);
    *out = m;
    return st;
}

cr_status_t rn_model_load_gguf_placed(cr_gguf_t **g, const rn_placement_t *pl,
                                      rn_model_t **out, cr_err_t *err)
{
    return load_placed(g, pl, NULL, out, err);
}

cr_status_t rn_model_load(const char *path, be_backend_t *be, rn_model_t **out,
                          cr_err_t *err)
{
    rn_placement_t pl = {.host = be};
    return rn_model_load_placed(path, &pl, out, err);
}

cr_status_t rn_model_load_placed(const char *path, const rn_placement_t *pl,
                                 rn_model_t **out, cr_err_t *err)
{
    *out = NULL;
    cr_gguf_t *g = NULL;
    if (!pl->host)
        return cr_err_set(err, CR_E_INVALID, "placement: no host backend");
    cr_status_t st = cr_gguf_open(path, &g, err);
    if (st)
        return st;
    st = load_placed(&g, pl, path, out, err);
    if (!st)
        cr_gguf_drop_metadata_pages(rn_model_gguf(*out));
    return st;
}

const rn_hparams_t *rn_model_hparams(const rn_model_t *m) { return &m->hp; }
const rn_weights_t *rn_model_weights(const rn_model_t *m) { return &m->w; }
const cr_gguf_t *rn_model_gguf(const rn_model_t *m) { return m->g; }
be_backend_t *rn_model_backend(const rn_model_t *m) { return m->lbe[0]; }

be_backend_t *rn_model_input_backend(const rn_model_t *m) { return m->in_be; }

be_backend_t *rn_model_layer_backend(const rn_model_t *m, int l)
{
    return m->lbe[CR_MAX(0, CR_MIN(l, m->hp.n_layers))];
}

int rn_model_n_instances(const rn_model_t *m) { return m->n_inst; }

be_backend_t *rn_model_instance(const rn_model_t *m, int i) { return m->inst[i]; }

const rn_rope_factors_t *rn_model_rope_factors(const rn_model_t *m,
                                               const be_backend_t *be)
{
    for (int i = 0; i < m->n_inst; i++)
        if (m->inst[i] == be)
            return &m->rope[i];
    return &m->rope[0];
}
uint64_t rn_model_weight_bytes(const rn_model_t *m) { return m->weight_bytes; }

int rn_model_unused_tensors(const rn_model_t *m, const char **first)
{
    *first = m->first_unused;
    return m->n_unused;
}
