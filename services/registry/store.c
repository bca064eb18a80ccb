/* store.c: blobs and manifests on disk (see store.h). */
#include "lib/prelude.h"
#include "services/registry/store.h"

#include <dirent.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define TMP_PREFIX ".corral-tmp-"

struct reg_store {
    char root[REG_PATH_MAX];
    char blobs[REG_PATH_MAX];
    char manifests[REG_PATH_MAX];
    bool fail_next_rename; /* test hook */
    int lock_fd;           /* the writer's lock (reg_store_claim), else -1 */
    reg_store_step_fn step; /* test hook (reg_store_set_step_hook), or NULL */
    void *step_ctx;
    pthread_mutex_t mu;    /* the commit lock (recursive): pins, commits, prunes */
    struct pin {
        char hex[REG_HEX_LEN + 1];
        size_t count;      /* writers holding it */
    } *pins;
    size_t n_pins, cap_pins;
};

struct reg_blob_writer {
    reg_store_t *store;
    int fd;
    EVP_MD_CTX *md;
    uint64_t size;
    char want[REG_HEX_LEN + 1]; /* "" if any digest is accepted */
    char tmp_path[REG_PATH_MAX];
    bool done; /* finished (or failed at finish): no more writes */
};

/* ---- small helpers ---- */

static bool join(char *buf, size_t cap, const char *a, const char *b)
{
    int n = snprintf(buf, cap, "%s/%s", a, b);
    return n >= 0 && (size_t)n < cap;
}

static cr_status_t mkdir_p(const char *path, cr_err_t *err)
{
    char tmp[REG_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp)
        return cr_err_set(err, CR_E_INVALID, "path too long: %.64s...", path);
    memcpy(tmp, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != '\0')
            continue;
        char saved = tmp[i];
        tmp[i] = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
            return cr_err_set(err, CR_E_IO, "mkdir %s: %s", tmp,
                              strerror(errno));
        tmp[i] = saved;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return cr_err_set(err, CR_E_IO, "%s is not a folder", path);
    return CR_OK;
}

static void fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

/* The folder part of path into out (which may be path itself). */
static void dirname_of(const char *path, char *out, size_t cap)
{
    if (out != path)
        snprintf(out, cap, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash && slash != out)
        *slash = '\0';
}

static cr_status_t write_all(int fd, const void *data, size_t len,
                             const char *what, cr_err_t *err)
{
    const char *p = data;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return cr_err_set(err, CR_E_IO, "write %s: %s", what,
                              strerror(errno));
        }
        p += w;
        len -= (size_t)w;
    }
    return CR_OK;
}

/* Reads a whole regular file of at most max bytes. */
static cr_status_t read_file(const char *path, size_t max, char **data,
                             size_t *len, struct timespec *mtime,
                             cr_err_t *err)
{
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return cr_err_set(err, CR_E_NOT_FOUND, "%s not found", path);
        return cr_err_set(err, CR_E_IO, "open %s: %s", path, strerror(errno));
    }
    cr_status_t st = CR_OK;
    struct stat sb;
    char *buf = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = cr_err_set(err, CR_E_IO, "%s is not a regular file", path);
        goto out;
    }
    if ((uint64_t)sb.st_size > max) {
        st = cr_err_set(err, CR_E_TOO_LARGE, "%s is %lld bytes (limit %zu)",
                        path, (long long)sb.st_size, max);
        goto out;
    }
    size_t size = (size_t)sb.st_size;
    buf = malloc(size + 1);
    if (!buf) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory reading %s", path);
        goto out;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            st = cr_err_set(err, CR_E_IO, "read %s: %s", path,
                            r < 0 ? strerror(errno) : "short read");
            goto out;
        }
        got += (size_t)r;
    }
    buf[size] = '\0';
    *data = buf;
    *len = size;
    buf = NULL;
    if (mtime)
        *mtime = sb.st_mtim;
out:
    free(buf);
    close(fd);
    return st;
}

