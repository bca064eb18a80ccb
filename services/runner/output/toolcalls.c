/* toolcalls.c: the streaming generic tool-call parser (see toolcalls.h).
 *
 * Three states: LOOKING passes text through until the tag (holding back a
 * trailing partial tag), CALLING holds text from the tag on and cuts calls
 * out of it, PASS passes everything through. In CALLING the first balanced
 * object is found by an incremental scan (kept across pushes, so a long
 * object is scanned once), and a decision is made only when that object is
 * complete: that keeps the output independent of how text is split. */
#include "lib/prelude.h"
#include "services/runner/output/toolcalls.h"

#include "lib/gotext.h"
#include "services/runner/output/calljson.h"

#include <jansson.h>
#include <math.h>

#define NEST_MAX 16 /* levels the nested argument search descends */
#define TAG_WS_MAX 32 /* output whitespace one tag space may match */

typedef enum state { LOOKING, CALLING, PASS } state_t;

struct rn_toolcalls {
    state_t state;
    char tag[RN_TOOLCALLS_TAG_MAX + 1];
    size_t tag_len;
    size_t word_len; /* the tag's first word: tag[0..word_len) */
    char close_tag[RN_TOOLCALLS_TAG_MAX + 2]; /* "</x>" / "[/X]" of the
                                                 first word, or "" */
    size_t close_len;
    bool brace_tag; /* "{" or "[": only as the first output */

    size_t n_tools;
    char **names;     /* n_tools pointers into name_pool */
    size_t *name_len; /* bytes of each name */
    char *name_pool;

    char *buf;  /* RN_TOOLCALLS_HOLD_BYTES + 1 */
    size_t len; /* bytes held */

    /* Scan of the first object in buf. */
    size_t skip;       /* leading bytes never searched: the tag just seen */
    size_t scan;       /* next byte to look at */
    bool in_obj;       /* obj_start is valid */
    size_t obj_start;  /* offset of its '{' */
    size_t depth;      /* open braces */
    bool in_str, esc;  /* inside a JSON string; after a backslash */

    int n_calls;
    size_t calls_mark; /* calls->len when the current push began */
    uint64_t rng;
};

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
}

static bool has_non_ws(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_ws(s[i]))
            return true;
    return false;
}

/* ---- construction ---- */

