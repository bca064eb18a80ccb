/* blobs.c: the node's blob cache and chunked, verified, resumable fetch. */
#include "lib/prelude.h"
#include "services/node/blobs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

struct nd_fetch {
    char digest[ND_DIGEST_MAX];
    char path[4096];        /* final */
    char partial[4200];     /* path-partial */
    int fd;
    int64_t offset;         /* bytes written and hashed */
    int64_t total;          /* -1 until the first answer */
    EVP_MD_CTX *md;
};

bool nd_digest_valid(const char *name)
{
    if (!name || strncmp(name, "sha256-", 7) || strlen(name) != 7 + 64)
        return false;
    for (const char *p = name + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

static bool is_file(const char *path)
{
    struct stat sb;
    return !stat(path, &sb) && S_ISREG(sb.st_mode);
}

bool nd_blob_find(const char *cache_dir, const char *store_dir,
                  const char *digest, char *out, size_t cap)
{
    if (!nd_digest_valid(digest))
        return false;
    if ((size_t)snprintf(out, cap, "%s/blobs/%s", cache_dir, digest) < cap &&
        is_file(out)) {
        /* Used now: the cache bound removes least recently used first. */
        utimensat(AT_FDCWD, out, NULL, 0);
        return true;
    }
    if (store_dir && *store_dir &&
        (size_t)snprintf(out, cap, "%s/blobs/%s", store_dir, digest) < cap &&
        is_file(out))
        return true;
    out[0] = '\0';
    return false;
}

static cr_status_t mkdir_p(const char *dir, cr_err_t *err)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s", dir) >= sizeof tmp)
        return cr_err_set(err, CR_E_TOO_LARGE, "path too long: %s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(tmp, 0700) && errno != EEXIST)
            return cr_err_set(err, CR_E_IO, "mkdir %s: %s", tmp, strerror(errno));
        *p = '/';
    }
    if (mkdir(tmp, 0700) && errno != EEXIST)
        return cr_err_set(err, CR_E_IO, "mkdir %s: %s", tmp, strerror(errno));
    return CR_OK;
}

cr_status_t nd_fetch_new(const char *cache_dir, const char *digest,
                         nd_fetch_t **out, cr_err_t *err)
{
    if (!nd_digest_valid(digest))
        return cr_err_set(err, CR_E_INVALID, "'%s' is not a sha256 blob name",
                          digest ? digest : "");
    char dir[4000];
    if ((size_t)snprintf(dir, sizeof dir, "%s/blobs", cache_dir) >= sizeof dir)
        return cr_err_set(err, CR_E_TOO_LARGE, "cache path too long");
    cr_status_t st = mkdir_p(dir, err);
    if (st)
        return st;
    nd_fetch_t *f = calloc(1, sizeof *f);
    if (!f)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    f->fd = -1;
    f->total = -1;
    snprintf(f->digest, sizeof f->digest, "%s", digest);
    snprintf(f->path, sizeof f->path, "%s/%s", dir, digest);
    snprintf(f->partial, sizeof f->partial, "%s-partial", f->path);
    f->md = EVP_MD_CTX_new();
    if (!f->md || !EVP_DigestInit_ex(f->md, EVP_sha256(), NULL)) {
        nd_fetch_destroy(&f);
        return cr_err_set(err, CR_E_NOMEM, "cannot start SHA-256");
    }
    f->fd = open(f->partial, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (f->fd < 0) {
        st = cr_err_set(err, CR_E_IO, "open %s: %s", f->partial,
                        strerror(errno));
        nd_fetch_destroy(&f);
        return st;
    }
    /* Resume: hash what an earlier fetch left, then ask for the rest. */
    static uint8_t buf[1 << 16];
    for (;;) {
        ssize_t n = pread(f->fd, buf, sizeof buf, f->offset);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            st = cr_err_set(err, CR_E_IO, "read %s: %s", f->partial,
                            strerror(errno));
            nd_fetch_destroy(&f);
            return st;
        }
        if (n == 0)
            break;
        EVP_DigestUpdate(f->md, buf, (size_t)n);
        f->offset += n;
    }
    *out = f;
    return CR_OK;
}

void nd_fetch_destroy(nd_fetch_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    nd_fetch_t *f = *self_p;
    if (f->fd >= 0)
        close(f->fd);
    EVP_MD_CTX_free(f->md);
    free(f);
    *self_p = NULL;
}

const char *nd_fetch_digest(const nd_fetch_t *f)
{
    return f->digest;
}

int64_t nd_fetch_offset(const nd_fetch_t *f)
{
    return f->offset;
}

const char *nd_fetch_path(const nd_fetch_t *f)
{
    return f->path;
}

/* The end: compare the hash with the name, then fsync and rename. */
static cr_status_t finish(nd_fetch_t *f, cr_err_t *err)
{
    uint8_t md[EVP_MAX_MD_SIZE];
    unsigned md_len = 0;
    EVP_DigestFinal_ex(f->md, md, &md_len);
    char hex[65];
    for (unsigned i = 0; i < md_len && i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    if (md_len != 32 || strcmp(hex, f->digest + 7)) {
        unlink(f->partial);
        return cr_err_set(err, CR_E_CORRUPT,
                          "blob %s: the received bytes hash to sha256-%s",
                          f->digest, hex);
    }
    if (fsync(f->fd) || rename(f->partial, f->path))
        return cr_err_set(err, CR_E_IO, "storing %s: %s", f->path,
                          strerror(errno));
    return CR_OK;
}

cr_status_t nd_fetch_feed(nd_fetch_t *f, int64_t offset, int64_t total,
                          const void *data, size_t len, bool *done,
                          cr_err_t *err)
{
    *done = false;
    if (total < 0 || (f->total >= 0 && total != f->total))
        return cr_err_set(err, CR_E_PROTO,
                          "blob %s: size changed from %" PRId64 " to %" PRId64,
                          f->digest, f->total, total);
    f->total = total;
    if (offset != f->offset)
        return cr_err_set(err, CR_E_PROTO,
                          "blob %s: got bytes at %" PRId64 ", asked for %" PRId64,
                          f->digest, offset, f->offset);
    if (f->offset > total) {
        /* A partial file longer than the blob: it is not this blob. */
        unlink(f->partial);
        return cr_err_set(err, CR_E_CORRUPT,
                          "blob %s: partial file is longer than the blob",
                          f->digest);
    }
    if ((int64_t)len > total - f->offset)
        return cr_err_set(err, CR_E_PROTO, "blob %s: chunk past the end",
                          f->digest);
    if (len == 0 && f->offset < total)
        return cr_err_set(err, CR_E_TRUNCATED,
                          "blob %s: empty chunk at %" PRId64 " of %" PRId64,
                          f->digest, f->offset, total);
    size_t put = 0;
    while (put < len) {
        ssize_t n = pwrite(f->fd, (const uint8_t *)data + put, len - put,
                           f->offset + (int64_t)put);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return cr_err_set(err, CR_E_IO, "write %s: %s", f->partial,
                              strerror(errno));
        put += (size_t)n;
    }
    EVP_DigestUpdate(f->md, data, len);
    f->offset += (int64_t)len;
    if (f->offset < total)
        return CR_OK;
    cr_status_t st = finish(f, err);
    if (!st)
        *done = true;
    return st;
}

/* ---- the cache bound ---- */

typedef struct cached {
    char name[ND_DIGEST_MAX];
    int64_t bytes;
    int64_t used_ns; /* mtime */
} cached_t;

static int by_use(const void *a, const void *b)
{
    const cached_t *x = a, *y = b;
    if (x->used_ns != y->used_ns)
        return x->used_ns < y->used_ns ? -1 : 1;
    return strcmp(x->name, y->name); /* a stable order for equal times */
}

static bool kept(const char *name, const char *const *keep, size_t n_keep)
{
    for (size_t i = 0; i < n_keep; i++)
        if (keep[i] && !strcmp(keep[i], name))
            return true;
    return false;
}

cr_status_t nd_cache_prune(const char *cache_dir, int64_t max_bytes,
                           const char *const *keep, size_t n_keep,
                           nd_prune_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    char dir[4200];
    if ((size_t)snprintf(dir, sizeof dir, "%s/blobs", cache_dir) >= sizeof dir)
        return cr_err_set(err, CR_E_TOO_LARGE, "path too long: %s", cache_dir);
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? CR_OK
                               : cr_err_set(err, CR_E_IO, "cannot read %s: %s",
                                            dir, strerror(errno));
    cached_t *v = NULL;
    size_t n = 0, cap = 0;
    cr_status_t st = CR_OK;
    struct dirent *de;
    while ((de = readdir(d)) && n < ND_CACHE_MAX_BLOBS) {
        struct stat sb;
        if (!nd_digest_valid(de->d_name) ||
            fstatat(dirfd(d), de->d_name, &sb, 0) || !S_ISREG(sb.st_mode))
            continue;
        if (n == cap) {
            size_t ncap = cap ? cap * 2 : 64;
            cached_t *nv = realloc(v, ncap * sizeof *nv);
            if (!nv) {
                st = cr_err_set(err, CR_E_NOMEM, "out of memory");
                goto out;
            }
            v = nv;
            cap = ncap;
        }
        memcpy(v[n].name, de->d_name, 7 + 64 + 1); /* valid: that long */
        v[n].bytes = sb.st_size;
        v[n].used_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 +
                       sb.st_mtim.tv_nsec;
        out->total_bytes += sb.st_size;
        n++;
    }
    if (n)
        qsort(v, n, sizeof *v, by_use);
    for (size_t i = 0; i < n && out->total_bytes > max_bytes; i++) {
        if (kept(v[i].name, keep, n_keep))
            continue;
        if (unlinkat(dirfd(d), v[i].name, 0))
            continue; /* gone already, or not ours to remove: keep going */
        /* and the runners' packed copy of it (pack_cache.h: "packed"
         * beside "blobs"), if any */
        char packed[7 + 64 + 16 + 8];
        snprintf(packed, sizeof packed, "../packed/%s.pack", v[i].name);
        (void)unlinkat(dirfd(d), packed, 0);
        out->n_removed++;
        out->removed_bytes += v[i].bytes;
        out->total_bytes -= v[i].bytes;
    }
out:
    free(v);
    closedir(d);
    return st;
}
