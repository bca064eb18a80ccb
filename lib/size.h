/* size.h: byte sizes written by people ("20GB", "512 MiB", "1.5TB").
 *
 * Units as Ollama prints them: B, KB, MB, GB, TB are powers of 1000;
 * KiB, MiB, GiB, TiB powers of 1024; case-insensitive, optional space
 * between number and unit, a plain number is bytes. Used by settings such
 * as CORRAL_NODE_CACHE_MAX. */
#ifndef CR_SIZE_H
#define CR_SIZE_H

#include "lib/prelude.h"
#include "lib/status.h"

/* Parses text into *bytes_out (rounded down to whole bytes). CR_E_INVALID
 * with a message quoting the text for an empty, negative, malformed or
 * unknown-unit size, or one past INT64_MAX bytes. */
cr_status_t cr_size_parse(const char *text, int64_t *bytes_out, cr_err_t *err);

#endif
