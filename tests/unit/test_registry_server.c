/* test_registry_server.c: the registry server object driven through
 * encoded bus frames in-process (dispatch, replies and ids, malformed
 * frames, chunked uploads and their timeout, create progress), then the
 * real corral-registry binary on an ipc:// socket in a temp dir (garbage
 * and multi-frame messages answered with errors, the service keeps
 * serving, SIGTERM exits cleanly). */
#include "lib/prelude.h"
#include "lib/gguf_write.h"
#include "proto/bus.h"
#include "proto/msg.h"
#include "services/registry/server.h"
#include "services/registry/store.h"
#include "tests/unit/check.h"

#include <dirent.h>
#include <ftw.h>
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp_g[256];

static int rm_one(const char *p, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    CR_UNUSED(sb);
    CR_UNUSED(flag);
    CR_UNUSED(ftw);
    return remove(p);
}

/* ---- reply capture ---- */

#define MAX_REPLIES 64
#include "tests/unit/reg_capture.h"

/* Encodes m and hands the frame to the server; replies land in c. */
static void send_msg(reg_server_t *s, const msg_t *m, capture_t *c)
{
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_err_t err;
    CHECK_MSG(msg_encode(m, &b, &err) == CR_OK, "encode: %s", err.msg);
    capture_clear(c);
    reg_server_handle_frame(s, b.data, b.len, capture_fn, c);
    cr_buf_free(&b);
}

static void send_raw(reg_server_t *s, const void *data, size_t len,
                     capture_t *c)
{
    capture_clear(c);
    reg_server_handle_frame(s, data, len, capture_fn, c);
}

static bool is_error(const capture_t *c, int i, cr_status_t st,
                     const char *msg_has)
{
    if (i >= c->n || c->v[i].type != MSG_error)
        return false;
    if (c->v[i].u.error.status != st)
        return false;
    return !msg_has || strstr(c->v[i].u.error.message, msg_has) != NULL;
}

static int count_temp_blobs(reg_server_t *s)
{
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/blobs", reg_store_root(reg_server_store(s)));
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, ".corral-tmp-", 12);
    if (d)
        closedir(d);
    return n;
}

static void *tiny_gguf(size_t *len)
{
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    cr_err_t err;
    static float data[16];
    uint64_t ne[2] = {4, 4};
    bool ok = !cr_gguf_writer_add_str(w, "general.architecture", "llama", &err) &&
              !cr_gguf_writer_add_u32(w, "general.file_type", 1, &err) &&
              !cr_gguf_writer_add_tensor(w, "token_embd.weight", 2, ne,
                                         CR_TYPE_F32, data, NULL, &err);
    void *out = NULL;
    if (!ok || cr_gguf_writer_write_memory(w, &out, len, &err)) {
        fprintf(stderr, "gguf: %s\n", err.msg);
        exit(1);
    }
    cr_gguf_writer_destroy(&w);
    return out;
}

/* Uploads data through blob_put pieces of `piece` bytes; returns the final
 * reply's status (CR_OK: ok). */
static void put_pieces(reg_server_t *s, const char *id, const char *digest,
                       const uint8_t *data, size_t len, size_t piece,
                       capture_t *c, bool *created)
{
    size_t off = 0;
    do {
        size_t n = CR_MIN(piece, len - off);
        msg_t m;
        msg_init(&m, MSG_blob_put, id);
        m.u.blob_put.digest = (char *)digest;
        m.u.blob_put.has_digest = true;
        m.u.blob_put.offset = (int64_t)off;
        m.u.blob_put.has_offset = true;
        m.u.blob_put.data.data = (uint8_t *)data + off;
        m.u.blob_put.data.len = n;
        m.u.blob_put.has_data = true;
        bool last = off + n == len;
        m.u.blob_put.last = last;
        m.u.blob_put.has_last = true;
        send_msg(s, &m, c);
        CHECK_EQ_INT(c->n, 1);
        CHECK_EQ_STR(c->v[0].id, id);
        if (!last) {
            CHECK(c->v[0].type == MSG_ok && !c->v[0].u.ok.has_created);
        } else if (c->v[0].type == MSG_ok) {
            CHECK(c->v[0].u.ok.has_created);
            *created = c->v[0].u.ok.created;
        }
        if (c->v[0].type != MSG_ok)
            return;
        off += n;
    } while (off < len);
}

static void digest_of(const void *data, size_t len, char *out)
{
    char hex[REG_HEX_LEN + 1];
    reg_sha256_hex(data, len, hex);
    sprintf(out, "sha256:%s", hex);
}

