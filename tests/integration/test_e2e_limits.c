/* test_e2e_limits.c: single requests and idle connections that used to
 * take the whole server down (issue 20).
 *
 * - A prompt many times what the model's context could hold (past
 *   rn_prompt_bytes_cap: 1 MiB for this small model) is refused with 413
 *   naming num_ctx instead of being tokenized whole (time and memory the
 *   runner's plan does not have), and a chat of 20k messages is answered
 *   (those truncation could never keep are cut before rendering).
 * - A tokenize answer over what one bus frame carries (more than
 *   MSG_MAX_ARRAY tokens) is answered with an error, and the model keeps
 *   serving (it used to stay busy with an answer never sent).
 * - Connections: one address holds at most CORRAL_MAX_CONNECTIONS_PER_IP
 *   (the attacker here is 127.0.0.2: more are closed unanswered) while
 *   127.0.0.1 is still served from the reserve; connections idle for
 *   CORRAL_IDLE_TIMEOUT are closed by the server, which frees their
 *   places. (libmicrohttpd's defaults: ~1,020 connections, no timeout.) */
#include "lib/prelude.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "proto/msg.h"
#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/poll_wait.h"

static e2e_t T;

#define PER_IP 4
#define NET_MS 60000 /* only the net under a hung test */

/* ---- tokenize past a frame ---- */

static json_int_t count_tokens(const char *content)
{
    json_t *o = json_pack("{s:s,s:s}", "model", "synth", "content", content);
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/tokenize", body, NULL, NULL);
    free(body);
    json_int_t n = -1;
    json_t *j = r.status == 200 ? json_loads(r.body, 0, NULL) : NULL;
    if (j)
        n = (json_int_t)json_array_size(json_object_get(j, "tokens"));
    json_decref(j);
    e2e_resp_free(&r);
    return n;
}

/* `reps` copies of "zq " (caller frees). */
static char *repeated(size_t reps)
{
    char *t = malloc(reps * 3 + 1);
    for (size_t i = 0; i < reps; i++)
        memcpy(t + 3 * i, "zq ", 3);
    t[reps * 3] = '\0';
    return t;
}

static void test_tokenize_past_a_frame(void)
{
    /* Tokens per "zq " from two lengths (edges cancel out). */
    char *a = repeated(1000), *b = repeated(2000);
    json_int_t na = count_tokens(a), nb = count_tokens(b);
    free(b);
    CHECK(na > 0 && nb > na);
    if (na <= 0 || nb <= na) {
        free(a);
        return;
    }
    /* Just past what one reply may carry. */
    size_t reps = (size_t)(MSG_MAX_ARRAY + 1000) * 1000 / (size_t)(nb - na) + 1000;
    size_t len = reps * 3;
    char *big = repeated(reps);
    json_t *o = json_pack("{s:s,s:s}", "model", "synth", "content", big);
    free(big);
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/tokenize", body, NULL, NULL);
    free(body);
    CHECK_MSG(r.status == 413, "tokenize of %zu bytes: %ld %.200s", len,
              r.status, r.body ? r.body : "");
    CHECK(r.body && strstr(r.body, "tokens") != NULL);
    e2e_resp_free(&r);
    /* The model is not left busy: the next request is answered. */
    CHECK(count_tokens(a) == na);
    free(a);
    e2e_resp_t g = e2e_http(&T, "POST", "/api/generate",
                            "{\"model\":\"synth\",\"prompt\":\"hi\","
                            "\"stream\":false,\"options\":{\"num_predict\":2}}",
                            NULL, NULL);
    CHECK_EQ_INT(g.status, 200);
    e2e_resp_free(&g);
}

/* ---- requests bounded by the context ---- */

static void test_prompt_past_context(void)
{
    size_t reps = (1u << 20) / 3 + 1000; /* just past the 1 MiB cap */
    char *big = repeated(reps);
    json_t *o = json_pack("{s:s,s:s,s:b,s:{s:i}}", "model", "synth", "prompt", big, "stream",
                          0, "options", "num_predict", 1);
    free(big);
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    e2e_resp_t r = e2e_http(&T, "POST", "/api/generate", body, NULL, NULL);
    free(body);
    CHECK_MSG(r.status == 413, "generate of %zu bytes: %ld %.200s", reps * 3, r.status,
              r.body ? r.body : "");
    CHECK_MSG(r.body && strstr(r.body, "num_ctx") != NULL, "%.200s", r.body ? r.body : "");
    e2e_resp_free(&r);

    /* Many short messages: answered, the prompt within the context. */
    enum { N_MSGS = 20000 };
    json_t *msgs = json_array();
    for (int i = 0; i < N_MSGS; i++)
        json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", i % 2 ? "assistant" : "user",
                                              "content", "zq"));
    o = json_pack("{s:s,s:o,s:b,s:{s:i}}", "model", "synth", "messages", msgs, "stream", 0,
                  "options", "num_predict", 1);
    body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    r = e2e_http(&T, "POST", "/api/chat", body, NULL, NULL);
    free(body);
    CHECK_MSG(r.status == 200, "chat of %d messages: %ld %.200s", N_MSGS, r.status,
              r.body ? r.body : "");
    json_t *j = r.status == 200 ? json_loads(r.body, 0, NULL) : NULL;
    json_int_t n_prompt = j ? json_integer_value(json_object_get(j, "prompt_eval_count")) : -1;
    CHECK_MSG(n_prompt > 0 && n_prompt <= 256, "prompt_eval_count %lld", (long long)n_prompt);
    json_decref(j);
    e2e_resp_free(&r);
}

