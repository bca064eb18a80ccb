/* test_modelfile.c: the Modelfile parser and writer: every instruction,
 * quoting forms, multi-line values, comments, case-insensitive keywords,
 * stop accumulation, typed parameters, errors with line numbers, encodings,
 * path expansion, and hostile input. */
#include "lib/prelude.h"
#include "cli/modelfile.h"
#include "tests/unit/check.h"

#include <pwd.h>
#include <unistd.h>

static cli_modelfile_t *parse_ok(const char *text)
{
    cli_modelfile_t *mf = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = cli_modelfile_parse(text, strlen(text), &mf, &err);
    CHECK_MSG(st == CR_OK && mf, "parse failed: %s\n--- text ---\n%s", err.msg, text);
    return mf;
}

/* Expects a parse error whose message is exactly `msg`. */
static void parse_err(const char *text, const char *msg)
{
    cli_modelfile_t *mf = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = cli_modelfile_parse(text, strlen(text), &mf, &err);
    CHECK_MSG(st != CR_OK && mf == NULL, "parsed but should not: %s", text);
    CHECK_EQ_STR(err.msg, msg);
    cli_modelfile_destroy(&mf);
}

static const cli_mf_command_t *cmd(const cli_modelfile_t *mf, size_t i)
{
    static const cli_mf_command_t none = {.args = "(missing)"};
    return mf && i < mf->n ? &mf->cmds[i] : &none;
}

static void test_every_instruction(void)
{
    cli_modelfile_t *mf = parse_ok("FROM llama3.2\n"
                                   "PARAMETER temperature 0.7\n"
                                   "TEMPLATE {{ .Prompt }}\n"
                                   "SYSTEM You are a pirate.\n"
                                   "ADAPTER ./lora.gguf\n"
                                   "LICENSE MIT\n"
                                   "MESSAGE user Hello there\n"
                                   "MESSAGE assistant Ahoy!\n"
                                   "REQUIRES 0.14.0\n"
                                   "RENDERER qwen3\n"
                                   "PARSER qwen3\n"
                                   "DRAFT ./draft.gguf\n");
    CHECK_EQ_INT(mf->n, 12);
    CHECK_EQ_INT(cmd(mf, 0)->kind, CLI_MF_FROM);
    CHECK_EQ_STR(cmd(mf, 0)->args, "llama3.2");
    CHECK_EQ_INT(cmd(mf, 0)->line, 1);
    CHECK_EQ_INT(cmd(mf, 1)->kind, CLI_MF_PARAMETER);
    CHECK_EQ_STR(cmd(mf, 1)->name, "temperature");
    CHECK_EQ_STR(cmd(mf, 1)->args, "0.7");
    CHECK_EQ_INT(cmd(mf, 2)->kind, CLI_MF_TEMPLATE);
    CHECK_EQ_STR(cmd(mf, 2)->args, "{{ .Prompt }}");
    CHECK_EQ_INT(cmd(mf, 3)->kind, CLI_MF_SYSTEM);
    CHECK_EQ_STR(cmd(mf, 3)->args, "You are a pirate.");
    CHECK_EQ_INT(cmd(mf, 4)->kind, CLI_MF_ADAPTER);
    CHECK_EQ_INT(cmd(mf, 5)->kind, CLI_MF_LICENSE);
    CHECK_EQ_INT(cmd(mf, 6)->kind, CLI_MF_MESSAGE);
    CHECK_EQ_STR(cmd(mf, 6)->name, "user");
    CHECK_EQ_STR(cmd(mf, 6)->args, "Hello there");
    CHECK_EQ_STR(cmd(mf, 7)->name, "assistant");
    CHECK_EQ_INT(cmd(mf, 8)->kind, CLI_MF_REQUIRES);
    CHECK_EQ_INT(cmd(mf, 9)->kind, CLI_MF_RENDERER);
    CHECK_EQ_INT(cmd(mf, 10)->kind, CLI_MF_PARSER);
    CHECK_EQ_INT(cmd(mf, 11)->kind, CLI_MF_DRAFT);
    CHECK_EQ_INT(cmd(mf, 11)->line, 12);
    CHECK_EQ_INT(mf->n_warnings, 0);
    cli_modelfile_destroy(&mf);
    CHECK(mf == NULL);
    cli_modelfile_destroy(&mf);
    cli_modelfile_destroy(NULL);
}

