/* hf_import.c: Hugging Face folder to GGUF (see hf_import.h). */
#include "lib/prelude.h"
#include "services/registry/hf_import.h"
#include "lib/gguf_write.h"
#include "lib/safetensors.h"
#include "services/registry/hf_config.h"
#include "services/registry/hf_vocab.h"

#include <jansson.h>
#include <sys/stat.h>

#define MAX_JSON_BYTES (64u << 20) /* tokenizer.json of a 256k vocabulary */
#define CHUNK_BYTES (4u << 20) /* bytes copied at a time */

/* One GGUF tensor: its source tensors (several for stacked experts). */
typedef struct job {
    char name[64];
    const cr_st_tensor_t **src;
    const cr_st_file_t **file;
    size_t n_src;
    cr_type_t type;
    int64_t permute_heads; /* > 0: permute rows in groups of this many heads */
    bool add_one;          /* gemma norms: GGUF holds 1 + w (F32) */
    uint64_t rows_out;     /* > 0: only the first rows_out rows (gemma3's
                              embedding cut to the tokenizer's tokens) */
} job_t;

typedef struct conv {
    const reg_hf_file_t *files;
    size_t n_files;
    cr_st_set_t *set;
    bool *used;   /* per set tensor */
    reg_hf_hparams_t hp;
    job_t *jobs;
    size_t n_jobs, cap_jobs;
    uint8_t *buf; /* CHUNK_BYTES */
    reg_hf_rope_t rope; /* computed rope tensors (borrowed by the writer) */
    reg_hf_step_fn step; /* asked before each tensor (may be NULL) */
    void *step_ctx;
} conv_t;

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

bool reg_hf_is_folder_file(const char *name)
{
    return !strcmp(name, "config.json") || has_suffix(name, ".safetensors") ||
           !strcmp(name, "model.safetensors.index.json");
}

static const reg_hf_file_t *find_file(const conv_t *c, const char *name)
{
    for (size_t i = 0; i < c->n_files; i++)
        if (!strcmp(c->files[i].name, name))
            return &c->files[i];
    return NULL;
}

/* Reads a JSON file of the folder: *root (caller owns), or NULL with
 * CR_OK when absent and !required. */
static cr_status_t load_json(const conv_t *c, const char *name, bool required,
                             json_t **root, cr_err_t *err)
{
    *root = NULL;
    const reg_hf_file_t *f = find_file(c, name);
    if (!f)
        return required ? cr_err_set(err, CR_E_INVALID, "%s is missing: a "
                                     "safetensors model folder needs config.json, "
                                     "tokenizer.json and *.safetensors", name)
                        : CR_OK;
    struct stat sb;
    if (stat(f->path, &sb) != 0)
        return cr_err_set(err, CR_E_IO, "%s: %s", name, strerror(errno));
    if ((uint64_t)sb.st_size > MAX_JSON_BYTES)
        return cr_err_set(err, CR_E_TOO_LARGE, "%s: %lld bytes (at most %u)",
                          name, (long long)sb.st_size, MAX_JSON_BYTES);
    json_error_t jerr;
    *root = json_load_file(f->path, JSON_REJECT_DUPLICATES, &jerr);
    if (!*root)
        return cr_err_set(err, CR_E_INVALID, "%s: not JSON: %s (line %d)", name,
                          jerr.text, jerr.line);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return cr_err_set(err, CR_E_INVALID, "%s: not a JSON object", name);
    }
    return CR_OK;
}

/* Newer folders keep the chat template in chat_template.jinja instead of
 * tokenizer_config.json: it goes into *tok_cfg (created if NULL) unless
 * that has one already. */
