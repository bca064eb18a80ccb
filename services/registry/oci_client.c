/* oci_client.c: HTTP to a remote registry with token and Basic auth (see
 * oci_client.h). */
#include "lib/prelude.h"
#include "services/registry/oci_client.h"
#include "lib/env.h"
#include "lib/log.h"

#include <ctype.h>
#include <curl/curl.h>
#include <jansson.h>
#include <openssl/rand.h>
#include <time.h>
#include <unistd.h>

#define CONNECT_TIMEOUT_S 30
#define REQUEST_TIMEOUT_S 600 /* one non-download request at most */

struct reg_oci {
    char base[REG_URL_MAX];  /* scheme://host */
    char host[CR_NAME_HOST_MAX + 1];
    char repo[CR_NAME_NS_MAX + 1 + CR_NAME_MODEL_MAX + 1];
    char basic[512];         /* "user:password" or "" (never logged) */
    char *token;             /* bearer token or NULL */
    bool use_basic;          /* the registry asked for Basic */
};

void reg_http_req_init(reg_http_req_t *r, const char *method, const char *url)
{
    memset(r, 0, sizeof *r);
    r->method = method;
    r->url = url;
    r->fd = -1;
}

void reg_http_resp_free(reg_http_resp_t *r)
{
    cr_buf_free(&r->body);
}

const char *reg_oci_base(const reg_oci_t *c)
{
    return c->base;
}

const char *reg_oci_repo(const reg_oci_t *c)
{
    return c->repo;
}

/* ---- credentials ---- */

static void load_basic(reg_oci_t *c)
{
    char path[1024];
    if (!cr_env_get("REGISTRY_AUTH_FILE", path, sizeof path)) {
        const char *home = getenv("HOME");
        if (!home || !*home)
            return;
        snprintf(path, sizeof path, "%s/.corral/registry-auth", home);
    }
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *p = line;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == '#' || !*p)
            continue;
        char *sp = p;
        while (*sp && !isspace((unsigned char)*sp))
            sp++;
        if (!*sp)
            continue;
        *sp++ = '\0';
        while (isspace((unsigned char)*sp))
            sp++;
        size_t n = strlen(sp);
        while (n && isspace((unsigned char)sp[n - 1]))
            sp[--n] = '\0';
        if (!strcasecmp(p, c->host) && strchr(sp, ':')) {
            snprintf(c->basic, sizeof c->basic, "%s", sp);
            break;
        }
    }
    explicit_bzero(line, sizeof line);
    fclose(f);
}

