/* test_gateway_http.c: the gateway end to end, in-process, over real HTTP.
 *
 * The gateway listens on a private 127.0.0.1 port with CORRAL_RUNTIME_DIR
 * a temp dir; FAKE scheduler and registry threads bind ROUTERs at the bus
 * endpoints and answer scripted replies chosen by the model name or the
 * message type. libcurl drives it: streaming and stream:false shapes,
 * metrics omitted when zero, error mapping, validation, 404/405/413,
 * CORS and the Host check, blob pieces reassembled in order, a client that
 * disconnects mid-stream causing a cancel, dead and silent peers giving a
 * timely error, and the server staying up after every bad request. */
#include "lib/prelude.h"
#include "lib/buf.h"
#include "proto/bus.h"
#include "services/gateway/server.h"
#include "tests/unit/check.h"

#include <curl/curl.h>
#include <jansson.h>
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* ================= fake bus peers ================= */

typedef struct fake fake_t;
typedef void (*fake_fn)(fake_t *f, zframe_t *who, const msg_t *m);

struct fake {
    char ep[BUS_ENDPOINT_MAX];
    fake_fn fn;
    pthread_t th;
    atomic_bool stop, ready, die, ignore_ping, silent;
    zsock_t *sock; /* the fake thread's own */
    pthread_mutex_t mu;
    /* what arrived (under mu) */
    msg_t last;        /* last request other than ping/cancel */
    int n_requests, n_cancels, n_pings;
    char cancel_id[MSG_ID_MAX + 1];
    char last_id[MSG_ID_MAX + 1];
    cr_buf_t blob;     /* blob_put data, in arrival order */
    int64_t offsets[64];
    bool lasts[64];
    int n_pieces;
};

static void fake_reply(fake_t *f, zframe_t *who, msg_t *m)
{
    cr_err_t err;
    if (bus_send_to(f->sock, who, m, &err))
        fprintf(stderr, "fake: send failed: %s\n", err.msg);
}

/* Records a ping or cancel (answering pings); true if it was a cancel. */
static bool fake_note(fake_t *f, zframe_t *who, const msg_t *m)
{
    if (m->type == MSG_ping) {
        pthread_mutex_lock(&f->mu);
        f->n_pings++;
        pthread_mutex_unlock(&f->mu);
        if (!atomic_load(&f->ignore_ping)) {
            msg_t pong;
            msg_init(&pong, MSG_pong, m->id);
            fake_reply(f, who, &pong);
        }
        return false;
    }
    if (m->type == MSG_cancel) {
        pthread_mutex_lock(&f->mu);
        f->n_cancels++;
        snprintf(f->cancel_id, sizeof f->cancel_id, "%s", m->id);
        pthread_mutex_unlock(&f->mu);
        return true;
    }
    return false;
}

/* Reads what arrives for up to ms; true once a cancel came. */
static bool fake_wait_cancel(fake_t *f, int ms)
{
    int64_t end = now_ms() + ms;
    while (now_ms() < end) {
        msg_t m;
        zframe_t *who = NULL;
        cr_err_t err;
        if (bus_recv(f->sock, 20, &m, &who, &err) == CR_OK) {
            bool c = fake_note(f, who, &m);
            msg_clear(&m);
            zframe_destroy(&who);
            if (c)
                return true;
        }
    }
    return false;
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    f->sock = zsock_new(ZMQ_ROUTER);
    zsock_set_linger(f->sock, 0);
    if (zsock_bind(f->sock, "%s", f->ep) != 0)
        fprintf(stderr, "fake: cannot bind %s\n", f->ep);
    atomic_store(&f->ready, true);
    while (!atomic_load(&f->stop)) {
        if (atomic_load(&f->die)) {
            zsock_destroy(&f->sock);
            sleep_ms(20);
            continue;
        }
        msg_t m;
        zframe_t *who = NULL;
        cr_err_t err;
        if (bus_recv(f->sock, 20, &m, &who, &err) != CR_OK)
            continue;
        if (m.type == MSG_ping || m.type == MSG_cancel) {
            fake_note(f, who, &m);
        } else {
            pthread_mutex_lock(&f->mu);
            msg_clear(&f->last);
            msg_copy(&m, &f->last);
            f->n_requests++;
            snprintf(f->last_id, sizeof f->last_id, "%s", m.id);
            pthread_mutex_unlock(&f->mu);
            if (!atomic_load(&f->silent))
                f->fn(f, who, &m);
        }
        msg_clear(&m);
        zframe_destroy(&who);
    }
    zsock_destroy(&f->sock);
    return NULL;
}

static fake_t *fake_start(const char *name, fake_fn fn)
{
    fake_t *f = calloc(1, sizeof *f);
    cr_err_t err;
    if (bus_endpoint(name, f->ep, sizeof f->ep, &err)) {
        fprintf(stderr, "fake: %s\n", err.msg);
        abort();
    }
    f->fn = fn;
    pthread_mutex_init(&f->mu, NULL);
    cr_buf_init(&f->blob, 64u << 20);
    pthread_create(&f->th, NULL, fake_main, f);
    while (!atomic_load(&f->ready))
        sleep_ms(1);
    return f;
}

static void fake_stop(fake_t **fp)
{
    fake_t *f = *fp;
    if (!f)
        return;
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    msg_clear(&f->last);
    cr_buf_free(&f->blob);
    pthread_mutex_destroy(&f->mu);
    free(f);
    *fp = NULL;
}

/* True while something accepts connections on the ipc:// endpoint ep. */
static bool ipc_listening(const char *ep)
{
    if (strncmp(ep, "ipc://", 6) != 0)
        return false;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", ep + 6);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0)
        return false;
    bool up = connect(fd, (struct sockaddr *)&a, sizeof a) == 0 || errno == EAGAIN;
    close(fd);
    return up;
}

/* Stops the fake and waits (up to 10 s) until nobody listens on its
 * endpoint: ZeroMQ closes a socket's listener in its I/O thread, after
 * zsock_destroy returns, and a connect in between is accepted and then
 * dropped. */
static void fake_stop_unbound(fake_t **fp)
{
    char ep[BUS_ENDPOINT_MAX];
    snprintf(ep, sizeof ep, "%s", (*fp)->ep);
    fake_stop(fp);
    for (int i = 0; i < 1000 && ipc_listening(ep); i++)
        sleep_ms(10);
    CHECK_MSG(!ipc_listening(ep), "%s still accepts connections", ep);
}

static int fake_cancels(fake_t *f)
{
    pthread_mutex_lock(&f->mu);
    int n = f->n_cancels;
    pthread_mutex_unlock(&f->mu);
    return n;
}

/* A point a client waits for before it goes away: the fake has received
 * at least `requests` requests and answered at least `pings` pings, in
 * all (counted from fake_mark_now). */
typedef struct fake_mark {
    fake_t *f;
    int requests, pings;
} fake_mark_t;

static fake_mark_t fake_mark_now(fake_t *f, int more_requests, int more_pings)
{
    pthread_mutex_lock(&f->mu);
    fake_mark_t m = {f, f->n_requests + more_requests, f->n_pings + more_pings};
    pthread_mutex_unlock(&f->mu);
    return m;
}

static bool fake_reached(void *arg)
{
    const fake_mark_t *m = arg;
    pthread_mutex_lock(&m->f->mu);
    bool r = m->f->n_requests >= m->requests && m->f->n_pings >= m->pings;
    pthread_mutex_unlock(&m->f->mu);
    return r;
}

/* Waits up to ms for the fake to reach m. */
static bool fake_wait_mark(fake_mark_t *m, int ms)
{
    int64_t end = now_ms() + ms;
    while (!fake_reached(m) && now_ms() < end)
        sleep_ms(10);
    return fake_reached(m);
}

/* Waits up to ms for a cancel to be recorded. */
static bool fake_saw_cancel(fake_t *f, int before, int ms)
{
    int64_t end = now_ms() + ms;
    while (now_ms() < end) {
        if (fake_cancels(f) > before)
            return true;
        sleep_ms(10);
    }
    return false;
}

/* ---- scripts ---- */

static const char *req_model(const msg_t *m)
{
    switch (m->type) {
    case MSG_generate: return m->u.generate.model;
    case MSG_chat: return m->u.chat.model;
    case MSG_embed: return m->u.embed.model;
    default: return "";
    }
}

static void send_chunk(fake_t *f, zframe_t *who, const char *id,
                       const char *response, const char *thinking,
                       const char *tools, const char *logprobs)
{
    msg_t c;
    msg_init(&c, MSG_chunk, id);
    if (response) {
        c.u.chunk.response = (char *)response;
        c.u.chunk.has_response = true;
    }
    if (thinking) {
        c.u.chunk.thinking = (char *)thinking;
        c.u.chunk.has_thinking = true;
    }
    if (tools) {
        c.u.chunk.tool_calls = (char *)tools;
        c.u.chunk.has_tool_calls = true;
    }
    if (logprobs) {
        c.u.chunk.logprobs = (char *)logprobs;
        c.u.chunk.has_logprobs = true;
    }
    fake_reply(f, who, &c);
}

