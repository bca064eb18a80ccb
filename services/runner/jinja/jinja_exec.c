/* jinja_exec.c: runs a parsed template: scopes, statements, expressions,
 * operators with Python's semantics, macro and caller calls, and the
 * budgets (steps, depth, output, memory) that keep a hostile template from
 * hanging or crashing the runner. Also the module's entry points
 * (jj_template_new, jj_render).
 *
 * Scoping follows Jinja2: a for loop body (each iteration) and a macro
 * call get a scope of their own, `if` does not; `set` writes the innermost
 * scope, so only a namespace() carries state out of a loop; reads walk
 * out to the render's context and then the globals. */
#include "services/runner/jinja/jinja_impl.h"

#include <math.h>

#define TEMPLATE_ARENA_BYTES ((size_t)64 << 20)

struct jj_template {
    jj_arena_t arena;
    jj_jump_t jump;
    jj_node_t *root;
};

struct jj_scope {
    jj_dict_t *vars; /* NULL until the first assignment */
    jj_scope_t *parent;
    bool captured;   /* a macro or caller defined here keeps it alive */
};

typedef enum flow { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE } flow_t;

void jj_limits_default(jj_limits_t *limits)
{
    limits->max_steps = 5u * 1000 * 1000;
    limits->max_output_bytes = (size_t)16 << 20;
    limits->max_memory_bytes = (size_t)512 << 20;
    limits->max_depth = 600;
}

/* ---- budgets and scopes ---------------------------------------------- */

static void count_step(jj_rt_t *rt)
{
    if (++rt->steps > rt->limits.max_steps)
        jj_throw(&rt->jump, CR_E_TOO_LARGE,
                 "BudgetError: the template ran more than %" PRIu64 " steps",
                 rt->limits.max_steps);
}

static void enter(jj_rt_t *rt)
{
    if (++rt->steps > rt->limits.max_steps)
        jj_throw(&rt->jump, CR_E_TOO_LARGE,
                 "BudgetError: the template ran more than %" PRIu64 " steps",
                 rt->limits.max_steps);
    if (++rt->depth > rt->limits.max_depth)
        jj_throw(&rt->jump, CR_E_TOO_LARGE,
                 "RecursionError: the template nested deeper than %d levels",
                 rt->limits.max_depth);
}

static jj_scope_t *scope_new(jj_rt_t *rt, jj_scope_t *parent)
{
    jj_scope_t *s = jj_alloc(&rt->arena, sizeof *s);
    s->parent = parent;
    return s;
}

/* A scope slot emptied for reuse: an undefined without a message, which
 * nothing else makes. */
static const jj_value_t UNSET = {.kind = JJ_UNDEF, .u.s = NULL};

static bool is_unset(const jj_value_t *v)
{
    return v->kind == JJ_UNDEF && v->u.s == NULL;
}

/* A for loop's scope for its next item: the last one emptied and reused
 * unless a macro defined in it may still read it, so a long loop does not
 * spend memory per iteration. */
static jj_scope_t *iteration_scope(jj_rt_t *rt, jj_scope_t *last, jj_scope_t *parent)
{
    if (!last || last->captured)
        return scope_new(rt, parent);
    /* Slots stay (their keys are reused) but read as unset. */
    for (size_t i = 0; last->vars && i < last->vars->n; i++)
        last->vars->vals[i] = UNSET;
    return last;
}

static void scope_set(jj_rt_t *rt, jj_scope_t *s, const char *name, jj_value_t v)
{
    if (!s->vars)
        s->vars = jj_dict_new(rt, JJ_DICT).u.d;
    jj_value_t *slot = jj_dict_find_str(s->vars, name);
    if (slot) {
        *slot = v;
        return;
    }
    /* Names come from the syntax tree or the context, which outlive the
     * render: the key borrows them. */
    jj_str_t *key = jj_alloc(&rt->arena, sizeof *key);
    key->s = name;
    key->len = strlen(name);
    jj_dict_set(rt, s->vars, jj_str_value(key), v);
}

