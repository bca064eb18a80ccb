/* http.c: libcurl client for the gateway (see http.h). */
#include "lib/prelude.h"
#include "cli/http.h"
#include "lib/buf.h"

#include <ctype.h>
#include <curl/curl.h>

volatile sig_atomic_t cli_interrupted = 0;

struct cli_http {
    CURL *curl;
    char base[sizeof(((cli_host_t *)0)->url)];
    char errbuf[CURL_ERROR_SIZE];
    char *auth; /* "Authorization: Bearer <CORRAL_API_KEY>", or NULL */
};

typedef struct xfer {
    CURL *curl;
    cr_buf_t body;   /* a whole reply, or an error body */
    cr_buf_t line;   /* the NDJSON line being assembled */
    cli_http_line_fn on_line;
    void *ctx;
    bool decided;    /* status looked at */
    bool streaming;  /* 2xx with a line callback */
    bool stopped;    /* the callback asked to stop */
    cr_status_t st;  /* an error found while reading */
    cr_err_t *err;
    cli_http_progress_fn progress;
    void *progress_ctx;
} xfer_t;

cli_http_t *cli_http_new(const cli_host_t *host, cr_err_t *err)
{
    cli_http_t *h = calloc(1, sizeof *h);
    if (!h) {
        cr_err_set(err, CR_E_NOMEM, "out of memory");
        return NULL;
    }
    snprintf(h->base, sizeof h->base, "%s", host->url);
    /* The gateway asks every route but / and /api/health for the key
     * (auth.h); the CLI sends what the server was given. */
    const char *key = getenv("CORRAL_API_KEY");
    if (key && *key) {
        size_t n = strlen("Authorization: Bearer ") + strlen(key) + 1;
        h->auth = malloc(n);
        if (h->auth)
            snprintf(h->auth, n, "Authorization: Bearer %s", key);
    }
    h->curl = curl_easy_init(); /* also initializes libcurl on first use */
    if (!h->curl || (key && *key && !h->auth)) {
        if (h->curl)
            curl_easy_cleanup(h->curl);
        free(h->auth);
        free(h);
        cr_err_set(err, CR_E_INTERNAL, "libcurl: no easy handle");
        return NULL;
    }
    return h;
}

void cli_http_destroy(cli_http_t **h_p)
{
    if (!h_p || !*h_p)
        return;
    curl_easy_cleanup((*h_p)->curl);
    if ((*h_p)->auth)
        explicit_bzero((*h_p)->auth, strlen((*h_p)->auth));
    free((*h_p)->auth);
    free(*h_p);
    *h_p = NULL;
}

const char *cli_http_base(const cli_http_t *h)
{
    return h->base;
}

static cr_status_t status_of_http(long code)
{
    switch (code) {
    case 400:
        return CR_E_INVALID;
    case 401:
        return CR_E_UNAUTHORIZED;
    case 403:
        return CR_E_FORBIDDEN;
    case 404:
        return CR_E_NOT_FOUND;
    case 413:
        return CR_E_TOO_LARGE;
    case 499:
        return CR_E_CANCELED;
    case 503:
        return CR_E_BUSY;
    default:
        return CR_E_INTERNAL;
    }
}

/* Handles one complete NDJSON line; false stops the transfer. */
static bool take_line(xfer_t *x, char *s, size_t n)
{
    while (n && (s[n - 1] == '\r' || isspace((unsigned char)s[n - 1])))
        n--;
    size_t i = 0;
    while (i < n && isspace((unsigned char)s[i]))
        i++;
    if (i == n)
        return true;
    json_error_t jerr;
    json_t *obj = json_loadb(s + i, n - i, 0, &jerr);
    if (!obj) {
        x->st = cr_err_set(x->err, CR_E_CORRUPT, "bad JSON line from server: %s", jerr.text);
        return false;
    }
    json_t *e = json_object_get(obj, "error");
    if (json_is_string(e)) {
        x->st = cr_err_set(x->err, CR_E_INTERNAL, "%s", json_string_value(e));
        json_decref(obj);
        return false;
    }
    bool go_on = x->on_line(x->ctx, obj);
    json_decref(obj);
    if (!go_on)
        x->stopped = true;
    return go_on;
}

