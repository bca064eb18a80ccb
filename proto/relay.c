/* relay.c: the node <-> scheduler frames and CURVE setup (relay.h). */
#include "lib/prelude.h"
#include "proto/relay.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lib/buf.h"

cr_status_t bus_relay_send(zsock_t *sock, zframe_t *peer, const char *to,
                           const void *data, size_t len, cr_err_t *err)
{
    if (!sock || !to || (!data && len))
        return cr_err_set(err, CR_E_INTERNAL, "bus_relay_send: bad arguments");
    bool router = zsock_type(sock) == ZMQ_ROUTER;
    if (router != (peer != NULL))
        return cr_err_set(err, CR_E_INTERNAL,
                          "bus_relay_send: a peer goes with a ROUTER only");
    zmsg_t *zm = zmsg_new();
    if (!zm)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for a message");
    int rc = 0;
    if (peer)
        rc |= zmsg_addmem(zm, zframe_data(peer), zframe_size(peer));
    rc |= zmsg_addmem(zm, to, strlen(to));
    rc |= zmsg_addmem(zm, data, len);
    if (rc) {
        zmsg_destroy(&zm);
        return cr_err_set(err, CR_E_NOMEM, "out of memory for a message");
    }
    rc = zmsg_send(&zm, sock);
    int e = zmq_errno();
    zmsg_destroy(&zm);
    if (rc)
        return cr_err_set(err, CR_E_IO, "relay send: %s", zmq_strerror(e));
    return CR_OK;
}

cr_status_t bus_relay_send_msg(zsock_t *sock, zframe_t *peer, const char *to,
                               const msg_t *m, cr_err_t *err)
{
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    cr_status_t st = msg_encode(m, &b, err);
    if (!st)
        st = bus_relay_send(sock, peer, to, b.data, b.len, err);
    cr_buf_free(&b);
    return st;
}

cr_status_t bus_relay_recv(zsock_t *sock, zframe_t **peer_out, char *to,
                           size_t to_cap, zframe_t **payload_out,
                           cr_err_t *err)
{
    if (peer_out)
        *peer_out = NULL;
    *payload_out = NULL;
    to[0] = '\0';
    zmsg_t *zm = zmsg_recv(sock);
    if (!zm)
        return cr_err_set(err, zsys_interrupted ? CR_E_CANCELED : CR_E_IO,
                          "relay receive: %s", zmq_strerror(zmq_errno()));
    bool router = zsock_type(sock) == ZMQ_ROUTER;
    zframe_t *peer = router ? zmsg_pop(zm) : NULL;
    cr_status_t st = CR_OK;
    if (zmsg_size(zm) != 2) {
        st = cr_err_set(err, CR_E_PROTO,
                        "a relay message has %zu frames after the identity, "
                        "expected 2",
                        zmsg_size(zm));
        goto out;
    }
    zframe_t *tf = zmsg_pop(zm);
    size_t n = zframe_size(tf);
    if (n > BUS_RELAY_TO_MAX || n >= to_cap ||
        memchr(zframe_data(tf), '\0', n)) {
        zframe_destroy(&tf);
        st = cr_err_set(err, CR_E_PROTO, "a relay address of %zu bytes is "
                                         "too long or holds a NUL",
                        n);
        goto out;
    }
    memcpy(to, zframe_data(tf), n);
    to[n] = '\0';
    zframe_destroy(&tf);
    *payload_out = zmsg_pop(zm);
out:
    zmsg_destroy(&zm);
    if (peer_out)
        *peer_out = peer;
    else
        zframe_destroy(&peer);
    return st;
}

/* ---- CURVE ---- */

bool bus_curve_available(void)
{
    return zsys_has_curve();
}

static cr_status_t load_cert(const char *path, bool need_secret, zcert_t **out,
                             cr_err_t *err)
{
    if (!path || !*path)
        return cr_err_set(err, CR_E_INVALID, "no certificate file given");
    if (access(path, R_OK))
        return cr_err_set(err, CR_E_NOT_FOUND, "certificate %s: %s", path,
                          strerror(errno));
    zcert_t *c = zcert_load(path);
    if (!c)
        return cr_err_set(err, CR_E_INVALID,
                          "certificate %s is not a CURVE certificate", path);
    static const char zero[41] = "0000000000000000000000000000000000000000";
    if (need_secret && !strcmp(zcert_secret_txt(c), zero)) {
        zcert_destroy(&c);
        return cr_err_set(err, CR_E_NOT_FOUND,
                          "certificate %s: no secret key (%s_secret missing "
                          "or unreadable)",
                          path, path);
    }
    *out = c;
    return CR_OK;
}

cr_status_t bus_curve_server(zsock_t *sock, const char *cert_path,
                             cr_err_t *err)
{
    if (!bus_curve_available())
        return cr_err_set(err, CR_E_UNAVAILABLE,
                          "libzmq was built without CURVE support");
    zcert_t *c = NULL;
    cr_status_t st = load_cert(cert_path, true, &c, err);
    if (st)
        return st;
    zcert_apply(c, sock);
    zcert_destroy(&c);
    zsock_set_curve_server(sock, 1);
    zsock_set_zap_domain(sock, "corral-nodes");
    return CR_OK;
}

