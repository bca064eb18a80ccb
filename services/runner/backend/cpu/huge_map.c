/* huge_map.c: packed weights' mappings on 2 MiB pages (why: huge_map.h). */
#include "lib/prelude.h"
#include "services/runner/backend/cpu/huge_map.h"

#include <sys/mman.h>

bool be_cpu_huge_wanted(void)
{
    const char *e = getenv("CORRAL_CPU_HUGEPAGES");
    return !(e && !strcmp(e, "0"));
}

/* A PROT_NONE reservation of bytes + 2 MiB: *aligned is its first 2 MiB
 * boundary, and the slack around [aligned, aligned + bytes) is returned
 * to the kernel. */
static void *reserve_aligned(size_t bytes)
{
    size_t span = bytes + BE_CPU_HUGE_BYTES;
    uint8_t *r = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED)
        return MAP_FAILED;
    uintptr_t a = ((uintptr_t)r + BE_CPU_HUGE_BYTES - 1) & ~(uintptr_t)(BE_CPU_HUGE_BYTES - 1);
    uint8_t *al = (uint8_t *)a;
    if (al > r)
        munmap(r, (size_t)(al - r));
    size_t tail = (size_t)(r + span - (al + bytes));
    if (tail)
        munmap(al + bytes, tail);
    return al;
}

/* Huge pages first, then the pages themselves: populating after the
 * advice lets the faults take 2 MiB pages at once (no later collapse). A
 * kernel without MADV_POPULATE_* (before 5.14) faults them in on first
 * use instead. */
static void advise_populate(void *p, size_t bytes, bool huge, int populate)
{
    if (huge)
        madvise(p, bytes, MADV_HUGEPAGE); /* advice: refused means small pages */
    madvise(p, bytes, populate);
}

void *be_cpu_map_anon(size_t bytes)
{
    bool huge = bytes >= BE_CPU_HUGE_BYTES && be_cpu_huge_wanted();
    if (!huge)
        return mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    void *at = reserve_aligned(bytes);
    if (at == MAP_FAILED)
        return MAP_FAILED;
    void *p = mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                   -1, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        munmap(at, bytes);
        errno = e;
        return MAP_FAILED;
    }
    advise_populate(p, bytes, true, MADV_POPULATE_WRITE);
    return p;
}

void *be_cpu_map_file(int fd, off_t off, size_t bytes, bool writable)
{
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    bool huge = bytes >= BE_CPU_HUGE_BYTES && (size_t)off % BE_CPU_HUGE_BYTES == 0 &&
                be_cpu_huge_wanted();
    if (!huge)
        return mmap(NULL, bytes, prot, MAP_SHARED | MAP_POPULATE, fd, off);
    void *at = reserve_aligned(bytes);
    if (at == MAP_FAILED)
        return MAP_FAILED;
    void *p = mmap(at, bytes, prot, MAP_SHARED | MAP_FIXED, fd, off);
    if (p == MAP_FAILED) {
        int e = errno;
        munmap(at, bytes);
        errno = e;
        return MAP_FAILED;
    }
    /* a read-only mapping is populated by reading (the cached pages); a
     * new file's by writing, as MAP_POPULATE on a writable mapping did */
    advise_populate(p, bytes, true, writable ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
    return p;
}
