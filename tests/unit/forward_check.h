/* forward_check.h: test helpers shared by the forward-pass tests
 * (test_forward, test_arch_forward, test_moe_forward, test_gptoss_forward,
 * test_bert_forward): comparing logits with a double reference, and a
 * context whose creation is itself checked. */
#ifndef TESTS_UNIT_FORWARD_CHECK_H
#define TESTS_UNIT_FORWARD_CHECK_H

#include "lib/prelude.h"
#include "services/runner/model/forward.h"
#include "tests/unit/check.h"

#include <math.h>

/* Cosine of float logits against a double reference; 0 when either is all
 * zeros (so an empty answer never passes). */
static inline double cosine(const float *a, const double *b, size_t n)
{
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) {
        ab += a[i] * b[i];
        aa += (double)a[i] * a[i];
        bb += b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0;
}

static inline bool all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return false;
    return true;
}

/* Bit-identical (decode vs prefill, one instance vs a split). */
static inline bool same(const float *a, const float *b, size_t n)
{
    return !memcmp(a, b, n * sizeof *a);
}

/* A context for m; a failure is a failed check (and NULL). */
static inline rn_ctx_t *new_ctx(const rn_model_t *m, int n_ctx, int n_batch)
{
    rn_ctx_opts_t o = {.n_ctx = n_ctx, .n_batch = n_batch};
    rn_ctx_t *c = NULL;
    cr_err_t err;
    cr_err_clear(&err);
    CHECK_MSG(rn_ctx_new(m, &o, &c, &err) == CR_OK, "ctx: %s", err.msg);
    return c;
}

#endif
