/* kernels_matmul.cu: the CUDA backend's quant formats and matrix kernels.
 *
 * Owns, on the device: the GGUF block layouts read in place from the
 * uploaded bytes (element dequantization for every type the CPU backend
 * multiplies), quantization of activations to Q8_0 / Q8_K exactly as the
 * CPU backend's from_float does, and the matrix-vector kernels of decode:
 *
 *   weight            activation     kernel
 *   F32/F16/BF16      f32 (rounded   one warp per (row, token), float
 *                     to f16/bf16)   accumulation
 *   Q8_0, Q4_0, Q5_0  Q8_0           integer dot products (dp4a) per
 *   Q4_1, Q5_1        Q8_1           32-element group, scaled in float
 *   Q2_K..Q6_K        Q8_K
 *
 * and the pieces of the prefill GEMM (weight rows dequantized to F16
 * tiles, activations to F16/BF16; backend_cuda.cu calls cuBLAS). Blocks
 * are 2-byte aligned at best (34-, 18-, 210-byte blocks), so 32-bit words
 * of quants are assembled from 16-bit loads where the layout needs it.
 *
 * Does not own memory, streams or error reporting (backend_cuda.cu). */
#include "services/runner/backend/cuda/src/cuda_int.cuh"
#include "services/runner/backend/cuda/be_cuda.h"

#include <cuda_bf16.h>

enum {
    T_F32 = CR_TYPE_F32,
    T_F16 = CR_TYPE_F16,
    T_Q4_0 = CR_TYPE_Q4_0,
    T_Q4_1 = CR_TYPE_Q4_1,
    T_Q5_0 = CR_TYPE_Q5_0,
    T_Q5_1 = CR_TYPE_Q5_1,
    T_Q8_0 = CR_TYPE_Q8_0,
    T_Q2_K = CR_TYPE_Q2_K,
    T_Q3_K = CR_TYPE_Q3_K,
    T_Q4_K = CR_TYPE_Q4_K,
    T_Q5_K = CR_TYPE_Q5_K,
    T_Q6_K = CR_TYPE_Q6_K,
    T_BF16 = CR_TYPE_BF16,
    T_GENERIC = 1000, /* kernel selector: dequantize per element */
};

#define WARPS_PER_BLOCK 4

bool cu_type_supported(int t)
{
    switch (t) {
    case T_F32: case T_F16: case T_BF16: case T_Q8_0: case T_Q4_0: case T_Q4_1:
    case T_Q5_0: case T_Q5_1: case T_Q2_K: case T_Q3_K: case T_Q4_K: case T_Q5_K:
    case T_Q6_K:
        return true;
    default:
        return false;
    }
}

/* ---- loads and scalars ------------------------------------------------ */

/* Everything a lane computes is __host__ __device__, so the same code runs
 * on the host in the test hooks at the end of this file. */
#define HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define UNROLL _Pragma("unroll")
#else
#define UNROLL
#endif

HD float ld_f16(const uint8_t *p)
{
    __half_raw r;
    r.x = *(const uint16_t *)p;
    return __half2float(__half(r));
}

HD float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

HD float round_f16(float x)
{
    return __half2float(__float2half_rn(x));
}

HD float round_bf16(float x)
{
    return __bfloat162float(__float2bfloat16_rn(x));
}

