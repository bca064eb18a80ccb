/* jinja_tests.c: the tests (`value is name(args)`) of Jinja2 3.1 that
 * templates use: defined, undefined, none, true, false, boolean, string,
 * number, integer, float, mapping, iterable, sequence, callable, sameas,
 * eq/equalto/==, ne/!=, lt/<, le/<=, gt/>, ge/>=, in, divisibleby, odd,
 * even, lower, upper. An unknown test is an error when it is reached. */
#include "services/runner/jinja/jinja_impl.h"

static jj_value_t need_arg(jj_rt_t *rt, const char *name, jj_args_t *a)
{
    jj_value_t *v = jj_arg(a, 0, NULL);
    if (!v)
        jj_fail(rt, "TypeError: test '%s' needs an argument", name);
    return *v;
}

static int64_t as_int(jj_rt_t *rt, const char *name, jj_value_t v)
{
    if (v.kind == JJ_INT)
        return v.u.i;
    if (v.kind == JJ_BOOL)
        return v.u.b;
    jj_fail(rt, "TypeError: test '%s' needs an integer, not %s", name, jj_type_name(v));
}

static bool contains(jj_rt_t *rt, jj_value_t container, jj_value_t item);

bool jj_test_apply(jj_rt_t *rt, const char *name, jj_value_t v, jj_args_t *a)
{
    if (!strcmp(name, "defined"))
        return v.kind != JJ_UNDEF;
    if (!strcmp(name, "undefined"))
        return v.kind == JJ_UNDEF;
    if (!strcmp(name, "none"))
        return v.kind == JJ_NONE;
    if (!strcmp(name, "true"))
        return v.kind == JJ_BOOL && v.u.b;
    if (!strcmp(name, "false"))
        return v.kind == JJ_BOOL && !v.u.b;
    if (!strcmp(name, "boolean"))
        return v.kind == JJ_BOOL;
    if (!strcmp(name, "string"))
        return v.kind == JJ_STR;
    if (!strcmp(name, "number"))
        return jj_is_number(v);
    if (!strcmp(name, "integer"))
        return v.kind == JJ_INT;
    if (!strcmp(name, "float"))
        return v.kind == JJ_FLOAT;
    if (!strcmp(name, "mapping"))
        return v.kind == JJ_DICT;
    /* Jinja2's Undefined iterates (as empty) and has __len__ and
     * __getitem__, so it passes both. */
    if (!strcmp(name, "iterable"))
        return v.kind == JJ_STR || v.kind == JJ_LIST || v.kind == JJ_DICT || v.kind == JJ_UNDEF;
    if (!strcmp(name, "sequence"))
        return v.kind == JJ_STR || v.kind == JJ_DICT || v.kind == JJ_UNDEF ||
               (v.kind == JJ_LIST && v.u.l->flavor != JJ_LIST_GENERATOR);
    if (!strcmp(name, "callable"))
        return v.kind == JJ_FUNC;
    if (!strcmp(name, "sameas")) {
        jj_value_t o = need_arg(rt, name, a);
        if (v.kind != o.kind)
            return false;
        if (v.kind == JJ_NONE || v.kind == JJ_BOOL || v.kind == JJ_INT || v.kind == JJ_FLOAT)
            return jj_equal(v, o);
        return v.kind == JJ_STR ? v.u.s == o.u.s : v.u.l == o.u.l;
    }
    if (!strcmp(name, "eq") || !strcmp(name, "equalto") || !strcmp(name, "=="))
        return jj_equal(v, need_arg(rt, name, a));
    if (!strcmp(name, "ne") || !strcmp(name, "!="))
        return !jj_equal(v, need_arg(rt, name, a));
    if (!strcmp(name, "lt") || !strcmp(name, "lessthan") || !strcmp(name, "<"))
        return jj_compare(rt, v, need_arg(rt, name, a)) < 0;
    if (!strcmp(name, "le") || !strcmp(name, "<="))
        return jj_compare(rt, v, need_arg(rt, name, a)) <= 0;
    if (!strcmp(name, "gt") || !strcmp(name, "greaterthan") || !strcmp(name, ">"))
        return jj_compare(rt, v, need_arg(rt, name, a)) > 0;
    if (!strcmp(name, "ge") || !strcmp(name, ">="))
        return jj_compare(rt, v, need_arg(rt, name, a)) >= 0;
    if (!strcmp(name, "in"))
        return contains(rt, need_arg(rt, name, a), v);
    if (!strcmp(name, "divisibleby")) {
        int64_t d = as_int(rt, name, need_arg(rt, name, a));
        if (d == 0)
            jj_fail(rt, "ZeroDivisionError: integer division or modulo by zero");
        return d == -1 || as_int(rt, name, v) % d == 0;
    }
    if (!strcmp(name, "odd"))
        return as_int(rt, name, v) % 2 != 0;
    if (!strcmp(name, "even"))
        return as_int(rt, name, v) % 2 == 0;
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (v.kind != JJ_STR)
            return false;
        jj_value_t c = jj_str_case(rt, v.u.s, name[0]);
        return c.u.s->len == v.u.s->len && !memcmp(c.u.s->s, v.u.s->s, v.u.s->len);
    }
    jj_fail(rt, "TemplateRuntimeError: No test named '%s' found.", name);
}

/* Python's `item in container`. */
static bool contains(jj_rt_t *rt, jj_value_t container, jj_value_t item)
{
    switch (container.kind) {
    case JJ_STR:
        if (item.kind != JJ_STR)
            jj_fail(rt, "TypeError: 'in <string>' requires string as left operand, not %s",
                    jj_type_name(item));
        return item.u.s->len == 0 ||
               memmem(container.u.s->s, container.u.s->len, item.u.s->s, item.u.s->len);
    case JJ_LIST:
        for (size_t i = 0; i < container.u.l->n; i++)
            if (jj_equal(container.u.l->items[i], item))
                return true;
        return false;
    case JJ_DICT:
    case JJ_NS: return jj_dict_find(container.u.d, item) != NULL;
    case JJ_UNDEF: return false; /* Undefined iterates as empty */
    default:
        jj_fail(rt, "TypeError: argument of type '%s' is not iterable", jj_type_name(container));
    }
}

bool jj_contains(jj_rt_t *rt, jj_value_t container, jj_value_t item)
{
    return contains(rt, container, item);
}
