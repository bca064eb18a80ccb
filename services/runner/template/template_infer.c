/* template_infer.c: what the output parsers learn from a template's tree:
 * the tool-call tag (Ollama's tools.parseTag) and the thinking tags
 * (Ollama's thinking.InferTags). Pure tree walks; no execution. */
#include "lib/prelude.h"
#include "services/runner/template/template_impl.h"

#include <ctype.h>

#define INFER_MAX_DEPTH (4 * RN_TMPL_MAX_NESTING)

static void copy_out(char *dst, size_t cap, const char *s, size_t n)
{
    if (!cap)
        return;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s, n);
    dst[n] = '\0';
}

static void trim(const char **s, size_t *n)
{
    while (*n && isspace((unsigned char)(*s)[0])) {
        (*s)++;
        (*n)--;
    }
    while (*n && isspace((unsigned char)(*s)[*n - 1]))
        (*n)--;
}

/* ---- tool-call tag ---- */

static bool pipe_mentions_tool_calls(const tnode_t *pipe)
{
    for (size_t i = 0; pipe && i < pipe->u.pipe.n_cmds; i++) {
        const tnode_t *c = pipe->u.pipe.cmds[i];
        for (size_t j = 0; j < c->u.cmd.n; j++) {
            const tnode_t *a = c->u.cmd.args[j];
            if (a->type != TN_FIELD)
                continue;
            for (size_t k = 0; k < a->u.field.n; k++)
                if (!strcmp(a->u.field.idents[k], "ToolCalls"))
                    return true;
        }
    }
    return false;
}

static const tnode_t *find_tool_call_if(const tnode_t *list, int depth)
{
    if (!list || depth > INFER_MAX_DEPTH)
        return NULL;
    for (size_t i = 0; i < list->u.list.n; i++) {
        const tnode_t *n = list->u.list.nodes[i];
        const tnode_t *r = NULL;
        switch (n->type) {
        case TN_IF:
            if (pipe_mentions_tool_calls(n->u.branch.pipe))
                return n;
            /* Not it: search its bodies like range and with. */
            /* fallthrough */
        case TN_RANGE:
        case TN_WITH:
            if ((r = find_tool_call_if(n->u.branch.list, depth + 1)))
                return r;
            if ((r = find_tool_call_if(n->u.branch.else_list, depth + 1)))
                return r;
            break;
        case TN_LIST:
            if ((r = find_tool_call_if(n, depth + 1)))
                return r;
            break;
        default:
            break;
        }
    }
    return NULL;
}

/* The first non-blank text, not looking past a nested block. */
static const tnode_t *find_text(const tnode_t *list, int depth)
{
    if (!list || depth > INFER_MAX_DEPTH)
        return NULL;
    for (size_t i = 0; i < list->u.list.n; i++) {
        const tnode_t *n = list->u.list.nodes[i];
        const tnode_t *r;
        switch (n->type) {
        case TN_TEXT: {
            const char *s = n->u.text.s;
            size_t len = n->u.text.len;
            trim(&s, &len);
            if (len)
                return n;
            break;
        }
        case TN_IF:
        case TN_RANGE:
        case TN_WITH:
            if ((r = find_text(n->u.branch.list, depth + 1)))
                return r;
            return find_text(n->u.branch.else_list, depth + 1);
        case TN_LIST:
            if ((r = find_text(n, depth + 1)))
                return r;
            break;
        default:
            break;
        }
    }
    return NULL;
}

void rn_tmpl_tool_tag(const rn_tmpl_t *t, char *tag, size_t cap)
{
    const tnode_t *iff = t ? find_tool_call_if(t->root, 0) : NULL;
    const tnode_t *text = iff ? find_text(iff->u.branch.list, 0) : NULL;
    if (!text) {
        copy_out(tag, cap, "{", 1);
        return;
    }
    /* Cut before the first '{' (a JSON call may follow) and trim; "\r\n"
     * counts as "\n", which trimming makes moot except inside. */
    const char *s = text->u.text.s;
    size_t n = text->u.text.len;
    const char *brace = memchr(s, '{', n);
    if (brace)
        n = (size_t)(brace - s);
    trim(&s, &n);
    if (!n) {
        copy_out(tag, cap, "{", 1);
        return;
    }
    char buf[512];
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < sizeof buf; i++) {
        if (s[i] == '\r' && i + 1 < n && s[i + 1] == '\n')
            continue;
        buf[k++] = s[i];
    }
    copy_out(tag, cap, buf, k);
}

