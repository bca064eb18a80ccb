/* gguf_write.c: the GGUF v3 writer.
 *
 * Each KV is kept as its key plus its encoded value (u32 type + payload), so
 * writing is a straight concatenation and replacing a value swaps one blob.
 * Tensors are descriptions (shape, type, borrowed data or a callback); their
 * offsets are assigned at write time, each aligned, in the order added.
 * Does not own: tensor data and callback contexts (borrowed). */
#include "lib/prelude.h"
#include "lib/gguf_write.h"
#include "lib/buf.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf_write.c writes host-order values as little-endian; port it first"
#endif

#define ENCODE_MAX_BYTES (SIZE_MAX / 2)
#define MAX_ALIGNMENT (1u << 30)
#define STAGE_BYTES (1u << 20)

typedef struct wkv {
    char *key;      /* owned, NUL-terminated */
    size_t key_len;
    char *val;      /* owned: u32 type + encoded value */
    size_t val_len;
} wkv_t;

typedef struct wtensor {
    char *name; /* owned */
    uint32_t n_dims;
    uint64_t ne[CR_GGUF_MAX_DIMS];
    cr_type_t type;
    uint64_t size_bytes;
    uint64_t offset;      /* assigned at write time */
    const void *data;     /* borrowed, or NULL when fn is set */
    cr_gguf_tensor_fn fn; /* data producer, or NULL */
    void *ctx;            /* borrowed */
} wtensor_t;

struct cr_gguf_writer {
    wkv_t *kvs;
    size_t n_kv, cap_kv;
    wtensor_t *tensors;
    size_t n_tensors, cap_tensors;
};

struct cr_gguf_sink {
    int fd;           /* output file, or -1 for memory */
    cr_buf_t *mem;    /* memory output when fd < 0 */
    uint8_t *stage;   /* buffered bytes for fd */
    size_t stage_len;
    uint64_t written;    /* bytes emitted so far (file offset) */
    uint64_t budget;     /* bytes the current tensor callback may still write */
    bool in_callback;
    const char *where;   /* output name for messages */
};

/* ---- writer object ---------------------------------------------------- */

cr_gguf_writer_t *cr_gguf_writer_new(void)
{
    return calloc(1, sizeof(cr_gguf_writer_t));
}

void cr_gguf_writer_destroy(cr_gguf_writer_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    cr_gguf_writer_t *w = *self_p;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val);
    }
    for (size_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->kvs);
    free(w->tensors);
    free(w);
    *self_p = NULL;
}

size_t cr_gguf_writer_kv_count(const cr_gguf_writer_t *w) { return w->n_kv; }
size_t cr_gguf_writer_tensor_count(const cr_gguf_writer_t *w)
{
    return w->n_tensors;
}

static wkv_t *find_kv(const cr_gguf_writer_t *w, const char *key, size_t len)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kvs[i].key_len == len && !memcmp(w->kvs[i].key, key, len))
            return &w->kvs[i];
    return NULL;
}

bool cr_gguf_writer_remove(cr_gguf_writer_t *w, const char *key)
{
    wkv_t *kv = find_kv(w, key, strlen(key));
    if (!kv)
        return false;
    free(kv->key);
    free(kv->val);
    size_t i = (size_t)(kv - w->kvs);
    memmove(kv, kv + 1, (w->n_kv - i - 1) * sizeof *kv);
    w->n_kv--;
    return true;
}

/* Stores key = encoded value, taking val's data. Replaces an existing key's
 * value in place. Frees val on every path. */
