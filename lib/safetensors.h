/* safetensors.h: read-only access to Hugging Face safetensors files, checked
 * before anything is used.
 *
 * A file is an 8-byte little-endian header length N, N bytes of JSON
 * ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {str: str}}), then the data section; offsets are relative
 * to its start. cr_st_open() parses the header with jansson and validates
 * it all before returning: N within CR_ST_MAX_HEADER_BYTES and the file,
 * every tensor's dtype (F32, F16, BF16; any other is refused, named), shape
 * (at most CR_ST_MAX_DIMS dims, no overflow), offsets inside the data
 * section with end - begin = product(shape) * dtype size, and no two
 * tensors overlapping. Errors name the file (as the caller called it) and
 * the tensor. cr_st_open_ex can leave named tensors out (offsets still
 * checked), for buffers of other dtypes a checkpoint carries.
 *
 * A set (cr_st_set_t) is a model's tensors over one or more files: shards
 * named by model.safetensors.index.json's weight_map, or plain files added
 * one by one; tensor names must be unique across the set.
 *
 * Data is read with pread at request time, never mapped, so a file that
 * shrinks later gives an error, not a signal. Knows nothing of models. */
#ifndef CR_SAFETENSORS_H
#define CR_SAFETENSORS_H

#include "lib/prelude.h"
#include "lib/status.h"

#define CR_ST_MAX_HEADER_BYTES (100u << 20) /* as the format's own reader */
#define CR_ST_MAX_TENSORS 65536
#define CR_ST_MAX_NAME_BYTES 256
#define CR_ST_MAX_DIMS 8
#define CR_ST_MAX_FILES 1024 /* shards in a set */

typedef enum cr_st_dtype {
    CR_ST_F32 = 0,
    CR_ST_F16 = 1,
    CR_ST_BF16 = 2,
} cr_st_dtype_t;

typedef struct cr_st_tensor {
    char name[CR_ST_MAX_NAME_BYTES + 1]; /* NUL-terminated */
    cr_st_dtype_t dtype;
    uint32_t n_dims;                  /* 0 for a scalar */
    uint64_t shape[CR_ST_MAX_DIMS];   /* row-major: shape[n_dims-1] is the
                                         fastest-moving dim */
    uint64_t n_elems;
    uint64_t offset;     /* absolute offset in the file */
    uint64_t size_bytes;
} cr_st_tensor_t;

typedef struct cr_st_file cr_st_file_t;
typedef struct cr_st_set cr_st_set_t;

/* "F32", "F16", "BF16". */
const char *cr_st_dtype_name(cr_st_dtype_t t);
/* Bytes per element: 4 or 2. */
size_t cr_st_dtype_size(cr_st_dtype_t t);

/* Opens and validates the file at path; name (may be NULL: path) is how
 * errors call it. Caller owns *out; free with cr_st_close. CR_E_IO (cannot
 * open/read), CR_E_TRUNCATED (shorter than its header says), CR_E_CORRUPT
 * (bad header JSON, lying or overlapping offsets, wrong sizes),
 * CR_E_TOO_LARGE (header length or counts past the limits),
 * CR_E_UNSUPPORTED (a dtype other than F32/F16/BF16), CR_E_NOMEM. */
cr_status_t cr_st_open(const char *path, const char *name, cr_st_file_t **out,
                       cr_err_t *err);
/* Same, leaving out the tensors named in ignore (a NULL-terminated list;
 * NULL: none): their data_offsets are still checked (inside the data, not
 * overlapping another tensor) but their dtype and shape are not read and
 * they are not listed. For buffers a checkpoint may carry in any dtype
 * (BERT's I64 embeddings.position_ids). */
cr_status_t cr_st_open_ex(const char *path, const char *name,
                          const char *const *ignore, cr_st_file_t **out,
                          cr_err_t *err);
void cr_st_close(cr_st_file_t **self_p);

