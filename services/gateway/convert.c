/* convert.c: request JSON -> bus messages (see convert.h).
 *
 * jansson parses the body; every value the message keeps is copied into the
 * message's arena, so the JSON tree is freed before the message is sent.
 * Error texts follow what Ollama (Go) returns, field for field. */
#include "lib/prelude.h"
#include "services/gateway/convert.h"
#include "services/gateway/json_util.h"

#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/duration.h"
#include "lib/log.h"
#include "lib/model_name.h"
#include "proto/options.h"
#include "services/gateway/render.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>

/* What every parse step needs: the message that owns copies, the Go struct
 * name for type errors, and where errors go. */
typedef struct ctx {
    msg_t *m;
    const char *sname; /* "GenerateRequest" */
    cr_err_t *err;
} ctx_t;

/* ---- type errors in Go's words ---- */

static const char *json_kind(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING: return "string";
    case JSON_INTEGER:
    case JSON_REAL: return "number";
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    case JSON_ARRAY: return "array";
    case JSON_OBJECT: return "object";
    default: return "null";
    }
}

static cr_status_t type_error(ctx_t *c, const char *path, const json_t *v,
                              const char *gotype)
{
    return cr_err_set(c->err, CR_E_INVALID,
                      "json: cannot unmarshal %s into Go struct field %s.%s "
                      "of type %s",
                      json_kind(v), c->sname, path, gotype);
}

static cr_status_t nomem(ctx_t *c)
{
    return cr_err_set(c->err, CR_E_NOMEM, "out of memory");
}

/* ---- scalar fields ---- */

static cr_status_t get_str(ctx_t *c, const json_t *obj, const char *key,
                           const char *path, char **out, bool *has)
{
    json_t *v = gw_json_member(obj, key);
    if (!v)
        return CR_OK;
    if (!json_is_string(v))
        return type_error(c, path, v, "string");
    *out = msg_strdup(c->m, json_string_value(v));
    if (!*out)
        return nomem(c);
    if (has)
        *has = true;
    return CR_OK;
}

static cr_status_t get_bool(ctx_t *c, const json_t *obj, const char *key,
                            const char *path, bool *out, bool *has)
{
    json_t *v = gw_json_member(obj, key);
    if (!v)
        return CR_OK;
    if (!json_is_boolean(v))
        return type_error(c, path, v, "bool");
    *out = json_is_true(v);
    if (has)
        *has = true;
    return CR_OK;
}

/* A JSON number that is a whole int64 (Go rejects 1.5 for an int field). */
static cr_status_t get_int(ctx_t *c, const json_t *obj, const char *key,
                           const char *path, int64_t *out, bool *has)
{
    json_t *v = gw_json_member(obj, key);
    if (!v)
        return CR_OK;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d != floor(d) || d < -9.2e18 || d > 9.2e18) {
            char *txt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
            cr_err_set(c->err, CR_E_INVALID,
                       "json: cannot unmarshal number %s into Go struct field "
                       "%s.%s of type int",
                       txt ? txt : "", c->sname, path);
            free(txt);
            return CR_E_INVALID;
        }
        *out = (int64_t)d;
    } else {
        return type_error(c, path, v, "int");
    }
    if (has)
        *has = true;
    return CR_OK;
}

/* Writes v with the gateway's writer: key order kept, floats in their
 * shortest form (0.2, not jansson's 0.20000000000000001). */
static void write_value(gw_jw_t *w, const json_t *v)
{
    if (w->st)
        return;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        gw_jw_obj(w);
        json_object_foreach((json_t *)v, key, val) {
            gw_jw_key(w, key);
            write_value(w, val);
        }
        gw_jw_end_obj(w);
        break;
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *val;
        gw_jw_arr(w);
        json_array_foreach(v, i, val) write_value(w, val);
        gw_jw_end_arr(w);
        break;
    }
    case JSON_STRING:
        gw_jw_strn(w, json_string_value(v), json_string_length(v));
        break;
    case JSON_INTEGER: gw_jw_i64(w, json_integer_value(v)); break;
    case JSON_REAL: gw_jw_f64(w, json_real_value(v)); break;
    case JSON_TRUE: gw_jw_bool(w, true); break;
    case JSON_FALSE: gw_jw_bool(w, false); break;
    default: gw_jw_null(w); break;
    }
}

/* A JSON value serialized compactly into the arena. The decoder bounds the
 * nesting depth, and the writer refuses more than GW_JW_MAX_DEPTH. */
static cr_status_t dump_json(ctx_t *c, const json_t *v, char **out)
{
    cr_buf_t b;
    cr_buf_init(&b, MSG_FRAME_MAX);
    gw_jw_t w;
    gw_jw_init(&w, &b);
    write_value(&w, v);
    if (w.st) {
        cr_buf_free(&b);
        if (w.st == CR_E_INTERNAL)
            return cr_err_set(c->err, CR_E_INVALID,
                              "JSON value nested deeper than %d levels",
                              GW_JW_MAX_DEPTH);
        return cr_err_set(c->err, w.st, "JSON value too large");
    }
    *out = msg_strdup(c->m, b.data ? b.data : "");
    cr_buf_free(&b);
    return *out ? CR_OK : nomem(c);
}