static cr_status_t put_kv(cr_gguf_writer_t *w, const char *key, size_t key_len,
                          cr_buf_t *val, cr_status_t enc_st, cr_err_t *err)
{
    cr_status_t st = CR_OK;
    if (enc_st) {
        st = cr_err_set(err, enc_st, "gguf writer: encoding key '%.*s': %s",
                        (int)CR_MIN(key_len, 200), key, cr_status_str(enc_st));
        goto out;
    }
    if (key_len == 0 || key_len > CR_GGUF_MAX_KEY_BYTES ||
        memchr(key, 0, key_len)) {
        st = cr_err_set(err, CR_E_INVALID,
                        "gguf writer: key of %zu bytes is empty, too long "
                        "(limit %d) or holds a NUL",
                        key_len, CR_GGUF_MAX_KEY_BYTES);
        goto out;
    }
    wkv_t *kv = find_kv(w, key, key_len);
    if (kv) {
        free(kv->val);
        kv->val_len = val->len;
        kv->val = cr_buf_steal(val);
        if (!kv->val) {
            kv->val_len = 0;
            st = cr_err_set(err, CR_E_NOMEM, "gguf writer: out of memory");
        }
        goto out;
    }
    if (w->n_kv >= CR_GGUF_MAX_KV) {
        st = cr_err_set(err, CR_E_TOO_LARGE,
                        "gguf writer: more than %d keys", CR_GGUF_MAX_KV);
        goto out;
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        wkv_t *p = realloc(w->kvs, cap * sizeof *p);
        if (!p) {
            st = cr_err_set(err, CR_E_NOMEM, "gguf writer: out of memory");
            goto out;
        }
        w->kvs = p;
        w->cap_kv = cap;
    }
    char *k = malloc(key_len + 1);
    size_t val_len = val->len;
    char *v = cr_buf_steal(val);
    if (!k || !v) {
        free(k);
        free(v);
        st = cr_err_set(err, CR_E_NOMEM, "gguf writer: out of memory");
        goto out;
    }
    memcpy(k, key, key_len);
    k[key_len] = '\0';
    w->kvs[w->n_kv++] = (wkv_t){k, key_len, v, val_len};
out:
    cr_buf_free(val);
    return st;
}

/* ---- value encoding --------------------------------------------------- */

static cr_status_t enc_u32(cr_buf_t *b, uint32_t v)
{
    return cr_buf_append(b, &v, 4);
}

static cr_status_t enc_u64(cr_buf_t *b, uint64_t v)
{
    return cr_buf_append(b, &v, 8);
}

static cr_status_t enc_str(cr_buf_t *b, const char *s, uint64_t len)
{
    cr_status_t st = enc_u64(b, len);
    if (!st && len > ENCODE_MAX_BYTES)
        st = CR_E_TOO_LARGE;
    if (!st)
        st = cr_buf_append(b, s, (size_t)len);
    return st;
}

static size_t scalar_bytes(cr_gguf_vtype_t t)
{
    switch (t) {
    case CR_GGUF_U8: case CR_GGUF_I8: case CR_GGUF_BOOL: return 1;
    case CR_GGUF_U16: case CR_GGUF_I16: return 2;
    case CR_GGUF_U32: case CR_GGUF_I32: case CR_GGUF_F32: return 4;
    case CR_GGUF_U64: case CR_GGUF_I64: case CR_GGUF_F64: return 8;
    default: return 0;
    }
}

static cr_status_t add_scalar(cr_gguf_writer_t *w, const char *key,
                              cr_gguf_vtype_t t, const void *v, cr_err_t *err)
{
    cr_buf_t b;
    cr_buf_init(&b, ENCODE_MAX_BYTES);
    cr_status_t st = enc_u32(&b, (uint32_t)t);
    if (!st)
        st = cr_buf_append(&b, v, scalar_bytes(t));
    return put_kv(w, key, strlen(key), &b, st, err);
}

cr_status_t cr_gguf_writer_add_u8(cr_gguf_writer_t *w, const char *key,
                                  uint8_t v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_U8, &v, err);
}

cr_status_t cr_gguf_writer_add_i8(cr_gguf_writer_t *w, const char *key,
                                  int8_t v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_I8, &v, err);
}

cr_status_t cr_gguf_writer_add_u16(cr_gguf_writer_t *w, const char *key,
                                   uint16_t v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_U16, &v, err);
}

cr_status_t cr_gguf_writer_add_i16(cr_gguf_writer_t *w, const char *key,
                                   int16_t v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_I16, &v, err);
}

cr_status_t cr_gguf_writer_add_u32(cr_gguf_writer_t *w, const char *key,
                                   uint32_t v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_U32, &v, err);
}

cr_status_t cr_gguf_writer_add_i32(cr_gguf_writer_t *w, const char *key,
                                   int32_t v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_I32, &v, err);
}

cr_status_t cr_gguf_writer_add_u64(cr_gguf_writer_t *w, const char *key,
                                   uint64_t v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_U64, &v, err);
}

cr_status_t cr_gguf_writer_add_i64(cr_gguf_writer_t *w, const char *key,
                                   int64_t v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_I64, &v, err);
}

