/* smaps.h: test helpers: how much of one mapping, or of the whole
 * process, is resident. */
#ifndef TESTS_UNIT_SMAPS_H
#define TESTS_UNIT_SMAPS_H

#include "lib/prelude.h"

/* Resident kB of the mapping that contains addr, from /proc/self/smaps
 * (-1 if not found). */
static inline long mapping_rss_kb(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    bool in = false;
    long rss = -1;
    uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = a >= lo && a < hi;
            continue;
        }
        long v;
        if (in && sscanf(line, "Rss: %ld kB", &v) == 1) {
            rss = v;
            break;
        }
    }
    fclose(f);
    return rss;
}

/* This process's resident kB (VmRSS in /proc/self/status; -1 if absent). */
static inline long self_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

#endif
