/* test_registry_peers.c: the table of upload and job owners (peers.h):
 * identities are kept as given, a request is noted once, probes come at
 * the cadence asked, and a probe that answers false forgets the request. */
#include "lib/prelude.h"
#include "services/registry/peers.h"
#include "tests/unit/check.h"

typedef struct seen {
    int calls;
    char ids[8][40];
    unsigned char who[8][8];
    size_t len[8];
    const char *forget; /* the id to answer false for */
} seen_t;

static bool probe(void *ctx, const char *id, const void *identity, size_t len)
{
    seen_t *s = ctx;
    if (s->calls < 8) {
        snprintf(s->ids[s->calls], sizeof s->ids[0], "%s", id);
        memcpy(s->who[s->calls], identity, len < 8 ? len : 8);
        s->len[s->calls] = len;
    }
    s->calls++;
    return !(s->forget && !strcmp(s->forget, id));
}

int main(void)
{
    reg_peers_t *p = reg_peers_new();
    CHECK(p != NULL);
    if (!p)
        return check_finish("registry_peers");
    unsigned char a[5] = {0, 1, 2, 3, 4}, b[3] = {9, 9, 9};
    CHECK_EQ_INT(reg_peers_note(p, "up1", a, sizeof a, 1000), CR_OK);
    CHECK_EQ_INT(reg_peers_note(p, "up1", b, sizeof b, 1500), CR_OK); /* kept */
    CHECK_EQ_INT(reg_peers_note(p, "job2", b, sizeof b, 1200), CR_OK);
    CHECK_EQ_INT(reg_peers_count(p), 2);
    /* Bad identities are refused. */
    CHECK_EQ_INT(reg_peers_note(p, "x", a, 0, 1000), CR_E_INVALID);
    static unsigned char big[REG_PEER_ID_MAX + 1];
    CHECK_EQ_INT(reg_peers_note(p, "x", big, sizeof big, 1000), CR_E_INVALID);
    CHECK_EQ_INT(reg_peers_count(p), 2);

    /* Nothing is due before its interval. */
    seen_t s = {0};
    reg_peers_probe(p, 1900, 1000, probe, &s);
    CHECK_EQ_INT(s.calls, 0);
    /* up1 (noted at 1000) is due at 2000, job2 (1200) not yet. */
    reg_peers_probe(p, 2000, 1000, probe, &s);
    CHECK_EQ_INT(s.calls, 1);
    CHECK_EQ_STR(s.ids[0], "up1");
    CHECK_EQ_INT(s.len[0], sizeof a); /* the first note's identity */
    CHECK(!memcmp(s.who[0], a, sizeof a));
    /* Both due; job2 answers false and is forgotten. */
    s = (seen_t){.forget = "job2"};
    reg_peers_probe(p, 3300, 1000, probe, &s);
    CHECK_EQ_INT(s.calls, 2);
    CHECK_EQ_INT(reg_peers_count(p), 1);
    s = (seen_t){0};
    reg_peers_probe(p, 9000, 1000, probe, &s);
    CHECK_EQ_INT(s.calls, 1);
    CHECK_EQ_STR(s.ids[0], "up1");
    reg_peers_destroy(&p);
    CHECK(p == NULL);
    reg_peers_destroy(&p); /* NULL is fine */
    return check_finish("registry_peers");
}