cr_status_t cr_gguf_writer_add_f32(cr_gguf_writer_t *w, const char *key,
                                   float v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_F32, &v, err);
}

cr_status_t cr_gguf_writer_add_f64(cr_gguf_writer_t *w, const char *key,
                                   double v, cr_err_t *err)
{
    return add_scalar(w, key, CR_GGUF_F64, &v, err);
}

cr_status_t cr_gguf_writer_add_bool(cr_gguf_writer_t *w, const char *key,
                                    bool v, cr_err_t *err)
{
    uint8_t byte = v ? 1 : 0;
    return add_scalar(w, key, CR_GGUF_BOOL, &byte, err);
}

cr_status_t cr_gguf_writer_add_strn(cr_gguf_writer_t *w, const char *key,
                                    const char *v, size_t len, cr_err_t *err)
{
    cr_buf_t b;
    cr_buf_init(&b, ENCODE_MAX_BYTES);
    cr_status_t st = enc_u32(&b, CR_GGUF_STRING);
    if (!st)
        st = enc_str(&b, v, len);
    return put_kv(w, key, strlen(key), &b, st, err);
}

cr_status_t cr_gguf_writer_add_str(cr_gguf_writer_t *w, const char *key,
                                   const char *v, cr_err_t *err)
{
    return cr_gguf_writer_add_strn(w, key, v, strlen(v), err);
}

/* Encodes an array header; refuses bad element types and oversize counts. */
static cr_status_t enc_arr_head(cr_buf_t *b, cr_gguf_vtype_t et, uint64_t n)
{
    if (n > CR_GGUF_MAX_ARRAY_ELEMS)
        return CR_E_TOO_LARGE;
    cr_status_t st = enc_u32(b, CR_GGUF_ARRAY);
    if (!st)
        st = enc_u32(b, (uint32_t)et);
    if (!st)
        st = enc_u64(b, n);
    return st;
}

cr_status_t cr_gguf_writer_add_arr(cr_gguf_writer_t *w, const char *key,
                                   cr_gguf_vtype_t elem_type,
                                   const void *elems, uint64_t n,
                                   cr_err_t *err)
{
    size_t eb = scalar_bytes(elem_type);
    if (!eb)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: key '%s': array element type %d is "
                          "not a number or bool",
                          key, (int)elem_type);
    cr_buf_t b;
    cr_buf_init(&b, ENCODE_MAX_BYTES);
    cr_status_t st = enc_arr_head(&b, elem_type, n);
    if (!st && n)
        st = cr_buf_append(&b, elems, (size_t)n * eb);
    return put_kv(w, key, strlen(key), &b, st, err);
}

cr_status_t cr_gguf_writer_add_arr_str(cr_gguf_writer_t *w, const char *key,
                                       const char *const *strs, uint64_t n,
                                       cr_err_t *err)
{
    cr_buf_t b;
    cr_buf_init(&b, ENCODE_MAX_BYTES);
    cr_status_t st = enc_arr_head(&b, CR_GGUF_STRING, n);
    for (uint64_t i = 0; !st && i < n; i++)
        st = enc_str(&b, strs[i], strlen(strs[i]));
    return put_kv(w, key, strlen(key), &b, st, err);
}

cr_status_t cr_gguf_writer_add_arr_gstr(cr_gguf_writer_t *w, const char *key,
                                        const cr_gguf_str_t *strs, uint64_t n,
                                        cr_err_t *err)
{
    cr_buf_t b;
    cr_buf_init(&b, ENCODE_MAX_BYTES);
    cr_status_t st = enc_arr_head(&b, CR_GGUF_STRING, n);
    for (uint64_t i = 0; !st && i < n; i++)
        st = enc_str(&b, strs[i].ptr, strs[i].len);
    return put_kv(w, key, strlen(key), &b, st, err);
}

