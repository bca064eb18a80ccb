/* format.c: sizes, times, tables and timing summaries (see format.h). */
#include "lib/prelude.h"
#include "cli/format.h"

#include <ctype.h>
#include <math.h>

void cli_fmt_bytes(int64_t b, char *out, size_t cap)
{
    static const struct {
        int64_t size;
        const char *unit;
    } units[] = {
        {1000LL * 1000 * 1000 * 1000, "TB"},
        {1000LL * 1000 * 1000, "GB"},
        {1000LL * 1000, "MB"},
        {1000LL, "KB"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(units); i++) {
        if (b >= units[i].size) {
            double v = (double)b / (double)units[i].size;
            if (v >= 10 || v == trunc(v))
                snprintf(out, cap, "%lld %s", (long long)v, units[i].unit);
            else
                snprintf(out, cap, "%.1f %s", v, units[i].unit);
            return;
        }
    }
    snprintf(out, cap, "%lld B", (long long)b);
}

void cli_fmt_human_duration(double d, char *out, size_t cap)
{
    long long seconds = (long long)d;
    if (seconds < 1) {
        snprintf(out, cap, "Less than a second");
        return;
    }
    if (seconds == 1) {
        snprintf(out, cap, "1 second");
        return;
    }
    if (seconds < 60) {
        snprintf(out, cap, "%lld seconds", seconds);
        return;
    }
    long long minutes = (long long)(d / 60);
    if (minutes == 1) {
        snprintf(out, cap, "About a minute");
        return;
    }
    if (minutes < 60) {
        snprintf(out, cap, "%lld minutes", minutes);
        return;
    }
    long long hours = (long long)llround(d / 3600);
    if (hours == 1)
        snprintf(out, cap, "About an hour");
    else if (hours < 48)
        snprintf(out, cap, "%lld hours", hours);
    else if (hours < 24 * 7 * 2)
        snprintf(out, cap, "%lld days", hours / 24);
    else if (hours < 24 * 30 * 2)
        snprintf(out, cap, "%lld weeks", hours / 24 / 7);
    else if (hours < 24 * 365 * 2)
        snprintf(out, cap, "%lld months", hours / 24 / 30);
    else
        snprintf(out, cap, "%lld years", (long long)(d / 3600 / 24 / 365));
}

void cli_fmt_human_time(time_t t, time_t now, const char *zero, char *out, size_t cap)
{
    if (t == 0) {
        snprintf(out, cap, "%s", zero);
        return;
    }
    double delta = difftime(now, t);
    if ((long long)(delta / 3600) / 24 / 365 < -20) {
        snprintf(out, cap, "Forever");
        return;
    }
    char d[64];
    if (delta < 0) {
        cli_fmt_human_duration(-delta, d, sizeof d);
        snprintf(out, cap, "%s from now", d);
    } else {
        cli_fmt_human_duration(delta, d, sizeof d);
        snprintf(out, cap, "%s ago", d);
    }
}

/* Writes v / 10^prec with its fraction digits, trailing zeros (and a bare
 * point) removed, into out. */
static void put_frac(char *out, size_t cap, uint64_t v, int prec, const char *unit)
{
    uint64_t p10 = 1;
    for (int i = 0; i < prec; i++)
        p10 *= 10;
    uint64_t ip = v / p10, frac = v % p10;
    char fs[16] = "";
    if (frac) {
        snprintf(fs, sizeof fs, ".%0*" PRIu64, prec, frac);
        size_t n = strlen(fs);
        while (n > 1 && fs[n - 1] == '0')
            fs[--n] = '\0';
    }
    snprintf(out, cap, "%" PRIu64 "%s%s", ip, fs, unit);
}

void cli_fmt_go_duration(int64_t ns, char *out, size_t cap)
{
    bool neg = ns < 0;
    uint64_t u = neg ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    char body[64];
    if (u == 0) {
        snprintf(out, cap, "0s");
        return;
    }
    if (u < 1000ULL) {
        snprintf(body, sizeof body, "%" PRIu64 "ns", u);
    } else if (u < 1000000ULL) {
        put_frac(body, sizeof body, u, 3, "\xC2\xB5s"); /* µs */
    } else if (u < 1000000000ULL) {
        put_frac(body, sizeof body, u, 6, "ms");
    } else {
        uint64_t secs_ns = u % 60000000000ULL; /* seconds part with fraction */
        uint64_t minutes = u / 60000000000ULL;
        char sec[32];
        put_frac(sec, sizeof sec, secs_ns, 9, "s");
        if (minutes == 0)
            snprintf(body, sizeof body, "%s", sec);
        else if (minutes < 60)
            snprintf(body, sizeof body, "%" PRIu64 "m%s", minutes, sec);
        else
            snprintf(body, sizeof body, "%" PRIu64 "h%" PRIu64 "m%s", minutes / 60,
                     minutes % 60, sec);
    }
    snprintf(out, cap, "%s%s", neg ? "-" : "", body);
}

static bool digits(const char *s, int n, int *v)
{
    int x = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return true;
}

bool cli_parse_rfc3339(const char *s, time_t *out)
{
    int y, mo, d, h, mi, se;
    if (!s || strlen(s) < 20)
        return false;
    if (!digits(s, 4, &y) || s[4] != '-' || !digits(s + 5, 2, &mo) || s[7] != '-' ||
        !digits(s + 8, 2, &d) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
        !digits(s + 11, 2, &h) || s[13] != ':' || !digits(s + 14, 2, &mi) || s[16] != ':' ||
        !digits(s + 17, 2, &se))
        return false;
    if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || se > 60)
        return false;
    const char *p = s + 19;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            return false;
        while (isdigit((unsigned char)*p))
            p++;
    }
    long offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om;
        if (!digits(p + 1, 2, &oh) || p[3] != ':' || !digits(p + 4, 2, &om))
            return false;
        offset = (oh * 3600L + om * 60L) * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return false;
    }
    if (*p)
        return false;
    struct tm tm = {0};
    tm.tm_year = y - 1900;
    tm.tm_mon = mo - 1;
    tm.tm_mday = d;
    tm.tm_hour = h;
    tm.tm_min = mi;
    tm.tm_sec = se;
    time_t t = timegm(&tm);
    if (t == (time_t)-1 && !(y == 1969 && mo == 12 && d == 31))
        return false;
    *out = t - offset;
    return true;
}

