/* gguf.h: read-only access to a GGUF file, checked before anything is used.
 *
 * cr_gguf_open() mmaps the file and validates the whole header: magic,
 * version (2 or 3), every metadata key and value (lengths against the bytes
 * that remain and against named limits, duplicate keys refused), every tensor
 * (name, dims, known type, row size a whole number of blocks, data offset
 * aligned and inside the file, no overflow, no overlap). Only then does it
 * return a handle, so users of this module never see an unchecked byte.
 *
 * Strings returned point into the mapping (not NUL-terminated; use the
 * length) and stay valid until cr_gguf_close(). Used by the runner (load),
 * the scheduler (memory estimate) and the registry (config blob, show). */
#ifndef CR_GGUF_H
#define CR_GGUF_H

#include "lib/prelude.h"
#include "lib/status.h"
#include "lib/tensor_type.h"

/* Limits on what a file may claim, checked before allocation. */
#define CR_GGUF_MAX_KV 65536             /* metadata entries */
#define CR_GGUF_MAX_TENSORS 65536        /* tensor infos */
#define CR_GGUF_MAX_KEY_BYTES 65535      /* key length */
#define CR_GGUF_MAX_NAME_BYTES 256       /* tensor name length */
#define CR_GGUF_MAX_DIMS 4
#define CR_GGUF_MAX_ARRAY_ELEMS (1u << 26) /* array elements */
#define CR_GGUF_DEFAULT_ALIGNMENT 32

typedef enum cr_gguf_vtype {
    CR_GGUF_U8 = 0,
    CR_GGUF_I8 = 1,
    CR_GGUF_U16 = 2,
    CR_GGUF_I16 = 3,
    CR_GGUF_U32 = 4,
    CR_GGUF_I32 = 5,
    CR_GGUF_F32 = 6,
    CR_GGUF_BOOL = 7,
    CR_GGUF_STRING = 8,
    CR_GGUF_ARRAY = 9,
    CR_GGUF_U64 = 10,
    CR_GGUF_I64 = 11,
    CR_GGUF_F64 = 12,
} cr_gguf_vtype_t;

typedef struct cr_gguf_str {
    const char *ptr; /* into the mapping; NOT NUL-terminated */
    uint64_t len;
} cr_gguf_str_t;

typedef struct cr_gguf_array {
    cr_gguf_vtype_t type;      /* element type (never ARRAY: nested refused) */
    uint64_t n;                /* element count */
    const void *data;          /* packed little-endian elements, for
                                  non-string types; may be unaligned, so read
                                  with memcpy or cr_gguf_arr_get_*() */
    const cr_gguf_str_t *strs; /* n strings, for STRING arrays; else NULL */
} cr_gguf_array_t;

typedef struct cr_gguf_kv {
    cr_gguf_str_t key;
    cr_gguf_vtype_t type;
    union {
        uint64_t u64;  /* U8, U16, U32, U64 widened */
        int64_t i64;   /* I8, I16, I32, I64 widened */
        double f64;    /* F32, F64 widened */
        bool b;        /* BOOL */
        cr_gguf_str_t str;
        cr_gguf_array_t arr;
    } v;
} cr_gguf_kv_t;

typedef struct cr_gguf_tensor {
    char name[CR_GGUF_MAX_NAME_BYTES + 1]; /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[CR_GGUF_MAX_DIMS]; /* elements per dim, ne[0] = row length;
                                      unused dims are 1 */
    cr_type_t type;
    uint64_t n_elems;
    uint64_t offset;     /* from the start of the data section */
    uint64_t size_bytes; /* bytes of data */
    const void *data;    /* into the mapping */
} cr_gguf_tensor_t;

typedef struct cr_gguf cr_gguf_t;

/* Opens and validates path. On success *out is owned by the caller (free with
 * cr_gguf_close). On failure returns CR_E_IO (cannot open/map), CR_E_CORRUPT
 * or CR_E_TRUNCATED (bad file; err->msg says what and where, e.g.
 * "tensor 'blk.0.attn_q.weight' data [offset 123, 4096 bytes] lies outside the
 * file (size 2000)"), CR_E_UNSUPPORTED (unknown tensor type or version). */
