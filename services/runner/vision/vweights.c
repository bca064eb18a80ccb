/* vweights.c: see vweights.h. */
#include "lib/prelude.h"
#include "services/runner/vision/vweights.h"

void rn_vweights_init(rn_vweights_t *w, const cr_gguf_t *g, be_backend_t *be,
                      const char *what)
{
    memset(w, 0, sizeof *w);
    w->g = g;
    w->be = be;
    w->what = what;
}

cr_status_t rn_vweights_add(rn_vweights_t *w, be_weight_t *out, cr_err_t *err)
{
    if (w->n == w->cap) {
        if (w->cap == RN_VWEIGHTS_MAX)
            return cr_err_set(err, CR_E_UNSUPPORTED, "%s: more than %d tensors", w->what,
                              RN_VWEIGHTS_MAX);
        int cap = w->cap ? CR_MIN(w->cap * 2, RN_VWEIGHTS_MAX) : 64;
        be_weight_t **p = realloc(w->prepared, (size_t)cap * sizeof *p);
        if (!p)
            return cr_err_set(err, CR_E_NOMEM, "%s: out of memory", w->what);
        w->prepared = p;
        w->cap = cap;
    }
    cr_status_t st = w->be->ops->weight_prepare(w->be, out, err);
    if (st)
        return st;
    w->prepared[w->n++] = out;
    return CR_OK;
}

cr_status_t rn_vweights_bind(rn_vweights_t *w, const char *name, int64_t cols, int64_t rows,
                             bool required, bool vec, be_weight_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    const cr_gguf_tensor_t *t = cr_gguf_tensor_find(w->g, name);
    if (!t)
        return required ? cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' is missing",
                                     w->what, name)
                        : CR_OK;
    uint64_t last = t->n_dims > 1 ? t->ne[t->n_dims - 1] : 1;
    uint64_t first = last ? t->n_elems / last : 0;
    if (first != (uint64_t)cols || last != (uint64_t)rows)
        return cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' holds %" PRIu64 " x %" PRIu64
                          " elements, expected %" PRId64 " x %" PRId64, w->what, name, last,
                          first, rows, cols);
    if (vec && t->type != CR_TYPE_F32)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: tensor '%s' must be F32", w->what,
                          name);
    if ((uintptr_t)t->data % (t->type == CR_TYPE_F32 ? 4 : 2))
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: tensor '%s' is misaligned", w->what,
                          name);
    *out = (be_weight_t){
        .name = t->name,
        .type = t->type,
        .n_cols = cols,
        .n_rows = rows,
        .row_bytes = (size_t)(t->size_bytes / (uint64_t)rows),
        .data = t->data,
    };
    cr_status_t st = rn_vweights_add(w, out, err);
    if (!st)
        w->bytes += t->size_bytes;
    return st;
}

void rn_vweights_release(rn_vweights_t *w)
{
    for (int i = 0; i < w->n; i++)
        if (w->be->ops->weight_release)
            w->be->ops->weight_release(w->be, w->prepared[i]);
    free(w->prepared);
    w->prepared = NULL;
    w->n = w->cap = 0;
}
