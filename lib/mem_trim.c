/* mem_trim.c: see mem_trim.h. The one place that knows the C library. */
#include "lib/prelude.h"
#include "lib/mem_trim.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

bool cr_mem_trim(void)
{
#ifdef __GLIBC__
    malloc_trim(0);
    return true;
#else
    return false;
#endif
}
