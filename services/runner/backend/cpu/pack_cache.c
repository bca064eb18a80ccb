/* pack_cache.c: packed weights on disk (file format, where and why in
 * pack_cache.h). */
#include "lib/prelude.h"
#include "lib/log.h"
#include "services/runner/backend/cpu/huge_map.h"
#include "services/runner/backend/cpu/pack_cache.h"
#include "services/runner/backend/cpu/repack.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PAGE 4096
#define HEADER_MAGIC "CRLPAK2" /* 2: tensors of 2 MiB+ at 2 MiB offsets */
#define RECORD_MAGIC "CRLTENS"

typedef struct header {
    char magic[8];
    uint32_t layout;      /* BE_PACK_LAYOUT_VERSION */
    uint32_t complete;    /* 1 once every tensor is written */
    uint64_t src_size;
    uint64_t src_mtime_ns;
    uint64_t src_ino;
    uint64_t src_dev;
    uint64_t n_tensors;
} header_t;

typedef struct record {
    char magic[8];
    int32_t type;
    int32_t pad;
    int64_t rows, cols;
    uint64_t bytes;
    char name[128];
} record_t;

_Static_assert(sizeof(header_t) <= PAGE && sizeof(record_t) <= PAGE, "one page each");

typedef enum { MODE_READ, MODE_BUILD, MODE_FAILED } cache_mode_t;

struct be_pack_cache {
    cache_mode_t mode;
    int fd;
    char path[PATH_MAX];     /* the published file */
    char tmp[PATH_MAX];      /* the file being built */
    header_t hdr;
    uint64_t cursor;         /* file offset from which the next record goes */
    uint64_t file_size;      /* MODE_READ: the file's size */
    uint64_t n_tensors;
};

static atomic_llong mapped_g, built_g;

void be_pack_cache_counts(int64_t *mapped, int64_t *built)
{
    if (mapped)
        *mapped = atomic_load(&mapped_g);
    if (built)
        *built = atomic_load(&built_g);
}

static bool is_blob_name(const char *base)
{
    if (strncmp(base, "sha256-", 7) || strlen(base) != 7 + 64)
        return false;
    for (const char *p = base + 7; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return false;
    return true;
}

bool be_pack_cache_path(const char *model_path, char *buf, size_t cap)
{
    const char *env = getenv("CORRAL_PACK_CACHE");
    if (!model_path || (env && !strcmp(env, "off")))
        return false;
    const char *slash = strrchr(model_path, '/');
    const char *base = slash ? slash + 1 : model_path;
    char dir[PATH_MAX];
    int n;
    if (env && *env) {
        if (is_blob_name(base))
            n = snprintf(buf, cap, "%s/%s.pack", env, base);
        else {
            /* another file: its name and inode, so two files of one name
             * in different folders do not share a cache */
            struct stat sb;
            if (stat(model_path, &sb))
                return false;
            n = snprintf(buf, cap, "%s/%s.%llu.pack", env, base,
                         (unsigned long long)sb.st_ino);
        }
        return n > 0 && (size_t)n < cap;
    }
    if (!is_blob_name(base))
        return false;
    size_t dl = slash ? (size_t)(slash - model_path) : 1;
    if (dl >= sizeof dir)
        return false;
    memcpy(dir, slash ? model_path : ".", dl);
    dir[dl] = '\0';
    const char *last = strrchr(dir, '/');
    const char *dname = last ? last + 1 : dir;
    if (!strcmp(dname, "blobs")) /* the store: <models>/packed */
        n = snprintf(buf, cap, "%.*s%spacked/%s.pack", (int)(last ? last - dir : 0), dir,
                     last ? "/" : "", base);
    else
        n = snprintf(buf, cap, "%s/packed/%s.pack", dir, base);
    return n > 0 && (size_t)n < cap;
}

static bool identity(const char *model_path, header_t *h)
{
    struct stat sb;
    if (stat(model_path, &sb))
        return false;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, HEADER_MAGIC, sizeof HEADER_MAGIC);
    h->layout = BE_PACK_LAYOUT_VERSION;
    h->src_size = (uint64_t)sb.st_size;
    h->src_mtime_ns = (uint64_t)sb.st_mtim.tv_sec * 1000000000ull + (uint64_t)sb.st_mtim.tv_nsec;
    h->src_ino = (uint64_t)sb.st_ino;
    h->src_dev = (uint64_t)sb.st_dev;
    return true;
}