/* ---- in-process ---- */

static void test_malformed(reg_server_t *s)
{
    capture_t c = {0};
    /* not msgpack at all */
    send_raw(s, "\xc1\xc1\xc1", 3, &c);
    CHECK_EQ_INT(c.n, 1);
    CHECK(is_error(&c, 0, CR_E_PROTO, NULL));
    /* empty frame */
    send_raw(s, "", 0, &c);
    CHECK(is_error(&c, 0, CR_E_PROTO, NULL));
    /* a readable id but a missing required field: the error keeps the id */
    const uint8_t show_no_model[] = {0x83, 0xa1, 'v', 0x01, 0xa4, 't', 'y', 'p', 'e',
                                     0xa4, 's', 'h', 'o', 'w', 0xa2, 'i', 'd', 0xa3,
                                     'a', 'b', 'c'};
    send_raw(s, show_no_model, sizeof show_no_model, &c);
    CHECK(is_error(&c, 0, CR_E_PROTO, "model"));
    CHECK_EQ_STR(c.v[0].id, "abc");
    /* a wrong protocol version */
    const uint8_t v9[] = {0x83, 0xa1, 'v', 0x09, 0xa4, 't', 'y', 'p', 'e', 0xa4,
                          't', 'a', 'g', 's', 0xa2, 'i', 'd', 0xa1, 'z'};
    send_raw(s, v9, sizeof v9, &c);
    CHECK(is_error(&c, 0, CR_E_PROTO, NULL));
    /* truncated in the middle of a string */
    send_raw(s, show_no_model, 12, &c);
    CHECK(is_error(&c, 0, CR_E_PROTO, NULL));
    /* a message the registry does not serve */
    msg_t m;
    msg_init(&m, MSG_chunk, "q1");
    send_msg(s, &m, &c);
    CHECK(is_error(&c, 0, CR_E_PROTO, "unexpected message type 'chunk'"));
    CHECK_EQ_STR(c.v[0].id, "q1");
    /* and it keeps serving */
    msg_init(&m, MSG_ping, "p1");
    send_msg(s, &m, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_pong);
    CHECK_EQ_STR(c.v[0].id, "p1");
    capture_clear(&c);
}

