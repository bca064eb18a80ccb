/* test_model_name.c: the name grammar, display form, equality and paths. */
#include "lib/prelude.h"
#include "lib/model_name.h"
#include "tests/unit/check.h"

typedef struct good_case {
    const char *text;
    const char *scheme, *host, *ns, *model, *tag;
    const char *display;
} good_case_t;

static const good_case_t good[] = {
    {"llama3", "https", "registry.ollama.ai", "library", "llama3", "latest",
     "llama3:latest"},
    {"llama3.2", "https", "registry.ollama.ai", "library", "llama3.2", "latest",
     "llama3.2:latest"},
    {"llama3:8b", "https", "registry.ollama.ai", "library", "llama3", "8b",
     "llama3:8b"},
    {"llama3.2:3b-instruct-q4_K_M", "https", "registry.ollama.ai", "library",
     "llama3.2", "3b-instruct-q4_K_M", "llama3.2:3b-instruct-q4_K_M"},
    {"user/model", "https", "registry.ollama.ai", "user", "model", "latest",
     "user/model:latest"},
    {"user/model:v1", "https", "registry.ollama.ai", "user", "model", "v1",
     "user/model:v1"},
    {"library/llama3:latest", "https", "registry.ollama.ai", "library",
     "llama3", "latest", "llama3:latest"},
    {"registry.ollama.ai/library/llama3:latest", "https", "registry.ollama.ai",
     "library", "llama3", "latest", "llama3:latest"},
    {"REGISTRY.OLLAMA.AI/Library/Llama3:Latest", "https", "REGISTRY.OLLAMA.AI",
     "Library", "Llama3", "Latest", "Llama3:Latest"},
    {"hf.co/bartowski/Qwen2-GGUF:Q4_K_M", "https", "hf.co", "bartowski",
     "Qwen2-GGUF", "Q4_K_M", "hf.co/bartowski/Qwen2-GGUF:Q4_K_M"},
    {"localhost:5000/ns/m:t", "https", "localhost:5000", "ns", "m", "t",
     "localhost:5000/ns/m:t"},
    {"localhost:5000/ns/m", "https", "localhost:5000", "ns", "m", "latest",
     "localhost:5000/ns/m:latest"},
    {"http://localhost:5000/ns/m:t", "http", "localhost:5000", "ns", "m", "t",
     "localhost:5000/ns/m:t"},
    {"https://example.com/library/m", "https", "example.com", "library", "m",
     "latest", "example.com/library/m:latest"},
    {"_x/_y:_z", "https", "registry.ollama.ai", "_x", "_y", "_z", "_x/_y:_z"},
    {"a", "https", "registry.ollama.ai", "library", "a", "latest", "a:latest"},
    {"a-b_c.d", "https", "registry.ollama.ai", "library", "a-b_c.d", "latest",
     "a-b_c.d:latest"},
    {"m:1.0-beta_2", "https", "registry.ollama.ai", "library", "m",
     "1.0-beta_2", "m:1.0-beta_2"},
    {"0/0:0", "https", "registry.ollama.ai", "0", "0", "0", "0/0:0"},
    /* a name with a default host but another namespace keeps the namespace */
    {"registry.ollama.ai/me/m:t", "https", "registry.ollama.ai", "me", "m",
     "t", "me/m:t"},
    /* a host that is not the default keeps the default namespace shown */
    {"example.com/library/m:t", "https", "example.com", "library", "m", "t",
     "example.com/library/m:t"},
};

typedef struct bad_case {
    const char *text;
    const char *why_has; /* substring of cr_model_name_why() */
} bad_case_t;