static cr_status_t load_jinja(const conv_t *c, json_t **tok_cfg, cr_err_t *err)
{
    const reg_hf_file_t *f = find_file(c, "chat_template.jinja");
    if (!f || (*tok_cfg && json_object_get(*tok_cfg, "chat_template")))
        return CR_OK;
    struct stat sb;
    if (stat(f->path, &sb) != 0)
        return cr_err_set(err, CR_E_IO, "%s: %s", f->name, strerror(errno));
    if ((uint64_t)sb.st_size > MAX_JSON_BYTES)
        return cr_err_set(err, CR_E_TOO_LARGE, "%s: over %u bytes", f->name,
                          MAX_JSON_BYTES);
    FILE *fp = fopen(f->path, "rb");
    if (!fp)
        return cr_err_set(err, CR_E_IO, "%s: %s", f->name, strerror(errno));
    /* one byte more than stat said: a file that grew is refused */
    size_t cap = (size_t)sb.st_size + 1;
    char *text = malloc(cap);
    size_t n = text ? fread(text, 1, cap, fp) : 0;
    fclose(fp);
    cr_status_t st = CR_OK;
    if (!text)
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    else if (n >= cap)
        st = cr_err_set(err, CR_E_IO, "%s: changed while read", f->name);
    json_t *s = st ? NULL : json_stringn(text, n);
    if (!st && !s)
        st = cr_err_set(err, CR_E_INVALID, "%s: not UTF-8 text", f->name);
    if (!st && !*tok_cfg && !(*tok_cfg = json_object()))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (!st)
        json_object_set(*tok_cfg, "chat_template", s);
    json_decref(s);
    free(text);
    return st;
}

static cr_status_t open_tensors(conv_t *c, cr_err_t *err)
{
    /* BERT checkpoints may carry their position ids, an I64 buffer the
     * model does not need (llama.cpp drops it too) */
    static const char *const ignore[] = {"embeddings.position_ids", NULL};
    if (!(c->set = cr_st_set_new()))
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (c->hp.flags & REG_HF_BERT)
        cr_st_set_ignore(c->set, ignore);
    const reg_hf_file_t *idx = find_file(c, "model.safetensors.index.json");
    cr_status_t st = CR_OK;
    if (idx) {
        json_t *root = NULL;
        if ((st = load_json(c, idx->name, true, &root, err)))
            return st;
        char *text = json_dumps(root, JSON_COMPACT);
        json_decref(root);
        if (!text)
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        char **names = NULL;
        size_t n = 0;
        st = cr_st_index_files(text, strlen(text), idx->name, &names, &n, err);
        for (size_t i = 0; !st && i < n; i++) {
            const reg_hf_file_t *f = find_file(c, names[i]);
            st = f ? cr_st_set_add_file(c->set, f->path, f->name, err)
                   : cr_err_set(err, CR_E_INVALID, "%s names %s, which is not in "
                                "the folder", idx->name, names[i]);
        }
        if (!st)
            st = cr_st_set_check_index(c->set, text, strlen(text), idx->name, err);
        for (size_t i = 0; i < n; i++)
            free(names[i]);
        free(names);
        free(text);
    } else {
        /* Mistral's folders also hold consolidated.safetensors, the same
         * weights under its own names: model*.safetensors win when present */
        bool have_model = false;
        for (size_t i = 0; i < c->n_files; i++)
            have_model |= !strncmp(c->files[i].name, "model", 5) &&
                          has_suffix(c->files[i].name, ".safetensors");
        for (size_t i = 0; !st && i < c->n_files; i++)
            if (has_suffix(c->files[i].name, ".safetensors") &&
                (!have_model || !strncmp(c->files[i].name, "model", 5)))
                st = cr_st_set_add_file(c->set, c->files[i].path,
                                        c->files[i].name, err);
    }
    if (!st && cr_st_set_tensor_count(c->set) == 0)
        st = cr_err_set(err, CR_E_INVALID, "no tensors: the folder has no "
                        ".safetensors file with any");
    if (!st && !(c->used = calloc(cr_st_set_tensor_count(c->set) + 1, 1)))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    return st;
}

/* ---- tensors ---- */

