/* runtime_dir.h: the private directory that holds the bus's Unix sockets. */
#ifndef CR_RUNTIME_DIR_H
#define CR_RUNTIME_DIR_H

#include "lib/prelude.h"
#include "lib/status.h"

/* The runtime dir: $CORRAL_RUNTIME_DIR, else $XDG_RUNTIME_DIR/corral, else
 * ~/.corral/run. Created (with parents) mode 0700 if missing; refused with
 * CR_E_FORBIDDEN if it has group/other access or another owner; CR_E_IO if
 * it cannot be made or is not a directory. */
cr_status_t cr_runtime_dir(char *out, size_t cap, cr_err_t *err);

#endif