static void send_done(fake_t *f, zframe_t *who, const char *id,
                      const char *reason, bool metrics)
{
    static int32_t ctx[] = {1, 2, 3};
    msg_t d;
    msg_init(&d, MSG_done, id);
    d.u.done.done_reason = (char *)reason;
    d.u.done.has_done_reason = true;
    if (metrics) {
        d.u.done.context.v = ctx;
        d.u.done.context.n = 3;
        d.u.done.has_context = true;
        d.u.done.total_duration = 1000;
        d.u.done.has_total_duration = true;
        d.u.done.load_duration = 0; /* zero: must be omitted */
        d.u.done.has_load_duration = true;
        d.u.done.prompt_eval_count = 5;
        d.u.done.has_prompt_eval_count = true;
        d.u.done.eval_count = 2;
        d.u.done.has_eval_count = true;
        d.u.done.eval_duration = 50;
        d.u.done.has_eval_duration = true;
    }
    fake_reply(f, who, &d);
}

static void send_error(fake_t *f, zframe_t *who, const char *id,
                       cr_status_t st, const char *text)
{
    msg_t e;
    msg_make_error(&e, id, st, "%s", text);
    fake_reply(f, who, &e);
    msg_clear(&e);
}

static void scheduler_fn(fake_t *f, zframe_t *who, const msg_t *m)
{
    const char *id = m->id;
    if (m->type == MSG_ps) {
        msg_loaded_model_t lm = {.name = "llama3:latest", .has_name = true,
                                 .size = 100, .has_size = true,
                                 .size_vram = 60, .has_size_vram = true,
                                 .expires_at = "2030-01-01T00:00:00Z",
                                 .has_expires_at = true,
                                 .context_length = 4096,
                                 .has_context_length = true};
        msg_t r;
        msg_init(&r, MSG_ps_reply, id);
        r.u.ps_reply.models.v = &lm;
        r.u.ps_reply.models.n = 1;
        r.u.ps_reply.has_models = true;
        fake_reply(f, who, &r);
        return;
    }
    const char *model = req_model(m);
    if (m->type == MSG_embed) {
        float v[6] = {0.5f, -0.25f, 0.1f, 1, 0, -1};
        msg_t r;
        msg_init(&r, MSG_embeddings, id);
        size_t n = m->u.embed.input.n;
        r.u.embeddings.n_inputs = (int64_t)n;
        r.u.embeddings.has_n_inputs = true;
        r.u.embeddings.dims = n ? 3 : 0;
        r.u.embeddings.has_dims = true;
        r.u.embeddings.data.data = (uint8_t *)v;
        r.u.embeddings.data.len = n * 3 * sizeof(float);
        r.u.embeddings.has_data = true;
        r.u.embeddings.prompt_eval_count = 4;
        r.u.embeddings.has_prompt_eval_count = true;
        r.u.embeddings.total_duration = 9;
        r.u.embeddings.has_total_duration = true;
        if (!strcmp(model, "emb-bad"))
            r.u.embeddings.dims = 5; /* data does not match the shape */
        if (!strcmp(model, "emb-missing"))
            send_error(f, who, id, CR_E_NOT_FOUND,
                       "model \"emb-missing\" not found, try pulling it first");
        else
            fake_reply(f, who, &r);
        return;
    }
    if (!strcmp(model, "ok")) {
        send_chunk(f, who, id, "Hel", NULL, NULL, NULL);
        send_chunk(f, who, id, "lo", NULL, NULL, NULL);
        send_done(f, who, id, "stop", true);
    } else if (!strcmp(model, "think")) {
        msg_t p; /* load progress: a status line when streaming */
        msg_init(&p, MSG_progress, id);
        p.u.progress.status = "loading model";
        p.u.progress.has_status = true;
        fake_reply(f, who, &p);
        send_chunk(f, who, id, "", "hm", NULL, "[{\"token\":\"a\",\"logprob\":-0.5}]");
        send_chunk(f, who, id, "A", "m", NULL, "[{\"token\":\"b\",\"logprob\":-1}]");
        send_chunk(f, who, id, "",
                   NULL, "[{\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1}}}]",
                   NULL);
        send_chunk(f, who, id, "", NULL, "not json", NULL);
        send_done(f, who, id, "stop", false);
    } else if (!strcmp(model, "load")) {
        send_done(f, who, id, "load", false);
    } else if (!strcmp(model, "missing")) {
        send_error(f, who, id, CR_E_NOT_FOUND,
                   "model \"missing\" not found, try pulling it first");
    } else if (!strcmp(model, "busy")) {
        send_error(f, who, id, CR_E_BUSY,
                   "server busy, please try again.  maximum pending requests "
                   "exceeded");
    } else if (!strcmp(model, "midfail")) {
        send_chunk(f, who, id, "a", NULL, NULL, NULL);
        send_error(f, who, id, CR_E_RUNNER, "model runner has unexpectedly "
                                            "stopped");
    } else if (!strcmp(model, "slow")) {
        for (int i = 0; i < 200; i++) {
            send_chunk(f, who, id, "tok ", NULL, NULL, NULL);
            if (fake_wait_cancel(f, 50))
                return;
        }
        send_done(f, who, id, "stop", false);
    } else if (!strcmp(model, "die")) {
        atomic_store(&f->die, true);
    } else if (!strcmp(model, "stray")) {
        msg_t c;
        msg_init(&c, MSG_chunk, "someone-else");
        c.u.chunk.response = "WRONG";
        c.u.chunk.has_response = true;
        fake_reply(f, who, &c);
        send_chunk(f, who, id, "right", NULL, NULL, NULL);
        send_done(f, who, id, "stop", false);
    } else if (!strcmp(model, "weird")) {
        msg_t r;
        msg_init(&r, MSG_tags_reply, id);
        fake_reply(f, who, &r);
    } else if (!strcmp(model, "silent")) {
        /* answers pings, never the request */
    } else if (!strcmp(model, "mute")) {
        atomic_store(&f->ignore_ping, true);
    }
}

#define DIGEST_EXISTS                                                       \
    "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define DIGEST_MISMATCH                                                     \
    "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define DIGEST_NEW                                                          \
    "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"