static cr_type_t gguf_type(cr_st_dtype_t d)
{
    return d == CR_ST_F32 ? CR_TYPE_F32 : d == CR_ST_F16 ? CR_TYPE_F16 : CR_TYPE_BF16;
}

/* Finds HF tensor name with the expected shape (rows, cols; cols 0 for a
 * 1-D tensor) and marks it used. CR_E_NOT_FOUND if absent and optional. */
static cr_status_t take(conv_t *c, const char *name, int64_t rows, int64_t cols,
                        bool optional, const cr_st_tensor_t **t,
                        const cr_st_file_t **f, cr_err_t *err)
{
    size_t idx = cr_st_set_index_of(c->set, name);
    *t = idx == SIZE_MAX ? NULL : cr_st_set_tensor_at(c->set, idx, f);
    if (!*t)
        return optional ? CR_E_NOT_FOUND
                        : cr_err_set(err, CR_E_INVALID, "tensor '%s' is missing "
                                     "(no .safetensors file has it)", name);
    const cr_st_tensor_t *x = *t;
    bool ok = cols ? x->n_dims == 2 && x->shape[0] == (uint64_t)rows &&
                         x->shape[1] == (uint64_t)cols
                   : x->n_dims == 1 && x->shape[0] == (uint64_t)rows;
    if (!ok) {
        char got[96] = "";
        size_t o = 0;
        for (uint32_t i = 0; i < x->n_dims && o < sizeof got - 24; i++)
            o += (size_t)snprintf(got + o, sizeof got - o, "%s%" PRIu64,
                                  i ? ", " : "", x->shape[i]);
        char want[64];
        if (cols)
            snprintf(want, sizeof want, "%" PRId64 ", %" PRId64, rows, cols);
        else
            snprintf(want, sizeof want, "%" PRId64, rows);
        return cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' has shape [%s], "
                          "config.json implies [%s]", cr_st_name(*f), name, got,
                          want);
    }
    c->used[idx] = true;
    return CR_OK;
}

static cr_status_t new_job(conv_t *c, const char *gguf_name, size_t n_src,
                           job_t **out, cr_err_t *err)
{
    if (c->n_jobs == c->cap_jobs) {
        size_t cap = c->cap_jobs ? 2 * c->cap_jobs : 64;
        job_t *j = realloc(c->jobs, cap * sizeof *j);
        if (!j)
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        c->jobs = j;
        c->cap_jobs = cap;
    }
    job_t *j = &c->jobs[c->n_jobs];
    memset(j, 0, sizeof *j);
    snprintf(j->name, sizeof j->name, "%s", gguf_name);
    j->src = calloc(n_src, sizeof *j->src);
    j->file = calloc(n_src, sizeof *j->file);
    if (!j->src || !j->file) {
        free(j->src);
        free(j->file);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    j->n_src = n_src;
    c->n_jobs++;
    *out = j;
    return CR_OK;
}

/* One HF tensor as one GGUF tensor: 1-D ones become F32. */
static cr_status_t map1(conv_t *c, const char *hf, const char *gguf, int64_t rows,
                        int64_t cols, bool optional, int64_t permute_heads,
                        cr_err_t *err)
{
    const cr_st_tensor_t *t;
    const cr_st_file_t *f;
    cr_status_t st = take(c, hf, rows, cols, optional, &t, &f, err);
    if (st == CR_E_NOT_FOUND && optional)
        return CR_OK;
    job_t *j;
    if (st || (st = new_job(c, gguf, 1, &j, err)))
        return st;
    j->src[0] = t;
    j->file[0] = f;
    j->type = cols ? gguf_type(t->dtype) : CR_TYPE_F32;
    j->permute_heads = permute_heads;
    /* llama.cpp stores gemma's RMSNorm weights as 1 + w */
    j->add_one = (c->hp.flags & REG_HF_GEMMA) && !cols && has_suffix(hf, "norm.weight");
    return CR_OK;
}

/* Experts e = 0..E-1 of layer l stacked into one [E][rows][cols] tensor. */
static cr_status_t map_experts(conv_t *c, int l, const char *proj, const char *gguf,
                               int64_t rows, int64_t cols, cr_err_t *err)
{
    char hf[160], gn[64];
    snprintf(gn, sizeof gn, "blk.%d.%s.weight", l, gguf);
    job_t *j;
    cr_status_t st = new_job(c, gn, (size_t)c->hp.n_expert, &j, err);
    for (int64_t e = 0; !st && e < c->hp.n_expert; e++) {
        snprintf(hf, sizeof hf, "model.layers.%d.mlp.experts.%" PRId64 ".%s.weight", l,
                 e, proj);
        st = take(c, hf, rows, cols, false, &j->src[e], &j->file[e], err);
        if (!st && e && j->src[e]->dtype != j->src[0]->dtype)
            st = cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' is %s, expert 0 is %s",
                            cr_st_name(j->file[e]), hf, cr_st_dtype_name(j->src[e]->dtype),
                            cr_st_dtype_name(j->src[0]->dtype));
    }
    if (!st)
        j->type = gguf_type(j->src[0]->dtype);
    return st;
}

