/* test_options: the one option table (lib/options.def) drives every user:
 * the gateway's request parser, the registry's create validation, the
 * scheduler's layering and load checks, the CLI's PARAMETER parser, and the
 * runner's built-in defaults. */
#include "lib/prelude.h"
#include "tests/unit/check.h"

#include "cli/modelfile.h"
#include "proto/options.h"
#include "services/gateway/convert.h"
#include "services/registry/params.h"
#include "services/runner/sampler.h"
#include "services/scheduler/options.h"

#include <jansson.h>
#include <math.h>

/* A JSON value of row d's type, and the same as Modelfile text. */
static json_t *sample_json(const msg_opt_def_t *d)
{
    switch (d->type) {
    case MSG_OPT_INT: return json_integer(7);
    case MSG_OPT_FLOAT: return json_real(0.25);
    case MSG_OPT_BOOL: return json_true();
    case MSG_OPT_STRS: return json_pack("[s]", "<end>");
    }
    return NULL;
}

static const char *sample_text(const msg_opt_def_t *d)
{
    switch (d->type) {
    case MSG_OPT_INT: return "7";
    case MSG_OPT_FLOAT: return "0.25";
    case MSG_OPT_BOOL: return "true";
    case MSG_OPT_STRS: return "<end>";
    }
    return "";
}

static bool has_sample(const msg_options_t *o, const msg_opt_def_t *d)
{
    if (!msg_opt_has(o, d))
        return false;
    const char *p = (const char *)o + d->off;
    switch (d->type) {
    case MSG_OPT_INT: return *(const int64_t *)p == 7;
    case MSG_OPT_FLOAT: return *(const double *)p == 0.25;
    case MSG_OPT_BOOL: return *(const bool *)p;
    case MSG_OPT_STRS: {
        const msg_strs_t *s = (const msg_strs_t *)p;
        return s->n == 1 && !strcmp(s->v[0], "<end>");
    }
    }
    return false;
}

static size_t n_set(const msg_options_t *o)
{
    size_t n = 0;
    for (size_t i = 0; i < msg_opt_count; i++)
        n += msg_opt_has(o, &msg_opt_defs[i]);
    return n;
}

/* A generate request whose options object is {key: v}. */
static cr_status_t gateway_parse(const char *key, json_t *v, gw_request_t *q,
                                 cr_err_t *err)
{
    json_t *body = json_pack("{s:s, s:{s:O}}", "model", "m", "options", key, v);
    char *text = json_dumps(body, 0);
    cr_status_t st = gw_request_parse(GW_API_GENERATE, text, strlen(text), q, err);
    free(text);
    json_decref(body);
    return st;
}

static void test_table(void)
{
    CHECK(msg_opt_count >= 20);
    for (size_t i = 0; i < msg_opt_count; i++) {
        const msg_opt_def_t *d = &msg_opt_defs[i];
        CHECK(msg_opt_find(d->name) == d);
        CHECK_MSG(!msg_opt_is_removed(d->name, NULL), "%s", d->name);
    }
    for (size_t i = 0; i < cr_opt_removed_count; i++)
        CHECK_MSG(!msg_opt_find(cr_opt_removed_names[i]), "%s",
                  cr_opt_removed_names[i]);
    CHECK(!msg_opt_find("Temperature") && !msg_opt_find(NULL));
    /* lib's rows (the CLI's) and proto's (with offsets) are the same. */
    CHECK_EQ_INT(cr_opt_count, msg_opt_count);
    for (size_t i = 0; i < msg_opt_count && i < cr_opt_count; i++) {
        const cr_opt_def_t *c = &cr_opt_defs[i];
        const msg_opt_def_t *d = &msg_opt_defs[i];
        CHECK(!strcmp(c->name, d->name) && c->type == d->type &&
              c->load == d->load &&
              (c->def == d->def || (isnan(c->def) && isnan(d->def))));
        CHECK(cr_opt_find(d->name) == c);
    }
    /* §2: the removed keys every layer warns about and ignores. */
    static const char *const removed[] = {
        "numa",     "low_vram",     "f16_kv",       "logits_all",
        "vocab_only", "use_mlock",  "mirostat",     "mirostat_tau",
        "mirostat_eta", "penalize_newline", "tfs_z"};
    CHECK_EQ_INT(cr_opt_removed_count, CR_ARRAY_LEN(removed));
    for (size_t i = 0; i < CR_ARRAY_LEN(removed); i++)
        CHECK_MSG(msg_opt_is_removed(removed[i], NULL), "%s", removed[i]);
    /* The bus record has exactly the table's fields. */
    const msg_desc_t *rd = msg_record_desc(MSG_RECORD_options);
    CHECK(rd && rd->n_fields == msg_opt_count);
    for (size_t i = 0; rd && i < rd->n_fields && i < msg_opt_count; i++)
        CHECK_EQ_STR(rd->fields[i].name, msg_opt_defs[i].name);
}

