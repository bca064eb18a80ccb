/* test_grammar.c: structured output (services/runner/grammar/grammar.c).
 *
 * Checks the byte matcher on valid and invalid prefixes for "json" and for
 * each schema keyword; refused formats and their messages; hostile formats;
 * masking against a brute-force per-token check on a hand-made vocabulary;
 * and the issue's end-to-end test: 100 seeded generations from a synthetic
 * model with random weights at temperature 1, masked by the grammar, each of
 * which must parse with jansson and validate against the schema (a small
 * validator below covers the keywords the grammar honours). */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "services/runner/backend/backend.h"
#include "services/runner/model/forward.h"
#include "services/runner/grammar/grammar.h"
#include "services/runner/model/model.h"
#include "services/runner/sampler.h"
#include "tools/synth/synth.h"
#include "services/runner/text/tokenizer.h"
#include "tests/unit/check.h"

#include <jansson.h>
#include <time.h>

/* ---- helpers ----------------------------------------------------------- */

static rn_grammar_t *mk(const char *fmt, const rn_grammar_opts_t *o)
{
    rn_grammar_t *g = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = rn_grammar_new(fmt, strlen(fmt), o, &g, &err);
    CHECK_MSG(st == CR_OK, "%s: %s", fmt, err.msg);
    return g;
}

/* Feeds text byte by byte from the empty document; returns how many bytes
 * were accepted (strlen(text) if all). */
static size_t run(rn_grammar_t *g, const char *text)
{
    rn_grammar_reset(g);
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++)
        if (!rn_grammar_feed(g, text + i, 1))
            return i;
    return n;
}

/* text is accepted whole and is (or is not) a complete document. */
#define ACCEPT(g, text, complete)                                               \
    do {                                                                        \
        const char *t_ = (text);                                                \
        size_t n_ = run((g), t_);                                               \
        CHECK_MSG(n_ == strlen(t_), "'%s' refused at byte %zu", t_, n_);        \
        CHECK_MSG(rn_grammar_is_complete(g) == (complete), "'%s' complete=%d",  \
                  t_, (int)rn_grammar_is_complete(g));                          \
    } while (0)

/* text is refused exactly at byte index at. */
#define REFUSE(g, text, at)                                                     \
    do {                                                                        \
        const char *t_ = (text);                                                \
        size_t n_ = run((g), t_);                                               \
        CHECK_MSG(n_ == (size_t)(at), "'%s' refused at %zu, expected %d", t_,   \
                  n_, (int)(at));                                               \
    } while (0)

static void bad_format(const char *fmt, const char *needle)
{
    rn_grammar_t *g = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = rn_grammar_new(fmt, strlen(fmt), NULL, &g, &err);
    CHECK_MSG(st == CR_E_INVALID, "%s: status %d", fmt, (int)st);
    CHECK(g == NULL);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: message '%s' lacks '%s'", fmt, err.msg,
              needle);
    CHECK_MSG(!strncmp(err.msg, "invalid format: ", 16) &&
                  strstr(err.msg, "; expected \"json\" or a valid JSON Schema object"),
              "message style: %s", err.msg);
}

/* ---- json mode --------------------------------------------------------- */

static void test_json(void)
{
    rn_grammar_t *g = mk("json", NULL);
    if (!g)
        return;
    ACCEPT(g, "{}", true);
    ACCEPT(g, "{", false);
    ACCEPT(g, "{\"a\":1}", true);
    ACCEPT(g, "{\"a\": [1, -2.5e-3, 0, 0.5E+12, {\"b\": null}], \"c\": \"x\\u00e9\\n\\\"\", "
              "\"d\": true, \"e\": false}",
           true);
    ACCEPT(g, "{\n  \"a\": {\n    \"b\": []\n  }\n}", true);
    ACCEPT(g, " {}", true);              /* one leading space */
    ACCEPT(g, "{\"k\u00e9\\t\":\"\xe2\x82\xac\xf0\x9f\x98\x80\"}", true); /* UTF-8 */
    ACCEPT(g, "{\"a\":tr", false);
    ACCEPT(g, "{\"a\":12", false);

    REFUSE(g, "[1]", 0);                 /* the root must be an object */
    REFUSE(g, "\"a\"", 0);
    REFUSE(g, "1", 0);
    REFUSE(g, "{}}", 2);                 /* nothing after the root */
    REFUSE(g, "{} ", 2);
    REFUSE(g, "{\"a\"}", 4);
    REFUSE(g, "{\"a\":01}", 6);          /* leading zero */
    REFUSE(g, "{,}", 1);
    REFUSE(g, "{\"a\":1,}", 7);          /* trailing comma */
    REFUSE(g, "{\"a\":[1,]}", 8);
    REFUSE(g, "{\"a\":tru}", 8);
    REFUSE(g, "{\"a\":nul1}", 8);
    REFUSE(g, "{\"a\":-}", 6);
    REFUSE(g, "{\"a\":1.}", 7);
    REFUSE(g, "{\"a\":1e}", 7);
    REFUSE(g, "{\"a\":.5}", 5);
    REFUSE(g, "{\"a\":+1}", 5);
    REFUSE(g, "{\"a\":1e123}", 9);       /* at most 2 exponent digits */
    REFUSE(g, "{\"a\":12345678901234567}", 21); /* at most 16 integer digits */
    REFUSE(g, "{\"a\":\"x\ny\"}", 7);    /* raw control byte */
    REFUSE(g, "{\"a\":\"\\x\"}", 7);     /* bad escape */
    REFUSE(g, "{\"a\":\"\\u12g4\"}", 10);
    REFUSE(g, "{\"a\":\"\\ud800\"}", 9); /* surrogate escapes */
    REFUSE(g, "{\"a\":\"\\u0000\"}", 11);
    REFUSE(g, "{\"a\":\"\xc0\x80\"}", 6); /* overlong */
    REFUSE(g, "{\"a\":\"\xed\xa0\x80\"}", 7); /* UTF-8 surrogate */
    REFUSE(g, "{\"a\":\"\xe2\x82\"}", 8); /* truncated sequence */
    REFUSE(g, "{\"a\":\"\xf5\"}", 6);
    REFUSE(g, "{\"a\":\"\x80\"}", 6);    /* stray continuation */
    REFUSE(g, "{\"a\" \t:1}", 5);       /* tab only after a newline */
    REFUSE(g, "{  \"a\":1}", 2);         /* one space at most */
    REFUSE(g, "{\r\n}", 1);
    REFUSE(g, "{\"a\"::1}", 5);
    REFUSE(g, "{'a':1}", 1);
    rn_grammar_reset(g);
    CHECK(!rn_grammar_is_complete(g) && rn_grammar_can_continue(g));
    CHECK(rn_grammar_feed(g, "{}", 2));
    CHECK(rn_grammar_is_complete(g) && !rn_grammar_can_continue(g));
    CHECK(!rn_grammar_allows(g, " ", 1));
    /* allows does not move; a refused feed leaves the state alone */
    rn_grammar_reset(g);
    CHECK(rn_grammar_allows(g, "{\"a", 3));
    CHECK(!rn_grammar_feed(g, "{\"a\"}", 5));
    CHECK(rn_grammar_feed(g, "{\"a\":", 5));
    CHECK(!rn_grammar_is_complete(g));
    /* "\"json\"" (quoted) is the same format */
    rn_grammar_destroy(&g);
    g = mk("\"json\"", NULL);
    if (g)
        ACCEPT(g, "{\"x\":[]}", true);
    rn_grammar_destroy(&g);
    rn_grammar_destroy(&g); /* NULL is fine */
    /* Only JSON whitespace is trimmed: "json" with a NUL ("json\u0000" in a
     * request) is no format, not json mode. */
    cr_err_t err;
    CHECK_EQ_INT(rn_grammar_new("json\0", 5, NULL, &g, &err), CR_E_INVALID);
    CHECK(g == NULL);
    rn_grammar_destroy(&g);
    CHECK_EQ_INT(rn_grammar_new("\0\"json\"", 7, NULL, &g, &err), CR_E_INVALID);
    CHECK(g == NULL);
    rn_grammar_destroy(&g);
}

