#include "lib/prelude.h"

/* grammar.c: structured output at run time. The matcher keeps a few
 * threads (anyOf alternatives, declared vs. free object keys), each a stack
 * of frames, and advances them one byte at a time; masking walks the
 * vocabulary sorted by bytes as a trie ("tokens"). Compiling a format is
 * grammar_schema.c's. See grammar.h. */

#include "services/runner/grammar/grammar.h"
#include "services/runner/grammar/grammar_impl.h"

#include <math.h>

/* ---- matching ---------------------------------------------------------- */

static frame_t mkframe(int kind, uint32_t node)
{
    frame_t f;
    memset(&f, 0, sizeof f);
    f.kind = (uint8_t)kind;
    f.node = node;
    return f;
}

static void copy_thread(thread_t *dst, const thread_t *src)
{
    dst->depth = src->depth;
    dst->level = src->level;
    memcpy(dst->f, src->f, src->depth * sizeof(frame_t));
}

static void copy_state(mstate_t *dst, const mstate_t *src)
{
    dst->n = src->n;
    for (uint32_t i = 0; i < src->n; i++)
        copy_thread(&dst->t[i], &src->t[i]);
}

static void emit(mstate_t *out, const thread_t *t)
{
    for (uint32_t i = 0; i < out->n; i++) {
        const thread_t *o = &out->t[i];
        if (o->depth == t->depth && o->level == t->level &&
            !memcmp(o->f, t->f, t->depth * sizeof(frame_t)))
            return;
    }
    if (out->n < MAX_THREADS) /* dropping an alternative keeps output valid */
        copy_thread(&out->t[out->n++], t);
}

static bool push(thread_t *t, frame_t f)
{
    if (t->depth >= MAX_FRAMES)
        return false;
    t->f[t->depth++] = f;
    return true;
}

/* Pops the finished top frame and tells its parent. */
static void pop_done(thread_t *t)
{
    t->depth--;
    if (!t->depth)
        return;
    frame_t *p = &t->f[t->depth - 1];
    p->ws = 0;
    if (p->kind == K_OBJ && p->st == O_FREEKEY) {
        p->st = O_COLON;
        p->c = FREE_KEY;
    } else if (p->kind == K_OBJ) {
        p->st = O_AFTER;
    }
    else if (p->kind == K_ARR)
        p->st = A_AFTER;
}

static bool is_ws(int b)
{
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}

/* ws: 0 none yet, 1 after one space, 2+k after a newline and k indents. */
static bool ws_step(const rn_grammar_t *g, uint8_t *ws, int b)
{
    if (b == '\n' && *ws == 0) {
        *ws = 2;
        return true;
    }
    if (b == ' ' && *ws == 0) {
        *ws = 1;
        return true;
    }
    if ((b == ' ' || b == '\t') && *ws >= 2 && *ws - 2 < g->o.max_indent) {
        (*ws)++;
        return true;
    }
    return false;
}

static bool fits(const rn_grammar_t *g, int32_t node, unsigned level)
{
    return node != NO_NODE && g->nodes[node].need + level <= (unsigned)g->o.max_depth;
}

/* Declared properties a key may name now, as a bit mask. */
static uint64_t key_mask(const rn_grammar_t *g, const node_t *n, uint32_t s, unsigned level)
{
    uint64_t m = 0;
    uint32_t end = s < n->n_req ? s + 1 : n->n_props;
    for (uint32_t i = s; i < end; i++)
        if (fits(g, g->props[n->prop_lo + i].node, level))
            m |= 1ull << i;
    return m;
}

static bool free_key_ok(const rn_grammar_t *g, const node_t *n, const frame_t *f, unsigned level)
{
    return n->additional != NO_NODE && f->a >= n->n_req && f->b < n->max_members &&
           fits(g, n->additional, level);
}

static bool str_can_add(const rn_grammar_t *g, const node_t *n, const frame_t *f)
{
    return f->c < n->max_len && (f->a < (uint32_t)g->o.max_string_bytes || f->c < n->min_len);
}

static int hexval(int b)
{
    if (b >= '0' && b <= '9')
        return b - '0';
    if (b >= 'a' && b <= 'f')
        return b - 'a' + 10;
    if (b >= 'A' && b <= 'F')
        return b - 'A' + 10;
    return -1;
}

/* UTF-8: ws holds the continuation bytes still due (bits 0-1) and the
 * range the next one must fall in (bits 2-4). */
static const uint8_t cont_lo_g[5] = {0x80, 0xA0, 0x80, 0x90, 0x80};
static const uint8_t cont_hi_g[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};

static void step_thread(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out);

