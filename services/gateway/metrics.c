/* metrics.c: Prometheus counters and histograms (see metrics.h).
 *
 * Histograms keep per-bucket counts (not cumulative) and add them up when
 * rendered. Label values come from the route table, never from clients,
 * so the number of series is bounded; the caps are a second line. */
#include "lib/prelude.h"
#include "services/gateway/metrics.h"

#include <pthread.h>

#define MAX_BUCKETS 16

typedef struct hist {
    const double *le; /* upper bounds, ascending */
    size_t n;
    uint64_t counts[MAX_BUCKETS + 1]; /* [n] = above the last bound */
    uint64_t count;
    double sum;
} hist_t;

typedef struct series {
    char route[GW_METRICS_LABEL_MAX];
    unsigned status;
    uint64_t n;
} series_t;

typedef struct route_hist {
    char route[GW_METRICS_LABEL_MAX];
    hist_t h;
} route_hist_t;

static const double ttft_le[] = {0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                 2.5,   5,    10,  30,   60,  120};
static const double token_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                  0.1,   0.25,   0.5,   1,    2.5};
static const double duration_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                     0.5,   1,    2.5,   5,    10,  30,
                                     60,    120,  300,   600};
static const double load_le[] = {0.1, 0.25, 0.5, 1,  2.5, 5,
                                 10,  20,   30,  60, 120, 300};

struct gw_metrics {
    pthread_mutex_t mu;
    series_t req[GW_METRICS_MAX_SERIES];
    size_t n_req;
    route_hist_t dur[GW_METRICS_MAX_ROUTES];
    size_t n_dur;
    hist_t ttft, token, load;
    uint64_t prompt_tokens, completion_tokens, generations;
    uint64_t direct_generations; /* their chunks came straight from the runner */
    int64_t in_flight;
};

_Static_assert(CR_ARRAY_LEN(duration_le) <= MAX_BUCKETS, "buckets");
_Static_assert(CR_ARRAY_LEN(ttft_le) <= MAX_BUCKETS, "buckets");
_Static_assert(CR_ARRAY_LEN(token_le) <= MAX_BUCKETS, "buckets");
_Static_assert(CR_ARRAY_LEN(load_le) <= MAX_BUCKETS, "buckets");

static void hist_init(hist_t *h, const double *le, size_t n)
{
    memset(h, 0, sizeof *h);
    h->le = le;
    h->n = n;
}

static void hist_add(hist_t *h, double v, uint64_t times)
{
    if (!(v >= 0)) /* NaN or negative: a clock oddity */
        v = 0;
    size_t i = 0;
    while (i < h->n && v > h->le[i])
        i++;
    h->counts[i] += times;
    h->count += times;
    h->sum += v * (double)times;
}

gw_metrics_t *gw_metrics_new(void)
{
    gw_metrics_t *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    hist_init(&m->ttft, ttft_le, CR_ARRAY_LEN(ttft_le));
    hist_init(&m->token, token_le, CR_ARRAY_LEN(token_le));
    hist_init(&m->load, load_le, CR_ARRAY_LEN(load_le));
    return m;
}

void gw_metrics_destroy(gw_metrics_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    pthread_mutex_destroy(&(*self_p)->mu);
    free(*self_p);
    *self_p = NULL;
}

void gw_metrics_request_begin(gw_metrics_t *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->in_flight++;
    pthread_mutex_unlock(&m->mu);
}

static series_t *find_series(gw_metrics_t *m, const char *route,
                             unsigned status)
{
    for (size_t i = 0; i < m->n_req; i++)
        if (m->req[i].status == status && !strcmp(m->req[i].route, route))
            return &m->req[i];
    /* the last slot is kept for "other" */
    if (m->n_req + (strcmp(route, "other") ? 1 : 0) >= GW_METRICS_MAX_SERIES)
        return NULL;
    series_t *s = &m->req[m->n_req++];
    snprintf(s->route, sizeof s->route, "%s", route);
    s->status = status;
    return s;
}

