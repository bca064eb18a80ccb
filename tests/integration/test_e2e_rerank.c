/* test_e2e_rerank.c: /api/rerank and /v1/rerank through the services.
 *
 * Three synthetic models: "ranker" (bert with a classifier head, pooling
 * rank), "embedder" (bert, mean pooling: an encoder without the head) and
 * "chat" (llama). Checked: results sorted by relevance_score, each score
 * the one its document gets when ranked alone (so every index names the
 * right document), top_n, return_documents and the {"text"} document form,
 * usage, the same answer on both routes, truncation at the context (and
 * its refusal with truncate:false); a 400 from the models that cannot
 * rerank, a 404 for a missing one, and bad bodies answered in each route's
 * error shape. */
#include "lib/prelude.h"

#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

static json_t *post(const char *path, const char *body, long *status)
{
    e2e_resp_t r = e2e_http(&T, "POST", path, body, NULL, NULL);
    *status = r.status;
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    if (!j)
        fprintf(stderr, "not JSON from %s: %s\n", path, r.body);
    e2e_resp_free(&r);
    return j;
}

static const char *const DOCS[] = {"the cat", "hello", "world the cat the", "cat"};
#define N_DOCS 4

/* The score of one document ranked alone. */
static double alone(const char *doc)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"ranker\",\"query\":\"hello world\",\"documents\":[\"%s\"]}",
             doc);
    long st;
    json_t *j = post("/api/rerank", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_array_size(e2e_jget(j, "results")), 1);
    double s = json_number_value(e2e_jget(j, "results.0.relevance_score"));
    json_decref(j);
    return s;
}

