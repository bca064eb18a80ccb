/* pack_cache.h: packed weights kept on disk beside the model store, so a
 * model's second load maps them instead of packing again.
 *
 * Packing (repack.h) writes a copy of every packable matrix. Made in fresh
 * anonymous memory at each load, that copy cost more than the packing
 * itself on this kind of machine (a VM: the kernel zeroing 1.1 GB of new
 * pages was 53% of a TinyLlama Q8_0 load), and it was a second copy of the
 * weights in RAM. Written once into a cache file and mapped from the page
 * cache afterwards, a load maps the packed bytes as it maps the GGUF: no
 * copy, pages shared between runners of the same model, dropped by the
 * kernel under memory pressure like any file page.
 *
 * The file: a 4096-byte header (magic, layout version, the source file's
 * size/mtime/inode/device, tensor count, and a complete flag written
 * last), then per packed tensor a 4096-byte record (name, type, shape,
 * bytes) followed by its bytes, page-aligned so each is mapped on its own
 * (a tensor of 2 MiB or more at a multiple of 2 MiB, its record in the
 * page before and a hole in the file before that, so it can be mapped on
 * huge pages: huge_map.h).
 * Tensors are recorded in the order the model binds them; a load checks
 * each record against the tensor it asks for. Anything that does not match
 * (another layout version, another source file, a truncated or foreign
 * file) is never mapped: the load packs in memory and the stale file is
 * replaced.
 *
 * A build writes a temporary file (".<name>.tmp-<pid>", which the
 * registry's cleanup removes when a runner dies mid-way), and publishes it
 * with rename after the data has reached the disk; that sync runs in a
 * background thread so the first load does not wait for it. Space is
 * reserved with posix_fallocate before a tensor is mapped, so a full disk
 * is a clean fallback, never a SIGBUS.
 *
 * Where: CORRAL_PACK_CACHE=<dir> (or "off"); by default, for a model file
 * named sha256-<hex> (the store's blobs and a node's blob cache),
 * "packed" beside its "blobs" folder (else inside its folder). Other files
 * are not cached unless CORRAL_PACK_CACHE names a folder. The registry
 * removes a blob's cache file with the blob.
 *
 * Never an error: every failure logs at debug level and the caller packs in
 * memory as before. */
#ifndef BE_CPU_PACK_CACHE_H
#define BE_CPU_PACK_CACHE_H

#include "lib/prelude.h"

typedef struct be_pack_cache be_pack_cache_t;

/* The cache for the model file at path, reading a complete one or building
 * a new one; NULL when there is none to use. */
be_pack_cache_t *be_pack_cache_open(const char *model_path);

/* A mapping of exactly `bytes` for tensor `name` (type t, rows x cols):
 * *filled true when it holds the cached packed bytes (read-only), false
 * when it is new space for the caller to pack into. The caller owns it
 * (munmap(p, bytes)). NULL when the cache cannot serve this tensor; from
 * then on it serves no more (the rest are packed in memory). */
void *be_pack_cache_map(be_pack_cache_t *c, const char *name, int t, int64_t rows,
                        int64_t cols, size_t bytes, bool *filled);

/* Ends the load. A build that served every tensor and `ok` is published
 * (in a background thread: *publisher is set, join it with
 * be_pack_cache_join before the process exits or the next build); any
 * other build is deleted. Frees *self_p. */
void be_pack_cache_close(be_pack_cache_t **self_p, bool ok, void **publisher);

/* Waits for a publisher from be_pack_cache_close (NULL: nothing). */
void be_pack_cache_join(void **publisher);

/* Counts since the process started: tensors mapped from a cache and
 * tensors packed into a new one (tests and logs). */
void be_pack_cache_counts(int64_t *mapped, int64_t *built);

/* The cache file path for a model file (same rules as open); false when it
 * has none. */
bool be_pack_cache_path(const char *model_path, char *buf, size_t cap);

#endif
