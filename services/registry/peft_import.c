/* peft_import.c: PEFT LoRA folder to GGUF LoRA (see peft_import.h). */
#include "lib/prelude.h"
#include "services/registry/peft_import.h"
#include "lib/gguf_write.h"
#include "lib/lora.h"
#include "lib/safetensors.h"

#include <jansson.h>
#include <sys/stat.h>

#define MAX_CONFIG_BYTES (1u << 20)
#define MAX_ADAPTER_BYTES ((uint64_t)4 << 30) /* tensor data read into memory */

static const struct {
    const char *hf, *gguf;
} MODULES[] = {
    {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},
    {"self_attn.v_proj", "attn_v"},   {"self_attn.o_proj", "attn_output"},
    {"mlp.gate_proj", "ffn_gate"},    {"mlp.up_proj", "ffn_up"},
    {"mlp.down_proj", "ffn_down"},
};

/* Base architectures whose Hugging Face tensors map as above; llama's q/k
 * rows are permuted by llama.cpp's converter, so their lora_B rows are too. */
static const struct {
    const char *arch;
    bool permute_qk;
} ARCHS[] = {{"llama", true}, {"qwen2", false}, {"qwen3", false}, {"qwen3moe", false}};

static const char *base_name(const char *name)
{
    const char *s = strrchr(name, '/');
    return s ? s + 1 : name;
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

bool reg_peft_is_folder_file(const char *name)
{
    const char *b = base_name(name);
    return has_suffix(b, ".safetensors") || has_suffix(b, ".json");
}

static const reg_hf_file_t *find(const reg_hf_file_t *files, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (!strcmp(base_name(files[i].name), name))
            return &files[i];
    return NULL;
}

/* r and lora_alpha of adapter_config.json; options the runner would not
 * honour are refused. */
static cr_status_t read_config(const reg_hf_file_t *f, int64_t *rank, double *alpha,
                               cr_err_t *err)
{
    struct stat sb;
    if (stat(f->path, &sb) != 0)
        return cr_err_set(err, CR_E_IO, "%s: %s", f->name, strerror(errno));
    if ((uint64_t)sb.st_size > MAX_CONFIG_BYTES)
        return cr_err_set(err, CR_E_INVALID, "%s: %lld bytes (at most %u)", f->name,
                          (long long)sb.st_size, MAX_CONFIG_BYTES);
    json_error_t jerr;
    json_t *cfg = json_load_file(f->path, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(cfg)) {
        json_decref(cfg);
        return cr_err_set(err, CR_E_INVALID, "%s: not a JSON object (%s)", f->name,
                          cfg ? "" : jerr.text);
    }
    cr_status_t st = CR_OK;
    json_t *r = json_object_get(cfg, "r"), *a = json_object_get(cfg, "lora_alpha");
    json_t *type = json_object_get(cfg, "peft_type"), *bias = json_object_get(cfg, "bias");
    json_t *save = json_object_get(cfg, "modules_to_save");
    static const char *const flags[] = {"use_dora", "use_rslora", "fan_in_fan_out"};
    static const char *const patterns[] = {"rank_pattern", "alpha_pattern"};
    if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "LORA")))
        st = cr_err_set(err, CR_E_INVALID, "%s: peft_type is not \"LORA\"", f->name);
    else if (!json_is_integer(r) || json_integer_value(r) < 1 ||
             json_integer_value(r) > CR_LORA_MAX_RANK)
        st = cr_err_set(err, CR_E_INVALID, "%s: r is not an integer in 1..%d", f->name,
                        CR_LORA_MAX_RANK);
    else if (!json_is_number(a) || json_number_value(a) < 0)
        st = cr_err_set(err, CR_E_INVALID, "%s: lora_alpha is not a non-negative number",
                        f->name);
    else if (bias && !json_is_null(bias) &&
             !(json_is_string(bias) && !strcmp(json_string_value(bias), "none")))
        st = cr_err_set(err, CR_E_INVALID, "%s: bias other than \"none\" is not supported",
                        f->name);
    else if (save && !json_is_null(save) && !(json_is_array(save) && !json_array_size(save)))
        st = cr_err_set(err, CR_E_INVALID, "%s: modules_to_save (whole trained weights) is "
                        "not supported", f->name);
    for (size_t i = 0; !st && i < CR_ARRAY_LEN(flags); i++)
        if (json_is_true(json_object_get(cfg, flags[i])))
            st = cr_err_set(err, CR_E_INVALID, "%s: %s is not supported", f->name, flags[i]);
    for (size_t i = 0; !st && i < CR_ARRAY_LEN(patterns); i++) {
        json_t *p = json_object_get(cfg, patterns[i]);
        if (p && !json_is_null(p) && !(json_is_object(p) && !json_object_size(p)))
            st = cr_err_set(err, CR_E_INVALID, "%s: %s is not supported", f->name,
                            patterns[i]);
    }
    if (!st) {
        *rank = json_integer_value(r);
        *alpha = json_number_value(a);
    }
    json_decref(cfg);
    return st;
}