static cr_status_t map_layer(conv_t *c, int l, cr_err_t *err)
{
    const reg_hf_hparams_t *hp = &c->hp;
    int64_t D = hp->dim, Q = hp->n_heads * hp->head_dim, KV = hp->n_kv * hp->head_dim;
    bool perm = hp->flags & REG_HF_PERMUTE_QK, bias = hp->flags & REG_HF_QKV_BIAS;
    bool gemma = hp->flags & REG_HF_GEMMA, fused = hp->flags & REG_HF_FUSED;
    char hf[160], gn[64];
    cr_status_t st = CR_OK;
#define MAP(hfs, gs, rows, cols, ph)                                               \
    do {                                                                           \
        snprintf(hf, sizeof hf, "model.layers.%d.%s", l, hfs);                     \
        snprintf(gn, sizeof gn, "blk.%d.%s", l, gs);                               \
        if (!st)                                                                   \
            st = map1(c, hf, gn, rows, cols, false, ph, err);                      \
    } while (0)
    MAP("input_layernorm.weight", "attn_norm.weight", D, 0, 0);
    if (fused) {
        MAP("self_attn.qkv_proj.weight", "attn_qkv.weight", Q + 2 * KV, D, 0);
    } else {
        MAP("self_attn.q_proj.weight", "attn_q.weight", Q, D, perm ? hp->n_heads : 0);
        MAP("self_attn.k_proj.weight", "attn_k.weight", KV, D, perm ? hp->n_kv : 0);
        MAP("self_attn.v_proj.weight", "attn_v.weight", KV, D, 0);
    }
    if (bias) {
        MAP("self_attn.q_proj.bias", "attn_q.bias", Q, 0, 0);
        MAP("self_attn.k_proj.bias", "attn_k.bias", KV, 0, 0);
        MAP("self_attn.v_proj.bias", "attn_v.bias", KV, 0, 0);
    }
    MAP("self_attn.o_proj.weight", "attn_output.weight", D, Q, 0);
    if (hp->flags & REG_HF_QK_NORM) {
        MAP("self_attn.q_norm.weight", "attn_q_norm.weight", hp->head_dim, 0, 0);
        MAP("self_attn.k_norm.weight", "attn_k_norm.weight", hp->head_dim, 0, 0);
    }
    if (gemma) {
        MAP("post_attention_layernorm.weight", "post_attention_norm.weight", D, 0, 0);
        MAP("pre_feedforward_layernorm.weight", "ffn_norm.weight", D, 0, 0);
        MAP("post_feedforward_layernorm.weight", "post_ffw_norm.weight", D, 0, 0);
    } else {
        MAP("post_attention_layernorm.weight", "ffn_norm.weight", D, 0, 0);
    }
    if (hp->flags & REG_HF_MOE) {
        int64_t E = hp->n_expert, Fe = hp->expert_ffn;
        MAP("mlp.gate.weight", "ffn_gate_inp.weight", E, D, 0);
        if (!st) /* the router is small and read in F32 */
            c->jobs[c->n_jobs - 1].type = CR_TYPE_F32;
        st = st ? st : map_experts(c, l, "gate_proj", "ffn_gate_exps", Fe, D, err);
        st = st ? st : map_experts(c, l, "down_proj", "ffn_down_exps", D, Fe, err);
        st = st ? st : map_experts(c, l, "up_proj", "ffn_up_exps", Fe, D, err);
    } else if (fused) {
        MAP("mlp.gate_up_proj.weight", "ffn_up.weight", 2 * hp->ffn, D, 0);
        MAP("mlp.down_proj.weight", "ffn_down.weight", D, hp->ffn, 0);
    } else {
        MAP("mlp.gate_proj.weight", "ffn_gate.weight", hp->ffn, D, 0);
        MAP("mlp.down_proj.weight", "ffn_down.weight", D, hp->ffn, 0);
        MAP("mlp.up_proj.weight", "ffn_up.weight", hp->ffn, D, 0);
    }
#undef MAP
    return st;
}