static const bad_case_t bad[] = {
    {"", "empty"},
    {":", "is empty"},
    {"m:", "tag is empty"},
    {":t", "model is empty"},
    {"/m", "namespace is empty"},
    {"ns/", "model is empty"},
    {"/", "is empty"},
    {"//m", "is empty"},
    {"h//m", "namespace is empty"},
    {"/ns/m", "host is empty"},
    {"a/b/c/d", "host 'a/b' has invalid character '/'"},
    /* hostile names: traversal, absolute paths, separators */
    {"../../etc/passwd", "host '../..' has invalid character '.' at 0"},
    {"a/../../b", "host 'a/..' has invalid character '/'"},
    {"..", "model '..' has invalid character '.' at 0"},
    {".", "model '.' has invalid character '.' at 0"},
    {"../m", "namespace '..' has invalid character '.' at 0"},
    {"ns/..", "model '..' has invalid character '.' at 0"},
    {"ns/m:..", "tag '..' has invalid character '.' at 0"},
    {"h/ns/m:.", "tag '.' has invalid character '.' at 0"},
    {"../ns/m", "host '..' has invalid character '.' at 0"},
    {"/etc/passwd", "host is empty"},
    {"/abs/ns/m", "host '/abs' has invalid character '/'"},
    {"a\\b", "model 'a\\b' has invalid character '\\'"},
    {"..\\..\\x", "invalid character '.' at 0"},
    {"ns\\..\\m", "invalid character '\\'"},
    {"m:t/x", "namespace 'm:t' has invalid character ':'"}, /* no tag split */
    {"~/m", "namespace '~' has invalid character '~' at 0"},
    {"m m", "invalid character 0x20"},
    {"m\n", "invalid character 0x0a"},
    {"m\t:t", "invalid character 0x09"},
    {"m:t\r", "invalid character 0x0d"},
    {"-m", "invalid character '-' at 0"},
    {"m:-t", "invalid character '-' at 0"},
    {"n.s/m", "namespace 'n.s' has invalid character '.'"},
    {"ns/m:a:b", "model 'm:a' has invalid character ':'"},
    {"m@sha256:abc", "invalid character '@'"},
    {"m?x", "invalid character '?'"},
    {"m*", "invalid character '*'"},
    {"caf\xc3\xa9", "invalid character 0xc3"},
    {"ftp://h/ns/m", "scheme 'ftp' is not http or https"},
    {"://h/ns/m", "scheme '' is not http or https"},
    {"https://h/", "invalid character '/'"},
    {"https:///ns/m", "host is empty"},
};

static void test_good(void)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(good); i++) {
        const good_case_t *c = &good[i];
        cr_model_name_t n;
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = cr_model_name_parse(c->text, &n, &err);
        CHECK_MSG(st == CR_OK, "'%s' should parse: %s", c->text, err.msg);
        if (st)
            continue;
        CHECK_EQ_STR(n.scheme, c->scheme);
        CHECK_EQ_STR(n.host, c->host);
        CHECK_EQ_STR(n.ns, c->ns);
        CHECK_EQ_STR(n.model, c->model);
        CHECK_EQ_STR(n.tag, c->tag);
        char buf[CR_NAME_BUF];
        CHECK_EQ_STR(cr_model_name_display(&n, buf, sizeof buf), c->display);
        CHECK(cr_model_name_is_valid(c->text));
        char why[200];
        CHECK_EQ_STR(cr_model_name_why(c->text, strlen(c->text), why,
                                       sizeof why), "");
        /* the display form parses back to an equal name */
        cr_model_name_t back;
        CHECK(cr_model_name_parse(buf, &back, NULL) == CR_OK);
        CHECK(cr_model_name_equal(&n, &back));
    }
}

static void test_bad(void)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        const bad_case_t *c = &bad[i];
        cr_model_name_t n;
        memset(&n, 0x5a, sizeof n);
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = cr_model_name_parse(c->text, &n, &err);
        CHECK_MSG(st == CR_E_INVALID, "'%s' should be invalid", c->text);
        CHECK_EQ_STR(err.msg, "invalid model name");
        CHECK_MSG(n.model[0] == '\0' && n.host[0] == '\0',
                  "'%s': out not zeroed", c->text);
        char why[200];
        cr_model_name_why(c->text, strlen(c->text), why, sizeof why);
        CHECK_MSG(strstr(why, c->why_has) != NULL, "'%s': why '%s' lacks '%s'",
                  c->text, why, c->why_has);
        CHECK(!cr_model_name_is_valid(c->text));
    }
    CHECK(cr_model_name_parse(NULL, &(cr_model_name_t){0}, NULL) ==
          CR_E_INVALID);
}