static bool same_source(const header_t *a, const header_t *b)
{
    return !memcmp(a->magic, b->magic, sizeof a->magic) && a->layout == b->layout &&
           a->src_size == b->src_size && a->src_mtime_ns == b->src_mtime_ns &&
           a->src_ino == b->src_ino && a->src_dev == b->src_dev;
}

static bool full_pwrite(int fd, const void *buf, size_t n, uint64_t off)
{
    const uint8_t *p = buf;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w <= 0)
            return false;
        p += w, n -= (size_t)w, off += (uint64_t)w;
    }
    return true;
}

static bool full_pread(int fd, void *buf, size_t n, uint64_t off)
{
    uint8_t *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r <= 0)
            return false;
        p += r, n -= (size_t)r, off += (uint64_t)r;
    }
    return true;
}

/* mkdir -p of path's folder. */
static bool make_parent(const char *path)
{
    char d[PATH_MAX];
    snprintf(d, sizeof d, "%s", path);
    char *slash = strrchr(d, '/');
    if (!slash || slash == d)
        return true;
    *slash = '\0';
    for (char *p = d + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(d, 0755) && errno != EEXIST)
            return false;
        *p = '/';
    }
    return !mkdir(d, 0755) || errno == EEXIST;
}

static bool open_read(be_pack_cache_t *c)
{
    c->fd = open(c->path, O_RDONLY | O_CLOEXEC);
    if (c->fd < 0)
        return false;
    header_t h;
    struct stat sb;
    if (fstat(c->fd, &sb) || !full_pread(c->fd, &h, sizeof h, 0) ||
        !same_source(&h, &c->hdr) || h.complete != 1) {
        cr_log_debug("pack cache: %s is stale or incomplete; rebuilding", c->path);
        close(c->fd);
        c->fd = -1;
        return false;
    }
    c->file_size = (uint64_t)sb.st_size;
    c->n_tensors = h.n_tensors;
    c->mode = MODE_READ;
    return true;
}

