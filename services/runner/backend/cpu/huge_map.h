/* huge_map.h: the mappings that hold packed weights (repack.h), asked for
 * on 2 MiB pages.
 *
 * Decode reads every weight once per token, 0.6-1.2 GB for a 1B model,
 * so by the time a matrix comes round again the page-table entries of
 * its 4 KiB pages have left the caches and each new page costs a walk
 * from memory before the hardware prefetcher may cross into it (in a VM a
 * two-level walk). On 2 MiB pages there are 512 times fewer. Measured
 * with one thread on an AMD EPYC VM (a 256 MB packed Q8_0 matrix read
 * right after 1.2 GB of other weights, medians of 15): a plain read ran
 * 8-12 GB/s on 4 KiB pages and 18-20 GB/s on 2 MiB pages.
 *
 * Anonymous memory gets them where transparent huge pages are "always"
 * or "madvise" (MADV_HUGEPAGE); a file mapping (the pack cache) where the
 * filesystem keeps 2 MiB folios in the page cache, the file offset is a
 * multiple of 2 MiB and the mapping's address agrees with it, which these
 * functions arrange. Where the kernel gives none, the mappings work as
 * before on small pages. CORRAL_CPU_HUGEPAGES=0 asks for none (to
 * compare). Owns no state; does not decide what is mapped. */
#ifndef BE_CPU_HUGE_MAP_H
#define BE_CPU_HUGE_MAP_H

#include "lib/prelude.h"

#include <sys/types.h>

#define BE_CPU_HUGE_BYTES ((size_t)2 << 20) /* one PMD page on x86-64 */

/* False when CORRAL_CPU_HUGEPAGES=0. */
bool be_cpu_huge_wanted(void);

/* `bytes` of zeroed, populated, private read-write memory, 2 MiB aligned
 * and advised onto huge pages when bytes >= 2 MiB. The caller owns it
 * (munmap(p, bytes)); MAP_FAILED with errno on failure. */
void *be_cpu_map_anon(size_t bytes);

/* `bytes` of fd from offset `off` (a multiple of the page size), shared,
 * populated, read-only or read-write; when off is a multiple of 2 MiB and
 * bytes >= 2 MiB, placed at an address that is one too and advised onto
 * huge pages. The caller owns it (munmap(p, bytes)); MAP_FAILED with errno
 * on failure. */
void *be_cpu_map_file(int fd, off_t off, size_t bytes, bool writable);

#endif
