/* test_gateway_openai.c: the /v1 routes, tokenize/detokenize, /metrics
 * and the API key, driven over real HTTP against an in-process gateway.
 *
 * Fake scheduler and registry threads bind ROUTERs at the bus endpoints
 * (CORRAL_RUNTIME_DIR is a temp dir) and answer scripted replies chosen by
 * the model name; they keep the last request so the translation into
 * native messages can be checked field by field. Covers: the request
 * translation (content parts, images, tool calls, defaults, options,
 * tool_choice, response_format, reasoning), the exact SSE shapes ending in
 * `data: [DONE]`, non-stream objects and usage, OpenAI-shaped errors,
 * base64 embeddings that decode to the floats, /v1/models, the metrics
 * text and its counters, and 401/200 with CORRAL_API_KEY. */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "proto/bus.h"
#include "services/gateway/auth.h"
#include "services/gateway/metrics.h"
#include "services/gateway/openai.h"
#include "services/gateway/server.h"
#include "tests/unit/check.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ================= fake bus peers ================= */

typedef struct fake fake_t;
typedef void (*fake_fn)(fake_t *f, zframe_t *who, const msg_t *m);

struct fake {
    char ep[BUS_ENDPOINT_MAX];
    fake_fn fn;
    pthread_t th;
    atomic_bool stop, ready;
    zsock_t *sock;
    pthread_mutex_t mu;
    msg_t last; /* last request other than ping/cancel (under mu) */
    int n_requests;
    atomic_int n_cancels;
};

static void fake_reply(fake_t *f, zframe_t *who, msg_t *m)
{
    cr_err_t err;
    if (bus_send_to(f->sock, who, m, &err))
        fprintf(stderr, "fake: send failed: %s\n", err.msg);
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    f->sock = zsock_new(ZMQ_ROUTER);
    zsock_set_linger(f->sock, 0);
    if (zsock_bind(f->sock, "%s", f->ep) != 0)
        fprintf(stderr, "fake: cannot bind %s\n", f->ep);
    atomic_store(&f->ready, true);
    while (!atomic_load(&f->stop)) {
        msg_t m;
        zframe_t *who = NULL;
        cr_err_t err;
        if (bus_recv(f->sock, 20, &m, &who, &err) != CR_OK)
            continue;
        if (m.type == MSG_ping) {
            msg_t pong;
            msg_init(&pong, MSG_pong, m.id);
            fake_reply(f, who, &pong);
        } else if (m.type == MSG_cancel) {
            atomic_fetch_add(&f->n_cancels, 1);
        } else {
            pthread_mutex_lock(&f->mu);
            msg_clear(&f->last);
            msg_copy(&m, &f->last);
            f->n_requests++;
            pthread_mutex_unlock(&f->mu);
            f->fn(f, who, &m);
        }
        msg_clear(&m);
        zframe_destroy(&who);
    }
    zsock_destroy(&f->sock);
    return NULL;
}

static fake_t *fake_start(const char *name, fake_fn fn)
{
    fake_t *f = calloc(1, sizeof *f);
    cr_err_t err;
    if (bus_endpoint(name, f->ep, sizeof f->ep, &err)) {
        fprintf(stderr, "fake: %s\n", err.msg);
        abort();
    }
    f->fn = fn;
    pthread_mutex_init(&f->mu, NULL);
    pthread_create(&f->th, NULL, fake_main, f);
    while (!atomic_load(&f->ready))
        sleep_ms(1);
    return f;
}

static void fake_stop(fake_t **fp)
{
    fake_t *f = *fp;
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    msg_clear(&f->last);
    pthread_mutex_destroy(&f->mu);
    free(f);
    *fp = NULL;
}

/* A copy of the last request (caller msg_clears it). */
static void fake_last(fake_t *f, msg_t *out)
{
    pthread_mutex_lock(&f->mu);
    msg_copy(&f->last, out);
    pthread_mutex_unlock(&f->mu);
}

static void send_chunk(fake_t *f, zframe_t *who, const char *id,
                       const char *response, const char *thinking,
                       const char *tools, const char *logprobs)
{
    msg_t c;
    msg_init(&c, MSG_chunk, id);
    c.u.chunk.response = (char *)response;
    c.u.chunk.has_response = response != NULL;
    c.u.chunk.thinking = (char *)thinking;
    c.u.chunk.has_thinking = thinking != NULL;
    c.u.chunk.tool_calls = (char *)tools;
    c.u.chunk.has_tool_calls = tools != NULL;
    c.u.chunk.logprobs = (char *)logprobs;
    c.u.chunk.has_logprobs = logprobs != NULL;
    fake_reply(f, who, &c);
}

static void send_done(fake_t *f, zframe_t *who, const char *id,
                      const char *reason)
{
    msg_t d;
    msg_init(&d, MSG_done, id);
    d.u.done.done_reason = (char *)reason;
    d.u.done.has_done_reason = true;
    d.u.done.total_duration = 1000;
    d.u.done.has_total_duration = true;
    d.u.done.load_duration = 300000000; /* 0.3 s */
    d.u.done.has_load_duration = true;
    d.u.done.prompt_eval_count = 5;
    d.u.done.has_prompt_eval_count = true;
    d.u.done.eval_count = 2;
    d.u.done.has_eval_count = true;
    d.u.done.eval_duration = 20000000; /* 10 ms per token */
    d.u.done.has_eval_duration = true;
    fake_reply(f, who, &d);
}

static void send_error(fake_t *f, zframe_t *who, const char *id,
                       cr_status_t st, const char *text)
{
    msg_t e;
    msg_make_error(&e, id, st, "%s", text);
    fake_reply(f, who, &e);
    msg_clear(&e);
}

static const float EMB[6] = {0.5f, -0.25f, 0.1f, 1e-7f, 3.25f, -1};

#define TOOL_CALL                                                           \
    "[{\"function\":{\"index\":0,\"name\":\"get_weather\","                 \
    "\"arguments\":{\"city\":\"Paris\",\"days\":2}}}]"

static void scheduler_fn(fake_t *f, zframe_t *who, const msg_t *m)
{
    const char *id = m->id;
    msg_t r;
    switch (m->type) {
    case MSG_ps: {
        msg_loaded_model_t lm[2] = {
            {.name = "a:latest", .has_name = true, .active = 2,
             .has_active = true, .queued = 3, .has_queued = true},
            {.name = "b:latest", .has_name = true, .queued = 1,
             .has_queued = true},
        };
        msg_init(&r, MSG_ps_reply, id);
        r.u.ps_reply.models.v = lm;
        r.u.ps_reply.models.n = 2;
        r.u.ps_reply.has_models = true;
        fake_reply(f, who, &r);
        return;
    }
    case MSG_status: { /* /metrics: b's queue and one for an unloaded c */
        msg_loaded_model_t lm[2] = {
            {.name = "a:latest", .has_name = true, .active = 2,
             .has_active = true},
            {.name = "b:latest", .has_name = true},
        };
        msg_queue_entry_t q[3] = {
            {.model = "a:latest", .has_model = true, .waiting = 3, .has_waiting = true},
            {.model = "b:latest", .has_model = true, .waiting = 1, .has_waiting = true},
            {.model = "c:latest", .has_model = true, .waiting = 2, .has_waiting = true},
        };
        msg_init(&r, MSG_status_reply, id);
        r.u.status_reply.models.v = lm;
        r.u.status_reply.models.n = 2;
        r.u.status_reply.has_models = true;
        r.u.status_reply.queue.v = q;
        r.u.status_reply.queue.n = 3;
        r.u.status_reply.has_queue = true;
        fake_reply(f, who, &r);
        return;
    }
    case MSG_embed: {
        if (!strcmp(m->u.embed.model, "missing")) {
            send_error(f, who, id, CR_E_NOT_FOUND,
                       "model \"missing\" not found, try pulling it first");
            return;
        }
        size_t n = m->u.embed.input.n;
        msg_init(&r, MSG_embeddings, id);
        r.u.embeddings.n_inputs = (int64_t)n;
        r.u.embeddings.has_n_inputs = true;
        r.u.embeddings.dims = 3;
        r.u.embeddings.has_dims = true;
        r.u.embeddings.data.data = (uint8_t *)EMB;
        r.u.embeddings.data.len = n * 3 * sizeof(float);
        r.u.embeddings.has_data = true;
        r.u.embeddings.prompt_eval_count = 7;
        r.u.embeddings.has_prompt_eval_count = true;
        fake_reply(f, who, &r);
        return;
    }
    case MSG_tokenize: {
        if (!strcmp(m->u.tokenize.model, "missing")) {
            send_error(f, who, id, CR_E_NOT_FOUND,
                       "model \"missing\" not found, try pulling it first");
            return;
        }
        int32_t t[64];
        size_t n = strlen(m->u.tokenize.content ? m->u.tokenize.content : "");
        n = CR_MIN(n, 64u);
        for (size_t i = 0; i < n; i++)
            t[i] = (int32_t)(unsigned char)m->u.tokenize.content[i];
        msg_init(&r, MSG_tokens, id);
        r.u.tokens.tokens.v = t;
        r.u.tokens.tokens.n = n;
        r.u.tokens.has_tokens = true;
        fake_reply(f, who, &r);
        return;
    }
    case MSG_detokenize: {
        char text[128] = "";
        for (size_t i = 0; i < m->u.detokenize.tokens.n && i < 100; i++)
            text[i] = (char)m->u.detokenize.tokens.v[i];
        text[CR_MIN(m->u.detokenize.tokens.n, 100u)] = '\0';
        msg_init(&r, MSG_text, id);
        r.u.text.text = text;
        r.u.text.has_text = true;
        fake_reply(f, who, &r);
        return;
    }
    default:
        break;
    }
    const char *model = m->type == MSG_chat ? m->u.chat.model
                        : m->type == MSG_generate ? m->u.generate.model
                                                  : "";
    if (!strcmp(model, "ok")) {
        send_chunk(f, who, id, "Hel", NULL, NULL, NULL);
        send_chunk(f, who, id, "lo", NULL, NULL, NULL);
        send_done(f, who, id, "stop");
    } else if (!strcmp(model, "think")) {
        msg_t p; /* a slow load's progress: an SSE comment when streaming */
        msg_init(&p, MSG_progress, id);
        p.u.progress.status = "loading model";
        p.u.progress.has_status = true;
        fake_reply(f, who, &p);
        send_chunk(f, who, id, "A", "hm", NULL, NULL); /* both: split */
        send_done(f, who, id, "stop");
    } else if (!strcmp(model, "tools")) {
        send_chunk(f, who, id, "", NULL, TOOL_CALL, NULL);
        send_done(f, who, id, "stop");
    } else if (!strcmp(model, "len")) {
        send_chunk(f, who, id, "abc", NULL, NULL,
                   "[{\"token\":\"abc\",\"logprob\":-0.5,\"top_logprobs\":"
                   "[{\"token\":\"abc\",\"logprob\":-0.5}]}]");
        send_done(f, who, id, "length");
    } else if (!strcmp(model, "missing")) {
        send_error(f, who, id, CR_E_NOT_FOUND,
                   "model \"missing\" not found, try pulling it first");
    } else if (!strcmp(model, "busy")) {
        send_error(f, who, id, CR_E_BUSY, "server busy");
    } else if (!strcmp(model, "forced")) {
        /* what a format-constrained model writes for a forced call */
        send_chunk(f, who, id, "", "let me see", NULL, NULL);
        send_chunk(f, who, id, "{\"name\":\"get_weather\",", NULL, NULL,
                   NULL);
        send_chunk(f, who, id, "\"arguments\":{\"city\":\"Paris\"}}", NULL,
                   NULL, NULL);
        send_done(f, who, id, "stop");
    } else if (!strcmp(model, "slow")) {
        /* streams until the gateway cancels (the client went away) */
        for (int i = 0; i < 200; i++) {
            send_chunk(f, who, id, "tok ", NULL, NULL, NULL);
            msg_t in;
            zframe_t *from = NULL;
            cr_err_t err;
            if (bus_recv(f->sock, 25, &in, &from, &err) == CR_OK) {
                bool cancel = in.type == MSG_cancel && !strcmp(in.id, id);
                msg_clear(&in);
                zframe_destroy(&from);
                if (cancel) {
                    atomic_fetch_add(&f->n_cancels, 1);
                    return;
                }
            }
        }
        send_done(f, who, id, "stop");
    } else if (!strcmp(model, "midfail")) {
        send_chunk(f, who, id, "a", NULL, NULL, NULL);
        send_error(f, who, id, CR_E_RUNNER, "runner died");
    }
}

