/* synth.c: writes synthetic GGUF models (see synth.h).
 *
 * Tensor data is generated at write time, one row at a time, by a callback
 * per tensor; each tensor has its own generator seeded from (seed, tensor
 * index), so the bytes do not depend on write order. */
#include "lib/prelude.h"
#include "tools/synth/synth.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/cpu/quant.h"

#include <math.h>

#define SYNTH_STD 0.02
#define SYNTH_MAX_DIM (1 << 16)
#define SYNTH_MAX_LAYERS 256

/* ---- built-in vocabulary ---------------------------------------------- */

/* Whole-word pieces with the SentencePiece space marker (U+2581); one-letter
 * words come from the marker+letter pieces, so none here (no duplicates). */
static const char *const words[] = {
    "the", "and", "to", "of", "is", "in", "you", "it", "that",
    "for", "are", "was", "on", "with", "as", "be", "this", "have", "at",
    "or", "not", "can", "what", "hello", "world", "test", "Once", "upon",
    "time", "there", "user", "assistant", "system", "he", "she", "they",
    "we", "my", "your", "do", "if", "so", "but", "one", "day", "little",
    "girl", "boy", "happy", "said", "Hi", "Hello", "why", "sky", "blue",
    "Tell", "me", "about", "story", "cat", "dog", "good", "very",
};
/* Sub-word pieces (no space marker). */
static const char *const subwords[] = {
    "er", "in", "th", "he", "an", "re", "on", "at", "en", "nd", "ing",
    "ed", "es", "or", "ll", "st", "ou", "le", "ly", "ion", "ent", "ar",
    "is", "it", "al", "ve", "se", "me", "ne", "de",
};

#define SPACE "\xe2\x96\x81"

typedef struct vocab {
    char **tokens;
    float *scores;
    int32_t *types;
    int n;
} vocab_t;

static void vocab_free(vocab_t *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->tokens[i]);
    free(v->tokens);
    free(v->scores);
    free(v->types);
    memset(v, 0, sizeof *v);
}

static int builtin_count(void)
{
    /* specials + bytes + printable ASCII + space marker + marker+letters +
     * words + subwords */
    return 3 + 256 + 94 + 1 + 52 + (int)CR_ARRAY_LEN(words) +
           (int)CR_ARRAY_LEN(subwords);
}

int rn_synth_builtin_vocab_size(void)
{
    return builtin_count();
}

static cr_status_t vocab_add(vocab_t *v, const char *s, float score, int32_t type,
                             cr_err_t *err)
{
    char *c = strdup(s);
    if (!c)
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    v->tokens[v->n] = c;
    v->scores[v->n] = score;
    v->types[v->n] = type;
    v->n++;
    return CR_OK;
}

/* Token types as llama.cpp numbers them: 1 normal, 2 unknown, 3 control,
 * 6 byte. Scores rank merges: longer pieces score higher. */
static cr_status_t vocab_builtin(vocab_t *v, const char *const *extra, cr_err_t *err)
{
    int n_extra = 0;
    while (extra && extra[n_extra])
        n_extra++;
    int cap = builtin_count() + n_extra;
    v->tokens = calloc((size_t)cap, sizeof *v->tokens);
    v->scores = calloc((size_t)cap, sizeof *v->scores);
    v->types = calloc((size_t)cap, sizeof *v->types);
    if (!v->tokens || !v->scores || !v->types)
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    cr_status_t st = CR_OK;
    char buf[64];
    st = st ? st : vocab_add(v, "<unk>", 0, 2, err);
    st = st ? st : vocab_add(v, "<s>", 0, 3, err);
    st = st ? st : vocab_add(v, "</s>", 0, 3, err);
    for (int b = 0; b < 256 && !st; b++) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        st = vocab_add(v, buf, 0, 6, err);
    }
    for (int ch = 0x21; ch < 0x7f && !st; ch++) {
        if (ch == ' ')
            continue;
        buf[0] = (char)ch;
        buf[1] = 0;
        st = vocab_add(v, buf, -1000.0f - (float)ch, 1, err);
    }
    st = st ? st : vocab_add(v, SPACE, -900.0f, 1, err);
    for (int i = 0; i < 52 && !st; i++) {
        char ch = (char)(i < 26 ? 'a' + i : 'A' + i - 26);
        snprintf(buf, sizeof buf, SPACE "%c", ch);
        st = vocab_add(v, buf, -800.0f - (float)i, 1, err);
    }
    for (size_t i = 0; i < CR_ARRAY_LEN(subwords) && !st; i++)
        st = vocab_add(v, subwords[i], -500.0f - (float)i, 1, err);
    for (size_t i = 0; i < CR_ARRAY_LEN(words) && !st; i++) {
        snprintf(buf, sizeof buf, SPACE "%s", words[i]);
        st = vocab_add(v, buf, -100.0f - (float)i, 1, err);
    }
    for (int i = 0; i < n_extra && !st; i++)
        st = vocab_add(v, extra[i], 0, 3, err);
    return st;
}

/* ---- random weights --------------------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng_t;

static uint64_t rng_next(rng_t *r)
{
    /* splitmix64: simple, full period, good enough for test weights. */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_uniform(rng_t *r) /* in (0, 1) */
{
    return ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
}

