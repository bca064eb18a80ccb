/* main.c: corral-scheduler entry point (placeholder until the service lands). */
#include "lib/prelude.h"

int main(void)
{
    fprintf(stderr, "corral-scheduler: not built yet\n");
    return 1;
}