static cr_status_t load_names(rn_toolcalls_t *p, const char *tools_json,
                              cr_err_t *err)
{
    if (!tools_json || !*tools_json)
        return CR_OK;
    json_error_t je;
    json_t *arr = json_loads(tools_json, 0, &je);
    if (!arr)
        return cr_err_set(err, CR_E_INVALID, "tools: invalid JSON at %d: %s",
                          je.position, je.text);
    cr_status_t st = CR_OK;
    if (!json_is_array(arr)) {
        st = cr_err_set(err, CR_E_INVALID, "tools: expected an array");
        goto out;
    }
    size_t n = json_array_size(arr);
    if (n > RN_TOOLCALLS_MAX_TOOLS) {
        st = cr_err_set(err, CR_E_INVALID, "tools: %zu tools (limit %d)", n,
                        RN_TOOLCALLS_MAX_TOOLS);
        goto out;
    }
    size_t pool = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *fn = json_object_get(json_array_get(arr, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        size_t len = name ? strlen(name) : 0;
        if (len > RN_TOOLCALLS_NAME_MAX) {
            st = cr_err_set(err, CR_E_INVALID,
                            "tools[%zu].function.name: over %d bytes", i,
                            RN_TOOLCALLS_NAME_MAX);
            goto out;
        }
        pool += len + 1;
    }
    p->names = calloc(n ? n : 1, sizeof *p->names);
    p->name_len = calloc(n ? n : 1, sizeof *p->name_len);
    p->name_pool = malloc(pool ? pool : 1);
    if (!p->names || !p->name_len || !p->name_pool) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory for tool names");
        goto out;
    }
    char *w = p->name_pool;
    for (size_t i = 0; i < n; i++) {
        json_t *fn = json_object_get(json_array_get(arr, i), "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        size_t len = name ? strlen(name) : 0;
        if (!len)
            continue; /* an empty name would match everywhere */
        memcpy(w, name, len + 1);
        p->names[p->n_tools] = w;
        p->name_len[p->n_tools++] = len;
        w += len + 1;
    }
out:
    json_decref(arr);
    return st;
}

rn_toolcalls_t *rn_toolcalls_new(const char *tag, const char *tools_json,
                                 uint64_t seed, cr_err_t *err)
{
    rn_toolcalls_t *p = calloc(1, sizeof *p);
    if (!p) {
        cr_err_set(err, CR_E_NOMEM, "out of memory for the tool parser");
        return NULL;
    }
    const char *s = tag ? tag : "";
    while (*s && is_ws(*s))
        s++;
    size_t n = strlen(s);
    while (n && is_ws(s[n - 1]))
        n--;
    if (n > RN_TOOLCALLS_TAG_MAX) {
        cr_err_set(err, CR_E_INVALID, "tool tag: over %d bytes",
                   RN_TOOLCALLS_TAG_MAX);
        goto fail;
    }
    if (!n) {
        s = "{";
        n = 1;
    }
    memcpy(p->tag, s, n);
    p->tag[n] = '\0';
    p->tag_len = n;
    p->brace_tag = n == 1 && (s[0] == '{' || s[0] == '[');
    while (p->word_len < n && !is_ws(s[p->word_len]))
        p->word_len++;
    size_t w = p->word_len;
    if (!p->brace_tag && w >= 2 && (s[0] == '<' || s[0] == '[')) {
        /* The closing form, removed from the leftover after calls. */
        p->close_tag[0] = s[0];
        p->close_tag[1] = '/';
        memcpy(p->close_tag + 2, s + 1, w - 1);
        p->close_len = w + 1;
    }
    if (load_names(p, tools_json, err))
        goto fail;
    p->buf = malloc(RN_TOOLCALLS_HOLD_BYTES + 1);
    if (!p->buf) {
        cr_err_set(err, CR_E_NOMEM, "out of memory for the tool parser");
        goto fail;
    }
    p->rng = seed ? seed : rn_output_call_seed(p);
    p->state = LOOKING;
    return p;
fail:
    rn_toolcalls_destroy(&p);
    return NULL;
}

void rn_toolcalls_destroy(rn_toolcalls_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_toolcalls_t *p = *self_p;
    free(p->names);
    free(p->name_len);
    free(p->name_pool);
    free(p->buf);
    free(p);
    *self_p = NULL;
}

/* ---- arguments ---- */

/* Steps 1-2 of the argument rules on object o, then the same on nested
 * values. New reference or NULL. */
static json_t *args_in(json_t *o, const char *name, int depth)
{
    static const char *const keys[] = {"arguments", "parameters"};
    if (json_is_array(o)) {
        if (depth >= NEST_MAX)
            return NULL;
        size_t i;
        json_t *el;
        json_array_foreach(o, i, el) {
            json_t *r = args_in(el, name, depth + 1);
            if (r)
                return r;
        }
        return NULL;
    }
    if (!json_is_object(o))
        return NULL;
    for (size_t k = 0; k < CR_ARRAY_LEN(keys); k++) {
        json_t *v = json_object_get(o, keys[k]);
        if (json_is_object(v))
            return json_incref(v);
        if (json_is_null(v))
            return json_object();
        if (json_is_string(v)) {
            json_t *j = json_loadb(json_string_value(v), json_string_length(v),
                                   0, NULL);
            if (json_is_object(j))
                return j;
            json_decref(j);
        }
    }
    json_t *v = json_object_get(o, name);
    if (json_is_object(v))
        return json_incref(v);
    if (depth >= NEST_MAX)
        return NULL;
    const char *key;
    json_object_foreach(o, key, v) {
        if (!json_is_object(v) && !json_is_array(v))
            continue;
        json_t *r = args_in(v, name, depth + 1);
        if (r)
            return r;
    }
    return NULL;
}

/* The arguments for tool `name` in obj (new reference; NULL only on
 * allocation failure). */
static json_t *args_of(json_t *obj, const char *name)
{
    json_t *r = args_in(obj, name, 0);
    if (r)
        return r;
    r = json_copy(obj);
    const char *n = json_string_value(json_object_get(r, "name"));
    if (n && !strcmp(n, name))
        json_object_del(r, "name");
    return r;
}

/* ---- parsing ---- */

static void scan_reset(rn_toolcalls_t *p, size_t skip)
{
    p->skip = skip;
    p->scan = skip;
    p->in_obj = false;
    p->obj_start = 0;
    p->depth = 0;
    p->in_str = p->esc = false;
}

/* Drops the first n held bytes. */
static void consume(rn_toolcalls_t *p, size_t n)
{
    memmove(p->buf, p->buf + n, p->len - n);
    p->len -= n;
    scan_reset(p, 0);
}

/* Everything held becomes content and so does all later text. */
static cr_status_t give_up(rn_toolcalls_t *p, cr_buf_t *content)
{
    cr_status_t st = cr_buf_append(content, p->buf, p->len);
    p->len = 0;
    scan_reset(p, 0);
    p->state = PASS;
    return st;
}

/* Advances the scan; true with *end (one past the closing brace) once the
 * first object in buf is complete. */
static bool object_complete(rn_toolcalls_t *p, size_t *end)
{
    if (!p->in_obj) {
        const char *b = memchr(p->buf + p->scan, '{', p->len - p->scan);
        if (!b) {
            p->scan = p->len;
            return false;
        }
        p->in_obj = true;
        p->obj_start = (size_t)(b - p->buf);
        p->scan = p->obj_start;
        p->depth = 0;
        p->in_str = p->esc = false;
    }
    for (; p->scan < p->len; p->scan++) {
        char c = p->buf[p->scan];
        if (p->in_str) {
            if (p->esc)
                p->esc = false;
            else if (c == '\\')
                p->esc = true;
            else if (c == '"')
                p->in_str = false;
        } else if (c == '"') {
            p->in_str = true;
        } else if (c == '{') {
            p->depth++;
        } else if (c == '}' && --p->depth == 0) {
            *end = ++p->scan;
            return true;
        }
    }
    return false;
}

/* True when buf[pos, pos+n) lies inside an occurrence of s (s_len bytes)
 * within buf[0..end). */
static bool covered_by(const rn_toolcalls_t *p, size_t pos, size_t n,
                       size_t end, const char *s, size_t s_len)
{
    if (!s_len || s_len < n)
        return false;
    size_t lo = pos + n >= s_len ? pos + n - s_len : 0;
    for (size_t at = lo; at <= pos && at + s_len <= end; at++)
        if (!memcmp(p->buf + at, s, s_len))
            return true;
    return false;
}

/* Where tool i's name first occurs in buf[skip..end) outside the tags (a
 * tool named "call" must not match "</tool_call>"); SIZE_MAX if nowhere. */
static size_t name_pos(const rn_toolcalls_t *p, size_t i, size_t end)
{
    const char *name = p->names[i];
    size_t n = p->name_len[i];
    for (size_t from = p->skip; from < end;) {
        const char *hit = memmem(p->buf + from, end - from, name, n);
        if (!hit)
            break;
        size_t pos = (size_t)(hit - p->buf);
        if (p->brace_tag ||
            (!covered_by(p, pos, n, end, p->tag, p->word_len) &&
             !covered_by(p, pos, n, end, p->close_tag, p->close_len)))
            return pos;
        from = pos + 1;
    }
    return SIZE_MAX;
}

/* The known tool name first in buf[skip..end) (longest on ties); -1 if
 * none. */
static ptrdiff_t find_name(const rn_toolcalls_t *p, size_t end)
{
    ptrdiff_t best = -1;
    size_t best_pos = SIZE_MAX;
    for (size_t i = 0; i < p->n_tools; i++) {
        size_t pos = name_pos(p, i, end);
        if (pos == SIZE_MAX)
            continue;
        if (pos < best_pos ||
            (pos == best_pos && p->name_len[i] > p->name_len[best])) {
            best = (ptrdiff_t)i;
            best_pos = pos;
        }
    }
    return best;
}

static cr_status_t put_call(rn_toolcalls_t *p, cr_buf_t *calls, size_t tool,
                            const json_t *args)
{
    return rn_output_call_json(calls, p->calls_mark, &p->rng, p->n_calls,
                               p->names[tool], p->name_len[tool], args);
}

/* CALLING: cuts out every complete call at the front of buf. Appends calls
 * to `calls` as comma-separated elements after a '[' (the caller closes). */
static cr_status_t cut_calls(rn_toolcalls_t *p, cr_buf_t *content,
                             cr_buf_t *calls)
{
    size_t end;
    while (p->state == CALLING && object_complete(p, &end)) {
        ptrdiff_t tool = find_name(p, end);
        if (tool < 0)
            return give_up(p, content);
        json_t *obj = json_loadb(p->buf + p->obj_start, end - p->obj_start, 0,
                                 NULL);
        if (!json_is_object(obj)) {
            json_decref(obj);
            return give_up(p, content);
        }
        json_t *args = args_of(obj, p->names[tool]);
        json_decref(obj);
        if (!args)
            return CR_E_NOMEM;
        cr_status_t st = put_call(p, calls, (size_t)tool, args);
        json_decref(args);
        if (st)
            return st;
        p->n_calls++;
        consume(p, end);
    }
    return CR_OK;
}

typedef enum match { NONE, PARTIAL, FULL } match_t;

/* Matches the tag at buf[i..]: whitespace in the tag matches a run of up
 * to TAG_WS_MAX whitespace bytes, none included ("[TOOL_CALLS] [" matches
 * "[TOOL_CALLS][").
 * PARTIAL when the text ends first; FULL with *end past the match. */
static match_t match_at(const rn_toolcalls_t *p, size_t i, size_t *end)
{
    size_t t = 0, b = i;
    while (t < p->tag_len) {
        if (is_ws(p->tag[t])) {
            while (t < p->tag_len && is_ws(p->tag[t]))
                t++;
            size_t run = 0;
            while (b < p->len && is_ws(p->buf[b]) && run++ < TAG_WS_MAX)
                b++;
            if (run > TAG_WS_MAX)
                return NONE;
            continue;
        }
        if (b == p->len)
            return PARTIAL;
        if (p->buf[b] != p->tag[t])
            return NONE;
        b++;
        t++;
    }
    *end = b;
    return FULL;
}

/* LOOKING: passes on what cannot start the tag; moves to CALLING at it.
 * The earliest position that matches or may still match decides, which
 * keeps the result independent of how the text was split. */
static cr_status_t look(rn_toolcalls_t *p, cr_buf_t *content)
{
    size_t keep = 0; /* bytes kept from the end of buf */
    size_t tag_end = 0;
    bool hit = false;
    for (size_t i = 0; i < p->len; i++) {
        if (p->buf[i] != p->tag[0])
            continue;
        match_t m = match_at(p, i, &tag_end);
        if (m == NONE)
            continue;
        keep = p->len - i;
        hit = m == FULL;
        tag_end -= hit ? i : 0;
        break;
    }
    size_t out = p->len - keep;
    if (p->brace_tag && has_non_ws(p->buf, out))
        return give_up(p, content); /* the first output was not the tag */
    cr_status_t st = cr_buf_append(content, p->buf, out);
    memmove(p->buf, p->buf + out, keep);
    p->len = keep;
    if (hit) {
        p->state = CALLING;
        /* A brace tag is the call's own first byte; other tags are skipped
         * by the searches (a tool named "call" must not match
         * "<tool_call>"). */
        scan_reset(p, p->brace_tag ? 0 : tag_end);
    }
    return st;
}

cr_status_t rn_toolcalls_push(rn_toolcalls_t *p, const char *text, size_t len,
                              cr_buf_t *content, cr_buf_t *calls)
{
    cr_status_t st = CR_OK;
    size_t calls_mark = calls->len;
    p->calls_mark = calls_mark;
    while (!st) {
        if (p->state == PASS) {
            st = cr_buf_append(content, text, len);
            break;
        }
        if (!len)
            break;
        size_t room = RN_TOOLCALLS_HOLD_BYTES - p->len;
        if (!room) {
            /* An object that never ends: stop holding text. */
            st = give_up(p, content);
            continue;
        }
        size_t take = CR_MIN(room, len);
        memcpy(p->buf + p->len, text, take);
        p->len += take;
        p->buf[p->len] = '\0';
        text += take;
        len -= take;
        if (p->state == LOOKING)
            st = look(p, content);
        if (!st && p->state == CALLING)
            st = cut_calls(p, content, calls);
    }
    if (!st && calls->len > calls_mark)
        st = cr_buf_putc(calls, ']');
    return st;
}

/* After calls: the leftover less tags, closing tags and separators. */
static cr_status_t put_leftover(rn_toolcalls_t *p, cr_buf_t *content)
{
    size_t w = 0;
    for (size_t r = 0; r < p->len;) {
        if (p->close_len && p->len - r >= p->close_len &&
            !memcmp(p->buf + r, p->close_tag, p->close_len)) {
            r += p->close_len;
        } else if (!p->brace_tag && p->len - r >= p->word_len &&
                   !memcmp(p->buf + r, p->tag, p->word_len)) {
            r += p->word_len;
        } else {
            p->buf[w++] = p->buf[r++];
        }
    }
    size_t a = 0, b = w;
    while (a < b && (is_ws(p->buf[a]) || p->buf[a] == ',' || p->buf[a] == ']'))
        a++;
    while (b > a && is_ws(p->buf[b - 1]))
        b--;
    return cr_buf_append(content, p->buf + a, b - a);
}

cr_status_t rn_toolcalls_finish(rn_toolcalls_t *p, cr_buf_t *content)
{
    cr_status_t st = CR_OK;
    if (p->state == CALLING && p->n_calls > 0)
        st = put_leftover(p, content);
    else if (p->len)
        st = cr_buf_append(content, p->buf, p->len);
    p->len = 0;
    scan_reset(p, 0);
    p->state = PASS;
    return st;
}

int rn_toolcalls_count(const rn_toolcalls_t *p)
{
    return p->n_calls;
}

bool rn_toolcalls_in_call(const rn_toolcalls_t *p)
{
    return p->state == CALLING;
}

size_t rn_toolcalls_held(const rn_toolcalls_t *p)
{
    return p->len;
}
