/* prompt_tokens.c: a rendered prompt to token ids, control tokens parsed
 * only inside trusted spans. See prompt_tokens.h for the contract.
 *
 * This does what rn_tokenize does with parse_special (cut the text at each
 * special token's occurrences, longest texts first, then tokenize the
 * pieces between), except that an occurrence counts only when every byte
 * of it is trusted. The pieces between are tokenized by rn_tokenize with
 * parse_special off, which still cuts at user-defined tokens (as
 * rn_tokenize always does) and gives each piece SentencePiece's space
 * prefix, exactly as the whole-text call does for its first piece and the
 * pieces after a special token. */
#include "lib/prelude.h"
#include "services/runner/prompt/prompt_tokens.h"

typedef struct special {
    int32_t id;
    const char *text; /* borrowed from the tokenizer */
    size_t len;
} special_t;

/* A piece of the prompt: a special token (id >= 0) or raw text. */
typedef struct frag {
    int32_t id;
    size_t off, len;
} frag_t;

typedef struct frags {
    frag_t *v;
    size_t n, cap;
} frags_t;

static bool frags_push(frags_t *f, int32_t id, size_t off, size_t len)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        frag_t *p = realloc(f->v, cap * sizeof *p);
        if (!p)
            return false;
        f->v = p;
        f->cap = cap;
    }
    f->v[f->n++] = (frag_t){id, off, len};
    return true;
}

/* Longest first, then lower id: the order rn_tokenize tries them in. */
static int cmp_special(const void *a, const void *b)
{
    const special_t *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool c_space(char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Whether rn_tokenize eats a space beside token id (phi-3's rstrip, or an
 * lstrip): the special text with one space on that side must come out as
 * the id alone. Asking the tokenizer keeps this in step with it. */
static bool strips_space(const rn_tokenizer_t *tok, const special_t *s, bool left)
{
    char *buf = malloc(s->len + 1);
    if (!buf)
        return false;
    memcpy(buf + (left ? 1 : 0), s->text, s->len);
    buf[left ? 0 : s->len] = ' ';
    int32_t ids[4];
    size_t n = 0;
    cr_err_t e;
    cr_status_t st = rn_tokenize(tok, buf, s->len + 1, false, true, ids, CR_ARRAY_LEN(ids), &n, &e);
    free(buf);
    return !st && n == 1 && ids[0] == s->id;
}

/* Whether mask[off..off+len) is all trusted. */
static bool all_trusted(const uint8_t *mask, size_t off, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!mask[off + i])
            return false;
    return true;
}

/* Cuts the raw fragments of in at every trusted occurrence of s. */
static cr_status_t split_trusted(const rn_tokenizer_t *tok, const char *text, const uint8_t *mask,
                                 const special_t *s, const frags_t *in, frags_t *out)
{
    bool lstrip = false, rstrip = false, asked = false;
    out->n = 0;
    for (size_t k = 0; k < in->n; k++) {
        frag_t f = in->v[k];
        if (f.id >= 0) {
            if (!frags_push(out, f.id, 0, 0))
                return CR_E_NOMEM;
            continue;
        }
        size_t off = f.off, end = f.off + f.len, from = off;
        while (off < end) {
            const char *m = from < end ? memmem(text + from, end - from, s->text, s->len) : NULL;
            if (!m) {
                if (!frags_push(out, -1, off, end - off))
                    return CR_E_NOMEM;
                break;
            }
            size_t mpos = (size_t)(m - text);
            if (!all_trusted(mask, mpos, s->len)) {
                from = mpos + 1; /* request data: plain text */
                continue;
            }
            if (!asked) {
                lstrip = strips_space(tok, s, true);
                rstrip = strips_space(tok, s, false);
                asked = true;
            }
            size_t left = mpos - off;
            if (lstrip)
                while (left > 0 && c_space(text[off + left - 1]))
                    left--;
            if (left > 0 && !frags_push(out, -1, off, left))
                return CR_E_NOMEM;
            if (!frags_push(out, s->id, 0, 0))
                return CR_E_NOMEM;
            off = mpos + s->len;
            if (rstrip)
                while (off < end && c_space(text[off]))
                    off++;
            from = off;
        }
    }
    return CR_OK;
}

/* Per-byte trust from the spans (1 = trusted). Bytes no span covers stay
 * untrusted. */
static cr_status_t build_mask(const rn_prompt_result_t *r, size_t len, uint8_t **mask_out,
                              size_t *n_trusted, cr_err_t *err)
{
    *mask_out = NULL;
    *n_trusted = 0;
    uint8_t *mask = calloc(len ? len : 1, 1);
    if (!mask)
        return cr_err_set(err, CR_E_NOMEM, "tokenize: out of memory (%zu bytes of prompt)", len);
    size_t prev_end = 0;
    for (size_t i = 0; i < r->n_spans; i++) {
        const rn_prompt_span_t *s = &r->spans[i];
        if (s->offset < prev_end || s->offset > len || s->len > len - s->offset) {
            free(mask);
            return cr_err_set(err, CR_E_INVALID,
                              "tokenize: prompt span %zu (offset %zu, %zu bytes) is out of order "
                              "or past the %zu-byte text",
                              i, s->offset, s->len, len);
        }
        prev_end = s->offset + s->len;
        if (s->trusted) {
            memset(mask + s->offset, 1, s->len);
            *n_trusted += s->len;
        }
    }
    *mask_out = mask;
    return CR_OK;
}

/* Control and unknown tokens whose text occurs in the prompt at all. */
static cr_status_t find_specials(const rn_tokenizer_t *tok, const char *text, size_t len,
                                 special_t **out, size_t *n_out, cr_err_t *err)
{
    *out = NULL;
    *n_out = 0;
    size_t n = 0, cap = 0;
    special_t *v = NULL;
    size_t n_vocab = rn_tokenizer_n_vocab(tok);
    for (size_t i = 0; i < n_vocab; i++) {
        int32_t id = (int32_t)i;
        if (!rn_tokenizer_is_control(tok, id) &&
            rn_tokenizer_token_type(tok, id) != RN_TOKEN_UNKNOWN)
            continue;
        size_t tl = 0;
        const char *t = rn_tokenizer_token_text(tok, id, &tl);
        if (!t || !tl || tl > len || !memmem(text, len, t, tl))
            continue;
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 16;
            special_t *p = realloc(v, nc * sizeof *p);
            if (!p) {
                free(v);
                return cr_err_set(err, CR_E_NOMEM, "tokenize: out of memory");
            }
            v = p;
            cap = nc;
        }
        v[n++] = (special_t){id, t, tl};
    }
    if (n > 1)
        qsort(v, n, sizeof *v, cmp_special);
    *out = v;
    *n_out = n;
    return CR_OK;
}

