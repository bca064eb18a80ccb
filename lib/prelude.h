/* prelude.h: included first by every .c file in corral.
 *
 * Feature macros must come before any system header, so this file sets them
 * once and pulls in the headers nearly every module uses. */
#ifndef CR_PRELUDE_H
#define CR_PRELUDE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef CORRAL_VERSION
#define CORRAL_VERSION "0.0.0"
#endif

#define CR_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CR_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CR_MAX(a, b) ((a) > (b) ? (a) : (b))
#define CR_UNUSED(x) ((void)(x))

#if defined(__GNUC__)
#define CR_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define CR_PRINTF(fmt_idx, arg_idx)
#endif

#endif
