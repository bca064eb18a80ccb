/* unitfile.h: reading systemd unit files and environment files the way
 * systemd does, for tests/deploy: the unit lint, and the test that starts
 * each service exactly as its unit's ExecStart= would.
 *
 * Covers what corral's units use: sections, KEY=VALUE with '#'/';'
 * comments and '\' continuations, command lines split with systemd's
 * quoting, Environment= lists, a few specifiers (%t %S %h %n %%), and
 * EnvironmentFile= syntax. Also reads deploy/services.txt. */
#ifndef DC_UNITFILE_H
#define DC_UNITFILE_H

#include "lib/prelude.h"
#include "lib/status.h"

#define DC_UNIT_MAX_BYTES (256u * 1024)
#define DC_ARGV_MAX 64

typedef struct dc_unit_entry {
    char section[64];
    char key[64];
    char *value;  /* owned; "" for an empty assignment (a reset) */
    int line;
} dc_unit_entry_t;

typedef struct dc_unit {
    dc_unit_entry_t *e;
    size_t n;
} dc_unit_t;

/* Reads a unit file. Caller owns *out; free with dc_unit_free. Errors name
 * the file and line (a line outside a section, no '=', a bad section). */
cr_status_t dc_unit_load(const char *path, dc_unit_t **out, cr_err_t *err);
void dc_unit_free(dc_unit_t **u);

/* The last value of section/key, or NULL. */
const char *dc_unit_get(const dc_unit_t *u, const char *section,
                        const char *key);

/* Every value of section/key in order (after the last empty assignment,
 * which resets a list, as systemd does); returns the count (<= cap). */
size_t dc_unit_get_all(const dc_unit_t *u, const char *section,
                       const char *key, const char **out, size_t cap);

/* A list of words, each owned. */
typedef struct dc_words {
    char *w[DC_ARGV_MAX + 1]; /* NULL-terminated */
    size_t n;
} dc_words_t;
void dc_words_free(dc_words_t *w);

/* Splits a command line or an Environment= value into words with systemd's
 * rules: blanks separate, "double" and 'single' quotes group, C escapes in
 * quotes and outside. Errors: unterminated quote, over DC_ARGV_MAX words. */
cr_status_t dc_split_words(const char *s, dc_words_t *out, cr_err_t *err);

/* Splits an Exec*= value: like dc_split_words, with the leading special
 * prefix characters of the first word ("-", "@", ":", "+", "!") cut into
 * prefix (at most 7 chars). */
cr_status_t dc_split_exec(const char *s, dc_words_t *argv, char prefix[8],
                          cr_err_t *err);

/* Values for the specifiers a system unit expands. */
typedef struct dc_specifiers {
    const char *runtime_root; /* %t: /run */
    const char *state_root;   /* %S: /var/lib */
    const char *home;         /* %h */
    const char *unit_name;    /* %n */
} dc_specifiers_t;

/* Expands %t %S %h %n %% in s into out. CR_E_UNSUPPORTED for any other
 * specifier, CR_E_TOO_LARGE when out is too small. */
cr_status_t dc_expand_specifiers(const char *s, const dc_specifiers_t *sp,
                                 char *out, size_t cap, cr_err_t *err);

/* One KEY=VALUE assignment list (environment). */
typedef struct dc_env {
    char **kv; /* "KEY=VALUE", owned */
    size_t n;
} dc_env_t;

/* Sets KEY (replacing an earlier one) from "KEY=VALUE". CR_E_INVALID when
 * the key is not [A-Za-z_][A-Za-z0-9_]*. */
cr_status_t dc_env_put(dc_env_t *env, const char *kv, cr_err_t *err);
const char *dc_env_value(const dc_env_t *env, const char *key);
void dc_env_free(dc_env_t *env);

/* Reads an EnvironmentFile= into env (later keys override): KEY=VALUE
 * lines, '#'/';' comments, "double"/'single' quoted values, '\'
 * continuations. Errors name the file and line. */
cr_status_t dc_env_file_load(const char *path, dc_env_t *env, cr_err_t *err);

/* deploy/services.txt: name and argv of each service, in start order. */
typedef struct dc_service {
    char name[32];
    dc_words_t argv;
} dc_service_t;

typedef struct dc_services {
    dc_service_t s[16];
    size_t n;
} dc_services_t;

cr_status_t dc_services_load(const char *path, dc_services_t *out,
                             cr_err_t *err);
void dc_services_free(dc_services_t *s);
const dc_service_t *dc_services_find(const dc_services_t *s,
                                     const char *name);

/* Reads a whole file (at most max bytes) into a NUL-terminated buffer the
 * caller frees. */
cr_status_t dc_read_file(const char *path, size_t max, char **out,
                         size_t *len, cr_err_t *err);

#endif
