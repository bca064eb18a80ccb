/* test_sd_notify.c: the sd_notify protocol against a fake NOTIFY_SOCKET
 * (a datagram socket this test binds, as systemd does), plus the no-op when
 * it is unset and every malformed address. */
#include "lib/prelude.h"
#include "lib/sd_notify.h"
#include "tests/unit/check.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmp_dir[256];

/* A bound datagram socket with SO_PASSCRED (so each message says who sent
 * it, as systemd checks for NotifyAccess=main) and a 2 s receive timeout.
 * `abstract` binds "\0name" instead of a path. */
static int fake_listener(const char *name, bool abstract)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    socklen_t len;
    if (abstract) {
        snprintf(sa.sun_path + 1, sizeof sa.sun_path - 1, "%s", name);
        len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                          strlen(name));
    } else {
        snprintf(sa.sun_path, sizeof sa.sun_path, "%.100s", name);
        len = (socklen_t)sizeof sa;
    }
    int one = 1;
    struct timeval tv = {2, 0};
    if (bind(fd, (struct sockaddr *)&sa, len) ||
        setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof one) ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv)) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Receives one message into buf (NUL-terminated); returns its length or -1
 * (nothing within the timeout). *pid gets the sender's pid. `nowait` polls. */
static ssize_t recv_msg(int fd, char *buf, size_t cap, pid_t *pid, bool nowait)
{
    struct iovec iov = {buf, cap - 1};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = ctl.b;
    mh.msg_controllen = sizeof ctl.b;
    ssize_t n = recvmsg(fd, &mh, nowait ? MSG_DONTWAIT : 0);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    *pid = -1;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
            struct ucred cr;
            memcpy(&cr, CMSG_DATA(c), sizeof cr);
            *pid = cr.pid;
        }
    return n;
}

static void test_unset_is_noop(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/quiet.sock", tmp_dir);
    int fd = fake_listener(path, false);
    CHECK(fd >= 0);
    unsetenv("NOTIFY_SOCKET");
    cr_err_t err;
    CHECK(!cr_sd_notify_enabled());
    CHECK_EQ_INT(cr_sd_notify_ready(&err), CR_OK);
    CHECK_EQ_INT(cr_sd_notify_stopping(&err), CR_OK);
    CHECK_EQ_INT(cr_sd_notify_status("x", &err), CR_OK);
    CHECK_EQ_INT(cr_sd_notify("", &err), CR_OK); /* nothing to validate */
    setenv("NOTIFY_SOCKET", "", 1);
    CHECK(!cr_sd_notify_enabled());
    CHECK_EQ_INT(cr_sd_notify_ready(NULL), CR_OK);
    char buf[64];
    pid_t pid;
    CHECK(recv_msg(fd, buf, sizeof buf, &pid, true) < 0); /* nothing sent */
    close(fd);
}