static void test_quoting(void)
{
    cli_modelfile_t *mf = parse_ok("FROM m\n"
                                   "SYSTEM \"  padded  \"\n"
                                   "TEMPLATE \"\"\"one \"quoted\" word\"\"\"\n"
                                   "LICENSE \"a\"b\"\n"
                                   "PARAMETER stop \"<|end|>\"\n"
                                   "PARAMETER stop \"\"\"\"\"\"\n"
                                   "SYSTEM    lots of   inner   space   \n"
                                   "LICENSE \"\"\"\"\"\"\n");
    CHECK_EQ_STR(cmd(mf, 1)->args, "  padded  ");
    CHECK_EQ_STR(cmd(mf, 2)->args, "one \"quoted\" word");
    CHECK_EQ_STR(cmd(mf, 3)->args, "a\"b");
    CHECK_EQ_STR(cmd(mf, 4)->args, "<|end|>");
    CHECK_EQ_STR(cmd(mf, 5)->args, ""); /* """""" is empty */
    CHECK_EQ_STR(cmd(mf, 6)->args, "lots of   inner   space");
    CHECK_EQ_STR(cmd(mf, 7)->args, "");
    cli_modelfile_destroy(&mf);
}

static void test_multiline(void)
{
    cli_modelfile_t *mf = parse_ok("FROM m\n"
                                   "TEMPLATE \"\"\"{{ if .System }}<sys>{{ .System }}\n"
                                   "{{ end }}\n"
                                   "\n"
                                   "  indented\"\"\"\n"
                                   "SYSTEM \"line one\n"
                                   "line two\"\n"
                                   "PARAMETER num_ctx 4096\n");
    CHECK_EQ_INT(mf->n, 4);
    CHECK_EQ_STR(cmd(mf, 1)->args, "{{ if .System }}<sys>{{ .System }}\n{{ end }}\n\n  indented");
    CHECK_EQ_INT(cmd(mf, 1)->line, 2);
    CHECK_EQ_STR(cmd(mf, 2)->args, "line one\nline two");
    CHECK_EQ_INT(cmd(mf, 2)->line, 6);
    CHECK_EQ_INT(cmd(mf, 3)->line, 8); /* line numbers keep counting */
    cli_modelfile_destroy(&mf);

    /* A """ block whose first line ends in a lone quote keeps going. */
    mf = parse_ok("FROM m\nSYSTEM \"\"\"say \"hi\"\nand bye\"\"\"\n");
    CHECK_EQ_STR(cmd(mf, 1)->args, "say \"hi\"\nand bye");
    cli_modelfile_destroy(&mf);

    /* CRLF line ends: the \r does not end up in single-line values. */
    mf = parse_ok("FROM m\r\nSYSTEM hi\r\nPARAMETER top_k 5\r\n");
    CHECK_EQ_INT(mf->n, 3);
    CHECK_EQ_STR(cmd(mf, 1)->args, "hi");
    CHECK_EQ_INT(cmd(mf, 2)->line, 3);
    cli_modelfile_destroy(&mf);

    /* No newline at the end of the file. */
    mf = parse_ok("FROM m\nSYSTEM \"\"\"last\nvalue\"\"\"");
    CHECK_EQ_STR(cmd(mf, 1)->args, "last\nvalue");
    cli_modelfile_destroy(&mf);
}

static void test_comments_blank(void)
{
    cli_modelfile_t *mf = parse_ok("# leading comment\n"
                                   "\n"
                                   "   \t\n"
                                   "  # indented comment\n"
                                   "FROM m # not a comment: part of the value\n"
                                   "SYSTEM \"\"\"keep\n# this line\"\"\"\n"
                                   "# trailing comment");
    CHECK_EQ_INT(mf->n, 2);
    CHECK_EQ_STR(cmd(mf, 0)->args, "m # not a comment: part of the value");
    CHECK_EQ_INT(cmd(mf, 0)->line, 5);
    CHECK_EQ_STR(cmd(mf, 1)->args, "keep\n# this line");
    cli_modelfile_destroy(&mf);
}

