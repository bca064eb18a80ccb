/* gguf.c: the GGUF reader. Parses and validates a whole file before handing
 * out a handle; everything afterwards is lookups into checked data.
 *
 * Owns: the mapping (when opened from a path), the key/tensor tables, the
 * string-array indexes and the two hash indexes. Does not own: bytes given to
 * cr_gguf_open_memory, the meaning of any key (that is the loader's job), and
 * writing (lib/gguf_write.c).
 *
 * Layout read here (GGUF v2/v3, little-endian):
 *   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
 *   kv_count x { string key, u32 vtype, value },
 *   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 type,
 *                    u64 offset },
 *   zero padding to general.alignment, then the data section.
 * A string is u64 length + bytes; an array is u32 elem type + u64 n + elems. */
#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/cursor.h"

#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c reads little-endian fields with memcpy; port it first"
#endif

/* Smallest encodings, used to refuse counts that cannot fit in what remains:
 * a KV is a key length (8) + type (4) + at least one value byte; a tensor
 * info is a name length (8) + n_dims (4) + one dim (8) + type (4) +
 * offset (8); a string is its length (8). */
#define CR_GGUF_TYPE_MXFP4_OLLAMA 4
#define MIN_KV_BYTES 13u
#define MIN_TENSOR_BYTES 32u
#define MIN_STR_BYTES 8u

/* An open-addressing hash index from names to positions. Slots hold
 * position + 1; 0 is empty. Capacity is a power of two at least twice the
 * entry count, so probes stay short and a free slot always exists. */
typedef struct name_index {
    uint32_t *slots;
    size_t mask;
} name_index_t;

struct cr_gguf {
    const uint8_t *base; /* first byte of the file */
    size_t size;         /* file bytes */
    void *map;           /* our mmap, or NULL for memory input */
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset; /* file offset of the data section */
    cr_gguf_kv_t *kvs;
    size_t n_kv;
    cr_gguf_tensor_t *tensors;
    size_t n_tensors;
    name_index_t kv_index;
    name_index_t tensor_index;
    char *arch; /* NUL-terminated copy of general.architecture, or "" */
};

typedef struct parser {
    cr_cursor_t c;
    const uint8_t *base;
    size_t size;
    cr_err_t *err;
} parser_t;

/* ---- small helpers ---------------------------------------------------- */

static size_t at(const parser_t *p)
{
    return (size_t)(p->c.p - p->base);
}