/* An array (of objects when elem_gotype is set) kept as JSON text. */
static cr_status_t get_json_array(ctx_t *c, const json_t *obj,
                                  const char *key, const char *path,
                                  const char *gotype, const char *elem_gotype,
                                  char **out, bool *has)
{
    json_t *v = gw_json_member(obj, key);
    if (!v)
        return CR_OK;
    if (!json_is_array(v))
        return type_error(c, path, v, gotype);
    size_t i;
    json_t *e;
    json_array_foreach(v, i, e) {
        if (elem_gotype && !json_is_object(e))
            return type_error(c, path, e, elem_gotype);
    }
    cr_status_t st = dump_json(c, v, out);
    if (!st && has)
        *has = true;
    return st;
}

/* images: []ImageData, base64 strings; kept as the base64 text. */
static cr_status_t get_images(ctx_t *c, const json_t *obj, const char *path,
                              msg_strs_t *out, bool *has)
{
    json_t *v = gw_json_member(obj, "images");
    if (!v)
        return CR_OK;
    if (!json_is_array(v))
        return type_error(c, path, v, "[]api.ImageData");
    size_t n = json_array_size(v);
    if (n > MSG_MAX_ARRAY)
        return cr_err_set(c->err, CR_E_INVALID, "too many images (%zu)", n);
    out->v = msg_alloc(c->m, (n ? n : 1) * sizeof *out->v);
    if (!out->v)
        return nomem(c);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        if (!json_is_string(e))
            return type_error(c, path, e, "api.ImageData");
        const char *s = json_string_value(e);
        size_t bad = 0;
        if (!cr_base64_valid(s, json_string_length(e), &bad))
            return cr_err_set(c->err, CR_E_INVALID,
                              "illegal base64 data at input byte %zu", bad);
        if (!(out->v[i] = msg_strdup(c->m, s)))
            return nomem(c);
    }
    out->n = n;
    *has = true;
    return CR_OK;
}

/* ---- options (§2): the rows of lib/options.def ---- */

static cr_status_t opt_error(ctx_t *c, const char *key, const char *what)
{
    return cr_err_set(c->err, CR_E_INVALID, "option \"%s\" must be of %s", key,
                      what);
}

/* One option value, typed as Ollama's Options.FromMap does. */
static cr_status_t set_option(ctx_t *c, msg_options_t *o,
                              const msg_opt_def_t *sp, const char *key,
                              const json_t *v)
{
    char *base = (char *)o;
    switch (sp->type) {
    case MSG_OPT_INT: {
        int64_t x;
        if (json_is_integer(v)) {
            x = json_integer_value(v);
        } else if (json_is_real(v)) {
            /* JSON numbers are float64 in Go; ints are truncated. */
            double d = json_real_value(v);
            x = d >= 9.2e18 ? INT64_MAX : d <= -9.2e18 ? INT64_MIN
                                                       : (int64_t)d;
        } else {
            return opt_error(c, key, "type integer");
        }
        cr_status_t st = cr_opt_check_value(sp->check, key, (double)x, c->err);
        if (st)
            return st;
        memcpy(base + sp->off, &x, sizeof x);
        break;
    }
    case MSG_OPT_FLOAT: {
        if (!json_is_number(v))
            return opt_error(c, key, "type float32");
        double d = json_number_value(v);
        /* the table's rule, answered here (400) instead of by the runner */
        cr_status_t st = cr_opt_check_value(sp->check, key, d, c->err);
        if (st)
            return st;
        memcpy(base + sp->off, &d, sizeof d);
        break;
    }
    case MSG_OPT_BOOL: {
        if (!json_is_boolean(v))
            return opt_error(c, key, "type boolean");
        bool b = json_is_true(v);
        memcpy(base + sp->off, &b, sizeof b);
        break;
    }
    case MSG_OPT_STRS: {
        if (!json_is_array(v))
            return opt_error(c, key, "type array");
        size_t n = json_array_size(v);
        if (n > MSG_MAX_ARRAY)
            return opt_error(c, key, "at most 1048576 elements");
        msg_strs_t s = {msg_alloc(c->m, (n ? n : 1) * sizeof(char *)), n};
        if (!s.v)
            return nomem(c);
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(v, i);
            if (!json_is_string(e))
                return opt_error(c, key, "an array of strings");
            if (!(s.v[i] = msg_strdup(c->m, json_string_value(e))))
                return nomem(c);
        }
        memcpy(base + sp->off, &s, sizeof s);
        break;
    }
    }
    bool yes = true;
    memcpy(base + sp->has_off, &yes, sizeof yes);
    return CR_OK;
}

/* Checks an options object (map[string]any). Unknown keys are ignored with
 * a warning; null values are skipped. */
static cr_status_t check_options(ctx_t *c, const json_t *v, const char *path,
                                 msg_options_t *o)
{
    if (!json_is_object(v))
        return type_error(c, path, v, "map[string]interface {}");
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)v, key, val) {
        const msg_opt_def_t *sp = msg_opt_find(key);
        if (!sp) {
            cr_log_warn("invalid option provided: %s", key);
            continue;
        }
        if (json_is_null(val))
            continue;
        cr_status_t st = set_option(c, o, sp, key, val);
        if (st)
            return st;
    }
    return CR_OK;
}

