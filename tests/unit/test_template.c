/* test_template.c: the Go text/template subset
 * (services/runner/template/template.h):
 * each construct, Go's printing and JSON rules, Ollama's touch-ups (the
 * appended {{ .Response }}, Vars, the legacy cut, tag inference), and
 * hostile templates (parse errors, execution errors, bombs), each named. */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "services/runner/template/template.h"
#include "tests/unit/check.h"

#include <time.h>

#define OUT_MAX (1u << 20)

/* Renders tmpl over JSON data (ints kept, key order kept unless sorted);
 * returns the status; *out gets the output (caller frees) on success. */
static cr_status_t render_opts(const char *tmpl, const char *json, unsigned json_opts,
                               const rn_tmpl_opts_t *opts, size_t max_out, char **out,
                               cr_err_t *err)
{
    *out = NULL;
    rn_val_t *data = rn_val_nil();
    if (json) {
        json_error_t je;
        json_t *j = json_loads(json, JSON_DECODE_ANY, &je);
        if (!j) {
            fprintf(stderr, "bad test JSON: %s: %s\n", json, je.text);
            return CR_E_INTERNAL;
        }
        cr_status_t st = rn_val_from_json(j, json_opts, &data, err);
        json_decref(j);
        if (st)
            return st;
    }
    rn_tmpl_t *t = NULL;
    cr_status_t st = rn_tmpl_parse_plain(tmpl, strlen(tmpl), &t, err);
    if (!st) {
        cr_buf_t b;
        cr_buf_init(&b, max_out);
        st = rn_tmpl_exec(t, data, opts, &b, err);
        if (!st)
            *out = cr_buf_steal(&b);
        cr_buf_free(&b);
    }
    rn_tmpl_destroy(&t);
    rn_val_destroy(&data);
    return st;
}

static void check_render_at(int line, const char *tmpl, const char *json, const char *want)
{
    cr_err_t err;
    char *out = NULL;
    cr_status_t st = render_opts(tmpl, json, RN_JSON_KEEP_INTS | RN_JSON_ORDERED, NULL, OUT_MAX,
                                 &out, &err);
    if (st == CR_OK && out && !strcmp(out, want)) {
        check_passed_g++;
    } else {
        check_failed_g++;
        fprintf(stderr, "FAIL %s:%d: template %s\n  got:  \"%s\"\n  want: \"%s\"\n  err:  %s\n",
                __FILE__, line, tmpl, out ? out : "(null)", want, st ? err.msg : "");
    }
    free(out);
}

/* Expects an error with the status and a message containing substr. */
static void check_error_at(int line, const char *tmpl, const char *json, cr_status_t want_st,
                           const char *substr)
{
    cr_err_t err;
    char *out = NULL;
    cr_status_t st = render_opts(tmpl, json, RN_JSON_KEEP_INTS | RN_JSON_ORDERED, NULL, OUT_MAX,
                                 &out, &err);
    if (st == want_st && strstr(err.msg, substr)) {
        check_passed_g++;
    } else {
        check_failed_g++;
        fprintf(stderr, "FAIL %s:%d: template %s\n  status %d (%s), want %d\n  msg \"%s\"\n"
                        "  want substring \"%s\"\n  out \"%s\"\n",
                __FILE__, line, tmpl, st, cr_status_str(st), want_st, st ? err.msg : "", substr,
                out ? out : "");
    }
    free(out);
}

#define CHECK_RENDER(tmpl, json, want) check_render_at(__LINE__, tmpl, json, want)
#define CHECK_ERROR(tmpl, json, st, substr) check_error_at(__LINE__, tmpl, json, st, substr)

static const char *DATA =
    "{\"s\":\"str\",\"n\":3,\"f\":1.5,\"t\":true,\"no\":false,\"z\":0,\"e\":\"\","
    "\"l\":[\"a\",\"b\"],\"nums\":[1,2,3,4,5],\"empty\":[],\"m\":{\"b\":1,\"a\":2},"
    "\"a\":{\"b\":\"c\"},\"objs\":[{\"name\":\"x\"},{\"name\":\"y\"}],"
    "\"nested\":[[1,2],[3,4]],\"null\":null}";

static void test_text_and_trim(void)
{
    CHECK_RENDER("plain text", NULL, "plain text");
    CHECK_RENDER("", NULL, "");
    CHECK_RENDER("a  {{- 1 -}}  b", NULL, "a1b");
    CHECK_RENDER("a \n\t{{- 1 }} b", NULL, "a1 b");
    CHECK_RENDER("a {{ 1 -}} \n b", NULL, "a 1b");
    CHECK_RENDER("{{ 3 }} {{- 4 }}", NULL, "34");
    CHECK_RENDER("{{-3}}", NULL, "-3"); /* no space after '-': a number */
    CHECK_RENDER("{{ 3 -}}\n\n{{- 4 }}", NULL, "34");
    CHECK_RENDER("x\n{{- \"y\" }}\n", NULL, "xy\n");
    CHECK_RENDER("a {{/* comment */}} b", NULL, "a  b");
    CHECK_RENDER("a {{- /* comment\nspanning */ -}} b", NULL, "ab");
    CHECK_RENDER("{{/* c */}}", NULL, "");
    CHECK_RENDER("{{ \"{{ not an action }}\" }}", NULL, "{{ not an action }}");
    CHECK_RENDER("a}}b", NULL, "a}}b");
    CHECK_RENDER("{{\n.s\n}}", DATA, "str"); /* newlines inside an action */
}

static void test_fields(void)
{
    CHECK_RENDER("{{ .s }}", DATA, "str");
    CHECK_RENDER("{{.a.b}}", DATA, "c");
    CHECK_RENDER("{{ .missing }}", DATA, "<no value>");
    CHECK_RENDER("{{ .a.missing }}", DATA, "<no value>");
    CHECK_RENDER("{{ .null }}", DATA, "<no value>");
    CHECK_RENDER("{{ .l }}", DATA, "[a b]");
    CHECK_RENDER("{{ .m }}", DATA, "map[b:1 a:2]"); /* ordered map keeps order */
    CHECK_RENDER("{{ .f }} {{ .n }} {{ .t }}", DATA, "1.5 3 true");
    CHECK_RENDER("{{ . }}", "\"top\"", "top");
    CHECK_RENDER("{{ with .a }}{{ .b }}{{ end }}", DATA, "c");
    CHECK_RENDER("{{ $.a.b }}", DATA, "c");
    CHECK_RENDER("{{ (index .objs 1).name }}", DATA, "y");
    CHECK_RENDER("{{ range .objs }}{{ .name }}{{ end }}", DATA, "xy");
    CHECK_ERROR("{{ .missing.deeper }}", DATA, CR_E_INVALID,
                "template: :1:11: executing \"\" at <.missing.deeper>: nil pointer evaluating "
                "interface {}.deeper");
    CHECK_ERROR("{{ .s.x }}", DATA, CR_E_INVALID,
                "can't evaluate field x in type interface {}");
    CHECK_ERROR("{{ with .s }}{{ .x }}{{ end }}", DATA, CR_E_INVALID,
                "executing \"\" at <.x>: can't evaluate field x in type string");
    CHECK_ERROR("{{ .l.x }}", DATA, CR_E_INVALID, "can't evaluate field x");
    CHECK_ERROR("{{ .s 1 }}", DATA, CR_E_INVALID, "s is not a method but has arguments");
    CHECK_ERROR("{{ 1 | .s }}", DATA, CR_E_INVALID, "s is not a method but has arguments");
}

