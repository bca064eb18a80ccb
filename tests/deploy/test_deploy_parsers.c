/* test_deploy_parsers.c: the parsers tests/deploy's checks stand on: the
 * YAML subset (good documents and a named corpus of refused ones), systemd
 * command-line and environment-file syntax, specifiers, services.txt. */
#include "lib/prelude.h"

#include <unistd.h>

#include "tests/deploy/unitfile.h"
#include "tests/deploy/yaml.h"
#include "tests/unit/check.h"

static dc_yaml_t *parse_ok(const char *text)
{
    dc_yaml_t *root = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = dc_yaml_parse(text, strlen(text), &root, &err);
    CHECK_MSG(st == CR_OK, "parse failed: %s\n%s", err.msg, text);
    return root;
}

static void test_yaml_good(void)
{
    const char *doc =
        "# leading comment\n"
        "---\n"
        "name: corral   # trailing comment\n"
        "services:\n"
        "  gateway:\n"
        "    command: [\"corral-gateway\", 'it''s', plain word]\n"
        "    ports:\n"
        "      - \"127.0.0.1:${PORT:-11434}:11434\"\n"
        "    environment:\n"
        "      A: \"x # not a comment\"\n"
        "      B:\n"
        "      C: ~\n"
        "      URL: http://127.0.0.1:11434/\n"
        "    ulimits:\n"
        "      nofile: {soft: 65535, hard: 65535}\n"
        "    depends_on:\n"
        "    - registry\n"
        "    - scheduler\n"
        "    deploy: !reset {}\n"
        "    list_of_maps:\n"
        "      - driver: nvidia\n"
        "        count: all\n"
        "        capabilities: [gpu]\n"
        "      - - nested\n"
        "        - seq\n"
        "      -\n"
        "        key: under a bare dash\n"
        "    esc: \"tab\\there \\u00e9\"\n"
        "volumes:\n"
        "  models: {}\n"
        "  empty_flow: []\n";
    dc_yaml_t *root = parse_ok(doc);
    if (!root)
        return;
    CHECK_EQ_INT(root->kind, DC_YAML_MAP);
    CHECK_EQ_STR(dc_yaml_str(dc_yaml_get(root, "name")), "corral");
    const dc_yaml_t *gw = dc_yaml_get(dc_yaml_get(root, "services"), "gateway");
    const dc_yaml_t *cmd = dc_yaml_get(gw, "command");
    CHECK(cmd && cmd->kind == DC_YAML_SEQ && cmd->n == 3);
    if (cmd && cmd->n == 3) {
        CHECK_EQ_STR(dc_yaml_str(cmd->vals[0]), "corral-gateway");
        CHECK(cmd->vals[0]->quoted);
        CHECK_EQ_STR(dc_yaml_str(cmd->vals[1]), "it's");
        CHECK_EQ_STR(dc_yaml_str(cmd->vals[2]), "plain word");
    }
    const dc_yaml_t *ports = dc_yaml_get(gw, "ports");
    CHECK(ports && ports->n == 1 &&
          !strcmp(dc_yaml_str(ports->vals[0]),
                  "127.0.0.1:${PORT:-11434}:11434"));
    const dc_yaml_t *env = dc_yaml_get(gw, "environment");
    CHECK_EQ_STR(dc_yaml_str(dc_yaml_get(env, "A")), "x # not a comment");
    CHECK(dc_yaml_get(env, "B") && dc_yaml_get(env, "B")->kind == DC_YAML_NULL);
    CHECK(dc_yaml_get(env, "C")->kind == DC_YAML_NULL);
    CHECK_EQ_STR(dc_yaml_str(dc_yaml_get(env, "URL")),
                 "http://127.0.0.1:11434/");
    const dc_yaml_t *nofile = dc_yaml_get(dc_yaml_get(gw, "ulimits"), "nofile");
    CHECK_EQ_STR(dc_yaml_str(dc_yaml_get(nofile, "soft")), "65535");
    CHECK_EQ_STR(dc_yaml_str(dc_yaml_get(nofile, "hard")), "65535");
    const dc_yaml_t *dep = dc_yaml_get(gw, "depends_on");
    CHECK(dep && dep->kind == DC_YAML_SEQ && dep->n == 2);
    const dc_yaml_t *deploy = dc_yaml_get(gw, "deploy");
    CHECK(deploy && deploy->kind == DC_YAML_MAP && deploy->n == 0 &&
          deploy->tag && !strcmp(deploy->tag, "!reset"));
    const dc_yaml_t *lom = dc_yaml_get(gw, "list_of_maps");
    CHECK(lom && lom->kind == DC_YAML_SEQ && lom->n == 3);
    if (lom && lom->n == 3) {
        CHECK_EQ_STR(dc_yaml_str(dc_yaml_get(lom->vals[0], "count")), "all");
        const dc_yaml_t *caps = dc_yaml_get(lom->vals[0], "capabilities");
        CHECK(caps && caps->n == 1 && !strcmp(dc_yaml_str(caps->vals[0]), "gpu"));
        CHECK(lom->vals[1]->kind == DC_YAML_SEQ && lom->vals[1]->n == 2);
        CHECK_EQ_STR(dc_yaml_str(dc_yaml_get(lom->vals[2], "key")),
                     "under a bare dash");
    }
    CHECK_EQ_STR(dc_yaml_str(dc_yaml_get(gw, "esc")), "tab\there \xc3\xa9");
    const dc_yaml_t *vols = dc_yaml_get(root, "volumes");
    CHECK(dc_yaml_get(vols, "models")->kind == DC_YAML_MAP);
    CHECK(dc_yaml_get(vols, "empty_flow")->kind == DC_YAML_SEQ);
    CHECK(dc_yaml_get(vols, "missing") == NULL);
    dc_yaml_free(&root);
    CHECK(root == NULL);
    dc_yaml_free(NULL);

    root = parse_ok("");
    CHECK(root && root->kind == DC_YAML_NULL);
    dc_yaml_free(&root);
    root = parse_ok("# only a comment\n\n");
    CHECK(root && root->kind == DC_YAML_NULL);
    dc_yaml_free(&root);
    root = parse_ok("a: 1\r\nb: 2\r\n"); /* CRLF */
    CHECK_EQ_STR(dc_yaml_str(dc_yaml_get(root, "b")), "2");
    dc_yaml_free(&root);
}

