/* prompt.c: Ollama's prompt construction (server/prompt.go chatPrompt,
 * template.Execute, the generate/chat handlers' message assembly) on top of
 * the template engine. See prompt.h for the contract.
 *
 * The data handed to templates mirrors Ollama's Go types, because templates
 * can observe them: messages are *template.templateMessage structs, tools
 * are templateTools whose elements print as JSON, property maps and
 * tool-call arguments are Go maps (sorted keys) that print as JSON, and
 * JSON values inside arguments decode as Go's `any` (maps, float64). */
#include "lib/prelude.h"
#include "services/runner/prompt/prompt.h"

#include "services/runner/prompt/renderer.h"

#include <ctype.h>

/* ---- small helpers ---- */

static const char *nz(const char *s)
{
    return s ? s : "";
}

/* Strings made while building (merged and tagged contents), freed at once. */
typedef struct pool {
    char **items;
    size_t n, cap;
} pool_t;

static char *pool_add(pool_t *p, char *s)
{
    if (!s)
        return NULL;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        char **q = realloc(p->items, cap * sizeof *q);
        if (!q) {
            free(s);
            return NULL;
        }
        p->items = q;
        p->cap = cap;
    }
    p->items[p->n++] = s;
    return s;
}

static void pool_free(pool_t *p)
{
    for (size_t i = 0; i < p->n; i++)
        free(p->items[i]);
    free(p->items);
    p->items = NULL;
    p->n = p->cap = 0;
}

/* A message as the builder works on it: the request's fields plus the
 * tool calls converted once to the template's value. */
typedef struct pmsg {
    const char *role, *content, *thinking, *tool_name, *tool_call_id;
    size_t n_images;
    rn_val_t *tool_calls; /* borrowed from the owner array's conversion */
    const json_t *calls_json; /* the same, as the request gave it */
    bool trusted;         /* role and content are the model's own (Modelfile) */
} pmsg_t;

static cr_status_t set_field(rn_val_t *st, const char *name, const char *json_name,
                             unsigned flags, rn_val_t *v)
{
    return rn_val_struct_add(st, name, json_name, flags, &v);
}

static cr_status_t set_key(rn_val_t *m, const char *key, rn_val_t *v)
{
    return rn_val_map_set(m, key, &v);
}

/* ---- JSON readers that name the field on error ---- */

static cr_status_t want_string(const json_t *obj, const char *key, const char *path,
                               rn_val_t **out, cr_err_t *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v && !json_is_null(v) && !json_is_string(v))
        return cr_err_set(err, CR_E_INVALID, "%s.%s: expected a string", path, key);
    *out = v && json_is_string(v) ? rn_val_strn_new(json_string_value(v), json_string_length(v))
                                  : rn_val_str_new("");
    return *out ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");
}

/* A JSON value as Go's `any` sees it (absent -> nil). */
static cr_status_t want_any(const json_t *obj, const char *key, unsigned opts, rn_val_t **out,
                            cr_err_t *err)
{
    const json_t *v = json_object_get(obj, key);
    return rn_val_from_json(v, opts, out, err);
}

/* []string (nil when absent). */
static cr_status_t want_strings(const json_t *obj, const char *key, const char *path,
                                rn_val_t **out, cr_err_t *err)
{
    const json_t *v = json_object_get(obj, key);
    *out = NULL;
    if (v && !json_is_null(v) && !json_is_array(v))
        return cr_err_set(err, CR_E_INVALID, "%s.%s: expected an array of strings", path, key);
    rn_val_t *l = rn_val_list_new(v && json_is_array(v) ? 0 : RN_VAL_F_NIL);
    if (!l)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    size_t i;
    const json_t *e;
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e)) {
            rn_val_destroy(&l);
            return cr_err_set(err, CR_E_INVALID, "%s.%s[%zu]: expected a string", path, key, i);
        }
        rn_val_t *s = rn_val_strn_new(json_string_value(e), json_string_length(e));
        if (rn_val_list_push(l, &s)) {
            rn_val_destroy(&l);
            return cr_err_set(err, CR_E_NOMEM, "out of memory");
        }
    }
    *out = l;
    return CR_OK;
}

/* ---- tools (templateTools) ---- */

static cr_status_t prop_value(const json_t *j, const char *path, int depth, rn_val_t **out,
                              cr_err_t *err);

/* A property map: name -> api.ToolProperty. top: templateProperties (a Go
 * map printing as JSON); nested: *ToolPropertiesMap (ordered). */
static cr_status_t props_value(const json_t *j, const char *path, int depth, bool top,
                               rn_val_t **out, cr_err_t *err)
{
    *out = NULL;
    if (j && !json_is_null(j) && !json_is_object(j))
        return cr_err_set(err, CR_E_INVALID, "%s: expected an object", path);
    unsigned flags = top ? RN_VAL_F_JSON_PRINT : RN_VAL_F_ORDERED;
    if (!j || json_is_null(j))
        flags |= RN_VAL_F_NIL;
    rn_val_t *m = rn_val_map_new(flags);
    if (!m)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)j, key, v)
    {
        char sub[CR_ERR_MSG_MAX / 2];
        snprintf(sub, sizeof sub, "%s.%s", path, key);
        rn_val_t *p = NULL;
        cr_status_t st = prop_value(v, sub, depth + 1, &p, err);
        if (!st)
            st = rn_val_map_set(m, key, &p);
        if (st) {
            rn_val_destroy(&m);
            return st == CR_E_NOMEM ? cr_err_set(err, st, "out of memory") : st;
        }
    }
    *out = m;
    return CR_OK;
}

