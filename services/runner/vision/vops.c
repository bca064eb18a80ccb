/* vops.c: the towers' many-token steps (vops.h). */
#include "lib/prelude.h"
#include "services/runner/vision/vops.h"

#include <math.h>

void rn_vision_matmul(be_backend_t *be, const be_weight_t *w, const float *x, int n,
                      float *y)
{
    const be_ops_ext_t *ext = be_ext_ops(be);
    if (ext && ext->matmul_wide && ext->matmul_wide(be, w, x, n, y))
        return;
    be->ops->matmul(be, w, x, n, y);
}

void rn_vision_attend(be_backend_t *be, float *out, const float *q, const float *k,
                      const float *v, int n, int n_head, int head_dim, void *kc, void *vc)
{
    const be_ops_ext_t *ext = be_ext_ops(be);
    float scale = 1.0f / sqrtf((float)head_dim);
    if (ext && ext->attention_full &&
        ext->attention_full(be, out, q, k, v, n, n_head, head_dim, scale))
        return;
    int D = n_head * head_dim;
    be->ops->kv_store(be, kc, CR_TYPE_F16, k, n, 0, D);
    be->ops->kv_store(be, vc, CR_TYPE_F16, v, n, 0, D);
    be_attn_t a = {
        .n_tok = 1,
        .pos0 = n - 1,
        .n_head = n_head,
        .n_head_kv = n_head,
        .head_dim = head_dim,
        .scale = scale,
        .kv_type = CR_TYPE_F16,
    };
    for (int t = 0; t < n; t++)
        be->ops->attention(be, out + (size_t)t * D, q + (size_t)t * D, kc, vc, &a);
}