static size_t on_write(char *data, size_t size, size_t nmemb, void *userp)
{
    xfer_t *x = userp;
    size_t n = size * nmemb;
    if (!x->decided) {
        long code = 0;
        curl_easy_getinfo(x->curl, CURLINFO_RESPONSE_CODE, &code);
        x->streaming = x->on_line && code < 400;
        x->decided = true;
    }
    if (!x->streaming) {
        if (cr_buf_append(&x->body, data, n)) {
            x->st = cr_err_set(x->err, CR_E_TOO_LARGE, "reply larger than %u bytes",
                               CLI_HTTP_MAX_BODY);
            return 0;
        }
        return n;
    }
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (data[i] != '\n')
            continue;
        bool go_on;
        if (x->line.len) {
            if (cr_buf_append(&x->line, data + start, i - start)) {
                x->st = cr_err_set(x->err, CR_E_TOO_LARGE, "reply line larger than %u bytes",
                                   CLI_HTTP_MAX_LINE);
                return 0;
            }
            go_on = take_line(x, x->line.data, x->line.len);
            cr_buf_reset(&x->line);
        } else {
            go_on = take_line(x, data + start, i - start);
        }
        if (!go_on)
            return 0;
        start = i + 1;
    }
    if (start < n && cr_buf_append(&x->line, data + start, n - start)) {
        x->st = cr_err_set(x->err, CR_E_TOO_LARGE, "reply line larger than %u bytes",
                           CLI_HTTP_MAX_LINE);
        return 0;
    }
    return n;
}

static int on_progress(void *userp, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    xfer_t *x = userp;
    CR_UNUSED(dltotal);
    CR_UNUSED(dlnow);
    if (x->progress && ultotal > 0)
        x->progress(x->progress_ctx, (uint64_t)ulnow, (uint64_t)ultotal);
    return cli_interrupted ? 1 : 0;
}

/* The server's error text: {"error": "..."} or the trimmed body. */
static void error_from_body(xfer_t *x, long code)
{
    const char *msg = NULL;
    json_t *j = x->body.len ? json_loadb(x->body.data, x->body.len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    if (json_is_string(e))
        msg = json_string_value(e);
    char text[1024];
    if (!msg) {
        const char *b = x->body.data ? x->body.data : "";
        while (isspace((unsigned char)*b))
            b++;
        size_t n = strlen(b);
        while (n && isspace((unsigned char)b[n - 1]))
            n--;
        if (n)
            snprintf(text, sizeof text, "%.*s", (int)CR_MIN(n, sizeof text - 1), b);
        else
            snprintf(text, sizeof text, "HTTP status %ld", code);
        msg = text;
    }
    x->st = cr_err_set(x->err, status_of_http(code), "%s", msg);
    json_decref(j);
}

/* Runs the prepared handle and turns the outcome into a status. */
static cr_status_t perform(cli_http_t *h, xfer_t *x, long *status)
{
    CURL *c = h->curl;
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, h->errbuf);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "corral/" CORRAL_VERSION);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    h->errbuf[0] = '\0';
    CURLcode rc = curl_easy_perform(c);
    long code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    if (status)
        *status = code;
    if (x->st)
        return x->st;
    if (rc == CURLE_WRITE_ERROR && x->stopped)
        return CR_OK;
    if (rc == CURLE_ABORTED_BY_CALLBACK || cli_interrupted)
        return cr_err_set(x->err, CR_E_CANCELED, "canceled");
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
        rc == CURLE_OPERATION_TIMEDOUT) {
        return cr_err_set(x->err, CR_E_UNAVAILABLE,
                          "could not connect to corral server at %s, is it running? "
                          "(start it with 'corral serve')",
                          h->base);
    }
    if (rc != CURLE_OK)
        return cr_err_set(x->err, CR_E_UNAVAILABLE, "%s: %s", h->base,
                          h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc));
    if (code >= 400) {
        error_from_body(x, code);
        return x->st;
    }
    /* A stream whose last line had no newline. */
    if (x->streaming && x->line.len) {
        if (!take_line(x, x->line.data, x->line.len) && x->st)
            return x->st;
    }
    return CR_OK;
}