static void registry_fn(fake_t *f, zframe_t *who, const msg_t *m)
{
    const char *id = m->id;
    msg_t r;
    switch (m->type) {
    case MSG_tags: {
        msg_model_entry_t e = {.name = "llama3:latest", .has_name = true,
                               .modified_at = "2024-05-01T10:00:00Z",
                               .has_modified_at = true, .size = 42,
                               .has_size = true, .digest = "abc",
                               .has_digest = true};
        msg_init(&r, MSG_tags_reply, id);
        r.u.tags_reply.models.v = &e;
        r.u.tags_reply.models.n = 1;
        r.u.tags_reply.has_models = true;
        fake_reply(f, who, &r);
        return;
    }
    case MSG_show:
        if (!strcmp(m->u.show.model, "missing")) {
            send_error(f, who, id, CR_E_NOT_FOUND, "model 'missing' not found");
            return;
        }
        msg_init(&r, MSG_show_reply, id);
        r.u.show_reply.body = "{\"modelfile\":\"# x\",\"template\":\"{{ .Prompt }}\","
                              "\"model_info\":{}}";
        r.u.show_reply.has_body = true;
        fake_reply(f, who, &r);
        return;
    case MSG_copy:
    case MSG_delete: {
        const char *name = m->type == MSG_copy ? m->u.copy.source
                                               : m->u.delete.model;
        if (!strcmp(name, "missing")) {
            send_error(f, who, id, CR_E_NOT_FOUND, "model \"missing\" not found");
            return;
        }
        msg_init(&r, MSG_ok, id);
        fake_reply(f, who, &r);
        return;
    }
    case MSG_create: {
        const char *steps[] = {"parsing GGUF", "writing manifest", "success"};
        size_t n = !strcmp(m->u.create.model, "nosuccess") ? 1 : 3;
        for (size_t i = 0; i < n; i++) {
            msg_init(&r, MSG_progress, id);
            r.u.progress.status = (char *)steps[i];
            r.u.progress.has_status = true;
            if (i == 0) {
                r.u.progress.total = 10;
                r.u.progress.has_total = true;
            }
            fake_reply(f, who, &r);
        }
        if (!strcmp(m->u.create.model, "fails")) {
            send_error(f, who, id, CR_E_INVALID, "unsupported GGUF version 9");
            return;
        }
        msg_init(&r, MSG_ok, id);
        fake_reply(f, who, &r);
        return;
    }
    case MSG_pull:
    case MSG_push: {
        const char *model = m->type == MSG_pull ? m->u.pull.model : m->u.push.model;
        bool insecure = m->type == MSG_pull ? m->u.pull.insecure : m->u.push.insecure;
        if (!strcmp(model, "missing")) {
            send_error(f, who, id, CR_E_NOT_FOUND,
                       "pull model manifest: file does not exist");
            return;
        }
        msg_init(&r, MSG_progress, id);
        r.u.progress.status = insecure ? "insecure" : "pulling manifest";
        r.u.progress.has_status = true;
        fake_reply(f, who, &r);
        msg_init(&r, MSG_progress, id);
        r.u.progress.status = "pulling 0123456789ab";
        r.u.progress.has_status = true;
        r.u.progress.digest = "sha256:0123456789ab";
        r.u.progress.has_digest = true;
        r.u.progress.total = 100;
        r.u.progress.has_total = true;
        r.u.progress.completed = 40;
        r.u.progress.has_completed = true;
        fake_reply(f, who, &r);
        msg_init(&r, MSG_ok, id);
        fake_reply(f, who, &r);
        return;
    }
    case MSG_blob_head:
        if (!strcmp(m->u.blob_head.digest, DIGEST_EXISTS)) {
            msg_init(&r, MSG_ok, id);
            fake_reply(f, who, &r);
        } else {
            send_error(f, who, id, CR_E_NOT_FOUND, "blob not found");
        }
        return;
    case MSG_blob_put: {
        const msg_blob_put_body_t *p = &m->u.blob_put;
        pthread_mutex_lock(&f->mu);
        if (f->n_pieces < 64) {
            f->offsets[f->n_pieces] = p->offset;
            f->lasts[f->n_pieces] = p->has_last && p->last;
            f->n_pieces++;
        }
        if (p->has_data)
            cr_buf_append(&f->blob, p->data.data, p->data.len);
        pthread_mutex_unlock(&f->mu);
        if (p->last && !strcmp(p->digest, DIGEST_MISMATCH)) {
            send_error(f, who, id, CR_E_INVALID,
                       "digest mismatch, expected \"" DIGEST_MISMATCH
                       "\", got \"sha256:1234\"");
            return;
        }
        msg_init(&r, MSG_ok, id);
        if (p->last) {
            r.u.ok.created = true;
            r.u.ok.has_created = true;
        }
        fake_reply(f, who, &r);
        return;
    }
    default:
        send_error(f, who, id, CR_E_PROTO, "unexpected");
    }
}

/* ================= HTTP client ================= */

typedef struct resp {
    long status;
    cr_buf_t body;
    cr_buf_t headers;
    char ctype[128];
    double secs;
    CURLcode rc;
    long connects; /* new connections this transfer opened */
} resp_t;

static size_t on_write(char *p, size_t sz, size_t n, void *ud)
{
    cr_buf_append(ud, p, sz * n);
    return sz * n;
}

static int port_g;
static CURL *curl_g; /* shared: keep-alive across requests */

typedef struct req_opts {
    const char *const *headers; /* NULL-terminated */
    long timeout_ms;
    bool fresh; /* a new handle (no reuse) */
    /* The client goes away (CURLE_ABORTED_BY_CALLBACK) once this holds:
     * polled by curl's progress callback while the transfer waits (at
     * least once a second). */
    bool (*leave_when)(void *arg);
    void *leave_arg;
} req_opts_t;

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow,
                       curl_off_t ultotal, curl_off_t ulnow)
{
    CR_UNUSED(dltotal);
    CR_UNUSED(dlnow);
    CR_UNUSED(ultotal);
    CR_UNUSED(ulnow);
    const req_opts_t *o = ud;
    return o->leave_when(o->leave_arg) ? 1 : 0;
}

static void resp_free(resp_t *r)
{
    cr_buf_free(&r->body);
    cr_buf_free(&r->headers);
}

static long http_ex(resp_t *r, const char *method, const char *path,
                    const char *body, size_t len, const req_opts_t *o)
{
    memset(r, 0, sizeof *r);
    cr_buf_init(&r->body, 256u << 20);
    cr_buf_init(&r->headers, 1 << 20);
    CURL *c = o && o->fresh ? curl_easy_init() : curl_g;
    curl_easy_reset(c);
    char url[1200];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port_g, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r->body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r->headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, o && o->timeout_ms ? o->timeout_ms
                                                               : 15000L);
    if (!strcmp(method, "HEAD"))
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    else if (strcmp(method, "GET") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    struct curl_slist *hl = NULL;
    for (const char *const *h = o ? o->headers : NULL; h && *h; h++)
        hl = curl_slist_append(hl, *h);
    if (hl)
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    if (o && o->leave_when) {
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, o);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    }
    int64_t t0 = now_ms();
    r->rc = curl_easy_perform(c);
    r->secs = (double)(now_ms() - t0) / 1000.0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->status);
    curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &r->connects);
    char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    snprintf(r->ctype, sizeof r->ctype, "%s", ct ? ct : "");
    curl_slist_free_all(hl);
    if (c != curl_g)
        curl_easy_cleanup(c);
    if (!r->body.data)
        cr_buf_puts(&r->body, "");
    if (!r->headers.data)
        cr_buf_puts(&r->headers, "");
    return r->status;
}

static long http(resp_t *r, const char *method, const char *path,
                 const char *body)
{
    return http_ex(r, method, path, body, body ? strlen(body) : 0, NULL);
}

/* The "error" of a JSON body, or "" (static buffer). */
static const char *error_of(const char *body)
{
    static char out[1024];
    out[0] = '\0';
    json_t *j = json_loads(body, 0, NULL);
    const char *e = json_string_value(json_object_get(j, "error"));
    snprintf(out, sizeof out, "%s", e ? e : "");
    json_decref(j);
    return out;
}

/* Posts body to path; expects status and the error text. */
static void expect_error(const char *path, const char *body, long status,
                         const char *text)
{
    resp_t r;
    http(&r, "POST", path, body);
    CHECK_MSG(r.status == status, "%s %s: status %ld, want %ld (%s)", path,
              body, r.status, status, r.body.data);
    CHECK_EQ_STR(error_of(r.body.data), text);
    CHECK_EQ_STR(r.ctype, "application/json; charset=utf-8");
    resp_free(&r);
}

/* Splits an NDJSON body into parsed lines (max n). Returns the count. */
static size_t ndjson(const char *body, json_t **lines, size_t max)
{
    size_t n = 0;
    const char *p = body;
    while (*p && n < max) {
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        lines[n++] = json_loadb(p, (size_t)(nl - p), 0, NULL);
        p = nl + 1;
    }
    CHECK_MSG(*p == '\0', "trailing bytes after the last newline: %s", p);
    return n;
}

static void free_lines(json_t **lines, size_t n)
{
    for (size_t i = 0; i < n; i++)
        json_decref(lines[i]);
}

static const char *jstr(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "(absent)";
}

static bool has(json_t *o, const char *key)
{
    return json_object_get(o, key) != NULL;
}

static const char *header_value(resp_t *r, const char *name, char *out,
                                size_t cap)
{
    out[0] = '\0';
    size_t n = strlen(name);
    for (const char *p = r->headers.data; p && *p;) {
        const char *eol = strstr(p, "\r\n");
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (len > n + 1 && !strncasecmp(p, name, n) && p[n] == ':') {
            const char *v = p + n + 1;
            while (*v == ' ')
                v++;
            snprintf(out, cap, "%.*s", (int)(len - (size_t)(v - p)), v);
            return out;
        }
        p = eol ? eol + 2 : p + len;
    }
    return out;
}

/* ================= tests ================= */

static fake_t *sched_g, *reg_g;

