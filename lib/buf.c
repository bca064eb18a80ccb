/* buf.c: bounded growable buffer. */
#include "lib/prelude.h"
#include "lib/buf.h"

void cr_buf_init(cr_buf_t *b, size_t max_bytes)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max_bytes = max_bytes;
}

void cr_buf_free(cr_buf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void cr_buf_reset(cr_buf_t *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

cr_status_t cr_buf_reserve(cr_buf_t *b, size_t n)
{
    if (n > b->max_bytes || b->len > b->max_bytes - n)
        return CR_E_TOO_LARGE;
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return CR_OK;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need)
        cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (cap > b->max_bytes + 1)
        cap = b->max_bytes + 1;
    char *p = realloc(b->data, cap);
    if (!p)
        return CR_E_NOMEM;
    b->data = p;
    b->cap = cap;
    return CR_OK;
}

cr_status_t cr_buf_append(cr_buf_t *b, const void *p, size_t n)
{
    cr_status_t st = cr_buf_reserve(b, n);
    if (st)
        return st;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return CR_OK;
}

cr_status_t cr_buf_puts(cr_buf_t *b, const char *s)
{
    return cr_buf_append(b, s, strlen(s));
}

cr_status_t cr_buf_putc(cr_buf_t *b, char c)
{
    return cr_buf_append(b, &c, 1);
}

cr_status_t cr_buf_printf(cr_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return CR_E_INVALID;
    cr_status_t st = cr_buf_reserve(b, (size_t)n);
    if (st)
        return st;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return CR_OK;
}

char *cr_buf_steal(cr_buf_t *b)
{
    char *p = b->data ? b->data : strdup("");
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}
