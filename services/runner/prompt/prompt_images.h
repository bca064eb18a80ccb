/* prompt_images.h: tokenizing a rendered prompt whose [img-N] tags stand
 * for images (a vision model's request).
 *
 * The text between tags is tokenized as rn_prompt_tokenize does (trust
 * spans kept: a user's control-token text stays plain text), BOS only on
 * the first piece, as Ollama's runner cuts the prompt at each tag; tag N
 * becomes image N's ids (vision.h: negative ids for embedding positions).
 *
 * Does not own the tokenizer, the prompt or the ids. */
#ifndef RN_PROMPT_IMAGES_H
#define RN_PROMPT_IMAGES_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/prompt/prompt.h"
#include "services/runner/text/tokenizer.h"

/* Tokenizes r with tags [img-N] (N < n_images) replaced by images[N]
 * (n_per_image ids each). Writes at most cap ids to out and sets *n_out to
 * the number needed (CR_E_TOO_LARGE when more than cap); order[k] (up to
 * order_cap) receives the image index of the k-th tag in text order and
 * *n_order their number. CR_E_INVALID "invalid image index: N" for a tag
 * past the images; the tokenizer's errors; CR_E_NOMEM. */
cr_status_t rn_prompt_tokenize_images(const rn_tokenizer_t *tok, const rn_prompt_result_t *r,
                                      const int32_t *const *images, size_t n_images,
                                      int n_per_image, int32_t *out, size_t cap,
                                      size_t *n_out, size_t *order, size_t order_cap,
                                      size_t *n_order, cr_err_t *err);

/* rn_prompt_tokenize_images with images[N] of n_ids[N] ids each (n_ids
 * NULL: n_per_image each): images of varying sizes (qwen2.5-vl). */
cr_status_t rn_prompt_tokenize_images_n(const rn_tokenizer_t *tok, const rn_prompt_result_t *r,
                                        const int32_t *const *images, size_t n_images,
                                        const int *n_ids, int n_per_image, int32_t *out,
                                        size_t cap, size_t *n_out, size_t *order,
                                        size_t order_cap, size_t *n_order, cr_err_t *err);

#endif