cr_status_t rn_prompt_tokenize(const rn_tokenizer_t *tok, const rn_prompt_result_t *r,
                               bool add_special, int32_t *out, size_t cap, size_t *n_out,
                               cr_err_t *err)
{
    if (err)
        cr_err_clear(err);
    *n_out = 0;
    if (!tok || !r)
        return cr_err_set(err, CR_E_INVALID, "tokenize: no tokenizer or prompt");
    const char *text = r->text ? r->text : "";
    size_t len = r->text ? r->len : 0;
    if (len > RN_TOK_MAX_INPUT_BYTES)
        return cr_err_set(err, CR_E_TOO_LARGE, "tokenize: input is %zu bytes (limit %u)", len,
                          RN_TOK_MAX_INPUT_BYTES);
    uint8_t *mask = NULL;
    size_t n_trusted = 0;
    cr_status_t st = build_mask(r, len, &mask, &n_trusted, err);
    if (st)
        return st;
    if (n_trusted == len || n_trusted == 0) {
        /* One kind throughout (raw mode, or request data only). */
        free(mask);
        return rn_tokenize(tok, text, len, add_special, n_trusted == len, out, cap, n_out, err);
    }

    special_t *specials = NULL;
    size_t n_specials = 0;
    frags_t a = {0}, b = {0};
    if ((st = find_specials(tok, text, len, &specials, &n_specials, err)))
        goto out;
    st = CR_E_NOMEM;
    if (!frags_push(&a, -1, 0, len))
        goto out;
    for (size_t i = 0; i < n_specials; i++) {
        if ((st = split_trusted(tok, text, mask, &specials[i], &a, &b)))
            goto out;
        frags_t t = a;
        a = b;
        b = t;
    }

    size_t need = 0;
    int32_t bos = rn_tokenizer_bos(tok), eos = rn_tokenizer_eos(tok);
    if (add_special && rn_tokenizer_add_bos(tok) && bos >= 0) {
        if (need < cap)
            out[need] = bos;
        need++;
    }
    st = CR_OK;
    for (size_t k = 0; k < a.n && !st; k++) {
        const frag_t *f = &a.v[k];
        if (f->id >= 0) {
            if (need < cap)
                out[need] = f->id;
            need++;
            continue;
        }
        size_t room = need < cap ? cap - need : 0, got = 0;
        int32_t *dst = room ? out + need : NULL;
        st = rn_tokenize(tok, text + f->off, f->len, false, false, dst, room, &got, err);
        if (st == CR_E_TOO_LARGE && got > room) {
            st = CR_OK; /* counted; reported once at the end */
            if (err)
                cr_err_clear(err);
        }
        need += got;
    }
    if (st)
        goto out;
    if (add_special && rn_tokenizer_add_eos(tok) && eos >= 0) {
        if (need < cap)
            out[need] = eos;
        need++;
    }
    *n_out = need;
    if (need > cap)
        st = cr_err_set(err, CR_E_TOO_LARGE, "tokenize: %zu tokens do not fit in %zu", need, cap);
out:
    if (st == CR_E_NOMEM && err && !err->msg[0])
        cr_err_set(err, st, "tokenize: out of memory (%zu bytes of prompt)", len);
    free(a.v);
    free(b.v);
    free(specials);
    free(mask);
    return st;
}
