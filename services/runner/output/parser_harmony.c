/* parser_harmony.c: the "harmony" parser (gpt-oss), as Ollama's harmony
 * message handler splits the answer.
 *
 * The prompt ends with `<|start|>assistant`, so the parser starts as if it
 * had read that (or, when the chat's last message is an assistant prefill,
 * the open final or analysis message it continues). Then, repeatedly:
 *   - outside a message, text up to `<|start|>` is dropped;
 *   - the header runs to `<|message|>`: its role, `<|channel|>NAME` and
 *     `to=RECIPIENT` (before or after the channel; ` <|constrain|>json`
 *     ignored) pick where the body goes: analysis -> thinking, final ->
 *     content, commentary -> content, and any channel with a recipient ->
 *     a tool call (name without "functions.", mapped back to the request's);
 *   - the body runs to `<|end|>` (or `<|call|>` / `<|return|>`, which end
 *     generation when the vocabulary does not); body text streams out as it
 *     comes except a trailing partial end marker, and a call's body (its
 *     JSON arguments) completes into tool_calls when its message ends.
 * At the end of generation an open body is flushed (an open call completes),
 * a header without `<|message|>` is dropped, as Ollama does. Arguments that
 * are not a JSON object fail the request with Ollama's "error parsing tool
 * call: raw='...', err=...". */
#include "lib/prelude.h"
#include "services/runner/output/parser_harmony.h"

#include "services/runner/output/parser.h"
#include "services/runner/text/unicode.h"

#define HEADER_MAX 4096 /* bytes of a message header */

static const char START[] = "<|start|>";
static const char MESSAGE[] = "<|message|>";
static const char CHANNEL[] = "<|channel|>";
static const char CONSTRAIN[] = "<|constrain|>";
static const char *const ENDS[] = {"<|end|>", "<|call|>", "<|return|>"};

typedef enum { LOOK, HEADER, BODY } state_t;
typedef enum { TO_CONTENT, TO_THINKING, TO_CALL } dest_t;

typedef struct harmony {
    state_t state;
    dest_t mode;
    cr_buf_t acc;  /* text not yet decided */
    cr_buf_t call; /* the open call's body */
    char recipient[RN_HARMONY_NAME_MAX];
} harmony_t;

/* ---- names ---- */

static bool is_builtin_tool(const char *name)
{
    return !strcmp(name, "browser.open") || !strcmp(name, "browser.search") ||
           !strcmp(name, "browser.find") || !strcmp(name, "python");
}

static const char *tool_name(const json_t *tools, size_t i)
{
    return json_string_value(
        json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
}

/* The identifier form of name, before de-duplication. */
static cr_status_t convert(const char *name, char *out, size_t cap)
{
    size_t n = 0, len = strlen(name);
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t k = rn_utf8_decode((const uint8_t *)name + i, len - i, &cp);
        const char *src = name + i;
        i += k;
        if (cp == ' ' || cp == '-' || cp == '.') {
            src = "_";
            k = 1;
        } else if (!(rn_unicode_is_letter(cp) || rn_unicode_is_number(cp) ||
                     cp == '_' || cp == '$')) {
            continue;
        }
        if (n + k + 2 > cap) /* room for a leading '_' and the NUL */
            return CR_E_TOO_LARGE;
        memcpy(out + n, src, k);
        n += k;
    }
    out[n] = '\0';
    if (!n)
        snprintf(out, cap, "unnamed");
    else if (out[0] >= '0' && out[0] <= '9') {
        memmove(out + 1, out, n + 1);
        out[0] = '_';
    }
    return CR_OK;
}

cr_status_t rn_parser_harmony_name(const json_t *tools, size_t i, char *out,
                                   size_t cap)
{
    size_t n = json_array_size(tools);
    if (i >= n)
        return CR_E_INVALID;
    if (cap < RN_HARMONY_NAME_MAX)
        return CR_E_TOO_LARGE;
    /* Earlier tools' names decide the suffix, so convert them all. */
    char (*names)[RN_HARMONY_NAME_MAX] = calloc(i + 1, sizeof *names);
    if (!names)
        return CR_E_NOMEM;
    cr_status_t st = CR_OK;
    for (size_t j = 0; !st && j <= i; j++) {
        const char *user = tool_name(tools, j);
        if (!user || !*user)
            continue;
        char base[RN_HARMONY_NAME_MAX - 16];
        if (is_builtin_tool(user)) {
            snprintf(names[j], sizeof names[j], "%s", user);
            continue;
        }
        if ((st = convert(user, base, sizeof base)))
            break;
        snprintf(names[j], sizeof names[j], "%s", base);
        for (int count = 2;; count++) {
            bool taken = false;
            for (size_t k = 0; k < j && !taken; k++)
                taken = !strcmp(names[k], names[j]);
            if (!taken)
                break;
            snprintf(names[j], sizeof names[j], "%s_%d", base, count);
        }
    }
    if (!st)
        snprintf(out, cap, "%s", names[i]);
    free(names);
    return st;
}