static void step_string(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    if (f->st == S_NORMAL) {
        unsigned rem = f->ws & 3, code = f->ws >> 2;
        if (rem) {
            if (b < cont_lo_g[code] || b > cont_hi_g[code])
                return;
            f->ws = (uint8_t)(rem - 1);
            f->a++;
            emit(out, t);
            return;
        }
        if (b == '"') {
            if (f->c >= n->min_len) {
                pop_done(t);
                emit(out, t);
            }
            return;
        }
        if (b < 0x20 || !str_can_add(g, n, f))
            return;
        if (b == '\\') {
            f->st = S_ESC;
        } else if (b >= 0x80) {
            unsigned r, c = 0;
            if (b >= 0xC2 && b <= 0xDF)
                r = 1;
            else if (b == 0xE0)
                r = 2, c = 1;
            else if (b == 0xED)
                r = 2, c = 2;
            else if (b >= 0xE1 && b <= 0xEF)
                r = 2;
            else if (b == 0xF0)
                r = 3, c = 3;
            else if (b >= 0xF1 && b <= 0xF3)
                r = 3;
            else if (b == 0xF4)
                r = 3, c = 4;
            else
                return;
            f->ws = (uint8_t)(r | c << 2);
        }
        f->a++;
        f->c++;
        emit(out, t);
        return;
    }
    if (f->st == S_ESC) {
        if (b == 'u') {
            f->st = S_U1;
            f->m = 0;
        } else if (b && strchr("\"\\/bfnrt", b)) {
            f->st = S_NORMAL;
        } else {
            return;
        }
        f->a++;
        emit(out, t);
        return;
    }
    int v = hexval(b);
    if (v < 0)
        return;
    f->m = f->m * 16 + (unsigned)v;
    f->a++;
    if (f->st == S_U2 && f->m >= 0xD8 && f->m <= 0xDF)
        return; /* surrogates: jansson refuses lone ones; refuse all */
    if (f->st == S_U4) {
        if (f->m == 0)
            return; /* \u0000 */
        f->st = S_NORMAL;
    } else {
        f->st++;
    }
    emit(out, t);
}

static int64_t pow10_i64(int e)
{
    int64_t r = 1;
    while (e-- > 0)
        r *= 10;
    return r;
}

/* Bounded numbers: is some value reachable from this prefix within the
 * node's bounds (all in units of 10^-scale)? The completions of a prefix
 * form one integer range per count of integer digits still to come. */
static bool range_meets(const node_t *n, bool neg, int64_t lo, int64_t hi)
{
    if (neg) {
        int64_t t = lo;
        lo = -hi;
        hi = -t;
    }
    return lo <= n->hi && hi >= n->lo;
}

static bool bounded_feasible(const node_t *n, const frame_t *f)
{
    int S = n->scale, D = S ? MAX_BOUNDED_NUM_DIGITS : MAX_INT_DIGITS;
    bool neg = f->x & 2;
    int64_t unit = pow10_i64(S);
    switch (f->st) {
    case N_START:
    case N_MINUS:
        return range_meets(n, neg, 0, pow10_i64(D + S) - 1);
    case N_ZERO:
        return range_meets(n, neg, 0, unit - 1);
    case N_INT:
        for (int j = 0; (int)f->a + j <= D; j++) {
            int64_t w = pow10_i64(j + S);
            if (range_meets(n, neg, (int64_t)f->m * w, ((int64_t)f->m + 1) * w - 1))
                return true;
        }
        return false;
    case N_DOT:
        return range_meets(n, neg, (int64_t)f->m * unit, (int64_t)f->m * unit + unit - 1);
    case N_FRAC: {
        int64_t w = pow10_i64(S - (int)f->c);
        int64_t v = (int64_t)f->m * unit + (int64_t)f->pad * w;
        return range_meets(n, neg, v, v + w - 1);
    }
    default:
        return false;
    }
}

/* The exact value of a finished bounded number, in units of 10^-scale. */
static bool bounded_value_ok(const node_t *n, const frame_t *f)
{
    int S = n->scale;
    int64_t v = (int64_t)f->m * pow10_i64(S);
    if (f->st == N_FRAC)
        v += (int64_t)f->pad * pow10_i64(S - (int)f->c);
    if (f->x & 2)
        v = -v;
    return v >= n->lo && v <= n->hi;
}

/* A bounded number's step: plain syntax (no exponent, at most `scale`
 * fraction digits) and a prefix that can still land in the bounds. */
