/* report.c: problem lines for tests/deploy's checks (see report.h). */
#include "lib/prelude.h"
#include "tests/deploy/report.h"

void dc_problem(dc_report_t *r, const char *file, int line, const char *fmt,
                ...)
{
    r->problems++;
    if (line > 0)
        fprintf(stderr, "%s:%d: ", file, line);
    else
        fprintf(stderr, "%s: ", file);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
