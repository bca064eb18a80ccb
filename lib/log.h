/* log.h: one line per event on stderr, level checked before formatting.
 *
 * Services call cr_log_init() once with their name; the level comes from
 * CORRAL_DEBUG or OLLAMA_DEBUG (1 = debug, 2 = trace). lib/ and proto/ never
 * log: they return errors instead. */
#ifndef CR_LOG_H
#define CR_LOG_H

#include "lib/prelude.h"

typedef enum cr_log_level {
    CR_LOG_ERROR = 0,
    CR_LOG_WARN = 1,
    CR_LOG_INFO = 2,
    CR_LOG_DEBUG = 3,
    CR_LOG_TRACE = 4,
} cr_log_level_t;

extern int cr_log_level_g; /* the one mutable global besides signal flags */

/* Sets the service name shown on each line and reads the level from env. */
void cr_log_init(const char *service);

void cr_log_write(cr_log_level_t lvl, const char *file, int line,
                  const char *fmt, ...) CR_PRINTF(4, 5);

#define CR_LOG(lvl, ...)                                                   \
    do {                                                                   \
        if ((int)(lvl) <= cr_log_level_g)                                  \
            cr_log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);          \
    } while (0)

/* Lower-case names: <syslog.h> (pulled in by czmq.h) owns LOG_INFO etc. */
#define cr_log_error(...) CR_LOG(CR_LOG_ERROR, __VA_ARGS__)
#define cr_log_warn(...) CR_LOG(CR_LOG_WARN, __VA_ARGS__)
#define cr_log_info(...) CR_LOG(CR_LOG_INFO, __VA_ARGS__)
#define cr_log_debug(...) CR_LOG(CR_LOG_DEBUG, __VA_ARGS__)
#define cr_log_trace(...) CR_LOG(CR_LOG_TRACE, __VA_ARGS__)

#endif
