/* huge_map.h: the mappings that hold packed weights (repack.h), asked for
 * on 2 MiB pages.
 *
 * Decode reads every weight once per token, 0.6-1.2 GB for a 1B model,
 * so each matrix comes round with its page-table entries long gone from
 * the caches, and on 4 KiB pages the stream needs a walk (in a VM a
 * two-level one) every 4 KiB. Measured on an AMD EPYC VM with one thread
 * (in one process, 256 MB packed Q8_0 matrices each read after 1.3 GB of
 * others, medians of 11 rounds): with the machine busy (load 15 on 2
 * cores) a plain read and the decode kernels ran 4-13 GB/s on 4 KiB pages
 * and 21-26 GB/s on 2 MiB pages; with it quiet both ran 26-28 GB/s.
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
