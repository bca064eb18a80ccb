/* jinja_parse.c: tokens -> syntax tree.
 *
 * A recursive-descent parser with Jinja2's grammar and precedence
 * (lowest first): `x if c else y`, or, and, not, comparisons (chained),
 * + -, ~, * / // %, **, unary - +, then primaries with postfix
 * (.attr, [index], [a:b:c], calls) and filters/tests (`|f(..)`,
 * `is [not] t arg`). Statements: if/elif/else, for/else, set (and block
 * set), macro, call, filter, generation, break, continue. Anything else is
 * a TemplateSyntaxError naming the construct and line, so a template we
 * cannot run fails when it is loaded, not when it is rendered. Nesting is
 * capped so hostile input cannot exhaust the stack. */
#include "services/runner/jinja/jinja_impl.h"

#define MAX_NESTING 200

typedef struct parser {
    jj_arena_t *arena;
    jj_toks_t toks;
    size_t pos;
    int depth;
    int loops; /* for loops around the current statement (in this macro) */
} parser_t;

typedef struct vec {
    jj_node_t **v;
    size_t n, cap;
} vec_t;

typedef struct names {
    const char **v;
    size_t n, cap;
} names_t;

_Noreturn CR_PRINTF(2, 3) static void fail(parser_t *p, const char *fmt, ...)
{
    char what[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    jj_throw(p->arena->jump, CR_E_INVALID, "TemplateSyntaxError: %s (line %d)", what,
             p->toks.v[p->pos].line);
}

static void vec_push(parser_t *p, vec_t *v, jj_node_t *node)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        jj_node_t **nv = jj_alloc_array(p->arena, cap, sizeof *nv);
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = node;
}

