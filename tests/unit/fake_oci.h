/* fake_oci.h: a small fake OCI distribution registry for tests: a thread
 * serving plain-socket HTTP/1.1 on 127.0.0.1 (one request per connection)
 * with switchable misbehaviour (wrong bytes, truncated bodies, a Bearer
 * challenge with a token endpoint, Basic auth, redirects to another host,
 * ignored ranges) and counters of what it saw and sent. Header-only:
 * include it from one test file. The repository it serves is library/m,
 * tag t. */
#ifndef CR_FAKE_OCI_H
#define CR_FAKE_OCI_H

#include "lib/prelude.h"
#include "services/registry/manifest.h"
#include "services/registry/store.h"
#include "tests/unit/check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

/* Lower-case hex SHA-256 (the fake links nothing of the registry). */
static void fake_sha256_hex(const void *data, size_t len, char hex[REG_HEX_LEN + 1])
{
    unsigned char md[32];
    unsigned int n = 0;
    EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
}

#define MAX_BLOBS 8

typedef struct blob {
    char hex[REG_HEX_LEN + 1];
    unsigned char *data;
    size_t len;
} blob_t;

typedef struct fake {
    int lfd;
    int port;
    pthread_t th;
    atomic_bool stop;
    pthread_mutex_t mu;
    /* what it serves */
    char manifest[4096];
    blob_t blobs[MAX_BLOBS];
    int n_blobs;
    bool corrupt;            /* flip the first byte of every blob body */
    int truncate_count;      /* responses to cut short */
    int64_t truncate_after;  /* body bytes sent before cutting */
    bool require_token;      /* /v2/ wants Bearer tok-123 */
    bool token_refuse;       /* the token endpoint answers 401 */
    bool require_basic;      /* /v2/ wants Basic user:pass */
    bool ignore_range;       /* answer every blob GET 200 with all bytes */
    char redirect_to[128];   /* blob requests -> 307 <redirect_to>/cdn/... */
    int delay_ms;            /* before each blob body */
    int64_t rate_bps;        /* blob bodies at most this fast (0: at once) */
    atomic_bool hold;        /* with rate_bps: bodies pause while set */
    bool threaded;           /* a thread per connection, so one slow body
                                does not hold the others up */
    atomic_int conns;        /* connection threads running */
    /* what it saw */
    atomic_int token_hits;
    atomic_int auth_seen;    /* requests that carried Authorization */
    atomic_llong blob_bytes; /* blob body bytes sent */
    char last_token_query[512];
    /* push side */
    unsigned char *upload;   /* bytes of the upload in progress */
    size_t upload_len;
    int uploads_opened, patches, mounts;
    char manifest_ctype[128];
    char last_mount_query[512];
} fake_t;

static bool send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static void respond(int fd, int code, const char *extra, const void *body,
                    size_t len, bool head)
{
    char h[1024];
    int n = snprintf(h, sizeof h,
                     "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
                     code, len, extra ? extra : "");
    send_all(fd, h, (size_t)n);
    if (!head && len)
        send_all(fd, body, len);
}

