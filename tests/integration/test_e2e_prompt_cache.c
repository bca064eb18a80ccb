/* test_e2e_prompt_cache.c: prompt reuse across requests, and ignore_eos.
 *
 * With OLLAMA_NUM_PARALLEL=2 and a greedy synthetic model:
 *   - a first request on a fresh runner reports no cached tokens
 *     (prompt_eval_cached_count absent, as Ollama omits zero metrics);
 *   - a chat's second turn finds the first turn's prompt in the slot: its
 *     prompt_eval_cached_count covers all of turn 1's prompt (but for the
 *     token at the turn-1/answer boundary, which the tokenizer may merge)
 *     and prompt_eval_count is still the whole prompt;
 *   - a second client with the same long system prompt but another question
 *     reuses a free slot's cached system part;
 *   - the same prompt twice: all but the last token (re-evaluated for its
 *     logits) are cached, on /api/generate and as OpenAI's
 *     usage.prompt_tokens_details.cached_tokens on /v1/chat/completions;
 *   - options.ignore_eos: answers that end with the end token early (hot
 *     sampling, fixed seeds) run to num_predict with it. */
#include "lib/prelude.h"

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

#define SYSTEM                                                                 \
    "You are a careful assistant for a small town library. Answer in short "   \
    "sentences. Mention opening hours when asked about visits. Never invent "  \
    "book titles. The library opens at nine and closes at five on weekdays, "  \
    "and it is closed on Sundays and public holidays. Children's reading "     \
    "hour is on Saturday mornings in the blue room next to the garden."

#define TEMPLATE                                                               \
    "TEMPLATE \"\"\"{{- range .Messages }}<|{{ .Role }}|>\n{{ .Content }}</s>\n" \
    "{{ end }}<|assistant|>\n\"\"\"\n"

static json_int_t jint(json_t *o, const char *path)
{
    return json_integer_value(e2e_jget(o, path));
}

/* POST path body (stream false); the parsed answer (owned) or NULL. */
static json_t *post(const char *path, const char *body)
{
    e2e_resp_t r = e2e_http(&T, "POST", path, body, NULL, NULL);
    json_t *o = r.status == 200 ? json_loads(r.body, 0, NULL) : NULL;
    if (!o)
        fprintf(stderr, "%s: %ld %s\n", path, r.status, r.body ? r.body : "");
    e2e_resp_free(&r);
    return o;
}

/* A non-streaming chat: messages is the JSON array text. */
static json_t *chat(const char *messages, int num_predict)
{
    char body[8192];
    snprintf(body, sizeof body,
             "{\"model\":\"pc\",\"messages\":%s,\"stream\":false,"
             "\"options\":{\"num_predict\":%d}}",
             messages, num_predict);
    return post("/api/chat", body);
}

/* Number of tokens of text as /api/tokenize gives them. */
static json_int_t n_tokens(const char *text)
{
    json_t *req = json_pack("{s:s,s:s}", "model", "pc", "content", text);
    char *body = json_dumps(req, JSON_COMPACT);
    json_t *o = post("/api/tokenize", body);
    json_int_t n = o ? (json_int_t)json_array_size(json_object_get(o, "tokens")) : -1;
    json_decref(o);
    free(body);
    json_decref(req);
    return n;
}

static void test_chat_turns(void)
{
    /* turn 1 on a fresh runner: nothing cached */
    json_t *t1 = chat("[{\"role\":\"system\",\"content\":\"" SYSTEM "\"},"
                      "{\"role\":\"user\",\"content\":\"when can I visit?\"}]",
                      8);
    CHECK(t1 != NULL);
    json_int_t p1 = jint(t1, "prompt_eval_count");
    CHECK_MSG(p1 > 60, "turn 1 prompt_eval_count %lld", (long long)p1);
    CHECK_MSG(!e2e_jget(t1, "prompt_eval_cached_count"),
              "a fresh runner reported cached tokens");
    const char *a1 = e2e_jstr(t1, "message.content");

    /* turn 2: the history plus a new question */
    json_t *msgs = json_pack("[{s:s,s:s},{s:s,s:s},{s:s,s:s},{s:s,s:s}]", "role", "system",
                             "content", SYSTEM, "role", "user", "content",
                             "when can I visit?", "role", "assistant", "content", a1,
                             "role", "user", "content", "and on Saturday?");
    char *text = json_dumps(msgs, JSON_COMPACT);
    json_t *t2 = chat(text, 8);
    CHECK(t2 != NULL);
    json_int_t p2 = jint(t2, "prompt_eval_count"), c2 = jint(t2, "prompt_eval_cached_count");
    CHECK_MSG(p2 > p1, "turn 2 prompt %lld, turn 1 %lld", (long long)p2, (long long)p1);
    CHECK_MSG(c2 >= p1 - 1 && c2 < p2,
              "turn 2 cached %lld of %lld (turn 1's prompt: %lld tokens)", (long long)c2,
              (long long)p2, (long long)p1);
    free(text);
    json_decref(msgs);
    json_decref(t2);
    json_decref(t1);
}

