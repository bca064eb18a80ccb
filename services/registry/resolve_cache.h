/* resolve_cache.h: recent `resolved` answers, so a request does not parse
 * its model's GGUF again.
 *
 * Every generate, chat and embed asks the registry to resolve its model;
 * the answer is built from the manifest and the GGUF's metadata, and
 * opening a GGUF reads all of it (a 128k-token vocabulary and its merges:
 * milliseconds per request). Manifests and blobs are content-addressed,
 * so an answer is a function of the name asked for and the manifest's
 * digest: an entry keyed by both is never stale, and a model created
 * again under its name has a new digest. The manifest itself is still
 * read on every resolve (a small file): a removed model is not found. */
#ifndef REG_RESOLVE_CACHE_H
#define REG_RESOLVE_CACHE_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"

#define REG_RESOLVE_CACHE_MAX 16 /* entries; the oldest is dropped */

typedef struct reg_resolve_cache reg_resolve_cache_t;

/* Caller owns; free with reg_resolve_cache_destroy. NULL when out of
 * memory. */
reg_resolve_cache_t *reg_resolve_cache_new(void);
void reg_resolve_cache_destroy(reg_resolve_cache_t **self_p);

/* A copy of the answer kept for (name, manifest_digest) into *out (caller
 * owns; msg_clear; what *out held is cleared first), with out->id set to
 * id: true. False, *out untouched, when none is kept (or out of memory). */
bool reg_resolve_cache_get(reg_resolve_cache_t *c, const char *name,
                           const char *manifest_digest, const char *id, msg_t *out);

/* Keeps a copy of a `resolved` answer for (name, manifest_digest),
 * replacing an older one for the same key. Out of memory keeps nothing. */
void reg_resolve_cache_put(reg_resolve_cache_t *c, const char *name,
                           const char *manifest_digest, const msg_t *resolved);

/* Answers served from the cache so far (for tests). */
long reg_resolve_cache_hits(const reg_resolve_cache_t *c);

#endif