static route_hist_t *find_route_hist(gw_metrics_t *m, const char *route)
{
    for (size_t i = 0; i < m->n_dur; i++)
        if (!strcmp(m->dur[i].route, route))
            return &m->dur[i];
    if (m->n_dur + (strcmp(route, "other") ? 1 : 0) >= GW_METRICS_MAX_ROUTES)
        return NULL;
    route_hist_t *r = &m->dur[m->n_dur++];
    snprintf(r->route, sizeof r->route, "%s", route);
    hist_init(&r->h, duration_le, CR_ARRAY_LEN(duration_le));
    return r;
}

void gw_metrics_request_end(gw_metrics_t *m, const char *route,
                            unsigned status, double secs)
{
    if (!m)
        return;
    if (!route || !*route)
        route = "other";
    pthread_mutex_lock(&m->mu);
    m->in_flight--;
    series_t *s = find_series(m, route, status);
    if (!s)
        s = find_series(m, "other", status);
    if (s)
        s->n++;
    route_hist_t *h = find_route_hist(m, route);
    if (!h)
        h = find_route_hist(m, "other");
    if (h)
        hist_add(&h->h, secs, 1);
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_first_token(gw_metrics_t *m, double secs)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    hist_add(&m->ttft, secs, 1);
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_done(gw_metrics_t *m, const msg_done_body_t *d)
{
    if (!m || !d)
        return;
    pthread_mutex_lock(&m->mu);
    m->generations++;
    if (d->has_direct_chunks)
        m->direct_generations++;
    if (d->has_prompt_eval_count && d->prompt_eval_count > 0)
        m->prompt_tokens += (uint64_t)d->prompt_eval_count;
    if (d->has_eval_count && d->eval_count > 0) {
        m->completion_tokens += (uint64_t)d->eval_count;
        if (d->has_eval_duration && d->eval_duration > 0)
            hist_add(&m->token,
                     (double)d->eval_duration / 1e9 / (double)d->eval_count,
                     (uint64_t)d->eval_count);
    }
    if (d->has_load_duration && d->load_duration > 0)
        hist_add(&m->load, (double)d->load_duration / 1e9, 1);
    pthread_mutex_unlock(&m->mu);
}

void gw_metrics_prompt_tokens(gw_metrics_t *m, int64_t n)
{
    if (!m || n <= 0)
        return;
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)n;
    pthread_mutex_unlock(&m->mu);
}

/* ---- rendering ---- */

static void head(cr_buf_t *b, const char *name, const char *type,
                 const char *help)
{
    cr_buf_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A label value with \, " and newlines escaped. */
static void label(cr_buf_t *b, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            cr_buf_putc(b, '\\');
        if (*v == '\n') {
            cr_buf_puts(b, "\\n");
            continue;
        }
        cr_buf_putc(b, *v);
    }
}

/* name_bucket{[route="..",]le=".."} ... _sum, _count. */
static void hist_render(cr_buf_t *b, const char *name, const char *route,
                        const hist_t *h)
{
    uint64_t cum = 0;
    for (size_t i = 0; i <= h->n; i++) {
        cum += h->counts[i];
        cr_buf_printf(b, "%s_bucket{", name);
        if (route) {
            cr_buf_puts(b, "route=\"");
            label(b, route);
            cr_buf_puts(b, "\",");
        }
        if (i < h->n)
            cr_buf_printf(b, "le=\"%g\"} %" PRIu64 "\n", h->le[i], cum);
        else
            cr_buf_printf(b, "le=\"+Inf\"} %" PRIu64 "\n", cum);
    }
    const char *sfx[2] = {"_sum", "_count"};
    for (int k = 0; k < 2; k++) {
        cr_buf_printf(b, "%s%s", name, sfx[k]);
        if (route) {
            cr_buf_puts(b, "{route=\"");
            label(b, route);
            cr_buf_puts(b, "\"}");
        }
        if (k == 0)
            cr_buf_printf(b, " %.9g\n", h->sum);
        else
            cr_buf_printf(b, " %" PRIu64 "\n", h->count);
    }
}