static void test_basics(void)
{
    resp_t r;
    CHECK_EQ_INT(http(&r, "GET", "/", NULL), 200);
    CHECK_EQ_STR(r.body.data, "Ollama is running");
    CHECK_EQ_STR(r.ctype, "text/plain; charset=utf-8");
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "HEAD", "/", NULL), 200);
    CHECK_EQ_STR(r.body.data, "");
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "GET", "/api/version", NULL), 200);
    CHECK_EQ_STR(r.body.data, "{\"version\":\"" CR_OLLAMA_COMPAT_VERSION
                                  "\",\"corral_version\":\"" CORRAL_VERSION "\"}");
    CHECK_EQ_STR(r.ctype, "application/json; charset=utf-8");
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "HEAD", "/api/version", NULL), 200);
    resp_free(&r);
    /* keep-alive: the next request reuses the connection */
    CHECK_EQ_INT(http(&r, "GET", "/api/version", NULL), 200);
    CHECK_EQ_INT(r.connects, 0);
    resp_free(&r);

    CHECK_EQ_INT(http(&r, "GET", "/nope", NULL), 404);
    CHECK_EQ_STR(r.body.data, "404 page not found");
    CHECK_EQ_STR(r.ctype, "text/plain; charset=utf-8");
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "GET", "/api/blobs/", NULL), 404);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "POST", "/api/blobs/a/b", "x"), 404);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "GET", "/api/generate", NULL), 405);
    CHECK_EQ_STR(r.body.data, "405 method not allowed");
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "POST", "/api/tags", "{}"), 405);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "DELETE", "/api/show", "{}"), 405);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "POST", "/api/delete", "{}"), 405);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "PUT", "/api/chat", "{}"), 405);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "GET", "/api/blobs/" DIGEST_NEW, NULL), 405);
    resp_free(&r);
    /* still alive and still keeping connections */
    CHECK_EQ_INT(http(&r, "GET", "/", NULL), 200);
    resp_free(&r);

    expect_error("/api/pull", "{}", 400, "invalid model name");
    expect_error("/api/push", "{}", 400, "model is required");
}

static void test_generate_stream(void)
{
    resp_t r;
    CHECK_EQ_INT(http(&r, "POST", "/api/generate",
                      "{\"model\":\"ok\",\"prompt\":\"hi\"}"),
                 200);
    CHECK_EQ_STR(r.ctype, "application/x-ndjson");
    json_t *l[16];
    size_t n = ndjson(r.body.data, l, 16);
    CHECK_EQ_INT(n, 3);
    if (n == 3) {
        CHECK_EQ_STR(jstr(l[0], "model"), "ok");
        CHECK_EQ_STR(jstr(l[0], "response"), "Hel");
        CHECK(json_is_false(json_object_get(l[0], "done")));
        CHECK_EQ_INT(json_object_size(l[0]), 4); /* model created_at response done */
        CHECK_EQ_STR(jstr(l[1], "response"), "lo");
        const char *ca = jstr(l[0], "created_at");
        CHECK(strlen(ca) >= 20 && ca[strlen(ca) - 1] == 'Z');
        CHECK_EQ_STR(jstr(l[2], "response"), "");
        CHECK(json_is_true(json_object_get(l[2], "done")));
        CHECK_EQ_STR(jstr(l[2], "done_reason"), "stop");
        CHECK_EQ_INT(json_array_size(json_object_get(l[2], "context")), 3);
        CHECK_EQ_INT(json_integer_value(json_object_get(l[2], "total_duration")),
                     1000);
        CHECK(!has(l[2], "load_duration"));        /* zero: omitted */
        CHECK(!has(l[2], "prompt_eval_duration")); /* absent: omitted */
        CHECK_EQ_INT(json_integer_value(json_object_get(l[2], "prompt_eval_count")),
                     5);
        CHECK_EQ_INT(json_integer_value(json_object_get(l[2], "eval_count")), 2);
        CHECK_EQ_INT(json_integer_value(json_object_get(l[2], "eval_duration")),
                     50);
    }
    free_lines(l, n);
    resp_free(&r);

    /* What the scheduler got. */
    http(&r, "POST", "/api/generate",
         "{\"model\":\"ok\",\"prompt\":\"p\",\"options\":{\"temperature\":1,"
         "\"num_predict\":7.9},\"keep_alive\":\"2m\",\"think\":true,"
         "\"format\":{\"type\":\"object\"}}");
    resp_free(&r);
    pthread_mutex_lock(&sched_g->mu);
    const msg_t *m = &sched_g->last;
    CHECK_EQ_INT(m->type, MSG_generate);
    CHECK_EQ_STR(m->u.generate.prompt, "p");
    CHECK(m->u.generate.has_options && m->u.generate.options->temperature == 1.0);
    CHECK(m->u.generate.options->num_predict == 7);
    CHECK(m->u.generate.keep_alive_ms == 120000);
    CHECK_EQ_STR(m->u.generate.think, "true");
    CHECK_EQ_STR(m->u.generate.format, "{\"type\":\"object\"}");
    CHECK_EQ_INT(strlen(m->id), 32);
    pthread_mutex_unlock(&sched_g->mu);

    /* Load only: one object, done_reason load, no metrics. */
    CHECK_EQ_INT(http(&r, "POST", "/api/generate", "{\"model\":\"load\"}"), 200);
    n = ndjson(r.body.data, l, 16);
    CHECK_EQ_INT(n, 1);
    if (n == 1) {
        CHECK_EQ_STR(jstr(l[0], "done_reason"), "load");
        CHECK_EQ_INT(json_object_size(l[0]), 5);
    }
    free_lines(l, n);
    resp_free(&r);

    /* Replies under another id are dropped. */
    CHECK_EQ_INT(http(&r, "POST", "/api/generate",
                      "{\"model\":\"stray\",\"stream\":false}"),
                 200);
    json_t *o = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jstr(o, "response"), "right");
    json_decref(o);
    resp_free(&r);
}

static void test_generate_nonstream(void)
{
    resp_t r;
    CHECK_EQ_INT(http(&r, "POST", "/api/generate",
                      "{\"model\":\"ok\",\"prompt\":\"hi\",\"stream\":false}"),
                 200);
    CHECK_EQ_STR(r.ctype, "application/json; charset=utf-8");
    json_t *o = json_loads(r.body.data, 0, NULL);
    CHECK(o != NULL);
    CHECK_EQ_STR(jstr(o, "model"), "ok");
    CHECK_EQ_STR(jstr(o, "response"), "Hello");
    CHECK(json_is_true(json_object_get(o, "done")));
    CHECK_EQ_STR(jstr(o, "done_reason"), "stop");
    CHECK(has(o, "context") && has(o, "total_duration") && has(o, "eval_count"));
    CHECK(!has(o, "load_duration"));
    CHECK(strchr(r.body.data, '\n') == NULL);
    json_decref(o);
    resp_free(&r);

    /* thinking, tool calls and logprobs accumulate; bad JSON is dropped */
    CHECK_EQ_INT(http(&r, "POST", "/api/chat",
                      "{\"model\":\"think\",\"messages\":[{\"role\":\"user\","
                      "\"content\":\"q\"}],\"stream\":false}"),
                 200);
    o = json_loads(r.body.data, 0, NULL);
    json_t *msg = json_object_get(o, "message");
    CHECK_EQ_STR(jstr(msg, "role"), "assistant");
    CHECK_EQ_STR(jstr(msg, "content"), "A");
    CHECK_EQ_STR(jstr(msg, "thinking"), "hmm");
    CHECK_EQ_INT(json_array_size(json_object_get(msg, "tool_calls")), 1);
    CHECK_EQ_INT(json_array_size(json_object_get(o, "logprobs")), 2);
    CHECK(!has(o, "context"));
    CHECK_EQ_STR(jstr(o, "done_reason"), "stop");
    json_decref(o);
    resp_free(&r);
}

static void test_chat_stream(void)
{
    resp_t r;
    CHECK_EQ_INT(http(&r, "POST", "/api/chat",
                      "{\"model\":\"think\",\"messages\":[{\"role\":\"user\","
                      "\"content\":\"q\"}]}"),
                 200);
    json_t *all[16];
    size_t n = ndjson(r.body.data, all, 16);
    /* the load progress line, then 4 chunks (one with bad tool JSON) and
     * done */
    CHECK_EQ_INT(n, 6);
    if (n == 6) {
        CHECK_EQ_STR(jstr(all[0], "status"), "loading model");
        CHECK_EQ_STR(jstr(json_object_get(all[0], "message"), "content"), "");
        CHECK_EQ_STR(jstr(json_object_get(all[0], "message"), "role"),
                     "assistant");
        CHECK(json_is_false(json_object_get(all[0], "done")));
        CHECK_EQ_STR(jstr(all[0], "model"), "think");
        CHECK(has(all[0], "created_at"));
        CHECK(!has(all[1], "status"));
    }
    json_t **l = all + 1;
    if (n == 6) {
        json_t *m0 = json_object_get(l[0], "message");
        CHECK_EQ_STR(jstr(m0, "role"), "assistant");
        CHECK_EQ_STR(jstr(m0, "content"), "");
        CHECK_EQ_STR(jstr(m0, "thinking"), "hm");
        CHECK(has(l[0], "logprobs"));
        CHECK(json_is_false(json_object_get(l[0], "done")));
        CHECK_EQ_STR(jstr(json_object_get(l[1], "message"), "content"), "A");
        json_t *tc = json_object_get(json_object_get(l[2], "message"),
                                     "tool_calls");
        CHECK_EQ_INT(json_array_size(tc), 1);
        CHECK_EQ_STR(jstr(json_object_get(json_array_get(tc, 0), "function"),
                          "name"),
                     "f");
        CHECK(!has(json_object_get(l[3], "message"), "tool_calls"));
        CHECK(json_is_true(json_object_get(l[4], "done")));
        CHECK_EQ_STR(jstr(l[4], "done_reason"), "stop");
        CHECK(!has(l[4], "total_duration"));
    }
    free_lines(all, n);
    resp_free(&r);

    /* empty messages: load */
    CHECK_EQ_INT(http(&r, "POST", "/api/chat",
                      "{\"model\":\"load\",\"stream\":false}"),
                 200);
    json_t *o = json_loads(r.body.data, 0, NULL);
    CHECK_EQ_STR(jstr(o, "done_reason"), "load");
    CHECK_EQ_STR(jstr(json_object_get(o, "message"), "content"), "");
    json_decref(o);
    resp_free(&r);
}

