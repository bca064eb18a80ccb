/* kernels_ops.cu: the CUDA backend's non-matrix kernels.
 *
 * RMSNorm and softmax (one block per row), rotary embedding (one thread
 * per rotated pair, angles built by repeated float multiplication exactly
 * as the CPU backend does), F16 cache stores, SwiGLU and residual adds, and
 * attention: a flash-attention style kernel with an online softmax, one
 * block per (query token, head), four warps walking the keys and merging
 * their running maxima, sums and accumulators at the end, so no score
 * matrix is ever materialized. When too few (token, head) pairs exist to
 * fill the GPU (decode), the keys are split across blocks and a second
 * kernel merges the partial results (flash-decoding).
 *
 * Does not own memory or error reporting (backend_cuda.cu). */
#include "services/runner/backend/cuda/src/cuda_int.cuh"

#include <math.h>

#define ATT_WARPS 4
#define ATT_MAX_HD 256
#define ATT_PER_LANE (ATT_MAX_HD / 32)
#define ATT_KEYS_PER_SPLIT 256

/* ---- row reductions ---------------------------------------------------- */

__device__ __forceinline__ float warp_sum_f(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max_f(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum (or max) over a block of up to 1024 threads; every thread gets it. */
__device__ float block_reduce(float v, bool is_max)
{
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int n_warps = (blockDim.x + 31) / 32;
    v = is_max ? warp_max_f(v) : warp_sum_f(v);
    if (lane == 0)
        part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float u = lane < n_warps ? part[lane] : (is_max ? -INFINITY : 0.0f);
        u = is_max ? warp_max_f(u) : warp_sum_f(u);
        if (lane == 0)
            total = u;
    }
    __syncthreads();
    float r = total;
    __syncthreads(); /* part/total may be reused by a second call */
    return r;
}

__global__ void rmsnorm_kernel(float *y, const float *x, const float *w, int dim, float eps)
{
    const float *xr = x + (size_t)blockIdx.x * dim;
    float *yr = y + (size_t)blockIdx.x * dim;
    float ss = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        ss = fmaf(xr[i], xr[i], ss);
    ss = block_reduce(ss, false);
    float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
        yr[i] = (xr[i] * scale) * w[i];
}

void cu_rmsnorm(cudaStream_t s, float *y, const float *x, const float *w, int n, int dim,
                float eps)
{
    if (n > 0)
        rmsnorm_kernel<<<(unsigned)n, 256, 0, s>>>(y, x, w, dim, eps);
}

__global__ void softmax_kernel(float *x, int n_cols)
{
    float *xr = x + (size_t)blockIdx.x * n_cols;
    float mx = -INFINITY;
    for (int i = threadIdx.x; i < n_cols; i += blockDim.x)
        mx = fmaxf(mx, xr[i]);
    mx = block_reduce(mx, true);
    float sum = 0;
    for (int i = threadIdx.x; i < n_cols; i += blockDim.x) {
        float e = expf(xr[i] - mx);
        xr[i] = e;
        sum += e;
    }
    sum = block_reduce(sum, false);
    float inv = 1.0f / sum;
    for (int i = threadIdx.x; i < n_cols; i += blockDim.x)
        xr[i] *= inv;
}

void cu_softmax(cudaStream_t s, float *x, int n_rows, int n_cols)
{
    if (n_rows > 0)
        softmax_kernel<<<(unsigned)n_rows, 256, 0, s>>>(x, n_cols);
}

/* ---- rope ------------------------------------------------------------- */

/* One thread per (token, head, pair). */
__global__ void rope_kernel(float *x, int n, int n_head, int head_dim, int n_rot,
                            const int32_t *pos, float theta_scale, const float *ff)
{
    int half = n_rot / 2;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * n_head * half)
        return;
    int p = (int)(i % half);
    int64_t th_idx = i / half; /* token * n_head + head */
    int t = (int)(th_idx / n_head);
    /* theta_p = pos * theta_scale^p by repeated multiplication, like the CPU */
    float theta = (float)pos[t];
    for (int k = 0; k < p; k++)
        theta *= theta_scale;
    float th = ff ? theta / ff[p] : theta;
    float sn, cs;
    sincosf(th, &sn, &cs);
    float *v = x + th_idx * head_dim + 2 * p;
    float x0 = v[0], x1 = v[1];
    v[0] = x0 * cs - x1 * sn;
    v[1] = x0 * sn + x1 * cs;
}