static void registry_fn(fake_t *f, zframe_t *who, const msg_t *m)
{
    msg_t r;
    if (m->type != MSG_tags) {
        send_error(f, who, m->id, CR_E_PROTO, "unexpected");
        return;
    }
    msg_model_entry_t e[2] = {
        {.name = "llama3:latest", .has_name = true,
         .modified_at = "2024-05-01T10:00:00.5Z", .has_modified_at = true},
        {.name = "someone/Other:v1", .has_name = true,
         .modified_at = "2024-05-01T12:00:00+02:00", .has_modified_at = true},
    };
    msg_init(&r, MSG_tags_reply, m->id);
    r.u.tags_reply.models.v = e;
    r.u.tags_reply.models.n = 2;
    r.u.tags_reply.has_models = true;
    fake_reply(f, who, &r);
}

/* ================= HTTP client ================= */

typedef struct resp {
    long status;
    cr_buf_t body;
    char ctype[128];
} resp_t;

static size_t on_write(char *p, size_t sz, size_t n, void *ud)
{
    cr_buf_append(ud, p, sz * n);
    return sz * n;
}

static int port_g;
static CURL *curl_g;

static long http_h(resp_t *r, int port, const char *method, const char *path,
                   const char *body, const char *header)
{
    memset(r, 0, sizeof *r);
    cr_buf_init(&r->body, 64u << 20);
    curl_easy_reset(curl_g);
    char url[1200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    curl_easy_setopt(curl_g, CURLOPT_URL, url);
    curl_easy_setopt(curl_g, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(curl_g, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(curl_g, CURLOPT_TIMEOUT_MS, 15000L);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(curl_g, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "GET") != 0)
        curl_easy_setopt(curl_g, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(curl_g, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(curl_g, CURLOPT_POSTFIELDSIZE_LARGE,
                         (curl_off_t)strlen(body));
    }
    struct curl_slist *hl = NULL;
    if (header) {
        hl = curl_slist_append(hl, header);
        curl_easy_setopt(curl_g, CURLOPT_HTTPHEADER, hl);
    }
    curl_easy_perform(curl_g);
    curl_easy_getinfo(curl_g, CURLINFO_RESPONSE_CODE, &r->status);
    char *ct = NULL;
    curl_easy_getinfo(curl_g, CURLINFO_CONTENT_TYPE, &ct);
    snprintf(r->ctype, sizeof r->ctype, "%s", ct ? ct : "");
    curl_slist_free_all(hl);
    if (!r->body.data)
        cr_buf_puts(&r->body, "");
    return r->status;
}

static long http(resp_t *r, const char *method, const char *path,
                 const char *body)
{
    return http_h(r, port_g, method, path, body, NULL);
}

static void resp_free(resp_t *r)
{
    cr_buf_free(&r->body);
}

static const char *jstr(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "(absent)";
}

/* Path lookup: "choices.0.delta.content" (numbers index arrays). */
static json_t *jget(json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *t = strtok_r(buf, ".", &save); t && o;
         t = strtok_r(NULL, ".", &save)) {
        if (json_is_array(o))
            o = json_array_get(o, strtoul(t, NULL, 10));
        else
            o = json_object_get(o, t);
    }
    return o;
}

static const char *jpstr(json_t *o, const char *path)
{
    const char *s = json_string_value(jget(o, path));
    return s ? s : "(absent)";
}

/* Splits an SSE body into events: each must be "data: <x>\n\n". Returns
 * the count; the payloads are parsed (NULL for [DONE], kept in done). */
static size_t sse(const char *body, json_t **ev, size_t max, bool *done)
{
    size_t n = 0;
    *done = false;
    const char *p = body;
    while (*p && n < max) {
        CHECK_MSG(!strncmp(p, "data: ", 6), "event without data: %s", p);
        if (strncmp(p, "data: ", 6) != 0)
            break;
        const char *end = strstr(p, "\n\n");
        CHECK_MSG(end != NULL, "unterminated event: %s", p);
        if (!end)
            break;
        CHECK_MSG(!*done, "an event after [DONE]");
        if (!strncmp(p + 6, "[DONE]", 6) && end == p + 12) {
            *done = true;
            ev[n++] = NULL;
        } else {
            ev[n] = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
            CHECK_MSG(ev[n] != NULL, "event is not JSON: %.*s",
                      (int)(end - p), p);
            n++;
        }
        p = end + 2;
    }
    return n;
}

static void free_events(json_t **ev, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(ev[i]);
}

/* An OpenAI-shaped error: message, type, and param/code null. */
static void expect_oai_error(resp_t *r, long status, const char *type,
                             const char *msg)
{
    CHECK_MSG(r->status == status, "status %ld, want %ld (%s)", r->status,
              status, r->body.data);
    json_t *j = json_loads(r->body.data, 0, NULL);
    json_t *e = json_object_get(j, "error");
    CHECK_MSG(json_is_object(e), "no error object: %s", r->body.data);
    CHECK_EQ_STR(jstr(e, "type"), type);
    if (msg)
        CHECK_EQ_STR(jstr(e, "message"), msg);
    CHECK(json_is_null(json_object_get(e, "param")));
    CHECK(json_is_null(json_object_get(e, "code")));
    CHECK_EQ_INT(json_object_size(e), 4);
    CHECK_EQ_INT(json_object_size(j), 1);
    CHECK_EQ_STR(r->ctype, "application/json; charset=utf-8");
    json_decref(j);
}

static fake_t *sched_g, *reg_g;

/* ================= translation (no HTTP) ================= */

/* Translates body for api; returns the native JSON (caller decrefs) or
 * NULL with err set. */
static json_t *translate(gw_oai_api_t api, const char *body,
                         gw_oai_info_t *info, cr_err_t *err)
{
    cr_buf_t out;
    cr_buf_init(&out, 1 << 20);
    gw_oai_info_t tmp;
    json_t *j = NULL;
    if (!gw_oai_translate(api, body, strlen(body), &out, info ? info : &tmp,
                          err))
        j = json_loads(out.data, 0, NULL);
    cr_buf_free(&out);
    return j;
}

static void expect_translate_error(gw_oai_api_t api, const char *body,
                                   const char *msg)
{
    cr_err_t err = {0};
    json_t *j = translate(api, body, NULL, &err);
    CHECK_MSG(j == NULL, "translated: %s", body);
    CHECK_MSG(strstr(err.msg, msg) != NULL, "%s: got \"%s\", want \"%s\"",
              body, err.msg, msg);
    json_decref(j);
}

static void test_translate_chat(void)
{
    cr_err_t err;
    gw_oai_info_t info;
    json_t *n = translate(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
        "\"content\":\"hi\"}]}",
        &info, &err);
    CHECK(n != NULL);
    CHECK(!info.stream && !info.include_usage);
    CHECK_EQ_STR(jpstr(n, "model"), "m");
    CHECK_EQ_STR(jpstr(n, "messages.0.content"), "hi");
    CHECK(json_real_value(jget(n, "options.temperature")) == 1.0);
    CHECK(json_real_value(jget(n, "options.top_p")) == 1.0);
    CHECK(json_is_false(jget(n, "stream")));
    json_decref(n);

    /* every mapped field, content parts, tool calls and a tool result */
    n = translate(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"stream\":true,"
        "\"stream_options\":{\"include_usage\":true},"
        "\"max_tokens\":7,\"temperature\":0.2,\"top_p\":0.5,\"seed\":42,"
        "\"frequency_penalty\":0.1,\"presence_penalty\":0.3,\"stop\":\"END\","
        "\"response_format\":{\"type\":\"json_object\"},"
        "\"reasoning_effort\":\"minimal\",\"logprobs\":true,"
        "\"top_logprobs\":2,"
        "\"options\":{\"num_ctx\":8192,\"temperature\":0.9},"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
        "\"messages\":["
        "{\"role\":\"system\",\"content\":\"be brief\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"look\"},"
        "{\"type\":\"image_url\",\"image_url\":{\"url\":"
        "\"data:image/png;base64,aGk=\"}},"
        "{\"type\":\"image_url\",\"image_url\":\"data:;base64,aGk=\"}]},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning\":\"hmm\","
        "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":"
        "{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"sunny\"}"
        "]}",
        &info, &err);
    CHECK_MSG(n != NULL, "%s", err.msg);
    CHECK(info.stream && info.include_usage);
    CHECK_EQ_INT(json_integer_value(jget(n, "options.num_predict")), 7);
    CHECK(json_real_value(jget(n, "options.temperature")) == 0.2);
    CHECK(json_real_value(jget(n, "options.top_p")) == 0.5);
    CHECK_EQ_INT(json_integer_value(jget(n, "options.seed")), 42);
    CHECK_EQ_INT(json_integer_value(jget(n, "options.num_ctx")), 8192);
    CHECK(json_real_value(jget(n, "options.frequency_penalty")) == 0.1);
    CHECK(json_real_value(jget(n, "options.presence_penalty")) == 0.3);
    CHECK_EQ_STR(jpstr(n, "options.stop.0"), "END");
    CHECK_EQ_STR(jpstr(n, "format"), "json");
    CHECK_EQ_STR(jpstr(n, "think"), "low");
    CHECK(json_is_true(jget(n, "logprobs")));
    CHECK_EQ_INT(json_integer_value(jget(n, "top_logprobs")), 2);
    CHECK_EQ_STR(jpstr(n, "tools.0.function.name"), "f");
    CHECK(json_is_true(jget(n, "stream")));
    json_t *msgs = json_object_get(n, "messages");
    CHECK_EQ_INT(json_array_size(msgs), 6);
    CHECK_EQ_STR(jpstr(msgs, "1.role"), "user");
    CHECK_EQ_STR(jpstr(msgs, "1.content"), "look");
    CHECK_EQ_STR(jpstr(msgs, "2.images.0"), "aGk=");
    CHECK_EQ_STR(jpstr(msgs, "2.role"), "user");
    CHECK_EQ_STR(jpstr(msgs, "3.images.0"), "aGk=");
    CHECK_EQ_STR(jpstr(msgs, "4.role"), "assistant");
    CHECK_EQ_STR(jpstr(msgs, "4.thinking"), "hmm");
    CHECK_EQ_STR(jpstr(msgs, "4.tool_calls.0.function.name"), "get_weather");
    CHECK_EQ_STR(jpstr(msgs, "4.tool_calls.0.function.arguments.city"),
                 "Paris");
    CHECK_EQ_STR(jpstr(msgs, "4.tool_calls.0.id"), "call_1");
    CHECK_EQ_STR(jpstr(msgs, "5.tool_name"), "get_weather");
    CHECK_EQ_STR(jpstr(msgs, "5.tool_call_id"), "call_1");
    CHECK_EQ_STR(jpstr(msgs, "5.content"), "sunny");
    json_decref(n);

    /* tool_choice none drops the tools; required is accepted */
    n = translate(GW_OAI_CHAT,
                  "{\"model\":\"m\",\"tool_choice\":\"none\",\"tools\":[{}],"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                  NULL, &err);
    CHECK(n && !json_object_get(n, "tools"));
    json_decref(n);
    n = translate(GW_OAI_CHAT,
                  "{\"model\":\"m\",\"tool_choice\":\"required\","
                  "\"tools\":[{}],"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                  NULL, &err);
    CHECK(n && json_object_get(n, "tools"));
    json_decref(n);

    /* a named function keeps only that tool; an unknown name is 400 */
    n = translate(GW_OAI_CHAT,
                  "{\"model\":\"m\",\"tool_choice\":{\"type\":\"function\","
                  "\"function\":{\"name\":\"g\"}},\"tools\":["
                  "{\"type\":\"function\",\"function\":{\"name\":\"f\"}},"
                  "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],"
                  "\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}],"
                  "\"max_completion_tokens\":9}",
                  NULL, &err);
    CHECK(n && json_array_size(jget(n, "tools")) == 1);
    CHECK_EQ_STR(jpstr(n, "tools.0.function.name"), "g");
    CHECK_EQ_STR(jpstr(n, "messages.0.role"), "system");
    CHECK_EQ_INT(json_integer_value(jget(n, "options.num_predict")), 9);
    json_decref(n);
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"tool_choice\":{\"type\":\"function\","
        "\"function\":{\"name\":\"h\"}},\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"f\"}}],\"messages\":[{\"role\":\"user\","
        "\"content\":\"x\"}]}",
        "tool_choice names function 'h', which is not in tools");

    /* required / named: generation constrained to a call's schema */
    n = translate(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":["
        "{\"type\":\"function\",\"function\":{\"name\":\"f\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":"
        "{\"type\":\"string\"}},\"required\":[\"a\"]}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"g\"}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        &info, &err);
    CHECK_MSG(n != NULL, "%s", err.msg);
    CHECK(info.forced_call);
    CHECK_EQ_INT(json_array_size(jget(n, "format.anyOf")), 2);
    CHECK_EQ_STR(jpstr(n, "format.anyOf.0.properties.name.const"), "f");
    CHECK_EQ_STR(jpstr(n, "format.anyOf.0.properties.arguments.required.0"),
                 "a");
    CHECK_EQ_STR(jpstr(n, "format.anyOf.0.required.1"), "arguments");
    CHECK_EQ_STR(jpstr(n, "format.anyOf.1.properties.name.const"), "g");
    CHECK_EQ_STR(jpstr(n, "format.anyOf.1.properties.arguments.type"),
                 "object");
    CHECK_EQ_INT(json_array_size(jget(n, "tools")), 2);
    json_decref(n);
    n = translate(GW_OAI_CHAT,
                  "{\"model\":\"m\",\"tool_choice\":{\"type\":"
                  "\"function\",\"function\":{\"name\":\"g\"}},"
                  "\"tools\":[{\"type\":\"function\",\"function\":{"
                  "\"name\":\"f\"}},{\"type\":\"function\",\"function\":"
                  "{\"name\":\"g\"}}],\"messages\":[{\"role\":\"user\","
                  "\"content\":\"x\"}]}",
                  &info, &err);
    CHECK(n && info.forced_call);
    CHECK_EQ_STR(jpstr(n, "format.properties.name.const"), "g");
    json_decref(n);
    n = translate(GW_OAI_CHAT,
                  "{\"model\":\"m\",\"tool_choice\":\"required\","
                  "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                  &info, &err);
    CHECK(n && !info.forced_call && !jget(n, "format"));
    json_decref(n);
    n = translate(GW_OAI_CHAT,
                  "{\"model\":\"m\",\"tool_choice\":\"auto\",\"tools\":["
                  "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                  &info, &err);
    CHECK(n && !info.forced_call && !jget(n, "format"));
    json_decref(n);
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"tool_choice\":\"required\",\"tools\":["
        "{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
        "\"response_format\":{\"type\":\"json_object\"},"
        "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
        "response_format cannot be combined with tool_choice");

    /* json_schema, stop arrays, effort mapping, text format */
    n = translate(GW_OAI_CHAT,
                  "{\"model\":\"m\",\"stop\":[\"a\",\"b\"],"
                  "\"reasoning_effort\":\"xhigh\","
                  "\"response_format\":{\"type\":\"json_schema\","
                  "\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":"
                  "\"object\"}}},"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                  NULL, &err);
    CHECK(n != NULL);
    CHECK_EQ_STR(jpstr(n, "format.type"), "object");
    CHECK_EQ_STR(jpstr(n, "options.stop.1"), "b");
    CHECK_EQ_STR(jpstr(n, "think"), "max");
    json_decref(n);
    n = translate(GW_OAI_CHAT,
                  "{\"model\":\"m\",\"reasoning_effort\":\"none\","
                  "\"response_format\":{\"type\":\"text\"},"
                  "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
                  NULL, &err);
    CHECK(n && json_is_false(jget(n, "think")) && !jget(n, "format"));
    json_decref(n);

    /* bad input, each its own message */
    expect_translate_error(GW_OAI_CHAT, "", "missing request body");
    expect_translate_error(GW_OAI_CHAT, "{", "");
    expect_translate_error(GW_OAI_CHAT, "[1]", "cannot unmarshal array");
    expect_translate_error(GW_OAI_CHAT, "{\"model\":\"m\",\"messages\":[]}",
                           "[] is too short - 'messages'");
    expect_translate_error(GW_OAI_CHAT, "{\"model\":\"m\"}",
                           "[] is too short - 'messages'");
    expect_translate_error(GW_OAI_CHAT,
                           "{\"model\":\"m\",\"messages\":\"hi\"}",
                           "cannot unmarshal string");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{"
        "\"type\":\"image_url\",\"image_url\":{\"url\":"
        "\"https://example.com/cat.png\"}}]}]}",
        "image URLs are not currently supported, please use base64 encoded "
        "data instead");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{"
        "\"type\":\"image_url\","
        "\"image_url\":\"data:text/html;base64,aGk=\"}]}]}",
        "invalid image input");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{"
        "\"type\":\"video\"}]}]}",
        "invalid message format");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":"
        "[{\"function\":{\"name\":\"f\",\"arguments\":\"{not json\"}}]}]}",
        "invalid tool call arguments");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"assistant\",\"tool_calls\":"
        "[{\"function\":{\"name\":\"f\",\"arguments\":\"[1]\"}}]}]}",
        "invalid tool call arguments");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":null}]}",
        "invalid message content type: <nil>");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":5}]}",
        "invalid message content type: number");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"max_tokens\":\"7\",\"messages\":[{"
        "\"role\":\"user\","
        "\"content\":\"x\"}]}",
        "cannot unmarshal string into field 'max_tokens'");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"stream\":1,\"messages\":[{\"role\":\"user\","
        "\"content\":\"x\"}]}",
        "field 'stream'");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"stop\":[1],\"messages\":[{\"role\":\"user\","
        "\"content\":\"x\"}]}",
        "invalid type for 'stop' field");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"reasoning_effort\":\"lots\",\"messages\":[{"
        "\"role\":\"user\",\"content\":\"x\"}]}",
        "invalid reasoning value: 'lots'");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"response_format\":{\"type\":\"yaml\"},\"messages\":"
        "[{\"role\":\"user\",\"content\":\"x\"}]}",
        "invalid response_format type");
    expect_translate_error(
        GW_OAI_CHAT,
        "{\"model\":\"m\",\"options\":[1],\"messages\":[{\"role\":\"user\","
        "\"content\":\"x\"}]}",
        "field 'options'");
}