/* ---- parsing ---- */

static cr_status_t h_init(rn_parser_t *p, const rn_parser_init_t *in, void **state,
                          cr_err_t *err)
{
    CR_UNUSED(p);
    harmony_t *h = calloc(1, sizeof *h);
    if (!h)
        return cr_err_set(err, CR_E_NOMEM, "out of memory for the harmony parser");
    cr_buf_init(&h->acc, RN_PARSER_HOLD_BYTES);
    cr_buf_init(&h->call, RN_PARSER_HOLD_BYTES);
    *state = h;
    /* What the prompt already opened (Ollama's AddImplicitStartOrPrefill). */
    const char *open = "<|start|>assistant";
    if (in->last_role && !strcmp(in->last_role, "assistant")) {
        if (in->last_content && *in->last_content)
            open = "<|start|>assistant<|channel|>final<|message|>";
        else if (in->last_thinking && *in->last_thinking)
            open = "<|start|>assistant<|channel|>analysis<|message|>";
    }
    if (cr_buf_puts(&h->acc, open))
        return cr_err_set(err, CR_E_NOMEM, "out of memory for the harmony parser");
    return CR_OK;
}

static void h_destroy(void *state)
{
    harmony_t *h = state;
    cr_buf_free(&h->acc);
    cr_buf_free(&h->call);
    free(h);
}

static const char *find(const char *s, size_t n, const char *needle)
{
    return memmem(s, n, needle, strlen(needle));
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* The longest suffix of s[0..n) that begins needle. */
static size_t overlap(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t k = CR_MIN(n, m - 1); k > 0; k--)
        if (!memcmp(s + n - k, needle, k))
            return k;
    return 0;
}

/* Drops the first n bytes of b. */
static void consume(cr_buf_t *b, size_t n)
{
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    if (b->data)
        b->data[b->len] = '\0';
}

/* Reads role, channel and recipient from a header (Ollama's parseHeader)
 * and sets where the body goes. */
static void read_header(harmony_t *h, const char *raw, size_t n)
{
    char buf[HEADER_MAX + 3]; /* one space may be added before <|constrain|> */
    size_t len = 0;
    const char *c = find(raw, n, CONSTRAIN);
    for (size_t i = 0; i < n && len < HEADER_MAX + 1; i++) {
        if (c && raw + i == c) /* the constrain marker is a word of its own */
            buf[len++] = ' ';
        buf[len++] = raw[i];
    }
    buf[len] = '\0';
    char channel[64] = "";
    char *ch = strstr(buf, CHANNEL);
    if (ch) {
        char *name = ch + sizeof CHANNEL - 1, *end = name;
        while (*end && !is_space(*end))
            end++;
        snprintf(channel, sizeof channel, "%.*s", (int)(end - name), name);
        memmove(ch, end, strlen(end) + 1);
    }
    /* Words: the role first, then maybe "to=...". */
    char *words[2] = {NULL, NULL};
    int nw = 0;
    for (char *s = buf; *s && nw < 2;) {
        while (*s && is_space(*s))
            s++;
        if (!*s)
            break;
        words[nw++] = s;
        while (*s && !is_space(*s))
            s++;
        if (*s)
            *s++ = '\0';
    }
    const char *to = NULL;
    if (words[0] && !strncmp(words[0], "to=", 3))
        to = words[0] + 3;
    else if (words[1] && !strncmp(words[1], "to=", 3))
        to = words[1] + 3;
    snprintf(h->recipient, sizeof h->recipient, "%s", to ? to : "");
    if (!strcmp(channel, "analysis"))
        h->mode = to ? TO_CALL : TO_THINKING;
    else if (!strcmp(channel, "commentary"))
        h->mode = to ? TO_CALL : TO_CONTENT;
    else if (!strcmp(channel, "final"))
        h->mode = TO_CONTENT;
}

static cr_status_t emit(harmony_t *h, const rn_parser_out_t *out, const char *s,
                        size_t n)
{
    if (!n)
        return CR_OK;
    switch (h->mode) {
    case TO_THINKING:
        return cr_buf_append(out->thinking, s, n);
    case TO_CALL:
        return cr_buf_append(&h->call, s, n);
    default:
        return cr_buf_append(out->content, s, n);
    }
}

