/* ggufinfo.c: config fields, model_info and tensors from GGUF metadata. */
#include "lib/prelude.h"
#include "services/registry/ggufinfo.h"
#include "lib/tensor_type.h"

#include <math.h>

uint64_t reg_gguf_param_count(const cr_gguf_t *g)
{
    uint64_t n = 0;
    if (cr_gguf_get_u64(g, "general.parameter_count", &n))
        return n;
    n = 0;
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        uint64_t e = cr_gguf_tensor_at(g, i)->n_elems;
        n = e > UINT64_MAX - n ? UINT64_MAX : n + e;
    }
    return n;
}

char *reg_human_number(uint64_t n, char *buf, size_t cap)
{
    const double billion = 1e9, million = 1e6, thousand = 1e3;
    double x;
    if (n >= 1000000000ull) {
        x = (double)n / billion;
        snprintf(buf, cap, x == floor(x) ? "%.0fB" : "%.1fB", x);
    } else if (n >= 1000000ull) {
        x = (double)n / million;
        snprintf(buf, cap, x == floor(x) ? "%.0fM" : "%.2fM", x);
    } else if (n >= 1000ull) {
        snprintf(buf, cap, "%.0fK", (double)n / thousand);
    } else {
        snprintf(buf, cap, "%" PRIu64, n);
    }
    return buf;
}

const char *reg_gguf_family(const cr_gguf_t *g)
{
    const char *a = cr_gguf_arch(g);
    return a && *a ? a : "unknown";
}

const char *reg_gguf_file_type(const cr_gguf_t *g)
{
    uint32_t ft;
    if (cr_gguf_get_u32(g, "general.file_type", &ft))
        return cr_file_type_name(ft);
    /* No file type recorded (some converters omit it): name the type that
     * holds most of the weight matrices' elements. */
    uint64_t elems[CR_TYPE__COUNT] = {0};
    for (size_t i = 0; i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        if (t->n_dims >= 2 && (unsigned)t->type < CR_TYPE__COUNT)
            elems[t->type] += t->n_elems;
    }
    const char *best = "unknown";
    uint64_t most = 0;
    for (unsigned ty = 0; ty < CR_TYPE__COUNT; ty++) {
        const cr_type_info_t *ti = cr_type_info(ty);
        if (elems[ty] > most && ti && ti->name) {
            most = elems[ty];
            best = ti->name;
        }
    }
    return best;
}

void reg_gguf_kind(const cr_gguf_t *g, char *buf, size_t cap)
{
    if (!cr_gguf_get_strz(g, "general.type", buf, cap))
        snprintf(buf, cap, "%s", "");
}

/* Looks up "<arch>.<suffix>". */
static const cr_gguf_kv_t *arch_kv(const cr_gguf_t *g, const char *suffix)
{
    char key[256];
    snprintf(key, sizeof key, "%s.%s", cr_gguf_arch(g), suffix);
    return cr_gguf_kv_find(g, key);
}

static uint64_t arch_u64(const cr_gguf_t *g, const char *suffix)
{
    char key[256];
    uint64_t v = 0;
    snprintf(key, sizeof key, "%s.%s", cr_gguf_arch(g), suffix);
    return cr_gguf_get_u64(g, key, &v) ? v : 0;
}

const char *reg_gguf_media_type(const cr_gguf_t *g)
{
    char kind[64];
    reg_gguf_kind(g, kind, sizeof kind);
    if (!strcmp(kind, "adapter"))
        return "application/vnd.ollama.image.adapter";
    if (!strcmp(kind, "projector") ||
        (arch_u64(g, "block_count") == 0 && arch_u64(g, "vision.block_count") > 0))
        return "application/vnd.ollama.image.projector";
    return "application/vnd.ollama.image.model";
}