static void names_push(parser_t *p, names_t *v, const char *name)
{
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 4;
        const char **nv = jj_alloc_array(p->arena, cap, sizeof *nv);
        if (v->n)
            memcpy(nv, v->v, v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = name;
}

static jj_tok_t *cur(parser_t *p)
{
    return &p->toks.v[p->pos];
}

static jj_tok_t *peek(parser_t *p, size_t ahead)
{
    size_t i = p->pos + ahead;
    return &p->toks.v[i < p->toks.n ? i : p->toks.n - 1];
}

static void advance(parser_t *p)
{
    if (p->pos + 1 < p->toks.n)
        p->pos++;
}

static bool tok_is(const jj_tok_t *t, jj_tok_kind_t kind, const char *text)
{
    if (t->kind != kind)
        return false;
    if (!text)
        return true;
    size_t n = strlen(text);
    return t->len == n && memcmp(t->text, text, n) == 0;
}

static bool is_op(parser_t *p, const char *op)
{
    return tok_is(cur(p), JJ_T_OP, op);
}

static bool is_name(parser_t *p, const char *name)
{
    return tok_is(cur(p), JJ_T_NAME, name);
}

static bool skip_op(parser_t *p, const char *op)
{
    if (!is_op(p, op))
        return false;
    advance(p);
    return true;
}

static bool skip_name(parser_t *p, const char *name)
{
    if (!is_name(p, name))
        return false;
    advance(p);
    return true;
}

static const char *describe(parser_t *p)
{
    jj_tok_t *t = cur(p);
    switch (t->kind) {
    case JJ_T_EOF: return "end of template";
    case JJ_T_TEXT: return "text";
    case JJ_T_VAR_BEGIN: return "'{{'";
    case JJ_T_VAR_END: return "'}}'";
    case JJ_T_BLOCK_BEGIN: return "'{%'";
    case JJ_T_BLOCK_END: return "'%}'";
    case JJ_T_STRING: return "a string";
    case JJ_T_INT: return "an integer";
    case JJ_T_FLOAT: return "a float";
    default: break;
    }
    char *s = jj_alloc(p->arena, t->len + 3);
    snprintf(s, t->len + 3, "'%.*s'", (int)t->len, t->text);
    return s;
}

static void expect_op(parser_t *p, const char *op)
{
    if (!skip_op(p, op))
        fail(p, "expected '%s', got %s", op, describe(p));
}

static const char *expect_name(parser_t *p)
{
    jj_tok_t *t = cur(p);
    if (t->kind != JJ_T_NAME)
        fail(p, "expected a name, got %s", describe(p));
    advance(p);
    return jj_strndup(p->arena, t->text, t->len);
}

static void expect_block_end(parser_t *p, const char *stmt)
{
    if (cur(p)->kind != JJ_T_BLOCK_END)
        fail(p, "expected end of '%s' statement, got %s", stmt, describe(p));
    advance(p);
}

static jj_node_t *node(parser_t *p, jj_node_kind_t kind)
{
    jj_node_t *n = jj_alloc(p->arena, sizeof *n);
    n->kind = kind;
    n->line = cur(p)->line;
    return n;
}

static void enter(parser_t *p)
{
    if (++p->depth > MAX_NESTING)
        fail(p, "nesting deeper than %d levels", MAX_NESTING);
}

static jj_node_t *parse_expr(parser_t *p, bool with_cond);
static jj_node_t *parse_unary(parser_t *p, bool with_filter);
static jj_node_t *parse_or(parser_t *p);

/* ---- expressions ----------------------------------------------------- */

static void parse_call_args(parser_t *p, jj_node_t *n)
{
    vec_t pos = {0}, kw = {0};
    names_t kw_names = {0};
    expect_op(p, "(");
    while (!is_op(p, ")")) {
        if (pos.n + kw.n)
            expect_op(p, ",");
        if (is_op(p, ")"))
            break; /* trailing comma */
        if (is_op(p, "*") || is_op(p, "**"))
            fail(p, "*args and **kwargs in calls are not supported");
        if (cur(p)->kind == JJ_T_NAME && tok_is(peek(p, 1), JJ_T_OP, "=")) {
            names_push(p, &kw_names, expect_name(p));
            advance(p);
            vec_push(p, &kw, parse_expr(p, true));
        } else {
            if (kw.n)
                fail(p, "positional argument after a keyword argument");
            vec_push(p, &pos, parse_expr(p, true));
        }
    }
    advance(p);
    n->list = pos.v;
    n->n = pos.n;
    n->list2 = kw.v;
    n->n2 = kw.n;
    n->names = kw_names.v;
    n->n_names = kw_names.n;
}

/* A dotted name after `|` or `is`. */
static const char *dotted_name(parser_t *p)
{
    const char *name = expect_name(p);
    while (is_op(p, ".") && peek(p, 1)->kind == JJ_T_NAME) {
        advance(p);
        const char *part = expect_name(p);
        size_t l1 = strlen(name), l2 = strlen(part);
        char *joined = jj_alloc(p->arena, l1 + l2 + 2);
        memcpy(joined, name, l1);
        joined[l1] = '.';
        memcpy(joined + l1 + 1, part, l2 + 1);
        name = joined;
    }
    return name;
}

static jj_node_t *parse_primary(parser_t *p);

static jj_node_t *parse_postfix(parser_t *p, jj_node_t *n)
{
    for (;;) {
        if (is_op(p, ".")) {
            advance(p);
            jj_node_t *g;
            if (cur(p)->kind == JJ_T_INT) {
                g = node(p, JJ_N_GETITEM);
                g->b = node(p, JJ_N_LIT);
                g->b->lit = jj_int(cur(p)->i);
                advance(p);
            } else {
                g = node(p, JJ_N_GETATTR);
                g->name = expect_name(p);
            }
            g->a = n;
            n = g;
        } else if (is_op(p, "[")) {
            advance(p);
            jj_node_t *parts[3] = {NULL, NULL, NULL};
            int colons = 0;
            for (;;) {
                if (is_op(p, ":")) {
                    if (++colons > 2)
                        fail(p, "too many ':' in a subscript");
                    advance(p);
                } else if (is_op(p, "]")) {
                    break;
                } else {
                    if (parts[colons])
                        fail(p, "expected ':' or ']', got %s", describe(p));
                    parts[colons] = parse_expr(p, true);
                }
            }
            advance(p);
            jj_node_t *g;
            if (colons == 0) {
                if (!parts[0])
                    fail(p, "empty subscript");
                g = node(p, JJ_N_GETITEM);
                g->b = parts[0];
            } else {
                g = node(p, JJ_N_SLICE);
                g->list = jj_alloc_array(p->arena, 3, sizeof *g->list);
                memcpy(g->list, parts, sizeof parts);
                g->n = 3;
            }
            g->a = n;
            n = g;
        } else if (is_op(p, "(")) {
            jj_node_t *c = node(p, JJ_N_CALL);
            c->a = n;
            parse_call_args(p, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jj_node_t *parse_filter_expr(parser_t *p, jj_node_t *n)
{
    for (;;) {
        if (is_op(p, "|")) {
            advance(p);
            jj_node_t *f = node(p, JJ_N_FILTER);
            f->name = dotted_name(p);
            f->a = n;
            if (is_op(p, "("))
                parse_call_args(p, f);
            n = f;
        } else if (is_name(p, "is")) {
            advance(p);
            jj_node_t *t = node(p, JJ_N_TEST);
            t->flag = skip_name(p, "not");
            t->name = dotted_name(p);
            t->a = n;
            jj_tok_t *c = cur(p);
            if (is_op(p, "(")) {
                parse_call_args(p, t);
            } else if ((c->kind == JJ_T_NAME || c->kind == JJ_T_STRING || c->kind == JJ_T_INT ||
                        c->kind == JJ_T_FLOAT || is_op(p, "[") || is_op(p, "{")) &&
                       !is_name(p, "else") && !is_name(p, "or") && !is_name(p, "and")) {
                if (is_name(p, "is"))
                    fail(p, "You cannot chain multiple tests with is");
                t->list = jj_alloc_array(p->arena, 1, sizeof *t->list);
                t->list[0] = parse_postfix(p, parse_primary(p));
                t->n = 1;
            }
            n = t;
        } else if (is_op(p, "(")) {
            jj_node_t *c = node(p, JJ_N_CALL);
            c->a = n;
            parse_call_args(p, c);
            n = c;
        } else {
            return n;
        }
    }
}

static jj_node_t *parse_primary(parser_t *p)
{
    enter(p);
    jj_tok_t *t = cur(p);
    jj_node_t *n;
    if (t->kind == JJ_T_NAME) {
        n = node(p, JJ_N_LIT);
        if (tok_is(t, JJ_T_NAME, "true") || tok_is(t, JJ_T_NAME, "True")) {
            n->lit = jj_bool(true);
        } else if (tok_is(t, JJ_T_NAME, "false") || tok_is(t, JJ_T_NAME, "False")) {
            n->lit = jj_bool(false);
        } else if (tok_is(t, JJ_T_NAME, "none") || tok_is(t, JJ_T_NAME, "None")) {
            n->lit = jj_none();
        } else {
            n->kind = JJ_N_NAME;
            n->name = jj_strndup(p->arena, t->text, t->len);
        }
        advance(p);
    } else if (t->kind == JJ_T_STRING) {
        /* Adjacent literals concatenate, as in Python. */
        size_t total = 0, i = p->pos;
        for (; p->toks.v[i].kind == JJ_T_STRING; i++)
            total += p->toks.v[i].len;
        char *s = jj_alloc(p->arena, total + 1);
        size_t o = 0;
        for (; cur(p)->kind == JJ_T_STRING; advance(p)) {
            memcpy(s + o, cur(p)->text, cur(p)->len);
            o += cur(p)->len;
        }
        jj_str_t *str = jj_alloc(p->arena, sizeof *str);
        str->s = s;
        str->len = total;
        n = node(p, JJ_N_LIT);
        n->lit = jj_str_value(str);
    } else if (t->kind == JJ_T_INT || t->kind == JJ_T_FLOAT) {
        n = node(p, JJ_N_LIT);
        n->lit = t->kind == JJ_T_INT ? jj_int(t->i) : jj_float(t->f);
        advance(p);
    } else if (is_op(p, "(")) {
        advance(p);
        if (skip_op(p, ")")) {
            n = node(p, JJ_N_TUPLE);
        } else {
            jj_node_t *first = parse_expr(p, true);
            if (is_op(p, ",")) {
                vec_t items = {0};
                vec_push(p, &items, first);
                while (skip_op(p, ",") && !is_op(p, ")"))
                    vec_push(p, &items, parse_expr(p, true));
                n = node(p, JJ_N_TUPLE);
                n->list = items.v;
                n->n = items.n;
            } else {
                n = first;
            }
            expect_op(p, ")");
        }
    } else if (is_op(p, "[")) {
        advance(p);
        vec_t items = {0};
        while (!is_op(p, "]")) {
            if (items.n)
                expect_op(p, ",");
            if (is_op(p, "]"))
                break;
            vec_push(p, &items, parse_expr(p, true));
        }
        advance(p);
        n = node(p, JJ_N_LIST);
        n->list = items.v;
        n->n = items.n;
    } else if (is_op(p, "{")) {
        advance(p);
        vec_t keys = {0}, vals = {0};
        while (!is_op(p, "}")) {
            if (keys.n)
                expect_op(p, ",");
            if (is_op(p, "}"))
                break;
            vec_push(p, &keys, parse_expr(p, true));
            expect_op(p, ":");
            vec_push(p, &vals, parse_expr(p, true));
        }
        advance(p);
        n = node(p, JJ_N_DICT);
        n->list = keys.v;
        n->n = keys.n;
        n->list2 = vals.v;
        n->n2 = vals.n;
    } else {
        fail(p, "unexpected %s", describe(p));
    }
    p->depth--;
    return n;
}

static jj_node_t *parse_unary(parser_t *p, bool with_filter)
{
    enter(p);
    jj_node_t *n;
    if (is_op(p, "-") || is_op(p, "+")) {
        n = node(p, is_op(p, "-") ? JJ_N_NEG : JJ_N_POS);
        advance(p);
        n->a = parse_unary(p, false);
    } else {
        n = parse_postfix(p, parse_primary(p));
    }
    if (with_filter)
        n = parse_filter_expr(p, n);
    p->depth--;
    return n;
}

static jj_node_t *binop(parser_t *p, jj_op_t op, jj_node_t *a, jj_node_t *b)
{
    jj_node_t *n = node(p, JJ_N_BINOP);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jj_node_t *parse_pow(parser_t *p)
{
    jj_node_t *n = parse_unary(p, true);
    while (skip_op(p, "**"))
        n = binop(p, JJ_OP_POW, n, parse_unary(p, true));
    return n;
}

static jj_node_t *parse_math2(parser_t *p)
{
    jj_node_t *n = parse_pow(p);
    for (;;) {
        jj_op_t op;
        if (is_op(p, "*"))
            op = JJ_OP_MUL;
        else if (is_op(p, "/"))
            op = JJ_OP_DIV;
        else if (is_op(p, "//"))
            op = JJ_OP_FLOORDIV;
        else if (is_op(p, "%"))
            op = JJ_OP_MOD;
        else
            return n;
        advance(p);
        n = binop(p, op, n, parse_pow(p));
    }
}

static jj_node_t *parse_concat(parser_t *p)
{
    jj_node_t *n = parse_math2(p);
    while (skip_op(p, "~"))
        n = binop(p, JJ_OP_CONCAT, n, parse_math2(p));
    return n;
}

static jj_node_t *parse_math1(parser_t *p)
{
    jj_node_t *n = parse_concat(p);
    for (;;) {
        jj_op_t op;
        if (is_op(p, "+"))
            op = JJ_OP_ADD;
        else if (is_op(p, "-"))
            op = JJ_OP_SUB;
        else
            return n;
        advance(p);
        n = binop(p, op, n, parse_concat(p));
    }
}

static jj_node_t *parse_compare(parser_t *p)
{
    jj_node_t *n = parse_math1(p);
    jj_node_t *chain = NULL, *prev = n;
    for (;;) {
        jj_op_t op;
        if (is_op(p, "=="))
            op = JJ_OP_EQ;
        else if (is_op(p, "!="))
            op = JJ_OP_NE;
        else if (is_op(p, "<"))
            op = JJ_OP_LT;
        else if (is_op(p, "<="))
            op = JJ_OP_LE;
        else if (is_op(p, ">"))
            op = JJ_OP_GT;
        else if (is_op(p, ">="))
            op = JJ_OP_GE;
        else if (is_name(p, "in"))
            op = JJ_OP_IN;
        else if (is_name(p, "not") && tok_is(peek(p, 1), JJ_T_NAME, "in")) {
            op = JJ_OP_NOT_IN;
            advance(p);
        } else
            return chain ? chain : n;
        advance(p);
        jj_node_t *rhs = parse_math1(p);
        jj_node_t *cmp = binop(p, op, prev, rhs);
        /* a < b < c is a < b and b < c, as Python. */
        if (chain) {
            jj_node_t *both = node(p, JJ_N_AND);
            both->a = chain;
            both->b = cmp;
            chain = both;
        } else {
            chain = cmp;
        }
        prev = rhs;
    }
}

static jj_node_t *parse_not(parser_t *p)
{
    if (is_name(p, "not")) {
        enter(p);
        jj_node_t *n = node(p, JJ_N_NOT);
        advance(p);
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}

static jj_node_t *parse_and(parser_t *p)
{
    jj_node_t *n = parse_not(p);
    while (skip_name(p, "and")) {
        jj_node_t *a = node(p, JJ_N_AND);
        a->a = n;
        a->b = parse_not(p);
        n = a;
    }
    return n;
}

static jj_node_t *parse_or(parser_t *p)
{
    jj_node_t *n = parse_and(p);
    while (skip_name(p, "or")) {
        jj_node_t *o = node(p, JJ_N_OR);
        o->a = n;
        o->b = parse_and(p);
        n = o;
    }
    return n;
}

static jj_node_t *parse_expr(parser_t *p, bool with_cond)
{
    enter(p);
    jj_node_t *n = parse_or(p);
    while (with_cond && skip_name(p, "if")) {
        jj_node_t *c = node(p, JJ_N_COND);
        c->a = n;
        c->b = parse_or(p);
        if (skip_name(p, "else"))
            c->c = parse_expr(p, true);
        n = c;
    }
    p->depth--;
    return n;
}

/* An expression that may be an unparenthesized tuple (`a, b`). */
static jj_node_t *parse_tuple(parser_t *p, bool with_cond)
{
    jj_node_t *first = parse_expr(p, with_cond);
    if (!is_op(p, ","))
        return first;
    vec_t items = {0};
    vec_push(p, &items, first);
    while (skip_op(p, ",")) {
        if (cur(p)->kind == JJ_T_BLOCK_END || cur(p)->kind == JJ_T_VAR_END)
            break;
        vec_push(p, &items, parse_expr(p, with_cond));
    }
    jj_node_t *t = node(p, JJ_N_TUPLE);
    t->list = items.v;
    t->n = items.n;
    return t;
}

/* ---- statements ------------------------------------------------------ */

static jj_node_t *parse_body(parser_t *p, const char *const *ends);

/* `name`, `a, b` or `(a, b)`; `ns.attr` when allow_attr. */
static jj_node_t *parse_target(parser_t *p, bool allow_attr)
{
    bool paren = skip_op(p, "(");
    vec_t items = {0};
    do {
        jj_node_t *n = node(p, JJ_N_NAME);
        n->name = expect_name(p);
        if (allow_attr && !paren && is_op(p, ".")) {
            advance(p);
            jj_node_t *g = node(p, JJ_N_GETATTR);
            g->a = n;
            g->name = expect_name(p);
            n = g;
        }
        vec_push(p, &items, n);
    } while (skip_op(p, ","));
    if (paren)
        expect_op(p, ")");
    if (items.n == 1 && !paren)
        return items.v[0];
    for (size_t i = 0; i < items.n; i++)
        if (items.v[i]->kind != JJ_N_NAME)
            fail(p, "can't assign to an attribute in a tuple");
    jj_node_t *t = node(p, JJ_N_TUPLE);
    t->list = items.v;
    t->n = items.n;
    return t;
}

static void target_names(parser_t *p, jj_node_t *target, jj_node_t *stmt)
{
    names_t names = {0};
    if (target->kind == JJ_N_TUPLE)
        for (size_t i = 0; i < target->n; i++)
            names_push(p, &names, target->list[i]->name);
    else
        names_push(p, &names, target->name);
    stmt->names = names.v;
    stmt->n_names = names.n;
}

/* After `{% name`: the end tag `{% endname %}` closing a body. */
static void expect_end(parser_t *p, const char *end)
{
    if (!skip_name(p, end))
        fail(p, "expected '%s', got %s", end, describe(p));
}

static jj_node_t *parse_if(parser_t *p)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    jj_node_t *n = node(p, JJ_N_IF);
    n->a = parse_tuple(p, false);
    expect_block_end(p, "if");
    n->b = parse_body(p, ends);
    if (skip_name(p, "elif")) {
        n->c = parse_if(p);
        return n; /* the nested if consumed endif */
    }
    if (skip_name(p, "else")) {
        static const char *const else_ends[] = {"endif", NULL};
        expect_block_end(p, "else");
        n->c = parse_body(p, else_ends);
    }
    expect_end(p, "endif");
    expect_block_end(p, "endif");
    return n;
}

static jj_node_t *parse_for(parser_t *p)
{
    static const char *const ends[] = {"else", "endfor", NULL};
    static const char *const else_ends[] = {"endfor", NULL};
    jj_node_t *n = node(p, JJ_N_FOR);
    target_names(p, parse_target(p, false), n);
    expect_end(p, "in");
    n->a = parse_tuple(p, false);
    if (skip_name(p, "if"))
        n->d = parse_expr(p, true);
    if (is_name(p, "recursive"))
        fail(p, "recursive for loops are not supported");
    expect_block_end(p, "for");
    p->loops++;
    n->b = parse_body(p, ends);
    p->loops--;
    if (skip_name(p, "else")) {
        expect_block_end(p, "else");
        n->c = parse_body(p, else_ends);
    }
    expect_end(p, "endfor");
    expect_block_end(p, "endfor");
    return n;
}

/* `f(args) | g ...` applied to a block's rendered body (BLOCK_INPUT). */
static jj_node_t *parse_filter_chain(parser_t *p)
{
    jj_node_t *input = node(p, JJ_N_BLOCK_INPUT);
    do {
        jj_node_t *f = node(p, JJ_N_FILTER);
        f->name = dotted_name(p);
        f->a = input;
        if (is_op(p, "("))
            parse_call_args(p, f);
        input = f;
    } while (skip_op(p, "|"));
    return input;
}

static jj_node_t *parse_set(parser_t *p)
{
    jj_node_t *target = parse_target(p, true);
    if (skip_op(p, "=")) {
        jj_node_t *n = node(p, JJ_N_SET);
        n->a = target;
        n->b = parse_tuple(p, true);
        expect_block_end(p, "set");
        return n;
    }
    static const char *const ends[] = {"endset", NULL};
    if (target->kind != JJ_N_NAME && target->kind != JJ_N_GETATTR)
        fail(p, "a block set assigns one name");
    jj_node_t *n = node(p, JJ_N_SET_BLOCK);
    n->a = target;
    if (skip_op(p, "|"))
        n->c = parse_filter_chain(p);
    expect_block_end(p, "set");
    n->b = parse_body(p, ends);
    expect_end(p, "endset");
    expect_block_end(p, "endset");
    return n;
}

/* `(a, b=default, ...)` for macros and call blocks. */
static void parse_params(parser_t *p, jj_node_t *n)
{
    names_t names = {0};
    vec_t defaults = {0};
    expect_op(p, "(");
    while (!is_op(p, ")")) {
        if (names.n)
            expect_op(p, ",");
        if (is_op(p, ")"))
            break;
        names_push(p, &names, expect_name(p));
        if (skip_op(p, "="))
            vec_push(p, &defaults, parse_expr(p, true));
        else if (defaults.n && defaults.v[defaults.n - 1])
            fail(p, "non-default argument follows default argument");
        else
            vec_push(p, &defaults, NULL);
    }
    advance(p);
    n->names = names.v;
    n->n_names = names.n;
    n->list = defaults.v;
    n->n = defaults.n;
}

static jj_node_t *parse_macro(parser_t *p)
{
    static const char *const ends[] = {"endmacro", NULL};
    jj_node_t *n = node(p, JJ_N_MACRO);
    n->name = expect_name(p);
    parse_params(p, n);
    expect_block_end(p, "macro");
    int loops = p->loops;
    p->loops = 0;
    n->b = parse_body(p, ends);
    p->loops = loops;
    expect_end(p, "endmacro");
    if (cur(p)->kind == JJ_T_NAME)
        advance(p); /* {% endmacro name %} */
    expect_block_end(p, "endmacro");
    return n;
}

static jj_node_t *parse_call_block(parser_t *p)
{
    static const char *const ends[] = {"endcall", NULL};
    jj_node_t *n = node(p, JJ_N_CALL_BLOCK);
    if (is_op(p, "("))
        parse_params(p, n);
    n->a = parse_expr(p, true);
    if (n->a->kind != JJ_N_CALL)
        fail(p, "expected a call after 'call'");
    expect_block_end(p, "call");
    int loops = p->loops;
    p->loops = 0;
    n->b = parse_body(p, ends);
    p->loops = loops;
    expect_end(p, "endcall");
    expect_block_end(p, "endcall");
    return n;
}

static jj_node_t *parse_filter_block(parser_t *p)
{
    static const char *const ends[] = {"endfilter", NULL};
    jj_node_t *n = node(p, JJ_N_FILTER_BLOCK);
    n->a = parse_filter_chain(p);
    expect_block_end(p, "filter");
    n->b = parse_body(p, ends);
    expect_end(p, "endfilter");
    expect_block_end(p, "endfilter");
    return n;
}

static jj_node_t *parse_statement(parser_t *p)
{
    jj_tok_t *t = cur(p);
    if (t->kind != JJ_T_NAME)
        fail(p, "tag name expected, got %s", describe(p));
    const char *what = describe(p);
    if (skip_name(p, "if"))
        return parse_if(p);
    if (skip_name(p, "for"))
        return parse_for(p);
    if (skip_name(p, "set"))
        return parse_set(p);
    if (skip_name(p, "macro"))
        return parse_macro(p);
    if (skip_name(p, "call"))
        return parse_call_block(p);
    if (skip_name(p, "filter"))
        return parse_filter_block(p);
    if (skip_name(p, "generation")) {
        /* Hugging Face's assistant-mask marker: the body as is. */
        static const char *const ends[] = {"endgeneration", NULL};
        expect_block_end(p, "generation");
        jj_node_t *body = parse_body(p, ends);
        expect_end(p, "endgeneration");
        expect_block_end(p, "endgeneration");
        return body;
    }
    if (is_name(p, "break") || is_name(p, "continue")) {
        if (!p->loops)
            fail(p, "%s outside of a loop", what);
        bool is_break = is_name(p, "break");
        jj_node_t *n = node(p, is_break ? JJ_N_BREAK : JJ_N_CONTINUE);
        advance(p);
        expect_block_end(p, is_break ? "break" : "continue");
        return n;
    }
    fail(p, "Encountered unknown tag %s", what);
}

/* Statements up to (not including) a `{% end %}` tag named in ends (NULL
 * ends: up to the end of the template). Leaves the position on the end
 * tag's name. */
static jj_node_t *parse_body(parser_t *p, const char *const *ends)
{
    enter(p);
    jj_node_t *body = node(p, JJ_N_BODY);
    vec_t stmts = {0};
    for (;;) {
        jj_tok_t *t = cur(p);
        if (t->kind == JJ_T_EOF) {
            if (ends) {
                const char *end = ends[0];
                for (size_t i = 0; ends[i]; i++)
                    if (!strncmp(ends[i], "end", 3))
                        end = ends[i];
                fail(p, "unexpected end of template, expected '%s'", end);
            }
            break;
        }
        if (t->kind == JJ_T_TEXT) {
            jj_node_t *n = node(p, JJ_N_TEXT);
            n->text = t->text;
            n->text_len = t->len;
            vec_push(p, &stmts, n);
            advance(p);
        } else if (t->kind == JJ_T_VAR_BEGIN) {
            advance(p);
            jj_node_t *n = node(p, JJ_N_OUTPUT);
            n->a = parse_tuple(p, true);
            if (cur(p)->kind != JJ_T_VAR_END)
                fail(p, "expected '}}', got %s", describe(p));
            advance(p);
            vec_push(p, &stmts, n);
        } else if (t->kind == JJ_T_BLOCK_BEGIN) {
            advance(p);
            for (size_t i = 0; ends && ends[i]; i++)
                if (is_name(p, ends[i]))
                    goto out;
            vec_push(p, &stmts, parse_statement(p));
        } else {
            fail(p, "unexpected %s", describe(p));
        }
    }
out:
    body->list = stmts.v;
    body->n = stmts.n;
    p->depth--;
    return body;
}

jj_node_t *jj_parse(jj_arena_t *arena, const char *src, size_t len)
{
    parser_t p = {.arena = arena};
    jj_lex(arena, src, len, &p.toks);
    return parse_body(&p, NULL);
}
