/* engine_load.h: test helpers: the scheduler's load message for a model
 * file, a runner engine loaded from it, and a raw generate request. */
#ifndef TESTS_UNIT_ENGINE_LOAD_H
#define TESTS_UNIT_ENGINE_LOAD_H

#include "lib/prelude.h"
#include "services/runner/engine.h"
#include "tests/unit/check.h"

/* The load message body the scheduler sends for path as "synth:latest":
 * num_ctx in *o (which the body points to), an optional template (NULL: the
 * default) and n_par slots (0: the engine's default). */
static inline void test_load_body(msg_load_body_t *ld, msg_options_t *o, const char *path,
                                  const char *tmpl, int64_t num_ctx, int n_par)
{
    memset(o, 0, sizeof *o);
    o->num_ctx = num_ctx;
    o->has_num_ctx = true;
    memset(ld, 0, sizeof *ld);
    ld->name = "synth:latest";
    ld->has_name = true;
    ld->model_path = (char *)path;
    ld->has_model_path = true;
    ld->template = (char *)tmpl;
    ld->has_template = tmpl != NULL;
    ld->options = o;
    ld->has_options = true;
    ld->num_parallel = n_par;
    ld->has_num_parallel = n_par > 0;
}

/* Loads path as test_load_body describes; NULL (and a failed check) on
 * error. */
static inline rn_engine_t *test_engine_load(const char *path, const char *tmpl,
                                            int64_t num_ctx, int n_par)
{
    msg_options_t o;
    msg_load_body_t ld;
    test_load_body(&ld, &o, path, tmpl, num_ctx, n_par);
    rn_engine_t *e = NULL;
    cr_err_t err;
    cr_status_t st = rn_engine_load(&ld, &e, &err);
    CHECK_MSG(st == CR_OK, "load: %s", err.msg);
    return e;
}

/* A raw generate request of prompt for "synth" with options o (borrowed,
 * as is prompt: both must outlive m). */
static inline void test_generate_msg(msg_t *m, const char *prompt, msg_options_t *o)
{
    msg_init(m, MSG_generate, "t");
    m->u.generate.model = "synth";
    m->u.generate.has_model = true;
    m->u.generate.prompt = (char *)prompt;
    m->u.generate.has_prompt = true;
    m->u.generate.raw = true;
    m->u.generate.has_raw = true;
    m->u.generate.options = o;
    m->u.generate.has_options = true;
}

#endif
