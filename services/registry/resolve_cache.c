/* resolve_cache.c: recent `resolved` answers by (name, manifest digest);
 * see resolve_cache.h. A small array searched in order: 16 entries, one
 * lookup per model request. */
#include "lib/prelude.h"
#include "services/registry/resolve_cache.h"

#define KEY_MAX 512

typedef struct entry {
    char name[KEY_MAX];
    char digest[80];
    msg_t reply;
    uint64_t used; /* tick of the last get or put */
    bool live;
} entry_t;

struct reg_resolve_cache {
    entry_t e[REG_RESOLVE_CACHE_MAX];
    uint64_t tick;
    long hits;
};

reg_resolve_cache_t *reg_resolve_cache_new(void)
{
    return calloc(1, sizeof(reg_resolve_cache_t));
}

void reg_resolve_cache_destroy(reg_resolve_cache_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    reg_resolve_cache_t *c = *self_p;
    for (int i = 0; i < REG_RESOLVE_CACHE_MAX; i++)
        if (c->e[i].live)
            msg_clear(&c->e[i].reply);
    free(c);
    *self_p = NULL;
}

static entry_t *find(reg_resolve_cache_t *c, const char *name, const char *digest)
{
    for (int i = 0; i < REG_RESOLVE_CACHE_MAX; i++) {
        entry_t *e = &c->e[i];
        if (e->live && !strcmp(e->name, name) && !strcmp(e->digest, digest))
            return e;
    }
    return NULL;
}

bool reg_resolve_cache_get(reg_resolve_cache_t *c, const char *name,
                           const char *manifest_digest, const char *id, msg_t *out)
{
    entry_t *e = c ? find(c, name, manifest_digest) : NULL;
    msg_t copy;
    if (!e || msg_copy(&e->reply, &copy))
        return false;
    msg_clear(out);
    *out = copy;
    snprintf(out->id, sizeof out->id, "%s", id ? id : "");
    e->used = ++c->tick;
    c->hits++;
    return true;
}

void reg_resolve_cache_put(reg_resolve_cache_t *c, const char *name,
                           const char *manifest_digest, const msg_t *resolved)
{
    if (!c || strlen(name) >= KEY_MAX || strlen(manifest_digest) >= sizeof c->e[0].digest)
        return;
    entry_t *e = find(c, name, manifest_digest);
    if (!e) { /* a free entry, else the least recently used */
        e = &c->e[0];
        for (int i = 0; i < REG_RESOLVE_CACHE_MAX && e->live; i++)
            if (!c->e[i].live || c->e[i].used < e->used)
                e = &c->e[i];
    }
    if (e->live)
        msg_clear(&e->reply);
    e->live = false;
    if (msg_copy(resolved, &e->reply))
        return;
    snprintf(e->name, sizeof e->name, "%s", name);
    snprintf(e->digest, sizeof e->digest, "%s", manifest_digest);
    e->used = ++c->tick;
    e->live = true;
}

long reg_resolve_cache_hits(const reg_resolve_cache_t *c)
{
    return c ? c->hits : 0;
}
