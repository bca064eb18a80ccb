/* test_e2e_cli_terminal.c: the CLI as a user sees it, on a pseudo-terminal
 * and without one, against the real services and a fake OCI registry
 * (tests/unit/fake_oci.h) that serves a synthetic GGUF over plain http.
 *
 * Checked:
 *   - `pull` without a terminal: stdout empty; stderr one line per phase
 *     and per layer (each layer once), no control bytes;
 *   - `pull` on a terminal: bars with Ollama's "▕" and sizes, redrawn in
 *     place; the last frame holds each layer once;
 *   - `run --insecure REMOTE PROMPT` pulls over http and answers; without
 *     --insecure the automatic pull is refused;
 *   - `create --insecure` FROM a model the server lacks pulls it first;
 *   - `run` on a terminal wraps the answer at the terminal's width on a
 *     word boundary (cursor back over the word, erase, newline), and
 *     `--nowordwrap` does not;
 *   - the REPL shows the placeholder `Send a message (/? for help)`,
 *     `/show parameters` in Ollama's layout, and `/set nowordwrap` turns
 *     wrapping off;
 *   - `run EMBEDDING-MODEL "text"` prints the vector /api/embed gives,
 *     `--dimensions` cuts it, `--truncate=false` refuses an over-long input;
 *   - `show -v` adds the Metadata and Tensors sections.
 * The embedding part runs on a second `corral serve` without the script. */
#include "lib/prelude.h"

#include <stdlib.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/fake_oci.h"

static e2e_t T;
static fake_t F;
static char remote_g[128];

/* Longer than a 40-column line, in words. */
static const char ANSWER[] =
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron";

