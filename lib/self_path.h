/* self_path.h: where this program's companion binaries live.
 *
 * Every corral program is installed (and built, in build/bin) beside the
 * others, so a service finds the binary it starts next to its own
 * executable; an environment variable can point elsewhere. */
#ifndef CR_SELF_PATH_H
#define CR_SELF_PATH_H

#include "lib/prelude.h"
#include "lib/status.h"

/* The directory of the running executable. CR_E_IO if /proc/self/exe
 * cannot be read, CR_E_TOO_LARGE if it does not fit in cap. */
cr_status_t cr_self_dir(char *out, size_t cap, cr_err_t *err);

/* The path of program `name`: $env_name when set (it must be executable),
 * else `name` beside this executable. CR_E_NOT_FOUND (naming the path
 * tried) when it is not an executable file. */
cr_status_t cr_sibling_bin(const char *name, const char *env_name, char *out,
                           size_t cap, cr_err_t *err);

#endif
