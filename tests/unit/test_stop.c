/* test_stop.c: stop strings across token pieces, overlapping stops, UTF-8
 * hold-back, flush, and bad input (too many, too long, NULL strings, a full
 * output buffer). */
#include "lib/prelude.h"
#include "services/runner/output/stop.h"
#include "tests/unit/check.h"

static rn_stop_t *make(const char *const *strs, size_t n)
{
    cr_err_t err;
    rn_stop_t *s = rn_stop_new(strs, n, &err);
    CHECK_MSG(s != NULL, "%s", err.msg);
    return s;
}

/* Pushes each piece, collecting the output; returns whether it stopped. */
static bool feed(rn_stop_t *s, const char *const *pieces, size_t n, cr_buf_t *out)
{
    bool stopped = false;
    for (size_t i = 0; i < n; i++) {
        cr_status_t st = rn_stop_push(s, pieces[i], strlen(pieces[i]), out, &stopped);
        CHECK_EQ_INT(st, CR_OK);
    }
    return stopped;
}

static const char *out_str(const cr_buf_t *b)
{
    return b->data ? b->data : "";
}

static void test_across_three_pieces(void)
{
    const char *stops[] = {"<|end|>"};
    rn_stop_t *s = make(stops, 1);
    cr_buf_t out;
    cr_buf_init(&out, 1 << 16);
    bool stopped = true;
    CHECK_EQ_INT(rn_stop_push(s, "Hello <|", 8, &out, &stopped), CR_OK);
    CHECK(!stopped);
    CHECK_EQ_STR(out_str(&out), "Hello ");
    CHECK_EQ_INT(rn_stop_held(s), 2);
    CHECK_EQ_INT(rn_stop_push(s, "en", 2, &out, &stopped), CR_OK);
    CHECK(!stopped);
    CHECK_EQ_STR(out_str(&out), "Hello ");
    CHECK_EQ_INT(rn_stop_held(s), 4);
    CHECK_EQ_INT(rn_stop_push(s, "d|> world", 9, &out, &stopped), CR_OK);
    CHECK(stopped);
    CHECK_EQ_STR(out_str(&out), "Hello ");
    CHECK_EQ_INT(rn_stop_which(s), 0);
    CHECK_EQ_STR(rn_stop_matched(s), "<|end|>");
    CHECK_EQ_INT(rn_stop_held(s), 0);
    /* After the stop nothing more comes out, flush included. */
    CHECK_EQ_INT(rn_stop_push(s, "more", 4, &out, &stopped), CR_OK);
    CHECK(stopped);
    CHECK_EQ_INT(rn_stop_flush(s, &out), CR_OK);
    CHECK_EQ_STR(out_str(&out), "Hello ");
    /* Reset starts over with the same strings. */
    rn_stop_reset(s);
    CHECK_EQ_INT(rn_stop_which(s), -1);
    CHECK(rn_stop_matched(s) == NULL);
    cr_buf_reset(&out);
    const char *p2[] = {"a<|e", "nd|>"};
    CHECK(feed(s, p2, 2, &out));
    CHECK_EQ_STR(out_str(&out), "a");
    cr_buf_free(&out);
    rn_stop_destroy(&s);
    CHECK(s == NULL);
}

static void test_partial_released(void)
{
    const char *stops[] = {"STOP"};
    rn_stop_t *s = make(stops, 1);
    cr_buf_t out;
    cr_buf_init(&out, 1 << 16);
    bool stopped;
    rn_stop_push(s, "ST", 2, &out, &stopped);
    CHECK_EQ_STR(out_str(&out), "");
    rn_stop_push(s, "O", 1, &out, &stopped);
    CHECK_EQ_STR(out_str(&out), "");
    CHECK_EQ_INT(rn_stop_held(s), 3);
    rn_stop_push(s, "x", 1, &out, &stopped);
    CHECK(!stopped);
    CHECK_EQ_STR(out_str(&out), "STOx");
    CHECK_EQ_INT(rn_stop_held(s), 0);
    /* A failed partial that overlaps a real start: "SSTOP" stops after "S". */
    cr_buf_reset(&out);
    const char *p[] = {"S", "S", "T", "O", "P"};
    CHECK(feed(s, p, 5, &out));
    CHECK_EQ_STR(out_str(&out), "S");
    /* KMP fallback: "aab" in "aaab". */
    rn_stop_t *k = make((const char *[]){"aab"}, 1);
    cr_buf_reset(&out);
    const char *p2[] = {"a", "a", "a", "b", "c"};
    CHECK(feed(k, p2, 5, &out));
    CHECK_EQ_STR(out_str(&out), "a");
    rn_stop_destroy(&k);
    /* Partial at the end of generation comes out on flush. */
    rn_stop_reset(s);
    cr_buf_reset(&out);
    const char *p3[] = {"the end ST"};
    CHECK(!feed(s, p3, 1, &out));
    CHECK_EQ_STR(out_str(&out), "the end ");
    CHECK_EQ_INT(rn_stop_flush(s, &out), CR_OK);
    CHECK_EQ_STR(out_str(&out), "the end ST");
    CHECK_EQ_INT(rn_stop_held(s), 0);
    cr_buf_free(&out);
    rn_stop_destroy(&s);
}