static void test_translate_other(void)
{
    cr_err_t err;
    gw_oai_info_t info;
    json_t *n = translate(GW_OAI_COMPLETIONS,
                          "{\"model\":\"m\",\"prompt\":\"p\",\"suffix\":\"s\","
                          "\"top_p\":0,\"logprobs\":3,\"max_tokens\":4}",
                          &info, &err);
    CHECK(n != NULL);
    CHECK_EQ_STR(jpstr(n, "prompt"), "p");
    CHECK_EQ_STR(jpstr(n, "suffix"), "s");
    CHECK(json_real_value(jget(n, "options.top_p")) == 1.0); /* 0 -> 1 */
    CHECK(json_real_value(jget(n, "options.temperature")) == 1.0);
    CHECK(json_is_number(jget(n, "options.frequency_penalty")));
    CHECK(json_is_number(jget(n, "options.presence_penalty")));
    CHECK_EQ_INT(json_integer_value(jget(n, "options.num_predict")), 4);
    CHECK(json_is_true(jget(n, "logprobs")));
    CHECK_EQ_INT(json_integer_value(jget(n, "top_logprobs")), 3);
    json_decref(n);
    expect_translate_error(GW_OAI_COMPLETIONS,
                           "{\"model\":\"m\",\"prompt\":[\"a\"]}",
                           "invalid type for 'prompt' field");

    n = translate(GW_OAI_EMBEDDINGS, "{\"model\":\"m\",\"input\":\"\"}", &info,
                  &err);
    CHECK(n && json_array_size(jget(n, "input")) == 1);
    CHECK_EQ_STR(jpstr(n, "input.0"), "");
    CHECK(!info.base64);
    json_decref(n);
    n = translate(GW_OAI_EMBEDDINGS,
                  "{\"model\":\"m\",\"input\":[\"a\",\"b\"],\"dimensions\":2,"
                  "\"encoding_format\":\"base64\"}",
                  &info, &err);
    CHECK(n && json_array_size(jget(n, "input")) == 2);
    CHECK_EQ_INT(json_integer_value(jget(n, "dimensions")), 2);
    CHECK(info.base64);
    json_decref(n);
    expect_translate_error(GW_OAI_EMBEDDINGS,
                           "{\"model\":\"m\",\"input\":[]}", "invalid input");
    expect_translate_error(GW_OAI_EMBEDDINGS,
                           "{\"model\":\"m\",\"input\":[[1,2]]}",
                           "invalid input");
    expect_translate_error(GW_OAI_EMBEDDINGS, "{\"model\":\"m\"}",
                           "invalid input");
    expect_translate_error(GW_OAI_EMBEDDINGS,
                           "{\"model\":\"m\",\"input\":\"a\","
                           "\"encoding_format\":\"int8\"}",
                           "invalid encoding format");

    cr_buf_t b;
    cr_buf_init(&b, 4096);
    CHECK_EQ_INT(gw_oai_render_error(&b, 404, "x \"y\""), CR_OK);
    CHECK_EQ_STR(b.data, "{\"error\":{\"message\":\"x \\\"y\\\"\",\"type\":"
                         "\"not_found_error\",\"param\":null,\"code\":null}}");
    cr_buf_reset(&b);
    gw_oai_render_error(&b, 400, "x");
    CHECK(strstr(b.data, "invalid_request_error") != NULL);
    cr_buf_reset(&b);
    gw_oai_render_error(&b, 503, "x");
    CHECK(strstr(b.data, "\"api_error\"") != NULL);
    cr_buf_free(&b);
}