static void test_rank(void)
{
    static const char body[] =
        "{\"model\":\"ranker\",\"query\":\"hello world\",\"documents\":"
        "[\"the cat\",\"hello\",{\"text\":\"world the cat the\"},\"cat\"]%s}";
    char text[512];
    snprintf(text, sizeof text, body, ",\"return_documents\":true");
    long st;
    json_t *j = post("/api/rerank", text, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_STR(e2e_jstr(j, "model"), "ranker");
    CHECK_EQ_STR(e2e_jstr(j, "object"), "list");
    CHECK(json_integer_value(e2e_jget(j, "usage.total_tokens")) > 0);
    json_t *res = e2e_jget(j, "results");
    CHECK_EQ_INT(json_array_size(res), N_DOCS);
    bool seen[N_DOCS] = {false};
    double prev = 1e30;
    size_t i;
    json_t *r;
    json_array_foreach(res, i, r) {
        json_int_t idx = json_integer_value(e2e_jget(r, "index"));
        double s = json_number_value(e2e_jget(r, "relevance_score"));
        bool valid = idx >= 0 && idx < N_DOCS && !seen[idx];
        CHECK_MSG(valid, "index %lld", (long long)idx);
        if (!valid)
            continue;
        seen[idx] = true;
        CHECK_MSG(s <= prev, "result %zu: %g after %g (not sorted)", i, s, prev);
        prev = s;
        CHECK_EQ_STR(e2e_jstr(r, "document.text"), DOCS[idx]);
        /* the score is the document's own: index and score belong together.
         * Equal to float precision: the same pair through the same kernels,
         * printed as the shortest float32 text. */
        double a = alone(DOCS[idx]);
        CHECK_MSG(a == s, "document %lld: %g in the batch, %g alone", (long long)idx, s, a);
    }
    /* a reranker's scores differ between these documents */
    CHECK(json_number_value(e2e_jget(res, "0.relevance_score")) !=
          json_number_value(e2e_jget(res, "3.relevance_score")));

    /* top_n keeps the best; documents only when asked for */
    snprintf(text, sizeof text, body, ",\"top_n\":2");
    json_t *top = post("/v1/rerank", text, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_array_size(e2e_jget(top, "results")), 2);
    for (int k = 0; k < 2; k++) {
        char p[32];
        snprintf(p, sizeof p, "results.%d.index", k);
        CHECK_EQ_INT(json_integer_value(e2e_jget(top, p)), json_integer_value(e2e_jget(j, p)));
        snprintf(p, sizeof p, "results.%d.document", k);
        CHECK(e2e_jget(top, p) == NULL);
    }
    json_decref(top);
    json_decref(j);
}

/* A pair longer than the context (64): cut by default, refused with
 * truncate:false. */
static void test_truncate(void)
{
    char doc[1200] = "";
    for (int i = 0; i < 150; i++)
        strcat(doc, "cat ");
    char body[1600];
    snprintf(body, sizeof body,
             "{\"model\":\"ranker\",\"query\":\"hello\",\"documents\":[\"%s\"]%s}", doc,
             "");
    long st;
    json_t *j = post("/api/rerank", body, &st);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(json_integer_value(e2e_jget(j, "usage.total_tokens")), 64);
    json_decref(j);
    snprintf(body, sizeof body,
             "{\"model\":\"ranker\",\"query\":\"hello\",\"documents\":[\"%s\"]%s}", doc,
             ",\"truncate\":false");
    j = post("/api/rerank", body, &st);
    CHECK_EQ_INT(st, 400);
    CHECK_MSG(strstr(e2e_jstr(j, "error"), "document 0") != NULL, "%s", e2e_jstr(j, "error"));
    json_decref(j);
}

static void check_error(const char *path, const char *body, long want, const char *needle)
{
    long st;
    json_t *j = post(path, body, &st);
    CHECK_MSG(st == want, "%s %s: status %ld, want %ld", path, body, st, want);
    bool v1 = !strncmp(path, "/v1/", 4);
    const char *msg = e2e_jstr(j, v1 ? "error.message" : "error");
    CHECK_MSG(strstr(msg, needle) != NULL, "'%s' lacks '%s'", msg, needle);
    if (v1)
        CHECK(json_is_string(e2e_jget(j, "error.type")));
    json_decref(j);
}

static void test_errors(void)
{
    const char *paths[] = {"/api/rerank", "/v1/rerank"};
    for (int i = 0; i < 2; i++) {
        const char *p = paths[i];
        check_error(p, "{\"model\":\"embedder\",\"query\":\"q\",\"documents\":[\"d\"]}", 400,
                    "does not support rerank");
        check_error(p, "{\"model\":\"chat\",\"query\":\"q\",\"documents\":[\"d\"]}", 400,
                    "does not support rerank");
        check_error(p, "{\"model\":\"nosuch\",\"query\":\"q\",\"documents\":[\"d\"]}", 404,
                    "nosuch");
        check_error(p, "{\"query\":\"q\",\"documents\":[\"d\"]}", 400, "model is required");
        check_error(p, "{\"model\":\"ranker\",\"documents\":[\"d\"]}", 400, "query");
        check_error(p, "{\"model\":\"ranker\",\"query\":\"q\",\"documents\":[]}", 400,
                    "documents");
        check_error(p, "{\"model\":\"ranker\",\"query\":\"q\",\"documents\":[\"a\",7]}", 400,
                    "documents[1]");
        check_error(p, "{\"model\":\"ranker\",\"query\":\"q\",\"documents\":[\"a\"],"
                       "\"top_n\":-1}", 400, "top_n");
        check_error(p, "{\"model\":\"ranker\",\"query\":\"q\",\"documents\":[\"a\"],"
                       "\"return_documents\":\"yes\"}", 400, "return_documents");
        check_error(p, "{\"model\":", 400, "");
    }
}

int main(void)
{
    if (!e2e_start(&T))
        return 1;
    bool ok = e2e_synth_create(&T, "ranker", NULL, "--arch", "bert", "--pooling", "rank",
                               "--kv-heads", "4", "--heads", "4", "--std", "0.3",
                               "--ctx", "64", "--seed", "3", NULL);
    CHECK(ok);
    ok = ok && e2e_synth_create(&T, "embedder", NULL, "--arch", "bert", "--pooling",
                                "mean", "--kv-heads", "4", "--heads", "4", "--seed",
                                "3", NULL);
    CHECK(ok);
    ok = ok && e2e_synth_create(&T, "chat", NULL, "--seed", "7", NULL);
    CHECK(ok);
    if (ok) {
        test_rank();
        test_truncate();
        test_errors();
    }
    e2e_stop(&T);
    return check_finish("e2e_rerank");
}
