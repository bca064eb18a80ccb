/* test_cli_http.c: the CLI's HTTP client against a canned server in a child
 * process on a loopback port: JSON replies, NDJSON streams cut at odd
 * places, {"error"} lines, error statuses with JSON and plain bodies,
 * HEAD, file upload, a stream the callback stops, a refused connection,
 * and garbage replies. */
#include "lib/prelude.h"
#include "cli/host.h"
#include "cli/http.h"
#include "tests/unit/check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void put(int fd, const char *s)
{
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

static void reply(int fd, int code, const char *ctype, const char *body)
{
    char head[256];
    snprintf(head, sizeof head,
             "HTTP/1.1 %d X\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
             "Connection: close\r\n\r\n",
             code, ctype, strlen(body));
    put(fd, head);
    put(fd, body);
}

/* Serves one connection: reads the request, answers by path. */
static void serve_one(int fd)
{
    char req[1 << 16];
    size_t len = 0;
    char *end = NULL;
    while (!end && len < sizeof req - 1) {
        ssize_t r = read(fd, req + len, sizeof req - 1 - len);
        if (r <= 0)
            return;
        len += (size_t)r;
        req[len] = '\0';
        end = strstr(req, "\r\n\r\n");
    }
    if (!end)
        return;
    size_t clen = 0;
    const char *cl = strcasestr(req, "Content-Length:");
    if (cl && cl < end)
        clen = (size_t)strtoul(cl + 15, NULL, 10);
    size_t have = len - (size_t)(end + 4 - req);
    /* Drain the body (counting bytes and summing them for /upload). */
    uint64_t sum = 0;
    for (size_t i = 0; i < have; i++)
        sum += (unsigned char)end[4 + i];
    char body_copy[4096] = "";
    snprintf(body_copy, sizeof body_copy, "%.*s", (int)CR_MIN(have, sizeof body_copy - 1),
             end + 4);
    while (have < clen) {
        unsigned char tmp[65536];
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            sum += tmp[i];
        have += (size_t)r;
    }
    char method[16], path[256];
    if (sscanf(req, "%15s %255s", method, path) != 2)
        return;

    if (!strcmp(path, "/json")) {
        reply(fd, 200, "application/json", "{\"a\":1,\"s\":\"x\"}");
    } else if (!strcmp(path, "/empty")) {
        reply(fd, 200, "application/json", "");
    } else if (!strcmp(path, "/echo")) {
        char out[4200];
        snprintf(out, sizeof out, "{\"method\":\"%s\",\"body\":%s}", method,
                 body_copy[0] ? body_copy : "null");
        reply(fd, 200, "application/json", out);
    } else if (!strcmp(path, "/stream") || !strcmp(path, "/stream-err") ||
               !strcmp(path, "/many") || !strcmp(path, "/stream-garbage")) {
        put(fd, "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                "Connection: close\r\n\r\n");
        if (!strcmp(path, "/stream")) {
            put(fd, "{\"n\":1}\n{\"n\"");
            usleep(50000); /* a line split across reads */
            put(fd, ":2}\r\n\n  \n{\"n\":3}"); /* CRLF, blank lines, no final newline */
        } else if (!strcmp(path, "/stream-err")) {
            put(fd, "{\"n\":1}\n{\"error\":\"runner died\"}\n{\"n\":9}\n");
        } else if (!strcmp(path, "/stream-garbage")) {
            put(fd, "{\"n\":1}\nthis is not json\n");
        } else {
            for (int i = 0; i < 1000; i++)
                put(fd, "{\"n\":0}\n");
        }
    } else if (!strcmp(path, "/notfound")) {
        reply(fd, 404, "application/json", "{\"error\":\"model 'x' not found\"}");
    } else if (!strcmp(path, "/plain404")) {
        reply(fd, 404, "text/plain", "404 page not found");
    } else if (!strcmp(path, "/busy")) {
        reply(fd, 503, "application/json", "{\"error\":\"server busy\"}");
    } else if (!strcmp(path, "/bad")) {
        reply(fd, 400, "application/json", "{\"error\":\"invalid model name\"}");
    } else if (!strcmp(path, "/empty500")) {
        reply(fd, 500, "text/plain", "");
    } else if (!strcmp(path, "/badjson")) {
        reply(fd, 200, "application/json", "not json at all");
    } else if (!strcmp(path, "/blob")) {
        reply(fd, 200, "text/plain", "");
    } else if (!strncmp(path, "/upload/", 8)) {
        /* /upload/<len>/<byte sum>: 201 only if every byte arrived */
        size_t want_len = 0;
        uint64_t want_sum = 0;
        sscanf(path + 8, "%zu/%" SCNu64, &want_len, &want_sum);
        if (have == want_len && sum == want_sum)
            reply(fd, 201, "application/json", "");
        else
            reply(fd, 400, "application/json", "{\"error\":\"digest mismatch\"}");
    } else {
        reply(fd, 404, "text/plain", "404 page not found");
    }
}

static pid_t start_server(int *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) || listen(s, 16))
        return -1;
    socklen_t al = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &al);
    *port = ntohs(a.sin_port);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_IGN);
        for (;;) {
            int c = accept(s, NULL, NULL);
            if (c < 0)
                continue;
            serve_one(c);
            shutdown(c, SHUT_WR);
            close(c);
        }
    }
    close(s);
    return pid;
}