static void xfer_init(xfer_t *x, CURL *c, cr_err_t *err)
{
    memset(x, 0, sizeof *x);
    x->curl = c;
    x->err = err;
    cr_buf_init(&x->body, CLI_HTTP_MAX_BODY);
    cr_buf_init(&x->line, CLI_HTTP_MAX_LINE);
}

static void xfer_free(xfer_t *x)
{
    cr_buf_free(&x->body);
    cr_buf_free(&x->line);
}

static bool make_url(cli_http_t *h, const char *path, char *url, size_t cap)
{
    int n = snprintf(url, cap, "%s%s", h->base, path);
    return n > 0 && (size_t)n < cap;
}

cr_status_t cli_http_json(cli_http_t *h, const char *method, const char *path,
                          const json_t *body, cli_http_line_fn on_line, void *ctx,
                          json_t **out, long *status, cr_err_t *err)
{
    if (out)
        *out = NULL;
    char url[4096];
    if (!make_url(h, path, url, sizeof url))
        return cr_err_set(err, CR_E_TOO_LARGE, "URL too long: %s", path);
    char *text = NULL;
    if (body) {
        text = json_dumps(body, JSON_COMPACT);
        if (!text)
            return cr_err_set(err, CR_E_NOMEM, "cannot encode the request as JSON");
    }
    CURL *c = h->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    struct curl_slist *hdr = NULL;
    hdr = curl_slist_append(hdr, "Content-Type: application/json");
    hdr = curl_slist_append(hdr, "Accept: application/x-ndjson, application/json");
    if (h->auth)
        hdr = curl_slist_append(hdr, h->auth);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    if (text) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(text));
    }
    if (strcmp(method, text ? "POST" : "GET"))
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);

    xfer_t x;
    xfer_init(&x, c, err);
    x.on_line = on_line;
    x.ctx = ctx;
    cr_status_t st = perform(h, &x, status);
    if (!st && !on_line && out && x.body.len) {
        json_error_t jerr;
        *out = json_loadb(x.body.data, x.body.len, 0, &jerr);
        if (!*out)
            st = cr_err_set(err, CR_E_CORRUPT, "bad JSON from server: %s", jerr.text);
    }
    xfer_free(&x);
    curl_slist_free_all(hdr);
    free(text);
    return st;
}

cr_status_t cli_http_head(cli_http_t *h, const char *path, long *status, cr_err_t *err)
{
    char url[4096];
    if (!make_url(h, path, url, sizeof url))
        return cr_err_set(err, CR_E_TOO_LARGE, "URL too long: %s", path);
    CURL *c = h->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    struct curl_slist *hdr = h->auth ? curl_slist_append(NULL, h->auth) : NULL;
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    xfer_t x;
    xfer_init(&x, c, err);
    long code = 0;
    cr_status_t st = perform(h, &x, &code);
    curl_slist_free_all(hdr);
    if (st && code >= 400) /* HEAD reports statuses, not errors */
        st = CR_OK;
    if (status)
        *status = code;
    xfer_free(&x);
    return st;
}

cr_status_t cli_http_post_file(cli_http_t *h, const char *path, FILE *f, uint64_t size,
                               cli_http_progress_fn progress, void *ctx, long *status,
                               cr_err_t *err)
{
    char url[4096];
    if (!make_url(h, path, url, sizeof url))
        return cr_err_set(err, CR_E_TOO_LARGE, "URL too long: %s", path);
    CURL *c = h->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_READDATA, f);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)size);
    struct curl_slist *hdr = NULL;
    hdr = curl_slist_append(hdr, "Content-Type: application/octet-stream");
    hdr = curl_slist_append(hdr, "Expect:");
    if (h->auth)
        hdr = curl_slist_append(hdr, h->auth);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    xfer_t x;
    xfer_init(&x, c, err);
    x.progress = progress;
    x.progress_ctx = ctx;
    cr_status_t st = perform(h, &x, status);
    xfer_free(&x);
    curl_slist_free_all(hdr);
    return st;
}
