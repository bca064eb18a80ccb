/* clients.c: bench-soak's client mix, all clients in one thread.
 *
 * Each client loops: pick a kind of request, run it, judge the answer,
 * wait a little (longer after a 503), again. libcurl's multi interface
 * drives every transfer from one poll loop, so 500 clients cost the
 * client side one thread and a connection each. A response is judged line
 * by line as it arrives (NDJSON streams; a whole answer is one line), so
 * nothing is kept but the current line. */
#include "lib/prelude.h"
#include "bench/soak/soak.h"
#include "bench/stats.h"

#include <curl/curl.h>
#include <sys/socket.h>

const char *const soak_kind_names[SOAK_KINDS] = {
    "stream", "whole", "embed", "tags", "disconnect", "slow-reader"};

/* Share of each kind, in percent (sums to 100). */
static const int kind_weight[SOAK_KINDS] = {30, 15, 15, 10, 15, 15};

#define LINE_MAX_BYTES (64 * 1024) /* a longer line is judged by its start */
#define SLOW_RECV_BYTES_PER_S 4096
#define SLOW_RCVBUF_BYTES 4096
#define THINK_MAX_MS 100  /* pause between a client's requests */
#define BUSY_BACKOFF_MS 500 /* plus up to as much again after a 503 */

typedef struct client {
    CURL *easy;
    struct curl_slist *hdr;
    soak_kind_t kind;
    bool running;
    double start_at;       /* next request starts then (when !running) */
    char body[512];        /* request body */
    char line[LINE_MAX_BYTES];
    size_t line_len;
    long tokens;           /* token lines seen in this answer */
    bool done, error, vectors, models; /* what the answer held */
    bool dropped;          /* a disconnect that left on purpose */
    char error_text[120];
    uint64_t rng;
} client_t;

static uint64_t next_rand(uint64_t *s)
{
    /* xorshift64*: a client's own sequence, no shared state */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ULL;
}

static int rand_below(client_t *c, int n)
{
    return (int)(next_rand(&c->rng) % (uint64_t)n);
}

static soak_kind_t pick_kind(client_t *c)
{
    int r = rand_below(c, 100), k = 0;
    while (k < SOAK_KINDS - 1 && r >= kind_weight[k])
        r -= kind_weight[k++];
    return (soak_kind_t)k;
}

/* True when the JSON text s has "key": followed by a non-empty string. */
static bool has_text(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    return p && p[strlen(key)] == '"' && p[strlen(key) + 1] != '"';
}

static void judge_line(client_t *c)
{
    c->line[c->line_len] = '\0';
    const char *l = c->line;
    if (strstr(l, "\"error\"")) {
        if (!c->error)
            snprintf(c->error_text, sizeof c->error_text, "%.119s", l);
        c->error = true;
    }
    if (strstr(l, "\"done\":true"))
        c->done = true;
    if (has_text(l, "\"response\":") || has_text(l, "\"content\":"))
        c->tokens++;
    if (strstr(l, "\"embeddings\":[["))
        c->vectors = true;
    if (strstr(l, "\"models\":["))
        c->models = true;
    c->line_len = 0;
}

static size_t on_write(char *p, size_t size, size_t n, void *ud)
{
    client_t *c = ud;
    size_t len = size * n;
    for (size_t i = 0; i < len; i++) {
        if (p[i] == '\n') {
            judge_line(c);
            continue;
        }
        if (c->line_len < LINE_MAX_BYTES - 1)
            c->line[c->line_len++] = p[i];
    }
    /* A disconnect leaves once it has a token. */
    if (c->kind == SOAK_DISCONNECT && c->tokens > 0) {
        c->dropped = true;
        return 0;
    }
    return len;
}

/* A slow reader's socket takes little, so the server's send blocks. */
static int small_rcvbuf(void *ud, curl_socket_t fd, curlsocktype purpose)
{
    CR_UNUSED(ud);
    if (purpose == CURLSOCKTYPE_IPCXN) {
        int v = SLOW_RCVBUF_BYTES;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
    }
    return CURL_SOCKOPT_OK;
}