/* ---- thinking tags ---- */

typedef struct infer {
    const tnode_t *anc[INFER_MAX_DEPTH + 8];
    int n_anc;
    const char *open, *close;
    size_t open_len, close_len;
} infer_t;

static bool visit_finds_messages(const tnode_t *n, int depth)
{
    if (!n || depth > INFER_MAX_DEPTH)
        return false;
    switch (n->type) {
    case TN_FIELD:
        return n->u.field.n > 0 && !strcmp(n->u.field.idents[0], "Messages");
    case TN_PIPE:
        for (size_t i = 0; i < n->u.pipe.n_cmds; i++)
            if (visit_finds_messages(n->u.pipe.cmds[i], depth + 1))
                return true;
        return false;
    case TN_COMMAND:
        for (size_t i = 0; i < n->u.cmd.n; i++)
            if (visit_finds_messages(n->u.cmd.args[i], depth + 1))
                return true;
        return false;
    default:
        return false;
    }
}

static void on_thinking(infer_t *in)
{
    const tnode_t *range = NULL;
    for (int i = in->n_anc - 1; i >= 0; i--)
        if (in->anc[i]->type == TN_RANGE) {
            range = in->anc[i];
            break;
        }
    if (!range || !visit_finds_messages(range->u.branch.pipe, 0))
        return;
    for (int i = in->n_anc - 1; i >= 0; i--) {
        const tnode_t *l = in->anc[i];
        if (l->type != TN_LIST || l->u.list.n == 0)
            continue;
        const tnode_t *first = l->u.list.nodes[0];
        const tnode_t *last = l->u.list.nodes[l->u.list.n - 1];
        if (first->type == TN_TEXT) {
            in->open = first->u.text.s;
            in->open_len = first->u.text.len;
            trim(&in->open, &in->open_len);
        }
        if (last->type == TN_TEXT) {
            in->close = last->u.text.s;
            in->close_len = last->u.text.len;
            trim(&in->close, &in->close_len);
        }
        break;
    }
}

static void visit(infer_t *in, const tnode_t *n)
{
    if (!n || in->n_anc >= INFER_MAX_DEPTH)
        return;
    in->anc[in->n_anc++] = n;
    switch (n->type) {
    case TN_FIELD:
        if (n->u.field.n > 0 && !strcmp(n->u.field.idents[0], "Thinking"))
            on_thinking(in);
        break;
    case TN_LIST:
        for (size_t i = 0; i < n->u.list.n; i++)
            visit(in, n->u.list.nodes[i]);
        break;
    case TN_IF:
    case TN_RANGE:
    case TN_WITH:
        visit(in, n->u.branch.pipe);
        visit(in, n->u.branch.list);
        visit(in, n->u.branch.else_list);
        break;
    case TN_ACTION:
        visit(in, n->u.action.pipe);
        break;
    case TN_TEMPLATE:
        visit(in, n->u.tmpl.pipe);
        break;
    case TN_PIPE:
        for (size_t i = 0; i < n->u.pipe.n_cmds; i++)
            visit(in, n->u.pipe.cmds[i]);
        break;
    case TN_COMMAND:
        for (size_t i = 0; i < n->u.cmd.n; i++)
            visit(in, n->u.cmd.args[i]);
        break;
    default:
        break;
    }
    in->n_anc--;
}

void rn_tmpl_thinking_tags(const rn_tmpl_t *t, char *open, size_t open_cap, char *close,
                           size_t close_cap)
{
    infer_t *in = calloc(1, sizeof *in);
    if (in && t)
        visit(in, t->root);
    copy_out(open, open_cap, in && in->open ? in->open : "", in && in->open ? in->open_len : 0);
    copy_out(close, close_cap, in && in->close ? in->close : "",
             in && in->close ? in->close_len : 0);
    free(in);
}