/* Every tensor of the folder must have found its place. */
static cr_status_t check_all_used(conv_t *c, cr_err_t *err)
{
    const reg_hf_hparams_t *hp = &c->hp;
    for (size_t i = 0; i < cr_st_set_tensor_count(c->set); i++) {
        const cr_st_file_t *f;
        const cr_st_tensor_t *t = cr_st_set_tensor_at(c->set, i, &f);
        /* rotary tables some checkpoints carry are recomputed at load; BERT's
         * pooler is not part of the embedding llama.cpp computes */
        if (!c->used[i] && !has_suffix(t->name, "rotary_emb.inv_freq") &&
            !((hp->flags & REG_HF_BERT) && !strncmp(t->name, "pooler.", 7)))
            return cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' is not part of a %s "
                              "model of %" PRId64 " layers", cr_st_name(f), t->name,
                              hp->arch, hp->n_layers);
    }
    return CR_OK;
}

/* BERT (BertModel's names, no "bert." prefix): embeddings with token
 * types and learned positions, post-LayerNorm layers with biases. */
static cr_status_t map_bert(conv_t *c, int64_t n_vocab, cr_err_t *err)
{
    const reg_hf_hparams_t *hp = &c->hp;
    int64_t D = hp->dim, F = hp->ffn;
    cr_status_t st = CR_OK;
    char hf[160], gn[64];
#define MAP(hfs, gs, rows, cols)                                                   \
    do {                                                                           \
        snprintf(hf, sizeof hf, "%s", hfs);                                        \
        snprintf(gn, sizeof gn, "%s", gs);                                         \
        if (!st)                                                                   \
            st = map1(c, hf, gn, rows, cols, false, 0, err);                       \
    } while (0)
    MAP("embeddings.word_embeddings.weight", "token_embd.weight", n_vocab, D);
    MAP("embeddings.token_type_embeddings.weight", "token_types.weight", hp->n_token_types,
        D);
    MAP("embeddings.position_embeddings.weight", "position_embd.weight", hp->ctx, D);
    MAP("embeddings.LayerNorm.weight", "token_embd_norm.weight", D, 0);
    MAP("embeddings.LayerNorm.bias", "token_embd_norm.bias", D, 0);
    static const struct {
        const char *hf, *gguf;
        int rows, cols; /* 'D' dim, 'F' ffn, 0 none */
    } per[] = {
        {"attention.self.query", "attn_q", 'D', 'D'},
        {"attention.self.key", "attn_k", 'D', 'D'},
        {"attention.self.value", "attn_v", 'D', 'D'},
        {"attention.output.dense", "attn_output", 'D', 'D'},
        {"attention.output.LayerNorm", "attn_output_norm", 'D', 0},
        {"intermediate.dense", "ffn_up", 'F', 'D'},
        {"output.dense", "ffn_down", 'D', 'F'},
        {"output.LayerNorm", "layer_output_norm", 'D', 0},
    };
    for (int l = 0; !st && l < hp->n_layers; l++)
        for (size_t i = 0; !st && i < CR_ARRAY_LEN(per); i++) {
            int64_t rows = per[i].rows == 'F' ? F : D;
            int64_t cols = per[i].cols == 'F' ? F : per[i].cols ? D : 0;
            char hn[160], g2[64];
            snprintf(hn, sizeof hn, "encoder.layer.%d.%s.weight", l, per[i].hf);
            snprintf(g2, sizeof g2, "blk.%d.%s.weight", l, per[i].gguf);
            MAP(hn, g2, rows, cols);
            snprintf(hn, sizeof hn, "encoder.layer.%d.%s.bias", l, per[i].hf);
            snprintf(g2, sizeof g2, "blk.%d.%s.bias", l, per[i].gguf);
            MAP(hn, g2, rows, 0);
        }
#undef MAP
    return st;
}