static void test_case_insensitive(void)
{
    cli_modelfile_t *mf = parse_ok("from m\nParameter top_k 3\nsYsTeM hi\nmessage user x\n");
    CHECK_EQ_INT(cmd(mf, 0)->kind, CLI_MF_FROM);
    CHECK_EQ_INT(cmd(mf, 1)->kind, CLI_MF_PARAMETER);
    CHECK_EQ_INT(cmd(mf, 2)->kind, CLI_MF_SYSTEM);
    CHECK_EQ_INT(cmd(mf, 3)->kind, CLI_MF_MESSAGE);
    cli_modelfile_destroy(&mf);
    /* ...but parameter names and roles are case-sensitive. */
    parse_err("FROM m\nPARAMETER Temperature 1\n", "(line 2): unknown parameter 'Temperature'");
    parse_err("FROM m\nMESSAGE User hi\n",
              "(line 2): message role must be one of \"system\", \"user\", or \"assistant\"");
}

static void test_parameters_typed(void)
{
    cli_modelfile_t *mf = parse_ok("FROM m\n"
                                   "PARAMETER stop <|eot_id|>\n"
                                   "PARAMETER temperature 0.5\n"
                                   "PARAMETER stop \"<|end|>\"\n"
                                   "PARAMETER num_ctx 8192\n"
                                   "PARAMETER use_mmap false\n"
                                   "PARAMETER seed -1\n"
                                   "PARAMETER stop User:\n"
                                   "PARAMETER mirostat 1\n");
    CHECK_EQ_INT(mf->n_warnings, 1);
    CHECK_EQ_STR(mf->n_warnings ? mf->warnings[0] : "", "parameter mirostat is deprecated");
    json_t *p = NULL;
    cr_err_t err;
    CHECK_EQ_INT(cli_modelfile_params_json(mf, &p, &err), CR_OK);
    char *s = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
    CHECK_EQ_STR(s, "{\"num_ctx\":8192,\"seed\":-1,\"stop\":[\"<|eot_id|>\",\"<|end|>\","
                    "\"User:\"],\"temperature\":0.5,\"use_mmap\":false}");
    free(s);
    CHECK(json_is_integer(json_object_get(p, "num_ctx")));
    CHECK(json_is_real(json_object_get(p, "temperature")));
    json_decref(p);
    cli_modelfile_destroy(&mf);

    /* A later value of a scalar parameter wins. */
    mf = parse_ok("FROM m\nPARAMETER top_k 10\nPARAMETER top_k 20\n");
    CHECK_EQ_INT(cli_modelfile_params_json(mf, &p, NULL), CR_OK);
    CHECK_EQ_INT(json_integer_value(json_object_get(p, "top_k")), 20);
    json_decref(p);
    cli_modelfile_destroy(&mf);

    /* No parameters: an empty object. */
    mf = parse_ok("FROM m\n");
    CHECK_EQ_INT(cli_modelfile_params_json(mf, &p, NULL), CR_OK);
    CHECK_EQ_INT(json_object_size(p), 0);
    json_decref(p);
    cli_modelfile_destroy(&mf);

    /* Each type's bad values, with the line number. */
    parse_err("FROM m\n\nPARAMETER temperature hot\n",
              "(line 3): invalid float value [hot] for parameter 'temperature'");
    parse_err("FROM m\nPARAMETER num_ctx 4k\n",
              "(line 2): invalid int value [4k] for parameter 'num_ctx'");
    parse_err("FROM m\nPARAMETER top_k 1.5\n",
              "(line 2): invalid int value [1.5] for parameter 'top_k'");
    parse_err("FROM m\nPARAMETER num_ctx 99999999999999999999999\n",
              "(line 2): invalid int value [99999999999999999999999] for parameter 'num_ctx'");
    parse_err("FROM m\nPARAMETER use_mmap yes\n",
              "(line 2): invalid bool value [yes] for parameter 'use_mmap'");
    parse_err("FROM m\nPARAMETER top_p nan\n",
              "(line 2): invalid float value [nan] for parameter 'top_p'");
    parse_err("FROM m\nPARAMETER temperature \"\"\n",
              "(line 2): invalid float value [] for parameter 'temperature'");
    parse_err("FROM m\nPARAMETER bogus 1\n", "(line 2): unknown parameter 'bogus'");
    parse_err("FROM m\nPARAMETER tfs_z 1\n", "(line 2): unknown parameter 'tfs_z'");
    parse_err("FROM m\nPARAMETER temperature\n",
              "(line 2): missing value for PARAMETER temperature");
    parse_err("FROM m\nPARAMETER temp-erature 1\n",
              "(line 2): invalid character in parameter name");

    /* Go's bool spellings. */
    json_t *v = NULL;
    const char *trues[] = {"1", "t", "T", "TRUE", "true", "True"};
    for (size_t i = 0; i < CR_ARRAY_LEN(trues); i++) {
        CHECK_EQ_INT(cli_param_value("use_mmap", trues[i], &v, NULL), CR_OK);
        CHECK(json_is_true(v));
        json_decref(v);
    }
    CHECK_EQ_INT(cli_param_value("use_mmap", "tRuE", &v, NULL), CR_E_INVALID);
    CHECK_EQ_INT(cli_param_value("mirostat", "1", &v, NULL), CR_E_UNSUPPORTED);
    CHECK_EQ_INT(cli_param_type("stop"), CLI_PARAM_STRINGS);
    CHECK_EQ_INT(cli_param_type("num_predict"), CLI_PARAM_INT);
    CHECK_EQ_INT(cli_param_type("min_p"), CLI_PARAM_FLOAT);
    CHECK_EQ_INT(cli_param_type("nope"), CLI_PARAM_UNKNOWN);
}

