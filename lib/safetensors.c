/* safetensors.c: safetensors reader (see safetensors.h). */
#include "lib/prelude.h"
#include "lib/safetensors.h"

#include <fcntl.h>
#include <jansson.h>
#include <sys/stat.h>
#include <unistd.h>

struct cr_st_file {
    int fd;
    char *name;
    uint64_t file_size;
    uint64_t data_start; /* 8 + header length */
    cr_st_tensor_t *tensors;
    size_t n_tensors;
    json_t *metadata; /* the __metadata__ object, or NULL */
};

typedef struct set_entry {
    const cr_st_tensor_t *t;
    const cr_st_file_t *f;
} set_entry_t;

struct cr_st_set {
    cr_st_file_t **files;
    size_t n_files;
    set_entry_t *entries;
    size_t n_entries;
    const char *const *ignore; /* borrowed; NULL: none */
    size_t *slots;             /* hash of names: entry index + 1, 0 empty */
    size_t n_slots;            /* a power of two > 2 * n_entries */
};

static const struct {
    const char *name;
    cr_st_dtype_t dtype;
    size_t size;
} dtypes[] = {
    {"F32", CR_ST_F32, 4},
    {"F16", CR_ST_F16, 2},
    {"BF16", CR_ST_BF16, 2},
};

const char *cr_st_dtype_name(cr_st_dtype_t t)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(dtypes); i++)
        if (dtypes[i].dtype == t)
            return dtypes[i].name;
    return "?";
}

size_t cr_st_dtype_size(cr_st_dtype_t t)
{
    for (size_t i = 0; i < CR_ARRAY_LEN(dtypes); i++)
        if (dtypes[i].dtype == t)
            return dtypes[i].size;
    return 0;
}

/* pread of exactly n bytes at off: CR_E_TRUNCATED if the file ends. */
static cr_status_t read_at(int fd, void *dst, size_t n, uint64_t off,
                           const char *what, cr_err_t *err)
{
    uint8_t *p = dst;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return cr_err_set(err, CR_E_IO, "%s: read: %s", what, strerror(errno));
        if (r == 0)
            return cr_err_set(err, CR_E_TRUNCATED, "%s: file ends early", what);
        p += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return CR_OK;
}

static bool get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

/* Fills t from one header entry {"dtype", "shape", "data_offsets"}. */
static cr_status_t parse_tensor(cr_st_file_t *f, const char *key,
                                const json_t *v, cr_st_tensor_t *t,
                                uint64_t data_len, cr_err_t *err)
{
    const char *fn = f->name;
    if (strlen(key) > CR_ST_MAX_NAME_BYTES || !*key)
        return cr_err_set(err, CR_E_CORRUPT, "%s: tensor name of %zu bytes "
                          "(1..%d allowed)", fn, strlen(key),
                          CR_ST_MAX_NAME_BYTES);
    snprintf(t->name, sizeof t->name, "%s", key);
    if (!json_is_object(v))
        return cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s': not an object",
                          fn, key);
    const json_t *dt = json_object_get(v, "dtype");
    const json_t *shape = json_object_get(v, "shape");
    const json_t *offs = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(offs) ||
        json_array_size(offs) != 2)
        return cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s': needs dtype, "
                          "shape and two data_offsets", fn, key);
    size_t esize = 0;
    for (size_t i = 0; i < CR_ARRAY_LEN(dtypes); i++)
        if (!strcmp(json_string_value(dt), dtypes[i].name)) {
            t->dtype = dtypes[i].dtype;
            esize = dtypes[i].size;
        }
    if (!esize)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: tensor '%s': dtype %.32s "
                          "is not supported (F32, F16, BF16 are)", fn, key,
                          json_string_value(dt));
    if (json_array_size(shape) > CR_ST_MAX_DIMS)
        return cr_err_set(err, CR_E_UNSUPPORTED, "%s: tensor '%s': %zu dims "
                          "(at most %d)", fn, key, json_array_size(shape),
                          CR_ST_MAX_DIMS);
    t->n_dims = (uint32_t)json_array_size(shape);
    uint64_t n = 1;
    for (uint32_t i = 0; i < t->n_dims; i++) {
        uint64_t d;
        if (!get_u64(json_array_get(shape, i), &d))
            return cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s': shape[%u] "
                              "is not a non-negative integer", fn, key, i);
        if (d && n > UINT64_MAX / d)
            return cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s': shape "
                              "overflows", fn, key);
        t->shape[i] = d;
        n *= d;
    }
    t->n_elems = n;
    uint64_t begin, end;
    if (!get_u64(json_array_get(offs, 0), &begin) ||
        !get_u64(json_array_get(offs, 1), &end) || end < begin)
        return cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s': data_offsets "
                          "must be two integers, begin <= end", fn, key);
    if (end > data_len)
        return cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s': data_offsets "
                          "[%" PRIu64 ", %" PRIu64 "] lie outside the data "
                          "(%" PRIu64 " bytes)", fn, key, begin, end, data_len);
    if (n > UINT64_MAX / esize || end - begin != n * esize)
        return cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s': %" PRIu64
                          " bytes of data for %" PRIu64 " %s elements", fn, key,
                          end - begin, n, json_string_value(dt));
    t->offset = f->data_start + begin;
    t->size_bytes = end - begin;
    return CR_OK;
}

