/* image_internal.h: what image.c and image_jpeg.c share. Not for other
 * modules. */
#ifndef RN_IMAGE_INTERNAL_H
#define RN_IMAGE_INTERNAL_H

#include "services/runner/vision/image.h"

/* Longest side we decode (JPEG's own limit is 65500). */
#define RN_IMAGE_MAX_SIDE 65535

/* CR_OK if a w x h image may be decoded: CR_E_INVALID for an empty side,
 * CR_E_TOO_LARGE past max_pixels or RN_IMAGE_MAX_SIDE. */
cr_status_t rn_image_check_size(uint64_t w, uint64_t h, uint64_t max_pixels, cr_err_t *err);

/* rn_image_decode for data that starts with JPEG's SOI marker. */
cr_status_t rn_image_decode_jpeg(const void *data, size_t len, uint64_t max_pixels,
                                 rn_image_t **out, cr_err_t *err);

/* The EXIF orientation (1..8) in an APP1 payload ("Exif\0\0" + TIFF), or 1
 * when absent or unreadable. Bounds-checked on every read. */
int rn_image_exif_orientation(const uint8_t *p, size_t len);

/* Applies EXIF orientation o (2..8) to *im, replacing it (sides swap for
 * 5..8). CR_E_NOMEM; *im is unchanged then. */
cr_status_t rn_image_orient(rn_image_t **im, int o, cr_err_t *err);

#endif
