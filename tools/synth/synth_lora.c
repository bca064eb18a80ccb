/* synth_lora.c: synthetic GGUF LoRA adapters for a base model (see
 * synth.h). */
#include "lib/prelude.h"
#include "tools/synth/synth.h"
#include "lib/gguf.h"
#include "lib/gguf_write.h"
#include "services/runner/backend/cpu/quant.h"

#include <jansson.h>

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
    cr_type_t type = o->type ? o->type : CR_TYPE_F32;
    const be_type_traits_t *tt = be_type_traits_at(type, BE_SIMD_SCALAR);
    if (!tt || !tt->from_float ||
        (type != CR_TYPE_F32 && type != CR_TYPE_F16 && type != CR_TYPE_BF16 &&
         type != CR_TYPE_Q8_0)) {
        st = cr_err_set(err, CR_E_INVALID, "adapter type %u is not F32, F16, BF16 or Q8_0",
                        (unsigned)type);
        goto out;
    }
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
        /* rows of in (A) and r (B) elements rounded to the type in place
         * (its rows are never longer than F32's) */
        for (int m = 0; type != CR_TYPE_F32 && m < 2; m++) {
            uint64_t cols = m ? r : in, rows = m ? outd : r;
            if (cols % tt->block_elems) {
                st = cr_err_set(err, CR_E_INVALID, "%s: %" PRIu64 " columns are not whole "
                                "%s blocks", o->targets[i], cols, tt->name);
                goto out;
            }
            size_t rb = (size_t)(cols / tt->block_elems * tt->block_bytes);
            uint8_t *q = malloc(rb);
            if (!q) {
                st = cr_err_set(err, CR_E_NOMEM, "out of memory");
                goto out;
            }
            for (uint64_t row = 0; row < rows; row++) {
                tt->from_float(bufs[2 * i + m] + row * cols, q, (int64_t)cols);
                memcpy((uint8_t *)bufs[2 * i + m] + row * rb, q, rb);
            }
            free(q);
        }
        char name[CR_GGUF_MAX_NAME_BYTES + 1];
        snprintf(name, sizeof name, "%s.lora_a", o->targets[i]);
        if ((st = cr_gguf_writer_add_tensor(w, name, 2, ne_a, type, bufs[2 * i], NULL, err)))
            goto out;
        snprintf(name, sizeof name, "%s.lora_b", o->targets[i]);
        if ((st = cr_gguf_writer_add_tensor(w, name, 2, ne_b, type, bufs[2 * i + 1], NULL,
                                            err)))
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

