/* test_bus.c: runtime dir rules, endpoint names, and frames over a real
 * ROUTER/DEALER pair on ipc:// in a temporary dir. */
#include "lib/prelude.h"
#include "proto/bus.h"
#include "lib/runtime_dir.h"
#include "tests/unit/check.h"

#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp_root[256];

static int rm_one(const char *path, const struct stat *sb, int flag,
                  struct FTW *ftw)
{
    CR_UNUSED(sb);
    CR_UNUSED(flag);
    CR_UNUSED(ftw);
    return remove(path);
}

static void test_runtime_dir(void)
{
    char run[512], out[512];
    cr_err_t err;
    snprintf(run, sizeof run, "%s/a/b/run", tmp_root);
    setenv("CORRAL_RUNTIME_DIR", run, 1);

    /* Created with parents, mode exactly 0700 despite the umask. */
    mode_t old = umask(0);
    CHECK_EQ_INT(cr_runtime_dir(out, sizeof out, &err), CR_OK);
    umask(old);
    CHECK_EQ_STR(out, run);
    struct stat sb;
    CHECK(stat(run, &sb) == 0 && S_ISDIR(sb.st_mode));
    CHECK_EQ_INT(sb.st_mode & 07777, 0700);

    /* An existing private dir is fine; a trailing slash is dropped. */
    char slash[520];
    snprintf(slash, sizeof slash, "%s/", run);
    setenv("CORRAL_RUNTIME_DIR", slash, 1);
    CHECK_EQ_INT(cr_runtime_dir(out, sizeof out, &err), CR_OK);
    CHECK_EQ_STR(out, run);
    setenv("CORRAL_RUNTIME_DIR", run, 1);

    /* Open to group or others: refused, and the message says why. */
    chmod(run, 0755);
    CHECK_EQ_INT(cr_runtime_dir(out, sizeof out, &err), CR_E_FORBIDDEN);
    CHECK(strstr(err.msg, "open to group or others (mode 0755)") != NULL);
    chmod(run, 0701);
    CHECK_EQ_INT(cr_runtime_dir(out, sizeof out, &err), CR_E_FORBIDDEN);
    chmod(run, 0700);
    CHECK_EQ_INT(cr_runtime_dir(out, sizeof out, &err), CR_OK);

    /* A file where the dir should be. */
    char file[520];
    snprintf(file, sizeof file, "%s/afile", tmp_root);
    FILE *f = fopen(file, "w");
    if (f)
        fclose(f);
    setenv("CORRAL_RUNTIME_DIR", file, 1);
    CHECK_EQ_INT(cr_runtime_dir(out, sizeof out, &err), CR_E_IO);
    CHECK(strstr(err.msg, "not a directory") != NULL);

    /* A parent that cannot be created. */
    char under[540];
    snprintf(under, sizeof under, "%s/afile/sub", tmp_root);
    setenv("CORRAL_RUNTIME_DIR", under, 1);
    CHECK_EQ_INT(cr_runtime_dir(out, sizeof out, &err), CR_E_IO);
    CHECK(strstr(err.msg, "cannot create directory") != NULL);

    /* Output too small. */
    setenv("CORRAL_RUNTIME_DIR", run, 1);
    CHECK_EQ_INT(cr_runtime_dir(out, 8, &err), CR_E_TOO_LARGE);

    /* XDG_RUNTIME_DIR/corral when CORRAL_RUNTIME_DIR is unset. */
    char xdg[512], want[540];
    snprintf(xdg, sizeof xdg, "%s/xdg", tmp_root);
    mkdir(xdg, 0700);
    unsetenv("CORRAL_RUNTIME_DIR");
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    CHECK_EQ_INT(cr_runtime_dir(out, sizeof out, &err), CR_OK);
    snprintf(want, sizeof want, "%s/corral", xdg);
    CHECK_EQ_STR(out, want);

    /* Neither: ~/.corral/run. */
    char home[512];
    snprintf(home, sizeof home, "%s/home", tmp_root);
    mkdir(home, 0700);
    unsetenv("XDG_RUNTIME_DIR");
    setenv("HOME", home, 1);
    CHECK_EQ_INT(cr_runtime_dir(out, sizeof out, &err), CR_OK);
    snprintf(want, sizeof want, "%s/.corral/run", home);
    CHECK_EQ_STR(out, want);

    setenv("CORRAL_RUNTIME_DIR", run, 1);
}

