/* template_check.c: running `corral-runner check-template` for create (see
 * template_check.h). */
#include "lib/prelude.h"
#include "services/registry/template_check.h"

#include "services/registry/quantize.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define ERR_MAX_BYTES 400 /* the tool's one error line */

/* Runs `corral-runner check-template <flag> <path>`; its exit 1 with an
 * error line becomes CR_E_INVALID "<label>: <line>". */
static cr_status_t run_check(const char *cmd, const char *flag,
                             const char *path, const char *label, cr_err_t *err)
{
    char bin[4096];
    cr_status_t st = reg_quantize_runner_bin(bin, sizeof bin, err);
    if (st)
        return st;
    int err_p[2];
    if (pipe2(err_p, O_CLOEXEC))
        return cr_err_set(err, CR_E_IO, "pipe: %s", strerror(errno));
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, err_p[1], 2);
    char *argv[] = {bin, (char *)cmd, (char *)flag, (char *)path, NULL};
    pid_t pid = -1;
    int rc = posix_spawn(&pid, bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(err_p[1]);
    if (rc) {
        close(err_p[0]);
        return cr_err_set(err, CR_E_IO, "cannot start %s: %s", bin, strerror(rc));
    }
    /* Keep the first line's worth; drain the rest so the child never
     * blocks on a full pipe. */
    char text[ERR_MAX_BYTES] = "";
    size_t n = 0;
    char chunk[512];
    ssize_t got;
    while ((got = read(err_p[0], chunk, sizeof chunk)) != 0) {
        if (got < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        size_t take = CR_MIN((size_t)got, sizeof text - 1 - n);
        memcpy(text + n, chunk, take);
        n += take;
    }
    close(err_p[0]);
    text[n] = '\0';
    for (size_t i = 0; i < n; i++)
        if (text[i] == '\n' || text[i] == '\r')
            text[i] = i + 1 == n ? '\0' : ' ';
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return CR_OK;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 1 && text[0])
        return label[0] ? cr_err_set(err, CR_E_INVALID, "%s: %s", label, text)
                        : cr_err_set(err, CR_E_INVALID, "%s", text);
    return cr_err_set(err, CR_E_RUNNER, "%s %s failed%s%s", bin, cmd,
                      text[0] ? ": " : "", text);
}

cr_status_t reg_template_check(const char *gguf_path, cr_err_t *err)
{
    return run_check("check-template", "--model", gguf_path, "chat template", err);
}

cr_status_t reg_go_template_check(const char *path, cr_err_t *err)
{
    return run_check("check-template", "--go-template", path, "template", err);
}

cr_status_t reg_model_arch_check(const char *gguf_path, cr_err_t *err)
{
    return run_check("check-model", "--model", gguf_path, "", err);
}
