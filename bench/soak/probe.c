/* probe.c: bench-soak's /api/version latency, on its own thread.
 *
 * A health check is what must stay quick while the models are busy, so the
 * probe times GET /api/version from request to last byte (libcurl's total
 * time), every interval, alternating a kept-alive connection (the handler
 * alone) and a fresh one (accept and the gateway's new connection thread
 * too), and keeps every time for the percentiles. */
#include "lib/prelude.h"
#include "bench/soak/soak.h"

#include <curl/curl.h>
#include <pthread.h>
#include <time.h>

#define PROBE_MAX_SAMPLES (1 << 20) /* 5 hours at 20 ms */

struct soak_probe {
    char url[300];
    int interval_ms;
    atomic_bool stop;
    pthread_t th;
    double *ms;      /* each probe's time */
    bool *fresh;     /* whether it used a fresh connection */
    long n, failed;
};

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    CR_UNUSED(p);
    CR_UNUSED(ud);
    return size * n;
}

static void *probe_main(void *arg)
{
    soak_probe_t *p = arg;
    CURL *keep = curl_easy_init(), *fresh = curl_easy_init();
    CURL *both[2] = {keep, fresh};
    for (int i = 0; i < 2; i++) {
        if (!both[i])
            continue;
        curl_easy_setopt(both[i], CURLOPT_URL, p->url);
        curl_easy_setopt(both[i], CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(both[i], CURLOPT_TIMEOUT, 60L);
        curl_easy_setopt(both[i], CURLOPT_NOSIGNAL, 1L);
    }
    if (fresh) {
        curl_easy_setopt(fresh, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(fresh, CURLOPT_FORBID_REUSE, 1L);
    }
    while (keep && fresh && !atomic_load(&p->stop) && p->n < PROBE_MAX_SAMPLES) {
        bool is_fresh = p->n % 2;
        CURL *c = is_fresh ? fresh : keep;
        CURLcode res = curl_easy_perform(c);
        long status = 0;
        curl_off_t us = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(c, CURLINFO_TOTAL_TIME_T, &us);
        if (res != CURLE_OK || status != 200)
            p->failed++;
        p->ms[p->n] = (double)us / 1000.0;
        p->fresh[p->n] = is_fresh;
        p->n++;
        struct timespec ts = {p->interval_ms / 1000, (long)(p->interval_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    curl_easy_cleanup(keep);
    curl_easy_cleanup(fresh);
    return NULL;
}

soak_probe_t *soak_probe_start(const char *host, int interval_ms)
{
    soak_probe_t *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    snprintf(p->url, sizeof p->url, "http://%s/api/version", host);
    p->interval_ms = interval_ms;
    p->ms = malloc(PROBE_MAX_SAMPLES * sizeof *p->ms);
    p->fresh = malloc(PROBE_MAX_SAMPLES * sizeof *p->fresh);
    if (!p->ms || !p->fresh || pthread_create(&p->th, NULL, probe_main, p)) {
        free(p->ms);
        free(p->fresh);
        free(p);
        return NULL;
    }
    return p;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile of sorted v[0..n) (nearest rank). */
static double quantile(const double *v, long n, double q)
{
    if (n <= 0)
        return 0;
    long i = (long)(q * (double)n + 0.5) - 1;
    return v[CR_MAX(0, CR_MIN(i, n - 1))];
}

void soak_probe_stop(soak_probe_t **self_p, soak_probe_stats_t *out)
{
    memset(out, 0, sizeof *out);
    soak_probe_t *p = *self_p;
    if (!p)
        return;
    atomic_store(&p->stop, true);
    pthread_join(p->th, NULL);
    out->n = p->n;
    out->failed = p->failed;
    /* Fresh-connection times first, copied apart, then all of them. */
    double *f = malloc((size_t)(p->n + 1) * sizeof *f);
    long nf = 0;
    for (long i = 0; f && i < p->n; i++)
        if (p->fresh[i])
            f[nf++] = p->ms[i];
    if (f) {
        qsort(f, (size_t)nf, sizeof *f, cmp_double);
        out->p99_fresh_ms = quantile(f, nf, 0.99);
    }
    free(f);
    qsort(p->ms, (size_t)p->n, sizeof *p->ms, cmp_double);
    out->p50_ms = quantile(p->ms, p->n, 0.50);
    out->p99_ms = quantile(p->ms, p->n, 0.99);
    out->max_ms = p->n ? p->ms[p->n - 1] : 0;
    free(p->ms);
    free(p->fresh);
    free(p);
    *self_p = NULL;
}
