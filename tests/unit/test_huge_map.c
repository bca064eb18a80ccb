/* test_huge_map.c: packed weights' mappings asked for on 2 MiB pages
 * (huge_map.h) and the pack cache's 2 MiB placement (pack_cache.h).
 *
 * - an anonymous mapping of 2 MiB or more starts at a 2 MiB boundary,
 *   carries the huge-page advice (VmFlags "hg"), reads zero and writes;
 *   a smaller one and CORRAL_CPU_HUGEPAGES=0 get no advice;
 * - a file mapping at a 2 MiB offset starts at a 2 MiB boundary with the
 *   advice and shows the file's bytes; a writable one writes the file;
 * - the pack cache puts a tensor of 2 MiB or more at a 2 MiB file offset
 *   (its bytes are there in the file) and maps it so, built and read back.
 * Whether the kernel then grants huge pages depends on the machine (THP
 * settings, fragmentation): printed, not checked. Skips (77) where the
 * kernel has no transparent huge pages. */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/huge_map.h"
#include "services/runner/backend/cpu/pack_cache.h"
#include "tests/unit/check.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)

/* The value of `field` (e.g. "VmFlags:") in /proc/self/smaps for the
 * mapping that holds addr, into buf; false if not found. */
static bool smaps_field(const void *addr, const char *field, char *buf, size_t cap)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return false;
    char line[512];
    bool in = false, found = false;
    uintptr_t a = (uintptr_t)addr;
    size_t fl = strlen(field);
    while (!found && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = a >= lo && a < hi;
            continue;
        }
        if (in && !strncmp(line, field, fl)) {
            snprintf(buf, cap, "%s", line + fl);
            found = true;
        }
    }
    fclose(f);
    return found;
}

static bool advised(const void *addr)
{
    char v[256];
    return smaps_field(addr, "VmFlags:", v, sizeof v) && strstr(v, " hg");
}

static void report(const char *what, const void *addr)
{
    char a[64] = "?", f[64] = "?";
    smaps_field(addr, "AnonHugePages:", a, sizeof a);
    smaps_field(addr, "FilePmdMapped:", f, sizeof f);
    a[strcspn(a, "\n")] = f[strcspn(f, "\n")] = '\0';
    printf("test_huge_map: %s: AnonHugePages%s, FilePmdMapped%s (not checked)\n", what, a, f);
}

static bool aligned(const void *p)
{
    return (uintptr_t)p % BE_CPU_HUGE_BYTES == 0;
}

static void test_anon(void)
{
    size_t n = 4 * MIB + 4096;
    uint8_t *p = be_cpu_map_anon(n);
    CHECK(p != MAP_FAILED);
    if (p == MAP_FAILED)
        return;
    CHECK_MSG(aligned(p), "anon map at %p, not 2 MiB aligned", (void *)p);
    CHECK_MSG(advised(p), "anon map has no huge-page advice");
    CHECK(p[0] == 0 && p[n - 1] == 0);
    memset(p, 0x5a, n);
    CHECK(p[n - 1] == 0x5a);
    report("anon 4 MiB", p);
    CHECK(munmap(p, n) == 0);

    p = be_cpu_map_anon(64 * 1024); /* below 2 MiB: as before */
    CHECK(p != MAP_FAILED && !advised(p));
    if (p != MAP_FAILED)
        munmap(p, 64 * 1024);

    setenv("CORRAL_CPU_HUGEPAGES", "0", 1);
    CHECK(!be_cpu_huge_wanted());
    p = be_cpu_map_anon(n);
    CHECK(p != MAP_FAILED && !advised(p));
    if (p != MAP_FAILED)
        munmap(p, n);
    unsetenv("CORRAL_CPU_HUGEPAGES");
}