static void test_endpoint(void)
{
    char ep[BUS_ENDPOINT_MAX], want[600];
    cr_err_t err;
    char run[512];
    snprintf(run, sizeof run, "%s/a/b/run", tmp_root);
    setenv("CORRAL_RUNTIME_DIR", run, 1);
    unsetenv("CORRAL_SCHEDULER_ENDPOINT");

    CHECK_EQ_INT(bus_endpoint("scheduler", ep, sizeof ep, &err), CR_OK);
    snprintf(want, sizeof want, "ipc://%s/scheduler.sock", run);
    CHECK_EQ_STR(ep, want);

    setenv("CORRAL_SCHEDULER_ENDPOINT", "tcp://10.0.0.2:7001", 1);
    CHECK_EQ_INT(bus_endpoint("scheduler", ep, sizeof ep, &err), CR_OK);
    CHECK_EQ_STR(ep, "tcp://10.0.0.2:7001");
    /* Only that name is overridden. */
    CHECK_EQ_INT(bus_endpoint("registry", ep, sizeof ep, &err), CR_OK);
    snprintf(want, sizeof want, "ipc://%s/registry.sock", run);
    CHECK_EQ_STR(ep, want);
    setenv("CORRAL_SCHEDULER_ENDPOINT", "10.0.0.2:7001", 1);
    CHECK_EQ_INT(bus_endpoint("scheduler", ep, sizeof ep, &err), CR_E_INVALID);
    unsetenv("CORRAL_SCHEDULER_ENDPOINT");

    CHECK_EQ_INT(bus_endpoint("Bad/Name", ep, sizeof ep, &err), CR_E_INVALID);
    CHECK_EQ_INT(bus_endpoint("", ep, sizeof ep, &err), CR_E_INVALID);
    CHECK_EQ_INT(bus_endpoint(NULL, ep, sizeof ep, &err), CR_E_INVALID);
    CHECK_EQ_INT(bus_endpoint("scheduler", ep, 10, &err), CR_E_TOO_LARGE);

    /* A runtime dir too deep for a Unix socket path. */
    char longdir[400];
    int n = snprintf(longdir, sizeof longdir, "%s/", tmp_root);
    while (n < 120)
        longdir[n++] = 'x';
    longdir[n] = '\0';
    setenv("CORRAL_RUNTIME_DIR", longdir, 1);
    CHECK_EQ_INT(bus_endpoint("runners", ep, sizeof ep, &err), CR_E_TOO_LARGE);
    CHECK_MSG(strstr(err.msg, "over the 107 a Unix socket allows") != NULL,
              "%s", err.msg);
    setenv("CORRAL_RUNTIME_DIR", run, 1);
}

static void test_new_id(void)
{
    char a[33], b[33];
    bus_new_id(a);
    bus_new_id(b);
    CHECK_EQ_INT(strlen(a), 32);
    CHECK(strspn(a, "0123456789abcdef") == 32);
    CHECK(strcmp(a, b) != 0);
}