cr_status_t reg_oci_new(const cr_model_name_t *name, bool insecure,
                        reg_oci_t **out, cr_err_t *err)
{
    *out = NULL;
    if (!strcasecmp(name->scheme, "http") && !insecure)
        return cr_err_set(err, CR_E_INVALID, "insecure protocol http");
    reg_oci_t *c = calloc(1, sizeof *c);
    if (!c)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    snprintf(c->host, sizeof c->host, "%s", name->host);
    snprintf(c->base, sizeof c->base, "%s://%s", insecure ? "http" : "https",
             name->host);
    /* Distribution registries want lower-case repository names. */
    snprintf(c->repo, sizeof c->repo, "%s/%s", name->ns, name->model);
    for (char *p = c->repo; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    load_basic(c);
    *out = c;
    return CR_OK;
}

void reg_oci_destroy(reg_oci_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    reg_oci_t *c = *self_p;
    if (c->token) {
        explicit_bzero(c->token, strlen(c->token));
        free(c->token);
    }
    explicit_bzero(c->basic, sizeof c->basic);
    free(c);
    *self_p = NULL;
}

static void basic_header(const char *cred, char *buf, size_t cap)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(cred), o = 0;
    o += (size_t)snprintf(buf, cap, "Basic ");
    for (size_t i = 0; i < n && o + 5 < cap; i += 3) {
        uint32_t v = (uint32_t)(unsigned char)cred[i] << 16;
        if (i + 1 < n)
            v |= (uint32_t)(unsigned char)cred[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)cred[i + 2];
        buf[o++] = b64[(v >> 18) & 63];
        buf[o++] = b64[(v >> 12) & 63];
        buf[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
        buf[o++] = i + 2 < n ? b64[v & 63] : '=';
    }
    buf[o < cap ? o : cap - 1] = '\0';
}

void reg_oci_auth_header(reg_oci_t *c, char *buf, size_t cap)
{
    buf[0] = '\0';
    if (c->token)
        snprintf(buf, cap, "Bearer %s", c->token);
    else if (c->use_basic && c->basic[0])
        basic_header(c->basic, buf, cap);
}

/* ---- URLs ---- */

bool reg_url_resolve(const char *base, const char *ref, char *out, size_t cap)
{
    CURLU *u = curl_url();
    if (!u)
        return false;
    bool ok = false;
    char *s = NULL;
    if (curl_url_set(u, CURLUPART_URL, base, 0) == CURLUE_OK &&
        curl_url_set(u, CURLUPART_URL, ref, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_URL, &s, 0) == CURLUE_OK && strlen(s) < cap) {
        snprintf(out, cap, "%s", s);
        ok = true;
    }
    curl_free(s);
    curl_url_cleanup(u);
    return ok;
}

static bool url_origin(const char *url, char *out, size_t cap)
{
    CURLU *u = curl_url();
    if (!u)
        return false;
    char *scheme = NULL, *host = NULL, *port = NULL;
    bool ok = curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) ==
                  CURLUE_OK;
    if (ok) {
        snprintf(out, cap, "%s://%s:%s", scheme, host, port);
        for (char *p = out; *p; p++)
            *p = (char)tolower((unsigned char)*p);
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(port);
    curl_url_cleanup(u);
    return ok;
}

bool reg_url_same_origin(const char *a, const char *b)
{
    char oa[1024], ob[1024];
    return url_origin(a, oa, sizeof oa) && url_origin(b, ob, sizeof ob) &&
           !strcmp(oa, ob);
}

/* ---- challenges ---- */

static void get_param(const char *hdr, const char *key, char *out, size_t cap)
{
    out[0] = '\0';
    size_t kl = strlen(key);
    const char *p = hdr;
    while ((p = strcasestr(p, key)) != NULL) {
        bool start = p == hdr || p[-1] == ' ' || p[-1] == ',';
        if (start && p[kl] == '=') {
            const char *v = p + kl + 1;
            size_t n = 0;
            if (*v == '"') {
                v++;
                while (v[n] && v[n] != '"')
                    n++;
            } else {
                while (v[n] && v[n] != ',' && v[n] != ' ')
                    n++;
            }
            if (n >= cap)
                n = cap - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return;
        }
        p += kl;
    }
}

bool reg_parse_bearer(const char *hdr, char *realm, size_t realm_cap,
                      char *service, size_t service_cap, char *scope,
                      size_t scope_cap)
{
    while (*hdr == ' ')
        hdr++;
    if (strncasecmp(hdr, "Bearer ", 7) != 0)
        return false;
    hdr += 7;
    get_param(hdr, "realm", realm, realm_cap);
    get_param(hdr, "service", service, service_cap);
    get_param(hdr, "scope", scope, scope_cap);
    return realm[0] != '\0';
}

/* ---- transfers ---- */

typedef struct xfer {
    const reg_http_req_t *req;
    reg_http_resp_t *resp;
    int64_t sent;       /* bytes of a file body read so far */
    bool body_over;     /* response body went over its cap */
} xfer_t;

static size_t on_body(char *p, size_t sz, size_t n, void *ud)
{
    xfer_t *x = ud;
    size_t len = sz * n;
    if (cr_buf_append(&x->resp->body, p, len)) {
        x->body_over = true;
        return 0;
    }
    return len;
}

static size_t on_read(char *p, size_t sz, size_t n, void *ud)
{
    xfer_t *x = ud;
    int64_t left = x->req->fd_len - x->sent;
    size_t want = sz * n;
    if ((int64_t)want > left)
        want = (size_t)left;
    if (!want)
        return 0;
    ssize_t r = pread(x->req->fd, p, want, x->req->fd_offset + x->sent);
    if (r < 0)
        return CURL_READFUNC_ABORT;
    x->sent += r;
    return (size_t)r;
}

static void header_value(const char *line, size_t len, size_t name_len,
                         char *out, size_t cap)
{
    const char *v = line + name_len;
    size_t n = len - name_len;
    while (n && (*v == ' ' || *v == '\t'))
        v++, n--;
    while (n && (v[n - 1] == '\r' || v[n - 1] == '\n' || v[n - 1] == ' '))
        n--;
    if (n >= cap)
        n = cap - 1;
    memcpy(out, v, n);
    out[n] = '\0';
}

static size_t on_header(char *p, size_t sz, size_t n, void *ud)
{
    xfer_t *x = ud;
    size_t len = sz * n;
    reg_http_resp_t *r = x->resp;
    char tmp[REG_URL_MAX];
    if (len > 9 && !strncmp(p, "HTTP/", 5)) {
        /* A new response (after a 100 Continue): forget old headers. */
        r->location[0] = r->upload_location[0] = r->www_auth[0] = '\0';
        r->content_length = -1;
    } else if (len > 9 && !strncasecmp(p, "location:", 9)) {
        header_value(p, len, 9, tmp, sizeof tmp);
        if (!reg_url_resolve(x->req->url, tmp, r->location, sizeof r->location))
            r->location[0] = '\0';
    } else if (len > 23 && !strncasecmp(p, "docker-upload-location:", 23)) {
        header_value(p, len, 23, tmp, sizeof tmp);
        if (!reg_url_resolve(x->req->url, tmp, r->upload_location,
                             sizeof r->upload_location))
            r->upload_location[0] = '\0';
    } else if (len > 17 && !strncasecmp(p, "www-authenticate:", 17)) {
        header_value(p, len, 17, r->www_auth, sizeof r->www_auth);
    } else if (len > 15 && !strncasecmp(p, "content-length:", 15)) {
        header_value(p, len, 15, tmp, sizeof tmp);
        char *end;
        long long v = strtoll(tmp, &end, 10);
        r->content_length = end != tmp && v >= 0 ? v : -1;
    }
    return len;
}

static cr_status_t perform(const reg_http_req_t *req, const char *auth,
                           reg_http_resp_t *resp, cr_err_t *err)
{
    cr_buf_free(&resp->body);
    memset(resp, 0, sizeof *resp);
    resp->content_length = -1;
    cr_buf_init(&resp->body, req->body_max ? req->body_max : REG_HTTP_BODY_MAX);
    CURL *h = curl_easy_init();
    if (!h)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    xfer_t x = {req, resp, 0, false};
    /* curl's own words for a failure ("CONNECT tunnel failed, response
     * 407") say more than its code's ("Failure when receiving data") */
    char why[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, why);
    struct curl_slist *hs = NULL;
    char line[REG_TOKEN_MAX + 64];
    if (auth && *auth && !req->no_auth) {
        snprintf(line, sizeof line, "Authorization: %s", auth);
        hs = curl_slist_append(hs, line);
    }
    if (req->accept) {
        snprintf(line, sizeof line, "Accept: %s", req->accept);
        hs = curl_slist_append(hs, line);
    }
    if (req->content_type) {
        snprintf(line, sizeof line, "Content-Type: %s", req->content_type);
        hs = curl_slist_append(hs, line);
    }
    if (req->content_range) {
        snprintf(line, sizeof line, "Content-Range: %s", req->content_range);
        hs = curl_slist_append(hs, line);
    }
    hs = curl_slist_append(hs, "Expect:");
    explicit_bzero(line, sizeof line);

    curl_easy_setopt(h, CURLOPT_URL, req->url);
    if (req->range)
        curl_easy_setopt(h, CURLOPT_RANGE, req->range);
    curl_easy_setopt(h, CURLOPT_USERAGENT, REG_USER_AGENT);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, (long)CONNECT_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)REQUEST_TIMEOUT_S);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &x);
    const char *m = req->method;
    int64_t up_len = req->fd >= 0 ? req->fd_len : (int64_t)req->body_len;
    if (!strcmp(m, "HEAD")) {
        curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    } else if (!strcmp(m, "GET")) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else {
        /* PUT/POST/PATCH: an upload of up_len bytes (possibly 0). */
        curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, m);
        curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)up_len);
        if (req->fd >= 0) {
            curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
            curl_easy_setopt(h, CURLOPT_READDATA, &x);
        } else {
            /* A memory body: POSTFIELDS with the verb kept by
             * CUSTOMREQUEST. */
            curl_easy_setopt(h, CURLOPT_UPLOAD, 0L);
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body ? req->body : "");
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)up_len);
            if (!req->content_type) {
                /* libcurl adds form Content-Type to POSTFIELDS otherwise */
                hs = curl_slist_append(hs, "Content-Type: application/octet-stream");
                curl_easy_setopt(h, CURLOPT_HTTPHEADER, hs);
            }
        }
    }
    CURLcode rc = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->status);
    curl_easy_cleanup(h);
    curl_slist_free_all(hs);
    if (x.body_over)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "%s %s: response body over %zu bytes", m, req->url,
                          resp->body.max_bytes);
    if (rc != CURLE_OK)
        return cr_err_set(err, CR_E_UNAVAILABLE, "%s %s: %s", m, req->url,
                          why[0] ? why : curl_easy_strerror(rc));
    return CR_OK;
}

