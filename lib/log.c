/* log.c: the stderr logger behind CR_LOG. */
#include "lib/prelude.h"
#include "lib/log.h"

#include <time.h>
#include <unistd.h>

int cr_log_level_g = CR_LOG_INFO;
static char service_name[32] = "corral";

static int level_from_env(void)
{
    const char *v = getenv("CORRAL_DEBUG");
    if (!v || !*v)
        v = getenv("OLLAMA_DEBUG");
    if (!v || !*v || !strcmp(v, "0") || !strcasecmp(v, "false"))
        return CR_LOG_INFO;
    if (!strcmp(v, "2") || !strcasecmp(v, "trace"))
        return CR_LOG_TRACE;
    return CR_LOG_DEBUG;
}

void cr_log_init(const char *service)
{
    if (service)
        snprintf(service_name, sizeof service_name, "%s", service);
    cr_log_level_g = level_from_env();
}

void cr_log_write(cr_log_level_t lvl, const char *file, int line,
                  const char *fmt, ...)
{
    static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG",
                                        "TRACE"};
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    /* One fprintf so lines from several threads do not interleave. */
    fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s[%d] %s:%d %s\n",
            tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
            tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L, names[lvl],
            service_name, (int)getpid(), base, line, msg);
}