static void test_shared_system(void)
{
    /* Another client, same system prompt, another question: the slot that
     * holds the conversation above has the system part. */
    json_int_t n_sys = n_tokens("<|system|>\n" SYSTEM "</s>\n<|user|>\n");
    json_t *b = chat("[{\"role\":\"system\",\"content\":\"" SYSTEM "\"},"
                     "{\"role\":\"user\",\"content\":\"is there a reading hour?\"}]",
                     4);
    CHECK(b != NULL);
    json_int_t p = jint(b, "prompt_eval_count"), c = jint(b, "prompt_eval_cached_count");
    CHECK_MSG(n_sys > 50 && c >= n_sys - 1 && c < p,
              "second client: %lld of %lld cached, the system part is %lld tokens",
              (long long)c, (long long)p, (long long)n_sys);
    json_decref(b);
}

static void test_same_prompt(void)
{
    const char *body = "{\"model\":\"pc\",\"prompt\":\"tell me about the garden\","
                       "\"stream\":false,\"options\":{\"num_predict\":4}}";
    json_t *g1 = post("/api/generate", body), *g2 = post("/api/generate", body);
    CHECK(g1 && g2);
    json_int_t p = jint(g2, "prompt_eval_count");
    CHECK_EQ_INT(jint(g1, "prompt_eval_count"), p);
    CHECK_EQ_INT(jint(g2, "prompt_eval_cached_count"), p - 1);
    json_decref(g1);
    json_decref(g2);

    const char *oai = "{\"model\":\"pc\",\"max_tokens\":4,\"messages\":["
                      "{\"role\":\"user\",\"content\":\"where is the blue room?\"}]}";
    json_t *o1 = post("/v1/chat/completions", oai), *o2 = post("/v1/chat/completions", oai);
    CHECK(o1 && o2);
    json_int_t pt = jint(o2, "usage.prompt_tokens");
    CHECK(pt > 1);
    CHECK_EQ_INT(jint(o2, "usage.prompt_tokens_details.cached_tokens"), pt - 1);
    json_decref(o1);
    json_decref(o2);
}

/* Raw generate, num_predict n, sampled at temperature 2 with seed (the
 * end token among the likely ones), ignore_eos as asked. */
static json_t *raw_generate(int seed, int n, bool ignore_eos)
{
    char body[512];
    snprintf(body, sizeof body,
             "{\"model\":\"pc\",\"prompt\":\"once upon a time\",\"raw\":true,"
             "\"stream\":false,\"options\":{\"num_predict\":%d,\"temperature\":2,"
             "\"top_k\":100000,\"top_p\":1,\"seed\":%d%s}}",
             n, seed, ignore_eos ? ",\"ignore_eos\":true" : "");
    return post("/api/generate", body);
}

static void test_ignore_eos(void)
{
    /* Seeds whose answer ends with </s> before N tokens (a random model
     * sampled hot reaches it after a few hundred tokens) run to N with
     * ignore_eos. */
    enum { N = 1000, WANT = 3 };
    int found = 0;
    for (int seed = 1; seed <= 20 && found < WANT; seed++) {
        json_t *plain = raw_generate(seed, N, false);
        CHECK(plain != NULL);
        bool early = plain && !strcmp(e2e_jstr(plain, "done_reason"), "stop") &&
                     jint(plain, "eval_count") < N;
        json_decref(plain);
        if (!early)
            continue;
        found++;
        json_t *forced = raw_generate(seed, N, true);
        CHECK(forced != NULL);
        CHECK_MSG(!strcmp(e2e_jstr(forced, "done_reason"), "length") &&
                      jint(forced, "eval_count") == N,
                  "seed %d with ignore_eos: %s after %lld tokens", seed,
                  e2e_jstr(forced, "done_reason"), (long long)jint(forced, "eval_count"));
        json_decref(forced);
    }
    CHECK_MSG(found == WANT, "only %d of 20 seeds reached the end token within %d tokens",
              found, N);
}

int main(void)
{
    setenv("OLLAMA_NUM_PARALLEL", "2", 1);
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_prompt_cache");
    }
    CHECK(e2e_synth_create(&T, "pc", "PARAMETER temperature 0\n" TEMPLATE, "--ctx", "2048",
                           NULL));
    test_chat_turns();
    test_shared_system();
    test_same_prompt();
    test_ignore_eos();
    e2e_stop(&T);
    return check_finish("e2e_prompt_cache");
}