void cu_rope(cudaStream_t s, float *x, int n, int n_head, int head_dim, int n_rot,
             const int32_t *pos, float theta_scale, const float *ff)
{
    int64_t total = (int64_t)n * n_head * (n_rot / 2);
    if (total > 0)
        rope_kernel<<<(unsigned)((total + 255) / 256), 256, 0, s>>>(
            x, n, n_head, head_dim, n_rot, pos, theta_scale, ff);
}

/* ---- elementwise ------------------------------------------------------ */

__global__ void kv_store_kernel(__half *cache, const float *src, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        cache[i] = __float2half_rn(src[i]);
}

void cu_kv_store(cudaStream_t s, uint16_t *cache, const float *src, size_t n)
{
    if (n)
        kv_store_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>((__half *)cache, src, n);
}

__global__ void swiglu_kernel(float *y, const float *gate, const float *up, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float g = gate[i];
        y[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void cu_swiglu(cudaStream_t s, float *y, const float *gate, const float *up, size_t n)
{
    if (n)
        swiglu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(y, gate, up, n);
}

__global__ void add_kernel(float *y, const float *x, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] += x[i];
}

void cu_add(cudaStream_t s, float *y, const float *x, size_t n)
{
    if (n)
        add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(y, x, n);
}

/* ---- optional ops (be_ops_ext_t) -------------------------------------- */

/* NEOX rotation: pair p is dims (p, p + n_rot/2); one thread per pair. */
__global__ void rope_neox_kernel(float *x, int n, int n_head, int head_dim, int n_rot,
                                 const int32_t *pos, float theta_scale, float freq_scale,
                                 const float *ff, float mscale)
{
    int half = n_rot / 2;
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * n_head * half)
        return;
    int p = (int)(i % half);
    int64_t th_idx = i / half;
    int t = (int)(th_idx / n_head);
    float theta = (float)pos[t] * freq_scale;
    for (int k = 0; k < p; k++)
        theta *= theta_scale;
    float th = ff ? theta / ff[p] : theta;
    float sn, cs;
    sincosf(th, &sn, &cs);
    cs *= mscale;
    sn *= mscale;
    float *v = x + th_idx * head_dim;
    float x0 = v[p], x1 = v[p + half];
    v[p] = x0 * cs - x1 * sn;
    v[p + half] = x0 * sn + x1 * cs;
}

void cu_rope_neox(cudaStream_t s, float *x, int n, int n_head, int head_dim, int n_rot,
                  const int32_t *pos, float theta_scale, float freq_scale, const float *ff,
                  float mscale)
{
    int64_t total = (int64_t)n * n_head * (n_rot / 2);
    if (total > 0)
        rope_neox_kernel<<<(unsigned)((total + 255) / 256), 256, 0, s>>>(
            x, n, n_head, head_dim, n_rot, pos, theta_scale, freq_scale, ff, mscale);
}

__global__ void add_rows_kernel(float *y, const float *b, int64_t cols, int64_t total)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < total)
        y[i] += b[i % cols];
}

void cu_add_rows(cudaStream_t s, float *y, const float *b, int64_t cols, int n)
{
    int64_t total = cols * n;
    if (total > 0)
        add_rows_kernel<<<(unsigned)((total + 255) / 256), 256, 0, s>>>(y, b, cols, total);
}

__global__ void scale_kernel(float *x, size_t n, float f)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        x[i] *= f;
}

void cu_scale(cudaStream_t s, float *x, size_t n, float f)
{
    if (n)
        scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, n, f);
}

__global__ void geglu_kernel(float *y, const float *gate, const float *up, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        /* GELU, tanh approximation, as the CPU backend computes it */
        const float c = 0.7978845608028654f;
        float g = gate[i];
        float gl = 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g)));
        y[i] = gl * up[i];
    }
}