static void test_if_else(void)
{
    CHECK_RENDER("{{ if .t }}T{{ end }}", DATA, "T");
    CHECK_RENDER("{{ if .no }}T{{ else }}F{{ end }}", DATA, "F");
    CHECK_RENDER("{{ if .no }}1{{ else if .z }}2{{ else if .s }}3{{ else }}4{{ end }}", DATA,
                 "3");
    CHECK_RENDER("{{ if .no }}1{{ else if .z }}2{{ else }}4{{ end }}", DATA, "4");
    /* Go's truth: 0, "", empty list, nil, missing are false; maps by len. */
    CHECK_RENDER("{{ if .z }}y{{ end }}{{ if .e }}y{{ end }}{{ if .empty }}y{{ end }}"
                 "{{ if .null }}y{{ end }}{{ if .missing }}y{{ end }}{{ if .m }}m{{ end }}"
                 "{{ if .f }}f{{ end }}{{ if .nums }}l{{ end }}",
                 DATA, "mfl");
    CHECK_RENDER("{{ with .missing }}x{{ else }}none{{ end }}", DATA, "none");
    CHECK_RENDER("{{ with .missing }}x{{ else with .s }}{{ . }}{{ end }}", DATA, "str");
    CHECK_RENDER("{{ if $x := .s }}{{ $x }}{{ end }}", DATA, "str");
}

static void test_range(void)
{
    CHECK_RENDER("{{ range $i, $e := .l }}{{ $i }}={{ $e }};{{ end }}", DATA, "0=a;1=b;");
    CHECK_RENDER("{{ range $e := .l }}{{ $e }}{{ end }}", DATA, "ab");
    CHECK_RENDER("{{ range .l }}{{ . }}{{ else }}empty{{ end }}", DATA, "ab");
    CHECK_RENDER("{{ range .empty }}{{ . }}{{ else }}empty{{ end }}", DATA, "empty");
    CHECK_RENDER("{{ range .missing }}{{ . }}{{ else }}none{{ end }}", DATA, "none");
    CHECK_RENDER("{{ range $k, $v := .m }}{{ $k }}{{ $v }}{{ end }}", DATA, "b1a2");
    CHECK_RENDER("{{ range .nums }}{{ if eq . 2 }}{{ continue }}{{ end }}"
                 "{{ if eq . 4 }}{{ break }}{{ end }}{{ . }}{{ end }}",
                 DATA, "13");
    CHECK_RENDER("{{ range 3 }}{{ . }}{{ end }}", NULL, "012");
    CHECK_RENDER("{{ range $i := 2 }}{{ $i }}{{ end }}", NULL, "01");
    CHECK_RENDER("{{ range 0 }}x{{ else }}zero{{ end }}", NULL, "zero");
    CHECK_RENDER("{{ range .nested }}{{ range . }}{{ . }}{{ end }}|{{ end }}", DATA, "12|34|");
    CHECK_RENDER("{{ range $i, $_ := .l }}{{ $.s }}{{ $i }}{{ end }}", DATA, "str0str1");
    /* Assigning range: with =, existing variables take index and element. */
    CHECK_RENDER("{{ $i := 9 }}{{ $e := 9 }}{{ range $i, $e = .l }}{{ end }}{{ $i }}{{ $e }}",
                 DATA, "1b");
    CHECK_ERROR("{{ range .s }}{{ end }}", DATA, CR_E_INVALID, "range can't iterate over str");
    CHECK_ERROR("{{ range $i, $e := 3 }}{{ end }}", NULL, CR_E_INVALID,
                "can't use 3 to iterate over more than one variable");
}

static void test_variables(void)
{
    CHECK_RENDER("{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ $y := 3 }}{{ end }}{{ $x }}", NULL,
                 "2");
    CHECK_RENDER("{{ $x := \"outer\" }}{{ range .l }}{{ $x := . }}{{ $x }}{{ end }}{{ $x }}",
                 DATA, "abouter");
    CHECK_RENDER("{{ $x := .l }}{{ len $x }}", DATA, "2");
    CHECK_RENDER("{{ $ }}", "7", "7");
    CHECK_RENDER("{{ $x := 1 }}{{ $x }}{{ $x := 2 }}{{ $x }}", NULL, "12");
    CHECK_ERROR("{{ if true }}{{ $y := 3 }}{{ end }}{{ $y }}", NULL, CR_E_INVALID,
                "template: :1: undefined variable \"$y\"");
    CHECK_ERROR("{{ $nope }}", NULL, CR_E_INVALID, "undefined variable \"$nope\"");
    CHECK_ERROR("{{ $z = 1 }}", NULL, CR_E_INVALID, "undefined variable: $z");
}

static void test_comparisons(void)
{
    CHECK_RENDER("{{ eq 1 2 3 1 }} {{ eq 1 2 3 }} {{ eq \"a\" \"a\" }}", NULL,
                 "true false true");
    CHECK_RENDER("{{ ne 1 2 }} {{ lt 1 2 }} {{ le 2 2 }} {{ gt \"b\" \"a\" }} {{ ge 1.5 2.5 }}",
                 NULL, "true true true true false");
    CHECK_RENDER("{{ eq .missing \"a\" }} {{ eq .s \"str\" }} {{ eq .t true }}", DATA,
                 "false true true");
    CHECK_RENDER("{{ if eq .n 1 2 3 }}yes{{ end }}", DATA, "yes");
    CHECK_ERROR("{{ eq 1 \"a\" }}", NULL, CR_E_INVALID,
                "at <eq 1 \"a\">: error calling eq: incompatible types for comparison");
    CHECK_ERROR("{{ lt 1 1.5 }}", NULL, CR_E_INVALID, "incompatible types for comparison");
    CHECK_ERROR("{{ lt .l .l }}", DATA, CR_E_INVALID, "invalid type for comparison");
    CHECK_ERROR("{{ lt true false }}", NULL, CR_E_INVALID, "invalid type for comparison");
    CHECK_ERROR("{{ eq 1 }}", NULL, CR_E_INVALID, "missing argument for comparison");
    CHECK_ERROR("{{ eq .l .l }}", DATA, CR_E_INVALID, "non-comparable");
    CHECK_ERROR("{{ ne 1 }}", NULL, CR_E_INVALID, "wrong number of args for ne: want 2 got 1");
}

static void test_and_or_not(void)
{
    CHECK_RENDER("{{ and 1 0 2 }}|{{ and 1 2 }}|{{ or 0 \"\" \"x\" }}|{{ or 0 \"\" }}|", NULL,
                 "0|2|x||");
    /* Short-circuit: the failing index is never evaluated. */
    CHECK_RENDER("{{ or 1 (index .l 99) }} {{ and 0 (index .l 99) }}", DATA, "1 0");
    CHECK_RENDER("{{ not 0 }} {{ not .s }} {{ not .missing }}", DATA, "true false true");
    CHECK_RENDER("{{ if and .t .s }}both{{ end }}{{ if or .no .z }}x{{ else }}neither{{ end }}",
                 DATA, "bothneither");
    CHECK_RENDER("{{ 0 | or 5 }} {{ 5 | and 6 }}", NULL, "5 5");
    CHECK_ERROR("{{ and 1 (index .l 99) }}", DATA, CR_E_INVALID, "index out of range: 99");
    CHECK_ERROR("{{ and }}", NULL, CR_E_INVALID, "wrong number of args for and: want at least 1");
    CHECK_ERROR("{{ not 1 2 }}", NULL, CR_E_INVALID, "wrong number of args for not: want 1 got 2");
}

