/* e2e.c: start/stop the real services and talk HTTP to them. */
#include "lib/prelude.h"
#include "tests/integration/e2e.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int e2e_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) &&
        !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

int e2e_connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int e2e_post_raw(e2e_t *t, const char *path, const char *body)
{
    const char *colon = strrchr(t->host, ':');
    int fd = e2e_connect_port(colon ? atoi(colon + 1) : 0);
    if (fd < 0)
        return -1;
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n",
                     path, t->host, strlen(body));
    if (send(fd, head, (size_t)n, MSG_NOSIGNAL) != n ||
        send(fd, body, strlen(body), MSG_NOSIGNAL) != (ssize_t)strlen(body)) {
        close(fd);
        return -1;
    }
    return fd;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool e2e_read_until(int fd, char *buf, size_t cap, size_t *len, const char *needle,
                    int wait_ms)
{
    for (int64_t t0 = now_ms(); now_ms() - t0 < wait_ms;) {
        if (strstr(buf, needle))
            return true;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        if (*len + 1 >= cap)
            *len = 0; /* only the tail matters */
        ssize_t r = recv(fd, buf + *len, cap - 1 - *len, 0);
        if (r <= 0)
            break;
        *len += (size_t)r;
        buf[*len] = '\0';
    }
    return strstr(buf, needle) != NULL;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

bool e2e_start(e2e_t *t)
{
    memset(t, 0, sizeof *t);
    const char *build = getenv("CORRAL_BUILD_DIR");
    if (!build) {
        fprintf(stderr, "CORRAL_BUILD_DIR is not set\n");
        return false;
    }
    snprintf(t->bin_dir, sizeof t->bin_dir, "%s/bin", build);
    snprintf(t->tmp, sizeof t->tmp, "/tmp/corral-e2e-XXXXXX");
    if (!mkdtemp(t->tmp)) {
        perror("mkdtemp");
        return false;
    }
    int port = e2e_free_port();
    if (port <= 0)
        return false;
    snprintf(t->host, sizeof t->host, "127.0.0.1:%d", port);
    char path[1200];
    snprintf(path, sizeof path, "%s/run", t->tmp);
    setenv("CORRAL_RUNTIME_DIR", path, 1);
    snprintf(path, sizeof path, "%s/models", t->tmp);
    setenv("CORRAL_MODELS", path, 1);
    setenv("CORRAL_HOST", t->host, 1);
    unsetenv("OLLAMA_HOST");
    unsetenv("OLLAMA_MODELS");
    curl_global_init(CURL_GLOBAL_DEFAULT);

    return e2e_serve_start(t);
}

bool e2e_serve_start(e2e_t *t)
{
    char serve_log[1200];
    snprintf(serve_log, sizeof serve_log, "%s/serve.log", t->tmp);
    pid_t pid = fork();
    if (pid < 0)
        return false;
    if (pid == 0) {
        /* Logs go to a file the test prints on failure (appended: a
         * restarted serve adds to the same log). */
        int fd = open(serve_log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        char exe[1200];
        snprintf(exe, sizeof exe, "%s/corral", t->bin_dir);
        execl(exe, "corral", "serve", (char *)NULL);
        _exit(127);
    }
    t->serve_pid = pid;
    for (int i = 0; i < 600; i++) { /* up to 60 s (a slow, loaded machine) */
        e2e_resp_t r = e2e_http(t, "GET", "/", NULL, NULL, NULL);
        bool up = r.status == 200;
        e2e_resp_free(&r);
        if (up)
            return true;
        int wst;
        if (waitpid(pid, &wst, WNOHANG) == pid) {
            fprintf(stderr, "corral serve exited early; log:\n");
            t->serve_pid = 0;
            return false;
        }
        sleep_ms(100);
    }
    fprintf(stderr, "corral serve did not answer on %s\n", t->host);
    return false;
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
                    struct FTW *ftw)
{
    CR_UNUSED(sb);
    CR_UNUSED(flag);
    CR_UNUSED(ftw);
    remove(path);
    return 0;
}

void e2e_serve_stop(e2e_t *t)
{
    if (t->serve_pid > 0) {
        kill(t->serve_pid, SIGTERM);
        int wst;
        bool gone = false;
        for (int i = 0; i < 150 && !gone; i++) { /* up to 15 s */
            if (waitpid(t->serve_pid, &wst, WNOHANG) == t->serve_pid)
                gone = true;
            else
                sleep_ms(100);
        }
        if (!gone) {
            fprintf(stderr, "corral serve ignored SIGTERM; killing it\n");
            kill(t->serve_pid, SIGKILL);
            waitpid(t->serve_pid, &wst, 0);
        }
        t->serve_pid = 0;
    }
}

void e2e_stop(e2e_t *t)
{
    e2e_serve_stop(t);
    if (getenv("CORRAL_E2E_KEEP")) {
        fprintf(stderr, "kept %s\n", t->tmp);
        return;
    }
    if (t->tmp[0])
        nftw(t->tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

typedef struct sink {
    char *buf;
    size_t len, cap;
    e2e_on_data_fn on_data;
    void *ctx;
} sink_t;

static size_t on_write(char *p, size_t size, size_t n, void *ud)
{
    sink_t *s = ud;
    size_t len = size * n;
    if (s->len + len + 1 > s->cap) {
        size_t cap = (s->len + len + 1) * 2;
        char *b = realloc(s->buf, cap);
        if (!b)
            return 0;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, len);
    s->len += len;
    s->buf[s->len] = '\0';
    if (s->on_data && !s->on_data(s->ctx, p, len))
        return 0; /* abort: the client goes away */
    return len;
}

e2e_resp_t e2e_http(e2e_t *t, const char *method, const char *path,
                    const char *body, e2e_on_data_fn on_data, void *ctx)
{
    e2e_resp_t r = {0};
    CURL *c = curl_easy_init();
    if (!c)
        return r;
    char url[1200];
    snprintf(url, sizeof url, "http://%s%s", t->host, path);
    sink_t s = {0};
    s.on_data = on_data;
    s.ctx = ctx;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    struct curl_slist *hdr = NULL;
    if (body) {
        hdr = curl_slist_append(hdr, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 300L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    if (curl_easy_perform(c) == CURLE_OK || s.len)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    r.body = s.buf ? s.buf : strdup("");
    r.len = s.len;
    return r;
}

void e2e_resp_free(e2e_resp_t *r)
{
    free(r->body);
    r->body = NULL;
}

/* ---- a request in a thread ---- */

static bool bg_on_data(void *ctx, const char *data, size_t len)
{
    e2e_bg_t *b = ctx;
    pthread_mutex_lock(&b->mu);
    if (b->len + len >= sizeof b->seen)
        b->len = 0;
    if (len < sizeof b->seen) {
        memcpy(b->seen + b->len, data, len);
        b->len += len;
        b->seen[b->len] = '\0';
    }
    pthread_mutex_unlock(&b->mu);
    return true;
}

static void *bg_main(void *arg)
{
    e2e_bg_t *b = arg;
    e2e_resp_t r = e2e_http(b->at, b->method, b->path, b->req_body, bg_on_data, b);
    b->status = r.status;
    b->body = r.body;
    r.body = NULL;
    e2e_resp_free(&r);
    return NULL;
}

void e2e_bg_start(e2e_bg_t *b, e2e_t *at, const char *method, const char *path,
                  const char *body)
{
    memset(b, 0, sizeof *b);
    b->at = at;
    b->method = method;
    b->path = path;
    b->req_body = body ? strdup(body) : NULL;
    pthread_mutex_init(&b->mu, NULL);
    pthread_create(&b->th, NULL, bg_main, b);
}

bool e2e_bg_saw(e2e_bg_t *b, const char *needle)
{
    pthread_mutex_lock(&b->mu);
    bool yes = strstr(b->seen, needle) != NULL;
    pthread_mutex_unlock(&b->mu);
    return yes;
}

void e2e_bg_join(e2e_bg_t *b)
{
    pthread_join(b->th, NULL);
    pthread_mutex_destroy(&b->mu);
    free(b->req_body);
    b->req_body = NULL;
}

#define MAX_ARGS 32

/* argv[0] = argv0, then pre (NULL-terminated, may be NULL), then the
 * va_list's strings up to its NULL. */
static void collect_args(const char **argv, const char *argv0, const char *const *pre,
                         va_list ap)
{
    int argc = 0;
    argv[argc++] = argv0;
    for (; pre && *pre && argc < MAX_ARGS - 1; pre++)
        argv[argc++] = *pre;
    const char *a;
    while ((a = va_arg(ap, const char *)) && argc < MAX_ARGS - 1)
        argv[argc++] = a;
    argv[argc] = NULL;
}

static int run_child(const char *exe, const char **argv, const char *input, char **out)
{
    int outp[2], inp[2];
    if (pipe(outp) || pipe(inp))
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(inp[0], 0);
        dup2(outp[1], 1);
        close(inp[1]);
        close(outp[0]);
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(inp[0]);
    close(outp[1]);
    if (input) {
        size_t n = strlen(input);
        if (write(inp[1], input, n) != (ssize_t)n)
            perror("write");
    }
    close(inp[1]);
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        char tmp[4096];
        ssize_t n = read(outp[0], tmp, sizeof tmp);
        if (n <= 0)
            break;
        if (len + (size_t)n + 1 > cap) {
            cap = (len + (size_t)n + 1) * 2;
            buf = realloc(buf, cap);
        }
        memcpy(buf + len, tmp, (size_t)n);
        len += (size_t)n;
        buf[len] = '\0';
    }
    close(outp[0]);
    int wst = 0;
    waitpid(pid, &wst, 0);
    if (out)
        *out = buf ? buf : strdup("");
    else
        free(buf);
    return WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst);
}

int e2e_cli(e2e_t *t, const char *input, char **out, ...)
{
    char exe[1200];
    snprintf(exe, sizeof exe, "%s/corral", t->bin_dir);
    const char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, out);
    collect_args(argv, "corral", NULL, ap);
    va_end(ap);
    return run_child(exe, argv, input, out);
}

/* Reads a whole file (NUL-terminated; "" when missing). Caller frees. */
static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0;
    if (f) {
        FILE *m = open_memstream(&buf, &len);
        char tmp[4096];
        size_t n;
        while (m && (n = fread(tmp, 1, sizeof tmp, f)) > 0)
            fwrite(tmp, 1, n, m);
        if (m)
            fclose(m);
        fclose(f);
    }
    return buf ? buf : strdup("");
}

int e2e_cli_err(e2e_t *t, const char *input, char **out, char **err_out, ...)
{
    char exe[1200], errf[1200];
    snprintf(exe, sizeof exe, "%s/corral", t->bin_dir);
    snprintf(errf, sizeof errf, "%s/cli-stderr.txt", t->tmp);
    const char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, err_out);
    collect_args(argv, "corral", NULL, ap);
    va_end(ap);
    /* stderr into a file (no second pipe to drain), restored after. */
    int saved = dup(2);
    int fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
    int rc = run_child(exe, argv, input, out);
    if (saved >= 0) {
        dup2(saved, 2);
        close(saved);
    }
    if (err_out)
        *err_out = slurp(errf);
    unlink(errf);
    return rc;
}

int e2e_cli_pty(e2e_t *t, const char *input, int cols, char **out, ...)
{
    char exe[1200];
    snprintf(exe, sizeof exe, "%s/corral", t->bin_dir);
    const char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, out);
    collect_args(argv, "corral", NULL, ap);
    va_end(ap);
    struct winsize ws = {.ws_row = 40, .ws_col = (unsigned short)cols};
    int master = -1;
    pid_t pid = forkpty(&master, NULL, NULL, &ws);
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    if (input) {
        size_t n = strlen(input);
        if (write(master, input, n) != (ssize_t)n)
            perror("write pty");
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    for (;;) {
        char tmp[4096];
        ssize_t n = read(master, tmp, sizeof tmp);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break; /* EIO once the child closed its side */
        if (m)
            fwrite(tmp, 1, (size_t)n, m);
    }
    if (m)
        fclose(m);
    close(master);
    int wst = 0;
    waitpid(pid, &wst, 0);
    if (out)
        *out = buf ? buf : strdup("");
    else
        free(buf);
    return WIFEXITED(wst) ? WEXITSTATUS(wst) : 128 + WTERMSIG(wst);
}

int e2e_run_bin(e2e_t *t, const char *prog, ...)
{
    char exe[1200];
    snprintf(exe, sizeof exe, "%s/%s", t->bin_dir, prog);
    const char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, prog);
    collect_args(argv, prog, NULL, ap);
    va_end(ap);
    return run_child(exe, argv, NULL, NULL);
}

