/* image.h: client image bytes -> RGB pixels, through the distribution's
 * decoders (libjpeg-turbo, libpng, libwebp); never a decoder of our own.
 *
 * The format is sniffed from the first bytes, not from a name or a MIME
 * type. The header's dimensions are checked against a pixel limit before
 * any pixel is decoded (decompression bombs); JPEG's EXIF orientation is
 * applied, so the pixels are as a viewer shows them. Alpha is dropped
 * (not composited), as llama.cpp's loader does.
 *
 * Owns no resizing or normalization (vision/preprocess.c). */
#ifndef RN_IMAGE_H
#define RN_IMAGE_H

#include "lib/prelude.h"
#include "lib/status.h"

/* CORRAL_MAX_IMAGE_PIXELS when unset: 50 megapixels. */
#define RN_IMAGE_DEFAULT_MAX_PIXELS 50000000ull

typedef struct rn_image {
    int width;    /* pixels */
    int height;   /* pixels */
    uint8_t *rgb; /* [height][width][3], owned */
} rn_image_t;

/* The pixel limit in force: CORRAL_MAX_IMAGE_PIXELS if set to a positive
 * integer, else RN_IMAGE_DEFAULT_MAX_PIXELS. */
uint64_t rn_image_max_pixels(void);

/* Decodes len bytes of a JPEG, PNG or WebP file. On success *out is owned
 * by the caller: free with rn_image_destroy. Errors (message says which):
 * CR_E_INVALID "not an image" (no known signature) or a corrupt file,
 * CR_E_UNSUPPORTED "unsupported image format (gif)" for a recognized format
 * we do not decode (GIF, BMP, TIFF, animated WebP, CMYK JPEG),
 * CR_E_TRUNCATED "truncated image" when the data ends early, CR_E_TOO_LARGE
 * when width * height exceeds max_pixels (checked from the header, before
 * decoding), CR_E_NOMEM. */
cr_status_t rn_image_decode(const void *data, size_t len, uint64_t max_pixels,
                            rn_image_t **out, cr_err_t *err);

/* A new black image of width x height (both >= 1). Caller owns; free with
 * rn_image_destroy. NULL when out of memory or too large. */
rn_image_t *rn_image_new(int width, int height);

void rn_image_destroy(rn_image_t **self_p);

#endif