static void test_nul(void)
{
    /* "m\0x" as 3 bytes: an embedded NUL is refused, not truncated */
    cr_model_name_t n;
    CHECK(cr_model_name_parse_n("m\0x", 3, &n, NULL) == CR_E_INVALID);
    char why[200];
    CHECK(strstr(cr_model_name_why("../\0../etc", 10, why, sizeof why),
                 "NUL") != NULL);
    /* the same bytes without the NUL parse */
    CHECK(cr_model_name_parse_n("mxyz", 2, &n, NULL) == CR_OK);
    CHECK_EQ_STR(n.model, "mx");
}

static void fill(char *buf, size_t n, char c)
{
    memset(buf, c, n);
    buf[n] = '\0';
}

static void test_lengths(void)
{
    char part[CR_NAME_HOST_MAX + 2];
    char text[CR_NAME_BUF + 400];
    cr_model_name_t n;

    fill(part, CR_NAME_MODEL_MAX, 'm');
    CHECK(cr_model_name_parse(part, &n, NULL) == CR_OK);
    CHECK_EQ_INT(strlen(n.model), CR_NAME_MODEL_MAX);
    fill(part, CR_NAME_MODEL_MAX + 1, 'm');
    CHECK(cr_model_name_parse(part, &n, NULL) == CR_E_INVALID);

    fill(part, CR_NAME_TAG_MAX, 't');
    snprintf(text, sizeof text, "m:%s", part);
    CHECK(cr_model_name_parse(text, &n, NULL) == CR_OK);
    fill(part, CR_NAME_TAG_MAX + 1, 't');
    snprintf(text, sizeof text, "m:%s", part);
    CHECK(cr_model_name_parse(text, &n, NULL) == CR_E_INVALID);

    fill(part, CR_NAME_NS_MAX, 'n');
    snprintf(text, sizeof text, "%s/m", part);
    CHECK(cr_model_name_parse(text, &n, NULL) == CR_OK);
    fill(part, CR_NAME_NS_MAX + 1, 'n');
    snprintf(text, sizeof text, "%s/m", part);
    CHECK(cr_model_name_parse(text, &n, NULL) == CR_E_INVALID);

    fill(part, CR_NAME_HOST_MAX, 'h');
    snprintf(text, sizeof text, "%s/n/m", part);
    CHECK(cr_model_name_parse(text, &n, NULL) == CR_OK);
    CHECK_EQ_INT(strlen(n.host), CR_NAME_HOST_MAX);
    fill(part, CR_NAME_HOST_MAX + 1, 'h');
    snprintf(text, sizeof text, "%s/n/m", part);
    CHECK(cr_model_name_parse(text, &n, NULL) == CR_E_INVALID);

    /* the longest valid name, with every part at its maximum and a scheme */
    char h[CR_NAME_HOST_MAX + 1], s[CR_NAME_NS_MAX + 1], m[CR_NAME_MODEL_MAX + 1],
        t[CR_NAME_TAG_MAX + 1];
    fill(h, CR_NAME_HOST_MAX, 'h');
    fill(s, CR_NAME_NS_MAX, 's');
    fill(m, CR_NAME_MODEL_MAX, 'm');
    fill(t, CR_NAME_TAG_MAX, 't');
    snprintf(text, sizeof text, "https://%s/%s/%s:%s", h, s, m, t);
    CHECK_EQ_INT(strlen(text), CR_NAME_TEXT_MAX);
    CHECK(cr_model_name_parse(text, &n, NULL) == CR_OK);
    char disp[CR_NAME_BUF];
    cr_model_name_display(&n, disp, sizeof disp);
    CHECK_EQ_INT(strlen(disp), CR_NAME_TEXT_MAX - 8);
    /* one byte more is refused before any part is looked at */
    fill(text, CR_NAME_TEXT_MAX + 1, 'm');
    char why[200];
    CHECK(strstr(cr_model_name_why(text, strlen(text), why, sizeof why),
                 "longer than") != NULL);
    CHECK(cr_model_name_parse(text, &n, NULL) == CR_E_INVALID);
    /* a huge input is refused quickly */
    static char huge[1 << 20];
    fill(huge, sizeof huge - 1, 'a');
    CHECK(cr_model_name_parse(huge, &n, NULL) == CR_E_INVALID);
}