static void test_json_limits(void)
{
    rn_grammar_opts_t o;
    rn_grammar_opts_default(&o);
    CHECK(o.max_depth == 16 && o.max_items == 256 && o.max_string_bytes == 8192 &&
          o.max_indent == 20);
    o.max_depth = 2;
    o.max_items = 2;
    o.max_string_bytes = 4;
    o.max_indent = 3;
    rn_grammar_t *g = mk("json", &o);
    if (!g)
        return;
    ACCEPT(g, "{\"a\":{\"b\":1}}", true);
    REFUSE(g, "{\"a\":{\"b\":[", 10);          /* depth 3 */
    REFUSE(g, "{\"a\":[[", 6);
    ACCEPT(g, "{\"a\":1,\"b\":2}", true);
    REFUSE(g, "{\"a\":1,\"b\":2,", 12);        /* 2 members at most */
    ACCEPT(g, "{\"a\":[1,2]}", true);
    REFUSE(g, "{\"a\":[1,2,", 9);
    ACCEPT(g, "{\"abcd\":\"\\u00e9\"}", true);  /* 4 bytes counted before the next */
    REFUSE(g, "{\"abcde", 6);
    ACCEPT(g, "{\n   \"a\":1}", true);
    REFUSE(g, "{\n    \"a\":1}", 5);           /* 3 indent chars at most */
    rn_grammar_destroy(&g);

    rn_grammar_opts_default(&o);
    o.max_depth = 0;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_grammar_new("json", 4, &o, &g, &err), CR_E_INVALID);
    o.max_depth = RN_GRAMMAR_MAX_DEPTH + 1;
    CHECK_EQ_INT(rn_grammar_new("json", 4, &o, &g, &err), CR_E_INVALID);
    rn_grammar_opts_default(&o);
    o.max_indent = 201;
    CHECK_EQ_INT(rn_grammar_new("json", 4, &o, &g, &err), CR_E_INVALID);
    CHECK(g == NULL);
}

/* ---- schema keywords --------------------------------------------------- */

static void test_schema_object(void)
{
    rn_grammar_t *g = mk("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                         "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"}},"
                         "\"required\":[\"c\",\"a\"]}",
                         NULL);
    if (!g)
        return;
    /* required first in declaration order (a, c), then optional b */
    ACCEPT(g, "{\"a\":1,\"c\":true}", true);
    ACCEPT(g, "{\"a\":1,\"c\":true,\"b\":\"x\"}", true);
    ACCEPT(g, "{ \"a\": 1, \"c\": false }", true);
    REFUSE(g, "{}", 1);                          /* required missing */
    REFUSE(g, "{\"c\"", 2);                      /* a comes first */
    REFUSE(g, "{\"a\":1}", 6);
    REFUSE(g, "{\"a\":1,\"c\":true,\"a\"", 17);  /* no repeats */
    REFUSE(g, "{\"a\":1,\"c\":true,\"d\"", 17);  /* no extra keys */
    REFUSE(g, "{\"a\":1.5", 6);                  /* integer */
    REFUSE(g, "{\"a\":1e3", 6);
    REFUSE(g, "{\"a\":\"1\"", 5);
    REFUSE(g, "{\"a\":1,\"c\":1", 11);
    REFUSE(g, "{\"ab", 3);
    REFUSE(g, "[", 0);
    rn_grammar_destroy(&g);

    /* optional properties in order, any subset */
    g = mk("{\"properties\":{\"x\":{},\"y\":{},\"z\":{}}}", NULL);
    if (!g)
        return;
    ACCEPT(g, "{}", true);
    ACCEPT(g, "{\"y\":[1,{\"q\":null}]}", true);
    ACCEPT(g, "{\"x\":1,\"z\":\"s\"}", true);
    REFUSE(g, "{\"z\":1,", 6); /* nothing may follow z */
    rn_grammar_destroy(&g);

    /* additionalProperties: schema, true, false */
    g = mk("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"}},"
           "\"required\":[\"id\"],\"additionalProperties\":{\"type\":\"string\"}}",
           NULL);
    if (g) {
        ACCEPT(g, "{\"id\":1,\"extra\":\"v\",\"more\":\"w\"}", true);
        REFUSE(g, "{\"extra\":\"v\"", 2);        /* required first */
        REFUSE(g, "{\"id\":1,\"x\":1", 12);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"object\"}", NULL); /* no properties: any object */
    if (g) {
        ACCEPT(g, "{\"q\":[true]}", true);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"object\",\"additionalProperties\":false}", NULL);
    if (g) {
        ACCEPT(g, "{}", true);
        REFUSE(g, "{\"", 1);
        rn_grammar_destroy(&g);
    }
    /* required names that are not declared take any value */
    g = mk("{\"type\":\"object\",\"required\":[\"k\"],\"additionalProperties\":false}", NULL);
    if (g) {
        ACCEPT(g, "{\"k\":[1]}", true);
        REFUSE(g, "{}", 1);
        rn_grammar_destroy(&g);
    }
    /* keys that need escaping are written escaped */
    g = mk("{\"properties\":{\"a\\\"b\":{\"type\":\"null\"}},\"required\":[\"a\\\"b\"]}", NULL);
    if (g) {
        ACCEPT(g, "{\"a\\\"b\":null}", true);
        rn_grammar_destroy(&g);
    }
    /* keys sharing a prefix */
    g = mk("{\"properties\":{\"ab\":{\"type\":\"null\"},\"a\":{\"type\":\"integer\"}}}", NULL);
    if (g) {
        ACCEPT(g, "{\"a\":1}", true);
        ACCEPT(g, "{\"ab\":null,\"a\":2}", true);
        REFUSE(g, "{\"a\":1,", 6); /* "ab" may not follow "a": no key left */
        rn_grammar_destroy(&g);
    }
}

