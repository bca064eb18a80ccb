/* test_e2e_version_health.c: /api/version, `corral -v` and the readiness
 * route /api/health through the real services.
 *
 * serve runs with CORRAL_COMPAT_VERSION=0.99.1 (the override of the Ollama
 * version corral answers as). Checked: /api/version says
 * {"version":"0.99.1","corral_version":CORRAL_VERSION}; `corral -v` prints
 * both; /api/health answers 200 with both peers ok (that it needs no API
 * key is unit.test_gateway_openai's); a
 * stopped registry (SIGSTOP: connected but silent) turns it into 503 with
 * "registry":"unavailable" and the scheduler still ok; SIGCONT makes it
 * 200 again. */
#include "lib/prelude.h"

#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

static void test_version(void)
{
    e2e_resp_t r = e2e_http(&T, "GET", "/api/version", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
    CHECK_EQ_STR(e2e_jstr(j, "version"), "0.99.1");
    CHECK_EQ_STR(e2e_jstr(j, "corral_version"), CORRAL_VERSION);
    json_decref(j);
    e2e_resp_free(&r);

    char *out = NULL;
    int rc = e2e_cli(&T, NULL, &out, "-v", NULL);
    CHECK_EQ_INT(rc, 0);
    CHECK_MSG(out && strstr(out, "corral version is " CORRAL_VERSION "\n") &&
                  strstr(out, "Ollama API version is 0.99.1\n") &&
                  !strstr(out, "Warning"),
              "corral -v: %s", out ? out : "(null)");
    free(out);
}

/* Polls /api/health until it answers want (a condition, not a delay), for
 * up to 60 s: 300 polls of 20 ms were ~6 s, tight for a registry's
 * reply timeout plus a resumed process on a loaded machine. */
static json_t *health_until(long want)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (now = t0; now.tv_sec - t0.tv_sec < 60; clock_gettime(CLOCK_MONOTONIC, &now)) {
        e2e_resp_t r = e2e_http(&T, "GET", "/api/health", NULL, NULL, NULL);
        long status = r.status;
        json_t *j = json_loads(r.body ? r.body : "", 0, NULL);
        e2e_resp_free(&r);
        if (status == want)
            return j;
        json_decref(j);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void test_health(void)
{
    json_t *j = health_until(200);
    CHECK_MSG(j != NULL, "health never answered 200");
    CHECK_EQ_STR(e2e_jstr(j, "status"), "ok");
    CHECK_EQ_STR(e2e_jstr(j, "scheduler"), "ok");
    CHECK_EQ_STR(e2e_jstr(j, "registry"), "ok");
    json_decref(j);
    e2e_resp_t r = e2e_http(&T, "HEAD", "/api/health", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 200);
    e2e_resp_free(&r);

    pid_t reg[4];
    size_t n = e2e_find_procs(&T, "corral-registry", reg, 4);
    CHECK_EQ_INT(n, 1);
    if (n != 1)
        return;
    kill(reg[0], SIGSTOP);
    j = health_until(503);
    CHECK_MSG(j != NULL, "health never answered 503 with the registry stopped");
    CHECK_EQ_STR(e2e_jstr(j, "status"), "unavailable");
    CHECK_EQ_STR(e2e_jstr(j, "scheduler"), "ok");
    CHECK_EQ_STR(e2e_jstr(j, "registry"), "unavailable");
    json_decref(j);
    kill(reg[0], SIGCONT);
    j = health_until(200);
    CHECK_MSG(j != NULL, "health never came back after SIGCONT");
    json_decref(j);
}

/* With CORRAL_API_KEY set, the CLI sends the key it is given (it sent
 * none, so every command but -v got 401); a wrong key is refused. */
static void test_cli_api_key(void)
{
    setenv("CORRAL_API_KEY", "e2e-key-7f3a", 1);
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "serve with CORRAL_API_KEY did not start");
        unsetenv("CORRAL_API_KEY");
        return;
    }
    e2e_resp_t r = e2e_http(&T, "GET", "/api/tags", NULL, NULL, NULL);
    CHECK_EQ_INT(r.status, 401); /* the key is really required */
    e2e_resp_free(&r);
    char *out = NULL, *err = NULL;
    CHECK_EQ_INT(e2e_cli_err(&T, NULL, &out, &err, "list", NULL), 0);
    CHECK_MSG(out && strstr(out, "NAME"), "list printed: %s / %s", out ? out : "",
              err ? err : "");
    free(out);
    free(err);
    out = err = NULL;
    setenv("CORRAL_API_KEY", "wrong-key", 1); /* the CLI's, not serve's */
    CHECK(e2e_cli_err(&T, NULL, &out, &err, "list", NULL) != 0);
    CHECK_MSG(err && strstr(err, "unauthorized"), "stderr: %s", err ? err : "");
    free(out);
    free(err);
    unsetenv("CORRAL_API_KEY");
    e2e_stop(&T);
}

int main(void)
{
    setenv("CORRAL_COMPAT_VERSION", "0.99.1", 1);
    if (!e2e_start(&T))
        return 1;
    test_health();
    test_version();
    e2e_stop(&T);
    test_cli_api_key();
    return check_finish("e2e_version_health");
}
