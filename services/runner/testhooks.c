/* testhooks.c: the runner's test hooks (see testhooks.h): the scripted
 * sampler (CORRAL_TEST_SCRIPT) and slow loads (CORRAL_TEST_SLOW_LOAD).
 *
 * Owns the script's answers as token ids. Does not decide when it is used:
 * the engine loads it from the environment and asks for tokens. */
#include "lib/prelude.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lib/buf.h"
#include "lib/log.h"
#include "services/runner/testhooks.h"

typedef struct answer {
    int32_t *ids;
    size_t n;
} answer_t;

struct rn_script {
    answer_t answers[RN_SCRIPT_MAX_ANSWERS];
    int n_answers;
    int32_t end; /* EOS, else EOT */
    int turn;    /* requests begun so far */
};

void rn_script_destroy(rn_script_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    rn_script_t *s = *self_p;
    for (int i = 0; i < s->n_answers; i++)
        free(s->answers[i].ids);
    free(s);
    *self_p = NULL;
}

/* Decodes ids[from..n) and compares with text[0..len). */
static bool decodes_to(const rn_tokenizer_t *tok, const int32_t *ids,
                       size_t n, const char *text, size_t len)
{
    cr_buf_t b;
    cr_buf_init(&b, 2 * (size_t)RN_SCRIPT_MAX_BYTES);
    bool same = !rn_detokenize(tok, ids, n, RN_PIECE_SPECIAL, &b, NULL) &&
                b.len == len && (!len || !memcmp(b.data, text, len));
    cr_buf_free(&b);
    return same;
}

/* Tokenizes one answer so that it decodes byte for byte. A SentencePiece
 * vocabulary with a space prefix puts a space before text that starts a
 * sequence ("It" -> " I", "t"), which the model would not emit mid-answer;
 * then the answer is tokenized after a newline, as it would be inside a
 * longer text, and the newline's tokens are dropped. */