static const char *const PEFT_MODULES[][2] = {
    {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"},
    {"ffn_gate", "mlp.gate_proj"},  {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
};

/* The safetensors header for g's tensors under their PEFT names. */
static json_t *peft_header(const cr_gguf_t *g, cr_err_t *err)
{
    json_t *hdr = json_object();
    uint64_t off = 0;
    for (size_t i = 0; hdr && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        int layer = 0;
        char mod[32] = "", ab = 0;
        const char *hf = NULL;
        if (sscanf(t->name, "blk.%d.%31[a-z_].weight.lora_%c", &layer, mod, &ab) == 3)
            for (size_t k = 0; k < CR_ARRAY_LEN(PEFT_MODULES); k++)
                if (!strcmp(PEFT_MODULES[k][0], mod))
                    hf = PEFT_MODULES[k][1];
        if (!hf || t->type != CR_TYPE_F32 || (ab != 'a' && ab != 'b')) {
            json_decref(hdr);
            cr_err_set(err, CR_E_INVALID, "%s: not an F32 projection LoRA tensor", t->name);
            return NULL;
        }
        char name[200];
        snprintf(name, sizeof name, "base_model.model.model.layers.%d.%s.lora_%c.weight",
                 layer, hf, ab == 'a' ? 'A' : 'B');
        json_object_set_new(hdr, name,
                            json_pack("{s:s, s:[I,I], s:[I,I]}", "dtype", "F32", "shape",
                                      (json_int_t)t->ne[1], (json_int_t)t->ne[0],
                                      "data_offsets", (json_int_t)off,
                                      (json_int_t)(off + t->size_bytes)));
        off += t->size_bytes;
    }
    return hdr;
}

cr_status_t rn_synth_lora_to_peft(const char *adapter_path, const char *base_path,
                                  const char *dir, cr_err_t *err)
{
    cr_gguf_t *g = NULL, *base = NULL;
    cr_status_t st = cr_gguf_open(adapter_path, &g, err);
    if (!st)
        st = cr_gguf_open(base_path, &base, err);
    json_t *hdr = st ? NULL : peft_header(g, err);
    char *text = hdr ? json_dumps(hdr, JSON_COMPACT) : NULL;
    char path[1024];
    FILE *f = NULL;
    if (!st && !text)
        st = err && err->status ? err->status : cr_err_set(err, CR_E_NOMEM, "out of memory");
    uint32_t heads = 0, kv = 0;
    bool llama = base && !strcmp(cr_gguf_arch(base), "llama");
    if (!st && llama) {
        cr_gguf_get_u32(base, "llama.attention.head_count", &heads);
        if (!cr_gguf_get_u32(base, "llama.attention.head_count_kv", &kv))
            kv = heads;
    }
    if (!st) {
        snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
        if (!(f = fopen(path, "wb")))
            st = cr_err_set(err, CR_E_IO, "%s: %s", path, strerror(errno));
    }
    if (!st) {
        uint64_t len = strlen(text);
        uint8_t le[8];
        for (int i = 0; i < 8; i++)
            le[i] = (uint8_t)(len >> (8 * i));
        bool ok = fwrite(le, 1, 8, f) == 8 && fwrite(text, 1, len, f) == len;
        for (size_t i = 0; ok && i < cr_gguf_tensor_count(g); i++) {
            const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
            uint64_t rows = t->ne[1], row_bytes = t->size_bytes / rows;
            bool q = strstr(t->name, ".attn_q.weight.lora_b") != NULL;
            bool k = strstr(t->name, ".attn_k.weight.lora_b") != NULL;
            uint64_t groups = llama && q ? heads : llama && k ? kv : 0;
            uint64_t hd = groups ? rows / groups : 0;
            for (uint64_t hr = 0; ok && hr < rows; hr++) {
                /* HF row h*hd + j*hd/2 + i is GGUF row h*hd + 2i + j */
                uint64_t r = hr;
                if (hd >= 2)
                    r = hr / hd * hd + 2 * ((hr % hd) % (hd / 2)) + (hr % hd) / (hd / 2);
                ok = fwrite((const uint8_t *)t->data + r * row_bytes, 1, (size_t)row_bytes,
                            f) == row_bytes;
            }
        }
        if (fclose(f) != 0 || !ok)
            st = cr_err_set(err, CR_E_IO, "%s: write failed", path);
    }
    if (!st) {
        const cr_gguf_tensor_t *a0 = cr_gguf_tensor_at(g, 0);
        float alpha = 0;
        cr_gguf_get_f32(g, "adapter.lora.alpha", &alpha);
        json_t *cfg = json_pack("{s:s, s:I, s:f, s:[s,s,s,s,s,s,s], s:s}", "peft_type", "LORA",
                                "r", (json_int_t)a0->ne[1], "lora_alpha", (double)alpha,
                                "target_modules", "q_proj", "k_proj", "v_proj", "o_proj",
                                "gate_proj", "up_proj", "down_proj", "bias", "none");
        snprintf(path, sizeof path, "%s/adapter_config.json", dir);
        if (!cfg || json_dump_file(cfg, path, JSON_INDENT(2)))
            st = cr_err_set(err, CR_E_IO, "%s: write failed", path);
        json_decref(cfg);
    }
    free(text);
    json_decref(hdr);
    cr_gguf_close(&base);
    cr_gguf_close(&g);
    return st;
}
