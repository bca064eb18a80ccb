/* main.c: corral-runner entry point (placeholder until the service lands). */
#include "lib/prelude.h"

int main(void)
{
    fprintf(stderr, "corral-runner: not built yet\n");
    return 1;
}