/* 4 bytes at a 2-byte aligned address. */
HD int ld32_a2(const uint8_t *p)
{
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

HD int ld32_a4(const uint8_t *p)
{
    return *(const int *)p;
}

/* c + the dot product of a's and b's four signed bytes. */
HD int dp4a(int a, int b, int c)
{
#ifdef __CUDA_ARCH__
    return __dp4a(a, b, c);
#else
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(a >> (8 * i)) * (int)(int8_t)(b >> (8 * i));
    return c;
#endif
}

/* Bits 0..3 of b moved to bit 4 of bytes 0..3 (Q5 high bits). */
HD int spread4(uint32_t b)
{
    return (int)(((b & 1) << 4) | ((b & 2) << 11) | ((b & 4) << 18) | ((b & 8) << 25));
}

/* be_k4_scale_min (quant_impl.h) on the device. */
HD void k4_scale_min(int j, const uint8_t *s, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* nearbyintf with the CPU's clamp (be_round_clamp): NaN becomes 0. */
HD int round_clamp(float v, int lo, int hi)
{
    float r = rintf(v);
    if (!(r == r))
        return 0;
    if (r < (float)lo)
        return lo;
    if (r > (float)hi)
        return hi;
    return (int)r;
}

/* ---- element dequantization (every supported type) -------------------- */

/* Element e of a row of type t, as the CPU's to_float computes it. */
__host__ __device__ float dequant_elem(int t, const uint8_t *row, int64_t e)
{
    switch (t) {
    case T_F32:
        return ((const float *)row)[e];
    case T_F16:
        return __half2float(((const __half *)row)[e]);
    case T_BF16:
        return bf16_to_f32(((const uint16_t *)row)[e]);
    case T_Q8_0: {
        const uint8_t *b = row + (e / 32) * 34;
        return ld_f16(b) * (float)(int8_t)b[2 + e % 32];
    }
    case T_Q4_0: {
        const uint8_t *b = row + (e / 32) * 18;
        int j = (int)(e % 32);
        int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
        return ld_f16(b) * (float)(q - 8);
    }
    case T_Q4_1: {
        const uint8_t *b = row + (e / 32) * 20;
        int j = (int)(e % 32);
        int q = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
        return ld_f16(b) * (float)q + ld_f16(b + 2);
    }
    case T_Q5_0: {
        const uint8_t *b = row + (e / 32) * 22;
        int j = (int)(e % 32);
        uint32_t qh = (uint32_t)ld32_a2(b + 2);
        int q = j < 16 ? (b[6 + j] & 15) : (b[6 + j - 16] >> 4);
        q |= (int)((qh >> j) & 1) << 4;
        return ld_f16(b) * (float)(q - 16);
    }
    case T_Q5_1: {
        const uint8_t *b = row + (e / 32) * 24;
        int j = (int)(e % 32);
        uint32_t qh = (uint32_t)ld32_a2(b + 4);
        int q = j < 16 ? (b[8 + j] & 15) : (b[8 + j - 16] >> 4);
        q |= (int)((qh >> j) & 1) << 4;
        return ld_f16(b) * (float)q + ld_f16(b + 2);
    }
    case T_Q2_K: {
        const uint8_t *b = row + (e / 256) * 84;
        int i = (int)(e % 256), h = i / 128, j = (i % 128) / 32, l = i % 32;
        int q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
        int s = b[i / 16];
        float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
        return d * (float)(s & 15) * (float)q - dmin * (float)(s >> 4);
    }
    case T_Q3_K: {
        const uint8_t *b = row + (e / 256) * 110;
        int i = (int)(e % 256), h = i / 128, j = (i % 128) / 32, l = i % 32;
        const uint8_t *sc = b + 96;
        int low = (b[32 + 32 * h + l] >> (2 * j)) & 3;
        int high = (b[l] >> (4 * h + j)) & 1;
        int q = low - (high ? 0 : 4);
        int k = i / 16;
        int s4 = k < 8 ? (sc[k] & 15) : (sc[k - 8] >> 4);
        int s2 = (sc[8 + k % 4] >> (2 * (k / 4))) & 3;
        return ld_f16(b + 108) * (float)((s4 | (s2 << 4)) - 32) * (float)q;
    }
    case T_Q4_K:
    case T_Q5_K: {
        bool five = t == T_Q5_K;
        const uint8_t *b = row + (e / 256) * (five ? 176 : 144);
        int i = (int)(e % 256), j = i / 32, l = i % 32;
        const uint8_t *qs = b + (five ? 48 : 16);
        int q = (j & 1) ? (qs[32 * (j / 2) + l] >> 4) : (qs[32 * (j / 2) + l] & 15);
        if (five)
            q |= ((b[16 + l] >> j) & 1) << 4;
        int sc, m;
        k4_scale_min(j, b + 4, &sc, &m);
        float dl = ld_f16(b) * (float)sc, ml = ld_f16(b + 2) * (float)m;
        return dl * (float)q - ml;
    }
    case T_Q6_K: {
        const uint8_t *b = row + (e / 256) * 210;
        int i = (int)(e % 256), h = i / 128, g = (i % 128) / 32, l = i % 32;
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        int lo = (g & 1) ? ql[l + 32] : ql[l];
        lo = (g & 2) ? (lo >> 4) : (lo & 15);
        int q = (lo | (((qh[l] >> (2 * g)) & 3) << 4)) - 32;
        int s = (int8_t)b[192 + i / 16];
        return ld_f16(b + 208) * (float)s * (float)q;
    }
    default:
        return 0.0f;
    }
}

/* ---- activation quantization ------------------------------------------ */

/* One warp per 32-element block: x [n][cols] -> Q8_0 rows. */
__global__ void quantize_q8_0_kernel(const float *x, cu_q8_0_t *y, int64_t n_blocks)
{
    int64_t b = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (b >= n_blocks)
        return;
    float v = x[b * 32 + lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float d = amax / 127.0f;
    float id = amax != 0 ? 127.0f / amax : 0.0f;
    y[b].qs[lane] = (int8_t)round_clamp(v * id, -127, 127);
    if (lane == 0)
        y[b].d = __half2float(__float2half_rn(d));
}

/* Q8_0 plus s = d * sum(qs) rounded to f16 (d before its rounding), as
 * the CPU's Q8_1. */
__global__ void quantize_q8_1_kernel(const float *x, cu_q8_1_t *y, int64_t n_blocks)
{
    int64_t b = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (b >= n_blocks)
        return;
    float v = x[b * 32 + lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    float d = amax / 127.0f;
    float id = amax != 0 ? 127.0f / amax : 0.0f;
    int q = round_clamp(v * id, -127, 127);
    y[b].qs[lane] = (int8_t)q;
    int sum = q;
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) {
        y[b].d = round_f16(d);
        y[b].s = round_f16(d * (float)sum);
    }
}

/* One 256-thread block per super-block: x [n][cols] -> Q8_K rows. The
 * scale comes from the value of largest magnitude, the first one on ties,
 * as the CPU picks it. */
__global__ void quantize_q8_k_kernel(const float *x, cu_q8_k_t *y)
{
    __shared__ float s_abs[8];
    __shared__ int s_idx[8];
    __shared__ float s_max;
    int64_t b = blockIdx.x;
    int i = threadIdx.x, lane = i % 32, warp = i / 32;
    float v = x[b * 256 + i];
    float a = fabsf(v);
    int idx = i;
    for (int o = 16; o > 0; o >>= 1) {
        float a2 = __shfl_xor_sync(0xffffffffu, a, o);
        int i2 = __shfl_xor_sync(0xffffffffu, idx, o);
        if (a2 > a || (a2 == a && i2 < idx)) {
            a = a2;
            idx = i2;
        }
    }
    if (lane == 0) {
        s_abs[warp] = a;
        s_idx[warp] = idx;
    }
    __syncthreads();
    if (i == 0) {
        float ba = s_abs[0];
        int bi = s_idx[0];
        for (int w = 1; w < 8; w++)
            if (s_abs[w] > ba) {
                ba = s_abs[w];
                bi = s_idx[w];
            }
        s_max = ba == 0 ? 0.0f : x[b * 256 + bi];
    }
    __syncthreads();
    float mx = s_max;
    if (mx == 0) {
        y[b].qs[i] = 0;
        if (i == 0)
            y[b].d = 0;
        return;
    }
    float iscale = -127.0f / mx;
    y[b].qs[i] = (int8_t)round_clamp(iscale * v, -128, 127);
    if (i == 0)
        y[b].d = 1.0f / iscale;
}

/* ---- matrix-vector kernels -------------------------------------------- */

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over one row of w times one activation row: each lane takes a share
 * of the row's groups; the warp adds the shares. */
template <int T>
__host__ __device__ float lane_dot(const uint8_t *w, const void *act, const float *x,
                                   int64_t cols, int lane, int gtype)
{
    float sum = 0;
    if (T == T_F32 || T == T_F16 || T == T_BF16) {
        for (int64_t c = lane; c < cols; c += 32) {
            float xv = x[c], wv;
            if (T == T_F32) {
                wv = ((const float *)w)[c];
            } else if (T == T_F16) {
                wv = __half2float(((const __half *)w)[c]);
                xv = round_f16(xv);
            } else {
                wv = bf16_to_f32(((const uint16_t *)w)[c]);
                xv = round_bf16(xv);
            }
            sum = fmaf(wv, xv, sum);
        }
    } else if (T == T_Q8_0 || T == T_Q4_0) {
        const cu_q8_0_t *a = (const cu_q8_0_t *)act;
        int64_t nb = cols / 32;
        for (int64_t ib = lane; ib < nb; ib += 32) {
            const int *aq = (const int *)a[ib].qs;
            int isum = 0;
            float dw;
            if (T == T_Q8_0) {
                const uint8_t *b = w + ib * 34;
                dw = ld_f16(b);
                UNROLL
                for (int k = 0; k < 8; k++)
                    isum = dp4a(ld32_a2(b + 2 + 4 * k), aq[k], isum);
            } else {
                const uint8_t *b = w + ib * 18;
                dw = ld_f16(b);
                int asum = 0;
                UNROLL
                for (int k = 0; k < 4; k++) {
                    int q = ld32_a2(b + 2 + 4 * k);
                    isum = dp4a(q & 0x0f0f0f0f, aq[k], isum);
                    isum = dp4a((q >> 4) & 0x0f0f0f0f, aq[4 + k], isum);
                    asum = dp4a(0x01010101, aq[k], asum);
                    asum = dp4a(0x01010101, aq[4 + k], asum);
                }
                isum -= 8 * asum;
            }
            sum += (float)isum * (dw * a[ib].d);
        }
    } else if (T == T_Q5_0) {
        const cu_q8_0_t *a = (const cu_q8_0_t *)act;
        int64_t nb = cols / 32;
        for (int64_t ib = lane; ib < nb; ib += 32) {
            const int *aq = (const int *)a[ib].qs;
            const uint8_t *b = w + ib * 22;
            uint32_t qh = (uint32_t)ld32_a2(b + 2);
            int isum = 0, asum = 0;
            UNROLL
            for (int k = 0; k < 4; k++) {
                int q = ld32_a2(b + 6 + 4 * k);
                int lo = (q & 0x0f0f0f0f) | spread4(qh >> (4 * k));
                int hi = ((q >> 4) & 0x0f0f0f0f) | spread4(qh >> (16 + 4 * k));
                isum = dp4a(lo, aq[k], isum);
                isum = dp4a(hi, aq[4 + k], isum);
                asum = dp4a(0x01010101, aq[k], asum);
                asum = dp4a(0x01010101, aq[4 + k], asum);
            }
            isum -= 16 * asum;
            sum += (float)isum * (ld_f16(b) * a[ib].d);
        }
    } else if (T == T_Q4_1 || T == T_Q5_1) {
        const cu_q8_1_t *a = (const cu_q8_1_t *)act;
        const bool five = T == T_Q5_1;
        int64_t nb = cols / 32;
        for (int64_t ib = lane; ib < nb; ib += 32) {
            const int *aq = (const int *)a[ib].qs;
            const uint8_t *b = w + ib * (five ? 24 : 20);
            const uint8_t *qs = b + (five ? 8 : 4);
            uint32_t qh = five ? (uint32_t)ld32_a2(b + 4) : 0;
            int isum = 0;
            UNROLL
            for (int k = 0; k < 4; k++) {
                int q = ld32_a2(qs + 4 * k);
                int lo = q & 0x0f0f0f0f, hi = (q >> 4) & 0x0f0f0f0f;
                if (five) {
                    lo |= spread4(qh >> (4 * k));
                    hi |= spread4(qh >> (16 + 4 * k));
                }
                isum = dp4a(lo, aq[k], isum);
                isum = dp4a(hi, aq[4 + k], isum);
            }
            sum += (ld_f16(b) * a[ib].d) * (float)isum + ld_f16(b + 2) * a[ib].s;
        }
    } else if (T == T_Q2_K || T == T_Q3_K) {
        const cu_q8_k_t *a = (const cu_q8_k_t *)act;
        int64_t n_items = cols / 32;
        for (int64_t it = lane; it < n_items; it += 32) {
            int64_t ib = it / 8;
            int j = (int)(it % 8), h = j / 4, jj = j % 4;
            const int *aq = (const int *)(a[ib].qs + 32 * j);
            if (T == T_Q2_K) {
                const uint8_t *b = w + ib * 84;
                int isum = 0, msum = 0;
                UNROLL
                for (int hf = 0; hf < 2; hf++) {
                    int is = 0, as = 0;
                    UNROLL
                    for (int k = 4 * hf; k < 4 * hf + 4; k++) {
                        int q = (ld32_a4(b + 16 + 32 * h + 4 * k) >> (2 * jj)) & 0x03030303;
                        is = dp4a(q, aq[k], is);
                        as = dp4a(0x01010101, aq[k], as);
                    }
                    int sc = b[2 * j + hf];
                    isum += is * (sc & 15);
                    msum += as * (sc >> 4);
                }
                float dall = a[ib].d * ld_f16(b + 80), dmin = a[ib].d * ld_f16(b + 82);
                sum += dall * (float)isum - dmin * (float)msum;
            } else {
                const uint8_t *b = w + ib * 110;
                const uint8_t *sc = b + 96;
                int isum = 0;
                UNROLL
                for (int hf = 0; hf < 2; hf++) {
                    int is = 0, as = 0;
                    UNROLL
                    for (int k = 4 * hf; k < 4 * hf + 4; k++) {
                        int lo = (ld32_a2(b + 32 + 32 * h + 4 * k) >> (2 * jj)) & 0x03030303;
                        int hb = (ld32_a2(b + 4 * k) >> (4 * h + jj)) & 0x01010101;
                        is = dp4a(lo | (hb << 2), aq[k], is);
                        as = dp4a(0x01010101, aq[k], as);
                    }
                    int k16 = 2 * j + hf;
                    int s4 = k16 < 8 ? (sc[k16] & 15) : (sc[k16 - 8] >> 4);
                    int s2 = (sc[8 + k16 % 4] >> (2 * (k16 / 4))) & 3;
                    isum += (is - 4 * as) * ((s4 | (s2 << 4)) - 32);
                }
                sum += (ld_f16(b + 108) * a[ib].d) * (float)isum;
            }
        }
    } else if (T == T_Q4_K || T == T_Q5_K || T == T_Q6_K) {
        const cu_q8_k_t *a = (const cu_q8_k_t *)act;
        int64_t n_items = cols / 32; /* 8 groups of 32 per super-block */
        for (int64_t it = lane; it < n_items; it += 32) {
            int64_t ib = it / 8;
            int j = (int)(it % 8);
            const int *aq = (const int *)(a[ib].qs + 32 * j);
            float da = a[ib].d;
            if (T == T_Q4_K || T == T_Q5_K) {
                const bool five = T == T_Q5_K;
                const uint8_t *b = w + ib * (five ? 176 : 144);
                const uint8_t *qs = b + (five ? 48 : 16) + 32 * (j / 2);
                int isum = 0, asum = 0;
                UNROLL
                for (int k = 0; k < 8; k++) {
                    int q = ld32_a4(qs + 4 * k);
                    q = (j & 1) ? ((q >> 4) & 0x0f0f0f0f) : (q & 0x0f0f0f0f);
                    if (five) {
                        int h = ld32_a4(b + 16 + 4 * k);
                        q |= ((h >> j) & 0x01010101) << 4;
                    }
                    isum = dp4a(q, aq[k], isum);
                    asum = dp4a(0x01010101, aq[k], asum);
                }
                int sc, m;
                k4_scale_min(j, b + 4, &sc, &m);
                float d = da * ld_f16(b), dmin = da * ld_f16(b + 2);
                sum += d * (float)(isum * sc) - dmin * (float)(asum * m);
            } else {
                const uint8_t *b = w + ib * 210;
                int h = j / 4, g = j % 4;
                const uint8_t *ql = b + 64 * h + 32 * (g & 1);
                const uint8_t *qh = b + 128 + 32 * h;
                int part = 0;
                UNROLL
                for (int hf = 0; hf < 2; hf++) {
                    int isum = 0, asum = 0;
                    UNROLL
                    for (int k = 4 * hf; k < 4 * hf + 4; k++) {
                        int lo = ld32_a2(ql + 4 * k);
                        lo = (g & 2) ? ((lo >> 4) & 0x0f0f0f0f) : (lo & 0x0f0f0f0f);
                        int hi = (ld32_a2(qh + 4 * k) >> (2 * g)) & 0x03030303;
                        isum = dp4a(lo | (hi << 4), aq[k], isum);
                        asum = dp4a(0x01010101, aq[k], asum);
                    }
                    int s = (int8_t)b[192 + 8 * h + 2 * g + hf];
                    part += s * (isum - 32 * asum);
                }
                sum += (ld_f16(b + 208) * da) * (float)part;
            }
        }
    } else {
        for (int64_t c = lane; c < cols; c += 32)
            sum = fmaf(dequant_elem(gtype, w, c), x[c], sum);
    }
    return sum;
}

/* One warp per (row, token); grid (ceil(rows / 4), n). */
template <int T>
__global__ void matvec_kernel(const uint8_t *w, int64_t rows, int64_t cols, size_t row_bytes,
                              const float *x, const uint8_t *act, size_t act_row_bytes,
                              float *y, int gtype)
{
    int64_t r = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    int t = blockIdx.y;
    int lane = threadIdx.x % 32;
    if (r >= rows)
        return;
    float s = warp_sum(lane_dot<T>(w + r * row_bytes, act + (size_t)t * act_row_bytes,
                                   x + (size_t)t * cols, cols, lane, gtype));
    if (lane == 0)
        y[(size_t)t * rows + r] = s;
}

/* Which activation format a weight type's kernel reads: 0 none (f32), 1
 * Q8_0, 2 Q8_K, 3 Q8_1. */
static int act_format(int type)
{
    switch (type) {
    case T_Q8_0: case T_Q4_0: case T_Q5_0:
        return 1;
    case T_Q2_K: case T_Q3_K: case T_Q4_K: case T_Q5_K: case T_Q6_K:
        return 2;
    case T_Q4_1: case T_Q5_1:
        return 3;
    default:
        return 0;
    }
}

static size_t act_row_bytes(int type, int64_t cols)
{
    switch (act_format(type)) {
    case 1:
        return (size_t)(cols / 32) * sizeof(cu_q8_0_t);
    case 2:
        return (size_t)(cols / 256) * sizeof(cu_q8_k_t);
    case 3:
        return (size_t)(cols / 32) * sizeof(cu_q8_1_t);
    default:
        return 0;
    }
}

size_t cu_act_bytes(int type, int64_t cols, int n)
{
    return act_row_bytes(type, cols) * (size_t)n;
}

void cu_matvec(cudaStream_t s, int type, const void *w, int64_t rows, int64_t cols,
               size_t row_bytes, const float *x, int n, float *y, void *act)
{
    int fmt = act_format(type);
    if (fmt == 1) {
        int64_t nb = (int64_t)n * (cols / 32);
        unsigned grid = (unsigned)((nb + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
        quantize_q8_0_kernel<<<grid, 32 * WARPS_PER_BLOCK, 0, s>>>(x, (cu_q8_0_t *)act, nb);
    } else if (fmt == 2) {
        unsigned grid = (unsigned)((int64_t)n * (cols / 256));
        quantize_q8_k_kernel<<<grid, 256, 0, s>>>(x, (cu_q8_k_t *)act);
    } else if (fmt == 3) {
        int64_t nb = (int64_t)n * (cols / 32);
        unsigned grid = (unsigned)((nb + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK);
        quantize_q8_1_kernel<<<grid, 32 * WARPS_PER_BLOCK, 0, s>>>(x, (cu_q8_1_t *)act, nb);
    }
    size_t arb = act_row_bytes(type, cols);
    const uint8_t *wb = (const uint8_t *)w;
    const uint8_t *ab = (const uint8_t *)act;
    /* Tokens beyond the grid's y limit go in further launches. */
    for (int t0 = 0; t0 < n; t0 += 65535) {
        int nt = CR_MIN(n - t0, 65535);
        dim3 grid((unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK), (unsigned)nt);
        dim3 block(32 * WARPS_PER_BLOCK);
        const float *xt = x + (size_t)t0 * cols;
        const uint8_t *at = ab ? ab + (size_t)t0 * arb : ab;
        float *yt = y + (size_t)t0 * rows;
#define LAUNCH(TT)                                                                      \
    matvec_kernel<TT><<<grid, block, 0, s>>>(wb, rows, cols, row_bytes, xt, at, arb, yt, type)
        switch (type) {
        case T_F32: LAUNCH(T_F32); break;
        case T_F16: LAUNCH(T_F16); break;
        case T_BF16: LAUNCH(T_BF16); break;
        case T_Q8_0: LAUNCH(T_Q8_0); break;
        case T_Q4_0: LAUNCH(T_Q4_0); break;
        case T_Q5_0: LAUNCH(T_Q5_0); break;
        case T_Q4_1: LAUNCH(T_Q4_1); break;
        case T_Q5_1: LAUNCH(T_Q5_1); break;
        case T_Q2_K: LAUNCH(T_Q2_K); break;
        case T_Q3_K: LAUNCH(T_Q3_K); break;
        case T_Q4_K: LAUNCH(T_Q4_K); break;
        case T_Q5_K: LAUNCH(T_Q5_K); break;
        case T_Q6_K: LAUNCH(T_Q6_K); break;
        default: LAUNCH(T_GENERIC); break;
        }
#undef LAUNCH
    }
}

/* ---- dequantization, get_rows, conversions ----------------------------- */

__global__ void dequant_f16_kernel(int type, const uint8_t *w, int64_t r0, int64_t nr,
                                   int64_t cols, size_t row_bytes, __half *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= nr * cols)
        return;
    int64_t r = i / cols, c = i % cols;
    out[i] = __float2half_rn(dequant_elem(type, w + (r0 + r) * row_bytes, c));
}

void cu_dequant_f16(cudaStream_t s, int type, const void *w, int64_t r0, int64_t nr,
                    int64_t cols, size_t row_bytes, __half *out)
{
    int64_t total = nr * cols;
    unsigned grid = (unsigned)((total + 255) / 256);
    dequant_f16_kernel<<<grid, 256, 0, s>>>(type, (const uint8_t *)w, r0, nr, cols,
                                            row_bytes, out);
}

__global__ void get_rows_kernel(int type, const uint8_t *w, int64_t cols, size_t row_bytes,
                                const int32_t *ids, int n, float *out)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * cols)
        return;
    int64_t t = i / cols, c = i % cols;
    out[i] = dequant_elem(type, w + (size_t)ids[t] * row_bytes, c);
}

void cu_get_rows(cudaStream_t s, int type, const void *w, int64_t cols, size_t row_bytes,
                 const int32_t *ids, int n, float *out)
{
    int64_t total = (int64_t)n * cols;
    unsigned grid = (unsigned)((total + 255) / 256);
    get_rows_kernel<<<grid, 256, 0, s>>>(type, (const uint8_t *)w, cols, row_bytes, ids, n,
                                         out);
}

__global__ void f32_to_f16_kernel(const float *x, __half *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __float2half_rn(x[i]);
}

__global__ void f32_to_bf16_kernel(const float *x, __nv_bfloat16 *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = __float2bfloat16_rn(x[i]);
}

void cu_f32_to_f16(cudaStream_t s, const float *x, __half *y, size_t n)
{
    f32_to_f16_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, y, n);
}

void cu_f32_to_bf16(cudaStream_t s, const float *x, void *y, size_t n)
{
    f32_to_bf16_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, (__nv_bfloat16 *)y,
                                                                   n);
}

/* ---- test hooks: the lanes' arithmetic on the host --------------------- */

/* The quantize kernels' results, computed serially (same formulas, same
 * tie rule). */
static void host_quantize_q8_0(const float *x, cu_q8_0_t *y, int64_t n_blocks)
{
    for (int64_t b = 0; b < n_blocks; b++) {
        const float *v = x + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(v[i]));
        float d = amax / 127.0f;
        float id = amax != 0 ? 127.0f / amax : 0.0f;
        for (int i = 0; i < 32; i++)
            y[b].qs[i] = (int8_t)round_clamp(v[i] * id, -127, 127);
        y[b].d = round_f16(d);
    }
}