static void test_schema_scalars(void)
{
    rn_grammar_t *g = mk("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", NULL);
    if (g) {
        ACCEPT(g, "\"ab\"", true);
        ACCEPT(g, "\"\xc3\xa9\\n\xe2\x82\xac\"", true); /* 3 characters, 7 bytes */
        REFUSE(g, "\"a\"", 2);
        REFUSE(g, "\"abcd", 4);
        REFUSE(g, "{", 0);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"number\"}", NULL);
    if (g) {
        ACCEPT(g, "-0.5e-7", true);
        ACCEPT(g, "12", true); /* a root number may end anywhere it can */
        ACCEPT(g, "1.", false);
        REFUSE(g, "\"1\"", 0);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"integer\"}", NULL);
    if (g) {
        ACCEPT(g, "-42", true);
        REFUSE(g, "4.2", 1);
        ACCEPT(g, "-", false);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"boolean\"}", NULL);
    if (g) {
        ACCEPT(g, "true", true);
        ACCEPT(g, "false", true);
        ACCEPT(g, "fa", false);
        REFUSE(g, "null", 0);
        REFUSE(g, "trues", 4);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"null\"}", NULL);
    if (g) {
        ACCEPT(g, "null", true);
        REFUSE(g, "true", 0);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":[\"integer\",\"null\"]}", NULL);
    if (g) {
        ACCEPT(g, "7", true);
        ACCEPT(g, "null", true);
        REFUSE(g, "\"", 0);
        rn_grammar_destroy(&g);
    }
}

static void test_schema_bounds(void)
{
    rn_grammar_t *g = mk("{\"type\":\"integer\",\"minimum\":0,\"maximum\":100}", NULL);
    if (g) {
        ACCEPT(g, "0", true);
        ACCEPT(g, "100", true);
        ACCEPT(g, "57", true);
        ACCEPT(g, "-0", true); /* zero */
        REFUSE(g, "-1", 1);
        REFUSE(g, "101", 2);
        REFUSE(g, "1000", 3);
        REFUSE(g, "1.0", 1);
        rn_grammar_destroy(&g);
    }
    /* the value is checked where the number ends */
    g = mk("{\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":10,\"maximum\":20}},"
           "\"required\":[\"n\"]}",
           NULL);
    if (g) {
        ACCEPT(g, "{\"n\":15}", true);
        REFUSE(g, "{\"n\":-", 5);
        REFUSE(g, "{\"n\":1}", 6);
        REFUSE(g, "{\"n\":5", 5);
        REFUSE(g, "{\"n\":21", 6);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"integer\",\"exclusiveMinimum\":0}", NULL);
    if (g) {
        ACCEPT(g, "1", true);
        ACCEPT(g, "1234567890123456", true);
        REFUSE(g, "0", 0);
        REFUSE(g, "-", 0);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"integer\",\"maximum\":5,\"exclusiveMaximum\":true}", NULL); /* draft 4 */
    if (g) {
        ACCEPT(g, "4", true);
        ACCEPT(g, "-30", true);
        REFUSE(g, "5", 0);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"number\",\"minimum\":0.5,\"maximum\":1.25}", NULL);
    if (g) {
        ACCEPT(g, "0.5", true);
        ACCEPT(g, "1.25", true);
        ACCEPT(g, "1", true);
        ACCEPT(g, "0.999999", true);
        ACCEPT(g, "0.", false);
        REFUSE(g, "1.251", 4);
        REFUSE(g, "0.4", 2);
        REFUSE(g, "2", 0);
        REFUSE(g, "1e0", 1);           /* no exponent when bounded */
        REFUSE(g, "0.5000001", 8);     /* at most 6 decimals */
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"number\",\"exclusiveMaximum\":0.1}", NULL);
    if (g) {
        ACCEPT(g, "0.099999", true);
        ACCEPT(g, "-7", true);
        ACCEPT(g, "0.09", true);
        REFUSE(g, "0.1", 2);           /* every 0.1... is too big */
        REFUSE(g, "0.2", 2);
        rn_grammar_destroy(&g);
    }
}

static void test_schema_enum_const(void)
{
    rn_grammar_t *g = mk("{\"enum\":[\"red\",\"green\",1,12,null,{\"a\":[1]},\"r\"]}", NULL);
    if (g) {
        ACCEPT(g, "\"red\"", true);
        ACCEPT(g, "\"r\"", true);
        ACCEPT(g, "\"green\"", true);
        ACCEPT(g, "1", true);
        ACCEPT(g, "12", true);
        ACCEPT(g, "null", true);
        ACCEPT(g, "{\"a\":[1]}", true);
        ACCEPT(g, "\"re", false);
        REFUSE(g, "\"blue\"", 1);
        REFUSE(g, "13", 1);
        REFUSE(g, "\"red\" ", 5);
        REFUSE(g, "{\"a\": [1]}", 5); /* compact form only */
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"object\",\"properties\":{\"c\":{\"enum\":[1,2]},\"d\":{\"const\":\"x\"}},"
           "\"required\":[\"c\",\"d\"]}",
           NULL);
    if (g) {
        ACCEPT(g, "{\"c\":2,\"d\":\"x\"}", true);
        ACCEPT(g, "{\"c\": 1 ,\"d\": \"x\" }", true);
        REFUSE(g, "{\"c\":3", 5);
        REFUSE(g, "{\"c\":1,\"d\":\"y", 12);
        rn_grammar_destroy(&g);
    }
    /* a large enum: numbers that prefix each other, strings */
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    cr_buf_puts(&b, "{\"enum\":[");
    for (int i = 0; i < 5000; i++)
        cr_buf_printf(&b, "%s%d,\"v%d\"", i ? "," : "", i * 7, i);
    cr_buf_puts(&b, "]}");
    g = mk(b.data, NULL);
    if (g) {
        ACCEPT(g, "0", true);
        ACCEPT(g, "7", true);
        ACCEPT(g, "70", true);
        ACCEPT(g, "34993", true);
        ACCEPT(g, "\"v4999\"", true);
        ACCEPT(g, "\"v4\"", true);
        ACCEPT(g, "\"v49", false);
        REFUSE(g, "349931", 5);
        REFUSE(g, "35000", 4);
        REFUSE(g, "-", 0);
        REFUSE(g, "\"v5000", 5);
        REFUSE(g, "\"v01", 3);
        rn_grammar_destroy(&g);
    }
    cr_buf_free(&b);
    /* enum values the type forbids are dropped */
    g = mk("{\"type\":\"string\",\"enum\":[\"a\",1]}", NULL);
    if (g) {
        ACCEPT(g, "\"a\"", true);
        REFUSE(g, "1", 0);
        rn_grammar_destroy(&g);
    }
}

static void test_schema_arrays(void)
{
    rn_grammar_t *g = mk("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
                         "\"minItems\":1,\"maxItems\":3}",
                         NULL);
    if (g) {
        ACCEPT(g, "[1]", true);
        ACCEPT(g, "[1, 2,3]", true);
        ACCEPT(g, "[ 1 ]", true);
        REFUSE(g, "[]", 1);
        REFUSE(g, "[1,2,3,", 6);
        REFUSE(g, "[\"a\"", 1);
        REFUSE(g, "[1 2", 3);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"type\":\"array\",\"items\":false}", NULL);
    if (g) {
        ACCEPT(g, "[]", true);
        REFUSE(g, "[1", 1);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"items\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}}}", NULL);
    if (g) {
        ACCEPT(g, "[[true],[],[false,true]]", true);
        REFUSE(g, "[true", 1);
        rn_grammar_destroy(&g);
    }
}

