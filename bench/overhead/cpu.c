/* cpu.c: a process's CPU time from its threads' schedstat (see cpu.h). */
#include "lib/prelude.h"
#include "bench/overhead/cpu.h"

#include <dirent.h>

/* /proc/PID/task/TID/schedstat: time on a CPU and time waiting for one,
 * ns. */
static bool thread_times(pid_t pid, const char *tid, ovh_cpu_t *t)
{
    char path[300]; /* a d_name is at most 255 bytes */
    snprintf(path, sizeof path, "/proc/%d/task/%.255s/schedstat", (int)pid, tid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    unsigned long long run = 0, wait = 0;
    int got = fscanf(f, "%llu %llu", &run, &wait);
    fclose(f);
    t->run_ns = (int64_t)run;
    t->wait_ns = (int64_t)wait;
    return got == 2;
}

bool ovh_cpu_read(pid_t pid, ovh_cpu_t *out)
{
    *out = (ovh_cpu_t){0, 0};
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return false;
    bool any = false;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        ovh_cpu_t t;
        if (thread_times(pid, e->d_name, &t)) { /* one that ended is skipped */
            out->run_ns += t.run_ns;
            out->wait_ns += t.wait_ns;
            any = true;
        }
    }
    closedir(d);
    return any;
}

bool ovh_huge_read(pid_t pid, ovh_huge_t *out)
{
    *out = (ovh_huge_t){0, 0, 0};
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    char line[256];
    int got = 0;
    while (fgets(line, sizeof line, f)) {
        long long v;
        if (sscanf(line, "Rss: %lld kB", &v) == 1)
            out->rss_kb = v, got++;
        else if (sscanf(line, "AnonHugePages: %lld kB", &v) == 1)
            out->anon_huge_kb = v, got++;
        else if (sscanf(line, "FilePmdMapped: %lld kB", &v) == 1)
            out->file_pmd_kb = v, got++;
    }
    fclose(f);
    return got == 3;
}
