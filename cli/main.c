/* main.c: corral entry point (placeholder until the service lands). */
#include "lib/prelude.h"

int main(void)
{
    fprintf(stderr, "corral: not built yet\n");
    return 1;
}