static bool is_hex64(const char *hex)
{
    for (int i = 0; i < REG_HEX_LEN; i++) {
        char c = hex[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return false;
    }
    return hex[REG_HEX_LEN] == '\0';
}

/* ---- store ---- */

/* Old Ollama stores named blobs "sha256:<hex>"; the current name is
 * "sha256-<hex>". Renames those (unless the new name exists). */
static void fix_legacy_blob_names(reg_store_t *s)
{
    DIR *d = opendir(s->blobs);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char hex[REG_HEX_LEN + 1];
        if (strncmp(e->d_name, "sha256:", 7) != 0 ||
            reg_digest_parse(e->d_name, hex, NULL) != CR_OK)
            continue;
        char from[REG_PATH_MAX], to[REG_PATH_MAX];
        struct stat sb;
        if (join(from, sizeof from, s->blobs, e->d_name) &&
            reg_store_blob_path(s, hex, to, sizeof to) && stat(to, &sb) != 0)
            (void)rename(from, to);
    }
    closedir(d);
}

reg_store_t *reg_store_new(const char *root, cr_err_t *err)
{
    if (!root || !*root) {
        cr_err_set(err, CR_E_INVALID, "models folder is empty");
        return NULL;
    }
    if (strlen(root) > REG_PATH_MAX - 200) {
        cr_err_set(err, CR_E_INVALID, "models folder path is too long");
        return NULL;
    }
    if (mkdir_p(root, err))
        return NULL;
    reg_store_t *s = calloc(1, sizeof *s);
    if (!s) {
        cr_err_set(err, CR_E_NOMEM, "out of memory");
        return NULL;
    }
    s->lock_fd = -1;
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&s->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    char real[PATH_MAX];
    if (!realpath(root, real)) {
        cr_err_set(err, CR_E_IO, "realpath %s: %s", root, strerror(errno));
        free(s);
        return NULL;
    }
    snprintf(s->root, sizeof s->root, "%s", real);
    if (!join(s->blobs, sizeof s->blobs, s->root, "blobs") ||
        !join(s->manifests, sizeof s->manifests, s->root, "manifests")) {
        cr_err_set(err, CR_E_INVALID, "models folder path is too long");
        free(s);
        return NULL;
    }
    if (mkdir_p(s->blobs, err) || mkdir_p(s->manifests, err)) {
        free(s);
        return NULL;
    }
    reg_store_clean_temp(s, 3600);
    fix_legacy_blob_names(s);
    return s;
}

void reg_store_destroy(reg_store_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    if ((*self_p)->lock_fd >= 0)
        close((*self_p)->lock_fd);
    pthread_mutex_destroy(&(*self_p)->mu);
    free((*self_p)->pins);
    free(*self_p);
    *self_p = NULL;
}

const char *reg_store_root(const reg_store_t *s)
{
    return s->root;
}

/* ---- digests ---- */

cr_status_t reg_digest_parse(const char *text, char hex[REG_HEX_LEN + 1],
                             cr_err_t *err)
{
    hex[0] = '\0';
    if (!text || strncmp(text, "sha256", 6) != 0 ||
        (text[6] != ':' && text[6] != '-') || strlen(text) != 7 + REG_HEX_LEN)
        return cr_err_set(err, CR_E_INVALID, "invalid digest format");
    for (int i = 0; i < REG_HEX_LEN; i++) {
        char c = text[7 + i];
        if (c >= 'A' && c <= 'F')
            c = (char)(c - 'A' + 'a');
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
            hex[0] = '\0';
            return cr_err_set(err, CR_E_INVALID, "invalid digest format");
        }
        hex[i] = c;
    }
    hex[REG_HEX_LEN] = '\0';
    return CR_OK;
}

static void to_hex(const unsigned char *md, char hex[REG_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[REG_HEX_LEN] = '\0';
}

void reg_sha256_hex(const void *data, size_t len, char hex[REG_HEX_LEN + 1])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(data, len, md, &mdlen, EVP_sha256(), NULL);
    to_hex(md, hex);
}

/* ---- blobs ---- */

bool reg_store_blob_path(const reg_store_t *s, const char *hex, char *buf,
                         size_t cap)
{
    if (!hex || !is_hex64(hex))
        return false;
    int n = snprintf(buf, cap, "%s/sha256-%s", s->blobs, hex);
    return n >= 0 && (size_t)n < cap;
}

