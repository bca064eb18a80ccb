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
 *   Q5_0     Q8_0         idem
 *   Q4_1     Q8_1         Q8_0 plus s = d * sum(qs), which carries the min
 *   Q5_1     Q8_1         idem
 *   Q2_K..Q6_K  Q8_K      activations quantized to 256-element int8 blocks
 *   IQ4_NL   Q8_0         weights index a fixed 16-value table (quant_nl.c)
 *   MXFP4    Q8_0         idem, table of E2M1 values, power-of-two scale
 *   IQ4_XS   Q8_K         IQ4_NL's table in super-blocks of 256
 *   IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S
 *            Q8_K         signed points of fixed grids (quant_iq.c)
 *   IQ1_S    Q8_K         points of -1/0/1 plus a shift (quant_iq1.c)
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
#define BE_K_SCALE_SIZE 12

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

/* Activation format for Q4_1/Q5_1 dot products (never a weight here). */
typedef struct be_block_q8_1 {
    uint16_t d;            /* f16 scale */
    uint16_t s;            /* f16 of d * sum(qs) */
    int8_t qs[BE_QK8_0];   /* value i = d * qs[i] */
} be_block_q8_1_t;
_Static_assert(sizeof(be_block_q8_1_t) == 36, "Q8_1 block is 36 bytes");

/* Like Q4_0 with a minimum: value = d * q + m, q = 0..15 unsigned, same
 * nibble order (byte j: element j low, element j+16 high). */
typedef struct be_block_q4_1 {
    uint16_t d;                /* f16 scale */
    uint16_t m;                /* f16 minimum (added) */
    uint8_t qs[BE_QK4_0 / 2];
} be_block_q4_1_t;
_Static_assert(sizeof(be_block_q4_1_t) == 20, "Q4_1 block is 20 bytes");

/* 5-bit: low 4 bits as in Q4_0; bit j of qh (read as a little-endian
 * uint32) is bit 4 of element j, for j = 0..31. value = d * (q - 16). */
typedef struct be_block_q5_0 {
    uint16_t d;                /* f16 scale */
    uint8_t qh[4];             /* high bits, element j = bit j */
    uint8_t qs[BE_QK4_0 / 2];  /* low nibbles as in Q4_0 */
} be_block_q5_0_t;
_Static_assert(sizeof(be_block_q5_0_t) == 22, "Q5_0 block is 22 bytes");

/* Q5_0's quants with a minimum: value = d * q + m, q = 0..31. */
typedef struct be_block_q5_1 {
    uint16_t d;                /* f16 scale */
    uint16_t m;                /* f16 minimum (added) */
    uint8_t qh[4];
    uint8_t qs[BE_QK4_0 / 2];
} be_block_q5_1_t;
_Static_assert(sizeof(be_block_q5_1_t) == 24, "Q5_1 block is 24 bytes");

/* 2-bit super-block of 256: 16 sub-blocks of 16, each with a 4-bit scale
 * (low nibble of scales[k]) and 4-bit min (high nibble). Element
 * e = 128h + 32j + l (h = 0..1, j = 0..3, l = 0..31) has quant
 * (qs[32h + l] >> 2j) & 3 and sub-block k = e / 16.
 * value = d * (scales[k] & 15) * q - dmin * (scales[k] >> 4). */
typedef struct be_block_q2_k {
    uint8_t scales[BE_QK_K / 16]; /* scale | min << 4 */
    uint8_t qs[BE_QK_K / 4];      /* 2-bit quants */
    uint16_t d;                   /* f16 super-scale of the scales */
    uint16_t dmin;                /* f16 super-scale of the mins */
} be_block_q2_k_t;
_Static_assert(sizeof(be_block_q2_k_t) == 84, "Q2_K block is 84 bytes");

/* 3-bit super-block of 256: 16 sub-blocks of 16 with signed 6-bit scales.
 * Element e = 128h + 32j + l: low bits (qs[32h + l] >> 2j) & 3, high bit
 * hmask[l] bit (4h + j); q = low - (high ? 0 : 4), in -4..3. Scale k
 * (k = e / 16) has low 4 bits scales[k] & 15 (k < 8) or scales[k-8] >> 4
 * (k >= 8), high 2 bits (scales[8 + k % 4] >> 2 * (k / 4)) & 3, and is
 * that 6-bit number minus 32. value = d * scale * q. */
