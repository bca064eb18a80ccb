/* main.c: corral-gateway entry point (placeholder until the service lands). */
#include "lib/prelude.h"

int main(void)
{
    fprintf(stderr, "corral-gateway: not built yet\n");
    return 1;
}