static int by_offset(const void *a, const void *b)
{
    const cr_st_tensor_t *x = a, *y = b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->size_bytes < y->size_bytes ? -1 : x->size_bytes > y->size_bytes;
}

static bool is_ignored(const char *const *ignore, const char *name)
{
    for (size_t i = 0; ignore && ignore[i]; i++)
        if (!strcmp(ignore[i], name))
            return true;
    return false;
}

/* An ignored tensor: only its data_offsets, bounds-checked, so that the
 * overlap check still covers its bytes. */
static cr_status_t parse_ignored(cr_st_file_t *f, const char *key, const json_t *v,
                                 cr_st_tensor_t *t, uint64_t data_len, cr_err_t *err)
{
    const json_t *offs = json_object_get(v, "data_offsets");
    uint64_t begin, end;
    if (json_array_size(offs) != 2 || !get_u64(json_array_get(offs, 0), &begin) ||
        !get_u64(json_array_get(offs, 1), &end) || end < begin || end > data_len)
        return cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s': data_offsets are not "
                          "two integers inside the data", f->name, key);
    snprintf(t->name, sizeof t->name, "%s", key);
    t->offset = f->data_start + begin;
    t->size_bytes = end - begin;
    return CR_OK;
}

static cr_status_t parse_header(cr_st_file_t *f, const char *text, size_t len,
                                const char *const *ignore, cr_err_t *err)
{
    json_error_t jerr;
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return cr_err_set(err, CR_E_CORRUPT, "%s: header is not JSON: %s "
                          "(at byte %d)", f->name, jerr.text, jerr.position);
    cr_status_t st = CR_OK;
    if (!json_is_object(root)) {
        st = cr_err_set(err, CR_E_CORRUPT, "%s: header is not a JSON object",
                        f->name);
        goto out;
    }
    size_t n = json_object_size(root);
    if (n > CR_ST_MAX_TENSORS + 1) {
        st = cr_err_set(err, CR_E_TOO_LARGE, "%s: %zu tensors (at most %d)",
                        f->name, n, CR_ST_MAX_TENSORS);
        goto out;
    }
    f->tensors = calloc(n ? n : 1, sizeof *f->tensors);
    if (!f->tensors) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    uint64_t data_len = f->file_size - f->data_start;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            const char *mk;
            json_t *mv;
            if (!json_is_object(v)) {
                st = cr_err_set(err, CR_E_CORRUPT, "%s: __metadata__ is not "
                                "an object", f->name);
                goto out;
            }
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    st = cr_err_set(err, CR_E_CORRUPT, "%s: __metadata__.%.64s "
                                    "is not a string", f->name, mk);
                    goto out;
                }
            }
            f->metadata = json_incref(v);
            continue;
        }
        st = is_ignored(ignore, key)
                 ? parse_ignored(f, key, v, &f->tensors[f->n_tensors], data_len, err)
                 : parse_tensor(f, key, v, &f->tensors[f->n_tensors], data_len, err);
        if (st)
            goto out;
        f->n_tensors++;
    }
    qsort(f->tensors, f->n_tensors, sizeof *f->tensors, by_offset);
    /* Sorted by offset, a tensor overlaps an earlier one iff it starts
     * before the furthest end seen so far (empty tensors hold no bytes). */
    const cr_st_tensor_t *far = NULL;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cr_st_tensor_t *b = &f->tensors[i];
        if (!b->size_bytes)
            continue;
        if (far && far->offset + far->size_bytes > b->offset) {
            st = cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s' overlaps "
                            "tensor '%s'", f->name, b->name, far->name);
            goto out;
        }
        far = b;
    }
    size_t kept = 0;
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!is_ignored(ignore, f->tensors[i].name))
            f->tensors[kept++] = f->tensors[i];
    f->n_tensors = kept;