static void test_errors(void)
{
    parse_err("", "no FROM line");
    parse_err("# only a comment\n", "no FROM line");
    parse_err("SYSTEM hi\n", "no FROM line");
    const char *cmds = "command must be one of \"from\", \"license\", \"template\", \"system\", "
                       "\"adapter\", \"draft\", \"renderer\", \"parser\", \"parameter\", "
                       "\"message\", or \"requires\"";
    char want[512];
    snprintf(want, sizeof want, "(line 3): %s", cmds);
    parse_err("FROM m\n\nINSTRUCT x\n", want);
    snprintf(want, sizeof want, "(line 2): %s", cmds);
    parse_err("FROM m\nFROM1 x\n", want);
    parse_err("FROM m\nSYSTEM\n", want); /* a keyword needs a value after a space */
    snprintf(want, sizeof want, "(line 1): %s", cmds);
    parse_err("-FROM m\n", want);
    parse_err("FROM m\nMESSAGE tool result\n",
              "(line 2): message role must be one of \"system\", \"user\", or \"assistant\"");
    parse_err("FROM m\nMESSAGE user: hi\n",
              "(line 2): message role must be one of \"system\", \"user\", or \"assistant\"");
    parse_err("FROM m\nSYSTEM \"\"\"never closed\nstill open\n",
              "(line 2): unexpected EOF: unterminated quote");
    parse_err("FROM m\nSYSTEM \"open\n", "(line 2): unexpected EOF: unterminated quote");
    parse_err("FROM m\nPARAMETER", "(line 2): unexpected EOF");
    parse_err("FROM", "(line 1): unexpected EOF");
    parse_err("FROM m\nREQUIRES latest\n",
              "(line 2): requires must be a valid semver (e.g. 0.14.0)");
    parse_err("FROM m\nREQUIRES 01.2.3\n",
              "(line 2): requires must be a valid semver (e.g. 0.14.0)");
    cli_modelfile_t *mf = parse_ok("FROM m\nREQUIRES v1.2.3-rc.1+build5\nREQUIRES 0.14\n");
    cli_modelfile_destroy(&mf);

    /* Too large. */
    cli_modelfile_t *out = NULL;
    cr_err_t err;
    CHECK_EQ_INT(cli_modelfile_parse("FROM m", (size_t)CLI_MF_MAX_BYTES + 1, &out, &err),
                 CR_E_TOO_LARGE);
    CHECK(out == NULL);
}