static void test_errors(void)
{
    /* scheduler errors before anything was written: the real status */
    expect_error("/api/generate", "{\"model\":\"missing\"}", 404,
                 "model \"missing\" not found, try pulling it first");
    expect_error("/api/chat", "{\"model\":\"missing\",\"stream\":false}", 404,
                 "model \"missing\" not found, try pulling it first");
    expect_error("/api/generate", "{\"model\":\"busy\"}", 503,
                 "server busy, please try again.  maximum pending requests "
                 "exceeded");
    expect_error("/api/generate", "{\"model\":\"weird\"}", 500,
                 "unexpected reply 'tags_reply' from the scheduler");
    /* an error after bytes went out: a last error line, status 200 */
    resp_t r;
    CHECK_EQ_INT(http(&r, "POST", "/api/generate", "{\"model\":\"midfail\"}"),
                 200);
    json_t *l[8];
    size_t n = ndjson(r.body.data, l, 8);
    CHECK_EQ_INT(n, 2);
    if (n == 2) {
        CHECK_EQ_STR(jstr(l[0], "response"), "a");
        CHECK_EQ_STR(jstr(l[1], "error"), "model runner has unexpectedly stopped");
        CHECK_EQ_INT(json_object_size(l[1]), 1);
    }
    free_lines(l, n);
    resp_free(&r);
    /* the same with stream:false: the real status */
    expect_error("/api/generate", "{\"model\":\"midfail\",\"stream\":false}", 500,
                 "model runner has unexpectedly stopped");

    /* validation (each must leave the server up) */
    expect_error("/api/generate", "", 400, "missing request body");
    expect_error("/api/chat", " ", 400, "missing request body");
    expect_error("/api/generate", "{\"model\":", 400,
                 "unexpected token near end of file (line 1, column 9)");
    expect_error("/api/generate", "{}", 400, "model is required");
    expect_error("/api/chat", "{\"messages\":[]}", 400, "model is required");
    expect_error("/api/generate",
                 "{\"model\":\"ok\",\"options\":{\"temperature\":\"hot\"}}", 400,
                 "option \"temperature\" must be of type float32");
    expect_error("/api/generate", "{\"model\":\"ok\",\"keep_alive\":\"soon\"}",
                 400, "time: invalid duration \"soon\"");
    expect_error("/api/generate", "{\"model\":\"ok\",\"think\":\"lots\"}", 400,
                 "invalid think value: \"lots\" (must be \"high\", \"medium\", "
                 "\"low\", \"max\", true, or false)");
    expect_error("/api/generate", "{\"model\":\"ok\",\"format\":\"xml\"}", 400,
                 "invalid format: \"\\\"xml\\\"\"; expected \"json\" or a valid "
                 "JSON Schema object");
    expect_error("/api/generate", "{\"model\":\"ok\",\"top_logprobs\":21}", 400,
                 "top_logprobs must be between 0 and 20");
    expect_error("/api/generate",
                 "{\"model\":\"ok\",\"raw\":true,\"system\":\"x\"}", 400,
                 "raw mode does not support template, system, or context");
    expect_error("/api/generate", "{\"model\":\"ok\",\"prompt\":1}", 400,
                 "json: cannot unmarshal number into Go struct field "
                 "GenerateRequest.prompt of type string");
    expect_error("/api/embed", "{\"model\":\"emb\",\"input\":[1]}", 400,
                 "invalid input type");
    expect_error("/api/show", "{}", 400, "model is required");
    expect_error("/api/copy", "{\"source\":\"a\"}", 400,
                 "destination \"\" is invalid");
    expect_error("/api/create", "{\"model\":\"x\"}", 400,
                 "neither 'from' or 'files' was specified");
    /* hostile bodies */
    static const char nul_body[] = "{\"model\":\"ok\"\0}";
    http_ex(&r, "POST", "/api/generate", nul_body, sizeof nul_body - 1, NULL);
    CHECK_EQ_INT(r.status, 400);
    resp_free(&r);
    http(&r, "POST", "/api/generate", "{\"model\":\"\xc3\x28\"}");
    CHECK_EQ_INT(r.status, 400);
    resp_free(&r);
    char deep[20001];
    memset(deep, '[', sizeof deep - 1);
    deep[sizeof deep - 1] = '\0';
    http(&r, "POST", "/api/chat", deep);
    CHECK_EQ_INT(r.status, 400);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "GET", "/", NULL), 200);
    resp_free(&r);
}

static void test_embed(void)
{
    resp_t r;
    CHECK_EQ_INT(http(&r, "POST", "/api/embed",
                      "{\"model\":\"emb\",\"input\":[\"a\",\"b\"]}"),
                 200);
    CHECK_EQ_STR(r.body.data,
                 "{\"model\":\"emb\",\"embeddings\":[[0.5,-0.25,0.1],[1,0,-1]],"
                 "\"total_duration\":9,\"prompt_eval_count\":4}");
    resp_free(&r);
    pthread_mutex_lock(&sched_g->mu);
    CHECK_EQ_INT(sched_g->last.type, MSG_embed);
    CHECK_EQ_INT(sched_g->last.u.embed.input.n, 2);
    pthread_mutex_unlock(&sched_g->mu);

    CHECK_EQ_INT(http(&r, "POST", "/api/embed", "{\"model\":\"emb\",\"input\":\"\"}"),
                 200);
    CHECK_EQ_STR(r.body.data, "{\"model\":\"emb\",\"embeddings\":[],"
                              "\"total_duration\":9,\"prompt_eval_count\":4}");
    resp_free(&r);

    CHECK_EQ_INT(http(&r, "POST", "/api/embeddings",
                      "{\"model\":\"emb\",\"prompt\":\"a\"}"),
                 200);
    CHECK_EQ_STR(r.body.data,
                 "{\"embedding\":[0.5,-0.25,0.10000000149011612]}");
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "POST", "/api/embeddings", "{\"model\":\"emb\"}"), 200);
    CHECK_EQ_STR(r.body.data, "{\"embedding\":[]}");
    resp_free(&r);

    expect_error("/api/embed", "{\"model\":\"emb-missing\",\"input\":\"a\"}", 404,
                 "model \"emb-missing\" not found, try pulling it first");
    expect_error("/api/embed", "{\"model\":\"emb-bad\",\"input\":\"a\"}", 500,
                 "embeddings: 12 bytes of data for 1 x 5 floats");
}

static void test_control_routes(void)
{
    resp_t r;
    CHECK_EQ_INT(http(&r, "GET", "/api/tags", NULL), 200);
    json_t *o = json_loads(r.body.data, 0, NULL);
    json_t *m0 = json_array_get(json_object_get(o, "models"), 0);
    CHECK_EQ_STR(jstr(m0, "name"), "llama3:latest");
    CHECK_EQ_STR(jstr(m0, "model"), "llama3:latest");
    CHECK_EQ_INT(json_integer_value(json_object_get(m0, "size")), 42);
    CHECK(json_is_null(json_object_get(json_object_get(m0, "details"),
                                       "families")));
    json_decref(o);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "HEAD", "/api/tags", NULL), 200);
    resp_free(&r);

    CHECK_EQ_INT(http(&r, "GET", "/api/ps", NULL), 200);
    o = json_loads(r.body.data, 0, NULL);
    m0 = json_array_get(json_object_get(o, "models"), 0);
    CHECK_EQ_STR(jstr(m0, "name"), "llama3:latest");
    CHECK_EQ_INT(json_integer_value(json_object_get(m0, "size_vram")), 60);
    CHECK_EQ_INT(json_integer_value(json_object_get(m0, "context_length")), 4096);
    CHECK_EQ_STR(jstr(m0, "expires_at"), "2030-01-01T00:00:00Z");
    json_decref(o);
    resp_free(&r);

    CHECK_EQ_INT(http(&r, "POST", "/api/show", "{\"model\":\"llama3\"}"), 200);
    CHECK_EQ_STR(r.body.data, "{\"modelfile\":\"# x\",\"template\":\"{{ .Prompt }}\","
                              "\"model_info\":{}}");
    resp_free(&r);
    expect_error("/api/show", "{\"name\":\"missing\"}", 404,
                 "model 'missing' not found");

    CHECK_EQ_INT(http(&r, "POST", "/api/copy",
                      "{\"source\":\"llama3\",\"destination\":\"mine\"}"),
                 200);
    CHECK_EQ_STR(r.body.data, "");
    resp_free(&r);
    expect_error("/api/copy", "{\"source\":\"missing\",\"destination\":\"x\"}", 404,
                 "model \"missing\" not found");
    CHECK_EQ_INT(http(&r, "DELETE", "/api/delete", "{\"model\":\"mine\"}"), 200);
    CHECK_EQ_STR(r.body.data, "");
    resp_free(&r);
    pthread_mutex_lock(&reg_g->mu);
    CHECK_EQ_INT(reg_g->last.type, MSG_delete);
    CHECK_EQ_STR(reg_g->last.u.delete.model, "mine");
    pthread_mutex_unlock(&reg_g->mu);
}

