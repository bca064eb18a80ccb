/* mem_trim.h: hand the allocator's free pages back to the system.
 *
 * glibc's malloc keeps what a thread freed in that thread's arena: a
 * service whose libzmq I/O thread once held buffers for hundreds of
 * connections keeps those pages resident after they are freed, and its RSS
 * creeps up to the arena's high-water mark as the free chunks are touched
 * again (the scheduler under bench-soak: 16 MB in use, 32 MB resident). A
 * long-lived service calls this now and then so RSS follows what is in
 * use. */
#ifndef CR_MEM_TRIM_H
#define CR_MEM_TRIM_H

#include "lib/prelude.h"

/* Returns free memory at the top and in the middle of every malloc arena
 * to the system (glibc's malloc_trim). False where the C library has no
 * such call (then it does nothing). Thread-safe; costs a walk of the
 * arenas' free lists. */
bool cr_mem_trim(void);

#endif
