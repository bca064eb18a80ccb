/* jinja_arena.c: the arena a parse or a render allocates from, the error
 * jump, and the capped string builder (see jinja_impl.h for why). */
#include "services/runner/jinja/jinja_impl.h"

#define CHUNK_BYTES ((size_t)64 * 1024)

struct jj_chunk {
    jj_chunk_t *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void jj_throw(jj_jump_t *j, cr_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->msg, sizeof j->msg, fmt, ap);
    va_end(ap);
    j->status = st;
    longjmp(j->env, 1);
}

void jj_arena_init(jj_arena_t *a, size_t max_bytes, jj_jump_t *jump)
{
    a->chunks = NULL;
    a->used_bytes = 0;
    a->max_bytes = max_bytes;
    a->jump = jump;
}

void jj_arena_free(jj_arena_t *a)
{
    jj_chunk_t *c = a->chunks;
    while (c) {
        jj_chunk_t *next = c->next;
        free(c);
        c = next;
    }
    a->chunks = NULL;
    a->used_bytes = 0;
}

void *jj_alloc(jj_arena_t *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    jj_chunk_t *c = a->chunks;
    if (!c || c->size - c->used < n) {
        /* A big block gets a chunk of its own, so the current chunk's
         * free space is not lost for the small ones after it. */
        size_t size = n > CHUNK_BYTES / 4 ? n : CHUNK_BYTES;
        if (size > a->max_bytes || a->used_bytes > a->max_bytes - size)
            jj_throw(a->jump, CR_E_TOO_LARGE,
                     "MemoryError: the template used more than %zu bytes of memory",
                     a->max_bytes);
        jj_chunk_t *nc = malloc(sizeof *nc + size);
        if (!nc)
            jj_throw(a->jump, CR_E_NOMEM, "MemoryError: out of memory");
        nc->size = size;
        nc->used = 0;
        a->used_bytes += size;
        if (size == CHUNK_BYTES || !c) {
            nc->next = c;
            a->chunks = nc;
        } else {
            nc->next = c->next;
            c->next = nc;
        }
        c = nc;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void *jj_alloc_array(jj_arena_t *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        jj_throw(a->jump, CR_E_TOO_LARGE, "MemoryError: array of %zu items too large", n);
    return jj_alloc(a, n * size);
}

char *jj_strndup(jj_arena_t *a, const char *s, size_t n)
{
    if (n == SIZE_MAX)
        jj_throw(a->jump, CR_E_TOO_LARGE, "MemoryError: string too large");
    char *p = jj_alloc(a, n + 1);
    if (n)
        memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void jj_fail(jj_rt_t *rt, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rt->jump.msg, sizeof rt->jump.msg, fmt, ap);
    va_end(ap);
    rt->jump.status = CR_E_INVALID;
    longjmp(rt->jump.env, 1);
}

void jj_sb_init(jj_sb_t *sb, jj_rt_t *rt)
{
    sb->rt = rt;
    sb->p = NULL;
    sb->taint = NULL;
    sb->len = sb->cap = 0;
}

/* Makes room for n more bytes (and the NUL). */
static void sb_grow(jj_sb_t *sb, size_t n)
{
    size_t max = sb->rt->limits.max_output_bytes;
    if (n > max || sb->len > max - n)
        jj_throw(&sb->rt->jump, CR_E_TOO_LARGE,
                 "OutputError: the template's output exceeds %zu bytes", max);
    if (sb->len + n + 1 > sb->cap) {
        size_t cap = sb->cap ? sb->cap : 64;
        while (cap < sb->len + n + 1)
            cap *= 2;
        /* The old buffer stays in the arena until the render ends: at
         * most as many bytes again as the final one. */
        char *np = jj_alloc(&sb->rt->arena, cap);
        if (sb->len)
            memcpy(np, sb->p, sb->len);
        sb->p = np;
        if (sb->taint) {
            uint8_t *nt = jj_alloc(&sb->rt->arena, cap);
            memcpy(nt, sb->taint, sb->len);
            sb->taint = nt;
        }
        sb->cap = cap;
    }
}

/* Marks n bytes from `at` tainted (t NULL: all) or as t says. */
static void sb_mark(jj_sb_t *sb, size_t at, size_t n, const uint8_t *t)
{
    if (!sb->taint) {
        if (t && !memchr(t, 1, n))
            return;
        sb->taint = jj_alloc(&sb->rt->arena, sb->cap); /* zeroed: trusted */
    }
    if (t)
        memcpy(sb->taint + at, t, n);
    else
        memset(sb->taint + at, 1, n);
}

void jj_sb_append(jj_sb_t *sb, const char *p, size_t n)
{
    if (n == 0)
        return;
    sb_grow(sb, n);
    memcpy(sb->p + sb->len, p, n);
    if (sb->taint)
        memset(sb->taint + sb->len, 0, n);
    sb->len += n;
    sb->p[sb->len] = '\0';
}

void jj_sb_append_marked(jj_sb_t *sb, const char *p, size_t n, bool tainted)
{
    size_t at = sb->len;
    jj_sb_append(sb, p, n);
    if (tainted && n)
        sb_mark(sb, at, n, NULL);
}

void jj_sb_append_str(jj_sb_t *sb, const jj_str_t *s, size_t off, size_t n)
{
    size_t at = sb->len;
    jj_sb_append(sb, s->s + off, n);
    if (s->taint && n)
        sb_mark(sb, at, n, s->taint + off);
}

void jj_sb_puts(jj_sb_t *sb, const char *s)
{
    jj_sb_append(sb, s, strlen(s));
}

void jj_sb_printf(jj_sb_t *sb, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    jj_sb_append(sb, tmp, CR_MIN((size_t)n, sizeof tmp - 1));
}

jj_str_t *jj_sb_finish(jj_sb_t *sb)
{
    jj_str_t *s = jj_alloc(&sb->rt->arena, sizeof *s);
    s->len = sb->len;
    s->s = sb->p ? sb->p : "";
    s->taint = sb->taint;
    return s;
}
