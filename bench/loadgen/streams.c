/* streams.c: concurrent streaming requests on one libcurl multi loop.
 *
 * Framing: corral's /api/generate streams one NDJSON line per piece of
 * text, llama-server's /completion one SSE event ("data: {json}") per
 * token. Either can hold back a token (an incomplete UTF-8 character, a
 * possible stop string) and send it with the next, so a "token event" here
 * is a line or event with non-empty text; the counts of generated tokens
 * come from the final line/event (eval_count, tokens_predicted). With
 * ASCII answers and no stop strings both send one token per event. */
#include "lib/prelude.h"
#include "bench/loadgen/loadgen.h"
#include "bench/stats.h"

#include <curl/curl.h>
#include <jansson.h>

#define LINE_MAX_BYTES (256 * 1024)

typedef struct stream {
    lg_req_t *r;
    CURL *easy;
    struct curl_slist *hdr;
    char *body;
    bool started, finished;
    char *line;
    size_t line_len;
    bool overflow;
} stream_t;

static long jlong(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? (long)json_integer_value(v) : -1;
}

static void set_error(lg_req_t *r, const char *msg)
{
    if (!r->error[0])
        snprintf(r->error, sizeof r->error, "%s", msg);
}

static void on_text(lg_req_t *r, const char *text)
{
    if (!text || !*text)
        return;
    double now = bench_now_s();
    if (r->n_events == 0)
        r->t_first = now;
    if (r->n_events < LG_MAX_EVENTS)
        r->t_event[r->n_events] = now;
    r->n_events++;
}

static void judge_corral(lg_req_t *r, json_t *o)
{
    json_t *err = json_object_get(o, "error");
    if (err) {
        set_error(r, json_is_string(err) ? json_string_value(err) : "error");
        return;
    }
    if (json_is_true(json_object_get(o, "done"))) {
        r->done = true;
        r->eval_count = jlong(o, "eval_count");
        r->prompt_count = jlong(o, "prompt_eval_count");
        long c = jlong(o, "prompt_eval_cached_count");
        r->cached_count = c < 0 ? 0 : c; /* absent: none */
        return;
    }
    on_text(r, json_string_value(json_object_get(o, "response")));
}

static void judge_llama(lg_req_t *r, json_t *o)
{
    json_t *err = json_object_get(o, "error");
    if (err) {
        json_t *m = json_object_get(err, "message");
        set_error(r, json_is_string(m) ? json_string_value(m) : "error");
        return;
    }
    if (json_is_true(json_object_get(o, "stop"))) {
        r->done = true;
        r->eval_count = jlong(o, "tokens_predicted");
        r->prompt_count = jlong(o, "tokens_evaluated");
        json_t *tm = json_object_get(o, "timings");
        r->cached_count = tm ? jlong(tm, "cache_n") : -1;
        /* a final event may carry text too */
    }
    on_text(r, json_string_value(json_object_get(o, "content")));
}

static void judge_line(stream_t *s)
{
    s->line[s->line_len] = '\0';
    const char *l = s->line;
    if (s->r->target->kind == LG_LLAMA) {
        if (strncmp(l, "data: ", 6))
            return; /* blank separators, comments */
        l += 6;
    }
    if (!*l)
        return;
    json_t *o = json_loads(l, 0, NULL);
    if (!o) {
        set_error(s->r, "unreadable line");
        return;
    }
    if (s->r->target->kind == LG_CORRAL)
        judge_corral(s->r, o);
    else
        judge_llama(s->r, o);
    json_decref(o);
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *ctx)
{
    stream_t *s = ctx;
    size_t n = size * nmemb;
    for (size_t i = 0; i < n; i++) {
        if (data[i] == '\n') {
            if (!s->overflow)
                judge_line(s);
            s->line_len = 0;
            s->overflow = false;
        } else if (s->line_len + 1 < LINE_MAX_BYTES) {
            s->line[s->line_len++] = data[i];
        } else {
            s->overflow = true;
            set_error(s->r, "line too long");
        }
    }
    return n;
}

