/* node_blobs.c: the blobs of a model a node may fetch (node_blobs.h). */
#include "lib/prelude.h"
#include "services/scheduler/node_blobs.h"

#include <unistd.h>

static const char *path_if(const char *p, const char *digest)
{
    if (!p || !digest)
        return NULL;
    const char *base = strrchr(p, '/');
    base = base ? base + 1 : p;
    return !strcmp(base, digest) && !access(p, R_OK) ? p : NULL;
}

const char *sch_node_blob_path(const msg_resolved_body_t *r,
                               const char *digest)
{
    const char *p = path_if(r->model_path, digest);
    for (size_t i = 0; !p && r->has_adapters && i < r->adapters.n; i++)
        p = path_if(r->adapters.v[i], digest);
    if (!p && r->has_projector)
        p = path_if(r->projector, digest);
    if (!p && r->has_draft_path)
        p = path_if(r->draft_path, digest);
    return p;
}
