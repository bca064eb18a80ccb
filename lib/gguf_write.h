/* gguf_write.h: builds GGUF v3 files (synthetic models, test corpora,
 * quantized copies).
 *
 * A writer collects metadata and tensor descriptions, then writes the whole
 * file at once, to a path (atomically: temp file in the same folder, fsync,
 * rename) or to memory. It does not read files (lib/gguf.h does) and knows
 * nothing of any key's meaning except general.alignment, which sets the
 * padding of the data section.
 *
 * Ownership: every key, string and array given to an add function is copied
 * at once; the caller may free its own copy on return. Tensor data passed to
 * cr_gguf_writer_add_tensor is BORROWED and must stay valid until the last
 * write call on the writer (or its destruction); a tensor callback's ctx is
 * borrowed the same way. Nothing is written until a write call.
 *
 * Keys: adding a key that already exists replaces its value in place (the
 * key keeps its position), so a copied vocabulary or file_type can be
 * overridden. Tensor names must be unique. */
#ifndef CR_GGUF_WRITE_H
#define CR_GGUF_WRITE_H

#include "lib/prelude.h"
#include "lib/gguf.h"
#include "lib/status.h"
#include "lib/tensor_type.h"

typedef struct cr_gguf_writer cr_gguf_writer_t;

/* A byte sink handed to tensor callbacks; writes go to the output file or
 * buffer in order. */
typedef struct cr_gguf_sink cr_gguf_sink_t;

/* Appends n bytes of tensor data. CR_E_INVALID if the callback writes more
 * than the tensor's size_bytes; CR_E_IO/CR_E_NOMEM from the output. */
cr_status_t cr_gguf_sink_write(cr_gguf_sink_t *sink, const void *data,
                               size_t n, cr_err_t *err);

/* Produces a tensor's data at write time (e.g. quantizing row by row): must
 * write exactly size_bytes through cr_gguf_sink_write, or fail. Called once
 * per write call, in tensor order. */
typedef cr_status_t (*cr_gguf_tensor_fn)(void *ctx, const char *name,
                                         uint64_t size_bytes,
                                         cr_gguf_sink_t *sink, cr_err_t *err);

/* A new empty writer (alignment 32, no keys, no tensors). Caller owns; free
 * with cr_gguf_writer_destroy. NULL if out of memory. */
cr_gguf_writer_t *cr_gguf_writer_new(void);

void cr_gguf_writer_destroy(cr_gguf_writer_t **self_p);

/* Scalars. key is a NUL-terminated, non-empty string of at most
 * CR_GGUF_MAX_KEY_BYTES bytes. CR_E_INVALID for a bad key, CR_E_TOO_LARGE past
 * CR_GGUF_MAX_KV keys, CR_E_NOMEM. */