/* ================= over HTTP ================= */

static const char CHAT_OK[] =
    "{\"model\":\"ok\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";

static char *chat_body(const char *model, const char *extra)
{
    static char buf[1024];
    if (snprintf(buf, sizeof buf,
                 "{\"model\":\"%s\",\"messages\":[{\"role\":\"user\","
                 "\"content\":\"hi\"}]%s}",
                 model, extra ? extra : "") >= (int)sizeof buf)
        buf[0] = '\0'; /* an empty body: the test then fails visibly */
    return buf;
}

/* Every chunk: same id and created, the chunk object, fp_ollama. */
static void check_chunk_common(json_t *e, const char *id, json_int_t created,
                               const char *object)
{
    CHECK_EQ_STR(jstr(e, "id"), id);
    CHECK_EQ_STR(jstr(e, "object"), object);
    CHECK(json_integer_value(json_object_get(e, "created")) == created);
    CHECK_EQ_STR(jstr(e, "system_fingerprint"), "fp_ollama");
    CHECK_EQ_STR(jstr(e, "model"), "ok");
}

static void test_chat_http(void)
{
    resp_t r;
    /* non-stream (the default here) */
    http(&r, "POST", "/v1/chat/completions", chat_body("ok", NULL));
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(r.ctype, "application/json; charset=utf-8");
    json_t *j = json_loads(r.body.data, 0, NULL);
    CHECK_MSG(!strncmp(jstr(j, "id"), "chatcmpl-", 9), "%s", jstr(j, "id"));
    long idn = strtol(jstr(j, "id") + 9, NULL, 10);
    CHECK(idn >= 0 && idn <= 998);
    CHECK_EQ_STR(jstr(j, "object"), "chat.completion");
    CHECK(json_integer_value(json_object_get(j, "created")) >
          (json_int_t)time(NULL) - 60);
    CHECK_EQ_STR(jstr(j, "model"), "ok");
    CHECK_EQ_STR(jstr(j, "system_fingerprint"), "fp_ollama");
    CHECK_EQ_STR(jpstr(j, "choices.0.message.role"), "assistant");
    CHECK_EQ_STR(jpstr(j, "choices.0.message.content"), "Hello");
    CHECK_EQ_STR(jpstr(j, "choices.0.finish_reason"), "stop");
    CHECK_EQ_INT(json_integer_value(jget(j, "choices.0.index")), 0);
    CHECK_EQ_INT(json_integer_value(jget(j, "usage.prompt_tokens")), 5);
    CHECK_EQ_INT(json_integer_value(jget(j, "usage.completion_tokens")), 2);
    CHECK_EQ_INT(json_integer_value(jget(j, "usage.total_tokens")), 7);
    CHECK(!jget(j, "choices.0.message.tool_calls"));
    json_decref(j);
    resp_free(&r);

    /* the native request the scheduler saw */
    msg_t last;
    fake_last(sched_g, &last);
    CHECK_EQ_INT(last.type, MSG_chat);
    CHECK(last.u.chat.has_options && last.u.chat.options->has_temperature &&
          last.u.chat.options->temperature == 1.0);
    CHECK(last.u.chat.options->has_top_p && last.u.chat.options->top_p == 1.0);
    CHECK_EQ_INT(last.u.chat.messages.n, 1);
    msg_clear(&last);

    /* stream with usage: role chunk, deltas, finish chunk, usage, [DONE] */
    http(&r, "POST", "/v1/chat/completions",
         chat_body("ok", ",\"stream\":true,\"stream_options\":"
                         "{\"include_usage\":true}"));
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(r.ctype, "text/event-stream");
    json_t *ev[32];
    bool done;
    size_t n = sse(r.body.data, ev, 32, &done);
    CHECK_EQ_INT(n, 6);
    CHECK(done);
    if (n == 6) {
        const char *id = jstr(ev[0], "id");
        json_int_t created =
            json_integer_value(json_object_get(ev[0], "created"));
        CHECK(!strncmp(id, "chatcmpl-", 9));
        for (int i = 0; i < 5; i++)
            check_chunk_common(ev[i], id, created, "chat.completion.chunk");
        CHECK_EQ_STR(jpstr(ev[0], "choices.0.delta.role"), "assistant");
        CHECK_EQ_STR(jpstr(ev[0], "choices.0.delta.content"), "");
        CHECK(json_is_null(jget(ev[0], "choices.0.finish_reason")));
        CHECK_EQ_STR(jpstr(ev[1], "choices.0.delta.content"), "Hel");
        CHECK(!jget(ev[1], "choices.0.delta.role"));
        CHECK_EQ_STR(jpstr(ev[2], "choices.0.delta.content"), "lo");
        CHECK(json_is_null(jget(ev[2], "choices.0.finish_reason")));
        CHECK_EQ_INT(json_object_size(jget(ev[3], "choices.0.delta")), 0);
        CHECK_EQ_STR(jpstr(ev[3], "choices.0.finish_reason"), "stop");
        CHECK(!jget(ev[3], "usage"));
        CHECK_EQ_INT(json_array_size(jget(ev[4], "choices")), 0);
        CHECK_EQ_INT(json_integer_value(jget(ev[4], "usage.prompt_tokens")), 5);
        CHECK_EQ_INT(json_integer_value(jget(ev[4], "usage.total_tokens")), 7);
        CHECK(ev[5] == NULL);
    }
    free_events(ev, n);
    resp_free(&r);
    /* the exact bytes of one chunk */
    http(&r, "POST", "/v1/chat/completions",
         chat_body("ok", ",\"stream\":true"));
    CHECK_MSG(strstr(r.body.data,
                     "\"system_fingerprint\":\"fp_ollama\",\"choices\":[{"
                     "\"index\":0,\"delta\":{\"content\":\"Hel\"},"
                     "\"finish_reason\":null}]}\n\n") != NULL,
              "%s", r.body.data);
    CHECK(strstr(r.body.data, "\"usage\"") == NULL);
    size_t len = strlen(r.body.data);
    CHECK(len > 14 && !strcmp(r.body.data + len - 14, "data: [DONE]\n\n"));
    resp_free(&r);

    /* reasoning and content in one native chunk: two SSE chunks */
    http(&r, "POST", "/v1/chat/completions",
         chat_body("think", ",\"stream\":true"));
    static const char comment[] = ": loading model\n\n";
    CHECK_MSG(!strncmp(r.body.data, comment, strlen(comment)), "%s",
              r.body.data);
    n = sse(r.body.data + strlen(comment), ev, 32, &done);
    CHECK_EQ_INT(n, 5);
    if (n == 5) {
        CHECK_EQ_STR(jpstr(ev[1], "choices.0.delta.reasoning"), "hm");
        CHECK(!jget(ev[1], "choices.0.delta.content"));
        CHECK_EQ_STR(jpstr(ev[2], "choices.0.delta.content"), "A");
        CHECK_EQ_STR(jpstr(ev[3], "choices.0.finish_reason"), "stop");
    }
    free_events(ev, n);
    resp_free(&r);
    http(&r, "POST", "/v1/chat/completions", chat_body("think", NULL));
    j = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jpstr(j, "choices.0.message.reasoning"), "hm");
    CHECK_EQ_STR(jpstr(j, "choices.0.message.content"), "A");
    json_decref(j);
    resp_free(&r);

    /* tool calls: arguments as a JSON string, finish_reason tool_calls */
    http(&r, "POST", "/v1/chat/completions", chat_body("tools", NULL));
    j = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jpstr(j, "choices.0.finish_reason"), "tool_calls");
    CHECK_EQ_STR(jpstr(j, "choices.0.message.tool_calls.0.type"), "function");
    CHECK_EQ_STR(jpstr(j, "choices.0.message.tool_calls.0.function.name"),
                 "get_weather");
    CHECK_EQ_STR(jpstr(j, "choices.0.message.tool_calls.0.function.arguments"),
                 "{\"city\":\"Paris\",\"days\":2}");
    CHECK_EQ_INT(
        json_integer_value(jget(j, "choices.0.message.tool_calls.0.index")),
                 0);
    const char *cid = jpstr(j, "choices.0.message.tool_calls.0.id");
    CHECK_MSG(!strncmp(cid, "call_", 5) && strlen(cid) == 13, "%s", cid);
    json_decref(j);
    resp_free(&r);
    http(&r, "POST", "/v1/chat/completions",
         chat_body("tools", ",\"stream\":true"));
    n = sse(r.body.data, ev, 32, &done);
    CHECK_EQ_INT(n, 4);
    if (n == 4) {
        CHECK_EQ_STR(jpstr(ev[1], "choices.0.delta.tool_calls.0.function."
                                  "arguments"),
                     "{\"city\":\"Paris\",\"days\":2}");
        CHECK_EQ_STR(jpstr(ev[2], "choices.0.finish_reason"), "tool_calls");
    }
    free_events(ev, n);
    resp_free(&r);

    /* a forced call: the constrained JSON text becomes a tool call */
    static const char forced_tools[] =
        ",\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\"}}]";
    http(&r, "POST", "/v1/chat/completions",
         chat_body("forced", forced_tools));
    j = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jpstr(j, "choices.0.finish_reason"), "tool_calls");
    CHECK_EQ_STR(jpstr(j, "choices.0.message.content"), "");
    CHECK_EQ_STR(jpstr(j, "choices.0.message.reasoning"), "let me see");
    CHECK_EQ_STR(jpstr(j, "choices.0.message.tool_calls.0.function.name"),
                 "get_weather");
    CHECK_EQ_STR(
        jpstr(j, "choices.0.message.tool_calls.0.function.arguments"),
        "{\"city\":\"Paris\"}");
    json_decref(j);
    resp_free(&r);
    fake_last(sched_g, &last);
    CHECK(last.u.chat.format &&
          strstr(last.u.chat.format, "\"const\":\"get_weather\"") != NULL);
    msg_clear(&last);
    char fbody[1024];
    snprintf(fbody, sizeof fbody, "%s,\"stream\":true", forced_tools);
    http(&r, "POST", "/v1/chat/completions", chat_body("forced", fbody));
    n = sse(r.body.data, ev, 32, &done);
    CHECK_EQ_INT(n, 5);
    CHECK(done);
    if (n == 5) {
        CHECK_EQ_STR(jpstr(ev[0], "choices.0.delta.role"), "assistant");
        CHECK_EQ_STR(jpstr(ev[1], "choices.0.delta.reasoning"), "let me see");
        CHECK_EQ_STR(jpstr(ev[2], "choices.0.delta.tool_calls.0.function.name"),
                     "get_weather");
        CHECK(!jget(ev[2], "choices.0.delta.content"));
        CHECK_EQ_STR(jpstr(ev[3], "choices.0.finish_reason"), "tool_calls");
    }
    free_events(ev, n);
    resp_free(&r);
    /* text that is not a call stays text */
    http(&r, "POST", "/v1/chat/completions", chat_body("ok", forced_tools));
    j = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jpstr(j, "choices.0.message.content"), "Hello");
    CHECK_EQ_STR(jpstr(j, "choices.0.finish_reason"), "stop");
    json_decref(j);
    resp_free(&r);
    snprintf(fbody, sizeof fbody, "%s,\"stream\":true", forced_tools);
    http(&r, "POST", "/v1/chat/completions", chat_body("ok", fbody));
    n = sse(r.body.data, ev, 32, &done);
    CHECK_EQ_INT(n, 4);
    if (n == 4)
        CHECK_EQ_STR(jpstr(ev[1], "choices.0.delta.content"), "Hello");
    free_events(ev, n);
    resp_free(&r);

    /* length and logprobs */
    http(&r, "POST", "/v1/chat/completions", chat_body("len", NULL));
    j = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jpstr(j, "choices.0.finish_reason"), "length");
    CHECK_EQ_STR(jpstr(j, "choices.0.logprobs.content.0.token"), "abc");
    json_decref(j);
    resp_free(&r);

    /* errors in OpenAI's shape, with the native statuses */
    http(&r, "POST", "/v1/chat/completions", chat_body("missing", NULL));
    expect_oai_error(&r, 404, "not_found_error",
                     "model \"missing\" not found, try pulling it first");
    resp_free(&r);
    http(&r, "POST", "/v1/chat/completions",
         chat_body("missing", ",\"stream\":true"));
    expect_oai_error(&r, 404, "not_found_error", NULL);
    resp_free(&r);
    http(&r, "POST", "/v1/chat/completions", chat_body("busy", NULL));
    expect_oai_error(&r, 503, "api_error", "server busy");
    resp_free(&r);
    http(&r, "POST", "/v1/chat/completions",
         "{\"model\":\"ok\",\"messages\":[]}");
    expect_oai_error(&r, 400, "invalid_request_error",
                     "[] is too short - 'messages'");
    resp_free(&r);
    http(&r, "POST", "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    expect_oai_error(&r, 400, "invalid_request_error", "model is required");
    resp_free(&r);
    http(&r, "POST", "/v1/chat/completions", "");
    expect_oai_error(&r, 400, "invalid_request_error", "missing request body");
    resp_free(&r);
    http(&r, "POST", "/v1/chat/completions",
         chat_body("ok", ",\"options\":{\"temperature\":\"hot\"}"));
    expect_oai_error(&r, 400, "invalid_request_error",
                     "option \"temperature\" must be of type float32");
    resp_free(&r);
    /* a failure after the stream started: an error event, no [DONE] */
    http(&r, "POST", "/v1/chat/completions",
         chat_body("midfail", ",\"stream\":true"));
    CHECK_EQ_INT(r.status, 200);
    n = sse(r.body.data, ev, 32, &done);
    CHECK(!done);
    CHECK(n >= 1 && ev[n - 1] &&
          !strcmp(jpstr(ev[n - 1], "error.message"), "runner died"));
    free_events(ev, n);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "GET", "/v1/chat/completions", NULL), 405);
    resp_free(&r);
    (void)CHAT_OK;
}

