/* test_gotext: lib/gotext.h, the one UTF-8 decoder, shortest-float
 * formatter and JSON string quoter, against what Go writes. */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include "lib/gotext.h"

#include <math.h>

static void utf8_ok(const char *s, size_t want_len, uint32_t want_cp)
{
    uint32_t cp = 0xDEAD;
    size_t n = cr_utf8_decode((const unsigned char *)s, strlen(s), &cp);
    CHECK_MSG(n == want_len && cp == want_cp, "%zu U+%04X", n, (unsigned)cp);
}

static void utf8_bad(const char *s, size_t n)
{
    uint32_t cp = 0;
    CHECK_MSG(cr_utf8_decode((const unsigned char *)s, n, &cp) == 0,
              "%02x.. accepted", (unsigned char)s[0]);
}

static void test_utf8(void)
{
    utf8_ok("A", 1, 'A');
    utf8_ok("\x7f", 1, 0x7F);
    utf8_ok("\xc2\x80", 2, 0x80);
    utf8_ok("\xc3\xa9x", 2, 0xE9);
    utf8_ok("\xdf\xbf", 2, 0x7FF);
    utf8_ok("\xe0\xa0\x80", 3, 0x800);
    utf8_ok("\xe2\x82\xac", 3, 0x20AC);
    utf8_ok("\xed\x9f\xbf", 3, 0xD7FF);  /* last before the surrogates */
    utf8_ok("\xee\x80\x80", 3, 0xE000);  /* first after them */
    utf8_ok("\xef\xbf\xbf", 3, 0xFFFF);
    utf8_ok("\xf0\x90\x80\x80", 4, 0x10000);
    utf8_ok("\xf0\x9f\x98\x80", 4, 0x1F600);
    utf8_ok("\xf4\x8f\xbf\xbf", 4, 0x10FFFF);
    utf8_bad("\x80", 1);                 /* stray continuation */
    utf8_bad("\xbf", 1);
    utf8_bad("\xc0\x80", 2);             /* overlong NUL */
    utf8_bad("\xc1\xbf", 2);
    utf8_bad("\xe0\x80\x80", 3);         /* overlong 3-byte */
    utf8_bad("\xe0\x9f\xbf", 3);
    utf8_bad("\xf0\x80\x80\x80", 4);     /* overlong 4-byte */
    utf8_bad("\xf0\x8f\xbf\xbf", 4);
    utf8_bad("\xed\xa0\x80", 3);         /* surrogates */
    utf8_bad("\xed\xbf\xbf", 3);
    utf8_bad("\xf4\x90\x80\x80", 4);     /* past U+10FFFF */
    utf8_bad("\xf5\x80\x80\x80", 4);
    utf8_bad("\xf8\x88\x80\x80\x80", 5); /* old 5-byte form */
    utf8_bad("\xff", 1);
    utf8_bad("\xe2\x82\xac", 2);         /* truncated by n */
    utf8_bad("\xf0\x9f\x98", 3);
    utf8_bad("\xe2\x28\xa1", 3);         /* bad continuation */
}

static void enc_is(uint32_t cp, const char *want)
{
    char out[4];
    size_t n = cr_utf8_encode(cp, out);
    CHECK_MSG(n == strlen(want) && !memcmp(out, want, n), "U+%04X",
              (unsigned)cp);
    if (cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF)) {
        uint32_t back = 0;
        CHECK(cr_utf8_decode((const unsigned char *)out, n, &back) == n &&
              back == cp);
    }
}

static void test_encode(void)
{
    char nul[4] = {1};
    CHECK(cr_utf8_encode(0, nul) == 1 && nul[0] == 0);
    enc_is('a', "a");
    enc_is(0x7F, "\x7f");
    enc_is(0x80, "\xc2\x80");
    enc_is(0x7FF, "\xdf\xbf");
    enc_is(0x800, "\xe0\xa0\x80");
    enc_is(0x20AC, "\xe2\x82\xac");
    enc_is(0xFFFF, "\xef\xbf\xbf");
    enc_is(0x10000, "\xf0\x90\x80\x80");
    enc_is(0x10FFFF, "\xf4\x8f\xbf\xbf");
    enc_is(0xD800, "\xef\xbf\xbd"); /* surrogates and past U+10FFFF: */
    enc_is(0xDFFF, "\xef\xbf\xbd"); /* U+FFFD, as utf8.EncodeRune */
    enc_is(0x110000, "\xef\xbf\xbd");
}

static void fmt_is(double v, int bits, cr_float_style_t style, const char *want)
{
    char buf[CR_FLOAT_BUF];
    size_t n = cr_float_format(v, bits, style, buf, sizeof buf);
    CHECK_MSG(!strcmp(buf, want) && n == strlen(want), "%.17g/%d/%d: %s != %s",
              v, bits, (int)style, buf, want);
}

