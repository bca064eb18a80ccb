/* parser_harmony.h: what the harmony renderer shares with the harmony
 * parser: the names tools go by inside the format.
 *
 * gpt-oss declares tools as TypeScript functions, so a request's tool name
 * becomes an identifier (Ollama's FunctionNameMap): ' ', '-' and '.' turn
 * into '_', letters, digits, '_' and '$' stay, anything else is dropped;
 * nothing left gives "unnamed", a leading ASCII digit gets a '_' in front;
 * a name already taken by an earlier tool gets "_2", "_3", ...; the
 * built-in tools browser.open, browser.search, browser.find and python keep
 * their names. The parser maps a called name back to the request's. */
#ifndef RN_PARSER_HARMONY_H
#define RN_PARSER_HARMONY_H

#include "lib/prelude.h"
#include "lib/status.h"

#include <jansson.h>

#define RN_HARMONY_NAME_MAX 512 /* bytes of a converted name, NUL included */

/* Writes the harmony name of tools[i] (an Ollama tools array; entries
 * without a string function.name have none and write "") into out.
 * CR_E_TOO_LARGE when it does not fit in cap, CR_E_INVALID when i is out of
 * range, CR_E_NOMEM. */
cr_status_t rn_parser_harmony_name(const json_t *tools, size_t i, char *out,
                                   size_t cap);

#endif