static void begin(const soak_clients_cfg_t *cfg, CURLM *multi, client_t *c)
{
    c->kind = pick_kind(c);
    c->line_len = 0;
    c->tokens = 0;
    c->done = c->error = c->vectors = c->models = c->dropped = false;
    c->error_text[0] = '\0';
    curl_easy_reset(c->easy);
    const char *path = NULL;
    bool chat = rand_below(c, 2) == 0;
    int seed = rand_below(c, 1000);
    switch (c->kind) {
    case SOAK_STREAM:
    case SOAK_WHOLE:
    case SOAK_DISCONNECT:
    case SOAK_SLOW: {
        int n_predict = c->kind == SOAK_SLOW         ? 400
                        : c->kind == SOAK_DISCONNECT ? 200
                                                     : 8 + rand_below(c, 40);
        const char *stream = c->kind == SOAK_WHOLE ? "false" : "true";
        if (chat) {
            path = "/api/chat";
            snprintf(c->body, sizeof c->body,
                     "{\"model\":\"%s\",\"stream\":%s,\"messages\":["
                     "{\"role\":\"system\",\"content\":\"be brief\"},"
                     "{\"role\":\"user\",\"content\":\"count %d\"}],"
                     "\"options\":{\"num_predict\":%d,\"seed\":%d}}",
                     cfg->gen_model, stream, seed, n_predict, seed);
        } else {
            path = "/api/generate";
            snprintf(c->body, sizeof c->body,
                     "{\"model\":\"%s\",\"stream\":%s,\"prompt\":\"count %d\","
                     "\"options\":{\"num_predict\":%d,\"seed\":%d}}",
                     cfg->gen_model, stream, seed, n_predict, seed);
        }
        break;
    }
    case SOAK_EMBED:
        path = "/api/embed";
        snprintf(c->body, sizeof c->body,
                 "{\"model\":\"%s\",\"input\":[\"a short text %d\",\"another\"]}",
                 cfg->embed_model, seed);
        break;
    case SOAK_TAGS:
    case SOAK_KINDS:
        path = "/api/tags";
        c->body[0] = '\0';
        break;
    }
    char url[300];
    snprintf(url, sizeof url, "http://%s%s", cfg->host, path);
    curl_easy_setopt(c->easy, CURLOPT_URL, url);
    if (c->body[0]) {
        curl_easy_setopt(c->easy, CURLOPT_HTTPHEADER, c->hdr);
        curl_easy_setopt(c->easy, CURLOPT_POSTFIELDS, c->body);
    }
    curl_easy_setopt(c->easy, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c->easy, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->easy, CURLOPT_PRIVATE, c);
    curl_easy_setopt(c->easy, CURLOPT_TIMEOUT, cfg->timeout_s);
    curl_easy_setopt(c->easy, CURLOPT_NOSIGNAL, 1L);
    if (c->kind == SOAK_SLOW) {
        /* A fresh connection, so its small buffer is set before connect. */
        curl_easy_setopt(c->easy, CURLOPT_FRESH_CONNECT, 1L);
        curl_easy_setopt(c->easy, CURLOPT_FORBID_REUSE, 1L);
        curl_easy_setopt(c->easy, CURLOPT_SOCKOPTFUNCTION, small_rcvbuf);
        curl_easy_setopt(c->easy, CURLOPT_MAX_RECV_SPEED_LARGE,
                         (curl_off_t)SLOW_RECV_BYTES_PER_S);
    }
    curl_multi_add_handle(multi, c->easy);
    c->running = true;
    atomic_fetch_add(cfg->active, 1);
}

static void fail(soak_tally_t *t, const client_t *c, const char *fmt, ...)
    CR_PRINTF(3, 4);

static void fail(soak_tally_t *t, const client_t *c, const char *fmt, ...)
{
    t->failed[c->kind]++;
    if (t->n_failures >= SOAK_FAILURES_KEPT)
        return;
    char *d = t->failures[t->n_failures++];
    int n = snprintf(d, sizeof t->failures[0], "%s: ", soak_kind_names[c->kind]);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d + n, sizeof t->failures[0] - (size_t)n, fmt, ap);
    va_end(ap);
}