static bool step_bounded(const node_t *n, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    int d = b >= '0' && b <= '9' ? b - '0' : -1;
    int S = n->scale, D = S ? MAX_BOUNDED_NUM_DIGITS : MAX_INT_DIGITS;
    switch (f->st) {
    case N_START:
    case N_MINUS:
        if (b == '-' && f->st == N_START)
            f->st = N_MINUS, f->x |= 2;
        else if (d == 0)
            f->st = N_ZERO, f->m = 0;
        else if (d > 0)
            f->st = N_INT, f->a = 1, f->m = (uint64_t)d;
        else
            return false;
        break;
    case N_ZERO:
    case N_INT:
        if (d >= 0) {
            if (f->st == N_ZERO || (int)f->a >= D)
                return false;
            f->a++;
            f->m = f->m * 10 + (uint64_t)d;
        } else if (b == '.' && S > 0) {
            f->st = N_DOT;
        } else {
            return bounded_value_ok(n, f);
        }
        break;
    case N_DOT:
        if (d < 0)
            return false;
        f->st = N_FRAC, f->c = 1, f->pad = (uint32_t)d;
        break;
    case N_FRAC:
        if (d < 0)
            return bounded_value_ok(n, f);
        if ((int)f->c >= S)
            return false;
        f->c++;
        f->pad = f->pad * 10 + (uint32_t)d;
        break;
    default:
        return false;
    }
    if (bounded_feasible(n, f))
        emit(out, t);
    return false;
}

/* Returns true if the number ended before b (the caller re-steps b). */
static bool step_number(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    if (n->bounded)
        return step_bounded(n, t, b, out);
    bool digit = b >= '0' && b <= '9';
    bool integer = f->x & 1;
    switch (f->st) {
    case N_START:
    case N_MINUS:
        if (b == '-' && f->st == N_START)
            f->st = N_MINUS;
        else if (b == '0')
            f->st = N_ZERO;
        else if (digit)
            f->st = N_INT, f->a = 1;
        else
            return false;
        break;
    case N_ZERO:
    case N_INT:
        if (digit) {
            if (f->st == N_ZERO || f->a >= MAX_INT_DIGITS)
                return false;
            f->a++;
        } else if (b == '.' && !integer) {
            f->st = N_DOT;
        } else if ((b == 'e' || b == 'E') && !integer) {
            f->st = N_E;
        } else {
            return true;
        }
        break;
    case N_DOT:
        if (!digit)
            return false;
        f->st = N_FRAC, f->c = 1;
        break;
    case N_FRAC:
        if (digit) {
            if (f->c >= MAX_FRAC_DIGITS)
                return false;
            f->c++;
        } else if (b == 'e' || b == 'E') {
            f->st = N_E;
        } else {
            return true;
        }
        break;
    case N_E:
    case N_ESIGN:
        if ((b == '+' || b == '-') && f->st == N_E)
            f->st = N_ESIGN;
        else if (digit)
            f->st = N_EXP, f->c = 1;
        else
            return false;
        break;
    case N_EXP:
        if (!digit)
            return true;
        if (f->c >= MAX_EXP_DIGITS)
            return false;
        f->c++;
        break;
    default:
        return false;
    }
    emit(out, t);
    return false;
}

static bool number_can_end(const rn_grammar_t *g, const frame_t *f)
{
    const node_t *n = &g->nodes[f->node];
    bool syntax = f->st == N_ZERO || f->st == N_INT || f->st == N_FRAC || f->st == N_EXP;
    return syntax && (!n->bounded || bounded_value_ok(n, f));
}

/* The candidates lits[a..m) share their first c bytes and are sorted, so
 * a literal that ends here comes first, and those continuing with a given
 * byte are one run: key(i) = -1 if it ends at c, else its byte at c, never
 * decreases over the range. */
static int lit_key(const rn_grammar_t *g, uint32_t i, uint32_t c)
{
    const lit_t *l = &g->lits[i];
    return l->len == c ? -1 : (unsigned char)l->s[c];
}

/* First index in [lo, hi) whose key is >= k. */
static uint32_t lit_lower(const rn_grammar_t *g, uint32_t lo, uint32_t hi, uint32_t c, int k)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (lit_key(g, mid, c) < k)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static bool lit_can_end(const rn_grammar_t *g, const frame_t *f)
{
    return f->a < f->m && g->lits[f->a].len == f->c;
}

/* Returns true if the literal ended before b (the caller re-steps b). */
static bool step_lit(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    uint32_t a = f->a, m = (uint32_t)f->m;
    uint32_t lo = lit_lower(g, a, m, f->c, b), hi = lit_lower(g, lo, m, f->c, b + 1);
    if (lo < hi) {
        f->a = lo;
        f->m = hi;
        f->c++;
        emit(out, t);
        return false;
    }
    return lit_can_end(g, f);
}