static void test_len_index_slice(void)
{
    CHECK_RENDER("{{ len .l }} {{ len \"h\xc3\xa9llo\" }} {{ len .m }} {{ len .empty }}", DATA,
                 "2 6 2 0");
    CHECK_RENDER("{{ index .l 1 }} {{ index .m \"a\" }} {{ index .nested 1 0 }}", DATA, "b 2 3");
    CHECK_RENDER("{{ index .m \"zz\" }}", DATA, "<no value>");
    CHECK_RENDER("{{ index \"abc\" 1 }}", NULL, "98");
    CHECK_RENDER("{{ index .l }}", DATA, "[a b]");
    CHECK_RENDER("{{ slice .l 1 }} {{ slice .nums 1 3 }} {{ slice .nums }}", DATA,
                 "[b] [2 3] [1 2 3 4 5]");
    CHECK_RENDER("{{ slice \"hello\" 1 3 }} {{ slice \"hello\" 2 }}", NULL, "el llo");
    CHECK_RENDER("{{ len (slice .nums 3) }} {{ slice .nums 2 2 }}", DATA, "2 []");
    CHECK_RENDER("{{ slice .nums 1 2 3 }}", DATA, "[2]");
    CHECK_ERROR("{{ len 3 }}", NULL, CR_E_INVALID, "error calling len: len of type int");
    CHECK_ERROR("{{ len .missing }}", DATA, CR_E_INVALID, "len of nil pointer");
    CHECK_ERROR("{{ index .l 5 }}", DATA, CR_E_INVALID,
                "at <index .l 5>: error calling index: index out of range: 5");
    CHECK_ERROR("{{ index .l 2 }}", DATA, CR_E_INVALID, "error calling index");
    CHECK_ERROR("{{ index .l -1 }}", DATA, CR_E_INVALID, "index out of range: -1");
    CHECK_ERROR("{{ index .l \"x\" }}", DATA, CR_E_INVALID,
                "cannot index slice/array with type string");
    CHECK_ERROR("{{ index .m 1 }}", DATA, CR_E_INVALID, "value has type int; should be string");
    CHECK_ERROR("{{ index .missing 1 }}", DATA, CR_E_INVALID, "index of untyped nil");
    CHECK_ERROR("{{ index .n 1 }}", DATA, CR_E_INVALID, "can't index item of type int");
    CHECK_ERROR("{{ slice .nums 2 1 }}", DATA, CR_E_INVALID, "invalid slice index: 2 > 1");
    CHECK_ERROR("{{ slice .nums 9 }}", DATA, CR_E_INVALID, "index out of range: 9");
    CHECK_ERROR("{{ slice \"abc\" 0 1 2 }}", NULL, CR_E_INVALID, "cannot 3-index slice a string");
    CHECK_ERROR("{{ slice .m 1 }}", DATA, CR_E_INVALID, "can't slice item of type");
    CHECK_ERROR("{{ slice .missing }}", DATA, CR_E_INVALID, "slice of untyped nil");
}

static void test_print_printf(void)
{
    CHECK_RENDER("{{ printf \"%d-%s-%v-%5.2f|%-4s|%04d|%q|%x|%X|%o|%b\" 42 \"hi\" true 3.14159 "
                 "\"ab\" 7 \"q\\\"\" 255 255 8 5 }}",
                 NULL, "42-hi-true- 3.14|ab  |0007|\"q\\\"\"|ff|FF|10|101");
    CHECK_RENDER("{{ printf \"%d\" \"x\" }}", NULL, "%!d(string=x)");
    CHECK_RENDER("{{ printf \"%s %s\" \"a\" }}", NULL, "a %!s(MISSING)");
    CHECK_RENDER("{{ printf \"%s\" \"a\" \"b\" 1 }}", NULL, "a%!(EXTRA string=b, int=1)");
    CHECK_RENDER("{{ printf \"%v|%s\" .l .l }}", DATA, "[a b]|[a b]");
    CHECK_RENDER("{{ printf \"%v %v %v %v\" 1e6 123456.0 0.00001 1e21 }}", NULL,
                 "1e+06 123456 1e-05 1e+21");
    CHECK_RENDER("{{ printf \"%.3e|%g|%.2g|%+d|% d|%+.1f\" 1234.5678 0.5 1234.5 5 5 2.25 }}",
                 NULL, "1.235e+03|0.5|1.2e+03|+5| 5|+2.2");
    CHECK_RENDER("{{ printf \"%5s|%-5d|%05.1f|%x|% x|%#x\" \"ab\" 3 -2.5 \"hi\" \"hi\" 255 }}",
                 NULL, "   ab|3    |-02.5|6869|68 69|0xff");
    CHECK_RENDER("{{ printf \"%c%c|%q|%U|%t|%%|%.2s\" 72 233 'x' 0x1F600 true \"h\xc3\xa9llo\" }}",
                 NULL, "H\xc3\xa9|'x'|U+1F600|true|%|h\xc3\xa9");
    CHECK_RENDER("{{ printf \"%v %d\" .missing .missing }}", DATA, "<nil> %!d(<nil>)");
    CHECK_RENDER("{{ printf \"%*d|%-*d|\" 4 7 3 8 }}", NULL, "   7|8  |");
    CHECK_RENDER("{{ printf \"%d\" .nums }}", DATA, "[1 2 3 4 5]");
    CHECK_RENDER("{{ printf \"%#q\" \"raw\" }}", NULL, "`raw`");
    CHECK_RENDER("{{ printf \"%q\" \"tab\\there\\x01\" }}", NULL, "\"tab\\there\\x01\"");
    CHECK_RENDER("{{ printf \"%T %T %T\" 1 \"s\" .l }}", DATA, "int string []interface {}");
    CHECK_RENDER("{{ printf \"100%\" }}", NULL, "100%!(NOVERB)");
    CHECK_RENDER("{{ print 1 2 \"a\" \"b\" 3 .missing }}", DATA, "1 2ab3 <nil>");
    CHECK_RENDER("{{ println 1 \"a\" }}", NULL, "1 a\n");
    CHECK_RENDER("{{ print }}", NULL, "");
    CHECK_RENDER("{{ \"x\" | printf \"%s!\" }}", NULL, "x!");
    CHECK_ERROR("{{ printf 1 }}", NULL, CR_E_INVALID, "expected string; got int");
    CHECK_ERROR("{{ printf }}", NULL, CR_E_INVALID, "want at least 1 got 0");
}

static void test_escapers(void)
{
    CHECK_RENDER("{{ html \"<a href='x'>&\\\"\" }}", NULL, "&lt;a href=&#39;x&#39;&gt;&amp;&#34;");
    CHECK_RENDER("{{ js \"a'b\\\"<=>&\\\\\\n\" }}", NULL,
                 "a\\'b\\\"\\u003C\\u003D\\u003E\\u0026\\\\\\u000A");
    CHECK_RENDER("{{ urlquery \"a b&c/\xc3\xa9~\" }}", NULL, "a+b%26c%2F%C3%A9~");
    CHECK_RENDER("{{ html 1 \"<\" }}", NULL, "1&lt;");
    CHECK_RENDER("{{ .s | html }}", DATA, "str");
}

static void test_json_func(void)
{
    /* Go map semantics (sorted keys, floats) and HTML-safe escaping. */
    cr_err_t err;
    char *out = NULL;
    cr_status_t st = render_opts("{{ json .x }}",
                                 "{\"x\":{\"b\":[1,2.5,\"s\",null,true],\"a\":\"<&>\\u2028\"}}", 0,
                                 NULL, OUT_MAX, &out, &err);
    CHECK_EQ_INT(st, CR_OK);
    CHECK_EQ_STR(out, "{\"a\":\"\\u003c\\u0026\\u003e\\u2028\",\"b\":[1,2.5,\"s\",null,true]}");
    free(out);
    /* Tool arguments print as JSON for the string verbs only; a NUL verb
     * (a "%\x00" literal) is a bad verb like any other, not one of them. */
    st = render_opts("{{ printf \"%v|%s|%d|%\\x00\" . . . . }}", "{\"a\":1}",
                     RN_JSON_KEEP_INTS | RN_JSON_TOP_PRINTS_JSON, NULL, OUT_MAX, &out, &err);
    CHECK_EQ_INT(st, CR_OK);
    /* Go: map[%!\x00(string=a):%!\x00(int=1)]; the NULs split the output. */
    static const char *const want_parts[] = {
        "{\"a\":1}|{\"a\":1}|map[%!d(string=a):1]|map[%!", "(string=a):%!", "(int=1)]"};
    const char *at = out;
    for (size_t i = 0; at && i < sizeof want_parts / sizeof *want_parts; i++) {
        CHECK_EQ_STR(at, want_parts[i]);
        at += strlen(at) + 1;
    }
    free(out);
    /* Ordered maps keep their key order. */
    CHECK_RENDER("{{ json .m }}", DATA, "{\"b\":1,\"a\":2}");
    CHECK_RENDER("{{ json .nested }} {{ json .s }} {{ json .missing }} {{ json 1.0 }}", DATA,
                 "[[1,2],[3,4]] \"str\" null 1");
    CHECK_RENDER("{{ json \"\\x01\\b\\f\\n\\r\\t\\\\\" }}", NULL,
                 "\"\\u0001\\b\\f\\n\\r\\t\\\\\"");
    CHECK_RENDER("{{ json \"\xff\" }}", NULL, "\"\\ufffd\"");
    CHECK_ERROR("{{ json 1 2 }}", NULL, CR_E_INVALID, "wrong number of args for json: want 1 got 2");
}

