/* test_cli_progress.c: the CLI's progress lines (cli/progress.h) and the
 * word wrap of answers (cli/wrap.h), on memory streams.
 *
 * Bar lines are compared with the text Ollama's progress.Bar gives for the
 * same numbers (worked out from its source: widths 6 for sizes, 10 for the
 * rate, 8 for the time left, the bar filling the rest). Plain output (no
 * terminal) must be one line per phase and per layer, no control bytes. */
#include "lib/prelude.h"
#include "cli/progress.h"
#include "cli/wrap.h"
#include "tests/unit/check.h"

static void test_bar_line(void)
{
    char out[1024];
    /* Running: 45%, sizes, rate and time left; width 80. */
    cli_progress_bar_line(out, sizeof out, "pulling 6a0746a1ec1a:", 2100000000, 4700000000,
                          95000000, false, 80);
    /* pre "pulling 6a0746a1ec1a:  45%" (26), suf "2.1 GB/4.7 GB   95 MB/s     27s"
     * (13 + 10 + 8 = 31): bar 80 - 26 - 31 - 5 = 18 columns, 8 full. */
    CHECK_EQ_STR(out, "pulling 6a0746a1ec1a:  45% ▕████████          ▏ 2.1 GB/4.7 GB"
                      "   95 MB/s     27s");
    /* Stopped: the total, padded where the rate and time were. */
    cli_progress_bar_line(out, sizeof out, "pulling 4fa551d4f938:", 12000, 12000, 0, true, 80);
    CHECK_EQ_STR(out, "pulling 4fa551d4f938: 100% ▕██████████████████▏  12 KB"
                      "                         ");
    /* No rate yet: blanks. */
    cli_progress_bar_line(out, sizeof out, "x", 0, 1000, 0, false, 45);
    CHECK_EQ_STR(out, "x   0% ▕   ▏    0 B/  1 KB                  ");
    char d[16];
    cli_progress_duration(27, d, sizeof d);
    CHECK_EQ_STR(d, "27s");
    cli_progress_duration(65, d, sizeof d);
    CHECK_EQ_STR(d, "1m5s");
    cli_progress_duration(3600 + 120, d, sizeof d);
    CHECK_EQ_STR(d, "1h2m");
    cli_progress_duration(400 * 3600, d, sizeof d);
    CHECK_EQ_STR(d, "99h+");
}

static void event(cli_progress_t *p, const char *json)
{
    json_t *o = json_loads(json, 0, NULL);
    CHECK(o != NULL);
    cli_progress_event(p, o);
    json_decref(o);
}

/* A pull as the server streams it, with repeats and the 0-done
 * announcements: plain output shows each phase and layer once. */
static void test_plain(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cli_progress_t *p = cli_progress_new(f, false, 0, "pulling");
    event(p, "{\"status\":\"pulling manifest\"}");
    event(p, "{\"status\":\"pulling aaaaaaaaaaaa\",\"digest\":\"sha256:aaaaaaaaaaaa11\","
             "\"total\":2000}");
    event(p, "{\"status\":\"pulling aaaaaaaaaaaa\",\"digest\":\"sha256:aaaaaaaaaaaa11\","
             "\"total\":2000,\"completed\":1000}");
    event(p, "{\"status\":\"pulling aaaaaaaaaaaa\",\"digest\":\"sha256:aaaaaaaaaaaa11\","
             "\"total\":2000,\"completed\":2000}");
    event(p, "{\"status\":\"pulling aaaaaaaaaaaa\",\"digest\":\"sha256:aaaaaaaaaaaa11\","
             "\"total\":2000,\"completed\":2000}");
    event(p, "{\"status\":\"pulling bbbbbbbbbbbb\",\"digest\":\"sha256:bbbbbbbbbbbb22\","
             "\"total\":3000000,\"completed\":1500000}");
    event(p, "{\"status\":\"verifying sha256 digest\"}");
    event(p, "{\"status\":\"verifying sha256 digest\"}");
    event(p, "{\"status\":\"success\"}");
    cli_progress_destroy(&p);
    CHECK(p == NULL);
    fclose(f);
    CHECK_EQ_STR(buf, "pulling manifest\n"
                      "pulling aaaaaaaaaaaa: 100% 2 KB\n"
                      "verifying sha256 digest\n"
                      "success\n"
                      "pulling bbbbbbbbbbbb: 50% 1.5 MB/3 MB\n");
    free(buf);
}