bool reg_store_blob_exists(const reg_store_t *s, const char *hex,
                           uint64_t *size)
{
    char path[REG_PATH_MAX];
    struct stat sb;
    if (!reg_store_blob_path(s, hex, path, sizeof path) ||
        stat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
        return false;
    if (size)
        *size = (uint64_t)sb.st_size;
    return true;
}

cr_status_t reg_store_blob_read(const reg_store_t *s, const char *hex,
                                size_t max, char **data, size_t *len,
                                cr_err_t *err)
{
    char path[REG_PATH_MAX];
    *data = NULL;
    *len = 0;
    if (!reg_store_blob_path(s, hex, path, sizeof path))
        return cr_err_set(err, CR_E_INVALID, "invalid digest format");
    cr_status_t st = read_file(path, max, data, len, NULL, err);
    if (st == CR_E_NOT_FOUND)
        cr_err_set(err, st, "blob sha256:%s not found", hex);
    return st;
}

cr_status_t reg_store_blob_put(reg_store_t *s, const void *data, size_t len,
                               char hex[REG_HEX_LEN + 1], bool *created,
                               cr_err_t *err)
{
    reg_blob_writer_t *w = NULL;
    cr_status_t st = reg_blob_writer_new(s, NULL, &w, err);
    if (!st)
        st = reg_blob_writer_write(w, data, len, err);
    if (!st)
        st = reg_blob_writer_finish(w, hex, created, err);
    reg_blob_writer_destroy(&w);
    return st;
}

void reg_store_blob_touch(const reg_store_t *s, const char *hex)
{
    char path[REG_PATH_MAX];
    if (reg_store_blob_path(s, hex, path, sizeof path))
        (void)utimensat(AT_FDCWD, path, NULL, 0);
}

/* The pin of hex, or NULL; the caller holds s->mu. */
static struct pin *find_pin(reg_store_t *s, const char *hex)
{
    for (size_t i = 0; i < s->n_pins; i++)
        if (!strcmp(s->pins[i].hex, hex))
            return &s->pins[i];
    return NULL;
}

cr_status_t reg_store_blob_remove(reg_store_t *s, const char *hex,
                                  cr_err_t *err)
{
    char path[REG_PATH_MAX];
    if (!reg_store_blob_path(s, hex, path, sizeof path))
        return cr_err_set(err, CR_E_INVALID, "invalid digest format");
    pthread_mutex_lock(&s->mu);
    bool pinned = find_pin(s, hex) != NULL;
    int rc = pinned ? 0 : unlink(path);
    int e = errno;
    pthread_mutex_unlock(&s->mu);
    if (pinned)
        return cr_err_set(err, CR_E_BUSY, "blob sha256:%s is in use by a create", hex);
    if (rc != 0 && e != ENOENT)
        return cr_err_set(err, CR_E_IO, "remove %s: %s", path, strerror(e));
    /* the CPU runners' packed copy of it (runner/backend/cpu/pack_cache.h:
     * CORRAL_PACK_CACHE/ or <models>/packed/, sha256-<hex>.pack) goes with
     * the blob; best effort: a copy left behind is disk space, never read
     * for another blob */
    const char *pc = getenv("CORRAL_PACK_CACHE");
    int n = pc && *pc && strcmp(pc, "off")
                ? snprintf(path, sizeof path, "%s/sha256-%s.pack", pc, hex)
                : snprintf(path, sizeof path, "%s/packed/sha256-%s.pack", s->root, hex);
    if (n > 0 && (size_t)n < sizeof path)
        (void)unlink(path);
    return CR_OK;
}

cr_status_t reg_blob_writer_new(reg_store_t *s, const char *want_hex,
                                reg_blob_writer_t **out, cr_err_t *err)
{
    *out = NULL;
    if (want_hex && !is_hex64(want_hex))
        return cr_err_set(err, CR_E_INVALID, "invalid digest format");
    reg_blob_writer_t *w = calloc(1, sizeof *w);
    if (!w)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    w->store = s;
    w->fd = -1;
    if (want_hex)
        memcpy(w->want, want_hex, REG_HEX_LEN + 1);
    if (!join(w->tmp_path, sizeof w->tmp_path, s->blobs, TMP_PREFIX "XXXXXX")) {
        free(w);
        return cr_err_set(err, CR_E_INVALID, "blobs path too long");
    }
    w->fd = mkostemp(w->tmp_path, O_CLOEXEC);
    if (w->fd < 0) {
        cr_status_t st = cr_err_set(err, CR_E_IO, "create temp file in %s: %s",
                                    s->blobs, strerror(errno));
        free(w);
        return st;
    }
    w->md = EVP_MD_CTX_new();
    if (!w->md || EVP_DigestInit_ex(w->md, EVP_sha256(), NULL) != 1) {
        reg_blob_writer_destroy(&w);
        return cr_err_set(err, CR_E_NOMEM, "cannot start SHA-256");
    }
    *out = w;
    return CR_OK;
}

cr_status_t reg_blob_writer_write(reg_blob_writer_t *w, const void *data,
                                  size_t len, cr_err_t *err)
{
    if (w->done || w->fd < 0)
        return cr_err_set(err, CR_E_INTERNAL, "blob write after finish");
    if (len == 0)
        return CR_OK;
    if (EVP_DigestUpdate(w->md, data, len) != 1)
        return cr_err_set(err, CR_E_INTERNAL, "SHA-256 update failed");
    cr_status_t st = write_all(w->fd, data, len, w->tmp_path, err);
    if (!st)
        w->size += len;
    return st;
}

uint64_t reg_blob_writer_size(const reg_blob_writer_t *w)
{
    return w->size;
}

cr_status_t reg_blob_writer_finish(reg_blob_writer_t *w,
                                   char hex[REG_HEX_LEN + 1], bool *created,
                                   cr_err_t *err)
{
    if (w->done || w->fd < 0)
        return cr_err_set(err, CR_E_INTERNAL, "blob finished twice");
    w->done = true;
    unsigned char md[32];
    unsigned int mdlen = 0;
    char got[REG_HEX_LEN + 1];
    if (EVP_DigestFinal_ex(w->md, md, &mdlen) != 1 || mdlen != 32)
        return cr_err_set(err, CR_E_INTERNAL, "SHA-256 final failed");
    to_hex(md, got);
    if (hex)
        memcpy(hex, got, sizeof got);
    if (w->want[0] && strcmp(w->want, got) != 0) {
        close(w->fd);
        w->fd = -1;
        unlink(w->tmp_path);
        w->tmp_path[0] = '\0';
        return cr_err_set(err, CR_E_INVALID,
                          "digest mismatch, expected \"sha256:%s\", got "
                          "\"sha256:%s\"",
                          w->want, got);
    }
    if (fchmod(w->fd, 0644) != 0 || fsync(w->fd) != 0)
        return cr_err_set(err, CR_E_IO, "sync %s: %s", w->tmp_path,
                          strerror(errno));
    close(w->fd);
    w->fd = -1;
    char final[REG_PATH_MAX];
    reg_store_blob_path(w->store, got, final, sizeof final);
    struct stat sb;
    if (stat(final, &sb) == 0 && S_ISREG(sb.st_mode)) {
        unlink(w->tmp_path);
        w->tmp_path[0] = '\0';
        if (created)
            *created = false;
        return CR_OK;
    }
    if (rename(w->tmp_path, final) != 0)
        return cr_err_set(err, CR_E_IO, "rename %s: %s", final,
                          strerror(errno));
    w->tmp_path[0] = '\0';
    fsync_dir(w->store->blobs);
    if (created)
        *created = true;
    return CR_OK;
}

void reg_blob_writer_destroy(reg_blob_writer_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    reg_blob_writer_t *w = *self_p;
    if (w->fd >= 0)
        close(w->fd);
    if (w->tmp_path[0])
        unlink(w->tmp_path);
    EVP_MD_CTX_free(w->md);
    free(w);
    *self_p = NULL;
}

/* ---- manifests ---- */

/* Finds entry `want` in dir ignoring case (exact spelling preferred) and
 * copies the stored spelling into out. want_dir: the entry must be a folder
 * (else a regular file). */
static bool find_entry(const char *dir, const char *want, bool want_dir,
                       char *out, size_t cap)
{
    char path[REG_PATH_MAX];
    struct stat sb;
    if (join(path, sizeof path, dir, want) && stat(path, &sb) == 0 &&
        (want_dir ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode))) {
        snprintf(out, cap, "%s", want);
        return true;
    }
    DIR *d = opendir(dir);
    if (!d)
        return false;
    bool found = false;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || strcasecmp(e->d_name, want) != 0)
            continue;
        if (!join(path, sizeof path, dir, e->d_name) || stat(path, &sb) != 0)
            continue;
        if (want_dir ? S_ISDIR(sb.st_mode) : S_ISREG(sb.st_mode)) {
            snprintf(out, cap, "%s", e->d_name);
            found = true;
        }
    }
    closedir(d);
    return found;
}