static jj_value_t lookup(jj_rt_t *rt, jj_scope_t *s, const char *name)
{
    for (; s; s = s->parent) {
        jj_value_t *v = s->vars ? jj_dict_find_str(s->vars, name) : NULL;
        if (v && !is_unset(v))
            return *v;
    }
    jj_value_t g;
    if (jj_global_lookup(rt, name, &g))
        return g;
    return jj_undef(rt, "UndefinedError: '%s' is undefined", name);
}

/* ---- operators ------------------------------------------------------- */

static const char *op_text(jj_op_t op)
{
    static const char *const text[] = {"+",  "-",  "*", "/",  "//", "%", "**", "~",
                                       "==", "!=", "<", "<=", ">",  ">=", "in", "not in"};
    return text[op];
}

_Noreturn static void unsupported(jj_rt_t *rt, jj_op_t op, jj_value_t a, jj_value_t b)
{
    jj_fail(rt, "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op_text(op),
            jj_type_name(a), jj_type_name(b));
}

static int64_t int_of(jj_value_t v)
{
    return v.kind == JJ_INT ? v.u.i : v.u.b;
}

static jj_value_t repeat(jj_rt_t *rt, jj_value_t seq, int64_t times)
{
    if (times < 0)
        times = 0;
    if (seq.kind == JJ_STR) {
        if (seq.u.s->len && (uint64_t)times > rt->limits.max_output_bytes / seq.u.s->len)
            jj_throw(&rt->jump, CR_E_TOO_LARGE, "MemoryError: string repetition too large");
        jj_sb_t sb;
        jj_sb_init(&sb, rt);
        for (int64_t i = 0; i < times; i++)
            jj_sb_append_str(&sb, seq.u.s, 0, seq.u.s->len);
        return jj_str_value(jj_sb_finish(&sb));
    }
    if (seq.u.l->n && (uint64_t)times > rt->limits.max_steps / seq.u.l->n)
        jj_throw(&rt->jump, CR_E_TOO_LARGE, "MemoryError: list repetition too large");
    jj_value_t out = jj_list_new(rt, seq.u.l->flavor);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq.u.l->n; k++)
            jj_list_push(rt, out.u.l, seq.u.l->items[k]);
    return out;
}

/* Appends s; into a markup result a plain string goes HTML-escaped. */
static void append_maybe_escaped(jj_sb_t *sb, const jj_str_t *s, bool markup)
{
    if (!markup || s->markup)
        jj_sb_append_str(sb, s, 0, s->len);
    else
        jj_sb_append_escaped(sb, s);
}