void cu_geglu(cudaStream_t s, float *y, const float *gate, const float *up, size_t n)
{
    if (n)
        geglu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(y, gate, up, n);
}

/* ---- attention -------------------------------------------------------- */

/* Block (head h, token t, split sp) over keys [sp*chunk, min(+chunk, n_kv)).
 * With n_split == 1 writes out[t][h][:]; otherwise writes the partial
 * (max, sum, acc[hd]) to part[((t*n_head + h)*n_split + sp)*(hd+2)]. */
__global__ void attention_kernel(float *out, const float *q, const __half *k,
                                 const __half *v, int n_head, int n_head_kv, int head_dim,
                                 int pos0, float scale, float softcap, int window, int chunk,
                                 int n_split, float *part)
{
    __shared__ float sq[ATT_MAX_HD];
    __shared__ float s_m[ATT_WARPS], s_l[ATT_WARPS];
    __shared__ float s_acc[ATT_WARPS][ATT_MAX_HD];
    int h = blockIdx.x, t = blockIdx.y, sp = blockIdx.z;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int hd = head_dim, hk = h / (n_head / n_head_kv);
    size_t kv_row = (size_t)n_head_kv * hd;
    const float *qh = q + ((size_t)t * n_head + h) * hd;
    /* q rounded to f16 before meeting the f16 cache, as the CPU does */
    for (int d = threadIdx.x; d < hd; d += blockDim.x)
        sq[d] = __half2float(__float2half_rn(qh[d]));
    __syncthreads();

    /* keys first..pos0+t: all of them, or the last `window` */
    int n_kv = pos0 + t + 1;
    int first = window > 0 ? max(0, n_kv - window) : 0;
    int j0 = max(first, sp * chunk), j1 = min(n_kv, sp * chunk + chunk);
    float m = -INFINITY, l = 0;
    float acc[ATT_PER_LANE];
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; i++)
        acc[i] = 0;
    const __half *kb = k + (size_t)hk * hd, *vb = v + (size_t)hk * hd;
    for (int j = j0 + warp; j < j1; j += ATT_WARPS) {
        const __half *kr = kb + (size_t)j * kv_row;
        float sdot = 0;
#pragma unroll
        for (int i = 0; i < ATT_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hd)
                sdot = fmaf(sq[d], __half2float(kr[d]), sdot);
        }
        float sc = warp_sum_f(sdot) * scale;
        if (softcap > 0)
            sc = softcap * tanhf(sc / softcap);
        float m_new = fmaxf(m, sc);
        float corr = expf(m - m_new); /* 0 when m was -inf */
        float p = expf(sc - m_new);
        l = l * corr + p;
        const __half *vr = vb + (size_t)j * kv_row;
#pragma unroll
        for (int i = 0; i < ATT_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < hd)
                acc[i] = acc[i] * corr + p * __half2float(vr[d]);
        }
        m = m_new;
    }
    if (lane == 0) {
        s_m[warp] = m;
        s_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ATT_PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < hd)
            s_acc[warp][d] = acc[i];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++)
        M = fmaxf(M, s_m[w]);
    float L = 0, f[ATT_WARPS];
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = s_m[w] == -INFINITY ? 0.0f : expf(s_m[w] - M);
        L += s_l[w] * f[w];
    }
    if (n_split == 1) {
        float *o = out + ((size_t)t * n_head + h) * hd;
        float inv = L > 0 ? 1.0f / L : 0.0f;
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float a = 0;
            for (int w = 0; w < ATT_WARPS; w++)
                a += s_acc[w][d] * f[w];
            o[d] = a * inv;
        }
    } else {
        float *pp = part + (((size_t)t * n_head + h) * n_split + sp) * (size_t)(hd + 2);
        for (int d = threadIdx.x; d < hd; d += blockDim.x) {
            float a = 0;
            for (int w = 0; w < ATT_WARPS; w++)
                a += s_acc[w][d] * f[w];
            pp[2 + d] = a;
        }
        if (threadIdx.x == 0) {
            pp[0] = M;
            pp[1] = L;
        }
    }
}

