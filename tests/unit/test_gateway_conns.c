/* test_gateway_conns.c: what one HTTP connection costs the gateway, and the
 * request-header limit that comes with it (server.c, CONN_POOL_BYTES).
 *
 * The gateway runs in-process on a private 127.0.0.1 port; only
 * /api/version is asked, so no bus peer is needed. Checked:
 *   - 64 connections held open, each after two answered requests, raise
 *     the process's RSS by under 96 KiB each (a libmicrohttpd pool is
 *     zeroed in full between requests, so a pool of 256 KiB, as before,
 *     costs at least that much per connection; 32 KiB plus the
 *     connection thread's stack pages stays well under);
 *   - every one of them, and a fresh one, still gets its answer;
 *   - 12 KiB of request headers are answered 200; 64 KiB get 431 and the
 *     server keeps answering.
 * Raw sockets, so connections stay open as long as the test wants. The RSS
 * check is skipped under ASan (its allocator and stacks are not glibc's). */
#include "lib/prelude.h"
#include "services/gateway/server.h"
#include "tests/unit/check.h"
#include "tests/unit/smaps.h"

#include <arpa/inet.h>
#include <czmq.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

#define N_CONNS 64
#define RSS_PER_CONN_MAX_KB 72
#define IO_WAIT_MS 30000 /* a hang guard, not a pace */

static uint16_t port_g;

static int conn_open(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port_g)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_all(int fd, const char *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Sends GET /api/version with extra_len bytes of Cookie header (0: none)
 * and reads one response: its status, or -1 when the connection failed.
 * *closed says the server closed the connection after it. */
static int get_version(int fd, size_t extra_len, bool *closed)
{
    *closed = false;
    char head[256];
    int hn = snprintf(head, sizeof head,
                      "GET /api/version HTTP/1.1\r\nHost: 127.0.0.1:%u\r\n",
                      (unsigned)port_g);
    if (!send_all(fd, head, (size_t)hn))
        return -1;
    if (extra_len) {
        char *cookie = malloc(extra_len + 16);
        if (!cookie)
            return -1;
        memcpy(cookie, "Cookie: ", 8);
        memset(cookie + 8, 'a', extra_len);
        memcpy(cookie + 8 + extra_len, "\r\n", 2);
        bool ok = send_all(fd, cookie, extra_len + 10);
        free(cookie);
        if (!ok)
            return -1;
    }
    if (!send_all(fd, "\r\n", 2))
        return -1;
    /* Read the head, then Content-Length bytes of body. */
    char buf[8192];
    size_t len = 0;
    long body_want = -1;
    size_t head_end = 0;
    for (;;) {
        if (body_want >= 0 && len >= head_end + (size_t)body_want)
            break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, IO_WAIT_MS) != 1)
            return -1;
        if (len == sizeof buf - 1)
            return -1;
        ssize_t k = recv(fd, buf + len, sizeof buf - 1 - len, 0);
        if (k <= 0) {
            *closed = true;
            if (body_want >= 0 && len >= head_end + (size_t)body_want)
                break;
            return -1;
        }
        len += (size_t)k;
        buf[len] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (body_want < 0 && end) {
            head_end = (size_t)(end - buf) + 4;
            const char *cl = strcasestr(buf, "\r\nContent-Length:");
            body_want = cl && cl < end ? atol(cl + 17) : 0;
        }
    }
    if (strcasestr(buf, "\r\nConnection: close"))
        *closed = true;
    int status = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    if (status == 200)
        CHECK_MSG(strstr(buf + head_end, "\"version\":") != NULL, "body: %s",
                  buf + head_end);
    return status;
}

/* One request on a fresh connection: its status. */
static int version_fresh(size_t extra_len, bool *closed)
{
    int fd = conn_open();
    if (fd < 0)
        return -1;
    int st = get_version(fd, extra_len, closed);
    close(fd);
    return st;
}

static void test_per_connection_memory(void)
{
    bool closed;
    /* Warm up: the listen thread, the first connection thread, malloc's
     * arenas and glibc's stack cache exist before the baseline. */
    for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(version_fresh(0, &closed), 200);
    long before = self_rss_kb();
    int fds[N_CONNS];
    int opened = 0;
    for (int i = 0; i < N_CONNS; i++) {
        fds[i] = conn_open();
        if (fds[i] < 0)
            break;
        opened++;
        /* The second answer means the pool was reset (zeroed) once. */
        CHECK_EQ_INT(get_version(fds[i], 0, &closed), 200);
        CHECK(!closed);
        CHECK_EQ_INT(get_version(fds[i], 0, &closed), 200);
        CHECK(!closed);
    }
    CHECK_EQ_INT(opened, N_CONNS);
    long after = self_rss_kb();
    long per_conn = opened ? (after - before) / opened : 0;
    printf("RSS %ld kB -> %ld kB with %d connections open: %ld kB each\n", before,
           after, opened, per_conn);
#ifndef UNDER_ASAN
    CHECK_MSG(per_conn < RSS_PER_CONN_MAX_KB, "%ld kB per open connection", per_conn);
#endif
    /* Every held connection still answers, and so does a new one. */
    for (int i = 0; i < opened; i++)
        CHECK_EQ_INT(get_version(fds[i], 0, &closed), 200);
    CHECK_EQ_INT(version_fresh(0, &closed), 200);
    for (int i = 0; i < opened; i++)
        close(fds[i]);
}

static void test_header_limit(void)
{
    bool closed;
    CHECK_EQ_INT(version_fresh(12 * 1024, &closed), 200);
    CHECK_EQ_INT(version_fresh(64 * 1024, &closed), 431);
    CHECK(closed);
    /* Still serving. */
    CHECK_EQ_INT(version_fresh(0, &closed), 200);
}

static void remove_dir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(void)
{
    zsys_handler_set(NULL);
    char dir[] = "/tmp/corral-gw-conns-XXXXXX";
    if (!mkdtemp(dir))
        return check_skip("test_gateway_conns", "cannot make a temp dir");
    setenv("CORRAL_RUNTIME_DIR", dir, 1);
    unsetenv("CORRAL_SCHEDULER_ENDPOINT");
    unsetenv("CORRAL_REGISTRY_ENDPOINT");
    gw_config_t cfg;
    cr_err_t err;
    CHECK_EQ_INT(gw_config_from_env(&cfg, &err), CR_OK);
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1:0");
    gw_server_t *srv = NULL;
    CHECK_EQ_INT(gw_server_new(&cfg, &srv, &err), CR_OK);
    if (!srv) {
        fprintf(stderr, "cannot start: %s\n", err.msg);
        remove_dir(dir);
        return check_finish("test_gateway_conns");
    }
    port_g = gw_server_port(srv);
    test_per_connection_memory();
    test_header_limit();
    gw_server_destroy(&srv);
    remove_dir(dir);
    return check_finish("test_gateway_conns");
}