static jj_value_t arith(jj_rt_t *rt, jj_op_t op, jj_value_t a, jj_value_t b)
{
    if (a.kind == JJ_UNDEF)
        jj_undef_fail(rt, a);
    if (b.kind == JJ_UNDEF)
        jj_undef_fail(rt, b);
    bool nums = jj_is_number(a) && jj_is_number(b);
    bool ints = nums && a.kind != JJ_FLOAT && b.kind != JJ_FLOAT;
    int64_t r;
    switch (op) {
    case JJ_OP_ADD:
        if (ints) {
            if (__builtin_add_overflow(int_of(a), int_of(b), &r))
                jj_fail(rt, "OverflowError: integer overflow");
            return jj_int(r);
        }
        if (nums)
            return jj_float(jj_as_double(a) + jj_as_double(b));
        if (a.kind == JJ_STR && b.kind == JJ_STR) {
            bool markup = a.u.s->markup || b.u.s->markup;
            jj_sb_t sb;
            jj_sb_init(&sb, rt);
            append_maybe_escaped(&sb, a.u.s, markup);
            append_maybe_escaped(&sb, b.u.s, markup);
            jj_str_t *sum = jj_sb_finish(&sb);
            sum->markup = markup;
            return jj_str_value(sum);
        }
        if (a.kind == JJ_LIST && b.kind == JJ_LIST && a.u.l->flavor == b.u.l->flavor &&
            a.u.l->flavor != JJ_LIST_GENERATOR) {
            jj_value_t out = jj_list_new(rt, a.u.l->flavor);
            for (size_t i = 0; i < a.u.l->n; i++)
                jj_list_push(rt, out.u.l, a.u.l->items[i]);
            for (size_t i = 0; i < b.u.l->n; i++)
                jj_list_push(rt, out.u.l, b.u.l->items[i]);
            return out;
        }
        if (a.kind == JJ_STR || a.kind == JJ_LIST)
            jj_fail(rt, "TypeError: can only concatenate %s (not \"%s\") to %s", jj_type_name(a),
                    jj_type_name(b), jj_type_name(a));
        unsupported(rt, op, a, b);
    case JJ_OP_SUB:
        if (ints) {
            if (__builtin_sub_overflow(int_of(a), int_of(b), &r))
                jj_fail(rt, "OverflowError: integer overflow");
            return jj_int(r);
        }
        if (nums)
            return jj_float(jj_as_double(a) - jj_as_double(b));
        unsupported(rt, op, a, b);
    case JJ_OP_MUL:
        if (ints) {
            if (__builtin_mul_overflow(int_of(a), int_of(b), &r))
                jj_fail(rt, "OverflowError: integer overflow");
            return jj_int(r);
        }
        if (nums)
            return jj_float(jj_as_double(a) * jj_as_double(b));
        if ((a.kind == JJ_STR || a.kind == JJ_LIST) && (b.kind == JJ_INT || b.kind == JJ_BOOL))
            return repeat(rt, a, int_of(b));
        if ((b.kind == JJ_STR || b.kind == JJ_LIST) && (a.kind == JJ_INT || a.kind == JJ_BOOL))
            return repeat(rt, b, int_of(a));
        unsupported(rt, op, a, b);
    case JJ_OP_DIV:
        if (!nums)
            unsupported(rt, op, a, b);
        if (jj_as_double(b) == 0.0)
            jj_fail(rt, "ZeroDivisionError: division by zero");
        return jj_float(jj_as_double(a) / jj_as_double(b));
    case JJ_OP_FLOORDIV:
    case JJ_OP_MOD:
        if (!nums) {
            if (op == JJ_OP_MOD && a.kind == JJ_STR) {
                bool tuple = b.kind == JJ_LIST && b.u.l->flavor == JJ_LIST_TUPLE;
                return jj_str_format(rt, a.u.s, tuple ? b.u.l->items : &b, tuple ? b.u.l->n : 1);
            }
            unsupported(rt, op, a, b);
        }
        if (ints) {
            int64_t x = int_of(a), y = int_of(b);
            if (y == 0)
                jj_fail(rt, "ZeroDivisionError: integer division or modulo by zero");
            if (x == INT64_MIN && y == -1)
                return op == JJ_OP_MOD ? jj_int(0) : (jj_fail(rt, "OverflowError: integer overflow"), jj_none());
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { /* Python floors */
                q--;
                m += y;
            }
            return jj_int(op == JJ_OP_MOD ? m : q);
        } else {
            double x = jj_as_double(a), y = jj_as_double(b);
            if (y == 0.0)
                jj_fail(rt, "ZeroDivisionError: float modulo");
            double m = fmod(x, y);
            if (m != 0.0 && ((m < 0) != (y < 0)))
                m += y;
            return jj_float(op == JJ_OP_MOD ? m : floor((x - m) / y + 0.5));
        }
    case JJ_OP_POW:
        if (!nums)
            unsupported(rt, op, a, b);
        if (ints && int_of(b) >= 0) {
            int64_t base = int_of(a), e = int_of(b), acc = 1;
            while (e-- > 0)
                if (__builtin_mul_overflow(acc, base, &acc))
                    jj_fail(rt, "OverflowError: integer overflow");
                else if (acc == 0 || acc == 1)
                    break;
            return jj_int(acc);
        }
        return jj_float(pow(jj_as_double(a), jj_as_double(b)));
    default: break;
    }
    unsupported(rt, op, a, b);
}

