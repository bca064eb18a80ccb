/* placeholder so the library has a source until its modules land */
#include "lib/prelude.h"
int cr_placeholder_proto(void);
int cr_placeholder_proto(void) { return 0; }
