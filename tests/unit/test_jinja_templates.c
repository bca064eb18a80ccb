/* test_jinja_templates: the 53 real chat templates of the shared testdata
 * (templates/NAME.jinja) rendered over their seven conversations each
 * (templates/NAME.cases.json): every `expected` byte for byte, every `error`
 * case failing with Jinja2's message; then cut and byte-flipped copies of
 * each template, which must parse and render or fail cleanly.
 *
 * Needs $CORRAL_TESTDATA/templates (or a folder as argv[1]); skips with 77
 * without it. A failing case prints the first differing byte. */
#include "lib/prelude.h"

#include "services/runner/jinja/jinja.h"
#include "tests/unit/check.h"

#include <dirent.h>

static int cases_g, passed_g, mutated_g;

/* strftime_now in the reference renderings: 2026-01-15 09:30 UTC. */
static time_t reference_now(void)
{
    struct tm tm = {.tm_year = 2026 - 1900, .tm_mon = 0, .tm_mday = 15, .tm_hour = 9,
                    .tm_min = 30};
    return timegm(&tm);
}

static char *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return s;
}

static void show_diff(const char *got, const char *want)
{
    size_t i = 0;
    while (got[i] && got[i] == want[i])
        i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "    first difference at byte %zu\n    got:  ...%.120s\n    want: ...%.120s\n",
            i, got + from, want + from);
}

static void run_file(const char *dir, const char *cases_name)
{
    char path[2048];
    snprintf(path, sizeof path, "%.1000s/%.1000s", dir, cases_name);
    json_error_t jerr;
    json_t *doc = json_load_file(path, 0, &jerr);
    CHECK_MSG(doc != NULL, "%s: %s", path, jerr.text);
    if (!doc)
        return;
    const char *tmpl = json_string_value(json_object_get(doc, "template"));
    snprintf(path, sizeof path, "%.1000s/%.1000s", dir, tmpl ? tmpl : "");
    size_t len;
    char *src = read_file(path, &len);
    CHECK_MSG(src != NULL, "%s unreadable", path);
    cr_err_t err = {0};
    jj_template_t *t = src ? jj_template_new(src, len, &err) : NULL;
    CHECK_MSG(t != NULL, "%s: %s", path, err.msg);
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(doc, "cases"), i, c) {
        cases_g++;
        if (!t)
            continue;
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *want = json_string_value(json_object_get(c, "expected"));
        const char *want_err = json_string_value(json_object_get(c, "error"));
        jj_render_opts_t opts = {0};
        jj_limits_default(&opts.limits);
        opts.now = reference_now();
        cr_buf_t out;
        cr_buf_init(&out, (size_t)64 << 20);
        cr_err_clear(&err);
        cr_status_t st = jj_render(t, json_object_get(c, "context"), &opts, &out, &err);
        bool ok;
        if (want) {
            ok = st == CR_OK && out.len == strlen(want) && memcmp(out.data, want, out.len) == 0;
            if (!ok) {
                fprintf(stderr, "FAIL %s [%s]: %s\n", cases_name, name,
                        st ? err.msg : "output differs");
                if (!st)
                    show_diff(out.data ? out.data : "", want);
            }
        } else {
            ok = st != CR_OK && !strcmp(err.msg, want_err);
            if (!ok)
                fprintf(stderr, "FAIL %s [%s]: want error \"%s\", got %s \"%s\"\n", cases_name,
                        name, want_err, st ? "error" : "output", st ? err.msg : "");
        }
        CHECK(ok);
        passed_g += ok;
        cr_buf_free(&out);
    }
    jj_template_destroy(&t);
    /* Hostile-input sweep: every prefix cut at a stride, and every byte
     * at a stride flipped, must parse and render to a result or a clean
     * error (the sanitizer build catches anything else). */
    json_t *ctx = json_object_get(json_array_get(json_object_get(doc, "cases"), 3), "context");
    for (size_t cut = 0; src && cut < len; cut += 61) {
        for (int flip = 0; flip < 2; flip++) {
            char *mut = malloc(len + 1);
            memcpy(mut, src, len + 1);
            size_t n = flip ? len : cut;
            if (flip)
                mut[cut] = (char)(mut[cut] ^ 0x5a);
            cr_err_t merr = {0};
            jj_template_t *mt = jj_template_new(mut, n, &merr);
            CHECK(mt != NULL || (merr.status && merr.msg[0]));
            if (mt) {
                jj_render_opts_t opts = {0};
                jj_limits_default(&opts.limits);
                cr_buf_t out;
                cr_buf_init(&out, (size_t)64 << 20);
                cr_status_t st = jj_render(mt, ctx, &opts, &out, &merr);
                CHECK(st == CR_OK || merr.msg[0]);
                cr_buf_free(&out);
                mutated_g++;
            }
            jj_template_destroy(&mt);
            free(mut);
        }
    }
    free(src);
    json_decref(doc);
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

static int is_cases(const struct dirent *d)
{
    size_t n = strlen(d->d_name);
    return n > 11 && !strcmp(d->d_name + n - 11, ".cases.json");
}

int main(int argc, char **argv)
{
    char dir[1024];
    if (argc > 1) {
        snprintf(dir, sizeof dir, "%s", argv[1]);
    } else {
        const char *root = getenv("CORRAL_TESTDATA");
        if (!root || !*root)
            return check_skip("test_jinja_templates", "CORRAL_TESTDATA not set");
        snprintf(dir, sizeof dir, "%s/templates", root);
    }
    struct dirent **names;
    int n = scandir(dir, &names, is_cases, by_name);
    if (n <= 0)
        return check_skip("test_jinja_templates", "no templates/*.cases.json in the testdata");
    for (int i = 0; i < n; i++) {
        run_file(dir, names[i]->d_name);
        free(names[i]);
    }
    free(names);
    printf("test_jinja_templates: %d of %d cases reproduced; %d mutated templates ran\n",
           passed_g, cases_g, mutated_g);
    return check_finish("test_jinja_templates");
}