/* Documents the subset refuses, each with the words its error must say. */
static void test_yaml_bad(void)
{
    static const struct {
        const char *name, *text, *msg;
    } cases[] = {
        {"tab indentation", "a:\n\tb: 1\n", "tab"},
        {"duplicate key", "a: 1\na: 2\n", "duplicate key 'a'"},
        {"duplicate flow key", "a: {x: 1, x: 2}\n", "duplicate"},
        {"anchor", "a: &x 1\n", "anchors"},
        {"alias", "a: *x\n", "anchors"},
        {"block scalar", "a: |\n  text\n", "block scalars"},
        {"folded scalar", "a: >\n  text\n", "block scalars"},
        {"unclosed flow", "a: [1, 2\n", "not closed"},
        {"multi-line flow", "a: [1,\n  2]\n", "not closed"},
        {"unclosed double quote", "a: \"abc\n", "not closed"},
        {"unclosed single quote", "a: 'abc\n", "not closed"},
        {"bad escape", "a: \"\\q\"\n", "escape"},
        {"bad unicode escape", "a: \"\\u12\"\n", "escape"},
        {"NUL escape", "a: \"\\u0000\"\n", "refused"},
        {"over-indented key", "a: 1\n  b: 2\n", "indentation"},
        {"under-indented continuation", "a:\n    b: 1\n  c: 2\n",
         "indentation"},
        {"seq where key expected", "a: 1\n- b\n", "sequence item"},
        {"no colon", "a: 1\njust text\n", "expected 'key: value'"},
        {"colon in plain scalar", "a: b: c\n", "': ' inside a plain"},
        {"text after quoted", "a: \"x\" y\n", "text after a value"},
        {"text after flow", "a: [x] y\n", "text after a value"},
        {"two documents", "a: 1\n---\nb: 2\n", "more than one document"},
        {"directive", "%YAML 1.2\na: 1\n", "directives"},
        {"lone scalar", "just a string\n", "mapping or sequence"},
        {"reserved indicator", "a: @x\n", "cannot start"},
        {"missing flow value", "a: [1, , 2]\n", "missing value"},
        {"flow map without colon", "a: {x}\n", "expected ':'"},
        {"NUL byte", "a: 1\n\0b: 2\n", "NUL"},
        {"continued plain scalar", "a: one\n  two\n", "indentation"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(cases); i++) {
        size_t len = strlen(cases[i].text);
        if (!strcmp(cases[i].name, "NUL byte"))
            len = 12;
        dc_yaml_t *root = NULL;
        cr_err_t err;
        cr_err_clear(&err);
        cr_status_t st = dc_yaml_parse(cases[i].text, len, &root, &err);
        CHECK_MSG(st != CR_OK && root == NULL, "%s: accepted", cases[i].name);
        CHECK_MSG(strstr(err.msg, cases[i].msg) != NULL,
                  "%s: message '%s' lacks '%s'", cases[i].name, err.msg,
                  cases[i].msg);
        dc_yaml_free(&root);
    }

    /* Deep nesting stops at the limit instead of exhausting the stack. */
    size_t depth = DC_YAML_MAX_DEPTH + 10;
    char *deep = malloc(depth * (2 * depth + 8));
    size_t n = 0;
    for (size_t d = 0; d < depth; d++) {
        memset(deep + n, ' ', 2 * d);
        n += 2 * d;
        n += (size_t)sprintf(deep + n, "k:\n");
    }
    dc_yaml_t *root = NULL;
    cr_err_t err;
    CHECK_EQ_INT(dc_yaml_parse(deep, n, &root, &err), CR_E_TOO_LARGE);
    free(deep);
    char flow[4 * DC_YAML_MAX_DEPTH + 16];
    n = (size_t)sprintf(flow, "a: ");
    for (int d = 0; d < DC_YAML_MAX_DEPTH + 5; d++)
        flow[n++] = '[';
    flow[n] = '\0';
    CHECK(dc_yaml_parse(flow, n, &root, &err) != CR_OK);

    /* Over the size limit. */
    CHECK_EQ_INT(dc_yaml_parse("a: 1", DC_YAML_MAX_BYTES + 1, &root, &err),
                 CR_E_TOO_LARGE);
}

static void test_words(void)
{
    dc_words_t w;
    cr_err_t err;
    CHECK_EQ_INT(dc_split_words("  a \"b c\" 'd \\n' e\\ f \"g\\\"h\"", &w,
                                &err), CR_OK);
    CHECK_EQ_INT(w.n, 5);
    if (w.n == 5) {
        CHECK_EQ_STR(w.w[0], "a");
        CHECK_EQ_STR(w.w[1], "b c");
        CHECK_EQ_STR(w.w[2], "d \\n"); /* no escapes in single quotes */
        CHECK_EQ_STR(w.w[3], "e f");
        CHECK_EQ_STR(w.w[4], "g\"h");
    }
    dc_words_free(&w);
    CHECK_EQ_INT(dc_split_words("a \"open", &w, &err), CR_E_INVALID);
    CHECK_EQ_INT(dc_split_words("a \\q", &w, &err), CR_E_INVALID);
    char many[DC_ARGV_MAX * 2 + 8] = "";
    for (int i = 0; i < DC_ARGV_MAX + 1; i++)
        strcat(many, "x ");
    CHECK_EQ_INT(dc_split_words(many, &w, &err), CR_E_TOO_LARGE);

    char prefix[8];
    CHECK_EQ_INT(dc_split_exec("-+/usr/bin/x --flag", &w, prefix, &err), CR_OK);
    CHECK_EQ_STR(prefix, "-+");
    CHECK_EQ_STR(w.w[0], "/usr/bin/x");
    CHECK_EQ_STR(w.w[1], "--flag");
    dc_words_free(&w);
    CHECK_EQ_INT(dc_split_exec("   ", &w, prefix, &err), CR_E_INVALID);

    dc_specifiers_t sp = {"/run", "/var/lib", "/home/c", "x.service"};
    char out[64];
    CHECK_EQ_INT(dc_expand_specifiers("%t/corral:%S/c:%h:%n:100%%", &sp, out,
                                      sizeof out, &err), CR_OK);
    CHECK_EQ_STR(out, "/run/corral:/var/lib/c:/home/c:x.service:100%");
    CHECK_EQ_INT(dc_expand_specifiers("%i", &sp, out, sizeof out, &err),
                 CR_E_UNSUPPORTED);
    CHECK_EQ_INT(dc_expand_specifiers("%", &sp, out, sizeof out, &err),
                 CR_E_UNSUPPORTED);
    char small[8];
    CHECK_EQ_INT(dc_expand_specifiers("%S/long", &sp, small, sizeof small,
                                      &err), CR_E_TOO_LARGE);
}

static bool write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fputs(text, f);
    return fclose(f) == 0;
}

