/* test_mem_trim.c: cr_mem_trim gives freed pages back (lib/mem_trim.h).
 *
 * A thread allocates 64 MB in 4 kB blocks and frees all but every 16th,
 * so the free space lies between live blocks where the arena's top trim
 * cannot reach; the pages stay resident until cr_mem_trim. Skips (77)
 * where the C library has no trim, and under ASan (its own allocator). */
#include "lib/prelude.h"
#include "lib/mem_trim.h"
#include "tests/unit/check.h"
#include "tests/unit/smaps.h"

#include <pthread.h>

#define BLOCK 4096
#define N_BLOCKS (64 * 256) /* 64 MB */
#define KEEP_EVERY 16

static char *blocks[N_BLOCKS];

/* In a thread of its own, as libzmq's I/O thread: its own arena. */
static void *churn(void *arg)
{
    CR_UNUSED(arg);
    for (int i = 0; i < N_BLOCKS; i++) {
        blocks[i] = malloc(BLOCK);
        if (blocks[i])
            memset(blocks[i], 0x5a, BLOCK);
    }
    for (int i = 0; i < N_BLOCKS; i++)
        if (i % KEEP_EVERY) {
            free(blocks[i]);
            blocks[i] = NULL;
        }
    return NULL;
}

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

int main(void)
{
#ifdef UNDER_ASAN
    /* ASan's allocator is not glibc's: there is nothing to trim. */
    fprintf(stderr, "SKIP: built with AddressSanitizer (its own allocator)\n");
    return 77;
#endif
    pthread_t th;
    CHECK(pthread_create(&th, NULL, churn, NULL) == 0);
    pthread_join(th, NULL);
    long before = self_rss_kb();
    if (!cr_mem_trim()) {
        fprintf(stderr, "SKIP: no malloc_trim in this C library\n");
        return 77;
    }
    long after = self_rss_kb();
    /* 60 MB were freed; at least half of it must leave. */
    CHECK_MSG(before - after >= 30 * 1024, "RSS %ld kB before the trim, %ld kB after",
              before, after);
    for (int i = 0; i < N_BLOCKS; i++)
        free(blocks[i]);
    return check_finish("mem_trim");
}