/* ---- connections ---- */

/* A connection from `src` to the gateway, or -1. */
static int connect_from(const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    struct sockaddr_in to = {.sin_family = AF_INET};
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    to.sin_port = htons((uint16_t)atoi(strchr(T.host, ':') + 1));
    if (bind(fd, (struct sockaddr *)&a, sizeof a) ||
        connect(fd, (struct sockaddr *)&to, sizeof to)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Sends GET /api/version and reads until the answer's end (true: a 200)
 * or until the server closes (false). */
static bool version_on(int fd)
{
    char req[200];
    int n = snprintf(req, sizeof req,
                     "GET /api/version HTTP/1.1\r\nHost: %s\r\n\r\n", T.host);
    if (send(fd, req, (size_t)n, MSG_NOSIGNAL) != n)
        return false;
    char buf[2048];
    size_t got = 0;
    int64_t t0 = test_mono_ms();
    while (got < sizeof buf - 1 && test_mono_ms() - t0 < NET_MS) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0)
            continue;
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        if (k <= 0)
            return false;
        got += (size_t)k;
        buf[got] = '\0';
        if (strstr(buf, "\"version\"") && strchr(strstr(buf, "\"version\""), '}'))
            return !strncmp(buf, "HTTP/1.1 200", 12);
    }
    return false;
}

/* Waits until the server closes fd (true), at most NET_MS. */
static bool closed_by_server(int fd)
{
    int64_t t0 = test_mono_ms();
    char c;
    while (test_mono_ms() - t0 < NET_MS) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) > 0 && recv(fd, &c, 1, 0) <= 0)
            return true;
    }
    return false;
}

/* Whether the server has closed fd already (no waiting). */
static bool closed_now(int fd)
{
    char c;
    ssize_t k = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* A connection from src that the server answers, or -1 after NET_MS.
 * libmicrohttpd counts a connection against its address until its cleanup,
 * which comes after the close the client sees: a place freed by a closed
 * connection may take a moment to be usable again. */
static int served_from(const char *src)
{
    int64_t t0 = test_mono_ms();
    while (test_mono_ms() - t0 < NET_MS) {
        int fd = connect_from(src);
        if (fd >= 0 && version_on(fd))
            return fd;
        if (fd >= 0)
            close(fd);
        usleep(50 * 1000);
    }
    return -1;
}

/* PER_IP served connections from 127.0.0.2 into held, then one more:
 * whether that one was served, and whether every held one was still open
 * afterwards (the 2 s idle timeout can close one first on a machine slow
 * enough, which frees its place). */
static bool one_past_the_limit(int *held, bool *intact)
{
    for (int i = 0; i < PER_IP; i++) {
        held[i] = served_from("127.0.0.2");
        CHECK_MSG(held[i] >= 0, "connection %d of 127.0.0.2 not served", i + 1);
    }
    int extra = connect_from("127.0.0.2");
    CHECK(extra >= 0);
    bool served = extra >= 0 && version_on(extra);
    if (extra >= 0)
        close(extra);
    *intact = true;
    for (int i = 0; i < PER_IP; i++)
        *intact &= held[i] >= 0 && !closed_now(held[i]);
    return served;
}

static void test_connection_limits(void)
{
    int held[PER_IP];
    /* One more from that address is closed without an answer... (tried
     * again when a held connection had timed out first: the limit was not
     * reached then) */
    bool intact = true, served = false;
    for (int attempt = 1; attempt <= 3; attempt++) {
        served = one_past_the_limit(held, &intact);
        if (!served || intact || attempt == 3)
            break;
        printf("e2e_limits: a held connection went idle before the extra one "
               "was tried (a slow machine); again\n");
        for (int i = 0; i < PER_IP; i++)
            if (held[i] >= 0)
                close(held[i]);
    }
    CHECK_MSG(!served, "a connection past CORRAL_MAX_CONNECTIONS_PER_IP was "
                       "served (the held ones %s)",
              intact ? "all open" : "timed out first, three times");
    /* ...while another address is served. */
    e2e_resp_t r = e2e_http(&T, "GET", "/api/version", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    e2e_resp_free(&r);
    /* The held connections sit idle: the server closes them, and the
     * address may connect again. */
    for (int i = 0; i < PER_IP; i++) {
        CHECK_MSG(held[i] >= 0 && closed_by_server(held[i]),
                  "idle connection %d not closed by the server", i + 1);
        if (held[i] >= 0)
            close(held[i]);
    }
    int again = served_from("127.0.0.2");
    CHECK_MSG(again >= 0, "127.0.0.2 not served again after its connections closed");
    if (again >= 0)
        close(again);
}

/* Sends a raw request on a fresh connection; the answer's first bytes. */
static void raw_answer(const char *req, char *out, size_t cap)
{
    out[0] = '\0';
    int fd = connect_from("127.0.0.1");
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    size_t n = strlen(req), got = 0;
    CHECK(send(fd, req, n, MSG_NOSIGNAL) == (ssize_t)n);
    int64_t t0 = test_mono_ms();
    while (got < cap - 1 && !strstr(out, "\r\n\r\n") && test_mono_ms() - t0 < NET_MS) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) <= 0)
            continue;
        ssize_t k = recv(fd, out + got, cap - 1 - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
        out[got] = '\0';
    }
    close(fd);
}

