/* lora.c: a GGUF LoRA adapter checked against its base (see lora.h). */
#include "lib/prelude.h"
#include "lib/lora.h"
#include "lib/tensor_type.h"

#include <ctype.h>
#include <math.h>

static const char *const TARGETS[CR_LORA_N_TARGETS] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

/* Decoder architectures whose projections the runner adapts (phi3's are
 * fused, so its attn_q..ffn_up do not exist as such; bert is an encoder). */
static const char *const ARCHS[] = {
    "llama", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "qwen3moe", "gpt-oss",
    "granite", "olmo2", "mistral3", "exaone", "exaone4", "smollm3", "command-r", "cohere2",
};

const char *cr_lora_target_name(cr_lora_target_t t)
{
    return (unsigned)t < CR_LORA_N_TARGETS ? TARGETS[t] : "?";
}

static bool has_suffix(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

/* "blk.N.<target>.weight" -> layer, target; false for any other name. */
static bool parse_target(const char *base, int *layer, cr_lora_target_t *target)
{
    if (strncmp(base, "blk.", 4) || !isdigit((unsigned char)base[4]))
        return false;
    char *end = NULL;
    long l = strtol(base + 4, &end, 10);
    if (l < 0 || l >= 1 << 20 || *end != '.')
        return false;
    for (int t = 0; t < CR_LORA_N_TARGETS; t++) {
        size_t n = strlen(TARGETS[t]);
        if (!strncmp(end + 1, TARGETS[t], n) && !strcmp(end + 1 + n, ".weight")) {
            *layer = (int)l;
            *target = (cr_lora_target_t)t;
            return true;
        }
    }
    return false;
}

static bool type_ok(cr_type_t t)
{
    return t == CR_TYPE_F32 || t == CR_TYPE_F16 || t == CR_TYPE_BF16 || t == CR_TYPE_Q8_0;
}

static const char *type_name(cr_type_t t)
{
    const cr_type_info_t *i = cr_type_info(t);
    return i && i->name ? i->name : "unknown";
}

static cr_status_t check_meta(const cr_gguf_t *base, const cr_gguf_t *ad, const char *label,
                              float *alpha, cr_err_t *err)
{
    char kind[64] = "", arch[64] = "";
    if (!cr_gguf_get_strz(ad, "general.type", kind, sizeof kind) || strcmp(kind, "adapter"))
        return cr_err_set(err, CR_E_INVALID, "adapter %s: general.type is \"%s\", not "
                          "\"adapter\" (not a GGUF adapter)", label, kind);
    if (!cr_gguf_get_strz(ad, "adapter.type", kind, sizeof kind) || strcmp(kind, "lora"))
        return cr_err_set(err, CR_E_INVALID, "adapter %s: adapter.type \"%s\" is not "
                          "supported (only \"lora\")", label, kind);
    snprintf(arch, sizeof arch, "%s", cr_gguf_arch(ad));
    if (strcmp(arch, cr_gguf_arch(base)))
        return cr_err_set(err, CR_E_INVALID, "adapter %s is for architecture \"%s\", the "
                          "model is \"%s\"", label, arch, cr_gguf_arch(base));
    bool known = false;
    for (size_t i = 0; i < CR_ARRAY_LEN(ARCHS); i++)
        known |= !strcmp(ARCHS[i], arch);
    if (!known)
        return cr_err_set(err, CR_E_INVALID, "adapter %s: LoRA adapters on \"%s\" models are "
                          "not supported", label, arch);
    *alpha = 0;
    if (cr_gguf_kv_find(ad, "adapter.lora.alpha") &&
        (!cr_gguf_get_f32(ad, "adapter.lora.alpha", alpha) || !isfinite(*alpha) || *alpha < 0))
        return cr_err_set(err, CR_E_INVALID, "adapter %s: adapter.lora.alpha is not a "
                          "non-negative number", label);
    return CR_OK;
}

/* Checks one lora_a tensor and its partner, filling *p. */
static cr_status_t check_pair(const cr_gguf_t *base, const cr_gguf_t *ad, const char *label,
                              const cr_gguf_tensor_t *a, float alpha, cr_lora_pair_t *p,
                              cr_err_t *err)
{
    char bname[CR_GGUF_MAX_NAME_BYTES + 1], pname[CR_GGUF_MAX_NAME_BYTES + 8];
    snprintf(bname, sizeof bname, "%.*s", (int)(strlen(a->name) - strlen(".lora_a")),
             a->name);
    if (!parse_target(bname, &p->layer, &p->target))
        return cr_err_set(err, CR_E_INVALID, "adapter %s: tensor '%s': LoRA on '%s' is not "
                          "supported (only blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,"
                          "ffn_up,ffn_down}.weight)", label, a->name, bname);
    snprintf(pname, sizeof pname, "%s.lora_b", bname);
    const cr_gguf_tensor_t *b = cr_gguf_tensor_find(ad, pname);
    if (!b)
        return cr_err_set(err, CR_E_INVALID, "adapter %s: tensor '%s' has no '%s'", label,
                          a->name, pname);
    const cr_gguf_tensor_t *w = cr_gguf_tensor_find(base, bname);
    if (!w)
        return cr_err_set(err, CR_E_INVALID, "adapter %s: tensor '%s' adapts '%s', which the "
                          "model does not have", label, a->name, bname);
    if (!type_ok(a->type) || !type_ok(b->type))
        return cr_err_set(err, CR_E_INVALID, "adapter %s: tensor '%s' is %s (supported: F32, "
                          "F16, BF16, Q8_0)", label, type_ok(a->type) ? b->name : a->name,
                          type_name(type_ok(a->type) ? b->type : a->type));
    uint64_t in = w->ne[0], out = w->ne[1], r = a->ne[1];
    if (w->n_dims != 2 || a->n_dims != 2 || b->n_dims != 2 || a->ne[0] != in ||
        b->ne[1] != out || b->ne[0] != r || r < 1 || r > CR_LORA_MAX_RANK)
        return cr_err_set(err, CR_E_INVALID, "adapter %s: '%s' [%" PRIu64 ", %" PRIu64 "] and "
                          "'%s' [%" PRIu64 ", %" PRIu64 "] do not fit '%s' [%" PRIu64 ", %" PRIu64
                          "] of the model (want [%" PRIu64 ", r] and [r, %" PRIu64 "], r <= %d)",
                          label, a->name, a->ne[0], a->ne[1], b->name, b->ne[0], b->ne[1],
                          bname, in, out, in, out, CR_LORA_MAX_RANK);
    *p = (cr_lora_pair_t){.a = a, .b = b, .base = w, .layer = p->layer, .target = p->target,
                          .rank = (int)r, .scale = alpha > 0 ? alpha / (float)r : 1.0f};
    return CR_OK;
}

cr_status_t cr_lora_pairs(const cr_gguf_t *base, const cr_gguf_t *ad, const char *label,
                          cr_lora_pair_t **pairs, size_t *n, cr_err_t *err)
{
    *pairs = NULL;
    *n = 0;
    float alpha = 0;
    cr_status_t st = check_meta(base, ad, label, &alpha, err);
    if (st)
        return st;
    size_t nt = cr_gguf_tensor_count(ad), n_a = 0;
    for (size_t i = 0; i < nt; i++) {
        const char *name = cr_gguf_tensor_at(ad, i)->name;
        if (has_suffix(name, ".lora_a")) {
            n_a++;
        } else if (has_suffix(name, ".lora_b")) {
            char a_name[CR_GGUF_MAX_NAME_BYTES + 1];
            snprintf(a_name, sizeof a_name, "%.*s.lora_a", (int)(strlen(name) - 7), name);
            if (!cr_gguf_tensor_find(ad, a_name))
                return cr_err_set(err, CR_E_INVALID, "adapter %s: tensor '%s' has no '%s'",
                                  label, name, a_name);
        } else {
            return cr_err_set(err, CR_E_INVALID, "adapter %s: tensor '%s' is neither a "
                              "'.lora_a' nor a '.lora_b' tensor", label, name);
        }
    }
    if (!n_a)
        return cr_err_set(err, CR_E_INVALID, "adapter %s has no LoRA tensors", label);
    cr_lora_pair_t *v = calloc(n_a, sizeof *v);
    if (!v)
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; !st && i < nt; i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(ad, i);
        if (has_suffix(t->name, ".lora_a"))
            st = check_pair(base, ad, label, t, alpha, &v[k++], err);
    }
    /* GGUF names are unique, so each weight is adapted at most once. */
    if (st) {
        free(v);
        return st;
    }
    *pairs = v;
    *n = k;
    return CR_OK;
}