static uint64_t fnv1a(const void *data, size_t len)
{
    const uint8_t *b = data;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* Writes a printable, bounded copy of a file string for error messages. */
static const char *show(const void *data, uint64_t len, char *out, size_t cap)
{
    const uint8_t *b = data;
    size_t limit = cap - 4; /* room for "..." and NUL */
    size_t n = 0;
    for (uint64_t i = 0; i < len && n < limit; i++)
        out[n++] = (b[i] >= 0x20 && b[i] < 0x7f) ? (char)b[i] : '?';
    if (len > limit) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
    return out;
}

static bool is_known_vtype(uint32_t t)
{
    return t <= CR_GGUF_F64;
}

/* Bytes of one element of a fixed-size value type; 0 for STRING/ARRAY. */
static size_t scalar_bytes(uint32_t t)
{
    switch (t) {
    case CR_GGUF_U8:
    case CR_GGUF_I8:
    case CR_GGUF_BOOL:
        return 1;
    case CR_GGUF_U16:
    case CR_GGUF_I16:
        return 2;
    case CR_GGUF_U32:
    case CR_GGUF_I32:
    case CR_GGUF_F32:
        return 4;
    case CR_GGUF_U64:
    case CR_GGUF_I64:
    case CR_GGUF_F64:
        return 8;
    default:
        return 0;
    }
}

/* Decodes one fixed-size element at p (any alignment) into the KV union. */
static void decode_scalar(uint32_t t, const uint8_t *p, cr_gguf_kv_t *kv)
{
    switch (t) {
    case CR_GGUF_U8: kv->v.u64 = p[0]; break;
    case CR_GGUF_I8: kv->v.i64 = (int8_t)p[0]; break;
    case CR_GGUF_BOOL: kv->v.b = p[0] != 0; break;
    case CR_GGUF_U16: { uint16_t v; memcpy(&v, p, 2); kv->v.u64 = v; break; }
    case CR_GGUF_I16: { int16_t v; memcpy(&v, p, 2); kv->v.i64 = v; break; }
    case CR_GGUF_U32: { uint32_t v; memcpy(&v, p, 4); kv->v.u64 = v; break; }
    case CR_GGUF_I32: { int32_t v; memcpy(&v, p, 4); kv->v.i64 = v; break; }
    case CR_GGUF_F32: { float v; memcpy(&v, p, 4); kv->v.f64 = v; break; }
    case CR_GGUF_U64: memcpy(&kv->v.u64, p, 8); break;
    case CR_GGUF_I64: memcpy(&kv->v.i64, p, 8); break;
    case CR_GGUF_F64: memcpy(&kv->v.f64, p, 8); break;
    default: break;
    }
}

/* ---- name indexes ----------------------------------------------------- */

static cr_status_t index_init(name_index_t *ix, size_t n, cr_err_t *err)
{
    size_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    ix->slots = calloc(cap, sizeof *ix->slots);
    if (!ix->slots)
        return cr_err_set(err, CR_E_NOMEM, "gguf: out of memory for %zu names", n);
    ix->mask = cap - 1;
    return CR_OK;
}

/* Finds the slot for name: either the one holding it or the empty one where
 * it would go. get_name returns the name at position i. */
typedef const char *(*name_at_fn)(const cr_gguf_t *g, size_t i, size_t *len);

static size_t index_slot(const name_index_t *ix, const cr_gguf_t *g,
                         name_at_fn name_at, const char *name, size_t len)
{
    size_t s = (size_t)fnv1a(name, len) & ix->mask;
    for (;;) {
        uint32_t v = ix->slots[s];
        if (!v)
            return s;
        size_t n_len = 0;
        const char *n = name_at(g, v - 1, &n_len);
        if (n_len == len && !memcmp(n, name, len))
            return s;
        s = (s + 1) & ix->mask;
    }
}

static const char *kv_name_at(const cr_gguf_t *g, size_t i, size_t *len)
{
    *len = (size_t)g->kvs[i].key.len;
    return g->kvs[i].key.ptr;
}

static const char *tensor_name_at(const cr_gguf_t *g, size_t i, size_t *len)
{
    *len = strlen(g->tensors[i].name);
    return g->tensors[i].name;
}

/* ---- reading primitives ----------------------------------------------- */

static cr_status_t short_read(parser_t *p, const char *what, size_t need)
{
    return cr_err_set(p->err, CR_E_TRUNCATED,
                      "gguf: %s at offset %zu needs %zu bytes but the file "
                      "ends at %zu",
                      what, at(p), need, p->size);
}

static cr_status_t rd_u32(parser_t *p, uint32_t *v, const char *what)
{
    if (!cr_cursor_u32(&p->c, v))
        return short_read(p, what, 4);
    return CR_OK;
}

static cr_status_t rd_u64(parser_t *p, uint64_t *v, const char *what)
{
    if (!cr_cursor_u64(&p->c, v))
        return short_read(p, what, 8);
    return CR_OK;
}

/* Reads a GGUF string; refuses lengths over max_len or past the end. */
static cr_status_t rd_str(parser_t *p, cr_gguf_str_t *s, uint64_t max_len,
                          const char *what)
{
    size_t start = at(p);
    uint64_t len = 0;
    cr_status_t st = rd_u64(p, &len, what);
    if (st)
        return st;
    if (len > max_len)
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: %s at offset %zu has length %" PRIu64
                          " (limit %" PRIu64 ")",
                          what, start, len, max_len);
    if (len > cr_cursor_left(&p->c))
        return cr_err_set(p->err, CR_E_TRUNCATED,
                          "gguf: %s at offset %zu has length %" PRIu64
                          " but only %zu bytes remain",
                          what, start, len, cr_cursor_left(&p->c));
    s->ptr = (const char *)cr_cursor_take(&p->c, (size_t)len);
    s->len = len;
    return CR_OK;
}

/* ---- metadata --------------------------------------------------------- */

