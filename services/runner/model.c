/* model.c: loads and checks a llama GGUF model (see model.h).
 *
 * Order: architecture, hyperparameters (each range-checked), then every
 * tensor (present, shape, type, alignment, backend support). Nothing is
 * copied: weight views point into the GGUF mapping. */
#include "lib/prelude.h"
#include "services/runner/model.h"

struct rn_model {
    cr_gguf_t *g;
    be_backend_t *be;
    rn_hparams_t hp;
    rn_weights_t w;
    uint64_t weight_bytes;
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
    if (kv->type == CR_GGUF_ARRAY)
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "key '%s': per-layer values are not supported", key);
    uint64_t v = 0;
    if (!cr_gguf_get_u64(g, key, &v))
        return cr_err_set(err, CR_E_CORRUPT, "key '%s' is not a non-negative integer",
                          key);
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

static cr_status_t read_hparams(rn_model_t *m, cr_err_t *err)
{
    const cr_gguf_t *g = m->g;
    rn_hparams_t *hp = &m->hp;
    const char *arch = cr_gguf_arch(g);
    if (strcmp(arch, "llama") != 0)
        return cr_err_set(err, CR_E_UNSUPPORTED, "unsupported architecture '%.64s'",
                          arch);
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);

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
    if (hp->dim % hp->n_heads)
        return cr_err_set(err, CR_E_CORRUPT, "%s.embedding_length %d is not a multiple "
                          "of %s.attention.head_count %d", arch, hp->dim, arch,
                          hp->n_heads);
    if (hp->n_heads % hp->n_kv_heads)
        return cr_err_set(err, CR_E_CORRUPT, "%s.attention.head_count %d is not a "
                          "multiple of %s.attention.head_count_kv %d", arch,
                          hp->n_heads, arch, hp->n_kv_heads);
    hp->head_dim = hp->dim / hp->n_heads;
    hp->kv_dim = hp->head_dim * hp->n_kv_heads;
    int key_len = hp->head_dim;
    if ((st = get_int(g, arch, "attention.key_length", false, hp->head_dim, 1,
                      RN_MODEL_MAX_DIM, &key_len, err)))
        return st;
    if (key_len != hp->head_dim)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s.attention.key_length %d differs "
                          "from embedding_length / head_count = %d", arch, key_len,
                          hp->head_dim);
    if ((st = get_int(g, arch, "rope.dimension_count", false, hp->head_dim, 2,
                      hp->head_dim, &hp->n_rot, err)))
        return st;
    if (hp->n_rot % 2)
        return cr_err_set(err, CR_E_CORRUPT, "%s.rope.dimension_count %d is odd", arch,
                          hp->n_rot);
    if ((st = get_float(g, arch, "rope.freq_base", 10000.0f, &hp->rope_base, err)) ||
        (st = get_float(g, arch, "attention.layer_norm_rms_epsilon", 1e-5f,
                        &hp->rms_eps, err)))
        return st;
    return CR_OK;
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

/* Binds tensor `name` of shape [rows][cols] (GGUF ne {cols, rows}) into *w.
 * Vectors (rows == 1) must be F32. Missing optional tensors leave *found
 * false. */