static bool manifest_path(const reg_store_t *s, const cr_model_name_t *n,
                          char *buf, size_t cap)
{
    int w = snprintf(buf, cap, "%s/%s/%s/%s/%s", s->manifests, n->host, n->ns,
                     n->model, n->tag);
    return w >= 0 && (size_t)w < cap;
}

cr_status_t reg_store_manifest_find(const reg_store_t *s,
                                    const cr_model_name_t *want,
                                    cr_model_name_t *stored)
{
    cr_model_name_t found = *want;
    char dir[REG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", s->manifests);
    char *parts[4] = {found.host, found.ns, found.model, found.tag};
    size_t caps[4] = {sizeof found.host, sizeof found.ns, sizeof found.model,
                      sizeof found.tag};
    for (int i = 0; i < 4; i++) {
        char spelled[CR_NAME_HOST_MAX + 1];
        if (!find_entry(dir, parts[i], i < 3, spelled, sizeof spelled))
            return CR_E_NOT_FOUND;
        snprintf(parts[i], caps[i], "%s", spelled);
        if (i < 3) {
            char next[REG_PATH_MAX];
            if (!join(next, sizeof next, dir, spelled))
                return CR_E_NOT_FOUND;
            memcpy(dir, next, sizeof dir);
        }
    }
    *stored = found;
    return CR_OK;
}

cr_status_t reg_store_manifest_read(const reg_store_t *s,
                                    const cr_model_name_t *name, char **data,
                                    size_t *len, struct timespec *mtime,
                                    cr_err_t *err)
{
    char path[REG_PATH_MAX];
    *data = NULL;
    *len = 0;
    if (!manifest_path(s, name, path, sizeof path))
        return cr_err_set(err, CR_E_INVALID, "manifest path too long");
    return read_file(path, REG_MANIFEST_MAX, data, len, mtime, err);
}

void reg_store_fail_next_manifest_rename(reg_store_t *s)
{
    s->fail_next_rename = true;
}

cr_status_t reg_store_manifest_write(reg_store_t *s,
                                     const cr_model_name_t *name,
                                     const void *data, size_t len,
                                     cr_err_t *err)
{
    char path[REG_PATH_MAX], dir[REG_PATH_MAX], tmp[REG_PATH_MAX];
    if (!manifest_path(s, name, path, sizeof path))
        return cr_err_set(err, CR_E_INVALID, "manifest path too long");
    dirname_of(path, dir, sizeof dir);
    cr_status_t st = mkdir_p(dir, err);
    if (st)
        return st;
    int n = snprintf(tmp, sizeof tmp, "%s/.%s.tmp-XXXXXX", dir, name->tag);
    if (n < 0 || (size_t)n >= sizeof tmp)
        return cr_err_set(err, CR_E_INVALID, "manifest path too long");
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return cr_err_set(err, CR_E_IO, "create temp file in %s: %s", dir,
                          strerror(errno));
    st = write_all(fd, data, len, tmp, err);
    if (!st && (fchmod(fd, 0644) != 0 || fsync(fd) != 0))
        st = cr_err_set(err, CR_E_IO, "sync %s: %s", tmp, strerror(errno));
    close(fd);
    if (!st && s->fail_next_rename) {
        s->fail_next_rename = false;
        return cr_err_set(err, CR_E_IO, "simulated crash before rename of %s",
                          path);
    }
    if (!st && rename(tmp, path) != 0)
        st = cr_err_set(err, CR_E_IO, "rename %s: %s", path, strerror(errno));
    if (st) {
        unlink(tmp);
        return st;
    }
    fsync_dir(dir);
    return CR_OK;
}

cr_status_t reg_store_manifest_remove(reg_store_t *s,
                                      const cr_model_name_t *name,
                                      cr_err_t *err)
{
    char path[REG_PATH_MAX];
    if (!manifest_path(s, name, path, sizeof path))
        return cr_err_set(err, CR_E_INVALID, "manifest path too long");
    if (unlink(path) != 0) {
        if (errno == ENOENT)
            return cr_err_set(err, CR_E_NOT_FOUND, "manifest not found");
        return cr_err_set(err, CR_E_IO, "remove %s: %s", path, strerror(errno));
    }
    /* Prune model, namespace and host folders if now empty. */
    char dir[REG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    for (int i = 0; i < 3; i++) {
        dirname_of(dir, dir, sizeof dir);
        if (strcmp(dir, s->manifests) == 0 || rmdir(dir) != 0)
            break;
    }
    fsync_dir(s->manifests);
    return CR_OK;
}

typedef struct name_list {
    cr_model_name_t *v;
    size_t n, cap;
} name_list_t;

static cr_status_t list_push(name_list_t *l, const cr_model_name_t *n)
{
    if (l->n >= REG_MAX_MANIFESTS)
        return CR_E_TOO_LARGE;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        cr_model_name_t *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return CR_E_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *n;
    return CR_OK;
}

/* Walks manifests/<host>/<ns>/<model>/<tag>; depth 0..3 are the parts. */
static cr_status_t walk(const char *dir, int depth, const char *parts[4],
                        name_list_t *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return CR_OK; /* vanished or unreadable: nothing listed */
    cr_status_t st = CR_OK;
    struct dirent *e;
    while (!st && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[REG_PATH_MAX];
        struct stat sb;
        if (!join(path, sizeof path, dir, e->d_name) || stat(path, &sb) != 0)
            continue;
        parts[depth] = e->d_name;
        if (depth < 3) {
            if (S_ISDIR(sb.st_mode))
                st = walk(path, depth + 1, parts, out);
            continue;
        }
        if (!S_ISREG(sb.st_mode))
            continue;
        char text[CR_NAME_BUF + 8];
        int n = snprintf(text, sizeof text, "%s/%s/%s:%s", parts[0], parts[1],
                         parts[2], parts[3]);
        cr_model_name_t name;
        if (n < 0 || (size_t)n >= sizeof text ||
            cr_model_name_parse(text, &name, NULL) != CR_OK)
            continue;
        /* The parse must give back the folder names (a folder called
         * "a:b" would otherwise pass as a different name). */
        if (strcmp(name.host, parts[0]) || strcmp(name.ns, parts[1]) ||
            strcmp(name.model, parts[2]) || strcmp(name.tag, parts[3]))
            continue;
        st = list_push(out, &name);
    }
    closedir(d);
    return st;
}

cr_status_t reg_store_manifest_list(const reg_store_t *s,
                                    cr_model_name_t **names, size_t *n,
                                    cr_err_t *err)
{
    name_list_t l = {0};
    const char *parts[4] = {0};
    cr_status_t st = walk(s->manifests, 0, parts, &l);
    if (st) {
        free(l.v);
        *names = NULL;
        *n = 0;
        return cr_err_set(err, st, "listing manifests: %s",
                          cr_status_str(st));
    }
    *names = l.v;
    *n = l.n;
    return CR_OK;
}

/* ---- temp files ---- */

static bool old_enough(const struct stat *sb, int64_t min_age_s)
{
    if (min_age_s <= 0)
        return true;
    return (int64_t)(time(NULL) - sb->st_mtime) >= min_age_s;
}

static size_t clean_dir(const char *dir, int depth, int64_t min_age_s,
                        bool blobs)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    size_t removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char path[REG_PATH_MAX];
        struct stat sb;
        if (!join(path, sizeof path, dir, e->d_name) || lstat(path, &sb) != 0)
            continue;
        if (S_ISDIR(sb.st_mode)) {
            if (!blobs && depth < 3 && e->d_name[0] != '.')
                removed += clean_dir(path, depth + 1, min_age_s, blobs);
            continue;
        }
        bool temp = blobs ? !strncmp(e->d_name, TMP_PREFIX, strlen(TMP_PREFIX))
                          : (e->d_name[0] == '.' && strstr(e->d_name, ".tmp-"));
        if (temp && S_ISREG(sb.st_mode) && old_enough(&sb, min_age_s) &&
            unlink(path) == 0)
            removed++;
    }
    closedir(d);
    return removed;
}

