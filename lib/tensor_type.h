/* tensor_type.h: GGUF tensor element types and their block geometry.
 *
 * Numbers are GGML's type ids as stored in GGUF files. This table knows only
 * sizes and names (what the scheduler needs to estimate memory and the
 * registry to describe a model); the kernels that dequantize and multiply
 * live in the runner's backends. */
#ifndef CR_TENSOR_TYPE_H
#define CR_TENSOR_TYPE_H

#include "lib/prelude.h"

typedef enum cr_type {
    CR_TYPE_F32 = 0,
    CR_TYPE_F16 = 1,
    CR_TYPE_Q4_0 = 2,
    CR_TYPE_Q4_1 = 3,
    CR_TYPE_Q5_0 = 6,
    CR_TYPE_Q5_1 = 7,
    CR_TYPE_Q8_0 = 8,
    CR_TYPE_Q8_1 = 9,
    CR_TYPE_Q2_K = 10,
    CR_TYPE_Q3_K = 11,
    CR_TYPE_Q4_K = 12,
    CR_TYPE_Q5_K = 13,
    CR_TYPE_Q6_K = 14,
    CR_TYPE_Q8_K = 15,
    CR_TYPE_IQ2_XXS = 16,
    CR_TYPE_IQ2_XS = 17,
    CR_TYPE_IQ3_XXS = 18,
    CR_TYPE_IQ1_S = 19,
    CR_TYPE_IQ4_NL = 20,
    CR_TYPE_IQ3_S = 21,
    CR_TYPE_IQ2_S = 22,
    CR_TYPE_IQ4_XS = 23,
    CR_TYPE_I8 = 24,
    CR_TYPE_I16 = 25,
    CR_TYPE_I32 = 26,
    CR_TYPE_I64 = 27,
    CR_TYPE_F64 = 28,
    CR_TYPE_BF16 = 30,
    CR_TYPE_MXFP4 = 39,
    CR_TYPE__COUNT = 40
} cr_type_t;

typedef struct cr_type_info {
    const char *name;     /* "Q4_0", NULL for ids we do not know */
    uint32_t block_elems; /* elements per block (1 for plain types) */
    uint32_t block_bytes; /* bytes per block */
} cr_type_info_t;

/* Geometry of type t, or NULL if t is not a type corral knows. */
const cr_type_info_t *cr_type_info(uint32_t t);

/* Bytes of a row of n elements of type t into *out. False if t is unknown,
 * n is not a multiple of the block size, or the size overflows. */
bool cr_type_row_bytes(uint32_t t, uint64_t n, uint64_t *out);

/* KV cache element types, as OLLAMA_KV_CACHE_TYPE names them (lower case,
 * Ollama's spelling): "f16" (or "" / NULL: the default) -> CR_TYPE_F16,
 * "q8_0" -> CR_TYPE_Q8_0, "q4_0" -> CR_TYPE_Q4_0. False for anything
 * else. */
bool cr_kv_cache_type_parse(const char *name, cr_type_t *out);

/* "f16", "q8_0", "q4_0" for those three types; NULL for any other. */
const char *cr_kv_cache_type_name(cr_type_t t);

/* Name of a GGUF `general.file_type` value ("Q4_K_M", "F16", ...), or
 * "unknown". */
const char *cr_file_type_name(uint32_t file_type);

#endif