static void test_gateway(void)
{
    for (size_t i = 0; i < msg_opt_count; i++) {
        const msg_opt_def_t *d = &msg_opt_defs[i];
        gw_request_t q;
        cr_err_t err = {0};
        json_t *v = sample_json(d);
        CHECK_MSG(gateway_parse(d->name, v, &q, &err) == CR_OK, "%s: %s",
                  d->name, err.msg);
        json_decref(v);
        const msg_options_t *o = q.msg.u.generate.options;
        CHECK_MSG(o && has_sample(o, d) && n_set(o) == 1, "%s", d->name);
        gw_request_clear(&q);
        /* A wrong type is an error naming the option. */
        v = d->type == MSG_OPT_BOOL ? json_integer(1) : json_string("x");
        if (d->type == MSG_OPT_STRS) {
            json_decref(v);
            v = json_integer(1);
        }
        CHECK_MSG(gateway_parse(d->name, v, &q, &err) == CR_E_INVALID, "%s",
                  d->name);
        CHECK_MSG(strstr(err.msg, d->name) != NULL, "%s", err.msg);
        json_decref(v);
        gw_request_clear(&q);
    }
    for (size_t i = 0; i < cr_opt_removed_count; i++) {
        gw_request_t q;
        cr_err_t err = {0};
        json_t *v = json_integer(1);
        CHECK(gateway_parse(cr_opt_removed_names[i], v, &q, &err) == CR_OK);
        json_decref(v);
        CHECK(n_set(q.msg.u.generate.options) == 0);
        gw_request_clear(&q);
    }
}

typedef struct warned {
    size_t n;
    const char *why;
} warned_t;

static void on_warn(void *ctx, const char *key, const char *why)
{
    (void)key;
    warned_t *w = ctx;
    w->n++;
    w->why = why;
}

static void test_registry(void)
{
    for (size_t i = 0; i < msg_opt_count; i++) {
        const msg_opt_def_t *d = &msg_opt_defs[i];
        json_t *in = json_object(), *out = NULL;
        json_object_set_new(in, d->name, sample_json(d));
        cr_err_t err = {0};
        warned_t w = {0};
        CHECK_MSG(reg_params_validate(in, on_warn, &w, &out, &err) == CR_OK,
                  "%s: %s", d->name, err.msg);
        CHECK_MSG(w.n == 0 && out && json_object_get(out, d->name), "%s",
                  d->name);
        msg_t m = {0};
        msg_options_t o;
        CHECK(reg_params_to_options(out, &o, &m) == CR_OK);
        CHECK_MSG(has_sample(&o, d) && n_set(&o) == 1, "%s", d->name);
        json_t *back = reg_params_from_options(&o);
        CHECK_MSG(json_equal(back, out), "%s", d->name);
        json_decref(back);
        msg_clear(&m);
        json_decref(out);
        json_decref(in);
    }
    for (size_t i = 0; i < cr_opt_removed_count; i++) {
        json_t *in = json_pack("{s:i}", cr_opt_removed_names[i], 1), *out;
        cr_err_t err = {0};
        warned_t w = {0};
        CHECK(reg_params_validate(in, on_warn, &w, &out, &err) == CR_OK);
        CHECK(w.n == 1 && w.why && !strcmp(w.why, "deprecated"));
        CHECK(json_object_size(out) == 0);
        json_decref(out);
        json_decref(in);
    }
}

