/* load_blobs.c: the blobs a load names (load_blobs.h). */
#include "lib/prelude.h"
#include "services/node/load_blobs.h"

static cr_status_t add(nd_load_blobs_t *lb, const char *role,
                       const char *path, cr_err_t *err)
{
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path;
    if (!nd_digest_valid(base))
        return cr_err_set(err, CR_E_INVALID,
                          "%s path '%s' is not a store blob (sha256-<hex>)",
                          role, path ? path : "");
    nd_load_blob_t *b = &lb->v[lb->n++];
    snprintf(b->role, sizeof b->role, "%s", role);
    snprintf(b->digest, sizeof b->digest, "%s", base);
    b->path[0] = '\0';
    return CR_OK;
}

cr_status_t nd_load_blobs_of(const msg_t *load, nd_load_blobs_t *out,
                             cr_err_t *err)
{
    const msg_load_body_t *l = &load->u.load;
    out->n = 0;
    out->next = 0;
    size_t n_adapters = l->has_adapters ? l->adapters.n : 0;
    if (n_adapters > ND_LOAD_ADAPTERS_MAX)
        return cr_err_set(err, CR_E_INVALID,
                          "%zu adapters; a node loads at most %d", n_adapters,
                          ND_LOAD_ADAPTERS_MAX);
    cr_status_t st = add(out, "model", l->model_path, err);
    for (size_t i = 0; !st && i < n_adapters; i++) {
        char role[24];
        snprintf(role, sizeof role, "adapter %zu", i + 1);
        st = add(out, role, l->adapters.v[i], err);
    }
    if (!st && l->has_projector && l->projector && *l->projector)
        st = add(out, "projector", l->projector, err);
    if (!st && l->has_draft_path && l->draft_path && *l->draft_path)
        st = add(out, "draft", l->draft_path, err);
    return st;
}

nd_load_blob_t *nd_load_blobs_pending(nd_load_blobs_t *lb)
{
    return lb->next < lb->n ? &lb->v[lb->next] : NULL;
}

bool nd_load_blobs_waits_for(const nd_load_blobs_t *lb, const char *digest)
{
    for (size_t i = lb->next; i < lb->n; i++)
        if (!strcmp(lb->v[i].digest, digest))
            return true;
    return false;
}

cr_status_t nd_load_blobs_rewrite(msg_t *load, const nd_load_blobs_t *lb,
                                  cr_err_t *err)
{
    msg_load_body_t *l = &load->u.load;
    size_t k = 0;
    char *p = msg_strdup(load, lb->v[k++].path);
    if (!p)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    l->model_path = p;
    size_t n_adapters = l->has_adapters ? l->adapters.n : 0;
    for (size_t i = 0; i < n_adapters; i++) {
        if (!(p = msg_strdup(load, lb->v[k++].path)))
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        l->adapters.v[i] = p;
    }
    /* then the projector and the draft, each when the load names one */
    for (; k < lb->n; k++) {
        if (!(p = msg_strdup(load, lb->v[k].path)))
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        if (!strcmp(lb->v[k].role, "draft"))
            l->draft_path = p;
        else
            l->projector = p;
    }
    return CR_OK;
}