cr_status_t cr_gguf_open(const char *path, cr_gguf_t **out, cr_err_t *err);

/* Same, over bytes in memory (borrowed; must outlive the handle). For tests
 * and for files already in memory. */
cr_status_t cr_gguf_open_memory(const void *data, size_t len, cr_gguf_t **out,
                                cr_err_t *err);

void cr_gguf_close(cr_gguf_t **self_p);

/* Drops the whole pages of the metadata section (header, key/values, tensor
 * infos: everything before the data) of a file-backed GGUF from this
 * process's memory once what is needed from them has been read. They stay
 * valid: a later access reads them back from the page cache. For a large
 * vocabulary (Llama 3: ~15 MB of token strings and merges) this is memory
 * a loaded model would otherwise hold for nothing. No-op for memory input. */
void cr_gguf_drop_metadata_pages(const cr_gguf_t *g);

uint32_t cr_gguf_version(const cr_gguf_t *g);
uint64_t cr_gguf_file_size(const cr_gguf_t *g);
uint32_t cr_gguf_alignment(const cr_gguf_t *g);
/* File offset of the data section (tensor offsets are relative to it). */
uint64_t cr_gguf_data_offset(const cr_gguf_t *g);

/* Metadata. Index access in file order; lookup by exact key. */
size_t cr_gguf_kv_count(const cr_gguf_t *g);
const cr_gguf_kv_t *cr_gguf_kv_at(const cr_gguf_t *g, size_t i);
const cr_gguf_kv_t *cr_gguf_kv_find(const cr_gguf_t *g, const char *key);

/* Typed getters: false if the key is absent or not convertible (ints of any
 * width convert when in range; F32/F64 for floats). */
bool cr_gguf_get_u64(const cr_gguf_t *g, const char *key, uint64_t *out);
bool cr_gguf_get_u32(const cr_gguf_t *g, const char *key, uint32_t *out);
bool cr_gguf_get_i64(const cr_gguf_t *g, const char *key, int64_t *out);
bool cr_gguf_get_f32(const cr_gguf_t *g, const char *key, float *out);
bool cr_gguf_get_bool(const cr_gguf_t *g, const char *key, bool *out);
bool cr_gguf_get_str(const cr_gguf_t *g, const char *key, cr_gguf_str_t *out);
/* Copies a string value into buf (NUL-terminated, truncated to cap-1).
 * False if absent or not a string. */
bool cr_gguf_get_strz(const cr_gguf_t *g, const char *key, char *buf,
                      size_t cap);
bool cr_gguf_get_arr(const cr_gguf_t *g, const char *key,
                     const cr_gguf_array_t **out);

/* Element i of an array, converted like the typed getters (integers of any
 * width when in range, F32/F64 for floats, STRING for strings). False if i is
 * out of range or the element type does not convert. */
bool cr_gguf_arr_get_u64(const cr_gguf_array_t *a, uint64_t i, uint64_t *out);
bool cr_gguf_arr_get_i64(const cr_gguf_array_t *a, uint64_t i, int64_t *out);
bool cr_gguf_arr_get_f32(const cr_gguf_array_t *a, uint64_t i, float *out);
bool cr_gguf_arr_get_str(const cr_gguf_array_t *a, uint64_t i,
                         cr_gguf_str_t *out);

/* The architecture (`general.architecture`) as a NUL-terminated string in a
 * static-per-handle buffer, or "" if absent. Handy for "<arch>.block_count". */
const char *cr_gguf_arch(const cr_gguf_t *g);

/* Tensors, in file order, and by name. */
size_t cr_gguf_tensor_count(const cr_gguf_t *g);
const cr_gguf_tensor_t *cr_gguf_tensor_at(const cr_gguf_t *g, size_t i);
const cr_gguf_tensor_t *cr_gguf_tensor_find(const cr_gguf_t *g,
                                            const char *name);

/* Compares a GGUF string with a C string. */
bool cr_gguf_str_eq(cr_gguf_str_t s, const char *cstr);

/* Static name of a value type ("u32", "string", ...); "unknown" otherwise. */
const char *cr_gguf_vtype_name(cr_gguf_vtype_t t);

#endif