/* Narrows a reader KV's widened scalar back to its stored width. */
static void narrow_scalar(const cr_gguf_kv_t *kv, uint8_t out[8])
{
    switch (kv->type) {
    case CR_GGUF_U8: out[0] = (uint8_t)kv->v.u64; break;
    case CR_GGUF_I8: { int8_t v = (int8_t)kv->v.i64; memcpy(out, &v, 1); break; }
    case CR_GGUF_BOOL: out[0] = kv->v.b ? 1 : 0; break;
    case CR_GGUF_U16: { uint16_t v = (uint16_t)kv->v.u64; memcpy(out, &v, 2); break; }
    case CR_GGUF_I16: { int16_t v = (int16_t)kv->v.i64; memcpy(out, &v, 2); break; }
    case CR_GGUF_U32: { uint32_t v = (uint32_t)kv->v.u64; memcpy(out, &v, 4); break; }
    case CR_GGUF_I32: { int32_t v = (int32_t)kv->v.i64; memcpy(out, &v, 4); break; }
    case CR_GGUF_F32: { float v = (float)kv->v.f64; memcpy(out, &v, 4); break; }
    case CR_GGUF_U64: memcpy(out, &kv->v.u64, 8); break;
    case CR_GGUF_I64: memcpy(out, &kv->v.i64, 8); break;
    case CR_GGUF_F64: memcpy(out, &kv->v.f64, 8); break;
    default: break;
    }
}

cr_status_t cr_gguf_writer_copy_kv(cr_gguf_writer_t *w, const cr_gguf_kv_t *kv,
                                   cr_err_t *err)
{
    cr_buf_t b;
    cr_buf_init(&b, ENCODE_MAX_BYTES);
    cr_status_t st = CR_OK;
    if (kv->type == CR_GGUF_STRING) {
        st = enc_u32(&b, CR_GGUF_STRING);
        if (!st)
            st = enc_str(&b, kv->v.str.ptr, kv->v.str.len);
    } else if (kv->type == CR_GGUF_ARRAY) {
        const cr_gguf_array_t *a = &kv->v.arr;
        st = enc_arr_head(&b, a->type, a->n);
        if (a->type == CR_GGUF_STRING) {
            for (uint64_t i = 0; !st && i < a->n; i++)
                st = enc_str(&b, a->strs[i].ptr, a->strs[i].len);
        } else if (!st && a->n) {
            size_t eb = scalar_bytes(a->type);
            st = eb ? cr_buf_append(&b, a->data, (size_t)a->n * eb)
                    : CR_E_INVALID;
        }
    } else if (scalar_bytes(kv->type)) {
        uint8_t bytes[8];
        narrow_scalar(kv, bytes);
        st = enc_u32(&b, (uint32_t)kv->type);
        if (!st)
            st = cr_buf_append(&b, bytes, scalar_bytes(kv->type));
    } else {
        st = CR_E_INVALID;
    }
    return put_kv(w, kv->key.ptr, (size_t)kv->key.len, &b, st, err);
}

cr_status_t cr_gguf_writer_copy_key(cr_gguf_writer_t *w, const cr_gguf_t *g,
                                    const char *key, cr_err_t *err)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    if (!kv)
        return cr_err_set(err, CR_E_NOT_FOUND,
                          "gguf writer: source has no key '%s'", key);
    return cr_gguf_writer_copy_kv(w, kv, err);
}

cr_status_t cr_gguf_writer_copy_prefix(cr_gguf_writer_t *w, const cr_gguf_t *g,
                                       const char *prefix, cr_err_t *err)
{
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < cr_gguf_kv_count(g); i++) {
        const cr_gguf_kv_t *kv = cr_gguf_kv_at(g, i);
        if (kv->key.len < plen || memcmp(kv->key.ptr, prefix, plen))
            continue;
        cr_status_t st = cr_gguf_writer_copy_kv(w, kv, err);
        if (st)
            return st;
    }
    return CR_OK;
}

cr_status_t cr_gguf_writer_set_alignment(cr_gguf_writer_t *w,
                                         uint32_t alignment, cr_err_t *err)
{
    if (alignment == 0 || (alignment & (alignment - 1)) ||
        alignment > MAX_ALIGNMENT)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: alignment %" PRIu32
                          " is not a power of two in 1..%u",
                          alignment, MAX_ALIGNMENT);
    return cr_gguf_writer_add_u32(w, "general.alignment", alignment, err);
}

/* ---- tensors ---------------------------------------------------------- */