/* ---- tokens ---- */

static void nonce_b64url(char *out, size_t cap)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned char r[16];
    if (RAND_bytes(r, sizeof r) != 1)
        for (size_t i = 0; i < sizeof r; i++)
            r[i] = (unsigned char)(rand() & 0xff);
    size_t o = 0;
    for (size_t i = 0; i < sizeof r && o + 4 < cap; i += 3) {
        uint32_t v = (uint32_t)r[i] << 16;
        if (i + 1 < sizeof r)
            v |= (uint32_t)r[i + 1] << 8;
        if (i + 2 < sizeof r)
            v |= r[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        if (i + 1 < sizeof r)
            out[o++] = b64[(v >> 6) & 63];
        if (i + 2 < sizeof r)
            out[o++] = b64[v & 63];
    }
    out[o] = '\0';
}

static cr_status_t fetch_token(reg_oci_t *c, const char *challenge,
                               const char *req_url, cr_err_t *err)
{
    char realm[1024], service[512], scope[1024];
    if (!reg_parse_bearer(challenge, realm, sizeof realm, service,
                          sizeof service, scope, sizeof scope))
        return cr_err_set(err, CR_E_UNAUTHORIZED, "unauthorized: access denied");
    CURL *h = curl_easy_init();
    if (!h)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_buf_t url;
    cr_buf_init(&url, REG_URL_MAX);
    char *e = curl_easy_escape(h, service, 0);
    cr_buf_printf(&url, "%s%sservice=%s", realm, strchr(realm, '?') ? "&" : "?",
                  e ? e : "");
    curl_free(e);
    /* One scope= per space-separated scope. */
    char *save = NULL;
    for (char *s = strtok_r(scope, " ", &save); s; s = strtok_r(NULL, " ", &save)) {
        e = curl_easy_escape(h, s, 0);
        cr_buf_printf(&url, "&scope=%s", e ? e : "");
        curl_free(e);
    }
    char nonce[32];
    nonce_b64url(nonce, sizeof nonce);
    cr_status_t st = cr_buf_printf(&url, "&ts=%lld&nonce=%s",
                                   (long long)time(NULL), nonce);
    curl_easy_cleanup(h);
    if (st) {
        cr_buf_free(&url);
        return cr_err_set(err, CR_E_TOO_LARGE, "token URL too long");
    }
    if (strncasecmp(url.data, "https://", 8) && strncasecmp(url.data, "http://", 7)) {
        cr_buf_free(&url);
        return cr_err_set(err, CR_E_INVALID, "token realm is not an http(s) URL");
    }
    reg_http_req_t req;
    reg_http_req_init(&req, "GET", url.data);
    req.body_max = REG_TOKEN_MAX + 4096;
    char auth[800] = "";
    if (c->basic[0] && reg_url_same_origin(url.data, req_url))
        basic_header(c->basic, auth, sizeof auth);
    reg_http_resp_t resp = {0};
    st = perform(&req, auth, &resp, err);
    explicit_bzero(auth, sizeof auth);
    cr_buf_free(&url);
    if (st)
        goto out;
    if (resp.status == 401 || resp.status == 403) {
        st = cr_err_set(err, CR_E_UNAUTHORIZED, "unauthorized: access denied");
        goto out;
    }
    if (resp.status != 200) {
        st = reg_oci_status_err(&resp, err);
        goto out;
    }
    json_t *j = json_loadb(resp.body.data ? resp.body.data : "", resp.body.len,
                           0, NULL);
    json_t *t = json_object_get(j, "token");
    if (!json_is_string(t) || !*json_string_value(t))
        t = json_object_get(j, "access_token");
    if (!json_is_string(t) || !*json_string_value(t) ||
        strlen(json_string_value(t)) >= REG_TOKEN_MAX) {
        json_decref(j);
        st = cr_err_set(err, CR_E_UNAUTHORIZED,
                        "unauthorized: token response has no token");
        goto out;
    }
    if (c->token) {
        explicit_bzero(c->token, strlen(c->token));
        free(c->token);
    }
    c->token = strdup(json_string_value(t));
    json_decref(j);
    st = c->token ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
out:
    reg_http_resp_free(&resp);
    return st;
}