bool e2e_synth_create(e2e_t *t, const char *name, const char *modelfile_tail, ...)
{
    char gguf[1200], exe[1200], mf[2400];
    snprintf(gguf, sizeof gguf, "%s/%s.gguf", t->tmp, name);
    snprintf(exe, sizeof exe, "%s/corral-gguf-synth", t->bin_dir);
    const char *pre[] = {"--out", gguf, NULL};
    const char *argv[MAX_ARGS];
    va_list ap;
    va_start(ap, modelfile_tail);
    collect_args(argv, "corral-gguf-synth", pre, ap);
    va_end(ap);
    int rc = run_child(exe, argv, NULL, NULL);
    if (rc) {
        fprintf(stderr, "corral-gguf-synth for %s: exit %d\n", name, rc);
        return false;
    }
    snprintf(mf, sizeof mf, "FROM ./%s.gguf\n%s", name, modelfile_tail ? modelfile_tail : "");
    return e2e_create(t, name, mf);
}

pid_t e2e_parent_of(pid_t pid, char *comm, size_t cap)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *l = strchr(buf, '('), *r = strrchr(buf, ')');
    if (!l || !r)
        return -1;
    if (comm) {
        size_t m = (size_t)(r - l - 1);
        if (m >= cap)
            m = cap - 1;
        memcpy(comm, l + 1, m);
        comm[m] = '\0';
    }
    int ppid = -1;
    char state;
    if (sscanf(r + 1, " %c %d", &state, &ppid) != 2)
        return -1;
    return ppid;
}