/* Takes bytes until the first SSE event is complete, then hangs up. */
static size_t on_write_one_event(char *p, size_t sz, size_t n, void *ud)
{
    cr_buf_t *b = ud;
    cr_buf_append(b, p, sz * n);
    return b->data && strstr(b->data, "\n\n") ? 0 : sz * n;
}

static void test_sse_disconnect(void)
{
    int before = atomic_load(&sched_g->n_cancels);
    cr_buf_t got;
    cr_buf_init(&got, 1 << 20);
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/chat/completions",
             port_g);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS,
                     chat_body("slow", ",\"stream\":true"));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write_one_event);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &got);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    CURLcode rc = curl_easy_perform(c);
    CHECK_EQ_INT(rc, CURLE_WRITE_ERROR);
    curl_easy_cleanup(c);
    CHECK(got.data && !strncmp(got.data, "data: {", 7));
    bool seen = false;
    for (int i = 0; i < 200 && !seen; i++) {
        seen = atomic_load(&sched_g->n_cancels) > before;
        sleep_ms(10);
    }
    CHECK_MSG(seen, "no cancel reached the scheduler");
    cr_buf_free(&got);
    /* and the server still answers */
    resp_t r;
    CHECK_EQ_INT(http(&r, "POST", "/v1/chat/completions",
                      chat_body("ok", NULL)),
                 200);
    resp_free(&r);
}