static cr_status_t add_answer(rn_script_t *s, const rn_tokenizer_t *tok,
                              const char *text, size_t len, cr_err_t *err)
{
    if (s->n_answers == RN_SCRIPT_MAX_ANSWERS)
        return cr_err_set(err, CR_E_TOO_LARGE, "test script: more than %d answers",
                          RN_SCRIPT_MAX_ANSWERS);
    int idx = s->n_answers;
    /* At most one token per byte, plus the newline and a space prefix. */
    size_t n = 0, cap = len + 8, skip = 0;
    int32_t *ids = calloc(cap, sizeof *ids);
    char *shifted = malloc(len + 2);
    if (!ids || !shifted) {
        free(ids);
        free(shifted);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    cr_status_t st = rn_tokenize(tok, text, len, false, true, ids, cap, &n, err);
    bool ok = !st && decodes_to(tok, ids, n, text, len);
    if (!st && !ok) {
        shifted[0] = '\n';
        memcpy(shifted + 1, text, len);
        st = rn_tokenize(tok, shifted, len + 1, false, true, ids, cap, &n, err);
        for (skip = 1; !st && !ok && skip <= 2 && skip <= n; skip++)
            ok = decodes_to(tok, ids + skip, n - skip, text, len);
        skip--;
    }
    free(shifted);
    if (!st && !ok)
        st = cr_err_set(err, CR_E_INVALID,
                        "test script: answer %d does not round-trip through "
                        "the tokenizer", idx + 1);
    if (st) {
        free(ids);
        return st;
    }
    memmove(ids, ids + skip, (n - skip) * sizeof *ids);
    s->answers[idx].ids = ids;
    s->answers[idx].n = n - skip;
    s->n_answers++;
    return CR_OK;
}

cr_status_t rn_script_load(const char *path, const rn_tokenizer_t *tok,
                           rn_script_t **out, cr_err_t *err)
{
    *out = NULL;
    int32_t end = rn_tokenizer_eos(tok);
    if (end < 0)
        end = rn_tokenizer_eot(tok);
    if (end < 0)
        return cr_err_set(err, CR_E_INVALID,
                          "test script: the vocabulary has no end token");
    FILE *f = fopen(path, "rb");
    if (!f)
        return cr_err_set(err, CR_E_IO, "test script %s: cannot open", path);
    char *text = malloc(RN_SCRIPT_MAX_BYTES + 1);
    size_t len = text ? fread(text, 1, RN_SCRIPT_MAX_BYTES + 1, f) : 0;
    bool bad = ferror(f);
    fclose(f);
    if (!text)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = CR_OK;
    if (bad)
        st = cr_err_set(err, CR_E_IO, "test script %s: read error", path);
    else if (len > RN_SCRIPT_MAX_BYTES)
        st = cr_err_set(err, CR_E_TOO_LARGE, "test script %s: over %u bytes",
                        path, RN_SCRIPT_MAX_BYTES);
    rn_script_t *s = st ? NULL : calloc(1, sizeof *s);
    if (!st && !s)
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (st) {
        free(text);
        return st;
    }
    s->end = end;
    /* Answers are separated by lines holding only "---"; the newline
     * before a separator belongs to it, not to the answer. */
    const char *p = text, *stop = text + len;
    while (!st) {
        const char *sep = NULL;
        for (const char *q = p; q + 4 <= stop; q++) {
            if (q[0] == '\n' && !memcmp(q + 1, "---", 3) &&
                (q + 4 == stop || q[4] == '\n')) {
                sep = q;
                break;
            }
        }
        const char *a_end = sep ? sep : stop;
        if (!sep && a_end > p && a_end[-1] == '\n')
            a_end--; /* the file's final newline */
        st = add_answer(s, tok, p, (size_t)(a_end - p), err);
        if (!sep)
            break;
        p = sep + 4 < stop ? sep + 5 : stop;
    }
    free(text);
    if (st) {
        rn_script_destroy(&s);
        return st;
    }
    *out = s;
    return CR_OK;
}

cr_status_t rn_script_from_env(const rn_tokenizer_t *tok, rn_script_t **out,
                               cr_err_t *err)
{
    *out = NULL;
    const char *path = getenv("CORRAL_TEST_SCRIPT");
    if (!path || !*path)
        return CR_OK;
    cr_status_t st = rn_script_load(path, tok, out, err);
    if (!st)
        cr_log_warn("CORRAL_TEST_SCRIPT=%s: answers are scripted (%d), "
                    "not sampled", path, (*out)->n_answers);
    return st;
}

void rn_script_begin(rn_script_t *s, rn_script_cursor_t *c)
{
    c->answer = s->turn % s->n_answers;
    s->turn++;
    c->pos = 0;
}

int32_t rn_script_next(const rn_script_t *s, rn_script_cursor_t *c)
{
    const answer_t *a = &s->answers[c->answer];
    return c->pos < a->n ? a->ids[c->pos++] : s->end;
}

int rn_script_answers(const rn_script_t *s)
{
    return s->n_answers;
}

/* ---- slow loads -------------------------------------------------------- */

/* Test hook, from the runner's environment only (no request can set it):
 * CORRAL_TEST_SLOW_LOAD="<text>:<ms>" makes loads of models whose name
 * contains <text> take <ms> longer, so tests can watch a load in progress. */
void rn_testhook_slow_load(const char *name)
{
    const char *v = getenv("CORRAL_TEST_SLOW_LOAD");
    const char *colon = v ? strrchr(v, ':') : NULL;
    if (!colon || colon == v || !name)
        return;
    char part[128];
    size_t n = CR_MIN((size_t)(colon - v), sizeof part - 1);
    memcpy(part, v, n);
    part[n] = '\0';
    long ms = strtol(colon + 1, NULL, 10);
    if (ms > 0 && ms <= 600000 && strstr(name, part)) {
        cr_log_warn("CORRAL_TEST_SLOW_LOAD: loading %s %ld ms slower", name, ms);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}
