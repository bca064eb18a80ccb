/* soak.h: the parts of bench-soak (issue 20, "Load and soak").
 *
 * bench-soak starts a private `corral serve`, loads a small synthetic
 * generation model and an embedding model, and runs three things at once
 * for a set duration:
 *   clients.c  N clients (libcurl multi, one thread) mixing streams,
 *              non-streams, embeddings, tags, disconnects and slow readers;
 *   probe.c    GET /api/version in a loop on its own thread, timing each;
 *   procs.c    RSS and open descriptors of gateway, scheduler, registry and
 *              runners from /proc, every sample interval.
 * soak.c holds main: options, the server, and the verdicts. Not a test:
 * it prints figures and verdicts; never part of ctest. */
#ifndef BENCH_SOAK_H
#define BENCH_SOAK_H

#include "lib/prelude.h"

#include <stdatomic.h>
#include <sys/types.h>

/* ---- clients ---- */

typedef enum soak_kind {
    SOAK_STREAM,     /* streamed generate or chat, read to its end */
    SOAK_WHOLE,      /* generate or chat with stream:false */
    SOAK_EMBED,      /* /api/embed on the embedding model */
    SOAK_TAGS,       /* GET /api/tags */
    SOAK_DISCONNECT, /* a stream the client drops after its first token */
    SOAK_SLOW,       /* a long stream read at a few kB/s through a small
                        socket buffer, so the server's buffers fill */
    SOAK_KINDS
} soak_kind_t;

extern const char *const soak_kind_names[SOAK_KINDS];

#define SOAK_FAILURES_KEPT 12

typedef struct soak_tally {
    long ok[SOAK_KINDS];      /* answered in full (tokens, vectors, list) */
    long busy[SOAK_KINDS];    /* 503: the queue was full */
    long dropped[SOAK_KINDS]; /* disconnects: the client left on purpose */
    long failed[SOAK_KINDS];  /* anything else: an error, a timeout (a
                                 hang), a stream that ended without done */
    long empty;               /* answered in full with no token (the
                                 sampled first token was the end token) */
    long unfinished;          /* still running when the drain ran out */
    long tokens;              /* generated tokens seen by the clients */
    char failures[SOAK_FAILURES_KEPT][200]; /* the first few, described */
    int n_failures;
} soak_tally_t;

typedef struct soak_clients_cfg {
    const char *host;         /* 127.0.0.1:PORT */
    const char *gen_model;    /* for streams, chats, disconnects */
    const char *embed_model;  /* for /api/embed */
    int clients;              /* concurrent clients */
    double duration_s;        /* new requests start until then */
    double drain_s;           /* then running ones get this long to end */
    long timeout_s;           /* one request longer than this is a hang */
    atomic_int *active;       /* requests in flight, for the sampler */
} soak_clients_cfg_t;

/* Runs the mix until duration_s, then waits for requests in flight (at
 * most drain_s). Fills *out. 0, or -1 when libcurl cannot be set up. */
int soak_clients_run(const soak_clients_cfg_t *cfg, soak_tally_t *out);

/* ---- /api/version probe ---- */

typedef struct soak_probe soak_probe_t;

/* Starts a thread that sends GET /api/version to host every interval_ms,
 * alternating a kept-alive connection and a fresh one. Caller owns; stop
 * and free with soak_probe_stop. NULL on failure. */
soak_probe_t *soak_probe_start(const char *host, int interval_ms);

typedef struct soak_probe_stats {
    long n, failed;            /* probes sent; those not answered 200 */
    double p50_ms, p99_ms, max_ms;
    double p99_fresh_ms;       /* p99 of the fresh-connection probes */
} soak_probe_stats_t;

/* Stops the thread, computes the figures, frees *self_p. */
void soak_probe_stop(soak_probe_t **self_p, soak_probe_stats_t *out);

/* ---- /proc samples ---- */

#define SOAK_MAX_PROCS 8

typedef struct soak_proc {
    pid_t pid;
    char name[32]; /* gateway, scheduler, registry, runner */
    long rss_kb;   /* VmRSS */
    long fds;      /* entries of /proc/PID/fd */
    double cpu_s;  /* user + system CPU time so far */
} soak_proc_t;

typedef struct soak_sample {
    double t_s;    /* since the load started */
    int n;
    soak_proc_t p[SOAK_MAX_PROCS];
} soak_sample_t;

/* The services under serve_pid (its descendants named corral-*), read
 * now. */
void soak_procs_read(pid_t serve_pid, double t_s, soak_sample_t *out);

/* The entry for pid in s, or NULL. */
const soak_proc_t *soak_sample_find(const soak_sample_t *s, pid_t pid);

#endif