static jj_value_t binop(jj_rt_t *rt, jj_op_t op, jj_value_t a, jj_value_t b)
{
    switch (op) {
    case JJ_OP_CONCAT: {
        jj_sb_t sb;
        jj_sb_init(&sb, rt);
        jj_write_str(&sb, a);
        jj_write_str(&sb, b);
        return jj_str_value(jj_sb_finish(&sb));
    }
    case JJ_OP_EQ: return jj_bool(jj_equal(a, b));
    case JJ_OP_NE: return jj_bool(!jj_equal(a, b));
    case JJ_OP_LT: return jj_bool(jj_compare(rt, a, b) < 0);
    case JJ_OP_LE: return jj_bool(jj_compare(rt, a, b) <= 0);
    case JJ_OP_GT: return jj_bool(jj_compare(rt, a, b) > 0);
    case JJ_OP_GE: return jj_bool(jj_compare(rt, a, b) >= 0);
    case JJ_OP_IN: return jj_bool(jj_contains(rt, b, a));
    case JJ_OP_NOT_IN: return jj_bool(!jj_contains(rt, b, a));
    default: return arith(rt, op, a, b);
    }
}

/* ---- expressions ----------------------------------------------------- */

static jj_value_t eval(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *n);
static flow_t exec_body(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *body, jj_sb_t *out);

static void eval_args(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *n, jj_args_t *args)
{
    args->n_pos = n->n;
    args->pos = jj_alloc_array(&rt->arena, n->n + 1, sizeof *args->pos);
    for (size_t i = 0; i < n->n; i++)
        args->pos[i] = eval(rt, s, n->list[i]);
    args->n_kw = n->n2;
    args->kw_names = n->names;
    args->kw = jj_alloc_array(&rt->arena, n->n2 + 1, sizeof *args->kw);
    for (size_t i = 0; i < n->n2; i++)
        args->kw[i] = eval(rt, s, n->list2[i]);
}

/* Binds a macro's (or caller's) parameters in a fresh scope and renders
 * its body. */
static jj_value_t call_macro(jj_rt_t *rt, jj_func_t *fn, jj_args_t *args)
{
    const jj_node_t *def = fn->def;
    jj_scope_t *s = scope_new(rt, fn->closure);
    jj_value_t varargs = jj_list_new(rt, JJ_LIST_TUPLE);
    jj_value_t kwargs = jj_dict_new(rt, JJ_DICT);
    for (size_t i = 0; i < args->n_pos; i++) {
        if (i < def->n_names)
            scope_set(rt, s, def->names[i], args->pos[i]);
        else
            jj_list_push(rt, varargs.u.l, args->pos[i]);
    }
    for (size_t k = 0; k < args->n_kw; k++) {
        bool param = false;
        for (size_t i = 0; i < def->n_names && !param; i++)
            if (!strcmp(def->names[i], args->kw_names[k])) {
                if (i < args->n_pos)
                    jj_fail(rt, "TypeError: macro '%s' got multiple values for argument '%s'",
                            fn->name, def->names[i]);
                scope_set(rt, s, def->names[i], args->kw[k]);
                param = true;
            }
        if (!param)
            jj_dict_set(rt, kwargs.u.d, jj_cstr(rt, args->kw_names[k]), args->kw[k]);
    }
    for (size_t i = 0; i < def->n_names; i++) {
        if (s->vars && jj_dict_find_str(s->vars, def->names[i]))
            continue;
        if (def->list[i])
            scope_set(rt, s, def->names[i], eval(rt, s, def->list[i]));
        else
            scope_set(rt, s, def->names[i],
                      jj_undef(rt, "UndefinedError: parameter '%s' was not provided",
                               def->names[i]));
    }
    scope_set(rt, s, "varargs", varargs);
    scope_set(rt, s, "kwargs", kwargs);
    if (fn->caller.kind == JJ_FUNC)
        scope_set(rt, s, "caller", fn->caller);
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    exec_body(rt, s, def->b, &sb);
    return jj_str_value(jj_sb_finish(&sb));
}