bool reg_gguf_is_embedding(const cr_gguf_t *g)
{
    static const char *const bert_like[] = {
        "bert", "nomic-bert", "nomic-bert-moe", "jina-bert-v2", "jina-bert-v3",
        "modern-bert", "neo-bert", "t5encoder",
    };
    if (arch_kv(g, "pooling_type"))
        return true;
    const char *a = cr_gguf_arch(g);
    for (size_t i = 0; i < CR_ARRAY_LEN(bert_like); i++)
        if (!strcmp(a, bert_like[i]))
            return true;
    return false;
}

bool reg_gguf_has_vision(const cr_gguf_t *g)
{
    return arch_kv(g, "vision.block_count") != NULL;
}

/* A float32 as the double whose shortest text equals the float's shortest
 * text (1e-5f -> 1e-05), so JSON shows what the file meant. */
static double f32_clean(double v)
{
    float f = (float)v;
    char tmp[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(tmp, sizeof tmp, "%.*g", p, (double)f);
        if ((float)strtod(tmp, NULL) == f)
            return strtod(tmp, NULL);
    }
    return v;
}

static json_t *gstr(cr_gguf_str_t s)
{
    /* GGUF strings are not guaranteed UTF-8; gojson replaces bad bytes. */
    return json_stringn_nocheck(s.ptr ? s.ptr : "", (size_t)s.len);
}

/* One array element of a non-string array. */
static json_t *elem_json(const cr_gguf_array_t *a, uint64_t i)
{
    const uint8_t *p = a->data;
    switch (a->type) {
    case CR_GGUF_U8: return json_integer(p[i]);
    case CR_GGUF_I8: return json_integer((int8_t)p[i]);
    case CR_GGUF_U16: {
        uint16_t v;
        memcpy(&v, p + 2 * i, 2);
        return json_integer(v);
    }
    case CR_GGUF_I16: {
        int16_t v;
        memcpy(&v, p + 2 * i, 2);
        return json_integer(v);
    }
    case CR_GGUF_U32: {
        uint32_t v;
        memcpy(&v, p + 4 * i, 4);
        return json_integer(v);
    }
    case CR_GGUF_I32: {
        int32_t v;
        memcpy(&v, p + 4 * i, 4);
        return json_integer(v);
    }
    case CR_GGUF_U64: {
        uint64_t v;
        memcpy(&v, p + 8 * i, 8);
        return v > INT64_MAX ? json_real((double)v) : json_integer((json_int_t)v);
    }
    case CR_GGUF_I64: {
        int64_t v;
        memcpy(&v, p + 8 * i, 8);
        return json_integer(v);
    }
    case CR_GGUF_F32: {
        float v;
        memcpy(&v, p + 4 * i, 4);
        return json_real(f32_clean(v));
    }
    case CR_GGUF_F64: {
        double v;
        memcpy(&v, p + 8 * i, 8);
        return json_real(v);
    }
    case CR_GGUF_BOOL: return json_boolean(p[i] != 0);
    default: return json_null();
    }
}

static json_t *kv_json(const cr_gguf_kv_t *kv, bool verbose)
{
    switch (kv->type) {
    case CR_GGUF_U8:
    case CR_GGUF_U16:
    case CR_GGUF_U32:
    case CR_GGUF_U64:
        return kv->v.u64 > INT64_MAX ? json_real((double)kv->v.u64)
                                     : json_integer((json_int_t)kv->v.u64);
    case CR_GGUF_I8:
    case CR_GGUF_I16:
    case CR_GGUF_I32:
    case CR_GGUF_I64: return json_integer(kv->v.i64);
    case CR_GGUF_F32: return json_real(f32_clean(kv->v.f64));
    case CR_GGUF_F64: return json_real(kv->v.f64);
    case CR_GGUF_BOOL: return json_boolean(kv->v.b);
    case CR_GGUF_STRING: return gstr(kv->v.str);
    case CR_GGUF_ARRAY: {
        const cr_gguf_array_t *a = &kv->v.arr;
        json_t *arr = json_array();
        if (!arr || (!verbose && a->n > REG_MODEL_INFO_ARRAY_MAX))
            return arr;
        for (uint64_t i = 0; i < a->n; i++) {
            json_t *e = a->type == CR_GGUF_STRING ? gstr(a->strs[i])
                                                  : elem_json(a, i);
            if (!e || json_array_append_new(arr, e) != 0) {
                json_decref(arr);
                return NULL;
            }
        }
        return arr;
    }
    }
    return json_null();
}