/* Go's server answers 400 to an HTTP/1.1 request with no Host header or
 * with two (issue 20, 7); HTTP/1.0 may leave it out. */
static void test_host_header(void)
{
    char a[4096], req[300];
    raw_answer("GET /api/version HTTP/1.1\r\n\r\n", a, sizeof a);
    CHECK_MSG(!strncmp(a, "HTTP/1.1 400", 12), "no Host: %.40s", a);
    snprintf(req, sizeof req,
             "GET /api/version HTTP/1.1\r\nHost: %s\r\nHost: %s\r\n\r\n",
             T.host, T.host);
    raw_answer(req, a, sizeof a);
    CHECK_MSG(!strncmp(a, "HTTP/1.1 400", 12), "two Hosts: %.40s", a);
    raw_answer("GET /api/version HTTP/1.0\r\n\r\n", a, sizeof a);
    CHECK_MSG(strstr(a, " 200 ") != NULL, "HTTP/1.0 without Host: %.40s", a);
}

/* A request that waits longer than CORRAL_IDLE_TIMEOUT for its model (a
 * slow load) is not idle: its answer arrives. */
static void test_long_wait_not_idle(void)
{
    e2e_resp_t g = e2e_http(&T, "POST", "/api/generate",
                            "{\"model\":\"slowload\",\"prompt\":\"hi\","
                            "\"stream\":false,\"options\":{\"num_predict\":2}}",
                            NULL, NULL);
    CHECK_EQ_INT(g.status, 200);
    CHECK(g.body && strstr(g.body, "\"done\":true") != NULL);
    e2e_resp_free(&g);
}

/* The same wait in a stream: after its "loading model" line the stream is
 * silent longer than the idle timeout while the model loads;
 * libmicrohttpd counted that as idle and cut it (curl error 18) before
 * the gateway lifted the timeout while a stream runs. */
static void test_long_stream_not_idle(void)
{
    e2e_resp_t g = e2e_http(&T, "POST", "/api/generate",
                            "{\"model\":\"slowload-stream\",\"prompt\":\"hi\","
                            "\"options\":{\"num_predict\":2}}",
                            NULL, NULL);
    CHECK_EQ_INT(g.status, 200);
    CHECK_MSG(g.body && strstr(g.body, "\"done\":true") != NULL,
              "a stream silent past the idle timeout was cut: %.200s",
              g.body ? g.body : "(no body)");
    e2e_resp_free(&g);
}

int main(void)
{
    unsetenv("CORRAL_TEST_SCRIPT");
    setenv("CORRAL_MAX_CONNECTIONS", "16", 1);
    setenv("CORRAL_MAX_CONNECTIONS_PER_IP", "4", 1);
    setenv("CORRAL_TEST_SLOW_LOAD", "slowload:4000", 1); /* twice the idle timeout */
    /* The models are made under the default idle timeout: a create's
     * progress stream can be silent for over 2 s on a loaded machine, and
     * libmicrohttpd counts a silent stream as idle (the CLI got "transfer
     * closed with outstanding read data remaining"). Then serve starts
     * again with the 2 s this test is about. */
    unsetenv("CORRAL_IDLE_TIMEOUT");
    if (!e2e_start(&T))
        return 1;
    bool synth = e2e_synth_create(&T, "synth", "TEMPLATE \"{{ .Prompt }}\"\n", NULL);
    bool slow = e2e_synth_create(&T, "slowload", "TEMPLATE \"{{ .Prompt }}\"\n", NULL);
    bool slow_stream = e2e_synth_create(&T, "slowload-stream",
                                        "TEMPLATE \"{{ .Prompt }}\"\n", NULL);
    CHECK_MSG(synth && slow && slow_stream, "create synth %d, slowload %d, "
              "slowload-stream %d", synth, slow, slow_stream);
    e2e_serve_stop(&T);
    setenv("CORRAL_IDLE_TIMEOUT", "2s", 1);
    if (!e2e_serve_start(&T)) {
        CHECK_MSG(false, "serve did not start again with CORRAL_IDLE_TIMEOUT=2s");
        e2e_stop(&T);
        return check_finish("e2e_limits");
    }
    if (synth) {
        test_tokenize_past_a_frame();
        test_prompt_past_context();
    }
    test_connection_limits();
    test_host_header();
    if (slow)
        test_long_wait_not_idle();
    if (slow_stream)
        test_long_stream_not_idle();
    e2e_stop(&T);
    return check_finish("e2e_limits");
}