static cr_status_t map_tensors(conv_t *c, int64_t emb_rows, int64_t n_vocab,
                               cr_err_t *err)
{
    const reg_hf_hparams_t *hp = &c->hp;
    if (hp->flags & REG_HF_BERT) {
        cr_status_t st = map_bert(c, emb_rows, err);
        return st ? st : check_all_used(c, err);
    }
    cr_status_t st = map1(c, "model.embed_tokens.weight", "token_embd.weight", emb_rows,
                          hp->dim, false, 0, err);
    if (!st && n_vocab < emb_rows)
        c->jobs[c->n_jobs - 1].rows_out = (uint64_t)n_vocab;
    st = st ? st : map1(c, "model.norm.weight", "output_norm.weight", hp->dim, 0, false,
                        0, err);
    if (!st && (hp->flags & REG_HF_TIED)) {
        /* gemma reads the embedding; like llama.cpp, an lm_head some
         * quantizers add is checked and left out */
        const cr_st_tensor_t *t;
        const cr_st_file_t *f;
        cr_status_t ht = take(c, "lm_head.weight", emb_rows, hp->dim, true, &t, &f, err);
        if (ht != CR_OK && ht != CR_E_NOT_FOUND)
            st = ht;
    } else if (!st) {
        /* An untied model must have lm_head; a tied one may still carry it. */
        st = map1(c, "lm_head.weight", "output.weight", emb_rows, hp->dim, hp->tied, 0, err);
    }
    for (int l = 0; !st && l < hp->n_layers; l++)
        st = map_layer(c, l, err);
    return st ? st : check_all_used(c, err);
}

/* Writes src rows to the sink, permuted for rope if asked: GGUF row
 * h*hd + 2i + j is HF row h*hd + j*hd/2 + i. */