static void test_create(void)
{
    resp_t r;
    CHECK_EQ_INT(http(&r, "POST", "/api/create",
                      "{\"model\":\"mine\",\"from\":\"llama3\"}"),
                 200);
    CHECK_EQ_STR(r.ctype, "application/x-ndjson");
    CHECK_EQ_STR(r.body.data, "{\"status\":\"parsing GGUF\",\"total\":10}\n"
                              "{\"status\":\"writing manifest\"}\n"
                              "{\"status\":\"success\"}\n");
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "POST", "/api/create",
                      "{\"model\":\"mine\",\"from\":\"llama3\",\"stream\":false}"),
                 200);
    CHECK_EQ_STR(r.body.data, "{\"status\":\"success\"}");
    resp_free(&r);
    /* an ok without a final "success" progress still ends with one */
    CHECK_EQ_INT(http(&r, "POST", "/api/create",
                      "{\"model\":\"nosuccess\",\"from\":\"llama3\"}"),
                 200);
    CHECK_EQ_STR(r.body.data, "{\"status\":\"parsing GGUF\",\"total\":10}\n"
                              "{\"status\":\"success\"}\n");
    resp_free(&r);
    /* error after progress: last line; stream:false: the real status */
    CHECK_EQ_INT(http(&r, "POST", "/api/create",
                      "{\"model\":\"fails\",\"from\":\"x\"}"),
                 200);
    CHECK(strstr(r.body.data, "{\"error\":\"unsupported GGUF version 9\"}\n") !=
          NULL);
    resp_free(&r);
    expect_error("/api/create", "{\"model\":\"fails\",\"from\":\"x\",\"stream\":false}",
                 400, "unsupported GGUF version 9");
}

static void test_pull_push(void)
{
    resp_t r;
    CHECK_EQ_INT(http(&r, "POST", "/api/pull", "{\"model\":\"llama3\"}"), 200);
    CHECK_EQ_STR(r.ctype, "application/x-ndjson");
    CHECK_EQ_STR(r.body.data,
                 "{\"status\":\"pulling manifest\"}\n"
                 "{\"status\":\"pulling 0123456789ab\",\"digest\":"
                 "\"sha256:0123456789ab\",\"total\":100,\"completed\":40}\n"
                 "{\"status\":\"success\"}\n");
    resp_free(&r);
    /* insecure travels to the registry; name is the deprecated alias */
    CHECK_EQ_INT(http(&r, "POST", "/api/push",
                      "{\"name\":\"me/llama3\",\"insecure\":true,\"stream\":false}"),
                 200);
    CHECK_EQ_STR(r.body.data, "{\"status\":\"success\"}");
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "POST", "/api/pull",
                      "{\"model\":\"x\",\"insecure\":true}"), 200);
    CHECK(strstr(r.body.data, "{\"status\":\"insecure\"}") != NULL);
    resp_free(&r);
    expect_error("/api/pull", "{\"model\":\"missing\",\"stream\":false}", 404,
                 "pull model manifest: file does not exist");
    expect_error("/api/pull", "{\"model\":\"a/b/c/d/e\"}", 400,
                 "invalid model name");
    expect_error("/api/pull", "{\"model\":\"x\",\"insecure\":\"yes\"}", 400,
                 "json: cannot unmarshal string into Go struct field "
                 "PullRequest.insecure of type bool");
}

static void test_blobs(void)
{
    resp_t r;
    CHECK_EQ_INT(http(&r, "HEAD", "/api/blobs/" DIGEST_EXISTS, NULL), 200);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "HEAD", "/api/blobs/" DIGEST_NEW, NULL), 404);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "HEAD", "/api/blobs/sha256:123", NULL), 400);
    resp_free(&r);
    expect_error("/api/blobs/sha256:../../x", "data", 400, "invalid digest format");

    /* 3.5 MiB in 1 MiB pieces, in order, reassembled */
    size_t len = 3 * (1u << 20) + (1u << 19);
    char *data = malloc(len);
    for (size_t i = 0; i < len; i++)
        data[i] = (char)(i * 2654435761u >> 13);
    pthread_mutex_lock(&reg_g->mu);
    cr_buf_reset(&reg_g->blob);
    reg_g->n_pieces = 0;
    pthread_mutex_unlock(&reg_g->mu);
    http_ex(&r, "POST", "/api/blobs/" DIGEST_NEW, data, len, NULL);
    CHECK_EQ_INT(r.status, 201);
    CHECK_EQ_STR(r.body.data, "");
    resp_free(&r);
    pthread_mutex_lock(&reg_g->mu);
    CHECK_EQ_INT(reg_g->n_pieces, 4);
    CHECK(reg_g->offsets[0] == 0 && reg_g->offsets[1] == (1 << 20) &&
          reg_g->offsets[2] == (2 << 20) && reg_g->offsets[3] == (3 << 20));
    CHECK(!reg_g->lasts[0] && !reg_g->lasts[2] && reg_g->lasts[3]);
    CHECK_EQ_INT(reg_g->blob.len, len);
    CHECK(reg_g->blob.len == len && !memcmp(reg_g->blob.data, data, len));
    pthread_mutex_unlock(&reg_g->mu);

    /* exactly 2 MiB: the last piece is empty */
    pthread_mutex_lock(&reg_g->mu);
    cr_buf_reset(&reg_g->blob);
    reg_g->n_pieces = 0;
    pthread_mutex_unlock(&reg_g->mu);
    http_ex(&r, "POST", "/api/blobs/sha256-cccccccccccccccccccccccccccccccc"
            "cccccccccccccccccccccccccccccccc", data, 2u << 20, NULL);
    CHECK_EQ_INT(r.status, 201);
    resp_free(&r);
    pthread_mutex_lock(&reg_g->mu);
    CHECK_EQ_INT(reg_g->n_pieces, 3);
    CHECK(reg_g->offsets[2] == (2 << 20) && reg_g->lasts[2]);
    CHECK_EQ_INT(reg_g->blob.len, 2u << 20);
    pthread_mutex_unlock(&reg_g->mu);

    /* empty body */
    pthread_mutex_lock(&reg_g->mu);
    reg_g->n_pieces = 0;
    pthread_mutex_unlock(&reg_g->mu);
    http_ex(&r, "POST", "/api/blobs/" DIGEST_NEW, "", 0, NULL);
    CHECK_EQ_INT(r.status, 201);
    resp_free(&r);
    pthread_mutex_lock(&reg_g->mu);
    CHECK(reg_g->n_pieces == 1 && reg_g->lasts[0] && reg_g->offsets[0] == 0);
    pthread_mutex_unlock(&reg_g->mu);

    /* already stored: 200, and nothing is uploaded */
    pthread_mutex_lock(&reg_g->mu);
    reg_g->n_pieces = 0;
    pthread_mutex_unlock(&reg_g->mu);
    http_ex(&r, "POST", "/api/blobs/" DIGEST_EXISTS, data, len, NULL);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    pthread_mutex_lock(&reg_g->mu);
    CHECK_EQ_INT(reg_g->n_pieces, 0);
    pthread_mutex_unlock(&reg_g->mu);

    /* mismatch: 400 with the registry's message */
    http_ex(&r, "POST", "/api/blobs/" DIGEST_MISMATCH, data, 1000, NULL);
    CHECK_EQ_INT(r.status, 400);
    CHECK_EQ_STR(error_of(r.body.data),
                 "digest mismatch, expected \"" DIGEST_MISMATCH
                 "\", got \"sha256:1234\"");
    resp_free(&r);
    free(data);
}