/* `options` of a request into *out (allocated in the arena). */
static cr_status_t get_options(ctx_t *c, const json_t *obj,
                               msg_options_t **out, bool *has)
{
    json_t *v = gw_json_member(obj, "options");
    if (!v)
        return CR_OK;
    msg_options_t *o = msg_alloc(c->m, sizeof *o);
    if (!o)
        return nomem(c);
    cr_status_t st = check_options(c, v, "options", o);
    if (st)
        return st;
    *out = o;
    *has = true;
    return CR_OK;
}

/* ---- keep_alive, think, format ---- */

static const char *go_any_type(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_TRUE:
    case JSON_FALSE: return "bool";
    case JSON_ARRAY: return "[]interface {}";
    case JSON_OBJECT: return "map[string]interface {}";
    default: return "<nil>";
    }
}

static cr_status_t get_keep_alive(ctx_t *c, const json_t *obj, int64_t *ms,
                                  bool *has)
{
    json_t *v = gw_json_member(obj, "keep_alive");
    if (!v)
        return CR_OK;
    if (json_is_number(v)) {
        *ms = cr_duration_from_seconds(json_number_value(v));
    } else if (json_is_string(v)) {
        cr_err_t e;
        if (cr_duration_parse(json_string_value(v), ms, &e))
            return cr_err_set(c->err, CR_E_INVALID, "time: %s", e.msg);
    } else {
        return cr_err_set(c->err, CR_E_INVALID, "Unsupported type: '%s'",
                          go_any_type(v));
    }
    *has = true;
    return CR_OK;
}

#define THINK_CHOICES "\"high\", \"medium\", \"low\", \"max\", true, or false"

static cr_status_t get_think(ctx_t *c, const json_t *obj, char **out,
                             bool *has)
{
    json_t *v = gw_json_member(obj, "think");
    if (!v)
        return CR_OK;
    const char *val;
    if (json_is_boolean(v)) {
        val = json_is_true(v) ? "true" : "false";
    } else if (json_is_string(v)) {
        val = json_string_value(v);
        if (strcmp(val, "high") && strcmp(val, "medium") &&
            strcmp(val, "low") && strcmp(val, "max")) {
            cr_buf_t q;
            cr_buf_init(&q, 256);
            gw_go_quote(&q, val, strlen(val));
            cr_err_set(c->err, CR_E_INVALID,
                       "invalid think value: %s (must be " THINK_CHOICES ")",
                       q.data ? q.data : "\"\"");
            cr_buf_free(&q);
            return CR_E_INVALID;
        }
    } else {
        return cr_err_set(c->err, CR_E_INVALID,
                          "think must be a boolean or string (" THINK_CHOICES
                          ")");
    }
    if (!(*out = msg_strdup(c->m, val)))
        return nomem(c);
    *has = true;
    return CR_OK;
}

/* format: "json", a JSON Schema object (kept as compact JSON text), or
 * null/"" (unset). Anything else is Ollama's "invalid format" error. */
static cr_status_t get_format(ctx_t *c, const json_t *obj, char **out,
                              bool *has)
{
    json_t *v = gw_json_member(obj, "format");
    if (!v)
        return CR_OK;
    if (json_is_string(v) && json_string_length(v) == 0)
        return CR_OK;
    if (json_is_string(v) && !strcmp(json_string_value(v), "json")) {
        if (!(*out = msg_strdup(c->m, "json")))
            return nomem(c);
    } else if (json_is_object(v)) {
        cr_status_t st = dump_json(c, v, out);
        if (st)
            return st;
    } else {
        char *raw = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        cr_buf_t q;
        cr_buf_init(&q, 4096);
        gw_go_quote(&q, raw ? raw : "", raw ? strlen(raw) : 0);
        cr_err_set(c->err, CR_E_INVALID,
                   "invalid format: %s; expected \"json\" or a valid JSON "
                   "Schema object",
                   q.data ? q.data : "\"\"");
        cr_buf_free(&q);
        free(raw);
        return CR_E_INVALID;
    }
    *has = true;
    return CR_OK;
}

/* ---- chat messages ---- */