static void test_pipelines_literals(void)
{
    CHECK_RENDER("{{ .l | len }} {{ 3 | eq 3 }} {{ (len .l) }}", DATA, "2 true 2");
    CHECK_RENDER("{{ .a | printf \"%v\" | len }}", DATA, "8"); /* "map[b:c]" */
    CHECK_RENDER("{{ \"a\\tb\\u00e9\\x41\\101\\\\\" }}", NULL, "a\tb\xc3\xa9" "AA\\");
    CHECK_RENDER("{{ `x\\ny` }}", NULL, "x\\ny");
    CHECK_RENDER("{{ 'a' }} {{ '\\n' }} {{ 0x1F }} {{ 1_000 }} {{ 1.5e3 }} {{ -2 }} {{ 0o17 }} "
                 "{{ 0b101 }} {{ 017 }} {{ .5 }}",
                 NULL, "97 10 31 1000 1500 -2 15 5 15 0.5");
    CHECK_RENDER("{{ true }} {{ false }}", NULL, "true false");
    CHECK_ERROR("{{ nil }}", NULL, CR_E_INVALID, "nil is not a command");
    CHECK_ERROR("{{ \"a\" \"b\" }}", NULL, CR_E_INVALID, "can't give argument to non-function \"a\"");
    CHECK_ERROR("{{ 1 | 2 }}", NULL, CR_E_INVALID, "non executable command in pipeline stage 2");
    CHECK_ERROR("{{ 1.2.3 }}", NULL, CR_E_INVALID, "template: :1:");
    CHECK_ERROR("{{ 99999999999999999999 }}", NULL, CR_E_INVALID, "integer overflow");
    CHECK_ERROR("{{ 08 }}", NULL, CR_E_INVALID, "integer overflow: \"08\"");
    CHECK_ERROR("{{ 1__0 }}", NULL, CR_E_INVALID, "illegal number syntax");
    CHECK_ERROR("{{ '' }}", NULL, CR_E_INVALID, "invalid syntax");
    CHECK_ERROR("{{ \"bad \\q escape\" }}", NULL, CR_E_INVALID, "invalid syntax");
    CHECK_ERROR("{{ 3i }}", NULL, CR_E_INVALID, "illegal number syntax");
}

static void test_define_template_block(void)
{
    CHECK_RENDER("{{ define \"x\" }}[{{ . }}]{{ end }}{{ template \"x\" \"a\" }}{{ template \"x\" 1 }}",
                 NULL, "[a][1]");
    CHECK_RENDER("{{ block \"b\" .n }}<{{ . }}>{{ end }}", DATA, "<3>");
    CHECK_RENDER("{{ define \"v\" }}{{ $ }}{{ end }}{{ $x := 1 }}{{ template \"v\" .s }}", DATA,
                 "str");
    CHECK_RENDER("{{ range .l }}{{ template \"t\" . }}{{ end }}{{ define \"t\" }}({{ . }}){{ end }}",
                 DATA, "(a)(b)");
    CHECK_ERROR("{{ template \"nope\" . }}", NULL, CR_E_INVALID, "template \"nope\" not defined");
    CHECK_RENDER("{{ define \"x\" }}a{{ end }}{{ template \"x\" }}", NULL, "a");
    CHECK_ERROR("{{ define \"x\" }}a{{ end }}{{ define \"x\" }}b{{ end }}", NULL, CR_E_INVALID,
                "multiple definition of template");
    CHECK_ERROR("{{ if 1 }}{{ define \"x\" }}{{ end }}{{ end }}", NULL, CR_E_INVALID,
                "unexpected <define>");
    /* A defined template does not see the caller's variables. */
    CHECK_ERROR("{{ define \"x\" }}{{ $v }}{{ end }}", NULL, CR_E_INVALID,
                "undefined variable \"$v\"");
}

static void test_dates(void)
{
    rn_tmpl_opts_t o = {.now_unix = 1700000000}; /* 2023-11-14T22:13:20Z */
    char *out = NULL;
    cr_err_t err;
    setenv("TZ", "UTC", 1);
    tzset();
    CHECK_EQ_INT(render_opts("{{ currentDate }} {{ yesterdayDate }} {{ currentDate \"fmt\" }}",
                             NULL, 0, &o, OUT_MAX, &out, &err),
                 CR_OK);
    CHECK_EQ_STR(out, "2023-11-14 2023-11-13 2023-11-14");
    free(out);
    o.now_unix = 1704067200; /* 2024-01-01: yesterday crosses a year */
    CHECK_EQ_INT(render_opts("{{ yesterdayDate }}", NULL, 0, &o, OUT_MAX, &out, &err), CR_OK);
    CHECK_EQ_STR(out, "2023-12-31");
    free(out);
    CHECK_ERROR("{{ currentDate 1 }}", NULL, CR_E_INVALID, "expected string; got int");
}

static void test_parse_errors(void)
{
    CHECK_ERROR("{{ .Prompt ", NULL, CR_E_INVALID, "template: :1: unclosed action");
    CHECK_ERROR("a\n{{ .X\n\n", NULL, CR_E_INVALID, "unclosed action started at :2");
    CHECK_ERROR("{{ foo 1 }}", NULL, CR_E_INVALID, "template: :1: function \"foo\" not defined");
    CHECK_ERROR("line1\n{{ end }}", NULL, CR_E_INVALID, "template: :2: unexpected {{end}}");
    CHECK_ERROR("{{ else }}", NULL, CR_E_INVALID, "unexpected {{else}}");
    CHECK_ERROR("{{ if 1 }}x", NULL, CR_E_INVALID, "unexpected EOF");
    CHECK_ERROR("{{ range .l }}x{{ else }}y", NULL, CR_E_INVALID, "unexpected EOF");
    CHECK_ERROR("{{ if 1 }}{{ else }}{{ else }}{{ end }}", NULL, CR_E_INVALID,
                "expected end; found {{else}}");
    CHECK_ERROR("{{ range .l }}{{ else if 1 }}{{ end }}", NULL, CR_E_INVALID, "unexpected <if>");
    CHECK_ERROR("{{ end 1 }}", NULL, CR_E_INVALID, "unexpected \"1\" in end");
    CHECK_ERROR("{{/* open", NULL, CR_E_INVALID, "unclosed comment");
    CHECK_ERROR("{{/* c */ x}}", NULL, CR_E_INVALID, "comment ends before closing delimiter");
    CHECK_ERROR("{{ \"open }}", NULL, CR_E_INVALID, "unterminated quoted string");
    CHECK_ERROR("{{ `open }}", NULL, CR_E_INVALID, "unterminated raw quoted string");
    CHECK_ERROR("{{ 'ab' }}", NULL, CR_E_INVALID, "malformed character constant");
    CHECK_ERROR("{{ }}", NULL, CR_E_INVALID, "missing value for command");
    CHECK_ERROR("{{ if }}{{ end }}", NULL, CR_E_INVALID, "missing value for if");
    CHECK_ERROR("{{ break }}", NULL, CR_E_INVALID, "{{break}} outside {{range}}");
    CHECK_ERROR("{{ continue }}", NULL, CR_E_INVALID, "{{continue}} outside {{range}}");
    CHECK_ERROR("{{ (1 }}", NULL, CR_E_INVALID, "unclosed left paren");
    CHECK_ERROR("{{ 1) }}", NULL, CR_E_INVALID, "unexpected \")\" in command");
    CHECK_ERROR("{{ .a:b }}", NULL, CR_E_INVALID, "expected :=");
    CHECK_ERROR("{{ .a # }}", NULL, CR_E_INVALID, "unexpected \"#\" in operand");
    CHECK_ERROR("{{ \"x\".y }}", NULL, CR_E_INVALID, "unexpected . after term");
    CHECK_ERROR("{{ range $a, $b, $c := .l }}{{ end }}", NULL, CR_E_INVALID,
                "too many declarations in range");
    CHECK_ERROR("{{ $a, $b := 1 }}", NULL, CR_E_INVALID, "too many declarations in command");
    CHECK_ERROR("{{ .x\x01 }}", NULL, CR_E_INVALID, "bad character");
    CHECK_ERROR("{{ \x01 }}", NULL, CR_E_INVALID, "unrecognized character in action");
    CHECK_ERROR("{{ define 1 }}{{ end }}", NULL, CR_E_INVALID, "unexpected \"1\" in define clause");
}