static bool open_build(be_pack_cache_t *c)
{
    if (!make_parent(c->path))
        return false;
    const char *slash = strrchr(c->path, '/');
    int n = snprintf(c->tmp, sizeof c->tmp, "%.*s/.%s.tmp-%ld", (int)(slash - c->path),
                     c->path, slash + 1, (long)getpid());
    if (n <= 0 || (size_t)n >= sizeof c->tmp)
        return false;
    c->fd = open(c->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (c->fd < 0)
        return false;
    char page[PAGE] = {0};
    memcpy(page, &c->hdr, sizeof c->hdr);
    if (!full_pwrite(c->fd, page, PAGE, 0)) {
        close(c->fd);
        unlink(c->tmp);
        c->fd = -1;
        return false;
    }
    c->mode = MODE_BUILD;
    return true;
}

be_pack_cache_t *be_pack_cache_open(const char *model_path)
{
    be_pack_cache_t *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = -1;
    c->cursor = PAGE;
    if (!be_pack_cache_path(model_path, c->path, sizeof c->path) ||
        !identity(model_path, &c->hdr)) {
        free(c);
        return NULL;
    }
    if (open_read(c) || open_build(c))
        return c;
    cr_log_debug("pack cache: cannot write %s: %s", c->path, strerror(errno));
    free(c);
    return NULL;
}

static void fail(be_pack_cache_t *c, const char *why)
{
    cr_log_debug("pack cache %s: %s; packing in memory", c->path, why);
    if (c->mode == MODE_READ)
        unlink(c->path); /* stale: the next load rebuilds it */
    else if (c->mode == MODE_BUILD)
        unlink(c->tmp);
    c->mode = MODE_FAILED;
}

static uint64_t round_page(uint64_t n)
{
    return (n + PAGE - 1) / PAGE * PAGE;
}

void *be_pack_cache_map(be_pack_cache_t *c, const char *name, int t, int64_t rows,
                        int64_t cols, size_t bytes, bool *filled)
{
    *filled = false;
    if (!c || c->mode == MODE_FAILED || bytes == 0)
        return NULL;
    record_t want = {.type = t, .rows = rows, .cols = cols, .bytes = bytes};
    memcpy(want.magic, RECORD_MAGIC, sizeof RECORD_MAGIC);
    snprintf(want.name, sizeof want.name, "%s", name ? name : "");
    /* a tensor of 2 MiB or more starts at a multiple of 2 MiB, its record
     * in the page before: it can then be mapped on huge pages (huge_map.h);
     * the gap is a hole in the file, no disk space */
    uint64_t rec_off = c->cursor;
    if (bytes >= BE_CPU_HUGE_BYTES)
        rec_off = (c->cursor + PAGE + BE_CPU_HUGE_BYTES - 1) / BE_CPU_HUGE_BYTES *
                  BE_CPU_HUGE_BYTES - PAGE;
    uint64_t data_off = rec_off + PAGE, end = data_off + round_page(bytes);
    void *p = MAP_FAILED;
    if (c->mode == MODE_READ) {
        record_t have;
        if (c->n_tensors == 0 || end > c->file_size ||
            !full_pread(c->fd, &have, sizeof have, rec_off) ||
            memcmp(&have, &want, sizeof want)) {
            fail(c, "a record does not match the model");
            return NULL;
        }
        /* populated now: the pages are in the page cache, and faulting
         * them one by one during the first tokens was slower */
        p = be_cpu_map_file(c->fd, (off_t)data_off, bytes, false);
        if (p == MAP_FAILED) {
            fail(c, strerror(errno));
            return NULL;
        }
        c->n_tensors--;
        atomic_fetch_add(&mapped_g, 1);
        *filled = true;
    } else {
        char page[PAGE] = {0};
        memcpy(page, &want, sizeof want);
        int e = posix_fallocate(c->fd, (off_t)rec_off, (off_t)(end - rec_off));
        if (e || !full_pwrite(c->fd, page, PAGE, rec_off)) {
            fail(c, e ? strerror(e) : "cannot write");
            return NULL;
        }
        p = be_cpu_map_file(c->fd, (off_t)data_off, bytes, true);
        if (p == MAP_FAILED) {
            fail(c, strerror(errno));
            return NULL;
        }
        c->n_tensors++;
        atomic_fetch_add(&built_g, 1);
    }
    c->cursor = end;
    return p;
}

typedef struct publish {
    pthread_t th;
    int fd;
    char tmp[PATH_MAX], path[PATH_MAX];
} publish_t;

static void *publish_main(void *arg)
{
    publish_t *p = arg;
    /* the data first, then the name: a crash never leaves a complete-
     * looking file whose pages did not reach the disk */
    if (fdatasync(p->fd) || rename(p->tmp, p->path)) {
        cr_log_debug("pack cache: cannot publish %s: %s", p->path, strerror(errno));
        unlink(p->tmp);
    }
    close(p->fd);
    return NULL;
}

void be_pack_cache_close(be_pack_cache_t **self_p, bool ok, void **publisher)
{
    if (publisher)
        *publisher = NULL;
    if (!self_p || !*self_p)
        return;
    be_pack_cache_t *c = *self_p;
    *self_p = NULL;
    if (c->mode == MODE_BUILD && ok && c->n_tensors > 0 && publisher) {
        header_t h = c->hdr;
        h.complete = 1;
        h.n_tensors = c->n_tensors;
        publish_t *p = calloc(1, sizeof *p);
        if (p && full_pwrite(c->fd, &h, sizeof h, 0)) {
            p->fd = c->fd;
            snprintf(p->tmp, sizeof p->tmp, "%s", c->tmp);
            snprintf(p->path, sizeof p->path, "%s", c->path);
            if (!pthread_create(&p->th, NULL, publish_main, p)) {
                *publisher = p;
                free(c);
                return;
            }
        }
        free(p);
    }
    if (c->mode == MODE_BUILD)
        unlink(c->tmp);
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

void be_pack_cache_join(void **publisher)
{
    if (!publisher || !*publisher)
        return;
    publish_t *p = *publisher;
    pthread_join(p->th, NULL);
    free(p);
    *publisher = NULL;
}
