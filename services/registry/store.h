/* store.h: the model store on disk, in Ollama's layout.
 *
 *   <root>/manifests/<host>/<namespace>/<model>/<tag>   manifest JSON
 *   <root>/blobs/sha256-<64 hex>                        content-addressed
 *
 * Owns paths, digests, blob files (streamed in through a SHA-256 writer
 * that verifies before it renames) and manifest files (written atomically:
 * temp file, fsync, rename, fsync of the folder). It knows nothing of what
 * a manifest means (manifest.h) or of models (model.h).
 *
 * Temporary files are hidden (`.corral-tmp-*` in blobs/, `.<tag>.tmp-*`
 * beside a manifest), so neither corral nor Ollama lists them as models or
 * mistakes them for Ollama's `-partial` download state. */
#ifndef REG_STORE_H
#define REG_STORE_H

#include "lib/prelude.h"
#include "lib/model_name.h"
#include "lib/status.h"

#include <time.h>

#define REG_HEX_LEN 64             /* hex digits of a SHA-256 */
#define REG_PATH_MAX 4096          /* any path the store builds */
#define REG_MANIFEST_MAX (4u << 20) /* bytes of one manifest file */
#define REG_MAX_MANIFESTS 100000   /* manifests listed at most */

typedef struct reg_store reg_store_t;

/* Opens (creating if needed, mode 0755) the store at root with its blobs/
 * and manifests/ folders. Removes stale temp files older than an hour and
 * renames legacy "sha256:<hex>" blob names to "sha256-<hex>".
 * Caller owns; free with reg_store_destroy. NULL on failure (err says why:
 * CR_E_IO with the path and errno text, CR_E_INVALID for a relative or
 * over-long root). */
reg_store_t *reg_store_new(const char *root, cr_err_t *err);
void reg_store_destroy(reg_store_t **self_p);

/* The absolute root. Borrowed; valid until destroy. */
const char *reg_store_root(const reg_store_t *s);

/* ---- digests ---- */

/* Parses "sha256:<64 hex>" or "sha256-<64 hex>" (hex of either case) into
 * hex (65 bytes, lower case). CR_E_INVALID "invalid digest format"
 * otherwise. */
cr_status_t reg_digest_parse(const char *text, char hex[REG_HEX_LEN + 1],
                             cr_err_t *err);

/* Lower-case hex SHA-256 of data into hex (65 bytes). */
void reg_sha256_hex(const void *data, size_t len, char hex[REG_HEX_LEN + 1]);

/* ---- blobs ---- */

/* <root>/blobs/sha256-<hex> into buf; false if it does not fit. */
bool reg_store_blob_path(const reg_store_t *s, const char *hex, char *buf,
                         size_t cap);

/* True if the blob exists as a regular file; its size into *size (may be
 * NULL). */
bool reg_store_blob_exists(const reg_store_t *s, const char *hex,
                           uint64_t *size);

/* Reads a whole blob of at most max bytes into *data (caller owns; free();
 * NUL-terminated, the NUL not counted in *len). CR_E_NOT_FOUND if absent,
 * CR_E_TOO_LARGE past max, CR_E_IO. */
cr_status_t reg_store_blob_read(const reg_store_t *s, const char *hex,
                                size_t max, char **data, size_t *len,
                                cr_err_t *err);

/* Stores len bytes as a blob (content-addressed; atomic). hex receives the
 * digest; *created (may be NULL) is false when the blob already existed. */
cr_status_t reg_store_blob_put(reg_store_t *s, const void *data, size_t len,
                               char hex[REG_HEX_LEN + 1], bool *created,
                               cr_err_t *err);

/* Sets a blob's mtime to now (create does this to blobs it reuses). */
void reg_store_blob_touch(const reg_store_t *s, const char *hex);

/* Removes a blob; absent is not an error. A pinned blob (below) stays:
 * CR_E_BUSY. */
cr_status_t reg_store_blob_remove(reg_store_t *s, const char *hex,
                                  cr_err_t *err);

/* Every blob file (sha256-<lower-case hex>) whose mtime is at least
 * min_age_s seconds old: *hexes (caller owns; free()) of *n entries.
 * Other files in blobs/ are not listed. */
cr_status_t reg_store_blob_list(const reg_store_t *s,
                                char (**hexes)[REG_HEX_LEN + 1], size_t *n,
                                int64_t min_age_s);

/* A streaming blob write: bytes go to a temp file in blobs/ while SHA-256
 * is computed; finish verifies and renames. */
typedef struct reg_blob_writer reg_blob_writer_t;

/* Starts a write. want_hex (lower-case hex, may be NULL) is the digest the
 * bytes must have. Caller owns; free with reg_blob_writer_destroy, which
 * removes the temp file unless finish succeeded. */
cr_status_t reg_blob_writer_new(reg_store_t *s, const char *want_hex,
                                reg_blob_writer_t **out, cr_err_t *err);

cr_status_t reg_blob_writer_write(reg_blob_writer_t *w, const void *data,
                                  size_t len, cr_err_t *err);

/* Bytes written so far. */
uint64_t reg_blob_writer_size(const reg_blob_writer_t *w);