/* Hostile templates: each bounded and answered with an error, no crash. */
static void test_bombs(void)
{
    /* Deep nesting of blocks and parentheses. */
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    for (int i = 0; i < 200; i++)
        cr_buf_puts(&b, "{{ if 1 }}");
    CHECK_ERROR(b.data, NULL, CR_E_INVALID, "nesting deeper than 100");
    cr_buf_reset(&b);
    cr_buf_puts(&b, "{{ ");
    for (int i = 0; i < 5000; i++)
        cr_buf_putc(&b, '(');
    cr_buf_puts(&b, "1 }}");
    CHECK_ERROR(b.data, NULL, CR_E_INVALID, "nested deeper than 100");
    cr_buf_free(&b);
    /* Recursion through template calls. */
    CHECK_ERROR("{{ define \"r\" }}{{ template \"r\" . }}{{ end }}{{ template \"r\" . }}", NULL,
                CR_E_TOO_LARGE, "exceeded maximum template depth");
    cr_err_t err;
    char *out = NULL;
    /* Exponential recursion: the depth bound alone would allow 2^256
     * calls; the step budget stops it. */
    rn_tmpl_opts_t small = {.max_steps = 100000};
    CHECK_EQ_INT(render_opts("{{ define \"r\" }}{{ template \"r\" . }}{{ template \"r\" . }}"
                             "{{ end }}{{ template \"r\" . }}",
                             NULL, 0, &small, OUT_MAX, &out, &err),
                 CR_E_TOO_LARGE);
    CHECK(strstr(err.msg, "exceeded") != NULL);
    /* Loops that run too long: the default budget, then a small one. */
    CHECK_ERROR("{{ range 1000000000 }}{{ end }}", NULL, CR_E_TOO_LARGE,
                "template execution exceeded 20000000 steps");
    CHECK_EQ_INT(render_opts("{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}", NULL, 0,
                             &small, OUT_MAX, &out, &err),
                 CR_E_TOO_LARGE);
    CHECK(strstr(err.msg, "exceeded 100000 steps") != NULL);
    CHECK_EQ_INT(render_opts("{{ range $x := .l }}{{ range $.l }}{{ range $.l }}{{ end }}{{ end }}"
                             "{{ end }}",
                             "{\"l\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,"
                             "23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,"
                             "45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60]}",
                             0, &small, OUT_MAX, &out, &err),
                 CR_E_TOO_LARGE);
    CHECK_EQ_INT(render_opts("{{ range 100000 }}0123456789{{ end }}", NULL, 0, NULL, 1000, &out,
                             &err),
                 CR_E_TOO_LARGE);
    CHECK(strstr(err.msg, "template output exceeds 1000 bytes") != NULL);
    CHECK(out == NULL);
    /* printf widths cannot blow up memory past the output cap. */
    CHECK_EQ_INT(render_opts("{{ printf \"%999999d\" 1 }}", NULL, 0, NULL, 1000, &out, &err),
                 CR_E_TOO_LARGE);
    /* Source size. */
    size_t big = RN_TMPL_MAX_SOURCE + 1;
    char *src = malloc(big + 1);
    memset(src, 'a', big);
    src[big] = '\0';
    rn_tmpl_t *t = NULL;
    CHECK_EQ_INT(rn_tmpl_parse(src, big, &t, &err), CR_E_TOO_LARGE);
    CHECK(t == NULL);
    free(src);
    /* Garbage bytes never crash the parser. */
    unsigned seed = 12345;
    char junk[256];
    const char alphabet[] = "{}-/*. $|()\"'`:=,abc123\n\t\\iferangewithendelse";
    for (int round = 0; round < 3000; round++) {
        size_t n = (size_t)(seed % 200);
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            junk[i] = alphabet[(seed >> 16) % (sizeof alphabet - 1)];
        }
        junk[n] = '\0';
        seed = seed * 1103515245u + 12345u;
        if (rn_tmpl_parse(junk, n, &t, &err) == CR_OK) {
            cr_buf_t o;
            cr_buf_init(&o, 4096);
            rn_tmpl_opts_t opts = {.max_steps = 10000};
            (void)rn_tmpl_exec(t, NULL, &opts, &o, &err);
            cr_buf_free(&o);
            rn_tmpl_destroy(&t);
        } else {
            CHECK_MSG(!strncmp(err.msg, "template: ", 10), "%s", err.msg);
        }
    }
}


