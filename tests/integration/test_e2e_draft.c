/* test_e2e_draft.c: speculative decoding with a draft model through the
 * whole services.
 *
 * Two synthetic llamas from one seed, quantized Q8_0 (the target) and
 * Q4_0 (the draft). `corral create fast` from `FROM ./target.gguf` +
 * `DRAFT small` (a created model's name) stores the draft; show reports
 * it; the runner loads it (its log line) and greedy answers of three
 * prompts at temperature 0 equal the target's alone, created without a
 * draft; the answers with draft_num_predict 16 (a load option: another
 * runner) too. An unknown draft is a 400 naming it, both from the CLI and
 * from /api/create, and stores no model; Ollama's draft_files is a 400
 * saying what to use instead. */
#include "lib/prelude.h"

#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

static const char *const prompts_g[] = {
    "the cat sat on the mat and the cat sat on the",
    "one two three four one two three four one two",
    "Once upon a time",
};

/* The greedy answer of model to prompt i, with extra options (a JSON
 * fragment starting with a comma, or ""); caller frees. */
static char *greedy(const char *model, int i, const char *extra)
{
    char body[1024];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"%s\",\"raw\":true,\"stream\":false,"
             "\"options\":{\"temperature\":0,\"num_predict\":40,\"seed\":1%s}}",
             model, prompts_g[i], extra);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/generate", body, NULL, NULL);
    CHECK_MSG(r.status == 200, "%s: %ld %s", model, r.status, r.body ? r.body : "");
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    char *text = strdup(e2e_jstr(j, "response"));
    json_decref(j);
    e2e_resp_free(&r);
    return text;
}

static bool model_listed(const char *name)
{
    e2e_resp_t r = e2e_http(&T, "GET", "/api/tags", NULL, NULL, NULL);
    bool found = r.body && strstr(r.body, name) != NULL;
    e2e_resp_free(&r);
    return found;
}

int main(void)
{
    if (!e2e_start(&T))
        return 1;
    char target[1200], draft[1200];
    snprintf(target, sizeof target, "%s/target.gguf", T.tmp);
    snprintf(draft, sizeof draft, "%s/draft.gguf", T.tmp);
    CHECK(e2e_run_bin(&T, "corral-gguf-synth", "--seed", "5", "--ctx", "512", "--type", "q8_0",
                      "--out", target, NULL) == 0);
    CHECK(e2e_run_bin(&T, "corral-gguf-synth", "--seed", "5", "--ctx", "512", "--type", "q4_0",
                      "--out", draft, NULL) == 0);
    CHECK(e2e_create(&T, "plain", "FROM ./target.gguf\n"));
    CHECK(e2e_create(&T, "small", "FROM ./draft.gguf\n"));
    CHECK(e2e_create(&T, "fast", "FROM ./target.gguf\nDRAFT small\n"));

    e2e_resp_t r = e2e_http(&T, "POST", "/api/show", "{\"model\":\"fast\"}", NULL, NULL);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_EQ_STR(e2e_jstr(j, "draft"), "small:latest");
    CHECK_MSG(strstr(e2e_jstr(j, "modelfile"), "\nDRAFT small:latest\n") != NULL, "%s",
              e2e_jstr(j, "modelfile"));
    json_decref(j);
    e2e_resp_free(&r);

    for (int i = 0; i < (int)CR_ARRAY_LEN(prompts_g); i++) {
        char *want = greedy("plain", i, "");
        char *got = greedy("fast", i, "");
        CHECK_MSG(!strcmp(want, got), "prompt %d: with the draft '%s', without '%s'", i, got,
                  want);
        free(got);
        got = greedy("fast", i, ",\"draft_num_predict\":16");
        CHECK_MSG(!strcmp(want, got), "prompt %d, K 16: with the draft '%s', without '%s'", i,
                  got, want);
        free(got);
        free(want);
    }
    CHECK_MSG(e2e_log_count(&T, "draft model loaded, 4 tokens per step") >= 1,
              "the runner did not load the draft");
    CHECK(e2e_log_count(&T, "draft model loaded, 16 tokens per step") >= 1);

    /* an unknown draft: 400 naming it, from the CLI and the API */
    char *out = NULL, *err = NULL;
    char mf[1300];
    snprintf(mf, sizeof mf, "%s/Modelfile", T.tmp);
    CHECK(e2e_write_file(mf, "FROM plain\nDRAFT nosuch\n"));
    CHECK(e2e_cli_err(&T, NULL, &out, &err, "create", "bad", "-f", mf, NULL) != 0);
    CHECK_MSG(err && strstr(err, "draft model \"nosuch\" not found"), "%s", err ? err : "");
    free(out);
    free(err);
    r = e2e_http(&T, "POST", "/api/create",
                 "{\"model\":\"bad\",\"from\":\"plain\",\"draft\":\"nosuch\",\"stream\":false}",
                 NULL, NULL);
    CHECK_MSG(r.status == 400 && r.body && strstr(r.body, "draft model \\\"nosuch\\\" not found"),
              "%ld %s", r.status, r.body ? r.body : "");
    e2e_resp_free(&r);
    r = e2e_http(&T, "POST", "/api/create",
                 "{\"model\":\"bad\",\"from\":\"plain\",\"draft_files\":{\"d.gguf\":"
                 "\"sha256:0000000000000000000000000000000000000000000000000000000000000000\"}}",
                 NULL, NULL);
    CHECK_MSG(r.status == 400 && r.body && strstr(r.body, "draft_files is not supported"),
              "%ld %s", r.status, r.body ? r.body : "");
    e2e_resp_free(&r);
    CHECK(!model_listed("\"bad:latest\""));

    e2e_stop(&T);
    return check_finish("test_e2e_draft");
}