static cr_status_t add_tensor(cr_gguf_writer_t *w, const char *name,
                              uint32_t n_dims, const uint64_t *ne,
                              cr_type_t type, const void *data,
                              cr_gguf_tensor_fn fn, void *ctx,
                              uint64_t *size_out, cr_err_t *err)
{
    size_t name_len = strlen(name);
    if (name_len == 0 || name_len > CR_GGUF_MAX_NAME_BYTES)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: tensor name of %zu bytes (must be "
                          "1..%d)",
                          name_len, CR_GGUF_MAX_NAME_BYTES);
    if (n_dims < 1 || n_dims > CR_GGUF_MAX_DIMS)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: tensor '%s' has %" PRIu32
                          " dims (must be 1..%d)",
                          name, n_dims, CR_GGUF_MAX_DIMS);
    const cr_type_info_t *ti = cr_type_info((uint32_t)type);
    if (!ti)
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "gguf writer: tensor '%s' has unknown type %d", name,
                          (int)type);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || n_elems > (uint64_t)INT64_MAX / ne[d])
            return cr_err_set(err, CR_E_INVALID,
                              "gguf writer: tensor '%s' dim %" PRIu32
                              " = %" PRIu64 " is zero or overflows",
                              name, d, ne[d]);
        n_elems *= ne[d];
    }
    uint64_t row_bytes;
    if (!cr_type_row_bytes((uint32_t)type, ne[0], &row_bytes))
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: tensor '%s' row length %" PRIu64
                          " is not a multiple of the %s block size %" PRIu32,
                          name, ne[0], ti->name, ti->block_elems);
    uint64_t rows = n_elems / ne[0];
    if (rows > (uint64_t)INT64_MAX / row_bytes)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: tensor '%s' byte size overflows", name);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (!strcmp(w->tensors[i].name, name))
            return cr_err_set(err, CR_E_EXISTS,
                              "gguf writer: duplicate tensor name '%s'", name);
    if (w->n_tensors >= CR_GGUF_MAX_TENSORS)
        return cr_err_set(err, CR_E_TOO_LARGE,
                          "gguf writer: more than %d tensors",
                          CR_GGUF_MAX_TENSORS);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? w->cap_tensors * 2 : 16;
        wtensor_t *p = realloc(w->tensors, cap * sizeof *p);
        if (!p)
            return cr_err_set(err, CR_E_NOMEM, "gguf writer: out of memory");
        w->tensors = p;
        w->cap_tensors = cap;
    }
    char *copy = strdup(name);
    if (!copy)
        return cr_err_set(err, CR_E_NOMEM, "gguf writer: out of memory");
    wtensor_t *t = &w->tensors[w->n_tensors++];
    memset(t, 0, sizeof *t);
    t->name = copy;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < CR_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->type = type;
    t->size_bytes = row_bytes * rows;
    t->data = data;
    t->fn = fn;
    t->ctx = ctx;
    if (size_out)
        *size_out = t->size_bytes;
    return CR_OK;
}

cr_status_t cr_gguf_writer_add_tensor(cr_gguf_writer_t *w, const char *name,
                                      uint32_t n_dims, const uint64_t *ne,
                                      cr_type_t type, const void *data,
                                      uint64_t *size_bytes_out, cr_err_t *err)
{
    if (!data)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: tensor '%s' has no data", name);
    return add_tensor(w, name, n_dims, ne, type, data, NULL, NULL,
                      size_bytes_out, err);
}

cr_status_t cr_gguf_writer_add_tensor_fn(cr_gguf_writer_t *w, const char *name,
                                         uint32_t n_dims, const uint64_t *ne,
                                         cr_type_t type, cr_gguf_tensor_fn fn,
                                         void *ctx, uint64_t *size_bytes_out,
                                         cr_err_t *err)
{
    if (!fn)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: tensor '%s' has no data callback",
                          name);
    return add_tensor(w, name, n_dims, ne, type, NULL, fn, ctx,
                      size_bytes_out, err);
}

/* ---- output ----------------------------------------------------------- */