typedef struct be_block_q3_k {
    uint8_t hmask[BE_QK_K / 8];   /* high bits */
    uint8_t qs[BE_QK_K / 4];      /* low 2 bits */
    uint8_t scales[12];           /* 16 6-bit scales, packed as above */
    uint16_t d;                   /* f16 super-scale */
} be_block_q3_k_t;
_Static_assert(sizeof(be_block_q3_k_t) == 110, "Q3_K block is 110 bytes");

/* Q4_K and Q5_K pack 8 6-bit scales and 8 6-bit mins in 12 bytes: for
 * sub-block j < 4, scale = s[j] & 63, min = s[j+4] & 63; for j >= 4,
 * scale = (s[j+4] & 15) | (s[j-4] >> 6) << 4, min = (s[j+4] >> 4) |
 * (s[j] >> 6) << 4. Sub-blocks are 32 elements.
 *
 * 4-bit: element e = 64i + l (i = 0..3, l = 0..31) is qs[32i + l] & 15 in
 * sub-block 2i; element 64i + 32 + l is qs[32i + l] >> 4 in sub-block
 * 2i+1. value = d * scale * q - dmin * min. */
typedef struct be_block_q4_k {
    uint16_t d;                       /* f16 super-scale of the scales */
    uint16_t dmin;                    /* f16 super-scale of the mins */
    uint8_t scales[BE_K_SCALE_SIZE];  /* packed as above */
    uint8_t qs[BE_QK_K / 2];          /* 4-bit quants */
} be_block_q4_k_t;
_Static_assert(sizeof(be_block_q4_k_t) == 144, "Q4_K block is 144 bytes");

/* 5-bit: Q4_K's layout plus bit 4 of element 64i + l in qh[l] bit 2i, and
 * of element 64i + 32 + l in qh[l] bit 2i+1. */
typedef struct be_block_q5_k {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[BE_K_SCALE_SIZE];
    uint8_t qh[BE_QK_K / 8];          /* high bits */
    uint8_t qs[BE_QK_K / 2];          /* low 4 bits */
} be_block_q5_k_t;
_Static_assert(sizeof(be_block_q5_k_t) == 176, "Q5_K block is 176 bytes");

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

/* Non-linear 4-bit: each quant is an index into a fixed table of int8
 * values (be_iq4_nl_values, quant_impl.h). Byte j of a 32-element group
 * holds element j (low nibble) and element j+16 (high nibble), as Q4_0.
 * value = d * table[q]. */
typedef struct be_block_iq4_nl {
    uint16_t d;               /* f16 scale */
    uint8_t qs[BE_QK4_0 / 2]; /* table indices */
} be_block_iq4_nl_t;
_Static_assert(sizeof(be_block_iq4_nl_t) == 18, "IQ4_NL block is 18 bytes");

/* IQ4_NL's table in a super-block of 256: 8 sub-blocks of 32, each with a
 * 6-bit scale u_ib (0..63): low 4 bits in scales_l[ib / 2] at bit
 * 4 * (ib % 2), high 2 bits in scales_h at bit 2 * ib. Sub-block ib's
 * indices are qs[16 ib .. 16 ib + 15], ordered as IQ4_NL's.
 * value = d * (u_ib - 32) * table[q]. */
typedef struct be_block_iq4_xs {
    uint16_t d;                   /* f16 super-scale */
    uint16_t scales_h;            /* high 2 bits of the 8 scales */
    uint8_t scales_l[BE_QK_K / 64]; /* low 4 bits, two per byte */
    uint8_t qs[BE_QK_K / 2];      /* table indices */
} be_block_iq4_xs_t;
_Static_assert(sizeof(be_block_iq4_xs_t) == 136, "IQ4_XS block is 136 bytes");

