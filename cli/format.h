/* format.h: how the CLI prints numbers, times and tables, as Ollama does.
 *
 * Human sizes in decimal units ("4.7 GB"), relative times ("2 weeks ago",
 * "4 minutes from now", "Forever"), Go's duration notation for timings
 * ("1.234s", "56.7ms"), RFC 3339 timestamps from the API, left-aligned
 * tables, and the `--verbose` timing summary. Pure formatting: no I/O except
 * the functions that take a FILE *. */
#ifndef CLI_FORMAT_H
#define CLI_FORMAT_H

#include "lib/prelude.h"
#include "lib/status.h"

#include <jansson.h>
#include <time.h>

/* Decimal units: "512 B", "1.5 KB", "12 MB", "4.7 GB", "1 TB" (Ollama's
 * HumanBytes: one decimal below 10 unless whole, none from 10 up). */
void cli_fmt_bytes(int64_t bytes, char *out, size_t cap);

/* A duration in words: "Less than a second", "1 second", "5 seconds",
 * "About a minute", "12 minutes", "About an hour", "5 hours", "3 days",
 * "2 weeks", "4 months", "2 years". seconds >= 0. */
void cli_fmt_human_duration(double seconds, char *out, size_t cap);

/* t relative to now: "<duration> ago", "<duration> from now", "Forever"
 * (more than 20 years ahead), or `zero` when t == 0. */
void cli_fmt_human_time(time_t t, time_t now, const char *zero, char *out, size_t cap);

/* Go's time.Duration.String(): "0s", "850ns", "1.5µs", "56.789ms",
 * "1.234567891s", "2m3.5s", "1h0m0s". */
void cli_fmt_go_duration(int64_t ns, char *out, size_t cap);

/* Parses an RFC 3339 timestamp ("2024-05-01T10:00:00.123456789Z",
 * "...+02:00") into UTC seconds. False if it does not parse. */
bool cli_parse_rfc3339(const char *s, time_t *out);

/* The PROCESSOR column of `ps`: "100% GPU", "100% CPU", "48%/52% CPU/GPU",
 * or "Unknown" when size_vram > size or size is 0 with vram. */
void cli_fmt_processor(int64_t size, int64_t size_vram, char *out, size_t cap);

/* A table of strings printed left-aligned, columns padded to their widest
 * cell (counted in UTF-8 characters) and separated by 4 spaces, without
 * trailing blanks. Rows are copied. */
typedef struct cli_table cli_table_t;

/* NULL on allocation failure. ncols 1..16. */
cli_table_t *cli_table_new(size_t ncols);
/* Appends a row of ncols cells (NULL cells print empty). CR_E_NOMEM. */
cr_status_t cli_table_add(cli_table_t *t, const char *const *cells);
void cli_table_print(const cli_table_t *t, FILE *f);
void cli_table_destroy(cli_table_t **t_p);

/* The --verbose summary of a final response object, in Ollama's words and
 * layout ("total duration:       1.2s", ..., "eval rate:            45.67
 * tokens/s"); lines for zero fields are left out. */
void cli_print_summary(const json_t *final, FILE *f);

#endif