cr_status_t reg_store_blob_list(const reg_store_t *s, char (**hexes)[REG_HEX_LEN + 1],
                                size_t *n, int64_t min_age_s)
{
    *hexes = NULL;
    *n = 0;
    DIR *d = opendir(s->blobs);
    if (!d)
        return CR_E_IO;
    size_t cap = 0;
    cr_status_t st = CR_OK;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char hex[REG_HEX_LEN + 1], path[REG_PATH_MAX];
        struct stat sb;
        if (strncmp(e->d_name, "sha256-", 7) != 0 ||
            reg_digest_parse(e->d_name, hex, NULL) != CR_OK ||
            strcmp(e->d_name + 7, hex) != 0 ||
            !join(path, sizeof path, s->blobs, e->d_name) ||
            lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode) ||
            !old_enough(&sb, min_age_s))
            continue;
        if (*n == cap) {
            size_t nc = cap ? cap * 2 : 64;
            void *v = realloc(*hexes, nc * sizeof **hexes);
            if (!v) {
                st = CR_E_NOMEM;
                break;
            }
            *hexes = v;
            cap = nc;
        }
        memcpy((*hexes)[(*n)++], hex, sizeof hex);
    }
    closedir(d);
    if (st) {
        free(*hexes);
        *hexes = NULL;
        *n = 0;
    }
    return st;
}