static cr_status_t get_message(ctx_t *c, const json_t *v, msg_message_t *out)
{
    char path[64];
    if (!json_is_object(v))
        return type_error(c, "messages", v, "api.Message");
    cr_status_t st;
    out->role = "";
    out->has_role = true;
    if ((st = get_str(c, v, "role", "messages.role", &out->role, NULL)))
        return st;
    for (char *p = out->role; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    if ((st = get_str(c, v, "content", "messages.content", &out->content,
                      &out->has_content)) ||
        (st = get_str(c, v, "thinking", "messages.thinking", &out->thinking,
                      &out->has_thinking)) ||
        (st = get_str(c, v, "tool_name", "messages.tool_name",
                      &out->tool_name, &out->has_tool_name)) ||
        (st = get_str(c, v, "tool_call_id", "messages.tool_call_id",
                      &out->tool_call_id, &out->has_tool_call_id)))
        return st;
    snprintf(path, sizeof path, "messages.images");
    if ((st = get_images(c, v, path, &out->images, &out->has_images)))
        return st;
    return get_json_array(c, v, "tool_calls", "messages.tool_calls",
                          "[]api.ToolCall", "api.ToolCall", &out->tool_calls,
                          &out->has_tool_calls);
}

/* messages: []Message into (*v, *n). */
static cr_status_t get_messages(ctx_t *c, const json_t *obj,
                                msg_message_t **v_out, size_t *n_out,
                                bool *has)
{
    json_t *v = gw_json_member(obj, "messages");
    if (!v)
        return CR_OK;
    if (!json_is_array(v))
        return type_error(c, "messages", v, "[]api.Message");
    size_t n = json_array_size(v);
    if (n > MSG_MAX_ARRAY)
        return cr_err_set(c->err, CR_E_INVALID, "too many messages (%zu)", n);
    msg_message_t *arr = msg_alloc(c->m, (n ? n : 1) * sizeof *arr);
    if (!arr)
        return nomem(c);
    for (size_t i = 0; i < n; i++) {
        cr_status_t st = get_message(c, json_array_get(v, i), &arr[i]);
        if (st)
            return st;
    }
    *v_out = arr;
    *n_out = n;
    *has = true;
    return CR_OK;
}

/* ---- the requests ---- */

static cr_status_t model_required(ctx_t *c, const char *model)
{
    if (!model || !*model)
        return cr_err_set(c->err, CR_E_INVALID, "model is required");
    return CR_OK;
}

static cr_status_t check_top_logprobs(ctx_t *c, bool has, int64_t v)
{
    if (has && (v < 0 || v > 20))
        return cr_err_set(c->err, CR_E_INVALID,
                          "top_logprobs must be between 0 and 20");
    return CR_OK;
}

static cr_status_t parse_generate(ctx_t *c, const json_t *o, gw_request_t *r)
{
    msg_generate_body_t *g = &c->m->u.generate;
    cr_status_t st;
    g->model = "";
    g->has_model = true;
    if ((st = get_str(c, o, "model", "model", &g->model, NULL)) ||
        (st = get_str(c, o, "prompt", "prompt", &g->prompt, &g->has_prompt)) ||
        (st = get_str(c, o, "suffix", "suffix", &g->suffix, &g->has_suffix)) ||
        (st = get_str(c, o, "system", "system", &g->system, &g->has_system)) ||
        (st = get_str(c, o, "template", "template", &g->template,
                      &g->has_template)) ||
        (st = get_bool(c, o, "stream", "stream", &r->stream, NULL)) ||
        (st = get_bool(c, o, "raw", "raw", &g->raw, &g->has_raw)) ||
        (st = get_format(c, o, &g->format, &g->has_format)) ||
        (st = get_keep_alive(c, o, &g->keep_alive_ms, &g->has_keep_alive_ms)) ||
        (st = get_images(c, o, "images", &g->images, &g->has_images)) ||
        (st = get_options(c, o, &g->options, &g->has_options)) ||
        (st = get_think(c, o, &g->think, &g->has_think)) ||
        (st = get_bool(c, o, "truncate", "truncate", &g->truncate,
                       &g->has_truncate)) ||
        (st = get_bool(c, o, "shift", "shift", &g->shift, &g->has_shift)) ||
        (st = get_bool(c, o, "_debug_render_only", "_debug_render_only",
                       &g->debug_render_only, &g->has_debug_render_only)) ||
        (st = get_bool(c, o, "logprobs", "logprobs", &g->logprobs,
                       &g->has_logprobs)) ||
        (st = get_int(c, o, "top_logprobs", "top_logprobs", &g->top_logprobs,
                      &g->has_top_logprobs)))
        return st;

    json_t *ctxv = gw_json_member(o, "context");
    if (ctxv) {
        if (!json_is_array(ctxv))
            return type_error(c, "context", ctxv, "[]int");
        size_t n = json_array_size(ctxv);
        if (n > MSG_MAX_ARRAY)
            return cr_err_set(c->err, CR_E_INVALID,
                              "context has too many tokens (%zu)", n);
        g->context.v = msg_alloc(c->m, (n ? n : 1) * sizeof(int32_t));
        if (!g->context.v)
            return nomem(c);
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(ctxv, i);
            if (!json_is_integer(e))
                return type_error(c, "context", e, "int");
            json_int_t t = json_integer_value(e);
            if (t < INT32_MIN || t > INT32_MAX)
                return cr_err_set(c->err, CR_E_INVALID,
                                  "context token %lld is out of range",
                                  (long long)t);
            g->context.v[i] = (int32_t)t;
        }
        g->context.n = n;
        g->has_context = true;
    }

    if ((st = check_top_logprobs(c, g->has_top_logprobs, g->top_logprobs)) ||
        (st = model_required(c, g->model)))
        return st;
    if (g->raw && ((g->system && *g->system) ||
                   (g->template && *g->template) ||
                   (g->has_context && g->context.n > 0)))
        return cr_err_set(c->err, CR_E_INVALID,
                          "raw mode does not support template, system, or "
                          "context");
    r->model = g->model;
    return CR_OK;
}

