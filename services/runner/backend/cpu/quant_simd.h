/* quant_simd.h: private to backend/cpu: the AVX2 and AVX-512 kernels
 * quant.c may pick.
 *
 * Each function has the contract of the scalar kernel of the same name in
 * quant.c. The be_avx2_ ones are compiled with target("avx2,fma,f16c") and
 * must only be called after be_simd_detect() said the CPU has those
 * features. */
#ifndef BE_CPU_QUANT_SIMD_H
#define BE_CPU_QUANT_SIMD_H

#include "lib/prelude.h"

void be_avx2_dot_f32(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_f16(int64_t n, float *s, const void *w, const void *a);
/* The F16 dot of row k with a query held as floats (F16 values, so
 * exact): be_avx2_dot_f16's bits for that query in F16 (the same lanes,
 * chains and sums) without converting it again per key. dot2: two
 * queries, each block of k converted once for both. */
void be_avx2_dot_f16_q32(int64_t n, float *s, const uint16_t *k, const float *q);
void be_avx2_dot2_f16_q32(int64_t n, float *s, const uint16_t *k, const float *q0,
                          const float *q1);
void be_avx2_dot_bf16(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q8_0(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q4_0(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q6_k(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q4_1(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q5_0(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q5_1(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q2_k(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q3_k(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q4_k(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_q5_k(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_iq4_nl(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_iq4_xs(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot_mxfp4(int64_t n, float *s, const void *w, const void *a);
void be_avx2_dot4_q8_0(int64_t n, float *s, size_t ss, const void *w, const void *a,
                       size_t as);
void be_avx2_dot4_q4_0(int64_t n, float *s, size_t ss, const void *w, const void *a,
                       size_t as);
void be_avx2_dot4_q4_k(int64_t n, float *s, size_t ss, const void *w, const void *a,
                       size_t as);
void be_avx2_dot4_q6_k(int64_t n, float *s, size_t ss, const void *w, const void *a,
                       size_t as);
void be_avx2_dotr4_q4_0(int64_t n, float *s, const void *w, size_t w_stride,
                        const void *a);
void be_avx2_dotr4_q8_0(int64_t n, float *s, const void *w, size_t w_stride,
                        const void *a);
void be_avx2_dot44_q4_0(int64_t n, float *s, size_t s_stride, const void *w,
                        size_t w_stride, const void *a, size_t a_stride);
void be_avx2_dot44_q8_0(int64_t n, float *s, size_t s_stride, const void *w,
                        size_t w_stride, const void *a, size_t a_stride);
void be_avx2_f32_to_f16(const float *x, void *y, int64_t n);
void be_avx2_f16_to_f32(const void *x, float *y, int64_t n);
/* AVX-512 (F/BW/VL/VNNI) kernels, quant_avx512.c: only after
 * be_simd_detect() said BE_SIMD_AVX512_VNNI. */
void be_avx512_dot_iq4_nl(int64_t n, float *s, const void *w, const void *a);
void be_avx512_dot_mxfp4(int64_t n, float *s, const void *w, const void *a);
/* Activation quantizers: the scalar ones' bits for finite inputs. */
void be_avx2_q8_0_from_float(const float *x, void *y, int64_t n);
void be_avx2_q8_k_from_float(const float *x, void *y, int64_t n);

#endif