cr_status_t reg_store_claim(reg_store_t *s, size_t *removed, cr_err_t *err)
{
    *removed = 0;
    if (s->lock_fd >= 0)
        return CR_OK;
    char path[REG_PATH_MAX];
    if (!join(path, sizeof path, s->root, REG_STORE_LOCK))
        return cr_err_set(err, CR_E_INVALID, "models folder path is too long");
    /* O_CLOEXEC: a child (quantize) must not hold the lock after us. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return cr_err_set(err, CR_E_IO, "open %s: %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        if (e == EWOULDBLOCK)
            return cr_err_set(err, CR_E_BUSY, "another corral-registry writes to %s",
                              s->root);
        return cr_err_set(err, CR_E_IO, "lock %s: %s", path, strerror(e));
    }
    s->lock_fd = fd;
    /* Every temp file now is a dead writer's: a registry killed while it
     * wrote a blob or a manifest (or its quantize child). */
    *removed = reg_store_clean_temp(s, 0);
    return CR_OK;
}

size_t reg_store_clean_temp(reg_store_t *s, int64_t min_age_s)
{
    return clean_dir(s->blobs, 0, min_age_s, true) +
           clean_dir(s->manifests, 0, min_age_s, false);
}

/* ---- writers at once ---- */

void reg_store_lock(reg_store_t *s)
{
    pthread_mutex_lock(&s->mu);
}

