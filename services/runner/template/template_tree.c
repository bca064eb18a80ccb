/* template_tree.c: what Ollama does to a parsed template before running
 * it, and how nodes print in messages:
 *  - the identifier set behind Ollama's Vars() (fields and variables,
 *    lower-cased), which picks the rendering mode;
 *  - {{ .Response }} appended to templates that mention neither Messages
 *    nor Response;
 *  - the legacy "cut" tree (Ollama's deleteNode): everything after the
 *    first .Response field, in tree order, removed;
 *  - Go's Node.String() for "executing ... at <node>" messages.
 * It does not parse (template_parse.c) or execute (template_exec.c). */
#include "lib/prelude.h"
#include "services/runner/template/template_impl.h"

#include <ctype.h>

#define TREE_MAX_DEPTH (4 * RN_TMPL_MAX_NESTING)

/* ---- identifiers (Vars) ---- */

static bool add_ident(rn_tmpl_t *t, const char *id)
{
    size_t n = strlen(id);
    char low[256];
    if (n >= sizeof low)
        n = sizeof low - 1;
    for (size_t i = 0; i < n; i++)
        low[i] = (char)tolower((unsigned char)id[i]);
    low[n] = '\0';
    for (size_t i = 0; i < t->n_idents; i++)
        if (!strcmp(t->idents[i], low))
            return true;
    char **ids = rn_tmpl_arena_alloc(&t->arena, (t->n_idents + 1) * sizeof *ids);
    char *copy = rn_tmpl_arena_strndup(&t->arena, low, n);
    if (!ids || !copy)
        return false;
    if (t->n_idents)
        memcpy(ids, t->idents, t->n_idents * sizeof *ids);
    ids[t->n_idents++] = copy;
    t->idents = ids;
    return true;
}

/* Ollama's Identifiers(): fields and variables of actions, branch pipes
 * and bodies, and template-call pipes; not chains or nested parens.
 * Returns false when out of memory. */
static bool collect_idents(rn_tmpl_t *t, const tnode_t *n, int depth)
{
    if (!n || depth > TREE_MAX_DEPTH)
        return true;
    bool ok = true;
    switch (n->type) {
    case TN_LIST:
        for (size_t i = 0; ok && i < n->u.list.n; i++)
            ok = collect_idents(t, n->u.list.nodes[i], depth + 1);
        break;
    case TN_ACTION:
        ok = collect_idents(t, n->u.action.pipe, depth + 1);
        break;
    case TN_TEMPLATE:
        ok = collect_idents(t, n->u.tmpl.pipe, depth + 1);
        break;
    case TN_IF:
    case TN_RANGE:
    case TN_WITH:
        ok = collect_idents(t, n->u.branch.pipe, depth + 1) &&
             collect_idents(t, n->u.branch.list, depth + 1) &&
             collect_idents(t, n->u.branch.else_list, depth + 1);
        break;
    case TN_PIPE:
        for (size_t i = 0; ok && i < n->u.pipe.n_cmds; i++) {
            const tnode_t *c = n->u.pipe.cmds[i];
            for (size_t j = 0; ok && j < c->u.cmd.n; j++)
                ok = collect_idents(t, c->u.cmd.args[j], depth + 1);
        }
        break;
    case TN_FIELD:
    case TN_VAR:
        for (size_t i = 0; ok && i < n->u.field.n; i++)
            ok = add_ident(t, n->u.field.idents[i]);
        break;
    default:
        break;
    }
    return ok;
}

bool rn_tmpl_uses(const rn_tmpl_t *t, const char *ident)
{
    if (!t || !ident)
        return false;
    for (size_t i = 0; i < t->n_idents; i++)
        if (!strcasecmp(t->idents[i], ident))
            return true;
    return false;
}

/* ---- the appended {{ .Response }} ---- */