static void test_schema_anyof_ref(void)
{
    rn_grammar_t *g = mk("{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
                         "\"integer\"}},\"required\":[\"a\"]},{\"type\":\"object\",\"properties\":"
                         "{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]},{\"type\":\"null\"}]}",
                         NULL);
    if (g) {
        ACCEPT(g, "{\"a\":1}", true);
        ACCEPT(g, "{\"b\":\"s\"}", true);
        ACCEPT(g, "null", true);
        REFUSE(g, "{\"a\":\"s\"", 5);
        REFUSE(g, "{\"b\":1", 5);
        REFUSE(g, "{\"c\"", 2);
        rn_grammar_destroy(&g);
    }
    g = mk("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", NULL);
    if (g) {
        ACCEPT(g, "\"x\"", true);
        ACCEPT(g, "3", true);
        REFUSE(g, "true", 0);
        rn_grammar_destroy(&g);
    }
    /* $defs, definitions, recursion through an optional property */
    const char *tree = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
                       "\"integer\"},\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/"
                       "node\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/node\"}";
    g = mk(tree, NULL);
    if (g) {
        ACCEPT(g, "{\"v\":1,\"kids\":[{\"v\":2},{\"v\":3,\"kids\":[]}]}", true);
        REFUSE(g, "{\"v\":1,\"kids\":[{\"w\"", 17);
        rn_grammar_destroy(&g);
    }
    /* the nesting bound cuts the recursion without a dead end */
    rn_grammar_opts_t o;
    rn_grammar_opts_default(&o);
    o.max_depth = 3;
    g = mk(tree, &o);
    if (g) {
        ACCEPT(g, "{\"v\":1,\"kids\":[{\"v\":2}]}", true);
        REFUSE(g, "{\"v\":1,\"kids\":[{\"v\":2,", 21); /* kids would need level 4 */
        ACCEPT(g, "{\"v\":1,\"kids\":[{\"v\":2", false);
        CHECK(rn_grammar_allows(g, "}", 1));
        rn_grammar_destroy(&g);
    }
    g = mk("{\"definitions\":{\"s\":{\"type\":\"string\"}},\"type\":\"object\",\"properties\":"
           "{\"p\":{\"$ref\":\"#/definitions/s\"},\"q\":{\"allOf\":[{\"$ref\":\"#/definitions/"
           "s\"}],\"description\":\"d\"}},\"required\":[\"p\",\"q\"]}",
           NULL);
    if (g) {
        ACCEPT(g, "{\"p\":\"a\",\"q\":\"b\"}", true);
        REFUSE(g, "{\"p\":1", 5);
        rn_grammar_destroy(&g);
    }
    /* annotations and format are ignored */
    g = mk("{\"title\":\"T\",\"description\":\"D\",\"$schema\":\"x\",\"type\":\"object\","
           "\"properties\":{\"when\":{\"type\":\"string\",\"format\":\"date-time\",\"default\":"
           "\"z\",\"examples\":[\"a\"]}},\"required\":[\"when\"]}",
           NULL);
    if (g) {
        ACCEPT(g, "{\"when\":\"2024\"}", true);
        rn_grammar_destroy(&g);
    }
}

