/* test_registry_resolve_cache.c: the registry's cache of resolve answers
 * (resolve_cache.h): an answer comes back whole under the new request's
 * id for the same name and manifest digest only; the least recently used
 * entry makes room; a copy is the caller's. */
#include "lib/prelude.h"
#include "services/registry/resolve_cache.h"
#include "tests/unit/check.h"

static void make_resolved(msg_t *m, const char *name, const char *tmpl)
{
    msg_init(m, MSG_resolved, "first");
    m->u.resolved.name = msg_strdup(m, name);
    m->u.resolved.has_name = true;
    m->u.resolved.model_path = msg_strdup(m, "/store/blobs/sha256-aa");
    m->u.resolved.has_model_path = true;
    m->u.resolved.template = msg_strdup(m, tmpl);
    m->u.resolved.has_template = true;
    m->u.resolved.digest = msg_strdup(m, "d1");
    m->u.resolved.has_digest = true;
}

static void test_hit_and_miss(void)
{
    reg_resolve_cache_t *c = reg_resolve_cache_new();
    CHECK(c != NULL);
    msg_t put, got = {0};
    make_resolved(&put, "tiny:latest", "{{ .Prompt }}");
    CHECK(!reg_resolve_cache_get(c, "tiny", "d1", "r1", &got));
    reg_resolve_cache_put(c, "tiny", "d1", &put);
    msg_clear(&put); /* the cache holds its own copy */
    CHECK(reg_resolve_cache_get(c, "tiny", "d1", "r2", &got));
    CHECK_EQ_INT(got.type, MSG_resolved);
    CHECK_EQ_STR(got.id, "r2");
    CHECK_EQ_STR(got.u.resolved.name, "tiny:latest");
    CHECK_EQ_STR(got.u.resolved.template, "{{ .Prompt }}");
    CHECK_EQ_STR(got.u.resolved.model_path, "/store/blobs/sha256-aa");
    msg_clear(&got);
    /* Another manifest (the model created again), another name: misses. */
    CHECK(!reg_resolve_cache_get(c, "tiny", "d2", "r3", &got));
    CHECK(!reg_resolve_cache_get(c, "tiny:latest", "d1", "r3", &got));
    CHECK_EQ_INT(reg_resolve_cache_hits(c), 1);
    /* A put for the same key replaces the answer. */
    make_resolved(&put, "tiny:latest", "new");
    reg_resolve_cache_put(c, "tiny", "d1", &put);
    msg_clear(&put);
    CHECK(reg_resolve_cache_get(c, "tiny", "d1", "r4", &got));
    CHECK_EQ_STR(got.u.resolved.template, "new");
    msg_clear(&got);
    reg_resolve_cache_destroy(&c);
    CHECK(c == NULL);
    reg_resolve_cache_destroy(&c); /* NULL is fine */
}

/* Past REG_RESOLVE_CACHE_MAX names, the least recently used goes. */
static void test_eviction(void)
{
    reg_resolve_cache_t *c = reg_resolve_cache_new();
    msg_t put, got = {0};
    char name[32];
    for (int i = 0; i < REG_RESOLVE_CACHE_MAX; i++) {
        snprintf(name, sizeof name, "m%d", i);
        make_resolved(&put, name, "t");
        reg_resolve_cache_put(c, name, "d", &put);
        msg_clear(&put);
    }
    /* m0 is used again: m1 is now the oldest. */
    CHECK(reg_resolve_cache_get(c, "m0", "d", "x", &got));
    msg_clear(&got);
    make_resolved(&put, "new", "t");
    reg_resolve_cache_put(c, "new", "d", &put);
    msg_clear(&put);
    CHECK(reg_resolve_cache_get(c, "new", "d", "x", &got));
    msg_clear(&got);
    CHECK(reg_resolve_cache_get(c, "m0", "d", "x", &got));
    msg_clear(&got);
    CHECK(!reg_resolve_cache_get(c, "m1", "d", "x", &got));
    CHECK(reg_resolve_cache_get(c, "m2", "d", "x", &got));
    msg_clear(&got);
    reg_resolve_cache_destroy(&c);
}

int main(void)
{
    test_hit_and_miss();
    test_eviction();
    return check_finish("registry_resolve_cache");
}