jj_value_t jj_call(jj_rt_t *rt, jj_value_t fn, jj_args_t *args)
{
    if (fn.kind == JJ_UNDEF)
        jj_undef_fail(rt, fn);
    if (fn.kind != JJ_FUNC)
        jj_fail(rt, "TypeError: '%s' object is not callable", jj_type_name(fn));
    switch (fn.u.fn->kind) {
    case JJ_FN_MACRO: return call_macro(rt, fn.u.fn, args);
    case JJ_FN_GLOBAL: return jj_global_call(rt, fn.u.fn, args);
    default: return jj_method_call(rt, fn.u.fn, args);
    }
}

static jj_value_t make_macro(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *def, const char *name)
{
    jj_func_t *fn = jj_alloc(&rt->arena, sizeof *fn);
    fn->kind = JJ_FN_MACRO;
    fn->def = def;
    fn->closure = s;
    fn->name = name;
    s->captured = true;
    return (jj_value_t){.kind = JJ_FUNC, .u.fn = fn};
}

static jj_value_t eval(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *n)
{
    enter(rt);
    jj_value_t v;
    switch (n->kind) {
    case JJ_N_LIT: v = n->lit; break;
    case JJ_N_NAME: v = lookup(rt, s, n->name); break;
    case JJ_N_GETATTR: v = jj_getattr(rt, eval(rt, s, n->a), n->name); break;
    case JJ_N_GETITEM: {
        jj_value_t obj = eval(rt, s, n->a);
        v = jj_getitem(rt, obj, eval(rt, s, n->b));
        break;
    }
    case JJ_N_SLICE: {
        jj_value_t obj = eval(rt, s, n->a), parts[3];
        for (int i = 0; i < 3; i++)
            parts[i] = n->list[i] ? eval(rt, s, n->list[i]) : jj_none();
        v = jj_slice(rt, obj, &parts[0], &parts[1], &parts[2]);
        break;
    }
    case JJ_N_CALL: {
        jj_value_t fn = eval(rt, s, n->a);
        jj_args_t args;
        eval_args(rt, s, n, &args);
        v = jj_call(rt, fn, &args);
        break;
    }
    case JJ_N_FILTER: {
        jj_value_t x = eval(rt, s, n->a);
        jj_args_t args;
        eval_args(rt, s, n, &args);
        v = jj_filter_apply(rt, n->name, x, &args);
        break;
    }
    case JJ_N_TEST: {
        jj_value_t x = eval(rt, s, n->a);
        jj_args_t args;
        eval_args(rt, s, n, &args);
        v = jj_bool(jj_test_apply(rt, n->name, x, &args) != n->flag);
        break;
    }
    case JJ_N_BINOP: {
        jj_value_t a = eval(rt, s, n->a);
        v = binop(rt, n->op, a, eval(rt, s, n->b));
        break;
    }
    case JJ_N_AND:
        v = eval(rt, s, n->a);
        if (jj_truthy(v))
            v = eval(rt, s, n->b);
        break;
    case JJ_N_OR:
        v = eval(rt, s, n->a);
        if (!jj_truthy(v))
            v = eval(rt, s, n->b);
        break;
    case JJ_N_NOT: v = jj_bool(!jj_truthy(eval(rt, s, n->a))); break;
    case JJ_N_NEG:
    case JJ_N_POS: {
        jj_value_t x = eval(rt, s, n->a);
        if (x.kind == JJ_UNDEF)
            jj_undef_fail(rt, x);
        if (!jj_is_number(x))
            jj_fail(rt, "TypeError: bad operand type for unary %c: '%s'",
                    n->kind == JJ_N_NEG ? '-' : '+', jj_type_name(x));
        if (n->kind == JJ_N_POS)
            v = x.kind == JJ_BOOL ? jj_int(x.u.b) : x;
        else if (x.kind == JJ_FLOAT)
            v = jj_float(-x.u.f);
        else if (int_of(x) == INT64_MIN)
            jj_fail(rt, "OverflowError: integer overflow");
        else
            v = jj_int(-int_of(x));
        break;
    }
    case JJ_N_COND:
        if (jj_truthy(eval(rt, s, n->b)))
            v = eval(rt, s, n->a);
        else if (n->c)
            v = eval(rt, s, n->c);
        else
            v = jj_undef(rt, "UndefinedError: the inline if-expression on line %d evaluated to "
                             "false and no else section was defined.", n->line);
        break;
    case JJ_N_LIST:
    case JJ_N_TUPLE:
        v = jj_list_new(rt, n->kind == JJ_N_LIST ? JJ_LIST_PLAIN : JJ_LIST_TUPLE);
        for (size_t i = 0; i < n->n; i++)
            jj_list_push(rt, v.u.l, eval(rt, s, n->list[i]));
        break;
    case JJ_N_DICT:
        v = jj_dict_new(rt, JJ_DICT);
        for (size_t i = 0; i < n->n; i++) {
            jj_value_t k = eval(rt, s, n->list[i]);
            if (k.kind == JJ_LIST && k.u.l->flavor != JJ_LIST_TUPLE)
                jj_fail(rt, "TypeError: unhashable type: 'list'");
            if (k.kind == JJ_DICT)
                jj_fail(rt, "TypeError: unhashable type: 'dict'");
            jj_dict_set(rt, v.u.d, k, eval(rt, s, n->list2[i]));
        }
        break;
    case JJ_N_BLOCK_INPUT:
        v = rt->block_input ? jj_str_value(rt->block_input) : jj_cstr(rt, "");
        break;
    default: jj_fail(rt, "TemplateRuntimeError: not an expression (line %d)", n->line);
    }
    rt->depth--;
    return v;
}

