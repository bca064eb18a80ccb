/* test_e2e_create_cancel.c: a create with `quantize` whose client leaves
 * stops its quantization (issue 20).
 *
 * `corral serve` holds an F32 synthetic model; a raw HTTP client posts
 * /api/create {from, quantize: q4_K_M} and reads the stream. At the first
 * status line (the quantization's own progress: its child is at work) the
 * test freezes that `corral-runner quantize` child with SIGSTOP, so that on
 * no machine can it finish before the cancel arrives, and closes the
 * connection. Then, each waited for with a generous bound: the child is
 * gone (the registry kills a stopped process as well as a running one and
 * reaps it), the log says the create failed `canceled`; and no manifest, no
 * temp file and no new blob are left. The service still answers and the
 * source model is intact. */
#include "lib/prelude.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

#define WAIT_MS 60000 /* generous: a busy CI machine */

static e2e_t T;

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void nap(void)
{
    struct timespec ts = {0, 20 * 1000000L};
    nanosleep(&ts, NULL);
}

/* The `corral-runner quantize` child of serve's registry, or 0. */
static pid_t quantize_child(void)
{
    pid_t pids[16];
    size_t n = e2e_find_procs(&T, "corral-runner", pids, 16);
    for (size_t i = 0; i < n; i++) {
        char path[64], argv[256];
        snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pids[i]);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t len = fread(argv, 1, sizeof argv - 1, f);
        fclose(f);
        argv[len] = '\0';
        /* argv[0] NUL argv[1] NUL ... */
        size_t first = strlen(argv);
        if (first + 1 < len && !strcmp(argv + first + 1, "quantize"))
            return pids[i];
    }
    return 0;
}

/* Files in the store's blobs/: content blobs and hidden temp files. */
static void count_blobs(int *blobs, int *temps)
{
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/models/blobs", T.tmp);
    *blobs = *temps = 0;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strncmp(e->d_name, "sha256-", 7))
            (*blobs)++;
        else if (!strncmp(e->d_name, ".corral-tmp-", 12))
            (*temps)++;
    }
    closedir(d);
}

static bool manifest_exists(const char *name)
{
    char path[1400];
    struct stat sb;
    snprintf(path, sizeof path,
             "%s/models/manifests/registry.ollama.ai/library/%s/latest", T.tmp, name);
    return stat(path, &sb) == 0;
}

/* Connects to serve's gateway and sends a streaming POST of body to path;
 * the socket, or -1. */
static int post_raw(const char *path, const char *body)
{
    const char *colon = strrchr(T.host, ':');
    int port = colon ? atoi(colon + 1) : 0;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     path, T.host, strlen(body));
    if (send(fd, head, (size_t)n, MSG_NOSIGNAL) != n ||
        send(fd, body, strlen(body), MSG_NOSIGNAL) != (ssize_t)strlen(body)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Reads from fd into buf (cap bytes, kept NUL-terminated) until needle
 * shows or WAIT_MS pass; true if it showed. */
static bool read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle)
{
    for (int64_t t0 = mono_ms(); mono_ms() - t0 < WAIT_MS;) {
        if (strstr(buf, needle))
            return true;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        if (*len + 1 >= cap)
            *len = 0; /* only the tail matters */
        ssize_t r = recv(fd, buf + *len, cap - 1 - *len, 0);
        if (r <= 0)
            return strstr(buf, needle) != NULL;
        *len += (size_t)r;
        buf[*len] = '\0';
    }
    return strstr(buf, needle) != NULL;
}

static void test_quantize_canceled(void)
{
    /* 2 layers of dim 1024 / ffn 4096 in F32: ~130 MB, seconds of
     * quantizing here; the child is frozen anyway. */
    CHECK(e2e_synth_create(&T, "src", NULL, "--seed", "7", "--dim", "1024",
                           "--layers", "2", "--ffn", "4096", NULL));
    int blobs0 = 0, temps0 = 0;
    count_blobs(&blobs0, &temps0);
    size_t failed0 = e2e_log_count(&T, "create q failed: canceled");

    int fd = post_raw("/api/create",
                      "{\"model\":\"q\",\"from\":\"src\",\"quantize\":\"q4_K_M\"}");
    CHECK_MSG(fd >= 0, "cannot connect to the gateway");
    if (fd < 0)
        return;
    static char buf[1 << 16];
    size_t len = 0;
    buf[0] = '\0';
    bool started = read_until(fd, buf, sizeof buf, &len, "\"status\":\"quantizing");
    CHECK_MSG(started, "no quantizing status came: %.300s", buf);
    pid_t child = started ? quantize_child() : 0;
    if (child > 0)
        kill(child, SIGSTOP);
    CHECK_MSG(child > 0, "the quantization ended before it could be held "
                         "(a bigger model is needed): %.300s", buf);
    int64_t t_close = mono_ms();
    close(fd); /* the client leaves */
    if (child <= 0)
        return;

    bool gone = false;
    while (!(gone = kill(child, 0) != 0) && mono_ms() - t_close < WAIT_MS)
        nap();
    CHECK_MSG(gone, "the quantization outlived its client by %lld ms",
              (long long)(mono_ms() - t_close));
    if (!gone) {
        kill(child, SIGCONT); /* let it finish, so serve stops cleanly */
        return;
    }
    fprintf(stderr, "the quantize child ended %lld ms after its client left\n",
            (long long)(mono_ms() - t_close));
    bool logged = false;
    for (int64_t t0 = mono_ms(); !logged && mono_ms() - t0 < WAIT_MS; nap())
        logged = e2e_log_count(&T, "create q failed: canceled") > failed0;
    CHECK_MSG(logged, "the registry did not log the create as canceled");
    CHECK_MSG(!manifest_exists("q"), "a canceled create wrote its manifest");
    int blobs = 0, temps = 0;
    count_blobs(&blobs, &temps);
    CHECK_MSG(temps == temps0, "%d temp files left (%d before)", temps, temps0);
    CHECK_MSG(blobs == blobs0, "%d blobs (%d before)", blobs, blobs0);

    /* The service goes on; the source is untouched. */
    e2e_resp_t r = e2e_http(&T, "POST", "/api/show", "{\"model\":\"src\"}", NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.body && strstr(r.body, "\"F32\""));
    e2e_resp_free(&r);
    r = e2e_http(&T, "GET", "/api/tags", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    CHECK(r.body && !strstr(r.body, "\"q:latest\""));
    e2e_resp_free(&r);
}

int main(void)
{
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_create_cancel");
    }
    test_quantize_canceled();
    if (check_failed_g) {
        char cmd[1300];
        snprintf(cmd, sizeof cmd, "tail -n 40 %s/serve.log >&2", T.tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "(no log)\n");
    }
    e2e_stop(&T);
    return check_finish("e2e_create_cancel");
}