static cr_status_t parse_array(parser_t *p, cr_gguf_kv_t *kv, const char *what)
{
    size_t start = at(p);
    uint32_t et;
    uint64_t n;
    cr_status_t st = rd_u32(p, &et, what);
    if (st)
        return st;
    if (et == CR_GGUF_ARRAY)
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: %s at offset %zu is a nested array (arrays "
                          "of arrays are not supported)",
                          what, start);
    if (!is_known_vtype(et))
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: %s at offset %zu has unknown array element "
                          "type %" PRIu32,
                          what, start, et);
    st = rd_u64(p, &n, what);
    if (st)
        return st;
    if (n > CR_GGUF_MAX_ARRAY_ELEMS)
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: %s at offset %zu has %" PRIu64
                          " elements (limit %u)",
                          what, start, n, (unsigned)CR_GGUF_MAX_ARRAY_ELEMS);
    size_t left = cr_cursor_left(&p->c);
    kv->v.arr.type = (cr_gguf_vtype_t)et;
    kv->v.arr.n = n;
    kv->v.arr.data = NULL;
    kv->v.arr.strs = NULL;
    if (et != CR_GGUF_STRING) {
        size_t eb = scalar_bytes(et);
        if (n > left / eb)
            return cr_err_set(p->err, CR_E_TRUNCATED,
                              "gguf: %s at offset %zu has %" PRIu64
                              " elements of %zu bytes but only %zu bytes "
                              "remain",
                              what, start, n, eb, left);
        kv->v.arr.data = cr_cursor_take(&p->c, (size_t)(n * eb));
        return CR_OK;
    }
    if (n > left / MIN_STR_BYTES)
        return cr_err_set(p->err, CR_E_TRUNCATED,
                          "gguf: %s at offset %zu has %" PRIu64
                          " strings but only %zu bytes remain",
                          what, start, n, left);
    /* One slot even for n == 0, so a STRING array always has a non-NULL
     * index (and malloc(0) cannot be mistaken for failure). */
    cr_gguf_str_t *strs = calloc(n ? (size_t)n : 1, sizeof *strs);
    if (!strs)
        return cr_err_set(p->err, CR_E_NOMEM,
                          "gguf: out of memory indexing %s (%" PRIu64
                          " strings)",
                          what, n);
    kv->v.arr.strs = strs;
    kv->v.arr.data = p->c.p;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *elem_start = p->c.p;
        if (!rd_str(p, &strs[i], UINT64_MAX, what))
            continue;
        /* Failed: read it again under a name that says which element, so
         * the common path formats nothing. */
        char ewhat[224];
        snprintf(ewhat, sizeof ewhat, "%s element %" PRIu64, what, i);
        p->c.p = elem_start;
        return rd_str(p, &strs[i], UINT64_MAX, ewhat);
    }
    return CR_OK;
}

static cr_status_t parse_kv(parser_t *p, cr_gguf_t *g, size_t i)
{
    cr_gguf_kv_t *kv = &g->kvs[i];
    size_t start = at(p);
    char what[160], shown[96];
    snprintf(what, sizeof what, "metadata key #%zu", i);
    cr_status_t st = rd_str(p, &kv->key, CR_GGUF_MAX_KEY_BYTES, what);
    if (st)
        return st;
    show(kv->key.ptr, kv->key.len, shown, sizeof shown);
    if (kv->key.len == 0 || memchr(kv->key.ptr, 0, (size_t)kv->key.len))
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: metadata key #%zu at offset %zu is empty or "
                          "contains a NUL byte",
                          i, start);
    size_t slot = index_slot(&g->kv_index, g, kv_name_at, kv->key.ptr,
                             (size_t)kv->key.len);
    if (g->kv_index.slots[slot])
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: duplicate metadata key '%s' at offset %zu "
                          "(first seen as key #%" PRIu32 ")",
                          shown, start, g->kv_index.slots[slot] - 1);

    snprintf(what, sizeof what, "metadata key '%s'", shown);
    size_t type_at = at(p);
    uint32_t t;
    st = rd_u32(p, &t, what);
    if (st)
        return st;
    if (!is_known_vtype(t))
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: metadata key '%s' at offset %zu has unknown "
                          "value type %" PRIu32,
                          shown, type_at, t);
    kv->type = (cr_gguf_vtype_t)t;
    if (t == CR_GGUF_STRING) {
        st = rd_str(p, &kv->v.str, UINT64_MAX, what);
    } else if (t == CR_GGUF_ARRAY) {
        st = parse_array(p, kv, what);
    } else {
        size_t nb = scalar_bytes(t);
        const uint8_t *b = cr_cursor_take(&p->c, nb);
        if (!b)
            return short_read(p, what, nb);
        decode_scalar(t, b, kv);
    }
    if (st)
        return st;
    /* Index only once fully read, so a failed KV never becomes findable. */
    g->kv_index.slots[slot] = (uint32_t)i + 1;
    g->n_kv = i + 1;
    return CR_OK;
}