/* "base_model.model.model.layers.N.<module>.lora_{A,B}.weight" -> the GGUF
 * name "blk.N.<gguf>.weight.lora_{a,b}"; *module the MODULES index, *is_b. */
static bool map_name(const char *name, char *out, size_t cap, size_t *module, bool *is_b)
{
    static const char prefix[] = "base_model.model.model.layers.";
    if (strncmp(name, prefix, sizeof prefix - 1))
        return false;
    const char *p = name + sizeof prefix - 1;
    char *end = NULL;
    if (*p < '0' || *p > '9')
        return false;
    long layer = strtol(p, &end, 10);
    if (layer < 0 || layer >= 1 << 20 || *end != '.')
        return false;
    for (size_t m = 0; m < CR_ARRAY_LEN(MODULES); m++) {
        size_t n = strlen(MODULES[m].hf);
        if (strncmp(end + 1, MODULES[m].hf, n))
            continue;
        const char *tail = end + 1 + n;
        if (strcmp(tail, ".lora_A.weight") && strcmp(tail, ".lora_B.weight"))
            return false;
        *is_b = tail[6] == 'B';
        *module = m;
        snprintf(out, cap, "blk.%ld.%s.weight.lora_%c", layer, MODULES[m].gguf,
                 *is_b ? 'b' : 'a');
        return true;
    }
    return false;
}

static cr_type_t gguf_type(cr_st_dtype_t t)
{
    return t == CR_ST_F16 ? CR_TYPE_F16 : t == CR_ST_BF16 ? CR_TYPE_BF16 : CR_TYPE_F32;
}

/* Reads t into a new buffer (*out, caller frees), rows permuted in groups
 * of `heads` heads (GGUF row h*hd + 2i + j is HF row h*hd + j*hd/2 + i)
 * when heads > 0. */
static cr_status_t read_tensor(const cr_st_file_t *f, const cr_st_tensor_t *t, int64_t heads,
                               void **out, cr_err_t *err)
{
    uint8_t *buf = malloc((size_t)t->size_bytes + 1);
    if (!buf)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    cr_status_t st = cr_st_read(f, t, buf, (size_t)t->size_bytes, err);
    uint64_t rows = t->shape[0];
    if (!st && heads > 0) {
        uint64_t hd = rows / (uint64_t)heads, half = hd / 2;
        uint64_t row_bytes = t->size_bytes / rows;
        if (rows % (uint64_t)heads || hd % 2) {
            st = cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' has %" PRIu64 " rows, not "
                            "%" PRId64 " heads of an even size", cr_st_name(f), t->name, rows,
                            heads);
        } else {
            uint8_t *perm = malloc((size_t)t->size_bytes + 1);
            if (!perm) {
                st = cr_err_set(err, CR_E_NOMEM, "out of memory");
            } else {
                for (uint64_t r = 0; r < rows; r++) {
                    uint64_t h = r / hd, i = (r % hd) / 2, j = r % 2;
                    memcpy(perm + r * row_bytes, buf + (h * hd + j * half + i) * row_bytes,
                           (size_t)row_bytes);
                }
                free(buf);
                buf = perm;
            }
        }
    }
    if (st) {
        free(buf);
        return st;
    }
    *out = buf;
    return CR_OK;
}

