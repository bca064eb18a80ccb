/* calljson.h: writing `tool_calls` entries, shared by every tool-call
 * parser (toolcalls.c, parser_harmony.c, parser_qwen3coder.c).
 *
 * An entry is Ollama's shape, compact, strings and numbers as Go's
 * encoding/json writes them (the gateway passes them on raw):
 *   {"id":"call_ab12cd34","function":{"index":0,"name":"f","arguments":{...}}}
 * Ids are "call_" + 8 random lowercase alphanumerics from a caller-held
 * xorshift state. Nothing here allocates beyond the caller's buffer. */
#ifndef RN_CALLJSON_H
#define RN_CALLJSON_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

#include <jansson.h>

/* A seed for the id generator from the clock, salted (e.g. with an object's
 * address) so two parsers started together differ. Never 0. */
uint64_t rn_output_call_seed(const void *salt);

/* Writes 8 random id characters and a NUL into out, advancing *rng. */
void rn_output_call_id(uint64_t *rng, char out[9]);

/* Compact JSON of v, object members in their order, or sorted by key at
 * every level when sort_keys (as Go marshals a map). CR_E_TOO_LARGE /
 * CR_E_NOMEM from the buffer. */
cr_status_t rn_output_json(cr_buf_t *b, const json_t *v, bool sort_keys);

/* Appends one call entry to calls: '[' first when calls is at `mark`
 * (nothing of this push's array yet), else ','; the caller closes the
 * array with ']'. name is name_len bytes. Errors as rn_output_json. */
cr_status_t rn_output_call_json(cr_buf_t *calls, size_t mark, uint64_t *rng,
                                int index, const char *name, size_t name_len,
                                const json_t *args);

#endif
