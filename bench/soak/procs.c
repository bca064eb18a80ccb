/* procs.c: bench-soak's view of the services in /proc: which processes
 * descend from `corral serve`, their resident memory and open descriptors.
 * Reads only; knows nothing of the load. */
#include "lib/prelude.h"
#include "bench/soak/soak.h"

#include <dirent.h>
#include <unistd.h>

/* Parent pid and comm of pid (comm may be NULL); -1 when gone. */
static pid_t parent_of(pid_t pid, char *comm, size_t cap)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *l = strchr(buf, '('), *r = strrchr(buf, ')');
    if (!l || !r || r < l)
        return -1;
    if (comm) {
        size_t m = CR_MIN((size_t)(r - l - 1), cap - 1);
        memcpy(comm, l + 1, m);
        comm[m] = '\0';
    }
    int ppid = -1;
    char state;
    if (sscanf(r + 1, " %c %d", &state, &ppid) != 2)
        return -1;
    return ppid;
}

static bool descends_from(pid_t pid, pid_t root)
{
    pid_t pp = parent_of(pid, NULL, 0);
    for (int depth = 0; pp > 1 && depth < 8; depth++) {
        if (pp == root)
            return true;
        pp = parent_of(pp, NULL, 0);
    }
    return false;
}

static long rss_kb(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static double cpu_seconds(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the comm: state is the 3rd, utime the 14th, stime the 15th. */
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                     &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static long fd_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    if (!d)
        return -1;
    long n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

void soak_procs_read(pid_t serve_pid, double t_s, soak_sample_t *out)
{
    memset(out, 0, sizeof *out);
    out->t_s = t_s;
    DIR *d = opendir("/proc");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && out->n < SOAK_MAX_PROCS) {
        pid_t pid = (pid_t)atoi(e->d_name);
        char comm[32];
        /* comm is cut at 15 bytes: "corral-schedule". */
        if (pid <= 0 || parent_of(pid, comm, sizeof comm) < 0 ||
            strncmp(comm, "corral-", 7) || !descends_from(pid, serve_pid))
            continue;
        soak_proc_t *p = &out->p[out->n++];
        p->pid = pid;
        snprintf(p->name, sizeof p->name, "%s",
                 !strcmp(comm + 7, "schedule") ? "scheduler" : comm + 7);
        p->rss_kb = rss_kb(pid);
        p->fds = fd_count(pid);
        p->cpu_s = cpu_seconds(pid);
    }
    closedir(d);
}

const soak_proc_t *soak_sample_find(const soak_sample_t *s, pid_t pid)
{
    for (int i = 0; i < s->n; i++)
        if (s->p[i].pid == pid)
            return &s->p[i];
    return NULL;
}