/* api.ToolProperty. Its `type` is a string, or a list when several. */
static cr_status_t prop_value(const json_t *j, const char *path, int depth, rn_val_t **out,
                              cr_err_t *err)
{
    *out = NULL;
    if (depth > RN_VAL_MAX_DEPTH / 2)
        return cr_err_set(err, CR_E_TOO_LARGE, "%s: nested too deeply", path);
    if (!json_is_object(j))
        return cr_err_set(err, CR_E_INVALID, "%s: expected an object", path);
    rn_val_t *st_v = rn_val_struct_new("api.ToolProperty", 0);
    if (!st_v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = CR_OK;
    char sub[CR_ERR_MSG_MAX / 2];

    /* AnyOf []ToolProperty */
    const json_t *any_of = json_object_get(j, "anyOf");
    if (any_of && !json_is_null(any_of) && !json_is_array(any_of)) {
        st = cr_err_set(err, CR_E_INVALID, "%s.anyOf: expected an array", path);
        goto fail;
    }
    rn_val_t *alts = rn_val_list_new(any_of && json_is_array(any_of) ? 0 : RN_VAL_F_NIL);
    size_t i;
    const json_t *e;
    json_array_foreach(any_of, i, e)
    {
        if (!alts)
            break;
        rn_val_t *p = NULL;
        snprintf(sub, sizeof sub, "%s.anyOf[%zu]", path, i);
        st = prop_value(e, sub, depth + 1, &p, err);
        if (!st)
            st = rn_val_list_push(alts, &p);
        if (st) {
            rn_val_destroy(&alts);
            goto fail;
        }
    }
    if ((st = set_field(st_v, "AnyOf", "anyOf", RN_FIELD_OMITEMPTY, alts)))
        goto nomem;

    /* Type PropertyType */
    const json_t *type = json_object_get(j, "type");
    rn_val_t *tv = NULL;
    if (type && json_is_array(type) && json_array_size(type) != 1) {
        st = want_strings(j, "type", path, &tv, err);
        if (st)
            goto fail;
    } else if (type && json_is_array(type)) {
        const json_t *only = json_array_get(type, 0);
        if (!json_is_string(only)) {
            st = cr_err_set(err, CR_E_INVALID, "%s.type[0]: expected a string", path);
            goto fail;
        }
        tv = rn_val_strn_new(json_string_value(only), json_string_length(only));
    } else {
        if ((st = want_string(j, "type", path, &tv, err)))
            goto fail;
    }
    if ((st = set_field(st_v, "Type", "type", RN_FIELD_OMITEMPTY, tv)))
        goto nomem;

    rn_val_t *v = NULL;
    if ((st = want_any(j, "items", 0, &v, err)) ||
        (st = set_field(st_v, "Items", "items", RN_FIELD_OMITEMPTY, v)))
        goto fail;
    if ((st = want_string(j, "description", path, &v, err)) ||
        (st = set_field(st_v, "Description", "description", RN_FIELD_OMITEMPTY, v)))
        goto fail;
    const json_t *en = json_object_get(j, "enum");
    if (en && !json_is_null(en) && !json_is_array(en)) {
        st = cr_err_set(err, CR_E_INVALID, "%s.enum: expected an array", path);
        goto fail;
    }
    if (en && json_is_array(en)) {
        if ((st = rn_val_from_json(en, 0, &v, err)))
            goto fail;
    } else {
        v = rn_val_list_new(RN_VAL_F_NIL);
    }
    if ((st = set_field(st_v, "Enum", "enum", RN_FIELD_OMITEMPTY, v)))
        goto fail;
    snprintf(sub, sizeof sub, "%s.properties", path);
    if ((st = props_value(json_object_get(j, "properties"), sub, depth + 1, false, &v, err)) ||
        (st = set_field(st_v, "Properties", "properties", RN_FIELD_OMITEMPTY, v)))
        goto fail;
    if ((st = want_strings(j, "required", path, &v, err)) ||
        (st = set_field(st_v, "Required", "required", RN_FIELD_OMITEMPTY, v)))
        goto fail;
    *out = st_v;
    return CR_OK;
nomem:
    cr_err_set(err, st, "out of memory");
fail:
    rn_val_destroy(&st_v);
    if (st == CR_E_NOMEM && err && !err->msg[0])
        cr_err_set(err, st, "out of memory");
    return st;
}

static cr_status_t tool_value(const json_t *j, size_t idx, rn_val_t **out, cr_err_t *err)
{
    char path[64], sub[96];
    snprintf(path, sizeof path, "tools[%zu]", idx);
    *out = NULL;
    if (!json_is_object(j))
        return cr_err_set(err, CR_E_INVALID, "%s: expected an object", path);
    const json_t *fn = json_object_get(j, "function");
    if (fn && !json_is_null(fn) && !json_is_object(fn))
        return cr_err_set(err, CR_E_INVALID, "%s.function: expected an object", path);
    snprintf(sub, sizeof sub, "%s.function", path);
    const json_t *params = fn ? json_object_get(fn, "parameters") : NULL;
    if (params && !json_is_null(params) && !json_is_object(params))
        return cr_err_set(err, CR_E_INVALID, "%s.parameters: expected an object", sub);
    char ppath[128];
    snprintf(ppath, sizeof ppath, "%s.parameters", sub);

    rn_val_t *tool = rn_val_struct_new("template.templateTool", RN_VAL_F_JSON_PRINT);
    /* Printing .Function yields JSON (Ollama's ToolFunction.String). */
    rn_val_t *fv = rn_val_struct_new("template.templateToolFunction", RN_VAL_F_JSON_PRINT);
    rn_val_t *pv = rn_val_struct_new("template.templateToolFunctionParameters", 0);
    cr_status_t st = (tool && fv && pv) ? CR_OK : CR_E_NOMEM;
    rn_val_t *v = NULL;
    if (st)
        goto fail;
    /* parameters */
    if ((st = want_string(params, "type", ppath, &v, err)) ||
        (st = set_field(pv, "Type", "type", 0, v)) ||
        (st = want_any(params, "$defs", 0, &v, err)) ||
        (st = set_field(pv, "Defs", "$defs", RN_FIELD_OMITEMPTY, v)) ||
        (st = want_any(params, "items", 0, &v, err)) ||
        (st = set_field(pv, "Items", "items", RN_FIELD_OMITEMPTY, v)) ||
        (st = want_strings(params, "required", ppath, &v, err)) ||
        (st = set_field(pv, "Required", "required", RN_FIELD_OMITEMPTY, v)))
        goto fail;
    char props_path[160];
    snprintf(props_path, sizeof props_path, "%s.properties", ppath);
    if ((st = props_value(params ? json_object_get(params, "properties") : NULL, props_path, 0,
                          true, &v, err)) ||
        (st = set_field(pv, "Properties", "properties", 0, v)))
        goto fail;
    /* function */
    if ((st = want_string(fn, "name", sub, &v, err)) || (st = set_field(fv, "Name", "name", 0, v)) ||
        (st = want_string(fn, "description", sub, &v, err)) ||
        (st = set_field(fv, "Description", "description", 0, v)))
        goto fail;
    st = set_field(fv, "Parameters", "parameters", 0, pv);
    pv = NULL;
    if (st)
        goto fail;
    /* tool */
    if ((st = want_string(j, "type", path, &v, err)) || (st = set_field(tool, "Type", "type", 0, v)) ||
        (st = want_any(j, "items", 0, &v, err)) ||
        (st = set_field(tool, "Items", "items", RN_FIELD_OMITEMPTY, v)))
        goto fail;
    st = set_field(tool, "Function", "function", 0, fv);
    fv = NULL;
    if (st)
        goto fail;
    *out = tool;
    return CR_OK;
fail:
    rn_val_destroy(&tool);
    rn_val_destroy(&fv);
    rn_val_destroy(&pv);
    if (st == CR_E_NOMEM && err && !err->msg[0])
        cr_err_set(err, st, "out of memory");
    return st;
}

cr_status_t rn_prompt_tools_value(const json_t *tools, rn_val_t **out, cr_err_t *err)
{
    if (err)
        cr_err_clear(err);
    *out = NULL;
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return cr_err_set(err, CR_E_INVALID, "tools: expected an array");
    bool nil = !tools || json_is_null(tools);
    rn_val_t *list = rn_val_list_new(RN_VAL_F_JSON_PRINT | (nil ? RN_VAL_F_NIL : 0));
    if (!list)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    size_t i;
    const json_t *e;
    json_array_foreach(tools, i, e)
    {
        rn_val_t *t = NULL;
        cr_status_t st = tool_value(e, i, &t, err);
        if (!st)
            st = rn_val_list_push(list, &t);
        if (st) {
            rn_val_destroy(&list);
            return st == CR_E_NOMEM ? cr_err_set(err, st, "out of memory") : st;
        }
    }
    *out = list;
    return CR_OK;
}

/* ---- messages (templateMessage) ---- */

/* []templateToolCall from a message's tool_calls JSON (nil list if none). */
static cr_status_t tool_calls_value(const json_t *calls, size_t msg_idx, bool ordered,
                                    rn_val_t **out, cr_err_t *err)
{
    *out = NULL;
    if (calls && !json_is_null(calls) && !json_is_array(calls))
        return cr_err_set(err, CR_E_INVALID, "messages[%zu].tool_calls: expected an array",
                          msg_idx);
    bool nil = !calls || json_is_null(calls) || json_array_size(calls) == 0;
    rn_val_t *list = rn_val_list_new(nil ? RN_VAL_F_NIL : 0);
    if (!list)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    size_t i;
    const json_t *c;
    json_array_foreach(calls, i, c)
    {
        char path[96];
        snprintf(path, sizeof path, "messages[%zu].tool_calls[%zu]", msg_idx, i);
        cr_status_t st = CR_OK;
        rn_val_t *call = NULL, *fn = NULL, *v = NULL;
        const json_t *f = json_is_object(c) ? json_object_get(c, "function") : NULL;
        if (!json_is_object(c) || (f && !json_is_object(f) && !json_is_null(f))) {
            st = cr_err_set(err, CR_E_INVALID, "%s: expected an object with a function", path);
            goto bad;
        }
        call = rn_val_struct_new("template.templateToolCall", 0);
        fn = rn_val_struct_new("template.templateToolCallFunction", 0);
        if (!call || !fn) {
            st = CR_E_NOMEM;
            goto bad;
        }
        char fpath[112];
        snprintf(fpath, sizeof fpath, "%s.function", path);
        const json_t *index = f ? json_object_get(f, "index") : NULL;
        if (index && !json_is_null(index) && !json_is_integer(index)) {
            st = cr_err_set(err, CR_E_INVALID, "%s.index: expected an integer", fpath);
            goto bad;
        }
        const json_t *args = f ? json_object_get(f, "arguments") : NULL;
        if (args && !json_is_null(args) && !json_is_object(args)) {
            st = cr_err_set(err, CR_E_INVALID, "%s.arguments: expected an object", fpath);
            goto bad;
        }
        if ((st = set_field(fn, "Index", NULL, 0,
                            rn_val_int_new(index ? (int64_t)json_integer_value(index) : 0))) ||
            (st = want_string(f, "name", fpath, &v, err)) || (st = set_field(fn, "Name", NULL, 0, v)))
            goto bad;
        /* templateArgs: a Go map[string]any printing as JSON; nil when the
         * request had no arguments. */
        if (args && json_is_object(args)) {
            unsigned jo = RN_JSON_TOP_PRINTS_JSON | (ordered ? RN_JSON_ORDERED : 0);
            if ((st = rn_val_from_json(args, jo, &v, err)))
                goto bad;
        } else {
            v = rn_val_map_new(RN_VAL_F_JSON_PRINT | RN_VAL_F_NIL);
        }
        if ((st = set_field(fn, "Arguments", NULL, 0, v)) ||
            (st = want_string(c, "id", path, &v, err)) || (st = set_field(call, "ID", NULL, 0, v)))
            goto bad;
        st = set_field(call, "Function", NULL, 0, fn);
        fn = NULL;
        if (!st)
            st = rn_val_list_push(list, &call);
    bad:
        rn_val_destroy(&call);
        rn_val_destroy(&fn);
        if (st) {
            rn_val_destroy(&list);
            if (st == CR_E_NOMEM && err && !err->msg[0])
                cr_err_set(err, st, "out of memory");
            return st;
        }
    }
    *out = list;
    return CR_OK;
}

/* A string value, marked trusted when it is the model's own data. */
static rn_val_t *str_val(const char *s, bool trusted)
{
    rn_val_t *v = rn_val_str_new(s);
    return trusted ? rn_val_trust(v) : v;
}

static cr_status_t message_value(const pmsg_t *m, rn_val_t **out)
{
    rn_val_t *v = rn_val_struct_new("*template.templateMessage", RN_VAL_F_POINTER);
    if (!v)
        return CR_E_NOMEM;
    rn_val_t *images = rn_val_list_new(m->n_images ? 0 : RN_VAL_F_NIL);
    cr_status_t st = images ? CR_OK : CR_E_NOMEM;
    for (size_t i = 0; !st && i < m->n_images; i++) {
        rn_val_t *img = rn_val_str_new(""); /* the bytes are not the template's business */
        st = rn_val_list_push(images, &img);
    }
    if (st) {
        rn_val_destroy(&images);
        rn_val_destroy(&v);
        return st;
    }
    if ((st = set_field(v, "Role", NULL, 0, str_val(m->role, m->trusted))) ||
        (st = set_field(v, "Content", NULL, 0, str_val(m->content, m->trusted))) ||
        (st = set_field(v, "Thinking", NULL, 0, rn_val_str_new(m->thinking))) ||
        (st = set_field(v, "Images", NULL, 0, images)) ||
        (st = set_field(v, "ToolCalls", NULL, 0, rn_val_ref(m->tool_calls))) ||
        (st = set_field(v, "ToolName", NULL, 0, rn_val_str_new(m->tool_name))) ||
        (st = set_field(v, "ToolCallID", NULL, 0, rn_val_str_new(m->tool_call_id)))) {
        rn_val_destroy(&v);
        return st;
    }
    *out = v;
    return CR_OK;
}

/* ---- template.Execute ---- */

rn_prompt_think_t rn_prompt_think_parse(const char *s)
{
    if (!s || !*s)
        return (rn_prompt_think_t){RN_THINK_UNSET, NULL};
    if (!strcmp(s, "true"))
        return (rn_prompt_think_t){RN_THINK_TRUE, NULL};
    if (!strcmp(s, "false"))
        return (rn_prompt_think_t){RN_THINK_FALSE, NULL};
    return (rn_prompt_think_t){RN_THINK_LEVEL, s};
}

static void think_values(const rn_prompt_think_t *t, bool *think, const char **level, bool *set)
{
    *set = t->mode != RN_THINK_UNSET;
    *think = false;
    *level = "";
    if (t->mode == RN_THINK_TRUE) {
        *think = true;
        *level = "medium";
    } else if (t->mode == RN_THINK_LEVEL) {
        const char *l = nz(t->level);
        *think = !strcmp(l, "high") || !strcmp(l, "medium") || !strcmp(l, "low") ||
                 !strcmp(l, "max");
        *level = l;
    }
}

static cr_status_t put_think(rn_val_t *data, const rn_prompt_think_t *t)
{
    bool think, set;
    const char *level;
    think_values(t, &think, &level, &set);
    cr_status_t st;
    if ((st = set_key(data, "Think", rn_val_bool_new(think))) ||
        (st = set_key(data, "ThinkLevel", rn_val_str_new(level))) ||
        (st = set_key(data, "IsThinkSet", rn_val_bool_new(set))))
        return st;
    return CR_OK;
}

/* Where one rendering goes: the text, and the trust spans when wanted. */
typedef struct sink {
    cr_buf_t *buf;
    rn_tmpl_spans_t *spans; /* NULL: not recorded */
} sink_t;

static cr_status_t exec_data(const rn_tmpl_t *t, rn_val_t *data, bool cut,
                             const rn_prompt_opts_t *o, const sink_t *out, cr_err_t *err)
{
    rn_tmpl_opts_t topts = {.now_unix = o->now_unix, .cut_after_response = cut,
                            .spans = out->spans};
    return rn_tmpl_exec(t, data, &topts, out->buf, err);
}

/* A legacy turn's fields, each with its trust. */
typedef struct legacy {
    const char *system, *prompt, *response;
    bool system_trusted, prompt_trusted, response_trusted;
} legacy_t;

/* A legacy turn: {System, Prompt, Response, Think...}. */
static cr_status_t exec_legacy(const rn_tmpl_t *t, const legacy_t *l,
                               const rn_prompt_think_t *think, bool cut,
                               const rn_prompt_opts_t *o, const sink_t *out, cr_err_t *err)
{
    rn_val_t *data = rn_val_map_new(0);
    cr_status_t st = data ? CR_OK : CR_E_NOMEM;
    if (!st)
        st = set_key(data, "System", str_val(l->system, l->system_trusted));
    if (!st)
        st = set_key(data, "Prompt", str_val(l->prompt, l->prompt_trusted));
    if (!st)
        st = set_key(data, "Response", str_val(l->response, l->response_trusted));
    if (!st)
        st = put_think(data, think);
    if (st)
        cr_err_set(err, st, "out of memory");
    else
        st = exec_data(t, data, cut, o, out, err);
    rn_val_destroy(&data);
    return st;
}

/* Ollama's Execute over already-built messages. tools: the .Tools value
 * (borrowed). */
static cr_status_t execute(const rn_tmpl_t *t, const pmsg_t *msgs, size_t n, rn_val_t *tools,
                           const char *prompt, const char *suffix, const rn_prompt_think_t *think,
                           const rn_prompt_opts_t *o, const sink_t *out, cr_err_t *err)
{
    pool_t pool = {0};
    pmsg_t *col = n ? malloc(n * sizeof *col) : NULL;
    cr_buf_t sys;
    cr_buf_init(&sys, o->max_bytes);
    rn_val_t *data = NULL;
    cr_status_t st = (n && !col) ? CR_E_NOMEM : CR_OK;
    size_t nc = 0;
    bool any_system = false, system_trusted = true;

    /* collate: consecutive same-role messages merge with a blank line
     * (tool messages never); all system contents join into .System. */
    for (size_t i = 0; !st && i < n; i++) {
        if (!strcmp(msgs[i].role, "system")) {
            if (any_system)
                st = cr_buf_puts(&sys, "\n\n");
            if (!st)
                st = cr_buf_puts(&sys, msgs[i].content);
            any_system = true;
            system_trusted = system_trusted && msgs[i].trusted;
        }
        if (!st && nc > 0 && !strcmp(col[nc - 1].role, msgs[i].role) &&
            strcmp(msgs[i].role, "tool") != 0) {
            char *merged = NULL;
            if (asprintf(&merged, "%s\n\n%s", col[nc - 1].content, msgs[i].content) < 0)
                merged = NULL;
            if (!pool_add(&pool, merged))
                st = CR_E_NOMEM;
            else
                col[nc - 1].content = merged;
            col[nc - 1].trusted = col[nc - 1].trusted && msgs[i].trusted;
        } else if (!st) {
            col[nc++] = msgs[i];
        }
    }
    if (st == CR_E_TOO_LARGE) {
        cr_err_set(err, st, "prompt exceeds %zu bytes", o->max_bytes);
        goto out;
    } else if (st) {
        cr_err_set(err, st, "out of memory");
        goto out;
    }
    const char *system = sys.data ? sys.data : "";

    if (*nz(prompt) && *nz(suffix)) {
        data = rn_val_map_new(0);
        st = data ? CR_OK : CR_E_NOMEM;
        if (!st)
            st = set_key(data, "Prompt", rn_val_str_new(prompt));
        if (!st)
            st = set_key(data, "Suffix", rn_val_str_new(suffix));
        if (!st)
            st = set_key(data, "Response", rn_val_str_new(""));
        if (!st)
            st = put_think(data, think);
        if (st) {
            cr_err_set(err, st, "out of memory");
            goto out;
        }
        st = exec_data(t, data, false, o, out, err);
        goto out;
    }

    if (rn_tmpl_uses(t, "messages")) {
        rn_val_t *list = rn_val_list_new(nc ? 0 : RN_VAL_F_NIL);
        st = list ? CR_OK : CR_E_NOMEM;
        for (size_t i = 0; !st && i < nc; i++) {
            rn_val_t *mv = NULL;
            st = message_value(&col[i], &mv);
            if (!st)
                st = rn_val_list_push(list, &mv);
        }
        if (!st) {
            data = rn_val_map_new(0);
            st = data ? CR_OK : CR_E_NOMEM;
        }
        if (!st)
            st = set_key(data, "Messages", list);
        else
            rn_val_destroy(&list);
        if (!st)
            st = set_key(data, "System", str_val(system, any_system && system_trusted));
        if (!st)
            st = set_key(data, "Tools", rn_val_ref(tools));
        if (!st)
            st = set_key(data, "Response", rn_val_str_new(""));
        if (!st)
            st = put_think(data, think);
        if (st) {
            cr_err_set(err, st, "out of memory");
            goto out;
        }
        st = exec_data(t, data, false, o, out, err);
        goto out;
    }

    /* Legacy: one execution per turn, then the cut template. */
    static const legacy_t empty = {"", "", "", true, true, true};
    legacy_t l = empty;
    for (size_t i = 0; !st && i < nc; i++) {
        const pmsg_t *m = &col[i];
        bool flush = false;
        if (!strcmp(m->role, "system"))
            flush = *l.prompt || *l.response;
        else if (!strcmp(m->role, "user"))
            flush = *l.response != '\0';
        if (flush) {
            st = exec_legacy(t, &l, think, false, o, out, err);
            l = empty;
        }
        if (!strcmp(m->role, "system")) {
            l.system = m->content;
            l.system_trusted = m->trusted;
        } else if (!strcmp(m->role, "user")) {
            l.prompt = m->content;
            l.prompt_trusted = m->trusted;
        } else if (!strcmp(m->role, "assistant")) {
            l.response = m->content;
            l.response_trusted = m->trusted;
        }
    }
    if (!st)
        st = exec_legacy(t, &l, think, true, o, out, err);
out:
    rn_val_destroy(&data);
    cr_buf_free(&sys);
    free(col);
    pool_free(&pool);
    return st;
}

/* ---- building the message list ---- */

typedef struct msgset {
    pmsg_t *m;
    rn_val_t **calls; /* owned tool-call values, one per message */
    size_t n;
    pool_t pool;
} msgset_t;

static void msgset_free(msgset_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        rn_val_destroy(&s->calls[i]);
    free(s->calls);
    free(s->m);
    pool_free(&s->pool);
    memset(s, 0, sizeof *s);
}

static cr_status_t msgset_init(msgset_t *s, size_t cap, cr_err_t *err)
{
    memset(s, 0, sizeof *s);
    s->m = calloc(cap ? cap : 1, sizeof *s->m);
    s->calls = calloc(cap ? cap : 1, sizeof *s->calls);
    if (!s->m || !s->calls) {
        msgset_free(s);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    return CR_OK;
}

/* Appends a message; idx is its index in the request for error paths. */
static cr_status_t msgset_add(msgset_t *s, const rn_prompt_msg_t *in, size_t idx, bool trusted,
                              const rn_prompt_opts_t *o, cr_err_t *err)
{
    pmsg_t *m = &s->m[s->n];
    m->trusted = trusted;
    m->role = nz(in->role);
    m->content = nz(in->content);
    m->thinking = nz(in->thinking);
    m->tool_name = nz(in->tool_name);
    m->tool_call_id = nz(in->tool_call_id);
    m->n_images = in->n_images;
    cr_status_t st = tool_calls_value(in->tool_calls, idx, o->tool_args_ordered, &s->calls[s->n],
                                      err);
    if (st)
        return st;
    m->tool_calls = s->calls[s->n];
    m->calls_json = in->tool_calls;
    s->n++;
    return CR_OK;
}

/* Ollama's thinking parser run once over a whole message: drops a leading
 * <think>...</think> and the whitespace after it. */
static const char *strip_think(const char *c)
{
    static const char open[] = "<think>", close[] = "</think>";
    const char *t = c;
    while (isspace((unsigned char)*t))
        t++;
    if (!strncmp(t, open, sizeof open - 1)) {
        const char *after = t + sizeof open - 1;
        while (isspace((unsigned char)*after))
            after++;
        const char *end = strstr(after, close);
        if (!end)
            return ""; /* all thinking (or an unfinished close tag) */
        const char *rest = end + sizeof close - 1;
        while (isspace((unsigned char)*rest))
            rest++;
        return rest;
    }
    if (!strncmp(open, t, strlen(t)))
        return ""; /* blank or a partial opening tag: held back, never content */
    return c;
}

/* Tags a message's images: [img-N] replaces each literal [img] in turn,
 * the rest are prefixed. */
static cr_status_t tag_images(pmsg_t *m, size_t *next_id, pool_t *pool)
{
    if (!m->n_images)
        return CR_OK;
    cr_buf_t prefix, body;
    cr_buf_init(&prefix, SIZE_MAX / 4);
    cr_buf_init(&body, SIZE_MAX / 4);
    cr_status_t st = cr_buf_puts(&body, m->content);
    for (size_t i = 0; !st && i < m->n_images; i++) {
        char tag[48];
        int tn = snprintf(tag, sizeof tag, "[img-%zu]", (*next_id)++);
        char *mark = body.data ? strstr(body.data, "[img]") : NULL;
        if (!mark) {
            st = cr_buf_append(&prefix, tag, (size_t)tn);
            continue;
        }
        size_t at = (size_t)(mark - body.data);
        cr_buf_t nb;
        cr_buf_init(&nb, SIZE_MAX / 4);
        st = cr_buf_append(&nb, body.data, at);
        if (!st)
            st = cr_buf_append(&nb, tag, (size_t)tn);
        if (!st)
            st = cr_buf_puts(&nb, body.data + at + 5);
        cr_buf_free(&body);
        body = nb;
    }
    if (!st)
        st = cr_buf_append(&prefix, body.data ? body.data : "", body.len);
    char *s = NULL;
    if (!st) {
        s = cr_buf_steal(&prefix);
        if (!pool_add(pool, s))
            st = CR_E_NOMEM;
        else
            m->content = s;
    }
    cr_buf_free(&prefix);
    cr_buf_free(&body);
    return st;
}

static void opts_fill(rn_prompt_opts_t *o, const rn_prompt_opts_t *in)
{
    *o = *in;
    if (!o->max_bytes)
        o->max_bytes = RN_PROMPT_DEFAULT_MAX_BYTES;
}

/* Moves the text and its spans into the result. Spans must cover the
 * text exactly (checked: a gap would let bytes escape the tokenizer's
 * trust split). */
static cr_status_t steal_result(cr_buf_t *b, rn_tmpl_spans_t *spans, rn_prompt_result_t *out,
                                cr_err_t *err)
{
    size_t at = 0;
    for (size_t i = 0; i < spans->n; i++) {
        if (spans->v[i].offset != at)
            return cr_err_set(err, CR_E_INTERNAL, "prompt: span %zu starts at %zu, not %zu", i,
                              spans->v[i].offset, at);
        at += spans->v[i].len;
    }
    if (at != b->len)
        return cr_err_set(err, CR_E_INTERNAL, "prompt: spans cover %zu of %zu bytes", at, b->len);
    out->len = b->len;
    out->text = cr_buf_steal(b);
    if (!out->text)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    out->spans = spans->v;
    out->n_spans = spans->n;
    memset(spans, 0, sizeof *spans);
    return CR_OK;
}

/* What renders a message list: the template, or a built-in renderer. */
typedef struct via {
    const rn_tmpl_t *tmpl;
    rn_val_t *tools;                      /* the template's .Tools */
    const rn_prompt_renderer_t *renderer; /* wins when set */
    const json_t *tools_json;             /* the renderer's tools */
} via_t;

static cr_status_t render_msgs(const via_t *v, const pmsg_t *msgs, size_t n,
                               const rn_prompt_think_t *think, const rn_prompt_opts_t *o,
                               const sink_t *out, cr_err_t *err)
{
    if (!v->renderer)
        return execute(v->tmpl, msgs, n, v->tools, NULL, NULL, think, o, out, err);
    rn_prompt_msg_t *view = calloc(n ? n : 1, sizeof *view);
    if (!view)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        view[i] = (rn_prompt_msg_t){.role = msgs[i].role,
                                    .content = msgs[i].content,
                                    .thinking = msgs[i].thinking,
                                    .n_images = msgs[i].n_images,
                                    .tool_calls = msgs[i].calls_json,
                                    .tool_name = msgs[i].tool_name,
                                    .tool_call_id = msgs[i].tool_call_id,
                                    .trusted = msgs[i].trusted};
    const rn_prompt_out_t po = {out->buf, out->spans};
    cr_status_t st = v->renderer->render(view, n, v->tools_json, think, o, &po, err);
    if (st == CR_E_TOO_LARGE)
        cr_err_set(err, st, "prompt exceeds %zu bytes", o->max_bytes);
    free(view);
    return st;
}

/* Renders the conversation without its first `drop` messages (system
 * ones among them stay) and says whether it fits the context. */
static cr_status_t fits_after(const via_t *via, msgset_t *set, size_t drop, pmsg_t *work,
                              cr_buf_t *buf, rn_tmpl_spans_t *spans,
                              const rn_prompt_think_t *think, const rn_prompt_fit_t *fit,
                              rn_prompt_count_spans_fn count_prompt,
                              const rn_prompt_opts_t *o, bool *fits, cr_err_t *err)
{
    size_t n = set->n, k = 0;
    for (size_t j = 0; j < drop; j++)
        if (!strcmp(set->m[j].role, "system"))
            work[k++] = set->m[j];
    for (size_t j = drop; j < n; j++)
        work[k++] = set->m[j];
    cr_buf_reset(buf);
    spans->n = 0;
    const sink_t count_sink = {buf, NULL}, final_sink = {buf, spans};
    cr_status_t st = render_msgs(via, work, k, think, o,
                                 count_prompt ? &final_sink : &count_sink, err);
    if (st)
        return st;
    int64_t ntok = 0;
    if (count_prompt) {
        rn_prompt_result_t view = {.text = buf->data ? buf->data : "",
                                   .len = buf->len,
                                   .spans = spans->v,
                                   .n_spans = spans->n};
        st = count_prompt(fit->count_ctx, &view, &ntok, err);
    } else {
        st = fit->count_tokens(fit->count_ctx, buf->data ? buf->data : "", buf->len, &ntok,
                               err);
    }
    if (st)
        return st;
    if (fit->has_projector)
        for (size_t j = drop; j < n; j++)
            ntok += RN_PROMPT_IMAGE_TOKENS * (int64_t)set->m[j].n_images;
    *fits = ntok <= fit->num_ctx;
    return CR_OK;
}

/* Ollama's chatPrompt: truncation, image tags, the final render.
 *
 * Ollama drops the oldest messages one at a time, rendering and counting
 * the whole prompt each time: quadratic in the messages (10k of them took
 * a minute). The prompt only shrinks as more go, so the fewest to drop is
 * found by bisection instead: O(log n) renders, the same answer. */
static cr_status_t chat_prompt(const via_t *via, msgset_t *set,
                               const rn_prompt_think_t *think, const rn_prompt_fit_t *fit,
                               rn_prompt_count_spans_fn count_prompt,
                               const rn_prompt_opts_t *o, rn_prompt_result_t *out, cr_err_t *err)
{
    size_t n = set->n, curr = 0;
    pmsg_t *work = calloc(n ? n : 1, sizeof *work);
    cr_buf_t buf;
    cr_buf_init(&buf, o->max_bytes);
    rn_tmpl_spans_t spans = {0};
    const sink_t final_sink = {&buf, &spans};
    cr_status_t st = work ? CR_OK : cr_err_set(err, CR_E_NOMEM, "out of memory");

    if (!st && fit->truncate && (fit->count_tokens || count_prompt) && n > 0) {
        bool fits = false;
        st = fits_after(via, set, 0, work, &buf, &spans, think, fit, count_prompt, o, &fits,
                        err);
        if (!st && !fits) {
            /* Drop 1..n-1: the last message always stays. */
            size_t lo = 1, hi = n - 1;
            while (!st && lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                st = fits_after(via, set, mid, work, &buf, &spans, think, fit, count_prompt,
                                o, &fits, err);
                if (fits)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            curr = n > 1 ? lo : 0;
        }
        if (st)
            goto out;
    }

    /* Render: system messages of the dropped part, then the rest with
     * their images tagged from [img-0]. */
    size_t k = 0, next_id = 0;
    for (size_t j = 0; !st && j < curr; j++) {
        if (!strcmp(set->m[j].role, "system"))
            work[k++] = set->m[j];
        out->images_skipped += set->m[j].n_images;
    }
    for (size_t j = curr; !st && j < n; j++) {
        work[k] = set->m[j];
        /* Ollama's renderers see images, not [img-N] tags. */
        if (via->renderer)
            next_id += work[k].n_images;
        else if (tag_images(&work[k], &next_id, &set->pool))
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        k++;
    }
    if (st)
        goto out;
    cr_buf_reset(&buf);
    spans.n = 0;
    if ((st = render_msgs(via, work, k, think, o, &final_sink, err)))
        goto out;
    out->n_images = next_id;
    out->msgs_dropped = curr;
    st = steal_result(&buf, &spans, out, err);
out:
    rn_tmpl_spans_free(&spans);
    cr_buf_free(&buf);
    free(work);
    return st;
}

void rn_prompt_result_free(rn_prompt_result_t *r)
{
    if (!r)
        return;
    free(r->text);
    free(r->spans);
    memset(r, 0, sizeof *r);
}

cr_status_t rn_prompt_render(const rn_tmpl_t *tmpl, const rn_prompt_values_t *v,
                             const rn_prompt_opts_t *opts, cr_buf_t *out, cr_err_t *err)
{
    if (err)
        cr_err_clear(err);
    if (!tmpl || !v || !out)
        return cr_err_set(err, CR_E_INVALID, "prompt: no template or values");
    rn_prompt_opts_t none = {0};
    rn_prompt_opts_t o;
    opts_fill(&o, opts ? opts : &none);
    msgset_t set;
    cr_status_t st = msgset_init(&set, v->n_msgs, err);
    if (st)
        return st;
    rn_val_t *tools = NULL;
    for (size_t i = 0; !st && i < v->n_msgs; i++)
        st = msgset_add(&set, &v->msgs[i], i, false, &o, err);
    if (!st)
        st = rn_prompt_tools_value(v->tools, &tools, err);
    const sink_t sink = {out, NULL};
    if (!st)
        st = execute(tmpl, set.m, set.n, tools, v->prompt, v->suffix, &v->think, &o, &sink, err);
    rn_val_destroy(&tools);
    msgset_free(&set);
    return st;
}

cr_status_t rn_prompt_chat(const rn_prompt_chat_t *in, rn_prompt_result_t *out, cr_err_t *err)
{
    if (err)
        cr_err_clear(err);
    memset(out, 0, sizeof *out);
    if (!in || (!in->tmpl && !in->renderer))
        return cr_err_set(err, CR_E_INVALID, "prompt: no template");
    rn_prompt_opts_t o;
    opts_fill(&o, &in->opts);

    bool add_system = *nz(in->model_system) &&
                      (in->n_msgs == 0 || strcmp(nz(in->msgs[0].role), "system") != 0);
    size_t total = (add_system ? 1 : 0) + in->n_model_msgs + in->n_msgs;
    if (total < in->n_msgs)
        return cr_err_set(err, CR_E_TOO_LARGE, "too many messages");
    msgset_t set;
    cr_status_t st = msgset_init(&set, total, err);
    if (st)
        return st;
    rn_val_t *tools = NULL;
    if (add_system) {
        rn_prompt_msg_t sys = {.role = "system", .content = in->model_system};
        st = msgset_add(&set, &sys, 0, true, &o, err);
    }
    for (size_t i = 0; !st && i < in->n_model_msgs; i++)
        st = msgset_add(&set, &in->model_msgs[i], i, true, &o, err);
    for (size_t i = 0; !st && i < in->n_msgs; i++)
        st = msgset_add(&set, &in->msgs[i], i, false, &o, err);
    if (!st && in->strip_old_thinking) {
        size_t last_user = SIZE_MAX;
        for (size_t i = 0; i < set.n; i++)
            if (!strcmp(set.m[i].role, "user"))
                last_user = i;
        for (size_t i = 0; last_user != SIZE_MAX && i < last_user; i++)
            if (!strcmp(set.m[i].role, "assistant"))
                set.m[i].content = strip_think(set.m[i].content);
    }
    if (!st)
        st = rn_prompt_tools_value(in->tools, &tools, err);
    via_t via = {in->tmpl, tools, in->renderer, in->tools};
    if (!st)
        st = chat_prompt(&via, &set, &in->think, &in->fit, in->count_prompt, &o, out, err);
    rn_val_destroy(&tools);
    msgset_free(&set);
    if (st)
        rn_prompt_result_free(out);
    return st;
}

cr_status_t rn_prompt_generate(const rn_prompt_gen_t *in, rn_prompt_result_t *out, cr_err_t *err)
{
    if (err)
        cr_err_clear(err);
    memset(out, 0, sizeof *out);
    if (!in)
        return cr_err_set(err, CR_E_INVALID, "prompt: no request");
    rn_prompt_opts_t o;
    opts_fill(&o, &in->opts);
    cr_buf_t buf;
    cr_buf_init(&buf, o.max_bytes);
    rn_tmpl_spans_t spans = {0};
    const sink_t sink = {&buf, &spans};
    cr_status_t st;

    if (in->raw) {
        if (in->tmpl_from_request || *nz(in->system) || in->context_text) {
            st = cr_err_set(err, CR_E_INVALID,
                            "raw mode does not support template, system, or context");
            goto fail;
        }
        /* The client asked for its bytes verbatim, control tokens included. */
        if ((st = cr_buf_puts(&buf, nz(in->prompt)))) {
            cr_err_set(err, st, "prompt exceeds %zu bytes", o.max_bytes);
            goto fail;
        }
        if ((st = rn_tmpl_spans_add(&spans, 0, buf.len, true))) {
            cr_err_set(err, st, "out of memory");
            goto fail;
        }
        out->n_images = in->n_images;
        st = steal_result(&buf, &spans, out, err);
        goto fail; /* frees what is left either way */
    }
    if (!in->tmpl) {
        st = cr_err_set(err, CR_E_INVALID, "prompt: no template");
        goto fail;
    }

    /* The detokenized context goes first, whatever follows. It is trusted:
     * the client could send the same token ids (control ones included) in
     * `context` directly, so parsing its text grants nothing new. */
    if (in->context_text && (st = cr_buf_puts(&buf, in->context_text))) {
        cr_err_set(err, st, "prompt exceeds %zu bytes", o.max_bytes);
        goto fail;
    }
    if ((st = rn_tmpl_spans_add(&spans, 0, buf.len, true))) {
        cr_err_set(err, st, "out of memory");
        goto fail;
    }

    msgset_t set;
    size_t cap = 2 + (in->context_text ? 0 : in->n_model_msgs);
    if ((st = msgset_init(&set, cap, err)))
        goto fail;
    rn_val_t *tools = NULL;
    bool suffix = *nz(in->suffix) != '\0';
    if (!suffix) {
        /* The request's system is request data; the model's is its own. */
        bool req_system = *nz(in->system) != '\0';
        const char *system = req_system ? in->system : nz(in->model_system);
        if (*system) {
            rn_prompt_msg_t sys = {.role = "system", .content = system};
            st = msgset_add(&set, &sys, 0, !req_system, &o, err);
        }
        for (size_t i = 0; !st && !in->context_text && i < in->n_model_msgs; i++)
            st = msgset_add(&set, &in->model_msgs[i], i, true, &o, err);
        rn_prompt_msg_t user = {.role = "user", .content = in->prompt, .n_images = in->n_images};
        if (!st)
            st = msgset_add(&set, &user, 0, false, &o, err);
    }
    if (st)
        goto out;

    if (!suffix && !in->tmpl_from_request) {
        /* The chat-like flow: tools are an empty (non-nil) list. */
        json_t *empty = json_array();
        st = empty ? rn_prompt_tools_value(empty, &tools, err)
                   : cr_err_set(err, CR_E_NOMEM, "out of memory");
        json_decref(empty);
        rn_prompt_result_t r = {0};
        via_t via = {in->tmpl, tools, in->renderer, NULL};
        if (!st)
            st = chat_prompt(&via, &set, &in->think, &in->fit, in->count_prompt, &o, &r, err);
        if (!st) {
            size_t base = buf.len;
            st = cr_buf_append(&buf, r.text, r.len);
            if (st)
                cr_err_set(err, st, "prompt exceeds %zu bytes", o.max_bytes);
            for (size_t i = 0; !st && i < r.n_spans; i++)
                if ((st = rn_tmpl_spans_add(&spans, base + r.spans[i].offset, r.spans[i].len,
                                            r.spans[i].trusted)))
                    cr_err_set(err, st, "out of memory");
            out->n_images = r.n_images;
            out->images_skipped = r.images_skipped;
            out->msgs_dropped = r.msgs_dropped;
        }
        rn_prompt_result_free(&r);
    } else {
        /* Direct execution of Values{Messages | Prompt+Suffix}. */
        st = rn_prompt_tools_value(NULL, &tools, err);
        if (!st)
            st = execute(in->tmpl, set.m, set.n, tools, suffix ? in->prompt : NULL,
                         suffix ? in->suffix : NULL, &in->think, &o, &sink, err);
        out->n_images = in->n_images;
    }
    if (!st)
        st = steal_result(&buf, &spans, out, err);
out:
    rn_val_destroy(&tools);
    msgset_free(&set);
fail:
    rn_tmpl_spans_free(&spans);
    cr_buf_free(&buf);
    if (st)
        rn_prompt_result_free(out);
    return st;
}