static cr_status_t parse_chat(ctx_t *c, const json_t *o, gw_request_t *r)
{
    msg_chat_body_t *g = &c->m->u.chat;
    cr_status_t st;
    g->model = "";
    g->has_model = true;
    if ((st = get_str(c, o, "model", "model", &g->model, NULL)) ||
        (st = get_messages(c, o, &g->messages.v, &g->messages.n,
                           &g->has_messages)) ||
        (st = get_json_array(c, o, "tools", "tools", "api.Tools", "api.Tool",
                             &g->tools, &g->has_tools)) ||
        (st = get_bool(c, o, "stream", "stream", &r->stream, NULL)) ||
        (st = get_format(c, o, &g->format, &g->has_format)) ||
        (st = get_keep_alive(c, o, &g->keep_alive_ms, &g->has_keep_alive_ms)) ||
        (st = get_options(c, o, &g->options, &g->has_options)) ||
        (st = get_think(c, o, &g->think, &g->has_think)) ||
        (st = get_bool(c, o, "truncate", "truncate", &g->truncate,
                       &g->has_truncate)) ||
        (st = get_bool(c, o, "shift", "shift", &g->shift, &g->has_shift)) ||
        (st = get_bool(c, o, "_debug_render_only", "_debug_render_only",
                       &g->debug_render_only, &g->has_debug_render_only)) ||
        (st = get_bool(c, o, "logprobs", "logprobs", &g->logprobs,
                       &g->has_logprobs)) ||
        (st = get_int(c, o, "top_logprobs", "top_logprobs", &g->top_logprobs,
                      &g->has_top_logprobs)) ||
        (st = check_top_logprobs(c, g->has_top_logprobs, g->top_logprobs)) ||
        (st = model_required(c, g->model)))
        return st;
    r->model = g->model;
    return CR_OK;
}

static cr_status_t parse_embed(ctx_t *c, const json_t *o, gw_request_t *r)
{
    msg_embed_body_t *e = &c->m->u.embed;
    cr_status_t st;
    e->model = "";
    e->has_model = true;
    if ((st = get_str(c, o, "model", "model", &e->model, NULL)) ||
        (st = get_bool(c, o, "truncate", "truncate", &e->truncate,
                       &e->has_truncate)) ||
        (st = get_int(c, o, "dimensions", "dimensions", &e->dimensions,
                      &e->has_dimensions)) ||
        (st = get_keep_alive(c, o, &e->keep_alive_ms, &e->has_keep_alive_ms)) ||
        (st = get_options(c, o, &e->options, &e->has_options)))
        return st;

    /* input: a string (empty = just load) or an array of strings. */
    json_t *in = gw_json_member(o, "input");
    size_t n = 0;
    if (json_is_array(in)) {
        n = json_array_size(in);
        if (n > MSG_MAX_ARRAY)
            return cr_err_set(c->err, CR_E_INVALID, "too many inputs (%zu)",
                              n);
        for (size_t i = 0; i < n; i++)
            if (!json_is_string(json_array_get(in, i)))
                return cr_err_set(c->err, CR_E_INVALID, "invalid input type");
    } else if (json_is_string(in)) {
        n = json_string_length(in) > 0 ? 1 : 0;
    } else if (in) {
        return cr_err_set(c->err, CR_E_INVALID, "invalid input type");
    }
    e->input.v = msg_alloc(c->m, (n ? n : 1) * sizeof(char *));
    if (!e->input.v)
        return nomem(c);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(in) ? json_array_get(in, i) : in;
        if (!(e->input.v[i] = msg_strdup(c->m, json_string_value(s))))
            return nomem(c);
    }
    e->input.n = n;
    e->has_input = true;
    if ((st = model_required(c, e->model)))
        return st;
    r->model = e->model;
    r->stream = false;
    return CR_OK;
}

/* /api/rerank: {model, query, documents, keep_alive, options, truncate}
 * (top_n and return_documents are read by rerank.c). */
static cr_status_t parse_rerank(ctx_t *c, const json_t *o, gw_request_t *r)
{
    msg_rerank_body_t *e = &c->m->u.rerank;
    cr_status_t st;
    e->model = "";
    e->has_model = true;
    if ((st = get_str(c, o, "model", "model", &e->model, NULL)) ||
        (st = get_str(c, o, "query", "query", &e->query, &e->has_query)) ||
        (st = get_bool(c, o, "truncate", "truncate", &e->truncate,
                       &e->has_truncate)) ||
        (st = get_keep_alive(c, o, &e->keep_alive_ms, &e->has_keep_alive_ms)) ||
        (st = get_options(c, o, &e->options, &e->has_options)) ||
        (st = model_required(c, e->model)))
        return st;
    if (!e->has_query || !e->query)
        return cr_err_set(c->err, CR_E_INVALID, "\"query\" is required");
    json_t *docs = gw_json_member(o, "documents");
    size_t n = json_is_array(docs) ? json_array_size(docs) : 0;
    if (!n)
        return cr_err_set(c->err, CR_E_INVALID,
                          "\"documents\" must be a non-empty array of "
                          "strings");
    if (n > MSG_MAX_ARRAY)
        return cr_err_set(c->err, CR_E_INVALID, "too many documents (%zu)", n);
    e->documents.v = msg_alloc(c->m, n * sizeof(char *));
    if (!e->documents.v)
        return nomem(c);
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(docs, i);
        /* Jina and Cohere also take {"text": ...} objects */
        if (json_is_object(d))
            d = gw_json_member(d, "text");
        if (!json_is_string(d))
            return cr_err_set(c->err, CR_E_INVALID,
                              "documents[%zu]: must be a string or an object "
                              "with a string \"text\"",
                              i);
        if (!(e->documents.v[i] = msg_strdup(c->m, json_string_value(d))))
            return nomem(c);
    }
    e->documents.n = n;
    e->has_documents = true;
    r->model = e->model;
    r->stream = false;
    return CR_OK;
}

