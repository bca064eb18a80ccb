/* metrics.h: the gateway's Prometheus counters and histograms.
 *
 * One gw_metrics_t per server (in gw_ctx_t), fed by the server (each
 * request's route, status and duration; requests in flight) and by the
 * relay (time to first token, tokens in and out, per-token latency and
 * load durations from `done` messages). Every function is thread-safe (one
 * mutex; updates are a few adds). GET /metrics renders the text exposition
 * format 0.0.4, adding what the scheduler's `ps` says at scrape time
 * (loaded models, requests running and queued).
 *
 * It knows no HTTP and no bus: routes.c/metrics_route in metrics.c do. */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "proto/msg.h"

#define GW_METRICS_MAX_SERIES 256 /* (route, status) pairs kept */
#define GW_METRICS_MAX_ROUTES 64  /* routes with a duration histogram */
#define GW_METRICS_LABEL_MAX 64   /* bytes of a route label */
#define GW_METRICS_TEXT_MAX (4u * 1024 * 1024) /* the rendered text */

typedef struct gw_metrics gw_metrics_t;

/* What the scheduler said at scrape time. */
typedef struct gw_sched_stats {
    bool up;         /* ps answered */
    int64_t models;  /* loaded (or loading) models */
    int64_t active;  /* requests running, all models */
    int64_t queued;  /* requests waiting, all models */
} gw_sched_stats_t;

/* Caller owns the result (gw_metrics_destroy); NULL when out of memory. */
gw_metrics_t *gw_metrics_new(void);
void gw_metrics_destroy(gw_metrics_t **self_p);

/* A request arrived / was answered. route is a fixed label (a route's
 * path pattern, or "other"); status its HTTP status; secs arrival ->
 * completion. Series past the caps are counted under route "other". */
void gw_metrics_request_begin(gw_metrics_t *m);
void gw_metrics_request_end(gw_metrics_t *m, const char *route,
                            unsigned status, double secs);

/* Seconds from a request's arrival to its first generated token. */
void gw_metrics_first_token(gw_metrics_t *m, double secs);

/* The end of a generation: prompt_eval_count (tokens in), eval_count
 * (tokens out), eval_duration / eval_count per token (observed eval_count
 * times), load_duration when non-zero. */
void gw_metrics_done(gw_metrics_t *m, const msg_done_body_t *d);

/* Prompt tokens of an embedding request. */
void gw_metrics_prompt_tokens(gw_metrics_t *m, int64_t n);

/* Appends the exposition text to b (give it GW_METRICS_TEXT_MAX; sched may
 * be NULL: scheduler gauges are then left out and corral_scheduler_up is
 * 0). CR_E_NOMEM when the buffer could not grow. */
cr_status_t gw_metrics_render(gw_metrics_t *m, cr_buf_t *b,
                              const gw_sched_stats_t *sched);

#endif