/* Flushes, fsyncs and checks the digest. On a mismatch: CR_E_INVALID
 * `digest mismatch, expected "sha256:<want>", got "sha256:<got>"` and the
 * temp file is removed. Else renames into place (if the blob already
 * existed the new copy is dropped and *created = false). hex (may be NULL)
 * receives the digest. The writer accepts no more writes afterwards. */
cr_status_t reg_blob_writer_finish(reg_blob_writer_t *w,
                                   char hex[REG_HEX_LEN + 1], bool *created,
                                   cr_err_t *err);

void reg_blob_writer_destroy(reg_blob_writer_t **self_p);

/* ---- manifests ---- */

/* Finds the stored manifest for want, matching each part ignoring case,
 * and writes its stored spelling into *stored (may alias want).
 * CR_E_NOT_FOUND if none. */
cr_status_t reg_store_manifest_find(const reg_store_t *s,
                                    const cr_model_name_t *want,
                                    cr_model_name_t *stored);

/* Reads a manifest (name as stored) into *data (caller owns; free();
 * NUL-terminated), with its mtime (may be NULL). CR_E_NOT_FOUND,
 * CR_E_TOO_LARGE past REG_MANIFEST_MAX, CR_E_IO. */
cr_status_t reg_store_manifest_read(const reg_store_t *s,
                                    const cr_model_name_t *name, char **data,
                                    size_t *len, struct timespec *mtime,
                                    cr_err_t *err);

/* Writes a manifest atomically, creating its folders. */
cr_status_t reg_store_manifest_write(reg_store_t *s,
                                     const cr_model_name_t *name,
                                     const void *data, size_t len,
                                     cr_err_t *err);

/* Removes a manifest and the folders it leaves empty (up to manifests/).
 * CR_E_NOT_FOUND if absent. */
cr_status_t reg_store_manifest_remove(reg_store_t *s,
                                      const cr_model_name_t *name,
                                      cr_err_t *err);

/* Every stored manifest's name (as stored), in no particular order. Files
 * whose path is not a valid name (temp files, strays) are skipped.
 * *names is caller-owned (free()). */
cr_status_t reg_store_manifest_list(const reg_store_t *s,
                                    cr_model_name_t **names, size_t *n,
                                    cr_err_t *err);

/* ---- writers at once ----
 *
 * Pulls, creates (job threads) and deletes (the request loop) share the
 * store. A writer building a manifest pins every blob it will name, so
 * that no prune (a replaced or deleted model's blobs, a failed create's)
 * removes one before that manifest is written; a writer writes its
 * manifest and prunes what it replaced while holding the commit lock, and
 * reg_prune_unreferenced (ops.h) holds it from listing the manifests to
 * removing, so neither sees the other half done. */

/* The commit lock: recursive, held only for a manifest write and a prune,
 * never while data is converted or copied. */
void reg_store_lock(reg_store_t *s);
void reg_store_unlock(reg_store_t *s);

/* Pins blob hex (counted: each pin needs its unpin). With must_exist, an
 * absent blob is CR_E_NOT_FOUND "blob sha256:<hex> not found" and not
 * pinned (checked under the lock, so a pinned blob that exists stays until
 * unpinned). CR_E_NOMEM. */
cr_status_t reg_store_pin(reg_store_t *s, const char *hex, bool must_exist,
                          cr_err_t *err);
void reg_store_unpin(reg_store_t *s, const char *hex);
bool reg_store_is_pinned(reg_store_t *s, const char *hex);

/* ---- test hooks ---- */

/* Called at named points of long work (a create's conversion: "convert
 * tensor" before each tensor), from the thread doing it, which goes on
 * when fn returns: a test holds a create there to look at the service
 * meanwhile. Set it before any job starts; NULL fn removes it. */
typedef void (*reg_store_step_fn)(void *ctx, const char *point);
void reg_store_set_step_hook(reg_store_t *s, reg_store_step_fn fn, void *ctx);

/* Calls the step hook, if any, with point. */
void reg_store_step(const reg_store_t *s, const char *point);

/* Makes the next manifest write stop after writing and syncing its temp
 * file, as if the process died before the rename: returns CR_E_IO and
 * leaves the temp file behind. One-shot. */
void reg_store_fail_next_manifest_rename(reg_store_t *s);

/* The lock file, in the store's root, that the serving registry holds. */
#define REG_STORE_LOCK ".corral-registry.lock"

/* Claims the store for this process's writes: takes an exclusive flock on
 * REG_STORE_LOCK (held until destroy; not inherited by children) and then,
 * since no other registry can be writing, removes every temp file (those a
 * killed registry left), counted in *removed. reg_store_new alone removes
 * only those an hour old: a doctor or a test may open a store a registry
 * serves. CR_E_BUSY when another process holds the lock (its temp files
 * are work in progress), CR_E_IO when the lock file cannot be made. */
cr_status_t reg_store_claim(reg_store_t *s, size_t *removed, cr_err_t *err);

/* Removes hidden temp files in blobs/ and manifests/ older than
 * min_age_s seconds (0: all). Returns how many were removed. */
size_t reg_store_clean_temp(reg_store_t *s, int64_t min_age_s);

#endif