static void test_bad_formats(void)
{
    bad_format("", "invalid format");
    bad_format("   ", "invalid format");
    bad_format("xml", "xml");
    bad_format("[1,2]", "[1,2]");
    bad_format("\"yaml\"", "yaml");
    bad_format("{\"type\":", "invalid format");
    bad_format("{\"type\":\"text\"}", "unknown type \"text\"");
    bad_format("{\"type\":[]}", "type is an empty list");
    bad_format("{\"type\":5}", "type must be");
    bad_format("{\"type\":\"string\",\"pattern\":\"^a\"}", "unsupported keyword \"pattern\"");
    bad_format("{\"properties\":{\"age\":{\"type\":\"integer\",\"multipleOf\":2}}}",
               "properties.age: unsupported keyword \"multipleOf\"");
    bad_format("{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}",
               "no integer lies between the bounds");
    bad_format("{\"type\":\"integer\",\"exclusiveMinimum\":1,\"exclusiveMaximum\":2}",
               "no integer lies between the bounds");
    bad_format("{\"type\":\"number\",\"minimum\":0.0000001,\"maximum\":0.0000009}",
               "no number (to 6 decimals)");
    bad_format("{\"type\":\"integer\",\"minimum\":\"a\"}", "minimum must be a number");
    bad_format("{\"not\":{}}", "\"not\"");
    bad_format("{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems");
    bad_format("{\"type\":\"array\",\"items\":[{}]}", "tuple");
    bad_format("{\"type\":\"array\",\"prefixItems\":[{}]}", "prefixItems");
    bad_format("{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "minItems 3");
    bad_format("{\"type\":\"array\",\"minItems\":-1}", "minItems must be");
    bad_format("{\"type\":\"string\",\"maxLength\":1.5}", "maxLength must be");
    bad_format("{\"type\":\"string\",\"minLength\":5,\"maxLength\":2}", "minLength 5");
    bad_format("{\"enum\":[]}", "enum has no value");
    bad_format("{\"enum\":5}", "enum must be an array");
    bad_format("{\"type\":\"integer\",\"enum\":[\"a\"]}", "enum has no value");
    bad_format("{\"anyOf\":[]}", "anyOf must be a non-empty array");
    bad_format("{\"anyOf\":[{}],\"oneOf\":[{}]}", "both anyOf and oneOf");
    bad_format("{\"anyOf\":[{}],\"type\":\"string\"}", "anyOf next to");
    bad_format("{\"allOf\":[{},{}]}", "allOf");
    bad_format("{\"$ref\":\"#/$defs/missing\"}", "cannot resolve $ref");
    bad_format("{\"$ref\":\"http://x/y\"}", "cannot resolve $ref");
    bad_format("{\"$ref\":5}", "$ref must be a string");
    bad_format("{\"$ref\":\"#\"}", "circular $ref");
    bad_format("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},"
               "\"$ref\":\"#/$defs/a\"}",
               "circular $ref");
    bad_format("{\"$defs\":{\"a\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},{\"type\":\"null\"}]}},"
               "\"$ref\":\"#/$defs/a\"}",
               "refers to itself");
    /* required recursion: no finite document */
    bad_format("{\"type\":\"object\",\"properties\":{\"n\":{\"$ref\":\"#\"}},\"required\":[\"n\"]}",
               "no finite document");
    bad_format("{\"properties\":{\"a\":false},\"required\":[\"a\"]}", "schema false");
    bad_format("{\"properties\":5}", "properties must be an object");
    bad_format("{\"required\":[1]}", "required[0]");
    bad_format("{\"additionalProperties\":5}", "additionalProperties must be");
    bad_format("false", "invalid format");
    bad_format("true", "invalid format"); /* root must be an object */
}

static void test_hostile_formats(void)
{
    /* nesting deeper than the compiler's bound */
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    for (int i = 0; i < 200; i++)
        cr_buf_puts(&b, "{\"items\":");
    cr_buf_puts(&b, "{}");
    for (int i = 0; i < 200; i++)
        cr_buf_puts(&b, "}");
    bad_format(b.data, "nested more than 128");
    cr_buf_reset(&b);
    /* a required chain deeper than max_depth */
    for (int i = 0; i < 20; i++)
        cr_buf_puts(&b, "{\"type\":\"object\",\"required\":[\"a\"],\"properties\":{\"a\":");
    cr_buf_puts(&b, "{}");
    for (int i = 0; i < 20; i++)
        cr_buf_puts(&b, "}}");
    bad_format(b.data, "levels of nesting");
    cr_buf_reset(&b);
    /* too many properties */
    cr_buf_puts(&b, "{\"properties\":{");
    for (int i = 0; i < 65; i++)
        cr_buf_printf(&b, "%s\"p%d\":{}", i ? "," : "", i);
    cr_buf_puts(&b, "}}");
    bad_format(b.data, "more than 64 properties");
    cr_buf_free(&b);

    /* too large */
    size_t big = RN_GRAMMAR_MAX_FORMAT_BYTES + 1;
    char *s = malloc(big);
    memset(s, ' ', big);
    rn_grammar_t *g = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_grammar_new(s, big, NULL, &g, &err), CR_E_TOO_LARGE);
    free(s);
    /* embedded NUL and garbage bytes */
    const char junk[] = "{\"type\":\"obj\0ect\"}";
    CHECK_EQ_INT(rn_grammar_new(junk, sizeof junk - 1, NULL, &g, &err), CR_E_INVALID);
    const char bin[] = "\xff\xfe{}";
    CHECK_EQ_INT(rn_grammar_new(bin, sizeof bin - 1, NULL, &g, &err), CR_E_INVALID);
    CHECK_EQ_INT(rn_grammar_new(NULL, 0, NULL, &g, &err), CR_E_INVALID);
    CHECK(g == NULL);
    /* 64,000 schema objects compile quickly (the $ref memo is hashed) */
    cr_buf_init(&b, 1 << 22);
    cr_buf_puts(&b, "{\"anyOf\":[");
    for (int i = 0; i < 1000; i++) {
        cr_buf_puts(&b, i ? ",{\"anyOf\":[" : "{\"anyOf\":[");
        for (int j = 0; j < 64; j++)
            cr_buf_puts(&b, j ? ",{}" : "{}");
        cr_buf_puts(&b, "]}");
    }
    cr_buf_puts(&b, "]}");
    /* Timed in this thread's CPU time, not on the wall clock: a loaded
     * machine (24 runnable threads on two cores once) stretched the wall
     * time past the bound; the CPU time is what the memo's cost is. */
    struct timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    g = mk(b.data, NULL);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    /* The unhashed memo took 12 s here, the hashed one 0.4-0.6 s;
     * AddressSanitizer runs it about 3 times slower, so its bound is 3
     * times wider. */
#if defined(__SANITIZE_ADDRESS__)
    const double bound_s = 15;
#else
    const double bound_s = 5;
#endif
    printf("grammar: 64k schema nodes compiled in %.3f s of CPU (bound %.0f s)\n", secs,
           bound_s);
    CHECK_MSG(secs < bound_s, "64k nodes took %.1f s of CPU", secs);
    if (g) {
        ACCEPT(g, "{\"a\":[1]}", true);
        ACCEPT(g, "\"s\"", true);
        rn_grammar_destroy(&g);
    }
    cr_buf_free(&b);
    /* one more and the node limit answers */
    cr_buf_init(&b, 1 << 22);
    cr_buf_puts(&b, "{\"anyOf\":[");
    for (int i = 0; i < 1024; i++) {
        cr_buf_puts(&b, i ? ",{\"anyOf\":[" : "{\"anyOf\":[");
        for (int j = 0; j < 64; j++)
            cr_buf_puts(&b, j ? ",{}" : "{}");
        cr_buf_puts(&b, "]}");
    }
    cr_buf_puts(&b, "]}");
    CHECK_EQ_INT(rn_grammar_new(b.data, b.len, NULL, &g, &err), CR_E_TOO_LARGE);
    CHECK(strstr(err.msg, "schema nodes") != NULL);
    cr_buf_free(&b);
    /* many anyOf branches: threads are capped, output stays valid */
    cr_buf_init(&b, 1 << 20);
    cr_buf_puts(&b, "{\"anyOf\":[");
    for (int i = 0; i < 20; i++)
        cr_buf_printf(&b, "%s{\"type\":\"object\",\"properties\":{\"k%d\":{\"type\":\"integer\"}},"
                      "\"required\":[\"k%d\"]}",
                      i ? "," : "", i, i);
    cr_buf_puts(&b, "]}");
    g = mk(b.data, NULL);
    if (g) {
        ACCEPT(g, "{\"k0\":1}", true);
        ACCEPT(g, "{\"k1\":2}", true);
        rn_grammar_destroy(&g);
    }
    cr_buf_free(&b);
}

/* ---- masking ----------------------------------------------------------- */

