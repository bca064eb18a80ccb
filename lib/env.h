/* env.h: configuration from the environment, Ollama's names and ours.
 *
 * Every setting is readable as CORRAL_<NAME> and OLLAMA_<NAME>; the CORRAL_
 * form wins. Values are trimmed of whitespace and surrounding quotes, as
 * Ollama does. */
#ifndef CR_ENV_H
#define CR_ENV_H

#include "lib/prelude.h"

/* Copies the value of CORRAL_<name> or OLLAMA_<name> (trimmed) into buf.
 * Returns false (buf = "") when neither is set or the value is empty. */
bool cr_env_get(const char *name, char *buf, size_t cap);

/* The variable that gives the setting its value ("CORRAL_<name>" or
 * "OLLAMA_<name>", as cr_env_get reads them), for messages; the CORRAL_
 * name when neither is set. */
void cr_env_source(const char *name, char *buf, size_t cap);

/* Integer setting; `def` when unset or not an integer. */
long long cr_env_int(const char *name, long long def);

/* Boolean setting: unset -> def; "0", "false", "no", "off" -> false; any
 * other value -> true (Ollama counts invalid values as true). */
bool cr_env_bool(const char *name, bool def);

/* Duration setting (Go syntax "30s", "1m", or plain seconds) in ms; `def`
 * when unset, unparsable or negative. */
int64_t cr_env_duration_ms(const char *name, int64_t def);

/* The models dir: CORRAL_MODELS, OLLAMA_MODELS, else ~/.corral/models. */
void cr_env_models_dir(char *buf, size_t cap);

#endif
