/* parser.c: the built-in parser table and what every parser shares (the
 * tools, the calls array of a push, call ids). */
#include "lib/prelude.h"
#include "services/runner/output/parser.h"

#include "services/runner/output/calljson.h"

struct rn_parser {
    const rn_parser_ops_t *ops;
    void *state;
    json_t *tools;     /* the request's tools array, or NULL */
    uint64_t rng;      /* call ids */
    int n_calls;
    size_t calls_mark; /* out->calls length when this push began */
};

static const rn_parser_ops_t *const parsers[] = {
    &rn_parser_harmony_ops,
    &rn_parser_qwen3coder_ops,
};

static const rn_parser_ops_t *find(const char *name)
{
    for (size_t i = 0; name && i < CR_ARRAY_LEN(parsers); i++)
        if (!strcmp(parsers[i]->name, name))
            return parsers[i];
    return NULL;
}

bool rn_parser_is_known(const char *name)
{
    return find(name) != NULL;
}

rn_parser_t *rn_parser_new(const char *name, const rn_parser_init_t *in,
                           cr_err_t *err)
{
    const rn_parser_ops_t *ops = find(name);
    if (!ops) {
        cr_err_set(err, CR_E_INVALID, "unknown parser \"%s\"", name ? name : "");
        return NULL;
    }
    rn_parser_t *p = calloc(1, sizeof *p);
    if (!p) {
        cr_err_set(err, CR_E_NOMEM, "out of memory for the %s parser", name);
        return NULL;
    }
    p->ops = ops;
    p->rng = in && in->seed ? in->seed : rn_output_call_seed(p);
    if (in && in->tools_json && *in->tools_json) {
        json_error_t jerr;
        p->tools = json_loads(in->tools_json, 0, &jerr);
        if (!p->tools || !json_is_array(p->tools)) {
            cr_err_set(err, CR_E_INVALID, "tools: %s",
                       p->tools ? "expected an array" : jerr.text);
            rn_parser_destroy(&p);
            return NULL;
        }
    }
    rn_parser_init_t none = {0};
    if (ops->init(p, in ? in : &none, &p->state, err)) {
        rn_parser_destroy(&p);
        return NULL;
    }
    return p;
}

void rn_parser_destroy(rn_parser_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_parser_t *p = *self_p;
    if (p->state)
        p->ops->destroy(p->state);
    json_decref(p->tools);
    free(p);
    *self_p = NULL;
}

/* Runs one step of the implementation and closes this push's calls array. */
static cr_status_t step(rn_parser_t *p, const char *text, size_t len, bool final,
                        const rn_parser_out_t *out, cr_err_t *err)
{
    p->calls_mark = out->calls->len;
    cr_status_t st = final ? p->ops->finish(p, p->state, out, err)
                           : p->ops->push(p, p->state, text, len, out, err);
    if (!st && out->calls->len > p->calls_mark)
        st = cr_buf_putc(out->calls, ']');
    if (st && err && !err->status)
        cr_err_set(err, st, "%s parser: %s", p->ops->name, cr_status_str(st));
    return st;
}

cr_status_t rn_parser_push(rn_parser_t *p, const char *text, size_t len,
                           const rn_parser_out_t *out, cr_err_t *err)
{
    return len ? step(p, text, len, false, out, err) : CR_OK;
}

cr_status_t rn_parser_finish(rn_parser_t *p, const rn_parser_out_t *out,
                             cr_err_t *err)
{
    return step(p, NULL, 0, true, out, err);
}

int rn_parser_tool_calls(const rn_parser_t *p)
{
    return p->n_calls;
}

const char *const *rn_parser_stops(const char *name)
{
    static const char *const none[] = {NULL};
    const rn_parser_ops_t *ops = find(name);
    return ops && ops->stops ? ops->stops : none;
}

const json_t *rn_parser_tools(const rn_parser_t *p)
{
    return p->tools;
}

cr_status_t rn_parser_emit_call(rn_parser_t *p, const rn_parser_out_t *out,
                                const char *name, size_t name_len,
                                const json_t *args)
{
    cr_status_t st = rn_output_call_json(out->calls, p->calls_mark, &p->rng,
                                         p->n_calls, name, name_len, args);
    if (!st)
        p->n_calls++;
    return st;
}