/* ---- statements ------------------------------------------------------ */

/* Assigns v to names (one name, or a tuple unpacked), in scope s. */
static void assign_names(jj_rt_t *rt, jj_scope_t *s, const char **names, size_t n_names,
                         bool tuple, jj_value_t v)
{
    if (!tuple) {
        scope_set(rt, s, names[0], v);
        return;
    }
    jj_list_t *items = jj_iterate(rt, v);
    if (items->n < n_names)
        jj_fail(rt, "ValueError: not enough values to unpack (expected %zu, got %zu)", n_names,
                items->n);
    if (items->n > n_names)
        jj_fail(rt, "ValueError: too many values to unpack (expected %zu)", n_names);
    for (size_t i = 0; i < n_names; i++)
        scope_set(rt, s, names[i], items->items[i]);
}

static void exec_set(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *target, jj_value_t v)
{
    if (target->kind == JJ_N_NAME) {
        scope_set(rt, s, target->name, v);
    } else if (target->kind == JJ_N_GETATTR) {
        jj_value_t ns = lookup(rt, s, target->a->name);
        if (ns.kind != JJ_NS)
            jj_fail(rt, "TemplateRuntimeError: cannot assign attribute on non-namespace object");
        jj_dict_set(rt, ns.u.d, jj_cstr(rt, target->name), v);
    } else {
        const char **names = jj_alloc_array(&rt->arena, target->n, sizeof *names);
        for (size_t i = 0; i < target->n; i++)
            names[i] = target->list[i]->name;
        assign_names(rt, s, names, target->n, true, v);
    }
}