static void test_overlapping(void)
{
    cr_buf_t out;
    cr_buf_init(&out, 1 << 16);
    /* "abc" completes before "bcd": cut at "abc". */
    const char *s1[] = {"bcd", "abc"};
    rn_stop_t *s = make(s1, 2);
    const char *p1[] = {"xa", "bcd"};
    CHECK(feed(s, p1, 2, &out));
    CHECK_EQ_STR(out_str(&out), "x");
    CHECK_EQ_INT(rn_stop_which(s), 1);
    rn_stop_destroy(&s);

    /* Both complete on the same byte: the longer (earlier) one wins. */
    cr_buf_reset(&out);
    const char *s2[] = {"world", "hello world"};
    s = make(s2, 2);
    const char *p2[] = {"say hel", "lo wor", "ld!"};
    CHECK(feed(s, p2, 3, &out));
    CHECK_EQ_STR(out_str(&out), "say ");
    CHECK_EQ_INT(rn_stop_which(s), 1);
    CHECK_EQ_STR(rn_stop_matched(s), "hello world");
    rn_stop_destroy(&s);

    /* A short stop inside a longer pending one completes first. */
    cr_buf_reset(&out);
    const char *s3[] = {"abcd", "bc"};
    s = make(s3, 2);
    const char *p3[] = {"ab", "cd"};
    CHECK(feed(s, p3, 2, &out));
    CHECK_EQ_STR(out_str(&out), "a");
    CHECK_EQ_INT(rn_stop_which(s), 1);
    rn_stop_destroy(&s);

    /* Hold-back is the longest pending prefix over all strings. */
    cr_buf_reset(&out);
    const char *s4[] = {"xyz", "zzzq"};
    s = make(s4, 2);
    bool stopped;
    rn_stop_push(s, "axyzz", 5, &out, &stopped);
    CHECK(stopped);
    CHECK_EQ_STR(out_str(&out), "a");
    rn_stop_destroy(&s);
    cr_buf_reset(&out);
    s = make(s4, 2);
    rn_stop_push(s, "azzz", 4, &out, &stopped);
    CHECK(!stopped);
    CHECK_EQ_STR(out_str(&out), "a");
    CHECK_EQ_INT(rn_stop_held(s), 3);
    rn_stop_push(s, "x", 1, &out, &stopped);
    CHECK_EQ_STR(out_str(&out), "azzz");
    CHECK_EQ_INT(rn_stop_held(s), 1); /* "x" may start "xyz" */
    rn_stop_destroy(&s);
    cr_buf_free(&out);
}

static void test_first_char(void)
{
    cr_buf_t out;
    cr_buf_init(&out, 1 << 16);
    const char *stops[] = {"H"};
    rn_stop_t *s = make(stops, 1);
    const char *p[] = {"Hello"};
    CHECK(feed(s, p, 1, &out));
    CHECK_EQ_STR(out_str(&out), "");
    CHECK_EQ_INT(out.len, 0);
    rn_stop_destroy(&s);

    /* The very first piece is exactly the stop string. */
    const char *stops2[] = {"</s>"};
    s = make(stops2, 1);
    const char *p2[] = {"</s>"};
    CHECK(feed(s, p2, 1, &out));
    CHECK_EQ_INT(out.len, 0);
    rn_stop_destroy(&s);
    cr_buf_free(&out);
}