static const char *header(const char *req, const char *name, char *out,
                          size_t cap)
{
    out[0] = '\0';
    const char *p = strcasestr(req, name);
    if (!p)
        return NULL;
    p += strlen(name);
    while (*p == ' ')
        p++;
    size_t n = strcspn(p, "\r\n");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

static void serve_blob(fake_t *f, int fd, const blob_t *b, const char *req,
                       bool head)
{
    char range[128];
    int64_t a = 0, z = (int64_t)b->len - 1;
    int code = 200;
    if (!f->ignore_range && header(req, "\r\nRange:", range, sizeof range)) {
        long long x, y;
        if (sscanf(range, "bytes=%lld-%lld", &x, &y) == 2) {
            a = x;
            z = y < (long long)b->len ? y : (long long)b->len - 1;
            code = 206;
        }
    }
    if (a > z || a >= (int64_t)b->len) {
        respond(fd, 416, NULL, NULL, 0, false);
        return;
    }
    size_t len = (size_t)(z - a + 1);
    char extra[256];
    snprintf(extra, sizeof extra,
             "Accept-Ranges: bytes\r\nContent-Range: bytes %lld-%lld/%zu\r\n",
             (long long)a, (long long)z, b->len);
    if (head) {
        respond(fd, code == 206 ? 200 : 200, extra, NULL, len, true);
        return;
    }
    if (f->delay_ms)
        usleep((useconds_t)f->delay_ms * 1000);
    unsigned char *copy = malloc(len);
    memcpy(copy, b->data + a, len);
    if (f->corrupt && a == 0)
        copy[0] ^= 0xff;
    size_t send_len = len;
    /* The client's one-byte probe (resolving the URL) is neither counted
     * nor cut. */
    bool probe = code == 206 && a == 0 && z == 0;
    pthread_mutex_lock(&f->mu);
    if (f->truncate_count > 0 && !probe) {
        f->truncate_count--;
        if ((int64_t)send_len > f->truncate_after)
            send_len = (size_t)f->truncate_after;
    }
    pthread_mutex_unlock(&f->mu);
    char h[512];
    int n = snprintf(h, sizeof h,
                     "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n%s\r\n",
                     code, len, extra);
    send_all(fd, h, (size_t)n);
    if (f->rate_bps > 0 && !probe) {
        /* A slow link: a twentieth of the rate every 50 ms, until the
         * client goes or the fake stops. */
        size_t step = (size_t)CR_MAX(f->rate_bps / 20, (int64_t)1);
        for (size_t off = 0; off < send_len && !atomic_load(&f->stop);) {
            if (atomic_load(&f->hold)) {
                usleep(10 * 1000);
                continue;
            }
            size_t k = CR_MIN(step, send_len - off);
            if (!send_all(fd, copy + off, k))
                break;
            off += k;
            atomic_fetch_add(&f->blob_bytes, (long long)k);
            usleep(50 * 1000);
        }
    } else if (send_all(fd, copy, send_len) && !probe) {
        atomic_fetch_add(&f->blob_bytes, (long long)send_len);
    }
    free(copy);
}

static void handle_req(fake_t *f, int fd, const char *req, const char *method,
                       const char *path, const unsigned char *body,
                       size_t body_len);

static void handle(fake_t *f, int fd)
{
    char req[8192];
    size_t got = 0;
    while (got < sizeof req - 1) {
        ssize_t r = recv(fd, req + got, sizeof req - 1 - got, 0);
        if (r <= 0)
            break;
        got += (size_t)r;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    req[got] = '\0';
    char method[16], path[1024];
    if (sscanf(req, "%15s %1023s", method, path) != 2)
        return;
    /* The body: what followed the headers, then the rest. */
    unsigned char *body = NULL;
    size_t body_len = 0;
    char cl[64];
    char *hend = strstr(req, "\r\n\r\n");
    if (hend && header(req, "\r\nContent-Length:", cl, sizeof cl)) {
        body_len = (size_t)atoll(cl);
        if (body_len > (1u << 22))
            body_len = 0;
        body = malloc(body_len + 1);
        size_t have = got - (size_t)(hend + 4 - req);
        if (have > body_len)
            have = body_len;
        memcpy(body, hend + 4, have);
        while (have < body_len) {
            ssize_t r = recv(fd, body + have, body_len - have, 0);
            if (r <= 0)
                break;
            have += (size_t)r;
        }
        body_len = have;
    }
    handle_req(f, fd, req, method, path, body, body_len);
    free(body);
}

static void handle_req(fake_t *f, int fd, const char *req, const char *method,
                       const char *path, const unsigned char *body,
                       size_t body_len)
{
    bool head = !strcmp(method, "HEAD");
    char auth[512];
    bool has_auth = header(req, "\r\nAuthorization:", auth, sizeof auth) != NULL;
    if (has_auth)
        atomic_fetch_add(&f->auth_seen, 1);

    if (!strncmp(path, "/token", 6)) {
        atomic_fetch_add(&f->token_hits, 1);
        snprintf(f->last_token_query, sizeof f->last_token_query, "%.500s", path);
        if (f->token_refuse) {
            respond(fd, 401, NULL, "{}", 2, false);
            return;
        }
        const char *t = "{\"token\":\"tok-123\"}";
        respond(fd, 200, "Content-Type: application/json\r\n", t, strlen(t), false);
        return;
    }
    if (!strncmp(path, "/cdn/sha256:", 12)) {
        for (int i = 0; i < f->n_blobs; i++)
            if (!strcmp(path + 12, f->blobs[i].hex)) {
                serve_blob(f, fd, &f->blobs[i], req, head);
                return;
            }
        respond(fd, 404, NULL, NULL, 0, false);
        return;
    }
    if (f->require_basic && (!has_auth || strcmp(auth, "Basic dXNlcjpwYXNz") != 0)) {
        respond(fd, 401, "WWW-Authenticate: Basic realm=\"fake\"\r\n", NULL, 0, head);
        return;
    }
    if (f->require_token && (!has_auth || strcmp(auth, "Bearer tok-123") != 0)) {
        char extra[512];
        snprintf(extra, sizeof extra,
                 "WWW-Authenticate: Bearer realm=\"http://127.0.0.1:%d/token\","
                 "service=\"fake-registry\",scope=\"repository:library/m:pull\"\r\n",
                 f->port);
        respond(fd, 401, extra, "{\"errors\":[]}", 13, head);
        return;
    }
    const char *up = "/v2/library/m/blobs/uploads/";
    if (!strcmp(method, "POST") && !strncmp(path, up, strlen(up))) {
        if (strstr(path, "mount=")) {
            snprintf(f->last_mount_query, sizeof f->last_mount_query, "%.500s", path);
            f->mounts++;
            respond(fd, 201, NULL, NULL, 0, false);
            return;
        }
        f->uploads_opened++;
        free(f->upload);
        f->upload = NULL;
        f->upload_len = 0;
        respond(fd, 202, "Location: /v2/library/m/blobs/uploads/u1?_state=0\r\n",
                NULL, 0, false);
        return;
    }
    if (!strcmp(method, "PATCH") && !strncmp(path, up, strlen(up))) {
        f->patches++;
        unsigned char *n = realloc(f->upload, f->upload_len + body_len + 1);
        memcpy(n + f->upload_len, body, body_len);
        f->upload = n;
        f->upload_len += body_len;
        char extra[128];
        snprintf(extra, sizeof extra,
                 "Location: http://127.0.0.1:%d/v2/library/m/blobs/uploads/u1?_state=%zu\r\n",
                 f->port, f->upload_len);
        respond(fd, 202, extra, NULL, 0, false);
        return;
    }
    if (!strcmp(method, "PUT") && !strncmp(path, up, strlen(up))) {
        const char *d = strstr(path, "digest=sha256:");
        char hex[REG_HEX_LEN + 1];
        fake_sha256_hex(f->upload ? f->upload : (const unsigned char *)"", f->upload_len, hex);
        if (!d || strncmp(d + 14, hex, REG_HEX_LEN) != 0 || f->n_blobs >= MAX_BLOBS) {
            respond(fd, 400, NULL, "{\"errors\":[{\"code\":\"DIGEST_INVALID\"}]}", 39, false);
            return;
        }
        blob_t *b = &f->blobs[f->n_blobs++];
        snprintf(b->hex, sizeof b->hex, "%s", hex);
        b->data = f->upload ? f->upload : malloc(1);
        b->len = f->upload_len;
        f->upload = NULL;
        f->upload_len = 0;
        respond(fd, 201, NULL, NULL, 0, false);
        return;
    }
    const char *mp = "/v2/library/m/manifests/";
    if (!strcmp(method, "PUT") && !strncmp(path, mp, strlen(mp))) {
        header(req, "\r\nContent-Type:", f->manifest_ctype, sizeof f->manifest_ctype);
        size_t n = body_len < sizeof f->manifest - 1 ? body_len : sizeof f->manifest - 1;
        memcpy(f->manifest, body, n);
        f->manifest[n] = '\0';
        respond(fd, 201, NULL, NULL, 0, false);
        return;
    }
    if (!strncmp(path, mp, strlen(mp))) {
        if (!f->manifest[0] || strcmp(path + strlen(mp), "t") != 0) {
            const char *e = "{\"errors\":[{\"code\":\"MANIFEST_UNKNOWN\"}]}";
            respond(fd, 404, NULL, e, strlen(e), head);
            return;
        }
        respond(fd, 200,
                "Content-Type: application/vnd.docker.distribution.manifest.v2+json\r\n",
                f->manifest, strlen(f->manifest), head);
        return;
    }
    const char *bp = "/v2/library/m/blobs/sha256:";
    if (!strncmp(path, bp, strlen(bp))) {
        const char *hex = path + strlen(bp);
        if (f->redirect_to[0]) {
            char extra[512];
            if (snprintf(extra, sizeof extra, "Location: %s/cdn/sha256:%s\r\n",
                         f->redirect_to, hex) >= (int)sizeof extra) {
                respond(fd, 414, "", NULL, 0, false); /* URI too long */
                return;
            }
            respond(fd, 307, extra, NULL, 0, false);
            return;
        }
        for (int i = 0; i < f->n_blobs; i++)
            if (!strcmp(hex, f->blobs[i].hex)) {
                serve_blob(f, fd, &f->blobs[i], req, head);
                return;
            }
    }
    respond(fd, 404, NULL, NULL, 0, head);
}

static void serve_conn(fake_t *f, int fd)
{
    handle(f, fd);
    shutdown(fd, SHUT_WR);
    char sink[256];
    struct pollfd q = {fd, POLLIN, 0};
    while (poll(&q, 1, 100) > 0 && recv(fd, sink, sizeof sink, 0) > 0) {
    }
    close(fd);
}

typedef struct fake_conn {
    fake_t *f;
    int fd;
} fake_conn_t;

static void *conn_main(void *arg)
{
    fake_conn_t *c = arg;
    serve_conn(c->f, c->fd);
    atomic_fetch_sub(&c->f->conns, 1);
    free(c);
    return NULL;
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {f->lfd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        fake_conn_t *c = f->threaded ? malloc(sizeof *c) : NULL;
        pthread_t th;
        if (c) {
            c->f = f;
            c->fd = fd;
            atomic_fetch_add(&f->conns, 1);
            if (pthread_create(&th, NULL, conn_main, c) == 0) {
                pthread_detach(th);
                continue;
            }
            atomic_fetch_sub(&f->conns, 1);
            free(c);
        }
        serve_conn(f, fd);
    }
    return NULL;
}

static void fake_start(fake_t *f)
{
    memset(f, 0, sizeof *f);
    pthread_mutex_init(&f->mu, NULL);
    f->lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(f->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    CHECK(bind(f->lfd, (struct sockaddr *)&a, sizeof a) == 0);
    socklen_t al = sizeof a;
    getsockname(f->lfd, (struct sockaddr *)&a, &al);
    f->port = ntohs(a.sin_port);
    CHECK(listen(f->lfd, 64) == 0);
    pthread_create(&f->th, NULL, fake_main, f);
}

static void fake_stop(fake_t *f)
{
    atomic_store(&f->stop, true);
    pthread_join(f->th, NULL);
    while (atomic_load(&f->conns) > 0) /* each ends within a send step */
        usleep(10 * 1000);
    close(f->lfd);
    for (int i = 0; i < f->n_blobs; i++)
        free(f->blobs[i].data);
    free(f->upload);
    pthread_mutex_destroy(&f->mu);
}

static const char *fake_add_blob(fake_t *f, size_t len, unsigned seed)
{
    blob_t *b = &f->blobs[f->n_blobs++];
    b->data = malloc(len ? len : 1);
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        b->data[i] = (unsigned char)(seed >> 16);
    }
    b->len = len;
    fake_sha256_hex(b->data, len, b->hex);
    return b->hex;
}

/* Adds the config blob (blob 0 of a manifest) of a GGUF model of
 * `family`, as Ollama's registry serves it. */
static inline void fake_add_config(fake_t *f, const char *family)
{
    char cfg[512];
    int n = snprintf(cfg, sizeof cfg,
                     "{\"model_format\":\"gguf\",\"model_family\":\"%s\","
                     "\"model_families\":[\"%s\"],\"model_type\":\"1M\","
                     "\"file_type\":\"F32\",\"architecture\":\"amd64\",\"os\":\"linux\"}",
                     family, family);
    blob_t *b = &f->blobs[f->n_blobs++];
    b->len = (size_t)n;
    b->data = malloc(b->len);
    memcpy(b->data, cfg, b->len);
    fake_sha256_hex(b->data, b->len, b->hex);
}

/* A manifest of the config (blob 0) and layers (the rest). */
static void fake_set_manifest(fake_t *f)
{
    int n = snprintf(f->manifest, sizeof f->manifest,
                     "{\"schemaVersion\":2,\"mediaType\":\"" REG_MT_MANIFEST
                     "\",\"config\":{\"mediaType\":\"" REG_MT_CONFIG
                     "\",\"digest\":\"sha256:%s\",\"size\":%zu},\"layers\":[",
                     f->blobs[0].hex, f->blobs[0].len);
    for (int i = 1; i < f->n_blobs; i++)
        n += snprintf(f->manifest + n, sizeof f->manifest - (size_t)n,
                      "%s{\"mediaType\":\"%s\",\"digest\":\"sha256:%s\",\"size\":%zu}",
                      i > 1 ? "," : "", i == 1 ? REG_MT_MODEL : REG_MT_LICENSE,
                      f->blobs[i].hex, f->blobs[i].len);
    snprintf(f->manifest + n, sizeof f->manifest - (size_t)n, "]}");
}


#endif
