/* images.h: image files named in a prompt, picked up for a vision model as
 * `ollama run` does (`corral run llava "what is in ./cat.png"`).
 *
 * A path starts with "./", "/" or "\" and ends in .jpg, .jpeg, .png or
 * .webp (any case) before a word boundary; it may hold spaces and
 * backslash escapes ("./my\ cat.png"), and the shortest such run is taken.
 * A named file that exists is read (at most 100 MB; JPEG, PNG or WebP by
 * its first bytes), added to the images as base64 and cut from the text;
 * a path that names no file stays in the text. */
#ifndef CLI_IMAGES_H
#define CLI_IMAGES_H

#include "lib/prelude.h"
#include "lib/status.h"

#include <jansson.h>

#define CLI_IMAGE_MAX_BYTES (100u << 20)

/* Scans prompt: *text_out (caller frees) is the prompt without the image
 * paths it used, trimmed; each image's base64 is appended to images (a
 * JSON array). notice (may be NULL) gets "Added image 'PATH'" lines.
 * CR_E_INVALID for a named file that cannot be used ("couldn't process
 * image ./x.png: invalid image type"), CR_E_NOMEM. */
cr_status_t cli_images_extract(const char *prompt, char **text_out, json_t *images,
                               FILE *notice, cr_err_t *err);

/* Whether an /api/show reply lists the "vision" capability. */
bool cli_images_model_sees(const json_t *show);

#endif