static cr_status_t bind(rn_model_t *m, const char *name, int64_t cols, int64_t rows,
                        bool required, be_weight_t *w, bool *found, cr_err_t *err)
{
    if (found)
        *found = false;
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
    *w = (be_weight_t){
        .name = t->name,
        .type = t->type,
        .n_cols = cols,
        .n_rows = rows,
        .row_bytes = (size_t)(t->size_bytes / (uint64_t)rows),
        .data = t->data,
    };
    cr_status_t st = m->be->ops->weight_prepare(m->be, w, err);
    if (st)
        return st;
    m->weight_bytes += t->size_bytes;
    if (found)
        *found = true;
    return CR_OK;
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

    cr_status_t st;
    bool have_output = false;
    if ((st = bind(m, "token_embd.weight", hp->dim, hp->n_vocab, true, &w->token_embd,
                   NULL, err)) ||
        (st = bind(m, "output_norm.weight", hp->dim, 1, true, &w->output_norm, NULL,
                   err)) ||
        (st = bind(m, "output.weight", hp->dim, hp->n_vocab, false, &w->output,
                   &have_output, err)) ||
        (st = bind(m, "rope_freqs.weight", hp->n_rot / 2, 1, false, &w->rope_freqs,
                   &w->has_rope_freqs, err)))
        return st;
    if (!have_output) {
        w->output = w->token_embd;
        w->tied_output = true;
    }

    w->layers = calloc((size_t)hp->n_layers, sizeof *w->layers);
    if (!w->layers)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for %d layers", hp->n_layers);
    int q_dim = hp->n_heads * hp->head_dim;
    for (int l = 0; l < hp->n_layers; l++) {
        rn_layer_t *L = &w->layers[l];
        struct {
            const char *what;
            int64_t cols, rows;
            be_weight_t *dst;
        } per[] = {
            {"attn_norm", hp->dim, 1, &L->attn_norm},
            {"attn_q", hp->dim, q_dim, &L->wq},
            {"attn_k", hp->dim, hp->kv_dim, &L->wk},
            {"attn_v", hp->dim, hp->kv_dim, &L->wv},
            {"attn_output", q_dim, hp->dim, &L->wo},
            {"ffn_norm", hp->dim, 1, &L->ffn_norm},
            {"ffn_gate", hp->dim, hp->ffn, &L->w_gate},
            {"ffn_up", hp->dim, hp->ffn, &L->w_up},
            {"ffn_down", hp->ffn, hp->dim, &L->w_down},
        };
        for (size_t i = 0; i < CR_ARRAY_LEN(per); i++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, per[i].what);
            if ((st = bind(m, name, per[i].cols, per[i].rows, true, per[i].dst, NULL,
                           err)))
                return st;
        }
    }
    return CR_OK;
}

/* ---- lifecycle -------------------------------------------------------- */

static void release_weights(rn_model_t *m)
{
    be_backend_t *be = m->be;
    rn_weights_t *w = &m->w;
    if (!be)
        return;
    /* Only bound weights (data set) were prepared; a tied output shares
     * token_embd's preparation. */
    if (w->token_embd.data)
        be->ops->weight_release(be, &w->token_embd);
    if (w->output_norm.data)
        be->ops->weight_release(be, &w->output_norm);
    if (w->output.data && !w->tied_output)
        be->ops->weight_release(be, &w->output);
    if (w->rope_freqs.data)
        be->ops->weight_release(be, &w->rope_freqs);
    for (int l = 0; w->layers && l < m->hp.n_layers; l++) {
        rn_layer_t *L = &w->layers[l];
        be_weight_t *all[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo,
                              &L->ffn_norm, &L->w_gate, &L->w_up, &L->w_down};
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
    free(m->w.layers);
    cr_gguf_close(&m->g);
    free(m);
    *self_p = NULL;
}

cr_status_t rn_model_load_gguf(cr_gguf_t **g, be_backend_t *be, rn_model_t **out,
                               cr_err_t *err)
{
    *out = NULL;
    rn_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        cr_gguf_close(g);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    m->g = *g;
    *g = NULL;
    m->be = be;
    cr_status_t st = read_hparams(m, err);
    if (!st)
        st = bind_all(m, err);
    if (st) {
        rn_model_destroy(&m);
        return st;
    }
    *out = m;
    return CR_OK;
}

cr_status_t rn_model_load(const char *path, be_backend_t *be, rn_model_t **out,
                          cr_err_t *err)
{
    *out = NULL;
    cr_gguf_t *g = NULL;
    cr_status_t st = cr_gguf_open(path, &g, err);
    if (st)
        return st;
    return rn_model_load_gguf(&g, be, out, err);
}

const rn_hparams_t *rn_model_hparams(const rn_model_t *m) { return &m->hp; }
const rn_weights_t *rn_model_weights(const rn_model_t *m) { return &m->w; }
const cr_gguf_t *rn_model_gguf(const rn_model_t *m) { return m->g; }
be_backend_t *rn_model_backend(const rn_model_t *m) { return m->be; }
uint64_t rn_model_weight_bytes(const rn_model_t *m) { return m->weight_bytes; }
