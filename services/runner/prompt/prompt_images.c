/* prompt_images.c: see prompt_images.h. */
#include "lib/prelude.h"
#include "services/runner/prompt/prompt_images.h"

#include "services/runner/prompt/prompt_tokens.h"

/* A tag "[img-N]" at s[0..): its length and N, or 0. */
static size_t tag_at(const char *s, size_t left, size_t *n_out)
{
    if (left < 7 || memcmp(s, "[img-", 5))
        return 0;
    size_t i = 5, n = 0;
    while (i < left && i < 5 + 9 && s[i] >= '0' && s[i] <= '9')
        n = n * 10 + (size_t)(s[i++] - '0');
    if (i == 5 || i >= left || s[i] != ']')
        return 0;
    *n_out = n;
    return i + 1;
}

/* Tokenizes r->text[a..b) with the spans that cover it, appending at
 * out + *n (up to cap) and adding what it needs to *n. */
static cr_status_t piece(const rn_tokenizer_t *tok, const rn_prompt_result_t *r,
                         rn_prompt_span_t *spans, size_t a, size_t b, bool add_special,
                         int32_t *out, size_t cap, size_t *n, cr_err_t *err)
{
    size_t ns = 0;
    for (size_t i = 0; i < r->n_spans; i++) {
        size_t lo = CR_MAX(r->spans[i].offset, a);
        size_t hi = CR_MIN(r->spans[i].offset + r->spans[i].len, b);
        if (lo < hi)
            spans[ns++] = (rn_prompt_span_t){lo - a, hi - lo, r->spans[i].trusted};
    }
    rn_prompt_result_t view = {.text = r->text + a, .len = b - a, .spans = spans,
                               .n_spans = ns};
    size_t room = *n < cap ? cap - *n : 0, need = 0;
    cr_status_t st = rn_prompt_tokenize(tok, &view, add_special, room ? out + *n : NULL,
                                        room, &need, err);
    if (st && st != CR_E_TOO_LARGE)
        return st;
    *n += need;
    return CR_OK;
}

cr_status_t rn_prompt_tokenize_images(const rn_tokenizer_t *tok, const rn_prompt_result_t *r,
                                      const int32_t *const *images, size_t n_images,
                                      int n_per_image, int32_t *out, size_t cap,
                                      size_t *n_out, size_t *order, size_t order_cap,
                                      size_t *n_order, cr_err_t *err)
{
    return rn_prompt_tokenize_images_n(tok, r, images, n_images, NULL, n_per_image, out, cap,
                                       n_out, order, order_cap, n_order, err);
}

cr_status_t rn_prompt_tokenize_images_n(const rn_tokenizer_t *tok, const rn_prompt_result_t *r,
                                        const int32_t *const *images, size_t n_images,
                                        const int *n_ids, int n_per_image, int32_t *out,
                                        size_t cap, size_t *n_out, size_t *order,
                                        size_t order_cap, size_t *n_order, cr_err_t *err)
{
    *n_out = 0;
    *n_order = 0;
    rn_prompt_span_t *spans = malloc((r->n_spans ? r->n_spans : 1) * sizeof *spans);
    if (!spans)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    size_t n = 0, from = 0;
    bool first = true;
    cr_status_t st = CR_OK;
    for (size_t i = 0; !st && i < r->len; i++) {
        size_t idx = 0, tl = r->text[i] == '[' ? tag_at(r->text + i, r->len - i, &idx) : 0;
        if (!tl)
            continue;
        if (idx >= n_images) {
            st = cr_err_set(err, CR_E_INVALID, "invalid image index: %zu", idx);
            break;
        }
        if ((st = piece(tok, r, spans, from, i, first, out, cap, &n, err)))
            break;
        first = false;
        int count = n_ids ? n_ids[idx] : n_per_image;
        for (int k = 0; k < count; k++, n++)
            if (n < cap)
                out[n] = images[idx][k];
        if (*n_order < order_cap)
            order[*n_order] = idx;
        (*n_order)++;
        i += tl - 1;
        from = i + 1;
    }
    if (!st)
        st = piece(tok, r, spans, from, r->len, first, out, cap, &n, err);
    free(spans);
    if (st)
        return st;
    *n_out = n;
    return n > cap || *n_order > order_cap ? CR_E_TOO_LARGE : CR_OK;
}