/* OCP microscaling FP4: 32 E2M1 codes (sign, 2 exponent bits, 1 mantissa
 * bit; nibble order as Q4_0) sharing one E8M0 exponent byte e.
 * value = E2M1(q) * 2^(e - 127); kernels use the doubled table
 * (be_mxfp4_values: integers) times 2^(e - 128), as ggml does. e = 255
 * (the spec's NaN) reads as 2^127 there, and so here. */
typedef struct be_block_mxfp4 {
    uint8_t e;                /* E8M0 shared exponent, bias 127 */
    uint8_t qs[BE_QK4_0 / 2]; /* E2M1 codes */
} be_block_mxfp4_t;
_Static_assert(sizeof(be_block_mxfp4_t) == 17, "MXFP4 block is 17 bytes");

/* The 2- and 3-bit I-quants (quant_iq.h has the value formula and the
 * grids): super-blocks of 256 under one f16 scale d, 8 sub-blocks of 32,
 * each of four 8-element groups with grid points and sign bits.
 *
 * IQ2_XXS: sub-block ib is bytes 8 ib .. 8 ib + 7 of qs: bytes 0..3 index
 * the 256-point grid for groups 0..3; bytes 4..7, read as a little-endian
 * uint32 u, hold group l's 7 sign bits at bit 7 l and the scale ls in bits
 * 28..31. */
typedef struct be_block_iq2_xxs {
    uint16_t d;                 /* f16 super-scale */
    uint16_t qs[BE_QK_K / 8];   /* indices, signs, scales as above */
} be_block_iq2_xxs_t;
_Static_assert(sizeof(be_block_iq2_xxs_t) == 66, "IQ2_XXS block is 66 bytes");

/* IQ2_XS: group l of sub-block ib is qs[4 ib + l]: bits 0..8 index the
 * 512-point grid, bits 9..15 are its 7 sign bits. scales[ib]: low nibble
 * for elements 0..15, high nibble for 16..31. */
typedef struct be_block_iq2_xs {
    uint16_t d;
    uint16_t qs[BE_QK_K / 8];
    uint8_t scales[BE_QK_K / 32];
} be_block_iq2_xs_t;
_Static_assert(sizeof(be_block_iq2_xs_t) == 74, "IQ2_XS block is 74 bytes");

/* IQ2_S: group l of sub-block ib indexes the 1024-point grid with
 * qs[4 ib + l] | ((qh[ib] >> 2 l) & 3) << 8; its 8 sign bits are byte
 * qs[32 + 4 ib + l]. scales as IQ2_XS. */
typedef struct be_block_iq2_s {
    uint16_t d;
    uint8_t qs[BE_QK_K / 4];      /* 32 index bytes, then 32 sign bytes */
    uint8_t qh[BE_QK_K / 32];     /* index bits 8..9, two per group */
    uint8_t scales[BE_QK_K / 32];
} be_block_iq2_s_t;
_Static_assert(sizeof(be_block_iq2_s_t) == 82, "IQ2_S block is 82 bytes");

/* IQ3_XXS: points of 4 elements; sub-block ib's 8 points index the
 * 256-point grid with qs[8 ib .. 8 ib + 7]; qs[64 + 4 ib ..] as a
 * little-endian uint32 holds the sign bits and scale as IQ2_XXS's u. */
typedef struct be_block_iq3_xxs {
    uint16_t d;
    uint8_t qs[3 * BE_QK_K / 8];
} be_block_iq3_xxs_t;
_Static_assert(sizeof(be_block_iq3_xxs_t) == 98, "IQ3_XXS block is 98 bytes");

/* IQ3_S: point k of sub-block ib indexes the 512-point grid with
 * qs[8 ib + k] | ((qh[ib] >> k) & 1) << 8; group l's 8 sign bits are
 * signs[4 ib + l]; ls is nibble ib % 2 of scales[ib / 2]. */
typedef struct be_block_iq3_s {
    uint16_t d;
    uint8_t qs[BE_QK_K / 4];
    uint8_t qh[BE_QK_K / 32];
    uint8_t signs[BE_QK_K / 8];
    uint8_t scales[BE_QK_K / 64];
} be_block_iq3_s_t;
_Static_assert(sizeof(be_block_iq3_s_t) == 110, "IQ3_S block is 110 bytes");