static char *request_body(const lg_req_t *r)
{
    json_t *o;
    if (r->target->kind == LG_CORRAL)
        o = json_pack("{s:s,s:s,s:b,s:b,s:{s:i,s:b,s:i}}", "model", r->target->model,
                      "prompt", r->prompt, "raw", 1, "stream", 1, "options", "num_predict",
                      r->num_predict, "ignore_eos", 1, "temperature", 0);
    else
        o = json_pack("{s:s,s:i,s:b,s:b,s:i}", "prompt", r->prompt, "n_predict",
                      r->num_predict, "ignore_eos", 1, "stream", 1, "temperature", 0);
    char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return text;
}

static bool stream_open(stream_t *s, CURLM *multi)
{
    lg_req_t *r = s->r;
    char url[300];
    snprintf(url, sizeof url, "http://%s%s", r->target->host,
             r->target->kind == LG_CORRAL ? "/api/generate" : "/completion");
    if (!(s->body = request_body(r)) || !(s->easy = curl_easy_init())) {
        set_error(r, "out of memory");
        return false;
    }
    s->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(s->easy, CURLOPT_URL, url);
    curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, s->hdr);
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, s->body);
    curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(s->easy, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
    curl_easy_setopt(s->easy, CURLOPT_TCP_NODELAY, 1L);
    r->t_send = bench_now_s();
    s->started = true;
    return curl_multi_add_handle(multi, s->easy) == CURLM_OK;
}

/* True when every request before i has had `need` token events (or ended). */
static bool may_start(const stream_t *st, int i)
{
    int need = st[i].r->start_after_tokens;
    for (int k = 0; k < i; k++)
        if (!st[k].finished && st[k].r->n_events < need)
            return false;
    return true;
}

bool lg_streams_run(lg_req_t *reqs, int n)
{
    if (n < 1 || n > LG_MAX_STREAMS)
        return false;
    stream_t st[LG_MAX_STREAMS];
    memset(st, 0, sizeof st);
    CURLM *multi = curl_multi_init();
    bool ok = multi != NULL;
    for (int i = 0; i < n && ok; i++) {
        lg_req_t *r = &reqs[i];
        r->n_events = 0;
        r->t_send = r->t_first = r->t_end = 0;
        r->eval_count = r->prompt_count = r->cached_count = -1;
        r->done = false;
        r->error[0] = '\0';
        st[i].r = r;
        if (!(st[i].line = malloc(LINE_MAX_BYTES)))
            ok = false;
    }
    int finished = 0;
    while (ok && finished < n) {
        for (int i = 0; i < n && ok; i++)
            if (!st[i].started && may_start(st, i) && !stream_open(&st[i], multi))
                ok = false;
        int running = 0;
        curl_multi_perform(multi, &running);
        CURLMsg *m;
        int left;
        while ((m = curl_multi_info_read(multi, &left))) {
            if (m->msg != CURLMSG_DONE)
                continue;
            stream_t *s = NULL;
            curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            long code = 0;
            curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            s->r->t_end = bench_now_s();
            if (m->data.result != CURLE_OK)
                set_error(s->r, curl_easy_strerror(m->data.result));
            else if (code != 200) {
                char msg[64];
                snprintf(msg, sizeof msg, "HTTP %ld", code);
                set_error(s->r, msg);
            } else if (!s->r->done)
                set_error(s->r, "the answer ended without its final line");
            s->finished = true;
            finished++;
        }
        if (finished < n)
            curl_multi_poll(multi, NULL, 0, 5, NULL);
    }
    for (int i = 0; i < n; i++) {
        if (st[i].easy) {
            curl_multi_remove_handle(multi, st[i].easy);
            curl_easy_cleanup(st[i].easy);
        }
        curl_slist_free_all(st[i].hdr);
        free(st[i].body);
        free(st[i].line);
    }
    if (multi)
        curl_multi_cleanup(multi);
    return ok;
}