static void start_key(const rn_grammar_t *g, thread_t *t, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    uint64_t mask = key_mask(g, n, f->a, t->level);
    if (mask) {
        thread_t t2;
        copy_thread(&t2, t);
        frame_t *f2 = &t2.f[t2.depth - 1];
        f2->st = O_KEY;
        f2->c = 0;
        f2->m = mask;
        f2->ws = 0;
        emit(out, &t2);
    }
    if (free_key_ok(g, n, f, t->level)) {
        f->st = O_FREEKEY;
        f->ws = 0;
        frame_t s = mkframe(K_STR, (uint32_t)g->any);
        s.x = STR_KEY;
        if (push(t, s))
            emit(out, t);
    }
}

static void close_container(thread_t *t, mstate_t *out)
{
    t->level--;
    pop_done(t);
    emit(out, t);
}

static void step_object(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    switch (f->st) {
    case O_OPEN:
    case O_COMMA:
    case O_COLON:
    case O_AFTER:
        if (is_ws(b)) {
            if (ws_step(g, &f->ws, b))
                emit(out, t);
            return;
        }
        break;
    default:
        break;
    }
    switch (f->st) {
    case O_OPEN:
    case O_COMMA:
        if (b == '}' && f->st == O_OPEN && f->a >= n->n_req)
            close_container(t, out);
        else if (b == '"')
            start_key(g, t, out);
        return;
    case O_KEY: {
        uint32_t pos = f->c;
        if (b == '"') { /* closes the key, or is an escaped quote inside it */
            for (uint32_t i = 0; i < n->n_props; i++)
                if ((f->m >> i & 1) && g->props[n->prop_lo + i].len == pos) {
                    f->st = O_COLON;
                    f->c = i;
                    f->ws = 0;
                    emit(out, t);
                    return;
                }
        }
        uint64_t m2 = 0;
        for (uint32_t i = 0; i < n->n_props; i++) {
            const prop_t *p = &g->props[n->prop_lo + i];
            if ((f->m >> i & 1) && p->len > pos && (unsigned char)p->enc[pos] == b)
                m2 |= 1ull << i;
        }
        if (m2) {
            f->m = m2;
            f->c++;
            emit(out, t);
        }
        return;
    }
    case O_COLON: {
        if (b != ':')
            return;
        int32_t child;
        if (f->c == FREE_KEY) {
            child = n->additional;
        } else {
            child = g->props[n->prop_lo + f->c].node;
            f->a = f->c + 1;
        }
        f->b++;
        f->st = O_VALUE;
        f->ws = 0;
        f->m = 0;
        if (push(t, mkframe(K_VALUE, (uint32_t)child)))
            emit(out, t);
        return;
    }
    case O_AFTER:
        if (b == ',') {
            if (key_mask(g, n, f->a, t->level) || free_key_ok(g, n, f, t->level)) {
                f->st = O_COMMA;
                f->ws = 0;
                emit(out, t);
            }
        } else if (b == '}' && f->a >= n->n_req) {
            close_container(t, out);
        }
        return;
    default:
        return;
    }
}

/* Returns true if b must be stepped again on the (new) top frame. */
static bool step_array(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    bool item_ok = f->b < n->max_items && fits(g, n->items, t->level);
    if (is_ws(b)) {
        if (f->st != A_ITEM && ws_step(g, &f->ws, b))
            emit(out, t);
        return false;
    }
    if (f->st == A_OPEN || f->st == A_AFTER) {
        if (b == ']') {
            if (f->b >= n->min_items)
                close_container(t, out);
            return false;
        }
        if (!item_ok)
            return false;
        if (f->st == A_AFTER && b != ',')
            return false;
        if (f->st == A_OPEN && b == ',')
            return false;
        f->b++;
        f->st = A_ITEM;
        f->ws = 0;
        if (!push(t, mkframe(K_VALUE, (uint32_t)n->items)))
            return false;
        if (b == ',') {
            emit(out, t);
            return false;
        }
        return true; /* the first item starts with b */
    }
    return false;
}

static void step_value(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out);

static void step_thread(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    for (;;) {
        if (!t->depth)
            return; /* the document is complete: nothing may follow */
        frame_t *f = &t->f[t->depth - 1];
        switch (f->kind) {
        case K_VALUE:
            step_value(g, t, b, out);
            return;
        case K_OBJ:
            step_object(g, t, b, out);
            return;
        case K_ARR:
            if (!step_array(g, t, b, out))
                return;
            continue;
        case K_STR:
            step_string(g, t, b, out);
            return;
        case K_NUM:
            if (!step_number(g, t, b, out))
                return;
            pop_done(t);
            continue;
        case K_LIT:
            if (!step_lit(g, t, b, out))
                return;
            pop_done(t);
            continue;
        default:
            return;
        }
    }
}