static void test_router_dealer(void)
{
    char ep[BUS_ENDPOINT_MAX];
    cr_err_t err;
    CHECK_EQ_INT(bus_endpoint("registry", ep, sizeof ep, &err), CR_OK);
    zsock_t *router = zsock_new(ZMQ_ROUTER);
    zsock_t *dealer = zsock_new(ZMQ_DEALER);
    CHECK(router && dealer);
    if (!router || !dealer)
        goto out;
    zsock_set_linger(router, 0);
    zsock_set_linger(dealer, 0);
    CHECK_EQ_INT(zsock_bind(router, "%s", ep), 0);
    CHECK_EQ_INT(zsock_connect(dealer, "%s", ep), 0);

    /* Nothing yet: a timeout, quickly. */
    msg_t in;
    zframe_t *ident = NULL;
    CHECK_EQ_INT(bus_recv(router, 50, &in, &ident, &err), CR_E_TIMEOUT);
    CHECK(ident == NULL && in.type == MSG_NONE);
    CHECK_EQ_INT(bus_recv(dealer, 0, &in, NULL, &err), CR_E_TIMEOUT);

    /* dealer -> router: generate. */
    char id[33];
    bus_new_id(id);
    msg_t m;
    msg_init(&m, MSG_generate, id);
    m.u.generate.model = "llama3";
    m.u.generate.has_model = true;
    m.u.generate.prompt = "why is the sky blue?";
    m.u.generate.has_prompt = true;
    CHECK_EQ_INT(bus_send(dealer, &m, &err), CR_OK);
    CHECK_EQ_INT(bus_recv(router, 2000, &in, &ident, &err), CR_OK);
    CHECK_EQ_INT(in.type, MSG_generate);
    CHECK_EQ_STR(in.id, id);
    CHECK_EQ_STR(in.u.generate.model, "llama3");
    CHECK_EQ_STR(in.u.generate.prompt, "why is the sky blue?");
    CHECK(ident != NULL);
    msg_clear(&in);

    /* router -> dealer: a chunk then done, to that identity. */
    msg_t r;
    msg_init(&r, MSG_chunk, id);
    r.u.chunk.response = "Rayleigh";
    r.u.chunk.has_response = true;
    CHECK_EQ_INT(bus_send_to(router, ident, &r, &err), CR_OK);
    msg_init(&r, MSG_done, id);
    r.u.done.done_reason = "stop";
    r.u.done.has_done_reason = true;
    r.u.done.eval_count = 3;
    r.u.done.has_eval_count = true;
    CHECK_EQ_INT(bus_send_to(router, ident, &r, &err), CR_OK);

    CHECK_EQ_INT(bus_recv(dealer, 2000, &in, NULL, &err), CR_OK);
    CHECK_EQ_INT(in.type, MSG_chunk);
    CHECK_EQ_STR(in.id, id);
    CHECK_EQ_STR(in.u.chunk.response, "Rayleigh");
    msg_clear(&in);
    CHECK_EQ_INT(bus_recv(dealer, -1, &in, NULL, &err), CR_OK); /* no timeout */
    CHECK_EQ_INT(in.type, MSG_done);
    CHECK_EQ_STR(in.u.done.done_reason, "stop");
    CHECK_EQ_INT(in.u.done.eval_count, 3);
    msg_clear(&in);

    /* A zero timeout takes a message that is waiting (it receives without
     * asking ZMQ_EVENTS first), with its identity, and times out on none. */
    zframe_t *from = NULL;
    msg_init(&m, MSG_ping, "zero-wait");
    CHECK_EQ_INT(bus_send(dealer, &m, &err), CR_OK);
    zpoller_t *pl = zpoller_new(router, NULL);
    CHECK(pl && zpoller_wait(pl, 2000) == router);
    zpoller_destroy(&pl);
    CHECK_EQ_INT(bus_recv(router, 0, &in, &from, &err), CR_OK);
    CHECK_EQ_INT(in.type, MSG_ping);
    CHECK_EQ_STR(in.id, "zero-wait");
    CHECK(from != NULL);
    msg_clear(&in);
    zframe_destroy(&from);
    CHECK_EQ_INT(bus_recv(router, 0, &in, &from, &err), CR_E_TIMEOUT);
    CHECK(from == NULL);

    /* Wrong socket kinds for the send calls. */
    CHECK_EQ_INT(bus_send(router, &r, &err), CR_E_INTERNAL);
    CHECK_EQ_INT(bus_send_to(dealer, ident, &r, &err), CR_E_INTERNAL);
    /* An invalid message is not sent at all. */
    msg_init(&r, MSG_error, id);
    CHECK_EQ_INT(bus_send(dealer, &r, &err), CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "error: field 'status' is missing");
    zframe_destroy(&ident);

    /* A garbage frame: reported as a protocol error with the sender's
     * identity, and the next good message still arrives. */
    zframe_t *junk = zframe_new("\xc1garbage", 8);
    CHECK_EQ_INT(zframe_send(&junk, dealer, 0), 0);
    msg_init(&m, MSG_ping, "after-junk");
    CHECK_EQ_INT(bus_send(dealer, &m, &err), CR_OK);
    CHECK_EQ_INT(bus_recv(router, 2000, &in, &ident, &err), CR_E_PROTO);
    CHECK(strstr(err.msg, "invalid byte 0xc1") != NULL);
    CHECK(ident != NULL && in.type == MSG_NONE && in.arena == NULL);
    if (ident) {
        /* The caller can answer the sender. */
        msg_t e;
        msg_make_error(&e, in.id, CR_E_PROTO, "%s", err.msg);
        CHECK_EQ_INT(bus_send_to(router, ident, &e, &err), CR_OK);
        msg_clear(&e);
        zframe_destroy(&ident);
    }
    CHECK_EQ_INT(bus_recv(router, 2000, &in, &ident, &err), CR_OK);
    CHECK_EQ_INT(in.type, MSG_ping);
    CHECK_EQ_STR(in.id, "after-junk");
    msg_clear(&in);
    zframe_destroy(&ident);
    CHECK_EQ_INT(bus_recv(dealer, 2000, &in, NULL, &err), CR_OK);
    CHECK_EQ_INT(in.type, MSG_error);
    CHECK_EQ_INT(in.u.error.status, CR_E_PROTO);
    msg_clear(&in);

    /* A message of two frames from a DEALER (three at the ROUTER). */
    zmsg_t *two = zmsg_new();
    zmsg_addstr(two, "one");
    zmsg_addstr(two, "two");
    CHECK_EQ_INT(zmsg_send(&two, dealer), 0);
    CHECK_EQ_INT(bus_recv(router, 2000, &in, &ident, &err), CR_E_PROTO);
    CHECK_EQ_STR(err.msg, "a bus message has 3 frames, expected 2");
    zframe_destroy(&ident);
    /* An empty frame. */
    zframe_t *empty = zframe_new(NULL, 0);
    CHECK_EQ_INT(zframe_send(&empty, dealer, 0), 0);
    CHECK_EQ_INT(bus_recv(router, 2000, &in, NULL, &err), CR_E_PROTO);
    CHECK_EQ_STR(err.msg, "frame is empty");

    /* The ROUTER side sending an extra frame to the DEALER. */
    msg_init(&m, MSG_pong, "p");
    CHECK_EQ_INT(bus_send(dealer, &m, &err), CR_OK);
    CHECK_EQ_INT(bus_recv(router, 2000, &in, &ident, &err), CR_OK);
    msg_clear(&in);
    zmsg_t *bad = zmsg_new();
    zframe_t *to = zframe_dup(ident);
    zmsg_append(bad, &to);
    zmsg_addstr(bad, "x");
    zmsg_addstr(bad, "y");
    CHECK_EQ_INT(zmsg_send(&bad, router), 0);
    CHECK_EQ_INT(bus_recv(dealer, 2000, &in, NULL, &err), CR_E_PROTO);
    CHECK_EQ_STR(err.msg, "a bus message has 2 frames, expected 1");
    zframe_destroy(&ident);

out:
    zsock_destroy(&dealer);
    zsock_destroy(&router);
}