/* On a terminal: the last frame (after the last "cursor to column 1")
 * holds each layer and phase once, spinners stopped. */
static void test_tty(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cli_progress_t *p = cli_progress_new(f, true, 60, "pushing");
    event(p, "{\"status\":\"retrieving manifest\"}");
    event(p, "{\"status\":\"pushing cccccccccccc\",\"digest\":\"sha256:cccccccccccc33\","
             "\"total\":1000,\"completed\":0}");
    event(p, "{\"status\":\"pushing cccccccccccc\",\"digest\":\"sha256:cccccccccccc33\","
             "\"total\":1000,\"completed\":1000}");
    event(p, "{\"status\":\"pushing cccccccccccc\",\"digest\":\"sha256:cccccccccccc33\","
             "\"total\":1000,\"completed\":1000}");
    event(p, "{\"status\":\"success\"}");
    cli_progress_destroy(&p);
    fclose(f);
    const char *last = NULL;
    for (const char *s = buf; (s = strstr(s, "\x1b[1G")); s++)
        last = s + 4;
    CHECK(last != NULL);
    CHECK_MSG(last && !strncmp(last, "retrieving manifest \x1b[K\n"
                                     "pushing cccccccccccc 100% ▕",
                               strlen("retrieving manifest \x1b[K\npushing cccccccccccc 100% ▕")),
              "last frame: %s", last ? last : "");
    CHECK(last && strstr(last, "▏   1 KB") && strstr(last, "\nsuccess \x1b[K"));
    CHECK(last && !strstr(strstr(last, "▕") + 1, "pushing"));
    free(buf);
}

static char *wrap(int width, const char *const *pieces, size_t n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cli_wrap_t w;
    cli_wrap_init(&w, true, width);
    for (size_t i = 0; i < n; i++)
        cli_wrap_write(&w, pieces[i], strlen(pieces[i]), f);
    fclose(f);
    return buf;
}

static void test_wrap(void)
{
    /* Width 20: lines break before column 16 (width - 5), at words. */
    const char *one[] = {"hello there wonderful world"};
    char *s = wrap(20, one, 1);
    CHECK_EQ_STR(s, "hello there won\x1b[3D\x1b[K\nwonderful world");
    free(s);
    /* Pieces split inside words and inside a UTF-8 character. */
    const char *pieces[] = {"hello th", "ere wonder", "ful w\xc3", "\xa9rld"};
    s = wrap(20, pieces, 4);
    CHECK_EQ_STR(s, "hello there won\x1b[3D\x1b[K\nwonderful w\xc3\xa9rld");
    free(s);
    /* A break on a blank: the word moves down, the blank follows it. */
    const char *blank[] = {"abcdefghij abcd pq"};
    s = wrap(20, blank, 1);
    CHECK_EQ_STR(s, "abcdefghij abcd\x1b[4D\x1b[K\nabcd pq");
    free(s);
    /* Newlines reset the line. */
    const char *nl[] = {"aaaa aaaa aa\nbbbb bbbb bb"};
    s = wrap(20, nl, 1);
    CHECK_EQ_STR(s, "aaaa aaaa aa\nbbbb bbbb bb");
    free(s);
    /* Off: as it comes. */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cli_wrap_t w;
    cli_wrap_init(&w, false, 20);
    cli_wrap_write(&w, one[0], strlen(one[0]), f);
    fclose(f);
    CHECK_EQ_STR(buf, one[0]);
    free(buf);
}

int main(void)
{
    test_bar_line();
    test_plain();
    test_tty();
    test_wrap();
    return check_finish("cli_progress");
}
