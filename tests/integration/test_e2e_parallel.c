/* test_e2e_parallel.c: two streaming chats at once on one runner.
 *
 * With OLLAMA_NUM_PARALLEL=2, two concurrent streaming /api/chat requests
 * to the same model (greedy: temperature 0 in its Modelfile) both complete,
 * their streams overlap (each receives data before the other's stream
 * ends: both ran in the runner's slots at once), one runner serves both, and
 * each answer is exactly what the same chat gives alone afterwards. A
 * client that goes away mid-answer does not disturb the other stream. */
#include "lib/prelude.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;
static atomic_int events_g; /* on_data calls of both streams, in order */

typedef struct stream {
    const char *question;
    int first, last;  /* events_g at the first and last piece received */
    char content[8192];
    bool done;
    long status;
    int abort_after; /* the client goes away after this many pieces */
    int pieces;
} stream_t;

static bool on_data(void *ctx, const char *data, size_t len)
{
    stream_t *s = ctx;
    /* "loading model" progress lines reach both waiting streams during the
     * load; only the answer's pieces tell whether the slots ran at once. */
    if (memmem(data, len, "loading model", strlen("loading model")))
        return true;
    int ev = atomic_fetch_add(&events_g, 1) + 1;
    if (!s->first)
        s->first = ev;
    s->last = ev;
    s->pieces++;
    return !s->abort_after || s->pieces < s->abort_after;
}

/* One streaming chat; the concatenated content and whether it ended with
 * done:true. */
static void chat(stream_t *s, bool watch)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"par\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],"
             "\"stream\":true,\"options\":{\"num_predict\":%d}}",
             s->question, s->abort_after ? 4000 : 64);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/chat", body, watch ? on_data : NULL, s);
    s->status = r.status;
    json_t *lines = e2e_ndjson(r.body);
    size_t i;
    json_t *line;
    s->content[0] = '\0';
    json_array_foreach(lines, i, line)
    {
        const char *c = json_string_value(
            json_object_get(json_object_get(line, "message"), "content"));
        if (c)
            strncat(s->content, c, sizeof s->content - strlen(s->content) - 1);
        if (json_is_true(json_object_get(line, "done")))
            s->done = true;
    }
    if (!s->done && !s->abort_after)
        fprintf(stderr, "chat '%s': %ld %s\n", s->question, r.status, r.body);
    json_decref(lines);
    e2e_resp_free(&r);
}

static void *worker(void *arg)
{
    chat(arg, true);
    return NULL;
}

static bool create_model(void)
{
    char gguf[1200], mf[1200];
    snprintf(gguf, sizeof gguf, "%s/m.gguf", T.tmp);
    snprintf(mf, sizeof mf, "%s/Modelfile", T.tmp);
    if (e2e_run_bin(&T, "corral-gguf-synth", "--out", gguf, "--type", "q8_0", NULL))
        return false;
    FILE *f = fopen(mf, "w");
    if (!f)
        return false;
    fputs("FROM ./m.gguf\nPARAMETER temperature 0\n", f);
    fclose(f);
    char *out = NULL;
    int rc = e2e_cli(&T, NULL, &out, "create", "par", "-f", mf, NULL);
    free(out);
    return rc == 0;
}

int main(void)
{
    setenv("OLLAMA_NUM_PARALLEL", "2", 1);
    /* The first load takes a second longer, so both chats are surely
     * waiting for it and enter the slots together when it is ready. On a
     * fast machine the tiny model answers 64 tokens in a few
     * milliseconds: without the wait the first chat could finish before
     * the second one reached the scheduler, and nothing would overlap. */
    setenv("CORRAL_TEST_SLOW_LOAD", "par:1000", 1);
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_parallel");
    }
    CHECK(create_model());

    stream_t s[2] = {{.question = "tell me a story"}, {.question = "why is the sky blue"}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, worker, &s[i]);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(s[i].status, 200);
        CHECK(s[i].done);
        CHECK(s[i].content[0] != '\0');
    }
    /* Both streams were open at once: each got data before the other's
     * last piece. */
    CHECK_MSG(s[0].first < s[1].last && s[1].first < s[0].last,
              "streams did not overlap: [%d,%d] and [%d,%d]", s[0].first, s[0].last,
              s[1].first, s[1].last);
    pid_t pids[4];
    CHECK_EQ_INT(e2e_find_procs(&T, "corral-runner", pids, 4), 1);

    /* Alone, each chat gives the same answer. */
    for (int i = 0; i < 2; i++) {
        stream_t a = {.question = s[i].question};
        chat(&a, false);
        CHECK(a.done);
        CHECK_EQ_STR(a.content, s[i].content);
    }

    /* One client goes away after two pieces of a long answer: the other
     * stream still completes with its answer. */
    stream_t gone = {.question = "tell me a story", .abort_after = 2};
    stream_t stay = {.question = "why is the sky blue"};
    pthread_create(&th[0], NULL, worker, &gone);
    pthread_create(&th[1], NULL, worker, &stay);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(!gone.done);
    CHECK(stay.done);
    CHECK_EQ_STR(stay.content, s[1].content);
    /* and the runner is free again for a new chat */
    stream_t after = {.question = s[0].question};
    chat(&after, false);
    CHECK(after.done);
    CHECK_EQ_STR(after.content, s[0].content);
    e2e_stop(&T);
    return check_finish("e2e_parallel");
}