/* Legacy /api/embeddings: {model, prompt, keep_alive, options}. */
static cr_status_t parse_embeddings(ctx_t *c, const json_t *o,
                                    gw_request_t *r)
{
    msg_embed_body_t *e = &c->m->u.embed;
    cr_status_t st;
    char *prompt = NULL;
    e->model = "";
    e->has_model = true;
    if ((st = get_str(c, o, "model", "model", &e->model, NULL)) ||
        (st = get_str(c, o, "prompt", "prompt", &prompt, NULL)) ||
        (st = get_keep_alive(c, o, &e->keep_alive_ms, &e->has_keep_alive_ms)) ||
        (st = get_options(c, o, &e->options, &e->has_options)) ||
        (st = model_required(c, e->model)))
        return st;
    e->input.v = msg_alloc(c->m, sizeof(char *));
    if (!e->input.v)
        return nomem(c);
    if (prompt && *prompt) {
        e->input.v[0] = prompt;
        e->input.n = 1;
    }
    e->has_input = true;
    /* The legacy route returns the raw pooled vector (§1.5). */
    e->normalize = false;
    e->has_normalize = true;
    r->model = e->model;
    r->stream = false;
    return CR_OK;
}

/* `model`, or its deprecated alias `name`. */
static cr_status_t model_or_name(ctx_t *c, const json_t *o, char **out)
{
    char *model = NULL, *name = NULL;
    cr_status_t st;
    if ((st = get_str(c, o, "model", "model", &model, NULL)) ||
        (st = get_str(c, o, "name", "name", &name, NULL)))
        return st;
    *out = model && *model ? model : name ? name : "";
    return CR_OK;
}

static cr_status_t parse_show(ctx_t *c, const json_t *o, gw_request_t *r)
{
    msg_show_body_t *s = &c->m->u.show;
    cr_status_t st;
    if ((st = model_or_name(c, o, &s->model)) ||
        (st = get_bool(c, o, "verbose", "verbose", &s->verbose,
                       &s->has_verbose)) ||
        (st = get_str(c, o, "system", "system", &s->system, &s->has_system)) ||
        (st = get_options(c, o, &s->options, &s->has_options)) ||
        (st = model_required(c, s->model)))
        return st;
    s->has_model = true;
    r->model = s->model;
    r->stream = false;
    return CR_OK;
}

/* "<what> %q is invalid" unless name is a valid model name. */
static cr_status_t check_name(ctx_t *c, const char *what, const char *name)
{
    if (cr_model_name_is_valid(name))
        return CR_OK;
    cr_buf_t q;
    cr_buf_init(&q, 4096);
    gw_go_quote(&q, name, strlen(name));
    cr_err_set(c->err, CR_E_INVALID, "%s %s is invalid", what,
               q.data ? q.data : "\"\"");
    cr_buf_free(&q);
    return CR_E_INVALID;
}

static cr_status_t parse_copy(ctx_t *c, const json_t *o, gw_request_t *r)
{
    msg_copy_body_t *cp = &c->m->u.copy;
    cr_status_t st;
    cp->source = cp->destination = "";
    if ((st = get_str(c, o, "source", "source", &cp->source, NULL)) ||
        (st = get_str(c, o, "destination", "destination", &cp->destination,
                      NULL)) ||
        (st = check_name(c, "source", cp->source)) ||
        (st = check_name(c, "destination", cp->destination)))
        return st;
    cp->has_source = cp->has_destination = true;
    r->model = cp->source;
    r->stream = false;
    return CR_OK;
}

static cr_status_t parse_delete(ctx_t *c, const json_t *o, gw_request_t *r)
{
    msg_delete_body_t *d = &c->m->u.delete;
    cr_status_t st;
    if ((st = model_or_name(c, o, &d->model)) ||
        (st = check_name(c, "name", d->model)))
        return st;
    d->has_model = true;
    r->model = d->model;
    r->stream = false;
    return CR_OK;
}

/* Go's fs.ValidPath: relative, slash-separated, no empty, "." or ".."
 * elements (except the path "." itself). */
static bool valid_rel_path(const char *p)
{
    if (!strcmp(p, "."))
        return true;
    if (!*p)
        return false;
    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') ||
            (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        if (!slash)
            return true;
        p = slash + 1;
    }
}

