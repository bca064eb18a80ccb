/* test_cli_format.c: how the CLI prints sizes, relative times, Go
 * durations, RFC 3339 parsing, the PROCESSOR column, tables and the
 * --verbose summary, compared with what `ollama` prints. */
#include "lib/prelude.h"
#include "cli/format.h"
#include "tests/unit/check.h"

#include <unistd.h>

static void test_bytes(void)
{
    static const struct {
        int64_t b;
        const char *s;
    } cases[] = {
        {0, "0 B"},           {999, "999 B"},         {1000, "1 KB"},
        {1500, "1.5 KB"},     {9999, "10.0 KB"},      {10000, "10 KB"},
        {123456, "123 KB"},   {1000000, "1 MB"},      {4700000000LL, "4.7 GB"},
        {2019000000, "2.0 GB"}, {12300000000LL, "12 GB"}, {1000000000000LL, "1 TB"},
        {160096, "160 KB"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        char out[32];
        cli_fmt_bytes(cases[i].b, out, sizeof out);
        CHECK_MSG(!strcmp(out, cases[i].s), "%lld -> %s, want %s", (long long)cases[i].b, out,
                  cases[i].s);
    }
}

static void test_human_time(void)
{
    static const struct {
        double secs;
        const char *s;
    } cases[] = {
        {0.5, "Less than a second"}, {1, "1 second"},       {59, "59 seconds"},
        {60, "About a minute"},      {119, "About a minute"}, {120, "2 minutes"},
        {3599, "59 minutes"},        {3600, "About an hour"}, {5400, "2 hours"},
        {47 * 3600.0, "47 hours"},   {48 * 3600.0, "2 days"}, {14 * 86400.0, "2 weeks"},
        {60 * 86400.0, "2 months"},  {800 * 86400.0, "2 years"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        char out[64];
        cli_fmt_human_duration(cases[i].secs, out, sizeof out);
        CHECK_MSG(!strcmp(out, cases[i].s), "%g -> %s, want %s", cases[i].secs, out,
                  cases[i].s);
    }
    char out[64];
    time_t now = 1700000000;
    cli_fmt_human_time(now - 14 * 86400, now, "Never", out, sizeof out);
    CHECK_EQ_STR(out, "2 weeks ago");
    cli_fmt_human_time(now + 4 * 60 + 30, now, "Never", out, sizeof out);
    CHECK_EQ_STR(out, "4 minutes from now");
    cli_fmt_human_time(0, now, "Never", out, sizeof out);
    CHECK_EQ_STR(out, "Never");
    cli_fmt_human_time(now + (time_t)290 * 365 * 86400, now, "Never", out, sizeof out);
    CHECK_EQ_STR(out, "Forever");
    cli_fmt_human_time(now, now, "Never", out, sizeof out);
    CHECK_EQ_STR(out, "Less than a second ago");
}

static void test_go_duration(void)
{
    static const struct {
        int64_t ns;
        const char *s;
    } cases[] = {
        {0, "0s"},
        {1, "1ns"},
        {999, "999ns"},
        {1000, "1\xC2\xB5s"},
        {1500, "1.5\xC2\xB5s"},
        {56789000, "56.789ms"},
        {250000000, "250ms"},
        {12345678, "12.345678ms"},
        {1000000000, "1s"},
        {1234567891, "1.234567891s"},
        {60000000000LL, "1m0s"},
        {123500000000LL, "2m3.5s"},
        {3600000000000LL, "1h0m0s"},
        {3723000000000LL, "1h2m3s"},
        {-1500000, "-1.5ms"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        char out[64];
        cli_fmt_go_duration(cases[i].ns, out, sizeof out);
        CHECK_MSG(!strcmp(out, cases[i].s), "%lld -> %s, want %s", (long long)cases[i].ns,
                  out, cases[i].s);
    }
}

static void test_rfc3339(void)
{
    time_t t = 0;
    CHECK(cli_parse_rfc3339("2024-05-01T10:00:00Z", &t));
    CHECK_EQ_INT(t, 1714557600);
    CHECK(cli_parse_rfc3339("2024-05-01T10:00:00.123456789Z", &t));
    CHECK_EQ_INT(t, 1714557600);
    CHECK(cli_parse_rfc3339("2024-05-01T12:30:00+02:30", &t));
    CHECK_EQ_INT(t, 1714557600);
    CHECK(cli_parse_rfc3339("2024-05-01T05:00:00.5-05:00", &t));
    CHECK_EQ_INT(t, 1714557600);
    const char *bad[] = {NULL, "", "2024-05-01", "2024-05-01T10:00:00", "2024-13-01T10:00:00Z",
                         "2024-05-01T10:00:00Zjunk", "2024-05-01T10:00:00.Z",
                         "20x4-05-01T10:00:00Z", "2024-05-01T10:00:00+0200"};
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++)
        CHECK_MSG(!cli_parse_rfc3339(bad[i], &t), "accepted %s", bad[i] ? bad[i] : "NULL");
}

static void test_processor(void)
{
    char out[48];
    cli_fmt_processor(1000, 0, out, sizeof out);
    CHECK_EQ_STR(out, "100% CPU");
    cli_fmt_processor(1000, 1000, out, sizeof out);
    CHECK_EQ_STR(out, "100% GPU");
    cli_fmt_processor(1000, 520, out, sizeof out);
    CHECK_EQ_STR(out, "48%/52% CPU/GPU");
    cli_fmt_processor(1000, 2000, out, sizeof out);
    CHECK_EQ_STR(out, "Unknown");
}

/* Runs fn with stdout-like output into a string. */
static char *capture(void (*fn)(FILE *, const void *), const void *arg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fn(f, arg);
    fclose(f);
    return buf;
}

static void print_table(FILE *f, const void *arg)
{
    cli_table_print(arg, f);
}

static void print_summary(FILE *f, const void *arg)
{
    cli_print_summary(arg, f);
}

static void test_table(void)
{
    cli_table_t *t = cli_table_new(4);
    const char *h[] = {"NAME", "ID", "SIZE", "MODIFIED"};
    const char *r1[] = {"llama3.2:latest", "a80c4f17acd5", "2.0 GB", "2 weeks ago"};
    const char *r2[] = {"caf\xC3\xA9:v1", NULL, "1 KB", ""};
    CHECK_EQ_INT(cli_table_add(t, h), CR_OK);
    CHECK_EQ_INT(cli_table_add(t, r1), CR_OK);
    CHECK_EQ_INT(cli_table_add(t, r2), CR_OK);
    char *s = capture(print_table, t);
    CHECK_EQ_STR(s, "NAME               ID              SIZE      MODIFIED\n"
                    "llama3.2:latest    a80c4f17acd5    2.0 GB    2 weeks ago\n"
                    "caf\xC3\xA9:v1                            1 KB\n");
    free(s);
    cli_table_destroy(&t);
    CHECK(t == NULL);
    cli_table_destroy(&t);
    CHECK(cli_table_new(0) == NULL);
    CHECK(cli_table_new(17) == NULL);
}

static void test_summary(void)
{
    json_t *j = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I}", "total_duration",
                          (json_int_t)1234567891, "load_duration", (json_int_t)56789000,
                          "prompt_eval_count", (json_int_t)7, "prompt_eval_duration",
                          (json_int_t)14000000, "eval_count", (json_int_t)5, "eval_duration",
                          (json_int_t)250000000);
    char *s = capture(print_summary, j);
    CHECK_EQ_STR(s, "total duration:       1.234567891s\n"
                    "load duration:        56.789ms\n"
                    "prompt eval count:    7 token(s)\n"
                    "prompt eval duration: 14ms\n"
                    "prompt eval rate:     500.00 tokens/s\n"
                    "eval count:           5 token(s)\n"
                    "eval duration:        250ms\n"
                    "eval rate:            20.00 tokens/s\n");
    free(s);
    json_decref(j);
    /* Zero fields are left out; odd types are ignored. */
    j = json_pack("{s:i, s:s}", "eval_count", 3, "total_duration", "soon");
    s = capture(print_summary, j);
    CHECK_EQ_STR(s, "eval count:           3 token(s)\n");
    free(s);
    json_decref(j);
}

int main(void)
{
    test_bytes();
    test_human_time();
    test_go_duration();
    test_rfc3339();
    test_processor();
    test_table();
    test_summary();
    return check_finish("test_cli_format");
}