typedef struct seen {
    int n;
    long long vals[16];
    int stop_after; /* 0 = never */
} seen_t;

static bool on_line(void *ctx, json_t *obj)
{
    seen_t *s = ctx;
    if (s->n < 16)
        s->vals[s->n] = json_integer_value(json_object_get(obj, "n"));
    s->n++;
    return !(s->stop_after && s->n >= s->stop_after);
}

static cli_http_t *client_for(int port)
{
    char hostval[64];
    snprintf(hostval, sizeof hostval, "127.0.0.1:%d", port);
    cli_host_t host;
    CHECK_EQ_INT(cli_host_parse(hostval, &host, NULL), CR_OK);
    cr_err_t err;
    cli_http_t *h = cli_http_new(&host, &err);
    CHECK(h != NULL);
    return h;
}

static void test_json(cli_http_t *h)
{
    json_t *out = NULL;
    long code = 0;
    cr_err_t err;
    CHECK_EQ_INT(cli_http_json(h, "GET", "/json", NULL, NULL, NULL, &out, &code, &err), CR_OK);
    CHECK_EQ_INT(code, 200);
    CHECK_EQ_INT(json_integer_value(json_object_get(out, "a")), 1);
    json_decref(out);

    CHECK_EQ_INT(cli_http_json(h, "GET", "/empty", NULL, NULL, NULL, &out, NULL, &err), CR_OK);
    CHECK(out == NULL);

    json_t *body = json_pack("{s:s}", "model", "m");
    CHECK_EQ_INT(cli_http_json(h, "POST", "/echo", body, NULL, NULL, &out, NULL, &err), CR_OK);
    CHECK_EQ_STR(json_string_value(json_object_get(out, "method")), "POST");
    CHECK_EQ_STR(json_string_value(json_object_get(json_object_get(out, "body"), "model")), "m");
    json_decref(out);
    CHECK_EQ_INT(cli_http_json(h, "DELETE", "/echo", body, NULL, NULL, &out, NULL, &err), CR_OK);
    CHECK_EQ_STR(json_string_value(json_object_get(out, "method")), "DELETE");
    json_decref(out);
    json_decref(body);
    /* A reply we do not read is fine with out == NULL. */
    CHECK_EQ_INT(cli_http_json(h, "GET", "/json", NULL, NULL, NULL, NULL, NULL, &err), CR_OK);
}

static void test_stream(cli_http_t *h)
{
    seen_t s = {0};
    cr_err_t err;
    CHECK_EQ_INT(cli_http_json(h, "POST", "/stream", NULL, on_line, &s, NULL, NULL, &err),
                 CR_OK);
    CHECK_EQ_INT(s.n, 3);
    CHECK(s.vals[0] == 1 && s.vals[1] == 2 && s.vals[2] == 3);

    seen_t e = {0};
    CHECK_EQ_INT(cli_http_json(h, "POST", "/stream-err", NULL, on_line, &e, NULL, NULL, &err),
                 CR_E_INTERNAL);
    CHECK_EQ_STR(err.msg, "runner died");
    CHECK_EQ_INT(e.n, 1); /* nothing after the error line */

    seen_t g = {0};
    CHECK_EQ_INT(
        cli_http_json(h, "POST", "/stream-garbage", NULL, on_line, &g, NULL, NULL, &err),
        CR_E_CORRUPT);
    CHECK_EQ_INT(g.n, 1);

    seen_t stop = {.stop_after = 2};
    CHECK_EQ_INT(cli_http_json(h, "POST", "/many", NULL, on_line, &stop, NULL, NULL, &err),
                 CR_OK);
    CHECK_EQ_INT(stop.n, 2);

    /* An error status on a streaming call reads the error body. */
    seen_t nf = {0};
    CHECK_EQ_INT(cli_http_json(h, "POST", "/notfound", NULL, on_line, &nf, NULL, NULL, &err),
                 CR_E_NOT_FOUND);
    CHECK_EQ_STR(err.msg, "model 'x' not found");
    CHECK_EQ_INT(nf.n, 0);
}