/* files/adapters: map filename -> digest, as file_ref records. */
static cr_status_t get_file_map(ctx_t *c, const json_t *o, const char *key,
                                msg_file_ref_t **v_out, size_t *n_out,
                                bool *has)
{
    json_t *v = gw_json_member(o, key);
    if (!v)
        return CR_OK;
    if (!json_is_object(v))
        return type_error(c, key, v, "map[string]string");
    size_t n = json_object_size(v);
    if (n > MSG_MAX_ARRAY)
        return cr_err_set(c->err, CR_E_INVALID, "too many %s (%zu)", key, n);
    msg_file_ref_t *arr = msg_alloc(c->m, (n ? n : 1) * sizeof *arr);
    if (!arr)
        return nomem(c);
    size_t i = 0;
    const char *name;
    json_t *dig;
    json_object_foreach(v, name, dig) {
        if (!json_is_string(dig))
            return type_error(c, key, dig, "string");
        if (!valid_rel_path(name))
            return cr_err_set(c->err, CR_E_INVALID,
                              "file path must be relative");
        if (!gw_digest_is_valid(json_string_value(dig)))
            return cr_err_set(c->err, CR_E_INVALID, "invalid digest format");
        arr[i].name = msg_strdup(c->m, name);
        arr[i].digest = msg_strdup(c->m, json_string_value(dig));
        if (!arr[i].name || !arr[i].digest)
            return nomem(c);
        arr[i].has_name = arr[i].has_digest = true;
        i++;
    }
    *v_out = arr;
    *n_out = i;
    *has = true;
    return CR_OK;
}

static cr_status_t parse_create(ctx_t *c, const json_t *o, gw_request_t *r)
{
    msg_create_body_t *k = &c->m->u.create;
    cr_status_t st;
    char *quantization = NULL;
    if ((st = model_or_name(c, o, &k->model)) ||
        (st = get_str(c, o, "from", "from", &k->from, &k->has_from)) ||
        (st = get_file_map(c, o, "files", &k->files.v, &k->files.n,
                           &k->has_files)) ||
        (st = get_file_map(c, o, "adapters", &k->adapters.v, &k->adapters.n,
                           &k->has_adapters)) ||
        (st = get_str(c, o, "template", "template", &k->template,
                      &k->has_template)) ||
        (st = get_str(c, o, "system", "system", &k->system, &k->has_system)) ||
        (st = get_messages(c, o, &k->messages.v, &k->messages.n,
                           &k->has_messages)) ||
        (st = get_str(c, o, "quantize", "quantize", &k->quantize,
                      &k->has_quantize)) ||
        (st = get_str(c, o, "quantization", "quantization", &quantization,
                      NULL)) ||
        (st = get_str(c, o, "renderer", "renderer", &k->renderer,
                      &k->has_renderer)) ||
        (st = get_str(c, o, "parser", "parser", &k->parser, &k->has_parser)) ||
        (st = get_str(c, o, "draft", "draft", &k->draft, &k->has_draft)) ||
        (st = get_bool(c, o, "insecure", "insecure", &k->insecure, &k->has_insecure)) ||
        (st = get_bool(c, o, "stream", "stream", &r->stream, NULL)))
        return st;
    /* Ollama's draft from uploaded files: corral names a created model */
    if (gw_json_member(o, "draft_files"))
        return cr_err_set(c->err, CR_E_INVALID,
                          "draft_files is not supported: create the draft as a model and "
                          "name it in \"draft\" (Modelfile: DRAFT NAME)");
    if ((!k->quantize || !*k->quantize) && quantization && *quantization) {
        k->quantize = quantization;
        k->has_quantize = true;
    }

    json_t *params = gw_json_member(o, "parameters");
    if (params) {
        msg_options_t scratch;
        memset(&scratch, 0, sizeof scratch);
        if ((st = check_options(c, params, "parameters", &scratch)) ||
            (st = dump_json(c, params, &k->parameters)))
            return st;
        k->has_parameters = true;
    }

    json_t *lic = gw_json_member(o, "license");
    if (lic) {
        size_t n = json_is_array(lic) ? json_array_size(lic) : 1;
        if (!json_is_array(lic) && !json_is_string(lic))
            return type_error(c, "license", lic, "string");
        if (n > MSG_MAX_ARRAY)
            return cr_err_set(c->err, CR_E_INVALID, "too many licenses");
        k->license.v = msg_alloc(c->m, (n ? n : 1) * sizeof(char *));
        if (!k->license.v)
            return nomem(c);
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_is_array(lic) ? json_array_get(lic, i) : lic;
            if (!json_is_string(e))
                return type_error(c, "license", e, "string");
            if (!(k->license.v[i] = msg_strdup(c->m, json_string_value(e))))
                return nomem(c);
        }
        k->license.n = n;
        k->has_license = true;
    }

    if (!cr_model_name_is_valid(k->model))
        return cr_err_set(c->err, CR_E_INVALID, CR_NAME_INVALID_MSG);
    if ((!k->from || !*k->from) && !k->has_files)
        return cr_err_set(c->err, CR_E_INVALID,
                          "neither 'from' or 'files' was specified");
    k->has_model = true;
    r->model = k->model;
    return CR_OK;
}

