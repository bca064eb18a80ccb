/* splitmix.h: reproducible pseudo-random numbers for tests and benches.
 *
 * splitmix64 over a state the caller owns (a test names its seed, so a
 * failure replays with the same inputs): the next 64 bits, and from them
 * uniform doubles in [0, 1), floats in [-1, 1) and standard normals. */
#ifndef CR_TEST_SPLITMIX_H
#define CR_TEST_SPLITMIX_H

#include "lib/prelude.h"

#include <math.h>

static inline uint64_t splitmix_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* 53 random bits as a double in [0, 1) */
static inline double splitmix_unit(uint64_t *s)
{
    return (double)(splitmix_next(s) >> 11) / 9007199254740992.0;
}

/* uniform in [-1, 1) */
static inline float splitmix_sym(uint64_t *s)
{
    return (float)(splitmix_unit(s) * 2.0 - 1.0);
}

/* standard normal (Box-Muller over two uniforms in (0, 1)) */
static inline float splitmix_normal(uint64_t *s)
{
    double u1 = ((double)(splitmix_next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = ((double)(splitmix_next(s) >> 11) + 0.5) / 9007199254740992.0;
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