static void test_multibyte(void)
{
    cr_buf_t out;
    cr_buf_init(&out, 1 << 16);
    /* No stops: an incomplete character is held until it completes. */
    rn_stop_t *s = make(NULL, 0);
    bool stopped;
    rn_stop_push(s, "caf\xC3", 4, &out, &stopped);
    CHECK_EQ_STR(out_str(&out), "caf");
    CHECK_EQ_INT(rn_stop_held(s), 1);
    rn_stop_push(s, "\xA9!", 2, &out, &stopped);
    CHECK_EQ_STR(out_str(&out), "caf\xC3\xA9!");
    /* A 4-byte emoji fed one byte at a time comes out whole. */
    cr_buf_reset(&out);
    const char *emoji = "\xF0\x9F\x98\x80";
    for (int i = 0; i < 4; i++) {
        rn_stop_push(s, emoji + i, 1, &out, &stopped);
        CHECK_EQ_INT(out.len, i < 3 ? 0 : 4);
    }
    CHECK_EQ_STR(out_str(&out), emoji);
    /* Flush of an incomplete character gives U+FFFD. */
    cr_buf_reset(&out);
    rn_stop_push(s, "ok\xE2\x82", 4, &out, &stopped);
    CHECK_EQ_STR(out_str(&out), "ok");
    rn_stop_flush(s, &out);
    CHECK_EQ_STR(out_str(&out), "ok\xEF\xBF\xBD");
    /* Stray continuation bytes are invalid, not incomplete: passed on. */
    cr_buf_reset(&out);
    rn_stop_push(s, "a\x80\x80\x80\x80", 5, &out, &stopped);
    CHECK_EQ_INT(out.len, 5);
    rn_stop_destroy(&s);

    /* A stop string that starts with a multibyte character. */
    cr_buf_reset(&out);
    const char *stops[] = {"\xC3\xA9."}; /* "é." */
    s = make(stops, 1);
    rn_stop_push(s, "caf\xC3", 4, &out, &stopped);
    rn_stop_push(s, "\xA9", 1, &out, &stopped);
    CHECK_EQ_STR(out_str(&out), "caf");
    CHECK_EQ_INT(rn_stop_held(s), 2);
    rn_stop_push(s, "s", 1, &out, &stopped);
    CHECK(!stopped);
    CHECK_EQ_STR(out_str(&out), "caf\xC3\xA9s");
    rn_stop_push(s, "\xC3\xA9.", 3, &out, &stopped);
    CHECK(stopped);
    CHECK_EQ_STR(out_str(&out), "caf\xC3\xA9s");
    rn_stop_destroy(&s);

    /* A (malformed) stop string starting mid-character: the hold-back is
     * widened so the character it would split is held whole. */
    cr_buf_reset(&out);
    const char *odd[] = {"\xA9x"};
    s = make(odd, 1);
    rn_stop_push(s, "ab\xC3\xA9", 4, &out, &stopped);
    CHECK_EQ_STR(out_str(&out), "ab");
    CHECK_EQ_INT(rn_stop_held(s), 2);
    rn_stop_push(s, "y", 1, &out, &stopped);
    CHECK_EQ_STR(out_str(&out), "ab\xC3\xA9y");
    rn_stop_destroy(&s);
    cr_buf_free(&out);
}

/* However the text is cut into pieces, the output is the same. */
static void test_split_independent(void)
{
    const char *text = "One <e>two</e> <end three\xE2\x9C\x93 </end> four";
    const char *stops[] = {"</end>", "<end>", "\xE2\x9C\x93 <"};
    size_t len = strlen(text);
    cr_buf_t whole, out;
    cr_buf_init(&whole, 1 << 16);
    cr_buf_init(&out, 1 << 16);
    rn_stop_t *s = make(stops, 3);
    bool stopped;
    rn_stop_push(s, text, len, &whole, &stopped);
    CHECK(stopped);
    CHECK_EQ_STR(out_str(&whole), "One <e>two</e> <end three");
    CHECK_EQ_INT(rn_stop_which(s), 2);
    uint64_t x = 12345;
    for (int round = 0; round < 300; round++) {
        rn_stop_reset(s);
        cr_buf_reset(&out);
        size_t at = 0;
        stopped = false;
        while (at < len && !stopped) {
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t n = 1 + (size_t)((x >> 33) % 5);
            n = CR_MIN(n, len - at);
            rn_stop_push(s, text + at, n, &out, &stopped);
            at += n;
        }
        CHECK(stopped);
        CHECK_EQ_STR(out_str(&out), out_str(&whole));
    }
    rn_stop_destroy(&s);
    cr_buf_free(&whole);
    cr_buf_free(&out);
}