/* One block per (head, token): merges the n_split partials. */
__global__ void attention_merge_kernel(float *out, const float *part, int n_head,
                                       int head_dim, int n_split)
{
    int h = blockIdx.x, t = blockIdx.y, hd = head_dim;
    const float *pp = part + ((size_t)t * n_head + h) * n_split * (size_t)(hd + 2);
    float M = -INFINITY;
    for (int sp = 0; sp < n_split; sp++)
        M = fmaxf(M, pp[(size_t)sp * (hd + 2)]);
    float L = 0;
    for (int sp = 0; sp < n_split; sp++) {
        float ms = pp[(size_t)sp * (hd + 2)];
        if (ms != -INFINITY)
            L += pp[(size_t)sp * (hd + 2) + 1] * expf(ms - M);
    }
    float inv = L > 0 ? 1.0f / L : 0.0f;
    float *o = out + ((size_t)t * n_head + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0;
        for (int sp = 0; sp < n_split; sp++) {
            float ms = pp[(size_t)sp * (hd + 2)];
            if (ms != -INFINITY)
                a += pp[(size_t)sp * (hd + 2) + 2 + d] * expf(ms - M);
        }
        o[d] = a * inv;
    }
}

size_t cu_attention_part_floats(int n_tok, int n_head, int head_dim, int n_kv_max, int n_sm)
{
    CR_UNUSED(n_kv_max);
    CR_UNUSED(n_sm);
    /* room for up to 32 splits of a batch of up to 4 tokens */
    return (size_t)CR_MIN(n_tok, 4) * (size_t)n_head * 32 * (size_t)(head_dim + 2);
}

void cu_attention(cudaStream_t s, float *out, const float *q, const uint16_t *k,
                  const uint16_t *v, const be_attn_t *a, float softcap, int window,
                  float *part, size_t part_floats, int n_sm)
{
    int n_kv_max = a->pos0 + a->n_tok;
    int pairs = a->n_tok * a->n_head;
    /* Split the keys when the (token, head) pairs leave most of the GPU
     * idle and there are enough keys to share out. */
    int n_split = 1;
    if (pairs < 2 * n_sm && n_kv_max > ATT_KEYS_PER_SPLIT) {
        n_split = CR_MIN((n_kv_max + ATT_KEYS_PER_SPLIT - 1) / ATT_KEYS_PER_SPLIT,
                         (2 * n_sm + pairs - 1) / pairs);
        n_split = CR_MIN(n_split, 32);
        size_t per = (size_t)pairs * (size_t)(a->head_dim + 2);
        while (n_split > 1 && (!part || per * (size_t)n_split > part_floats))
            n_split--;
    }
    int chunk = (n_kv_max + n_split - 1) / n_split;
    dim3 grid((unsigned)a->n_head, (unsigned)a->n_tok, (unsigned)n_split);
    attention_kernel<<<grid, 32 * ATT_WARPS, 0, s>>>(
        out, q, (const __half *)k, (const __half *)v, a->n_head, a->n_head_kv, a->head_dim,
        a->pos0, a->scale, softcap, window, chunk, n_split, part);
    if (n_split > 1)
        attention_merge_kernel<<<dim3((unsigned)a->n_head, (unsigned)a->n_tok), 128, 0, s>>>(
            out, part, a->n_head, a->head_dim, n_split);
}

/* ---- bandwidth probe (bench) ------------------------------------------ */

/* Reads n float4s once; the sum is written so the loads are not removed. */
__global__ void read_kernel(const float4 *x, size_t n, float *sink)
{
    float acc = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        acc += v.x + v.y + v.z + v.w;
    }
    if (acc == 1234.5f)
        *sink = acc;
}

void cu_read_probe(cudaStream_t s, const void *buf, size_t bytes, float *sink, int n_sm)
{
    read_kernel<<<(unsigned)(n_sm * 8), 512, 0, s>>>((const float4 *)buf, bytes / 16, sink);
}