cr_status_t cr_gguf_writer_add_u8(cr_gguf_writer_t *w, const char *key,
                                  uint8_t v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_i8(cr_gguf_writer_t *w, const char *key,
                                  int8_t v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_u16(cr_gguf_writer_t *w, const char *key,
                                   uint16_t v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_i16(cr_gguf_writer_t *w, const char *key,
                                   int16_t v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_u32(cr_gguf_writer_t *w, const char *key,
                                   uint32_t v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_i32(cr_gguf_writer_t *w, const char *key,
                                   int32_t v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_u64(cr_gguf_writer_t *w, const char *key,
                                   uint64_t v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_i64(cr_gguf_writer_t *w, const char *key,
                                   int64_t v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_f32(cr_gguf_writer_t *w, const char *key,
                                   float v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_f64(cr_gguf_writer_t *w, const char *key,
                                   double v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_bool(cr_gguf_writer_t *w, const char *key,
                                    bool v, cr_err_t *err);

/* A string: NUL-terminated, or len bytes (may hold any bytes). */
cr_status_t cr_gguf_writer_add_str(cr_gguf_writer_t *w, const char *key,
                                   const char *v, cr_err_t *err);
cr_status_t cr_gguf_writer_add_strn(cr_gguf_writer_t *w, const char *key,
                                    const char *v, size_t len, cr_err_t *err);

/* An array of n numbers or bools of elem_type (any scalar type; not STRING
 * or ARRAY), packed in host order as C arrays (uint32_t[], float[], and for
 * BOOL one byte each). CR_E_INVALID for a bad elem_type, CR_E_TOO_LARGE past
 * CR_GGUF_MAX_ARRAY_ELEMS. */
cr_status_t cr_gguf_writer_add_arr(cr_gguf_writer_t *w, const char *key,
                                   cr_gguf_vtype_t elem_type,
                                   const void *elems, uint64_t n,
                                   cr_err_t *err);

/* An array of n NUL-terminated strings, or of n counted strings. */
cr_status_t cr_gguf_writer_add_arr_str(cr_gguf_writer_t *w, const char *key,
                                       const char *const *strs, uint64_t n,
                                       cr_err_t *err);
cr_status_t cr_gguf_writer_add_arr_gstr(cr_gguf_writer_t *w, const char *key,
                                        const cr_gguf_str_t *strs, uint64_t n,
                                        cr_err_t *err);

/* Copies one KV as read from an open file (key, type and value), e.g. to
 * transplant a vocabulary. The KV is copied; the file may be closed after. */
cr_status_t cr_gguf_writer_copy_kv(cr_gguf_writer_t *w, const cr_gguf_kv_t *kv,
                                   cr_err_t *err);

/* Copies key from g; CR_E_NOT_FOUND if g has no such key. */
cr_status_t cr_gguf_writer_copy_key(cr_gguf_writer_t *w, const cr_gguf_t *g,
                                    const char *key, cr_err_t *err);

/* Copies every KV of g whose key starts with prefix ("" for all; e.g.
 * "tokenizer." for a vocabulary). Returns CR_OK even if none matched. */
cr_status_t cr_gguf_writer_copy_prefix(cr_gguf_writer_t *w, const cr_gguf_t *g,
                                       const char *prefix, cr_err_t *err);

/* Removes key if present; true if it was. */
bool cr_gguf_writer_remove(cr_gguf_writer_t *w, const char *key);

/* Number of KVs / tensors added so far. */
size_t cr_gguf_writer_kv_count(const cr_gguf_writer_t *w);
size_t cr_gguf_writer_tensor_count(const cr_gguf_writer_t *w);

/* Sets the data alignment (a power of two, 1..2^30) and records it as the
 * u32 key general.alignment. Without this, or an added general.alignment u32,
 * the alignment is 32 and the key is not written. CR_E_INVALID otherwise. */
cr_status_t cr_gguf_writer_set_alignment(cr_gguf_writer_t *w,
                                         uint32_t alignment, cr_err_t *err);

/* A tensor of n_dims (1..4) dims ne[0..n_dims-1] (ne[0] = row length) of
 * type, whose size_bytes bytes are at data (BORROWED until the last write).
 * Checks like the reader: dims >= 1, type known, ne[0] a whole number of
 * blocks, no overflow, name 1..CR_GGUF_MAX_NAME_BYTES bytes and unique
 * (CR_E_EXISTS). CR_E_INVALID / CR_E_UNSUPPORTED otherwise. size_bytes_out
 * (may be NULL) receives the data size. */
cr_status_t cr_gguf_writer_add_tensor(cr_gguf_writer_t *w, const char *name,
                                      uint32_t n_dims, const uint64_t *ne,
                                      cr_type_t type, const void *data,
                                      uint64_t *size_bytes_out, cr_err_t *err);

/* Same, with data produced by fn(ctx, ...) at write time. */
cr_status_t cr_gguf_writer_add_tensor_fn(cr_gguf_writer_t *w, const char *name,
                                         uint32_t n_dims, const uint64_t *ne,
                                         cr_type_t type, cr_gguf_tensor_fn fn,
                                         void *ctx, uint64_t *size_bytes_out,
                                         cr_err_t *err);

/* Writes the file to path atomically: a temp file beside it, fsync, rename
 * over path, fsync of the folder. On failure path is untouched and the temp
 * file removed. CR_E_IO (with errno text), CR_E_INVALID (bad alignment key),
 * or a tensor callback's status. The writer stays usable. */
cr_status_t cr_gguf_writer_write(cr_gguf_writer_t *w, const char *path,
                                 cr_err_t *err);

/* Writes the file into memory: *out (caller owns; free with free()) of *len
 * bytes. */
cr_status_t cr_gguf_writer_write_memory(cr_gguf_writer_t *w, void **out,
                                        size_t *len, cr_err_t *err);

#endif