cr_status_t reg_oci_send(reg_oci_t *c, const reg_http_req_t *req,
                         reg_http_resp_t *resp, cr_err_t *err)
{
    char auth[REG_TOKEN_MAX + 16];
    /* Credentials go to the registry's own origin only (an upload
     * Location or a redirect elsewhere gets none). */
    bool own = !req->no_auth && reg_url_same_origin(req->url, c->base);
    for (int attempt = 0;; attempt++) {
        auth[0] = '\0';
        if (own)
            reg_oci_auth_header(c, auth, sizeof auth);
        cr_status_t st = perform(req, auth, resp, err);
        explicit_bzero(auth, sizeof auth);
        if (st || resp->status != 401 || !own)
            return st;
        if (attempt > 0)
            return cr_err_set(err, CR_E_UNAUTHORIZED, "unauthorized: access denied");
        const char *w = resp->www_auth;
        while (*w == ' ')
            w++;
        if (!strncasecmp(w, "Bearer ", 7)) {
            char challenge[sizeof resp->www_auth];
            snprintf(challenge, sizeof challenge, "%s", w);
            st = fetch_token(c, challenge, req->url, err);
            if (st)
                return st;
        } else if (!strncasecmp(w, "Basic", 5) && c->basic[0]) {
            c->use_basic = true;
        } else {
            return cr_err_set(err, CR_E_UNAUTHORIZED, "unauthorized: access denied");
        }
    }
}

cr_status_t reg_oci_status_err(const reg_http_resp_t *resp, cr_err_t *err)
{
    if (resp->status == 404)
        return cr_err_set(err, CR_E_NOT_FOUND, "not found");
    if (resp->status == 401 || resp->status == 403)
        return cr_err_set(err, CR_E_UNAUTHORIZED, "unauthorized: access denied");
    char body[201];
    size_t n = resp->body.len < 200 ? resp->body.len : 200;
    if (n)
        memcpy(body, resp->body.data, n);
    body[n] = '\0';
    while (n && isspace((unsigned char)body[n - 1]))
        body[--n] = '\0';
    return cr_err_set(err, CR_E_UNAVAILABLE, "%ld: %s", resp->status, body);
}