static cr_status_t flush_stage(cr_gguf_sink_t *s, cr_err_t *err)
{
    size_t done = 0;
    while (done < s->stage_len) {
        ssize_t n = write(s->fd, s->stage + done, s->stage_len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return cr_err_set(err, CR_E_IO, "%s: write: %s", s->where,
                              n < 0 ? strerror(errno) : "no progress");
        done += (size_t)n;
    }
    s->stage_len = 0;
    return CR_OK;
}

static cr_status_t emit(cr_gguf_sink_t *s, const void *data, size_t n,
                        cr_err_t *err)
{
    if (s->fd < 0) {
        cr_status_t st = cr_buf_append(s->mem, data, n);
        if (st)
            return cr_err_set(err, st, "gguf writer: output buffer: %s",
                              cr_status_str(st));
        s->written += n;
        return CR_OK;
    }
    const uint8_t *p = data;
    while (n) {
        size_t take = CR_MIN(n, STAGE_BYTES - s->stage_len);
        memcpy(s->stage + s->stage_len, p, take);
        s->stage_len += take;
        s->written += take;
        p += take;
        n -= take;
        if (s->stage_len == STAGE_BYTES) {
            cr_status_t st = flush_stage(s, err);
            if (st)
                return st;
        }
    }
    return CR_OK;
}

static cr_status_t emit_zeros(cr_gguf_sink_t *s, uint64_t n, cr_err_t *err)
{
    static const uint8_t zeros[4096];
    while (n) {
        size_t take = (size_t)CR_MIN(n, (uint64_t)sizeof zeros);
        cr_status_t st = emit(s, zeros, take, err);
        if (st)
            return st;
        n -= take;
    }
    return CR_OK;
}

static cr_status_t emit_u32(cr_gguf_sink_t *s, uint32_t v, cr_err_t *err)
{
    return emit(s, &v, 4, err);
}

static cr_status_t emit_u64(cr_gguf_sink_t *s, uint64_t v, cr_err_t *err)
{
    return emit(s, &v, 8, err);
}

cr_status_t cr_gguf_sink_write(cr_gguf_sink_t *sink, const void *data,
                               size_t n, cr_err_t *err)
{
    if (!sink->in_callback || n > sink->budget)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: tensor callback wrote %zu bytes with "
                          "%" PRIu64 " left in the tensor",
                          n, sink->budget);
    sink->budget -= n;
    return emit(sink, data, n, err);
}

static uint64_t align_up(uint64_t v, uint32_t a)
{
    return (v + a - 1) / a * a;
}

/* The alignment the file will declare: general.alignment if set, else 32. */
static cr_status_t writer_alignment(const cr_gguf_writer_t *w, uint32_t *out,
                                    cr_err_t *err)
{
    *out = CR_GGUF_DEFAULT_ALIGNMENT;
    const char *key = "general.alignment";
    const wkv_t *kv = find_kv(w, key, strlen(key));
    if (!kv)
        return CR_OK;
    uint32_t type, a;
    memcpy(&type, kv->val, 4);
    if (type != CR_GGUF_U32 || kv->val_len != 8)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: general.alignment must be a u32");
    memcpy(&a, kv->val + 4, 4);
    if (a == 0 || (a & (a - 1)) || a > MAX_ALIGNMENT)
        return cr_err_set(err, CR_E_INVALID,
                          "gguf writer: general.alignment %" PRIu32
                          " is not a power of two in 1..%u",
                          a, MAX_ALIGNMENT);
    *out = a;
    return CR_OK;
}