static void test_path_socket(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/notify.sock", tmp_dir);
    int fd = fake_listener(path, false);
    CHECK(fd >= 0);
    setenv("NOTIFY_SOCKET", path, 1);
    CHECK(cr_sd_notify_enabled());
    cr_err_t err;
    char buf[CR_SD_NOTIFY_MAX + 64];
    pid_t pid = 0;

    CHECK_EQ_INT(cr_sd_notify_ready(&err), CR_OK);
    CHECK_EQ_INT(recv_msg(fd, buf, sizeof buf, &pid, false), 7);
    CHECK_EQ_STR(buf, "READY=1");
    CHECK_EQ_INT(pid, getpid()); /* from this process: NotifyAccess=main */

    CHECK_EQ_INT(cr_sd_notify_stopping(&err), CR_OK);
    recv_msg(fd, buf, sizeof buf, &pid, false);
    CHECK_EQ_STR(buf, "STOPPING=1");

    CHECK_EQ_INT(cr_sd_notify_status("loading llama3:8b", &err), CR_OK);
    recv_msg(fd, buf, sizeof buf, &pid, false);
    CHECK_EQ_STR(buf, "STATUS=loading llama3:8b");

    CHECK_EQ_INT(cr_sd_notify("READY=1\nSTATUS=up", &err), CR_OK);
    recv_msg(fd, buf, sizeof buf, &pid, false);
    CHECK_EQ_STR(buf, "READY=1\nSTATUS=up");

    CHECK_EQ_INT(cr_sd_notify_status(NULL, &err), CR_OK);
    recv_msg(fd, buf, sizeof buf, &pid, false);
    CHECK_EQ_STR(buf, "STATUS=");

    /* A child (a runner, say) sends with its own pid: systemd can tell. */
    pid_t child = fork();
    if (child == 0)
        _exit(cr_sd_notify_ready(NULL) == CR_OK ? 0 : 1);
    int wst = 0;
    waitpid(child, &wst, 0);
    CHECK(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    recv_msg(fd, buf, sizeof buf, &pid, false);
    CHECK_EQ_STR(buf, "READY=1");
    CHECK_EQ_INT(pid, child);
    close(fd);
    unlink(path);
}

/* Hostile status text: a newline must not smuggle in another assignment;
 * long text is cut, never in the middle of a UTF-8 character. */
static void test_status_sanitized(void)
{
    char path[300];
    snprintf(path, sizeof path, "%s/status.sock", tmp_dir);
    int fd = fake_listener(path, false);
    CHECK(fd >= 0);
    setenv("NOTIFY_SOCKET", path, 1);
    char buf[CR_SD_NOTIFY_MAX + 64];
    pid_t pid;

    CHECK_EQ_INT(cr_sd_notify_status("model x\nREADY=1\r\tend\x7f", NULL),
                 CR_OK);
    recv_msg(fd, buf, sizeof buf, &pid, false);
    CHECK_EQ_STR(buf, "STATUS=model x READY=1  end ");
    CHECK(strchr(buf, '\n') == NULL);

    static char long_text[3 * CR_SD_NOTIFY_STATUS_MAX];
    memset(long_text, 'a', sizeof long_text - 1);
    CHECK_EQ_INT(cr_sd_notify_status(long_text, NULL), CR_OK);
    ssize_t n = recv_msg(fd, buf, sizeof buf, &pid, false);
    CHECK_EQ_INT(n, 7 + CR_SD_NOTIFY_STATUS_MAX);

    /* "é" (2 bytes) straddling the cut: dropped whole. */
    memset(long_text, 'a', sizeof long_text - 1);
    long_text[CR_SD_NOTIFY_STATUS_MAX - 1] = (char)0xC3;
    long_text[CR_SD_NOTIFY_STATUS_MAX] = (char)0xA9;
    CHECK_EQ_INT(cr_sd_notify_status(long_text, NULL), CR_OK);
    n = recv_msg(fd, buf, sizeof buf, &pid, false);
    CHECK_EQ_INT(n, 7 + CR_SD_NOTIFY_STATUS_MAX - 1);
    CHECK((unsigned char)buf[n - 1] == 'a');
    close(fd);
    unlink(path);
}

static void test_abstract_socket(void)
{
    char name[64];
    snprintf(name, sizeof name, "corral-test-sd-notify-%ld", (long)getpid());
    int fd = fake_listener(name, true);
    CHECK(fd >= 0);
    char env[80];
    snprintf(env, sizeof env, "@%s", name);
    setenv("NOTIFY_SOCKET", env, 1);
    cr_err_t err;
    CHECK_EQ_INT(cr_sd_notify_ready(&err), CR_OK);
    char buf[64];
    pid_t pid;
    CHECK_EQ_INT(recv_msg(fd, buf, sizeof buf, &pid, false), 7);
    CHECK_EQ_STR(buf, "READY=1");
    close(fd);
}

static void expect_fail(const char *notify_socket, const char *state,
                        cr_status_t want, const char *msg_part)
{
    setenv("NOTIFY_SOCKET", notify_socket, 1);
    cr_err_t err;
    cr_err_clear(&err);
    cr_status_t st = cr_sd_notify(state, &err);
    CHECK_MSG(st == want, "NOTIFY_SOCKET='%.40s': status %d, want %d (%s)",
              notify_socket, (int)st, (int)want, err.msg);
    CHECK_MSG(strstr(err.msg, msg_part) != NULL, "'%s' lacks '%s'", err.msg,
              msg_part);
    CHECK_EQ_INT(cr_sd_notify(state, NULL), want); /* NULL err is fine */
}

static void test_bad_addresses(void)
{
    char path[300], long_path[200];
    snprintf(path, sizeof path, "%s/absent.sock", tmp_dir);
    memset(long_path, 'x', sizeof long_path - 1);
    long_path[0] = '/';
    long_path[sizeof long_path - 1] = '\0';

    /* relative path */
    expect_fail("notify.sock", "READY=1", CR_E_UNSUPPORTED, "NOTIFY_SOCKET");
    /* systemd's vsock form, not spoken here */
    expect_fail("vsock:2:1234", "READY=1", CR_E_UNSUPPORTED, "vsock:2:1234");
    /* '@' with no name */
    expect_fail("@", "READY=1", CR_E_INVALID, "abstract");
    /* paths past sockaddr_un */
    expect_fail(long_path, "READY=1", CR_E_TOO_LARGE, "NOTIFY_SOCKET");
    long_path[0] = '@';
    expect_fail(long_path, "READY=1", CR_E_TOO_LARGE, "NOTIFY_SOCKET");
    /* no listener at that path */
    expect_fail(path, "READY=1", CR_E_IO, "absent.sock");
    /* empty and oversized states */
    expect_fail(path, "", CR_E_INVALID, "empty");
    expect_fail(path, NULL, CR_E_INVALID, "empty");
    static char big[CR_SD_NOTIFY_MAX + 2];
    memset(big, 'A', sizeof big - 1);
    expect_fail(path, big, CR_E_TOO_LARGE, "over");

    /* a stream socket where a datagram one is expected */
    struct sockaddr_un sa = {0};
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%.60s/stream.sock", tmp_dir);
    const char *spath = sa.sun_path;
    int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
    CHECK(sfd >= 0 && bind(sfd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
          listen(sfd, 1) == 0);
    expect_fail(spath, "READY=1", CR_E_IO, "stream.sock");
    close(sfd);
    unlink(spath);
}

int main(void)
{
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/corral-sdn-XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_unset_is_noop();
    test_path_socket();
    test_status_sanitized();
    test_abstract_socket();
    test_bad_addresses();
    unsetenv("NOTIFY_SOCKET");
    char path[300];
    snprintf(path, sizeof path, "%s/quiet.sock", tmp_dir);
    unlink(path);
    rmdir(tmp_dir);
    return check_finish("test_sd_notify");
}