/* Judges a finished transfer; returns the pause before the next one. */
static int finish(soak_tally_t *t, client_t *c, CURLcode res)
{
    if (c->line_len)
        judge_line(c); /* a last line without '\n' */
    long status = 0;
    curl_easy_getinfo(c->easy, CURLINFO_RESPONSE_CODE, &status);
    t->tokens += c->tokens;
    if (status == 503) {
        t->busy[c->kind]++;
        return BUSY_BACKOFF_MS + rand_below(c, BUSY_BACKOFF_MS);
    }
    if (c->dropped && status == 200 && !c->error) {
        t->dropped[c->kind]++;
        return rand_below(c, THINK_MAX_MS);
    }
    /* A failure backs off as a 503 does: a server that went down is not
     * hammered by every client at once. */
    int pause = BUSY_BACKOFF_MS + rand_below(c, BUSY_BACKOFF_MS);
    if (res != CURLE_OK)
        fail(t, c, "status %ld, %s after %ld tokens", status, curl_easy_strerror(res),
             c->tokens);
    else if (status != 200)
        fail(t, c, "status %ld %s", status, c->error_text);
    else if (c->error)
        fail(t, c, "error in the answer after %ld tokens: %s", c->tokens, c->error_text);
    else if (c->kind == SOAK_EMBED ? !c->vectors
             : c->kind == SOAK_TAGS ? !c->models
                                    : !c->done)
        fail(t, c, "incomplete answer (done %d, %ld tokens)", c->done, c->tokens);
    else {
        t->ok[c->kind]++;
        if (c->kind != SOAK_EMBED && c->kind != SOAK_TAGS && !c->tokens)
            t->empty++;
        pause = rand_below(c, THINK_MAX_MS);
    }
    return pause;
}

int soak_clients_run(const soak_clients_cfg_t *cfg, soak_tally_t *out)
{
    memset(out, 0, sizeof *out);
    CURLM *multi = curl_multi_init();
    client_t *cl = calloc((size_t)cfg->clients, sizeof *cl);
    if (!multi || !cl) {
        curl_multi_cleanup(multi);
        free(cl);
        return -1;
    }
    curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, (long)cfg->clients * 2);
    double t0 = bench_now_s(), end = t0 + cfg->duration_s;
    int rc = 0;
    for (int i = 0; i < cfg->clients; i++) {
        client_t *c = &cl[i];
        c->easy = curl_easy_init();
        c->hdr = curl_slist_append(NULL, "Content-Type: application/json");
        if (!c->easy || !c->hdr) {
            rc = -1;
            goto out;
        }
        c->rng = 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);
        /* Clients start spread over the first second. */
        c->start_at = t0 + (double)i / cfg->clients;
    }
    int running = 0;
    for (;;) {
        double now = bench_now_s();
        bool starting = now < end;
        if (starting)
            for (int i = 0; i < cfg->clients; i++)
                if (!cl[i].running && cl[i].start_at <= now)
                    begin(cfg, multi, &cl[i]);
        curl_multi_perform(multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            client_t *c = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&c);
            CURLcode res = m->data.result;
            curl_multi_remove_handle(multi, m->easy_handle);
            c->running = false;
            atomic_fetch_sub(cfg->active, 1);
            c->start_at = bench_now_s() + finish(out, c, res) / 1000.0;
        }
        if (!starting && atomic_load(cfg->active) == 0)
            break;
        if (!starting && now > end + cfg->drain_s) {
            out->unfinished = atomic_load(cfg->active);
            break;
        }
        curl_multi_poll(multi, NULL, 0, 10, NULL);
    }
out:
    for (int i = 0; i < cfg->clients; i++) {
        if (cl[i].running) {
            curl_multi_remove_handle(multi, cl[i].easy);
            atomic_fetch_sub(cfg->active, 1);
        }
        curl_easy_cleanup(cl[i].easy);
        curl_slist_free_all(cl[i].hdr);
    }
    free(cl);
    curl_multi_cleanup(multi);
    return rc;
}
