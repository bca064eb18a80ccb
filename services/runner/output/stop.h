/* stop.h: stop strings matched across token boundaries.
 *
 * Generated text arrives one token piece at a time, and a stop string can
 * span several pieces. The matcher is fed each piece and appends to an output
 * buffer only text that is safe to send: it holds back any tail that could
 * still grow into a stop string, and any incomplete UTF-8 sequence at the
 * end, so output always ends on a character boundary. When a stop string
 * completes, the text before it is released and the stop string and
 * everything after it are dropped; later pushes emit nothing.
 *
 * It owns only the stop strings and the held-back bytes; it knows nothing of
 * tokens, templates or the bus. */
#ifndef RN_STOP_H
#define RN_STOP_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

/* Limits on what a request may ask for. */
#define RN_STOP_MAX_STRINGS 64
#define RN_STOP_MAX_LEN 1024 /* bytes per stop string */

typedef struct rn_stop rn_stop_t;

/* Copies n stop strings (each NUL-terminated UTF-8). Empty strings are
 * ignored; n may be 0 (the matcher then only holds back incomplete UTF-8).
 * CR_E_TOO_LARGE past RN_STOP_MAX_STRINGS or RN_STOP_MAX_LEN (err names the
 * index), CR_E_INVALID for a NULL string, CR_E_NOMEM.
 * Caller owns; free with rn_stop_destroy. */
rn_stop_t *rn_stop_new(const char *const *strings, size_t n, cr_err_t *err);

/* Frees; accepts NULL and *self_p == NULL; sets *self_p = NULL. */
void rn_stop_destroy(rn_stop_t **self_p);

/* Forgets held text and the stopped state, keeping the strings. */
void rn_stop_reset(rn_stop_t *s);

/* Feeds len bytes of generated text. Appends the text now safe to send to
 * out (not reset first) and sets *stopped when a stop string has completed
 * (now or earlier); once stopped, pieces are ignored. On a buffer error
 * (CR_E_TOO_LARGE/CR_E_NOMEM from out or the internal hold buffer) nothing
 * is appended and the matcher state is unchanged. */
cr_status_t rn_stop_push(rn_stop_t *s, const char *piece, size_t len,
                         cr_buf_t *out, bool *stopped);

/* End of generation without a stop: appends everything held back to out.
 * An incomplete UTF-8 sequence at the very end becomes U+FFFD. Nothing is
 * appended once stopped. Leaves nothing held; the stopped state stays until
 * rn_stop_reset. */
cr_status_t rn_stop_flush(rn_stop_t *s, cr_buf_t *out);

/* Which stop string completed (index into the strings as given, counting
 * ignored empty ones), or -1 if none. */
int rn_stop_which(const rn_stop_t *s);

/* The text of the stop string that completed (borrowed: valid until
 * rn_stop_destroy), or NULL if none. */
const char *rn_stop_matched(const rn_stop_t *s);

/* Bytes held back right now (for tests). */
size_t rn_stop_held(const rn_stop_t *s);

#endif
