/* download.h: fetching one blob from a remote registry into the store, in
 * parallel ranged parts, resumable, verified (§7.1 of the API reference).
 *
 * A blob is written at its parts' offsets into `blobs/sha256-<hex>-partial`
 * (sized to the blob up front); each part's progress is kept in
 * `blobs/sha256-<hex>-partial-<N>` as JSON {"N","Offset","Size",
 * "Completed"}, saved five times a second and whenever a part stops, so a
 * pull killed at any point resumes from there. The blob URL is first
 * resolved: same-host redirects are followed, the first redirect to another
 * host becomes the direct URL and is fetched without the Authorization
 * header. Up to max_active parts run at once on one libcurl multi handle,
 * starting with one and adding another only while the last one added
 * raised the throughput (ramp.h); a part that receives nothing for
 * stall_ms is restarted (not counted as a
 * failure); a failing part is retried with exponential backoff up to
 * max_attempts; cancellation and a full disk stop everything at once.
 *
 * When all parts are in, the file's SHA-256 is checked; a mismatch deletes
 * the partial data and state (`digest mismatch, file must be downloaded
 * again: want sha256:…, got sha256:…`); a match renames it into blobs/.
 *
 * Two pulls that need the same blob at once share one download through a
 * reg_transfers_t table: the first runs it, the others wait and see its
 * progress. A canceled pull withdraws: a waiting one returns at once; the
 * one running the download goes on running it while any other pull still
 * waits (it must get its model), and the download stops when the last
 * waiting pull is canceled, its part state kept for a resume. A pull that
 * comes while such a download is stopping waits for it to end, then
 * resumes the blob itself. */
#ifndef REG_DOWNLOAD_H
#define REG_DOWNLOAD_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/registry/oci_client.h"
#include "services/registry/store.h"

#include <stdatomic.h>

typedef struct reg_dl_opts {
    int64_t part_min_bytes; /* part size = size/16 clamped to [min, max] */
    int64_t part_max_bytes;
    int max_active;         /* parts downloading at once */
    int max_attempts;       /* failures of one part before giving up */
    int64_t backoff_ms;     /* first retry delay; doubles each time */
    int64_t stall_ms;       /* silence after which a part is restarted */
    int64_t ramp_ms;        /* the ramp's measuring window (ramp.h); 0:
                               max_active at once from the start */
} reg_dl_opts_t;

/* Ollama's values: parts of 100..1000 MB, 16 at once, 6 attempts from 1 s,
 * 30 s stall; the ramp measures over 250 ms. A fast link (one connection
 * saturates it) so stays at one or two parts, nearly sequential, and
 * hashing follows the download instead of trailing it; a slow one
 * reaches 16 parts within a few seconds. */
void reg_dl_opts_default(reg_dl_opts_t *o);

/* Shared downloads, one per blob digest. Caller owns; free with
 * reg_transfers_destroy once no download runs. NULL if out of memory. */
typedef struct reg_transfers reg_transfers_t;
reg_transfers_t *reg_transfers_new(void);
void reg_transfers_destroy(reg_transfers_t **self_p);

/* True while some pull downloads hex (pruning leaves such blobs alone). */
bool reg_transfers_busy(reg_transfers_t *t, const char *hex);

/* Progress of one blob: bytes in place so far of total. Called from the
 * downloading thread, often; throttle in the callback. */
typedef void (*reg_dl_progress_fn)(void *ctx, int64_t completed, int64_t total);

/* Downloads blob hex of size bytes from c's repository into s, sharing
 * the transfer through t (may be NULL: no sharing). cancel (may be NULL)
 * is this caller's flag. A blob already in the store is not fetched.
 * Errors: CR_E_CANCELED `canceled`, CR_E_CORRUPT digest
 * mismatch, CR_E_IO (disk full: `no space left on device`), CR_E_NOT_FOUND
 * (the registry has no such blob), CR_E_UNAVAILABLE/CR_E_UNAUTHORIZED from
 * the registry. */
cr_status_t reg_blob_download(reg_store_t *s, reg_transfers_t *t, reg_oci_t *c,
                              const char *hex, int64_t size,
                              const reg_dl_opts_t *o, const atomic_bool *cancel,
                              reg_dl_progress_fn fn, void *ctx, cr_err_t *err);

#endif
