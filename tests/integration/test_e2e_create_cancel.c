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

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"
#include "tests/unit/poll_wait.h"

#define WAIT_MS 60000 /* generous: a busy CI machine */
#define NAP_MS 20 /* between two polls */

static e2e_t T;

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

static void test_quantize_canceled(void)
{
    /* 2 layers of dim 1024 / ffn 4096 in F32: ~130 MB, seconds of
     * quantizing here; the child is frozen anyway. */
    CHECK(e2e_synth_create(&T, "src", NULL, "--seed", "7", "--dim", "1024",
                           "--layers", "2", "--ffn", "4096", NULL));
    int blobs0 = 0, temps0 = 0;
    count_blobs(&blobs0, &temps0);
    size_t failed0 = e2e_log_count(&T, "create q failed: canceled");

    int fd = e2e_post_raw(&T, "/api/create",
                      "{\"model\":\"q\",\"from\":\"src\",\"quantize\":\"q4_K_M\"}");
    CHECK_MSG(fd >= 0, "cannot connect to the gateway");
    if (fd < 0)
        return;
    static char buf[1 << 16];
    size_t len = 0;
    buf[0] = '\0';
    bool started = e2e_read_until(fd, buf, sizeof buf, &len, "\"status\":\"quantizing", WAIT_MS);
    CHECK_MSG(started, "no quantizing status came: %.300s", buf);
    pid_t child = started ? quantize_child() : 0;
    if (child > 0)
        kill(child, SIGSTOP);
    CHECK_MSG(child > 0, "the quantization ended before it could be held "
                         "(a bigger model is needed): %.300s", buf);
    int64_t t_close = test_mono_ms();
    close(fd); /* the client leaves */
    if (child <= 0)
        return;

    bool gone = false;
    while (!(gone = kill(child, 0) != 0) && test_mono_ms() - t_close < WAIT_MS)
        test_nap_ms(NAP_MS);
    CHECK_MSG(gone, "the quantization outlived its client by %lld ms",
              (long long)(test_mono_ms() - t_close));
    if (!gone) {
        kill(child, SIGCONT); /* let it finish, so serve stops cleanly */
        return;
    }
    fprintf(stderr, "the quantize child ended %lld ms after its client left\n",
            (long long)(test_mono_ms() - t_close));
    bool logged = false;
    for (int64_t t0 = test_mono_ms(); !logged && test_mono_ms() - t0 < WAIT_MS; test_nap_ms(NAP_MS))
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