/* Ollama's touch-ups: the appended {{ .Response }}, Vars, the cut tree. */
static void test_ollama_parse(void)
{
    rn_tmpl_t *t = NULL;
    cr_err_t err;
    const char *src = "{{ .System }} {{ .Prompt }}";
    CHECK_EQ_INT(rn_tmpl_parse(src, strlen(src), &t, &err), CR_OK);
    CHECK(rn_tmpl_uses(t, "response") && rn_tmpl_uses(t, "SYSTEM") && rn_tmpl_uses(t, "prompt"));
    CHECK(!rn_tmpl_uses(t, "messages"));
    CHECK_EQ_STR(rn_tmpl_source(t), src);
    json_t *j = json_loads("{\"System\":\"s\",\"Prompt\":\"p\",\"Response\":\"r\"}", 0, NULL);
    rn_val_t *data = NULL;
    CHECK_EQ_INT(rn_val_from_json(j, 0, &data, &err), CR_OK);
    json_decref(j);
    cr_buf_t b;
    cr_buf_init(&b, 4096);
    CHECK_EQ_INT(rn_tmpl_exec(t, data, NULL, &b, &err), CR_OK);
    CHECK_EQ_STR(b.data, "s pr"); /* the appended response */
    rn_tmpl_destroy(&t);
    CHECK(t == NULL);
    rn_tmpl_destroy(&t); /* twice is harmless */
    rn_tmpl_destroy(NULL);

    /* The cut: everything after the first .Response goes, the field stays. */
    src = "A{{ .Prompt }}B{{ .Response }}C{{ if .Prompt }}D{{ end }}";
    CHECK_EQ_INT(rn_tmpl_parse(src, strlen(src), &t, &err), CR_OK);
    rn_tmpl_opts_t cut = {.cut_after_response = true};
    cr_buf_reset(&b);
    CHECK_EQ_INT(rn_tmpl_exec(t, data, &cut, &b, &err), CR_OK);
    CHECK_EQ_STR(b.data, "ApBr");
    cr_buf_reset(&b);
    CHECK_EQ_INT(rn_tmpl_exec(t, data, NULL, &b, &err), CR_OK);
    CHECK_EQ_STR(b.data, "ApBrCD");
    rn_tmpl_destroy(&t);
    /* A template with nothing before .Response cuts to nothing after it. */
    src = "{{ .Response }}{{ .Prompt }}";
    CHECK_EQ_INT(rn_tmpl_parse(src, strlen(src), &t, &err), CR_OK);
    cr_buf_reset(&b);
    CHECK_EQ_INT(rn_tmpl_exec(t, data, &cut, &b, &err), CR_OK);
    CHECK_EQ_STR(b.data, "r");
    rn_tmpl_destroy(&t);
    cr_buf_free(&b);
    rn_val_destroy(&data);

    /* Messages templates get nothing appended; $.Messages and identifiers
     * inside defined templates count. */
    const char *msgs[] = {"{{ range .Messages }}{{ .Content }}{{ end }}",
                          "{{ range $.Messages }}{{ end }}",
                          "{{ define \"x\" }}{{ .Messages }}{{ end }}hello"};
    for (size_t i = 0; i < CR_ARRAY_LEN(msgs); i++) {
        CHECK_EQ_INT(rn_tmpl_parse(msgs[i], strlen(msgs[i]), &t, &err), CR_OK);
        CHECK_MSG(rn_tmpl_uses(t, "messages") && !rn_tmpl_uses(t, "response"), "%s", msgs[i]);
        rn_tmpl_destroy(&t);
    }
    /* Ollama refuses a template call without a pipeline. */
    src = "{{ define \"x\" }}a{{ end }}{{ template \"x\" }}";
    CHECK_EQ_INT(rn_tmpl_parse(src, strlen(src), &t, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "template: :1: undefined template specified");
    CHECK(t == NULL);
    CHECK(!rn_tmpl_uses(NULL, "x"));
}

static void test_tag_inference(void)
{
    struct {
        const char *src, *tool_tag, *open, *close;
    } cases[] = {
        {"{{ range .Messages }}{{ if .ToolCalls }}<tool_call>\n{{ range .ToolCalls }}{\"name\": "
         "\"{{ .Function.Name }}\"}{{ end }}</tool_call>{{ end }}{{ end }}",
         "<tool_call>", "", ""},
        {"{{ range $i, $_ := .Messages }}{{ if eq .Role \"user\" }}[INST]{{ .Content }}[/INST]"
         "{{ else if eq .Role \"assistant\" }}{{ if .Content }}{{ .Content }}{{ else if .ToolCalls }}"
         "[TOOL_CALLS] [{{ range .ToolCalls }}{{ .Function.Name }}{{ end }}]{{ end }}{{ end }}{{ end }}",
         "[TOOL_CALLS] [", "", ""},
        {"{{ range .Messages }}{{ if .ToolCalls }}\n\n{{ range .ToolCalls }}{\"name\": 1}{{ end }}"
         "{{ end }}{{ end }}",
         "{", "", ""},
        {"{{ .Prompt }}", "{", "", ""},
        {"{{ range $i, $_ := .Messages }}{{ $last := eq (len (slice $.Messages $i)) 1 -}}\n"
         "<|im_start|>{{ .Role }}\n{{ if and $last .Thinking }}<think>{{ .Thinking }}</think>\n"
         "{{ end }}{{ .Content }}<|im_end|>\n{{ end }}",
         "{", "<think>", "</think>"},
        /* .Thinking outside a range over Messages does not count. */
        {"{{ if .Thinking }}<t>{{ .Thinking }}</t>{{ end }}{{ range .Messages }}{{ end }}", "{", "", ""},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        rn_tmpl_t *t = NULL;
        cr_err_t err;
        CHECK_EQ_INT(rn_tmpl_parse(cases[i].src, strlen(cases[i].src), &t, &err), CR_OK);
        char tag[64], open[64], close[64];
        rn_tmpl_tool_tag(t, tag, sizeof tag);
        rn_tmpl_thinking_tags(t, open, sizeof open, close, sizeof close);
        CHECK_EQ_STR(tag, cases[i].tool_tag);
        CHECK_EQ_STR(open, cases[i].open);
        CHECK_EQ_STR(close, cases[i].close);
        rn_tmpl_destroy(&t);
    }
    char small[4];
    rn_tmpl_t *t = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_tmpl_parse(cases[0].src, strlen(cases[0].src), &t, &err), CR_OK);
    rn_tmpl_tool_tag(t, small, sizeof small);
    CHECK_EQ_STR(small, "<to"); /* truncated to the buffer */
    rn_tmpl_destroy(&t);
}

static char *print_str(const rn_val_t *v)
{
    cr_buf_t b;
    cr_buf_init(&b, 1 << 16);
    cr_status_t st = rn_val_print(v, &b);
    char *s = st ? NULL : cr_buf_steal(&b);
    cr_buf_free(&b);
    return s;
}

static char *json_str(const rn_val_t *v, cr_status_t *st)
{
    cr_buf_t b;
    cr_buf_init(&b, 1 << 16);
    *st = rn_val_to_json(v, &b);
    char *s = *st ? NULL : cr_buf_steal(&b);
    cr_buf_free(&b);
    return s;
}

static void check_float_at(int line, double f, const char *print_want, const char *json_want)
{
    rn_val_t *v = rn_val_float_new(f);
    char *p = print_str(v);
    cr_status_t st;
    char *j = json_str(v, &st);
    bool ok = p && !strcmp(p, print_want) &&
              (json_want ? (j && !strcmp(j, json_want)) : st == CR_E_INVALID);
    if (ok) {
        check_passed_g++;
    } else {
        check_failed_g++;
        fprintf(stderr, "FAIL %s:%d: %.17g printed \"%s\" (want \"%s\"), JSON \"%s\" (want \"%s\")\n",
                __FILE__, line, f, p ? p : "(null)", print_want, j ? j : "(error)",
                json_want ? json_want : "(error)");
    }
    free(p);
    free(j);
    rn_val_destroy(&v);
}
#define CHECK_FLOAT(f, p, j) check_float_at(__LINE__, f, p, j)

