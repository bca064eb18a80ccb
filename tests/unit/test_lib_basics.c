/* test_lib_basics.c: status names, error records and the bounded buffer. */
#include "lib/prelude.h"
#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/cursor.h"
#include "lib/duration.h"
#include "lib/size.h"
#include "lib/env.h"
#include "lib/status.h"
#include "lib/tensor_type.h"
#include "lib/version.h"
#include "lib/spawn_runner.h"

#include <sys/wait.h>
#include <unistd.h>
#include "tests/unit/check.h"

static void test_status(void)
{
    CHECK_EQ_STR(cr_status_str(CR_OK), "ok");
    CHECK_EQ_STR(cr_status_str(CR_E_NOT_FOUND), "not found");
    CHECK_EQ_STR(cr_status_str((cr_status_t)999), "unknown status");
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_EQ_INT(cr_err_set(&err, CR_E_INVALID, "field '%s' bad", "x"), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "field 'x' bad");
    cr_err_wrap(&err, "generate");
    CHECK_EQ_STR(err.msg, "generate: field 'x' bad");
    CHECK_EQ_INT(cr_err_set(NULL, CR_E_IO, "ignored"), CR_E_IO);
}

static void test_buf(void)
{
    cr_buf_t b;
    cr_buf_init(&b, 10);
    CHECK_EQ_INT(cr_buf_puts(&b, "hello"), CR_OK);
    CHECK_EQ_INT(cr_buf_printf(&b, "%d", 1234), CR_OK);
    CHECK_EQ_STR(b.data, "hello1234");
    CHECK_EQ_INT(cr_buf_puts(&b, "xy"), CR_E_TOO_LARGE);
    CHECK_EQ_STR(b.data, "hello1234"); /* unchanged on error */
    CHECK_EQ_INT(cr_buf_putc(&b, '!'), CR_OK);
    CHECK_EQ_INT(b.len, 10);
    char *s = cr_buf_steal(&b);
    CHECK_EQ_STR(s, "hello1234!");
    free(s);
    CHECK(b.data == NULL && b.len == 0);
    cr_buf_free(&b);
}

static void test_cursor(void)
{
    uint8_t bytes[] = {1, 0, 0, 0, 2};
    cr_cursor_t c = cr_cursor_make(bytes, sizeof bytes);
    uint32_t v32 = 0;
    uint64_t v64 = 0;
    CHECK(cr_cursor_u32(&c, &v32) && v32 == 1);
    CHECK(!cr_cursor_u64(&c, &v64)); /* only 1 byte left: refused */
    CHECK_EQ_INT(cr_cursor_left(&c), 1);
    CHECK(cr_cursor_take(&c, 2) == NULL);
}

static void test_types(void)
{
    uint64_t n = 0;
    CHECK(cr_type_row_bytes(CR_TYPE_Q4_0, 64, &n) && n == 36);
    CHECK(cr_type_row_bytes(CR_TYPE_Q4_K, 512, &n) && n == 288);
    CHECK(!cr_type_row_bytes(CR_TYPE_Q8_0, 33, &n)); /* not whole blocks */
    CHECK(cr_type_info(5) == NULL);                   /* removed type id */
    CHECK_EQ_STR(cr_file_type_name(15), "Q4_K_M");
}

