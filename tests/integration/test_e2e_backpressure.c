/* test_e2e_backpressure.c: a client that stops reading its stream loses
 * nothing.
 *
 * The same greedy request (temperature 0, 3000 tokens with 20 top
 * logprobs each: about 4 MB of NDJSON, more than the loopback socket
 * buffers hold) is sent twice: once read at full speed, once by a client
 * that stops reading for eight seconds after its first bytes, so most
 * tokens are produced while nobody reads. The bus between the scheduler
 * and the gateway has bounded queues; a stalled reader must not make a
 * full queue drop chunks. Both streams must carry the same text and the
 * same eval_count. */
#include "lib/prelude.h"

#include <jansson.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

#define N_TOKENS 3000

static bool create_model(void)
{
    bool created = e2e_synth_create(&T, "synth", "TEMPLATE \"{{ .Prompt }}\"\n", "--seed",
                                    "5", "--ctx", "8192", NULL);
    CHECK(created);
    return created;
}

typedef struct reader {
    bool stall;   /* stop reading after the first bytes */
    bool stalled; /* already did */
} reader_t;

static bool on_data(void *ctx, const char *data, size_t len)
{
    CR_UNUSED(data);
    CR_UNUSED(len);
    reader_t *r = ctx;
    if (r->stall && !r->stalled) {
        r->stalled = true;
        sleep(8);
    }
    return true;
}

/* The concatenated response text, the final eval_count and the number of
 * token lines of a stream. Load-progress lines ("status": "loading
 * model") are not counted: a stream gets them only when its model is still
 * loading a second after it was asked, which depends on the machine's
 * speed, not on the bus. */
static char *stream_text(const char *body, json_int_t *eval_count, int *lines)
{
    *eval_count = -1;
    *lines = 0;
    json_t *arr = e2e_ndjson(body);
    if (!arr)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *text = calloc(1, cap);
    size_t i;
    json_t *line;
    json_array_foreach(arr, i, line) {
        if (json_object_get(line, "status"))
            continue;
        (*lines)++;
        const char *piece = json_string_value(json_object_get(line, "response"));
        size_t n = piece ? strlen(piece) : 0;
        if (len + n + 1 > cap) {
            cap = (len + n + 1) * 2;
            text = realloc(text, cap);
        }
        memcpy(text + len, piece ? piece : "", n);
        len += n;
        text[len] = '\0';
        if (json_is_true(json_object_get(line, "done")))
            *eval_count = json_integer_value(json_object_get(line, "eval_count"));
    }
    json_decref(arr);
    return text;
}

static void test_stalled_reader_loses_nothing(void)
{
    char body[256];
    snprintf(body, sizeof body,
             "{\"model\":\"synth\",\"prompt\":\"count\",\"options\":{"
             "\"temperature\":0,\"seed\":1,\"num_predict\":%d},"
             "\"logprobs\":true,\"top_logprobs\":20}",
             N_TOKENS);
    reader_t fast = {false, false}, slow = {true, false};
    e2e_resp_t a = e2e_http(&T, "POST", "/api/generate", body, on_data, &fast);
    e2e_resp_t b = e2e_http(&T, "POST", "/api/generate", body, on_data, &slow);
    CHECK_EQ_INT(a.status, 200);
    CHECK_EQ_INT(b.status, 200);
    CHECK(slow.stalled);
    json_int_t ea, eb;
    int la, lb;
    char *ta = stream_text(a.body, &ea, &la);
    char *tb = stream_text(b.body, &eb, &lb);
    CHECK(ta && tb);
    CHECK_MSG(ea == N_TOKENS, "eval_count %lld", (long long)ea);
    CHECK_MSG(eb == ea, "stalled stream eval_count %lld vs %lld",
              (long long)eb, (long long)ea);
    CHECK_MSG(lb == la, "stalled stream has %d lines, the other %d", lb, la);
    CHECK_MSG(ta && tb && !strcmp(ta, tb),
              "the stalled stream's text differs (%zu vs %zu bytes)",
              tb ? strlen(tb) : 0, ta ? strlen(ta) : 0);
    free(ta);
    free(tb);
    e2e_resp_free(&a);
    e2e_resp_free(&b);
}

int main(void)
{
    unsetenv("CORRAL_TEST_SCRIPT");
    if (!e2e_start(&T))
        return 1;
    if (create_model())
        test_stalled_reader_loses_nothing();
    e2e_stop(&T);
    return check_finish("e2e_backpressure");
}