static size_t count(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; p && (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

static bool read_file(const char *path, unsigned char **data, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return false;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc(n > 0 ? (size_t)n : 1);
    *len = *data && n > 0 ? fread(*data, 1, (size_t)n, f) : 0;
    fclose(f);
    return *len == (size_t)n;
}

/* The fake registry serves library/m:t: a config, a synthetic GGUF and a
 * license. */
static bool registry_setup(void)
{
    char gguf[1200];
    snprintf(gguf, sizeof gguf, "%s/remote.gguf", T.tmp);
    if (e2e_run_bin(&T, "corral-gguf-synth", "--out", gguf, "--seed", "3", NULL) != 0)
        return false;
    fake_start(&F);
    const char *cfg = "{\"model_format\":\"gguf\",\"model_family\":\"llama\","
                      "\"model_families\":[\"llama\"],\"model_type\":\"1M\","
                      "\"file_type\":\"F32\",\"architecture\":\"amd64\",\"os\":\"linux\"}";
    blob_t *b = &F.blobs[F.n_blobs++];
    b->len = strlen(cfg);
    b->data = malloc(b->len);
    memcpy(b->data, cfg, b->len);
    fake_sha256_hex(b->data, b->len, b->hex);
    b = &F.blobs[F.n_blobs++];
    if (!read_file(gguf, &b->data, &b->len))
        return false;
    fake_sha256_hex(b->data, b->len, b->hex);
    fake_add_blob(&F, 3000, 9); /* the license */
    fake_set_manifest(&F);
    snprintf(remote_g, sizeof remote_g, "127.0.0.1:%d/library/m:t", F.port);
    return true;
}

static void delete_model(const char *name)
{
    char body[256];
    snprintf(body, sizeof body, "{\"model\":\"%s\"}", name);
    e2e_resp_t r = e2e_http(&T, "DELETE", "/api/delete", body, NULL, NULL);
    e2e_resp_free(&r);
}

static void test_pull_plain(void)
{
    char *out = NULL, *err = NULL;
    int rc = e2e_cli_err(&T, NULL, &out, &err, "pull", "--insecure", remote_g, NULL);
    CHECK_MSG(rc == 0, "pull: %d %s", rc, err ? err : "");
    CHECK_EQ_STR(out, "");
    CHECK_MSG(err && !strchr(err, '\x1b') && !strchr(err, '\r'), "control bytes: %s", err);
    CHECK(err && !strncmp(err, "pulling manifest\n", 17));
    for (int i = 0; i < F.n_blobs; i++) {
        char line[64];
        snprintf(line, sizeof line, "pulling %.12s: 100%%", F.blobs[i].hex);
        CHECK_MSG(count(err, line) == 1, "%s: %zu times in\n%s", line, count(err, line), err);
    }
    CHECK(err && strstr(err, "\nverifying sha256 digest\nwriting manifest\nsuccess\n"));
    CHECK_EQ_INT(count(err, "\n"), 3 + F.n_blobs + 1);
    free(out);
    free(err);
}

static void test_pull_tty(void)
{
    delete_model(remote_g);
    F.delay_ms = 150; /* some frames while the layers come */
    char *out = NULL;
    int rc = e2e_cli_pty(&T, NULL, 100, &out, "pull", "--insecure", remote_g, NULL);
    F.delay_ms = 0;
    CHECK_MSG(rc == 0, "pull on a terminal: %d %s", rc, out ? out : "");
    CHECK(out && strstr(out, "▕") && strstr(out, "\x1b[K"));
    const char *last = NULL;
    for (const char *s = out; s && (s = strstr(s, "\x1b[1G")); s++)
        last = s + 4;
    CHECK(last != NULL);
    for (int i = 0; last && i < F.n_blobs; i++) {
        char line[64];
        snprintf(line, sizeof line, "pulling %.12s: 100%% ▕", F.blobs[i].hex);
        CHECK_MSG(count(last, line) == 1, "%s in the last frame: %s", line, last);
    }
    CHECK(last && count(last, "pulling manifest") == 1 && count(last, "success") == 1);
    free(out);
}

static void test_run_insecure(void)
{
    delete_model(remote_g);
    char *out = NULL, *err = NULL;
    int rc = e2e_cli_err(&T, NULL, &out, &err, "run", remote_g, "hi", NULL);
    CHECK_MSG(rc != 0, "run over http without --insecure: %d %s", rc, out ? out : "");
    free(out);
    free(err);
    rc = e2e_cli_err(&T, NULL, &out, &err, "run", "--insecure", remote_g, "hi", NULL);
    CHECK_MSG(rc == 0, "run --insecure: %d %s", rc, err ? err : "");
    CHECK_MSG(out && strstr(out, ANSWER), "answer: %s", out ? out : "");
    CHECK(err && strstr(err, "pulling manifest\n"));
    free(out);
    free(err);
}

static void test_create_from_remote(void)
{
    delete_model(remote_g);
    char mf[1200], text[300];
    snprintf(mf, sizeof mf, "%s/remote.Modelfile", T.tmp);
    snprintf(text, sizeof text, "FROM %s\nSYSTEM \"\"\"from afar\"\"\"\n", remote_g);
    CHECK(e2e_write_file(mf, text));
    char *out = NULL, *err = NULL;
    int rc = e2e_cli_err(&T, NULL, &out, &err, "create", "--insecure", "child", "-f", mf, NULL);
    CHECK_MSG(rc == 0, "create FROM a remote model: %d %s", rc, err ? err : "");
    CHECK(err && strstr(err, "pulling manifest\n") && strstr(err, "success\n"));
    free(out);
    free(err);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/show", "{\"model\":\"child\"}", NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.body && strstr(r.body, "from afar"));
    e2e_resp_free(&r);
}

/* push without a terminal: each layer's line once. */
static void test_push_plain(void)
{
    char dst[160];
    snprintf(dst, sizeof dst, "127.0.0.1:%d/library/m:t2", F.port);
    char *out = NULL, *err = NULL;
    CHECK_EQ_INT(e2e_cli(&T, NULL, &out, "cp", "child", dst, NULL), 0);
    free(out);
    int rc = e2e_cli_err(&T, NULL, &out, &err, "push", "--insecure", dst, NULL);
    CHECK_MSG(rc == 0, "push: %d %s", rc, err ? err : "");
    CHECK_EQ_STR(out, "");
    CHECK_MSG(err && !strchr(err, '\x1b') && !strchr(err, '\r'), "control bytes: %s", err);
    CHECK(err && !strncmp(err, "retrieving manifest\n", 20) &&
          strstr(err, "\npushing manifest\nsuccess\n"));
    /* Every layer line ("pushing <12 hex> 100% <size>") is unique. */
    int layers = 0;
    for (const char *l = err; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t n = e ? (size_t)(e - l) : strlen(l);
        char line[200];
        snprintf(line, sizeof line, "%.*s\n", (int)CR_MIN(n, sizeof line - 2), l);
        if (!strncmp(line, "pushing ", 8) && strstr(line, "% ")) {
            layers++;
            CHECK_MSG(count(err, line) == 1, "%s repeated in\n%s", line, err);
        }
        l = e ? e + 1 : NULL;
    }
    CHECK_MSG(layers >= 3, "%d layer lines in\n%s", layers, err ? err : "");
    free(out);
    free(err);
}

static void test_wrap(void)
{
    char *out = NULL;
    int rc = e2e_cli_pty(&T, NULL, 40, &out, "run", "chat", "hello", NULL);
    CHECK_EQ_INT(rc, 0);
    /* The line breaks before column 35, taking a word back. */
    CHECK_MSG(out && strstr(out, "\x1b[K\r\n") && strstr(out, "\x1b["), "wrapped: %s",
              out ? out : "");
    free(out);
    rc = e2e_cli_pty(&T, NULL, 40, &out, "run", "--nowordwrap", "chat", "hello", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(out && strstr(out, ANSWER) && !strstr(out, "\x1b[K"), "not wrapped: %s",
              out ? out : "");
    free(out);
}

static void test_repl(void)
{
    char *out = NULL;
    int rc = e2e_cli_pty(&T,
                         "/show parameters\n/set parameter temperature 0.5\n"
                         "/show parameters\n/set nowordwrap\nhello\n\"\"\"a\nb\"\"\"\n/bye\n",
                         40, &out, "run", "chat", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(out && strstr(out, "\x1b[38;5;245mSend a message (/? for help)\x1b[0m"),
              "placeholder: %s", out ? out : "");
    CHECK_MSG(out && strstr(out, "\x1b[38;5;245mUse \"\"\" to end multi-line input\x1b[0m"),
              "block placeholder: %s", out ? out : "");
    CHECK_MSG(out && strstr(out, "Model defined parameters:\r\n  num_ctx"),
              "parameters: %s", out ? out : "");
    CHECK(out && strstr(out, "User defined parameters:\r\n  temperature                    0.5\r\n"));
    /* nowordwrap: the answer comes whole. */
    CHECK(out && strstr(out, ANSWER));
    free(out);
}

static void test_embedding(void)
{
    CHECK(e2e_synth_create(&T, "embedder", NULL, "--arch", "bert", "--ctx", "32", NULL));
    char *out = NULL, *err = NULL;
    int rc = e2e_cli_err(&T, NULL, &out, &err, "run", "embedder", "hello world", NULL);
    CHECK_MSG(rc == 0, "run embedder: %d %s", rc, err ? err : "");
    e2e_resp_t r = e2e_http(&T, "POST", "/api/embed",
                            "{\"model\":\"embedder\",\"input\":\"hello world\"}", NULL, NULL);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    char *want = json_dumps(e2e_jget(j, "embeddings.0"), JSON_COMPACT);
    json_t *got = json_loads(out ? out : "", 0, NULL);
    CHECK_MSG(got && json_is_array(got) && json_array_size(got) > 4 &&
                  json_equal(got, e2e_jget(j, "embeddings.0")),
              "run printed %s, /api/embed gave %s", out ? out : "", want ? want : "");
    /* Same text as the gateway's vector, byte for byte (one line). */
    const char *v = r.body ? strstr(r.body, "\"embeddings\":[[") : NULL;
    const char *end = v ? strchr(v, ']') : NULL;
    char *line = NULL;
    if (v && end && asprintf(&line, "%.*s]\n", (int)(end - (v + 14)), v + 14) > 0)
        CHECK_EQ_STR(out, line);
    else
        CHECK_MSG(false, "no vector in %s", r.body ? r.body : "");
    free(line);
    free(want);
    json_decref(got);
    json_decref(j);
    e2e_resp_free(&r);
    free(out);
    free(err);

    rc = e2e_cli_err(&T, NULL, &out, &err, "run", "--dimensions", "4", "embedder", "hello",
                     NULL);
    got = json_loads(out ? out : "", 0, NULL);
    CHECK_MSG(rc == 0 && json_array_size(got) == 4, "--dimensions 4: %s", out ? out : "");
    json_decref(got);
    free(out);
    free(err);

    char long_text[4000] = "";
    for (int i = 0; i < 200; i++)
        strcat(long_text, "word ");
    rc = e2e_cli_err(&T, NULL, &out, &err, "run", "--truncate=false", "embedder", long_text,
                     NULL);
    CHECK(rc != 0 && err && strstr(err, "the input length exceeds the context length"));
    free(out);
    free(err);
    rc = e2e_cli_err(&T, NULL, &out, &err, "run", "embedder", long_text, NULL);
    CHECK_MSG(rc == 0, "truncated by default: %s", err ? err : "");
    free(out);
    free(err);

    rc = e2e_cli_err(&T, "", &out, &err, "run", "embedder", NULL);
    CHECK(rc != 0 && err && strstr(err, "embedding models require input text"));
    free(out);
    free(err);
}

static void test_show_verbose(void)
{
    char *out = NULL;
    int rc = e2e_cli(&T, NULL, &out, "show", "chat", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK(out && strstr(out, "  Model\n") && !strstr(out, "Metadata"));
    free(out);
    rc = e2e_cli(&T, NULL, &out, "show", "-v", "chat", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(out && strstr(out, "  Metadata\n") && strstr(out, "general.architecture") &&
                  strstr(out, "  Tensors\n") && strstr(out, "token_embd.weight"),
              "show -v: %s", out ? out : "");
    /* Arrays shortened as Ollama does. */
    CHECK(out && strstr(out, "tokenizer.ggml.tokens") && strstr(out, "more]"));
    free(out);
}

int main(void)
{
    char script[1200];
    snprintf(script, sizeof script, "/tmp/corral-e2e-cli-%d.txt", (int)getpid());
    char text[512];
    snprintf(text, sizeof text, "%s\n", ANSWER);
    if (!e2e_write_file(script, text))
        return 1;
    setenv("CORRAL_TEST_SCRIPT", script, 1);
    if (!e2e_start(&T)) {
        unlink(script);
        return 1;
    }
    if (e2e_synth_create(&T, "chat", "PARAMETER num_ctx 512\n", "--seed", "4", NULL)) {
        test_wrap();
        test_repl();
        test_show_verbose();
    } else {
        CHECK_MSG(false, "create chat");
    }
    if (registry_setup()) {
        test_pull_plain();
        test_pull_tty();
        test_run_insecure();
        test_create_from_remote();
        test_push_plain();
        fake_stop(&F);
    } else {
        CHECK_MSG(false, "the fake registry did not start");
    }
    e2e_stop(&T);
    unlink(script);
    /* Embedding models on services without the script (a scripted answer
     * must round-trip through every loaded model's vocabulary). */
    unsetenv("CORRAL_TEST_SCRIPT");
    memset(&T, 0, sizeof T);
    if (e2e_start(&T))
        test_embedding();
    else
        CHECK_MSG(false, "the services did not start again");
    e2e_stop(&T);
    return check_finish("e2e_cli_terminal");
}