static void test_equal_and_forms(void)
{
    cr_model_name_t a, b, c;
    CHECK(!cr_model_name_parse("Llama3:Latest", &a, NULL));
    CHECK(!cr_model_name_parse("registry.ollama.ai/library/llama3", &b, NULL));
    CHECK(!cr_model_name_parse("llama3:8b", &c, NULL));
    CHECK(cr_model_name_equal(&a, &b));
    CHECK(!cr_model_name_equal(&a, &c));
    cr_model_name_t d;
    CHECK(!cr_model_name_parse("http://registry.ollama.ai/library/llama3", &d,
                               NULL));
    CHECK(cr_model_name_equal(&b, &d)); /* scheme is not identity */

    char buf[CR_NAME_BUF];
    CHECK_EQ_STR(cr_model_name_full(&c, buf, sizeof buf),
                 "registry.ollama.ai/library/llama3:8b");
    /* a short buffer truncates but stays terminated */
    char small[6];
    cr_model_name_display(&c, small, sizeof small);
    CHECK_EQ_STR(small, "llama");
}

static void test_paths(void)
{
    cr_model_name_t n;
    CHECK(!cr_model_name_parse("llama3.2", &n, NULL));
    char rel[CR_NAME_BUF + 16];
    CHECK(cr_model_name_manifest_relpath(&n, rel, sizeof rel));
    CHECK_EQ_STR(rel, "manifests/registry.ollama.ai/library/llama3.2/latest");
    const char *parts[4];
    cr_model_name_path_parts(&n, parts);
    CHECK_EQ_STR(parts[0], "registry.ollama.ai");
    CHECK_EQ_STR(parts[3], "latest");
    char tiny[10];
    CHECK(!cr_model_name_manifest_relpath(&n, tiny, sizeof tiny));

    /* every valid name's parts are single safe path components */
    const char *samples[] = {"a", "h:1/n/m:t", "x.y/z/w.v:u.t", "_/_:_"};
    for (size_t i = 0; i < CR_ARRAY_LEN(samples); i++) {
        CHECK(!cr_model_name_parse(samples[i], &n, NULL));
        cr_model_name_path_parts(&n, parts);
        for (int k = 0; k < 4; k++) {
            CHECK(parts[k][0] != '\0' && parts[k][0] != '.');
            CHECK(strchr(parts[k], '/') == NULL);
            CHECK(strchr(parts[k], '\\') == NULL);
            CHECK(strcmp(parts[k], "..") != 0);
        }
    }
}

/* Every 1- and 2-byte input: whatever parses yields safe path parts. */
static void test_exhaustive_short(void)
{
    char text[3];
    cr_model_name_t n;
    const char *parts[4];
    int valid = 0;
    for (int a = 1; a < 256; a++) {
        for (int b = 0; b < 256; b++) {
            text[0] = (char)a;
            text[1] = (char)b;
            text[2] = '\0';
            if (cr_model_name_parse(text, &n, NULL) != CR_OK)
                continue;
            valid++;
            cr_model_name_path_parts(&n, parts);
            for (int k = 0; k < 4; k++) {
                if (parts[k][0] == '.' || strchr(parts[k], '/') ||
                    strchr(parts[k], '\\') || parts[k][0] == '\0') {
                    CHECK_MSG(false, "unsafe part from 0x%02x 0x%02x", a, b);
                }
            }
        }
    }
    /* 63 one-byte names and 63*65 two-byte ones (second byte alnum, '_',
     * '-' or '.'): the classes are as documented */
    CHECK_EQ_INT(valid, 63 + 63 * 65);
}

int main(void)
{
    test_good();
    test_bad();
    test_nul();
    test_lengths();
    test_equal_and_forms();
    test_paths();
    test_exhaustive_short();
    return check_finish("test_model_name");
}
