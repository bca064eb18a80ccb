/* ops.h: the registry's operations on the store, one per bus request
 * (except create, in create.h): tags, copy, delete, resolve, blob_head,
 * and the pruning of blobs no manifest references.
 *
 * Each takes the decoded request body and fills a reply message (owned by
 * the caller; msg_clear it) or returns a status with the client-facing
 * message Ollama uses in err. Nothing here touches sockets. */
#ifndef REG_OPS_H
#define REG_OPS_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "proto/msg.h"
#include "services/registry/manifest.h"
#include "services/registry/resolve_cache.h"
#include "services/registry/store.h"

/* tags: every stored model, newest first: name (display form), modified_at
 * (manifest mtime, RFC 3339), size (layers + config), digest (hex sha256 of
 * the manifest bytes), details (from the config blob). A manifest that does
 * not parse is skipped (and logged). reply becomes a tags_reply. */
cr_status_t reg_op_tags(reg_store_t *s, const char *id, msg_t *reply,
                        cr_err_t *err);

/* copy: copies the manifest file only. CR_E_INVALID `source "<x>" is
 * invalid` / `destination "<x>" is invalid`; CR_E_NOT_FOUND
 * `model "<src>" not found`. */
cr_status_t reg_op_copy(reg_store_t *s, const msg_copy_body_t *req,
                        cr_err_t *err);

/* delete: removes the manifest, prunes empty folders and deletes the blobs
 * no other manifest references. CR_E_INVALID `name "<x>" is invalid`;
 * CR_E_NOT_FOUND `model '<x>' not found`. */
cr_status_t reg_op_delete(reg_store_t *s, const msg_delete_body_t *req,
                          cr_err_t *err);

/* resolve: what the scheduler needs to load a model. CR_E_INVALID
 * `invalid model name`; CR_E_NOT_FOUND `model "<x>" not found`;
 * CR_E_INVALID if the model has no GGUF weights layer. reply becomes a
 * `resolved` message owning its strings. */
cr_status_t reg_op_resolve(reg_store_t *s, const char *id,
                           const msg_resolve_body_t *req, msg_t *reply,
                           cr_err_t *err);

/* resolve, answering from cache (may be NULL: none) when it holds the
 * answer for this name and manifest (resolve_cache.h), and keeping a
 * fresh answer there. */
cr_status_t reg_op_resolve_cached(reg_store_t *s, reg_resolve_cache_t *cache,
                                  const char *id, const msg_resolve_body_t *req,
                                  msg_t *reply, cr_err_t *err);

/* show: reply becomes a show_reply carrying the body JSON. CR_E_INVALID
 * `invalid model name`; CR_E_NOT_FOUND `model '<x>' not found`. */
cr_status_t reg_op_show(reg_store_t *s, const char *id,
                        const msg_show_body_t *req, msg_t *reply,
                        cr_err_t *err);

/* blob_head: CR_OK if the blob exists; CR_E_NOT_FOUND; CR_E_INVALID
 * `invalid digest format`. */
cr_status_t reg_op_blob_head(reg_store_t *s, const msg_blob_head_body_t *req,
                             cr_err_t *err);

/* Deletes each blob of old (layers and config) that no stored manifest
 * references now. Does nothing if any manifest fails to parse (a blob it
 * needs could otherwise go). Returns how many blobs were removed. */
size_t reg_prune_unreferenced(reg_store_t *s, const reg_manifest_t *old);

/* Startup pruning (§6.4): if every manifest parses, deletes each blob that
 * no manifest references and whose mtime is at least grace_s seconds old
 * (Ollama skips files touched within the last hour). Partial download
 * files (`-partial`, `-partial-<N>`) that old go too, whatever the
 * manifests say; younger ones stay so their pulls can resume. Returns how
 * many blobs were removed. */
size_t reg_prune_store(reg_store_t *s, int64_t grace_s);

#endif
