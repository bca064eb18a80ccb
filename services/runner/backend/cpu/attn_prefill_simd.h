/* attn_prefill_simd.h: the body of attn_prefill.h's vector kernels, written
 * once for both widths. Included only by attn_prefill_avx2.c (8 floats per
 * vector) and attn_prefill_avx512.c (16), each of which first defines
 * PF_TGT (its target attribute), pf_vec (its vector type), PF_W (floats
 * per vector), PF_ZERO/PF_LOAD/PF_STORE/PF_SET1/PF_ADD/PF_MUL/PF_FMA (its
 * intrinsics) and PF_QK/PF_PV (the names of the two kernels it exports).
 *
 * qk repeats be_avx2_dot_f16 lane by lane with keys side by side (PF_W
 * keys per vector): its partial P_m (m < 32: accumulator m / 8, lane
 * m % 8) is an FMA chain over d = 32 i + m, the 8-wide tail loop extends
 * P_0..P_7, lane l of the accumulators' sum is
 * v_l = (P_l + P_l+8) + (P_l+16 + P_l+24), and hsum_ps adds
 * ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). pv multiplies, then
 * adds (no FMA), as attn_v does. No include guard: one inclusion per
 * width. */

/* P_m for four rows */
static inline PF_TGT void part4(pf_vec out[4], const float *const qr[4], const float *kt,
                             size_t ldk, int m, int n32, int n8)
{
    pf_vec a0 = PF_ZERO(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < n32 + (m < 8 ? n8 : 0); i++) {
        int d = i < n32 ? 32 * i + m : 32 * n32 + 8 * (i - n32) + m;
        pf_vec kv = PF_LOAD(kt + (size_t)d * ldk);
        a0 = PF_FMA(PF_SET1(qr[0][d]), kv, a0);
        a1 = PF_FMA(PF_SET1(qr[1][d]), kv, a1);
        a2 = PF_FMA(PF_SET1(qr[2][d]), kv, a2);
        a3 = PF_FMA(PF_SET1(qr[3][d]), kv, a3);
    }
    out[0] = a0, out[1] = a1, out[2] = a2, out[3] = a3;
}

/* v_l for four rows */
static inline PF_TGT void lane4(pf_vec out[4], const float *const qr[4], const float *kt,
                             size_t ldk, int l, int n32, int n8)
{
    pf_vec p0[4], p1[4], p2[4], p3[4];
    part4(p0, qr, kt, ldk, l, n32, n8);
    part4(p1, qr, kt, ldk, l + 8, n32, n8);
    part4(p2, qr, kt, ldk, l + 16, n32, n8);
    part4(p3, qr, kt, ldk, l + 24, n32, n8);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        out[r] = PF_ADD(PF_ADD(p0[r], p1[r]), PF_ADD(p2[r], p3[r]));
}

PF_TGT void PF_QK(int nq, int hd, const float *q, const float *kt, size_t ldk,
                       float *s, size_t lds)
{
    const float *qr[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        qr[r] = q + (size_t)(r < nq ? r : 0) * hd; /* missing rows: row 0, not stored */
    int n32 = hd / 32, n8 = hd % 32 / 8;
    pf_vec x[4], y[4], a[4], b[4];
    lane4(x, qr, kt, ldk, 0, n32, n8);
    lane4(y, qr, kt, ldk, 4, n32, n8);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        a[r] = PF_ADD(x[r], y[r]);
    lane4(x, qr, kt, ldk, 2, n32, n8);
    lane4(y, qr, kt, ldk, 6, n32, n8);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        a[r] = PF_ADD(a[r], PF_ADD(x[r], y[r]));
    lane4(x, qr, kt, ldk, 1, n32, n8);
    lane4(y, qr, kt, ldk, 5, n32, n8);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        b[r] = PF_ADD(x[r], y[r]);
    lane4(x, qr, kt, ldk, 3, n32, n8);
    lane4(y, qr, kt, ldk, 7, n32, n8);
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
        b[r] = PF_ADD(b[r], PF_ADD(x[r], y[r]));
    for (int r = 0; r < nq; r++)
        PF_STORE(s + (size_t)r * lds, PF_ADD(a[r], b[r]));
}

/* acc rows += p . v over one slice of W vectors at d0, NQ rows */
#define PV_SLICE(NQ, W)                                                              \
    do {                                                                             \
        pf_vec c[NQ][W];                                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < NQ; r++)                                                 \
            _Pragma("GCC unroll 4") for (int w = 0; w < W; w++)                                              \
                c[r][w] = PF_LOAD(acc + (size_t)r * hd + d0 + w * PF_W);              \
        for (int j = 0; j < n; j++) {                                                \
            pf_vec vv[W];                                                             \
            _Pragma("GCC unroll 4") for (int w = 0; w < W; w++)                                              \
                vv[w] = PF_LOAD(v + (size_t)j * hd + d0 + w * PF_W);                  \
            _Pragma("GCC unroll 4") for (int r = 0; r < NQ; r++) {                                           \
                pf_vec pw = PF_SET1(p[(size_t)r * ldp + j]);                           \
                _Pragma("GCC unroll 4") for (int w = 0; w < W; w++)                                          \
                    c[r][w] = PF_ADD(c[r][w], PF_MUL(pw, vv[w]));                       \
            }                                                                        \
        }                                                                            \
        _Pragma("GCC unroll 4") for (int r = 0; r < NQ; r++)                                                 \
            _Pragma("GCC unroll 4") for (int w = 0; w < W; w++)                                              \
                PF_STORE(acc + (size_t)r * hd + d0 + w * PF_W, c[r][w]);              \
    } while (0)

/* the last hd % PF_W dims, in C (ISO C: no contraction into an FMA) */
static void pv_tail(int nq, int n, int hd, int d0, const float *p, size_t ldp, const float *v,
                    float *acc)
{
    for (int j = 0; j < n; j++)
        for (int r = 0; r < nq; r++)
            for (int d = d0; d < hd; d++)
                acc[(size_t)r * hd + d] += p[(size_t)r * ldp + j] * v[(size_t)j * hd + d];
}

static PF_TGT void pv4(int n, int hd, const float *p, size_t ldp, const float *v, float *acc)
{
    int d0 = 0;
    for (; d0 + 4 * PF_W <= hd; d0 += 4 * PF_W)
        PV_SLICE(4, 4);
    for (; d0 + PF_W <= hd; d0 += PF_W)
        PV_SLICE(4, 1);
    if (d0 < hd)
        pv_tail(4, n, hd, d0, p, ldp, v, acc);
}

static PF_TGT void pv1(int n, int hd, const float *p, size_t ldp, const float *v, float *acc)
{
    int d0 = 0;
    for (; d0 + 4 * PF_W <= hd; d0 += 4 * PF_W)
        PV_SLICE(1, 4);
    for (; d0 + PF_W <= hd; d0 += PF_W)
        PV_SLICE(1, 1);
    if (d0 < hd)
        pv_tail(1, n, hd, d0, p, ldp, v, acc);
}

PF_TGT void PF_PV(int nq, int n, int hd, const float *p, size_t ldp, const float *v,
                       float *acc)
{
    if (nq == 4) {
        pv4(n, hd, p, ldp, v, acc);
        return;
    }
    for (int r = 0; r < nq; r++)
        pv1(n, hd, p + (size_t)r * ldp, ldp, v, acc + (size_t)r * hd);
}