static void test_cli(void)
{
    static const cli_param_type_t want[] = {
        [MSG_OPT_INT] = CLI_PARAM_INT,
        [MSG_OPT_FLOAT] = CLI_PARAM_FLOAT,
        [MSG_OPT_BOOL] = CLI_PARAM_BOOL,
        [MSG_OPT_STRS] = CLI_PARAM_STRINGS,
    };
    for (size_t i = 0; i < msg_opt_count; i++) {
        const msg_opt_def_t *d = &msg_opt_defs[i];
        CHECK_MSG(cli_param_type(d->name) == want[d->type], "%s", d->name);
        json_t *v = NULL;
        cr_err_t err = {0};
        CHECK_MSG(cli_param_value(d->name, sample_text(d), &v, &err) == CR_OK,
                  "%s: %s", d->name, err.msg);
        json_decref(v);
        /* The Modelfile's parameters reach the registry unchanged. */
        char text[128];
        snprintf(text, sizeof text, "FROM m\nPARAMETER %s %s\n", d->name,
                 sample_text(d));
        cli_modelfile_t *mf = NULL;
        CHECK_MSG(cli_modelfile_parse(text, strlen(text), &mf, &err) == CR_OK,
                  "%s: %s", d->name, err.msg);
        json_t *params = NULL, *clean = NULL;
        if (mf && cli_modelfile_params_json(mf, &params, &err) == CR_OK) {
            CHECK(reg_params_validate(params, NULL, NULL, &clean, &err) == CR_OK);
            CHECK_MSG(clean && json_object_size(clean) == 1, "%s", d->name);
        }
        json_decref(clean);
        json_decref(params);
        cli_modelfile_destroy(&mf);
    }
    for (size_t i = 0; i < cr_opt_removed_count; i++) {
        const char *name = cr_opt_removed_names[i];
        bool warns = false;
        CHECK(msg_opt_is_removed(name, &warns));
        CHECK_MSG(cli_param_type(name) ==
                      (warns ? CLI_PARAM_DEPRECATED : CLI_PARAM_UNKNOWN),
                  "%s", name);
        char text[128];
        snprintf(text, sizeof text, "FROM m\nPARAMETER %s 1\n", name);
        cli_modelfile_t *mf = NULL;
        cr_err_t err = {0};
        cr_status_t st = cli_modelfile_parse(text, strlen(text), &mf, &err);
        if (warns) {
            CHECK_MSG(st == CR_OK && mf && mf->n_warnings == 1, "%s", name);
            json_t *params = NULL;
            CHECK(mf && cli_modelfile_params_json(mf, &params, &err) == CR_OK &&
                  json_object_size(params) == 0);
            json_decref(params);
        } else {
            CHECK_MSG(st == CR_E_INVALID && strstr(err.msg, "unknown parameter"),
                      "%s", name);
        }
        cli_modelfile_destroy(&mf);
    }
    CHECK(cli_param_type("tfs_z") == CLI_PARAM_UNKNOWN);
    CHECK(cli_param_type("mirostat") == CLI_PARAM_DEPRECATED);
}

static void set_sample(msg_options_t *o, const msg_opt_def_t *d, int64_t i)
{
    char *p = (char *)o + d->off;
    switch (d->type) {
    case MSG_OPT_INT: *(int64_t *)p = i; break;
    case MSG_OPT_FLOAT: *(double *)p = (double)i; break;
    case MSG_OPT_BOOL: *(bool *)p = i & 1; break;
    case MSG_OPT_STRS: break;
    }
    *(bool *)((char *)o + d->has_off) = true;
}

static void test_scheduler(void)
{
    msg_options_t all = {0};
    for (size_t i = 0; i < msg_opt_count; i++)
        set_sample(&all, &msg_opt_defs[i], 3);
    msg_options_t dst = {0}, load = {0};
    sch_options_overlay(&dst, &all);
    sch_options_overlay_load(&load, &all);
    CHECK(n_set(&dst) == msg_opt_count);
    for (size_t i = 0; i < msg_opt_count; i++) {
        const msg_opt_def_t *d = &msg_opt_defs[i];
        CHECK_MSG(msg_opt_has(&load, d) == d->load, "%s", d->name);
        if (d->type == MSG_OPT_STRS)
            continue;
        /* A load option that differs needs another runner; others never. */
        msg_options_t want = {0};
        set_sample(&want, d, 2);
        bool ok = sch_options_load_compatible(&all, &want);
        CHECK_MSG(ok == !d->load, "%s", d->name);
    }
    msg_options_t gpu_auto = {.num_gpu = -1, .has_num_gpu = true};
    CHECK(sch_options_load_compatible(&all, &gpu_auto));
}