static void host_quantize_q8_1(const float *x, cu_q8_1_t *y, int64_t n_blocks)
{
    for (int64_t b = 0; b < n_blocks; b++) {
        const float *v = x + b * 32;
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(v[i]));
        float d = amax / 127.0f;
        float id = amax != 0 ? 127.0f / amax : 0.0f;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            y[b].qs[i] = (int8_t)round_clamp(v[i] * id, -127, 127);
            sum += y[b].qs[i];
        }
        y[b].d = round_f16(d);
        y[b].s = round_f16(d * (float)sum);
    }
}

static void host_quantize_q8_k(const float *x, cu_q8_k_t *y, int64_t n_blocks)
{
    for (int64_t b = 0; b < n_blocks; b++) {
        const float *v = x + b * 256;
        float amax = 0, mx = 0;
        for (int i = 0; i < 256; i++)
            if (fabsf(v[i]) > amax) {
                amax = fabsf(v[i]);
                mx = v[i];
            }
        if (amax == 0) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float iscale = -127.0f / mx;
        for (int i = 0; i < 256; i++)
            y[b].qs[i] = (int8_t)round_clamp(iscale * v[i], -128, 127);
        y[b].d = 1.0f / iscale;
    }
}

extern "C" bool be_cuda_host_matvec_row(int type, const void *w_row, const float *x,
                                        int64_t cols, float *out)
{
    if (!cu_type_supported(type) || cols <= 0 || cols % 256)
        return false;
    void *act = NULL;
    int fmt = act_format(type);
    if (fmt) {
        act = malloc(act_row_bytes(type, cols));
        if (!act)
            return false;
        if (fmt == 1)
            host_quantize_q8_0(x, (cu_q8_0_t *)act, cols / 32);
        else if (fmt == 2)
            host_quantize_q8_k(x, (cu_q8_k_t *)act, cols / 256);
        else
            host_quantize_q8_1(x, (cu_q8_1_t *)act, cols / 32);
    }
    const uint8_t *w = (const uint8_t *)w_row;
    float sum = 0;
    for (int lane = 0; lane < 32; lane++) {
        switch (type) {
        case T_F32: sum += lane_dot<T_F32>(w, act, x, cols, lane, type); break;
        case T_F16: sum += lane_dot<T_F16>(w, act, x, cols, lane, type); break;
        case T_BF16: sum += lane_dot<T_BF16>(w, act, x, cols, lane, type); break;
        case T_Q8_0: sum += lane_dot<T_Q8_0>(w, act, x, cols, lane, type); break;
        case T_Q4_0: sum += lane_dot<T_Q4_0>(w, act, x, cols, lane, type); break;
        case T_Q5_0: sum += lane_dot<T_Q5_0>(w, act, x, cols, lane, type); break;
        case T_Q4_1: sum += lane_dot<T_Q4_1>(w, act, x, cols, lane, type); break;
        case T_Q5_1: sum += lane_dot<T_Q5_1>(w, act, x, cols, lane, type); break;
        case T_Q2_K: sum += lane_dot<T_Q2_K>(w, act, x, cols, lane, type); break;
        case T_Q3_K: sum += lane_dot<T_Q3_K>(w, act, x, cols, lane, type); break;
        case T_Q4_K: sum += lane_dot<T_Q4_K>(w, act, x, cols, lane, type); break;
        case T_Q5_K: sum += lane_dot<T_Q5_K>(w, act, x, cols, lane, type); break;
        case T_Q6_K: sum += lane_dot<T_Q6_K>(w, act, x, cols, lane, type); break;
        default: sum += lane_dot<T_GENERIC>(w, act, x, cols, lane, type); break;
        }
    }
    free(act);
    *out = sum;
    return true;
}

extern "C" bool be_cuda_host_dequant_row(int type, const void *row, int64_t cols, float *out)
{
    if (!cu_type_supported(type) || cols <= 0)
        return false;
    for (int64_t c = 0; c < cols; c++)
        out[c] = dequant_elem(type, (const uint8_t *)row, c);
    return true;
}