static void test_float(void)
{
    const cr_float_style_t J = CR_FLOAT_JSON, G = CR_FLOAT_G;
    /* encoding/json (json.Marshal of float64 / float32) */
    fmt_is(0, 64, J, "0");
    fmt_is(-0.0, 64, J, "-0");
    fmt_is(1, 64, J, "1");
    fmt_is(-2.5, 64, J, "-2.5");
    fmt_is(0.1, 64, J, "0.1");
    fmt_is(0.2, 64, J, "0.2");
    fmt_is(1.0 / 3, 64, J, "0.3333333333333333");
    fmt_is(123456789, 64, J, "123456789");
    fmt_is(1e20, 64, J, "100000000000000000000");
    fmt_is(1e21, 64, J, "1e+21");
    fmt_is(1.5e300, 64, J, "1.5e+300");
    fmt_is(1e-6, 64, J, "0.000001");
    fmt_is(1e-7, 64, J, "1e-7");
    fmt_is(-1.25e-10, 64, J, "-1.25e-10");
    fmt_is(5e-324, 64, J, "5e-324");
    fmt_is(1.7976931348623157e308, 64, J, "1.7976931348623157e+308");
    fmt_is(NAN, 64, J, "null");
    fmt_is(INFINITY, 64, J, "null");
    fmt_is(-INFINITY, 64, J, "null");
    fmt_is(0.1f, 32, J, "0.1");
    fmt_is(1e-5f, 32, J, "0.00001");
    fmt_is(1e-6f, 32, J, "0.000001"); /* float32(abs) < 1e-6 is false */
    fmt_is(1e-7f, 32, J, "1e-7");
    fmt_is(3.4028235e38f, 32, J, "3.4028235e+38");
    fmt_is(16777216.0f, 32, J, "16777216");
    fmt_is(1e21f, 32, J, "1e+21");
    /* fmt %v */
    fmt_is(0, 64, G, "0");
    fmt_is(-0.0, 64, G, "-0");
    fmt_is(1.5, 64, G, "1.5");
    fmt_is(100000, 64, G, "100000");
    fmt_is(1e6, 64, G, "1e+06");
    fmt_is(1234567, 64, G, "1.234567e+06");
    fmt_is(123456.7, 64, G, "123456.7");
    fmt_is(0.0001, 64, G, "0.0001");
    fmt_is(1e-5, 64, G, "1e-05");
    fmt_is(1e21, 64, G, "1e+21");
    fmt_is(1e100, 64, G, "1e+100");
    fmt_is(NAN, 64, G, "NaN");
    fmt_is(INFINITY, 64, G, "+Inf");
    fmt_is(-INFINITY, 64, G, "-Inf");
    fmt_is(0.1f, 32, G, "0.1");
    /* shortest digits and the point */
    char d[32];
    int dp = 0;
    CHECK_EQ_INT(cr_float_digits(1234.5, 64, d, &dp), 5);
    CHECK_EQ_STR(d, "12345");
    CHECK_EQ_INT(dp, 4);
    CHECK_EQ_INT(cr_float_digits(0.001, 64, d, &dp), 1);
    CHECK_EQ_INT(dp, -2);
    /* a short buffer truncates, NUL-terminated */
    char small[4];
    CHECK_EQ_INT(cr_float_format(123456, 64, J, small, sizeof small), 3);
    CHECK_EQ_STR(small, "123");
}

static void quote_is(const char *s, size_t n, const char *want)
{
    cr_buf_t b;
    cr_buf_init(&b, 1 << 16);
    CHECK(cr_json_quote(s, n, &b) == CR_OK);
    CHECK_MSG(b.len == strlen(want) && !memcmp(b.data, want, b.len),
              "%.*s != %s", (int)b.len, b.data, want);
    cr_buf_free(&b);
}

#define Q(lit, want) quote_is(lit, sizeof lit - 1, want)

static void test_quote(void)
{
    Q("", "\"\"");
    Q("plain text", "\"plain text\"");
    Q("a\"b\\c/d", "\"a\\\"b\\\\c/d\"");
    Q("\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\"");
    Q("\x01\x1f\x0b", "\"\\u0001\\u001f\\u000b\"");
    Q("a\0b", "\"a\\u0000b\"");
    Q("\x7f", "\"\x7f\"");
    Q("<a href=\"x\">&</a>",
      "\"\\u003ca href=\\\"x\\\"\\u003e\\u0026\\u003c/a\\u003e\"");
    Q("\xe2\x80\xa8|\xe2\x80\xa9", "\"\\u2028|\\u2029\"");
    Q("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"");
    /* each byte outside valid UTF-8 is one U+FFFD */
    Q("a\xff" "b", "\"a\\ufffdb\"");
    Q("\xc0\x80", "\"\\ufffd\\ufffd\"");
    Q("\xed\xa0\x80", "\"\\ufffd\\ufffd\\ufffd\"");
    Q("\xe2\x82", "\"\\ufffd\\ufffd\"");
    Q("\xf4\x90\x80\x80", "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
    /* a full buffer is the buffer's error */
    cr_buf_t b;
    cr_buf_init(&b, 4);
    CHECK(cr_json_quote("abcdef", 6, &b) != CR_OK);
    cr_buf_free(&b);
}

int main(void)
{
    test_utf8();
    test_encode();
    test_float();
    test_quote();
    return check_finish("test_gotext");
}