static void test_duration(void)
{
    int64_t ms = 0;
    CHECK(!cr_duration_parse("5m", &ms, NULL) && ms == 300000);
    CHECK(!cr_duration_parse("1h30m", &ms, NULL) && ms == 5400000);
    CHECK(!cr_duration_parse("1.5h", &ms, NULL) && ms == 5400000);
    CHECK(!cr_duration_parse("300", &ms, NULL) && ms == 300000);
    CHECK(!cr_duration_parse("0", &ms, NULL) && ms == 0);
    CHECK(!cr_duration_parse("-1", &ms, NULL) && ms == -1);
    CHECK(!cr_duration_parse("-5m", &ms, NULL) && ms == -1);
    CHECK(!cr_duration_parse("250ms", &ms, NULL) && ms == 250);
    cr_err_t err;
    CHECK_EQ_INT(cr_duration_parse("5 minutes", &ms, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "invalid duration \"5 minutes\"");
    CHECK_EQ_INT(cr_duration_parse("m", &ms, NULL), CR_E_INVALID);
    CHECK_EQ_INT(cr_duration_parse("", &ms, NULL), CR_E_INVALID);
    CHECK_EQ_INT(cr_duration_from_seconds(-3), -1);
    /* a deadline lies ms after a clock read before it and no later than
     * ms after one read after it (no wait: arithmetic on the clock) */
    const int64_t waits[] = {0, 999, 1500, 3600000};
    for (size_t i = 0; i < CR_ARRAY_LEN(waits); i++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_REALTIME, &t0);
        struct timespec d = cr_duration_deadline(waits[i]);
        clock_gettime(CLOCK_REALTIME, &t1);
        int64_t d_ns = (int64_t)d.tv_sec * 1000000000 + d.tv_nsec;
        int64_t lo = (int64_t)t0.tv_sec * 1000000000 + t0.tv_nsec + waits[i] * 1000000;
        int64_t hi = (int64_t)t1.tv_sec * 1000000000 + t1.tv_nsec + waits[i] * 1000000;
        CHECK(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
        CHECK_MSG(d_ns >= lo && d_ns <= hi, "deadline %lld ms from now is off",
                  (long long)waits[i]);
    }
}

static void test_size(void)
{
    static const struct {
        const char *text;
        int64_t bytes;
    } ok[] = {
        {"0", 0},
        {"1234", 1234},
        {"20GB", 20000000000LL},
        {"20gb", 20000000000LL},
        {" 512 MiB ", 512LL << 20},
        {"1.5TB", 1500000000000LL},
        {"2KiB", 2048},
        {"7B", 7},
        {"1.5", 1},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(ok); i++) {
        int64_t b = -1;
        cr_err_t err;
        cr_status_t st = cr_size_parse(ok[i].text, &b, &err);
        CHECK_MSG(st == CR_OK && b == ok[i].bytes, "'%s' -> %d %lld", ok[i].text,
                  (int)st, (long long)b);
    }
    static const char *const bad[] = {"",     "GB",    "-5GB", "1.2.3GB",
                                      "5 PB", "5GBx",  "0x10", "1e3",
                                      "inf",  "99999999999TB"};
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        int64_t b = 0;
        cr_err_t err;
        CHECK_MSG(cr_size_parse(bad[i], &b, &err) == CR_E_INVALID, "'%s'",
                  bad[i]);
    }
    cr_err_t err;
    int64_t b;
    CHECK_EQ_INT(cr_size_parse("5 PB", &b, &err), CR_E_INVALID);
    CHECK(strstr(err.msg, "unknown unit 'PB'") != NULL);
}

static void test_env(void)
{
    char v[64];
    setenv("OLLAMA_KEEP_ALIVE", " \"10m\" ", 1);
    CHECK(cr_env_get("KEEP_ALIVE", v, sizeof v));
    CHECK_EQ_STR(v, "10m");
    setenv("CORRAL_KEEP_ALIVE", "1h", 1);
    CHECK(cr_env_get("KEEP_ALIVE", v, sizeof v));
    CHECK_EQ_STR(v, "1h"); /* CORRAL_ wins */
    setenv("OLLAMA_MAX_QUEUE", "abc", 1);
    CHECK_EQ_INT(cr_env_int("MAX_QUEUE", 512), 512);
    setenv("OLLAMA_NOPRUNE", "maybe", 1);
    CHECK(cr_env_bool("NOPRUNE", false)); /* invalid counts as true */
    setenv("OLLAMA_NOPRUNE", "false", 1);
    CHECK(!cr_env_bool("NOPRUNE", true));
}