size_t e2e_find_procs(e2e_t *t, const char *comm, pid_t *out, size_t cap)
{
    size_t n = 0;
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < cap) {
        pid_t pid = (pid_t)atoi(e->d_name);
        if (pid <= 0)
            continue;
        char name[64];
        pid_t pp = e2e_parent_of(pid, name, sizeof name);
        if (pp < 0 || strcmp(name, comm))
            continue;
        /* Walk up to serve. */
        for (int depth = 0; pp > 1 && depth < 8; depth++) {
            if (pp == t->serve_pid) {
                out[n++] = pid;
                break;
            }
            pp = e2e_parent_of(pp, NULL, 0);
        }
    }
    closedir(d);
    return n;
}

json_t *e2e_ndjson(const char *body)
{
    json_t *arr = json_array();
    const char *p = body;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n) {
            json_t *j = json_loadb(p, n, 0, NULL);
            json_array_append_new(arr, j ? j : json_null());
        }
        p = nl ? nl + 1 : NULL;
    }
    return arr;
}

json_t *e2e_sse(const char *body)
{
    json_t *arr = json_array();
    const char *p = body;
    while (p && *p) {
        const char *end = strstr(p, "\n\n");
        size_t n = end ? (size_t)(end - p) : strlen(p);
        json_t *ev = json_object();
        const char *line = p;
        while (line < p + n) {
            const char *nl = memchr(line, '\n', (size_t)(p + n - line));
            size_t len = nl ? (size_t)(nl - line) : (size_t)(p + n - line);
            if (len > 7 && !strncmp(line, "event: ", 7))
                json_object_set_new(ev, "event", json_stringn(line + 7, len - 7));
            else if (len > 6 && !strncmp(line, "data: ", 6)) {
                json_t *d = json_loadb(line + 6, len - 6, 0, NULL);
                json_object_set_new(ev, "data", d ? d : json_stringn(line + 6, len - 6));
            }
            line += len + 1;
        }
        if (json_object_size(ev))
            json_array_append(arr, ev);
        json_decref(ev);
        p = end ? end + 2 : NULL;
    }
    return arr;
}