/* ---- tensor infos ----------------------------------------------------- */

static cr_status_t parse_tensor_info(parser_t *p, cr_gguf_t *g, size_t i)
{
    cr_gguf_tensor_t *t = &g->tensors[i];
    size_t start = at(p);
    char what[160], shown[96];
    cr_gguf_str_t name;
    snprintf(what, sizeof what, "tensor #%zu name", i);
    cr_status_t st = rd_str(p, &name, CR_GGUF_MAX_NAME_BYTES, what);
    if (st)
        return st;
    show(name.ptr, name.len, shown, sizeof shown);
    if (memchr(name.ptr, 0, (size_t)name.len))
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: tensor #%zu name at offset %zu contains a NUL "
                          "byte",
                          i, start);
    memcpy(t->name, name.ptr, (size_t)name.len);
    t->name[name.len] = '\0';
    size_t slot = index_slot(&g->tensor_index, g, tensor_name_at, t->name,
                             (size_t)name.len);
    if (g->tensor_index.slots[slot])
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: duplicate tensor name '%s' at offset %zu "
                          "(first seen as tensor #%" PRIu32 ")",
                          shown, start, g->tensor_index.slots[slot] - 1);

    snprintf(what, sizeof what, "tensor '%s'", shown);
    size_t dims_at = at(p);
    st = rd_u32(p, &t->n_dims, what);
    if (st)
        return st;
    if (t->n_dims < 1 || t->n_dims > CR_GGUF_MAX_DIMS)
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: tensor '%s' at offset %zu has %" PRIu32
                          " dimensions (must be 1..%d)",
                          shown, dims_at, t->n_dims, CR_GGUF_MAX_DIMS);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < CR_GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        st = rd_u64(p, &t->ne[d], what);
        if (st)
            return st;
        if (t->ne[d] == 0)
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "gguf: tensor '%s' at offset %zu has dimension "
                              "%" PRIu32 " of size 0",
                              shown, dims_at, d);
        if (n_elems > (uint64_t)INT64_MAX / t->ne[d])
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "gguf: tensor '%s' at offset %zu: element count "
                              "overflows",
                              shown, dims_at);
        n_elems *= t->ne[d];
    }
    t->n_elems = n_elems;

    size_t type_at = at(p);
    uint32_t type;
    st = rd_u32(p, &type, what);
    if (st)
        return st;
    /* Ollama's first gpt-oss blobs stored MXFP4 under the id of the retired
     * Q4_2 (4), before ggml gave it 39; Ollama still reads 4 as MXFP4. */
    if (type == CR_GGUF_TYPE_MXFP4_OLLAMA)
        type = CR_TYPE_MXFP4;
    const cr_type_info_t *ti = cr_type_info(type);
    if (!ti)
        return cr_err_set(p->err, CR_E_UNSUPPORTED,
                          "gguf: tensor '%s' at offset %zu has unknown type "
                          "%" PRIu32,
                          shown, type_at, type);
    t->type = (cr_type_t)type;
    uint64_t row_bytes;
    if (!cr_type_row_bytes(type, t->ne[0], &row_bytes))
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: tensor '%s': row length %" PRIu64
                          " is not a multiple of the %s block size %" PRIu32,
                          shown, t->ne[0], ti->name, ti->block_elems);
    uint64_t rows = n_elems / t->ne[0];
    if (row_bytes && rows > UINT64_MAX / row_bytes)
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: tensor '%s': byte size overflows", shown);
    t->size_bytes = row_bytes * rows;
    st = rd_u64(p, &t->offset, what);
    if (st)
        return st;
    g->tensor_index.slots[slot] = (uint32_t)i + 1;
    g->n_tensors = i + 1;
    return CR_OK;
}

