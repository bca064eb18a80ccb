/* test_e2e_parallel.c: two streaming chats at once on one runner.
 *
 * With OLLAMA_NUM_PARALLEL=2, two concurrent streaming /api/chat requests
 * to the same model (greedy: temperature 0 in its Modelfile) both complete
 * on one runner, each answer exactly what the same chat gives alone. That
 * they really run at once is shown without a race: while one stream is
 * busy with a million-token answer, a second chat completes (with one
 * slot it would wait behind the first, and the test fails at its
 * deadline) and the first stream keeps receiving afterwards. A client that
 * goes away mid-answer does not disturb the other stream. */
#include "lib/prelude.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

typedef struct stream {
    const char *question;
    char content[8192];
    bool done;
    long status;
    int abort_after;     /* the client goes away after this many pieces */
    int num_predict;     /* 0: 64 (4000 with abort_after) */
    bool generate;       /* /api/generate with the question as prompt */
    atomic_int pieces;
    atomic_bool release; /* the client goes away at its next piece */
    atomic_bool ended;   /* the request returned */
    int mark;            /* has_more_pieces: more than this many */
} stream_t;

static bool on_data(void *ctx, const char *data, size_t len)
{
    CR_UNUSED(data), CR_UNUSED(len);
    stream_t *s = ctx;
    int n = atomic_fetch_add(&s->pieces, 1) + 1;
    if (atomic_load(&s->release))
        return false;
    return !s->abort_after || n < s->abort_after;
}

/* One streaming chat; the concatenated content and whether it ended with
 * done:true. */
static void chat(stream_t *s, bool watch)
{
    char body[512];
    int np = s->num_predict ? s->num_predict : s->abort_after ? 4000 : 64;
    if (s->generate)
        snprintf(body, sizeof body,
                 "{\"model\":\"par\",\"prompt\":\"%s\",\"options\":{\"num_predict\":%d}}",
                 s->question, np);
    else
        snprintf(body, sizeof body,
                 "{\"model\":\"par\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],"
                 "\"stream\":true,\"options\":{\"num_predict\":%d}}",
                 s->question, np);
    e2e_resp_t r = e2e_http(&T, "POST", s->generate ? "/api/generate" : "/api/chat", body,
                            watch ? on_data : NULL, s);
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
    atomic_store(&s->ended, true);
}

/* Waits up to ms for cond(s) to hold. */
static bool wait_for(stream_t *s, bool (*cond)(stream_t *), int ms)
{
    for (int i = 0; i < ms / 10 && !cond(s); i++)
        usleep(10 * 1000);
    return cond(s);
}

static bool has_pieces(stream_t *s) { return atomic_load(&s->pieces) > 0; }
static bool has_ended(stream_t *s) { return atomic_load(&s->ended); }
static bool has_more_pieces(stream_t *s) { return atomic_load(&s->pieces) > s->mark; }

static void *worker(void *arg)
{
    chat(arg, true);
    return NULL;
}

static bool create_model(void)
{
    return e2e_synth_create(&T, "par", "PARAMETER temperature 0\n", "--type", "q8_0", "--ctx",
                            "8192", NULL);
}

int main(void)
{
    setenv("OLLAMA_NUM_PARALLEL", "2", 1);
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
    pid_t pids[4];
    CHECK_EQ_INT(e2e_find_procs(&T, "corral-runner", pids, 4), 1);

    /* Alone, each chat gives the same answer. */
    for (int i = 0; i < 2; i++) {
        stream_t a = {.question = s[i].question};
        chat(&a, false);
        CHECK(a.done);
        CHECK_EQ_STR(a.content, s[i].content);
    }

    /* While one stream is busy with a long answer, a second chat is
     * served: it completes within its deadline and the long stream is
     * still receiving afterwards. */
    /* (num_predict is capped at 10 x num_ctx: 40960 tokens, seconds of
     * work; this prompt does not reach the end token before, as in
     * test_e2e_queue) */
    stream_t busy = {.question = "count", .num_predict = 1000000, .generate = true};
    stream_t quick = {.question = s[1].question};
    pthread_create(&th[0], NULL, worker, &busy);
    CHECK_MSG(wait_for(&busy, has_pieces, 60000), "the long stream never started");
    pthread_create(&th[1], NULL, worker, &quick);
    bool served = wait_for(&quick, has_ended, 60000);
    int busy_at_end = atomic_load(&busy.pieces);
    CHECK_MSG(served, "a second chat waited behind a busy slot (no parallel slots)");
    CHECK_MSG(!atomic_load(&busy.ended), "the second chat was served only when the long stream ended");
    /* it goes on: more pieces come (within seconds; a stopped stream
     * never delivers them) */
    busy.mark = busy_at_end;
    CHECK_MSG(wait_for(&busy, has_more_pieces, 30000) && !atomic_load(&busy.ended),
              "the long stream stopped while the second chat ran");
    atomic_store(&busy.release, true);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CHECK(quick.done);
    CHECK_EQ_STR(quick.content, s[1].content);

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