static void test_completions_http(void)
{
    resp_t r;
    http(&r, "POST", "/v1/completions", "{\"model\":\"ok\",\"prompt\":\"p\"}");
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body.data, 0, NULL);
    CHECK(!strncmp(jstr(j, "id"), "cmpl-", 5));
    CHECK_EQ_STR(jstr(j, "object"), "text_completion");
    CHECK_EQ_STR(jpstr(j, "choices.0.text"), "Hello");
    CHECK_EQ_STR(jpstr(j, "choices.0.finish_reason"), "stop");
    CHECK_EQ_INT(json_integer_value(jget(j, "usage.total_tokens")), 7);
    json_decref(j);
    resp_free(&r);
    msg_t last;
    fake_last(sched_g, &last);
    CHECK_EQ_INT(last.type, MSG_generate);
    CHECK_EQ_STR(last.u.generate.prompt, "p");
    msg_clear(&last);

    http(&r, "POST", "/v1/completions",
         "{\"model\":\"ok\",\"prompt\":\"p\",\"stream\":true,"
         "\"stream_options\":{\"include_usage\":true}}");
    json_t *ev[16];
    bool done;
    size_t n = sse(r.body.data, ev, 16, &done);
    CHECK_EQ_INT(n, 5);
    CHECK(done);
    if (n == 5) {
        CHECK_EQ_STR(jstr(ev[0], "object"), "text_completion");
        CHECK_EQ_STR(jpstr(ev[0], "choices.0.text"), "Hel");
        CHECK(json_is_null(jget(ev[0], "choices.0.finish_reason")));
        CHECK_EQ_INT(json_integer_value(jget(ev[0], "usage.total_tokens")), 0);
        CHECK_EQ_STR(jpstr(ev[1], "choices.0.text"), "lo");
        CHECK_EQ_STR(jpstr(ev[2], "choices.0.finish_reason"), "stop");
        CHECK_EQ_INT(json_array_size(jget(ev[3], "choices")), 0);
        CHECK_EQ_INT(json_integer_value(jget(ev[3], "usage.total_tokens")), 7);
    }
    free_events(ev, n);
    resp_free(&r);

    http(&r, "POST", "/v1/completions",
         "{\"model\":\"len\",\"prompt\":\"p\",\"logprobs\":1}");
    j = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jpstr(j, "choices.0.finish_reason"), "length");
    CHECK_EQ_STR(jpstr(j, "choices.0.logprobs.tokens.0"), "abc");
    CHECK(json_real_value(jget(j, "choices.0.logprobs.token_logprobs.0")) ==
          -0.5);
    CHECK(json_is_number(jget(j, "choices.0.logprobs.top_logprobs.0.abc")));
    json_decref(j);
    resp_free(&r);

    http(&r, "POST", "/v1/completions", "{\"model\":\"ok\",\"prompt\":5}");
    expect_oai_error(&r, 400, "invalid_request_error", NULL);
    resp_free(&r);
}

static float f32_le(const unsigned char *p)
{
    uint32_t u = (uint32_t)p[0] | (uint32_t)p[1] << 8 |
                 (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static size_t b64_decode(const char *s, unsigned char *out, size_t cap)
{
    static const char al[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        const char *p = strchr(al, *s);
        if (!p)
            return 0;
        acc = acc << 6 | (uint32_t)(p - al);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n < cap)
                out[n] = (unsigned char)(acc >> bits);
            n++;
        }
    }
    return n;
}

static void test_embeddings_http(void)
{
    resp_t r;
    http(&r, "POST", "/v1/embeddings",
         "{\"model\":\"e\",\"input\":[\"a\",\"b\"]}");
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jstr(j, "object"), "list");
    CHECK_EQ_STR(jstr(j, "model"), "e");
    CHECK_EQ_INT(json_array_size(jget(j, "data")), 2);
    CHECK_EQ_STR(jpstr(j, "data.1.object"), "embedding");
    CHECK_EQ_INT(json_integer_value(jget(j, "data.1.index")), 1);
    for (int i = 0; i < 6; i++) {
        char path[64];
        snprintf(path, sizeof path, "data.%d.embedding.%d", i / 3, i % 3);
        CHECK((float)json_number_value(jget(j, path)) == EMB[i]);
    }
    CHECK_EQ_INT(json_integer_value(jget(j, "usage.prompt_tokens")), 7);
    CHECK_EQ_INT(json_integer_value(jget(j, "usage.total_tokens")), 7);
    json_decref(j);
    resp_free(&r);

    http(&r, "POST", "/v1/embeddings",
         "{\"model\":\"e\",\"input\":[\"a\",\"b\"],\"encoding_format\":"
         "\"base64\"}");
    j = json_loads(r.body.data, 0, NULL);
    for (int row = 0; row < 2; row++) {
        char path[64];
        snprintf(path, sizeof path, "data.%d.embedding", row);
        const char *b64 = jpstr(j, path);
        unsigned char raw[64];
        size_t n = b64_decode(b64, raw, sizeof raw);
        CHECK_EQ_INT(n, 12);
        for (int k = 0; k < 3 && n == 12; k++)
            CHECK(f32_le(raw + 4 * k) == EMB[row * 3 + k]);
    }
    json_decref(j);
    resp_free(&r);

    http(&r, "POST", "/v1/embeddings", "{\"model\":\"e\",\"input\":\"\"}");
    CHECK_EQ_INT(r.status, 200);
    j = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_INT(json_array_size(jget(j, "data")), 1);
    json_decref(j);
    resp_free(&r);

    http(&r, "POST", "/v1/embeddings", "{\"model\":\"e\",\"input\":[]}");
    expect_oai_error(&r, 400, "invalid_request_error", "invalid input");
    resp_free(&r);
    http(&r, "POST", "/v1/embeddings",
         "{\"model\":\"e\",\"input\":\"a\",\"encoding_format\":\"hex\"}");
    expect_oai_error(&r, 400, "invalid_request_error", NULL);
    resp_free(&r);
    http(&r, "POST", "/v1/embeddings",
         "{\"model\":\"missing\",\"input\":\"a\"}");
    expect_oai_error(&r, 404, "not_found_error", NULL);
    resp_free(&r);
}

static void test_models_http(void)
{
    resp_t r;
    http(&r, "GET", "/v1/models", NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jstr(j, "object"), "list");
    CHECK_EQ_INT(json_array_size(jget(j, "data")), 2);
    CHECK_EQ_STR(jpstr(j, "data.0.id"), "llama3:latest");
    CHECK_EQ_STR(jpstr(j, "data.0.object"), "model");
    CHECK_EQ_INT(json_integer_value(jget(j, "data.0.created")), 1714557600);
    CHECK_EQ_STR(jpstr(j, "data.0.owned_by"), "library");
    CHECK_EQ_INT(json_integer_value(jget(j, "data.1.created")), 1714557600);
    CHECK_EQ_STR(jpstr(j, "data.1.owned_by"), "someone");
    json_decref(j);
    resp_free(&r);

    http(&r, "GET", "/v1/models/LLAMA3", NULL);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(r.body.data, "{\"id\":\"LLAMA3\",\"object\":\"model\","
                              "\"created\":1714557600,\"owned_by\":"
                              "\"library\"}");
    resp_free(&r);
    http(&r, "GET", "/v1/models/nothere", NULL);
    expect_oai_error(&r, 404, "not_found_error", "model 'nothere' not found");
    resp_free(&r);
    http(&r, "GET", "/v1/models/bad%20name", NULL);
    CHECK_EQ_INT(r.status, 404);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "POST", "/v1/models", "{}"), 405);
    resp_free(&r);
}