cr_status_t bus_curve_client(zsock_t *sock, const char *cert_path,
                             const char *server_cert_path, cr_err_t *err)
{
    if (!bus_curve_available())
        return cr_err_set(err, CR_E_UNAVAILABLE,
                          "libzmq was built without CURVE support");
    zcert_t *mine = NULL, *server = NULL;
    cr_status_t st = load_cert(cert_path, true, &mine, err);
    if (st)
        return st;
    if ((st = load_cert(server_cert_path, false, &server, err))) {
        zcert_destroy(&mine);
        return st;
    }
    zcert_apply(mine, sock);
    zsock_set_curve_serverkey(sock, zcert_public_txt(server));
    zcert_destroy(&mine);
    zcert_destroy(&server);
    return CR_OK;
}

cr_status_t bus_curve_auth_new(const char *dir, zactor_t **out, cr_err_t *err)
{
    struct stat sb;
    if (!dir || !*dir || stat(dir, &sb) || !S_ISDIR(sb.st_mode))
        return cr_err_set(err, CR_E_NOT_FOUND,
                          "node keys dir '%s' is not a directory",
                          dir ? dir : "");
    zactor_t *auth = zactor_new(zauth, NULL);
    if (!auth)
        return cr_err_set(err, CR_E_NOMEM, "cannot start the ZAP handler");
    zstr_sendx(auth, "CURVE", dir, NULL);
    zsock_wait(auth);
    *out = auth;
    return CR_OK;
}

static int64_t ts_ns(struct timespec t)
{
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), k = strlen(tail);
    return n >= k && !strcmp(s + n - k, tail);
}

cr_status_t bus_curve_keys_stamp(const char *dir, bus_keys_stamp_t *out,
                                 cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    struct stat sb;
    DIR *d = dir && *dir ? opendir(dir) : NULL;
    if (!d || fstat(dirfd(d), &sb)) {
        if (d)
            closedir(d);
        return cr_err_set(err, CR_E_NOT_FOUND,
                          "node keys dir '%s' is not a readable directory",
                          dir ? dir : "");
    }
    out->changed_ns = ts_ns(sb.st_mtim) > ts_ns(sb.st_ctim) ? ts_ns(sb.st_mtim)
                                                           : ts_ns(sb.st_ctim);
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.' || ends_with(de->d_name, "_secret"))
            continue;
        if (fstatat(dirfd(d), de->d_name, &sb, 0) || !S_ISREG(sb.st_mode))
            continue;
        out->n_keys++;
        out->bytes += sb.st_size;
        if (ts_ns(sb.st_mtim) > out->changed_ns)
            out->changed_ns = ts_ns(sb.st_mtim);
        if (ts_ns(sb.st_ctim) > out->changed_ns)
            out->changed_ns = ts_ns(sb.st_ctim);
    }
    closedir(d);
    return CR_OK;
}

void bus_curve_auth_reload(zactor_t *auth, const char *dir)
{
    /* zauth's CURVE command replaces its certificate store with a new one
     * loaded from dir, inside the actor, and signals when done. */
    zstr_sendx(auth, "CURVE", dir, NULL);
    zsock_wait(auth);
}

cr_status_t bus_curve_keygen(const char *dir, const char *name,
                             char *public_txt_out, cr_err_t *err)
{
    if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") ||
        !strcmp(name, "..") || strlen(name) > 200)
        return cr_err_set(err, CR_E_INVALID,
                          "key name '%s' must be a plain file name",
                          name ? name : "");
    if (mkdir(dir, 0700) && errno != EEXIST)
        return cr_err_set(err, CR_E_IO, "mkdir %s: %s", dir, strerror(errno));
    char pub[4096], sec[4200];
    if ((size_t)snprintf(pub, sizeof pub, "%s/%s", dir, name) >= sizeof pub)
        return cr_err_set(err, CR_E_TOO_LARGE, "key path too long");
    snprintf(sec, sizeof sec, "%s_secret", pub);
    if (!access(pub, F_OK) || !access(sec, F_OK))
        return cr_err_set(err, CR_E_EXISTS,
                          "%s or %s already exists; keys are never "
                          "overwritten",
                          pub, sec);
    if (!bus_curve_available())
        return cr_err_set(err, CR_E_UNAVAILABLE,
                          "libzmq was built without CURVE support");
    zcert_t *c = zcert_new();
    if (!c)
        return cr_err_set(err, CR_E_NOMEM, "cannot make a keypair");
    zcert_set_meta(c, "name", "%s", name);
    /* The secret file is created 0600 from the start: no window in which
     * another user could read it. */
    mode_t old = umask(077);
    int rc = zcert_save_secret(c, sec);
    umask(old);
    if (rc == 0)
        rc = zcert_save_public(c, pub);
    if (rc == 0)
        rc = chmod(sec, 0600) | chmod(pub, 0644);
    if (rc) {
        int e = errno;
        zcert_destroy(&c);
        unlink(sec);
        unlink(pub);
        return cr_err_set(err, CR_E_IO, "writing %s: %s", pub, strerror(e));
    }
    if (public_txt_out)
        snprintf(public_txt_out, 41, "%s", zcert_public_txt(c));
    zcert_destroy(&c);
    return CR_OK;
}
