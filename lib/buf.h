/* buf.h: the one growable byte buffer, with a hard maximum.
 *
 * Nothing driven by network or file input grows without a cap: every buffer
 * is created with `max_bytes` and appends past it fail with CR_E_TOO_LARGE.
 * The data is always NUL-terminated (the NUL is not counted in len). */
#ifndef CR_BUF_H
#define CR_BUF_H

#include "lib/prelude.h"
#include "lib/status.h"

typedef struct cr_buf {
    char *data;       /* owned; NULL until the first append */
    size_t len;       /* bytes used, excluding the trailing NUL */
    size_t cap;       /* bytes allocated */
    size_t max_bytes; /* hard cap on len */
} cr_buf_t;

/* Initializes an empty buffer that may grow to max_bytes. */
void cr_buf_init(cr_buf_t *b, size_t max_bytes);

/* Frees the data and leaves an empty buffer with the same cap. */
void cr_buf_free(cr_buf_t *b);

/* Sets len to 0, keeping the allocation. */
void cr_buf_reset(cr_buf_t *b);

/* Appends n bytes. CR_E_TOO_LARGE past max_bytes, CR_E_NOMEM on failure;
 * on error the buffer is unchanged. */
cr_status_t cr_buf_append(cr_buf_t *b, const void *p, size_t n);
cr_status_t cr_buf_puts(cr_buf_t *b, const char *s);
cr_status_t cr_buf_putc(cr_buf_t *b, char c);
cr_status_t cr_buf_printf(cr_buf_t *b, const char *fmt, ...) CR_PRINTF(2, 3);

/* Ensures room for n more bytes without changing len. */
cr_status_t cr_buf_reserve(cr_buf_t *b, size_t n);

/* Returns the data (caller owns; free with free()) and empties the buffer.
 * Never NULL unless allocation fails: an empty buffer yields "". */
char *cr_buf_steal(cr_buf_t *b);

#endif
