/* template_exec.c: executing a parsed template over values, with Go's
 * text/template semantics (missingkey=zero): variable scopes that end at
 * {{end}}, pipelines whose previous value becomes the last argument, lazy
 * and/or, range over lists, maps and ints, template calls with a fresh
 * variable scope.
 *
 * Every evaluation returns a new value reference (or NULL after recording
 * an error in the state); nothing is cached between runs, so one parsed
 * template may be executed by several threads at once. Untrusted: the step
 * budget, the depth bound and the output buffer's cap bound every run. */
#include "lib/prelude.h"
#include "services/runner/template/template_impl.h"

#include <time.h>

enum { WALK_OK = 0, WALK_ERR, WALK_BREAK, WALK_CONTINUE };

rn_val_t *rn_tmpl_exec_fail(exec_t *x, cr_status_t st, const char *fmt, ...)
{
    if (x->st)
        return NULL;
    char msg[CR_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    x->st = st;
    if (!x->at) {
        cr_err_set(x->err, st, "template: %s: %s", x->name, msg);
        return NULL;
    }
    int line, col;
    rn_tmpl_line_col(x->t, x->at->pos, &line, &col);
    cr_buf_t ctx;
    cr_buf_init(&ctx, 4096);
    rn_tmpl_node_to_string(x->at, &ctx);
    const char *c = ctx.data ? ctx.data : "";
    /* Long nodes are cut so the message itself survives. */
    if (ctx.len > 120)
        cr_err_set(x->err, st, "template: :%d:%d: executing \"%s\" at <%.120s...>: %s", line, col,
                   x->name, c, msg);
    else
        cr_err_set(x->err, st, "template: :%d:%d: executing \"%s\" at <%s>: %s", line, col,
                   x->name, c, msg);
    cr_buf_free(&ctx);
    return NULL;
}

static bool step(exec_t *x)
{
    if (++x->steps > x->max_steps) {
        rn_tmpl_exec_fail(x, CR_E_TOO_LARGE, "template execution exceeded %" PRIu64 " steps",
                          x->max_steps);
        return false;
    }
    return true;
}

static bool enter(exec_t *x)
{
    if (++x->depth > RN_TMPL_MAX_EXEC_DEPTH) {
        rn_tmpl_exec_fail(x, CR_E_TOO_LARGE, "exceeded maximum template depth (%d)",
                          RN_TMPL_MAX_EXEC_DEPTH);
        return false;
    }
    return true;
}

static void leave(exec_t *x)
{
    x->depth--;
}

/* Records what the last append wrote, from offset `from` to the end. */
static bool out_span(exec_t *x, size_t from, bool trusted)
{
    if (!x->spans || x->out->len <= from)
        return true;
    cr_status_t st = rn_tmpl_spans_add(x->spans, from, x->out->len - from, trusted);
    if (st) {
        rn_tmpl_exec_fail(x, st, st == CR_E_NOMEM ? "out of memory" : "output spans out of order");
        return false;
    }
    return true;
}

static bool out_append(exec_t *x, cr_status_t st)
{
    if (!st)
        return true;
    if (st == CR_E_TOO_LARGE)
        rn_tmpl_exec_fail(x, st, "template output exceeds %zu bytes", x->out->max_bytes);
    else if (st == CR_E_NOMEM)
        rn_tmpl_exec_fail(x, st, "out of memory");
    else
        rn_tmpl_exec_fail(x, st, "cannot print value");
    return false;
}

/* ---- variables ---- */

static bool var_push(exec_t *x, const char *name, rn_val_t *v)
{
    if (x->n_vars == x->cap_vars) {
        size_t cap = x->cap_vars ? x->cap_vars * 2 : 16;
        exec_var_t *p = realloc(x->vars, cap * sizeof *p);
        if (!p) {
            rn_tmpl_exec_fail(x, CR_E_NOMEM, "out of memory");
            return false;
        }
        x->vars = p;
        x->cap_vars = cap;
    }
    x->vars[x->n_vars].name = name;
    x->vars[x->n_vars].val = rn_val_ref(v);
    x->n_vars++;
    return true;
}

static void var_pop(exec_t *x, size_t mark)
{
    while (x->n_vars > mark) {
        x->n_vars--;
        rn_val_destroy(&x->vars[x->n_vars].val);
    }
}

static bool var_set(exec_t *x, const char *name, rn_val_t *v)
{
    for (size_t i = x->n_vars; i-- > 0;) {
        if (!strcmp(x->vars[i].name, name)) {
            rn_val_t *old = x->vars[i].val;
            x->vars[i].val = rn_val_ref(v);
            rn_val_destroy(&old);
            return true;
        }
    }
    rn_tmpl_exec_fail(x, CR_E_INVALID, "undefined variable: %s", name);
    return false;
}

/* Sets the n-th variable from the top (1 = top). */
static void var_set_top(exec_t *x, size_t n, rn_val_t *v)
{
    exec_var_t *slot = &x->vars[x->n_vars - n];
    rn_val_t *old = slot->val;
    slot->val = rn_val_ref(v);
    rn_val_destroy(&old);
}

static rn_val_t *var_value(exec_t *x, const char *name)
{
    for (size_t i = x->n_vars; i-- > 0;)
        if (!strcmp(x->vars[i].name, name))
            return rn_val_ref(x->vars[i].val);
    return rn_tmpl_exec_fail(x, CR_E_INVALID, "undefined variable: %s", name);
}

/* ---- evaluation ---- */

static rn_val_t *eval_pipeline(exec_t *x, rn_val_t *dot, const tnode_t *pipe);
static rn_val_t *eval_arg(exec_t *x, rn_val_t *dot, const tnode_t *n);
static int walk(exec_t *x, rn_val_t *dot, const tnode_t *n);

/* Whether a command has arguments beyond its first word, or a piped-in
 * final value. */
static bool has_args(size_t n_args, rn_val_t *final)
{
    return n_args > 1 || final != NULL;
}

static rn_val_t *not_a_function(exec_t *x, const tnode_t *first, size_t n_args, rn_val_t *final)
{
    if (has_args(n_args, final)) {
        cr_buf_t b;
        cr_buf_init(&b, 256);
        rn_tmpl_node_to_string(first, &b);
        rn_tmpl_exec_fail(x, CR_E_INVALID, "can't give argument to non-function %s",
                          b.data ? b.data : "");
        cr_buf_free(&b);
        return NULL;
    }
    return rn_val_nil(); /* sentinel: fine */
}

/* One field step. `via_map` says the receiver came out of a Go map (its
 * static type is interface {}), for Go's wording of errors. */
static rn_val_t *eval_field(exec_t *x, const char *name, rn_val_t *recv, bool via_map,
                            bool args, bool *out_via_map)
{
    *out_via_map = false;
    const char *typ = via_map ? "interface {}" : rn_val_type_name(recv);
    switch (recv->kind) {
    case RN_VAL_NIL:
        return rn_tmpl_exec_fail(x, CR_E_INVALID, "nil pointer evaluating %s.%s", typ, name);
    case RN_VAL_STRUCT: {
        rn_val_t *v = rn_val_get(recv, name);
        if (!v)
            break;
        if (args)
            return rn_tmpl_exec_fail(x, CR_E_INVALID, "%s has arguments but cannot be invoked as function",
                                     name);
        return rn_val_ref(v);
    }
    case RN_VAL_MAP: {
        if (args)
            return rn_tmpl_exec_fail(x, CR_E_INVALID, "%s is not a method but has arguments", name);
        rn_val_t *v = rn_val_get(recv, name);
        *out_via_map = true;
        return rn_val_ref(v ? v : rn_val_nil()); /* missingkey=zero */
    }
    default:
        break;
    }
    return rn_tmpl_exec_fail(x, CR_E_INVALID, "can't evaluate field %s in type %s", name, typ);
}

/* Evaluates idents[0..n) on receiver; the last step sees the command's
 * arguments (an error for fields). A nil receiver at the start of the
 * chain yields nil (missingkey=zero on an absent value). */
static rn_val_t *eval_field_chain(exec_t *x, rn_val_t *recv, const char **idents, size_t n,
                                  bool args, bool via_map)
{
    if (recv->kind == RN_VAL_NIL && !via_map)
        return rn_val_ref(recv);
    rn_val_t *cur = rn_val_ref(recv);
    for (size_t i = 0; i < n; i++) {
        bool next_via_map = false;
        rn_val_t *v = eval_field(x, idents[i], cur, via_map, i + 1 == n && args, &next_via_map);
        rn_val_destroy(&cur);
        if (!v)
            return NULL;
        cur = v;
        via_map = next_via_map;
    }
    return cur;
}

static rn_val_t *literal(exec_t *x, const tnode_t *n)
{
    rn_val_t *v = NULL;
    switch (n->type) {
    case TN_BOOL:
        v = rn_val_bool_new(n->u.b);
        break;
    case TN_NUMBER:
        v = n->u.num.is_int ? rn_val_int_new(n->u.num.i) : rn_val_float_new(n->u.num.f);
        break;
    case TN_STRING:
        /* The template's own text: trusted like its literal text. */
        v = rn_val_trust(rn_val_strn_new(n->u.text.s, n->u.text.len));
        break;
    default:
        return rn_tmpl_exec_fail(x, CR_E_INTERNAL, "not a literal");
    }
    if (!v)
        return rn_tmpl_exec_fail(x, CR_E_NOMEM, "out of memory");
    return v;
}

/* Argument counts of the builtins: min and max (-1 = variadic). */
static const struct {
    int min, max;
} arity[TF__COUNT] = {
    [TF_AND] = {1, -1},          [TF_OR] = {1, -1},       [TF_NOT] = {1, 1},
    [TF_LEN] = {1, 1},           [TF_INDEX] = {1, -1},    [TF_SLICE] = {1, -1},
    [TF_EQ] = {1, -1},           [TF_NE] = {2, 2},        [TF_LT] = {2, 2},
    [TF_LE] = {2, 2},            [TF_GT] = {2, 2},        [TF_GE] = {2, 2},
    [TF_PRINT] = {0, -1},        [TF_PRINTF] = {1, -1},   [TF_PRINTLN] = {0, -1},
    [TF_HTML] = {0, -1},         [TF_JS] = {0, -1},       [TF_URLQUERY] = {0, -1},
    [TF_CALL] = {1, -1},         [TF_JSON] = {1, 1},      [TF_CURRENT_DATE] = {0, -1},
    [TF_YESTERDAY_DATE] = {0, -1}, [TF_TO_TS_TYPE] = {1, 1},
};

/* A function call: cmd args [1..n) plus final. */
static rn_val_t *eval_function(exec_t *x, rn_val_t *dot, const tnode_t *ident,
                               const tnode_t *cmd, const tnode_t *const *args, size_t n_args,
                               rn_val_t *final)
{
    tfunc_t f = ident->u.ident.fn;
    const char *name = ident->u.ident.name;
    size_t n_in = (n_args - 1) + (final ? 1 : 0);
    x->at = ident;
    if ((int)n_in < arity[f].min) {
        if (arity[f].max < 0)
            return rn_tmpl_exec_fail(x, CR_E_INVALID, "wrong number of args for %s: want at least %d got %zu",
                                     name, arity[f].min, n_in);
        return rn_tmpl_exec_fail(x, CR_E_INVALID, "wrong number of args for %s: want %d got %zu", name,
                                 arity[f].min, n_in);
    }
    if (arity[f].max >= 0 && (int)n_in > arity[f].max)
        return rn_tmpl_exec_fail(x, CR_E_INVALID, "wrong number of args for %s: want %d got %zu", name,
                                 arity[f].max, n_in);

    if (f == TF_AND || f == TF_OR) {
        /* Lazy: stop at the first false (and) or true (or) value and
         * return it; else return the last. */
        rn_val_t *v = NULL;
        for (size_t i = 1; i < n_args; i++) {
            rn_val_destroy(&v);
            v = eval_arg(x, dot, args[i]);
            if (!v)
                return NULL;
            if (rn_val_truth(v) == (f == TF_OR))
                return v;
        }
        if (final) {
            rn_val_destroy(&v);
            v = rn_val_ref(final);
        }
        return v;
    }

    rn_val_t *stack_argv[8];
    rn_val_t **argv = n_in <= CR_ARRAY_LEN(stack_argv) ? stack_argv : calloc(n_in, sizeof *argv);
    if (!argv)
        return rn_tmpl_exec_fail(x, CR_E_NOMEM, "out of memory");
    size_t k = 0;
    rn_val_t *result = NULL;
    for (size_t i = 1; i < n_args; i++) {
        argv[k] = eval_arg(x, dot, args[i]);
        if (!argv[k])
            goto out;
        k++;
    }
    if (final)
        argv[k++] = rn_val_ref(final);
    x->at = cmd;
    result = rn_tmpl_func_call(x, f, argv, k);
    /* A value the function made (only this call holds it) is trusted when
     * everything it was made from is; values handed through (index, a
     * map's element) keep their own mark. */
    if (result && result->refs == 1) {
        bool trusted = true;
        for (size_t i = 0; i < k; i++)
            trusted = trusted && rn_val_is_trusted(argv[i]);
        if (trusted)
            result->flags |= RN_VAL_F_TRUSTED;
        else
            result->flags &= ~(unsigned)RN_VAL_F_TRUSTED;
    }
out:
    for (size_t i = 0; i < k; i++)
        rn_val_destroy(&argv[i]);
    if (argv != stack_argv)
        free(argv);
    return result;
}

static rn_val_t *eval_chain(exec_t *x, rn_val_t *dot, const tnode_t *chain, bool args)
{
    x->at = chain;
    if (chain->u.chain.node->type == TN_NIL) {
        cr_buf_t b;
        cr_buf_init(&b, 256);
        rn_tmpl_node_to_string(chain, &b);
        rn_tmpl_exec_fail(x, CR_E_INVALID, "indirection through explicit nil in %s", b.data ? b.data : "");
        cr_buf_free(&b);
        return NULL;
    }
    rn_val_t *recv = eval_arg(x, dot, chain->u.chain.node);
    if (!recv)
        return NULL;
    x->at = chain;
    /* A pipeline's value has been dug out of its interface. */
    rn_val_t *v = eval_field_chain(x, recv, chain->u.chain.idents, chain->u.chain.n, args, false);
    rn_val_destroy(&recv);
    return v;
}

static rn_val_t *eval_var_node(exec_t *x, const tnode_t *n, bool args)
{
    x->at = n;
    rn_val_t *v = var_value(x, n->u.field.idents[0]);
    if (!v || n->u.field.n == 1)
        return v;
    rn_val_t *r = eval_field_chain(x, v, n->u.field.idents + 1, n->u.field.n - 1, args, false);
    rn_val_destroy(&v);
    return r;
}

static rn_val_t *eval_command(exec_t *x, rn_val_t *dot, const tnode_t *cmd, rn_val_t *final)
{
    if (!step(x))
        return NULL;
    const tnode_t *first = cmd->u.cmd.args[0];
    size_t n = cmd->u.cmd.n;
    switch (first->type) {
    case TN_FIELD:
        x->at = first;
        return eval_field_chain(x, dot, first->u.field.idents, first->u.field.n,
                                has_args(n, final), x->dot_iface);
    case TN_CHAIN:
        return eval_chain(x, dot, first, has_args(n, final));
    case TN_IDENT:
        return eval_function(x, dot, first, cmd, (const tnode_t *const *)cmd->u.cmd.args, n, final);
    case TN_PIPE:
        x->at = first;
        if (!not_a_function(x, first, n, final))
            return NULL;
        return eval_pipeline(x, dot, first);
    case TN_VAR:
        return eval_var_node(x, first, has_args(n, final));
    default:
        break;
    }
    x->at = first;
    if (!not_a_function(x, first, n, final))
        return NULL;
    switch (first->type) {
    case TN_DOT:
        return rn_val_ref(dot);
    case TN_NIL:
        return rn_tmpl_exec_fail(x, CR_E_INVALID, "nil is not a command");
    case TN_BOOL:
    case TN_NUMBER:
    case TN_STRING:
        return literal(x, first);
    default:
        return rn_tmpl_exec_fail(x, CR_E_INVALID, "can't evaluate command");
    }
}

static rn_val_t *eval_arg(exec_t *x, rn_val_t *dot, const tnode_t *n)
{
    x->at = n;
    switch (n->type) {
    case TN_DOT:
        return rn_val_ref(dot);
    case TN_NIL:
        return rn_val_nil();
    case TN_FIELD:
        return eval_field_chain(x, dot, n->u.field.idents, n->u.field.n, false, x->dot_iface);
    case TN_VAR:
        return eval_var_node(x, n, false);
    case TN_PIPE:
        return eval_pipeline(x, dot, n);
    case TN_IDENT: {
        const tnode_t *one[1] = {n};
        return eval_function(x, dot, n, n, one, 1, NULL);
    }
    case TN_CHAIN:
        return eval_chain(x, dot, n, false);
    case TN_BOOL:
    case TN_NUMBER:
    case TN_STRING:
        return literal(x, n);
    default:
        return rn_tmpl_exec_fail(x, CR_E_INVALID, "can't handle argument");
    }
}

/* Runs a pipeline; declared variables are pushed (or assigned) and stay
 * until the caller pops to its mark. */
static rn_val_t *eval_pipeline(exec_t *x, rn_val_t *dot, const tnode_t *pipe)
{
    if (!pipe)
        return rn_val_nil();
    if (!enter(x))
        return NULL;
    rn_val_t *v = NULL;
    for (size_t i = 0; i < pipe->u.pipe.n_cmds; i++) {
        rn_val_t *next = eval_command(x, dot, pipe->u.pipe.cmds[i], v);
        rn_val_destroy(&v);
        if (!next)
            goto out;
        v = next;
    }
    for (size_t i = 0; i < pipe->u.pipe.n_decl; i++) {
        const char *name = pipe->u.pipe.decl[i]->u.field.idents[0];
        x->at = pipe->u.pipe.decl[i];
        bool ok = pipe->u.pipe.is_assign ? var_set(x, name, v) : var_push(x, name, v);
        if (!ok) {
            rn_val_destroy(&v);
            goto out;
        }
    }
out:
    leave(x);
    return v;
}

/* ---- walking ---- */

static int walk_list(exec_t *x, rn_val_t *dot, const tnode_t *list)
{
    if (!list)
        return WALK_OK;
    for (size_t i = 0; i < list->u.list.n; i++) {
        int r = walk(x, dot, list->u.list.nodes[i]);
        if (r)
            return r;
    }
    return WALK_OK;
}

static int walk_if_with(exec_t *x, rn_val_t *dot, const tnode_t *n)
{
    size_t mark = x->n_vars;
    int r = WALK_ERR;
    rn_val_t *v = eval_pipeline(x, dot, n->u.branch.pipe);
    if (!v)
        goto out;
    if (rn_val_truth(v)) {
        bool iface = x->dot_iface;
        if (n->type == TN_WITH)
            x->dot_iface = false; /* a pipeline's value is concrete */
        r = walk_list(x, n->type == TN_WITH ? v : dot, n->u.branch.list);
        x->dot_iface = iface;
    } else {
        r = walk_list(x, dot, n->u.branch.else_list);
    }
out:
    rn_val_destroy(&v);
    var_pop(x, mark);
    return r;
}

/* One range iteration: sets the declared variables, walks the body. */
static int range_once(exec_t *x, const tnode_t *n, size_t mark, rn_val_t *index, rn_val_t *elem)
{
    const tnode_t *pipe = n->u.branch.pipe;
    size_t nd = pipe->u.pipe.n_decl;
    if (nd > 0) {
        if (pipe->u.pipe.is_assign) {
            if (!var_set(x, pipe->u.pipe.decl[0]->u.field.idents[0], nd > 1 ? index : elem))
                return WALK_ERR;
            if (nd > 1 && !var_set(x, pipe->u.pipe.decl[1]->u.field.idents[0], elem))
                return WALK_ERR;
        } else {
            /* The top variable (lexically the last) gets the element, the
             * one below it the index. */
            var_set_top(x, 1, elem);
            if (nd > 1)
                var_set_top(x, 2, index);
        }
    }
    bool iface = x->dot_iface;
    /* Elements of Go's []any and map[string]any are interface values;
     * lists of structs are typed slices. */
    x->dot_iface = elem->kind != RN_VAL_STRUCT && elem != index; /* ints: elem == index */
    int r = walk_list(x, elem, n->u.branch.list);
    x->dot_iface = iface;
    var_pop(x, mark);
    if (r == WALK_CONTINUE)
        r = WALK_OK;
    return r;
}

/* The index value for iteration i: the previous one reused in place when
 * nothing else kept it (no allocation per iteration), else a new one. */
static rn_val_t *range_index(exec_t *x, rn_val_t **idx, int64_t i)
{
    if (*idx && (*idx)->refs == 1) {
        (*idx)->u.i = i;
        return *idx;
    }
    rn_val_destroy(idx);
    *idx = rn_val_int_new(i);
    if (!*idx)
        rn_tmpl_exec_fail(x, CR_E_NOMEM, "out of memory");
    return *idx;
}

static int walk_range(exec_t *x, rn_val_t *dot, const tnode_t *n)
{
    size_t outer_mark = x->n_vars;
    int r = WALK_ERR;
    rn_val_t *idx = NULL;
    rn_val_t *v = eval_pipeline(x, dot, n->u.branch.pipe);
    if (!v)
        goto out;
    size_t mark = x->n_vars;
    bool ran = false;
    switch (v->kind) {
    case RN_VAL_LIST:
        for (size_t i = 0; i < v->u.list.len; i++) {
            if (!step(x) || !range_index(x, &idx, (int64_t)i))
                goto out;
            r = range_once(x, n, mark, idx, v->u.list.items[i]);
            ran = true;
            if (r == WALK_BREAK)
                break;
            if (r)
                goto out;
        }
        break;
    case RN_VAL_MAP: {
        size_t len = v->u.map.len;
        if (len == 0)
            break;
        size_t *order = malloc(len * sizeof *order);
        if (!order) {
            rn_tmpl_exec_fail(x, CR_E_NOMEM, "out of memory");
            goto out;
        }
        rn_val_map_order(v, order);
        for (size_t i = 0; i < len; i++) {
            if (!step(x)) {
                r = WALK_ERR;
                break;
            }
            const val_entry_t *e = &v->u.map.ents[order[i]];
            rn_val_t *key = rn_val_str_new(e->key);
            if (!key) {
                rn_tmpl_exec_fail(x, CR_E_NOMEM, "out of memory");
                r = WALK_ERR;
                break;
            }
            r = range_once(x, n, mark, key, e->val);
            rn_val_destroy(&key);
            ran = true;
            if (r)
                break;
        }
        free(order);
        if (r == WALK_BREAK)
            r = WALK_OK;
        if (r)
            goto out;
        break;
    }
    case RN_VAL_INT:
        if (n->u.branch.pipe->u.pipe.n_decl > 1) {
            x->at = n->u.branch.pipe;
            rn_tmpl_exec_fail(x, CR_E_INVALID, "can't use %" PRId64 " to iterate over more than one variable",
                              v->u.i);
            goto out;
        }
        for (int64_t i = 0; i < v->u.i; i++) {
            if (!step(x) || !range_index(x, &idx, i))
                goto out;
            r = range_once(x, n, mark, idx, idx);
            ran = true;
            if (r == WALK_BREAK)
                break;
            if (r)
                goto out;
        }
        break;
    case RN_VAL_NIL:
        break; /* a missing value ranges over nothing */
    default: {
        cr_buf_t b;
        cr_buf_init(&b, 200);
        rn_val_print_depth(v, &b, 1);
        x->at = n->u.branch.pipe;
        rn_tmpl_exec_fail(x, CR_E_INVALID, "range can't iterate over %s", b.data ? b.data : "");
        cr_buf_free(&b);
        goto out;
    }
    }
    r = WALK_OK;
    if (!ran && n->u.branch.else_list)
        r = walk_list(x, dot, n->u.branch.else_list);
out:
    rn_val_destroy(&idx);
    rn_val_destroy(&v);
    var_pop(x, outer_mark);
    return x->st ? WALK_ERR : r;
}

static int walk_template(exec_t *x, rn_val_t *dot, const tnode_t *n)
{
    const tdef_t *def = NULL;
    for (size_t i = 0; i < x->t->n_defs; i++)
        if (!strcmp(x->t->defs[i].name, n->u.tmpl.name))
            def = &x->t->defs[i];
    x->at = n;
    if (!def) {
        rn_tmpl_exec_fail(x, CR_E_INVALID, "template \"%s\" not defined", n->u.tmpl.name);
        return WALK_ERR;
    }
    rn_val_t *v = eval_pipeline(x, dot, n->u.tmpl.pipe);
    if (!v)
        return WALK_ERR;
    /* A fresh scope with only $ = the new dot. */
    exec_var_t *saved = x->vars;
    size_t saved_n = x->n_vars, saved_cap = x->cap_vars;
    const char *saved_name = x->name;
    x->vars = NULL;
    x->n_vars = x->cap_vars = 0;
    x->name = def->name;
    bool iface = x->dot_iface;
    x->dot_iface = false;
    int r = WALK_ERR;
    if (var_push(x, "$", v))
        r = walk_list(x, v, def->body);
    x->dot_iface = iface;
    var_pop(x, 0);
    free(x->vars);
    x->vars = saved;
    x->n_vars = saved_n;
    x->cap_vars = saved_cap;
    if (!x->st)
        x->name = saved_name;
    rn_val_destroy(&v);
    return r == WALK_ERR ? WALK_ERR : WALK_OK;
}

static int walk(exec_t *x, rn_val_t *dot, const tnode_t *n)
{
    if (!step(x))
        return WALK_ERR;
    x->at = n;
    switch (n->type) {
    case TN_TEXT: {
        size_t from = x->out->len;
        bool ok = out_append(x, cr_buf_append(x->out, n->u.text.s, n->u.text.len));
        /* On error the buffer may hold part of it: record that too. */
        return out_span(x, from, true) && ok ? WALK_OK : WALK_ERR;
    }
    case TN_ACTION: {
        rn_val_t *v = eval_pipeline(x, dot, n->u.action.pipe);
        if (!v)
            return WALK_ERR;
        int r = WALK_OK;
        if (n->u.action.pipe->u.pipe.n_decl == 0) {
            x->at = n;
            size_t from = x->out->len;
            bool ok = out_append(x, rn_val_print_depth(v, x->out, 0));
            if (!out_span(x, from, rn_val_is_trusted(v)) || !ok)
                r = WALK_ERR;
        }
        rn_val_destroy(&v);
        return r;
    }
    case TN_LIST: {
        if (!enter(x))
            return WALK_ERR;
        int r = walk_list(x, dot, n);
        leave(x);
        return r;
    }
    case TN_IF:
    case TN_WITH:
    case TN_RANGE:
    case TN_TEMPLATE: {
        if (!enter(x))
            return WALK_ERR;
        int r = n->type == TN_RANGE      ? walk_range(x, dot, n)
                : n->type == TN_TEMPLATE ? walk_template(x, dot, n)
                                         : walk_if_with(x, dot, n);
        leave(x);
        return r;
    }
    case TN_BREAK:
        return WALK_BREAK;
    case TN_CONTINUE:
        return WALK_CONTINUE;
    default:
        rn_tmpl_exec_fail(x, CR_E_INTERNAL, "unknown node");
        return WALK_ERR;
    }
}

cr_status_t rn_tmpl_spans_add(rn_tmpl_spans_t *s, size_t offset, size_t len, bool trusted)
{
    if (!len)
        return CR_OK;
    if (s->n > 0) {
        rn_tmpl_span_t *last = &s->v[s->n - 1];
        size_t end = last->offset + last->len;
        if (offset < end)
            return CR_E_INVALID;
        if (offset == end && last->trusted == trusted) {
            last->len += len;
            return CR_OK;
        }
    }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        rn_tmpl_span_t *p = realloc(s->v, cap * sizeof *p);
        if (!p)
            return CR_E_NOMEM;
        s->v = p;
        s->cap = cap;
    }
    s->v[s->n++] = (rn_tmpl_span_t){offset, len, trusted};
    return CR_OK;
}

void rn_tmpl_spans_free(rn_tmpl_spans_t *s)
{
    if (!s)
        return;
    free(s->v);
    memset(s, 0, sizeof *s);
}

cr_status_t rn_tmpl_exec(const rn_tmpl_t *t, rn_val_t *data, const rn_tmpl_opts_t *opts,
                         cr_buf_t *out, cr_err_t *err)
{
    if (err)
        cr_err_clear(err);
    if (!t || !out)
        return cr_err_set(err, CR_E_INVALID, "template: nothing to execute");
    exec_t x = {
        .t = t,
        .name = "",
        .out = out,
        .max_steps = opts && opts->max_steps ? opts->max_steps : RN_TMPL_DEFAULT_STEPS,
        .now_unix = opts && opts->now_unix ? opts->now_unix : (int64_t)time(NULL),
        .spans = opts ? opts->spans : NULL,
        .err = err,
    };
    rn_val_t *dot = data ? data : rn_val_nil();
    const tnode_t *root = opts && opts->cut_after_response ? t->cut_root : t->root;
    if (var_push(&x, "$", dot))
        walk(&x, dot, root);
    var_pop(&x, 0);
    free(x.vars);
    return x.st;
}
