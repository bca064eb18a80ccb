/* version.h: the versions corral reports.
 *
 * CORRAL_VERSION (prelude.h, from CMake's project version) is corral's own.
 * CR_OLLAMA_COMPAT_VERSION is the Ollama release whose API corral answers
 * as: /api/version reports it in `version`, because clients gate features
 * on that number (some refuse anything below 0.6.4), and corral's own goes
 * in `corral_version`. Raise it when corral covers a newer Ollama API. */
#ifndef CR_VERSION_H
#define CR_VERSION_H

#include "lib/prelude.h"

/* The Ollama API (routes, fields, behaviour) corral implements. */
#define CR_OLLAMA_COMPAT_VERSION "0.14.0" /* /v1/messages came in 0.14 */

/* Longest version text accepted from CORRAL_COMPAT_VERSION. */
#define CR_VERSION_MAX 32

/* The version /api/version reports: CORRAL_COMPAT_VERSION when it is set
 * and looks like a version (digits and dots, starting with a digit, an
 * optional "-suffix" of letters, digits, dots and dashes; at most
 * CR_VERSION_MAX bytes), else CR_OLLAMA_COMPAT_VERSION. *bad (may be
 * NULL) says whether the variable was set but refused. Writes into buf
 * (cap >= CR_VERSION_MAX + 1); returns buf. */
const char *cr_compat_version(char *buf, size_t cap, bool *bad);

/* True when s is a version as cr_compat_version accepts it. */
bool cr_version_is_valid(const char *s);

#endif
