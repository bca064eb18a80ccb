/* peers.c: owners of uploads and jobs, for liveness probes (peers.h). */
#include "lib/prelude.h"
#include "services/registry/peers.h"
#include "proto/msg.h"

typedef struct entry {
    char id[MSG_ID_MAX + 1];
    unsigned char identity[REG_PEER_ID_MAX];
    size_t len;
    int64_t probe_ms; /* last probe, or when noted */
    struct entry *next;
} entry_t;

struct reg_peers {
    entry_t *head;
    size_t n;
};

reg_peers_t *reg_peers_new(void)
{
    return calloc(1, sizeof(reg_peers_t));
}

void reg_peers_destroy(reg_peers_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    for (entry_t *e = (*self_p)->head, *n; e; e = n) {
        n = e->next;
        free(e);
    }
    free(*self_p);
    *self_p = NULL;
}

cr_status_t reg_peers_note(reg_peers_t *p, const char *id, const void *identity,
                           size_t len, int64_t now_ms)
{
    if (!id || !identity || len == 0 || len > REG_PEER_ID_MAX)
        return CR_E_INVALID;
    for (entry_t *e = p->head; e; e = e->next)
        if (!strcmp(e->id, id))
            return CR_OK;
    entry_t *e = calloc(1, sizeof *e);
    if (!e)
        return CR_E_NOMEM;
    snprintf(e->id, sizeof e->id, "%s", id);
    memcpy(e->identity, identity, len);
    e->len = len;
    e->probe_ms = now_ms;
    e->next = p->head;
    p->head = e;
    p->n++;
    return CR_OK;
}

size_t reg_peers_count(const reg_peers_t *p)
{
    return p->n;
}

void reg_peers_probe(reg_peers_t *p, int64_t now_ms, int64_t every_ms,
                     reg_peer_probe_fn probe, void *ctx)
{
    for (entry_t **pp = &p->head; *pp;) {
        entry_t *e = *pp;
        if (now_ms - e->probe_ms < every_ms) {
            pp = &e->next;
            continue;
        }
        e->probe_ms = now_ms;
        if (probe(ctx, e->id, e->identity, e->len)) {
            pp = &e->next;
            continue;
        }
        *pp = e->next;
        free(e);
        p->n--;
    }
}