/* The name errors use (borrowed; valid until close). */
const char *cr_st_name(const cr_st_file_t *f);
size_t cr_st_tensor_count(const cr_st_file_t *f);
/* Tensors in the order of their data offsets. Borrowed; valid until close. */
const cr_st_tensor_t *cr_st_tensor_at(const cr_st_file_t *f, size_t i);
const cr_st_tensor_t *cr_st_tensor_find(const cr_st_file_t *f,
                                        const char *name);
/* A __metadata__ string value, or NULL (borrowed; valid until close). */
const char *cr_st_metadata(const cr_st_file_t *f, const char *key);

/* Reads tensor t of f (t from f) into dst, which holds cap bytes (at least
 * t->size_bytes). CR_E_INVALID if cap is short, CR_E_IO / CR_E_TRUNCATED
 * (naming file and tensor) if the read fails or the file shrank. */
cr_status_t cr_st_read(const cr_st_file_t *f, const cr_st_tensor_t *t,
                       void *dst, size_t cap, cr_err_t *err);

/* Reads n bytes at byte off of tensor t's data (off + n within
 * t->size_bytes, else CR_E_INVALID), for streaming a large tensor. */
cr_status_t cr_st_read_range(const cr_st_file_t *f, const cr_st_tensor_t *t,
                             uint64_t off, void *dst, size_t n, cr_err_t *err);

/* Reads tensor t as n_elems floats (F16 and BF16 widened exactly). */
cr_status_t cr_st_read_f32(const cr_st_file_t *f, const cr_st_tensor_t *t,
                           float *dst, size_t n_elems, cr_err_t *err);

/* ---- sets of files ---- */

/* A new empty set. Caller owns; free with cr_st_set_destroy. NULL: no
 * memory. */
cr_st_set_t *cr_st_set_new(void);
void cr_st_set_destroy(cr_st_set_t **self_p);

/* Opens path (called name) as cr_st_open does and adds its tensors.
 * CR_E_EXISTS if a tensor name is already in the set (naming both files),
 * CR_E_TOO_LARGE past CR_ST_MAX_FILES, else cr_st_open's errors. */
cr_status_t cr_st_set_add_file(cr_st_set_t *s, const char *path,
                               const char *name, cr_err_t *err);

/* Files added after this are opened with cr_st_open_ex's ignore list
 * (borrowed; must outlive the set), and cr_st_set_check_index skips those
 * names. */
void cr_st_set_ignore(cr_st_set_t *s, const char *const *ignore);

/* Checks the set against an index file's JSON text (len bytes; name is how
 * errors call it): its weight_map ({tensor: file}) must name exactly the
 * tensors of the set, each in the file the map says. CR_E_CORRUPT naming
 * the first tensor that differs or the malformed field. */
cr_status_t cr_st_set_check_index(const cr_st_set_t *s, const char *json,
                                  size_t len, const char *name, cr_err_t *err);

/* The file names (as in a weight_map) an index's JSON text lists, for
 * opening the shards: *names (caller owns; free each and the array with
 * free()) of *n. CR_E_CORRUPT naming the field; CR_E_TOO_LARGE. */
cr_status_t cr_st_index_files(const char *json, size_t len, const char *name,
                              char ***names, size_t *n, cr_err_t *err);

size_t cr_st_set_tensor_count(const cr_st_set_t *s);
/* Tensor i of the set (files in the order added, then offset order); its
 * file in *file (may be NULL). Borrowed; valid until destroy. */
const cr_st_tensor_t *cr_st_set_tensor_at(const cr_st_set_t *s, size_t i,
                                          const cr_st_file_t **file);
/* The index (for cr_st_set_tensor_at) of the tensor called name, or
 * SIZE_MAX. Hashed: constant time. */
size_t cr_st_set_index_of(const cr_st_set_t *s, const char *name);
/* Tensor by name, or NULL. */
const cr_st_tensor_t *cr_st_set_find(const cr_st_set_t *s, const char *name,
                                     const cr_st_file_t **file);

#endif