static void test_mask(void)
{
    /* tokens: single bytes of every kind, multi-byte pieces, an empty
     * control token, an EOG token, a long token */
    static const char *const pieces[] = {
        "", "</s>", "{", "}", "\"", ":", ",", "[", "]", " ", "\n", "a", "b", "1", "0",
        "-", ".", "e", "t", "true", "tr", "null", "{\"", "\":", "\"}", "\"a\"", "ab",
        "\xc3", "\xa9", "\xc3\xa9", "\\", "u", "{}", "}}", "12", " {", "\"a\":1}", "x\"",
        "false", "fal", "se", "n", "ull", "2", "5", "\t", "   ",
    };
    enum { NP = (int)CR_ARRAY_LEN(pieces) };
    size_t lens[NP + 1];
    const char *ps[NP + 1];
    bool eog[NP + 1];
    static char longtok[300];
    memset(longtok, 'a', sizeof longtok);
    for (int i = 0; i < NP; i++) {
        ps[i] = pieces[i];
        lens[i] = strlen(pieces[i]);
        eog[i] = i == 1;
    }
    ps[NP] = longtok;
    lens[NP] = sizeof longtok;
    eog[NP] = false;
    rn_grammar_vocab_t *v = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(rn_grammar_vocab_new_pieces(NP + 1, ps, lens, eog, &v, &err), CR_OK);
    rn_grammar_vocab_t *v0 = NULL;
    CHECK_EQ_INT(rn_grammar_vocab_new_pieces(0, ps, lens, eog, &v0, &err), CR_E_INVALID);
    CHECK(v0 == NULL);
    if (!v)
        return;
    CHECK_EQ_INT(rn_grammar_vocab_size(v), NP + 1);
    const char *schemas[] = {
        "json",
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"ab\":{\"enum\":"
        "[true,null]}},\"required\":[\"a\"]}",
        "{\"type\":\"string\"}",
        "{\"type\":\"number\"}",
    };
    /* walk random paths; at each step the mask must equal the brute force */
    rn_rng_t rng;
    rn_rng_seed(&rng, 7);
    int n_vocab = NP + 5; /* logits longer than the vocabulary */
    float logits[NP + 5];
    for (size_t si = 0; si < CR_ARRAY_LEN(schemas); si++) {
        rn_grammar_t *g = mk(schemas[si], NULL);
        if (!g)
            continue;
        for (int walk = 0; walk < 30; walk++) {
            rn_grammar_reset(g);
            for (int step = 0; step < 40; step++) {
                for (int i = 0; i < n_vocab; i++)
                    logits[i] = (float)i;
                size_t allowed = rn_grammar_mask(g, v, logits, n_vocab);
                bool complete = rn_grammar_is_complete(g);
                size_t count = 0;
                int mismatch = -1;
                for (int i = 0; i < n_vocab; i++) {
                    bool want;
                    if (i > NP)
                        want = false;
                    else if (eog[i])
                        want = complete;
                    else if (lens[i] == 0 || lens[i] > RN_GRAMMAR_MAX_TOKEN_BYTES)
                        want = false;
                    else
                        want = rn_grammar_allows(g, ps[i], lens[i]);
                    bool got = logits[i] == (float)i;
                    CHECK(got || logits[i] == -INFINITY);
                    if (want != got && mismatch < 0)
                        mismatch = i;
                    count += want;
                }
                CHECK_MSG(mismatch < 0, "schema %zu walk %d step %d: token %d ('%s')", si,
                          walk, step, mismatch, mismatch >= 0 && mismatch < NP ? ps[mismatch] : "");
                CHECK_EQ_INT(allowed, count);
                if (!count)
                    break;
                /* pick a random allowed token and accept it */
                size_t pick = (size_t)(rn_rng_next(&rng) % count);
                int tok = -1;
                for (int i = 0; i < n_vocab && tok < 0; i++)
                    if (logits[i] == (float)i && pick-- == 0)
                        tok = i;
                CHECK_EQ_INT(rn_grammar_accept(g, v, tok, &err), CR_OK);
                if (eog[tok])
                    break;
            }
        }
        /* refused tokens leave the state alone */
        rn_grammar_reset(g);
        CHECK_EQ_INT(rn_grammar_accept(g, v, 3 /* } */, &err), si == 3 ? CR_E_INVALID
                                                                        : CR_E_INVALID);
        CHECK(strstr(err.msg, "token 3 is not allowed") != NULL);
        CHECK_EQ_INT(rn_grammar_accept(g, v, 1 /* EOG */, &err), CR_E_INVALID);
        CHECK_EQ_INT(rn_grammar_accept(g, v, 0 /* empty */, &err), CR_E_INVALID);
        CHECK_EQ_INT(rn_grammar_accept(g, v, NP /* long */, &err), CR_E_INVALID);
        CHECK_EQ_INT(rn_grammar_accept(g, v, -1, &err), CR_E_INVALID);
        CHECK_EQ_INT(rn_grammar_accept(g, v, NP + 1, &err), CR_E_INVALID);
        CHECK(!rn_grammar_is_complete(g) && rn_grammar_can_continue(g));
        rn_grammar_destroy(&g);
    }
    /* json: after "{}" only EOG */
    rn_grammar_t *g = mk("json", NULL);
    if (g) {
        CHECK_EQ_INT(rn_grammar_accept(g, v, 32 /* {} */, &err), CR_OK);
        for (int i = 0; i < n_vocab; i++)
            logits[i] = 0;
        CHECK_EQ_INT(rn_grammar_mask(g, v, logits, n_vocab), 1);
        CHECK(logits[1] == 0);
        CHECK_EQ_INT(rn_grammar_accept(g, v, 1, &err), CR_OK);
        rn_grammar_destroy(&g);
    }
    rn_grammar_vocab_destroy(&v);
    rn_grammar_vocab_destroy(&v);
}

/* ---- a validator for the keywords the grammar honours ------------------ */

static bool validate(const json_t *v, const json_t *s, const json_t *root, int depth);

static const json_t *deref(const json_t *s, const json_t *root)
{
    for (int hops = 0; hops < 16; hops++) {
        const char *r = json_string_value(json_object_get(s, "$ref"));
        if (!r)
            return s;
        if (!strcmp(r, "#"))
            s = root;
        else if (!strncmp(r, "#/$defs/", 8))
            s = json_object_get(json_object_get(root, "$defs"), r + 8);
        else
            return NULL;
        if (!s)
            return NULL;
    }
    return NULL;
}

static bool type_ok(const json_t *v, const char *t)
{
    if (!strcmp(t, "object"))
        return json_is_object(v);
    if (!strcmp(t, "array"))
        return json_is_array(v);
    if (!strcmp(t, "string"))
        return json_is_string(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v);
    if (!strcmp(t, "number"))
        return json_is_number(v);
    if (!strcmp(t, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(t, "null"))
        return json_is_null(v);
    return false;
}

static size_t utf8_chars(const char *s, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static bool validate(const json_t *v, const json_t *s, const json_t *root, int depth)
{
    if (depth > 64 || !(s = deref(s, root)))
        return false;
    if (json_is_true(s))
        return true;
    const json_t *x;
    if ((x = json_object_get(s, "anyOf")) || (x = json_object_get(s, "oneOf"))) {
        int hits = 0;
        for (size_t i = 0; i < json_array_size(x); i++)
            hits += validate(v, json_array_get(x, i), root, depth + 1);
        return json_object_get(s, "oneOf") ? hits == 1 : hits >= 1;
    }
    if ((x = json_object_get(s, "type"))) {
        bool ok = false;
        if (json_is_string(x))
            ok = type_ok(v, json_string_value(x));
        for (size_t i = 0; i < json_array_size(x); i++)
            ok |= type_ok(v, json_string_value(json_array_get(x, i)));
        if (!ok)
            return false;
    }
    if ((x = json_object_get(s, "const")) && !json_equal(v, x))
        return false;
    if ((x = json_object_get(s, "enum"))) {
        bool ok = false;
        for (size_t i = 0; i < json_array_size(x); i++)
            ok |= json_equal(v, json_array_get(x, i));
        if (!ok)
            return false;
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(s, "properties");
        const json_t *addl = json_object_get(s, "additionalProperties");
        const json_t *req = json_object_get(s, "required");
        for (size_t i = 0; i < json_array_size(req); i++)
            if (!json_object_get(v, json_string_value(json_array_get(req, i))))
                return false;
        const char *k;
        json_t *val;
        json_object_foreach((json_t *)v, k, val) {
            const json_t *ps = json_object_get(props, k);
            if (ps) {
                if (!validate(val, ps, root, depth + 1))
                    return false;
            } else if (json_is_false(addl) || (props && !addl)) {
                return false;
            } else if (json_is_object(addl) && !validate(val, addl, root, depth + 1)) {
                return false;
            }
        }
    }
    if (json_is_array(v)) {
        const json_t *items = json_object_get(s, "items");
        if ((x = json_object_get(s, "minItems")) &&
            json_array_size(v) < (size_t)json_integer_value(x))
            return false;
        if ((x = json_object_get(s, "maxItems")) &&
            json_array_size(v) > (size_t)json_integer_value(x))
            return false;
        for (size_t i = 0; items && i < json_array_size(v); i++)
            if (!validate(json_array_get(v, i), items, root, depth + 1))
                return false;
    }
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if ((x = json_object_get(s, "minimum")) && d < json_number_value(x))
            return false;
        if ((x = json_object_get(s, "maximum")) && d > json_number_value(x))
            return false;
        if ((x = json_object_get(s, "exclusiveMinimum")) && d <= json_number_value(x))
            return false;
        if ((x = json_object_get(s, "exclusiveMaximum")) && d >= json_number_value(x))
            return false;
    }
    if (json_is_string(v)) {
        size_t n = utf8_chars(json_string_value(v), json_string_length(v));
        if ((x = json_object_get(s, "minLength")) && n < (size_t)json_integer_value(x))
            return false;
        if ((x = json_object_get(s, "maxLength")) && n > (size_t)json_integer_value(x))
            return false;
    }
    return true;
}

static void test_validator_itself(void)
{
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                           "\"required\":[\"a\"]}",
                           0, NULL);
    json_t *ok = json_loads("{\"a\":1}", 0, NULL), *bad1 = json_loads("{\"a\":1.5}", 0, NULL),
           *bad2 = json_loads("{}", 0, NULL), *bad3 = json_loads("{\"a\":1,\"b\":2}", 0, NULL);
    CHECK(validate(ok, s, s, 0));
    CHECK(!validate(bad1, s, s, 0));
    CHECK(!validate(bad2, s, s, 0));
    CHECK(!validate(bad3, s, s, 0));
    json_decref(s);
    json_decref(ok);
    json_decref(bad1);
    json_decref(bad2);
    json_decref(bad3);
}