static void test_files(void)
{
    char dir[] = "/tmp/corral-dparse-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(false);
        return;
    }
    char path[128];
    cr_err_t err;

    /* A unit: sections, comments, continuation, list reset. */
    snprintf(path, sizeof path, "%s/u.service", dir);
    write_file(path, "# c\n[Unit]\nDescription = x y \n\n[Service]\n"
                     "ExecStart=/bin/a \\\n  --b \\\n# inside\n  c\n"
                     "DeviceAllow=one\nDeviceAllow=\nDeviceAllow=two\n"
                     "; semicolon comment\nEnvironment=A=1 \"B=2 3\"\n");
    dc_unit_t *u = NULL;
    CHECK_EQ_INT(dc_unit_load(path, &u, &err), CR_OK);
    if (u) {
        CHECK_EQ_STR(dc_unit_get(u, "Unit", "Description"), "x y");
        CHECK_EQ_STR(dc_unit_get(u, "Service", "ExecStart"),
                     "/bin/a  --b  c");
        const char *v[4];
        CHECK_EQ_INT(dc_unit_get_all(u, "Service", "DeviceAllow", v, 4), 1);
        CHECK_EQ_STR(v[0], "two");
        CHECK(dc_unit_get(u, "Service", "Nope") == NULL);
        CHECK(dc_unit_get(u, "Install", "ExecStart") == NULL);
        dc_unit_free(&u);
    }
    static const struct {
        const char *name, *text, *msg;
    } bad_units[] = {
        {"outside a section", "A=b\n", "outside a section"},
        {"no equals", "[Unit]\nDescription\n", "no '='"},
        {"bad section", "[Unit\nA=b\n", "bad section"},
        {"empty key", "[Unit]\n=b\n", "bad key"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bad_units); i++) {
        write_file(path, bad_units[i].text);
        cr_err_clear(&err);
        CHECK_MSG(dc_unit_load(path, &u, &err) != CR_OK && !u, "%s accepted",
                  bad_units[i].name);
        CHECK_MSG(strstr(err.msg, bad_units[i].msg) != NULL, "%s: '%s'",
                  bad_units[i].name, err.msg);
    }
    snprintf(path, sizeof path, "%s/absent", dir);
    CHECK_EQ_INT(dc_unit_load(path, &u, &err), CR_E_IO);

    /* Environment files. */
    snprintf(path, sizeof path, "%s/e.env", dir);
    write_file(path, "# c\n; c\nA=1\n  B = x \nC=\"q \\\" r\"\nD='s t'\n"
                     "A=2\nE=\n");
    dc_env_t env = {0};
    CHECK_EQ_INT(dc_env_file_load(path, &env, &err), CR_OK);
    CHECK_EQ_STR(dc_env_value(&env, "A"), "2");
    CHECK_EQ_STR(dc_env_value(&env, "C"), "q \" r");
    CHECK_EQ_STR(dc_env_value(&env, "D"), "s t");
    CHECK_EQ_STR(dc_env_value(&env, "E"), "");
    CHECK(dc_env_value(&env, "Z") == NULL);
    dc_env_free(&env);
    static const struct {
        const char *name, *text, *msg;
    } bad_envs[] = {
        {"no equals", "JUSTAWORD\n", "not KEY=VALUE"},
        {"bad key", "1A=x\n", "not KEY=VALUE"},
        {"unterminated quote", "A=\"x\n", "unterminated"},
        {"text after quote", "A=\"x\" y\n", "text after"},
        {"continuation", "A=x\\\n", "continued"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bad_envs); i++) {
        write_file(path, bad_envs[i].text);
        cr_err_clear(&err);
        CHECK_MSG(dc_env_file_load(path, &env, &err) != CR_OK, "%s accepted",
                  bad_envs[i].name);
        CHECK_MSG(strstr(err.msg, bad_envs[i].msg) != NULL, "%s: '%s'",
                  bad_envs[i].name, err.msg);
        dc_env_free(&env);
    }
    CHECK_EQ_INT(dc_env_put(&env, "no-dash=1", &err), CR_E_INVALID);

    /* services.txt */
    snprintf(path, sizeof path, "%s/services.txt", dir);
    write_file(path, "# c\nregistry corral-registry\n"
                     "scheduler  corral-scheduler --x \"y z\"\n");
    dc_services_t s;
    CHECK_EQ_INT(dc_services_load(path, &s, &err), CR_OK);
    CHECK_EQ_INT(s.n, 2);
    const dc_service_t *sc = dc_services_find(&s, "scheduler");
    CHECK(sc && sc->argv.n == 3 && !strcmp(sc->argv.w[2], "y z"));
    CHECK(dc_services_find(&s, "gateway") == NULL);
    dc_services_free(&s);
    write_file(path, "onlyname\n");
    CHECK_EQ_INT(dc_services_load(path, &s, &err), CR_E_INVALID);
    write_file(path, "# nothing\n");
    CHECK_EQ_INT(dc_services_load(path, &s, &err), CR_E_INVALID);

    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

int main(void)
{
    test_yaml_good();
    test_yaml_bad();
    test_words();
    test_files();
    return check_finish("test_deploy_parsers");
}