static tnode_t *node(rn_tmpl_t *t, tnode_type_t type)
{
    tnode_t *n = rn_tmpl_arena_alloc(&t->arena, sizeof *n);
    if (n) {
        n->type = type;
        n->pos = (uint32_t)t->src_len;
    }
    return n;
}

static bool append_response(rn_tmpl_t *t)
{
    tnode_t *field = node(t, TN_FIELD), *cmd = node(t, TN_COMMAND);
    tnode_t *pipe = node(t, TN_PIPE), *action = node(t, TN_ACTION);
    const char **ids = rn_tmpl_arena_alloc(&t->arena, sizeof *ids);
    tnode_t **args = rn_tmpl_arena_alloc(&t->arena, sizeof *args);
    tnode_t **cmds = rn_tmpl_arena_alloc(&t->arena, sizeof *cmds);
    tnode_t **nodes = rn_tmpl_arena_alloc(&t->arena, (t->root->u.list.n + 1) * sizeof *nodes);
    if (!field || !cmd || !pipe || !action || !ids || !args || !cmds || !nodes)
        return false;
    ids[0] = "Response";
    field->u.field.idents = ids;
    field->u.field.n = 1;
    args[0] = field;
    cmd->u.cmd.args = args;
    cmd->u.cmd.n = 1;
    cmds[0] = cmd;
    pipe->u.pipe.cmds = cmds;
    pipe->u.pipe.n_cmds = 1;
    action->u.action.pipe = pipe;
    if (t->root->u.list.n)
        memcpy(nodes, t->root->u.list.nodes, t->root->u.list.n * sizeof *nodes);
    nodes[t->root->u.list.n] = action;
    t->root->u.list.nodes = nodes;
    t->root->u.list.n++;
    return add_ident(t, "Response");
}

/* ---- the legacy cut (Ollama's deleteNode) ---- */

typedef struct cut {
    rn_tmpl_t *t;
    bool cut;
    bool oom;
} cut_t;

static bool cut_pred(cut_t *c, const tnode_t *n)
{
    if (n->type == TN_FIELD) {
        for (size_t i = 0; i < n->u.field.n; i++)
            if (!strcmp(n->u.field.idents[i], "Response")) {
                c->cut = true;
                return false; /* the .Response node itself stays */
            }
    }
    return c->cut;
}

static tnode_t *cut_copy(cut_t *c, const tnode_t *n)
{
    tnode_t *m = rn_tmpl_arena_alloc(&c->t->arena, sizeof *m);
    if (m)
        *m = *n;
    else
        c->oom = true;
    return m;
}

static void *cut_alloc(cut_t *c, size_t n)
{
    void *p = rn_tmpl_arena_alloc(&c->t->arena, n ? n : 1);
    if (!p)
        c->oom = true;
    return p;
}

/* Returns the node with everything after the first .Response removed, NULL
 * when the node itself goes. New nodes where children change; leaves are
 * shared with the original tree. */
