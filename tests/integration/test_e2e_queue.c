/* test_e2e_queue.c: the bounded queue and stream isolation through the
 * real services.
 *
 * `corral serve` runs with OLLAMA_MAX_QUEUE=1 and OLLAMA_NUM_PARALLEL=1.
 * Queue: one streaming request holds the runner's slot, a second waits
 * (ps shows active 1, queued 1), and every further request gets the exact
 * 503 body Ollama sends; once the first ends, the waiting one succeeds.
 * Isolation: a client that stops reading its stream (its callback blocks,
 * so TCP and bus buffers fill behind it) must not stall another client's
 * stream from another model. */
#include "lib/prelude.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

static const char BUSY[] = "{\"error\":\"server busy, please try again.  "
                           "maximum pending requests exceeded\"}";

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool create_models(void)
{
    bool created = e2e_synth_create(&T, "synth", "TEMPLATE \"{{ .Prompt }}\"\n", "--seed",
                                    "5", "--ctx", "8192", NULL);
    CHECK(created);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/copy",
                            "{\"source\":\"synth\",\"destination\":\"synth2\"}",
                            NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    return created && r.status == 200;
}

/* A streaming request that runs until released: greedy on this model and
 * prompt it does not reach an end token for thousands of tokens (the
 * backpressure test asserts 3000), where a sampled one could stop early.
 * That alone does not hold a slot: the answer is capped at 10 x num_ctx
 * (40960 tokens), a few seconds for this 1 MB model on a fast machine.
 * With `freeze` the runner is stopped (SIGSTOP) at the first piece, so the
 * request stays active for as long as the test needs, on any machine. */
typedef struct holder {
    const char *model;
    atomic_int bytes;     /* received so far */
    atomic_bool release;  /* stop (abort the transfer) */
    bool stall;           /* block in the callback instead of reading */
    atomic_bool stalling; /* blocked in the callback now */
    atomic_bool gave_up;  /* the stall ran out (STALL_MAX_MS) unreleased */
    bool freeze;          /* SIGSTOP the runners at the first piece */
    pid_t frozen[4];      /* the runners stopped (SIGCONT them to go on) */
    size_t n_frozen;
    long status;
    pthread_t th;
} holder_t;

/* The longest a stalled client blocks: a bound on how long the test hangs
 * if the server lets it block another client's stream. */
#define STALL_MAX_MS 120000

static bool holder_data(void *ctx, const char *data, size_t len)
{
    CR_UNUSED(data);
    holder_t *h = ctx;
    /* Stopped before the test sees the first bytes (bytes > 0), so what it
     * does next finds the request in progress. */
    if (h->freeze && !h->n_frozen && !atomic_load(&h->release)) {
        h->n_frozen = e2e_find_procs(&T, "corral-runner", h->frozen, 4);
        for (size_t i = 0; i < h->n_frozen; i++)
            kill(h->frozen[i], SIGSTOP);
    }
    atomic_fetch_add(&h->bytes, (int)len);
    /* A stalled client stops reading: the callback does not return until
     * released. */
    if (h->stall && !atomic_load(&h->release)) {
        atomic_store(&h->stalling, true);
        int i = 0;
        for (; !atomic_load(&h->release) && i < STALL_MAX_MS / 10; i++)
            usleep(10 * 1000);
        if (!atomic_load(&h->release))
            atomic_store(&h->gave_up, true);
        atomic_store(&h->stalling, false);
    }
    return !atomic_load(&h->release);
}

static void *holder_main(void *arg)
{
    holder_t *h = arg;
    char body[256];
    snprintf(body, sizeof body,
             "{\"model\":\"%s\",\"prompt\":\"count\",\"options\":{"
             "\"temperature\":0,\"num_predict\":1000000}}",
             h->model);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/generate", body, holder_data, h);
    h->status = r.status;
    e2e_resp_free(&r);
    return NULL;
}

static bool wait_bytes(holder_t *h)
{
    double end = now_s() + 60.0;
    while (atomic_load(&h->bytes) == 0 && now_s() < end)
        usleep(10 * 1000);
    return atomic_load(&h->bytes) > 0;
}

typedef struct quick {
    long status;
    char *body;
    pthread_t th;
} quick_t;

static void *quick_main(void *arg)
{
    quick_t *q = arg;
    e2e_resp_t r = e2e_http(&T, "POST", "/api/generate",
                            "{\"model\":\"synth\",\"prompt\":\"queued\","
                            "\"stream\":false,\"options\":{\"num_predict\":3}}",
                            NULL, NULL);
    q->status = r.status;
    q->body = r.body;
    r.body = NULL;
    e2e_resp_free(&r);
    return NULL;
}

/* ps of "synth:latest": active and queued, or -1 when absent. */
static void ps_counts(json_int_t *active, json_int_t *queued)
{
    *active = *queued = -1;
    e2e_resp_t r = e2e_http(&T, "GET", "/api/ps", NULL, NULL, NULL);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    json_t *models = json_object_get(j, "models");
    for (size_t i = 0; i < json_array_size(models); i++) {
        json_t *m = json_array_get(models, i);
        const char *name = json_string_value(json_object_get(m, "name"));
        if (!name || strcmp(name, "synth:latest"))
            continue;
        *active = json_integer_value(json_object_get(m, "active"));
        *queued = json_integer_value(json_object_get(m, "queued"));
    }
    json_decref(j);
    e2e_resp_free(&r);
}

