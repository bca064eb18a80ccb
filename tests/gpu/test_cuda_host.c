/* test_cuda_host.c: the CUDA kernels' block decoding, checked on the host.
 *
 * The matrix-vector kernels' per-lane arithmetic and the element
 * dequantization are __host__ __device__ code; be_cuda.h's test hooks run
 * them on the CPU. This test compares them with the CPU backend's scalar
 * reference for every type, so the layouts are verified in CI without a
 * GPU (it never skips):
 *   - dequantized rows equal the CPU's to_float (1e-6 of the largest);
 *   - one weight row times random activations, the activations quantized
 *     exactly as the CPU does (Q8_0 for Q8_0/Q4_0/Q5_0, Q8_1 for
 *     Q4_1/Q5_1, Q8_K for Q2_K..Q6_K; f16/bf16 rounding for F16/BF16):
 *     within 1e-5 of sum |w x| (float summation order only).
 * Unsupported types are refused. */
#include "lib/prelude.h"
#include "services/runner/backend/backend.h"
#include "services/runner/backend/cpu/quant.h"
#include "services/runner/backend/cuda/be_cuda.h"
#include "tests/gpu/gpu_harness.h"
#include "tests/unit/check.h"

#include <math.h>

#define COLS 512
#define ROWS 8

static void check_type(cr_type_t type, float scale)
{
    const be_type_traits_t *tt = be_type_traits_at(type, BE_SIMD_SCALAR);
    const be_type_traits_t *vt = be_type_traits_at(tt->vec_dot_type, BE_SIMD_SCALAR);
    uint64_t rb = 0;
    CHECK(cr_type_row_bytes(type, COLS, &rb));
    size_t ab = (size_t)(COLS / vt->block_elems) * vt->block_bytes;
    float *wf = malloc((size_t)ROWS * COLS * sizeof(float));
    uint8_t *wq = malloc((size_t)ROWS * rb);
    float *x = malloc(COLS * sizeof(float));
    float *dc = malloc(COLS * sizeof(float)), *dg = malloc(COLS * sizeof(float));
    void *xq = malloc(ab);
    rng_fill(wf, (size_t)ROWS * COLS, scale);
    for (int r = 0; r < ROWS; r++)
        tt->from_float(wf + (size_t)r * COLS, wq + (size_t)r * rb, COLS);
    double worst_deq = 0, worst_dot = 0;
    for (int r = 0; r < ROWS; r++) {
        const uint8_t *row = wq + (size_t)r * rb;
        /* dequantization */
        tt->to_float(row, dc, COLS);
        CHECK(be_cuda_host_dequant_row(type, row, COLS, dg));
        double e = rel_err(dg, dc, COLS, 1e-9);
        worst_deq = e > worst_deq ? e : worst_deq;
        /* one dot product, activations of varied scale per row */
        rng_fill(x, COLS, (float)(r + 1) * 0.5f);
        if (r == 1)
            memset(x, 0, 256 * sizeof(float)); /* an all-zero block */
        float ref = 0, got = 0;
        vt->from_float(x, xq, COLS);
        tt->vec_dot(COLS, &ref, row, xq);
        CHECK(be_cuda_host_matvec_row(type, row, x, COLS, &got));
        double mag = 0;
        for (int c = 0; c < COLS; c++)
            mag += fabs((double)dc[c] * x[c]);
        double d = fabs((double)got - ref) / (mag > 0 ? mag : 1);
        worst_dot = d > worst_dot ? d : worst_dot;
    }
    double dot_tol = 1e-5;
    CHECK_MSG(worst_deq <= 1e-6, "%s: dequant rel err %.3g", tt->name, worst_deq);
    CHECK_MSG(worst_dot <= dot_tol, "%s: dot err %.3g of sum|wx| (tol %g)", tt->name,
              worst_dot, dot_tol);
    printf("%-5s dequant %.2g, dot %.2g\n", tt->name, worst_deq, worst_dot);
    free(wf);
    free(wq);
    free(x);
    free(dc);
    free(dg);
    free(xq);
}

int main(void)
{
    static const cr_type_t types[] = {
        CR_TYPE_F32, CR_TYPE_F16, CR_TYPE_BF16, CR_TYPE_Q8_0, CR_TYPE_Q4_0,
        CR_TYPE_Q4_1, CR_TYPE_Q5_0, CR_TYPE_Q5_1, CR_TYPE_Q2_K, CR_TYPE_Q3_K,
        CR_TYPE_Q4_K, CR_TYPE_Q5_K, CR_TYPE_Q6_K,
    };
    rng_seed(42);
    for (size_t i = 0; i < CR_ARRAY_LEN(types); i++) {
        check_type(types[i], 1.0f);
        check_type(types[i], 0.01f);
    }
    /* types without kernels are refused */
    float x[256] = {0}, out[256];
    uint8_t row[256] = {0};
    float s;
    CHECK(!be_cuda_host_matvec_row(CR_TYPE_I8, row, x, 256, &s));
    CHECK(!be_cuda_host_dequant_row(CR_TYPE_Q8_K, row, 256, out));
    CHECK(!be_cuda_host_matvec_row(CR_TYPE_Q8_0, row, x, 100, &s)); /* not whole blocks */
    /* the table formats have CPU kernels only (quant_nl.c): the CUDA
     * backend's type check refuses them (weight_prepare: by tensor name) */
    static const cr_type_t cpu_only[] = {CR_TYPE_IQ4_NL, CR_TYPE_IQ4_XS, CR_TYPE_MXFP4};
    for (size_t i = 0; i < CR_ARRAY_LEN(cpu_only); i++) {
        CHECK(!be_cuda_host_matvec_row(cpu_only[i], row, x, 256, &s));
        CHECK(!be_cuda_host_dequant_row(cpu_only[i], row, 256, out));
    }
    return check_finish("test_cuda_host");
}