/* The open call's message ended: its body is the arguments. */
static cr_status_t complete_call(rn_parser_t *p, harmony_t *h,
                                 const rn_parser_out_t *out, cr_err_t *err)
{
    const char *name = h->recipient;
    if (!strncmp(name, "functions.", 10))
        name += 10;
    /* Back to the name the request gave the tool. */
    const json_t *tools = rn_parser_tools(p);
    char conv[RN_HARMONY_NAME_MAX];
    for (size_t i = 0; i < json_array_size(tools); i++) {
        if (!rn_parser_harmony_name(tools, i, conv, sizeof conv) &&
            !strcmp(conv, name)) {
            name = tool_name(tools, i);
            break;
        }
    }
    json_error_t jerr;
    json_t *args = json_loadb(h->call.data ? h->call.data : "", h->call.len,
                              JSON_DECODE_ANY, &jerr);
    if (args && json_is_null(args)) {
        json_decref(args);
        args = json_object();
    }
    if (!args || !json_is_object(args)) {
        cr_status_t st = cr_err_set(err, CR_E_INVALID,
                                    "error parsing tool call: raw='%.*s', err=%s",
                                    (int)CR_MIN(h->call.len, 512),
                                    h->call.data ? h->call.data : "",
                                    args ? "arguments are not a JSON object"
                                         : jerr.text);
        json_decref(args);
        return st;
    }
    cr_status_t st = rn_parser_emit_call(p, out, name, strlen(name), args);
    json_decref(args);
    cr_buf_reset(&h->call);
    return st;
}

static cr_status_t end_message(rn_parser_t *p, harmony_t *h,
                               const rn_parser_out_t *out, cr_err_t *err)
{
    cr_status_t st = h->mode == TO_CALL ? complete_call(p, h, out, err) : CR_OK;
    h->mode = TO_CONTENT;
    h->state = LOOK;
    return st;
}

/* Decides as much of acc as can be decided. */
static cr_status_t run(rn_parser_t *p, harmony_t *h, const rn_parser_out_t *out,
                       cr_err_t *err)
{
    cr_status_t st = CR_OK;
    for (;;) {
        const char *a = h->acc.data ? h->acc.data : "";
        size_t n = h->acc.len;
        if (h->state == LOOK) {
            const char *s = find(a, n, START);
            if (!s) {
                consume(&h->acc, n - overlap(a, n, START));
                return CR_OK;
            }
            consume(&h->acc, (size_t)(s - a) + sizeof START - 1);
            h->state = HEADER;
        } else if (h->state == HEADER) {
            const char *m = find(a, n, MESSAGE);
            if (!m) {
                if (n > HEADER_MAX)
                    return cr_err_set(err, CR_E_INVALID,
                                      "harmony: message header longer than %d bytes",
                                      HEADER_MAX);
                return CR_OK;
            }
            if ((size_t)(m - a) > HEADER_MAX)
                return cr_err_set(err, CR_E_INVALID,
                                  "harmony: message header longer than %d bytes",
                                  HEADER_MAX);
            read_header(h, a, (size_t)(m - a));
            consume(&h->acc, (size_t)(m - a) + sizeof MESSAGE - 1);
            h->state = BODY;
        } else {
            const char *end = NULL;
            size_t end_len = 0, keep = 0;
            for (size_t i = 0; i < CR_ARRAY_LEN(ENDS); i++) {
                const char *e = find(a, n, ENDS[i]);
                if (e && (!end || e < end)) {
                    end = e;
                    end_len = strlen(ENDS[i]);
                }
                keep = CR_MAX(keep, overlap(a, n, ENDS[i]));
            }
            if (!end) {
                if ((st = emit(h, out, a, n - keep)))
                    return st;
                consume(&h->acc, n - keep);
                return CR_OK;
            }
            if ((st = emit(h, out, a, (size_t)(end - a))))
                return st;
            consume(&h->acc, (size_t)(end - a) + end_len);
            if ((st = end_message(p, h, out, err)))
                return st;
        }
    }
}

static cr_status_t h_push(rn_parser_t *p, void *state, const char *text, size_t len,
                          const rn_parser_out_t *out, cr_err_t *err)
{
    harmony_t *h = state;
    cr_status_t st = cr_buf_append(&h->acc, text, len);
    if (st)
        return cr_err_set(err, st, "harmony: %s", cr_status_str(st));
    return run(p, h, out, err);
}

static cr_status_t h_finish(rn_parser_t *p, void *state, const rn_parser_out_t *out,
                            cr_err_t *err)
{
    harmony_t *h = state;
    cr_status_t st = CR_OK;
    if (h->state == BODY) {
        st = emit(h, out, h->acc.data, h->acc.len);
        if (!st)
            st = end_message(p, h, out, err);
    }
    cr_buf_reset(&h->acc);
    h->state = LOOK;
    return st;
}

static const char *const harmony_stops[] = {"<|return|>", "<|call|>", NULL};

const rn_parser_ops_t rn_parser_harmony_ops = {
    .name = "harmony",
    .init = h_init,
    .destroy = h_destroy,
    .push = h_push,
    .finish = h_finish,
    .stops = harmony_stops,
};