static void test_queue_overflow(void)
{
    holder_t a = {.model = "synth", .freeze = true};
    pthread_create(&a.th, NULL, holder_main, &a);
    CHECK_MSG(wait_bytes(&a), "the holding stream never started");
    CHECK_MSG(a.n_frozen == 1, "%zu runners stopped, expected synth's", a.n_frozen);
    quick_t b = {0};
    pthread_create(&b.th, NULL, quick_main, &b);
    json_int_t active = -1, queued = -1;
    double end = now_s() + 60.0; /* b reaches the scheduler's queue */
    for (;;) {
        ps_counts(&active, &queued);
        if (queued == 1 || now_s() >= end)
            break;
        usleep(10 * 1000);
    }
    CHECK_EQ_INT(active, 1);
    CHECK_EQ_INT(queued, 1);
    /* the queue (1) is full: the exact 503 Ollama sends, for every route */
    static const char *const bodies[][2] = {
        {"/api/generate", "{\"model\":\"synth\",\"prompt\":\"x\"}"},
        {"/api/generate", "{\"model\":\"synth\",\"prompt\":\"x\",\"stream\":false}"},
        {"/api/chat", "{\"model\":\"synth\",\"messages\":[{\"role\":\"user\","
                      "\"content\":\"x\"}]}"},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bodies); i++) {
        e2e_resp_t r = e2e_http(&T, "POST", bodies[i][0], bodies[i][1], NULL,
                                NULL);
        CHECK_EQ_INT(r.status, 503);
        CHECK_EQ_STR(r.body ? r.body : "", BUSY);
        e2e_resp_free(&r);
    }
    atomic_store(&a.release, true);
    for (size_t i = 0; i < a.n_frozen; i++)
        kill(a.frozen[i], SIGCONT);
    pthread_join(a.th, NULL);
    pthread_join(b.th, NULL);
    CHECK_EQ_INT(a.status, 200);
    CHECK_EQ_INT(b.status, 200);
    json_t *j = json_loads(b.body ? b.body : "", 0, NULL);
    CHECK_MSG(json_is_true(json_object_get(j, "done")), "queued answer: %s",
              b.body ? b.body : "");
    json_decref(j);
    free(b.body);
}

/* Counts the lines of a stream that must finish while another client
 * is stalled. */
typedef struct counter {
    int lines;
} counter_t;

static bool count_lines(void *ctx, const char *data, size_t len)
{
    counter_t *c = ctx;
    for (size_t i = 0; i < len; i++)
        c->lines += data[i] == '\n';
    return true;
}

static void test_slow_reader(void)
{
    holder_t x = {.model = "synth2", .stall = true};
    pthread_create(&x.th, NULL, holder_main, &x);
    CHECK_MSG(wait_bytes(&x), "the stalled stream never started");
    /* let the stalled stream's buffers fill up behind it */
    usleep(1500 * 1000);
    counter_t c = {0};
    e2e_resp_t r = e2e_http(&T, "POST", "/api/generate",
                            "{\"model\":\"synth\",\"prompt\":\"other\","
                            "\"options\":{\"num_predict\":40}}",
                            count_lines, &c);
    /* The other stream completed while the stalled client was still
     * blocked: it did not wait for the stall to end (that takes
     * STALL_MAX_MS unreleased, and then gave_up is set). */
    bool still_stalled = atomic_load(&x.stalling) && !atomic_load(&x.gave_up);
    CHECK_EQ_INT(r.status, 200);
    CHECK_MSG(c.lines >= 2 && r.body && strstr(r.body, "\"done\":true"),
              "%d lines: %s", c.lines, r.body ? r.body : "");
    CHECK_MSG(still_stalled, "the other stream ended only when the stalled client %s",
              atomic_load(&x.gave_up) ? "gave up" : "read again");
    e2e_resp_free(&r);
    atomic_store(&x.release, true);
    pthread_join(x.th, NULL);
    /* the server is healthy afterwards */
    r = e2e_http(&T, "GET", "/api/version", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
}

int main(void)
{
    setenv("OLLAMA_MAX_QUEUE", "1", 1);
    setenv("OLLAMA_NUM_PARALLEL", "1", 1);
    /* The stopped runner answers no heartbeat; the default timeout (60 s)
     * could end it on a machine slow enough to stretch the test past it. */
    setenv("CORRAL_HEARTBEAT_TIMEOUT", "10m", 1);
    unsetenv("CORRAL_TEST_SCRIPT");
    if (!e2e_start(&T))
        return 1;
    if (create_models()) {
        /* load first, so the queue holds requests, not a load */
        e2e_resp_t r = e2e_http(&T, "POST", "/api/generate",
                                "{\"model\":\"synth\"}", NULL, NULL);
        CHECK_EQ_INT(r.status, 200);
        e2e_resp_free(&r);
        test_queue_overflow();
        test_slow_reader();
    }
    e2e_stop(&T);
    return check_finish("e2e_queue");
}