static void test_bad_input(void)
{
    cr_err_t err;
    const char *many[RN_STOP_MAX_STRINGS + 1];
    for (size_t i = 0; i < CR_ARRAY_LEN(many); i++)
        many[i] = "x";
    CHECK(rn_stop_new(many, CR_ARRAY_LEN(many), &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_TOO_LARGE);
    rn_stop_t *s = rn_stop_new(many, RN_STOP_MAX_STRINGS, &err);
    CHECK(s != NULL);
    rn_stop_destroy(&s);

    char *long_str = malloc(RN_STOP_MAX_LEN + 2);
    memset(long_str, 'a', RN_STOP_MAX_LEN + 1);
    long_str[RN_STOP_MAX_LEN + 1] = '\0';
    const char *two[] = {"ok", long_str};
    CHECK(rn_stop_new(two, 2, &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_TOO_LARGE);
    CHECK(strstr(err.msg, "stop[1]") != NULL);
    long_str[RN_STOP_MAX_LEN] = '\0'; /* exactly the limit is fine */
    s = rn_stop_new(two, 2, &err);
    CHECK(s != NULL);
    rn_stop_destroy(&s);
    free(long_str);

    const char *with_null[] = {"a", NULL};
    CHECK(rn_stop_new(with_null, 2, &err) == NULL);
    CHECK_EQ_INT(err.status, CR_E_INVALID);
    CHECK(strstr(err.msg, "stop[1]") != NULL);
    CHECK(rn_stop_new(NULL, 1, &err) == NULL);

    /* Empty strings are ignored; which() keeps the caller's index. */
    const char *empties[] = {"", "END", ""};
    s = make(empties, 3);
    cr_buf_t out;
    cr_buf_init(&out, 1 << 16);
    bool stopped;
    rn_stop_push(s, "abc", 3, &out, &stopped);
    CHECK(!stopped);
    CHECK_EQ_STR(out_str(&out), "abc");
    rn_stop_push(s, "xEND", 4, &out, &stopped);
    CHECK(stopped);
    CHECK_EQ_INT(rn_stop_which(s), 1);
    CHECK_EQ_STR(out_str(&out), "abcx");
    rn_stop_destroy(&s);

    /* An output buffer that is full: error, and nothing changes. */
    const char *stops[] = {"zz"};
    s = make(stops, 1);
    cr_buf_t small;
    cr_buf_init(&small, 6);
    CHECK_EQ_INT(rn_stop_push(s, "abz", 3, &small, &stopped), CR_OK);
    CHECK_EQ_STR(out_str(&small), "ab");
    CHECK_EQ_INT(rn_stop_push(s, "cdefgh", 6, &small, &stopped), CR_E_TOO_LARGE);
    CHECK_EQ_STR(out_str(&small), "ab");
    CHECK_EQ_INT(rn_stop_held(s), 1);
    CHECK_EQ_INT(rn_stop_push(s, "z!", 2, &small, &stopped), CR_OK);
    CHECK(stopped); /* the held "z" was kept through the error */
    CHECK_EQ_STR(out_str(&small), "ab");
    cr_buf_free(&small);
    rn_stop_destroy(&s);

    /* Zero-length pushes are no-ops. */
    s = make(stops, 1);
    cr_buf_reset(&out);
    CHECK_EQ_INT(rn_stop_push(s, "", 0, &out, &stopped), CR_OK);
    CHECK(!stopped);
    CHECK_EQ_INT(out.len, 0);
    rn_stop_destroy(&s);
    rn_stop_destroy(NULL);
    cr_buf_free(&out);
}

int main(void)
{
    test_across_three_pieces();
    test_partial_released();
    test_overlapping();
    test_first_char();
    test_multibyte();
    test_split_independent();
    test_bad_input();
    return check_finish("test_stop");
}
