/* synth_lora.c: synthetic GGUF LoRA adapters for a base model (see
 * synth.h). */
#include "lib/prelude.h"
#include "tools/synth/synth.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"

#include <math.h>

/* splitmix64 and Box-Muller, as synth.c draws its weights. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static float normal(uint64_t *s, double std)
{
    double u1 = ((double)(next_u64(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = ((double)(next_u64(s) >> 11) + 0.5) / 9007199254740992.0;
    return (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

cr_status_t rn_synth_lora_write(const rn_synth_lora_opts_t *o, const char *base_path,
                                const char *path, cr_err_t *err)
{
    if (o->rank < 1)
        return cr_err_set(err, CR_E_INVALID, "rank %d < 1", o->rank);
    cr_gguf_t *base = NULL;
    cr_status_t st = cr_gguf_open(base_path, &base, err);
    if (st)
        return st;
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    size_t n_t = 0;
    while (o->targets && o->targets[n_t])
        n_t++;
    float **bufs = calloc(2 * n_t + 1, sizeof *bufs);
    if (!w || !bufs) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    if ((st = cr_gguf_writer_add_str(w, "general.architecture",
                                     o->arch ? o->arch : cr_gguf_arch(base), err)) ||
        (st = cr_gguf_writer_add_str(w, "general.type", "adapter", err)) ||
        (st = cr_gguf_writer_add_str(w, "adapter.type",
                                     o->adapter_type ? o->adapter_type : "lora", err)))
        goto out;
    if (o->alpha > 0 && (st = cr_gguf_writer_add_f32(w, "adapter.lora.alpha", o->alpha, err)))
        goto out;
    uint64_t seed = o->seed;
    double std = o->std > 0 ? o->std : 0.05;
    for (size_t i = 0; i < n_t; i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_find(base, o->targets[i]);
        if (!t || t->n_dims != 2) {
            st = cr_err_set(err, CR_E_INVALID, "base has no matrix '%s'", o->targets[i]);
            goto out;
        }
        uint64_t in = t->ne[0], outd = t->ne[1], r = (uint64_t)o->rank;
        uint64_t ne_a[2] = {in, r}, ne_b[2] = {r, outd};
        bufs[2 * i] = malloc(in * r * sizeof(float));
        bufs[2 * i + 1] = malloc(r * outd * sizeof(float));
        if (!bufs[2 * i] || !bufs[2 * i + 1]) {
            st = cr_err_set(err, CR_E_NOMEM, "out of memory");
            goto out;
        }
        for (uint64_t k = 0; k < in * r; k++)
            bufs[2 * i][k] = normal(&seed, std);
        for (uint64_t k = 0; k < r * outd; k++)
            bufs[2 * i + 1][k] = normal(&seed, std);
        char name[CR_GGUF_MAX_NAME_BYTES + 1];
        snprintf(name, sizeof name, "%s.lora_a", o->targets[i]);
        if ((st = cr_gguf_writer_add_tensor(w, name, 2, ne_a, CR_TYPE_F32, bufs[2 * i], NULL,
                                            err)))
            goto out;
        snprintf(name, sizeof name, "%s.lora_b", o->targets[i]);
        if ((st = cr_gguf_writer_add_tensor(w, name, 2, ne_b, CR_TYPE_F32, bufs[2 * i + 1],
                                            NULL, err)))
            goto out;
    }
    st = cr_gguf_writer_write(w, path, err);
out:
    for (size_t i = 0; bufs && i < 2 * n_t; i++)
        free(bufs[i]);
    free(bufs);
    cr_gguf_writer_destroy(&w);
    cr_gguf_close(&base);
    return st;
}

/* W [out][in] += scale * B A for one adapter's A [r][in], B [out][r]. */
static void merge_into(float *w, const cr_gguf_tensor_t *ta, const cr_gguf_tensor_t *tb,
                       double scale)
{
    uint64_t in = ta->ne[0], r = ta->ne[1], out = tb->ne[1];
    const float *A = ta->data, *B = tb->data;
    for (uint64_t o = 0; o < out; o++)
        for (uint64_t c = 0; c < in; c++) {
            double d = 0;
            for (uint64_t k = 0; k < r; k++)
                d += (double)B[o * r + k] * A[k * in + c];
            w[o * in + c] = (float)(w[o * in + c] + scale * d);
        }
}

cr_status_t rn_synth_lora_merge(const char *base_path, const char *const *ads, size_t n,
                                const char *path, cr_err_t *err)
{
    cr_gguf_t *g = NULL, **ad = calloc(n + 1, sizeof *ad);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    float **keep = NULL;
    size_t nt = 0;
    cr_status_t st = ad && w ? cr_gguf_open(base_path, &g, err)
                             : cr_err_set(err, CR_E_NOMEM, "out of memory");
    for (size_t i = 0; !st && i < n; i++)
        st = cr_gguf_open(ads[i], &ad[i], err);
    if (!st && !(keep = calloc((nt = cr_gguf_tensor_count(g)) + 1, sizeof *keep)))
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
    if (!st)
        st = cr_gguf_writer_copy_prefix(w, g, "", err);
    for (size_t i = 0; !st && i < nt; i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        for (size_t a = 0; !st && a < n; a++) {
            char name[CR_GGUF_MAX_NAME_BYTES + 16];
            snprintf(name, sizeof name, "%s.lora_a", t->name);
            const cr_gguf_tensor_t *ta = cr_gguf_tensor_find(ad[a], name);
            snprintf(name, sizeof name, "%s.lora_b", t->name);
            const cr_gguf_tensor_t *tb = cr_gguf_tensor_find(ad[a], name);
            if (!ta || !tb)
                continue;
            if (t->type != CR_TYPE_F32 || ta->type != CR_TYPE_F32 || tb->type != CR_TYPE_F32 ||
                ta->ne[0] != t->ne[0] || tb->ne[1] != t->ne[1] || tb->ne[0] != ta->ne[1]) {
                st = cr_err_set(err, CR_E_INVALID, "%s: not an F32 match for adapter %s",
                                t->name, ads[a]);
                break;
            }
            if (!keep[i] && (keep[i] = malloc((size_t)t->size_bytes)))
                memcpy(keep[i], t->data, (size_t)t->size_bytes);
            if (!keep[i]) {
                st = cr_err_set(err, CR_E_NOMEM, "out of memory");
                break;
            }
            float alpha = 0;
            cr_gguf_get_f32(ad[a], "adapter.lora.alpha", &alpha);
            merge_into(keep[i], ta, tb, alpha > 0 ? alpha / (double)ta->ne[1] : 1.0);
        }
        if (!st)
            st = cr_gguf_writer_add_tensor(w, t->name, t->n_dims, t->ne, t->type,
                                           keep[i] ? keep[i] : t->data, NULL, err);
    }
    if (!st)
        st = cr_gguf_writer_write(w, path, err);
    for (size_t i = 0; keep && i < nt; i++)
        free(keep[i]);
    free(keep);
    cr_gguf_writer_destroy(&w);
    for (size_t i = 0; ad && i < n; i++)
        cr_gguf_close(&ad[i]);
    free(ad);
    cr_gguf_close(&g);
    return st;
}