static flow_t exec_for(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *n, jj_sb_t *out)
{
    bool tuple = n->n_names > 1;
    jj_list_t *items = jj_iterate(rt, eval(rt, s, n->a));
    if (n->d) {
        /* `for x in xs if cond`: filtered first, so loop.length and
         * loop.last count only what passes. */
        jj_list_t *kept = jj_list_new(rt, JJ_LIST_PLAIN).u.l;
        jj_scope_t *it = NULL;
        for (size_t i = 0; i < items->n; i++) {
            it = iteration_scope(rt, it, s);
            assign_names(rt, it, n->names, n->n_names, tuple, items->items[i]);
            if (jj_truthy(eval(rt, it, n->d)))
                jj_list_push(rt, kept, items->items[i]);
        }
        items = kept;
    }
    jj_value_t loop = jj_loop_new(rt, items, 0);
    jj_scope_t *it = NULL;
    for (size_t i = 0; i < items->n; i++) {
        count_step(rt); /* an empty body still costs a step an item */
        it = iteration_scope(rt, it, s);
        assign_names(rt, it, n->names, n->n_names, tuple, items->items[i]);
        jj_loop_set_index(loop, i);
        scope_set(rt, it, "loop", loop);
        if (exec_body(rt, it, n->b, out) == FLOW_BREAK)
            break;
    }
    if (items->n == 0 && n->c)
        return exec_body(rt, s, n->c, out);
    return FLOW_NEXT;
}

static jj_str_t *render_into_string(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *body)
{
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    exec_body(rt, s, body, &sb);
    return jj_sb_finish(&sb);
}

static flow_t exec_node(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *n, jj_sb_t *out)
{
    enter(rt);
    flow_t flow = FLOW_NEXT;
    switch (n->kind) {
    case JJ_N_BODY: flow = exec_body(rt, s, n, out); break;
    case JJ_N_TEXT: jj_sb_append(out, n->text, n->text_len); break;
    case JJ_N_OUTPUT: jj_write_str(out, eval(rt, s, n->a)); break;
    case JJ_N_IF:
        if (jj_truthy(eval(rt, s, n->a)))
            flow = exec_body(rt, s, n->b, out);
        else if (n->c)
            flow = exec_node(rt, s, n->c, out);
        break;
    case JJ_N_FOR: flow = exec_for(rt, s, n, out); break;
    case JJ_N_SET: exec_set(rt, s, n->a, eval(rt, s, n->b)); break;
    case JJ_N_SET_BLOCK: {
        jj_value_t v = jj_str_value(render_into_string(rt, s, n->b));
        if (n->c) {
            jj_str_t *saved = rt->block_input;
            rt->block_input = v.u.s;
            v = eval(rt, s, n->c);
            rt->block_input = saved;
        }
        exec_set(rt, s, n->a, v);
        break;
    }
    case JJ_N_MACRO: scope_set(rt, s, n->name, make_macro(rt, s, n, n->name)); break;
    case JJ_N_CALL_BLOCK: {
        const jj_node_t *call = n->a;
        jj_value_t callee = eval(rt, s, call->a);
        if (callee.kind != JJ_FUNC || callee.u.fn->kind != JJ_FN_MACRO)
            jj_fail(rt, "TypeError: {%% call %%} needs a macro, not %s", jj_type_name(callee));
        jj_args_t args;
        eval_args(rt, s, call, &args);
        jj_func_t with_caller = *callee.u.fn;
        with_caller.caller = make_macro(rt, s, n, "caller");
        jj_write_str(out, call_macro(rt, &with_caller, &args));
        break;
    }
    case JJ_N_FILTER_BLOCK: {
        jj_str_t *saved = rt->block_input;
        rt->block_input = render_into_string(rt, s, n->b);
        jj_value_t v = eval(rt, s, n->a);
        rt->block_input = saved;
        jj_write_str(out, v);
        break;
    }
    case JJ_N_BREAK: flow = FLOW_BREAK; break;
    case JJ_N_CONTINUE: flow = FLOW_CONTINUE; break;
    default: jj_write_str(out, eval(rt, s, n)); break;
    }
    rt->depth--;
    return flow;
}

