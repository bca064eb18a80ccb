/* test_registry_quantize_orphan.c: a registry killed mid-quantize takes
 * its `corral-runner quantize` child with it (quantize.h).
 *
 * A forked process stands for the registry: it runs reg_quantize_run
 * with CORRAL_RUNNER_BIN set to a stand-in runner (a shell script that
 * writes its pid and sleeps 300 s). Once the stand-in runs, the "registry"
 * gets SIGKILL; the stand-in must be gone (or a zombie awaiting its new
 * parent's reaping) well before its sleep ends. */
#include "lib/prelude.h"
#include "services/registry/quantize.h"
#include "tests/unit/check.h"
#include "tests/unit/poll_wait.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define WAIT_MS 20000 /* generous bound: a busy CI machine */
#define NAP_MS 20 /* between two polls */

static char tmp_g[256], pidfile_g[300], runner_g[300];

/* True if pid is gone or a zombie (dead, not yet reaped by whoever
 * adopted it). */
static bool is_dead(pid_t pid)
{
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *paren = strrchr(text, ')');
    return !paren || paren[1] != ' ' || paren[2] == 'Z' || paren[2] == 'X';
}

/* Runs the "registry": reg_quantize_run until it is killed. */
static pid_t start_registry(void)
{
    unlink(pidfile_g);
    pid_t pid = fork();
    if (pid == 0) {
        cr_err_t err;
        reg_quantize_run("/dev/null", "/dev/null", "Q4_0", NULL, NULL, NULL, &err);
        _exit(0);
    }
    return pid;
}

static pid_t wait_stand_in(void)
{
    pid_t r = 0;
    int64_t t0 = test_mono_ms();
    while (!(r = test_read_pid(pidfile_g)) && test_mono_ms() - t0 < WAIT_MS)
        test_nap_ms(NAP_MS);
    return r;
}

static bool wait_dead(pid_t pid)
{
    for (int64_t t0 = test_mono_ms(); test_mono_ms() - t0 < WAIT_MS; test_nap_ms(NAP_MS))
        if (is_dead(pid))
            return true;
    return false;
}

static void test_registry_killed(void)
{
    pid_t reg = start_registry();
    CHECK(reg > 0);
    pid_t child = wait_stand_in();
    CHECK_MSG(child > 0, "the stand-in runner did not start");
    CHECK(kill(reg, SIGKILL) == 0);
    waitpid(reg, NULL, 0);
    if (child > 0) {
        bool dead = wait_dead(child);
        CHECK_MSG(dead, "the quantize child %d outlived its killed registry",
                  (int)child);
        if (!dead)
            kill(child, SIGKILL); /* ours to clean up: we started it */
    }
}

int main(void)
{
    snprintf(tmp_g, sizeof tmp_g, "/tmp/corral-qorphan-XXXXXX");
    if (!mkdtemp(tmp_g)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(pidfile_g, sizeof pidfile_g, "%s/pid", tmp_g);
    snprintf(runner_g, sizeof runner_g, "%s/corral-runner", tmp_g);
    FILE *f = fopen(runner_g, "w");
    CHECK(f != NULL);
    if (!f)
        return check_finish("registry_quantize_orphan");
    /* The pid is written through a temp name, so a reader never sees a
     * half-written number. */
    fprintf(f, "#!/bin/sh\necho $$ > %s.tmp && mv %s.tmp %s\nexec sleep 300\n",
            pidfile_g, pidfile_g, pidfile_g);
    fclose(f);
    chmod(runner_g, 0755);
    setenv("CORRAL_RUNNER_BIN", runner_g, 1);

    test_registry_killed();

    unlink(runner_g);
    unlink(pidfile_g);
    rmdir(tmp_g);
    return check_finish("registry_quantize_orphan");
}