static void step_value(const rn_grammar_t *g, thread_t *t, int b, mstate_t *out)
{
    frame_t *f = &t->f[t->depth - 1];
    const node_t *n = &g->nodes[f->node];
    if (is_ws(b)) {
        if (ws_step(g, &f->ws, b))
            emit(out, t);
        return;
    }
    if (n->alt_n) {
        for (uint32_t i = 0; i < n->alt_n; i++) {
            int32_t alt = g->alts[n->alt_lo + i];
            if (!fits(g, alt, t->level))
                continue;
            thread_t t2;
            copy_thread(&t2, t);
            t2.f[t2.depth - 1].node = (uint32_t)alt;
            step_value(g, &t2, b, out);
        }
        return;
    }
    frame_t nf;
    if (n->has_lits) {
        nf = mkframe(K_LIT, f->node);
        nf.a = n->lit_lo;
        nf.m = n->lit_hi;
    } else if (b == '{' || b == '[') {
        bool obj = b == '{';
        uint32_t need = obj ? n->need_obj : n->need_arr;
        if (!(n->types & (obj ? T_OBJ : T_ARR)) || need + t->level > (unsigned)g->o.max_depth)
            return;
        *f = mkframe(obj ? K_OBJ : K_ARR, f->node);
        f->st = obj ? O_OPEN : A_OPEN;
        t->level++;
        emit(out, t);
        return;
    } else if (b == '"') {
        if (!(n->types & T_STR))
            return;
        *f = mkframe(K_STR, f->node);
        f->x = STR_VALUE;
        emit(out, t);
        return;
    } else if ((b == 't' || b == 'f') && (n->types & T_BOOL)) {
        nf = mkframe(K_LIT, f->node);
        nf.a = g->bool_lo;
        nf.m = g->bool_lo + 2;
    } else if (b == 'n' && (n->types & T_NULL)) {
        nf = mkframe(K_LIT, f->node);
        nf.a = g->null_lo;
        nf.m = g->null_lo + 1;
    } else if ((b == '-' || (b >= '0' && b <= '9')) && (n->types & (T_INT | T_NUM))) {
        nf = mkframe(K_NUM, f->node);
        nf.x = !(n->types & T_NUM);
    } else {
        return;
    }
    *f = nf;
    step_thread(g, t, b, out);
}

static bool step_state(const rn_grammar_t *g, const mstate_t *in, int b, mstate_t *out)
{
    thread_t t;
    out->n = 0;
    for (uint32_t i = 0; i < in->n; i++) {
        copy_thread(&t, &in->t[i]);
        step_thread(g, &t, b, out);
    }
    return out->n > 0;
}

static bool thread_can_end(const rn_grammar_t *g, const thread_t *t)
{
    if (!t->depth)
        return true;
    if (t->depth != 1)
        return false;
    const frame_t *f = &t->f[0];
    return (f->kind == K_NUM && number_can_end(g, f)) || (f->kind == K_LIT && lit_can_end(g, f));
}

void rn_grammar_reset(rn_grammar_t *g)
{
    g->cur.n = 1;
    g->cur.t[0].depth = 0;
    g->cur.t[0].level = 0;
    push(&g->cur.t[0], mkframe(K_VALUE, (uint32_t)g->root));
}

static bool run_bytes(rn_grammar_t *g, const char *bytes, size_t n, const mstate_t **res)
{
    const mstate_t *in = &g->cur;
    for (size_t i = 0; i < n; i++) {
        mstate_t *o = &g->scratch[i & 1];
        if (!step_state(g, in, (unsigned char)bytes[i], o))
            return false;
        in = o;
    }
    *res = in;
    return true;
}

bool rn_grammar_allows(rn_grammar_t *g, const char *bytes, size_t n)
{
    const mstate_t *res;
    return run_bytes(g, bytes, n, &res);
}

bool rn_grammar_feed(rn_grammar_t *g, const char *bytes, size_t n)
{
    const mstate_t *res;
    if (!run_bytes(g, bytes, n, &res))
        return false;
    if (res != &g->cur)
        copy_state(&g->cur, res);
    return true;
}

bool rn_grammar_is_complete(const rn_grammar_t *g)
{
    for (uint32_t i = 0; i < g->cur.n; i++)
        if (thread_can_end(g, &g->cur.t[i]))
            return true;
    return false;
}