static void test_file(const char *dir)
{
    char path[512];
    snprintf(path, sizeof path, "%s/weights", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0);
    if (fd < 0)
        return;
    size_t n = 6 * MIB;
    uint8_t *pat = malloc(n);
    for (size_t i = 0; i < n; i++)
        pat[i] = (uint8_t)(i * 2654435761u >> 13);
    CHECK(pwrite(fd, pat, n, 0) == (ssize_t)n);

    const uint8_t *r = be_cpu_map_file(fd, (off_t)(2 * MIB), 4 * MIB, false);
    CHECK(r != MAP_FAILED);
    if (r != MAP_FAILED) {
        CHECK_MSG(aligned(r), "file map at %p, not 2 MiB aligned", (const void *)r);
        CHECK_MSG(advised(r), "file map has no huge-page advice");
        CHECK(!memcmp(r, pat + 2 * MIB, 4 * MIB));
        report("file 4 MiB read-only", r);
        munmap((void *)r, 4 * MIB);
    }
    /* a page offset that is not 2 MiB: mapped as before, no advice */
    r = be_cpu_map_file(fd, 4096, 2 * MIB, false);
    CHECK(r != MAP_FAILED && !advised(r));
    if (r != MAP_FAILED) {
        CHECK(!memcmp(r, pat + 4096, 2 * MIB));
        munmap((void *)r, 2 * MIB);
    }
    uint8_t *w = be_cpu_map_file(fd, 0, 2 * MIB, true);
    CHECK(w != MAP_FAILED);
    if (w != MAP_FAILED) {
        CHECK(aligned(w) && advised(w));
        uint8_t flip = (uint8_t)(pat[12345] ^ 0xff);
        w[12345] = flip;
        CHECK(munmap(w, 2 * MIB) == 0);
        uint8_t b = 0;
        CHECK(pread(fd, &b, 1, 12345) == 1 && b == flip);
    }
    free(pat);
    close(fd);
    unlink(path);
}

/* Three tensors through a cache built and then read: A (3 MiB), B (8 KiB),
 * C (2 MiB). A and C at 2 MiB file offsets, mapped at 2 MiB addresses. */
static void test_cache(const char *dir)
{
    char model[512], cache_dir[512], cpath[1024];
    snprintf(model, sizeof model, "%s/model.gguf", dir);
    snprintf(cache_dir, sizeof cache_dir, "%s/pack", dir);
    int fd = open(model, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    CHECK(fd >= 0 && write(fd, "GGUF", 4) == 4);
    close(fd);
    setenv("CORRAL_PACK_CACHE", cache_dir, 1);
    CHECK(be_pack_cache_path(model, cpath, sizeof cpath));
    const char *names[] = {"a", "b", "c"};
    size_t sizes[] = {3 * MIB, 8192, 2 * MIB};
    for (int pass = 0; pass < 2; pass++) {
        be_pack_cache_t *c = be_pack_cache_open(model);
        CHECK(c != NULL);
        bool ok = c != NULL;
        for (int k = 0; c && k < 3; k++) {
            bool filled = false;
            uint8_t *p = be_pack_cache_map(c, names[k], 8, 8, (int64_t)sizes[k], sizes[k],
                                           &filled);
            CHECK_MSG(p != NULL, "pass %d: tensor %s not mapped", pass, names[k]);
            if (!p) {
                ok = false;
                continue;
            }
            CHECK_EQ_INT(filled, pass == 1);
            if (sizes[k] >= BE_CPU_HUGE_BYTES)
                CHECK_MSG(aligned(p) && advised(p), "pass %d: tensor %s at %p, advised %d",
                          pass, names[k], (void *)p, advised(p));
            if (pass == 0)
                memset(p, 'a' + k, sizes[k]);
            else
                CHECK(p[0] == 'a' + k && p[sizes[k] - 1] == 'a' + k);
            munmap(p, sizes[k]);
        }
        void *pub = NULL;
        be_pack_cache_close(&c, ok, &pub);
        be_pack_cache_join(&pub);
    }
    /* the file itself: A's bytes from 2 MiB, C's from a later multiple */
    fd = open(cpath, O_RDONLY);
    CHECK(fd >= 0);
    uint8_t b[2] = {0};
    CHECK(pread(fd, b, 1, (off_t)(2 * MIB)) == 1 && b[0] == 'a');
    CHECK(pread(fd, b, 1, (off_t)(2 * MIB - 1)) == 1 && b[0] != 'a');
    struct stat sb;
    CHECK(fstat(fd, &sb) == 0);
    CHECK(pread(fd, b, 1, (off_t)(sb.st_size - (off_t)(2 * MIB))) == 1 && b[0] == 'c');
    CHECK((sb.st_size - (off_t)(2 * MIB)) % (off_t)(2 * MIB) == 0);
    close(fd);
    unlink(cpath);
    rmdir(cache_dir);
    unlink(model);
    unsetenv("CORRAL_PACK_CACHE");
}

int main(void)
{
    if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK))
        return check_skip("test_huge_map", "the kernel has no transparent huge pages");
    char dir[] = "/tmp/corral-huge-XXXXXX";
    if (!mkdtemp(dir))
        return check_skip("test_huge_map", "no temporary folder");
    test_anon();
    test_file(dir);
    test_cache(dir);
    rmdir(dir);
    return check_finish("test_huge_map");
}
