/* test_image_fetch.c: remote image URLs (services/gateway/image_fetch.c)
 * against a tiny HTTP server on 127.0.0.1 run by this test: a fetch
 * returns the body as base64; loopback is refused unless private
 * addresses are allowed (also behind a redirect); over-size bodies, HTTP
 * errors, other schemes and an unreachable port are errors naming the URL;
 * the limits come from CORRAL_REMOTE_IMAGES(_PRIVATE). */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "lib/base64.h"
#include "lib/buf.h"
#include "services/gateway/image_fetch.h"
#include "services/gateway/openai.h"

static int listen_fd_g, port_g;
static const char BODY[] = "\x89PNG\r\n\x1a\n pretend image bytes";

/* Answers connections until it reads "GET /quit". */
static void *serve(void *arg)
{
    CR_UNUSED(arg);
    for (;;) {
        int fd = accept(listen_fd_g, NULL, NULL);
        if (fd < 0)
            return NULL;
        char req[2048] = {0}, resp[4096];
        ssize_t n = 0, got;
        while (n < (ssize_t)sizeof req - 1 && !strstr(req, "\r\n\r\n") &&
               (got = read(fd, req + n, sizeof req - 1 - (size_t)n)) > 0)
            n += got;
        int len = 0;
        if (!strncmp(req, "GET /img ", 9)) {
            len = snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\n"
                           "Connection: close\r\n\r\n", sizeof BODY - 1);
            memcpy(resp + len, BODY, sizeof BODY - 1);
            len += (int)sizeof BODY - 1;
        } else if (!strncmp(req, "GET /big ", 9)) {
            len = snprintf(resp, sizeof resp, "HTTP/1.1 200 OK\r\nContent-Length: 3000\r\n"
                           "Connection: close\r\n\r\n");
            memset(resp + len, 'x', 3000);
            len += 3000;
        } else if (!strncmp(req, "GET /redir ", 11)) {
            len = snprintf(resp, sizeof resp, "HTTP/1.1 302 Found\r\nLocation: "
                           "http://127.0.0.1:%d/img\r\nContent-Length: 0\r\n"
                           "Connection: close\r\n\r\n", port_g);
        } else {
            len = snprintf(resp, sizeof resp, "HTTP/1.1 404 Not Found\r\nContent-Length: 0"
                           "\r\nConnection: close\r\n\r\n");
        }
        bool quit = !strncmp(req, "GET /quit ", 10);
        if (write(fd, resp, (size_t)len) < 0) {
            /* the client went away */
        }
        close(fd);
        if (quit)
            return NULL;
    }
}

static cr_status_t fetch(const char *path, bool allow_private, size_t max, char **b64,
                         cr_err_t *err)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port_g, path);
    gw_fetch_limits_t lim = {.enabled = true, .allow_private = allow_private,
                             .max_bytes = max, .timeout_ms = 10000};
    return gw_image_fetch(url, &lim, b64, err);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    listen_fd_g = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (listen_fd_g < 0 || bind(listen_fd_g, (struct sockaddr *)&a, sizeof a) ||
        listen(listen_fd_g, 8) || getsockname(listen_fd_g, (struct sockaddr *)&a, &al))
        return 1;
    port_g = ntohs(a.sin_port);
    pthread_t th;
    if (pthread_create(&th, NULL, serve, NULL))
        return 1;

    char *b64 = NULL;
    cr_err_t err = {0};
    CHECK_MSG(fetch("/img", true, 1 << 20, &b64, &err) == CR_OK, "%s", err.msg);
    uint8_t *dec = NULL;
    size_t dn = 0;
    CHECK(b64 && cr_base64_decode(b64, strlen(b64), &dec, &dn, NULL) == CR_OK);
    CHECK(dn == sizeof BODY - 1 && dec && !memcmp(dec, BODY, dn));
    free(dec);
    free(b64);
    b64 = NULL;

    /* Loopback refused by default, directly and behind a redirect. */
    CHECK(fetch("/img", false, 1 << 20, &b64, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "not a public one") != NULL, "%s", err.msg);
    CHECK(fetch("/redir", true, 1 << 20, &b64, &err) == CR_OK);
    free(b64);
    b64 = NULL;

    CHECK(fetch("/big", true, 1000, &b64, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "larger than 1000") != NULL, "%s", err.msg);
    CHECK(fetch("/missing", true, 1 << 20, &b64, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "HTTP 404") != NULL, "%s", err.msg);
    CHECK(b64 == NULL);

    gw_fetch_limits_t lim = {.enabled = true, .allow_private = true, .max_bytes = 100,
                             .timeout_ms = 1000};
    CHECK(gw_image_fetch("ftp://127.0.0.1/x.png", &lim, &b64, &err) == CR_E_INVALID);
    CHECK(gw_image_fetch("http://127.0.0.1:1/x.png", &lim, &b64, &err) == CR_E_INVALID);
    CHECK(strstr(err.msg, "http://127.0.0.1:1/x.png") != NULL);
    /* A public address would be allowed: 10.x, 192.168.x are not. */
    lim.allow_private = false;
    CHECK(gw_image_fetch("http://10.1.2.3:9/x.png", &lim, &b64, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "not a public one") != NULL, "%s", err.msg);
    CHECK(gw_image_fetch("http://[::1]:9/x.png", &lim, &b64, &err) == CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "not a public one") != NULL, "%s", err.msg);

    unsetenv("CORRAL_REMOTE_IMAGES");
    unsetenv("OLLAMA_REMOTE_IMAGES");
    gw_fetch_limits_from_env(&lim);
    CHECK(!lim.enabled && !lim.allow_private);
    setenv("CORRAL_REMOTE_IMAGES", "1", 1);
    setenv("CORRAL_REMOTE_IMAGES_PRIVATE", "1", 1);
    gw_fetch_limits_from_env(&lim);
    CHECK(lim.enabled && lim.allow_private && lim.max_bytes > 0 && lim.timeout_ms > 0);

    /* /v1 translation: with CORRAL_REMOTE_IMAGES(_PRIVATE) set the URL's
     * body becomes the message's image; without, Ollama's 400. */
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\","
             "\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":"
             "\"http://127.0.0.1:%d/img\"}}]}]}", port_g);
    cr_buf_t out;
    cr_buf_init(&out, 1 << 20);
    gw_oai_info_t info = {0};
    CHECK_MSG(gw_oai_translate(GW_OAI_CHAT, body, strlen(body), &out, &info, &err) == CR_OK,
              "%s", err.msg);
    char *want = cr_base64_encode((const uint8_t *)BODY, sizeof BODY - 1);
    CHECK_MSG(out.data && want && strstr(out.data, want), "%s", out.data ? out.data : "");
    free(want);
    cr_buf_reset(&out);
    unsetenv("CORRAL_REMOTE_IMAGES");
    CHECK(gw_oai_translate(GW_OAI_CHAT, body, strlen(body), &out, &info, &err) ==
          CR_E_INVALID);
    CHECK_MSG(strstr(err.msg, "image URLs are not currently supported") != NULL, "%s",
              err.msg);
    cr_buf_free(&out);

    fetch("/quit", true, 1 << 20, &b64, &err);
    free(b64);
    pthread_join(th, NULL);
    close(listen_fd_g);
    curl_global_cleanup();
    return check_finish("image_fetch");
}