static void test_values(void)
{
    /* Floats as fmt's %v and encoding/json write them. */
    CHECK_FLOAT(1e6, "1e+06", "1000000");
    CHECK_FLOAT(123456.0, "123456", "123456");
    CHECK_FLOAT(1234567.0, "1.234567e+06", "1234567");
    CHECK_FLOAT(0.0001, "0.0001", "0.0001");
    CHECK_FLOAT(0.00001, "1e-05", "0.00001");
    CHECK_FLOAT(1e-7, "1e-07", "1e-7");
    CHECK_FLOAT(-2.5, "-2.5", "-2.5");
    CHECK_FLOAT(1e20, "1e+20", "100000000000000000000");
    CHECK_FLOAT(1e21, "1e+21", "1e+21");
    CHECK_FLOAT(0.1 + 0.2, "0.30000000000000004", "0.30000000000000004");
    CHECK_FLOAT(3.0, "3", "3");
    CHECK_FLOAT(-0.0, "-0", "-0");
    CHECK_FLOAT(5e-324, "5e-324", "5e-324");
    CHECK_FLOAT(1.7976931348623157e308, "1.7976931348623157e+308", "1.7976931348623157e+308");
    CHECK_FLOAT(NAN, "NaN", NULL);
    CHECK_FLOAT(INFINITY, "+Inf", NULL);
    CHECK_FLOAT(-INFINITY, "-Inf", NULL);

    /* Structs: Go field order, JSON names, omitempty, "-". */
    rn_val_t *st_v = rn_val_struct_new("pkg.T", RN_VAL_F_POINTER);
    CHECK_EQ_INT(rn_val_struct_add(st_v, "Name", "name", 0, &(rn_val_t *){rn_val_str_new("n")}),
                 CR_OK);
    CHECK_EQ_INT(rn_val_struct_add(st_v, "Empty", "empty", RN_FIELD_OMITEMPTY,
                                   &(rn_val_t *){rn_val_str_new("")}),
                 CR_OK);
    CHECK_EQ_INT(rn_val_struct_add(st_v, "Zero", NULL, RN_FIELD_OMITEMPTY,
                                   &(rn_val_t *){rn_val_int_new(0)}),
                 CR_OK);
    CHECK_EQ_INT(rn_val_struct_add(st_v, "List", NULL, 0,
                                   &(rn_val_t *){rn_val_list_new(RN_VAL_F_NIL)}),
                 CR_OK);
    CHECK_EQ_INT(rn_val_struct_add(st_v, "Secret", "-", 0, &(rn_val_t *){rn_val_bool_new(true)}),
                 CR_OK);
    CHECK_EQ_INT(rn_val_struct_add(st_v, "Args", "args", 0,
                                   &(rn_val_t *){rn_val_map_new(RN_VAL_F_NIL | RN_VAL_F_JSON_PRINT)}),
                 CR_OK);
    cr_status_t st;
    char *s = json_str(st_v, &st);
    CHECK_EQ_STR(s, "{\"name\":\"n\",\"List\":null,\"args\":null}");
    free(s);
    s = print_str(st_v);
    CHECK_EQ_STR(s, "&{n  0 [] true {}}");
    free(s);
    CHECK_EQ_INT(rn_val_len(st_v), 6);
    CHECK_EQ_STR(rn_val_key_at(st_v, 4), "Secret");
    CHECK(rn_val_as_bool(rn_val_get(st_v, "Secret")));
    CHECK(rn_val_get(st_v, "nope") == NULL);
    CHECK(rn_val_truth(st_v));
    /* Wrong kinds and cycles are refused, the item released. */
    CHECK_EQ_INT(rn_val_list_push(st_v, &(rn_val_t *){rn_val_int_new(1)}), CR_E_INVALID);
    CHECK_EQ_INT(rn_val_map_set(st_v, "k", &(rn_val_t *){rn_val_int_new(1)}), CR_E_INVALID);
    rn_val_t *list = rn_val_list_new(0);
    rn_val_t *self = rn_val_ref(list);
    CHECK_EQ_INT(rn_val_list_push(list, &self), CR_E_INVALID);
    CHECK(self == NULL);
    rn_val_t *inner = rn_val_list_new(0);
    rn_val_t *outer_ref = rn_val_ref(list);
    CHECK_EQ_INT(rn_val_list_push(inner, &outer_ref), CR_OK);
    rn_val_t *inner_ref = rn_val_ref(inner);
    CHECK_EQ_INT(rn_val_list_push(list, &inner_ref), CR_E_INVALID); /* list -> inner -> list */
    rn_val_destroy(&inner);
    rn_val_t *none = NULL;
    CHECK_EQ_INT(rn_val_list_push(list, &none), CR_E_NOMEM); /* a failed constructor */
    rn_val_destroy(&list);
    rn_val_destroy(&st_v);

    /* Maps: set replaces in place; sorted vs ordered. */
    rn_val_t *m = rn_val_map_new(0);
    CHECK_EQ_INT(rn_val_map_set(m, "b", &(rn_val_t *){rn_val_int_new(1)}), CR_OK);
    CHECK_EQ_INT(rn_val_map_set(m, "a", &(rn_val_t *){rn_val_int_new(2)}), CR_OK);
    CHECK_EQ_INT(rn_val_map_set(m, "b", &(rn_val_t *){rn_val_int_new(3)}), CR_OK);
    s = json_str(m, &st);
    CHECK_EQ_STR(s, "{\"a\":2,\"b\":3}");
    free(s);
    s = print_str(m);
    CHECK_EQ_STR(s, "map[a:2 b:3]");
    free(s);
    CHECK_EQ_INT(rn_val_len(m), 2);
    rn_val_destroy(&m);

    /* JSON in: Go's any (floats, sorted maps) or kept ints and order. */
    json_t *j = json_loads("{\"z\":1,\"a\":[1.5,true,null,\"s\"],\"big\":12345678901234567}", 0, NULL);
    rn_val_t *v = NULL;
    cr_err_t err;
    CHECK_EQ_INT(rn_val_from_json(j, 0, &v, &err), CR_OK);
    CHECK(rn_val_kind(rn_val_get(v, "z")) == RN_VAL_FLOAT);
    s = json_str(v, &st);
    CHECK_EQ_STR(s, "{\"a\":[1.5,true,null,\"s\"],\"big\":12345678901234568,\"z\":1}");
    free(s);
    rn_val_destroy(&v);
    CHECK_EQ_INT(rn_val_from_json(j, RN_JSON_ORDERED | RN_JSON_KEEP_INTS, &v, &err), CR_OK);
    CHECK(rn_val_kind(rn_val_get(v, "z")) == RN_VAL_INT);
    CHECK_EQ_INT(rn_val_as_int(rn_val_get(v, "z")), 1);
    s = json_str(v, &st);
    CHECK_EQ_STR(s, "{\"z\":1,\"a\":[1.5,true,null,\"s\"],\"big\":12345678901234567}");
    free(s);
    s = print_str(v);
    CHECK_EQ_STR(s, "map[z:1 a:[1.5 true <nil> s] big:12345678901234567]");
    free(s);
    rn_val_destroy(&v);
    json_decref(j);
    /* Embedded NULs survive. */
    j = json_loads("\"a\\u0000b\"", JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    CHECK_EQ_INT(rn_val_from_json(j, 0, &v, &err), CR_OK);
    CHECK_EQ_INT(rn_val_str_len(v), 3);
    s = json_str(v, &st);
    CHECK_EQ_STR(s, "\"a\\u0000b\"");
    free(s);
    rn_val_destroy(&v);
    json_decref(j);
    /* Too deep JSON is refused. */
    cr_buf_t b;
    cr_buf_init(&b, 1 << 20);
    for (int i = 0; i < 500; i++)
        cr_buf_putc(&b, '[');
    for (int i = 0; i < 500; i++)
        cr_buf_putc(&b, ']');
    j = json_loads(b.data, 0, NULL);
    CHECK(j != NULL);
    CHECK_EQ_INT(rn_val_from_json(j, 0, &v, &err), CR_E_TOO_LARGE);
    CHECK(v == NULL);
    CHECK(strstr(err.msg, "nested deeper than") != NULL);
    json_decref(j);
    cr_buf_free(&b);
    CHECK_EQ_INT(rn_val_from_json(NULL, 0, &v, &err), CR_OK);
    CHECK(v == rn_val_nil());

    /* The shared nil and NULL are harmless everywhere. */
    rn_val_t *nil = rn_val_nil();
    rn_val_destroy(&nil);
    CHECK(nil == NULL);
    CHECK(rn_val_nil() != NULL);
    rn_val_destroy(NULL);
    CHECK(rn_val_kind(NULL) == RN_VAL_NIL && rn_val_len(NULL) == 0 && !rn_val_truth(NULL));
    CHECK_EQ_STR(rn_val_as_str(NULL), "");
    s = print_str(rn_val_nil());
    CHECK_EQ_STR(s, "<nil>");
    free(s);
}

/* ---- trust spans ---- */

static rn_val_t *span_data(void)
{
    rn_val_t *d = rn_val_map_new(0), *l = rn_val_list_new(0), *m = rn_val_map_new(0);
    rn_val_map_set(d, "U", (rn_val_t *[]){rn_val_str_new("bob")});
    rn_val_map_set(d, "T", (rn_val_t *[]){rn_val_trust(rn_val_str_new("sys"))});
    rn_val_map_set(d, "E", (rn_val_t *[]){rn_val_str_new("")});
    rn_val_list_push(l, (rn_val_t *[]){rn_val_trust(rn_val_str_new("a"))});
    rn_val_list_push(l, (rn_val_t *[]){rn_val_str_new("b")});
    rn_val_map_set(d, "L", &l);
    rn_val_map_set(m, "k<", (rn_val_t *[]){rn_val_str_new("v")});
    rn_val_map_set(d, "M", &m);
    return d;
}

/* Renders over span_data() after `pre` already in the buffer and writes
 * the spans as "T[...]U[...]" into desc (the bytes of pre are not
 * covered, so they do not appear). Returns the status. */
static cr_status_t render_spans(const char *tmpl, const char *pre, size_t max_out, char *desc,
                                size_t cap, cr_err_t *err)
{
    rn_val_t *data = span_data();
    rn_tmpl_t *t = NULL;
    desc[0] = '\0';
    cr_status_t st = rn_tmpl_parse_plain(tmpl, strlen(tmpl), &t, err);
    if (st) {
        rn_val_destroy(&data);
        return st;
    }
    cr_buf_t b;
    cr_buf_init(&b, max_out);
    cr_buf_puts(&b, pre);
    rn_tmpl_spans_t sp = {0};
    rn_tmpl_opts_t o = {.spans = &sp};
    st = rn_tmpl_exec(t, data, &o, &b, err);
    size_t at = strlen(pre), used = 0;
    for (size_t i = 0; i < sp.n; i++) {
        if (sp.v[i].offset != at)
            snprintf(desc + used, cap - used, "GAP@%zu", sp.v[i].offset);
        used = strlen(desc);
        snprintf(desc + used, cap - used, "%c[%.*s]", sp.v[i].trusted ? 'T' : 'U',
                 (int)sp.v[i].len, b.data + sp.v[i].offset);
        used = strlen(desc);
        at = sp.v[i].offset + sp.v[i].len;
    }
    if (at != b.len)
        snprintf(desc + used, cap - used, "UNCOVERED");
    rn_tmpl_spans_free(&sp);
    rn_tmpl_spans_free(&sp);
    cr_buf_free(&b);
    rn_tmpl_destroy(&t);
    rn_val_destroy(&data);
    return st;
}

#define CHECK_SPANS(tmpl, want)                                                     \
    do {                                                                            \
        char d_[512];                                                               \
        cr_err_t e_;                                                                \
        CHECK_EQ_INT(render_spans(tmpl, "", OUT_MAX, d_, sizeof d_, &e_), CR_OK); \
        CHECK_EQ_STR(d_, want);                                                     \
    } while (0)

static void test_spans(void)
{
    /* Template text is trusted, request data not; neighbours merge. */
    CHECK_SPANS("<a>{{ .U }}</a>", "T[<a>]U[bob]T[</a>]");
    CHECK_SPANS("<a>{{ .T }}</a>", "T[<a>sys</a>]");
    CHECK_SPANS("{{ .U }}{{ .U }}", "U[bobbob]");
    /* Literals in actions are the template's own. */
    CHECK_SPANS("{{ \"<|eot_id|>\" }}{{ `x` }}", "T[<|eot_id|>x]");
    /* Computed values: trusted only when made from trusted values. */
    CHECK_SPANS("{{ printf \"%s!\" .U }}", "U[bob!]");
    CHECK_SPANS("{{ printf \"%s!\" .T }}", "T[sys!]");
    CHECK_SPANS("{{ .U | printf \"<%s>\" }}", "U[<bob>]");
    CHECK_SPANS("{{ print .T .U }}", "U[sysbob]");
    CHECK_SPANS("{{ slice .U 1 }}", "U[ob]");
    CHECK_SPANS("{{ html .U }}{{ js .T }}", "U[bob]T[sys]");
    CHECK_SPANS("{{ json .M }}", "U[{\"k\\u003c\":\"v\"}]");
    CHECK_SPANS("{{ .M }}", "U[map[k<:v]]");
    /* Values handed through keep their own mark. */
    CHECK_SPANS("{{ index .L 0 }}|{{ index .L 1 }}", "T[a|]U[b]");
    CHECK_SPANS("{{ or .E .U }}{{ or .T .U }}", "U[bob]T[sys]");
    CHECK_SPANS("{{ $x := .U }}{{ $x }}", "U[bob]");
    CHECK_SPANS("{{ range .L }}{{ . }}{{ end }}", "T[a]U[b]");
    CHECK_SPANS("{{ range $k, $v := .M }}{{ $k }}={{ $v }}{{ end }}", "U[k<]T[=]U[v]");
    CHECK_SPANS("{{ with .U }}({{ . }}){{ end }}", "T[(]U[bob]T[)]");
    /* Numbers, bools and nil print trusted (no client-chosen text). */
    CHECK_SPANS("{{ len .U }} {{ eq .U \"bob\" }} {{ .Missing }}", "T[3 true <no value>]");
    CHECK_SPANS("{{ define \"t\" }}[{{ . }}]{{ end }}{{ template \"t\" .U }}", "T[[]U[bob]T[]]");
    /* Nothing written, nothing recorded. */
    CHECK_SPANS("{{ .E }}{{ if false }}x{{ end }}", "");
    CHECK_SPANS("", "");

    char d[512];
    cr_err_t err;
    /* Offsets count from the buffer's start: text already there is not
     * covered. */
    CHECK_EQ_INT(render_spans("<{{ .U }}", "ctx", OUT_MAX, d, sizeof d, &err), CR_OK);
    CHECK_EQ_STR(d, "T[<]U[bob]");
    /* Execution error: the spans cover what was written before it. */
    CHECK_EQ_INT(render_spans("<a>{{ .U }}{{ index .L 5 }}tail", "", OUT_MAX, d, sizeof d, &err),
                 CR_E_INVALID);
    CHECK_EQ_STR(d, "T[<a>]U[bob]");
    /* Output cap: the same. */
    CHECK_EQ_INT(render_spans("<a>{{ .U }}{{ .U }}", "", 7, d, sizeof d, &err), CR_E_TOO_LARGE);
    CHECK(strstr(d, "UNCOVERED") == NULL && strstr(d, "GAP") == NULL);

    /* rn_tmpl_spans_add itself. */
    rn_tmpl_spans_t sp = {0};
    CHECK_EQ_INT(rn_tmpl_spans_add(&sp, 0, 0, true), CR_OK);
    CHECK_EQ_INT(sp.n, 0);
    CHECK_EQ_INT(rn_tmpl_spans_add(&sp, 0, 3, true), CR_OK);
    CHECK_EQ_INT(rn_tmpl_spans_add(&sp, 3, 2, true), CR_OK);
    CHECK_EQ_INT(sp.n, 1);
    CHECK_EQ_INT(sp.v[0].len, 5);
    CHECK_EQ_INT(rn_tmpl_spans_add(&sp, 5, 1, false), CR_OK);
    CHECK_EQ_INT(rn_tmpl_spans_add(&sp, 9, 1, false), CR_OK); /* gap: a new span */
    CHECK_EQ_INT(sp.n, 3);
    CHECK_EQ_INT(rn_tmpl_spans_add(&sp, 4, 1, true), CR_E_INVALID); /* backwards */
    CHECK_EQ_INT(sp.n, 3);
    for (int i = 0; i < 100; i++)
        CHECK_EQ_INT(rn_tmpl_spans_add(&sp, 10 + (size_t)i, 1, i % 2), CR_OK);
    CHECK_EQ_INT(sp.n, 102);
    rn_tmpl_spans_free(&sp);
    CHECK(sp.v == NULL && sp.n == 0);
    rn_tmpl_spans_free(NULL);

    /* The trust mark itself. */
    CHECK(rn_val_is_trusted(NULL));
    CHECK(rn_val_is_trusted(rn_val_nil()));
    CHECK(rn_val_trust(NULL) == NULL);
    CHECK(rn_val_trust(rn_val_nil()) == rn_val_nil());
    rn_val_t *v = rn_val_str_new("x");
    CHECK(!rn_val_is_trusted(v));
    CHECK(rn_val_trust(v) == v && rn_val_is_trusted(v));
    rn_val_destroy(&v);
    v = rn_val_int_new(1);
    CHECK(rn_val_is_trusted(v));
    rn_val_destroy(&v);
    v = rn_val_list_new(0);
    CHECK(!rn_val_is_trusted(v));
    rn_val_destroy(&v);
}

int main(void)
{
    test_text_and_trim();
    test_fields();
    test_if_else();
    test_range();
    test_variables();
    test_comparisons();
    test_and_or_not();
    test_len_index_slice();
    test_print_printf();
    test_escapers();
    test_json_func();
    test_pipelines_literals();
    test_define_template_block();
    test_dates();
    test_parse_errors();
    test_bombs();
    test_ollama_parse();
    test_tag_inference();
    test_values();
    test_spans();
    return check_finish("test_template");
}