static void test_tokenize_http(void)
{
    resp_t r;
    http(&r, "POST", "/api/tokenize",
         "{\"model\":\"m\",\"content\":\"hi\",\"options\":{\"num_ctx\":64}}");
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(r.body.data, "{\"tokens\":[104,105]}");
    resp_free(&r);
    msg_t last;
    fake_last(sched_g, &last);
    CHECK_EQ_INT(last.type, MSG_tokenize);
    CHECK_EQ_STR(last.u.tokenize.model, "m");
    CHECK(last.u.tokenize.has_options &&
          last.u.tokenize.options->num_ctx == 64);
    msg_clear(&last);

    http(&r, "POST", "/api/detokenize",
         "{\"model\":\"m\",\"tokens\":[104,105,33]}");
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(r.body.data, "{\"text\":\"hi!\"}");
    resp_free(&r);

    struct {
        const char *path, *body, *error;
        long status;
    } bad[] = {
        {"/api/tokenize", "", "missing request body", 400},
        {"/api/tokenize", "{\"content\":\"x\"}", "model is required", 400},
        {"/api/tokenize", "{\"model\":5}", NULL, 400},
        {"/api/tokenize", "{\"model\":\"m\",\"content\":[1]}", NULL, 400},
        {"/api/tokenize", "{\"model\":\"m\",\"options\":{\"top_k\":\"x\"}}",
         "option \"top_k\" must be of type integer", 400},
        {"/api/tokenize", "{\"model\":\"missing\",\"content\":\"x\"}",
         "model \"missing\" not found, try pulling it first", 404},
        {"/api/detokenize", "{\"model\":\"m\",\"tokens\":\"x\"}", NULL, 400},
        {"/api/detokenize", "{\"model\":\"m\",\"tokens\":[-1]}",
         "tokens[0] is not a token id", 400},
        {"/api/detokenize", "{\"model\":\"m\",\"tokens\":[1.5]}", NULL, 400},
        {"/api/detokenize", "{\"model\":\"m\",\"tokens\":[4294967296]}", NULL,
         400},
        {"/api/detokenize", "[]", NULL, 400},
    };
    for (size_t i = 0; i < CR_ARRAY_LEN(bad); i++) {
        http(&r, "POST", bad[i].path, bad[i].body);
        CHECK_MSG(r.status == bad[i].status, "%s %s: %ld %s", bad[i].path,
                  bad[i].body, r.status, r.body.data);
        json_t *j = json_loads(r.body.data, 0, NULL);
        CHECK_MSG(json_is_string(json_object_get(j, "error")), "%s",
                  r.body.data);
        if (bad[i].error)
            CHECK_EQ_STR(jstr(j, "error"), bad[i].error);
        json_decref(j);
        resp_free(&r);
    }
}

/* The value of the sample whose text before the value is `series`, or -1. */
static double metric(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p && *p;) {
        const char *eol = strchr(p, '\n');
        if (!strncmp(p, series, n) && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = eol ? eol + 1 : NULL;
    }
    return -1;
}

/* Every line is a comment (# HELP / # TYPE) or `name[{labels}] value`. */
static void check_exposition(const char *text)
{
    int samples = 0;
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        CHECK_MSG(eol != NULL, "last line unterminated");
        if (!eol)
            break;
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(eol - p), p);
        if (line[0] == '#') {
            CHECK_MSG(!strncmp(line, "# HELP ", 7) ||
                          !strncmp(line, "# TYPE ", 7),
                      "%s", line);
        } else {
            const char *q = line;
            while (*q == '_' || isalnum((unsigned char)*q))
                q++;
            CHECK_MSG(q > line, "%s", line);
            if (*q == '{') {
                const char *close = strchr(q, '}');
                CHECK_MSG(close != NULL, "%s", line);
                q = close ? close + 1 : q;
            }
            CHECK_MSG(*q == ' ', "%s", line);
            char *end = NULL;
            strtod(q + 1, &end);
            CHECK_MSG(end && *end == '\0' && end > q + 1, "%s", line);
            samples++;
        }
        p = eol + 1;
    }
    CHECK(samples > 10);
}

/* A request is counted (and leaves in_flight) when libmicrohttpd reports
 * it completed, which can be just after the client has the whole answer.
 * The value of series in a scrape, absent as 0. */
static double count_of(const char *text, const char *series)
{
    double v = metric(text, series);
    return v < 0 ? 0 : v;
}

#define CHAT200 "corral_http_requests_total{route=\"/v1/chat/completions\",code=\"200\"}"
#define CHAT400 "corral_http_requests_total{route=\"/v1/chat/completions\",code=\"400\"}"
#define OTHER404 "corral_http_requests_total{route=\"other\",code=\"404\"}"

static void test_metrics_http(void)
{
    resp_t r;
    /* the earlier tests' last requests are done: only this scrape is in
     * flight (a request that never leaves in_flight fails below) */
    for (int i = 0; i < 1000; i++) {
        http(&r, "GET", "/metrics", NULL);
        if (r.status != 200 ||
            metric(r.body.data, "corral_http_requests_in_flight") == 1)
            break;
        resp_free(&r);
        sleep_ms(10);
    }
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(r.ctype, "text/plain; version=0.0.4; charset=utf-8");
    check_exposition(r.body.data);
    double chat200 = metric(r.body.data, CHAT200);
    double chat400 = count_of(r.body.data, CHAT400);
    double other404 = count_of(r.body.data, OTHER404);
    double out = metric(r.body.data, "corral_completion_tokens_total");
    double in = metric(r.body.data, "corral_prompt_tokens_total");
    double ttft =
        metric(r.body.data, "corral_time_to_first_token_seconds_count");
    double tok = metric(r.body.data, "corral_token_latency_seconds_count");
    double load = metric(r.body.data, "corral_load_duration_seconds_count");
    CHECK(chat200 >= 1 && out >= 2 && in >= 5 && ttft >= 1 && tok >= 2);
    CHECK_EQ_INT((long)metric(r.body.data, "corral_scheduler_up"), 1);
    CHECK_EQ_INT((long)metric(r.body.data, "corral_models_loaded"), 2);
    CHECK_EQ_INT(
        (long)metric(r.body.data, "corral_scheduler_requests_active"), 2);
    /* every waiting request, also c's (no runner holds c) */
    CHECK_EQ_INT((long)metric(r.body.data, "corral_scheduler_queue_depth"), 6);
    /* the scrape itself is in flight */
    CHECK_EQ_INT((long)metric(r.body.data, "corral_http_requests_in_flight"),
                 1);
    CHECK(strstr(r.body.data, "# TYPE corral_time_to_first_token_seconds "
                              "histogram\n") != NULL);
    CHECK(metric(r.body.data, "corral_http_requests_total{route=\"other\","
                              "code=\"404\"}") < 0 ||
          true);
    resp_free(&r);

    /* one more chat, one 404 and one 400 move the counters */
    http(&r, "POST", "/v1/chat/completions", chat_body("ok", NULL));
    resp_free(&r);
    http(&r, "GET", "/no/such/route", NULL);
    resp_free(&r);
    http(&r, "POST", "/api/embed", "{\"model\":\"e\",\"input\":\"a\"}");
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    http(&r, "POST", "/v1/chat/completions", "{}");
    resp_free(&r);
    /* scrape until the three requests are counted (up to 10 s), so the
     * exact checks below see them */
    for (int i = 0; i < 1000; i++) {
        http(&r, "GET", "/metrics", NULL);
        if (r.status != 200 || (count_of(r.body.data, CHAT200) >= chat200 + 1 &&
                                count_of(r.body.data, CHAT400) >= chat400 + 1 &&
                                count_of(r.body.data, OTHER404) >= other404 + 1))
            break;
        resp_free(&r);
        sleep_ms(10);
    }
    check_exposition(r.body.data);
    CHECK(metric(r.body.data, "corral_http_requests_total{route=\"/v1/chat/"
                              "completions\",code=\"200\"}") == chat200 + 1);
    CHECK(metric(r.body.data, "corral_completion_tokens_total") == out + 2);
    CHECK(metric(r.body.data, "corral_prompt_tokens_total") == in + 5 + 7);
    CHECK(metric(r.body.data, "corral_time_to_first_token_seconds_count") ==
          ttft + 1);
    CHECK(metric(r.body.data, "corral_token_latency_seconds_count") == tok + 2);
    CHECK(metric(r.body.data, "corral_load_duration_seconds_count") ==
          load + 1);
    /* 10 ms per token lands in the 0.01 bucket and above */
    CHECK(metric(r.body.data,
                 "corral_token_latency_seconds_bucket{le=\"0.005\"}") == 0);
    CHECK(metric(r.body.data,
                 "corral_token_latency_seconds_bucket{le=\"0.01\"}") ==
          tok + 2);
    CHECK(metric(r.body.data,
                 "corral_http_requests_total{route=\"other\","
                 "code=\"404\"}") >= 1);
    CHECK(metric(r.body.data, "corral_http_requests_total{route=\"/v1/chat/"
                              "completions\",code=\"400\"}") >= 1);
    CHECK(metric(r.body.data, "corral_http_request_duration_seconds_count{"
                              "route=\"/v1/chat/completions\"}") >= 3);
    CHECK(metric(r.body.data,
                 "corral_http_request_duration_seconds_bucket{route=\"/v1/"
                 "chat/completions\",le=\"+Inf\"}") >= 3);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "POST", "/metrics", "{}"), 405);
    resp_free(&r);
}

