/* lora.c: LoRA adapters on a loaded model (see lora.h). */
#include "lib/prelude.h"
#include "services/runner/model/lora.h"

struct rn_lora {
    const rn_model_t *m;
    cr_gguf_t *files[CR_LORA_MAX_ADAPTERS]; /* mappings the weights point into */
    size_t n_files;
    rn_lora_mat_t *mats;  /* grouped by (layer, target), adapters in order */
    size_t n_mats;
    size_t *first;        /* [n_layers * N_TARGETS + 1]: mats of slot s are
                             first[s] .. first[s + 1] - 1 */
    int max_rank;
    uint64_t bytes;
};

static const be_weight_t *model_weight(const rn_layer_t *L, cr_lora_target_t t)
{
    switch (t) {
    case CR_LORA_Q: return &L->wq;
    case CR_LORA_K: return &L->wk;
    case CR_LORA_V: return &L->wv;
    case CR_LORA_O: return &L->wo;
    case CR_LORA_GATE: return &L->w_gate;
    case CR_LORA_UP: return &L->w_up;
    case CR_LORA_DOWN: return &L->w_down;
    default: return NULL;
    }
}

static void to_weight(const cr_gguf_tensor_t *t, be_weight_t *w)
{
    *w = (be_weight_t){
        .name = t->name,
        .type = t->type,
        .n_cols = (int64_t)t->ne[0],
        .n_rows = (int64_t)t->ne[1],
        .row_bytes = (size_t)(t->size_bytes / t->ne[1]),
        .data = t->data,
    };
}

/* Prepares pair p of adapter `path` into mat on its layer's instance. */
static cr_status_t prepare(const rn_model_t *m, const char *path, const cr_lora_pair_t *p,
                           rn_lora_mat_t *mat, cr_err_t *err)
{
    const rn_hparams_t *hp = rn_model_hparams(m);
    if (p->layer >= hp->n_layers)
        return cr_err_set(err, CR_E_INVALID, "adapter %s: '%s' names layer %d of %d", path,
                          p->a->name, p->layer, hp->n_layers);
    const be_weight_t *w = model_weight(&rn_model_weights(m)->layers[p->layer], p->target);
    /* The model's matrix as the forward pass multiplies it (a fused or
     * expert weight would differ from the file's tensor). */
    if (!w || !w->data || w->n_cols != (int64_t)p->base->ne[0] ||
        w->n_rows != (int64_t)p->base->ne[1])
        return cr_err_set(err, CR_E_INVALID, "adapter %s: '%s' is not a matrix this model "
                          "multiplies on its own", path, p->base->name);
    be_backend_t *be = rn_model_layer_backend(m, p->layer);
    const be_ops_ext_t *ext = be_ext_ops(be);
    if (p->scale != 1.0f && !(ext && ext->scale))
        return cr_err_set(err, CR_E_UNSUPPORTED, "adapter %s: the %s backend cannot scale "
                          "(alpha / rank = %g)", path, be->ops->name, (double)p->scale);
    mat->be = be;
    mat->scale = p->scale;
    to_weight(p->a, &mat->a);
    to_weight(p->b, &mat->b);
    cr_status_t st = be->ops->weight_prepare(be, &mat->a, err);
    if (st)
        return cr_err_wrap(err, "adapter %s", path);
    if ((st = be->ops->weight_prepare(be, &mat->b, err))) {
        be->ops->weight_release(be, &mat->a);
        mat->be = NULL;
        return cr_err_wrap(err, "adapter %s", path);
    }
    return CR_OK;
}

static size_t slot(int layer, cr_lora_target_t t)
{
    return (size_t)layer * CR_LORA_N_TARGETS + (size_t)t;
}