static cr_status_t write_part(conv_t *c, const job_t *j, size_t k,
                              cr_gguf_sink_t *sink, cr_err_t *err)
{
    const cr_st_tensor_t *t = j->src[k];
    const cr_st_file_t *f = j->file[k];
    cr_status_t st = CR_OK;
    if (j->type == CR_TYPE_F32 && (t->dtype != CR_ST_F32 || j->add_one)) {
        /* widening: norms, biases, routers (small); gemma's 1 + w */
        float *v = malloc((size_t)t->n_elems * sizeof *v + 1);
        if (!v)
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        st = cr_st_read_f32(f, t, v, (size_t)t->n_elems, err);
        for (uint64_t i = 0; !st && j->add_one && i < t->n_elems; i++)
            v[i] += 1.0f;
        st = st ? st : cr_gguf_sink_write(sink, v, (size_t)t->n_elems * sizeof *v, err);
        free(v);
        return st;
    }
    if (j->permute_heads > 0) {
        uint64_t rows = t->shape[0], row_bytes = t->size_bytes / rows;
        uint64_t hd = rows / (uint64_t)j->permute_heads, half = hd / 2;
        if (row_bytes > CHUNK_BYTES)
            return cr_err_set(err, CR_E_TOO_LARGE, "tensor '%s': rows of %" PRIu64
                              " bytes", t->name, row_bytes);
        for (uint64_t r = 0; !st && r < rows; r++) {
            uint64_t h = r / hd, i = (r % hd) / 2, jj = r % 2;
            uint64_t src = h * hd + jj * half + i;
            st = cr_st_read_range(f, t, src * row_bytes, c->buf, (size_t)row_bytes, err);
            st = st ? st : cr_gguf_sink_write(sink, c->buf, (size_t)row_bytes, err);
        }
        return st;
    }
    uint64_t total = j->rows_out ? t->size_bytes / t->shape[0] * j->rows_out : t->size_bytes;
    for (uint64_t off = 0; !st && off < total; off += CHUNK_BYTES) {
        size_t n = (size_t)CR_MIN((uint64_t)CHUNK_BYTES, total - off);
        st = cr_st_read_range(f, t, off, c->buf, n, err);
        st = st ? st : cr_gguf_sink_write(sink, c->buf, n, err);
    }
    return st;
}

typedef struct job_ctx {
    conv_t *c;
    const job_t *j;
} job_ctx_t;

static cr_status_t write_job(void *ctx, const char *name, uint64_t size_bytes,
                             cr_gguf_sink_t *sink, cr_err_t *err)
{
    CR_UNUSED(name);
    CR_UNUSED(size_bytes);
    job_ctx_t *jc = ctx;
    /* Between tensors: where a create whose client left stops. */
    cr_status_t st = jc->c->step ? jc->c->step(jc->c->step_ctx, err) : CR_OK;
    for (size_t k = 0; !st && k < jc->j->n_src; k++)
        st = write_part(jc->c, jc->j, k, sink, err);
    return st;
}

static cr_status_t add_jobs(conv_t *c, cr_gguf_writer_t *w, job_ctx_t *ctxs,
                            cr_err_t *err)
{
    cr_status_t st = CR_OK;
    for (size_t i = 0; !st && i < c->n_jobs; i++) {
        const job_t *j = &c->jobs[i];
        const cr_st_tensor_t *t = j->src[0];
        uint64_t ne[3] = {t->n_dims == 2 ? t->shape[1] : t->shape[0],
                          j->rows_out ? j->rows_out : t->n_dims == 2 ? t->shape[0] : 1,
                          j->n_src};
        uint32_t nd = j->n_src > 1 ? 3 : t->n_dims;
        ctxs[i] = (job_ctx_t){c, j};
        st = cr_gguf_writer_add_tensor_fn(w, j->name, nd, ne, j->type, write_job,
                                          &ctxs[i], NULL, err);
    }
    return st;
}

/* The file type: the dtype of the token embedding. */
static cr_type_t main_type(const conv_t *c)
{
    return c->n_jobs ? c->jobs[0].type : CR_TYPE_F32;
}

static void conv_free(conv_t *c)
{
    for (size_t i = 0; i < c->n_jobs; i++) {
        free(c->jobs[i].src);
        free(c->jobs[i].file);
    }
    free(c->jobs);
    free(c->used);
    free(c->buf);
    reg_hf_rope_free(&c->rope);
    cr_st_set_destroy(&c->set);
}

