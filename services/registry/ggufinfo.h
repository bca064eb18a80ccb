/* ggufinfo.h: what the registry says about a GGUF file: the config blob
 * fields (family, parameter size, file type), /api/show's model_info and
 * tensors, and the GGUF side of capabilities.
 *
 * Reads through lib/gguf.h only (the file is validated there before any
 * byte is used). Knows nothing of manifests or the store. */
#ifndef REG_GGUFINFO_H
#define REG_GGUFINFO_H

#include "lib/prelude.h"
#include "lib/gguf.h"

#include <jansson.h>

/* Arrays longer than this are emptied in non-verbose model_info. */
#define REG_MODEL_INFO_ARRAY_MAX 5

/* general.parameter_count, else the sum of the tensors' element counts. */
uint64_t reg_gguf_param_count(const cr_gguf_t *g);

/* Ollama's human parameter count: 7.6B, 8B, 137.5M... 260K, 999 (B: one
 * decimal unless whole; M: two decimals unless whole; K: none). Returns
 * buf. */
char *reg_human_number(uint64_t n, char *buf, size_t cap);

/* general.architecture, or "unknown" when absent. Borrowed from g. */
const char *reg_gguf_family(const cr_gguf_t *g);

/* The name of general.file_type ("Q4_K_M"); without that key, the name of
 * the tensor type holding most elements of the 2-D tensors ("F32"); else
 * "unknown". Static string. */
const char *reg_gguf_file_type(const cr_gguf_t *g);

/* general.type ("model", "adapter", "projector"), or "" when absent, into
 * buf. */
void reg_gguf_kind(const cr_gguf_t *g, char *buf, size_t cap);

/* The media type a GGUF file gets as a layer: adapter when general.type is
 * "adapter"; projector when general.type is "projector" or the file has
 * <arch>.vision.block_count but no <arch>.block_count; else model. */
const char *reg_gguf_media_type(const cr_gguf_t *g);

/* /api/show's model_info: every KV as JSON, keys sorted, general.name and
 * tokenizer.chat_template removed, general.parameter_count added if absent;
 * arrays longer than REG_MODEL_INFO_ARRAY_MAX become [] unless verbose.
 * Caller owns (json_decref); NULL if out of memory. */
json_t *reg_gguf_model_info(const cr_gguf_t *g, bool verbose);

/* /api/show's tensors: [{name, type, shape}] in file order. Caller owns. */
json_t *reg_gguf_tensors(const cr_gguf_t *g);

/* True for an embedding model: <arch>.pooling_type is present, or the
 * architecture is BERT-like (bert, nomic-bert, jina-bert-v2, ...). */
bool reg_gguf_is_embedding(const cr_gguf_t *g);

/* True if <arch>.vision.block_count is present. */
bool reg_gguf_has_vision(const cr_gguf_t *g);

#endif
