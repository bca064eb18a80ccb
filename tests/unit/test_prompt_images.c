/* test_prompt_images.c: rn_prompt_tokenize_images
 * (services/runner/prompt/prompt_images.h) over the synthetic model's
 * built-in vocabulary: each [img-N] tag becomes image N's ids between the
 * tokens of the text around it (BOS only before the first piece), the tags'
 * order is reported, malformed tags stay text, a tag past the images is an
 * error, and counting with no room gives the same length. Images of
 * varying sizes each take their own count. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "services/runner/prompt/prompt_images.h"
#include "services/runner/prompt/prompt_tokens.h"
#include "services/runner/text/tokenizer.h"
#include "tools/synth/synth.h"
#include "tests/unit/check.h"

static rn_tokenizer_t *tok_g;

/* rn_prompt_tokenize of s (all untrusted) appended to out at *n. */
static void plain(const char *s, bool bos, int32_t *out, size_t *n)
{
    rn_prompt_span_t sp = {0, strlen(s), false};
    rn_prompt_result_t r = {.text = (char *)s, .len = strlen(s), .spans = &sp,
                            .n_spans = sp.len ? 1 : 0};
    size_t k = 0;
    CHECK(rn_prompt_tokenize(tok_g, &r, bos, out + *n, 256, &k, NULL) == CR_OK);
    *n += k;
}

static cr_status_t with_images(const char *s, int32_t *out, size_t *n, size_t *order,
                               size_t *n_order, cr_err_t *err)
{
    /* images of different lengths (variable-resolution towers), the
     * second ending in a text id (Pixtral's [IMG_END]) */
    static const int32_t a[3] = {-1, -2, -3}, b[2] = {-7, 5};
    static const int n_ids[2] = {3, 2};
    const int32_t *imgs[2] = {a, b};
    rn_prompt_span_t sp = {0, strlen(s), false};
    rn_prompt_result_t r = {.text = (char *)s, .len = strlen(s), .spans = &sp, .n_spans = 1};
    return rn_prompt_tokenize_images(tok_g, &r, imgs, 2, n_ids, out, 256, n, order, 4,
                                     n_order, err);
}

int main(void)
{
    rn_synth_opts_t o;
    rn_synth_defaults(&o);
    o.vocab_only = true;
    void *mem = NULL;
    size_t len = 0;
    cr_gguf_t *g = NULL;
    cr_err_t err = {0};
    if (rn_synth_write_memory(&o, &mem, &len, &err) || cr_gguf_open_memory(mem, len, &g, &err) ||
        rn_tokenizer_load(g, &tok_g, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    int32_t got[256], want[256];
    size_t n = 0, nw = 0, order[4], n_order = 0;

    CHECK(with_images("hello [img-1] world [img-0]", got, &n, order, &n_order, &err) == CR_OK);
    plain("hello ", true, want, &nw);
    want[nw++] = -7, want[nw++] = 5;
    plain(" world ", false, want, &nw);
    want[nw++] = -1, want[nw++] = -2, want[nw++] = -3;
    plain("", false, want, &nw);
    CHECK_EQ_INT(n, nw);
    CHECK(n == nw && !memcmp(got, want, n * sizeof *got));
    CHECK_EQ_INT(n_order, 2);
    CHECK(order[0] == 1 && order[1] == 0);
    CHECK(got[0] == rn_tokenizer_bos(tok_g)); /* BOS once, first */
    int bos = 0;
    for (size_t i = 0; i < n; i++)
        bos += got[i] == rn_tokenizer_bos(tok_g);
    CHECK_EQ_INT(bos, 1);

    /* A tag first: BOS still leads. */
    CHECK(with_images("[img-0]hi", got, &n, order, &n_order, &err) == CR_OK);
    CHECK(got[0] == rn_tokenizer_bos(tok_g) && got[1] == -1 && got[3] == -3);

    /* Malformed tags are text: the same ids as without images. */
    const char *bad = "[img-] [img-1 [img-x] [IMG-0] img-0]";
    CHECK(with_images(bad, got, &n, order, &n_order, &err) == CR_OK);
    nw = 0;
    plain(bad, true, want, &nw);
    CHECK(n == nw && !memcmp(got, want, n * sizeof *got));
    CHECK_EQ_INT(n_order, 0);

    /* A tag past the images. */
    CHECK(with_images("look [img-2]", got, &n, order, &n_order, &err) == CR_E_INVALID);
    CHECK_EQ_STR(err.msg, "invalid image index: 2");

    /* Counting: no room, the same length. */
    static const int32_t a[3] = {-1, -2, -3};
    static const int three[1] = {3};
    const int32_t *imgs[1] = {a};
    const char *s = "one [img-0] two [img-0]";
    rn_prompt_span_t sp = {0, strlen(s), false};
    rn_prompt_result_t r = {.text = (char *)s, .len = strlen(s), .spans = &sp, .n_spans = 1};
    size_t need = 0, no = 0;
    CHECK(rn_prompt_tokenize_images(tok_g, &r, imgs, 1, three, NULL, 0, &need, NULL, 0, &no,
                                    &err) == CR_E_TOO_LARGE);
    CHECK(rn_prompt_tokenize_images(tok_g, &r, imgs, 1, three, got, 256, &n, order, 4, &n_order,
                                    &err) == CR_OK);
    CHECK(need == n && no == 2 && n_order == 2);

    /* Per-image counts: image 0 takes 2 ids, image 1 four. */
    static const int32_t c2[2] = {-4, -5}, c4[4] = {-6, 9, 9, -7};
    const int32_t *var[2] = {c2, c4};
    const int counts[2] = {2, 4};
    const char *sv = "a [img-1] b [img-0]";
    rn_prompt_span_t svs = {0, strlen(sv), false};
    rn_prompt_result_t rv = {.text = (char *)sv, .len = strlen(sv), .spans = &svs,
                             .n_spans = 1};
    CHECK(rn_prompt_tokenize_images(tok_g, &rv, var, 2, counts, got, 256, &n, order, 4,
                                    &n_order, &err) == CR_OK);
    nw = 0;
    plain("a ", true, want, &nw);
    memcpy(want + nw, c4, sizeof c4);
    nw += 4;
    plain(" b ", false, want, &nw);
    memcpy(want + nw, c2, sizeof c2);
    nw += 2;
    CHECK(n == nw && !memcmp(got, want, n * sizeof *got));
    CHECK(n_order == 2 && order[0] == 1 && order[1] == 0);

    rn_tokenizer_destroy(&tok_g);
    cr_gguf_close(&g);
    free(mem);
    return check_finish("prompt_images");
}
