/* preprocess.h: decoded RGB pixels -> what a vision tower reads.
 *
 * Resampling is Pillow's (what the families' Python preprocessors and
 * llama.cpp's mtmd use): separable, each output pixel a normalized filter
 * over the input pixels its footprint covers (the filter widened by the
 * scale when shrinking), weights in 22-bit fixed point, 8-bit results
 * rounded and clamped after each pass (horizontal first).
 *
 * Owns no decoding (image.h) and no model knowledge beyond the numbers the
 * caller passes (clip.h reads them from the projector file). */
#ifndef RN_PREPROCESS_H
#define RN_PREPROCESS_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "services/runner/vision/image.h"

typedef enum rn_preproc_filter {
    RN_PREPROC_BILINEAR,
    RN_PREPROC_BICUBIC, /* Pillow's a = -0.5 */
} rn_preproc_filter_t;

/* src resampled to w x h (1..65535 each). An image already that size is
 * copied. On success *out is owned by the caller (rn_image_destroy).
 * CR_E_INVALID for a bad size, CR_E_NOMEM. */
cr_status_t rn_preproc_resize(const rn_image_t *src, int w, int h, rn_preproc_filter_t f,
                              rn_image_t **out, cr_err_t *err);

/* src fitted inside size x size keeping its aspect ratio (each side
 * ceil(side * scale), at most size), centred on a canvas of pad colour;
 * an image already size x size is copied. llava's fixed-size
 * preprocessing. Ownership and errors as rn_preproc_resize. */
cr_status_t rn_preproc_fit_square(const rn_image_t *src, int size, const uint8_t pad[3],
                                  rn_preproc_filter_t f, rn_image_t **out, cr_err_t *err);

/* rn_preproc_fit_square into a w x h canvas: scale min(w / width,
 * h / height) in float, each side ceil(side * scale) (at most w, h),
 * centred (offsets rounded down) on pad colour. llama.cpp's resize with
 * PAD_CEIL (qwen2.5-vl's dynamic sizes, whose aspect is nearly kept).
 * Ownership and errors as rn_preproc_resize. */
cr_status_t rn_preproc_fit(const rn_image_t *src, int w, int h, const uint8_t pad[3],
                           rn_preproc_filter_t f, rn_image_t **out, cr_err_t *err);

/* out[c][y][x] = (im[y][x][c] / 255 - mean[c]) / std[c] in float, planes
 * R, G, B: out holds 3 * width * height floats (caller-owned). */
void rn_preproc_normalize(const rn_image_t *im, const float mean[3], const float std[3],
                          float *out);

#endif