/* The version /api/version reports, and what CORRAL_COMPAT_VERSION may say. */
static void test_version(void)
{
    CHECK(cr_version_is_valid(CR_OLLAMA_COMPAT_VERSION));
    CHECK(cr_version_is_valid("0.6.4"));
    CHECK(cr_version_is_valid("1"));
    CHECK(cr_version_is_valid("0.14.0-rc1"));
    CHECK(!cr_version_is_valid(""));
    CHECK(!cr_version_is_valid("v0.6.4"));
    CHECK(!cr_version_is_valid("0.6."));
    CHECK(!cr_version_is_valid("0.6.4-"));
    CHECK(!cr_version_is_valid("0.6.4 x"));
    CHECK(!cr_version_is_valid("0.6.4\"}"));
    CHECK(!cr_version_is_valid("1.2.3-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
    char buf[CR_VERSION_MAX + 1];
    bool bad;
    unsetenv("CORRAL_COMPAT_VERSION");
    CHECK_EQ_STR(cr_compat_version(buf, sizeof buf, &bad), CR_OLLAMA_COMPAT_VERSION);
    CHECK(!bad);
    setenv("CORRAL_COMPAT_VERSION", "0.99.1", 1);
    CHECK_EQ_STR(cr_compat_version(buf, sizeof buf, &bad), "0.99.1");
    CHECK(!bad);
    setenv("CORRAL_COMPAT_VERSION", "latest", 1);
    CHECK_EQ_STR(cr_compat_version(buf, sizeof buf, &bad), CR_OLLAMA_COMPAT_VERSION);
    CHECK(bad);
    unsetenv("CORRAL_COMPAT_VERSION");
}

/* base64: round trips of every length 0..40, CR/LF skipped, and the byte
 * Go's decoder names for each kind of bad input. */
static void test_base64(void)
{
    uint8_t src[40], *dec = NULL;
    for (int i = 0; i < 40; i++)
        src[i] = (uint8_t)(i * 37 + 1);
    bool ok = true;
    for (size_t n = 0; n <= sizeof src; n++) {
        char *e = cr_base64_encode(src, n);
        size_t dn = 0;
        ok &= e && strlen(e) == (n + 2) / 3 * 4 &&
              cr_base64_decode(e, strlen(e), &dec, &dn, NULL) == CR_OK && dn == n &&
              !memcmp(dec, src, n);
        free(dec);
        dec = NULL;
        free(e);
    }
    CHECK(ok);
    size_t dn = 0, bad = 0;
    CHECK(cr_base64_decode("aGVs\r\nbG8=", 10, &dec, &dn, NULL) == CR_OK && dn == 5 &&
          !memcmp(dec, "hello", 5));
    free(dec);
    static const struct {
        const char *s;
        size_t bad;
    } cases[] = {{"@@@@", 0}, {"aGVsbG8", 4}, {"aG==bG8=", 4}, {"a===", 1}, {"aGk=aGk=", 4}};
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        CHECK(!cr_base64_valid(cases[i].s, strlen(cases[i].s), &bad));
        CHECK_MSG(bad == cases[i].bad, "%s: %zu", cases[i].s, bad);
    }
    cr_err_t err = {0};
    CHECK(cr_base64_decode("aGVsbG8", 7, &dec, &dn, &err) == CR_E_INVALID && !dec);
    CHECK_EQ_STR(err.msg, "illegal base64 data at input byte 4");
}

/* A runner that outlives its parent leads its own process group (issue
 * 20, 7: a Ctrl-C on `corral serve` killed runners under the drain); a
 * node's (die_with_parent) stays in the parent's. /bin/sh exits at once
 * on the runner's arguments; the exited child is inspected before it is
 * reaped (WNOWAIT), so its group is settled. */
static pid_t spawned_pgid(bool die_with_parent)
{
    pid_t pid = -1;
    cr_err_t err;
    CHECK_EQ_INT(cr_spawn_runner("/bin/sh", "ipc:///nonexistent", "t1", NULL,
                                 die_with_parent, &pid, &err),
                 CR_OK);
    siginfo_t info;
    CHECK_EQ_INT(waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT), 0);
    pid_t pg = getpgid(pid);
    waitpid(pid, NULL, 0);
    return pg == pid ? 0 : pg;
}

static void test_spawn_group(void)
{
    CHECK_EQ_INT(spawned_pgid(false), 0);       /* its own group */
    CHECK_EQ_INT(spawned_pgid(true), getpgrp()); /* the parent's */
}

int main(void)
{
    test_version();
    test_base64();
    test_spawn_group();
    test_duration();
    test_size();
    test_env();
    test_status();
    test_buf();
    test_cursor();
    test_types();
    return check_finish("lib_basics");
}
