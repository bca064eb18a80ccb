/* cursor.h: a bounds-checked reader over untrusted bytes.
 *
 * Every read checks the bytes that remain and advances only on success, so a
 * parser built on it cannot read past its input. Little-endian, as GGUF is. */
#ifndef CR_CURSOR_H
#define CR_CURSOR_H

#include "lib/prelude.h"

typedef struct cr_cursor {
    const uint8_t *p;   /* next byte */
    const uint8_t *end; /* one past the last byte */
} cr_cursor_t;

static inline cr_cursor_t cr_cursor_make(const void *data, size_t len)
{
    cr_cursor_t c = {(const uint8_t *)data, (const uint8_t *)data + len};
    return c;
}

static inline size_t cr_cursor_left(const cr_cursor_t *c)
{
    return (size_t)(c->end - c->p);
}

/* Copies n bytes into out and advances; false (and no move) if short. */
static inline bool cr_cursor_read(cr_cursor_t *c, void *out, size_t n)
{
    if (cr_cursor_left(c) < n)
        return false;
    memcpy(out, c->p, n);
    c->p += n;
    return true;
}

/* Returns a pointer to the next n bytes and advances; NULL if short. */
static inline const uint8_t *cr_cursor_take(cr_cursor_t *c, size_t n)
{
    if (cr_cursor_left(c) < n)
        return NULL;
    const uint8_t *p = c->p;
    c->p += n;
    return p;
}

static inline bool cr_cursor_u8(cr_cursor_t *c, uint8_t *v) { return cr_cursor_read(c, v, 1); }
static inline bool cr_cursor_u16(cr_cursor_t *c, uint16_t *v) { return cr_cursor_read(c, v, 2); }
static inline bool cr_cursor_u32(cr_cursor_t *c, uint32_t *v) { return cr_cursor_read(c, v, 4); }
static inline bool cr_cursor_u64(cr_cursor_t *c, uint64_t *v) { return cr_cursor_read(c, v, 8); }

#endif