static int cmp_by_offset(const void *a, const void *b)
{
    const cr_gguf_tensor_t *x = *(const cr_gguf_tensor_t *const *)a;
    const cr_gguf_tensor_t *y = *(const cr_gguf_tensor_t *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* Refuses tensors whose data overlap: real files never share bytes, and a
 * file that did could claim far more weight memory than it holds. */
static cr_status_t check_overlap(parser_t *p, cr_gguf_t *g)
{
    if (g->n_tensors < 2)
        return CR_OK;
    const cr_gguf_tensor_t **order = malloc(g->n_tensors * sizeof *order);
    if (!order)
        return cr_err_set(p->err, CR_E_NOMEM, "gguf: out of memory");
    for (size_t i = 0; i < g->n_tensors; i++)
        order[i] = &g->tensors[i];
    qsort(order, g->n_tensors, sizeof *order, cmp_by_offset);
    cr_status_t st = CR_OK;
    for (size_t i = 0; i + 1 < g->n_tensors; i++) {
        const cr_gguf_tensor_t *a = order[i], *b = order[i + 1];
        /* place_tensors bounded both ranges by the file: no overflow. */
        if (a->offset + a->size_bytes > b->offset) {
            st = cr_err_set(p->err, CR_E_CORRUPT,
                            "gguf: tensor '%s' data [offset %" PRIu64
                            ", %" PRIu64 " bytes] overlaps tensor '%s' at "
                            "offset %" PRIu64,
                            a->name, a->offset, a->size_bytes, b->name,
                            b->offset);
            break;
        }
    }
    free(order);
    return st;
}

/* Checks each tensor's data range once the data section start is known. */
static cr_status_t place_tensors(parser_t *p, cr_gguf_t *g)
{
    for (size_t i = 0; i < g->n_tensors; i++) {
        cr_gguf_tensor_t *t = &g->tensors[i];
        if (t->offset % g->alignment)
            return cr_err_set(p->err, CR_E_CORRUPT,
                              "gguf: tensor '%s' data offset %" PRIu64
                              " is not a multiple of the alignment %" PRIu32,
                              t->name, t->offset, g->alignment);
        uint64_t room = g->size - g->data_offset;
        if (t->offset > room || t->size_bytes > room - t->offset)
            return cr_err_set(p->err, CR_E_TRUNCATED,
                              "gguf: tensor '%s' data [offset %" PRIu64
                              ", %" PRIu64 " bytes] lies outside the file "
                              "(size %zu, data section at %" PRIu64 ")",
                              t->name, t->offset, t->size_bytes, g->size,
                              g->data_offset);
        t->data = g->base + g->data_offset + t->offset;
    }
    return CR_OK;
}

static cr_status_t read_alignment(parser_t *p, cr_gguf_t *g)
{
    g->alignment = CR_GGUF_DEFAULT_ALIGNMENT;
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, "general.alignment");
    if (!kv)
        return CR_OK;
    if (kv->type != CR_GGUF_U32)
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: general.alignment has value type %d (must "
                          "be u32)",
                          (int)kv->type);
    uint64_t a = kv->v.u64;
    if (a == 0 || (a & (a - 1)))
        return cr_err_set(p->err, CR_E_CORRUPT,
                          "gguf: general.alignment %" PRIu64
                          " is not a power of two",
                          a);
    g->alignment = (uint32_t)a;
    return CR_OK;
}

/* ---- open / close ----------------------------------------------------- */

static cr_status_t parse(cr_gguf_t *g, cr_err_t *err)
{
    parser_t p = {cr_cursor_make(g->base, g->size), g->base, g->size, err};
    uint8_t magic[4];
    if (!cr_cursor_read(&p.c, magic, 4))
        return short_read(&p, "magic", 4);
    if (memcmp(magic, "GGUF", 4)) {
        char shown[16];
        return cr_err_set(err, CR_E_CORRUPT,
                          "gguf: bad magic '%s' at offset 0 (want 'GGUF')",
                          show(magic, 4, shown, sizeof shown));
    }
    cr_status_t st = rd_u32(&p, &g->version, "version");
    if (st)
        return st;
    if (g->version != 2 && g->version != 3)
        return cr_err_set(err, CR_E_UNSUPPORTED,
                          "gguf: version %" PRIu32
                          " at offset 4 is not supported (want 2 or 3)%s",
                          g->version,
                          (g->version & 0xffff) == 0 ? "; big-endian file?"
                                                     : "");
    uint64_t n_tensors, n_kv;
    st = rd_u64(&p, &n_tensors, "tensor_count");
    if (!st)
        st = rd_u64(&p, &n_kv, "kv_count");
    if (st)
        return st;
    if (n_kv > CR_GGUF_MAX_KV)
        return cr_err_set(err, CR_E_CORRUPT,
                          "gguf: kv_count %" PRIu64 " at offset 16 exceeds "
                          "the limit %d",
                          n_kv, CR_GGUF_MAX_KV);
    if (n_tensors > CR_GGUF_MAX_TENSORS)
        return cr_err_set(err, CR_E_CORRUPT,
                          "gguf: tensor_count %" PRIu64 " at offset 8 exceeds "
                          "the limit %d",
                          n_tensors, CR_GGUF_MAX_TENSORS);
    size_t left = cr_cursor_left(&p.c);
    if (n_kv * MIN_KV_BYTES + n_tensors * MIN_TENSOR_BYTES > left)
        return cr_err_set(err, CR_E_TRUNCATED,
                          "gguf: %" PRIu64 " metadata entries and %" PRIu64
                          " tensor infos cannot fit in the %zu bytes after "
                          "the header",
                          n_kv, n_tensors, left);

    g->kvs = calloc(n_kv ? (size_t)n_kv : 1, sizeof *g->kvs);
    g->tensors = calloc(n_tensors ? (size_t)n_tensors : 1, sizeof *g->tensors);
    if (!g->kvs || !g->tensors)
        return cr_err_set(err, CR_E_NOMEM, "gguf: out of memory for tables");
    st = index_init(&g->kv_index, (size_t)n_kv, err);
    if (!st)
        st = index_init(&g->tensor_index, (size_t)n_tensors, err);
    if (st)
        return st;

    for (size_t i = 0; i < n_kv; i++) {
        st = parse_kv(&p, g, i);
        if (st) {
            /* A failed string array may hold an index; keep it freeable. */
            if (g->kvs[i].type == CR_GGUF_ARRAY)
                g->n_kv = i + 1;
            return st;
        }
    }
    st = read_alignment(&p, g);
    if (st)
        return st;
    for (size_t i = 0; i < n_tensors; i++) {
        st = parse_tensor_info(&p, g, i);
        if (st)
            return st;
    }
    uint64_t header_end = at(&p);
    g->data_offset = (header_end + g->alignment - 1) / g->alignment *
                     g->alignment;
    if (g->n_tensors && g->data_offset > g->size)
        return cr_err_set(err, CR_E_TRUNCATED,
                          "gguf: data section at offset %" PRIu64
                          " starts past the end of the file (size %zu)",
                          g->data_offset, g->size);
    if (g->data_offset > g->size)
        g->data_offset = g->size; /* vocab-only file without padding */
    st = place_tensors(&p, g);
    if (!st)
        st = check_overlap(&p, g);
    if (st)
        return st;

    cr_gguf_str_t arch = {"", 0};
    cr_gguf_get_str(g, "general.architecture", &arch);
    g->arch = malloc((size_t)arch.len + 1);
    if (!g->arch)
        return cr_err_set(err, CR_E_NOMEM, "gguf: out of memory");
    memcpy(g->arch, arch.ptr, (size_t)arch.len);
    g->arch[arch.len] = '\0';
    return CR_OK;
}

void cr_gguf_close(cr_gguf_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    cr_gguf_t *g = *self_p;
    for (size_t i = 0; i < g->n_kv; i++)
        if (g->kvs[i].type == CR_GGUF_ARRAY)
            free((void *)g->kvs[i].v.arr.strs);
    free(g->kvs);
    free(g->tensors);
    free(g->kv_index.slots);
    free(g->tensor_index.slots);
    free(g->arch);
    if (g->map)
        munmap(g->map, g->size);
    free(g);
    *self_p = NULL;
}

static cr_status_t open_bytes(const void *data, size_t len, void *map,
                              cr_gguf_t **out, cr_err_t *err)
{
    cr_gguf_t *g = calloc(1, sizeof *g);
    if (!g)
        return cr_err_set(err, CR_E_NOMEM, "gguf: out of memory");
    g->base = data;
    g->size = len;
    g->map = map;
    cr_status_t st = parse(g, err);
    if (st) {
        cr_gguf_close(&g);
        return st;
    }
    *out = g;
    return CR_OK;
}

cr_status_t cr_gguf_open_memory(const void *data, size_t len, cr_gguf_t **out,
                                cr_err_t *err)
{
    *out = NULL;
    if (!data && len)
        return cr_err_set(err, CR_E_INVALID, "gguf: NULL data");
    static const uint8_t empty[1];
    return open_bytes(data ? data : empty, len, NULL, out, err);
}

cr_status_t cr_gguf_open(const char *path, cr_gguf_t **out, cr_err_t *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cr_err_set(err, CR_E_IO, "%s: open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) < 0) {
        cr_err_set(err, CR_E_IO, "%s: stat: %s", path, strerror(errno));
        close(fd);
        return CR_E_IO;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return cr_err_set(err, CR_E_IO, "%s: not a regular file", path);
    }
    if (sb.st_size < 4 || (uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return cr_err_set(err, CR_E_TRUNCATED,
                          "%s: file size %lld is too small for a GGUF file",
                          path, (long long)sb.st_size);
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED)
        return cr_err_set(err, CR_E_IO, "%s: mmap %zu bytes: %s", path, size,
                          strerror(map_errno));
    cr_status_t st = open_bytes(map, size, map, out, err);
    if (st && err)
        cr_err_wrap(err, "%s", path);
    return st;
}

void cr_gguf_drop_metadata_pages(const cr_gguf_t *g)
{
    long page = sysconf(_SC_PAGESIZE);
    if (!g || !g->map || page <= 0)
        return;
    size_t n = (size_t)g->data_offset / (size_t)page * (size_t)page;
    if (n)
        (void)madvise(g->map, n, MADV_DONTNEED); /* read-only private file map */
}

/* ---- accessors -------------------------------------------------------- */

uint32_t cr_gguf_version(const cr_gguf_t *g) { return g->version; }
uint64_t cr_gguf_file_size(const cr_gguf_t *g) { return g->size; }
uint32_t cr_gguf_alignment(const cr_gguf_t *g) { return g->alignment; }
uint64_t cr_gguf_data_offset(const cr_gguf_t *g) { return g->data_offset; }
size_t cr_gguf_kv_count(const cr_gguf_t *g) { return g->n_kv; }
size_t cr_gguf_tensor_count(const cr_gguf_t *g) { return g->n_tensors; }
const char *cr_gguf_arch(const cr_gguf_t *g) { return g->arch ? g->arch : ""; }

const cr_gguf_kv_t *cr_gguf_kv_at(const cr_gguf_t *g, size_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const cr_gguf_kv_t *cr_gguf_kv_find(const cr_gguf_t *g, const char *key)
{
    if (!key || !g->kv_index.slots)
        return NULL;
    size_t s = index_slot(&g->kv_index, g, kv_name_at, key, strlen(key));
    uint32_t v = g->kv_index.slots[s];
    return v ? &g->kvs[v - 1] : NULL;
}

const cr_gguf_tensor_t *cr_gguf_tensor_at(const cr_gguf_t *g, size_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const cr_gguf_tensor_t *cr_gguf_tensor_find(const cr_gguf_t *g,
                                            const char *name)
{
    if (!name || !g->tensor_index.slots)
        return NULL;
    size_t s = index_slot(&g->tensor_index, g, tensor_name_at, name,
                          strlen(name));
    uint32_t v = g->tensor_index.slots[s];
    return v ? &g->tensors[v - 1] : NULL;
}

static bool is_unsigned(cr_gguf_vtype_t t)
{
    return t == CR_GGUF_U8 || t == CR_GGUF_U16 || t == CR_GGUF_U32 ||
           t == CR_GGUF_U64;
}

static bool is_signed(cr_gguf_vtype_t t)
{
    return t == CR_GGUF_I8 || t == CR_GGUF_I16 || t == CR_GGUF_I32 ||
           t == CR_GGUF_I64;
}

/* Integer conversions shared by KV getters and array element getters. */
static bool kv_to_u64(const cr_gguf_kv_t *kv, uint64_t *out)
{
    if (is_unsigned(kv->type)) {
        *out = kv->v.u64;
        return true;
    }
    if (is_signed(kv->type) && kv->v.i64 >= 0) {
        *out = (uint64_t)kv->v.i64;
        return true;
    }
    return false;
}

static bool kv_to_i64(const cr_gguf_kv_t *kv, int64_t *out)
{
    if (is_signed(kv->type)) {
        *out = kv->v.i64;
        return true;
    }
    if (is_unsigned(kv->type) && kv->v.u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)kv->v.u64;
        return true;
    }
    return false;
}

static bool kv_to_f32(const cr_gguf_kv_t *kv, float *out)
{
    if (kv->type != CR_GGUF_F32 && kv->type != CR_GGUF_F64)
        return false;
    double d = kv->v.f64;
    /* Out-of-range double -> float is undefined behaviour; refuse it. */
    if (isfinite(d) && (d > FLT_MAX || d < -FLT_MAX))
        return false;
    *out = (float)d;
    return true;
}

bool cr_gguf_get_u64(const cr_gguf_t *g, const char *key, uint64_t *out)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    return kv && kv_to_u64(kv, out);
}

bool cr_gguf_get_u32(const cr_gguf_t *g, const char *key, uint32_t *out)
{
    uint64_t v;
    if (!cr_gguf_get_u64(g, key, &v) || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

bool cr_gguf_get_i64(const cr_gguf_t *g, const char *key, int64_t *out)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    return kv && kv_to_i64(kv, out);
}

bool cr_gguf_get_f32(const cr_gguf_t *g, const char *key, float *out)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    return kv && kv_to_f32(kv, out);
}

bool cr_gguf_get_bool(const cr_gguf_t *g, const char *key, bool *out)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    if (!kv || kv->type != CR_GGUF_BOOL)
        return false;
    *out = kv->v.b;
    return true;
}

bool cr_gguf_get_str(const cr_gguf_t *g, const char *key, cr_gguf_str_t *out)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    if (!kv || kv->type != CR_GGUF_STRING)
        return false;
    *out = kv->v.str;
    return true;
}