out:
    json_decref(root);
    return st;
}

cr_status_t cr_st_open(const char *path, const char *name, cr_st_file_t **out,
                       cr_err_t *err)
{
    return cr_st_open_ex(path, name, NULL, out, err);
}

cr_status_t cr_st_open_ex(const char *path, const char *name,
                          const char *const *ignore, cr_st_file_t **out,
                          cr_err_t *err)
{
    *out = NULL;
    cr_st_file_t *f = calloc(1, sizeof *f);
    if (!f || !(f->name = strdup(name ? name : path))) {
        free(f);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    char *text = NULL;
    cr_status_t st = CR_OK;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (f->fd < 0 || fstat(f->fd, &sb) != 0) {
        st = cr_err_set(err, CR_E_IO, "%s: open: %s", f->name, strerror(errno));
        goto out;
    }
    f->file_size = (uint64_t)sb.st_size;
    uint8_t lenb[8];
    if ((st = read_at(f->fd, lenb, 8, 0, f->name, err)))
        goto out;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | lenb[i];
    if (hlen > CR_ST_MAX_HEADER_BYTES) {
        st = cr_err_set(err, CR_E_TOO_LARGE, "%s: header length %" PRIu64
                        " is over the limit (%u bytes)", f->name, hlen,
                        CR_ST_MAX_HEADER_BYTES);
        goto out;
    }
    if (hlen < 2 || hlen > f->file_size - 8) {
        st = cr_err_set(err, hlen < 2 ? CR_E_CORRUPT : CR_E_TRUNCATED,
                        "%s: header length %" PRIu64 " but the file has %"
                        PRIu64 " bytes", f->name, hlen, f->file_size);
        goto out;
    }
    f->data_start = 8 + hlen;
    text = malloc((size_t)hlen);
    if (!text) {
        st = cr_err_set(err, CR_E_NOMEM, "out of memory");
        goto out;
    }
    if ((st = read_at(f->fd, text, (size_t)hlen, 8, f->name, err)) ||
        (st = parse_header(f, text, (size_t)hlen, ignore, err)))
        goto out;
out:
    free(text);
    if (st)
        cr_st_close(&f);
    *out = f;
    return st;
}

void cr_st_close(cr_st_file_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    cr_st_file_t *f = *self_p;
    if (f->fd >= 0)
        close(f->fd);
    json_decref(f->metadata);
    free(f->tensors);
    free(f->name);
    free(f);
    *self_p = NULL;
}

const char *cr_st_name(const cr_st_file_t *f) { return f->name; }
size_t cr_st_tensor_count(const cr_st_file_t *f) { return f->n_tensors; }

const cr_st_tensor_t *cr_st_tensor_at(const cr_st_file_t *f, size_t i)
{
    return i < f->n_tensors ? &f->tensors[i] : NULL;
}

const cr_st_tensor_t *cr_st_tensor_find(const cr_st_file_t *f, const char *name)
{
    for (size_t i = 0; i < f->n_tensors; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

const char *cr_st_metadata(const cr_st_file_t *f, const char *key)
{
    return f->metadata ? json_string_value(json_object_get(f->metadata, key))
                       : NULL;
}

cr_status_t cr_st_read(const cr_st_file_t *f, const cr_st_tensor_t *t,
                       void *dst, size_t cap, cr_err_t *err)
{
    if (cap < t->size_bytes)
        return cr_err_set(err, CR_E_INVALID, "%s: tensor '%s': %" PRIu64
                          " bytes do not fit %zu", f->name, t->name,
                          t->size_bytes, cap);
    char what[CR_ST_MAX_NAME_BYTES + 64];
    snprintf(what, sizeof what, "tensor '%s'", t->name);
    cr_status_t st = read_at(f->fd, dst, (size_t)t->size_bytes, t->offset,
                             what, err);
    if (st)
        cr_err_wrap(err, "%s", f->name);
    return st;
}

cr_status_t cr_st_read_range(const cr_st_file_t *f, const cr_st_tensor_t *t,
                             uint64_t off, void *dst, size_t n, cr_err_t *err)
{
    if (off > t->size_bytes || n > t->size_bytes - off)
        return cr_err_set(err, CR_E_INVALID, "%s: tensor '%s': bytes [%" PRIu64
                          ", +%zu] are outside its %" PRIu64, f->name, t->name,
                          off, n, t->size_bytes);
    char what[CR_ST_MAX_NAME_BYTES + 64];
    snprintf(what, sizeof what, "tensor '%s'", t->name);
    cr_status_t st = read_at(f->fd, dst, n, t->offset + off, what, err);
    if (st)
        cr_err_wrap(err, "%s", f->name);
    return st;
}

static float half_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1f, m = h & 0x3ff, bits;
    if (e == 0x1f) {
        bits = sign | 0x7f800000u | m << 13;
    } else if (e) {
        bits = sign | (e + 112) << 23 | m << 13;
    } else if (!m) {
        bits = sign;
    } else { /* subnormal: normalise */
        e = 113;
        while (!(m & 0x400)) {
            m <<= 1;
            e--;
        }
        bits = sign | e << 23 | (m & 0x3ff) << 13;
    }
    float out;
    memcpy(&out, &bits, 4);
    return out;
}

cr_status_t cr_st_read_f32(const cr_st_file_t *f, const cr_st_tensor_t *t,
                           float *dst, size_t n_elems, cr_err_t *err)
{
    if (n_elems < t->n_elems)
        return cr_err_set(err, CR_E_INVALID, "%s: tensor '%s': %" PRIu64
                          " elements do not fit %zu", f->name, t->name,
                          t->n_elems, n_elems);
    cr_status_t st = cr_st_read(f, t, dst, n_elems * sizeof(float), err);
    if (st || t->dtype == CR_ST_F32)
        return st;
    /* Widen in place from the back: element i's 2 bytes lie below its 4. */
    const uint16_t *h = (const uint16_t *)(void *)dst;
    for (size_t i = (size_t)t->n_elems; i-- > 0;) {
        uint16_t v;
        memcpy(&v, (const uint8_t *)h + 2 * i, 2);
        if (t->dtype == CR_ST_F16) {
            dst[i] = half_to_f32(v);
        } else {
            uint32_t bits = (uint32_t)v << 16;
            memcpy(&dst[i], &bits, 4);
        }
    }
    return CR_OK;
}

/* ---- sets ---- */

cr_st_set_t *cr_st_set_new(void)
{
    return calloc(1, sizeof(cr_st_set_t));
}

void cr_st_set_destroy(cr_st_set_t **self_p)
{
    if (!self_p || !*self_p)
        return;
    cr_st_set_t *s = *self_p;
    for (size_t i = 0; i < s->n_files; i++)
        cr_st_close(&s->files[i]);
    free(s->files);
    free(s->entries);
    free(s->slots);
    free(s);
    *self_p = NULL;
}

static size_t name_hash(const char *name)
{
    size_t h = 1469598103934665603u;
    for (const uint8_t *p = (const uint8_t *)name; *p; p++)
        h = (h ^ *p) * 1099511628211u;
    return h;
}

/* Rebuilds the name hash over every entry (after a file is added). */
static bool rehash(cr_st_set_t *s)
{
    size_t n = 16;
    while (n <= 2 * s->n_entries)
        n <<= 1;
    size_t *slots = calloc(n, sizeof *slots);
    if (!slots)
        return false;
    for (size_t i = 0; i < s->n_entries; i++) {
        size_t h = name_hash(s->entries[i].t->name) & (n - 1);
        while (slots[h])
            h = (h + 1) & (n - 1);
        slots[h] = i + 1;
    }
    free(s->slots);
    s->slots = slots;
    s->n_slots = n;
    return true;
}

size_t cr_st_set_index_of(const cr_st_set_t *s, const char *name)
{
    if (!s->n_slots)
        return SIZE_MAX;
    for (size_t h = name_hash(name) & (s->n_slots - 1); s->slots[h];
         h = (h + 1) & (s->n_slots - 1))
        if (!strcmp(s->entries[s->slots[h] - 1].t->name, name))
            return s->slots[h] - 1;
    return SIZE_MAX;
}

void cr_st_set_ignore(cr_st_set_t *s, const char *const *ignore)
{
    s->ignore = ignore;
}

cr_status_t cr_st_set_add_file(cr_st_set_t *s, const char *path,
                               const char *name, cr_err_t *err)
{
    if (s->n_files >= CR_ST_MAX_FILES)
        return cr_err_set(err, CR_E_TOO_LARGE, "more than %d safetensors files",
                          CR_ST_MAX_FILES);
    cr_st_file_t *f = NULL;
    cr_status_t st = cr_st_open_ex(path, name, s->ignore, &f, err);
    if (st)
        return st;
    for (size_t i = 0; i < f->n_tensors; i++) {
        const cr_st_file_t *other = NULL;
        if (cr_st_set_find(s, f->tensors[i].name, &other)) {
            st = cr_err_set(err, CR_E_EXISTS, "%s: tensor '%s' is also in %s",
                            f->name, f->tensors[i].name, other->name);
            cr_st_close(&f);
            return st;
        }
    }
    void *files = realloc(s->files, (s->n_files + 1) * sizeof *s->files);
    if (files)
        s->files = files;
    void *ents = files ? realloc(s->entries, (s->n_entries + f->n_tensors + 1) *
                                                 sizeof *s->entries)
                       : NULL;
    if (!ents) {
        cr_st_close(&f);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    s->entries = ents;
    size_t before = s->n_entries;
    for (size_t i = 0; i < f->n_tensors; i++)
        s->entries[s->n_entries++] = (set_entry_t){&f->tensors[i], f};
    if (!rehash(s)) {
        s->n_entries = before;
        cr_st_close(&f);
        return cr_err_set(err, CR_E_NOMEM, "out of memory");
    }
    s->files[s->n_files++] = f;
    return CR_OK;
}

size_t cr_st_set_tensor_count(const cr_st_set_t *s) { return s->n_entries; }

const cr_st_tensor_t *cr_st_set_tensor_at(const cr_st_set_t *s, size_t i,
                                          const cr_st_file_t **file)
{
    if (i >= s->n_entries)
        return NULL;
    if (file)
        *file = s->entries[i].f;
    return s->entries[i].t;
}

const cr_st_tensor_t *cr_st_set_find(const cr_st_set_t *s, const char *name,
                                     const cr_st_file_t **file)
{
    size_t i = cr_st_set_index_of(s, name);
    return i == SIZE_MAX ? NULL : cr_st_set_tensor_at(s, i, file);
}

/* The weight_map object of an index, or NULL with err set. Caller owns
 * *root. */
static const json_t *weight_map(const char *json, size_t len, const char *name,
                                json_t **root, cr_err_t *err)
{
    json_error_t jerr;
    *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!*root) {
        cr_err_set(err, CR_E_CORRUPT, "%s: not JSON: %s", name, jerr.text);
        return NULL;
    }
    const json_t *map = json_object_get(*root, "weight_map");
    if (!json_is_object(map)) {
        cr_err_set(err, CR_E_CORRUPT, "%s: no weight_map object", name);
        return NULL;
    }
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)map, k, v) {
        if (!json_is_string(v)) {
            cr_err_set(err, CR_E_CORRUPT, "%s: weight_map['%.128s'] is not a "
                       "file name", name, k);
            return NULL;
        }
    }
    return map;
}