/* ---- generation with a synthetic model --------------------------------- */

static const char *const nested_schema_g =
    "{\"$defs\":{\"person\":{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":4},\"maxItems\":3},"
    "\"friend\":{\"anyOf\":[{\"$ref\":\"#/$defs/person\"},{\"type\":\"null\"}]}},"
    "\"required\":[\"name\",\"age\"]}},"
    "\"type\":\"object\",\"properties\":{"
    "\"kind\":{\"enum\":[\"a\",\"bb\",3,null]},"
    "\"owner\":{\"$ref\":\"#/$defs/person\"},"
    "\"score\":{\"type\":\"number\",\"minimum\":-1,\"exclusiveMaximum\":1},"
    "\"ok\":{\"type\":\"boolean\"},"
    "\"nothing\":{\"type\":\"null\"},"
    "\"list\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":4},"
    "\"v\":{\"const\":\"x\"},"
    "\"opt\":{\"type\":[\"string\",\"integer\"]},"
    "\"one\":{\"oneOf\":[{\"type\":\"boolean\"},{\"type\":\"array\",\"items\":{\"type\":\"null\"}}]}},"
    "\"required\":[\"kind\",\"owner\",\"list\",\"ok\"]}";

typedef struct genstats {
    int docs, valid, tokens, max_tokens;
} genstats_t;

static void generate(const rn_model_t *m, rn_ctx_t *ctx, const rn_tokenizer_t *tok,
                     const rn_grammar_vocab_t *v, const char *format, int runs, genstats_t *gs)
{
    rn_grammar_opts_t o;
    rn_grammar_opts_default(&o);
    o.max_depth = 4;
    o.max_items = 4;
    o.max_string_bytes = 12;
    o.max_indent = 2;
    rn_grammar_t *g = mk(format, &o);
    if (!g)
        return;
    json_t *schema = strcmp(format, "json") ? json_loads(format, 0, NULL) : NULL;
    int n_vocab = rn_model_hparams(m)->n_vocab;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    cr_err_t err;
    cr_err_clear(&err);
    rn_sampler_params_t sp;
    rn_sampler_params_default(&sp);
    sp.temperature = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.seed = 1;
    rn_sampler_t *smp = rn_sampler_new(n_vocab, rn_ctx_n_ctx(ctx), &sp, &err);
    CHECK_MSG(smp != NULL, "sampler: %s", err.msg);
    cr_buf_t text;
    cr_buf_init(&text, 1 << 20);
    int32_t bos = rn_tokenizer_bos(tok);
    for (int run_i = 0; smp && run_i < runs; run_i++) {
        sp.seed = 1000 + run_i;
        CHECK_EQ_INT(rn_sampler_reset(smp, &sp, &err), CR_OK);
        rn_grammar_reset(g);
        rn_ctx_clear(ctx);
        cr_buf_reset(&text);
        int32_t cur = bos;
        int pos = 0, n_tok = 0;
        bool done = false;
        while (!done && pos < rn_ctx_n_ctx(ctx) - 1) {
            if (rn_ctx_eval(ctx, &cur, 1, pos, NULL, &err)) {
                CHECK_MSG(false, "eval: %s", err.msg);
                break;
            }
            pos++;
            memcpy(logits, rn_ctx_logits(ctx), (size_t)n_vocab * sizeof *logits);
            int finite = 0;
            for (int i = 0; i < n_vocab; i++)
                finite += isfinite(logits[i]);
            if (finite != n_vocab) { /* the forward pass, not the grammar */
                CHECK_MSG(false, "run %d: the model gave %d non-finite logits at position %d",
                          run_i, n_vocab - finite, pos - 1);
                break;
            }
            size_t allowed = rn_grammar_mask(g, v, logits, n_vocab);
            if (!allowed) {
                CHECK_MSG(false, "run %d: no token allowed after '%s'", run_i, text.data);
                break;
            }
            int32_t t;
            if (rn_sampler_pick(smp, logits, &t, &err)) {
                CHECK_MSG(false, "pick: %s", err.msg);
                break;
            }
            if (rn_grammar_accept(g, v, t, &err)) {
                CHECK_MSG(false, "run %d: %s after '%s'", run_i, err.msg, text.data);
                break;
            }
            rn_sampler_accept(smp, t);
            n_tok++;
            if (rn_tokenizer_is_eog(tok, t))
                break;
            char piece[512];
            size_t pl = 0;
            if (rn_token_piece(tok, t, 0, piece, sizeof piece, &pl, NULL) == CR_OK)
                cr_buf_append(&text, piece, pl);
            done = rn_grammar_is_complete(g) && !rn_grammar_can_continue(g);
            cur = t;
        }
        gs->docs++;
        gs->tokens += n_tok;
        gs->max_tokens = CR_MAX(gs->max_tokens, n_tok);
        CHECK_MSG(done, "run %d: no complete document after %d tokens: '%s'", run_i, n_tok,
                  text.data ? text.data : "");
        json_error_t je;
        json_t *doc = json_loadb(text.data ? text.data : "", text.len, 0, &je);
        CHECK_MSG(doc != NULL, "run %d: '%s' does not parse: %s", run_i, text.data, je.text);
        bool ok = doc && json_is_object(doc) && (!schema || validate(doc, schema, schema, 0));
        CHECK_MSG(ok, "run %d: '%s' does not validate", run_i, text.data);
        gs->valid += ok;
        if (run_i < 3)
            printf("  %s #%d: %s\n", schema ? "schema" : "json", run_i, text.data);
        json_decref(doc);
    }
    cr_buf_free(&text);
    rn_sampler_destroy(&smp);
    json_decref(schema);
    free(logits);
    rn_grammar_destroy(&g);
}