cr_status_t reg_hf_import(const reg_hf_file_t *files, size_t n,
                          const char *out_path, char *arch_out, size_t cap,
                          reg_hf_step_fn step, void *step_ctx, cr_err_t *err)
{
    conv_t c = {.files = files, .n_files = n, .step = step, .step_ctx = step_ctx};
    json_t *cfg = NULL, *tok = NULL, *tok_cfg = NULL;
    cr_gguf_writer_t *w = NULL;
    job_ctx_t *ctxs = NULL;
    uint32_t n_tokens = 0;
    cr_status_t st;
    if ((st = load_json(&c, "config.json", true, &cfg, err)) ||
        (st = reg_hf_hparams_read(cfg, &c.hp, err)) ||
        (st = load_json(&c, "tokenizer.json", true, &tok, err)) ||
        (st = load_json(&c, "tokenizer_config.json", false, &tok_cfg, err)) ||
        (st = load_jinja(&c, &tok_cfg, err)) ||
        (st = open_tensors(&c, err)))
        goto out;
    /* The embedding's rows are the vocabulary size the weights have. */
    const char *emb_name = (c.hp.flags & REG_HF_BERT) ? "embeddings.word_embeddings.weight"
                                                 : "model.embed_tokens.weight";
    const cr_st_tensor_t *emb = cr_st_set_find(c.set, emb_name, NULL);
    if (!emb || emb->n_dims != 2) {
        st = cr_err_set(err, CR_E_INVALID, "tensor '%s' is %s", emb_name,
                        emb ? "not 2-D" : "missing (no .safetensors file has it)");
        goto out;
    }
    if (emb->shape[0] > REG_HF_MAX_VOCAB) {
        st = cr_err_set(err, CR_E_TOO_LARGE, "tensor '%s' has %" PRIu64 " rows (a "
                        "vocabulary of at most %u)", emb_name, emb->shape[0],
                        REG_HF_MAX_VOCAB);
        goto out;
    }
    int64_t emb_rows = (int64_t)emb->shape[0];
    int64_t n_vocab = emb_rows;
    if (c.hp.vocab && c.hp.vocab != emb_rows) {
        const cr_st_file_t *ef = NULL;
        cr_st_set_find(c.set, emb_name, &ef);
        st = cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' has %" PRId64 " rows, "
                        "config.json's vocab_size is %" PRId64, cr_st_name(ef), emb_name,
                        emb_rows, c.hp.vocab);
        goto out;
    }
    if (c.hp.flags & REG_HF_CUT_VOCAB) {
        uint32_t n_tok = reg_hf_vocab_count(tok);
        if (n_tok && n_tok < n_vocab)
            n_vocab = n_tok;
    }
    if (!(c.buf = malloc(CHUNK_BYTES)) || !(w = cr_gguf_writer_new())) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    if ((st = map_tensors(&c, emb_rows, n_vocab, err)) ||
        (st = reg_hf_hparams_add(w, cfg, &c.hp, main_type(&c), err)) ||
        (st = reg_hf_vocab_add(w, tok, tok_cfg, cfg, (uint32_t)n_vocab, &n_tokens, err)))
        goto out;
    if (n_tokens != (uint32_t)n_vocab) {
        st = cr_err_set(err, CR_E_INVALID, "tokenizer.json has %u tokens but the "
                        "embedding has %" PRId64 " rows", n_tokens, n_vocab);
        goto out;
    }
    char key[96];
    snprintf(key, sizeof key, "%s.vocab_size", c.hp.arch);
    if ((st = cr_gguf_writer_add_u32(w, key, n_tokens, err)))
        goto out;
    if (!(ctxs = calloc(c.n_jobs + 1, sizeof *ctxs))) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    if ((st = add_jobs(&c, w, ctxs, err)) || (st = reg_hf_rope_add(w, cfg, &c.hp, &c.rope, err)) ||
        (st = cr_gguf_writer_write(w, out_path, err)))
        goto out;
    if (arch_out && cap)
        snprintf(arch_out, cap, "%s", c.hp.arch);
out:
    cr_gguf_writer_destroy(&w);
    free(ctxs);
    conv_free(&c);
    json_decref(cfg);
    json_decref(tok);
    json_decref(tok_cfg);
    return st;
}