bool rn_grammar_can_continue(const rn_grammar_t *g)
{
    for (uint32_t i = 0; i < g->cur.n; i++)
        if (g->cur.t[i].depth)
            return true;
    return false;
}

/* ---- tokens ------------------------------------------------------------ */

enum { TF_EOG = 1, TF_SKIP = 2 }; /* SKIP: empty or too long: never allowed */

struct rn_grammar_vocab {
    int32_t n;
    uint8_t *bytes;   /* all pieces */
    uint32_t *off;    /* [n] */
    uint16_t *len;    /* [n] */
    uint8_t *flags;   /* [n] TF_* */
    uint16_t *chars;  /* [n] characters if the piece is "plain": whole valid
                         UTF-8 with no quote, backslash or control byte, so
                         it may be appended to a string as is; else 0 */
    int32_t *order;   /* [n_order] ids with bytes, sorted by bytes */
    uint16_t *lcp;    /* [n_order] common prefix with the previous in order */
    int32_t n_order;
    int32_t *other;   /* [n_other] ids not in order */
    int32_t n_other;
    uint32_t max_len; /* longest piece in order */
};

void rn_grammar_vocab_destroy(rn_grammar_vocab_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_grammar_vocab_t *v = *self_p;
    free(v->bytes);
    free(v->off);
    free(v->len);
    free(v->flags);
    free(v->chars);
    free(v->order);
    free(v->lcp);
    free(v->other);
    free(v);
    *self_p = NULL;
}

int32_t rn_grammar_vocab_size(const rn_grammar_vocab_t *v)
{
    return v->n;
}

static int cmp_tok(const void *pa, const void *pb, void *arg)
{
    const rn_grammar_vocab_t *v = arg;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    uint16_t la = v->len[a], lb = v->len[b];
    int r = memcmp(v->bytes + v->off[a], v->bytes + v->off[b], CR_MIN(la, lb));
    if (r)
        return r;
    if (la != lb)
        return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Fills order/lcp/other once bytes, off, len and flags are set. */
/* Characters in p[0..len) if it is plain string content, else 0. */
static uint16_t plain_chars(const uint8_t *p, size_t len)
{
    uint16_t chars = 0;
    for (size_t i = 0; i < len;) {
        unsigned b = p[i], r, code = 0;
        if (b < 0x20 || b == '"' || b == '\\')
            return 0;
        if (b < 0x80)
            r = 0;
        else if (b >= 0xC2 && b <= 0xDF)
            r = 1;
        else if (b == 0xE0)
            r = 2, code = 1;
        else if (b == 0xED)
            r = 2, code = 2;
        else if (b >= 0xE1 && b <= 0xEF)
            r = 2;
        else if (b == 0xF0)
            r = 3, code = 3;
        else if (b >= 0xF1 && b <= 0xF3)
            r = 3;
        else if (b == 0xF4)
            r = 3, code = 4;
        else
            return 0;
        i++;
        for (unsigned k = 0; k < r; k++, i++) {
            if (i >= len || p[i] < cont_lo_g[k ? 0 : code] || p[i] > cont_hi_g[k ? 0 : code])
                return 0;
        }
        chars++;
    }
    return chars;
}

static cr_status_t vocab_index(rn_grammar_vocab_t *v, cr_err_t *err)
{
    v->chars = malloc((size_t)v->n * sizeof *v->chars);
    if (!v->chars)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < v->n; i++)
        v->chars[i] = v->flags[i] ? 0 : plain_chars(v->bytes + v->off[i], v->len[i]);
    v->order = malloc((size_t)v->n * sizeof *v->order);
    v->lcp = malloc((size_t)v->n * sizeof *v->lcp);
    v->other = malloc((size_t)v->n * sizeof *v->other);
    if (!v->order || !v->lcp || !v->other)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (int32_t i = 0; i < v->n; i++) {
        if (v->flags[i])
            v->other[v->n_other++] = i;
        else
            v->order[v->n_order++] = i;
    }
    qsort_r(v->order, (size_t)v->n_order, sizeof *v->order, cmp_tok, v);
    for (int32_t i = 0; i < v->n_order; i++) {
        int32_t t = v->order[i];
        v->max_len = CR_MAX(v->max_len, v->len[t]);
        uint16_t l = 0;
        if (i) {
            int32_t p = v->order[i - 1];
            const uint8_t *a = v->bytes + v->off[p], *b = v->bytes + v->off[t];
            uint16_t mx = CR_MIN(v->len[p], v->len[t]);
            while (l < mx && a[l] == b[l])
                l++;
        }
        v->lcp[i] = l;
    }
    return CR_OK;
}