static cr_status_t parse_pull_push(ctx_t *c, const json_t *o, gw_request_t *r,
                                   bool pull)
{
    char *model;
    bool insecure = false;
    cr_status_t st;
    char *ignored = NULL;
    if ((st = model_or_name(c, o, &model)) ||
        (st = get_bool(c, o, "insecure", "insecure", &insecure, NULL)) ||
        (st = get_str(c, o, "username", "username", &ignored, NULL)) ||
        (st = get_str(c, o, "password", "password", &ignored, NULL)) ||
        (st = get_bool(c, o, "stream", "stream", &r->stream, NULL)))
        return st;
    if (pull && !cr_model_name_is_valid(model))
        return cr_err_set(c->err, CR_E_INVALID, CR_NAME_INVALID_MSG);
    if (!pull && !*model)
        return cr_err_set(c->err, CR_E_INVALID, "model is required");
    if (pull) {
        c->m->u.pull.model = model;
        c->m->u.pull.has_model = true;
        c->m->u.pull.insecure = insecure;
        c->m->u.pull.has_insecure = true;
    } else {
        c->m->u.push.model = model;
        c->m->u.push.has_model = true;
        c->m->u.push.insecure = insecure;
        c->m->u.push.has_insecure = true;
    }
    r->model = model;
    return CR_OK;
}

static const struct api_spec {
    msg_type_t type;
    const char *sname; /* Go struct, for type errors */
} api_specs[] = {
    [GW_API_GENERATE] = {MSG_generate, "GenerateRequest"},
    [GW_API_CHAT] = {MSG_chat, "ChatRequest"},
    [GW_API_EMBED] = {MSG_embed, "EmbedRequest"},
    [GW_API_EMBEDDINGS] = {MSG_embed, "EmbeddingRequest"},
    [GW_API_SHOW] = {MSG_show, "ShowRequest"},
    [GW_API_COPY] = {MSG_copy, "CopyRequest"},
    [GW_API_DELETE] = {MSG_delete, "DeleteRequest"},
    [GW_API_CREATE] = {MSG_create, "CreateRequest"},
    [GW_API_PULL] = {MSG_pull, "PullRequest"},
    [GW_API_PUSH] = {MSG_push, "PushRequest"},
    [GW_API_RERANK] = {MSG_rerank, "RerankRequest"},
};

static bool all_space(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isspace((unsigned char)p[i]))
            return false;
    return true;
}

cr_status_t gw_request_parse(gw_api_t api, const char *body, size_t len,
                             gw_request_t *out, cr_err_t *err)
{
    memset(out, 0, sizeof *out);
    if ((size_t)api >= CR_ARRAY_LEN(api_specs))
        return cr_err_set(err, CR_E_INTERNAL, "unknown api %d", (int)api);
    if (!body || all_space(body, len))
        return cr_err_set(err, CR_E_INVALID, "missing request body");

    json_error_t je;
    json_t *root = json_loadb(body, len, JSON_DECODE_ANY, &je);
    if (!root)
        return cr_err_set(err, CR_E_INVALID, "%s (line %d, column %d)",
                          je.text, je.line, je.column);
    const struct api_spec *spec = &api_specs[api];
    if (!json_is_object(root) && !json_is_null(root)) {
        cr_err_set(err, CR_E_INVALID,
                   "json: cannot unmarshal %s into Go value of type api.%s",
                   json_kind(root), spec->sname);
        json_decref(root);
        return CR_E_INVALID;
    }
    if (json_is_null(root)) { /* Go decodes null into the zero struct */
        json_decref(root);
        root = json_object();
        if (!root)
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }

    msg_init(&out->msg, spec->type, NULL);
    out->stream = true;
    out->model = "";
    ctx_t c = {&out->msg, spec->sname, err};
    cr_status_t st;
    switch (api) {
    case GW_API_GENERATE: st = parse_generate(&c, root, out); break;
    case GW_API_CHAT: st = parse_chat(&c, root, out); break;
    case GW_API_EMBED: st = parse_embed(&c, root, out); break;
    case GW_API_EMBEDDINGS: st = parse_embeddings(&c, root, out); break;
    case GW_API_SHOW: st = parse_show(&c, root, out); break;
    case GW_API_COPY: st = parse_copy(&c, root, out); break;
    case GW_API_DELETE: st = parse_delete(&c, root, out); break;
    case GW_API_CREATE: st = parse_create(&c, root, out); break;
    case GW_API_PULL: st = parse_pull_push(&c, root, out, true); break;
    case GW_API_PUSH: st = parse_pull_push(&c, root, out, false); break;
    case GW_API_RERANK: st = parse_rerank(&c, root, out); break;
    default: st = cr_err_set(err, CR_E_INTERNAL, "unknown api"); break;
    }
    json_decref(root);
    if (st)
        gw_request_clear(out);
    return st;
}

void gw_request_clear(gw_request_t *r)
{
    msg_clear(&r->msg);
    memset(r, 0, sizeof *r);
}

bool gw_digest_is_valid(const char *d)
{
    if (!d || strncmp(d, "sha256", 6) != 0 || (d[6] != ':' && d[6] != '-'))
        return false;
    const char *h = d + 7;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)h[i]))
            return false;
    return h[64] == '\0';
}
