/* gotext.h: text the way Go writes it, for every service that must match
 * Ollama byte for byte: one UTF-8 decoder, one shortest-float formatter
 * (strconv's shortest digits laid out as encoding/json or fmt's %v do) and
 * one JSON string quoter (encoding/json's escaping), and the UTF-8 encoder
 * they share. */
#ifndef CR_GOTEXT_H
#define CR_GOTEXT_H

#include "lib/prelude.h"
#include "lib/buf.h"
#include "lib/status.h"

/* Decodes the UTF-8 sequence at s (n >= 1 bytes left): its length (1 to 4)
 * with the code point in *cp, or 0 when the bytes there are not valid
 * UTF-8: a stray continuation byte, 0xC0/0xC1/0xF5.., an overlong form, a
 * surrogate (U+D800..U+DFFF), a value past U+10FFFF or a truncated
 * sequence. Go's utf8.DecodeRune then reports U+FFFD of width 1. */
size_t cr_utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Writes cp as UTF-8 into out (up to 4 bytes) and returns the byte count,
 * as Go's utf8.EncodeRune: a surrogate or a value past U+10FFFF is written
 * as U+FFFD. */
size_t cr_utf8_encode(uint32_t cp, char out[4]);

/* The shortest decimal digits that read back as a (finite, > 0; bits 32:
 * as the same float32, else the same double): digits (NUL-terminated, no
 * trailing zeros, at most 17) and dp, the decimal point's position
 * (a = 0.digits x 10^dp). Returns the number of digits. digits needs 32
 * bytes. */
int cr_float_digits(double a, int bits, char *digits, int *dp);

typedef enum cr_float_style {
    /* encoding/json: plain unless |v| < 1e-6 or >= 1e21, then exponent
     * form without a leading zero (1e-7, 1e+21); -0 is "-0"; NaN and
     * infinities (which JSON cannot hold) are "null". */
    CR_FLOAT_JSON,
    /* fmt's %v ('g', shortest): exponent form when the exponent is < -4 or
     * >= 6, with at least two exponent digits (1e+06, 1e-05); NaN, +Inf,
     * -Inf; -0 is "-0". */
    CR_FLOAT_G,
} cr_float_style_t;

#define CR_FLOAT_BUF 40 /* bytes enough for any cr_float_format text */

/* Writes v (bits 32: a float32's value, with the float32's shortest
 * digits) in style into buf (cap bytes, NUL-terminated, truncated when
 * cap < CR_FLOAT_BUF). Returns the text's length. */
size_t cr_float_format(double v, int bits, cr_float_style_t style, char *buf,
                       size_t cap);

/* Appends s (n bytes) as a JSON string literal, escaped as Go's
 * encoding/json does with HTML escaping on: `"` `\` and \b \f \n \r \t by
 * name, other bytes below 0x20 and < > & as \u00XX (lower-case hex),
 * U+2028 and U+2029 as \u2028 \u2029, each byte that is not part of valid
 * UTF-8 as \ufffd; everything else as is. Errors are the buffer's. */
cr_status_t cr_json_quote(const char *s, size_t n, cr_buf_t *out);

#endif
