/* quantize.c: running `corral-runner quantize` for create (see
 * quantize.h). */
#include "lib/prelude.h"
#include "services/registry/quantize.h"

#include "lib/self_path.h"

#include "lib/tensor_type.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <strings.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define LINE_MAX_BYTES 256  /* one progress line */
#define ERR_MAX_BYTES 1024  /* the tool's error text kept */

static const char *const types[] = {
    "Q4_0",   "Q4_1",   "Q5_0",   "Q5_1",   "Q8_0",   "Q2_K",   "Q3_K_S",
    "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
};

const char *reg_quantize_type(const char *name, uint32_t *ftype)
{
    if (!name)
        return NULL;
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++) {
        if (strcasecmp(name, types[i]))
            continue;
        /* The number is lib's file-type table's. */
        for (uint32_t ft = 0; ft < 64; ft++)
            if (!strcmp(cr_file_type_name(ft), types[i])) {
                if (ftype)
                    *ftype = ft;
                return types[i];
            }
    }
    return NULL;
}

cr_status_t reg_quantize_runner_bin(char *out, size_t cap, cr_err_t *err)
{
    cr_status_t st =
        cr_sibling_bin("corral-runner", "CORRAL_RUNNER_BIN", out, cap, err);
    if (st == CR_E_NOT_FOUND)
        cr_err_wrap(err, "quantizing needs corral-runner");
    return st;
}

typedef struct reader {
    char line[LINE_MAX_BYTES];
    size_t n;
    bool overlong; /* the current line was cut: ignored */
} reader_t;

/* Handles one complete stdout line: "DONE/TOTAL". */
static void on_line(const char *line, reg_quantize_progress_fn fn, void *ctx)
{
    char *end = NULL;
    errno = 0;
    long long done = strtoll(line, &end, 10);
    if (errno || end == line || *end != '/')
        return;
    const char *t = end + 1;
    long long total = strtoll(t, &end, 10);
    if (errno || end == t || *end || done < 0 || total < 0 || done > total)
        return;
    if (fn)
        fn(ctx, done, total);
}

static void feed(reader_t *r, const char *buf, size_t n,
                 reg_quantize_progress_fn fn, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            r->line[r->n] = '\0';
            if (!r->overlong)
                on_line(r->line, fn, ctx);
            r->n = 0;
            r->overlong = false;
        } else if (r->n + 1 < sizeof r->line) {
            r->line[r->n++] = buf[i];
        } else {
            r->overlong = true;
        }
    }
}

/* The tool's stderr without its trailing newlines, one line. */
static void tidy(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (s[i] == '\n')
            s[i] = ' ';
}

/* Removes what a killed or failed tool left of out_path: its
 * `<name>.tmp-XXXXXX` staging files (lib/gguf_write.h) in the same folder. */
static void remove_partials(const char *out_path)
{
    char dir[4096];
    const char *slash = strrchr(out_path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - out_path), out_path);
    const char *base = slash ? slash + 1 : out_path;
    char prefix[512];
    int n = snprintf(prefix, sizeof prefix, "%s.tmp-", base);
    if (n < 0 || (size_t)n >= sizeof prefix)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, (size_t)n))
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
}

cr_status_t reg_quantize_run(const char *src_path, const char *out_path,
                             const char *type, const atomic_bool *cancel,
                             reg_quantize_progress_fn fn, void *ctx,
                             cr_err_t *err)
{
    char bin[4096];
    cr_status_t st = reg_quantize_runner_bin(bin, sizeof bin, err);
    if (st)
        return st;
    int out_p[2] = {-1, -1}, err_p[2] = {-1, -1};
    if (pipe2(out_p, O_CLOEXEC) || pipe2(err_p, O_CLOEXEC)) {
        st = cr_err_set(err, CR_E_IO, "pipe: %s", strerror(errno));
        goto fail_pipes;
    }
    char *argv[] = {bin, "quantize", "--in", (char *)src_path, "--out",
                    (char *)out_path, "--type", (char *)type, "--progress",
                    NULL};
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        /* The child: only async-signal-safe calls until exec. It dies
         * with the registry (a registry killed mid-quantize must not leave
         * minutes of work running, orphaned). PDEATHSIG follows the thread
         * that forked, this job thread, which waits for the child below;
         * a parent already gone before prctl is caught by getppid. */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd < 0 || dup2(null_fd, 0) < 0 || dup2(out_p[1], 1) < 0 ||
            dup2(err_p[1], 2) < 0)
            _exit(127);
        execv(bin, argv);
        static const char msg[] = "quantize: cannot exec the runner\n";
        ssize_t w = write(2, msg, sizeof msg - 1);
        CR_UNUSED(w);
        _exit(127);
    }
    int fork_errno = errno;
    close(out_p[1]);
    close(err_p[1]);
    out_p[1] = err_p[1] = -1;
    if (pid < 0) {
        st = cr_err_set(err, CR_E_IO, "cannot start %s: %s", bin,
                        strerror(fork_errno));
        goto fail_pipes;
    }

    reader_t r = {.n = 0};
    char errtext[ERR_MAX_BYTES] = "";
    size_t errlen = 0;
    struct pollfd pf[2] = {{.fd = out_p[0], .events = POLLIN},
                           {.fd = err_p[0], .events = POLLIN}};
    int open_fds = 2;
    bool canceled = false;
    while (open_fds > 0) {
        /* The client left: the child goes now. Its output no longer
         * matters (and a pipe a grandchild inherited might stay open). */
        if (cancel && atomic_load(cancel)) {
            canceled = true;
            kill(pid, SIGKILL);
            break;
        }
        int n = poll(pf, 2, cancel ? REG_QUANTIZE_POLL_MS : -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || !(pf[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[4096];
            ssize_t got = read(pf[i].fd, buf, sizeof buf);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                pf[i].fd = -1;
                open_fds--;
                continue;
            }
            if (i == 0) {
                feed(&r, buf, (size_t)got, fn, ctx);
            } else {
                size_t room = sizeof errtext - 1 - errlen;
                size_t take = (size_t)got < room ? (size_t)got : room;
                memcpy(errtext + errlen, buf, take);
                errlen += take;
                errtext[errlen] = '\0';
            }
        }
    }
    if (open_fds > 0 && !canceled)
        kill(pid, SIGKILL); /* poll failed: do not leave it running */
    int wst = 0;
    while (waitpid(pid, &wst, 0) < 0 && errno == EINTR)
        ;
    tidy(errtext);
    if (canceled)
        st = cr_err_set(err, CR_E_CANCELED, "canceled");
    else if (WIFEXITED(wst) && WEXITSTATUS(wst) == 0)
        st = CR_OK;
    else if (WIFSIGNALED(wst))
        st = cr_err_set(err, CR_E_RUNNER, "quantizing failed: runner killed "
                        "by signal %d%s%s", WTERMSIG(wst),
                        errtext[0] ? ": " : "", errtext);
    else
        st = cr_err_set(err, CR_E_RUNNER, "quantizing failed: %s",
                        errtext[0] ? errtext : "runner exited with an error");
    if (st)
        remove_partials(out_path);
fail_pipes:
    for (int i = 0; i < 2; i++) {
        if (out_p[i] >= 0)
            close(out_p[i]);
        if (err_p[i] >= 0)
            close(err_p[i]);
    }
    return st;
}
