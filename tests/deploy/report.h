/* report.h: how tests/deploy's checks report problems: one line each,
 * "file:line: message" on stderr, counted; a check passes with none. */
#ifndef DC_REPORT_H
#define DC_REPORT_H

#include "lib/prelude.h"

typedef struct dc_report {
    int checks;   /* conditions evaluated */
    int problems; /* conditions that failed */
} dc_report_t;

/* Records a failed check and prints it (line <= 0 prints no line). */
void dc_problem(dc_report_t *r, const char *file, int line, const char *fmt,
                ...) CR_PRINTF(4, 5);

/* Counts a check; reports the message when cond is false. */
#define DC_EXPECT(r, cond, file, line, ...)                                 \
    do {                                                                   \
        (r)->checks++;                                                     \
        if (!(cond))                                                       \
            dc_problem((r), (file), (line), __VA_ARGS__);                  \
    } while (0)

#endif