bool cr_gguf_get_strz(const cr_gguf_t *g, const char *key, char *buf,
                      size_t cap)
{
    cr_gguf_str_t s;
    if (!cap || !cr_gguf_get_str(g, key, &s))
        return false;
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(buf, s.ptr, n);
    buf[n] = '\0';
    return true;
}

bool cr_gguf_get_arr(const cr_gguf_t *g, const char *key,
                     const cr_gguf_array_t **out)
{
    const cr_gguf_kv_t *kv = cr_gguf_kv_find(g, key);
    if (!kv || kv->type != CR_GGUF_ARRAY)
        return false;
    *out = &kv->v.arr;
    return true;
}

/* Decodes element i of a numeric array into a scratch KV. */
static bool arr_elem(const cr_gguf_array_t *a, uint64_t i, cr_gguf_kv_t *kv)
{
    size_t eb = scalar_bytes(a->type);
    if (!eb || i >= a->n)
        return false;
    kv->type = a->type;
    decode_scalar(a->type, (const uint8_t *)a->data + i * eb, kv);
    return true;
}

bool cr_gguf_arr_get_u64(const cr_gguf_array_t *a, uint64_t i, uint64_t *out)
{
    cr_gguf_kv_t kv;
    return arr_elem(a, i, &kv) && kv_to_u64(&kv, out);
}

bool cr_gguf_arr_get_i64(const cr_gguf_array_t *a, uint64_t i, int64_t *out)
{
    cr_gguf_kv_t kv;
    return arr_elem(a, i, &kv) && kv_to_i64(&kv, out);
}

bool cr_gguf_arr_get_f32(const cr_gguf_array_t *a, uint64_t i, float *out)
{
    cr_gguf_kv_t kv;
    return arr_elem(a, i, &kv) && kv_to_f32(&kv, out);
}

bool cr_gguf_arr_get_str(const cr_gguf_array_t *a, uint64_t i,
                         cr_gguf_str_t *out)
{
    if (a->type != CR_GGUF_STRING || i >= a->n || !a->strs)
        return false;
    *out = a->strs[i];
    return true;
}

bool cr_gguf_str_eq(cr_gguf_str_t s, const char *cstr)
{
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || !memcmp(s.ptr, cstr, n));
}

const char *cr_gguf_vtype_name(cr_gguf_vtype_t t)
{
    static const char *const names[] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
        "array", "u64", "i64", "f64",
    };
    if ((unsigned)t < CR_ARRAY_LEN(names))
        return names[t];
    return "unknown";
}