static void test_errors(cli_http_t *h)
{
    json_t *out = NULL;
    long code = 0;
    cr_err_t err;
    CHECK_EQ_INT(cli_http_json(h, "GET", "/notfound", NULL, NULL, NULL, &out, &code, &err),
                 CR_E_NOT_FOUND);
    CHECK_EQ_INT(code, 404);
    CHECK_EQ_STR(err.msg, "model 'x' not found");
    CHECK(out == NULL);
    CHECK_EQ_INT(cli_http_json(h, "GET", "/plain404", NULL, NULL, NULL, &out, NULL, &err),
                 CR_E_NOT_FOUND);
    CHECK_EQ_STR(err.msg, "404 page not found");
    CHECK_EQ_INT(cli_http_json(h, "GET", "/busy", NULL, NULL, NULL, &out, NULL, &err),
                 CR_E_BUSY);
    CHECK_EQ_STR(err.msg, "server busy");
    CHECK_EQ_INT(cli_http_json(h, "GET", "/bad", NULL, NULL, NULL, &out, NULL, &err),
                 CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "invalid model name");
    CHECK_EQ_INT(cli_http_json(h, "GET", "/empty500", NULL, NULL, NULL, &out, NULL, &err),
                 CR_E_INTERNAL);
    CHECK_EQ_STR(err.msg, "HTTP status 500");
    CHECK_EQ_INT(cli_http_json(h, "GET", "/badjson", NULL, NULL, NULL, &out, NULL, &err),
                 CR_E_CORRUPT);
    CHECK(out == NULL);

    long st = 0;
    CHECK_EQ_INT(cli_http_head(h, "/blob", &st, &err), CR_OK);
    CHECK_EQ_INT(st, 200);
    CHECK_EQ_INT(cli_http_head(h, "/missing", &st, &err), CR_OK);
    CHECK_EQ_INT(st, 404);

    /* A path too long for a URL. */
    char *longp = malloc(8192);
    memset(longp, 'a', 8191);
    longp[0] = '/';
    longp[8191] = '\0';
    CHECK_EQ_INT(cli_http_json(h, "GET", longp, NULL, NULL, NULL, &out, NULL, &err),
                 CR_E_TOO_LARGE);
    free(longp);
}

static void test_upload(cli_http_t *h)
{
    FILE *f = tmpfile();
    uint64_t sum = 0;
    for (int i = 0; i < 300000; i++) {
        unsigned char c = (unsigned char)(i * 7);
        fputc(c, f);
        sum += c;
    }
    rewind(f);
    long code = 0;
    cr_err_t err;
    char path[64];
    snprintf(path, sizeof path, "/upload/300000/%" PRIu64, sum);
    CHECK_EQ_INT(cli_http_post_file(h, path, f, 300000, NULL, NULL, &code, &err), CR_OK);
    CHECK_EQ_INT(code, 201);
    /* The server's error comes back for a bad upload. */
    rewind(f);
    snprintf(path, sizeof path, "/upload/300000/%" PRIu64, sum + 1);
    CHECK_EQ_INT(cli_http_post_file(h, path, f, 300000, NULL, NULL, &code, &err),
                 CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "digest mismatch");
    fclose(f);
}

static void test_refused(void)
{
    /* A port nobody listens on: take one and close it. */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(s, (struct sockaddr *)&a, sizeof a);
    socklen_t al = sizeof a;
    getsockname(s, (struct sockaddr *)&a, &al);
    int port = ntohs(a.sin_port);
    close(s);
    cli_http_t *h = client_for(port);
    cr_err_t err;
    json_t *out = NULL;
    CHECK_EQ_INT(cli_http_json(h, "GET", "/api/tags", NULL, NULL, NULL, &out, NULL, &err),
                 CR_E_UNAVAILABLE);
    char want[128];
    snprintf(want, sizeof want, "could not connect to corral server at http://127.0.0.1:%d",
             port);
    CHECK_MSG(!strncmp(err.msg, want, strlen(want)), "%s", err.msg);
    long st = 0;
    CHECK_EQ_INT(cli_http_head(h, "/", &st, &err), CR_E_UNAVAILABLE);
    CHECK_EQ_STR(cli_http_base(h), want + strlen("could not connect to corral server at "));
    cli_http_destroy(&h);
    CHECK(h == NULL);
    cli_http_destroy(&h);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    int port = 0;
    pid_t pid = start_server(&port);
    if (pid < 0)
        return check_skip("test_cli_http", "cannot listen on loopback");
    cli_http_t *h = client_for(port);
    test_json(h);
    test_stream(h);
    test_errors(h);
    test_upload(h);
    cli_http_destroy(&h);
    test_refused();
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    return check_finish("test_cli_http");
}