/* IQ1_S: sub-block ib's group l indexes the 2048-point grid (coordinates
 * -1, 0, 1) with qs[4 ib + l] | ((qh[ib] >> 3 l) & 7) << 8; qh[ib] bits
 * 12..14 are ls, bit 15 the shift's sign. value = d * (2 ls + 1) *
 * (grid + (bit 15 ? -1/8 : 1/8)). */
typedef struct be_block_iq1_s {
    uint16_t d;
    uint8_t qs[BE_QK_K / 8];
    uint16_t qh[BE_QK_K / 32];
} be_block_iq1_s_t;
_Static_assert(sizeof(be_block_iq1_s_t) == 50, "IQ1_S block is 50 bytes");

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
/* Four dot products of four weight rows (w, w + w_stride bytes, ...) with
 * one activation row: s[0..3]. Same sums as vec_dot per row up to float
 * rounding (the order differs). Used by matmul for decode (n == 1). */
typedef void (*be_vec_dot_r4_fn)(int64_t n, float *s, const void *w,
                                 size_t w_stride, const void *a);
/* vec_dot_r4 for four activation rows (a + k * a_stride bytes): writes
 * s[k * s_stride + r] with, per k, exactly vec_dot_r4's bits. */
typedef void (*be_vec_dot44_fn)(int64_t n, float *s, size_t s_stride,
                                const void *w, size_t w_stride, const void *a,
                                size_t a_stride);
/* Four dot products of one weight row with four activation rows:
 * s[k * s_stride] = sum_i w[i] * a_k[i] for a_k = a + k * a_stride bytes,
 * k = 0..3. Bit for bit what vec_dot gives for each pair (same float steps
 * per column); faster because the weight block is decoded once for all
 * four. Used by matmul for prompts (n > 1). */
typedef void (*be_vec_dot4_fn)(int64_t n, float *s, size_t s_stride,
                               const void *w, const void *a, size_t a_stride);

typedef struct be_type_traits {
    cr_type_t type;
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
    be_to_float_fn to_float;     /* dequantize a row */
    be_from_float_fn from_float; /* quantize a row */
    be_vec_dot_fn vec_dot;       /* NULL for activation-only types (Q8_K) */
    cr_type_t vec_dot_type;      /* activation format vec_dot wants */
    be_vec_dot4_fn vec_dot4;     /* NULL: matmul calls vec_dot four times */
    be_vec_dot_r4_fn vec_dot_r4; /* NULL: matmul calls vec_dot per row;
                                    else matmul groups rows by four for
                                    any n (batch == single steps, bitwise) */
    be_vec_dot44_fn vec_dot44;   /* with vec_dot_r4: four tokens at once */
} be_type_traits_t;

typedef enum be_simd {
    BE_SIMD_SCALAR = 0, /* plain C reference */
    BE_SIMD_AVX2 = 1,   /* AVX2 + FMA + F16C */
    BE_SIMD_AVX512_VNNI = 2, /* AVX2 level plus AVX-512 F/BW/VL/VNNI: the
                                packed kernels use VPDPBUSD, IQ4_NL's and
                                MXFP4's dot products 512-bit registers;
                                other kernels are the AVX2 ones */
} be_simd_t;

/* Best level this CPU supports (checked once with __builtin_cpu_supports).
 * CORRAL_CPU_SIMD=scalar forces the reference path, =avx2 caps the level
 * at AVX2. */
be_simd_t be_simd_detect(void);
const char *be_simd_name(be_simd_t s);

/* Traits of type t at a given level (levels above be_simd_detect()'s fall
 * back to the best it allows), or NULL if t has no kernels. Static. */
const be_type_traits_t *be_type_traits_at(cr_type_t t, be_simd_t level);

/* The traits table written for `level` (AVX-512: AVX2's plus its own),
 * whether or not this CPU can run it: for reports of what was and was not
 * exercised. Call kernels only from be_type_traits_at. */
const be_type_traits_t *be_type_traits_compiled(cr_type_t t, be_simd_t level);

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