/* Writes the whole file through s. */
static cr_status_t write_all(cr_gguf_writer_t *w, cr_gguf_sink_t *s,
                             cr_err_t *err)
{
    uint32_t align;
    cr_status_t st = writer_alignment(w, &align, err);
    if (st)
        return st;
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        off = align_up(off, align);
        w->tensors[i].offset = off;
        if (w->tensors[i].size_bytes > (uint64_t)INT64_MAX - off)
            return cr_err_set(err, CR_E_TOO_LARGE,
                              "gguf writer: data section overflows at tensor "
                              "'%s'",
                              w->tensors[i].name);
        off += w->tensors[i].size_bytes;
    }

    st = emit(s, "GGUF", 4, err);
    if (!st)
        st = emit_u32(s, 3, err);
    if (!st)
        st = emit_u64(s, w->n_tensors, err);
    if (!st)
        st = emit_u64(s, w->n_kv, err);
    for (size_t i = 0; !st && i < w->n_kv; i++) {
        st = emit_u64(s, w->kvs[i].key_len, err);
        if (!st)
            st = emit(s, w->kvs[i].key, w->kvs[i].key_len, err);
        if (!st)
            st = emit(s, w->kvs[i].val, w->kvs[i].val_len, err);
    }
    for (size_t i = 0; !st && i < w->n_tensors; i++) {
        const wtensor_t *t = &w->tensors[i];
        size_t len = strlen(t->name);
        st = emit_u64(s, len, err);
        if (!st)
            st = emit(s, t->name, len, err);
        if (!st)
            st = emit_u32(s, t->n_dims, err);
        for (uint32_t d = 0; !st && d < t->n_dims; d++)
            st = emit_u64(s, t->ne[d], err);
        if (!st)
            st = emit_u32(s, (uint32_t)t->type, err);
        if (!st)
            st = emit_u64(s, t->offset, err);
    }
    if (st)
        return st;
    st = emit_zeros(s, align_up(s->written, align) - s->written, err);
    uint64_t data_start = s->written;
    for (size_t i = 0; !st && i < w->n_tensors; i++) {
        const wtensor_t *t = &w->tensors[i];
        st = emit_zeros(s, data_start + t->offset - s->written, err);
        if (st)
            break;
        if (!t->fn) {
            if (t->size_bytes && !t->data)
                return cr_err_set(err, CR_E_INVALID,
                                  "gguf writer: tensor '%s' has no data",
                                  t->name);
            st = emit(s, t->data, (size_t)t->size_bytes, err);
            continue;
        }
        s->in_callback = true;
        s->budget = t->size_bytes;
        st = t->fn(t->ctx, t->name, t->size_bytes, s, err);
        s->in_callback = false;
        if (!st && s->budget)
            st = cr_err_set(err, CR_E_INVALID,
                            "gguf writer: tensor '%s' callback left %" PRIu64
                            " of %" PRIu64 " bytes unwritten",
                            t->name, s->budget, t->size_bytes);
    }
    /* Pad the last tensor too, as ggml does, so files concatenate cleanly. */
    if (!st && w->n_tensors)
        st = emit_zeros(s, align_up(s->written, align) - s->written, err);
    return st;
}

cr_status_t cr_gguf_writer_write_memory(cr_gguf_writer_t *w, void **out,
                                        size_t *len, cr_err_t *err)
{
    *out = NULL;
    *len = 0;
    cr_buf_t b;
    cr_buf_init(&b, ENCODE_MAX_BYTES);
    cr_gguf_sink_t s = {.fd = -1, .mem = &b, .where = "memory"};
    cr_status_t st = write_all(w, &s, err);
    if (st) {
        cr_buf_free(&b);
        return st;
    }
    *len = b.len;
    *out = cr_buf_steal(&b);
    if (!*out) {
        *len = 0;
        return cr_err_set(err, CR_E_NOMEM, "gguf writer: out of memory");
    }
    return CR_OK;
}

/* fsyncs the folder holding path so the rename is durable. */
static void sync_parent(const char *path)
{
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); /* best effort: some filesystems refuse directory fsync */
        close(fd);
    }
}

cr_status_t cr_gguf_writer_write(cr_gguf_writer_t *w, const char *path,
                                 cr_err_t *err)
{
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    uint8_t *stage = malloc(STAGE_BYTES);
    if (!tmp || !stage) {
        free(tmp);
        free(stage);
        return cr_err_set(err, CR_E_NOMEM, "gguf writer: out of memory");
    }
    snprintf(tmp, plen + 16, "%s.tmp-XXXXXX", path);
    cr_status_t st = CR_OK;
    int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0) {
        st = cr_err_set(err, CR_E_IO, "%s: create temp file: %s", path,
                        strerror(errno));
        goto out;
    }
    cr_gguf_sink_t s = {.fd = fd, .stage = stage, .where = path};
    st = write_all(w, &s, err);
    if (!st)
        st = flush_stage(&s, err);
    if (!st && fchmod(fd, 0644) < 0)
        st = cr_err_set(err, CR_E_IO, "%s: chmod: %s", tmp, strerror(errno));
    if (!st && fsync(fd) < 0)
        st = cr_err_set(err, CR_E_IO, "%s: fsync: %s", tmp, strerror(errno));
    if (close(fd) < 0 && !st)
        st = cr_err_set(err, CR_E_IO, "%s: close: %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) < 0)
        st = cr_err_set(err, CR_E_IO, "%s: rename: %s", path, strerror(errno));
    if (st)
        unlink(tmp);
    else
        sync_parent(path);
out:
    free(tmp);
    free(stage);
    return st;
}