static float rng_normal(rng_t *r, double std)
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    return (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void rn_synth_fill_normal(uint64_t seed, float *out, size_t n, double mean, double std)
{
    rng_t r = {seed};
    for (size_t i = 0; i < n; i++)
        out[i] = (float)mean + rng_normal(&r, std);
}

typedef enum fill { FILL_NORMAL, FILL_ONES, FILL_ROPE_FREQS, FILL_ROPE_SHORT } fill_t;

typedef struct tensor_gen {
    char name[64];
    uint64_t seed;
    cr_type_t type;
    int64_t ne0, rows;
    int64_t depth;      /* matrices in a stack (GGUF ne[2]); 1 for 2-D */
    int64_t distinct;   /* rows drawn, then repeated (rn_synth_opts_t) */
    fill_t fill;
    double mean, std;   /* FILL_NORMAL */
} tensor_gen_t;

static cr_status_t gen_tensor(void *ctx, const char *name, uint64_t size_bytes,
                              cr_gguf_sink_t *sink, cr_err_t *err)
{
    CR_UNUSED(name);
    const tensor_gen_t *g = ctx;
    const be_type_traits_t *tt = be_type_traits_at(g->type, BE_SIMD_SCALAR);
    uint64_t row_bytes = 0;
    if (!tt || !cr_type_row_bytes(g->type, (uint64_t)g->ne0, &row_bytes) ||
        row_bytes * (uint64_t)(g->rows * g->depth) != size_bytes)
        return cr_err_set(err, CR_E_INTERNAL, "synth: tensor '%s' size mismatch",
                          g->name);
    int64_t n_rows = g->rows * g->depth;
    int64_t drawn = g->distinct > 0 ? CR_MIN(g->distinct, n_rows) : n_rows;
    /* repeated rows: all drawn rows kept, then written again in turn */
    size_t keep = drawn < n_rows ? (size_t)drawn : 1;
    float *row = malloc((size_t)g->ne0 * sizeof *row);
    uint8_t *qs = malloc((size_t)row_bytes * keep);
    if (!row || !qs) {
        free(row);
        free(qs);
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    }
    rng_t r = {g->seed};
    cr_status_t st = CR_OK;
    for (int64_t i = 0; i < drawn && !st; i++) {
        void *q = keep > 1 ? qs + (size_t)i * row_bytes : qs;
        for (int64_t j = 0; j < g->ne0; j++) {
            if (g->fill == FILL_ONES)
                row[j] = 1.0f;
            else if (g->fill == FILL_ROPE_FREQS) /* 1 for fast pairs .. 8 */
                row[j] = 1.0f + 7.0f * (float)j / (float)CR_MAX(1, g->ne0 - 1);
            else if (g->fill == FILL_ROPE_SHORT) /* 1 .. 1.5 */
                row[j] = 1.0f + 0.5f * (float)j / (float)CR_MAX(1, g->ne0 - 1);
            else if (g->mean != 0)
                row[j] = (float)g->mean + rng_normal(&r, g->std);
            else
                row[j] = rng_normal(&r, g->std);
        }
        tt->from_float(row, q, g->ne0);
        st = cr_gguf_sink_write(sink, q, (size_t)row_bytes, err);
    }
    for (int64_t i = drawn; i < n_rows && !st; i++)
        st = cr_gguf_sink_write(sink, qs + (size_t)(i % drawn) * row_bytes,
                                (size_t)row_bytes, err);
    free(row);
    free(qs);
    return st;
}

/* ---- the model -------------------------------------------------------- */

/* llama_ftype of a file whose matrices are mostly t (_M when mixed). */
static uint32_t file_type_of(cr_type_t t, bool mix)
{
    switch (t) {
    case CR_TYPE_F32: return 0;
    case CR_TYPE_F16: return 1;
    case CR_TYPE_Q4_0: return 2;
    case CR_TYPE_Q4_1: return 3;
    case CR_TYPE_Q8_0: return 7;
    case CR_TYPE_Q5_0: return 8;
    case CR_TYPE_Q5_1: return 9;
    case CR_TYPE_Q2_K: return 10;
    case CR_TYPE_Q3_K: return mix ? 12 : 11;
    case CR_TYPE_Q4_K: return mix ? 15 : 14;
    case CR_TYPE_Q5_K: return mix ? 17 : 16;
    case CR_TYPE_Q6_K: return 18;
    case CR_TYPE_BF16: return 32;
    case CR_TYPE_IQ4_NL: return 25;
    case CR_TYPE_IQ4_XS: return 30;
    case CR_TYPE_IQ2_XXS: return 19;
    case CR_TYPE_IQ2_XS: return 20;
    case CR_TYPE_IQ3_XXS: return 23;
    case CR_TYPE_IQ3_S: return 26;
    case CR_TYPE_IQ2_S: return 28;
    case CR_TYPE_IQ1_S: return 24;
    case CR_TYPE_MXFP4: return 38; /* MXFP4_MOE: llama.cpp's only MXFP4 file type */
    default: return 0;
    }
}

static cr_status_t check_type(cr_type_t t, const rn_synth_opts_t *o, cr_err_t *err)
{
    const be_type_traits_t *tt = be_type_traits_at(t, BE_SIMD_SCALAR);
    if (!tt || !tt->vec_dot)
        return cr_err_set(err, CR_E_INVALID, "type %d cannot be written", (int)t);
    if (o->dim % (int)tt->block_elems || o->ffn % (int)tt->block_elems)
        return cr_err_set(err, CR_E_INVALID,
                          "dim %d and ffn %d must be multiples of %u for %s",
                          o->dim, o->ffn, tt->block_elems, tt->name);
    return CR_OK;
}

static const char *arch_of(const rn_synth_opts_t *o)
{
    return o->arch ? o->arch : "llama";
}

static bool is_arch(const rn_synth_opts_t *o, const char *name)
{
    return !strcmp(arch_of(o), name);
}

static bool is_encoder(const rn_synth_opts_t *o)
{
    return is_arch(o, "bert") || is_arch(o, "nomic-bert");
}

static int head_dim_of(const rn_synth_opts_t *o)
{
    return o->head_dim > 0 && !is_arch(o, "llama") ? o->head_dim : o->dim / o->n_heads;
}

static bool has_experts(const rn_synth_opts_t *o)
{
    return o->n_experts > 0;
}

static int expert_ffn_of(const rn_synth_opts_t *o)
{
    bool own = is_arch(o, "qwen3moe") || is_arch(o, "gpt-oss");
    return own && o->expert_ffn > 0 ? o->expert_ffn : o->ffn;
}

static cr_type_t expert_type_of(const rn_synth_opts_t *o)
{
    return o->expert_type != CR_TYPE_F32 ? o->expert_type : o->type;
}

static cr_status_t check_experts(const rn_synth_opts_t *o, const be_type_traits_t *tt,
                                 cr_err_t *err)
{
    bool gpt_oss = is_arch(o, "gpt-oss");
    if ((is_arch(o, "qwen3moe") || gpt_oss) && o->n_experts < 1)
        return cr_err_set(err, CR_E_INVALID, "%s needs experts (n_experts >= 1)",
                          arch_of(o));
    if (gpt_oss && o->sliding_window < 1)
        return cr_err_set(err, CR_E_INVALID, "gpt-oss needs a sliding window");
    if (!has_experts(o))
        return CR_OK;
    if (!is_arch(o, "qwen3moe") && !is_arch(o, "llama") && !gpt_oss)
        return cr_err_set(err, CR_E_INVALID, "experts are written for qwen3moe, gpt-oss "
                          "and llama only, not '%.64s'", arch_of(o));
    const be_type_traits_t *et = be_type_traits_at(expert_type_of(o), BE_SIMD_SCALAR);
    if (!et || !et->vec_dot || o->dim % (int)et->block_elems ||
        expert_ffn_of(o) % (int)et->block_elems)
        return cr_err_set(err, CR_E_INVALID, "expert type %d cannot be written for dim "
                          "%d / expert ffn %d", (int)expert_type_of(o), o->dim,
                          expert_ffn_of(o));
    if (o->n_experts > 1024 || o->n_experts_used < 1 || o->n_experts_used > o->n_experts)
        return cr_err_set(err, CR_E_INVALID, "experts %d / used %d: need 1 <= used <= "
                          "experts <= 1024", o->n_experts, o->n_experts_used);
    int Fe = expert_ffn_of(o), Fs = o->shared_ffn;
    int blk = (int)tt->block_elems;
    if (o->mix)
        blk = CR_MAX(blk, (int)be_type_traits_at(o->mix_type, BE_SIMD_SCALAR)->block_elems);
    if (Fe < 1 || Fe > SYNTH_MAX_DIM || Fe % blk || Fs < 0 || Fs > SYNTH_MAX_DIM ||
        Fs % blk || o->expert_gating < 0 || o->expert_gating > 3)
        return cr_err_set(err, CR_E_INVALID, "expert ffn %d / shared ffn %d must be "
                          "multiples of %d up to %d; gating %d in 0..3", Fe, Fs, blk,
                          SYNTH_MAX_DIM, o->expert_gating);
    return CR_OK;
}

static cr_status_t check_opts(const rn_synth_opts_t *o, cr_err_t *err)
{
    const be_type_traits_t *tt = be_type_traits_at(o->type, BE_SIMD_SCALAR);
    if (!tt || !tt->vec_dot)
        return cr_err_set(err, CR_E_INVALID, "type %d cannot be written", (int)o->type);
    if (o->dim < 1 || o->dim > SYNTH_MAX_DIM || o->ffn < 1 || o->ffn > SYNTH_MAX_DIM)
        return cr_err_set(err, CR_E_INVALID, "dim %d / ffn %d out of range 1..%d",
                          o->dim, o->ffn, SYNTH_MAX_DIM);
    if (o->n_layers < 1 || o->n_layers > SYNTH_MAX_LAYERS)
        return cr_err_set(err, CR_E_INVALID, "layers %d out of range 1..%d",
                          o->n_layers, SYNTH_MAX_LAYERS);
    static const char *const archs[] = {"llama", "qwen2", "qwen3", "gemma", "gemma2",
                                        "gemma3", "phi3", "bert", "nomic-bert",
                                        "qwen3moe", "gpt-oss", "granite", "olmo2",
                                        "mistral3", "exaone", "smollm3", "command-r",
                                        "cohere2", "exaone4", "qwen2vl"};
    size_t ai = 0;
    while (ai < CR_ARRAY_LEN(archs) && !is_arch(o, archs[ai]))
        ai++;
    if (ai == CR_ARRAY_LEN(archs))
        return cr_err_set(err, CR_E_INVALID, "unknown architecture '%.64s'", arch_of(o));
    bool own_hd = o->head_dim > 0 && !is_arch(o, "llama");
    if (o->n_heads < 1 || o->n_kv_heads < 1 || (!own_hd && o->dim % o->n_heads) ||
        o->n_heads % o->n_kv_heads)
        return cr_err_set(err, CR_E_INVALID,
                          "heads %d / kv-heads %d must divide dim %d and each other",
                          o->n_heads, o->n_kv_heads, o->dim);
    int hd = head_dim_of(o);
    if (hd % 2 || hd > SYNTH_MAX_DIM || (int64_t)hd * o->n_heads > SYNTH_MAX_DIM)
        return cr_err_set(err, CR_E_INVALID, "head size %d must be even and heads x "
                          "head size at most %d", hd, SYNTH_MAX_DIM);

    if (o->ctx < 1)
        return cr_err_set(err, CR_E_INVALID, "ctx %d must be positive", o->ctx);
    if (o->rope_yarn > 0 && o->yarn_orig_ctx < 1)
        return cr_err_set(err, CR_E_INVALID, "yarn needs an original context length");
    if (o->pooling_type < 0 || o->pooling_type > 4)
        return cr_err_set(err, CR_E_INVALID, "pooling type %d is out of range 0..4",
                          o->pooling_type);
    cr_status_t est = check_experts(o, tt, err);
    if (est)
        return est;
    cr_status_t st = check_type(o->type, o, err);
    if (!st && o->mix)
        st = check_type(o->mix_type, o, err);
    if (!st && tt->block_elems > 1 && (hd * o->n_heads) % (int)tt->block_elems)
        st = cr_err_set(err, CR_E_INVALID, "heads x head size %d must be a multiple "
                        "of %u for %s", hd * o->n_heads, tt->block_elems, tt->name);
    return st;
}

/* Everything the writer borrows until it is written. */
typedef struct synth {
    cr_gguf_writer_t *w;
    tensor_gen_t *gens;
    int n_gens, cap_gens;
} synth_t;

/* A tensor of GGUF ne {ne0, rows} (depth 1) or {ne0, rows, depth}. */
static cr_status_t add_gen_3d(synth_t *s, const rn_synth_opts_t *o,
                              const char *name, cr_type_t type, int64_t ne0,
                              int64_t rows, int64_t depth, fill_t fill, double mean,
                              double std, cr_err_t *err)
{
    if (s->n_gens == s->cap_gens)
        return cr_err_set(err, CR_E_INTERNAL, "synth: too many tensors");
    tensor_gen_t *g = &s->gens[s->n_gens];
    snprintf(g->name, sizeof g->name, "%s", name);
    /* A distinct stream per tensor: mix the seed with the tensor index. */
    rng_t r = {o->seed ^ (0x2545f4914f6cdd1dull * (uint64_t)(s->n_gens + 1))};
    g->seed = rng_next(&r);
    g->type = type;
    g->ne0 = ne0;
    g->rows = rows;
    g->depth = depth;
    g->distinct = o->distinct_rows;
    g->fill = fill;
    g->mean = mean;
    g->std = std;
    s->n_gens++;
    uint64_t ne[3] = {(uint64_t)ne0, (uint64_t)rows, (uint64_t)depth};
    uint32_t n_dims = depth > 1 ? 3 : rows > 1 ? 2 : 1;
    return cr_gguf_writer_add_tensor_fn(s->w, g->name, n_dims, ne, type, gen_tensor, g,
                                        NULL, err);
}

static cr_status_t add_gen_dist(synth_t *s, const rn_synth_opts_t *o,
                                const char *name, cr_type_t type, int64_t ne0,
                                int64_t rows, fill_t fill, double mean, double std,
                                cr_err_t *err)
{
    return add_gen_3d(s, o, name, type, ne0, rows, 1, fill, mean, std, err);
}

static cr_status_t add_gen(synth_t *s, const rn_synth_opts_t *o, const char *name,
                           cr_type_t type, int64_t ne0, int64_t rows, fill_t fill,
                           cr_err_t *err)
{
    double std = o->weight_std > 0 ? o->weight_std : SYNTH_STD;
    return add_gen_dist(s, o, name, type, ne0, rows, fill, 0, std, err);
}

/* One per-layer tensor blk.N.<what>.<kind> of GGUF ne {ne0, rows}. */
typedef enum part { PART_MAT, PART_MAT_HI, PART_NORM, PART_BIAS, PART_SINK } part_t;
typedef struct layer_part {
    const char *what, *kind;
    int64_t ne0, rows;
    part_t part;
} layer_part_t;

/* olmo2's layer: no pre-norms; q/k norms over the whole q [Q] and k [KV]
 * (exaone4: per head, [hd]); post-norms of both sub-layers. */
static int layer_parts_olmo2(const rn_synth_opts_t *o, layer_part_t *p)
{
    int64_t D = o->dim, F = o->ffn, hd = head_dim_of(o);
    int64_t Q = hd * o->n_heads, KV = hd * o->n_kv_heads;
    bool per_head = is_arch(o, "exaone4");
    int n = 0;
    p[n++] = (layer_part_t){"attn_q", "weight", D, Q, PART_MAT};
    p[n++] = (layer_part_t){"attn_q_norm", "weight", per_head ? hd : Q, 1, PART_NORM};
    p[n++] = (layer_part_t){"attn_k", "weight", D, KV, PART_MAT};
    p[n++] = (layer_part_t){"attn_k_norm", "weight", per_head ? hd : KV, 1, PART_NORM};
    p[n++] = (layer_part_t){"attn_v", "weight", D, KV, PART_MAT_HI};
    p[n++] = (layer_part_t){"attn_output", "weight", Q, D, PART_MAT};
    p[n++] = (layer_part_t){"post_attention_norm", "weight", D, 1, PART_NORM};
    p[n++] = (layer_part_t){"ffn_gate", "weight", D, F, PART_MAT};
    p[n++] = (layer_part_t){"ffn_down", "weight", F, D, PART_MAT_HI};
    p[n++] = (layer_part_t){"ffn_up", "weight", D, F, PART_MAT};
    p[n++] = (layer_part_t){"post_ffw_norm", "weight", D, 1, PART_NORM};
    return n;
}

/* command-r's and cohere2's layer: one norm before attention and ffn. */
static int layer_parts_cohere(const rn_synth_opts_t *o, layer_part_t *p)
{
    int64_t D = o->dim, F = o->ffn, hd = head_dim_of(o);
    int64_t Q = hd * o->n_heads, KV = hd * o->n_kv_heads;
    int n = 0;
    p[n++] = (layer_part_t){"attn_norm", "weight", D, 1, PART_NORM};
    p[n++] = (layer_part_t){"attn_q", "weight", D, Q, PART_MAT};
    p[n++] = (layer_part_t){"attn_k", "weight", D, KV, PART_MAT};
    p[n++] = (layer_part_t){"attn_v", "weight", D, KV, PART_MAT_HI};
    p[n++] = (layer_part_t){"attn_output", "weight", Q, D, PART_MAT};
    p[n++] = (layer_part_t){"ffn_gate", "weight", D, F, PART_MAT};
    p[n++] = (layer_part_t){"ffn_down", "weight", F, D, PART_MAT_HI};
    p[n++] = (layer_part_t){"ffn_up", "weight", D, F, PART_MAT};
    return n;
}

static bool is_cohere(const rn_synth_opts_t *o)
{
    return is_arch(o, "command-r") || is_arch(o, "cohere2");
}

/* The tensors of one layer of o's architecture, in llama.cpp's order;
 * returns how many (at most 20). */
static int layer_parts(const rn_synth_opts_t *o, layer_part_t *p)
{
    if (is_arch(o, "olmo2") || is_arch(o, "exaone4"))
        return layer_parts_olmo2(o, p);
    if (is_cohere(o))
        return layer_parts_cohere(o, p);
    int64_t D = o->dim, F = o->ffn, hd = head_dim_of(o);
    int64_t Q = hd * o->n_heads, KV = hd * o->n_kv_heads;
    bool qwen2 = is_arch(o, "qwen2") || is_arch(o, "qwen2vl");
    bool qwen3 = is_arch(o, "qwen3") || is_arch(o, "qwen3moe");
    bool gemma = is_arch(o, "gemma2") || is_arch(o, "gemma3");
    bool qk_norm = qwen3 || is_arch(o, "gemma3");
    int n = 0;
    if (is_arch(o, "gpt-oss")) {
        /* the experts and their biases are add_experts' */
        p[n++] = (layer_part_t){"attn_norm", "weight", D, 1, PART_NORM};
        p[n++] = (layer_part_t){"post_attention_norm", "weight", D, 1, PART_NORM};
        p[n++] = (layer_part_t){"attn_q", "weight", D, Q, PART_MAT};
        p[n++] = (layer_part_t){"attn_q", "bias", Q, 1, PART_BIAS};
        p[n++] = (layer_part_t){"attn_k", "weight", D, KV, PART_MAT};
        p[n++] = (layer_part_t){"attn_k", "bias", KV, 1, PART_BIAS};
        p[n++] = (layer_part_t){"attn_v", "weight", D, KV, PART_MAT_HI};
        p[n++] = (layer_part_t){"attn_v", "bias", KV, 1, PART_BIAS};
        p[n++] = (layer_part_t){"attn_output", "weight", Q, D, PART_MAT};
        p[n++] = (layer_part_t){"attn_output", "bias", D, 1, PART_BIAS};
        p[n++] = (layer_part_t){"attn_sinks", "weight", o->n_heads, 1, PART_SINK};
        return n;
    }
    if (is_encoder(o)) {
        bool bert = is_arch(o, "bert");
        if (bert) {
            p[n++] = (layer_part_t){"attn_q", "weight", D, Q, PART_MAT};
            p[n++] = (layer_part_t){"attn_q", "bias", Q, 1, PART_BIAS};
            p[n++] = (layer_part_t){"attn_k", "weight", D, KV, PART_MAT};
            p[n++] = (layer_part_t){"attn_k", "bias", KV, 1, PART_BIAS};
            p[n++] = (layer_part_t){"attn_v", "weight", D, KV, PART_MAT_HI};
            p[n++] = (layer_part_t){"attn_v", "bias", KV, 1, PART_BIAS};
        } else {
            p[n++] = (layer_part_t){"attn_qkv", "weight", D, Q + 2 * KV, PART_MAT};
        }
        p[n++] = (layer_part_t){"attn_output", "weight", Q, D, PART_MAT};
        if (bert)
            p[n++] = (layer_part_t){"attn_output", "bias", D, 1, PART_BIAS};
        p[n++] = (layer_part_t){"attn_output_norm", "weight", D, 1, PART_NORM};
        p[n++] = (layer_part_t){"attn_output_norm", "bias", D, 1, PART_BIAS};
        p[n++] = (layer_part_t){"ffn_up", "weight", D, F, PART_MAT};
        if (bert)
            p[n++] = (layer_part_t){"ffn_up", "bias", F, 1, PART_BIAS};
        else
            p[n++] = (layer_part_t){"ffn_gate", "weight", D, F, PART_MAT};
        p[n++] = (layer_part_t){"ffn_down", "weight", F, D, PART_MAT_HI};
        if (bert)
            p[n++] = (layer_part_t){"ffn_down", "bias", D, 1, PART_BIAS};
        p[n++] = (layer_part_t){"layer_output_norm", "weight", D, 1, PART_NORM};
        p[n++] = (layer_part_t){"layer_output_norm", "bias", D, 1, PART_BIAS};
        return n;
    }
    p[n++] = (layer_part_t){"attn_norm", "weight", D, 1, PART_NORM};
    if (is_arch(o, "phi3")) {
        p[n++] = (layer_part_t){"attn_qkv", "weight", D, Q + 2 * KV, PART_MAT};
    } else {
        p[n++] = (layer_part_t){"attn_q", "weight", D, Q, PART_MAT};
        if (qwen2)
            p[n++] = (layer_part_t){"attn_q", "bias", Q, 1, PART_BIAS};
        if (qk_norm)
            p[n++] = (layer_part_t){"attn_q_norm", "weight", hd, 1, PART_NORM};
        p[n++] = (layer_part_t){"attn_k", "weight", D, KV, PART_MAT};
        if (qwen2)
            p[n++] = (layer_part_t){"attn_k", "bias", KV, 1, PART_BIAS};
        if (qk_norm)
            p[n++] = (layer_part_t){"attn_k_norm", "weight", hd, 1, PART_NORM};
        p[n++] = (layer_part_t){"attn_v", "weight", D, KV, PART_MAT_HI};
        if (qwen2)
            p[n++] = (layer_part_t){"attn_v", "bias", KV, 1, PART_BIAS};
    }
    p[n++] = (layer_part_t){"attn_output", "weight", Q, D, PART_MAT};
    if (gemma)
        p[n++] = (layer_part_t){"post_attention_norm", "weight", D, 1, PART_NORM};
    p[n++] = (layer_part_t){"ffn_norm", "weight", D, 1, PART_NORM};
    if (has_experts(o)) {
        /* the FFN is add_experts' */
    } else if (is_arch(o, "phi3")) {
        p[n++] = (layer_part_t){"ffn_up", "weight", D, 2 * F, PART_MAT};
        p[n++] = (layer_part_t){"ffn_down", "weight", F, D, PART_MAT_HI};
    } else {
        p[n++] = (layer_part_t){"ffn_gate", "weight", D, F, PART_MAT};
        p[n++] = (layer_part_t){"ffn_down", "weight", F, D, PART_MAT_HI};
        p[n++] = (layer_part_t){"ffn_up", "weight", D, F, PART_MAT};
    }
    if (gemma)
        p[n++] = (layer_part_t){"post_ffw_norm", "weight", D, 1, PART_NORM};
    return n;
}

/* A reranker's classifier head (bert with pooling_type 4), as llama.cpp
 * names it: cls [dim][dim] and its bias, then one output row and bias. */
static cr_status_t add_rank_head(synth_t *s, const rn_synth_opts_t *o, cr_err_t *err)
{
    if (o->pooling_type != 4 || !is_arch(o, "bert"))
        return CR_OK;
    cr_status_t st = add_gen(s, o, "cls.weight", o->type, o->dim, o->dim, FILL_NORMAL,
                             err);
    st = st ? st : add_gen_dist(s, o, "cls.bias", CR_TYPE_F32, o->dim, 1, FILL_NORMAL, 0,
                                0.1, err);
    st = st ? st : add_gen(s, o, "cls.output.weight", o->type, o->dim, 1, FILL_NORMAL,
                           err);
    return st ? st : add_gen_dist(s, o, "cls.output.bias", CR_TYPE_F32, 1, 1, FILL_NORMAL,
                                  0, 0.1, err);
}

/* Layer l's MoE FFN: the F32 router, the expert stacks [E][rows][cols]
 * (down in the mix type), then the optional shared expert, in llama.cpp's
 * order; gpt-oss's biases after them. */
static cr_status_t add_experts(synth_t *s, const rn_synth_opts_t *o, int l,
                               cr_err_t *err)
{
    typedef struct {
        const char *what;
        int64_t ne0, rows, depth;
        bool hi, router;
    } ex_part_t;
    int64_t D = o->dim, E = o->n_experts, Fe = expert_ffn_of(o), Fs = o->shared_ffn;
    ex_part_t p[8];
    int n = 0;
    p[n++] = (ex_part_t){"ffn_gate_inp", D, E, 1, false, true};
    p[n++] = (ex_part_t){"ffn_gate_exps", D, Fe, E, false, false};
    p[n++] = (ex_part_t){"ffn_down_exps", Fe, D, E, true, false};
    p[n++] = (ex_part_t){"ffn_up_exps", D, Fe, E, false, false};
    if (Fs > 0) {
        if (o->shared_gate)
            p[n++] = (ex_part_t){"ffn_gate_inp_shexp", D, 1, 1, false, true};
        p[n++] = (ex_part_t){"ffn_gate_shexp", D, Fs, 1, false, false};
        p[n++] = (ex_part_t){"ffn_down_shexp", Fs, D, 1, true, false};
        p[n++] = (ex_part_t){"ffn_up_shexp", D, Fs, 1, false, false};
    }
    double std = o->weight_std > 0 ? o->weight_std : SYNTH_STD;
    cr_status_t st = CR_OK;
    char name[64];
    for (int i = 0; i < n && !st; i++) {
        snprintf(name, sizeof name, "blk.%d.%s.weight", l, p[i].what);
        cr_type_t t = p[i].router ? CR_TYPE_F32 : p[i].hi && o->mix ? o->mix_type : o->type;
        if (p[i].depth > 1)
            t = expert_type_of(o);
        double sd = p[i].router && o->router_std > 0 ? o->router_std : std;
        st = add_gen_3d(s, o, name, t, p[i].ne0, p[i].rows, p[i].depth, FILL_NORMAL, 0, sd,
                        err);
    }
    if (!is_arch(o, "gpt-oss"))
        return st;
    /* gpt-oss: F32 biases [E] and [E][rows] (GGUF ne {rows, E}), large
     * enough that dropping any one shows */
    const ex_part_t bias[4] = {{"ffn_gate_inp", E, 1, 1, false, false},
                               {"ffn_gate_exps", Fe, E, 1, false, false},
                               {"ffn_down_exps", D, E, 1, false, false},
                               {"ffn_up_exps", Fe, E, 1, false, false}};
    for (int i = 0; i < 4 && !st; i++) {
        snprintf(name, sizeof name, "blk.%d.%s.bias", l, bias[i].what);
        st = add_gen_dist(s, o, name, CR_TYPE_F32, bias[i].ne0, bias[i].rows, FILL_NORMAL,
                          0, 0.5, err);
    }
    return st;
}

/* <arch>.expert_* (see synth.h). */
static cr_status_t add_expert_keys(cr_gguf_writer_t *w, const rn_synth_opts_t *o,
                                   cr_err_t *err)
{
    char key[96];
    const char *arch = arch_of(o);
#define EKEY(suffix) (snprintf(key, sizeof key, "%s." suffix, arch), key)
    cr_status_t st = cr_gguf_writer_add_u32(w, EKEY("expert_count"),
                                            (uint32_t)o->n_experts, err);
    st = st ? st : cr_gguf_writer_add_u32(w, EKEY("expert_used_count"),
                                          (uint32_t)o->n_experts_used, err);
    if (!st && (is_arch(o, "qwen3moe") || is_arch(o, "gpt-oss")))
        st = cr_gguf_writer_add_u32(w, EKEY("expert_feed_forward_length"),
                                    (uint32_t)expert_ffn_of(o), err);
    if (!st && o->shared_ffn > 0)
        st = cr_gguf_writer_add_u32(w, EKEY("expert_shared_feed_forward_length"),
                                    (uint32_t)o->shared_ffn, err);
    if (!st && o->expert_gating > 0)
        st = cr_gguf_writer_add_u32(w, EKEY("expert_gating_func"),
                                    (uint32_t)o->expert_gating, err);
    if (!st && o->expert_norm >= 0)
        st = cr_gguf_writer_add_bool(w, EKEY("expert_weights_norm"), o->expert_norm > 0,
                                     err);
    if (!st && o->expert_scale > 0)
        st = cr_gguf_writer_add_f32(w, EKEY("expert_weights_scale"), o->expert_scale,
                                    err);
#undef EKEY
    return st;
}

/* granite's multipliers, far from 1 as a real granite 3's are (embedding
 * 4, residual 0.5, attention 0.5 where 1/sqrt(head_dim) would be usual,
 * logits divided by 8), chosen so that in a small random model each one
 * visibly changes the logits; mistral3's vision keys when o->vision_stub. */
static cr_status_t family_keys(const rn_synth_opts_t *o, cr_gguf_writer_t *w,
                               cr_err_t *err)
{
    const char *arch = arch_of(o);
    char key[96];
    cr_status_t st = CR_OK;
    if (is_arch(o, "granite")) {
        snprintf(key, sizeof key, "%s.embedding_scale", arch);
        st = cr_gguf_writer_add_f32(w, key, 4.0f, err);
        snprintf(key, sizeof key, "%s.residual_scale", arch);
        st = st ? st : cr_gguf_writer_add_f32(w, key, 0.5f, err);
        snprintf(key, sizeof key, "%s.attention.scale", arch);
        st = st ? st : cr_gguf_writer_add_f32(w, key, 0.5f, err);
        snprintf(key, sizeof key, "%s.logit_scale", arch);
        st = st ? st : cr_gguf_writer_add_f32(w, key, 8.0f, err);
    }
    /* command-r, cohere2: LayerNorm epsilon (rms_eps's value), logits
     * times 0.25, and cohere2's window (4096 unless o->sliding_window) */
    if (!st && is_cohere(o)) {
        snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", arch);
        st = cr_gguf_writer_add_f32(w, key, o->rms_eps, err);
        snprintf(key, sizeof key, "%s.logit_scale", arch);
        st = st ? st : cr_gguf_writer_add_f32(w, key, 0.25f, err);
    }
    if (!st && is_arch(o, "cohere2") && o->sliding_window == 0) {
        snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
        st = cr_gguf_writer_add_u32(w, key, 4096, err);
    }
    /* YaRN's extra keys (Ministral 3's rope; its type, factor and original
     * context are written with rope_yarn) and the attention temperature */
    const struct {
        const char *suffix;
        float v;
    } opt_f32[] = {
        {"rope.scaling.yarn_beta_fast", o->yarn_beta_fast},
        {"rope.scaling.yarn_beta_slow", o->yarn_beta_slow},
        {"rope.scaling.yarn_log_multiplier", o->yarn_log_mul},
        {"attention.temperature_scale", o->attn_temp},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(opt_f32) && !st; i++) {
        if (opt_f32[i].v <= 0)
            continue;
        snprintf(key, sizeof key, "%s.%s", arch, opt_f32[i].suffix);
        st = cr_gguf_writer_add_f32(w, key, opt_f32[i].v, err);
    }
    if (o->vision_stub) {
        snprintf(key, sizeof key, "%s.vision.block_count", arch);
        st = st ? st : cr_gguf_writer_add_u32(w, key, 1, err);
        snprintf(key, sizeof key, "%s.vision.embedding_length", arch);
        st = st ? st : cr_gguf_writer_add_u32(w, key, 16, err);
    }
    return st;
}

/* Ollama ships mistral3's vision tower and projector in the model file: two
 * stand-ins the text model must leave alone. */
static cr_status_t vision_stub_tensors(const rn_synth_opts_t *o, synth_t *s,
                                       cr_err_t *err)
{
    cr_status_t st = add_gen(s, o, "v.blk.0.attn_q.weight", CR_TYPE_F32, 16, 16,
                             FILL_NORMAL, err);
    return st ? st : add_gen(s, o, "mm.linear_1.weight", CR_TYPE_F32, 16, o->dim,
                             FILL_NORMAL, err);
}

static cr_status_t build(const rn_synth_opts_t *o, synth_t *s, cr_err_t *err)
{
    cr_status_t st = check_opts(o, err);
    if (st)
        return st;
    s->w = cr_gguf_writer_new();
    s->cap_gens = 12 + 20 * o->n_layers;
    s->gens = calloc((size_t)s->cap_gens, sizeof *s->gens);
    if (!s->w || !s->gens)
        return cr_err_set(err, CR_E_NOMEM, "synth: out of memory");
    cr_gguf_writer_t *w = s->w;
    int head_dim = head_dim_of(o);
    const char *arch = arch_of(o);
    bool llama = is_arch(o, "llama"), encoder = is_encoder(o);
    char key[96];
#define KEY(suffix) (snprintf(key, sizeof key, "%s." suffix, arch), key)

    st = cr_gguf_writer_add_str(w, "general.architecture", arch, err);
    st = st ? st : cr_gguf_writer_add_str(w, "general.name", o->name ? o->name : "synth", err);
    if (o->chat_template)
        st = st ? st : cr_gguf_writer_add_str(w, "tokenizer.chat_template", o->chat_template, err);
    st = st ? st : cr_gguf_writer_add_u32(w, "general.file_type", file_type_of(o->type, o->mix), err);
    if (!st && be_type_traits_at(o->type, BE_SIMD_SCALAR)->block_elems > 1)
        st = cr_gguf_writer_add_u32(w, "general.quantization_version", 2, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("context_length"), (uint32_t)o->ctx, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("embedding_length"), (uint32_t)o->dim, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("block_count"), (uint32_t)o->n_layers, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("feed_forward_length"), (uint32_t)o->ffn, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("attention.head_count"), (uint32_t)o->n_heads, err);
    st = st ? st : cr_gguf_writer_add_u32(w, KEY("attention.head_count_kv"),
                                          (uint32_t)o->n_kv_heads, err);
    if (encoder) {
        /* LayerNorm epsilon (rms_eps's value), bidirectional, pooling */
        st = st ? st : cr_gguf_writer_add_f32(w, KEY("attention.layer_norm_epsilon"),
                                              o->rms_eps, err);
        st = st ? st : cr_gguf_writer_add_bool(w, KEY("attention.causal"), false, err);
        st = st ? st : cr_gguf_writer_add_u32(w, "tokenizer.ggml.token_type_count", 2, err);
    } else {
        st = st ? st : cr_gguf_writer_add_f32(w, KEY("attention.layer_norm_rms_epsilon"),
                                              o->rms_eps, err);
    }
    /* any architecture may pool (qwen3 embedding models pool the last) */
    if (!st && o->pooling_type > 0)
        st = cr_gguf_writer_add_u32(w, KEY("pooling_type"), (uint32_t)o->pooling_type, err);
    if (!is_arch(o, "bert")) {
        st = st ? st : cr_gguf_writer_add_f32(w, KEY("rope.freq_base"), o->rope_base, err);
        st = st ? st : cr_gguf_writer_add_u32(w, KEY("rope.dimension_count"),
                                              (uint32_t)head_dim, err);
    }
    if (!st && is_arch(o, "qwen2vl")) {
        /* M-RoPE sections in Qwen2.5-VL's proportions (16, 24, 24, 0 of
         * 64 pairs), scaled to this head size */
        int32_t pairs = head_dim / 2, t = pairs / 4, h = (pairs - t) / 2;
        int32_t sec[4] = {t, h, pairs - t - h, 0};
        st = cr_gguf_writer_add_arr(w, KEY("rope.dimension_sections"), CR_GGUF_I32, sec, 4,
                                    err);
    }
    if (!llama) {
        st = st ? st : cr_gguf_writer_add_u32(w, KEY("attention.key_length"),
                                              (uint32_t)head_dim, err);
        st = st ? st : cr_gguf_writer_add_u32(w, KEY("attention.value_length"),
                                              (uint32_t)head_dim, err);
    }
    if (!st && o->sliding_window > 0)
        st = cr_gguf_writer_add_u32(w, KEY("attention.sliding_window"),
                                    (uint32_t)o->sliding_window, err);
    if (!st && o->swa_pattern > 0)
        st = cr_gguf_writer_add_u32(w, KEY("attention.sliding_window_pattern"),
                                    (uint32_t)o->swa_pattern, err);
    if (!st && o->attn_softcap > 0)
        st = cr_gguf_writer_add_f32(w, KEY("attn_logit_softcapping"), o->attn_softcap,
                                    err);
    if (!st && o->longrope) {
        st = cr_gguf_writer_add_f32(w, KEY("rope.scaling.attn_factor"), 1.2f, err);
        st = st ? st : cr_gguf_writer_add_u32(w, KEY("rope.scaling.original_context_length"),
                                              16, err);
    }
    if (!st && o->rope_linear > 0) {
        st = cr_gguf_writer_add_str(w, KEY("rope.scaling.type"), "linear", err);
        st = st ? st : cr_gguf_writer_add_f32(w, KEY("rope.scaling.factor"), o->rope_linear,
                                              err);
    }
    if (!st && o->rope_yarn > 0) {
        st = cr_gguf_writer_add_str(w, KEY("rope.scaling.type"), "yarn", err);
        st = st ? st : cr_gguf_writer_add_f32(w, KEY("rope.scaling.factor"), o->rope_yarn,
                                              err);
        st = st ? st : cr_gguf_writer_add_u32(w, KEY("rope.scaling.original_context_length"),
                                              (uint32_t)o->yarn_orig_ctx, err);
    }
    if (!st && o->final_softcap > 0)
        st = cr_gguf_writer_add_f32(w, KEY("final_logit_softcapping"), o->final_softcap,
                                    err);
    if (!st && has_experts(o))
        st = add_expert_keys(w, o, err);
    st = st ? st : family_keys(o, w, err);
    if (st)
        return st;

    /* Tokenizer. */
    int n_vocab = 0;
    if (o->vocab_from) {
        cr_gguf_t *g = NULL;
        st = cr_gguf_open(o->vocab_from, &g, err);
        if (st)
            return cr_err_wrap(err, "vocab %s", o->vocab_from);
        const cr_gguf_array_t *toks = NULL;
        if (!cr_gguf_get_arr(g, "tokenizer.ggml.tokens", &toks) ||
            toks->type != CR_GGUF_STRING || toks->n == 0 || toks->n > INT32_MAX) {
            cr_gguf_close(&g);
            return cr_err_set(err, CR_E_INVALID,
                              "vocab %s: no tokenizer.ggml.tokens string array",
                              o->vocab_from);
        }
        n_vocab = (int)toks->n;
        st = cr_gguf_writer_copy_prefix(w, g, "tokenizer.", err);
        cr_gguf_close(&g);
        if (st)
            return st;
    } else {
        vocab_t v = {0};
        st = vocab_builtin(&v, o->extra_tokens, err);
        /* encoders read the same pieces as WordPiece: U+2581 word starts,
         * bare continuations; <unk> <s> </s> serve as [UNK] [CLS] [SEP] */
        st = st ? st : cr_gguf_writer_add_str(w, "tokenizer.ggml.model",
                                              encoder ? "bert" : "llama", err);
        st = st ? st : cr_gguf_writer_add_str(w, "tokenizer.ggml.pre", "default", err);
        st = st ? st : cr_gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens",
                                                  (const char *const *)v.tokens,
                                                  (uint64_t)v.n, err);
        st = st ? st : cr_gguf_writer_add_arr(w, "tokenizer.ggml.scores", CR_GGUF_F32,
                                              v.scores, (uint64_t)v.n, err);
        st = st ? st : cr_gguf_writer_add_arr(w, "tokenizer.ggml.token_type", CR_GGUF_I32,
                                              v.types, (uint64_t)v.n, err);
        if (encoder) {
            st = st ? st : cr_gguf_writer_add_u32(w, "tokenizer.ggml.cls_token_id", 1, err);
            st = st ? st : cr_gguf_writer_add_u32(w, "tokenizer.ggml.seperator_token_id", 2,
                                                  err);
        } else {
            st = st ? st : cr_gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1, err);
            st = st ? st : cr_gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2, err);
        }
        st = st ? st : cr_gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0, err);
        st = st ? st : cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true, err);
        st = st ? st : cr_gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", encoder,
                                               err);
        n_vocab = v.n;
        vocab_free(&v);
        if (st)
            return st;
    }
    st = cr_gguf_writer_add_u32(w, KEY("vocab_size"), (uint32_t)n_vocab, err);
    if (st || o->vocab_only)
        return st;

    /* Tensors, in llama.cpp's order. Shapes are GGUF ne = {cols, rows}. */
    st = add_gen(s, o, "token_embd.weight", o->type, o->dim, n_vocab, FILL_NORMAL, err);
    if (encoder) {
        /* token types (2), learned positions (bert), embedding LayerNorm;
         * no output norm or matrix */
        st = st ? st : add_gen(s, o, "token_types.weight", o->type, o->dim, 2,
                               FILL_NORMAL, err);
        if (!st && is_arch(o, "bert"))
            st = add_gen(s, o, "position_embd.weight", o->type, o->dim, o->ctx,
                         FILL_NORMAL, err);
        st = st ? st : add_gen_dist(s, o, "token_embd_norm.weight", CR_TYPE_F32, o->dim,
                                    1, FILL_NORMAL, 1.0, 0.1, err);
        st = st ? st : add_gen_dist(s, o, "token_embd_norm.bias", CR_TYPE_F32, o->dim, 1,
                                    FILL_NORMAL, 0, 0.1, err);
        st = st ? st : add_rank_head(s, o, err);
    } else if (llama)
        st = st ? st : add_gen(s, o, "output_norm.weight", CR_TYPE_F32, o->dim, 1,
                               FILL_ONES, err);
    else
        st = st ? st : add_gen_dist(s, o, "output_norm.weight", CR_TYPE_F32, o->dim, 1,
                                    FILL_NORMAL, 1.0, 0.1, err);
    cr_type_t hi = o->mix ? o->mix_type : o->type;
    if (!st && !o->tied_output && !encoder && !is_cohere(o)) /* cohere: always tied */
        st = add_gen(s, o, "output.weight", hi, o->dim, n_vocab, FILL_NORMAL, err);
    if (!st && o->rope_freqs)
        st = add_gen(s, o, "rope_freqs.weight", CR_TYPE_F32, head_dim / 2, 1,
                     FILL_ROPE_FREQS, err);
    if (!st && o->vision_stub)
        st = vision_stub_tensors(o, s, err);
    if (!st && o->longrope) {
        st = add_gen(s, o, "rope_factors_long.weight", CR_TYPE_F32, head_dim / 2, 1,
                     FILL_ROPE_FREQS, err);
        st = st ? st : add_gen(s, o, "rope_factors_short.weight", CR_TYPE_F32,
                               head_dim / 2, 1, FILL_ROPE_SHORT, err);
    }
    /* Non-llama models get norms and biases that are not neutral, so a
     * test comparing against an independent reference sees each one. */
    char name[64];
    layer_part_t per[20];
    int n_per = layer_parts(o, per);
    for (int l = 0; l < o->n_layers && !st; l++) {
        for (int i = 0; i < n_per && !st; i++) {
            snprintf(name, sizeof name, "blk.%d.%s.%s", l, per[i].what, per[i].kind);
            switch (per[i].part) {
            case PART_MAT:
            case PART_MAT_HI:
                st = add_gen(s, o, name, per[i].part == PART_MAT_HI ? hi : o->type,
                             per[i].ne0, per[i].rows, FILL_NORMAL, err);
                break;
            case PART_NORM:
                st = llama ? add_gen(s, o, name, CR_TYPE_F32, per[i].ne0, 1, FILL_ONES, err)
                           : add_gen_dist(s, o, name, CR_TYPE_F32, per[i].ne0, 1,
                                          FILL_NORMAL, 1.0, 0.1, err);
                break;
            case PART_BIAS:
                st = add_gen_dist(s, o, name, CR_TYPE_F32, per[i].ne0, 1, FILL_NORMAL, 0,
                                  0.1, err);
                break;
            case PART_SINK: /* logits comparable to attention scores */
                st = add_gen_dist(s, o, name, CR_TYPE_F32, per[i].ne0, 1, FILL_NORMAL,
                                  1.0, 1.0, err);
                break;
            }
        }
        if (!st && has_experts(o))
            st = add_experts(s, o, l, err);
    }
#undef KEY
    return st;
}

static void synth_free(synth_t *s)
{
    cr_gguf_writer_destroy(&s->w);
    free(s->gens);
}

cr_status_t rn_synth_write(const rn_synth_opts_t *o, const char *path, cr_err_t *err)
{
    synth_t s = {0};
    cr_status_t st = build(o, &s, err);
    if (!st)
        st = cr_gguf_writer_write(s.w, path, err);
    synth_free(&s);
    return st;
}

cr_status_t rn_synth_write_memory(const rn_synth_opts_t *o, void **out, size_t *len,
                                  cr_err_t *err)
{
    synth_t s = {0};
    cr_status_t st = build(o, &s, err);
    if (!st)
        st = cr_gguf_writer_write_memory(s.w, out, len, err);
    synth_free(&s);
    return st;
}

void rn_synth_defaults(rn_synth_opts_t *o)
{
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->type = CR_TYPE_F32;
    o->dim = 64;
    o->n_layers = 2;
    o->n_heads = 4;
    o->n_kv_heads = 2;
    o->ffn = 128;
    o->ctx = 256;
    o->rope_base = 10000.0f;
    o->rms_eps = 1e-5f;
    o->expert_norm = -1;
}
