/* params.h: a model's default options (the params layer, §2 of the API
 * reference): validation at create time, conversion to the bus options
 * record for the scheduler, and the text /api/show prints.
 *
 * The params layer is a JSON object of option name -> value, e.g.
 * {"stop":["<|eot_id|>"],"temperature":0.6}. Knows nothing of the disk. */
#ifndef REG_PARAMS_H
#define REG_PARAMS_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"
#include "proto/msg.h"

#include <jansson.h>

#define REG_PARAMS_MAX_STOP 256 /* stop strings in one params object */

/* Called for each key dropped by validation: why is "unknown" or
 * "deprecated". */
typedef void (*reg_params_warn_fn)(void *ctx, const char *key,
                                   const char *why);

/* Validates a `parameters` object against the option table: int options
 * accept any JSON number (truncated), float options any number, use_mmap a
 * bool, stop an array of strings (a single string counts as one). Unknown
 * and deprecated keys are dropped (warn is told; it may be NULL); null
 * values are dropped. On success *out is a new object (caller owns;
 * json_decref) with keys sorted and values in canonical types. Wrong types
 * are CR_E_INVALID naming the option as Ollama does:
 * `option "temperature" must be of type float32`, `... of type integer`,
 * `... of type boolean`, `... of type array`, `option "stop" must be of an
 * array of strings`. in == NULL yields an empty object. */
cr_status_t reg_params_validate(const json_t *in, reg_params_warn_fn warn,
                                void *ctx, json_t **out, cr_err_t *err);

/* Overlays src's keys on dst (src wins), as create merges new parameters
 * over inherited ones. Keys stay sorted. */
cr_status_t reg_params_merge(json_t *dst, const json_t *src);

/* Fills *opts from a params object (keys not in the bus record, and values
 * of the wrong type, are skipped). Stop strings are copied into m's arena,
 * so they live as long as m. */
cr_status_t reg_params_to_options(const json_t *params, msg_options_t *opts,
                                  msg_t *m);

/* A params object (caller owns) holding the fields set in opts, keys
 * sorted. */
json_t *reg_params_from_options(const msg_options_t *opts);

/* /api/show's `parameters` text: one "name value" line per option (name
 * padded to 30 columns, value as Go's %#v), one line per stop string,
 * keys in sorted order, lines joined by "\n" (no final newline). */
cr_status_t reg_params_show_text(const json_t *params, cr_buf_t *out);

#endif