static tnode_t *cut_walk(cut_t *c, tnode_t *n, int depth)
{
    if (c->oom || depth > TREE_MAX_DEPTH)
        return NULL;
    if (cut_pred(c, n))
        return NULL;
    switch (n->type) {
    case TN_LIST: {
        tnode_t *m = cut_copy(c, n);
        tnode_t **nodes = cut_alloc(c, n->u.list.n * sizeof *nodes);
        if (!m || !nodes)
            return NULL;
        size_t k = 0;
        for (size_t i = 0; i < n->u.list.n; i++) {
            tnode_t *x = cut_walk(c, n->u.list.nodes[i], depth + 1);
            if (x)
                nodes[k++] = x;
        }
        m->u.list.nodes = nodes;
        m->u.list.n = k;
        return m;
    }
    case TN_IF:
    case TN_WITH:
    case TN_RANGE: {
        /* Go walks the branch: its list, then its else list; the pipe is
         * not walked. An else list reached after the cut (Ollama panics
         * there) is dropped. */
        tnode_t *m = cut_copy(c, n);
        if (!m)
            return NULL;
        m->u.branch.list = cut_walk(c, n->u.branch.list, depth + 1);
        if (!m->u.branch.list) {
            m->u.branch.list = node(c->t, TN_LIST);
            if (!m->u.branch.list) {
                c->oom = true;
                return NULL;
            }
        }
        if (n->u.branch.else_list)
            m->u.branch.else_list = cut_walk(c, n->u.branch.else_list, depth + 1);
        return m;
    }
    case TN_ACTION: {
        tnode_t *pipe = cut_walk(c, n->u.action.pipe, depth + 1);
        if (!pipe)
            return NULL;
        tnode_t *m = cut_copy(c, n);
        if (m)
            m->u.action.pipe = pipe;
        return m;
    }
    case TN_PIPE: {
        tnode_t *m = cut_copy(c, n);
        tnode_t **cmds = cut_alloc(c, n->u.pipe.n_cmds * sizeof *cmds);
        if (!m || !cmds)
            return NULL;
        size_t kc = 0;
        for (size_t i = 0; i < n->u.pipe.n_cmds; i++) {
            const tnode_t *cmd = n->u.pipe.cmds[i];
            tnode_t *mc = cut_copy(c, cmd);
            tnode_t **args = cut_alloc(c, cmd->u.cmd.n * sizeof *args);
            if (!mc || !args)
                return NULL;
            size_t ka = 0;
            for (size_t j = 0; j < cmd->u.cmd.n; j++) {
                tnode_t *a = cut_walk(c, cmd->u.cmd.args[j], depth + 1);
                if (a)
                    args[ka++] = a;
            }
            if (ka == 0)
                return NULL; /* an emptied command removes the whole pipe */
            mc->u.cmd.args = args;
            mc->u.cmd.n = ka;
            cmds[kc++] = mc;
        }
        if (kc == 0)
            return NULL;
        m->u.pipe.cmds = cmds;
        m->u.pipe.n_cmds = kc;
        return m;
    }
    default:
        return n;
    }
}

cr_status_t rn_tmpl_touch_up(rn_tmpl_t *t, bool ollama)
{
    if (!collect_idents(t, t->root, 0))
        return CR_E_NOMEM;
    for (size_t i = 0; i < t->n_defs; i++)
        if (!collect_idents(t, t->defs[i].body, 0))
            return CR_E_NOMEM;
    /* Ollama appends {{ .Response }} so a prompt-only template still has a
     * place for the response. */
    if (ollama && !rn_tmpl_uses(t, "messages") && !rn_tmpl_uses(t, "response") &&
        !append_response(t))
        return CR_E_NOMEM;
    cut_t c = {.t = t};
    t->cut_root = cut_walk(&c, t->root, 0);
    if (!t->cut_root && !c.oom)
        t->cut_root = node(t, TN_LIST);
    return c.oom || !t->cut_root ? CR_E_NOMEM : CR_OK;
}

/* ---- Node.String() ---- */

void rn_tmpl_quote_go(const char *s, size_t len, cr_buf_t *out)
{
    cr_buf_putc(out, '"');
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': cr_buf_puts(out, "\\\""); break;
        case '\\': cr_buf_puts(out, "\\\\"); break;
        case '\n': cr_buf_puts(out, "\\n"); break;
        case '\t': cr_buf_puts(out, "\\t"); break;
        case '\r': cr_buf_puts(out, "\\r"); break;
        default:
            if (c < 0x20 || c == 0x7f)
                cr_buf_printf(out, "\\x%02x", c);
            else
                cr_buf_putc(out, (char)c);
        }
    }
    cr_buf_putc(out, '"');
}