cr_status_t cr_st_index_files(const char *json, size_t len, const char *name,
                              char ***names, size_t *n, cr_err_t *err)
{
    *names = NULL;
    *n = 0;
    json_t *root = NULL;
    cr_err_t e = {0};
    const json_t *map = weight_map(json, len, name, &root, &e);
    cr_status_t st = map ? CR_OK : cr_err_set(err, e.status, "%s", e.msg);
    const char *k;
    const json_t *v;
    char **out = NULL;
    size_t cnt = 0;
    if (map) {
        json_object_foreach((json_t *)map, k, v) {
            const char *file = json_string_value(v);
            bool seen = false;
            for (size_t i = 0; i < cnt && !seen; i++)
                seen = !strcmp(out[i], file);
            if (seen)
                continue;
            if (cnt >= CR_ST_MAX_FILES) {
                st = cr_err_set(err, CR_E_TOO_LARGE, "%s: more than %d files",
                                name, CR_ST_MAX_FILES);
                break;
            }
            char **grown = realloc(out, (cnt + 1) * sizeof *out);
            if (!grown || !(grown[cnt] = strdup(file))) {
                out = grown ? grown : out;
                st = cr_err_set(err, CR_E_NOMEM, "out of memory");
                break;
            }
            out = grown;
            cnt++;
        }
    }
    json_decref(root);
    if (st) {
        for (size_t i = 0; i < cnt; i++)
            free(out[i]);
        free(out);
        return st;
    }
    *names = out;
    *n = cnt;
    return CR_OK;
}

cr_status_t cr_st_set_check_index(const cr_st_set_t *s, const char *json,
                                  size_t len, const char *name, cr_err_t *err)
{
    json_t *root = NULL;
    cr_err_t e = {0};
    const json_t *map = weight_map(json, len, name, &root, &e);
    cr_status_t st = map ? CR_OK : cr_err_set(err, e.status, "%s", e.msg);
    if (map) {
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)map, k, v) {
            const cr_st_file_t *f = NULL;
            if (is_ignored(s->ignore, k))
                continue;
            if (!cr_st_set_find(s, k, &f)) {
                st = cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%.200s' is "
                                "not in %s", name, k, json_string_value(v));
                break;
            }
            if (strcmp(f->name, json_string_value(v))) {
                st = cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%.200s' is in "
                                "%s, not %s", name, k, f->name,
                                json_string_value(v));
                break;
            }
        }
        for (size_t i = 0; !st && i < s->n_entries; i++)
            if (!json_object_get(map, s->entries[i].t->name))
                st = cr_err_set(err, CR_E_CORRUPT, "%s: tensor '%s' of %s is "
                                "not in the weight_map", name,
                                s->entries[i].t->name, s->entries[i].f->name);
    }
    json_decref(root);
    return st;
}
