/* host.h: where the CLI connects, from CORRAL_HOST / OLLAMA_HOST.
 *
 * Parses the value with Ollama's rules (§5 of the API reference): `host`,
 * `host:port`, `scheme://host[:port][/path]`, `[v6]:port`, a bare IPv6
 * address. No scheme means http and port 11434; an explicit http:// or
 * https:// without a port means 80 or 443; the bare value `ollama.com` means
 * https on 443; an invalid port falls back to the default. A client cannot
 * dial the wildcard addresses the server binds to, so 0.0.0.0 (and an empty
 * host) dial 127.0.0.1, and :: dials ::1.
 *
 * Pure string work: no sockets, no environment except in cli_host_from_env. */
#ifndef CLI_HOST_H
#define CLI_HOST_H

#include "lib/prelude.h"
#include "lib/status.h"

#define CLI_HOST_DEFAULT_PORT 11434
#define CLI_HOST_MAX 512 /* bytes of an OLLAMA_HOST value we accept */

typedef struct cli_host {
    char scheme[16];          /* "http", "https" (or whatever was given) */
    char host[CLI_HOST_MAX + 1]; /* host to dial, IPv6 without brackets */
    int port;                 /* 0..65535 */
    char path[CLI_HOST_MAX + 2]; /* "" or "/prefix" (no trailing slash) */
    char url[3 * CLI_HOST_MAX];  /* base URL: scheme://host:port/path */
} cli_host_t;

/* Parses value (NULL or "" = the default 127.0.0.1:11434) into out.
 * CR_E_TOO_LARGE if value is over CLI_HOST_MAX bytes; CR_E_INVALID if the
 * scheme is over 15 bytes or contains anything but letters, digits, '+',
 * '-', '.'. Everything else parses (bad ports fall back, as in Ollama). */
cr_status_t cli_host_parse(const char *value, cli_host_t *out, cr_err_t *err);

/* cli_host_parse of cr_env_get("HOST") (CORRAL_HOST, else OLLAMA_HOST). */
cr_status_t cli_host_from_env(cli_host_t *out, cr_err_t *err);

#endif