json_t *e2e_jget(json_t *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *t = strtok_r(buf, ".", &save); t && o;
         t = strtok_r(NULL, ".", &save))
        o = json_is_array(o) ? json_array_get(o, strtoul(t, NULL, 10))
                             : json_object_get(o, t);
    return o;
}

const char *e2e_jstr(json_t *o, const char *path)
{
    const char *s = json_string_value(e2e_jget(o, path));
    return s ? s : "(absent)";
}

long long e2e_blob_part_completed(const e2e_t *t, const char *hex)
{
    long long sum = 0;
    for (int i = 0; i < 1024; i++) {
        char path[1400];
        snprintf(path, sizeof path, "%s/models/blobs/sha256-%s-partial-%d", t->tmp, hex, i);
        json_t *j = json_load_file(path, 0, NULL);
        if (!j)
            break;
        sum += json_integer_value(json_object_get(j, "Completed"));
        json_decref(j);
    }
    return sum;
}

void e2e_log_tail(const e2e_t *t, int n)
{
    char cmd[1300];
    snprintf(cmd, sizeof cmd, "tail -n %d '%s/serve.log' >&2", n, t->tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "(no log)\n");
}

size_t e2e_log_count(const e2e_t *t, const char *needle)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/serve.log", t->tmp);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = 0;
    char line[4096];
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    return n;
}

bool e2e_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    fputs(text, f);
    return fclose(f) == 0;
}

bool e2e_create(e2e_t *t, const char *name, const char *modelfile)
{
    char mf[sizeof t->tmp + 16];
    snprintf(mf, sizeof mf, "%s/Modelfile", t->tmp);
    if (!e2e_write_file(mf, modelfile)) {
        fprintf(stderr, "e2e: cannot write %s\n", mf);
        return false;
    }
    char *out = NULL;
    int rc = e2e_cli(t, NULL, &out, "create", name, "-f", mf, NULL);
    if (rc != 0)
        fprintf(stderr, "e2e: corral create %s exited %d: %s\n", name, rc,
                out ? out : "");
    free(out);
    return rc == 0;
}
