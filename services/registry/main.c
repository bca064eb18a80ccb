/* main.c: corral-registry entry point (placeholder until the service lands). */
#include "lib/prelude.h"

int main(void)
{
    fprintf(stderr, "corral-registry: not built yet\n");
    return 1;
}
