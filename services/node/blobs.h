/* blobs.h: the node's content-addressed blob cache and the fetch of one
 * blob from the scheduler in chunks.
 *
 * Layout as the store's: <cache>/blobs/sha256-<hex>. A fetch writes
 * <cache>/blobs/sha256-<hex>-partial, hashing as it goes; a node that
 * restarts mid-fetch re-hashes the partial file and asks only for the rest
 * (resumable). Only a file whose SHA-256 matches its name is renamed into
 * place, so a cached blob is always verified. One fetch per digest: every
 * load waiting for it is answered when it ends.
 *
 * The fetch is a pure state machine over buffers: the agent sends the
 * blob_get this module asks for and feeds back each blob_data. It knows
 * nothing of sockets or runners. */
#ifndef ND_BLOBS_H
#define ND_BLOBS_H

#include "lib/prelude.h"
#include "lib/status.h"

#define ND_DIGEST_MAX 72        /* "sha256-" + 64 hex + NUL */
#define ND_CHUNK_BYTES (4 << 20) /* one blob_get asks for this much */

/* True if name is "sha256-" followed by 64 lowercase hex digits. */
bool nd_digest_valid(const char *name);

/* Where digest lives on this node, if it does: the cache first, then the
 * shared store (store_dir/blobs/<digest>, skipped when store_dir is "" or
 * NULL). Writes the path into out and returns true when the file exists.
 * A cache hit is marked used now (its mtime), for nd_cache_prune's LRU. */
bool nd_blob_find(const char *cache_dir, const char *store_dir,
                  const char *digest, char *out, size_t cap);

typedef struct nd_fetch nd_fetch_t;

/* Starts (or resumes) fetching digest into cache_dir/blobs. Caller owns;
 * free with nd_fetch_destroy (which keeps the partial file for a resume).
 * CR_E_INVALID for a bad digest; CR_E_IO naming the path. */
cr_status_t nd_fetch_new(const char *cache_dir, const char *digest,
                         nd_fetch_t **out, cr_err_t *err);
void nd_fetch_destroy(nd_fetch_t **self_p);

/* The digest this fetch is for (borrowed). */
const char *nd_fetch_digest(const nd_fetch_t *f);

/* The next range to ask for: offset and length (length ND_CHUNK_BYTES). */
int64_t nd_fetch_offset(const nd_fetch_t *f);

/* Feeds one blob_data: bytes [offset, offset+len) of a blob of `total`
 * bytes. CR_OK with *done false: ask for the next range; *done true: the
 * blob is verified and in place (path in nd_fetch_path). Errors end the
 * fetch (the caller destroys it): CR_E_PROTO for an offset that is not
 * the one asked for or a total that changed, CR_E_TRUNCATED for an empty
 * chunk before the end, CR_E_CORRUPT for a digest mismatch (the partial
 * file is deleted), CR_E_IO for a write error. */
cr_status_t nd_fetch_feed(nd_fetch_t *f, int64_t offset, int64_t total,
                          const void *data, size_t len, bool *done,
                          cr_err_t *err);

/* The final path of the blob (valid once done). */
const char *nd_fetch_path(const nd_fetch_t *f);

/* ---- the cache bound (CORRAL_NODE_CACHE_MAX) ---- */

#define ND_CACHE_MAX_BLOBS 65536 /* blobs one prune looks at */

typedef struct nd_prune {
    int n_removed;
    int64_t removed_bytes;
    int64_t total_bytes;  /* verified blobs left in the cache */
} nd_prune_t;

/* Removes verified blobs (cache_dir/blobs/sha256-<hex>; never `-partial`
 * files) least recently used first (oldest mtime: a fetch or a cache hit
 * sets it) until what is left totals at most max_bytes, skipping the
 * n_keep digests in keep (blobs runners use or wait for). It may stay
 * above max_bytes when only kept blobs are left. CR_E_IO naming the dir
 * if it cannot be read (a missing dir is an empty cache). */
cr_status_t nd_cache_prune(const char *cache_dir, int64_t max_bytes,
                           const char *const *keep, size_t n_keep,
                           nd_prune_t *out, cr_err_t *err);

#endif