/* A service's public socket takes a burst of connects (bus_listen). */
static void test_listen_backlog(void)
{
    char ep[600];
    snprintf(ep, sizeof ep, "ipc://%s/listen.sock", tmp_root);
    zsock_t *r = zsock_new(ZMQ_ROUTER);
    CHECK(r != NULL);
    CHECK_EQ_INT(bus_listen(r, ep), 0);
    CHECK_EQ_INT(zsock_backlog(r), BUS_LISTEN_BACKLOG);
    /* More connects at once than ZeroMQ's default backlog of 100: all
     * come up. */
    enum { N = 300 };
    static zsock_t *d[N];
    int up = 0;
    for (int i = 0; i < N; i++) {
        d[i] = zsock_new(ZMQ_DEALER);
        zsock_set_linger(d[i], 0);
        zsock_set_immediate(d[i], 1); /* a send waits for the connection */
        CHECK_EQ_INT(zsock_connect(d[i], "%s", ep), 0);
    }
    for (int i = 0; i < N; i++) {
        msg_t m;
        msg_init(&m, MSG_ping, "x");
        cr_err_t err;
        zsock_set_sndtimeo(d[i], 10000);
        up += bus_send(d[i], &m, &err) == CR_OK;
    }
    CHECK_EQ_INT(up, N);
    for (int i = 0; i < N; i++)
        zsock_destroy(&d[i]);
    zsock_destroy(&r);
}

int main(void)
{
    snprintf(tmp_root, sizeof tmp_root, "/tmp/corral-test-bus-XXXXXX");
    if (!mkdtemp(tmp_root)) {
        perror("mkdtemp");
        return 1;
    }
    zsys_handler_set(NULL); /* keep the default signal behaviour */
    test_runtime_dir();
    test_endpoint();
    test_new_id();
    test_router_dealer();
    test_listen_backlog();
    nftw(tmp_root, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    struct stat sb;
    CHECK(stat(tmp_root, &sb) != 0); /* cleaned up */
    return check_finish("test_bus");
}