static void test_encodings(void)
{
    /* UTF-8 BOM. */
    cli_modelfile_t *mf = parse_ok("\xEF\xBB\xBF" "FROM m\nSYSTEM caf\xC3\xA9\n");
    CHECK_EQ_STR(cmd(mf, 1)->args, "caf\xC3\xA9");
    cli_modelfile_destroy(&mf);

    /* UTF-16 LE with BOM, including a surrogate pair (U+1F600). */
    const char *ascii = "FROM m\nSYSTEM x";
    unsigned char u16[64];
    size_t n = 0;
    u16[n++] = 0xFF;
    u16[n++] = 0xFE;
    for (const char *c = ascii; *c; c++) {
        u16[n++] = (unsigned char)*c;
        u16[n++] = 0;
    }
    u16[n++] = 0x3D; /* D83D */
    u16[n++] = 0xD8;
    u16[n++] = 0x00; /* DE00 */
    u16[n++] = 0xDE;
    cr_err_t err;
    CHECK_EQ_INT(cli_modelfile_parse((const char *)u16, n, &mf, &err), CR_OK);
    CHECK_EQ_STR(cmd(mf, 1)->args, "x\xF0\x9F\x98\x80");
    cli_modelfile_destroy(&mf);

    /* UTF-16 BE. */
    n = 0;
    u16[n++] = 0xFE;
    u16[n++] = 0xFF;
    for (const char *c = "FROM be"; *c; c++) {
        u16[n++] = 0;
        u16[n++] = (unsigned char)*c;
    }
    CHECK_EQ_INT(cli_modelfile_parse((const char *)u16, n, &mf, &err), CR_OK);
    CHECK_EQ_STR(cmd(mf, 0)->args, "be");
    cli_modelfile_destroy(&mf);

    /* Control characters are dropped; invalid UTF-8 becomes U+FFFD. */
    mf = parse_ok("FROM m\nSYSTEM a\x01" "b\x7f" "c\xC2\x85" "d\xFF" "e\n");
    CHECK_EQ_STR(cmd(mf, 1)->args, "abcd\xEF\xBF\xBD" "e");
    cli_modelfile_destroy(&mf);

    /* An embedded NUL byte is a control character too. */
    const char with_nul[] = "FROM m\nSYSTEM a\0b\n";
    CHECK_EQ_INT(cli_modelfile_parse(with_nul, sizeof with_nul - 1, &mf, &err), CR_OK);
    CHECK_EQ_STR(cmd(mf, 1)->args, "ab");
    cli_modelfile_destroy(&mf);
}