cr_status_t reg_peft_import(const reg_hf_file_t *files, size_t n, const cr_gguf_t *base,
                            const char *out_path, reg_hf_step_fn step, void *step_ctx,
                            cr_err_t *err)
{
    const reg_hf_file_t *fc = find(files, n, "adapter_config.json");
    const reg_hf_file_t *fm = find(files, n, "adapter_model.safetensors");
    if (!fc || !fm)
        return cr_err_set(err, CR_E_INVALID, "a PEFT adapter folder needs "
                          "adapter_config.json and adapter_model.safetensors (%s is missing)",
                          fc ? "adapter_model.safetensors" : "adapter_config.json");
    const char *arch = cr_gguf_arch(base);
    bool permute = false, known = false;
    for (size_t i = 0; i < CR_ARRAY_LEN(ARCHS); i++)
        if (!strcmp(ARCHS[i].arch, arch)) {
            known = true;
            permute = ARCHS[i].permute_qk;
        }
    if (!known)
        return cr_err_set(err, CR_E_INVALID, "PEFT adapters for \"%s\" models are not "
                          "supported (llama, qwen2, qwen3, qwen3moe); convert the adapter "
                          "to a GGUF LoRA first", arch);
    int64_t rank = 0;
    double alpha = 0;
    cr_status_t st = read_config(fc, &rank, &alpha, err);
    if (st)
        return st;
    char key[96];
    uint32_t heads = 0, kv_heads = 0;
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    cr_gguf_get_u32(base, key, &heads);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (!cr_gguf_get_u32(base, key, &kv_heads))
        kv_heads = heads;
    if (permute && (!heads || !kv_heads))
        return cr_err_set(err, CR_E_INVALID, "the model has no %s.attention.head_count",
                          arch);

    cr_st_file_t *f = NULL;
    if ((st = cr_st_open(fm->path, fm->name, &f, err)))
        return st;
    size_t nt = cr_st_tensor_count(f);
    void **bufs = calloc(nt + 1, sizeof *bufs);
    cr_gguf_writer_t *w = cr_gguf_writer_new();
    uint64_t total = 0;
    if (!bufs || !w) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    if ((st = cr_gguf_writer_add_str(w, "general.architecture", arch, err)) ||
        (st = cr_gguf_writer_add_str(w, "general.type", "adapter", err)) ||
        (st = cr_gguf_writer_add_str(w, "adapter.type", "lora", err)) ||
        (st = cr_gguf_writer_add_f32(w, "adapter.lora.alpha", (float)alpha, err)))
        goto out;
    for (size_t i = 0; i < nt; i++) {
        /* Between tensors: where a create whose client left stops. */
        if (step && (st = step(step_ctx, err)))
            goto out;
        const cr_st_tensor_t *t = cr_st_tensor_at(f, i);
        char gname[CR_GGUF_MAX_NAME_BYTES + 1];
        size_t module = 0;
        bool is_b = false;
        if (!map_name(t->name, gname, sizeof gname, &module, &is_b)) {
            st = cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' is not a LoRA A/B of a "
                            "layer's q/k/v/o or gate/up/down projection", fm->name, t->name);
            goto out;
        }
        /* the partner must be there (lib/lora.h checks the rest) */
        char partner[CR_ST_MAX_NAME_BYTES + 1];
        snprintf(partner, sizeof partner, "%.*s.lora_%c.weight",
                 (int)(strlen(t->name) - strlen(".lora_A.weight")), t->name,
                 is_b ? 'A' : 'B');
        if (!cr_st_tensor_find(f, partner)) {
            st = cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' has no '%s'", fm->name,
                            t->name, partner);
            goto out;
        }
        if (t->n_dims != 2 || t->shape[is_b ? 1 : 0] != (uint64_t)rank) {
            st = cr_err_set(err, CR_E_INVALID, "%s: tensor '%s' is not a rank-%" PRId64
                            " %s matrix", fm->name, t->name, rank, is_b ? "B" : "A");
            goto out;
        }
        if ((total += t->size_bytes) > MAX_ADAPTER_BYTES) {
            st = cr_err_set(err, CR_E_INVALID, "%s: more than %" PRIu64 " bytes of tensors",
                            fm->name, MAX_ADAPTER_BYTES);
            goto out;
        }
        int64_t groups = 0;
        if (permute && is_b && !strcmp(MODULES[module].gguf, "attn_q"))
            groups = heads;
        else if (permute && is_b && !strcmp(MODULES[module].gguf, "attn_k"))
            groups = kv_heads;
        if ((st = read_tensor(f, t, groups, &bufs[i], err)))
            goto out;
        uint64_t ne[2] = {t->shape[1], t->shape[0]};
        if ((st = cr_gguf_writer_add_tensor(w, gname, 2, ne, gguf_type(t->dtype), bufs[i],
                                            NULL, err)))
            goto out;
    }
    if (!nt) {
        st = cr_err_set(err, CR_E_INVALID, "%s has no tensors", fm->name);
        goto out;
    }
    st = cr_gguf_writer_write(w, out_path, err);
out:
    for (size_t i = 0; bufs && i < nt; i++)
        free(bufs[i]);
    free(bufs);
    cr_gguf_writer_destroy(&w);
    cr_st_close(&f);
    return st;
}
