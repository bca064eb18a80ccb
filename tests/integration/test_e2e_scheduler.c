/* test_e2e_scheduler.c: several models at once through the real services.
 *
 * With OLLAMA_MAX_LOADED_MODELS=2, concurrent requests to three models
 * (each its own runner) all succeed: the scheduler evicts idle runners to
 * stay at the cap and makes the others wait, and ps never shows more than
 * two. Then a model is unloaded by `corral stop`. */
#include "lib/prelude.h"

#include <pthread.h>
#include <unistd.h>

#include "tests/integration/e2e.h"
#include "tests/unit/check.h"

static e2e_t T;

#define N_MODELS 3
#define N_THREADS 6
#define PER_THREAD 3

static const char *models_g[N_MODELS] = {"alpha", "beta", "gamma"};
static int ok_g, failed_g;
static int max_loaded_seen_g;
static pthread_mutex_t lock_g = PTHREAD_MUTEX_INITIALIZER;
static volatile bool stop_watch_g;

static void *worker(void *arg)
{
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < PER_THREAD; i++) {
        const char *model = models_g[(t + i) % N_MODELS];
        char body[256];
        snprintf(body, sizeof body,
                 "{\"model\":\"%s\",\"prompt\":\"hi %d\",\"stream\":false,"
                 "\"options\":{\"num_predict\":8}}",
                 model, i);
        e2e_resp_t r = e2e_http(&T, "POST", "/api/generate", body, NULL, NULL);
        json_t *j = json_loads(r.body, 0, NULL);
        bool good = r.status == 200 && json_is_true(json_object_get(j, "done"));
        pthread_mutex_lock(&lock_g);
        if (good)
            ok_g++;
        else {
            failed_g++;
            fprintf(stderr, "request to %s: %ld %s\n", model, r.status, r.body);
        }
        pthread_mutex_unlock(&lock_g);
        json_decref(j);
        e2e_resp_free(&r);
    }
    return NULL;
}

/* Polls ps while the workers run and records the most models loaded. */
static void *watcher(void *arg)
{
    CR_UNUSED(arg);
    do { /* at least once, however late this thread runs */
        e2e_resp_t r = e2e_http(&T, "GET", "/api/ps", NULL, NULL, NULL);
        json_t *j = json_loads(r.body, 0, NULL);
        int n = (int)json_array_size(json_object_get(j, "models"));
        pthread_mutex_lock(&lock_g);
        if (n > max_loaded_seen_g)
            max_loaded_seen_g = n;
        pthread_mutex_unlock(&lock_g);
        json_decref(j);
        e2e_resp_free(&r);
        usleep(20000);
    } while (!stop_watch_g);
    return NULL;
}

static bool create_models(void)
{
    char gguf[1200], mf[1200];
    snprintf(gguf, sizeof gguf, "%s/m.gguf", T.tmp);
    snprintf(mf, sizeof mf, "%s/Modelfile", T.tmp);
    if (e2e_run_bin(&T, "corral-gguf-synth", "--out", gguf, "--type", "q8_0",
                    NULL))
        return false;
    FILE *f = fopen(mf, "w");
    if (!f)
        return false;
    fputs("FROM ./m.gguf\nPARAMETER temperature 0\n", f);
    fclose(f);
    for (int i = 0; i < N_MODELS; i++) {
        char *out = NULL;
        int rc = e2e_cli(&T, NULL, &out, "create", models_g[i], "-f", mf, NULL);
        free(out);
        if (rc)
            return false;
    }
    return true;
}

int main(void)
{
    setenv("OLLAMA_MAX_LOADED_MODELS", "2", 1);
    if (!e2e_start(&T)) {
        CHECK_MSG(false, "the services did not start");
        e2e_stop(&T);
        return check_finish("e2e_scheduler");
    }
    CHECK(create_models());

    pthread_t workers[N_THREADS], watch;
    pthread_create(&watch, NULL, watcher, NULL);
    for (int t = 0; t < N_THREADS; t++)
        pthread_create(&workers[t], NULL, worker, (void *)(intptr_t)t);
    for (int t = 0; t < N_THREADS; t++)
        pthread_join(workers[t], NULL);
    stop_watch_g = true;
    pthread_join(watch, NULL);

    CHECK_EQ_INT(ok_g, N_THREADS * PER_THREAD);
    CHECK_EQ_INT(failed_g, 0);
    CHECK_MSG(max_loaded_seen_g <= 2, "ps showed %d models", max_loaded_seen_g);
    CHECK(max_loaded_seen_g >= 1);
    pid_t pids[8];
    CHECK(e2e_find_procs(&T, "corral-runner", pids, 8) <= 2);

    /* `corral stop` unloads one; ps no longer lists it. */
    e2e_resp_t r = e2e_http(&T, "GET", "/api/ps", NULL, NULL, NULL);
    json_t *j = json_loads(r.body, 0, NULL);
    const char *loaded = json_string_value(
        json_object_get(json_array_get(json_object_get(j, "models"), 0), "name"));
    char name[64] = "";
    if (loaded)
        snprintf(name, sizeof name, "%s", loaded);
    json_decref(j);
    e2e_resp_free(&r);
    CHECK(name[0] != '\0');
    if (name[0]) {
        char *out = NULL;
        CHECK_EQ_INT(e2e_cli(&T, NULL, &out, "stop", name, NULL), 0);
        free(out);
        bool gone = false;
        for (int i = 0; i < 300 && !gone; i++) { /* up to 30 s */
            r = e2e_http(&T, "GET", "/api/ps", NULL, NULL, NULL);
            char quoted[80];
            snprintf(quoted, sizeof quoted, "\"%s\"", name);
            gone = r.status == 200 && !strstr(r.body, quoted);
            e2e_resp_free(&r);
            if (!gone)
                usleep(100000);
        }
        CHECK_MSG(gone, "%s still loaded after corral stop", name);
    }
    e2e_stop(&T);
    return check_finish("e2e_scheduler");
}