static void test_serialize_roundtrip(void)
{
    const char *text = "FROM /blobs/sha256-abc\n"
                       "TEMPLATE \"\"\"{{ .System }}\n{{ .Prompt }} \"x\"\"\"\"\n"
                       "SYSTEM \"two\nlines\"\n"
                       "SYSTEM \" edge space\"\n"
                       "LICENSE \"\"\"\"quoted start\"\"\"\"\n"
                       "PARAMETER stop <|eot_id|>\n"
                       "PARAMETER temperature 0.6\n"
                       "MESSAGE user how are you?\n"
                       "ADAPTER /a/lora.gguf\n"
                       "RENDERER harmony\n"
                       "PARSER qwen3-coder\n";
    cli_modelfile_t *mf = parse_ok(text);
    CHECK_EQ_STR(cmd(mf, 4)->args, "\"quoted start\"");
    char *out = cli_modelfile_serialize(mf);
    CHECK_EQ_STR(out, "FROM /blobs/sha256-abc\n"
                      "TEMPLATE \"\"\"{{ .System }}\n{{ .Prompt }} \"x\"\"\"\"\n"
                      "SYSTEM \"two\nlines\"\n"
                      "SYSTEM \" edge space\"\n"
                      "LICENSE \"\"\"\"quoted start\"\"\"\"\n"
                      "PARAMETER stop <|eot_id|>\n"
                      "PARAMETER temperature 0.6\n"
                      "MESSAGE user how are you?\n"
                      "ADAPTER /a/lora.gguf\n"
                      "RENDERER harmony\n"
                      "PARSER qwen3-coder\n");
    cli_modelfile_t *again = parse_ok(out);
    CHECK_EQ_INT(again->n, mf->n);
    for (size_t i = 0; i < mf->n && i < again->n; i++) {
        CHECK_EQ_INT(again->cmds[i].kind, mf->cmds[i].kind);
        CHECK_EQ_STR(again->cmds[i].args, mf->cmds[i].args);
    }
    free(out);
    cli_modelfile_destroy(&again);
    cli_modelfile_destroy(&mf);

    /* Built by hand (as /save does). */
    cli_modelfile_t *b = cli_modelfile_new();
    CHECK(b != NULL);
    CHECK_EQ_INT(cli_modelfile_add(b, CLI_MF_FROM, NULL, "llama3.2", 0), CR_OK);
    CHECK_EQ_INT(cli_modelfile_add(b, CLI_MF_MESSAGE, "assistant", "hi\nthere", 0), CR_OK);
    out = cli_modelfile_serialize(b);
    CHECK_EQ_STR(out, "FROM llama3.2\nMESSAGE assistant \"hi\nthere\"\n");
    free(out);
    cli_modelfile_destroy(&b);
    CHECK_EQ_STR(cli_mf_kind_name(CLI_MF_ADAPTER), "ADAPTER");
    CHECK_EQ_STR(cli_mf_kind_name((cli_mf_kind_t)99), "?");
}

/* Found by tests/fuzz/fuzz_modelfile: a quoted FROM whose value starts
 * with a blank and holds a quote was written back bare, and the text did
 * not parse again ("unterminated quote"). */
static void test_serialize_quoted_from(void)
{
    static const char text[] = "FROM \t\t\"\t\"-M\tx\"\n";
    cli_modelfile_t *mf = parse_ok(text);
    CHECK_EQ_STR(cmd(mf, 0)->args, "\t\"-M\tx");
    char *out = cli_modelfile_serialize(mf);
    CHECK_EQ_STR(out, "FROM \"\"\"\t\"-M\tx\"\"\"\n");
    cli_modelfile_t *again = parse_ok(out);
    CHECK_EQ_STR(cmd(again, 0)->args, cmd(mf, 0)->args);
    free(out);
    cli_modelfile_destroy(&again);
    cli_modelfile_destroy(&mf);
}