static flow_t exec_body(jj_rt_t *rt, jj_scope_t *s, const jj_node_t *body, jj_sb_t *out)
{
    for (size_t i = 0; i < body->n; i++) {
        flow_t flow = exec_node(rt, s, body->list[i], out);
        if (flow != FLOW_NEXT)
            return flow;
    }
    return FLOW_NEXT;
}

/* ---- entry points ---------------------------------------------------- */

jj_template_t *jj_template_new(const char *src, size_t len, cr_err_t *err)
{
    /* volatile: read again after a longjmp back to the setjmp below. */
    jj_template_t *volatile t = calloc(1, sizeof *t);
    if (!t) {
        cr_err_set(err, CR_E_NOMEM, "jinja: out of memory");
        return NULL;
    }
    jj_arena_init(&t->arena, TEMPLATE_ARENA_BYTES, &t->jump);
    if (setjmp(t->jump.env)) {
        cr_err_set(err, t->jump.status, "%s", t->jump.msg);
        jj_arena_free(&t->arena);
        free(t);
        return NULL;
    }
    t->root = jj_parse(&t->arena, src, len);
    return t;
}

void jj_template_destroy(jj_template_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    jj_arena_free(&(*self_p)->arena);
    free(*self_p);
    *self_p = NULL;
}

cr_status_t jj_render(const jj_template_t *self, const json_t *context,
                      const jj_render_opts_t *opts, cr_buf_t *out, cr_err_t *err)
{
    jj_rt_t *volatile rt = calloc(1, sizeof *rt);
    if (!rt)
        return cr_err_set(err, CR_E_NOMEM, "jinja: out of memory");
    if (opts)
        rt->limits = opts->limits;
    else
        jj_limits_default(&rt->limits);
    rt->now = opts && opts->now ? opts->now : time(NULL);
    if (opts) {
        rt->untrusted = opts->untrusted;
        rt->n_untrusted = opts->n_untrusted;
    }
    jj_arena_init(&rt->arena, rt->limits.max_memory_bytes, &rt->jump);
    volatile cr_status_t st = CR_OK;
    if (setjmp(rt->jump.env)) {
        st = cr_err_set(err, rt->jump.status, "%s", rt->jump.msg);
        goto out;
    }
    rt->globals = scope_new(rt, NULL);
    if (context) {
        if (!json_is_object(context))
            jj_fail(rt, "TypeError: the template context must be a JSON object");
        jj_value_t ctx = jj_from_json(rt, context);
        rt->globals->vars = ctx.u.d;
    }
    jj_sb_t sb;
    jj_sb_init(&sb, rt);
    rt->depth = 0;
    exec_body(rt, scope_new(rt, rt->globals), self->root, &sb);
    size_t out_len = out->len;
    st = cr_buf_append(out, sb.p ? sb.p : "", sb.len);
    if (!st && opts && opts->taint) {
        size_t taint_len = opts->taint->len;
        if (sb.taint)
            st = cr_buf_append(opts->taint, sb.taint, sb.len);
        else if (!(st = cr_buf_reserve(opts->taint, sb.len)) && sb.len) {
            memset(opts->taint->data + taint_len, 0, sb.len);
            opts->taint->len += sb.len;
            opts->taint->data[opts->taint->len] = '\0';
        }
        if (st) {
            opts->taint->len = taint_len;
            out->len = out_len;
        }
    }
    if (st)
        cr_err_set(err, st, "OutputError: the rendered prompt does not fit its buffer");
out:
    jj_arena_free(&rt->arena);
    free(rt);
    return st;
}
