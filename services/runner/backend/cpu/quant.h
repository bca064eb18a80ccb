/* quant.h: tensor element formats for the CPU backend.
 *
 * Owns the exact GGUF block layouts (one struct per format, size checked at
 * compile time), IEEE half/bfloat conversion in plain C, and one traits row
 * per supported type: block geometry, dequantize a row, quantize a row, and
 * the dot product of a weight row with an activation row already converted to
 * the type the dot product wants (`vec_dot_type`), as llama.cpp does:
 *
 *   weight   activation   dot
 *   F32      F32          f32 x f32
 *   F16      F16          activations rounded to half first
 *   BF16     BF16         activations rounded to bfloat first
 *   Q8_0     Q8_0         activations quantized to 32-element int8 blocks
 *   Q4_0     Q8_0         idem
 *   Q6_K     Q8_K         activations quantized to 256-element int8 blocks
 *
 * Every kernel exists as a scalar reference; where the CPU has AVX2+FMA+F16C
 * (checked at run time), faster versions of the same contract are chosen.
 * Does not own threading, matrices, or anything model-shaped. */
#ifndef BE_CPU_QUANT_H
#define BE_CPU_QUANT_H

#include "lib/prelude.h"
#include "lib/tensor_type.h"

/* ---- scalars ---------------------------------------------------------- */

/* IEEE 754 binary16 <-> binary32. Round-to-nearest-even, subnormals kept,
 * inf/nan preserved (nan stays nan, quiet). */
float be_f16_to_f32(uint16_t h);
uint16_t be_f32_to_f16(float f);

/* bfloat16 <-> binary32 (round-to-nearest-even; nan stays nan). */
float be_bf16_to_f32(uint16_t h);
uint16_t be_f32_to_bf16(float f);

/* ---- blocks (exact GGUF layouts) -------------------------------------- */

#define BE_QK8_0 32
#define BE_QK4_0 32
#define BE_QK_K 256

typedef struct be_block_q8_0 {
    uint16_t d;            /* f16 scale */
    int8_t qs[BE_QK8_0];   /* value i = d * qs[i] */
} be_block_q8_0_t;
_Static_assert(sizeof(be_block_q8_0_t) == 34, "Q8_0 block is 34 bytes");

typedef struct be_block_q4_0 {
    uint16_t d;                /* f16 scale */
    uint8_t qs[BE_QK4_0 / 2];  /* byte j: element j (low nibble), element
                                  j+16 (high nibble); value = d * (q - 8) */
} be_block_q4_0_t;
_Static_assert(sizeof(be_block_q4_0_t) == 18, "Q4_0 block is 18 bytes");

/* 6-bit super-block of 256: 16 sub-blocks of 16 with int8 scales.
 * Per 128-element half h (ql += 64h, qh += 32h, scales += 8h), l in 0..31:
 *   q[l]    = (ql[l]    & 15) | ((qh[l] >> 0 & 3) << 4), scale sc[l/16]
 *   q[l+32] = (ql[l+32] & 15) | ((qh[l] >> 2 & 3) << 4), scale sc[l/16 + 2]
 *   q[l+64] = (ql[l]   >> 4)  | ((qh[l] >> 4 & 3) << 4), scale sc[l/16 + 4]
 *   q[l+96] = (ql[l+32] >> 4) | ((qh[l] >> 6 & 3) << 4), scale sc[l/16 + 6]
 * value = d * sc * (q - 32). */
typedef struct be_block_q6_k {
    uint8_t ql[BE_QK_K / 2];      /* low 4 bits */
    uint8_t qh[BE_QK_K / 4];      /* high 2 bits */
    int8_t scales[BE_QK_K / 16];  /* sub-block scales */
    uint16_t d;                   /* f16 super-block scale */
} be_block_q6_k_t;
_Static_assert(sizeof(be_block_q6_k_t) == 210, "Q6_K block is 210 bytes");

/* Activation format for K-quant dot products (never stored in files). */
typedef struct be_block_q8_k {
    float d;                        /* f32 scale */
    int8_t qs[BE_QK_K];             /* value i = d * qs[i] */
    int16_t bsums[BE_QK_K / 16];    /* sum of qs per 16 */
} be_block_q8_k_t;
_Static_assert(sizeof(be_block_q8_k_t) == 292, "Q8_K block is 292 bytes");

/* ---- traits ----------------------------------------------------------- */

/* n is always a whole number of blocks (checked by callers). */
typedef void (*be_to_float_fn)(const void *x, float *y, int64_t n);
typedef void (*be_from_float_fn)(const float *x, void *y, int64_t n);
/* *s = sum_i w[i] * a[i] over n elements; w is a weight row of this type,
 * a an activation row of vec_dot_type. */
typedef void (*be_vec_dot_fn)(int64_t n, float *s, const void *w,
                              const void *a);

typedef struct be_type_traits {
    cr_type_t type;
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
    be_to_float_fn to_float;     /* dequantize a row */
    be_from_float_fn from_float; /* quantize a row */
    be_vec_dot_fn vec_dot;       /* NULL for activation-only types (Q8_K) */
    cr_type_t vec_dot_type;      /* activation format vec_dot wants */
} be_type_traits_t;

typedef enum be_simd {
    BE_SIMD_SCALAR = 0, /* plain C reference */
    BE_SIMD_AVX2 = 1,   /* AVX2 + FMA + F16C */
} be_simd_t;

/* Best level this CPU supports (checked once with __builtin_cpu_supports).
 * CORRAL_CPU_SIMD=scalar forces the reference path. */
be_simd_t be_simd_detect(void);
const char *be_simd_name(be_simd_t s);

/* Traits of type t at a given level (levels above what the CPU supports fall
 * back to scalar), or NULL if t has no kernels. Static storage. */
const be_type_traits_t *be_type_traits_at(cr_type_t t, be_simd_t level);

/* Traits at the detected level. */
const be_type_traits_t *be_type_traits(cr_type_t t);

/* True if weights of type t can be used by matmul and get_rows. */
bool be_type_is_supported(cr_type_t t);

/* ---- row conversions used outside matmul ------------------------------ */

/* f32 <-> f16 row conversion at the detected level (same results as the
 * scalar functions above, which round to nearest even). */
void be_f32_to_f16_row(const float *x, uint16_t *y, int64_t n);
void be_f16_to_f32_row(const uint16_t *x, float *y, int64_t n);

#endif