typedef struct key_ref {
    char *key; /* owned NUL-terminated copy */
    const cr_gguf_kv_t *kv;
} key_ref_t;

static int cmp_key(const void *a, const void *b)
{
    return strcmp(((const key_ref_t *)a)->key, ((const key_ref_t *)b)->key);
}

json_t *reg_gguf_model_info(const cr_gguf_t *g, bool verbose)
{
    size_t n = cr_gguf_kv_count(g);
    key_ref_t *refs = calloc(n ? n : 1, sizeof *refs);
    json_t *out = json_object();
    bool ok = refs && out;
    size_t m = 0;
    bool have_count = false;
    for (size_t i = 0; ok && i < n; i++) {
        const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
        /* Keys with a NUL inside cannot be JSON object keys here. */
        if (memchr(kv->key.ptr, '\0', (size_t)kv->key.len))
            continue;
        if (cr_gguf_str_eq(kv->key, "general.name") ||
            cr_gguf_str_eq(kv->key, "tokenizer.chat_template"))
            continue;
        if (cr_gguf_str_eq(kv->key, "general.parameter_count"))
            have_count = true;
        refs[m].key = malloc((size_t)kv->key.len + 1);
        if (!refs[m].key) {
            ok = false;
            break;
        }
        memcpy(refs[m].key, kv->key.ptr, (size_t)kv->key.len);
        refs[m].key[kv->key.len] = '\0';
        refs[m].kv = kv;
        m++;
    }
    if (ok)
        qsort(refs, m, sizeof *refs, cmp_key);
    bool count_done = have_count;
    for (size_t i = 0; ok && i <= m; i++) {
        /* Insert the computed parameter count at its sorted place. */
        if (!count_done &&
            (i == m || strcmp(refs[i].key, "general.parameter_count") > 0)) {
            uint64_t pc = reg_gguf_param_count(g);
            json_t *v = pc > INT64_MAX ? json_real((double)pc)
                                       : json_integer((json_int_t)pc);
            ok = v && !json_object_set_new(out, "general.parameter_count", v);
            count_done = true;
        }
        if (i == m || !ok)
            break;
        json_t *v = kv_json(refs[i].kv, verbose);
        ok = v && !json_object_set_new_nocheck(out, refs[i].key, v);
    }
    for (size_t i = 0; refs && i < m; i++)
        free(refs[i].key);
    free(refs);
    if (!ok) {
        json_decref(out);
        return NULL;
    }
    return out;
}

json_t *reg_gguf_tensors(const cr_gguf_t *g)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < cr_gguf_tensor_count(g); i++) {
        const cr_gguf_tensor_t *t = cr_gguf_tensor_at(g, i);
        const cr_type_info_t *ti = cr_type_info(t->type);
        json_t *o = json_object();
        json_t *shape = json_array();
        if (!o || !shape) {
            json_decref(o);
            json_decref(shape);
            json_decref(arr);
            return NULL;
        }
        for (uint32_t d = 0; d < t->n_dims; d++)
            json_array_append_new(shape, json_integer((json_int_t)t->ne[d]));
        json_object_set_new(o, "name", json_stringn_nocheck(t->name, strlen(t->name)));
        json_object_set_new(o, "type",
                            json_string(ti && ti->name ? ti->name : "unknown"));
        json_object_set_new(o, "shape", shape);
        json_array_append_new(arr, o);
    }
    return arr;
}