static void test_runner_defaults(void)
{
    rn_sampler_params_t p;
    rn_sampler_params_default(&p);
#define DEF(name) msg_opt_find(#name)->def
    CHECK(p.temperature == (float)DEF(temperature));
    CHECK(p.top_k == DEF(top_k));
    CHECK(p.top_p == (float)DEF(top_p));
    CHECK(p.min_p == (float)DEF(min_p));
    CHECK(p.typical_p == (float)DEF(typical_p));
    CHECK(p.repeat_last_n == DEF(repeat_last_n));
    CHECK(p.repeat_penalty == (float)DEF(repeat_penalty));
    CHECK(p.presence_penalty == (float)DEF(presence_penalty));
    CHECK(p.frequency_penalty == (float)DEF(frequency_penalty));
    CHECK(p.seed == DEF(seed));
    CHECK(isnan(DEF(num_ctx)) && isnan(DEF(stop)));
#undef DEF
}

/* The CHECK column: a value its rule refuses, for each checked row, and
 * the gateway (400 before any model loads), create's validation and the
 * runner's sampler all refuse it with the same words; the lib and proto
 * rows agree. */
static void test_checks(void)
{
    size_t n_checked = 0;
    for (size_t i = 0; i < msg_opt_count; i++) {
        const msg_opt_def_t *d = &msg_opt_defs[i];
        CHECK(d->check == cr_opt_defs[i].check);
        double bad;
        const char *words;
        switch (d->check) {
        case CR_OPT_ANY: continue;
        case CR_OPT_FINITE: continue; /* JSON and the bus's readers hold no NaN */
        case CR_OPT_POSITIVE: bad = 0, words = "greater than 0"; break;
        case CR_OPT_MINUS1: bad = -2, words = "-1 or more"; break;
        default: continue;
        }
        n_checked++;
        CHECK(cr_opt_check_value(d->check, d->name, d->def, NULL) == CR_OK);
        cr_err_t err = {0};
        gw_request_t q;
        json_t *v = d->type == MSG_OPT_INT ? json_integer((json_int_t)bad) : json_real(bad);
        CHECK_MSG(gateway_parse(d->name, v, &q, &err) == CR_E_INVALID && strstr(err.msg, words) &&
                      strstr(err.msg, d->name),
                  "gateway %s: %s", d->name, err.msg);
        gw_request_clear(&q);
        json_t *in = json_object(), *out = NULL;
        json_object_set(in, d->name, v);
        cr_err_t err2 = {0};
        CHECK_MSG(reg_params_validate(in, NULL, NULL, &out, &err2) == CR_E_INVALID &&
                      !strcmp(err2.msg, err.msg),
                  "create %s: %s", d->name, err2.msg);
        json_decref(in);
        json_decref(v);
    }
    CHECK(n_checked == 2); /* repeat_penalty, repeat_last_n */
    /* the runner's own check reads the same rows */
    rn_sampler_params_t p;
    rn_sampler_params_default(&p);
    CHECK(rn_sampler_params_check(&p, NULL) == CR_OK);
    cr_err_t err = {0};
    p.repeat_penalty = 0;
    CHECK(rn_sampler_params_check(&p, &err) == CR_E_INVALID &&
          strstr(err.msg, "\"repeat_penalty\" must be greater than 0"));
    rn_sampler_params_default(&p);
    p.temperature = NAN;
    CHECK(rn_sampler_params_check(&p, &err) == CR_E_INVALID &&
          strstr(err.msg, "\"temperature\" must be a finite number"));
    rn_sampler_params_default(&p);
    p.repeat_last_n = -2;
    CHECK(rn_sampler_params_check(&p, &err) == CR_E_INVALID &&
          strstr(err.msg, "\"repeat_last_n\" must be -1 or more, got -2"));
}

int main(void)
{
    test_table();
    test_gateway();
    test_registry();
    test_cli();
    test_scheduler();
    test_runner_defaults();
    test_checks();
    return check_finish("test_options");
}