/* ================= units ================= */

static void test_metrics_unit(void)
{
    gw_metrics_t *m = gw_metrics_new();
    CHECK(m != NULL);
    gw_metrics_request_begin(m);
    gw_metrics_request_end(m, "/a\"b", 200, 0.02);
    gw_metrics_first_token(m, -1); /* a clock oddity counts as 0 */
    msg_done_body_t d = {.prompt_eval_count = 3, .has_prompt_eval_count = true,
                         .eval_count = 4, .has_eval_count = true,
                         .eval_duration = 4000000000,
                         .has_eval_duration = true};
    gw_metrics_done(m, &d);
    gw_metrics_done(m, NULL);
    gw_metrics_prompt_tokens(m, -5);
    /* past the caps everything lands on "other" */
    for (int i = 0; i < GW_METRICS_MAX_SERIES + 10; i++) {
        char route[32];
        snprintf(route, sizeof route, "/r%d", i);
        gw_metrics_request_begin(m);
        gw_metrics_request_end(m, route, 200, 0.001);
    }
    cr_buf_t b;
    cr_buf_init(&b, GW_METRICS_TEXT_MAX);
    CHECK_EQ_INT(gw_metrics_render(m, &b, NULL), CR_OK);
    check_exposition(b.data);
    CHECK(strstr(b.data, "route=\"/a\\\"b\"") != NULL);
    CHECK_EQ_INT((long)metric(b.data, "corral_scheduler_up"), 0);
    CHECK(metric(b.data, "corral_models_loaded") < 0);
    CHECK_EQ_INT((long)metric(b.data, "corral_http_requests_in_flight"), 0);
    CHECK_EQ_INT((long)metric(b.data, "corral_prompt_tokens_total"), 3);
    CHECK_EQ_INT((long)metric(b.data, "corral_completion_tokens_total"), 4);
    CHECK_EQ_INT((long)metric(b.data, "corral_token_latency_seconds_count"), 4);
    CHECK_NEAR(metric(b.data, "corral_token_latency_seconds_sum"), 4.0, 1e-9);
    CHECK_EQ_INT((long)metric(b.data,
                              "corral_token_latency_seconds_bucket{"
                              "le=\"0.5\"}"),
                 0);
    CHECK_EQ_INT((long)metric(b.data,
                              "corral_token_latency_seconds_bucket{le=\"1\"}"),
                 4);
    CHECK_EQ_INT((long)metric(b.data,
                              "corral_time_to_first_token_seconds_bucket{le="
                              "\"0.025\"}"),
                 1);
    CHECK(metric(b.data, "corral_http_requests_total{route=\"other\","
                         "code=\"200\"}") >= 10);
    cr_buf_free(&b);
    gw_metrics_destroy(&m);
    gw_metrics_destroy(&m); /* NULL is fine */
    CHECK(m == NULL);
}

static void test_auth_unit(void)
{
    CHECK(!gw_auth_required("", "/api/tags"));
    CHECK(!gw_auth_required(NULL, "/api/tags"));
    CHECK(!gw_auth_required("k", "/"));
    CHECK(!gw_auth_required("k", "/api/health"));
    CHECK(gw_auth_required("k", "/api/healthz"));
    CHECK(gw_auth_required("k", "/api/tags"));
    CHECK(gw_auth_required("k", "/v1/models"));
    CHECK(gw_auth_check("s3cret", "Bearer s3cret"));
    CHECK(gw_auth_check("s3cret", "bearer  s3cret"));
    CHECK(!gw_auth_check("s3cret", "Bearer s3cre"));
    CHECK(!gw_auth_check("s3cret", "Bearer s3cret2"));
    CHECK(!gw_auth_check("s3cret", "Bearer S3cret"));
    CHECK(!gw_auth_check("s3cret", "Basic s3cret"));
    CHECK(!gw_auth_check("s3cret", "s3cret"));
    CHECK(!gw_auth_check("s3cret", ""));
    CHECK(!gw_auth_check("s3cret", NULL));
    CHECK(!gw_auth_check("", "Bearer "));
    CHECK(gw_auth_check_api_key("s3cret", "s3cret"));
    CHECK(!gw_auth_check_api_key("s3cret", "Bearer s3cret"));
    CHECK(!gw_auth_check_api_key("s3cret", "s3cre"));
    CHECK(!gw_auth_check_api_key("s3cret", NULL));
    CHECK(!gw_auth_check_api_key("", ""));
}

static void test_auth_http(const gw_config_t *base)
{
    gw_config_t cfg = *base;
    snprintf(cfg.api_key, sizeof cfg.api_key, "s3cret");
    gw_server_t *srv = NULL;
    cr_err_t err;
    CHECK_EQ_INT(gw_server_new(&cfg, &srv, &err), CR_OK);
    if (!srv)
        return;
    int port = gw_server_port(srv);
    resp_t r;
    CHECK_EQ_INT(http_h(&r, port, "GET", "/", NULL, NULL), 200);
    resp_free(&r);
    CHECK_EQ_INT(http_h(&r, port, "HEAD", "/", NULL, NULL), 200);
    resp_free(&r);
    const char *paths[] = {"/api/tags", "/v1/models", "/metrics",
                           "/api/version", "/no/such/route"};
    for (size_t i = 0; i < CR_ARRAY_LEN(paths); i++) {
        http_h(&r, port, "GET", paths[i], NULL, NULL);
        CHECK_MSG(r.status == 401, "%s: %ld", paths[i], r.status);
        CHECK_EQ_STR(r.body.data, "{\"error\":\"unauthorized\"}");
        resp_free(&r);
        http_h(&r, port, "GET", paths[i], NULL, "Authorization: Bearer wrong");
        CHECK_EQ_INT(r.status, 401);
        resp_free(&r);
    }
    http_h(&r, port, "POST", "/v1/chat/completions", chat_body("ok", NULL),
           NULL);
    CHECK_EQ_INT(r.status, 401);
    resp_free(&r);
    CHECK_EQ_INT(http_h(&r, port, "GET", "/api/version", NULL,
                        "Authorization: Bearer s3cret"),
                 200);
    resp_free(&r);
    CHECK_EQ_INT(http_h(&r, port, "GET", "/v1/models", NULL,
                        "Authorization: Bearer s3cret"),
                 200);
    resp_free(&r);
    /* Anthropic's clients send the key as x-api-key */
    CHECK_EQ_INT(http_h(&r, port, "GET", "/v1/models", NULL, "x-api-key: s3cret"),
                 200);
    resp_free(&r);
    CHECK_EQ_INT(http_h(&r, port, "GET", "/v1/models", NULL, "x-api-key: wrong"),
                 401);
    resp_free(&r);
    http_h(&r, port, "POST", "/v1/chat/completions", chat_body("ok", NULL),
           "Authorization: Bearer s3cret");
    CHECK_EQ_INT(r.status, 200);
    CHECK(strstr(r.body.data, "\"Hello\"") != NULL);
    resp_free(&r);
    /* a preflight needs no key (browsers never send one) */
    CHECK_EQ_INT(http_h(&r, port, "OPTIONS", "/api/tags", NULL, NULL), 204);
    resp_free(&r);
    gw_server_destroy(&srv);

    /* the environment sets it */
    setenv("CORRAL_API_KEY", "k1", 1);
    gw_config_t c2;
    CHECK_EQ_INT(gw_config_from_env(&c2, &err), CR_OK);
    CHECK_EQ_STR(c2.api_key, "k1");
    unsetenv("CORRAL_API_KEY");
    CHECK_EQ_INT(gw_config_from_env(&c2, &err), CR_OK);
    CHECK_EQ_STR(c2.api_key, "");
}

int main(void)
{
    zsys_handler_set(NULL);
    char dir[] = "/tmp/corral-gw-oai-XXXXXX";
    if (!mkdtemp(dir))
        return check_skip("test_gateway_openai", "cannot make a temp dir");
    setenv("CORRAL_RUNTIME_DIR", dir, 1);
    unsetenv("CORRAL_SCHEDULER_ENDPOINT");
    unsetenv("CORRAL_REGISTRY_ENDPOINT");
    unsetenv("CORRAL_API_KEY");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    curl_g = curl_easy_init();

    test_translate_chat();
    test_translate_other();
    test_metrics_unit();
    test_auth_unit();

    sched_g = fake_start("scheduler", scheduler_fn);
    reg_g = fake_start("registry", registry_fn);
    gw_config_t cfg;
    cr_err_t err;
    CHECK_EQ_INT(gw_config_from_env(&cfg, &err), CR_OK);
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1:0");
    cfg.connect_timeout_ms = 1000;
    cfg.reply_timeout_ms = 2000;
    cfg.ping_after_ms = 1000;
    gw_server_t *srv = NULL;
    CHECK_EQ_INT(gw_server_new(&cfg, &srv, &err), CR_OK);
    if (srv) {
        port_g = gw_server_port(srv);
        test_chat_http();
        test_completions_http();
        test_sse_disconnect();
        test_embeddings_http();
        test_models_http();
        test_tokenize_http();
        test_metrics_http();
        test_auth_http(&cfg);
        gw_server_destroy(&srv);
    }
    fake_stop(&sched_g);
    fake_stop(&reg_g);
    curl_easy_cleanup(curl_g);
    curl_global_cleanup();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_finish("test_gateway_openai");
}