static void test_paths(void)
{
    char out[4096];
    cr_err_t err;
    CHECK_EQ_INT(cli_mf_expand_path("./model.gguf", "/models/dir", out, sizeof out, &err),
                 CR_OK);
    CHECK_EQ_STR(out, "/models/dir/model.gguf");
    CHECK_EQ_INT(cli_mf_expand_path("../x//y/./z.gguf", "/a/b", out, sizeof out, &err), CR_OK);
    CHECK_EQ_STR(out, "/a/x/y/z.gguf");
    CHECK_EQ_INT(cli_mf_expand_path("/abs/../p.gguf", "/ignored", out, sizeof out, &err),
                 CR_OK);
    CHECK_EQ_STR(out, "/p.gguf");
    CHECK_EQ_INT(cli_mf_expand_path("llama3.2", "/m", out, sizeof out, &err), CR_OK);
    CHECK_EQ_STR(out, "/m/llama3.2");
    CHECK_EQ_INT(cli_mf_expand_path("../../../../..", "/a", out, sizeof out, &err), CR_OK);
    CHECK_EQ_STR(out, "/");

    setenv("HOME", "/home/tester", 1);
    CHECK_EQ_INT(cli_mf_expand_path("~/models/m.gguf", "/x", out, sizeof out, &err), CR_OK);
    CHECK_EQ_STR(out, "/home/tester/models/m.gguf");
    CHECK_EQ_INT(cli_mf_expand_path("~", "/x", out, sizeof out, &err), CR_OK);
    CHECK_EQ_STR(out, "/home/tester");

    struct passwd *root = getpwnam("root");
    if (root) {
        char want[4096];
        snprintf(want, sizeof want, "%s/w.gguf", root->pw_dir);
        CHECK_EQ_INT(cli_mf_expand_path("~root/w.gguf", "/x", out, sizeof out, &err), CR_OK);
        CHECK_EQ_STR(out, strcmp(root->pw_dir, "/") ? want : "/w.gguf");
    }
    CHECK_EQ_INT(cli_mf_expand_path("~no_such_user_xyz/w", "/x", out, sizeof out, &err),
                 CR_E_NOT_FOUND);
    CHECK_EQ_STR(err.msg, "failed to find user 'no_such_user_xyz'");

    /* A relative dir is taken from the working directory. */
    char cwd[4096], want[4200];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(want, sizeof want, "%s/sub/f.gguf", strcmp(cwd, "/") ? cwd : "");
    CHECK_EQ_INT(cli_mf_expand_path("f.gguf", "sub", out, sizeof out, &err), CR_OK);
    CHECK_EQ_STR(out, want);

    /* Too small an output buffer. */
    CHECK_EQ_INT(cli_mf_expand_path("/a/long/path", "/", out, 5, &err), CR_E_TOO_LARGE);
}

/* Garbage must never crash: random bytes, every truncation of a real file. */
static void test_hostile(void)
{
    const char *good = "FROM m\nTEMPLATE \"\"\"a\nb\"\"\"\nPARAMETER stop x\nMESSAGE user \"q\"\n";
    size_t n = strlen(good);
    for (size_t cut = 0; cut <= n; cut++) {
        cli_modelfile_t *mf = NULL;
        cr_status_t st = cli_modelfile_parse(good, cut, &mf, NULL);
        CHECK((st == CR_OK) == (mf != NULL));
        cli_modelfile_destroy(&mf);
    }
    uint64_t x = 88172645463325252ULL;
    char buf[512];
    for (int round = 0; round < 2000; round++) {
        size_t len = (size_t)(round % 500);
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            /* biased toward the characters the lexer cares about */
            static const char alphabet[] = "FROM PARAMETER stop\"\"\"#\n\r\t MESSAGE user x";
            buf[i] = (x & 3) ? alphabet[(x >> 8) % (sizeof alphabet - 1)] : (char)(x >> 16);
        }
        cli_modelfile_t *mf = NULL;
        cr_status_t st = cli_modelfile_parse(buf, len, &mf, NULL);
        CHECK((st == CR_OK) == (mf != NULL));
        if (mf) {
            char *s = cli_modelfile_serialize(mf);
            CHECK(s != NULL);
            free(s);
        }
        cli_modelfile_destroy(&mf);
    }
    /* A very long single line value is fine. */
    size_t big = 1 << 20;
    char *t = malloc(big + 16);
    memcpy(t, "FROM ", 5);
    memset(t + 5, 'a', big);
    t[big + 5] = '\0';
    cli_modelfile_t *mf = NULL;
    CHECK_EQ_INT(cli_modelfile_parse(t, big + 5, &mf, NULL), CR_OK);
    CHECK_EQ_INT(mf ? strlen(mf->cmds[0].args) : 0, big);
    cli_modelfile_destroy(&mf);
    free(t);
}

int main(void)
{
    test_every_instruction();
    test_quoting();
    test_multiline();
    test_comments_blank();
    test_case_insensitive();
    test_parameters_typed();
    test_errors();
    test_encodings();
    test_serialize_roundtrip();
    test_serialize_quoted_from();
    test_paths();
    test_hostile();
    return check_finish("test_modelfile");
}