static void test_uploads(reg_server_t *s)
{
    capture_t c = {0};
    uint8_t data[1000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (uint8_t)(i * 7);
    char digest[80];
    digest_of(data, sizeof data, digest);

    bool created = false;
    put_pieces(s, "u1", digest, data, sizeof data, 300, &c, &created);
    CHECK(c.v[0].type == MSG_ok && created);
    CHECK_EQ_INT(reg_server_uploads(s), 0);
    CHECK_EQ_INT(count_temp_blobs(s), 0);
    msg_t m;
    msg_init(&m, MSG_blob_head, "h1");
    m.u.blob_head.digest = digest;
    m.u.blob_head.has_digest = true;
    send_msg(s, &m, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_ok);
    CHECK_EQ_STR(c.v[0].id, "h1");

    /* the same blob again: ok, not created */
    put_pieces(s, "u2", digest, data, sizeof data, 1000, &c, &created);
    CHECK(c.v[0].type == MSG_ok && !created);

    /* a mismatch: the last piece is an error, nothing is left behind */
    char other[80];
    digest_of("something else", 14, other);
    put_pieces(s, "u3", other, data, sizeof data, 400, &c, &created);
    CHECK(is_error(&c, 0, CR_E_INVALID, "digest mismatch, expected \""));
    if (c.n) {
        char want[300];
        snprintf(want, sizeof want,
                 "digest mismatch, expected \"%s\", got \"%s\"", other, digest);
        CHECK_EQ_STR(c.v[0].u.error.message, want);
    }
    CHECK_EQ_INT(reg_server_uploads(s), 0);
    CHECK_EQ_INT(count_temp_blobs(s), 0);
    msg_init(&m, MSG_blob_head, "h2");
    m.u.blob_head.digest = other;
    m.u.blob_head.has_digest = true;
    send_msg(s, &m, &c);
    CHECK(is_error(&c, 0, CR_E_NOT_FOUND, NULL));

    /* a malformed digest */
    msg_init(&m, MSG_blob_put, "u4");
    m.u.blob_put.digest = "sha256:nothex";
    m.u.blob_put.has_digest = true;
    m.u.blob_put.has_offset = true;
    send_msg(s, &m, &c);
    CHECK(is_error(&c, 0, CR_E_INVALID, "invalid digest format"));

    /* out of order: the upload is dropped */
    char d2[80];
    uint8_t data2[100] = {1, 2, 3};
    digest_of(data2, sizeof data2, d2);
    msg_init(&m, MSG_blob_put, "u5");
    m.u.blob_put.digest = d2;
    m.u.blob_put.has_digest = true;
    m.u.blob_put.has_offset = true;
    m.u.blob_put.data.data = data2;
    m.u.blob_put.data.len = 50;
    m.u.blob_put.has_data = true;
    send_msg(s, &m, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_ok);
    CHECK_EQ_INT(reg_server_uploads(s), 1);
    m.u.blob_put.offset = 60;
    send_msg(s, &m, &c);
    CHECK(is_error(&c, 0, CR_E_INVALID, "piece at offset 60, expected 50"));
    CHECK_EQ_INT(reg_server_uploads(s), 0);
    CHECK_EQ_INT(count_temp_blobs(s), 0);
    /* a middle piece with no upload in progress */
    send_msg(s, &m, &c);
    CHECK(is_error(&c, 0, CR_E_INVALID, "no upload in progress"));

    /* abandoned: dropped after the timeout, temp file removed (the ticks
     * are given times relative to when the piece came, so a slow machine
     * that takes 50 ms between two lines cannot expire it early) */
    reg_server_set_upload_timeout(s, 50);
    m.u.blob_put.offset = 0;
    int64_t before_ms = reg_server_now_ms();
    send_msg(s, &m, &c);
    int64_t after_ms = reg_server_now_ms();
    CHECK(c.n == 1 && c.v[0].type == MSG_ok);
    CHECK_EQ_INT(reg_server_uploads(s), 1);
    CHECK_EQ_INT(count_temp_blobs(s), 1);
    reg_server_tick(s, before_ms + 50); /* at most 50 ms after the piece */
    CHECK_EQ_INT(reg_server_uploads(s), 1); /* not yet */
    reg_server_tick(s, after_ms + 51); /* more than 50 ms after it */
    CHECK_EQ_INT(reg_server_uploads(s), 0);
    CHECK_EQ_INT(count_temp_blobs(s), 0);
    reg_server_set_upload_timeout(s, 60 * 1000);

    /* canceled mid-upload: dropped at once, no reply */
    send_msg(s, &m, &c);
    CHECK_EQ_INT(reg_server_uploads(s), 1);
    msg_t cancel;
    msg_init(&cancel, MSG_cancel, "u5");
    send_msg(s, &cancel, &c);
    CHECK_EQ_INT(c.n, 0);
    CHECK_EQ_INT(reg_server_uploads(s), 0);
    CHECK_EQ_INT(count_temp_blobs(s), 0);
    send_msg(s, &cancel, &c); /* nothing to cancel: still silent */
    CHECK_EQ_INT(c.n, 0);

    /* two interleaved uploads with different ids */
    char d3[80];
    digest_of(data, 500, d3);
    msg_t a, b;
    msg_init(&a, MSG_blob_put, "ia");
    a.u.blob_put.digest = d3;
    a.u.blob_put.has_digest = a.u.blob_put.has_offset = a.u.blob_put.has_data = true;
    a.u.blob_put.data.data = data;
    a.u.blob_put.data.len = 250;
    msg_init(&b, MSG_blob_put, "ib");
    b.u.blob_put = a.u.blob_put;
    send_msg(s, &a, &c);
    send_msg(s, &b, &c);
    CHECK_EQ_INT(reg_server_uploads(s), 2);
    a.u.blob_put.offset = b.u.blob_put.offset = 250;
    a.u.blob_put.data.data = b.u.blob_put.data.data = data + 250;
    a.u.blob_put.last = b.u.blob_put.last = true;
    a.u.blob_put.has_last = b.u.blob_put.has_last = true;
    send_msg(s, &a, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_ok && c.v[0].u.ok.created);
    send_msg(s, &b, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_ok && !c.v[0].u.ok.created);
    CHECK_EQ_INT(reg_server_uploads(s), 0);
    capture_clear(&c);
}

static void test_model_requests(reg_server_t *s)
{
    capture_t c = {0};
    size_t len;
    uint8_t *g = tiny_gguf(&len);
    char digest[80];
    digest_of(g, len, digest);
    bool created = false;
    put_pieces(s, "up", digest, g, len, 64, &c, &created);
    CHECK(created);
    free(g);

    /* create: progress..., then ok, all with the request id */
    msg_t m;
    msg_init(&m, MSG_create, "c1");
    msg_file_ref_t file = {.name = "m.gguf", .has_name = true,
                           .digest = digest, .has_digest = true};
    m.u.create.model = "served";
    m.u.create.has_model = true;
    m.u.create.files.v = &file;
    m.u.create.files.n = 1;
    m.u.create.has_files = true;
    m.u.create.system = "hello";
    m.u.create.has_system = true;
    send_msg(s, &m, &c);
    CHECK(c.n >= 5);
    for (int i = 0; i < c.n; i++)
        CHECK_EQ_STR(c.v[i].id, "c1");
    if (c.n >= 5) {
        CHECK(c.v[0].type == MSG_progress);
        CHECK_EQ_STR(c.v[0].u.progress.status, "parsing GGUF");
        CHECK_EQ_STR(c.v[c.n - 3].u.progress.status, "writing manifest");
        CHECK_EQ_STR(c.v[c.n - 2].u.progress.status, "success");
        CHECK(c.v[c.n - 1].type == MSG_ok);
    }
    /* create errors end with an error after any progress */
    m.u.create.model = "../bad";
    send_msg(s, &m, &c);
    CHECK(c.n == 1 && is_error(&c, 0, CR_E_INVALID, "invalid model name"));
    m.u.create.model = "x";
    m.u.create.has_files = false;
    send_msg(s, &m, &c);
    CHECK(is_error(&c, c.n - 1, CR_E_INVALID, "neither 'from' or 'files' was specified"));

    /* tags */
    msg_init(&m, MSG_tags, "t1");
    send_msg(s, &m, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_tags_reply);
    CHECK_EQ_STR(c.v[0].id, "t1");
    CHECK(c.v[0].u.tags_reply.models.n == 1 &&
          !strcmp(c.v[0].u.tags_reply.models.v[0].name, "served:latest"));
    if (c.v[0].u.tags_reply.models.n == 1)
        CHECK_EQ_STR(c.v[0].u.tags_reply.models.v[0].details->quantization_level, "F16");

    /* show */
    msg_init(&m, MSG_show, "s1");
    m.u.show.model = "served";
    m.u.show.has_model = true;
    send_msg(s, &m, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_show_reply);
    if (c.n == 1 && c.v[0].type == MSG_show_reply) {
        json_t *j = json_loads(c.v[0].u.show_reply.body, 0, NULL);
        CHECK(j && !strcmp(json_string_value(json_object_get(j, "system")), "hello"));
        json_decref(j);
    }
    m.u.show.model = "absent";
    send_msg(s, &m, &c);
    CHECK(is_error(&c, 0, CR_E_NOT_FOUND, "model 'absent' not found"));
    CHECK_EQ_STR(c.v[0].id, "s1");

    /* resolve */
    msg_init(&m, MSG_resolve, "r1");
    m.u.resolve.model = "served:latest";
    m.u.resolve.has_model = true;
    send_msg(s, &m, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_resolved);
    if (c.n == 1 && c.v[0].type == MSG_resolved) {
        CHECK_EQ_STR(c.v[0].u.resolved.name, "served:latest");
        CHECK(access(c.v[0].u.resolved.model_path, R_OK) == 0);
        CHECK_EQ_STR(c.v[0].u.resolved.system, "hello");
    }
    m.u.resolve.model = "nope";
    send_msg(s, &m, &c);
    CHECK(is_error(&c, 0, CR_E_NOT_FOUND, "model \"nope\" not found"));

    /* copy, delete */
    msg_init(&m, MSG_copy, "k1");
    m.u.copy.source = "served";
    m.u.copy.destination = "copied";
    m.u.copy.has_source = m.u.copy.has_destination = true;
    send_msg(s, &m, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_ok);
    CHECK_EQ_STR(c.v[0].id, "k1");
    msg_init(&m, MSG_delete, "d1");
    m.u.delete.model = "copied";
    m.u.delete.has_model = true;
    send_msg(s, &m, &c);
    CHECK(c.n == 1 && c.v[0].type == MSG_ok);
    send_msg(s, &m, &c);
    CHECK(is_error(&c, 0, CR_E_NOT_FOUND, "model 'copied' not found"));
    m.u.delete.model = "../../etc/passwd";
    send_msg(s, &m, &c);
    CHECK(is_error(&c, 0, CR_E_INVALID, "is invalid"));
    capture_clear(&c);
}

/* ---- the real binary on ipc:// ---- */

/* Receives the next reply whose id is `id`, skipping others (late pongs of
 * the start-up pings). */
static cr_status_t recv_id(zsock_t *dealer, const char *id, msg_t *r)
{
    cr_err_t err;
    for (int i = 0; i < 100; i++) {
        cr_status_t st = bus_recv(dealer, 5000, r, NULL, &err);
        if (st)
            return st;
        if (!strcmp(r->id, id))
            return CR_OK;
        msg_clear(r);
    }
    return CR_E_TIMEOUT;
}

static void test_process(void)
{
    const char *bdir = getenv("CORRAL_BUILD_DIR");
    char bin[4096];
    snprintf(bin, sizeof bin, "%s/bin/corral-registry", bdir ? bdir : ".");
    if (access(bin, X_OK) != 0) {
        printf("test_registry_server: %s not built; skipping the process test\n",
               bin);
        return;
    }
    char endpoint[600], models[400];
    snprintf(endpoint, sizeof endpoint, "ipc://%s/registry.sock", tmp_g);
    snprintf(models, sizeof models, "%s/proc-models", tmp_g);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("CORRAL_RUNTIME_DIR", tmp_g, 1);
        execl(bin, bin, "--endpoint", endpoint, "--models", models, (char *)NULL);
        _exit(127);
    }
    CHECK(pid > 0);
    zsock_t *dealer = zsock_new_dealer(endpoint);
    CHECK(dealer != NULL);
    if (!dealer) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return;
    }
    msg_t r;
    cr_err_t err;
    /* the socket may not be bound yet: ping until it answers */
    bool up = false;
    for (int i = 0; i < 50 && !up; i++) {
        msg_t m;
        msg_init(&m, MSG_ping, "ping");
        bus_send(dealer, &m, &err);
        if (bus_recv(dealer, 200, &r, NULL, &err) == CR_OK) {
            up = r.type == MSG_pong;
            msg_clear(&r);
        }
    }
    CHECK(up);
    /* garbage frame: an error reply, then the service still answers */
    zframe_t *f = zframe_new("\xc1\x00garbage", 9);
    zframe_send(&f, dealer, 0);
    CHECK(recv_id(dealer, "", &r) == CR_OK);
    CHECK(r.type == MSG_error && r.u.error.status == CR_E_PROTO);
    msg_clear(&r);
    /* two frames in one message */
    zmsg_t *zm = zmsg_new();
    zmsg_addstr(zm, "one");
    zmsg_addstr(zm, "two");
    zmsg_send(&zm, dealer);
    CHECK(recv_id(dealer, "", &r) == CR_OK);
    CHECK(r.type == MSG_error && r.u.error.status == CR_E_PROTO);
    msg_clear(&r);
    /* a real request */
    msg_t m;
    msg_init(&m, MSG_tags, "tags-1");
    CHECK(bus_send(dealer, &m, &err) == CR_OK);
    CHECK(recv_id(dealer, "tags-1", &r) == CR_OK);
    CHECK(r.type == MSG_tags_reply && !strcmp(r.id, "tags-1"));
    CHECK_EQ_INT(r.u.tags_reply.models.n, 0);
    msg_clear(&r);
    zsock_destroy(&dealer);
    /* SIGTERM: a clean exit */
    kill(pid, SIGTERM);
    int status = 0;
    bool exited = false;
    for (int i = 0; i < 100 && !exited; i++) {
        if (waitpid(pid, &status, WNOHANG) == pid)
            exited = true;
        else
            usleep(50 * 1000);
    }
    if (!exited) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
    }
    CHECK(exited);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    struct stat sb;
    CHECK(stat(models, &sb) == 0 && S_ISDIR(sb.st_mode));
}

int main(void)
{
    snprintf(tmp_g, sizeof tmp_g, "/tmp/corral-regsrv-XXXXXX");
    if (!mkdtemp(tmp_g)) {
        perror("mkdtemp");
        return 1;
    }
    char models[400];
    snprintf(models, sizeof models, "%s/models", tmp_g);
    cr_err_t err;
    reg_server_t *s = reg_server_new(models, &err);
    CHECK(s != NULL);
    if (s) {
        test_malformed(s);
        test_uploads(s);
        test_model_requests(s);
        reg_server_destroy(&s);
        CHECK(s == NULL);
    }
    /* a store that cannot be created */
    CHECK(reg_server_new("/proc/definitely/not/here", &err) == NULL);
    CHECK(err.status == CR_E_IO);
    test_process();
    nftw(tmp_g, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    return check_finish("test_registry_server");
}