/* A POST of body to path is refused for its size: 413 and the message. */
static void expect_too_large(const char *path, const char *body, size_t len,
                             const req_opts_t *o)
{
    resp_t r;
    http_ex(&r, "POST", path, body, len, o);
    CHECK_EQ_INT(r.status, 413);
    CHECK_EQ_STR(error_of(r.body.data), "request body is larger than the 262144-byte limit");
    resp_free(&r);
}

static void test_limits(void)
{
    /* JSON bodies over the cap: 413, by Content-Length and chunked */
    size_t big = 300 * 1024;
    char *body = malloc(big + 1);
    memset(body, ' ', big);
    memcpy(body, "{\"model\":\"ok\",\"prompt\":\"", 24);
    body[big - 2] = '"';
    body[big - 1] = '}';
    body[big] = '\0';
    expect_too_large("/api/generate", body, big, NULL);
    static const char *const chunked[] = {"Transfer-Encoding: chunked", NULL};
    req_opts_t o = {.headers = chunked};
    expect_too_large("/api/chat", body, big, &o);
    free(body);
    /* Past the drain bound (4x the cap) the answer comes before the body
     * is read: a client that asks first (curl does past 1 MiB) gets it. */
    big = 2u << 20;
    body = malloc(big);
    memset(body, ' ', big);
    static const char *const ask[] = {"Expect: 100-continue", NULL};
    req_opts_t oa = {.headers = ask};
    expect_too_large("/api/generate", body, big, &oa);
    free(body);
    resp_t r;
    CHECK_EQ_INT(http(&r, "GET", "/", NULL), 200);
    resp_free(&r);
}

static void test_cors_and_host(void)
{
    resp_t r;
    char v[512];
    static const char *const ok_origin[] = {"Origin: http://localhost:3000",
                                            NULL};
    req_opts_t o = {.headers = ok_origin};
    http_ex(&r, "GET", "/api/version", NULL, 0, &o);
    CHECK_EQ_INT(r.status, 200);
    CHECK_EQ_STR(header_value(&r, "Access-Control-Allow-Origin", v, sizeof v),
                 "http://localhost:3000");
    resp_free(&r);
    http_ex(&r, "OPTIONS", "/api/chat", NULL, 0, &o);
    CHECK_EQ_INT(r.status, 204);
    CHECK_EQ_STR(header_value(&r, "Access-Control-Allow-Origin", v, sizeof v),
                 "http://localhost:3000");
    CHECK(strstr(header_value(&r, "Access-Control-Allow-Headers", v, sizeof v),
                 "Content-Type") != NULL);
    /* what a browser's Anthropic client sends */
    CHECK(strstr(header_value(&r, "Access-Control-Allow-Headers", v, sizeof v),
                 "x-api-key,anthropic-version") != NULL);
    CHECK(strstr(header_value(&r, "Access-Control-Allow-Methods", v, sizeof v),
                 "POST") != NULL);
    resp_free(&r);
    static const char *const bad_origin[] = {"Origin: https://evil.example",
                                             NULL};
    o.headers = bad_origin;
    http_ex(&r, "GET", "/api/version", NULL, 0, &o);
    CHECK_EQ_INT(r.status, 403);
    CHECK_EQ_STR(header_value(&r, "Access-Control-Allow-Origin", v, sizeof v),
                 "");
    resp_free(&r);
    http_ex(&r, "OPTIONS", "/api/chat", NULL, 0, &o);
    CHECK_EQ_INT(r.status, 403);
    resp_free(&r);
    /* OPTIONS without an Origin */
    CHECK_EQ_INT(http(&r, "OPTIONS", "/api/chat", NULL), 204);
    resp_free(&r);
    /* DNS rebinding: we are bound to loopback */
    static const char *const evil_host[] = {"Host: evil.example", NULL};
    o.headers = evil_host;
    http_ex(&r, "GET", "/", NULL, 0, &o);
    CHECK_EQ_INT(r.status, 403);
    resp_free(&r);
    static const char *const lh[] = {"Host: localhost:11434", NULL};
    o.headers = lh;
    http_ex(&r, "GET", "/", NULL, 0, &o);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
    static const char *const loc[] = {"Host: box.local", NULL};
    o.headers = loc;
    http_ex(&r, "GET", "/", NULL, 0, &o);
    CHECK_EQ_INT(r.status, 200);
    resp_free(&r);
}

/* ---- many clients at once ---- */

#define N_CLIENTS 12
#define N_ROUNDS 4

typedef struct client {
    pthread_t th;
    int ok;     /* answers that were exactly right */
    int bad;
} client_t;

static void *client_main(void *arg)
{
    client_t *c = arg;
    req_opts_t o = {.fresh = true};
    for (int i = 0; i < N_ROUNDS; i++) {
        resp_t r;
        if (i % 2 == 0) {
            static const char body[] = "{\"model\":\"ok\",\"stream\":false}";
            http_ex(&r, "POST", "/api/generate", body, sizeof body - 1, &o);
            json_t *j = json_loads(r.body.data, 0, NULL);
            bool good = r.status == 200 &&
                        !strcmp(jstr(j, "response"), "Hello");
            json_decref(j);
            good ? c->ok++ : c->bad++;
        } else {
            static const char body[] = "{\"model\":\"think\"}";
            http_ex(&r, "POST", "/api/chat", body, sizeof body - 1, &o);
            bool good = r.status == 200 &&
                        strstr(r.body.data, "\"done\":true") != NULL &&
                        strstr(r.body.data, "WRONG") == NULL;
            good ? c->ok++ : c->bad++;
        }
        resp_free(&r);
    }
    return NULL;
}

static void test_concurrent(void)
{
    client_t cl[N_CLIENTS];
    memset(cl, 0, sizeof cl);
    for (int i = 0; i < N_CLIENTS; i++)
        pthread_create(&cl[i].th, NULL, client_main, &cl[i]);
    int ok = 0, bad = 0;
    for (int i = 0; i < N_CLIENTS; i++) {
        pthread_join(cl[i].th, NULL);
        ok += cl[i].ok;
        bad += cl[i].bad;
    }
    CHECK_EQ_INT(ok, N_CLIENTS * N_ROUNDS);
    CHECK_EQ_INT(bad, 0);
}

/* ---- disconnects and dead peers ---- */

typedef struct first_line {
    cr_buf_t got;
} first_line_t;

/* Takes bytes until one full line arrived, then aborts the transfer. */
static size_t on_write_one_line(char *p, size_t sz, size_t n, void *ud)
{
    first_line_t *f = ud;
    cr_buf_append(&f->got, p, sz * n);
    return memchr(f->got.data, '\n', f->got.len) ? 0 : sz * n;
}

static void test_disconnect(void)
{
    /* mid-stream: the client reads one line and hangs up */
    int before = fake_cancels(sched_g);
    first_line_t fl;
    cr_buf_init(&fl.got, 1 << 20);
    CURL *c = curl_easy_init();
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/api/generate", port_g);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, "{\"model\":\"slow\"}");
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write_one_line);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &fl);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_cleanup(c);
    CHECK_EQ_INT(rc, CURLE_WRITE_ERROR);
    CHECK(fl.got.data && strstr(fl.got.data, "\"response\":\"tok \"") != NULL);
    cr_buf_free(&fl.got);
    CHECK_MSG(fake_saw_cancel(sched_g, before, 10000),
              "no cancel after a mid-stream disconnect");
    pthread_mutex_lock(&sched_g->mu);
    CHECK_EQ_STR(sched_g->cancel_id, sched_g->last_id); /* same request id */
    pthread_mutex_unlock(&sched_g->mu);

    /* while waiting for the first reply (a model load): the client goes
     * away once the scheduler holds the request (a fixed client timeout
     * could fire before the gateway forwarded it; then no cancel is due) */
    before = fake_cancels(sched_g);
    resp_t r;
    fake_mark_t held = fake_mark_now(sched_g, 1, 0);
    req_opts_t o = {.fresh = true, .leave_when = fake_reached, .leave_arg = &held};
    http_ex(&r, "POST", "/api/chat", "{\"model\":\"silent\"}", 18, &o);
    CHECK_EQ_INT(r.rc, CURLE_ABORTED_BY_CALLBACK);
    resp_free(&r);
    CHECK_MSG(fake_saw_cancel(sched_g, before, 10000),
              "no cancel after a disconnect during the wait");

    /* stream:false too */
    before = fake_cancels(sched_g);
    held = fake_mark_now(sched_g, 1, 0);
    http_ex(&r, "POST", "/api/generate",
            "{\"model\":\"silent\",\"stream\":false}", 33, &o);
    CHECK_EQ_INT(r.rc, CURLE_ABORTED_BY_CALLBACK);
    resp_free(&r);
    CHECK(fake_saw_cancel(sched_g, before, 10000));

    /* a silent model that still answers pings is not an error: the
     * request is still waiting after five ping rounds (3.5 s of silence,
     * more than the 3 s reply timeout); the client leaves then */
    held = fake_mark_now(sched_g, 1, 5);
    http_ex(&r, "POST", "/api/generate", "{\"model\":\"silent\"}", 18, &o);
    CHECK_MSG(r.rc == CURLE_ABORTED_BY_CALLBACK,
              "a silent model that answers pings ended the request: %s (%ld %s)",
              curl_easy_strerror(r.rc), r.status, r.body.data);
    resp_free(&r);
    CHECK_EQ_INT(http(&r, "GET", "/", NULL), 200);
    resp_free(&r);
}