void rn_tmpl_node_to_string(const tnode_t *n, cr_buf_t *out)
{
    if (!n)
        return;
    switch (n->type) {
    case TN_FIELD:
        for (size_t i = 0; i < n->u.field.n; i++) {
            cr_buf_putc(out, '.');
            cr_buf_puts(out, n->u.field.idents[i]);
        }
        break;
    case TN_VAR:
        for (size_t i = 0; i < n->u.field.n; i++) {
            if (i)
                cr_buf_putc(out, '.');
            cr_buf_puts(out, n->u.field.idents[i]);
        }
        break;
    case TN_CHAIN:
        if (n->u.chain.node->type == TN_PIPE) {
            cr_buf_putc(out, '(');
            rn_tmpl_node_to_string(n->u.chain.node, out);
            cr_buf_putc(out, ')');
        } else {
            rn_tmpl_node_to_string(n->u.chain.node, out);
        }
        for (size_t i = 0; i < n->u.chain.n; i++) {
            cr_buf_putc(out, '.');
            cr_buf_puts(out, n->u.chain.idents[i]);
        }
        break;
    case TN_IDENT:
        cr_buf_puts(out, n->u.ident.name);
        break;
    case TN_DOT:
        cr_buf_putc(out, '.');
        break;
    case TN_NIL:
        cr_buf_puts(out, "nil");
        break;
    case TN_BOOL:
        cr_buf_puts(out, n->u.b ? "true" : "false");
        break;
    case TN_NUMBER:
        cr_buf_puts(out, n->u.num.text);
        break;
    case TN_STRING:
        rn_tmpl_quote_go(n->u.text.s, n->u.text.len, out);
        break;
    case TN_COMMAND:
        for (size_t i = 0; i < n->u.cmd.n; i++) {
            if (i)
                cr_buf_putc(out, ' ');
            const tnode_t *a = n->u.cmd.args[i];
            if (a->type == TN_PIPE) {
                cr_buf_putc(out, '(');
                rn_tmpl_node_to_string(a, out);
                cr_buf_putc(out, ')');
            } else {
                rn_tmpl_node_to_string(a, out);
            }
        }
        break;
    case TN_PIPE:
        for (size_t i = 0; i < n->u.pipe.n_decl; i++) {
            if (i)
                cr_buf_puts(out, ", ");
            rn_tmpl_node_to_string(n->u.pipe.decl[i], out);
        }
        if (n->u.pipe.n_decl)
            cr_buf_puts(out, n->u.pipe.is_assign ? " = " : " := ");
        for (size_t i = 0; i < n->u.pipe.n_cmds; i++) {
            if (i)
                cr_buf_puts(out, " | ");
            rn_tmpl_node_to_string(n->u.pipe.cmds[i], out);
        }
        break;
    case TN_ACTION:
        cr_buf_puts(out, "{{");
        rn_tmpl_node_to_string(n->u.action.pipe, out);
        cr_buf_puts(out, "}}");
        break;
    case TN_TEMPLATE:
        cr_buf_puts(out, "{{template ");
        rn_tmpl_quote_go(n->u.tmpl.name, strlen(n->u.tmpl.name), out);
        if (n->u.tmpl.pipe) {
            cr_buf_putc(out, ' ');
            rn_tmpl_node_to_string(n->u.tmpl.pipe, out);
        }
        cr_buf_puts(out, "}}");
        break;
    case TN_IF:
    case TN_RANGE:
    case TN_WITH:
        cr_buf_puts(out, n->type == TN_IF ? "{{if " : n->type == TN_RANGE ? "{{range " : "{{with ");
        rn_tmpl_node_to_string(n->u.branch.pipe, out);
        cr_buf_puts(out, "}}");
        break;
    case TN_BREAK:
        cr_buf_puts(out, "{{break}}");
        break;
    case TN_CONTINUE:
        cr_buf_puts(out, "{{continue}}");
        break;
    case TN_TEXT:
        rn_tmpl_quote_go(n->u.text.s, n->u.text.len, out);
        break;
    case TN_LIST:
        break;
    }
}