void reg_store_unlock(reg_store_t *s)
{
    pthread_mutex_unlock(&s->mu);
}

/* Room for one more pin; the caller holds s->mu. */
static bool grow_pins(reg_store_t *s)
{
    if (s->n_pins < s->cap_pins)
        return true;
    size_t cap = s->cap_pins ? 2 * s->cap_pins : 16;
    struct pin *v = realloc(s->pins, cap * sizeof *v);
    if (!v)
        return false;
    s->pins = v;
    s->cap_pins = cap;
    return true;
}

cr_status_t reg_store_pin(reg_store_t *s, const char *hex, bool must_exist,
                          cr_err_t *err)
{
    cr_status_t st = CR_OK;
    pthread_mutex_lock(&s->mu);
    struct pin *p = find_pin(s, hex);
    if (must_exist && !reg_store_blob_exists(s, hex, NULL)) {
        st = cr_err_set(err, CR_E_NOT_FOUND, "blob sha256:%s not found", hex);
    } else if (p) {
        p->count++;
    } else if (!grow_pins(s)) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    } else {
        p = &s->pins[s->n_pins++];
        snprintf(p->hex, sizeof p->hex, "%s", hex);
        p->count = 1;
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

void reg_store_unpin(reg_store_t *s, const char *hex)
{
    pthread_mutex_lock(&s->mu);
    struct pin *p = find_pin(s, hex);
    if (p && --p->count == 0)
        *p = s->pins[--s->n_pins];
    pthread_mutex_unlock(&s->mu);
}

bool reg_store_is_pinned(reg_store_t *s, const char *hex)
{
    pthread_mutex_lock(&s->mu);
    bool pinned = find_pin(s, hex) != NULL;
    pthread_mutex_unlock(&s->mu);
    return pinned;
}

void reg_store_set_step_hook(reg_store_t *s, reg_store_step_fn fn, void *ctx)
{
    s->step = fn;
    s->step_ctx = ctx;
}

void reg_store_step(const reg_store_t *s, const char *point)
{
    if (s->step)
        s->step(s->step_ctx, point);
}