cr_status_t rn_grammar_vocab_new_pieces(int32_t n, const char *const *pieces, const size_t *lens,
                                        const bool *is_eog, rn_grammar_vocab_t **out,
                                        cr_err_t *err)
{
    *out = NULL;
    if (n < 1 || (uint32_t)n > RN_TOK_MAX_VOCAB)
        return cr_err_set(err, CR_E_INVALID, "vocabulary size %d out of range", (int)n);
    rn_grammar_vocab_t *v = calloc(1, sizeof *v);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    v->n = n;
    size_t total = 0;
    for (int32_t i = 0; i < n; i++)
        if (lens[i] <= RN_GRAMMAR_MAX_TOKEN_BYTES)
            total += lens[i];
    v->bytes = malloc(total ? total : 1);
    v->off = malloc((size_t)n * sizeof *v->off);
    v->len = malloc((size_t)n * sizeof *v->len);
    v->flags = malloc((size_t)n);
    cr_status_t st;
    if (!v->bytes || !v->off || !v->len || !v->flags) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto fail;
    }
    size_t at = 0;
    for (int32_t i = 0; i < n; i++) {
        size_t l = lens[i];
        v->flags[i] = 0;
        if (is_eog && is_eog[i])
            v->flags[i] = TF_EOG;
        else if (l == 0 || l > RN_GRAMMAR_MAX_TOKEN_BYTES)
            v->flags[i] = TF_SKIP;
        if (l > RN_GRAMMAR_MAX_TOKEN_BYTES)
            l = 0;
        memcpy(v->bytes + at, pieces[i], l);
        v->off[i] = (uint32_t)at;
        v->len[i] = (uint16_t)l;
        at += l;
    }
    if ((st = vocab_index(v, err)))
        goto fail;
    *out = v;
    return CR_OK;
fail:
    rn_grammar_vocab_destroy(&v);
    return st;
}

cr_status_t rn_grammar_vocab_new(const rn_tokenizer_t *tok, rn_grammar_vocab_t **out,
                                 cr_err_t *err)
{
    *out = NULL;
    size_t nv = rn_tokenizer_n_vocab(tok);
    size_t cap = rn_tokenizer_max_piece_bytes(tok);
    if (nv < 1 || nv > RN_TOK_MAX_VOCAB)
        return cr_err_set(err, CR_E_INVALID, "vocabulary size %zu out of range", nv);
    /* Pieces are read into one arena, then handed to the generic builder. */
    char *arena = NULL, *tmp = malloc(cap ? cap : 1);
    char **ptrs = malloc(nv * sizeof *ptrs);
    size_t *lens = malloc(nv * sizeof *lens);
    bool *eog = malloc(nv * sizeof *eog);
    size_t *offs = malloc(nv * sizeof *offs);
    cr_status_t st = CR_OK;
    cr_buf_t ar;
    cr_buf_init(&ar, (size_t)1 << 31);
    if (!tmp || !ptrs || !lens || !eog || !offs) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < nv; i++) {
        size_t n = 0;
        eog[i] = rn_tokenizer_is_eog(tok, (int32_t)i);
        if (rn_token_piece(tok, (int32_t)i, 0, tmp, cap, &n, NULL) != CR_OK)
            n = 0;
        offs[i] = ar.len;
        lens[i] = n;
        if (n > RN_GRAMMAR_MAX_TOKEN_BYTES) {
            lens[i] = RN_GRAMMAR_MAX_TOKEN_BYTES + 1; /* never allowed */
            continue;
        }
        if (n && (st = cr_buf_append(&ar, tmp, n))) {
            st = cr_err_set(err, st, "token pieces: out of memory");
            goto out;
        }
    }
    arena = ar.data;
    for (size_t i = 0; i < nv; i++)
        ptrs[i] = arena ? arena + offs[i] : tmp;
    st = rn_grammar_vocab_new_pieces((int32_t)nv, (const char *const *)ptrs, lens, eog, out, err);
out:
    cr_buf_free(&ar);
    free(tmp);
    free(ptrs);
    free(lens);
    free(eog);
    free(offs);
    return st;
}

/* Masking's fast path: inside a string, a plain piece of `chars`
 * characters and `bytes` bytes is accepted as is if some thread has room.
 * The check is conservative; what it does not accept goes the slow way. */
typedef struct str_room {
    uint32_t n;
    struct {
        uint32_t chars_left;  /* before maxLength */
        uint32_t bytes_left;  /* before max_string_bytes */
        uint32_t below_min;   /* characters still under minLength */
    } t[MAX_THREADS];
} str_room_t;