/* ---- a real 128k vocabulary: same masks as brute force, and fast ------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void check_mask_brute(rn_grammar_t *g, const rn_grammar_vocab_t *v,
                             const rn_tokenizer_t *tok, const char *label)
{
    int32_t n = rn_grammar_vocab_size(v);
    float *l = malloc((size_t)n * sizeof *l);
    for (int32_t i = 0; i < n; i++)
        l[i] = 1.0f;
    size_t allowed = rn_grammar_mask(g, v, l, n);
    bool complete = rn_grammar_is_complete(g);
    size_t count = 0;
    int bad = -1;
    char piece[1024];
    for (int32_t i = 0; i < n; i++) {
        size_t pl = 0;
        bool want;
        if (rn_tokenizer_is_eog(tok, i))
            want = complete;
        else if (rn_token_piece(tok, i, 0, piece, sizeof piece, &pl, NULL) || !pl ||
                 pl > RN_GRAMMAR_MAX_TOKEN_BYTES)
            want = false;
        else
            want = rn_grammar_allows(g, piece, pl);
        count += want;
        if (want != (l[i] == 1.0f) && bad < 0)
            bad = i;
    }
    CHECK_MSG(bad < 0, "%s: token %d masked wrongly", label, bad);
    CHECK_EQ_INT(allowed, count);
    free(l);
}

static void test_real_vocab(void)
{
    const char *root = check_testdata("vocab/ggml-vocab-llama-bpe.gguf");
    char path[4200];
    if (root)
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-bpe.gguf", root);
    if (!root) {
        printf("  (no testdata: real-vocabulary checks skipped)\n");
        return;
    }
    cr_err_t err;
    cr_err_clear(&err);
    cr_gguf_t *gg = NULL;
    rn_tokenizer_t *tok = NULL;
    rn_grammar_vocab_t *v = NULL;
    double t0 = now_s();
    if (cr_gguf_open(path, &gg, &err) || rn_tokenizer_load(gg, &tok, &err) ||
        ((t0 = now_s()), rn_grammar_vocab_new(tok, &v, &err))) {
        CHECK_MSG(false, "llama-bpe: %s", err.msg);
        goto out;
    }
    double t_vocab = now_s() - t0;
    int32_t n = rn_grammar_vocab_size(v);
    CHECK(n > 128000);
    rn_grammar_t *g = mk(nested_schema_g, NULL);
    rn_grammar_t *j = mk("json", NULL);
    if (!g || !j)
        goto out2;
    /* states: start, inside a key, inside a string value, after a value,
     * inside a number, complete */
    static const char *const prefixes[] = {
        "", "{\"", "{\"kind\":\"a\",\"owner\":{\"name\":\"ab", "{\"kind\":3",
        "{\"kind\":3,\"owner\":{\"name\":\"x\",\"age\":12",
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(prefixes); i++) {
        CHECK(run(g, prefixes[i]) == strlen(prefixes[i]));
        check_mask_brute(g, v, tok, prefixes[i]);
    }
    static const char *const jprefixes[] = {"", "{\"a\":\"xy", "{\"a\":[1,", "{\"a\":{}}"};
    for (size_t i = 0; i < CR_ARRAY_LEN(jprefixes); i++) {
        CHECK(run(j, jprefixes[i]) == strlen(jprefixes[i]));
        check_mask_brute(j, v, tok, jprefixes[i]);
    }
    /* timing: the worst case is inside a string, where most tokens pass */
    float *l = malloc((size_t)n * sizeof *l);
    run(j, "{\"a\":\"xy");
    double t1 = now_s();
    int reps = 20;
    size_t allowed = 0;
    for (int r = 0; r < reps; r++) {
        for (int32_t i = 0; i < n; i++)
            l[i] = 0;
        allowed = rn_grammar_mask(j, v, l, n);
    }
    double per = (now_s() - t1) / reps;
    run(j, "{\"a\":1");
    double t2 = now_s();
    for (int r = 0; r < reps; r++)
        rn_grammar_mask(j, v, l, n);
    double per2 = (now_s() - t2) / reps;
    printf("  llama-bpe (%d tokens): vocab cache %.0f ms; mask in a string %.2f ms (%zu "
           "allowed), after a number %.2f ms\n",
           (int)n, t_vocab * 1e3, per * 1e3, allowed, per2 * 1e3);
    CHECK_MSG(per < 0.25, "masking took %.1f ms", per * 1e3);
    free(l);
out2:
    rn_grammar_destroy(&g);
    rn_grammar_destroy(&j);
out:
    rn_grammar_vocab_destroy(&v);
    rn_tokenizer_destroy(&tok);
    cr_gguf_close(&gg);
}

static void test_generation(void)
{
    cr_err_t err;
    cr_err_clear(&err);
    be_backend_t *be = NULL;
    if (be_cpu_new(1, &be, &err)) { /* a tiny model: threads only spin */
        CHECK_MSG(false, "cpu backend: %s", err.msg);
        return;
    }
    rn_synth_opts_t so;
    rn_synth_defaults(&so);
    so.seed = 42;
    so.ctx = 2048;
    void *bytes = NULL;
    size_t len = 0;
    rn_model_t *m = NULL;
    rn_tokenizer_t *tok = NULL;
    rn_grammar_vocab_t *v = NULL;
    rn_ctx_t *ctx = NULL;
    cr_gguf_t *gg = NULL;
    if (rn_synth_write_memory(&so, &bytes, &len, &err) ||
        cr_gguf_open_memory(bytes, len, &gg, &err) || rn_model_load_gguf(&gg, be, &m, &err) ||
        rn_tokenizer_load(rn_model_gguf(m), &tok, &err) ||
        rn_grammar_vocab_new(tok, &v, &err)) {
        CHECK_MSG(false, "setup: %s", err.msg);
        goto out;
    }
    CHECK_EQ_INT(rn_grammar_vocab_size(v), (int32_t)rn_tokenizer_n_vocab(tok));
    rn_ctx_opts_t co = {.n_ctx = 2048, .n_batch = 0};
    if (rn_ctx_new(m, &co, &ctx, &err)) {
        CHECK_MSG(false, "ctx: %s", err.msg);
        goto out;
    }
    genstats_t js = {0}, ss = {0};
    generate(m, ctx, tok, v, "json", 100, &js);
    generate(m, ctx, tok, v, nested_schema_g, 100, &ss);
    printf("  json: %d/%d valid, %d tokens (longest %d); schema: %d/%d valid, %d tokens "
           "(longest %d)\n",
           js.valid, js.docs, js.tokens, js.max_tokens, ss.valid, ss.docs, ss.tokens,
           ss.max_tokens);
    CHECK_EQ_INT(js.valid, 100);
    CHECK_EQ_INT(ss.valid, 100);
out:
    rn_ctx_destroy(&ctx);
    rn_grammar_vocab_destroy(&v);
    rn_tokenizer_destroy(&tok);
    rn_model_destroy(&m);
    cr_gguf_close(&gg);
    free(bytes);
    be_destroy(&be);
}

int main(void)
{
    test_json();
    test_json_limits();
    test_schema_object();
    test_schema_scalars();
    test_schema_bounds();
    test_schema_enum_const();
    test_schema_arrays();
    test_schema_anyof_ref();
    test_bad_formats();
    test_hostile_formats();
    test_mask();
    test_validator_itself();
    test_real_vocab();
    test_generation();
    return check_finish("test_grammar");
}
