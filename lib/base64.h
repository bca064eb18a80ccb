/* base64.h: standard padded base64 (RFC 4648, Go's StdEncoding).
 *
 * Images travel on the bus as the base64 text the client sent (the gateway
 * checks it); the runner decodes them here, the CLI encodes the image
 * files a prompt names. */
#ifndef CR_BASE64_H
#define CR_BASE64_H

#include "lib/prelude.h"
#include "lib/status.h"

/* Whether s[0..n) is valid (CR and LF skipped); if not, *bad_offset is
 * the input byte Go's decoder names: a bad character, misplaced padding,
 * anything after padding, or the start of a partial last quantum. */
bool cr_base64_valid(const char *s, size_t n, size_t *bad_offset);

/* Decodes s[0..n) (CR and LF skipped, as Go does) into *out (caller owns;
 * free with free()) of *out_len bytes. CR_E_INVALID "illegal base64 data
 * at input byte K" for a bad character, misplaced padding or a partial
 * last quantum; CR_E_NOMEM. */
cr_status_t cr_base64_decode(const char *s, size_t n, uint8_t **out, size_t *out_len,
                             cr_err_t *err);

/* The base64 text of p[0..n) (caller owns; free with free()), or NULL when
 * out of memory. */
char *cr_base64_encode(const uint8_t *p, size_t n);

#endif
