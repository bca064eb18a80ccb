/* check.h: the tiny harness every unit test uses.
 *
 * CHECK(cond) records a failure with its line and keeps going; CHECK_EQ_INT
 * and friends print both values. A test's main ends with `return
 * check_finish("name");`, which prints "N passed, M failed" and returns the
 * exit code ctest reads (0 pass, 1 fail). check_skip() returns 77. */
#ifndef CR_CHECK_H
#define CR_CHECK_H

#include "lib/prelude.h"

#include <math.h>

static int check_passed_g, check_failed_g;

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (cond) {                                                         \
            check_passed_g++;                                               \
        } else {                                                            \
            check_failed_g++;                                               \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                   \
    } while (0)

#define CHECK_MSG(cond, ...)                                                \
    do {                                                                    \
        if (cond) {                                                         \
            check_passed_g++;                                               \
        } else {                                                            \
            check_failed_g++;                                               \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                  \
    do {                                                                    \
        long long a_ = (long long)(a), b_ = (long long)(b);                 \
        CHECK_MSG(a_ == b_, "%lld != %lld", a_, b_);                        \
    } while (0)

#define CHECK_EQ_STR(a, b)                                                  \
    do {                                                                    \
        const char *a_ = (a), *b_ = (b);                                    \
        CHECK_MSG(a_ && b_ && !strcmp(a_, b_), "\"%s\" != \"%s\"",          \
                  a_ ? a_ : "(null)", b_ ? b_ : "(null)");                  \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                               \
    do {                                                                    \
        double a_ = (double)(a), b_ = (double)(b);                          \
        CHECK_MSG(fabs(a_ - b_) <= (tol), "%.9g vs %.9g (tol %g)", a_, b_,  \
                  (double)(tol));                                           \
    } while (0)

static inline int check_finish(const char *name)
{
    printf("%s: %d passed, %d failed\n", name, check_passed_g, check_failed_g);
    return check_failed_g ? 1 : 0;
}

static inline int check_skip(const char *name, const char *why)
{
    printf("%s: skipped: %s\n", name, why);
    return 77;
}

/* Returns the shared testdata folder (CORRAL_TESTDATA) if it exists and has
 * `rel` inside it, else NULL. */
static inline const char *check_testdata(const char *rel)
{
    static char path[1024];
    const char *root = getenv("CORRAL_TESTDATA");
    if (!root || !*root)
        return NULL;
    snprintf(path, sizeof path, "%s/%s", root, rel ? rel : "");
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fclose(f);
    snprintf(path, sizeof path, "%s", root);
    return path;
}

#endif
