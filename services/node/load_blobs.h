/* load_blobs.h: the blobs one `load` names (the model, each LoRA adapter,
 * the vision projector), each to be found or fetched on this node before
 * the load goes to its runner with every path rewritten to the node's
 * copy. Pure: no sockets, no files. */
#ifndef ND_LOAD_BLOBS_H
#define ND_LOAD_BLOBS_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/node/blobs.h"

#define ND_LOAD_ADAPTERS_MAX 16
#define ND_LOAD_BLOBS_MAX (ND_LOAD_ADAPTERS_MAX + 3) /* + model, projector, draft */
#define ND_BLOB_PATH_MAX 4200

typedef struct nd_load_blob {
    char role[24];               /* "model", "adapter 2", "projector" */
    char digest[ND_DIGEST_MAX];
    char path[ND_BLOB_PATH_MAX]; /* this node's copy; "" until found */
} nd_load_blob_t;

typedef struct nd_load_blobs {
    size_t n;
    size_t next; /* blobs before it are found (path set) */
    nd_load_blob_t v[ND_LOAD_BLOBS_MAX];
} nd_load_blobs_t;

/* Lists the blobs of load (model first, adapters in order, projector
 * last). CR_E_INVALID naming the path when one is not a store blob
 * (.../sha256-<hex>) or there are more than ND_LOAD_ADAPTERS_MAX
 * adapters. */
cr_status_t nd_load_blobs_of(const msg_t *load, nd_load_blobs_t *out,
                             cr_err_t *err);

/* The first blob not found yet, or NULL when all are. */
nd_load_blob_t *nd_load_blobs_pending(nd_load_blobs_t *lb);

/* True if digest is one of lb's blobs not found yet. */
bool nd_load_blobs_waits_for(const nd_load_blobs_t *lb, const char *digest);

/* Writes every blob's path into load (in load's arena); all must be
 * found. CR_E_NOMEM. */
cr_status_t nd_load_blobs_rewrite(msg_t *load, const nd_load_blobs_t *lb,
                                  cr_err_t *err);

#endif