static bool string_room(const rn_grammar_t *g, str_room_t *r)
{
    r->n = 0;
    for (uint32_t i = 0; i < g->cur.n; i++) {
        const thread_t *t = &g->cur.t[i];
        if (!t->depth)
            continue;
        const frame_t *f = &t->f[t->depth - 1];
        if (f->kind != K_STR || f->st != S_NORMAL || (f->ws & 3))
            continue;
        const node_t *n = &g->nodes[f->node];
        uint32_t mb = (uint32_t)g->o.max_string_bytes;
        r->t[r->n].chars_left = n->max_len - f->c;
        r->t[r->n].bytes_left = f->a < mb ? mb - f->a : 0;
        r->t[r->n].below_min = f->c < n->min_len ? n->min_len - f->c : 0;
        r->n++;
    }
    return r->n > 0;
}

static bool room_fits(const str_room_t *r, uint32_t chars, uint32_t bytes)
{
    for (uint32_t i = 0; i < r->n; i++)
        if (chars <= r->t[i].chars_left &&
            (bytes <= r->t[i].bytes_left || chars <= r->t[i].below_min))
            return true;
    return false;
}

static bool ensure_dfs(rn_grammar_t *g, size_t depth)
{
    if (g->dfs_cap >= depth)
        return true;
    mstate_t *d = realloc(g->dfs, depth * sizeof *d);
    if (!d)
        return false;
    g->dfs = d;
    g->dfs_cap = depth;
    return true;
}

size_t rn_grammar_mask(rn_grammar_t *g, const rn_grammar_vocab_t *v, float *logits,
                       int32_t n_vocab)
{
    size_t allowed = 0;
    bool complete = rn_grammar_is_complete(g);
    for (int32_t i = v->n; i < n_vocab; i++)
        logits[i] = -INFINITY;
    for (int32_t k = 0; k < v->n_other; k++) {
        int32_t id = v->other[k];
        if (id >= n_vocab)
            continue;
        if ((v->flags[id] & TF_EOG) && complete)
            allowed++;
        else
            logits[id] = -INFINITY;
    }
    /* The first call sizes the per-depth states to the longest token; if
     * that allocation fails, nothing but EOG is allowed. */
    if (!ensure_dfs(g, (size_t)v->max_len + 1)) {
        for (int32_t k = 0; k < v->n_order; k++)
            if (v->order[k] < n_vocab)
                logits[v->order[k]] = -INFINITY;
        return allowed;
    }
    copy_state(&g->dfs[0], &g->cur);
    str_room_t room;
    bool in_str = string_room(g, &room);
    uint32_t valid = 0; /* dfs[0..valid] hold the states of the current prefix */
    for (int32_t k = 0; k < v->n_order; k++) {
        int32_t id = v->order[k];
        uint32_t len = v->len[id];
        const uint8_t *p = v->bytes + v->off[id];
        if (valid > v->lcp[k])
            valid = v->lcp[k];
        if (in_str && v->chars[id] && room_fits(&room, v->chars[id], len)) {
            allowed += id < n_vocab; /* plain text inside a string */
            continue;
        }
        bool ok = true;
        while (valid < len) {
            if (!step_state(g, &g->dfs[valid], p[valid], &g->dfs[valid + 1])) {
                ok = false;
                break;
            }
            valid++;
        }
        if (ok) {
            allowed += id < n_vocab;
            continue;
        }
        /* Every token sharing the rejected prefix p[0..valid] is rejected. */
        uint32_t bad = valid + 1;
        if (id < n_vocab)
            logits[id] = -INFINITY;
        while (k + 1 < v->n_order && v->lcp[k + 1] >= bad) {
            k++;
            if (v->order[k] < n_vocab)
                logits[v->order[k]] = -INFINITY;
        }
    }
    return allowed;
}

cr_status_t rn_grammar_accept(rn_grammar_t *g, const rn_grammar_vocab_t *v, int32_t token,
                              cr_err_t *err)
{
    if (token < 0 || token >= v->n)
        return cr_err_set(err, CR_E_INVALID, "token %d is outside the vocabulary", (int)token);
    if (v->flags[token] & TF_EOG) {
        if (rn_grammar_is_complete(g))
            return CR_OK;
    } else if (!(v->flags[token] & TF_SKIP) &&
               rn_grammar_feed(g, (const char *)v->bytes + v->off[token], v->len[token])) {
        return CR_OK;
    }
    return cr_err_set(err, CR_E_INVALID, "token %d is not allowed here", (int)token);
}
