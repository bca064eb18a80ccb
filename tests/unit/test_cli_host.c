/* test_cli_host.c: OLLAMA_HOST / CORRAL_HOST parsing as Ollama's client
 * does it (§5), with the wildcard addresses mapped to loopback for dialing,
 * plus hostile values. */
#include "lib/prelude.h"
#include "cli/host.h"
#include "tests/unit/check.h"

static const struct {
    const char *in;
    const char *url;
} cases[] = {
    {"", "http://127.0.0.1:11434"},
    {"1.2.3.4", "http://1.2.3.4:11434"},
    {":1234", "http://127.0.0.1:1234"},
    {"1.2.3.4:1234", "http://1.2.3.4:1234"},
    {"example.com", "http://example.com:11434"},
    {"example.com:1234", "http://example.com:1234"},
    {":0", "http://127.0.0.1:0"},
    {":66000", "http://127.0.0.1:11434"},  /* too large: default */
    {":-1", "http://127.0.0.1:11434"},     /* negative: default */
    {"example.com:port", "http://example.com:11434"},
    {"example.com:", "http://example.com:11434"},
    {"[::1]", "http://[::1]:11434"},
    {"[::]", "http://[::1]:11434"},        /* bind-all dials loopback */
    {"::1", "http://[::1]:11434"},
    {"[::1]:1337", "http://[::1]:1337"},
    {"[0:0::1]", "http://[::1]:11434"},    /* canonical form */
    {"::ffff:1.2.3.4", "http://1.2.3.4:11434"},
    {" 1.2.3.4 ", "http://1.2.3.4:11434"},
    {"http://1.2.3.4", "http://1.2.3.4:80"},
    {"http://1.2.3.4:4321", "http://1.2.3.4:4321"},
    {"https://1.2.3.4", "https://1.2.3.4:443"},
    {"https://1.2.3.4:4321", "https://1.2.3.4:4321"},
    {"https://example.com/ollama", "https://example.com:443/ollama"},
    {"http://example.com:8080/a/b/", "http://example.com:8080/a/b"},
    {"http://h/", "http://h:80"},
    {"ollama.com", "https://ollama.com:443"},
    {"0.0.0.0", "http://127.0.0.1:11434"},
    {"0.0.0.0:8080", "http://127.0.0.1:8080"},
    {"http://0.0.0.0:9", "http://127.0.0.1:9"},
    {"[::]:5000", "http://[::1]:5000"},
    {"localhost", "http://localhost:11434"},
    {"tcp://h:1", "tcp://h:1"},            /* other schemes pass through */
    {"unix://x", "unix://x:11434"},
    {"[::1", "http://[::1]:11434"},        /* unbalanced bracket: IP trimmed */
    {"a:b:c", "http://[a:b:c]:11434"},     /* too many colons: kept, as Go joins it */
};

static void test_table(void)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        cli_host_t h;
        cr_err_t err;
        cr_err_clear(&err);
        CHECK_MSG(cli_host_parse(cases[i].in, &h, &err) == CR_OK, "%s: %s", cases[i].in,
                  err.msg);
        CHECK_MSG(!strcmp(h.url, cases[i].url), "\"%s\" -> %s, want %s", cases[i].in, h.url,
                  cases[i].url);
    }
    cli_host_t h;
    CHECK_EQ_INT(cli_host_parse(NULL, &h, NULL), CR_OK);
    CHECK_EQ_STR(h.url, "http://127.0.0.1:11434");
    CHECK_EQ_STR(h.scheme, "http");
    CHECK_EQ_STR(h.host, "127.0.0.1");
    CHECK_EQ_INT(h.port, 11434);
    CHECK_EQ_STR(h.path, "");
    CHECK_EQ_INT(cli_host_parse("https://[::1]:99/p", &h, NULL), CR_OK);
    CHECK_EQ_STR(h.host, "::1"); /* no brackets in the host field */
    CHECK_EQ_INT(h.port, 99);
    CHECK_EQ_STR(h.path, "/p");
}

static void test_env(void)
{
    cli_host_t h;
    unsetenv("CORRAL_HOST");
    unsetenv("OLLAMA_HOST");
    CHECK_EQ_INT(cli_host_from_env(&h, NULL), CR_OK);
    CHECK_EQ_STR(h.url, "http://127.0.0.1:11434");
    setenv("OLLAMA_HOST", " \" 1.2.3.4 \" ", 1); /* quotes and spaces trimmed */
    CHECK_EQ_INT(cli_host_from_env(&h, NULL), CR_OK);
    CHECK_EQ_STR(h.url, "http://1.2.3.4:11434");
    setenv("OLLAMA_HOST", "'1.2.3.4:5'", 1);
    CHECK_EQ_INT(cli_host_from_env(&h, NULL), CR_OK);
    CHECK_EQ_STR(h.url, "http://1.2.3.4:5");
    setenv("CORRAL_HOST", "127.0.0.1:7777", 1); /* CORRAL_ wins */
    CHECK_EQ_INT(cli_host_from_env(&h, NULL), CR_OK);
    CHECK_EQ_STR(h.url, "http://127.0.0.1:7777");
    unsetenv("CORRAL_HOST");
    unsetenv("OLLAMA_HOST");
}

static void test_hostile(void)
{
    cli_host_t h;
    cr_err_t err;
    char big[CLI_HOST_MAX + 10];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    CHECK_EQ_INT(cli_host_parse(big, &h, &err), CR_E_TOO_LARGE);
    setenv("OLLAMA_HOST", big, 1);
    CHECK_EQ_INT(cli_host_from_env(&h, &err), CR_E_TOO_LARGE);
    unsetenv("OLLAMA_HOST");
    big[CLI_HOST_MAX] = '\0'; /* exactly the limit parses */
    CHECK_EQ_INT(cli_host_parse(big, &h, &err), CR_OK);
    CHECK_EQ_INT(cli_host_parse("ht tp://x", &h, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "scheme") != NULL);
    CHECK_EQ_INT(cli_host_parse("://x", &h, &err), CR_E_INVALID);
    CHECK_EQ_INT(cli_host_parse("averyveryverylongscheme://x", &h, &err), CR_E_INVALID);
    /* Odd but harmless shapes parse to something dialable. */
    const char *odd[] = {"[", "]", "[]", "[]:", ":", "::::", "/", "//", "http://",
                         "http://:", "[x]:1", "[::1]x", "h:99999999999999999999"};
    for (size_t i = 0; i < CR_ARRAY_LEN(odd); i++) {
        CHECK_MSG(cli_host_parse(odd[i], &h, &err) == CR_OK, "%s", odd[i]);
        CHECK(h.port >= 0 && h.port <= 65535);
        CHECK(h.host[0] != '\0');
    }
}

int main(void)
{
    test_table();
    test_env();
    test_hostile();
    return check_finish("test_cli_host");
}