void cli_fmt_processor(int64_t size, int64_t size_vram, char *out, size_t cap)
{
    if (size_vram == 0) {
        snprintf(out, cap, "100%% CPU");
    } else if (size_vram == size) {
        snprintf(out, cap, "100%% GPU");
    } else if (size_vram > size || size == 0) {
        snprintf(out, cap, "Unknown");
    } else {
        double cpu = round((double)(size - size_vram) / (double)size * 100.0);
        snprintf(out, cap, "%d%%/%d%% CPU/GPU", (int)cpu, 100 - (int)cpu);
    }
}

/* ---- tables ---- */

#define TABLE_MAX_COLS 16

struct cli_table {
    size_t ncols;
    char **cells; /* rows * ncols, owned */
    size_t rows;
    size_t cap_rows;
};

cli_table_t *cli_table_new(size_t ncols)
{
    if (ncols == 0 || ncols > TABLE_MAX_COLS)
        return NULL;
    cli_table_t *t = calloc(1, sizeof *t);
    if (t)
        t->ncols = ncols;
    return t;
}

cr_status_t cli_table_add(cli_table_t *t, const char *const *cells)
{
    if (t->rows == t->cap_rows) {
        size_t cap = t->cap_rows ? t->cap_rows * 2 : 16;
        char **p = realloc(t->cells, cap * t->ncols * sizeof *p);
        if (!p)
            return CR_E_NOMEM;
        t->cells = p;
        t->cap_rows = cap;
    }
    char **row = t->cells + t->rows * t->ncols;
    for (size_t c = 0; c < t->ncols; c++) {
        row[c] = strdup(cells[c] ? cells[c] : "");
        if (!row[c]) {
            while (c--)
                free(row[c]);
            return CR_E_NOMEM;
        }
    }
    t->rows++;
    return CR_OK;
}

/* Characters in a UTF-8 string (continuation bytes not counted). */
static size_t text_width(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            n++;
    return n;
}

void cli_table_print(const cli_table_t *t, FILE *f)
{
    size_t width[TABLE_MAX_COLS] = {0};
    for (size_t r = 0; r < t->rows; r++)
        for (size_t c = 0; c < t->ncols; c++)
            width[c] = CR_MAX(width[c], text_width(t->cells[r * t->ncols + c]));
    for (size_t r = 0; r < t->rows; r++) {
        char *const *row = t->cells + r * t->ncols;
        /* The last non-empty cell ends the line: no trailing blanks. */
        size_t last = t->ncols;
        while (last > 1 && !row[last - 1][0])
            last--;
        for (size_t c = 0; c < last; c++) {
            fputs(row[c], f);
            if (c + 1 < last)
                fprintf(f, "%*s", (int)(width[c] - text_width(row[c]) + 4), "");
        }
        fputc('\n', f);
    }
}

void cli_table_destroy(cli_table_t **t_p)
{
    if (!t_p || !*t_p)
        return;
    cli_table_t *t = *t_p;
    for (size_t i = 0; i < t->rows * t->ncols; i++)
        free(t->cells[i]);
    free(t->cells);
    free(t);
    *t_p = NULL;
}

/* ---- --verbose ---- */

static int64_t jint(const json_t *o, const char *k)
{
    const json_t *v = json_object_get(o, k);
    if (json_is_integer(v))
        return (int64_t)json_integer_value(v);
    if (json_is_real(v))
        return (int64_t)json_real_value(v);
    return 0;
}

void cli_print_summary(const json_t *final, FILE *f)
{
    char d[64];
    int64_t total = jint(final, "total_duration"), load = jint(final, "load_duration");
    int64_t pcount = jint(final, "prompt_eval_count");
    int64_t pdur = jint(final, "prompt_eval_duration");
    int64_t ecount = jint(final, "eval_count"), edur = jint(final, "eval_duration");
    if (total > 0) {
        cli_fmt_go_duration(total, d, sizeof d);
        fprintf(f, "total duration:       %s\n", d);
    }
    if (load > 0) {
        cli_fmt_go_duration(load, d, sizeof d);
        fprintf(f, "load duration:        %s\n", d);
    }
    if (pcount > 0)
        fprintf(f, "prompt eval count:    %" PRId64 " token(s)\n", pcount);
    if (pdur > 0) {
        cli_fmt_go_duration(pdur, d, sizeof d);
        fprintf(f, "prompt eval duration: %s\n", d);
        fprintf(f, "prompt eval rate:     %.2f tokens/s\n", (double)pcount / ((double)pdur / 1e9));
    }
    if (ecount > 0)
        fprintf(f, "eval count:           %" PRId64 " token(s)\n", ecount);
    if (edur > 0) {
        cli_fmt_go_duration(edur, d, sizeof d);
        fprintf(f, "eval duration:        %s\n", d);
        fprintf(f, "eval rate:            %.2f tokens/s\n", (double)ecount / ((double)edur / 1e9));
    }
}