cr_status_t gw_metrics_render(gw_metrics_t *m, cr_buf_t *b,
                              const gw_sched_stats_t *sched)
{
    pthread_mutex_lock(&m->mu);
    head(b, "corral_http_requests_total", "counter",
         "HTTP requests answered, by route and status code.");
    for (size_t i = 0; i < m->n_req; i++) {
        cr_buf_puts(b, "corral_http_requests_total{route=\"");
        label(b, m->req[i].route);
        cr_buf_printf(b, "\",code=\"%u\"} %" PRIu64 "\n", m->req[i].status,
                      m->req[i].n);
    }
    head(b, "corral_http_request_duration_seconds", "histogram",
         "Time from a request's arrival to the end of its answer.");
    for (size_t i = 0; i < m->n_dur; i++)
        hist_render(b, "corral_http_request_duration_seconds", m->dur[i].route,
                    &m->dur[i].h);
    head(b, "corral_http_requests_in_flight", "gauge",
         "Requests being answered now.");
    cr_buf_printf(b, "corral_http_requests_in_flight %" PRId64 "\n",
                  m->in_flight);
    head(b, "corral_prompt_tokens_total", "counter",
         "Prompt tokens processed (prompt_eval_count).");
    cr_buf_printf(b, "corral_prompt_tokens_total %" PRIu64 "\n",
                  m->prompt_tokens);
    head(b, "corral_completion_tokens_total", "counter",
         "Tokens generated (eval_count).");
    cr_buf_printf(b, "corral_completion_tokens_total %" PRIu64 "\n",
                  m->completion_tokens);
    head(b, "corral_generations_total", "counter",
         "Generations that finished (done messages relayed).");
    cr_buf_printf(b, "corral_generations_total %" PRIu64 "\n",
                  m->generations);
    head(b, "corral_direct_generations_total", "counter",
         "Of those, generations whose chunks came straight from their runner "
         "(direct replies), not through the scheduler.");
    cr_buf_printf(b, "corral_direct_generations_total %" PRIu64 "\n",
                  m->direct_generations);
    head(b, "corral_time_to_first_token_seconds", "histogram",
         "Time from a request's arrival to its first generated token.");
    hist_render(b, "corral_time_to_first_token_seconds", NULL, &m->ttft);
    head(b, "corral_token_latency_seconds", "histogram",
         "Time per generated token (eval_duration / eval_count).");
    hist_render(b, "corral_token_latency_seconds", NULL, &m->token);
    head(b, "corral_load_duration_seconds", "histogram",
         "Time a request spent obtaining a runner (queue and load).");
    hist_render(b, "corral_load_duration_seconds", NULL, &m->load);
    pthread_mutex_unlock(&m->mu);

    head(b, "corral_scheduler_up", "gauge",
         "1 if the scheduler answered ps at this scrape.");
    cr_buf_printf(b, "corral_scheduler_up %d\n", sched && sched->up ? 1 : 0);
    if (sched && sched->up) {
        head(b, "corral_models_loaded", "gauge",
             "Models loaded or loading in runners.");
        cr_buf_printf(b, "corral_models_loaded %" PRId64 "\n", sched->models);
        head(b, "corral_scheduler_requests_active", "gauge",
             "Requests running in runners.");
        cr_buf_printf(b, "corral_scheduler_requests_active %" PRId64 "\n",
                      sched->active);
        head(b, "corral_scheduler_queue_depth", "gauge",
             "Requests waiting for a runner.");
        cr_buf_printf(b, "corral_scheduler_queue_depth %" PRId64 "\n",
                      sched->queued);
    }
    /* The caps bound the text well under GW_METRICS_TEXT_MAX, so an append
     * fails only when memory does; a short text is then not served. */
    return b->data && b->len ? CR_OK : CR_E_NOMEM;
}