static void *start_scheduler_later(void *arg)
{
    CR_UNUSED(arg);
    usleep(200000);
    sched_g = fake_start("scheduler", scheduler_fn);
    return NULL;
}

/* The dead-peer cases below end in 1.4 to 4 s by the gateway's configured
 * waits (ping_after 700 ms, reply 3 s, connect 2 s, refused grace 2 s).
 * Those waits are short to keep the test short, yet long enough that a
 * loaded machine's late scheduling is not taken for a dead peer: at 300
 * and 800 ms, a blob piece's reply and a pong came too late under load
 * (three busy loops and two copies of this test on two cores).
 * They must end well before the client's own 15 s timeout: a gateway that
 * waited for the client to give up fails. The bound leaves room for a
 * slow, loaded machine (sanitizers, two jobs on two cores). */
#define DEAD_PEER_MAX_MS 12000

static void test_dead_peers(void)
{
    resp_t r;
    /* a scheduler that never answers pings: "scheduler unavailable" */
    http(&r, "POST", "/api/generate", "{\"model\":\"mute\"}");
    CHECK_EQ_INT(r.status, 502);
    CHECK_EQ_STR(error_of(r.body.data), "scheduler unavailable");
    CHECK_MSG(r.secs * 1000 < DEAD_PEER_MAX_MS, "mute scheduler took %.2fs", r.secs);
    resp_free(&r);
    atomic_store(&sched_g->ignore_ping, false);

    /* a registry that never answers: the reply timeout */
    atomic_store(&reg_g->silent, true);
    http(&r, "GET", "/api/tags", NULL);
    CHECK_EQ_INT(r.status, 502);
    CHECK_EQ_STR(error_of(r.body.data), "registry unavailable");
    CHECK_MSG(r.secs * 1000 < DEAD_PEER_MAX_MS, "silent registry took %.2fs", r.secs);
    resp_free(&r);
    atomic_store(&reg_g->silent, false);

    /* a scheduler that dies holding the request: the dropped connection */
    int64_t t0 = now_ms();
    http(&r, "POST", "/api/chat", "{\"model\":\"die\"}");
    CHECK_EQ_INT(r.status, 502);
    CHECK_EQ_STR(error_of(r.body.data), "scheduler unavailable");
    CHECK_MSG(now_ms() - t0 < DEAD_PEER_MAX_MS, "dead scheduler took %lld ms",
              (long long)(now_ms() - t0));
    resp_free(&r);
    fake_stop_unbound(&sched_g);

    /* no scheduler at all: fails after the short grace a restarting
     * service gets (2 s), not the whole connect timeout */
    t0 = now_ms();
    http(&r, "POST", "/api/generate", "{\"model\":\"ok\"}");
    CHECK_EQ_INT(r.status, 502);
    CHECK_EQ_STR(error_of(r.body.data), "scheduler unavailable");
    CHECK_MSG(now_ms() - t0 < DEAD_PEER_MAX_MS, "absent scheduler took %lld ms",
              (long long)(now_ms() - t0));
    resp_free(&r);
    http(&r, "GET", "/api/ps", NULL);
    CHECK_EQ_INT(r.status, 502);
    resp_free(&r);

    /* and it comes back */
    sched_g = fake_start("scheduler", scheduler_fn);
    CHECK_EQ_INT(http(&r, "POST", "/api/generate",
                      "{\"model\":\"ok\",\"stream\":false}"),
                 200);
    resp_free(&r);

    /* A scheduler that is (re)starting: nobody listens when the request
     * comes, it binds 200 ms later, and the request is served (a refused
     * connect is retried for a short grace). */
    fake_stop_unbound(&sched_g);
    pthread_t late;
    pthread_create(&late, NULL, start_scheduler_later, NULL);
    CHECK_EQ_INT(http(&r, "POST", "/api/generate",
                      "{\"model\":\"ok\",\"stream\":false}"),
                 200);
    resp_free(&r);
    pthread_join(late, NULL);
}

typedef struct bg {
    pthread_t th;
    resp_t r;
} bg_t;

static void *bg_main(void *arg)
{
    bg_t *b = arg;
    req_opts_t o = {.timeout_ms = 60000, .fresh = true};
    http_ex(&b->r, "POST", "/api/generate", "{\"model\":\"silent\"}", 18, &o);
    return NULL;
}

/* Stopping the server ends requests that wait on the bus. */
static void test_stop(gw_server_t **srv)
{
    bg_t b;
    memset(&b, 0, sizeof b);
    int before = fake_cancels(sched_g);
    /* the request must be waiting on the bus when the server stops (a
     * fixed sleep could stop it before the request got there) */
    fake_mark_t held = fake_mark_now(sched_g, 1, 0);
    pthread_create(&b.th, NULL, bg_main, &b);
    CHECK_MSG(fake_wait_mark(&held, 20000), "the request never reached the scheduler");
    gw_server_destroy(srv);
    CHECK(*srv == NULL);
    pthread_join(b.th, NULL);
    /* stopping ended it, not the client's 60 s timeout */
    CHECK_MSG(b.r.rc != CURLE_OPERATION_TIMEDOUT, "the request ran into its timeout");
    CHECK(b.r.rc != CURLE_OK || b.r.status != 200);
    resp_free(&b.r);
    CHECK(fake_saw_cancel(sched_g, before, 10000));
}

int main(void)
{
    zsys_handler_set(NULL);
    char dir[] = "/tmp/corral-gw-test-XXXXXX";
    if (!mkdtemp(dir))
        return check_skip("test_gateway_http", "cannot make a temp dir");
    setenv("CORRAL_RUNTIME_DIR", dir, 1);
    unsetenv("CORRAL_SCHEDULER_ENDPOINT");
    unsetenv("CORRAL_REGISTRY_ENDPOINT");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    curl_g = curl_easy_init();

    sched_g = fake_start("scheduler", scheduler_fn);
    reg_g = fake_start("registry", registry_fn);

    gw_config_t cfg;
    cr_err_t err;
    CHECK_EQ_INT(gw_config_from_env(&cfg, &err), CR_OK);
    snprintf(cfg.host, sizeof cfg.host, "127.0.0.1:0");
    cfg.origins[0] = '\0';
    cfg.max_body_bytes = 256 * 1024;
    cfg.connect_timeout_ms = 2000;
    cfg.reply_timeout_ms = 3000;
    cfg.create_timeout_ms = 2000;
    cfg.ping_after_ms = 700;
    gw_server_t *srv = NULL;
    CHECK_EQ_INT(gw_server_new(&cfg, &srv, &err), CR_OK);
    if (!srv) {
        fprintf(stderr, "cannot start: %s\n", err.msg);
        return check_finish("test_gateway_http");
    }
    port_g = gw_server_port(srv);
    CHECK(port_g > 0);

    /* A second server on the same port, or on a host that does not
     * resolve, fails with a clear error. */
    gw_config_t c2 = cfg;
    gw_server_t *s2 = NULL;
    snprintf(c2.host, sizeof c2.host, "127.0.0.1:%d", port_g);
    CHECK_EQ_INT(gw_server_new(&c2, &s2, &err), CR_E_IO);
    CHECK(s2 == NULL && strstr(err.msg, "cannot listen on 127.0.0.1 port") != NULL);
    snprintf(c2.host, sizeof c2.host, "no-such-host.invalid:0");
    CHECK_EQ_INT(gw_server_new(&c2, &s2, &err), CR_E_INVALID);
    CHECK(s2 == NULL);

    test_basics();
    test_generate_stream();
    test_generate_nonstream();
    test_chat_stream();
    test_errors();
    test_embed();
    test_control_routes();
    test_create();
    test_pull_push();
    test_blobs();
    test_limits();
    test_cors_and_host();
    test_concurrent();
    test_disconnect();
    test_dead_peers();
    test_stop(&srv);

    fake_stop(&sched_g);
    fake_stop(&reg_g);
    curl_easy_cleanup(curl_g);
    curl_global_cleanup();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return check_finish("test_gateway_http");
}