cr_status_t rn_lora_load(const rn_model_t *m, const char *const *paths, size_t n,
                         rn_lora_t **out, cr_err_t *err)
{
    *out = NULL;
    if (n == 0 || n > CR_LORA_MAX_ADAPTERS)
        return cr_err_set(err, CR_E_INVALID, "%zu adapters (1..%d supported)", n,
                          CR_LORA_MAX_ADAPTERS);
    const rn_hparams_t *hp = rn_model_hparams(m);
    size_t n_slots = (size_t)hp->n_layers * CR_LORA_N_TARGETS;
    rn_lora_t *lo = calloc(1, sizeof *lo);
    cr_lora_pair_t *pairs[CR_LORA_MAX_ADAPTERS] = {0};
    size_t n_pairs[CR_LORA_MAX_ADAPTERS] = {0};
    size_t *fill = NULL;
    cr_status_t st = CR_OK;
    if (!lo || !(lo->first = calloc(n_slots + 1, sizeof *lo->first)) ||
        !(fill = calloc(n_slots + 1, sizeof *fill))) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    lo->m = m;
    /* Check every adapter before preparing anything. */
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if ((st = cr_gguf_open(paths[i], &lo->files[i], err))) {
            cr_err_wrap(err, "adapter %s", paths[i]);
            goto out;
        }
        lo->n_files++;
        if ((st = cr_lora_pairs(rn_model_gguf(m), lo->files[i], paths[i], &pairs[i],
                                &n_pairs[i], err)))
            goto out;
        total += n_pairs[i];
        for (size_t k = 0; k < n_pairs[i]; k++)
            if (pairs[i][k].layer < hp->n_layers)
                lo->first[slot(pairs[i][k].layer, pairs[i][k].target) + 1]++;
    }
    for (size_t s = 0; s < n_slots; s++)
        lo->first[s + 1] += lo->first[s];
    memcpy(fill, lo->first, (n_slots + 1) * sizeof *fill);
    if (!(lo->mats = calloc(total, sizeof *lo->mats))) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; !st && i < n; i++) {
        for (size_t k = 0; !st && k < n_pairs[i]; k++) {
            const cr_lora_pair_t *p = &pairs[i][k];
            if (p->layer >= hp->n_layers) {
                st = prepare(m, paths[i], p, NULL, err); /* the layer error */
                break;
            }
            rn_lora_mat_t *mat = &lo->mats[fill[slot(p->layer, p->target)]++];
            st = prepare(m, paths[i], p, mat, err);
            if (!st) {
                lo->n_mats++;
                lo->max_rank = CR_MAX(lo->max_rank, p->rank);
                lo->bytes += p->a->size_bytes + p->b->size_bytes;
            }
        }
    }
out:
    for (size_t i = 0; i < CR_LORA_MAX_ADAPTERS; i++)
        free(pairs[i]);
    free(fill);
    if (st) {
        rn_lora_destroy(&lo);
        return st;
    }
    *out = lo;
    return CR_OK;
}

void rn_lora_destroy(rn_lora_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_lora_t *lo = *self_p;
    /* mats that were prepared have their instance set */
    size_t total = lo->first ? lo->first[(size_t)rn_model_hparams(lo->m)->n_layers *
                                         CR_LORA_N_TARGETS]
                             : 0;
    for (size_t i = 0; lo->mats && i < total; i++) {
        rn_lora_mat_t *mat = &lo->mats[i];
        if (mat->be) {
            mat->be->ops->weight_release(mat->be, &mat->a);
            mat->be->ops->weight_release(mat->be, &mat->b);
        }
    }
    for (size_t i = 0; i < lo->n_files; i++)
        cr_gguf_close(&lo->files[i]);
    free(lo->mats);
    free(lo->first);
    free(lo);
    *self_p = NULL;
}

const rn_lora_mat_t *rn_lora_of(const rn_lora_t *lo, int l, cr_lora_target_t target, size_t *n)
{
    *n = 0;
    if (!lo || l < 0 || l >= rn_model_hparams(lo->m)->n_layers ||
        (unsigned)target >= CR_LORA_N_TARGETS)
        return NULL;
    size_t s = slot(l, target);
    *n = lo->first[s + 1] - lo->first[s];
    return *n ? &lo->mats[lo->first[s]] : NULL;
}

int rn_lora_max_rank(const rn_lora_t *lo) { return lo ? lo->max_rank : 0; }
size_t rn_lora_count(const rn_lora_t *lo) { return lo ? lo->n_files : 0; }
uint64_t rn_lora_bytes(const rn_lora_t *lo) { return lo ? lo->bytes : 0; }
