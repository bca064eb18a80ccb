/* gojson.h: JSON text and value text the way Ollama (Go) writes them.
 *
 * The registry parses and builds JSON with jansson but writes it here, so
 * what lands in blobs, manifests and /api/show matches Ollama's bytes:
 * object keys in insertion order (callers insert in Go's struct order, or
 * sorted where Go marshals a map), floats in Go's shortest form (0.00001,
 * 500000, 1e-7), and Go's string escaping (<, >, & as \u003c...).
 *
 * It also renders values as Go's fmt does for /api/show's text fields: %v
 * (1e+06, 0.6, true, raw strings) and %#v (strings quoted like
 * strconv.Quote). Nothing here touches the disk or the bus. */
#ifndef REG_GOJSON_H
#define REG_GOJSON_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

#include <jansson.h>
#include <time.h>

/* Appends v as compact JSON. NaN and infinities (which JSON cannot hold)
 * are written as null. CR_E_TOO_LARGE / CR_E_NOMEM from the buffer;
 * CR_E_INVALID if nesting exceeds 64 levels. */
cr_status_t reg_gojson_dump(const json_t *v, cr_buf_t *out);

/* Same, then a newline (as Go's json.Encoder.Encode). */
cr_status_t reg_gojson_dump_line(const json_t *v, cr_buf_t *out);

/* Appends s (n bytes of UTF-8) as a JSON string literal with Go's escapes
 * (cr_json_quote). */
cr_status_t reg_gojson_string(const char *s, size_t n, cr_buf_t *out);

/* Float text. bits is 64, or 32 for a value that was a float32 (its
 * shortest float32 form is used: 1e-5f prints as 0.00001).
 *   REG_FLOAT_JSON: encoding/json ('f' unless |v| < 1e-6 or >= 1e21;
 *                   exponents without a leading zero: 1e-7, 1e+21)
 *   REG_FLOAT_FMT:  fmt %v / %#v ('g' shortest: 1e+06, 1e-05, 0.0001)
 * (cr_float_format's CR_FLOAT_JSON and CR_FLOAT_G.) */
typedef enum reg_float_style { REG_FLOAT_JSON, REG_FLOAT_FMT } reg_float_style_t;
void reg_gojson_float(double v, int bits, reg_float_style_t style, char *buf,
                      size_t cap);

/* Appends s quoted as Go's strconv.Quote / %q / %#v does: "\"a\\nb\"";
 * control bytes as \a \b \f \n \r \t \v or \xNN, invalid UTF-8 bytes as
 * \xNN, other UTF-8 kept. */
cr_status_t reg_go_quote(const char *s, size_t n, cr_buf_t *out);

/* Appends a decoded JSON scalar as fmt's %v (sharp = false) or %#v
 * (sharp = true) would print the Go value json.Unmarshal makes of it
 * (numbers are float64): strings raw or quoted, numbers via
 * REG_FLOAT_FMT, true/false, <nil> for null. Arrays and objects print in
 * Go's [a b] / map[k:v] forms. */
cr_status_t reg_go_value(const json_t *v, bool sharp, cr_buf_t *out);

/* A time as Go's time.Time marshals to JSON (RFC 3339 with nanoseconds,
 * trailing zeros trimmed, local zone, "Z" for UTC):
 * "2024-08-16T18:50:00.684933726+02:00". buf needs 40 bytes. */
void reg_go_time(struct timespec ts, char *buf, size_t cap);

#endif
