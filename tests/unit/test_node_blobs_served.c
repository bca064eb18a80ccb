/* test_node_blobs_served.c: the scheduler serves a node's blob_get for
 * every blob of a model placed on it (the GGUF, each adapter, the
 * projector, the draft model) and for nothing else (services/scheduler/node_blobs). */
#include "lib/prelude.h"

#include <unistd.h>

#include "services/scheduler/node_blobs.h"
#include "tests/unit/check.h"

#define D_MODEL "sha256-1111111111111111111111111111111111111111111111111111111111111111"
#define D_AD1 "sha256-2222222222222222222222222222222222222222222222222222222222222222"
#define D_AD2 "sha256-3333333333333333333333333333333333333333333333333333333333333333"
#define D_PROJ "sha256-4444444444444444444444444444444444444444444444444444444444444444"
#define D_OTHER "sha256-5555555555555555555555555555555555555555555555555555555555555555"
#define D_DRAFT "sha256-6666666666666666666666666666666666666666666666666666666666666666"

static char dir_g[256];

static char *blob(const char *digest, char *out, size_t cap)
{
    snprintf(out, cap, "%s/%s", dir_g, digest);
    FILE *f = fopen(out, "w");
    CHECK(f != NULL);
    if (f)
        fclose(f);
    return out;
}

int main(void)
{
    snprintf(dir_g, sizeof dir_g, "/tmp/corral-test-node-blobs.XXXXXX");
    if (!mkdtemp(dir_g))
        return 1;
    char model[400], ad1[400], ad2[400], proj[400], other[400], draft[400];
    blob(D_MODEL, model, sizeof model);
    blob(D_AD1, ad1, sizeof ad1);
    blob(D_AD2, ad2, sizeof ad2);
    blob(D_PROJ, proj, sizeof proj);
    blob(D_DRAFT, draft, sizeof draft);
    blob(D_OTHER, other, sizeof other); /* in the store, no part of it */
    char *ads[] = {ad1, ad2};
    msg_resolved_body_t r;
    memset(&r, 0, sizeof r);
    r.model_path = model;
    r.has_model_path = true;
    r.adapters.v = ads;
    r.adapters.n = 2;
    r.has_adapters = true;
    r.projector = proj;
    r.has_projector = true;
    r.draft_path = draft;
    r.has_draft_path = true;

    const char *p = sch_node_blob_path(&r, D_MODEL);
    CHECK(p && !strcmp(p, model));
    p = sch_node_blob_path(&r, D_AD1);
    CHECK(p && !strcmp(p, ad1));
    p = sch_node_blob_path(&r, D_AD2);
    CHECK(p && !strcmp(p, ad2));
    p = sch_node_blob_path(&r, D_PROJ);
    CHECK(p && !strcmp(p, proj));
    p = sch_node_blob_path(&r, D_DRAFT); /* the draft model's weights */
    CHECK(p && !strcmp(p, draft));
    CHECK(sch_node_blob_path(&r, D_OTHER) == NULL);
    CHECK(sch_node_blob_path(&r, NULL) == NULL);

    /* A model without adapters or projector serves only its GGUF. */
    r.has_adapters = false;
    r.has_projector = false;
    r.has_draft_path = false;
    CHECK(sch_node_blob_path(&r, D_AD1) == NULL);
    CHECK(sch_node_blob_path(&r, D_DRAFT) == NULL);
    CHECK(sch_node_blob_path(&r, D_PROJ) == NULL);
    CHECK(sch_node_blob_path(&r, D_MODEL) != NULL);

    /* A path that is not a file here (an adopted runner names the node's
     * copy) is never served. */
    CHECK(unlink(model) == 0);
    CHECK(sch_node_blob_path(&r, D_MODEL) == NULL);

    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir_g);
    if (system(cmd)) {
    }
    return check_finish("node_blobs_served");
}
