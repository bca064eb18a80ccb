/* thinking.c: the streaming reasoning/answer splitter (see thinking.h).
 *
 * A byte-driven state machine. The only text it keeps between pushes is in
 * `hold`: while looking for the open tag, the leading whitespace plus the
 * part of the open tag seen so far; while thinking, the part of the close
 * tag seen so far. Everything else is passed on in the push that brought
 * it, so the concatenated output never depends on how the text was split. */
#include "lib/prelude.h"
#include "services/runner/output/thinking.h"

typedef enum state {
    LOOKING,   /* before any output: is the first text the open tag? */
    EAT_OPEN,  /* after the open tag: drop whitespace */
    THINKING,  /* inside the reasoning */
    EAT_CLOSE, /* after the close tag: drop whitespace */
    DONE       /* everything is content */
} state_t;

struct rn_thinking {
    state_t state;
    char open[RN_THINKING_TAG_MAX + 1];
    size_t open_len;
    char close[RN_THINKING_TAG_MAX + 1];
    size_t close_len;
    /* LOOKING: `ws` whitespace bytes, then a prefix of open.
     * THINKING: a proper prefix of close. */
    char hold[RN_THINKING_WS_MAX + RN_THINKING_TAG_MAX];
    size_t held;
    size_t ws;
};

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
}

/* Copies s trimmed into dst (cap bytes + NUL); false if empty or too long. */
static bool copy_tag(char *dst, size_t *len, const char *s)
{
    if (!s)
        return false;
    while (*s && is_ws(*s))
        s++;
    size_t n = strlen(s);
    while (n && is_ws(s[n - 1]))
        n--;
    if (!n || n > RN_THINKING_TAG_MAX)
        return false;
    memcpy(dst, s, n);
    dst[n] = '\0';
    *len = n;
    return true;
}

rn_thinking_t *rn_thinking_new(const char *open, const char *close,
                               bool in_thinking, cr_err_t *err)
{
    rn_thinking_t *t = calloc(1, sizeof *t);
    if (!t) {
        cr_err_set(err, CR_E_NOMEM, "out of memory for the thinking parser");
        return NULL;
    }
    if (!copy_tag(t->open, &t->open_len, open)) {
        cr_err_set(err, CR_E_INVALID,
                   "thinking open tag: missing, empty or over %d bytes",
                   RN_THINKING_TAG_MAX);
        free(t);
        return NULL;
    }
    if (!copy_tag(t->close, &t->close_len, close)) {
        cr_err_set(err, CR_E_INVALID,
                   "thinking close tag: missing, empty or over %d bytes",
                   RN_THINKING_TAG_MAX);
        free(t);
        return NULL;
    }
    t->state = in_thinking ? EAT_OPEN : LOOKING;
    return t;
}

void rn_thinking_destroy(rn_thinking_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    free(*self_p);
    *self_p = NULL;
}

bool rn_thinking_prompt_opens(const char *prompt, const char *open)
{
    char tag[RN_THINKING_TAG_MAX + 1];
    size_t tag_len;
    if (!prompt || !copy_tag(tag, &tag_len, open))
        return false;
    size_t n = strlen(prompt);
    while (n && is_ws(prompt[n - 1]))
        n--;
    return n >= tag_len && !memcmp(prompt + n - tag_len, tag, tag_len);
}

/* Length of the shortest cut k such that hold[k..held) is a prefix of the
 * close tag (held when only the empty suffix is). */
static size_t close_cut(const rn_thinking_t *t)
{
    for (size_t k = 0; k < t->held; k++) {
        size_t n = t->held - k;
        if (n <= t->close_len && !memcmp(t->hold + k, t->close, n))
            return k;
    }
    return t->held;
}

cr_status_t rn_thinking_push(rn_thinking_t *t, const char *text, size_t len,
                             cr_buf_t *thinking, cr_buf_t *content)
{
    cr_status_t st = CR_OK;
    size_t i = 0;
    while (i < len) {
        char c = text[i];
        switch (t->state) {
        case LOOKING: {
            size_t m = t->held - t->ws; /* open-tag bytes matched */
            if (m == 0 && is_ws(c)) {
                if (t->held == RN_THINKING_WS_MAX) {
                    /* Endless whitespace: give up waiting for the tag. */
                    t->state = DONE;
                    st = cr_buf_append(content, t->hold, t->held);
                    t->held = t->ws = 0;
                    if (st)
                        return st;
                    continue;
                }
                t->hold[t->held++] = c;
                t->ws++;
                i++;
            } else if (c == t->open[m]) {
                t->hold[t->held++] = c;
                i++;
                if (m + 1 == t->open_len) {
                    t->held = t->ws = 0;
                    t->state = EAT_OPEN;
                }
            } else {
                /* Not the tag: all of it is content, whitespace kept. */
                t->state = DONE;
                st = cr_buf_append(content, t->hold, t->held);
                t->held = t->ws = 0;
                if (st)
                    return st;
            }
            break;
        }
        case EAT_OPEN:
        case EAT_CLOSE:
            if (is_ws(c)) {
                i++;
                break;
            }
            t->state = t->state == EAT_OPEN ? THINKING : DONE;
            break;
        case THINKING: {
            if (t->held == 0) {
                /* Fast path: pass on the run before a possible close tag. */
                const char *p = memchr(text + i, t->close[0], len - i);
                size_t run = p ? (size_t)(p - (text + i)) : len - i;
                if (run) {
                    if ((st = cr_buf_append(thinking, text + i, run)))
                        return st;
                    i += run;
                    continue;
                }
            }
            t->hold[t->held++] = c;
            i++;
            if (t->held == t->close_len &&
                !memcmp(t->hold, t->close, t->close_len)) {
                t->held = 0;
                t->state = EAT_CLOSE;
                break;
            }
            size_t k = close_cut(t);
            if (k) {
                st = cr_buf_append(thinking, t->hold, k);
                memmove(t->hold, t->hold + k, t->held - k);
                t->held -= k;
                if (st)
                    return st;
            }
            break;
        }
        case DONE:
            return cr_buf_append(content, text + i, len - i);
        }
    }
    return CR_OK;
}

cr_status_t rn_thinking_flush(rn_thinking_t *t, cr_buf_t *thinking,
                              cr_buf_t *content)
{
    cr_status_t st = CR_OK;
    if (t->held)
        st = cr_buf_append(t->state == THINKING ? thinking : content, t->hold,
                           t->held);
    t->held = t->ws = 0;
    t->state = DONE;
    return st;
}

bool rn_thinking_in_thinking(const rn_thinking_t *t)
{
    return t->state == EAT_OPEN || t->state == THINKING;
}

bool rn_thinking_is_done(const rn_thinking_t *t)
{
    return t->state == EAT_CLOSE || t->state == DONE;
}

size_t rn_thinking_held(const rn_thinking_t *t)
{
    return t->held;
}
