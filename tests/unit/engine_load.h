/* engine_load.h: test helper: a runner engine on a model file, as the
 * scheduler's load message would ask for it. */
#ifndef TESTS_UNIT_ENGINE_LOAD_H
#define TESTS_UNIT_ENGINE_LOAD_H

#include "lib/prelude.h"
#include "services/runner/engine.h"
#include "tests/unit/check.h"

/* Loads path as "synth:latest" with num_ctx, an optional template (NULL:
 * the default) and n_par slots (0: the engine's default); NULL (and a
 * failed check) on error. */
static inline rn_engine_t *test_engine_load(const char *path, const char *tmpl,
                                            int64_t num_ctx, int n_par)
{
    msg_options_t o = {0};
    o.num_ctx = num_ctx;
    o.has_num_ctx = true;
    msg_load_body_t ld = {0};
    ld.name = "synth:latest";
    ld.has_name = true;
    ld.model_path = (char *)path;
    ld.has_model_path = true;
    ld.template = (char *)tmpl;
    ld.has_template = tmpl != NULL;
    ld.options = &o;
    ld.has_options = true;
    ld.num_parallel = n_par;
    ld.has_num_parallel = n_par > 0;
    rn_engine_t *e = NULL;
    cr_err_t err;
    cr_status_t st = rn_engine_load(&ld, &e, &err);
    CHECK_MSG(st == CR_OK, "load: %s", err.msg);
    return e;
}

#endif
